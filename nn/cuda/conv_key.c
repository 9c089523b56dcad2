/*
 * conv_key.c — the algorithm cache's keys (conv_key.h).
 */
#include "conv_key.h"

#include <string.h>

static int64_t one_if_zero(int64_t v) { return v ? v : 1; }

conv_key conv_key_of(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool deterministic,
                     eng_precision precision)
{
    conv_key k;
    memset(&k, 0, sizeof k); /* padding bytes too: keys compare field by field, but stay clean */
    for (int i = 0; i < 4; i++) {
        k.x[i] = x->dim[i];
        k.w[i] = w->dim[i];
    }
    for (int i = 0; i < 2; i++) {
        k.stride[i] = one_if_zero(d->stride[i]);
        k.pad[i] = d->pad[i];
        k.pad_extra[i] = d->pad_extra[i];
        k.dilation[i] = one_if_zero(d->dilation[i]);
    }
    k.groups = one_if_zero(d->groups);
    k.deterministic = deterministic;
    k.precision = precision;
    return k;
}

bool conv_key_equal(const conv_key *a, const conv_key *b)
{
    for (int i = 0; i < 4; i++)
        if (a->x[i] != b->x[i] || a->w[i] != b->w[i])
            return false;
    for (int i = 0; i < 2; i++)
        if (a->stride[i] != b->stride[i] || a->pad[i] != b->pad[i] || a->dilation[i] != b->dilation[i] ||
            a->pad_extra[i] != b->pad_extra[i])
            return false;
    return a->groups == b->groups && a->deterministic == b->deterministic && a->precision == b->precision;
}

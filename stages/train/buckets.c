/*
 * buckets.c — DDP's gradient buckets (see buckets.h).
 *
 * Planning walks the parameters from the last to the first, as their gradients become ready,
 * and closes a bucket at the first parameter that brings it to its limit, as torch's
 * compute_bucket_assignment_by_size does. Buffers (BN's running statistics) have no gradient
 * and belong to the bucket around them. A backward's calls (params.h: entries [first, end) are
 * final) start every bucket not yet started that lies wholly in that range.
 */
#include "train/buckets.h"

#include "log.h"
#include "util.h"

#include <stdlib.h>

/* Entry i's gradient bytes (0 for a buffer). */
static size_t grad_bytes(const model *m, int i)
{
    const eng_entry *e = model_entry_at(m, i);
    return e->kind == ENG_PARAM ? (size_t)eng_numel(&e->grad.shape) * sizeof(float) : 0;
}

/* The 1-D view of model_grads holding entries [first, end)'s gradients, one after another. */
static eng_tensor range_of(const model *m, int first, int end)
{
    eng_tensor all = model_grads(m), r = all;
    int64_t lo = -1, hi = 0;
    for (int i = first; i < end; i++) {
        const eng_entry *e = model_entry_at(m, i);
        if (e->kind != ENG_PARAM)
            continue;
        int64_t at = (int64_t)((e->grad.offset - all.offset) / sizeof(float));
        if (lo >= 0 && at != hi)
            invariant_failed("buckets: %s's gradient does not follow the one before it", e->name);
        lo = lo < 0 ? at : lo;
        hi = at + eng_numel(&e->grad.shape);
    }
    r.offset = all.offset + (size_t)lo * sizeof(float);
    r.shape = (eng_shape){.ndim = 1, .dim = {hi - lo}};
    return r;
}

static void close_bucket(grad_buckets *g, const model *m, int first, int end)
{
    g->b = xrealloc(g->b, (size_t)(g->n + 1) * sizeof *g->b);
    g->b[g->n++] = (grad_bucket){.first = first, .end = end, .grads = range_of(m, first, end)};
}

void grad_buckets_plan(grad_buckets *g, const model *m, size_t first_bytes, size_t cap_bytes, dist *d,
                       eng_backend *be)
{
    *g = (grad_buckets){.d = d, .be = be};
    int end = model_entry_count(m);
    size_t bytes = 0; /* of the bucket being filled: a bucket holds a gradient, not only buffers */
    for (int i = end - 1; i >= 0; i--) {
        bytes += grad_bytes(m, i);
        if (bytes > 0 && bytes >= (g->n ? cap_bytes : first_bytes)) {
            close_bucket(g, m, i, end);
            end = i, bytes = 0;
        }
    }
    if (bytes > 0)
        close_bucket(g, m, 0, end);
}

void grad_buckets_free(grad_buckets *g)
{
    free(g->b);
    free(g->err);
    *g = (grad_buckets){0};
}

/* Start buckets in order while they lie in entries [first, …). */
static void start_from(grad_buckets *g, int first)
{
    while (g->started < g->n && g->b[g->started].first >= first) {
        if (!g->err)
            dist_average_start(g->d, g->be, &g->b[g->started].grads, &g->err);
        g->started++;
    }
}

static void on_ready(void *ctx, int first) { start_from(ctx, first); }

eng_grads_ready grad_buckets_watch(grad_buckets *g)
{
    g->started = 0;
    free(g->err);
    g->err = NULL;
    return (eng_grads_ready){.ready = on_ready, .ctx = g};
}

int grad_buckets_finish(grad_buckets *g, char **err)
{
    start_from(g, 0);
    g->started = 0;
    if (!g->err)
        dist_join(g->d, g->be, &g->err);
    if (!g->err)
        return 0;
    *err = g->err;
    g->err = NULL;
    return -1;
}

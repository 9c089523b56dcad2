/*
 * momentum.c — a momentum encoder that follows the trained model (momentum.h).
 */
#include "train/momentum.h"

#include "train/inputs.h"
#include "train/loss_internal.h"
#include "util.h"

#include <stdlib.h>

struct momentum_encoder {
    model *m;
    bool following;   /* its values are the model's (first forward) or a checkpoint's */
    bool copy_buffers;
    batch_host host;
};

momentum_encoder *momentum_new(eng_backend *be, const model *m, uint64_t seed, bool copy_buffers, loss_state *s,
                               const char *prefix, char **err)
{
    momentum_encoder *e = xcalloc(1, sizeof *e);
    e->copy_buffers = copy_buffers;
    if (!(e->m = model_new(be, model_opts(m), seed, err))) {
        free(e);
        return NULL;
    }
    for (int i = 0; i < model_entry_count(e->m); i++) {
        const eng_entry *from = model_entry_at(e->m, i);
        char *name = xasprintf("%s%s", prefix, from->name);
        loss_state_add_entry(s, name, ENG_BUFFER)->value = from->value;
        free(name);
    }
    return e;
}

void momentum_free(eng_backend *be, momentum_encoder *e)
{
    if (!e)
        return;
    model_free(be, e->m);
    batch_host_free(&e->host);
    free(e);
}

model *momentum_model(momentum_encoder *e) { return e->m; }

void momentum_follow(eng_backend *be, momentum_encoder *e, const model *m, double momentum)
{
    eng_tensor q = model_params(m), k = model_params(e->m);
    if (e->following)
        eng_ema(be, momentum, &q, &k);
    else
        eng_copy(be, &q, &k);
    e->following = true;
    eng_tensor from = model_buffers(m), to = model_buffers(e->m); /* the running statistics */
    if (e->copy_buffers && from.base)
        eng_copy(be, &from, &to);
}

void momentum_loaded(momentum_encoder *e) { e->following = true; }

int momentum_load(eng_backend *be, momentum_encoder *e, const rec_view *batch, const int *idx,
                  const eng_shape *shapes, int n, char **err)
{
    if (model_plan(be, e->m, shapes, n, err) != 0 || batch_upload(be, e->m, &e->host, batch, idx, n, err) != 0)
        return -1;
    return 0;
}

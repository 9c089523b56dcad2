/*
 * momentum.c — a momentum encoder that follows the trained model (momentum.h).
 */
#include "train/momentum.h"

#include "train/dist.h"
#include "train/inputs.h"
#include "train/loss_internal.h"
#include "util.h"

#include <stdlib.h>

struct momentum_encoder {
    model *m;
    bool following;   /* its values are the model's (first forward) or a checkpoint's */
    bool copy_buffers;
    batch_host host;
    dist *world;          /* set by momentum_join_world: several trainers */
    dist_group bn_group;  /* the batch norms' reductions over all of them */
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
    if (e->world)
        dist_group_free(&e->bn_group);
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

void momentum_join_world(momentum_encoder *e, dist *world)
{
    if (dist_world(world) <= 1)
        return;
    e->world = world;
    dist_group_init(&e->bn_group, world, dist_world(world));
    model_set_batchnorm_reducer(e->m, &e->bn_group.reducer);
}

int momentum_world_check(momentum_encoder *e, char **err) { return e->world ? dist_group_check(&e->bn_group, err) : 0; }

int momentum_load(eng_backend *be, momentum_encoder *e, const rec_view *batch, const int *idx,
                  const eng_shape *shapes, int n, char **err)
{
    if (model_plan(be, e->m, shapes, n, err) != 0 || batch_upload(be, e->m, &e->host, batch, idx, n, err) != 0)
        return -1;
    eng_tensor buffers = model_buffers(e->m);
    return e->world && buffers.base ? dist_broadcast(e->world, be, &buffers, err) : 0;
}

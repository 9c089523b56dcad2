/*
 * momentum.h — a momentum encoder: a second model that follows the trained one (MoCo's key
 * encoder, SwAV's momentum network), for the losses that keep one in their state.
 *
 * It is built fresh from the model's options (its running statistics start at 0 and 1, as
 * VISSL's build_model leaves them). At the first forward its parameters become the model's
 * (and, with copy_buffers, its running statistics); before every later one each parameter
 * becomes k·m + q·(1 − m) (eng_ema), the buffers copied again with copy_buffers (SwAV's
 * momentum hook copies `running_*`; MoCo's copies none). It takes no gradient. A checkpoint
 * holds it under "<prefix><the model's names>"; once one is loaded it follows from there.
 *
 * Across trainers (SwAV's network, which VISSL converts to SyncBatchNorm and wraps in DDP
 * whatever the config says), momentum_join_world makes its batch norms train over every rank's
 * batch and its buffers rank 0's before each forward (DDP's broadcast_buffers). MoCo's encoder
 * stays apart: VISSL builds it plain, and MoCo shuffles the batch instead.
 */
#ifndef SELFSUP_TRAIN_MOMENTUM_H
#define SELFSUP_TRAIN_MOMENTUM_H

#include "model.h"
#include "record.h"

typedef struct momentum_encoder momentum_encoder;
struct loss_state;
struct dist;

/* A fresh encoder of m's options, its tensors listed in s's entries as views named
 * "<prefix><name>". NULL with *err. */
momentum_encoder *momentum_new(eng_backend *be, const model *m, uint64_t seed, bool copy_buffers,
                               struct loss_state *s, const char *prefix, char **err);
void momentum_free(eng_backend *be, momentum_encoder *e);
model *momentum_model(momentum_encoder *e);

/* Train the batch norms over the whole world and take rank 0's buffers at each forward (see
 * above); nothing with one trainer (world NULL or of 1). */
void momentum_join_world(momentum_encoder *e, struct dist *world);
/* 0, or -1 with *err: what failed in the world's reductions of the last forward (the batch
 * norms' sums are reduced inside the forward, which cannot fail there). */
int momentum_world_check(momentum_encoder *e, char **err);

/* Before a forward: become the model (the first time) or move towards it by `momentum`. */
void momentum_follow(eng_backend *be, momentum_encoder *e, const model *m, double momentum);
/* Its values came from a checkpoint: the next follow moves from them. */
void momentum_loaded(momentum_encoder *e);

/* The batch's tensors idx[0..n) of these shapes into the encoder's inputs (planned for them, as
 * the model takes a crop list), and rank 0's buffers after momentum_join_world; then
 * model_forward(be, momentum_model(e), train) runs it. 0, or -1 with *err. */
int momentum_load(eng_backend *be, momentum_encoder *e, const rec_view *batch, const int *idx,
                  const eng_shape *shapes, int n, char **err);

#endif

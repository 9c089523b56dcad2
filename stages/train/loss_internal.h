/*
 * loss_internal.h — what loss.c and loss_swav.c share: a planned loss and the run's loss
 * state. Nothing outside stages/train/loss*.c reads these.
 */
#ifndef SELFSUP_TRAIN_LOSS_INTERNAL_H
#define SELFSUP_TRAIN_LOSS_INTERNAL_H

#include "train/dist.h"
#include "train/loss.h"

#define LOSS_MAX_OUTPUTS 16
#define LOSS_MAX_STATE (LOSS_MAX_PROTOTYPES + 1)

struct loss_state {
    loss_options o;
    dist *world;                         /* the run's trainers (dist.h; NULL: this one alone) */
    int64_t iterations;                  /* the loss's forwards so far (SwAV's num_iteration) */
    eng_entry entries[LOSS_MAX_STATE];   /* SwAV: local_queue<h> (A × L × K_h), local_emb_queue (A × L × D) */
    int nentries;
};

struct loss {
    loss_options o;
    loss_state *st;
    int n;
    eng_shape shape[LOSS_MAX_OUTPUTS];
    eng_tensor dout[LOSS_MAX_OUTPUTS];
    eng_tensor normed[LOSS_MAX_OUTPUTS], dnormed[LOSS_MAX_OUTPUTS]; /* normalize_output */
    eng_tensor z, dz, sim, dsim, pos, neg;                          /* SimCLR */
    eng_tensor zall, dzall; /* SimCLR across trainers: every rank's z (gather_from_all), its gradient */
    int64_t per_crop;                                               /* SwAV: images per crop */
    eng_tensor codes[LOSS_MAX_PROTOTYPES];                          /* SwAV: per_crop × K_h */
};

/* loss_swav.c */
bool swav_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err);
void swav_state_init(eng_backend *be, loss_state *s, uint64_t seed);
int swav_plan(eng_backend *be, loss *l, char **err);
int swav_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, double *value, char **err);
int swav_on_forward(eng_backend *be, loss_state *s, struct model *m, char **err);
int swav_on_update(eng_backend *be, loss_state *s, struct model *m, char **err);

#endif

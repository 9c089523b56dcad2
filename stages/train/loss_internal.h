/*
 * loss_internal.h — what loss.c and the method files (loss_swav.c, loss_moco.c, loss_nce.c,
 * loss_dc.c) share: a planned loss and the
 * run's loss state. Nothing outside stages/train/loss*.c reads these.
 */
#ifndef SELFSUP_TRAIN_LOSS_INTERNAL_H
#define SELFSUP_TRAIN_LOSS_INTERNAL_H

#include "train/dist.h"
#include "train/loss.h"

#define LOSS_MAX_OUTPUTS 16

struct moco_state;
struct nce_host;
struct momentum_encoder;
struct dc_state;
struct dc_plan;

struct loss_state {
    loss_options o;
    uint64_t seed;       /* SEED_VALUE: the state's random starts (queues, MoCo's encoder) */
    dist *world;         /* the run's trainers (dist.h; NULL: this one alone) */
    int64_t iterations;  /* the loss's forwards so far (SwAV's num_iteration) */
    double z;            /* NCE's normalisation constant Z (< 0 until the first batch sets it) */
    /* The checkpoint's tensors. SwAV: local_queue<h> (A × L × K_h), local_emb_queue (A × L × D),
     * each owning its memory; MoCo: views of moco_state's. Every name is the state's. */
    eng_entry *entries;
    int nentries, cap;
    int nowned; /* entries [0, nowned) own their tensors; the rest view what the state holds */
    int nshared; /* the last nshared entries are every rank's alike (DeepClusterV2's clusters) */
    struct moco_state *moco;
    struct momentum_encoder *momentum; /* MoCo's key encoder, swav_momentum_loss's network */
    struct dc_state *dc;               /* DeepClusterV2's memory and clusters */
};

/* num_train_samples of a memory-bank loss (LOSS.<name>.num_train_samples at `node`, `key` its
 * name): the config's value, or with −1 the DATA.TRAIN set's size; never less than the set,
 * and not more than `most` (0: no bound). Into *out, or false with err. */
bool loss_train_samples(const cfg_node *config, const cfg_node *node, const char *key, const char *what,
                        int64_t most, int64_t *out, cfg_err *err);
/* A new entry at the end of s->entries, named `name` (copied), its value still to be set. */
eng_entry *loss_state_add_entry(loss_state *s, const char *name, eng_entry_kind kind);
/* Each of the rows (rows × d, host floats) divided by its L2 norm (at least 1e-12), summed in
 * double: the unit keys and memory rows the states start from (MoCo's queue, NPID's bank). */
void loss_normalize_rows(float *v, int64_t rows, int64_t d);
/* "rank<r>." on rank r > 0 of several trainers, else "": where rank 0's checkpoint puts the
 * rank's own state. */
void loss_state_rank_prefix(const loss_state *s, char out[24]);

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
    struct nce_host *nce;                                           /* NCE: its host buffers */
    struct dc_plan *dc;                                             /* DeepClusterV2's buffers */
};

/* loss_swav.c */
bool swav_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err);
void swav_state_init(eng_backend *be, loss_state *s, uint64_t seed);
int swav_plan(eng_backend *be, loss *l, char **err);
int swav_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, double *value, char **err);
int swav_on_forward(eng_backend *be, loss_state *s, struct model *m, char **err);
int swav_on_update(eng_backend *be, loss_state *s, struct model *m, char **err);
int swav_momentum_attach(eng_backend *be, loss_state *s, const struct model *m, char **err);
int swav_momentum_on_forward(eng_backend *be, loss_state *s, struct model *m, const rec_view *batch, char **err);

/* loss_moco.c */
bool moco_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err);
int moco_attach(eng_backend *be, loss_state *s, const struct model *m, char **err);
int moco_loaded(eng_backend *be, loss_state *s, char **err);
void moco_state_free(eng_backend *be, loss_state *s);
int moco_plan(eng_backend *be, loss *l, char **err);
int moco_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, double *value, char **err);
int moco_on_forward(eng_backend *be, loss_state *s, struct model *m, const rec_view *batch, char **err);

/* loss_nce.c */
bool nce_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err);
void nce_state_init(eng_backend *be, loss_state *s);
int nce_loaded(eng_backend *be, loss_state *s, char **err);
int nce_plan(eng_backend *be, loss *l, char **err);
void nce_free(eng_backend *be, loss *l);
int nce_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, const loss_batch *b, double *value,
                char **err);

/* loss_dc.c */
bool dc_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err);
void dc_state_init(eng_backend *be, loss_state *s);
void dc_state_free(loss_state *s);
int dc_loaded(eng_backend *be, loss_state *s, char **err);
void dc_resume_at(loss_state *s, int64_t batch_in_epoch);
int dc_on_phase_start(eng_backend *be, loss_state *s, int64_t epoch, char **err);
int dc_memory_crops(const loss_state *s, const int **crops);
int dc_memory_fill(eng_backend *be, loss_state *s, int bank, const eng_tensor *out, char **err);
void dc_memory_advance(eng_backend *be, loss_state *s, const int64_t *samples, int64_t b);
int dc_plan(eng_backend *be, loss *l, char **err);
void dc_free(eng_backend *be, loss *l);
int dc_compute(eng_backend *be, loss *l, const eng_tensor *out, const loss_batch *b, double *value, char **err);

#endif

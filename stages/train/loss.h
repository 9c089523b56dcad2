/*
 * loss.h — VISSL's losses for the trainer: value and the gradient of every model output, on
 * the model engine (vissl/losses/).
 *
 * Losses now: CrossEntropyLoss (ClassyVision's, ignore_index −1), cross_entropy_multiple_
 * output_single_target, bce_logits_multiple_output_single_target, simclr_info_nce_loss,
 * multicrop_simclr_info_nce_loss, swav_loss, swav_momentum_loss, moco_loss,
 * nce_loss_with_memory (NPID, NPID++, PIRL) and deepclusterv2_loss, each exactly VISSL 0.1.5's
 * forward with its true gradient.
 *
 * A loss is planned once for the model's output shapes (loss_new: its masks and buffers), then
 * loss_compute runs per step and leaves d(loss)/d(output k) in loss_grad(l, k), the seed for
 * model_backward. What a method keeps from step to step lives in a loss_state, one per run:
 * the train and test plans share it as VISSL's one loss object is shared, a checkpoint saves
 * its tensors under VISSL's state-dict names (SwAV: the embedding queue, the queue's scores
 * and the iteration count; MoCo: the key queue, its pointer and the momentum encoder; NCE: the
 * memory bank and its params, Z among them; DeepClusterV2: the memory banks, the centroids and
 * the assignments), and the
 * method's own hooks act on it at VISSL's moments (SwAVUpdateQueueScoresHook and MoCoHook after
 * the forward, NormalizePrototypesHook after the update).
 * The batch carries labels AND sample indices (memory banks: NPID, PIRL) for the methods to come.
 *
 * Several trainers (dist.h): the loss state holds the run's world. SimCLR gathers every rank's
 * embeddings (VISSL's gather_from_all, with its backward); SwAV's Sinkhorn sums over every
 * rank's scores; multi-crop SimCLR needs no gather (its masks keep the negatives local). The
 * config's buffer_params.world_size must be the world's size.
 */
#ifndef SELFSUP_TRAIN_LOSS_H
#define SELFSUP_TRAIN_LOSS_H

#include "config.h"
#include "nn.h"
#include "params.h"
#include "record.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    LOSS_CROSS_ENTROPY,       /* CrossEntropyLoss */
    LOSS_CE_MULTI_OUTPUT,     /* cross_entropy_multiple_output_single_target */
    LOSS_BCE_MULTI_OUTPUT,    /* bce_logits_multiple_output_single_target */
    LOSS_SIMCLR,              /* simclr_info_nce_loss */
    LOSS_MULTICROP_SIMCLR,    /* multicrop_simclr_info_nce_loss */
    LOSS_SWAV,                /* swav_loss */
    LOSS_MOCO,                /* moco_loss */
    LOSS_NCE,                 /* nce_loss_with_memory */
    LOSS_SWAV_MOMENTUM,       /* swav_momentum_loss */
    LOSS_DEEPCLUSTER_V2,      /* deepclusterv2_loss */
} loss_name;

#define LOSS_MAX_CLASS_WEIGHTS 4096
#define LOSS_MAX_CROPS 32
#define LOSS_MAX_PROTOTYPES 16 /* heads.h's HEAD_MAX_PROTOTYPES */

/* LOSS.swav_loss (vissl/losses/swav_loss.py), after VISSL's inference (num_crops, num_prototypes,
 * embedding_dim, local_queue_length). use_double_precision is read and needs nothing: the
 * codes are always computed in double, with the max subtracted. */
typedef struct {
    double epsilon;
    int num_iters;
    int crops_for_assign[LOSS_MAX_CROPS], ncrops_for_assign;
    int64_t num_prototypes[LOSS_MAX_PROTOTYPES];
    int nheads;
    int64_t queue_length; /* local_queue_length: rows per assignment crop (0: no queue) */
    int64_t queue_start_iter;
    int64_t temp_hard_assignment_iters;
    bool normalize_last_layer;
    double momentum;                       /* swav_momentum_loss: the encoder's */
    int64_t momentum_eval_mode_iter_start; /* swav_momentum_loss: the encoder in eval mode from here */
} swav_options;

/* LOSS.moco_loss (vissl/losses/moco_loss.py; embedding_dim and temperature are loss_options'),
 * and MoCoHook's shuffle_batch (not MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN). */
typedef struct {
    int64_t queue_size;
    double momentum;
    bool shuffle_batch;
} moco_options;

/* LOSS.nce_loss_with_memory (vissl/losses/nce_loss.py; temperature and embedding_dim, which is
 * memory_params.embedding_dim, are loss_options'). */
#define LOSS_MAX_NCE_OUTPUTS 8
typedef struct {
    bool cross_entropy;        /* loss_type "cross_entropy" (InfoNCE) instead of "nce" */
    bool norm_embedding;
    double norm_constant;      /* Z; < 0: from the first batch */
    int64_t update_mem_with_emb_index;
    double loss_weights[LOSS_MAX_NCE_OUTPUTS];
    int nweights;
    int64_t num_negatives;
    int64_t memory_size;       /* num_train_samples: the training set's size */
    double momentum;
    bool norm_init, update_mem_on_forward;
    int64_t ignore_index;
} nce_options;

/* LOSS.deepclusterv2_loss (vissl/losses/deepclusterv2_loss.py; temperature and embedding_dim,
 * which is memory_params.embedding_dim, are loss_options'), after VISSL's inference (num_crops,
 * BATCHSIZE_PER_REPLICA, DROP_LAST, num_train_samples). */
typedef struct {
    int64_t num_clusters[LOSS_MAX_PROTOTYPES]; /* K per head */
    int nheads;
    int kmeans_iters;
    int crops_for_mb[LOSS_MAX_CROPS]; /* memory_params.crops_for_mb: one bank per crop */
    int nbanks;
    int num_crops;
    int64_t batch; /* BATCHSIZE_PER_REPLICA */
    bool drop_last;
    int64_t num_train_samples;
} dc_options;

typedef struct {
    loss_name name;
    double temperature;           /* SimCLR losses (0.1); cross-entropy multi-output (1.0) */
    int64_t embedding_dim;        /* SimCLR losses: buffer_params.embedding_dim, checked */
    int64_t effective_batch_size; /* SimCLR: 2·B·W; multi-crop: B·W (checked against the batch) */
    int world_size;               /* buffer_params.world_size: the trainers' world (checked at loss_new) */
    int num_crops;                /* multi-crop SimCLR */
    int64_t ignore_index;         /* cross-entropy losses: −1 */
    bool normalize_output;        /* multi-output losses: L2-normalise each output first */
    float weight[LOSS_MAX_CLASS_WEIGHTS]; /* cross-entropy multi-output class weights */
    int nweight;                  /* 0: no weights (null) */
    swav_options swav;            /* swav_loss (with temperature, embedding_dim, num_crops) */
    moco_options moco;            /* moco_loss (with temperature, embedding_dim) */
    nce_options nce;              /* nce_loss_with_memory (with temperature, embedding_dim) */
    dc_options dc;                /* deepclusterv2_loss (with temperature, embedding_dim) */
} loss_options;

/* LOSS of a composed config's `config` map (LOSS.name and LOSS.<name>). Refuses, with its line, a
 * loss this trainer does not run yet, and a method whose data does not fit it (MoCo: a collator
 * other than moco_collator, a queue that is not a multiple of the global batch). */
bool loss_options_from_config(const cfg_node *config, loss_options *out, cfg_err *err);
const char *loss_display_name(loss_name name);

/* What a step gives the loss besides the model outputs. */
typedef struct {
    int64_t batch;               /* images in the batch (B) */
    const int64_t *label;        /* label.0: batch values (or batch × label_cols) */
    int label_cols;              /* 1, or the columns of a 2-D label (BCE's multi-label targets) */
    const int64_t *sample_index; /* data_idx.0, one per image (memory banks); NULL when absent */
} loss_batch;

typedef struct loss loss;
typedef struct loss_state loss_state;
struct model;

/* ---- state and hooks ------------------------------------------------------------------------ */

/* The run's state for the loss of these options (empty for a stateless loss), computing over
 * the ranks of `world` (NULL: one trainer; its world is read when a loss is planned). SwAV
 * with a queue starts it as VISSL's initialize_queue does: scores U(−1, 1), embeddings
 * U(−s, s) with s = 1/√(D/3), from the counter-based generator on `seed` (each rank its own
 * queue, as VISSL's are local). */
struct dist;
loss_state *loss_state_new(eng_backend *be, const loss_options *o, uint64_t seed, struct dist *world);
void loss_state_free(eng_backend *be, loss_state *s);
/* The state's part that depends on the model, once it is built and before a checkpoint is
 * loaded into the state (MoCo: the momentum encoder, a second model of m's options whose
 * parameters become m's at the first forward). 0, or -1 with *err; nothing for the others. */
int loss_state_attach(eng_backend *be, loss_state *s, const struct model *m, char **err);
/* After a checkpoint was loaded into the state's tensors: what the state keeps on the host
 * follows them (MoCo's queue pointer; its encoder then follows the model from the loaded
 * values on). 0, or -1 with *err for a checkpoint value the state cannot take. */
int loss_state_loaded(eng_backend *be, loss_state *s, char **err);

/* Its tensors for a checkpoint, named loss.<VISSL's state-dict name> (n, possibly 0; on rank
 * r > 0 of several trainers rank<r>.loss.<name>: rank 0's checkpoint holds every rank's), and the
 * loss's own forward count (SwAV's num_iteration: it counts test forwards too, as VISSL's; 0 for
 * the others). */
int loss_state_entries(const loss_state *s, const eng_entry **entries);
/* The first of those that are this rank's own (all of them, but DeepClusterV2's centroids and
 * assignments, which are every rank's alike and go into the checkpoint once, as rank 0's). */
int loss_state_rank_entries(const loss_state *s, const eng_entry **entries);
int64_t loss_state_iterations(const loss_state *s);
void loss_state_set_iterations(loss_state *s, int64_t n);

/* The loss's hooks. After every forward (train and test), before the loss: SwAV's queue
 * scores from the current prototypes, once the queue is on; MoCo's encoder follows the model
 * and computes the keys of the batch's data_momentum view. After every optimizer update:
 * SwAV's prototypes L2-normalised per row (normalize_last_layer). -1 with *err when the model
 * or the batch lacks what the hook needs. */
int loss_on_forward(eng_backend *be, loss_state *s, struct model *m, const rec_view *batch, char **err);
int loss_on_update(eng_backend *be, loss_state *s, struct model *m, char **err);

/* DeepClusterV2's hooks. ClusterMemoryHook at the start of every training epoch: k-means of
 * the memory banks into new centroids and assignments (nothing for the other losses). A run
 * resumed inside an epoch instead goes on from the checkpoint's: loss_state_resume_at gives
 * the batch it resumes at (where the memory's next rows go). 0, or -1 with *err. */
int loss_on_phase_start(eng_backend *be, loss_state *s, int64_t epoch, char **err);
void loss_state_resume_at(loss_state *s, int64_t batch_in_epoch);
/* InitMemoryHook: the crops whose embeddings fill the memory banks before the first epoch of a
 * fresh run (how many; 0: the loss keeps no such memory). The trainer runs the model on each
 * crop of a batch alone (training mode, no backward) and hands its output here
 * (loss_memory_fill, bank i for crops[i]), then the batch's b sample indices (data_idx.0's
 * first b) to loss_memory_advance. -1 with *err when the rows do not fit the memory or the
 * output is not the embedding's width. */
int loss_memory_crops(const loss_state *s, const int **crops);
int loss_memory_fill(eng_backend *be, loss_state *s, int bank, const eng_tensor *out, char **err);
void loss_memory_advance(eng_backend *be, loss_state *s, const int64_t *samples, int64_t b);

/* ---- planning and computing ----------------------------------------------------------------- */

/* Plan for the model's n outputs of these shapes (model_output order), on the run's state.
 * NULL with *err when they do not fit the loss (width, count, crops). */
loss *loss_new(eng_backend *be, const loss_options *o, loss_state *st, const eng_shape *outputs, int n, char **err);
void loss_free(eng_backend *be, loss *l);

/* The loss of one step; afterwards loss_grad(l, k) holds d(loss)/d(outputs[k]). Returns NaN
 * (and leaves the gradients unspecified) where VISSL's would be NaN: the trainer's NaN check
 * takes it from there. -1 with *err for a batch the loss cannot take (labels out of range). */
int loss_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, const loss_batch *b, double *value,
                 char **err);
const eng_tensor *loss_grad(const loss *l, int k);

#endif

/*
 * loss.h — VISSL's losses for the trainer: value and the gradient of every model output, on
 * the model engine (spec part 1 §5, part 2 §1).
 *
 * Losses now: CrossEntropyLoss (ClassyVision's, ignore_index −1), cross_entropy_multiple_
 * output_single_target, bce_logits_multiple_output_single_target, simclr_info_nce_loss and
 * multicrop_simclr_info_nce_loss, each exactly VISSL 0.1.5's forward with its true gradient.
 *
 * A loss is planned once for the model's output shapes (loss_new: its masks and buffers), then
 * loss_compute runs per step and leaves d(loss)/d(output k) in loss_grad(l, k), the seed for
 * model_backward. What the methods still to come need is already in the interface: the batch
 * carries labels AND sample indices (memory banks: NPID, PIRL), several inputs can be read
 * (patches, data_momentum), and a loss may own state a checkpoint keeps (queues, memory banks,
 * centroids: loss_state) — none of the losses here has any, which loss_state says.
 *
 * Distributed semantics go through the world size: these losses are written for W = 1 today
 * (the config's world size is checked); the all-gather joins the collective interface later.
 */
#ifndef SELFSUP_TRAIN_LOSS_H
#define SELFSUP_TRAIN_LOSS_H

#include "config.h"
#include "nn.h"
#include "params.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    LOSS_CROSS_ENTROPY,       /* CrossEntropyLoss */
    LOSS_CE_MULTI_OUTPUT,     /* cross_entropy_multiple_output_single_target */
    LOSS_BCE_MULTI_OUTPUT,    /* bce_logits_multiple_output_single_target */
    LOSS_SIMCLR,              /* simclr_info_nce_loss */
    LOSS_MULTICROP_SIMCLR,    /* multicrop_simclr_info_nce_loss */
} loss_name;

#define LOSS_MAX_CLASS_WEIGHTS 4096

typedef struct {
    loss_name name;
    double temperature;           /* SimCLR losses (0.1); cross-entropy multi-output (1.0) */
    int64_t embedding_dim;        /* SimCLR losses: buffer_params.embedding_dim, checked */
    int64_t effective_batch_size; /* SimCLR: 2·B·W; multi-crop: B·W (checked against the batch) */
    int world_size;               /* buffer_params.world_size: 1 on this trainer */
    int num_crops;                /* multi-crop SimCLR */
    int64_t ignore_index;         /* cross-entropy losses: −1 */
    bool normalize_output;        /* multi-output losses: L2-normalise each output first */
    float weight[LOSS_MAX_CLASS_WEIGHTS]; /* cross-entropy multi-output class weights */
    int nweight;                  /* 0: no weights (null) */
} loss_options;

/* LOSS of a composed config's `config` map (LOSS.name and LOSS.<name>). Refuses, with its line, a
 * loss this trainer does not run yet and a world size above 1. */
bool loss_options_from_config(const cfg_node *config, loss_options *out, cfg_err *err);
const char *loss_display_name(loss_name name);

/* What a step gives the loss besides the model outputs. */
typedef struct {
    int64_t batch;               /* images in the batch (B) */
    const int64_t *label;        /* label.0: batch values (or batch × label_cols) */
    int label_cols;              /* 1, or the columns of a 2-D label (BCE's multi-label targets) */
    const int64_t *sample_index; /* data_idx (memory-bank losses); may be NULL here */
} loss_batch;

typedef struct loss loss;

/* Plan for the model's n outputs of these shapes (model_output order). NULL with *err when
 * they do not fit the loss (width, count, crops). */
loss *loss_new(eng_backend *be, const loss_options *o, const eng_shape *outputs, int n, char **err);
void loss_free(eng_backend *be, loss *l);

/* The loss of one step; afterwards loss_grad(l, k) holds d(loss)/d(outputs[k]). Returns NaN
 * (and leaves the gradients unspecified) where VISSL's would be NaN: the trainer's NaN check
 * takes it from there. -1 with *err for a batch the loss cannot take (labels out of range). */
int loss_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, const loss_batch *b, double *value,
                 char **err);
const eng_tensor *loss_grad(const loss *l, int k);

/* The loss's own state for checkpoints (none of today's losses has any: returns 0). */
int loss_state(const loss *l, const eng_entry **entries);

#endif

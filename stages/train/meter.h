/*
 * meter.h — VISSL's meters for the trainer (vissl/meters/), accumulated over a
 * phase, one per model output against the single target:
 *
 * accuracy_list_meter: top-k accuracy. A sample counts as correct at k when fewer than k
 * classes score strictly higher than its target (torch.topk's set, up to ties). The value is
 * VISSL's dict {"top_1": {"0": 100·acc, …}, "top_5": {…}} with acc rounded to 6 decimals,
 * keyed by meter_names when given, else the output's index.
 *
 * mean_ap_list_meter: multi-label mean AP. The target is N × num_classes of 1 (positive), 0
 * (negative) and -1 (ignored); the scores are sigmoid(output) in float32 as torch makes them.
 * Per class, VISSL's VOC AP (ap.h), -1 for a class with no positive; mAP is the mean over the
 * others. The value is {"mAP": {"0": 100·mAP rounded as above}, "AP": {"0": [AP per class]}}.
 *
 * mean_ap_meter: VISSL 0.1.5's single-output MeanAPMeter (reported as "mean_ap_manual_meter",
 * its name property). The same AP per class, on the model's raw outputs (no sigmoid: the list
 * meter applies it before calling this one), targets only 1, 0 or -1 (it asserts so); the value
 * is {"mAP": the mean as a fraction, unrounded, "AP": [AP per class]}, the mean null when no
 * class has a positive (torch's mean of nothing is NaN, which JSON cannot hold).
 */
#ifndef SELFSUP_TRAIN_METER_H
#define SELFSUP_TRAIN_METER_H

#include "config.h"
#include "nn.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define METER_MAX_TOPK 8
#define METER_MAX_OUTPUTS 16

struct dist; /* train/dist.h */

typedef enum { METER_ACCURACY, METER_MEAN_AP, METER_MEAN_AP_ONE } meter_kind;

typedef struct {
    meter_kind kind;
    const char *name;               /* "accuracy_list_meter", "mean_ap_list_meter", "mean_ap_manual_meter" */
    int topk[METER_MAX_TOPK];
    int ntopk;
    int num_meters;                 /* outputs measured (one meter per output) */
    const char *names[METER_MAX_OUTPUTS]; /* meter_names, or NULL: the index */
    int64_t correct[METER_MAX_OUTPUTS][METER_MAX_TOPK];
    int64_t total[METER_MAX_OUTPUTS];
    /* mean AP: every row of the phase (allocated on the first update; meter_free) */
    int num_classes;
    float *scores[METER_MAX_OUTPUTS]; /* rows × num_classes sigmoids (mean_ap_meter: outputs) */
    int8_t *targets;                  /* rows × num_classes */
    int64_t rows, cap;
} acc_meter;

/* METERS of a composed config's `config` map: true with *on set when a meter is named (and
 * enable_training_meter), false with err for a meter this trainer lacks. */
bool meter_from_config(const cfg_node *config, acc_meter *m, bool *on, cfg_err *err);
/* Add a batch: outputs[k] is N × C; label holds N targets (label_cols 1) for the accuracy,
 * N × num_classes for mean AP. 0, or -1 with *err when the batch does not fit the meter. */
int meter_update(eng_backend *be, acc_meter *m, const eng_tensor *const *outputs, int n, const int64_t *label,
                 int64_t label_rows, int label_cols, char **err);
/* The phase's state over the ranks, as VISSL's meters sync it: the accuracy's counts summed,
 * mean AP's rows replaced by the world's, every rank's in rank order (MeanAPListMeter gathers
 * its scores and targets from all processes before computing AP). One trainer: nothing.
 * 0, or -1 with *err (a collective that failed). */
int meter_reduce(acc_meter *m, struct dist *d, char **err);
/* The phase's value as VISSL's dict (a new reference), then counts back to zero. */
json_t *meter_value(const acc_meter *m);
void meter_reset(acc_meter *m);
void meter_free(acc_meter *m);

#endif

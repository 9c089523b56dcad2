/*
 * meter.h — VISSL's accuracy_list_meter for the trainer (spec part 1 §6, part 2 §2): top-k
 * accuracy of each model output against the single target, accumulated over a phase.
 *
 * A sample counts as correct at k when fewer than k classes score strictly higher than its
 * target (torch.topk's set, up to ties). The value is VISSL's dict
 * {"top_1": {"0": 100·acc, …}, "top_5": {…}} with acc rounded to 6 decimals, keyed by
 * meter_names when given, else the output's index.
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

typedef struct {
    int topk[METER_MAX_TOPK];
    int ntopk;
    int num_meters;                 /* outputs measured (one meter per output) */
    const char *names[METER_MAX_OUTPUTS]; /* meter_names, or NULL: the index */
    int64_t correct[METER_MAX_OUTPUTS][METER_MAX_TOPK];
    int64_t total[METER_MAX_OUTPUTS];
} acc_meter;

/* METERS of a composed config's `config` map: true with *on set when accuracy_list_meter is
 * the meter (and enable_training_meter), false with err for a meter this trainer lacks. */
bool meter_from_config(const cfg_node *config, acc_meter *m, bool *on, cfg_err *err);
/* Add a batch: outputs[k] is N × C, label holds N targets. */
void meter_update(eng_backend *be, acc_meter *m, const eng_tensor *const *outputs, int n, const int64_t *label);
/* The phase's value as VISSL's dict (a new reference), then counts back to zero. */
json_t *meter_value(const acc_meter *m);
void meter_reset(acc_meter *m);

#endif

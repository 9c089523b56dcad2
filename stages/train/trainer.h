/*
 * trainer.h — VISSL's training task on the model engine: what selfsup-train runs per batch.
 *
 * trainer_new builds, from the composed config, everything a run needs before the first
 * batch arrives (so a broken config stops the run before anything moves): the backend, the
 * model (PyTorch's default init from SEED_VALUE, then MODEL.WEIGHTS_INIT), the loss, the
 * optimizer with VISSL's parameter groups, the lr and lr_head schedules, and the number of
 * batches per epoch (from the DATA.TRAIN dataset, as the decode stage will read it).
 *
 * trainer_step is VISSL's standard_train_step on one batch record (sample.h):
 *   inputs    data.0 (one tensor) or data.0.0, data.0.1, … (one per crop, as the multicrop
 *             collator writes them; the model runs consecutive crops of one size together), uint8 N×H×W×3 with the `normalize` rows the
 *             augment stage left to the trainer (normalised here, in float32, torchvision's
 *             arithmetic), or float32 N×3×H×W;
 *   target    label.0, int64 [N] or [N, M];
 *   then      forward (train mode) → iteration += 1 → loss → the NaN check (a non-finite loss
 *             stops the run with the iteration named) → zero_grad → backward → optimizer step
 *             at where = (batches done) / (epochs × batches per epoch), the schedules read at
 *             `where` (or at the epoch start for update_interval epoch) → a log line every
 *             LOG_FREQUENCY iterations (VISSL's LogLossLrEtaHook: lr, loss, batch time, ETA),
 *             also appended to CHECKPOINT.DIR/stdout.json.
 * An epoch's end appends a metrics.json line ({iteration, phase_idx, train_phase_idx} and
 * train_<meter> when the meter runs in training) and checkpoints when phase_idx is a multiple
 * of CHECKPOINT_FREQUENCY, and at the last epoch (phase_idx counts test phases too, as
 * VISSL's does: phases.h). With TEST_MODEL, a test phase then follows where phases.h says:
 * test_steps batches from the test input, the model in eval mode, the loss and the meter
 * (test_<meter>) but no update, and a metrics.json line of its own. TEST_ONLY: every batch
 * of the (only) input is a test batch, a phase per epoch, nothing trained or written but
 * metrics.json. Every
 * CHECKPOINT_ITER_FREQUENCY iterations (when > 0) and a stop mid-epoch checkpoint the iteration (checkpoint.h: model, optimizer state and where training
 * stands, in one atomically written VISSL-named file, checkpoint.torch linking the latest).
 * With AUTO_RESUME and a checkpoint in CHECKPOINT.DIR, trainer_new loads it all back, and the
 * batches it had already trained are skipped if they arrive again (the orchestrator starts the
 * decode stage at the right batch, so they normally do not): the weights after N more steps
 * are then bitwise those of a run that was never interrupted.
 */
#ifndef SELFSUP_TRAIN_TRAINER_H
#define SELFSUP_TRAIN_TRAINER_H

#include "config.h"
#include "record.h"

#include <stdbool.h>
#include <stdint.h>

/* Where a test phase's batches come from (TEST_MODEL): read gives 1 with a batch record
 * (valid until done), 0 on a stop, -1 on a failure or an input that ended too soon (logged). */
typedef struct {
    int (*read)(void *ctx, rec_view *v);
    void (*done)(void *ctx);
    void *ctx;
} trainer_test_input;

typedef struct {
    int rank, world_size;
    /* The trainers' world when world_size > 1 (shm/collective.h; selfsup-train joins it with
     * --coll): one model over the ranks (train/dist.h). NULL with world_size 1. */
    struct coll *world;
    bool world_promised;     /* trainer_check_config for a run that will join a world */
    int threads;             /* 0: every core */
    int64_t steps_per_epoch; /* 0: from the DATA.TRAIN dataset */
    /* The test batches' source, or NULL: TEST_MODEL's test phases are then skipped (with a
     * warning), as in a shell pipeline, which has only the train batches. */
    const trainer_test_input *test_input;
    int64_t test_steps;      /* batches per test phase; 0: from the DATA.TEST dataset */
    /* DeepClusterV2's InitMemoryHook: one epoch of training batches that fill the memory banks
     * before the first epoch of a fresh run (selfsup-train --memory-in; selfsup run wires a
     * chain that decodes epoch 0 for it). A fresh run of that loss without it is refused. */
    const trainer_test_input *memory_input;
} trainer_options;

typedef struct trainer trainer;

/* Build from the composed `config` map. NULL with err ("file:line: key: why") for a config
 * this trainer refuses; the exit status is then 2. */
trainer *trainer_new(const cfg_node *config, const trainer_options *o, cfg_err *err);
/* Every check trainer_new makes of the config before it builds the model, run through the same
 * code and in the same order, so the first refusal is the one a run would give: the input
 * keys, the optimizer, the loss, the meter, both schedules, the batches per epoch (DATA.TRAIN
 * read through the sampler unless o->steps_per_epoch; DATA.TEST when TEST_MODEL and
 * o->test_input is set: only its presence matters here), config.MODEL and WEIGHTS_INIT as
 * model_build_from_config reads them, and the device (its backend opened and closed again: the
 * only way to know a GPU is there). Nothing is built or written: neither the model's tensors,
 * nor the weights file's contents, nor CHECKPOINT.DIR are looked at. What `selfsup config
 * validate` and `selfsup-train --check` run. False with err as trainer_new gives it. */
bool trainer_check_config(const cfg_node *config, const trainer_options *o, cfg_err *err);
void trainer_free(trainer *t);

/* One training step on a batch record of epoch `epoch`. 0, or -1 with *err: a batch the model
 * or the loss cannot take, a non-finite loss. A batch of a new epoch closes the previous one
 * first (trainer_phase_end). */
int trainer_step(trainer *t, const rec_view *batch, uint32_t epoch, char **err);
/* The end of the input: closes the last epoch and writes the final checkpoint; when the run
 * was stopped before its last epoch ended (`stopped`), an iteration checkpoint instead. An
 * input that ended before every planned batch came is an error (-1, *err says how many came),
 * after an iteration checkpoint of what was trained: a short stream never ends a run. */
int trainer_finish(trainer *t, bool stopped, char **err);

/* What a trainer's input gives before a step, from the best news to the worst. Several
 * trainers each say theirs and all act on the worst of them (trainer_agree): they train the
 * step together or stop at it together, so their collectives never part ways, and a stop
 * leaves one checkpoint that every rank can resume from. */
typedef enum {
    TRAINER_INPUT_BATCH,          /* a batch to train */
    TRAINER_INPUT_END,            /* the input ended: the run is done (trainer_finish) */
    TRAINER_INPUT_STOPPED,        /* a stop: trainer_finish(stopped) */
    TRAINER_INPUT_FAILED_STOPPED, /* the input failed as its writer was stopped: keep a checkpoint, fail */
    TRAINER_INPUT_FAILED,         /* the input failed: fail */
} trainer_input;
/* *all becomes the worst of every rank's `mine` (mine itself for one trainer). 0, or -1 with
 * *err when the trainers' world broke. */
int trainer_agree(trainer *t, trainer_input mine, trainer_input *all, char **err);

int64_t trainer_iteration(const trainer *t);
/* Test hooks: the model and its backend (to set its weights by formula before training). */
struct model *trainer_model(trainer *t);
struct eng_backend *trainer_backend(trainer *t);
struct loss_state *trainer_loss_state(trainer *t); /* the loss's own state (SwAV's queue) */
double trainer_last_loss(const trainer *t);
double trainer_last_test_loss(const trainer *t); /* the mean batch loss of the last test phase */
int64_t trainer_steps_per_epoch(const trainer *t);

#endif

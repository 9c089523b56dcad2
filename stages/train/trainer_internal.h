/*
 * trainer_internal.h — the trainer's state, shared by trainer.c (building, the step, phases,
 * checkpoints) and monitor.c (what VISSL's logging hooks write: the log line, stdout.json,
 * metrics.json, perf stats, the memory summary, model complexity, TensorBoard).
 */
#ifndef SELFSUP_TRAIN_TRAINER_INTERNAL_H
#define SELFSUP_TRAIN_TRAINER_INTERNAL_H

#include "train/buckets.h"
#include "train/dist.h"
#include "train/trainer.h"

#include "model.h"
#include "sched.h"
#include "tbevents.h"
#include "timer.h"
#include "train/inputs.h"
#include "train/loss.h"
#include "train/meter.h"
#include "train/optim.h"
#include "train/phases.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define MAX_INPUTS MODEL_MAX_INPUTS
#define MAX_OUTPUTS 16 /* model outputs a loss takes (loss.c's LOSS_MAX_OUTPUTS) */

/* A loss built for the model's outputs on one list of input shapes (train and test batches
 * may differ: each phase kind keeps its own). */
typedef struct {
    loss *ls;
    int ninputs;
    eng_shape in_shape[MAX_INPUTS];
} loss_slot;

/* Where a training step's time goes (VISSL's PerfStats timers, plus the wait for the batch). */
enum { PERF_WAIT, PERF_READ, PERF_FORWARD, PERF_LOSS, PERF_METERS, PERF_BACKWARD, PERF_OPTIM, PERF_N };

/* The test phase being run: its loss and meter sums. */
typedef struct {
    int64_t epoch;          /* the train phase it follows (TEST_ONLY: its own number) */
    int64_t batches;
    double loss_sum;
    bool open;              /* TEST_ONLY: a phase has started and not yet ended */
} test_run;

struct trainer {
    const cfg_node *config;
    eng_backend *be;
    model *m;
    loss_options lo;
    loss_state *loss_st;    /* what the loss keeps between steps; both slots share it */
    loss_slot train_loss, test_loss;
    optim_options oo;
    optim *opt;
    acc_meter meter;
    bool meter_on;          /* METERS.name set, with enable_training_meter */
    acc_meter test_meter;   /* the same meter in test phases (on whenever METERS.name is) */
    phase_plan plan;        /* which epochs a test phase follows (phases.h) */
    int64_t test_steps;     /* batches of a test phase (DATA.TEST); 0 without TEST_MODEL */
    trainer_test_input test_in;
    bool test_interrupted;
    trainer_test_input memory_in; /* DeepClusterV2's pass before the first epoch (read: NULL without) */
    bool memory_due;              /* that pass is still to run (a fresh start of a loss with memory banks) */
    bool memory_interrupted;      /* a stop came during it: nothing trains */
    int64_t pending_test;   /* a resumed run owes the test phase after this epoch first; -1 */
    test_run test;
    int64_t checkpointed_batches; /* batches_done at the last checkpoint */
    sched lr, lr_head;
    int64_t num_epochs, steps_per_epoch, log_frequency, checkpoint_frequency, checkpoint_iter_frequency;
    int64_t batch_size;     /* DATA.TRAIN.BATCHSIZE_PER_REPLICA (images per step, for images/s) */
    /* progress, as VISSL's task counts it */
    int64_t iteration;      /* forwards done in training (the first step is iteration 1) */
    int64_t batches_done;   /* optimizer steps: where = batches_done / (epochs × steps) */
    int64_t phase;          /* the epoch of the batches being read */
    int64_t phase_batches;  /* batches trained in that epoch */
    bool in_phase;
    int64_t resume_epoch, resume_batch; /* batches before this one were trained before a resume */
    bool skip_logged;
    batch_host host;        /* one input as float32 N × 3 × H × W */
    /* logging */
    double last_loss, last_test_loss, t_start, t_last_log;
    double t_step_end;      /* when the last step ended: the time to the next is the wait */
    int64_t it_last_log;
    /* seconds spent per timer since the start, and where they stood at the last log line and
     * at the phase's start (MONITOR_PERF_STATS reports the phase's, every PERF_STAT_FREQUENCY
     * iterations and at its end) */
    double perf[PERF_N], perf_at_log[PERF_N], perf_at_phase[PERF_N];
    double t_phase_start;
    int64_t it_phase_start;
    bool perf_on;
    int64_t perf_frequency;
    /* TensorBoard (TENSORBOARD_SETUP.USE_TENSORBOARD): SSLTensorboardHook's scalars */
    tb_writer *tb;
    bool tb_params, tb_grads;    /* LOG_PARAMS, LOG_PARAMS_GRADIENTS: histograms */
    int64_t tb_params_every;     /* LOG_PARAMS_EVERY_N_ITERS (-1: at phase ends only) */
    int64_t memory_summary_at; /* HOOKS.MEMORY_SUMMARY: the iteration to print it after; -1 off */
    double tb_flush_every, tb_last_flush, tb_t_last;
    int64_t tb_it_last;
    char *dir;              /* CHECKPOINT.DIR */
    FILE *stdout_json;
    int rank;               /* rank 0 alone writes checkpoints and logs */
    dist dist;              /* the other trainers of the model (dist.h) */
    bool broadcast_buffers; /* DISTRIBUTED.BROADCAST_BUFFERS: rank 0's buffers before every forward */
    dist_group bn_group;    /* SyncBN's ranks (size 0: each rank's batch norms are its own) */
    grad_buckets buckets;   /* DDP's gradient buckets (none for one trainer) */
};

/* The time since `since` into timer k; returns now. With MONITOR_PERF_STATS the backend's
 * queue is drained first, so on a GPU the timer holds the part's work, not its queueing (a
 * step without them waits only where the loss comes back). */
static inline double lap(trainer *t, int k, double since)
{
    if (t->perf_on)
        eng_sync(t->be);
    double now = now_seconds();
    t->perf[k] += now - since;
    return now;
}

/* ---- monitor.c: VISSL's logging hooks ------------------------------------------------------ */

/* The switches read from the config (perf stats, memory summary), and TensorBoard's event
 * file opened (false with err when it cannot be). */
bool monitor_open(trainer *t, cfg_err *err);
/* SSLModelComplexityHook's line, at the start. */
void monitor_log_complexity(const trainer *t);
/* A train phase starts (epoch: its number); the forward of a step is done (the iteration not
 * yet counted); a step's update is done (lr: the trunk's rate). */
void monitor_train_phase_start(trainer *t, int64_t epoch);
void monitor_forward(trainer *t);
void monitor_update(trainer *t, double lr);
/* A train phase ends: perf stats and the histograms. */
void monitor_train_phase_end(trainer *t);
/* One metrics.json line: {iteration, phase_idx, train_phase_idx} and, when the meter ran,
 * "<kind>_<meter name>" (also logged and sent to TensorBoard); the meter starts over. */
void monitor_metrics_line(trainer *t, const char *kind, int64_t phase_idx, int64_t train_phase_idx, acc_meter *m,
                          bool meter_on);

#endif

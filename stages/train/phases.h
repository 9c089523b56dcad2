/*
 * phases.h — VISSL's list of phases: which train epochs are followed by a test phase.
 *
 * VISSL (SelfSupervisionTask._build_phases) runs OPTIMIZER.num_epochs train phases; with
 * TEST_MODEL, a test phase follows train phase i when i % TEST_EVERY_NUM_EPOCH == 0 or i is
 * the last (so with TEST_EVERY_NUM_EPOCH 2 the tests follow epochs 0, 2, 4, …, and always the
 * last). TEST_ONLY runs num_epochs test phases and no training. phase_idx counts both kinds;
 * VISSL names its phase checkpoints by it and checks CHECKPOINT_FREQUENCY against it, so
 * with a test after every epoch the train phases are phase_idx 0, 2, 4, ….
 *
 * The trainer runs the plan; the orchestrator reads it to tell the test chain's decode stage
 * how many test phases of data to make (fewer when a run resumes).
 */
#ifndef SELFSUP_TRAIN_PHASES_H
#define SELFSUP_TRAIN_PHASES_H

#include "config.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t num_epochs; /* OPTIMIZER.num_epochs */
    int64_t test_every; /* TEST_EVERY_NUM_EPOCH (at least 1) */
    bool test_model;    /* TEST_MODEL */
    bool test_only;     /* TEST_ONLY */
} phase_plan;

phase_plan phase_plan_from_config(const cfg_node *config);

/* Whether a test phase follows train phase `epoch` (0-based). */
bool phase_plan_test_after(const phase_plan *p, int64_t epoch);
/* VISSL's phase_idx of train phase `epoch`, and of the test phase after it. */
int64_t phase_plan_train_index(const phase_plan *p, int64_t epoch);
int64_t phase_plan_test_index(const phase_plan *p, int64_t epoch);
/* How many test phases follow train phases `from_epoch` and later (TEST_ONLY: the test
 * phases from that one on). */
int64_t phase_plan_tests_from(const phase_plan *p, int64_t from_epoch);

#endif

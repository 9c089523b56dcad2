/*
 * checkpoint.h — the trainer's checkpoints: one safetensors file holding everything exact
 * resume needs (docs/ARCHITECTURE.md, "The trainer's step").
 *
 * Tensors: the model's entries under VISSL's names (trunk.…, heads.…: parameters and BN
 * running statistics), then the optimizer's state (optimizer.momentum_buffer.<name>, or
 * optimizer.exp_avg / exp_avg_sq.<name>), so safetensors + PyTorch, WEIGHTS_INIT and `selfsup
 * convert` read the model from it and ignore the rest. Metadata: where training stands
 * (ckpt_state) as decimal strings. The file is written atomically and CHECKPOINT.DIR's
 * checkpoint.torch link is then pointed at it, so a crash at any moment leaves the previous
 * checkpoint or the new one, whole.
 */
#ifndef SELFSUP_TRAIN_CHECKPOINT_H
#define SELFSUP_TRAIN_CHECKPOINT_H

#include "config.h"
#include "nn.h"
#include "params.h"

#include <stdint.h>

typedef struct {
    const char *kind;       /* "phase", "final" or "iteration" */
    int64_t phase;          /* the epoch of the last batch trained (-1: none yet) */
    int64_t iteration;      /* training forwards so far */
    int64_t batches_done;   /* optimizer steps so far (where's numerator) */
    int64_t next_epoch;     /* the first batch still to train: epoch … */
    int64_t next_batch;     /* … and its number within that epoch */
    int64_t num_epochs;
    int64_t loss_iterations; /* the loss's own forward count (loss_state_iterations) */
} ckpt_state;

/* Save entries (model first, then optimizer state) into dir/file and link checkpoint.torch to it. */
int ckpt_save(eng_backend *be, const char *dir, const char *file, const eng_entry *entries, int n,
              const ckpt_state *s, char **err);

/* dir's checkpoint.torch: 0 when there is none; 1 with every entry's tensor loaded and *s
 * filled (the strings point into a static "resumed"); -1 with *err when it is unreadable, a
 * tensor is missing or has another shape (the model must be the one that wrote it). */
int ckpt_load(eng_backend *be, const char *dir, const eng_entry *entries, int n, ckpt_state *s, char **err);

/* Removes what a save killed mid-write left in dir (NAME.torch.tmp-PID-N whose process is
 * gone); returns how many. The checkpoints themselves are never touched. */
int ckpt_remove_stale(const char *dir);

/* Only where training stands, for the orchestrator to start the data there: 0 none, 1 found. */
int ckpt_resume_point(const char *dir, ckpt_state *s, char **err);

/* Bytes a checkpoint of these entries takes: their float32 values and the safetensors
 * header (names, shapes, offsets, the train state), rounded up, never under. */
uint64_t ckpt_size_estimate(const eng_entry *entries, int n);

/* An output folder checked before any work, so that a run does not find out at its first
 * save: made (mkdir -p), a file can be created in it, and `need` bytes are free there.
 * Every stage that writes results checks its folders so (the trainer with
 * ckpt_size_estimate, the evaluators and the extractor with their own estimates). 0, or -1
 * with *err (malloc'd) naming the folder and what is wrong. */
int ckpt_check_output_dir(const char *dir, uint64_t need, char **err);
/* What ckpt_check_output_dir will find, seen without making anything (validate, a dry start):
 * the folder, or else the nearest folder above it that exists, is a folder this process may
 * create files in. 0, or -1 with *err (malloc'd). */
int ckpt_probe_output_dir(const char *dir, char **err);
/* The same for a folder that a config key or an option chose: false with *err naming it as
 * cfg_fail does (`where`: the key's node, NULL for an option; `what`: the key or option). */
bool ckpt_output_dir_usable(const char *dir, uint64_t need, const char *what, const cfg_node *where, cfg_err *err);
/* The same for the folder of an output file, logging the error: for the evaluators' results
 * files, made and tried before any work. */
bool ckpt_output_file_usable(const char *file, uint64_t need, const char *what, const cfg_node *where);

#endif

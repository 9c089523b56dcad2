/*
 * features.h — VISSL's extracted-feature files (vissl/engines/extract_features.py, and
 * merge_features in vissl/utils/misc.py): what selfsup-extract writes and what selfsup-svm and
 * selfsup-knn read.
 *
 * Per rank, split ("train", "test") and layer ("res5avg", "heads", …), three .npy files in one
 * folder:
 *   rank{R}_{split}_{layer}_features.npy  float32 N × D (each sample's feature flattened)
 *   rank{R}_{split}_{layer}_targets.npy   int64 N × L (a single label gives N × 1)
 *   rank{R}_{split}_{layer}_inds.npy      int64 (N,), the samples' dataset indices
 * R is the global rank (VISSL writes the local rank, which breaks on several nodes; we do not
 * copy that). Within a rank file the rows are unique by index and sorted by it.
 *
 * feat_merge is VISSL's merge_features: every rank's files of one split and layer, rows
 * de-duplicated by index (the lowest rank wins, as the first occurrence does in VISSL) and
 * sorted by it. feat_load reads explicit files (the evaluators' standalone mode).
 *
 * Reading checks what the evaluators would otherwise trip on, with the file named: features
 * must be 2-D float32 or float64 (converted to float32) with finite values; targets 1-D or 2-D
 * of an integer dtype (or float with integral values), converted to int64; as many target and
 * index rows as feature rows.
 */
#ifndef SELFSUP_FEATURES_H
#define SELFSUP_FEATURES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t n, dim;      /* rows, feature width */
    size_t ntargets;    /* target columns (1 for a single label) */
    float *features;    /* n × dim */
    int64_t *targets;   /* n × ntargets */
    int64_t *inds;      /* n: dataset indices (0, 1, … when the file was not given) */
} feat_set;

/* "DIR/rank{R}_{split}_{layer}_{what}.npy" (malloc'd); what is features, targets or inds. */
char *feat_path(const char *dir, int rank, const char *split, const char *layer, const char *what);

/* Write one rank's three files; rows are written as given (the caller de-duplicates and
 * sorts: feat_dedup_sort). 0, or -1 with *err. */
int feat_write(const char *dir, int rank, const char *split, const char *layer, const feat_set *f, char **err);

/* Write rows order[0..m) of f (order NULL: rows 0..m), in that order; the features are
 * streamed from f->features, never copied whole, so they may be a memory-mapped file larger
 * than memory. 0, or -1 with *err. */
int feat_write_rows(const char *dir, int rank, const char *split, const char *layer, const feat_set *f,
                    const size_t *order, size_t m, char **err);

/* The rows to keep, in the order to write them, for rows unique by index (the first
 * occurrence of each) and sorted by it: order gets m <= n row numbers; returns m. */
size_t feat_dedup_order(const int64_t *inds, size_t n, size_t *order);

/* Keep the first row of every index and sort the rows by index (stable), in place. */
void feat_dedup_sort(feat_set *f);

/* Read explicit files; inds_path may be NULL (indices 0..n-1). 0, or -1 with *err naming the
 * file and the problem. */
int feat_load(const char *features_path, const char *targets_path, const char *inds_path, feat_set *out,
              char **err);

/* VISSL's merge_features over every rank{R}_… file of `split` and `layer` in `dir` (ranks 0,
 * 1, … until one is missing; rank 0 must exist). 0, or -1 with *err. */
int feat_merge(const char *dir, const char *split, const char *layer, feat_set *out, char **err);

/* The layers that have rank-0 feature files for `split` in `dir`, sorted (malloc'd array of
 * malloc'd names; *n set). NULL with *n = 0 when there are none. */
char **feat_layers(const char *dir, const char *split, int *n);

void feat_free(feat_set *f);

#endif

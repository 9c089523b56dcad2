/*
 * knn.h — VISSL's weighted k-nearest-neighbour benchmark (VISSL 0.1.5's
 * tools/nearest_neighbor_test.py) on train and test features held in memory.
 *
 * For every test row: similarity to every train row by dot product (after L2-normalising both
 * sides with torch's normalize, eps 1e-12, when l2_norm is set); the k most similar train rows;
 * each class scores Σ exp(sim/σ) over its neighbours; the classes sorted by score, descending,
 * as torch sorts them (ties too: torch_sort.h); top-1 when the first is the target, top-5 when
 * the target is among the first five. num_classes = max(train label) + 1, as in VISSL.
 *
 * The similarities go through oneDNN's sgemm a block of test rows × a block of train rows at a
 * time, each block merged into per-row top-k lists, so memory stays bounded (never
 * N_test × N_train). Tasks (a test block × a shard of the train rows) run on OpenMP threads,
 * each with a single-threaded sgemm. Among equal similarities the lower train index ranks
 * first; that is a total order, so the neighbours, and therefore the results, do not depend on
 * the block sizes or the thread count.
 *
 * Where we differ from VISSL, on purpose:
 *   - VISSL walks the test set in chunks of N_test // 100, which is 0 below 100 test rows and
 *     crashes; the chunking does not change any result, so we have none.
 *   - TOPK > N_train: VISSL's topk raises; we use k = N_train (the caller warns).
 *   - Fewer than 5 classes: VISSL's narrow(1, 0, 5) raises; top-5 counts the classes there are.
 *   - exp(sim/σ) overflowing float32 (sim/σ > 88.7, e.g. unnormalised features and σ = 0.1):
 *     VISSL's scores become inf·0 = NaN for every class, so its predictions are arbitrary; we
 *     score such a row with exp((sim − max sim)/σ), which ranks the classes as the exact
 *     weights would, and count the rows (overflow_rows).
 *   - Equal similarities at the k-th place: torch's topk (nth_element) picks among them in an
 *     implementation-defined way; we take the lower train index.
 * Rounding: similarities and norms are computed in another order than torch's, so they can
 * differ from VISSL's in the last bit; only near-exact ties can then rank differently.
 */
#ifndef SELFSUP_KNN_H
#define SELFSUP_KNN_H

#include "features.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KNN_TOP5 5
/* Labels are class indices below this. The class count (max train label + 1) sizes each
 * thread's score buffers, so a corrupt label (2^40, INT64_MAX) would ask for terabytes or
 * overflow; ImageNet-21k's 21,841 classes are far below it. */
#define KNN_MAX_CLASSES (1 << 20)

typedef struct {
    double sigma;       /* NEAREST_NEIGHBOR.SIGMA: weights exp(sim / sigma) */
    int64_t topk;       /* NEAREST_NEIGHBOR.TOPK: neighbours per test row (> 0) */
    bool l2_norm;       /* NEAREST_NEIGHBOR.L2_NORM_FEATS */
    int threads;        /* OpenMP threads; 0: every core */
    size_t block_test;  /* test rows per block; 0: the default */
    size_t block_train; /* train rows per sgemm block; 0: the default */
} knn_options;

typedef struct {
    size_t n_train, n_test, dim;
    int64_t num_classes;  /* max train label + 1 */
    int64_t k;            /* neighbours used: topk, clamped to n_train */
    int npred;            /* predictions kept per row: min(5, num_classes) */
    int64_t top1_hits, top5_hits;
    double top1, top5;    /* percent of the test rows, as VISSL reports them */
    int64_t *predictions; /* n_test × KNN_TOP5: the best classes, -1 past npred */
    size_t overflow_rows; /* rows scored with shifted weights (see above) */
    double seconds;       /* wall time of knn_run */
} knn_result;

/* Check that train and test can be compared: non-empty, the same width, one target column,
 * labels in [0, KNN_MAX_CLASSES), norms within float32. 0, or -1 with *err (malloc'd) saying
 * what and where (the split and the row). */
int knn_check(const feat_set *train, const feat_set *test, char **err);

/* torch.nn.functional.normalize(x, dim=1, p=2, eps=1e-12) on n rows of width dim, in place. */
void knn_l2_normalize(float *x, size_t n, size_t dim);

/* The benchmark. Normalises the features in place when opt->l2_norm. 0, or -1 with *err
 * (bad input, as knn_check, bad options, or memory running out on a worker thread). Free
 * the result with knn_result_free. */
int knn_run(feat_set *train, feat_set *test, const knn_options *opt, knn_result *out, char **err);

void knn_result_free(knn_result *r);

/* The first `npred` classes of torch's scores.sort(descending=True) for one row of
 * num_classes scores (scores is not changed). Exposed for the tests. */
void knn_rank_classes(const float *scores, int64_t num_classes, int npred, int64_t *out);

#endif

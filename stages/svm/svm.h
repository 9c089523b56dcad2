/*
 * svm.h — VISSL's SVM benchmarks (tools/train_svm.py, vissl/utils/svm_utils/): the VOC07 protocol (SVMTrainer) and the
 * low-shot protocol (SVMLowShotTrainer), on features held once in memory as float32.
 *
 * VOC07 protocol, per class c of the targets (or of SVM.cls_list):
 *   1. labels y = +1 where t == 1, −1 elsewhere (rows marked −1, "difficult", stay
 *      negatives in training, as in VISSL);
 *   2. sklearn's StratifiedKFold(cross_val_folds, shuffle=False) splits the rows; for every
 *      cost a linear SVM (solver.h: LinearSVC's squared hinge, L2, dual, class weights
 *      {+1: 2, −1: 1}, intercept_scaling 1, tol 1e-4) is fitted on each training part and
 *      scored on its test part with sklearn's average_precision_score; the mean over folds is
 *      the class's CV AP for that cost;
 *   3. every cost is fitted on all rows; the cost with the best CV AP (first on ties) is the
 *      chosen one; its decision values on the test rows whose target is not −1 give the test
 *      AP (lib/ap.h: VISSL's interpolated VOC AP).
 * The work is (class × fold) chains run in parallel with OpenMP; a chain fits its costs in
 * ascending order, each fit warm-started from the previous cost's dual solution. A fit
 * depends only on its class, fold and cost, so the results do not depend on the thread count.
 *
 * Files, in the output folder (VISSL's names; cost names are Python's repr of float(cost)):
 *   AP_cls{c}_cost{cost}.npy   float64 (1,): the mean CV AP
 *   cls{c}_cost{cost}.npy      float64 (dim + 1,): the model, [w…, intercept], so that
 *                              decision(x) = x·w[:dim] + w[dim] (VISSL pickles a LinearSVC)
 *   crossval_ap.npy            float64 (#classes, #costs)
 *   chosen_cost.npy            float64 (#classes,)
 *   test_ap.npy                float64 (#classes, 1); −1 for a skipped class
 * A class's AP and model files are reused when all of them exist, unless force_retrain.
 *
 * Low-shot protocol (lowshot.c): for every sample s and shot count k, a target matrix with k
 * positives and (C−1)·k negatives per class and −1 elsewhere (VOC style), or k images per
 * class (Places style, single labels, one-vs-rest); every cost is fitted on the rows ≠ −1 of
 * each class, no CV; the mean test AP over classes per cost goes to
 * test_ap_sample{s}_k{k}.npy (1, #costs); aggregate_stats reduces them over samples.
 */
#ifndef SELFSUP_SVM_H
#define SELFSUP_SVM_H

#include "svm/solver.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cfg_node;

typedef enum { LOWSHOT_VOC, LOWSHOT_PLACES } svm_lowshot_style;

/* Class indices (single-label targets) are below this: the class count (max index + 1)
 * sizes an n × classes target matrix and a fit per class, cost and fold, so an index of
 * 2^40 or INT64_MAX is a corrupt targets file (and would overflow that size), not a dataset.
 * ImageNet-21k has 21,841 classes. */
#define SVM_MAX_CLASSES (1 << 16)

/* The SVM config (config.SVM), resolved. */
typedef struct {
    double *costs;          /* costs_list + base**p, in that order (file and array order) */
    size_t ncosts;
    int folds;              /* cross_val_folds */
    bool normalize;
    svm_loss loss;
    svm_penalty penalty;
    bool dual;
    int max_iter;
    int *cls_list;          /* NULL: every class */
    size_t ncls_list;
    bool force_retrain;
    int threads;            /* 0: every core */
    /* low_shot */
    svm_lowshot_style lowshot_style;
    int *sample_inds;
    size_t nsamples;
    int *k_values;
    size_t nk;
    uint64_t seed;          /* SEED_VALUE: the low-shot samples we draw ourselves */
} svm_opts;

/* Defaults of configs/defaults.yaml (SVM:). */
void svm_opts_default(svm_opts *o);
/* Read config.SVM (the SVM map) over the defaults; checks names, ranges and the
 * LinearSVC combinations liblinear supports. 0, or -1 with *err naming the key. */
int svm_opts_from_config(const struct cfg_node *svm, svm_opts *o, char **err);
/* Costs from a comma list ("0.1,1,10"). 0, or -1 with *err. */
int svm_opts_set_costs(svm_opts *o, const char *list, char **err);
void svm_opts_free(svm_opts *o);

/* One split's data: float32 features and {1, 0, −1} targets, n × C. */
typedef struct {
    size_t n, dim;
    float *x;
    size_t C;
    int8_t *t;
} svm_data;

/* Targets (int64, n × ncols) to svm_data's n × C int8 form. VOC style (nclasses 0): every
 * value in {−1, 0, 1}, C = ncols. selfsup's extension (nclasses > 0): one column of class
 * indices, made one-vs-rest one-hot with C = nclasses; a negative index becomes a row of −1
 * (ignored). 0, or -1 with *err naming the row and value; `what` names the file. */
int svm_targets_convert(const int64_t *t, size_t n, size_t ncols, size_t nclasses, const char *what, int8_t **out,
                        size_t *C, char **err);
/* True when these targets look like class indices (one column holding a value > 1); *max
 * gets the largest value. */
bool svm_targets_are_indices(const int64_t *t, size_t n, size_t ncols, int64_t *max);

/* x / (‖x‖₂ + 1e-5) per row, the norm in double (VISSL's _normalize_features). */
void svm_normalize_rows(float *x, size_t n, size_t dim);
/* Rows with a NaN or infinity: the first such row, or -1. */
long svm_first_nonfinite_row(const float *x, size_t n, size_t dim);

/* Python's repr(float(c)): "2.0", "0.1", "1e-05", "1e+16". */
void svm_cost_name(double c, char *out, size_t size);

/* sklearn 1.2 StratifiedKFold(k, shuffle=False) test-fold ids for labels y (any int8 values;
 * classes by order of first appearance). -1 when sklearn raises (k < 2, fewer rows than
 * k, or every label with fewer than k rows). */
int svm_stratified_folds(const int8_t *y, size_t n, int k, int *fold);

/* sklearn's average_precision_score(y == 1, scores): Σ (R_n − R_{n−1}) P_n over distinct
 * thresholds (tied scores form one threshold). 0 when there is no positive (sklearn: -0.0). */
double svm_sklearn_ap(const double *scores, const int8_t *y, size_t n);

/* The VOC07 protocol's results for one feature set. */
typedef struct {
    size_t ncls, ncosts, dim;
    int *cls;            /* class numbers */
    double *crossval;    /* ncls × ncosts mean CV AP (NaN where CV failed or was skipped) */
    double *chosen;      /* ncls chosen costs (NaN for a skipped class) */
    double *test_ap;     /* ncls: −1 for a skipped class */
    double *models;      /* ncls × ncosts × (dim + 1) */
    double mAP;          /* mean of the test APs ≠ −1 (a fraction); −1 when none */
    int reused;          /* classes whose files were reused */
    double seconds;
} svm_result;

/* Train (CV + all data) and test; writes the files above into outdir (created). 0, or -1
 * with *err (bad input, unwritable folder). */
int svm_voc07(const svm_opts *o, const svm_data *train, const svm_data *test, const char *outdir, svm_result *res,
              char **err);
void svm_result_free(svm_result *r);

/* Index of the largest value, first on ties; a NaN wins at once (numpy's argmax). */
size_t svm_argmax(const double *v, size_t n);

/* Decision x·w[:dim] + w[dim] in double. */
double svm_decide(const double *w, const float *x, size_t dim);

/* ---- low-shot (lowshot.c) ------------------------------------------------------------------ */

/* VOC-style sample (create_low_shot_samples.py's rule, our random numbers): out (n × C,
 * int8) is −1 but for k random rows with t == 1 and (C−1)·k random rows with t == 0 per
 * class. Places style (t one-hot from single labels): k random rows of each class keep their
 * whole row, every other row is −1. 0, or -1 with *err when a class has too few rows. */
int svm_lowshot_sample(svm_lowshot_style style, const int8_t *t, size_t n, size_t C, int k, uint64_t seed,
                       int sample, int8_t *out, char **err);

/* aggregate_stats: aps is nk × nsamples × ncosts (NaN for a missing sample file, skipped);
 * for each k the mean/min/max/std (ddof 0) over samples per cost, the cost column with the
 * best mean, ×100 rounded to 2 decimals, into stats (nk × 4: mean, min, max, std) and the
 * raw per-cost reductions into mean/min/max/std (nk × ncosts each, may be NULL). A k with
 * no sample gets NaN. */
void svm_aggregate_stats(const double *aps, size_t nk, size_t nsamples, size_t ncosts, double *stats, double *mean,
                         double *min, double *max, double *std);

/* The low-shot results of one feature set. */
typedef struct {
    size_t nk, nsamples, ncosts;
    double *aps;    /* nk × nsamples × ncosts mean test AP (NaN: skipped) */
    double *stats;  /* nk × 4: mean, min, max, std (×100, 2 decimals) */
    double seconds;
} svm_lowshot_result;

/* Every (sample, k): sample files {sample_dir}/{prefix}_sample{s}_k{k}.npy (read when they
 * exist, else drawn and written), models cls{c}_cost{cost}_sample{s}_k{k}.npy and
 * test_ap_sample{s}_k{k}.npy in outdir, then test_ap_{mean,min,max,std}.npy. */
int svm_lowshot(const svm_opts *o, const svm_data *train, const svm_data *test, const char *sample_dir,
                const char *prefix, const char *outdir, svm_lowshot_result *res, char **err);
void svm_lowshot_result_free(svm_lowshot_result *r);

/* ---- shared by svm.c and lowshot.c --------------------------------------------------------- */

/* The solver parameters of one cost. */
svm_params svm_params_for(const svm_opts *o, double cost);
/* Cost indices in ascending cost order (a chain's order; malloc'd). */
size_t *svm_cost_order(const double *costs, size_t n);
/* Write a float64 array, creating nothing else; 0 or -1 with *err. */
int svm_save_f64(const char *dir, const char *name, int ndim, const size_t *shape, const double *v, char **err);

#endif

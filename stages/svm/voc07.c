/*
 * voc07.c — VISSL's SVMTrainer.train + test (see svm.h): cross-validated cost choice per
 * class, a model per class and cost on all training rows, the test AP of the chosen one.
 *
 * How the work is cut: each class with positives gets `folds` + 1 chains (one per CV fold,
 * one on all rows). A chain fits every cost in ascending order on the same rows, passing the
 * dual solution on as the next fit's warm start, so a chain costs little more than its most
 * expensive fit. Chains are independent and run in parallel (OpenMP, dynamic schedule); each
 * writes only its own slots of the result arrays, so no locks and no dependence on the
 * thread count.
 */
#include "ap.h"
#include "log.h"
#include "npy.h"
#include "svm/svm.h"
#include "timer.h"
#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One class being trained. */
typedef struct {
    int cls;        /* class number (targets column) */
    int8_t *y;      /* n: +1 where t == 1, −1 elsewhere */
    int *fold;      /* n: CV test fold of each row; NULL when CV is impossible */
    bool train;     /* false: skipped or reused */
} class_job;

/* One chain: a class and a fold (fold == folds: all rows). */
typedef struct {
    size_t job;
    int fold;
    char *err;
} chain;

typedef struct {
    const svm_opts *o;
    const svm_data *train;
    class_job *jobs;
    size_t *order;   /* costs ascending */
    double *fold_ap; /* ncls × ncosts × folds */
    svm_result *res;
} voc_ctx;

static void model_file(const svm_opts *o, int cls, size_t cost, char *out, size_t size, const char *prefix)
{
    char name[40];
    svm_cost_name(o->costs[cost], name, sizeof name);
    snprintf(out, size, "%scls%d_cost%s.npy", prefix, cls, name);
}

/* Fits of one chain: every cost in ascending order, warm-started. For a CV fold, the AP of
 * each fit on the held-out rows; for all rows, the models. */
static void run_chain(const voc_ctx *v, chain *ch)
{
    const svm_opts *o = v->o;
    const svm_data *d = v->train;
    const class_job *job = &v->jobs[ch->job];
    size_t folds = (size_t)o->folds, dim = d->dim;
    bool all = ch->fold == o->folds;
    uint32_t *fit_rows = NULL, *held_rows = NULL;
    size_t nfit = d->n, nheld = 0;
    if (!all) {
        fit_rows = xmalloc(d->n * sizeof *fit_rows);
        held_rows = xmalloc(d->n * sizeof *held_rows);
        nfit = 0;
        bool pos = false, neg = false;
        for (size_t i = 0; i < d->n; i++) {
            if (job->fold[i] == ch->fold) {
                held_rows[nheld++] = (uint32_t)i;
            } else {
                fit_rows[nfit++] = (uint32_t)i;
                pos |= job->y[i] == 1;
                neg |= job->y[i] != 1;
            }
        }
        if (!pos || !neg) { /* sklearn's fit fails on one label: the fold scores NaN */
            for (size_t c = 0; c < o->ncosts; c++)
                v->fold_ap[(ch->job * o->ncosts + c) * folds + (size_t)ch->fold] = NAN;
            goto done;
        }
    }
    svm_problem prob = {.x = d->x, .dim = dim, .stride = dim, .y = job->y, .rows = fit_rows, .n = nfit};
    double *alpha = xcalloc(nfit, sizeof *alpha);
    double *scores = xmalloc((nheld ? nheld : 1) * sizeof *scores);
    int8_t *held_y = xmalloc(nheld + 1);
    for (size_t r = 0; r < nheld; r++)
        held_y[r] = job->y[held_rows[r]];
    for (size_t k = 0; k < o->ncosts && !ch->err; k++) {
        size_t c = v->order[k];
        svm_params p = svm_params_for(o, o->costs[c]);
        svm_model m = {0};
        if (svm_fit(&prob, &p, alpha, &m, &ch->err) != 0)
            break;
        double w_bias = m.w[dim] * m.bias;
        m.w[dim] = w_bias;
        if (all) {
            memcpy(v->res->models + (ch->job * o->ncosts + c) * (dim + 1), m.w, (dim + 1) * sizeof *m.w);
        } else {
            for (size_t r = 0; r < nheld; r++)
                scores[r] = svm_decide(m.w, d->x + (size_t)held_rows[r] * dim, dim);
            v->fold_ap[(ch->job * o->ncosts + c) * folds + (size_t)ch->fold] = svm_sklearn_ap(scores, held_y, nheld);
        }
        svm_model_free(&m);
    }
    free(alpha);
    free(scores);
    free(held_y);
done:
    free(fit_rows);
    free(held_rows);
}

/* Reuse a class's files (VISSL: unless force_retrain): true when every cost's AP and model
 * file exists with the right shape. */
static bool load_class(const svm_opts *o, const char *outdir, size_t job, int cls, size_t dim, svm_result *res)
{
    for (size_t c = 0; c < o->ncosts; c++) {
        char name[96], *path;
        npy_array ap = {0}, m = {0};
        model_file(o, cls, c, name, sizeof name, "AP_");
        path = path_join(outdir, name);
        int rc = path_exists(path) ? npy_read(path, &ap, NULL) : -1;
        free(path);
        model_file(o, cls, c, name, sizeof name, "");
        path = path_join(outdir, name);
        rc |= rc == 0 && path_exists(path) ? npy_read(path, &m, NULL) : -1;
        free(path);
        bool ok = rc == 0 && ap.dtype == NPY_F8 && ap.count == 1 && m.dtype == NPY_F8 && m.count == dim + 1;
        if (ok) {
            res->crossval[job * o->ncosts + c] = ((const double *)ap.data)[0];
            memcpy(res->models + (job * o->ncosts + c) * (dim + 1), m.data, (dim + 1) * sizeof(double));
        }
        npy_close(&ap);
        npy_close(&m);
        if (!ok)
            return false;
    }
    return true;
}

static int save_class(const svm_opts *o, const char *outdir, size_t job, int cls, size_t dim, const svm_result *res,
                      char **err)
{
    for (size_t c = 0; c < o->ncosts; c++) {
        char name[96];
        size_t one = 1, wlen = dim + 1;
        model_file(o, cls, c, name, sizeof name, "AP_");
        if (svm_save_f64(outdir, name, 1, &one, &res->crossval[job * o->ncosts + c], err))
            return -1;
        model_file(o, cls, c, name, sizeof name, "");
        if (svm_save_f64(outdir, name, 1, &wlen, res->models + (job * o->ncosts + c) * (dim + 1), err))
            return -1;
    }
    return 0;
}

static int check_inputs(const svm_opts *o, const svm_data *train, const svm_data *test, char **err)
{
    if (train->n == 0)
        return report_failure(err, "no training rows");
    if (test && train->dim != test->dim)
        return report_failure(err, "train features have %zu columns, test features %zu: they must come from the "
                                   "same layer", train->dim, test->dim);
    if (test && test->C != train->C)
        return report_failure(err, "train targets have %zu classes, test targets %zu", train->C, test->C);
    for (size_t i = 0; i < o->ncls_list; i++)
        if ((size_t)o->cls_list[i] >= train->C)
            return report_failure(err, "SVM.cls_list[%zu]: class %d, but the targets have %zu classes", i,
                                  o->cls_list[i], train->C);
    return 0;
}

/* Labels, folds, reuse and skips of every class; returns the number of chains to run. */
static size_t plan_classes(const svm_opts *o, const svm_data *d, const char *outdir, class_job *jobs, svm_result *res)
{
    size_t nchains = 0;
    for (size_t j = 0; j < res->ncls; j++) {
        class_job *job = &jobs[j];
        job->cls = res->cls[j];
        job->y = xmalloc(d->n);
        size_t pos = 0;
        for (size_t i = 0; i < d->n; i++) {
            job->y[i] = d->t[i * d->C + (size_t)job->cls] == 1 ? 1 : -1;
            pos += job->y[i] == 1;
        }
        if (pos == 0 || pos == d->n) {
            log_warn("class %d: %s training row is positive; skipping it (AP -1, left out of the mean)", job->cls,
                     pos ? "every" : "no");
            continue;
        }
        if (!o->force_retrain && load_class(o, outdir, j, job->cls, d->dim, res)) {
            log_info("class %d: reusing the AP and model files in %s (force_retrain to redo)", job->cls, outdir);
            res->reused++;
            continue;
        }
        job->train = true;
        job->fold = xmalloc(d->n * sizeof *job->fold);
        if (svm_stratified_folds(job->y, d->n, o->folds, job->fold) != 0) {
            log_warn("class %d: %zu positives and %zu negatives cannot make %d stratified folds; its CV AP is NaN "
                     "and the first cost is chosen", job->cls, pos, d->n - pos, o->folds);
            free(job->fold);
            job->fold = NULL;
        }
        if (pos < (size_t)o->folds)
            log_warn("class %d: only %zu positives for %d folds (sklearn warns the same)", job->cls, pos, o->folds);
        nchains += job->fold ? (size_t)o->folds + 1 : 1;
    }
    return nchains;
}

static int train_all(const svm_opts *o, const svm_data *d, const char *outdir, svm_result *res, char **err)
{
    class_job *jobs = xcalloc(res->ncls, sizeof *jobs);
    size_t nchains = plan_classes(o, d, outdir, jobs, res);
    chain *chains = xcalloc(nchains + 1, sizeof *chains);
    size_t k = 0;
    for (size_t j = 0; j < res->ncls; j++) {
        if (!jobs[j].train)
            continue;
        chains[k++] = (chain){.job = j, .fold = o->folds}; /* all rows first: the longest */
        for (int f = 0; jobs[j].fold && f < o->folds; f++)
            chains[k++] = (chain){.job = j, .fold = f};
    }
    voc_ctx v = {.o = o, .train = d, .jobs = jobs, .order = svm_cost_order(o->costs, o->ncosts), .res = res};
    v.fold_ap = xcalloc(res->ncls * o->ncosts * (size_t)o->folds + 1, sizeof *v.fold_ap);
    int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t c = 0; c < nchains; c++)
        run_chain(&v, &chains[c]);
    int rc = 0;
    for (size_t c = 0; c < nchains; c++)
        if (chains[c].err && rc == 0) {
            rc = report_failure(err, "class %d: %s", jobs[chains[c].job].cls, chains[c].err);
        }
    for (size_t c = 0; c < nchains; c++)
        free(chains[c].err);
    for (size_t j = 0; j < res->ncls && rc == 0; j++) {
        if (!jobs[j].train)
            continue;
        for (size_t c = 0; c < o->ncosts; c++) {
            double sum = 0; /* the mean over folds; NaN when any fold (or the split) failed */
            for (int f = 0; f < o->folds; f++)
                sum += jobs[j].fold ? v.fold_ap[(j * o->ncosts + c) * (size_t)o->folds + (size_t)f] : NAN;
            res->crossval[j * o->ncosts + c] = sum / o->folds;
        }
        rc = save_class(o, outdir, j, jobs[j].cls, d->dim, res, err);
    }
    for (size_t j = 0; j < res->ncls; j++) {
        free(jobs[j].y);
        free(jobs[j].fold);
    }
    free(jobs);
    free(chains);
    free(v.order);
    free(v.fold_ap);
    return rc;
}

/* Chosen costs and test APs (SVMTrainer.test). */
static void test_all(const svm_opts *o, const svm_data *d, svm_result *res)
{
    float *scores = xmalloc((d->n + 1) * sizeof *scores);
    int8_t *t = xmalloc(d->n + 1);
    double sum = 0;
    size_t counted = 0;
    for (size_t j = 0; j < res->ncls; j++) {
        res->test_ap[j] = -1;
        if (isnan(res->chosen[j]))
            continue;
        size_t c = svm_argmax(res->crossval + j * o->ncosts, o->ncosts);
        const double *w = res->models + (j * o->ncosts + c) * (d->dim + 1);
        for (size_t i = 0; i < d->n; i++) {
            scores[i] = (float)svm_decide(w, d->x + i * d->dim, d->dim);
            t[i] = d->t[i * d->C + (size_t)res->cls[j]];
        }
        res->test_ap[j] = ap_voc(scores, t, d->n, 1);
        if (res->test_ap[j] == -1)
            log_warn("class %d: no positive test row; its AP is -1, left out of the mean", res->cls[j]);
        else
            sum += res->test_ap[j], counted++;
    }
    res->mAP = counted ? sum / (double)counted : -1;
    free(scores);
    free(t);
}

static int save_summary(const svm_opts *o, const char *outdir, const svm_result *res, char **err)
{
    size_t shape[2] = {res->ncls, o->ncosts}, one[2] = {res->ncls, 1};
    if (svm_save_f64(outdir, "crossval_ap.npy", 2, shape, res->crossval, err) ||
        svm_save_f64(outdir, "chosen_cost.npy", 1, shape, res->chosen, err))
        return -1;
    return svm_save_f64(outdir, "test_ap.npy", 2, one, res->test_ap, err);
}

int svm_voc07(const svm_opts *o, const svm_data *train, const svm_data *test, const char *outdir, svm_result *res,
              char **err)
{
    memset(res, 0, sizeof *res);
    if (check_inputs(o, train, test, err) || make_dirs(outdir, 0777, err))
        return -1;
    double t0 = now_seconds();
    res->ncls = o->ncls_list ? o->ncls_list : train->C;
    res->ncosts = o->ncosts;
    res->dim = train->dim;
    res->cls = xmalloc((res->ncls + 1) * sizeof *res->cls);
    for (size_t j = 0; j < res->ncls; j++)
        res->cls[j] = o->ncls_list ? o->cls_list[j] : (int)j;
    res->crossval = xmalloc((res->ncls * o->ncosts + 1) * sizeof *res->crossval);
    for (size_t i = 0; i < res->ncls * o->ncosts; i++)
        res->crossval[i] = NAN;
    res->chosen = xmalloc((res->ncls + 1) * sizeof *res->chosen);
    res->test_ap = xmalloc((res->ncls + 1) * sizeof *res->test_ap);
    for (size_t j = 0; j < res->ncls; j++)
        res->test_ap[j] = -1;
    res->models = xcalloc(res->ncls * o->ncosts * (train->dim + 1) + 1, sizeof *res->models);
    if (train_all(o, train, outdir, res, err))
        return -1;
    for (size_t j = 0; j < res->ncls; j++) {
        const int8_t *col = train->t + res->cls[j];
        size_t pos = 0;
        for (size_t i = 0; i < train->n; i++)
            pos += col[i * train->C] == 1;
        bool skipped = pos == 0 || pos == train->n;
        res->chosen[j] = skipped ? NAN : o->costs[svm_argmax(res->crossval + j * o->ncosts, o->ncosts)];
    }
    if (test)
        test_all(o, test, res);
    else
        res->mAP = -1;
    res->seconds = now_seconds() - t0;
    return save_summary(o, outdir, res, err);
}

void svm_result_free(svm_result *r)
{
    free(r->cls);
    free(r->crossval);
    free(r->chosen);
    free(r->test_ap);
    free(r->models);
    memset(r, 0, sizeof *r);
}

/*
 * voc07.c — VISSL's SVMTrainer.train + test (see svm.h): cross-validated cost choice per
 * class, a model per class and cost on all training rows, the test AP of the chosen one.
 *
 * How the work is cut: each class with positives gets `folds` + 1 fits per cost (one per CV
 * fold, one on all rows). All of them read the same feature matrix, so they are solved as
 * tasks of one call (svm_fit_tasks), which fetches each row once per sweep for all of them
 * rather than once per task: on benchmark-sized features that fetch, not the arithmetic, is
 * what a lone fit waits on (5000 x 2048 features, 20 classes, one thread: 25 s fit by fit,
 * 16 s as tasks). The tasks are dealt into one group per thread, of about equal work (more
 * groups when their solver state would pass GROUP_STATE_BYTES), and each group fits every
 * cost in ascending order, each task warm-started from its own dual solution at the previous
 * cost. A task's fit does not depend on its group (see svm_fit_tasks), so neither the
 * grouping nor the thread count changes any result; each group writes only its own slots of
 * the result arrays.
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

/* One fit per cost: a class on a fold's training rows (fold < folds) or on all rows. */
typedef struct {
    size_t job;
    int fold;
    uint8_t *in; /* n: the fold's training rows; NULL for all rows */
} fit_task;

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

/* The AP of a fold's model on the fold's held-out rows (those its task leaves out). */
static double held_out_ap(const voc_ctx *v, const fit_task *ft, const double *w)
{
    const svm_data *d = v->train;
    const class_job *job = &v->jobs[ft->job];
    double *scores = xmalloc((d->n + 1) * sizeof *scores);
    int8_t *y = xmalloc(d->n + 1);
    size_t held = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (ft->in[i])
            continue;
        scores[held] = svm_decide(w, d->x + i * d->dim, d->dim);
        y[held++] = job->y[i];
    }
    double ap = svm_sklearn_ap(scores, y, held);
    free(scores);
    free(y);
    return ap;
}

/* What a fitted task gives at cost c: the model (all rows) or the fold's AP. */
static void keep_fit(const voc_ctx *v, const fit_task *ft, size_t c, svm_model *m)
{
    size_t dim = v->train->dim, folds = (size_t)v->o->folds;
    m->w[dim] *= m->bias; /* VISSL's models hold the intercept itself */
    if (!ft->in)
        memcpy(v->res->models + (ft->job * v->o->ncosts + c) * (dim + 1), m->w, (dim + 1) * sizeof *m->w);
    else
        v->fold_ap[(ft->job * v->o->ncosts + c) * folds + (size_t)ft->fold] = held_out_ap(v, ft, m->w);
}

/* Fits of one group of tasks: every cost in ascending order, each task warm-started from
 * its own previous solution. */
static int run_group(const voc_ctx *v, const fit_task *group, size_t ntasks, char **err)
{
    const svm_data *d = v->train;
    svm_problem prob = {.x = d->x, .dim = d->dim, .stride = d->dim, .n = d->n};
    svm_task *tasks = xcalloc(ntasks, sizeof *tasks);
    for (size_t k = 0; k < ntasks; k++)
        tasks[k] = (svm_task){.y = v->jobs[group[k].job].y, .in = group[k].in,
                              .alpha = xcalloc(d->n, sizeof(double))};
    int rc = 0;
    for (size_t k = 0; k < v->o->ncosts && rc == 0; k++) {
        size_t c = v->order[k];
        svm_params p = svm_params_for(v->o, v->o->costs[c]);
        rc = svm_fit_tasks(&prob, &p, tasks, ntasks, err);
        for (size_t t = 0; t < ntasks && rc == 0; t++) {
            keep_fit(v, &group[t], c, &tasks[t].model);
            svm_model_free(&tasks[t].model);
        }
    }
    for (size_t k = 0; k < ntasks; k++)
        free(tasks[k].alpha);
    free(tasks);
    return rc;
}

/* A fold's training rows, or NULL when they hold one label only: sklearn's fit fails there
 * and the fold scores NaN. */
static uint8_t *fold_rows(const class_job *job, size_t n, int fold)
{
    uint8_t *in = xmalloc(n);
    bool pos = false, neg = false;
    for (size_t i = 0; i < n; i++) {
        in[i] = job->fold[i] != fold;
        pos |= in[i] && job->y[i] == 1;
        neg |= in[i] && job->y[i] != 1;
    }
    if (pos && neg)
        return in;
    free(in);
    return NULL;
}

/* Every fit to make: per class, all rows, then each fold that can be fitted. */
static fit_task *plan_tasks(const voc_ctx *v, size_t *ntasks)
{
    const svm_opts *o = v->o;
    fit_task *tasks = xcalloc(v->res->ncls * (size_t)(o->folds + 1) + 1, sizeof *tasks);
    size_t n = 0;
    for (size_t j = 0; j < v->res->ncls; j++) {
        if (!v->jobs[j].train)
            continue;
        tasks[n++] = (fit_task){.job = j, .fold = o->folds};
        for (int f = 0; v->jobs[j].fold && f < o->folds; f++) {
            uint8_t *in = fold_rows(&v->jobs[j], v->train->n, f);
            if (in)
                tasks[n++] = (fit_task){.job = j, .fold = f, .in = in};
            else
                for (size_t c = 0; c < o->ncosts; c++)
                    v->fold_ap[(j * o->ncosts + c) * (size_t)o->folds + (size_t)f] = NAN;
        }
    }
    *ntasks = n;
    return tasks;
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

/* Labels, folds, reuse and skips of every class. */
static void plan_classes(const svm_opts *o, const svm_data *d, const char *outdir, class_job *jobs, svm_result *res)
{
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
    }
}

/* A group's tasks hold their solver state at once (α, the active set, the weights): at most
 * this much of it, so that a benchmark with many classes on many rows (1000 classes of
 * ImageNet: 4000 tasks of 1.28 M rows) runs in bounded memory. */
#define GROUP_STATE_BYTES (256u << 20)

/* One group per thread, more when the groups' solver state would outgrow the budget. */
static size_t group_count(size_t ntasks, size_t n, size_t dim, int threads)
{
    size_t per_task = n * (sizeof(double) + 1) + dim * (sizeof(double) + 2 * sizeof(float));
    size_t fit = GROUP_STATE_BYTES / per_task, groups = (size_t)threads;
    if (fit == 0)
        fit = 1;
    if ((ntasks + fit - 1) / fit > groups)
        groups = (ntasks + fit - 1) / fit;
    return ntasks < groups ? (ntasks ? ntasks : 1) : groups;
}

/* Deal the tasks into groups of about equal work: a fold's fit has (folds − 1) / folds of
 * the rows, an all-rows fit all of them; each task goes to the group with the least work so
 * far (all-rows fits first). */
static void split_tasks(const fit_task *tasks, size_t ntasks, size_t n, int folds, fit_task **members,
                        size_t *sizes, size_t groups)
{
    size_t *work = xcalloc(groups, sizeof *work);
    for (size_t g = 0; g < groups; g++)
        members[g] = xcalloc(ntasks + 1, sizeof **members);
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < ntasks; k++) {
            bool all = !tasks[k].in;
            if (all != (pass == 0))
                continue;
            size_t g = 0;
            for (size_t h = 1; h < groups; h++)
                if (work[h] < work[g])
                    g = h;
            members[g][sizes[g]++] = tasks[k];
            work[g] += all ? n * (size_t)folds : n * (size_t)(folds - 1);
        }
    free(work);
}

static int train_all(const svm_opts *o, const svm_data *d, const char *outdir, svm_result *res, char **err)
{
    class_job *jobs = xcalloc(res->ncls, sizeof *jobs);
    plan_classes(o, d, outdir, jobs, res);
    voc_ctx v = {.o = o, .train = d, .jobs = jobs, .order = svm_cost_order(o->costs, o->ncosts), .res = res};
    v.fold_ap = xcalloc(res->ncls * o->ncosts * (size_t)o->folds + 1, sizeof *v.fold_ap);
    size_t ntasks;
    fit_task *tasks = plan_tasks(&v, &ntasks);
    int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    size_t groups = group_count(ntasks, d->n, d->dim, threads);
    char **errs = xcalloc(groups, sizeof *errs);
    fit_task **members = xcalloc(groups, sizeof *members);
    size_t *sizes = xcalloc(groups, sizeof *sizes);
    split_tasks(tasks, ntasks, d->n, o->folds, members, sizes, groups);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t g = 0; g < groups; g++)
        if (sizes[g])
            run_group(&v, members[g], sizes[g], &errs[g]);
    int rc = 0;
    for (size_t g = 0; g < groups; g++) {
        if (errs[g] && rc == 0)
            rc = report_failure(err, "%s", errs[g]);
        free(errs[g]);
        free(members[g]);
    }
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
    for (size_t k = 0; k < ntasks; k++)
        free(tasks[k].in);
    for (size_t j = 0; j < res->ncls; j++) {
        free(jobs[j].y);
        free(jobs[j].fold);
    }
    free(tasks);
    free(members);
    free(sizes);
    free(errs);
    free(jobs);
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

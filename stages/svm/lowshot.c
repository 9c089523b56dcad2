/*
 * lowshot.c — VISSL's SVMLowShotTrainer (see svm.h): SVMs trained on k examples per class,
 * for several independent samples, tested on the whole test set, then aggregate_stats.
 *
 * The samples: a target matrix per (sample s, k) in the VOC form, −1 for rows left out.
 * When {sample_dir}/{prefix}_sample{s}_k{k}.npy exists (e.g. written by VISSL's
 * extra_scripts/create_low_shot_samples.py) it is used as it is, so a user gets VISSL's exact
 * samples; otherwise it is drawn with lib/rng.h from the seed (stream: seed, purpose
 * BENCHMARK, epoch = s, sample index = k, position = class) and written there.
 *
 * The work: one task per (k, s, class), each a chain of fits over the costs in ascending
 * order with warm starts, run in parallel; a task scores its test AP per cost as it goes, so
 * no model needs to stay in memory.
 */
#include "ap.h"
#include "log.h"
#include "npy.h"
#include "rng.h"
#include "svm/svm.h"
#include "timer.h"
#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- samples -------------------------------------------------------------------------------- */

/* `want` distinct rows of `pool` (size n), drawn without replacement: a partial Fisher-Yates
 * shuffle that leaves them in pool[0 .. want-1]. */
static void draw_rows(rng_stream *r, uint32_t *pool, size_t n, size_t want)
{
    for (size_t i = 0; i < want; i++) {
        size_t j = i + (size_t)rng_randint(r, 0, (int64_t)(n - i));
        uint32_t t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }
}

/* Rows of column c whose target is `value`, into pool; returns how many. */
static size_t rows_with(const int8_t *t, size_t n, size_t C, size_t c, int8_t value, uint32_t *pool)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i * C + c] == value)
            pool[m++] = (uint32_t)i;
    return m;
}

int svm_lowshot_sample(svm_lowshot_style style, const int8_t *t, size_t n, size_t C, int k, uint64_t seed,
                       int sample, int8_t *out, char **err)
{
    if (C > 65535)
        return report_failure(err, "low-shot sampling supports at most 65535 classes, not %zu", C);
    memset(out, -1, n * C);
    uint32_t *pool = xmalloc((n + 1) * sizeof *pool);
    int rc = 0;
    for (size_t c = 0; c < C && rc == 0; c++) {
        rng_stream r;
        rng_stream_init(&r, (rng_key){.seed = seed, .purpose = RNG_PURPOSE_BENCHMARK, .epoch = (uint32_t)sample,
                                       .sample_index = (uint64_t)k, .transform_pos = (uint32_t)c});
        size_t pos = rows_with(t, n, C, c, 1, pool);
        if (style == LOWSHOT_PLACES && pos == 0)
            continue; /* a class absent from the training set is not a class of the benchmark */
        if (pos < (size_t)k) {
            rc = report_failure(err, "class %zu has %zu positive rows, fewer than k = %d", c, pos, k);
            break;
        }
        draw_rows(&r, pool, pos, (size_t)k);
        for (size_t i = 0; i < (size_t)k; i++) {
            if (style == LOWSHOT_PLACES) /* the image's whole one-hot row: one-vs-rest for every class */
                memcpy(out + (size_t)pool[i] * C, t + (size_t)pool[i] * C, C);
            else
                out[(size_t)pool[i] * C + c] = 1;
        }
        if (style == LOWSHOT_PLACES)
            continue;
        size_t negs = rows_with(t, n, C, c, 0, pool), want = (C - 1) * (size_t)k;
        if (negs < want) {
            rc = report_failure(err, "class %zu has %zu negative rows, fewer than (C-1)*k = %zu", c, negs, want);
            break;
        }
        draw_rows(&r, pool, negs, want);
        for (size_t i = 0; i < want; i++)
            out[(size_t)pool[i] * C + c] = 0;
    }
    free(pool);
    return rc;
}

/* A sample file someone else wrote (VISSL's int32 n × C): any integer dtype, values −1/0/1;
 * Places style also takes one column of class indices (−1: left out). */
static int read_sample(const char *path, svm_lowshot_style style, size_t n, size_t C, int8_t *out, char **err)
{
    npy_array a = {0};
    if (npy_read(path, &a, err))
        return -1;
    int rc = 0;
    size_t cols = a.ndim == 2 ? a.shape[1] : 1;
    bool indices = style == LOWSHOT_PLACES && cols == 1 && C > 1;
    if (a.ndim < 1 || a.ndim > 2 || a.shape[0] != n || (!indices && cols != C))
        rc = report_failure(err, "%s: shape does not match the %zu training rows × %zu classes", path, n, C);
    for (size_t i = 0; rc == 0 && i < a.count; i++) {
        int64_t v;
        switch (a.dtype) {
        case NPY_I1: v = ((const int8_t *)a.data)[i]; break;
        case NPY_I2: v = ((const int16_t *)a.data)[i]; break;
        case NPY_I4: v = ((const int32_t *)a.data)[i]; break;
        case NPY_I8: v = ((const int64_t *)a.data)[i]; break;
        default:
            rc = report_failure(err, "%s: dtype %s, expected signed integers", path, npy_dtype_name(a.dtype));
            continue;
        }
        if (indices) {
            if (v >= (int64_t)C)
                rc = report_failure(err, "%s: row %zu: class %lld, but there are %zu classes", path, i, (long long)v, C);
            for (size_t c = 0; c < C; c++)
                out[i * C + c] = v < 0 ? -1 : v == (int64_t)c;
        } else if (v < -1 || v > 1) {
            rc = report_failure(err, "%s: row %zu: value %lld is not 1, 0 or -1", path, i / C, (long long)v);
        } else {
            out[i] = (int8_t)v;
        }
    }
    npy_close(&a);
    return rc;
}

/* The sample of (s, k): read or drawn and written. -1 with *err when it cannot be had. */
static int get_sample(const svm_opts *o, const svm_data *d, const char *sample_dir, const char *prefix, int s, int k,
                      int8_t *out, char **err)
{
    char *name = xasprintf("%s_sample%d_k%d.npy", prefix, s, k);
    char *path = path_join(sample_dir, name);
    free(name);
    int rc;
    if (path_exists(path)) {
        log_info("using the low-shot sample %s", path);
        rc = read_sample(path, o->lowshot_style, d->n, d->C, out, err);
    } else if ((rc = svm_lowshot_sample(o->lowshot_style, d->t, d->n, d->C, k, o->seed, s, out, err)) == 0) {
        int32_t *v = xmalloc((d->n * d->C + 1) * sizeof *v);
        for (size_t i = 0; i < d->n * d->C; i++)
            v[i] = out[i];
        size_t shape[2] = {d->n, d->C};
        rc = npy_write(path, NPY_I4, 2, shape, v, err);
        free(v);
    }
    free(path);
    return rc;
}

/* ---- training and testing ------------------------------------------------------------------- */

typedef struct {
    size_t ki, si, cls;
    char *err;
} ls_task;

typedef struct {
    const svm_opts *o;
    const svm_data *train, *test;
    int8_t **samples;   /* nk × nsamples, NULL when skipped */
    size_t *order;
    double *cls_ap;     /* nk × nsamples × C × ncosts: test AP (−1: none) */
    const char *outdir;
} ls_ctx;

static char *ls_model_name(const ls_ctx *v, const ls_task *t, size_t c)
{
    char cost[40];
    svm_cost_name(v->o->costs[c], cost, sizeof cost);
    return xasprintf("cls%zu_cost%s_sample%d_k%d.npy", t->cls, cost, v->o->sample_inds[t->si], v->o->k_values[t->ki]);
}

/* The model of one cost from its file, when reuse is allowed and it fits. */
static bool ls_load(const ls_ctx *v, const ls_task *t, size_t c, double *w)
{
    if (v->o->force_retrain)
        return false;
    char *name = ls_model_name(v, t, c), *path = path_join(v->outdir, name);
    npy_array a = {0};
    bool ok = path_exists(path) && npy_read(path, &a, NULL) == 0 && a.dtype == NPY_F8 &&
              a.count == v->train->dim + 1;
    if (ok)
        memcpy(w, a.data, a.nbytes);
    npy_close(&a);
    free(path);
    free(name);
    return ok;
}

static void ls_run(const ls_ctx *v, ls_task *t)
{
    const svm_data *d = v->train, *te = v->test;
    const int8_t *s = v->samples[t->ki * v->o->nsamples + t->si];
    size_t dim = d->dim, C = d->C, n = 0;
    double *ap = v->cls_ap + ((t->ki * v->o->nsamples + t->si) * C + t->cls) * v->o->ncosts;
    for (size_t c = 0; c < v->o->ncosts; c++)
        ap[c] = -1;
    uint32_t *rows = xmalloc((d->n + 1) * sizeof *rows);
    int8_t *y = xmalloc(d->n + 1);
    size_t pos = 0;
    for (size_t i = 0; i < d->n; i++) {
        int8_t l = s[i * C + t->cls];
        y[i] = l == 1 ? 1 : -1;
        if (l != -1)
            rows[n++] = (uint32_t)i, pos += l == 1;
    }
    float *scores = xmalloc((te->n + 1) * sizeof *scores);
    int8_t *tt = xmalloc(te->n + 1);
    for (size_t i = 0; i < te->n; i++)
        tt[i] = te->t[i * C + t->cls];
    double *alpha = xcalloc(n + 1, sizeof *alpha), *w = xmalloc((dim + 1) * sizeof *w);
    svm_problem prob = {.x = d->x, .dim = dim, .stride = dim, .y = y, .rows = rows, .n = n};
    for (size_t k = 0; pos > 0 && pos < n && k < v->o->ncosts && !t->err; k++) {
        size_t c = v->order[k];
        if (!ls_load(v, t, c, w)) {
            svm_params p = svm_params_for(v->o, v->o->costs[c]);
            svm_model m = {0};
            if (svm_fit(&prob, &p, alpha, &m, &t->err) != 0)
                break;
            memcpy(w, m.w, (dim + 1) * sizeof *w);
            w[dim] *= m.bias;
            svm_model_free(&m);
            char *name = ls_model_name(v, t, c);
            size_t len = dim + 1;
            svm_save_f64(v->outdir, name, 1, &len, w, &t->err);
            free(name);
        }
        for (size_t i = 0; i < te->n; i++)
            scores[i] = (float)svm_decide(w, te->x + i * dim, dim);
        ap[c] = ap_voc(scores, tt, te->n, 1);
    }
    free(rows);
    free(y);
    free(scores);
    free(tt);
    free(alpha);
    free(w);
}

/* Per (k, s): the mean over classes of the test AP per cost (classes with AP −1 left out). */
static void mean_over_classes(const ls_ctx *v, svm_lowshot_result *res)
{
    size_t C = v->train->C, nc = v->o->ncosts;
    for (size_t ks = 0; ks < res->nk * res->nsamples; ks++)
        for (size_t c = 0; c < nc; c++) {
            double sum = 0;
            size_t m = 0;
            for (size_t cls = 0; v->samples[ks] && cls < C; cls++) {
                double a = v->cls_ap[(ks * C + cls) * nc + c];
                if (a != -1)
                    sum += a, m++;
            }
            res->aps[ks * nc + c] = m ? sum / (double)m : NAN;
        }
}

static double round2(double x) /* Python's round(x, 2): correctly rounded decimal */
{
    char b[64];
    snprintf(b, sizeof b, "%.2f", x);
    return strtod(b, NULL);
}

void svm_aggregate_stats(const double *aps, size_t nk, size_t nsamples, size_t ncosts, double *stats, double *mean,
                         double *min, double *max, double *std)
{
    double *mu = xmalloc((ncosts + 1) * sizeof *mu), *lo = xmalloc((ncosts + 1) * sizeof *lo),
           *hi = xmalloc((ncosts + 1) * sizeof *hi), *sd = xmalloc((ncosts + 1) * sizeof *sd);
    for (size_t k = 0; k < nk; k++) {
        for (size_t c = 0; c < ncosts; c++) {
            double sum = 0, sq = 0;
            size_t m = 0;
            lo[c] = INFINITY;
            hi[c] = -INFINITY;
            for (size_t s = 0; s < nsamples; s++) {
                double a = aps[(k * nsamples + s) * ncosts + c];
                if (isnan(a))
                    continue;
                sum += a, m++;
                lo[c] = fmin(lo[c], a);
                hi[c] = fmax(hi[c], a);
            }
            mu[c] = m ? sum / (double)m : NAN;
            for (size_t s = 0; s < nsamples; s++) {
                double a = aps[(k * nsamples + s) * ncosts + c];
                if (!isnan(a))
                    sq += (a - mu[c]) * (a - mu[c]);
            }
            sd[c] = m ? sqrt(sq / (double)m) : NAN; /* numpy's std, ddof = 0 */
            if (!m)
                lo[c] = hi[c] = NAN;
        }
        size_t best = svm_argmax(mu, ncosts);
        double row[4] = {mu[best], lo[best], hi[best], sd[best]};
        for (int i = 0; i < 4; i++)
            stats[k * 4 + (size_t)i] = round2(100.0 * row[i]);
        if (mean)
            memcpy(mean + k * ncosts, mu, ncosts * sizeof *mu);
        if (min)
            memcpy(min + k * ncosts, lo, ncosts * sizeof *lo);
        if (max)
            memcpy(max + k * ncosts, hi, ncosts * sizeof *hi);
        if (std)
            memcpy(std + k * ncosts, sd, ncosts * sizeof *sd);
    }
    free(mu);
    free(lo);
    free(hi);
    free(sd);
}

static int save_lowshot(const svm_opts *o, const char *outdir, svm_lowshot_result *res, char **err)
{
    size_t nc = o->ncosts, shape1[2] = {1, nc}, shape[2] = {res->nk, nc};
    for (size_t ki = 0; ki < res->nk; ki++)
        for (size_t si = 0; si < res->nsamples; si++) {
            const double *row = res->aps + (ki * res->nsamples + si) * nc;
            if (isnan(row[0]))
                continue;
            char *name = xasprintf("test_ap_sample%d_k%d.npy", o->sample_inds[si], o->k_values[ki]);
            int rc = svm_save_f64(outdir, name, 2, shape1, row, err);
            free(name);
            if (rc)
                return -1;
        }
    double *v[4];
    for (int i = 0; i < 4; i++)
        v[i] = xmalloc((res->nk * nc + 1) * sizeof *v[i]);
    svm_aggregate_stats(res->aps, res->nk, res->nsamples, nc, res->stats, v[0], v[1], v[2], v[3]);
    static const char *const names[4] = {"test_ap_mean.npy", "test_ap_min.npy", "test_ap_max.npy", "test_ap_std.npy"};
    int rc = 0;
    for (int i = 0; i < 4; i++) {
        if (rc == 0)
            rc = svm_save_f64(outdir, names[i], 2, shape, v[i], err);
        free(v[i]);
    }
    return rc;
}

int svm_lowshot(const svm_opts *o, const svm_data *train, const svm_data *test, const char *sample_dir,
                const char *prefix, const char *outdir, svm_lowshot_result *res, char **err)
{
    memset(res, 0, sizeof *res);
    if (train->dim != test->dim)
        return report_failure(err, "train features have %zu columns, test features %zu", train->dim, test->dim);
    if (train->C != test->C)
        return report_failure(err, "train targets have %zu classes, test targets %zu", train->C, test->C);
    if (make_dirs(outdir, 0777, err) || make_dirs(sample_dir, 0777, err))
        return -1;
    double t0 = now_seconds();
    size_t nks = o->nk * o->nsamples, C = train->C;
    res->nk = o->nk;
    res->nsamples = o->nsamples;
    res->ncosts = o->ncosts;
    res->aps = xmalloc((nks * o->ncosts + 1) * sizeof *res->aps);
    res->stats = xmalloc((o->nk * 4 + 1) * sizeof *res->stats);
    ls_ctx v = {.o = o, .train = train, .test = test, .outdir = outdir, .order = svm_cost_order(o->costs, o->ncosts)};
    v.samples = xcalloc(nks + 1, sizeof *v.samples);
    v.cls_ap = xmalloc((nks * C * o->ncosts + 1) * sizeof *v.cls_ap);
    ls_task *tasks = xcalloc(nks * C + 1, sizeof *tasks);
    size_t ntasks = 0;
    int rc = 0;
    for (size_t ki = 0; ki < o->nk && rc == 0; ki++)
        for (size_t si = 0; si < o->nsamples && rc == 0; si++) {
            int8_t *s = xmalloc(train->n * C + 1);
            char *why = NULL;
            if (get_sample(o, train, sample_dir, prefix, o->sample_inds[si], o->k_values[ki], s, &why)) {
                log_warn("low-shot sample %d, k = %d skipped: %s", o->sample_inds[si], o->k_values[ki], why);
                free(why);
                free(s);
                continue;
            }
            v.samples[ki * o->nsamples + si] = s;
            for (size_t c = 0; c < C; c++)
                tasks[ntasks++] = (ls_task){.ki = ki, .si = si, .cls = c};
        }
    int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t i = 0; i < ntasks; i++)
        ls_run(&v, &tasks[i]);
    for (size_t i = 0; i < ntasks; i++) {
        if (tasks[i].err && rc == 0)
            rc = report_failure(err, "class %zu: %s", tasks[i].cls, tasks[i].err);
        free(tasks[i].err);
    }
    if (rc == 0) {
        mean_over_classes(&v, res);
        rc = save_lowshot(o, outdir, res, err);
    }
    res->seconds = now_seconds() - t0;
    for (size_t i = 0; i < nks; i++)
        free(v.samples[i]);
    free(v.samples);
    free(v.cls_ap);
    free(v.order);
    free(tasks);
    return rc;
}

void svm_lowshot_result_free(svm_lowshot_result *r)
{
    free(r->aps);
    free(r->stats);
    memset(r, 0, sizeof *r);
}

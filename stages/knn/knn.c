/*
 * knn.c — VISSL's kNN benchmark (knn.h), in four steps:
 *
 *   1. check and normalise: row norms in double (finding NaN/inf rows), torch's normalize
 *      when asked, and a bound that keeps every similarity within float32;
 *   2. neighbours: the test rows go in waves of blocks; each task (a test block × a shard of
 *      train rows) runs sgemm on block_test × block_train tiles and keeps, per test row, a
 *      heap of its k best (similarity, train index) pairs; a row's shards are then merged;
 *   3. votes: the k neighbours sorted by similarity, weights exp(sim/σ) in float32 as torch
 *      computes them, summed per class;
 *   4. ranking: the first five classes in torch's sort order (knn_rank_classes), hits counted.
 *
 * "Better" between two neighbours is (higher similarity, then lower train index): a total
 * order, so whichever tiles, shards and threads a row's candidates come through, it keeps the
 * same k.
 *
 * Nothing inside an OpenMP region may die (exit() from several threads at once is undefined
 * and crashes): the workers allocate with malloc, note a failure, and knn_run reports it
 * once the region is over.
 */
#include "knn/knn.h"

#include "knn/torch_sort.h"
#include "timer.h"
#include "util.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

enum {
    DEFAULT_BLOCK_TEST = 256,   /* rows of a test block: one task's heaps and sgemm's M */
    DEFAULT_BLOCK_TRAIN = 1024, /* train rows per sgemm: the tile is 256 × 1024 floats (1 MiB) */
    TASKS_PER_THREAD = 4,       /* test blocks per wave and thread, at most */
};
#define HEAP_BUDGET ((size_t)1 << 30) /* bytes of top-k heaps per wave, where k allows */

/* ---- 1. checks and normalisation ---------------------------------------------------------- */

static const char *bad_label_hint = "labels must be class indices 0, 1, … (one integer per row)";

/* Every label is a class index below KNN_MAX_CLASSES: the class count (max + 1) sizes
 * buffers, so a huge label would overflow it or ask for terabytes. */
static int check_labels(const feat_set *f, const char *split, char **err)
{
    if (f->ntargets != 1)
        return report_failure(err,
                              "%s targets have %zu columns; kNN needs one label per row (N or N × 1), "
                              "not multi-label targets",
                              split, f->ntargets);
    for (size_t r = 0; r < f->n; r++) {
        if (f->targets[r] < 0)
            return report_failure(err, "%s targets: row %zu has label %lld; %s", split, r,
                                  (long long)f->targets[r], bad_label_hint);
        if (f->targets[r] >= KNN_MAX_CLASSES)
            return report_failure(err, "%s targets: row %zu has label %lld, past the %d classes kNN supports; %s",
                                  split, r, (long long)f->targets[r], KNN_MAX_CLASSES, bad_label_hint);
    }
    return 0;
}

int knn_check(const feat_set *train, const feat_set *test, char **err)
{
    if (train->n == 0 || test->n == 0)
        return report_failure(err, "the %s split has no rows; kNN needs train and test features",
                              train->n == 0 ? "train" : "test");
    if (train->dim == 0)
        return report_failure(err, "the features have width 0");
    if (train->dim != test->dim)
        return report_failure(err,
                              "train features are %zu wide but test features %zu; both must come from "
                              "the same layer",
                              train->dim, test->dim);
    if (train->n > INT32_MAX)
        return report_failure(err, "%zu train rows: more than kNN supports (%d)", train->n, INT32_MAX);
    if (check_labels(train, "train", err) || check_labels(test, "test", err))
        return -1;
    return 0;
}

/* Euclidean norm of each row, in double. -1 with *bad_row at the first non-finite one. */
static int row_norms(const float *x, size_t n, size_t dim, double *norm, size_t *bad_row)
{
    size_t first_bad = SIZE_MAX;
#pragma omp parallel for schedule(static) reduction(min : first_bad)
    for (size_t r = 0; r < n; r++) {
        const float *row = x + r * dim;
        double s = 0;
        for (size_t j = 0; j < dim; j++)
            s += (double)row[j] * row[j];
        norm[r] = sqrt(s);
        if (!isfinite(s) && r < first_bad)
            first_bad = r;
    }
    *bad_row = first_bad;
    return first_bad == SIZE_MAX ? 0 : -1;
}

/* torch: x / max(‖x‖, eps) with the norm in float32 and a float32 division. */
static void normalize_rows(float *x, size_t n, size_t dim, const double *norm)
{
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < n; r++) {
        float d = fmaxf((float)norm[r], 1e-12f);
        for (size_t j = 0; j < dim; j++)
            x[r * dim + j] /= d;
    }
}

void knn_l2_normalize(float *x, size_t n, size_t dim)
{
    double *norm = xmalloc((n ? n : 1) * sizeof *norm);
    size_t bad;
    row_norms(x, n, dim, norm, &bad);
    normalize_rows(x, n, dim, norm);
    free(norm);
}

static double max_of(const double *v, size_t n)
{
    double m = 0;
    for (size_t r = 0; r < n; r++)
        m = fmax(m, v[r]);
    return m;
}

/* Norms (and finiteness) of one split; normalise it when asked. Returns the largest norm
 * after normalisation, or -1 with *err. */
static double prepare_split(feat_set *f, const char *split, bool l2_norm, char **err)
{
    double *norm = xmalloc(f->n * sizeof *norm);
    size_t bad;
    if (row_norms(f->features, f->n, f->dim, norm, &bad)) {
        free(norm);
        report_failure(err, "%s features: row %zu holds NaN or infinity; re-extract the features", split, bad);
        return -1;
    }
    double largest = max_of(norm, f->n);
    if (l2_norm) {
        normalize_rows(f->features, f->n, f->dim, norm);
        largest = largest > 0 ? 1.0 : 0.0;
    }
    free(norm);
    return largest;
}

/* ---- 2. neighbours ------------------------------------------------------------------------ */

typedef struct {
    float sim;
    int32_t idx;
} neighbour;

/* a is a better neighbour than b: more similar, or as similar and earlier in the train set. */
static bool better(neighbour a, neighbour b)
{
    return a.sim > b.sim || (a.sim == b.sim && a.idx < b.idx);
}

/* A row's k best so far: a heap with the worst kept neighbour at the root. */
typedef struct {
    neighbour *h;
    int64_t n, k;
} topk_heap;

static void swap_nb(neighbour *a, neighbour *b)
{
    neighbour t = *a;
    *a = *b;
    *b = t;
}

static void heap_sift_down(topk_heap *t, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < t->n && better(t->h[worst], t->h[l]))
            worst = l;
        if (r < t->n && better(t->h[worst], t->h[r]))
            worst = r;
        if (worst == i)
            return;
        swap_nb(&t->h[i], &t->h[worst]);
        i = worst;
    }
}

static void heap_offer(topk_heap *t, neighbour c)
{
    if (t->n < t->k) {
        int64_t i = t->n++;
        t->h[i] = c;
        while (i > 0 && better(t->h[(i - 1) / 2], t->h[i])) {
            swap_nb(&t->h[(i - 1) / 2], &t->h[i]);
            i = (i - 1) / 2;
        }
    } else if (better(c, t->h[0])) {
        t->h[0] = c;
        heap_sift_down(t, 0);
    }
}

/* One row of a similarity tile into its heap. Most values lose against the root, so the test
 * against its similarity comes first. */
static void offer_row(topk_heap *t, const float *sims, size_t cols, size_t first_idx)
{
    for (size_t j = 0; j < cols; j++) {
        if (t->n == t->k && sims[j] < t->h[0].sim)
            continue;
        heap_offer(t, (neighbour){sims[j], (int32_t)(first_idx + j)});
    }
}

static void sgemm_nt(const float *a, const float *b, size_t m, size_t n, size_t k, float *c)
{
    dnnl_status_t st = dnnl_sgemm('N', 'T', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, 1.0f, a, (dnnl_dim_t)k, b,
                                  (dnnl_dim_t)k, 0.0f, c, (dnnl_dim_t)n);
    if (st != dnnl_success) /* only for arguments we never pass */
        abort();
}

typedef struct {
    const feat_set *train, *test;
    int64_t k;
    size_t block_test, block_train;
} search;

/* The k best of train rows [lo, hi) for test rows [row0, row0 + rows): heaps[r] per row.
 * Runs on a worker thread, so it allocates without dying: false when out of memory. */
static bool search_shard(const search *s, size_t row0, size_t rows, size_t lo, size_t hi, topk_heap *heaps)
{
    size_t dim = s->test->dim;
    float *tile = malloc(s->block_test * s->block_train * sizeof *tile);
    if (!tile)
        return false;
    for (size_t c0 = lo; c0 < hi; c0 += s->block_train) {
        size_t cols = hi - c0 < s->block_train ? hi - c0 : s->block_train;
        sgemm_nt(s->test->features + row0 * dim, s->train->features + c0 * dim, rows, cols, dim, tile);
        for (size_t r = 0; r < rows; r++)
            offer_row(&heaps[r], tile + r * cols, cols, c0);
    }
    free(tile);
    return true;
}

/* ---- 3 and 4. votes and ranking ----------------------------------------------------------- */

static int by_neighbour_rank(const void *a, const void *b)
{
    neighbour x = *(const neighbour *)a, y = *(const neighbour *)b;
    return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

/* knn_rank_classes with the sort's buffers (num_classes each) given: the worker threads
 * allocate theirs up front, where a failure can be reported rather than exit. */
static void rank_classes(const float *scores, int64_t num_classes, int npred, int64_t *out, float *all, int64_t *idx)
{
    /* The (npred + 1) largest values, largest first. When they are all different, torch's
     * order of the first npred is forced whatever its tie rules: no need to sort them all. */
    int take = npred < num_classes ? npred + 1 : npred, kept = 0;
    float v[KNN_TOP5 + 1];
    int64_t c_of[KNN_TOP5 + 1];
    for (int64_t c = 0; c < num_classes; c++) {
        if (kept == take && !(scores[c] > v[take - 1]))
            continue;
        int at = kept < take ? kept++ : take - 1;
        while (at > 0 && scores[c] > v[at - 1]) {
            v[at] = v[at - 1];
            c_of[at] = c_of[at - 1];
            at--;
        }
        v[at] = scores[c];
        c_of[at] = c;
    }
    bool distinct = true;
    for (int j = 1; j < take; j++)
        distinct = distinct && v[j - 1] > v[j];
    if (distinct) {
        memcpy(out, c_of, (size_t)npred * sizeof *out);
        return;
    }
    /* Ties decide the order: run torch's sort over every class. */
    memcpy(all, scores, (size_t)num_classes * sizeof *all);
    for (int64_t c = 0; c < num_classes; c++)
        idx[c] = c;
    torch_sort_desc(all, idx, (size_t)num_classes);
    memcpy(out, idx, (size_t)npred * sizeof *out);
}

void knn_rank_classes(const float *scores, int64_t num_classes, int npred, int64_t *out)
{
    float *all = xmalloc((size_t)num_classes * sizeof *all);
    int64_t *idx = xmalloc((size_t)num_classes * sizeof *idx);
    rank_classes(scores, num_classes, npred, out, all, idx);
    free(all);
    free(idx);
}

/* Scores per class of one test row from its k neighbours (sorted best first); true when the
 * float32 weights overflowed and the shifted ones were used. */
static bool class_scores(const neighbour *nb, int64_t k, const int64_t *train_labels, float sigma_f, double sigma,
                         double *acc, float *scores, int64_t num_classes)
{
    memset(acc, 0, (size_t)num_classes * sizeof *acc);
    bool overflow = false;
    for (int64_t j = 0; j < k && !overflow; j++)
        overflow = isinf(expf(nb[j].sim / sigma_f));
    for (int64_t j = 0; j < k; j++) {
        double w = overflow ? exp(((double)nb[j].sim - nb[0].sim) / sigma) : expf(nb[j].sim / sigma_f);
        acc[train_labels[nb[j].idx]] += w;
    }
    for (int64_t c = 0; c < num_classes; c++)
        scores[c] = (float)acc[c];
    return overflow;
}

typedef struct {
    const search *s;
    const knn_options *opt;
    knn_result *out;
} scoring;

/* One worker thread's buffers for finishing rows. They are allocated inside the parallel
 * region, where dying would mean exit() from several threads at once: a failure leaves
 * ok false, and the region's caller reports it. */
typedef struct {
    neighbour *merged;   /* k */
    double *acc;         /* num_classes */
    float *scores, *all; /* num_classes each; `all` and `idx` are the tie sort's */
    int64_t *idx;
    topk_heap *shards;   /* nshards */
    bool ok;
} row_work;

static row_work row_work_new(int64_t k, int64_t num_classes, int nshards)
{
    size_t c = (size_t)num_classes;
    row_work w = {malloc((size_t)k * sizeof *w.merged), malloc(c * sizeof *w.acc), malloc(c * sizeof *w.scores),
                  malloc(c * sizeof *w.all), malloc(c * sizeof *w.idx), malloc((size_t)nshards * sizeof *w.shards),
                  false};
    w.ok = w.merged && w.acc && w.scores && w.all && w.idx && w.shards;
    return w;
}

static void row_work_free(row_work *w)
{
    free(w->merged);
    free(w->acc);
    free(w->scores);
    free(w->all);
    free(w->idx);
    free(w->shards);
}

/* Merge a row's shard heaps (w->shards), vote, rank, count. Returns whether the weights
 * overflowed. */
static bool finish_row(const scoring *sc, size_t row, int nshards, row_work *w)
{
    int64_t k = sc->s->k;
    topk_heap m = {w->merged, 0, k};
    for (int sh = 0; sh < nshards; sh++)
        for (int64_t j = 0; j < w->shards[sh].n; j++)
            heap_offer(&m, w->shards[sh].h[j]);
    qsort(w->merged, (size_t)m.n, sizeof *w->merged, by_neighbour_rank);

    knn_result *r = sc->out;
    bool overflow = class_scores(w->merged, m.n, sc->s->train->targets, (float)sc->opt->sigma, sc->opt->sigma, w->acc,
                                 w->scores, r->num_classes);
    int64_t *pred = r->predictions + row * KNN_TOP5;
    rank_classes(w->scores, r->num_classes, r->npred, pred, w->all, w->idx);
    return overflow;
}

/* ---- the whole run ------------------------------------------------------------------------ */

static void count_hits(knn_result *r, const feat_set *test)
{
    r->top1_hits = r->top5_hits = 0;
    for (size_t i = 0; i < r->n_test; i++) {
        const int64_t *pred = r->predictions + i * KNN_TOP5;
        int64_t target = test->targets[i];
        r->top1_hits += pred[0] == target;
        for (int j = 0; j < r->npred; j++)
            r->top5_hits += pred[j] == target;
    }
    r->top1 = 100.0 * (double)r->top1_hits / (double)r->n_test;
    r->top5 = 100.0 * (double)r->top5_hits / (double)r->n_test;
}

/* Test blocks [b0, b0 + nb) of one wave, each split into nshards shards of the train rows.
 * 0, or -1 when a worker thread ran out of memory (the wave's results are then unusable);
 * no worker exits the process. */
static int run_wave(const scoring *sc, size_t b0, size_t nb, int nshards, neighbour *heap_mem, size_t *overflow)
{
    const search *s = sc->s;
    size_t bt = s->block_test, n_test = s->test->n, n_train = s->train->n;
    size_t shard_len = (n_train + (size_t)nshards - 1) / (size_t)nshards;
    int64_t k = s->k;
    size_t ntasks = nb * (size_t)nshards;
    topk_heap *heaps = xmalloc(ntasks * bt * sizeof *heaps);
    bool oom = false;

#pragma omp parallel for schedule(dynamic, 1) reduction(|| : oom)
    for (size_t t = 0; t < ntasks; t++) {
        size_t b = b0 + t / (size_t)nshards, sh = t % (size_t)nshards;
        size_t row0 = b * bt, rows = n_test - row0 < bt ? n_test - row0 : bt;
        size_t lo = sh * shard_len, hi = lo + shard_len < n_train ? lo + shard_len : n_train;
        topk_heap *h = heaps + t * bt;
        for (size_t r = 0; r < rows; r++)
            h[r] = (topk_heap){heap_mem + (t * bt + r) * (size_t)k, 0, k};
        if (lo < hi && !search_shard(s, row0, rows, lo, hi, h))
            oom = true;
    }

    size_t n_over = 0, row_end = (b0 + nb) * bt < n_test ? (b0 + nb) * bt : n_test;
#pragma omp parallel reduction(+ : n_over) reduction(|| : oom)
    {
        row_work w = row_work_new(k, sc->out->num_classes, nshards);
        oom = oom || !w.ok;
#pragma omp for schedule(dynamic, 16)
        for (size_t i = b0 * bt; i < row_end; i++) {
            if (!w.ok)
                continue; /* every thread must still pass through the loop */
            size_t b = i / bt, r = i % bt;
            for (int sh = 0; sh < nshards; sh++)
                w.shards[sh] = heaps[((b - b0) * (size_t)nshards + (size_t)sh) * bt + r];
            n_over += finish_row(sc, i, nshards, &w);
        }
        row_work_free(&w);
    }
    *overflow += n_over;
    free(heaps);
    return oom ? -1 : 0;
}

/* How the work is cut: rows per test block and train rows per sgemm, train shards per test
 * block (when there are fewer test blocks than threads), test blocks per wave. A wave's heaps
 * (blocks × shards × rows × k neighbours) stay within HEAP_BUDGET where they can: a large k
 * gets fewer rows per block, then fewer blocks per wave. */
typedef struct {
    size_t block_test, block_train, wave;
    int nshards;
} work_plan;

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

static work_plan make_plan(const knn_options *opt, size_t n_test, size_t n_train, int64_t k, int threads)
{
    size_t row_bytes = (size_t)k * sizeof(neighbour);
    work_plan p = {opt->block_test, opt->block_train ? opt->block_train : DEFAULT_BLOCK_TRAIN, 0, 1};
    if (!p.block_test) {
        size_t fit = HEAP_BUDGET / ((size_t)threads * row_bytes);
        p.block_test = fit >= DEFAULT_BLOCK_TEST ? DEFAULT_BLOCK_TEST : fit ? fit : 1;
    }
    size_t nblocks = ceil_div(n_test, p.block_test), ntrain_blocks = ceil_div(n_train, p.block_train);
    size_t shards = nblocks < (size_t)threads ? ceil_div((size_t)threads, nblocks) : 1;
    p.nshards = (int)(shards < ntrain_blocks ? shards : ntrain_blocks);
    size_t fit_blocks = HEAP_BUDGET / (p.block_test * (size_t)p.nshards * row_bytes);
    size_t most = (size_t)threads * TASKS_PER_THREAD;
    p.wave = fit_blocks < 1 ? 1 : fit_blocks < most ? fit_blocks : most;
    if (p.wave > nblocks)
        p.wave = nblocks;
    return p;
}

static int64_t max_label(const feat_set *f)
{
    int64_t m = 0;
    for (size_t r = 0; r < f->n; r++)
        m = f->targets[r] > m ? f->targets[r] : m;
    return m;
}

static int check_options(const knn_options *opt, char **err)
{
    if (!(opt->sigma > 0) || !isfinite(opt->sigma))
        return report_failure(err, "SIGMA must be a positive number, not %g", opt->sigma);
    if (opt->topk <= 0)
        return report_failure(err, "TOPK must be at least 1, not %lld", (long long)opt->topk);
    if (opt->threads < 0)
        return report_failure(err, "the thread count must be 0 (every core) or more, not %d", opt->threads);
    return 0;
}

int knn_run(feat_set *train, feat_set *test, const knn_options *opt, knn_result *out, char **err)
{
    memset(out, 0, sizeof *out);
    if (check_options(opt, err) || knn_check(train, test, err))
        return -1;
    double start = now_seconds();
    if (opt->threads > 0)
        omp_set_num_threads(opt->threads);
    double train_norm = prepare_split(train, "train", opt->l2_norm, err);
    double test_norm = train_norm < 0 ? -1 : prepare_split(test, "test", opt->l2_norm, err);
    if (train_norm < 0 || test_norm < 0)
        return -1;
    /* |sim| <= ‖a‖·‖b‖ (Cauchy–Schwarz): past FLT_MAX a tile could hold inf or NaN. */
    if (train_norm * test_norm > FLT_MAX / 2)
        return report_failure(err,
                              "the feature norms (up to %.3g train, %.3g test) are too large: their dot "
                              "products would overflow float32; L2-normalise them (L2_NORM_FEATS)",
                              train_norm, test_norm);

    out->n_train = train->n;
    out->n_test = test->n;
    out->dim = train->dim;
    out->num_classes = max_label(train) + 1;
    out->k = opt->topk < (int64_t)train->n ? opt->topk : (int64_t)train->n;
    out->npred = out->num_classes < KNN_TOP5 ? (int)out->num_classes : KNN_TOP5;
    out->predictions = xmalloc(test->n * KNN_TOP5 * sizeof *out->predictions);
    for (size_t i = 0; i < test->n * KNN_TOP5; i++)
        out->predictions[i] = -1;

    int threads = omp_get_max_threads();
    work_plan p = make_plan(opt, test->n, train->n, out->k, threads);
    search s = {train, test, out->k, p.block_test, p.block_train};
    scoring sc = {&s, opt, out};
    size_t nblocks = (test->n + p.block_test - 1) / p.block_test;
    neighbour *heap_mem = xmalloc_large(p.wave * (size_t)p.nshards * p.block_test * (size_t)out->k * sizeof *heap_mem);
    int rc = 0;
    for (size_t b0 = 0; b0 < nblocks && rc == 0; b0 += p.wave)
        rc = run_wave(&sc, b0, nblocks - b0 < p.wave ? nblocks - b0 : p.wave, p.nshards, heap_mem, &out->overflow_rows);
    free(heap_mem);
    if (rc) {
        knn_result_free(out);
        return report_failure(err,
                              "out of memory in the neighbour search (k = %lld, %lld classes, %d threads); "
                              "fewer --threads or a smaller TOPK need less",
                              (long long)out->k, (long long)out->num_classes, threads);
    }

    count_hits(out, test);
    out->seconds = now_seconds() - start;
    return 0;
}

void knn_result_free(knn_result *r)
{
    free(r->predictions);
    r->predictions = NULL;
}

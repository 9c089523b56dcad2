/*
 * svm.c — the pieces of VISSL's SVM protocol that do not fit a model (see svm.h): the SVM
 * config, targets in VOC form, row normalisation, Python's names for costs, sklearn's
 * StratifiedKFold and average_precision_score, numpy's argmax.
 *
 * The sklearn pieces follow sklearn 1.2.1 (model_selection/_split.py, metrics/_ranking.py)
 * step by step, because the cost VISSL picks depends on exactly which rows land in which
 * fold and on how tied scores are counted.
 */
#include "svm/svm.h"

#include "config.h"
#include "npy.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- options -------------------------------------------------------------------------------- */

static int *int_array(const int *v, size_t n)
{
    int *a = xmalloc((n ? n : 1) * sizeof *a);
    if (n)
        memcpy(a, v, n * sizeof *a);
    return a;
}

void svm_opts_default(svm_opts *o)
{
    static const int samples[] = {1, 2, 3, 4, 5};
    static const int ks[] = {1, 2, 4, 8, 16, 32, 64, 96};
    memset(o, 0, sizeof *o);
    o->costs = xmalloc(2 * sizeof *o->costs);
    o->costs[0] = 0.1;
    o->costs[1] = 0.01;
    o->ncosts = 2;
    o->folds = 3;
    o->normalize = true;
    o->loss = SVM_SQUARED_HINGE;
    o->penalty = SVM_PENALTY_L2;
    o->dual = true;
    o->max_iter = 2000;
    o->lowshot_style = LOWSHOT_VOC;
    o->sample_inds = int_array(samples, ARRAY_LEN(samples));
    o->nsamples = ARRAY_LEN(samples);
    o->k_values = int_array(ks, ARRAY_LEN(ks));
    o->nk = ARRAY_LEN(ks);
}

void svm_opts_free(svm_opts *o)
{
    free(o->costs);
    free(o->cls_list);
    free(o->sample_inds);
    free(o->k_values);
    memset(o, 0, sizeof *o);
}

static int check_costs(const svm_opts *o, char **err)
{
    if (o->ncosts == 0)
        return report_failure(err, "SVM.costs: no cost to try (costs_list is empty and base <= 0)");
    for (size_t i = 0; i < o->ncosts; i++)
        if (!(o->costs[i] > 0) || !isfinite(o->costs[i]))
            return report_failure(err, "SVM.costs: cost %g is not a positive finite number", o->costs[i]);
    return 0;
}

int svm_opts_set_costs(svm_opts *o, const char *list, char **err)
{
    free(o->costs);
    o->costs = NULL;
    o->ncosts = 0;
    size_t cap = 0;
    const char *p = list;
    while (*p) {
        char *end;
        errno = 0;
        double c = strtod(p, &end);
        if (end == p || errno || (*end && *end != ','))
            return report_failure(err, "--costs '%s': expected numbers separated by commas, e.g. 0.1,1,10", list);
        if (o->ncosts == cap)
            o->costs = xrealloc(o->costs, (cap = cap ? 2 * cap : 8) * sizeof *o->costs);
        o->costs[o->ncosts++] = c;
        p = *end ? end + 1 : end;
    }
    return check_costs(o, err);
}

/* A list of integers at SVM.key; -1 with *err when an item is not an integer. */
static int read_int_list(const cfg_node *svm, const char *key, int **out, size_t *n, char **err)
{
    const cfg_node *l = cfg_path(svm, key);
    if (!l)
        return 0;
    if (l->kind != CFG_LIST)
        return report_failure(err, "%s:%d: SVM.%s: expected a list of integers", l->file, l->line, key);
    free(*out);
    *out = xmalloc((l->len ? l->len : 1) * sizeof **out);
    *n = l->len;
    for (size_t i = 0; i < l->len; i++) {
        const cfg_node *it = l->items[i];
        if (it->kind != CFG_INT && !(it->kind == CFG_FLOAT && it->f == floor(it->f)))
            return report_failure(err, "%s:%d: SVM.%s[%zu]: expected an integer", it->file, it->line, key, i);
        (*out)[i] = (int)cfg_number(it);
    }
    return 0;
}

static int read_costs(const cfg_node *svm, svm_opts *o, char **err)
{
    const cfg_node *list = cfg_path(svm, "costs.costs_list");
    const cfg_node *base = cfg_path(svm, "costs.base");
    const cfg_node *range = cfg_path(svm, "costs.power_range");
    size_t nlist = list && list->kind == CFG_LIST ? list->len : 0;
    double b = base && cfg_is_number(base) ? cfg_number(base) : -1;
    long p0 = 0, p1 = 0;
    if (b > 0) {
        if (!range || range->kind != CFG_LIST || range->len != 2 || !cfg_is_number(range->items[0]) ||
            !cfg_is_number(range->items[1]))
            return report_failure(err, "SVM.costs.power_range: expected [start, end] (integers)");
        p0 = (long)cfg_number(range->items[0]);
        p1 = (long)cfg_number(range->items[1]);
    }
    size_t n = nlist + (size_t)(p1 > p0 ? p1 - p0 : 0);
    free(o->costs);
    o->costs = xmalloc((n ? n : 1) * sizeof *o->costs);
    o->ncosts = 0;
    for (size_t i = 0; i < nlist; i++) {
        if (!cfg_is_number(list->items[i]))
            return report_failure(err, "%s:%d: SVM.costs.costs_list[%zu]: expected a number", list->items[i]->file,
                                  list->items[i]->line, i);
        o->costs[o->ncosts++] = cfg_number(list->items[i]);
    }
    for (long p = p0; p < p1; p++) /* Python's base ** p, end exclusive */
        o->costs[o->ncosts++] = pow(b, (double)p);
    return check_costs(o, err);
}

static int read_enum(const cfg_node *svm, const char *key, const char *a, const char *b, int *out, char **err)
{
    const cfg_node *n = cfg_path(svm, key);
    if (!n)
        return 0;
    if (n->kind == CFG_STR && !strcmp(n->s, a))
        *out = 0;
    else if (n->kind == CFG_STR && !strcmp(n->s, b))
        *out = 1;
    else
        return report_failure(err, "%s:%d: SVM.%s: expected \"%s\" or \"%s\"", n->file, n->line, key, a, b);
    return 0;
}

/* The LinearSVC combinations liblinear has a solver for (sklearn refuses the others). */
static int check_combination(const svm_opts *o, char **err)
{
    if (o->penalty == SVM_PENALTY_L1 && o->loss == SVM_HINGE)
        return report_failure(err, "SVM: penalty l1 with loss hinge is not supported (LinearSVC refuses it)");
    if (o->penalty == SVM_PENALTY_L1 && o->dual)
        return report_failure(err, "SVM: penalty l1 needs dual: False (LinearSVC refuses it)");
    if (o->loss == SVM_HINGE && !o->dual)
        return report_failure(err, "SVM: loss hinge needs dual: True (LinearSVC refuses it)");
    return 0;
}

int svm_opts_from_config(const cfg_node *svm, svm_opts *o, char **err)
{
    const cfg_node *n;
    if (!svm || svm->kind != CFG_MAP)
        return report_failure(err, "config.SVM: missing or not a map");
    if ((n = cfg_path(svm, "normalize")) && n->kind == CFG_BOOL)
        o->normalize = n->b;
    if ((n = cfg_path(svm, "dual")) && n->kind == CFG_BOOL)
        o->dual = n->b;
    if ((n = cfg_path(svm, "force_retrain")) && n->kind == CFG_BOOL)
        o->force_retrain = n->b;
    if ((n = cfg_path(svm, "max_iter")) && cfg_is_number(n)) {
        if (cfg_number(n) < 1)
            return report_failure(err, "%s:%d: SVM.max_iter: must be at least 1", n->file, n->line);
        o->max_iter = (int)cfg_number(n);
    }
    if ((n = cfg_path(svm, "cross_val_folds")) && cfg_is_number(n)) {
        if (cfg_number(n) < 2)
            return report_failure(err, "%s:%d: SVM.cross_val_folds: must be at least 2 (sklearn's KFold)", n->file,
                                  n->line);
        o->folds = (int)cfg_number(n);
    }
    int loss = (int)o->loss, penalty = (int)o->penalty, style = (int)o->lowshot_style;
    if (read_enum(svm, "loss", "squared_hinge", "hinge", &loss, err) ||
        read_enum(svm, "penalty", "l2", "l1", &penalty, err) || read_costs(svm, o, err) ||
        read_int_list(svm, "cls_list", &o->cls_list, &o->ncls_list, err) ||
        read_int_list(svm, "low_shot.sample_inds", &o->sample_inds, &o->nsamples, err) ||
        read_int_list(svm, "low_shot.k_values", &o->k_values, &o->nk, err))
        return -1;
    o->loss = loss ? SVM_HINGE : SVM_SQUARED_HINGE;
    o->penalty = penalty ? SVM_PENALTY_L1 : SVM_PENALTY_L2;
    if ((n = cfg_path(svm, "low_shot.dataset_name")) && n->kind == CFG_STR) {
        if (strstr(n->s, "voc"))
            style = LOWSHOT_VOC;
        else if (strstr(n->s, "places"))
            style = LOWSHOT_PLACES;
        else
            return report_failure(err, "%s:%d: SVM.low_shot.dataset_name: '%s' is neither voc nor places style",
                                  n->file, n->line, n->s);
    }
    o->lowshot_style = (svm_lowshot_style)style;
    if (o->ncls_list == 0) {
        free(o->cls_list);
        o->cls_list = NULL;
    }
    for (size_t i = 0; i < o->ncls_list; i++)
        if (o->cls_list[i] < 0)
            return report_failure(err, "SVM.cls_list[%zu]: class %d is negative", i, o->cls_list[i]);
    for (size_t i = 0; i < o->nk; i++)
        if (o->k_values[i] < 1)
            return report_failure(err, "SVM.low_shot.k_values[%zu]: %d is not a positive count", i, o->k_values[i]);
    return check_combination(o, err);
}

svm_params svm_params_for(const svm_opts *o, double cost)
{
    return (svm_params){.C = cost,
                        .weight_pos = 2.0, /* VISSL's class_weight {1: 2, -1: 1} */
                        .weight_neg = 1.0,
                        .bias = 1.0, /* intercept_scaling */
                        .eps = 1e-4,
                        .max_iter = o->max_iter,
                        .loss = o->loss,
                        .penalty = o->penalty,
                        .dual = o->dual,
                        .solver = SVM_SOLVER_DENSE,
                        .seed = 0};
}

size_t *svm_cost_order(const double *costs, size_t n)
{
    size_t *order = xmalloc((n ? n : 1) * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    /* insertion sort: a handful of costs, and no static state shared between threads */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && costs[order[j - 1]] > costs[order[j]]; j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return order;
}

/* ---- targets and features ------------------------------------------------------------------- */

bool svm_targets_are_indices(const int64_t *t, size_t n, size_t ncols, int64_t *max)
{
    int64_t m = INT64_MIN;
    for (size_t i = 0; i < n * ncols; i++)
        m = t[i] > m ? t[i] : m;
    if (max)
        *max = m;
    return ncols == 1 && m > 1;
}

int svm_targets_convert(const int64_t *t, size_t n, size_t ncols, size_t nclasses, const char *what, int8_t **out,
                        size_t *C, char **err)
{
    *out = NULL;
    if (nclasses > 0) { /* one class index per row, made one-vs-rest */
        if (ncols != 1)
            return report_failure(err, "%s: %zu target columns, but the training targets are class indices (one "
                                  "column)", what, ncols);
        for (size_t i = 0; i < n; i++)
            if (t[i] >= (int64_t)nclasses)
                return report_failure(err, "%s: row %zu: class index %lld, but there are %zu classes", what, i,
                                      (long long)t[i], nclasses);
        int8_t *o = xmalloc(n * nclasses + 1);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < nclasses; j++)
                o[i * nclasses + j] = t[i] < 0 ? -1 : t[i] == (int64_t)j;
        *out = o;
        *C = nclasses;
        return 0;
    }
    for (size_t i = 0; i < n * ncols; i++)
        if (t[i] < -1 || t[i] > 1)
            return report_failure(err,
                                  "%s: row %zu, column %zu: target %lld is not 1, 0 or -1 (VOC-style targets; single "
                                  "class indices need one column)",
                                  what, i / ncols, i % ncols, (long long)t[i]);
    int8_t *o = xmalloc(n * ncols + 1);
    for (size_t i = 0; i < n * ncols; i++)
        o[i] = (int8_t)t[i];
    *out = o;
    *C = ncols;
    return 0;
}

void svm_normalize_rows(float *x, size_t n, size_t dim)
{
    for (size_t i = 0; i < n; i++) {
        float *r = x + i * dim;
        double ss = 0;
        for (size_t j = 0; j < dim; j++)
            ss += (double)r[j] * r[j];
        double scale = 1.0 / (sqrt(ss) + 1e-5);
        for (size_t j = 0; j < dim; j++)
            r[j] = (float)(r[j] * scale);
    }
}

long svm_first_nonfinite_row(const float *x, size_t n, size_t dim)
{
    for (size_t i = 0; i < n * dim; i++)
        if (!isfinite(x[i]))
            return (long)(i / dim);
    return -1;
}

/* ---- Python's repr(float) ------------------------------------------------------------------- */

void svm_cost_name(double c, char *out, size_t size)
{
    char e[40];
    int prec = 0;
    for (; prec < 17; prec++) { /* the shortest digits that read back as c */
        snprintf(e, sizeof e, "%.*e", prec, c);
        if (strtod(e, NULL) == c)
            break;
    }
    /* e is "-d.ddde±XX": split it into sign, digits and the decimal exponent */
    const char *p = e;
    bool neg = *p == '-';
    p += neg;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    digits[nd] = 0;
    int exp10 = atoi(p + 1);
    strbuf sb = {0};
    if (neg)
        sb_putc(&sb, '-');
    if (exp10 < -4 || exp10 >= 16) { /* Python's float_repr: scientific outside [1e-4, 1e16) */
        sb_putc(&sb, digits[0]);
        if (nd > 1) {
            sb_putc(&sb, '.');
            sb_puts(&sb, digits + 1);
        }
        sb_printf(&sb, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (exp10 < 0) {
        sb_puts(&sb, "0.");
        for (int i = -1; i > exp10; i--)
            sb_putc(&sb, '0');
        sb_puts(&sb, digits);
    } else {
        for (int i = 0; i <= exp10; i++)
            sb_putc(&sb, (size_t)i < nd ? digits[i] : '0');
        sb_putc(&sb, '.');
        sb_puts(&sb, (size_t)exp10 + 1 < nd ? digits + exp10 + 1 : "0");
    }
    snprintf(out, size, "%s", sb_str(&sb));
    sb_free(&sb);
}

/* ---- sklearn's StratifiedKFold -------------------------------------------------------------- */

int svm_stratified_folds(const int8_t *y, size_t n, int k, int *fold)
{
    if (k < 2 || n < (size_t)k)
        return -1;
    /* classes numbered by first appearance (sklearn's y_encoded) */
    size_t count[256] = {0};
    int ncls = 0, code[256];
    for (int v = 0; v < 256; v++)
        code[v] = -1;
    for (size_t i = 0; i < n; i++) {
        int v = (uint8_t)y[i];
        if (code[v] < 0) {
            code[v] = ncls++;
        }
        count[code[v]]++;
    }
    bool any_big_enough = false;
    for (int c = 0; c < ncls; c++)
        any_big_enough |= count[c] >= (size_t)k;
    if (!any_big_enough)
        return -1;
    /* allocation[f][c] = #class c among y_order[f::k], y_order = the sorted codes: class c
     * fills positions start_c .. start_c + count_c − 1 of y_order */
    size_t *alloc = xcalloc((size_t)k * (size_t)ncls, sizeof *alloc);
    size_t start = 0;
    for (int c = 0; c < ncls; c++) {
        for (size_t pos = start; pos < start + count[c]; pos++)
            alloc[(pos % (size_t)k) * (size_t)ncls + (size_t)c]++;
        start += count[c];
    }
    /* per class, in row order: the first alloc[0][c] rows go to fold 0, the next to fold 1 … */
    size_t *filled = xcalloc((size_t)ncls, sizeof *filled);
    int *cur = xcalloc((size_t)ncls, sizeof *cur);
    for (size_t i = 0; i < n; i++) {
        int c = code[(uint8_t)y[i]];
        while (filled[c] >= alloc[(size_t)cur[c] * (size_t)ncls + (size_t)c]) {
            filled[c] = 0;
            cur[c]++;
        }
        fold[i] = cur[c];
        filled[c]++;
    }
    free(alloc);
    free(filled);
    free(cur);
    return 0;
}

/* ---- sklearn's average_precision_score ------------------------------------------------------ */

typedef struct {
    double score;
    int8_t positive;
} scored;

static int by_score_desc(const void *a, const void *b)
{
    double x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return x < y ? 1 : x > y ? -1 : 0;
}

double svm_sklearn_ap(const double *scores, const int8_t *y, size_t n)
{
    scored *s = xmalloc((n ? n : 1) * sizeof *s);
    size_t positives = 0;
    for (size_t i = 0; i < n; i++) {
        s[i] = (scored){scores[i], y[i] == 1};
        positives += y[i] == 1;
    }
    qsort(s, n, sizeof *s, by_score_desc);
    /* one threshold per distinct score: the counts after its last tied row */
    double ap = 0, prev_recall = 0;
    size_t tp = 0;
    for (size_t i = 0; i < n; i++) {
        tp += (size_t)s[i].positive;
        if (i + 1 < n && s[i + 1].score == s[i].score)
            continue;
        double precision = (double)tp / (double)(i + 1);
        double recall = positives ? (double)tp / (double)positives : 1.0;
        ap += (recall - prev_recall) * precision;
        prev_recall = recall;
    }
    free(s);
    return ap;
}

size_t svm_argmax(const double *v, size_t n)
{
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(v[i]))
            return i;
        if (v[i] > v[best])
            best = i;
    }
    return best;
}

double svm_decide(const double *w, const float *x, size_t dim)
{
    double d = w[dim];
    for (size_t j = 0; j < dim; j++)
        d += w[j] * (double)x[j];
    return d;
}

/* A small result file: written under a temporary name and renamed, so a reader never sees
 * half of one, but not fsynced: a run writes hundreds of them (two per class and cost), and
 * an fsync each costs more than the fits on a busy disk. A crash loses them, which only
 * means retraining. */
int svm_save_f64(const char *dir, const char *name, int ndim, const size_t *shape, const double *v, char **err)
{
    size_t hlen, count = 1;
    char *header = npy_header(NPY_F8, ndim, shape, &hlen, err);
    if (!header)
        return -1;
    for (int i = 0; i < ndim; i++)
        count *= shape[i];
    char *path = path_join(dir, name), *tmp = xasprintf("%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(header, 1, hlen, f) == hlen && (count == 0 || fwrite(v, sizeof *v, count, f) == count);
    ok = (f && fclose(f) == 0) && ok;
    ok = ok && rename(tmp, path) == 0;
    int rc = ok ? 0 : report_failure(err, "%s: cannot write: %s", path, strerror(errno));
    if (!ok)
        unlink(tmp);
    free(header);
    free(path);
    free(tmp);
    return rc;
}

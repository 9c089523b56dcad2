/*
 * test_trunk_util.c — the trunk tests' shared fixtures and checks (see test_trunk_util.h).
 */
#include "test_trunk_util.h"

#include "test_nn_util.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reporting ----------------------------------------------------------------------------------- */

int tt_verbose(const char *prefix)
{
    char name[64];
    size_t i = 0;
    for (; prefix[i] && i < sizeof name - sizeof "_VERBOSE"; i++)
        name[i] = (char)toupper((unsigned char)prefix[i]);
    snprintf(name + i, sizeof name - i, "_VERBOSE");
    const char *v = getenv(name);
    return !v ? 0 : v[0] == '2' ? 2 : 1; /* set at all means verbose, as the tests always read it */
}

void tt_report(const char *prefix, const char *what, double e, double tol)
{
    if (tt_verbose(prefix))
        fprintf(stderr, "%s: %-48s error %.3g (tolerance %.3g)\n", prefix, what, e, tol);
    cr_expect_leq(e, tol, "%s: error %g > %g", what, e, tol);
}

/* ---- fixtures ------------------------------------------------------------------------------------ */

npy_array tt_load_npy(const char *prefix, const char *kase, const char *name)
{
    char *stem = xasprintf("%s_%s", prefix, kase);
    npy_array a = test_fixture_npy("nn", stem, name);
    cr_assert_eq(a.dtype, NPY_F4, "%s_%s", stem, name);
    free(stem);
    return a;
}

int tt_fixture_phase(const char *prefix, const char *kase)
{
    npy_array ph = tt_load_npy(prefix, kase, "phase");
    int phase = (int)((const float *)ph.data)[0];
    npy_close(&ph);
    return phase;
}

/* The error of got against a loaded fixture, reported as "KASE NAME". */
static void expect_loaded(const char *prefix, const float *got, const npy_array *want, const char *what, double tol)
{
    tt_report(prefix, what, nnt_rel_error_host(got, want->data, want->count), tol);
}

void tt_expect_array(const char *prefix, const float *got, const char *kase, const char *name, double tol)
{
    npy_array want = tt_load_npy(prefix, kase, name);
    char *what = xasprintf("%s %s", kase, name);
    expect_loaded(prefix, got, &want, what, tol);
    free(what);
    npy_close(&want);
}

void tt_expect_array_n(const char *prefix, const float *got, size_t n, const char *kase, const char *name,
                       double tol)
{
    npy_array want = tt_load_npy(prefix, kase, name);
    char *what = xasprintf("%s %s", kase, name);
    cr_expect_eq(n, want.count, "%s: %zu values, PyTorch %zu", what, n, want.count);
    if (n == want.count) /* otherwise the comparison would read past one of them */
        expect_loaded(prefix, got, &want, what, tol);
    free(what);
    npy_close(&want);
}

/* ---- the fixture lists (PREFIX_cases.txt and the like) --------------------------------------------- */

void tt_parse_pairs(char *line, tt_pair_fn *set, void *into)
{
    char *save = NULL, *tok;
    strtok_r(line, " \n", &save); /* the line's name */
    while ((tok = strtok_r(NULL, " \n", &save))) {
        char *eq = strchr(tok, '=');
        cr_assert(eq, "not key=value: %s", tok);
        *eq = '\0';
        set(into, tok, eq + 1);
    }
}

/* Whether the first word of line is name (the whole word: "b0" is not "b0_big"). */
static bool line_named(const char *line, const char *name)
{
    size_t len = strcspn(line, " \n");
    return len == strlen(name) && strncmp(line, name, len) == 0;
}

void tt_load_line(const char *file, const char *name, tt_pair_fn *set, void *into)
{
    char *path = test_fixture("nn", file);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        found = line_named(line, name);
        if (found)
            tt_parse_pairs(line, set, into);
    }
    fclose(f);
    free(path);
    cr_assert(found, "no %s in %s", name, file);
}

/* ---- inputs ---------------------------------------------------------------------------------------- */

eng_tensor tt_formula_tensor(eng_backend *be, eng_shape s, double alpha, int phase)
{
    eng_tensor t = eng_tensor_new(be, s);
    float *h = nnt_formula_fill(eng_numel(&s), alpha, phase);
    eng_upload(be, &t, h);
    free(h);
    return t;
}

eng_tensor tt_input(eng_backend *be, eng_shape s, int phase) { return tt_formula_tensor(be, s, X_ALPHA, phase); }

/* The fixture scripts draw r at phase 0 in every case. */
eng_tensor tt_upstream(eng_backend *be, eng_shape s) { return tt_formula_tensor(be, s, R_ALPHA, 0); }

float *tt_append_channel_means(eng_backend *be, const eng_tensor *t, float *m, int64_t *n)
{
    float *h = nnt_download(be, t);
    int64_t nb = t->shape.dim[0], c = t->shape.dim[1], s = t->shape.dim[2] * t->shape.dim[3];
    m = xrealloc(m, (size_t)(*n + c) * sizeof *m);
    for (int64_t k = 0; k < c; k++) {
        double sum = 0.0; /* in double, as the float64 reference sums */
        for (int64_t b = 0; b < nb; b++)
            for (int64_t j = 0; j < s; j++)
                sum += h[(b * c + k) * s + j];
        m[(*n)++] = (float)(sum / (double)(nb * s));
    }
    free(h);
    return m;
}

/* ---- names, order and shapes ------------------------------------------------------------------------ */

/* "d0,d1,…" as the names fixtures write a shape. */
static void shape_text(const eng_shape *s, char *out, size_t len)
{
    out[0] = '\0';
    for (int d = 0; d < s->ndim; d++)
        snprintf(out + strlen(out), len - strlen(out), "%s%lld", d ? "," : "", (long long)s->dim[d]);
}

void tt_check_names(const char *prefix, const eng_params *p, const char *tag, const char *source,
                    int64_t want_params)
{
    char *file = xasprintf("%s_%s_names.txt", prefix, tag);
    char *path = test_fixture("nn", file);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char name[256], kind[16], shape[64];
    int i = 0;
    while (fscanf(f, "%255s %15s %63s", name, kind, shape) == 3) {
        cr_assert_lt(i, p->nentries, "%s: more entries in %s (%s)", tag, source, name);
        const eng_entry *e = &p->entries[i++];
        cr_expect_str_eq(e->name, name, "%s: entry %d", tag, i - 1);
        cr_expect_eq(e->kind, strcmp(kind, "param") == 0 ? ENG_PARAM : ENG_BUFFER, "%s: %s kind", tag, name);
        char mine[64];
        shape_text(&e->value.shape, mine, sizeof mine);
        cr_expect_str_eq(mine, shape, "%s: %s shape", tag, name);
    }
    fclose(f);
    cr_expect_eq(i, p->nentries, "%s: entry count", tag);
    cr_expect_eq(eng_params_count(p), want_params, "%s: parameters", tag);
    free(path);
    free(file);
}

/* ---- complexity ------------------------------------------------------------------------------------ */

void tt_check_cost_rows(const char *prefix, const char *tag, const eng_layer_cost *rows, int n)
{
    char *file = xasprintf("%s_%s_complexity.txt", prefix, tag), *path = test_fixture("nn", file);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char name[160], kind[32];
    long long flops, params, acts;
    int i = 0;
    while (fscanf(f, "%159s %31s %lld %lld %lld", name, kind, &flops, &params, &acts) == 5 && strcmp(name, "total")) {
        cr_assert_lt(i, n, "%s: more rows in the profiler's (%s)", tag, name);
        const eng_layer_cost *r = &rows[i++];
        cr_expect_str_eq(r->name, name, "%s row %d: %s, the profiler's %s", tag, i - 1, r->name, name);
        cr_expect_str_eq(r->kind, kind, "%s %s: kind %s, the profiler's %s", tag, name, r->kind, kind);
        cr_expect(r->flops == flops && r->params == params && r->activations == acts,
                  "%s %s: %lld %lld %lld, profiler %lld %lld %lld", tag, name, (long long)r->flops,
                  (long long)r->params, (long long)r->activations, flops, params, acts);
    }
    cr_expect_eq(i, n, "%s: row count", tag);
    /* The loop stopped at the "total" row, whose numbers are left in flops, params, acts. */
    eng_layer_cost t = eng_costs_total(rows, n);
    cr_expect(t.flops == flops && t.params == params && t.activations == acts,
              "%s total: %lld %lld %lld, profiler %lld %lld %lld", tag, (long long)t.flops, (long long)t.params,
              (long long)t.activations, flops, params, acts);
    fclose(f);
    free(path);
    free(file);
}

/* ---- gradients ------------------------------------------------------------------------------------- */

/* One parameter's error over its bound: Σg against √Σg², Σg² against itself. A gradient that is
 * mathematically zero (Σg*² below ZERO_GRAD_SQ: a conv bias before train-mode BN) has no relative
 * error to speak of, so it is held to the floor's absolute size instead. */
static double grad_error(const eng_entry *e, eng_backend *be, const float *want, double floor, double factor,
                         double *sq_err)
{
    float *g = nnt_download(be, &e->grad);
    double s = 0.0, ss = 0.0;
    for (int64_t j = 0; j < eng_numel(&e->grad.shape); j++)
        s += g[j], ss += (double)g[j] * g[j];
    free(g);
    double ws = factor * want[0], wss = factor * factor * want[1];
    if (want[1] < ZERO_GRAD_SQ) {
        *sq_err = 0.0;
        return sqrt(ss) / (FLOOR_FACTOR * factor * floor);
    }
    double bound = FLOOR_FACTOR * fmax(GRAD_TOL, floor);
    *sq_err = fabs(ss - wss) / wss / bound;
    return fabs(s - ws) / sqrt(wss) / bound;
}

void tt_check_grads(const char *prefix, eng_backend *be, const eng_params *p, const char *kase, double factor)
{
    npy_array want = tt_load_npy(prefix, kase, "grads"), floor = tt_load_npy(prefix, kase, "grad_floor");
    double worst_sum = 0.0, worst_sq = 0.0;
    const char *worst_name = "";
    int k = 0; /* the fixtures hold parameters only, in the table's order */
    for (int i = 0; i < p->nentries; i++) {
        const eng_entry *e = &p->entries[i];
        if (e->kind != ENG_PARAM)
            continue;
        cr_assert_lt((size_t)(2 * k + 1), want.count, "%s: more parameters than PyTorch's", kase);
        const float *w = (const float *)want.data + 2 * k;
        double sq, es = grad_error(e, be, w, ((const float *)floor.data)[k], factor, &sq);
        if (tt_verbose(prefix) == 2)
            fprintf(stderr, "%s: %s %-48s sum %.3g sumsq %.3g (of the bound)\n", prefix, kase, e->name, es, sq);
        if (fmax(es, sq) > fmax(worst_sum, worst_sq))
            worst_name = e->name;
        worst_sum = fmax(worst_sum, es), worst_sq = fmax(worst_sq, sq);
        k++;
    }
    cr_expect_eq((size_t)(2 * k), want.count, "%s: gradient count", kase);
    char what[160];
    snprintf(what, sizeof what, "%s %.0f× grad sums / bound (worst %s)", kase, factor, worst_name);
    tt_report(prefix, what, worst_sum, 1.0);
    snprintf(what, sizeof what, "%s %.0f× grad sums of squares / bound", kase, factor);
    tt_report(prefix, what, worst_sq, 1.0);
    npy_close(&want);
    npy_close(&floor);
}

void tt_check_stem_grad(const char *prefix, eng_backend *be, const eng_params *p, const char *kase, double factor)
{
    npy_array stem = tt_load_npy(prefix, kase, "stem_grad");
    float *g = nnt_download(be, &p->entries[0].grad);
    for (size_t j = 0; j < stem.count; j++) /* two accumulated backwards: twice the fixture's */
        ((float *)stem.data)[j] *= (float)factor;
    char what[96];
    snprintf(what, sizeof what, "%s %.0f× stem weight grad", kase, factor);
    tt_report(prefix, what, nnt_rel_error_host(g, stem.data, stem.count), GRAD_TOL);
    free(g);
    npy_close(&stem);
}

/* ---- allocations ----------------------------------------------------------------------------------- */

/* Criterion runs each test in its own process, so one counter per process is enough. */
static int allocations;
static eng_ops counting_ops;

static void *counting_alloc(eng_backend *be, size_t bytes)
{
    allocations++;
    return eng_cpu_ops.alloc(be, bytes);
}

void tt_count_allocations(eng_backend *be)
{
    counting_ops = eng_cpu_ops;
    counting_ops.alloc = counting_alloc;
    be->ops = &counting_ops;
}

int tt_allocations(void) { return allocations; }

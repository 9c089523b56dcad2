/*
 * test_svm.c — VISSL's SVM protocol (stages/svm): against sklearn and numpy references made
 * by tests/golden/make_svm_fixtures.py (VISSL's SVMTrainer restated with LinearSVC +
 * cross_val_score, StratifiedKFold, average_precision_score, aggregate_stats), hand-derived
 * values (Python's float repr), invariants (thread count, reuse), and selfsup-svm's handling
 * of bad input through the binary: class indices past SVM_MAX_CLASSES, targets that leave no
 * AP to report, output folders that cannot be written — each refused before any fit.
 */
#include "features.h"
#include "npy.h"
#include "svm/report.h"
#include "svm/svm.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------------------- */

static void rm_tree(char *dir)
{
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    free(dir);
}

static void write_npy(const char *dir, const char *name, npy_dtype dt, int ndim, const size_t *shape,
                      const void *data)
{
    char *path = xasprintf("%s/%s", dir, name), *err = NULL;
    cr_assert_eq(npy_write(path, dt, ndim, shape, data, &err), 0, "%s", err ? err : "");
    free(path);
}

static npy_array read_npy(const char *dir, const char *name)
{
    char *path = xasprintf("%s/%s", dir, name), *err = NULL;
    npy_array a = {0};
    cr_assert_eq(npy_read(path, &a, &err), 0, "%s", err ? err : "");
    free(path);
    return a;
}

/* The fixture's split as svm_data (features normalised as VISSL does). */
static svm_data fixture_split(const char *kase)
{
    npy_array x = test_fixture_npy("svm", kase, "x"), t = test_fixture_npy("svm", kase, "t");
    svm_data d = {.n = x.shape[0], .dim = x.shape[1], .C = t.shape[1]};
    d.x = xmalloc(x.nbytes);
    memcpy(d.x, x.data, x.nbytes);
    char *err = NULL;
    size_t C;
    cr_assert_eq(svm_targets_convert(t.data, t.shape[0], t.shape[1], 0, kase, &d.t, &C, &err), 0, "%s", err);
    svm_normalize_rows(d.x, d.n, d.dim);
    npy_close(&x);
    npy_close(&t);
    return d;
}

static void fixture_opts(svm_opts *o, int threads)
{
    svm_opts_default(o);
    npy_array costs = test_fixture_npy("svm", "voc", "costs");
    free(o->costs);
    o->ncosts = costs.count;
    o->costs = xmalloc(costs.nbytes);
    memcpy(o->costs, costs.data, costs.nbytes);
    o->threads = threads;
    npy_close(&costs);
}

static void free_data(svm_data *d)
{
    free(d->x);
    free(d->t);
}

/* ---- pieces --------------------------------------------------------------------------------- */

Test(svm, cost_names_are_pythons_float_repr)
{
    /* repr(float(c)) in Python 3 */
    const struct {
        double c;
        const char *name;
    } cases[] = {{2, "2.0"},         {0.1, "0.1"},        {0.01, "0.01"},     {1e-05, "1e-05"},
                 {1e16, "1e+16"},    {1e15, "1000000000000000.0"},            {0.0001, "0.0001"},
                 {100, "100.0"},     {1.5e-7, "1.5e-07"}, {123.456, "123.456"}, {2.5e20, "2.5e+20"},
                 {1000, "1000.0"},   {0.3, "0.3"},        {1.0 / 3, "0.3333333333333333"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char b[64];
        svm_cost_name(cases[i].c, b, sizeof b);
        cr_expect_str_eq(b, cases[i].name, "cost %.17g", cases[i].c);
    }
}

Test(svm, stratified_folds_match_sklearn)
{
    const char *names[] = {"unbalanced", "few_pos", "random", "three"};
    for (size_t i = 0; i < 4; i++)
        for (int k = 3; k <= 5; k += 2) {
            char *yn = xasprintf("folds_%s_k%d", names[i], k);
            npy_array y = test_fixture_npy("svm", yn, "y"), f = test_fixture_npy("svm", yn, "fold");
            int *fold = xmalloc(y.count * sizeof *fold);
            cr_assert_eq(svm_stratified_folds(y.data, y.count, k, fold), 0);
            for (size_t r = 0; r < y.count; r++)
                cr_assert_eq(fold[r], ((const int32_t *)f.data)[r], "%s row %zu", yn, r);
            free(fold);
            free(yn);
            npy_close(&y);
            npy_close(&f);
        }
}

Test(svm, stratified_folds_refuse_what_sklearn_refuses)
{
    int8_t y[4] = {1, -1, 1, -1};
    int fold[4];
    cr_expect_eq(svm_stratified_folds(y, 2, 3, fold), -1, "fewer rows than folds");
    cr_expect_eq(svm_stratified_folds(y, 4, 3, fold), -1, "every label with fewer rows than folds");
    cr_expect_eq(svm_stratified_folds(y, 4, 2, fold), 0);
}

Test(svm, sklearn_ap_with_ties_matches_sklearn)
{
    npy_array s = test_fixture_npy("svm", "ap_ties", "scores"), y = test_fixture_npy("svm", "ap_ties", "y"),
              ap = test_fixture_npy("svm", "ap_ties", "ap");
    cr_expect_float_eq(svm_sklearn_ap(s.data, y.data, s.count), ((const double *)ap.data)[0], 1e-12);
    /* by hand: 1/3 · (1 + 2/3 + 3/4) */
    double sc[5] = {0.9, 0.8, 0.7, 0.3, 0.2};
    int8_t lab[5] = {1, -1, 1, 1, -1}, none[5] = {-1, -1, -1, -1, -1};
    cr_expect_float_eq(svm_sklearn_ap(sc, lab, 5), (1 + 2.0 / 3 + 0.75) / 3, 1e-12);
    cr_expect_float_eq(svm_sklearn_ap(sc, none, 5), 0.0, 0, "sklearn gives -0.0 without positives");
    npy_close(&s);
    npy_close(&y);
    npy_close(&ap);
}

Test(svm, argmax_is_numpys)
{
    double v[4] = {0.5, 0.7, 0.7, 0.1}, w[3] = {0.5, NAN, 0.9};
    cr_expect_eq(svm_argmax(v, 4), 1, "first of the tied maxima");
    cr_expect_eq(svm_argmax(w, 3), 1, "a NaN wins");
}

Test(svm, targets_class_indices_become_one_vs_rest)
{
    int64_t t[4] = {2, 0, -1, 1};
    int8_t *o = NULL;
    size_t C = 0;
    char *err = NULL;
    cr_assert(svm_targets_are_indices(t, 4, 1, NULL));
    cr_assert_eq(svm_targets_convert(t, 4, 1, 3, "t", &o, &C, &err), 0);
    const int8_t want[12] = {0, 0, 1, 1, 0, 0, -1, -1, -1, 0, 1, 0};
    cr_assert_eq(C, 3);
    cr_expect_arr_eq(o, want, 12);
    free(o);
    int64_t bad[2] = {1, 2};
    cr_expect_eq(svm_targets_convert(bad, 1, 2, 0, "t", &o, &C, &err), -1);
    cr_expect(strstr(err, "row 0") && strstr(err, "target 2"), "%s", err);
    free(err);
}

Test(svm, aggregate_stats_match_numpy)
{
    npy_array aps = test_fixture_npy("svm", "agg", "aps"), stats = test_fixture_npy("svm", "agg", "stats"),
              mean = test_fixture_npy("svm", "agg", "mean"), std = test_fixture_npy("svm", "agg", "std");
    double got[12], mu[12], sd[12];
    svm_aggregate_stats(aps.data, 3, 5, 4, got, mu, NULL, NULL, sd);
    for (size_t i = 0; i < 12; i++) {
        cr_expect_float_eq(got[i], ((const double *)stats.data)[i], 1e-9, "stat %zu", i);
        cr_expect_float_eq(mu[i], ((const double *)mean.data)[i], 1e-12);
        cr_expect_float_eq(sd[i], ((const double *)std.data)[i], 1e-12);
    }
    npy_close(&aps);
    npy_close(&stats);
    npy_close(&mean);
    npy_close(&std);
}

/* ---- the VOC07 protocol against sklearn ----------------------------------------------------- */

Test(svm, voc07_matches_vissl_with_sklearn)
{
    svm_data tr = fixture_split("voc_train"), te = fixture_split("voc_test");
    svm_opts o;
    fixture_opts(&o, 2);
    char *dir = test_make_tmpdir(), *err = NULL;
    svm_result r;
    cr_assert_eq(svm_voc07(&o, &tr, &te, dir, &r, &err), 0, "%s", err);
    npy_array cv = test_fixture_npy("svm", "voc", "crossval"), ch = test_fixture_npy("svm", "voc", "chosen"),
              ap = test_fixture_npy("svm", "voc", "test_ap");
    for (size_t i = 0; i < cv.count; i++)
        cr_expect(fabs(r.crossval[i] - ((const double *)cv.data)[i]) < 0.002, "crossval[%zu]: %f vs sklearn %f", i,
                  r.crossval[i], ((const double *)cv.data)[i]);
    double sum = 0;
    for (size_t c = 0; c < tr.C; c++) {
        cr_expect_eq(r.chosen[c], ((const double *)ch.data)[c], "class %zu chose %g, VISSL %g", c, r.chosen[c],
                     ((const double *)ch.data)[c]);
        cr_expect(fabs(r.test_ap[c] - ((const double *)ap.data)[c]) < 0.002, "class %zu test AP %f vs %f", c,
                  r.test_ap[c], ((const double *)ap.data)[c]);
        sum += r.test_ap[c];
    }
    cr_expect_float_eq(r.mAP, sum / (double)tr.C, 1e-12);
    /* VISSL's files, their shapes, and a model file that gives the test decisions */
    npy_array f = read_npy(dir, "crossval_ap.npy");
    cr_expect(f.ndim == 2 && f.shape[0] == tr.C && f.shape[1] == o.ncosts && f.dtype == NPY_F8);
    npy_close(&f);
    f = read_npy(dir, "chosen_cost.npy");
    cr_expect(f.ndim == 1 && f.shape[0] == tr.C);
    npy_close(&f);
    f = read_npy(dir, "test_ap.npy");
    cr_expect(f.ndim == 2 && f.shape[0] == tr.C && f.shape[1] == 1);
    cr_expect_float_eq(((const double *)f.data)[2], r.test_ap[2], 0);
    npy_close(&f);
    f = read_npy(dir, "AP_cls3_cost0.1.npy");
    cr_expect(f.ndim == 1 && f.shape[0] == 1);
    cr_expect_float_eq(((const double *)f.data)[0], r.crossval[3 * o.ncosts + 1], 0);
    npy_close(&f);
    f = read_npy(dir, "cls1_cost10.0.npy");
    cr_expect_eq(f.shape[0], tr.dim + 1);
    cr_expect_arr_eq(f.data, r.models + (1 * o.ncosts + 2) * (tr.dim + 1), f.nbytes);
    npy_close(&f);
    npy_close(&cv);
    npy_close(&ch);
    npy_close(&ap);
    svm_result_free(&r);
    svm_opts_free(&o);
    free_data(&tr);
    free_data(&te);
    rm_tree(dir);
}

Test(svm, results_do_not_depend_on_the_thread_count)
{
    svm_data tr = fixture_split("voc_train"), te = fixture_split("voc_test");
    svm_opts o1, o3;
    fixture_opts(&o1, 1);
    fixture_opts(&o3, 3);
    char *d1 = test_make_tmpdir(), *d3 = test_make_tmpdir(), *err = NULL;
    svm_result r1, r3;
    cr_assert_eq(svm_voc07(&o1, &tr, &te, d1, &r1, &err), 0, "%s", err);
    cr_assert_eq(svm_voc07(&o3, &tr, &te, d3, &r3, &err), 0, "%s", err);
    cr_expect_arr_eq(r1.crossval, r3.crossval, r1.ncls * r1.ncosts * sizeof(double));
    cr_expect_arr_eq(r1.models, r3.models, r1.ncls * r1.ncosts * (tr.dim + 1) * sizeof(double));
    cr_expect_arr_eq(r1.test_ap, r3.test_ap, r1.ncls * sizeof(double));
    svm_result_free(&r1);
    svm_result_free(&r3);
    svm_opts_free(&o1);
    svm_opts_free(&o3);
    free_data(&tr);
    free_data(&te);
    rm_tree(d1);
    rm_tree(d3);
}

Test(svm, existing_files_are_reused_unless_force_retrain)
{
    svm_data tr = fixture_split("voc_train"), te = fixture_split("voc_test");
    svm_opts o;
    fixture_opts(&o, 2);
    o.ncls_list = 1;
    o.cls_list = xmalloc(sizeof *o.cls_list);
    o.cls_list[0] = 2;
    char *dir = test_make_tmpdir(), *err = NULL;
    svm_result r;
    cr_assert_eq(svm_voc07(&o, &tr, &te, dir, &r, &err), 0, "%s", err);
    cr_expect_eq(r.ncls, 1);
    cr_expect_eq(r.cls[0], 2);
    cr_expect_eq(r.reused, 0);
    svm_result_free(&r);
    /* a planted CV AP makes cost 10 the choice if and only if the file is read back */
    double planted = 2.0;
    size_t one = 1;
    write_npy(dir, "AP_cls2_cost10.0.npy", NPY_F8, 1, &one, &planted);
    cr_assert_eq(svm_voc07(&o, &tr, &te, dir, &r, &err), 0, "%s", err);
    cr_expect_eq(r.reused, 1);
    cr_expect_eq(r.chosen[0], 10.0);
    svm_result_free(&r);
    o.force_retrain = true;
    cr_assert_eq(svm_voc07(&o, &tr, &te, dir, &r, &err), 0, "%s", err);
    cr_expect_eq(r.reused, 0);
    cr_expect(r.crossval[2] < 1.0);
    svm_result_free(&r);
    svm_opts_free(&o);
    free_data(&tr);
    free_data(&te);
    rm_tree(dir);
}

Test(svm, a_class_without_positives_is_skipped)
{
    svm_data tr = fixture_split("voc_train"), te = fixture_split("voc_test");
    for (size_t i = 0; i < tr.n; i++)
        tr.t[i * tr.C + 1] = tr.t[i * tr.C + 1] == 1 ? 0 : tr.t[i * tr.C + 1];
    svm_opts o;
    fixture_opts(&o, 2);
    char *dir = test_make_tmpdir(), *err = NULL;
    svm_result r;
    cr_assert_eq(svm_voc07(&o, &tr, &te, dir, &r, &err), 0, "%s", err);
    cr_expect_eq(r.test_ap[1], -1);
    cr_expect(isnan(r.chosen[1]));
    cr_expect_float_eq(r.mAP, (r.test_ap[0] + r.test_ap[2] + r.test_ap[3]) / 3, 1e-12, "left out of the mean");
    svm_result_free(&r);
    svm_opts_free(&o);
    free_data(&tr);
    free_data(&te);
    rm_tree(dir);
}

/* ---- low-shot ------------------------------------------------------------------------------- */

Test(svm, lowshot_voc_samples_have_k_positives_and_c_minus_1_k_negatives)
{
    svm_data tr = fixture_split("voc_train");
    int8_t *s = xmalloc(tr.n * tr.C), *s2 = xmalloc(tr.n * tr.C);
    char *err = NULL;
    cr_assert_eq(svm_lowshot_sample(LOWSHOT_VOC, tr.t, tr.n, tr.C, 4, 7, 1, s, &err), 0, "%s", err);
    for (size_t c = 0; c < tr.C; c++) {
        size_t pos = 0, neg = 0;
        for (size_t i = 0; i < tr.n; i++) {
            int8_t v = s[i * tr.C + c];
            pos += v == 1, neg += v == 0;
            cr_assert(v == -1 || v == tr.t[i * tr.C + c], "a sampled row keeps its target");
        }
        cr_expect_eq(pos, 4);
        cr_expect_eq(neg, (tr.C - 1) * 4);
    }
    cr_assert_eq(svm_lowshot_sample(LOWSHOT_VOC, tr.t, tr.n, tr.C, 4, 7, 2, s2, &err), 0);
    cr_expect(memcmp(s, s2, tr.n * tr.C) != 0, "samples differ");
    cr_expect_eq(svm_lowshot_sample(LOWSHOT_VOC, tr.t, tr.n, tr.C, 1000, 7, 1, s, &err), -1);
    cr_expect(strstr(err, "fewer than k"), "%s", err);
    free(err);
    free(s);
    free(s2);
    free_data(&tr);
}

Test(svm, lowshot_places_samples_k_images_per_class)
{
    int64_t labels[60];
    for (int i = 0; i < 60; i++)
        labels[i] = i % 3;
    int8_t *t = NULL, *s = xmalloc(60 * 3);
    size_t C;
    char *err = NULL;
    cr_assert_eq(svm_targets_convert(labels, 60, 1, 3, "t", &t, &C, &err), 0);
    cr_assert_eq(svm_lowshot_sample(LOWSHOT_PLACES, t, 60, 3, 5, 0, 1, s, &err), 0, "%s", err);
    size_t kept = 0, pos[3] = {0};
    for (size_t i = 0; i < 60; i++)
        if (s[i * 3] != -1) {
            kept++;
            cr_assert_arr_eq(s + i * 3, t + i * 3, 3, "the whole one-hot row");
            pos[labels[i]]++;
        }
    cr_expect_eq(kept, 15);
    cr_expect(pos[0] == 5 && pos[1] == 5 && pos[2] == 5);
    free(t);
    free(s);
}

Test(svm, lowshot_run_writes_vissls_files)
{
    svm_data tr = fixture_split("voc_train"), te = fixture_split("voc_test");
    svm_opts o;
    fixture_opts(&o, 2);
    o.nk = 2;
    o.k_values[0] = 2, o.k_values[1] = 4;
    o.nsamples = 2;
    char *dir = test_make_tmpdir(), *err = NULL;
    svm_lowshot_result r;
    cr_assert_eq(svm_lowshot(&o, &tr, &te, dir, "res5", dir, &r, &err), 0, "%s", err);
    for (size_t i = 0; i < 2 * 2 * o.ncosts; i++)
        cr_expect(r.aps[i] > 0.2 && r.aps[i] <= 1.0, "aps[%zu] = %f", i, r.aps[i]);
    const char *files[] = {"res5_sample1_k2.npy", "res5_sample2_k4.npy", "test_ap_sample2_k4.npy",
                           "test_ap_mean.npy",    "test_ap_std.npy",     "cls3_cost0.1_sample1_k4.npy"};
    for (size_t i = 0; i < 6; i++) {
        npy_array a = read_npy(dir, files[i]);
        npy_close(&a);
    }
    npy_array m = read_npy(dir, "test_ap_mean.npy");
    cr_expect(m.ndim == 2 && m.shape[0] == 2 && m.shape[1] == o.ncosts);
    npy_close(&m);
    /* a sample file already there (VISSL's create_low_shot_samples.py) is used as it is */
    int32_t *mine = xmalloc(tr.n * tr.C * sizeof *mine);
    for (size_t i = 0; i < tr.n * tr.C; i++)
        mine[i] = i / tr.C < 40 ? tr.t[i] : -1; /* the first 40 rows only */
    size_t shape[2] = {tr.n, tr.C};
    write_npy(dir, "res5_sample1_k2.npy", NPY_I4, 2, shape, mine);
    o.force_retrain = true;
    svm_lowshot_result r2;
    cr_assert_eq(svm_lowshot(&o, &tr, &te, dir, "res5", dir, &r2, &err), 0, "%s", err);
    cr_expect_neq(r2.aps[0], r.aps[0], "sample 1, k 2 trained on the planted rows");
    cr_expect_eq(r2.aps[o.ncosts], r.aps[o.ncosts], "sample 2, k 2 unchanged");
    free(mine);
    svm_lowshot_result_free(&r);
    svm_lowshot_result_free(&r2);
    svm_opts_free(&o);
    free_data(&tr);
    free_data(&te);
    rm_tree(dir);
}

/* ---- the binary ----------------------------------------------------------------------------- */

/* Run selfsup-svm standalone on files in dir; returns the exit status, output in *out. */
static int run_svm(const char *dir, const char *extra, char **out)
{
    char *bin = test_build_path("selfsup-svm");
    char *cmd = xasprintf("%s --train-features %s/trx.npy --train-targets %s/trt.npy --test-features %s/tex.npy "
                          "--test-targets %s/tet.npy --output %s/out --threads 2 %s",
                          bin, dir, dir, dir, dir, dir, extra);
    int rc = test_run(cmd, out);
    free(cmd);
    free(bin);
    return rc;
}

/* A small well-formed problem: n rows, 3 classes; row i is class i % 3 (VOC one-hot form). */
static void write_problem(const char *dir, size_t n)
{
    float *x = xmalloc(n * 4 * sizeof *x);
    int64_t *t = xmalloc(n * 3 * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < 4; j++)
            x[i * 4 + j] = (float)((j == i % 3 ? 2.0 : 0.0) + 0.3 * sin((double)(i * 7 + j * 3)));
        for (size_t c = 0; c < 3; c++)
            t[i * 3 + c] = c == i % 3;
    }
    size_t sx[2] = {n, 4}, st[2] = {n, 3};
    write_npy(dir, "trx.npy", NPY_F4, 2, sx, x);
    write_npy(dir, "trt.npy", NPY_I8, 2, st, t);
    write_npy(dir, "tex.npy", NPY_F4, 2, sx, x);
    write_npy(dir, "tet.npy", NPY_I8, 2, st, t);
    free(x);
    free(t);
}

Test(svm, binary_help_version_and_a_clean_run)
{
    char *bin = test_build_path("selfsup-svm"), *out = NULL;
    char *cmd = xasprintf("%s --help", bin);
    cr_expect_eq(test_run(cmd, &out), 0);
    cr_expect(strstr(out, "--train-features"), "%s", out);
    free(out);
    free(cmd);
    cmd = xasprintf("%s --version", bin);
    cr_expect_eq(test_run(cmd, &out), 0);
    cr_expect(strstr(out, "selfsup-svm"), "%s", out);
    free(out);
    free(cmd);
    free(bin);
    char *dir = test_make_tmpdir();
    write_problem(dir, 60);
    cr_expect_eq(run_svm(dir, "--costs 0.1,1", &out), 0, "%s", out);
    cr_expect(strstr(out, "mAP 100.000"), "%s", out);
    free(out);
    char *json = xasprintf("%s/out/svm_results.json", dir), *ap = xasprintf("%s/out/cls2_cost1.0.npy", dir);
    cr_expect(path_exists(json) && path_exists(ap));
    free(json);
    free(ap);
    rm_tree(dir);
}

/* Overwrite one of the four files, run, expect `status` and `what` in the output. */
static void expect_refusal(const char *file, npy_dtype dt, int ndim, const size_t *shape, const void *data,
                           const char *extra, int status, const char *what)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    write_problem(dir, 30);
    if (file)
        write_npy(dir, file, dt, ndim, shape, data);
    cr_expect_eq(run_svm(dir, extra, &out), status, "%s", out);
    cr_expect(strstr(out, what), "expected '%s' in: %s", what, out);
    cr_expect(!strstr(out, "Sanitizer") && !strstr(out, "runtime error"), "%s", out);
    free(out);
    rm_tree(dir);
}

Test(svm, binary_refuses_bad_input_clearly)
{
    float x[29 * 4] = {0};
    size_t s29[2] = {29, 4};
    expect_refusal("trx.npy", NPY_F4, 2, s29, x, "", 1, "trt.npy"); /* rows of features ≠ targets */
    float nan_x[30 * 4];
    for (size_t i = 0; i < 30 * 4; i++)
        nan_x[i] = i == 13 ? NAN : 1.0f;
    size_t s30[2] = {30, 4};
    expect_refusal("tex.npy", NPY_F4, 2, s30, nan_x, "", 1, "tex.npy");
    double frac[30 * 3];
    for (size_t i = 0; i < 30 * 3; i++)
        frac[i] = 0.5;
    size_t t30[2] = {30, 3};
    expect_refusal("trt.npy", NPY_F8, 2, t30, frac, "", 1, "trt.npy"); /* non-integral targets */
    int64_t five[30 * 3];
    for (size_t i = 0; i < 30 * 3; i++)
        five[i] = i == 7 ? 5 : 0;
    expect_refusal("trt.npy", NPY_I8, 2, t30, five, "", 1, "row 2");
    size_t s0[2] = {0, 4}, t0[2] = {0, 3};
    char *dir = test_make_tmpdir(), *out = NULL;
    write_problem(dir, 30);
    write_npy(dir, "tex.npy", NPY_F4, 2, s0, NULL);
    write_npy(dir, "tet.npy", NPY_I8, 2, t0, NULL);
    cr_expect_eq(run_svm(dir, "", &out), 1, "%s", out);
    cr_expect(strstr(out, "no rows"), "%s", out);
    free(out);
    rm_tree(dir);
    float x5[30 * 5] = {0};
    size_t s5[2] = {30, 5};
    expect_refusal("tex.npy", NPY_F4, 2, s5, x5, "", 1, "same layer");
    expect_refusal(NULL, NPY_F4, 0, NULL, NULL, "--costs 0.1,-1", 2, "--costs");
    expect_refusal(NULL, NPY_F4, 0, NULL, NULL, "--folds 1", 2, "--folds");
    expect_refusal(NULL, NPY_F4, 0, NULL, NULL, "--frobnicate 3", 2, "unknown option");
    expect_refusal(NULL, NPY_F4, 0, NULL, NULL, "--cls-list 0,7", 1, "cls_list");
}

Test(svm, binary_trains_single_label_targets_one_vs_rest)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    write_problem(dir, 60);
    int64_t lab[60];
    for (int i = 0; i < 60; i++)
        lab[i] = i % 3;
    size_t n[2] = {60, 1};
    write_npy(dir, "trt.npy", NPY_I8, 2, n, lab);
    write_npy(dir, "tet.npy", NPY_I8, 1, n, lab);
    cr_expect_eq(run_svm(dir, "--costs 1", &out), 0, "%s", out);
    cr_expect(strstr(out, "3 classes") && strstr(out, "mAP 100.000"), "%s", out);
    free(out);
    rm_tree(dir);
}

Test(svm, binary_config_mode_reads_extracted_features)
{
    char *dir = test_make_tmpdir(), *out = NULL, *err = NULL;
    float x[60 * 4];
    int64_t t[60 * 3], inds[60];
    for (size_t i = 0; i < 60; i++) {
        for (size_t j = 0; j < 4; j++)
            x[i * 4 + j] = (float)((j == i % 3 ? 2.0 : 0.0) + 0.3 * cos((double)(i * 5 + j)));
        for (size_t c = 0; c < 3; c++)
            t[i * 3 + c] = c == i % 3;
        inds[i] = (int64_t)i;
    }
    feat_set f = {.n = 60, .dim = 4, .ntargets = 3, .features = x, .targets = t, .inds = inds};
    cr_assert_eq(feat_write(dir, 0, "train", "res5", &f, &err), 0, "%s", err);
    cr_assert_eq(feat_write(dir, 0, "test", "res5", &f, &err), 0, "%s", err);
    char *bin = test_build_path("selfsup-svm");
    char *cmd = xasprintf("%s -c quickstart/eval_svm config.CHECKPOINT.DIR=%s 'config.SVM.costs.costs_list=[0.5,2]' "
                          "--threads 2", bin, dir);
    cr_expect_eq(test_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "layer res5: mAP 100.000"), "%s", out);
    free(out);
    char *model = xasprintf("%s/res5/cls1_cost0.5.npy", dir);
    cr_expect(path_exists(model), "%s", model);
    free(model);
    free(cmd);
    cmd = xasprintf("%s -c quickstart/eval_svm config.SVM.cross_val_folds=1", bin);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "cross_val_folds"), "%s", out);
    free(out);
    free(cmd);
    cmd = xasprintf("%s -c quickstart/eval_svm config.SVM.loss=hinged", bin);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    free(out);
    free(cmd);
    free(bin);
    rm_tree(dir);
}

/* Single-label targets whose largest index is 2^40 or INT64_MAX would make max + 1 classes of
 * one-vs-rest: an n × classes matrix whose size overflows (INT64_MAX + 1) or is terabytes.
 * Refused, naming the file and the row, before anything is allocated or fitted. */
Test(svm, class_indices_past_the_limit_are_refused_naming_the_row)
{
    const int64_t huge[] = {INT64_MAX, (int64_t)1 << 40, SVM_MAX_CLASSES};
    const char *shown[] = {"9223372036854775807", "1099511627776", "65536"};
    for (size_t k = 0; k < ARRAY_LEN(huge); k++) {
        char *dir = test_make_tmpdir(), *out = NULL;
        write_problem(dir, 30);
        int64_t lab[30];
        for (int i = 0; i < 30; i++)
            lab[i] = i == 5 ? huge[k] : i % 3;
        size_t n[1] = {30};
        write_npy(dir, "trt.npy", NPY_I8, 1, n, lab);
        for (int i = 0; i < 30; i++)
            lab[i] = i % 3;
        write_npy(dir, "tet.npy", NPY_I8, 1, n, lab);
        cr_expect_eq(run_svm(dir, "--costs 1", &out), 1, "%s", out);
        char *needle = xasprintf("row 5: class index %s", shown[k]);
        cr_expect(strstr(out, needle) && strstr(out, "trt.npy"), "expected '%s' and the file in: %s", needle, out);
        cr_expect(!strstr(out, "Sanitizer") && !strstr(out, "runtime error"), "%s", out);
        free(needle);
        free(out);
        rm_tree(dir);
    }
    /* the library says the same about the test split */
    float x[4] = {1, 0, 0, 1};
    int64_t t_ok[2] = {0, 1}, t_bad[2] = {1, INT64_MAX};
    feat_set train = {.n = 2, .dim = 2, .ntargets = 1, .features = xmalloc(sizeof x), .targets = t_ok};
    feat_set test = {.n = 2, .dim = 2, .ntargets = 1, .features = xmalloc(sizeof x), .targets = t_bad};
    memcpy(train.features, x, sizeof x);
    memcpy(test.features, x, sizeof x);
    const char *const what[2] = {"train targets (a.npy)", "test targets (b.npy)"};
    svm_data tr, te;
    char *err = NULL;
    cr_expect_eq(svm_data_from_features(&train, &test, true, what, &tr, &te, &err), -1);
    cr_expect(err && strstr(err, "test targets (b.npy): row 1: class index 9223372036854775807"), "%s", err);
    free(err);
    free(train.features);
    free(test.features);
}

/* A mean AP needs a class with positive and negative training rows and a positive test row:
 * without one the run used to report mAP -1 and exit 0. Now it is bad data, exit 1, naming
 * the targets file that lacks the positives, found before any fit (no model file written). */
Test(svm, targets_without_any_usable_positive_are_an_error_naming_the_file)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    write_problem(dir, 30);
    int64_t zeros[30 * 3] = {0};
    size_t t30[2] = {30, 3};
    write_npy(dir, "trt.npy", NPY_I8, 2, t30, zeros);
    cr_expect_eq(run_svm(dir, "--costs 1", &out), 1, "%s", out);
    cr_expect(strstr(out, "trt.npy") && strstr(out, "no class has both positive"), "%s", out);
    cr_expect(!strstr(out, "mAP"), "%s", out);
    free(out);
    char *model = xasprintf("%s/out/cls0_cost1.0.npy", dir);
    cr_expect(!path_exists(model), "a model was fitted: %s", model);
    free(model);
    rm_tree(dir);

    dir = test_make_tmpdir();
    write_problem(dir, 30);
    write_npy(dir, "tet.npy", NPY_I8, 2, t30, zeros);
    cr_expect_eq(run_svm(dir, "--costs 1", &out), 1, "%s", out);
    cr_expect(strstr(out, "tet.npy") && strstr(out, "none of the 3 trainable classes has a positive"), "%s", out);
    free(out);
    /* one class with a positive test row is enough for a mean */
    for (size_t i = 0; i < 30; i++)
        zeros[i * 3 + 2] = i % 3 == 2;
    write_npy(dir, "tet.npy", NPY_I8, 2, t30, zeros);
    cr_expect_eq(run_svm(dir, "--costs 1", &out), 0, "%s", out);
    cr_expect(strstr(out, "mAP 100.000"), "%s", out);
    free(out);
    rm_tree(dir);
}

/* An output folder that cannot be made (it would sit under a regular file) is refused with
 * exit 2 before the features are even read, naming the option or the config key. */
Test(svm, unusable_output_folders_are_refused_before_any_fit)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    write_problem(dir, 30);
    char *file = xasprintf("%s/a-file", dir);
    FILE *f = fopen(file, "w");
    cr_assert(f);
    fclose(f);
    char *bin = test_build_path("selfsup-svm");
    char *cmd = xasprintf("%s --train-features %s/trx.npy --train-targets %s/trt.npy --test-features %s/tex.npy "
                          "--test-targets %s/tet.npy --output %s/sub --costs 1",
                          bin, dir, dir, dir, dir, file);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "--output") && strstr(out, "a-file/sub"), "%s", out);
    cr_expect(!strstr(out, "mAP"), "%s", out);
    free(out);
    free(cmd);
    cmd = xasprintf("%s -c quickstart/eval_svm --features %s config.CHECKPOINT.DIR=%s/sub", bin, dir, file);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "config.CHECKPOINT.DIR") && strstr(out, "a-file/sub"), "%s", out);
    free(out);
    free(cmd);
    free(bin);
    free(file);
    rm_tree(dir);
}

/*
 * test_knn.c — selfsup-knn (stages/knn) against VISSL's kNN run in torch 1.13
 * (tests/golden/make_knn_fixtures.py): the same top-5 predictions for every test row and the
 * same top-1/top-5, with and without L2 normalisation, below 100 test rows, with fewer than 5
 * classes and with k = 1 (where torch's sort order of zero scores decides top-5). Then the
 * invariances (block sizes and threads change nothing), hand-derived cases (overflowing
 * weights, normalisation), and bad input through the library and through the binary (labels
 * past the class limit, output folders that cannot be written): a clear message and exit
 * code before any work, never a crash.
 */
#include "features.h"
#include "knn/knn.h"
#include "knn/torch_sort.h"
#include "npy.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const cases[] = {"l2_small", "l2_chunks", "raw", "three_classes", "k1_many_classes", "k3", "k_over_n"};

static char *fixture_file(const char *kase, const char *what)
{
    char *name = xasprintf("%s_%s.npy", kase, what), *path = test_fixture("knn", name);
    free(name);
    return path;
}

static void load_split(const char *kase, const char *split, feat_set *out)
{
    char *fw = xasprintf("%s_features", split), *tw = xasprintf("%s_targets", split);
    char *f = fixture_file(kase, fw), *t = fixture_file(kase, tw), *err = NULL;
    cr_assert_eq(feat_load(f, t, NULL, out, &err), 0, "%s", err ? err : "");
    free(fw);
    free(tw);
    free(f);
    free(t);
}

/* The case's VISSL parameters (sigma, topk, l2_norm). */
static knn_options case_options(const char *kase)
{
    npy_array p = test_fixture_npy("knn", kase, "params");
    const double *v = p.data;
    knn_options o = {.sigma = v[0], .topk = (int64_t)v[1], .l2_norm = v[2] != 0};
    npy_close(&p);
    return o;
}

/* Run a fixture case with its parameters and the given tiling and threads. */
static void run_case(const char *kase, size_t block_test, size_t block_train, int threads, knn_result *r)
{
    feat_set train, test;
    load_split(kase, "train", &train);
    load_split(kase, "test", &test);
    knn_options o = case_options(kase);
    o.block_test = block_test;
    o.block_train = block_train;
    o.threads = threads;
    char *err = NULL;
    cr_assert_eq(knn_run(&train, &test, &o, r, &err), 0, "%s: %s", kase, err ? err : "");
    feat_free(&train);
    feat_free(&test);
}

Test(knn, predictions_match_vissl_on_every_fixture)
{
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        knn_result r;
        run_case(cases[c], 0, 0, 0, &r);
        npy_array pred = test_fixture_npy("knn", cases[c], "predictions");
        npy_array acc = test_fixture_npy("knn", cases[c], "accuracy");
        cr_assert_eq(pred.shape[0], r.n_test, "%s", cases[c]);
        cr_assert_eq(pred.shape[1], (size_t)r.npred, "%s", cases[c]);
        const int64_t *want = pred.data;
        for (size_t i = 0; i < r.n_test; i++)
            for (int j = 0; j < r.npred; j++)
                cr_expect_eq(r.predictions[i * KNN_TOP5 + (size_t)j], want[i * (size_t)r.npred + (size_t)j],
                             "%s: test row %zu, prediction %d", cases[c], i, j);
        const double *a = acc.data;
        cr_expect_eq(r.top1, a[0], "%s: top-1 %.10g, VISSL %.10g", cases[c], r.top1, a[0]);
        cr_expect_eq(r.top5, a[1], "%s: top-5 %.10g, VISSL %.10g", cases[c], r.top5, a[1]);
        cr_expect_eq(r.overflow_rows, 0);
        npy_close(&pred);
        npy_close(&acc);
        knn_result_free(&r);
    }
}

Test(knn, k_is_clamped_to_the_train_rows_and_top5_to_the_classes)
{
    knn_result r;
    run_case("k_over_n", 0, 0, 1, &r);
    cr_expect_eq(r.k, 30); /* TOPK 200, 30 train rows */
    knn_result_free(&r);
    run_case("three_classes", 0, 0, 1, &r);
    cr_expect_eq(r.num_classes, 3);
    cr_expect_eq(r.npred, 3);
    cr_expect_eq(r.top5, 100.0); /* every class is among the "first five" */
    cr_expect_eq(r.predictions[3], -1);
    knn_result_free(&r);
}

/* Tiny tiles, one tile, train shards (fewer test blocks than threads), several threads. */
Test(knn, block_sizes_and_threads_do_not_change_the_result)
{
    const struct {
        size_t bt, bn;
        int threads;
    } tilings[] = {{1, 2, 1}, {3, 7, 2}, {5000, 5000, 2}, {64, 13, 3}};
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        knn_result ref;
        run_case(cases[c], 0, 0, 1, &ref);
        for (size_t t = 0; t < ARRAY_LEN(tilings); t++) {
            knn_result r;
            run_case(cases[c], tilings[t].bt, tilings[t].bn, tilings[t].threads, &r);
            cr_expect_eq(memcmp(r.predictions, ref.predictions, r.n_test * KNN_TOP5 * sizeof *r.predictions), 0,
                         "%s: tiles %zu × %zu on %d threads", cases[c], tilings[t].bt, tilings[t].bn,
                         tilings[t].threads);
            cr_expect_eq(r.top1_hits, ref.top1_hits);
            cr_expect_eq(r.top5_hits, ref.top5_hits);
            knn_result_free(&r);
        }
        knn_result_free(&ref);
    }
}

Test(knn, tied_scores_come_out_in_torch_sort_order)
{
    const char *sorts[] = {"sort_c5", "sort_c16", "sort_c17", "sort_c33", "sort_c100", "sort_c1000"};
    for (size_t s = 0; s < ARRAY_LEN(sorts); s++) {
        npy_array vals = test_fixture_npy("knn", sorts[s], "values");
        npy_array order = test_fixture_npy("knn", sorts[s], "order");
        size_t rows = vals.shape[0], n = vals.shape[1];
        float *v = xmalloc(n * sizeof *v);
        int64_t *idx = xmalloc(n * sizeof *idx), top[KNN_TOP5];
        for (size_t r = 0; r < rows; r++) {
            const float *row = (const float *)vals.data + r * n;
            const int32_t *want = (const int32_t *)order.data + r * n;
            memcpy(v, row, n * sizeof *v);
            for (size_t i = 0; i < n; i++)
                idx[i] = (int64_t)i;
            torch_sort_desc(v, idx, n);
            for (size_t i = 0; i < n; i++)
                cr_expect_eq(idx[i], want[i], "%s row %zu: position %zu is class %lld, torch has %d", sorts[s], r,
                             i, (long long)idx[i], want[i]);
            knn_rank_classes(row, (int64_t)n, KNN_TOP5, top);
            for (int j = 0; j < KNN_TOP5; j++)
                cr_expect_eq(top[j], want[j], "%s row %zu: rank %d", sorts[s], r, j);
        }
        free(v);
        free(idx);
        npy_close(&vals);
        npy_close(&order);
    }
}

Test(knn, normalize_is_torch_normalize)
{
    float x[] = {3, 4, 0, 0, -1e-20f, 0};
    knn_l2_normalize(x, 3, 2);
    cr_expect_float_eq(x[0], 0.6f, 1e-7);
    cr_expect_float_eq(x[1], 0.8f, 1e-7);
    cr_expect_eq(x[2], 0.0f); /* ‖x‖ = 0: divided by eps, stays 0 */
    cr_expect_float_eq(x[4], -1e-8f, 1e-14); /* 1e-20 / max(1e-20, 1e-12) */
}

static feat_set make_set(size_t n, size_t dim, const float *f, const int64_t *t)
{
    feat_set s = {.n = n, .dim = dim, .ntargets = 1};
    s.features = xmalloc((n ? n : 1) * dim * sizeof *s.features);
    s.targets = xmalloc((n ? n : 1) * sizeof *s.targets);
    s.inds = NULL;
    if (n) {
        memcpy(s.features, f, n * dim * sizeof *f);
        memcpy(s.targets, t, n * sizeof *t);
    }
    return s;
}

/* sims 100, 99, 99, 0 with σ = 0.1: exp(1000) is inf in float32 (VISSL: NaN scores). Shifted
 * weights 1, e^-10, e^-10, e^-1000 rank class 0 first (1 > 2e^-10), then 1, then 2. */
Test(knn, overflowing_weights_are_ranked_by_shifted_scores)
{
    const float tf[] = {10, 0, 9.9f, 0, 9.9f, 0, 0, 10}, qf[] = {10, 0};
    const int64_t tl[] = {0, 1, 1, 2}, ql[] = {1};
    feat_set train = make_set(4, 2, tf, tl), test = make_set(1, 2, qf, ql);
    knn_options o = {.sigma = 0.1, .topk = 4};
    knn_result r;
    char *err = NULL;
    cr_assert_eq(knn_run(&train, &test, &o, &r, &err), 0, "%s", err ? err : "");
    cr_expect_eq(r.overflow_rows, 1);
    cr_expect_eq(r.predictions[0], 0);
    cr_expect_eq(r.predictions[1], 1);
    cr_expect_eq(r.predictions[2], 2);
    cr_expect_eq(r.top1_hits, 0);
    cr_expect_eq(r.top5_hits, 1);
    knn_result_free(&r);
    feat_free(&train);
    feat_free(&test);
}

/* One bad input: knn_run refuses it with a message containing `needle`. */
static void expect_refused(feat_set *train, feat_set *test, const char *needle)
{
    knn_options o = {.sigma = 0.1, .topk = 2};
    knn_result r;
    char *err = NULL;
    cr_assert_eq(knn_run(train, test, &o, &r, &err), -1, "accepted; expected '%s'", needle);
    cr_expect(err && strstr(err, needle), "message '%s' lacks '%s'", err ? err : "(none)", needle);
    free(err);
    knn_result_free(&r);
}

Test(knn, bad_inputs_are_refused_by_the_library)
{
    const float f4[] = {1, 0, 0, 1, 1, 1, 2, 0}, nan4[] = {1, 0, NAN, 1, 1, 1, 2, 0}, big[] = {1e30f, 0, 1e30f, 0};
    const int64_t l4[] = {0, 1, 0, 1}, neg4[] = {0, -1, 0, 1};
    feat_set train = make_set(4, 2, f4, l4), test = make_set(2, 2, f4, l4);
    feat_set narrow = make_set(4, 1, f4, l4), empty = make_set(0, 2, NULL, NULL);
    feat_set nan = make_set(4, 2, nan4, l4), neg = make_set(4, 2, f4, neg4), huge = make_set(2, 2, big, l4);
    expect_refused(&train, &narrow, "the same layer");
    expect_refused(&train, &empty, "test split has no rows");
    expect_refused(&empty, &test, "train split has no rows");
    expect_refused(&nan, &test, "train features: row 1 holds NaN");
    expect_refused(&train, &neg, "row 1 has label -1");
    expect_refused(&huge, &huge, "overflow float32");
    train.ntargets = 2; /* 4 × 2 reinterpreted: two label columns */
    train.n = 2;
    expect_refused(&train, &test, "2 columns");
    train.n = 4;
    train.ntargets = 1;
    knn_options bad_sigma = {.sigma = 0, .topk = 2}, bad_k = {.sigma = 0.1, .topk = 0};
    knn_result r;
    char *err = NULL;
    cr_expect_eq(knn_run(&train, &test, &bad_sigma, &r, &err), -1);
    cr_expect(err && strstr(err, "SIGMA"));
    free(err);
    err = NULL;
    cr_expect_eq(knn_run(&train, &test, &bad_k, &r, &err), -1);
    cr_expect(err && strstr(err, "TOPK"));
    free(err);
    feat_set *all[] = {&train, &test, &narrow, &empty, &nan, &neg, &huge};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        feat_free(all[i]);
}

/* ---- the binary --------------------------------------------------------------------------- */

static int run_knn(const char *args, char **out)
{
    char *bin = test_build_path("selfsup-knn");
    char *cmd = xasprintf("%s %s", bin, args);
    int rc = test_run(cmd, out);
    free(bin);
    free(cmd);
    return rc;
}

static char *standalone_args(const char *kase)
{
    char *tf = fixture_file(kase, "train_features"), *tt = fixture_file(kase, "train_targets"),
         *qf = fixture_file(kase, "test_features"), *qt = fixture_file(kase, "test_targets");
    char *s = xasprintf("--train-features %s --train-targets %s --test-features %s --test-targets %s", tf, tt, qf, qt);
    free(tf);
    free(tt);
    free(qf);
    free(qt);
    return s;
}

static double json_layer_number(const char *path, const char *layer, const char *key)
{
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    cr_assert(doc, "%s: %s", path, jerr.text);
    json_t *v = json_object_get(json_object_get(json_object_get(doc, "layers"), layer), key);
    cr_assert(json_is_number(v), "%s: no layers.%s.%s", path, layer, key);
    double d = json_number_value(v);
    json_decref(doc);
    return d;
}

Test(knn, standalone_binary_prints_the_table_and_writes_json)
{
    char *dir = test_make_tmpdir(), *files = standalone_args("l2_chunks"), *out = NULL;
    char *args = xasprintf("%s --sigma 0.07 --topk 50 --l2-norm --output %s/r.json --predictions %s/p.npy --threads 2",
                           files, dir, dir);
    int rc = run_knn(args, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "top-1") && strstr(out, "69.1304") && strstr(out, "96.5217"), "%s", out);
    char *json = xasprintf("%s/r.json", dir), *pred = xasprintf("%s/p.npy", dir);
    npy_array acc = test_fixture_npy("knn", "l2_chunks", "accuracy");
    cr_expect_eq(json_layer_number(json, "l2_chunks_train_features", "top1"), ((double *)acc.data)[0]);
    cr_expect_eq(json_layer_number(json, "l2_chunks_train_features", "k"), 50);
    npy_array mine, want = test_fixture_npy("knn", "l2_chunks", "predictions");
    cr_assert_eq(npy_read(pred, &mine, NULL), 0);
    cr_assert_eq(mine.nbytes, want.nbytes);
    cr_expect_eq(memcmp(mine.data, want.data, want.nbytes), 0);
    npy_close(&mine);
    npy_close(&want);
    npy_close(&acc);
    free(json);
    free(pred);
    free(args);
    free(files);
    free(out);
    test_rm_dir(dir);
}

/* The fixture case written as one rank's feature files, and a config pointing at them. */
static char *write_config_case(const char *dir, const char *kase, const char *layer)
{
    const char *splits[] = {"train", "test"};
    for (int s = 0; s < 2; s++) {
        feat_set f;
        load_split(kase, splits[s], &f);
        char *err = NULL;
        cr_assert_eq(feat_write(dir, 0, splits[s], layer, &f, &err), 0, "%s", err ? err : "");
        feat_free(&f);
    }
    char *cfg = xasprintf("%s/knn.yaml", dir);
    FILE *fp = fopen(cfg, "w");
    cr_assert(fp);
    fprintf(fp,
            "# @package _global_\nconfig:\n  CHECKPOINT:\n    DIR: %s\n  NEAREST_NEIGHBOR:\n    SIGMA: 0.1\n"
            "    TOPK: 20\n    L2_NORM_FEATS: True\n",
            dir);
    fclose(fp);
    return cfg;
}

Test(knn, config_mode_reads_every_layer_and_writes_nearest_neighbor_json)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    char *cfg = write_config_case(dir, "l2_small", "res5avg");
    char *args = xasprintf("-c %s --threads 2", cfg);
    int rc = run_knn(args, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "res5avg"), "%s", out);
    char *json = xasprintf("%s/nearest_neighbor.json", dir);
    npy_array acc = test_fixture_npy("knn", "l2_small", "accuracy");
    cr_expect_eq(json_layer_number(json, "res5avg", "top1"), ((double *)acc.data)[0]);
    cr_expect_eq(json_layer_number(json, "res5avg", "top5"), ((double *)acc.data)[1]);
    npy_close(&acc);
    free(out);
    free(args);

    /* Overrides reach NEAREST_NEIGHBOR; bad values stop before any work with exit 2. */
    const char *bad[] = {"config.NEAREST_NEIGHBOR.SIGMA=-1", "config.NEAREST_NEIGHBOR.TOPK=0",
                         "config.NEAREST_NEIGHBOR.TOPKK=3"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        args = xasprintf("-c %s %s", cfg, bad[i]);
        cr_expect_eq(run_knn(args, &out), 2, "%s: %s", bad[i], out);
        cr_expect(strstr(out, "NEAREST_NEIGHBOR"), "%s: %s", bad[i], out);
        free(out);
        free(args);
    }
    args = xasprintf("-c %s --layers nosuchlayer", cfg);
    cr_expect_eq(run_knn(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "nosuchlayer"), "%s", out);
    free(out);
    free(args);
    free(json);
    free(cfg);
    test_rm_dir(dir);
}

static void write_npy(const char *dir, const char *name, npy_dtype dt, int ndim, const size_t *shape, const void *data)
{
    char *path = xasprintf("%s/%s", dir, name);
    cr_assert_eq(npy_write(path, dt, ndim, shape, data, NULL), 0);
    free(path);
}

/* Runs standalone on DIR/{a,b,c,d}.npy and expects `code` and `needle` in the output. */
static void expect_binary_refuses(const char *dir, const char *extra, int code, const char *needle)
{
    char *args = xasprintf("--train-features %s/a.npy --train-targets %s/b.npy --test-features %s/c.npy "
                           "--test-targets %s/d.npy %s",
                           dir, dir, dir, dir, extra);
    char *out = NULL;
    int rc = run_knn(args, &out);
    cr_expect_eq(rc, code, "%s → %d: %s", extra, rc, out);
    cr_expect(strstr(out, needle), "'%s' lacks '%s'", out, needle);
    cr_expect(!strstr(out, "AddressSanitizer") && !strstr(out, "Segmentation"), "%s", out);
    free(out);
    free(args);
}

Test(knn, bad_files_and_arguments_give_clear_errors_through_the_binary)
{
    char *dir = test_make_tmpdir();
    const float f[] = {1, 0, 0, 1, 1, 1, 2, 0, 0, 2};
    const float nanf_[] = {1, 0, 0, 1, NAN, 1, 2, 0, 0, 2};
    const int64_t t[] = {0, 1, 0, 1, 2}, t2[] = {0, 1, 0, 1, 2, 0, 1, 0, 1, 2};
    const int32_t fi[] = {1, 0, 0, 1, 1, 1, 2, 0, 0, 2};
    const size_t s52[] = {5, 2}, s42[] = {4, 2}, s5[] = {5}, s02[] = {0, 2}, s0[] = {0}, s25[] = {5, 2};
    write_npy(dir, "a.npy", NPY_F4, 2, s52, f);
    write_npy(dir, "b.npy", NPY_I8, 1, s5, t);
    write_npy(dir, "c.npy", NPY_F4, 2, s52, f);
    write_npy(dir, "d.npy", NPY_I8, 1, s5, t);
    expect_binary_refuses(dir, "--topk 3", 0, "top-5");

    write_npy(dir, "c.npy", NPY_F4, 2, s42, f); /* 4 feature rows, 5 targets */
    expect_binary_refuses(dir, "", 1, "5 rows of targets for 4 rows of features");
    write_npy(dir, "c.npy", NPY_F4, 2, s52, nanf_);
    expect_binary_refuses(dir, "", 1, "c.npy");
    write_npy(dir, "c.npy", NPY_I4, 2, s52, fi); /* integer features */
    expect_binary_refuses(dir, "", 1, "c.npy");
    write_npy(dir, "c.npy", NPY_F4, 2, s02, f); /* an empty test split */
    write_npy(dir, "d.npy", NPY_I8, 1, s0, t);
    expect_binary_refuses(dir, "", 1, "no rows");
    write_npy(dir, "c.npy", NPY_F4, 2, s52, f);
    write_npy(dir, "d.npy", NPY_I8, 2, s25, t2); /* two label columns */
    expect_binary_refuses(dir, "", 1, "columns");

    write_npy(dir, "d.npy", NPY_I8, 1, s5, t);
    expect_binary_refuses(dir, "--sigma -1", 2, "--sigma");
    expect_binary_refuses(dir, "--topk 0", 2, "--topk");
    expect_binary_refuses(dir, "--bogus", 2, "unknown option");
    expect_binary_refuses(dir, "--predictions", 2, "needs a value");
    expect_binary_refuses(dir, "--layers a", 2, "needs a config");
    char *out = NULL;
    cr_expect_eq(run_knn("--train-features /nonexistent/x.npy --train-targets a --test-features b --test-targets c",
                         &out),
                 2);
    cr_expect(strstr(out, "no such file"), "%s", out);
    free(out);
    cr_expect_eq(run_knn("--train-features x.npy", &out), 2);
    free(out);
    cr_expect_eq(run_knn("--help", &out), 0);
    cr_expect(strstr(out, "usage: selfsup-knn"));
    free(out);
    cr_expect_eq(run_knn("--version", &out), 0);
    cr_expect(strstr(out, "selfsup-knn "));
    free(out);
    test_rm_dir(dir);
}

/* Four identical train rows of classes 0..3 and k = 2: the two neighbours are train rows 0
 * and 1 (the lower indices) however the rows are tiled and sharded, so classes 0 and 1 tie
 * for first and torch's sort (stable below 17 entries) puts 0 first. */
Test(knn, equal_similarities_keep_the_lower_train_index)
{
    const float tf[] = {1, 0, 1, 0, 1, 0, 1, 0}, qf[] = {1, 0};
    const int64_t tl[] = {3, 2, 1, 0}, ql[] = {2};
    const struct {
        size_t bt, bn;
        int threads;
    } tilings[] = {{0, 0, 1}, {1, 1, 1}, {1, 1, 2}, {1, 3, 2}};
    for (size_t t = 0; t < ARRAY_LEN(tilings); t++) {
        feat_set train = make_set(4, 2, tf, tl), test = make_set(1, 2, qf, ql);
        knn_options o = {.sigma = 0.1, .topk = 2, .block_test = tilings[t].bt, .block_train = tilings[t].bn,
                         .threads = tilings[t].threads};
        knn_result r;
        char *err = NULL;
        cr_assert_eq(knn_run(&train, &test, &o, &r, &err), 0, "%s", err ? err : "");
        /* neighbours: rows 0 (class 3) and 1 (class 2); then classes 0, 1 with score 0 */
        const int64_t want[] = {2, 3, 0, 1};
        for (int j = 0; j < 4; j++)
            cr_expect_eq(r.predictions[j], want[j], "tiling %zu: rank %d is %lld", t, j, (long long)r.predictions[j]);
        knn_result_free(&r);
        feat_free(&train);
        feat_free(&test);
    }
}

/* A label of 2^40 or INT64_MAX makes max label + 1 classes: once a 0-byte buffer (the + 1
 * overflows) written past, once terabytes asked for on every thread. Both are refused before
 * any work, naming the split and the row, through the library and the binary. */
Test(knn, labels_past_the_class_limit_are_refused_naming_the_row)
{
    const float f4[] = {1, 0, 0, 1, 1, 1, 2, 0};
    const int64_t huge[] = {INT64_MAX, (int64_t)1 << 40, KNN_MAX_CLASSES};
    const char *shown[] = {"9223372036854775807", "1099511627776", "1048576"};
    for (size_t i = 0; i < ARRAY_LEN(huge); i++) {
        const int64_t labels[] = {0, 1, huge[i], 1}, fine[] = {0, 1, 0, 1};
        feat_set train = make_set(4, 2, f4, labels), test = make_set(4, 2, f4, fine);
        char *needle = xasprintf("train targets: row 2 has label %s", shown[i]);
        expect_refused(&train, &test, needle);
        free(needle);
        feat_set train2 = make_set(4, 2, f4, fine), test2 = make_set(4, 2, f4, labels);
        needle = xasprintf("test targets: row 2 has label %s", shown[i]);
        expect_refused(&train2, &test2, needle);
        free(needle);
        feat_free(&train), feat_free(&test), feat_free(&train2), feat_free(&test2);
    }
    /* the largest label allowed still runs */
    const int64_t top[] = {0, 1, KNN_MAX_CLASSES - 1, 1};
    feat_set train = make_set(4, 2, f4, top), test = make_set(4, 2, f4, top);
    knn_options o = {.sigma = 0.1, .topk = 2, .threads = 2};
    knn_result r;
    char *err = NULL;
    cr_assert_eq(knn_run(&train, &test, &o, &r, &err), 0, "%s", err ? err : "");
    cr_expect_eq(r.num_classes, KNN_MAX_CLASSES);
    knn_result_free(&r);
    feat_free(&train), feat_free(&test);

    char *dir = test_make_tmpdir();
    const size_t s42[] = {4, 2}, s4[] = {4};
    const int64_t fine[] = {0, 1, 0, 1};
    write_npy(dir, "a.npy", NPY_F4, 2, s42, f4);
    write_npy(dir, "c.npy", NPY_F4, 2, s42, f4);
    write_npy(dir, "d.npy", NPY_I8, 1, s4, fine);
    for (size_t i = 0; i < 2; i++) {
        const int64_t labels[] = {0, 1, huge[i], 1};
        write_npy(dir, "b.npy", NPY_I8, 1, s4, labels);
        char *needle = xasprintf("row 2 has label %s", shown[i]);
        expect_binary_refuses(dir, "--threads 4", 1, needle);
        free(needle);
    }
    test_rm_dir(dir);
}

/* A results folder that cannot be made (it would sit under a regular file) is refused with
 * exit 2 before any layer is searched: no row of the table is printed. */
Test(knn, unusable_output_folders_are_refused_before_any_layer_runs)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    char *cfg = write_config_case(dir, "l2_small", "res5avg");
    char *file = xasprintf("%s/a-file", dir);
    FILE *f = fopen(file, "w");
    cr_assert(f);
    fclose(f);
    char *args = xasprintf("-c %s --threads 2 --output %s/sub/r.json", cfg, file);
    cr_expect_eq(run_knn(args, &out), 2, "%s", out);
    cr_expect(strstr(out, "--output") && strstr(out, "a-file/sub"), "%s", out);
    cr_expect(!strstr(out, "res5avg"), "a layer ran before the output was checked: %s", out);
    free(out), free(args);
    /* the default results folder, CHECKPOINT.DIR, is named with the config line it comes from */
    args = xasprintf("-c %s --features %s config.CHECKPOINT.DIR=%s/sub", cfg, dir, file);
    cr_expect_eq(run_knn(args, &out), 2, "%s", out);
    cr_expect(strstr(out, "config.CHECKPOINT.DIR") && strstr(out, "a-file/sub"), "%s", out);
    cr_expect(!strstr(out, "res5avg"), "%s", out);
    free(out), free(args);
    char *files = standalone_args("l2_small");
    args = xasprintf("%s --predictions %s/p/p.npy", files, file);
    cr_expect_eq(run_knn(args, &out), 2, "%s", out);
    cr_expect(strstr(out, "--predictions") && strstr(out, "a-file/p"), "%s", out);
    cr_expect(!strstr(out, "l2_small_train_features"), "%s", out);
    free(out), free(args), free(files);
    free(cfg), free(file);
    test_rm_dir(dir);
}

/*
 * test_retrieval.c — the instance-retrieval benchmark (stages/retrieval/) against VISSL 0.1.5's
 * own computation (tests/golden/make_retrieval_fixtures.py restates rmac.py, pca.py, evaluate.py
 * and data_util.py), against hand-derived values, and against invariants of the whitening.
 *
 * End to end, selfsup-retrieval runs a formula-weighted resnet18 (the C side writes it as a
 * torchvision .pth, as test_extract.c does) on small synthetic datasets in the revisited and
 * classic layouts, and its similarities and scores must be the tool's.
 */
#include "npy.h"
#include "retrieval/retrieval.h"
#include "test_nn_util.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- descriptors ------------------------------------------------------------------------------ */

Test(retrieval, rmac_regions_of_a_7x7_map_are_the_spec_grid)
{
    /* 3 levels: the whole map; 4 regions of 4 at x, y in {0, 3}; 9 of 3 at {0, 2, 4}; y outer. */
    int r[32][4];
    cr_assert_eq(rmac_regions(7, 7, 3, r), 14);
    cr_expect(r[0][0] == 0 && r[0][1] == 0 && r[0][2] == 7 && r[0][3] == 7);
    int want2[4][2] = {{0, 0}, {3, 0}, {0, 3}, {3, 3}};
    for (int k = 0; k < 4; k++)
        cr_expect(r[1 + k][0] == want2[k][0] && r[1 + k][1] == want2[k][1] && r[1 + k][2] == 4, "region %d", 1 + k);
    for (int k = 0; k < 9; k++)
        cr_expect(r[5 + k][0] == 2 * (k % 3) && r[5 + k][1] == 2 * (k / 3) && r[5 + k][3] == 3, "region %d", 5 + k);
}

Test(retrieval, rmac_regions_match_vissl_for_every_map_shape)
{
    npy_array t = test_fixture_npy("retrieval", "rmac", "regions");
    const int64_t *row = t.data;
    size_t nrows = t.shape[0];
    for (size_t i = 0; i < nrows;) {
        int H = (int)row[i * 7], W = (int)row[i * 7 + 1], L = (int)row[i * 7 + 2];
        int n = rmac_regions(H, W, L, NULL);
        int(*r)[4] = xmalloc((size_t)n * sizeof *r);
        rmac_regions(H, W, L, r);
        for (int k = 0; k < n; k++, i++) {
            cr_assert_lt(i, nrows, "%d x %d, L %d: more regions than VISSL's", H, W, L);
            cr_assert(row[i * 7] == H && row[i * 7 + 1] == W, "%d x %d, L %d: fewer regions than VISSL's", H, W, L);
            for (int j = 0; j < 4; j++)
                cr_expect_eq(r[k][j], row[i * 7 + 3 + j], "%d x %d, L %d, region %d, value %d", H, W, L, k, j);
        }
        free(r);
    }
    npy_close(&t);
}

Test(retrieval, gem_of_a_hand_map)
{
    /* channel 0 = {1, 3}, channel 1 = {-1 (clamped to 1e-6), 2}, p = 2: sqrt(5), sqrt(2), then
     * the bias channel 1, over the norm sqrt(8) + 1e-6. */
    float map[4] = {1, 3, -1, 2}, out[3];
    gem_descriptor(map, 2, 1, 2, 2.0, out);
    double denom = sqrt(8.0) + 1e-6;
    cr_expect_float_eq(out[0], sqrt(5.0) / denom, 1e-6);
    cr_expect_float_eq(out[1], sqrt((4 + 1e-12) / 2) / denom, 1e-6);
    cr_expect_float_eq(out[2], 1 / denom, 1e-6);
    gem_descriptor(map, 2, 1, 2, INFINITY, out); /* max pooling */
    cr_expect_float_eq(out[0], 3 / sqrt(14.0), 1e-6);
}

/* ---- scores ------------------------------------------------------------------------------- */

Test(retrieval, ap_of_ranks_is_the_spec_value)
{
    cr_expect_float_eq(retr_ap_from_ranks((int64_t[]){0, 2}, 2, 2), 0.7916667, 1e-7);
}

Test(retrieval, compute_map_skips_junk_and_queries_without_positives)
{
    /* Query 0 ranks [3, 0, 5, 1, 2, 4]; positives {0, 2} at positions 1 and 4, junk {5} at 2,
     * so the positives count at 1 and 3: AP = (0 + 1/2)/4 + (1/3 + 2/4)/4 = 1/3; mP@1 = 0,
     * mP@5 = mP@10 = 2/4 (k is held to the last positive, 4). Query 1 has no positives. */
    int64_t ranks[12] = {3, 0, 5, 1, 2, 4, 0, 1, 2, 3, 4, 5};
    retr_gnd g[2] = {{.ok = (int64_t[]){0, 2}, .n_ok = 2, .junk = (int64_t[]){5}, .n_junk = 1}, {0}};
    double map, mpk[RETR_KAPPAS], aps[2];
    retr_compute_map(ranks, 2, 6, g, &map, mpk, aps);
    cr_expect_float_eq(map, 1.0 / 3, 1e-12);
    cr_expect_float_eq(aps[0], 1.0 / 3, 1e-12);
    cr_expect(isnan(aps[1]));
    cr_expect_float_eq(mpk[0], 0.0, 1e-12);
    cr_expect_float_eq(mpk[1], 0.5, 1e-12);
    cr_expect_float_eq(mpk[2], 0.5, 1e-12);
}

Test(retrieval, oxford_ap_counts_positives_the_database_lacks)
{
    /* Ranked A (positive), B (junk), C, D (positive); 3 positives, one not in the database:
     * 1/3·(1 + 1)/2 + 0 + 1/3·(1/2 + 2/3)/2 = 0.527778. */
    int64_t ranked[4] = {0, 1, 2, 3};
    bool pos[4] = {true, false, false, true}, junk[4] = {false, true, false, false};
    cr_expect_float_eq(retr_oxford_ap(ranked, 4, pos, junk, 3), 1.0 / 3 + (1.0 / 3) * (7.0 / 12), 1e-6);
}

Test(retrieval, ranking_is_descending_with_ties_to_the_lower_index)
{
    float sim[5] = {0.5f, 0.9f, 0.5f, NAN, 0.7f};
    int64_t r[5];
    retr_rank(sim, 1, 5, r);
    int64_t want[5] = {1, 4, 0, 2, 3};
    for (int i = 0; i < 5; i++)
        cr_expect_eq(r[i], want[i], "place %d", i);
}

/* ---- whitening ---------------------------------------------------------------------------- */

/* Y = PCA(X) of the training rows themselves: YᵀY = I (the whitening's definition). */
static void check_whitened(const float *x, int n, int d, int keep, double tol)
{
    pca_model p;
    pca_init(&p, d);
    for (int i = 0; i < n; i++)
        pca_add(&p, x + (size_t)i * d);
    char *err = NULL;
    cr_assert_eq(pca_fit(&p, keep, &err), 0, "%s", err);
    cr_assert_eq(p.out, keep);
    float *y = xmalloc((size_t)n * keep * sizeof *y);
    pca_apply(&p, x, (size_t)n, y);
    for (int a = 0; a < keep; a++)
        for (int b = 0; b < keep; b++) {
            double s = 0;
            for (int i = 0; i < n; i++)
                s += (double)y[i * keep + a] * y[i * keep + b];
            cr_expect(fabs(s - (a == b)) < tol, "(YᵀY)[%d][%d] = %.6g", a, b, s);
        }
    free(y);
    pca_free(&p);
}

Test(retrieval, pca_whitens_its_training_rows)
{
    int n = 600, d = 6; /* more rows than one block, so blocks and the shift both run */
    float *x = xmalloc((size_t)n * d * sizeof *x);
    nnt_fill_normal(x, (int64_t)n * d, 3);
    for (int i = 0; i < n; i++) /* correlated columns of different scales */
        for (int j = 1; j < d; j++)
            x[i * d + j] = (float)(x[i * d + j] * (j + 1) + 0.5 * x[i * d + j - 1]);
    check_whitened(x, n, d, d, 2e-4);
    check_whitened(x, n, d, 3, 2e-4);
    for (int i = 0; i < n * d; i++) /* far from the origin: the centring must not cancel */
        x[i] += 1000.0f;
    check_whitened(x, n, d, d, 5e-3);
    free(x);
}

/* ---- end to end --------------------------------------------------------------------------- */

#define RETRIEVAL_MODEL_YAML                                                                                    \
    "config:\n"                                                                                                 \
    "  MODEL:\n"                                                                                                \
    "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}\n"                                          \
    "    FEATURE_EVAL_SETTINGS:\n"                                                                              \
    "      EVAL_MODE_ON: True\n"                                                                                \
    "      FREEZE_TRUNK_ONLY: True\n"                                                                           \
    "      EXTRACT_TRUNK_FEATURES_ONLY: True\n"                                                                 \
    "      SHOULD_FLATTEN_FEATS: False\n"                                                                       \
    "      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res4, [Identity, []]]]\n"

typedef struct {
    char *dir, *pth, *json, *sim, *out;
} e2e;

/* selfsup-retrieval on the fixture datasets with `img_retrieval` (the IMG_RETRIEVAL keys, one
 * per line, indented for the map) and `args`; returns its exit status. `weights`: write the
 * formula resnet18 first (a run refused before the model needs none). */
static int run_retrieval(e2e *t, const char *img_retrieval, const char *args, bool weights)
{
    t->dir = test_make_tmpdir();
    t->pth = xasprintf("%s/resnet18.pth", t->dir);
    t->json = xasprintf("%s/out/instance_retrieval.json", t->dir);
    t->sim = xasprintf("%s/sim.npy", t->dir);
    if (weights)
        nnt_write_torchvision_trunk(RETRIEVAL_MODEL_YAML, t->pth);
    char *data = test_fixture("retrieval", "data"), *list = test_fixture("retrieval", "whiten_list.txt");
    char *yaml = xasprintf("%s    WEIGHTS_INIT: {PARAMS_FILE: %s, STATE_DICT_KEY_NAME: '', "
                           "APPEND_PREFIX: trunk.base_model._feature_blocks.}\n"
                           "  MACHINE: {DEVICE: cpu}\n"
                           "  CHECKPOINT: {DIR: %s/out}\n"
                           "  IMG_RETRIEVAL:\n"
                           "    DATASET_PATH: %s\n"
                           "    WHITEN_IMG_LIST: %s\n"
                           "    RESIZE_IMG: 96\n"
                           "%s",
                           RETRIEVAL_MODEL_YAML, t->pth, t->dir, data, list, img_retrieval);
    char *cfg = xasprintf("%s/retrieval.yaml", t->dir);
    FILE *fp = fopen(cfg, "w");
    cr_assert(fp);
    fputs(yaml, fp);
    fclose(fp);
    char *bin = test_build_path("selfsup");
    char *cmd = xasprintf("%s retrieval %s --threads 2 --similarities %s %s", bin, cfg, t->sim, args);
    int rc = test_run(cmd, &t->out);
    free(cmd);
    free(bin);
    free(cfg);
    free(yaml);
    free(data);
    free(list);
    return rc;
}

static void e2e_free(e2e *t)
{
    free(t->pth);
    free(t->json);
    free(t->sim);
    free(t->out);
    test_rm_rf(t->dir);
    free(t->dir);
}

/* The run's similarities against the tool's, within float32 rounding of the largest. */
static void check_similarities(const e2e *t, const char *kase, size_t nq, size_t ndb)
{
    npy_array got, want = test_fixture_npy("retrieval", kase, "sim");
    char *err = NULL;
    cr_assert_eq(npy_read(t->sim, &got, &err), 0, "%s", err);
    cr_assert(got.ndim == 2 && got.shape[0] == nq && got.shape[1] == ndb, "similarities %zu x %zu", got.shape[0],
              got.shape[1]);
    const float *g = got.data, *w = want.data;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < nq * ndb; i++) {
        worst = fmax(worst, fabs(g[i] - w[i]));
        scale = fmax(scale, fabs(w[i]));
    }
    /* measured 1e-6 to 4e-6 of the largest: numpy's float32 eigh against LAPACK in double, the rest
     * float32 rounding in another order */
    cr_expect_leq(worst, 2e-5 * scale, "%s: largest difference %.3g (largest similarity %.3g)", kase, worst, scale);
    npy_close(&got);
    npy_close(&want);
}

static json_t *load_results(const e2e *t)
{
    json_error_t e;
    json_t *doc = json_load_file(t->json, 0, &e);
    cr_assert_not_null(doc, "%s: %s\n%s", t->json, e.text, t->out);
    return doc;
}

/* mAP E, M, H then mP@1, 5, 10 for E, M, H: the tool's, exactly (same ranking). */
static void check_revisited_scores(const e2e *t, const char *kase)
{
    npy_array want = test_fixture_npy("retrieval", kase, "scores");
    const double *w = want.data;
    json_t *doc = load_results(t);
    const char *keys[3] = {"easy", "medium", "hard"};
    for (int p = 0; p < 3; p++) {
        double map = json_real_value(json_object_get(json_object_get(doc, "mAP"), keys[p]));
        cr_expect_float_eq(map, w[p], 1e-9, "%s: %s mAP %.6f, VISSL %.6f", kase, keys[p], map, w[p]);
        json_t *pk = json_object_get(json_object_get(doc, "mP@k"), keys[p]);
        for (int k = 0; k < 3; k++)
            cr_expect_float_eq(json_real_value(json_array_get(pk, k)), w[3 + 3 * p + k], 1e-9, "%s: %s mP@k %d", kase,
                               keys[p], k);
    }
    cr_expect_eq(json_integer_value(json_object_get(doc, "queries")), 4);
    cr_expect_eq(json_integer_value(json_object_get(doc, "database")), 12);
    json_decref(doc);
    npy_close(&want);
}

/* Revisited Oxford (PCA learned on revisited Paris) with these descriptor keys: the tool's
 * similarities and scores, and its report lines. */
static void revisited_case(const char *kase, const char *keys)
{
    e2e t = {0};
    char *yaml = xasprintf("    TRAIN_DATASET_NAME: rparis6k\n    EVAL_DATASET_NAME: roxford5k\n%s", keys);
    int rc = run_retrieval(&t, yaml, "", true);
    cr_assert_eq(rc, 0, "%s", t.out);
    check_similarities(&t, kase, 4, 12);
    check_revisited_scores(&t, kase);
    cr_expect(strstr(t.out, ">> roxford5k: medium mAP"), "%s", t.out);
    free(yaml);
    e2e_free(&t);
}

Test(retrieval, rmac_on_revisited_oxford_is_vissls, .timeout = 240)
{
    revisited_case("rmac_revisited", "    FEATS_PROCESSING_TYPE: rmac\n    N_PCA: 8\n");
}

Test(retrieval, gem_on_revisited_oxford_is_vissls, .timeout = 240)
{
    revisited_case("gem_revisited", "    FEATS_PROCESSING_TYPE: gem\n    GEM_POOL_POWER: 3\n    N_PCA: 4\n");
}

/* The classic layout: queries cropped to their regions, whitening learned on unresized images,
 * compute_ap.cpp's AP per query, Paris's corrupt image left out of the database. */
Test(retrieval, rmac_on_classic_oxford_with_whitening_is_vissls, .timeout = 240)
{
    e2e t = {0};
    int rc = run_retrieval(&t,
                           "    TRAIN_DATASET_NAME: whitening\n    EVAL_DATASET_NAME: Oxford\n"
                           "    FEATS_PROCESSING_TYPE: rmac\n    N_PCA: 8\n",
                           "", true);
    cr_assert_eq(rc, 0, "%s", t.out);
    check_similarities(&t, "rmac_classic", 3, 10);
    npy_array want = test_fixture_npy("retrieval", "rmac_classic", "ap");
    const double *w = want.data;
    json_t *doc = load_results(&t), *aps = json_object_get(doc, "ap");
    cr_assert_eq(json_object_size(aps), 3);
    const char *name;
    json_t *v;
    int i = 0;
    double mean = 0;
    json_object_foreach(aps, name, v) {
        cr_expect_float_eq(json_real_value(v), w[i], 1e-7, "%s: AP %.7f, compute_ap.cpp %.7f", name,
                           json_real_value(v), w[i]);
        mean += w[i++] / 3;
    }
    cr_expect_float_eq(json_real_value(json_object_get(doc, "mAP")), mean, 1e-7);
    json_decref(doc);
    npy_close(&want);
    e2e_free(&t);
}

/* --check reads the config, builds the model with its weights, loads the datasets and looks
 * for every image, then stops: nothing is computed or written. An image that is not there is
 * named (exit 1). */
Test(retrieval, check_finds_what_a_run_would_read_and_computes_nothing, .timeout = 120)
{
    e2e t = {0};
    const char *keys = "    TRAIN_DATASET_NAME: whitening\n    EVAL_DATASET_NAME: Oxford\n"
                       "    FEATS_PROCESSING_TYPE: rmac\n    N_PCA: 8\n";
    int rc = run_retrieval(&t, keys, "--check", true);
    cr_assert_eq(rc, 0, "%s", t.out);
    cr_expect(strstr(t.out, "OK (rmac descriptors; Oxford: 10 database images, 3 queries; PCA learned on "
                            "whitening's 8 images)"),
              "%s", t.out);
    cr_expect_neq(access(t.sim, F_OK), 0, "--check wrote the similarities");
    cr_expect_neq(access(t.json, F_OK), 0, "--check wrote the results");
    char *fixture = test_fixture("retrieval", "whiten_list.txt"), *text = read_whole_file(fixture, NULL);
    char *list = xasprintf("%s/list.txt", t.dir);
    FILE *fp = fopen(list, "w");
    cr_assert(fp && text);
    fprintf(fp, "%simgs/gone.jpg\n", text);
    fclose(fp);
    char *args = xasprintf("--check config.IMG_RETRIEVAL.WHITEN_IMG_LIST=%s", list);
    e2e u = {0};
    rc = run_retrieval(&u, keys, args, true);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, u.out);
    cr_expect(strstr(u.out, "whitening: cannot read") && strstr(u.out, "imgs/gone.jpg"), "%s", u.out);
    free(args), free(fixture), free(text), free(list);
    e2e_free(&u);
    e2e_free(&t);
}

/* Mistakes in the config stop the run before any image is read, naming the key. */
Test(retrieval, bad_config_is_refused_before_any_work, .timeout = 60)
{
    const char *cases[][2] = {
        {"    EVAL_DATASET_NAME: roxford5k\n    FEATS_PROCESSING_TYPE: mac\n", "FEATS_PROCESSING_TYPE"},
        {"    EVAL_DATASET_NAME: instre\n    FEATS_PROCESSING_TYPE: rmac\n", "EVAL_DATASET_NAME"},
        {"    EVAL_DATASET_NAME: nowhere\n    FEATS_PROCESSING_TYPE: rmac\n", "EVAL_DATASET_NAME"},
        {"    EVAL_DATASET_NAME: roxford5k\n    FEATS_PROCESSING_TYPE: gem\n    GEM_POOL_POWER: 0\n",
         "GEM_POOL_POWER"},
        {"    EVAL_DATASET_NAME: roxford5k\n    FEATS_PROCESSING_TYPE: rmac\n    SPATIAL_LEVELS: 0\n",
         "SPATIAL_LEVELS"},
        {"    EVAL_DATASET_NAME: roxford5k\n    TRAIN_DATASET_NAME: Paris\n    FEATS_PROCESSING_TYPE: rmac\n",
         "TRAIN_DATASET_NAME"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        e2e t = {0};
        int rc = run_retrieval(&t, cases[i][0], "", false);
        cr_expect_eq(rc, 2, "case %zu: exit %d\n%s", i, rc, t.out);
        cr_expect(strstr(t.out, cases[i][1]) != NULL, "case %zu: %s", i, t.out);
        cr_expect(!strstr(t.out, "image 0 of"), "case %zu read images: %s", i, t.out);
        e2e_free(&t);
    }
}

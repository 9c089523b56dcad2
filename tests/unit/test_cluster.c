/*
 * test_cluster.c — ClusterFit (stages/cluster, `selfsup clusterfit`) against VISSL 0.1.5's
 * tools/cluster_features_and_label.py run with Python's FAISS 1.7.3
 * (tests/golden/make_clusterfit_fixtures.py): the merged features normalised bit for bit as
 * numpy does; the same labels, and the centroids and distances within the GEMM's rounding, with
 * and without FAISS's subsampling; the pickle read back by Python. Then the flow end to end
 * (extraction, clustering, training on the labels), and the refusals: bad CLUSTERFIT keys, a
 * layer the extraction does not write, a broken training config, more clusters than features,
 * a gap in the samples — each before any work, with the key or file named.
 */
#include "cluster/clusterfit.h"
#include "features.h"
#include "npy.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cases[] = {"plain", "subsampled"};

static char *case_dir(const char *kase) { return test_fixture("clusterfit", kase); }

/* A config for selfsup-cluster: the CLUSTERFIT keys of a case plus `more` YAML lines. */
static char *write_config(const char *dir, const char *kase, const char *more)
{
    npy_array p = test_fixture_npy("clusterfit", kase, "params");
    const int64_t *v = p.data;
    char *yaml = xasprintf("config:\n  CHECKPOINT: {DIR: '%s'}\n"
                           "  CLUSTERFIT:\n    NUM_CLUSTERS: %lld\n    N_ITER: %lld\n"
                           "    FEATURES: {DATA_PARTITION: TRAIN, DATASET_NAME: toy, LAYER_NAME: res5}\n%s",
                           dir, (long long)v[0], (long long)v[1], more ? more : "");
    char *path = path_join(dir, "cluster.yaml");
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(yaml, f);
    fclose(f);
    free(yaml);
    npy_close(&p);
    return path;
}

/* selfsup-cluster on a case's features, results in dir; its exit status, output in *out. */
static int cluster(const char *dir, const char *kase, const char *more, const char *args, char **out)
{
    char *bin = test_build_path("selfsup-cluster"), *cfg = write_config(dir, kase, more), *features = case_dir(kase);
    char *cmd = xasprintf("%s -c %s --features %s --quiet %s", bin, cfg, features, args ? args : "");
    int rc = test_run(cmd, out);
    free(cmd), free(bin), free(cfg), free(features);
    return rc;
}

static npy_array read_result(const char *dir, const char *name)
{
    char *path = path_join(dir, name), *err = NULL;
    npy_array a;
    cr_assert_eq(npy_read(path, &a, &err), 0, "%s", err);
    free(path);
    return a;
}

Test(cluster, normalisation_is_numpys_bit_for_bit)
{
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        char *dir = case_dir(cases[c]), *err = NULL;
        feat_set f;
        cr_assert_eq(feat_merge(dir, "train", "res5", &f, &err), 0, "%s", err);
        npy_array want = test_fixture_npy("clusterfit", cases[c], "normalized");
        cr_assert(want.ndim == 2 && want.shape[0] == f.n && want.shape[1] == f.dim, "%s: merged shape", cases[c]);
        clusterfit_l2_normalize(f.features, f.n, f.dim);
        size_t bad = 0;
        for (size_t i = 0; i < f.n * f.dim; i++)
            bad += memcmp(&f.features[i], (const float *)want.data + i, sizeof(float)) != 0;
        cr_expect_eq(bad, 0, "%s: %zu of %zu values differ from numpy's", cases[c], bad, f.n * f.dim);
        npy_close(&want);
        feat_free(&f);
        free(dir);
    }
}

Test(cluster, labels_centroids_and_distances_match_faiss_in_python, .timeout = 120)
{
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        char *dir = test_make_tmpdir(), *out = NULL;
        cr_assert_eq(cluster(dir, cases[c], NULL, "--threads 2", &out), 0, "%s", out);
        npy_array p = test_fixture_npy("clusterfit", cases[c], "params");
        char *name = xasprintf("toy_train_N%lld_faiss_lbls.npy", (long long)((const int64_t *)p.data)[0]);
        npy_array got = read_result(dir, name), want = test_fixture_npy("clusterfit", cases[c], "labels");
        cr_assert(got.dtype == NPY_I8 && got.ndim == 1 && got.shape[0] == want.shape[0], "%s: int64 (N,)", name);
        cr_expect_eq(memcmp(got.data, want.data, want.shape[0] * sizeof(int64_t)), 0, "%s: labels differ from VISSL's",
                     cases[c]);
        npy_close(&got), npy_close(&want), npy_close(&p);
        free(name), free(out);
        test_rm_dir(dir);
    }
}

/* The pickle, read by Python's pickle and numpy: VISSL's three arrays, their dtypes and shapes,
 * the labels those of the .npy, the centroids and distances FAISS's within rounding. */
Test(cluster, the_pickle_holds_vissls_dict, .timeout = 120)
{
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        cr_skip_test("/usr/bin/python3 with numpy is not installed (make deps)");
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        char *dir = test_make_tmpdir(), *out = NULL, *fix = test_fixture("clusterfit", "");
        cr_assert_eq(cluster(dir, cases[c], NULL, NULL, &out), 0, "%s", out);
        free(out);
        char *cmd = xasprintf(
            "/usr/bin/python3 -c \"import glob, pickle, numpy as np; d = pickle.load(open(glob.glob('%s/*.pkl')[0], "
            "'rb')); f = '%s/%s_'; assert sorted(d) == ['centroids', 'distances', 'hard_labels'], sorted(d); "
            "assert d['hard_labels'].dtype == np.int64 and d['hard_labels'].shape[1] == 1; "
            "assert (d['hard_labels'][:, 0] == np.load(glob.glob('%s/*_lbls.npy')[0])).all(); "
            "assert d['centroids'].dtype == np.float32 and d['distances'].dtype == np.float32; "
            "c, w = d['centroids'], np.load(f + 'centroids.npy'); assert c.shape == w.shape; "
            "assert abs(c - w).max() <= 1e-5 * abs(w).max(), abs(c - w).max(); "
            "x, y = d['distances'], np.load(f + 'distances.npy'); assert x.shape == y.shape; "
            "assert abs(x - y).max() <= 1e-5 * max(1, abs(y).max()), abs(x - y).max()\"",
            dir, fix, cases[c], dir);
        cr_expect_eq(test_run(cmd, &out), 0, "%s: %s", cases[c], out);
        free(cmd), free(out), free(fix);
        test_rm_dir(dir);
    }
}

/* ---- refusals --------------------------------------------------------------------------------- */

static void expect_refused(const char *more, const char *args, int status, const char *needle)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    int rc = cluster(dir, "plain", more, args, &out);
    cr_expect_eq(rc, status, "%s%s: exit %d, not %d:\n%s", more ? more : "", args ? args : "", rc, status, out);
    cr_expect(strstr(out, needle), "%s%s: the message should name '%s':\n%s", more ? more : "", args ? args : "", needle,
              out);
    cr_expect(test_count_files(dir) == 1, "%s%s: nothing but the config may be written", more ? more : "",
              args ? args : "");
    free(out);
    test_rm_dir(dir);
}

Test(cluster, bad_keys_are_refused_naming_them, .timeout = 60)
{
    expect_refused(NULL, "config.CLUSTERFIT.NUM_CLUSTERZ=3", 2, "NUM_CLUSTERZ");
    expect_refused(NULL, "config.CLUSTERFIT.CLUSTER_BACKEND=sklearn", 2, "CLUSTERFIT.CLUSTER_BACKEND");
    expect_refused(NULL, "config.CLUSTERFIT.NUM_CLUSTERS=0", 2, "CLUSTERFIT.NUM_CLUSTERS");
    expect_refused(NULL, "config.CLUSTERFIT.N_ITER=0", 2, "CLUSTERFIT.N_ITER");
    expect_refused(NULL, "config.CLUSTERFIT.FEATURES.DATA_PARTITION=VAL", 2, "DATA_PARTITION");
    expect_refused(NULL, "config.CLUSTERFIT.FEATURES.LAYER_NAME=''", 2, "LAYER_NAME");
    expect_refused(NULL, "config.CLUSTERFIT.FEATURES.DIMENSIONALITY_REDUCTION=16", 2, "DIMENSIONALITY_REDUCTION");
    expect_refused(NULL, "config.CLUSTERFIT.DATA_LIMIT=100", 2, "CLUSTERFIT.DATA_LIMIT");
    expect_refused(NULL, "--threads many", 2, "--threads");
}

Test(cluster, data_that_cannot_be_clustered_is_refused_before_the_kmeans, .timeout = 60)
{
    /* 1200 features, 5000 clusters: the config does not fit the data */
    expect_refused(NULL, "config.CLUSTERFIT.NUM_CLUSTERS=5000", 2, "NUM_CLUSTERS");
    /* no such layer: the layers there are listed */
    expect_refused(NULL, "config.CLUSTERFIT.FEATURES.LAYER_NAME=res4", 1, "res5");
    /* the test split has no files */
    expect_refused(NULL, "config.CLUSTERFIT.FEATURES.DATA_PARTITION=TEST", 1, "rank0_test_res5_features.npy");
}

/* Features that skip a sample: entry i of the labels file would not be sample i's. */
Test(cluster, a_gap_in_the_samples_is_refused, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *src = case_dir("plain"), *err = NULL, *out = NULL;
    feat_set f;
    cr_assert_eq(feat_merge(src, "train", "res5", &f, &err), 0, "%s", err);
    f.inds[7] = 1000000; /* sample 7 is missing: the rows skip from 6 to 8 */
    feat_dedup_sort(&f);
    cr_assert_eq(feat_write(dir, 0, "train", "res5", &f, &err), 0, "%s", err);
    char *bin = test_build_path("selfsup-cluster"), *cfg = write_config(dir, "plain", NULL);
    char *cmd = xasprintf("%s -c %s --quiet", bin, cfg);
    int rc = test_run(cmd, &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "no row for sample 7"), "%s", out);
    char *labels = path_join(dir, "toy_train_N12_faiss_lbls.npy");
    cr_expect(!path_exists(labels), "labels written for features with a gap");
    free(labels), free(cmd), free(bin), free(cfg), free(out), free(src);
    feat_free(&f);
    test_rm_dir(dir);
}

/* ---- the flow: selfsup clusterfit ----------------------------------------------------------- */

static int selfsup(const char *args, char **out)
{
    char *bin = test_build_path("selfsup"), *cmd = xasprintf("%s %s", bin, args);
    int rc = test_run(cmd, out);
    free(bin), free(cmd);
    return rc;
}

/* Refused before the extraction starts: nothing made, exit 2, the key named. */
static void expect_flow_refused(const char *args, const char *needle)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    char *cmd = xasprintf("clusterfit quickstart/clusterfit config.CHECKPOINT.DIR=%s/ck --run-dir %s/run %s", dir,
                          dir, args);
    int rc = selfsup(cmd, &out);
    cr_expect_eq(rc, 2, "%s: exit %d:\n%s", args, rc, out);
    cr_expect(strstr(out, needle), "%s: the message should name '%s':\n%s", args, needle, out);
    cr_expect(!strstr(out, "step 1"), "%s: the extraction started:\n%s", args, out);
    cr_expect_eq(test_count_files(dir), 0, "%s: something was made", args);
    free(cmd), free(out);
    test_rm_dir(dir);
}

Test(cluster, clusterfit_refuses_before_extracting, .timeout = 60)
{
    expect_flow_refused("config.CLUSTERFIT.FEATURES.LAYER_NAME=res4", "writes res5");
    expect_flow_refused("config.CLUSTERFIT.N_ITER=-1", "CLUSTERFIT.N_ITER");
    expect_flow_refused("--then quickstart/clusterfit_train config.OPTIMIZER.num_epochs=1", "num_epochs");
    /* the training's command line is selfsup run's: config=NAME names the config there too */
    expect_flow_refused("--then config=quickstart/clusterfit_train config.OPTIMIZER.num_epochs=1", "num_epochs");
    expect_flow_refused("--then quickstart/clusterfit_train config.LOSS.name=nope", "nope");
    expect_flow_refused("--then", "--then needs the training config");
}

/* A tiny Fashion-MNIST: extraction, clustering, then training on the labels, as one command. */
Test(cluster, clusterfit_extracts_clusters_and_trains_on_the_labels, .timeout = 300)
{
    char *dir = test_make_tmpdir(), *out = NULL;
    char *cmd = xasprintf("dataset fashion-mnist %s/fm --limit 48", dir);
    cr_assert_eq(selfsup(cmd, &out), 0, "%s", out);
    free(cmd), free(out);
    const char *data = "DATA_SOURCES: [disk_filelist], DATASET_NAMES: [fm], BATCHSIZE_PER_REPLICA: 16, "
                       "TRANSFORMS: [{name: Resize, size: 24}, {name: ToTensor}]";
    char *extract = xasprintf(
        "engine_name: extract_features\nconfig:\n  TEST_MODEL: False\n  MACHINE: {DEVICE: cpu}\n"
        "  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 1}\n  DATA:\n    NUM_DATALOADER_WORKERS: 1\n"
        "    TRAIN: {%s, LABEL_SOURCES: [disk_filelist], DATA_PATHS: ['%s/fm/disk_filelist/train_images.npy'],\n"
        "      LABEL_PATHS: ['%s/fm/disk_filelist/train_labels.npy']}\n"
        "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
        "    FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: True, FREEZE_TRUNK_ONLY: True, EXTRACT_TRUNK_FEATURES_ONLY: True,\n"
        "      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res5avg, [Identity, []]]]}\n"
        "  CHECKPOINT: {DIR: '%s/ck'}\n"
        "  CLUSTERFIT: {NUM_CLUSTERS: 4, N_ITER: 10, FEATURES: {DATASET_NAME: fm, LAYER_NAME: res5avg}}\n",
        data, dir, dir, dir);
    char *train = xasprintf(
        "config:\n  TEST_MODEL: False\n  MACHINE: {DEVICE: cpu}\n  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 1}\n"
        "  DATA:\n    NUM_DATALOADER_WORKERS: 1\n"
        "    TRAIN: {%s, LABEL_SOURCES: [disk_filelist], DATA_PATHS: ['%s/fm/disk_filelist/train_images.npy']}\n"
        "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
        "    HEAD: {PARAMS: [[mlp, {dims: [512, 4]}]]}\n"
        "  LOSS: {name: cross_entropy_multiple_output_single_target}\n"
        "  OPTIMIZER: {name: sgd, num_epochs: 1, param_schedulers: {lr: {name: constant, value: 0.01}}}\n"
        "  CHECKPOINT: {DIR: '%s/trained'}\n",
        data, dir, dir);
    char *ex = path_join(dir, "extract.yaml"), *tr = path_join(dir, "train.yaml");
    FILE *f = fopen(ex, "w");
    fputs(extract, f), fclose(f);
    f = fopen(tr, "w");
    fputs(train, f), fclose(f);
    cmd = xasprintf("clusterfit %s --run-dir %s/run1 --threads 1 --quiet --then %s --run-dir %s/run2", ex, dir, tr, dir);
    cr_assert_eq(selfsup(cmd, &out), 0, "%s", out);
    char *ck = path_join(dir, "ck");
    npy_array labels = read_result(ck, "fm_train_N4_faiss_lbls.npy");
    cr_assert(labels.ndim == 1 && labels.shape[0] == 48, "one label for each of the 48 images");
    for (size_t i = 0; i < 48; i++)
        cr_expect(((const int64_t *)labels.data)[i] >= 0 && ((const int64_t *)labels.data)[i] < 4);
    /* the training read those labels (its composed config says so) and finished */
    char *cfg = path_join(dir, "run2/config.yaml"), *text = read_whole_file(cfg, NULL);
    cr_assert(text, "%s", cfg);
    cr_expect(strstr(text, "ck/fm_train_N4_faiss_lbls.npy"), "the training's LABEL_PATHS:\n%s", text);
    char *final = path_join(dir, "trained/model_final_checkpoint_phase0.torch");
    cr_expect(path_exists(final), "%s:\n%s", final, out);
    npy_close(&labels);
    free(final), free(text), free(cfg), free(ck), free(ex), free(tr), free(extract), free(train), free(cmd), free(out);
    test_rm_rf(dir); /* it holds folders */
    free(dir);
}

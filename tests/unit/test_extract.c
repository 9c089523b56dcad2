/*
 * test_extract.c — selfsup-extract end to end: a torchvision-layout checkpoint in, VISSL's
 * feature files out, equal to torchvision's own features (tests/golden/make_extract_fixtures.py).
 *
 * The checkpoint holds resnet18 set by the closed formulas both sides share
 * (model_init_formula), written here under torchvision's names with lib/torchsave, and loaded
 * by the stage through VISSL's APPEND_PREFIX rule, as a VISSL user loads torchvision weights.
 * The batches come from a records file: two batches whose indices are out of order and repeat
 * one sample (what a distributed sampler's padding does), so the files must come out sorted
 * and de-duplicated, first row kept.
 */
#include "model.h"
#include "npy.h"
#include "record.h"
#include "test_nn_util.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL_YAML                                                                                              \
    "config:\n"                                                                                                 \
    "  MODEL:\n"                                                                                                \
    "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}\n"                                          \
    "    FEATURE_EVAL_SETTINGS:\n"                                                                              \
    "      EVAL_MODE_ON: True\n"                                                                                \
    "      FREEZE_TRUNK_ONLY: True\n"                                                                           \
    "      EXTRACT_TRUNK_FEATURES_ONLY: True\n"                                                                 \
    "      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res4, [AdaptiveAvgPool2d, [[2, 2]]]], [res5avg, [Identity, []]]]\n"

/* One batch of fixture images `rows` (float32 N × 3 × 32 × 32), with labels 100 + image and
 * the given dataset indices, appended to fd. */
static void write_batch(int fd, const float *x, const int *rows, const int64_t *inds, int n, uint64_t seq)
{
    size_t img = 3 * 32 * 32, cap = 1 << 20;
    void *buf = aligned_alloc(64, cap); /* records start 64-byte aligned */
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, cap, REC_DATA, seq, 0, 4), 0);
    uint64_t shape[4] = {(uint64_t)n, 3, 32, 32}, one[1] = {(uint64_t)n};
    float *data = rec_add(&w, "data.0", REC_F32, 4, shape);
    int64_t *label = rec_add(&w, "label.0", REC_I64, 1, one), *idx = rec_add(&w, "data_idx.0", REC_I64, 1, one);
    for (int i = 0; i < n; i++) {
        memcpy(data + (size_t)i * img, x + (size_t)rows[i] * img, img * sizeof(float));
        label[i] = 100 + rows[i];
        idx[i] = inds[i];
    }
    size_t len = rec_finish(&w);
    cr_assert(len > 0, "%s", w.error);
    char *err = NULL;
    cr_assert_eq(rec_fd_write(fd, buf, len, &err), 0, "%s", err);
    free(buf);
}

static void write_records(const char *path)
{
    npy_array x = test_fixture_npy("extract", "tv_r18", "x");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0);
    /* image i has dataset index 10 + i; batch 2 repeats image 2 with index 12 again, and its
     * copy (image 0's pixels) must be dropped because index 12 came first in batch 1. */
    write_batch(fd, x.data, (int[]){4, 2, 0}, (int64_t[]){14, 12, 10}, 3, 0);
    write_batch(fd, x.data, (int[]){1, 0, 3}, (int64_t[]){11, 12, 13}, 3, 1);
    _Alignas(64) char eos[128];
    size_t len = rec_write_eos(eos, sizeof eos, 2, false);
    char *err = NULL;
    cr_assert_eq(rec_fd_write(fd, eos, len, &err), 0, "%s", err);
    close(fd);
    npy_close(&x);
}

static npy_array load_out(const char *dir, const char *layer, const char *what)
{
    char *path = xasprintf("%s/rank0_train_%s_%s.npy", dir, layer, what), *err = NULL;
    npy_array a;
    cr_assert_eq(npy_read(path, &a, &err), 0, "%s", err);
    free(path);
    return a;
}

static void check_layer(const char *dir, const char *layer, size_t dim)
{
    npy_array f = load_out(dir, layer, "features"), t = load_out(dir, layer, "targets"), i = load_out(dir, layer, "inds");
    npy_array want = test_fixture_npy("extract", "tv_r18", layer);
    cr_assert_eq(f.dtype, NPY_F4);
    cr_assert_eq(f.ndim, 2);
    cr_assert_eq(f.shape[0], 5);
    cr_assert_eq(f.shape[1], dim);
    cr_assert_eq(t.dtype, NPY_I8);
    cr_assert_eq(t.ndim, 2, "targets are N × 1 for a single label, as VISSL reshapes them");
    cr_assert_eq(i.dtype, NPY_I8);
    const float *got = f.data, *ref = want.data;
    const int64_t *tg = t.data, *ind = i.data;
    double worst = 0, scale = 0;
    for (size_t r = 0; r < 5; r++) {
        cr_expect_eq(ind[r], (int64_t)(10 + r), "rows sorted by index");
        cr_expect_eq(tg[r], (int64_t)(100 + r), "row %zu keeps its first occurrence", r);
        for (size_t c = 0; c < dim; c++) {
            worst = fmax(worst, fabs(got[r * dim + c] - ref[r * dim + c]));
            scale = fmax(scale, fabs(ref[r * dim + c]));
        }
    }
    /* fp32 through 18 layers, oneDNN against torch's kernels: a few ulps of the largest value. */
    cr_expect_leq(worst, 1e-5 * scale + 1e-6, "%s: largest difference %.3g (largest value %.3g)", layer, worst, scale);
    npy_close(&f);
    npy_close(&t);
    npy_close(&i);
    npy_close(&want);
}

/* DIR/extract.yaml holding `yaml` (malloc'd path). */
static char *write_yaml(const char *dir, const char *yaml)
{
    char *cfg = xasprintf("%s/extract.yaml", dir);
    FILE *fp = fopen(cfg, "w");
    cr_assert(fp);
    fputs(yaml, fp);
    fclose(fp);
    return cfg;
}

/* Entries of a folder, hidden ones included. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d, "%s: %s", dir, strerror(errno));
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

Test(extract, torchvision_checkpoint_gives_torchvision_features, .timeout = 60)
{
    char *dir = test_make_tmpdir();
    char *pth = xasprintf("%s/resnet18.pth", dir), *recs = xasprintf("%s/batches.rec", dir);
    nnt_write_torchvision_trunk(MODEL_YAML, pth);
    write_records(recs);
    char *yaml = xasprintf("%s"
                           "    WEIGHTS_INIT: {PARAMS_FILE: %s, STATE_DICT_KEY_NAME: '', "
                           "APPEND_PREFIX: trunk.base_model._feature_blocks.}\n"
                           "  MACHINE: {DEVICE: cpu}\n"
                           "  CHECKPOINT: {DIR: %s/out}\n",
                           MODEL_YAML, pth, dir);
    char *cfg = write_yaml(dir, yaml), *out = NULL;
    char *bin = test_build_path("selfsup-extract");
    char *cmd = xasprintf("%s -c %s --in file:%s --threads 1", bin, cfg, recs);
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    char *outdir = xasprintf("%s/out", dir);
    check_layer(outdir, "res4", 1024);
    check_layer(outdir, "res5avg", 512);
    /* the features waited in spill files there; none outlives the run */
    cr_expect_eq(count_entries(outdir), 6, "the output folder holds more than the 6 .npy files");
    free(out);
    free(cmd);
    free(bin);
    free(cfg);
    free(yaml);
    free(outdir);
    free(pth);
    free(recs);
    test_rm_rf(dir); /* it holds folders */
    free(dir);
}

/* selfsup-extract on an empty input with this model config (MODEL_YAML + `more`) and
 * arguments must stop at the start with exit 2 and an error naming `needle`. */
static void expect_refused_at_start(const char *dir, const char *more, const char *args, const char *needle)
{
    char *yaml = xasprintf("%s%s  MACHINE: {DEVICE: cpu}\n  CHECKPOINT: {DIR: %s/out}\n", MODEL_YAML, more, dir);
    char *cfg = write_yaml(dir, yaml), *out = NULL;
    char *bin = test_build_path("selfsup-extract");
    char *cmd = xasprintf("%s -c %s --in file:/dev/null %s", bin, cfg, args);
    int rc = test_run(cmd, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, needle) != NULL, "%s", out);
    free(out);
    free(cmd);
    free(bin);
    free(cfg);
    free(yaml);
}

/* The output folder is where the features wait: one that cannot be made is refused at the
 * start (exit 2), naming it, not after a split's forward passes. */
Test(extract, unwritable_output_folder_is_refused_before_any_batch, .timeout = 30)
{
    char *dir = test_make_tmpdir();
    char *file = xasprintf("%s/a-file", dir), *args = xasprintf("--output %s/sub", file);
    FILE *f = fopen(file, "w");
    cr_assert(f);
    fclose(f);
    expect_refused_at_start(dir, "", args, "a-file");
    free(args);
    free(file);
    test_rm_dir(dir);
}

Test(extract, bad_weights_file_is_refused_before_any_batch, .timeout = 30)
{
    char *dir = test_make_tmpdir();
    char *more = xasprintf("    WEIGHTS_INIT: {PARAMS_FILE: %s/missing.pth}\n", dir);
    expect_refused_at_start(dir, more, "", "missing.pth");
    free(more);
    test_rm_dir(dir);
}

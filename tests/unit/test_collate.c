/*
 * test_collate.c — selfsup-collate's collators (stages/collate/collate.h) against VISSL's,
 * run with PyTorch by tests/golden/make_collate_fixtures.py.
 *
 * Each case builds N sample records from the generator's formulas, collates them, and
 * requires the batch to hold exactly the fixture's tensors (same names, dtypes, shapes and
 * bytes): crop-major for simclr/multicrop, image-major towers for siamese, squeezed
 * metadata for moco, and so on. Plus the refusals VISSL would raise on.
 */
#include "collate/collate.h"
#include "npy.h"
#include "record.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 3
#define MIXUP_LAMBDA 0.3141592653589793 /* make_collate_fixtures.py's fixed mixing factor */
#define CAP (1u << 20)

typedef struct {
    int t, h, w; /* t = 0: an image [h, w, 3]; t > 0: towers [t, h, w, 3] */
} item_shape;

/* One sample record with the given label tensor (int64, label_ndim dims). */
static void make_sample_labels(void *buf, int i, const item_shape *shapes, int k_items, const int64_t *label,
                               int label_ndim, const uint64_t *label_shape, rec_view *view);

/* One sample record, as make_collate_fixtures.py's samples() builds it. */
static void make_sample(void *buf, int i, const item_shape *shapes, int k_items, int n_label, rec_view *view)
{
    int64_t label[8];
    for (int j = 0; j < n_label; j++)
        label[j] = 100 * i + j;
    uint64_t nl = (uint64_t)n_label;
    make_sample_labels(buf, i, shapes, k_items, label, 1, &nl, view);
}

static void make_sample_labels(void *buf, int i, const item_shape *shapes, int k_items, const int64_t *label,
                               int label_ndim, const uint64_t *label_shape, rec_view *view)
{
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, CAP, REC_DATA, (uint64_t)i, 0, (uint32_t)k_items + 4), 0);
    for (int k = 0; k < k_items; k++) {
        const item_shape *s = &shapes[k];
        int towers = s->t ? s->t : 1;
        uint64_t shape[4] = {(uint64_t)towers, (uint64_t)s->h, (uint64_t)s->w, 3};
        char name[16];
        snprintf(name, sizeof name, "data.%d", k);
        uint8_t *p = rec_add(&w, name, REC_U8, s->t ? 4 : 3, s->t ? shape : shape + 1);
        cr_assert(p);
        for (int t = 0; t < towers; t++)
            for (int y = 0; y < s->h; y++)
                for (int x = 0; x < s->w; x++)
                    for (int c = 0; c < 3; c++)
                        *p++ = (uint8_t)((i * 37 + k * 11 + y * 5 + x * 3 + c + t * 7) % 256);
    }
    int64_t valid[8], idx[8];
    for (int k = 0; k < k_items; k++)
        valid[k] = (i == 1 && k == 0) ? -1 : 1, idx[k] = 10 + i;
    uint64_t nk = (uint64_t)k_items;
    cr_assert_eq(rec_add_copy(&w, "label", REC_I64, label_ndim, label_shape, label), 0);
    cr_assert_eq(rec_add_copy(&w, "data_valid", REC_I64, 1, &nk, valid), 0);
    cr_assert_eq(rec_add_copy(&w, "data_idx", REC_I64, 1, &nk, idx), 0);
    /* ToTensor + Normalize left pending, as selfsup-augment writes it (only mixup reads it;
     * the others pass it through). */
    const float norm[3][3] = {{255, 255, 255}, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
    uint64_t ns[2] = {3, 3};
    cr_assert_eq(rec_add_copy(&w, "normalize", REC_F32, 2, ns, norm), 0);
    size_t len = rec_finish(&w);
    cr_assert(len > 0, "%s", w.error);
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, len, view, &err), 0, "%s", err);
}

/* true when `name` is not a .npy file */
static bool len_ok(const char *name)
{
    size_t n = strlen(name);
    return n < 5 || strcmp(name + n - 4, ".npy");
}

static int rec_dtype_of(npy_dtype d)
{
    return d == NPY_U1 ? REC_U8 : d == NPY_I8 ? REC_I64 : d == NPY_B1 ? REC_BOOL : d == NPY_F4 ? REC_F32 : -1;
}

static uint8_t bufs[4][CAP] __attribute__((aligned(64)));

/* Collate samples[0..n) with `collator` and compare every tensor with the fixture directory
 * collate/<fixture>. */
static void check_samples(const char *collator, const char *fixture, const rec_view *samples, int n,
                          const collate_options *opt)
{
    static uint8_t out[CAP] __attribute__((aligned(64)));
    collate_kind kind;
    char why[256];
    cr_assert_eq(collate_from_name(collator, &kind, why, sizeof why), 0, "%s", why);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, out, CAP, REC_DATA, 0, 0, collate_max_tensors(kind, &samples[0])), 0);
    cr_assert_eq(collate_batch(kind, samples, n, opt, &w, why, sizeof why), 0, "%s: %s", collator, why);
    size_t len = rec_finish(&w);
    cr_assert(len > 0, "%s: %s", collator, w.error);
    rec_view batch;
    char *err = NULL;
    cr_assert_eq(rec_parse(out, len, &batch, &err), 0, "%s", err);

    char rel[128];
    snprintf(rel, sizeof rel, "collate/%s", fixture);
    char *dir = test_fixture(rel, "");
    DIR *d = opendir(dir);
    cr_assert(d, "no fixture directory %s", dir);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (len_ok(e->d_name))
            continue;
        files++;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(strlen(e->d_name) - 4), e->d_name);
        int ti = rec_find(&batch, name);
        cr_assert(ti >= 0, "%s: the batch lacks %s", collator, name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        npy_array a = {0};
        cr_assert_eq(npy_read(path, &a, &err), 0, "%s", err);
        const rec_tensor *t = &batch.tensors[ti];
        cr_assert_eq(t->dtype, rec_dtype_of(a.dtype), "%s/%s: dtype %d", collator, name, t->dtype);
        cr_assert_eq(t->ndim, a.ndim, "%s/%s: %d dims, torch has %d", collator, name, t->ndim, a.ndim);
        for (int k = 0; k < a.ndim; k++)
            cr_assert_eq(t->shape[k], a.shape[k], "%s/%s: dim %d is %llu, torch has %zu", collator, name, k,
                         (unsigned long long)t->shape[k], a.shape[k]);
        cr_assert_eq(t->nbytes, a.nbytes);
        cr_assert(!memcmp(rec_data(&batch, ti), a.data, a.nbytes), "%s/%s: values differ from torch", collator, name);
        npy_close(&a);
    }
    closedir(d);
    /* `normalize` rides along (not a VISSL batch key); mixup consumed it. */
    int extra = rec_find(&batch, "normalize") >= 0;
    cr_assert_eq((uint32_t)files + (uint32_t)extra, batch.hdr->n_tensors, "%s: %u tensors, torch has %d", collator, batch.hdr->n_tensors,
                 files);
    free(dir);
}

/* Collate the case of make_collate_fixtures.py's CASES and compare with its fixture. */
static void check_case(const char *collator, const item_shape *shapes, int k_items, int n_label, int n)
{
    rec_view samples[4];
    for (int i = 0; i < n; i++)
        make_sample(bufs[i], i, shapes, k_items, n_label, &samples[i]);
    check_samples(collator, collator, samples, n, &(collate_options){.mixup_lambda = MIXUP_LAMBDA});
}

Test(collate, default_collate_matches_torch)
{
    item_shape s[] = {{0, 4, 5}, {0, 2, 3}};
    check_case("default_collate", s, 2, 2, N);
}

Test(collate, simclr_collator_is_crop_major)
{
    item_shape s[] = {{0, 4, 5}, {0, 4, 5}};
    check_case("simclr_collator", s, 2, 2, N);
}

Test(collate, multicrop_collator_keeps_one_tensor_per_resolution)
{
    item_shape s[] = {{0, 4, 5}, {0, 4, 5}, {0, 2, 3}, {0, 2, 3}};
    check_case("multicrop_collator", s, 4, 4, N);
}

Test(collate, moco_collator_splits_query_and_key)
{
    item_shape s[] = {{0, 4, 5}, {0, 4, 5}};
    check_case("moco_collator", s, 2, 2, N);
}

Test(collate, siamese_collator_puts_towers_image_major)
{
    item_shape s[] = {{3, 2, 2}};
    check_case("siamese_collator", s, 1, 1, N);
}

Test(collate, patch_and_image_collator_separates_images_and_patches)
{
    item_shape s[] = {{0, 4, 5}, {0, 2, 2}, {0, 2, 2}, {0, 2, 2}};
    check_case("patch_and_image_collator", s, 4, 4, N);
}

Test(collate, multicrop_mixup_collator_blends_pairs_as_torch)
{
    item_shape s[] = {{0, 4, 5}, {0, 2, 3}};
    check_case("multicrop_mixup_collator", s, 2, 2, 4);
}

Test(collate, mixup_lambda_follows_beta_0_2)
{
    /* Beta(0.2, 0.2): mean 1/2, variance ab / ((a+b)^2 (a+b+1)) = 0.04 / 0.224 = 0.178571.
     * 20000 draws: the standard errors are 0.003 and ~0.001, the bounds are > 5 of them. */
    double sum = 0, sq = 0;
    int n = 20000;
    for (int b = 0; b < n; b++) {
        double x = collate_mixup_lambda(0, 0, (uint64_t)b);
        cr_assert(x >= 0 && x <= 1, "lambda %g", x);
        sum += x, sq += x * x;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    cr_assert(mean > 0.5 - 0.016 && mean < 0.5 + 0.016, "mean %g", mean);
    cr_assert(var > 0.178571 - 0.006 && var < 0.178571 + 0.006, "variance %g", var);
    cr_assert_eq(collate_mixup_lambda(3, 1, 7), collate_mixup_lambda(3, 1, 7));
    cr_assert_neq(collate_mixup_lambda(3, 1, 7), collate_mixup_lambda(3, 1, 8));
}

Test(collate, mismatched_samples_and_unknown_names_are_refused)
{
    static uint8_t a[CAP] __attribute__((aligned(64))), b[CAP] __attribute__((aligned(64))),
        out[CAP] __attribute__((aligned(64)));
    item_shape big[] = {{0, 4, 5}, {0, 4, 5}}, small[] = {{0, 2, 3}, {0, 2, 3}};
    rec_view v[2];
    make_sample(a, 0, big, 2, 2, &v[0]);
    make_sample(b, 1, small, 2, 2, &v[1]);
    rec_writer w;
    char why[256];
    rec_writer_init(&w, out, CAP, REC_DATA, 0, 0, 16);
    cr_assert_neq(collate_batch(COLLATE_SIMCLR, v, 2, &(collate_options){0}, &w, why, sizeof why), 0);
    cr_assert(strstr(why, "shape"), "%s", why);
    collate_kind k;
    cr_assert_neq(collate_from_name("simclr_colator", &k, why, sizeof why), 0);
    cr_assert(strstr(why, "unknown"), "%s", why);
    /* simclr takes label[k] per crop: a single label for two crops is VISSL's IndexError. */
    make_sample(a, 0, big, 2, 1, &v[0]);
    make_sample(b, 1, big, 2, 1, &v[1]);
    rec_writer_init(&w, out, CAP, REC_DATA, 0, 0, 16);
    cr_assert_neq(collate_batch(COLLATE_SIMCLR, v, 2, &(collate_options){0}, &w, why, sizeof why), 0);
    cr_assert(strstr(why, "label"), "%s", why);
}

/* ---- labels that are rows, targets_one_hot_default_collator -------------------------------- */

#define M_ROW 3 /* make_collate_fixtures.py's M_ROW */

Test(collate, default_collate_stacks_label_rows_as_torch)
{
    /* Two label sources, each a row of M_ROW values (a 2-D label .npy): label.j is [N, M]. */
    item_shape s[] = {{0, 2, 3}};
    rec_view v[N];
    for (int i = 0; i < N; i++) {
        int64_t rows[2 * M_ROW];
        for (int j = 0; j < 2; j++)
            for (int m = 0; m < M_ROW; m++)
                rows[j * M_ROW + m] = (i + 2 * j + m) % 3 - 1;
        uint64_t shape[2] = {2, M_ROW};
        make_sample_labels(bufs[i], i, s, 1, rows, 2, shape, &v[i]);
    }
    check_samples("default_collate", "default_collate_label_rows", v, N, &(collate_options){0});
}

/* A sample of the one-hot cases: one item [2, 3, 3], label [1, 2K] = pos then neg, -1 padded. */
static void one_hot_sample(int i, const int *pos, int npos, const int *neg, int nneg, int k, rec_view *v)
{
    item_shape s[] = {{0, 2, 3}};
    int64_t row[16];
    cr_assert(2 * k <= 16 && npos <= k && nneg <= k);
    for (int e = 0; e < 2 * k; e++)
        row[e] = -1;
    for (int e = 0; e < npos; e++)
        row[e] = pos[e];
    for (int e = 0; e < nneg; e++)
        row[k + e] = neg[e];
    uint64_t shape[2] = {1, (uint64_t)(2 * k)};
    make_sample_labels(bufs[i], i, s, 1, row, 2, shape, v);
}

Test(collate, targets_one_hot_T20)
{
    /* spec T20: num_classes 12, pos [1, 3, 6], neg [4, 9] -> [-1,1,-1,1,0,-1,1,-1,-1,0,-1,-1]
     * (the fixture holds that row; the generator asserts it against the list worked out by hand). */
    rec_view v[1];
    one_hot_sample(0, (const int[]){1, 3, 6}, 3, (const int[]){4, 9}, 2, 3, &v[0]);
    check_samples("targets_one_hot_default_collator", "targets_one_hot_t20", v, 1,
                  &(collate_options){.num_classes = 12});
}

Test(collate, targets_one_hot_negatives_override_positives)
{
    rec_view v[2];
    one_hot_sample(0, (const int[]){0, 2}, 2, (const int[]){2}, 1, 2, &v[0]);
    one_hot_sample(1, (const int[]){4}, 1, (const int[]){4, 1}, 2, 2, &v[1]);
    check_samples("targets_one_hot_default_collator", "targets_one_hot_overlap", v, 2,
                  &(collate_options){.num_classes = 5});
}

Test(collate, targets_one_hot_batch_of_ragged_lists)
{
    rec_view v[3];
    one_hot_sample(0, (const int[]){1, 5}, 2, (const int[]){0}, 1, 3, &v[0]);
    one_hot_sample(1, NULL, 0, (const int[]){2, 3, 6}, 3, 3, &v[1]);
    one_hot_sample(2, (const int[]){6}, 1, NULL, 0, 3, &v[2]);
    check_samples("targets_one_hot_default_collator", "targets_one_hot_batch", v, 3,
                  &(collate_options){.num_classes = 7});
}

/* collate_batch must fail with `why` containing `needle`. */
static void expect_refusal(collate_kind kind, const rec_view *v, int n, const collate_options *opt, const char *needle)
{
    static uint8_t out[CAP] __attribute__((aligned(64)));
    rec_writer w;
    char why[512] = "";
    cr_assert_eq(rec_writer_init(&w, out, CAP, REC_DATA, 0, 0, 16), 0);
    cr_assert_neq(collate_batch(kind, v, n, opt, &w, why, sizeof why), 0, "accepted (wanted '%s')", needle);
    cr_assert(strstr(why, needle), "'%s' lacks '%s'", why, needle);
}

Test(collate, targets_one_hot_refusals)
{
    rec_view v[2];
    const collate_options twelve = {.num_classes = 12};
    /* an index >= num_classes (VISSL's assert), in either list */
    one_hot_sample(0, (const int[]){1, 12}, 2, NULL, 0, 2, &v[0]);
    expect_refusal(COLLATE_ONE_HOT, v, 1, &twelve, "positive class index 12");
    one_hot_sample(0, (const int[]){1}, 1, (const int[]){30}, 1, 2, &v[0]);
    expect_refusal(COLLATE_ONE_HOT, v, 1, &twelve, "negative class index 30");
    /* a negative index other than the -1 padding (torch's scatter_ raises) */
    one_hot_sample(0, (const int[]){-2}, 1, NULL, 0, 1, &v[0]);
    expect_refusal(COLLATE_ONE_HOT, v, 1, &twelve, "class index -2");
    /* num_classes must be > 0 */
    one_hot_sample(0, (const int[]){1}, 1, NULL, 0, 1, &v[0]);
    expect_refusal(COLLATE_ONE_HOT, v, 1, &(collate_options){.num_classes = 0}, "num_classes");
    /* the second sample's index is the bad one: the whole batch is refused */
    one_hot_sample(1, (const int[]){11}, 1, (const int[]){12}, 1, 1, &v[1]);
    expect_refusal(COLLATE_ONE_HOT, v, 2, &twelve, "sample 1");
    /* two data sources */
    item_shape two[] = {{0, 2, 3}, {0, 2, 3}};
    int64_t row[2] = {1, 2};
    uint64_t rs[2] = {1, 2};
    make_sample_labels(bufs[0], 0, two, 2, row, 2, rs, &v[0]);
    expect_refusal(COLLATE_ONE_HOT, v, 1, &twelve, "only 1 data source");
    /* an odd label width: not [pos..., neg...] */
    item_shape one[] = {{0, 2, 3}};
    int64_t odd[3] = {1, 2, 3};
    uint64_t os[2] = {1, 3};
    make_sample_labels(bufs[0], 0, one, 1, odd, 2, os, &v[0]);
    expect_refusal(COLLATE_ONE_HOT, v, 1, &twelve, "odd width 3");
    /* a 1-D label (one class): VISSL's len(label[0]) raises on an int */
    make_sample(bufs[0], 0, one, 1, 1, &v[0]);
    expect_refusal(COLLATE_ONE_HOT, v, 1, &twelve, "[L, 2K]");
}

Test(collate, label_rows_stack_crop_major_or_are_refused)
{
    /* multicrop_collator: label[k] rows of every sample, crop-major: [k*N, M]. */
    static uint8_t out[CAP] __attribute__((aligned(64)));
    item_shape s[] = {{0, 2, 3}, {0, 2, 3}};
    rec_view v[2];
    for (int i = 0; i < 2; i++) {
        int64_t rows[2 * M_ROW];
        for (int e = 0; e < 2 * M_ROW; e++)
            rows[e] = 10 * i + e;
        uint64_t shape[2] = {2, M_ROW};
        make_sample_labels(bufs[i], i, s, 2, rows, 2, shape, &v[i]);
    }
    rec_writer w;
    char why[512];
    cr_assert_eq(rec_writer_init(&w, out, CAP, REC_DATA, 0, 0, 16), 0);
    cr_assert_eq(collate_batch(COLLATE_MULTICROP, v, 2, &(collate_options){0}, &w, why, sizeof why), 0, "%s", why);
    size_t len = rec_finish(&w);
    cr_assert(len > 0);
    rec_view b;
    char *err = NULL;
    cr_assert_eq(rec_parse(out, len, &b, &err), 0, "%s", err);
    int li = rec_find(&b, "label.0");
    cr_assert(li >= 0);
    cr_assert_eq(b.tensors[li].ndim, 2);
    cr_assert_eq(b.tensors[li].shape[0], 4);
    cr_assert_eq(b.tensors[li].shape[1], M_ROW);
    const int64_t *lab = rec_data(&b, li);
    /* crop 0 of samples 0, 1, then crop 1 of samples 0, 1 */
    const int64_t want[4][M_ROW] = {{0, 1, 2}, {10, 11, 12}, {3, 4, 5}, {13, 14, 15}};
    for (int r = 0; r < 4; r++)
        for (int m = 0; m < M_ROW; m++)
            cr_assert_eq(lab[r * M_ROW + m], want[r][m], "row %d col %d", r, m);
    expect_refusal(COLLATE_MOCO, v, 2, &(collate_options){0}, "rows of 3 values");
}

Test(collate, collate_function_params_are_checked)
{
    const char *texts[] = {"{num_classes: 20}", "{}", "{num_classes: 0}", "{num_classes: 2.5}",
                           "{num_classes: 3, classes: 3}", "{alpha: 1}"};
    const collate_kind kinds[] = {COLLATE_ONE_HOT, COLLATE_ONE_HOT, COLLATE_ONE_HOT, COLLATE_ONE_HOT,
                                  COLLATE_ONE_HOT, COLLATE_SIMCLR};
    const char *needle[] = {NULL, "missing", "out of range", "not an integer", "takes only num_classes",
                            "takes no parameters"};
    for (int c = 0; c < 6; c++) {
        cfg_err cerr = {{0}};
        char *yaml = xasprintf("P: %s\n", texts[c]);
        cfg_node *root = cfg_parse_yaml(yaml, strlen(yaml), "t.yaml", &cerr);
        cr_assert(root, "%s", cerr.msg);
        collate_options opt = {0};
        char why[256] = "";
        int rc = collate_read_params(kinds[c], "x", cfg_map_get(root, "P"), &opt, why, sizeof why);
        if (!needle[c]) {
            cr_assert_eq(rc, 0, "%s", why);
            cr_assert_eq(opt.num_classes, 20);
        } else {
            cr_assert_eq(rc, -1, "%s accepted", texts[c]);
            cr_assert(strstr(why, needle[c]), "%s: %s", texts[c], why);
        }
        cfg_free(root);
        free(yaml);
    }
    /* no COLLATE_FUNCTION_PARAMS at all */
    char why[256];
    cr_assert_eq(collate_read_params(COLLATE_ONE_HOT, "x", NULL, &(collate_options){0}, why, sizeof why), -1);
    cr_assert_eq(collate_read_params(COLLATE_DEFAULT, "x", NULL, &(collate_options){0}, why, sizeof why), 0);
}

Test(collate, targets_one_hot_stage_needs_num_classes)
{
    /* COLLATE_FUNCTION_PARAMS.num_classes missing, 0, or joined by an unknown key: exit 2
     * before anything runs. */
    static const char *const params[] = {"{}", "{num_classes: 0}", "{num_classes: 12, classes: 3}"};
    static const char *const needle[] = {"missing", "out of range", "takes only num_classes"};
    char *dir = test_make_tmpdir();
    char *col = test_build_path("selfsup-collate");
    for (int c = 0; c < 3; c++) {
        char *cfg = xasprintf("%s/c%d.yaml", dir, c);
        FILE *f = fopen(cfg, "w");
        cr_assert(f);
        fprintf(f, "config:\n  DATA:\n    TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: targets_one_hot_default_collator, "
                   "COLLATE_FUNCTION_PARAMS: %s}\n", params[c]);
        fclose(f);
        char *cmd = xasprintf("'%s' -c '%s' --in - --out - </dev/null", col, cfg), *output = NULL;
        int rc = test_run(cmd, &output);
        cr_assert_eq(rc, 2, "params %s: exit %d: %s", params[c], rc, output);
        cr_assert(strstr(output, needle[c]), "params %s: %s", params[c], output);
        free(output), free(cmd), free(cfg);
    }
    free(col);
    char *rm = xasprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(rm), 0);
    free(rm), free(dir);
}

/* ---- the stage: order and epoch ends ------------------------------------------------------ */

/* One sample record of epoch `epoch` at position `seq` into fd (a 2x2 image, label = seq). */
static void put_sample(int fd, uint32_t epoch, uint64_t seq, bool last)
{
    static uint8_t buf[4096] __attribute__((aligned(64)));
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, sizeof buf, REC_DATA, seq, epoch, 4), 0);
    if (last)
        rec_writer_header(&w)->flags |= 1u; /* SAMPLE_FLAG_EPOCH_LAST */
    uint64_t shape[3] = {2, 2, 3}, one = 1;
    uint8_t *px = rec_add(&w, "data.0", REC_U8, 3, shape);
    memset(px, (int)seq, 12);
    int64_t label = (int64_t)seq, valid = 1, idx = (int64_t)(100 * epoch + seq);
    rec_add_copy(&w, "label", REC_I64, 1, &one, &label);
    rec_add_copy(&w, "data_valid", REC_I64, 1, &one, &valid);
    rec_add_copy(&w, "data_idx", REC_I64, 1, &one, &idx);
    size_t len = rec_finish(&w);
    char *err = NULL;
    cr_assert_eq(rec_fd_write(fd, buf, len, &err), 0, "%s", err);
}

/* Read one batch record from fd within 10 s; 1, or 0 on timeout / end. */
static int read_batch(int fd, rec_buf *b, rec_view *v, uint64_t *off)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        return 0;
    char *err = NULL;
    int rc = rec_fd_read(fd, b, v, off, &err);
    free(err);
    return rc == 1;
}

static void check_batch(const rec_view *v, uint32_t epoch, uint64_t seq, const int64_t *labels, int n)
{
    cr_assert_eq(v->hdr->epoch, epoch);
    cr_assert_eq(v->hdr->seq, seq);
    int li = rec_find(v, "label.0");
    cr_assert(li >= 0);
    cr_assert_eq(v->tensors[li].shape[0], (uint64_t)n);
    const int64_t *lab = rec_data(v, li);
    for (int i = 0; i < n; i++)
        cr_assert_eq(lab[i], labels[i], "epoch %u batch %llu sample %d", epoch, (unsigned long long)seq, i);
}

/* selfsup-collate with batch 4 and default_collate, reading in[1]'s writes and writing to
 * out[0] (pipes this makes; the stage's ends are closed here). */
static pid_t start_collate(const char *dir, int in[2], int out[2])
{
    char *cfg = xasprintf("%s/c.yaml", dir);
    FILE *f = fopen(cfg, "w");
    fputs("config:\n  DATA:\n    TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: default_collate}\n", f);
    fclose(f);
    cr_assert_eq(pipe(in), 0);
    cr_assert_eq(pipe(out), 0);
    char *col = test_build_path("selfsup-collate");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0), dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execl(col, col, "-c", cfg, "--in", "-", "--out", "-", (char *)NULL);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    free(col), free(cfg);
    return pid;
}

Test(collate, the_last_sample_of_an_epoch_closes_its_partial_batch_at_once)
{
    /* Epoch 0's 6 samples (batch 4: a full batch and one of 2) arrive out of order, the last
     * one flagged SAMPLE_FLAG_EPOCH_LAST. Both batches must come out while the input is still
     * open — the flag, not the end of the stream, closes the epoch — and in sampler order.
     * Then epoch 1 stops short (its sample 2 never comes): at the end of input the stage
     * fails, and writes no batch of epoch 1 (its first batch lacks sample 2, and batches go
     * out in order). */
    char *dir = test_make_tmpdir();
    int in[2], out[2];
    pid_t pid = start_collate(dir, in, out);
    const uint64_t order0[] = {1, 0, 3, 5, 2, 4};
    for (int i = 0; i < 6; i++)
        put_sample(in[1], 0, order0[i], order0[i] == 5);
    rec_buf b = {0};
    rec_view v;
    uint64_t off = 0;
    cr_assert(read_batch(out[0], &b, &v, &off), "no first batch");
    check_batch(&v, 0, 0, (const int64_t[]){0, 1, 2, 3}, 4);
    cr_assert(read_batch(out[0], &b, &v, &off), "the partial batch waited for the end of the stream");
    check_batch(&v, 0, 1, (const int64_t[]){4, 5}, 2);
    const uint64_t order1[] = {3, 1, 0, 4, 5, 6, 7};
    for (int i = 0; i < 7; i++)
        put_sample(in[1], 1, order1[i], false);
    uint8_t eos[64] __attribute__((aligned(64)));
    char *err = NULL;
    cr_assert_eq(rec_fd_write(in[1], eos, rec_write_eos(eos, sizeof eos, 13, false), &err), 0);
    close(in[1]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "collate should fail on the missing sample (status %d)", st);
    cr_assert(!read_batch(out[0], &b, &v, &off), "a batch with a missing sample was written");
    rec_buf_free(&b);
    close(out[0]);
    test_rm_rf(dir);
    free(dir);
}

Test(collate, an_input_that_ends_inside_an_epoch_is_short)
{
    /* Eight samples of epoch 0, batch 4, and a clean end of stream — but no sample flagged as
     * the epoch's last: the sampler's epoch goes on, so the stream was cut short upstream. The
     * two full batches go out as they complete; the end of the input is then an error, not
     * the end of the epoch. */
    char *dir = test_make_tmpdir();
    int in[2], out[2];
    pid_t pid = start_collate(dir, in, out);
    for (uint64_t s = 0; s < 8; s++)
        put_sample(in[1], 0, s, false);
    uint8_t eos[64] __attribute__((aligned(64)));
    char *err = NULL;
    cr_assert_eq(rec_fd_write(in[1], eos, rec_write_eos(eos, sizeof eos, 8, false), &err), 0);
    close(in[1]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "collate must fail on an epoch without its end (status %d)", st);
    rec_buf b = {0};
    rec_view v;
    uint64_t off = 0;
    int batches = 0;
    while (read_batch(out[0], &b, &v, &off) && v.hdr->kind == REC_DATA)
        batches++;
    cr_expect_eq(batches, 2);
    cr_expect_eq(v.hdr->kind, REC_DATA, "no end-of-stream record may follow: the output is broken, not ended");
    rec_buf_free(&b);
    close(out[0]);
    test_rm_rf(dir);
    free(dir);
}

/*
 * test_features.c — VISSL's feature files (lib/features.h): merge_features' rules (rows
 * unique by index, the lowest rank's row kept, sorted by index), the dtype conversions and
 * the refusals, on files written with lib/npy (which test_npy checks against numpy).
 */
#include "features.h"
#include "npy.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void write_npy(const char *dir, const char *name, npy_dtype dt, int ndim, const size_t *shape,
                      const void *data)
{
    char *path = xasprintf("%s/%s", dir, name), *err = NULL;
    cr_assert_eq(npy_write(path, dt, ndim, shape, data, &err), 0, "%s", err ? err : "");
    free(path);
}

/* Rank r holds rows whose feature is (index, 10·r + row) and whose target is index % 3. */
static void write_rank(const char *dir, int rank, const int64_t *inds, size_t n)
{
    float feat[16][2];
    int64_t tgt[16];
    for (size_t i = 0; i < n; i++) {
        feat[i][0] = (float)inds[i];
        feat[i][1] = (float)(10 * rank + (int)i);
        tgt[i] = inds[i] % 3;
    }
    feat_set f = {.n = n, .dim = 2, .ntargets = 1, .features = &feat[0][0], .targets = tgt, .inds = (int64_t *)inds};
    char *err = NULL;
    cr_assert_eq(feat_write(dir, rank, "train", "res5", &f, &err), 0, "%s", err ? err : "");
}

Test(features, merge_keeps_the_first_rank_of_every_index_sorted_by_index)
{
    char *dir = test_make_tmpdir();
    /* A DistributedSampler pads rank 1 with index 0 again; rank 1 also repeats 5 itself. */
    const int64_t r0[] = {4, 0, 2}, r1[] = {5, 1, 5, 0};
    write_rank(dir, 0, r0, 3);
    write_rank(dir, 1, r1, 4);
    feat_set f;
    char *err = NULL;
    cr_assert_eq(feat_merge(dir, "train", "res5", &f, &err), 0, "%s", err ? err : "");
    const int64_t want_inds[] = {0, 1, 2, 4, 5};
    /* second column: 10·rank + row of the row kept (index 0 from rank 0 row 1; 5 from rank 1 row 0) */
    const float want_src[] = {1, 11, 2, 0, 10};
    cr_assert_eq(f.n, 5);
    cr_assert_eq(f.dim, 2);
    for (size_t i = 0; i < 5; i++) {
        cr_expect_eq(f.inds[i], want_inds[i]);
        cr_expect_eq(f.features[2 * i], (float)want_inds[i]);
        cr_expect_eq(f.features[2 * i + 1], want_src[i], "row %zu", i);
        cr_expect_eq(f.targets[i], want_inds[i] % 3);
    }
    feat_free(&f);
    int n;
    char **layers = feat_layers(dir, "train", &n);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(layers[0], "res5");
    free(layers[0]);
    free(layers);
    cr_expect_null(feat_layers(dir, "test", &n));
    cr_expect_eq(n, 0);
    test_rm_dir(dir);
}

Test(features, float64_features_and_int32_targets_are_converted)
{
    char *dir = test_make_tmpdir();
    const double x[] = {0.5, -1.25, 3, 4};
    const int32_t t[] = {7, 9};
    write_npy(dir, "f.npy", NPY_F8, 2, (size_t[]){2, 2}, x);
    write_npy(dir, "t.npy", NPY_I4, 1, (size_t[]){2}, t);
    char *fp = xasprintf("%s/f.npy", dir), *tp = xasprintf("%s/t.npy", dir), *err = NULL;
    feat_set f;
    cr_assert_eq(feat_load(fp, tp, NULL, &f, &err), 0, "%s", err ? err : "");
    cr_expect_eq(f.n, 2);
    cr_expect_eq(f.ntargets, 1);
    cr_expect_eq(f.features[1], -1.25f);
    cr_expect_eq(f.targets[1], 9);
    cr_expect_eq(f.inds[1], 1);
    feat_free(&f);
    free(fp);
    free(tp);
    test_rm_dir(dir);
}

/* feat_load on (features, targets) written as given; the error must contain `want`. */
static void expect_refused(npy_dtype fdt, const size_t *fshape, const void *fdata, npy_dtype tdt,
                           const size_t *tshape, int tndim, const void *tdata, const char *want)
{
    char *dir = test_make_tmpdir();
    write_npy(dir, "f.npy", fdt, 2, fshape, fdata);
    write_npy(dir, "t.npy", tdt, tndim, tshape, tdata);
    char *fp = xasprintf("%s/f.npy", dir), *tp = xasprintf("%s/t.npy", dir), *err = NULL;
    feat_set f;
    cr_assert_eq(feat_load(fp, tp, NULL, &f, &err), -1);
    cr_assert_not_null(err);
    cr_expect(strstr(err, want) != NULL, "'%s' does not say '%s'", err, want);
    free(err);
    free(fp);
    free(tp);
    test_rm_dir(dir);
}

Test(features, bad_files_are_refused_with_the_file_and_the_row)
{
    const float x[] = {1, 2, NAN, 4};
    const int64_t t2[] = {0, 1}, t3[] = {0, 1, 2};
    expect_refused(NPY_F4, (size_t[]){2, 2}, x, NPY_I8, (size_t[]){2}, 1, t2, "row 1, column 0 is nan");
    const float ok[] = {1, 2, 3, 4};
    expect_refused(NPY_F4, (size_t[]){2, 2}, ok, NPY_I8, (size_t[]){3}, 1, t3, "3 rows of targets for 2 rows");
    const int32_t xi[] = {1, 2, 3, 4};
    expect_refused(NPY_I4, (size_t[]){2, 2}, xi, NPY_I8, (size_t[]){2}, 1, t2, "must be float32");
    const float tf[] = {0, 0.5f};
    expect_refused(NPY_F4, (size_t[]){2, 2}, ok, NPY_F4, (size_t[]){2}, 1, tf, "row 1: targets must be integers");
}

Test(features, merge_without_files_says_to_extract_first)
{
    char *dir = test_make_tmpdir(), *err = NULL;
    feat_set f;
    cr_assert_eq(feat_merge(dir, "test", "heads", &f, &err), -1);
    cr_expect(strstr(err, "no test features of layer 'heads'") != NULL, "%s", err);
    free(err);
    test_rm_dir(dir);
}

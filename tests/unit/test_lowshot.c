/*
 * test_lowshot.c — `selfsup dataset low-shot` (orchestrator/cmd_lowshot.c) against the rule of
 * VISSL's create_low_shot_samples.py: per class, k rows of target 1 and (C − 1)·k of target 0
 * (voc), or k rows of each class with their paths and labels (places), k above the smallest
 * class skipped; and the samples are the ones selfsup-svm --low-shot draws for the same seed.
 */
#include "decode/filelist.h"
#include "npy.h"
#include "svm/svm.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 10
#define C 3
static const int64_t VOC_TARGETS[N][C] = {{1, 0, 0}, {1, 0, -1}, {0, 1, 0}, {0, 1, 0}, {1, 1, 0},
                                          {0, 0, 1}, {0, 0, 1},  {-1, 0, 1}, {0, 1, 0}, {1, 0, 0}};

static int lowshot(const char *args, char **out)
{
    char *bin = test_build_path("selfsup"), *cmd = xasprintf("'%s' dataset low-shot %s", bin, args);
    int rc = test_run(cmd, out);
    free(cmd), free(bin);
    return rc;
}

static npy_array read_npy(const char *dir, const char *name)
{
    char *path = path_join(dir, name), *err = NULL;
    npy_array a;
    cr_assert_eq(npy_read(path, &a, &err), 0, "%s: %s", path, err);
    free(path);
    return a;
}

Test(lowshot, voc_samples_follow_vissls_rule_and_are_the_svms)
{
    char *dir = test_make_tmpdir(), *targets = path_join(dir, "t.npy"), *err = NULL, *out = NULL;
    size_t shape[2] = {N, C};
    cr_assert_eq(npy_write(targets, NPY_I8, 2, shape, VOC_TARGETS, &err), 0, "%s", err);
    char *args = xasprintf("'%s' '%s/s' --dataset voc --layer res5 --k-values 1,2 --num-samples 2 --seed 7", targets, dir);
    cr_assert_eq(lowshot(args, &out), 0, "%s", out);
    char *sdir = path_join(dir, "s");
    int8_t t8[N * C], want[N * C];
    for (int i = 0; i < N * C; i++)
        t8[i] = (int8_t)VOC_TARGETS[i / C][i % C];
    for (int s = 1; s <= 2; s++)
        for (int k = 1; k <= 2; k++) {
            char *name = xasprintf("res5_sample%d_k%d.npy", s, k);
            npy_array a = read_npy(sdir, name);
            cr_assert(a.dtype == NPY_I4 && a.ndim == 2 && a.shape[0] == N && a.shape[1] == C, "%s", name);
            const int32_t *v = a.data;
            for (int c = 0; c < C; c++) {
                int ones = 0, zeros = 0;
                for (int i = 0; i < N; i++) {
                    int32_t x = v[i * C + c];
                    cr_expect(x == -1 || x == VOC_TARGETS[i][c], "%s: row %d class %d: %d, target %lld", name, i, c,
                              x, (long long)VOC_TARGETS[i][c]);
                    ones += x == 1, zeros += x == 0;
                }
                cr_expect_eq(ones, k, "%s class %d: %d positives", name, c, ones);
                cr_expect_eq(zeros, (C - 1) * k, "%s class %d: %d negatives", name, c, zeros);
            }
            cr_assert_eq(svm_lowshot_sample(LOWSHOT_VOC, t8, N, C, k, 7, s, want, &err), 0, "%s", err);
            for (int i = 0; i < N * C; i++)
                cr_expect_eq(v[i], want[i], "%s: entry %d is not what selfsup-svm draws", name, i);
            npy_close(&a);
            free(name);
        }
    free(out), free(args);
    /* more shots than a class has: refused, naming the class */
    args = xasprintf("'%s' '%s/s' --dataset voc --layer res5 --k-values 5", targets, dir);
    cr_expect_eq(lowshot(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "fewer than k = 5"), "%s", out);
    free(out), free(args), free(sdir), free(targets);
    test_rm_rf(dir);
    free(dir);
}

Test(lowshot, places_samples_are_k_paths_of_each_class)
{
    char *dir = test_make_tmpdir(), *targets = path_join(dir, "t.npy"), *images = path_join(dir, "i.npy");
    char *err = NULL, *out = NULL;
    int64_t labels[9] = {0, 0, 0, 1, 1, 2, 2, 2, 2};
    size_t shape[1] = {9};
    cr_assert_eq(npy_write(targets, NPY_I8, 1, shape, labels, &err), 0, "%s", err);
    char *cmd = xasprintf("/usr/bin/python3 -c \"import numpy as np; np.save('%s', np.array(['/data/img%%d.jpg' %% i "
                          "for i in range(9)]))\"",
                          images);
    cr_assert_eq(system(cmd), 0);
    char *args = xasprintf("'%s' '%s/p' --dataset places --images '%s' --k-values 2,3 --num-samples 1", targets, dir,
                           images);
    cr_assert_eq(lowshot(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "k = 3: skipped"), "%s", out);
    char *pdir = path_join(dir, "p"), *skipped = path_join(pdir, "train_labels_sample1_k3.npy");
    cr_expect(!path_exists(skipped), "k = 3 is above the smallest class (2 rows)");
    npy_array l = read_npy(pdir, "train_labels_sample1_k2.npy");
    cr_assert(l.dtype == NPY_I8 && l.ndim == 1 && l.shape[0] == 6);
    const int64_t *lv = l.data;
    char **got = NULL, *ipath = path_join(pdir, "train_images_sample1_k2.npy");
    size_t n = 0;
    cr_assert_eq(decode_filelist_read(ipath, &got, &n, &err), 0, "%s", err);
    cr_assert_eq(n, 6);
    for (size_t i = 0; i < n; i++) {
        int img = -1;
        cr_assert_eq(sscanf(got[i], "/data/img%d.jpg", &img), 1, "%s", got[i]);
        cr_expect_eq(lv[i], (int64_t)(i / 2), "labels go class by class: %lld at %zu", (long long)lv[i], i);
        cr_expect_eq(labels[img], lv[i], "%s is of class %lld, listed as %lld", got[i], (long long)labels[img],
                     (long long)lv[i]);
        for (size_t j = 0; j < i; j++)
            cr_expect(strcmp(got[i], got[j]), "%s drawn twice", got[i]);
    }
    decode_filelist_free(got, n);
    npy_close(&l);
    free(ipath), free(skipped), free(pdir), free(args), free(out), free(cmd), free(images), free(targets);
    test_rm_rf(dir);
    free(dir);
}

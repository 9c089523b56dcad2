/*
 * cmd_lowshot.c — `selfsup dataset low-shot TARGETS OUT`: the low-shot samples of VISSL's
 * extra_scripts/create_low_shot_samples.py, drawn ahead of time.
 *
 *   selfsup dataset low-shot TARGETS OUT --dataset voc --layer NAME [--k-values 1,2,4,8,16,32,64,96]
 *                            [--num-samples 5] [--seed S]
 *   selfsup dataset low-shot TARGETS OUT --dataset places --images FILE [...]
 *
 * voc: TARGETS is an N × C matrix of 1 / 0 / −1 (VOC07's train targets). For each sample s in
 * 1..num-samples and each k: an int32 N × C matrix, −1 but for k rows of each class with target
 * 1 and (C − 1)·k rows with target 0, as OUT/{NAME}_sample{s}_k{k}.npy: the files
 * `selfsup-svm --low-shot` reads (and would draw itself, to the bit: both use svm_lowshot_sample
 * with the same seed, so a file made here is the one the SVM stage makes).
 * places: TARGETS holds one class index per row and FILE the matching image paths (a
 * disk_filelist .npy); for each (s, k) with k no more than the smallest class, k random rows of
 * every class as OUT/train_images_sample{s}_k{k}.npy (their paths, class by class) and
 * OUT/train_labels_sample{s}_k{k}.npy (int64), a disk_filelist pair to train on; a larger k is
 * skipped, as the script skips it.
 *
 * VISSL's script draws with Python's unseeded `random`, so no two of its runs agree; here the
 * draw is lib/rng.h's stream of --seed (default 0, the SVM's default SEED_VALUE), the same on
 * every machine. Exit status: 0 written, 1 unreadable input or a class with too few rows,
 * 2 a usage error.
 */
#include "cmd.h"
#include "dataset_files.h"

#include "decode/filelist.h"
#include "log.h"
#include "npy.h"
#include "svm/svm.h"
#include "util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOWSHOT_MAX_K 64

typedef struct {
    const char *targets, *out, *layer, *images;
    bool places;
    int k[LOWSHOT_MAX_K], nk;
    long samples;
    uint64_t seed;
} lowshot_args;

static void lowshot_usage(FILE *f)
{
    fputs("usage: selfsup dataset low-shot TARGETS OUT --dataset voc --layer NAME [options]\n"
          "       selfsup dataset low-shot TARGETS OUT --dataset places --images FILE [options]\n"
          "  VISSL's create_low_shot_samples.py: k examples per class, for several independent\n"
          "  samples, as the low-shot SVM benchmark reads them.\n"
          "  --k-values LIST     shots per class (default 1,2,4,8,16,32,64,96)\n"
          "  --num-samples N     independent samples, numbered from 1 (default 5)\n"
          "  --seed S            the draw's seed (default 0, the SVM's default SEED_VALUE)\n",
          f);
}

static int parse_k_values(const char *text, lowshot_args *a)
{
    int n = 0;
    char **parts = str_split(text, ',', &n);
    int rc = n > 0 && n <= LOWSHOT_MAX_K ? 0 : -1;
    for (int i = 0; i < n; i++) {
        char *end;
        long v = strtol(parts[i], &end, 10);
        if (rc == 0 && (*end || end == parts[i] || v < 1 || v > 1000000))
            rc = -1;
        a->k[i] = (int)v;
        free(parts[i]);
    }
    free(parts);
    a->nk = n;
    return rc ? log_usage_error(lowshot_usage, "--k-values '%s': expected up to %d whole numbers >= 1, comma-separated",
                                text, LOWSHOT_MAX_K)
              : 0;
}

/* One option and its value; 0, or EXIT_USAGE. */
static int take_option(lowshot_args *a, const char *opt, const char *v)
{
    char *end = NULL;
    if (!strcmp(opt, "--dataset")) {
        if (strcmp(v, "voc") && strcmp(v, "places"))
            return log_usage_error(lowshot_usage, "--dataset '%s': expected voc or places", v);
        a->places = !strcmp(v, "places");
    } else if (!strcmp(opt, "--layer"))
        a->layer = v;
    else if (!strcmp(opt, "--images"))
        a->images = v;
    else if (!strcmp(opt, "--k-values"))
        return parse_k_values(v, a);
    else if (!strcmp(opt, "--num-samples")) {
        a->samples = strtol(v, &end, 10);
        if (*end || end == v || a->samples < 1 || a->samples > 1000)
            return log_usage_error(lowshot_usage, "--num-samples '%s': expected 1..1000", v);
    } else if (!strcmp(opt, "--seed")) {
        a->seed = strtoull(v, &end, 10);
        if (*end || end == v || v[0] == '-')
            return log_usage_error(lowshot_usage, "--seed '%s': expected a whole number >= 0", v);
    } else
        return log_usage_error(lowshot_usage, "unknown option '%s'", opt);
    return 0;
}

static int parse_args(int argc, char **argv, lowshot_args *a)
{
    *a = (lowshot_args){.samples = 5, .nk = 8, .k = {1, 2, 4, 8, 16, 32, 64, 96}};
    bool dataset = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return lowshot_usage(stdout), -1;
        if (argv[i][0] == '-') {
            if (i + 1 >= argc)
                return log_usage_error(lowshot_usage, "%s needs a value", argv[i]);
            dataset |= !strcmp(argv[i], "--dataset");
            int rc = take_option(a, argv[i], argv[i + 1]);
            if (rc)
                return rc;
            i++;
        } else if (!a->targets)
            a->targets = argv[i];
        else if (!a->out)
            a->out = argv[i];
        else
            return log_usage_error(lowshot_usage, "one TARGETS and one OUT only ('%s' is extra)", argv[i]);
    }
    if (!a->targets || !a->out || !dataset)
        return log_usage_error(lowshot_usage, "TARGETS, OUT and --dataset are needed");
    if (!a->places && !a->layer)
        return log_usage_error(lowshot_usage, "--dataset voc needs --layer (the files are LAYER_sample{s}_k{k}.npy)");
    if (a->places && !a->images)
        return log_usage_error(lowshot_usage, "--dataset places needs --images (the image paths of TARGETS' rows)");
    return 0;
}

/* ---- the targets ----------------------------------------------------------------------------- */

/* TARGETS as int8 n × C: voc's 1/0/−1 matrix, or places' class indices one-hot. */
static int read_targets(const lowshot_args *a, int8_t **t, size_t *n, size_t *C, char **err)
{
    int64_t *v = NULL;
    size_t width = 0;
    if (decode_labels_read_rows(a->targets, &v, n, &width, err) != 0)
        return -1;
    int rc = 0;
    if (a->places) {
        int64_t top = -1;
        for (size_t i = 0; i < *n && rc == 0; i++)
            rc = v[i] < 0 || v[i] > 65534 || width != 1
                     ? report_failure(err, "%s: row %zu: places targets are one class index (0..65534) a row", a->targets, i)
                     : (top = v[i] > top ? v[i] : top, 0);
        *C = (size_t)(top + 1);
    } else
        *C = width;
    *t = xcalloc(*n * *C + 1, 1);
    for (size_t i = 0; i < *n && rc == 0; i++)
        for (size_t c = 0; c < *C && rc == 0; c++) {
            int64_t x = a->places ? v[i] == (int64_t)c : v[i * width + c];
            if (x < -1 || x > 1)
                rc = report_failure(err, "%s: row %zu: %lld is not 1, 0 or -1", a->targets, i, (long long)x);
            (*t)[i * *C + c] = (int8_t)x;
        }
    free(v);
    return rc;
}

/* ---- writing --------------------------------------------------------------------------------- */

static int write_voc(const lowshot_args *a, const int8_t *s, size_t n, size_t C, int sample, int k, char **err)
{
    int32_t *v = xmalloc((n * C + 1) * sizeof *v);
    for (size_t i = 0; i < n * C; i++)
        v[i] = s[i];
    char *path = xasprintf("%s/%s_sample%d_k%d.npy", a->out, a->layer, sample, k);
    size_t shape[2] = {n, C};
    int rc = npy_write(path, NPY_I4, 2, shape, v, err);
    free(path);
    free(v);
    return rc;
}

/* The drawn rows class by class (each class's rows in file order), paths and labels. */
static int write_places(const lowshot_args *a, const int8_t *s, size_t n, size_t C, char **images, int sample,
                        int k, char **err)
{
    char **paths = xcalloc(C * (size_t)k + 1, sizeof *paths);
    int64_t *labels = xcalloc(C * (size_t)k + 1, sizeof *labels);
    size_t m = 0;
    for (size_t c = 0; c < C; c++)
        for (size_t i = 0; i < n; i++)
            if (s[i * C + c] == 1) {
                paths[m] = images[i];
                labels[m++] = (int64_t)c;
            }
    char *ip = xasprintf("%s/train_images_sample%d_k%d.npy", a->out, sample, k);
    char *lp = xasprintf("%s/train_labels_sample%d_k%d.npy", a->out, sample, k);
    size_t shape[1] = {m};
    int rc = write_unicode_npy(ip, paths, m, err);
    if (rc == 0)
        rc = npy_write(lp, NPY_I8, 1, shape, labels, err);
    free(ip);
    free(lp);
    free(paths);
    free(labels);
    return rc;
}

/* The smallest class's row count (places: classes with no row are not classes of the set). */
static size_t smallest_class(const int8_t *t, size_t n, size_t C)
{
    size_t least = SIZE_MAX;
    for (size_t c = 0; c < C; c++) {
        size_t pos = 0;
        for (size_t i = 0; i < n; i++)
            pos += t[i * C + c] == 1;
        if (pos && pos < least)
            least = pos;
    }
    return least == SIZE_MAX ? 0 : least;
}

static int draw_all(const lowshot_args *a, const int8_t *t, size_t n, size_t C, char **images, char **err)
{
    int8_t *s = xmalloc(n * C + 1);
    size_t least = a->places ? smallest_class(t, n, C) : SIZE_MAX;
    int rc = 0, files = 0;
    for (long sample = 1; sample <= a->samples && rc == 0; sample++)
        for (int j = 0; j < a->nk && rc == 0; j++) {
            int k = a->k[j];
            if ((size_t)k > least) {
                if (sample == 1)
                    log_info("k = %d: skipped, the smallest class has %zu rows (as VISSL's script skips it)", k, least);
                continue;
            }
            rc = svm_lowshot_sample(a->places ? LOWSHOT_PLACES : LOWSHOT_VOC, t, n, C, k, a->seed, (int)sample, s, err);
            if (rc == 0)
                rc = a->places ? write_places(a, s, n, C, images, (int)sample, k, err)
                               : write_voc(a, s, n, C, (int)sample, k, err);
            files += rc == 0;
        }
    if (rc == 0)
        log_info("wrote %d low-shot sample%s (%zu rows, %zu classes) into %s", files, files == 1 ? "" : "s", n, C,
                 a->out);
    free(s);
    return rc;
}

int cmd_dataset_lowshot(int argc, char **argv)
{
    lowshot_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    char *err = NULL, **images = NULL;
    int8_t *t = NULL;
    size_t n = 0, C = 0, nimages = 0;
    rc = make_dirs(a.out, 0777, &err) != 0 || read_targets(&a, &t, &n, &C, &err) != 0 ? EXIT_RUNTIME : 0;
    if (rc == 0 && a.places && decode_filelist_read(a.images, &images, &nimages, &err) != 0)
        rc = EXIT_RUNTIME;
    if (rc == 0 && a.places && nimages != n)
        rc = (report_failure(&err, "%s holds %zu paths for %zu target rows", a.images, nimages, n), EXIT_RUNTIME);
    if (rc == 0 && draw_all(&a, t, n, C, images, &err) != 0)
        rc = EXIT_RUNTIME;
    if (rc)
        log_error("%s", err ? err : "failed");
    free(err);
    free(t);
    if (images)
        decode_filelist_free(images, nimages);
    return rc;
}

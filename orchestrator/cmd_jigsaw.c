/*
 * cmd_jigsaw.c — `selfsup dataset jigsaw-perms N K OUT`: Jigsaw's permutation sets, made as VISSL's
 * extra_scripts/generate_jigsaw_permutations.py makes them (Noroozi & Favaro 2016, Algorithm 1).
 * VISSL's recipes download their perm_file; selfsup never downloads, so this makes one here.
 *
 *   selfsup dataset jigsaw-perms N K OUT [--method max_avg|max_min] [--first J | --seed S]
 *
 * Every permutation of the K patches, in itertools.permutations' order (lexicographic). The first
 * chosen is number J (VISSL draws it with an unseeded np.random.randint; --seed S draws it from
 * our counter-based generator, so a seed names one file; the default is --seed 0). Then, until N
 * are chosen, the permutation not chosen yet that lies farthest from the chosen ones: by the mean
 * Hamming distance (max_avg, VISSL's default) or the smallest one (max_min), the first such in
 * that order. The means are worked out as numpy works out VISSL's: each distance is scipy's
 * fraction k / K, summed in float64 in the order the permutations were chosen, then divided by
 * their count. That rounding breaks some ties differently from exact integer sums (for K = 9 a
 * set made with integers parts from VISSL's after 9 rows), so it is kept.
 *
 * Written as int64 N × K, 0-based, as ShuffleImgPatches reads a perm_file: to OUT, or, when OUT is
 * a directory, to OUT/hamming_perms_N_patches_K_METHOD.npy, VISSL's name. The distances of the
 * chosen set (their mean and minimum, in patches) are logged as VISSL logs them.
 *
 * Cost: K! permutations of K bytes, each visited once per chosen one (K = 9, N = 1000: 362,880 ×
 * 1000 distances, a few seconds).
 */
#include "cmd.h"

#include "log.h"
#include "npy.h"
#include "rng.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define JIGSAW_MAX_PATCHES 10

typedef struct {
    long n, k;
    bool max_min;
    long first; /* -1: drawn with seed */
    uint64_t seed;
    const char *out;
} jigsaw_args;

typedef struct {
    uint8_t *perm; /* count × k, lexicographic */
    size_t count;
    int k;
} perm_table;

static void jigsaw_usage(FILE *f)
{
    fputs("usage: selfsup dataset jigsaw-perms N K OUT [--method max_avg|max_min] [--first J | --seed S]\n"
          "  N permutations of K patches (2..10) chosen for their Hamming distance to each other, as\n"
          "  VISSL's generate_jigsaw_permutations.py; OUT is a .npy file, or a directory for VISSL's\n"
          "  name hamming_perms_N_patches_K_METHOD.npy. The first permutation is number J in\n"
          "  itertools.permutations order, or drawn with seed S (default: --seed 0).\n",
          f);
}

/* ---- the permutations ------------------------------------------------------------------------ */

/* The next permutation in lexicographic order, in place; false after the last. */
static bool next_permutation(uint8_t *a, int k)
{
    int i = k - 2;
    while (i >= 0 && a[i] >= a[i + 1])
        i--;
    if (i < 0)
        return false;
    int j = k - 1;
    while (a[j] <= a[i])
        j--;
    uint8_t t = a[i];
    a[i] = a[j], a[j] = t;
    for (int l = i + 1, r = k - 1; l < r; l++, r--)
        t = a[l], a[l] = a[r], a[r] = t;
    return true;
}

static perm_table all_permutations(int k)
{
    size_t count = 1;
    for (int i = 2; i <= k; i++)
        count *= (size_t)i;
    perm_table t = {.perm = xmalloc(count * (size_t)k), .count = count, .k = k};
    uint8_t a[JIGSAW_MAX_PATCHES];
    for (int i = 0; i < k; i++)
        a[i] = (uint8_t)i;
    size_t at = 0;
    do
        memcpy(t.perm + at++ * (size_t)k, a, (size_t)k);
    while (next_permutation(a, k));
    return t;
}

static int hamming(const uint8_t *a, const uint8_t *b, int k)
{
    int d = 0;
    for (int i = 0; i < k; i++)
        d += a[i] != b[i];
    return d;
}

/* ---- the greedy choice ------------------------------------------------------------------------ */

/* Each candidate's distance to the newest choice j joins its score: the float64 sum of k/K
 * (max_avg) or the smallest count (max_min). */
static void add_distances(const perm_table *t, const bool *taken, size_t j, bool max_min, double *sum, int *least)
{
    const uint8_t *pj = t->perm + j * (size_t)t->k;
    for (size_t c = 0; c < t->count; c++) {
        if (taken[c])
            continue;
        int d = hamming(t->perm + c * (size_t)t->k, pj, t->k);
        if (max_min)
            least[c] = d < least[c] ? d : least[c];
        else
            sum[c] += (double)d / (double)t->k; /* scipy's hamming: the fraction of places that differ */
    }
}

/* The first candidate not taken with the largest score: sum / chosen (numpy's mean) or least. */
static size_t farthest(const perm_table *t, const bool *taken, bool max_min, const double *sum, const int *least,
                       long chosen)
{
    size_t best = SIZE_MAX;
    double best_v = -INFINITY;
    for (size_t c = 0; c < t->count; c++) {
        if (taken[c])
            continue;
        double v = max_min ? (double)least[c] : sum[c] / (double)chosen;
        if (v > best_v)
            best = c, best_v = v;
    }
    return best;
}

/* The N chosen permutations' numbers, first to last. */
static size_t *choose(const perm_table *t, long n, size_t first, bool max_min)
{
    size_t *chosen = xmalloc((size_t)n * sizeof *chosen);
    bool *taken = xcalloc(t->count, sizeof *taken);
    double *sum = xcalloc(t->count, sizeof *sum);
    int *least = xmalloc(t->count * sizeof *least);
    for (size_t c = 0; c < t->count; c++)
        least[c] = t->k + 1;
    size_t j = first;
    for (long i = 0; i < n; i++) {
        chosen[i] = j;
        taken[j] = true;
        if (i + 1 == n)
            break;
        add_distances(t, taken, j, max_min, sum, least);
        j = farthest(t, taken, max_min, sum, least, i + 1);
        if ((i + 1) % 100 == 0)
            log_info("jigsaw-perms: %ld of %ld chosen", i + 1, n);
    }
    free(taken), free(sum), free(least);
    return chosen;
}

/* VISSL's closing line: the mean and the smallest distance between two chosen, in patches. */
static void log_stats(const perm_table *t, const size_t *chosen, long n)
{
    if (n < 2)
        return;
    double total = 0.0;
    int least = t->k;
    for (long a = 0; a < n; a++)
        for (long b = 0; b < n; b++)
            if (a != b) {
                int d = hamming(t->perm + chosen[a] * (size_t)t->k, t->perm + chosen[b] * (size_t)t->k, t->k);
                total += d;
                least = d < least ? d : least;
            }
    log_info("jigsaw-perms: permutation stats: avg dist %.4f; min dist %d", total / ((double)n * (double)(n - 1)),
             least);
}

/* ---- the command ------------------------------------------------------------------------------ */

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s && *s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* The options after the three operands; EXIT_USAGE on a bad one, else 0. */
static int parse_options(int argc, char **argv, jigsaw_args *a)
{
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(o, "--method") && v && (!strcmp(v, "max_avg") || !strcmp(v, "max_min"))) {
            a->max_min = !strcmp(v, "max_min");
        } else if (!strcmp(o, "--first") && parse_long(v, 0, LONG_MAX, &x)) {
            a->first = x;
        } else if (!strcmp(o, "--seed") && parse_long(v, 0, LONG_MAX, &x)) {
            a->seed = (uint64_t)x;
        } else {
            log_error("jigsaw-perms: bad option '%s%s%s' (--method max_avg|max_min, --first J, --seed S)", o,
                      v ? " " : "", v ? v : "");
            return EXIT_USAGE;
        }
        i++;
    }
    return 0;
}

static int parse_args(int argc, char **argv, jigsaw_args *a)
{
    *a = (jigsaw_args){.first = -1};
    if (argc < 4) {
        jigsaw_usage(stderr);
        return EXIT_USAGE;
    }
    if (!parse_long(argv[2], 2, JIGSAW_MAX_PATCHES, &a->k)) {
        log_error("jigsaw-perms: K must be a number of patches from 2 to %d, not '%s'", JIGSAW_MAX_PATCHES, argv[2]);
        return EXIT_USAGE;
    }
    long perms = 1;
    for (long i = 2; i <= a->k; i++)
        perms *= i;
    if (!parse_long(argv[1], 1, perms, &a->n)) {
        log_error("jigsaw-perms: N must be 1 to %ld (the permutations of %ld patches), not '%s'", perms, a->k, argv[1]);
        return EXIT_USAGE;
    }
    a->out = argv[3];
    int rc = parse_options(argc - 4, argv + 4, a);
    if (!rc && a->first >= perms) {
        log_error("jigsaw-perms: --first %ld: there are %ld permutations of %ld patches", a->first, perms, a->k);
        return EXIT_USAGE;
    }
    return rc;
}

/* OUT, or VISSL's file name inside OUT when it is a directory. */
static char *output_path(const jigsaw_args *a)
{
    struct stat st;
    if (stat(a->out, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t len = strlen(a->out);
        while (len > 1 && a->out[len - 1] == '/')
            len--;
        return xasprintf("%.*s/hamming_perms_%ld_patches_%ld_%s.npy", (int)len, a->out, a->n, a->k,
                         a->max_min ? "max_min" : "max_avg");
    }
    return xstrdup(a->out);
}

static int write_perms(const perm_table *t, const size_t *chosen, long n, const char *path)
{
    int64_t *rows = xmalloc((size_t)n * (size_t)t->k * sizeof *rows);
    for (long i = 0; i < n; i++)
        for (int p = 0; p < t->k; p++)
            rows[(size_t)i * (size_t)t->k + (size_t)p] = t->perm[chosen[i] * (size_t)t->k + (size_t)p];
    size_t shape[2] = {(size_t)n, (size_t)t->k};
    char *err = NULL;
    int rc = npy_write(path, NPY_I8, 2, shape, rows, &err);
    if (rc != 0)
        log_error("jigsaw-perms: %s: %s", path, err);
    free(err), free(rows);
    return rc == 0 ? 0 : EXIT_RUNTIME;
}

int cmd_dataset_jigsaw_perms(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        jigsaw_usage(stdout);
        return 0;
    }
    jigsaw_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    perm_table t = all_permutations((int)a.k);
    size_t first = a.first >= 0 ? (size_t)a.first : 0;
    if (a.first < 0) {
        rng_stream s;
        rng_stream_init(&s, (rng_key){.seed = a.seed, .purpose = RNG_PURPOSE_DATASET});
        first = (size_t)rng_randint(&s, 0, (int64_t)t.count);
    }
    log_info("jigsaw-perms: %ld of the %zu permutations of %ld patches, %s, from number %zu", a.n, t.count, a.k,
             a.max_min ? "max_min" : "max_avg", first);
    size_t *chosen = choose(&t, a.n, first, a.max_min);
    log_stats(&t, chosen, a.n);
    char *path = output_path(&a);
    rc = write_perms(&t, chosen, a.n, path);
    if (!rc)
        printf("%s: %ld permutations of %ld patches (int64, 0-based)\n", path, a.n, a.k);
    free(path), free(chosen), free(t.perm);
    return rc;
}

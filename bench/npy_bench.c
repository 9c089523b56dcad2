/*
 * npy_bench.c — how fast lib/npy writes and reads the feature matrices that extraction dumps
 * and the SVM / kNN stages read back. bench/npy_bench.py does the same work with numpy and
 * bench/run.sh puts the two side by side; see bench/README.md.
 *
 * For each size (ROWSxCOLS:DTYPE) it times, with CLOCK_MONOTONIC, one discarded warm-up and
 * then --reps repetitions (median reported) of, in this order:
 *   write_stream  npy_header + fallocate (payloads >= 16 MiB) + write(2) into the final name,
 *                 no fsync: what np.save(path) does, syscall for syscall
 *   write         npy_write: temp file + write + fsync + rename + fsync of the directory
 *   read          npy_read (malloc + pread) + sum of every element + npy_close
 *   mmap          npy_open (read-only mmap) + sum of every element + npy_close
 * Sums accumulate in double with 8 independent accumulators (numpy's pairwise sum unrolls by
 * 8 as well); the data are (i % 4096) [/ 4096 for floats], so every sum is exact in double and
 * must equal the in-memory sum in any order, which is checked. Files are in the page cache
 * when read back (nothing here drops caches); numpy's side is in the same state.
 *
 * Output, one line per measurement:  npy_bench <op> <rows>x<cols> <dtype> <seconds> <GB/s>
 * and lines starting with '#' for notes, the individual times and the checksums.
 */
#include "log.h"
#include "npy.h"
#include "timer.h"
#include "util.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_SIZES 32
#define MAX_REPS 100
#define PATTERN 4096
#define FALLOCATE_MIN ((size_t)16 << 20) /* numpy's threshold for preallocating in tofile() */

typedef struct {
    char label[64]; /* "50000x2048" or "1000000" for a 1-d array */
    int ndim;
    size_t shape[2];
    npy_dtype dtype;
} size_spec;

static const char *const DEFAULT_SIZES[] = {"10000x2048:f4", "50000x2048:f4", "1000000x1:i8"};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: npy_bench [--dir DIR] [--reps N] [--keep] [--thp] [SIZE...]\n"
            "\n"
            "Times lib/npy on float32 feature matrices and int64 index vectors: a plain\n"
            "streamed write (npy_header + fallocate + write, no fsync, as np.save does),\n"
            "npy_write (atomic, fsync'd), npy_read + sum of every element, and npy_open (mmap) +\n"
            "sum of every element. Each runs once as a warm-up and then N times; the median is\n"
            "printed as\n"
            "  npy_bench <op> <rows>x<cols> <dtype> <seconds> <GB/s>\n"
            "bench/npy_bench.py does the same with numpy; bench/run.sh compares the two.\n"
            "\n"
            "SIZE is ROWSxCOLS[:DTYPE] (2-d) or ROWS[:DTYPE] (1-d), DTYPE one of f4 f8 i4 i8\n"
            "(default f4). Default sizes: 10000x2048:f4 50000x2048:f4 1000000x1:i8.\n"
            "\n"
            "options:\n"
            "  --dir DIR   write the files in DIR (default: a new temp dir under $TMPDIR or\n"
            "              /tmp, removed at the end); use the same DIR for the numpy side\n"
            "  --reps N    measured repetitions after the warm-up (default 5, 1..%d)\n"
            "  --keep      leave the files (selfsup_<size>_<dtype>.npy) in DIR\n"
            "  --thp       put the source matrix in transparent huge pages (madvise), as numpy's\n"
            "              allocator does for arrays >= 4 MiB; default: plain malloc (xmalloc)\n"
            "  --help      this text\n"
            "  --version   print the version\n"
            "\n"
            "Files are read back from the page cache; caches are not dropped (no root needed).\n"
            "Exit status: 0 success, 1 I/O or checksum failure, 2 usage error.\n",
            MAX_REPS);
}

static int parse_size(const char *arg, size_spec *s)
{
    char *end;
    *s = (size_spec){.dtype = NPY_F4};
    errno = 0;
    unsigned long long rows = strtoull(arg, &end, 10), cols = 0;
    if (errno || end == arg || arg[0] == '-')
        return -1;
    s->ndim = 1;
    if (*end == 'x') {
        const char *c = end + 1;
        cols = strtoull(c, &end, 10);
        if (errno || end == c || c[0] == '-')
            return -1;
        s->ndim = 2;
    }
    if (*end == ':') {
        const char *d = end + 1;
        if (!npy_dtype_from_name(d, &s->dtype) ||
            (s->dtype != NPY_F4 && s->dtype != NPY_F8 && s->dtype != NPY_I4 &&
             s->dtype != NPY_I8))
            return -1;
    } else if (*end != '\0') {
        return -1;
    }
    s->shape[0] = rows;
    s->shape[1] = cols;
    if (s->ndim == 2)
        snprintf(s->label, sizeof s->label, "%llux%llu", rows, cols);
    else
        snprintf(s->label, sizeof s->label, "%llu", rows);
    return 0;
}

static size_t spec_count(const size_spec *s)
{
    return s->ndim == 2 ? s->shape[0] * s->shape[1] : s->shape[0];
}

/* ---- data and sums -------------------------------------------------------------------- */

static void fill(void *buf, npy_dtype dtype, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t v = i % PATTERN;
        switch (dtype) {
        case NPY_F4: ((float *)buf)[i] = (float)v / (float)PATTERN; break;
        case NPY_F8: ((double *)buf)[i] = (double)v / (double)PATTERN; break;
        case NPY_I4: ((int32_t *)buf)[i] = (int32_t)v; break;
        default: ((int64_t *)buf)[i] = (int64_t)v; break;
        }
    }
}

/* Sum in double with 8 independent accumulators, as numpy's pairwise sum does per block. */
#define DEFINE_SUM(NAME, T)                                                                    \
    static double NAME(const T *x, size_t n)                                                   \
    {                                                                                          \
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;                 \
        size_t i = 0;                                                                          \
        for (; i + 8 <= n; i += 8) {                                                           \
            a0 += (double)x[i + 0];                                                            \
            a1 += (double)x[i + 1];                                                            \
            a2 += (double)x[i + 2];                                                            \
            a3 += (double)x[i + 3];                                                            \
            a4 += (double)x[i + 4];                                                            \
            a5 += (double)x[i + 5];                                                            \
            a6 += (double)x[i + 6];                                                            \
            a7 += (double)x[i + 7];                                                            \
        }                                                                                      \
        for (; i < n; i++)                                                                     \
            a0 += (double)x[i];                                                                \
        return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));                              \
    }
DEFINE_SUM(sum_f4, float)
DEFINE_SUM(sum_f8, double)
DEFINE_SUM(sum_i4, int32_t)
DEFINE_SUM(sum_i8, int64_t)

static double sum_array(const void *data, npy_dtype dtype, size_t n)
{
    switch (dtype) {
    case NPY_F4: return sum_f4(data, n);
    case NPY_F8: return sum_f8(data, n);
    case NPY_I4: return sum_i4(data, n);
    default: return sum_i8(data, n);
    }
}

/* ---- the operations --------------------------------------------------------------------- */

typedef struct {
    const size_spec *spec;
    const char *path;
    const void *data;
    double sum; /* what read/mmap found, for the checksum */
} job;

static int op_write(job *j)
{
    char *err = NULL;
    if (npy_write(j->path, j->spec->dtype, j->spec->ndim, j->spec->shape, j->data, &err)) {
        log_error("npy_write: %s", err);
        free(err);
        return -1;
    }
    return 0;
}

static int op_write_stream(job *j)
{
    char *err = NULL;
    size_t hlen;
    char *header = npy_header(j->spec->dtype, j->spec->ndim, j->spec->shape, &hlen, &err);
    if (!header) {
        log_error("npy_header: %s", err);
        free(err);
        return -1;
    }
    int fd = open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        log_error("%s: cannot create: %s", j->path, strerror(errno));
        free(header);
        return -1;
    }
    const char *parts[2] = {header, j->data};
    size_t lens[2] = {hlen, spec_count(j->spec) * npy_dtype_size(j->spec->dtype)};
    /* numpy's tofile() reserves the payload's blocks first (fallocate, KEEP_SIZE) when the
     * payload is at least 16 MiB (npy_fallocate in numpy's convert.c); do the same. On ext4
     * this matters ~3x for rewriting a 400 MB file: without it, the delayed allocation and
     * the flush ext4 starts when a truncated file is closed (auto_da_alloc) are paid inside
     * the write. Failure is harmless (not every filesystem supports it), as in numpy. */
    if (lens[1] >= FALLOCATE_MIN)
        (void)fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)hlen, (off_t)lens[1]);
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        const char *p = parts[k];
        size_t n = lens[k];
        while (n > 0) {
            ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                log_error("%s: write failed: %s", j->path, strerror(errno));
                rc = -1;
                break;
            }
            p += w;
            n -= (size_t)w;
        }
    }
    if (close(fd) != 0 && rc == 0) {
        log_error("%s: close failed: %s", j->path, strerror(errno));
        rc = -1;
    }
    free(header);
    return rc;
}

static int op_load(job *j, bool use_mmap)
{
    char *err = NULL;
    npy_array a;
    int rc = use_mmap ? npy_open(j->path, &a, &err) : npy_read(j->path, &a, &err);
    if (rc) {
        log_error("%s: %s", use_mmap ? "npy_open" : "npy_read", err);
        free(err);
        return -1;
    }
    j->sum = sum_array(a.data, a.dtype, a.count);
    npy_close(&a);
    return 0;
}

static int op_read(job *j)
{
    return op_load(j, false);
}

static int op_mmap(job *j)
{
    return op_load(j, true);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Warm-up + reps runs of op; prints the result line; 0 or -1. */
static int measure(const char *name, int (*op)(job *), job *j, int reps, double expect_sum)
{
    double t[MAX_REPS + 1];
    for (int r = 0; r <= reps; r++) {
        j->sum = expect_sum;
        double t0 = now_seconds();
        if (op(j))
            return -1;
        t[r] = now_seconds() - t0;
        if (j->sum != expect_sum) {
            log_error("%s %s: checksum %.17g, expected %.17g", name, j->path, j->sum,
                      expect_sum);
            return -1;
        }
    }
    printf("# times %s %s %s:", name, j->spec->label, npy_dtype_name(j->spec->dtype));
    for (int r = 0; r <= reps; r++)
        printf(r == 0 ? " (warm-up %.6f)" : " %.6f", t[r]);
    printf("\n");
    double *m = t + 1;
    qsort(m, (size_t)reps, sizeof *m, cmp_double);
    double med = reps % 2 ? m[reps / 2] : 0.5 * (m[reps / 2 - 1] + m[reps / 2]);
    double bytes = (double)(spec_count(j->spec) * npy_dtype_size(j->spec->dtype));
    printf("npy_bench %s %s %s %.6f %.3f\n", name, j->spec->label,
           npy_dtype_name(j->spec->dtype), med, bytes / 1e9 / med);
    fflush(stdout);
    return 0;
}

/* The matrix to write: xmalloc'd, or with --thp 2 MiB-aligned and advised MADV_HUGEPAGE,
 * which is what numpy's allocator does for its arrays. Freed with free(). */
static void *alloc_source(size_t bytes, bool thp)
{
    if (!thp)
        return xmalloc(bytes ? bytes : 1);
    size_t huge = (size_t)2 << 20, len = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, len ? len : huge);
    if (!p)
        die(EXIT_RUNTIME, "out of memory allocating %zu bytes", len);
    if (len)
        (void)madvise(p, len, MADV_HUGEPAGE); /* advice only; ignored where THP is off */
    return p;
}

static int bench_one(const size_spec *s, const char *dir, int reps, bool keep, bool thp)
{
    size_t count = spec_count(s), item = npy_dtype_size(s->dtype), bytes;
    if (__builtin_mul_overflow(count, item, &bytes)) {
        log_error("size %s is too large", s->label);
        return -1;
    }
    void *data = alloc_source(bytes, thp);
    fill(data, s->dtype, count);
    double expect = sum_array(data, s->dtype, count);
    char *name = xasprintf("selfsup_%s_%s.npy", s->label, npy_dtype_name(s->dtype));
    char *path = path_join(dir, name);
    job j = {.spec = s, .path = path, .data = data};
    printf("# sum %s %s %.17g\n", s->label, npy_dtype_name(s->dtype), expect);
    int rc = measure("write_stream", op_write_stream, &j, reps, expect);
    /* Untimed: flush the dirty pages the streamed writes left, so that background writeback
     * does not run during the next measurements (the numpy side does the same). The file
     * left for the reads is then npy_write's, which run.sh compares with np.save's. */
    sync();
    if (rc == 0)
        rc = measure("write", op_write, &j, reps, expect);
    sync();
    if (rc == 0)
        rc = measure("read", op_read, &j, reps, expect);
    if (rc == 0)
        rc = measure("mmap", op_mmap, &j, reps, expect);
    if (!keep)
        unlink(path);
    free(path);
    free(name);
    free(data);
    return rc;
}

int main(int argc, char **argv)
{
    log_init("npy_bench");
    static const struct option longopts[] = {
        {"dir", required_argument, NULL, 'd'}, {"reps", required_argument, NULL, 'r'},
        {"keep", no_argument, NULL, 'k'},      {"thp", no_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},   {NULL, 0, NULL, 0},
    };
    const char *dir = NULL;
    int reps = 5;
    bool keep = false, thp = false;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': dir = optarg; break;
        case 'r': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 1 || v > MAX_REPS) {
                fprintf(stderr, "npy_bench: --reps must be an integer in 1..%d, got '%s'\n",
                        MAX_REPS, optarg);
                return EXIT_USAGE;
            }
            reps = (int)v;
            break;
        }
        case 'k': keep = true; break;
        case 't': thp = true; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("npy_bench (selfsup) %s\n", SELFSUP_VERSION); return 0;
        default:
            fprintf(stderr, "npy_bench: see --help for usage\n");
            return EXIT_USAGE;
        }
    }
    size_spec sizes[MAX_SIZES];
    int nsizes = 0;
    int nargs = argc - optind;
    if (nargs > MAX_SIZES) {
        fprintf(stderr, "npy_bench: at most %d sizes per run, got %d\n", MAX_SIZES, nargs);
        return EXIT_USAGE;
    }
    for (int i = 0; i < (nargs ? nargs : (int)(sizeof DEFAULT_SIZES / sizeof *DEFAULT_SIZES));
         i++) {
        const char *arg = nargs ? argv[optind + i] : DEFAULT_SIZES[i];
        if (parse_size(arg, &sizes[nsizes++])) {
            fprintf(stderr,
                    "npy_bench: bad size '%s': expected ROWSxCOLS[:DTYPE] or ROWS[:DTYPE] "
                    "with DTYPE one of f4 f8 i4 i8, e.g. 50000x2048:f4\n",
                    arg);
            return EXIT_USAGE;
        }
    }
    char *own_dir = NULL;
    if (!dir) {
        const char *tmp = getenv("TMPDIR");
        own_dir = xasprintf("%s/npy_bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(own_dir)) {
            fprintf(stderr, "npy_bench: cannot create a temp dir %s: %s (set TMPDIR or --dir)\n",
                    own_dir, strerror(errno));
            free(own_dir);
            return EXIT_RUNTIME;
        }
        dir = own_dir;
    } else if (!path_is_dir(dir)) {
        fprintf(stderr, "npy_bench: --dir %s is not a directory; create it first\n", dir);
        return EXIT_USAGE;
    }
    printf("# npy_bench %s: dir %s, 1 warm-up + %d reps, median; CLOCK_MONOTONIC; source "
           "matrix %s\n",
           SELFSUP_VERSION, dir, reps, thp ? "in huge pages (--thp)" : "malloc'd");
    printf("# read/mmap read files that are in the page cache (caches are not dropped; the\n"
           "# numpy side is in the same state); write includes fsync, write_stream does not\n");
    int rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++)
        rc = bench_one(&sizes[i], dir, reps, keep, thp);
    if (own_dir) {
        if (!keep)
            rmdir(own_dir);
        free(own_dir);
    }
    return rc ? EXIT_RUNTIME : 0;
}

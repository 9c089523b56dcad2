/*
 * coll_bench.c — how long an all-reduce of the shm collectives (shm/collective.h) takes,
 * beside what it should be compared with: one core's memcpy of the same buffer.
 *
 * For W processes (--world, default 2) and N fp32 values (--count, default ResNet-50's
 * 25,557,032 parameters), W forked ranks join one world and make --reps timed all-reduces
 * (sum) of their N values after one warm-up; rank 0 times each between two barriers, so the
 * time is the collective's, not the ranks' arrival. The memcpy is one process copying the same
 * N values between two buffers it has touched once. Medians; the result is checked (each value
 * must be the sum of the ranks' values, which are small integers, so the sum is exact).
 *
 * Output: "coll_bench all_reduce <world> <count> <median s> <memcpy median s>" and '#' lines.
 */
#include "collective.h"
#include "log.h"
#include "ring.h"
#include "timer.h"
#include "util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    int world, reps;
    size_t count;
} options;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double memcpy_median(const options *o)
{
    float *a = xmalloc(o->count * sizeof *a), *b = xmalloc(o->count * sizeof *b);
    memset(a, 1, o->count * sizeof *a);
    memset(b, 0, o->count * sizeof *b);
    double *t = xmalloc((size_t)o->reps * sizeof *t);
    for (int k = 0; k < o->reps; k++) {
        double t0 = now_seconds();
        memcpy(b, a, o->count * sizeof *a);
        t[k] = now_seconds() - t0;
    }
    double m = median(t, o->reps);
    printf("# memcpy of %zu fp32: %.6f s (first byte %d)\n", o->count, m, ((unsigned char *)b)[0]);
    free(a), free(b), free(t);
    return m;
}

/* One rank: join, warm up, time reps all-reduces; rank 0 writes the times into `times`. */
static int rank_main(const char *name, int rank, const options *o, double *times)
{
    coll_shm_options co = {.timeout_ms = 120000};
    char *err = NULL;
    coll *c = coll_shm_join(name, rank, o->world, &co, &err);
    if (!c) {
        fprintf(stderr, "coll_bench: rank %d: %s\n", rank, err);
        return 1;
    }
    float *buf = xmalloc(o->count * sizeof *buf);
    int rc = 0;
    for (int k = -1; rc == 0 && k < o->reps; k++) {
        for (size_t i = 0; i < o->count; i++)
            buf[i] = (float)(rank + 1);
        rc = coll_barrier(c, &err);
        double t0 = now_seconds();
        rc = rc ? rc : coll_all_reduce(c, buf, o->count, COLL_F32, COLL_SUM, &err);
        if (rank == 0 && k >= 0)
            times[k] = now_seconds() - t0;
    }
    float want = (float)(o->world * (o->world + 1) / 2);
    for (size_t i = 0; rc == 0 && i < o->count; i += 4099)
        if (buf[i] != want) {
            fprintf(stderr, "coll_bench: rank %d value %zu is %g, not %g\n", rank, i, buf[i], want);
            rc = 1;
        }
    if (rc && err)
        fprintf(stderr, "coll_bench: rank %d: %s\n", rank, err);
    coll_close(c);
    free(buf);
    return rc;
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){.world = 2, .reps = 7, .count = 25557032};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--world"))
            o->world = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--count"))
            o->count = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps"))
            o->reps = atoi(argv[i + 1]);
        else
            return -1;
    }
    bool ok = argc % 2 == 1 && o->world >= 1 && o->world <= COLL_MAX_WORLD && o->reps >= 1 && o->count >= 1;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    log_init("coll_bench");
    options o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: coll_bench [--world W] [--count N] [--reps R]\n");
        return EXIT_USAGE;
    }
    double *times = mmap(NULL, (size_t)o.reps * sizeof(double), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (times == MAP_FAILED)
        die(EXIT_RUNTIME, "coll_bench: mmap failed");
    char *name = ring_name("collbench");
    pid_t *pids = xcalloc((size_t)o.world, sizeof *pids);
    for (int r = 0; r < o.world; r++)
        if ((pids[r] = fork()) == 0)
            _exit(rank_main(name, r, &o, times));
    int failed = 0;
    for (int r = 0; r < o.world; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (failed)
        die(EXIT_RUNTIME, "coll_bench: a rank failed");
    for (int k = 0; k < o.reps; k++)
        printf("# all_reduce world %d, %zu fp32: %.6f s\n", o.world, o.count, times[k]);
    double m = median(times, o.reps);
    printf("coll_bench all_reduce %d %zu %.6f %.6f\n", o.world, o.count, m, memcpy_median(&o));
    free(pids);
    free(name);
    return 0;
}

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
 * --net: the network world (shm/coll_net.h) instead, the ranks meeting at a loopback port with
 * CURVE keys made for the run in a temporary folder, as trainers on several nodes do.
 *
 * Output: "coll_bench all_reduce <world> <count> <median s> <memcpy median s>" and '#' lines.
 */
#include "auth.h"
#include "coll_net.h"
#include "collective.h"
#include "log.h"
#include "ring.h"
#include "timer.h"
#include "util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    int world, reps;
    size_t count;
    bool net;
    char address[64]; /* --net: 127.0.0.1:PORT */
    char *keys;       /* --net: the key folder (server.key, clients, ranks.key) */
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

/* --net: a server's keys and one client key (ids world.*) for every rank in a new folder. */
static void make_keys(options *o)
{
    char tmpl[] = "/tmp/selfsup-coll-bench-XXXXXX", *err = NULL; /* mkdtemp's template */
    if (!mkdtemp(tmpl))
        die(EXIT_RUNTIME, "coll_bench: mkdtemp failed");
    o->keys = xstrdup(tmpl);
    auth_keys server, client;
    auth_allow allow = {0};
    char *files[3] = {path_join(tmpl, "server.key"), path_join(tmpl, "clients"), path_join(tmpl, "ranks.key")};
    int rc = auth_new_keys(&server, NULL, &err);
    rc = rc ? rc : auth_new_keys(&client, server.public_key, &err);
    rc = rc ? rc : auth_allow_add(&allow, client.public_key, "world.*", "ranks", &err);
    rc = rc ? rc : auth_write_keys(files[0], &server, &err);
    rc = rc ? rc : auth_write_allow(files[1], &allow, &err);
    rc = rc ? rc : auth_write_keys(files[2], &client, &err);
    if (rc)
        die(EXIT_RUNTIME, "coll_bench: keys: %s", err);
    auth_allow_free(&allow);
    for (int i = 0; i < 3; i++)
        free(files[i]);
}

/* This rank's world: the shm segment `name`, or with --net the loopback port. */
static coll *join(const char *name, int rank, const options *o, char **err)
{
    if (!o->net) {
        coll_shm_options co = {.timeout_ms = 120000};
        return coll_shm_join(name, rank, o->world, &co, err);
    }
    char *dir = xstrdup(o->keys), *file = path_join(o->keys, "ranks.key");
    coll_net_options no = {.timeout_ms = 120000, .keys_dir = dir, .key_file = file};
    coll *c = coll_net_join(o->address, rank, o->world, &no, err);
    free(dir), free(file);
    return c;
}

/* One rank: join, warm up, time reps all-reduces; rank 0 writes the times into `times`. */
static int rank_main(const char *name, int rank, const options *o, double *times)
{
    char *err = NULL;
    coll *c = join(name, rank, o, &err);
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

/* A loopback TCP port that was free a moment ago. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &n) != 0)
        die(EXIT_RUNTIME, "coll_bench: no free port");
    close(fd);
    return ntohs(a.sin_port);
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){.world = 2, .reps = 7, .count = 25557032};
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--net")) {
            o->net = true;
            i--;
        } else if (i + 1 >= argc)
            return -1;
        else if (!strcmp(argv[i], "--world"))
            o->world = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--count"))
            o->count = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps"))
            o->reps = atoi(argv[i + 1]);
        else
            return -1;
    }
    bool ok = o->world >= 1 && o->world <= COLL_MAX_WORLD && o->reps >= 1 && o->count >= 1;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    log_init("coll_bench");
    options o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: coll_bench [--world W] [--count N] [--reps R] [--net]\n");
        return EXIT_USAGE;
    }
    if (o.net) {
        make_keys(&o);
        snprintf(o.address, sizeof o.address, "127.0.0.1:%d", free_port());
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
    if (o.keys) {
        char *rm = xasprintf("rm -rf '%s'", o.keys);
        if (system(rm) != 0)
            fprintf(stderr, "coll_bench: could not remove %s\n", o.keys);
        free(rm), free(o.keys);
    }
    free(pids);
    free(name);
    return 0;
}

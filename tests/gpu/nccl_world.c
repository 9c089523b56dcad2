/*
 * nccl_world.c — `build/tests/nccl-world`: the NCCL world (nn/cuda/coll_nccl.h) against the
 * definitions of the collectives, one process per GPU.
 *
 * Anywhere: a world id is made (NCCL needs no GPU for that) and a malformed one is refused with
 * a message; and the hand-off of several nodes (coll_nccl_join_via): two ranks in a shm world,
 * rank 0 makes the id and broadcasts it, and each rank's join then fails only where a GPU is
 * missing, not at the id. With GPUs (the GPU runbook): one rank per GPU, up to 4, each on its own GPU,
 * checks every call on host memory (staged through the device) and on device memory:
 * all-reduce (sum, mean and max in fp32; sum in bf16 and fp64), all-gather, broadcast from the
 * last rank, barrier; and an all-reduce queued behind another stream's work (DDP's buckets).
 * The values are small integers and halves, exact in every dtype and in any
 * order of summation, so each rank's result must equal the definition bit for bit; then the
 * same world joined through the hand-off, and one all-reduce in it. With one GPU
 * the world is of one rank: the calls' paths are exercised, the sums are the identity.
 * Without CUDA or without a GPU it says so in one line and exits 0, as backend-ops does.
 */
#include "util.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !HAVE_CUDA
int main(void)
{
    puts("nccl-world: this build has no CUDA: nothing to check");
    return 0;
}
#else
#include "cuda/coll_nccl.h"
#include "ring.h"

#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 1031 /* values per rank: a prime, larger than a warp's multiple */
#define MAX_RANKS 4

/* Rank r's value i: an integer or a half, so every sum is exact in every dtype. */
static double value(int r, int i) { return (double)((r * 7 + i) % 13) - 6.0 + (i % 2) * 0.5; }

static int failures;

static void expect(bool ok, int rank, const char *what, int i, double got, double want)
{
    if (!ok && failures++ < 10)
        fprintf(stderr, "nccl-world rank %d: %s[%d] is %g, not %g\n", rank, what, i, got, want);
}

/* A host buffer through the device and back (device = true), or as it is. */
static void *on(bool device, void *host, size_t bytes)
{
    if (!device)
        return host;
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "nccl-world: cannot copy %zu bytes to the GPU\n", bytes);
        exit(1);
    }
    return d;
}

static void back(bool device, void *host, void *d, size_t bytes)
{
    if (device) {
        cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost);
        cudaFree(d);
    }
}

static int reduce(coll *c, bool device, void *buf, size_t count, coll_dtype t, coll_op op, char **err)
{
    return device ? coll_all_reduce_device(c, buf, count, t, op, err) : coll_all_reduce(c, buf, count, t, op, err);
}

/* fp32 all-reduce with op, checked against its definition over the world. */
static void check_f32(coll *c, int rank, int world, bool device, coll_op op)
{
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)value(rank, i);
    void *d = on(device, x, sizeof x);
    char *err = NULL;
    if (reduce(c, device, d, N, COLL_F32, op, &err) != 0) {
        fprintf(stderr, "nccl-world rank %d: %s\n", rank, err);
        exit(1);
    }
    back(device, x, d, sizeof x);
    for (int i = 0; i < N; i++) {
        double want = op == COLL_MAX ? -1e9 : 0;
        for (int r = 0; r < world; r++)
            want = op == COLL_MAX ? (value(r, i) > want ? value(r, i) : want) : want + value(r, i);
        if (op == COLL_MEAN) /* NCCL's average: the sum times 1/W, in fp32 */
            want = (float)((float)want * (1.0f / (float)world));
        expect(x[i] == (float)want, rank, op == COLL_MAX ? "max" : op == COLL_MEAN ? "mean" : "sum", i, x[i], want);
    }
}

/* bf16 and fp64 sums. */
static void check_other_types(coll *c, int rank, int world, bool device)
{
    uint16_t h[N];
    double v[N];
    for (int i = 0; i < N; i++)
        h[i] = coll_f32_to_bf16((float)value(rank, i)), v[i] = value(rank, i);
    void *dh = on(device, h, sizeof h), *dv = on(device, v, sizeof v);
    char *err = NULL;
    if (reduce(c, device, dh, N, COLL_BF16, COLL_SUM, &err) || reduce(c, device, dv, N, COLL_F64, COLL_SUM, &err)) {
        fprintf(stderr, "nccl-world rank %d: %s\n", rank, err);
        exit(1);
    }
    back(device, h, dh, sizeof h), back(device, v, dv, sizeof v);
    for (int i = 0; i < N; i++) {
        double want = 0;
        for (int r = 0; r < world; r++)
            want += value(r, i);
        expect(coll_bf16_to_f32(h[i]) == (float)want, rank, "bf16 sum", i, coll_bf16_to_f32(h[i]), want);
        expect(v[i] == want, rank, "fp64 sum", i, v[i], want);
    }
}

/* All-gather, then a broadcast from the last rank, then a barrier. */
static void check_gather_broadcast(coll *c, int rank, int world, bool device)
{
    float mine[N], all[MAX_RANKS * N];
    for (int i = 0; i < N; i++)
        mine[i] = (float)value(rank, i);
    void *ds = on(device, mine, sizeof mine), *da = on(device, all, sizeof all);
    char *err = NULL;
    int rc = device ? coll_all_gather_device(c, ds, da, N, COLL_F32, &err) : coll_all_gather(c, ds, da, N, COLL_F32, &err);
    back(device, all, da, sizeof all), back(device, mine, ds, sizeof mine);
    for (int r = 0; rc == 0 && r < world; r++)
        for (int i = 0; i < N; i++)
            expect(all[r * N + i] == (float)value(r, i), rank, "all-gather", r * N + i, all[r * N + i], value(r, i));
    void *db = on(device, mine, sizeof mine);
    rc = rc ? rc : device ? coll_broadcast_device(c, db, N, COLL_F32, world - 1, &err)
                          : coll_broadcast(c, db, N, COLL_F32, world - 1, &err);
    back(device, mine, db, sizeof mine);
    for (int i = 0; rc == 0 && i < N; i++)
        expect(mine[i] == (float)value(world - 1, i), rank, "broadcast", i, mine[i], value(world - 1, i));
    rc = rc ? rc : coll_barrier(c, &err);
    if (rc) {
        fprintf(stderr, "nccl-world rank %d: %s\n", rank, err);
        exit(1);
    }
}

/* DDP's bucketed path: an all-reduce queued after the work on the caller's own stream (which
 * fills the buffer, so the all-reduce must wait for it), joined back onto that stream (which
 * reads the sums after it), with a host call of the world after it (which must wait for it). */
static void check_queued(coll *c, int rank, int world)
{
    float x[N], one = 1.0f;
    for (int i = 0; i < N; i++)
        x[i] = (float)value(rank, i);
    cudaStream_t s;
    void *d = NULL;
    char *err = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&d, sizeof x) != cudaSuccess ||
        cudaMemsetAsync(d, 0xff, sizeof x, s) != cudaSuccess || /* NaNs, should the all-reduce not wait */
        cudaMemcpyAsync(d, x, sizeof x, cudaMemcpyHostToDevice, s) != cudaSuccess) {
        fprintf(stderr, "nccl-world rank %d: cannot queue the buffer's fill\n", rank);
        exit(1);
    }
    if (!coll_queues_device(c) || coll_all_reduce_device_queued(c, d, N, COLL_F32, COLL_SUM, s, &err) != 0 ||
        coll_device_join(c, s, &err) != 0 || coll_all_reduce(c, &one, 1, COLL_F32, COLL_SUM, &err) != 0) {
        fprintf(stderr, "nccl-world rank %d: queued all-reduce: %s\n", rank, err ? err : "the world cannot queue");
        exit(1);
    }
    cudaMemcpyAsync(x, d, sizeof x, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    for (int i = 0; i < N; i++) {
        double want = 0;
        for (int r = 0; r < world; r++)
            want += value(r, i);
        expect(x[i] == (float)want, rank, "queued sum", i, x[i], want);
    }
    expect(one == (float)world, rank, "host sum after a queued one", 0, one, world);
    cudaFree(d);
    cudaStreamDestroy(s);
}

/* The NCCL world of `world` ranks through the hand-off: a shm world `bootstrap` first. */
static coll *join_via(const char *bootstrap, int rank, int world, int device, char **err)
{
    coll_shm_options o = {.timeout_ms = 60000};
    coll *boot = coll_shm_join(bootstrap, rank, world, &o, err);
    return boot ? coll_nccl_join_via(boot, device, err) : NULL; /* it takes boot */
}

static int rank_main(const char *hex, const char *bootstrap, int rank, int world)
{
    char *err = NULL;
    coll *c = coll_nccl_join(hex, rank, world, rank, &err);
    if (!c) {
        fprintf(stderr, "nccl-world rank %d: %s\n", rank, err);
        return 1;
    }
    for (int device = 0; device < 2; device++) {
        check_f32(c, rank, world, device, COLL_SUM);
        check_f32(c, rank, world, device, COLL_MEAN);
        check_f32(c, rank, world, device, COLL_MAX);
        check_other_types(c, rank, world, device);
        check_gather_broadcast(c, rank, world, device);
    }
    check_queued(c, rank, world);
    coll_close(c);
    if (!(c = join_via(bootstrap, rank, world, rank, &err))) {
        fprintf(stderr, "nccl-world rank %d, through the hand-off: %s\n", rank, err);
        return 1;
    }
    check_f32(c, rank, world, true, COLL_SUM);
    coll_finish(c); /* coll_close would be a loss to the ranks still watching */
    return failures ? 1 : 0;
}

/* Without a GPU: each of two ranks gets rank 0's id whole, and fails at the GPU. */
static int handoff_rank(const char *bootstrap, int rank)
{
    char *err = NULL;
    coll *c = join_via(bootstrap, rank, 2, 0, &err);
    if (c || !err || strstr(err, "hex digits") || strstr(err, "could not make") || strstr(err, "collectives")) {
        fprintf(stderr, "nccl-world hand-off, rank %d: %s\n", rank, c ? "joined without a GPU" : err ? err : "?");
        return 1;
    }
    free(err);
    return 0;
}

static int check_handoff_without_gpu(void)
{
    char *name = ring_name("nccl-boot");
    int bad = 0;
    fflush(NULL);
    pid_t pids[2];
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0)
            _exit(handoff_rank(name, r));
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    free(name);
    return bad;
}

/* What needs no GPU: an id, and a malformed one refused with a message. */
static int check_ids(char *hex)
{
    char *err = NULL, other[COLL_NCCL_ID_HEX + 1];
    if (coll_nccl_unique_id(hex, &err) != 0 || coll_nccl_unique_id(other, &err) != 0) {
        fprintf(stderr, "nccl-world: %s\n", err);
        return 1;
    }
    if (strlen(hex) != COLL_NCCL_ID_HEX || !strcmp(hex, other)) {
        fprintf(stderr, "nccl-world: ids of %zu hex digits, %s\n", strlen(hex), strcmp(hex, other) ? "distinct" : "equal");
        return 1;
    }
    coll *c = coll_nccl_join("12ab", 0, 1, 0, &err);
    if (c || !err || !strstr(err, "hex digits")) {
        fprintf(stderr, "nccl-world: a 4-digit id was %s\n", c ? "accepted" : err ? err : "refused without a message");
        return 1;
    }
    free(err);
    return 0;
}

/* The GPUs, counted in a child: CUDA cannot be used in a child forked after the parent
 * initialised it, and the ranks are such children. */
static int count_gpus(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess ? (n < 100 ? n : 100) : 0);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

/* The forks come before this process makes an id: making one starts NCCL's threads, and a child
 * forked from a threaded parent cannot start its own under ThreadSanitizer (CI runs this there). */
int main(void)
{
    char hex[COLL_NCCL_ID_HEX + 1];
    int gpus = count_gpus();
    if (gpus == 0 && check_handoff_without_gpu() != 0)
        return 1;
    if (check_ids(hex) != 0)
        return 1;
    if (gpus == 0) {
        puts("nccl-world: no GPU here: a world id made, a malformed one refused, rank 0's id handed to 2 ranks "
             "whole; the collectives need a GPU");
        return 0;
    }
    int world = gpus < MAX_RANKS ? gpus : MAX_RANKS, bad = 0;
    char *bootstrap = ring_name("nccl-boot");
    fflush(NULL);
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < world; r++)
        if ((pids[r] = fork()) == 0)
            _exit(rank_main(hex, bootstrap, r, world));
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    free(bootstrap);
    printf("nccl-world: %d rank(s), one per GPU: %s\n", world,
           bad ? "FAILED (above)" : "every collective, on host and device memory, as defined; joined through the "
                                    "hand-off too");
    return bad;
}
#endif

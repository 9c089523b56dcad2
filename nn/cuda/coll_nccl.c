/*
 * coll_nccl.c — shm/collective.h's interface on NCCL (see coll_nccl.h).
 *
 * State: the communicator, a stream of the world's own (the trainer's kernels run on the
 * backend's stream; a device call follows eng_device_address, which has waited for them), and a
 * device staging buffer for the host calls, grown to the largest one. Each call queues its NCCL
 * operation and waits for the stream: the collectives are synchronous, as the shm world's are.
 * The exception is DDP's bucketed gradient all-reduce (coll_all_reduce_device_queued): the world's
 * stream waits, through an event, for the work the trainer has queued on its own stream so far,
 * and the all-reduce is queued without waiting, so it runs while the backward goes on; a join
 * makes the trainer's stream wait for the world's (another event) before the optimizer reads
 * the gradients. Everything goes through the one stream in the order it was called, as torch's
 * ProcessGroupNCCL does, so the ranks' NCCL calls match even with SyncBN's in between.
 *
 * A world joined through a bootstrap world keeps it, watched (shm/coll_watch.h): a rank lost
 * there ends this process, since NCCL's kernels and every wait behind them would hang for
 * good. coll_finish says FINISHED in the bootstrap world, so the last ranks to finish do not
 * take the first ones' leaving for a loss.
 */
#include "cuda/coll_nccl.h"

#include "coll_watch.h"
#include "log.h"
#include "util.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WATCH_INTERVAL_MS 500

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t queued, done; /* the caller's work so far (a queued all-reduce waits for it); the world's */
    void *staging;
    size_t staging_bytes;
    int rank, world;
    coll *bootstrap;    /* the world the id came through, or NULL */
    coll_watch *watch;  /* on bootstrap */
} nccl_world;

static int nccl_failed(ncclResult_t r, const char *what, char **err)
{
    return report_failure(err, "NCCL %s: %s", what, ncclGetErrorString(r));
}

static int cuda_failed(cudaError_t e, const char *what, char **err)
{
    return report_failure(err, "NCCL world: %s: %s", what, cudaGetErrorString(e));
}

static ncclDataType_t nccl_type(coll_dtype d)
{
    return d == COLL_BF16 ? ncclBfloat16 : d == COLL_F64 ? ncclFloat64 : ncclFloat32;
}

static ncclRedOp_t nccl_op(coll_op op) { return op == COLL_MAX ? ncclMax : op == COLL_MEAN ? ncclAvg : ncclSum; }

/* The operation queued (r), then the stream waited for. */
static int finish(nccl_world *w, ncclResult_t r, const char *what, char **err)
{
    if (r != ncclSuccess)
        return nccl_failed(r, what, err);
    cudaError_t e = cudaStreamSynchronize(w->stream);
    return e == cudaSuccess ? 0 : cuda_failed(e, what, err);
}

/* The staging buffer, at least `bytes` long. */
static void *staging(nccl_world *w, size_t bytes, char **err)
{
    if (bytes <= w->staging_bytes)
        return w->staging;
    cudaFree(w->staging);
    w->staging = NULL, w->staging_bytes = 0;
    cudaError_t e = cudaMalloc(&w->staging, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cuda_failed(e, "the host calls' device buffer", err);
        return NULL;
    }
    w->staging_bytes = bytes;
    return w->staging;
}

static int copy(nccl_world *w, void *to, const void *from, size_t bytes, enum cudaMemcpyKind kind, char **err)
{
    cudaError_t e = cudaMemcpyAsync(to, from, bytes, kind, w->stream);
    return e == cudaSuccess ? 0 : cuda_failed(e, "a copy between the host and the device", err);
}

/* The device's bytes back into host memory, waited for. */
static int to_host(nccl_world *w, void *host, const void *dev, size_t bytes, char **err)
{
    if (copy(w, host, dev, bytes, cudaMemcpyDeviceToHost, err) != 0)
        return -1;
    cudaError_t e = cudaStreamSynchronize(w->stream);
    return e == cudaSuccess ? 0 : cuda_failed(e, "a copy to the host", err);
}

/* The device buffer an in-place call works on: buf itself on device memory, else the staging
 * buffer holding a copy of the host's `bytes`. NULL with *err. */
static void *in_place(nccl_world *w, void *buf, size_t bytes, bool device, char **err)
{
    if (device)
        return buf;
    void *dev = staging(w, bytes, err);
    return dev && copy(w, dev, buf, bytes, cudaMemcpyHostToDevice, err) == 0 ? dev : NULL;
}

static int all_reduce(void *state, void *buf, size_t count, coll_dtype dtype, coll_op op, bool device, char **err)
{
    nccl_world *w = state;
    size_t bytes = count * coll_dtype_bytes(dtype);
    void *dev = in_place(w, buf, bytes, device, err);
    if (!dev)
        return -1;
    if (finish(w, ncclAllReduce(dev, dev, count, nccl_type(dtype), nccl_op(op), w->comm, w->stream), "all-reduce",
               err) != 0)
        return -1;
    return device ? 0 : to_host(w, buf, dev, bytes, err);
}

static int all_gather(void *state, const void *send, void *recv, size_t count, coll_dtype dtype, bool device,
                      char **err)
{
    nccl_world *w = state;
    size_t bytes = count * coll_dtype_bytes(dtype), all = bytes * (size_t)w->world;
    void *dev = device ? recv : staging(w, all, err);
    if (!dev)
        return -1;
    const void *from = device ? send : (char *)dev + bytes * (size_t)w->rank; /* in place: NCCL allows it */
    if (!device && copy(w, (void *)from, send, bytes, cudaMemcpyHostToDevice, err) != 0)
        return -1;
    if (finish(w, ncclAllGather(from, dev, count, nccl_type(dtype), w->comm, w->stream), "all-gather", err) != 0)
        return -1;
    return device ? 0 : to_host(w, recv, dev, all, err);
}

static int broadcast(void *state, void *buf, size_t count, coll_dtype dtype, int root, bool device, char **err)
{
    nccl_world *w = state;
    size_t bytes = count * coll_dtype_bytes(dtype);
    void *dev = in_place(w, buf, bytes, device, err);
    if (!dev)
        return -1;
    if (finish(w, ncclBroadcast(dev, dev, count, nccl_type(dtype), root, w->comm, w->stream), "broadcast", err) != 0)
        return -1;
    return device ? 0 : to_host(w, buf, dev, bytes, err);
}

static int all_reduce_queued(void *state, void *dev, size_t count, coll_dtype dtype, coll_op op, void *queue,
                             char **err)
{
    nccl_world *w = state;
    cudaError_t e = cudaEventRecord(w->queued, (cudaStream_t)queue);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(w->stream, w->queued, 0);
    if (e != cudaSuccess)
        return cuda_failed(e, "waiting for the gradients' backward", err);
    ncclResult_t r = ncclAllReduce(dev, dev, count, nccl_type(dtype), nccl_op(op), w->comm, w->stream);
    return r == ncclSuccess ? 0 : nccl_failed(r, "all-reduce (queued)", err);
}

static int join(void *state, void *queue, char **err)
{
    nccl_world *w = state;
    cudaError_t e = cudaEventRecord(w->done, w->stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent((cudaStream_t)queue, w->done, 0);
    return e == cudaSuccess ? 0 : cuda_failed(e, "waiting for the queued collectives", err);
}

static int barrier(void *state, char **err)
{
    float one = 1.0f;
    return all_reduce(state, &one, 1, COLL_F32, COLL_SUM, false, err);
}

/* Leaving: the bootstrap world no longer watched, then left as `leave` does. */
static void leave_bootstrap(nccl_world *w, void (*leave)(coll *))
{
    coll_watch_stop(w->watch);
    w->watch = NULL;
    if (w->bootstrap)
        leave(w->bootstrap);
    w->bootstrap = NULL;
}

static void close_world(void *state)
{
    nccl_world *w = state;
    leave_bootstrap(w, coll_close);
    if (w->comm)
        ncclCommDestroy(w->comm);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    if (w->queued)
        cudaEventDestroy(w->queued);
    if (w->done)
        cudaEventDestroy(w->done);
    cudaFree(w->staging);
    free(w);
}

static void finish_world(void *state)
{
    leave_bootstrap(state, coll_finish);
    close_world(state);
}

static const coll_impl NCCL_IMPL = {.takes_device = true,
                                    .all_reduce = all_reduce,
                                    .all_gather = all_gather,
                                    .broadcast = broadcast,
                                    .barrier = barrier,
                                    .all_reduce_queued = all_reduce_queued,
                                    .join = join,
                                    .finish = finish_world,
                                    .close = close_world};

int coll_nccl_unique_id(char *hex, char **err)
{
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return nccl_failed(r, "cannot make a world id", err);
    for (size_t i = 0; i < sizeof id.internal; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    return 0;
}

/* The id back from its hex form; false for anything else. */
static bool parse_id(const char *hex, ncclUniqueId *id)
{
    if (strlen(hex) != 2 * sizeof id->internal)
        return false;
    for (size_t i = 0; i < sizeof id->internal; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return false;
        id->internal[i] = (char)v;
    }
    return true;
}

/* The world of `hex` as a nccl_world (coll_nccl_join's work), or NULL with *err. */
static nccl_world *join_world(const char *hex, int rank, int world, int device, char **err)
{
    ncclUniqueId id;
    if (!parse_id(hex, &id)) {
        report_failure(err, "NCCL world id: '%.16s…' is not the %d hex digits selfsup run hands out", hex,
                       COLL_NCCL_ID_HEX);
        return NULL;
    }
    if (rank < 0 || rank >= world || world > COLL_MAX_WORLD) {
        report_failure(err, "NCCL world: rank %d of a world of %d", rank, world);
        return NULL;
    }
    nccl_world *w = xcalloc(1, sizeof *w);
    w->rank = rank, w->world = world;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&w->queued, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming);
    ncclResult_t r = e == cudaSuccess ? ncclCommInitRank(&w->comm, world, id, rank) : ncclSuccess;
    if (e != cudaSuccess || r != ncclSuccess) {
        if (e != cudaSuccess)
            cuda_failed(e, "GPU of this rank", err);
        else
            nccl_failed(r, "cannot join the world", err);
        close_world(w);
        return NULL;
    }
    return w;
}

static coll *as_coll(nccl_world *w, int device)
{
    char name[48];
    snprintf(name, sizeof name, "nccl (GPU %d)", device);
    return coll_from_impl(name, w->rank, w->world, &NCCL_IMPL, w);
}

coll *coll_nccl_join(const char *hex, int rank, int world, int device, char **err)
{
    nccl_world *w = join_world(hex, rank, world, device, err);
    return w ? as_coll(w, device) : NULL;
}

/* A rank lost in the bootstrap world: NCCL would wait for it for good, and so would this
 * process, so it ends here; its orchestrator then stops its node's run. */
static void end_for_lost_rank(const char *why, void *arg)
{
    nccl_world *w = arg;
    log_error("NCCL world, rank %d: %s; NCCL would wait for that rank for good, so this process ends", w->rank,
              why);
    _exit(EXIT_RUNTIME);
}

/* The id as bytes a host world broadcasts: the hex digits, NUL-padded to whole fp32 values
 * (the broadcast copies them, it computes nothing); "" when rank 0 could not make one. */
typedef union {
    char hex[COLL_NCCL_ID_HEX + 4];
    float words[(COLL_NCCL_ID_HEX + 4) / 4];
} id_words;

/* Rank 0's id, broadcast in the bootstrap world into id->hex: 0, or -1 with *err. */
static int hand_out_id(coll *bootstrap, id_words *id, char **err)
{
    char *why = NULL;
    if (coll_rank(bootstrap) == 0 && coll_nccl_unique_id(id->hex, &why) != 0)
        id->hex[0] = 0;
    int rc = coll_broadcast(bootstrap, id->words, sizeof id->words / sizeof *id->words, COLL_F32, 0, err);
    if (rc == 0 && !id->hex[0])
        rc = report_failure(err, "NCCL world: rank 0 could not make the world's id%s%s", why ? ": " : "",
                            why ? why : "");
    free(why);
    return rc;
}

coll *coll_nccl_join_via(coll *bootstrap, int device, char **err)
{
    id_words id = {{0}};
    nccl_world *w = NULL;
    if (hand_out_id(bootstrap, &id, err) == 0)
        w = join_world(id.hex, coll_rank(bootstrap), coll_world(bootstrap), device, err);
    if (!w) {
        coll_close(bootstrap);
        return NULL;
    }
    w->bootstrap = bootstrap;
    if (!(w->watch = coll_watch_start(bootstrap, WATCH_INTERVAL_MS, "NCCL's collectives", end_for_lost_rank, w, err))) {
        close_world(w);
        return NULL;
    }
    return as_coll(w, device);
}

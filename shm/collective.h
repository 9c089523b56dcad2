/*
 * collective.h — the collectives that make several trainers one model: all-reduce, all-gather,
 * broadcast and barrier among the WORLD processes of a run, each knowing its RANK.
 *
 * What VISSL gets from torch.distributed (gloo on CPUs, NCCL on GPUs), selfsup gets here: the
 * trainer averages gradients and broadcasts rank 0's initial weights, the losses gather
 * embeddings (SimCLR) and sum Sinkhorn's marginals (SwAV), SyncBN sums its statistics and the
 * meters and the logged loss are reduced. Every call is collective: each rank makes the same
 * calls in the same order with the same counts, or every rank gets an error naming the ones
 * that differ (never a hang).
 *
 * Results do not depend on timing: a reduction combines the ranks' values in rank order,
 * ((x0 + x1) + x2) + …, whatever order the ranks arrive in, so every rank gets the same bits
 * and a rerun gets them again. bf16 values are summed in fp32 in that order and rounded to
 * bf16 (to nearest even) once; fp64 (SwAV's Sinkhorn sums, which run in double) in double. MEAN is the sum
 * divided by the world size, as VISSL's all_reduce_mean divides; MAX propagates NaN.
 *
 * Failure: a rank that dies, or that does not reach a collective within timeout_ms, fails the
 * collective on every rank with a message naming it, and the world is then broken: every later
 * call fails at once with the same message.
 *
 * The `shm` implementation (processes on one machine, gloo's role) works through one POSIX
 * shared-memory segment; see collective.c for its layout and algorithm. Another kind of world
 * (NCCL, one process per GPU: nn/cuda/coll_nccl.h) comes in through coll_from_impl and keeps
 * its own promises, which its header states (NCCL sums in its own order, not in rank order).
 */
#ifndef SELFSUP_COLLECTIVE_H
#define SELFSUP_COLLECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COLL_MAX_WORLD 64

typedef enum { COLL_F32, COLL_BF16, COLL_F64 } coll_dtype;
typedef enum { COLL_SUM, COLL_MEAN, COLL_MAX } coll_op;

typedef struct coll coll;

typedef struct {
    int timeout_ms;    /* how long a rank waits for the others, at joining and in every call */
    size_t slot_bytes; /* each rank's share of the segment per step (0: 1 MiB, the fastest here); larger
                          buffers go through in pieces of this size */
} coll_shm_options;

/* Join the world of `world` ranks meeting at the segment `name` (a ring_name: "selfsup.<pid>.
 * <label>") as `rank`. Rank 0 creates the segment; the others wait for it. Returns once every
 * rank has joined (the segment's name is then unlinked: nothing is left in /dev/shm whatever
 * happens next), or NULL with *err after timeout_ms. */
coll *coll_shm_join(const char *name, int rank, int world, const coll_shm_options *o, char **err);
/* Leave; safe on NULL. The other ranks may still be in a call: theirs fails, naming this rank. */
void coll_close(coll *c);
/* Leave after this rank's last call, the run done: as coll_close, but a rank watching the world
 * (coll_check_peers, coll_watch.h) is told this rank finished, not that it was lost. */
void coll_finish(coll *c);
/* Whether the other ranks are all still there, without waiting: 0, or -1 with *err naming one
 * that died, vanished or closed without finishing (the world is then broken, as a call would
 * find it). For a world that makes no more calls, only watched (a bootstrap world beside NCCL's,
 * coll_watch.h); `what` says what the watcher waits for, in the message. A world that cannot
 * tell says 0. */
int coll_check_peers(coll *c, const char *what, char **err);

int coll_rank(const coll *c);
int coll_world(const coll *c);

/* buf (count values) becomes the reduction of every rank's buf. Returns 0, or -1 with *err. */
int coll_all_reduce(coll *c, void *buf, size_t count, coll_dtype dtype, coll_op op, char **err);
/* recv (world × count values) becomes every rank's send, in rank order. */
int coll_all_gather(coll *c, const void *send, void *recv, size_t count, coll_dtype dtype, char **err);
/* buf (count values) becomes root's buf on every rank. */
int coll_broadcast(coll *c, void *buf, size_t count, coll_dtype dtype, int root, char **err);
/* Returns once every rank has called it. */
int coll_barrier(coll *c, char **err);

/* ---- worlds of device memory --------------------------------------------------------------- */

/* Whether the *_device calls may be used: the world moves GPU memory itself (NCCL). The calls
 * above still take host memory in every world. */
bool coll_takes_device(const coll *c);
/* The calls above on device pointers of this process's GPU (the world's device), in place; the
 * caller's queued work on them has finished (eng_device_address waits for it). 0, or -1 with
 * *err (also on a world of host memory: a programming error). */
int coll_all_reduce_device(coll *c, void *dev, size_t count, coll_dtype dtype, coll_op op, char **err);
int coll_all_gather_device(coll *c, const void *send, void *recv, size_t count, coll_dtype dtype, char **err);
int coll_broadcast_device(coll *c, void *dev, size_t count, coll_dtype dtype, int root, char **err);
/* Queued rather than waited for (DDP's bucketed gradient all-reduce): the in-place all-reduce
 * of dev runs on the world's own queue after the work queued so far on the caller's `queue`
 * (a cudaStream_t: eng_device_address_queued) and overlaps what the caller queues next;
 * coll_device_join makes what the caller queues next on `queue` wait for every collective
 * queued on the world. The world's other calls run after the queued ones. 0, or -1 with *err
 * (also on a world that cannot queue: coll_queues_device). */
bool coll_queues_device(const coll *c);
int coll_all_reduce_device_queued(coll *c, void *dev, size_t count, coll_dtype dtype, coll_op op, void *queue,
                                  char **err);
int coll_device_join(coll *c, void *queue, char **err);

/* Another kind of world: each call of the interface on `state`, `device` saying whether the
 * pointers are device memory. */
typedef struct {
    bool takes_device;
    int (*all_reduce)(void *state, void *buf, size_t count, coll_dtype dtype, coll_op op, bool device, char **err);
    int (*all_gather)(void *state, const void *send, void *recv, size_t count, coll_dtype dtype, bool device,
                      char **err);
    int (*broadcast)(void *state, void *buf, size_t count, coll_dtype dtype, int root, bool device, char **err);
    int (*barrier)(void *state, char **err);
    /* Optional (coll_queues_device): as coll_all_reduce_device_queued and coll_device_join. */
    int (*all_reduce_queued)(void *state, void *dev, size_t count, coll_dtype dtype, coll_op op, void *queue,
                             char **err);
    int (*join)(void *state, void *queue, char **err);
    /* Optional: as coll_check_peers (absent: 0), and as coll_finish (absent: close). */
    int (*check_peers)(void *state, const char *what, char **err);
    void (*finish)(void *state);
    void (*close)(void *state);
} coll_impl;
/* A world of that kind, named `name` in messages; coll_close closes `state` through impl. */
coll *coll_from_impl(const char *name, int rank, int world, const coll_impl *impl, void *state);

/* The bytes of one value. */
size_t coll_dtype_bytes(coll_dtype dtype);
/* bf16 <-> fp32 as torch converts: widening is exact, narrowing rounds to nearest even (NaN
 * stays NaN). */
float coll_bf16_to_f32(uint16_t v);
uint16_t coll_f32_to_bf16(float f);

#endif

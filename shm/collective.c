/*
 * collective.c — the `shm` collectives: the ranks of one machine meet in a shared segment.
 *
 * Layout of the segment (/dev/shm/NAME while the ranks join, unlinked once all have):
 *
 *   coll_shared   the world's size and slot size, the barrier (an arrival count and a
 *                 generation word the waiters sleep on), the broken flag and its message, and
 *                 one entry per rank: pid and start time (proc.h), barriers entered, and the
 *                 call it is making (by the parity of its call number)
 *   data          2 sets × WORLD slots of slot_bytes: set s, slot r is rank r's share
 *
 * A buffer larger than a slot goes through in steps of one slot's worth; step k uses set k % 2,
 * so a rank may write the next step's set while slower ranks still read this one. Per step:
 *
 *   all-reduce   the piece is cut into W shares of whole cache lines; rank r owns share r.
 *                Each rank copies the shares it does not own into its slot; barrier; rank r
 *                combines share r over the ranks in rank order (the others' values from their
 *                slots, its own from its buffer) into its own slot and its buffer; barrier;
 *                each rank copies the others' results from their slots. (A reduce-scatter,
 *                then an all-gather, with no copy of what only its owner reads.)
 *   all-gather   each rank copies its piece into its slot; barrier; each copies all slots out.
 *   broadcast    the root copies its piece into slot 0; barrier; the others copy it out.
 *
 * Why the set alternation is enough: step k+2 overwrites step k's set, and a rank reaches it
 * only past a barrier of step k+1, which every rank enters only after reading step k.
 *
 * The call check: each rank writes what it is calling (op, dtype, count, root, call number)
 * before its first barrier of the call and compares the others' after it; a fast rank can be at
 * most one call ahead, so two entries per rank (by call parity) keep the compared one intact.
 *
 * Waiting: spin briefly where every rank has a core, then sleep on the generation word (a
 * futex), waking every CHECK_MS to see whether the world broke, a rank died (proc_gone) or
 * timeout_ms passed; each of those breaks the world with a message every rank returns.
 */
#include "collective.h"

#include "coll_internal.h"
#include "proc.h"
#include "timer.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define COLL_MAGIC 0x4c4c4f4353505553ULL /* "SUPSCOLL" */
#define CHECK_MS 100
#define LEFT_CLOSED 1u
#define LEFT_FINISHED 2u
#define DEFAULT_SLOT_BYTES ((size_t)1 << 20)
#define SPIN_ROUNDS 4000
#define LINE_VALUES 16 /* a partition of a reduction starts on a 64-byte line (fp32) */

typedef struct {
    alignas(64) _Atomic int32_t pid; /* 0: not joined */
    _Atomic uint32_t left;           /* it called coll_close (LEFT_CLOSED) or coll_finish (LEFT_FINISHED) */
    _Atomic uint64_t start_time;
    _Atomic uint64_t barriers; /* barriers it has entered */
    call_desc calls[2];        /* by the parity of the call number */
} rank_entry;

typedef struct {
    _Atomic uint64_t magic; /* set last by rank 0 */
    uint32_t world;
    uint64_t slot_bytes;
    alignas(64) _Atomic uint32_t arrived;
    alignas(64) _Atomic uint32_t generation; /* the futex word */
    alignas(64) _Atomic uint32_t broken;     /* 0; 1 while the message is written; 2 */
    char why[512];
    rank_entry ranks[COLL_MAX_WORLD];
} coll_shared;

struct coll {
    const coll_impl *impl; /* another kind of world (NCCL): every call goes to it */
    void *impl_state;
    coll_shared *sh;
    uint8_t *data;
    size_t map_bytes, slot_bytes;
    int rank, world, timeout_ms, spin;
    uint64_t calls, steps;
    char *name;
};

/* ---- small parts ------------------------------------------------------------------------- */

size_t coll_dtype_bytes(coll_dtype dtype) { return dtype == COLL_BF16 ? 2 : dtype == COLL_F64 ? 8 : 4; }

float coll_bf16_to_f32(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t coll_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0; /* torch's NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

const char *coll_call_name(uint32_t kind)
{
    switch (kind) {
    case CALL_ALL_REDUCE: return "all_reduce";
    case CALL_ALL_GATHER: return "all_gather";
    case CALL_BROADCAST: return "broadcast";
    case CALL_BARRIER: return "barrier";
    default: return "join";
    }
}

static uint8_t *slot(const coll *c, uint64_t set, int r)
{
    return c->data + ((size_t)(set & 1) * (size_t)c->world + (size_t)r) * c->slot_bytes;
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int coll_rank(const coll *c) { return c->rank; }
int coll_world(const coll *c) { return c->world; }

/* ---- a broken world ------------------------------------------------------------------------ */

/* The first breaker's message is every rank's error; waiters are woken to read it. */
__attribute__((format(printf, 2, 3))) static void break_world(coll *c, const char *fmt, ...)
{
    coll_shared *sh = c->sh;
    uint32_t none = 0;
    if (atomic_compare_exchange_strong(&sh->broken, &none, 1)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(sh->why, sizeof sh->why, fmt, ap);
        va_end(ap);
        atomic_store(&sh->broken, 2);
    }
    futex(&sh->generation, FUTEX_WAKE, INT_MAX, NULL);
}

static int broken_error(const coll *c, char **err)
{
    while (atomic_load(&c->sh->broken) == 1)
        sched_yield();
    return report_failure(err, "%s", c->sh->why);
}

/* A rank that died or left breaks the world, one that finished too unless `finished_ok` (a
 * watch: it made its last call); true if one did. */
static bool peer_lost(coll *c, const char *what, bool finished_ok)
{
    for (int r = 0; r < c->world; r++) {
        rank_entry *e = &c->sh->ranks[r];
        pid_t pid = atomic_load(&e->pid);
        uint32_t left = atomic_load(&e->left);
        if (r == c->rank || pid <= 0 || (finished_ok && left == LEFT_FINISHED))
            continue;
        const char *why = left == LEFT_FINISHED ? "finished"
                          : left                ? "left the world"
                                                : proc_gone(pid, atomic_load(&e->start_time));
        if (why) {
            break_world(c, "collectives %s: rank %d (pid %d) %s while rank %d waited in %s", c->name, r,
                        (int)pid, why, c->rank, what);
            return true;
        }
    }
    return false;
}

int coll_check_peers(coll *c, const char *what, char **err)
{
    if (c->impl)
        return c->impl->check_peers ? c->impl->check_peers(c->impl_state, what, err) : 0;
    if (atomic_load(&c->sh->broken) || peer_lost(c, what, true))
        return broken_error(c, err);
    return 0;
}

/* timeout_ms passed: name the ranks that have not entered barrier number `mine`. */
static void break_for_laggards(coll *c, uint64_t mine, const char *what)
{
    strbuf late = {0};
    for (int r = 0; r < c->world; r++)
        if (atomic_load(&c->sh->ranks[r].barriers) < mine)
            sb_printf(&late, "%s%d", late.len ? ", " : "", r);
    break_world(c, "collectives %s: rank%s %s did not reach %s within %.1f s (rank %d waited)", c->name,
                strchr(sb_str(&late), ',') ? "s" : "", sb_str(&late), what, c->timeout_ms / 1000.0, c->rank);
    sb_free(&late);
}

/* ---- the barrier ----------------------------------------------------------------------------- */

static int wait_generation(coll *c, uint32_t gen, uint64_t mine, const char *what, char **err)
{
    coll_shared *sh = c->sh;
    for (int i = 0; i < c->spin; i++) {
        if (atomic_load_explicit(&sh->generation, memory_order_acquire) != gen)
            return 0;
        cpu_relax();
    }
    double give_up = now_seconds() + c->timeout_ms / 1000.0;
    for (;;) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = CHECK_MS * 1000000L};
        futex(&sh->generation, FUTEX_WAIT, gen, &ts);
        if (atomic_load_explicit(&sh->generation, memory_order_acquire) != gen)
            return 0;
        if (atomic_load(&sh->broken) || peer_lost(c, what, false))
            return broken_error(c, err);
        if (now_seconds() > give_up) {
            break_for_laggards(c, mine, what);
            return broken_error(c, err);
        }
    }
}

/* Every rank enters, then all leave: the generation loaded before arriving is the one the
 * last arrival moves on (after resetting the count, so no early next arrival is lost). */
static int barrier(coll *c, const char *what, char **err)
{
    coll_shared *sh = c->sh;
    if (atomic_load(&sh->broken))
        return broken_error(c, err);
    uint64_t mine = atomic_fetch_add(&sh->ranks[c->rank].barriers, 1) + 1;
    uint32_t gen = atomic_load(&sh->generation);
    if (atomic_fetch_add(&sh->arrived, 1) + 1 == (uint32_t)c->world) {
        atomic_store(&sh->arrived, 0);
        atomic_fetch_add(&sh->generation, 1);
        futex(&sh->generation, FUTEX_WAKE, INT_MAX, NULL);
        return 0;
    }
    return wait_generation(c, gen, mine, what, err);
}

/* ---- the call check -------------------------------------------------------------------------- */

void coll_describe_call(const call_desc *d, char *out, size_t n)
{
    const char *type = d->dtype == COLL_BF16 ? "bf16" : d->dtype == COLL_F64 ? "fp64" : "fp32";
    if (d->kind == CALL_BARRIER)
        snprintf(out, n, "barrier (call %llu)", (unsigned long long)d->number);
    else if (d->kind == CALL_BROADCAST)
        snprintf(out, n, "broadcast of %llu %s from rank %d (call %llu)", (unsigned long long)d->count, type,
                 (int)d->arg, (unsigned long long)d->number);
    else
        snprintf(out, n, "%s of %llu %s (call %llu)", coll_call_name(d->kind), (unsigned long long)d->count, type,
                 (unsigned long long)d->number);
}

bool coll_same_call(const call_desc *a, const call_desc *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->arg == b->arg && a->count == b->count &&
           a->number == b->number;
}

/* After the call's first barrier: every rank is making this same call, or the world breaks. */
static int check_calls(coll *c, char **err)
{
    const call_desc *mine = &c->sh->ranks[c->rank].calls[c->calls & 1];
    for (int r = 0; r < c->world; r++) {
        const call_desc *theirs = &c->sh->ranks[r].calls[c->calls & 1];
        if (coll_same_call(mine, theirs))
            continue;
        char a[160], b[160];
        coll_describe_call(theirs, a, sizeof a);
        coll_describe_call(mine, b, sizeof b);
        break_world(c, "collectives %s: rank %d called %s while rank %d called %s", c->name, r, a, c->rank,
                    b);
        return broken_error(c, err);
    }
    return 0;
}

/* Start call number c->calls + 1: publish what it is before its first barrier. */
static const char *begin_call(coll *c, call_kind kind, coll_dtype dtype, int arg, size_t count)
{
    c->calls++;
    call_desc *d = &c->sh->ranks[c->rank].calls[c->calls & 1];
    *d = (call_desc){.kind = kind, .dtype = dtype, .arg = arg, .count = count, .number = c->calls};
    return coll_call_name(kind);
}

/* The first barrier of a call, with the call check after it. */
static int first_barrier(coll *c, const char *what, bool first, char **err)
{
    if (barrier(c, what, err) != 0)
        return -1;
    return first ? check_calls(c, err) : 0;
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* out[i] = a[i] op b[i]; out may be a or b (each value is read before it is written). */
static void combine_f32(float *out, const float *a, const float *b, size_t n, coll_op op)
{
    if (op == COLL_MAX)
        for (size_t i = 0; i < n; i++)
            out[i] = a[i] > b[i] || a[i] != a[i] ? a[i] : b[i];
    else
        for (size_t i = 0; i < n; i++)
            out[i] = a[i] + b[i];
}

static void divide_f32(float *acc, size_t n, int world)
{
    for (size_t i = 0; i < n; i++)
        acc[i] = acc[i] / (float)world;
}

/* combine_f32 and divide_f32 in double */
static void combine_f64(double *out, const double *a, const double *b, size_t n, coll_op op)
{
    if (op == COLL_MAX)
        for (size_t i = 0; i < n; i++)
            out[i] = a[i] > b[i] || a[i] != a[i] ? a[i] : b[i];
    else
        for (size_t i = 0; i < n; i++)
            out[i] = a[i] + b[i];
}

static void divide_f64(double *acc, size_t n, int world)
{
    for (size_t i = 0; i < n; i++)
        acc[i] = acc[i] / (double)world;
}

static void widen_bf16(float *restrict out, const uint16_t *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = coll_bf16_to_f32(x[i]);
}

#define BF16_BLOCK 1024 /* bf16 values widened at a time, on the stack */

static void reduce_bf16(uint16_t *out, const void *const *src, int world, size_t n, coll_op op)
{
    float acc[BF16_BLOCK], tmp[BF16_BLOCK];
    for (size_t at = 0; at < n; at += BF16_BLOCK) {
        size_t m = n - at < BF16_BLOCK ? n - at : BF16_BLOCK;
        widen_bf16(acc, (const uint16_t *)src[0] + at, m);
        for (int r = 1; r < world; r++) {
            widen_bf16(tmp, (const uint16_t *)src[r] + at, m);
            combine_f32(acc, acc, tmp, m, op);
        }
        if (op == COLL_MEAN)
            divide_f32(acc, m, world);
        for (size_t i = 0; i < m; i++)
            out[at + i] = coll_f32_to_bf16(acc[i]);
    }
}

void coll_reduce_in_rank_order(void *out, const void *const *src, int world, size_t n, coll_dtype dtype,
                               coll_op op)
{
    if (dtype == COLL_BF16) {
        reduce_bf16(out, src, world, n, op);
        return;
    }
    if (world == 1 && out != src[0])
        memcpy(out, src[0], n * coll_dtype_bytes(dtype));
    for (int r = 1; r < world; r++) {
        const void *acc = r == 1 ? src[0] : out;
        if (dtype == COLL_F32)
            combine_f32(out, acc, src[r], n, op);
        else
            combine_f64(out, acc, src[r], n, op);
    }
    if (op == COLL_MEAN && dtype == COLL_F32)
        divide_f32(out, n, world);
    else if (op == COLL_MEAN)
        divide_f64(out, n, world);
}

/* Rank q's share of a piece of n values: whole lines, the last rank taking the rest. */
static void share(const coll *c, size_t n, int q, size_t *lo, size_t *hi)
{
    size_t lines = (n + LINE_VALUES - 1) / LINE_VALUES;
    *lo = lines * (size_t)q / (size_t)c->world * LINE_VALUES;
    *hi = lines * (size_t)(q + 1) / (size_t)c->world * LINE_VALUES;
    *lo = *lo < n ? *lo : n;
    *hi = *hi < n ? *hi : n;
}

/* Rank r's values of this rank's share: in r's slot, or, for this rank, in its own piece
 * (which it never copies into its slot: nobody else reads it). */
static const void *values_of(coll *c, uint64_t set, int r, const uint8_t *piece, size_t lo, size_t esz)
{
    return r == c->rank ? piece + lo * esz : slot(c, set, r) + lo * esz;
}

/* Step 1: the shares the other ranks reduce, into this rank's slot. */
static void publish_other_shares(coll *c, uint64_t set, const uint8_t *piece, size_t n, size_t esz)
{
    for (int q = 0; q < c->world; q++) {
        size_t lo, hi;
        share(c, n, q, &lo, &hi);
        if (q != c->rank)
            memcpy(slot(c, set, c->rank) + lo * esz, piece + lo * esz, (hi - lo) * esz);
    }
}

/* Step 2: this rank's share combined over the ranks in rank order, into its own slot (for the
 * others) and its piece. */
static void reduce_own_share(coll *c, uint64_t set, uint8_t *piece, size_t n, coll_dtype dtype, coll_op op)
{
    size_t lo, hi, esz = coll_dtype_bytes(dtype);
    share(c, n, c->rank, &lo, &hi);
    const void *src[COLL_MAX_WORLD];
    for (int r = 0; r < c->world; r++)
        src[r] = values_of(c, set, r, piece, lo, esz);
    uint8_t *out = slot(c, set, c->rank) + lo * esz;
    coll_reduce_in_rank_order(out, src, c->world, hi - lo, dtype, op);
    memcpy(piece + lo * esz, out, (hi - lo) * esz);
}

/* Step 3: the other ranks' results, from their slots. */
static void collect_other_shares(coll *c, uint64_t set, uint8_t *piece, size_t n, size_t esz)
{
    for (int q = 0; q < c->world; q++) {
        size_t lo, hi;
        share(c, n, q, &lo, &hi);
        if (q != c->rank)
            memcpy(piece + lo * esz, slot(c, set, q) + lo * esz, (hi - lo) * esz);
    }
}

/* ---- the collectives ------------------------------------------------------------------------- */

int coll_all_reduce(coll *c, void *buf, size_t count, coll_dtype dtype, coll_op op, char **err)
{
    if (c->impl)
        return c->impl->all_reduce(c->impl_state, buf, count, dtype, op, false, err);
    const char *what = begin_call(c, CALL_ALL_REDUCE, dtype, (int)op, count);
    size_t esz = coll_dtype_bytes(dtype), per = c->slot_bytes / esz, done = 0;
    do {
        size_t n = count - done < per ? count - done : per;
        uint64_t set = c->steps++;
        uint8_t *piece = (uint8_t *)buf + done * esz;
        publish_other_shares(c, set, piece, n, esz);
        if (first_barrier(c, what, done == 0, err) != 0)
            return -1;
        reduce_own_share(c, set, piece, n, dtype, op);
        if (barrier(c, what, err) != 0)
            return -1;
        collect_other_shares(c, set, piece, n, esz);
        done += n;
    } while (done < count);
    return 0;
}

int coll_all_gather(coll *c, const void *send, void *recv, size_t count, coll_dtype dtype, char **err)
{
    if (c->impl)
        return c->impl->all_gather(c->impl_state, send, recv, count, dtype, false, err);
    const char *what = begin_call(c, CALL_ALL_GATHER, dtype, 0, count);
    size_t esz = coll_dtype_bytes(dtype), per = c->slot_bytes / esz, done = 0;
    do {
        size_t n = count - done < per ? count - done : per;
        uint64_t set = c->steps++;
        memcpy(slot(c, set, c->rank), (const uint8_t *)send + done * esz, n * esz);
        if (first_barrier(c, what, done == 0, err) != 0)
            return -1;
        for (int r = 0; r < c->world; r++)
            memcpy((uint8_t *)recv + ((size_t)r * count + done) * esz, slot(c, set, r), n * esz);
        done += n;
    } while (done < count);
    return 0;
}

int coll_broadcast(coll *c, void *buf, size_t count, coll_dtype dtype, int root, char **err)
{
    if (root < 0 || root >= c->world)
        return report_failure(err, "collectives %s: broadcast from rank %d of a world of %d", c->name, root,
                              c->world);
    if (c->impl)
        return c->impl->broadcast(c->impl_state, buf, count, dtype, root, false, err);
    const char *what = begin_call(c, CALL_BROADCAST, dtype, root, count);
    size_t esz = coll_dtype_bytes(dtype), per = c->slot_bytes / esz, done = 0;
    do {
        size_t n = count - done < per ? count - done : per;
        uint64_t set = c->steps++;
        if (c->rank == root)
            memcpy(slot(c, set, 0), (const uint8_t *)buf + done * esz, n * esz);
        if (first_barrier(c, what, done == 0, err) != 0)
            return -1;
        if (c->rank != root)
            memcpy((uint8_t *)buf + done * esz, slot(c, set, 0), n * esz);
        done += n;
    } while (done < count);
    return 0;
}

int coll_barrier(coll *c, char **err)
{
    if (c->impl)
        return c->impl->barrier(c->impl_state, err);
    const char *what = begin_call(c, CALL_BARRIER, COLL_F32, 0, 0);
    return first_barrier(c, what, true, err);
}

/* ---- device memory (another kind of world) ---------------------------------------------------- */

bool coll_takes_device(const coll *c) { return c->impl && c->impl->takes_device; }

/* A device call on a world that cannot take device memory is a programming error. */
static int device_call(const coll *c, const char *what, char **err)
{
    return coll_takes_device(c) ? 0
                                : report_failure(err, "collectives %s: %s of device memory in a world of host memory",
                                                 c->name ? c->name : "?", what);
}

int coll_all_reduce_device(coll *c, void *dev, size_t count, coll_dtype dtype, coll_op op, char **err)
{
    if (device_call(c, "all-reduce", err) != 0)
        return -1;
    return c->impl->all_reduce(c->impl_state, dev, count, dtype, op, true, err);
}

bool coll_queues_device(const coll *c) { return coll_takes_device(c) && c->impl->all_reduce_queued && c->impl->join; }

static int queue_call(const coll *c, const char *what, char **err)
{
    return coll_queues_device(c) ? 0
                                 : report_failure(err, "collectives %s: %s queued in a world that cannot queue",
                                                  c->name ? c->name : "?", what);
}

int coll_all_reduce_device_queued(coll *c, void *dev, size_t count, coll_dtype dtype, coll_op op, void *queue,
                                  char **err)
{
    if (queue_call(c, "all-reduce", err) != 0)
        return -1;
    return c->impl->all_reduce_queued(c->impl_state, dev, count, dtype, op, queue, err);
}

int coll_device_join(coll *c, void *queue, char **err)
{
    if (queue_call(c, "a join", err) != 0)
        return -1;
    return c->impl->join(c->impl_state, queue, err);
}

int coll_all_gather_device(coll *c, const void *send, void *recv, size_t count, coll_dtype dtype, char **err)
{
    if (device_call(c, "all-gather", err) != 0)
        return -1;
    return c->impl->all_gather(c->impl_state, send, recv, count, dtype, true, err);
}

int coll_broadcast_device(coll *c, void *dev, size_t count, coll_dtype dtype, int root, char **err)
{
    if (root < 0 || root >= c->world)
        return report_failure(err, "collectives %s: broadcast from rank %d of a world of %d", c->name, root,
                              c->world);
    if (device_call(c, "broadcast", err) != 0)
        return -1;
    return c->impl->broadcast(c->impl_state, dev, count, dtype, root, true, err);
}

coll *coll_from_impl(const char *name, int rank, int world, const coll_impl *impl, void *state)
{
    coll *c = xcalloc(1, sizeof *c);
    *c = (coll){.impl = impl, .impl_state = state, .rank = rank, .world = world, .name = xstrdup(name)};
    return c;
}

/* ---- joining and leaving --------------------------------------------------------------------- */

static size_t header_bytes(void) { return (sizeof(coll_shared) + 4095) & ~(size_t)4095; }

/* Rank 0: the segment, made and mapped, its header written last-word-last. */
static int create_segment(coll *c, char **err)
{
    int fd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return report_failure(err, "collectives %s: cannot create the segment: %s", c->name, strerror(errno));
    int rc = ftruncate(fd, (off_t)c->map_bytes) != 0 ? errno : 0;
    void *p = rc ? MAP_FAILED : mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    rc = rc ? rc : p == MAP_FAILED ? errno : 0;
    close(fd);
    if (rc) {
        shm_unlink(c->name);
        return report_failure(err, "collectives %s: cannot size or map %zu bytes: %s", c->name, c->map_bytes,
                              strerror(rc));
    }
    c->sh = p;
    c->sh->world = (uint32_t)c->world;
    c->sh->slot_bytes = c->slot_bytes;
    atomic_store_explicit(&c->sh->magic, COLL_MAGIC, memory_order_release);
    return 0;
}

/* The other ranks: rank 0's segment once it exists, is sized and carries its header. */
static int open_segment(coll *c, double give_up, char **err)
{
    for (;; usleep(2000)) {
        int fd = shm_open(c->name, O_RDWR | O_CLOEXEC, 0);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= header_bytes()) {
            void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED)
                return report_failure(err, "collectives %s: cannot map the segment: %s", c->name,
                                      strerror(errno));
            c->sh = p;
            c->map_bytes = (size_t)st.st_size;
            while (atomic_load_explicit(&c->sh->magic, memory_order_acquire) != COLL_MAGIC &&
                   now_seconds() < give_up)
                usleep(1000);
            return 0;
        }
        if (fd >= 0)
            close(fd);
        if (now_seconds() > give_up)
            return report_failure(err, "collectives %s: rank 0 made no segment within %.1f s", c->name,
                                  c->timeout_ms / 1000.0);
    }
}

/* The geometry rank 0 wrote is the one this rank was told, and its place is free. */
static int check_and_register(coll *c, char **err)
{
    coll_shared *sh = c->sh;
    if (atomic_load(&sh->magic) != COLL_MAGIC)
        return report_failure(err, "collectives %s: the segment was never initialised", c->name);
    if ((int)sh->world != c->world || c->map_bytes < header_bytes() + 2 * (size_t)c->world * sh->slot_bytes)
        return report_failure(err, "collectives %s: rank %d expects a world of %d; the segment is for %u",
                              c->name, c->rank, c->world, sh->world);
    c->slot_bytes = sh->slot_bytes;
    rank_entry *e = &sh->ranks[c->rank];
    char state;
    uint64_t start;
    int rc = proc_read_stat(getpid(), &state, &start);
    if (rc)
        return report_failure(err, "collectives %s: cannot read /proc/self/stat: %s", c->name, strerror(rc));
    int32_t none = 0;
    atomic_store(&e->start_time, start);
    if (!atomic_compare_exchange_strong(&e->pid, &none, (int32_t)getpid()))
        return report_failure(err, "collectives %s: rank %d joined twice (pid %d was first)", c->name,
                              c->rank, (int)none);
    return 0;
}

coll *coll_shm_join(const char *name, int rank, int world, const coll_shm_options *o, char **err)
{
    if (world < 1 || world > COLL_MAX_WORLD || rank < 0 || rank >= world) {
        report_failure(err, "collectives %s: rank %d of a world of %d (1 to %d ranks)", name, rank, world,
                       COLL_MAX_WORLD);
        return NULL;
    }
    coll *c = xcalloc(1, sizeof *c);
    c->name = xstrdup(name);
    c->rank = rank, c->world = world;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000;
    c->slot_bytes = o->slot_bytes ? (o->slot_bytes + 4095) & ~(size_t)4095 : DEFAULT_SLOT_BYTES;
    c->map_bytes = header_bytes() + 2 * (size_t)world * c->slot_bytes;
    c->spin = world <= sysconf(_SC_NPROCESSORS_ONLN) ? SPIN_ROUNDS : 0;
    double give_up = now_seconds() + c->timeout_ms / 1000.0;
    int rc = rank == 0 ? create_segment(c, err) : open_segment(c, give_up, err);
    rc = rc ? rc : check_and_register(c, err);
    if (rc == 0) {
        c->data = (uint8_t *)c->sh + header_bytes();
        begin_call(c, CALL_JOIN, COLL_F32, 0, 0);
        rc = first_barrier(c, "the join", true, err);
    }
    if (rank == 0 && c->sh)
        shm_unlink(name); /* every rank has it mapped, or the join failed: either way, done with the name */
    if (rc != 0) {
        coll_close(c);
        return NULL;
    }
    return c;
}

static void leave(coll *c, uint32_t how)
{
    if (!c)
        return;
    if (c->impl)
        (how == LEFT_FINISHED && c->impl->finish ? c->impl->finish : c->impl->close)(c->impl_state);
    if (c->sh) {
        atomic_store(&c->sh->ranks[c->rank].left, how);
        futex(&c->sh->generation, FUTEX_WAKE, INT_MAX, NULL);
        munmap(c->sh, c->map_bytes);
    }
    free(c->name);
    free(c);
}

void coll_close(coll *c) { leave(c, LEFT_CLOSED); }

void coll_finish(coll *c) { leave(c, LEFT_FINISHED); }

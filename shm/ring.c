/*
 * ring.c — the shared-memory ring of ring.h: a bounded many-producer many-consumer queue of
 * fixed-size slots in a POSIX shared-memory segment, records built and read in place.
 *
 * How it works, in the order to read it:
 *
 * 1. Layout (layout_for, ring_create). One header page (ring_shared: geometry, tickets, the
 *    end-of-stream and broken state, the table of attached processes), then one cache line of
 *    metadata per slot (slot_meta), then the slot data, every slot page-aligned. The offsets
 *    live in the header, so every process maps the same picture.
 *
 * 2. The queue (ring_write_begin … ring_read_end) is Dmitry Vyukov's bounded MPMC queue with
 *    the copy taken out. Each slot has a 64-bit sequence word; for a ticket t that maps to the
 *    slot (t % n_slots):
 *        seq == t       free for the writer of ticket t
 *        seq == t + 1   published: the reader of ticket t may read it
 *        seq == t + n   released by that reader: free for ticket t + n, one lap later
 *    The writer tickets are the head, the reader tickets the tail: 64-bit counters that only
 *    grow (2^64 records never wrap, and comparisons use signed differences all the same). A
 *    process claims ticket t with a compare-and-swap on the head or tail once slot t is in the
 *    state it needs, so a wait that times out holds nothing, and a process that dies while
 *    waiting leaves nothing half-done.
 *
 * 3. Waiting (wait_round). Spin a little, then sleep on a futex on the low 32 bits of the
 *    slot's sequence word, in slices of at most RING_CHECK_MS. How long to spin adapts
 *    (spin_budget): SPIN_MIN_NS normally; up to SPIN_MAX_NS while this handle's recent waits
 *    were that short, because waking a sleeper costs ~20 µs on a VM whose idle core must be
 *    woken too; back to SPIN_MIN_NS once waits grow longer (an idle ring: the process then
 *    sleeps) or when the ring has more busy processes than the machine has cores (a spinner
 *    would steal its peer's time). No sched_yield: on a busy machine a yield can cost a
 *    whole time slice, while a futex wake-up comes with the scheduler's wake-up preference.
 *    Beside each sequence word is a count of sleepers, so that a publish calls FUTEX_WAKE
 *    only when someone sleeps. The sleeper increments the count before its last look at the
 *    sequence word; the publisher stores the sequence word before it looks at the count; both
 *    seq_cst, so at least one sees the other (a Dekker pair) and no wake-up is lost. The futex
 *    itself rechecks the word in the kernel, which closes the gap between look and sleep.
 *
 * 4. Ending (ring_close). producers_closed counts the producers' closes; the one that reaches
 *    n_producers fixes end_ticket = head (every ticket before it has been published by then:
 *    each producer published before it closed) and wakes every sleeper. A reader whose next
 *    ticket is at or past end_ticket gets RING_EOS; before that it drains what is there.
 *    Writers get RING_NO_READERS once every consumer that attached has closed.
 *
 * 5. Crash safety (check_peers). Every process registers its pid, its start time from
 *    /proc/PID/stat and its role in the header. Every RING_CHECK_MS, whether waiting or not,
 *    readers check the producers and writers the consumers. One that is gone without closing,
 *    a zombie, or whose pid now belongs to a process started at another time, breaks the
 *    ring: the first breaker records why, every sleeper on every slot is woken, and every call
 *    in every process returns RING_BROKEN from then on.
 */
#include "ring.h"
#include "ring_test_hooks.h"

#include "log.h"
#include "proc.h"
#include "timer.h"
#include "util.h"

#include <assert.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING_MAGIC 0x474e495250555353ull /* "SSUPRING" in memory */
#define RING_VERSION 2u
#define PAGE_BYTES ((size_t)4096)
#define META_BYTES 64
#define ERROR_BYTES 512
#define MAX_SLOTS (1u << 20)
#define MAX_LABEL 200
#define NS_PER_MS 1000000ull
/* Busy-wait at least SPIN_MIN_NS before sleeping (a peer in the middle of a small record),
 * and up to SPIN_MAX_NS while recent waits were that short (a steady stream, where a sleep
 * and wake-up would cost more than the wait). bench/ring_bench measures the effect. */
#define SPIN_MIN_NS 3000ull
#define SPIN_MAX_NS 50000ull
#define ATTACH_POLL_MS 2

/* Process table entry: the low two bits of `word` are the state, the rest count claims so
 * that a reader can tell the entry changed while it was reading it (a seqlock). */
enum { PROC_FREE = 0, PROC_CLAIMING = 1, PROC_ACTIVE = 2, PROC_STATE_MASK = 3 };
enum { NOT_BROKEN = 0, BREAKING = 1, IS_BROKEN = 2 };

typedef struct {
    _Atomic uint32_t word;
    _Atomic uint32_t role;
    _Atomic int32_t pid;
    _Atomic uint64_t start_time; /* clock ticks after boot: /proc/PID/stat field 22 */
} proc_entry;

typedef struct {
    /* Fixed at creation. magic is stored last, so an attacher never sees a half-made header. */
    _Atomic uint64_t magic;
    uint32_t version;
    uint32_t n_slots;
    uint64_t slot_bytes;
    uint64_t meta_offset, data_offset, total_bytes;
    uint32_t n_producers;
    int32_t creator_pid;

    /* The ticket counters, each on its own cache line: writers hammer one, readers the other. */
    alignas(64) _Atomic uint64_t head;
    alignas(64) _Atomic uint64_t tail;

    /* Life-cycle state, written rarely. */
    alignas(64) _Atomic uint64_t end_ticket; /* meaningful once eos != 0 */
    _Atomic uint32_t eos;
    _Atomic uint32_t producers_closed;
    _Atomic uint32_t consumers_attached; /* ever */
    _Atomic uint32_t consumers_closed;
    _Atomic uint32_t broken; /* NOT_BROKEN, BREAKING (reason being written), IS_BROKEN */
    _Atomic uint32_t stopped; /* the break was a producer's stop, not a failure */
    char error[ERROR_BYTES];
    proc_entry procs[RING_MAX_PROCS];
} ring_shared;

typedef struct {
    alignas(META_BYTES) _Atomic uint64_t seq; /* see the top of the file; futex on low half */
    _Atomic uint32_t waiters;                 /* processes asleep, or about to be, on seq */
    uint32_t hole;                            /* published without a record: readers skip */
    uint64_t len;                             /* bytes published */
} slot_meta;

static_assert(sizeof(ring_shared) <= PAGE_BYTES, "the ring header must fit in one page");
static_assert(sizeof(slot_meta) == META_BYTES, "one cache line of metadata per slot");
static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared memory needs lock-free 64-bit atomics");

struct ring {
    ring_shared *sh;
    slot_meta *meta;
    unsigned char *data;
    size_t map_bytes;
    size_t slot_bytes;
    uint32_t n_slots;
    uint64_t mask;
    ring_role role;
    int proc_index;         /* our entry in sh->procs */
    pid_t pid;              /* who attached: a child that inherits the handle is not it */
    bool creator;
    uint64_t next_check_ns; /* next peer check, on the coarse clock */
    uint64_t typical_wait_ns; /* moving average of this handle's recent waits */
    bool crowded;             /* more busy processes on the ring than cores: spin less */
    uint64_t *held;         /* tickets claimed and not yet ended, given back by ring_close */
    size_t n_held, cap_held;
    char *name;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A clock read for the once-per-RING_CHECK_MS peer check on the fast path: a few ns. */
static uint64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *role_name(ring_role role)
{
    switch (role) {
    case RING_PRODUCER: return "producer";
    case RING_CONSUMER: return "consumer";
    case RING_OBSERVER: return "observer";
    }
    return "unknown role";
}

/* The futex is the low 32 bits of the 64-bit sequence word: it changes on every step. */
static long seq_futex(_Atomic uint64_t *seq, int op, uint32_t val, const struct timespec *ts)
{
    uint32_t *word = (uint32_t *)seq;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word += 1;
#endif
    return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

static slot_meta *meta_of(const ring *r, uint64_t ticket)
{
    return &r->meta[ticket & r->mask];
}

static void *data_of(const ring *r, uint64_t ticket)
{
    return r->data + (size_t)(ticket & r->mask) * r->slot_bytes;
}

/* Store the next sequence value and wake sleepers, if any: the publisher's half of the
 * Dekker pair (see sleep_on_slot). */
static void advance_slot(slot_meta *m, uint64_t seq)
{
    atomic_store(&m->seq, seq);
    if (atomic_load(&m->waiters) > 0)
        seq_futex(&m->seq, FUTEX_WAKE, INT_MAX, NULL);
}

/* After a change every sleeper must see (broken, end of stream, no readers left). */
static void wake_everyone(ring *r)
{
    for (uint32_t i = 0; i < r->n_slots; i++)
        if (atomic_load(&r->meta[i].waiters) > 0)
            seq_futex(&r->meta[i].seq, FUTEX_WAKE, INT_MAX, NULL);
}

/* ---- processes: who is attached, and are they still there -------------------------------- */

/* A consistent copy of entry i, or false when it is not an active registration. */
static bool read_entry(const ring *r, int i, pid_t *pid, uint64_t *start, ring_role *role)
{
    proc_entry *e = &r->sh->procs[i];
    uint32_t w = atomic_load_explicit(&e->word, memory_order_acquire);
    if ((w & PROC_STATE_MASK) != PROC_ACTIVE)
        return false;
    *pid = atomic_load_explicit(&e->pid, memory_order_relaxed);
    *start = atomic_load_explicit(&e->start_time, memory_order_relaxed);
    *role = (ring_role)atomic_load_explicit(&e->role, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&e->word, memory_order_relaxed) == w;
}

static int register_process(ring *r, char **err)
{
    char state;
    uint64_t start;
    int rc = proc_read_stat(getpid(), &state, &start);
    if (rc)
        return report_failure(err, "ring %s: cannot read /proc/%d/stat: %s", r->name,
                               (int)getpid(), strerror(rc));
    for (int i = 0; i < RING_MAX_PROCS; i++) {
        proc_entry *e = &r->sh->procs[i];
        uint32_t w = atomic_load(&e->word);
        if ((w & PROC_STATE_MASK) != PROC_FREE)
            continue;
        uint32_t generation = (w & ~(uint32_t)PROC_STATE_MASK) + 4;
        if (!atomic_compare_exchange_strong(&e->word, &w, generation | PROC_CLAIMING))
            continue;
        atomic_store_explicit(&e->pid, (int32_t)getpid(), memory_order_relaxed);
        atomic_store_explicit(&e->role, (uint32_t)r->role, memory_order_relaxed);
        atomic_store_explicit(&e->start_time, start, memory_order_relaxed);
        atomic_store_explicit(&e->word, generation | PROC_ACTIVE, memory_order_release);
        r->proc_index = i;
        if (r->role == RING_CONSUMER)
            atomic_fetch_add(&r->sh->consumers_attached, 1);
        return 0;
    }
    return report_failure(err, "ring %s: all %d process entries are taken (RING_MAX_PROCS)",
                          r->name, RING_MAX_PROCS);
}

static void deregister_process(ring *r)
{
    proc_entry *e = &r->sh->procs[r->proc_index];
    uint32_t w = atomic_load(&e->word);
    atomic_store(&e->word, (w & ~(uint32_t)PROC_STATE_MASK) | PROC_FREE);
}

/* Entry i still registers (pid, start): a process found gone a moment after its entry was
 * read may have closed the ring (and freed the entry) in between, then exited: only one whose
 * entry outlives it died without closing. */
static bool still_registered(const ring *r, int i, pid_t pid, uint64_t start)
{
    pid_t now_pid;
    uint64_t now_start;
    ring_role role;
    return read_entry(r, i, &now_pid, &now_start, &role) && now_pid == pid && now_start == start;
}

/* Readers depend on producers (who else would end their wait?), writers on consumers. */
static ring_status check_peers(ring *r)
{
    ring_role wanted = r->role == RING_PRODUCER   ? RING_CONSUMER
                       : r->role == RING_CONSUMER ? RING_PRODUCER
                                                  : 0;
    int busy = 0; /* producers and consumers attached */
    for (int i = 0; wanted && i < RING_MAX_PROCS; i++) {
        pid_t pid;
        uint64_t start;
        ring_role role;
        if (!read_entry(r, i, &pid, &start, &role) || role == RING_OBSERVER)
            continue;
        busy++;
        if (role != wanted)
            continue;
        const char *why = proc_gone(pid, start);
        if (why && still_registered(r, i, pid, start)) {
            ring_break(r, "%s pid %d %s without closing the ring", role_name(role), (int)pid,
                       why);
            return RING_BROKEN;
        }
    }
    /* Spinning only pays while every busy process of the ring can have a core to itself;
     * beyond that a spinner steals the time of the peer it waits for. The core count is read
     * once, into an atomic: the threads of one process may check the peers of their handles at
     * the same time, and ThreadSanitizer caught the plain lazily set static racing. */
    static _Atomic long cores;
    long n_cores = atomic_load_explicit(&cores, memory_order_relaxed);
    if (!n_cores) {
        n_cores = sysconf(_SC_NPROCESSORS_ONLN);
        atomic_store_explicit(&cores, n_cores, memory_order_relaxed);
    }
    r->crowded = busy > n_cores;
    return atomic_load(&r->sh->broken) != NOT_BROKEN ? RING_BROKEN : RING_OK;
}

/* Check the peers once every RING_CHECK_MS; cheap to call on every operation. */
static ring_status periodic_check(ring *r)
{
    uint64_t now = coarse_ns();
    if (now < r->next_check_ns)
        return RING_OK;
    r->next_check_ns = now + RING_CHECK_MS * NS_PER_MS;
    return check_peers(r);
}

/* Is any other attached process still running? (Our own entry is gone by now.) */
static bool others_attached(const ring *r)
{
    for (int i = 0; i < RING_MAX_PROCS; i++) {
        pid_t pid;
        uint64_t start;
        ring_role role;
        if (read_entry(r, i, &pid, &start, &role) && !proc_gone(pid, start))
            return true;
    }
    return false;
}

/* ---- when to stop waiting ---------------------------------------------------------------- */

static ring_status writer_state(ring *r)
{
    ring_shared *sh = r->sh;
    if (atomic_load(&sh->broken) != NOT_BROKEN)
        return RING_BROKEN;
    uint32_t attached = atomic_load(&sh->consumers_attached);
    if (attached && atomic_load(&sh->consumers_closed) >= attached)
        return RING_NO_READERS;
    if (atomic_load(&sh->eos)) {
        ring_break(r, "producer pid %d wrote after end of stream (the ring was made for %u "
                      "producers and that many have closed)",
                   (int)getpid(), sh->n_producers);
        return RING_BROKEN;
    }
    return RING_OK;
}

/* For a reader about to read ticket `pos`. */
static ring_status reader_state(const ring *r, uint64_t pos)
{
    ring_shared *sh = r->sh;
    if (atomic_load(&sh->broken) != NOT_BROKEN)
        return RING_BROKEN;
    if (atomic_load(&sh->eos) && (int64_t)(pos - atomic_load(&sh->end_ticket)) >= 0)
        return RING_EOS;
    return RING_OK;
}

static ring_status role_state(ring *r, uint64_t pos)
{
    return r->role == RING_PRODUCER ? writer_state(r) : reader_state(r, pos);
}

/* ---- waiting ------------------------------------------------------------------------------ */

typedef struct {
    uint64_t start_ns;    /* 0 until the first round of waiting */
    uint64_t deadline_ns; /* UINT64_MAX: wait forever */
    uint64_t spin_ns;     /* how long to spin before sleeping */
    int timeout_ms;
} wait_state;

static wait_state wait_start(int timeout_ms)
{
    return (wait_state){.timeout_ms = timeout_ms};
}

/* Spin for twice the typical wait when that is short: a steady stream keeps us awake. */
static uint64_t spin_budget(const ring *r)
{
    uint64_t twice = 2 * r->typical_wait_ns;
    if (r->crowded || twice <= SPIN_MIN_NS || r->typical_wait_ns > SPIN_MAX_NS)
        return SPIN_MIN_NS;
    return twice < SPIN_MAX_NS ? twice : SPIN_MAX_NS;
}

/* A call that found its slot at once does not wait and reads no clock; one that waited
 * feeds how long into the average (capped at 1 ms, far above any spin, so that after an
 * idle spell a few short waits bring the spinning back). */
static void wait_end(ring *r, const wait_state *w)
{
    if (!w->start_ns)
        return;
    uint64_t waited = now_ns() - w->start_ns;
    if (waited > NS_PER_MS)
        waited = NS_PER_MS;
    r->typical_wait_ns = (3 * r->typical_wait_ns + waited) / 4;
}

/* Sleep until the slot's sequence word moves off `seen`, a wake-all, or `ns` pass. */
static void sleep_on_slot(ring *r, slot_meta *m, uint64_t seen, uint64_t pos, uint64_t ns)
{
    atomic_fetch_add(&m->waiters, 1);
    /* Look again after announcing ourselves: the sleeper's half of the Dekker pair. */
    if (atomic_load(&m->seq) == seen && role_state(r, pos) == RING_OK) {
        struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                              .tv_nsec = (long)(ns % 1000000000ull)};
        seq_futex(&m->seq, FUTEX_WAIT, (uint32_t)seen, &ts);
    }
    atomic_fetch_sub(&m->waiters, 1);
}

/* One round of waiting for slot m (last seen at `seen`) to change: spin, then sleep for a
 * slice. Returns RING_OK when the caller should look again, RING_TIMEOUT at the
 * deadline, RING_BROKEN when a peer check found a dead peer. */
static ring_status wait_round(ring *r, wait_state *w, slot_meta *m, uint64_t seen,
                              uint64_t pos)
{
    uint64_t now = now_ns();
    if (!w->start_ns) {
        w->start_ns = now;
        w->deadline_ns = w->timeout_ms < 0 ? UINT64_MAX
                                           : now + (uint64_t)w->timeout_ms * NS_PER_MS;
        w->spin_ns = spin_budget(r);
    }
    if (now >= w->deadline_ns)
        return RING_TIMEOUT;
    if (now - w->start_ns < w->spin_ns) {
        for (int i = 0; i < 16; i++)
            cpu_relax();
        return RING_OK;
    }
    ring_status st = periodic_check(r);
    if (st != RING_OK)
        return st;
    uint64_t slice = RING_CHECK_MS * NS_PER_MS;
    if (w->deadline_ns - now < slice)
        slice = w->deadline_ns - now;
    sleep_on_slot(r, m, seen, pos, slice);
    return RING_OK;
}

/* ---- claiming and giving back slots ------------------------------------------------------- */

static noreturn void misuse(const ring *r, const char *what)
{
    log_error("ring %s: %s (a bug in the caller)", r->name, what);
    abort();
}

static void hold(ring *r, ring_slot *slot, uint64_t ticket)
{
    if (r->n_held == r->cap_held) {
        r->cap_held = r->cap_held ? 2 * r->cap_held : 4;
        r->held = xrealloc(r->held, r->cap_held * sizeof *r->held);
    }
    r->held[r->n_held++] = ticket;
    slot->data = data_of(r, ticket);
    slot->ticket = ticket;
}

static void unhold(ring *r, uint64_t ticket)
{
    for (size_t i = 0; i < r->n_held; i++) {
        if (r->held[i] == ticket) {
            r->held[i] = r->held[--r->n_held];
            return;
        }
    }
    misuse(r, "ended a slot it does not hold");
}

ring_status ring_write_begin(ring *r, ring_slot *slot, int timeout_ms)
{
    if (r->role != RING_PRODUCER)
        misuse(r, "ring_write_begin on a handle that is not a producer");
    ring_status st = periodic_check(r);
    wait_state w = wait_start(timeout_ms);
    while (st == RING_OK && (st = writer_state(r)) == RING_OK) {
        uint64_t pos = atomic_load_explicit(&r->sh->head, memory_order_relaxed);
        slot_meta *m = meta_of(r, pos);
        uint64_t seq = atomic_load_explicit(&m->seq, memory_order_acquire);
        int64_t ahead = (int64_t)(seq - pos);
        if (ahead == 0 && atomic_compare_exchange_weak_explicit(&r->sh->head, &pos, pos + 1,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed)) {
            hold(r, slot, pos);
            slot->len = r->slot_bytes;
            break;
        }
        if (ahead >= 0)
            continue; /* another writer took `pos` first: look at the new head */
        st = wait_round(r, &w, m, seq, pos); /* full: wait for the reader of pos - n */
    }
    wait_end(r, &w);
    return st;
}

static void publish(ring *r, ring_slot *slot, size_t len, bool hole)
{
    unhold(r, slot->ticket);
    slot_meta *m = meta_of(r, slot->ticket);
    m->len = hole ? 0 : len;
    m->hole = hole;
    advance_slot(m, slot->ticket + 1);
}

void ring_write_end(ring *r, ring_slot *slot, size_t len)
{
    if (len > r->slot_bytes) {
        ring_break(r, "producer pid %d published a record of %zu bytes into a %zu-byte slot",
                   (int)getpid(), len, r->slot_bytes);
        publish(r, slot, 0, true);
        return;
    }
    publish(r, slot, len, false);
}

void ring_write_abort(ring *r, ring_slot *slot)
{
    publish(r, slot, 0, true);
}

ring_status ring_read_begin(ring *r, ring_slot *slot, int timeout_ms)
{
    if (r->role != RING_CONSUMER)
        misuse(r, "ring_read_begin on a handle that is not a consumer");
    ring_status st = periodic_check(r);
    wait_state w = wait_start(timeout_ms);
    while (st == RING_OK) {
        uint64_t pos = atomic_load_explicit(&r->sh->tail, memory_order_relaxed);
        if ((st = reader_state(r, pos)) != RING_OK)
            break;
        slot_meta *m = meta_of(r, pos);
        uint64_t seq = atomic_load_explicit(&m->seq, memory_order_acquire);
        int64_t ahead = (int64_t)(seq - (pos + 1));
        if (ahead == 0 && atomic_compare_exchange_weak_explicit(&r->sh->tail, &pos, pos + 1,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed)) {
            if (m->hole) { /* an aborted write: release it and look further */
                advance_slot(m, pos + r->n_slots);
                continue;
            }
            hold(r, slot, pos);
            slot->len = m->len;
            break;
        }
        if (ahead >= 0)
            continue; /* another reader took `pos` first */
        st = wait_round(r, &w, m, seq, pos); /* empty: wait for the writer of pos */
    }
    wait_end(r, &w);
    return st;
}

void ring_read_end(ring *r, ring_slot *slot)
{
    unhold(r, slot->ticket);
    advance_slot(meta_of(r, slot->ticket), slot->ticket + r->n_slots);
}

/* ---- breaking ----------------------------------------------------------------------------- */

/* Mark the ring broken with a reason; the first reason wins, later ones are consequences.
 * `stop` records that the first one was a producer's stop. */
static void break_ring(ring *r, bool stop, const char *fmt, va_list ap)
{
    ring_shared *sh = r->sh;
    uint32_t expected = NOT_BROKEN;
    if (atomic_compare_exchange_strong(&sh->broken, &expected, BREAKING)) {
        atomic_store(&sh->stopped, stop);
        int n = snprintf(sh->error, ERROR_BYTES, "ring %s: ", r->name);
        if (n >= 0 && n < ERROR_BYTES)
            vsnprintf(sh->error + n, ERROR_BYTES - (size_t)n, fmt, ap);
        atomic_store(&sh->broken, IS_BROKEN);
    }
    wake_everyone(r);
}

void ring_break(ring *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    break_ring(r, false, fmt, ap);
    va_end(ap);
}

void ring_stop(ring *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    break_ring(r, true, fmt, ap);
    va_end(ap);
}

bool ring_stopped(const ring *r)
{
    return atomic_load(&r->sh->stopped) != 0 && atomic_load(&r->sh->broken) != NOT_BROKEN;
}

const char *ring_error(const ring *r)
{
    /* The breaker writes its reason right after flagging; give it a moment. */
    for (int i = 0; i < 100 && atomic_load(&r->sh->broken) == BREAKING; i++)
        sleep_seconds(0.001);
    switch (atomic_load(&r->sh->broken)) {
    case NOT_BROKEN: return "";
    case IS_BROKEN: return r->sh->error;
    default: return "ring marked broken; the process marking it did not record why";
    }
}

/* ---- creating, attaching, closing --------------------------------------------------------- */

typedef struct {
    size_t meta_offset, data_offset, total_bytes;
} layout;

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static int layout_for(ring_geometry *g, layout *l, const char *name, char **err)
{
    if (g->slot_bytes == 0 || g->n_slots < 2 || g->n_slots > MAX_SLOTS || g->n_producers < 1)
        return report_failure(err,
                              "ring %s: bad geometry: slot_bytes %zu (> 0), n_slots %u "
                              "(2..%u), n_producers %u (>= 1)",
                              name, g->slot_bytes, g->n_slots, MAX_SLOTS, g->n_producers);
    uint32_t n = 2;
    while (n < g->n_slots)
        n *= 2;
    g->n_slots = n;
    if (g->slot_bytes > SIZE_MAX / 2 / n)
        return report_failure(err, "ring %s: %u slots of %zu bytes do not fit in memory", name,
                              n, g->slot_bytes);
    g->slot_bytes = round_up(g->slot_bytes, PAGE_BYTES);
    l->meta_offset = PAGE_BYTES;
    l->data_offset = l->meta_offset + round_up((size_t)n * META_BYTES, PAGE_BYTES);
    l->total_bytes = l->data_offset + (size_t)n * g->slot_bytes;
    return 0;
}

static bool valid_name(const char *name)
{
    size_t len = strlen(name);
    return len > 0 && len <= MAX_LABEL + 32 && !strchr(name, '/');
}

static char *shm_path(const char *name)
{
    return xasprintf("/%s", name);
}

static ring *new_handle(const char *name, ring_role role)
{
    ring *r = xcalloc(1, sizeof *r);
    r->name = xstrdup(name);
    r->role = role;
    r->pid = getpid();
    r->next_check_ns = coarse_ns() + RING_CHECK_MS * NS_PER_MS;
    return r;
}

static void free_handle(ring *r)
{
    if (r->sh)
        munmap(r->sh, r->map_bytes);
    free(r->held);
    free(r->name);
    free(r);
}

/* Fill in the handle's view of a mapped, initialised segment. */
static void bind_mapping(ring *r, void *base, size_t bytes)
{
    r->sh = base;
    r->map_bytes = bytes;
    r->n_slots = r->sh->n_slots;
    r->mask = r->n_slots - 1;
    r->slot_bytes = (size_t)r->sh->slot_bytes;
    r->meta = (slot_meta *)((unsigned char *)base + r->sh->meta_offset);
    r->data = (unsigned char *)base + r->sh->data_offset;
}

static void init_shared(ring_shared *sh, const ring_geometry *g, const layout *l)
{
    sh->version = RING_VERSION;
    sh->n_slots = g->n_slots;
    sh->slot_bytes = g->slot_bytes;
    sh->meta_offset = l->meta_offset;
    sh->data_offset = l->data_offset;
    sh->total_bytes = l->total_bytes;
    sh->n_producers = g->n_producers;
    sh->creator_pid = (int32_t)getpid();
    slot_meta *meta = (slot_meta *)((unsigned char *)sh + l->meta_offset);
    for (uint32_t i = 0; i < g->n_slots; i++)
        atomic_init(&meta[i].seq, i);
    atomic_store_explicit(&sh->magic, RING_MAGIC, memory_order_release);
}

/* Map the whole segment, its pages populated up front so no process takes page faults in the
 * middle of the stream. */
static void *map_segment(int fd, size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

ring *ring_create(const char *name, const ring_geometry *geo, ring_role role, char **err)
{
    if (!valid_name(name)) {
        report_failure(err, "ring name '%s' is not a valid shared-memory name", name);
        return NULL;
    }
    ring_geometry g = *geo;
    layout l = {0};
    if (layout_for(&g, &l, name, err))
        return NULL;
    char *path = shm_path(name);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        report_failure(err, "ring %s: cannot create /dev/shm/%s: %s%s", name, name,
                       strerror(errno),
                       errno == EEXIST ? " (left by a dead run? `ring_sweep_stale` or rm it)"
                                       : "");
        free(path);
        return NULL;
    }
    /* Reserve the memory now: running out of /dev/shm is an error here, not a SIGBUS later. */
    off_t bytes = (off_t)l.total_bytes;
    int rc = ftruncate(fd, bytes) ? errno : posix_fallocate(fd, 0, bytes);
    void *base = rc ? NULL : map_segment(fd, l.total_bytes);
    if (!base) {
        report_failure(err, "ring %s: cannot make a %zu-byte segment in /dev/shm: %s", name,
                       l.total_bytes, strerror(rc ? rc : errno));
        close(fd);
        shm_unlink(path);
        free(path);
        return NULL;
    }
    close(fd);
    free(path);
    init_shared(base, &g, &l);
    ring *r = new_handle(name, role);
    r->creator = true;
    bind_mapping(r, base, l.total_bytes);
    if (register_process(r, err)) {
        ring_unlink(name);
        free_handle(r);
        return NULL;
    }
    return r;
}

/* Does this mapping hold a complete header that agrees with the segment's size? */
static const char *check_header(const ring_shared *sh, size_t bytes)
{
    if (sh->version != RING_VERSION)
        return "made by another version of selfsup";
    if (sh->total_bytes != bytes || sh->n_slots < 2 || (sh->n_slots & (sh->n_slots - 1)) ||
        sh->data_offset + (uint64_t)sh->n_slots * sh->slot_bytes != sh->total_bytes)
        return "its header is corrupt";
    return NULL;
}

/* One try: 0 attached (*out set), 1 not there yet, -1 failed (*err set). */
static int try_attach(const char *name, ring_role role, ring **out, char **err)
{
    char *path = shm_path(name);
    int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
    free(path);
    if (fd < 0)
        return errno == ENOENT ? 1 : report_failure(err, "ring %s: cannot open: %s", name,
                                                    strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || (size_t)st.st_size < PAGE_BYTES) {
        close(fd);
        return 1; /* the creator has not sized it yet */
    }
    void *base = map_segment(fd, (size_t)st.st_size);
    close(fd);
    if (!base)
        return report_failure(err, "ring %s: cannot map: %s", name, strerror(errno));
    ring_shared *sh = base;
    if (atomic_load_explicit(&sh->magic, memory_order_acquire) != RING_MAGIC) {
        munmap(base, (size_t)st.st_size);
        return 1; /* the creator has not finished the header yet */
    }
    const char *bad = check_header(sh, (size_t)st.st_size);
    if (bad) {
        munmap(base, (size_t)st.st_size);
        return report_failure(err, "ring %s: cannot attach: %s", name, bad);
    }
    ring *r = new_handle(name, role);
    bind_mapping(r, base, (size_t)st.st_size);
    if (register_process(r, err)) {
        free_handle(r);
        return -1;
    }
    *out = r;
    return 0;
}

ring *ring_attach(const char *name, ring_role role, int wait_ms, char **err)
{
    if (!valid_name(name)) {
        report_failure(err, "ring name '%s' is not a valid shared-memory name", name);
        return NULL;
    }
    uint64_t deadline = wait_ms < 0 ? UINT64_MAX : now_ns() + (uint64_t)wait_ms * NS_PER_MS;
    for (;;) {
        ring *r = NULL;
        int rc = try_attach(name, role, &r, err);
        if (rc <= 0)
            return r;
        if (now_ns() >= deadline) {
            report_failure(err,
                           "ring %s: /dev/shm/%s did not appear within %d ms (is the stage "
                           "that creates it running?)",
                           name, name, wait_ms);
            return NULL;
        }
        sleep_seconds(ATTACH_POLL_MS / 1000.0);
    }
}

/* Give back what the caller still holds: a producer's claimed slots become holes, a
 * consumer's are released, so that closing never strands the others. */
static void give_back_held(ring *r)
{
    while (r->n_held > 0) {
        ring_slot slot = {.ticket = r->held[r->n_held - 1]};
        if (r->role == RING_PRODUCER)
            ring_write_abort(r, &slot);
        else
            ring_read_end(r, &slot);
    }
}

/* Count this close towards end-of-stream or towards "no readers", then deregister. */
static void leave(ring *r)
{
    ring_shared *sh = r->sh;
    if (r->role == RING_PRODUCER) {
        uint32_t closed = atomic_fetch_add(&sh->producers_closed, 1) + 1;
        if (closed == sh->n_producers) {
            /* Every producer has published all it claimed, so every ticket before the head
             * is published: that is where the stream ends. */
            atomic_store(&sh->end_ticket, atomic_load(&sh->head));
            atomic_store(&sh->eos, 1);
            wake_everyone(r);
        }
    } else if (r->role == RING_CONSUMER) {
        uint32_t closed = atomic_fetch_add(&sh->consumers_closed, 1) + 1;
        if (closed >= atomic_load(&sh->consumers_attached))
            wake_everyone(r);
    }
    deregister_process(r);
}

void ring_close(ring *r)
{
    if (!r)
        return;
    bool unlink_it = false;
    if (r->pid == getpid()) { /* not a copy inherited through fork() */
        give_back_held(r);
        leave(r);
        bool finished = atomic_load(&r->sh->eos) || atomic_load(&r->sh->broken) != NOT_BROKEN;
        /* The orchestrator (an observer) owns its run's rings. Otherwise the last one out of a
         * finished ring removes the name — never a producer that created the ring and is
         * done early: a writer that starts later would make a second ring of the same name,
         * and the reader would wait on the first for it forever. */
        unlink_it = (r->creator && r->role == RING_OBSERVER) || (finished && !others_attached(r));
    }
    char *name = xstrdup(r->name);
    free_handle(r);
    if (unlink_it)
        ring_unlink(name);
    free(name);
}

int ring_unlink(const char *name)
{
    char *path = shm_path(name);
    int rc = shm_unlink(path);
    free(path);
    return rc == 0 || errno == ENOENT ? 0 : -1;
}

/* ---- names -------------------------------------------------------------------------------- */

char *ring_name(const char *label)
{
    strbuf sb = {0};
    sb_printf(&sb, "selfsup.%d.", (int)getpid());
    /* Anything outside [A-Za-z0-9_-] becomes '_', so the name is always a valid one. */
    for (size_t i = 0; label[i] && i < MAX_LABEL; i++) {
        unsigned char c = (unsigned char)label[i];
        sb_putc(&sb, isalnum(c) || c == '_' || c == '-' ? (char)c : '_');
    }
    return sb.s;
}

/* The <pid> of a "selfsup.<pid>.<label>" name, or 0. */
static pid_t name_pid(const char *name)
{
    const char *prefix = "selfsup.";
    if (strncmp(name, prefix, strlen(prefix)) != 0)
        return 0;
    const char *p = name + strlen(prefix);
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (end == p || *end != '.' || errno || pid <= 0 || pid > INT_MAX)
        return 0;
    return (pid_t)pid;
}

static bool pid_running(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char state;
    uint64_t start;
    int rc = proc_read_stat(pid, &state, &start);
    if (rc == ENOENT || rc == ESRCH)
        return false;
    return rc != 0 || (state != 'Z' && state != 'X');
}

int ring_sweep_stale(void)
{
    DIR *dir = opendir("/dev/shm");
    if (!dir)
        return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        pid_t pid = name_pid(de->d_name);
        if (pid && !pid_running(pid) && ring_unlink(de->d_name) == 0) {
            log_debug("removed stale ring /dev/shm/%s (pid %d is gone)", de->d_name, (int)pid);
            removed++;
        }
    }
    closedir(dir);
    return removed;
}

/* ---- observation -------------------------------------------------------------------------- */

size_t ring_slot_bytes(const ring *r)
{
    return r->slot_bytes;
}

uint32_t ring_n_slots(const ring *r)
{
    return r->n_slots;
}

uint32_t ring_fill(const ring *r)
{
    uint64_t tail = atomic_load(&r->sh->tail), head = atomic_load(&r->sh->head);
    uint32_t fill = 0;
    for (uint64_t t = tail; (int64_t)(head - t) > 0 && t - tail < r->n_slots; t++)
        if (atomic_load(&meta_of(r, t)->seq) == t + 1)
            fill++;
    return fill;
}

const char *ring_get_name(const ring *r)
{
    return r->name;
}

void *ring_data_area(const ring *r, size_t *bytes)
{
    if (bytes)
        *bytes = (size_t)r->n_slots * r->slot_bytes;
    return r->data;
}

void ring_forge_start_time_for_test(ring *r, uint64_t start_time)
{
    atomic_store(&r->sh->procs[r->proc_index].start_time, start_time);
}

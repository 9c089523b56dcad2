/*
 * ring.h — a shared-memory ring of fixed-size slots between processes: many producers, many
 * consumers, each record delivered to exactly one consumer, zero copies.
 *
 * Layout of the POSIX shared-memory segment (/dev/shm/NAME, mode 0600):
 *
 *   ring_shared   one page: geometry, tickets, end-of-stream and broken state, and the
 *                 table of attached processes (pid + start time, role, state)
 *   slot meta     one cache line per slot: its sequence word, waiter count, record length
 *   slot data     n_slots × slot_bytes, each slot 4096-byte aligned (page-aligned, so a
 *                 trainer can cudaHostRegister the whole area)
 *
 * The queue is Vyukov's bounded MPMC queue with the copy taken out: a writer waits until
 * slot[head % n] is free for the ticket at the head, takes that ticket (a compare-and-swap on
 * the head, so a wait that times out holds nothing), builds its record in place, then
 * publishes it by advancing the slot's sequence word. A reader does the same on the tail and
 * releases the slot when it is done reading in place.
 * Waits spin briefly, then sleep on a futex on the sequence word, waking at least every
 * RING_CHECK_MS to check that the peers it depends on are alive.
 *
 * End of stream: the ring is created for a known number of producers. When that many have
 * closed, the last ticket is fixed; readers drain everything before it and then get RING_EOS.
 *
 * Crash safety: every process that attaches is registered (pid and its start time, so a
 * recycled pid is not mistaken for a live peer). A waiter that finds a registered peer dead
 * (gone without detaching) marks the ring broken with a message naming it, and every waiter
 * in every process returns RING_BROKEN within RING_CHECK_MS. A dead producer may have left a
 * half-written slot and a dead consumer may hold a slot: the ring cannot be trusted after
 * either, so it fails loudly instead of hanging or guessing.
 *
 * Naming: ring_name() makes "selfsup.<pid>.<label>" so that segments are unique per run and
 * a stale one can be traced to its creator; ring_sweep_stale() removes those whose creator
 * is gone. The creator unlinks; ring_close() of the last process on a finished ring also
 * unlinks, so a run killed in any way leaves nothing behind once its stages are gone.
 */
#ifndef SELFSUP_RING_H
#define SELFSUP_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_MAX_PROCS 64
#define RING_CHECK_MS 100

typedef enum { RING_PRODUCER = 1, RING_CONSUMER = 2, RING_OBSERVER = 3 } ring_role;

typedef enum {
    RING_OK = 0,
    RING_EOS = 1,      /* reader: every producer closed and everything was read */
    RING_TIMEOUT = 2,  /* the wait passed timeout_ms; call again (nothing was claimed) */
    RING_BROKEN = -1,  /* a peer died, or the ring was marked broken; see ring_error() */
    RING_NO_READERS = -2, /* writer: every consumer closed; nothing more will be read */
} ring_status;

typedef struct ring ring;

typedef struct {
    void *data;      /* writer: slot_bytes to fill; reader: the record */
    size_t len;      /* reader: bytes published; writer: slot_bytes */
    uint64_t ticket; /* internal */
} ring_slot;

typedef struct {
    size_t slot_bytes;     /* capacity of one slot; rounded up to 4096 */
    uint32_t n_slots;      /* ≥ 2; rounded up to a power of two */
    uint32_t n_producers;  /* EOS after this many ring_close() by producers (≥ 1) */
} ring_geometry;

/* "selfsup.<pid>.<label>" in a malloc'd string; label is [A-Za-z0-9_-]. */
char *ring_name(const char *label);

/* Create the segment (fails if it exists) and attach as `role` (RING_OBSERVER for an
 * orchestrator that only watches). Returns NULL with *err on failure. */
ring *ring_create(const char *name, const ring_geometry *geo, ring_role role, char **err);
/* Attach to an existing segment, waiting up to wait_ms for it to appear. */
ring *ring_attach(const char *name, ring_role role, int wait_ms, char **err);
/* Detach. A producer's close counts towards end-of-stream. Unlinks the segment when this
 * process created it, or when it is the last attached process of a finished (EOS or broken)
 * ring. Safe on NULL. */
void ring_close(ring *r);
/* Unlink by name (the orchestrator's cleanup); 0 when removed or already gone. */
int ring_unlink(const char *name);
/* Remove /dev/shm/selfsup.<pid>.* segments whose <pid> no longer runs. Returns how many. */
int ring_sweep_stale(void);

/* Writer: claim a free slot (data = slot_bytes of space). timeout_ms < 0 waits forever
 * (still checking peers every RING_CHECK_MS). */
ring_status ring_write_begin(ring *r, ring_slot *slot, int timeout_ms);
/* Publish the claimed slot with `len` bytes of record (≤ slot_bytes). */
void ring_write_end(ring *r, ring_slot *slot, size_t len);
/* Give back a claimed slot without a record (readers skip it), e.g. when it did not fit. */
void ring_write_abort(ring *r, ring_slot *slot);

/* Reader: claim the next published record. */
ring_status ring_read_begin(ring *r, ring_slot *slot, int timeout_ms);
/* Release a slot after reading it in place. */
void ring_read_end(ring *r, ring_slot *slot);

/* Mark the ring broken (every waiter returns RING_BROKEN) with a reason for the logs. */
void ring_break(ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A producer was stopped before its stream was complete: break the ring with a reason, marked
 * as a stop (readers then know the stream is short because its writer was stopped, not
 * because something failed; ring_stopped says which, unless a failure broke it first). */
void ring_stop(ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether the ring broke because a producer was stopped (ring_stop). */
bool ring_stopped(const ring *r);
/* The reason the ring is broken ("" if it is not). */
const char *ring_error(const ring *r);

/* Geometry and observation, for the orchestrator's progress line and for benchmarks. */
size_t ring_slot_bytes(const ring *r);
uint32_t ring_n_slots(const ring *r);
uint32_t ring_fill(const ring *r); /* published, not yet claimed by a reader */
const char *ring_get_name(const ring *r);
/* The slot data area (for cudaHostRegister) and its size. */
void *ring_data_area(const ring *r, size_t *bytes);

#endif

/*
 * leases.h — the lease book: which farm host decodes which samples, so that a host lost in
 * mid-epoch loses no sample (selfsup-collate --lease-serve, the trainer's side of the decode
 * farm; the hosts' side is selfsup-decode --lease).
 *
 * The trainer's side owns the sampler order. Farm hosts ask it for work and get leases:
 * ranges [start, end) of positions in one epoch of the rank's sampler order, dealt in order.
 * The book marks each sample as it reaches collate (lease_book_received), so a lease is done
 * when all of its samples came, whoever sent them. A host that falls silent for the host
 * timeout is lost: the samples of its leases that have not arrived are dealt again, before
 * anything new, to the hosts still there. Its records that arrive late anyway are
 * duplicates, which lease_book_received reports so that collate drops them. A sample's crops
 * depend only on (seed, epoch, sample, transform), so a sample dealt again is the same bytes,
 * whichever host makes it.
 *
 * Dealing stays within `window` positions of the consumer: the first sample of the batch
 * collate writes next (lease_book_consumed). Collate's reorder buffer then holds at most a
 * window and a lease of samples, however far one host runs ahead and however slow the
 * trainer is. A host holds at most LEASES_PER_HOST unfinished leases (the one it decodes and
 * the next), so that a slow host does not sit on the window.
 *
 * Positions count across epochs: g = (epoch - first_epoch) * per_epoch + position, from
 * first_pos (a resumed run starts in mid-epoch) to epochs * per_epoch. A lease never
 * crosses an epoch. This is bookkeeping only: no sockets, and no clock (callers pass `now`).
 */
#ifndef SELFSUP_LEASES_H
#define SELFSUP_LEASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LEASES_PER_HOST 2

typedef struct {
    uint64_t id;
    uint32_t epoch;
    uint64_t start, end; /* positions in the epoch's sampler order */
} lease;

typedef enum {
    LEASE_GIVEN, /* *out is the host's new lease */
    LEASE_WAIT,  /* nothing for this host now: ask again shortly */
    LEASE_DONE   /* every sample of the run has arrived */
} lease_answer;

typedef struct {
    uint32_t first_epoch, epochs; /* the epochs to deal */
    uint64_t first_pos;           /* where the first of them starts (a resumed run) */
    uint64_t lease_len;           /* samples per lease */
    uint64_t window;              /* how far past the floor leases are dealt */
} lease_plan;

typedef struct {
    uint64_t dealt, redealt;    /* leases, first time and again */
    uint64_t duplicates;        /* samples that came twice */
    uint64_t lost_hosts, lost_samples;
} lease_stats;

/* One farm host as the book sees it (selfsup status, the progress line). */
typedef struct {
    const char *name;
    const char *state;  /* "live", "lost" (silent too long) or "gone" (said it is finished) */
    uint64_t leases;    /* leases dealt to it, first time or again */
    uint64_t held;      /* of them, unfinished now */
    uint64_t samples;   /* samples that reached collate while one of its leases covered them */
    uint64_t losses;    /* times it was judged lost */
    double last_seen;   /* the `now` of its last message */
} lease_host_view;

typedef struct lease_book lease_book;

lease_book *lease_book_new(const lease_plan *plan);
void lease_book_free(lease_book *b);

/* The epoch's length in the rank's order, as a farm host sees its dataset. The first host
 * sets it; 0 when a later one agrees, -1 when it does not (that host must be refused). */
int lease_book_set_epoch_len(lease_book *b, uint64_t per_epoch);
uint64_t lease_book_epoch_len(const lease_book *b);

/* A message came from `host`: it is alive (a lost host that speaks again is back). */
void lease_book_seen(lease_book *b, const char *host, double now);
/* `host` asks for work. */
lease_answer lease_book_deal(lease_book *b, const char *host, double now, lease *out);
/* Sample `pos` of `epoch` reached collate: 1 when it is new, 0 for a duplicate (it came
 * already), -1 when no lease ever covered it (a stranger's record, or a bug). */
int lease_book_received(lease_book *b, uint32_t epoch, uint64_t pos);
/* Collate has written every batch before position `pos` of `epoch`: the window moves on. */
void lease_book_consumed(lease_book *b, uint32_t epoch, uint64_t pos);
/* Hosts silent for `timeout` seconds are lost and their missing samples dealt again (each
 * loss is logged, naming the host, its leases and the samples dealt again). Returns how many
 * hosts were lost now. */
int lease_book_expire(lease_book *b, double now, double timeout);
/* `host` says it has finished (no lease of its is still out). */
void lease_book_leave(lease_book *b, const char *host);

bool lease_book_done(const lease_book *b);
/* Hosts that are neither lost nor gone; and whether any host ever joined. */
int lease_book_live_hosts(const lease_book *b);
bool lease_book_anyone_joined(const lease_book *b);
/* The names of the live hosts, i = 0 … live - 1 (for telling them the run is done). */
const char *lease_book_live_host(const lease_book *b, int i);
/* Samples still to arrive. */
uint64_t lease_book_remaining(const lease_book *b);
/* Every host that ever joined, i = 0 … count - 1, in the order they joined. */
int lease_book_hosts(const lease_book *b);
lease_host_view lease_book_host(const lease_book *b, int i);
lease_stats lease_book_stats(const lease_book *b);

#endif

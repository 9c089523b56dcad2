/*
 * leases.c — the lease book (see leases.h).
 *
 * How it works. Global positions g run from first_pos to total = epochs * per_epoch. Four
 * cursors and a queue describe the whole state:
 *   - consumed: collate has written every batch before it (consumed <= floor);
 *   - the floor: every sample before it has arrived;
 *   - next_fresh: every position before it has been dealt at least once;
 *   - arrived: one bit per position from the floor on, in a ring of window + lease_len bits
 *     (nothing past consumed + window is dealt, so nothing later can arrive);
 *   - again: ranges of lost hosts' missing samples, dealt before anything fresh.
 * An outstanding lease is finished when every sample of it has arrived; finished leases are
 * dropped from the table whenever their host asks for more, or is judged.
 */
#include "collate/leases.h"

#include "log.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    double last_seen;
    bool lost, gone;
    uint64_t leases, samples, losses; /* for lease_book_host */
} host;

typedef struct {
    lease l;
    uint64_t g0, g1; /* its global range */
    int host;
} out_lease;

typedef struct {
    uint64_t g0, g1;
} range;

struct lease_book {
    lease_plan plan;
    uint64_t per_epoch, total;
    uint64_t consumed, floor, next_fresh, next_id;
    uint8_t *arrived; /* ring of ring_bits bits, bit (g % ring_bits) for position g >= floor */
    uint64_t ring_bits;
    host *hosts;
    int n_hosts;
    out_lease *out;
    size_t n_out, cap_out;
    range *again;
    size_t n_again, cap_again;
    lease_stats stats;
};

lease_book *lease_book_new(const lease_plan *plan)
{
    lease_book *b = xcalloc(1, sizeof *b);
    b->plan = *plan;
    b->plan.lease_len = plan->lease_len ? plan->lease_len : 1;
    b->plan.window = plan->window > b->plan.lease_len ? plan->window : b->plan.lease_len;
    b->ring_bits = b->plan.window + b->plan.lease_len;
    b->arrived = xcalloc((size_t)(b->ring_bits + 7) / 8, 1);
    b->consumed = b->floor = b->next_fresh = plan->first_pos;
    b->next_id = 1;
    return b;
}

void lease_book_free(lease_book *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n_hosts; i++)
        free(b->hosts[i].name);
    free(b->hosts);
    free(b->out);
    free(b->again);
    free(b->arrived);
    free(b);
}

int lease_book_set_epoch_len(lease_book *b, uint64_t per_epoch)
{
    if (b->per_epoch)
        return per_epoch == b->per_epoch ? 0 : -1;
    if (per_epoch == 0 || b->plan.first_pos > per_epoch)
        return -1;
    b->per_epoch = per_epoch;
    b->total = (uint64_t)b->plan.epochs * per_epoch;
    return 0;
}

uint64_t lease_book_epoch_len(const lease_book *b) { return b->per_epoch; }

/* ---- arrivals ------------------------------------------------------------------------------ */

static bool bit(const lease_book *b, uint64_t g)
{
    uint64_t k = g % b->ring_bits;
    return b->arrived[k / 8] >> (k % 8) & 1;
}

static void set_bit(lease_book *b, uint64_t g, bool on)
{
    uint64_t k = g % b->ring_bits;
    if (on)
        b->arrived[k / 8] |= (uint8_t)(1u << (k % 8));
    else
        b->arrived[k / 8] &= (uint8_t)~(1u << (k % 8));
}

static bool has_arrived(const lease_book *b, uint64_t g)
{
    return g < b->floor || (g < b->floor + b->ring_bits && bit(b, g));
}

/* Whether g was ever dealt: fresh positions before next_fresh, or one of the ranges dealt again. */
static bool was_dealt(const lease_book *b, uint64_t g)
{
    return g >= b->plan.first_pos && g < b->next_fresh;
}

/* The host whose lease covers g gets the sample in its count (none: a lost host's sample
 * not dealt again yet). */
static void credit_holder(lease_book *b, uint64_t g)
{
    for (size_t i = 0; i < b->n_out; i++)
        if (g >= b->out[i].g0 && g < b->out[i].g1) {
            b->hosts[b->out[i].host].samples++;
            return;
        }
}

int lease_book_received(lease_book *b, uint32_t epoch, uint64_t pos)
{
    if (!b->per_epoch || epoch < b->plan.first_epoch || pos >= b->per_epoch)
        return -1;
    uint64_t g = (uint64_t)(epoch - b->plan.first_epoch) * b->per_epoch + pos;
    if (g >= b->total || !was_dealt(b, g))
        return -1;
    if (has_arrived(b, g)) {
        b->stats.duplicates++;
        return 0;
    }
    set_bit(b, g, true);
    credit_holder(b, g);
    while (b->floor < b->total && bit(b, b->floor)) {
        set_bit(b, b->floor, false);
        b->floor++;
    }
    return 1;
}

static bool finished(const lease_book *b, const out_lease *o)
{
    for (uint64_t g = o->g0 > b->floor ? o->g0 : b->floor; g < o->g1; g++)
        if (!has_arrived(b, g))
            return false;
    return true;
}

/* Drop the finished leases from the table. */
static void sweep(lease_book *b)
{
    size_t k = 0;
    for (size_t i = 0; i < b->n_out; i++)
        if (!finished(b, &b->out[i]))
            b->out[k++] = b->out[i];
    b->n_out = k;
}

/* ---- hosts ---------------------------------------------------------------------------------- */

static int find_host(lease_book *b, const char *name)
{
    for (int i = 0; i < b->n_hosts; i++)
        if (!strcmp(b->hosts[i].name, name))
            return i;
    b->hosts = xrealloc(b->hosts, (size_t)(b->n_hosts + 1) * sizeof *b->hosts);
    b->hosts[b->n_hosts] = (host){.name = xstrdup(name)};
    return b->n_hosts++;
}

void lease_book_seen(lease_book *b, const char *name, double now)
{
    int i = find_host(b, name); /* first: it may move the table */
    host *h = &b->hosts[i];
    if (h->lost)
        log_info("farm host %s is back", h->name);
    h->last_seen = now;
    h->lost = h->gone = false;
}

static size_t held_by(const lease_book *b, int h)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n_out; i++)
        n += b->out[i].host == h;
    return n;
}

/* ---- dealing -------------------------------------------------------------------------------- */

static void push_again(lease_book *b, uint64_t g0, uint64_t g1)
{
    if (b->n_again == b->cap_again) {
        b->cap_again = b->cap_again ? 2 * b->cap_again : 16;
        b->again = xrealloc(b->again, b->cap_again * sizeof *b->again);
    }
    b->again[b->n_again++] = (range){g0, g1};
}

/* The next range to deal: the oldest range dealt again, else the next fresh one within the
 * window. Cut to a lease and to its epoch. false: nothing to deal now. */
static bool next_range(lease_book *b, uint64_t *g0, uint64_t *g1, bool *again)
{
    while (b->n_again > 0) {
        size_t best = 0;
        for (size_t i = 1; i < b->n_again; i++)
            if (b->again[i].g0 < b->again[best].g0)
                best = i;
        range *r = &b->again[best];
        while (r->g0 < r->g1 && has_arrived(b, r->g0)) /* came meanwhile, late from the lost host */
            r->g0++;
        if (r->g0 >= r->g1) {
            *r = b->again[--b->n_again];
            continue;
        }
        *g0 = r->g0;
        *g1 = r->g1;
        *again = true;
        return true;
    }
    if (b->next_fresh >= b->total || b->next_fresh >= b->consumed + b->plan.window)
        return false;
    *g0 = b->next_fresh;
    *g1 = b->total;
    *again = false;
    return true;
}

static void cut(const lease_book *b, uint64_t g0, uint64_t *g1)
{
    uint64_t epoch_end = (g0 / b->per_epoch + 1) * b->per_epoch;
    if (*g1 > epoch_end)
        *g1 = epoch_end;
    if (*g1 - g0 > b->plan.lease_len)
        *g1 = g0 + b->plan.lease_len;
}

static void take(lease_book *b, uint64_t g0, uint64_t g1, bool again)
{
    if (!again) {
        b->next_fresh = g1;
        return;
    }
    for (size_t i = 0; i < b->n_again; i++)
        if (b->again[i].g0 == g0) {
            b->again[i].g0 = g1;
            if (b->again[i].g0 >= b->again[i].g1)
                b->again[i] = b->again[--b->n_again];
            return;
        }
}

lease_answer lease_book_deal(lease_book *b, const char *name, double now, lease *out)
{
    lease_book_seen(b, name, now);
    if (b->per_epoch && b->floor >= b->total)
        return LEASE_DONE;
    int h = find_host(b, name);
    sweep(b);
    uint64_t g0, g1;
    bool again;
    if (!b->per_epoch || held_by(b, h) >= LEASES_PER_HOST || !next_range(b, &g0, &g1, &again))
        return LEASE_WAIT;
    cut(b, g0, &g1);
    take(b, g0, g1, again);
    *out = (lease){.id = b->next_id++,
                   .epoch = b->plan.first_epoch + (uint32_t)(g0 / b->per_epoch),
                   .start = g0 % b->per_epoch,
                   .end = (g1 - 1) % b->per_epoch + 1};
    if (b->n_out == b->cap_out) {
        b->cap_out = b->cap_out ? 2 * b->cap_out : 16;
        b->out = xrealloc(b->out, b->cap_out * sizeof *b->out);
    }
    b->out[b->n_out++] = (out_lease){.l = *out, .g0 = g0, .g1 = g1, .host = h};
    b->hosts[h].leases++;
    if (again)
        b->stats.redealt++;
    else
        b->stats.dealt++;
    return LEASE_GIVEN;
}

void lease_book_consumed(lease_book *b, uint32_t epoch, uint64_t pos)
{
    if (!b->per_epoch || epoch < b->plan.first_epoch)
        return;
    uint64_t g = (uint64_t)(epoch - b->plan.first_epoch) * b->per_epoch + pos;
    if (g > b->consumed)
        b->consumed = g < b->floor ? g : b->floor;
}

/* ---- losing a host -------------------------------------------------------------------------- */

/* Put each run of samples in [g0, g1) that has not arrived up to be dealt again; how many. */
static uint64_t push_missing(lease_book *b, uint64_t g0, uint64_t g1)
{
    uint64_t n = 0, run_start = 0;
    bool in_run = false;
    for (uint64_t g = g0; g <= g1; g++) {
        bool gap = g < g1 && !has_arrived(b, g);
        n += gap;
        if (gap && !in_run)
            run_start = g, in_run = true;
        else if (!gap && in_run)
            push_again(b, run_start, g), in_run = false;
    }
    return n;
}

/* Put the missing samples of host h's leases up to be dealt again; drop its leases. */
static uint64_t give_back(lease_book *b, int h)
{
    uint64_t missing = 0;
    size_t k = 0;
    for (size_t i = 0; i < b->n_out; i++) {
        out_lease *o = &b->out[i];
        if (o->host != h) {
            b->out[k++] = *o;
            continue;
        }
        uint64_t n = push_missing(b, o->g0 > b->floor ? o->g0 : b->floor, o->g1);
        if (n > 0)
            log_warn("farm host %s lost lease %llu (epoch %u, samples %llu-%llu): %llu of its samples are dealt again",
                     b->hosts[h].name, (unsigned long long)o->l.id, o->l.epoch, (unsigned long long)o->l.start,
                     (unsigned long long)o->l.end - 1, (unsigned long long)n);
        missing += n;
    }
    b->n_out = k;
    return missing;
}

int lease_book_expire(lease_book *b, double now, double timeout)
{
    int lost = 0;
    for (int h = 0; h < b->n_hosts; h++) {
        host *x = &b->hosts[h];
        if (x->lost || x->gone || now - x->last_seen < timeout)
            continue;
        x->lost = true;
        x->losses++;
        uint64_t missing = give_back(b, h);
        log_warn("farm host %s is lost (silent for %.1f s); %llu samples of its leases are dealt again", x->name,
                 now - x->last_seen, (unsigned long long)missing);
        b->stats.lost_hosts++;
        b->stats.lost_samples += missing;
        lost++;
    }
    return lost;
}

void lease_book_leave(lease_book *b, const char *name)
{
    int h = find_host(b, name);
    b->hosts[h].gone = true;
    give_back(b, h);
}

/* ---- questions -------------------------------------------------------------------------------- */

bool lease_book_done(const lease_book *b) { return b->per_epoch && b->floor >= b->total; }

int lease_book_live_hosts(const lease_book *b)
{
    int n = 0;
    for (int i = 0; i < b->n_hosts; i++)
        n += !b->hosts[i].lost && !b->hosts[i].gone;
    return n;
}

bool lease_book_anyone_joined(const lease_book *b) { return b->n_hosts > 0; }

const char *lease_book_live_host(const lease_book *b, int i)
{
    for (int h = 0; h < b->n_hosts; h++)
        if (!b->hosts[h].lost && !b->hosts[h].gone && i-- == 0)
            return b->hosts[h].name;
    return NULL;
}

uint64_t lease_book_remaining(const lease_book *b)
{
    if (!b->per_epoch)
        return 0;
    uint64_t n = 0;
    for (uint64_t g = b->floor; g < b->total && g < b->floor + b->ring_bits; g++)
        n += !bit(b, g);
    return n + (b->total > b->floor + b->ring_bits ? b->total - b->floor - b->ring_bits : 0);
}

lease_stats lease_book_stats(const lease_book *b) { return b->stats; }

int lease_book_hosts(const lease_book *b) { return b->n_hosts; }

lease_host_view lease_book_host(const lease_book *b, int i)
{
    const host *x = &b->hosts[i];
    lease_host_view v = {.name = x->name, .state = x->lost ? "lost" : x->gone ? "gone" : "live",
                         .leases = x->leases, .samples = x->samples, .losses = x->losses,
                         .last_seen = x->last_seen};
    for (size_t k = 0; k < b->n_out; k++)
        v.held += b->out[k].host == i && !finished(b, &b->out[k]);
    return v;
}

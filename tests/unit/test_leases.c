/*
 * test_leases.c — the lease book of the decode farm (stages/collate/leases.h), by its rules:
 * leases in order, cut at epochs and at the lease length; the window past the floor; two
 * unfinished leases a host; a lost host's missing samples (and only those) dealt again before
 * anything new; duplicates and strangers told apart; the run done when every sample came.
 * Plus a random farm whose hosts die and come back, checked against the invariant that
 * matters: every sample of every epoch arrives, and collate never holds more than a window.
 */
#include "collate/leases.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t s;
} rng_state;

/* splitmix64: the random farm's choices, reproducible per seed */
static uint64_t rng_next(rng_state *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static lease_book *book(uint32_t first_epoch, uint32_t epochs, uint64_t first_pos, uint64_t len, uint64_t window,
                        uint64_t per_epoch)
{
    lease_plan p = {.first_epoch = first_epoch, .epochs = epochs, .first_pos = first_pos, .lease_len = len,
                    .window = window};
    lease_book *b = lease_book_new(&p);
    cr_assert_eq(lease_book_set_epoch_len(b, per_epoch), 0);
    return b;
}

static lease deal_ok(lease_book *b, const char *host)
{
    lease l;
    cr_assert_eq(lease_book_deal(b, host, 0, &l), LEASE_GIVEN, "%s got no lease", host);
    return l;
}

static void arrive(lease_book *b, const lease *l)
{
    for (uint64_t p = l->start; p < l->end; p++)
        cr_assert_eq(lease_book_received(b, l->epoch, p), 1, "epoch %u sample %llu", l->epoch, (unsigned long long)p);
}

Test(leases, leases_come_in_order_cut_at_the_length_and_at_each_epoch)
{
    lease_book *b = book(3, 2, 0, 4, 100, 10);
    const uint64_t want[][3] = {{3, 0, 4}, {3, 4, 8}, {3, 8, 10}, {4, 0, 4}, {4, 4, 8}, {4, 8, 10}};
    for (size_t i = 0; i < 6; i++) {
        lease l = deal_ok(b, i % 2 ? "farm.1" : "farm.0");
        cr_assert(l.epoch == want[i][0] && l.start == want[i][1] && l.end == want[i][2],
                  "lease %zu: epoch %u [%llu, %llu)", i, l.epoch, (unsigned long long)l.start,
                  (unsigned long long)l.end);
        cr_assert_eq(l.id, i + 1);
        arrive(b, &l);
    }
    lease l;
    cr_assert_eq(lease_book_deal(b, "farm.0", 0, &l), LEASE_DONE);
    cr_assert(lease_book_done(b));
    lease_book_free(b);
}

Test(leases, a_resumed_run_starts_in_mid_epoch)
{
    lease_book *b = book(2, 1, 6, 4, 100, 10);
    lease l = deal_ok(b, "farm.0");
    cr_assert(l.epoch == 2 && l.start == 6 && l.end == 10);
    cr_assert_eq(lease_book_received(b, 2, 5), -1, "sample 5 was done before the resume");
    arrive(b, &l);
    cr_assert(lease_book_done(b));
    lease_book_free(b);
}

Test(leases, nothing_is_dealt_before_the_epoch_length_is_known_and_hosts_must_agree_on_it)
{
    lease_plan p = {.epochs = 1, .lease_len = 4, .window = 8};
    lease_book *b = lease_book_new(&p);
    lease l;
    cr_assert_eq(lease_book_deal(b, "farm.0", 0, &l), LEASE_WAIT);
    cr_assert_eq(lease_book_set_epoch_len(b, 0), -1, "an empty epoch");
    cr_assert_eq(lease_book_set_epoch_len(b, 12), 0);
    cr_assert_eq(lease_book_set_epoch_len(b, 12), 0);
    cr_assert_eq(lease_book_set_epoch_len(b, 13), -1, "a host whose dataset differs");
    cr_assert_eq(lease_book_epoch_len(b), 12);
    lease_book_free(b);
}

Test(leases, a_host_holds_two_unfinished_leases_and_gets_more_as_they_finish)
{
    lease_book *b = book(0, 1, 0, 4, 100, 40);
    lease a = deal_ok(b, "farm.0"), c = deal_ok(b, "farm.0"), l;
    cr_assert_eq(lease_book_deal(b, "farm.0", 0, &l), LEASE_WAIT);
    lease other = deal_ok(b, "farm.1");
    cr_assert_eq(other.start, 8, "another host still gets work");
    for (uint64_t p = a.start; p + 1 < a.end; p++)
        lease_book_received(b, a.epoch, p);
    cr_assert_eq(lease_book_deal(b, "farm.0", 0, &l), LEASE_WAIT, "lease 1 lacks a sample");
    lease_book_received(b, a.epoch, a.end - 1);
    l = deal_ok(b, "farm.0");
    cr_assert_eq(l.start, 12);
    (void)c;
    lease_book_free(b);
}

Test(leases, nothing_past_the_window_is_dealt_until_collate_writes_batches)
{
    lease_book *b = book(0, 1, 0, 4, 8, 100);
    lease l1 = deal_ok(b, "farm.0"), l2 = deal_ok(b, "farm.1"), l;
    cr_assert_eq(l2.start, 4);
    arrive(b, &l2); /* the second lease came first */
    cr_assert_eq(lease_book_deal(b, "farm.1", 0, &l), LEASE_WAIT, "8 samples past the consumer are out already");
    arrive(b, &l1);
    cr_assert_eq(lease_book_deal(b, "farm.1", 0, &l), LEASE_WAIT, "all came, but a slow trainer took none");
    lease_book_consumed(b, 0, 4); /* one batch of 4 written */
    l = deal_ok(b, "farm.1");
    cr_assert_eq(l.start, 8);
    cr_assert_eq(lease_book_deal(b, "farm.0", 0, &l), LEASE_WAIT, "the window is full again");
    lease_book_consumed(b, 0, 50); /* beyond what arrived: held to the floor */
    l = deal_ok(b, "farm.0");
    cr_assert_eq(l.start, 12);
    cr_assert_eq(lease_book_deal(b, "farm.0", 0, &l), LEASE_WAIT, "consumed went no further than the floor (8)");
    cr_assert_eq(lease_book_remaining(b), 92);
    lease_book_free(b);
}

Test(leases, a_lost_hosts_missing_samples_are_dealt_again_first_and_only_those)
{
    lease_book *b = book(0, 1, 0, 8, 100, 64);
    lease_book_seen(b, "farm.1", 0);
    lease a = deal_ok(b, "farm.0"); /* [0, 8) */
    lease_book_seen(b, "farm.0", 0);
    lease_book_received(b, 0, 0);
    lease_book_received(b, 0, 1);
    lease_book_received(b, 0, 5);
    lease_book_seen(b, "farm.1", 9);
    cr_assert_eq(lease_book_expire(b, 9.5, 10), 0, "not silent long enough");
    cr_assert_eq(lease_book_expire(b, 10.5, 10), 1, "farm.0 is lost");
    cr_assert_eq(lease_book_live_hosts(b), 1);
    cr_assert_str_eq(lease_book_live_host(b, 0), "farm.1");
    lease r1 = deal_ok(b, "farm.1"), r2 = deal_ok(b, "farm.1");
    cr_assert(r1.start == 2 && r1.end == 5, "dealt again: [%llu, %llu)", (unsigned long long)r1.start,
              (unsigned long long)r1.end);
    cr_assert(r2.start == 6 && r2.end == 8, "dealt again: [%llu, %llu)", (unsigned long long)r2.start,
              (unsigned long long)r2.end);
    lease_stats st = lease_book_stats(b);
    cr_assert_eq(st.lost_hosts, 1);
    cr_assert_eq(st.lost_samples, 5);
    cr_assert_eq(st.redealt, 2);
    /* the lost host was only slow: its late records are duplicates */
    cr_assert_eq(lease_book_received(b, 0, 2), 1);
    cr_assert_eq(lease_book_received(b, 0, 2), 0);
    cr_assert_eq(lease_book_stats(b).duplicates, 1);
    (void)a;
    lease_book_free(b);
}

Test(leases, a_range_dealt_again_skips_what_came_late_meanwhile)
{
    lease_book *b = book(0, 1, 0, 8, 100, 16);
    deal_ok(b, "farm.0"); /* [0, 8) */
    lease_book_seen(b, "farm.1", 20);
    lease_book_expire(b, 20, 10);
    for (uint64_t p = 0; p < 3; p++) /* the lost host's records still in flight */
        lease_book_received(b, 0, p);
    lease l = deal_ok(b, "farm.1");
    cr_assert(l.start == 3 && l.end == 8, "[%llu, %llu)", (unsigned long long)l.start, (unsigned long long)l.end);
    lease_book_free(b);
}

Test(leases, strangers_and_samples_never_dealt_are_refused)
{
    lease_book *b = book(1, 2, 0, 4, 100, 10);
    deal_ok(b, "farm.0");
    cr_assert_eq(lease_book_received(b, 1, 4), -1, "not dealt yet");
    cr_assert_eq(lease_book_received(b, 0, 0), -1, "an epoch before the run");
    cr_assert_eq(lease_book_received(b, 3, 0), -1, "an epoch after it");
    cr_assert_eq(lease_book_received(b, 1, 10), -1, "past the epoch's end");
    cr_assert_eq(lease_book_received(b, 1, 3), 1);
    lease_book_free(b);
}

Test(leases, a_host_that_speaks_again_is_back_and_a_host_that_leaves_is_not_live)
{
    lease_book *b = book(0, 1, 0, 4, 100, 10);
    cr_assert_not(lease_book_anyone_joined(b));
    lease_book_seen(b, "farm.0", 0);
    cr_assert(lease_book_anyone_joined(b));
    lease_book_expire(b, 30, 10);
    cr_assert_eq(lease_book_live_hosts(b), 0);
    lease_book_seen(b, "farm.0", 31);
    cr_assert_eq(lease_book_live_hosts(b), 1);
    lease_book_leave(b, "farm.0");
    cr_assert_eq(lease_book_live_hosts(b), 0);
    lease_book_free(b);
}

/* What selfsup status shows of each host: its leases, what it holds, the samples that came
 * under its leases, its losses; a lost host's samples dealt again count for the new holder. */
Test(leases, each_host_is_shown_with_its_leases_samples_and_losses)
{
    lease_book *b = book(0, 1, 0, 4, 100, 12);
    lease a1 = deal_ok(b, "farm.0"), a2 = deal_ok(b, "farm.0"), b1 = deal_ok(b, "farm.1");
    arrive(b, &a1);
    cr_assert_eq(lease_book_received(b, a2.epoch, a2.start), 1); /* 1 of a2's 4 */
    arrive(b, &b1);
    cr_assert_eq(lease_book_hosts(b), 2);
    lease_host_view v0 = lease_book_host(b, 0), v1 = lease_book_host(b, 1);
    cr_assert_str_eq(v0.name, "farm.0");
    cr_assert_str_eq(v0.state, "live");
    cr_assert(v0.leases == 2 && v0.held == 1 && v0.samples == 5 && v0.losses == 0, "farm.0: %llu %llu %llu %llu",
              (unsigned long long)v0.leases, (unsigned long long)v0.held, (unsigned long long)v0.samples,
              (unsigned long long)v0.losses);
    cr_assert(v1.leases == 1 && v1.held == 0 && v1.samples == 4);
    lease_book_seen(b, "farm.1", 9);
    cr_assert_eq(lease_book_expire(b, 10, 5), 1); /* farm.0, silent since 0 */
    v0 = lease_book_host(b, 0);
    cr_assert_str_eq(v0.state, "lost");
    cr_assert(v0.losses == 1 && v0.held == 0 && v0.last_seen == 0);
    lease again = deal_ok(b, "farm.1");
    cr_assert(again.start == a2.start + 1 && again.end == a2.end);
    arrive(b, &again);
    v1 = lease_book_host(b, 1);
    cr_assert(v1.leases == 2 && v1.samples == 7, "farm.1: %llu leases, %llu samples", (unsigned long long)v1.leases,
              (unsigned long long)v1.samples);
    lease_book_leave(b, "farm.1");
    cr_assert_str_eq(lease_book_host(b, 1).state, "gone");
    lease_book_free(b);
}

/* A farm of 3 hosts over 3 epochs: each step a random host asks for work, sends part of what
 * it holds (in any order), or dies, losing what it held; dead hosts come back. */
typedef struct {
    lease held[LEASES_PER_HOST * 4];
    int n;
    bool dead;
    double last;
} sim_host;

static void sim_send_some(lease_book *b, sim_host *h, rng_state *r, int *seen, uint64_t per_epoch, uint64_t window,
                          const uint64_t *consumed)
{
    if (h->n == 0)
        return;
    int k = (int)(rng_next(r) % (uint64_t)h->n);
    lease *l = &h->held[k];
    uint64_t p = l->start + rng_next(r) % (l->end - l->start);
    int got = lease_book_received(b, l->epoch, p);
    cr_assert_neq(got, -1, "a dealt sample was refused");
    seen[l->epoch * per_epoch + p] += got;
    cr_assert_lt(l->epoch * per_epoch + p, *consumed + window + 16, "a sample past the window and a lease came");
    if (rng_next(r) % 4 == 0 || got == 0) { /* the lease is sent through */
        for (uint64_t q = l->start; q < l->end; q++)
            seen[l->epoch * per_epoch + q] += lease_book_received(b, l->epoch, q) == 1;
        h->held[k] = h->held[--h->n];
    }
}

/* Collate writes a batch (of 10) now and then, when its samples are all there. */
static void sim_consume(lease_book *b, rng_state *r, const int *seen, uint64_t total, uint64_t per_epoch,
                        uint64_t *consumed)
{
    if (rng_next(r) % 3 != 0)
        return;
    uint64_t end = *consumed + 10 < total ? *consumed + 10 : total;
    for (uint64_t g = *consumed; g < end; g++)
        if (!seen[g])
            return;
    *consumed = end;
    lease_book_consumed(b, (uint32_t)(end / per_epoch), end % per_epoch);
}

Test(leases, a_random_farm_with_dying_hosts_delivers_every_sample_once)
{
    enum { HOSTS = 3, EPOCHS = 3 };
    const uint64_t per_epoch = 250, window = 40;
    uint64_t lost = 0, redealt = 0, duplicates = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        lease_book *b = book(0, EPOCHS, 0, 16, window, per_epoch);
        rng_state r = {seed};
        sim_host hosts[HOSTS] = {0};
        int *seen = calloc(EPOCHS * per_epoch, sizeof *seen);
        const char *names[HOSTS] = {"farm.0", "farm.1", "farm.2"};
        double now = 0;
        uint64_t consumed = 0;
        for (int step = 0; step < 200000 && !lease_book_done(b); step++) {
            now += 0.01;
            int i = (int)(rng_next(&r) % HOSTS);
            sim_host *h = &hosts[i];
            uint64_t what = rng_next(&r) % 100;
            if (h->dead) {
                if (what < 2) /* restarted: a fresh host under the same name */
                    h->dead = false, h->n = 0;
                continue;
            }
            if (what < 1 && hosts[(i + 1) % HOSTS].dead == false) { /* dies, keeping one host alive */
                h->dead = true;
                continue;
            }
            h->last = now;
            lease l;
            if (what < 30 && lease_book_deal(b, names[i], now, &l) == LEASE_GIVEN)
                h->held[h->n++] = l;
            else
                lease_book_seen(b, names[i], now), sim_send_some(b, h, &r, seen, per_epoch, window, &consumed);
            sim_consume(b, &r, seen, EPOCHS * per_epoch, per_epoch, &consumed);
            lease_book_expire(b, now, 1.0);
        }
        cr_assert(lease_book_done(b), "seed %llu: the farm never finished (%llu samples missing)",
                  (unsigned long long)seed, (unsigned long long)lease_book_remaining(b));
        for (uint64_t g = 0; g < EPOCHS * per_epoch; g++)
            cr_assert_eq(seen[g], 1, "seed %llu: sample %llu of epoch %llu arrived %d times as new",
                         (unsigned long long)seed, (unsigned long long)(g % per_epoch),
                         (unsigned long long)(g / per_epoch), seen[g]);
        lease_stats st = lease_book_stats(b);
        lost += st.lost_hosts, redealt += st.redealt, duplicates += st.duplicates;
        free(seen);
        lease_book_free(b);
    }
    /* the farm did lose hosts, deal leases again and see late records, or it proved nothing */
    cr_assert(lost > 20 && redealt > 20 && duplicates > 0, "lost %llu hosts, dealt %llu leases again, %llu duplicates",
              (unsigned long long)lost, (unsigned long long)redealt, (unsigned long long)duplicates);
}

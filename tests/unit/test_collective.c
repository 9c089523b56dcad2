/*
 * test_collective.c — the collectives (shm/collective.h) among 2, 3 and 4 forked ranks, in
 * both worlds of host memory: shm (suite collective) and the network world of coll_net.h
 * (suite collective_net: the ranks meet at a loopback port, with CURVE keys made by
 * `selfsup keygen`). Every test runs in both, and their results are the same bits.
 *
 *  - all-reduce (sum, mean, max), all-gather and broadcast against their definitions, computed
 *    here by plain loops: a reduction is the ranks' values combined in rank order in fp32
 *    (bf16: widened, combined, rounded once to nearest even), and every rank must hold exactly
 *    those bits; sizes 0, 1, a prime, and buffers many slots long;
 *  - the same bits whatever order the ranks arrive in;
 *  - a rank that dies, hangs, makes another call or never joins fails every other rank with a
 *    message naming it (never a hang), and nothing is left in /dev/shm.
 *
 * The ranks are forked children; each writes its result and its error message into a shared
 * anonymous mapping, and the test process checks them.
 */
#include "coll_net.h"
#include "coll_watch.h"
#include "collective.h"
#include "ring.h"
#include "timer.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 4
#define OUT_BYTES ((size_t)4 << 20)
#define SMALL_SLOT 16384 /* 4096 fp32 values: a prime count of 10007 takes 3 steps (shm slots, net pieces) */

/* What one call does: the collective, its dtype, count, op or root, and how the ranks misbehave. */
typedef struct {
    enum { DO_REDUCE, DO_GATHER, DO_BROADCAST, DO_BARRIER } what;
    coll_dtype dtype;
    coll_op op;
    int root;
    size_t count;
    int world;
    unsigned delay_seed; /* each rank sleeps a few ms chosen by this before calling */
    int dies, hangs_ms;  /* rank `dies` (≥ 1) exits before calling; rank `hangs_ms`'s … */
    int hung_rank;       /* … sleeps hangs_ms first */
    int joiners;         /* how many ranks start (0: all) */
    int timeout_ms;
    int calls;     /* the collective made this many times (0: once) */
    bool mismatch; /* rank 1 makes an all-gather of count - 2 instead */
    const char *key_file; /* the network world: ranks > 0 use this key file (NULL: ranks.key) */
} plan;

/* Each rank's slice of the shared mapping: its exit, its error, its output. */
typedef struct {
    int ok;
    double waited_s;
    char err[600];
    uint8_t out[OUT_BYTES];
} rank_result;

static rank_result *g_results;
static unsigned g_world_counter;
static char *g_keys; /* the network world's: a key directory, ranks.key for ranks > 0 */

static void setup(void)
{
    g_results =
        mmap(NULL, MAX_RANKS * sizeof *g_results, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(g_results != MAP_FAILED);
}

/* The keys of `selfsup keygen`: ranks.key may claim world.*, stranger.key only farm.*. */
static void setup_net(void)
{
    setup();
    g_keys = test_make_tmpdir();
    char *bin = test_build_path("selfsup"), *out = NULL;
    char *cmd = xasprintf("%s keygen %s/keys --clients 'ranks:world.*' 'stranger:farm.*'", bin, g_keys);
    cr_assert_eq(test_run(cmd, &out), 0, "%s: %s", cmd, out);
    free(cmd), free(bin), free(out);
}

static void teardown(void)
{
    munmap(g_results, MAX_RANKS * sizeof *g_results);
    if (g_keys)
        test_rm_rf(g_keys);
    free(g_keys);
    g_keys = NULL;
}

TestSuite(collective, .init = setup, .fini = teardown);
TestSuite(collective_net, .init = setup_net, .fini = teardown);

/* A test of both worlds: its body, run in suite collective (shm) and collective_net. */
#define BOTH_WORLDS(test, ...)                                                                                    \
    static void test##_body(void);                                                                                \
    Test(collective, test, __VA_ARGS__) { test##_body(); }                                                        \
    Test(collective_net, test, __VA_ARGS__) { test##_body(); }                                                    \
    static void test##_body(void)

/* ---- inputs and references ------------------------------------------------------------------- */

/* Rank r's value i: signs and magnitudes from 1e-3 to 1e5 mixed, so the order of a sum shows. */
static float input_value(int r, size_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
    h = h * 1664525u + 1013904223u;
    float mant = (float)((int)(h >> 8 & 0xffff) - 32768) / 32768.0f;
    static const float scale[5] = {1e-3f, 1.0f, 37.0f, 1e3f, 1e5f};
    return mant * scale[(h >> 28) % 5];
}

/* Rank r's value i as it is sent in dtype: fp64 values carry bits fp32 cannot hold. */
static double stored_value(int r, size_t i, coll_dtype dtype)
{
    float v = input_value(r, i);
    if (dtype == COLL_BF16)
        return coll_bf16_to_f32(coll_f32_to_bf16(v));
    return dtype == COLL_F64 ? (double)v * (1.0 + 1e-12 * (double)(i % 7 + 1)) : v;
}

static void fill_input(void *buf, int r, size_t count, coll_dtype dtype)
{
    for (size_t i = 0; i < count; i++) {
        double v = stored_value(r, i, dtype);
        if (dtype == COLL_BF16)
            ((uint16_t *)buf)[i] = coll_f32_to_bf16((float)v);
        else if (dtype == COLL_F64)
            ((double *)buf)[i] = v;
        else
            ((float *)buf)[i] = (float)v;
    }
}

static double value_at(const void *buf, size_t i, coll_dtype dtype)
{
    return dtype == COLL_BF16  ? coll_bf16_to_f32(((const uint16_t *)buf)[i])
           : dtype == COLL_F64 ? ((const double *)buf)[i]
                               : ((const float *)buf)[i];
}

static const char *dtype_name(coll_dtype dtype)
{
    return dtype == COLL_BF16 ? "bf16" : dtype == COLL_F64 ? "fp64" : "fp32";
}

/* The definition in double (fp64): rank order, one rounding at each step. */
static double reference_f64(const plan *p, size_t i)
{
    double acc = 0;
    for (int r = 0; r < p->world; r++) {
        double x = stored_value(r, i, COLL_F64);
        acc = r == 0 ? x : p->op == COLL_MAX ? (isnan(acc) || acc > x ? acc : x) : acc + x;
    }
    return p->op == COLL_MEAN ? acc / (double)p->world : acc;
}

/* The definition: rank order, fp32, one rounding to bf16 at the end. */
static double reference_reduce(const plan *p, size_t i)
{
    if (p->dtype == COLL_F64)
        return reference_f64(p, i);
    float acc = 0;
    for (int r = 0; r < p->world; r++) {
        float x = (float)stored_value(r, i, p->dtype);
        if (r == 0)
            acc = x;
        else if (p->op == COLL_MAX)
            acc = isnan(acc) || acc > x ? acc : x;
        else
            acc = acc + x;
    }
    if (p->op == COLL_MEAN)
        acc = acc / (float)p->world;
    return p->dtype == COLL_BF16 ? coll_bf16_to_f32(coll_f32_to_bf16(acc)) : acc;
}

/* ---- the ranks --------------------------------------------------------------------------------- */

static int call_once(coll *c, const plan *p, void *buf, void *recv, char **err)
{
    int rank = coll_rank(c);
    if (p->mismatch && rank == 1)
        return coll_all_gather(c, buf, recv, p->count - 2, p->dtype, err);
    switch (p->what) {
    case DO_REDUCE: return coll_all_reduce(c, buf, p->count, p->dtype, p->op, err);
    case DO_GATHER: return coll_all_gather(c, buf, recv, p->count, p->dtype, err);
    case DO_BROADCAST: return coll_broadcast(c, buf, p->count, p->dtype, p->root, err);
    default: return coll_barrier(c, err);
    }
}

/* Join the world `name` names: a segment, or in the network world a loopback port. */
static coll *join(const char *name, int rank, const plan *p, char **err)
{
    int timeout_ms = p->timeout_ms ? p->timeout_ms : 20000;
    if (!g_keys) {
        coll_shm_options o = {.timeout_ms = timeout_ms, .slot_bytes = SMALL_SLOT};
        return coll_shm_join(name, rank, p->world, &o, err);
    }
    char *dir = xasprintf("%s/keys", g_keys), *file = xasprintf("%s/keys/ranks.key", g_keys);
    coll_net_options o = {.timeout_ms = timeout_ms,
                          .keys_dir = dir,
                          .key_file = p->key_file ? p->key_file : file,
                          .piece_bytes = SMALL_SLOT};
    coll *c = coll_net_join(name, rank, p->world, &o, err);
    free(dir), free(file);
    return c;
}

/* One rank's life: join, misbehave as planned, call, leave its result. Never returns. */
static void rank_main(const char *name, int rank, const plan *p)
{
    rank_result *res = &g_results[rank];
    char *err = NULL;
    coll *c = join(name, rank, p, &err);
    size_t esz = coll_dtype_bytes(p->dtype);
    uint8_t *buf = xcalloc(p->count + 1, esz), *recv = xcalloc((size_t)p->world * p->count + 1, esz);
    fill_input(buf, rank, p->count, p->dtype);
    int rc = c ? 0 : -1;
    if (c && p->dies == rank && rank > 0)
        _exit(0);
    if (c && p->hangs_ms && rank == p->hung_rank)
        usleep((useconds_t)p->hangs_ms * 1000);
    if (c)
        usleep((useconds_t)((p->delay_seed * 7919u + (unsigned)rank * 104729u) % 5000u));
    double t0 = now_seconds();
    for (int k = 0; rc == 0 && k < (p->calls ? p->calls : 1); k++)
        rc = call_once(c, p, buf, recv, &err);
    res->waited_s = now_seconds() - t0;
    const uint8_t *out = p->what == DO_GATHER ? recv : buf;
    size_t bytes = (p->what == DO_GATHER ? (size_t)p->world : 1) * p->count * esz;
    memcpy(res->out, out, bytes < OUT_BYTES ? bytes : OUT_BYTES);
    snprintf(res->err, sizeof res->err, "%s", err ? err : "");
    res->ok = rc == 0;
    coll_close(c);
    _exit(rc == 0 ? 0 : 1);
}

/* Run the plan on its world of forked ranks; returns the segment's name (to check it is gone). */
static char *run_world(const plan *p)
{
    char label[48];
    snprintf(label, sizeof label, "colltest%u", g_world_counter++);
    char *name = g_keys ? xasprintf("127.0.0.1:%d", test_free_port()) : ring_name(label);
    memset(g_results, 0, MAX_RANKS * sizeof *g_results);
    int started = p->joiners ? p->joiners : p->world;
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < started; r++) {
        pids[r] = fork();
        cr_assert(pids[r] >= 0);
        if (pids[r] == 0)
            rank_main(name, r, p);
    }
    for (int r = 0; r < started; r++) {
        int st = test_wait_child(pids[r], 60000);
        cr_assert_neq(st, 128 + SIGKILL, "rank %d did not end within 60 s", r);
    }
    return name;
}

static void expect_no_segment(const char *name)
{
    if (g_keys)
        return; /* the network world has none */
    char *path = xasprintf("/dev/shm/%s", name);
    cr_expect_neq(access(path, F_OK), 0, "%s was left behind", path);
    free(path);
}

/* Every rank succeeded and holds `want`'s bits for every value. */
static void expect_reduced(const plan *p)
{
    for (int r = 0; r < p->world; r++) {
        cr_assert(g_results[r].ok, "world %d, rank %d: %s", p->world, r, g_results[r].err);
        for (size_t i = 0; i < p->count; i++) {
            double got = value_at(g_results[r].out, i, p->dtype), want = reference_reduce(p, i);
            cr_assert(memcmp(&got, &want, sizeof got) == 0 || (isnan(got) && isnan(want)),
                      "world %d, %s, op %d, count %zu: rank %d value %zu is %.9g, rank order gives %.9g",
                      p->world, dtype_name(p->dtype), (int)p->op, p->count, r, i, got, want);
        }
    }
}

/* ---- against the definitions ------------------------------------------------------------------ */

BOTH_WORLDS(all_reduce_combines_in_rank_order_for_every_op_dtype_and_size, .timeout = 120)
{
    static const size_t counts[] = {0, 1, 10007};
    for (int world = 2; world <= 4; world++)
        for (int dt = 0; dt < 3; dt++)
            for (int op = 0; op < 3; op++)
                for (size_t k = 0; k < ARRAY_LEN(counts); k++) {
                    plan p = {.what = DO_REDUCE,
                              .dtype = (coll_dtype)dt,
                              .op = (coll_op)op,
                              .count = counts[k],
                              .world = world,
                              .delay_seed = (unsigned)k};
                    char *name = run_world(&p);
                    expect_reduced(&p);
                    expect_no_segment(name);
                    free(name);
                }
}

/* Not a vacuous order: the inputs make a sum in another order differ somewhere, and the fp32
 * sums stay within fp32's error of the exact (double) sum. */
Test(collective, the_inputs_make_the_order_of_a_sum_show)
{
    plan p = {.dtype = COLL_F32, .op = COLL_SUM, .world = 4, .count = 10007};
    size_t differs = 0;
    for (size_t i = 0; i < p.count; i++) {
        float fwd = reference_reduce(&p, i), back = input_value(3, i);
        double exact = 0, magnitude = 0;
        for (int r = 2; r >= 0; r--)
            back = back + input_value(r, i);
        for (int r = 0; r < 4; r++)
            exact += input_value(r, i), magnitude += fabs(input_value(r, i));
        differs += memcmp(&fwd, &back, sizeof fwd) != 0;
        cr_assert_leq(fabs(fwd - exact), 4 * FLT_EPSILON * magnitude, "value %zu: %.9g against %.17g", i, fwd,
                      exact);
    }
    cr_assert_gt(differs, 100, "only %zu of 10007 sums depend on the order", differs);
}

BOTH_WORLDS(results_do_not_depend_on_the_order_the_ranks_arrive_in, .timeout = 60)
{
    uint8_t *first = xmalloc(10007 * sizeof(float));
    for (unsigned seed = 0; seed < 4; seed++) {
        plan p = {.what = DO_REDUCE,
                  .dtype = COLL_F32,
                  .op = COLL_SUM,
                  .count = 10007,
                  .world = 3,
                  .delay_seed = seed * 977u + 1};
        free(run_world(&p));
        expect_reduced(&p);
        for (int r = 0; r < 3; r++) {
            if (seed == 0 && r == 0)
                memcpy(first, g_results[0].out, 10007 * sizeof(float));
            cr_assert_arr_eq(g_results[r].out, first, 10007 * sizeof(float), "delays %u, rank %d", seed, r);
        }
    }
    free(first);
}

/* Many steps of a small slot, and several calls in a row (each step alternates the slot sets). */
BOTH_WORLDS(buffers_many_slots_long_and_calls_in_a_row, .timeout = 60)
{
    plan p = {
        .what = DO_REDUCE, .dtype = COLL_BF16, .op = COLL_MEAN, .count = 300007, .world = 3, .calls = 1};
    free(run_world(&p));
    expect_reduced(&p);
    /* An all-gather called 5 times: the last result is the first (the inputs do not change). */
    plan g = {.what = DO_GATHER, .dtype = COLL_F32, .count = 20011, .world = 4, .calls = 5};
    free(run_world(&g));
    for (int r = 0; r < 4; r++) {
        cr_assert(g_results[r].ok, "rank %d: %s", r, g_results[r].err);
        for (int q = 0; q < 4; q++)
            for (size_t i = 0; i < g.count; i += 97)
                cr_assert_eq(((float *)g_results[r].out)[(size_t)q * g.count + i], input_value(q, i));
    }
}

BOTH_WORLDS(all_gather_and_broadcast_match_their_definitions, .timeout = 120)
{
    static const size_t counts[] = {0, 1, 10007};
    for (int world = 2; world <= 4; world++)
        for (int dt = 0; dt < 3; dt++)
            for (size_t k = 0; k < ARRAY_LEN(counts); k++) {
                plan g = {.what = DO_GATHER, .dtype = (coll_dtype)dt, .count = counts[k], .world = world};
                free(run_world(&g));
                for (int r = 0; r < world; r++) {
                    cr_assert(g_results[r].ok, "gather, world %d rank %d: %s", world, r, g_results[r].err);
                    for (int q = 0; q < world; q++)
                        for (size_t i = 0; i < g.count; i++) {
                            double want = stored_value(q, i, g.dtype);
                            cr_assert_eq(value_at(g_results[r].out, (size_t)q * g.count + i, g.dtype), want,
                                         "gather, world %d: rank %d's copy of rank %d's value %zu", world, r,
                                         q, i);
                        }
                }
                for (int root = 0; root < world; root++) {
                    plan b = {.what = DO_BROADCAST,
                              .dtype = (coll_dtype)dt,
                              .count = counts[k],
                              .world = world,
                              .root = root};
                    free(run_world(&b));
                    for (int r = 0; r < world; r++) {
                        cr_assert(g_results[r].ok, "broadcast, world %d rank %d: %s", world, r,
                                  g_results[r].err);
                        for (size_t i = 0; i < b.count; i++) {
                            double want = stored_value(root, i, b.dtype);
                            cr_assert_eq(value_at(g_results[r].out, i, b.dtype), want,
                                         "broadcast from %d, rank %d", root, r);
                        }
                    }
                }
            }
}

BOTH_WORLDS(a_barrier_waits_for_the_last_rank, .timeout = 30)
{
    plan p = {.what = DO_BARRIER, .world = 3, .hangs_ms = 300, .hung_rank = 2};
    free(run_world(&p));
    for (int r = 0; r < 3; r++)
        cr_assert(g_results[r].ok, "rank %d: %s", r, g_results[r].err);
    for (int r = 0; r < 2; r++)
        cr_expect_geq(g_results[r].waited_s, 0.25, "rank %d left the barrier after %.3f s", r,
                      g_results[r].waited_s);
}

/* torch's bf16: round to nearest, ties to even; NaN becomes 0x7fc0; past the largest, infinity. */
Test(collective, bf16_rounds_as_torch_does)
{
    static const struct {
        uint32_t f32;
        uint16_t bf16;
    } cases[] = {{0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81},
                 {0xbf80ffff, 0xbf81}, {0x7f800000, 0x7f80}, {0x7fc00001, 0x7fc0}, {0x7f7fffff, 0x7f80},
                 {0x00000001, 0x0000}, {0x80000000, 0x8000}};
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        float f;
        memcpy(&f, &cases[k].f32, sizeof f);
        cr_expect_eq(coll_f32_to_bf16(f), cases[k].bf16, "0x%08x -> 0x%04x, want 0x%04x", cases[k].f32,
                     coll_f32_to_bf16(f), cases[k].bf16);
    }
    cr_expect_eq(coll_bf16_to_f32(0x4049), 3.140625f);
}

/* ---- failures ---------------------------------------------------------------------------------- */

BOTH_WORLDS(different_calls_fail_every_rank_naming_both, .timeout = 30)
{
    plan p = {.what = DO_REDUCE, .dtype = COLL_F32, .count = 12, .world = 3, .mismatch = true};
    char *name = run_world(&p);
    for (int r = 0; r < 3; r++) {
        cr_expect(!g_results[r].ok, "rank %d went through", r);
        cr_expect(strstr(g_results[r].err, "all_gather of 10 fp32 (call 2)") &&
                      strstr(g_results[r].err, "all_reduce of 12 fp32 (call 2)"),
                  "rank %d: %s", r, g_results[r].err);
    }
    expect_no_segment(name);
    free(name);
}

BOTH_WORLDS(a_rank_that_dies_fails_the_others_naming_it, .timeout = 30)
{
    plan p = {
        .what = DO_REDUCE, .dtype = COLL_F32, .count = 10007, .world = 3, .dies = 1, .timeout_ms = 20000};
    char *name = run_world(&p);
    for (int r = 0; r < 3; r += 2) {
        cr_expect(!g_results[r].ok, "rank %d went through", r);
        cr_expect(strstr(g_results[r].err, "rank 1 (pid ") &&
                      strstr(g_results[r].err, g_keys ? ") left the world (its connection closed)" : ") exited"),
                  "rank %d: %s", r, g_results[r].err);
        cr_expect_lt(g_results[r].waited_s, 2.0, "rank %d learnt of the death after %.2f s", r,
                     g_results[r].waited_s);
    }
    expect_no_segment(name);
    free(name);
}

/* A live rank that does not come: named after timeout_ms; when it comes, its call fails too. */
BOTH_WORLDS(a_rank_that_hangs_fails_the_others_after_the_timeout, .timeout = 30)
{
    plan p = {.what = DO_REDUCE,
              .dtype = COLL_F32,
              .count = 100,
              .world = 2,
              .hangs_ms = 1500,
              .hung_rank = 1,
              .timeout_ms = 400};
    free(run_world(&p));
    cr_expect(!g_results[0].ok);
    cr_expect(strstr(g_results[0].err, "rank 1 did not reach all_reduce within 0.4 s"), "%s",
              g_results[0].err);
    cr_expect_lt(g_results[0].waited_s, 1.2, "the timeout took %.2f s", g_results[0].waited_s);
    cr_expect(!g_results[1].ok, "the late rank's call went through a broken world");
    cr_expect_str_eq(g_results[1].err, g_results[0].err);
}

BOTH_WORLDS(a_world_missing_a_rank_is_refused_at_the_join, .timeout = 30)
{
    plan p = {.what = DO_BARRIER, .world = 3, .joiners = 2, .timeout_ms = 300};
    char *name = run_world(&p);
    for (int r = 0; r < 2; r++) {
        cr_expect(!g_results[r].ok);
        cr_expect(strstr(g_results[r].err, "rank 2 did not reach the join within 0.3 s"), "rank %d: %s", r,
                  g_results[r].err);
    }
    expect_no_segment(name);
    free(name);
}

/* ---- a watched world (coll_watch.h) ------------------------------------------------------------ */

/* When each rank of a watched world of 3 leaves, in ms from its join (-1: it watches to the
 * end), and whether it finishes (coll_finish) or closes. The others watch until they leave or
 * for watch_ms. */
typedef struct {
    int leave_ms[3];
    bool finishes[3];
    int watch_ms;
} watch_plan;

/* What a watching rank saw: ok until its watch spoke (the watch's thread writes the message,
 * then ok), the message, how long it watched. */
typedef struct {
    _Atomic int ok;
    double waited_s;
    char err[600];
} watch_result;

static void record_loss(const char *why, void *arg)
{
    watch_result *res = arg;
    snprintf(res->err, sizeof res->err, "%s", why);
    atomic_store(&res->ok, 0);
}

/* Watch c every interval_ms until the watch speaks or `seconds` pass; res->ok was set by the
 * caller, res->waited_s is how long it watched. */
static void watch_for(coll *c, double seconds, int interval_ms, watch_result *res)
{
    char *err = NULL;
    double t0 = now_seconds();
    coll_watch *w = coll_watch_start(c, interval_ms, "the test's wait", record_loss, res, &err);
    while (w && res->ok && now_seconds() < t0 + seconds)
        usleep(2000);
    res->waited_s = now_seconds() - t0;
    coll_watch_stop(w);
    free(err);
}

static void watching_rank(const char *name, int rank, const watch_plan *wp)
{
    watch_result res = {.ok = 1};
    plan p = {.world = 3, .timeout_ms = 20000};
    char *err = NULL;
    coll *c = join(name, rank, &p, &err);
    if (c) {
        watch_for(c, (wp->leave_ms[rank] >= 0 ? wp->leave_ms[rank] : wp->watch_ms) / 1000.0, 20, &res);
        (wp->finishes[rank] ? coll_finish : coll_close)(c);
    } else {
        atomic_store(&res.ok, 0);
        snprintf(res.err, sizeof res.err, "join: %s", err);
    }
    g_results[rank].ok = res.ok, g_results[rank].waited_s = res.waited_s;
    memcpy(g_results[rank].err, res.err, sizeof res.err);
    _exit(0);
}

static void run_watch(const watch_plan *wp)
{
    char *name = g_keys ? xasprintf("127.0.0.1:%d", test_free_port()) : ring_name("collwatch");
    memset(g_results, 0, MAX_RANKS * sizeof *g_results);
    pid_t pids[3];
    for (int r = 0; r < 3; r++)
        if ((pids[r] = fork()) == 0)
            watching_rank(name, r, wp);
    for (int r = 0; r < 3; r++)
        cr_assert_neq(test_wait_child(pids[r], 30000), 128 + SIGKILL, "rank %d did not end within 30 s", r);
    free(name);
}

/* Rank 2 closes without finishing (a trainer that failed): the others' watches name it, rank
 * 1's through rank 0 in the network world, soon after, and not before. */
BOTH_WORLDS(a_watch_names_a_rank_that_leaves_without_finishing, .timeout = 40)
{
    watch_plan wp = {.leave_ms = {-1, -1, 300}, .watch_ms = 8000};
    run_watch(&wp);
    for (int r = 0; r < 2; r++) {
        cr_expect(!g_results[r].ok, "rank %d's watch said nothing in %.1f s", r, g_results[r].waited_s);
        cr_expect(strstr(g_results[r].err, "rank 2 (pid ") && strstr(g_results[r].err, "the test's wait"),
                  "rank %d: %s", r, g_results[r].err);
        cr_expect(g_results[r].waited_s > 0.25 && g_results[r].waited_s < 3.0, "rank %d: the watch spoke after %.2f s",
                  r, g_results[r].waited_s);
    }
}

/* Ranks that finish, rank 0 first: no loss for the ranks still watching. */
BOTH_WORLDS(a_watch_takes_a_rank_that_finished_for_no_loss, .timeout = 40)
{
    watch_plan wp = {.leave_ms = {200, 1500, 600}, .finishes = {true, true, true}};
    run_watch(&wp);
    for (int r = 0; r < 3; r++)
        cr_expect(g_results[r].ok, "rank %d: %s", r, g_results[r].err);
    cr_expect_gt(g_results[1].waited_s, 1.4, "rank 1 stopped watching after %.2f s", g_results[1].waited_s);
}

/* The same in one process, the ranks threads (ThreadSanitizer runs this suite; it cannot run
 * the forked ones): rank 0 leaves after 100 ms, rank 1 watches until its watch speaks or 5 s. */
typedef struct {
    const char *name;
    int rank;
    bool finishes;
    watch_result res;
} thread_rank;

static void *watch_thread_rank(void *arg)
{
    thread_rank *t = arg;
    coll_shm_options o = {.timeout_ms = 5000};
    char *err = NULL;
    coll *c = coll_shm_join(t->name, t->rank, 2, &o, &err);
    t->res.ok = c != NULL;
    if (!c) {
        snprintf(t->res.err, sizeof t->res.err, "join: %s", err);
        free(err);
        return NULL;
    }
    if (t->rank == 0) {
        usleep(100000);
        (t->finishes ? coll_finish : coll_close)(c);
        return NULL;
    }
    watch_for(c, t->finishes ? 0.6 : 5.0, 10, &t->res);
    coll_close(c);
    return NULL;
}

static void run_thread_watch(bool finishes, watch_result *watcher)
{
    char *name = ring_name("collwatcht");
    thread_rank ranks[2] = {{.name = name, .rank = 0, .finishes = finishes}, {.name = name, .rank = 1, .finishes = finishes}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        cr_assert_eq(pthread_create(&th[r], NULL, watch_thread_rank, &ranks[r]), 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    *watcher = ranks[1].res;
    free(name);
}

Test(collective_watch, a_watch_in_a_thread_names_a_rank_that_closed_and_not_one_that_finished)
{
    watch_result r;
    run_thread_watch(false, &r);
    cr_expect(!r.ok && strstr(r.err, "rank 0 (pid ") && strstr(r.err, "left the world"), "closed: %s", r.err);
    cr_expect_lt(r.waited_s, 1.0, "the watch spoke after %.2f s", r.waited_s);
    run_thread_watch(true, &r);
    cr_expect(r.ok, "finished: %s", r.err);
}

Test(collective, impossible_worlds_and_roots_are_refused)
{
    coll_shm_options o = {.timeout_ms = 100};
    char *err = NULL;
    cr_expect_null(coll_shm_join("selfsup.1.x", 2, 2, &o, &err));
    cr_expect(err && strstr(err, "rank 2 of a world of 2"), "%s", err);
    free(err);
    err = NULL;
    cr_expect_null(coll_shm_join("selfsup.1.x", 0, COLL_MAX_WORLD + 1, &o, &err));
    free(err);
    /* A world of one: every collective is the identity; a bad root is refused. */
    char *name = ring_name("collone");
    coll *c = coll_shm_join(name, 0, 1, &o, &err);
    cr_assert(c, "%s", err);
    float x[3] = {1.5f, -2, 3};
    cr_expect_eq(coll_all_reduce(c, x, 3, COLL_F32, COLL_MEAN, &err), 0);
    cr_expect(x[0] == 1.5f && x[1] == -2 && x[2] == 3);
    err = NULL;
    cr_expect_eq(coll_broadcast(c, x, 3, COLL_F32, 1, &err), -1);
    cr_expect(err && strstr(err, "broadcast from rank 1 of a world of 1"), "%s", err);
    free(err);
    coll_close(c);
    expect_no_segment(name);
    free(name);
}

/* ---- the network world's keys ------------------------------------------------------------------ */

/* A key on the allow-list whose ids are not world.*: rank 0 names it, every rank fails. */
Test(collective_net, a_key_without_the_worlds_ids_is_refused_naming_the_rank, .timeout = 30)
{
    char *stranger = xasprintf("%s/keys/stranger.key", g_keys);
    plan p = {.what = DO_BARRIER, .world = 2, .timeout_ms = 5000, .key_file = stranger};
    free(run_world(&p));
    for (int r = 0; r < 2; r++) {
        cr_expect(!g_results[r].ok, "rank %d joined", r);
        cr_expect(strstr(g_results[r].err, "rank 1 (pid ") &&
                      strstr(g_results[r].err, "came with a key whose ids do not allow world.1"),
                  "rank %d: %s", r, g_results[r].err);
    }
    free(stranger);
}

/* A key from another keygen: the handshake is refused; the rank says so, rank 0 misses it. */
Test(collective_net, a_key_not_on_the_allow_list_never_joins, .timeout = 30)
{
    char *bin = test_build_path("selfsup"), *out = NULL;
    char *cmd = xasprintf("%s keygen %s/other --clients 'ranks:world.*'", bin, g_keys);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    char *other = xasprintf("%s/other/ranks.key", g_keys);
    plan p = {.what = DO_BARRIER, .world = 2, .timeout_ms = 1000, .key_file = other};
    free(run_world(&p));
    cr_expect(!g_results[0].ok);
    cr_expect(strstr(g_results[0].err, "rank 1 did not reach the join within 1.0 s"), "%s", g_results[0].err);
    cr_expect(!g_results[1].ok);
    cr_expect(strstr(g_results[1].err, "rank 0 refused rank 1's handshake"), "%s", g_results[1].err);
    free(cmd), free(bin), free(out), free(other);
}

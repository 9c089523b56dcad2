/*
 * test_ring.c — unit tests for shm/ring: exactly-once delivery under many producer and
 * consumer processes, end of stream with uneven producers, holes from aborted writes, crash
 * safety (kill -9 at every awkward moment, pid reuse), RING_NO_READERS, stale-segment sweeps,
 * attach timeouts, and no /dev/shm segment left behind by any test.
 *
 * Every process in a test is a fork()ed child that runs one small function and _exit()s with
 * 0 for success; results that need more than an exit code go through an anonymous shared
 * mapping. No test can hang: children arm alarm(), the parent reaps them against a deadline
 * (and kills them past it), ring waits in the parent are bounded, and every Test has a
 * Criterion timeout. Nothing asserts on speed; the crash tests only require that survivors
 * hear about a death within 2 s (it takes about RING_CHECK_MS).
 */
#include "ring.h"
#include "ring_test_hooks.h"
#include "timer.h"
#include "util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_ALARM_S 60 /* a child that outlives this is hung: SIGALRM ends it */
#define TEST_TIMEOUT_S 90
#define ATTACH_MS 5000
#define DETECT_LIMIT_S 2.0 /* survivors must hear about a death within this */

/* ---- processes ------------------------------------------------------------------------ */

typedef int (*child_fn)(void *arg);

/* Run fn(arg) in a child process that exits with its result. */
static pid_t spawn(child_fn fn, void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        alarm(CHILD_ALARM_S);
        _exit(fn(arg));
    }
    return pid;
}

/* Wait for a child until `timeout_s`; kill it past that. Returns its exit code, 128+signal
 * when a signal ended it, or -1 when it had to be killed. */
static int reap(pid_t pid, double timeout_s)
{
    double deadline = now_seconds() + timeout_s;
    int status;
    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        cr_assert_neq(got, -1, "waitpid %d: %s", (int)pid, strerror(errno));
        if (now_seconds() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        sleep_seconds(0.001);
    }
}

static void reap_all_ok(const pid_t *pids, int n, double timeout_s)
{
    for (int i = 0; i < n; i++) {
        int rc = reap(pids[i], timeout_s);
        cr_assert_eq(rc, 0, "child %d (pid %d) ended with %d (-1: hung and killed)", i,
                     (int)pids[i], rc);
    }
}

/* Zeroed memory that children and the parent share. */
static void *shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED, "mmap %zu: %s", bytes, strerror(errno));
    return p;
}

/* Block until the child writes its "ready" byte, at most 10 s. */
static void wait_ready(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 10000), 1, "a child never said it was ready");
    char c;
    cr_assert_eq(read(fd, &c, 1), 1);
}

static _Noreturn void pause_forever(void)
{
    for (;;)
        pause();
}

static void say_ready(int fd)
{
    char c = 'r';
    if (write(fd, &c, 1) != 1)
        _exit(90);
}

/* A child that says it is ready (say_ready) and then waits to be killed, with the pipe it
 * says so on: the setup and tear-down of the tests that kill a child holding some state. */
typedef struct {
    pid_t pid;
    int fds[2];
} held;

/* Spawn fn(arg) with *ready_fd (a field of arg) set to a fresh pipe's write end, and wait
 * until it says it is ready. */
static held spawn_held(child_fn fn, void *arg, int *ready_fd)
{
    held h;
    cr_assert_eq(pipe(h.fds), 0);
    *ready_fd = h.fds[1];
    h.pid = spawn(fn, arg);
    wait_ready(h.fds[0]);
    return h;
}

static void held_close(held *h)
{
    close(h->fds[0]);
    close(h->fds[1]);
}

/* ---- rings ------------------------------------------------------------------------------ */

static ring *create_ring(const char *name, size_t slot_bytes, uint32_t n_slots,
                         uint32_t n_producers, ring_role role)
{
    char *err = NULL;
    ring_geometry g = {.slot_bytes = slot_bytes, .n_slots = n_slots, .n_producers = n_producers};
    ring *r = ring_create(name, &g, role, &err);
    cr_assert_not_null(r, "ring_create %s: %s", name, err ? err : "?");
    return r;
}

/* In the test process: attach, or fail the test with the reason. */
static ring *attach_ok(const char *name, ring_role role, int timeout_ms)
{
    char *err = NULL;
    ring *r = ring_attach(name, role, timeout_ms, &err);
    cr_assert_not_null(r, "%s", err);
    return r;
}

/* In a child: attach or exit with a code the parent will report. */
static ring *child_attach(const char *name, ring_role role)
{
    char *err = NULL;
    ring *r = ring_attach(name, role, ATTACH_MS, &err);
    if (!r) {
        fprintf(stderr, "child %d: %s\n", (int)getpid(), err);
        _exit(91);
    }
    return r;
}

static bool segment_exists(const char *name)
{
    char *path = xasprintf("/dev/shm/%s", name);
    bool there = access(path, F_OK) == 0;
    free(path);
    return there;
}

static void assert_no_segment(const char *name)
{
    cr_assert(!segment_exists(name), "/dev/shm/%s was left behind", name);
}

/* ---- records: (producer, counter, length, checksum, payload) ------------------------------ */

typedef struct {
    uint32_t producer, counter, len, checksum;
} rec_header;

static uint32_t fnv1a(const unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Build record (producer, counter) at dst; returns its size. */
static size_t put_record(void *dst, uint32_t producer, uint32_t counter, size_t max_payload)
{
    rec_header h = {.producer = producer, .counter = counter,
                    .len = (uint32_t)((counter * 37u + producer * 11u) % max_payload)};
    unsigned char *payload = (unsigned char *)dst + sizeof h;
    for (uint32_t i = 0; i < h.len; i++)
        payload[i] = (unsigned char)(producer * 131u + counter * 7u + i);
    h.checksum = fnv1a(payload, h.len);
    memcpy(dst, &h, sizeof h);
    return sizeof h + h.len;
}

/* Check a record read from a slot; fills *h. */
static bool record_ok(const void *src, size_t len, rec_header *h)
{
    if (len < sizeof *h)
        return false;
    memcpy(h, src, sizeof *h);
    return len == sizeof *h + h->len &&
           fnv1a((const unsigned char *)src + sizeof *h, h->len) == h->checksum;
}

/* ---- producers and consumers used by several tests ---------------------------------------- */

typedef struct {
    const char *name;
    uint32_t id;         /* producer id */
    uint32_t count;      /* records to write */
    double delay_before; /* seconds before writing / before closing */
    double delay_after;
    size_t max_payload;
} producer_job;

static int run_producer(void *arg)
{
    const producer_job *job = arg;
    ring *r = child_attach(job->name, RING_PRODUCER);
    sleep_seconds(job->delay_before);
    for (uint32_t c = 0; c < job->count; c++) {
        ring_slot s;
        ring_status st = ring_write_begin(r, &s, -1);
        if (st != RING_OK) {
            fprintf(stderr, "producer %u: write_begin %d: %s\n", job->id, st, ring_error(r));
            return 10;
        }
        ring_write_end(r, &s, put_record(s.data, job->id, c, job->max_payload));
    }
    sleep_seconds(job->delay_after);
    ring_close(r);
    return 0;
}

/* What consumers saw: seen[consumer][producer][counter] counts deliveries. */
typedef struct {
    const char *name;
    uint32_t n_producers, per_producer, n_consumers;
    uint8_t *seen;   /* shared: n_consumers × n_producers × per_producer */
    uint64_t *total; /* shared: records read, per consumer */
} tally;

typedef struct {
    tally *t;
    uint32_t id;
    double delay_before;
} consumer_job;

static int run_consumer(void *arg)
{
    const consumer_job *job = arg;
    tally *t = job->t;
    ring *r = child_attach(t->name, RING_CONSUMER);
    sleep_seconds(job->delay_before);
    uint8_t *mine = t->seen + (size_t)job->id * t->n_producers * t->per_producer;
    ring_slot s;
    ring_status st;
    while ((st = ring_read_begin(r, &s, -1)) == RING_OK) {
        rec_header h;
        if (!record_ok(s.data, s.len, &h) || h.producer >= t->n_producers ||
            h.counter >= t->per_producer) {
            fprintf(stderr, "consumer %u: bad record (%zu bytes)\n", job->id, s.len);
            return 20;
        }
        mine[(size_t)h.producer * t->per_producer + h.counter]++;
        t->total[job->id]++;
        ring_read_end(r, &s);
    }
    if (st != RING_EOS) {
        fprintf(stderr, "consumer %u: read_begin %d: %s\n", job->id, st, ring_error(r));
        return 21;
    }
    /* After the end, the end stays the end. */
    if (ring_read_begin(r, &s, 0) != RING_EOS)
        return 22;
    ring_close(r);
    return 0;
}

static tally *new_tally(const char *name, uint32_t n_producers, uint32_t per_producer,
                        uint32_t n_consumers)
{
    tally *t = shared_alloc(sizeof *t);
    *t = (tally){.name = name, .n_producers = n_producers, .per_producer = per_producer,
                 .n_consumers = n_consumers};
    t->seen = shared_alloc((size_t)n_consumers * n_producers * per_producer);
    t->total = shared_alloc(n_consumers * sizeof *t->total);
    return t;
}

/* Record (p, c) for c < counts[p] was delivered exactly once; nothing else was. */
static void assert_exactly_once(const tally *t, const uint32_t *counts)
{
    size_t per_consumer = (size_t)t->n_producers * t->per_producer;
    for (uint32_t p = 0; p < t->n_producers; p++) {
        for (uint32_t c = 0; c < t->per_producer; c++) {
            unsigned got = 0;
            for (uint32_t k = 0; k < t->n_consumers; k++)
                got += t->seen[k * per_consumer + (size_t)p * t->per_producer + c];
            unsigned want = c < counts[p] ? 1 : 0;
            cr_assert_eq(got, want, "producer %u record %u delivered %u times, want %u", p, c,
                         got, want);
        }
    }
}

/* ---- (a) stress: 4 producers × 4 consumers, a million records ------------------------------ */

Test(ring, stress_exactly_once, .timeout = TEST_TIMEOUT_S)
{
    enum { P = 4, C = 4, PER = 250000 };
    char *name = ring_name("stress");
    ring *obs = create_ring(name, 4096, 64, P, RING_OBSERVER);
    tally *t = new_tally(name, P, PER, C);
    producer_job pj[P];
    consumer_job cj[C];
    pid_t pids[P + C];
    for (uint32_t i = 0; i < C; i++) {
        cj[i] = (consumer_job){.t = t, .id = i};
        pids[i] = spawn(run_consumer, &cj[i]);
    }
    for (uint32_t i = 0; i < P; i++) {
        pj[i] = (producer_job){.name = name, .id = i, .count = PER, .max_payload = 1000};
        pids[C + i] = spawn(run_producer, &pj[i]);
    }
    reap_all_ok(pids, P + C, 80);
    uint32_t counts[P] = {PER, PER, PER, PER};
    assert_exactly_once(t, counts);
    uint64_t total = 0;
    for (int i = 0; i < C; i++)
        total += t->total[i];
    cr_assert_eq(total, (uint64_t)P * PER);
    cr_assert_str_empty(ring_error(obs));
    ring_close(obs);
    assert_no_segment(name);
    free(name);
}

/* ---- (b) end of stream -------------------------------------------------------------------- */

/* Producers that stop after different counts, at different times; consumers that start
 * early (asleep when the stream ends) and late (the ring still full at the end). */
Test(ring, eos_uneven_producers, .timeout = TEST_TIMEOUT_S)
{
    enum { P = 4, C = 3, MAX = 3000 };
    char *name = ring_name("eos");
    ring *obs = create_ring(name, 4096, 16, P, RING_OBSERVER);
    tally *t = new_tally(name, P, MAX, C);
    uint32_t counts[P] = {3000, 37, 0, 10};
    double before[P] = {0, 0.05, 0.1, 0}, after[P] = {0, 0.3, 0.05, 0.15};
    producer_job pj[P];
    consumer_job cj[C];
    pid_t pids[P + C];
    for (uint32_t i = 0; i < C; i++) {
        cj[i] = (consumer_job){.t = t, .id = i, .delay_before = i == 2 ? 0.5 : 0};
        pids[i] = spawn(run_consumer, &cj[i]);
    }
    for (uint32_t i = 0; i < P; i++) {
        pj[i] = (producer_job){.name = name, .id = i, .count = counts[i],
                               .delay_before = before[i], .delay_after = after[i],
                               .max_payload = 2000};
        pids[C + i] = spawn(run_producer, &pj[i]);
    }
    reap_all_ok(pids, P + C, 30);
    assert_exactly_once(t, counts);
    ring_close(obs);
    assert_no_segment(name);
    free(name);
}

/* Everything published before the last producer closed is read before RING_EOS. */
Test(ring, eos_drains_first, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("drain");
    ring *w = create_ring(name, 4096, 16, 1, RING_PRODUCER);
    ring *rd = attach_ok(name, RING_CONSUMER, 0);
    for (uint32_t i = 0; i < 16; i++) {
        ring_slot s;
        cr_assert_eq(ring_write_begin(w, &s, 0), RING_OK);
        ring_write_end(w, &s, put_record(s.data, 0, i, 100));
    }
    ring_slot s;
    cr_assert_eq(ring_write_begin(w, &s, 0), RING_TIMEOUT, "a full ring must not be written");
    cr_assert_eq(ring_fill(rd), 16);
    ring_close(w); /* the only producer: end of stream, with 16 records still in the ring */
    for (uint32_t i = 0; i < 16; i++) {
        cr_assert_eq(ring_read_begin(rd, &s, 0), RING_OK, "record %u", i);
        rec_header h;
        cr_assert(record_ok(s.data, s.len, &h));
        cr_assert_eq(h.counter, i, "one producer, one consumer: in order");
        ring_read_end(rd, &s);
    }
    cr_assert_eq(ring_read_begin(rd, &s, 0), RING_EOS);
    cr_assert_eq(ring_read_begin(rd, &s, -1), RING_EOS);
    ring_close(rd);
    assert_no_segment(name);
    free(name);
}

/* ---- (c) a record bigger than the slot: the writer aborts, readers skip the hole ----------- */

Test(ring, oversized_record_becomes_a_hole, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("hole");
    ring *w = create_ring(name, 4096, 4, 1, RING_PRODUCER);
    ring *rd = attach_ok(name, RING_CONSUMER, 0);
    size_t big = ring_slot_bytes(w) + 1;
    for (uint32_t i = 0; i < 10; i++) { /* more than the ring holds: holes must be freed */
        ring_slot s;
        cr_assert_eq(ring_write_begin(w, &s, 1000), RING_OK);
        if (i % 2 == 0) {
            ring_write_end(w, &s, put_record(s.data, 0, i, 100));
        } else {
            cr_assert_gt(big, s.len, "the caller sees the record does not fit ...");
            ring_write_abort(w, &s); /* ... and gives the slot back */
        }
        ring_slot r;
        if (i % 2 == 0) {
            cr_assert_eq(ring_read_begin(rd, &r, 1000), RING_OK);
            rec_header h;
            cr_assert(record_ok(r.data, r.len, &h));
            cr_assert_eq(h.counter, i);
            ring_read_end(rd, &r);
        }
    }
    ring_slot r;
    cr_assert_eq(ring_read_begin(rd, &r, 0), RING_TIMEOUT, "a hole is never delivered");
    ring_close(w);
    cr_assert_eq(ring_read_begin(rd, &r, 0), RING_EOS);
    cr_assert_str_empty(ring_error(rd));
    ring_close(rd);
    assert_no_segment(name);
    free(name);
}

/* ---- (d) kill -9: survivors hear about it ------------------------------------------------- */

typedef enum { VICTIM_MID_WRITE, VICTIM_HOLDING_SLOT, VICTIM_BETWEEN_RECORDS } victim_kind;

typedef struct {
    const char *name;
    int ready_fd;
    victim_kind kind;
    ring_role role;  /* survivors */
    ring_status status;
    double ended_at; /* now_seconds() when the survivor got its status */
    uint64_t records;
    char error[512];
} crash_job;

static int run_victim(void *arg)
{
    crash_job *job = arg;
    ring_role role = job->kind == VICTIM_HOLDING_SLOT ? RING_CONSUMER : RING_PRODUCER;
    ring *r = child_attach(job->name, role);
    ring_slot s;
    if (job->kind == VICTIM_HOLDING_SLOT) {
        if (ring_read_begin(r, &s, 10000) != RING_OK)
            return 30;
    } else {
        int records = job->kind == VICTIM_BETWEEN_RECORDS ? 3 : 0;
        for (int i = 0; i < records; i++) {
            if (ring_write_begin(r, &s, 10000) != RING_OK)
                return 31;
            ring_write_end(r, &s, put_record(s.data, 9, (uint32_t)i, 50));
        }
        if (job->kind == VICTIM_MID_WRITE && ring_write_begin(r, &s, 10000) != RING_OK)
            return 32;
    }
    say_ready(job->ready_fd);
    pause_forever(); /* until kill -9 */
}

/* Write (producer) or read (consumer) at a modest pace until the ring says no. */
static int run_survivor(void *arg)
{
    crash_job *job = arg;
    ring *r = child_attach(job->name, job->role);
    ring_slot s;
    ring_status st;
    for (;;) {
        if (job->role == RING_PRODUCER) {
            if ((st = ring_write_begin(r, &s, -1)) != RING_OK)
                break;
            ring_write_end(r, &s, put_record(s.data, 1, (uint32_t)job->records, 50));
            sleep_seconds(0.001);
        } else {
            if ((st = ring_read_begin(r, &s, -1)) != RING_OK)
                break;
            ring_read_end(r, &s);
        }
        job->records++;
    }
    job->ended_at = now_seconds();
    job->status = st;
    snprintf(job->error, sizeof job->error, "%s", ring_error(r));
    ring_close(r);
    return 0;
}

static void crash_test(victim_kind kind, const char *label)
{
    char *name = ring_name(label);
    ring *obs = create_ring(name, 4096, 8, 2, RING_OBSERVER);
    crash_job *jobs = shared_alloc(3 * sizeof *jobs);
    ring_role roles[2] = {RING_PRODUCER, RING_CONSUMER};
    pid_t survivors[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (crash_job){.name = name, .role = roles[i], .status = 99};
        survivors[i] = spawn(run_survivor, &jobs[i]);
    }
    jobs[2] = (crash_job){.name = name, .kind = kind};
    held h = spawn_held(run_victim, &jobs[2], &jobs[2].ready_fd);
    pid_t victim = h.pid;
    sleep_seconds(0.05);
    double killed_at = now_seconds();
    cr_assert_eq(kill(victim, SIGKILL), 0);
    /* Not reaped yet: the survivors must see through the zombie. */
    reap_all_ok(survivors, 2, 10);
    char needle[64];
    snprintf(needle, sizeof needle, "pid %d ", (int)victim);
    for (int i = 0; i < 2; i++) {
        const crash_job *j = &jobs[i];
        cr_assert_eq(j->status, RING_BROKEN, "survivor %d: status %d", i, j->status);
        cr_assert(strstr(j->error, needle), "survivor %d: '%s' does not name %s", i, j->error,
                  needle);
        cr_assert_lt(j->ended_at - killed_at, DETECT_LIMIT_S, "survivor %d heard after %.2f s",
                     i, j->ended_at - killed_at);
    }
    cr_assert_eq(reap(victim, 5), 128 + SIGKILL);
    cr_assert(strstr(ring_error(obs), needle));
    ring_close(obs);
    assert_no_segment(name);
    held_close(&h);
    munmap(jobs, 3 * sizeof *jobs);
    free(name);
}

Test(ring, kill_producer_mid_write, .timeout = TEST_TIMEOUT_S)
{
    crash_test(VICTIM_MID_WRITE, "kill-mid-write");
}

Test(ring, kill_consumer_holding_slot, .timeout = TEST_TIMEOUT_S)
{
    crash_test(VICTIM_HOLDING_SLOT, "kill-holding");
}

Test(ring, kill_producer_between_records, .timeout = TEST_TIMEOUT_S)
{
    crash_test(VICTIM_BETWEEN_RECORDS, "kill-between");
}

/* ---- (e) cleanup: the last process of a finished ring unlinks it ------------------------- */

/* The job of a child that holds a ring (spawn_held): its name and where to say ready. */
typedef struct {
    const char *name;
    int ready_fd;
} held_job;

static int run_creator(void *arg)
{
    held_job *job = arg;
    ring_geometry g = {.slot_bytes = 4096, .n_slots = 4, .n_producers = 1};
    char *err = NULL;
    if (!ring_create(job->name, &g, RING_OBSERVER, &err))
        return 40;
    say_ready(job->ready_fd);
    pause_forever();
}

/* The creator (the orchestrator) is killed; once its stages finish, nothing is left. */
Test(ring, last_process_unlinks_when_creator_died, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("orphan");
    held_job cj = {.name = name};
    held creator = spawn_held(run_creator, &cj, &cj.ready_fd);
    ring *w = attach_ok(name, RING_PRODUCER, ATTACH_MS);
    ring *rd = attach_ok(name, RING_CONSUMER, ATTACH_MS);
    kill(creator.pid, SIGKILL);
    cr_assert_eq(reap(creator.pid, 5), 128 + SIGKILL);
    ring_slot s;
    cr_assert_eq(ring_write_begin(w, &s, 0), RING_OK, "an observer's death breaks nothing");
    ring_write_end(w, &s, 10);
    ring_close(w);
    cr_assert(segment_exists(name), "a consumer is still attached");
    cr_assert_eq(ring_read_begin(rd, &s, 0), RING_OK);
    ring_read_end(rd, &s);
    cr_assert_eq(ring_read_begin(rd, &s, 0), RING_EOS);
    ring_close(rd);
    assert_no_segment(name);
    held_close(&creator);
    free(name);
}

/* ---- (f) pid reuse ---------------------------------------------------------------------- */

static int run_forger(void *arg)
{
    held_job *job = arg;
    ring *r = child_attach(job->name, RING_PRODUCER);
    ring_forge_start_time_for_test(r, 12345);
    say_ready(job->ready_fd);
    pause_forever();
}

/* A live pid registered with another start time is a recycled pid: its owner is dead. */
Test(ring, recycled_pid_counts_as_dead, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("pidreuse");
    ring *obs = create_ring(name, 4096, 4, 1, RING_OBSERVER);
    held_job fj = {.name = name};
    held forger = spawn_held(run_forger, &fj, &fj.ready_fd);
    ring *rd = attach_ok(name, RING_CONSUMER, 0);
    double start = now_seconds();
    ring_slot s;
    cr_assert_eq(ring_read_begin(rd, &s, 10000), RING_BROKEN);
    cr_assert_lt(now_seconds() - start, DETECT_LIMIT_S);
    char needle[64];
    snprintf(needle, sizeof needle, "producer pid %d ", (int)forger.pid);
    cr_assert(strstr(ring_error(rd), needle), "'%s'", ring_error(rd));
    cr_assert(strstr(ring_error(rd), "newer process"), "'%s'", ring_error(rd));
    kill(forger.pid, SIGKILL);
    cr_assert_eq(reap(forger.pid, 5), 128 + SIGKILL);
    ring_close(rd);
    ring_close(obs);
    assert_no_segment(name);
    held_close(&forger);
    free(name);
}

/* ---- (g) RING_NO_READERS ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    int reads;
} quitter_job;

static int run_quitter(void *arg)
{
    quitter_job *job = arg;
    ring *r = child_attach(job->name, RING_CONSUMER);
    for (int i = 0; i < job->reads; i++) {
        ring_slot s;
        if (ring_read_begin(r, &s, 10000) != RING_OK)
            return 50;
        ring_read_end(r, &s);
    }
    sleep_seconds(0.2); /* the writer is blocked on a full ring by now */
    ring_close(r);
    return 0;
}

Test(ring, no_readers, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("noreaders");
    ring *w = create_ring(name, 4096, 4, 1, RING_PRODUCER);
    ring_slot s;
    /* No consumer has attached yet: that is not "no readers", just early. */
    cr_assert_eq(ring_write_begin(w, &s, 0), RING_OK);
    ring_write_end(w, &s, 1);
    quitter_job qj = {.name = name, .reads = 3};
    pid_t quitter = spawn(run_quitter, &qj);
    ring_status st;
    int written = 1;
    while ((st = ring_write_begin(w, &s, 10000)) == RING_OK) {
        ring_write_end(w, &s, 1);
        written++;
    }
    cr_assert_eq(st, RING_NO_READERS, "status %d: %s", st, ring_error(w));
    cr_assert_geq(written, 3 + 4, "the ring filled before the only consumer left");
    cr_assert_eq(reap(quitter, 10), 0);
    cr_assert_eq(ring_write_begin(w, &s, 0), RING_NO_READERS);
    ring_close(w);
    assert_no_segment(name);
    free(name);
}

/* ---- (h) sweeping stale segments --------------------------------------------------------- */

typedef struct {
    char name[256];
} stale_job;

static int run_stale_creator(void *arg)
{
    stale_job *job = arg;
    char *name = ring_name("stale");
    snprintf(job->name, sizeof job->name, "%s", name);
    ring_geometry g = {.slot_bytes = 4096, .n_slots = 2, .n_producers = 1};
    char *err = NULL;
    return ring_create(name, &g, RING_OBSERVER, &err) ? 0 : 60; /* exits without closing */
}

Test(ring, sweep_stale, .timeout = TEST_TIMEOUT_S)
{
    stale_job *job = shared_alloc(sizeof *job);
    cr_assert_eq(reap(spawn(run_stale_creator, job), 10), 0);
    cr_assert(segment_exists(job->name), "the dead creator's segment should still be there");
    char *live = ring_name("live");
    ring *r = create_ring(live, 4096, 2, 1, RING_OBSERVER);
    cr_assert_geq(ring_sweep_stale(), 1);
    assert_no_segment(job->name);
    cr_assert(segment_exists(live), "a live creator's segment must stay");
    ring_close(r);
    assert_no_segment(live);
    free(live);
}

/* ---- (i) attaching ------------------------------------------------------------------------ */

Test(ring, attach_times_out, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("never");
    char *err = NULL;
    double start = now_seconds();
    ring *r = ring_attach(name, RING_CONSUMER, 200, &err);
    double took = now_seconds() - start;
    cr_assert_null(r);
    cr_assert_not_null(err);
    cr_assert(strstr(err, name) && strstr(err, "200 ms"), "%s", err);
    cr_assert_geq(took, 0.2);
    cr_assert_lt(took, 5.0, "did not give up");
    free(err);
    free(name);
}

typedef struct {
    const char *name;
} late_job;

static int run_late_creator(void *arg)
{
    late_job *job = arg;
    sleep_seconds(0.2);
    ring_geometry g = {.slot_bytes = 4096, .n_slots = 2, .n_producers = 1};
    char *err = NULL;
    ring *r = ring_create(job->name, &g, RING_PRODUCER, &err);
    if (!r)
        return 70;
    ring_slot s;
    if (ring_write_begin(r, &s, 1000) != RING_OK)
        return 71;
    memcpy(s.data, "late", 4);
    ring_write_end(r, &s, 4);
    sleep_seconds(0.3); /* let the parent attach before the creator unlinks */
    ring_close(r);
    return 0;
}

Test(ring, attach_waits_for_creator, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("late");
    late_job lj = {.name = name};
    pid_t creator = spawn(run_late_creator, &lj);
    ring *r = attach_ok(name, RING_CONSUMER, 5000);
    ring_slot s;
    cr_assert_eq(ring_read_begin(r, &s, 5000), RING_OK);
    cr_assert_eq(s.len, 4);
    cr_assert_eq(memcmp(s.data, "late", 4), 0);
    ring_read_end(r, &s);
    cr_assert_eq(ring_read_begin(r, &s, 5000), RING_EOS);
    cr_assert_eq(reap(creator, 10), 0);
    ring_close(r);
    assert_no_segment(name);
    free(name);
}

/* ---- geometry, names, small contracts ----------------------------------------------------- */

Test(ring, geometry_and_names, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("geo/metry x");
    char *want = xasprintf("selfsup.%d.geo_metry_x", (int)getpid());
    cr_assert_str_eq(name, want);
    ring *r = create_ring(name, 5000, 5, 1, RING_OBSERVER);
    cr_assert_eq(ring_slot_bytes(r), 8192);
    cr_assert_eq(ring_n_slots(r), 8);
    cr_assert_str_eq(ring_get_name(r), name);
    size_t bytes;
    void *area = ring_data_area(r, &bytes);
    cr_assert_eq((uintptr_t)area % 4096, 0, "the data area is page-aligned");
    cr_assert_eq(bytes, 8 * 8192);
    cr_assert_eq(ring_fill(r), 0);
    cr_assert_str_empty(ring_error(r));

    char *err = NULL;
    ring_geometry g = {.slot_bytes = 4096, .n_slots = 2, .n_producers = 1};
    cr_assert_null(ring_create(name, &g, RING_OBSERVER, &err), "the name is taken");
    cr_assert(strstr(err, "exists"), "%s", err);
    free(err);
    err = NULL;
    ring_geometry bad = {.slot_bytes = 4096, .n_slots = 1, .n_producers = 1};
    char *other = ring_name("bad");
    cr_assert_null(ring_create(other, &bad, RING_OBSERVER, &err));
    cr_assert(strstr(err, "n_slots"), "%s", err);
    assert_no_segment(other);
    free(err);

    ring_break(r, "test reason %d", 7);
    cr_assert(strstr(ring_error(r), "test reason 7"), "%s", ring_error(r));
    ring_close(r);
    assert_no_segment(name);
    cr_assert_eq(ring_unlink(name), 0, "already gone is fine");
    ring_close(NULL);
    free(other);
    free(want);
    free(name);
}

/* A timed-out read holds nothing: the record that arrives later goes to whoever asks. */
Test(ring, timeout_claims_nothing, .timeout = TEST_TIMEOUT_S)
{
    char *name = ring_name("timeout");
    ring *w = create_ring(name, 4096, 2, 1, RING_PRODUCER);
    char *err = NULL;
    ring *a = ring_attach(name, RING_CONSUMER, 0, &err);
    ring *b = ring_attach(name, RING_CONSUMER, 0, &err);
    cr_assert(a && b);
    ring_slot s;
    cr_assert_eq(ring_read_begin(a, &s, 50), RING_TIMEOUT);
    cr_assert_eq(ring_write_begin(w, &s, 0), RING_OK);
    ring_write_end(w, &s, 3);
    cr_assert_eq(ring_fill(w), 1);
    cr_assert_eq(ring_read_begin(b, &s, 0), RING_OK);
    ring_read_end(b, &s);
    ring_close(a); /* a consumer closing while another reads: no "no readers" yet */
    cr_assert_eq(ring_write_begin(w, &s, 0), RING_OK);
    /* Closing with a claimed slot gives it back as a hole. */
    ring_close(w);
    cr_assert_eq(ring_read_begin(b, &s, 1000), RING_EOS);
    ring_close(b);
    assert_no_segment(name);
    free(name);
}

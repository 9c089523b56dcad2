/*
 * ring_bench.c — how fast shm/ring hands records between processes, beside the two things
 * it should be compared with: one core's memcpy (the cost of touching the bytes once) and a
 * pipe (what `selfsup-decode … | selfsup-augment …` pays). bench/ring.sh turns the output
 * into a table; see bench/README.md.
 *
 * For each record size (default 4 KiB, 256 KiB, 4 MiB) it measures, as GB/s of payload:
 *   memcpy   one process copies a source record into n_slots destination records in turn
 *            (the ring's footprint), --mib MiB in all
 *   ring1x1  one producer process writes each record into its slot (memcpy from the same
 *            source, then the record id in the first 8 bytes), one consumer process reads
 *            every byte (a 64-bit sum) and releases the slot
 *   ring4x4  the same with 4 producer and 4 consumer processes on one ring
 *   pipe1x1  the producer builds the record in a buffer the same way and write()s it into a
 *            pipe (F_SETPIPE_SZ 1 MiB); the consumer read()s it whole and sums it
 * Rings hold --ring-mib MiB of slots (default 16: 4 slots of 4 MiB, 64 of 256 KiB, 256 of
 * 4 KiB (1 MiB), the most slots allowed), and memcpy's destinations the same, so both work on
 * the same footprint. Each runs once as a warm-up and then --reps times; the median is
 * reported. The clock runs from a start signal given once every process has attached until
 * the last consumer is done; making the ring and forking are not timed. The consumers' sums
 * must equal the producers' (checked), so both sides really touched every byte.
 *
 * Then the hand-off latency: one producer publishes a small record every GAP µs (a modest
 * rate, so the ring never fills and the consumer is waiting each time), stamped with
 * CLOCK_MONOTONIC just before ring_write_end; the consumer subtracts the stamp from the clock
 * as soon as ring_read_begin returns. The same over a pipe (stamp before write, read after).
 * GAP is 20 µs (50,000 records/s: a steady stream) and 1000 µs (1,000/s: the consumer falls
 * asleep between records, so this is the operating system's wake-up time), or --gap-us.
 *
 * Output, one line per measurement:
 *   ring_bench <memcpy|ring1x1|ring4x4|pipe1x1> <record bytes> <GB/s>
 *   ring_bench latency <ring|pipe> <gap µs> <median µs> <p99 µs> <records>
 * and lines starting with '#' for the individual times and notes.
 */
#include "log.h"
#include "ring.h"
#include "timer.h"
#include "util.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REPS 50
#define MAX_PROCS 16
#define PIPE_BYTES (1 << 20)
#define LATENCY_WARMUP 200
#define LATENCY_MAX_US 3000000 /* per latency run */

static const size_t SIZES[] = {4096, 256 << 10, 4 << 20};

typedef struct {
    size_t mib;
    size_t ring_mib;
    int reps;
    int latency_records;
    int gap_us;
} options;

/* What the processes of one run share: a start line and the consumers' results. */
typedef struct {
    _Atomic int ready;
    _Atomic int go;
    _Atomic uint64_t end_ns;
    _Atomic uint64_t sum;
    _Atomic uint64_t records;
    _Atomic int failed;
} control;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ring_bench [--mib N] [--reps N] [--latency-records N] [--gap-us N]\n"
            "\n"
            "Measures shm/ring between processes: throughput of 4 KiB, 256 KiB and 4 MiB\n"
            "records with 1 producer x 1 consumer and 4 x 4, beside one core's memcpy and a\n"
            "pipe, and the hand-off latency of small records. Prints\n"
            "  ring_bench <memcpy|ring1x1|ring4x4|pipe1x1> <record bytes> <GB/s>\n"
            "  ring_bench latency <ring|pipe> <gap us> <median us> <p99 us> <records>\n"
            "bench/ring.sh makes a table of it.\n"
            "\n"
            "options:\n"
            "  --mib N              payload per measurement, MiB (default 512)\n"
            "  --ring-mib N         ring size (and memcpy's destination), MiB (default 16: 4\n"
            "                       slots of 4 MiB, 64 of 256 KiB, 256 of 4 KiB)\n"
            "  --reps N             measured repetitions after a warm-up (default 3, 1..%d)\n"
            "  --latency-records N  records for the latency runs (default 20000)\n"
            "  --gap-us N           µs between latency records (default: 20, then 1000)\n"
            "  --help, --version\n",
            MAX_REPS);
}

/* ---- shared helpers ---------------------------------------------------------------------- */

static void *shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die(EXIT_RUNTIME, "mmap %zu bytes: %s", bytes, strerror(errno));
    return p;
}

/* A sum of 64-bit words: cheap, but it reads every byte, as a real consumer would. */
static uint64_t checksum(const void *data, size_t len)
{
    const uint64_t *w = data;
    size_t n = len / 8;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a += w[i];
        b += w[i + 1];
        c += w[i + 2];
        d += w[i + 3];
    }
    for (; i < n; i++)
        a += w[i];
    return a + b + c + d;
}

/* Write the record with id `id` at dst: the source bytes, then the id in the first word. */
static void build_record(void *dst, const void *src, size_t size, uint64_t id)
{
    memcpy(dst, src, size);
    memcpy(dst, &id, sizeof id);
}

static void *make_source(size_t size)
{
    uint64_t *src = xmalloc_large(size);
    for (size_t i = 0; i < size / 8; i++)
        src[i] = i * 0x9e3779b97f4a7c15ull;
    return src;
}

/* What the consumers' sums must add up to for records 0..count-1. */
static uint64_t expected_sum(const void *src, size_t size, uint64_t count)
{
    uint64_t rest = checksum(src, size) - ((const uint64_t *)src)[0];
    return count * rest + count * (count - 1) / 2;
}

static pid_t spawn(void (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die(EXIT_RUNTIME, "fork: %s", strerror(errno));
    if (pid == 0) {
        alarm(300); /* a hung benchmark ends */
        fn(arg);
        _exit(0);
    }
    return pid;
}

static int reap_all(const pid_t *pids, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int status;
        if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            bad = 1;
    }
    return bad;
}

/* Children: say we are ready, then wait for the start signal. */
static void start_line(control *ctl)
{
    atomic_fetch_add(&ctl->ready, 1);
    while (!atomic_load(&ctl->go))
        sleep_seconds(0.0001);
}

static void finish(control *ctl, uint64_t sum, uint64_t records)
{
    uint64_t now = now_ns(), end = atomic_load(&ctl->end_ns);
    while (end < now && !atomic_compare_exchange_weak(&ctl->end_ns, &end, now))
        ;
    atomic_fetch_add(&ctl->sum, sum);
    atomic_fetch_add(&ctl->records, records);
}

/* Parent: wait for `n` children to be ready, start them, return the start time. */
static uint64_t fire(control *ctl, int n)
{
    while (atomic_load(&ctl->ready) < n)
        sleep_seconds(0.0001);
    uint64_t t0 = now_ns();
    atomic_store(&ctl->go, 1);
    return t0;
}

/* ---- ring throughput --------------------------------------------------------------------- */

typedef struct {
    const char *name;
    control *ctl;
    const void *src;
    size_t size;
    uint64_t first, count; /* producer: record ids first .. first+count-1 */
} job;

static void ring_producer(void *arg)
{
    job *j = arg;
    char *err = NULL;
    ring *r = ring_attach(j->name, RING_PRODUCER, 10000, &err);
    if (!r)
        die(EXIT_RUNTIME, "%s", err);
    start_line(j->ctl);
    for (uint64_t i = 0; i < j->count; i++) {
        ring_slot s;
        ring_status st = ring_write_begin(r, &s, -1);
        if (st != RING_OK)
            die(EXIT_RUNTIME, "ring_write_begin: %d %s", st, ring_error(r));
        build_record(s.data, j->src, j->size, j->first + i);
        ring_write_end(r, &s, j->size);
    }
    ring_close(r);
}

static void ring_consumer(void *arg)
{
    job *j = arg;
    char *err = NULL;
    ring *r = ring_attach(j->name, RING_CONSUMER, 10000, &err);
    if (!r)
        die(EXIT_RUNTIME, "%s", err);
    start_line(j->ctl);
    uint64_t sum = 0, records = 0;
    ring_slot s;
    ring_status st;
    while ((st = ring_read_begin(r, &s, -1)) == RING_OK) {
        sum += checksum(s.data, s.len);
        records++;
        ring_read_end(r, &s);
    }
    if (st != RING_EOS)
        die(EXIT_RUNTIME, "ring_read_begin: %d %s", st, ring_error(r));
    finish(j->ctl, sum, records);
    ring_close(r);
}

static size_t ring_mib = 16; /* --ring-mib */

/* Slots for a ring of about ring_mib MiB: at least 2, at most 256. */
static uint32_t slots_for(size_t size)
{
    size_t n = (ring_mib << 20) / size;
    return (uint32_t)(n < 2 ? 2 : n > 256 ? 256 : n);
}

/* One timed run of `np` producers × `nc` consumers moving `count` records; returns seconds. */
static double ring_run(const void *src, size_t size, uint64_t count, int np, int nc)
{
    char *name = ring_name("bench");
    ring_geometry g = {
        .slot_bytes = size, .n_slots = slots_for(size), .n_producers = (uint32_t)np};
    char *err = NULL;
    ring *obs = ring_create(name, &g, RING_OBSERVER, &err);
    if (!obs)
        die(EXIT_RUNTIME, "%s", err);
    control *ctl = shared_alloc(sizeof *ctl);
    job jobs[MAX_PROCS];
    pid_t pids[MAX_PROCS];
    for (int i = 0; i < np + nc; i++) {
        uint64_t per = count / (uint64_t)np, first = per * (uint64_t)i;
        bool producer = i < np;
        jobs[i] = (job){.name = name, .ctl = ctl, .src = src, .size = size, .first = first,
                        .count = i == np - 1 ? count - first : per};
        pids[i] = spawn(producer ? ring_producer : ring_consumer, &jobs[i]);
    }
    uint64_t t0 = fire(ctl, np + nc);
    if (reap_all(pids, np + nc))
        die(EXIT_RUNTIME, "a ring process failed");
    if (ctl->records != count || ctl->sum != expected_sum(src, size, count))
        die(EXIT_RUNTIME, "ring %dx%d: consumers saw %llu records, sum %llx (want %llu, %llx)",
            np, nc, (unsigned long long)ctl->records, (unsigned long long)ctl->sum,
            (unsigned long long)count, (unsigned long long)expected_sum(src, size, count));
    double seconds = (double)(ctl->end_ns - t0) * 1e-9;
    munmap(ctl, sizeof *ctl);
    ring_close(obs);
    free(name);
    return seconds;
}

/* ---- pipe throughput --------------------------------------------------------------------- */

typedef struct {
    int fd;
    control *ctl;
    const void *src;
    size_t size;
    uint64_t count;
} pipe_job;

static void write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die(EXIT_RUNTIME, "pipe write: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
    }
}

static bool read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

static void pipe_producer(void *arg)
{
    pipe_job *j = arg;
    void *buf = xmalloc_large(j->size);
    start_line(j->ctl);
    for (uint64_t i = 0; i < j->count; i++) {
        build_record(buf, j->src, j->size, i);
        write_all(j->fd, buf, j->size);
    }
    close(j->fd);
    free(buf);
}

static void pipe_consumer(void *arg)
{
    pipe_job *j = arg;
    void *buf = xmalloc_large(j->size);
    start_line(j->ctl);
    uint64_t sum = 0, records = 0;
    while (read_all(j->fd, buf, j->size)) {
        sum += checksum(buf, j->size);
        records++;
    }
    finish(j->ctl, sum, records);
    free(buf);
}

static void open_pipe(int fds[2])
{
    if (pipe(fds))
        die(EXIT_RUNTIME, "pipe: %s", strerror(errno));
    /* 1 MiB is /proc/sys/fs/pipe-max-size's default: the most an unprivileged user gets. */
    fcntl(fds[1], F_SETPIPE_SZ, PIPE_BYTES);
}

static double pipe_run(const void *src, size_t size, uint64_t count)
{
    int fds[2];
    open_pipe(fds);
    control *ctl = shared_alloc(sizeof *ctl);
    pipe_job pj = {.fd = fds[1], .ctl = ctl, .src = src, .size = size, .count = count};
    pipe_job cj = {.fd = fds[0], .ctl = ctl, .src = src, .size = size, .count = count};
    pid_t pids[2];
    pids[0] = spawn(pipe_producer, &pj);
    close(fds[1]);
    pids[1] = spawn(pipe_consumer, &cj);
    close(fds[0]);
    uint64_t t0 = fire(ctl, 2);
    if (reap_all(pids, 2))
        die(EXIT_RUNTIME, "a pipe process failed");
    if (ctl->records != count || ctl->sum != expected_sum(src, size, count))
        die(EXIT_RUNTIME, "pipe: the consumer's sum is wrong");
    double seconds = (double)(ctl->end_ns - t0) * 1e-9;
    munmap(ctl, sizeof *ctl);
    return seconds;
}

/* ---- memcpy ------------------------------------------------------------------------------ */

static double memcpy_run(const void *src, size_t size, uint64_t count)
{
    uint32_t n = slots_for(size);
    unsigned char *dst = xmalloc_large((size_t)n * size);
    memset(dst, 1, (size_t)n * size); /* fault the pages in before the clock starts */
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < count; i++)
        build_record(dst + (i % n) * size, src, size, i);
    double seconds = (double)(now_ns() - t0) * 1e-9;
    /* Keep the copies observable so the compiler cannot drop them. */
    if (checksum(dst, size) == 42)
        fputc(' ', stderr);
    free(dst);
    return seconds;
}

/* ---- measuring --------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef enum { RUN_MEMCPY, RUN_RING1, RUN_RING4, RUN_PIPE } run_kind;
static const char *const RUN_NAMES[] = {"memcpy", "ring1x1", "ring4x4", "pipe1x1"};

static double run_once(run_kind kind, const void *src, size_t size, uint64_t count)
{
    switch (kind) {
    case RUN_MEMCPY: return memcpy_run(src, size, count);
    case RUN_RING1: return ring_run(src, size, count, 1, 1);
    case RUN_RING4: return ring_run(src, size, count, 4, 4);
    case RUN_PIPE: return pipe_run(src, size, count);
    }
    return 0;
}

static void measure(run_kind kind, const void *src, size_t size, const options *o)
{
    uint64_t count = ((uint64_t)o->mib << 20) / size;
    double t[MAX_REPS];
    run_once(kind, src, size, count < 64 ? count : 64); /* warm-up */
    printf("# %s %zu times:", RUN_NAMES[kind], size);
    for (int i = 0; i < o->reps; i++) {
        t[i] = run_once(kind, src, size, count);
        printf(" %.4f", t[i]);
    }
    printf("\n");
    qsort(t, (size_t)o->reps, sizeof t[0], cmp_double);
    double median = t[o->reps / 2];
    printf("ring_bench %s %zu %.3f\n", RUN_NAMES[kind], size,
           (double)count * (double)size / median * 1e-9);
    fflush(stdout);
}

/* ---- latency ----------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int fd;
    control *ctl;
    int records, gap_us;
    double *lat_us; /* shared: one per record */
} lat_job;

typedef struct {
    uint64_t stamp, id;
} lat_record;

/* Spin until `t` (ns): sleeping would add the timer slack to the gap. */
static void pace_until(uint64_t t)
{
    while (now_ns() < t)
        ;
}

static void lat_ring_producer(void *arg)
{
    lat_job *j = arg;
    char *err = NULL;
    ring *r = ring_attach(j->name, RING_PRODUCER, 10000, &err);
    if (!r)
        die(EXIT_RUNTIME, "%s", err);
    start_line(j->ctl);
    uint64_t next = now_ns();
    for (int i = 0; i < j->records; i++) {
        next += (uint64_t)j->gap_us * 1000;
        pace_until(next);
        ring_slot s;
        if (ring_write_begin(r, &s, -1) != RING_OK)
            die(EXIT_RUNTIME, "latency: write: %s", ring_error(r));
        lat_record rec = {.id = (uint64_t)i, .stamp = now_ns()};
        memcpy(s.data, &rec, sizeof rec);
        ring_write_end(r, &s, sizeof rec);
    }
    ring_close(r);
}

static void lat_ring_consumer(void *arg)
{
    lat_job *j = arg;
    char *err = NULL;
    ring *r = ring_attach(j->name, RING_CONSUMER, 10000, &err);
    if (!r)
        die(EXIT_RUNTIME, "%s", err);
    start_line(j->ctl);
    ring_slot s;
    while (ring_read_begin(r, &s, -1) == RING_OK) {
        uint64_t now = now_ns();
        lat_record rec;
        memcpy(&rec, s.data, sizeof rec);
        ring_read_end(r, &s);
        if (rec.id < (uint64_t)j->records)
            j->lat_us[rec.id] = (double)(now - rec.stamp) * 1e-3;
    }
    ring_close(r);
}

static void lat_pipe_producer(void *arg)
{
    lat_job *j = arg;
    start_line(j->ctl);
    uint64_t next = now_ns();
    for (int i = 0; i < j->records; i++) {
        next += (uint64_t)j->gap_us * 1000;
        pace_until(next);
        lat_record rec = {.id = (uint64_t)i, .stamp = now_ns()};
        write_all(j->fd, &rec, sizeof rec);
    }
    close(j->fd);
}

static void lat_pipe_consumer(void *arg)
{
    lat_job *j = arg;
    start_line(j->ctl);
    lat_record rec;
    while (read_all(j->fd, &rec, sizeof rec)) {
        uint64_t now = now_ns();
        if (rec.id < (uint64_t)j->records)
            j->lat_us[rec.id] = (double)(now - rec.stamp) * 1e-3;
    }
}

static void report_latency(const char *what, int gap_us, double *lat, int n)
{
    int m = n - LATENCY_WARMUP;
    qsort(lat + LATENCY_WARMUP, (size_t)m, sizeof *lat, cmp_double);
    double *l = lat + LATENCY_WARMUP;
    printf("ring_bench latency %s %d %.2f %.2f %d\n", what, gap_us, l[m / 2],
           l[(size_t)(m * 0.99)], m);
    printf("# latency %s every %d us: min %.2f us, p90 %.2f us, max %.2f us\n", what, gap_us,
           l[0], l[(size_t)(m * 0.9)], l[m - 1]);
    fflush(stdout);
}

static void measure_latency(const options *o, int gap_us, bool over_pipe)
{
    int n = o->latency_records;
    if ((uint64_t)n * (uint64_t)gap_us > LATENCY_MAX_US) /* a few seconds at most */
        n = LATENCY_MAX_US / gap_us > LATENCY_WARMUP + 1000 ? LATENCY_MAX_US / gap_us
                                                            : LATENCY_WARMUP + 1000;
    double *lat = shared_alloc((size_t)n * sizeof *lat);
    control *ctl = shared_alloc(sizeof *ctl);
    lat_job pj = {.ctl = ctl, .records = n, .gap_us = gap_us, .lat_us = lat};
    lat_job cj = pj;
    pid_t pids[2];
    char *name = NULL;
    ring *obs = NULL;
    if (over_pipe) {
        int fds[2];
        open_pipe(fds);
        pj.fd = fds[1];
        cj.fd = fds[0];
        pids[0] = spawn(lat_pipe_producer, &pj);
        close(fds[1]);
        pids[1] = spawn(lat_pipe_consumer, &cj);
        close(fds[0]);
    } else {
        name = ring_name("latency");
        ring_geometry g = {.slot_bytes = 4096, .n_slots = 64, .n_producers = 1};
        char *err = NULL;
        if (!(obs = ring_create(name, &g, RING_OBSERVER, &err)))
            die(EXIT_RUNTIME, "%s", err);
        pj.name = cj.name = name;
        pids[0] = spawn(lat_ring_producer, &pj);
        pids[1] = spawn(lat_ring_consumer, &cj);
    }
    fire(ctl, 2);
    if (reap_all(pids, 2))
        die(EXIT_RUNTIME, "a latency process failed");
    report_latency(over_pipe ? "pipe" : "ring", gap_us, lat, n);
    ring_close(obs);
    free(name);
    munmap(ctl, sizeof *ctl);
    munmap(lat, (size_t)n * sizeof *lat);
}

/* ---- main -------------------------------------------------------------------------------- */

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static void parse_options(int argc, char **argv, options *o)
{
    static const struct option longs[] = {
        {"mib", required_argument, NULL, 'm'},        {"reps", required_argument, NULL, 'r'},
        {"ring-mib", required_argument, NULL, 'R'},
        {"latency-records", required_argument, NULL, 'l'},
        {"gap-us", required_argument, NULL, 'g'},     {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},          {0, 0, 0, 0}};
    *o = (options){.mib = 512, .ring_mib = 16, .reps = 3, .latency_records = 20000};
    int c;
    long v;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (parse_int(optarg, 8, 1 << 20, &v))
                die(EXIT_USAGE, "--mib: expected 8..1048576, got '%s'", optarg);
            o->mib = (size_t)v;
            break;
        case 'R':
            if (parse_int(optarg, 1, 4096, &v))
                die(EXIT_USAGE, "--ring-mib: expected 1..4096, got '%s'", optarg);
            o->ring_mib = (size_t)v;
            break;
        case 'r':
            if (parse_int(optarg, 1, MAX_REPS, &v))
                die(EXIT_USAGE, "--reps: expected 1..%d, got '%s'", MAX_REPS, optarg);
            o->reps = (int)v;
            break;
        case 'l':
            if (parse_int(optarg, LATENCY_WARMUP + 100, 10000000, &v))
                die(EXIT_USAGE, "--latency-records: expected at least %d, got '%s'",
                    LATENCY_WARMUP + 100, optarg);
            o->latency_records = (int)v;
            break;
        case 'g':
            if (parse_int(optarg, 1, 1000000, &v))
                die(EXIT_USAGE, "--gap-us: expected 1..1000000, got '%s'", optarg);
            o->gap_us = (int)v;
            break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("ring_bench %s\n", SELFSUP_VERSION); exit(0);
        default: usage(stderr); exit(EXIT_USAGE);
        }
    }
    if (optind != argc) {
        usage(stderr);
        exit(EXIT_USAGE);
    }
}

int main(int argc, char **argv)
{
    log_init("ring_bench");
    options o;
    parse_options(argc, argv, &o);
    ring_mib = o.ring_mib;
    ring_sweep_stale();
    printf("# ring_bench %s: %zu MiB per measurement, median of %d after 1 warm-up, "
           "%zu MiB rings\n",
           SELFSUP_VERSION, o.mib, o.reps, o.ring_mib);
    for (size_t i = 0; i < ARRAY_LEN(SIZES); i++) {
        void *src = make_source(SIZES[i]);
        printf("# %zu-byte records: %u slots in the ring\n", SIZES[i], slots_for(SIZES[i]));
        for (run_kind k = RUN_MEMCPY; k <= RUN_PIPE; k++)
            measure(k, src, SIZES[i], &o);
        free(src);
    }
    int gaps[2] = {20, 1000}, n_gaps = 2;
    if (o.gap_us) {
        gaps[0] = o.gap_us;
        n_gaps = 1;
    }
    printf("# latency: a %zu-byte record every GAP us, up to %d records, the first %d not "
           "counted\n",
           sizeof(lat_record), o.latency_records, LATENCY_WARMUP);
    for (int i = 0; i < n_gaps; i++) {
        measure_latency(&o, gaps[i], false);
        measure_latency(&o, gaps[i], true);
    }
    return 0;
}

/*
 * selfsup-test-check — a consumer for the tests: verifies every record's checksum, that each
 * sequence number 0 … --expect-1 arrives exactly once (when --expect is given), and prints
 * "check: N records, B payload bytes, xor-of-sums X" on stdout. Exit 1 on any mismatch.
 */
#include "stage.h"
#include "test_stage.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>

typedef struct {
    long expect;
    test_misbehave bad;
} check_opts;

static int option(void *state, int argc, char **argv)
{
    check_opts *o = state;
    static const char *const names[] = {"--expect"};
    long *const targets[] = {&o->expect};
    int used = test_misbehave_option(&o->bad, argc, argv);
    return used ? used : test_long_option(argc, argv, names, targets, 1);
}

/* Returns the record's sum, or sets *bad with a message. */
static int check_record(const rec_view *v, uint64_t *sum_out)
{
    int d = rec_find(v, "data"), s = rec_find(v, "sum");
    if (d < 0 || s < 0) {
        fprintf(stderr, "test-check: record %" PRIu64 " lacks data or sum\n", v->hdr->seq);
        return -1;
    }
    const uint8_t *data = rec_data(v, d);
    uint64_t n = rec_numel(v, d), sum;
    memcpy(&sum, rec_data(v, s), 8);
    for (uint64_t k = 0; k < n; k++)
        if (data[k] != test_pattern(v->hdr->seq, k)) {
            fprintf(stderr, "test-check: record %" PRIu64 " byte %" PRIu64 " is wrong\n", v->hdr->seq, k);
            return -1;
        }
    if (test_fnv1a(data, n) != sum) {
        fprintf(stderr, "test-check: record %" PRIu64 " checksum mismatch\n", v->hdr->seq);
        return -1;
    }
    *sum_out = sum;
    return 0;
}

static int run(stage *s, void *state)
{
    check_opts *o = state;
    uint8_t *seen = o->expect > 0 ? calloc((size_t)o->expect, 1) : NULL;
    uint64_t records = 0, bytes = 0, xsum = 0;
    int failed = 0, st;
    rec_view v;
    while (!failed && (st = stage_read(s, &v)) == STAGE_RECORD) {
        if (o->bad.crash_after && (long)records == o->bad.crash_after)
            raise(SIGKILL); /* holding the input slot */
        uint64_t sum = 0, seq = v.hdr->seq;
        failed = check_record(&v, &sum) != 0;
        if (seen && (seq >= (uint64_t)o->expect || seen[seq]++)) {
            fprintf(stderr, "test-check: record %" PRIu64 " is %s\n", seq,
                    seq >= (uint64_t)o->expect ? "out of range" : "a duplicate");
            failed = 1;
        }
        records++;
        bytes += v.hdr->size;
        xsum ^= sum;
        stage_read_done(s);
        if (o->bad.sleep_us)
            usleep((useconds_t)o->bad.sleep_us);
    }
    if (!failed && st == STAGE_FAILED)
        failed = 1;
    if (!failed && seen && !stage_stopping(s) && records != (uint64_t)o->expect) {
        fprintf(stderr, "test-check: %" PRIu64 " records arrived, expected %ld\n", records, o->expect);
        failed = 1;
    }
    free(seen);
    printf("check: %" PRIu64 " records, %" PRIu64 " bytes, xor-of-sums %016" PRIx64 "\n", records, bytes, xsum);
    fflush(stdout);
    return failed ? 1 : stage_exit_status(s);
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "test-check",
        .summary = "Check the records a test producer made (a test stage).",
        .role = "consumer",
        .reads = true,
        .option = option,
        .options = "  --expect N      sequence numbers 0..N-1 must each arrive exactly once\n"
                   "  --sleep-us N, --crash-after N     misbehave on purpose\n",
    };
    check_opts o = {0};
    return stage_main(argc, argv, &info, &o, run);
}

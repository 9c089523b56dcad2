/*
 * selfsup-test-produce — a synthetic data source for the tests: writes --count records whose
 * sequence numbers are INDEX, INDEX+STRIDE, INDEX+2·STRIDE … (so several producers never
 * collide), each with a checkable "data" payload of --size bytes and its "sum".
 *
 * --eos-says N makes it a miscounting writer, for the readers' end-of-stream checks: after
 * its records it sends an end-of-stream record of its own that says N records were sent,
 * ahead of the transport's true one.
 */
#include "stage.h"
#include "test_stage.h"

#include <signal.h>
#include <stdio.h>

typedef struct {
    long count, size, index, stride;
    long eos_says; /* -1: no end record of its own */
    test_misbehave bad;
} produce_opts;

static int option(void *state, int argc, char **argv)
{
    produce_opts *o = state;
    int used = test_misbehave_option(&o->bad, argc, argv);
    if (used)
        return used;
    static const char *const names[] = {"--count", "--size", "--index", "--stride", "--eos-says"};
    long *const targets[] = {&o->count, &o->size, &o->index, &o->stride, &o->eos_says};
    return test_long_option(argc, argv, names, targets, 5);
}

/* An end-of-stream record saying `says` records, sent as a record: the transport counts only
 * data records, and still ends the stream with its own end record when the stage closes. */
static int send_false_end(stage *s, long says)
{
    rec_writer *w = stage_record_begin(s, REC_EOS, (uint64_t)says, stage_epoch(s), 0);
    if (!w)
        return stage_exit_status(s);
    rec_writer_header(w)->flags = REC_EOS_FINISHED;
    return stage_record_end(s) != 0;
}

static int run(stage *s, void *state)
{
    produce_opts *o = state;
    stage_count(s, "expected", o->count); /* lets the orchestrator show an ETA */
    for (long i = 0; i < o->count; i++) {
        if (o->bad.fail_after && i == o->bad.fail_after) {
            fprintf(stderr, "test-produce: failing on purpose after %ld records\n", i);
            return 1;
        }
        if (o->bad.crash_after && i == o->bad.crash_after)
            raise(SIGKILL);
        uint64_t seq = (uint64_t)(o->index + i * o->stride);
        rec_writer *w = stage_record_begin(s, REC_DATA, seq, stage_epoch(s), 2);
        if (!w)
            return stage_exit_status(s);
        uint64_t n = (uint64_t)o->size, one = 1;
        uint8_t *data = rec_add(w, "data", REC_U8, 1, &n);
        uint64_t *sum = rec_add(w, "sum", REC_I64, 1, &one);
        if (data && sum) {
            for (size_t k = 0; k < n; k++)
                data[k] = test_pattern(seq, k);
            *sum = test_fnv1a(data, n);
        }
        if (stage_record_end(s) != 0)
            return 1;
        if (o->bad.sleep_us)
            usleep((useconds_t)o->bad.sleep_us);
    }
    return o->eos_says >= 0 ? send_false_end(s, o->eos_says) : 0;
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "test-produce",
        .summary = "Write synthetic, checkable records (a test stage).",
        .role = "producer",
        .writes = true,
        .option = option,
        .options = "  --count N, --size BYTES, --index K, --stride S   records K, K+S, ...\n"
                   "  --sleep-us N, --fail-after N, --crash-after N     misbehave on purpose\n"
                   "  --eos-says N   end with a false end-of-stream record saying N records\n",
    };
    produce_opts o = {.count = 100, .size = 1000, .stride = 1, .eos_says = -1};
    return stage_main(argc, argv, &info, &o, run);
}

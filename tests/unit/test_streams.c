/*
 * test_streams.c — a short stream never passes for a whole one.
 *
 * The end-of-stream record counts the records its writer sent and says whether the writer
 * finished or was stopped (record.h); every reader holds it against what arrived, and the
 * collate stage and the trainer hold what arrived against what the sampler and the epoch
 * plan promised. These tests cut streams short in each way a run can meet — SIGTERM to a
 * producer, to a worker in the middle of a shell pipeline, to a writer of a file: cache or of
 * a ring; an end-of-stream record in the middle of a file; a count that does not match; a
 * trainer input that ends before its epoch does — and check that the reader fails (exit 1,
 * saying why) and that nothing that looks finished is left behind.
 *
 * Stages are started through sh, with the victim's pid written to a file, so that a signal
 * reaches exactly one stage of a pipeline; test_run's timeout bounds every command.
 */
#include "record.h"
#include "util.h"

#include "test_util.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char *bin(const char *name)
{
    char *rel = xasprintf("tests/selfsup-test-%s", name);
    char *p = test_build_path(rel);
    free(rel);
    return p;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* `status` as "NAME status N" in the output of the wrapped commands below; -1 if absent. */
static int status_in(const char *out, const char *name)
{
    char *key = xasprintf("%s status ", name);
    const char *p = strstr(out, key);
    int st = p ? atoi(p + strlen(key)) : -1;
    free(key);
    return st;
}

/* A shell fragment that runs CMD in the background with its stdin kept (fd 3), writes its pid
 * to DIR/NAME.pid and reports "NAME status N" on stderr when it ends. */
static char *victim(const char *dir, const char *name, const char *cmd)
{
    return xasprintf("{ exec 3<&0; %s <&3 & echo $! > %s/%s.pid; wait $!; echo \"%s status $?\" >&2; }", cmd, dir,
                     name, name);
}

/* A shell fragment that sends SIGTERM to the stage NAME after `seconds`. */
static char *terminator(const char *dir, const char *name, double seconds)
{
    return xasprintf("( sleep %.2f; kill -TERM $(cat %s/%s.pid) ) &", seconds, dir, name);
}

/* The same, with the clock started once `path` exists (at most 60 s later): a stage that is
 * slow to start (under TSan, on a busy machine) is then not killed before it made what the
 * test is about. */
static char *terminator_after(const char *dir, const char *name, double seconds, const char *path)
{
    return xasprintf("( for i in $(seq 1200); do [ -e %s ] && break; sleep 0.05; done; sleep %.2f; "
                     "kill -TERM $(cat %s/%s.pid) ) &", path, seconds, dir, name);
}

/* Write `n` test records (the check stage's format is not needed: the readers here are the
 * transport and inspect) and then an end-of-stream record saying `says` records, `stopped`. */
static void write_stream(const char *path, int n, uint64_t says, bool stopped, bool then_more)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0, "%s", path);
    static uint8_t buf[4096] __attribute__((aligned(64)));
    char *err = NULL;
    for (int round = 0; round < (then_more ? 2 : 1); round++) {
        for (int r = 0; r < n; r++) {
            rec_writer w;
            cr_assert_eq(rec_writer_init(&w, buf, sizeof buf, REC_DATA, (uint64_t)r, 0, 1), 0);
            uint64_t one = 1;
            int64_t value = r;
            rec_add_copy(&w, "value", REC_I64, 1, &one, &value);
            size_t len = rec_finish(&w);
            cr_assert_eq(rec_fd_write(fd, buf, len, &err), 0, "%s", err);
        }
        size_t len = rec_write_eos(buf, sizeof buf, says, stopped);
        cr_assert_eq(rec_fd_write(fd, buf, len, &err), 0, "%s", err);
    }
    close(fd);
}

/* ---- the end-of-stream record ----------------------------------------------------------------- */

static rec_view parse_eos(uint8_t *buf, uint64_t records, bool stopped)
{
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_write_eos(buf, 64, records, stopped), 64);
    cr_assert_eq(rec_parse(buf, 64, &v, &err), 0, "%s", err);
    return v;
}

Test(streams, the_end_of_stream_record_is_held_against_what_arrived)
{
    static uint8_t data[4096] __attribute__((aligned(64))), eos[64] __attribute__((aligned(64)));
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, data, sizeof data, REC_DATA, 0, 0, 0), 0);
    rec_view d, e;
    char *err = NULL;
    cr_assert_eq(rec_parse(data, rec_finish(&w), &d, &err), 0, "%s", err);

    rec_stream s = {0};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rec_stream_note(&s, &d, "x", &err), 0, "%s", err);
    e = parse_eos(eos, 3, false);
    cr_assert_eq(rec_stream_note(&s, &e, "x", &err), 0, "3 sent, 3 arrived: %s", err);
    cr_assert_eq(rec_stream_note(&s, &d, "x", &err), -1, "a record after the end");
    cr_assert(strstr(err, "follows the end-of-stream record"), "%s", err);
    free(err), err = NULL;

    s = (rec_stream){0};
    cr_assert_eq(rec_stream_note(&s, &d, "x", &err), 0);
    e = parse_eos(eos, 5, false);
    cr_assert_eq(rec_stream_note(&s, &e, "x", &err), -1);
    cr_assert(strstr(err, "says 5 records were sent, but 1 arrived"), "%s", err);
    free(err), err = NULL;

    s = (rec_stream){0};
    e = parse_eos(eos, 0, true);
    cr_assert_eq(rec_stream_note(&s, &e, "x", &err), -1, "a stopped writer's stream is short even when counts agree");
    cr_assert(strstr(err, "was stopped after 0 records"), "%s", err);
    free(err), err = NULL;

    /* An end that does not say how it ended (an older writer's) is refused where it is read. */
    for (uint32_t flags = 0; flags < 8; flags++) {
        rec_write_eos(eos, 64, 0, false);
        ((rec_header *)eos)->flags = flags;
        int rc = rec_parse(eos, 64, &e, &err);
        cr_assert_eq(rc, flags == REC_EOS_FINISHED || flags == REC_EOS_STOPPED ? 0 : -1, "flags %u", flags);
        free(err), err = NULL;
    }
}

/* ---- readers of files and pipes ------------------------------------------------------------- */

/* `selfsup inspect` and a stage reading the file with --in file: both refuse it. */
static void both_refuse(const char *path, const char *why)
{
    char *selfsup = test_build_path("selfsup"), *sink = test_build_path("selfsup-sink");
    char *cmd = xasprintf("%s inspect --count %s", selfsup, path), *out = NULL;
    cr_expect_eq(test_run(cmd, &out), 1, "inspect: %s", out);
    cr_expect(strstr(out, why), "inspect should say '%s':\n%s", why, out);
    free(cmd), free(out);
    cmd = xasprintf("%s --in file:%s", sink, path);
    cr_expect_eq(test_run(cmd, &out), 1, "sink: %s", out);
    cr_expect(strstr(out, why), "the reading stage should say '%s':\n%s", why, out);
    free(cmd), free(out), free(selfsup), free(sink);
}

Test(streams, a_file_is_read_only_when_its_end_says_it_is_whole, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "s.rec");
    write_stream(path, 4, 4, false, true); /* 4 records, end, 4 more, end: the collate case */
    both_refuse(path, "follow");
    write_stream(path, 3, 5, false, false);
    both_refuse(path, "says 5 records were sent, but 3 arrived");
    write_stream(path, 3, 3, true, false);
    both_refuse(path, "was stopped after 3 records");
    /* Without its end: the writer died, or the file is still being written. */
    write_stream(path, 3, 3, false, false);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(truncate(path, st.st_size - REC_HEADER_BYTES), 0);
    both_refuse(path, "without an end-of-stream record");
    /* And a whole one passes both. */
    write_stream(path, 3, 3, false, false);
    char *selfsup = test_build_path("selfsup");
    char *cmd = xasprintf("%s inspect --count %s", selfsup, path), *out = NULL;
    cr_expect_eq(test_run(cmd, &out), 0, "%s", out);
    free(cmd), free(out), free(selfsup), free(path);
    test_rm_dir(dir);
}

/* `selfsup-sink --in -` fed by the shell fragment `feed`; its exit status, output in *out. */
static int sink_stdin(const char *feed, char **out)
{
    char *sink = test_build_path("selfsup-sink"), *cmd = xasprintf("%s %s --in -", feed, sink);
    int st = test_run(cmd, out);
    free(cmd), free(sink);
    return st;
}

Test(streams, stdin_is_read_only_when_its_bytes_end_with_its_end_record, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *whole = path_join(dir, "whole.rec"), *two = path_join(dir, "two.rec");
    write_stream(whole, 4, 4, false, false);
    write_stream(two, 4, 4, false, true); /* 4 records, end, 4 more, end: two streams in one */
    /* Each record is 256 bytes (a header, one descriptor, 8 bytes of payload, aligned to 64),
     * so the first end is at byte 1024 and 4 · 256 + 64 bytes follow it. */
    struct {
        const char *fmt, *why; /* the feed (%s: the second file, or the only one); what the sink says */
    } bad[] = {
        {"cat %s |", "data follows the end-of-stream record at byte 1024"},
        {"< %s", "1088 bytes follow the end-of-stream record at byte 1024"},
        /* The writer is quiet after its end, then goes on: what follows still counts. */
        {"{ cat %1$s; sleep 0.5; cat %1$s; } |", "data follows the end-of-stream record at byte 1024"},
    };
    char *out = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *feed = xasprintf(bad[i].fmt, i == 2 ? whole : two);
        cr_expect_eq(sink_stdin(feed, &out), 1, "%s: the records after the first end were dropped:\n%s", feed, out);
        cr_expect(strstr(out, bad[i].why), "%s: should say '%s':\n%s", feed, bad[i].why, out);
        free(feed), free(out);
    }
    /* Whole streams pass, from a pipe, a redirected file, and a writer that holds its pipe open
     * a moment after its end (the reader waits for the close, then finishes). */
    const char *good[] = {"cat %s |", "< %s", "{ cat %s; sleep 0.5; } |"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char *feed = xasprintf(good[i], whole);
        cr_expect_eq(sink_stdin(feed, &out), 0, "%s:\n%s", feed, out);
        cr_expect(strstr(out, "4 records"), "%s:\n%s", feed, out);
        free(feed), free(out);
    }
    unlink(whole), unlink(two);
    free(whole), free(two);
    test_rm_dir(dir);
}

Test(streams, sigterm_to_a_producer_fails_its_pipe_reader, .timeout = 120)
{
    char *dir = test_make_tmpdir(), *produce = bin("produce"), *check = bin("check");
    char *pcmd = xasprintf("%s --count 1000000 --size 100 --sleep-us 500 --out -", produce);
    char *v = victim(dir, "produce", pcmd), *kill = terminator(dir, "produce", 0.5);
    char *cmd = xasprintf("%s %s | %s --in -; echo \"check status $?\" >&2", kill, v, check), *out = NULL;
    test_run(cmd, &out);
    cr_expect_eq(status_in(out, "produce"), 128 + SIGTERM, "a stopped stage did not finish:\n%s", out);
    cr_expect_eq(status_in(out, "check"), 1, "its reader must fail:\n%s", out);
    cr_expect(strstr(out, "was stopped after"), "%s", out);
    free(cmd), free(out), free(kill), free(v), free(pcmd), free(produce), free(check);
    test_rm_dir(dir);
}

Test(streams, sigterm_to_a_worker_in_the_middle_of_a_pipeline_fails_the_end, .timeout = 120)
{
    char *dir = test_make_tmpdir(), *produce = bin("produce"), *pass = bin("passthru"), *check = bin("check");
    char *wcmd = xasprintf("%s --in - --out - --sleep-us 500", pass);
    char *v = victim(dir, "worker", wcmd), *kill = terminator(dir, "worker", 0.5);
    char *cmd = xasprintf("%s %s --count 100000 --size 100 | %s | %s --in - --expect 100000; echo \"check status $?\" >&2",
                          kill, produce, v, check), *out = NULL;
    test_run(cmd, &out);
    cr_expect_eq(status_in(out, "worker"), 128 + SIGTERM, "%s", out);
    cr_expect_eq(status_in(out, "check"), 1, "the end of the pipeline must not finish on part of the data:\n%s",
                 out);
    cr_expect(strstr(out, "was stopped after"), "%s", out);
    free(cmd), free(out), free(kill), free(v), free(wcmd), free(produce), free(pass), free(check);
    test_rm_dir(dir);
}

Test(streams, a_stopped_writer_of_a_file_leaves_no_cache, .timeout = 120)
{
    char *dir = test_make_tmpdir(), *produce = bin("produce"), *cache = path_join(dir, "cache.rec");
    char *pcmd = xasprintf("%s --count 1000000 --size 100 --sleep-us 500 --out file:%s", produce, cache);
    char *v = victim(dir, "produce", pcmd), *kill = terminator(dir, "produce", 0.5);
    char *cmd = xasprintf("%s %s", kill, v), *out = NULL;
    test_run(cmd, &out);
    cr_expect_eq(status_in(out, "produce"), 128 + SIGTERM, "%s", out);
    cr_expect(!exists(cache), "a stopped writer left %s, which looks like a whole cache", cache);
    cr_expect_eq(test_count_files(dir), 1, "only produce.pid is left (no temp file either)");
    char *pid = path_join(dir, "produce.pid");
    unlink(pid);
    free(pid), free(cmd), free(out), free(kill), free(v), free(pcmd), free(cache), free(produce);
    test_rm_dir(dir);
}

Test(streams, a_stopped_writer_of_a_ring_fails_its_reader, .timeout = 120)
{
    char *dir = test_make_tmpdir(), *produce = bin("produce"), *check = bin("check");
    char ring[64];
    snprintf(ring, sizeof ring, "selfsup-test-%d-stopped", (int)getpid());
    char *pcmd = xasprintf("%s --count 1000000 --size 100 --sleep-us 500 --out shm:%s --slot-bytes 65536 --depth 4",
                           produce, ring);
    char *segment = xasprintf("/dev/shm/%s", ring);
    char *v = victim(dir, "produce", pcmd), *kill = terminator_after(dir, "produce", 0.5, segment);
    char *cmd = xasprintf("%s %s & %s --in shm:%s; echo \"check status $?\" >&2; wait", kill, v, check, ring);
    char *out = NULL;
    test_run(cmd, &out);
    cr_expect_eq(status_in(out, "produce"), 128 + SIGTERM, "%s", out);
    cr_expect_eq(status_in(out, "check"), 1, "%s", out);
    cr_expect(strstr(out, "was stopped after"), "the reader should say its writer was stopped:\n%s", out);
    free(cmd), free(out), free(kill), free(v), free(pcmd), free(produce), free(check), free(segment);
    test_rm_dir(dir);
}

/* ---- the trainer ------------------------------------------------------------------------------ */

/* The simclr_larc fixture (5 batches of 4 16-px images) as one epoch of a SimCLR run. */
static const char TRAIN_YAML[] =
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4}}\n"
    "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
    "    HEAD: {PARAMS: [[mlp, {dims: [512, 16]}]]}\n"
    "  LOSS: {name: simclr_info_nce_loss, simclr_info_nce_loss: {temperature: 0.1, buffer_params: {embedding_dim: "
    "16}}}\n"
    "  OPTIMIZER: {name: sgd, momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: constant, value: 0.01}}}\n";

/* selfsup-train on `records` with --steps-per-epoch `steps`; its exit status, output in *out. */
static int train(const char *dir, const char *records, int steps, char **out)
{
    char *cfg = path_join(dir, "c.yaml");
    FILE *f = fopen(cfg, "w");
    fprintf(f, "%s  CHECKPOINT: {DIR: '%s/ckpt'}\n", TRAIN_YAML, dir);
    fclose(f);
    char *trainer = test_build_path("selfsup-train");
    char *cmd = xasprintf("%s -c %s --threads 2 --steps-per-epoch %d --in file:%s", trainer, cfg, steps, records);
    int st = test_run(cmd, out);
    free(cmd), free(trainer), free(cfg);
    return st;
}

static void expect_checkpoints(const char *dir, bool final, bool iteration5)
{
    char *fin = xasprintf("%s/ckpt/model_final_checkpoint_phase0.torch", dir);
    char *it = xasprintf("%s/ckpt/model_iteration5.torch", dir);
    cr_expect_eq(exists(fin), final, "%s %s", fin, final ? "missing" : "written for a run that is not complete");
    cr_expect_eq(exists(it), iteration5, "%s %s", it, iteration5 ? "missing: what was trained is lost" : "written");
    free(fin), free(it);
}

Test(streams, the_trainer_refuses_an_epoch_that_ends_early, .timeout = 300)
{
    char *dir = test_make_tmpdir(), *records = test_fixture("train", "simclr_larc_batches.rec"), *out = NULL;
    /* The control: the epoch has the 5 batches the stream carries. */
    cr_assert_eq(train(dir, records, 5, &out), 0, "%s", out);
    expect_checkpoints(dir, true, false);
    free(out);
    char *rm = xasprintf("rm -rf %s/ckpt", dir);
    cr_assert_eq(system(rm), 0);
    /* An epoch of 8 batches whose stream ends, cleanly, after 5. */
    cr_expect_eq(train(dir, records, 8, &out), 1, "%s", out);
    cr_expect(strstr(out, "the input ended after 5 of the 8 batches"), "%s", out);
    expect_checkpoints(dir, false, true);
    free(out);
    cr_assert_eq(system(rm), 0);
    free(rm), free(records);
    char *cmd = xasprintf("rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd), free(dir);
}

Test(streams, the_trainer_keeps_what_it_trained_when_its_input_was_stopped, .timeout = 300)
{
    char *dir = test_make_tmpdir(), *fixture = test_fixture("train", "simclr_larc_batches.rec");
    char *records = path_join(dir, "stopped.rec");
    size_t len;
    char *bytes = read_whole_file(fixture, &len);
    cr_assert(bytes && len > 64);
    rec_header *eos = (rec_header *)(bytes + len - 64);
    cr_assert_eq(eos->kind, REC_EOS);
    eos->flags = REC_EOS_STOPPED; /* the same 5 batches, from a writer that was stopped */
    FILE *f = fopen(records, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    char *out = NULL;
    cr_expect_eq(train(dir, records, 8, &out), 1, "%s", out);
    cr_expect(strstr(out, "was stopped after 5 records"), "%s", out);
    expect_checkpoints(dir, false, true);
    free(out), free(bytes), free(records), free(fixture);
    char *cmd = xasprintf("rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd), free(dir);
}

/* ---- tcp ---------------------------------------------------------------------------------------- */

/* One tcp reader (the test stage `check`) and its writer (`produce`) on a free port, with keys
 * made by `selfsup keygen` as a user makes them, in a temporary folder. */
typedef struct {
    char *dir, *produce, *check, *reader_keys, *writer_keys;
    int port;
} tcp_case;

static tcp_case tcp_case_new(void)
{
    tcp_case c = {.dir = test_make_tmpdir(), .produce = bin("produce"), .check = bin("check"),
                  .port = test_free_port()};
    char *selfsup = test_build_path("selfsup"), *out = NULL;
    char *cmd = xasprintf("%s keygen %s/keys --clients writer", selfsup, c.dir);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    free(cmd), free(out), free(selfsup);
    c.reader_keys = xasprintf("config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=%s/keys", c.dir);
    c.writer_keys = xasprintf("config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s/keys/writer.key", c.dir);
    return c;
}

static void tcp_case_free(tcp_case *c)
{
    test_rm_rf(c->dir);
    free(c->dir), free(c->produce), free(c->check), free(c->reader_keys), free(c->writer_keys);
}

/* `check --in tcp CHECK_ARGS` and, once it listens, `produce PRODUCE_ARGS --out tcp`: their
 * output, ending with "check status N". */
static char *tcp_run(const tcp_case *c, const char *check_args, const char *produce_args)
{
    char *cmd = xasprintf("%s --in tcp://127.0.0.1:%d %s %s & sleep 0.3; %s %s --out tcp://127.0.0.1:%d %s; "
                          "wait $!; echo \"check status $?\" >&2",
                          c->check, c->port, check_args, c->reader_keys, c->produce, produce_args, c->port,
                          c->writer_keys), *out = NULL;
    test_run(cmd, &out);
    free(cmd);
    return out;
}

Test(streams, a_tcp_reader_fails_when_its_writer_dies_without_its_end, .timeout = 120)
{
    tcp_case c = tcp_case_new();
    /* The writer dies (SIGKILL, so no end-of-stream record) after 300 records. */
    char *out = tcp_run(&c, "", "--count 1000 --size 100 --crash-after 300");
    cr_expect_eq(status_in(out, "check"), 1, "the reader must fail, not wait forever:\n%s", out);
    cr_expect(strstr(out, "every writer disconnected with 0 of 1 end-of-stream records"), "%s", out);
    free(out);
    /* The control: the same writer, finishing, ends the reader cleanly. */
    out = tcp_run(&c, "--expect 1000", "--count 1000 --size 100");
    cr_expect_eq(status_in(out, "check"), 0, "%s", out);
    free(out);
    tcp_case_free(&c);
}

Test(streams, a_tcp_reader_fails_when_its_writer_was_stopped, .timeout = 120)
{
    tcp_case c = tcp_case_new();
    /* SIGTERM mid-stream: the writer sends an end-of-stream record marked stopped. */
    char *pcmd = xasprintf("%s --count 1000000 --size 100 --sleep-us 500 --out tcp://127.0.0.1:%d %s", c.produce,
                           c.port, c.writer_keys);
    char *v = victim(c.dir, "produce", pcmd), *kill = terminator(c.dir, "produce", 0.8);
    char *cmd = xasprintf("%s --in tcp://127.0.0.1:%d %s & c=$!; sleep 0.3; %s %s; wait $c; "
                          "echo \"check status $?\" >&2", c.check, c.port, c.reader_keys, kill, v), *out = NULL;
    test_run(cmd, &out);
    cr_expect_eq(status_in(out, "produce"), 128 + SIGTERM, "%s", out);
    cr_expect_eq(status_in(out, "check"), 1, "a stopped writer's stream must fail its tcp reader:\n%s", out);
    cr_expect(strstr(out, "a stage writing it was stopped after"), "%s", out);
    free(cmd), free(out), free(kill), free(v), free(pcmd);
    tcp_case_free(&c);
}

Test(streams, a_tcp_reader_holds_the_end_records_count_against_what_arrived, .timeout = 120)
{
    tcp_case c = tcp_case_new();
    /* 100 records, then an end-of-stream record that says 90 (the transport's true one, 100,
     * comes after it, too late: a reader with one writer ends at its first). */
    char *out = tcp_run(&c, "", "--count 100 --size 100 --eos-says 90");
    cr_expect_eq(status_in(out, "check"), 1, "a miscounted stream must fail its tcp reader:\n%s", out);
    cr_expect(strstr(out, "the writers' end-of-stream records say 90 records were sent, but 100 arrived"), "%s", out);
    free(out);
    /* The control: a true count passes. */
    out = tcp_run(&c, "--expect 100", "--count 100 --size 100 --eos-says 100");
    cr_expect_eq(status_in(out, "check"), 0, "%s", out);
    free(out);
    tcp_case_free(&c);
}

Test(streams, a_tcp_writer_without_a_reader_obeys_sigterm, .timeout = 60)
{
    tcp_case c = tcp_case_new();
    /* Nobody reads: the writer waits to send. One SIGTERM must end it (the test's timeout is the
     * bound: before, the writer retried its send on EINTR and outlived ten minutes). */
    char *pcmd = xasprintf("%s --count 1000 --size 100 --out tcp://127.0.0.1:%d %s", c.produce, c.port,
                           c.writer_keys);
    char *v = victim(c.dir, "produce", pcmd), *kill = terminator(c.dir, "produce", 0.5);
    char *cmd = xasprintf("%s %s", kill, v), *out = NULL;
    test_run(cmd, &out);
    cr_expect_eq(status_in(out, "produce"), 128 + SIGTERM, "%s", out);
    free(cmd), free(out), free(kill), free(v), free(pcmd);
    tcp_case_free(&c);
}

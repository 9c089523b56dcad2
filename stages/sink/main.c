/*
 * selfsup-sink — the end of a data-only pipeline: take every record, keep it or not, and say
 * how fast they came.
 *
 * With no trainer attached, a user still wants to run the decode → augment → collate part of
 * a config — to time the data path of a cluster node, to cache batches, or to check what the
 * model would see. Put the sink where the trainer goes:
 *
 *   selfsup run CONFIG +config.SELFSUP.STAGES.train="selfsup-sink --save /tmp/batches.rec"
 *   selfsup-decode -c CONFIG | selfsup-augment -c CONFIG | selfsup-collate -c CONFIG | selfsup-sink
 *
 * --save PATH writes the records as a record stream (readable by `selfsup inspect`, by
 * --in file:PATH and by tools/selfsup_records.py), atomically: the file appears complete or
 * not at all; a "{rank}" in PATH becomes the stage's rank (several trainers' sinks, a file
 * each). At the end it prints one line on stderr: records, bytes, seconds, records/s.
 * --pace MS takes a record no more often than every MS milliseconds: a stand-in for a
 * trainer's step time, so that back-pressure reaches the stages before it (the tests use it
 * to keep a decode farm busy long enough to lose a host in mid-epoch).
 */
#include "atomic_file.h"
#include "log.h"
#include "stage.h"
#include "timer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *save; /* as given */
    char *path;       /* with {rank} replaced */
    long pace_ms;
} sink;

/* PATH with each "{rank}" replaced by this stage's rank. */
static char *path_for_rank(const char *save, int rank)
{
    strbuf sb = {0};
    for (const char *at; (at = strstr(save, "{rank}")); save = at + 6) {
        sb_putn(&sb, save, (size_t)(at - save));
        sb_printf(&sb, "%d", rank);
    }
    sb_puts(&sb, save);
    return sb.s;
}

static int option(void *state, int argc, char **argv)
{
    sink *k = state;
    if (!strcmp(argv[0], "--save") && argc > 1) {
        k->save = argv[1];
        return 2;
    }
    return stage_pace_option(argc, argv, &k->pace_ms);
}

static int run(stage *s, void *state)
{
    sink *k = state;
    atomic_file af = {.fd = -1};
    char *err = NULL;
    if (k->save)
        k->save = k->path = path_for_rank(k->save, stage_rank(s));
    if (k->save && atomic_file_open(&af, k->save, &err) != 0) {
        log_error("cannot write %s: %s", k->save, err);
        free(err);
        return 1;
    }
    rec_view v;
    int st;
    long records = 0;
    unsigned long long bytes = 0;
    double t0 = now_seconds();
    bool ok = true;
    while ((st = stage_read(s, &v)) == STAGE_RECORD) {
        if (k->save && ok && atomic_file_write(&af, v.base, v.hdr->size, &err) != 0) {
            log_error("writing %s failed: %s", k->save, err);
            free(err);
            ok = false;
        }
        records++;
        bytes += v.hdr->size;
        stage_read_done(s);
        if (!ok)
            break;
        stage_pace(s, k->pace_ms);
    }
    double dt = now_seconds() - t0;
    if (st == STAGE_FAILED || !ok || stage_stopping(s)) { /* part of a stream is no cache */
        if (k->save)
            atomic_file_abort(&af);
        if (k->save && stage_stopping(s))
            log_warn("%s not written: stopped after %ld records", k->save, records);
        return st == STAGE_FAILED || !ok ? 1 : stage_exit_status(s);
    }
    /* End the stream the way the file: transport does, so --in file:PATH replays it. */
    uint8_t eos[REC_HEADER_BYTES] __attribute__((aligned(64)));
    size_t eos_len = rec_write_eos(eos, sizeof eos, (uint64_t)records, false);
    if (k->save && (atomic_file_write(&af, eos, eos_len, &err) != 0 || atomic_file_commit(&af, &err) != 0)) {
        log_error("could not finish %s: %s", k->save, err);
        free(err);
        return 1;
    }
    log_info("%ld records, %llu bytes in %.2f s (%.1f records/s)%s%s", records, bytes, dt,
             dt > 0 ? (double)records / dt : 0.0, k->save ? "; saved to " : "", k->save ? k->save : "");
    return stage_exit_status(s);
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "sink",
        .summary = "Consume records (a data-only pipeline's end): count them, optionally save them.",
        .role = "consumer",
        .reads = true,
        .writes = false,
        .option = option,
        .options = "  --save PATH         write the records to PATH as a record stream (atomically;\n"
                   "                      {rank} in PATH becomes the stage's rank)\n"
                   "  --pace MS           take a record at most every MS milliseconds (a slow trainer)\n",
    };
    sink k = {0};
    int status = stage_main(argc, argv, &info, &k, run);
    free(k.path);
    return status;
}

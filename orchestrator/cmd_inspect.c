/*
 * cmd_inspect.c — `selfsup inspect [--values N] [--count] FILE|file:PATH|-`.
 *
 * Prints a stream of records for humans: a `file:` cache, or the framed records a stage
 * writes to stdout (`selfsup-decode ... --out - | selfsup inspect -`). Records are read one
 * at a time with rec_fd_read, so a stream of any length needs one record's memory, and each
 * is printed (rec_print) before the next is read: when a record is invalid, everything good
 * before it has been shown, then the error, with its byte offset in the stream, and exit 1.
 * --count prints one summary line instead. The stream is held to what its end-of-stream
 * record says (rec_stream_note), as a stage reading it would: a stream that ends without one,
 * one whose writer was stopped, a count that differs from the records read, or records after
 * the end make the exit status 1 — a cache that a stage would refuse is not called valid.
 */
#include "cmd.h"

#include "log.h"
#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int values;
    bool count;
    const char *path;
} inspect_args;

typedef struct {
    uint64_t records, data, eos, tensors, bytes;
    rec_stream stream; /* what the end-of-stream record is held against */
} inspect_totals;

static void inspect_usage(FILE *out)
{
    fputs("usage: selfsup inspect [--values N] [--count] FILE|file:PATH|-\n"
          "\n"
          "Print the records of a file (a file: cache) or of stdin (-), one header line and one\n"
          "line per tensor: name, dtype, shape and the first values.\n"
          "\n"
          "options:\n"
          "  --values N   values to print per tensor (default 8; 0 none; -1 all)\n"
          "  --count      print only a summary: records, tensors, bytes\n"
          "\n"
          "exit status: 0 a whole stream of valid records; 1 an invalid or cut-short record (printed\n"
          "after the good ones), or a stream that is not whole: no end-of-stream record, a writer\n"
          "that was stopped, a record count that differs from it, records after it; 2 usage error\n", out);
}

/* 0 to go on, -1 for --help (exit 0), or EXIT_USAGE. */
static int parse_args(int argc, char **argv, inspect_args *a)
{
    *a = (inspect_args){.values = 8};
    for (int k = 1; k < argc; k++) {
        const char *arg = argv[k];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            inspect_usage(stdout);
            return -1;
        } else if (!strcmp(arg, "--count")) {
            a->count = true;
        } else if (!strcmp(arg, "--values")) {
            if (k + 1 >= argc)
                return log_usage_error(inspect_usage, "%s needs a number", arg);
            char *end;
            errno = 0;
            long v = strtol(argv[++k], &end, 10);
            if (errno || end == argv[k] || *end || v < -1 || v > 1000000000)
                return log_usage_error(inspect_usage, "--values wants a number from -1 up, not '%s'",
                                       argv[k]);
            a->values = (int)v;
        } else if (arg[0] == '-' && arg[1]) {
            return log_usage_error(inspect_usage, "unknown option '%s'", arg);
        } else if (a->path) {
            return log_usage_error(inspect_usage, "one input only (extra argument '%s')", arg);
        } else {
            a->path = arg;
        }
    }
    if (!a->path)
        return log_usage_error(inspect_usage, "no input given: a FILE, file:PATH or - for stdin");
    return 0;
}

static void print_totals(const char *name, const inspect_totals *t)
{
    printf("%s: %" PRIu64 " record%s (%" PRIu64 " data, %" PRIu64 " end of stream), %" PRIu64 " tensors, %" PRIu64
           " bytes\n", name, t->records, t->records == 1 ? "" : "s", t->data, t->eos, t->tensors, t->bytes);
}

static int add_record(inspect_totals *t, const rec_view *v, const char *name, char **err)
{
    t->records++;
    t->bytes += v->hdr->size;
    t->tensors += v->hdr->n_tensors;
    if (v->hdr->kind == REC_EOS)
        t->eos++;
    else
        t->data++;
    return rec_stream_note(&t->stream, v, name, err);
}

int cmd_inspect(int argc, char **argv)
{
    inspect_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *path = strncmp(a.path, "file:", 5) ? a.path : a.path + 5;
    bool is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "<stdin>" : path;
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        log_error("%s: %s", path, strerror(errno));
        return EXIT_RUNTIME;
    }
    rec_buf buf = {0};
    rec_view view;
    inspect_totals totals = {0};
    uint64_t offset = 0;
    char *err = NULL;
    bool whole = true;
    while ((rc = rec_fd_read(fd, &buf, &view, &offset, &err)) == 1) {
        if (!a.count)
            rec_print(stdout, &view, a.values);
        if (add_record(&totals, &view, name, &err) != 0 && whole) { /* the first fault; read on to count */
            log_error("%s", err);
            free(err);
            err = NULL;
            whole = false;
        }
    }
    if (a.count)
        print_totals(name, &totals);
    fflush(stdout);
    if (rc < 0)
        log_error("%s: %s", name, err);
    else if (!totals.stream.ended)
        log_error("%s: the stream ends without an end-of-stream record after %" PRIu64
                  " record%s: its writer died or it is still being written",
                  name, totals.records, totals.records == 1 ? "" : "s");
    whole = whole && rc == 0 && totals.stream.ended;
    free(err);
    rec_buf_free(&buf);
    if (!is_stdin)
        close(fd);
    return whole ? 0 : EXIT_RUNTIME;
}

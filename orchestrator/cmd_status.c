/*
 * cmd_status.c — `selfsup status RUN_DIR [--json]`: what a run is doing, from another
 * terminal (or what it did, once it ended): its state, each stage's records and rate and
 * last heartbeat, the rings, and on a trainer host of the decode farm each farm host's
 * leases, samples and rate. It reads RUN_DIR/status.json (run_status.h), which the run's
 * orchestrator rewrites every few seconds; it starts nothing and asks no process.
 *
 * Exit status: 0 when the status was printed (whatever state the run is in), 1 when the
 * directory has no readable status, 2 for a bad command line.
 */
#include "cmd.h"

#include "log.h"
#include "run_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void status_usage(FILE *out)
{
    fputs("usage: selfsup status RUN_DIR [--json]\n"
          "\n"
          "Print what the run in RUN_DIR is doing: its state (starting, running, stopping,\n"
          "finished, failed, stopped, or lost when its orchestrator is gone without a word),\n"
          "each stage's records, rate and last heartbeat, the rings, and the farm hosts a\n"
          "trainer host deals leases to. --json prints RUN_DIR/status.json as it is, with the\n"
          "state as judged here.\n",
          out);
}

int cmd_status(int argc, char **argv)
{
    const char *dir = NULL;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            status_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--json"))
            as_json = true;
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else {
            status_usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!dir) {
        status_usage(stderr);
        return EXIT_USAGE;
    }
    char *err = NULL;
    json_t *status = run_status_read(dir, &err);
    if (!status) {
        log_error("%s", err);
        free(err);
        return 1;
    }
    if (as_json) {
        json_object_set_new(status, "state", json_string(run_status_state(status, (double)time(NULL))));
        json_dumpf(status, stdout, JSON_INDENT(1) | JSON_SORT_KEYS);
        fputc('\n', stdout);
    } else {
        run_status_print(stdout, status, (double)time(NULL));
    }
    json_decref(status);
    return 0;
}

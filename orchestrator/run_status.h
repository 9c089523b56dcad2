/*
 * run_status.h — RUN_DIR/status.json: what a run is doing, for `selfsup status RUN_DIR`.
 *
 * The orchestrator (supervise.c) rewrites the file every STATUS_EVERY_S seconds while the run
 * lasts and once more where it ends; a reader never sees half a file (it is written beside
 * and renamed over). Its fields:
 *
 *   {"state": "starting" | "running" | "stopping" | "finished" | "failed" | "stopped",
 *    "exit_status": N (once ended), "failure": "stage train (pid 42) exited with status 1",
 *    "pid", "host": the orchestrator's, "role": "all" | "farm" | "train", "node_rank": N,
 *    "started", "updated": Unix times, "progress": the progress line,
 *    "stages": [{"id", "name", "pid", "state": "starting" | "running" | "exited",
 *                "exit": "exited with status 0", "records", "rate", "expected",
 *                "heartbeat_age_s", "counters": {...},
 *                "farm": {"endpoint", "remaining", "hosts": [{"id", "state", "leases",
 *                         "held", "samples", "rate", "losses", "silent_s"}]}}],
 *    "rings": [{"label", "fill", "slots"}]}
 *
 * "farm" is there for a collate stage that deals leases to farm hosts (farm_server.h).
 */
#ifndef SELFSUP_RUN_STATUS_H
#define SELFSUP_RUN_STATUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#define STATUS_EVERY_S 2.0
#define STATUS_STALE_S 30.0
#define STATUS_FILE "status.json"

/* Write `status` to RUN_DIR/status.json (beside, then renamed over). 0, or -1 + *err. */
int run_status_write(const char *run_dir, const json_t *status, char **err);
/* Read it back. NULL + *err when there is none or it does not parse. */
json_t *run_status_read(const char *run_dir, char **err);
/* A run that has not ended but whose orchestrator is gone (killed outright: it could not say
 * so) reads as "lost": on the host that ran it, by its pid; read from another host (the login
 * node of a Slurm job), when the file has not been rewritten for STATUS_STALE_S. Otherwise the
 * state the file says. `now`: Unix time. */
const char *run_status_state(const json_t *status, double now);
/* The status as a person reads it: the run, each stage, the rings, the farm hosts. */
void run_status_print(FILE *out, const json_t *status, double now);

#endif

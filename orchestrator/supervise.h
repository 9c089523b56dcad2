/*
 * supervise.h — start a topology's processes and watch them until the run ends.
 *
 * One event loop (zmq_poll over the control socket, a signalfd and every stage's output
 * pipe) does all of it: copies each stage's stderr and stdout into RUN_DIR/logs/ID.log,
 * keeps its last lines for error messages, waits for every HELLO before sending START,
 * tracks heartbeats for the progress line and RUN_DIR/status.json (run_status.h), reaps
 * exits, and ends the run:
 *
 *   - every stage exited 0                      → 0
 *   - a stage exited non-zero, died of a signal, or sent no heartbeat for
 *     SELFSUP.CONTROL.HEARTBEAT_TIMEOUT_S       → STOP + SIGTERM to the others, SIGKILL
 *                                                 after 1 s (30 s while a trainer runs, for
 *                                                 its checkpoint, unless a stage hung), a
 *                                                 message naming the stage, its status and
 *                                                 last log lines; 1
 *   - SIGINT / SIGTERM                          → STOP to every stage (they finish what
 *                                                 they are doing), SIGKILL after 30 s or
 *                                                 at a second signal; 128 + signal
 *
 * Children run in their own process groups (so a terminal's ^C reaches the orchestrator
 * alone, which then stops them in order) with PR_SET_PDEATHSIG, so no stage outlives an
 * orchestrator that was killed outright.
 */
#ifndef SELFSUP_SUPERVISE_H
#define SELFSUP_SUPERVISE_H

#include "control.h"
#include "ring.h"
#include "topology.h"

typedef struct {
    const char *run_dir;
    double heartbeat_timeout_s;
    ring **rings;   /* the topology's rings, attached as observer (for the fill levels) */
    const char *role; /* this host's part, "all", "farm" or "train" (for RUN_DIR/status.json) */
    int node_rank;
} supervise_options;

/* Run the topology to its end; returns selfsup's exit status. */
int supervise(const topology *t, ctl_server *ctl, const supervise_options *opt);

#endif

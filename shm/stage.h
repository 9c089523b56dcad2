/*
 * stage.h — what every stage binary shares, so that its main.c holds only its own logic.
 *
 * A stage is a loop "read a record, do the work, write a record". stage_main() does the
 * rest: it parses the common command line, composes the config, opens the input and output
 * transports, connects to the orchestrator when --control is given (HELLO, then wait for
 * START), installs the signal handlers, calls the stage's run function, and afterwards ends
 * the output stream (EOS on success, a broken stream on failure) and sends a FINAL report.
 *
 * Inside run(), stage_read() and stage_record_begin() wait in short slices; between slices
 * they send the once-a-second heartbeat, obey PAUSE / RESUME / STOP / EPOCH, and notice
 * SIGINT / SIGTERM. A stage that computes for a long time without I/O calls stage_poll().
 *
 * Common options (every stage):
 *   -c, --config FILE      VISSL config; the arguments after the options are overrides
 *   --in URI, --out URI    shm:NAME | - | file:PATH | tcp://HOST:PORT (see transport.h).
 *                          Default: - when stdin / stdout is not a terminal
 *   --control ENDPOINT     the orchestrator's ZeroMQ endpoint (none: run on our own)
 *   --id ID                name on the control plane (default NAME.RANK)
 *   --rank R, --world-size W
 *   --slot-bytes N, --depth N, --producers N
 *                          ring geometry when this stage creates its output ring, and the
 *                          number of writers a tcp reader waits for (default: config)
 *   -h, --help, --version
 *
 * Exit status: 0 when the input ended and the output was closed cleanly, 1 on a runtime
 * failure (a short or stopped input included), 2 on a usage or config error, 128 + the signal
 * when a signal or the orchestrator's STOP (counted as SIGTERM) ended the stage before its
 * work was done: its output then ends as stopped (transport.h), so no reader takes it for a
 * whole stream. A second SIGINT/SIGTERM ends the process at once.
 */
#ifndef SELFSUP_STAGE_H
#define SELFSUP_STAGE_H

#include "config.h"
#include "record.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct stage stage;

typedef struct {
    const char *name;    /* "augment": logs, control id, help */
    const char *summary; /* one line for --help */
    const char *role;    /* "producer", "worker" or "consumer", as reported in HELLO */
    const char *options; /* --help text for the stage's own options, or NULL */
    bool reads, writes;  /* whether the stage has an input / an output */
    /* Stage-specific options. Called with argv at an option the framework does not know;
     * returns how many arguments it used (1 or 2), 0 when the option is unknown, -1 when
     * its value is bad (after logging why). May be NULL. */
    int (*option)(void *state, int argc, char **argv);
    /* Called once the config is composed, before any transport opens or the orchestrator
     * is told we are ready: build what the config describes (a transform list, a dataset
     * index) and refuse a bad config here, so it stops the run before anything moves.
     * Returns 0, or an exit status (2 for a config error, after logging why). May be NULL. */
    int (*prepare)(stage *s, void *state);
} stage_info;

/* Parse, set up, run, tear down; returns the process exit status. */
int stage_main(int argc, char **argv, const stage_info *info, void *state, int (*run)(stage *s, void *state));

/* ---- inside run() ----------------------------------------------------------------------- */

enum { STAGE_FAILED = -1, STAGE_END = 0, STAGE_RECORD = 1 };

/* Next input record, valid until stage_read_done(). STAGE_END when the input ended or a
 * stop was asked for (see stage_stopping), STAGE_FAILED on an error (already logged). */
int stage_read(stage *s, rec_view *view);
void stage_read_done(stage *s);
/* Where the main input's records are read in place: a shm ring's data area (*bytes its size),
 * for a trainer to pin for its GPU's copies (eng_pin_host); NULL for the other transports,
 * which read into memory of their own. Valid until run() returns. */
void *stage_input_memory(stage *s, size_t *bytes);

/* A second input, which the stage opens itself (the trainer's test batches: --test-in).
 * Read like the main one, heartbeats, control commands and stops included. NULL when the
 * URI cannot be opened (logged). */
typedef struct stage_input stage_input;
stage_input *stage_open_input(stage *s, const char *uri);
int stage_input_read(stage_input *in, rec_view *view);
void stage_input_read_done(stage_input *in);
void stage_input_close(stage_input *in);

/* Start an output record in place (in the ring slot itself for shm:). NULL when the stage
 * should end: a stop was asked for, the readers are gone (stage_failed() false), the output
 * broke or the poll hook failed (stage_failed() true, logged). */
rec_writer *stage_record_begin(stage *s, rec_kind kind, uint64_t seq, uint32_t epoch, uint32_t max_tensors);
/* Send it. -1 when it did not fit the slot (the error names the sizes and the setting to
 * raise) or the output broke. */
int stage_record_end(stage *s);
/* Copy a whole input record to the output unchanged. 0 or -1. */
int stage_forward(stage *s, const rec_view *view);

/* Add to a stage-specific counter reported in heartbeats ("invalid_images"). */
void stage_count(stage *s, const char *counter, int64_t delta);
/* Heartbeat and control commands, for long computations between reads and writes. */
void stage_poll(stage *s);
/* Wait `ms` milliseconds, polling meanwhile, or less when a stop comes: a slower machine
 * emulated (selfsup-sink --pace, a trainer's step; selfsup-augment --pace, a slower host). */
void stage_pace(stage *s, long ms);
/* The --pace MS option of such a stage, for its stage_info.option: 2 when argv is --pace MS
 * (into *ms), 0 when it is another option, -1 for a bad value (logged). */
int stage_pace_option(int argc, char **argv, long *ms);
/* A stage option `name N` with a whole number N >= min, for stage_info.option: 2 when argv is
 * that option (into *out), 0 when it is another, -1 for a bad value (logged). */
int stage_long_option(int argc, char **argv, const char *name, long min, long *out);
/* A function stage_poll also calls, on every wait slice (at least 10 times a second) and
 * between records, for a stage that serves a socket of its own while it reads and writes
 * (collate's lease server, decode's lease client). It returns STAGE_HOOK_GO_ON,
 * STAGE_HOOK_END to end the input (stage_read then says STAGE_END: the stage's work is done
 * by its own reckoning), STAGE_HOOK_FAILED after logging a failure of its own, or
 * STAGE_HOOK_PEERS_LOST after logging that the peers it serves are gone: stage_read then
 * says STAGE_FAILED, and the output ends as stopped, not broken, as after a stopped input
 * (what was written is whole; a trainer keeps its state). A failure (either) also ends a
 * wait for room to write (stage_record_begin says NULL). */
enum { STAGE_HOOK_GO_ON = 0, STAGE_HOOK_END = 1, STAGE_HOOK_FAILED = -1, STAGE_HOOK_PEERS_LOST = -2 };
void stage_set_poll_hook(stage *s, int (*hook)(void *arg), void *arg);
/* A function that adds fields of its own to each heartbeat and the final report, a JSON
 * object (collate's lease server adds the farm hosts, for the progress line and `selfsup
 * status`). */
struct json_t;
void stage_set_report_hook(stage *s, void (*hook)(void *arg, struct json_t *report), void *arg);
bool stage_stopping(const stage *s);
/* Whether a signal or the orchestrator's STOP asked for the stop (not: the readers left). */
bool stage_stop_asked(const stage *s);
/* True once something failed (the exit status will be 1). */
bool stage_failed(const stage *s);
/* True when the failure was an input whose writer had been stopped: the input is short, but
 * what came of it was whole (a trainer may keep its state to resume from). */
bool stage_peer_stopped(const stage *s);
/* What run() should return when stage_read / stage_record_begin said to end: 0 after a
 * clean end or stop, 1 after a failure. */
int stage_exit_status(const stage *s);

/* The composed config (the `config` map), rank, world size, current epoch. */
const cfg_node *stage_config(const stage *s);
int stage_rank(const stage *s);
int stage_world_size(const stage *s);
uint32_t stage_epoch(const stage *s);
const char *stage_id(const stage *s);

#endif

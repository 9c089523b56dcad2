/*
 * stage.c — the stage framework of stage.h: command line, config, transports, control
 * plane, signals and heartbeats around a stage's own run() function.
 *
 * Waiting is always done in slices of POLL_SLICE_MS so that one thread can do everything:
 * between two slices of waiting for a record, stage_poll() sends the heartbeat when one is
 * due, drains the orchestrator's commands and looks at the stop flag that the signal
 * handler sets. No helper thread, no locks: the stage's state belongs to its one thread.
 */
#include "stage.h"

#include "control.h"
#include "log.h"
#include "ring.h"
#include "timer.h"
#include "transport.h"
#include "util.h"
#include "version.h"

#include <assert.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_SLICE_MS 100
#define HEARTBEAT_S 1.0
#define START_TIMEOUT_S 60.0
#define MAX_COUNTERS 32

typedef struct {
    char name[48];
    int64_t value;
} counter;

struct stage {
    const stage_info *info;
    cfg_t cfg;
    bool have_cfg;
    const char *config_file;
    char **overrides;
    int n_overrides;

    const char *in_uri, *out_uri, *control, *id_arg;
    char *id;
    int rank, world_size;
    tp_options tp;
    transport *in, *out;
    ctl_client *ctl;

    rec_writer writer;
    bool writing;
    uint32_t epoch;
    bool paused, failed, readers_gone;
    bool peer_failed;  /* the failure came through a transport from another stage */
    bool peer_stopped; /* ... and that stage had been stopped (its stream is short) */

    uint64_t records_in, records_out, bytes_in, bytes_out;
    double blocked_in_s, blocked_out_s, last_heartbeat;
    counter counters[MAX_COUNTERS];
    int n_counters;

    int (*hook)(void *arg); /* stage_set_poll_hook */
    void *hook_arg;
    int hook_said;          /* its last answer other than STAGE_HOOK_GO_ON */
    void (*report_hook)(void *arg, json_t *report); /* stage_set_report_hook */
    void *report_hook_arg;
};

/* ---- signals ------------------------------------------------------------------------------- */

/* An atomic, not a volatile sig_atomic_t: the kernel runs the handler on any thread that does
 * not block the signal (a ZeroMQ thread before it masks signals, a worker thread of a stage),
 * and volatile only covers a handler on the thread that reads the flag. Lock-free atomics are
 * async-signal-safe (C11 7.14.1.1), and plain reads and writes of them stay as they were. */
static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop flag is written in a signal handler");
static atomic_int stop_signal;
/* Signals received, apart from the orchestrator's STOP message: the orchestrator sends STOP and
 * SIGTERM together as one request, so a STOP read before its SIGTERM arrives must not make that
 * SIGTERM the "second" signal, which ends the process at once (a trainer before its checkpoint). */
static atomic_int signals_seen;

static void on_stop_signal(int sig)
{
    if (signals_seen++ > 0) /* the second one: the user means it */
        _exit(128 + sig);
    stop_signal = sig;
}

static void install_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a blocking read or write returns EINTR and the loop sees the flag. */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe is an EPIPE error we report, not a silent death */
}

bool stage_stopping(const stage *s)
{
    return stop_signal != 0 || s->readers_gone;
}

bool stage_stop_asked(const stage *s)
{
    (void)s;
    return stop_signal != 0;
}

/* ---- command line ---------------------------------------------------------------------------- */

static void usage(const stage_info *info, FILE *out)
{
    fprintf(out,
            "usage: selfsup-%s [-c CONFIG] [options] [overrides...]\n"
            "\n%s\n\n"
            "common options:\n"
            "  -c, --config FILE      VISSL config file or name; overrides follow the options\n"
            "  --in URI, --out URI    shm:NAME | - | file:PATH | tcp://HOST:PORT[?producers=N]\n"
            "                         (default: - when stdin/stdout is not a terminal)\n"
            "  --control ENDPOINT     report to the orchestrator at ENDPOINT (ZeroMQ)\n"
            "  --id ID                name on the control plane (default %s.RANK)\n"
            "  --rank R               this process's rank (default 0)\n"
            "  --world-size W         number of ranks (default 1)\n"
            "  --slot-bytes N         ring slot size for an output ring this stage creates\n"
            "  --depth N              ring slots / network high-water mark\n"
            "  --producers N          writers a ring or tcp reader waits for before the end\n"
            "  -h, --help, --version\n",
            info->name, info->summary, info->name);
    if (info->options)
        fprintf(out, "\n%s options:\n%s", info->name, info->options);
}

static int parse_count(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi) {
        log_error("%s %s: expected an integer from %lld to %lld", opt, val, (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* One common option at argv[0] (value in argv[1]); returns arguments used, 0 if unknown. */
static int common_option(stage *s, int argc, char **argv)
{
    const char *o = argv[0];
    static const char *const with_value[] = {"-c", "--config", "--in", "--out", "--control", "--id",
                                             "--rank", "--world-size", "--slot-bytes", "--depth",
                                             "--producers"};
    bool known = false;
    for (size_t i = 0; i < ARRAY_LEN(with_value); i++)
        known |= !strcmp(o, with_value[i]);
    if (!known)
        return 0;
    if (argc < 2) {
        log_error("%s needs a value", o);
        return -1;
    }
    const char *v = argv[1];
    int64_t n;
    if (!strcmp(o, "-c") || !strcmp(o, "--config")) s->config_file = v;
    else if (!strcmp(o, "--in")) s->in_uri = v;
    else if (!strcmp(o, "--out")) s->out_uri = v;
    else if (!strcmp(o, "--control")) s->control = v;
    else if (!strcmp(o, "--id")) s->id_arg = v;
    else if (!strcmp(o, "--rank")) {
        if (parse_count(o, v, 0, 1 << 20, &n)) return -1;
        s->rank = (int)n;
    } else if (!strcmp(o, "--world-size")) {
        if (parse_count(o, v, 1, 1 << 20, &n)) return -1;
        s->world_size = (int)n;
    } else if (!strcmp(o, "--slot-bytes")) {
        if (parse_count(o, v, 4096, (int64_t)REC_MAX_BYTES, &n)) return -1;
        s->tp.slot_bytes = (size_t)n;
    } else if (!strcmp(o, "--depth")) {
        if (parse_count(o, v, 2, 1 << 16, &n)) return -1;
        s->tp.depth = (uint32_t)n;
    } else {
        if (parse_count(o, v, 1, 4096, &n)) return -1;
        s->tp.producers = (uint32_t)n;
    }
    return 2;
}

/* Split "--opt=value" into two arguments so that both spellings work. */
static char **split_equals(int argc, char **argv, int *out_argc)
{
    char **v = xcalloc((size_t)argc * 2 + 1, sizeof *v);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!strncmp(argv[i], "--", 2) && eq) {
            v[n++] = xstrndup(argv[i], (size_t)(eq - argv[i]));
            v[n++] = xstrdup(eq + 1);
        } else {
            v[n++] = xstrdup(argv[i]);
        }
    }
    *out_argc = n;
    return v;
}

/* Returns -1 to continue, else an exit status (help, version, usage error). */
static int parse_args(stage *s, int argc, char **argv, void *state)
{
    s->overrides = xcalloc((size_t)argc + 1, sizeof *s->overrides);
    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(s->info, stdout);
            return 0;
        }
        if (!strcmp(a, "--version")) {
            printf("selfsup-%s %s\n", s->info->name, SELFSUP_VERSION);
            return 0;
        }
        if (a[0] != '-' || !a[1]) { /* an override (or "-", which no option takes alone) */
            s->overrides[s->n_overrides++] = argv[i++];
            continue;
        }
        int used = common_option(s, argc - i, argv + i);
        if (used == 0 && s->info->option)
            used = s->info->option(state, argc - i, argv + i);
        if (used == 0) {
            log_error("unknown option '%s'; see selfsup-%s --help", a, s->info->name);
            return EXIT_USAGE;
        }
        if (used < 0)
            return EXIT_USAGE;
        i += used;
    }
    const char *uris[] = {s->in_uri, s->out_uri};
    for (size_t k = 0; k < 2; k++) {
        char *err = NULL;
        if (uris[k] && tp_check_uri(uris[k], &err) != 0) {
            log_error("--%s %s", k ? "out" : "in", err);
            free(err);
            return EXIT_USAGE;
        }
    }
    return -1;
}

/* ---- setup ---------------------------------------------------------------------------------- */

static int compose_config(stage *s)
{
    cfg_err err;
    bool ok = cfg_compose_arg(&s->cfg, true, s->config_file, s->n_overrides, s->overrides, &err);
    s->have_cfg = true; /* a failed composition still holds memory to free */
    if (!ok) {
        log_error("%s", err.msg);
        return -1;
    }
    return 0;
}

/* A tcp --in, --out or --control needs its CURVE keys (auth.h). Missing or unusable keys are
 * a configuration error: found here, before anything is opened, the stage exits 2 (the setup
 * has no later step that could still say so). */
static int check_tcp_keys(const stage *s)
{
    static const struct {
        const char *flag, *key;
        bool server;
    } need[] = {{"--in", "SELFSUP.TRANSPORT.SERVER_KEYS_DIR", true},
                {"--out", "SELFSUP.TRANSPORT.CLIENT_KEY_FILE", false},
                {"--control", "SELFSUP.CONTROL.CLIENT_KEY_FILE", false}};
    const char *uris[] = {s->in_uri, s->out_uri, s->control};
    for (size_t i = 0; i < ARRAY_LEN(need); i++) {
        if (!uris[i] || strncmp(uris[i], "tcp://", 6))
            continue;
        const char *path = cfg_str(stage_config(s), need[i].key);
        char *err = NULL;
        auth_keys k;
        memset(&k, 0, sizeof k);
        auth_allow a = {0};
        int rc = !*path        ? report_failure(&err, "config.%s is not set", need[i].key)
                 : need[i].server ? auth_load_server_dir(path, &k, &a, &err)
                                  : auth_load_keys(path, AUTH_CLIENT, &k, &err);
        auth_wipe(&k);
        auth_allow_free(&a);
        if (rc != 0) {
            log_error("%s %s: tcp needs CURVE keys, and %s; 'selfsup keygen DIR --clients NAME:IDS ...' makes them "
                      "(see its --help)", need[i].flag, uris[i], err);
            free(err);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* Ring geometry from the config unless the command line gave it; the tcp keys (0, or
 * EXIT_USAGE when a tcp endpoint lacks them). */
static int ring_options_from_config(stage *s)
{
    const cfg_node *c = stage_config(s);
    if (!s->tp.slot_bytes) {
        int64_t b = cfg_int(c, "SELFSUP.RING.SLOT_BYTES");
        s->tp.slot_bytes = b > 0 ? (size_t)b : (size_t)64 << 20;
    }
    if (!s->tp.depth)
        s->tp.depth = (uint32_t)cfg_int(c, "SELFSUP.RING.DEPTH");
    s->tp.attach_wait_ms = 10000;
    s->tp.server_keys_dir = cfg_str(c, "SELFSUP.TRANSPORT.SERVER_KEYS_DIR");
    s->tp.client_key_file = cfg_str(c, "SELFSUP.TRANSPORT.CLIENT_KEY_FILE");
    return check_tcp_keys(s);
}

static const char *default_uri(const char *given, int fd, const char *what)
{
    if (given)
        return given;
    if (!isatty(fd))
        return "-";
    log_error("no %s: give --%s URI, or connect %s to a pipe", what, fd == 0 ? "in" : "out",
              fd == 0 ? "stdin" : "stdout");
    return NULL;
}

static int open_transports(stage *s)
{
    char *err = NULL;
    if (s->info->reads) {
        const char *uri = default_uri(s->in_uri, STDIN_FILENO, "input");
        if (!uri || !(s->in = tp_open(uri, TP_IN, &s->tp, &err)))
            goto fail;
    }
    if (s->info->writes) {
        const char *uri = default_uri(s->out_uri, STDOUT_FILENO, "output");
        if (!uri || !(s->out = tp_open(uri, TP_OUT, &s->tp, &err)))
            goto fail;
    }
    return 0;
fail:
    if (err)
        log_error("%s", err);
    free(err);
    return -1;
}

/* ---- control plane -------------------------------------------------------------------------- */

static json_t *report(const stage *s, const char *type)
{
    json_t *m = ctl_msg(type);
    json_object_set_new(m, "records_in", json_integer((json_int_t)s->records_in));
    json_object_set_new(m, "records_out", json_integer((json_int_t)s->records_out));
    json_object_set_new(m, "bytes_in", json_integer((json_int_t)s->bytes_in));
    json_object_set_new(m, "bytes_out", json_integer((json_int_t)s->bytes_out));
    json_object_set_new(m, "blocked_in_s", json_real(s->blocked_in_s));
    json_object_set_new(m, "blocked_out_s", json_real(s->blocked_out_s));
    json_t *c = json_object();
    for (int i = 0; i < s->n_counters; i++)
        json_object_set_new(c, s->counters[i].name, json_integer((json_int_t)s->counters[i].value));
    json_object_set_new(m, "counters", c);
    if (s->report_hook)
        s->report_hook(s->report_hook_arg, m);
    return m;
}

static void handle_command(stage *s, json_t *m)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!strcmp(type, "stop")) {
        log_info("stop requested by the orchestrator");
        stop_signal = SIGTERM;
    } else if (!strcmp(type, "pause")) {
        s->paused = true;
    } else if (!strcmp(type, "resume")) {
        s->paused = false;
    } else if (!strcmp(type, "epoch")) {
        s->epoch = (uint32_t)json_integer_value(json_object_get(m, "epoch"));
    } else if (strcmp(type, "start") != 0) {
        log_warn("ignoring unknown control command '%s'", type);
    }
    json_decref(m);
}

void stage_pace(stage *s, long ms)
{
    for (long waited = 0; waited < ms && !stage_stopping(s); waited += 10) {
        usleep(10 * 1000);
        stage_poll(s);
    }
}

int stage_long_option(int argc, char **argv, const char *name, long min, long *out)
{
    if (strcmp(argv[0], name))
        return 0;
    char *end;
    errno = 0;
    long v = argc > 1 ? strtol(argv[1], &end, 10) : 0;
    if (argc < 2 || errno || *end || end == argv[1] || v < min) {
        log_error("%s wants an integer ≥ %ld", name, min);
        return -1;
    }
    *out = v;
    return 2;
}

int stage_pace_option(int argc, char **argv, long *ms)
{
    if (strcmp(argv[0], "--pace") || argc < 2)
        return 0;
    char *end;
    *ms = strtol(argv[1], &end, 10);
    if (*end || end == argv[1] || *ms < 0 || *ms > 60000) {
        log_error("--pace wants milliseconds, 0 to 60000");
        return -1;
    }
    return 2;
}

void stage_set_report_hook(stage *s, void (*hook)(void *arg, json_t *report), void *arg)
{
    s->report_hook = hook;
    s->report_hook_arg = arg;
}

void stage_set_poll_hook(stage *s, int (*hook)(void *arg), void *arg)
{
    s->hook = hook;
    s->hook_arg = arg;
}

/* The hook's answer is kept until the read loop acts on it (a failure sticks). */
static void call_hook(stage *s)
{
    if (!s->hook || s->hook_said < 0)
        return;
    int said = s->hook(s->hook_arg);
    if (said != STAGE_HOOK_GO_ON)
        s->hook_said = said;
}

void stage_poll(stage *s)
{
    call_hook(s);
    if (!s->ctl)
        return;
    do {
        double now = now_seconds();
        if (now - s->last_heartbeat >= HEARTBEAT_S) {
            ctl_send(s->ctl, report(s, "heartbeat"), 100);
            s->last_heartbeat = now;
        }
        json_t *m;
        while ((m = ctl_recv(s->ctl, s->paused ? POLL_SLICE_MS : 0)))
            handle_command(s, m);
    } while (s->paused && !stop_signal);
}

static json_t *hello(const stage *s)
{
    json_t *m = ctl_msg("hello");
    json_object_set_new(m, "stage", json_string(s->info->name));
    json_object_set_new(m, "id", json_string(s->id));
    json_object_set_new(m, "pid", json_integer(getpid()));
    json_object_set_new(m, "rank", json_integer(s->rank));
    json_object_set_new(m, "world_size", json_integer(s->world_size));
    json_object_set_new(m, "role", json_string(s->info->role));
    json_object_set_new(m, "version", json_string(SELFSUP_VERSION));
    return m;
}

/* HELLO, then wait for START: every stage is attached to its rings before data flows. */
static int connect_control(stage *s)
{
    if (!s->control)
        return 0;
    char *err = NULL;
    const char *key = s->have_cfg ? cfg_str(stage_config(s), "SELFSUP.CONTROL.CLIENT_KEY_FILE") : "";
    s->ctl = ctl_connect(s->control, s->id, key, &err);
    if (!s->ctl || ctl_send(s->ctl, hello(s), 5000) != 0) {
        log_error("cannot reach the orchestrator at %s: %s", s->control, err ? err : "send failed");
        free(err);
        return -1;
    }
    double deadline = now_seconds() + START_TIMEOUT_S;
    while (!stop_signal && now_seconds() < deadline) {
        json_t *m = ctl_recv(s->ctl, POLL_SLICE_MS);
        if (!m)
            continue;
        bool start = !strcmp(json_string_value(json_object_get(m, "type")), "start");
        handle_command(s, m);
        if (start) {
            s->last_heartbeat = now_seconds();
            return 0;
        }
    }
    if (stop_signal)
        return 0;
    log_error("the orchestrator at %s sent no START within %.0f s", s->control, START_TIMEOUT_S);
    return -1;
}

static void send_final(stage *s, int status)
{
    if (!s->ctl)
        return;
    json_t *m = report(s, "final");
    json_object_set_new(m, "status", json_string(status == 0 ? "ok" : status > 128 ? "stopped" : "error"));
    if (status != 0) /* lets the orchestrator blame the stage where it started */
        json_object_set_new(m, "cause", json_string(s->peer_failed ? "peer" : "self"));
    ctl_send(s->ctl, m, 1000);
}

/* ---- reading and writing -------------------------------------------------------------------- */

static void fail(stage *s, const char *msg)
{
    log_error("%s", msg);
    s->failed = true;
}

/* A transport failed: was it this stage's doing, or news of another stage's failure? The
 * first failure decides: a later one (its output, closing after a broken input) is its
 * consequence, and must not make the stage report itself as the cause. */
static void transport_failed(stage *s, const transport *t)
{
    if (!s->failed) {
        s->peer_failed = tp_peer_failed(t);
        s->peer_stopped = tp_peer_stopped(t);
    }
    fail(s, tp_error(t));
}

/* What a read says after the poll hook's answer (stage_set_poll_hook). */
static int hook_ends_input(stage *s)
{
    if (s->hook_said == STAGE_HOOK_END)
        return STAGE_END;
    if (!s->failed) {
        s->peer_failed = s->peer_stopped = s->hook_said == STAGE_HOOK_PEERS_LOST;
        s->failed = true;
    }
    return STAGE_FAILED;
}

/* The next record of input transport `in`, in short slices that keep the control plane served. */
static int read_from(stage *s, transport *in, rec_view *view)
{
    double t0 = now_seconds();
    for (;;) {
        stage_poll(s);
        if (stage_stopping(s))
            return STAGE_END;
        if (s->hook_said != STAGE_HOOK_GO_ON)
            return hook_ends_input(s);
        tp_status st = tp_read(in, view, POLL_SLICE_MS);
        if (st == TP_TIMEOUT)
            continue;
        s->blocked_in_s += now_seconds() - t0;
        if (st == TP_EOS)
            return STAGE_END;
        if (st != TP_OK) {
            transport_failed(s, in);
            return STAGE_FAILED;
        }
        s->records_in++;
        s->bytes_in += view->hdr->size;
        return STAGE_RECORD;
    }
}

int stage_read(stage *s, rec_view *view) { return read_from(s, s->in, view); }

void stage_read_done(stage *s) { tp_read_done(s->in); }

void *stage_input_memory(stage *s, size_t *bytes)
{
    struct ring *r = s->in ? tp_ring(s->in) : NULL;
    return r ? ring_data_area(r, bytes) : NULL;
}

struct stage_input {
    stage *s;
    transport *t;
};

stage_input *stage_open_input(stage *s, const char *uri)
{
    char *err = NULL;
    transport *t = tp_open(uri, TP_IN, &s->tp, &err);
    if (!t) {
        log_error("%s", err ? err : uri);
        free(err);
        return NULL;
    }
    stage_input *in = xmalloc(sizeof *in);
    *in = (stage_input){.s = s, .t = t};
    return in;
}

int stage_input_read(stage_input *in, rec_view *view) { return read_from(in->s, in->t, view); }

void stage_input_read_done(stage_input *in) { tp_read_done(in->t); }

void stage_input_close(stage_input *in)
{
    if (!in)
        return;
    tp_read_done(in->t);
    tp_close(in->t);
    free(in);
}

rec_writer *stage_record_begin(stage *s, rec_kind kind, uint64_t seq, uint32_t epoch, uint32_t max_tensors)
{
    double t0 = now_seconds();
    void *buf;
    size_t cap;
    for (;;) {
        stage_poll(s);
        if (stage_stopping(s))
            return NULL;
        if (s->hook_said < 0) { /* the hook's own failure (decode's lease server gone): no more output */
            hook_ends_input(s);
            return NULL;
        }
        tp_status st = tp_write_begin(s->out, &buf, &cap, POLL_SLICE_MS);
        if (st == TP_TIMEOUT)
            continue;
        s->blocked_out_s += now_seconds() - t0;
        if (st == TP_NO_READERS) {
            log_info("%s; stopping", tp_error(s->out));
            s->readers_gone = true;
            return NULL;
        }
        if (st != TP_OK) {
            transport_failed(s, s->out);
            return NULL;
        }
        break;
    }
    if (rec_writer_init(&s->writer, buf, cap, kind, seq, epoch, max_tensors) != 0) {
        tp_write_abort(s->out);
        fail(s, s->writer.error);
        return NULL;
    }
    s->writing = true;
    return &s->writer;
}

int stage_record_end(stage *s)
{
    s->writing = false;
    size_t len = rec_finish(&s->writer);
    if (len == 0) {
        tp_write_abort(s->out);
        char msg[512];
        snprintf(msg, sizeof msg, "%s; raise SELFSUP.RING.SLOT_BYTES (or --slot-bytes) above %zu",
                 s->writer.error, s->writer.needed);
        fail(s, msg);
        return -1;
    }
    tp_status st;
    while ((st = tp_write_end(s->out, len)) == TP_TIMEOUT) { /* a tcp reader not taking it yet */
        stage_poll(s);
        if (stop_signal) /* the record is dropped: the stream ends as stopped */
            return 0;
    }
    if (st == TP_NO_READERS) {
        log_info("%s; stopping", tp_error(s->out));
        s->readers_gone = true;
        return 0;
    }
    if (st != TP_OK) {
        transport_failed(s, s->out);
        return -1;
    }
    s->records_out++;
    s->bytes_out += len;
    return 0;
}

int stage_forward(stage *s, const rec_view *view)
{
    const rec_header *h = view->hdr;
    rec_writer *w = stage_record_begin(s, (rec_kind)h->kind, h->seq, h->epoch, h->n_tensors);
    if (!w)
        return stage_failed(s) ? -1 : 0;
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        const rec_tensor *t = &view->tensors[i];
        if (rec_add_copy(w, t->name, (rec_dtype)t->dtype, t->ndim, t->shape, rec_data(view, (int)i)) != 0)
            break; /* rec_finish reports it */
    }
    rec_writer_header(w)->flags = h->flags;
    rec_writer_header(w)->source = h->source;
    return stage_record_end(s);
}

/* ---- counters and accessors ----------------------------------------------------------------- */

void stage_count(stage *s, const char *name, int64_t delta)
{
    for (int i = 0; i < s->n_counters; i++)
        if (!strcmp(s->counters[i].name, name)) {
            s->counters[i].value += delta;
            return;
        }
    if (s->n_counters == MAX_COUNTERS)
        return;
    counter *c = &s->counters[s->n_counters++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->value = delta;
}

bool stage_failed(const stage *s) { return s->failed; }
bool stage_peer_stopped(const stage *s) { return s->failed && s->peer_stopped; }
int stage_exit_status(const stage *s) { return s->failed ? EXIT_RUNTIME : 0; }
const cfg_node *stage_config(const stage *s) { return cfg_map_get(s->cfg.root, "config"); }
int stage_rank(const stage *s) { return s->rank; }
int stage_world_size(const stage *s) { return s->world_size; }
uint32_t stage_epoch(const stage *s) { return s->epoch; }
const char *stage_id(const stage *s) { return s->id; }

/* ---- main ------------------------------------------------------------------------------------ */

/* A run() that returned 0 because a signal or a stop request ended it, not because its work
 * was done (readers that went away leave nothing to tell). */
static bool stopped_early(const stage *s, int status)
{
    return status == 0 && stop_signal && !s->readers_gone;
}

/* End the output: EOS after success, a stopped stream after a stop, a broken stream after a
 * failure. A stage stopped by a signal or a stop request exits 128 + the signal, as a shell
 * expects of a process ended that way: it did not finish, and its readers are told so too. */
static int close_transports(stage *s, int status)
{
    if (s->writing)
        tp_write_abort(s->out);
    if (stopped_early(s, status)) {
        tp_stop(s->out);
        status = 128 + stop_signal;
    } else if (status == 0 && s->out && tp_close(s->out) != TP_OK) {
        status = EXIT_RUNTIME;
    } else if (status != 0 && stage_peer_stopped(s)) {
        tp_stop(s->out); /* a short input because a stage upstream was stopped: pass the stop on */
    } else if (status != 0) {
        tp_abandon(s->out);
    }
    if (s->in) {
        tp_read_done(s->in);
        tp_close(s->in);
    }
    s->in = s->out = NULL;
    return status;
}

static void destroy(stage *s)
{
    log_init(s->info->name); /* the log keeps a pointer to the id freed below */
    if (s->have_cfg)
        cfg_destroy(&s->cfg);
    ctl_close(s->ctl);
    free(s->overrides);
    free(s->id);
}

/* Open, run, close, report: the part of a stage's life after its config is known. */
static int run_stage(stage *s, void *state, int (*run)(stage *s, void *state))
{
    int status = EXIT_RUNTIME;
    if (open_transports(s) == 0 && connect_control(s) == 0)
        status = stop_signal ? 0 : run(s, state);
    if (status == 0 && s->failed)
        status = EXIT_RUNTIME;
    bool stopped = stopped_early(s, status);
    /* A failure or a stop is reported before the outputs break, so that the orchestrator
     * hears it from this stage first, not from the stages that see the break. */
    if (status != 0 || stopped)
        send_final(s, stopped ? 128 + stop_signal : status);
    int closed = close_transports(s, status);
    if (status == 0 && !stopped)
        send_final(s, closed);
    if (stopped)
        log_info("stopped (%s) before its work was done", strsignal(closed - 128));
    return closed;
}

int stage_main(int argc, char **argv, const stage_info *info, void *state, int (*run)(stage *s, void *state))
{
    log_init(info->name);
    /* Stages allocate the same large buffers (images, crops, batches) record after record:
     * keep freed memory in the heap instead of unmapping it and faulting it back in (page
     * faults were a fifth of selfsup-augment's time). */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    stage s = {.info = info, .world_size = 1};
    int n_args;
    char **args = split_equals(argc, argv, &n_args);
    int status = parse_args(&s, n_args, args, state);
    if (status < 0) {
        s.id = s.id_arg ? xstrdup(s.id_arg) : xasprintf("%s.%d", info->name, s.rank);
        log_init(s.id);
        install_signals();
        status = EXIT_USAGE;
        if (compose_config(&s) == 0 && ring_options_from_config(&s) == 0) {
            int prepared = info->prepare ? info->prepare(&s, state) : 0;
            status = prepared ? prepared : run_stage(&s, state, run);
        }
    }
    destroy(&s);
    for (int i = 0; i < n_args; i++)
        free(args[i]);
    free(args);
    return status;
}

/*
 * supervise.c — the orchestrator's event loop (see supervise.h).
 *
 * State lives in one `run` struct: a `proc` per stage (pid, pipe, log, last lines, last
 * heartbeat) and the phase of the run. Every event handler is a small function that updates
 * that state; the loop then decides what follows (START, shutdown, SIGKILL) from the state
 * alone, so the order in which events arrive does not matter.
 */
#include "supervise.h"

#include "log.h"
#include "run_status.h"
#include "timer.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define TAIL_LINES 12
#define HELLO_TIMEOUT_S 30.0
#define FAIL_GRACE_S 1.0
/* A trainer still running when another stage fails gets this long to finish its step and
 * write its checkpoint (what it trained is kept), as after ^C. */
#define TRAINER_GRACE_S STOP_GRACE_S
#define PEER_GRACE_S 0.5 /* how long a stage that failed because of another may wait for it */
#define STOP_GRACE_S 30.0
#define PROGRESS_TTY_S 1.0
#define PROGRESS_LOG_S 10.0

/* An exit with an error is judged by the stage's final report (which says whether another
 * stage caused it); the report may still be on its way when the exit is reaped. */
typedef enum {
    EXIT_JUDGED_AT_ONCE,   /* the usual case: judged when reaped */
    EXIT_AWAITS_FINAL,     /* exited before its report: judged when it comes, or at final_due_by */
    EXIT_JUDGED_AFTER_WAIT /* judged once the report had its time: not held again */
} exit_judgment;

typedef struct {
    const topo_stage *ts;
    pid_t pid;
    int out_fd;                 /* read end of the stage's stdout+stderr, -1 once closed */
    FILE *log;
    char tail[TAIL_LINES][240]; /* last lines, a circular buffer */
    int tail_count;
    char partial[1024];         /* the line being received */
    size_t partial_len;
    bool hello, exited;
    bool final_seen;            /* its final report came */
    exit_judgment judgment;     /* of an exit with an error, which its final report explains */
    double final_due_by;        /* under EXIT_AWAITS_FINAL: when to judge without the report */
    double peer_failed_at;      /* it reported a failure caused by another stage (0: none) */
    int wstatus;
    double last_heartbeat;
    uint64_t records;           /* records handled: read (or written, for a source) */
    double records_at;          /* when that count came */
    uint64_t records_out;       /* for the ETA: a source's progress against "expected" */
    int64_t invalid_images;     /* a decode stage's "invalid_images" counter: images it replaced */
    int64_t expected;           /* from a stage's "expected" counter, for the ETA */
    double rate;                /* records per second between its last two heartbeats */
    json_t *counters, *farm;    /* its last report's, for RUN_DIR/status.json (farm: a lease server's) */
} proc;

typedef enum { PHASE_STARTING, PHASE_RUNNING, PHASE_STOPPING } phase;

typedef struct {
    const topology *topo;
    const supervise_options *opt;
    ctl_server *ctl;
    proc *procs;
    int n;
    phase phase;
    int exit_status;            /* decided by the first thing that ends the run */
    double kill_at;             /* SIGKILL the survivors at this time (0: not yet) */
    double started_at, last_progress, last_status;
    time_t started_wall;
    char host[256];             /* this machine's name, for RUN_DIR/status.json */
    char failure[240];          /* the first stage named as failed, for RUN_DIR/status.json */
    bool status_warned;         /* that status.json could not be written (said once) */
    bool tty, progress_shown;
    int sfd;                    /* signalfd for SIGCHLD, SIGINT, SIGTERM */
} run;

/* ---- spawning ------------------------------------------------------------------------------- */

static void child_exec(const topo_stage *ts, int out_fd, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) /* the orchestrator died before prctl took effect */
        _exit(EXIT_RUNTIME);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDONLY);
    dup2(null, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    execv(ts->argv[0], ts->argv);
    dprintf(STDERR_FILENO, "cannot start %s: %s\n", ts->argv[0], strerror(errno));
    _exit(127);
}

static int spawn(run *r, proc *p)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        child_exec(p->ts, fds[1], parent);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    p->pid = pid;
    p->out_fd = fds[0];
    p->last_heartbeat = now_seconds();
    char *logs = path_join(r->opt->run_dir, "logs");
    char *name = xasprintf("%s/%s.log", logs, p->ts->id);
    p->log = fopen(name, "w");
    if (!p->log)
        log_warn("cannot write %s: %s", name, strerror(errno));
    free(name);
    free(logs);
    return 0;
}

/* ---- output of the stages ------------------------------------------------------------------- */

static void keep_line(proc *p, const char *line)
{
    snprintf(p->tail[p->tail_count % TAIL_LINES], sizeof p->tail[0], "%s", line);
    p->tail_count++;
    if (p->log) {
        fputs(line, p->log);
        fputc('\n', p->log);
        fflush(p->log);
    }
    /* Warnings and errors are worth seeing live; the rest is in the log. */
    if (strstr(line, " WARN ") || strstr(line, " ERROR "))
        fprintf(stderr, "%s%s\n", "", line);
}

static void read_output(proc *p)
{
    char buf[4096];
    ssize_t n;
    while ((n = read(p->out_fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n' || p->partial_len == sizeof p->partial - 1) {
                p->partial[p->partial_len] = 0;
                keep_line(p, p->partial);
                p->partial_len = 0;
                if (buf[i] == '\n')
                    continue;
            }
            p->partial[p->partial_len++] = buf[i];
        }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        if (p->partial_len) {
            p->partial[p->partial_len] = 0;
            keep_line(p, p->partial);
            p->partial_len = 0;
        }
        close(p->out_fd);
        p->out_fd = -1;
    }
}

/* ---- ending the run -------------------------------------------------------------------------- */

static void signal_all(run *r, int sig)
{
    for (int i = 0; i < r->n; i++)
        if (!r->procs[i].exited)
            kill(r->procs[i].pid, sig);
}

static void send_all(run *r, const char *type)
{
    for (int i = 0; i < r->n; i++)
        if (r->procs[i].hello && !r->procs[i].exited)
            ctl_server_send(r->ctl, r->procs[i].ts->id, ctl_msg(type));
}

static void clear_progress(run *r)
{
    if (r->progress_shown) {
        fputs("\r\033[K", stderr);
        r->progress_shown = false;
    }
}

/* Stop every stage: STOP over the control plane and SIGTERM, SIGKILL after `grace`. */
static void shut_down(run *r, int status, double grace)
{
    if (r->phase == PHASE_STOPPING)
        return;
    r->phase = PHASE_STOPPING;
    r->exit_status = status;
    r->kill_at = now_seconds() + grace;
    send_all(r, "stop");
    signal_all(r, SIGTERM);
}

static void describe_status(int wstatus, char *out, size_t size)
{
    if (WIFSIGNALED(wstatus))
        snprintf(out, size, "was killed by signal %d (%s)", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    else
        snprintf(out, size, "exited with status %d", WEXITSTATUS(wstatus));
}

static void report_failure_of(run *r, proc *p, const char *what)
{
    clear_progress(r);
    log_error("stage %s (pid %d) %s; stopping the run", p->ts->id, (int)p->pid, what);
    if (!r->failure[0])
        snprintf(r->failure, sizeof r->failure, "stage %s (pid %d) %s", p->ts->id, (int)p->pid, what);
    int first = p->tail_count > TAIL_LINES ? p->tail_count - TAIL_LINES : 0;
    if (p->tail_count)
        log_error("last lines of %s/logs/%s.log:", r->opt->run_dir, p->ts->id);
    for (int i = first; i < p->tail_count; i++)
        fprintf(stderr, "  | %s\n", p->tail[i % TAIL_LINES]);
}

static void drain_control(run *r);

/* How long the survivors of a failure get before SIGKILL: a trainer's checkpoint is worth
 * the wait (a hung stage is not: heartbeat timeouts keep FAIL_GRACE_S). */
static double failure_grace(const run *r)
{
    for (int i = 0; i < r->n; i++)
        if (!r->procs[i].exited && !strcmp(r->procs[i].ts->name, "train"))
            return TRAINER_GRACE_S;
    return FAIL_GRACE_S;
}

/* Name a stage that failed on its own, unless the run is already stopping or it said that
 * another stage caused its failure (that one is named instead, or by advance()). A stage sends
 * its final report, which says that, before it exits, but the report can still be on its way
 * when the exit is reaped: a stage that exited gets PEER_GRACE_S for it first (advance() judges
 * it again), or a stage that saw its ring stopped would be named instead of the stage that was
 * stopped, and a decode stage's last count of invalid images would miss the run's summary. */
static void judge_exit(run *r, proc *p)
{
    int wstatus = p->wstatus;
    bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    if (r->phase == PHASE_STOPPING || (p->peer_failed_at && WIFEXITED(wstatus)))
        return;
    if (WIFEXITED(wstatus) && p->hello && !p->final_seen && p->judgment == EXIT_JUDGED_AT_ONCE) {
        p->judgment = EXIT_AWAITS_FINAL;
        p->final_due_by = now_seconds() + PEER_GRACE_S;
        return;
    }
    if (ok)
        return;
    if (p->out_fd >= 0)
        read_output(p); /* its last words, before they are quoted */
    char what[128];
    describe_status(wstatus, what, sizeof what);
    report_failure_of(r, p, what);
    shut_down(r, EXIT_RUNTIME, failure_grace(r));
}

static void reap(run *r)
{
    /* A stage's "failed because of a peer" report may still sit in the control socket behind
     * its exit: read it first. Then judge every stage that ended, those killed by a signal
     * before those that exited with an error: a killed stage is the cause, the stages that
     * saw their ring break are the consequence, whatever order waitpid returns them in. */
    drain_control(r);
    proc *ended[64];
    int n = 0;
    int wstatus;
    pid_t pid;
    while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0)
        for (int i = 0; i < r->n; i++)
            if (r->procs[i].pid == pid) {
                r->procs[i].exited = true;
                r->procs[i].wstatus = wstatus;
                if (n < 64)
                    ended[n++] = &r->procs[i];
            }
    for (int k = 0; k < n; k++)
        if (WIFSIGNALED(ended[k]->wstatus))
            judge_exit(r, ended[k]);
    for (int k = 0; k < n; k++)
        if (!WIFSIGNALED(ended[k]->wstatus))
            judge_exit(r, ended[k]);
}

static void on_signal(run *r)
{
    struct signalfd_siginfo si;
    while (read(r->sfd, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
            reap(r);
            continue;
        }
        clear_progress(r);
        if (r->phase == PHASE_STOPPING && r->exit_status >= 128) {
            log_warn("second %s: killing every stage now", strsignal((int)si.ssi_signo));
            signal_all(r, SIGKILL);
            continue;
        }
        log_info("%s: stopping every stage (again to kill them at once)", strsignal((int)si.ssi_signo));
        shut_down(r, 128 + (int)si.ssi_signo, STOP_GRACE_S);
    }
}

/* ---- control messages ----------------------------------------------------------------------- */

static proc *find_proc(run *r, const char *id)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->procs[i].ts->id, id))
            return &r->procs[i];
    return NULL;
}

/* Hold on to the latest `value` of a report's field, when it has one. */
static void keep_json(json_t **kept, json_t *value)
{
    if (!value)
        return;
    json_decref(*kept);
    *kept = json_incref(value);
}

/* A heartbeat's or final report's counters: records so far, the rate since the last one,
 * the records the stage expects in all (for the ETA), and a decode stage's invalid images. */
static void note_counters(proc *p, json_t *m)
{
    p->records_out = (uint64_t)json_integer_value(json_object_get(m, "records_out"));
    uint64_t in = (uint64_t)json_integer_value(json_object_get(m, "records_in"));
    uint64_t records = in ? in : p->records_out;
    double t = now_seconds();
    if (p->records_at > 0 && t > p->records_at && records >= p->records)
        p->rate = (double)(records - p->records) / (t - p->records_at);
    p->records = records;
    p->records_at = t;
    json_t *expected = json_object_get(json_object_get(m, "counters"), "expected");
    if (json_is_integer(expected))
        p->expected = json_integer_value(expected);
    json_t *invalid = json_object_get(json_object_get(m, "counters"), "invalid_images");
    if (json_is_integer(invalid))
        p->invalid_images = json_integer_value(invalid);
    keep_json(&p->counters, json_object_get(m, "counters"));
    keep_json(&p->farm, json_object_get(m, "farm"));
}

static void on_message(run *r, json_t *m, const char *peer)
{
    proc *p = find_proc(r, peer);
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!p) { /* a peer whose key allows the id, but no such stage: said once, at its hello */
        if (!strcmp(type, "hello"))
            log_warn("control: '%s' is no stage of this run; its messages are ignored", peer);
        return;
    }
    p->last_heartbeat = now_seconds();
    if (!strcmp(type, "hello")) {
        p->hello = true;
        if (r->phase == PHASE_STOPPING) /* late: it missed the broadcast */
            ctl_server_send(r->ctl, peer, ctl_msg("stop"));
        return;
    }
    if (strcmp(type, "heartbeat") != 0 && strcmp(type, "final") != 0)
        return;
    p->final_seen |= !strcmp(type, "final");
    note_counters(p, m);
    const char *status = json_string_value(json_object_get(m, "status"));
    if (strcmp(type, "final") != 0 || !status || !strcmp(status, "ok") || r->phase == PHASE_STOPPING)
        return;
    const char *cause = json_string_value(json_object_get(m, "cause"));
    if (cause && !strcmp(cause, "peer")) {
        /* The stage whose failure or death broke its ring is the one to name; its own
         * report or exit is on its way. advance() names this one if it does not come. */
        if (!p->peer_failed_at)
            p->peer_failed_at = now_seconds();
        return;
    }
    /* A stage says it failed before it exits and before its broken outputs make others
     * fail, so this is the cause. */
    if (p->out_fd >= 0)
        read_output(p);
    report_failure_of(r, p, strcmp(status, "stopped") ? "failed" : "was stopped before its work was done");
    shut_down(r, EXIT_RUNTIME, FAIL_GRACE_S);
}

static void drain_control(run *r)
{
    char *peer = NULL;
    json_t *m;
    while ((m = ctl_server_recv(r->ctl, 0, &peer))) {
        on_message(r, m, peer);
        json_decref(m);
        free(peer);
        peer = NULL;
    }
}

/* ---- progress -------------------------------------------------------------------------------- */

/* " | farm.1 812/s 2 leases, farm.2 lost; 3 leases dealt again": the hosts a lease server
 * deals to, as its last heartbeat had them. */
static void farm_progress(const proc *p, strbuf *sb)
{
    const json_t *hosts = json_object_get(p->farm, "hosts");
    size_t i;
    json_t *h;
    if (json_array_size(hosts) == 0)
        sb_puts(sb, " | no farm host yet");
    json_array_foreach(hosts, i, h) {
        const char *state = json_string_value(json_object_get(h, "state"));
        sb_printf(sb, "%s%s", i ? ", " : " | ", json_string_value(json_object_get(h, "id")));
        long long held = (long long)json_integer_value(json_object_get(h, "held"));
        if (state && strcmp(state, "live"))
            sb_printf(sb, " %s", state);
        else
            sb_printf(sb, " %.0f/s %lld lease%s", json_number_value(json_object_get(h, "rate")), held,
                      held == 1 ? "" : "s");
    }
    json_int_t again = json_integer_value(json_object_get(p->counters, "leases_dealt_again"));
    if (again)
        sb_printf(sb, "; %lld leases dealt again", (long long)again);
}

/* "decode 812/s | augment×4 806/s | collate 50/s | train 2.5/s | rings 3/8 8/8 1/8 | ETA 0:42":
 * the stages of one name together (several trainers' chains have a decode stage each), in the
 * order their names first appear. */
static void progress_text(run *r, strbuf *sb)
{
    int64_t expected = r->procs[0].expected;
    uint64_t done = r->procs[0].records_out;
    double first_rate = r->procs[0].rate; /* the first decode stage's, for the ETA */
    for (int i = 0; i < r->n; i++) {
        const char *name = r->procs[i].ts->name;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(r->procs[j].ts->name, name);
        if (seen)
            continue;
        double rate = 0;
        int count = 0;
        for (int k = i; k < r->n; k++)
            if (!strcmp(r->procs[k].ts->name, name))
                rate += r->procs[k].rate, count++;
        sb_printf(sb, "%s%s", i ? " | " : "", name);
        if (count > 1)
            sb_printf(sb, "×%d", count);
        /* a trainer's 0.4 batches/s is not 0/s */
        sb_printf(sb, rate > 0 && rate < 10 ? " %.1f/s" : " %.0f/s", rate);
    }
    for (int i = 0; i < r->n; i++)
        if (r->procs[i].farm)
            farm_progress(&r->procs[i], sb);
    if (r->opt->rings) {
        sb_puts(sb, " | rings");
        for (int i = 0; i < r->topo->n_rings; i++)
            if (r->opt->rings[i])
                sb_printf(sb, " %u/%u", ring_fill(r->opt->rings[i]), ring_n_slots(r->opt->rings[i]));
    }
    if (expected > 0 && first_rate > 0 && (uint64_t)expected > done) {
        int eta = (int)((double)((uint64_t)expected - done) / first_rate);
        sb_printf(sb, " | ETA %d:%02d", eta / 60, eta % 60);
    }
}

static void show_progress(run *r, double now)
{
    double every = r->tty ? PROGRESS_TTY_S : PROGRESS_LOG_S;
    if (r->phase != PHASE_RUNNING || now - r->last_progress < every)
        return;
    r->last_progress = now;
    strbuf sb = {0};
    progress_text(r, &sb);
    if (r->tty) {
        fprintf(stderr, "\r\033[K%s", sb_str(&sb));
        r->progress_shown = true;
    } else {
        log_info("%s", sb_str(&sb));
    }
    sb_free(&sb);
}

/* ---- RUN_DIR/status.json -------------------------------------------------------------------- */

static const char *run_state(const run *r, bool over)
{
    static const char *const phases[] = {"starting", "running", "stopping"};
    if (!over)
        return phases[r->phase];
    return r->exit_status == 0 ? "finished" : r->exit_status >= 128 ? "stopped" : "failed";
}

static json_t *stage_status(const proc *p, double now)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:I, s:f}", "id", p->ts->id, "name", p->ts->name, "pid", (int)p->pid,
                          "records", (json_int_t)p->records, "rate", p->rate);
    if (p->exited) {
        char what[128];
        describe_status(p->wstatus, what, sizeof what);
        json_object_set_new(o, "state", json_string("exited"));
        json_object_set_new(o, "exit", json_string(what));
    } else {
        json_object_set_new(o, "state", json_string(p->hello ? "running" : "starting"));
        if (p->last_heartbeat > 0)
            json_object_set_new(o, "heartbeat_age_s", json_real(now - p->last_heartbeat));
    }
    if (p->expected > 0)
        json_object_set_new(o, "expected", json_integer(p->expected));
    if (p->counters)
        json_object_set(o, "counters", p->counters);
    if (p->farm)
        json_object_set(o, "farm", p->farm);
    return o;
}

static json_t *rings_status(const run *r)
{
    json_t *rings = json_array();
    for (int i = 0; r->opt->rings && i < r->topo->n_rings; i++)
        if (r->opt->rings[i])
            json_array_append_new(rings, json_pack("{s:s, s:i, s:i}", "label", r->topo->rings[i].label, "fill",
                                                   (int)ring_fill(r->opt->rings[i]), "slots",
                                                   (int)ring_n_slots(r->opt->rings[i])));
    return rings;
}

/* Rewrite RUN_DIR/status.json (run_status.h) every STATUS_EVERY_S, and once `over`. */
static void write_status(run *r, double now, bool over)
{
    if (!over && now - r->last_status < STATUS_EVERY_S)
        return;
    r->last_status = now;
    strbuf sb = {0};
    progress_text(r, &sb);
    json_t *s = json_pack("{s:s, s:i, s:s, s:i, s:I, s:I, s:s}", "state", run_state(r, over), "pid", (int)getpid(),
                          "role", r->opt->role ? r->opt->role : "all", "node_rank", r->opt->node_rank, "started",
                          (json_int_t)r->started_wall, "updated", (json_int_t)time(NULL), "progress", sb_str(&sb));
    sb_free(&sb);
    json_object_set_new(s, "host", json_string(r->host));
    if (over)
        json_object_set_new(s, "exit_status", json_integer(r->exit_status));
    if (r->failure[0])
        json_object_set_new(s, "failure", json_string(r->failure));
    json_t *stages = json_array();
    for (int i = 0; i < r->n; i++)
        json_array_append_new(stages, stage_status(&r->procs[i], now));
    json_object_set_new(s, "stages", stages);
    json_object_set_new(s, "rings", rings_status(r));
    char *err = NULL;
    if (run_status_write(r->opt->run_dir, s, &err) != 0 && !r->status_warned) {
        log_warn("%s (selfsup status will not see this run)", err);
        r->status_warned = true;
    }
    free(err);
    json_decref(s);
}

/* ---- the end -------------------------------------------------------------------------------- */

/* The invalid images of the whole run, per split. The decode stages warn at each epoch's end
 * and name every file in their logs; this line sums them up where the run ends, where it is
 * not lost among thousands of progress lines. Nothing when there were none. */
static void invalid_images_summary(const run *r)
{
    static const char *const splits[] = {"train", "test"};
    for (int k = 0; k < 2; k++) {
        int64_t bad = 0;
        uint64_t served = 0;
        for (int i = 0; i < r->n; i++) {
            const proc *p = &r->procs[i];
            if (!strcmp(p->ts->name, "decode") && p->ts->split && !strcmp(p->ts->split, splits[k])) {
                bad += p->invalid_images;
                served += p->records_out; /* every decoder's images, not only those with bad ones */
            }
        }
        if (bad > 0)
            log_warn("split %s: %lld of the %llu images read in this run were invalid (%.1f%%; each file is named "
                     "in %s/logs/decode.*.log)", splits[k], (long long)bad, (unsigned long long)served,
                     served ? 100.0 * (double)bad / (double)served : 100.0, r->opt->run_dir);
    }
}

/* ---- the loop ------------------------------------------------------------------------------- */

/* The stages the loop still waits on: running, with output unread, with an exit to judge, or
 * failed because of another and not yet named (advance() names it after PEER_GRACE_S if no
 * cause comes, even when every stage has exited by then: a collate whose farm hosts are all
 * lost fails its trainer too, and both are gone within the grace). */
static int live_count(const run *r)
{
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        const proc *p = &r->procs[i];
        n += !p->exited || p->out_fd >= 0 || p->judgment == EXIT_AWAITS_FINAL ||
             (p->peer_failed_at > 0 && r->phase != PHASE_STOPPING);
    }
    return n;
}

/* Of the stages that said another caused their failure, once the grace since the first such
 * report is over with no cause shown, the one to name: the first in the topology's order, which
 * lists a chain's stages from its source down. A stopped stream flows downstream, so the stage
 * whose own peers went (collate's farm hosts) is above those that followed it, whatever order
 * their reports came in. */
static proc *peer_failure_to_name(run *r, double now)
{
    proc *named = NULL;
    double first = 0;
    for (int i = 0; i < r->n; i++) {
        double at = r->procs[i].peer_failed_at;
        if (at && (!first || at < first))
            first = at;
        if (at && !named)
            named = &r->procs[i];
    }
    return named && now - first > PEER_GRACE_S ? named : NULL;
}

/* Decisions that follow from the state: START, timeouts, SIGKILL. */
static void advance(run *r, double now)
{
    if (r->phase == PHASE_STARTING) {
        int hellos = 0;
        for (int i = 0; i < r->n; i++)
            hellos += r->procs[i].hello || r->procs[i].exited;
        if (hellos == r->n) {
            r->phase = PHASE_RUNNING;
            send_all(r, "start");
            r->last_progress = now;
        } else if (now - r->started_at > HELLO_TIMEOUT_S) {
            for (int i = 0; i < r->n; i++)
                if (!r->procs[i].hello && !r->procs[i].exited)
                    report_failure_of(r, &r->procs[i], "did not say hello to the orchestrator in time");
            shut_down(r, EXIT_RUNTIME, FAIL_GRACE_S);
        }
    }
    for (int i = 0; i < r->n; i++) { /* in any phase: a pending judgment keeps the loop going */
        proc *p = &r->procs[i];
        if (p->judgment == EXIT_AWAITS_FINAL &&
            (p->final_seen || now >= p->final_due_by || r->phase == PHASE_STOPPING)) {
            p->judgment = EXIT_JUDGED_AFTER_WAIT;
            judge_exit(r, p);
        }
    }
    proc *named = r->phase != PHASE_STOPPING ? peer_failure_to_name(r, now) : NULL;
    if (named) {
        if (named->out_fd >= 0)
            read_output(named);
        report_failure_of(r, named, "failed");
        shut_down(r, EXIT_RUNTIME, failure_grace(r));
    }
    if (r->phase == PHASE_RUNNING && r->opt->heartbeat_timeout_s > 0)
        for (int i = 0; i < r->n; i++) {
            proc *p = &r->procs[i];
            if (!p->exited && now - p->last_heartbeat > r->opt->heartbeat_timeout_s) {
                char what[96];
                snprintf(what, sizeof what, "sent no heartbeat for %.0f s (hung?)", r->opt->heartbeat_timeout_s);
                report_failure_of(r, p, what);
                shut_down(r, EXIT_RUNTIME, FAIL_GRACE_S);
                break;
            }
        }
    if (r->phase == PHASE_STOPPING && now >= r->kill_at) {
        signal_all(r, SIGKILL);
        r->kill_at = now + 1.0;
    }
}

static void poll_once(run *r)
{
    zmq_pollitem_t *items = xcalloc((size_t)r->n + 2, sizeof *items);
    proc **owners = xcalloc((size_t)r->n + 2, sizeof *owners);
    int n = 0;
    items[n++] = (zmq_pollitem_t){.socket = ctl_server_socket(r->ctl), .events = ZMQ_POLLIN};
    items[n++] = (zmq_pollitem_t){.fd = r->sfd, .events = ZMQ_POLLIN};
    for (int i = 0; i < r->n; i++)
        if (r->procs[i].out_fd >= 0) {
            owners[n] = &r->procs[i];
            items[n++] = (zmq_pollitem_t){.fd = r->procs[i].out_fd, .events = ZMQ_POLLIN};
        }
    if (zmq_poll(items, n, 100) >= 0) {
        if (items[1].revents) /* deaths first: they explain the errors that follow them */
            on_signal(r);
        for (int i = 2; i < n; i++)
            if (items[i].revents)
                read_output(owners[i]);
        if (items[0].revents)
            drain_control(r);
    }
    free(items);
    free(owners);
}

static int open_signalfd(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

int supervise(const topology *t, ctl_server *ctl, const supervise_options *opt)
{
    run r = {.topo = t, .opt = opt, .ctl = ctl, .n = t->n_stages, .tty = isatty(STDERR_FILENO)};
    r.procs = xcalloc((size_t)r.n, sizeof *r.procs);
    r.sfd = open_signalfd();
    if (r.sfd < 0)
        die(EXIT_RUNTIME, "signalfd: %s", strerror(errno));
    r.started_at = now_seconds();
    r.started_wall = time(NULL);
    gethostname(r.host, sizeof r.host - 1);
    for (int i = 0; i < r.n; i++) {
        r.procs[i].ts = &t->stages[i];
        r.procs[i].out_fd = -1;
        if (spawn(&r, &r.procs[i]) != 0) {
            log_error("cannot start stage %s: %s", t->stages[i].id, strerror(errno));
            r.procs[i].exited = true;
            shut_down(&r, EXIT_RUNTIME, FAIL_GRACE_S);
            break;
        }
    }
    while (live_count(&r) > 0) {
        poll_once(&r);
        reap(&r); /* also here: a SIGCHLD can be merged with one already read */
        double now = now_seconds();
        advance(&r, now);
        show_progress(&r, now);
        write_status(&r, now, false);
    }
    drain_control(&r);
    clear_progress(&r);
    invalid_images_summary(&r);
    write_status(&r, now_seconds(), true);
    for (int i = 0; i < r.n; i++) {
        if (r.procs[i].log)
            fclose(r.procs[i].log);
        json_decref(r.procs[i].counters);
        json_decref(r.procs[i].farm);
    }
    close(r.sfd);
    free(r.procs);
    return r.exit_status;
}

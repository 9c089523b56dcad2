/*
 * run_status.c — RUN_DIR/status.json written and read (see run_status.h).
 *
 * The writer does not fsync: the file is rewritten every few seconds, and a reader after a
 * crash would rather see the last state renamed in than wait on the disk each time. The
 * rename alone keeps a reader from seeing half of it.
 */
#include "run_status.h"

#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int run_status_write(const char *run_dir, const json_t *status, char **err)
{
    char *path = path_join(run_dir, STATUS_FILE), *tmp = xasprintf("%s.tmp", path);
    int rc = json_dump_file(status, tmp, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1;
    if (rc != 0) {
        *err = xasprintf("cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    free(path);
    return rc;
}

json_t *run_status_read(const char *run_dir, char **err)
{
    char *path = path_join(run_dir, STATUS_FILE);
    json_error_t je;
    json_t *s = json_load_file(path, 0, &je);
    if (!s && access(path, F_OK) != 0)
        *err = xasprintf("%s: no status (is it the run directory of a `selfsup run`?)", path);
    else if (!s)
        *err = xasprintf("%s: %s", path, je.text);
    else if (!json_is_object(s) || !json_is_string(json_object_get(s, "state"))) {
        *err = xasprintf("%s: not a run status", path);
        json_decref(s);
        s = NULL;
    }
    free(path);
    return s;
}

static const char *str(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

static bool ended(const char *state)
{
    return !strcmp(state, "finished") || !strcmp(state, "failed") || !strcmp(state, "stopped");
}

/* Whether the orchestrator that wrote `status` is gone: on this host its pid says so; on
 * another (a Slurm node, read from the login node) a file not rewritten for STATUS_STALE_S. */
static bool orchestrator_gone(const json_t *status, double now)
{
    char here[256] = "";
    gethostname(here, sizeof here - 1);
    pid_t pid = (pid_t)json_integer_value(json_object_get(status, "pid"));
    if (!strcmp(str(status, "host"), here))
        return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
    return now - num(status, "updated") > STATUS_STALE_S;
}

const char *run_status_state(const json_t *status, double now)
{
    const char *state = str(status, "state");
    return !ended(state) && orchestrator_gone(status, now) ? "lost" : state;
}

/* ---- printing --------------------------------------------------------------------------------- */

static void print_duration(FILE *out, double s)
{
    long t = s > 0 ? (long)s : 0;
    if (t >= 3600)
        fprintf(out, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        fprintf(out, "%ld:%02ld", t / 60, t % 60);
}

static void print_head(FILE *out, const json_t *s, double now)
{
    const char *state = run_status_state(s, now);
    double started = num(s, "started"), updated = num(s, "updated");
    fprintf(out, "%s", state);
    if (!ended(state)) {
        fputs(" for ", out);
        print_duration(out, now - started);
    } else {
        fputs(" after ", out);
        print_duration(out, updated - started);
        fprintf(out, " (exit status %lld)", (long long)json_integer_value(json_object_get(s, "exit_status")));
    }
    fprintf(out, "; orchestrator pid %lld%s%s, role %s, node %lld; %s %.0f s ago\n",
            (long long)json_integer_value(json_object_get(s, "pid")), *str(s, "host") ? " on " : "", str(s, "host"),
            str(s, "role"),
            (long long)json_integer_value(json_object_get(s, "node_rank")), ended(state) ? "ended" : "updated",
            now - updated);
    if (!strcmp(state, "lost"))
        fputs("the orchestrator is gone without saying how the run ended (killed outright, or its host lost?)\n",
              out);
    if (*str(s, "failure"))
        fprintf(out, "failure: %s\n", str(s, "failure"));
    if (*str(s, "progress"))
        fprintf(out, "progress: %s\n", str(s, "progress"));
}

static long long counter(const json_t *st, const char *name);

static void print_stage(FILE *out, const json_t *st)
{
    const char *state = str(st, "state");
    fprintf(out, "  %-14s %8lld  %-9s %12lld", str(st, "id"), (long long)json_integer_value(json_object_get(st, "pid")),
            state, (long long)json_integer_value(json_object_get(st, "records")));
    if (!strcmp(state, "exited")) {
        fprintf(out, "  %s", str(st, "exit"));
    } else {
        fprintf(out, " %9.1f", num(st, "rate"));
        if (json_object_get(st, "heartbeat_age_s"))
            fprintf(out, " %8.1f s ago", num(st, "heartbeat_age_s"));
    }
    if (counter(st, "leases_taken")) /* a farm host's decode stage */
        fprintf(out, "  %lld leases taken", counter(st, "leases_taken"));
    fputc('\n', out);
}

static void print_rings(FILE *out, const json_t *rings)
{
    size_t i;
    json_t *r;
    if (json_array_size(rings) == 0)
        return;
    fputs("rings (slots filled):", out);
    json_array_foreach(rings, i, r)
        fprintf(out, "%s %s %lld/%lld", i ? "," : "", str(r, "label"),
                (long long)json_integer_value(json_object_get(r, "fill")),
                (long long)json_integer_value(json_object_get(r, "slots")));
    fputc('\n', out);
}

static long long counter(const json_t *st, const char *name)
{
    return (long long)json_integer_value(json_object_get(json_object_get(st, "counters"), name));
}

static void print_host(FILE *out, const json_t *h)
{
    bool live = !strcmp(str(h, "state"), "live");
    fprintf(out, "  %-14s %-5s %7lld %5lld %12lld", str(h, "id"), str(h, "state"),
            (long long)json_integer_value(json_object_get(h, "leases")),
            (long long)json_integer_value(json_object_get(h, "held")),
            (long long)json_integer_value(json_object_get(h, "samples")));
    if (live)
        fprintf(out, " %9.1f", num(h, "rate"));
    else
        fprintf(out, " %9s", "-");
    fprintf(out, " %8.1f s", num(h, "silent_s"));
    long long losses = (long long)json_integer_value(json_object_get(h, "losses"));
    if (losses)
        fprintf(out, "  (lost %lld time%s)", losses, losses > 1 ? "s" : "");
    fputc('\n', out);
}

/* The farm hosts a lease-dealing stage reports, and its lease counters. */
static void print_farm(FILE *out, const json_t *st)
{
    const json_t *farm = json_object_get(st, "farm"), *hosts = json_object_get(farm, "hosts");
    fprintf(out, "\nfarm hosts (leases dealt by %s at %s; %lld samples to come):\n", str(st, "id"),
            str(farm, "endpoint"), (long long)json_integer_value(json_object_get(farm, "remaining")));
    if (json_array_size(hosts) == 0)
        fputs("  none has joined yet\n", out);
    else
        fprintf(out, "  %-14s %-5s %7s %5s %12s %9s %10s\n", "host", "state", "leases", "held", "samples", "rate/s",
                "silent");
    size_t i;
    json_t *h;
    json_array_foreach(hosts, i, h)
        print_host(out, h);
    fprintf(out, "leases: %lld dealt, %lld dealt again; %lld hosts lost; %lld duplicate samples dropped\n",
            counter(st, "leases_dealt"), counter(st, "leases_dealt_again"), counter(st, "lost_hosts"),
            counter(st, "duplicate_samples"));
}

void run_status_print(FILE *out, const json_t *status, double now)
{
    print_head(out, status, now);
    const json_t *stages = json_object_get(status, "stages");
    size_t i;
    json_t *st;
    fprintf(out, "\n  %-14s %8s  %-9s %12s %9s %14s\n", "stage", "pid", "state", "records", "rate/s", "heartbeat");
    json_array_foreach(stages, i, st)
        print_stage(out, st);
    print_rings(out, json_object_get(status, "rings"));
    json_array_foreach(stages, i, st)
        if (json_object_get(st, "farm"))
            print_farm(out, st);
}

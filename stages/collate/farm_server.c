/*
 * farm_server.c — see farm_server.h. A ctl_server (control.h) in front of a lease book: each
 * poll drains the socket without waiting, answers every message, and judges the hosts.
 */
#include "collate/farm_server.h"

#include "control.h"
#include "log.h"
#include "timer.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* How often the server says it is still waiting for its first host. */
#define WAITING_LOG_S 30.0
/* Samples no lease covered are logged this many times, then only counted. */
#define STRAYS_LOGGED 5

struct farm_server {
    ctl_server *ctl;
    lease_book *book;
    stage *s;
    double host_timeout_s, started, last_waiting_log;
    lease_stats reported; /* what the heartbeat counters already say */
    long strays;          /* samples no lease covered */
    uint64_t *reported_samples; /* each host's samples at the last report, for its rate */
    int n_reported;
    double reported_at;
    char *endpoint;             /* for the reports, which outlive the socket */
    bool finished;              /* farm_server_finish: the live hosts were told the run is done */
    int expected_hosts;         /* farm_server_expect_hosts */
    char **told_done;           /* the hosts told that the run is done */
    int n_told;
};

static void report(void *server, json_t *m);
static void tell_done(farm_server *f, const char *host);

farm_server *farm_server_open(const char *endpoint, const char *keys_dir, const lease_plan *plan,
                              double host_timeout_s, stage *s, char **err)
{
    ctl_server *ctl = ctl_bind(endpoint, keys_dir, err);
    if (!ctl)
        return NULL;
    farm_server *f = xcalloc(1, sizeof *f);
    f->ctl = ctl;
    f->book = lease_book_new(plan);
    f->s = s;
    f->host_timeout_s = host_timeout_s;
    f->endpoint = xstrdup(ctl_server_endpoint(ctl));
    f->started = f->last_waiting_log = f->reported_at = now_seconds();
    stage_set_report_hook(s, report, f);
    log_info("dealing leases of %llu samples at %s (window %llu samples, epochs %u to %u)",
             (unsigned long long)plan->lease_len, ctl_server_endpoint(ctl), (unsigned long long)plan->window,
             plan->first_epoch, plan->first_epoch + plan->epochs - 1);
    return f;
}

static void send_type(farm_server *f, const char *host, const char *type)
{
    ctl_server_send(f->ctl, host, ctl_msg(type));
}

static void refuse(farm_server *f, const char *host, char *why)
{
    log_error("farm host %s refused: %s", host, why);
    json_t *m = ctl_msg("refused");
    json_object_set_new(m, "why", json_string(why));
    ctl_server_send(f->ctl, host, m);
    free(why);
}

/* A hello: the host's epoch length must be the run's. */
static void hello(farm_server *f, const char *host, json_t *msg, double now)
{
    json_t *n = json_object_get(msg, "samples");
    uint64_t samples = json_is_integer(n) && json_integer_value(n) > 0 ? (uint64_t)json_integer_value(n) : 0;
    uint64_t known = lease_book_epoch_len(f->book);
    if (lease_book_set_epoch_len(f->book, samples) != 0) {
        refuse(f, host, known ? xasprintf("its dataset gives %llu samples an epoch, the farm's hosts %llu: "
                                          "every host must see the same dataset",
                                          (unsigned long long)samples, (unsigned long long)known)
                              : xasprintf("its hello gives no usable epoch length (samples: %llu)",
                                          (unsigned long long)samples));
        return;
    }
    lease_book_seen(f->book, host, now);
    log_info("farm host %s joined (%llu samples an epoch)", host, (unsigned long long)samples);
}

static void deal(farm_server *f, const char *host, double now)
{
    lease l;
    lease_answer a = lease_book_deal(f->book, host, now, &l);
    if (a == LEASE_DONE)
        tell_done(f, host);
    if (a != LEASE_GIVEN) {
        if (a == LEASE_WAIT)
            send_type(f, host, "wait");
        return;
    }
    json_t *m = ctl_msg("lease");
    json_object_set_new(m, "lease", json_integer((json_int_t)l.id));
    json_object_set_new(m, "epoch", json_integer(l.epoch));
    json_object_set_new(m, "start", json_integer((json_int_t)l.start));
    json_object_set_new(m, "end", json_integer((json_int_t)l.end));
    ctl_server_send(f->ctl, host, m);
}

static void answer(farm_server *f, const char *host, json_t *msg, double now)
{
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (!strcmp(type, "hello"))
        hello(f, host, msg, now);
    else if (!lease_book_epoch_len(f->book))
        send_type(f, host, "wait"); /* a host that was refused, or spoke before its hello */
    else if (!strcmp(type, "want"))
        deal(f, host, now);
    else if (!strcmp(type, "beat")) {
        lease_book_seen(f->book, host, now);
        send_type(f, host, "beat");
    } else if (!strcmp(type, "bye")) {
        lease_book_leave(f->book, host);
        log_info("farm host %s finished", host);
    } else
        log_warn("farm host %s sent an unknown message '%s'; ignored", host, type);
}

/* One host in the heartbeat: its state, leases and samples, and samples per second since
 * the last report (`before`: its samples then). */
static json_t *host_json(const farm_server *f, const lease_host_view *v, uint64_t before, double now, double dt)
{
    double rate = dt > 0 && v->samples >= before ? (double)(v->samples - before) / dt : 0;
    const char *state = f->finished && !strcmp(v->state, "live") ? "done" : v->state;
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:f}", "id", v->name, "state", state, "leases",
                     (json_int_t)v->leases, "held", (json_int_t)v->held, "samples", (json_int_t)v->samples, "losses",
                     (json_int_t)v->losses, "rate", rate, "silent_s", now - v->last_seen);
}

/* The report hook (stage.h): "farm": {"endpoint", "remaining", "hosts": [...]}, which the
 * orchestrator shows on the progress line and in RUN_DIR/status.json. */
static void report(void *server, json_t *m)
{
    farm_server *f = server;
    double now = now_seconds(), dt = now - f->reported_at;
    int n = lease_book_hosts(f->book);
    json_t *hosts = json_array();
    f->reported_samples = xrealloc(f->reported_samples, (size_t)(n ? n : 1) * sizeof *f->reported_samples);
    for (int i = 0; i < n; i++) {
        lease_host_view v = lease_book_host(f->book, i);
        json_array_append_new(hosts, host_json(f, &v, i < f->n_reported ? f->reported_samples[i] : 0, now, dt));
        f->reported_samples[i] = v.samples;
    }
    f->n_reported = n;
    f->reported_at = now;
    json_object_set_new(m, "farm", json_pack("{s:s, s:I, s:o}", "endpoint", f->endpoint, "remaining",
                                             (json_int_t)lease_book_remaining(f->book), "hosts", hosts));
}

/* The heartbeat's counters: what changed since the last poll. */
static void count(farm_server *f)
{
    lease_stats now = lease_book_stats(f->book), *was = &f->reported;
    stage_count(f->s, "leases_dealt", (int64_t)(now.dealt - was->dealt));
    stage_count(f->s, "leases_dealt_again", (int64_t)(now.redealt - was->redealt));
    stage_count(f->s, "duplicate_samples", (int64_t)(now.duplicates - was->duplicates));
    stage_count(f->s, "lost_hosts", (int64_t)(now.lost_hosts - was->lost_hosts));
    *was = now;
}

int farm_server_poll(void *server)
{
    farm_server *f = server;
    double now = now_seconds();
    char *host = NULL;
    json_t *msg;
    while ((msg = ctl_server_recv(f->ctl, 0, &host))) {
        answer(f, host, msg, now);
        json_decref(msg);
        free(host);
        host = NULL;
    }
    lease_book_expire(f->book, now, f->host_timeout_s);
    count(f);
    if (lease_book_done(f->book))
        return STAGE_HOOK_GO_ON; /* collate finishes once it has written the last batch */
    if (!lease_book_anyone_joined(f->book)) {
        if (now - f->last_waiting_log >= WAITING_LOG_S) {
            log_info("waiting for farm hosts at %s (%.0f s so far)", ctl_server_endpoint(f->ctl), now - f->started);
            f->last_waiting_log = now;
        }
        return STAGE_HOOK_GO_ON;
    }
    if (lease_book_live_hosts(f->book) > 0)
        return STAGE_HOOK_GO_ON;
    log_error("no farm host is left (each was silent for %.0f s, SELFSUP.FARM.HOST_TIMEOUT_S) and %llu samples are "
              "still to come: stopping",
              f->host_timeout_s, (unsigned long long)lease_book_remaining(f->book));
    return STAGE_HOOK_PEERS_LOST;
}

int farm_server_received(farm_server *f, uint32_t epoch, uint64_t pos)
{
    int got = lease_book_received(f->book, epoch, pos);
    if (got >= 0)
        return got;
    if (f->strays++ < STRAYS_LOGGED)
        log_warn("sample %llu of epoch %u came, but no lease covered it (a host of another run?); dropped%s",
                 (unsigned long long)pos, epoch, f->strays == STRAYS_LOGGED ? " (the last such line)" : "");
    stage_count(f->s, "stray_samples", 1);
    return 0;
}

void farm_server_consumed(farm_server *f, uint32_t epoch, uint64_t pos) { lease_book_consumed(f->book, epoch, pos); }

bool farm_server_done(const farm_server *f) { return lease_book_done(f->book); }

void farm_server_expect_hosts(farm_server *f, int hosts) { f->expected_hosts = hosts; }

/* Tell `host` the run is done, once. */
static void tell_done(farm_server *f, const char *host)
{
    for (int i = 0; i < f->n_told; i++)
        if (!strcmp(f->told_done[i], host))
            return;
    send_type(f, host, "done");
    f->told_done = xrealloc(f->told_done, (size_t)(f->n_told + 1) * sizeof *f->told_done);
    f->told_done[f->n_told++] = xstrdup(host);
}

/* The run is done, but not every expected host has heard it: one that comes late (it started
 * as the run ended) would wait for a server that is gone. Answer "done" to whoever speaks,
 * until each expected host was told or HOST_TIMEOUT_S has passed. */
static void linger(farm_server *f)
{
    double until = now_seconds() + f->host_timeout_s;
    if (f->n_told < f->expected_hosts)
        log_info("the run is done; telling the farm hosts still to come (%d of %d told, %.0f s at most)", f->n_told,
                 f->expected_hosts, f->host_timeout_s);
    while (f->n_told < f->expected_hosts && now_seconds() < until) {
        char *host = NULL;
        json_t *msg = ctl_server_recv(f->ctl, 100, &host);
        if (msg)
            tell_done(f, host);
        json_decref(msg);
        free(host);
    }
}

void farm_server_finish(farm_server *f)
{
    if (!f || f->finished)
        return;
    f->finished = lease_book_done(f->book);
    if (f->finished) {
        for (int i = 0; i < lease_book_live_hosts(f->book); i++)
            tell_done(f, lease_book_live_host(f->book, i));
        linger(f);
    }
    lease_stats st = lease_book_stats(f->book);
    log_info("leases: %llu dealt, %llu dealt again; %llu hosts lost (%llu samples); %llu duplicate samples dropped",
             (unsigned long long)st.dealt, (unsigned long long)st.redealt, (unsigned long long)st.lost_hosts,
             (unsigned long long)st.lost_samples, (unsigned long long)st.duplicates);
    stage_set_poll_hook(f->s, NULL, NULL);
    ctl_server_close(f->ctl);
    f->ctl = NULL;
}

void farm_server_free(farm_server *f)
{
    if (!f)
        return;
    ctl_server_close(f->ctl);
    lease_book_free(f->book);
    free(f->reported_samples);
    free(f->endpoint);
    for (int i = 0; i < f->n_told; i++)
        free(f->told_done[i]);
    free(f->told_done);
    free(f);
}

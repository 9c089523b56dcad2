/*
 * farm_client.c — see farm_client.h. A ctl_client (control.h) whose hello carries the
 * epoch's length; leases arrive into a queue of two, read by farm_client_next.
 */
#include "decode/farm_client.h"

#include "control.h"
#include "log.h"
#include "timer.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QUEUE 2
#define BEAT_S 1.0
#define ASK_AGAIN_S 0.1 /* after a "wait" */
#define WAITING_LOG_S 30.0

struct farm_client {
    stage *s;
    ctl_client *ctl;
    char *endpoint;
    farm_lease queue[QUEUE];
    int n;
    bool asking, done, failed;
    double timeout_s, opened, last_sent, last_heard, wait_until, last_waiting_log;
    bool heard_any;
};

static int send_type(farm_client *c, const char *type)
{
    c->last_sent = now_seconds();
    return ctl_send(c->ctl, ctl_msg(type), 1000);
}

static void take_lease(farm_client *c, json_t *m)
{
    json_int_t id = json_integer_value(json_object_get(m, "lease")), e = json_integer_value(json_object_get(m, "epoch"));
    json_int_t a = json_integer_value(json_object_get(m, "start")), b = json_integer_value(json_object_get(m, "end"));
    if (c->n == QUEUE || e < 0 || a < 0 || b <= a) {
        log_warn("lease server %s sent a lease that makes no sense here (epoch %lld, %lld-%lld); ignored",
                 c->endpoint, (long long)e, (long long)a, (long long)b);
        return;
    }
    c->queue[c->n++] = (farm_lease){.id = (uint64_t)id, .epoch = (uint32_t)e, .start = (uint64_t)a, .end = (uint64_t)b};
    stage_count(c->s, "leases_taken", 1); /* for selfsup status on the farm host */
}

static void on_message(farm_client *c, json_t *m, double now)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    c->last_heard = now;
    c->heard_any = true;
    if (!strcmp(type, "lease") || !strcmp(type, "wait") || !strcmp(type, "done") || !strcmp(type, "refused"))
        c->asking = false;
    if (!strcmp(type, "lease"))
        take_lease(c, m);
    else if (!strcmp(type, "wait"))
        c->wait_until = now + ASK_AGAIN_S;
    else if (!strcmp(type, "done"))
        c->done = true;
    else if (!strcmp(type, "refused")) {
        log_error("the lease server %s refused this host: %s", c->endpoint,
                  json_string_value(json_object_get(m, "why")) ? json_string_value(json_object_get(m, "why")) : "");
        c->failed = true;
    }
}

/* Silence from the server: fine before it first answered (said every 30 s), fatal after. */
static int judge_silence(farm_client *c, double now)
{
    if (!c->heard_any) {
        if (now - c->last_waiting_log >= WAITING_LOG_S) {
            log_info("waiting for the lease server at %s (%.0f s so far)", c->endpoint, now - c->opened);
            c->last_waiting_log = now;
        }
        return STAGE_HOOK_GO_ON;
    }
    if (now - c->last_heard < c->timeout_s)
        return STAGE_HOOK_GO_ON;
    log_error("the lease server at %s has not answered for %.0f s (SELFSUP.FARM.HOST_TIMEOUT_S): the trainer's side "
              "is gone",
              c->endpoint, now - c->last_heard);
    c->failed = true;
    return STAGE_HOOK_FAILED;
}

/* The stage's poll hook: read what came, beat, ask when there is room. */
static int poll_server(void *arg)
{
    farm_client *c = arg;
    if (c->failed)
        return STAGE_HOOK_FAILED;
    double now = now_seconds();
    json_t *m;
    while ((m = ctl_recv(c->ctl, 0))) {
        on_message(c, m, now);
        json_decref(m);
    }
    if (c->failed)
        return STAGE_HOOK_FAILED;
    if (!c->done && !c->asking && c->n < QUEUE && now >= c->wait_until) {
        c->asking = send_type(c, "want") == 0;
    } else if (now - c->last_sent >= BEAT_S)
        send_type(c, "beat");
    return judge_silence(c, now);
}

farm_client *farm_client_open(stage *s, const char *endpoint, const char *id, const char *key_file, uint64_t samples,
                              double timeout_s, char **err)
{
    ctl_client *ctl = ctl_connect(endpoint, id, key_file, err);
    if (!ctl)
        return NULL;
    json_t *hello = ctl_msg("hello");
    json_object_set_new(hello, "id", json_string(id));
    json_object_set_new(hello, "samples", json_integer((json_int_t)samples));
    if (ctl_send(ctl, hello, 5000) != 0) {
        ctl_close(ctl);
        *err = xasprintf("cannot send the hello to %s", endpoint);
        return NULL;
    }
    farm_client *c = xcalloc(1, sizeof *c);
    c->s = s;
    c->ctl = ctl;
    c->endpoint = xstrdup(endpoint);
    c->timeout_s = timeout_s;
    c->opened = c->last_sent = c->last_waiting_log = now_seconds();
    stage_set_poll_hook(s, poll_server, c);
    log_info("%s: asking %s for leases", id, endpoint);
    return c;
}

int farm_client_next(farm_client *c, farm_lease *out)
{
    for (;;) {
        if (c->n > 0) {
            *out = c->queue[0];
            memmove(&c->queue[0], &c->queue[1], (size_t)(--c->n) * sizeof *c->queue);
            poll_server(c); /* ask for the next one now, while this one is decoded */
            return 1;
        }
        if (c->failed)
            return -1;
        if (c->done || stage_stopping(c->s))
            return 0;
        stage_poll(c->s); /* calls poll_server */
        usleep(5000);
    }
}

bool farm_client_done(const farm_client *c) { return c->done; }

int farm_client_await_end(farm_client *c)
{
    while (!c->done && !c->failed && !stage_stop_asked(c->s)) {
        stage_poll(c->s); /* calls poll_server, which judges the silence */
        usleep(5000);
    }
    if (!c->done && !c->failed)
        log_error("stopped while the lease server at %s had not said the run is done", c->endpoint);
    return c->done ? 0 : -1;
}

void farm_client_close(farm_client *c, bool finished)
{
    if (!c)
        return;
    stage_set_poll_hook(c->s, NULL, NULL);
    if (finished)
        send_type(c, "bye");
    ctl_close(c->ctl);
    free(c->endpoint);
    free(c);
}

/*
 * test_control.c — unit tests for shm/control: the control plane between the orchestrator
 * (ROUTER) and the stages (DEALER).
 *
 * Covered: hello / heartbeat / command round trips over ipc (in a temp dir) and
 * tcp://127.0.0.1:0, in one process and between two (fork); addressing by peer id and
 * handover of an id; sends to unknown or departed peers failing; malformed frames (not JSON,
 * arrays, no "type", several frames, oversized, nameless peers) dropped in both directions
 * while the next good message still arrives; CURVE with the right key, a wrong key and no
 * key; key file permissions; the keygen file format and that its keys are a pair; ipc path
 * checks; and `selfsup keygen` exit codes.
 *
 * Nothing may hang: every receive has a timeout, every test runs under alarm() (see
 * arm_watchdog), and forked children have their own alarm and are killed if they overstay. Children report through their
 * exit status (they must not call cr_assert, which belongs to the test process), and leave
 * with _exit so that they never run the test framework's exit handlers.
 *
 * Raw ZeroMQ sockets (their own context) play the misbehaving peers.
 */
#include "control.h"
#include "util.h"

#include "test_util.h"

/* cmd_keygen lives in the selfsup binary, not in libselfsup.a; compile it in here to test
 * the function itself (the binary is tested too when it has the command). */
#include "../../orchestrator/cmd_keygen.c"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum {
    WAIT_MS = 5000,    /* for a message that should come */
    NOTHING_MS = 400,  /* for one that should not */
};

/* ---- helpers ---------------------------------------------------------------------------- */

static void rm_rf(const char *dir)
{
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
}

static ctl_server *bind_ok(const char *endpoint, const char *key_file)
{
    char *err = NULL;
    ctl_server *s = ctl_bind(endpoint, key_file, &err);
    cr_assert(s, "ctl_bind(%s): %s", endpoint, err ? err : "?");
    return s;
}

static ctl_client *connect_ok(const char *endpoint, const char *id, const char *key_file)
{
    char *err = NULL;
    ctl_client *c = ctl_connect(endpoint, id, key_file, &err);
    cr_assert(c, "ctl_connect(%s): %s", endpoint, err ? err : "?");
    return c;
}

static json_t *hello(const char *id)
{
    return json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s}", "type", "hello", "stage", "augment", "id", id,
                     "pid", (int)getpid(), "rank", 0, "world_size", 1, "role", "worker", "version", "0.1.0");
}

static json_t *heartbeat(long records)
{
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:{s:i}}", "type", "heartbeat", "records_in",
                     (json_int_t)records, "records_out", (json_int_t)records, "bytes_in", (json_int_t)1000,
                     "bytes_out", (json_int_t)2000, "blocked_in_s", 0.5, "blocked_out_s", 0.25, "counters",
                     "invalid_images", 3);
}

static const char *type_of(const json_t *m)
{
    return json_string_value(json_object_get(m, "type"));
}

/* The server's next message, which must be `type` from `from`. */
static json_t *expect_server(ctl_server *s, const char *type, const char *from)
{
    char *peer = NULL;
    json_t *m = ctl_server_recv(s, WAIT_MS, &peer);
    cr_assert(m, "server: no '%s' message within %d ms", type, WAIT_MS);
    cr_assert_str_eq(type_of(m), type);
    cr_assert(peer);
    if (from)
        cr_assert_str_eq(peer, from);
    free(peer);
    return m;
}

static json_t *expect_client(ctl_client *c, const char *type)
{
    json_t *m = ctl_recv(c, WAIT_MS);
    cr_assert(m, "client: no '%s' message within %d ms", type, WAIT_MS);
    cr_assert_str_eq(type_of(m), type);
    return m;
}

static void expect_server_nothing(ctl_server *s)
{
    char *peer = NULL;
    json_t *m = ctl_server_recv(s, NOTHING_MS, &peer);
    cr_assert_null(m, "server got an unexpected '%s' from %s", m ? type_of(m) : "", peer ? peer : "?");
    cr_assert_null(peer);
}

/* The whole conversation of a stage's life, from the orchestrator's side of one process. */
static void converse(ctl_server *s, ctl_client *c, const char *id)
{
    cr_assert_eq(ctl_send(c, hello(id), WAIT_MS), 0);
    json_t *m = expect_server(s, "hello", id);
    cr_assert_str_eq(json_string_value(json_object_get(m, "id")), id);
    cr_assert_eq(json_integer_value(json_object_get(m, "pid")), getpid());
    json_decref(m);

    cr_assert_eq(ctl_server_send(s, id, ctl_msg("start")), 0);
    json_decref(expect_client(c, "start"));

    cr_assert_eq(ctl_send(c, heartbeat(42), WAIT_MS), 0);
    m = expect_server(s, "heartbeat", id);
    cr_assert_eq(json_integer_value(json_object_get(m, "records_in")), 42);
    cr_assert_float_eq(json_real_value(json_object_get(m, "blocked_in_s")), 0.5, 1e-12);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "counters"), "invalid_images")), 3);
    json_decref(m);

    cr_assert_eq(ctl_server_send(s, id, json_pack("{s:s, s:i}", "type", "epoch", "epoch", 7)), 0);
    m = expect_client(c, "epoch");
    cr_assert_eq(json_integer_value(json_object_get(m, "epoch")), 7);
    json_decref(m);
}

/* The stage's side of converse_forked, in a child process: 0 when all went well, else the
 * step that failed. */
static int child_stage(const char *endpoint, const char *id, const char *key_file)
{
    ctl_client *c = ctl_connect(endpoint, id, key_file, NULL);
    if (!c)
        return 10;
    if (ctl_send(c, hello(id), WAIT_MS) < 0)
        return 11;
    json_t *m = ctl_recv(c, WAIT_MS);
    if (!m || strcmp(type_of(m), "start"))
        return 12;
    json_decref(m);
    if (ctl_send(c, heartbeat(5), WAIT_MS) < 0)
        return 13;
    m = ctl_recv(c, WAIT_MS);
    if (!m || strcmp(type_of(m), "stop"))
        return 14;
    json_decref(m);
    json_t *final = heartbeat(9);
    json_object_set_new(final, "type", json_string("final"));
    json_object_set_new(final, "status", json_string("ok"));
    if (ctl_send(c, final, WAIT_MS) < 0)
        return 15;
    ctl_close(c); /* must still deliver "final": the linger */
    return 0;
}

/* Fork a stage process that waits for the endpoint on a pipe (written by the parent once
 * it has bound), then runs child_stage. *to_child gets the pipe's write end. */
static pid_t fork_stage(int *to_child, const char *id, const char *key_file)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        alarm(20);
        close(fds[1]);
        char endpoint[1024];
        ssize_t n, got = 0;
        while ((n = read(fds[0], endpoint + got, sizeof endpoint - 1 - (size_t)got)) > 0)
            got += n;
        endpoint[got] = '\0';
        _exit(got > 0 ? child_stage(endpoint, id, key_file) : 9);
    }
    close(fds[0]);
    *to_child = fds[1];
    return pid;
}

static void send_endpoint(int to_child, const char *endpoint)
{
    cr_assert_eq(write(to_child, endpoint, strlen(endpoint)), (ssize_t)strlen(endpoint));
    close(to_child);
}

/* Wait for a child, killing it after timeout_ms; returns its exit status (or 128+signal). */
static int wait_child(pid_t pid, int timeout_ms)
{
    int status = 0;
    for (int waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited += 10) {
        if (waited >= timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* The orchestrator's side, with the stage in another process. The fork normally comes
 * before the server exists: a child forked while libzmq's threads run can deadlock under
 * AddressSanitizer (gcc 12's allocator lock is not fork-safe; a thread that held it is gone
 * in the child). fork_after_bind tests a child that abandons its parent's context. */
static void converse_forked(const char *endpoint, const char *key_file, bool fork_after_bind)
{
    int to_child = -1;
    pid_t pid = fork_after_bind ? 0 : fork_stage(&to_child, "collate.0", key_file);
    ctl_server *s = bind_ok(endpoint, key_file);
    if (fork_after_bind)
        pid = fork_stage(&to_child, "collate.0", key_file);
    send_endpoint(to_child, ctl_server_endpoint(s));

    char *peer = NULL;
    json_t *m = ctl_server_recv(s, WAIT_MS, &peer);
    if (!m) /* say what became of the child */
        cr_assert_fail("no hello from the stage process (it ended with status %d)", wait_child(pid, 0));
    cr_assert_str_eq(type_of(m), "hello");
    cr_assert_str_eq(peer, "collate.0");
    free(peer);
    cr_assert_eq(json_integer_value(json_object_get(m, "pid")), pid);
    json_decref(m);
    cr_assert_eq(ctl_server_send(s, "collate.0", ctl_msg("start")), 0);
    m = expect_server(s, "heartbeat", "collate.0");
    cr_assert_eq(json_integer_value(json_object_get(m, "records_out")), 5);
    json_decref(m);
    cr_assert_eq(ctl_server_send(s, "collate.0", ctl_msg("stop")), 0);
    m = expect_server(s, "final", "collate.0");
    cr_assert_str_eq(json_string_value(json_object_get(m, "status")), "ok");
    json_decref(m);
    cr_assert_eq(wait_child(pid, WAIT_MS), 0, "the stage process failed");
    ctl_server_close(s);
}

static char *keygen_ok(const char *dir, const char *name)
{
    char *path = path_join(dir, name);
    char *err = NULL;
    cr_assert_eq(ctl_keygen(path, &err), 0, "ctl_keygen: %s", err ? err : "?");
    return path;
}

/* A raw ZeroMQ socket on its own context, for playing a peer that breaks the protocol. */
typedef struct {
    void *ctx, *sock;
} raw_peer;

static raw_peer raw_open(int type, const char *id)
{
    raw_peer r = {.ctx = zmq_ctx_new()};
    r.sock = zmq_socket(r.ctx, type);
    cr_assert(r.sock);
    int linger = 0;
    zmq_setsockopt(r.sock, ZMQ_LINGER, &linger, sizeof linger);
    if (id)
        cr_assert_eq(zmq_setsockopt(r.sock, ZMQ_ROUTING_ID, id, strlen(id)), 0);
    return r;
}

static void raw_close(raw_peer *r)
{
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
}

static void raw_send(void *sock, const void *data, size_t len, int flags)
{
    cr_assert_geq(zmq_send(sock, data, len, flags), 0, "zmq_send: %s", zmq_strerror(errno));
}

static void raw_send_str(void *sock, const char *s, int flags)
{
    raw_send(sock, s, strlen(s), flags);
}

/* Bad messages in one frame each, then several frames; oversized goes separately. */
static const char *const bad_bodies[] = {
    "not json at all", "[1,2,3]", "{\"x\":1}", "{\"type\":3}", "{\"type\":\"\"}", "", "{\"type\":\"a\",\"type\":\"b\"}",
};

static char *oversized_message(void)
{
    size_t n = CTL_MAX_MESSAGE_BYTES + 100;
    char *s = xmalloc(n + 1);
    memset(s, 'a', n);
    memcpy(s, "{\"type\":\"big\",\"pad\":\"", 21);
    memcpy(s + n - 2, "\"}", 3);
    return s;
}

/* A watchdog for every test: a hung test dies of SIGALRM and is reported as a crash.
 * (Not Criterion's .timeout: with --jobs > 1, Criterion 2.4's runner then leaks memory,
 * which fails SANITIZE=1 runs.) */
static void arm_watchdog(void)
{
    alarm(60);
}

TestSuite(control, .init = arm_watchdog);

/* ---- round trips ---------------------------------------------------------------------------- */

Test(control, roundtrip_ipc_one_process)
{
    char *dir = test_make_tmpdir();
    char *ep = xasprintf("ipc://%s/control.sock", dir);
    ctl_server *s = bind_ok(ep, NULL);
    cr_assert_str_eq(ctl_server_endpoint(s), ep);
    ctl_client *c = connect_ok(ep, "augment.2", NULL);
    converse(s, c, "augment.2");
    ctl_close(c);
    ctl_server_close(s);
    free(ep);
    rm_rf(dir);
    free(dir);
}

Test(control, roundtrip_tcp_port0_one_process)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", NULL);
    const char *ep = ctl_server_endpoint(s);
    int port = 0;
    cr_assert_eq(sscanf(ep, "tcp://127.0.0.1:%d", &port), 1, "endpoint %s", ep);
    cr_assert_gt(port, 0);
    ctl_client *c = connect_ok(ep, "decode.0", NULL);
    converse(s, c, "decode.0");
    ctl_close(c);
    ctl_server_close(s);
}

Test(control, tcp_wildcard_port_reports_real_one)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:*", NULL);
    int port = 0;
    cr_assert_eq(sscanf(ctl_server_endpoint(s), "tcp://127.0.0.1:%d", &port), 1);
    cr_assert_gt(port, 0);
    ctl_client *c = connect_ok(ctl_server_endpoint(s), "train.0", NULL);
    converse(s, c, "train.0");
    ctl_close(c);
    ctl_server_close(s);
}

Test(control, roundtrip_ipc_two_processes)
{
    char *dir = test_make_tmpdir();
    char *ep = xasprintf("ipc://%s/control.sock", dir);
    converse_forked(ep, NULL, false);
    free(ep);
    rm_rf(dir);
    free(dir);
}

Test(control, roundtrip_tcp_two_processes)
{
    converse_forked("tcp://127.0.0.1:0", NULL, false);
}

#ifndef __SANITIZE_ADDRESS__ /* see converse_forked */
Test(control, child_forked_after_the_context_exists)
{
    converse_forked("tcp://127.0.0.1:0", NULL, true);
}
#endif

Test(control, hello_sent_before_server_binds_is_delivered)
{
    char *dir = test_make_tmpdir();
    char *ep = xasprintf("ipc://%s/control.sock", dir);
    ctl_client *c = connect_ok(ep, "augment.0", NULL);
    cr_assert_eq(ctl_send(c, hello("augment.0"), 1000), 0, "a send must queue while disconnected");
    ctl_server *s = bind_ok(ep, NULL);
    json_decref(expect_server(s, "hello", "augment.0"));
    ctl_close(c);
    ctl_server_close(s);
    free(ep);
    rm_rf(dir);
    free(dir);
}

Test(control, ipc_directory_is_created_private)
{
    char *dir = test_make_tmpdir();
    char *ep = xasprintf("ipc://%s/run/a/control.sock", dir);
    ctl_server *s = bind_ok(ep, NULL);
    char *sub = xasprintf("%s/run/a", dir);
    struct stat st;
    cr_assert_eq(stat(sub, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700);
    ctl_client *c = connect_ok(ep, "augment.0", NULL);
    converse(s, c, "augment.0");
    ctl_close(c);
    ctl_server_close(s);
    free(sub);
    free(ep);
    rm_rf(dir);
    free(dir);
}

Test(control, ipc_socket_in_use_is_refused)
{
    char *dir = test_make_tmpdir();
    char *ep = xasprintf("ipc://%s/control.sock", dir);
    ctl_server *s = bind_ok(ep, NULL);
    char *err = NULL;
    cr_assert_null(ctl_bind(ep, NULL, &err));
    cr_assert(err && strstr(err, "in use"), "error: %s", err ? err : "(none)");
    free(err);
    /* the first server still works */
    ctl_client *c = connect_ok(ep, "augment.0", NULL);
    converse(s, c, "augment.0");
    ctl_close(c);
    ctl_server_close(s);
    free(ep);
    rm_rf(dir);
    free(dir);
}

Test(control, ipc_path_too_long)
{
    char *dir = test_make_tmpdir();
    char long_name[130];
    memset(long_name, 'd', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    char *ep = xasprintf("ipc://%s/%s/control.sock", dir, long_name);
    char *err = NULL;
    cr_assert_null(ctl_bind(ep, NULL, &err));
    cr_assert(err && strstr(err, "Unix sockets allow at most 107"), "error: %s", err ? err : "(none)");
    free(err);
    err = NULL;
    cr_assert_null(ctl_connect(ep, "augment.0", NULL, &err));
    cr_assert(err && strstr(err, "at most"), "error: %s", err ? err : "(none)");
    free(err);
    cr_assert_eq(test_count_files(dir), 0, "nothing must be created for a refused path");
    free(ep);
    rm_rf(dir);
    free(dir);
}

Test(control, bad_arguments)
{
    char *err = NULL;
    cr_assert_null(ctl_connect("tcp://127.0.0.1:1", "", NULL, &err));
    cr_assert(err);
    free(err);
    err = NULL;
    cr_assert_null(ctl_connect("", "x.0", NULL, &err));
    cr_assert(err);
    free(err);
    err = NULL;
    cr_assert_null(ctl_bind("bogus://x", NULL, &err));
    cr_assert(err && strstr(err, "bogus://x"), "error: %s", err ? err : "(none)");
    free(err);
    ctl_close(NULL);
    ctl_server_close(NULL);
}

/* ---- addressing ------------------------------------------------------------------------------ */

Test(control, server_addresses_peers_by_id)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", NULL);
    const char *ep = ctl_server_endpoint(s);
    ctl_client *a = connect_ok(ep, "augment.0", NULL);
    ctl_client *b = connect_ok(ep, "augment.1", NULL);
    cr_assert_eq(ctl_send(a, hello("augment.0"), WAIT_MS), 0);
    json_decref(expect_server(s, "hello", "augment.0"));
    cr_assert_eq(ctl_send(b, hello("augment.1"), WAIT_MS), 0);
    json_decref(expect_server(s, "hello", "augment.1"));

    cr_assert_eq(ctl_server_send(s, "augment.1", json_pack("{s:s, s:i}", "type", "epoch", "epoch", 1)), 0);
    cr_assert_eq(ctl_server_send(s, "augment.0", json_pack("{s:s, s:i}", "type", "epoch", "epoch", 0)), 0);
    json_t *m = expect_client(a, "epoch");
    cr_assert_eq(json_integer_value(json_object_get(m, "epoch")), 0);
    json_decref(m);
    m = expect_client(b, "epoch");
    cr_assert_eq(json_integer_value(json_object_get(m, "epoch")), 1);
    json_decref(m);
    cr_assert_null(ctl_recv(a, NOTHING_MS));
    cr_assert_null(ctl_recv(b, 0));
    ctl_close(a);
    ctl_close(b);
    ctl_server_close(s);
}

Test(control, send_to_unknown_peer_fails)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", NULL);
    cr_assert_eq(ctl_server_send(s, "nobody.0", ctl_msg("start")), -1);
    cr_assert_eq(ctl_server_send(s, "", ctl_msg("start")), -1);
    cr_assert_eq(ctl_server_send(s, NULL, ctl_msg("start")), -1);
    ctl_server_close(s);
}

Test(control, send_to_departed_peer_fails)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", NULL);
    ctl_client *c = connect_ok(ctl_server_endpoint(s), "augment.0", NULL);
    converse(s, c, "augment.0");
    ctl_close(c);
    /* the disconnect reaches the server's I/O thread soon, not at once */
    int rc = 0;
    for (int i = 0; i < 300 && rc == 0; i++) {
        rc = ctl_server_send(s, "augment.0", ctl_msg("stop"));
        if (rc == 0)
            usleep(10000);
    }
    cr_assert_eq(rc, -1, "sending to a departed peer still succeeds after 3 s");
    ctl_server_close(s);
}

Test(control, restarted_stage_takes_over_its_id)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", NULL);
    const char *ep = ctl_server_endpoint(s);
    ctl_client *old = connect_ok(ep, "augment.3", NULL);
    cr_assert_eq(ctl_send(old, hello("augment.3"), WAIT_MS), 0);
    json_decref(expect_server(s, "hello", "augment.3"));
    ctl_client *fresh = connect_ok(ep, "augment.3", NULL);
    cr_assert_eq(ctl_send(fresh, hello("augment.3"), WAIT_MS), 0);
    json_decref(expect_server(s, "hello", "augment.3"));
    cr_assert_eq(ctl_server_send(s, "augment.3", ctl_msg("start")), 0);
    json_decref(expect_client(fresh, "start"));
    cr_assert_null(ctl_recv(old, NOTHING_MS));
    ctl_close(old);
    ctl_close(fresh);
    ctl_server_close(s);
}

Test(control, refuses_to_send_non_messages)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", NULL);
    ctl_client *c = connect_ok(ctl_server_endpoint(s), "augment.0", NULL);
    cr_assert_eq(ctl_send(c, json_pack("[i]", 1), 100), -1);
    cr_assert_eq(ctl_send(c, json_pack("{s:i}", "type", 1), 100), -1);
    cr_assert_eq(ctl_send(c, NULL, 100), -1);
    char *big = oversized_message();
    cr_assert_eq(ctl_send(c, json_loads(big, 0, NULL), 100), -1);
    free(big);
    ctl_close(c);
    ctl_server_close(s);
}

/* ---- malformed messages ---------------------------------------------------------------------- */

Test(control, server_drops_malformed_messages)
{
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", NULL);
    raw_peer r = raw_open(ZMQ_DEALER, "rogue.0");
    cr_assert_eq(zmq_connect(r.sock, ctl_server_endpoint(s)), 0);
    for (size_t i = 0; i < ARRAY_LEN(bad_bodies); i++)
        raw_send_str(r.sock, bad_bodies[i], 0);
    raw_send_str(r.sock, "{\"type\":\"hello\"}", ZMQ_SNDMORE); /* good JSON, but two frames */
    raw_send_str(r.sock, "{\"type\":\"hello\"}", 0);
    raw_send_str(r.sock, "", ZMQ_SNDMORE); /* a REQ-style empty delimiter */
    raw_send_str(r.sock, "{\"type\":\"hello\"}", 0);
    char *big = oversized_message();
    raw_send_str(r.sock, big, 0);
    free(big);
    raw_send_str(r.sock, "{\"type\":\"heartbeat\",\"records_in\":1}", 0);

    json_t *m = expect_server(s, "heartbeat", "rogue.0");
    cr_assert_eq(json_integer_value(json_object_get(m, "records_in")), 1);
    json_decref(m);
    expect_server_nothing(s);

    /* A peer that set no routing id gets a binary one from libzmq: not a stage. */
    raw_peer anon = raw_open(ZMQ_DEALER, NULL);
    cr_assert_eq(zmq_connect(anon.sock, ctl_server_endpoint(s)), 0);
    raw_send_str(anon.sock, "{\"type\":\"hello\"}", 0);
    raw_send_str(r.sock, "{\"type\":\"final\"}", 0);
    json_decref(expect_server(s, "final", "rogue.0"));
    expect_server_nothing(s);

    raw_close(&anon);
    raw_close(&r);
    ctl_server_close(s);
}

Test(control, client_drops_malformed_messages)
{
    raw_peer r = raw_open(ZMQ_ROUTER, NULL);
    cr_assert_eq(zmq_bind(r.sock, "tcp://127.0.0.1:*"), 0);
    char ep[256];
    size_t ep_len = sizeof ep;
    cr_assert_eq(zmq_getsockopt(r.sock, ZMQ_LAST_ENDPOINT, ep, &ep_len), 0);
    ctl_client *c = connect_ok(ep, "augment.0", NULL);
    cr_assert_eq(ctl_send(c, hello("augment.0"), WAIT_MS), 0);

    /* the raw server learns the client's id from the hello */
    zmq_pollitem_t item = {.socket = r.sock, .events = ZMQ_POLLIN};
    cr_assert_eq(zmq_poll(&item, 1, WAIT_MS), 1);
    char id[256], body[256];
    int id_len = zmq_recv(r.sock, id, sizeof id, 0);
    cr_assert_eq(id_len, 9);
    cr_assert_eq(memcmp(id, "augment.0", 9), 0);
    cr_assert_gt(zmq_recv(r.sock, body, sizeof body, 0), 0);

    char *big = oversized_message();
    const char *multi[] = {"{\"type\":\"start\"}", "{\"type\":\"stop\"}"};
    for (size_t i = 0; i < ARRAY_LEN(bad_bodies) + 2; i++) {
        raw_send(r.sock, id, (size_t)id_len, ZMQ_SNDMORE);
        if (i < ARRAY_LEN(bad_bodies)) {
            raw_send_str(r.sock, bad_bodies[i], 0);
        } else if (i == ARRAY_LEN(bad_bodies)) {
            raw_send_str(r.sock, multi[0], ZMQ_SNDMORE);
            raw_send_str(r.sock, multi[1], 0);
        } else {
            raw_send_str(r.sock, big, 0);
        }
    }
    free(big);
    raw_send(r.sock, id, (size_t)id_len, ZMQ_SNDMORE);
    raw_send_str(r.sock, "{\"type\":\"epoch\",\"epoch\":4}", 0);

    json_t *m = expect_client(c, "epoch");
    cr_assert_eq(json_integer_value(json_object_get(m, "epoch")), 4);
    json_decref(m);
    cr_assert_null(ctl_recv(c, NOTHING_MS));
    ctl_close(c);
    raw_close(&r);
}

/* ---- CURVE ----------------------------------------------------------------------------------- */

Test(control, curve_right_key_talks)
{
    char *dir = test_make_tmpdir();
    char *key = keygen_ok(dir, "control.key");
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", key);
    ctl_client *c = connect_ok(ctl_server_endpoint(s), "augment.0", key);
    converse(s, c, "augment.0");
    ctl_close(c);
    ctl_server_close(s);
    free(key);
    rm_rf(dir);
    free(dir);
}

Test(control, curve_two_processes)
{
    char *dir = test_make_tmpdir();
    char *key = keygen_ok(dir, "control.key");
    converse_forked("tcp://127.0.0.1:0", key, false);
    free(key);
    rm_rf(dir);
    free(dir);
}

Test(control, curve_public_only_file_is_enough_for_clients)
{
    char *dir = test_make_tmpdir();
    char *key = keygen_ok(dir, "control.key");
    char *text = read_whole_file(key, NULL);
    cr_assert(text);
    text[strcspn(text, "\n") + 1] = '\0'; /* keep the public line */
    char *pub = path_join(dir, "control.pub");
    FILE *f = fopen(pub, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    chmod(pub, 0644); /* no secret in it, so world-readable is fine */

    ctl_server *s = bind_ok("tcp://127.0.0.1:0", key);
    ctl_client *c = connect_ok(ctl_server_endpoint(s), "augment.0", pub);
    converse(s, c, "augment.0");
    ctl_close(c);
    char *err = NULL;
    cr_assert_null(ctl_bind("tcp://127.0.0.1:0", pub, &err), "a server needs the secret key");
    cr_assert(err && strstr(err, "secret"), "error: %s", err ? err : "(none)");
    free(err);
    ctl_server_close(s);
    free(text);
    free(pub);
    free(key);
    rm_rf(dir);
    free(dir);
}

Test(control, curve_wrong_key_gets_nothing_through)
{
    char *dir = test_make_tmpdir();
    char *key = keygen_ok(dir, "control.key");
    char *other = keygen_ok(dir, "other.key");
    ctl_server *s = bind_ok("tcp://127.0.0.1:0", key);
    const char *ep = ctl_server_endpoint(s);

    ctl_client *wrong = connect_ok(ep, "intruder.0", other);
    cr_assert_eq(ctl_send(wrong, hello("intruder.0"), 1000), 0, "the send only queues");
    ctl_client *plain = connect_ok(ep, "plain.0", NULL);
    cr_assert_eq(ctl_send(plain, hello("plain.0"), 1000), 0);
    expect_server_nothing(s);
    cr_assert_eq(ctl_server_send(s, "intruder.0", ctl_msg("start")), -1, "the server must not know it");
    cr_assert_eq(ctl_server_send(s, "plain.0", ctl_msg("start")), -1);
    cr_assert_null(ctl_recv(wrong, NOTHING_MS));
    cr_assert_null(ctl_recv(plain, 0));

    /* ... while a rightful client on the same server is served */
    ctl_client *good = connect_ok(ep, "augment.0", key);
    converse(s, good, "augment.0");
    expect_server_nothing(s);

    ctl_close(good);
    ctl_close(plain);
    ctl_close(wrong);
    ctl_server_close(s);
    free(other);
    free(key);
    rm_rf(dir);
    free(dir);
}

Test(control, curve_key_file_readable_by_others_is_refused)
{
    char *dir = test_make_tmpdir();
    char *key = keygen_ok(dir, "control.key");
    cr_assert_eq(chmod(key, 0644), 0);
    char *err = NULL;
    cr_assert_null(ctl_bind("tcp://127.0.0.1:0", key, &err));
    cr_assert(err && strstr(err, "0644") && strstr(err, "too open") && strstr(err, "chmod 600"), "error: %s",
              err ? err : "(none)");
    free(err);
    err = NULL;
    cr_assert_null(ctl_connect("tcp://127.0.0.1:1", "augment.0", key, &err));
    cr_assert(err && strstr(err, "too open"), "error: %s", err ? err : "(none)");
    free(err);
    cr_assert_eq(chmod(key, 0640), 0);
    err = NULL;
    cr_assert_null(ctl_bind("tcp://127.0.0.1:0", key, &err));
    free(err);
    free(key);
    rm_rf(dir);
    free(dir);
}

Test(control, curve_bad_key_files_are_refused)
{
    const char *bad[] = {
        "public short\nsecret short\n",
        "public 0000000000000000000000000000000000000000\nsecret 0000000000000000000000000000000000000000\n",
        "hello world\n",
        "",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char *path = test_write_temp("control.key", bad[i]);
        chmod(path, 0600);
        char *err = NULL;
        cr_assert_null(ctl_bind("tcp://127.0.0.1:0", path, &err), "key file %zu accepted", i);
        cr_assert(err && strstr(err, path), "error: %s", err ? err : "(none)");
        free(err);
        char *dir = path_dirname(path);
        rm_rf(dir);
        free(dir);
        free(path);
    }
    char *err = NULL;
    cr_assert_null(ctl_bind("tcp://127.0.0.1:0", "/nonexistent/control.key", &err));
    cr_assert(err && strstr(err, "/nonexistent/control.key"));
    free(err);
}

Test(control, keygen_format_and_pair)
{
    char *dir = test_make_tmpdir();
    mode_t old_umask = umask(0); /* the file must be 0600 whatever the umask */
    char *key = keygen_ok(dir, "control.key");
    umask(old_umask);
    struct stat st;
    cr_assert_eq(stat(key, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600, "mode %o", (unsigned)(st.st_mode & 07777));

    size_t len = 0;
    char *text = read_whole_file(key, &len);
    cr_assert(text);
    cr_assert_eq(len, 2 * (7 + 40 + 1), "file: '%s'", text);
    char pub[41], sec[41];
    cr_assert_eq(sscanf(text, "public %40s\nsecret %40s\n", pub, sec), 2, "file: '%s'", text);
    cr_assert_eq(strlen(pub), 40);
    cr_assert_eq(strlen(sec), 40);
    cr_assert_eq(text[len - 1], '\n');
    uint8_t bin[32];
    cr_assert(zmq_z85_decode(bin, pub));
    cr_assert(zmq_z85_decode(bin, sec));
    char derived[41];
    cr_assert_eq(zmq_curve_public(derived, sec), 0);
    cr_assert_str_eq(derived, pub, "the keys are not a pair");

    /* a second key is different, and replaces the file atomically (no temp files left) */
    char *err = NULL;
    cr_assert_eq(ctl_keygen(key, &err), 0);
    char *text2 = read_whole_file(key, NULL);
    cr_assert_str_neq(text, text2);
    cr_assert_eq(test_count_files(dir), 1);

    cr_assert_eq(ctl_keygen("/nonexistent/dir/control.key", &err), -1);
    cr_assert(err && strstr(err, "/nonexistent/dir/control.key"));
    free(err);
    free(text);
    free(text2);
    free(key);
    rm_rf(dir);
    free(dir);
}

/* ---- selfsup keygen ------------------------------------------------------------------------- */

static int keygen_cmd(const char *a1, const char *a2, const char *a3)
{
    char *argv[] = {"keygen", (char *)a1, (char *)a2, (char *)a3, NULL};
    int argc = 1;
    while (argc < 4 && argv[argc])
        argc++;
    /* the command's usage text and messages would only clutter the test log */
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    int rc = cmd_keygen(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    close(null);
    return rc;
}

Test(control, keygen_command_function)
{
    char *dir = test_make_tmpdir();
    char *key = path_join(dir, "control.key");
    cr_assert_eq(keygen_cmd(NULL, NULL, NULL), 2);
    cr_assert_eq(keygen_cmd("--bogus", key, NULL), 2);
    cr_assert_eq(keygen_cmd(key, "extra", NULL), 2);
    cr_assert_eq(keygen_cmd("--help", NULL, NULL), 0);
    cr_assert_not(path_exists(key));

    cr_assert_eq(keygen_cmd(key, NULL, NULL), 0);
    char *first = read_whole_file(key, NULL);
    cr_assert(first);
    cr_assert_eq(keygen_cmd(key, NULL, NULL), 2, "must not overwrite without --force");
    char *same = read_whole_file(key, NULL);
    cr_assert_str_eq(first, same);
    cr_assert_eq(keygen_cmd("--force", key, NULL), 0);
    char *second = read_whole_file(key, NULL);
    cr_assert_str_neq(first, second);
    struct stat st;
    cr_assert_eq(stat(key, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600);

    cr_assert_eq(keygen_cmd("/nonexistent/dir/control.key", NULL, NULL), 1);
    free(first);
    free(same);
    free(second);
    free(key);
    rm_rf(dir);
    free(dir);
}

Test(control, keygen_command_binary)
{
    char *bin = test_build_path("selfsup");
    char *out = NULL;
    char *cmd = xasprintf("'%s' keygen --help", bin);
    int rc = path_exists(bin) ? test_run(cmd, &out) : -1;
    free(cmd);
    if (rc != 0 || !strstr(out, "selfsup keygen")) {
        free(out);
        /* Not cr_skip_test: Criterion 2.4's runner leaks the skip message, which fails
         * SANITIZE=1 runs. cmd_keygen itself is tested above. */
        fprintf(stderr, "note: %s has no keygen command (not built or not wired); only the function was tested\n", bin);
        free(bin);
        return;
    }
    free(out);

    char *dir = test_make_tmpdir();
    char *key = path_join(dir, "control.key");
    struct {
        const char *args;
        int rc;
    } cases[] = {
        {"", 2}, {"--bogus KEY", 2}, {"KEY extra", 2}, {"KEY", 0}, {"KEY", 2}, {"--force KEY", 0},
        {"/nonexistent/dir/k", 1},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        strbuf args = {0};
        const char *a = cases[i].args, *k;
        while ((k = strstr(a, "KEY"))) {
            sb_putn(&args, a, (size_t)(k - a));
            sb_puts(&args, key);
            a = k + 3;
        }
        sb_puts(&args, a);
        cmd = xasprintf("'%s' keygen %s", bin, sb_str(&args));
        int got = test_run(cmd, &out);
        cr_assert_eq(got, cases[i].rc, "%s: exit %d, expected %d; output:\n%s", cmd, got, cases[i].rc, out);
        free(out);
        free(cmd);
        sb_free(&args);
    }
    struct stat st;
    cr_assert_eq(stat(key, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600);
    free(key);
    free(bin);
    rm_rf(dir);
    free(dir);
}

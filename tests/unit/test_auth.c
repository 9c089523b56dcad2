/*
 * test_auth.c — every network endpoint authenticates its peers: the attacks of the issue,
 * each refused while the legitimate peer goes on working.
 *
 *   control, tcp: a peer that holds only the server's public key (which a client node may
 *     keep world-readable) connects as train.0, plain and with a keypair of its own, sends
 *     fake heartbeats and a failing "final", and waits for what the orchestrator sends to
 *     train.0; a listed key claims an id it was not given; another key takes over a name;
 *     plain-text tcp is refused; a refused key is logged once, not once per attempt.
 *   control, ipc: another user cannot reach the socket; an open socket directory is refused.
 *   data, tcp: a stranger pushes 64 forged records and an end-of-stream record into a reader
 *     stage while the real writer streams; a stage asked for tcp without keys exits 2.
 *   selfsup run with a tcp control endpoint gives the stages it starts keys of their own.
 *
 * The attacker is a forked child. When the tests run as root (here and in CI) it first
 * becomes user nobody (setresuid, what setpriv does), so that it is another user, for whom
 * the key files are closed, and it checks that they are; otherwise it is a second process
 * that simply has no key. The fork comes before this process starts ZeroMQ threads (see
 * test_control.c's converse_forked). Children report through their exit status and leave
 * with _exit; every test runs under alarm().
 */
#include "auth.h"
#include "control.h"
#include "record.h"
#include "util.h"

#include "../stages/test_stage.h"
#include "test_ctl_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum {
    WAIT_MS = 5000,        /* for a message that should come */
    NOTHING_MS = 400,      /* for one that should not */
    ATTACK_MS = 2000,      /* how long an attacker keeps trying */
    FORGED = 64,           /* forged records the data attacker pushes */
    ATTACKER_ALARM_S = 30, /* an attacker child's own alarm (ctlt_fork) */
};

static void arm_watchdog(void)
{
    alarm(120);
}

TestSuite(auth, .init = arm_watchdog);

/* ---- helpers ---------------------------------------------------------------------------------- */

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}


/* `selfsup keygen DIR/keys --clients CLIENTS`, the tool a user runs: the key directory. */
static char *make_keys(const char *dir, const char *clients)
{
    char *keys = path_join(dir, "keys"), *bin = test_build_path("selfsup");
    char *cmd = xasprintf("'%s' keygen '%s' --clients %s", bin, keys, clients), *out = NULL;
    cr_assert_eq(test_run(cmd, &out), 0, "%s\n%s", cmd, out);
    free(out);
    free(cmd);
    free(bin);
    return keys;
}

static char *key_file(const char *keys, const char *name)
{
    char *file = xasprintf("%s.key", name), *path = path_join(keys, file);
    free(file);
    return path;
}

/* The key on the "NAME KEY" line of a key file. */
static char *key_line(const char *path, const char *name)
{
    char *text = read_whole_file(path, NULL);
    cr_assert(text, "cannot read %s", path);
    char *prefix = xasprintf("\n%s ", name), *at = strstr(text, prefix);
    cr_assert(at, "%s has no '%s' line", path, name);
    char *key = xstrndup(at + strlen(prefix), 40);
    free(prefix);
    free(text);
    return key;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

static json_t *hello(const char *id)
{
    return json_pack("{s:s, s:s, s:s, s:i}", "type", "hello", "stage", "train", "id", id, "pid", (int)getpid());
}

static json_t *heartbeat(long records)
{
    return json_pack("{s:s, s:I}", "type", "heartbeat", "records_in", (json_int_t)records);
}

/* The stage says hello, and the server hears it under its name. */
static void greet_ok(ctl_server *s, ctl_client *c, const char *id)
{
    cr_assert_eq(ctl_send(c, hello(id), WAIT_MS), 0);
    char *peer = NULL;
    json_t *m = ctl_server_recv(s, WAIT_MS, &peer);
    cr_assert(m, "no hello from %s", id);
    cr_assert_str_eq(ctlt_type_of(m), "hello");
    cr_assert_str_eq(peer, id);
    json_decref(m);
    free(peer);
}

static void expect_server_nothing(ctl_server *s)
{
    char *peer = NULL;
    json_t *m = ctl_server_recv(s, NOTHING_MS, &peer);
    cr_assert_null(m, "the server got '%s' from %s", m ? ctlt_type_of(m) : "", peer ? peer : "?");
}

/* While an attack goes on: the legitimate train.0 keeps sending heartbeats (records_in 7)
 * and the server keeps addressing train.0. Everything the server hears must be the real
 * stage's, and everything sent to train.0 must reach it. */
static void serve_during_attack(ctl_server *s, ctl_client *legit, int ms)
{
    int sent = 0, received = 0;
    for (long end = now_ms() + ms; now_ms() < end;) {
        cr_assert_eq(ctl_send(legit, heartbeat(7), WAIT_MS), 0);
        char *peer = NULL;
        json_t *m;
        while ((m = ctl_server_recv(s, 50, &peer))) {
            cr_assert_str_eq(peer, "train.0");
            cr_assert_str_neq(ctlt_type_of(m), "final", "a forged final reached the server");
            cr_assert_eq(json_integer_value(json_object_get(m, "records_in")), 7, "a forged %s reached the server",
                         ctlt_type_of(m));
            json_decref(m);
            free(peer);
            peer = NULL;
        }
        if (ctl_server_send(s, "train.0", json_pack("{s:s, s:i}", "type", "epoch", "epoch", sent)) == 0)
            sent++;
        while ((m = ctl_recv(legit, 0)))
            received++, json_decref(m);
    }
    json_t *m;
    while (received < sent && (m = ctl_recv(legit, WAIT_MS)))
        received++, json_decref(m);
    cr_assert_gt(sent, 0);
    cr_assert_eq(received, sent, "train.0 got %d of the %d messages sent to it", received, sent);
}

/* stderr into a file for a while, to count what was logged. */
typedef struct {
    int saved;
    char *path;
} captured;

static captured capture_stderr(const char *dir)
{
    captured c = {.path = path_join(dir, "stderr.log")};
    fflush(stderr);
    c.saved = dup(2);
    int fd = open(c.path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0 && c.saved >= 0);
    dup2(fd, 2);
    close(fd);
    return c;
}

static char *release_stderr(captured *c)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    char *text = read_whole_file(c->path, NULL);
    free(c->path);
    return text ? text : xstrdup("");
}

/* A temp dir with a key directory made by `selfsup keygen` in it and, once site_serve has run,
 * a CURVE control server on the loopback with the real train.0 connected and heard: the setup
 * and tear-down the tcp tests share. */
typedef struct {
    char *dir, *keys;
    ctl_server *s;     /* NULL until site_serve */
    const char *ep;    /* the server's endpoint */
    ctl_client *legit; /* train.0, the real stage */
} site;

/* The key directory DIR/keys, with `selfsup keygen ... --clients CLIENTS`. */
static site site_new(const char *clients)
{
    site t = {.dir = test_make_tmpdir()};
    t.keys = make_keys(t.dir, clients);
    return t;
}

/* Bind the server (after any fork: see the top comment) and connect train.0 with legit_key. */
static void site_serve(site *t, const char *legit_key)
{
    t->s = ctlt_bind("tcp://127.0.0.1:0", t->keys);
    t->ep = ctl_server_endpoint(t->s);
    t->legit = ctlt_connect(t->ep, "train.0", legit_key);
    greet_ok(t->s, t->legit, "train.0");
}

/* Close train.0 and the server (a test closes its other clients first), remove the dir. */
static void site_free(site *t)
{
    ctl_close(t->legit);
    ctl_server_close(t->s);
    free(t->keys);
    test_rm_rf(t->dir);
    free(t->dir);
}

/* ---- the attacker ------------------------------------------------------------------------------ */

/* Become user nobody when running as root, so that the attack comes from another user. */
static bool become_nobody(void)
{
    if (geteuid() != 0)
        return false;
    struct passwd *pw = getpwnam("nobody");
    uid_t uid = pw ? pw->pw_uid : 65534;
    gid_t gid = pw ? pw->pw_gid : 65534;
    if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0 || geteuid() == 0)
        _exit(90);
    return true;
}

/* As another user, the key files must stay closed: 4 if `path` can be read. */
static int cannot_steal(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        close(fd);
        return 4;
    }
    return 0;
}

static const char *attacker_said(int status)
{
    return status == 0   ? "nothing got through"
           : status == 3 ? "it received messages meant for train.0"
           : status == 4 ? "it could read a key file"
           : status == 5 ? "it could connect to the ipc socket"
                         : "it failed";
}

typedef struct {
    const char *steal; /* a key file the attacker tries to read */
} attack;

/* An attacker's socket, the control and the data attackers' one setup: plain, or CURVE with
 * the attacker's own keypair and the server's public key. A DEALER claims train.0 the old way
 * (routing id); its hello claims it the new way. */
static void *attacker_socket(void *ctx, int type, const char *endpoint, const char *server_key, const char *pub,
                             const char *sec)
{
    void *s = zmq_socket(ctx, type);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (type == ZMQ_DEALER)
        zmq_setsockopt(s, ZMQ_ROUTING_ID, "train.0", 7);
    if (server_key) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_key, 41);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 41);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 41);
    }
    zmq_connect(s, endpoint);
    return s;
}

static const char *const lies[] = {
    "{\"type\":\"hello\",\"stage\":\"train\",\"id\":\"train.0\",\"pid\":1}",
    "{\"type\":\"heartbeat\",\"records_in\":666}",
    "{\"type\":\"final\",\"status\":\"error\",\"cause\":\"self\",\"records_in\":666}",
};

/* Tell lies on both sockets and listen; true if anything came back. */
static bool lie_and_listen(void *socks[2])
{
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < ARRAY_LEN(lies); i++)
            zmq_send(socks[k], lies[i], strlen(lies[i]), ZMQ_DONTWAIT);
    zmq_pollitem_t items[2] = {{.socket = socks[0], .events = ZMQ_POLLIN}, {.socket = socks[1], .events = ZMQ_POLLIN}};
    return zmq_poll(items, 2, 50) > 0;
}

/* The control attacker: msg is "ENDPOINT [SERVER-PUBLIC-KEY]". It reconnects every 300 ms with
 * the same keypair (a refused key must be logged once, not per attempt). */
static int control_attacker(const char *msg, const void *arg)
{
    const attack *a = arg;
    char endpoint[256], server_key[41] = "";
    if (sscanf(msg, "%255s %40s", endpoint, server_key) < 1)
        return 9;
    if (become_nobody() && cannot_steal(a->steal))
        return 4;
    char pub[41], sec[41];
    zmq_curve_keypair(pub, sec);
    void *ctx = zmq_ctx_new();
    bool got = false;
    for (long end = now_ms() + ATTACK_MS; now_ms() < end;) {
        void *socks[2] = {attacker_socket(ctx, ZMQ_DEALER, endpoint, server_key[0] ? server_key : NULL, pub, sec),
                          attacker_socket(ctx, ZMQ_DEALER, endpoint, NULL, NULL, NULL)};
        for (long round = now_ms() + 300; now_ms() < round;)
            got |= lie_and_listen(socks);
        zmq_close(socks[0]);
        zmq_close(socks[1]);
    }
    zmq_ctx_term(ctx);
    return got ? 3 : 0;
}

/* ---- control over tcp ------------------------------------------------------------------------ */

Test(auth, control_tcp_refuses_a_peer_without_a_listed_key)
{
    site t = site_new("train:train.0");
    char *train_key = key_file(t.keys, "train"), *server_pub = key_line(train_key, "server");
    attack a = {.steal = train_key};
    ctlt_child c = ctlt_fork(ATTACKER_ALARM_S, control_attacker, &a);

    site_serve(&t, train_key);
    captured log = capture_stderr(t.dir);
    char *msg = xasprintf("%s %s", t.ep, server_pub);
    ctlt_tell(&c, msg);
    serve_during_attack(t.s, t.legit, ATTACK_MS + 500);
    int st = test_wait_child(c.pid, WAIT_MS);
    expect_server_nothing(t.s);
    char *text = release_stderr(&log);
    cr_assert_eq(st, 0, "the attacker (exit %d): %s", st, attacker_said(st));
    cr_assert_eq(count_of(text, "is not on the allow-list"), 1, "the refused key must be logged once:\n%s", text);

    free(text);
    free(msg);
    free(server_pub);
    free(train_key);
    site_free(&t);
}

/* A key on the list, for other ids: its claim to train.0 is refused (and logged once), it gets
 * nothing meant for train.0, and it still works under an id it was given. */
Test(auth, control_tcp_listed_key_cannot_claim_another_id)
{
    site t = site_new("train:train.0 node2:decode.*");
    char *train_key = key_file(t.keys, "train"), *node2_key = key_file(t.keys, "node2");
    site_serve(&t, train_key);

    captured log = capture_stderr(t.dir);
    ctl_client *rogue = ctlt_connect(t.ep, "train.0", node2_key);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(ctl_send(rogue, hello("train.0"), WAIT_MS), 0);
        cr_assert_eq(ctl_send(rogue, heartbeat(666), WAIT_MS), 0);
        cr_assert_eq(ctl_send(rogue, json_pack("{s:s, s:s}", "type", "final", "status", "error"), WAIT_MS), 0);
    }
    serve_during_attack(t.s, t.legit, 1000);
    cr_assert_null(ctl_recv(rogue, 0), "the rogue got a message meant for train.0");
    char *text = release_stderr(&log);
    cr_assert_eq(count_of(text, "may not claim the id 'train.0'"), 1, "log:\n%s", text);

    ctl_client *decode = ctlt_connect(t.ep, "decode.3", node2_key);
    greet_ok(t.s, decode, "decode.3");
    cr_assert_eq(ctl_server_send(t.s, "decode.3", json_pack("{s:s}", "type", "start")), 0);
    json_t *m = ctl_recv(decode, WAIT_MS);
    cr_assert(m && !strcmp(ctlt_type_of(m), "start"));
    json_decref(m);

    ctl_close(decode);
    ctl_close(rogue);
    free(text);
    free(train_key);
    free(node2_key);
    site_free(&t);
}

/* A name moves to a new connection (a restarted stage) only with the key that holds it. */
Test(auth, control_tcp_name_changes_hands_only_with_its_key)
{
    site t = site_new("a:train.* b:train.*");
    char *a_key = key_file(t.keys, "a"), *b_key = key_file(t.keys, "b");
    site_serve(&t, a_key); /* t.legit: the first connection under train.0 */

    captured log = capture_stderr(t.dir);
    ctl_client *other = ctlt_connect(t.ep, "train.0", b_key);
    cr_assert_eq(ctl_send(other, hello("train.0"), WAIT_MS), 0);
    serve_during_attack(t.s, t.legit, 800);
    cr_assert_null(ctl_recv(other, 0), "another key took train.0 over");
    char *text = release_stderr(&log);
    cr_assert_eq(count_of(text, "belongs to a connection with another key"), 1, "log:\n%s", text);

    ctl_client *restarted = ctlt_connect(t.ep, "train.0", a_key);
    greet_ok(t.s, restarted, "train.0");
    cr_assert_eq(ctl_server_send(t.s, "train.0", json_pack("{s:s}", "type", "stop")), 0);
    json_t *m = ctl_recv(restarted, WAIT_MS);
    cr_assert(m && !strcmp(ctlt_type_of(m), "stop"), "the restarted stage did not get its message");
    json_decref(m);
    cr_assert_null(ctl_recv(t.legit, NOTHING_MS));
    cr_assert_null(ctl_recv(other, 0));

    ctl_close(restarted);
    ctl_close(other);
    free(text);
    free(a_key);
    free(b_key);
    site_free(&t);
}

Test(auth, control_plain_tcp_is_refused)
{
    const char *no_keys[] = {NULL, ""};
    for (int i = 0; i < 2; i++) {
        char *err = NULL;
        cr_assert_null(ctl_bind("tcp://127.0.0.1:0", no_keys[i], &err), "a plain tcp server was bound");
        cr_assert(err && strstr(err, "selfsup keygen"), "error: %s", err ? err : "(none)");
        free(err);
        err = NULL;
        cr_assert_null(ctl_connect("tcp://127.0.0.1:1", "train.0", no_keys[i], &err), "a plain tcp client");
        cr_assert(err && strstr(err, "selfsup keygen") && strstr(err, "CLIENT_KEY_FILE"), "error: %s",
                  err ? err : "(none)");
        free(err);
    }
    char *err = NULL;
    auth_allow none = {0};
    cr_assert_null(ctl_bind_keys("tcp://127.0.0.1:0", NULL, &none, &err));
    free(err);
    const char *others[] = {"inproc://control", "udp://127.0.0.1:5555", "ws://127.0.0.1:5555"};
    for (size_t i = 0; i < ARRAY_LEN(others); i++) {
        err = NULL;
        cr_assert_null(ctl_bind(others[i], NULL, &err), "%s was bound", others[i]);
        cr_assert(err && strstr(err, "expected ipc://PATH or tcp://HOST:PORT"), "error: %s", err ? err : "(none)");
        free(err);
    }
}

/* ---- control over ipc ------------------------------------------------------------------------ */

/* Another user: the socket's directory is closed to it, so neither a plain connect() nor a
 * ZeroMQ peer reaches the socket. msg is the endpoint. */
static int ipc_attacker(const char *msg, const void *arg)
{
    (void)arg;
    if (!become_nobody())
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", msg + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa), e = errno;
    close(fd);
    if (rc == 0 || e != EACCES)
        return 5;
    void *ctx = zmq_ctx_new();
    void *socks[2] = {attacker_socket(ctx, ZMQ_DEALER, msg, NULL, NULL, NULL),
                      attacker_socket(ctx, ZMQ_DEALER, msg, NULL, NULL, NULL)};
    bool got = false;
    for (long end = now_ms() + ATTACK_MS / 2; now_ms() < end;)
        got |= lie_and_listen(socks);
    zmq_close(socks[0]);
    zmq_close(socks[1]);
    zmq_ctx_term(ctx);
    return got ? 3 : 0;
}

Test(auth, control_ipc_other_users_cannot_connect)
{
    char *dir = test_make_tmpdir();
    char *run = path_join(dir, "run"), *ep = xasprintf("ipc://%s/control.sock", run);
    ctlt_child c = ctlt_fork(ATTACKER_ALARM_S, ipc_attacker, NULL);
    ctl_server *s = ctlt_bind(ep, NULL);
    struct stat st;
    cr_assert_eq(stat(run, &st), 0);
    cr_assert_eq(st.st_mode & 077, 0, "the socket's directory is open to others: %04o", st.st_mode & 07777);
    ctl_client *legit = ctlt_connect(ep, "train.0", NULL);
    greet_ok(s, legit, "train.0");
    ctlt_tell(&c, ep);
    serve_during_attack(s, legit, ATTACK_MS / 2 + 300);
    int status = test_wait_child(c.pid, WAIT_MS);
    cr_assert_eq(status, 0, "the attacker (exit %d): %s", status, attacker_said(status));
    if (geteuid() != 0)
        fprintf(stderr, "note: not root, so the ipc attack could not come from another user\n");
    ctl_close(legit);
    ctl_server_close(s);
    free(ep);
    free(run);
    test_rm_rf(dir);
    free(dir);
}

Test(auth, control_ipc_directory_must_be_private)
{
    char *dir = test_make_tmpdir();
    char *open_dir = path_join(dir, "open"), *ep = xasprintf("ipc://%s/control.sock", open_dir);
    cr_assert_eq(mkdir(open_dir, 0700), 0);
    cr_assert_eq(chmod(open_dir, 0755), 0);
    char *err = NULL;
    cr_assert_null(ctl_bind(ep, NULL, &err), "a socket in a directory others can enter");
    cr_assert(err && strstr(err, open_dir) && strstr(err, "chmod 700"), "error: %s", err ? err : "(none)");
    free(err);
    if (geteuid() == 0) { /* private, but someone else's */
        cr_assert_eq(chmod(open_dir, 0700), 0);
        cr_assert_eq(chown(open_dir, 65534, 65534), 0);
        err = NULL;
        cr_assert_null(ctl_bind(ep, NULL, &err), "a socket in another user's directory");
        cr_assert(err && strstr(err, "owner uid 65534"), "error: %s", err ? err : "(none)");
        free(err);
    }
    err = NULL;
    cr_assert_null(ctl_bind("ipc://@selfsup-abstract", NULL, &err), "an abstract socket: every user reaches it");
    cr_assert(err && strstr(err, "abstract"), "error: %s", err ? err : "(none)");
    free(err);
    free(ep);
    free(open_dir);
    test_rm_rf(dir);
    free(dir);
}

/* ---- data over tcp --------------------------------------------------------------------------- */


/* A record the test consumer would take for a real one: seq's pattern and its checksum. */
static size_t forge_record(uint8_t *buf, size_t cap, uint64_t seq)
{
    rec_writer w;
    uint64_t n = 1000, one = 1;
    if (rec_writer_init(&w, buf, cap, REC_DATA, seq, 0, 2) != 0)
        return 0;
    uint8_t *data = rec_add(&w, "data", REC_U8, 1, &n);
    uint64_t *sum = rec_add(&w, "sum", REC_I64, 1, &one);
    if (!data || !sum)
        return 0;
    for (size_t k = 0; k < n; k++)
        data[k] = test_pattern(seq, k);
    *sum = test_fnv1a(data, n);
    return rec_finish(&w);
}

/* The data attacker: msg is "ENDPOINT READER-PUBLIC-KEY". Every 300 ms, on a plain PUSH and a
 * CURVE one with its own keypair, it pushes 64 forged records and an end-of-stream record. */
static int data_attacker(const char *msg, const void *arg)
{
    const attack *a = arg;
    char endpoint[256], server_key[41];
    if (sscanf(msg, "%255s %40s", endpoint, server_key) != 2)
        return 9;
    if (become_nobody() && cannot_steal(a->steal))
        return 4;
    static uint8_t records[FORGED + 1][4096] __attribute__((aligned(64)));
    size_t lens[FORGED + 1];
    for (int i = 0; i < FORGED; i++)
        lens[i] = forge_record(records[i], sizeof records[i], (uint64_t)i);
    lens[FORGED] = rec_write_eos(records[FORGED], sizeof records[FORGED], FORGED, false);
    char pub[41], sec[41];
    zmq_curve_keypair(pub, sec);
    void *ctx = zmq_ctx_new();
    for (long end = now_ms() + 2 * ATTACK_MS; now_ms() < end;) {
        void *socks[2] = {attacker_socket(ctx, ZMQ_PUSH, endpoint, server_key, pub, sec),
                          attacker_socket(ctx, ZMQ_PUSH, endpoint, NULL, NULL, NULL)};
        for (int k = 0; k < 2; k++)
            for (int i = 0; i <= FORGED; i++)
                zmq_send(socks[k], records[i], lens[i], ZMQ_DONTWAIT);
        usleep(300000);
        zmq_close(socks[0]);
        zmq_close(socks[1]);
    }
    zmq_ctx_term(ctx);
    return 0;
}

/* A test stage's command line, run from the build directory. */
static char *stage_cmd(const char *name, const char *args)
{
    char *rel = xasprintf("tests/selfsup-test-%s", name), *bin = test_build_path(rel);
    char *cmd = xasprintf("%s %s", bin, args);
    free(rel);
    free(bin);
    return cmd;
}

Test(auth, data_tcp_reader_refuses_forged_records)
{
    site t = site_new("writer");
    char *writer_key = key_file(t.keys, "writer"), *reader_pub = key_line(writer_key, "server");
    char *ep = xasprintf("tcp://127.0.0.1:%d", test_free_port());
    attack a = {.steal = writer_key};
    ctlt_child c = ctlt_fork(ATTACKER_ALARM_S, data_attacker, &a);

    char *check_args = xasprintf("--in %s --expect 100 config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=%s", ep, t.keys);
    char *produce_args = xasprintf("--count 100 --size 1000 --sleep-us 20000 --slot-bytes 65536 --out %s "
                                   "config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s",
                                   ep, writer_key);
    /* timeout: a reader that took forged data and left would leave the writer waiting */
    char *check = stage_cmd("check", check_args), *produce = stage_cmd("produce", produce_args);
    char *cmd = xasprintf("timeout 30 %s & reader=$!; sleep 0.2; timeout 30 %s; p=$?; wait $reader; r=$?; "
                          "[ $p = 0 ] || exit 70; exit $r",
                          check, produce);
    char *msg = xasprintf("%s %s", ep, reader_pub), *out = NULL;
    ctlt_tell(&c, msg);
    int st = test_run(cmd, &out);
    int attacker = test_wait_child(c.pid, 3 * ATTACK_MS);
    cr_assert_eq(st, 0, "the reader or the writer failed (exit %d):\n%s", st, out);
    cr_assert(strstr(out, "check: 100 records"), "the reader did not get exactly the writer's records:\n%s", out);
    cr_assert_eq(attacker, 0, "the attacker (exit %d): %s", attacker, attacker_said(attacker));
    cr_assert_eq(count_of(out, "is not on the allow-list"), 1, "the refused key must be logged once:\n%s", out);

    free(out);
    free(msg);
    free(cmd);
    free(check);
    free(produce);
    free(check_args);
    free(produce_args);
    free(ep);
    free(reader_pub);
    free(writer_key);
    site_free(&t);
}

/* Plain tcp is not possible: a stage asked for it without keys stops at once, exit 2, and
 * says what to do. */
Test(auth, data_tcp_without_keys_is_a_usage_error)
{
    site t = site_new("writer");
    char *ep = xasprintf("tcp://127.0.0.1:%d", test_free_port());
    struct {
        const char *stage;
        char *args;
        const char *says;
    } cases[] = {
        {"produce", xasprintf("--count 1 --out %s", ep), "SELFSUP.TRANSPORT.CLIENT_KEY_FILE"},
        {"check", xasprintf("--in %s", ep), "SELFSUP.TRANSPORT.SERVER_KEYS_DIR"},
        {"produce", xasprintf("--count 1 --out file:/dev/null --control %s", ep), "SELFSUP.CONTROL.CLIENT_KEY_FILE"},
        {"produce", xasprintf("--count 1 --out %s config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s/server.key", ep, t.keys),
         "no 'server' line"},
        {"check", xasprintf("--in %s config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=%s/nothing", ep, t.dir), "nothing"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char *stage = stage_cmd(cases[i].stage, cases[i].args), *cmd = xasprintf("timeout 20 %s", stage), *out = NULL;
        int st = test_run(cmd, &out);
        cr_assert_eq(st, 2, "%s: exit %d, expected 2:\n%s", cmd, st, out);
        cr_assert(strstr(out, "selfsup keygen") && strstr(out, cases[i].says), "%s: expected '%s' in:\n%s", cmd,
                  cases[i].says, out);
        free(out);
        free(cmd);
        free(stage);
        free(cases[i].args);
    }
    free(ep);
    site_free(&t);
}

/* ---- selfsup run --------------------------------------------------------------------------- */

static char *run_config(const char *dir, const char *control)
{
    char *produce = stage_cmd("produce", "--count 200 --size 2000"), *pass = stage_cmd("passthru", ""),
         *check = stage_cmd("check", "--expect 200");
    char *yaml = xasprintf("config:\n"
                           "  DATA: {NUM_DATALOADER_WORKERS: 1}\n"
                           "  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n"
                           "  SELFSUP:\n"
                           "    RING: {SLOT_BYTES: 65536, DEPTH: 4}\n"
                           "    CONTROL: %s\n"
                           "    STAGES: {decode: \"%s\", augment: \"%s\", collate: \"%s\", train: \"%s\"}\n",
                           control, produce, pass, pass, check);
    char *path = path_join(dir, "run.yaml");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(yaml, f);
    fclose(f);
    free(yaml);
    free(produce);
    free(pass);
    free(check);
    return path;
}

/* With a tcp control endpoint and no keys configured, selfsup run makes a key per stage it
 * starts, and removes them at the end; a bad key directory is a config error. */
Test(auth, run_tcp_control_gives_its_stages_their_own_keys)
{
    char *dir = test_make_tmpdir();
    char *config = run_config(dir, "{ENDPOINT: \"tcp://127.0.0.1:0\"}");
    char *selfsup = test_build_path("selfsup"), *out = NULL;
    char *cmd = xasprintf("%s run %s --run-dir %s/run", selfsup, config, dir);
    int st = test_run(cmd, &out);
    cr_assert_eq(st, 0, "%s:\n%s", cmd, out);
    cr_assert(strstr(out, "CURVE"), "%s", out);
    char *train_log_path = xasprintf("%s/run/logs/train.0.log", dir), *train_log = read_whole_file(train_log_path, NULL);
    cr_assert(train_log && strstr(train_log, "check: 200 records"), "%s", train_log ? train_log : "(no log)");
    char *run = path_join(dir, "run"), *keys = path_join(run, "keys");
    struct stat sb;
    cr_assert_eq(stat(run, &sb), 0);
    cr_assert_eq(sb.st_mode & 077, 0, "the run directory is open to others: %04o", sb.st_mode & 07777);
    cr_assert_not(path_exists(keys), "the stages' keys outlived the run");
    free(out);
    free(cmd);

    char *bad = run_config(dir, "{ENDPOINT: \"tcp://127.0.0.1:0\", SERVER_KEYS_DIR: \"/nonexistent/keys\"}");
    cmd = xasprintf("%s run %s --run-dir %s/run2", selfsup, bad, dir);
    st = test_run(cmd, &out);
    cr_assert_eq(st, 2, "%s:\n%s", cmd, out);
    cr_assert(strstr(out, "SERVER_KEYS_DIR") && strstr(out, "/nonexistent/keys"), "%s", out);
    free(out);
    free(cmd);
    free(bad);
    free(keys);
    free(run);
    free(train_log);
    free(train_log_path);
    free(selfsup);
    free(config);
    test_rm_rf(dir);
    free(dir);
}

/* ---- the config ------------------------------------------------------------------------------ */

static bool compose_control(const char *control, cfg_err *err)
{
    char *yaml = xasprintf("config:\n  SELFSUP:\n    CONTROL: %s\n", control);
    cfg_t cfg;
    bool ok = test_compose(&cfg, err, yaml, NULL);
    cfg_destroy(&cfg);
    free(yaml);
    return ok;
}

/* Endpoints whose peers cannot be limited are config errors; the old key file, which clients
 * shared with the server, is gone. */
Test(auth, config_refuses_endpoints_open_to_others)
{
    const char *good[] = {"{ENDPOINT: \"\"}", "{ENDPOINT: \"ipc:///tmp/x/control.sock\"}",
                          "{ENDPOINT: \"tcp://10.0.0.1:5555\", SERVER_KEYS_DIR: /etc/selfsup/keys}",
                          "{CLIENT_KEY_FILE: /etc/selfsup/node2.key}"};
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        cfg_err err;
        cr_assert(compose_control(good[i], &err), "%s: %s", good[i], err.msg);
    }
    const char *bad[] = {"{ENDPOINT: \"udp://10.0.0.1:5555\"}", "{ENDPOINT: \"ipc://@selfsup\"}",
                         "{ENDPOINT: \"inproc://control\"}", "{CURVE_KEY_FILE: /etc/selfsup/control.key}"};
    const char *says[] = {"expected", "expected", "expected", "unknown key"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        cfg_err err;
        cr_assert_not(compose_control(bad[i], &err), "%s was accepted", bad[i]);
        cr_assert(strstr(err.msg, "config.SELFSUP.CONTROL") && strstr(err.msg, says[i]), "%s: %s", bad[i], err.msg);
    }
}

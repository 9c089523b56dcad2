/*
 * control.c — see control.h. The control plane as ZeroMQ ROUTER (orchestrator) and DEALER
 * (stage) sockets carrying one frame of compact JSON per message.
 *
 * How it works:
 *  - One ZeroMQ context per process, created on first use and terminated when the last
 *    control socket closes; zmq_ctx_term is what makes the 1 s linger real (a process that
 *    just exits drops whatever its I/O thread had not sent yet, such as a "final" report).
 *    The context remembers the pid that made it: a forked child never touches its parent's
 *    context (libzmq forbids that) and makes its own if it needs one. The stages are exec'd,
 *    so in practice only the tests fork.
 *  - Every receive goes through zmq_poll with a deadline, so nothing here blocks past the
 *    caller's timeout. Messages are validated on receipt (size, JSON, object, string "type",
 *    one frame); bad ones are logged (the first few per socket) and dropped, and the wait goes
 *    on for a good one.
 *  - The server is a ROUTER with ROUTER_MANDATORY (sending to an unknown peer fails instead of
 *    vanishing) and ROUTER_HANDOVER (a restarted stage with the same id takes over its name).
 *  - CURVE: the key file holds the server keypair (see control.h). The server loads both keys;
 *    a client needs only the public line, and makes a fresh keypair of its own per connection.
 *    A file that holds a secret must be private to its owner, as ssh insists for its keys.
 *
 * A ctl_client or ctl_server is one ZeroMQ socket: use each from one thread at a time.
 */
#include "control.h"

#include "atomic_file.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum {
    LINGER_MS = 1000,
    /* Control traffic is a few messages a second per stage; this only bounds memory when a
     * peer stops reading. */
    HWM = 1000,
    /* Bad messages are logged this many times per socket, then only counted. */
    MALFORMED_LOG_LIMIT = 5,
    KEY_Z85_LEN = 40,
    /* A message past CTL_MAX_MESSAGE_BYTES is dropped by us, with a log line; one past this
     * much larger bound makes libzmq drop the connection before buffering it at all. */
    WIRE_MAX_BYTES = 4 * CTL_MAX_MESSAGE_BYTES,
};

struct ctl_client {
    void *sock;
    char *id;
    unsigned malformed;
};

struct ctl_server {
    void *sock;
    char *endpoint;
    unsigned malformed;
};

/* ---- the process's context ------------------------------------------------------------- */

/* The lock guards the context pointer and the socket count; the sections are tiny. */
static pthread_mutex_t ctx_mutex = PTHREAD_MUTEX_INITIALIZER;
static void *ctx;
static pid_t ctx_pid;
static int ctx_sockets;

static void ctx_lock(void) { pthread_mutex_lock(&ctx_mutex); }
static void ctx_unlock(void) { pthread_mutex_unlock(&ctx_mutex); }

/* A new socket of `type` on the process's context (made now if needed), or NULL. */
static void *ctx_socket(int type, char **err)
{
    ctx_lock();
    if (ctx && ctx_pid != getpid()) {
        /* A forked child: the parent's context belongs to the parent. Abandon it. */
        ctx = NULL;
        ctx_sockets = 0;
    }
    if (!ctx) {
        ctx = zmq_ctx_new();
        ctx_pid = getpid();
    }
    void *sock = ctx ? zmq_socket(ctx, type) : NULL;
    if (sock)
        ctx_sockets++;
    int e = errno;
    ctx_unlock();
    if (!sock)
        report_failure(err, "cannot create a ZeroMQ socket: %s", zmq_strerror(e));
    return sock;
}

/* Close a socket; the last one out terminates the context, which waits out the linger. */
static void ctx_close_socket(void *sock)
{
    if (!sock)
        return;
    zmq_close(sock);
    ctx_lock();
    void *term = NULL;
    if (ctx && ctx_pid == getpid() && --ctx_sockets == 0) {
        term = ctx;
        ctx = NULL;
    }
    ctx_unlock();
    while (term && zmq_ctx_term(term) < 0 && errno == EINTR)
        ;
}

/* ---- time ----------------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline, for zmq_poll: -1 waits forever, never below 0. */
static long time_left(int64_t deadline, int timeout_ms)
{
    if (timeout_ms < 0)
        return -1;
    int64_t left = deadline - now_ms();
    return left > 0 ? (long)left : 0;
}

/* ---- messages -------------------------------------------------------------------------------- */

json_t *ctl_msg(const char *type)
{
    return json_pack("{s:s}", "type", type);
}

static const char *msg_type(const json_t *msg)
{
    const json_t *t = json_is_object(msg) ? json_object_get(msg, "type") : NULL;
    return json_is_string(t) && json_string_length(t) > 0 ? json_string_value(t) : NULL;
}

/* Serialise a message for sending, consuming it; NULL (logged) if it breaks the protocol,
 * which is a bug in the caller rather than a network condition. */
static char *encode(json_t *msg, size_t *len)
{
    char *text = NULL;
    if (!msg_type(msg))
        log_error("control: not sending a message without a string \"type\"");
    else if (!(text = json_dumps(msg, JSON_COMPACT)))
        log_error("control: cannot serialise a \"%s\" message", msg_type(msg));
    else if ((*len = strlen(text)) > CTL_MAX_MESSAGE_BYTES) {
        log_error("control: \"%s\" message is %zu bytes, over the %d-byte limit", msg_type(msg), *len,
                  CTL_MAX_MESSAGE_BYTES);
        free(text);
        text = NULL;
    }
    json_decref(msg);
    return text;
}

/* Note a dropped message: logged the first few times per socket so that a confused or
 * hostile peer cannot flood the log, counted always. */
static void drop(unsigned *count, const char *from, const char *why)
{
    ++*count;
    if (*count <= MALFORMED_LOG_LIMIT)
        log_warn("control: dropped a malformed message from %s: %s%s", from, why,
                 *count == MALFORMED_LOG_LIMIT ? " (further ones are not logged)" : "");
    else
        log_debug("control: dropped a malformed message from %s: %s", from, why);
}

/* The message in one frame, or NULL (dropped, logged) when it breaks the protocol. */
static json_t *decode(const void *data, size_t len, const char *from, unsigned *malformed)
{
    if (len > CTL_MAX_MESSAGE_BYTES) {
        char why[64];
        snprintf(why, sizeof why, "%zu bytes, over the limit", len);
        drop(malformed, from, why);
        return NULL;
    }
    json_error_t jerr;
    json_t *msg = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        char *why = xasprintf("not JSON (%s)", jerr.text);
        drop(malformed, from, why);
        free(why);
        return NULL;
    }
    if (!msg_type(msg)) {
        drop(malformed, from, json_is_object(msg) ? "no string \"type\"" : "not a JSON object");
        json_decref(msg);
        return NULL;
    }
    return msg;
}

/* Receive the rest of a multi-part message and throw it away; returns the parts drained. */
static int drain(void *sock)
{
    int n = 0, more = 1;
    size_t more_len = sizeof more;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            break;
        }
        n++;
        zmq_msg_close(&part);
        if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &more_len) < 0)
            break;
    }
    return n;
}

/* Wait up to the deadline for the socket to be ready for `events`: 1 ready, 0 not (timeout,
 * or a signal interrupted the wait, so the caller can look at its flags), -1 error. */
static int wait_for(void *sock, short events, int64_t deadline, int timeout_ms)
{
    zmq_pollitem_t item = {.socket = sock, .events = events};
    int rc = zmq_poll(&item, 1, time_left(deadline, timeout_ms));
    if (rc < 0)
        return errno == EINTR ? 0 : -1;
    return rc > 0 && (item.revents & events);
}

/* ---- endpoints ------------------------------------------------------------------------------- */

/* Is a process listening on this Unix socket path? (libzmq would unlink it and steal the
 * name, leaving the other orchestrator deaf.) */
static bool ipc_in_use(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool used = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    return used;
}

/* Checks for an ipc:// endpoint before libzmq sees it, for errors people can act on: the
 * path must fit sun_path, and a server needs its directory and the name to itself. */
static int check_ipc(const char *endpoint, bool server, char **err)
{
    if (strncmp(endpoint, "ipc://", 6))
        return 0;
    const char *path = endpoint + 6;
    struct sockaddr_un sa;
    if (!*path)
        return report_failure(err, "control endpoint '%s' has no socket path", endpoint);
    if (!strcmp(path, "*"))
        return 0; /* libzmq picks a temporary name */
    if (strlen(path) >= sizeof sa.sun_path)
        return report_failure(err,
                              "control socket path is %zu bytes, but Unix sockets allow at most %zu: %s "
                              "(use a run directory with a shorter path, or a tcp:// endpoint)",
                              strlen(path), sizeof sa.sun_path - 1, path);
    if (!server || path[0] == '@') /* '@': Linux abstract namespace, no file */
        return 0;
    char *dir = path_dirname(path);
    int rc = *dir ? make_dirs(dir, 0700, err) : 0; /* run directories are private */
    free(dir);
    if (rc == 0 && ipc_in_use(path))
        rc = report_failure(err, "control socket %s is in use by another process", path);
    return rc;
}

/* ---- CURVE keys ------------------------------------------------------------------------------ */

typedef struct {
    char public_key[KEY_Z85_LEN + 1];
    char secret_key[KEY_Z85_LEN + 1];
} curve_keys;

static int need_curve(const char *path, char **err)
{
    if (!zmq_has("curve"))
        return report_failure(err,
                              "%s: CURVE encryption was requested, but this libzmq was built without it "
                              "(install a libzmq with libsodium, or leave CURVE_KEY_FILE empty)",
                              path);
    return 0;
}

/* A 40-character Z85 key that decodes to 32 bytes. */
static bool valid_z85_key(const char *s)
{
    uint8_t bin[32];
    return strlen(s) == KEY_Z85_LEN && zmq_z85_decode(bin, s) != NULL;
}

/* Parse "public KEY" / "secret KEY" lines (blank lines and # comments allowed) into k;
 * missing keys stay "". */
static int parse_keys(const char *path, char *text, curve_keys *k, char **err)
{
    int lineno = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        line[strcspn(line, "\r")] = '\0';
        char name[16], key[64], extra[2];
        int n = sscanf(line, " %15s %63s %1s", name, key, extra);
        if (n <= 0 || name[0] == '#')
            continue;
        char *dst = !strcmp(name, "public") ? k->public_key : !strcmp(name, "secret") ? k->secret_key : NULL;
        if (!dst || n != 2)
            return report_failure(err, "%s:%d: expected 'public KEY' or 'secret KEY'", path, lineno);
        if (!valid_z85_key(key))
            return report_failure(err, "%s:%d: the %s key is not a 40-character Z85 key", path, lineno, name);
        memcpy(dst, key, KEY_Z85_LEN + 1);
    }
    return 0;
}

/* Load a key file. The server needs the secret key; a file holding one must be readable by
 * its owner only. A file with just the public line (for client nodes) may be world-readable. */
static int load_keys(const char *path, bool need_secret, curve_keys *k, char **err)
{
    memset(k, 0, sizeof *k);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return report_failure(err, "cannot open CURVE key file %s: %s", path, strerror(errno));
    struct stat st;
    char buf[4096];
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    if (n < 0 || n == (ssize_t)sizeof buf - 1)
        return report_failure(err, "%s: not a readable CURVE key file (written by 'selfsup keygen')", path);
    buf[n] = '\0';
    int rc = parse_keys(path, buf, k, err);
    explicit_bzero(buf, sizeof buf);
    if (rc < 0)
        return -1;
    if (!k->public_key[0])
        return report_failure(err, "%s: no 'public' key line", path);
    if (need_secret && !k->secret_key[0])
        return report_failure(err, "%s: no 'secret' key line (the server needs the full keypair)", path);
    if (k->secret_key[0] && (st.st_mode & 077))
        return report_failure(err,
                              "%s: permissions %04o are too open; a file holding a secret key must not be "
                              "accessible by group or others (chmod 600 %s)",
                              path, (unsigned)(st.st_mode & 07777), path);
    if (k->secret_key[0]) {
        char derived[KEY_Z85_LEN + 1];
        if (zmq_curve_public(derived, k->secret_key) < 0 || strcmp(derived, k->public_key))
            return report_failure(err, "%s: the public and secret keys are not a pair", path);
    }
    return 0;
}

int ctl_keygen(const char *path, char **err)
{
    if (need_curve(path, err) < 0)
        return -1;
    curve_keys k;
    if (zmq_curve_keypair(k.public_key, k.secret_key) < 0)
        return report_failure(err, "cannot generate a CURVE keypair: %s", zmq_strerror(errno));
    char *text = xasprintf("public %s\nsecret %s\n", k.public_key, k.secret_key);
    explicit_bzero(&k, sizeof k);
    atomic_file f;
    int rc = atomic_file_open(&f, path, err);
    /* The temp file starts 0666 & ~umask; narrow it before the secret goes in. */
    if (rc == 0 && fchmod(f.fd, 0600) < 0)
        rc = report_failure(err, "%s: cannot set mode 0600: %s", path, strerror(errno));
    if (rc == 0)
        rc = atomic_file_write(&f, text, strlen(text), err);
    if (rc == 0)
        rc = atomic_file_commit(&f, err);
    atomic_file_abort(&f);
    explicit_bzero(text, strlen(text));
    free(text);
    return rc;
}

/* ---- sockets --------------------------------------------------------------------------------- */

static int set_int(void *sock, int option, int value)
{
    return zmq_setsockopt(sock, option, &value, sizeof value);
}

/* Options both ends share: bounded queues and message sizes, a short linger. */
static int set_common(void *sock)
{
    int64_t max = WIRE_MAX_BYTES;
    if (set_int(sock, ZMQ_LINGER, LINGER_MS) < 0 || set_int(sock, ZMQ_SNDHWM, HWM) < 0 ||
        set_int(sock, ZMQ_RCVHWM, HWM) < 0 || zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) < 0)
        return -1;
    return 0;
}

ctl_client *ctl_connect(const char *endpoint, const char *id, const char *curve_key_file, char **err)
{
    size_t id_len = id ? strlen(id) : 0;
    if (id_len == 0 || id_len > 255)
        return report_failure(err, "control peer id must be 1 to 255 characters"), NULL;
    if (!endpoint || !*endpoint)
        return report_failure(err, "no control endpoint given"), NULL;
    if (check_ipc(endpoint, false, err) < 0)
        return NULL;
    bool curve = curve_key_file && *curve_key_file;
    curve_keys server_keys, mine;
    if (curve && (need_curve(curve_key_file, err) < 0 || load_keys(curve_key_file, false, &server_keys, err) < 0))
        return NULL;
    void *sock = ctx_socket(ZMQ_DEALER, err);
    if (!sock)
        return NULL;
    const char *what = "set socket options";
    /* IMMEDIATE off: a hello sent before the connection is up waits in the queue. Reconnects
     * back off to 2 s so that a missing orchestrator is not hammered. */
    int rc = set_common(sock) | zmq_setsockopt(sock, ZMQ_ROUTING_ID, id, id_len) | set_int(sock, ZMQ_IMMEDIATE, 0) |
             set_int(sock, ZMQ_RECONNECT_IVL, 100) | set_int(sock, ZMQ_RECONNECT_IVL_MAX, 2000);
    if (rc == 0 && curve) {
        what = "set up CURVE";
        rc = zmq_curve_keypair(mine.public_key, mine.secret_key);
        rc = rc | zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_keys.public_key, KEY_Z85_LEN + 1) |
             zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, mine.public_key, KEY_Z85_LEN + 1) |
             zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, mine.secret_key, KEY_Z85_LEN + 1);
        explicit_bzero(&mine, sizeof mine);
        explicit_bzero(&server_keys, sizeof server_keys);
    }
    if (rc == 0 && (what = "connect", zmq_connect(sock, endpoint) < 0))
        rc = -1;
    if (rc != 0) {
        report_failure(err, "control endpoint %s: cannot %s: %s", endpoint, what, zmq_strerror(errno));
        ctx_close_socket(sock);
        return NULL;
    }
    ctl_client *c = xcalloc(1, sizeof *c);
    c->sock = sock;
    c->id = xstrdup(id);
    return c;
}

int ctl_send(ctl_client *c, json_t *msg, int timeout_ms)
{
    size_t len = 0;
    char *text = encode(msg, &len);
    if (!text)
        return -1;
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int rc = -1;
    if (wait_for(c->sock, ZMQ_POLLOUT, deadline, timeout_ms) > 0)
        rc = zmq_send(c->sock, text, len, ZMQ_DONTWAIT) < 0 ? -1 : 0;
    if (rc < 0)
        log_debug("control: %s could not send within %d ms", c->id, timeout_ms);
    free(text);
    return rc;
}

json_t *ctl_recv(ctl_client *c, int timeout_ms)
{
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    while (wait_for(c->sock, ZMQ_POLLIN, deadline, timeout_ms) > 0) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            continue;
        }
        json_t *msg = NULL;
        if (zmq_msg_more(&m)) {
            drain(c->sock);
            drop(&c->malformed, "the orchestrator", "more than one frame");
        } else
            msg = decode(zmq_msg_data(&m), zmq_msg_size(&m), "the orchestrator", &c->malformed);
        zmq_msg_close(&m);
        if (msg)
            return msg;
    }
    return NULL;
}

void *ctl_client_socket(ctl_client *c)
{
    return c->sock;
}

void ctl_close(ctl_client *c)
{
    if (!c)
        return;
    ctx_close_socket(c->sock);
    free(c->id);
    free(c);
}

/* ---- server ---------------------------------------------------------------------------------- */

ctl_server *ctl_bind(const char *endpoint, const char *curve_key_file, char **err)
{
    if (!endpoint || !*endpoint)
        return report_failure(err, "no control endpoint given"), NULL;
    if (check_ipc(endpoint, true, err) < 0)
        return NULL;
    bool curve = curve_key_file && *curve_key_file;
    curve_keys keys;
    if (curve && (need_curve(curve_key_file, err) < 0 || load_keys(curve_key_file, true, &keys, err) < 0))
        return NULL;
    void *sock = ctx_socket(ZMQ_ROUTER, err);
    if (!sock)
        return NULL;
    const char *what = "set socket options";
    int rc = set_common(sock) | set_int(sock, ZMQ_ROUTER_MANDATORY, 1) | set_int(sock, ZMQ_ROUTER_HANDOVER, 1);
    if (rc == 0 && curve) {
        what = "set up CURVE";
        rc = set_int(sock, ZMQ_CURVE_SERVER, 1) |
             zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, keys.secret_key, KEY_Z85_LEN + 1);
        explicit_bzero(&keys, sizeof keys);
    }
    if (rc == 0 && (what = "bind", zmq_bind(sock, endpoint) < 0))
        rc = -1;
    char bound[1024] = "";
    size_t bound_len = sizeof bound;
    if (rc == 0 && (what = "read the bound endpoint", zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &bound_len) < 0))
        rc = -1;
    if (rc != 0) {
        report_failure(err, "control endpoint %s: cannot %s: %s", endpoint, what, zmq_strerror(errno));
        ctx_close_socket(sock);
        return NULL;
    }
    ctl_server *s = xcalloc(1, sizeof *s);
    s->sock = sock;
    s->endpoint = xstrdup(bound);
    return s;
}

/* Peer ids are names such as "augment.2"; libzmq gives peers that set none a binary one. */
static bool printable_id(const zmq_msg_t *id)
{
    const unsigned char *p = zmq_msg_data((zmq_msg_t *)id);
    size_t n = zmq_msg_size((zmq_msg_t *)id);
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f)
            return false;
    return n > 0;
}

/* One message off the ROUTER, already known to be there: [peer id][JSON]. NULL if dropped.
 * A message is delivered whole or not at all, so a missing body frame cannot happen. */
static json_t *server_recv_one(ctl_server *s, char **peer)
{
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    json_t *msg = NULL;
    if (zmq_msg_recv(&id, s->sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&id) &&
        zmq_msg_recv(&body, s->sock, ZMQ_DONTWAIT) >= 0) {
        char *from = xstrndup(zmq_msg_data(&id), zmq_msg_size(&id));
        if (zmq_msg_more(&body)) {
            drain(s->sock);
            drop(&s->malformed, from, "more than one frame");
        } else if (!printable_id(&id)) {
            drop(&s->malformed, "a peer", "its id is not a printable name");
        } else {
            msg = decode(zmq_msg_data(&body), zmq_msg_size(&body), from, &s->malformed);
        }
        if (msg && peer)
            *peer = from;
        else
            free(from);
    }
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    return msg;
}

json_t *ctl_server_recv(ctl_server *s, int timeout_ms, char **peer)
{
    if (peer)
        *peer = NULL;
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    while (wait_for(s->sock, ZMQ_POLLIN, deadline, timeout_ms) > 0) {
        json_t *msg = server_recv_one(s, peer);
        if (msg)
            return msg;
    }
    return NULL;
}

int ctl_server_send(ctl_server *s, const char *peer, json_t *msg)
{
    size_t len = 0, id_len = peer ? strlen(peer) : 0;
    char *text = encode(msg, &len);
    if (!text)
        return -1;
    int rc = -1;
    /* With ROUTER_MANDATORY the id frame fails (EHOSTUNREACH) for an unknown or departed peer,
     * and (EAGAIN) for one whose queue is full; DONTWAIT keeps the orchestrator responsive. */
    if (id_len > 0 && id_len <= 255 && zmq_send(s->sock, peer, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
        rc = zmq_send(s->sock, text, len, ZMQ_DONTWAIT) < 0 ? -1 : 0;
    if (rc < 0)
        log_debug("control: cannot send to %s: %s", peer ? peer : "(null)", zmq_strerror(errno));
    free(text);
    return rc;
}

void *ctl_server_socket(ctl_server *s)
{
    return s->sock;
}

const char *ctl_server_endpoint(const ctl_server *s)
{
    return s->endpoint;
}

void ctl_server_close(ctl_server *s)
{
    if (!s)
        return;
    ctx_close_socket(s->sock);
    free(s->endpoint);
    free(s);
}

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
 *    vanishing). Clients choose random routing ids, which nobody can guess and take first; the
 *    server keeps a table from routing id to the name the connection's hello claimed. Names
 *    come from hellos, never from routing ids, so that a name can be checked against the key
 *    that claims it (the User-Id that the ZAP handler gives each message, auth.h) before the
 *    name routes anything: a peer cannot receive what is meant for another.
 *  - Endpoints: ipc:// in a private directory, or tcp:// with CURVE keys (auth.h); the server
 *    refuses anything else, so that a run is never reachable by other users.
 *
 * A ctl_client or ctl_server is one ZeroMQ socket: use each from one thread at a time.
 */
#include "control.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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
    /* Refused peers are logged once each, this many per server, then only counted. */
    REFUSED_LOG_LIMIT = 20,
    /* Refused connections are remembered (so as to log each once) up to this many. */
    PEERS_MAX = 4096,
    ROUTING_ID_BYTES = 16,
    /* A message past CTL_MAX_MESSAGE_BYTES is dropped by us, with a log line; one past this
     * much larger bound makes libzmq drop the connection before buffering it at all. */
    WIRE_MAX_BYTES = 4 * CTL_MAX_MESSAGE_BYTES,
};

struct ctl_client {
    void *sock;
    char *id;
    unsigned malformed;
};

/* A connection the server has heard from. */
typedef struct {
    uint8_t *rid;               /* its routing id */
    size_t rid_len;
    char *name;                 /* the id its hello claimed; NULL: refused, its messages dropped */
    char key[AUTH_KEY_LEN + 1]; /* its CURVE key ("" over ipc) */
} ctl_peer;

struct ctl_server {
    void *sock;
    char *endpoint;
    unsigned malformed, refused;
    auth_server *auth; /* tcp: the CURVE server's allow-list; NULL over ipc */
    ctl_peer *peers;
    int n_peers;
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

/* Close a socket and stop its authentication (whose ZAP handler is a socket of the context
 * too, so it must go first); the last one out terminates the context, which waits out the
 * linger. */
static void ctx_close_socket(void *sock, auth_server *auth)
{
    if (!sock)
        return;
    zmq_close(sock);
    auth_server_stop(auth);
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

/* The socket's directory must be ours alone: whoever can reach the socket is trusted. */
static int check_private_dir(const char *dir, char **err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return report_failure(err, "control socket directory %s: %s", dir, strerror(errno));
    if (st.st_uid != geteuid() || (st.st_mode & 077))
        return report_failure(err,
                              "control socket directory %s (mode %04o, owner uid %d) is open to other users, who "
                              "could then reach the control socket; use a directory of your own with mode 0700 "
                              "(chmod 700 %s), or a new run directory",
                              dir, (unsigned)(st.st_mode & 07777), (int)st.st_uid, dir);
    return 0;
}

/* Checks for an ipc:// endpoint before libzmq sees it, for errors people can act on: the
 * path must fit sun_path, and a server needs a private directory and the name to itself. */
static int check_ipc(const char *endpoint, bool server, char **err)
{
    const char *path = endpoint + 6;
    struct sockaddr_un sa;
    if (!*path)
        return report_failure(err, "control endpoint '%s' has no socket path", endpoint);
    if (!strcmp(path, "*"))
        return 0; /* libzmq picks a name in a fresh private directory */
    if (strlen(path) >= sizeof sa.sun_path)
        return report_failure(err,
                              "control socket path is %zu bytes, but Unix sockets allow at most %zu: %s "
                              "(use a run directory with a shorter path, or a tcp:// endpoint)",
                              strlen(path), sizeof sa.sun_path - 1, path);
    if (!server)
        return 0;
    if (path[0] == '@')
        return report_failure(err, "control endpoint '%s': an abstract Unix socket is open to every user on the "
                                   "machine; use a socket path in a private directory",
                              endpoint);
    char *dir = path_dirname(path);
    int rc = *dir ? make_dirs(dir, 0700, err) : 0; /* run directories are private */
    if (rc == 0)
        rc = check_private_dir(*dir ? dir : ".", err);
    free(dir);
    if (rc == 0 && ipc_in_use(path))
        rc = report_failure(err, "control socket %s is in use by another process", path);
    return rc;
}

/* ipc or tcp, the two endpoints whose peers can be limited to ours; refuses the others. */
static int check_endpoint(const char *endpoint, bool server, bool *tcp, char **err)
{
    *tcp = endpoint && !strncmp(endpoint, "tcp://", 6);
    if (!endpoint || !*endpoint)
        return report_failure(err, "no control endpoint given");
    if (!strncmp(endpoint, "ipc://", 6))
        return check_ipc(endpoint, server, err);
    if (!*tcp)
        return report_failure(err, "control endpoint '%s': expected ipc://PATH or tcp://HOST:PORT", endpoint);
    return auth_need_curve(endpoint, err);
}

/* The refusal of a tcp endpoint without keys: plain-text tcp would admit anyone. */
static int keys_required(const char *endpoint, const char *what, char **err)
{
    return report_failure(err,
                          "control endpoint %s is tcp, which needs CURVE keys (%s): make them with 'selfsup keygen "
                          "DIR --clients NAME:IDS ...' (see 'selfsup keygen --help')",
                          endpoint, what);
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

/* A routing id nobody can predict, so that no other connection can take it first (a ROUTER
 * ignores a connection whose routing id is in use). The first byte is never 0: libzmq
 * reserves those ids for the ones it makes. */
static int random_routing_id(uint8_t id[ROUTING_ID_BYTES], char **err)
{
    if (getrandom(id, ROUTING_ID_BYTES, 0) != ROUTING_ID_BYTES)
        return report_failure(err, "cannot make a routing id: getrandom: %s", strerror(errno));
    id[0] |= 1;
    return 0;
}

/* Options of a stage's DEALER. IMMEDIATE off: a hello sent before the connection is up
 * waits in the queue. Reconnects back off to 2 s so that a missing orchestrator is not
 * hammered. */
static int client_options(void *sock, const auth_keys *keys, char **err)
{
    uint8_t rid[ROUTING_ID_BYTES];
    if (random_routing_id(rid, err) < 0)
        return -1;
    if (set_common(sock) | zmq_setsockopt(sock, ZMQ_ROUTING_ID, rid, sizeof rid) | set_int(sock, ZMQ_IMMEDIATE, 0) |
        set_int(sock, ZMQ_RECONNECT_IVL, 100) | set_int(sock, ZMQ_RECONNECT_IVL_MAX, 2000))
        return report_failure(err, "cannot set socket options: %s", zmq_strerror(errno));
    return keys ? auth_client_setup(sock, keys, err) : 0;
}

ctl_client *ctl_connect(const char *endpoint, const char *id, const char *key_file, char **err)
{
    size_t id_len = id ? strlen(id) : 0;
    bool tcp;
    if (id_len == 0 || id_len > 255)
        return report_failure(err, "control peer id must be 1 to 255 characters"), NULL;
    if (check_endpoint(endpoint, false, &tcp, err) < 0)
        return NULL;
    if (tcp && (!key_file || !*key_file))
        return keys_required(endpoint, "this stage's key file, SELFSUP.CONTROL.CLIENT_KEY_FILE", err), NULL;
    auth_keys keys;
    if (tcp && auth_load_keys(key_file, AUTH_CLIENT, &keys, err) < 0)
        return NULL;
    void *sock = ctx_socket(ZMQ_DEALER, err);
    char *why = NULL;
    int rc = sock ? client_options(sock, tcp ? &keys : NULL, &why) : -1;
    if (tcp)
        auth_wipe(&keys);
    if (rc == 0 && zmq_connect(sock, endpoint) < 0)
        rc = report_failure(&why, "cannot connect: %s", zmq_strerror(errno));
    if (rc != 0) {
        if (sock)
            report_failure(err, "control endpoint %s: %s", endpoint, why);
        free(why);
        ctx_close_socket(sock, NULL);
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
    ctx_close_socket(c->sock, NULL);
    free(c->id);
    free(c);
}

/* ---- server ---------------------------------------------------------------------------------- */

static void *ctx_current(void)
{
    ctx_lock();
    void *c = ctx;
    ctx_unlock();
    return c;
}

/* Bind a ROUTER at endpoint: a CURVE server admitting `allow` when keys are given. */
static ctl_server *bind_server(const char *endpoint, const auth_keys *keys, const auth_allow *allow, char **err)
{
    void *sock = ctx_socket(ZMQ_ROUTER, err);
    if (!sock)
        return NULL;
    ctl_server *s = xcalloc(1, sizeof *s);
    s->sock = sock;
    char *why = NULL, *what = xasprintf("control endpoint %s", endpoint);
    char bound[1024] = "";
    size_t bound_len = sizeof bound;
    int rc = set_common(sock) | set_int(sock, ZMQ_ROUTER_MANDATORY, 1);
    if (rc != 0)
        report_failure(&why, "cannot set socket options: %s", zmq_strerror(errno));
    else if (keys && !(s->auth = auth_server_start(ctx_current(), sock, keys, allow, what, &why)))
        rc = -1;
    else if (zmq_bind(sock, endpoint) < 0 || zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &bound_len) < 0)
        rc = report_failure(&why, "cannot bind: %s", zmq_strerror(errno));
    free(what);
    if (rc != 0) {
        report_failure(err, "control endpoint %s: %s", endpoint, why);
        free(why);
        ctl_server_close(s);
        return NULL;
    }
    s->endpoint = xstrdup(bound);
    return s;
}

ctl_server *ctl_bind(const char *endpoint, const char *keys_dir, char **err)
{
    bool tcp;
    if (check_endpoint(endpoint, true, &tcp, err) < 0)
        return NULL;
    if (!tcp)
        return bind_server(endpoint, NULL, NULL, err);
    if (!keys_dir || !*keys_dir)
        return keys_required(endpoint, "the server's key directory, SELFSUP.CONTROL.SERVER_KEYS_DIR", err), NULL;
    auth_keys keys;
    auth_allow allow = {0};
    ctl_server *s = NULL;
    if (auth_load_server_dir(keys_dir, &keys, &allow, err) == 0)
        s = bind_server(endpoint, &keys, &allow, err);
    auth_wipe(&keys);
    auth_allow_free(&allow);
    return s;
}

ctl_server *ctl_bind_keys(const char *endpoint, const auth_keys *keys, const auth_allow *allow, char **err)
{
    bool tcp;
    if (check_endpoint(endpoint, true, &tcp, err) < 0)
        return NULL;
    if (tcp && (!keys || !allow || allow->n == 0))
        return keys_required(endpoint, "a keypair and an allow-list of clients", err), NULL;
    return bind_server(endpoint, tcp ? keys : NULL, allow, err);
}

/* ---- the peers' names ------------------------------------------------------------------------ */

static ctl_peer *peer_by_rid(ctl_server *s, zmq_msg_t *rid)
{
    for (int i = 0; i < s->n_peers; i++)
        if (s->peers[i].rid_len == zmq_msg_size(rid) && !memcmp(s->peers[i].rid, zmq_msg_data(rid), s->peers[i].rid_len))
            return &s->peers[i];
    return NULL;
}

static ctl_peer *peer_by_name(ctl_server *s, const char *name)
{
    for (int i = 0; i < s->n_peers; i++)
        if (s->peers[i].name && !strcmp(s->peers[i].name, name))
            return &s->peers[i];
    return NULL;
}

/* A new, unnamed entry for a connection. A full table forgets its oldest refused entry (that
 * connection's messages would then be refused, and logged, once more). */
static ctl_peer *add_peer(ctl_server *s, zmq_msg_t *rid)
{
    for (int i = 0; s->n_peers >= PEERS_MAX && i < s->n_peers; i++)
        if (!s->peers[i].name) {
            free(s->peers[i].rid);
            memmove(&s->peers[i], &s->peers[i + 1], (size_t)(s->n_peers - i - 1) * sizeof *s->peers);
            s->n_peers--;
        }
    s->peers = xrealloc(s->peers, (size_t)(s->n_peers + 1) * sizeof *s->peers);
    ctl_peer *p = &s->peers[s->n_peers++];
    *p = (ctl_peer){.rid = xmalloc(zmq_msg_size(rid) + 1), .rid_len = zmq_msg_size(rid)};
    memcpy(p->rid, zmq_msg_data(rid), p->rid_len);
    return p;
}

/* Refuse a connection: its messages are dropped from now on, and this is said once. */
static ctl_peer *refuse(ctl_server *s, ctl_peer *p, const char *address, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ctl_peer *refuse(ctl_server *s, ctl_peer *p, const char *address, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char why[512];
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (++s->refused <= REFUSED_LOG_LIMIT)
        log_warn("control: refused a peer%s%s: %s%s", address && *address ? " at " : "", address ? address : "",
                 why, s->refused == REFUSED_LOG_LIMIT ? " (further refusals are not logged)" : "");
    else
        log_debug("control: refused a peer: %s", why);
    return p;
}

/* An id: 1 to 255 printable characters. */
static bool valid_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return false;
    return n > 0 && n <= 255;
}

/* The first message of a connection: a hello that names it, with an id its key may claim,
 * and that no other key holds. Returns its entry, named unless refused. */
static ctl_peer *greet(ctl_server *s, zmq_msg_t *rid, const json_t *msg, const char *user, const char *key,
                   const char *address)
{
    ctl_peer *p = add_peer(s, rid);
    const char *type = msg_type(msg), *name = json_string_value(json_object_get(msg, "id"));
    if (strcmp(type, "hello"))
        return refuse(s, p, address, "it sent '%s' before its hello", type);
    if (!valid_name(name))
        return refuse(s, p, address, "its hello has no \"id\" of 1 to 255 printable characters");
    if (s->auth && !(user && auth_ids_match(user, name)))
        return refuse(s, p, address, "its key %s may not claim the id '%s' (the allow-list gives it '%s')",
                      key ? key : "?", name, user ? user : "");
    ctl_peer *holder = peer_by_name(s, name);
    if (holder && s->auth && strcmp(holder->key, key ? key : ""))
        return refuse(s, p, address, "the id '%s' belongs to a connection with another key", name);
    if (holder) { /* a restarted stage takes its name over; the old connection is ignored */
        free(holder->name);
        holder->name = NULL;
    }
    p->name = xstrdup(name);
    snprintf(p->key, sizeof p->key, "%s", key ? key : "");
    return p;
}

/* A later message of a named connection: its key still allows the name (the check is per
 * message, whatever the handshake said), and a repeated hello repeats the name. */
static bool check_message(ctl_server *s, const ctl_peer *p, const json_t *msg, const char *user)
{
    const char *hello_id = json_string_value(json_object_get(msg, "id"));
    if (s->auth && !(user && auth_ids_match(user, p->name))) {
        drop(&s->malformed, p->name, "its key may not use this id");
        return false;
    }
    if (!strcmp(msg_type(msg), "hello") && (!hello_id || strcmp(hello_id, p->name))) {
        drop(&s->malformed, p->name, "a second hello under another id");
        return false;
    }
    return true;
}

/* A message's body, from the connection rid: the message if it is valid and its connection
 * is named (*peer gets the name), else NULL (dropped). */
static json_t *accept_message(ctl_server *s, zmq_msg_t *rid, zmq_msg_t *body, char **peer_out)
{
    ctl_peer *p = peer_by_rid(s, rid);
    if (p && !p->name)
        return NULL; /* refused before, and said so then */
    json_t *msg = decode(zmq_msg_data(body), zmq_msg_size(body), p ? p->name : "a peer without a hello",
                         &s->malformed);
    if (!msg)
        return NULL;
    const char *user = zmq_msg_gets(body, "User-Id"), *key = zmq_msg_gets(body, AUTH_KEY_PROPERTY);
    if (!p)
        p = greet(s, rid, msg, user, key, zmq_msg_gets(body, "Peer-Address"));
    else if (!check_message(s, p, msg, user))
        p = NULL;
    if (!p || !p->name) {
        json_decref(msg);
        return NULL;
    }
    if (peer_out)
        *peer_out = xstrdup(p->name);
    return msg;
}

/* One message off the ROUTER, already known to be there: [routing id][JSON]. NULL if
 * dropped. A message is delivered whole or not at all, so a missing body cannot happen. */
static json_t *server_recv_one(ctl_server *s, char **peer_out)
{
    zmq_msg_t rid, body;
    zmq_msg_init(&rid);
    zmq_msg_init(&body);
    json_t *msg = NULL;
    if (zmq_msg_recv(&rid, s->sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&rid) &&
        zmq_msg_recv(&body, s->sock, ZMQ_DONTWAIT) >= 0) {
        if (zmq_msg_more(&body)) {
            const ctl_peer *p = peer_by_rid(s, &rid);
            drain(s->sock);
            drop(&s->malformed, p && p->name ? p->name : "a peer", "more than one frame");
        } else {
            msg = accept_message(s, &rid, &body, peer_out);
        }
    }
    zmq_msg_close(&rid);
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

int ctl_server_send(ctl_server *s, const char *name, json_t *msg)
{
    size_t len = 0;
    char *text = encode(msg, &len);
    if (!text)
        return -1;
    const ctl_peer *p = name ? peer_by_name(s, name) : NULL;
    int rc = -1;
    errno = EHOSTUNREACH;
    /* With ROUTER_MANDATORY the id frame fails (EHOSTUNREACH) for a departed peer, and
     * (EAGAIN) for one whose queue is full; DONTWAIT keeps the orchestrator responsive. */
    if (p && zmq_send(s->sock, p->rid, p->rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
        rc = zmq_send(s->sock, text, len, ZMQ_DONTWAIT) < 0 ? -1 : 0;
    if (rc < 0)
        log_debug("control: cannot send to %s: %s", name ? name : "(null)", zmq_strerror(errno));
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
    ctx_close_socket(s->sock, s->auth);
    for (int i = 0; i < s->n_peers; i++) {
        free(s->peers[i].rid);
        free(s->peers[i].name);
    }
    free(s->peers);
    free(s->endpoint);
    free(s);
}

/*
 * transport.c — the four ways records travel (see transport.h): shm rings, stdin/stdout
 * pipes, record files and ZeroMQ PUSH/PULL.
 *
 * Each scheme fills in the same struct: a ring and its claimed slot (shm:), a file descriptor
 * and buffers (-, file:), or a ZeroMQ socket (tcp://). The public functions switch on the
 * scheme; there is no vtable because four small cases read more plainly than one.
 *
 * Byte streams carry records back to back, each self-delimiting (its header holds its size),
 * and end with a REC_EOS record that counts the data records before it and says whether the
 * writer finished or was stopped (record.h). A reader that meets the end of the bytes before
 * that record, an end marked stopped, a count that is not what arrived, or bytes after the end
 * reports the stream as broken: a short stream never passes for a whole one. After the end
 * record a regular file must end at once; a pipe must be closed by its writer, which a stage
 * does as it exits, so its reader waits for that (in slices, like for a record). A ring has no
 * EOS record (it delivers each record to one of several readers): a stopped writer marks the
 * ring stopped instead (ring_stop), and a dead one is found by the ring's crash detection.
 *
 * ZeroMQ hides connections, so a tcp reader watches its socket's monitor: when every writer
 * that joined has left and some end-of-stream records are still owed, the writers died (or
 * lost the network) and, after TCP_GONE_GRACE_S for a reconnection, the read fails instead of
 * waiting forever. A tcp writer waits in slices too (TP_TIMEOUT from tp_write_end), so a
 * signal stops a writer whose reader is gone.
 */
#include "transport.h"

#include "atomic_file.h"
#include "auth.h"
#include "log.h"
#include "ring.h"
#include "timer.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define TCP_LINGER_MS 30000
#define OPEN_LINGER_MS 1000 /* an ?open writer's close: its reader counts no EOS */
#define TCP_STOP_LINGER_MS 1000 /* a stopped writer tries this long to deliver its EOS */
#define TCP_GONE_GRACE_S 2.0    /* how long every writer may be gone before that is an error */

typedef enum { SCHEME_SHM, SCHEME_PIPE, SCHEME_FILE, SCHEME_TCP } scheme;

struct transport {
    scheme kind;
    tp_direction dir;
    char *uri;
    char error[1024];
    bool ended; /* reader: saw the end; writer: sent it */
    bool peer_failed; /* the last error came from the other side: a broken ring, a cut stream */

    /* shm: */
    ring *ring;
    ring_slot slot;
    bool claimed;

    /* -, file:, tcp: the record being read or written */
    rec_buf buf;
    uint64_t offset;     /* bytes read so far (for error messages) */
    int fd;
    atomic_file out_file; /* file: writer */
    bool out_file_open;

    /* -, file:, tcp: what a writer has sent and a reader has received, for the EOS check */
    uint64_t sent;        /* writer: data records */
    rec_stream stream;    /* reader of -, file: */
    bool end_record;      /* reader of -, file: the end-of-stream record came; the bytes must end */
    bool peer_stopped;    /* the last error: the writer was stopped, not broken */

    /* tcp: */
    void *zsock;
    auth_server *auth;    /* reader: the CURVE server's allow-list */
    uint32_t producers;   /* EOS records to wait for */
    uint32_t eos_seen;
    uint64_t eos_records; /* the records those EOS records say were sent */
    uint64_t received;    /* data records received */
    void *zmon;           /* reader: events of zsock (writers joining and leaving) */
    int joined, left;     /* writers that completed the handshake; disconnections of those */
    double all_gone_at;   /* when every writer was found gone with EOS owed (0: not so) */
    bool open;            /* reader of ?open: writers come and go, their EOS records end nothing */
};

/* One ZeroMQ context for this process's tcp transports, ended when the last of them closes:
 * ending it is what makes a closing writer deliver what it still has queued (the linger). */
static void *zmq_ctx;
static int zmq_sockets;

static void *zmq_socket_open(int type)
{
    if (!zmq_ctx)
        zmq_ctx = zmq_ctx_new();
    void *sock = zmq_ctx ? zmq_socket(zmq_ctx, type) : NULL;
    zmq_sockets += sock != NULL;
    return sock;
}

static void zmq_socket_close(void *sock)
{
    zmq_close(sock);
    if (--zmq_sockets == 0) {
        zmq_ctx_term(zmq_ctx); /* waits up to each socket's linger for queued records */
        zmq_ctx = NULL;
    }
}

static void set_error(transport *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(transport *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
}

/* Take a malloc'd message from the record/ring modules into t->error. */
static tp_status fail_with(transport *t, char *msg)
{
    set_error(t, "%s: %s", t->uri, msg ? msg : "unknown error");
    free(msg);
    return TP_ERROR;
}

/* ---- URIs ------------------------------------------------------------------------------- */

typedef struct {
    scheme kind;
    char *target;      /* ring name, file path, or tcp://host:port without the query */
    uint32_t producers; /* from ?producers=N, 0 when absent */
    bool open;          /* ?open: a tcp stream whose reader decides when it ends */
} parsed_uri;

static int parse_query(const char *q, parsed_uri *p, char **err)
{
    if (!strcmp(q, "open")) {
        p->open = true;
        return 0;
    }
    if (strncmp(q, "producers=", 10) != 0)
        return report_failure(err, "unknown URI option '%s' (known: producers=N, open)", q);
    char *end;
    errno = 0;
    unsigned long n = strtoul(q + 10, &end, 10);
    if (errno || *end || n < 1 || n > 4096 || q[10] == '-')
        return report_failure(err, "producers=%s: expected a count from 1 to 4096", q + 10);
    p->producers = (uint32_t)n;
    return 0;
}

static bool ring_name_ok(const char *name)
{
    if (!*name || strlen(name) > 200)
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return false;
    return true;
}

static int parse_uri(const char *uri, parsed_uri *p, char **err)
{
    memset(p, 0, sizeof *p);
    if (!strcmp(uri, "-")) {
        p->kind = SCHEME_PIPE;
        p->target = xstrdup("-");
        return 0;
    }
    if (!strncmp(uri, "file:", 5)) {
        if (!uri[5])
            return report_failure(err, "'%s': file: needs a path (file:PATH)", uri);
        p->kind = SCHEME_FILE;
        p->target = xstrdup(uri + 5);
        return 0;
    }
    const char *q = strchr(uri, '?');
    size_t base_len = q ? (size_t)(q - uri) : strlen(uri);
    if (q && parse_query(q + 1, p, err) != 0)
        return -1;
    if (p->open && strncmp(uri, "tcp://", 6) != 0)
        return report_failure(err, "'%s': ?open is for tcp:// streams", uri);
    if (!strncmp(uri, "shm:", 4)) {
        p->kind = SCHEME_SHM;
        p->target = xstrndup(uri + 4, base_len - 4);
        if (!ring_name_ok(p->target)) {
            free(p->target);
            return report_failure(err, "'%s': a ring name is letters, digits, '.', '_' and '-'", uri);
        }
        return 0;
    }
    if (!strncmp(uri, "tcp://", 6)) {
        p->kind = SCHEME_TCP;
        p->target = xstrndup(uri, base_len);
        const char *colon = strrchr(p->target + 6, ':');
        if (!colon || colon == p->target + 6 || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
            free(p->target);
            return report_failure(err, "'%s': expected tcp://HOST:PORT", uri);
        }
        return 0;
    }
    return report_failure(err, "'%s': unknown transport; use shm:NAME, -, file:PATH or tcp://HOST:PORT", uri);
}

int tp_check_uri(const char *uri, char **err)
{
    parsed_uri p;
    if (parse_uri(uri, &p, err) != 0)
        return -1;
    free(p.target);
    return 0;
}

/* ---- opening ---------------------------------------------------------------------------- */

static int open_shm(transport *t, const parsed_uri *p, const tp_options *opt, char **err)
{
    if (t->dir == TP_IN) {
        t->ring = ring_attach(p->target, RING_CONSUMER, opt->attach_wait_ms, err);
        return t->ring ? 0 : -1;
    }
    /* A writer makes the ring when it is first; attaching again covers the race with a
     * second writer creating it at the same moment. */
    char *attach_err = NULL, *create_err = NULL;
    t->ring = ring_attach(p->target, RING_PRODUCER, 0, &attach_err);
    free(attach_err);
    attach_err = NULL;
    if (t->ring)
        return 0;
    ring_geometry geo = {
        .slot_bytes = opt->slot_bytes,
        .n_slots = opt->depth ? opt->depth : 8,
        .n_producers = p->producers ? p->producers : (opt->producers ? opt->producers : 1),
    };
    t->ring = ring_create(p->target, &geo, RING_PRODUCER, &create_err);
    if (!t->ring) /* lost the race to another writer, or a real failure: tell which */
        t->ring = ring_attach(p->target, RING_PRODUCER, 1000, &attach_err);
    free(attach_err);
    if (!t->ring && err)
        *err = create_err, create_err = NULL;
    free(create_err);
    return t->ring ? 0 : -1;
}

static int open_fd(transport *t, const parsed_uri *p, char **err)
{
    if (t->kind == SCHEME_PIPE) {
        t->fd = t->dir == TP_IN ? STDIN_FILENO : STDOUT_FILENO;
        return 0;
    }
    struct stat st;
    if (t->dir == TP_OUT && stat(p->target, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* A device or a fifo (file:/dev/null, file:/dev/stdout): write to it as it is. */
        t->fd = open(p->target, O_WRONLY | O_CLOEXEC);
        if (t->fd < 0)
            return report_failure(err, "%s: %s", p->target, strerror(errno));
        return 0;
    }
    if (t->dir == TP_OUT) {
        /* Through a temp name: a cache that a crash cut short never takes the real name. */
        if (atomic_file_open(&t->out_file, p->target, err) != 0)
            return -1;
        t->out_file_open = true;
        t->fd = t->out_file.fd;
        return 0;
    }
    t->fd = open(p->target, O_RDONLY | O_CLOEXEC);
    if (t->fd < 0)
        return report_failure(err, "%s: %s", p->target, strerror(errno));
    return 0;
}

/* CURVE for a tcp socket, before it binds or connects: a reader is a server admitting the
 * writers of its allow-list, a writer a client trusting the reader's key. No keys, no tcp. */
static int setup_curve(transport *t, const tp_options *opt, char **err)
{
    bool reader = t->dir == TP_IN;
    const char *path = reader ? opt->server_keys_dir : opt->client_key_file;
    if (!path || !*path)
        return report_failure(err, "%s: a tcp %s needs CURVE keys (%s), for plain tcp would take records from "
                                   "anyone: make them with 'selfsup keygen DIR --clients NAME ...'",
                              t->uri, reader ? "reader" : "writer",
                              reader ? "SELFSUP.TRANSPORT.SERVER_KEYS_DIR" : "SELFSUP.TRANSPORT.CLIENT_KEY_FILE");
    auth_keys keys;
    auth_allow allow = {0};
    int rc = reader ? auth_load_server_dir(path, &keys, &allow, err) : auth_load_keys(path, AUTH_CLIENT, &keys, err);
    if (rc == 0 && reader && !(t->auth = auth_server_start(zmq_ctx, t->zsock, &keys, &allow, t->uri, err)))
        rc = -1;
    if (rc == 0 && !reader)
        rc = auth_client_setup(t->zsock, &keys, err);
    auth_wipe(&keys);
    auth_allow_free(&allow);
    return rc;
}

static int open_tcp(transport *t, const parsed_uri *p, const tp_options *opt, char **err)
{
    t->zsock = zmq_socket_open(t->dir == TP_IN ? ZMQ_PULL : ZMQ_PUSH);
    if (!t->zsock)
        return report_failure(err, "%s: zmq_socket: %s", t->uri, zmq_strerror(zmq_errno()));
    int hwm = opt->depth ? (int)opt->depth : 8;
    /* A closing writer delivers what it queued, EOS included, unless the reader is gone
     * for this long. */
    int linger = TCP_LINGER_MS;
    zmq_setsockopt(t->zsock, t->dir == TP_IN ? ZMQ_RCVHWM : ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(t->zsock, ZMQ_LINGER, &linger, sizeof linger);
    int64_t max_msg = (int64_t)(opt->slot_bytes ? opt->slot_bytes : REC_MAX_BYTES);
    if (t->dir == TP_IN)
        zmq_setsockopt(t->zsock, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    if (setup_curve(t, opt, err) != 0)
        return -1;
    int rc = t->dir == TP_IN ? zmq_bind(t->zsock, p->target) : zmq_connect(t->zsock, p->target);
    if (rc != 0)
        return report_failure(err, "%s: cannot %s: %s", t->uri, t->dir == TP_IN ? "bind" : "connect",
                              zmq_strerror(zmq_errno()));
    t->producers = p->producers ? p->producers : (opt->producers ? opt->producers : 1);
    t->open = p->open;
    return 0;
}

/* A tcp reader's view of its writers: the socket monitor's handshake and disconnect events.
 * A peer refused at the handshake (a stranger) shows up as a failed handshake followed by a
 * disconnect, and does not count as a writer. */
#define WATCHED_EVENTS                                                                                        \
    (ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |           \
     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

static int watch_writers(transport *t, char **err)
{
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "inproc://selfsup-tp-monitor-%p", (void *)t);
    if (zmq_socket_monitor(t->zsock, endpoint, WATCHED_EVENTS) != 0 || !(t->zmon = zmq_socket_open(ZMQ_PAIR)) ||
        zmq_connect(t->zmon, endpoint) != 0)
        return report_failure(err, "%s: cannot watch the connections: %s", t->uri, zmq_strerror(zmq_errno()));
    return 0;
}

/* Take the monitor's pending events into joined / left. */
static void drain_monitor(transport *t)
{
    int failed = 0;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, t->zmon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&m) >= sizeof event)
            memcpy(&event, zmq_msg_data(&m), sizeof event);
        bool more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        if (more) { /* the second frame: the endpoint, not needed */
            zmq_msg_init(&m);
            zmq_msg_recv(&m, t->zmon, 0);
            zmq_msg_close(&m);
        }
        t->joined += event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
        t->left += event == ZMQ_EVENT_DISCONNECTED;
        failed += event != ZMQ_EVENT_HANDSHAKE_SUCCEEDED && event != ZMQ_EVENT_DISCONNECTED;
    }
    t->left -= failed; /* a failed handshake's disconnect was no writer's */
}

/* Every writer that joined has left, still owing end-of-stream records, for longer than a
 * reconnection takes: they will not come. Called when nothing is left to read. (For an ?open
 * writer the same events watch its reader: gone, the writer has nobody left to write to.) */
static bool writers_gone(transport *t)
{
    drain_monitor(t);
    if (t->joined == 0 || t->joined > t->left) {
        t->all_gone_at = 0;
        return false;
    }
    double now = now_seconds();
    if (t->all_gone_at == 0)
        t->all_gone_at = now;
    return now - t->all_gone_at >= TCP_GONE_GRACE_S;
}

transport *tp_open(const char *uri, tp_direction dir, const tp_options *opt, char **err)
{
    parsed_uri p;
    if (parse_uri(uri, &p, err) != 0)
        return NULL;
    transport *t = xcalloc(1, sizeof *t);
    t->kind = p.kind;
    t->dir = dir;
    t->uri = xstrdup(uri);
    t->fd = -1;
    int rc;
    switch (p.kind) {
    case SCHEME_SHM: rc = open_shm(t, &p, opt, err); break;
    case SCHEME_TCP:
        rc = open_tcp(t, &p, opt, err);
        if (rc == 0 && (dir == TP_IN || t->open))
            rc = watch_writers(t, err);
        break;
    default: rc = open_fd(t, &p, err); break;
    }
    if (rc == 0 && dir == TP_OUT && p.kind != SCHEME_SHM) {
        t->buf.cap = opt->slot_bytes ? opt->slot_bytes : (size_t)64 << 20;
        t->buf.data = xmalloc_large(t->buf.cap);
    }
    free(p.target);
    if (rc != 0) {
        tp_abandon(t);
        return NULL;
    }
    return t;
}

/* ---- reading ---------------------------------------------------------------------------- */

/* Wait until fd is readable, so that a stage blocked on a quiet pipe can still heartbeat. */
static tp_status wait_readable(transport *t, int timeout_ms)
{
    struct pollfd pfd = {.fd = t->fd, .events = POLLIN};
    int n = poll(&pfd, 1, timeout_ms);
    if (n == 0 || (n < 0 && errno == EINTR))
        return TP_TIMEOUT;
    if (n < 0) {
        set_error(t, "%s: poll: %s", t->uri, strerror(errno));
        return TP_ERROR;
    }
    return TP_OK;
}

/* A writer's stream is short or spoiled: the cause is the writer (or what stopped it). */
static tp_status peer_error(transport *t, char *msg, bool stopped)
{
    t->peer_failed = true;
    t->peer_stopped = stopped;
    set_error(t, "%s", msg);
    free(msg);
    return TP_ERROR;
}

/* Bytes after the end-of-stream record: records that would be dropped unread (a second
 * stream appended to the first, or a writer that went on after its end). `count` is 0 when
 * the bytes are those of a pipe, whose remaining length is unknown. */
static tp_status bytes_follow(transport *t, uint64_t count)
{
    const char *what = t->kind == SCHEME_PIPE ? "stdin" : t->uri;
    unsigned long long at = (unsigned long long)(t->offset - REC_HEADER_BYTES);
    if (count)
        return peer_error(t, xasprintf("%s: %llu bytes follow the end-of-stream record at byte %llu; they would be "
                                       "dropped unread", what, (unsigned long long)count, at), false);
    return peer_error(t, xasprintf("%s: data follows the end-of-stream record at byte %llu; it would be dropped "
                                   "unread", what, at), false);
}

/* After the end-of-stream record the bytes must end too. A regular file (file:, or stdin
 * redirected from one) says where it ends; a pipe or fifo ends when its writer closes it,
 * which a stage does as it exits, right after its end record: until then this waits for at
 * most timeout_ms a call (TP_TIMEOUT), so that the stage keeps serving its control plane. */
static tp_status check_bytes_end(transport *t, int timeout_ms)
{
    struct stat st;
    if (fstat(t->fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t at = lseek(t->fd, 0, SEEK_CUR);
        if (at >= 0 && st.st_size > at)
            return bytes_follow(t, (uint64_t)(st.st_size - at));
        t->ended = true;
        return TP_EOS;
    }
    tp_status ready = wait_readable(t, timeout_ms);
    if (ready != TP_OK)
        return ready;
    char byte;
    ssize_t n = read(t->fd, &byte, 1);
    if (n == 0) {
        t->ended = true;
        return TP_EOS;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return TP_TIMEOUT;
    if (n < 0) {
        set_error(t, "%s: read: %s", t->kind == SCHEME_PIPE ? "stdin" : t->uri, strerror(errno));
        return TP_ERROR;
    }
    return bytes_follow(t, 0);
}

static tp_status after_stream_record(transport *t, rec_view *view)
{
    char *msg = NULL;
    if (rec_stream_note(&t->stream, view, t->kind == SCHEME_PIPE ? "stdin" : t->uri, &msg) != 0)
        return peer_error(t, msg, view->hdr->kind == REC_EOS && (view->hdr->flags & REC_EOS_STOPPED));
    if (view->hdr->kind == REC_EOS) {
        t->end_record = true;
        return check_bytes_end(t, 0);
    }
    return TP_OK;
}

static tp_status read_fd(transport *t, rec_view *view, int timeout_ms)
{
    if (t->end_record)
        return check_bytes_end(t, timeout_ms);
    if (t->kind == SCHEME_PIPE) {
        tp_status st = wait_readable(t, timeout_ms);
        if (st != TP_OK)
            return st;
    }
    char *msg = NULL;
    int rc = rec_fd_read(t->fd, &t->buf, view, &t->offset, &msg);
    if (rc < 0)
        return fail_with(t, msg);
    if (rc == 0) {
        t->peer_failed = true;
        set_error(t, "%s: the stream ended after %llu bytes without an end-of-stream record: the "
                     "stage writing it stopped early (see its error)",
                  t->kind == SCHEME_PIPE ? "stdin" : t->uri, (unsigned long long)t->offset);
        return TP_ERROR;
    }
    return after_stream_record(t, view);
}

static tp_status read_shm(transport *t, rec_view *view, int timeout_ms)
{
    for (;;) {
        ring_status st = ring_read_begin(t->ring, &t->slot, timeout_ms);
        if (st == RING_TIMEOUT)
            return TP_TIMEOUT;
        if (st == RING_EOS) {
            t->ended = true;
            return TP_EOS;
        }
        if (st != RING_OK) {
            t->peer_failed = true;
            t->peer_stopped = ring_stopped(t->ring);
            set_error(t, "%s: %s", t->uri, ring_error(t->ring));
            return TP_ERROR;
        }
        if (t->slot.len == 0) { /* a writer gave its slot back empty */
            ring_read_end(t->ring, &t->slot);
            continue;
        }
        t->claimed = true;
        char *msg = NULL;
        if (rec_parse(t->slot.data, t->slot.len, view, &msg) != 0)
            return fail_with(t, msg);
        return TP_OK;
    }
}

/* An end-of-stream record from one of the tcp writers: the stream ends at the last one, when
 * the records they say they sent must be the records that came. */
static tp_status tcp_eos(transport *t, const rec_view *view)
{
    const rec_header *h = view->hdr;
    if (t->open) /* a farm host that finished or was stopped: the others go on */
        return TP_TIMEOUT;
    if (h->flags & REC_EOS_STOPPED)
        return peer_error(t, xasprintf("%s: a stage writing it was stopped after %llu records (a signal or a stop "
                                       "request); the stream is incomplete", t->uri, (unsigned long long)h->seq), true);
    t->eos_records += h->seq;
    if (++t->eos_seen < t->producers)
        return TP_TIMEOUT;
    t->ended = true;
    if (t->eos_records != t->received)
        return peer_error(t, xasprintf("%s: the writers' end-of-stream records say %llu records were sent, but %llu "
                                       "arrived", t->uri, (unsigned long long)t->eos_records,
                                       (unsigned long long)t->received), false);
    return TP_EOS;
}

/* Nothing to read: fine, unless the writers are gone without ending their streams. */
static tp_status tcp_quiet(transport *t)
{
    if (t->open || !writers_gone(t))
        return TP_TIMEOUT;
    return peer_error(t, xasprintf("%s: every writer disconnected with %u of %u end-of-stream records sent and %llu "
                                   "records received: a writer died or lost the network", t->uri, t->eos_seen,
                                   t->producers, (unsigned long long)t->received), false);
}

/* One ZeroMQ message is one record. Payloads must be 64-byte aligned for the readers, and
 * ZeroMQ's buffers are not, so the message is copied into our aligned buffer. */
static tp_status read_tcp(transport *t, rec_view *view, int timeout_ms)
{
    for (;;) {
        zmq_pollitem_t item = {.socket = t->zsock, .events = ZMQ_POLLIN};
        int n = zmq_poll(&item, 1, timeout_ms);
        if (n == 0)
            return tcp_quiet(t);
        if (n < 0 && zmq_errno() == EINTR)
            return TP_TIMEOUT;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (n < 0 || zmq_msg_recv(&m, t->zsock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&m);
            if (e == EAGAIN || e == EINTR)
                return TP_TIMEOUT;
            set_error(t, "%s: receive: %s", t->uri, zmq_strerror(e));
            return TP_ERROR;
        }
        size_t len = zmq_msg_size(&m);
        if (len > t->buf.cap) {
            free(t->buf.data);
            t->buf.cap = (len + 4095) & ~(size_t)4095;
            t->buf.data = xmalloc_large(t->buf.cap);
        }
        memcpy(t->buf.data, zmq_msg_data(&m), len);
        zmq_msg_close(&m);
        char *msg = NULL;
        if (rec_parse(t->buf.data, len, view, &msg) != 0)
            return fail_with(t, msg);
        t->offset += len;
        if (view->hdr->kind != REC_EOS) {
            t->received++;
            return TP_OK;
        }
        tp_status st = tcp_eos(t, view);
        if (st != TP_TIMEOUT)
            return st;
    }
}

tp_status tp_read(transport *t, rec_view *view, int timeout_ms)
{
    if (t->ended)
        return TP_EOS;
    switch (t->kind) {
    case SCHEME_SHM: return read_shm(t, view, timeout_ms);
    case SCHEME_TCP: return read_tcp(t, view, timeout_ms);
    default: return read_fd(t, view, timeout_ms);
    }
}

void tp_read_done(transport *t)
{
    if (t->kind == SCHEME_SHM && t->claimed) {
        ring_read_end(t->ring, &t->slot);
        t->claimed = false;
    }
}

/* ---- writing ---------------------------------------------------------------------------- */

tp_status tp_write_begin(transport *t, void **buf, size_t *cap, int timeout_ms)
{
    if (t->kind != SCHEME_SHM) {
        *buf = t->buf.data;
        *cap = t->buf.cap;
        return TP_OK;
    }
    ring_status st = ring_write_begin(t->ring, &t->slot, timeout_ms);
    if (st == RING_TIMEOUT)
        return TP_TIMEOUT;
    if (st == RING_NO_READERS) {
        set_error(t, "%s: every reader of this ring has gone", t->uri);
        return TP_NO_READERS;
    }
    if (st != RING_OK) {
        t->peer_failed = true;
        set_error(t, "%s: %s", t->uri, ring_error(t->ring));
        return TP_ERROR;
    }
    t->claimed = true;
    *buf = t->slot.data;
    *cap = ring_slot_bytes(t->ring);
    return TP_OK;
}

/* Send when the socket takes it within timeout_ms (no reader, or readers full: TP_TIMEOUT, so
 * that the caller can heartbeat and notice a stop between tries). */
static tp_status send_tcp(transport *t, const void *data, size_t len, int timeout_ms)
{
    zmq_pollitem_t item = {.socket = t->zsock, .events = ZMQ_POLLOUT};
    int n = zmq_poll(&item, 1, timeout_ms);
    if (n == 0 || (n < 0 && zmq_errno() == EINTR))
        return TP_TIMEOUT;
    if (n > 0 && zmq_send(t->zsock, data, len, ZMQ_DONTWAIT) >= 0)
        return TP_OK;
    if (n > 0 && (zmq_errno() == EAGAIN || zmq_errno() == EINTR))
        return TP_TIMEOUT;
    set_error(t, "%s: send: %s", t->uri, zmq_strerror(zmq_errno()));
    return TP_ERROR;
}

/* An ?open writer (a farm host) whose reader left and did not come back: the trainer's side
 * has what it needs, or is gone; either way nothing more is to be sent. */
static tp_status send_tcp_open(transport *t, const void *data, size_t len, int timeout_ms)
{
    tp_status st = send_tcp(t, data, len, timeout_ms);
    if (st == TP_TIMEOUT && writers_gone(t)) {
        set_error(t, "%s: the reader has gone", t->uri);
        return TP_NO_READERS;
    }
    return st;
}

#define SEND_SLICE_MS 100

static tp_status send_bytes(transport *t, const void *data, size_t len)
{
    if (t->kind == SCHEME_TCP)
        return t->open ? send_tcp_open(t, data, len, SEND_SLICE_MS) : send_tcp(t, data, len, SEND_SLICE_MS);
    char *msg = NULL;
    if (rec_fd_write(t->fd, data, len, &msg) == 0)
        return TP_OK;
    if (t->kind == SCHEME_PIPE && errno == EPIPE) {
        free(msg);
        set_error(t, "stdout: the reader of this pipe has gone");
        return TP_NO_READERS;
    }
    return fail_with(t, msg);
}

tp_status tp_write_end(transport *t, size_t len)
{
    if (t->kind == SCHEME_SHM) {
        ring_write_end(t->ring, &t->slot, len);
        t->claimed = false;
        t->sent++;
        return TP_OK;
    }
    const rec_header *h = (const rec_header *)t->buf.data;
    tp_status st = send_bytes(t, t->buf.data, len);
    if (st == TP_OK && len >= sizeof *h && h->kind == REC_DATA)
        t->sent++;
    return st;
}

void tp_write_abort(transport *t)
{
    if (t->kind == SCHEME_SHM && t->claimed) {
        ring_write_abort(t->ring, &t->slot);
        t->claimed = false;
    }
}

/* ---- closing ---------------------------------------------------------------------------- */

/* The end-of-stream record: how many data records went out, and whether the writer finished.
 * Over tcp it waits up to `wait_ms` for a reader to take it. */
static tp_status send_eos(transport *t, bool stopped, int wait_ms)
{
    uint8_t eos[REC_HEADER_BYTES] __attribute__((aligned(64)));
    size_t n = rec_write_eos(eos, sizeof eos, t->sent, stopped);
    if (t->kind != SCHEME_TCP)
        return send_bytes(t, eos, n);
    tp_status st = send_tcp(t, eos, n, wait_ms);
    if (st == TP_TIMEOUT)
        set_error(t, "%s: no reader took the end of the stream within %.0f s", t->uri, wait_ms / 1000.0);
    return st == TP_OK ? TP_OK : TP_ERROR;
}

static void free_transport(transport *t)
{
    if (t->fd >= 0 && t->kind == SCHEME_FILE && !t->out_file_open)
        close(t->fd);
    if (t->out_file_open)
        atomic_file_abort(&t->out_file);
    if (t->zmon) {
        zmq_socket_monitor(t->zsock, NULL, 0);
        zmq_socket_close(t->zmon);
    }
    /* Before the socket closes, as the last close ends the context, where the ZAP handler
     * lives; ZAP_ENFORCE_DOMAIN refuses any handshake in between. */
    auth_server_stop(t->auth);
    if (t->zsock)
        zmq_socket_close(t->zsock);
    rec_buf_free(&t->buf);
    free(t->uri);
    free(t);
}

tp_status tp_close(transport *t)
{
    if (!t)
        return TP_OK;
    tp_status st = TP_OK;
    if (t->dir == TP_OUT && t->open) {
        /* The reader does not count EOS records: send one if it is quickly taken, and do not
         * hold the exit for a reader that is gone. */
        int linger = OPEN_LINGER_MS;
        send_eos(t, false, OPEN_LINGER_MS);
        zmq_setsockopt(t->zsock, ZMQ_LINGER, &linger, sizeof linger);
    } else if (t->dir == TP_OUT && t->kind != SCHEME_SHM) {
        st = send_eos(t, false, TCP_LINGER_MS);
        char *msg = NULL;
        if (st == TP_OK && t->out_file_open) {
            if (atomic_file_commit(&t->out_file, &msg) != 0)
                st = fail_with(t, msg);
            t->out_file_open = false;
            t->fd = -1; /* closed by the commit */
        }
        if (st != TP_OK)
            log_error("%s", t->error);
    }
    if (t->kind == SCHEME_SHM) {
        tp_write_abort(t);
        tp_read_done(t);
        ring_close(t->ring); /* a producer's close counts towards the ring's end of stream */
    }
    free_transport(t);
    return st;
}

tp_status tp_stop(transport *t)
{
    if (!t)
        return TP_OK;
    if (t->dir != TP_OUT) {
        tp_close(t);
        return TP_OK;
    }
    tp_write_abort(t);
    char why[160];
    snprintf(why, sizeof why, "the writer pid %d was stopped after %llu records; the stream is incomplete",
             (int)getpid(), (unsigned long long)t->sent);
    tp_status st = TP_OK;
    if (t->kind == SCHEME_SHM) {
        ring_stop(t->ring, "%s", why);
        ring_close(t->ring);
        t->ring = NULL;
    } else if (t->out_file_open) { /* a cache of part of a stream never takes the real name */
        log_warn("%s not written: %s", t->uri, why);
    } else {
        st = send_eos(t, true, TCP_STOP_LINGER_MS);
        if (st != TP_OK)
            log_warn("%s", t->error);
    }
    if (t->zsock) {
        int linger = TCP_STOP_LINGER_MS;
        zmq_setsockopt(t->zsock, ZMQ_LINGER, &linger, sizeof linger);
    }
    free_transport(t);
    return st;
}

void tp_abandon(transport *t)
{
    if (!t)
        return;
    if (t->kind == SCHEME_SHM && t->ring) {
        /* Leaving without closing as a producer would leave readers waiting for an end that
         * never comes; breaking the ring tells them at once. */
        if (t->dir == TP_OUT)
            ring_break(t->ring, "the writer pid %d stopped on an error", (int)getpid());
        ring_close(t->ring);
    }
    if (t->kind == SCHEME_TCP && t->zsock) {
        int zero = 0;
        zmq_setsockopt(t->zsock, ZMQ_LINGER, &zero, sizeof zero);
    }
    free_transport(t);
}

const char *tp_error(const transport *t) { return t->error; }
bool tp_peer_failed(const transport *t) { return t->peer_failed; }
bool tp_peer_stopped(const transport *t) { return t->peer_stopped; }
const char *tp_uri(const transport *t) { return t->uri; }
struct ring *tp_ring(const transport *t) { return t->ring; }

/*
 * coll_net.c — the network world (see coll_net.h): a star of ZeroMQ connections around rank 0.
 *
 * Sockets: rank 0 binds a ROUTER (CURVE server) on every interface at PORT; rank r connects a DEALER
 * (CURVE client) whose routing id is "world.<r>", the id its key must allow. Each socket has a
 * monitor, which is how a closed connection is seen: rank 0 knows each rank's file descriptor
 * from its hello (ZMQ_SRCFD) and so which rank a disconnect is; a rank's only peer is rank 0.
 * Every socket sends heartbeats, so a host that vanishes without closing anything disconnects
 * too.
 *
 * Messages are a header frame (net_header: what, who, the call) and a payload frame:
 *
 *   rank r -> 0   HELLO (its pid and host)        CALL (its values, if the call sends any)
 *   rank 0 -> r   WELCOME once all have said hello  RESULT (the call's result)  BROKEN (text)
 *   any           FINISHED (coll_finish: the sender made its last call; its disconnect is no loss)
 *
 * A call: every rank but 0 sends its CALL and waits; rank 0 waits for all of them (checking
 * each is the call it makes itself), computes the result in rank order and sends it to each.
 * A rank cannot be a call ahead, since it waits for the result of the last, so whatever rank
 * 0 receives during a call belongs to it. Whatever goes wrong, rank 0 sends the message to
 * every rank it knows and keeps it: the world is broken, every later call returns it.
 *
 * A watched world (coll_check_peers, from coll_watch.h's thread) makes no calls: a check reads
 * what is queued, FINISHED or BROKEN, and then the monitor, in that order, because a rank's
 * FINISHED reaches the socket before its disconnect reaches the monitor.
 */
#include "coll_net.h"

#include "auth.h"
#include "coll_internal.h"
#include "timer.h"
#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define NET_MAGIC 0x54454e53u /* "SNET" */
#define CHECK_MS 100
#define HEARTBEAT_IVL_MS 1000
#define RECONNECT_IVL_MS 20
#define ROOT_LINGER_MS 5000 /* rank 0's last results still go out after it closes */
#define DRAIN_MS 200        /* after rank 0's disconnect, how long what it sent before may take to show */
#define HOST_BYTES 64
#define PIECE_BYTES ((size_t)1 << 23) /* the default: ZeroMQ moves messages of tens of MB far slower */

typedef enum { MSG_HELLO = 1, MSG_WELCOME, MSG_CALL, MSG_RESULT, MSG_BROKEN, MSG_FINISHED } msg_type;

typedef struct {
    uint32_t magic, type;
    int32_t rank, world, pid;
    call_desc call;
    uint64_t piece;  /* CALL, RESULT: which piece of the values */
    int32_t source;  /* RESULT of an all-gather: whose values */
    char host[HOST_BYTES];
} net_header;

typedef struct {
    int fd; /* its connection at rank 0; -1 until its hello */
    int pid;
    bool finished; /* it said FINISHED: rank 0's peers; the others' entry 0 */
    char host[HOST_BYTES];
} peer;

typedef struct {
    void *ctx, *sock, *mon;
    auth_server *auth;
    char *name; /* "net:HOST:PORT", for messages */
    char host[HOST_BYTES]; /* this machine's name, said in every header */
    int rank, world, timeout_ms;
    size_t piece; /* bytes of values a message carries at most */
    uint64_t calls;
    char *broken;
    bool root_gone; /* rank 0's connection closed: a loss once what it sent before is read */
    peer peers[COLL_MAX_WORLD];
} net_world;

/* A received message: who sent it (rank 0: by routing id), its header, its payload. */
typedef struct {
    int from;
    int fd;
    net_header h;
    zmq_msg_t payload;
    const char *user; /* rank 0: the ids the sender's key allows (auth.h's User-Id) */
} net_msg;

/* ---- small parts ------------------------------------------------------------------------- */

static int wait_ms(double deadline)
{
    double left = (deadline - now_seconds()) * 1000.0;
    return left <= 0 ? 0 : left < CHECK_MS ? (int)left + 1 : CHECK_MS;
}

/* How long a rank other than 0 waits for rank 0, which itself waits up to timeout_ms for the
 * slowest rank before it answers: long enough to hear rank 0's own message. */
static double answer_deadline(const net_world *w)
{
    return now_seconds() + (2.0 * w->timeout_ms + COLL_NET_HEARTBEAT_TIMEOUT_MS) / 1000.0;
}

static size_t sent_bytes(const call_desc *d, int rank)
{
    size_t esz = coll_dtype_bytes((coll_dtype)d->dtype);
    if (d->kind == CALL_BARRIER || (d->kind == CALL_BROADCAST && d->arg != rank))
        return 0;
    return (size_t)d->count * esz;
}

/* The bytes of the result of one source (an all-gather's result has world of them). */
static size_t result_bytes(const call_desc *d)
{
    return d->kind == CALL_BARRIER ? 0 : (size_t)d->count * coll_dtype_bytes((coll_dtype)d->dtype);
}

/* Values travel in pieces of w->piece (whole values: it is a multiple of 8); no values, one
 * empty piece. */
static size_t pieces_of(const net_world *w, size_t bytes) { return bytes ? (bytes + w->piece - 1) / w->piece : 1; }

static size_t piece_bytes(const net_world *w, size_t bytes, size_t piece)
{
    size_t at = piece * w->piece;
    return at >= bytes ? 0 : bytes - at < w->piece ? bytes - at : w->piece;
}

/* Rank 0's words for rank r: with its pid and host once its hello is in. */
static void describe_peer(const net_world *w, int r, char *out, size_t n)
{
    if (w->peers[r].fd >= 0)
        snprintf(out, n, "rank %d (pid %d on %s)", r, w->peers[r].pid, w->peers[r].host);
    else
        snprintf(out, n, "rank %d", r);
}

/* ---- sending ------------------------------------------------------------------------------- */

static net_header header_of(const net_world *w, msg_type type, const call_desc *call)
{
    net_header h = {.magic = NET_MAGIC, .type = type, .rank = w->rank, .world = w->world, .pid = (int)getpid()};
    if (call)
        h.call = *call;
    memcpy(h.host, w->host, sizeof h.host);
    return h;
}

/* [routing id of rank `to`, when rank 0 sends] header, payload. 0 or -1. */
static int send_message(net_world *w, int to, const net_header *h, const void *payload, size_t bytes)
{
    char id[32];
    if (w->rank == 0) {
        snprintf(id, sizeof id, "world.%d", to);
        if (zmq_send(w->sock, id, strlen(id), ZMQ_SNDMORE) < 0)
            return -1;
    }
    if (zmq_send(w->sock, h, sizeof *h, ZMQ_SNDMORE) < 0)
        return -1;
    return zmq_send(w->sock, payload, bytes, 0) < 0 ? -1 : 0;
}

/* Rank 0: the world is broken with this message; every rank it knows hears it. */
__attribute__((format(printf, 2, 3))) static void break_world(net_world *w, const char *fmt, ...)
{
    if (w->broken)
        return;
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    w->broken = xstrdup(sb_str(&sb));
    sb_free(&sb);
    net_header h = header_of(w, MSG_BROKEN, NULL);
    for (int r = 1; w->rank == 0 && r < w->world; r++) /* to a rank not connected: EHOSTUNREACH */
        send_message(w, r, &h, w->broken, strlen(w->broken));
}

static int broken_error(const net_world *w, char **err) { return report_failure(err, "%s", w->broken); }

/* ---- receiving ------------------------------------------------------------------------------ */

static int recv_frame(void *sock, zmq_msg_t *m)
{
    zmq_msg_init(m);
    if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) >= 0)
        return 0;
    zmq_msg_close(m);
    return -1;
}

/* The rest of a multi-frame message, dropped. */
static void drop_rest(void *sock, zmq_msg_t *last)
{
    while (zmq_msg_more(last)) {
        zmq_msg_close(last);
        if (recv_frame(sock, last) != 0)
            return;
    }
    zmq_msg_close(last);
}

/* The rank a routing id names ("world.<r>"), or -1. */
static int rank_of_id(const net_world *w, zmq_msg_t *id)
{
    char s[32];
    size_t n = zmq_msg_size(id);
    if (n == 0 || n >= sizeof s)
        return -1;
    memcpy(s, zmq_msg_data(id), n);
    s[n] = 0;
    char *end;
    long r = strncmp(s, "world.", 6) ? -1 : strtol(s + 6, &end, 10);
    return r > 0 && r < w->world && !*end ? (int)r : -1;
}

/* One whole message off the socket, if one is there: 0, or -1 for none. A message that is not
 * ours (a wrong frame count or header) is dropped: 1. */
static int take_message(net_world *w, net_msg *m)
{
    zmq_msg_t first, head;
    m->from = 0;
    if (recv_frame(w->sock, &first) != 0)
        return -1;
    if (w->rank == 0) {
        m->from = rank_of_id(w, &first);
        if (!zmq_msg_more(&first) || recv_frame(w->sock, &head) != 0) {
            drop_rest(w->sock, &first);
            return 1;
        }
        zmq_msg_close(&first);
    } else
        head = first;
    bool ok = zmq_msg_size(&head) == sizeof m->h && zmq_msg_more(&head) && m->from >= 0;
    if (ok) {
        memcpy(&m->h, zmq_msg_data(&head), sizeof m->h);
        m->fd = zmq_msg_get(&head, ZMQ_SRCFD);
        m->user = zmq_msg_gets(&head, "User-Id");
    }
    ok = ok && m->h.magic == NET_MAGIC && recv_frame(w->sock, &m->payload) == 0;
    if (!ok) {
        drop_rest(w->sock, &head);
        return 1;
    }
    zmq_msg_close(&head);
    if (zmq_msg_more(&m->payload)) {
        drop_rest(w->sock, &m->payload);
        return 1;
    }
    m->h.host[HOST_BYTES - 1] = 0;
    return 0;
}

/* The monitor's next event: its number and value (a file descriptor), or 0 for none. */
static uint16_t next_event(net_world *w, int *value)
{
    zmq_msg_t m;
    if (recv_frame(w->mon, &m) != 0)
        return 0;
    uint16_t event = 0;
    uint32_t v = 0;
    if (zmq_msg_size(&m) >= 6) {
        memcpy(&event, zmq_msg_data(&m), 2);
        memcpy(&v, (uint8_t *)zmq_msg_data(&m) + 2, 4);
    }
    drop_rest(w->mon, &m);
    *value = (int)v;
    return event;
}

/* A connection event that ends the wait: a known rank's connection closed (rank 0), or
 * rank 0's (the others: see root_lost), unless that rank had finished; or rank 0 refused this
 * rank's handshake. Breaks the world. */
static void judge_event(net_world *w, uint16_t ev, int value, const char *what)
{
    char who[128];
    if (w->rank == 0 && ev == ZMQ_EVENT_DISCONNECTED) {
        for (int r = 1; r < w->world; r++)
            if (w->peers[r].fd == value) {
                describe_peer(w, r, who, sizeof who);
                w->peers[r].fd = -1;
                if (!w->peers[r].finished)
                    break_world(w, "collectives %s: %s left the world (its connection closed) while rank 0 waited in %s",
                                w->name, who, what);
            }
    } else if (w->rank != 0 && ev == ZMQ_EVENT_DISCONNECTED && !w->peers[0].finished)
        w->root_gone = true;
    else if (w->rank != 0 && ev >= ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && ev != ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
        break_world(w, "collectives %s: rank 0 refused rank %d's handshake: its allow-list must hold this "
                       "rank's client key (with ids world.*), and the key file rank 0's public key",
                    w->name, w->rank);
}

/* Rank 0 closed its connection (and had not finished): a loss unless a message it sent before
 * is still to be read. The monitor is a socket of its own, so its event can be seen before the
 * last messages that came in ahead of the close (rank 0's last results, when it closes right
 * after sending them) show on the data socket; they are there within DRAIN_MS if at all. */
static void root_lost(net_world *w, const char *what)
{
    if (!w->root_gone || w->broken || w->peers[0].finished)
        return;
    zmq_pollitem_t item = {w->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, DRAIN_MS) > 0 && (item.revents & ZMQ_POLLIN))
        return;
    break_world(w, "collectives %s: rank 0 left the world (its connection closed) while rank %d waited in %s",
                w->name, w->rank, what);
}

static bool connection_lost(net_world *w, const char *what)
{
    int value;
    for (uint16_t ev; (ev = next_event(w, &value));)
        judge_event(w, ev, value, what);
    root_lost(w, what);
    return w->broken != NULL;
}

/* The next message, within the deadline: 0, 1 at the deadline, -1 when the world broke. */
static int next_message(net_world *w, double deadline, const char *what, net_msg *m)
{
    for (;;) {
        int rc = take_message(w, m);
        if (rc == 0)
            return 0;
        if (rc == 1)
            continue;
        if (connection_lost(w, what))
            return -1;
        if (now_seconds() >= deadline)
            return 1;
        zmq_pollitem_t items[2] = {{w->sock, 0, ZMQ_POLLIN, 0}, {w->mon, 0, ZMQ_POLLIN, 0}};
        zmq_poll(items, 2, wait_ms(deadline)); /* EINTR: look again */
    }
}

/* ---- rank 0 --------------------------------------------------------------------------------- */

/* Rank 0's record of a hello: it must be a rank of this world, said once, by a key that may.
 * False for a message that is no hello (ignored) or a hello that broke the world. */
static bool take_hello(net_world *w, const net_msg *m)
{
    int r = m->from;
    char id[32];
    snprintf(id, sizeof id, "world.%d", r);
    if (m->h.type != MSG_HELLO || m->h.rank != r)
        return false; /* not a hello from a rank that joins: a late message of a broken run */
    if (!m->user || !auth_ids_match(m->user, id))
        break_world(w, "collectives %s: rank %d (pid %d on %s) came with a key whose ids do not allow %s", w->name,
                    r, m->h.pid, m->h.host, id);
    else if (m->h.world != w->world)
        break_world(w, "collectives %s: rank %d (pid %d on %s) joins a world of %d; rank 0's is of %d", w->name, r,
                    m->h.pid, m->h.host, m->h.world, w->world);
    else if (w->peers[r].fd >= 0)
        break_world(w, "collectives %s: rank %d joined twice (pid %d on %s, then pid %d on %s)", w->name, r,
                    w->peers[r].pid, w->peers[r].host, m->h.pid, m->h.host);
    else {
        w->peers[r] = (peer){.fd = m->fd, .pid = m->h.pid};
        snprintf(w->peers[r].host, sizeof w->peers[r].host, "%s", m->h.host);
    }
    return !w->broken;
}

/* The ranks that have not sent what rank 0 waits for (late[r]), as "rank 2" or "ranks 1, 3". */
static void break_for_missing(net_world *w, const bool *late, const char *what)
{
    strbuf names = {0};
    int n = 0;
    for (int r = 1; r < w->world; r++)
        if (late[r])
            sb_printf(&names, "%s%d", n++ ? ", " : "", r);
    break_world(w, "collectives %s: rank%s %s did not reach %s within %.1f s (rank 0 waited)", w->name,
                n > 1 ? "s" : "", sb_str(&names), what, w->timeout_ms / 1000.0);
    sb_free(&names);
}

static int root_join(net_world *w, char **err)
{
    bool late[COLL_MAX_WORLD] = {false};
    int missing = w->world - 1;
    for (int r = 1; r < w->world; r++)
        late[r] = true;
    double deadline = now_seconds() + w->timeout_ms / 1000.0;
    while (missing > 0 && !w->broken) {
        net_msg m;
        int rc = next_message(w, deadline, "the join", &m);
        if (rc == 1)
            break_for_missing(w, late, "the join");
        if (rc != 0)
            break;
        if (late[m.from] && take_hello(w, &m))
            late[m.from] = false, missing--;
        zmq_msg_close(&m.payload);
    }
    if (w->broken)
        return broken_error(w, err);
    net_header h = header_of(w, MSG_WELCOME, NULL);
    for (int r = 1; r < w->world; r++)
        send_message(w, r, &h, NULL, 0);
    return 0;
}

/* Rank 0's view of a call: every other rank's pieces as they come (rank r sends want[r]; the
 * first `freed[r]` are done with), and the pieces of the result sent so far. */
typedef struct {
    const call_desc *d;
    const void *send; /* rank 0's own values */
    void *out;
    zmq_msg_t *held[COLL_MAX_WORLD];
    size_t want[COLL_MAX_WORLD], arrived[COLL_MAX_WORLD], freed[COLL_MAX_WORLD];
    size_t next; /* the result's next piece */
} root_state;

/* One rank's piece, checked against rank 0's call: the same call, the next piece, its size. */
static bool accept_piece(net_world *w, root_state *st, const net_msg *m)
{
    char a[160], b[160], who[128];
    int r = m->from;
    describe_peer(w, r, who, sizeof who);
    size_t n = zmq_msg_size((zmq_msg_t *)&m->payload), sent = sent_bytes(st->d, r);
    if (m->h.type == MSG_CALL && !coll_same_call(&m->h.call, st->d)) {
        coll_describe_call(&m->h.call, a, sizeof a);
        coll_describe_call(st->d, b, sizeof b);
        break_world(w, "collectives %s: rank %d called %s while rank 0 called %s", w->name, r, a, b);
    } else if (m->h.type != MSG_CALL || m->h.piece != st->arrived[r] || st->arrived[r] >= st->want[r])
        break_world(w, "collectives %s: %s sent an unexpected message during call %llu", w->name, who,
                    (unsigned long long)st->d->number);
    else if (n != piece_bytes(w, sent, m->h.piece))
        break_world(w, "collectives %s: %s sent %zu bytes for piece %llu of %s", w->name, who, n,
                    (unsigned long long)m->h.piece, coll_call_name(st->d->kind));
    return !w->broken;
}

/* Whether every rank has sent what the result's piece p needs: its piece p, or its one (empty)
 * piece when it sends less (a broadcast's other ranks, a barrier). */
static bool late_for(const root_state *st, int r, size_t p)
{
    size_t need = p < st->want[r] - 1 ? p : st->want[r] - 1;
    return st->arrived[r] <= need;
}

static bool piece_ready(const net_world *w, const root_state *st, size_t p)
{
    for (int r = 1; r < w->world; r++)
        if (late_for(st, r, p))
            return false;
    return true;
}

/* A message's values where a double may be read: in place, or copied into *copy. */
static const void *aligned_values(zmq_msg_t *m, void **copy)
{
    void *data = zmq_msg_data(m);
    if ((uintptr_t)data % sizeof(double) == 0)
        return data;
    *copy = xmalloc(zmq_msg_size(m) ? zmq_msg_size(m) : 1);
    memcpy(*copy, data, zmq_msg_size(m));
    return *copy;
}

static void send_result(net_world *w, const root_state *st, int source, const void *data, size_t bytes)
{
    net_header h = header_of(w, MSG_RESULT, st->d);
    h.piece = st->next, h.source = source;
    for (int r = 1; r < w->world; r++)
        send_message(w, r, &h, data, bytes);
}

/* The result's piece st->next, computed and sent to every rank: rank order for a reduction,
 * every rank's piece for a gather (one message each), the root's for a broadcast. */
static void emit_piece(net_world *w, root_state *st)
{
    const call_desc *d = st->d;
    size_t total = result_bytes(d), off = st->next * w->piece, n = piece_bytes(w, total, st->next);
    const void *src[COLL_MAX_WORLD] = {n ? (const uint8_t *)st->send + off : NULL};
    void *copies[COLL_MAX_WORLD] = {0};
    for (int r = 1; r < w->world && d->kind != CALL_BARRIER; r++)
        if (st->next < st->want[r] && zmq_msg_size(&st->held[r][st->next]) > 0)
            src[r] = aligned_values(&st->held[r][st->next], &copies[r]);
    uint8_t *out = n ? (uint8_t *)st->out + off : NULL;
    if (d->kind == CALL_ALL_REDUCE) {
        coll_reduce_in_rank_order(out, src, w->world, n / coll_dtype_bytes((coll_dtype)d->dtype),
                                  (coll_dtype)d->dtype, (coll_op)d->arg);
        send_result(w, st, 0, out, n);
    } else if (d->kind == CALL_ALL_GATHER)
        for (int r = 0; r < w->world; r++) {
            if (n)
                memcpy(out + (size_t)r * total, src[r], n);
            send_result(w, st, r, n ? out + (size_t)r * total : NULL, n);
        }
    else if (d->kind == CALL_BROADCAST) {
        if (d->arg != 0 && n)
            memcpy(out, src[d->arg], n);
        send_result(w, st, d->arg, out, n);
    } else
        send_result(w, st, 0, NULL, 0);
    for (int r = 1; r < w->world; r++)
        free(copies[r]);
}

/* The pieces up to st->next, closed: no later piece of the result reads them. */
static void free_done(root_state *st, int world, bool all)
{
    for (int r = 1; r < world; r++)
        while (st->freed[r] < st->arrived[r] && (all || st->freed[r] < st->next))
            zmq_msg_close(&st->held[r][st->freed[r]++]);
}

/* The next piece of any rank, into st; the deadline moves on with every piece. 0, or -1 with
 * the world broken (named: the ranks late for piece st->next). */
static int root_take(net_world *w, root_state *st, double *deadline)
{
    net_msg m;
    const char *what = coll_call_name(st->d->kind);
    int rc = next_message(w, *deadline, what, &m);
    if (rc == 1) {
        bool late[COLL_MAX_WORLD] = {false};
        for (int r = 1; r < w->world; r++)
            late[r] = late_for(st, r, st->next);
        break_for_missing(w, late, what);
    }
    if (rc != 0)
        return -1;
    if (!accept_piece(w, st, &m)) {
        zmq_msg_close(&m.payload);
        return -1;
    }
    st->held[m.from][st->arrived[m.from]++] = m.payload;
    *deadline = now_seconds() + w->timeout_ms / 1000.0;
    return 0;
}

static int root_call(net_world *w, const call_desc *d, const void *send, void *out, char **err)
{
    root_state st = {.d = d, .send = send, .out = out};
    for (int r = 1; r < w->world; r++) {
        st.want[r] = pieces_of(w, sent_bytes(d, r));
        st.held[r] = xcalloc(st.want[r], sizeof *st.held[r]);
    }
    size_t pieces = pieces_of(w, result_bytes(d));
    double deadline = now_seconds() + w->timeout_ms / 1000.0;
    while (st.next < pieces && !w->broken) {
        if (!piece_ready(w, &st, st.next)) {
            root_take(w, &st, &deadline);
            continue;
        }
        emit_piece(w, &st);
        st.next++;
        free_done(&st, w->world, false);
    }
    free_done(&st, w->world, true);
    for (int r = 1; r < w->world; r++)
        free(st.held[r]);
    return w->broken ? broken_error(w, err) : 0;
}

/* ---- the other ranks ----------------------------------------------------------------------- */

/* Rank 0's next word to this rank, of type `want`: 0 with *m, or -1 with *err (rank 0 said the
 * world broke, went away or stayed silent too long, or said something else). */
static int await_message(net_world *w, msg_type want, const char *what, net_msg *m, char **err)
{
    int rc = next_message(w, answer_deadline(w), what, m);
    if (rc == 1)
        break_world(w, "collectives %s: rank 0 did not answer rank %d in %s within %.1f s", w->name, w->rank,
                    what, (2.0 * w->timeout_ms + COLL_NET_HEARTBEAT_TIMEOUT_MS) / 1000.0);
    if (rc != 0)
        return broken_error(w, err);
    if (m->h.type == want)
        return 0;
    size_t n = zmq_msg_size(&m->payload);
    if (m->h.type == MSG_BROKEN) {
        char *why = xstrndup(zmq_msg_data(&m->payload), n);
        break_world(w, "%s", why);
        free(why);
    } else
        break_world(w, "collectives %s: rank 0 answered rank %d's %s with message %u", w->name, w->rank, what,
                    m->h.type);
    zmq_msg_close(&m->payload);
    return broken_error(w, err);
}

/* One piece of the result into out: a piece of `source`'s result_bytes, where out holds each
 * source's result in turn. */
static int place_result(net_world *w, const call_desc *d, const net_msg *m, void *out)
{
    size_t total = result_bytes(d), n = zmq_msg_size((zmq_msg_t *)&m->payload);
    int sources = d->kind == CALL_ALL_GATHER ? w->world : 1, source = d->kind == CALL_ALL_GATHER ? m->h.source : 0;
    if (m->h.call.number != d->number || source < 0 || source >= sources || m->h.piece >= pieces_of(w, total) ||
        n != piece_bytes(w, total, m->h.piece)) {
        break_world(w, "collectives %s: rank 0 answered rank %d's %s with a piece it did not ask for", w->name,
                    w->rank, coll_call_name(d->kind));
        return -1;
    }
    if (n)
        memcpy((uint8_t *)out + (size_t)source * total + m->h.piece * w->piece, zmq_msg_data((zmq_msg_t *)&m->payload), n);
    return 0;
}

/* This rank's piece p of what it sends to rank 0. */
static int send_piece(net_world *w, const call_desc *d, const void *send, size_t p, char **err)
{
    net_header h = header_of(w, MSG_CALL, d);
    size_t bytes = sent_bytes(d, w->rank);
    h.piece = p;
    if (send_message(w, 0, &h, bytes ? (const uint8_t *)send + p * w->piece : NULL, piece_bytes(w, bytes, p)) == 0)
        return 0;
    break_world(w, "collectives %s: rank %d cannot send to rank 0: %s", w->name, w->rank, zmq_strerror(errno));
    return broken_error(w, err);
}

/* In lock step with rank 0: piece p of the values goes out once the result's piece p - 1 is
 * in (ZeroMQ moves one large message at a time faster than several at once on a loaded host,
 * and tens of MB in one message slower still). */
static int rank_call(net_world *w, const call_desc *d, const void *send, void *out, char **err)
{
    size_t sent = pieces_of(w, sent_bytes(d, w->rank)), results = pieces_of(w, result_bytes(d));
    size_t per_piece = d->kind == CALL_ALL_GATHER ? (size_t)w->world : 1;
    if (send_piece(w, d, send, 0, err) != 0)
        return -1;
    for (size_t p = 0; p < results; p++) {
        for (size_t k = 0; k < per_piece; k++) {
            net_msg m;
            if (await_message(w, MSG_RESULT, coll_call_name(d->kind), &m, err) != 0)
                return -1;
            int rc = place_result(w, d, &m, out);
            zmq_msg_close(&m.payload);
            if (rc != 0)
                return broken_error(w, err);
        }
        if (p + 1 < sent && send_piece(w, d, send, p + 1, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- the interface --------------------------------------------------------------------------- */

static int net_call(void *state, call_kind kind, coll_dtype dtype, int arg, size_t count, const void *send,
                    void *out, char **err)
{
    net_world *w = state;
    if (w->broken)
        return broken_error(w, err);
    call_desc d = {.kind = kind, .dtype = dtype, .arg = arg, .count = count, .number = ++w->calls};
    return w->rank == 0 ? root_call(w, &d, send, out, err) : rank_call(w, &d, send, out, err);
}

static int net_all_reduce(void *state, void *buf, size_t count, coll_dtype dtype, coll_op op, bool device, char **err)
{
    (void)device;
    return net_call(state, CALL_ALL_REDUCE, dtype, (int)op, count, buf, buf, err);
}

static int net_all_gather(void *state, const void *send, void *recv, size_t count, coll_dtype dtype, bool device,
                          char **err)
{
    (void)device;
    return net_call(state, CALL_ALL_GATHER, dtype, 0, count, send, recv, err);
}

static int net_broadcast(void *state, void *buf, size_t count, coll_dtype dtype, int root, bool device, char **err)
{
    (void)device;
    return net_call(state, CALL_BROADCAST, dtype, root, count, buf, buf, err);
}

static int net_barrier(void *state, char **err) { return net_call(state, CALL_BARRIER, COLL_F32, 0, 0, NULL, NULL, err); }

/* ---- leaving and watching ------------------------------------------------------------------ */

/* What a watched world finds queued: FINISHED marks its sender, BROKEN breaks this rank's world
 * (rank 0's message); nothing else comes to a world that makes no calls. */
static void take_watch_message(net_world *w, net_msg *m)
{
    if (m->h.type == MSG_FINISHED && m->from >= 0 && m->from < w->world)
        w->peers[m->from].finished = true;
    else if (m->h.type == MSG_BROKEN && w->rank != 0 && !w->broken)
        w->broken = xstrndup(zmq_msg_data(&m->payload), zmq_msg_size(&m->payload));
    zmq_msg_close(&m->payload);
}

static int net_check_peers(void *state, const char *what, char **err)
{
    net_world *w = state;
    uint16_t events[64];
    int values[64], n = 0;
    while (n < 64 && (events[n] = next_event(w, &values[n])))
        n++;
    net_msg m;
    for (int rc; (rc = take_message(w, &m)) >= 0;)
        if (rc == 0)
            take_watch_message(w, &m);
    for (int i = 0; i < n; i++)
        judge_event(w, events[i], values[i], what);
    root_lost(w, what);
    return w->broken ? broken_error(w, err) : 0;
}

static void net_close(void *state)
{
    net_world *w = state;
    if (!w)
        return;
    /* The monitor stops before its reader closes: its events are sent blocking, and to a
     * reader that is gone they would block libzmq's I/O thread for good. */
    if (w->mon) {
        zmq_socket_monitor(w->sock, NULL, 0);
        zmq_close(w->mon);
    }
    if (w->sock)
        zmq_close(w->sock);
    auth_server_stop(w->auth);
    if (w->ctx)
        while (zmq_ctx_term(w->ctx) < 0 && errno == EINTR)
            ;
    free(w->broken);
    free(w->name);
    free(w);
}

/* FINISHED to rank 0 (rank 0: to every rank still there), then the close, whose linger lets it out. */
static void net_finish(void *state)
{
    net_world *w = state;
    net_header h = header_of(w, MSG_FINISHED, NULL);
    if (w->rank != 0)
        send_message(w, 0, &h, NULL, 0);
    for (int r = 1; w->rank == 0 && r < w->world; r++)
        send_message(w, r, &h, NULL, 0); /* a rank gone: EHOSTUNREACH, nothing to tell it */
    net_close(w);
}

static const coll_impl net_impl = {.all_reduce = net_all_reduce,
                                   .all_gather = net_all_gather,
                                   .broadcast = net_broadcast,
                                   .barrier = net_barrier,
                                   .check_peers = net_check_peers,
                                   .finish = net_finish,
                                   .close = net_close};

/* ---- joining ------------------------------------------------------------------------------- */

/* Heartbeats (a vanished host disconnects), no limit on queued messages (a call's are never
 * dropped), a linger that lets rank 0's last results out, quick reconnection (rank 0 may come
 * later than the others). */
static void set_options(net_world *w)
{
    int ivl = HEARTBEAT_IVL_MS, hb = COLL_NET_HEARTBEAT_TIMEOUT_MS, zero = 0, one = 1;
    int linger = w->rank == 0 ? ROOT_LINGER_MS : 1000, reconnect = RECONNECT_IVL_MS;
    zmq_setsockopt(w->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(w->sock, ZMQ_HEARTBEAT_TIMEOUT, &hb, sizeof hb);
    zmq_setsockopt(w->sock, ZMQ_HEARTBEAT_TTL, &hb, sizeof hb);
    zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(w->sock, ZMQ_RECONNECT_IVL, &reconnect, sizeof reconnect);
    zmq_setsockopt(w->sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(w->sock, ZMQ_RCVHWM, &zero, sizeof zero);
    if (w->rank == 0)
        zmq_setsockopt(w->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    else {
        char id[32];
        snprintf(id, sizeof id, "world.%d", w->rank);
        zmq_setsockopt(w->sock, ZMQ_ROUTING_ID, id, strlen(id));
    }
}

/* CURVE: rank 0 a server admitting its allow-list, the others clients of rank 0's key. */
static int set_keys(net_world *w, const coll_net_options *o, char **err)
{
    auth_keys k = {0};
    auth_allow allow = {0};
    int rc;
    if (w->rank == 0) {
        rc = o->keys_dir && *o->keys_dir ? auth_load_server_dir(o->keys_dir, &k, &allow, err)
                                         : report_failure(err, "collectives %s: rank 0 needs a key directory "
                                                               "(SELFSUP.TRANSPORT.SERVER_KEYS_DIR)", w->name);
        if (rc == 0 && !(w->auth = auth_server_start(w->ctx, w->sock, &k, &allow, w->name, err)))
            rc = -1;
    } else {
        rc = o->key_file && *o->key_file ? auth_load_keys(o->key_file, AUTH_CLIENT, &k, err)
                                         : report_failure(err, "collectives %s: rank %d needs a client key file "
                                                               "(SELFSUP.TRANSPORT.CLIENT_KEY_FILE)", w->name, w->rank);
        rc = rc ? rc : auth_client_setup(w->sock, &k, err);
    }
    auth_wipe(&k);
    auth_allow_free(&allow);
    return rc;
}

/* The socket's monitor, read by next_message: disconnects and refused handshakes. */
static int watch_connections(net_world *w, char **err)
{
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://selfsup-world-monitor-%p", (void *)w);
    int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor(w->sock, mon, events) != 0 || !(w->mon = zmq_socket(w->ctx, ZMQ_PAIR)) ||
        zmq_connect(w->mon, mon) != 0)
        return report_failure(err, "collectives %s: cannot watch the connections: %s", w->name, zmq_strerror(errno));
    return 0;
}

/* The socket of this rank, its keys, its monitor; bound (rank 0, on every interface) or
 * connecting (the others). */
static int open_socket(net_world *w, const char *address, const coll_net_options *o, char **err)
{
    const char *colon = strrchr(address, ':');
    if (!colon || colon == address || !colon[1])
        return report_failure(err, "collectives %s: the world's address must be HOST:PORT", w->name);
    w->ctx = zmq_ctx_new();
    w->sock = w->ctx ? zmq_socket(w->ctx, w->rank == 0 ? ZMQ_ROUTER : ZMQ_DEALER) : NULL;
    if (!w->sock)
        return report_failure(err, "collectives %s: cannot make a ZeroMQ socket: %s", w->name, zmq_strerror(errno));
    set_options(w);
    if (set_keys(w, o, err) != 0 || watch_connections(w, err) != 0)
        return -1;
    char *endpoint = w->rank == 0 ? xasprintf("tcp://*:%s", colon + 1) : xasprintf("tcp://%s", address);
    int rc = w->rank == 0 ? zmq_bind(w->sock, endpoint) : zmq_connect(w->sock, endpoint);
    if (rc != 0)
        report_failure(err, "collectives %s: cannot %s %s: %s", w->name, w->rank == 0 ? "listen at" : "connect to",
                       endpoint, zmq_strerror(errno));
    free(endpoint);
    return rc == 0 ? 0 : -1;
}

coll *coll_net_join(const char *address, int rank, int world, const coll_net_options *o, char **err)
{
    char *name = xasprintf("net:%s", address);
    if (world < 1 || world > COLL_MAX_WORLD || rank < 0 || rank >= world) {
        report_failure(err, "collectives %s: rank %d of a world of %d (1 to %d ranks)", name, rank, world,
                       COLL_MAX_WORLD);
        free(name);
        return NULL;
    }
    net_world *w = xcalloc(1, sizeof *w);
    *w = (net_world){.name = name, .rank = rank, .world = world, .timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000,
                     .piece = o->piece_bytes ? (o->piece_bytes + 7) & ~(size_t)7 : PIECE_BYTES};
    for (int r = 0; r < world; r++)
        w->peers[r].fd = -1;
    if (gethostname(w->host, sizeof w->host - 1) != 0)
        snprintf(w->host, sizeof w->host, "?");
    int rc = open_socket(w, address, o, err);
    if (rc == 0 && rank == 0)
        rc = root_join(w, err);
    else if (rc == 0) {
        net_header h = header_of(w, MSG_HELLO, NULL);
        net_msg m;
        rc = send_message(w, 0, &h, NULL, 0) != 0 ? report_failure(err, "collectives %s: %s", name, zmq_strerror(errno))
                                                 : await_message(w, MSG_WELCOME, "the join", &m, err);
        if (rc == 0)
            zmq_msg_close(&m.payload);
    }
    if (rc != 0) {
        net_close(w);
        return NULL;
    }
    w->calls = 1; /* the join was call 1, as in the shm world */
    return coll_from_impl(name, rank, world, &net_impl, w);
}

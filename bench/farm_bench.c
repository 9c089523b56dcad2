/*
 * farm_bench.c — how fast the decode farm's wire moves crops: selfsup's tcp transport
 * (shm/transport.h: a record a message, CURVE, the reader copying each message into an
 * aligned buffer and validating it) beside raw ZeroMQ moving the same bytes (PUSH/PULL, the
 * same CURVE encryption, the same high-water mark, the receiver just dropping each message),
 * between two processes over loopback tcp. bench/farm.sh turns the output into a table.
 *
 * The sizes are the farm's: a SimCLR sample of two 224 px crops (uint8, as augment sends
 * them: 301,056 bytes of pixels plus the record's header) and a 96 px multi-crop sample; each
 * run sends --mib MiB. Each runs once as a warm-up and then --reps times; the median counts.
 * The clock runs from the first message received to the last.
 *
 * Output, one line per measurement:
 *   farm_bench <raw|transport> <message bytes> <messages/s> <MB/s>
 */
#include "auth.h"
#include "log.h"
#include "record.h"
#include "timer.h"
#include "transport.h"
#include "util.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define HWM 8 /* SELFSUP.RING.DEPTH's default, the transport's high-water mark */

typedef struct {
    size_t size;
    long count;
    int port;
    const char *keys_dir, *client_key;
} run_spec;

/* ---- keys: a server directory and one client, as `selfsup keygen` writes them --------------- */

static void make_keys(const char *dir)
{
    auth_keys server, client;
    auth_allow allow = {0};
    char *err = NULL, *sp = xasprintf("%s/server.key", dir), *cp = xasprintf("%s/bench.key", dir),
         *ap = xasprintf("%s/clients", dir);
    if (auth_new_keys(&server, NULL, &err) || auth_new_keys(&client, server.public_key, &err) ||
        auth_allow_add(&allow, client.public_key, "*", "bench", &err) || auth_write_keys(sp, &server, &err) ||
        auth_write_keys(cp, &client, &err) || auth_write_allow(ap, &allow, &err))
        die(1, "keys: %s", err);
    free(sp), free(cp), free(ap);
    auth_allow_free(&allow);
}

/* ---- raw ZeroMQ ------------------------------------------------------------------------------- */

static void *raw_socket(void *ctx, int type, const run_spec *r)
{
    void *s = zmq_socket(ctx, type);
    int hwm = HWM;
    zmq_setsockopt(s, type == ZMQ_PUSH ? ZMQ_SNDHWM : ZMQ_RCVHWM, &hwm, sizeof hwm);
    auth_keys k;
    char *err = NULL, *path = type == ZMQ_PULL ? xasprintf("%s/server.key", r->keys_dir) : xstrdup(r->client_key);
    if (auth_load_keys(path, type == ZMQ_PULL ? AUTH_SERVER : AUTH_CLIENT, &k, &err) != 0)
        die(1, "%s", err);
    if (type == ZMQ_PULL) {
        int one = 1;
        zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, k.secret_key, AUTH_KEY_LEN);
    } else if (auth_client_setup(s, &k, &err) != 0)
        die(1, "%s", err);
    free(path);
    return s;
}

static void raw_writer(const run_spec *r)
{
    void *ctx = zmq_ctx_new(), *s = raw_socket(ctx, ZMQ_PUSH, r);
    char *ep = xasprintf("tcp://127.0.0.1:%d", r->port);
    zmq_connect(s, ep);
    uint8_t *msg = xcalloc(1, r->size);
    for (long i = 0; i < r->count; i++) {
        memcpy(msg, &i, sizeof i);
        zmq_send(s, msg, r->size, 0);
    }
    zmq_close(s); /* the linger delivers the rest */
    zmq_ctx_term(ctx);
    _exit(0);
}

static double raw_reader(const run_spec *r)
{
    void *ctx = zmq_ctx_new(), *s = raw_socket(ctx, ZMQ_PULL, r);
    char *ep = xasprintf("tcp://127.0.0.1:%d", r->port);
    if (zmq_bind(s, ep) != 0)
        die(1, "bind %s: %s", ep, zmq_strerror(zmq_errno()));
    pid_t w = fork();
    if (w == 0)
        raw_writer(r);
    double t0 = 0;
    for (long i = 0; i < r->count; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0 || zmq_msg_size(&m) != r->size)
            die(1, "raw: message %ld lost", i);
        zmq_msg_close(&m);
        if (i == 0)
            t0 = now_seconds();
    }
    double dt = now_seconds() - t0;
    waitpid(w, NULL, 0);
    zmq_close(s);
    zmq_ctx_term(ctx);
    free(ep);
    return dt;
}

/* ---- the transport ---------------------------------------------------------------------------- */

static void tp_writer(const run_spec *r)
{
    tp_options o = {.slot_bytes = r->size + 4096, .depth = HWM, .client_key_file = r->client_key};
    char *err = NULL, *uri = xasprintf("tcp://127.0.0.1:%d", r->port);
    transport *t = tp_open(uri, TP_OUT, &o, &err);
    if (!t)
        die(1, "%s", err);
    uint64_t shape[1] = {r->size - 4096};
    for (long i = 0; i < r->count; i++) {
        void *buf;
        size_t cap;
        tp_write_begin(t, &buf, &cap, -1);
        rec_writer w;
        rec_writer_init(&w, buf, cap, REC_DATA, (uint64_t)i, 0, 1);
        uint8_t *px = rec_add(&w, "data.0", REC_U8, 1, shape);
        memcpy(px, &i, sizeof i);
        size_t len = rec_finish(&w);
        tp_status st;
        while ((st = tp_write_end(t, len)) == TP_TIMEOUT)
            ;
        if (st != TP_OK)
            die(1, "transport: %s", tp_error(t));
    }
    tp_close(t);
    _exit(0);
}

static double tp_reader(const run_spec *r)
{
    /* the writer first: a process keeps one ZeroMQ context for its transports, which a child
     * must not inherit in use (the writer connects, and waits for the bind) */
    pid_t w = fork();
    if (w == 0)
        tp_writer(r);
    tp_options o = {.slot_bytes = r->size + 4096, .depth = HWM, .server_keys_dir = r->keys_dir};
    char *err = NULL, *uri = xasprintf("tcp://127.0.0.1:%d", r->port);
    transport *t = tp_open(uri, TP_IN, &o, &err);
    if (!t)
        die(1, "%s", err);
    double t0 = 0;
    rec_view v;
    long got = 0;
    tp_status st;
    while ((st = tp_read(t, &v, 1000)) != TP_EOS) {
        if (st == TP_TIMEOUT)
            continue;
        if (st != TP_OK || v.hdr->seq != (uint64_t)got)
            die(1, "transport: record %ld: %s", got, st == TP_OK ? "out of order" : tp_error(t));
        if (got++ == 0)
            t0 = now_seconds();
        tp_read_done(t);
    }
    double dt = now_seconds() - t0;
    waitpid(w, NULL, 0);
    tp_close(t);
    free(uri);
    if (got != r->count)
        die(1, "transport: %ld of %ld records", got, r->count);
    return dt;
}

/* ---- main ------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long mib = 512, reps = 3;
    int base_port = 17400;
    for (int c; (c = getopt(argc, argv, "m:r:p:")) != -1;)
        if (c == 'm')
            mib = atol(optarg);
        else if (c == 'r')
            reps = atol(optarg);
        else if (c == 'p')
            base_port = atoi(optarg);
        else {
            fprintf(stderr, "usage: farm_bench [-m MIB] [-r REPS] [-p BASE_PORT]\n");
            return 2;
        }
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/selfsup-farm-bench.XXXXXX";
    if (!mkdtemp(dir))
        die(1, "mkdtemp");
    make_keys(dir);
    char *client = xasprintf("%s/bench.key", dir);
    /* a record of two 224 px crops (+ header room), and of one 96 px crop */
    const size_t sizes[] = {2 * 224 * 224 * 3 + 4096, 96 * 96 * 3 + 4096};
    int port = 0;
    for (size_t s = 0; s < 2; s++)
        for (int kind = 0; kind < 2; kind++) {
            run_spec r = {.size = sizes[s], .count = (long)((size_t)mib << 20) / (long)sizes[s],
                          .keys_dir = dir, .client_key = client};
            double times[16];
            for (long i = 0; i <= reps && i < 16; i++) {
                r.port = base_port + port++;
                times[i] = kind == 0 ? raw_reader(&r) : tp_reader(&r);
                printf("# %s %zu bytes: %.3f s\n", kind ? "transport" : "raw", r.size, times[i]);
            }
            qsort(times + 1, (size_t)reps, sizeof *times, cmp_double); /* the first is the warm-up */
            double dt = times[1 + reps / 2];
            printf("farm_bench %s %zu %.1f %.1f\n", kind ? "transport" : "raw", r.size, (double)(r.count - 1) / dt,
                   (double)(r.count - 1) * (double)r.size / dt / 1e6);
            fflush(stdout);
        }
    char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(cmd), free(client);
    return 0;
}

/*
 * control.h — the control plane: JSON messages over ZeroMQ between the orchestrator and
 * the stages.
 *
 * The orchestrator binds one ROUTER socket (ipc://RUN_DIR/control.sock by default,
 * tcp://ADDR:PORT for several nodes); each stage connects a DEALER whose routing id is its
 * "peer id" (e.g. "augment.2"), so the orchestrator addresses stages by name. Every message
 * is one frame of JSON text (jansson), an object with a "type":
 *
 *   stage → orchestrator
 *     {"type":"hello", "stage":"augment", "id":"augment.2", "pid":123, "rank":0,
 *      "world_size":1, "role":"worker", "version":"0.1.0"}
 *     {"type":"heartbeat", "records_in":N, "records_out":N, "bytes_in":N, "bytes_out":N,
 *      "blocked_in_s":x, "blocked_out_s":x, "counters":{"invalid_images":N, ...}}
 *     {"type":"final", ...same fields as heartbeat..., "status":"ok"|"error", "error":"..."}
 *     {"type":"log", "level":"error", "message":"..."}            (optional)
 *   orchestrator → stage
 *     {"type":"start"} {"type":"pause"} {"type":"resume"} {"type":"stop"}
 *     {"type":"epoch", "epoch":N}
 *
 * Security: ipc sockets live in the run directory (mode 0700). For tcp, CURVE encryption and
 * authentication are on when a key file is configured (SELFSUP.CONTROL.CURVE_KEY_FILE): the
 * file holds the server's keypair as two Z85 lines, "public KEY" and "secret KEY" (written
 * by ctl_keygen, mode 0600); the server uses the secret, clients use the public key with a
 * fresh keypair of their own. Without a key file a tcp endpoint is plain text, and should
 * stay on loopback or a trusted network (the default address is 127.0.0.1).
 */
#ifndef SELFSUP_CONTROL_H
#define SELFSUP_CONTROL_H

#include <jansson.h>
#include <stdbool.h>

typedef struct ctl_client ctl_client;
typedef struct ctl_server ctl_server;

/* Larger messages are refused on send and dropped (logged) on receipt. */
#define CTL_MAX_MESSAGE_BYTES (1 << 20)

/* Each process has one ZeroMQ context, made on first use and ended (waiting out the linger)
 * when its last control socket closes. A forked child must not use sockets it inherited; it
 * gets a context of its own if it opens new ones. One client or server per thread at a time. */

/* ---- stage side ---------------------------------------------------------------------------- */

/* Connect to endpoint as peer `id`. curve_key_file may be NULL or "". NULL + *err on failure. */
ctl_client *ctl_connect(const char *endpoint, const char *id, const char *curve_key_file, char **err);
/* Send a message (takes ownership of msg). 0 or -1; never blocks longer than timeout_ms. */
int ctl_send(ctl_client *c, json_t *msg, int timeout_ms);
/* Receive one message, waiting up to timeout_ms (0: poll, -1: forever). NULL on timeout or
 * error, or when a signal interrupts the wait (a malformed message is logged and dropped). */
json_t *ctl_recv(ctl_client *c, int timeout_ms);
/* The ZeroMQ socket, for zmq_poll beside other file descriptors. */
void *ctl_client_socket(ctl_client *c);
/* Closes; linger up to 1 s so that a final report still goes out. Safe on NULL. */
void ctl_close(ctl_client *c);

/* ---- orchestrator side --------------------------------------------------------------------- */

ctl_server *ctl_bind(const char *endpoint, const char *curve_key_file, char **err);
/* Receive one message; *peer gets the sender's id (malloc'd). NULL on timeout. Messages that
 * are not JSON objects with a string "type" are logged and dropped. */
json_t *ctl_server_recv(ctl_server *s, int timeout_ms, char **peer);
/* Send to one peer (takes ownership of msg). -1 when the peer is unknown or gone. */
int ctl_server_send(ctl_server *s, const char *peer, json_t *msg);
/* The ZeroMQ socket, for zmq_poll beside other file descriptors. */
void *ctl_server_socket(ctl_server *s);
/* The endpoint actually bound (tcp://127.0.0.1:PORT when the config asked for port 0). */
const char *ctl_server_endpoint(const ctl_server *s);
void ctl_server_close(ctl_server *s);

/* ---- keys ------------------------------------------------------------------------------------ */

/* Write a new CURVE server keypair to path (mode 0600, atomically). 0 or -1 with *err. */
int ctl_keygen(const char *path, char **err);

/* Build {"type": type} (a convenience for callers). */
json_t *ctl_msg(const char *type);

#endif

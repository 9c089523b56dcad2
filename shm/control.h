/*
 * control.h — the control plane: JSON messages over ZeroMQ between the orchestrator and
 * the stages.
 *
 * The orchestrator binds one ROUTER socket (ipc://RUN_DIR/control.sock by default,
 * tcp://ADDR:PORT for several nodes); each stage connects a DEALER and names itself with
 * its "peer id" (e.g. "augment.2") in its hello, so the orchestrator addresses stages by
 * name. Every message is one frame of JSON text (jansson), an object with a "type":
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
 * Peers are named by their hello: the ROUTER knows each connection by a routing id (random,
 * chosen by the DEALER), and binds that connection to the "id" of the first message it sends,
 * which must be a hello. Messages are delivered with that name, and sent to it.
 *
 * Security: every peer that reaches the socket is authenticated. ipc sockets live in a
 * private directory (the run directory, mode 0700: the server refuses one that group or others
 * can enter), so only the owner's processes reach them. tcp endpoints always use CURVE (auth.h):
 * there is no plain-text tcp. The server has its keypair and an allow-list of client keys,
 * each with the ids it may claim; a connection whose key is not on the list is refused at the
 * handshake, and a hello that claims an id its key does not allow is refused (logged once per
 * connection). A name changes hands (a restarted stage) only to a connection with the same
 * key. A client has its own keypair and the server's public key.
 */
#ifndef SELFSUP_CONTROL_H
#define SELFSUP_CONTROL_H

#include "auth.h"

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

/* Connect to endpoint (ipc://PATH or tcp://HOST:PORT) as peer `id`. A tcp endpoint needs
 * key_file, this client's keys (auth.h: its keypair and the server's public key); ipc ignores
 * it. NULL + *err on failure. */
ctl_client *ctl_connect(const char *endpoint, const char *id, const char *key_file, char **err);
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

/* Bind endpoint. A tcp endpoint needs keys_dir, a server's key directory (auth.h: server.key
 * and clients, from `selfsup keygen DIR --clients ...`); ipc ignores it. NULL + *err. */
ctl_server *ctl_bind(const char *endpoint, const char *keys_dir, char **err);
/* The same with keys and allow-list in memory (the orchestrator adds the stages it starts). */
ctl_server *ctl_bind_keys(const char *endpoint, const auth_keys *keys, const auth_allow *allow, char **err);
/* Receive one message; *peer gets the sender's id, as its hello named it (malloc'd). NULL on
 * timeout. Messages that are not JSON objects with a string "type", and messages of peers that
 * are not named (refused, or no hello yet), are logged and dropped. */
json_t *ctl_server_recv(ctl_server *s, int timeout_ms, char **peer);
/* Send to one peer (takes ownership of msg). -1 when the peer is unknown or gone. */
int ctl_server_send(ctl_server *s, const char *peer, json_t *msg);
/* The ZeroMQ socket, for zmq_poll beside other file descriptors. */
void *ctl_server_socket(ctl_server *s);
/* The endpoint actually bound (tcp://127.0.0.1:PORT when the config asked for port 0). */
const char *ctl_server_endpoint(const ctl_server *s);
void ctl_server_close(ctl_server *s);

/* Build {"type": type} (a convenience for callers). */
json_t *ctl_msg(const char *type);

#endif

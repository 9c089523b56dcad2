/*
 * auth.h — who may talk to a tcp endpoint: CURVE keys, allow-lists of client keys, and the
 * ZAP handler that enforces them. Used by the control plane (control.c) and the tcp data
 * transport (transport.c); `selfsup keygen` writes the files.
 *
 * Every tcp endpoint is CURVE: encrypted, and authenticated both ways. The server (the side
 * that binds: the orchestrator's ROUTER, a data reader's PULL) proves itself with its keypair;
 * each client (a stage's DEALER, a data writer's PUSH) with its own, and the server admits it
 * only when its public key is on the server's allow-list. Knowing the server's public key
 * is not enough. An allow-list entry also says which control-plane ids the key may claim
 * ("train.0", "decode.*"): libzmq hands that to every message as its "User-Id", and the
 * control server checks the id a peer claims against it (control.c).
 *
 * Files, all written by `selfsup keygen`:
 *   a keypair file    lines "public KEY" and "secret KEY" (Z85), mode 0600, no group or
 *                     other access (refused otherwise, as ssh refuses open keys)
 *   a client's file   the same plus "server KEY": the public key of the server it trusts
 *   a key directory   what a server loads: DIR/server.key, its keypair, and DIR/clients,
 *                     the allow-list, one client a line: "KEY IDS [NAME]", IDS a comma-
 *                     separated list of ids where '*' matches any characters, NAME for logs;
 *                     '#' starts a comment line. The allow-list must not be writable by
 *                     others.
 *
 * The ZAP handler (ZeroMQ's RFC 27) is a REP socket at inproc://zeromq.zap.01 served by a
 * thread of its own, one per ZeroMQ context that has a CURVE server: libzmq asks it during
 * each handshake, from its I/O thread, whether or not the socket's owner is polling (the
 * orchestrator polls its ROUTER in its own loop, a stage only between records), so a thread
 * that always answers keeps handshakes independent of the owner. Each server socket gets a
 * ZAP domain of its own, which selects its allow-list. ZAP_ENFORCE_DOMAIN is set where libzmq
 * has it, so that a handshake without a handler is refused rather than admitted. A refused
 * key is logged once (per server), not once per attempt.
 */
#ifndef SELFSUP_AUTH_H
#define SELFSUP_AUTH_H

#include <stdbool.h>

#define AUTH_KEY_LEN 40 /* a Z85 CURVE key */

/* The metadata property, beside "User-Id", that names the client key of a message. */
#define AUTH_KEY_PROPERTY "X-Selfsup-Key"

typedef struct {
    char public_key[AUTH_KEY_LEN + 1];
    char secret_key[AUTH_KEY_LEN + 1];
    char server_key[AUTH_KEY_LEN + 1]; /* a client's: the server it trusts; "" for a server */
} auth_keys;

typedef enum { AUTH_SERVER, AUTH_CLIENT } auth_role;

typedef struct {
    char key[AUTH_KEY_LEN + 1];
    char *ids;  /* "train.0", "decode.*,augment.*" */
    char *name; /* for the logs */
} auth_client;

typedef struct {
    auth_client *v;
    int n;
} auth_allow;

/* 0, or -1 with *err when this libzmq has no CURVE; `what` names what wanted it. */
int auth_need_curve(const char *what, char **err);

/* ---- keys ------------------------------------------------------------------------------------ */

/* A fresh keypair; server_key (may be NULL) is the server a client will trust. */
int auth_new_keys(auth_keys *k, const char *server_key, char **err);
/* Load a keypair file for `role`: a server's must not have a "server" line, a client's must. */
int auth_load_keys(const char *path, auth_role role, auth_keys *k, char **err);
/* Write k (with its "server" line when it has one) to path, mode 0600, atomically. */
int auth_write_keys(const char *path, const auth_keys *k, char **err);
/* Forget the secret (explicit_bzero). */
void auth_wipe(auth_keys *k);

/* ---- allow-lists ----------------------------------------------------------------------------- */

/* Add a client; ids as in the file. -1 with *err for a bad key or ids. */
int auth_allow_add(auth_allow *a, const char *key, const char *ids, const char *name, char **err);
/* Add the clients of an allow-list file (which must list at least one). */
int auth_allow_load(auth_allow *a, const char *path, char **err);
/* Write `a` as an allow-list file (mode 0644, atomically). */
int auth_write_allow(const char *path, const auth_allow *a, char **err);
void auth_allow_free(auth_allow *a);
/* Does the comma-separated pattern list `ids` allow the id? */
bool auth_ids_match(const char *ids, const char *id);
/* Whether ids is a valid list: patterns of letters, digits, '.', '_', '-' and '*'. */
bool auth_ids_valid(const char *ids);
/* A server's key directory: DIR/server.key into k, DIR/clients added to a. */
int auth_load_server_dir(const char *dir, auth_keys *k, auth_allow *a, char **err);

/* ---- sockets --------------------------------------------------------------------------------- */

typedef struct auth_server auth_server;

/* Make `sock` (of context ctx, not yet bound) a CURVE server with keys k that admits only the
 * clients of `allow` (copied). `what` names the endpoint in log lines. NULL + *err on failure. */
auth_server *auth_server_start(void *ctx, void *sock, const auth_keys *k, const auth_allow *allow, const char *what,
                               char **err);
/* Forget the server's allow-list; the last server of a context stops its ZAP handler, which is
 * a socket of that context, so call it before the context is terminated. Safe on NULL. */
void auth_server_stop(auth_server *s);
/* Make `sock` a CURVE client with k's keypair, trusting k's server key. */
int auth_client_setup(void *sock, const auth_keys *k, char **err);

#endif

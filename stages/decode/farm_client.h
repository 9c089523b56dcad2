/*
 * farm_client.h — a farm host's side of the decode farm: selfsup-decode --lease asks the
 * trainer host's collate (collate/farm_server.h, which also describes the protocol) for
 * leases of sampler positions, and decodes those.
 *
 * One question at a time: the client asks for a lease whenever it holds fewer than two (the
 * one being decoded and the next), so a new lease is there when the current one ends. It
 * beats once a second from the stage's poll hook, also while the stage waits on a full ring,
 * and the server answers each beat. The server silent for SELFSUP.FARM.HOST_TIMEOUT_S once
 * it has answered means the trainer's side is gone: the client fails. Before its first
 * answer the client waits without limit (a farm may be started before its trainer), saying
 * so every 30 s.
 */
#ifndef SELFSUP_FARM_CLIENT_H
#define SELFSUP_FARM_CLIENT_H

#include "stage.h"

#include <stdint.h>

typedef struct farm_client farm_client;

typedef struct {
    uint64_t id;
    uint32_t epoch;
    uint64_t start, end;
} farm_lease;

/* Connect to the lease server as `id` ("farm.N"; tcp needs key_file, auth.h), say hello with
 * the epoch's length, and hook into the stage's polls. NULL + *err. */
farm_client *farm_client_open(stage *s, const char *endpoint, const char *id, const char *key_file, uint64_t samples,
                              double timeout_s, char **err);
/* The next lease to decode: 1 with *out; 0 when the run is done, or the stage is stopping;
 * -1 on a failure (logged: the server refused us, or went silent). Waits as long as the
 * server says "wait", serving the stage's control plane meanwhile. */
int farm_client_next(farm_client *c, farm_lease *out);
/* Whether the server has said the run is done (the rest of a lease need not be decoded). */
bool farm_client_done(const farm_client *c);
/* This host's augment stages have left (their reader, the trainer host's collate, is gone):
 * wait for the server's word. 0 when it says the run is done; -1 (logged) when it falls silent
 * for the host timeout (the trainer's side is gone) or a stop is asked for. */
int farm_client_await_end(farm_client *c);
/* Say bye (when finished), disconnect. Safe on NULL. */
void farm_client_close(farm_client *c, bool finished);

#endif

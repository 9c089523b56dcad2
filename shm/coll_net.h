/*
 * coll_net.h — the collectives of collective.h among processes on several machines: trainers
 * on CPU nodes, which VISSL runs under torch.distributed's gloo across the network.
 *
 * Rank 0 listens at the world's address (DISTRIBUTED.RUN_ID, "HOST:PORT", as VISSL's tcp
 * INIT_METHOD); every other rank connects to it, wherever it runs. The connections are
 * ZeroMQ over tcp with CURVE (auth.h), as every tcp endpoint of selfsup is: rank 0 loads a
 * server's key directory and admits only the client keys of its allow-list whose ids allow
 * "world.<rank>"; each other rank has a client key file.
 *
 * The promises are collective.h's, the same bits included: rank 0 collects every rank's
 * values and combines them in rank order with the arithmetic of the shm world, then sends
 * every rank the result (a star: rank 0's link carries 2 × (world - 1) buffers a call, which
 * is what keeps a sum's order independent of the network). So a model trained on two
 * machines gets exactly the weights it gets from the same ranks on one. Buffers travel in
 * pieces (piece_bytes), each rank sending its next piece once the result's last is back: rank
 * 0 holds one piece a rank, and ZeroMQ, which moves a message of tens of MB far slower than
 * a few smaller ones, moves pieces.
 *
 * Failure: a rank whose process ends closes its connection, and rank 0 breaks the world at
 * once naming it; a host that vanishes is found by ZeroMQ's heartbeats (within
 * COLL_NET_HEARTBEAT_TIMEOUT_MS); a rank that does not come within timeout_ms is named too.
 * Every rank gets rank 0's message; rank 0 gone, the others say so.
 */
#ifndef SELFSUP_COLL_NET_H
#define SELFSUP_COLL_NET_H

#include "collective.h"

#define COLL_NET_HEARTBEAT_TIMEOUT_MS 10000

typedef struct {
    int timeout_ms;       /* how long a rank waits for the others, at joining and in every call */
    const char *keys_dir; /* rank 0: its key directory (server.key, clients) */
    const char *key_file; /* the other ranks: a client key file (the keypair and rank 0's public key) */
    size_t piece_bytes;   /* values a message carries at most (0: 8 MiB); the same on every rank */
} coll_net_options;

/* Join the world of `world` ranks that meets at address "HOST:PORT" as `rank` (rank 0
 * listens on every interface at PORT). Returns once every rank has joined, or NULL with *err
 * (a rank missing after timeout_ms, a key refused, a world of another size). */
coll *coll_net_join(const char *address, int rank, int world, const coll_net_options *o, char **err);

#endif

/*
 * coll_watch.h — a world watched from a thread of its own, for a world that cannot notice a
 * lost rank itself.
 *
 * NCCL's kernels wait for a dead peer for good, and so does every host call behind them
 * (nn/cuda/coll_nccl.h). Ranks on several nodes meet first in a world of host memory (the
 * network world of coll_net.h) that does notice: a closed connection, or a host silent past
 * its heartbeat timeout. That world makes no calls once NCCL's is up; this thread checks it
 * every interval (coll_check_peers) and, when a rank is lost, calls `lost` once with the
 * message naming it. A rank that ends with coll_finish is not lost.
 *
 * The thread owns the world while it watches: the caller makes no call on it until
 * coll_watch_stop, which hands it back.
 */
#ifndef SELFSUP_COLL_WATCH_H
#define SELFSUP_COLL_WATCH_H

#include "collective.h"

typedef struct coll_watch coll_watch;

/* Called once, on the watching thread, with the message naming the lost rank. */
typedef void (*coll_lost_fn)(const char *why, void *arg);

/* Watch `world` every interval_ms; `what` names what the others wait for, in the message.
 * NULL with *err if the thread cannot start. */
coll_watch *coll_watch_start(coll *world, int interval_ms, const char *what, coll_lost_fn lost, void *arg,
                             char **err);

/* Stop watching (the world is the caller's again); safe on NULL. */
void coll_watch_stop(coll_watch *w);

#endif

/*
 * coll_nccl.h — the collectives of shm/collective.h across GPUs, on NCCL: one process per GPU,
 * on one node or several (DISTRIBUTED.BACKEND: nccl), as VISSL's torch.distributed runs them.
 *
 * The orchestrator makes the world's id once (coll_nccl_unique_id, printable as hex) and hands
 * it to every trainer (--coll nccl:HEX); each joins as its rank on its local GPU. Across nodes
 * rank 0 hands it out through a bootstrap world (coll_nccl_join_via). NCCL moves
 * device memory itself, so the world takes device pointers (coll_*_device: the gradients, the
 * weights and buffers broadcast from rank 0, SimCLR's gathered embeddings, with no copy through
 * the host); the host calls (the losses' double sums, the meters' counts) are staged through a
 * device buffer. Every call waits for NCCL to finish on the world's stream.
 *
 * What differs from the shm world: NCCL sums in the order of its ring or tree, not in rank
 * order, so the bits depend on the world's size and NCCL's choice of algorithm (the same on
 * every rank of one run, so the ranks stay one model; NCCL_ALGO pins it). MEAN is NCCL's
 * average (the sum scaled by 1/W), where DDP divides first.
 *
 * A dead rank: NCCL itself would wait for it for good. On one node the orchestrator sees the
 * death and stops the run (survivors get SIGKILL after the grace). Across nodes a world joined
 * through a bootstrap world keeps that world, watched (shm/coll_watch.h): a rank lost there
 * (its process gone, its host silent past the heartbeat timeout) ends this process with
 * EXIT_RUNTIME after logging the message that names it, so every node's orchestrator stops its
 * part of the run. A rank done ends with coll_finish, which is no loss.
 */
#ifndef SELFSUP_NN_CUDA_COLL_NCCL_H
#define SELFSUP_NN_CUDA_COLL_NCCL_H

#include "collective.h"

/* ncclUniqueId is 128 bytes: 256 hex digits. */
#define COLL_NCCL_ID_HEX 256

/* A new world id, as hex (hex holds COLL_NCCL_ID_HEX + 1 chars). Needs no GPU. 0, or -1 with
 * *err. */
int coll_nccl_unique_id(char *hex, char **err);

/* Join the world of `world` ranks the hex id names, as `rank`, on GPU `device` (made the
 * process's current device). Returns once every rank has joined, or NULL with *err (a bad id,
 * no such GPU, NCCL's own failure). */
coll *coll_nccl_join(const char *hex, int rank, int world, int device, char **err);

/* GPUs on several nodes, whose orchestrators share no id: the ranks meet first in `bootstrap`,
 * a world of host memory (shm/coll_net.h at DISTRIBUTED.RUN_ID), where rank 0 makes the id and
 * broadcasts it, as torch's TCPStore hands it out; then each joins as coll_nccl_join does. The
 * NCCL world takes bootstrap and watches it (above); it is closed with the NCCL world, or at
 * once when the join fails. NULL with *err (rank 0's failure to make an id is every rank's). */
coll *coll_nccl_join_via(coll *bootstrap, int device, char **err);

#endif

/*
 * dist.h — the trainer's side of data parallelism: several trainers, one model.
 *
 * What torch's DistributedDataParallel does for VISSL, on the collectives of shm/collective.h:
 * rank 0's parameters and buffers go to every rank when the model is built (and again after a
 * resume), rank 0's buffers (BatchNorm's running statistics) before every training forward
 * (DDP's broadcast_buffers), and after every backward each gradient becomes the mean over the
 * ranks, computed as DDP's default hook computes it: each rank divides its own by the world
 * size, then the ranks' values are summed (in rank order: every rank gets the same bits, so the
 * ranks stay one model). The logged loss is the mean of the ranks' losses (VISSL's
 * all_reduce_mean).
 *
 * The losses use the same world for what they compute over every rank's rows: SimCLR's
 * gather_from_all (dist_all_gather forward, dist_sum of the gathered rows' gradients backward,
 * as VISSL's GatherLayer) and SwAV's Sinkhorn sums (dist_reduce, in double).
 *
 * Tensors move through host buffers (eng_download, the collective, eng_upload): the shm
 * collectives work on host memory, and on the cpu backend that is a copy each way. A world of
 * GPUs (NCCL) takes the tensors' device memory as it is (eng_device_address).
 */
#ifndef SELFSUP_TRAIN_DIST_H
#define SELFSUP_TRAIN_DIST_H

#include "collective.h"
#include "nn.h"
#include "params.h"

typedef struct dist {
    coll *world; /* NULL: one trainer, and every call below does nothing (so too for a NULL dist) */
    float *host[2]; /* what is sent, what is received (all-gather) */
    size_t cap[2];
} dist;

/* This trainer's rank and the world's size (0 and 1 for one trainer, or d NULL). */
int dist_rank(const dist *d);
int dist_world(const dist *d);

/* t's values on every rank become rank 0's. 0, or -1 with *err (a collective that failed). */
int dist_broadcast(dist *d, eng_backend *be, const eng_tensor *t, char **err);
/* t becomes the mean over the ranks (divided by the world size, then summed). */
int dist_average(dist *d, eng_backend *be, const eng_tensor *t, char **err);
/* dist_average, started: on a world that queues device work (NCCL) it runs while the caller
 * queues more (DDP's bucketed all-reduce overlapping the backward), and the backend's work
 * queued after dist_join waits for it; elsewhere it is done on return, and dist_join does
 * nothing. */
int dist_average_start(dist *d, eng_backend *be, const eng_tensor *t, char **err);
int dist_join(dist *d, eng_backend *be, char **err);
/* t becomes the sum over the ranks. */
int dist_sum(dist *d, eng_backend *be, const eng_tensor *t, char **err);
/* all (world × local's rows) becomes every rank's local, in rank order. One trainer: a copy. */
int dist_all_gather(dist *d, eng_backend *be, const eng_tensor *local, const eng_tensor *all, char **err);
/* v[0..n) becomes the sum (max: the maximum) over the ranks, in double, in rank order. */
int dist_reduce(dist *d, double *v, size_t n, bool max, char **err);
/* Every rank's own state (its n entries: SwAV's queues), for rank 0's checkpoint: on rank 0,
 * *out becomes the other ranks' entries, rank r's entry i named "rank<r>.<entry i's name>" (the
 * name rank r's own entry has: loss.h), (world − 1)·n of them owning their tensors; elsewhere,
 * and for one trainer, none. Every rank calls it. 0, or -1 with *err. */
int dist_gather_entries(dist *d, eng_backend *be, const eng_entry *entries, int n, eng_entry **out, int *nout,
                        char **err);
void dist_entries_free(eng_backend *be, eng_entry *entries, int n);
/* *v becomes the mean of the ranks' values (summed in rank order, divided by the world size). */
int dist_mean(dist *d, double *v, char **err);
/* v[0..n) becomes the sum over the ranks, exactly (a meter's counts). */
int dist_sum_counts(dist *d, int64_t *v, size_t n, char **err);
/* Every rank's n rows of row_bytes each (the ranks' n may differ) into *all (a new allocation,
 * free it), rank 0's first, *total rows in all: VISSL's gather_from_all of a meter's state. One
 * trainer: a copy. The bytes travel unchanged. 0, or -1 with *err (*all NULL). */
int dist_gather_rows(dist *d, const void *rows, size_t row_bytes, int64_t n, void **all, int64_t *total,
                     char **err);
void dist_free(dist *d);

/* SyncBN's group (MODEL.SYNC_BN_CONFIG.GROUP_SIZE): ranks [first, first + size) of the world,
 * this rank among them. Its reducer (nn.h) sums over the group in rank order: every rank's
 * values are gathered (the world's collectives have no subgroups) and the group's added up.
 * A failure is kept (the batch norms go on with the rank's own values) for dist_group_check. */
typedef struct {
    dist *d;
    int first, size;
    double *all; /* world × n values */
    size_t cap;
    char *err; /* the first failure, NULL */
    eng_reducer reducer;
} dist_group;

/* The group of `size` ranks (a divisor of the world size) this rank is in. */
void dist_group_init(dist_group *g, dist *d, int size);
/* 0, or -1 with *err (the group's first failure, handed over) once a reduction failed. */
int dist_group_check(dist_group *g, char **err);
void dist_group_free(dist_group *g);

#endif

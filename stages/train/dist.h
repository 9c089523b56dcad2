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
 * Tensors move through a host buffer (eng_download, the collective, eng_upload): the shm
 * collectives work on host memory, and on the cpu backend that is a copy each way.
 */
#ifndef SELFSUP_TRAIN_DIST_H
#define SELFSUP_TRAIN_DIST_H

#include "collective.h"
#include "nn.h"

typedef struct {
    coll *world; /* NULL: one trainer, and every call below does nothing */
    float *host;
    size_t cap;
} dist;

/* t's values on every rank become rank 0's. 0, or -1 with *err (a collective that failed). */
int dist_broadcast(dist *d, eng_backend *be, const eng_tensor *t, char **err);
/* t becomes the mean over the ranks (divided by the world size, then summed). */
int dist_average(dist *d, eng_backend *be, const eng_tensor *t, char **err);
/* *v becomes the mean of the ranks' values (summed in rank order, divided by the world size). */
int dist_mean(dist *d, double *v, char **err);
/* v[0..n) becomes the sum over the ranks, exactly (a meter's counts). */
int dist_sum_counts(dist *d, int64_t *v, size_t n, char **err);
void dist_free(dist *d);

#endif

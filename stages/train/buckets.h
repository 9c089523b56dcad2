/*
 * buckets.h — DDP's gradient buckets: the all-reduce of a bucket of gradients starts as soon as
 * the backward has written them for the last time, while it goes on with earlier layers.
 *
 * torch's DistributedDataParallel (which VISSL wraps every model in, with bucket_cap_mb =
 * DATA.DDP_BUCKET_CAP_MB) groups the parameters into buckets in the order their gradients
 * become ready, the reverse of the model's: a bucket is closed once it holds at least its limit
 * of bytes, 1 MiB for the first (dist._DEFAULT_FIRST_BUCKET_BYTES, so that communication starts
 * early) and DDP_BUCKET_CAP_MB MiB for every other. This is the assignment DDP rebuilds after
 * its first iteration from the order it saw (Reducer::rebuild_buckets); ours is that order from
 * the start, as the backward reports it (model_backward_watched). A bucket is a run of
 * consecutive entries, so its gradients are one range of model_grads, all-reduced in place.
 *
 * On an NCCL world the buckets' all-reduces are queued on the world's stream and overlap the
 * rest of the backward; on the shm world (CPU) each is done when it is started, which computes
 * the same bits as one all-reduce of every gradient (each value is its ranks' values summed in
 * rank order either way) at no gain: the CPU's cores are the backward's.
 */
#ifndef SELFSUP_TRAIN_BUCKETS_H
#define SELFSUP_TRAIN_BUCKETS_H

#include "model.h"
#include "train/dist.h"

#include <stddef.h>

/* DDP's first bucket's limit (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES). */
#define GRAD_BUCKETS_FIRST_BYTES ((size_t)1 << 20)

typedef struct {
    int first, end;       /* entries [first, end) of the model */
    eng_tensor grads;     /* their gradients: a range of model_grads */
} grad_bucket;

typedef struct {
    grad_bucket *b;       /* in the order they become ready: the model's last entries first */
    int n;
    int started;          /* buckets started in this backward */
    dist *d;
    eng_backend *be;
    char *err;            /* the first failure of this backward, NULL */
} grad_buckets;

/* The buckets of m's parameters for limits of cap_bytes (the first bucket's: first_bytes). */
void grad_buckets_plan(grad_buckets *g, const model *m, size_t first_bytes, size_t cap_bytes, dist *d,
                       eng_backend *be);
void grad_buckets_free(grad_buckets *g);

/* For model_backward_watched: each bucket whose gradients are final is started (dist_average_
 * start), in order. Call grad_buckets_finish after the backward. */
eng_grads_ready grad_buckets_watch(grad_buckets *g);
/* Starts what the backward left (every bucket, for a backward that was not watched), then makes
 * the backend's next work wait for them all. 0, or -1 with *err (the first failure). */
int grad_buckets_finish(grad_buckets *g, char **err);

#endif

/*
 * dist.c — one model over the ranks of a world (see dist.h).
 */
#include "train/dist.h"

#include "util.h"

#include <stdlib.h>

/* The host buffer, big enough for t, with t's values in it (download: true). */
static float *staged(dist *d, eng_backend *be, const eng_tensor *t, bool download)
{
    size_t n = (size_t)eng_numel(&t->shape);
    if (n > d->cap) {
        free(d->host);
        d->host = xmalloc((n ? n : 1) * sizeof *d->host);
        d->cap = n;
    }
    if (download)
        eng_download(be, t, d->host);
    return d->host;
}

int dist_broadcast(dist *d, eng_backend *be, const eng_tensor *t, char **err)
{
    if (!d->world || eng_numel(&t->shape) == 0) /* every rank has the same model: all skip it */
        return 0;
    bool root = coll_rank(d->world) == 0;
    float *h = staged(d, be, t, root);
    if (coll_broadcast(d->world, h, (size_t)eng_numel(&t->shape), COLL_F32, 0, err) != 0)
        return -1;
    if (!root)
        eng_upload(be, t, h);
    return 0;
}

int dist_average(dist *d, eng_backend *be, const eng_tensor *t, char **err)
{
    if (!d->world || eng_numel(&t->shape) == 0) /* a LayerNorm model's buffers: none */
        return 0;
    size_t n = (size_t)eng_numel(&t->shape);
    float *h = staged(d, be, t, true), w = (float)coll_world(d->world);
    for (size_t i = 0; i < n; i++)
        h[i] = h[i] / w;
    if (coll_all_reduce(d->world, h, n, COLL_F32, COLL_SUM, err) != 0)
        return -1;
    eng_upload(be, t, h);
    return 0;
}

int dist_mean(dist *d, double *v, char **err)
{
    if (!d->world)
        return 0;
    float x = (float)*v;
    if (coll_all_reduce(d->world, &x, 1, COLL_F32, COLL_MEAN, err) != 0)
        return -1;
    *v = x;
    return 0;
}

/* The counts travel as bytes (an all-gather of pairs of fp32 words copies them unchanged) and
 * are summed here as integers, exactly at any size. */
int dist_sum_counts(dist *d, int64_t *v, size_t n, char **err)
{
    if (!d->world)
        return 0;
    size_t world = (size_t)coll_world(d->world);
    int64_t *all = xmalloc((world * n + 1) * sizeof *all);
    int rc = coll_all_gather(d->world, v, all, 2 * n, COLL_F32, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        v[i] = 0;
        for (size_t r = 0; r < world; r++)
            v[i] += all[r * n + i];
    }
    free(all);
    return rc;
}

void dist_free(dist *d)
{
    free(d->host);
    *d = (dist){0};
}

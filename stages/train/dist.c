/*
 * dist.c — one model over the ranks of a world (see dist.h).
 */
#include "train/dist.h"

#include "util.h"

#include <stdlib.h>
#include <string.h>

/* One trainer: no dist at all (a loss state made without a world), or one that joined none. */
static bool alone(const dist *d) { return !d || !d->world; }

int dist_rank(const dist *d) { return alone(d) ? 0 : coll_rank(d->world); }
int dist_world(const dist *d) { return alone(d) ? 1 : coll_world(d->world); }

/* t's device address when the world moves device memory itself (NCCL) and t is in a GPU's:
 * then the tensor goes to the collective as it is, with no copy through the host. */
static void *on_device(const dist *d, eng_backend *be, const eng_tensor *t)
{
    return coll_takes_device(d->world) ? eng_device_address(be, t) : NULL;
}

/* Host buffer k (0: what is sent, 1: what is received), room for n values. */
static float *host_buffer(dist *d, int k, size_t n)
{
    if (n > d->cap[k]) {
        free(d->host[k]);
        d->host[k] = xmalloc((n ? n : 1) * sizeof *d->host[k]);
        d->cap[k] = n;
    }
    return d->host[k];
}

/* Host buffer 0 with t's values in it (download: true). */
static float *staged(dist *d, eng_backend *be, const eng_tensor *t, bool download)
{
    float *h = host_buffer(d, 0, (size_t)eng_numel(&t->shape));
    if (download)
        eng_download(be, t, h);
    return h;
}

int dist_broadcast(dist *d, eng_backend *be, const eng_tensor *t, char **err)
{
    if (alone(d) || eng_numel(&t->shape) == 0) /* every rank has the same model: all skip it */
        return 0;
    void *dev = on_device(d, be, t);
    if (dev)
        return coll_broadcast_device(d->world, dev, (size_t)eng_numel(&t->shape), COLL_F32, 0, err);
    bool root = coll_rank(d->world) == 0;
    float *h = staged(d, be, t, root);
    if (coll_broadcast(d->world, h, (size_t)eng_numel(&t->shape), COLL_F32, 0, err) != 0)
        return -1;
    if (!root)
        eng_upload(be, t, h);
    return 0;
}

/* t becomes the sum over the ranks of t / divisor: DDP's hook divides (x / W, which rounds
 * unlike x · (1/W)) before it sums; divisor 1 leaves t as it is. */
static int sum_divided(dist *d, eng_backend *be, const eng_tensor *t, float divisor, char **err)
{
    if (alone(d) || eng_numel(&t->shape) == 0) /* a LayerNorm model's buffers: none */
        return 0;
    size_t n = (size_t)eng_numel(&t->shape);
    void *dev = on_device(d, be, t);
    if (dev) /* NCCL's average scales the sum by 1/W (coll_nccl.h) */
        return coll_all_reduce_device(d->world, dev, n, COLL_F32, divisor == 1.0f ? COLL_SUM : COLL_MEAN, err);
    float *h = staged(d, be, t, true);
    for (size_t i = 0; divisor != 1.0f && i < n; i++)
        h[i] = h[i] / divisor;
    if (coll_all_reduce(d->world, h, n, COLL_F32, COLL_SUM, err) != 0)
        return -1;
    eng_upload(be, t, h);
    return 0;
}

int dist_average(dist *d, eng_backend *be, const eng_tensor *t, char **err)
{
    return sum_divided(d, be, t, (float)dist_world(d), err);
}

/* The backend's queue when the world queues device work behind it (NCCL), else NULL. */
static void *queue_of(const dist *d, eng_backend *be)
{
    return alone(d) || !coll_queues_device(d->world) ? NULL : eng_device_queue(be);
}

int dist_average_start(dist *d, eng_backend *be, const eng_tensor *t, char **err)
{
    void *queue = queue_of(d, be);
    if (!queue || eng_numel(&t->shape) == 0)
        return dist_average(d, be, t, err);
    return coll_all_reduce_device_queued(d->world, eng_device_address_queued(be, t), (size_t)eng_numel(&t->shape),
                                         COLL_F32, COLL_MEAN, queue, err);
}

int dist_join(dist *d, eng_backend *be, char **err)
{
    void *queue = queue_of(d, be);
    return queue ? coll_device_join(d->world, queue, err) : 0;
}

int dist_sum(dist *d, eng_backend *be, const eng_tensor *t, char **err)
{
    return sum_divided(d, be, t, 1.0f, err);
}

int dist_all_gather(dist *d, eng_backend *be, const eng_tensor *local, const eng_tensor *all, char **err)
{
    if (alone(d)) {
        eng_copy(be, local, all);
        return 0;
    }
    size_t n = (size_t)eng_numel(&local->shape), world = (size_t)coll_world(d->world);
    void *send_dev = on_device(d, be, local), *recv_dev = send_dev ? eng_device_address(be, all) : NULL;
    if (recv_dev)
        return coll_all_gather_device(d->world, send_dev, recv_dev, n, COLL_F32, err);
    float *send = staged(d, be, local, true), *recv = host_buffer(d, 1, world * n);
    if (coll_all_gather(d->world, send, recv, n, COLL_F32, err) != 0)
        return -1;
    eng_upload(be, all, recv);
    return 0;
}

int dist_reduce(dist *d, double *v, size_t n, bool max, char **err)
{
    if (alone(d))
        return 0;
    return coll_all_reduce(d->world, v, n, COLL_F64, max ? COLL_MAX : COLL_SUM, err);
}

/* Entry e of every rank into out[(r − 1)·n] for r ≥ 1 (rank 0 only). */
static int gather_entry(dist *d, eng_backend *be, const eng_entry *e, eng_entry *out, int n, char **err)
{
    int64_t m = eng_numel(&e->value.shape), world = coll_world(d->world);
    eng_tensor all = eng_tensor_new(be, eng_shape2(world, m));
    eng_tensor flat = eng_reshape(&e->value, eng_shape2(1, m));
    int rc = dist_all_gather(d, be, &flat, &all, err);
    for (int64_t r = 1; rc == 0 && coll_rank(d->world) == 0 && r < world; r++) {
        eng_entry *o = &out[(r - 1) * n];
        eng_tensor row = eng_rows(be, &all, r, 1);
        *o = (eng_entry){.name = xasprintf("rank%lld.%s", (long long)r, e->name),
                         .kind = e->kind,
                         .value = eng_tensor_new(be, e->value.shape)};
        eng_copy(be, &row, &o->value);
    }
    eng_tensor_free(be, &all);
    return rc;
}

int dist_gather_entries(dist *d, eng_backend *be, const eng_entry *entries, int n, eng_entry **out, int *nout,
                        char **err)
{
    *out = NULL;
    *nout = 0;
    if (alone(d) || n == 0)
        return 0;
    int world = coll_world(d->world), got = coll_rank(d->world) == 0 ? (world - 1) * n : 0;
    eng_entry *all = got ? xcalloc((size_t)got, sizeof *all) : NULL; /* only rank 0 keeps them */
    for (int i = 0; i < n; i++)
        if (gather_entry(d, be, &entries[i], all ? all + i : NULL, n, err) != 0) {
            dist_entries_free(be, all, got);
            return -1;
        }
    *out = all;
    *nout = got;
    return 0;
}

void dist_entries_free(eng_backend *be, eng_entry *entries, int n)
{
    for (int i = 0; i < n; i++)
        if (entries[i].name) {
            free((char *)entries[i].name);
            eng_tensor_free(be, &entries[i].value);
        }
    free(entries);
}

int dist_mean(dist *d, double *v, char **err)
{
    if (alone(d))
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
    if (alone(d))
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

/* counts[r] = rank r's n, for every r; the largest into *most, the sum into *total. */
static int row_counts(dist *d, int64_t n, int64_t *counts, int64_t *most, int64_t *total, char **err)
{
    counts[dist_rank(d)] = n;
    int rc = dist_sum_counts(d, counts, (size_t)dist_world(d), err);
    *most = *total = 0;
    for (int r = 0; r < dist_world(d); r++) {
        *most = counts[r] > *most ? counts[r] : *most;
        *total += counts[r];
    }
    return rc;
}

/* Every rank's rows padded to the largest count (an all-gather of fp32 words, which copies
 * bytes unchanged), then packed back in rank order. */
int dist_gather_rows(dist *d, const void *rows, size_t row_bytes, int64_t n, void **all, int64_t *total,
                     char **err)
{
    int world = dist_world(d);
    int64_t *counts = xcalloc((size_t)world, sizeof *counts), most;
    int rc = row_counts(d, n, counts, &most, total, err);
    size_t words = ((size_t)most * row_bytes + sizeof(float) - 1) / sizeof(float);
    float *mine = xcalloc(words + 1, sizeof *mine), *every = xcalloc((size_t)world * words + 1, sizeof *every);
    if (n)
        memcpy(mine, rows, (size_t)n * row_bytes);
    if (rc == 0 && !alone(d))
        rc = coll_all_gather(d->world, mine, every, words, COLL_F32, err);
    else if (rc == 0)
        memcpy(every, mine, words * sizeof *mine);
    char *out = *all = rc == 0 ? xmalloc((size_t)*total * row_bytes + 1) : NULL;
    for (int r = 0; out && r < world; r++) {
        memcpy(out, every + (size_t)r * words, (size_t)counts[r] * row_bytes);
        out += (size_t)counts[r] * row_bytes;
    }
    free(counts), free(mine), free(every);
    return rc;
}

/* eng_reducer's reduce for a dist_group: the world's values gathered, the group's combined in
 * rank order. */
static int group_reduce(void *ctx, double *v, size_t n, bool max)
{
    dist_group *g = ctx;
    size_t world = (size_t)coll_world(g->d->world);
    if (world * n > g->cap) {
        free(g->all);
        g->all = xmalloc(world * n * sizeof *g->all);
        g->cap = world * n;
    }
    char *why = NULL;
    if (coll_all_gather(g->d->world, v, g->all, n, COLL_F64, &why) != 0) {
        if (!g->err)
            g->err = why;
        else
            free(why);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        double acc = g->all[(size_t)g->first * n + i];
        for (int r = g->first + 1; r < g->first + g->size; r++) {
            double x = g->all[(size_t)r * n + i];
            acc = !max ? acc + x : acc > x || acc != acc ? acc : x;
        }
        v[i] = acc;
    }
    return 0;
}

void dist_group_init(dist_group *g, dist *d, int size)
{
    *g = (dist_group){.d = d, .size = size, .first = dist_rank(d) / size * size};
    g->reducer = (eng_reducer){.reduce = group_reduce, .ctx = g, .world = size};
}

int dist_group_check(dist_group *g, char **err)
{
    if (!g->err)
        return 0;
    *err = g->err;
    g->err = NULL;
    return -1;
}

void dist_group_free(dist_group *g)
{
    free(g->all);
    free(g->err);
    *g = (dist_group){0};
}

void dist_free(dist *d)
{
    free(d->host[0]);
    free(d->host[1]);
    *d = (dist){0};
}

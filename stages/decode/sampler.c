/*
 * sampler.c — VISSL's samplers, with lib/rng's counter-based shuffle in place of torch's
 * randperm (the order differs from PyTorch's, the structure does not):
 *
 *   distributed  torch's DistributedSampler(shuffle=True, drop_last=False): permute the
 *                whole dataset with the epoch's seed, pad it to a multiple of the world
 *                size by repeating its start, and give rank r the items r, r+W, r+2W, ...
 *                Every rank shuffles the full permutation (VISSL's reason for the other).
 *   stateful     VISSL's StatefulDistributedSampler: drop the last len % W samples, give
 *                rank r the contiguous shard [r·n, (r+1)·n) and permute only that.
 *   debugging    the distributed layout without shuffling.
 *
 * The permutation is a pure function of (SEED_VALUE, epoch): every rank computes the same
 * one, and a resumed run sees the same order as an uninterrupted one.
 */
#include "sampler.h"

#include "rng.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>

size_t decode_sampler_len(const decode_sampler *s)
{
    size_t w = (size_t)s->world_size;
    if (s->kind == DECODE_SAMPLER_STATEFUL)
        return s->dataset_len / w;
    return (s->dataset_len + w - 1) / w; /* ceil: DistributedSampler pads */
}

static void permutation(const decode_sampler *s, uint32_t epoch, size_t n, size_t *perm)
{
    rng_stream st;
    rng_stream_init(&st, (rng_key){.seed = s->seed, .purpose = RNG_PURPOSE_SAMPLER, .epoch = epoch});
    rng_permutation(&st, n, perm);
}

static void distributed(const decode_sampler *s, uint32_t epoch, bool shuffle, size_t *out)
{
    size_t n = s->dataset_len, w = (size_t)s->world_size, per_rank = decode_sampler_len(s);
    size_t *order = xmalloc((n ? n : 1) * sizeof *order);
    if (shuffle)
        permutation(s, epoch, n, order);
    else
        for (size_t i = 0; i < n; i++)
            order[i] = i;
    /* Position p of the padded list is order[p mod n]: torch repeats the start as often as
     * needed when the padding is longer than the list. */
    for (size_t k = 0; k < per_rank; k++)
        out[k] = order[((size_t)s->rank + k * w) % n];
    free(order);
}

static void stateful(const decode_sampler *s, uint32_t epoch, size_t *out)
{
    size_t per_rank = decode_sampler_len(s);
    permutation(s, epoch, per_rank, out);
    for (size_t k = 0; k < per_rank; k++)
        out[k] += (size_t)s->rank * per_rank;
}

void decode_sampler_epoch(const decode_sampler *s, uint32_t epoch, size_t *out)
{
    if (s->dataset_len == 0)
        return;
    switch (s->kind) {
    case DECODE_SAMPLER_STATEFUL: stateful(s, epoch, out); break;
    case DECODE_SAMPLER_DEBUGGING: distributed(s, epoch, false, out); break;
    default: distributed(s, epoch, true, out); break;
    }
}

/*
 * sampler.h — the order in which one rank visits the dataset in one epoch: VISSL's samplers.
 */
#ifndef SELFSUP_DECODE_SAMPLER_H
#define SELFSUP_DECODE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DECODE_SAMPLER_DISTRIBUTED, /* torch DistributedSampler (VISSL's default) */
    DECODE_SAMPLER_STATEFUL,    /* VISSL's StatefulDistributedSampler */
    DECODE_SAMPLER_DEBUGGING,   /* DistributedSampler without shuffling */
} decode_sampler_kind;

typedef struct {
    decode_sampler_kind kind;
    size_t dataset_len;
    int rank, world_size;
    uint64_t seed; /* config.SEED_VALUE */
} decode_sampler;

/* Samples this rank gets per epoch. */
size_t decode_sampler_len(const decode_sampler *s);
/* The rank's dataset indices for `epoch`, in order, into out[0..decode_sampler_len). */
void decode_sampler_epoch(const decode_sampler *s, uint32_t epoch, size_t *out);

#endif

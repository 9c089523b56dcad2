/*
 * rng.h — counter-based random numbers (Philox4x32-10, Salmon et al., SC'11 / Random123).
 *
 * Every draw is a pure function of (seed, purpose, epoch, sample index, transform position,
 * draw number): there is no hidden state to carry between workers, processes or nodes, so
 * augmentation is identical however the work is split, and a resumed run continues exactly
 * as an uninterrupted one would.
 *
 * How the tuple maps onto Philox (fixed: changing it changes every random number):
 *   key[0..1] = seed (low word, high word)
 *   ctr[0]    = block number (draw number / 4; each block yields 4 x 32-bit words)
 *   ctr[1]    = transform position (low 16 bits) | purpose (high 16 bits)
 *   ctr[2]    = sample index (must be < 2^32)
 *   ctr[3]    = epoch
 * A stream hands out the words of block 0, then block 1, ... in order; the draw number is
 * the index of the next 32-bit word. Helpers consume a fixed number of words per call
 * except randint (rejection, rare) and permutations built on it.
 */
#ifndef SELFSUP_RNG_H
#define SELFSUP_RNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The raw bijection: out = Philox4x32-10(ctr, key). */
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Separates unrelated consumers of randomness that share a seed (ctr[1] high 16 bits). */
typedef enum {
    RNG_PURPOSE_GENERIC = 0,
    RNG_PURPOSE_TRANSFORM = 1,  /* per-sample augmentation */
    RNG_PURPOSE_SAMPLER = 2,    /* epoch shuffles */
    RNG_PURPOSE_COLLATOR = 3,   /* e.g. mixup lambda */
    RNG_PURPOSE_DATASET = 4,    /* synthetic data, subsets, queues */
    RNG_PURPOSE_MODEL_INIT = 5, /* parameter initialisation */
    RNG_PURPOSE_TRAIN = 6,      /* randomness inside the train step */
    RNG_PURPOSE_CLUSTER = 7,    /* k-means initialisation and the like */
    RNG_PURPOSE_BENCHMARK = 8,  /* SVM / low-shot sampling */
    RNG_PURPOSE_TEST = 0xffff,  /* unit tests */
} rng_purpose;

/* The tuple that names a stream. Use designated initialisers so the fields cannot be mixed up. */
typedef struct {
    uint64_t seed;
    rng_purpose purpose;    /* 16 bits used */
    uint32_t epoch;
    uint64_t sample_index;  /* must be < 2^32 (checked) */
    uint32_t transform_pos; /* 16 bits used (checked) */
} rng_key;

/* A stream of 32-bit words. Plain data: copying it forks an identical stream. */
typedef struct {
    uint32_t key[2];
    uint32_t ctr[4];   /* ctr[0] is the number of the block held in `block` */
    uint32_t block[4]; /* the current block of output words */
    unsigned used;     /* words of `block` already handed out (0..4) */
} rng_stream;

/* Start the stream named by `k` at draw number 0. Dies on an out-of-range field. */
void rng_stream_init(rng_stream *s, rng_key k);
/* Position the stream so the next word is word number `draw`. */
void rng_stream_seek(rng_stream *s, uint64_t draw);
/* The draw number of the next word. */
uint64_t rng_stream_tell(const rng_stream *s);

uint32_t rng_u32(rng_stream *s);
/* Two words: the first is the low half. */
uint64_t rng_u64(rng_stream *s);

/* The top 53 bits of `x` as a double in [0,1). */
static inline double rng_unit_from_u64(uint64_t x)
{
    return (double)(x >> 11) * 0x1.0p-53;
}

/* Uniform in [0,1) with 53 random bits (2 words). */
double rng_uniform(rng_stream *s);
/* Uniform in [a,b) for a < b (2 words); a when a == b. */
double rng_uniform_range(rng_stream *s, double a, double b);
float rng_uniform_float(rng_stream *s, float a, float b);
/* Normal(mean, stddev) by Box-Muller, one value per call (4 words). */
double rng_normal(rng_stream *s, double mean, double stddev);
/* Gamma(shape, scale 1), shape > 0 (Marsaglia-Tsang; a variable number of words). */
double rng_gamma(rng_stream *s, double shape);
/* Beta(a, b) as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b) (numpy's random.beta law). */
double rng_beta(rng_stream *s, double a, double b);
/* Integer uniform in [lo, hi), lo < hi, no modulo bias (Lemire's multiply-and-reject).
   Spans up to 2^32 use one word per try, wider spans two. Dies if lo >= hi. */
int64_t rng_randint(rng_stream *s, int64_t lo, int64_t hi);
/* True with probability p (2 words): uniform() < p, so p <= 0 never, p >= 1 always. */
bool rng_bernoulli(rng_stream *s, double p);
/* Fisher-Yates shuffle, in place; every order equally likely. */
void rng_shuffle(rng_stream *s, size_t *a, size_t n);
/* perm := a uniformly random permutation of 0..n-1. */
void rng_permutation(rng_stream *s, size_t n, size_t *perm);

#ifdef __cplusplus
}
#endif

#endif

/*
 * rng.c — Philox4x32-10 and the draw helpers built on it (see rng.h for the tuple layout).
 *
 * Philox is ten rounds of two 32x32->64 multiplies whose halves are xor-ed with the key
 * and permuted; the key is bumped by Weyl constants between rounds. It passes BigCrush
 * and, being a bijection of the counter, never repeats within a key.
 */
#include "rng.h"

#include "log.h"

#include <math.h>

enum {
    PHILOX_ROUNDS = 10,
    WORDS_PER_BLOCK = 4,
};

static const uint32_t PHILOX_M0 = 0xD2511F53u; /* round multipliers */
static const uint32_t PHILOX_M1 = 0xCD9E8D57u;
static const uint32_t PHILOX_W0 = 0x9E3779B9u; /* key bumps: golden ratio, sqrt(3)-1 */
static const uint32_t PHILOX_W1 = 0xBB67AE85u;

static inline void mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t product = (uint64_t)a * b;
    *hi = (uint32_t)(product >> 32);
    *lo = (uint32_t)product;
}

static inline void philox_round(uint32_t x[4], const uint32_t k[2])
{
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(PHILOX_M0, x[0], &hi0, &lo0);
    mulhilo32(PHILOX_M1, x[2], &hi1, &lo1);
    uint32_t y0 = hi1 ^ x[1] ^ k[0];
    uint32_t y2 = hi0 ^ x[3] ^ k[1];
    x[0] = y0;
    x[1] = lo1;
    x[2] = y2;
    x[3] = lo0;
}

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int round = 0; round < PHILOX_ROUNDS; round++) {
        if (round > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(x, k);
    }
    for (int i = 0; i < 4; i++)
        out[i] = x[i];
}

/* ---- streams ------------------------------------------------------------------------- */

static void load_block(rng_stream *s, uint32_t block_number)
{
    s->ctr[0] = block_number;
    philox4x32_10(s->ctr, s->key, s->block);
    s->used = 0;
}

void rng_stream_init(rng_stream *s, rng_key k)
{
    if (k.sample_index > UINT32_MAX)
        die(EXIT_RUNTIME, "rng: sample index %llu does not fit the 32-bit counter word",
            (unsigned long long)k.sample_index);
    if (k.transform_pos > UINT16_MAX)
        die(EXIT_RUNTIME, "rng: transform position %u does not fit 16 bits", k.transform_pos);
    if ((unsigned)k.purpose > UINT16_MAX)
        die(EXIT_RUNTIME, "rng: purpose %u does not fit 16 bits", (unsigned)k.purpose);
    s->key[0] = (uint32_t)k.seed;
    s->key[1] = (uint32_t)(k.seed >> 32);
    s->ctr[1] = k.transform_pos | ((uint32_t)k.purpose << 16);
    s->ctr[2] = (uint32_t)k.sample_index;
    s->ctr[3] = k.epoch;
    load_block(s, 0);
}

void rng_stream_seek(rng_stream *s, uint64_t draw)
{
    uint64_t block_number = draw / WORDS_PER_BLOCK;
    if (block_number > UINT32_MAX)
        die(EXIT_RUNTIME, "rng: draw number %llu is past the end of a stream",
            (unsigned long long)draw);
    load_block(s, (uint32_t)block_number);
    s->used = (unsigned)(draw % WORDS_PER_BLOCK);
}

uint64_t rng_stream_tell(const rng_stream *s)
{
    return (uint64_t)s->ctr[0] * WORDS_PER_BLOCK + s->used;
}

uint32_t rng_u32(rng_stream *s)
{
    if (s->used == WORDS_PER_BLOCK) {
        if (s->ctr[0] == UINT32_MAX) /* 2^34 words: a wrap would silently repeat the stream */
            die(EXIT_RUNTIME, "rng: stream exhausted (2^34 draws)");
        load_block(s, s->ctr[0] + 1);
    }
    return s->block[s->used++];
}

uint64_t rng_u64(rng_stream *s)
{
    uint64_t lo = rng_u32(s);
    uint64_t hi = rng_u32(s);
    return lo | (hi << 32);
}

/* ---- continuous draws ---------------------------------------------------------------- */

double rng_uniform(rng_stream *s)
{
    return rng_unit_from_u64(rng_u64(s));
}

double rng_uniform_range(rng_stream *s, double a, double b)
{
    double r = a + (b - a) * rng_uniform(s);
    /* a + (b-a)*u can round up to b when b-a is a few ulps; keep the interval half-open. */
    if (a < b && r >= b)
        r = nextafter(b, a);
    return r;
}

float rng_uniform_float(rng_stream *s, float a, float b)
{
    float r = (float)rng_uniform_range(s, a, b);
    /* The double is < b but may round to b as a float. */
    if (a < b && r >= b)
        r = nextafterf(b, a);
    return r;
}

double rng_normal(rng_stream *s, double mean, double stddev)
{
    /* Box-Muller with a fixed cost of two uniforms; u1 in (0,1] keeps log() finite, so
       |z| <= sqrt(-2 ln 2^-53) ~ 8.57. The sine half of the pair is dropped so that every
       call consumes the same number of words. */
    double u1 = 1.0 - rng_uniform(s);
    double u2 = rng_uniform(s);
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    return mean + stddev * z;
}

double rng_gamma(rng_stream *s, double shape)
{
    /* Marsaglia & Tsang (2000), "A simple method for generating gamma variables"; for
       shape < 1, Gamma(a) = Gamma(a + 1) * U^(1/a) with U in (0,1]. */
    if (!(shape > 0))
        die(EXIT_RUNTIME, "rng_gamma: shape %g must be positive", shape);
    if (shape < 1) {
        double g = rng_gamma(s, shape + 1.0);
        return g * pow(1.0 - rng_uniform(s), 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(s, 0.0, 1.0), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = 1.0 - rng_uniform(s);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

double rng_beta(rng_stream *s, double a, double b)
{
    double x = rng_gamma(s, a), y = rng_gamma(s, b);
    return x + y > 0 ? x / (x + y) : (rng_uniform(s) < a / (a + b) ? 1.0 : 0.0);
}

bool rng_bernoulli(rng_stream *s, double p)
{
    return rng_uniform(s) < p;
}

/* ---- integers ------------------------------------------------------------------------ */

/* Lemire, "Fast random integer generation in an interval" (2019), 32-bit words;
   1 <= span <= 2^32. */
static uint64_t below_span32(rng_stream *s, uint64_t span)
{
    if (span == (UINT64_C(1) << 32))
        return rng_u32(s);
    uint64_t m = (uint64_t)rng_u32(s) * span;
    uint32_t low = (uint32_t)m;
    if (low < span) {
        /* 2^32 mod span: the values of `low` that would over-represent some results. */
        uint32_t threshold = (uint32_t)(((UINT64_C(1) << 32) - span) % span);
        while (low < threshold) {
            m = (uint64_t)rng_u32(s) * span;
            low = (uint32_t)m;
        }
    }
    return m >> 32;
}

/* The same with 64-bit words; span > 2^32. */
static uint64_t below_span64(rng_stream *s, uint64_t span)
{
    unsigned __int128 m = (unsigned __int128)rng_u64(s) * span;
    uint64_t low = (uint64_t)m;
    if (low < span) {
        uint64_t threshold = (0 - span) % span;
        while (low < threshold) {
            m = (unsigned __int128)rng_u64(s) * span;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

int64_t rng_randint(rng_stream *s, int64_t lo, int64_t hi)
{
    if (lo >= hi)
        die(EXIT_RUNTIME, "rng_randint: empty range [%lld, %lld)", (long long)lo, (long long)hi);
    uint64_t span = (uint64_t)hi - (uint64_t)lo; /* exact in unsigned arithmetic */
    uint64_t offset = span <= (UINT64_C(1) << 32) ? below_span32(s, span) : below_span64(s, span);
    return (int64_t)((uint64_t)lo + offset); /* wraps back into range, no signed overflow */
}

void rng_shuffle(rng_stream *s, size_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_randint(s, 0, (int64_t)i);
        size_t tmp = a[i - 1];
        a[i - 1] = a[j];
        a[j] = tmp;
    }
}

void rng_permutation(rng_stream *s, size_t n, size_t *perm)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    rng_shuffle(s, perm, n);
}

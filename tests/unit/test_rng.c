/*
 * test_rng.c — lib/rng (Philox4x32-10 streams) and, at the end, lib/timer.
 *
 * Philox is checked against Random123's known-answer vectors; streams for determinism and
 * layout; the helpers for statistical sanity. Statistical bounds are >= 5 sigma (and the
 * streams are seeded, so a given build always draws the same numbers): they catch a broken
 * transform, never flake.
 */
#include <criterion/criterion.h>

#include "log.h"
#include "rng.h"
#include "timer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static rng_stream test_stream(uint64_t seed)
{
    rng_stream s;
    rng_stream_init(&s, (rng_key){.seed = seed, .purpose = RNG_PURPOSE_TEST});
    return s;
}

/* ---- Philox known answers (Random123 kat_vectors) ------------------------------------- */

static void check_kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                      uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3)
{
    const uint32_t ctr[4] = {c0, c1, c2, c3}, key[2] = {k0, k1};
    uint32_t out[4];
    philox4x32_10(ctr, key, out);
    const uint32_t want[4] = {r0, r1, r2, r3};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], want[i], "word %d: got %08x, want %08x", i, out[i], want[i]);
}

Test(rng, philox_kat_zeros)
{
    check_kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
}

Test(rng, philox_kat_ones)
{
    check_kat(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
              0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
}

Test(rng, philox_kat_pi)
{
    check_kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
              0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);
}

/* ---- streams --------------------------------------------------------------------------- */

Test(rng, stream_layout_matches_header)
{
    rng_key k = {.seed = 0x0123456789abcdefULL, .purpose = RNG_PURPOSE_TRANSFORM, .epoch = 7,
                 .sample_index = 123456, .transform_pos = 3};
    rng_stream s;
    rng_stream_init(&s, k);
    const uint32_t key[2] = {0x89abcdef, 0x01234567};
    for (uint32_t block = 0; block < 3; block++) {
        const uint32_t ctr[4] = {block, 3u | (RNG_PURPOSE_TRANSFORM << 16), 123456, 7};
        uint32_t want[4];
        philox4x32_10(ctr, key, want);
        for (int i = 0; i < 4; i++) {
            uint32_t got = rng_u32(&s); /* draw outside the macro: it may evaluate twice */
            cr_assert_eq(got, want[i], "block %u word %d", block, i);
        }
    }
}

Test(rng, same_tuple_same_stream)
{
    rng_key k = {.seed = 42, .purpose = RNG_PURPOSE_SAMPLER, .epoch = 3, .sample_index = 9};
    rng_stream a, b;
    rng_stream_init(&a, k);
    rng_stream_init(&b, k);
    for (int i = 0; i < 1000; i++) {
        uint32_t x = rng_u32(&a), y = rng_u32(&b);
        cr_assert_eq(x, y);
    }
}

static void first_words(rng_key k, uint32_t out[8])
{
    rng_stream s;
    rng_stream_init(&s, k);
    for (int i = 0; i < 8; i++)
        out[i] = rng_u32(&s);
}

Test(rng, every_tuple_component_changes_the_stream)
{
    const rng_key base = {.seed = 1, .purpose = RNG_PURPOSE_TRANSFORM, .epoch = 2,
                          .sample_index = 3, .transform_pos = 4};
    rng_key variants[5] = {base, base, base, base, base};
    variants[0].seed = 1ULL << 40; /* the high key word counts too */
    variants[1].purpose = RNG_PURPOSE_COLLATOR;
    variants[2].epoch = 3;
    variants[3].sample_index = 4;
    variants[4].transform_pos = 5;
    uint32_t ref[8], other[8];
    first_words(base, ref);
    for (int v = 0; v < 5; v++) {
        first_words(variants[v], other);
        cr_assert_neq(memcmp(ref, other, sizeof ref), 0, "variant %d gives the same words", v);
    }
}

Test(rng, seek_and_tell_address_draw_numbers)
{
    rng_stream s = test_stream(7);
    uint32_t words[100];
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(rng_stream_tell(&s), (uint64_t)i);
        words[i] = rng_u32(&s);
    }
    for (int i = 99; i >= 0; i -= 7) {
        rng_stream t = test_stream(7);
        rng_stream_seek(&t, (uint64_t)i);
        cr_assert_eq(rng_stream_tell(&t), (uint64_t)i);
        uint32_t got = rng_u32(&t);
        cr_assert_eq(got, words[i], "draw %d after seek", i);
    }
}

Test(rng, copying_a_stream_forks_it)
{
    rng_stream a = test_stream(9);
    (void)rng_u32(&a);
    rng_stream b = a;
    for (int i = 0; i < 50; i++) {
        uint64_t x = rng_u64(&a), y = rng_u64(&b);
        cr_assert_eq(x, y);
    }
}

Test(rng, u64_is_two_words_low_first)
{
    rng_stream a = test_stream(11), b = test_stream(11);
    (void)rng_u32(&a); /* straddle a block boundary on the third draw */
    (void)rng_u32(&b);
    for (int i = 0; i < 4; i++) {
        uint64_t lo = rng_u32(&b), hi = rng_u32(&b), both = rng_u64(&a);
        cr_assert_eq(both, lo | (hi << 32));
    }
}

Test(rng, large_sample_index_dies, .exit_code = EXIT_RUNTIME)
{
    rng_stream s;
    rng_stream_init(&s, (rng_key){.sample_index = 1ULL << 32});
}

/* ---- continuous draws ------------------------------------------------------------------ */

enum { N_STAT = 1000000 };

Test(rng, unit_conversion_edges)
{
    cr_assert_eq(rng_unit_from_u64(0), 0.0);
    cr_assert(rng_unit_from_u64(UINT64_MAX) < 1.0);
    cr_assert_eq(rng_unit_from_u64(UINT64_MAX), 1.0 - 0x1.0p-53);
}

Test(rng, uniform_mean_and_variance)
{
    rng_stream s = test_stream(1);
    double sum = 0, sum2 = 0;
    for (int i = 0; i < N_STAT; i++) {
        double u = rng_uniform(&s);
        cr_assert(u >= 0.0 && u < 1.0);
        sum += u;
        sum2 += u * u;
    }
    double mean = sum / N_STAT, var = sum2 / N_STAT - mean * mean;
    /* sd(mean) = sqrt(1/12/n) = 2.9e-4; sd(var) = sqrt((1/80 - 1/144)/n) = 7.5e-5 */
    cr_assert(fabs(mean - 0.5) < 5 * 2.9e-4, "mean %g", mean);
    cr_assert(fabs(var - 1.0 / 12) < 5 * 7.5e-5, "var %g", var);
}

Test(rng, uniform_range_is_half_open)
{
    rng_stream s = test_stream(2);
    for (int i = 0; i < 10000; i++) {
        double d = rng_uniform_range(&s, -3.0, 5.0);
        cr_assert(d >= -3.0 && d < 5.0);
        float f = rng_uniform_float(&s, 0.08f, 1.0f);
        cr_assert(f >= 0.08f && f < 1.0f);
        /* a one-ulp interval holds a single value */
        float one_f = rng_uniform_float(&s, 1.0f, nextafterf(1.0f, 2.0f));
        double one_d = rng_uniform_range(&s, 1.0, nextafter(1.0, 2.0));
        cr_assert_eq(one_f, 1.0f);
        cr_assert_eq(one_d, 1.0);
    }
    double degenerate = rng_uniform_range(&s, 2.5, 2.5);
    cr_assert_eq(degenerate, 2.5);
}

Test(rng, normal_moments)
{
    rng_stream s = test_stream(3);
    double sum = 0, sum2 = 0, max_abs = 0;
    for (int i = 0; i < N_STAT; i++) {
        double z = rng_normal(&s, 0.0, 1.0);
        sum += z;
        sum2 += z * z;
        max_abs = fmax(max_abs, fabs(z));
    }
    double mean = sum / N_STAT, var = sum2 / N_STAT - mean * mean;
    /* sd(mean) = 1e-3, sd(var) = sqrt(2/n) = 1.4e-3 */
    cr_assert(fabs(mean) < 5e-3, "mean %g", mean);
    cr_assert(fabs(var - 1.0) < 5 * 1.42e-3, "var %g", var);
    cr_assert(max_abs < 8.6, "Box-Muller cannot exceed sqrt(-2 ln 2^-53)");
    cr_assert(max_abs > 3.0, "a million normals should reach 3 sigma (max %g)", max_abs);
}

Test(rng, normal_mean_and_stddev_parameters)
{
    rng_stream a = test_stream(4), b = test_stream(4);
    for (int i = 0; i < 100; i++) {
        double z = rng_normal(&a, 0.0, 1.0), scaled = rng_normal(&b, 10.0, 2.0);
        cr_assert_float_eq(scaled, 10.0 + 2.0 * z, 1e-12);
    }
}

Test(rng, normal_consumes_four_words)
{
    rng_stream s = test_stream(5);
    (void)rng_normal(&s, 0, 1);
    cr_assert_eq(rng_stream_tell(&s), 4u);
}

Test(rng, bernoulli)
{
    rng_stream s = test_stream(6);
    int hits = 0;
    for (int i = 0; i < N_STAT; i++) {
        bool never = rng_bernoulli(&s, 0.0), always = rng_bernoulli(&s, 1.0);
        cr_assert(!never);
        cr_assert(always);
        hits += rng_bernoulli(&s, 0.3);
    }
    double p = (double)hits / N_STAT; /* sd = sqrt(0.21/n) = 4.6e-4 */
    cr_assert(fabs(p - 0.3) < 5 * 4.6e-4, "p %g", p);
}

/* ---- integers -------------------------------------------------------------------------- */

Test(rng, randint_chi_square_ten_bins)
{
    rng_stream s = test_stream(8);
    long counts[10] = {0};
    for (int i = 0; i < N_STAT; i++) {
        int64_t v = rng_randint(&s, 0, 10);
        cr_assert(v >= 0 && v < 10);
        counts[v]++;
    }
    double expected = N_STAT / 10.0, chi2 = 0;
    for (int b = 0; b < 10; b++)
        chi2 += (counts[b] - expected) * (counts[b] - expected) / expected;
    /* 9 degrees of freedom: mean 9, sd 4.2; P(chi2 > 50) ~ 1e-7 */
    cr_assert(chi2 < 50, "chi2 %g", chi2);
}

Test(rng, randint_has_no_modulo_bias)
{
    /* span 3*2^30: `u32 % span` would put half of all draws in the lowest third. */
    rng_stream s = test_stream(10);
    const int64_t span = 3LL << 30;
    long thirds[3] = {0};
    for (int i = 0; i < 300000; i++)
        thirds[rng_randint(&s, 0, span) / (1LL << 30)]++;
    for (int t = 0; t < 3; t++) /* expected 100000, sd 258 */
        cr_assert(labs(thirds[t] - 100000) < 2000, "third %d: %ld", t, thirds[t]);
}

Test(rng, randint_unit_span_and_offsets)
{
    rng_stream s = test_stream(12);
    for (int i = 0; i < 1000; i++) {
        int64_t zero = rng_randint(&s, 0, 1), minus_five = rng_randint(&s, -5, -4);
        cr_assert_eq(zero, 0);
        cr_assert_eq(minus_five, -5);
        int64_t v = rng_randint(&s, -3, 4);
        cr_assert(v >= -3 && v < 4);
    }
}

Test(rng, randint_span_two_to_the_32)
{
    /* The whole 32-bit word is the answer: one word per draw, lo + word. */
    rng_stream s = test_stream(13), raw = test_stream(13);
    const int64_t lo = -(1LL << 31), hi = 1LL << 31;
    bool low_half = false, high_half = false;
    for (int i = 0; i < 1000; i++) {
        int64_t v = rng_randint(&s, lo, hi), word = rng_u32(&raw);
        cr_assert_eq(v, lo + word);
        cr_assert(v >= lo && v < hi);
        low_half |= v < 0;
        high_half |= v >= 0;
    }
    cr_assert(low_half && high_half);
}

Test(rng, randint_wide_spans)
{
    rng_stream s = test_stream(14);
    bool negative = false, positive = false;
    for (int i = 0; i < 1000; i++) {
        int64_t v = rng_randint(&s, INT64_MIN, INT64_MAX);
        cr_assert(v < INT64_MAX);
        negative |= v < 0;
        positive |= v > 0;
        int64_t w = rng_randint(&s, 0, (1LL << 32) + 1);
        cr_assert(w >= 0 && w <= (1LL << 32));
    }
    cr_assert(negative && positive);
}

Test(rng, randint_empty_range_dies, .exit_code = EXIT_RUNTIME)
{
    rng_stream s = test_stream(15);
    (void)rng_randint(&s, 3, 3);
}

/* ---- permutations ---------------------------------------------------------------------- */

Test(rng, permutation_is_a_permutation)
{
    enum { N = 1000 };
    rng_stream s = test_stream(16);
    size_t perm[N];
    bool seen[N] = {false};
    rng_permutation(&s, N, perm);
    size_t fixed_points = 0;
    for (size_t i = 0; i < N; i++) {
        cr_assert(perm[i] < N);
        cr_assert(!seen[perm[i]], "%zu twice", perm[i]);
        seen[perm[i]] = true;
        fixed_points += perm[i] == i;
    }
    cr_assert(fixed_points < 10, "looks unshuffled: %zu fixed points", fixed_points);
    rng_permutation(&s, 0, perm); /* no draws, no crash */
    rng_permutation(&s, 1, perm);
    cr_assert_eq(perm[0], 0u);
}

Test(rng, permutation_positions_are_uniform)
{
    enum { N = 5, TRIALS = 100000 };
    rng_stream s = test_stream(17);
    long counts[N][N] = {{0}};
    size_t perm[N];
    for (int t = 0; t < TRIALS; t++) {
        rng_permutation(&s, N, perm);
        for (int pos = 0; pos < N; pos++)
            counts[pos][perm[pos]]++;
    }
    double expected = (double)TRIALS / N, chi2 = 0;
    for (int pos = 0; pos < N; pos++)
        for (int v = 0; v < N; v++)
            chi2 += (counts[pos][v] - expected) * (counts[pos][v] - expected) / expected;
    /* (N-1)^2 = 16 degrees of freedom: mean 16, sd 5.7 */
    cr_assert(chi2 < 80, "chi2 %g", chi2);
}

Test(rng, permutation_is_deterministic)
{
    rng_key k = {.seed = 5, .purpose = RNG_PURPOSE_SAMPLER, .epoch = 1};
    rng_stream a, b;
    rng_stream_init(&a, k);
    rng_stream_init(&b, k);
    size_t p[64], q[64];
    rng_permutation(&a, 64, p);
    rng_permutation(&b, 64, q);
    cr_assert_eq(memcmp(p, q, sizeof p), 0);
}

/* ---- lib/timer ------------------------------------------------------------------------- */
/* Lower bounds only: a loaded machine may sleep longer, never shorter. */

Test(timer, monotonic_clock_never_goes_back)
{
    double previous = now_seconds();
    uint64_t previous_ns = now_ns();
    for (int i = 0; i < 1000; i++) {
        double t = now_seconds();
        uint64_t t_ns = now_ns();
        cr_assert(t >= previous);
        cr_assert(t_ns >= previous_ns);
        previous = t;
        previous_ns = t_ns;
    }
}

Test(timer, stopwatch_accumulates_and_pauses)
{
    stopwatch sw;
    stopwatch_reset(&sw);
    cr_assert_eq(stopwatch_elapsed(&sw), 0.0);
    stopwatch_start(&sw);
    sleep_seconds(0.02);
    double first = stopwatch_stop(&sw);
    cr_assert(first >= 0.02, "slept 20 ms, measured %g s", first);
    double still = stopwatch_elapsed(&sw);
    cr_assert_eq(still, first, "a stopped stopwatch does not move");
    sleep_seconds(0.01);
    still = stopwatch_elapsed(&sw);
    cr_assert_eq(still, first);
    stopwatch_start(&sw);
    sleep_seconds(0.01);
    cr_assert(stopwatch_elapsed(&sw) >= first + 0.01);
    stopwatch_start(&sw); /* no effect when running */
    double total = stopwatch_stop(&sw);
    cr_assert(total >= first + 0.01);
}

Test(timer, sleep_of_nothing_returns)
{
    sleep_seconds(0.0);
    sleep_seconds(-1.0);
    sleep_seconds(NAN);
}

/*
 * resample.c — the geometry kernels of img.h, bit-exact with PIL 9.4 / torchvision 0.14:
 * resize, padded crop, flip, rotations, grayscale and the float conversion.
 *
 * img_resize follows PIL's libImaging/Resample.c step for step where it matters for the
 * result: coefficients are computed in double exactly as precompute_coeffs does (same
 * expressions, same order), turned into 22-bit fixed point as normalize_coeffs_8bpc does,
 * the horizontal pass runs first (over only the rows the vertical pass reads) and its 8-bit
 * result feeds the vertical pass; a side that keeps its size is not resampled. All pixel
 * arithmetic is int32, so any evaluation order gives PIL's exact sums; that lets us
 *  - leave out zero weights at the ends of a window (they add nothing), and
 *  - run SIMD kernels (picked at run time) that are bit-identical to the portable ones: the
 *    vertical pass keeps 8 columns per register, the horizontal pass transposes a block of
 *    rows so that it, too, becomes a sum of whole registers (AVX2: 8 RGB rows, one multiply
 *    per tap; results come back to the rows through a block transpose rather than
 *    scattered stores). On CPUs with AVX-512 VNNI both passes use vpdpbusd, four taps per
 *    instruction, with each weight split into three signed bytes (horizontal: RGB, 16 rows
 *    at a time; vertical: 64 columns, four rows interleaved). The other pixel operations
 *    (flip, 180-degree turn, grayscale) have AVX2 versions of their inner loops too.
 * NEAREST resize and rotations (other than PIL's transpose shortcuts) follow PIL's affine
 * nearest-neighbour paths in Geometry.c (ImagingScaleAffine, affine_fixed, the float walk),
 * including their rounding.
 *
 * Scratch memory (coefficients, the intermediate image) is thread-local and grow-only, so a
 * steady stream of resizes allocates nothing. The coefficient code is kept free of fused
 * multiply-adds (NO_FMA) so that builds for newer CPUs still round as PIL does.
 */
#include "augment/img.h"

#include "log.h"
#include "util.h"

#include "augment/simd_internal.h"
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PIL: 8 bits of result, 2 bits of headroom for filters with negative lobes. */
#define PRECISION_BITS (32 - 8 - 2)
#define HALF (1 << (PRECISION_BITS - 1))

/* ---- scratch ------------------------------------------------------------------------------ */

typedef struct {
    void *p;
    size_t cap;
} scratch;

/* A buffer of at least `bytes`, reused across calls (content not kept). */
static void *scratch_get(scratch *s, size_t bytes)
{
    if (bytes > s->cap) {
        free(s->p);
        s->cap = bytes + bytes / 4 + 64;
        s->p = xmalloc(s->cap);
    }
    return s->p;
}

static _Thread_local scratch g_coef_x, g_coef_y, g_tmp, g_block, g_dcoef;

/* ---- SIMD dispatch -------------------------------------------------------------------------- */

/* -1: not decided yet; tests flip it with img_resample_set_simd to compare the paths.
 * 0: portable, 1: AVX2, 2: AVX2 plus the AVX-512 VNNI resize kernels. */
static int g_simd = -1;

static bool cpu_has_vnni(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("avx512vnni");
}

static int simd_level(void)
{
    if (g_simd < 0)
        g_simd = !__builtin_cpu_supports("avx2") ? 0 : cpu_has_vnni() ? 2 : 1;
    return g_simd;
}

static bool use_avx2(void) { return simd_level() >= 1; }
static bool use_vnni(void) { return simd_level() >= 2; }

/* Test hook (not in img.h): on = 0 forces the portable kernels, 1 asks for the best SIMD
 * kernels the CPU has, 2 for AVX2 without the AVX-512 ones. Returns whether SIMD (AVX2 or
 * better) kernels will be used. */
int img_resample_set_simd(int on)
{
    if (!on || !__builtin_cpu_supports("avx2"))
        g_simd = 0;
    else
        g_simd = on == 1 && cpu_has_vnni() ? 2 : 1;
    return g_simd > 0;
}

/* ---- coefficients (PIL's precompute_coeffs + normalize_coeffs_8bpc) ------------------------- */

/* PIL's weights are computed without fused multiply-adds (Debian builds for baseline x86-64);
 * keep it so here even when the project is built for a newer CPU. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define NO_FMA
#else
#define NO_FMA __attribute__((optimize("fp-contract=off")))
#endif

NO_FMA static double bilinear_filter(double x)
{
    if (x < 0.0)
        x = -x;
    if (x < 1.0)
        return 1.0 - x;
    return 0.0;
}

NO_FMA static double bicubic_filter(double x)
{
    const double a = -0.5; /* PIL's choice (Keys' cubic) */
    if (x < 0.0)
        x = -x;
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* For every output index i, a window of len[i] inputs starting at start[i] with fixed-point
 * weights k[i * stride ..]. Zero weights at either end of PIL's window are left out (they add
 * nothing to the integer sums), which saves a tap in many bilinear windows. */
typedef struct {
    int n, stride;
    int *start, *len;
    int32_t *k;
} coeffs;

/* PIL's double weights of one window: fn((x + xmin - center + 0.5) * ss) for x < n, into dk;
 * returns their sum. One loop per filter, so the filter inlines (a call per tap through a
 * pointer cost more than the arithmetic). */
NO_FMA static double window_weights(img_filter filter, int xmin, int n, double center, double ss,
                                    double *dk)
{
    double ww = 0.0;
    if (filter == IMG_BICUBIC) {
        for (int x = 0; x < n; x++) {
            double w = bicubic_filter((x + xmin - center + 0.5) * ss);
            dk[x] = w;
            ww += w;
        }
    } else {
        for (int x = 0; x < n; x++) {
            double w = bilinear_filter((x + xmin - center + 0.5) * ss);
            dk[x] = w;
            ww += w;
        }
    }
    return ww;
}

/* PIL's weights for resampling in_size samples to out_size (box = the whole input). */
NO_FMA static coeffs make_coeffs(int in_size, int out_size, img_filter filter, scratch *mem)
{
    double fsupport = filter == IMG_BICUBIC ? 2.0 : 1.0;

    /* PIL passes the box as floats: in1 - in0 is a float subtraction, then widened. */
    float in0 = 0.0f, in1 = (float)in_size;
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = fsupport * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;

    /* A window holds at most min(ksize, in_size) weights. dk (PIL's double weights of one
     * window) is scratch. */
    int stride = ksize < in_size ? ksize : in_size;
    size_t need = (size_t)out_size * (2 * sizeof(int) + (size_t)stride * sizeof(int32_t));
    char *buf = scratch_get(mem, need);
    coeffs c = {.n = out_size, .stride = stride, .start = (int *)buf,
                .len = (int *)buf + out_size,
                .k = (int32_t *)(buf + (size_t)out_size * 2 * sizeof(int))};
    double *dk = scratch_get(&g_dcoef, (size_t)ksize * sizeof(double));
    const double ss = 1.0 / filterscale;

    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        double ww = window_weights(filter, xmin, xmax, center, ss, dk);
        /* normalize_coeffs_8bpc: round half away from zero, then truncate; zero weights at
         * either end are left out */
        int32_t *k = c.k + (size_t)xx * stride;
        int lo = 0, len = 0;
        for (int x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? dk[x] / ww : dk[x];
            int32_t q = v < 0 ? (int)(-0.5 + v * (1 << PRECISION_BITS))
                              : (int)(0.5 + v * (1 << PRECISION_BITS));
            if (q == 0 && len == 0) {
                lo++;
                continue;
            }
            k[len++] = q;
        }
        while (len > 0 && k[len - 1] == 0)
            len--;
        c.start[xx] = xmin + lo;
        c.len[xx] = len;
    }
    return c;
}

/* ---- pixel kernels: portable ---------------------------------------------------------------- */

/* PIL's clip8: drop the fraction bits (arithmetic shift), saturate to 0..255. */
static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One row of the horizontal pass: out[x] = sum_t in[start[x] + t] * k[x][t], per channel. */
static void hpass_row(const uint8_t *in, uint8_t *out, int c, const coeffs *cx)
{
    if (c == 3) {
        for (int x = 0; x < cx->n; x++) {
            const uint8_t *p = in + 3 * (size_t)cx->start[x];
            const int32_t *k = cx->k + (size_t)x * cx->stride;
            const int taps = cx->len[x];
            int32_t s0 = HALF, s1 = HALF, s2 = HALF;
            for (int t = 0; t < taps; t++) {
                s0 += p[3 * t + 0] * k[t];
                s1 += p[3 * t + 1] * k[t];
                s2 += p[3 * t + 2] * k[t];
            }
            out[3 * x + 0] = clip8(s0);
            out[3 * x + 1] = clip8(s1);
            out[3 * x + 2] = clip8(s2);
        }
    } else {
        for (int x = 0; x < cx->n; x++) {
            const uint8_t *p = in + cx->start[x];
            const int32_t *k = cx->k + (size_t)x * cx->stride;
            int32_t s = HALF;
            for (int t = 0; t < cx->len[x]; t++)
                s += p[t] * k[t];
            out[x] = clip8(s);
        }
    }
}

/* Columns [i0, n) of one output row of the vertical pass; tap t reads row base + t * stride. */
static void vpass_row(const uint8_t *base, size_t stride, int taps, const int32_t *k,
                      uint8_t *out, int i0, int n)
{
    for (int i = i0; i < n; i++) {
        int32_t s = HALF;
        const uint8_t *p = base + i;
        for (int t = 0; t < taps; t++)
            s += p[(size_t)t * stride] * k[t];
        out[i] = clip8(s);
    }
}

/* ---- pixel kernels: AVX2 -------------------------------------------------------------------- */

/* 16 int32 sums (lo: bytes 0-7, hi: 8-15) -> 16 bytes, with clip8's shift and saturation
 * (packs keeps values in range: after the shift they lie within about +-640). */
__attribute__((target("avx2"))) static inline __m128i pack16_avx2(__m256i lo, __m256i hi)
{
    lo = _mm256_srai_epi32(lo, PRECISION_BITS);
    hi = _mm256_srai_epi32(hi, PRECISION_BITS);
    __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

/* acc += (8 bytes at p, widened) * k */
__attribute__((target("avx2"))) static inline __m256i mac8_avx2(__m256i acc, const uint8_t *p,
                                                                  __m256i k)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_add_epi32(acc, _mm256_mullo_epi32(v, k));
}

/* One output row of the vertical pass, 32 columns per step, the rest portable. */
__attribute__((target("avx2"))) static void vpass_row_avx2(const uint8_t *base, size_t stride,
                                                           int taps, const int32_t *k,
                                                           uint8_t *out, int n)
{
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a0 = _mm256_set1_epi32(HALF), a1 = a0, a2 = a0, a3 = a0;
        const uint8_t *p = base + i;
        for (int t = 0; t < taps; t++, p += stride) {
            __m256i kk = _mm256_set1_epi32(k[t]);
            a0 = mac8_avx2(a0, p, kk);
            a1 = mac8_avx2(a1, p + 8, kk);
            a2 = mac8_avx2(a2, p + 16, kk);
            a3 = mac8_avx2(a3, p + 24, kk);
        }
        _mm_storeu_si128((__m128i *)(out + i), pack16_avx2(a0, a1));
        _mm_storeu_si128((__m128i *)(out + i + 16), pack16_avx2(a2, a3));
    }
    for (; i + 8 <= n; i += 8) {
        __m256i a0 = _mm256_set1_epi32(HALF);
        const uint8_t *p = base + i;
        for (int t = 0; t < taps; t++, p += stride)
            a0 = mac8_avx2(a0, p, _mm256_set1_epi32(k[t]));
        __m128i b = pack16_avx2(a0, a0);
        _mm_storel_epi64((__m128i *)(out + i), b);
    }
    vpass_row(base, stride, taps, k, out, i, n);
}

/* The horizontal pass transposes a block of rows so that each input column becomes one run
 * of lanes; each output pixel is then a weighted sum of whole runs, as in the vertical pass.
 * RGB: 8 rows, 24 lanes a column (rows 0..7, R G B each). L: 32 rows, 32 lanes. */
#define HBLOCK_LANES 32
#define HBLOCK_LANES_RGB 24

/* acc[0..3] (32 lanes) = sum_t col[start + t] * k[t] */
__attribute__((target("avx2"))) static inline void hsum32_avx2(const uint8_t *p,
                                                                const int32_t *k, int taps,
                                                                __m256i acc[4])
{
    __m256i a0 = _mm256_set1_epi32(HALF), a1 = a0, a2 = a0, a3 = a0;
    for (int t = 0; t < taps; t++, p += HBLOCK_LANES) {
        __m256i kk = _mm256_set1_epi32(k[t]);
        a0 = mac8_avx2(a0, p, kk);
        a1 = mac8_avx2(a1, p + 8, kk);
        a2 = mac8_avx2(a2, p + 16, kk);
        a3 = mac8_avx2(a3, p + 24, kk);
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
}

/* The same over 24 lanes. */
__attribute__((target("avx2"))) static inline void hsum24_avx2(const uint8_t *p,
                                                                const int32_t *k, int taps,
                                                                __m256i acc[3])
{
    __m256i a0 = _mm256_set1_epi32(HALF), a1 = a0, a2 = a0;
    for (int t = 0; t < taps; t++, p += HBLOCK_LANES_RGB) {
        __m256i kk = _mm256_set1_epi32(k[t]);
        a0 = mac8_avx2(a0, p, kk);
        a1 = mac8_avx2(a1, p + 8, kk);
        a2 = mac8_avx2(a2, p + 16, kk);
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2;
}



/* Horizontal pass of 8 RGB rows: into the transposed results `ocol` (n * 24 bytes + 8 spare),
 * then out to the rows. */
__attribute__((target("avx2"))) static void hpass_block_rgb_avx2(const uint8_t *in,
                                                                 size_t in_stride, uint8_t *out,
                                                                 size_t out_stride, int in_w,
                                                                 const coeffs *cx, uint8_t *col,
                                                                 uint8_t *ocol)
{
    transpose8_rgb_avx2(in, in_stride, in_w, col, HBLOCK_LANES_RGB);
    for (int x = 0; x < cx->n; x++) {
        __m256i acc[3];
        hsum24_avx2(col + (size_t)cx->start[x] * HBLOCK_LANES_RGB, cx->k + (size_t)x * cx->stride,
                    cx->len[x], acc);
        uint8_t *o = ocol + (size_t)x * HBLOCK_LANES_RGB;
        _mm_storeu_si128((__m128i *)o, pack16_avx2(acc[0], acc[1]));
        _mm_storel_epi64((__m128i *)(o + 16), pack16_avx2(acc[2], acc[2]));
    }
    uint8_t *rows[8];
    for (int r = 0; r < 8; r++)
        rows[r] = out + (size_t)r * out_stride;
    transpose8_rgb_back_avx2(ocol, HBLOCK_LANES_RGB, cx->n, rows);
}

/*
 * The AVX-512 VNNI horizontal pass for RGB (vpdpbusd: four u8 x s8 products summed into each
 * int32 lane). Each 22-bit weight k is split into balanced base-256 digits,
 * k = d0 + 256 d1 + 65536 d2 with every digit in -128..127, and the three digit sums are
 * recombined at the end; all of it is int32 arithmetic modulo 2^32, whose result is PIL's sum
 * exactly (that sum fits in int32). A block is 16 rows; columns come in groups of four: group
 * g holds, for row r and channel ch, the word (col 4g..4g+3 of that channel) at
 * 192 g + 12 r + 4 ch, which byte shuffles of the rows make. Lane r*3+ch of the three
 * vectors of a group is then that row's channel; the results of four output pixels are
 * permuted back into rows in registers. A window is widened to whole groups with zero
 * weights.
 */
#define VNNI_TARGET                                                                        \
    __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")))
#define VROWS 16                /* rows per block */
#define VGROUP (VROWS * 12)     /* bytes per group of four columns */

typedef struct {
    int gstride;        /* int32 per output: 3 per group */
    int *g0, *ng;       /* first group and number of groups of each output's window */
    int32_t *dig;       /* digits d0 d1 d2 of group i at dig[x * gstride + 3 i ..] */
} vnni_coeffs;

static _Thread_local scratch g_vnni_coef, g_vnni_coef_y, g_vnni_rows, g_ocol;

/* The digits of cx's weights in groups of four taps. align4: groups start at multiples of 4
 * (the horizontal kernel: windows widened to whole column groups), else at each window's
 * start (the vertical kernel). Returns false where some weight does not fit three digits
 * (never for PIL's filters). */
static bool make_vnni_coeffs(const coeffs *cx, vnni_coeffs *vc, scratch *mem, bool align4)
{
    int gmax = 0;
    for (int x = 0; x < cx->n; x++) {
        int ng = ((align4 ? cx->start[x] & 3 : 0) + cx->len[x] + 3) >> 2;
        gmax = ng > gmax ? ng : gmax;
    }
    vc->gstride = 3 * gmax;
    size_t need = (size_t)cx->n * (2 * sizeof(int) + (size_t)vc->gstride * sizeof(int32_t));
    char *buf = scratch_get(mem, need + 12 * (size_t)gmax); /* + the digit bytes of a window */
    uint8_t *b[3] = {(uint8_t *)buf + need, (uint8_t *)buf + need + 4 * (size_t)gmax,
                     (uint8_t *)buf + need + 8 * (size_t)gmax};
    vc->g0 = (int *)buf;
    vc->ng = vc->g0 + cx->n;
    vc->dig = (int32_t *)(buf + (size_t)cx->n * 2 * sizeof(int));
    for (int x = 0; x < cx->n; x++) {
        const int32_t *k = cx->k + (size_t)x * cx->stride;
        int off = align4 ? cx->start[x] & 3 : 0, len = cx->len[x];
        int ng = (off + len + 3) >> 2;
        vc->g0[x] = align4 ? cx->start[x] >> 2 : cx->start[x];
        vc->ng[x] = ng;
        /* the digits of each tap, the window placed at `off` in whole groups of zeros */
        memset(b[0], 0, 12 * (size_t)gmax);
        for (int t = 0; t < len; t++) {
            int32_t v = k[t];
            int32_t d0 = (int8_t)(uint8_t)v;
            int32_t r1 = (v - d0) >> 8; /* exact: v - d0 is a multiple of 256 */
            int32_t d1 = (int8_t)(uint8_t)r1;
            int32_t d2 = (r1 - d1) >> 8;
            if (d2 < -128 || d2 > 127)
                return false;
            b[0][off + t] = (uint8_t)d0;
            b[1][off + t] = (uint8_t)d1;
            b[2][off + t] = (uint8_t)d2;
        }
        int32_t *d = vc->dig + (size_t)x * vc->gstride;
        for (int i = 0; i < ng; i++) /* little-endian words: tap 4i + j in byte j */
            for (int m = 0; m < 3; m++)
                memcpy(&d[3 * i + m], &b[m][4 * i], 4);
    }
    return true;
}

/* 16 sums >> 22: (acc0 + 256 acc1 + 65536 acc2) >> 22, modulo 2^32 before the shift. */
VNNI_TARGET static inline __m512i join_512(__m512i a0, __m512i a1, __m512i a2)
{
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(a0, _mm512_slli_epi32(a1, 8)),
                                 _mm512_slli_epi32(a2, 16));
    return _mm512_srai_epi32(s, PRECISION_BITS);
}

/* acc = _mm512_dpbusd_epi32(acc, v, k), written so that GCC keeps acc in its register (with
 * the intrinsic it copies every accumulator around each loop iteration). */
#define DPBUSD(acc, v, k) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(v), "v"(k))

/* Horizontal pass of the 16 RGB rows in[r] (of in_w pixels) into out[r] (n pixels). colv
 * holds ceil(in_w / 4) groups of VGROUP bytes + 16 spare. */
VNNI_TARGET static void hpass_block_rgb_vnni(const uint8_t *const in[VROWS],
                                              uint8_t *const out[VROWS], int in_w, int n,
                                              const vnni_coeffs *vc, uint8_t *colv)
{
    const int bytes = 3 * in_w, groups = (in_w + 3) >> 2;
    /* Four rows at a time: their 16 bytes at the group go into the four lanes of a vector,
     * and one byte permutation makes the 48 bytes of those rows (byte 12 q + 4 ch + j of the
     * result = lane q, byte 3 j + ch). The 64-byte store runs 16 bytes into the next rows'
     * place, written afterwards (past the last group: into colv's spare bytes). */
    static const uint8_t perm_bytes[64] = {
        0,  3,  6,  9,  1,  4,  7,  10, 2,  5,  8,  11, 16, 19, 22, 25,
        17, 20, 23, 26, 18, 21, 24, 27, 32, 35, 38, 41, 33, 36, 39, 42,
        34, 37, 40, 43, 48, 51, 54, 57, 49, 52, 55, 58, 50, 53, 56, 59};
    const __m512i perm = _mm512_loadu_si512((const void *)perm_bytes);
    const int full = bytes >= 16 ? (bytes - 16) / 12 + 1 : 0; /* groups with whole loads */
    int g = 0;
    /* Four groups at a time where 64-byte loads fit: per four rows, two rounds of two-source
     * byte permutations (rows 0+1 and 2+3 of two groups each, then the 48 bytes of each
     * group). All 16 results are made before the stores, which go in address order (each
     * runs 16 bytes into the place of the next, or of the next step's first). */
    if (bytes >= 64) {
        uint8_t ia[64], ib[64], ic0[64], ic1[64];
        for (int o = 0; o < 64; o++) {
            int gi = o / 24, w = o % 24, row = w / 12, b = w % 12, ch = b / 4, j = b % 4;
            int src = 12 * gi + 3 * j + ch + 64 * row;
            ia[o] = o < 48 ? (uint8_t)src : 0;
            ib[o] = o < 48 ? (uint8_t)(src + 24) : 0;
            int r4 = o / 12, b4 = o % 12;
            int src_c = (r4 >= 2 ? 64 : 0) + 12 * (r4 & 1) + b4;
            ic0[o] = o < 48 ? (uint8_t)src_c : 0;
            ic1[o] = o < 48 ? (uint8_t)(src_c + 24) : 0;
        }
        const __m512i pa = _mm512_loadu_si512((const void *)ia);
        const __m512i pb = _mm512_loadu_si512((const void *)ib);
        const __m512i pc0 = _mm512_loadu_si512((const void *)ic0);
        const __m512i pc1 = _mm512_loadu_si512((const void *)ic1);
        for (; g + 4 <= groups && 12 * g + 64 <= bytes; g += 4) {
            const int at = 12 * g;
            __m512i lo01[4], hi01[4], lo23[4], hi23[4];
            _Pragma("GCC unroll 4") for (int qq = 0; qq < 4; qq++) {
                const uint8_t *const *rp = in + 4 * qq;
                __m512i r0 = _mm512_loadu_si512((const void *)(rp[0] + at));
                __m512i r1 = _mm512_loadu_si512((const void *)(rp[1] + at));
                __m512i r2 = _mm512_loadu_si512((const void *)(rp[2] + at));
                __m512i r3 = _mm512_loadu_si512((const void *)(rp[3] + at));
                lo01[qq] = _mm512_permutex2var_epi8(r0, pa, r1);
                hi01[qq] = _mm512_permutex2var_epi8(r0, pb, r1);
                lo23[qq] = _mm512_permutex2var_epi8(r2, pa, r3);
                hi23[qq] = _mm512_permutex2var_epi8(r2, pb, r3);
            }
            uint8_t *o = colv + (size_t)g * VGROUP;
            _Pragma("GCC unroll 4") for (int qq = 0; qq < 4; qq++, o += 48)
                _mm512_storeu_si512((void *)o, _mm512_permutex2var_epi8(lo01[qq], pc0, lo23[qq]));
            _Pragma("GCC unroll 4") for (int qq = 0; qq < 4; qq++, o += 48)
                _mm512_storeu_si512((void *)o, _mm512_permutex2var_epi8(lo01[qq], pc1, lo23[qq]));
            _Pragma("GCC unroll 4") for (int qq = 0; qq < 4; qq++, o += 48)
                _mm512_storeu_si512((void *)o, _mm512_permutex2var_epi8(hi01[qq], pc0, hi23[qq]));
            _Pragma("GCC unroll 4") for (int qq = 0; qq < 4; qq++, o += 48)
                _mm512_storeu_si512((void *)o, _mm512_permutex2var_epi8(hi01[qq], pc1, hi23[qq]));
        }
    }
    for (; g < full; g++) {
        const int at = 12 * g;
        uint8_t *o = colv + (size_t)g * VGROUP;
        for (int q = 0; q < VROWS; q += 4, o += 48) {
            __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(in[q] + at)));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(in[q + 1] + at)), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(in[q + 2] + at)), 2);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(in[q + 3] + at)), 3);
            _mm512_storeu_si512((void *)o, _mm512_permutexvar_epi8(perm, v));
        }
    }
    for (; g < groups; g++) { /* the end of the rows: pixels past it read as 0 */
        const int at = 12 * g;
        const __mmask16 m = (__mmask16)((1u << (bytes - at)) - 1);
        uint8_t *o = colv + (size_t)g * VGROUP;
        for (int q = 0; q < VROWS; q += 4, o += 48) {
            __m512i v = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(m, in[q] + at));
            v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(m, in[q + 1] + at), 1);
            v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(m, in[q + 2] + at), 2);
            v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(m, in[q + 3] + at), 3);
            _mm512_storeu_si512((void *)o, _mm512_permutexvar_epi8(perm, v));
        }
    }
    /* Results go out four pixels at a time. A pixel's three sums become one vector of bytes
     * by packs (which work within 128-bit lanes, and saturate as clip8 does: after the shift
     * the sums lie within +-640): byte b = 3 row + ch of its 48 lands at pos(b) below. Two
     * rounds of two-source permutations follow: rows 0-7 and rows 8-15 of pixels x0, x0+1
     * (and of x0+2, x0+3) as 2 x 24 bytes, then row 4c + q's 12 bytes (pixels x0 .. x0+3)
     * in lane q of u[c]. */
    uint8_t pair[2][64], rows[2][64];
    for (int o = 0; o < 64; o++) {
        int jj = o / 24, bb = o % 24;
        for (int h = 0; h < 2; h++) {
            int b = 24 * h + bb, i = b & 15; /* pos(b): lane i >> 2, vector b >> 4, i & 3 */
            pair[h][o] = o < 48 ? (uint8_t)(64 * jj + 16 * (i >> 2) + 4 * (b >> 4) + (i & 3)) : 0;
        }
        int q = o >> 4, k = o & 15, j = k / 3, ch = k % 3;
        for (int c = 0; c < 2; c++) /* rows 4c + q of the 8 in a pair's 24 bytes */
            rows[c][o] = k < 12 ? (uint8_t)(64 * (j >> 1) + 24 * (j & 1) + 3 * (4 * c + q) + ch) : 0;
    }
    const __m512i pair_lo = _mm512_loadu_si512((const void *)pair[0]);
    const __m512i pair_hi = _mm512_loadu_si512((const void *)pair[1]);
    const __m512i rows0 = _mm512_loadu_si512((const void *)rows[0]);
    const __m512i rows1 = _mm512_loadu_si512((const void *)rows[1]);
    const __m512i half = _mm512_set1_epi32(HALF);
    int x0 = 0;
    for (; x0 < n; x0 += 4) {
        const int cnt = n - x0 < 4 ? n - x0 : 4;
        __m512i px[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                         _mm512_setzero_si512()};
        for (int j = 0; j < cnt; j++) {
            const int x = x0 + j;
            const uint8_t *p = colv + (size_t)vc->g0[x] * VGROUP;
            const int32_t *d = vc->dig + (size_t)x * vc->gstride;
            __m512i a00 = half, a01 = half, a02 = half;
            __m512i a10 = _mm512_setzero_si512(), a11 = a10, a12 = a10, a20 = a10, a21 = a10,
                    a22 = a10;
            for (int i = vc->ng[x]; i > 0; i--, p += VGROUP, d += 3) {
                __m512i v0 = _mm512_loadu_si512((const void *)p);
                __m512i v1 = _mm512_loadu_si512((const void *)(p + 64));
                __m512i v2 = _mm512_loadu_si512((const void *)(p + 128));
                __m512i k0 = _mm512_set1_epi32(d[0]), k1 = _mm512_set1_epi32(d[1]),
                        k2 = _mm512_set1_epi32(d[2]);
                DPBUSD(a00, v0, k0);
                DPBUSD(a01, v1, k0);
                DPBUSD(a02, v2, k0);
                DPBUSD(a10, v0, k1);
                DPBUSD(a11, v1, k1);
                DPBUSD(a12, v2, k1);
                DPBUSD(a20, v0, k2);
                DPBUSD(a21, v1, k2);
                DPBUSD(a22, v2, k2);
            }
            const __m512i s0 = join_512(a00, a10, a20), s1 = join_512(a01, a11, a21),
                          s2 = join_512(a02, a12, a22);
            px[j] = _mm512_packus_epi16(_mm512_packs_epi32(s0, s1), _mm512_packs_epi32(s2, s2));
        }
        const __m512i lo01 = _mm512_permutex2var_epi8(px[0], pair_lo, px[1]);
        const __m512i hi01 = _mm512_permutex2var_epi8(px[0], pair_hi, px[1]);
        const __m512i lo23 = _mm512_permutex2var_epi8(px[2], pair_lo, px[3]);
        const __m512i hi23 = _mm512_permutex2var_epi8(px[2], pair_hi, px[3]);
        __m512i u[4] = {_mm512_permutex2var_epi8(lo01, rows0, lo23),
                        _mm512_permutex2var_epi8(lo01, rows1, lo23),
                        _mm512_permutex2var_epi8(hi01, rows0, hi23),
                        _mm512_permutex2var_epi8(hi01, rows1, hi23)};
        const size_t at = 3 * (size_t)x0;
        if (x0 + 6 <= n) { /* 16-byte stores: 4 bytes run into pixels written afterwards */
            for (int c = 0; c < 4; c++) {
                uint8_t *const *o = out + 4 * c;
                _mm_storeu_si128((__m128i *)(o[0] + at), _mm512_castsi512_si128(u[c]));
                _mm_storeu_si128((__m128i *)(o[1] + at), _mm512_extracti32x4_epi32(u[c], 1));
                _mm_storeu_si128((__m128i *)(o[2] + at), _mm512_extracti32x4_epi32(u[c], 2));
                _mm_storeu_si128((__m128i *)(o[3] + at), _mm512_extracti32x4_epi32(u[c], 3));
            }
        } else { /* the end of the rows: exactly the cnt pixels */
            const __mmask16 m = (__mmask16)((1u << (3 * cnt)) - 1);
            for (int c = 0; c < 4; c++) {
                uint8_t *const *o = out + 4 * c;
                _mm_mask_storeu_epi8(o[0] + at, m, _mm512_castsi512_si128(u[c]));
                _mm_mask_storeu_epi8(o[1] + at, m, _mm512_extracti32x4_epi32(u[c], 1));
                _mm_mask_storeu_epi8(o[2] + at, m, _mm512_extracti32x4_epi32(u[c], 2));
                _mm_mask_storeu_epi8(o[3] + at, m, _mm512_extracti32x4_epi32(u[c], 3));
            }
        }
    }
}

/*
 * The vertical pass with vpdpbusd: four input rows are interleaved byte by byte (two rounds
 * of unpacks) so that each int32 lane holds one column of four consecutive taps; the weights'
 * digits are as in the horizontal kernel (groups start at each window's first row; the taps
 * past the window's end read its last row again, with weight 0). The unpacks work within
 * 128-bit lanes, and so do the packs at the end, which puts the columns back in order.
 * 64 columns a step, the last step masked.
 */
VNNI_TARGET static void vpass_row_vnni(const uint8_t *const *rows, int ng, const int32_t *d,
                                       uint8_t *out, int n)
{
    const __m512i half = _mm512_set1_epi32(HALF), zero = _mm512_setzero_si512();
    for (int k = 0; k < n; k += 64) {
        const __mmask64 m = n - k >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - k)) - 1;
        __m512i a0[4] = {half, half, half, half}, a1[4] = {zero, zero, zero, zero},
                a2[4] = {zero, zero, zero, zero};
        const uint8_t *const *r = rows;
        const int32_t *dd = d;
        for (int i = 0; i < ng; i++, r += 4, dd += 3) {
            __m512i A = _mm512_maskz_loadu_epi8(m, r[0] + k), B = _mm512_maskz_loadu_epi8(m, r[1] + k);
            __m512i C = _mm512_maskz_loadu_epi8(m, r[2] + k), D = _mm512_maskz_loadu_epi8(m, r[3] + k);
            __m512i lab = _mm512_unpacklo_epi8(A, B), hab = _mm512_unpackhi_epi8(A, B);
            __m512i lcd = _mm512_unpacklo_epi8(C, D), hcd = _mm512_unpackhi_epi8(C, D);
            __m512i q[4] = {_mm512_unpacklo_epi16(lab, lcd), _mm512_unpackhi_epi16(lab, lcd),
                            _mm512_unpacklo_epi16(hab, hcd), _mm512_unpackhi_epi16(hab, hcd)};
            __m512i k0 = _mm512_set1_epi32(dd[0]), k1 = _mm512_set1_epi32(dd[1]),
                    k2 = _mm512_set1_epi32(dd[2]);
            _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
                DPBUSD(a0[j], q[j], k0);
                DPBUSD(a1[j], q[j], k1);
                DPBUSD(a2[j], q[j], k2);
            }
        }
        __m512i s[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            s[j] = _mm512_add_epi32(_mm512_add_epi32(a0[j], _mm512_slli_epi32(a1[j], 8)),
                                    _mm512_slli_epi32(a2[j], 16));
            s[j] = _mm512_srai_epi32(s[j], PRECISION_BITS);
        }
        /* q[j] lane 4L + e is column 16L + 4j + e: packs within 128-bit lanes restore the
         * order (and saturate as clip8 does: after the shift the sums lie within +-640) */
        __m512i b = _mm512_packus_epi16(_mm512_packs_epi32(s[0], s[1]),
                                        _mm512_packs_epi32(s[2], s[3]));
        _mm512_mask_storeu_epi8(out + k, m, b);
    }
}

/* A 16x16 byte transpose: col[x * 32 + r] = in[r][x] for r, x < 16, in four rounds of
 * unpacks (bytes, then pairs, quads and halves of each column come together). */
__attribute__((target("avx2"))) static void transpose16_avx2(const uint8_t *in, size_t stride,
                                                             uint8_t *col)
{
    __m128i r[16], t[16], u[16], v[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm_loadu_si128((const __m128i *)(in + (size_t)i * stride));
    for (int i = 0; i < 8; i++) { /* t[i]: rows 2i, 2i+1 of columns 0-7; t[i+8]: of 8-15 */
        t[i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
        t[i + 8] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 16; h += 8) /* u[h+j]: rows 4j..4j+3 of columns h..h+3; u[h+4+j]: h+4.. */
        for (int j = 0; j < 4; j++) {
            u[h + j] = _mm_unpacklo_epi16(t[h + 2 * j], t[h + 2 * j + 1]);
            u[h + 4 + j] = _mm_unpackhi_epi16(t[h + 2 * j], t[h + 2 * j + 1]);
        }
    for (int g = 0; g < 16; g += 4) /* v[g+m]: rows 8m..8m+7 of columns g, g+1; v[g+2+m]: */
        for (int m = 0; m < 2; m++) { /* of columns g+2, g+3 */
            v[g + m] = _mm_unpacklo_epi32(u[g + 2 * m], u[g + 2 * m + 1]);
            v[g + 2 + m] = _mm_unpackhi_epi32(u[g + 2 * m], u[g + 2 * m + 1]);
        }
    for (int g = 0; g < 16; g += 4) {
        __m128i *o = (__m128i *)(col + (size_t)g * HBLOCK_LANES);
        const size_t next = HBLOCK_LANES / sizeof(__m128i); /* one column further */
        _mm_storeu_si128(o, _mm_unpacklo_epi64(v[g], v[g + 1]));
        _mm_storeu_si128(o + next, _mm_unpackhi_epi64(v[g], v[g + 1]));
        _mm_storeu_si128(o + 2 * next, _mm_unpacklo_epi64(v[g + 2], v[g + 3]));
        _mm_storeu_si128(o + 3 * next, _mm_unpackhi_epi64(v[g + 2], v[g + 3]));
    }
}

/* Horizontal pass of 32 L rows. */
__attribute__((target("avx2"))) static void hpass_block_l_avx2(const uint8_t *in,
                                                               size_t in_stride, uint8_t *out,
                                                               size_t out_stride, int in_w,
                                                               const coeffs *cx, uint8_t *col)
{
    int x0 = 0;
    for (; x0 + 16 <= in_w; x0 += 16) {
        uint8_t *c = col + (size_t)x0 * HBLOCK_LANES;
        transpose16_avx2(in + x0, in_stride, c);                   /* rows 0-15 */
        transpose16_avx2(in + 16 * in_stride + x0, in_stride, c + 16); /* rows 16-31 */
    }
    for (int r = 0; r < 32; r++) {
        const uint8_t *src = in + (size_t)r * in_stride;
        for (int x = x0; x < in_w; x++)
            col[(size_t)x * HBLOCK_LANES + r] = src[x];
    }
    for (int x = 0; x < cx->n; x++) {
        __m256i acc[4];
        hsum32_avx2(col + (size_t)cx->start[x] * HBLOCK_LANES, cx->k + (size_t)x * cx->stride,
                    cx->len[x], acc);
        uint8_t v[32];
        _mm_storeu_si128((__m128i *)v, pack16_avx2(acc[0], acc[1]));
        _mm_storeu_si128((__m128i *)(v + 16), pack16_avx2(acc[2], acc[3]));
        uint8_t *o = out + x;
        for (int r = 0; r < 32; r++, o += out_stride)
            *o = v[r];
    }
}

/* ---- resize --------------------------------------------------------------------------------- */

/* Horizontal pass of src rows [y0, y1) into tmp (rows of dst_w * c bytes). */
static void hpass(const img_u8 *src, int y0, int y1, uint8_t *tmp, size_t tstride,
                  const coeffs *cx)
{
    int c = src->c, y = y0;
    const int n = cx->n;
    vnni_coeffs vc;
    if (c == 3 && y < y1 && use_vnni() && make_vnni_coeffs(cx, &vc, &g_vnni_coef, true)) {
        /* blocks of VROWS rows; a last, shorter block reads its last row again and writes
         * the spare rows to a dummy row */
        const int groups = (src->w + 3) >> 2;
        /* 64-byte aligned: the kernel's loads of whole groups then never split a cache line */
        uint8_t *colv = scratch_get(&g_block, (size_t)groups * VGROUP + 16 + 63);
        colv += -(uintptr_t)colv & 63;
        uint8_t *dummy = scratch_get(&g_ocol, 3 * (size_t)n + 16);
        for (; y < y1; y += VROWS) {
            const uint8_t *in[VROWS];
            uint8_t *out[VROWS];
            for (int r = 0; r < VROWS; r++) {
                bool ok = y + r < y1;
                in[r] = src->px + (size_t)(ok ? y + r : y1 - 1) * src->stride;
                out[r] = ok ? tmp + (size_t)(y + r - y0) * tstride : dummy;
            }
            hpass_block_rgb_vnni(in, out, src->w, n, &vc, colv);
        }
        return;
    }
    if (use_avx2()) {
        int rows = c == 3 ? 8 : 32;
        /* + 8: spare bytes past the last column for the transposes' 16-byte loads */
        uint8_t *col = scratch_get(&g_block, (size_t)src->w * HBLOCK_LANES + 8);
        uint8_t *ocol = c == 3 ? scratch_get(&g_ocol, (size_t)n * HBLOCK_LANES_RGB + 8) : NULL;
        for (; y + rows <= y1; y += rows) {
            const uint8_t *in = src->px + (size_t)y * src->stride;
            uint8_t *out = tmp + (size_t)(y - y0) * tstride;
            if (c == 3)
                hpass_block_rgb_avx2(in, src->stride, out, tstride, src->w, cx, col, ocol);
            else
                hpass_block_l_avx2(in, src->stride, out, tstride, src->w, cx, col);
        }
    }
    for (; y < y1; y++)
        hpass_row(src->px + (size_t)y * src->stride, tmp + (size_t)(y - y0) * tstride, c, cx);
}

/* Vertical pass: src rows are the (already horizontally resampled) input, row 0 being input
 * row `first`. */
static void vpass(const uint8_t *src, size_t sstride, int first, int n, const coeffs *cy,
                  img_u8 *dst)
{
    vnni_coeffs vc;
    if (use_vnni() && make_vnni_coeffs(cy, &vc, &g_vnni_coef_y, false)) {
        const uint8_t **rows =
            scratch_get(&g_vnni_rows, (size_t)(vc.gstride / 3 * 4 + 1) * sizeof(*rows));
        for (int yy = 0; yy < cy->n; yy++) {
            const int len = cy->len[yy], taps = 4 * vc.ng[yy];
            const uint8_t *base = src + (size_t)(vc.g0[yy] - first) * sstride;
            for (int t = 0; t < taps; t++) /* past the window: its last row, weight 0 */
                rows[t] = base + (size_t)(t < len ? t : len - 1) * sstride;
            vpass_row_vnni(rows, vc.ng[yy], vc.dig + (size_t)yy * vc.gstride,
                           dst->px + (size_t)yy * dst->stride, n);
        }
        return;
    }
    bool simd = use_avx2();
    for (int yy = 0; yy < cy->n; yy++) {
        const uint8_t *base = src + (size_t)(cy->start[yy] - first) * sstride;
        const int32_t *k = cy->k + (size_t)yy * cy->stride;
        uint8_t *out = dst->px + (size_t)yy * dst->stride;
        if (simd)
            vpass_row_avx2(base, sstride, cy->len[yy], k, out, n);
        else
            vpass_row(base, sstride, cy->len[yy], k, out, 0, n);
    }
}

/* One pixel. With c known to be 3 or 1 these are plain moves, not calls to memcpy. */
static inline void copy_px(uint8_t *dst, const uint8_t *src, int c)
{
    if (c == 3)
        memcpy(dst, src, 3);
    else
        *dst = *src;
}

static inline void zero_px(uint8_t *dst, int c)
{
    if (c == 3)
        memset(dst, 0, 3);
    else
        *dst = 0;
}

/* PIL's NEAREST resize: ImagingScaleAffine with a = (w_in/w_out, 0, 0, 0, h_in/h_out, 0),
 * sampling at the accumulated pixel centres and truncating; samples that fall outside keep
 * PIL's fill, 0. Output rows that repeat a source row are copied from the previous one. */
static void resize_nearest(const img_u8 *src, img_u8 *dst)
{
    const int c = src->c;
    const size_t row = (size_t)dst->w * c;
    double a0 = (double)(float)src->w / dst->w, a4 = (double)(float)src->h / dst->h;
    int *xoff = scratch_get(&g_coef_x, (size_t)dst->w * sizeof(int));
    /* xin grows with x, so the columns inside the source are one run [x0, x1) */
    int x0 = dst->w, x1 = 0;
    double xo = a0 * 0.5, yo = a4 * 0.5;
    for (int x = 0; x < dst->w; x++, xo += a0) {
        int xi = xo < 0.0 ? -1 : (int)xo;
        if (xi >= 0 && xi < src->w) {
            xoff[x] = xi * c;
            x0 = x < x0 ? x : x0;
            x1 = x + 1;
        }
    }
    const uint8_t *prev_in = NULL;
    uint8_t *prev_out = NULL;
    for (int y = 0; y < dst->h; y++, yo += a4) {
        int yi = yo < 0.0 ? -1 : (int)yo;
        uint8_t *out = dst->px + (size_t)y * dst->stride;
        const uint8_t *in = yi >= 0 && yi < src->h ? src->px + (size_t)yi * src->stride : NULL;
        if (in && in == prev_in) {
            memcpy(out, prev_out, row);
            continue;
        }
        memset(out, 0, row);
        if (in && x0 < x1) {
            if (c == 3)
                for (int x = x0; x < x1; x++)
                    memcpy(out + 3 * (size_t)x, in + xoff[x], 3);
            else
                for (int x = x0; x < x1; x++)
                    out[x] = in[xoff[x]];
        }
        prev_in = in, prev_out = out;
    }
}

void img_resize(const img_u8 *src, img_u8 *dst, img_filter filter)
{
    if (src->c != dst->c)
        invariant_failed("img_resize: %d channels into %d", src->c, dst->c);
    if (filter != IMG_NEAREST && filter != IMG_BILINEAR && filter != IMG_BICUBIC)
        invariant_failed("img_resize: unsupported filter %d", (int)filter);
    if (src->w == dst->w && src->h == dst->h) { /* Image.resize returns a copy */
        img_copy(src, dst);
        return;
    }
    if (filter == IMG_NEAREST) {
        resize_nearest(src, dst);
        return;
    }
    const int c = src->c;
    bool need_h = src->w != dst->w, need_v = src->h != dst->h;
    if (!need_v) { /* horizontal only: straight into dst */
        coeffs cx = make_coeffs(src->w, dst->w, filter, &g_coef_x);
        hpass(src, 0, src->h, dst->px, dst->stride, &cx);
        return;
    }
    coeffs cy = make_coeffs(src->h, dst->h, filter, &g_coef_y);
    if (!need_h) {
        vpass(src->px, src->stride, 0, dst->w * c, &cy, dst);
        return;
    }
    coeffs cx = make_coeffs(src->w, dst->w, filter, &g_coef_x);
    /* the rows of src that the vertical pass reads; only those are resampled horizontally */
    int first = cy.start[0], last = first;
    for (int i = 0; i < cy.n; i++) {
        if (cy.start[i] < first)
            first = cy.start[i];
        if (cy.start[i] + cy.len[i] > last)
            last = cy.start[i] + cy.len[i];
    }
    size_t tstride = (size_t)dst->w * c;
    uint8_t *tmp = scratch_get(&g_tmp, tstride * (size_t)(last - first));
    hpass(src, first, last, tmp, tstride, &cx);
    vpass(tmp, tstride, first, dst->w * c, &cy, dst);
}

/* ---- crops, flips, rotations ---------------------------------------------------------------- */

void img_crop_padded(const img_u8 *src, int x0, int y0, img_u8 *dst)
{
    if (src->c != dst->c)
        invariant_failed("img_crop_padded: %d channels into %d", src->c, dst->c);
    const int c = src->c;
    /* the part of the box inside src, in dst coordinates */
    int bx0 = x0 < 0 ? -x0 : 0, by0 = y0 < 0 ? -y0 : 0;
    int bx1 = src->w - x0 < dst->w ? src->w - x0 : dst->w;
    int by1 = src->h - y0 < dst->h ? src->h - y0 : dst->h;
    if (bx1 <= bx0 || by1 <= by0) {
        img_fill(dst, 0);
        return;
    }
    for (int y = 0; y < dst->h; y++) {
        uint8_t *out = dst->px + (size_t)y * dst->stride;
        if (y < by0 || y >= by1) {
            memset(out, 0, (size_t)dst->w * c);
            continue;
        }
        const uint8_t *in = src->px + (size_t)(y + y0) * src->stride + (size_t)(bx0 + x0) * c;
        memset(out, 0, (size_t)bx0 * c);
        memcpy(out + (size_t)bx0 * c, in, (size_t)(bx1 - bx0) * c);
        memset(out + (size_t)bx1 * c, 0, (size_t)(dst->w - bx1) * c);
    }
}

/* dst[x] = src[w-1-x] for RGB, five pixels a step: the 16 bytes that end where source
 * pixel p ends hold one spare byte and pixels p-5..p-1. The 16-byte store runs one byte into
 * the next output pixel, which is written afterwards. Returns the pixels done. */
__attribute__((target("avx2"))) static int reverse_rgb_avx2(const uint8_t *src, uint8_t *dst,
                                                            int w)
{
    const __m128i rev5 = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, 0);
    int x = 0;
    for (; x + 6 <= w; x += 5) {
        __m128i v = _mm_loadu_si128((const __m128i *)(src + 3 * (size_t)(w - x) - 16));
        _mm_storeu_si128((__m128i *)(dst + 3 * (size_t)x), _mm_shuffle_epi8(v, rev5));
    }
    return x;
}

/* The same for L, sixteen pixels a step. */
__attribute__((target("avx2"))) static int reverse_l_avx2(const uint8_t *src, uint8_t *dst, int w)
{
    const __m128i rev16 = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    int x = 0;
    for (; x + 16 <= w; x += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(src + (size_t)(w - x) - 16));
        _mm_storeu_si128((__m128i *)(dst + x), _mm_shuffle_epi8(v, rev16));
    }
    return x;
}

/* One row mirrored: dst[x] = src[w-1-x] (pixels of c bytes; src and dst must not overlap). */
static void reverse_row(const uint8_t *src, uint8_t *dst, int w, int c)
{
    int x = 0;
    if (use_avx2())
        x = c == 3 ? reverse_rgb_avx2(src, dst, w) : reverse_l_avx2(src, dst, w);
    for (; x < w; x++)
        copy_px(dst + (size_t)x * c, src + (size_t)(w - 1 - x) * c, c);
}

void img_flip_lr(img_u8 *im)
{
    const size_t row = (size_t)im->w * im->c;
    uint8_t *tmp = scratch_get(&g_tmp, row);
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = im->px + (size_t)y * im->stride;
        reverse_row(p, tmp, im->w, im->c);
        memcpy(p, tmp, row);
    }
}

/* ---- rotation: Image.rotate(angle, NEAREST, fill 0) ------------------------------------------
 * Image.rotate (PIL 9.4, Image.py) takes transpose shortcuts for 0, 180 and, on square images,
 * 90 and 270; any other angle becomes Image.transform(AFFINE, NEAREST) with the inverse matrix
 * about the centre, which libImaging/Geometry.c's ImagingTransformAffine runs on one of three
 * paths, each with its own rounding: ImagingScaleAffine when the matrix has no shear terms,
 * affine_fixed (16.16 fixed point) when the four corners map within +-32768, and otherwise a
 * double-precision walk. All three are reproduced below, sums in PIL's order and without
 * fused multiply-adds. Output pixels whose sample falls outside the source keep the fill, 0. */

/* PIL's COORD(v): -1 below zero, else truncated. Samples at or past `size` are outside either
 * way, so they are clamped to `size` first: converting a double beyond int's range is
 * undefined in C (PIL's x86 build gets INT_MIN there, also outside). */
static inline int nearest_coord(double v, int size)
{
    return v < 0.0 ? -1 : v >= size ? size : (int)v;
}

/* ImagingScaleAffine (a[1] == a[3] == 0; for a rotation: a sine that rounds to zero at 15
 * digits, i.e. within ~3e-14 degrees of 0 or 180 but not exactly there). Column and row
 * positions are accumulated from the first pixel centre and truncated. PIL's column table
 * starts zeroed and only the run [xmin, xmax) of columns that hit the source is copied, so a
 * miss inside that run would read column 0; with a constant step there are no such misses,
 * but the table is kept the same way. */
NO_FMA static void scale_nearest(const img_u8 *src, img_u8 *dst, const double a[6])
{
    const int c = src->c;
    int *xin = scratch_get(&g_coef_x, (size_t)dst->w * sizeof(int));
    int xmin = dst->w, xmax = 0;
    double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
    for (int x = 0; x < dst->w; x++, xo += a[0]) {
        int xi = nearest_coord(xo, src->w);
        xin[x] = 0;
        if (xi >= 0 && xi < src->w) {
            xin[x] = xi;
            xmin = x < xmin ? x : xmin;
            xmax = x + 1;
        }
    }
    for (int y = 0; y < dst->h; y++, yo += a[4]) {
        uint8_t *out = dst->px + (size_t)y * dst->stride;
        int yi = nearest_coord(yo, src->h);
        memset(out, 0, (size_t)dst->w * c);
        if (yi < 0 || yi >= src->h)
            continue;
        const uint8_t *in = src->px + (size_t)yi * src->stride;
        for (int x = xmin; x < xmax; x++)
            copy_px(out + (size_t)x * c, in + (size_t)xin[x] * c, c);
    }
}

/* check_fixed: the sample position of output corner (x, y) fits 16.16 fixed point. */
NO_FMA static bool corner_fits_fixed(const double a[6], int x, int y)
{
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

/* PIL's FIX: floor(v * 65536 + 0.5) as 16.16 fixed point. The corner check keeps it within
 * int32; the value is carried as uint32 so that the sums below wrap as PIL's (built with
 * -fwrapv) do instead of being undefined. */
static inline uint32_t fix16(double v)
{
    return (uint32_t)(int64_t)floor(v * 65536.0 + 0.5);
}

/* affine_fixed: output (x, y) samples input (a0 x + a1 y + a2, a3 x + a4 y + a5) at pixel
 * centres, stepping in 16.16 fixed point from the first centre (so the steps' rounding
 * accumulates, as in PIL) and flooring with a shift. */
NO_FMA static void affine_fixed_nearest(const img_u8 *src, img_u8 *dst, const double a[6])
{
    const int c = src->c;
    uint32_t a0 = fix16(a[0]), a1 = fix16(a[1]), a3 = fix16(a[3]), a4 = fix16(a[4]);
    uint32_t row_x = fix16(a[2] + a[0] * 0.5 + a[1] * 0.5);
    uint32_t row_y = fix16(a[5] + a[3] * 0.5 + a[4] * 0.5);
    for (int y = 0; y < dst->h; y++, row_x += a1, row_y += a4) {
        uint8_t *out = dst->px + (size_t)y * dst->stride;
        uint32_t xx = row_x, yy = row_y;
        for (int x = 0; x < dst->w; x++, xx += a0, yy += a3, out += c) {
            int xi = (int32_t)xx >> 16, yi = (int32_t)yy >> 16;
            if (xi >= 0 && xi < src->w && yi >= 0 && yi < src->h)
                copy_px(out, src->px + (size_t)yi * src->stride + (size_t)xi * c, c);
            else
                zero_px(out, c);
        }
    }
}

/* ImagingTransformAffine's own loop for matrices beyond the fixed-point range: the same walk
 * in doubles. Note its first centre sums a1 before a0, unlike affine_fixed. */
NO_FMA static void affine_float_nearest(const img_u8 *src, img_u8 *dst, const double a[6])
{
    const int c = src->c;
    double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
    double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for (int y = 0; y < dst->h; y++, xo += a[1], yo += a[4]) {
        uint8_t *out = dst->px + (size_t)y * dst->stride;
        double xx = xo, yy = yo;
        for (int x = 0; x < dst->w; x++, xx += a[0], yy += a[3], out += c) {
            int xi = nearest_coord(xx, src->w), yi = nearest_coord(yy, src->h);
            if (xi >= 0 && xi < src->w && yi >= 0 && yi < src->h)
                copy_px(out, src->px + (size_t)yi * src->stride + (size_t)xi * c, c);
            else
                zero_px(out, c);
        }
    }
}

/* Image.transform(dst size, AFFINE, a, NEAREST) with fill 0: ImagingTransformAffine's choice
 * of path. */
NO_FMA static void affine_nearest(const img_u8 *src, img_u8 *dst, const double a[6])
{
    const int w = dst->w, h = dst->h;
    if (a[1] == 0 && a[3] == 0)
        scale_nearest(src, dst, a);
    else if (corner_fits_fixed(a, 0, 0) && corner_fits_fixed(a, w, h) &&
             corner_fits_fixed(a, 0, h) && corner_fits_fixed(a, w, 0))
        affine_fixed_nearest(src, dst, a);
    else
        affine_float_nearest(src, dst, a);
}

/* PIL's transpose ROTATE_90 / ROTATE_180 / ROTATE_270 (counter-clockwise) for a same-size
 * output (180, or a square image). A quarter turn reads one source column per output row,
 * stepping a row at a time; the few columns in use stay in cache. */
static void transpose_rotate(const img_u8 *src, img_u8 *dst, int angle)
{
    const int c = src->c, w = dst->w, h = dst->h;
    for (int y = 0; y < h; y++) {
        uint8_t *out = dst->px + (size_t)y * dst->stride;
        if (angle == 180) { /* out(x, y) = in(w-1-x, h-1-y) */
            reverse_row(src->px + (size_t)(h - 1 - y) * src->stride, out, w, c);
            continue;
        }
        const uint8_t *sp; /* in(w-1-y, x) for 90, in(y, h-1-x) for 270 */
        ptrdiff_t step;
        if (angle == 90) {
            sp = src->px + (size_t)(src->w - 1 - y) * c;
            step = (ptrdiff_t)src->stride;
        } else {
            sp = src->px + (size_t)(src->h - 1) * src->stride + (size_t)y * c;
            step = -(ptrdiff_t)src->stride;
        }
        if (c == 3)
            for (int x = 0; x < w; x++, sp += step)
                memcpy(out + 3 * (size_t)x, sp, 3);
        else
            for (int x = 0; x < w; x++, sp += step)
                out[x] = *sp;
    }
}

/* Python's float `v % m` for m > 0: fmod, moved up by m when negative (which can round to m
 * itself: -1e-20 % 360.0 is 360.0, and PIL then rotates by "360" through the affine path);
 * a zero remainder is +0. */
static double py_mod(double v, double m)
{
    double r = fmod(v, m);
    if (r == 0.0)
        return 0.0;
    return r < 0.0 ? r + m : r;
}

/* Python's round(v, 15): the double nearest to v correctly rounded to 15 decimals (ties to
 * even; CPython goes through a correctly rounded decimal string). glibc's printf rounds the
 * exact binary value the same way, and strtod reads the decimal back correctly rounded;
 * a negative value that rounds to zero stays -0.0 in both. */
static double py_round15(double v)
{
    char buf[64]; /* |v| <= 1 here: "-1.000000000000000" */
    snprintf(buf, sizeof buf, "%.15f", v);
    return strtod(buf, NULL);
}

NO_FMA void img_rotate(const img_u8 *src, img_u8 *dst, double angle_deg)
{
    if (src->c != dst->c || src->w != dst->w || src->h != dst->h)
        invariant_failed("img_rotate: %dx%dx%d into %dx%dx%d", src->w, src->h, src->c, dst->w, dst->h,
            dst->c);
    if (!isfinite(angle_deg))
        invariant_failed("img_rotate: angle %g is not finite", angle_deg);
    if (src->px == dst->px)
        invariant_failed("img_rotate: src and dst must be different images");
    /* Image.rotate: angle % 360.0, then the transposes, compared exactly */
    double angle = py_mod(angle_deg, 360.0);
    if (angle == 0.0) {
        img_copy(src, dst);
        return;
    }
    if (angle == 180.0 || ((angle == 90.0 || angle == 270.0) && src->w == src->h)) {
        transpose_rotate(src, dst, (int)angle);
        return;
    }
    /* -math.radians(angle) (= angle * (pi / 180), negated), cos and sin rounded to 15
     * decimals (which makes 90 and 270 exact), the matrix about the centre (w/2, h/2):
     * transform(-cx, -cy) with the translation still 0.0, then + (cx, cy). */
    const double deg_to_rad = M_PI / 180.0;
    const double t = -(angle * deg_to_rad);
    double a[6] = {py_round15(cos(t)), py_round15(sin(t)), 0.0,
                   py_round15(-sin(t)), py_round15(cos(t)), 0.0};
    const double cx = src->w / 2.0, cy = src->h / 2.0;
    a[2] = a[0] * -cx + a[1] * -cy + a[2];
    a[5] = a[3] * -cx + a[4] * -cy + a[5];
    a[2] += cx;
    a[5] += cy;
    affine_nearest(src, dst, a);
}

/* VISSL's ImgRotatePil takes its angles from torch.linspace(0, 360, n + 1) (float32, the
 * default dtype) and hands them to F.rotate as Python floats. PyTorch 1.13's CPU linspace
 * kernel (RangeFactoriesKernel.cpp, AVX2 build as dispatched on x86-64 with AVX2) computes,
 * with step = 360f / n in float32:
 *   element i = start + step * i below the halfway index (steps / 2), else
 *               end - step * (steps - 1 - i), contracted to one fused multiply-add;
 * except that the first steps / 16 * 16 elements go through the vector path in blocks of 8:
 * the block's first element as above, then the block's lane j = first + j * step, rounded
 * twice (no fusion there). Checked against torch for n = 1..1000. */
NO_FMA double img_rotate_linspace_angle(int k, int num_angles)
{
    if (num_angles < 1 || k < 0 || k > num_angles)
        invariant_failed("img_rotate_linspace_angle: k %d of %d angles", k, num_angles);
    const int64_t steps = (int64_t)num_angles + 1, half = steps / 2;
    const float start = 0.0f, end = 360.0f;
    const float step = (end - start) / (float)(steps - 1);
    int64_t first = k; /* the element computed directly */
    if (k < steps / 16 * 16)
        first = k / 8 * 8;
    float v = first < half ? fmaf(step, (float)first, start)
                           : fmaf(-step, (float)(steps - 1 - first), end);
    if (first != k)
        v = v + (float)(k - first) * step;
    return v;
}

/* ---- grayscale, float ----------------------------------------------------------------------- */

/* PIL's L24: ITU-R 601-2 luma in 16-bit fixed point, rounded. */
static inline uint8_t luma(const uint8_t *p)
{
    return (uint8_t)((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

/* PIL's L24 for 8 pixels at p (reads 32 bytes, uses 24): the 8 lumas in the low 8 bytes.
 * Bytes 0-15 go to the low half and 12-27 to the high half, then each half picks its 4
 * pixels' R, G and B as 32-bit lanes. */
__attribute__((target("avx2"))) static inline __m128i luma8_avx2(const uint8_t *p)
{
    const __m256i halves = _mm256_setr_epi32(0, 1, 2, 3, 3, 4, 5, 6);
#define PICK(k)                                                                                \
    _mm256_setr_epi8(k, -1, -1, -1, k + 3, -1, -1, -1, k + 6, -1, -1, -1, k + 9, -1, -1, -1, k, \
                     -1, -1, -1, k + 3, -1, -1, -1, k + 6, -1, -1, -1, k + 9, -1, -1, -1)
    const __m256i pick_r = PICK(0), pick_g = PICK(1), pick_b = PICK(2);
#undef PICK
    __m256i v = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)p), halves);
    __m256i r = _mm256_shuffle_epi8(v, pick_r), g = _mm256_shuffle_epi8(v, pick_g);
    __m256i b = _mm256_shuffle_epi8(v, pick_b);
    __m256i s = _mm256_add_epi32(_mm256_mullo_epi32(r, _mm256_set1_epi32(19595)),
                                 _mm256_mullo_epi32(g, _mm256_set1_epi32(38470)));
    s = _mm256_add_epi32(s, _mm256_mullo_epi32(b, _mm256_set1_epi32(7471)));
    s = _mm256_srli_epi32(_mm256_add_epi32(s, _mm256_set1_epi32(0x8000)), 16);
    s = _mm256_packus_epi32(s, s);
    s = _mm256_packus_epi16(s, s); /* the 4 lumas of each half in its bytes 0-3 */
    s = _mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    return _mm256_castsi256_si128(s);
}

/* One row of convert("L"); returns the pixels done (the loads stay inside the row). */
__attribute__((target("avx2"))) static int rgb_to_l_avx2(const uint8_t *in, uint8_t *out, int w)
{
    int x = 0;
    for (; x + 11 <= w; x += 8)
        _mm_storel_epi64((__m128i *)(out + x), luma8_avx2(in + 3 * (size_t)x));
    return x;
}

/* One row of grayscale3 in place: each luma written back into R, G and B. */
__attribute__((target("avx2"))) static int grayscale3_avx2(uint8_t *p, int w)
{
    const __m128i lo = _mm_setr_epi8(0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5);
    const __m128i hi = _mm_setr_epi8(5, 5, 6, 6, 6, 7, 7, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    int x = 0;
    for (; x + 11 <= w; x += 8) {
        uint8_t *q = p + 3 * (size_t)x;
        __m128i l = luma8_avx2(q);
        _mm_storeu_si128((__m128i *)q, _mm_shuffle_epi8(l, lo));
        _mm_storel_epi64((__m128i *)(q + 16), _mm_shuffle_epi8(l, hi));
    }
    return x;
}

void img_rgb_to_l(const img_u8 *src, img_u8 *dst)
{
    if (src->w != dst->w || src->h != dst->h || dst->c != 1)
        invariant_failed("img_rgb_to_l: %dx%dx%d into %dx%dx%d", src->w, src->h, src->c, dst->w, dst->h,
            dst->c);
    if (src->c == 1) { /* convert("L") of an L image is a copy */
        img_copy(src, dst);
        return;
    }
    bool simd = use_avx2();
    for (int y = 0; y < src->h; y++) {
        const uint8_t *in = src->px + (size_t)y * src->stride;
        uint8_t *out = dst->px + (size_t)y * dst->stride;
        int x = simd ? rgb_to_l_avx2(in, out, src->w) : 0;
        for (; x < src->w; x++)
            out[x] = luma(in + 3 * (size_t)x);
    }
}

void img_grayscale3(img_u8 *im)
{
    if (im->c != 3)
        invariant_failed("img_grayscale3: needs an RGB image, got %d channels", im->c);
    bool simd = use_avx2();
    for (int y = 0; y < im->h; y++) {
        uint8_t *row = im->px + (size_t)y * im->stride;
        int x = simd ? grayscale3_avx2(row, im->w) : 0;
        for (uint8_t *p = row + 3 * (size_t)x; x < im->w; x++, p += 3)
            p[0] = p[1] = p[2] = luma(p);
    }
}

void img_to_float_chw(const img_u8 *im, const float *mean, const float *std, float *out)
{
    const int c = im->c;
    const size_t plane = (size_t)im->w * (size_t)im->h;
    for (int ch = 0; ch < c; ch++) {
        const float m = mean[ch], s = std[ch];
        /* torch: float(px) / 255, then - mean, then / std, each rounded to float32; a table
         * of the 256 possible results is the same numbers, computed once. */
        float lut[256];
        for (int v = 0; v < 256; v++)
            lut[v] = ((float)v / 255.0f - m) / s;
        float *o = out + (size_t)ch * plane;
        for (int y = 0; y < im->h; y++) {
            const uint8_t *in = im->px + (size_t)y * im->stride + ch;
            for (int x = 0; x < im->w; x++)
                *o++ = lut[in[(size_t)x * c]];
        }
    }
}

/*
 * blur.c — PIL's GaussianBlur (libImaging/BoxBlur.c) and SMOOTH (libImaging/Filter.c), bit
 * for bit.
 *
 * GaussianBlur(radius) is three passes of an "extended box" blur along rows, then three along
 * columns. The box has a float radius: an integer part r (2r+1 whole taps, weight ww each)
 * and a fraction (the two taps just outside, weight fw each), all in 8.24 fixed point with
 * PIL's rounding. Edges repeat the first/last pixel. Every pass here runs across whole
 * lines at once (one counter per sample of a line, 32 samples per vector block), which is
 * PIL's per-line arithmetic for many lines side by side: columns are blurred in place of
 * the image, rows on a transposed copy (PIL transposes too, for its second direction).
 * On x86-64 the passes and the RGB transposes have AVX2 / AVX-512 versions, picked at run
 * time: a pass goes down one block of samples through all the lines with its counters in
 * registers (see box_pass_avx2_body for the two exact rewrites of PIL's arithmetic it uses).
 *
 * SMOOTH is a 3x3 float convolution in PIL's summation order (row y+1, y, y-1; left to
 * right), + 0.5 and truncation; border pixels are copied. Vector lanes do the same float
 * operations in the same order.
 */
/* PIL's results depend on every float operation being rounded on its own: never fuse a
 * multiply and an add (which GCC's gnu17 default does wherever the target has FMA). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "augment/blur_internal.h"
#include "augment/img.h"

#include "log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the extended box --------------------------------------------------------------------- */

typedef struct {
    int radius;      /* integer part of the box radius */
    uint32_t ww, fw; /* 8.24 weights of the inner taps and of the two fractional taps */
} box_weights;

/* _gaussian_blur_radius: the box radius whose `passes` repetitions approximate a Gaussian of
 * this standard deviation (Gwosdek et al.); float/double exactly as PIL mixes them. */
static float gaussian_box_radius(float radius, int passes)
{
    float sigma2 = radius * radius / (float)passes;
    float L = (float)sqrt(12.0 * sigma2 + 1.0);
    float l = (float)floor((L - 1.0) / 2.0);
    float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
    a /= 6 * (sigma2 - (l + 1) * (l + 1));
    return l + a;
}

/* ImagingHorizontalBoxBlur's weights for a float box radius. */
static box_weights box_weights_for(float box_radius)
{
    box_weights bw;
    bw.radius = (int)box_radius;
    bw.ww = (uint32_t)((float)(1u << 24) / (box_radius * 2 + 1));
    bw.fw = ((1u << 24) - (uint32_t)(bw.radius * 2 + 1) * bw.ww) / 2;
    return bw;
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Blocks of 32 samples as four lane vectors (see blur_internal.h); the counters of a block
 * are stored in that same lane order. */
enum { BLOCK = VBLOCK };

/* The 32 bytes at p as four lane vectors: b[m] = byte m of each 32-bit word. */
static inline void unpack(const uint8_t *p, u32x8 b[4])
{
    u32x8 w;
    memcpy(&w, p, sizeof w);
    b[0] = w & 0xff;
    b[1] = (w >> 8) & 0xff;
    b[2] = (w >> 16) & 0xff;
    b[3] = w >> 24;
}

/* Byte m of every word of the sub, add and far words (ws, wa, wf): move the counter c, and
 * or the blurred bytes into byte m of res. A macro, so that the vectors stay in registers
 * (a function taking 32-byte vectors by value draws GCC's ABI note). */
#define BOX_STEP(c, m)                                                                     \
    do {                                                                                   \
        u32x8 s_ = (ws >> (8 * (m))) & 0xff, a_ = (wa >> (8 * (m))) & 0xff;                \
        u32x8 f_ = (wf >> (8 * (m))) & 0xff;                                               \
        (c) += a_ - s_; /* unsigned wrap-around intended: never really negative */         \
        u32x8 bulk_ = (c) * ww + (s_ + f_) * fw;                                           \
        res |= ((bulk_ + (1u << 23)) >> 24) << (8 * (m));                                 \
    } while (0)

/* The counters for position -1: r+1 copies of line 0, then lines 0 .. r-1 (clamped). */
static void box_init(const uint8_t *in, size_t istride, int len, int n, int r, uint32_t *acc)
{
    const int edge_a = imin(r + 1, len);
    const uint32_t first_w = (uint32_t)(r + 1), last_w = (uint32_t)(r - edge_a + 1);
    const uint8_t *lastline = in + (size_t)(len - 1) * istride;
    int k = 0;
    for (; k + BLOCK <= n; k += BLOCK) {
        u32x8 a[4], f[4], l[4];
        unpack(in + k, f);
        unpack(lastline + k, l);
        for (int m = 0; m < 4; m++)
            a[m] = f[m] * first_w + l[m] * last_w;
        for (int x = 0; x < edge_a - 1; x++) {
            unpack(in + (size_t)x * istride + (size_t)k, f);
            for (int m = 0; m < 4; m++)
                a[m] += f[m];
        }
        memcpy(acc + k, a, sizeof a);
    }
    for (; k < n; k++) {
        acc[k] = (uint32_t)in[k] * first_w + (uint32_t)lastline[k] * last_w;
        for (int x = 0; x < edge_a - 1; x++)
            acc[k] += in[(size_t)x * istride + (size_t)k];
    }
}

/*
 * One box pass along `len` lines of `n` samples each: line i starts at in + i*istride and
 * its result goes to out + i*ostride; every sample column is blurred independently across
 * the lines. `acc` holds n counters. This is ImagingLineBoxBlur32/8 run for n columns at
 * once, with its three edge cases folded into clamped indices (the window of position x
 * is x-r-1 .. x+r+1, clamped to 0 .. len-1).
 */
SIMD_CLONES
static void box_pass(const uint8_t *restrict in, size_t istride, uint8_t *restrict out,
                     size_t ostride, int len, int n, const box_weights *bw,
                     uint32_t *restrict acc)
{
    const int r = bw->radius, last = len - 1;
    const uint32_t ww = bw->ww, fw = bw->fw;
    box_init(in, istride, len, n, r, acc);
    for (int x = 0; x <= last; x++) {
        const uint8_t *sub = in + (size_t)imax(x - r - 1, 0) * istride;
        const uint8_t *add = in + (size_t)imin(x + r, last) * istride;
        const uint8_t *far = in + (size_t)imin(x + r + 1, last) * istride;
        uint8_t *o = out + (size_t)x * ostride;
        int k = 0;
        for (; k + BLOCK <= n; k += BLOCK) {
            u32x8 ws, wa, wf, c0, c1, c2, c3, res = {0};
            memcpy(&ws, sub + k, sizeof ws);
            memcpy(&wa, add + k, sizeof wa);
            memcpy(&wf, far + k, sizeof wf);
            memcpy(&c0, acc + k, sizeof c0);
            memcpy(&c1, acc + k + 8, sizeof c1);
            memcpy(&c2, acc + k + 16, sizeof c2);
            memcpy(&c3, acc + k + 24, sizeof c3);
            BOX_STEP(c0, 0);
            BOX_STEP(c1, 1);
            BOX_STEP(c2, 2);
            BOX_STEP(c3, 3);
            memcpy(acc + k, &c0, sizeof c0);
            memcpy(acc + k + 8, &c1, sizeof c1);
            memcpy(acc + k + 16, &c2, sizeof c2);
            memcpy(acc + k + 24, &c3, sizeof c3);
            memcpy(o + k, &res, sizeof res);
        }
        for (; k < n; k++) {
            acc[k] += (uint32_t)add[k] - (uint32_t)sub[k];
            uint32_t bulk = acc[k] * ww + (uint32_t)(sub[k] + far[k]) * fw;
            o[k] = (uint8_t)((bulk + (1u << 23)) >> 24);
        }
    }
}

/* Pixel transposes between `im` (h lines of w*c bytes) and a packed buffer of w lines of
 * h*c bytes. For RGB on x86-64 with AVX2, 8 image rows at a time go through 32-bit words
 * (see transpose8_rgb_avx2 in simd_internal.h); the rest, and L images, in bands of TBAND image rows so that both
 * sides stay in cache. The pixel copy has a constant size per branch, which the compiler
 * turns into plain moves. */
enum { TBAND = 16 };

static inline void copy_px(uint8_t *d, const uint8_t *s, int c)
{
    if (c == 3)
        memcpy(d, s, 3);
    else
        *d = *s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include "augment/simd_internal.h"
#define HAVE_AVX2_KERNELS 1

static int g_avx2 = -1, g_avx512 = -1;

static int have_avx2(void)
{
    if (g_avx2 < 0)
        g_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
    return g_avx2;
}

static int have_avx512(void)
{
    if (g_avx512 < 0)
        g_avx512 = have_avx2() && __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    return g_avx512;
}
#endif

/* Test hook (img.h): 0 forces the portable kernels, 1 allows AVX2, 2 (or more) the best the
 * CPU has. Returns the level in use. */
int img_blur_set_simd(int level)
{
#ifdef HAVE_AVX2_KERNELS
    g_avx2 = level >= 1 && __builtin_cpu_supports("avx2");
    g_avx512 = -1;
    if (level == 1)
        g_avx512 = 0;
    return have_avx512() ? 2 : g_avx2;
#else
    (void)level;
    return 0;
#endif
}

#ifdef HAVE_AVX2_KERNELS
/* The inverse, 8 rows at `out` (stride apart): see transpose8_rgb_back_avx2. */
__attribute__((target("avx2"))) static void transpose8_from_avx2(const uint8_t *src, size_t line, int w,
                                                                 uint8_t *out, size_t stride)
{
    uint8_t *const rows[8] = {out,          out + stride,     out + 2 * stride, out + 3 * stride,
                              out + 4 * stride, out + 5 * stride, out + 6 * stride, out + 7 * stride};
    transpose8_rgb_back_avx2(src, line, w, rows);
}
#endif

static void transpose_to(const img_u8 *im, uint8_t *dst)
{
    const size_t c = (size_t)im->c, line = (size_t)im->h * c;
    int y0 = 0;
#ifdef HAVE_AVX2_KERNELS
    if (im->c == 3 && have_avx2())
        for (; y0 + 8 <= im->h; y0 += 8)
            transpose8_rgb_avx2(im->px + (size_t)y0 * im->stride, im->stride, im->w,
                               dst + (size_t)y0 * 3, line);
#endif
    for (; y0 < im->h; y0 += TBAND) {
        const int y1 = imin(y0 + TBAND, im->h);
        for (int x = 0; x < im->w; x++) {
            const uint8_t *s = im->px + (size_t)y0 * im->stride + (size_t)x * c;
            uint8_t *d = dst + (size_t)x * line + (size_t)y0 * c;
            for (int y = y0; y < y1; y++, s += im->stride, d += c)
                copy_px(d, s, im->c);
        }
    }
}

/* src needs 8 spare bytes after its last line (see transpose8_from_avx2). */
static void transpose_from(const uint8_t *src, img_u8 *im)
{
    const size_t c = (size_t)im->c, line = (size_t)im->h * c;
    int y0 = 0;
#ifdef HAVE_AVX2_KERNELS
    if (im->c == 3 && have_avx2())
        for (; y0 + 8 <= im->h; y0 += 8)
            transpose8_from_avx2(src + (size_t)y0 * 3, line, im->w,
                                 im->px + (size_t)y0 * im->stride, im->stride);
#endif
    for (; y0 < im->h; y0 += TBAND) {
        const int y1 = imin(y0 + TBAND, im->h);
        for (int x = 0; x < im->w; x++) {
            const uint8_t *s = src + (size_t)x * line + (size_t)y0 * c;
            uint8_t *d = im->px + (size_t)y0 * im->stride + (size_t)x * c;
            for (int y = y0; y < y1; y++, s += c, d += im->stride)
                copy_px(d, s, im->c);
        }
    }
}

#ifdef HAVE_AVX2_KERNELS
/* 8 bytes at p as int32 lanes */
#define LOAD8_EPI32(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))

/* Samples k .. k + 8 nb - 1 of every line (nb: 1 or 4 vectors of 8, a constant where this
 * is inlined). */
__attribute__((target("avx2"), always_inline)) static inline void
box_cols_avx2(const uint8_t *restrict in, size_t istride, uint8_t *restrict out, size_t ostride,
              int len, int k, const box_weights *bw, const int nb)
{
    const int r = bw->radius, last = len - 1;
    const int edge_a = imin(r + 1, len);
    const uint8_t *lastline = in + (size_t)last * istride;
    const __m256i ww = _mm256_set1_epi32((int)bw->ww), fw = _mm256_set1_epi32((int)bw->fw);
    const __m256i round = _mm256_set1_epi32(1 << 23);
    const __m256i fw1 = _mm256_set1_epi32(r + 1), lw1 = _mm256_set1_epi32(r - edge_a + 1);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i c[4], a[4];
    /* box_init: r+1 copies of line 0, lines 0 .. edge_a-2, r-edge_a+1 copies of the last */
    _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++)
        c[j] = _mm256_add_epi32(_mm256_mullo_epi32(LOAD8_EPI32(in + k + 8 * j), fw1),
                                _mm256_mullo_epi32(LOAD8_EPI32(lastline + k + 8 * j), lw1));
    for (int x = 0; x < edge_a - 1; x++)
        _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++)
            c[j] = _mm256_add_epi32(
                c[j], LOAD8_EPI32(in + (size_t)x * istride + (size_t)k + 8 * (size_t)j));
    const uint8_t *ap = in + (size_t)imin(r, last) * istride + k;
    _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++) {
        c[j] = _mm256_add_epi32(_mm256_mullo_epi32(c[j], ww), round);
        a[j] = LOAD8_EPI32(ap + 8 * j);
    }
    uint8_t *o = out + k;
    for (int x = 0; x <= last; x++, o += ostride) {
        const uint8_t *sp = in + (size_t)imax(x - r - 1, 0) * istride + k;
        const uint8_t *fp = in + (size_t)imin(x + r + 1, last) * istride + k;
        __m256i res[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++) {
            __m256i s = LOAD8_EPI32(sp + 8 * j), f = LOAD8_EPI32(fp + 8 * j);
            c[j] = _mm256_add_epi32(c[j], _mm256_mullo_epi32(_mm256_sub_epi32(a[j], s), ww));
            __m256i sf = _mm256_mullo_epi32(_mm256_add_epi32(s, f), fw);
            res[j] = _mm256_srli_epi32(_mm256_add_epi32(c[j], sf), 24);
            a[j] = f;
        }
        /* 0..255 each: pack to bytes, then put the words back in order */
        if (nb == 1) {
            __m256i p = _mm256_packus_epi32(res[0], res[0]);
            __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p, p), order);
            _mm_storel_epi64((__m128i *)o, _mm256_castsi256_si128(b));
        } else {
            __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(res[0], res[1]),
                                            _mm256_packus_epi32(res[2], res[3]));
            _mm256_storeu_si256((__m256i *)o, _mm256_permutevar8x32_epi32(b, order));
        }
    }
}

/*
 * box_pass for AVX2: a block of samples at a time through all the lines, so that the
 * counters stay in registers. Two rewrites of PIL's u32 arithmetic, both exact modulo 2^32
 * (which is all u32 arithmetic is): the counter is kept as C = c * ww + 2^23 (moved by
 * (add - sub) * ww), so that bulk + 2^23 = C + (sub + far) * fw; and the "add" line of a
 * position is the "far" line of the one before (both min(x + r + 1, last)), so it is loaded
 * once. Samples k .. n - 1: blocks of 32 samples, then of 8; the last n % 8 samples are done
 * one by one.
 */
__attribute__((target("avx2"), always_inline)) static inline void
box_pass_avx2_body(const uint8_t *restrict in, size_t istride, uint8_t *restrict out,
                   size_t ostride, int len, int n, const box_weights *bw, int k)
{
    for (; k + 32 <= n; k += 32)
        box_cols_avx2(in, istride, out, ostride, len, k, bw, 4);
    for (; k + 8 <= n; k += 8)
        box_cols_avx2(in, istride, out, ostride, len, k, bw, 1);
    const int r = bw->radius, last = len - 1;
    const int edge_a = imin(r + 1, len);
    const uint32_t first_w = (uint32_t)(r + 1), last_w = (uint32_t)(r - edge_a + 1);
    const uint8_t *lastline = in + (size_t)last * istride;
    for (; k < n; k++) { /* the same, one sample */
        uint32_t acc = (uint32_t)in[k] * first_w + (uint32_t)lastline[k] * last_w;
        for (int x = 0; x < edge_a - 1; x++)
            acc += in[(size_t)x * istride + (size_t)k];
        for (int x = 0; x <= last; x++) {
            const uint32_t sub = in[(size_t)imax(x - r - 1, 0) * istride + (size_t)k];
            const uint32_t add = in[(size_t)imin(x + r, last) * istride + (size_t)k];
            const uint32_t far = in[(size_t)imin(x + r + 1, last) * istride + (size_t)k];
            acc += add - sub;
            uint32_t bulk = acc * bw->ww + (sub + far) * bw->fw;
            out[(size_t)x * ostride + (size_t)k] = (uint8_t)((bulk + (1u << 23)) >> 24);
        }
    }
}

__attribute__((target("avx2"))) static void box_pass_avx2(const uint8_t *in, size_t istride,
                                                          uint8_t *out, size_t ostride, int len,
                                                          int n, const box_weights *bw)
{
    box_pass_avx2_body(in, istride, out, ostride, len, n, bw, 0);
}

/* 16 bytes at p as int32 lanes */
#define LOAD16_EPI32(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))

/* box_cols_avx2 with 512-bit vectors: samples k .. k + 16 nb - 1 of every line. */
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"), always_inline)) static inline void
box_cols_avx512(const uint8_t *restrict in, size_t istride, uint8_t *restrict out,
                size_t ostride, int len, int k, const box_weights *bw, const int nb)
{
    const int r = bw->radius, last = len - 1;
    const int edge_a = imin(r + 1, len);
    const uint8_t *lastline = in + (size_t)last * istride;
    const __m512i ww = _mm512_set1_epi32((int)bw->ww), fw = _mm512_set1_epi32((int)bw->fw);
    const __m512i round = _mm512_set1_epi32(1 << 23);
    const __m512i fw1 = _mm512_set1_epi32(r + 1), lw1 = _mm512_set1_epi32(r - edge_a + 1);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i c[4], a[4];
    _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++)
        c[j] = _mm512_add_epi32(_mm512_mullo_epi32(LOAD16_EPI32(in + k + 16 * j), fw1),
                                _mm512_mullo_epi32(LOAD16_EPI32(lastline + k + 16 * j), lw1));
    for (int x = 0; x < edge_a - 1; x++)
        _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++)
            c[j] = _mm512_add_epi32(
                c[j], LOAD16_EPI32(in + (size_t)x * istride + (size_t)k + 16 * (size_t)j));
    const uint8_t *ap = in + (size_t)imin(r, last) * istride + k;
    _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++) {
        c[j] = _mm512_add_epi32(_mm512_mullo_epi32(c[j], ww), round);
        a[j] = LOAD16_EPI32(ap + 16 * j);
    }
    uint8_t *o = out + k;
    for (int x = 0; x <= last; x++, o += ostride) {
        const uint8_t *sp = in + (size_t)imax(x - r - 1, 0) * istride + k;
        const uint8_t *fp = in + (size_t)imin(x + r + 1, last) * istride + k;
        __m512i res[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < nb; j++) {
            __m512i s = LOAD16_EPI32(sp + 16 * j), f = LOAD16_EPI32(fp + 16 * j);
            c[j] = _mm512_add_epi32(c[j], _mm512_mullo_epi32(_mm512_sub_epi32(a[j], s), ww));
            __m512i sf = _mm512_mullo_epi32(_mm512_add_epi32(s, f), fw);
            res[j] = _mm512_srli_epi32(_mm512_add_epi32(c[j], sf), 24); /* 0..255 */
            a[j] = f;
        }
        if (nb == 1) {
            _mm_storeu_si128((__m128i *)o, _mm512_cvtepi32_epi8(res[0]));
        } else { /* packs work within 128-bit lanes: dword 4L + j is block j's 4L .. 4L+3 */
            __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(res[0], res[1]),
                                            _mm512_packus_epi32(res[2], res[3]));
            _mm512_storeu_si512((void *)o, _mm512_permutexvar_epi32(order, b));
        }
    }
}

/* box_pass_avx2_body with 512-bit vectors where the blocks are whole. */
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
box_pass_avx512(const uint8_t *in, size_t istride, uint8_t *out, size_t ostride, int len, int n,
                const box_weights *bw)
{
    int k = 0;
    for (; k + 64 <= n; k += 64)
        box_cols_avx512(in, istride, out, ostride, len, k, bw, 4);
    for (; k + 16 <= n; k += 16)
        box_cols_avx512(in, istride, out, ostride, len, k, bw, 1);
    box_pass_avx2_body(in, istride, out, ostride, len, n, bw, k);
}

#endif

/* One box pass (see box_pass): AVX2 where the CPU has it. */
static void box_pass_any(const uint8_t *in, size_t istride, uint8_t *out, size_t ostride,
                         int len, int n, const box_weights *bw, uint32_t *acc)
{
#ifdef HAVE_AVX2_KERNELS
    if (have_avx2()) {
        if (have_avx512())
            box_pass_avx512(in, istride, out, ostride, len, n, bw);
        else
            box_pass_avx2(in, istride, out, ostride, len, n, bw);
        return;
    }
#endif
    box_pass(in, istride, out, ostride, len, n, bw, acc);
}

/*
 * PIL blurs rows three times, transposes, blurs (former columns) three times, transposes
 * back. Here both directions run as passes over whole lines (vectorised across the
 * samples of a line): rows are blurred on a transposed copy, columns on the image itself.
 * Buffers a and b hold w*h*c bytes each.
 */
static void blur_passes(img_u8 *im, const box_weights *bw, uint8_t *a, uint8_t *b,
                        uint32_t *acc)
{
    const size_t tline = (size_t)im->h * (size_t)im->c; /* a line of the transpose */
    const size_t line = (size_t)im->w * (size_t)im->c;
    transpose_to(im, a);
    box_pass_any(a, tline, b, tline, im->w, (int)tline, bw, acc);
    box_pass_any(b, tline, a, tline, im->w, (int)tline, bw, acc);
    box_pass_any(a, tline, b, tline, im->w, (int)tline, bw, acc);
    transpose_from(b, im);
    box_pass_any(im->px, im->stride, a, line, im->h, (int)line, bw, acc);
    box_pass_any(a, line, b, line, im->h, (int)line, bw, acc);
    box_pass_any(b, line, im->px, im->stride, im->h, (int)line, bw, acc);
}

void img_gaussian_blur(img_u8 *im, double radius)
{
    if (!im || !im->px || im->w <= 0 || im->h <= 0 || (im->c != 1 && im->c != 3))
        invariant_failed("img_gaussian_blur: not an 8-bit L or RGB image");
    if (!(radius >= 0.0 && radius <= IMG_BLUR_RADIUS_MAX))
        invariant_failed("img_gaussian_blur: radius %g must be in [0, %g]", radius, IMG_BLUR_RADIUS_MAX);
    /* PIL receives the radius as a C float. */
    const box_weights bw = box_weights_for(gaussian_box_radius((float)radius, 3));
    /* r = 0 with the whole weight inside is the identity (radius 0). */
    if (bw.radius == 0 && bw.fw == 0)
        return;
    const size_t px = (size_t)im->w * (size_t)im->h * (size_t)im->c;
    const size_t longest = (size_t)(im->w > im->h ? im->w : im->h) * (size_t)im->c;
    /* One allocation per call: accumulators for the longest line, two image buffers. */
    size_t bytes = longest * sizeof(uint32_t) + 2 * px + 32; /* + spare: transpose_from */
    uint8_t *mem = malloc(bytes);
    if (!mem)
        die(EXIT_RUNTIME, "img_gaussian_blur: out of memory (%zu bytes)", bytes);
    uint32_t *acc = (uint32_t *)(void *)mem; /* malloc'd memory is suitably aligned */
    uint8_t *a = mem + longest * sizeof(uint32_t);
    blur_passes(im, &bw, a, a + px, acc);
    free(mem);
}

/* ---- SMOOTH --------------------------------------------------------------------------- */

/* PIL's KERNEL1x3 for SMOOTH's weights (k0, k1, k0): left to right in float. */
static inline float tap3(const uint8_t *p, int c, float k0, float k1)
{
    return (float)p[-c] * k0 + (float)p[0] * k1 + (float)p[c] * k0;
}

/* The same on lane vectors: the words at p - c, p, p + c (wl, wc, wr), byte m. */
#define VTAP3(wl, wc, wr, m, k0, k1)                                                       \
    (__builtin_convertvector(VBYTE(wl, m), f32x8) * (k0) +                                 \
     __builtin_convertvector(VBYTE(wc, m), f32x8) * (k1) +                                 \
     __builtin_convertvector(VBYTE(wr, m), f32x8) * (k0))

/* One inner row of SMOOTH: o[i] for c <= i < n - c from the rows above, at and below. */
SIMD_CLONES
static void smooth_row(const uint8_t *up, const uint8_t *mid, const uint8_t *down,
                       uint8_t *o, size_t n, int c)
{
    /* The kernel as PIL divides it: float(1) / float(13), float(5) / float(13). */
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const size_t cc = (size_t)c;
    size_t i = cc;
    for (; i + VBLOCK + cc <= n; i += VBLOCK) {
        u32x8 dl, dc, dr, ml, mc, mr, ul, uc, ur, res = {0};
        VLOAD(dl, down + i - cc); VLOAD(dc, down + i); VLOAD(dr, down + i + cc);
        VLOAD(ml, mid + i - cc); VLOAD(mc, mid + i); VLOAD(mr, mid + i + cc);
        VLOAD(ul, up + i - cc); VLOAD(uc, up + i); VLOAD(ur, up + i + cc);
        for (int m = 0; m < 4; m++) {
            /* offset 0 plus PIL's 0.5 for rounding, then rows y+1, y, y-1 */
            f32x8 ss = 0.5f + VTAP3(dl, dc, dr, m, k1, k1);
            ss += VTAP3(ml, mc, mr, m, k1, k5);
            ss += VTAP3(ul, uc, ur, m, k1, k1);
            VPUT(res, ss, m);
        }
        memcpy(o + i, &res, sizeof res);
    }
    for (; i + cc < n; i++) {
        float ss = 0.5f;
        ss += tap3(down + i, c, k1, k1);
        ss += tap3(mid + i, c, k1, k5);
        ss += tap3(up + i, c, k1, k1);
        o[i] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)ss;
    }
}

void img_smooth3x3(const img_u8 *src, img_u8 *dst)
{
    if (src->w != dst->w || src->h != dst->h || src->c != dst->c)
        invariant_failed("img_smooth3x3: %dx%dx%d into %dx%dx%d", src->w, src->h, src->c, dst->w,
            dst->h, dst->c);
    if (src->w < 3 || src->h < 3) {
        img_copy(src, dst);
        return;
    }
    const int c = src->c;
    const size_t row = (size_t)src->w * (size_t)c;
    memcpy(dst->px, src->px, row);
    for (int y = 1; y < src->h - 1; y++) {
        const uint8_t *up = src->px + (size_t)(y - 1) * src->stride;
        const uint8_t *mid = up + src->stride, *down = mid + src->stride;
        uint8_t *o = dst->px + (size_t)y * dst->stride;
        /* the first and last pixel of the row are kept */
        memcpy(o, mid, (size_t)c);
        smooth_row(up, mid, down, o, row, c);
        memcpy(o + row - c, mid + row - c, (size_t)c);
    }
    size_t last = (size_t)(src->h - 1);
    memcpy(dst->px + last * dst->stride, src->px + last * src->stride, row);
}

/*
 * color.c — PIL 9.4's ImageEnhance (Brightness, Contrast, Color, Sharpness), ImageOps
 * (posterize, solarize, autocontrast) and torchvision 0.14's adjust_hue, bit for bit.
 *
 * Every ImageEnhance operation is Image.blend(degenerate, image, factor): PIL computes
 * deg + alpha * (img - deg) in C float (alpha is the factor rounded to float), clips to
 * 0..255 and truncates (libImaging/Blend.c); blend_px below is that expression, and
 * blend_row runs it on 8-lane vectors (blur_internal.h), the same float operations lane by
 * lane. The degenerate image is black (Brightness), the mean gray (Contrast), the gray
 * image (Color) or SMOOTH (Sharpness, blur.c).
 *
 * Gray is PIL's convert("L"): (19595 R + 38470 G + 7471 B + 0x8000) >> 16.
 *
 * adjust_hue is PIL's rgb2hsv and hsv2rgb (libImaging/Convert.c) with the hue byte shifted
 * in between (uint8 wrap-around, as torchvision adds np.uint8(hue_factor * 255)), with
 * PIL's float/double mix, on which the result depends. rgb2hsv comes from tables built
 * once by the exact per-pixel code; hsv2rgb runs four pixels at a time in double lanes.
 * Where the CPU has AVX-512, these and the ImageEnhance blends run 16 pixels a step, with
 * rgb2hsv computed rather than looked up, and Brightness and Contrast (a constant
 * degenerate) become a 256-entry table of blend_px mapped over the image where the CPU has
 * VBMI's byte permutes (see "AVX-512 paths").
 *
 * posterize and solarize are per-byte vector maps, autocontrast PIL's per-channel tables
 * from the histogram.
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
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

/* PIL's convert("L") of one RGB pixel. */
static inline int luma(const uint8_t *p)
{
    return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
}

/* ImagingBlend for one sample: deg + alpha * (img - deg) in float, clipped, truncated.
 * Written as max/min so that it compiles without branches. */
static inline uint8_t blend_px(int deg, int img, float alpha)
{
    float t = (float)deg + alpha * (float)(img - deg);
    t = t > 0.0f ? t : 0.0f;
    t = t < 255.0f ? t : 255.0f;
    return (uint8_t)(int)t;
}

/* Every sample v of `im` := lut[channel][v]. */
static void apply_luts(img_u8 *im, const uint8_t lut[][256])
{
    const int c = im->c;
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = im->px + (size_t)y * im->stride;
        if (c == 3) {
            for (int x = 0; x < im->w; x++, p += 3) {
                p[0] = lut[0][p[0]];
                p[1] = lut[1][p[1]];
                p[2] = lut[2][p[2]];
            }
        } else {
            for (int x = 0; x < im->w; x++)
                p[x] = lut[0][p[x]];
        }
    }
}

/* blend_px on lane vectors (blur_internal.h): byte m of the words wd (degenerate) and wv
 * (image), the same float operations in the same order. */
#define VBLEND(res, wd, wv, m, alpha)                                                      \
    do {                                                                                   \
        i32x8 d_ = VBYTE(wd, m);                                                           \
        f32x8 t_ = __builtin_convertvector(d_, f32x8) +                                    \
                   (alpha) * __builtin_convertvector(VBYTE(wv, m) - d_, f32x8);            \
        VPUT(res, t_, m);                                                                  \
    } while (0)

/* The vector path converts the unclipped float to int; beyond this factor that could
 * overflow, and the scalar path (which clips first) runs instead. */
#define VBLEND_MAX_ALPHA 1e6f

/* img[i] := blend(deg[i], img[i]) for i < n. */
SIMD_CLONES
static void blend_row(const uint8_t *deg, uint8_t *img, size_t n, float alpha)
{
    size_t i = 0;
    if (alpha > -VBLEND_MAX_ALPHA && alpha < VBLEND_MAX_ALPHA) {
        for (; i + VBLOCK <= n; i += VBLOCK) {
            u32x8 wd, wv, res = {0};
            VLOAD(wd, deg + i);
            VLOAD(wv, img + i);
            VBLEND(res, wd, wv, 0, alpha);
            VBLEND(res, wd, wv, 1, alpha);
            VBLEND(res, wd, wv, 2, alpha);
            VBLEND(res, wd, wv, 3, alpha);
            memcpy(img + i, &res, sizeof res);
        }
    }
    for (; i < n; i++)
        img[i] = blend_px(deg[i], img[i], alpha);
}

/* img[i] := blend(deg, img[i]) for i < n: a constant degenerate image. */
SIMD_CLONES
static void blend_row_const(int deg, uint8_t *img, size_t n, float alpha)
{
    size_t i = 0;
    if (alpha > -VBLEND_MAX_ALPHA && alpha < VBLEND_MAX_ALPHA) {
        const u32x8 wd = (u32x8){0} + (uint32_t)deg * 0x01010101u;
        for (; i + VBLOCK <= n; i += VBLOCK) {
            u32x8 wv, res = {0};
            VLOAD(wv, img + i);
            VBLEND(res, wd, wv, 0, alpha);
            VBLEND(res, wd, wv, 1, alpha);
            VBLEND(res, wd, wv, 2, alpha);
            VBLEND(res, wd, wv, 3, alpha);
            memcpy(img + i, &res, sizeof res);
        }
    }
    for (; i < n; i++)
        img[i] = blend_px(deg, img[i], alpha);
}

/* ---- AVX-512 paths -------------------------------------------------------------------- */

/*
 * On CPUs with AVX-512 (F, BW, DQ, VL), chosen at run time, the RGB operations take 16 pixels
 * a step: 48 bytes spread to three int32 vectors (R, G, B) and packed back. adjust_hue runs
 * rgb2hsv, the shift and hsv2rgb in one pass per row with a small HSV buffer, saturation
 * computes the gray and blends in one pass, contrast sums luma the same way, and the blends
 * of Brightness, Contrast and Sharpness take 16 samples per vector (with VBMI, Brightness
 * and Contrast map bytes through a table of blend_px instead). Every lane performs the
 * portable code's operations (the same IEEE float and double operations in the same order,
 * never fused: fp-contract is off for this file and the intrinsics are plain multiplies and
 * adds), or operations proven to round to the same results and checked against the
 * portable code's tables for every input once (hsv_tab_init), so the results are bit for
 * bit those of the portable path, which stays for other CPUs; img_color_set_simd (img.h)
 * picks the path.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX512_COLOR 1
#define AVX512_COLOR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

/* 16 RGB pixels (48 bytes at p, or the first n of them, n < 16) as three int32 vectors. */
#define RGB16_LOAD(R, G, B, p, mask)                                                       \
    do {                                                                                   \
        __m512i raw_;                                                                      \
        if ((mask) == ~(__mmask64)0 >> 16) /* plain loads: no store-forwarding stall */ \
            raw_ = _mm512_inserti32x4(                                                     \
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p))),          \
                _mm_loadu_si128((const __m128i *)((p) + 32)), 2);                          \
        else                                                                               \
            raw_ = _mm512_maskz_loadu_epi8((mask), (p));                                   \
        raw_ = _mm512_permutexvar_epi32(                                                   \
            _mm512_set_epi32(11, 11, 10, 9, 8, 8, 7, 6, 5, 5, 4, 3, 2, 2, 1, 0), raw_);    \
        raw_ = _mm512_shuffle_epi8(                                                        \
            raw_, _mm512_broadcast_i32x4(_mm_set_epi8(-1, 11, 10, 9, -1, 8, 7, 6, -1, 5,   \
                                                      4, 3, -1, 2, 1, 0)));                \
        (R) = _mm512_and_si512(raw_, _mm512_set1_epi32(0xff));                             \
        (G) = _mm512_and_si512(_mm512_srli_epi32(raw_, 8), _mm512_set1_epi32(0xff));       \
        (B) = _mm512_srli_epi32(raw_, 16);                                                 \
    } while (0)

/* The inverse: R, G, B (each 0..255) of 16 pixels to 48 bytes at p (the first n: mask). */
#define RGB16_STORE(p, R, G, B, mask)                                                      \
    RGB16_STORE_PACKED(p,                                                                  \
                       _mm512_or_si512((R), _mm512_or_si512(_mm512_slli_epi32((G), 8),     \
                                                            _mm512_slli_epi32((B), 16))),  \
                       mask)

/* The same from R | G << 8 | B << 16 lanes. */
#define RGB16_STORE_PACKED(p, RGB, mask)                                                   \
    RGB16_STORE_SHUFFLED(p, RGB, mask, -1, -1, -1, -1, 14, 13, 12, 10, 9, 8, 6, 5, 4, 2, 1, 0)

/* The same from the bytes of four pixels' R, G, B (then 4 spare) in each 128-bit lane, as
 * packs leave them. */
#define RGB16_STORE_PLANAR(p, V, mask)                                                     \
    RGB16_STORE_SHUFFLED(p, V, mask, -1, -1, -1, -1, 11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0)

/* 16 pixels to 48 bytes at p: a byte shuffle (_mm_set_epi8's order) makes 12 bytes of RGB in
 * each 128-bit lane, which a dword permutation joins. */
#define RGB16_STORE_SHUFFLED(p, V, mask, ...)                                              \
    do {                                                                                   \
        __m512i w_ = _mm512_shuffle_epi8((V), _mm512_broadcast_i32x4(_mm_set_epi8(__VA_ARGS__))); \
        w_ = _mm512_permutexvar_epi32(                                                     \
            _mm512_set_epi32(15, 15, 15, 15, 14, 13, 12, 10, 9, 8, 6, 5, 4, 2, 1, 0), w_); \
        if ((mask) == ~(__mmask64)0 >> 16) {                                               \
            _mm256_storeu_si256((__m256i *)(p), _mm512_castsi512_si256(w_));               \
            _mm_storeu_si128((__m128i *)((p) + 32), _mm512_extracti32x4_epi32(w_, 2));     \
        } else {                                                                           \
            _mm512_mask_storeu_epi8((p), (mask), w_);                                      \
        }                                                                                  \
    } while (0)

/* luma() of 16 pixels, int32 lanes. */
#define LUMA16(R, G, B)                                                                    \
    _mm512_srli_epi32(                                                                     \
        _mm512_add_epi32(                                                                  \
            _mm512_add_epi32(_mm512_mullo_epi32((R), _mm512_set1_epi32(19595)),            \
                             _mm512_mullo_epi32((G), _mm512_set1_epi32(38470))),           \
            _mm512_add_epi32(_mm512_mullo_epi32((B), _mm512_set1_epi32(7471)),             \
                             _mm512_set1_epi32(0x8000))),                                  \
        16)

/* blend_px on 16 int32 lanes: deg + alpha * (img - deg) in float, clipped to 0..255 as
 * blend_px does (max and min return their second operand for a NaN, which is blend_px's
 * choice too), truncated. */
AVX512_COLOR
static inline __m512i blend16(__m512i deg, __m512 degf, __m512i img, __m512 alpha)
{
    const __m512 diff = _mm512_cvtepi32_ps(_mm512_sub_epi32(img, deg));
    __m512 t = _mm512_add_ps(degf, _mm512_mul_ps(alpha, diff));
    t = _mm512_min_ps(_mm512_max_ps(t, _mm512_setzero_ps()), _mm512_set1_ps(255.0f));
    return _mm512_cvttps_epi32(t);
}

/* blend16 without the clipping, for |alpha| < VBLEND_MAX_ALPHA (so that no result
 * overflows int32): the truncated float, which the caller's saturating packs clip to 0..255
 * (a result in (-1, 0) truncates to 0, as blend_px's clip does). */
AVX512_COLOR
static inline __m512i blend16_trunc(__m512i deg, __m512 degf, __m512i img, __m512 alpha)
{
    const __m512 diff = _mm512_cvtepi32_ps(_mm512_sub_epi32(img, deg));
    return _mm512_cvttps_epi32(_mm512_add_ps(degf, _mm512_mul_ps(alpha, diff)));
}

/* adjust_saturation of n pixels at p, in place: the gray of each pixel and the blend, for
 * |alpha| < VBLEND_MAX_ALPHA. */
AVX512_COLOR
static void saturation_row_avx512(uint8_t *p, int n, float alpha)
{
    const __m512 a = _mm512_set1_ps(alpha);
    for (int x = 0; x < n; x += 16, p += 48) {
        const int m = n - x < 16 ? n - x : 16;
        const __mmask64 bytes = m == 16 ? ~(__mmask64)0 >> 16 : ((__mmask64)1 << (3 * m)) - 1;
        __m512i R, G, B;
        RGB16_LOAD(R, G, B, p, bytes);
        const __m512i L = LUMA16(R, G, B);
        const __m512 Lf = _mm512_cvtepi32_ps(L);
        const __m512i B8 = _mm512_packs_epi32(blend16_trunc(L, Lf, B, a), _mm512_setzero_si512());
        const __m512i RG = _mm512_packs_epi32(blend16_trunc(L, Lf, R, a), blend16_trunc(L, Lf, G, a));
        RGB16_STORE_PLANAR(p, _mm512_packus_epi16(RG, B8), bytes);
    }
}

/* img[i] := blend_px(deg[i], img[i]) for i < n, or blend_px(degc, img[i]) where deg is
 * NULL: 64 samples a step, as 16-lane blend16. */
AVX512_COLOR
static void blend_row_avx512(const uint8_t *deg, int degc, uint8_t *img, size_t n, float alpha)
{
    const __m512 a = _mm512_set1_ps(alpha);
    __m512i d = _mm512_set1_epi32(degc);
    __m512 df = _mm512_cvtepi32_ps(d);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (deg) {
            d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(deg + i)));
            df = _mm512_cvtepi32_ps(d);
        }
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(img + i)));
        _mm_storeu_si128((__m128i *)(img + i), _mm512_cvtepi32_epi8(blend16(d, df, v, a)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        if (deg) {
            d = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, deg + i));
            df = _mm512_cvtepi32_ps(d);
        }
        const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, img + i));
        _mm_mask_storeu_epi8(img + i, m, _mm512_cvtepi32_epi8(blend16(d, df, v, a)));
    }
}

/* Sum of luma() over one RGB row of w pixels (w < 2^24, so no lane overflows). */
AVX512_COLOR
static uint64_t luma_row_sum_avx512(const uint8_t *p, int w)
{
    __m512i acc = _mm512_setzero_si512();
    for (int x = 0; x < w; x += 16, p += 48) {
        const int m = w - x < 16 ? w - x : 16;
        const __mmask64 bytes = m == 16 ? ~(__mmask64)0 >> 16 : ((__mmask64)1 << (3 * m)) - 1;
        __m512i R, G, B;
        RGB16_LOAD(R, G, B, p, bytes);
        /* lanes past the row's end are 0 and add luma(0, 0, 0) = 0 */
        acc = _mm512_add_epi32(acc, LUMA16(R, G, B));
    }
    return (uint64_t)_mm512_reduce_add_epi64(
        _mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(acc)),
                         _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(acc, 1))));
}
#endif

/* -1: not decided yet, 0: portable, 1: AVX-512, 2: AVX-512 with VBMI's byte permutes. */
static int g_color_simd = -1;

/* The best path the CPU runs (as g_color_simd), whatever a test forced. */
static int cpu_color_level(void)
{
#ifdef HAVE_AVX512_COLOR
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")))
        return 0;
    return __builtin_cpu_supports("avx512vbmi") ? 2 : 1;
#else
    return 0;
#endif
}

static int color_simd(void)
{
    if (g_color_simd < 0)
        g_color_simd = cpu_color_level();
    return g_color_simd;
}

/* Test hook (img.h): on = 0 forces the portable code, 1 the best the CPU has, 2 AVX-512
 * without VBMI. Returns the level that will run (as g_color_simd). */
int img_color_set_simd(int on)
{
    const int best = cpu_color_level();
    g_color_simd = !on ? 0 : on == 2 && best > 1 ? 1 : best;
    return g_color_simd;
}

#ifdef HAVE_AVX512_COLOR
#define AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

/* p[i] := lut[p[i]] for i < n, 64 bytes a step: one 128-entry byte permute for each half of
 * the table (t[0..1], t[2..3]), bit 7 of the byte choosing between them. */
AVX512_VBMI
static void lut_row_vbmi(uint8_t *p, size_t n, const __m512i t[4])
{
    for (size_t i = 0; i < n; i += 64) {
        const bool full = n - i >= 64;
        const __mmask64 m = full ? ~(__mmask64)0 : ((__mmask64)1 << (n - i)) - 1;
        __m512i v = full ? _mm512_loadu_si512(p + i) : _mm512_maskz_loadu_epi8(m, p + i);
        const __m512i lo = _mm512_permutex2var_epi8(t[0], v, t[1]);
        const __m512i hi = _mm512_permutex2var_epi8(t[2], v, t[3]);
        v = _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
        if (full)
            _mm512_storeu_si512(p + i, v);
        else
            _mm512_mask_storeu_epi8(p + i, m, v);
    }
}

/* Every sample of `im` := lut[sample]. */
AVX512_VBMI
static void apply_lut_vbmi(img_u8 *im, const uint8_t lut[256])
{
    __m512i t[4];
    for (int k = 0; k < 4; k++)
        t[k] = _mm512_loadu_si512(lut + 64 * k);
    const size_t row = (size_t)im->w * (size_t)im->c;
    for (int y = 0; y < im->h; y++)
        lut_row_vbmi(im->px + (size_t)y * im->stride, row, t);
}
#endif

/* Blend with a constant degenerate image `deg`. With VBMI the blend of each of the 256
 * sample values is taken from blend_px once and the image mapped through that table;
 * otherwise every sample runs the blend. */
static void blend_const(img_u8 *im, int deg, double factor)
{
    const float alpha = (float)factor;
    const size_t row = (size_t)im->w * (size_t)im->c;
#ifdef HAVE_AVX512_COLOR
    if (color_simd() > 1) {
        uint8_t lut[256];
        for (int v = 0; v < 256; v++)
            lut[v] = blend_px(deg, v, alpha);
        apply_lut_vbmi(im, lut);
        return;
    }
    if (color_simd()) {
        for (int y = 0; y < im->h; y++)
            blend_row_avx512(NULL, deg, im->px + (size_t)y * im->stride, row, alpha);
        return;
    }
#endif
    for (int y = 0; y < im->h; y++)
        blend_row_const(deg, im->px + (size_t)y * im->stride, row, alpha);
}

static void check_image(const img_u8 *im, const char *fn)
{
    if (!im || !im->px || im->w <= 0 || im->h <= 0 || (im->c != 1 && im->c != 3))
        invariant_failed("%s: not an 8-bit L or RGB image", fn);
}

/* ---- ImageEnhance ---------------------------------------------------------------------- */

void img_adjust_brightness(img_u8 *im, double factor)
{
    check_image(im, "img_adjust_brightness");
    blend_const(im, 0, factor);
}

/*
 * Eight RGB pixels as lanes: lane j of w := the 32-bit word at p + 3j, i.e. R, G, B of
 * pixel j in its low three bytes (and the next pixel's R on top). Reads one byte past the
 * eighth pixel, so callers keep 3*8 + 1 bytes of row ahead. (Macros: functions taking or
 * returning 32-byte vectors draw GCC's ABI note.)
 */
#define LOAD_8PX(w, p)                                                                     \
    do {                                                                                   \
        for (int j_ = 0; j_ < 8; j_++) {                                                   \
            uint32_t t_;                                                                   \
            memcpy(&t_, (p) + 3 * j_, sizeof t_);                                          \
            (w)[j_] = t_;                                                                  \
        }                                                                                  \
    } while (0)

/* luma() on such lanes: the same integer formula. */
#define LUMA_8PX(w)                                                                        \
    ((((w) & 0xff) * 19595 + (((w) >> 8) & 0xff) * 38470 + (((w) >> 16) & 0xff) * 7471 +  \
      0x8000) >> 16)

/* Sum of luma() over one RGB row of w pixels. */
SIMD_CLONES
static uint64_t luma_row_sum(const uint8_t *p, int w)
{
    u32x8 acc = {0};
    int x = 0;
    for (; 3 * x + 25 <= 3 * w; x += 8) {
        u32x8 px;
        LOAD_8PX(px, p + 3 * x);
        acc += LUMA_8PX(px);
    }
    uint64_t sum = 0;
    for (int j = 0; j < 8; j++)
        sum += acc[j];
    for (; x < w; x++)
        sum += (uint64_t)luma(p + 3 * x);
    return sum;
}

/* int(mean of convert("L") + 0.5), the gray of ImageEnhance.Contrast. ImageStat sums the
 * histogram exactly (a double holds any such sum) and divides once. */
static int mean_gray(const img_u8 *im)
{
    uint64_t sum = 0;
    for (int y = 0; y < im->h; y++) {
        const uint8_t *p = im->px + (size_t)y * im->stride;
        if (im->c == 3) {
#ifdef HAVE_AVX512_COLOR
            if (color_simd() && im->w < (1 << 24)) {
                sum += luma_row_sum_avx512(p, im->w);
                continue;
            }
#endif
            sum += luma_row_sum(p, im->w);
        } else {
            for (int x = 0; x < im->w; x++)
                sum += p[x];
        }
    }
    double mean = (double)sum / ((double)im->w * (double)im->h);
    return (int)(mean + 0.5);
}

void img_adjust_contrast(img_u8 *im, double factor)
{
    check_image(im, "img_adjust_contrast");
    blend_const(im, mean_gray(im), factor);
}

void img_adjust_saturation(img_u8 *im, double factor)
{
    check_image(im, "img_adjust_saturation");
    /* An L image is its own gray: blending it with itself changes nothing. */
    if (im->c != 3)
        return;
    const float alpha = (float)factor;
#ifdef HAVE_AVX512_COLOR
    if (color_simd() && alpha > -VBLEND_MAX_ALPHA && alpha < VBLEND_MAX_ALPHA) {
        for (int y = 0; y < im->h; y++)
            saturation_row_avx512(im->px + (size_t)y * im->stride, im->w, alpha);
        return;
    }
#endif
    const size_t row = (size_t)im->w * 3;
    /* The gray row, one byte per sample, then a vector blend of the whole row. */
    uint8_t *gray = malloc(row);
    if (!gray)
        die(EXIT_RUNTIME, "img_adjust_saturation: out of memory");
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = im->px + (size_t)y * im->stride;
        for (size_t i = 0; i < row; i += 3)
            gray[i] = gray[i + 1] = gray[i + 2] = (uint8_t)luma(p + i);
        blend_row(gray, p, row, alpha);
    }
    free(gray);
}

void img_adjust_sharpness(img_u8 *im, double factor)
{
    check_image(im, "img_adjust_sharpness");
    img_u8 smooth = img_alloc(im->w, im->h, im->c);
    img_smooth3x3(im, &smooth);
    const float alpha = (float)factor;
    const size_t row = (size_t)im->w * (size_t)im->c;
    for (int y = 0; y < im->h; y++) {
        const uint8_t *deg = smooth.px + (size_t)y * smooth.stride;
        uint8_t *p = im->px + (size_t)y * im->stride;
#ifdef HAVE_AVX512_COLOR
        if (color_simd()) {
            blend_row_avx512(deg, 0, p, row, alpha);
            continue;
        }
#endif
        blend_row(deg, p, row, alpha);
    }
    img_free(&smooth);
}

/* ---- hue ------------------------------------------------------------------------------------ */

static inline uint8_t clip8i(int v) { return (uint8_t)(v <= 0 ? 0 : v < 256 ? v : 255); }

/* C's round() (half away from zero) for x >= 0, without a libm call: trunc(x) and the
 * fraction x - trunc(x) are both exact in double. */
static inline int round_pos(double x)
{
    int i = (int)x;
    return i + (x - (double)i >= 0.5);
}

/* PIL's rgb2hsv_row: hue and saturation bytes of one pixel (value is max(r, g, b)). */
static inline void rgb_to_hs(int r, int g, int b, int maxc, int minc, int *hue, int *sat)
{
    float cr = (float)(maxc - minc);
    float s = cr / (float)maxc;
    float rc = (float)(maxc - r) / cr;
    float gc = (float)(maxc - g) / cr;
    float bc = (float)(maxc - b) / cr;
    float h;
    if (r == maxc)
        h = bc - gc;
    else if (g == maxc)
        h = (float)(2.0 + rc - bc); /* PIL: double constants, stored to float */
    else
        h = (float)(4.0 + gc - rc);
    /* fmod(h / 6.0 + 1.0, 1.0): the argument lies in [5/6, 11/6], where subtracting 1 is
     * exact, so fmod reduces to a compare. */
    double hd = h / 6.0 + 1.0;
    h = (float)(hd >= 1.0 ? hd - 1.0 : hd);
    *hue = clip8i((int)(h * 255.0));
    *sat = clip8i((int)(s * 255.0));
}

/*
 * Tables, built once from the exact per-pixel code above (thread-safe, on first use):
 *
 * The hue byte of rgb2hsv depends only on the differences max - r, max - g, max - b: on
 * which channel is the maximum (PIL tests r, then g, then b), which is the minimum, the
 * range cr = max - min and the middle channel's distance d = max - mid (0 <= d <= cr). That
 * is 6 cases of cr*(cr+1)/2 + d entries. The saturation byte depends on (max, cr).
 * hsv2rgb's sextant and fraction depend on the hue byte, fs = s / 255 on the saturation.
 */
enum { TRI_N = 256 * 257 / 2 };

static struct {
    uint8_t hue[6][TRI_N]; /* [case][tri(cr) + d] */
    uint8_t sat[TRI_N];    /* [tri(max) + cr] */
    int tri[256];          /* a * (a + 1) / 2 */
    uint8_t sextant[256];
    float frac[256];
    double one_minus_frac[256]; /* 1.0 - f in double (exact) */
    float fs[256];
    /* the AVX-512 path's hsv2rgb (fs, frac, p: hsv16_to_rgb) and rgb2hsv (sat16, hue16)
     * match these tables and hsv_to_rgb (checked in hsv_tab_init) */
    bool scaled_ok;
} hsv_tab;

#ifdef HAVE_AVX512_COLOR
AVX512_COLOR static bool hue16_ok(void);
#endif

/* The case of a pixel and d = max - (the channel that is neither max nor min). Cases by
 * (max, min): 0 (r, b), 1 (r, g), 2 (g, r), 3 (g, b), 4 (b, g), 5 (b, r); the max is the
 * first of r, g, b that equals it, as PIL tests. When the two lower channels tie, either
 * case gives d = cr and the same hue. */
static inline int hue_case(int r, int g, int b, int maxc, int *d)
{
    if (r == maxc) {
        if (b <= g) { *d = maxc - g; return 0; }
        *d = maxc - b;
        return 1;
    }
    if (g == maxc) {
        if (r <= b) { *d = maxc - b; return 2; }
        *d = maxc - r;
        return 3;
    }
    if (g <= r) { *d = maxc - r; return 4; }
    *d = maxc - g;
    return 5;
}

/* A pixel with max 255 that falls in `kase` with range cr and middle distance d. */
static void case_pixel(int kase, int cr, int d, int rgb[3])
{
    static const int role[6][3] = {/* index of max, mid, min channel */
                                   {0, 1, 2}, {0, 2, 1}, {1, 2, 0},
                                   {1, 0, 2}, {2, 0, 1}, {2, 1, 0}};
    rgb[role[kase][0]] = 255;
    rgb[role[kase][1]] = 255 - d;
    rgb[role[kase][2]] = 255 - cr;
}

static void hsv_tab_init(void)
{
    hsv_tab.scaled_ok = true;
    for (int a = 0; a < 256; a++)
        hsv_tab.tri[a] = a * (a + 1) / 2;
    memset(hsv_tab.hue, 0, sizeof hsv_tab.hue);
    memset(hsv_tab.sat, 0, sizeof hsv_tab.sat);
    for (int kase = 0; kase < 6; kase++)
        for (int cr = 1; cr < 256; cr++)
            for (int d = 0; d <= cr; d++) {
                int rgb[3], h, s;
                case_pixel(kase, cr, d, rgb);
                rgb_to_hs(rgb[0], rgb[1], rgb[2], 255, 255 - cr, &h, &s);
                hsv_tab.hue[kase][hsv_tab.tri[cr] + d] = (uint8_t)h;
            }
    for (int maxc = 1; maxc < 256; maxc++)
        for (int cr = 1; cr <= maxc; cr++) {
            int h, s;
            rgb_to_hs(maxc, maxc, maxc - cr, maxc, maxc - cr, &h, &s);
            hsv_tab.sat[hsv_tab.tri[maxc] + cr] = (uint8_t)s;
        }
    for (int h = 0; h < 256; h++) {
        int i = (int)floor((float)h * 6.0 / 255.0);
        hsv_tab.sextant[h] = (uint8_t)(i % 6);
        hsv_tab.frac[h] = (float)((float)h * 6.0 / 255.0 - (float)i);
        hsv_tab.one_minus_frac[h] = 1.0 - hsv_tab.frac[h];
    }
    for (int s = 0; s < 256; s++)
        hsv_tab.fs[s] = (float)((float)s / 255.0);
    /* The AVX-512 path computes these (hsv16_to_rgb): its float quotients by 255 must be the
     * same floats (PIL's double steps round to the nearest float of the exact quotient),
     * (6h * 257 + 257) >> 16 must be floor(6h / 255), and its p in float (no v * fs lies
     * near a half integer) must be hsv_to_rgb's. They are for every byte; should a compiler
     * ever disagree, the portable path runs instead. */
    for (int v = 0; v < 256; v++) {
        int sext = (6 * v * 257 + 257) >> 16;
        if ((float)v / 255.0f != hsv_tab.fs[v] ||
            (float)(6 * v - 255 * sext) / 255.0f != hsv_tab.frac[v] ||
            sext % 6 != hsv_tab.sextant[v])
            hsv_tab.scaled_ok = false;
        for (int s = 0; s < 256; s++) {
            const float vf = (float)v, fs = hsv_tab.fs[s];
            if ((int)(vf - vf * fs + 0.5f) != round_pos((double)v * (1.0 - fs)))
                hsv_tab.scaled_ok = false;
        }
    }
#ifdef HAVE_AVX512_COLOR
    if (hsv_tab.scaled_ok && cpu_color_level() > 0)
        hsv_tab.scaled_ok = hue16_ok();
#endif
}

/* PIL's hsv2rgb for one pixel with s > 0: v, p, q, t placed by the sextant. */
static inline void hsv_to_rgb(int h, int s, int v, uint8_t *out)
{
    static const uint8_t place[6][3] = {/* indices into {v, p, q, t} */
                                        {0, 3, 1}, {2, 0, 1}, {1, 0, 3},
                                        {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
    const float f = hsv_tab.frac[h], fs = hsv_tab.fs[s];
    const double vf = (double)v;
    uint8_t val[4];
    val[0] = (uint8_t)v;
    /* v times a factor in [0, 1]: no clipping needed (PIL's CLIP8 never acts here) */
    val[1] = (uint8_t)round_pos(vf * (1.0 - fs));
    val[2] = (uint8_t)round_pos(vf * (1.0 - (double)(fs * f))); /* fs * f in float, as PIL */
    val[3] = (uint8_t)round_pos(vf * (1.0 - fs * hsv_tab.one_minus_frac[h]));
    const uint8_t *pl = place[hsv_tab.sextant[h]];
    out[0] = val[pl[0]];
    out[1] = val[pl[1]];
    out[2] = val[pl[2]];
}

static pthread_once_t hsv_once = PTHREAD_ONCE_INIT;

/*
 * hsv2rgb four pixels at a time: hsv_to_rgb's double/float expressions lane by lane (each
 * lane rounds exactly as the scalar code). round() of a non-negative x is
 * trunc(x) + (x - trunc(x) >= 0.5), as round_pos.
 */
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));

/* out := round_pos of four double lanes x: t = trunc(x), plus 1.0 where x - t >= 0.5. */
#define ROUND_POS4(out, x)                                                                 \
    do {                                                                                   \
        const f64x4 t_ = __builtin_convertvector(__builtin_convertvector((x), i32x4), f64x4); \
        const i64x4 up_ = (x) - t_ >= 0.5;                                                 \
        (out) = __builtin_convertvector(t_ + (f64x4)(up_ & (i64x4)(f64x4){1, 1, 1, 1}),    \
                                        i32x4);                                            \
    } while (0)
#define SEL4(m, a, b) (((a) & (m)) | ((b) & ~(m)))

/* out[3x ..] := RGB of the n pixels (hb, sb, vb); out has one byte of slack at the end. */
SIMD_CLONES
static void hsv_row_to_rgb(const uint8_t *hb, const uint8_t *sb, const uint8_t *vb,
                           uint8_t *out, int n)
{
    int x = 0;
    for (; x + 4 <= n; x += 4) {
        const i32x4 S = {sb[x], sb[x + 1], sb[x + 2], sb[x + 3]};
        const i32x4 V = {vb[x], vb[x + 1], vb[x + 2], vb[x + 3]};
        /* sextant, fraction and s / 255 from the tables (two divisions per lane cost more) */
        i32x4 sext = {hsv_tab.sextant[hb[x]], hsv_tab.sextant[hb[x + 1]],
                      hsv_tab.sextant[hb[x + 2]], hsv_tab.sextant[hb[x + 3]]};
        const f32x4 f = {hsv_tab.frac[hb[x]], hsv_tab.frac[hb[x + 1]], hsv_tab.frac[hb[x + 2]],
                         hsv_tab.frac[hb[x + 3]]};
        const f32x4 fs = {hsv_tab.fs[sb[x]], hsv_tab.fs[sb[x + 1]], hsv_tab.fs[sb[x + 2]],
                          hsv_tab.fs[sb[x + 3]]};
        const f64x4 vf = __builtin_convertvector(V, f64x4);
        const f64x4 fsd = __builtin_convertvector(fs, f64x4);
        const f64x4 pd = vf * (1.0 - fsd);
        const f64x4 qd = vf * (1.0 - __builtin_convertvector(fs * f, f64x4));
        const f64x4 td = vf * (1.0 - fsd * (1.0 - __builtin_convertvector(f, f64x4)));
        i32x4 P, Q, T;
        ROUND_POS4(P, pd);
        ROUND_POS4(Q, qd);
        ROUND_POS4(T, td);
        const i32x4 s0 = sext == 0, s1 = sext == 1, s2 = sext == 2, s3 = sext == 3;
        const i32x4 s4 = sext == 4, s5 = sext == 5, gray = S == 0;
        /* PIL's switch: 0 (v,t,p) 1 (q,v,p) 2 (p,v,t) 3 (p,q,v) 4 (t,p,v) 5 (v,p,q) */
        i32x4 R = SEL4(s0 | s5, V, SEL4(s1, Q, SEL4(s2 | s3, P, T)));
        i32x4 G = SEL4(s0, T, SEL4(s1 | s2, V, SEL4(s3, Q, P)));
        i32x4 B = SEL4(s0 | s1, P, SEL4(s2, T, SEL4(s3 | s4, V, Q)));
        R = SEL4(gray, V, R);
        G = SEL4(gray, V, G);
        B = SEL4(gray, V, B);
        const i32x4 word = R | G << 8 | B << 16;
        /* four-byte stores, each overwriting the previous one's spare top byte */
        for (int l = 0; l < 4; l++) {
            uint32_t w = (uint32_t)word[l];
            memcpy(out + 3 * (x + l), &w, sizeof w);
        }
    }
    for (; x < n; x++) {
        uint8_t *o = out + 3 * x;
        if (sb[x] == 0)
            o[0] = o[1] = o[2] = vb[x];
        else
            hsv_to_rgb(hb[x], sb[x], vb[x], o);
    }
}

/* rgb2hsv of one row with the hue byte shifted: hb, sb, vb := H + shift, S, V. */
static void rgb_row_to_hsv(const uint8_t *p, int n, int shift, uint8_t *hb, uint8_t *sb,
                           uint8_t *vb)
{
    for (int x = 0; x < n; x++, p += 3) {
        int r = p[0], g = p[1], b = p[2];
        int maxc = r > g ? r : g, minc = r < g ? r : g;
        maxc = maxc > b ? maxc : b;
        minc = minc < b ? minc : b;
        int cr = maxc - minc;
        /* s == 0 (gray, or a range too small for a saturation byte): PIL gives v, v, v
         * whatever the hue. */
        int s = hsv_tab.sat[hsv_tab.tri[maxc] + cr], h = 0;
        if (s != 0) {
            int d, kase = hue_case(r, g, b, maxc, &d);
            h = hsv_tab.hue[kase][hsv_tab.tri[cr] + d];
        }
        hb[x] = (uint8_t)((h + shift) & 255);
        sb[x] = (uint8_t)s;
        vb[x] = (uint8_t)maxc;
    }
}

#ifdef HAVE_AVX512_COLOR
/* (int)(f * 255.0) for 16 float lanes 0 <= f <= 1, as rgb_to_hs takes its bytes (the product
 * in double, exact), from the float product: for the quotients rgb_to_hs makes, no f * 255
 * lies so near an integer that the float product rounds across it (hsv_tab_init checks every
 * saturation and hue byte: sat16_ok, hue16_ok). */
AVX512_COLOR
static inline __m512i floor255(__m512 f)
{
    return _mm512_cvttps_epi32(_mm512_mul_ps(f, _mm512_set1_ps(255.0f)));
}

/* rgb_to_hs's fmod(h / 6.0 + 1.0, 1.0) rounded to float, for 16 lanes of h: the float
 * nearest to h / 6 (h >= 0) or (h + 6) / 6 (h < 0), which PIL's double steps give because
 * no such quotient lies within their error (2^-52) of a point halfway between two floats.
 * In float, without a division: a first quotient q0 from the float 1/6, its residual
 * (h - 6 q0, or 6 + h - 6 q0 where h < 0: both exact, the fused products being exact and
 * the last sum cancelling) and one correction q0 + residual / 6, which rounds to that
 * nearest float for every h that rgb_to_hs makes (hue16_ok checks them all). */
AVX512_COLOR
static inline __m512 hue_frac16(__m512 h)
{
    const __m512 sixth = _mm512_set1_ps(1.0f / 6.0f), six = _mm512_set1_ps(6.0f);
    const __mmask16 neg = _mm512_cmp_ps_mask(h, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 q0 = _mm512_fmadd_ps(h, sixth, _mm512_maskz_mov_ps(neg, _mm512_set1_ps(1.0f)));
    __m512 r = _mm512_fnmadd_ps(six, q0, _mm512_mask_blend_ps(neg, h, six));
    r = _mm512_mask_add_ps(r, neg, r, h);
    return _mm512_fmadd_ps(r, sixth, q0);
}

/* rgb2hsv's saturation byte of 16 lanes: cr / max in float, times 255.0 in double,
 * truncated; 0 where cr = 0, as hsv_tab.sat. */
AVX512_COLOR
static inline __m512i sat16(__m512i maxc, __m512i cr)
{
    const __m512 s = _mm512_div_ps(_mm512_cvtepi32_ps(cr), _mm512_cvtepi32_ps(maxc));
    return _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(cr, cr), floor255(s));
}

/*
 * rgb2hsv's hue byte of 16 pixels, computed as rgb_to_hs does (no table: a gather of 16 table
 * bytes cost more than the arithmetic). Of PIL's rc, gc, bc, the maximum's is 0 and the
 * minimum's exactly 1, so h is off + x or off - x with x = d / cr in float (d = max - mid) and
 * off an integer: 1 - x, x - 1 where r is the maximum (the minimum b or g), 3 - x, 1 + x for
 * g, 5 - x, 3 + x for b. PIL's double sums there (2.0 + rc - bc) are exact, so one float add
 * rounds as PIL's final conversion does. Lanes with cr = 0 get a value nobody uses.
 * hsv_tab_init checks every (case, cr, d) against the table (hue16_ok).
 */
AVX512_COLOR
static inline __m512i hue16(__m512i R, __m512i G, __m512i B, __m512i maxc, __m512i minc,
                            __m512i cr)
{
    const __mmask16 rmax = _mm512_cmpeq_epi32_mask(R, maxc);
    const __mmask16 gmax = ~rmax & _mm512_cmpeq_epi32_mask(G, maxc);
    const __mmask16 bmax = ~rmax & ~gmax;
    /* minus x: the cases 0, 2, 4 of hue_case */
    const __mmask16 neg = (rmax & _mm512_cmple_epi32_mask(B, G)) |
                          (gmax & _mm512_cmple_epi32_mask(R, B)) |
                          (bmax & _mm512_cmple_epi32_mask(G, R));
    const __m512i mid =
        _mm512_sub_epi32(_mm512_add_epi32(R, _mm512_add_epi32(G, B)), _mm512_add_epi32(maxc, minc));
    __m512i off = _mm512_maskz_mov_epi32(gmax, _mm512_set1_epi32(2));
    off = _mm512_mask_mov_epi32(off, bmax, _mm512_set1_epi32(4));
    off = _mm512_add_epi32(
        off, _mm512_mask_mov_epi32(_mm512_set1_epi32(-1), neg, _mm512_set1_epi32(1)));
    const __m512 x = _mm512_div_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(maxc, mid)),
                                   _mm512_cvtepi32_ps(_mm512_max_epi32(cr, _mm512_set1_epi32(1))));
    const __m512 xs = _mm512_castsi512_ps(_mm512_mask_xor_epi32(
        _mm512_castps_si512(x), neg, _mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
    const __m512 h = _mm512_add_ps(_mm512_cvtepi32_ps(off), xs);
    return floor255(hue_frac16(h));
}

/* x / 255 for 16 float lanes x in 0..255, without a division: the product with the float
 * nearest 1/255 and one correction by its exact residual (Markstein's step), which gives the
 * float nearest the quotient for these x (div255_ok checks all 256). */
AVX512_COLOR
static inline __m512 div255(__m512 x)
{
    const __m512 inv = _mm512_set1_ps(1.0f / 255.0f);
    const __m512 q = _mm512_mul_ps(x, inv);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(q, _mm512_set1_ps(255.0f), x), inv, q);
}

/* Whether div255 is the division (float)v / 255.0f for every byte v. */
AVX512_COLOR
static bool div255_ok(void)
{
    for (int v0 = 0; v0 < 256; v0 += 16) {
        float got[16];
        const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        _mm512_storeu_ps(got, div255(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_set1_epi32(v0), lane))));
        for (int j = 0; j < 16; j++)
            if (got[j] != (float)(v0 + j) / 255.0f)
                return false;
    }
    return true;
}

/* Whether sat16 gives hsv_tab.sat's byte for every (max, cr). */
AVX512_COLOR
static bool sat16_ok(void)
{
    for (int maxc = 1; maxc < 256; maxc++)
        for (int cr0 = 0; cr0 <= maxc; cr0 += 16) {
            const __m512i lane =
                _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            const __m512i cr = _mm512_min_epi32(_mm512_add_epi32(_mm512_set1_epi32(cr0), lane),
                                                _mm512_set1_epi32(maxc));
            int32_t got[16], c[16];
            _mm512_storeu_si512(got, sat16(_mm512_set1_epi32(maxc), cr));
            _mm512_storeu_si512(c, cr);
            for (int j = 0; j < 16; j++)
                if (got[j] != (c[j] ? hsv_tab.sat[hsv_tab.tri[maxc] + c[j]] : 0))
                    return false;
        }
    return true;
}

/* Whether hue16 gives hsv_tab.hue's byte for every (case, cr, d) and sat16 hsv_tab.sat's:
 * pixels with max 255 stand for all others, the hue depending only on the differences. */
AVX512_COLOR
static bool hue16_ok(void)
{
    if (!sat16_ok() || !div255_ok())
        return false;
    uint8_t px[16 * 3];
    uint8_t want[16];
    int n = 0;
    for (int kase = 0; kase < 6; kase++)
        for (int cr = 1; cr < 256; cr++)
            for (int d = 0; d <= cr; d++) {
                int rgb[3];
                case_pixel(kase, cr, d, rgb);
                for (int k = 0; k < 3; k++)
                    px[3 * n + k] = (uint8_t)rgb[k];
                want[n] = hsv_tab.hue[kase][hsv_tab.tri[cr] + d];
                if (++n < 16 && !(kase == 5 && cr == 255 && d == cr))
                    continue;
                __m512i R, G, B;
                RGB16_LOAD(R, G, B, px, ~(__mmask64)0 >> 16);
                const __m512i maxc = _mm512_max_epi32(R, _mm512_max_epi32(G, B));
                const __m512i minc = _mm512_min_epi32(R, _mm512_min_epi32(G, B));
                int32_t got[16];
                const __m512i range = _mm512_sub_epi32(maxc, minc);
                _mm512_storeu_si512(got, hue16(R, G, B, maxc, minc, range));
                for (int j = 0; j < n; j++)
                    if (got[j] != want[j])
                        return false;
                n = 0;
            }
    return true;
}

/* hsv2rgb of 16 lanes of H, S, V bytes: R | G << 8 | B << 16 per lane. fs and f are
 * hsv_tab.fs and hsv_tab.frac computed: s / 255 and (6h - 255 sext) / 255 in float (sext =
 * floor(6h / 255) before the % 6). PIL's p, q and t are round(v (1 - fs g)) in double for g
 * = 1, f and 1 - f (fs * f rounded to float first, as PIL); here they are all
 * (int)(v - v * (fs * g) + 0.5) in float, which gives PIL's byte for every (h, s, v): no
 * product lies so near a half integer that the float steps round across it (hsv_tab_init
 * checks p for every (v, s); img_color_hsv_exhaustive_ok, run by the unit tests, checks all
 * 2^24 (h, s, v)). Each lane's bytes v, p, x (x: t in the even sextants, q in the odd ones)
 * are then placed by one byte shuffle chosen by its sextant. */
AVX512_COLOR
static inline __m512i hsv16_to_rgb(__m512i H, __m512i S, __m512i V)
{
    const __m512i h6 = _mm512_mullo_epi32(H, _mm512_set1_epi32(6));
    const __m512i sext = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_mullo_epi32(h6, _mm512_set1_epi32(257)), _mm512_set1_epi32(257)),
        16);
    const __m512 fs = div255(_mm512_cvtepi32_ps(S));
    const __m512i r = _mm512_sub_epi32(h6, _mm512_mullo_epi32(sext, _mm512_set1_epi32(255)));
    const __m512 f = div255(_mm512_cvtepi32_ps(r));
    const __mmask16 odd = _mm512_test_epi32_mask(sext, _mm512_set1_epi32(1));
    const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    const __m512 g = _mm512_mask_mov_ps(_mm512_sub_ps(one, f), odd, f);
    const __m512 vf = _mm512_cvtepi32_ps(V);
    const __m512i P = _mm512_cvttps_epi32(
        _mm512_add_ps(_mm512_sub_ps(vf, _mm512_mul_ps(vf, fs)), half));
    const __m512i X = _mm512_cvttps_epi32(
        _mm512_add_ps(_mm512_sub_ps(vf, _mm512_mul_ps(vf, _mm512_mul_ps(fs, g))), half));
    /* PIL's switch: 0 (v,t,p) 1 (q,v,p) 2 (p,v,t) 3 (p,q,v) 4 (t,p,v) 5 (v,p,q), i.e. with
     * x: 0 (v,x,p) 1 (x,v,p) 2 (p,v,x) 3 (p,x,v) 4 (x,p,v) 5 (v,p,x); sext 6 is sextant 0,
     * code 7 is gray (s = 0: v,v,v). Byte k of a code's entry is the byte of v | p << 8 |
     * x << 16 that goes to channel k (0x80: zero). */
    static const int32_t place[16] = {0x80010200, 0x80010002, 0x80020001, 0x80000201,
                                      0x80000102, 0x80020100, 0x80010200, 0x80000000};
    const __m512i code =
        _mm512_mask_mov_epi32(sext, ~_mm512_test_epi32_mask(S, S), _mm512_set1_epi32(7));
    __m512i ctrl = _mm512_permutexvar_epi32(code, _mm512_loadu_si512(place));
    /* the byte indices are within each 128-bit lane: add 4j for dword j */
    ctrl = _mm512_add_epi8(
        ctrl, _mm512_broadcast_i32x4(_mm_set_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0)));
    const __m512i vpx =
        _mm512_or_si512(V, _mm512_or_si512(_mm512_slli_epi32(P, 8), _mm512_slli_epi32(X, 16)));
    return _mm512_shuffle_epi8(vpx, ctrl);
}

/* rgb2hsv of 16 pixels at p (the first m: bytes), the hue byte shifted: one lane each of
 * hsv[0] (H), hsv[1] (S) and hsv[2] (V). */
AVX512_COLOR
static inline void rgb_to_hsv16(const uint8_t *p, __mmask64 bytes, int shift, __m512i hsv[3])
{
    __m512i R, G, B;
    RGB16_LOAD(R, G, B, p, bytes);
    const __m512i maxc = _mm512_max_epi32(R, _mm512_max_epi32(G, B));
    const __m512i minc = _mm512_min_epi32(R, _mm512_min_epi32(G, B));
    const __m512i cr = _mm512_sub_epi32(maxc, minc);
    hsv[0] = _mm512_and_si512(
        _mm512_add_epi32(hue16(R, G, B, maxc, minc, cr), _mm512_set1_epi32(shift)),
        _mm512_set1_epi32(255));
    hsv[1] = sat16(maxc, cr);
    hsv[2] = maxc;
}

/* adjust_hue of n pixels at p, in place, in chunks: all the rgb2hsv of a chunk first, then
 * all its hsv2rgb. Each is a long chain of dependent operations (rgb2hsv: two divisions);
 * two short loops let the CPU overlap more pixels' chains than one long loop body does. */
AVX512_COLOR
static void hue_row_avx512(uint8_t *p, int n, int shift)
{
    enum { CHUNK = 256 };
    __m512i hsv[CHUNK / 16][3];
    for (int x0 = 0; x0 < n; x0 += CHUNK) {
        const int len = n - x0 < CHUNK ? n - x0 : CHUNK;
        for (int x = 0; x < len; x += 16) {
            const int m = len - x < 16 ? len - x : 16;
            const __mmask64 bytes = m == 16 ? ~(__mmask64)0 >> 16 : ((__mmask64)1 << (3 * m)) - 1;
            rgb_to_hsv16(p + 3 * (size_t)(x0 + x), bytes, shift, hsv[x / 16]);
        }
        for (int x = 0; x < len; x += 16) {
            const int m = len - x < 16 ? len - x : 16;
            const __mmask64 bytes = m == 16 ? ~(__mmask64)0 >> 16 : ((__mmask64)1 << (3 * m)) - 1;
            const __m512i *w = hsv[x / 16];
            RGB16_STORE_PACKED(p + 3 * (size_t)(x0 + x), hsv16_to_rgb(w[0], w[1], w[2]), bytes);
        }
    }
}
#endif

#ifdef HAVE_AVX512_COLOR
/* hsv16_to_rgb against hsv_to_rgb on every (h, s, v), 16 values of v a call. */
AVX512_COLOR
static bool hsv16_exhaustive_ok(void)
{
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int h = 0; h < 256; h++)
        for (int s = 0; s < 256; s++)
            for (int v0 = 0; v0 < 256; v0 += 16) {
                uint32_t got[16];
                _mm512_storeu_si512(got, hsv16_to_rgb(_mm512_set1_epi32(h), _mm512_set1_epi32(s),
                                                      _mm512_add_epi32(_mm512_set1_epi32(v0), lane)));
                for (int j = 0; j < 16; j++) {
                    uint8_t want[3];
                    if (s == 0)
                        want[0] = want[1] = want[2] = (uint8_t)(v0 + j);
                    else
                        hsv_to_rgb(h, s, v0 + j, want);
                    if (got[j] != (uint32_t)(want[0] | want[1] << 8 | want[2] << 16))
                        return false;
                }
            }
    return true;
}
#endif

int img_color_hsv_exhaustive_ok(void)
{
    pthread_once(&hsv_once, hsv_tab_init);
#ifdef HAVE_AVX512_COLOR
    if (cpu_color_level() > 0)
        return hsv16_exhaustive_ok();
#endif
    return -1;
}

void img_adjust_hue(img_u8 *im, double hue_factor)
{
    check_image(im, "img_adjust_hue");
    if (!(hue_factor >= -0.5 && hue_factor <= 0.5))
        invariant_failed("img_adjust_hue: hue_factor %g is not in [-0.5, 0.5]", hue_factor);
    /* torchvision returns L images untouched. */
    if (im->c != 3)
        return;
    pthread_once(&hsv_once, hsv_tab_init);
    /* np.uint8(hue_factor * 255): truncation toward zero, then modulo 256. */
    const int shift = (int)(hue_factor * 255.0) & 255;
#ifdef HAVE_AVX512_COLOR
    if (color_simd() && hsv_tab.scaled_ok) {
        for (int y = 0; y < im->h; y++)
            hue_row_avx512(im->px + (size_t)y * im->stride, im->w, shift);
        return;
    }
#endif
    const size_t w = (size_t)im->w;
    /* one row of H, S, V and of RGB output (+1 byte of slack for its word stores) */
    uint8_t *buf = malloc(6 * w + 1);
    if (!buf)
        die(EXIT_RUNTIME, "img_adjust_hue: out of memory");
    uint8_t *hb = buf, *sb = hb + w, *vb = sb + w, *out = vb + w;
    for (int y = 0; y < im->h; y++) {
        uint8_t *p = im->px + (size_t)y * im->stride;
        rgb_row_to_hsv(p, im->w, shift, hb, sb, vb);
        hsv_row_to_rgb(hb, sb, vb, out, im->w);
        memcpy(p, out, 3 * w);
    }
    free(buf);
}

/* ---- ImageOps ------------------------------------------------------------------------------ */

/* Byte vectors for the two per-byte maps that need no table. */
typedef uint8_t u8x32 __attribute__((vector_size(32)));

/* p[i] &= mask for i < n. */
SIMD_CLONES
static void and_row(uint8_t *p, size_t n, uint8_t mask)
{
    size_t i = 0;
    for (; i + sizeof(u8x32) <= n; i += sizeof(u8x32)) {
        u8x32 v;
        memcpy(&v, p + i, sizeof v);
        v &= mask;
        memcpy(p + i, &v, sizeof v);
    }
    for (; i < n; i++)
        p[i] &= mask;
}

/* p[i] := p[i] < t ? p[i] : 255 - p[i] for i < n. */
SIMD_CLONES
static void solarize_row(uint8_t *p, size_t n, uint8_t t)
{
    size_t i = 0;
    for (; i + sizeof(u8x32) <= n; i += sizeof(u8x32)) {
        u8x32 v, keep;
        memcpy(&v, p + i, sizeof v);
        keep = (u8x32)(v < t); /* all ones where kept */
        v = (v & keep) | ((255 - v) & ~keep);
        memcpy(p + i, &v, sizeof v);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)(p[i] < t ? p[i] : 255 - p[i]);
}

void img_posterize(img_u8 *im, int bits)
{
    check_image(im, "img_posterize");
    if (bits < 0 || bits > 8)
        invariant_failed("img_posterize: bits %d is not in 0..8", bits);
    /* PIL's table is i & ~(2**(8 - bits) - 1): a mask. */
    const uint8_t mask = (uint8_t)~((1 << (8 - bits)) - 1);
    const size_t row = (size_t)im->w * (size_t)im->c;
    for (int y = 0; y < im->h; y++)
        and_row(im->px + (size_t)y * im->stride, row, mask);
}

void img_solarize(img_u8 *im, int threshold)
{
    check_image(im, "img_solarize");
    /* Above 255 PIL's table is the identity; at or below 0 it inverts everything, which
     * is a threshold of 0 for solarize_row. */
    if (threshold > 255)
        return;
    const uint8_t t = (uint8_t)(threshold < 0 ? 0 : threshold);
    const size_t row = (size_t)im->w * (size_t)im->c;
    for (int y = 0; y < im->h; y++)
        solarize_row(im->px + (size_t)y * im->stride, row, t);
}

/* autocontrast's table for one channel whose samples span lo..hi (cutoff 0, nothing
 * ignored, so PIL's histogram matters only through its lowest and highest non-empty bins):
 * stretch lo..hi to 0..255 in double, truncating; a constant channel keeps its values.
 * Returns false when the table is the identity. */
static bool autocontrast_lut(int lo, int hi, uint8_t lut[256])
{
    if (hi <= lo || (lo == 0 && hi == 255)) {
        for (int v = 0; v < 256; v++)
            lut[v] = (uint8_t)v;
        return false;
    }
    double scale = 255.0 / (hi - lo);
    double offset = -lo * scale;
    for (int v = 0; v < 256; v++)
        lut[v] = clip8i((int)(v * scale + offset));
    return true;
}

/* Per-channel minimum and maximum of one row of n samples with c channels, folded into
 * lo[] and hi[]. Blocks of 3 vectors (96 bytes) start on a pixel boundary, so byte j of
 * vector k always belongs to channel (32k + j) % c. */
SIMD_CLONES
static void row_min_max(const uint8_t *p, size_t n, int c, int lo[3], int hi[3])
{
    enum { V = sizeof(u8x32) };
    u8x32 mn[3], mx[3];
    for (int k = 0; k < 3; k++) {
        mn[k] = (u8x32){0} + 255;
        mx[k] = (u8x32){0};
    }
    size_t i = 0;
    for (; i + 3 * V <= n; i += 3 * V)
        for (int k = 0; k < 3; k++) {
            u8x32 v;
            memcpy(&v, p + i + (size_t)k * V, sizeof v);
            u8x32 less = (u8x32)(v < mn[k]), more = (u8x32)(v > mx[k]);
            mn[k] = (v & less) | (mn[k] & ~less);
            mx[k] = (v & more) | (mx[k] & ~more);
        }
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < V; j++) {
            int ch = (k * V + j) % c;
            lo[ch] = mn[k][j] < lo[ch] ? mn[k][j] : lo[ch];
            hi[ch] = mx[k][j] > hi[ch] ? mx[k][j] : hi[ch];
        }
    for (; i < n; i++) {
        int ch = (int)(i % (size_t)c);
        lo[ch] = p[i] < lo[ch] ? p[i] : lo[ch];
        hi[ch] = p[i] > hi[ch] ? p[i] : hi[ch];
    }
}

void img_autocontrast(img_u8 *im)
{
    check_image(im, "img_autocontrast");
    const int c = im->c;
    const size_t row = (size_t)im->w * (size_t)c;
    int lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
    for (int y = 0; y < im->h; y++)
        row_min_max(im->px + (size_t)y * im->stride, row, c, lo, hi);
    uint8_t lut[3][256];
    bool any = false;
    for (int k = 0; k < c; k++)
        any |= autocontrast_lut(lo[k], hi[k], lut[k]);
    if (any)
        apply_luts(im, (const uint8_t(*)[256])lut);
}

/*
 * lab.c — OpenCV 4.6's cv::cvtColor(COLOR_BGR2Lab) on 8-bit images, bit for bit.
 *
 * VISSL's ImgPil2LabTensor turns the PIL RGB image into BGR bytes and calls
 * cvtColor(img, COLOR_BGR2LAB); feeding BGR bytes with the BGR code is the same as feeding
 * our RGB bytes with the channel roles swapped, so img_rgb_to_lab reads RGB directly.
 *
 *     void img_rgb_to_lab(const img_u8 *src, img_u8 *dst);
 *
 * dst (c = 3, src's size) gets the L, a, b bytes of each pixel; src and dst may be the same
 * image (each pixel is read before it is written).
 *
 * OpenCV's 8-bit path (modules/imgproc/src/color_lab.cpp, RGB2Lab_b; IPP is used only for
 * the linear-RGB codes and OpenCV's trilinear 3-D LUT only for float input) is integer
 * arithmetic over three tables built once (pthread_once) with OpenCV's softfloat, whose
 * + - * / and fused multiply-add round correctly, as C's IEEE float and double do:
 *
 *   gamma[v]   sRGB decoding of v/255, scaled by 255*2^3 (gamma_shift = 3): 0..2040
 *   coef[3][3] sRGB->XYZ (D65) divided by the white point, scaled by 2^12 (lab_shift)
 *   cbrt[i]    Lab's f(t) (cube root, or the linear toe below (6/29)^3) of t = i/2040,
 *              scaled by 2^15 (lab_shift2)
 *
 * and per pixel, with descale(x, n) = (x + 2^(n-1)) >> n:
 *
 *   X, Y, Z = descale(sum_j coef[k][j] * gamma[rgb_j], 12)       (k = X, Y, Z)
 *   fX, fY, fZ = cbrt[X], cbrt[Y], cbrt[Z]
 *   L = descale(296 * fY - 1336934, 15)                          (116 f - 16, times 255/100)
 *   a = descale(500 * (fX - fY) + 128 * 2^15, 15)
 *   b = descale(200 * (fY - fZ) + 128 * 2^15, 15)
 *
 * each saturated to 0..255. OpenCV's SIMD loops compute the same integers lane by lane.
 *
 * Two softfloat functions are not correctly rounded. Its cube root truncates, and one table
 * entry depends on that, so opencv_cbrtf below is a replica. Its pow (exp of a log) is
 * within a few double ulps; libm's pow stands in, which is safe because every gamma value
 * lies at least 7e-11 (relative) away from a float rounding boundary.
 * The result was checked equal to Debian's OpenCV 4.6 (python3-opencv 4.6.0+dfsg-12) on
 * all 2^24 RGB colours.
 */
/* The tables depend on every float operation being rounded on its own (the one fused
 * multiply-add is OpenCV's own, and is written as fmaf). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "augment/img.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>


/* ---- fixed-point layout (OpenCV's names in comments) --------------------------------------- */

enum {
    GAMMA_SHIFT = 3,                       /* gamma_shift: gamma[] is 255 * 2^3 at most */
    XYZ_SHIFT = 12,                        /* lab_shift (= xyz_shift): coef[] scale */
    F_SHIFT = XYZ_SHIFT + GAMMA_SHIFT,     /* lab_shift2: cbrt[] scale */
    CBRT_SIZE = 256 * 3 / 2 << GAMMA_SHIFT /* LAB_CBRT_TAB_SIZE_B: X, Z reach ~1.09 * 2040 */
};

/* L = (116 f - 16) * 255/100 in fixed point: 296 = round(116 * 2.55) and the offset is
 * 16 * 2.55 * 2^15, both by OpenCV's integer rounding (Lscale, Lshift). */
static const int L_SCALE = (116 * 255 + 50) / 100;
static const int L_SHIFT = -((16 * 255 * (1 << F_SHIFT) + 50) / 100);

/* ---- tables ----------------------------------------------------------------------------- */

static uint16_t gamma_tab[256];
static uint16_t cbrt_tab[CBRT_SIZE];
static int coef[3][3]; /* [X, Y, Z][R, G, B] */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* double from its IEEE bits: OpenCV gives its constants as raw bits (softdouble::fromRaw). */
static double from_bits(uint64_t bits)
{
    union {
        uint64_t u;
        double d;
    } v = {.u = bits};
    return v.d;
}

/* sRGB's decoding of x in [0, 1] to linear light, in double, rounded to float at the end
 * (OpenCV's applyGamma: softdouble arithmetic returned as softfloat). */
static float srgb_to_linear(float x)
{
    const double xd = x;
    if (xd <= 809.0 / 20000.0) /* 0.04045 */
        return (float)(xd / (323.0 / 25.0)); /* / 12.92 */
    const double shift = 11.0 / 200.0;      /* 0.055 */
    return (float)pow((xd + shift) / (1.0 + shift), 12.0 / 5.0);
}

/* OpenCV's softfloat cube root (f32_cbrt, after Ken Turkowski) for a positive normal
 * float: write x = 2^(3e) * m with m in [1/8, 1), evaluate a quartic rational approximation
 * of cbrt(m) in double, and keep its mantissa TRUNCATED to float's 23 bits under the
 * exponent e - 1. This is not the correctly rounded cube root: it is one ulp lower for
 * t = 324/2040, which moves cbrt_tab[324] by one and changes L for 17,445 of the 2^24
 * colours, so the tables must use it rather than libm's cbrt. */
static float opencv_cbrtf(float x)
{
    union {
        float f;
        uint32_t u;
    } in = {.f = x}, out;
    union {
        double d;
        uint64_t u;
    } m;
    int e = (int)(in.u >> 23 & 0xFF) - 127;
    int sh = e % 3; /* C's remainder: sh takes the sign of e */
    sh -= sh >= 0 ? 3 : 0;          /* now -3..-1, so that m = 2^sh * 1.frac is in [1/8, 1) */
    e = (e - sh) / 3 - 1;           /* exponent of the root */
    m.u = (uint64_t)(sh + 1023) << 52 | (uint64_t)(in.u & 0x7FFFFF) << 29;

    const double a1 = from_bits(0x4046a09e6653ba70), a2 = from_bits(0x406808f46c6116e0),
                 a3 = from_bits(0x405dca97439cae14), a4 = from_bits(0x402add70d2827500),
                 a5 = from_bits(0x3fc4f15f83f55d2d), b1 = from_bits(0x402d9e20660edb21),
                 b2 = from_bits(0x4062ff15c0285815), b3 = from_bits(0x406510d06a8112ce),
                 b4 = from_bits(0x4040fecbc9e2c375);
    const double r = m.d;
    m.d = ((((a1 * r + a2) * r + a3) * r + a4) * r + a5) /
          ((((b1 * r + b2) * r + b3) * r + b4) * r + 1.0);

    out.u = (uint32_t)(e + 127) << 23 | (uint32_t)((m.u & 0xFFFFFFFFFFFFFull) >> 29);
    return out.f;
}

/* Lab's f(t): the cube root above (6/29)^3, else the linear toe 841/108 t + 16/116, in
 * float; OpenCV computes the toe with a fused multiply-add (softfloat mulAdd). */
static float lab_f(float t)
{
    const float thresh = 216.0f / 24389.0f; /* (6/29)^3 */
    if (t < thresh)
        return fmaf(t, 841.0f / 108.0f, 16.0f / 116.0f);
    return opencv_cbrtf(t);
}

/* OpenCV's cvRound on softfloat/softdouble: to nearest, ties to even (the default rounding
 * mode, which rint follows). */
static int round_even(double x) { return (int)rint(x); }

static void build_tables(void)
{
    /* sRGB gamma, scaled to 255 * 2^3: the product is rounded to float before cvRound. */
    const float gamma_scale = (float)(255 << GAMMA_SHIFT);
    for (int v = 0; v < 256; v++) {
        const float x = (float)v / 255.0f;
        gamma_tab[v] = (uint16_t)round_even(gamma_scale * srgb_to_linear(x));
    }

    /* f(i / 2040) scaled by 2^15. 1/2040 is rounded to float first, as OpenCV does. */
    const float step = 1.0f / (255.0f * (float)(1 << GAMMA_SHIFT));
    const float f_scale = (float)(1 << F_SHIFT);
    for (int i = 0; i < CBRT_SIZE; i++)
        cbrt_tab[i] = (uint16_t)round_even(f_scale * lab_f(step * (float)i));

    /* sRGB -> XYZ (D65) rows, each divided by the white point's component so that white
     * maps to X = Y = Z = 1: 0.412453 0.357580 0.180423 / 0.212671 0.715160 0.072169 /
     * 0.019334 0.119193 0.950227, white 0.950456 1 1.088754 (OpenCV's exact bits). */
    static const uint64_t m_bits[3][3] = {
        {0x3fda65a14488c60d, 0x3fd6e297396d0918, 0x3fc71819d2391d58},
        {0x3fcb38cda6e75ff6, 0x3fe6e297396d0918, 0x3fb279aae6c8f755},
        {0x3f93cc4ac6cdaf4b, 0x3fbe836eb4e98138, 0x3fee68427418d691},
    };
    static const uint64_t white_bits[3] = {0x3fee6a22b3892ee8, 0x3ff0000000000000,
                                           0x3ff16b8950763a19};
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 3; j++)
            coef[k][j] = round_even((double)(1 << XYZ_SHIFT) * from_bits(m_bits[k][j]) /
                                    from_bits(white_bits[k]));
}

/* ---- per pixel -------------------------------------------------------------------------- */

/* OpenCV's CV_DESCALE: divide by 2^n, rounding halves up. The sums here are never negative
 * before the shift for real colours, but an arithmetic shift keeps the floor either way. */
static inline int descale(int x, int n) { return (x + (1 << (n - 1))) >> n; }

static inline uint8_t sat_u8(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* One pixel: rgb[0..2] in, lab[0..2] out (may alias: all reads come first). */
static inline void pixel_to_lab(const uint8_t *rgb, uint8_t *lab)
{
    const int r = gamma_tab[rgb[0]], g = gamma_tab[rgb[1]], b = gamma_tab[rgb[2]];
    const int fx = cbrt_tab[descale(r * coef[0][0] + g * coef[0][1] + b * coef[0][2], XYZ_SHIFT)];
    const int fy = cbrt_tab[descale(r * coef[1][0] + g * coef[1][1] + b * coef[1][2], XYZ_SHIFT)];
    const int fz = cbrt_tab[descale(r * coef[2][0] + g * coef[2][1] + b * coef[2][2], XYZ_SHIFT)];
    lab[0] = sat_u8(descale(L_SCALE * fy + L_SHIFT, F_SHIFT));
    lab[1] = sat_u8(descale(500 * (fx - fy) + (128 << F_SHIFT), F_SHIFT));
    lab[2] = sat_u8(descale(200 * (fy - fz) + (128 << F_SHIFT), F_SHIFT));
}

void img_rgb_to_lab(const img_u8 *src, img_u8 *dst)
{
    pthread_once(&tables_once, build_tables);
    for (int y = 0; y < src->h; y++) {
        const uint8_t *s = src->px + (size_t)y * src->stride;
        uint8_t *d = dst->px + (size_t)y * dst->stride;
        for (int x = 0; x < src->w; x++)
            pixel_to_lab(s + 3 * x, d + 3 * x);
    }
}

/*
 * test_img_color.c — stages/augment/color.c and blur.c against PIL 9.4 / torchvision 0.14:
 * ImageEnhance Brightness/Contrast/Color/Sharpness, F.adjust_hue, ImageOps posterize/
 * solarize/autocontrast and GaussianBlur, on crops of real photos, noise and odd sizes
 * (fixtures from tests/golden/make_img_color_fixtures.py). Every result must be bit-exact.
 * (Beyond these fixtures, hue, Color, Sharpness and GaussianBlur were checked bit-exact on
 * an image of all 2^24 RGB colours when written; that image is too large to commit.)
 * Each run works on a view inside a larger canvas, so strides other than w*3 are covered
 * and writing outside the view is caught. L (1-channel) images are checked against the
 * RGB path on a gray image. Every SIMD path is also checked against the portable one on
 * random images of every tail width and, for hue, on all 2^24 colours.
 */
#include "augment/img.h"
#include "npy.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0xA5

/* ---- helpers ------------------------------------------------------------------------------ */

static void load(const char *file, npy_array *a)
{
    char *path = test_fixture("img_color", file), *err = NULL;
    cr_assert_eq(npy_read(path, a, &err), 0, "%s", err);
    free(path);
}

/* Apply the operation named `op` with parameter p. */
static void run_op(const char *op, img_u8 *im, double p)
{
    if (!strcmp(op, "brightness"))
        img_adjust_brightness(im, p);
    else if (!strcmp(op, "contrast"))
        img_adjust_contrast(im, p);
    else if (!strcmp(op, "saturation"))
        img_adjust_saturation(im, p);
    else if (!strcmp(op, "sharpness"))
        img_adjust_sharpness(im, p);
    else if (!strcmp(op, "hue"))
        img_adjust_hue(im, p);
    else if (!strcmp(op, "posterize"))
        img_posterize(im, (int)p);
    else if (!strcmp(op, "solarize"))
        img_solarize(im, (int)p);
    else if (!strcmp(op, "autocontrast"))
        img_autocontrast(im);
    else if (!strcmp(op, "blur"))
        img_gaussian_blur(im, p);
    else
        cr_assert_fail("unknown op %s", op);
}

/* A canvas 2 pixels larger on each side filled with SENTINEL, `data` (h x w x 3) copied into
 * the view at (2, 1); the view is returned, the canvas in *canvas. */
static img_u8 in_canvas(const uint8_t *data, int w, int h, int c, img_u8 *canvas)
{
    *canvas = img_alloc(w + 4, h + 2, c);
    img_fill(canvas, SENTINEL);
    img_u8 v = img_view(canvas, 2, 1, w, h);
    img_u8 src = {.px = (uint8_t *)data, .w = w, .h = h, .c = c, .stride = (size_t)w * c};
    img_copy(&src, &v);
    return v;
}

/* Everything outside the view must still be SENTINEL. */
static void assert_border(const img_u8 *canvas, const img_u8 *v, const char *what)
{
    for (int y = 0; y < canvas->h; y++)
        for (int x = 0; x < canvas->w; x++) {
            if (y >= 1 && y < 1 + v->h && x >= 2 && x < 2 + v->w)
                continue;
            const uint8_t *p = canvas->px + (size_t)y * canvas->stride + (size_t)x * canvas->c;
            for (int k = 0; k < canvas->c; k++)
                cr_assert_eq(p[k], SENTINEL, "%s wrote outside its view at (%d,%d)", what, x, y);
        }
}

/* Run `op` on fixture input `input` for every parameter and compare with PIL's output. */
static void check(const char *op, const char *input)
{
    char file[128];
    npy_array in = {0}, want = {0}, params = {0};
    snprintf(file, sizeof file, "%s.npy", input);
    load(file, &in);
    snprintf(file, sizeof file, "%s__%s.npy", input, op);
    load(file, &want);
    snprintf(file, sizeof file, "%s_params.npy", op);
    load(file, &params);
    cr_assert_eq(in.dtype, NPY_U1);
    cr_assert_eq(in.ndim, 3);
    cr_assert_eq(params.dtype, NPY_F8);
    const int h = (int)in.shape[0], w = (int)in.shape[1], c = (int)in.shape[2];
    const size_t n = in.count;
    cr_assert_eq(want.ndim, 4);
    cr_assert_eq(want.shape[0], params.count);
    cr_assert_eq(want.count, params.count * n);

    uint8_t *got = malloc(n);
    for (size_t i = 0; i < params.count; i++) {
        double p = ((const double *)params.data)[i];
        img_u8 canvas;
        img_u8 v = in_canvas(in.data, w, h, c, &canvas);
        run_op(op, &v, p);
        char what[96];
        snprintf(what, sizeof what, "%s(%g) on %s", op, p, input);
        assert_border(&canvas, &v, what);
        img_u8 dst = {.px = got, .w = w, .h = h, .c = c, .stride = (size_t)w * c};
        img_copy(&v, &dst);
        img_free(&canvas);

        const uint8_t *ref = (const uint8_t *)want.data + i * n;
        size_t bad = 0, first = 0;
        int worst = 0;
        for (size_t j = 0; j < n; j++) {
            int d = abs((int)got[j] - (int)ref[j]);
            if (d && !bad++)
                first = j;
            worst = d > worst ? d : worst;
        }
        cr_assert_eq(bad, 0,
                     "%s: %zu of %zu samples differ (max %d); first at y=%zu x=%zu ch=%zu: "
                     "got %d, PIL %d",
                     what, bad, n, worst, first / ((size_t)w * c), first / c % w, first % c,
                     got[first], ref[first]);
    }
    free(got);
    npy_close(&in);
    npy_close(&want);
    npy_close(&params);
}

static const char *const PHOTOS[] = {"photo_a", "photo_b", "photo_c", "noise"};

static void check_photos(const char *op)
{
    for (size_t i = 0; i < sizeof PHOTOS / sizeof *PHOTOS; i++)
        check(op, PHOTOS[i]);
}

/* ---- PIL / torchvision agreement ---------------------------------------------------------- */

Test(img_color, brightness) { check_photos("brightness"); }

Test(img_color, contrast)
{
    check_photos("contrast");
    check("contrast", "narrow");
}

Test(img_color, saturation) { check_photos("saturation"); }

Test(img_color, sharpness)
{
    check_photos("sharpness");
    check("sharpness", "tiny");
}

Test(img_color, hue) { check_photos("hue"); }

Test(img_color, posterize) { check_photos("posterize"); }

Test(img_color, solarize) { check_photos("solarize"); }

Test(img_color, autocontrast)
{
    check_photos("autocontrast");
    check("autocontrast", "flat_g");
    check("autocontrast", "narrow");
}

Test(img_color, gaussian_blur)
{
    check_photos("blur");
    check("blur", "tiny");
}

/* Every code path gives PIL's bytes: the same fixtures with the SIMD kernels switched off
 * (what a CPU without AVX2 / AVX-512 runs), with the blur held to AVX2, and with the colour
 * operations held to AVX-512 without VBMI. */
Test(img_color, portable_and_avx2_paths_match_pil)
{
    static const char *const ops[] = {"brightness", "contrast", "saturation", "sharpness", "hue",
                                      "posterize", "solarize", "autocontrast", "blur"};
    img_color_set_simd(0);
    img_blur_set_simd(0);
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        check_photos(ops[i]);
    check("blur", "tiny");
    img_blur_set_simd(1);
    check_photos("blur");
    check("blur", "tiny");
    /* AVX-512 without VBMI: Brightness and Contrast blend every sample rather than map the
     * image through a table */
    if (img_color_set_simd(2) == 1) {
        check_photos("brightness");
        check_photos("contrast");
        check("contrast", "narrow");
    }
    img_color_set_simd(1);
    img_blur_set_simd(2);
}

/* ---- every path against the portable one, beyond the fixtures ------------------------------ */

/* `op`(p) on `data` with every colour path the CPU has must give the portable path's bytes. */
static void paths_agree(const char *op, double p, const uint8_t *data, int w, int h)
{
    img_u8 cref, cgot;
    img_u8 ref = in_canvas(data, w, h, 3, &cref);
    img_color_set_simd(0);
    run_op(op, &ref, p);
    for (int level = 1; level <= 2; level++) {
        img_u8 got = in_canvas(data, w, h, 3, &cgot);
        img_color_set_simd(level);
        run_op(op, &got, p);
        for (int y = 0; y < h; y++)
            cr_assert_arr_eq(got.px + (size_t)y * got.stride, ref.px + (size_t)y * ref.stride,
                             (size_t)w * 3, "%s(%.17g) %dx%d, level %d: row %d differs", op, p,
                             w, h, level, y);
        assert_border(&cgot, &got, op);
        img_free(&cgot);
    }
    img_free(&cref);
    img_color_set_simd(1);
}

/* Random images of every width from 1 to 40 (all the vector tails) and random factors. */
Test(img_color, simd_paths_match_portable_on_random_images)
{
    static const char *const ops[] = {"brightness", "contrast", "saturation", "hue"};
    uint64_t state = 0x9e3779b97f4a7c15u;
    uint8_t *data = malloc(40 * 7 * 3);
    for (int w = 1; w <= 40; w++)
        for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
            for (size_t i = 0; i < 40 * 7 * 3; i++) {
                state = state * 6364136223846793005u + 1442695040888963407u;
                data[i] = (uint8_t)(state >> 56);
            }
            double u = (double)(state >> 11) / 9007199254740992.0;
            double p = k == 3 ? u - 0.5 : 3.0 * u;
            paths_agree(ops[k], p, data, w, 7);
        }
    free(data);
}

/* Saturation's vector path leaves the clipping to saturating packs, which holds while no
 * blend overflows int32: factors near and beyond that limit (the scalar path's) agree too. */
Test(img_color, saturation_extreme_factors_match_portable)
{
    uint64_t state = 0x2545f4914f6cdd1du;
    uint8_t *data = malloc(40 * 7 * 3);
    for (size_t i = 0; i < 40 * 7 * 3; i++) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        data[i] = (uint8_t)(state >> 56);
    }
    static const double factors[] = {-7.5, 99.0, -9.99e5, 9.99e5, -2e6, 2e6, 1e30, -1e30};
    for (size_t k = 0; k < sizeof factors / sizeof *factors; k++)
        paths_agree("saturation", factors[k], data, 40, 7);
    free(data);
}

/* adjust_hue on every one of the 2^24 RGB colours (a 4096 x 4096 image), for several hue
 * shifts: the vector rgb2hsv / hsv2rgb compute what the portable code takes from tables. */
Test(img_color, hue_of_every_colour_matches_portable)
{
    const int side = 4096;
    uint8_t *data = malloc((size_t)side * side * 3);
    for (size_t i = 0; i < (size_t)side * side; i++) {
        data[3 * i] = (uint8_t)(i >> 16);
        data[3 * i + 1] = (uint8_t)(i >> 8);
        data[3 * i + 2] = (uint8_t)i;
    }
    static const double shifts[] = {0.0, 0.13, -0.37, 0.5};
    for (size_t k = 0; k < sizeof shifts / sizeof *shifts; k++)
        paths_agree("hue", shifts[k], data, side, side);
    free(data);
}

/* The vector hsv2rgb computes PIL's double products in float: right for every (h, s, v), not
 * only those the colours above reach after four shifts. */
Test(img_color, vector_hsv2rgb_matches_pil_on_every_hsv)
{
    int ok = img_color_hsv_exhaustive_ok();
    if (ok < 0)
        cr_skip_test("no vector hsv2rgb on this CPU");
    cr_assert_eq(ok, 1, "the vector hsv2rgb differs from PIL's for some (h, s, v)");
}

/* A factor too large for the vector path's float-to-int conversion takes the scalar path:
 * Brightness(2e6) sends every nonzero sample to 255 (PIL clips the same way). */
Test(img_color, huge_factor)
{
    npy_array in = {0};
    load("photo_c.npy", &in);
    const int h = (int)in.shape[0], w = (int)in.shape[1];
    img_u8 canvas;
    img_u8 v = in_canvas(in.data, w, h, 3, &canvas);
    img_adjust_brightness(&v, 2e6);
    assert_border(&canvas, &v, "brightness(2e6)");
    const uint8_t *src = in.data;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < 3 * w; x++) {
            uint8_t want = src[(size_t)y * 3 * w + x] ? 255 : 0;
            cr_assert_eq(v.px[(size_t)y * v.stride + x], want, "at row %d byte %d", y, x);
        }
    img_free(&canvas);
    npy_close(&in);
}

/* ---- L images: the same numbers as a gray RGB image ---------------------------------------- */

/* For operations defined per sample or per channel (PIL runs the same C arithmetic on one
 * band), an L image must come out as channel 0 of the RGB result on R = G = B. */
Test(img_color, l_matches_gray_rgb)
{
    npy_array in = {0};
    load("photo_b.npy", &in);
    const int h = (int)in.shape[0], w = (int)in.shape[1];
    const uint8_t *rgb = in.data;
    uint8_t *gray1 = malloc((size_t)w * h), *gray3 = malloc((size_t)w * h * 3);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        /* any gray will do; use the green channel */
        gray1[i] = rgb[3 * i + 1];
        gray3[3 * i] = gray3[3 * i + 1] = gray3[3 * i + 2] = rgb[3 * i + 1];
    }
    static const struct {
        const char *op;
        double p;
    } cases[] = {{"brightness", 1.3}, {"contrast", 0.6}, {"saturation", 0.3},
                 {"sharpness", 1.7},  {"hue", 0.2},      {"posterize", 3},
                 {"solarize", 100},   {"autocontrast", 0}, {"blur", 1.37}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        img_u8 c1, c3;
        img_u8 v1 = in_canvas(gray1, w, h, 1, &c1), v3 = in_canvas(gray3, w, h, 3, &c3);
        run_op(cases[k].op, &v1, cases[k].p);
        run_op(cases[k].op, &v3, cases[k].p);
        assert_border(&c1, &v1, cases[k].op);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t a = v1.px[(size_t)y * v1.stride + x];
                const uint8_t *b = v3.px + (size_t)y * v3.stride + 3 * (size_t)x;
                cr_assert(a == b[0] && b[0] == b[1] && b[1] == b[2],
                          "%s at (%d,%d): L %d, RGB %d %d %d", cases[k].op, x, y, a, b[0],
                          b[1], b[2]);
            }
        img_free(&c1);
        img_free(&c3);
    }
    free(gray1);
    free(gray3);
    npy_close(&in);
}

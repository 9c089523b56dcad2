/*
 * test_img_lab.c — stages/augment/lab.c against OpenCV 4.6's cvtColor(COLOR_BGR2LAB) on
 * 8-bit images, the bytes VISSL's ImgPil2LabTensor starts from (fixtures from
 * tests/golden/make_lab_fixtures.py: noise, a gradient, pure colours and a photo crop).
 * Every byte must match. (Beyond these fixtures, img_rgb_to_lab was checked bit-exact
 * against Debian's python3-opencv 4.6.0 on an image of all 2^24 RGB colours when written;
 * that image is too large to commit.) Runs go through views inside a larger canvas, so
 * strides other than w*3 are covered and writing outside the view is caught, and in place.
 */
#include "augment/img.h"
#include "npy.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Declared here until img.h carries it (lab.c). */
void img_rgb_to_lab(const img_u8 *src, img_u8 *dst);

#define SENTINEL 0xA5

/* ---- helpers ------------------------------------------------------------------------------ */

static void load(const char *file, npy_array *a)
{
    char *path = test_fixture("lab", file), *err = NULL;
    cr_assert_eq(npy_read(path, a, &err), 0, "%s", err);
    free(path);
}

/* A canvas 2 pixels larger on each side filled with SENTINEL, `data` (h x w x 3) copied into
 * the view at (2, 1); the view is returned, the canvas in *canvas. */
static img_u8 in_canvas(const uint8_t *data, int w, int h, img_u8 *canvas)
{
    *canvas = img_alloc(w + 4, h + 2, 3);
    img_fill(canvas, SENTINEL);
    img_u8 v = img_view(canvas, 2, 1, w, h);
    if (data) {
        img_u8 src = {.px = (uint8_t *)data, .w = w, .h = h, .c = 3, .stride = (size_t)w * 3};
        img_copy(&src, &v);
    }
    return v;
}

/* Everything outside the view must still be SENTINEL. */
static void assert_border(const img_u8 *canvas, const img_u8 *v, const char *what)
{
    for (int y = 0; y < canvas->h; y++)
        for (int x = 0; x < canvas->w; x++) {
            if (y >= 1 && y < 1 + v->h && x >= 2 && x < 2 + v->w)
                continue;
            const uint8_t *p = canvas->px + (size_t)y * canvas->stride + (size_t)x * 3;
            for (int k = 0; k < 3; k++)
                cr_assert_eq(p[k], SENTINEL, "%s wrote outside its view at (%d,%d)", what, x, y);
        }
}

/* The view's bytes must equal `ref` (h x w x 3, packed). */
static void assert_equal(const img_u8 *v, const uint8_t *ref, const char *what)
{
    const size_t row = (size_t)v->w * 3;
    size_t bad = 0, first = 0;
    for (int y = 0; y < v->h; y++)
        for (size_t j = 0; j < row; j++)
            if (v->px[(size_t)y * v->stride + j] != ref[y * row + j] && !bad++)
                first = y * row + j;
    cr_assert_eq(bad, 0,
                 "%s: %zu of %zu bytes differ from OpenCV; first at y=%zu x=%zu ch=%zu: "
                 "got %d, OpenCV %d",
                 what, bad, row * v->h, first / row, first % row / 3, first % 3,
                 v->px[first / row * v->stride + first % row], ref[first]);
}

/* Fixture `input`: into a separate view, then in place; both must give OpenCV's bytes. */
static void check(const char *input)
{
    char file[128], what[128];
    npy_array in = {0}, want = {0};
    snprintf(file, sizeof file, "%s.npy", input);
    load(file, &in);
    snprintf(file, sizeof file, "%s__lab.npy", input);
    load(file, &want);
    cr_assert_eq(in.dtype, NPY_U1);
    cr_assert_eq(want.dtype, NPY_U1);
    cr_assert_eq(in.ndim, 3);
    cr_assert_eq(want.ndim, 3);
    cr_assert_eq(in.shape[2], 3);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(want.shape[k], in.shape[k]);
    const int h = (int)in.shape[0], w = (int)in.shape[1];

    img_u8 src_canvas, dst_canvas;
    img_u8 src = in_canvas(in.data, w, h, &src_canvas);
    img_u8 dst = in_canvas(NULL, w, h, &dst_canvas);
    img_rgb_to_lab(&src, &dst);
    snprintf(what, sizeof what, "lab of %s (separate dst)", input);
    assert_border(&dst_canvas, &dst, what);
    assert_equal(&dst, want.data, what);
    /* the source is left alone */
    assert_border(&src_canvas, &src, what);
    img_u8 orig = {.px = in.data, .w = w, .h = h, .c = 3, .stride = (size_t)w * 3};
    for (int y = 0; y < h; y++)
        cr_assert_eq(memcmp(src.px + y * src.stride, orig.px + y * orig.stride, (size_t)w * 3), 0,
                     "%s: the source changed", what);

    img_rgb_to_lab(&src, &src);
    snprintf(what, sizeof what, "lab of %s (in place)", input);
    assert_border(&src_canvas, &src, what);
    assert_equal(&src, want.data, what);

    img_free(&src_canvas);
    img_free(&dst_canvas);
    npy_close(&in);
    npy_close(&want);
}

/* One pixel through img_rgb_to_lab. */
static void lab_of(uint8_t r, uint8_t g, uint8_t b, uint8_t out[3])
{
    uint8_t px[3] = {r, g, b};
    img_u8 src = {.px = px, .w = 1, .h = 1, .c = 3, .stride = 3};
    img_u8 dst = {.px = out, .w = 1, .h = 1, .c = 3, .stride = 3};
    img_rgb_to_lab(&src, &dst);
}

/* ---- OpenCV agreement --------------------------------------------------------------------- */

Test(img_lab, noise) { check("noise"); }

Test(img_lab, gradient) { check("gradient"); }

/* Includes the colours where OpenCV's truncating softfloat cube root matters. */
Test(img_lab, pure_colours) { check("pure"); }

Test(img_lab, photo) { check("photo"); }

/* ---- spec ------------------------------------------------------------------------------- */

/* T26: white is L = 255 (100 after VISSL's scaling), a = b = 128 (0); black is L = 0. */
Test(img_lab, t26_white_and_black)
{
    uint8_t lab[3];
    lab_of(255, 255, 255, lab);
    cr_assert(lab[0] == 255 && lab[1] == 128 && lab[2] == 128, "white -> (%d,%d,%d)", lab[0],
              lab[1], lab[2]);
    lab_of(0, 0, 0, lab);
    cr_assert(lab[0] == 0 && lab[1] == 128 && lab[2] == 128, "black -> (%d,%d,%d)", lab[0],
              lab[1], lab[2]);
}

/* Grays are neutral: a = b = 128 exactly, L rising with the level. */
Test(img_lab, grays_are_neutral)
{
    int prev = -1;
    for (int v = 0; v < 256; v++) {
        uint8_t lab[3];
        lab_of((uint8_t)v, (uint8_t)v, (uint8_t)v, lab);
        cr_assert(lab[1] == 128 && lab[2] == 128, "gray %d -> a=%d b=%d", v, lab[1], lab[2]);
        cr_assert_geq(lab[0], prev, "L falls at gray %d", v);
        prev = lab[0];
    }
}

/* An empty image is a no-op. */
Test(img_lab, empty)
{
    uint8_t px[3] = {1, 2, 3};
    img_u8 im = {.px = px, .w = 0, .h = 1, .c = 3, .stride = 3};
    img_rgb_to_lab(&im, &im);
    cr_assert(px[0] == 1 && px[1] == 2 && px[2] == 3);
}

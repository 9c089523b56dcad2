/*
 * test_img_resample.c — stages/augment/resample.c against PIL 9.4 and torchvision 0.14:
 * resize (BILINEAR, BICUBIC, NEAREST; whole images and resized_crop boxes as views),
 * CenterCrop-style padded crops, flips, rotations by any angle (through each of PIL's paths)
 * and ImgRotatePil's angles, convert("L"), rgb_to_grayscale(3) and ToTensor+Normalize, all
 * compared for exact equality with the outputs that
 * tests/golden/make_img_resample_fixtures.py saved from real photos. Every fixture case runs
 * twice, with the AVX2 kernels and with the portable ones, and random images check that both
 * paths agree beyond the fixtures. A few invariants (identity resize, flip twice, four
 * quarter turns) need no fixtures.
 *
 * Inputs are copied into a larger parent image and used through a view, so that every kernel
 * also sees a stride wider than its rows.
 */
#include "augment/img.h"
#include "npy.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* resample.c's test hook: 0 = portable kernels, 1 = AVX2 where the CPU has it. */

/* ---- helpers ---------------------------------------------------------------------------- */

static npy_array load(const char *name)
{
    char *path = test_fixture("img_resample", name);
    npy_array a;
    char *err = NULL;
    cr_assert_eq(npy_read(path, &a, &err), 0, "%s", err);
    free(path);
    return a;
}

/* A case table: rows of int32 with `cols` columns. */
static npy_array load_table(const char *name, int cols)
{
    npy_array t = load(name);
    cr_assert(t.dtype == NPY_I4 && t.ndim == 2 && t.shape[1] == (size_t)cols, "%s: bad table",
              name);
    return t;
}

/* An image with a margin: `view` is the picture, `parent` owns the memory. */
typedef struct {
    img_u8 parent, view;
} framed;

static framed frame(int w, int h, int c)
{
    framed f;
    f.parent = img_alloc(w + 5, h + 2, c);
    img_fill(&f.parent, 0xA5);
    f.view = img_view(&f.parent, 2, 1, w, h);
    return f;
}

/* Fixture `name` (uint8 h x w x c) as a framed image. */
static framed load_img(const char *name)
{
    npy_array a = load(name);
    cr_assert(a.dtype == NPY_U1 && a.ndim == 3, "%s: not an h x w x c uint8 array", name);
    framed f = frame((int)a.shape[1], (int)a.shape[0], (int)a.shape[2]);
    img_u8 src = {.px = a.data, .w = (int)a.shape[1], .h = (int)a.shape[0],
                  .c = (int)a.shape[2], .stride = a.shape[1] * a.shape[2]};
    img_copy(&src, &f.view);
    npy_close(&a);
    return f;
}

static framed load_input(int i)
{
    char name[32];
    snprintf(name, sizeof name, "in_%d.npy", i);
    return load_img(name);
}

/* Number of bytes where `got` differs from fixture `name`; the first difference is logged. */
static int diff_fixture(const img_u8 *got, const char *name, const char *what)
{
    npy_array a = load(name);
    cr_assert(a.ndim == 3 && a.shape[0] == (size_t)got->h && a.shape[1] == (size_t)got->w &&
                  a.shape[2] == (size_t)got->c,
              "%s: fixture %s is %zux%zux%zu, result %dx%dx%d", what, name, a.shape[1],
              a.shape[0], a.shape[2], got->w, got->h, got->c);
    const uint8_t *want = a.data;
    size_t row = (size_t)got->w * got->c;
    int bad = 0;
    for (int y = 0; y < got->h; y++) {
        for (size_t i = 0; i < row; i++) {
            uint8_t g = got->px[(size_t)y * got->stride + i], w = want[(size_t)y * row + i];
            if (g != w && bad++ == 0)
                cr_log_error("%s: first difference at x %zu y %d ch %zu: %u, PIL %u", what,
                             i / got->c, y, i % got->c, g, w);
        }
    }
    npy_close(&a);
    return bad;
}

/* Fill with reproducible noise (xorshift), the margin included. */
static void noise(img_u8 *im, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1;
    for (int y = 0; y < im->h; y++)
        for (size_t i = 0; i < (size_t)im->w * im->c; i++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            im->px[(size_t)y * im->stride + i] = (uint8_t)(s >> 7);
        }
}

static bool same_pixels(const img_u8 *a, const img_u8 *b)
{
    if (a->w != b->w || a->h != b->h || a->c != b->c)
        return false;
    for (int y = 0; y < a->h; y++)
        if (memcmp(a->px + (size_t)y * a->stride, b->px + (size_t)y * b->stride,
                   (size_t)a->w * a->c))
            return false;
    return true;
}

/* The margin of a framed image still holds its fill: nothing wrote outside the view. */
static void assert_margin_intact(const framed *f, const char *what)
{
    const img_u8 *p = &f->parent;
    for (int y = 0; y < p->h; y++)
        for (int x = 0; x < p->w; x++) {
            bool inside = x >= 2 && x < 2 + f->view.w && y >= 1 && y < 1 + f->view.h;
            if (inside)
                continue;
            for (int ch = 0; ch < p->c; ch++)
                cr_assert_eq(p->px[(size_t)y * p->stride + (size_t)x * p->c + ch], 0xA5,
                             "%s: wrote outside the image at (%d,%d)", what, x - 2, y - 1);
        }
}

/* ---- resize ------------------------------------------------------------------------------- */

static int run_resize_cases(int simd)
{
    img_resample_set_simd(simd);
    npy_array t = load_table("resize.npy", 8);
    const int32_t *r = t.data;
    int failed = 0;
    for (size_t i = 0; i < t.shape[0]; i++, r += 8) {
        char in_name[32], out_name[32], what[128];
        snprintf(in_name, sizeof in_name, "in_%d.npy", r[0]);
        snprintf(out_name, sizeof out_name, "resize_%zu.npy", i);
        framed in = load_img(in_name);
        img_u8 box = img_view(&in.view, r[1], r[2], r[3], r[4]);
        framed out = frame(r[5], r[6], in.view.c);
        img_resize(&box, &out.view, (img_filter)r[7]);
        snprintf(what, sizeof what, "resize %zu (in_%d box %d,%d %dx%d -> %dx%d filter %d%s)", i,
                 r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], simd ? "" : ", portable");
        int bad = diff_fixture(&out.view, out_name, what);
        if (bad) {
            cr_log_error("%s: %d bytes differ", what, bad);
            failed++;
        }
        assert_margin_intact(&out, what);
        img_free(&in.parent);
        img_free(&out.parent);
    }
    cr_expect_geq(t.shape[0], 20);
    npy_close(&t);
    img_resample_set_simd(1);
    return failed;
}

Test(img_resample, resize_matches_pil)
{
    cr_expect_eq(run_resize_cases(1), 0, "resize cases differ from PIL");
}

Test(img_resample, resize_portable_matches_pil)
{
    cr_expect_eq(run_resize_cases(0), 0, "resize cases differ from PIL (portable kernels)");
}

Test(img_resample, resize_avx2_matches_pil)
{
    cr_expect_eq(run_resize_cases(2), 0, "resize cases differ from PIL (AVX2 kernels)");
}

/* Random images and odd sizes: the AVX2 and portable kernels give the same bytes. */
Test(img_resample, resize_simd_equals_portable)
{
    static const int sizes[][4] = {
        {500, 375, 224, 224}, {97, 71, 224, 224}, {33, 300, 17, 41}, {3, 2, 40, 31},
        {1, 9, 5, 4},         {640, 480, 7, 5},   {256, 256, 255, 257}, {120, 7, 119, 3},
    };
    for (int c = 1; c <= 3; c += 2)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (int f = 2; f <= 3; f++) {
                framed in = frame(sizes[i][0], sizes[i][1], c);
                noise(&in.view, (uint32_t)(i * 7 + (size_t)c + (size_t)f));
                framed a = frame(sizes[i][2], sizes[i][3], c);
                framed b = frame(sizes[i][2], sizes[i][3], c);
                img_resample_set_simd(1);
                img_resize(&in.view, &a.view, (img_filter)f);
                img_resample_set_simd(0);
                img_resize(&in.view, &b.view, (img_filter)f);
                img_resample_set_simd(1);
                cr_expect(same_pixels(&a.view, &b.view), "%dx%dx%d -> %dx%d filter %d differs",
                          sizes[i][0], sizes[i][1], c, sizes[i][2], sizes[i][3], f);
                assert_margin_intact(&a, "simd resize");
                img_free(&in.parent);
                img_free(&a.parent);
                img_free(&b.parent);
            }
}

Test(img_resample, resize_to_same_size_is_identity)
{
    for (int f = 0; f <= 3; f++) {
        if (f == 1)
            continue;
        framed in = frame(37, 23, 3), out = frame(37, 23, 3);
        noise(&in.view, 5);
        img_resize(&in.view, &out.view, (img_filter)f);
        cr_expect(same_pixels(&in.view, &out.view), "filter %d", f);
        img_free(&in.parent);
        img_free(&out.parent);
    }
}

/* A flat image stays flat under every filter (the weights sum to one in fixed point). */
Test(img_resample, resize_keeps_flat_images_flat)
{
    framed in = frame(61, 43, 3);
    img_fill(&in.view, 200);
    for (int f = 2; f <= 3; f++) {
        framed out = frame(224, 17, 3);
        img_resize(&in.view, &out.view, (img_filter)f);
        for (int y = 0; y < out.view.h; y++)
            for (int x = 0; x < out.view.w * 3; x++)
                cr_assert_eq(out.view.px[(size_t)y * out.view.stride + x], 200);
        img_free(&out.parent);
    }
    img_free(&in.parent);
}

/* ---- crops, flips, rotations ------------------------------------------------------------- */

Test(img_resample, crop_padded_matches_torchvision_center_crop)
{
    npy_array t = load_table("crop.npy", 5);
    const int32_t *r = t.data;
    for (size_t i = 0; i < t.shape[0]; i++, r += 5) {
        char out_name[32], what[96];
        framed in = load_input(r[0]);
        framed out = frame(r[3], r[4], in.view.c);
        img_crop_padded(&in.view, r[1], r[2], &out.view);
        snprintf(out_name, sizeof out_name, "crop_%zu.npy", i);
        snprintf(what, sizeof what, "crop %zu (in_%d at %d,%d %dx%d)", i, r[0], r[1], r[2], r[3],
                 r[4]);
        cr_expect_eq(diff_fixture(&out.view, out_name, what), 0, "%s differs", what);
        assert_margin_intact(&out, what);
        img_free(&in.parent);
        img_free(&out.parent);
    }
    npy_close(&t);
}

static void check_flips(int simd)
{
    img_resample_set_simd(simd);
    npy_array t = load_table("flip.npy", 1);
    const int32_t *r = t.data;
    for (size_t i = 0; i < t.shape[0]; i++, r++) {
        char out_name[32], what[64];
        framed im = load_input(r[0]);
        img_flip_lr(&im.view);
        snprintf(out_name, sizeof out_name, "flip_%zu.npy", i);
        snprintf(what, sizeof what, "flip of in_%d, simd %d", r[0], simd);
        cr_expect_eq(diff_fixture(&im.view, out_name, what), 0, "%s differs", what);
        assert_margin_intact(&im, what);
        img_free(&im.parent);
    }
    npy_close(&t);
    img_resample_set_simd(1);
}

Test(img_resample, flip_matches_pil)
{
    check_flips(1);
    check_flips(0);
}

Test(img_resample, flip_twice_is_identity)
{
    for (int c = 1; c <= 3; c += 2)
        for (int w = 1; w <= 24; w++) {
            framed a = frame(w, 3, c), b = frame(w, 3, c);
            noise(&a.view, (uint32_t)w);
            img_copy(&a.view, &b.view);
            img_flip_lr(&b.view);
            img_flip_lr(&b.view);
            cr_expect(same_pixels(&a.view, &b.view), "width %d, %d channels", w, c);
            img_free(&a.parent);
            img_free(&b.parent);
        }
}

/* rotate.npy: rows [input, angle, path] (float64), path being the one PIL takes (the
 * generator works it out with PIL's own arithmetic); every path must be covered. */
static const char *const rotate_path_names[4] = {"transpose/copy", "ImagingScaleAffine",
                                                  "affine_fixed", "float walk"};

static void check_rotations(int simd)
{
    img_resample_set_simd(simd);
    npy_array t = load("rotate.npy");
    cr_assert(t.dtype == NPY_F8 && t.ndim == 2 && t.shape[1] == 3, "rotate.npy: bad table");
    const double *r = t.data;
    int per_path[4] = {0}, failed = 0;
    for (size_t i = 0; i < t.shape[0]; i++, r += 3) {
        char in_name[32], out_name[32], what[160];
        int path = (int)r[2];
        cr_assert(path >= 0 && path < 4, "rotate case %zu: path %g", i, r[2]);
        per_path[path]++;
        snprintf(in_name, sizeof in_name, "in_%d.npy", (int)r[0]);
        framed in = load_img(in_name);
        framed out = frame(in.view.w, in.view.h, in.view.c);
        img_rotate(&in.view, &out.view, r[1]);
        snprintf(out_name, sizeof out_name, "rotate_%zu.npy", i);
        snprintf(what, sizeof what, "rotate %zu: in_%d (%dx%dx%d) by %.17g (%s), simd %d", i,
                 (int)r[0], in.view.w, in.view.h, in.view.c, r[1], rotate_path_names[path], simd);
        int bad = diff_fixture(&out.view, out_name, what);
        if (bad) {
            cr_log_error("%s: %d bytes differ", what, bad);
            failed++;
        }
        assert_margin_intact(&out, what);
        img_free(&in.parent);
        img_free(&out.parent);
    }
    for (int p = 0; p < 4; p++)
        cr_expect_gt(per_path[p], 0, "no rotate case takes PIL's %s path", rotate_path_names[p]);
    cr_expect_eq(failed, 0, "%d of %zu rotations differ from torchvision", failed, t.shape[0]);
    npy_close(&t);
    img_resample_set_simd(1);
}

Test(img_resample, rotate_matches_torchvision)
{
    check_rotations(1);
    check_rotations(0);
}

/* ImgRotatePil's angles: torch.linspace(0, 360, n + 1) for n = 1..40, to the bit. */
Test(img_resample, rotate_linspace_angle_matches_torch)
{
    npy_array t = load("rotate_linspace.npy");
    cr_assert(t.dtype == NPY_F8 && t.ndim == 2 && t.shape[1] == t.shape[0] + 1,
              "rotate_linspace.npy: bad table");
    const double *want = t.data;
    for (int n = 1; n <= (int)t.shape[0]; n++)
        for (int k = 0; k <= n; k++) {
            double w = want[(size_t)(n - 1) * t.shape[1] + (size_t)k];
            double got = img_rotate_linspace_angle(k, n);
            cr_expect(memcmp(&got, &w, sizeof got) == 0, "n %d k %d: %.17g, torch %.17g", n, k,
                      got, w);
        }
    npy_close(&t);
    /* the angles VISSL's RotNet setups use */
    cr_expect_eq(img_rotate_linspace_angle(1, 4), 90.0);
    cr_expect_eq(img_rotate_linspace_angle(3, 8), 135.0);
    cr_expect_eq(img_rotate_linspace_angle(1, 7), 51.42856979370117);
}

Test(img_resample, four_quarter_turns_are_identity)
{
    framed a = frame(9, 9, 3), b = frame(9, 9, 3), c = frame(9, 9, 3);
    noise(&a.view, 11);
    img_copy(&a.view, &c.view);
    for (int k = 0; k < 4; k++) {
        img_rotate(&c.view, &b.view, 90);
        cr_expect(k == 3 || !same_pixels(&a.view, &b.view), "%d quarter turns are identity",
                  k + 1);
        img_copy(&b.view, &c.view);
    }
    cr_expect(same_pixels(&a.view, &c.view), "four quarter turns are not identity");
    /* angles are taken modulo 360 */
    img_rotate(&a.view, &b.view, -90);
    img_rotate(&a.view, &c.view, 270);
    cr_expect(same_pixels(&b.view, &c.view), "-90 differs from 270");
    img_rotate(&a.view, &b.view, 450);
    img_rotate(&a.view, &c.view, 90);
    cr_expect(same_pixels(&b.view, &c.view), "450 differs from 90");
    img_free(&a.parent);
    img_free(&b.parent);
    img_free(&c.parent);
}

/* Flips, rotations and grayscale of random images of every small width: the AVX2 and the
 * portable kernels agree, through the SIMD steps and their tails. */
Test(img_resample, pixel_ops_simd_equal_portable)
{
    for (int c = 1; c <= 3; c += 2)
        for (int w = 1; w <= 40; w++) {
            int h = w % 3 == 0 ? w : 7; /* square ones too, for the quarter turns */
            framed in = frame(w, h, c);
            noise(&in.view, (uint32_t)(w * 4 + c));
            framed r[2][5];
            for (int simd = 0; simd < 2; simd++) {
                img_resample_set_simd(simd);
                framed *o = r[simd];
                o[0] = frame(w, h, c); /* flip */
                img_copy(&in.view, &o[0].view);
                img_flip_lr(&o[0].view);
                for (int k = 1; k <= 3; k++) { /* 90, 180, 270 */
                    o[k] = frame(w, h, c);
                    img_rotate(&in.view, &o[k].view, 90 * k);
                }
                o[4] = frame(w, h, 1);
                if (c == 3) {
                    img_rgb_to_l(&in.view, &o[4].view);
                    img_grayscale3(&o[0].view); /* grayscale of the flipped copy */
                }
            }
            for (int k = 0; k < 5; k++) {
                cr_expect(same_pixels(&r[0][k].view, &r[1][k].view), "%dx%dx%d: op %d differs", w,
                          h, c, k);
                assert_margin_intact(&r[1][k], "simd pixel op");
                img_free(&r[0][k].parent);
                img_free(&r[1][k].parent);
            }
            img_free(&in.parent);
        }
    img_resample_set_simd(1);
}

/* ---- grayscale, float -------------------------------------------------------------------- */

static void check_grayscale(int simd)
{
    img_resample_set_simd(simd);
    npy_array t = load_table("gray.npy", 1);
    const int32_t *r = t.data;
    for (size_t i = 0; i < t.shape[0]; i++, r++) {
        char name[32], what[64];
        framed in = load_input(r[0]);
        framed l = frame(in.view.w, in.view.h, 1);
        img_rgb_to_l(&in.view, &l.view);
        snprintf(name, sizeof name, "gray_%zu.npy", i);
        snprintf(what, sizeof what, "convert L of in_%d, simd %d", r[0], simd);
        cr_expect_eq(diff_fixture(&l.view, name, what), 0, "%s differs", what);
        assert_margin_intact(&l, what);
        img_grayscale3(&in.view);
        snprintf(name, sizeof name, "gray3_%zu.npy", i);
        snprintf(what, sizeof what, "grayscale3 of in_%d, simd %d", r[0], simd);
        cr_expect_eq(diff_fixture(&in.view, name, what), 0, "%s differs", what);
        assert_margin_intact(&in, what);
        img_free(&in.parent);
        img_free(&l.parent);
    }
    npy_close(&t);
    img_resample_set_simd(1);
}

Test(img_resample, grayscale_matches_pil_convert_l)
{
    check_grayscale(1);
    check_grayscale(0);
}

Test(img_resample, to_float_chw_matches_torchvision_bit_for_bit)
{
    npy_array t = load_table("tofloat.npy", 1);
    const int32_t *r = t.data;
    for (size_t i = 0; i < t.shape[0]; i++, r++) {
        char name[48];
        framed in = load_input(r[0]);
        snprintf(name, sizeof name, "tofloat_mean_%zu.npy", i);
        npy_array mean = load(name);
        snprintf(name, sizeof name, "tofloat_std_%zu.npy", i);
        npy_array std = load(name);
        snprintf(name, sizeof name, "tofloat_%zu.npy", i);
        npy_array want = load(name);
        size_t n = (size_t)in.view.w * in.view.h * in.view.c;
        cr_assert(want.dtype == NPY_F4 && want.count == n && mean.count == (size_t)in.view.c);
        float *got = xmalloc(n * sizeof(float));
        img_to_float_chw(&in.view, mean.data, std.data, got);
        size_t bad = 0;
        for (size_t j = 0; j < n; j++)
            if (memcmp(&got[j], (const float *)want.data + j, sizeof(float)) && bad++ == 0)
                cr_log_error("%s: element %zu is %.9g, torch %.9g", name, j, (double)got[j],
                             (double)((const float *)want.data)[j]);
        cr_expect_eq(bad, 0, "%s: %zu of %zu floats differ", name, bad, n);
        free(got);
        npy_close(&mean);
        npy_close(&std);
        npy_close(&want);
        img_free(&in.parent);
    }
    npy_close(&t);
}

/*
 * img.h — the pixel kernels of selfsup-augment: PIL/torchvision's image operations, exact.
 *
 * VISSL augments with PIL and torchvision; a user who trains with selfsup must get the same
 * pixels. Every function here reproduces one PIL (9.4) or torchvision (0.14) operation on
 * 8-bit images, bit for bit where PIL is integer-exact and within ±1 level elsewhere. The
 * random parameters (crop boxes, factors, radii) are drawn by the caller; these functions
 * are pure.
 *
 * An image is interleaved 8-bit, HWC, `c` = 3 (RGB) or 1 (L), rows `stride` bytes apart.
 * A view of part of an image (a crop) is the same struct with `px` moved and the parent's
 * stride, so cropping costs nothing and crop+resize is one pass (img_resize on a view is
 * exactly PIL's `img.crop(box).resize(size)`, because the filter never reads outside the
 * view, as PIL never reads outside the cropped image).
 *
 * Files: resample.c (resize, crops, flips, rotations, grayscale, to-float), color.c
 * (ImageEnhance, hue, posterize, solarize, autocontrast), blur.c (GaussianBlur, SMOOTH),
 * lab.c (OpenCV's 8-bit RGB to Lab, for ImgPil2LabTensor).
 */
#ifndef SELFSUP_AUGMENT_IMG_H
#define SELFSUP_AUGMENT_IMG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *px;   /* pixel (0,0) */
    int w, h;      /* size in pixels */
    int c;         /* channels: 3 (RGB) or 1 (L) */
    size_t stride; /* bytes from one row to the next (>= w*c) */
} img_u8;

/* ---- memory ------------------------------------------------------------------------------- */

/* A new image with stride w*c (64-byte aligned pixels). Dies on out-of-memory. */
img_u8 img_alloc(int w, int h, int c);
void img_free(img_u8 *im);
/* A view of the rectangle (x, y, w, h), which must lie inside `im`. */
img_u8 img_view(const img_u8 *im, int x, int y, int w, int h);
/* dst := src (same size and channels; strides may differ). */
void img_copy(const img_u8 *src, img_u8 *dst);
/* Every byte of `im` := v (VISSL's gray image is img_fill(.., 128)). */
void img_fill(img_u8 *im, uint8_t v);

/* ---- geometry (resample.c) ------------------------------------------------------------------ */

typedef enum { IMG_NEAREST = 0, IMG_BILINEAR = 2, IMG_BICUBIC = 3 } img_filter; /* PIL's numbers */

/* PIL's Image.resize(dst size, filter) of the whole of `src` (antialiased, separable,
 * PIL's fixed-point coefficients; a side that keeps its size is not resampled, as PIL).
 * src and dst have the same channels and must not overlap. Scratch memory is internal. */
void img_resize(const img_u8 *src, img_u8 *dst, img_filter filter);

/* PIL's img.crop((x0, y0, x0+w, y0+h)) where the box may leave the image: the outside is
 * filled with 0 (torchvision's CenterCrop pads the same way when the crop is larger). */
void img_crop_padded(const img_u8 *src, int x0, int y0, img_u8 *dst);

/* torchvision F.pad on a PIL image: `l`, `t`, `r`, `b` pixels added on each side, filled with
 * `fill` (one value per channel) for IMG_PAD_CONSTANT, or numpy.pad's edge, reflect and
 * symmetric extensions (any width: the reflections repeat). Returns a new image. */
typedef enum { IMG_PAD_CONSTANT, IMG_PAD_EDGE, IMG_PAD_REFLECT, IMG_PAD_SYMMETRIC } img_pad_mode;
img_u8 img_pad(const img_u8 *src, int l, int t, int r, int b, img_pad_mode mode, const uint8_t fill[3]);

/* In place: FLIP_LEFT_RIGHT. */
void img_flip_lr(img_u8 *im);

/* torchvision F.rotate(img, angle) on PIL (= img.rotate(angle, NEAREST, expand=False, fill 0)),
 * angle in degrees counter-clockwise, any finite value, bit-exact with PIL 9.4: the angle is
 * taken modulo 360 as Python does, 0 / 180 (and 90 / 270 on square images) are transposes,
 * any other angle samples the nearest source pixel through PIL's affine paths (fixed point,
 * or doubles for images beyond its +-32768 range). The output has the input's size; corners
 * that come from outside are 0. src and dst must be different images. */
void img_rotate(const img_u8 *src, img_u8 *dst, double angle_deg);

/* VISSL ImgRotatePil's angle for label k (0 <= k <= num_angles, num_angles >= 1):
 * torch.linspace(0, 360, num_angles + 1)[k] as PyTorch 1.13 computes it on x86-64 (float32,
 * its default dtype; ImgRotatePil uses torch's linspace, not numpy's), widened to double as
 * .tolist() does. E.g. 7 angles give 51.42856979370117, not 51.42857142857143. */
double img_rotate_linspace_angle(int k, int num_angles);

/* Which code paths run where several give the same bytes; chosen once from the CPU unless a
 * test forces one (to check every path against the same fixtures):
 *   img_resample_set_simd: 0 portable, 1 the best the CPU has, 2 AVX2 at most;
 *   img_blur_set_simd:     0 portable, 1 AVX2 at most, 2 the best the CPU has;
 *   img_color_set_simd:    0 portable, 1 the best the CPU has (AVX-512 with or without VBMI,
 *                          or portable), 2 AVX-512 without VBMI at most. */
int img_resample_set_simd(int on);
int img_blur_set_simd(int level);
int img_color_set_simd(int on);
/* Whether the vector hsv2rgb of adjust_hue gives PIL's bytes for all 2^24 (hue, saturation,
 * value) bytes (a unit test runs it: 16.7 M pixels are too many to check at every start);
 * -1 where this CPU has no vector hsv2rgb. */
int img_color_hsv_exhaustive_ok(void);

/* PIL convert("L") of an RGB image (ITU-R 601-2 luma, PIL's integer rounding): dst has c = 1. */
void img_rgb_to_l(const img_u8 *src, img_u8 *dst);
/* torchvision rgb_to_grayscale(img, num_output_channels=3): L replicated into R, G, B. In place. */
void img_grayscale3(img_u8 *im);

/* ToTensor then Normalize: out[ch][y][x] = (px/255 - mean[ch]) / std[ch] in float32, computed
 * as torchvision does (divide by 255, subtract, divide), CHW planar. mean = {0,..}, std = {1,..}
 * gives plain ToTensor. `out` holds c*h*w floats. */
void img_to_float_chw(const img_u8 *im, const float *mean, const float *std, float *out);
/* The same with the divisor of a pending normalisation (sample.h's `normalize` rows): 255 for
 * ToTensor (img_to_float_chw), 1 for ImgPilToRawTensor (bytes as floats, then Normalize). */
void img_normalize_chw(const img_u8 *im, float div, const float *mean, const float *std, float *out);

/* ---- colour (color.c): each is the PIL / torchvision function named --------------------- */

void img_adjust_brightness(img_u8 *im, double factor); /* ImageEnhance.Brightness(im).enhance */
void img_adjust_contrast(img_u8 *im, double factor);   /* ImageEnhance.Contrast */
void img_adjust_saturation(img_u8 *im, double factor); /* ImageEnhance.Color */
void img_adjust_sharpness(img_u8 *im, double factor);  /* ImageEnhance.Sharpness */
void img_adjust_hue(img_u8 *im, double hue_factor);    /* torchvision F.adjust_hue, PIL path */
void img_posterize(img_u8 *im, int bits);              /* ImageOps.posterize, bits 0..8 */
void img_solarize(img_u8 *im, int threshold);          /* ImageOps.solarize: v >= t -> 255 - v (any t) */
void img_autocontrast(img_u8 *im);                     /* ImageOps.autocontrast(cutoff=0) */

/* OpenCV 4.6 cvtColor(COLOR_RGB2Lab) on 8-bit data (= VISSL's BGR bytes with COLOR_BGR2LAB),
 * bit for bit (lab.c): dst (c = 3, src's size) gets L, a, b bytes; src may be dst. */
void img_rgb_to_lab(const img_u8 *src, img_u8 *dst);

/* ---- filters (blur.c) --------------------------------------------------------------------- */

/* im.filter(ImageFilter.GaussianBlur(radius)): PIL's extended box blur, 3 passes. In place.
 * radius in [0, IMG_BLUR_RADIUS_MAX]: beyond it PIL's float and 8.24 arithmetic overflows. */
#define IMG_BLUR_RADIUS_MAX 1000.0
void img_gaussian_blur(img_u8 *im, double radius);

#endif

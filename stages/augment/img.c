/*
 * img.c — memory for img_u8 images: allocation, views, copies. The pixel kernels live in
 * resample.c, color.c and blur.c (see img.h).
 */
#include "augment/img.h"

#include "log.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

img_u8 img_alloc(int w, int h, int c)
{
    if (w <= 0 || h <= 0 || (c != 1 && c != 3))
        die(EXIT_RUNTIME, "img_alloc: bad image size %dx%dx%d", w, h, c);
    size_t stride = (size_t)w * (size_t)c;
    size_t bytes = stride * (size_t)h;
    /* aligned_alloc wants a multiple of the alignment; round up (and never ask for 0). */
    void *px = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!px)
        die(EXIT_RUNTIME, "img_alloc: out of memory for a %dx%dx%d image", w, h, c);
    return (img_u8){.px = px, .w = w, .h = h, .c = c, .stride = stride};
}

void img_free(img_u8 *im)
{
    free(im->px);
    *im = (img_u8){0};
}

img_u8 img_view(const img_u8 *im, int x, int y, int w, int h)
{
    if (x < 0 || y < 0 || w <= 0 || h <= 0 || x + w > im->w || y + h > im->h)
        invariant_failed("img_view: (%d,%d %dx%d) is not inside a %dx%d image", x, y, w, h, im->w, im->h);
    return (img_u8){.px = im->px + (size_t)y * im->stride + (size_t)x * (size_t)im->c,
                    .w = w, .h = h, .c = im->c, .stride = im->stride};
}

void img_copy(const img_u8 *src, img_u8 *dst)
{
    if (src->w != dst->w || src->h != dst->h || src->c != dst->c)
        invariant_failed("img_copy: %dx%dx%d into %dx%dx%d", src->w, src->h, src->c, dst->w, dst->h, dst->c);
    size_t row = (size_t)src->w * (size_t)src->c;
    for (int y = 0; y < src->h; y++)
        memcpy(dst->px + (size_t)y * dst->stride, src->px + (size_t)y * src->stride, row);
}

void img_fill(img_u8 *im, uint8_t v)
{
    size_t row = (size_t)im->w * (size_t)im->c;
    for (int y = 0; y < im->h; y++)
        memset(im->px + (size_t)y * im->stride, v, row);
}

void img_normalize_chw(const img_u8 *im, float div, const float *mean, const float *std, float *out)
{
    if (div == 255.0f) {
        img_to_float_chw(im, mean, std, out);
        return;
    }
    size_t plane = (size_t)im->w * (size_t)im->h;
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++)
            for (int c = 0; c < im->c; c++)
                out[(size_t)c * plane + (size_t)y * (size_t)im->w + (size_t)x] =
                    ((float)im->px[(size_t)y * im->stride + (size_t)x * (size_t)im->c + (size_t)c] / div - mean[c]) /
                    std[c];
}

/* ---- padding (torchvision F.pad) ---------------------------------------------------------- */

/* The source index that output index i (i < 0 or i >= n: outside) reads, numpy.pad's way. */
static int pad_index(int i, int n, img_pad_mode mode)
{
    if (i >= 0 && i < n)
        return i;
    if (mode == IMG_PAD_EDGE || n == 1)
        return i < 0 ? 0 : n - 1;
    if (mode == IMG_PAD_REFLECT) { /* ... 2 1 | 0 1 2 ... n-1 | n-2 ...: period 2(n-1) */
        int period = 2 * (n - 1), k = ((i % period) + period) % period;
        return k < n ? k : period - k;
    }
    /* IMG_PAD_SYMMETRIC: ... 1 0 | 0 1 ... n-1 | n-1 ...: period 2n */
    int period = 2 * n, k = ((i % period) + period) % period;
    return k < n ? k : period - 1 - k;
}

img_u8 img_pad(const img_u8 *src, int l, int t, int r, int b, img_pad_mode mode, const uint8_t fill[3])
{
    if (l < 0 || t < 0 || r < 0 || b < 0)
        invariant_failed("img_pad: negative padding %d %d %d %d", l, t, r, b);
    img_u8 out = img_alloc(src->w + l + r, src->h + t + b, src->c);
    const size_t c = (size_t)src->c;
    for (int y = 0; y < out.h; y++) {
        uint8_t *o = out.px + (size_t)y * out.stride;
        bool outside_y = y < t || y >= t + src->h;
        if (mode == IMG_PAD_CONSTANT && outside_y) {
            for (int x = 0; x < out.w; x++)
                memcpy(o + (size_t)x * c, fill, c);
            continue;
        }
        const uint8_t *row = src->px + (size_t)pad_index(y - t, src->h, mode) * src->stride;
        for (int x = 0; x < out.w; x++) {
            bool outside_x = x < l || x >= l + src->w;
            const uint8_t *px = mode == IMG_PAD_CONSTANT && outside_x ? fill
                                                                      : row + (size_t)pad_index(x - l, src->w, mode) * c;
            memcpy(o + (size_t)x * c, px, c);
        }
    }
    return out;
}

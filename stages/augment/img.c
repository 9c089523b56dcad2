/*
 * img.c — memory for img_u8 images: allocation, views, copies. The pixel kernels live in
 * resample.c, color.c and blur.c (see img.h).
 */
#include "augment/img.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>

img_u8 img_alloc(int w, int h, int c)
{
    if (w <= 0 || h <= 0 || (c != 1 && c != 3))
        die(1, "img_alloc: bad image size %dx%dx%d", w, h, c);
    size_t stride = (size_t)w * (size_t)c;
    size_t bytes = stride * (size_t)h;
    /* aligned_alloc wants a multiple of the alignment; round up (and never ask for 0). */
    void *px = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!px)
        die(1, "img_alloc: out of memory for a %dx%dx%d image", w, h, c);
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
        die(1, "img_view: (%d,%d %dx%d) is not inside a %dx%d image", x, y, w, h, im->w, im->h);
    return (img_u8){.px = im->px + (size_t)y * im->stride + (size_t)x * (size_t)im->c,
                    .w = w, .h = h, .c = im->c, .stride = im->stride};
}

void img_copy(const img_u8 *src, img_u8 *dst)
{
    if (src->w != dst->w || src->h != dst->h || src->c != dst->c)
        die(1, "img_copy: %dx%dx%d into %dx%dx%d", src->w, src->h, src->c, dst->w, dst->h, dst->c);
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

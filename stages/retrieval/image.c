/*
 * image.c — one retrieval image as InstanceRetrievalImageLoader prepares it: PIL's open and
 * convert("RGB") (the decode stage's decoder, PIL-exact), the longer side resized to S with
 * PIL's bilinear filter at sizes np.round(hw · S / max(hw)) (half to even), ToTensor and
 * ImageNet's Normalize (the augment stage's kernels, torchvision-exact), and for a classic
 * query the crop of the normalised tensor at np.round(roi · ratio) in float32, sliced as
 * Python slices (negative ends count from the end, ends past the size stop there).
 */
#include "augment/img.h"
#include "decode/decoder.h"
#include "log.h"
#include "retrieval/retrieval.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_MAX_BYTES ((size_t)1 << 30)

static const float IMAGENET_MEAN[3] = {0.485f, 0.456f, 0.406f};
static const float IMAGENET_STD[3] = {0.229f, 0.224f, 0.225f};

/* apply_img_transform's ratio: S / longer side, 1 for S = -1, 1024 / longer side for S = -2
 * (only above 124 pixels; the tool fails below). 0 when there is none. */
static double resize_ratio(int S, int w, int h)
{
    int longer = w > h ? w : h;
    if (S == -1)
        return 1.0;
    if (S == -2)
        return longer > 124 ? 1024.0 / longer : 0;
    return (double)S / longer;
}

/* A Python slice's bounds [a, b) on a side of n. */
static void py_slice(int a, int b, int n, int *lo, int *hi)
{
    a = a < 0 ? a + n : a;
    b = b < 0 ? b + n : b;
    *lo = a < 0 ? 0 : a > n ? n : a;
    *hi = b < 0 ? 0 : b > n ? n : b;
}

/* Keep rows y0..y1 and columns x0..x1 of the 3 × h × w tensor, in place. */
static void crop_chw(retr_image *im, int x0, int y0, int x1, int y1)
{
    int w = x1 - x0, h = y1 - y0;
    float *dst = im->chw;
    for (int c = 0; c < 3; c++)
        for (int y = y0; y < y1; y++) {
            memmove(dst, im->chw + ((size_t)c * im->h + y) * im->w + x0, (size_t)w * sizeof *dst);
            dst += w;
        }
    im->w = w;
    im->h = h;
}

static int crop_roi(retr_image *im, const float *roi, double ratio, const char *path, char **err)
{
    int r[4];
    for (int k = 0; k < 4; k++)
        r[k] = (int)nearbyintf(roi[k] * (float)ratio);
    int x0, x1, y0, y1;
    py_slice(r[0], r[2], im->w, &x0, &x1);
    py_slice(r[1], r[3], im->h, &y0, &y1);
    if (x1 <= x0 || y1 <= y0)
        return report_failure(err, "%s: the query region (%g, %g, %g, %g) is empty at this size", path, roi[0],
                              roi[1], roi[2], roi[3]);
    crop_chw(im, x0, y0, x1, y1);
    return 0;
}

/* The decoded image resized (or not) and normalised into out. */
static int prepare(const img_u8 *src, int S, bool no_resize, const char *path, retr_image *out, double *ratio,
                   char **err)
{
    *ratio = no_resize ? 1.0 : resize_ratio(S, src->w, src->h);
    if (!(*ratio > 0))
        return report_failure(err, "%s: %d × %d is too small for RESIZE_IMG -2", path, src->w, src->h);
    int w = (int)nearbyint(src->w * *ratio), h = (int)nearbyint(src->h * *ratio);
    if (w < 1 || h < 1)
        return report_failure(err, "%s: %d × %d resizes to %d × %d", path, src->w, src->h, w, h);
    img_u8 sized = *src;
    bool resized = w != src->w || h != src->h;
    if (resized) {
        sized = img_alloc(w, h, 3);
        img_resize(src, &sized, IMG_BILINEAR);
    }
    out->w = w;
    out->h = h;
    out->chw = xmalloc((size_t)3 * w * h * sizeof *out->chw);
    img_to_float_chw(&sized, IMAGENET_MEAN, IMAGENET_STD, out->chw);
    if (resized)
        img_free(&sized);
    return 0;
}

/* The file's pixels, or VISSL's gray image (224², 128) with a warning when they cannot be
 * decoded: the image keeps its place in the ranking. */
static int decode_file(const char *path, decode_ctx *ctx, img_u8 *im, bool *owned, char **err)
{
    size_t len;
    uint8_t *buf = (uint8_t *)read_regular_file(path, IMAGE_MAX_BYTES, &len, err);
    if (!buf)
        return -1;
    decode_rgb rgb;
    char why[160];
    *owned = false;
    if (decode_image(ctx, buf, len, &rgb, why, sizeof why) == 0) {
        *im = (img_u8){.px = rgb.px, .w = rgb.w, .h = rgb.h, .c = 3, .stride = rgb.stride};
    } else {
        log_warn("%s: %s; the gray image takes its place", path, why);
        *im = img_alloc(224, 224, 3);
        img_fill(im, 128);
        *owned = true;
    }
    free(buf);
    return 0;
}

int retr_image_load(decode_ctx *ctx, const char *path, int resize_s, bool no_resize, const float *roi, retr_image *out,
                    char **err)
{
    memset(out, 0, sizeof *out);
    img_u8 im;
    bool owned = false;
    double ratio = 1;
    int rc = decode_file(path, ctx, &im, &owned, err);
    if (rc == 0)
        rc = prepare(&im, resize_s, no_resize, path, out, &ratio, err);
    if (rc == 0 && roi)
        rc = crop_roi(out, roi, ratio, path, err);
    if (owned)
        img_free(&im);
    if (rc)
        retr_image_free(out);
    return rc;
}

void retr_image_free(retr_image *im)
{
    free(im->chw);
    memset(im, 0, sizeof *im);
}

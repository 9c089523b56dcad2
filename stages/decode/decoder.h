/*
 * decoder.h — one encoded image in memory to 8-bit RGB, with the pixels PIL would give.
 *
 * VISSL opens every image with PIL and calls convert("RGB"); a selfsup run must see the same
 * pixels. The format is chosen by content, as PIL does (not by file name): JPEG through
 * libjpeg-turbo with libjpeg's defaults that PIL also uses (ISLOW DCT, fancy upsampling), PNG
 * through libpng with PIL's conversions (alpha dropped, 16-bit samples cut to their high
 * byte, 16-bit grayscale clipped to 0..255 as PIL's "I" → "RGB" does, CMYK JPEGs read as
 * Adobe-inverted and converted with PIL's cmyk2rgb), WebP through libwebp's animation decoder as
 * PIL opens it (the first frame, alpha dropped), GIF through giflib (the first frame on PIL's
 * canvas, looked up in its palette: gif.c), BMP as PIL's own reader (bmp.c), TIFF's first page
 * through libtiff with PIL's unpacking of 8-bit samples (tiff.c). Anything else (PPM, 16-bit or
 * CMYK TIFF, …) is refused with a reason: the caller turns a refusal into VISSL's gray image.
 *
 * The pixel limit is PIL's decompression-bomb error (more than 2 × MAX_IMAGE_PIXELS pixels),
 * checked from the header before anything big is allocated.
 */
#ifndef SELFSUP_DECODE_DECODER_H
#define SELFSUP_DECODE_DECODER_H

#include <stddef.h>
#include <stdint.h>

/* PIL's Image.MAX_IMAGE_PIXELS; PIL refuses images above twice this. */
#define DECODE_PIL_MAX_IMAGE_PIXELS 89478485ull
#define DECODE_DEFAULT_MAX_PIXELS (2 * DECODE_PIL_MAX_IMAGE_PIXELS)

typedef struct {
    uint64_t max_pixels; /* refuse images with more pixels (0: DECODE_DEFAULT_MAX_PIXELS) */
    int limit_scans;     /* refuse progressive JPEGs with absurd scan counts (for fuzzing) */
    /* DCT-domain downscaling, off at 0: decode JPEGs at 1/2, 1/4 or 1/8 of their size, the
     * smallest that keeps both sides at least this long — PIL's Image.draft("RGB", (m, m)).
     * Much faster for big photos, but the pixels are not those of a full decode. */
    int dct_min_side;
} decode_options;

/* An RGB image, or the window of one that decode_image_roi was asked for: w × h pixels
 * at (x0, y0) of a full_w × full_h image, rows `stride` bytes apart. `px` is owned by the
 * decoder context and stays valid until the next decode on it. */
typedef struct {
    uint8_t *px;
    int w, h;
    size_t stride;
    int x0, y0, full_w, full_h;
} decode_rgb;

/* Which part of an image the caller needs, decided once its size is known (from the header,
 * before any pixel is decoded): box = {x0, y0, x1, y1}, x1 and y1 exclusive, arrives as the
 * whole image and may be shrunk. */
typedef void (*decode_roi_fn)(void *arg, int w, int h, int box[4]);

typedef struct decode_ctx decode_ctx;

decode_ctx *decode_ctx_new(const decode_options *opt);
void decode_ctx_free(decode_ctx *ctx);

/* Decode buf[0..len). Returns 0 with *out set, or -1 with a short reason in why[] (such as
 * "truncated JPEG" or "unsupported image format PPM"). Never aborts on bad input. */
int decode_image(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len);

/* The same, decoding only the box `roi` asks for where the format allows it (JPEGs in
 * RGB, YCbCr or grayscale: the window's pixels are those of the full decode, and the same
 * files are refused); other images come out whole, with x0 = y0 = 0. roi may be NULL. */
int decode_image_roi(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_roi_fn roi, void *roi_arg,
                     decode_rgb *out, char *why, size_t why_len);

/* The format PIL would detect from the first bytes: "JPEG", "PNG", another known name
 * ("GIF", "BMP", "TIFF", "WEBP", "PPM") or NULL when it looks like no image at all. */
const char *decode_sniff_format(const uint8_t *buf, size_t len);

#endif

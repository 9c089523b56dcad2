/*
 * decoder.c — the front of the image decoder: pick the format from the first bytes (as PIL
 * does, never from the file name), apply the pixel limit, hand over to jpeg.c, png.c, webp.c,
 * gif.c, bmp.c or tiff.c, and
 * own the scratch memory they reuse from image to image.
 */
#include "decoder_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

decode_ctx *decode_ctx_new(const decode_options *opt)
{
    decode_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    if (opt)
        ctx->opt = *opt;
    if (!ctx->opt.max_pixels)
        ctx->opt.max_pixels = DECODE_DEFAULT_MAX_PIXELS;
    return ctx;
}

void decode_ctx_free(decode_ctx *ctx)
{
    if (!ctx)
        return;
    free(ctx->rgb);
    free(ctx->tmp);
    free(ctx->row_ptrs);
    free(ctx);
}

uint8_t *decode_grow(uint8_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return *buf;
    /* Contents are not kept, so free first: the peak stays at one buffer. */
    free(*buf);
    *buf = malloc(n ? n : 1);
    *cap = *buf ? n : 0;
    return *buf;
}

bool decode_too_many_pixels(const decode_ctx *ctx, uint64_t w, uint64_t h)
{
    if (w == 0 || h == 0)
        return true;
    /* Both are below 2^32, so the product cannot overflow 64 bits. */
    return w * h > ctx->opt.max_pixels;
}

void decode_reason(char *why, size_t why_len, const char *fmt, ...)
{
    if (!why || !why_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

static bool starts_with(const uint8_t *buf, size_t len, const char *magic, size_t n)
{
    return len >= n && memcmp(buf, magic, n) == 0;
}

const char *decode_sniff_format(const uint8_t *buf, size_t len)
{
    if (starts_with(buf, len, "\xff\xd8\xff", 3))
        return "JPEG";
    if (starts_with(buf, len, "\x89PNG\r\n\x1a\n", 8))
        return "PNG";
    if (starts_with(buf, len, "GIF87a", 6) || starts_with(buf, len, "GIF89a", 6))
        return "GIF";
    if (starts_with(buf, len, "BM", 2))
        return "BMP";
    if (starts_with(buf, len, "II*\0", 4) || starts_with(buf, len, "MM\0*", 4))
        return "TIFF";
    if (len >= 12 && !memcmp(buf, "RIFF", 4) && !memcmp(buf + 8, "WEBP", 4))
        return "WEBP";
    /* PIL's PpmImagePlugin accepts "P" followed by one of these. */
    if (len >= 2 && buf[0] == 'P' && buf[1] && strchr("0123456fy", buf[1]))
        return "PPM";
    return NULL;
}

int decode_image(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len)
{
    return decode_image_roi(ctx, buf, len, NULL, NULL, out, why, why_len);
}

int decode_image_roi(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_roi_fn roi, void *roi_arg,
                     decode_rgb *out, char *why, size_t why_len)
{
    *out = (decode_rgb){0};
    if (len == 0) {
        decode_reason(why, why_len, "empty file");
        return -1;
    }
    const char *format = decode_sniff_format(buf, len);
    if (!format) {
        decode_reason(why, why_len, "not an image (unknown format)");
        return -1;
    }
    if (!strcmp(format, "JPEG"))
        return decode_jpeg(ctx, buf, len, roi, roi_arg, out, why, why_len);
    if (!strcmp(format, "PNG"))
        return decode_png(ctx, buf, len, out, why, why_len);
    if (!strcmp(format, "WEBP"))
        return decode_webp(ctx, buf, len, out, why, why_len);
    if (!strcmp(format, "GIF"))
        return decode_gif(ctx, buf, len, out, why, why_len);
    if (!strcmp(format, "BMP"))
        return decode_bmp(ctx, buf, len, out, why, why_len);
    if (!strcmp(format, "TIFF"))
        return decode_tiff(ctx, buf, len, out, why, why_len);
    decode_reason(why, why_len, "unsupported image format %s (JPEG, PNG, WebP, GIF, BMP and TIFF are decoded)", format);
    return -1;
}

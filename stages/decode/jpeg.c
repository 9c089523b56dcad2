/*
 * jpeg.c — JPEG to RGB through TurboJPEG, pixel-identical to PIL's decode + convert("RGB").
 *
 * PIL drives libjpeg(-turbo) with its defaults: the accurate integer DCT (ISLOW) and fancy
 * (smooth) chroma upsampling; TurboJPEG with TJFLAG_ACCURATEDCT and without
 * TJFLAG_FASTUPSAMPLE sets up the same decompressor, so the pixels are the same.
 * Grayscale JPEGs come out replicated to RGB, as convert("RGB") does. CMYK and YCCK JPEGs
 * are read as CMYK; PIL assumes Adobe's inverted CMYK ("CMYK;I") and converts with its
 * cmyk2rgb, reproduced here.
 *
 * libjpeg's warnings do not stop a decode and PIL ignores them too, except one: data that
 * ends early. PIL (LOAD_TRUNCATED_IMAGES = False) raises "image file is truncated", so a
 * "Premature end of JPEG file" makes the image invalid here.
 */
#include "decoder_internal.h"

#include <stdbool.h>
#include <string.h>
#include <turbojpeg.h>

/* PIL's MULDIV255: a·b/255 rounded, in integers. */
static inline int muldiv255(int a, int b)
{
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

static inline uint8_t clip8(int v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* libjpeg's CMYK samples of an Adobe JPEG are inverted; PIL un-inverts them ("CMYK;I")
 * and then applies cmyk2rgb: channel = (255 - K) - (255 - K)·C/255. */
static void cmyk_to_rgb(const uint8_t *cmyk, uint8_t *rgb, size_t pixels)
{
    for (size_t i = 0; i < pixels; i++, cmyk += 4, rgb += 3) {
        int nk = cmyk[3]; /* 255 - (255 - raw K) */
        for (int c = 0; c < 3; c++)
            rgb[c] = clip8(nk - muldiv255(255 - cmyk[c], nk));
    }
}

/* TurboJPEG 2.1 leaves a handle mid-header after an error (the next image then fails with
 * "two SOI markers"), so a failed handle is thrown away and the next image gets a new one. */
static int jpeg_failure(decode_ctx *ctx, char *why, size_t why_len, const char *what)
{
    decode_reason(why, why_len, "%s: %s", what, tjGetErrorStr2(ctx->tj));
    tjDestroy(ctx->tj);
    ctx->tj = NULL;
    return -1;
}

/* TurboJPEG 2.1 keeps the text of the first warning, or of the fatal error that ended the
 * decode; its error code says "warning" whenever a warning came first, even when a fatal
 * error followed. So the text decides: these are libjpeg's warnings (jerror.h, JWRN_*). */
static bool is_libjpeg_warning(const char *msg)
{
    static const char *const prefixes[] = {
        "Corrupt JPEG data", "Premature end of JPEG file", "Warning:", "Invalid SOS parameters",
        "Inconsistent progression", "Unknown Adobe color transform", "Application transferred",
    };
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(msg, prefixes[i], strlen(prefixes[i])))
            return true;
    return false;
}

/* Whether an EOI marker follows the last SOS marker. Neither can occur inside entropy-coded
 * data (0xFF is stuffed there), so without one the decoder ran out of data: PIL calls that
 * "image file is truncated". Catches truncation hidden behind an earlier warning. */
static bool ends_with_eoi(const uint8_t *buf, size_t len)
{
    size_t last_sos = 0;
    for (size_t i = 0; i + 1 < len; i++)
        if (buf[i] == 0xFF && buf[i + 1] == 0xDA)
            last_sos = i;
    for (size_t i = last_sos; i + 1 < len; i++)
        if (buf[i] == 0xFF && buf[i + 1] == 0xD9)
            return true;
    return false;
}

/* Decompress into dst as pixel format pf. Returns 0, or -1 with the reason set. */
static int decompress(decode_ctx *ctx, const uint8_t *buf, size_t len, uint8_t *dst, int w, int h, int pf,
                      char *why, size_t why_len)
{
    int flags = TJFLAG_ACCURATEDCT | (ctx->opt.limit_scans ? TJFLAG_LIMITSCANS : 0);
    if (tjDecompress2(ctx->tj, buf, (unsigned long)len, dst, w, 0, h, pf, flags) == 0)
        return 0;
    const char *msg = tjGetErrorStr2(ctx->tj);
    if (!is_libjpeg_warning(msg))
        return jpeg_failure(ctx, why, why_len, "corrupt JPEG");
    if (strstr(msg, "Premature end") || !ends_with_eoi(buf, len))
        return jpeg_failure(ctx, why, why_len, "truncated JPEG");
    return 0; /* libjpeg recovered from bad data; PIL keeps such images too */
}

int decode_jpeg(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len)
{
    if (!ctx->tj && !(ctx->tj = tjInitDecompress())) {
        decode_reason(why, why_len, "cannot start TurboJPEG: %s", tjGetErrorStr2(NULL));
        return -1;
    }
    int w, h, subsamp, colorspace;
    if (tjDecompressHeader3(ctx->tj, buf, (unsigned long)len, &w, &h, &subsamp, &colorspace) != 0)
        return jpeg_failure(ctx, why, why_len, "bad JPEG header");
    if (decode_too_many_pixels(ctx, (uint64_t)w, (uint64_t)h)) {
        decode_reason(why, why_len, "%dx%d pixels exceeds the limit of %llu (PIL's decompression bomb error)", w,
                      h, (unsigned long long)ctx->opt.max_pixels);
        return -1;
    }
    size_t pixels = (size_t)w * (size_t)h;
    if (!decode_grow(&ctx->rgb, &ctx->rgb_cap, pixels * 3)) {
        decode_reason(why, why_len, "out of memory for %dx%d pixels", w, h);
        return -1;
    }
    if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
        if (!decode_grow(&ctx->tmp, &ctx->tmp_cap, pixels * 4)) {
            decode_reason(why, why_len, "out of memory for %dx%d CMYK pixels", w, h);
            return -1;
        }
        if (decompress(ctx, buf, len, ctx->tmp, w, h, TJPF_CMYK, why, why_len) != 0)
            return -1;
        cmyk_to_rgb(ctx->tmp, ctx->rgb, pixels);
    } else if (decompress(ctx, buf, len, ctx->rgb, w, h, TJPF_RGB, why, why_len) != 0) {
        return -1;
    }
    *out = (decode_rgb){.px = ctx->rgb, .w = w, .h = h};
    return 0;
}

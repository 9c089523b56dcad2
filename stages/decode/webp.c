/*
 * webp.c — WebP to RGB through libwebp, as PIL's WebPImagePlugin + convert("RGB") would do it.
 *
 * PIL 9.4 (built with libwebp's animation API, as Debian's is) opens every WebP, still or
 * animated, with WebPAnimDecoder at its default options (RGBA, not premultiplied) and reads the
 * first frame of the canvas; convert("RGB") then drops the alpha (or the unused X byte) without
 * compositing. The same calls here give the same bytes: the first frame's R, G and B. The
 * canvas size is checked against the pixel limit before libwebp allocates the canvas.
 */
#include "decoder_internal.h"

#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>
#include <webp/demux.h>

int decode_webp(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len)
{
    /* the size first: WebPAnimDecoderNew allocates the whole canvas */
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(buf, len, &f) != VP8_STATUS_OK) {
        decode_reason(why, why_len, "corrupt WebP (no header)");
        return -1;
    }
    if (decode_too_many_pixels(ctx, (uint64_t)f.width, (uint64_t)f.height)) {
        decode_reason(why, why_len, "WebP of %dx%d pixels is over the limit", f.width, f.height);
        return -1;
    }
    WebPData data = {buf, len};
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, NULL);
    if (!dec) {
        decode_reason(why, why_len, "corrupt WebP (libwebp cannot parse it)");
        return -1;
    }
    WebPAnimInfo info;
    int rc = -1;
    uint8_t *rgba = NULL;
    int timestamp = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info))
        decode_reason(why, why_len, "corrupt WebP (no canvas)");
    else if (decode_too_many_pixels(ctx, info.canvas_width, info.canvas_height))
        decode_reason(why, why_len, "WebP of %ux%u pixels is over the limit", info.canvas_width, info.canvas_height);
    else if (!WebPAnimDecoderGetNext(dec, &rgba, &timestamp))
        decode_reason(why, why_len, "corrupt WebP (its first frame does not decode)");
    else
        rc = 0;
    size_t pixels = (size_t)info.canvas_width * info.canvas_height;
    if (rc == 0 && !decode_grow(&ctx->rgb, &ctx->rgb_cap, pixels * 3)) {
        decode_reason(why, why_len, "out of memory for a %ux%u WebP", info.canvas_width, info.canvas_height);
        rc = -1;
    }
    if (rc == 0) {
        for (size_t i = 0; i < pixels; i++)
            memcpy(ctx->rgb + 3 * i, rgba + 4 * i, 3);
        *out = (decode_rgb){.px = ctx->rgb, .w = (int)info.canvas_width, .h = (int)info.canvas_height,
                            .stride = (size_t)info.canvas_width * 3, .full_w = (int)info.canvas_width,
                            .full_h = (int)info.canvas_height};
    }
    WebPAnimDecoderDelete(dec); /* frees rgba */
    return rc;
}

/*
 * gif.c — a GIF's first frame to RGB through giflib, as PIL's GifImagePlugin + convert("RGB")
 * would do it (PIL 9.4, its default loading strategy).
 *
 * What PIL makes of the first frame:
 *   - the image is the logical screen, grown to hold the frame when the frame reaches past it;
 *   - outside the frame every pixel is the frame's transparent index when its graphic control
 *     extension names one, else index 0;
 *   - inside it, the frame's indices (interlaced rows put back in order); the transparent index
 *     is written like any other;
 *   - convert("RGB") looks each index up in the frame's palette (its local one, else the
 *     global one), transparency ignored; an index past the palette's end, or any index when
 *     there is no palette, gives (i, i, i): PIL's palettes start as that gray ramp (a palette
 *     that is exactly the ramp makes PIL open the frame as "L", which comes to the same).
 * giflib reads the container and the LZW data; a truncated or corrupt first frame is refused,
 * as PIL refuses it (its "image file is truncated"). Later frames are never read.
 */
#include "decoder_internal.h"

#include <gif_lib.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *buf;
    size_t len, pos;
} gif_reader;

static const char *gif_error(int e)
{
    const char *s = GifErrorString(e);
    return s ? s : "unknown error";
}

static int read_bytes(GifFileType *g, GifByteType *dst, int n)
{
    gif_reader *r = g->UserData;
    size_t k = (size_t)n < r->len - r->pos ? (size_t)n : r->len - r->pos;
    memcpy(dst, r->buf + r->pos, k);
    r->pos += k;
    return (int)k;
}

/* The first frame's graphic control extension's transparent index, or -1, and the frame's
 * descriptor: records are read up to the first image. false when there is none. */
static bool find_first_frame(GifFileType *g, int *transparent)
{
    *transparent = -1;
    for (;;) {
        GifRecordType type;
        if (DGifGetRecordType(g, &type) != GIF_OK)
            return false;
        if (type == IMAGE_DESC_RECORD_TYPE)
            return DGifGetImageDesc(g) == GIF_OK;
        if (type == TERMINATE_RECORD_TYPE)
            return false;
        if (type != EXTENSION_RECORD_TYPE)
            continue;
        int code;
        GifByteType *ext;
        if (DGifGetExtension(g, &code, &ext) != GIF_OK)
            return false;
        if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4 && (ext[1] & 1))
            *transparent = ext[4]; /* a later one with the flag overrides, as in PIL */
        while (ext)
            if (DGifGetExtensionNext(g, &ext) != GIF_OK)
                return false;
    }
}

/* The frame's rows into idx (w × h), in image order whatever the interlacing. */
static bool read_frame(GifFileType *g, uint8_t *idx, int w, int h)
{
    static const int START[4] = {0, 4, 2, 1}, STEP[4] = {8, 8, 4, 2};
    if (!g->Image.Interlace) {
        for (int y = 0; y < h; y++)
            if (DGifGetLine(g, idx + (size_t)y * (size_t)w, w) != GIF_OK)
                return false;
        return true;
    }
    for (int pass = 0; pass < 4; pass++)
        for (int y = START[pass]; y < h; y += STEP[pass])
            if (DGifGetLine(g, idx + (size_t)y * (size_t)w, w) != GIF_OK)
                return false;
    return true;
}

/* Palette lookup of every index of the W × H canvas into ctx->rgb. */
static void to_rgb(const uint8_t *canvas, size_t pixels, const ColorMapObject *map, uint8_t *rgb)
{
    uint8_t table[256][3];
    for (int i = 0; i < 256; i++) {
        bool listed = map && i < map->ColorCount;
        table[i][0] = listed ? map->Colors[i].Red : (uint8_t)i;
        table[i][1] = listed ? map->Colors[i].Green : (uint8_t)i;
        table[i][2] = listed ? map->Colors[i].Blue : (uint8_t)i;
    }
    for (size_t p = 0; p < pixels; p++)
        memcpy(rgb + 3 * p, table[canvas[p]], 3);
}

/* The canvas: the screen grown to the frame, the background index, the frame pasted in. */
static int paint(decode_ctx *ctx, GifFileType *g, int transparent, decode_rgb *out, char *why, size_t why_len)
{
    const GifImageDesc *d = &g->Image;
    int x1 = d->Left + d->Width, y1 = d->Top + d->Height;
    int W = g->SWidth > x1 ? g->SWidth : x1, H = g->SHeight > y1 ? g->SHeight : y1;
    if (decode_too_many_pixels(ctx, (uint64_t)W, (uint64_t)H) || d->Width <= 0 || d->Height <= 0) {
        decode_reason(why, why_len, "GIF of %dx%d pixels (frame %dx%d) is empty or over the limit", W, H, d->Width,
                      d->Height);
        return -1;
    }
    size_t pixels = (size_t)W * (size_t)H;
    uint8_t *canvas = malloc(pixels), *frame = malloc((size_t)d->Width * (size_t)d->Height);
    int rc = -1;
    if (!canvas || !frame || !decode_grow(&ctx->rgb, &ctx->rgb_cap, pixels * 3)) {
        decode_reason(why, why_len, "out of memory for a %dx%d GIF", W, H);
    } else if (!read_frame(g, frame, d->Width, d->Height)) {
        decode_reason(why, why_len, "truncated or corrupt GIF (%s)", gif_error(g->Error));
    } else {
        memset(canvas, transparent >= 0 ? transparent : 0, pixels);
        for (int y = 0; y < d->Height; y++)
            memcpy(canvas + (size_t)(d->Top + y) * (size_t)W + (size_t)d->Left, frame + (size_t)y * (size_t)d->Width,
                   (size_t)d->Width);
        to_rgb(canvas, pixels, d->ColorMap ? d->ColorMap : g->SColorMap, ctx->rgb);
        *out = (decode_rgb){.px = ctx->rgb, .w = W, .h = H, .stride = (size_t)W * 3, .full_w = W, .full_h = H};
        rc = 0;
    }
    free(canvas), free(frame);
    return rc;
}

int decode_gif(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len)
{
    gif_reader r = {.buf = buf, .len = len};
    int err = 0, transparent;
    GifFileType *g = DGifOpen(&r, read_bytes, &err);
    if (!g) {
        decode_reason(why, why_len, "corrupt GIF (%s)", gif_error(err));
        return -1;
    }
    int rc = -1;
    if (!find_first_frame(g, &transparent))
        decode_reason(why, why_len, "GIF without a readable frame (%s)", gif_error(g->Error));
    else
        rc = paint(ctx, g, transparent, out, why, why_len);
    DGifCloseFile(g, &err);
    return rc;
}

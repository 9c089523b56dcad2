/*
 * tiff.c — a TIFF's first page to RGB through libtiff, as PIL 9.4's TiffImagePlugin +
 * convert("RGB") would do it, for the layouts datasets hold: 8-bit samples (and 1-bit gray),
 * one plane of interleaved samples, stripped or tiled, under any compression libtiff decodes.
 *
 * libtiff undoes the compression and the predictor (TIFFReadEncodedStrip / Tile, the raw samples
 * PIL's libtiff decoder gets too); the samples are then unpacked as PIL's rawmodes do:
 *   gray, 1 or 8 bits     "1"/"L", or "1;I"/"L;I" (255 − v) for min-is-white
 *   gray + alpha          "LA": the alpha dropped
 *   RGB, RGB + extras     RGB kept; an extra sample that is associated alpha ("RGBa") is
 *                         divided out first as PIL's unpacker does (v·255/a, 0 where a is 0);
 *                         unassociated alpha and unspecified extras are dropped
 *   palette, 1/2/4/8 bits the colour map's 16-bit entries cut to their high byte (PIL's b // 256)
 * Refused, as not what PIL reads the same way or not 8-bit: 16-bit and float samples, separate
 * planes, bit order 2, YCbCr, CMYK, Lab and the other photometric interpretations. libtiff's
 * messages go to the reason, never to stderr.
 */
#include "decoder_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

typedef enum { T_GRAY, T_GRAY_ALPHA, T_RGB, T_PALETTE } tiff_kind;

typedef struct {
    const uint8_t *buf;
    size_t len, pos;
    char *why;
    size_t why_len;
    bool failed;
} tiff_job;

typedef struct {
    uint32_t w, h;
    uint16_t bits, spp, photometric, extra;  /* extra: the first extra sample's kind, 99 none */
    tiff_kind kind;
    bool invert, associated;
    uint8_t palette[256][3];
} tiff_layout;

/* ---- libtiff over memory ------------------------------------------------------------------ */

static tmsize_t t_read(thandle_t h, void *dst, tmsize_t n)
{
    tiff_job *j = (tiff_job *)h;
    size_t k = (size_t)n < j->len - j->pos ? (size_t)n : j->len - j->pos;
    memcpy(dst, j->buf + j->pos, k);
    j->pos += k;
    return (tmsize_t)k;
}

static tmsize_t t_write(thandle_t h, void *src, tmsize_t n) { (void)h, (void)src, (void)n; return -1; }

static toff_t t_seek(thandle_t h, toff_t off, int whence)
{
    tiff_job *j = (tiff_job *)h;
    uint64_t base = whence == SEEK_CUR ? j->pos : whence == SEEK_END ? j->len : 0;
    if (base + off > j->len)
        return (toff_t)-1;
    j->pos = (size_t)(base + off);
    return j->pos;
}

static int t_close(thandle_t h) { (void)h; return 0; }
static toff_t t_size(thandle_t h) { return ((tiff_job *)h)->len; }

/* libtiff's first error becomes the reason; warnings are dropped (PIL goes on past them). */
static int on_error(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)t, (void)module;
    tiff_job *j = user;
    if (!j->failed && j->why && j->why_len) {
        int n = snprintf(j->why, j->why_len, "corrupt TIFF: ");
        if (n > 0 && (size_t)n < j->why_len)
            vsnprintf(j->why + n, j->why_len - (size_t)n, fmt, ap);
    }
    j->failed = true;
    return 1;
}

static int on_warning(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)t, (void)user, (void)module, (void)fmt, (void)ap;
    return 1;
}

/* ---- the layout ----------------------------------------------------------------------------- */

static int refuse(tiff_job *j, const char *what)
{
    decode_reason(j->why, j->why_len, "unsupported TIFF (%s)", what);
    return -1;
}

static int read_palette(TIFF *t, tiff_layout *L, tiff_job *j)
{
    uint16_t *r, *g, *b;
    if (!TIFFGetField(t, TIFFTAG_COLORMAP, &r, &g, &b))
        return refuse(j, "a palette image without a colour map");
    for (int i = 0; i < 256; i++)
        L->palette[i][0] = L->palette[i][1] = L->palette[i][2] = (uint8_t)i;
    for (uint32_t i = 0; i < (1u << L->bits); i++)
        L->palette[i][0] = (uint8_t)(r[i] >> 8), L->palette[i][1] = (uint8_t)(g[i] >> 8), L->palette[i][2] = (uint8_t)(b[i] >> 8);
    return 0;
}

static int read_layout(TIFF *t, tiff_layout *L, tiff_job *j)
{
    uint16_t planar = PLANARCONFIG_CONTIG, fill = FILLORDER_MSB2LSB, format = SAMPLEFORMAT_UINT, n_extra = 0;
    uint16_t *extra = NULL;
    TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &L->w);
    TIFFGetField(t, TIFFTAG_IMAGELENGTH, &L->h);
    TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &L->bits);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &L->spp);
    TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
    TIFFGetFieldDefaulted(t, TIFFTAG_FILLORDER, &fill);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &format);
    if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &L->photometric))
        return refuse(j, "no photometric interpretation");
    TIFFGetField(t, TIFFTAG_EXTRASAMPLES, &n_extra, &extra);
    L->extra = n_extra ? extra[0] : 99;
    if (planar != PLANARCONFIG_CONTIG || fill != FILLORDER_MSB2LSB || format != SAMPLEFORMAT_UINT)
        return refuse(j, "separate planes, bit order 2 or samples that are not unsigned integers");
    bool gray = L->photometric == PHOTOMETRIC_MINISBLACK || L->photometric == PHOTOMETRIC_MINISWHITE;
    L->invert = L->photometric == PHOTOMETRIC_MINISWHITE;
    if (gray && L->spp == 1 && (L->bits == 8 || L->bits == 1))
        return L->kind = T_GRAY, 0;
    if (L->photometric == PHOTOMETRIC_MINISBLACK && L->spp == 2 && L->bits == 8 && L->extra == EXTRASAMPLE_UNASSALPHA)
        return L->kind = T_GRAY_ALPHA, 0;
    if (L->photometric == PHOTOMETRIC_RGB && L->bits == 8 && L->spp >= 3 && L->spp <= 6) {
        L->kind = T_RGB;
        L->associated = L->spp > 3 && L->extra == EXTRASAMPLE_ASSOCALPHA;
        return 0;
    }
    if (L->photometric == PHOTOMETRIC_PALETTE && L->spp == 1 &&
        (L->bits == 1 || L->bits == 2 || L->bits == 4 || L->bits == 8)) {
        L->kind = T_PALETTE;
        return read_palette(t, L, j);
    }
    char what[96];
    snprintf(what, sizeof what, "photometric %u, %u samples of %u bits", L->photometric, L->spp, L->bits);
    return refuse(j, what);
}

/* ---- the samples ------------------------------------------------------------------------------ */

/* Every row's samples, packed (rows of ceil(w·spp·bits / 8) bytes), from strips or tiles (a
 * tile is held whole, so its size is held to the pixel limit too). */
static uint8_t *read_samples(decode_ctx *ctx, TIFF *t, const tiff_layout *L, size_t row_bytes)
{
    uint8_t *img = malloc(row_bytes * L->h);
    if (!img)
        return NULL;
    if (!TIFFIsTiled(t)) {
        uint32_t per = 0;
        TIFFGetFieldDefaulted(t, TIFFTAG_ROWSPERSTRIP, &per);
        per = per && per < L->h ? per : L->h;
        for (uint32_t s = 0, y = 0; y < L->h; s++, y += per) {
            tmsize_t want = (tmsize_t)(row_bytes * (L->h - y < per ? L->h - y : per));
            if (TIFFReadEncodedStrip(t, s, img + (size_t)y * row_bytes, want) != want)
                return free(img), NULL;
        }
        return img;
    }
    uint32_t tw = 0, th = 0;
    TIFFGetField(t, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(t, TIFFTAG_TILELENGTH, &th);
    size_t tile_row = TIFFTileRowSize(t), px_bits = (size_t)L->spp * L->bits;
    bool fits = tw && th && px_bits % 8 == 0 && !decode_too_many_pixels(ctx, tw, th);
    uint8_t *tile = fits ? malloc((size_t)TIFFTileSize(t)) : NULL;
    for (uint32_t y0 = 0; tile && y0 < L->h; y0 += th)
        for (uint32_t x0 = 0; x0 < L->w; x0 += tw) {
            if (TIFFReadTile(t, tile, x0, y0, 0, 0) < 0)
                return free(tile), free(img), NULL;
            size_t cols = (L->w - x0 < tw ? L->w - x0 : tw) * px_bits / 8;
            for (uint32_t y = y0; y < L->h && y < y0 + th; y++)
                memcpy(img + (size_t)y * row_bytes + x0 * px_bits / 8, tile + (size_t)(y - y0) * tile_row, cols);
        }
    if (!tile)
        return free(img), NULL;
    free(tile);
    return img;
}

/* PIL's "RGBa" unpacking: a colour divided by its alpha, clipped. */
static uint8_t unpremultiply(uint8_t v, uint8_t a)
{
    if (!a)
        return 0;
    unsigned u = (unsigned)v * 255u / a;
    return (uint8_t)(u > 255 ? 255 : u);
}

static void unpack(const tiff_layout *L, const uint8_t *img, size_t row_bytes, uint8_t *rgb)
{
    for (uint32_t y = 0; y < L->h; y++) {
        const uint8_t *row = img + (size_t)y * row_bytes;
        for (uint32_t x = 0; x < L->w; x++, rgb += 3) {
            if (L->kind == T_RGB) {
                const uint8_t *p = row + (size_t)x * L->spp;
                for (int c = 0; c < 3; c++)
                    rgb[c] = L->associated ? unpremultiply(p[c], p[3]) : p[c];
                continue;
            }
            uint8_t v;
            if (L->bits == 8)
                v = row[(size_t)x * L->spp];
            else
                v = (uint8_t)((row[x * L->bits / 8] >> (8 - L->bits - (x * L->bits) % 8)) & ((1 << L->bits) - 1));
            if (L->kind == T_PALETTE) {
                memcpy(rgb, L->palette[v], 3);
                continue;
            }
            if (L->bits == 1)
                v = v ? 255 : 0;
            v = L->invert ? (uint8_t)(255 - v) : v;
            rgb[0] = rgb[1] = rgb[2] = v;
        }
    }
}

int decode_tiff(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len)
{
    tiff_job j = {.buf = buf, .len = len, .why = why, .why_len = why_len};
    TIFFOpenOptions *opt = TIFFOpenOptionsAlloc();
    TIFFOpenOptionsSetErrorHandlerExtR(opt, on_error, &j);
    TIFFOpenOptionsSetWarningHandlerExtR(opt, on_warning, &j);
    TIFFOpenOptionsSetMaxSingleMemAlloc(opt, (tmsize_t)ctx->opt.max_pixels * 8);
    TIFF *t = TIFFClientOpenExt("tiff", "rm", (thandle_t)&j, t_read, t_write, t_seek, t_close, t_size, NULL, NULL, opt);
    TIFFOpenOptionsFree(opt);
    if (!t) {
        if (!j.failed)
            decode_reason(why, why_len, "corrupt TIFF (no readable header)");
        return -1;
    }
    tiff_layout L = {0};
    int rc = read_layout(t, &L, &j);
    if (rc == 0 && decode_too_many_pixels(ctx, L.w, L.h)) {
        decode_reason(why, why_len, "TIFF of %ux%u pixels is empty or over the limit", L.w, L.h);
        rc = -1;
    }
    size_t row_bytes = ((size_t)L.w * L.spp * L.bits + 7) / 8;
    uint8_t *img = rc == 0 ? read_samples(ctx, t, &L, row_bytes) : NULL;
    if (rc == 0 && !img) {
        if (!j.failed)
            decode_reason(why, why_len, "truncated or corrupt TIFF (its samples do not decode)");
        rc = -1;
    }
    if (rc == 0 && !decode_grow(&ctx->rgb, &ctx->rgb_cap, (size_t)L.w * L.h * 3)) {
        decode_reason(why, why_len, "out of memory for a %ux%u TIFF", L.w, L.h);
        rc = -1;
    }
    if (rc == 0) {
        unpack(&L, img, row_bytes, ctx->rgb);
        *out = (decode_rgb){.px = ctx->rgb, .w = (int)L.w, .h = (int)L.h, .stride = (size_t)L.w * 3,
                            .full_w = (int)L.w, .full_h = (int)L.h};
    }
    free(img);
    TIFFClose(t);
    return rc;
}

/*
 * bmp.c — BMP to RGB, as PIL 9.4's BmpImagePlugin + convert("RGB") would do it. No library
 * reads BMP the way PIL does, so this is PIL's reader restated:
 *
 *   - headers of 12 (OS/2: 16-bit sizes, 3-byte palette entries), 40, 64, 108 and 124 bytes;
 *     the others are refused, as PIL refuses them. The height's top byte 0xFF marks a top-down
 *     image (PIL's test: the height is then 2^32 minus the field);
 *   - 1, 4 and 8 bits: a palette of `colors` entries (1 << bits when 0) read right after the
 *     header, looked up per pixel; an index past the palette is gray (i, i, i), as PIL's
 *     palettes start as that ramp. When the data offset points right after the header, the
 *     palette is skipped first (PIL's fix for writers that forgot it);
 *   - 16 bits: BGR;15 unless bit fields say 5-6-5; 24: BGR; 32: BGRX, or what the bit fields
 *     say among the layouts PIL knows (BGRX, XBGR, ABGR, RGBA, BGRA); alpha is dropped;
 *     5- and 6-bit channels are scaled as PIL's unpackers do, v·255/31 and v·255/63;
 *   - RLE8 and RLE4 through PIL's own run decoder, quirks included (a delta reads four bytes,
 *     an odd absolute run of RLE4 loses its last pixel, a line is padded when it ends early);
 *   - rows padded to 4 bytes; a file too short for its rows is refused (PIL: "image file is
 *     truncated").
 * Refused besides: other depths and compressions (JPEG/PNG inside a BMP), unknown bit fields,
 * palettes of more than 256 entries, and a 4-bit or 1-bit (but the 2-entry) file whose palette
 * is the gray ramp: PIL then reads it as bytes, not as packed pixels.
 */
#include "decoder_internal.h"

#include <stdlib.h>
#include <string.h>

enum { BMP_RAW = 0, BMP_RLE8 = 1, BMP_RLE4 = 2, BMP_BITFIELDS = 3 };

/* How a row's pixels are unpacked (PIL's rawmodes). */
typedef enum { UNPACK_PAL, UNPACK_BGR15, UNPACK_BGR16, UNPACK_BGR, UNPACK_4 } unpack_kind;

typedef struct {
    const uint8_t *buf;
    size_t len;
    uint32_t offset;       /* of the pixel data */
    uint32_t width, height;
    bool top_down;
    int bits;
    uint32_t compression;
    uint64_t colors;
    int pal_pad;           /* 3 or 4 bytes per palette entry */
    size_t pal_at;         /* where the palette starts */
    unpack_kind unpack;
    int order[3];          /* 4-byte pixels: the byte offsets of R, G and B */
    uint8_t palette[256][3];
} bmp_info;

static uint32_t u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint32_t u16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

/* ---- the headers --------------------------------------------------------------------------- */

/* The 32-bit layouts PIL knows, by their R, G, B, A masks: the byte offsets of R, G, B. */
static bool bitfields32(const uint32_t m[4], int order[3])
{
    static const struct {
        uint32_t m[4];
        int order[3];
    } KNOWN[] = {
        {{0xFF0000, 0xFF00, 0xFF, 0x0}, {2, 1, 0}},              /* BGRX */
        {{0xFF000000, 0xFF0000, 0xFF00, 0x0}, {3, 2, 1}},        /* XBGR */
        {{0xFF000000, 0xFF0000, 0xFF00, 0xFF}, {3, 2, 1}},       /* ABGR */
        {{0xFF, 0xFF00, 0xFF0000, 0xFF000000}, {0, 1, 2}},       /* RGBA */
        {{0xFF0000, 0xFF00, 0xFF, 0xFF000000}, {2, 1, 0}},       /* BGRA */
        {{0x0, 0x0, 0x0, 0x0}, {2, 1, 0}},                       /* BGRA */
    };
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (!memcmp(KNOWN[i].m, m, sizeof KNOWN[i].m)) {
            memcpy(order, KNOWN[i].order, sizeof KNOWN[i].order);
            return true;
        }
    return false;
}

/* The bit fields' layout for 16, 24 and 32 bits; false when PIL does not know it. */
static bool read_bitfields(bmp_info *b, const uint32_t m[4])
{
    if (b->bits == 32)
        return bitfields32(m, b->order);
    if (b->bits == 24)
        return m[0] == 0xFF0000 && m[1] == 0xFF00 && m[2] == 0xFF;
    if (b->bits == 16 && m[0] == 0xF800 && m[1] == 0x7E0 && m[2] == 0x1F)
        return b->unpack = UNPACK_BGR16, true;
    return b->bits == 16 && m[0] == 0x7C00 && m[1] == 0x3E0 && m[2] == 0x1F;
}

/* Sizes, depth, compression and where things are; -1 with a reason. */
static int read_header(bmp_info *b, char *why, size_t why_len)
{
    if (b->len < 18)
        return decode_reason(why, why_len, "truncated BMP header"), -1;
    b->offset = u32(b->buf + 10);
    uint32_t hsize = u32(b->buf + 14);
    if (hsize != 12 && hsize != 40 && hsize != 64 && hsize != 108 && hsize != 124)
        return decode_reason(why, why_len, "unsupported BMP header type (%u)", hsize), -1;
    if (b->len < 14 + (size_t)hsize)
        return decode_reason(why, why_len, "truncated BMP header"), -1;
    const uint8_t *h = b->buf + 18;
    b->pal_at = 14 + hsize;
    if (hsize == 12) {
        b->width = u16(h), b->height = u16(h + 2), b->bits = (int)u16(h + 6);
        b->compression = BMP_RAW, b->pal_pad = 3;
    } else {
        b->top_down = h[7] == 0xFF;
        b->width = u32(h), b->height = b->top_down ? (uint32_t)(0x100000000ull - u32(h + 4)) : u32(h + 4);
        b->bits = (int)u16(h + 10), b->compression = u32(h + 12), b->colors = u32(h + 28), b->pal_pad = 4;
    }
    if (!b->colors)
        b->colors = b->bits < 64 ? 1ull << b->bits : 0;
    if (b->offset == 14 + hsize && b->bits <= 8)
        b->offset += (uint32_t)(4 * b->colors);
    if (!b->offset) /* PIL: the data start where its reading stopped (after masks and palette) */
        b->offset = (uint32_t)(b->pal_at + (b->compression == BMP_BITFIELDS && hsize == 40 ? 12 : 0) +
                               (b->bits <= 8 ? (size_t)b->pal_pad * b->colors : 0));
    b->unpack = b->bits <= 8 ? UNPACK_PAL : b->bits == 16 ? UNPACK_BGR15 : b->bits == 24 ? UNPACK_BGR : UNPACK_4;
    int bgrx[3] = {2, 1, 0};
    memcpy(b->order, bgrx, sizeof bgrx);
    if (b->bits != 1 && b->bits != 4 && b->bits != 8 && b->bits != 16 && b->bits != 24 && b->bits != 32)
        return decode_reason(why, why_len, "unsupported BMP pixel depth (%d)", b->bits), -1;
    if (b->compression == BMP_BITFIELDS) {
        uint32_t m[4] = {0, 0, 0, 0};
        const uint8_t *at = hsize - 4 >= 52 ? h + 36 : b->buf + b->pal_at; /* else three masks follow */
        if (hsize - 4 < 52 && b->len < b->pal_at + 12)
            return decode_reason(why, why_len, "truncated BMP bit fields"), -1;
        for (int k = 0; k < (hsize - 4 >= 52 ? 4 : 3); k++)
            m[k] = u32(at + 4 * k);
        if (!read_bitfields(b, m))
            return decode_reason(why, why_len, "unsupported BMP bit fields layout"), -1;
    } else if (b->compression != BMP_RAW && b->compression != BMP_RLE8 && b->compression != BMP_RLE4) {
        return decode_reason(why, why_len, "unsupported BMP compression (%u)", b->compression), -1;
    }
    return 0;
}

/* The palette (bits ≤ 8), the ramp past its end; -1 for the cases PIL reads otherwise. */
static int read_palette(bmp_info *b, char *why, size_t why_len)
{
    for (int i = 0; i < 256; i++)
        b->palette[i][0] = b->palette[i][1] = b->palette[i][2] = (uint8_t)i;
    if (b->bits > 8)
        return 0;
    if (b->colors == 0 || b->colors > 256)
        return decode_reason(why, why_len, "unsupported BMP palette size (%llu)", (unsigned long long)b->colors), -1;
    size_t want = (size_t)b->colors * (size_t)b->pal_pad, have = b->pal_at < b->len ? b->len - b->pal_at : 0;
    size_t entries = (want < have ? want : have) / (size_t)b->pal_pad;
    bool gray = entries == b->colors;
    for (size_t i = 0; i < entries; i++) {
        const uint8_t *e = b->buf + b->pal_at + i * (size_t)b->pal_pad;
        uint8_t v = b->colors == 2 ? (uint8_t)(i ? 255 : 0) : (uint8_t)i;
        gray = gray && e[0] == v && e[1] == v && e[2] == v;
        b->palette[i][0] = e[2], b->palette[i][1] = e[1], b->palette[i][2] = e[0];
    }
    bool rle = b->compression == BMP_RLE8 || b->compression == BMP_RLE4;
    if (gray && b->bits < 8 && b->colors != 2 && !rle)
        return decode_reason(why, why_len, "BMP of %d bits with a gray-ramp palette (PIL reads it as bytes)", b->bits), -1;
    return 0;
}

/* ---- the pixels ------------------------------------------------------------------------------ */

static uint8_t scale5(uint32_t v) { return (uint8_t)(v * 255 / 31); }
static uint8_t scale6(uint32_t v) { return (uint8_t)(v * 255 / 63); }

/* Row `row` (w pixels, as stored) into out (RGB). */
static void unpack_row(const bmp_info *b, const uint8_t *row, uint8_t *out)
{
    for (uint32_t x = 0; x < b->width; x++, out += 3) {
        if (b->unpack == UNPACK_PAL) {
            int per = 8 / b->bits, shift = 8 - b->bits * (int)(x % (uint32_t)per + 1);
            uint8_t idx = (uint8_t)((row[x / (uint32_t)per] >> shift) & ((1 << b->bits) - 1));
            memcpy(out, b->palette[idx], 3);
        } else if (b->unpack == UNPACK_BGR15 || b->unpack == UNPACK_BGR16) {
            uint32_t p = u16(row + 2 * x);
            bool six = b->unpack == UNPACK_BGR16;
            out[0] = scale5(six ? p >> 11 & 31 : p >> 10 & 31);
            out[1] = six ? scale6(p >> 5 & 63) : scale5(p >> 5 & 31);
            out[2] = scale5(p & 31);
        } else if (b->unpack == UNPACK_BGR) {
            out[0] = row[3 * x + 2], out[1] = row[3 * x + 1], out[2] = row[3 * x];
        } else {
            const uint8_t *px = row + 4 * x;
            out[0] = px[b->order[0]], out[1] = px[b->order[1]], out[2] = px[b->order[2]];
        }
    }
}

static int decode_raw(const bmp_info *b, uint8_t *rgb, char *why, size_t why_len)
{
    size_t stride = (((size_t)b->width * (size_t)b->bits + 31) >> 3) & ~(size_t)3;
    size_t used = ((size_t)b->width * (size_t)b->bits + 7) / 8; /* the last row needs no padding */
    if (b->offset > b->len || b->len - b->offset < stride * (b->height - 1) + used)
        return decode_reason(why, why_len, "truncated BMP (image file is truncated)"), -1;
    for (uint32_t y = 0; y < b->height; y++) {
        uint32_t dst = b->top_down ? y : b->height - 1 - y;
        unpack_row(b, b->buf + b->offset + (size_t)y * stride, rgb + (size_t)dst * b->width * 3);
    }
    return 0;
}

/* PIL's BmpRleDecoder: indices in storage order into idx (w × h); false when it ends short. */
static bool run_length(const bmp_info *b, uint8_t *idx)
{
    size_t w = b->width, total = w * b->height, n = 0, at = b->offset, x = 0;
    bool rle4 = b->compression == BMP_RLE4;
    while (n < total) {
        if (at + 2 > b->len)
            break;
        uint8_t count = b->buf[at], byte = b->buf[at + 1];
        at += 2;
        if (count) { /* encoded: a run */
            size_t k = x + count > w ? (x < w ? w - x : 0) : count;
            for (size_t i = 0; i < k && n < total; i++)
                idx[n++] = rle4 ? (uint8_t)(i % 2 ? byte & 15 : byte >> 4) : byte;
            x += k;
        } else if (byte == 0) { /* end of line: pad it */
            while (n % w && n < total)
                idx[n++] = 0;
            x = 0;
        } else if (byte == 1) { /* end of bitmap */
            break;
        } else if (byte == 2) { /* delta: PIL reads two bytes, then the two it uses */
            if (at + 4 > b->len)
                return false; /* PIL: a break, or a failed unpack of the second pair */
            size_t right = b->buf[at + 2], up = b->buf[at + 3];
            at += 4;
            for (size_t i = 0; i < right + up * w && n < total; i++)
                idx[n++] = 0;
            x = n % w;
        } else { /* absolute: `byte` pixels follow */
            size_t bytes = rle4 ? byte / 2u : byte, got = bytes < b->len - at ? bytes : b->len - at;
            for (size_t i = 0; i < got; i++) {
                uint8_t v = b->buf[at + i];
                if (rle4) {
                    if (n < total)
                        idx[n++] = v >> 4;
                    if (n < total)
                        idx[n++] = v & 15;
                } else if (n < total) {
                    idx[n++] = v;
                }
            }
            at += got;
            if (got < bytes)
                break;
            x += byte;
            at += at % 2; /* word alignment */
        }
    }
    return n >= total;
}

static int decode_rle(const bmp_info *b, uint8_t *rgb, char *why, size_t why_len)
{
    uint8_t *idx = malloc((size_t)b->width * b->height);
    if (!idx)
        return decode_reason(why, why_len, "out of memory for a %ux%u BMP", b->width, b->height), -1;
    int rc = 0;
    if (!run_length(b, idx)) {
        decode_reason(why, why_len, "truncated BMP run-length data (not enough image data)");
        rc = -1;
    } else {
        for (uint32_t y = 0; y < b->height; y++) {
            uint32_t dst = b->top_down ? y : b->height - 1 - y;
            for (uint32_t x = 0; x < b->width; x++)
                memcpy(rgb + ((size_t)dst * b->width + x) * 3, b->palette[idx[(size_t)y * b->width + x]], 3);
        }
    }
    free(idx);
    return rc;
}

int decode_bmp(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len)
{
    bmp_info b = {.buf = buf, .len = len};
    if (read_header(&b, why, why_len) != 0)
        return -1;
    if (decode_too_many_pixels(ctx, b.width, b.height)) {
        decode_reason(why, why_len, "BMP of %ux%u pixels is empty or over the limit", b.width, b.height);
        return -1;
    }
    bool rle = b.compression == BMP_RLE8 || b.compression == BMP_RLE4;
    if (rle && b.bits > 8) {
        decode_reason(why, why_len, "run-length BMP of %d bits (PIL cannot read it)", b.bits);
        return -1;
    }
    if (read_palette(&b, why, why_len) != 0)
        return -1;
    size_t bytes = (size_t)b.width * b.height * 3;
    if (!decode_grow(&ctx->rgb, &ctx->rgb_cap, bytes)) {
        decode_reason(why, why_len, "out of memory for a %ux%u BMP", b.width, b.height);
        return -1;
    }
    if ((rle ? decode_rle(&b, ctx->rgb, why, why_len) : decode_raw(&b, ctx->rgb, why, why_len)) != 0)
        return -1;
    *out = (decode_rgb){.px = ctx->rgb, .w = (int)b.width, .h = (int)b.height, .stride = (size_t)b.width * 3,
                        .full_w = (int)b.width, .full_h = (int)b.height};
    return 0;
}

/*
 * decoder_internal.h — what decoder.c shares with its format back ends (jpeg.c, png.c, webp.c,
 * gif.c, bmp.c, tiff.c):
 * the context (reusable scratch buffers) and the reason formatter.
 */
#ifndef SELFSUP_DECODE_DECODER_INTERNAL_H
#define SELFSUP_DECODE_DECODER_INTERNAL_H

#include "decoder.h"

#include <stdbool.h>
#include <stddef.h>

struct decode_ctx {
    decode_options opt;
    uint8_t *rgb;        /* the output pixels */
    size_t rgb_cap;
    uint8_t *tmp;        /* CMYK or 16-bit rows before conversion */
    size_t tmp_cap;
    uint8_t *row_ptrs;   /* libjpeg's array of row pointers (bytes of JSAMPROWs) */
    size_t row_ptrs_cap;
};

/* A buffer of at least n bytes in *buf (grown, contents not kept); NULL when out of memory. */
uint8_t *decode_grow(uint8_t **buf, size_t *cap, size_t n);
/* True when w × h exceeds the pixel limit (or w or h is not positive). */
bool decode_too_many_pixels(const decode_ctx *ctx, uint64_t w, uint64_t h);
void decode_reason(char *why, size_t why_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int decode_jpeg(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_roi_fn roi, void *roi_arg, decode_rgb *out,
                char *why, size_t why_len);
int decode_png(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len);
int decode_webp(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len);
int decode_gif(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len);
int decode_bmp(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len);
int decode_tiff(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len);

#endif

/*
 * png.c — PNG to RGB through libpng, as PIL's PngImagePlugin + convert("RGB") would do it.
 *
 * PIL's conversions, and how libpng is asked for them:
 *   palette            → palette lookup, transparency ignored   png_set_palette_to_rgb
 *   gray 1/2/4 bits    → scaled to 0..255                        png_set_expand_gray_1_2_4_to_8
 *   gray, gray+alpha   → replicated to R, G, B                   png_set_gray_to_rgb
 *   any alpha, tRNS    → dropped (no compositing)                png_set_strip_alpha
 *   16-bit samples     → their high byte ("RGB;16B" unpacking)   png_set_strip_16
 *   16-bit gray        → PIL opens it as mode "I" (the 16-bit value) and "I" → "RGB" clips
 *                        to 0..255, so almost every pixel is white; done by hand below.
 * Gamma and colour chunks are ignored, as PIL ignores them. A PNG that ends after its image
 * data without IEND is fine (PIL does not read that far); one that ends inside it is not.
 * CRCs as PIL checks them: a bad CRC on any chunk before the first IDAT is an error, bad
 * IDAT CRCs are not.
 *
 * libpng reports errors by longjmp to the setjmp in read_protected(). Everything that must
 * be released lives in the png_job owned by the caller, never in locals of the function that
 * called setjmp, so an error at any point frees exactly what was allocated.
 */
#include "decoder_internal.h"

#include <png.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *buf;
    size_t len, pos;
    png_structp png;
    png_infop info;
    png_bytep *rows;
    char *why;
    size_t why_len;
} png_job;

static void read_from_memory(png_structp png, png_bytep dst, size_t n)
{
    png_job *job = png_get_io_ptr(png);
    if (n > job->len - job->pos)
        png_error(png, "truncated PNG (the file ends inside the image)");
    memcpy(dst, job->buf + job->pos, n);
    job->pos += n;
}

static void on_error(png_structp png, png_const_charp msg)
{
    png_job *job = png_get_error_ptr(png);
    decode_reason(job->why, job->why_len, "corrupt PNG: %s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png, (void)msg; /* PIL does not fail on what libpng only warns about */
}

/* The transforms that turn any PNG except 16-bit gray into 8-bit RGB. */
static void ask_for_rgb8(png_structp png, int color_type, int bit_depth)
{
    if (color_type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && bit_depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (bit_depth == 16)
        png_set_strip_16(png);
    if ((color_type & PNG_COLOR_MASK_COLOR) == 0)
        png_set_gray_to_rgb(png);
    /* Unconditionally: a palette's tRNS chunk becomes an alpha channel on expansion. */
    png_set_strip_alpha(png);
}

/* Pixels may use palette entries the PLTE chunk does not define. libpng maps them to black;
 * PIL's palette starts as a gray ramp (entry i = (i, i, i)) that PLTE overwrites only as
 * far as it goes, so the missing entries are filled in that way. */
static void pad_palette_like_pil(png_structp png, png_infop info, int bit_depth)
{
    png_colorp palette;
    int count = 0;
    if (!png_get_PLTE(png, info, &palette, &count))
        return;
    int full = 1 << bit_depth;
    if (count >= full)
        return;
    png_color padded[256];
    memcpy(padded, palette, (size_t)count * sizeof *padded);
    for (int i = count; i < full; i++)
        padded[i] = (png_color){(png_byte)i, (png_byte)i, (png_byte)i};
    png_set_PLTE(png, info, padded, full);
}

/* PIL's "I" → "RGB": the 16-bit value clipped to 0..255 and replicated. */
static void gray16_to_rgb(const uint8_t *src, uint8_t *rgb, size_t pixels)
{
    for (size_t i = 0; i < pixels; i++) {
        unsigned v = (unsigned)src[2 * i] << 8 | src[2 * i + 1];
        uint8_t g = (uint8_t)(v > 255 ? 255 : v);
        rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = g;
    }
}

static int read_protected(decode_ctx *ctx, png_job *job, decode_rgb *out)
{
    if (setjmp(png_jmpbuf(job->png)))
        return -1; /* on_error set the reason */
    png_set_read_fn(job->png, job, read_from_memory);
    /* libpng's default 1,000,000-pixel side limit is not PIL's; PIL limits the area only. */
    png_set_user_limits(job->png, 0x7fffffff, 0x7fffffff);
    /* PIL checks the CRC of every chunk before the image data, ancillary ones included... */
    png_set_crc_action(job->png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    png_read_info(job->png, job->info);
    /* ...and skips the CRCs of IDAT chunks without looking at them. */
    png_set_crc_action(job->png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
    png_uint_32 w = png_get_image_width(job->png, job->info), h = png_get_image_height(job->png, job->info);
    int color_type = png_get_color_type(job->png, job->info), bit_depth = png_get_bit_depth(job->png, job->info);
    if (decode_too_many_pixels(ctx, w, h)) {
        decode_reason(job->why, job->why_len, "%ux%u pixels exceeds the limit of %llu (PIL's decompression bomb error)",
                      (unsigned)w, (unsigned)h, (unsigned long long)ctx->opt.max_pixels);
        return -1;
    }
    bool gray16 = color_type == PNG_COLOR_TYPE_GRAY && bit_depth == 16;
    if (color_type == PNG_COLOR_TYPE_PALETTE)
        pad_palette_like_pil(job->png, job->info, bit_depth);
    if (!gray16)
        ask_for_rgb8(job->png, color_type, bit_depth);
    png_set_interlace_handling(job->png);
    png_read_update_info(job->png, job->info);
    size_t row_bytes = (size_t)w * (gray16 ? 2 : 3), pixels = (size_t)w * h;
    if (png_get_rowbytes(job->png, job->info) != row_bytes) {
        decode_reason(job->why, job->why_len, "unexpected PNG layout (color type %d, %d bits)", color_type, bit_depth);
        return -1;
    }
    uint8_t *dst = gray16 ? decode_grow(&ctx->tmp, &ctx->tmp_cap, pixels * 2) : decode_grow(&ctx->rgb, &ctx->rgb_cap, pixels * 3);
    job->rows = malloc(h * sizeof *job->rows);
    if (!dst || !job->rows || (gray16 && !decode_grow(&ctx->rgb, &ctx->rgb_cap, pixels * 3))) {
        decode_reason(job->why, job->why_len, "out of memory for %ux%u pixels", (unsigned)w, (unsigned)h);
        return -1;
    }
    for (png_uint_32 y = 0; y < h; y++)
        job->rows[y] = dst + y * row_bytes;
    png_read_image(job->png, job->rows);
    if (gray16)
        gray16_to_rgb(ctx->tmp, ctx->rgb, pixels);
    *out = (decode_rgb){.px = ctx->rgb, .w = (int)w, .h = (int)h, .stride = (size_t)w * 3, .full_w = (int)w,
                        .full_h = (int)h};
    return 0;
}

int decode_png(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_rgb *out, char *why, size_t why_len)
{
    png_job job = {.buf = buf, .len = len, .why = why, .why_len = why_len};
    job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, on_error, on_warning);
    if (job.png)
        job.info = png_create_info_struct(job.png);
    if (!job.png || !job.info) {
        png_destroy_read_struct(job.png ? &job.png : NULL, NULL, NULL);
        decode_reason(why, why_len, "out of memory starting libpng");
        return -1;
    }
    int rc = read_protected(ctx, &job, out);
    png_destroy_read_struct(&job.png, &job.info, NULL);
    free(job.rows);
    if (rc != 0)
        *out = (decode_rgb){0};
    return rc;
}

/*
 * jpeg.c — JPEG to RGB through libjpeg-turbo, pixel-identical to PIL's decode + convert("RGB").
 *
 * PIL drives libjpeg(-turbo) with its defaults: the accurate integer DCT (ISLOW) and fancy
 * (smooth) chroma upsampling; we set up the same decompressor, so the pixels are the same.
 * Grayscale JPEGs come out replicated to RGB, as convert("RGB") does. CMYK and YCCK JPEGs
 * are read as CMYK; PIL assumes Adobe's inverted CMYK ("CMYK;I") and converts with its
 * cmyk2rgb, reproduced here.
 *
 * Only part of the image (decode_image_roi): libjpeg-turbo can skip the scanlines above a
 * box (jpeg_skip_scanlines: entropy decoding only, no IDCT, upsampling or colour
 * conversion), decode only the iMCU columns across it (jpeg_crop_scanline) and stop below
 * it. The pixels inside the box are the ones a full decode gives, with one caveat handled
 * here: fancy upsampling treats the cropped columns' edges as image edges, so the column
 * on each side of the box is decoded too and then left out. This is libjpeg-turbo's own
 * libjpeg API rather than TurboJPEG's, whose 2.1 version (Debian's) has no partial decode.
 *
 * Which files are refused is the same either way. libjpeg's warnings do not stop a decode
 * and PIL ignores them too, except one: data that ends early. PIL (LOAD_TRUNCATED_IMAGES =
 * False) raises "image file is truncated", so a "Premature end of JPEG file", or no EOI
 * marker after the last scan, makes the image invalid — checked on the whole file, so a
 * decode that stops early at the bottom of a box still sees a truncation below it. Past the
 * first scan of a sequential JPEG, bad data only raises warnings (a progressive one is read
 * whole before its first row comes out), so stopping early hides no error PIL would raise.
 */
#include "decoder_internal.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

/* TurboJPEG's TJFLAG_LIMITSCANS limit, kept for the fuzzer (decode_options.limit_scans). */
#define MAX_SCANS 500

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

/* ---- libjpeg's error manager ------------------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    bool premature_end; /* JWRN_JPEG_EOF: the data ran out */
    bool limit_scans;
} jpeg_errors;

/* A fatal error: back to the setjmp in decode_protected (libjpeg must not exit()). */
static void on_error(j_common_ptr cinfo)
{
    longjmp(((jpeg_errors *)cinfo->err)->jump, 1);
}

/* Warnings (level -1) and trace messages: nothing is printed; only running out of data
 * matters. */
static void on_message(j_common_ptr cinfo, int level)
{
    jpeg_errors *e = (jpeg_errors *)cinfo->err;
    if (level < 0 && e->pub.msg_code == JWRN_JPEG_EOF)
        e->premature_end = true;
}

/* TurboJPEG's scan limit: a progressive file with thousands of tiny scans is a CPU bomb. */
static void on_progress(j_common_ptr cinfo)
{
    jpeg_errors *e = (jpeg_errors *)cinfo->err;
    if (e->limit_scans && cinfo->is_decompressor && ((j_decompress_ptr)cinfo)->input_scan_number > MAX_SCANS) {
        longjmp(e->jump, 2);
    }
}

/* Whether an EOI marker follows the scan's data, for a decode that stopped before the end of
 * its only scan. It cannot occur inside entropy-coded data (0xFF is stuffed there),
 * so without one the file ends inside the scan: PIL, reading on to the end, would call that
 * "image file is truncated". Searched from the end, where it normally is. */
static bool eoi_in(const uint8_t *from, const uint8_t *end)
{
    for (const uint8_t *p = end - 1; p > from; p--)
        if (p[0] == 0xD9 && p[-1] == 0xFF)
            return true;
    return false;
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* What one decode needs; lives in decode_jpeg's frame, and owns no memory (the buffers
 * belong to ctx), so a longjmp out of libjpeg leaks nothing. */
typedef struct {
    struct jpeg_decompress_struct cinfo;
    jpeg_errors err;
    struct jpeg_progress_mgr progress;
    bool header_read;  /* a later error is in the image data, not the header */
} jpeg_job;

/* The window of image columns to decode for box [x0, x1): one more column on each side that
 * is not the image's edge (fancy upsampling's edge effect), then libjpeg widens it to whole
 * iMCUs. Sets *xoff / *width to what libjpeg will decode. */
static void crop_columns(j_decompress_ptr cinfo, int x0, int x1, JDIMENSION *xoff, JDIMENSION *width)
{
    int W = (int)cinfo->output_width;
    *xoff = 0, *width = (JDIMENSION)W;
    if (x0 == 0 && x1 == W)
        return;
    int a = x0 > 0 ? x0 - 1 : 0, b = x1 < W ? x1 + 1 : W;
    *xoff = (JDIMENSION)a, *width = (JDIMENSION)(b - a);
    jpeg_crop_scanline(cinfo, xoff, width);
}

/* Decode rows box[1] .. box[3] of columns box[0] .. box[2] into ctx's buffer (CMYK into
 * ctx->tmp first). Called under setjmp: every failure is a longjmp. */
static void decode_rows(decode_ctx *ctx, jpeg_job *job, const int box[4], bool cmyk, decode_rgb *out)
{
    j_decompress_ptr cinfo = &job->cinfo;
    /* jpeg_crop_scanline makes output_width the cropped width */
    int full_w = (int)cinfo->output_width, full_h = (int)cinfo->output_height;
    JDIMENSION xoff, width;
    crop_columns(cinfo, box[0], box[2], &xoff, &width);
    int h = box[3] - box[1];
    size_t stride = (size_t)width * (cmyk ? 4 : 3);
    uint8_t *dst = decode_grow(cmyk ? &ctx->tmp : &ctx->rgb, cmyk ? &ctx->tmp_cap : &ctx->rgb_cap, stride * (size_t)h);
    /* malloc'd, so aligned for pointers; kept in ctx from image to image */
    JSAMPROW *rows = dst ? (JSAMPROW *)(void *)decode_grow(&ctx->row_ptrs, &ctx->row_ptrs_cap,
                                                            (size_t)h * sizeof(JSAMPROW))
                         : NULL;
    if (!rows)
        ERREXIT(cinfo, JERR_OUT_OF_MEMORY);
    for (int y = 0; y < h; y++)
        rows[y] = dst + (size_t)y * stride;
    if (box[1] > 0 && jpeg_skip_scanlines(cinfo, (JDIMENSION)box[1]) != (JDIMENSION)box[1])
        ERREXIT(cinfo, JERR_BAD_LENGTH);
    for (int y = 0; y < h;) {
        JDIMENSION got = jpeg_read_scanlines(cinfo, rows + y, (JDIMENSION)(h - y));
        if (got == 0) /* suspension cannot happen with a memory source; refuse a loop */
            ERREXIT(cinfo, JERR_BAD_LENGTH);
        y += (int)got;
    }
    /* The box in the decoded columns: skip the margin column(s) on the left. */
    size_t skip = (size_t)(box[0] - (int)xoff);
    *out = (decode_rgb){.w = box[2] - box[0], .h = h, .x0 = box[0], .y0 = box[1],
                        .full_w = full_w, .full_h = full_h};
    if (cmyk) {
        uint8_t *rgb = decode_grow(&ctx->rgb, &ctx->rgb_cap, (size_t)out->w * (size_t)h * 3);
        if (!rgb)
            ERREXIT(cinfo, JERR_OUT_OF_MEMORY);
        for (int y = 0; y < h; y++)
            cmyk_to_rgb(dst + (size_t)y * stride + 4 * skip, rgb + (size_t)y * (size_t)out->w * 3, (size_t)out->w);
        out->px = rgb, out->stride = (size_t)out->w * 3;
    } else {
        out->px = dst + 3 * skip, out->stride = stride;
    }
}

/* PIL's Image.draft("RGB", (m, m)) scale: the largest of 1/8, 1/4, 1/2 that keeps both sides
 * at least m (libjpeg rounds the sizes up), else none. */
static void set_draft_scale(j_decompress_ptr cinfo, int m)
{
    if (m <= 0)
        return;
    unsigned sw = cinfo->image_width / (unsigned)m, sh = cinfo->image_height / (unsigned)m;
    unsigned fit = sw < sh ? sw : sh, denom = 1;
    while (denom < 8 && denom * 2 <= fit)
        denom *= 2;
    cinfo->scale_num = 1;
    cinfo->scale_denom = denom;
}

/* The whole decode, with libjpeg's errors coming back here by longjmp. Returns 0, -1 (a
 * fatal libjpeg error, message in job->err), -2 (too many pixels), -3 (scan limit). */
static int decode_protected(decode_ctx *ctx, jpeg_job *job, const uint8_t *buf, size_t len, decode_roi_fn roi,
                            void *roi_arg, decode_rgb *out)
{
    j_decompress_ptr cinfo = &job->cinfo;
    int jumped = setjmp(job->err.jump);
    if (jumped)
        return jumped == 2 ? -3 : -1;
    jpeg_mem_src(cinfo, buf, (unsigned long)len);
    jpeg_read_header(cinfo, TRUE);
    job->header_read = true;
    if (decode_too_many_pixels(ctx, cinfo->image_width, cinfo->image_height))
        return -2;
    bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo->dct_method = JDCT_ISLOW;
    cinfo->do_fancy_upsampling = TRUE;
    set_draft_scale(cinfo, ctx->opt.dct_min_side);
    jpeg_start_decompress(cinfo);
    /* Where the scan's data starts: the entropy decoder may read ahead as far as EOI. */
    const uint8_t *scan_data = cinfo->src->next_input_byte;
    int W = (int)cinfo->output_width, H = (int)cinfo->output_height;
    int box[4] = {0, 0, W, H};
    if (roi)
        roi(roi_arg, W, H, box);
    if (box[0] < 0 || box[1] < 0 || box[2] > W || box[3] > H || box[0] >= box[2] || box[1] >= box[3])
        box[0] = 0, box[1] = 0, box[2] = W, box[3] = H; /* a box outside the image: all of it */
    decode_rows(ctx, job, box, cmyk, out);
    if (box[3] < H) { /* nothing below the box is needed */
        if (!jpeg_input_complete(cinfo) && !eoi_in(scan_data, buf + len))
            job->err.premature_end = true;
        jpeg_abort_decompress(cinfo);
    } else {
        jpeg_finish_decompress(cinfo);
    }
    return 0;
}

int decode_jpeg(decode_ctx *ctx, const uint8_t *buf, size_t len, decode_roi_fn roi, void *roi_arg, decode_rgb *out,
                char *why, size_t why_len)
{
    jpeg_job job = {0};
    job.cinfo.err = jpeg_std_error(&job.err.pub);
    job.err.pub.error_exit = on_error;
    job.err.pub.emit_message = on_message;
    job.err.limit_scans = ctx->opt.limit_scans;
    job.progress.progress_monitor = on_progress;
    jpeg_create_decompress(&job.cinfo);
    job.cinfo.progress = &job.progress;
    int rc = decode_protected(ctx, &job, buf, len, roi, roi_arg, out);
    if (rc == -1) {
        char msg[JMSG_LENGTH_MAX];
        job.err.pub.format_message((j_common_ptr)&job.cinfo, msg);
        decode_reason(why, why_len, "%s: %s", job.header_read ? "corrupt JPEG" : "bad JPEG header", msg);
    } else if (rc == -2) {
        decode_reason(why, why_len, "%ux%u pixels exceeds the limit of %llu (PIL's decompression bomb error)",
                      job.cinfo.image_width, job.cinfo.image_height, (unsigned long long)ctx->opt.max_pixels);
    } else if (rc == -3) {
        decode_reason(why, why_len, "corrupt JPEG: progressive JPEG image has more than %d scans", MAX_SCANS);
    } else if (job.err.premature_end) {
        decode_reason(why, why_len, "truncated JPEG: Premature end of JPEG file");
        rc = -1;
    }
    jpeg_destroy_decompress(&job.cinfo);
    if (rc != 0)
        *out = (decode_rgb){0};
    return rc == 0 ? 0 : -1;
}

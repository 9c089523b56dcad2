/*
 * fuzz_decode.c — libFuzzer target for selfsup-decode's image decoder (stages/decode).
 *
 * Each input is decoded from memory as the stage decodes a file: the format is sniffed from
 * the first bytes, so JPEG (libjpeg-turbo) and PNG (libpng, whose errors longjmp) inputs both
 * come through, whole, in a window (decode_image_roi, a box from the input's last bytes, which
 * the decoder must tolerate even when it is empty or reversed) or DCT-downscaled. A decode must either succeed with an image whose every pixel can be read
 * (ASan flags an overrun), or fail with a reason. The same context decodes every input, as
 * in the stage, so state left behind by a failed decode would show up in the next one. The
 * pixel limit is lowered to keep each run fast; progressive JPEGs with absurd scan counts
 * are refused for the same reason.
 *
 * Inputs that start like a .npy file go to the file-list parser instead (disk_filelist's
 * '<U…' path arrays, parsed by hand in stages/decode/filelist.c): accepted lists must hold
 * NUL-terminated strings that can be read to their end.
 */
#include "decode/decoder.h"
#include "decode/filelist.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void fuzz_filelist(const uint8_t *data, size_t size)
{
    char **paths, *err = NULL;
    size_t count;
    if (decode_filelist_parse(data, size, "fuzz", &paths, &count, &err) != 0) {
        if (!err || !*err)
            abort();
        free(err);
        return;
    }
    volatile size_t sink = 0;
    for (size_t i = 0; i < count; i++)
        sink += strlen(paths[i]);
    (void)sink;
    decode_filelist_free(paths, count);
}

/* A box drawn from four input bytes (in 1/256ths of the image), any order, even empty. */
typedef struct {
    const uint8_t *bytes;
} fuzz_box;

static void box_from_bytes(void *arg, int w, int h, int box[4])
{
    const fuzz_box *b = arg;
    if (!b->bytes)
        return;
    box[0] = (int)((int64_t)w * b->bytes[0] / 256), box[1] = (int)((int64_t)h * b->bytes[1] / 256);
    box[2] = (int)((int64_t)w * b->bytes[2] / 255), box[3] = (int)((int64_t)h * b->bytes[3] / 255);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 6 && !memcmp(data, "\x93NUMPY", 6)) {
        fuzz_filelist(data, size);
        return 0;
    }
    static decode_ctx *ctx;
    if (!ctx && !(ctx = decode_ctx_new(&(decode_options){.max_pixels = 1u << 20, .limit_scans = 1})))
        abort();
    decode_rgb im;
    char why[256] = "";
    /* Every other input is decoded in a window (selfsup-decode --crop), whose box comes from
     * the input's last bytes, or at a DCT scale. */
    static decode_ctx *scaled;
    if (!scaled && !(scaled = decode_ctx_new(&(decode_options){.max_pixels = 1u << 20, .limit_scans = 1,
                                                                .dct_min_side = 16})))
        abort();
    fuzz_box box = {.bytes = size >= 4 ? data + size - 4 : NULL};
    int mode = size ? data[size / 2] % 3 : 0;
    int rc = mode == 2 ? decode_image(scaled, data, size, &im, why, sizeof why)
                       : decode_image_roi(ctx, data, size, mode ? box_from_bytes : NULL, &box, &im, why, sizeof why);
    if (rc != 0) {
        if (!why[0])
            abort(); /* failures always explain themselves */
        return 0;
    }
    if (im.w <= 0 || im.h <= 0 || (uint64_t)im.w * (uint64_t)im.h > (1u << 20) || im.x0 < 0 || im.y0 < 0 ||
        im.x0 + im.w > im.full_w || im.y0 + im.h > im.full_h || im.stride < (size_t)im.w * 3)
        abort();
    volatile uint8_t sink = 0;
    for (int y = 0; y < im.h; y++)
        for (size_t i = 0; i < (size_t)im.w * 3; i++)
            sink ^= im.px[(size_t)y * im.stride + i];
    (void)sink;
    return 0;
}

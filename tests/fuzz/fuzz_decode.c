/*
 * fuzz_decode.c — libFuzzer target for selfsup-decode's image decoder (stages/decode).
 *
 * Each input is decoded from memory as the stage decodes a file: the format is sniffed from
 * the first bytes, so JPEG (TurboJPEG) and PNG (libpng, whose errors longjmp) inputs both
 * come through. A decode must either succeed with an image whose every pixel can be read
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
    if (decode_image(ctx, data, size, &im, why, sizeof why) != 0) {
        if (!why[0])
            abort(); /* failures always explain themselves */
        return 0;
    }
    if (im.w <= 0 || im.h <= 0 || (uint64_t)im.w * (uint64_t)im.h > (1u << 20))
        abort();
    volatile uint8_t sink = 0;
    size_t n = (size_t)im.w * (size_t)im.h * 3;
    for (size_t i = 0; i < n; i++)
        sink ^= im.px[i];
    (void)sink;
    return 0;
}

/*
 * fuzz_npy.c — libFuzzer target for lib/npy's reader.
 *
 * Each input is parsed as a whole .npy image with npy_parse (the validator behind npy_open and
 * npy_read). Accepted inputs must describe a payload that fits the input: every payload byte
 * is read (ASan flags any overrun), and the header npy_header writes for the same dtype and
 * shape, followed by the payload, must parse back to the same array.
 */
#include "npy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_round_trip(const npy_array *a)
{
    size_t hlen;
    char *err = NULL;
    char *h = npy_header(a->dtype, a->ndim, a->shape, &hlen, &err);
    if (!h)
        abort(); /* whatever the reader accepts, the writer must describe */
    char *img = malloc(hlen + a->nbytes);
    memcpy(img, h, hlen);
    if (a->nbytes)
        memcpy(img + hlen, a->data, a->nbytes);
    npy_array b;
    if (npy_parse(img, hlen + a->nbytes, "round-trip", &b, &err) != 0)
        abort();
    if (b.dtype != a->dtype || b.ndim != a->ndim || b.nbytes != a->nbytes ||
        memcmp(b.shape, a->shape, sizeof a->shape) != 0 ||
        (a->nbytes && memcmp(b.data, a->data, a->nbytes) != 0))
        abort();
    npy_close(&b);
    free(img);
    free(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    npy_array a;
    char *err = NULL;
    if (npy_parse(data, size, "fuzz", &a, &err) != 0) {
        if (!err || !*err)
            abort(); /* failures always explain themselves */
        free(err);
        return 0;
    }
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < a.nbytes; i++)
        sink ^= ((const unsigned char *)a.data)[i];
    (void)sink;
    check_round_trip(&a);
    npy_close(&a);
    return 0;
}

/*
 * fuzz_record.c — libFuzzer target for shm/record's reader.
 *
 * Each input is tried two ways: as one whole record (rec_parse) and as a stream of records
 * read from a memfd (rec_fd_read, which adds rec_peek_size, buffer growth and truncation).
 * Every record either accepts must
 *   - have every payload byte readable (ASan flags an overrun) and print (rec_print, all
 *     values, which runs the float16/bfloat16 conversions);
 *   - come out of the writer again: the same header fields and tensors rebuilt with
 *     rec_writer must parse, with equal descriptors (offsets aside) and equal payloads, and
 *     when the input was laid out canonically (offsets and size as the writer places them)
 *     the two must be identical bytes once the input's padding is zeroed.
 * Rejections must explain themselves.
 */
#include "record.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void rewrite_and_compare(const rec_view *v)
{
    const rec_header *h = v->hdr;
    size_t cap = (size_t)h->size + 64 * (size_t)h->n_tensors + 64;
    uint8_t *out = aligned_alloc(64, (cap + 63) / 64 * 64);
    rec_writer w;
    if (rec_writer_init(&w, out, cap, (rec_kind)h->kind, h->seq, h->epoch, h->n_tensors))
        abort();
    rec_writer_header(&w)->flags = h->flags;
    rec_writer_header(&w)->source = h->source;
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        const rec_tensor *t = &v->tensors[i];
        if (rec_add_copy(&w, t->name, (rec_dtype)t->dtype, t->ndim, t->shape, rec_data(v, (int)i)))
            abort(); /* whatever the reader accepts, the writer must be able to write */
    }
    size_t n = rec_finish(&w);
    rec_view r;
    char *err = NULL;
    if (!n || rec_parse(out, n, &r, &err))
        abort();
    if (r.hdr->kind != h->kind || r.hdr->seq != h->seq || r.hdr->epoch != h->epoch || r.hdr->flags != h->flags ||
        r.hdr->source != h->source || r.hdr->n_tensors != h->n_tensors)
        abort();
    bool canonical = n == h->size;
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        rec_tensor a = v->tensors[i], b = r.tensors[i];
        canonical = canonical && a.offset == b.offset;
        a.offset = b.offset = 0;
        if (memcmp(&a, &b, sizeof a) || (a.nbytes && memcmp(rec_data(v, (int)i), rec_data(&r, (int)i), a.nbytes)))
            abort();
    }
    if (canonical) {
        /* Zero the bytes that belong to no payload (the padding), then compare everything. */
        uint8_t *in = malloc(n);
        memcpy(in, v->base, n);
        uint64_t pos = REC_HEADER_BYTES + (uint64_t)h->n_tensors * REC_TENSOR_BYTES;
        for (uint32_t i = 0; i < h->n_tensors; i++) {
            memset(in + pos, 0, v->tensors[i].offset - pos);
            pos = v->tensors[i].offset + v->tensors[i].nbytes;
        }
        memset(in + pos, 0, n - pos);
        if (memcmp(in, out, n))
            abort();
        free(in);
    }
    if (h->kind == REC_EOS && !h->epoch && !h->source) { /* what rec_write_eos writes */
        uint8_t eos[64];
        if (rec_write_eos(eos, sizeof eos, h->seq, h->flags == REC_EOS_STOPPED) != 64 || memcmp(eos, out, 64))
            abort();
    }
    free(out);
}

static void check_accepted(const rec_view *v)
{
    static FILE *null;
    if (!null)
        null = fopen("/dev/null", "w");
    volatile uint8_t sink = 0;
    for (uint32_t i = 0; i < v->hdr->n_tensors; i++) {
        const uint8_t *p = rec_data(v, (int)i);
        for (uint64_t k = 0; k < v->tensors[i].nbytes; k++)
            sink ^= p[k];
        if (rec_find(v, v->tensors[i].name) != (int)i)
            abort();
    }
    (void)sink;
    rec_print(null, v, -1);
    rewrite_and_compare(v);
}

static void try_whole(const uint8_t *data, size_t size)
{
    uint8_t *buf = aligned_alloc(64, (size + 64) / 64 * 64);
    memcpy(buf, data, size);
    rec_view v;
    char *err = NULL;
    if (rec_parse(buf, size, &v, &err) == 0)
        check_accepted(&v);
    else if (!err || !*err)
        abort();
    free(err);
    free(buf);
}

static void try_stream(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0)
        fd = memfd_create("fuzz_record", 0);
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size || lseek(fd, 0, SEEK_SET))
        abort();
    rec_buf b = {0};
    rec_view v;
    uint64_t offset = 0;
    char *err = NULL;
    int rc;
    while ((rc = rec_fd_read(fd, &b, &v, &offset, &err)) == 1)
        check_accepted(&v);
    if (rc == 0 && offset != size)
        abort(); /* a clean end must be at the end of the input */
    if (rc < 0 && (!err || !strstr(err, "stream offset")))
        abort();
    free(err);
    rec_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    try_whole(data, size);
    try_stream(data, size);
    return 0;
}

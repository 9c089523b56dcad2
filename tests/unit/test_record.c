/*
 * test_record.c — unit tests for shm/record: the dtype table, the exact bytes of a small
 * record and of an end-of-stream record (written out by hand from the format in record.h),
 * round trips for every dtype and shape down to 0-d and zero-size, writer errors, one test
 * per validation rule (a valid record with exactly one field corrupted), rec_print, reading
 * streams over pipes (many records, short reads, EINTR, clean EOF, truncation), the malformed
 * corpus in tests/records/bad/, and a cross-check with the independent numpy implementation
 * tools/selfsup_records.py in both directions.
 *
 * Values follow a formula (element i: k = 7i mod 11, s = k - 5; unsigned k, signed s,
 * floats s/4, bool i mod 3 == 0) that the Python side recomputes with numpy, so neither side
 * checks itself against its own earlier output.
 */
#include "record.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY "/usr/bin/python3"

/* ---- helpers ---------------------------------------------------------------------------- */

static uint8_t *abuf(size_t n)
{
    uint8_t *p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
    cr_assert_not_null(p);
    memset(p, 0xEE, (n + 63) / 64 * 64 + 64); /* garbage, so the writer must zero what it uses */
    return p;
}

static void put_le(uint8_t *b, size_t off, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        b[off + (size_t)i] = (uint8_t)(v >> (8 * i));
}


/* The pattern value of element i as a double (what Python prints for it). */
static double pattern_value(int d, size_t i)
{
    int k = (int)((i * 7) % 11), s = k - 5;
    switch (d) {
    case REC_U8: return k;
    case REC_BOOL: return i % 3 == 0;
    case REC_F16: case REC_BF16: case REC_F32: case REC_F64: return s * 0.25;
    default: return s;
    }
}

static void put_pattern(int d, size_t i, uint8_t *out)
{
    double v = pattern_value(d, i);
    float f = (float)v;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    switch (d) {
    case REC_U8: case REC_BOOL: out[0] = (uint8_t)v; break;
    case REC_I8: out[0] = (uint8_t)(int8_t)v; break;
    case REC_I16: put_le(out, 0, (uint64_t)(int64_t)v, 2); break;
    case REC_I32: put_le(out, 0, (uint64_t)(int64_t)v, 4); break;
    case REC_I64: put_le(out, 0, (uint64_t)(int64_t)v, 8); break;
    case REC_F16: put_le(out, 0, test_half_exact(f), 2); break;
    case REC_BF16: put_le(out, 0, fb >> 16, 2); break;
    case REC_F32: memcpy(out, &f, 4); break;
    case REC_F64: memcpy(out, &v, 8); break;
    default: cr_assert_fail("bad dtype %d", d);
    }
}

static const size_t SIZES[] = {0, 1, 1, 2, 4, 8, 2, 2, 4, 8, 1}; /* by wire code */
static const char *NAMES[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float16",
                              "bfloat16", "float32", "float64", "bool"};

static void fill_pattern(int d, uint8_t *p, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++)
        put_pattern(d, i, p + i * SIZES[d]);
}

static void assert_pattern(int d, const uint8_t *p, uint64_t count)
{
    uint8_t want[8];
    for (uint64_t i = 0; i < count; i++) {
        put_pattern(d, i, want);
        cr_assert(memcmp(p + i * SIZES[d], want, SIZES[d]) == 0, "%s element %llu differs", NAMES[d],
                  (unsigned long long)i);
    }
}

static uint64_t count_of(int ndim, const uint64_t *shape)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

static void expect_err(const char *err, const char *needle)
{
    cr_assert_not_null(err, "no message; wanted \"%s\"", needle);
    cr_assert(strstr(err, needle), "message \"%s\" lacks \"%s\"", err, needle);
}

/* The base record of the validation tests, the same one tests/records/make_bad_records.py
 * builds with Python: 'data.0' uint8 [2,3,4] = 0..23 at 320, 'label' int64 [] = 7 at 384. */
static size_t make_base(uint8_t *buf)
{
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 4096, REC_DATA, 5, 1, 2), 0, "%s", w.error);
    uint8_t *d = rec_add(&w, "data.0", REC_U8, 3, (uint64_t[]){2, 3, 4});
    cr_assert_not_null(d, "%s", w.error);
    for (int i = 0; i < 24; i++)
        d[i] = (uint8_t)i;
    int64_t label = 7;
    cr_assert_eq(rec_add_copy(&w, "label", REC_I64, 0, NULL, &label), 0, "%s", w.error);
    size_t n = rec_finish(&w);
    cr_assert_eq(n, 448, "%s", w.error);
    return n;
}

/* ---- dtype table and exact bytes ---------------------------------------------------------- */

Test(record, dtype_table)
{
    static const char *shorts[] = {"?", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"};
    for (int d = 1; d <= 10; d++) {
        cr_assert_eq(rec_dtype_size(d), SIZES[d], "%s", NAMES[d]);
        cr_assert_str_eq(rec_dtype_name(d), NAMES[d]);
        cr_assert_eq(rec_dtype_parse(NAMES[d]), d);
        if (d < 10)
            cr_assert_eq(rec_dtype_parse(shorts[d]), d, "%s", shorts[d]);
    }
    cr_assert_eq(rec_dtype_size(0), 0);
    cr_assert_eq(rec_dtype_size(11), 0);
    cr_assert_eq(rec_dtype_size(-1), 0);
    cr_assert_str_eq(rec_dtype_name(11), "?");
    cr_assert_eq(rec_dtype_parse("float128"), -1);
    cr_assert_eq(rec_dtype_parse(""), -1);
}

Test(record, exact_bytes_of_a_small_record)
{
    uint8_t want[256] = {0};
    memcpy(want, "SSRC", 4);
    put_le(want, 4, 1, 2);    /* version */
    put_le(want, 6, 1, 2);    /* kind: data */
    put_le(want, 8, 0xAB, 4); /* flags */
    put_le(want, 12, 1, 4);   /* n_tensors */
    put_le(want, 16, 256, 8); /* size */
    put_le(want, 24, 0x0102030405060708ull, 8);
    put_le(want, 32, 9, 4);   /* epoch */
    put_le(want, 36, 3, 4);   /* source */
    want[64] = 'x';
    put_le(want, 96, 1, 2);   /* dtype u8 */
    put_le(want, 98, 1, 2);   /* ndim */
    put_le(want, 104, 192, 8); /* offset */
    put_le(want, 112, 3, 8);  /* nbytes */
    put_le(want, 120, 3, 8);  /* shape[0] */
    want[192] = 1, want[193] = 2, want[194] = 3;

    uint8_t *buf = abuf(1024);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 1024, REC_DATA, 0x0102030405060708ull, 9, 1), 0);
    rec_writer_header(&w)->flags = 0xAB;
    rec_writer_header(&w)->source = 3;
    cr_assert_eq(rec_add_copy(&w, "x", REC_U8, 1, (uint64_t[]){3}, "\1\2\3"), 0, "%s", w.error);
    cr_assert_eq(rec_finish(&w), 256, "%s", w.error);
    for (int i = 0; i < 256; i++)
        cr_assert_eq(buf[i], want[i], "byte %d is 0x%02x, expected 0x%02x", i, buf[i], want[i]);
    free(buf);
}

Test(record, exact_bytes_of_eos)
{
    uint8_t want[64] = {0};
    memcpy(want, "SSRC", 4);
    put_le(want, 4, 1, 2);
    put_le(want, 6, 2, 2);
    put_le(want, 8, 1, 4); /* flags: the writer finished */
    put_le(want, 16, 64, 8);
    put_le(want, 24, 77, 8); /* seq: the data records sent */
    uint8_t *buf = abuf(64);
    cr_assert_eq(rec_write_eos(buf, 63, 77, false), 0, "63 bytes are too few");
    cr_assert_eq(rec_write_eos(buf, 64, 77, false), 64);
    cr_assert(memcmp(buf, want, 64) == 0);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, 64, &v, &err), 0, "%s", err);
    cr_assert_eq(v.hdr->kind, REC_EOS);
    cr_assert_eq(v.hdr->seq, 77);
    free(buf);
}

/* ---- round trips ------------------------------------------------------------------------ */

static const struct {
    int ndim;
    uint64_t shape[8];
} SHAPES[] = {
    {0, {0}}, {1, {5}}, {3, {2, 3, 4}}, {3, {3, 0, 2}}, {1, {0}}, {8, {1, 2, 1, 2, 1, 2, 1, 3}}, {2, {17, 9}},
};

Test(record, round_trip_every_dtype_and_shape)
{
    size_t cap = 1 << 16;
    uint8_t *buf = abuf(cap);
    for (int d = 1; d <= 10; d++) {
        rec_writer w;
        cr_assert_eq(rec_writer_init(&w, buf, cap, REC_DATA, (uint64_t)d, 3, ARRAY_LEN(SHAPES)), 0);
        for (size_t s = 0; s < ARRAY_LEN(SHAPES); s++) {
            char name[16];
            snprintf(name, sizeof name, "t%zu", s);
            uint8_t *p = rec_add(&w, name, d, SHAPES[s].ndim, SHAPES[s].shape);
            cr_assert_not_null(p, "%s", w.error);
            cr_assert_eq((uintptr_t)p % 64, 0);
            fill_pattern(d, p, count_of(SHAPES[s].ndim, SHAPES[s].shape));
        }
        size_t n = rec_finish(&w);
        cr_assert_gt(n, 0, "%s", w.error);
        cr_assert_eq(n % 64, 0);
        rec_view v;
        char *err = NULL;
        cr_assert_eq(rec_parse(buf, n, &v, &err), 0, "%s: %s", NAMES[d], err);
        cr_assert_eq(v.hdr->n_tensors, ARRAY_LEN(SHAPES));
        cr_assert_eq(v.hdr->seq, (uint64_t)d);
        cr_assert_eq(v.hdr->epoch, 3);
        for (size_t s = 0; s < ARRAY_LEN(SHAPES); s++) {
            char name[16];
            snprintf(name, sizeof name, "t%zu", s);
            int i = rec_find(&v, name);
            cr_assert_eq(i, (int)s);
            const rec_tensor *t = &v.tensors[i];
            uint64_t count = count_of(SHAPES[s].ndim, SHAPES[s].shape);
            cr_assert_eq(t->dtype, d);
            cr_assert_eq(t->ndim, SHAPES[s].ndim);
            cr_assert(memcmp(t->shape, SHAPES[s].shape, sizeof t->shape) == 0);
            cr_assert_eq(rec_numel(&v, i), count);
            cr_assert_eq(t->nbytes, count * SIZES[d]);
            cr_assert_eq((uintptr_t)rec_data(&v, i) % 64, 0);
            assert_pattern(d, rec_data(&v, i), count);
        }
        cr_assert_eq(rec_find(&v, "t99"), -1);
        cr_assert_eq(rec_find(&v, ""), -1);
    }
    free(buf);
}

Test(record, empty_data_record_and_max_tensors)
{
    uint8_t *buf = abuf(64 + 256 * 128 + 256 * 64);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 64, REC_DATA, 1, 0, 0), 0);
    cr_assert_eq(rec_finish(&w), 64);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, 64, &v, &err), 0, "%s", err);
    cr_assert_eq(v.hdr->n_tensors, 0);

    size_t cap = 64 + 256 * 128 + 256 * 64;
    cr_assert_eq(rec_writer_init(&w, buf, cap, REC_DATA, 1, 0, REC_MAX_TENSORS), 0);
    for (int i = 0; i < REC_MAX_TENSORS; i++) {
        char name[32];
        snprintf(name, sizeof name, "tensor.%d", i);
        uint8_t *p = rec_add(&w, name, REC_U8, 1, (uint64_t[]){1});
        cr_assert_not_null(p, "%s", w.error);
        *p = (uint8_t)i;
    }
    cr_assert_eq(rec_finish(&w), cap, "%s", w.error);
    cr_assert_eq(rec_parse(buf, cap, &v, &err), 0, "%s", err);
    cr_assert_eq(rec_find(&v, "tensor.200"), 200);
    cr_assert_eq(*(const uint8_t *)rec_data(&v, 200), 200);
    free(buf);
}

Test(record, spare_descriptor_slots_are_allowed)
{
    /* max_tensors 4 but only 1 used: the payload starts after the reserved table. */
    uint8_t *buf = abuf(2048);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 2048, REC_DATA, 1, 0, 4), 0);
    cr_assert_eq(rec_add_copy(&w, "a", REC_I32, 1, (uint64_t[]){2}, (int32_t[]){-1, 5}), 0);
    size_t n = rec_finish(&w);
    cr_assert_eq(n, 64 + 4 * 128 + 64);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, n, &v, &err), 0, "%s", err);
    cr_assert_eq(v.tensors[0].offset, 576);
    cr_assert_eq(((const int32_t *)rec_data(&v, 0))[1], 5);
    free(buf);
}

/* ---- writer errors ---------------------------------------------------------------------- */

Test(record, writer_overflow_reports_needed_bytes)
{
    uint8_t *buf = abuf(2048);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 512, REC_DATA, 1, 0, 2), 0);
    cr_assert_null(rec_add(&w, "big", REC_F32, 1, (uint64_t[]){250}));
    cr_assert(w.overflow);
    cr_assert_null(rec_add(&w, "more", REC_U8, 1, (uint64_t[]){100}));
    /* 64 + 2*128 = 320; + 1000 -> 1344 (aligned); + 100 -> 1444 -> 1472. */
    cr_assert_eq(rec_writer_needed(&w), 1472);
    cr_assert_eq(rec_finish(&w), 0);
    expect_err(w.error, "needs 1472 bytes");
    expect_err(w.error, "holds 512");
    /* and the number is right: that capacity suffices */
    cr_assert_eq(rec_writer_init(&w, buf, 1472, REC_DATA, 1, 0, 2), 0);
    cr_assert_not_null(rec_add(&w, "big", REC_F32, 1, (uint64_t[]){250}));
    cr_assert_not_null(rec_add(&w, "more", REC_U8, 1, (uint64_t[]){100}));
    cr_assert_eq(rec_finish(&w), 1472, "%s", w.error);
    free(buf);
}

Test(record, writer_init_too_small)
{
    uint8_t *buf = abuf(1024);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 300, REC_DATA, 1, 0, 2), -1);
    expect_err(w.error, "needs 320 bytes");
    expect_err(w.error, "holds 300");
    cr_assert_null(rec_add(&w, "x", REC_U8, 1, (uint64_t[]){10}));
    cr_assert_eq(rec_writer_needed(&w), 384);
    cr_assert_eq(rec_finish(&w), 0);
    expect_err(w.error, "needs 384 bytes but the buffer holds 300");
    free(buf);
}

static void expect_add_error(const char *name, int dtype, int ndim, const uint64_t *shape, const char *needle)
{
    uint8_t *buf = abuf(4096);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 4096, REC_DATA, 1, 0, 2), 0);
    cr_assert_not_null(rec_add(&w, "first", REC_U8, 0, NULL));
    cr_assert_null(rec_add(&w, name, dtype, ndim, shape), "accepted; wanted \"%s\"", needle);
    expect_err(w.error, needle);
    cr_assert_eq(rec_finish(&w), 0, "a record with a failed rec_add must not finish");
    free(buf);
}

Test(record, writer_rejects_bad_tensors)
{
    uint64_t s1[] = {4};
    expect_add_error("abcdefghijklmnopqrstuvwxyz012345", REC_U8, 1, s1, "name is 32 characters");
    expect_add_error("", REC_U8, 1, s1, "name is 0 characters");
    expect_add_error("a b", REC_U8, 1, s1, "non-printable or space byte at 1");
    expect_add_error("first", REC_U8, 1, s1, "already has a tensor of that name (#0)");
    expect_add_error("x", 11, 1, s1, "unknown dtype code 11");
    expect_add_error("x", 0, 1, s1, "unknown dtype code 0");
    expect_add_error("x", REC_U8, 9, (uint64_t[9]){1}, "ndim 9 is not in 0..8");
    expect_add_error("x", REC_U8, -1, s1, "ndim -1");
    expect_add_error("x", REC_F64, 2, (uint64_t[]){1ull << 40, 1ull << 30}, "over the record limit");
}

Test(record, writer_table_full_and_misaligned)
{
    uint8_t *buf = abuf(4096);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 4096, REC_DATA, 1, 0, 1), 0);
    cr_assert_not_null(rec_add(&w, "a", REC_U8, 0, NULL));
    cr_assert_null(rec_add(&w, "b", REC_U8, 0, NULL));
    expect_err(w.error, "table of 1 tensors is full");
    cr_assert_eq(rec_writer_init(&w, buf + 8, 4000, REC_DATA, 1, 0, 1), -1);
    expect_err(w.error, "not 64-byte aligned");
    cr_assert_null(rec_add(&w, "a", REC_U8, 0, NULL));
    cr_assert_eq(rec_writer_init(&w, buf, 4096, REC_DATA, 1, 0, 257), -1);
    expect_err(w.error, "max_tensors 257 is over the limit of 256");
    free(buf);
}

/* ---- validation: one corrupted field each ------------------------------------------------ */

static void expect_corrupt(size_t off, int width, uint64_t value, const char *needle)
{
    uint8_t *buf = abuf(4096);
    size_t n = make_base(buf);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, n, &v, &err), 0, "the base is invalid: %s", err);
    put_le(buf, off, value, width);
    cr_assert_eq(rec_parse(buf, n, &v, &err), -1, "accepted; wanted \"%s\"", needle);
    expect_err(err, needle);
    free(err);
    free(buf);
}

#define D0 64
#define D1 192
#define CORRUPT(test, off, width, value, needle) \
    Test(record, bad_##test) { expect_corrupt(off, width, value, needle); }

CORRUPT(magic, 0, 4, 0x12345678, "not a record: bad magic 0x12345678")
CORRUPT(big_endian, 0, 4, 0x53535243, "big-endian")
CORRUPT(version, 4, 2, 2, "record seq 5: version 2, expected 1")
CORRUPT(kind, 6, 2, 0, "record seq 5: unknown kind 0")
CORRUPT(size_unaligned, 16, 8, 449, "record seq 5: size 449 is not a positive multiple of 64")
CORRUPT(size_small, 16, 8, 384, "size field says 384 bytes but 448 are there")
CORRUPT(size_large, 16, 8, 512, "size field says 512 bytes but 448 are there (truncated)")
CORRUPT(size_limit, 16, 8, (1ull << 30) + 64, "size 1073741888 is over the limit of 1073741824 bytes")
CORRUPT(n_tensors_limit, 12, 4, 257, "n_tensors 257 is over the limit of 256")
CORRUPT(n_tensors_table, 12, 4, 4, "n_tensors 4 needs a descriptor table ending at 576, past the record size 448")
CORRUPT(reserved_header, 63, 1, 1, "reserved header byte 23 is 0x01")
CORRUPT(eos_tensors, 6, 2, REC_EOS, "end-of-stream record has 2 tensors and size 448")
CORRUPT(name_garbage_after_nul, D0 + 31, 1, 'z', "tensor 'data.0' (#0): name is not NUL-padded (byte 31 is 0x7a)")
CORRUPT(name_empty, D1, 1, 0, "tensor #1: name is empty")
CORRUPT(name_control, D1 + 1, 1, 0x7f, "tensor #1: name has a non-printable byte 0x7f at 1")
CORRUPT(name_padding, D1 + 20, 1, 1, "tensor 'label' (#1): name is not NUL-padded (byte 20 is 0x01)")
CORRUPT(name_duplicate, D1, 6, 0x302e61746164ull, "tensor 'data.0' (#1): name repeats tensor #0")
CORRUPT(dtype, D0 + 32, 2, 12, "tensor 'data.0' (#0): unknown dtype code 12")
CORRUPT(ndim, D1 + 34, 2, 9, "tensor 'label' (#1): ndim 9 is over the limit of 8")
CORRUPT(unused_dim, D0 + 56 + 8 * 7, 8, 2, "tensor 'data.0' (#0): shape[7] is 2 but ndim is 3")
CORRUPT(reserved0, D0 + 36, 4, 0x100, "tensor 'data.0' (#0): reserved0 is 0x00000100")
CORRUPT(reserved1, D1 + 120, 1, 0xff, "tensor 'label' (#1): reserved1 byte 0 is 0xff")
CORRUPT(nbytes, D0 + 48, 8, 23, "tensor 'data.0' (#0): nbytes 23 != 24 (shape × 1-byte uint8)")
CORRUPT(nbytes_dtype, D1 + 32, 2, REC_I32, "tensor 'label' (#1): nbytes 8 != 4 (shape × 4-byte int32)")
CORRUPT(shape_overflow, D0 + 56, 8, 1ull << 62, "tensor 'data.0' (#0): shape × uint8 size overflows 64 bits")
CORRUPT(offset_unaligned, D1 + 40, 8, 400, "tensor 'label' (#1): payload offset 400 is not a multiple of 64")
CORRUPT(offset_in_table, D0 + 40, 8, 192, "payload offset 192 is inside the header and descriptor table, which end at 320")
CORRUPT(offset_overlap, D1 + 40, 8, 320, "tensor 'label' (#1): payload offset 320 overlaps the previous payload, which ends at 344")
CORRUPT(offset_past_end, D1 + 40, 8, 448, "tensor 'label' (#1): payload offset 448 + 8 bytes is past the record end 448")
CORRUPT(offset_wraps, D1 + 40, 8, UINT64_MAX - 63, "payload offset 18446744073709551552 + 8 bytes is past the record end 448")

Test(record, bad_name_unterminated)
{
    uint8_t *buf = abuf(4096);
    size_t n = make_base(buf);
    memset(buf + D0, 'a', 32);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, n, &v, &err), -1);
    expect_err(err, "record seq 5: tensor #0: name is not NUL-terminated within 32 bytes");
    free(err);
    free(buf);
}

Test(record, bad_nbytes_past_end)
{
    /* a consistent shape and nbytes whose payload runs past the end */
    uint8_t *buf = abuf(4096);
    size_t n = make_base(buf);
    put_le(buf, D1 + 34, 1, 2);
    put_le(buf, D1 + 56, 9, 8);
    put_le(buf, D1 + 48, 72, 8);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, n, &v, &err), -1);
    expect_err(err, "record seq 5: tensor 'label' (#1): payload offset 384 + 72 bytes is past the record end 448");
    free(err);
    free(buf);
}

Test(record, bad_length_and_alignment)
{
    uint8_t *buf = abuf(4096);
    size_t n = make_base(buf);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, 63, &v, &err), -1);
    expect_err(err, "record truncated: 63 bytes");
    free(err);
    cr_assert_eq(rec_parse(buf, n - 64, &v, &err), -1);
    expect_err(err, "size field says 448 bytes but 384 are there (truncated)");
    free(err);
    memmove(buf + 4, buf, n);
    cr_assert_eq(rec_parse(buf + 4, n, &v, &err), -1);
    expect_err(err, "not 8-byte aligned");
    free(err);
    free(buf);
}

Test(record, peek_size)
{
    uint8_t *buf = abuf(4096);
    make_base(buf);
    char *err = NULL;
    cr_assert_eq(rec_peek_size(buf, &err), 448);
    put_le(buf, 16, 4096, 8); /* peek looks at the header only */
    cr_assert_eq(rec_peek_size(buf, &err), 4096);
    put_le(buf, 4, 3, 2);
    cr_assert_eq(rec_peek_size(buf, &err), 0);
    expect_err(err, "version 3");
    free(err);
    free(buf);
}

/* ---- printing --------------------------------------------------------------------------- */

Test(record, print)
{
    uint8_t *buf = abuf(4096);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, 4096, REC_DATA, 12, 2, 6), 0);
    rec_writer_header(&w)->flags = 0x10;
    rec_add_copy(&w, "data.0", REC_U8, 2, (uint64_t[]){2, 3}, "\0\1\2\3\4\5");
    rec_add_copy(&w, "h", REC_F16, 1, (uint64_t[]){3}, (uint16_t[]){0x3e00, 0xb400, 0x0001}); /* 1.5 -0.25 2^-24 */
    rec_add_copy(&w, "b", REC_BF16, 1, (uint64_t[]){2}, (uint16_t[]){0x4040, 0xff80});        /* 3 -inf */
    rec_add_copy(&w, "f", REC_F32, 0, NULL, (float[]){0.1f});
    rec_add_copy(&w, "ok", REC_BOOL, 1, (uint64_t[]){3}, "\1\0\1");
    rec_add_copy(&w, "idx", REC_I64, 1, (uint64_t[]){0}, NULL);
    size_t n = rec_finish(&w);
    cr_assert_gt(n, 0, "%s", w.error);
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_parse(buf, n, &v, &err), 0, "%s", err);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    rec_print(f, &v, 4);
    rec_print(f, &v, 0);
    fclose(f);
    const char *want =
        "record seq 12 epoch 2: 6 tensors, 1152 bytes, flags 0x10, source 0\n"
        "  data.0 uint8    [2, 3] = [0, 1, 2, 3, ...]\n"
        "  h      float16  [3] = [1.5, -0.25, 5.96046e-08]\n"
        "  b      bfloat16 [2] = [3, -inf]\n"
        "  f      float32  [] = [0.1]\n"
        "  ok     bool     [3] = [true, false, true]\n"
        "  idx    int64    [0] = []\n"
        "record seq 12 epoch 2: 6 tensors, 1152 bytes, flags 0x10, source 0\n"
        "  data.0 uint8    [2, 3]\n"
        "  h      float16  [3]\n"
        "  b      bfloat16 [2]\n"
        "  f      float32  []\n"
        "  ok     bool     [3]\n"
        "  idx    int64    [0]\n";
    cr_assert_str_eq(text, want);
    free(text);
    /* 64 + 6*128 = 832, then 6 payloads of one 64-byte block each, the last empty: 832 + 5*64 */
    cr_assert_eq(n, 1152);
    uint8_t *eos = abuf(64);
    rec_write_eos(eos, 64, 3, false);
    cr_assert_eq(rec_parse(eos, 64, &v, &err), 0);
    f = open_memstream(&text, &len);
    rec_print(f, &v, 4);
    fclose(f);
    cr_assert_str_eq(text, "end of stream: 3 data records, writer finished\n");
    free(text);
    free(eos);
    free(buf);
}

/* ---- streams ---------------------------------------------------------------------------- */

/* Record number r of the stream tests: one uint8 tensor of 37r bytes and one int32 scalar. */
static size_t stream_record(uint8_t *buf, size_t cap, uint64_t r)
{
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, cap, REC_DATA, r, 0, 2), 0);
    uint8_t *p = rec_add(&w, "bytes", REC_U8, 1, (uint64_t[]){37 * r});
    cr_assert_not_null(p, "%s", w.error);
    fill_pattern(REC_U8, p, 37 * r);
    int32_t v = (int32_t)r;
    rec_add_copy(&w, "r", REC_I32, 0, NULL, &v);
    size_t n = rec_finish(&w);
    cr_assert_gt(n, 0, "%s", w.error);
    return n;
}

/* In a child: write `count` records then EOS to fd in chunks of 1..chunk bytes, sleeping
 * `pause_us` between chunks; then `tail` extra bytes of a further record. */
static pid_t spawn_writer(int fd, int count, size_t chunk, int pause_us, size_t tail)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid)
        return pid;
    size_t cap = 64 * 1024;
    uint8_t *buf = abuf(cap);
    unsigned seed = 1;
    for (int r = 0; r <= count; r++) {
        size_t n = r < count ? stream_record(buf, cap, (uint64_t)r) : rec_write_eos(buf, cap, (uint64_t)r, false);
        for (size_t off = 0; off < n;) {
            size_t k = 1 + (size_t)rand_r(&seed) % chunk;
            k = k > n - off ? n - off : k;
            if (rec_fd_write(fd, buf + off, k, NULL))
                _exit(1);
            off += k;
            if (pause_us)
                usleep((useconds_t)pause_us);
        }
    }
    if (tail) {
        size_t n = stream_record(buf, cap, (uint64_t)count + 1);
        rec_fd_write(fd, buf, tail < n ? tail : n, NULL);
    }
    _exit(0);
}

/* Read `count` records and the EOS from fd, checking each. */
static void read_stream(int fd, int count)
{
    rec_buf b = {0};
    rec_view v;
    uint64_t offset = 0, want_offset = 0;
    char *err = NULL;
    uint8_t *ref = abuf(64 * 1024);
    for (int r = 0; r < count; r++) {
        cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), 1, "record %d: %s", r, err);
        cr_assert_eq((uintptr_t)v.base % 64, 0);
        cr_assert_eq(v.hdr->seq, (uint64_t)r);
        cr_assert_eq(v.hdr->kind, REC_DATA);
        int i = rec_find(&v, "bytes");
        cr_assert_eq(rec_numel(&v, i), 37ull * (uint64_t)r);
        assert_pattern(REC_U8, rec_data(&v, i), 37ull * (uint64_t)r);
        cr_assert_eq(*(const int32_t *)rec_data(&v, rec_find(&v, "r")), r);
        want_offset += stream_record(ref, 64 * 1024, (uint64_t)r);
        cr_assert_eq(offset, want_offset);
    }
    cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), 1, "%s", err);
    cr_assert_eq(v.hdr->kind, REC_EOS);
    cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), 0, "clean EOF at a boundary");
    cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), 0, "and it stays at EOF");
    rec_buf_free(&b);
    free(ref);
}

Test(record, pipe_many_records_short_reads)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = spawn_writer(p[1], 400, 700, 0, 0);
    close(p[1]);
    read_stream(p[0], 400);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
}

Test(record, pipe_reads_survive_eintr)
{
    struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART: read() fails with EINTR */
    sigaction(SIGALRM, &sa, NULL);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = spawn_writer(p[1], 12, 300, 2000, 0);
    close(p[1]);
    struct itimerval it = {.it_interval = {0, 300}, .it_value = {0, 300}};
    setitimer(ITIMER_REAL, &it, NULL);
    read_stream(p[0], 12);
    setitimer(ITIMER_REAL, &(struct itimerval){0}, NULL);
    close(p[0]);
    waitpid(pid, NULL, 0);
    cr_assert_gt(alarms, 20, "the test did not interrupt the reads (%d signals)", (int)alarms);
}

Test(record, empty_stream_is_clean_eof)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    close(p[1]);
    rec_buf b = {0};
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_fd_read(p[0], &b, &v, NULL, &err), 0);
    close(p[0]);
    rec_buf_free(&b);
}

/* A stream of 3 records, EOS, then `tail` bytes of another record; the read after EOS fails. */
static void expect_truncated(size_t tail, const char *needle)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = spawn_writer(p[1], 3, 4096, 0, tail);
    close(p[1]);
    rec_buf b = {0};
    rec_view v;
    uint64_t offset = 0;
    char *err = NULL;
    for (int r = 0; r < 4; r++)
        cr_assert_eq(rec_fd_read(p[0], &b, &v, &offset, &err), 1, "%s", err);
    cr_assert_eq(rec_fd_read(p[0], &b, &v, &offset, &err), -1, "a cut-short record must be an error");
    expect_err(err, "truncated");
    expect_err(err, needle);
    free(err);
    close(p[0]);
    waitpid(pid, NULL, 0);
    rec_buf_free(&b);
}

/* Records 0..2 are 384, 448 and 512 bytes (320 of header and table, 37r payload bytes rounded
 * up, 64 for the scalar), the EOS 64: the cut record (seq 4, 576 bytes) starts at 1408. */
Test(record, pipe_truncated_payload)
{
    expect_truncated(500, "stream offset 1408: record seq 4 truncated: the stream ends after 500 of its 576 bytes");
}

Test(record, pipe_truncated_header)
{
    expect_truncated(10, "stream offset 1408: record truncated: the stream ends 10 bytes into a 64-byte header");
}

Test(record, pipe_invalid_record_gives_offset)
{
    uint8_t *buf = abuf(8192);
    size_t n = make_base(buf);
    memcpy(buf + n, buf, n);
    put_le(buf, n + D1 + 40, 320, 8); /* the second copy's label overlaps data.0 */
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(rec_fd_write(p[1], buf, 2 * n, NULL), 0);
    close(p[1]);
    rec_buf b = {0};
    rec_view v;
    uint64_t offset = 0;
    char *err = NULL;
    cr_assert_eq(rec_fd_read(p[0], &b, &v, &offset, &err), 1, "%s", err);
    cr_assert_eq(rec_fd_read(p[0], &b, &v, &offset, &err), -1);
    expect_err(err, "stream offset 448: record seq 5: tensor 'label' (#1): payload offset 320 overlaps");
    free(err);
    close(p[0]);
    rec_buf_free(&b);
    free(buf);
}

Test(record, stream_errors_without_offset)
{
    char *path = test_write_temp("short.rec", "SSRCabcd");
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    rec_buf b = {0};
    rec_view v;
    char *err = NULL;
    cr_assert_eq(rec_fd_read(fd, &b, &v, NULL, &err), -1);
    expect_err(err, "record truncated: the stream ends 8 bytes into a 64-byte header");
    cr_assert_null(strstr(err, "stream offset"), "%s", err);
    free(err);
    close(fd);
    cr_assert_eq(rec_fd_read(-1, &b, &v, NULL, &err), -1);
    expect_err(err, "read: Bad file descriptor");
    free(err);
    cr_assert_eq(rec_fd_write(-1, "x", 1, &err), -1);
    expect_err(err, "write: Bad file descriptor");
    free(err);
    rec_buf_free(&b);
    test_remove_temp(path);
}

/* ---- the malformed corpus ----------------------------------------------------------------- */

/* Each line of tests/records/bad/EXPECT is "FILE: substring"; every file must be rejected by
 * rec_parse (whole file) and by rec_fd_read (as a stream) with that substring. */
Test(record, bad_corpus)
{
    char *dir = test_path("tests/records/bad");
    char *expect_path = path_join(dir, "EXPECT");
    size_t len;
    char *text = read_whole_file(expect_path, &len);
    cr_assert_not_null(text, "%s: %s", expect_path, strerror(errno));
    int checked = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || !line[0])
            continue;
        char *colon = strstr(line, ": ");
        cr_assert_not_null(colon, "bad EXPECT line: %s", line);
        *colon = '\0';
        const char *needle = colon + 2;
        char *path = path_join(dir, line);
        size_t flen;
        char *data = read_whole_file(path, &flen);
        cr_assert_not_null(data, "%s: %s", path, strerror(errno));
        uint8_t *buf = abuf(flen + 1);
        memcpy(buf, data, flen);
        rec_view v;
        char *err = NULL;
        cr_assert_eq(rec_parse(buf, flen, &v, &err), -1, "%s: rec_parse accepted it", line);
        cr_assert(strstr(err, needle), "%s: rec_parse says \"%s\", wanted \"%s\"", line, err, needle);
        free(err);
        int fd = open(path, O_RDONLY);
        rec_buf b = {0};
        uint64_t offset = 0;
        cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), -1, "%s: rec_fd_read accepted it", line);
        cr_assert(strstr(err, needle), "%s: rec_fd_read says \"%s\", wanted \"%s\"", line, err, needle);
        cr_assert(strstr(err, "stream offset 0: "), "%s: %s", line, err);
        free(err);
        close(fd);
        rec_buf_free(&b);
        free(buf);
        free(data);
        free(path);
        checked++;
    }
    cr_assert_geq(checked, 20, "only %d bad records", checked);
    cr_assert_eq(test_count_files(dir), (size_t)checked + 1, "a file in %s is not listed in EXPECT", dir);
    free(text);
    free(expect_path);
    free(dir);
}

/* ---- cross-check with tools/selfsup_records.py -------------------------------------------- */

static const struct {
    int ndim;
    uint64_t shape[8];
} XSHAPES[] = {{2, {2, 3}}, {0, {0}}, {2, {4, 0}}, {8, {1, 2, 1, 3, 1, 1, 1, 2}}};

/* Records 0..3: one tensor per dtype, named after it, of shape XSHAPES[r]; then EOS. The
 * Python snippet in python_writes_c_reads builds the same with numpy. */
static uint8_t *write_cross_records(size_t *len)
{
    size_t cap = 1 << 16, used = 0;
    uint8_t *buf = abuf(cap);
    for (size_t r = 0; r < ARRAY_LEN(XSHAPES); r++) {
        rec_writer w;
        cr_assert_eq(rec_writer_init(&w, buf + used, cap - used, REC_DATA, r, 7, 10), 0);
        for (int d = 1; d <= 10; d++) {
            uint8_t *p = rec_add(&w, NAMES[d], d, XSHAPES[r].ndim, XSHAPES[r].shape);
            cr_assert_not_null(p, "%s", w.error);
            fill_pattern(d, p, count_of(XSHAPES[r].ndim, XSHAPES[r].shape));
        }
        size_t n = rec_finish(&w);
        cr_assert_gt(n, 0, "%s", w.error);
        used += n;
    }
    used += rec_write_eos(buf + used, cap - used, ARRAY_LEN(XSHAPES), false);
    *len = used;
    return buf;
}

static void check_json_record(json_t *rec, size_t r)
{
    cr_assert_not_null(rec);
    cr_assert_eq(json_integer_value(json_object_get(rec, "seq")), (json_int_t)r);
    if (r == ARRAY_LEN(XSHAPES)) {
        cr_assert_str_eq(json_string_value(json_object_get(rec, "kind")), "eos");
        cr_assert_eq(json_array_size(json_object_get(rec, "tensors")), 0);
        return;
    }
    cr_assert_str_eq(json_string_value(json_object_get(rec, "kind")), "data");
    cr_assert_eq(json_integer_value(json_object_get(rec, "epoch")), 7);
    json_t *tensors = json_object_get(rec, "tensors");
    cr_assert_eq(json_array_size(tensors), 10);
    for (int d = 1; d <= 10; d++) {
        json_t *t = json_array_get(tensors, (size_t)d - 1);
        cr_assert_str_eq(json_string_value(json_object_get(t, "name")), NAMES[d]);
        cr_assert_str_eq(json_string_value(json_object_get(t, "dtype")), NAMES[d]);
        json_t *shape = json_object_get(t, "shape");
        cr_assert_eq(json_array_size(shape), (size_t)XSHAPES[r].ndim);
        for (int k = 0; k < XSHAPES[r].ndim; k++)
            cr_assert_eq(json_integer_value(json_array_get(shape, (size_t)k)), (json_int_t)XSHAPES[r].shape[k]);
        json_t *values = json_object_get(t, "values");
        uint64_t count = count_of(XSHAPES[r].ndim, XSHAPES[r].shape);
        cr_assert_eq(json_array_size(values), count, "record %zu %s", r, NAMES[d]);
        for (size_t i = 0; i < count; i++) {
            json_t *jv = json_array_get(values, i);
            double got = json_is_boolean(jv) ? json_is_true(jv) : json_number_value(jv);
            cr_assert_eq(json_is_boolean(jv), d == REC_BOOL, "%s value type", NAMES[d]);
            cr_assert_eq(got, pattern_value(d, i), "record %zu %s[%zu]: %g != %g", r, NAMES[d], i, got,
                         pattern_value(d, i));
        }
    }
}

Test(record, c_writes_python_reads)
{
    size_t len;
    uint8_t *buf = write_cross_records(&len);
    char *dir = test_make_tmpdir();
    char *path = path_join(dir, "c.rec");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_eq(rec_fd_write(fd, buf, len, NULL), 0);
    close(fd);
    char *tool = test_path("tools/selfsup_records.py");
    char *cmd = xasprintf(PY " %s --json --values -1 %s", tool, path);
    char *out = NULL;
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s failed: %s", cmd, out);
    size_t r = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), r++) {
        json_error_t jerr;
        json_t *rec = json_loads(line, 0, &jerr);
        cr_assert_not_null(rec, "bad JSON from Python: %s (%s)", line, jerr.text);
        check_json_record(rec, r);
        json_decref(rec);
    }
    cr_assert_eq(r, ARRAY_LEN(XSHAPES) + 1, "Python read %zu records", r);
    free(out);
    free(cmd);

    /* and the Python reader rejects what C rejects: a corrupted copy */
    put_le(buf, 64 + 32, 11, 2);
    fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert_eq(rec_fd_write(fd, buf, len, NULL), 0);
    close(fd);
    cmd = xasprintf(PY " %s %s", tool, path);
    rc = test_run(cmd, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "stream offset 0: record seq 0: tensor 'uint8' (#0): unknown dtype code 11"), "%s", out);
    free(out);
    free(cmd);
    free(tool);
    free(path);
    test_rm_dir(dir);
    free(buf);
}

static const char *PY_WRITER =
    "import sys\n"
    "import numpy as np\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "import selfsup_records as sr\n"
    "shapes = [(2, 3), (), (4, 0), (1, 2, 1, 3, 1, 1, 1, 2)]\n"
    "names = ['uint8', 'int8', 'int16', 'int32', 'int64', 'float16', 'bfloat16', 'float32', 'float64', 'bool']\n"
    "with open(sys.argv[2], 'wb') as f:\n"
    "    for r, shape in enumerate(shapes):\n"
    "        i = np.arange(int(np.prod(shape)))\n"
    "        k = (i * 7) % 11\n"
    "        s = k - 5\n"
    "        t = {}\n"
    "        for name in names:\n"
    "            if name == 'uint8':\n"
    "                a = k.astype(np.uint8)\n"
    "            elif name == 'bool':\n"
    "                a = i % 3 == 0\n"
    "            elif name.startswith('int'):\n"
    "                a = s.astype(name)\n"
    "            elif name == 'bfloat16':\n"
    "                t[name] = ('bfloat16', (s * 0.25).astype(np.float32).reshape(shape))\n"
    "                continue\n"
    "            else:\n"
    "                a = (s * 0.25).astype(name)\n"
    "            t[name] = a.reshape(shape)\n"
    "        sr.write_record(f, t, seq=r, epoch=7)\n"
    "    sr.write_eos(f, len(shapes))\n";

Test(record, python_writes_c_reads)
{
    char *script = test_write_temp("write.py", PY_WRITER);
    char *dir = path_dirname(script);
    char *path = path_join(dir, "py.rec");
    char *tools = test_path("tools");
    char *cmd = xasprintf(PY " %s %s %s", script, tools, path);
    char *out = NULL;
    cr_assert_eq(test_run(cmd, &out), 0, "%s: %s", cmd, out);
    free(out);

    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    rec_buf b = {0};
    rec_view v;
    uint64_t offset = 0;
    char *err = NULL;
    for (size_t r = 0; r < ARRAY_LEN(XSHAPES); r++) {
        cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), 1, "record %zu: %s", r, err);
        cr_assert_eq(v.hdr->seq, r);
        cr_assert_eq(v.hdr->epoch, 7);
        cr_assert_eq(v.hdr->n_tensors, 10);
        for (int d = 1; d <= 10; d++) {
            int i = rec_find(&v, NAMES[d]);
            cr_assert_eq(i, d - 1, "%s", NAMES[d]);
            cr_assert_eq(v.tensors[i].dtype, d, "%s", NAMES[d]);
            cr_assert_eq(v.tensors[i].ndim, XSHAPES[r].ndim);
            cr_assert(memcmp(v.tensors[i].shape, XSHAPES[r].shape, sizeof XSHAPES[r].shape) == 0);
            assert_pattern(d, rec_data(&v, i), count_of(XSHAPES[r].ndim, XSHAPES[r].shape));
        }
    }
    cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), 1, "%s", err);
    cr_assert_eq(v.hdr->kind, REC_EOS);
    cr_assert_eq(rec_fd_read(fd, &b, &v, &offset, &err), 0);
    close(fd);
    rec_buf_free(&b);

    /* Both writers lay records out the same way, byte for byte. */
    size_t clen, plen;
    uint8_t *cbuf = write_cross_records(&clen);
    char *pbuf = read_whole_file(path, &plen);
    cr_assert_eq(plen, clen, "Python wrote %zu bytes, C %zu", plen, clen);
    for (size_t i = 0; i < clen; i++)
        cr_assert_eq((uint8_t)pbuf[i], cbuf[i], "byte %zu differs", i);
    free(pbuf);
    free(cbuf);
    free(cmd);
    free(tools);
    free(path);
    test_rm_dir(dir);
    free(script);
}

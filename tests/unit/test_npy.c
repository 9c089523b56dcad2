/*
 * test_npy.c — unit tests for lib/npy: the dtype table, round trips for every dtype and
 * shapes down to 0-d and zero-size, byte identity with numpy.save (fixtures from
 * tests/golden/make_npy_fixtures.py), numpy reading our files (tests/golden/npy_readback.py),
 * refusal of malformed input, and atomic replacement.
 *
 * Fixture values follow formulas (see make_npy_fixtures.py) that fill_pattern recomputes, so
 * the expected bytes live in one place. Fixtures are found under $SELFSUP_SRC, else the
 * current directory (the repository root when `make unit` runs).
 */
#include "npy.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------------- */


/* The make_npy_fixtures.py formula for element i, stored as dtype d at out. */
static void put_pattern(npy_dtype d, size_t i, void *out)
{
    int k = (int)((i * 7) % 11), s = k - 5;
    double f = s * 0.25;
    switch (d) {
    case NPY_F4: { float v = (float)f; memcpy(out, &v, 4); break; }
    case NPY_F8: memcpy(out, &f, 8); break;
    case NPY_F2: { uint16_t v = test_half_exact((float)f); memcpy(out, &v, 2); break; }
    case NPY_I1: { int8_t v = (int8_t)s; memcpy(out, &v, 1); break; }
    case NPY_I2: { int16_t v = (int16_t)s; memcpy(out, &v, 2); break; }
    case NPY_I4: { int32_t v = s; memcpy(out, &v, 4); break; }
    case NPY_I8: { int64_t v = s; memcpy(out, &v, 8); break; }
    case NPY_U1: { uint8_t v = (uint8_t)k; memcpy(out, &v, 1); break; }
    case NPY_U2: { uint16_t v = (uint16_t)k; memcpy(out, &v, 2); break; }
    case NPY_U4: { uint32_t v = (uint32_t)k; memcpy(out, &v, 4); break; }
    case NPY_U8: { uint64_t v = (uint64_t)k; memcpy(out, &v, 8); break; }
    case NPY_B1: { uint8_t v = i % 3 == 0; memcpy(out, &v, 1); break; }
    default: cr_assert_fail("bad dtype %d", (int)d);
    }
}

static void *pattern(npy_dtype d, size_t count)
{
    size_t item = npy_dtype_size(d);
    char *buf = xmalloc(count * item);
    for (size_t i = 0; i < count; i++)
        put_pattern(d, i, buf + i * item);
    return buf;
}

static void assert_shape(const npy_array *a, npy_dtype d, int ndim, const size_t *shape)
{
    cr_assert_eq(a->dtype, d, "dtype %s, expected %s", npy_dtype_name(a->dtype),
                 npy_dtype_name(d));
    cr_assert_eq(a->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(a->shape[i], shape[i], "dim %d: %zu != %zu", i, a->shape[i], shape[i]);
    cr_assert_eq(a->count, test_shape_count(ndim, shape));
    cr_assert_eq(a->nbytes, a->count * npy_dtype_size(d));
    if (a->nbytes)
        cr_assert_eq((uintptr_t)a->data % npy_dtype_size(d), 0, "data is not aligned");
}

static void assert_pattern(const npy_array *a)
{
    void *want = pattern(a->dtype, a->count);
    cr_assert(memcmp(a->data, want, a->nbytes) == 0, "values differ from the pattern");
    free(want);
}

static void assert_same_bytes(const char *a, const char *b)
{
    size_t la, lb;
    char *x = read_whole_file(a, &la), *y = read_whole_file(b, &lb);
    cr_assert_not_null(x, "%s: %s", a, strerror(errno));
    cr_assert_not_null(y, "%s: %s", b, strerror(errno));
    cr_assert_eq(la, lb, "%s is %zu bytes, %s is %zu", a, la, b, lb);
    cr_assert(memcmp(x, y, la) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* A v1.0 file image with the given header text, padded as numpy pads. */
static char *make_image(const char *header, const void *payload, size_t plen, size_t *len)
{
    size_t h = strlen(header);
    size_t field = h + 1 + (64 - (10 + h + 1) % 64) % 64;
    *len = 10 + field + plen;
    char *b = xmalloc(*len);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (char)(field & 0xff);
    b[9] = (char)(field >> 8);
    memset(b + 10, ' ', field);
    memcpy(b + 10, header, h);
    b[10 + field - 1] = '\n';
    if (plen)
        memcpy(b + 10 + field, payload, plen);
    return b;
}

/* Parse an image and expect failure with `needle` in the message. */
static void expect_parse_error(const void *buf, size_t len, const char *needle)
{
    npy_array a;
    char *err = NULL;
    cr_assert_eq(npy_parse(buf, len, "img.npy", &a, &err), -1, "accepted; wanted \"%s\"",
                 needle);
    cr_assert_not_null(err);
    cr_assert(strstr(err, "img.npy"), "message lacks the file name: %s", err);
    cr_assert(strstr(err, needle), "message \"%s\" lacks \"%s\"", err, needle);
    free(err);
}

static void expect_header_error(const char *header, size_t plen, const char *needle)
{
    char payload[64] = {0};
    size_t len;
    char *img = make_image(header, payload, plen, &len);
    expect_parse_error(img, len, needle);
    free(img);
}

/* ---- dtype table ------------------------------------------------------------------------ */

Test(npy, dtype_table)
{
    static const char *names[] = {"f4", "f8", "i4", "i8", "u1", "i1",
                                  "u2", "i2", "u4", "u8", "f2", "b1"};
    static const size_t sizes[] = {4, 8, 4, 8, 1, 1, 2, 2, 4, 8, 2, 1};
    cr_assert_eq(ARRAY_LEN(names), NPY_DTYPE_COUNT);
    for (int i = 0; i < NPY_DTYPE_COUNT; i++) {
        npy_dtype d;
        cr_assert(npy_dtype_from_name(names[i], &d));
        cr_assert_eq(d, (npy_dtype)i);
        cr_assert_str_eq(npy_dtype_name(d), names[i]);
        cr_assert_eq(npy_dtype_size(d), sizes[i]);
        cr_assert_eq(strlen(npy_dtype_descr(d)), 3);
        cr_assert_str_eq(npy_dtype_descr(d) + 1, names[i]);
    }
    npy_dtype d;
    cr_assert_not(npy_dtype_from_name("f16", &d));
    cr_assert_eq(npy_dtype_size(NPY_DTYPE_COUNT), 0);
    cr_assert_str_eq(npy_dtype_descr(NPY_U1), "|u1");
    cr_assert_str_eq(npy_dtype_descr(NPY_B1), "|b1");
}

/* ---- numpy fixtures: read them, and write identical bytes ------------------------------- */

typedef struct {
    const char *file;
    npy_dtype dtype;
    int ndim;
    size_t shape[12];
} fixture_case;

static const fixture_case FIXTURES[] = {
    {"f4_2x3.npy", NPY_F4, 2, {2, 3}},
    {"f8_2x3.npy", NPY_F8, 2, {2, 3}},
    {"i4_2x3.npy", NPY_I4, 2, {2, 3}},
    {"i8_2x3.npy", NPY_I8, 2, {2, 3}},
    {"u1_2x3.npy", NPY_U1, 2, {2, 3}},
    {"i1_2x3.npy", NPY_I1, 2, {2, 3}},
    {"u2_2x3.npy", NPY_U2, 2, {2, 3}},
    {"i2_2x3.npy", NPY_I2, 2, {2, 3}},
    {"u4_2x3.npy", NPY_U4, 2, {2, 3}},
    {"u8_2x3.npy", NPY_U8, 2, {2, 3}},
    {"f2_2x3.npy", NPY_F2, 2, {2, 3}},
    {"b1_2x3.npy", NPY_B1, 2, {2, 3}},
    {"f4_scalar.npy", NPY_F4, 0, {0}},
    {"f8_5.npy", NPY_F8, 1, {5}},
    {"i4_2x3x4.npy", NPY_I4, 3, {2, 3, 4}},
    {"i1_1.npy", NPY_I1, 1, {1}},
    {"f4_empty_0.npy", NPY_F4, 1, {0}},
    {"i8_empty_2x0x3.npy", NPY_I8, 3, {2, 0, 3}},
    {"u1_empty_12345x0.npy", NPY_U1, 2, {12345, 0}},
    {"f4_empty_bigdim.npy", NPY_F4, 2, {1000000000000000ull, 0}},
    {"u1_pad64.npy", NPY_U1, 11, {0, 10, 10, 10, 10, 10, 10, 10, 10, 10, 100}},
};

static void check_fixture(const fixture_case *c, bool mapped)
{
    char *path = test_fixture("npy", c->file), *err = NULL;
    npy_array a;
    int rc = mapped ? npy_open(path, &a, &err) : npy_read(path, &a, &err);
    cr_assert_eq(rc, 0, "%s", err ? err : "?");
    assert_shape(&a, c->dtype, c->ndim, c->shape);
    assert_pattern(&a);
    npy_close(&a);
    free(path);
}

Test(npy, numpy_fixtures_read_mapped)
{
    for (size_t i = 0; i < ARRAY_LEN(FIXTURES); i++)
        check_fixture(&FIXTURES[i], true);
}

Test(npy, numpy_fixtures_read_into_memory)
{
    for (size_t i = 0; i < ARRAY_LEN(FIXTURES); i++)
        check_fixture(&FIXTURES[i], false);
}

Test(npy, numpy_fixtures_write_identical)
{
    char *dir = test_make_tmpdir();
    for (size_t i = 0; i < ARRAY_LEN(FIXTURES); i++) {
        const fixture_case *c = &FIXTURES[i];
        void *data = pattern(c->dtype, test_shape_count(c->ndim, c->shape));
        char *ours = path_join(dir, c->file), *theirs = test_fixture("npy", c->file), *err = NULL;
        cr_assert_eq(npy_write(ours, c->dtype, c->ndim, c->shape, data, &err), 0, "%s", err);
        assert_same_bytes(ours, theirs);
        /* npy_header is the file's prefix */
        size_t hlen, flen;
        char *h = npy_header(c->dtype, c->ndim, c->shape, &hlen, &err);
        char *f = read_whole_file(theirs, &flen);
        cr_assert_not_null(h, "%s", err);
        cr_assert_eq(hlen % 64, 0);
        cr_assert_eq(flen - hlen, test_shape_count(c->ndim, c->shape) * npy_dtype_size(c->dtype));
        cr_assert(memcmp(h, f, hlen) == 0);
        free(h);
        free(f);
        free(ours);
        free(theirs);
        free(data);
    }
    test_rm_dir(dir);
}

/* Fixtures with explicit values: read them, then write the same values and compare. */
static void check_explicit(const char *file, npy_dtype d, const void *values, size_t n)
{
    char *path = test_fixture("npy", file), *err = NULL;
    npy_array a;
    cr_assert_eq(npy_open(path, &a, &err), 0, "%s", err);
    size_t shape[1] = {n};
    assert_shape(&a, d, 1, shape);
    cr_assert(memcmp(a.data, values, a.nbytes) == 0, "%s: values differ", file);
    npy_close(&a);
    char *dir = test_make_tmpdir(), *ours = path_join(dir, file);
    cr_assert_eq(npy_write(ours, d, 1, shape, values, &err), 0, "%s", err);
    assert_same_bytes(ours, path);
    free(ours);
    test_rm_dir(dir);
    free(path);
}

Test(npy, numpy_fixtures_extremes)
{
    int64_t i8[] = {INT64_MIN, INT64_MAX, 0, -1};
    uint64_t u8[] = {0, UINT64_MAX, 1, 1ull << 63};
    int32_t i4[] = {INT32_MIN, INT32_MAX, 0, -1};
    uint32_t f4[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x80000000u, 0x00000001u,
                     0x7f7fffffu}; /* nan inf -inf -0 1e-45 max, as bit patterns */
    check_explicit("i8_extremes.npy", NPY_I8, i8, 4);
    check_explicit("u8_extremes.npy", NPY_U8, u8, 4);
    check_explicit("i4_extremes.npy", NPY_I4, i4, 4);
    check_explicit("f4_special.npy", NPY_F4, f4, 6);
}

/* Valid files numpy reads that our writer would write differently. */
Test(npy, numpy_fixtures_other_forms)
{
    static const fixture_case cases[] = {
        {"read_f4_v2.npy", NPY_F4, 2, {2, 3}},
        {"read_f4_v3.npy", NPY_F4, 2, {2, 3}},
        {"read_f4_fortran_row.npy", NPY_F4, 2, {1, 3}},
        {"read_i4_py2.npy", NPY_I4, 2, {2, 3}},
        {"read_f8_reordered.npy", NPY_F8, 1, {5}},
        {"read_f8_misaligned.npy", NPY_F8, 1, {5}},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        check_fixture(&cases[i], true);
        check_fixture(&cases[i], false);
    }
}

static void expect_file_error(const char *path, const char *needle)
{
    for (int mapped = 0; mapped < 2; mapped++) {
        npy_array a;
        char *err = NULL;
        int rc = mapped ? npy_open(path, &a, &err) : npy_read(path, &a, &err);
        cr_assert_eq(rc, -1, "%s: accepted", path);
        cr_assert(strstr(err, path), "message lacks the path: %s", err);
        cr_assert(strstr(err, needle), "message \"%s\" lacks \"%s\"", err, needle);
        free(err);
    }
}

Test(npy, numpy_fixtures_refused)
{
    static const char *cases[][2] = {
        {"bad_f4_fortran.npy", "Fortran order"},
        {"bad_f4_bigendian.npy", "big-endian"},
        {"bad_unicode.npy", "unsupported dtype '<U2'"},
        {"bad_structured.npy", "structured"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char *p = test_fixture("npy", cases[i][0]);
        expect_file_error(p, cases[i][1]);
        free(p);
    }
}

/* ---- round trips ------------------------------------------------------------------------ */

typedef struct {
    int ndim;
    size_t shape[4];
} shape_case;

static const shape_case SHAPES[] = {
    {0, {0}}, {1, {0}}, {1, {7}}, {2, {3, 4}}, {3, {2, 0, 3}}, {4, {2, 3, 4, 5}}, {2, {1, 1}},
};

Test(npy, round_trip_every_dtype_and_shape)
{
    char *dir = test_make_tmpdir();
    for (int d = 0; d < NPY_DTYPE_COUNT; d++) {
        for (size_t s = 0; s < ARRAY_LEN(SHAPES); s++) {
            const shape_case *c = &SHAPES[s];
            size_t n = test_shape_count(c->ndim, c->shape);
            void *data = pattern((npy_dtype)d, n);
            char *path = xasprintf("%s/%s_%zu.npy", dir, npy_dtype_name((npy_dtype)d), s);
            char *err = NULL;
            cr_assert_eq(npy_write(path, (npy_dtype)d, c->ndim, c->shape, data, &err), 0,
                         "%s", err);
            for (int mapped = 0; mapped < 2; mapped++) {
                npy_array a;
                int rc = mapped ? npy_open(path, &a, &err) : npy_read(path, &a, &err);
                cr_assert_eq(rc, 0, "%s", err);
                assert_shape(&a, (npy_dtype)d, c->ndim, c->shape);
                cr_assert(n == 0 || memcmp(a.data, data, a.nbytes) == 0);
                npy_close(&a);
                npy_close(&a); /* idempotent */
            }
            free(path);
            free(data);
        }
    }
    cr_assert_eq(test_count_files(dir), NPY_DTYPE_COUNT * ARRAY_LEN(SHAPES), "temp files left");
    test_rm_dir(dir);
}

Test(npy, write_empty_array_without_data)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "e.npy"), *err = NULL;
    size_t shape[] = {0, 5};
    cr_assert_eq(npy_write(path, NPY_F4, 2, shape, NULL, &err), 0, "%s", err);
    size_t one[] = {1};
    cr_assert_eq(npy_write(path, NPY_F4, 1, one, NULL, &err), -1);
    cr_assert(strstr(err, "no data"), "%s", err);
    free(err);
    free(path);
    test_rm_dir(dir);
}

Test(npy, write_argument_errors)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "x.npy"), *err = NULL;
    size_t shape[40] = {0};
    float v = 0;
    cr_assert_eq(npy_write(path, NPY_F4, 33, shape, &v, &err), -1);
    cr_assert(strstr(err, "dimensions"), "%s", err);
    free(err);
    cr_assert_eq(npy_write(path, (npy_dtype)99, 0, shape, &v, &err), -1);
    cr_assert(strstr(err, "dtype"), "%s", err);
    free(err);
    size_t huge[] = {SIZE_MAX / 2, 4};
    cr_assert_eq(npy_write(path, NPY_F4, 2, huge, &v, &err), -1);
    cr_assert(strstr(err, "overflows"), "%s", err);
    free(err);
    cr_assert_eq(test_count_files(dir), 0);
    free(path);
    test_rm_dir(dir);
}

/* ---- atomic replacement ----------------------------------------------------------------- */

Test(npy, write_replaces_atomically)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "a.npy"), *err = NULL;
    size_t s1[] = {3}, s2[] = {2, 2};
    int32_t a[] = {1, 2, 3}, b[] = {4, 5, 6, 7};
    cr_assert_eq(npy_write(path, NPY_I4, 1, s1, a, &err), 0, "%s", err);
    cr_assert_eq(npy_write(path, NPY_I4, 2, s2, b, &err), 0, "%s", err);
    npy_array arr;
    cr_assert_eq(npy_open(path, &arr, &err), 0, "%s", err);
    assert_shape(&arr, NPY_I4, 2, s2);
    cr_assert(memcmp(arr.data, b, sizeof b) == 0);
    npy_close(&arr);
    cr_assert_eq(test_count_files(dir), 1, "temporary files were left behind");
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    cr_assert_eq(st.st_mode & 0777, 0666 & ~mask, "mode %o", st.st_mode & 0777);
    free(path);
    test_rm_dir(dir);
}

Test(npy, write_into_missing_directory_fails_cleanly)
{
    char *err = NULL;
    size_t s[] = {1};
    float v = 1;
    cr_assert_eq(npy_write("/nonexistent-dir/x.npy", NPY_F4, 1, s, &v, &err), -1);
    cr_assert(strstr(err, "/nonexistent-dir/x.npy"), "%s", err);
    cr_assert(strstr(err, "No such file"), "%s", err);
    free(err);
}

Test(npy, null_err_logs_instead)
{
    npy_array a;
    cr_assert_eq(npy_open("/nonexistent-dir/x.npy", &a, NULL), -1);
}

/* ---- malformed input -------------------------------------------------------------------- */

static const char GOOD[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

Test(npy, every_truncation_is_refused)
{
    float v[6] = {1, 2, 3, 4, 5, 6};
    size_t len;
    char *img = make_image(GOOD, v, sizeof v, &len);
    npy_array a;
    char *err = NULL;
    cr_assert_eq(npy_parse(img, len, "img.npy", &a, &err), 0, "%s", err);
    npy_close(&a);
    for (size_t n = 0; n < len; n++) {
        /* a private copy of exactly n bytes, so ASan catches any read past the end */
        char *cut = xmalloc(n ? n : 1);
        memcpy(cut, img, n);
        cr_assert_eq(npy_parse(cut, n, "img.npy", &a, &err), -1, "accepted %zu bytes", n);
        free(err);
        free(cut);
    }
    free(img);
}

Test(npy, bad_magic_and_version)
{
    float v[6] = {0};
    size_t len;
    char *img = make_image(GOOD, v, sizeof v, &len);
    img[1] = 'n';
    expect_parse_error(img, len, "bad magic");
    img[1] = 'N';
    img[6] = 4;
    expect_parse_error(img, len, "version 4.0");
    img[6] = 1;
    img[7] = 1;
    expect_parse_error(img, len, "version 1.1");
    free(img);
    expect_parse_error("\x93NUM", 4, "too short");
}

Test(npy, header_length_past_end)
{
    float v[6] = {0};
    size_t len;
    char *img = make_image(GOOD, v, sizeof v, &len);
    img[8] = (char)0xff;
    img[9] = (char)0xff;
    expect_parse_error(img, len, "runs past the end");
    /* version 2.0 with a 4 GiB header length */
    char v2[16] = "\x93NUMPY\x02\x00\xff\xff\xff\xff{}";
    expect_parse_error(v2, 14, "runs past the end");
    free(img);
}

Test(npy, payload_size_mismatch)
{
    expect_header_error(GOOD, 20, "payload is 20 bytes but shape and dtype '<f4' need 24");
    expect_header_error(GOOD, 28, "trailing bytes");
    expect_header_error(GOOD, 0, "file truncated?");
}

Test(npy, bad_descr)
{
    expect_header_error("{'descr': '<f3', 'fortran_order': False, 'shape': (), }", 0,
                        "unsupported dtype '<f3'");
    expect_header_error("{'descr': '>i8', 'fortran_order': False, 'shape': (), }", 8,
                        "big-endian");
    expect_header_error("{'descr': 'O', 'fortran_order': False, 'shape': (), }", 8,
                        "unsupported dtype 'O'");
    expect_header_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }", 4,
                        "structured");
}

Test(npy, byte_order_marks_accepted)
{
    static const char *headers[] = {
        "{'descr': '>u1', 'fortran_order': False, 'shape': (4,), }",
        "{'descr': '=u1', 'fortran_order': False, 'shape': (4,), }",
        "{'descr': 'u1', 'fortran_order': False, 'shape': (4,), }",
        "{'descr':'|u1','fortran_order':False,'shape':(4,)}",
        "{\n 'descr' : \"|u1\" ,\n 'fortran_order' : True ,\n 'shape' : ( 4 , ) ,\n}",
    };
    unsigned char v[4] = {1, 2, 3, 4};
    for (size_t i = 0; i < ARRAY_LEN(headers); i++) {
        size_t len;
        char *img = make_image(headers[i], v, 4, &len);
        npy_array a;
        char *err = NULL;
        cr_assert_eq(npy_parse(img, len, "img.npy", &a, &err), 0, "%s: %s", headers[i], err);
        cr_assert_eq(a.dtype, NPY_U1);
        cr_assert_eq(a.count, 4);
        cr_assert(memcmp(a.data, v, 4) == 0);
        npy_close(&a);
        free(img);
    }
}

Test(npy, bad_dict_syntax)
{
    static const char *cases[][2] = {
        {"'descr': '<f4', 'fortran_order': False, 'shape': (), ", "expected '{'"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (), }", "expected ',' or '}'"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (), }", "expected ':'"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (), }", "expected"},
        {"{descr: '<f4', 'fortran_order': False, 'shape': (), }", "a quoted string"},
        {"{'descr': '<f4', 'fortran_order': false, 'shape': (), }", "True or False"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (), }", "True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", "a shape tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", "non-negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", "',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (,), }", "non-negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6.0,), }", "',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x", "only padding"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", "unexpected key 'x'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", "repeats"},
        {"{'descr': '<f4', 'shape': (6,)}", "lacks 'fortran_order'"},
        {"{'fortran_order': False, 'shape': (6,)}", "lacks 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False}", "lacks 'shape'"},
        {"{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (6,)}", "escapes"},
        {"{", "a quoted string"},
        {"", "expected '{'"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        expect_header_error(cases[i][0], 24, cases[i][1]);
}

Test(npy, shape_overflow_and_rank)
{
    expect_header_error(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", 0,
        "too large for this machine");
    expect_header_error(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }", 0,
        "element count overflows");
    expect_header_error(
        "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }", 0,
        "byte count overflows");
    strbuf sb = {0};
    sb_puts(&sb, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < 33; i++)
        sb_puts(&sb, "1, ");
    sb_puts(&sb, "), }");
    expect_header_error(sb.s, 4, "more than 32 dimensions");
    sb_free(&sb);
    /* 32 is fine */
    sb_puts(&sb, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < 32; i++)
        sb_puts(&sb, "1, ");
    sb_puts(&sb, "), }");
    float v = 1;
    size_t len;
    char *img = make_image(sb.s, &v, 4, &len);
    npy_array a;
    char *err = NULL;
    cr_assert_eq(npy_parse(img, len, "img.npy", &a, &err), 0, "%s", err);
    cr_assert_eq(a.ndim, 32);
    npy_close(&a);
    free(img);
    sb_free(&sb);
}

Test(npy, fortran_order)
{
    expect_header_error("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24,
                        "Fortran order");
    /* layouts that coincide with C order are accepted */
    static const char *ok[] = {
        "{'descr': '<f4', 'fortran_order': True, 'shape': (6,), }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 6, 1), }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (), }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 0, 3), }",
    };
    static const size_t plen[] = {24, 24, 4, 0};
    char payload[24] = {0};
    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        size_t len;
        char *img = make_image(ok[i], payload, plen[i], &len);
        npy_array a;
        char *err = NULL;
        cr_assert_eq(npy_parse(img, len, "img.npy", &a, &err), 0, "%s: %s", ok[i], err);
        npy_close(&a);
        free(img);
    }
}

Test(npy, file_errors)
{
    expect_file_error("/nonexistent-dir/x.npy", "cannot open");
    char *dir = test_make_tmpdir();
    expect_file_error(dir, "not a regular file");
    char *empty = path_join(dir, "empty.npy");
    FILE *f = fopen(empty, "w");
    fclose(f);
    expect_file_error(empty, "not a .npy file");
    free(empty);
    test_rm_dir(dir);
}

/* A 3 GiB array in a sparse file: sizes past 2^31 and 2^32 go through size_t/off_t. */
Test(npy, open_over_2gib_sparse)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "big.npy"), *err = NULL;
    size_t shape[] = {3ull << 30}, hlen;
    char *h = npy_header(NPY_U1, 1, shape, &hlen, &err);
    cr_assert_not_null(h, "%s", err);
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(h, 1, hlen, f), hlen);
    fclose(f);
    cr_assert_eq(truncate(path, (off_t)(hlen + shape[0])), 0, "%s", strerror(errno));
    npy_array a;
    cr_assert_eq(npy_open(path, &a, &err), 0, "%s", err);
    cr_assert_eq(a.count, 3ull << 30);
    cr_assert_eq(a.nbytes, 3ull << 30);
    cr_assert_eq(((unsigned char *)a.data)[a.nbytes - 1], 0);
    npy_close(&a);
    /* one byte short is refused with the exact sizes */
    cr_assert_eq(truncate(path, (off_t)(hlen + shape[0] - 1)), 0);
    cr_assert_eq(npy_open(path, &a, &err), -1);
    cr_assert(strstr(err, "payload is 3221225471 bytes"), "%s", err);
    free(err);
    free(h);
    free(path);
    test_rm_dir(dir);
}

/* ---- numpy reads what we write ---------------------------------------------------------- */

static bool have_numpy(void)
{
    return system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

Test(npy, numpy_reads_our_files)
{
    if (!have_numpy())
        cr_skip_test("/usr/bin/python3 with numpy is not installed (make deps)");
    char *dir = test_make_tmpdir(), *err = NULL;
    char *manifest_path = path_join(dir, "manifest.txt");
    FILE *manifest = fopen(manifest_path, "w");
    cr_assert_not_null(manifest);
    for (int d = 0; d < NPY_DTYPE_COUNT; d++) {
        for (size_t s = 0; s < ARRAY_LEN(SHAPES); s++) {
            const shape_case *c = &SHAPES[s];
            void *data = pattern((npy_dtype)d, test_shape_count(c->ndim, c->shape));
            char *name = xasprintf("%s_%zu.npy", npy_dtype_name((npy_dtype)d), s);
            char *path = path_join(dir, name);
            cr_assert_eq(npy_write(path, (npy_dtype)d, c->ndim, c->shape, data, &err), 0,
                         "%s", err);
            fprintf(manifest, "%s %s", name, npy_dtype_name((npy_dtype)d));
            for (int i = 0; i < c->ndim; i++)
                fprintf(manifest, " %zu", c->shape[i]);
            fputc('\n', manifest);
            free(name);
            free(path);
            free(data);
        }
    }
    fclose(manifest);
    char *script = test_path("tests/golden/npy_readback.py");
    char *cmd = xasprintf("/usr/bin/python3 '%s' '%s'", script, dir);
    free(script);
    int status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status %d)", cmd,
              status);
    free(cmd);
    free(manifest_path);
    test_rm_dir(dir);
}

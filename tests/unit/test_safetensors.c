/*
 * test_safetensors.c — unit tests for lib/safetensors: the reference implementation's own
 * serialization vectors, fixtures built by tests/golden/make_safetensors_fixture.py (read
 * them, write identical bytes), round trips of every dtype, writer argument errors, every
 * reader rule (header bounds, JSON, dtypes, offsets tiling the buffer), and a read-back of our
 * files by tests/golden/safetensors_readback.py (struct + json + numpy).
 *
 * Pattern values are the make_safetensors_fixture.py formula, recomputed by put_pattern.
 */
#include "safetensors.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static size_t elements(int ndim, const size_t *shape)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* Element i of the fixture formula, as dtype d, little-endian at out. */
static void put_pattern(st_dtype d, size_t i, unsigned char *out)
{
    int64_t k = (int64_t)((i * 7) % 11), s = k - 5;
    float f = (float)s * 0.25f;
    uint64_t v;
    switch (d) {
    case ST_F32: v = f32_bits(f); break;
    case ST_F64: { double x = f; memcpy(&v, &x, 8); break; }
    case ST_F16: v = test_half_exact(f); break;
    case ST_BF16: v = f32_bits(f) >> 16; break;
    case ST_I8: case ST_I16: case ST_I32: case ST_I64: v = (uint64_t)s; break;
    case ST_BOOL: v = i % 3 == 0; break;
    default: v = (uint64_t)k; break; /* unsigned and F8: the byte k */
    }
    for (size_t b = 0; b < st_dtype_size(d); b++)
        out[b] = (unsigned char)(v >> (8 * b));
}

static void *pattern(st_dtype d, size_t count)
{
    size_t item = st_dtype_size(d);
    unsigned char *buf = xmalloc(count * item);
    for (size_t i = 0; i < count; i++)
        put_pattern(d, i, buf + i * item);
    return buf;
}

static void assert_tensor(const st_tensor *t, st_dtype d, int ndim, const size_t *shape)
{
    cr_assert_not_null(t);
    cr_assert_eq(t->dtype, d, "%s: dtype %s, expected %s", t->name, st_dtype_name(t->dtype),
                 st_dtype_name(d));
    cr_assert_eq(t->ndim, ndim, "%s: ndim %d, expected %d", t->name, t->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(t->shape[i], shape[i], "%s: dim %d", t->name, i);
    size_t n = elements(ndim, shape);
    cr_assert_eq(t->nbytes, n * st_dtype_size(d));
    void *want = pattern(d, n);
    cr_assert(memcmp(t->data, want, t->nbytes) == 0, "%s: values differ", t->name);
    free(want);
}

static char *slurp(const char *path, size_t *len)
{
    char *b = read_whole_file(path, len);
    cr_assert_not_null(b, "%s: %s", path, strerror(errno));
    return b;
}

static void assert_file_is(const char *path, const void *bytes, size_t len)
{
    size_t got;
    char *b = slurp(path, &got);
    cr_assert_eq(got, len, "%s is %zu bytes, expected %zu", path, got, len);
    cr_assert(memcmp(b, bytes, len) == 0, "%s: bytes differ", path);
    free(b);
}

static void assert_same_files(const char *a, const char *b)
{
    size_t len;
    char *x = slurp(b, &len);
    assert_file_is(a, x, len);
    free(x);
}

/* A file image: 8-byte length, the header text (padded with `pad` spaces), then `data_len`
 * bytes of the pattern 0, 1, 2, ... */
static unsigned char *make_image(const char *header, size_t pad, size_t data_len, size_t *len)
{
    size_t h = strlen(header) + pad;
    *len = 8 + h + data_len;
    unsigned char *b = xmalloc(*len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memset(b + 8, ' ', h);
    memcpy(b + 8, header, strlen(header));
    for (size_t i = 0; i < data_len; i++)
        b[8 + h + i] = (unsigned char)i;
    return b;
}

static void expect_error(const char *header, size_t data_len, const char *needle)
{
    size_t len;
    unsigned char *img = make_image(header, 0, data_len, &len);
    st_file *f = (st_file *)1;
    char *err = NULL;
    cr_assert_eq(st_parse(img, len, "img.safetensors", &f, &err), -1,
                 "accepted %s; wanted \"%s\"", header, needle);
    cr_assert_null(f);
    cr_assert(strstr(err, "img.safetensors"), "message lacks the name: %s", err);
    cr_assert(strstr(err, needle), "message \"%s\" lacks \"%s\"", err, needle);
    free(err);
    free(img);
}

static void expect_ok(const char *header, size_t data_len)
{
    size_t len;
    unsigned char *img = make_image(header, 0, data_len, &len);
    st_file *f;
    char *err = NULL;
    cr_assert_eq(st_parse(img, len, "img.safetensors", &f, &err), 0, "%s: %s", header, err);
    st_close(f);
    free(img);
}

/* ---- dtype table ------------------------------------------------------------------------ */

Test(safetensors, dtype_table)
{
    static const char *names[] = {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                  "BF16", "I32", "U32", "F32", "F64", "I64", "U64"};
    static const size_t sizes[] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
    cr_assert_eq(ARRAY_LEN(names), ST_DTYPE_COUNT);
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        st_dtype d;
        cr_assert(st_dtype_from_name(names[i], &d));
        cr_assert_eq(d, (st_dtype)i);
        cr_assert_str_eq(st_dtype_name(d), names[i]);
        cr_assert_eq(st_dtype_size(d), sizes[i]);
    }
    st_dtype d;
    cr_assert_not(st_dtype_from_name("f32", &d));
    cr_assert_eq(st_dtype_size(ST_DTYPE_COUNT), 0);
}

/* ---- the reference implementation's serialization vectors ------------------------------ */

/* Write tensors and compare with 8-byte length + header + data given literally. */
static void expect_serialized(const st_tensor *t, size_t n, const st_meta *meta, size_t n_meta,
                              const char *header, const void *data, size_t data_len)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "v.safetensors"), *err = NULL;
    cr_assert_eq(st_write(path, t, n, meta, n_meta, &err), 0, "%s", err);
    size_t len;
    unsigned char *want = make_image(header, 0, 0, &len);
    want = xrealloc(want, len + data_len);
    if (data_len)
        memcpy(want + len, data, data_len);
    assert_file_is(path, want, len + data_len);
    free(want);
    free(path);
    test_rm_dir(dir);
}

Test(safetensors, reference_vectors)
{
    float v[6] = {0, 1, 2, 3, 4, 5};
    size_t s3[] = {1, 2, 3}, s4[] = {1, 1, 2, 3};
    st_tensor attn = {.name = "attn.0", .dtype = ST_F32, .ndim = 3, .shape = s3, .data = v};
    /* tensor.rs test_serialization: 64-byte header, no padding needed */
    expect_serialized(&attn, 1, NULL, 0,
                      "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}",
                      v, sizeof v);
    /* test_serialization_forced_alignement: 65 bytes of JSON padded to 72 */
    st_tensor attn0 = {.name = "attn0", .dtype = ST_F32, .ndim = 4, .shape = s4, .data = v};
    expect_serialized(&attn0, 1, NULL, 0,
                      "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}"
                      "       ",
                      v, sizeof v);
    /* test_empty, without and with metadata */
    expect_serialized(NULL, 0, NULL, 0, "{}      ", NULL, 0);
    st_meta m = {"framework", "pt"};
    expect_serialized(NULL, 0, &m, 1, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", NULL, 0);
}

/* ---- fixtures --------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    size_t shape[4];
} tensor_case;

/* make_safetensors_fixture.py's MIX. */
static const tensor_case MIX[] = {
    {"trunk._feature_blocks.conv1.weight", ST_F32, 4, {4, 3, 2, 2}},
    {"trunk._feature_blocks.bn1.running_var", ST_F64, 1, {4}},
    {"trunk._feature_blocks.bn1.num_batches_tracked", ST_I64, 0, {0}},
    {"heads.0.clf.0.weight", ST_F16, 2, {3, 5}},
    {"heads.0.clf.0.bias", ST_BF16, 1, {3}},
    {"loss.queue", ST_F32, 2, {0, 8}},
    {"loss.queue_ptr", ST_I32, 1, {1}},
    {"train.sampler_position", ST_U64, 1, {2}},
    {"train.rng", ST_U32, 1, {4}},
    {"train.small_i16", ST_I16, 2, {2, 2}},
    {"train.small_u16", ST_U16, 1, {3}},
    {"train.bytes", ST_U8, 1, {7}},
    {"train.signed_bytes", ST_I8, 1, {5}},
    {"train.mask", ST_BOOL, 2, {2, 3}},
    {"train.f8a", ST_F8_E4M3, 1, {2}},
    {"train.f8b", ST_F8_E5M2, 1, {2}},
};

static const st_meta MIX_META[] = {
    {"phase", "3"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}, {"format", "pt"}};

Test(safetensors, fixture_mix_read)
{
    char *path = test_fixture("safetensors", "mix.safetensors"), *err = NULL;
    st_file *f;
    cr_assert_eq(st_open(path, &f, &err), 0, "%s", err);
    cr_assert_eq(st_count(f), ARRAY_LEN(MIX));
    for (size_t i = 0; i < ARRAY_LEN(MIX); i++) {
        const st_tensor *t = st_find(f, MIX[i].name);
        cr_assert_not_null(t, "%s missing", MIX[i].name);
        cr_assert_str_eq(t->name, MIX[i].name);
        assert_tensor(t, MIX[i].dtype, MIX[i].ndim, MIX[i].shape);
        cr_assert(st_aligned(t), "%s is not aligned", t->name);
    }
    cr_assert_null(st_find(f, "trunk"));
    cr_assert_null(st_find(f, ""));
    cr_assert_null(st_at(f, ARRAY_LEN(MIX)));
    /* st_at walks data order: offsets only grow */
    const char *prev = NULL;
    for (size_t i = 0; i < st_count(f); i++) {
        const char *d = st_at(f, i)->data;
        cr_assert(!prev || d >= prev);
        prev = d;
    }
    cr_assert_eq(st_meta_count(f), 3);
    cr_assert_str_eq(st_meta_get(f, "format"), "pt");
    cr_assert_str_eq(st_meta_get(f, "phase"), "3");
    cr_assert_str_eq(st_meta_get(f, "note"), "caf\xc3\xa9 \"quoted\"\n");
    cr_assert_null(st_meta_get(f, "missing"));
    cr_assert_str_eq(st_meta_at(f, 0).key, "format"); /* sorted by key */
    cr_assert_null(st_meta_at(f, 3).key);
    st_close(f);
    free(path);
}

/* The MIX tensors with pattern data, given to the writer in reverse order. */
static st_tensor *mix_tensors(void)
{
    size_t n = ARRAY_LEN(MIX);
    st_tensor *t = xcalloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++) {
        const tensor_case *c = &MIX[n - 1 - i];
        t[i] = (st_tensor){.name = c->name, .dtype = c->dtype, .ndim = c->ndim,
                           .shape = c->shape,
                           .data = pattern(c->dtype, elements(c->ndim, c->shape))};
    }
    return t;
}

static void free_tensors(st_tensor *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free((void *)t[i].data);
    free(t);
}

Test(safetensors, fixture_mix_write_identical)
{
    char *dir = test_make_tmpdir(), *ours = path_join(dir, "mix.safetensors");
    char *theirs = test_fixture("safetensors", "mix.safetensors"), *err = NULL;
    st_tensor *t = mix_tensors();
    cr_assert_eq(st_write(ours, t, ARRAY_LEN(MIX), MIX_META, ARRAY_LEN(MIX_META), &err), 0,
                 "%s", err);
    assert_same_files(ours, theirs);
    cr_assert_eq(test_count_files(dir), 1, "temporary files left behind");
    free_tensors(t, ARRAY_LEN(MIX));
    free(ours);
    free(theirs);
    test_rm_dir(dir);
}

Test(safetensors, fixture_small_files)
{
    char *dir = test_make_tmpdir(), *err = NULL;
    /* no_metadata: one F32 [1, 2, 3] tensor "x" */
    size_t shape[] = {1, 2, 3};
    void *data = pattern(ST_F32, 6);
    st_tensor x = {.name = "x", .dtype = ST_F32, .ndim = 3, .shape = shape, .data = data};
    char *path = test_fixture("safetensors", "no_metadata.safetensors"), *ours = path_join(dir, "a");
    st_file *f;
    cr_assert_eq(st_open(path, &f, &err), 0, "%s", err);
    cr_assert_eq(st_count(f), 1);
    cr_assert_eq(st_meta_count(f), 0);
    assert_tensor(st_find(f, "x"), ST_F32, 3, shape);
    st_close(f);
    cr_assert_eq(st_write(ours, &x, 1, NULL, 0, &err), 0, "%s", err);
    assert_same_files(ours, path);
    free(path);
    free(ours);
    /* empty */
    path = test_fixture("safetensors", "empty.safetensors");
    ours = path_join(dir, "b");
    cr_assert_eq(st_open(path, &f, &err), 0, "%s", err);
    cr_assert_eq(st_count(f), 0);
    cr_assert_null(st_find(f, "x"));
    st_close(f);
    cr_assert_eq(st_write(ours, NULL, 0, NULL, 0, &err), 0, "%s", err);
    assert_same_files(ours, path);
    free(path);
    free(ours);
    free(data);
    test_rm_dir(dir);
}

Test(safetensors, fixture_unordered_reads)
{
    char *path = test_fixture("safetensors", "unordered.safetensors"), *err = NULL;
    st_file *f;
    cr_assert_eq(st_open(path, &f, &err), 0, "%s", err);
    cr_assert_eq(st_count(f), 3);
    size_t s22[] = {2, 2}, s3[] = {3}, s1[] = {1};
    assert_tensor(st_find(f, "a"), ST_F32, 2, s22);
    assert_tensor(st_find(f, "b"), ST_U8, 1, s3);
    assert_tensor(st_find(f, "c"), ST_I64, 1, s1);
    cr_assert_str_eq(st_at(f, 0)->name, "b");
    cr_assert_str_eq(st_at(f, 1)->name, "a");
    cr_assert_str_eq(st_meta_get(f, "who"), "hand");
    cr_assert_not(st_aligned(st_find(f, "a")), "header length is odd, data cannot be aligned");
    st_close(f);
    free(path);
}

/* ---- round trips ------------------------------------------------------------------------ */

static const struct {
    int ndim;
    size_t shape[4];
} SHAPES[] = {{0, {0}}, {1, {0}}, {1, {5}}, {2, {3, 4}}, {3, {2, 0, 3}}, {4, {2, 1, 3, 2}}};

#define N_ROUND (ST_DTYPE_COUNT * ARRAY_LEN(SHAPES))

/* One tensor per dtype and shape, named "<DTYPE>.<shape index>". */
static st_tensor *every_tensor(char names[][32])
{
    st_tensor *t = xcalloc(N_ROUND, sizeof *t);
    size_t n = 0;
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
        for (size_t s = 0; s < ARRAY_LEN(SHAPES); s++, n++) {
            snprintf(names[n], 32, "%s.%zu", st_dtype_name((st_dtype)d), s);
            t[n] = (st_tensor){
                .name = names[n], .dtype = (st_dtype)d, .ndim = SHAPES[s].ndim,
                .shape = SHAPES[s].shape,
                .data = pattern((st_dtype)d, elements(SHAPES[s].ndim, SHAPES[s].shape))};
        }
    }
    return t;
}

Test(safetensors, round_trip_every_dtype_and_shape)
{
    char names[N_ROUND][32], *dir = test_make_tmpdir(), *path = path_join(dir, "r.safetensors");
    char *err = NULL;
    st_tensor *t = every_tensor(names);
    st_meta meta[] = {{"k", "v"}};
    cr_assert_eq(st_write(path, t, N_ROUND, meta, 1, &err), 0, "%s", err);
    st_file *f;
    cr_assert_eq(st_open(path, &f, &err), 0, "%s", err);
    cr_assert_eq(st_count(f), N_ROUND);
    for (size_t i = 0; i < N_ROUND; i++) {
        const st_tensor *r = st_find(f, t[i].name);
        assert_tensor(r, t[i].dtype, t[i].ndim, t[i].shape);
        cr_assert(st_aligned(r), "%s is not aligned", r->name);
    }
    cr_assert_str_eq(st_meta_get(f, "k"), "v");
    st_close(f);
    /* overwrite in place with a smaller file */
    cr_assert_eq(st_write(path, t, 1, NULL, 0, &err), 0, "%s", err);
    cr_assert_eq(st_open(path, &f, &err), 0, "%s", err);
    cr_assert_eq(st_count(f), 1);
    st_close(f);
    cr_assert_eq(test_count_files(dir), 1, "temporary files left behind");
    free_tensors(t, N_ROUND);
    free(path);
    test_rm_dir(dir);
}

Test(safetensors, empty_name_and_null_data)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "e.safetensors"), *err = NULL;
    size_t zero[] = {0, 4};
    st_tensor t = {.name = "", .dtype = ST_F32, .ndim = 2, .shape = zero, .data = NULL};
    cr_assert_eq(st_write(path, &t, 1, NULL, 0, &err), 0, "%s", err);
    st_file *f;
    cr_assert_eq(st_open(path, &f, &err), 0, "%s", err);
    cr_assert_not_null(st_find(f, ""));
    cr_assert_eq(st_find(f, "")->nbytes, 0);
    st_close(f);
    free(path);
    test_rm_dir(dir);
}

/* ---- writer errors ---------------------------------------------------------------------- */

static void expect_write_error(const st_tensor *t, size_t n, const st_meta *m, size_t nm,
                               const char *needle)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "w.safetensors"), *err = NULL;
    cr_assert_eq(st_write(path, t, n, m, nm, &err), -1, "accepted; wanted \"%s\"", needle);
    cr_assert(strstr(err, path), "message lacks the path: %s", err);
    cr_assert(strstr(err, needle), "message \"%s\" lacks \"%s\"", err, needle);
    free(err);
    cr_assert_eq(test_count_files(dir), 0, "a file was left behind");
    free(path);
    test_rm_dir(dir);
}

Test(safetensors, writer_errors)
{
    float v[4] = {0};
    size_t s[] = {2}, huge[] = {SIZE_MAX / 2, 4};
    st_tensor two[] = {{.name = "a", .dtype = ST_F32, .ndim = 1, .shape = s, .data = v},
                       {.name = "a", .dtype = ST_F32, .ndim = 1, .shape = s, .data = v}};
    expect_write_error(two, 2, NULL, 0, "'a' appears twice");
    two[1].dtype = ST_I32;
    expect_write_error(two, 2, NULL, 0, "'a' appears twice");
    two[1].name = "__metadata__";
    expect_write_error(two, 2, NULL, 0, "reserved");
    two[1].name = "bad\xff";
    expect_write_error(two, 2, NULL, 0, "UTF-8");
    two[1].name = NULL;
    expect_write_error(two, 2, NULL, 0, "no name");
    two[1] = (st_tensor){.name = "b", .dtype = ST_F32, .ndim = 1, .shape = s, .data = NULL};
    expect_write_error(two, 2, NULL, 0, "no data");
    two[1] = (st_tensor){.name = "b", .dtype = ST_F32, .ndim = 2, .shape = huge, .data = v};
    expect_write_error(two, 2, NULL, 0, "too large");
    two[1] = (st_tensor){.name = "b", .dtype = (st_dtype)77, .ndim = 1, .shape = s, .data = v};
    expect_write_error(two, 2, NULL, 0, "invalid dtype");
    two[1] = (st_tensor){.name = "b", .dtype = ST_F32, .ndim = 1, .shape = NULL, .data = v};
    expect_write_error(two, 2, NULL, 0, "invalid shape");
    st_meta dup[] = {{"k", "1"}, {"j", "0"}, {"k", "2"}};
    expect_write_error(two, 1, dup, 3, "'k' appears twice");
    st_meta bad[] = {{"k", "\xc3"}};
    expect_write_error(two, 1, bad, 1, "UTF-8");
    st_meta null[] = {{"k", NULL}};
    expect_write_error(two, 1, null, 1, "NULL");
}

Test(safetensors, write_into_missing_directory)
{
    char *err = NULL;
    cr_assert_eq(st_write("/nonexistent-dir/x.safetensors", NULL, 0, NULL, 0, &err), -1);
    cr_assert(strstr(err, "No such file"), "%s", err);
    free(err);
}

/* ---- reader rules ----------------------------------------------------------------------- */

#define T(name, dtype, shape, b, e)                                                            \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e  \
    "]}"

Test(safetensors, every_truncation_is_refused)
{
    char *path = test_fixture("safetensors", "mix.safetensors");
    size_t len;
    char *whole = slurp(path, &len);
    for (size_t n = 0; n < len; n++) {
        char *cut = xmalloc(n ? n : 1); /* exact size, so ASan sees any overread */
        memcpy(cut, whole, n);
        st_file *f;
        char *err = NULL;
        cr_assert_eq(st_parse(cut, n, "cut", &f, &err), -1, "accepted %zu of %zu bytes", n, len);
        free(err);
        free(cut);
    }
    free(whole);
    free(path);
}

Test(safetensors, header_bounds)
{
    st_file *f;
    char *err = NULL;
    cr_assert_eq(st_parse("\x08\0\0\0\0\0\0", 7, "img.safetensors", &f, &err), -1);
    cr_assert(strstr(err, "shorter than the 8-byte"), "%s", err);
    free(err);
    unsigned char big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
    cr_assert_eq(st_parse(big, sizeof big, "img.safetensors", &f, &err), -1);
    cr_assert(strstr(err, "over the 100000000-byte limit"), "%s", err);
    free(err);
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    cr_assert_eq(st_parse(huge, sizeof huge, "img.safetensors", &f, &err), -1);
    free(err);
    unsigned char past[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    cr_assert_eq(st_parse(past, sizeof past, "img.safetensors", &f, &err), -1);
    cr_assert(strstr(err, "runs past the end"), "%s", err);
    free(err);
    unsigned char zero[8] = {0};
    cr_assert_eq(st_parse(zero, sizeof zero, "img.safetensors", &f, &err), -1);
    cr_assert(strstr(err, "start with '{'"), "%s", err);
    free(err);
    expect_error(" {}", 0, "start with '{'");
    expect_error("[]", 0, "start with '{'");
}

Test(safetensors, bad_json)
{
    expect_error("{", 0, "bad safetensors JSON header");
    expect_error("{\"a\":}", 0, "bad safetensors JSON header");
    expect_error("{} x", 0, "bad safetensors JSON header");
    expect_error("{\"a\":1,\"a\":1}", 0, "duplicate");
    expect_error("{\"a\xff\":1}", 0, "bad safetensors JSON header");
    expect_error("{\"a\\u0000b\":{}}", 0, "bad safetensors JSON header");
    /* deep nesting is bounded by jansson, not the stack */
    strbuf sb = {0};
    sb_puts(&sb, "{\"a\":");
    for (int i = 0; i < 100000; i++)
        sb_putc(&sb, '[');
    expect_error(sb.s, 0, "bad safetensors JSON header");
    sb_free(&sb);
}

Test(safetensors, bad_entries)
{
    expect_error("{\"a\":1}", 0, "not an object");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "needs \"dtype\"");
    expect_error("{" T("a", "F33", "[1]", 0, 4) "}", 4, "unknown dtype \"F33\"");
    expect_error("{" T("a", "F32", "[-1]", 0, 4) "}", 4, "non-negative integers");
    expect_error("{" T("a", "F32", "[1.0]", 0, 4) "}", 4, "non-negative integers");
    expect_error("{" T("a", "F32", "[\"1\"]", 0, 4) "}", 4, "non-negative integers");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                 "[begin, end]");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
                 "[begin, end]");
    expect_error("{" T("a", "F32", "[1]", -4, 0) "}", 4, "[begin, end]");
    expect_error("{" T("a", "F32", "[1]", 4, 0) "}", 4, "end before they begin");
    expect_error("{\"__metadata__\":[1]}", 0, "is not an object");
    expect_error("{\"__metadata__\":{\"k\":1}}", 0, "value for 'k' is not a string");
}

Test(safetensors, offsets_must_tile_the_buffer)
{
    expect_error("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12,
                 "'b': data_offsets [4, 12] overlap tensor 'a'");
    expect_error("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 12, 20) "}", 20,
                 "gap before");
    expect_error("{" T("a", "F32", "[2]", 4, 12) "}", 12, "gap before");
    expect_error("{" T("a", "F32", "[2]", 0, 8) "}", 7, "run past the end");
    expect_error("{" T("a", "F32", "[2]", 0, 8) "}", 9, "1 trailing bytes");
    expect_error("{}", 1, "1 trailing bytes");
    expect_error("{" T("a", "F32", "[3]", 0, 8) "}", 8, "shape [3] of F32 needs 12 bytes");
    expect_error("{" T("a", "F64", "[4294967296,4294967296,2]", 0, 8) "}", 8, "overflows");
    expect_error("{" T("a", "U8", "[0]", 0, 0) "," T("b", "U8", "[1]", 0, 1) ","
                 T("c", "U8", "[1]", 0, 1) "}", 1, "overlap");
}

Test(safetensors, accepted_variants)
{
    /* zero-size tensors may share offsets; metadata null; unknown fields ignored; any order */
    expect_ok("{" T("z1", "F32", "[0]", 0, 0) "," T("z2", "I64", "[3,0]", 0, 0) ","
              T("a", "U8", "[2]", 0, 2) "}", 2);
    expect_ok("{\"__metadata__\":null}", 0);
    expect_ok("{\"b\":{\"data_offsets\":[4,6],\"shape\":[2],\"dtype\":\"U8\",\"x\":[1]},"
              "\"a\":{\"shape\":[],\"dtype\":\"F32\",\"data_offsets\":[0,4]}}",
              6);
    expect_ok("{\n  \"a\" : {\"dtype\": \"BOOL\", \"shape\": [1], \"data_offsets\": [0, 1]}\n}\t",
              1);
}

Test(safetensors, file_errors)
{
    st_file *f;
    char *err = NULL;
    cr_assert_eq(st_open("/nonexistent-dir/x.safetensors", &f, &err), -1);
    cr_assert(strstr(err, "cannot open"), "%s", err);
    free(err);
    char *dir = test_make_tmpdir();
    cr_assert_eq(st_open(dir, &f, &err), -1);
    cr_assert(strstr(err, "not a regular file"), "%s", err);
    free(err);
    char *empty = path_join(dir, "empty");
    fclose(fopen(empty, "w"));
    cr_assert_eq(st_open(empty, &f, &err), -1);
    cr_assert(strstr(err, empty) && strstr(err, "not a safetensors file"), "%s", err);
    free(err);
    free(empty);
    test_rm_dir(dir);
    st_close(NULL);
}

/* A 5 GiB tensor in a sparse file: offsets past 2^32 go through size_t/off_t. */
Test(safetensors, open_over_4gib_sparse)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "big.safetensors"), *err = NULL;
    size_t len, data = 5ull << 30;
    unsigned char *img = make_image(
        "{\"big\":{\"dtype\":\"F32\",\"shape\":[1342177280],"
        "\"data_offsets\":[0,5368709120]}}",
        0, 0, &len);
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(img, 1, len, f), len);
    fclose(f);
    cr_assert_eq(truncate(path, (off_t)(len + data)), 0, "%s", strerror(errno));
    st_file *sf;
    cr_assert_eq(st_open(path, &sf, &err), 0, "%s", err);
    const st_tensor *t = st_find(sf, "big");
    cr_assert_eq(t->nbytes, data);
    cr_assert_eq(t->shape[0], 1342177280u);
    cr_assert_eq(((const unsigned char *)t->data)[data - 1], 0);
    st_close(sf);
    cr_assert_eq(truncate(path, (off_t)(len + data - 1)), 0);
    cr_assert_eq(st_open(path, &sf, &err), -1);
    cr_assert(strstr(err, "run past the end of the 5368709119-byte data buffer"), "%s", err);
    free(err);
    free(img);
    free(path);
    test_rm_dir(dir);
}

/* ---- read back with Python -------------------------------------------------------------- */

Test(safetensors, python_reads_our_files)
{
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        cr_skip_test("/usr/bin/python3 with numpy is not installed (make deps)");
    char names[N_ROUND][32], *dir = test_make_tmpdir(), *err = NULL;
    st_tensor *t = every_tensor(names);
    char *mpath = path_join(dir, "manifest.txt");
    FILE *m = fopen(mpath, "w");
    cr_assert_not_null(m);
    /* file 1: every tensor with metadata; file 2: the MIX set without; file 3: empty */
    char *p1 = path_join(dir, "all.safetensors");
    st_meta meta[] = {{"framework", "pt"}, {"epoch", "7"}};
    cr_assert_eq(st_write(p1, t, N_ROUND, meta, 2, &err), 0, "%s", err);
    fprintf(m, "file all.safetensors\nmeta framework pt\nmeta epoch 7\n");
    for (size_t i = 0; i < N_ROUND; i++) {
        fprintf(m, "tensor %s %s", t[i].name, st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++)
            fprintf(m, " %zu", t[i].shape[d]);
        fputc('\n', m);
    }
    st_tensor *mix = mix_tensors();
    char *p2 = path_join(dir, "mix.safetensors"), *p3 = path_join(dir, "empty.safetensors");
    cr_assert_eq(st_write(p2, mix, ARRAY_LEN(MIX), NULL, 0, &err), 0, "%s", err);
    fprintf(m, "file mix.safetensors\n");
    for (size_t i = 0; i < ARRAY_LEN(MIX); i++) {
        fprintf(m, "tensor %s %s", MIX[i].name, st_dtype_name(MIX[i].dtype));
        for (int d = 0; d < MIX[i].ndim; d++)
            fprintf(m, " %zu", MIX[i].shape[d]);
        fputc('\n', m);
    }
    cr_assert_eq(st_write(p3, NULL, 0, NULL, 0, &err), 0, "%s", err);
    fprintf(m, "file empty.safetensors\n");
    fclose(m);
    char *script = test_path("tests/golden/safetensors_readback.py");
    char *cmd = xasprintf("/usr/bin/python3 '%s' '%s'", script, dir);
    free(script);
    int status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status %d)", cmd,
              status);
    free(cmd);
    free(p1);
    free(p2);
    free(p3);
    free(mpath);
    free_tensors(mix, ARRAY_LEN(MIX));
    free_tensors(t, N_ROUND);
    test_rm_dir(dir);
}

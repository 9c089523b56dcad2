/*
 * test_torchfile.c — unit tests for lib/torchfile: the checkpoints torch wrote for
 * tests/golden/make_torchfile_fixtures.py (zip and legacy formats, pickle protocols 2 and 4)
 * read to exactly the tensors of the matching NAME.safetensors, which the script wrote with
 * numpy from the same torch tensors (names, dtypes, shapes, bytes, and in its metadata each
 * tensor's strides, offset and Parameter flags); the plain values around them; every file of
 * the hostile corpus refused with its EXPECT message and nothing run; and the unpickler on
 * pickles given as hex (the bytes CPython's pickle.dumps writes, noted beside each).
 */
#include "torchfile.h"
#include "safetensors.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MARKER "/tmp/selfsup_torchfile_pwned" /* what the os.system payloads would touch */

/* ---- helpers ---------------------------------------------------------------------------- */

static torchfile *open_fixture(const char *name)
{
    char *path = test_fixture("torchfile", name), *err = NULL;
    torchfile *f;
    cr_assert_eq(torchfile_open(path, &f, &err), 0, "%s: %s", name, err ? err : "");
    free(path);
    return f;
}

static unsigned char *from_hex(const char *hex, size_t *n)
{
    *n = strlen(hex) / 2;
    unsigned char *b = xmalloc(*n + 1);
    for (size_t i = 0; i < *n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        b[i] = (unsigned char)v;
    }
    return b;
}

static torchfile *unpickle_hex(const char *hex)
{
    size_t n;
    unsigned char *b = from_hex(hex, &n);
    torchfile *f;
    char *err = NULL;
    cr_assert_eq(torchfile_unpickle(b, n, "test", &f, &err), 0, "%s", err ? err : "");
    free(b);
    return f;
}

/* The error torchfile_unpickle gives for these bytes. */
static char *unpickle_error(const unsigned char *b, size_t n)
{
    torchfile *f;
    char *err = NULL;
    cr_assert_eq(torchfile_unpickle(b, n, "test", &f, &err), -1);
    cr_assert_null(f);
    cr_assert_not_null(err);
    return err;
}

static void assert_error_hex(const char *hex, const char *want)
{
    size_t n;
    unsigned char *b = from_hex(hex, &n);
    char *err = unpickle_error(b, n);
    cr_assert(strstr(err, want), "error '%s' does not contain '%s'", err, want);
    free(err);
    free(b);
}

/* "strides 1,4 offset 0 param 0 grad 0" from the expected file's metadata. */
static void assert_layout(const tf_named *t, const char *layout)
{
    cr_assert_not_null(layout, "%s: no layout metadata", t->name);
    strbuf sb = {0};
    sb_puts(&sb, "strides ");
    for (int i = 0; i < t->tensor->ndim; i++)
        sb_printf(&sb, "%s%lld", i ? "," : "", (long long)t->tensor->stride[i]);
    sb_printf(&sb, " offset %zu param %d grad %d", t->tensor->storage_offset,
              t->tensor->is_parameter, t->tensor->requires_grad);
    cr_assert_str_eq(sb_str(&sb), layout, "%s", t->name);
    sb_free(&sb);
}

static void assert_matches(const char *file, const char *expected)
{
    torchfile *f = open_fixture(file);
    char *path = test_fixture("torchfile", expected), *err = NULL;
    st_file *want;
    cr_assert_eq(st_open(path, &want, &err), 0, "%s", err ? err : "");
    tf_named *named;
    size_t n;
    cr_assert_eq(tf_flatten(torchfile_root(f), NULL, &named, &n, &err), 0);
    cr_assert_eq(n, st_count(want), "%s: %zu tensors, expected %zu", file, n, st_count(want));
    for (size_t i = 0; i < n; i++) {
        const tf_tensor *t = named[i].tensor;
        const st_tensor *w = st_find(want, named[i].name);
        cr_assert_not_null(w, "%s: unexpected tensor %s", file, named[i].name);
        cr_assert_eq(t->dtype, w->dtype, "%s: %s dtype", file, named[i].name);
        cr_assert_eq(t->ndim, w->ndim, "%s: %s ndim", file, named[i].name);
        for (int d = 0; d < t->ndim; d++)
            cr_assert_eq(t->shape[d], w->shape[d], "%s: %s dim %d", file, named[i].name, d);
        cr_assert_eq(t->nbytes, w->nbytes, "%s: %s bytes", file, named[i].name);
        cr_assert(t->nbytes == 0 || memcmp(t->data, w->data, t->nbytes) == 0,
                  "%s: %s values differ", file, named[i].name);
        assert_layout(&named[i], st_meta_get(want, named[i].name));
    }
    tf_named_free(named, n);
    st_close(want);
    free(path);
    torchfile_close(f);
}

static void assert_all_variants(const char *name)
{
    static const char *const variants[] = {"zip", "legacy", "p4_zip", "p4_legacy"};
    char *expected = xasprintf("%s.safetensors", name);
    for (size_t i = 0; i < ARRAY_LEN(variants); i++) {
        char *file = xasprintf("%s_%s.pt", name, variants[i]);
        assert_matches(file, expected);
        free(file);
    }
    free(expected);
}

/* ---- fixtures written by torch ----------------------------------------------------------- */

Test(torchfile, mixed_dtypes_views_and_layouts)
{
    assert_all_variants("mixed");
}

Test(torchfile, vissl_nested_checkpoint)
{
    assert_all_variants("vissl");
}

Test(torchfile, torchvision_block_state_dict)
{
    assert_all_variants("block");
}

Test(torchfile, flattened_names_in_order)
{
    static const char *const names[] = {
        "conv1.weight",    "bn1.weight",       "bn1.bias",     "bn1.running_mean",
        "bn1.running_var", "bn1.num_batches_tracked",          "conv2.weight",
        "bn2.weight",      "bn2.bias",         "bn2.running_mean", "bn2.running_var",
        "bn2.num_batches_tracked"};
    torchfile *f = open_fixture("block_legacy.pt");
    tf_named *named;
    size_t n;
    char *err = NULL;
    cr_assert_eq(tf_flatten(torchfile_root(f), "trunk", &named, &n, &err), 0);
    cr_assert_eq(n, ARRAY_LEN(names));
    for (size_t i = 0; i < n; i++) {
        char *want = xasprintf("trunk.%s", names[i]);
        cr_assert_str_eq(named[i].name, want);
        free(want);
    }
    tf_named_free(named, n);
    torchfile_close(f);
}

Test(torchfile, vissl_layout_walk)
{
    torchfile *f = open_fixture("vissl_zip.pt");
    const tf_value *root = torchfile_root(f);
    const tf_value *trunk = tf_lookup(root, "classy_state_dict.base_model.model.trunk");
    cr_assert_not_null(trunk);
    cr_assert_eq(trunk->kind, TF_DICT);
    cr_assert_eq(trunk->u.dict.n, 3);
    const tf_value *w = tf_dict_get(trunk, "_feature_blocks.conv1.weight");
    cr_assert_eq(w->kind, TF_TENSOR);
    cr_assert(w->u.tensor->is_parameter && w->u.tensor->requires_grad);
    cr_assert_eq(tf_lookup(root, "phase_idx")->u.i, 3);
    cr_assert_str_eq(tf_lookup(root, "type")->u.str.s, "checkpoint");
    cr_assert_eq(tf_lookup(root, "classy_state_dict.loss")->u.dict.n, 0);
    cr_assert_null(tf_lookup(root, "classy_state_dict.nothing"));
    torchfile_close(f);
}

Test(torchfile, plain_values)
{
    torchfile *f = open_fixture("mixed_p4_zip.pt");
    const tf_value *r = torchfile_root(f);
    cr_assert_eq(tf_dict_get(r, "step")->u.i, 7);
    cr_assert_eq(tf_dict_get(r, "lr")->u.f, 0.125);
    cr_assert_str_eq(tf_dict_get(r, "name")->u.str.s, "mixed");
    cr_assert_eq(tf_dict_get(r, "flag")->kind, TF_BOOL);
    cr_assert(tf_dict_get(r, "flag")->u.b);
    cr_assert_eq(tf_dict_get(r, "nothing")->kind, TF_NONE);
    cr_assert_eq(tf_dict_get(r, "big")->u.i, -((int64_t)1 << 40));
    const tf_value *l = tf_dict_get(r, "list");
    cr_assert_eq(l->kind, TF_LIST);
    cr_assert_eq(l->u.seq.n, 4);
    cr_assert_eq(l->u.seq.items[1]->u.f, 2.5);
    cr_assert_str_eq(l->u.seq.items[2]->u.str.s, "a");
    cr_assert_eq(l->u.seq.items[3]->kind, TF_TUPLE);
    cr_assert_eq(l->u.seq.items[3]->u.seq.items[1]->u.i, 4);
    torchfile_close(f);
}

Test(torchfile, shared_storage_views_and_copies)
{
    torchfile *f = open_fixture("mixed_zip.pt");
    const tf_value *r = torchfile_root(f);
    const tf_tensor *a = tf_dict_get(r, "view_a")->u.tensor;
    const tf_tensor *b = tf_dict_get(r, "view_b")->u.tensor;
    /* Contiguous views point into their one storage: offsets 2 and 6 floats. */
    cr_assert_eq(a->storage_offset, 2);
    cr_assert_eq(b->storage_offset, 6);
    cr_assert_eq((const char *)b->data - (const char *)a->data, 4 * sizeof(float));
    const tf_tensor *t = tf_dict_get(r, "transposed")->u.tensor;
    cr_assert_eq(t->stride[0], 1);
    cr_assert_eq(t->stride[1], 4);
    /* Copied to C order: row 0 of the transpose is column 0 of vals(12).reshape(3, 4), i.e.
     * elements 0, 4, 8 of ((i * 7) % 11 - 5) / 4. */
    float row0[3];
    memcpy(row0, t->data, sizeof row0);
    cr_assert_eq(row0[0], -1.25f);
    cr_assert_eq(row0[1], 0.25f);
    cr_assert_eq(row0[2], -1.0f);
    torchfile_close(f);
}

/* ---- the hostile and broken corpus ------------------------------------------------------- */

Test(torchfile, bad_corpus_refused)
{
    unlink(MARKER);
    char *dir = test_fixture("torchfile", "bad");
    char *expect_path = path_join(dir, "EXPECT");
    size_t len;
    char *text = read_whole_file(expect_path, &len);
    cr_assert_not_null(text);
    size_t count = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *colon = strstr(line, ": ");
        cr_assert_not_null(colon, "EXPECT line '%s'", line);
        *colon = 0;
        char *path = path_join(dir, line), *err = NULL;
        torchfile *f = (torchfile *)1;
        cr_assert_eq(torchfile_open(path, &f, &err), -1, "%s was accepted", line);
        cr_assert_null(f);
        cr_assert(err && strstr(err, colon + 2), "%s: error '%s' lacks '%s'", line, err, colon + 2);
        cr_assert(strstr(err, path), "%s: error '%s' does not name the file", line, err);
        free(err);
        free(path);
        count++;
    }
    cr_assert_eq(count + 1, test_count_files(dir), "every file in bad/ has an EXPECT line");
    cr_assert(!path_exists(MARKER), "a payload ran");
    free(text);
    free(expect_path);
    free(dir);
}

Test(torchfile, missing_file)
{
    torchfile *f;
    char *err = NULL;
    cr_assert_eq(torchfile_open("/nonexistent/x.pt", &f, &err), -1);
    cr_assert(strstr(err, "/nonexistent/x.pt") && strstr(err, "No such file"), "%s", err);
    free(err);
}

/* ---- the unpickler on hand-written pickles ----------------------------------------------- */

/* pickle.dumps({'a': 1, 'b': 1.5, 'c': [None, True, False, -5, 300, 70000, -(2**40), 2**70],
 *               'd': (1, 'x')}, 2) */
Test(torchfile, unpickle_protocol2_values)
{
    torchfile *f = unpickle_hex(
        "80027d71002858010000006171014b015801000000627102473ff80000000000005801000000637103"
        "5d7104284e88894afbffffff4d2c014a701101008a060000000000ff8a0900000000000000004065"
        "58010000006471054b015801000000787106867107752e");
    const tf_value *r = torchfile_root(f);
    cr_assert_eq(r->kind, TF_DICT);
    cr_assert_eq(r->u.dict.n, 4);
    cr_assert_eq(tf_dict_get(r, "a")->u.i, 1);
    cr_assert_eq(tf_dict_get(r, "b")->u.f, 1.5);
    const tf_value *c = tf_dict_get(r, "c");
    cr_assert_eq(c->u.seq.n, 8);
    cr_assert_eq(c->u.seq.items[0]->kind, TF_NONE);
    cr_assert(c->u.seq.items[1]->u.b && !c->u.seq.items[2]->u.b);
    cr_assert_eq(c->u.seq.items[3]->u.i, -5);
    cr_assert_eq(c->u.seq.items[4]->u.i, 300);
    cr_assert_eq(c->u.seq.items[5]->u.i, 70000);
    cr_assert_eq(c->u.seq.items[6]->u.i, -((int64_t)1 << 40));
    cr_assert_eq(c->u.seq.items[7]->kind, TF_OTHER); /* wider than 64 bits */
    const tf_value *d = tf_dict_get(r, "d");
    cr_assert_eq(d->kind, TF_TUPLE);
    cr_assert_str_eq(d->u.seq.items[1]->u.str.s, "x");
    torchfile_close(f);
}

/* pickle.dumps(OrderedDict([('k', (1, 2, 3)), ('j', 'é')]), 4): FRAME, MEMOIZE,
 * STACK_GLOBAL, TUPLE3. */
Test(torchfile, unpickle_protocol4_ordered_dict)
{
    torchfile *f = unpickle_hex("80049539000000000000008c0b636f6c6c656374696f6e73948c0b4f7264"
                                "6572656444696374949394295294288c016b944b014b024b0387948c016a"
                                "948c02c3a994752e");
    const tf_value *r = torchfile_root(f);
    cr_assert_eq(r->kind, TF_DICT);
    cr_assert_str_eq(r->u.dict.keys[0]->u.str.s, "k");
    cr_assert_str_eq(r->u.dict.keys[1]->u.str.s, "j");
    cr_assert_eq(tf_dict_get(r, "k")->u.seq.items[2]->u.i, 3);
    cr_assert_str_eq(tf_dict_get(r, "j")->u.str.s, "\xc3\xa9");
    torchfile_close(f);
}

/* pickle.dumps([b'hi', b'hi'], 3) with the second item a BINGET of the first. */
Test(torchfile, unpickle_memo_shares_objects)
{
    torchfile *f = unpickle_hex("80035d7100284302686971016801652e");
    const tf_value *r = torchfile_root(f);
    cr_assert_eq(r->u.seq.n, 2);
    cr_assert_eq(r->u.seq.items[0]->kind, TF_BYTES);
    cr_assert_eq(r->u.seq.items[0], r->u.seq.items[1]);
    cr_assert_eq(r->u.seq.items[0]->u.str.len, 2);
    torchfile_close(f);
}

/* {'a': 1, 'a': 2} by hand: SETITEMS with a repeated key keeps the last, like Python. */
Test(torchfile, unpickle_repeated_key_replaces)
{
    torchfile *f = unpickle_hex("80027d28580100000061" "4b01" "580100000061" "4b02" "752e");
    const tf_value *r = torchfile_root(f);
    cr_assert_eq(r->u.dict.n, 1);
    cr_assert_eq(tf_dict_get(r, "a")->u.i, 2);
    torchfile_close(f);
}

/* d = {}; d['a'] = d — a cycle: unpickles (Python allows it), but flattening stops. */
Test(torchfile, unpickle_cycle_is_bounded)
{
    torchfile *f = unpickle_hex("80027d7100" "580100000061" "6800" "732e");
    const tf_value *r = torchfile_root(f);
    cr_assert_eq(tf_dict_get(r, "a"), r);
    tf_named *named;
    size_t n;
    char *err = NULL;
    cr_assert_eq(tf_flatten(r, NULL, &named, &n, &err), -1);
    cr_assert(strstr(err, "nested deeper"), "%s", err);
    free(err);
    torchfile_close(f);
}

/* {t: t} with t a tuple nested exactly MAX_NEST (100) deep: the key and the value each take the
 * dict past the limit, and the one error says so (the fuzzer found a second message leaking
 * the first). */
Test(torchfile, unpickle_too_deep_key_and_value_is_one_error)
{
    strbuf hex = {0};
    sb_puts(&hex, "80027d4e");
    for (int i = 0; i < 100; i++)
        sb_puts(&hex, "85");
    sb_puts(&hex, "7100680073" "2e");
    size_t n;
    unsigned char *b = from_hex(sb_str(&hex), &n);
    char *err = unpickle_error(b, n);
    cr_assert(strstr(err, "nested deeper than 100 levels"), "%s", err);
    free(err);
    free(b);
    sb_free(&hex);
}

Test(torchfile, unpickle_refuses_globals_without_running_them)
{
    unlink(MARKER);
    /* cposix\nsystem\n X'touch MARKER' TUPLE1 REDUCE STOP */
    strbuf sb = {0};
    const char *cmd = "touch " MARKER;
    sb_puts(&sb, "\x80\x02" "cposix\nsystem\n" "X");
    uint32_t len = (uint32_t)strlen(cmd);
    sb_putn(&sb, (const char *)&len, 4);
    sb_puts(&sb, cmd);
    sb_puts(&sb, "\x85R.");
    char *err = unpickle_error((const unsigned char *)sb.s, sb.len);
    cr_assert_str_eq(err, "test: pickle, byte 2: 'posix.system' is not allowed in a checkpoint: "
                          "selfsup only loads tensors and plain containers");
    cr_assert(!path_exists(MARKER));
    free(err);
    sb_free(&sb);
    /* pickle.dumps(b'x', 2) goes through _codecs.encode(text, 'latin1'), which numpy arrays need;
     * any other call of it is refused. */
    assert_error_hex("8002635f636f646563730a656e636f64650a580300000061626358060000007574662d313686522e", "_codecs.encode is only read as encode(str, 'latin1')");
    /* builtins.eval through STACK_GLOBAL */
    assert_error_hex("80048c086275696c74696e738c046576616c93", "'builtins.eval' is not allowed");
}

Test(torchfile, unpickle_errors)
{
    assert_error_hex("8002732e", "byte 2: pickle stack underflow");           /* SETITEM */
    assert_error_hex("80027d4e612e", "APPEND on a dict");                      /* {} None APPEND */
    assert_error_hex("80024e29522e", "REDUCE on a None");                      /* None () REDUCE */
    assert_error_hex("80027d5d4e732e", "unhashable dict key of type list");
    assert_error_hex("8009", "pickle protocol 9 is not supported");
    assert_error_hex("80025864000000616263", "truncated pickle");              /* X len 100 */
    assert_error_hex("80024e", "truncated pickle (no STOP)");
    assert_error_hex("80024e51", "persistent id outside");                      /* BINPERSID */
    assert_error_hex("80024e7a", "unknown or disallowed pickle opcode 0x7a");
    assert_error_hex("8002637475726368005f7265", "GLOBAL name is truncated");
    assert_error_hex("80025d68ff2e", "memo index 255 is not set");
    assert_error_hex("800274", "no MARK to close");                             /* TUPLE */
    assert_error_hex("8002284e752e", "SETITEMS without a dict");
    assert_error_hex("80027d4e4e86622e", "BUILD of a dict with a tuple state");
    assert_error_hex("800263636f6c6c656374696f6e730a4f726465726564446963740a4b0185522e",
                     "OrderedDict called with 1 arguments");
}

/* ---- numpy arrays -------------------------------------------------------------------------- */

/* A protocol-2 pickle of one numpy array as Python 2's cPickle writes it: _reconstruct, then
 * BUILD with (1, shape, dtype(code, 0, 1) built with (3, endian, …), fortran, data). */
static size_t numpy_pickle(unsigned char *out, const char *code, char endian, const int *shape, int ndim,
                           bool fortran, const void *data, size_t len)
{
    size_t n = 0;
#define PUT(s, l) (memcpy(out + n, (s), (l)), n += (l))
#define PUTS(lit) PUT(lit, sizeof(lit) - 1)
    PUTS("\x80\x02" "cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01" "b\x87R(K\x01(");
    for (int i = 0; i < ndim; i++) {
        out[n++] = 'K';
        out[n++] = (unsigned char)shape[i];
    }
    PUTS("tcnumpy\ndtype\nU");
    out[n++] = (unsigned char)strlen(code);
    PUT(code, strlen(code));
    PUTS("K\x00K\x01\x87R(K\x03U\x01");
    out[n++] = (unsigned char)endian;
    PUTS("NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb");
    out[n++] = fortran ? 0x88 : 0x89;
    out[n++] = 'U';
    out[n++] = (unsigned char)len;
    PUT(data, len);
    PUTS("tb.");
#undef PUTS
#undef PUT
    return n;
}

Test(torchfile, numpy_arrays_from_python2_pickles)
{
    unsigned char p[256];
    float v[4] = {1, 2, 3, 4};
    torchfile *f;
    char *err = NULL;
    size_t n = numpy_pickle(p, "f4", '<', (int[]){2, 2}, 2, true, v, sizeof v);
    cr_assert_eq(torchfile_unpickle(p, n, "test", &f, &err), 0, "%s", err);
    const tf_value *t = torchfile_root(f);
    cr_assert_eq(t->kind, TF_TENSOR);
    cr_expect(t->u.tensor->dtype == ST_F32 && t->u.tensor->ndim == 2 && t->u.tensor->numel == 4);
    const float *got = t->u.tensor->data; /* Fortran order [[1, 3], [2, 4]] in C order */
    cr_expect(got[0] == 1 && got[1] == 3 && got[2] == 2 && got[3] == 4, "%g %g %g %g", got[0], got[1], got[2], got[3]);
    torchfile_close(f);

    struct {
        const char *code;
        char endian;
        size_t len;
        const char *want;
    } bad[] = {
        {"f4", '>', 16, "big-endian numpy arrays are not supported"},
        {"O8", '|', 16, "numpy dtype 'O8' is not supported"},
        {"f4", '<', 8, "numpy array data is not 16 bytes of raw values"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        n = numpy_pickle(p, bad[i].code, bad[i].endian, (int[]){2, 2}, 2, false, v, bad[i].len);
        char *e = unpickle_error(p, n);
        cr_expect(strstr(e, bad[i].want), "case %zu: %s", i, e);
        free(e);
    }
}

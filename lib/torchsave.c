/*
 * torchsave.c — torch.save's zip format, written (see torchsave.h).
 *
 * The pickle is built in memory with the few protocol-2 opcodes torch's own pickler uses for
 * a state dict (PROTO, GLOBAL, EMPTY_TUPLE/EMPTY_DICT, REDUCE, MARK, SETITEMS, TUPLE,
 * BINUNICODE, BININT*, LONG1, NEWFALSE, BINPERSID, STOP); no memo is written, since nothing is
 * shared. The archive is assembled by libzip in a memory buffer (every record stored, not
 * compressed, as torch stores them) and then copied into an atomic_file, so a crash leaves
 * the old file or the whole new one. Each tensor gets its own storage, keyed "0", "1", … in
 * the order the tree is walked.
 */
#include "torchsave.h"

#include "atomic_file.h"
#include "util.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

typedef struct {
    char *key;
    ts_dict *dict; /* a nested dict, or NULL for a tensor or a bool */
    int boolean;   /* 0 or 1 for a bool (True / False), -1 for a tensor or a dict */
    st_dtype dtype;
    int ndim;
    size_t shape[TS_MAX_DIMS];
    const void *data;
} ts_item;

struct ts_dict {
    bool ordered;
    ts_item *items;
    size_t n, cap;
};

/* Pickle's batch size for SETITEMS (pickle.py's _BATCHSIZE): keeps the stack small. */
#define SETITEMS_BATCH 1000

/* ---- the tree ------------------------------------------------------------------------------ */

ts_dict *ts_dict_new(bool ordered)
{
    ts_dict *d = xcalloc(1, sizeof *d);
    d->ordered = ordered;
    return d;
}

void ts_dict_free(ts_dict *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->items[i].key);
        ts_dict_free(d->items[i].dict);
    }
    free(d->items);
    free(d);
}

static ts_item *add_item(ts_dict *d, const char *key)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 16;
        d->items = xrealloc(d->items, d->cap * sizeof *d->items);
    }
    ts_item *it = &d->items[d->n++];
    *it = (ts_item){.key = xstrdup(key), .boolean = -1};
    return it;
}

void ts_dict_add_tensor(ts_dict *d, const char *key, st_dtype dtype, int ndim, const size_t *shape,
                        const void *data)
{
    ts_item *it = add_item(d, key);
    it->dtype = dtype;
    it->ndim = ndim < 0 ? 0 : ndim > TS_MAX_DIMS ? TS_MAX_DIMS + 1 : ndim; /* checked in ts_save */
    for (int k = 0; k < ndim && k < TS_MAX_DIMS; k++)
        it->shape[k] = shape[k];
    it->data = data;
}

void ts_dict_add_bool(ts_dict *d, const char *key, bool value) { add_item(d, key)->boolean = value; }

ts_dict *ts_dict_add_dict(ts_dict *d, const char *key, bool ordered)
{
    ts_item *it = add_item(d, key);
    it->dict = ts_dict_new(ordered);
    return it->dict;
}

/* ---- checks and storage numbering --------------------------------------------------------- */

/* torch's storage class for a dtype, or NULL when torch has none. */
static const char *storage_class(st_dtype dtype)
{
    switch (dtype) {
    case ST_F32: return "FloatStorage";
    case ST_F16: return "HalfStorage";
    case ST_BF16: return "BFloat16Storage";
    case ST_F64: return "DoubleStorage";
    case ST_I64: return "LongStorage";
    case ST_I32: return "IntStorage";
    case ST_I16: return "ShortStorage";
    case ST_I8: return "CharStorage";
    case ST_U8: return "ByteStorage";
    case ST_BOOL: return "BoolStorage";
    default: return NULL;
    }
}

static size_t item_numel(const ts_item *it)
{
    size_t n = 1;
    for (int k = 0; k < it->ndim; k++)
        n *= it->shape[k];
    return n;
}

/* Validate the tree and list its tensors in walk order (the storage keys). */
static int collect(const ts_dict *d, const ts_item ***list, size_t *n, size_t *cap, const char *path, char **err)
{
    for (size_t i = 0; i < d->n; i++) {
        const ts_item *it = &d->items[i];
        for (size_t j = 0; j < i; j++)
            if (!strcmp(d->items[j].key, it->key))
                return report_failure(err, "%s: key '%s' appears twice in one dict", path, it->key);
        if (it->dict) {
            if (collect(it->dict, list, n, cap, path, err) != 0)
                return -1;
            continue;
        }
        if (it->boolean >= 0)
            continue;
        if (!storage_class(it->dtype))
            return report_failure(err, "%s: tensor '%s' has dtype %s, which torch has no storage for", path,
                                  it->key, st_dtype_name(it->dtype));
        if (it->ndim > TS_MAX_DIMS)
            return report_failure(err, "%s: tensor '%s' has more than %d dimensions", path, it->key, TS_MAX_DIMS);
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *list = xrealloc(*list, *cap * sizeof **list);
        }
        (*list)[(*n)++] = it;
    }
    return 0;
}

/* ---- the pickle ---------------------------------------------------------------------------- */

static void p_op(strbuf *p, unsigned char op) { sb_putc(p, (char)op); }

static void p_global(strbuf *p, const char *module, const char *name)
{
    sb_printf(p, "c%s\n%s\n", module, name);
}

static void p_str(strbuf *p, const char *s)
{
    size_t n = strlen(s);
    unsigned char len[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 24)};
    p_op(p, 'X');
    sb_putn(p, (const char *)len, 4);
    sb_putn(p, s, n);
}

/* A non-negative integer in the shortest of BININT1, BININT2, BININT and LONG1. */
static void p_uint(strbuf *p, uint64_t v)
{
    unsigned char b[9];
    if (v < 0x100) {
        p_op(p, 'K');
        p_op(p, (unsigned char)v);
    } else if (v < 0x10000) {
        p_op(p, 'M');
        b[0] = (unsigned char)v, b[1] = (unsigned char)(v >> 8);
        sb_putn(p, (const char *)b, 2);
    } else if (v < 0x80000000u) {
        p_op(p, 'J');
        for (int k = 0; k < 4; k++)
            b[k] = (unsigned char)(v >> 8 * k);
        sb_putn(p, (const char *)b, 4);
    } else {
        /* LONG1: little-endian two's complement; a ninth zero byte keeps the sign positive. */
        int n = 0;
        for (uint64_t x = v; x; x >>= 8)
            b[n++] = (unsigned char)x;
        if (b[n - 1] & 0x80)
            b[n++] = 0;
        p_op(p, 0x8a);
        p_op(p, (unsigned char)n);
        sb_putn(p, (const char *)b, (size_t)n);
    }
}

static void p_empty_ordered_dict(strbuf *p)
{
    p_global(p, "collections", "OrderedDict");
    p_op(p, ')'); /* EMPTY_TUPLE */
    p_op(p, 'R'); /* REDUCE */
}

/* torch._utils._rebuild_tensor_v2(storage, 0, shape, stride, False, OrderedDict()), with the
 * storage as persistent id ('storage', torch.XStorage, key, 'cpu', numel). */
static void p_tensor(strbuf *p, const ts_item *it, size_t key)
{
    char keytext[24];
    snprintf(keytext, sizeof keytext, "%zu", key);
    p_global(p, "torch._utils", "_rebuild_tensor_v2");
    p_op(p, '(');
    p_op(p, '(');
    p_str(p, "storage");
    p_global(p, "torch", storage_class(it->dtype));
    p_str(p, keytext);
    p_str(p, "cpu");
    p_uint(p, item_numel(it));
    p_op(p, 't');
    p_op(p, 'Q'); /* BINPERSID */
    p_uint(p, 0); /* storage offset */
    p_op(p, '(');
    for (int k = 0; k < it->ndim; k++)
        p_uint(p, it->shape[k]);
    p_op(p, 't');
    /* C-contiguous strides, in elements. */
    size_t stride[TS_MAX_DIMS], s = 1;
    for (int k = it->ndim - 1; k >= 0; k--) {
        stride[k] = s;
        s *= it->shape[k];
    }
    p_op(p, '(');
    for (int k = 0; k < it->ndim; k++)
        p_uint(p, stride[k]);
    p_op(p, 't');
    p_op(p, 0x89); /* NEWFALSE: requires_grad */
    p_empty_ordered_dict(p); /* backward hooks */
    p_op(p, 't');
    p_op(p, 'R');
}

/* The dict's items, in SETITEMS batches; `next_key` numbers the storages in walk order. */
static void p_dict(strbuf *p, const ts_dict *d, size_t *next_key)
{
    if (d->ordered)
        p_empty_ordered_dict(p);
    else
        p_op(p, '}');
    for (size_t i = 0; i < d->n; i++) {
        if (i % (SETITEMS_BATCH / 2) == 0)
            p_op(p, '(');
        const ts_item *it = &d->items[i];
        p_str(p, it->key);
        if (it->dict)
            p_dict(p, it->dict, next_key);
        else if (it->boolean >= 0)
            p_op(p, it->boolean ? 0x88 : 0x89); /* NEWTRUE / NEWFALSE */
        else
            p_tensor(p, it, (*next_key)++);
        if (i + 1 == d->n || (i + 1) % (SETITEMS_BATCH / 2) == 0)
            p_op(p, 'u');
    }
}

/* ---- the archive ---------------------------------------------------------------------------- */

static int add_record(zip_t *za, const char *name, const void *data, size_t n, const char *path, char **err)
{
    zip_source_t *s = zip_source_buffer(za, n ? data : NULL, n, 0);
    zip_int64_t idx = s ? zip_file_add(za, name, s, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE) : -1;
    if (idx < 0) {
        zip_source_free(s);
        return report_failure(err, "%s: cannot add %s to the archive: %s", path, name, zip_strerror(za));
    }
    if (zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) != 0)
        return report_failure(err, "%s: %s: %s", path, name, zip_strerror(za));
    return 0;
}

/* Every record into a zip built in `buf`; on failure the archive is discarded. */
static int build_zip(zip_source_t *buf, const strbuf *pkl, const ts_item *const *tensors, size_t n,
                     const char *path, char **err)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_t *za = zip_open_from_source(buf, ZIP_TRUNCATE, &ze);
    if (!za) {
        int rc = report_failure(err, "%s: cannot start a zip archive: %s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return rc;
    }
    zip_error_fini(&ze);
    zip_source_keep(buf); /* the archive now holds a reference; ours lets us read it back */
    int rc = add_record(za, "archive/data.pkl", pkl->s, pkl->len, path, err);
    rc = rc ? rc : add_record(za, "archive/byteorder", "little", 6, path, err);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char name[48];
        snprintf(name, sizeof name, "archive/data/%zu", i);
        rc = add_record(za, name, tensors[i]->data, item_numel(tensors[i]) * st_dtype_size(tensors[i]->dtype), path,
                     err);
    }
    rc = rc ? rc : add_record(za, "archive/version", "3\n", 2, path, err);
    if (rc != 0) {
        zip_discard(za);
        return -1;
    }
    if (zip_close(za) != 0) {
        rc = report_failure(err, "%s: cannot finish the zip archive: %s", path, zip_strerror(za));
        zip_discard(za);
    }
    return rc;
}

/* The finished archive from `buf` into the atomic file. */
static int copy_out(zip_source_t *buf, const char *path, char **err)
{
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_source_stat(buf, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) || zip_source_open(buf) != 0)
        return report_failure(err, "%s: cannot read back the archive: %s", path,
                              zip_error_strerror(zip_source_error(buf)));
    atomic_file f;
    if (atomic_file_open(&f, path, err) != 0) {
        zip_source_close(buf);
        return -1;
    }
    atomic_file_reserve(&f, (size_t)st.size);
    enum { CHUNK = 1 << 20 };
    char *chunk = xmalloc(CHUNK);
    int rc = 0;
    for (;;) {
        zip_int64_t got = zip_source_read(buf, chunk, CHUNK);
        if (got < 0) {
            rc = report_failure(err, "%s: cannot read back the archive: %s", path,
                                zip_error_strerror(zip_source_error(buf)));
            break;
        }
        if (got == 0)
            break;
        if ((rc = atomic_file_write(&f, chunk, (size_t)got, err)) != 0)
            break;
    }
    free(chunk);
    zip_source_close(buf);
    if (rc == 0)
        return atomic_file_commit(&f, err);
    atomic_file_abort(&f);
    return -1;
}

int ts_save(const char *path, const ts_dict *root, char **err)
{
    const ts_item **tensors = NULL;
    size_t n = 0, cap = 0, next_key = 0;
    if (collect(root, &tensors, &n, &cap, path, err) != 0) {
        free(tensors);
        return -1;
    }
    strbuf pkl = {0};
    p_op(&pkl, 0x80); /* PROTO 2 */
    p_op(&pkl, 2);
    p_dict(&pkl, root, &next_key);
    p_op(&pkl, '.');

    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *buf = zip_source_buffer_create(NULL, 0, 0, &ze);
    int rc;
    if (!buf) {
        rc = report_failure(err, "%s: %s", path, zip_error_strerror(&ze));
    } else {
        rc = build_zip(buf, &pkl, tensors, n, path, err);
        if (rc == 0)
            rc = copy_out(buf, path, err);
        zip_source_free(buf);
    }
    zip_error_fini(&ze);
    sb_free(&pkl);
    free(tensors);
    return rc;
}

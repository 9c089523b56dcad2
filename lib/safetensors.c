/*
 * safetensors.c — safetensors reading and writing; see safetensors.h for the format and the
 * rules it enforces.
 *
 * Reading: the header JSON is parsed with jansson (duplicate keys rejected, NULs in strings
 * rejected, nesting depth bounded by jansson), each entry is turned into an st_tensor whose
 * name and metadata strings point into the kept jansson tree, then the tensors are sorted by
 * offsets and checked to tile the data buffer exactly, as the reference's validate() does.
 * Lookup by name is a binary search over a name-sorted index.
 *
 * Writing: the tensors are ordered as the reference orders them (descending dtype alignment,
 * then name), the header is built as a jansson object in insertion order and dumped compact
 * (serde_json's layout), padded with spaces to a multiple of 8, and written with the data
 * through atomic_file (lib/atomic_file.h).
 */
#include "safetensors.h"

#include "log.h"
#include "npy.h"
#include "atomic_file.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER 100000000u /* the reference's MAX_HEADER_SIZE */
#define META_KEY "__metadata__"

struct st_file {
    json_t *root;         /* owns every name and metadata string */
    st_tensor *tensors;   /* offset order */
    size_t n;
    size_t *shapes;       /* every tensor's dims, one block */
    size_t *by_name;      /* indices into tensors, sorted by name */
    st_meta *meta;        /* sorted by key */
    size_t n_meta;
    void *map;            /* st_open's mapping */
    size_t map_len;
};

/* ---- dtypes --------------------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned char size;
} DTYPES[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_I16] = {"I16", 2},         [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},         [ST_F64] = {"F64", 8}, [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

static bool dtype_valid(st_dtype d)
{
    return (unsigned)d < ST_DTYPE_COUNT;
}

size_t st_dtype_size(st_dtype dtype)
{
    return dtype_valid(dtype) ? DTYPES[dtype].size : 0;
}

const char *st_dtype_name(st_dtype dtype)
{
    return dtype_valid(dtype) ? DTYPES[dtype].name : "?";
}

bool st_dtype_from_name(const char *name, st_dtype *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(name, DTYPES[i].name) == 0) {
            *out = (st_dtype)i;
            return true;
        }
    }
    return false;
}

bool st_aligned(const st_tensor *t)
{
    return (uintptr_t)t->data % st_dtype_size(t->dtype) == 0;
}

/* product(shape) × itemsize, false on overflow. */
static bool tensor_bytes(st_dtype dtype, int ndim, const size_t *shape, size_t *out)
{
    *out = 0;
    size_t n = st_dtype_size(dtype);
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, shape[i], &n))
            return false;
    *out = n;
    return true;
}

/* "[2, 3]" for messages. */
static char *shape_text(int ndim, const size_t *shape)
{
    strbuf sb = {0};
    sb_putc(&sb, '[');
    for (int i = 0; i < ndim; i++)
        sb_printf(&sb, i ? ", %zu" : "%zu", shape[i]);
    sb_putc(&sb, ']');
    return sb.s;
}

/* ---- reading: header entries ---------------------------------------------------------- */

/* A JSON integer that fits size_t and is not negative. */
static bool json_size(const json_t *j, size_t *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *out = (size_t)json_integer_value(j);
    return true;
}

/* Fill t (except data/nbytes) from one header entry. Byte offsets go to off[2]. */
static int parse_entry(const char *name, const char *key, json_t *info, st_tensor *t,
                       size_t *shape_store, size_t off[2], char **err)
{
    if (!json_is_object(info))
        return report_failure(err, "%s: tensor '%s': header entry is not an object", name, key);
    json_t *dtype = json_object_get(info, "dtype"), *shape = json_object_get(info, "shape");
    json_t *offsets = json_object_get(info, "data_offsets");
    if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offsets))
        return report_failure(err, "%s: tensor '%s': needs \"dtype\" (string), \"shape\" and "
                         "\"data_offsets\" (arrays)",
                    name, key);
    t->name = key;
    if (!st_dtype_from_name(json_string_value(dtype), &t->dtype))
        return report_failure(err, "%s: tensor '%s': unknown dtype \"%s\"", name, key,
                    json_string_value(dtype));
    t->ndim = (int)json_array_size(shape);
    for (size_t i = 0; i < json_array_size(shape); i++)
        if (!json_size(json_array_get(shape, i), &shape_store[i]))
            return report_failure(err, "%s: tensor '%s': shape entries must be non-negative integers",
                        name, key);
    t->shape = shape_store;
    if (json_array_size(offsets) != 2 || !json_size(json_array_get(offsets, 0), &off[0]) ||
        !json_size(json_array_get(offsets, 1), &off[1]))
        return report_failure(err, "%s: tensor '%s': data_offsets must be [begin, end], non-negative "
                         "integers",
                    name, key);
    if (off[1] < off[0])
        return report_failure(err, "%s: tensor '%s': data_offsets [%zu, %zu] end before they begin", name,
                    key, off[0], off[1]);
    return 0;
}

static int parse_metadata(const char *name, json_t *meta, st_file *f, char **err)
{
    if (json_is_null(meta))
        return 0; /* the reference reads null as "no metadata" */
    if (!json_is_object(meta))
        return report_failure(err, "%s: \"" META_KEY "\" is not an object", name);
    f->meta = xcalloc(json_object_size(meta), sizeof *f->meta);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return report_failure(err, "%s: \"" META_KEY "\" value for '%s' is not a string", name, k);
        f->meta[f->n_meta++] = (st_meta){k, json_string_value(v)};
    }
    return 0;
}

/* ---- reading: validation -------------------------------------------------------------- */

/* Sorting by offsets needs the offsets next to each tensor. */
typedef struct {
    st_tensor t;
    size_t begin, end;
} placed;

static int cmp_placed(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name); /* empty tensors may share offsets; stay deterministic */
}

/* The reference's rule: sorted spans start at 0, follow each other without gaps or overlaps,
 * match their shape × dtype, and end exactly at the end of the file. */
static int check_layout(const char *name, placed *p, size_t n, size_t buf_len, char **err)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *key = p[i].t.name;
        if (p[i].end > buf_len)
            return report_failure(err, "%s: tensor '%s': data_offsets [%zu, %zu] run past the end of the "
                             "%zu-byte data buffer (file truncated?)",
                        name, key, p[i].begin, p[i].end, buf_len);
        if (p[i].begin < at)
            return report_failure(err, "%s: tensor '%s': data_offsets [%zu, %zu] overlap tensor '%s'",
                        name, key, p[i].begin, p[i].end, p[i - 1].t.name);
        if (p[i].begin > at)
            return report_failure(err, "%s: tensor '%s': gap before data_offsets [%zu, %zu] (bytes from "
                             "%zu are not covered)",
                        name, key, p[i].begin, p[i].end, at);
        size_t need;
        if (!tensor_bytes(p[i].t.dtype, p[i].t.ndim, p[i].t.shape, &need))
            return report_failure(err, "%s: tensor '%s': shape is too large (size overflows)", name, key);
        if (need != p[i].end - p[i].begin) {
            char *s = shape_text(p[i].t.ndim, p[i].t.shape);
            report_failure(err, "%s: tensor '%s': shape %s of %s needs %zu bytes but data_offsets span %zu",
                 name, key, s, DTYPES[p[i].t.dtype].name, need, p[i].end - p[i].begin);
            free(s);
            return -1;
        }
        at = p[i].end;
    }
    if (at != buf_len)
        return report_failure(err, "%s: %zu trailing bytes after the last tensor's data", name,
                    buf_len - at);
    return 0;
}

/* ---- reading: assembly ---------------------------------------------------------------- */

static int cmp_by_name(const void *a, const void *b, void *ctx)
{
    const st_tensor *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int cmp_meta(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

/* Count dims over all entries so that one allocation holds every shape. */
static size_t total_dims(json_t *root)
{
    size_t dims = 0;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        dims += json_array_size(json_object_get(v, "shape")); /* 0 when not an array */
    }
    return dims;
}

/* Walk the header object into f->tensors (sorted and checked) and f->meta. */
static int build(const char *name, const unsigned char *data, size_t data_len, st_file *f,
                 char **err)
{
    size_t entries = json_object_size(f->root);
    placed *p = xcalloc(entries, sizeof *p);
    size_t *shapes = f->shapes = xcalloc(total_dims(f->root), sizeof *shapes), used = 0, n = 0;
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(f->root, k, v) {
        size_t off[2] = {0, 0};
        if (strcmp(k, META_KEY) == 0)
            rc = parse_metadata(name, v, f, err);
        else if ((rc = parse_entry(name, k, v, &p[n].t, shapes + used, off, err)) == 0) {
            used += (size_t)p[n].t.ndim;
            p[n].begin = off[0];
            p[n].end = off[1];
            n++;
        }
        if (rc)
            break;
    }
    if (rc == 0) {
        qsort(p, n, sizeof *p, cmp_placed);
        rc = check_layout(name, p, n, data_len, err);
    }
    if (rc == 0) {
        f->n = n;
        f->tensors = xcalloc(n, sizeof *f->tensors);
        for (size_t i = 0; i < n; i++) {
            f->tensors[i] = p[i].t;
            f->tensors[i].data = data + p[i].begin;
            f->tensors[i].nbytes = p[i].end - p[i].begin;
        }
    }
    free(p);
    return rc;
}

/* Sorted indexes for st_find and st_meta_*. */
static void index_names(st_file *f)
{
    f->by_name = xcalloc(f->n, sizeof *f->by_name);
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = i;
    qsort_r(f->by_name, f->n, sizeof *f->by_name, cmp_by_name, f->tensors);
    if (f->n_meta)
        qsort(f->meta, f->n_meta, sizeof *f->meta, cmp_meta);
}

/* The preamble: header length within bounds and the header starting with '{'. */
static int check_preamble(const unsigned char *b, size_t len, const char *name, size_t *hlen,
                          char **err)
{
    if (len < 8)
        return report_failure(err, "%s: not a safetensors file (%zu bytes, shorter than the 8-byte "
                         "header length)",
                    name, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | b[i];
    if (n > MAX_HEADER)
        return report_failure(err, "%s: not a safetensors file (header length %llu is over the %u-byte "
                         "limit)",
                    name, (unsigned long long)n, MAX_HEADER);
    if (n > len - 8)
        return report_failure(err, "%s: truncated safetensors file: header of %llu bytes runs past the "
                         "end (file is %zu bytes)",
                    name, (unsigned long long)n, len);
    if (n == 0 || b[8] != '{')
        return report_failure(err, "%s: not a safetensors file (header does not start with '{')", name);
    *hlen = (size_t)n;
    return 0;
}

int st_parse(const void *buf, size_t len, const char *name, st_file **out, char **err)
{
    *out = NULL;
    const unsigned char *b = buf;
    size_t hlen = 0;
    if (check_preamble(b, len, name, &hlen, err))
        return -1;
    json_error_t jerr;
    st_file *f = xcalloc(1, sizeof *f);
    f->root = json_loadb((const char *)b + 8, hlen, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    if (!f->root)
        rc = report_failure(err, "%s: bad safetensors JSON header at byte %d: %s", name,
                  jerr.position + 8, jerr.text);
    else if (!json_is_object(f->root))
        rc = report_failure(err, "%s: safetensors header is not a JSON object", name);
    else
        rc = build(name, b + 8 + hlen, len - 8 - hlen, f, err);
    if (rc) {
        st_close(f);
        return -1;
    }
    index_names(f);
    *out = f;
    return 0;
}

int st_open(const char *path, st_file **out, char **err)
{
    *out = NULL;
    int fd = open_regular_file(path, SIZE_MAX, NULL, err); /* never waits on a FIFO */
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return report_failure(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return report_failure(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return report_failure(err, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
        }
    }
    close(fd); /* the mapping keeps the file alive */
    if (st_parse(map ? map : "", size, path, out, err)) {
        if (map)
            munmap(map, size);
        return -1;
    }
    (*out)->map = map;
    (*out)->map_len = size;
    return 0;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    json_decref(f->root);
    free(f->tensors);
    free(f->shapes);
    free(f->by_name);
    free(f->meta);
    free(f);
}

/* ---- lookups -------------------------------------------------------------------------- */

size_t st_count(const st_file *f)
{
    return f->n;
}

const st_tensor *st_at(const st_file *f, size_t i)
{
    return i < f->n ? &f->tensors[i] : NULL;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t st_meta_count(const st_file *f)
{
    return f->n_meta;
}

st_meta st_meta_at(const st_file *f, size_t i)
{
    return i < f->n_meta ? f->meta[i] : (st_meta){NULL, NULL};
}

const char *st_meta_get(const st_file *f, const char *key)
{
    st_meta probe = {key, NULL};
    const st_meta *m = f->n_meta ? bsearch(&probe, f->meta, f->n_meta, sizeof *m, cmp_meta) : NULL;
    return m ? m->value : NULL;
}

/* ---- writing -------------------------------------------------------------------------- */

/* The reference's order: larger alignment first (so every tensor stays aligned after an
 * 8-aligned header), then by name. */
static int cmp_write_order(const void *a, const void *b, void *ctx)
{
    const st_tensor *t = ctx;
    const st_tensor *x = &t[*(const size_t *)a], *y = &t[*(const size_t *)b];
    if (x->dtype != y->dtype)
        return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Check one input tensor; *nbytes is its payload size. */
static int check_input(const char *path, const st_tensor *t, size_t *nbytes, char **err)
{
    if (!t->name)
        return report_failure(err, "%s: a tensor has no name", path);
    if (strcmp(t->name, META_KEY) == 0)
        return report_failure(err, "%s: '" META_KEY "' is reserved and cannot name a tensor", path);
    if (!dtype_valid(t->dtype))
        return report_failure(err, "%s: tensor '%s': invalid dtype %d", path, t->name, (int)t->dtype);
    if (t->ndim < 0 || (t->ndim > 0 && !t->shape))
        return report_failure(err, "%s: tensor '%s': invalid shape", path, t->name);
    if (!tensor_bytes(t->dtype, t->ndim, t->shape, nbytes) || *nbytes > INT64_MAX)
        return report_failure(err, "%s: tensor '%s': shape is too large (size overflows)", path, t->name);
    if (*nbytes > 0 && !t->data)
        return report_failure(err, "%s: tensor '%s': no data for a non-empty tensor", path, t->name);
    return 0;
}

/* One tensor's header entry: {"dtype":..,"shape":[..],"data_offsets":[begin,end]}. */
static json_t *entry_json(const st_tensor *t, size_t begin, size_t end)
{
    json_t *shape = json_array();
    for (int i = 0; i < t->ndim; i++)
        json_array_append_new(shape, json_integer((json_int_t)t->shape[i]));
    return json_pack("{s:s,s:o,s:[I,I]}", "dtype", DTYPES[t->dtype].name, "shape", shape,
                     "data_offsets", (json_int_t)begin, (json_int_t)end);
}

/* Metadata object with keys in sorted order (the reference's HashMap order is random; sorted
 * at least makes our files reproducible). */
static int meta_json(const char *path, const st_meta *meta, size_t n, json_t **out, char **err)
{
    st_meta *sorted = xcalloc(n, sizeof *sorted);
    memcpy(sorted, meta, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_meta);
    json_t *obj = json_object();
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!sorted[i].key || !sorted[i].value)
            rc = report_failure(err, "%s: metadata entry %zu has a NULL key or value", path, i);
        else if (i > 0 && strcmp(sorted[i].key, sorted[i - 1].key) == 0)
            rc = report_failure(err, "%s: metadata key '%s' appears twice", path, sorted[i].key);
        else if (json_object_set_new(obj, sorted[i].key, json_string(sorted[i].value)))
            rc = report_failure(err, "%s: metadata '%s' is not valid UTF-8", path, sorted[i].key);
    }
    free(sorted);
    if (rc)
        json_decref(obj);
    else
        *out = obj;
    return rc;
}

/* Build the header JSON and the write order (order[i] indexes tensors). */
static int header_json(const char *path, const st_tensor *tensors, size_t n, const st_meta *meta,
                       size_t n_meta, size_t *order, json_t **out, char **err)
{
    size_t nbytes;
    for (size_t i = 0; i < n; i++) {
        if (check_input(path, &tensors[i], &nbytes, err))
            return -1;
        order[i] = i;
    }
    qsort_r(order, n, sizeof *order, cmp_write_order, (void *)tensors);
    json_t *root = json_object(), *m = NULL;
    if (n_meta > 0) {
        if (meta_json(path, meta, n_meta, &m, err)) {
            json_decref(root);
            return -1;
        }
        json_object_set_new(root, META_KEY, m);
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = &tensors[order[i]];
        tensor_bytes(t->dtype, t->ndim, t->shape, &nbytes);
        if (json_object_get(root, t->name)) {
            json_decref(root);
            return report_failure(err, "%s: tensor name '%s' appears twice", path, t->name);
        }
        if (__builtin_add_overflow(at, nbytes, &at) || at > INT64_MAX ||
            json_object_set_new(root, t->name, entry_json(t, at - nbytes, at))) {
            json_decref(root);
            return report_failure(err, "%s: tensor '%s': name is not valid UTF-8 or data is too large",
                        path, t->name);
        }
    }
    *out = root;
    return 0;
}

/* Compact JSON padded with spaces to a multiple of 8, as the reference pads it. */
static char *header_bytes(json_t *root, size_t *len)
{
    char *json = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!json)
        die(EXIT_RUNTIME, "out of memory formatting a safetensors header");
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    char *out = xmalloc(padded);
    memcpy(out, json, n);
    memset(out + n, ' ', padded - n);
    free(json);
    *len = padded;
    return out;
}

static int write_all(const char *path, const char *header, size_t hlen, const st_tensor *tensors,
                     const size_t *order, size_t n, char **err)
{
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    atomic_file f;
    if (atomic_file_open(&f, path, err))
        return -1;
    size_t total = 8 + hlen;
    for (size_t i = 0; i < n; i++) {
        size_t nbytes;
        tensor_bytes(tensors[order[i]].dtype, tensors[order[i]].ndim, tensors[order[i]].shape, &nbytes);
        total += nbytes;
    }
    atomic_file_reserve(&f, total);
    int rc = atomic_file_write(&f, len8, 8, err);
    if (rc == 0)
        rc = atomic_file_write(&f, header, hlen, err);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const st_tensor *t = &tensors[order[i]];
        size_t nbytes;
        tensor_bytes(t->dtype, t->ndim, t->shape, &nbytes);
        rc = atomic_file_write(&f, t->data, nbytes, err);
    }
    if (rc == 0)
        rc = atomic_file_commit(&f, err);
    atomic_file_abort(&f);
    return rc;
}

int st_write(const char *path, const st_tensor *tensors, size_t n_tensors, const st_meta *meta,
             size_t n_meta, char **err)
{
    size_t *order = xcalloc(n_tensors, sizeof *order), hlen;
    json_t *root = NULL;
    if (header_json(path, tensors, n_tensors, meta, n_meta, order, &root, err)) {
        free(order);
        return -1;
    }
    char *header = header_bytes(root, &hlen);
    json_decref(root);
    int rc = write_all(path, header, hlen, tensors, order, n_tensors, err);
    free(header);
    free(order);
    return rc;
}

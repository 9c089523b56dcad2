/*
 * safetensors.h — read and write the safetensors format (huggingface/safetensors), the file
 * format of selfsup checkpoints, so `safetensors.torch.load_file` opens them directly.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__":{"k":"v"},"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},...}
 * then the byte buffer; offsets are relative to the buffer start, data is little-endian and C
 * ordered. The reader applies the reference implementation's rules: header at most 100 MB
 * and starting with '{', valid UTF-8 JSON with unique keys, known dtypes, and tensors whose
 * offsets, sorted, tile the whole buffer exactly (no gaps, overlaps or trailing bytes) with
 * each span equal to product(shape) × dtype size. The writer produces byte-for-byte what the
 * reference serializer writes (tensors ordered by descending dtype alignment, then name;
 * compact JSON; header padded with spaces to a multiple of 8), with metadata keys sorted.
 *
 * Errors follow npy.h: 0 on success, -1 on failure with a malloc'd message in *err (naming
 * the file and the problem), or logged when err is NULL. Writes are atomic (atomic_file).
 */
#ifndef SELFSUP_SAFETENSORS_H
#define SELFSUP_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>

/* In the reference's alignment order, which the writer sorts by. */
typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_DTYPE_COUNT
} st_dtype;

/* Bytes per element (0 when out of range), and the header's name for it ("F32", "BF16"). */
size_t st_dtype_size(st_dtype dtype);
const char *st_dtype_name(st_dtype dtype);
bool st_dtype_from_name(const char *name, st_dtype *out);

/* One tensor. The reader fills all fields (data points into the file's mapping, valid until
 * st_close, read-only). The writer reads name, dtype, ndim, shape and data; it computes the
 * size from shape and ignores nbytes. */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    const size_t *shape; /* ndim entries; may be NULL when ndim is 0 */
    size_t nbytes;
    const void *data;    /* may be NULL when the tensor has no elements */
} st_tensor;

typedef struct {
    const char *key, *value;
} st_meta;

/* Write tensors (names unique, not "__metadata__") and optional string metadata atomically.
 * The tensors array is not modified. Pass n_meta 0 to write no "__metadata__" entry. */
int st_write(const char *path, const st_tensor *tensors, size_t n_tensors, const st_meta *meta,
             size_t n_meta, char **err);

/* A parsed file. */
typedef struct st_file st_file;

/* Memory-map `path` read-only and validate it. */
int st_open(const char *path, st_file **out, char **err);
/* Validate a whole file image in memory; tensors point into `buf`, which must outlive the
 * st_file. `name` is only used in messages. */
int st_parse(const void *buf, size_t len, const char *name, st_file **out, char **err);
/* Release a file from st_open or st_parse; NULL is fine. */
void st_close(st_file *f);

/* Tensors in file (offset) order, index 0..st_count-1. */
size_t st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, size_t i);
/* The tensor called `name`, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* "__metadata__" entries, sorted by key; st_meta_get returns NULL for a missing key. */
size_t st_meta_count(const st_file *f);
st_meta st_meta_at(const st_file *f, size_t i);
const char *st_meta_get(const st_file *f, const char *key);

/* Data alignment: a tensor's data is aligned to its element size when the file came from a
 * writer like ours or the reference (header padded to 8, buffer sorted by alignment); files
 * from other writers may not be, so callers reading wide types from foreign files should
 * memcpy, or check st_aligned. */
bool st_aligned(const st_tensor *t);

#endif

/*
 * npy.h — numpy .npy files: read (format 1.0, 2.0, 3.0) and write (1.0, byte-identical to
 * numpy.save of a C-ordered little-endian array).
 *
 * A .npy file is the magic "\x93NUMPY", a version (major, minor), a little-endian header
 * length (2 bytes in 1.0, 4 in 2.0/3.0), a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a '\n' so that the data starts on a 64-byte boundary, then the raw
 * elements in C order. Readers validate everything (magic, version, header bounds, dict syntax,
 * dtype, shape × itemsize == payload size with overflow checks) and refuse big-endian and
 * Fortran-ordered data clearly instead of converting it.
 *
 * Errors: functions returning int give 0 on success and -1 on failure; on failure, when `err`
 * is not NULL, *err receives a malloc'd message naming the file and the problem (free it), and
 * when `err` is NULL the message is logged at ERROR level instead.
 *
 * Writes go through atomic_file (atomic_file.h), the temp-file + fsync + rename writer that npy and
 * safetensors share, so that a crash never leaves a half-written file under the final name.
 */
#ifndef SELFSUP_NPY_H
#define SELFSUP_NPY_H

#include <stdbool.h>
#include <stddef.h>

/* numpy 1.x's NPY_MAXDIMS; deeper arrays are refused on read and write. */
#define NPY_MAX_DIMS 32

/* Element types. The first six are the ones the project writes; the rest are read-only
 * conveniences (npy_write accepts them too, numpy reads them fine). */
typedef enum {
    NPY_F4, /* float32 '<f4' */
    NPY_F8, /* float64 '<f8' */
    NPY_I4, /* int32   '<i4' */
    NPY_I8, /* int64   '<i8' */
    NPY_U1, /* uint8   '|u1' */
    NPY_I1, /* int8    '|i1' */
    NPY_U2, /* uint16  '<u2' */
    NPY_I2, /* int16   '<i2' */
    NPY_U4, /* uint32  '<u4' */
    NPY_U8, /* uint64  '<u8' */
    NPY_F2, /* float16 '<f2' */
    NPY_B1, /* bool    '|b1', one byte 0 or 1 */
    NPY_DTYPE_COUNT
} npy_dtype;

/* Bytes per element; 0 for an out-of-range value. */
size_t npy_dtype_size(npy_dtype dtype);
/* numpy's descr string as written by numpy.save ("<f4", "|u1", ...); "?" when out of range. */
const char *npy_dtype_descr(npy_dtype dtype);
/* Short name ("f4", "u1", "b1"); parse one back with npy_dtype_from_name. */
const char *npy_dtype_name(npy_dtype dtype);
bool npy_dtype_from_name(const char *name, npy_dtype *out);

/* An array read from a file. `data` is aligned to the element size and valid until
 * npy_close; it is read-only when the array came from npy_open (a private read-only map). */
typedef struct {
    npy_dtype dtype;
    int ndim;                    /* 0 for a scalar array */
    size_t shape[NPY_MAX_DIMS];
    size_t count;                /* product of shape (1 for 0-d, 0 when any dim is 0) */
    size_t nbytes;               /* count * itemsize */
    void *data;
    /* private: what npy_close releases */
    void *map_;
    size_t map_len_;
    void *owned_;
} npy_array;

/* Memory-map `path` read-only and describe it in *arr. Any size works (size_t/off_t). If the
 * payload is not aligned to its element size (files from old writers), it is copied. */
int npy_open(const char *path, npy_array *arr, char **err);
/* Read `path` fully into memory (for small files, or when the file may change underneath). */
int npy_read(const char *path, npy_array *arr, char **err);
/* Parse a whole .npy image in memory without copying: arr->data points into `buf`, which must
 * outlive arr. `name` is only used in messages. An unaligned payload is copied, as npy_open
 * does, so call npy_close when done (it frees only that copy). */
int npy_parse(const void *buf, size_t len, const char *name, npy_array *arr, char **err);
/* Release what npy_open/npy_read/npy_parse acquired; safe on a zeroed or closed array. */
void npy_close(npy_array *arr);

/* Write a C-ordered array as numpy.save would, atomically. `data` holds product(shape)
 * elements (may be NULL when that product is 0). */
int npy_write(const char *path, npy_dtype dtype, int ndim, const size_t *shape,
              const void *data, char **err);

/* The exact header bytes numpy.save writes for such an array (magic through the final '\n',
 * length a multiple of 64), for callers that stream the payload themselves. Returns a malloc'd
 * buffer and its length in *len, or NULL with *err set for bad arguments. */
char *npy_header(npy_dtype dtype, int ndim, const size_t *shape, size_t *len, char **err);



#endif

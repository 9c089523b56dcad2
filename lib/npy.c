/*
 * npy.c — numpy .npy reading and writing; see npy.h for the format and the error contract.
 *
 * Reading parses the whole file image (a read-only mmap, a malloc'd copy or a caller's buffer)
 * with one validator, npy_parse, so every entry point checks the same things. The header dict
 * is parsed by a small recursive-descent reader of the Python literal subset numpy writes
 * (strings, True/False, tuples of ints), not by pattern matching, so reordered keys, other
 * whitespace and Python 2's "3L" integers all read as numpy would read them.
 *
 * Writing reproduces numpy 1.24's lib/format.py exactly: keys sorted, repr() of each value,
 * 21 - len(str(shape[0])) spare spaces for in-place growth, then space padding and '\n' so
 * that magic + length field + header is a multiple of 64 (a full extra 64 when already
 * aligned, as numpy does), always format 1.0 since NPY_MAX_DIMS keeps headers far below
 * 64 KiB.
 */
#include "npy.h"

#include "log.h"
#include "atomic_file.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
#define ALIGN 64
#define GROWTH_AXIS_MAX_DIGITS 21

/* ---- dtypes --------------------------------------------------------------------------- */

static const struct {
    char kind; /* numpy type character */
    unsigned char size;
    const char *descr, *name;
} DTYPES[NPY_DTYPE_COUNT] = {
    [NPY_F4] = {'f', 4, "<f4", "f4"}, [NPY_F8] = {'f', 8, "<f8", "f8"},
    [NPY_I4] = {'i', 4, "<i4", "i4"}, [NPY_I8] = {'i', 8, "<i8", "i8"},
    [NPY_U1] = {'u', 1, "|u1", "u1"}, [NPY_I1] = {'i', 1, "|i1", "i1"},
    [NPY_U2] = {'u', 2, "<u2", "u2"}, [NPY_I2] = {'i', 2, "<i2", "i2"},
    [NPY_U4] = {'u', 4, "<u4", "u4"}, [NPY_U8] = {'u', 8, "<u8", "u8"},
    [NPY_F2] = {'f', 2, "<f2", "f2"}, [NPY_B1] = {'b', 1, "|b1", "b1"},
};

static bool dtype_valid(npy_dtype d)
{
    return (unsigned)d < NPY_DTYPE_COUNT;
}

size_t npy_dtype_size(npy_dtype dtype)
{
    return dtype_valid(dtype) ? DTYPES[dtype].size : 0;
}

const char *npy_dtype_descr(npy_dtype dtype)
{
    return dtype_valid(dtype) ? DTYPES[dtype].descr : "?";
}

const char *npy_dtype_name(npy_dtype dtype)
{
    return dtype_valid(dtype) ? DTYPES[dtype].name : "?";
}

bool npy_dtype_from_name(const char *name, npy_dtype *out)
{
    for (int i = 0; i < NPY_DTYPE_COUNT; i++) {
        if (strcmp(name, DTYPES[i].name) == 0) {
            *out = (npy_dtype)i;
            return true;
        }
    }
    return false;
}

/* Map a numpy descr ("<f4", "|u1", "=i8", "f4") to our dtype. The byte-order mark is optional
 * ('=' and '|' mean native, which is little-endian on every host we build for); '>' is refused
 * for multi-byte types because we hand out the bytes as they are. */
static int descr_to_dtype(const char *descr, const char *name, npy_dtype *out, char **err)
{
    const char *code = descr;
    char order = '=';
    if (*code == '<' || *code == '>' || *code == '|' || *code == '=')
        order = *code++;
    for (int i = 0; i < NPY_DTYPE_COUNT; i++) {
        if (strcmp(code, DTYPES[i].name) != 0)
            continue;
        if (order == '>' && DTYPES[i].size > 1)
            return report_failure(err,
                        "%s: big-endian dtype '%s' is not supported; convert it with "
                        "arr.astype('<%s') in numpy",
                        name, descr, code);
        *out = (npy_dtype)i;
        return 0;
    }
    return report_failure(err,
                "%s: unsupported dtype '%s' (supported: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1, "
                "little-endian)",
                name, descr);
}

/* ---- header dict parsing -------------------------------------------------------------- */

/* A cursor over the header text; `name` is the file, for messages. */
typedef struct {
    const char *p, *end;
    const char *name;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool peek(cursor *c, char ch)
{
    skip_ws(c);
    return c->p < c->end && *c->p == ch;
}

static bool accept(cursor *c, char ch)
{
    if (!peek(c, ch))
        return false;
    c->p++;
    return true;
}

/* Quote the text near the cursor so a message shows where parsing stopped. */
static int syntax_error(cursor *c, const char *what, char **err)
{
    char near[24];
    size_t n = 0;
    for (const char *q = c->p; q < c->end && n < sizeof near - 1; q++)
        near[n++] = (*q >= 32 && *q < 127) ? *q : '?';
    near[n] = '\0';
    return report_failure(err, "%s: malformed .npy header: expected %s at \"%s\"", c->name, what, near);
}

/* A Python string literal in single or double quotes, without escapes (numpy never writes
 * any in the keys or descrs we accept). Copies at most cap-1 bytes. */
static int parse_string(cursor *c, char *out, size_t cap, char **err)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return syntax_error(c, "a quoted string", err);
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || *c->p == '\n')
            return syntax_error(c, "a plain string (escapes are not supported)", err);
        if (n + 1 >= cap)
            return syntax_error(c, "a shorter string", err);
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return syntax_error(c, "a closing quote", err);
    c->p++;
    out[n] = '\0';
    return 0;
}

static bool accept_word(cursor *c, const char *word)
{
    skip_ws(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return false;
    c->p += n;
    return true;
}

static int parse_bool(cursor *c, bool *out, char **err)
{
    if (accept_word(c, "True"))
        *out = true;
    else if (accept_word(c, "False"))
        *out = false;
    else
        return syntax_error(c, "True or False", err);
    return 0;
}

/* A non-negative decimal integer that fits size_t; Python 2's "L" suffix is allowed. */
static int parse_dim(cursor *c, size_t *out, char **err)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return syntax_error(c, "a non-negative integer dimension", err);
    size_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        size_t digit = (size_t)(*c->p - '0');
        if (v > (SIZE_MAX - digit) / 10)
            return report_failure(err, "%s: .npy header has a dimension too large for this machine",
                        c->name);
        v = v * 10 + digit;
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L')
        c->p++;
    *out = v;
    return 0;
}

/* A tuple of dims: "()", "(5,)", "(2, 3)", "(2, 3,)". "(5)" is an int in Python, not a tuple,
 * and numpy refuses it, so we do too. */
static int parse_shape(cursor *c, int *ndim, size_t *shape, char **err)
{
    if (!accept(c, '('))
        return syntax_error(c, "a shape tuple", err);
    int n = 0;
    bool trailing_comma = false;
    while (!accept(c, ')')) {
        if (n >= NPY_MAX_DIMS)
            return report_failure(err, "%s: .npy shape has more than %d dimensions", c->name,
                        NPY_MAX_DIMS);
        if (parse_dim(c, &shape[n++], err))
            return -1;
        trailing_comma = accept(c, ',');
        if (!trailing_comma && !peek(c, ')'))
            return syntax_error(c, "',' or ')' in the shape", err);
    }
    if (n == 1 && !trailing_comma)
        return report_failure(err, "%s: .npy shape is not a tuple (a 1-d shape is written \"(N,)\")",
                    c->name);
    *ndim = n;
    return 0;
}

/* What the header dict says. */
typedef struct {
    char descr[32];
    bool fortran_order;
    int ndim;
    size_t shape[NPY_MAX_DIMS];
} header_info;

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

static int parse_entry(cursor *c, header_info *h, unsigned *seen, char **err)
{
    char key[32];
    if (parse_string(c, key, sizeof key, err))
        return -1;
    if (!accept(c, ':'))
        return syntax_error(c, "':'", err);
    unsigned bit = strcmp(key, "descr") == 0           ? KEY_DESCR
                   : strcmp(key, "fortran_order") == 0 ? KEY_FORTRAN
                   : strcmp(key, "shape") == 0         ? KEY_SHAPE
                                                       : 0;
    if (!bit)
        return report_failure(err, "%s: .npy header has unexpected key '%s'", c->name, key);
    if (*seen & bit)
        return report_failure(err, "%s: .npy header repeats key '%s'", c->name, key);
    *seen |= bit;
    if (bit == KEY_DESCR) {
        if (peek(c, '['))
            return report_failure(err, "%s: structured dtypes are not supported", c->name);
        return parse_string(c, h->descr, sizeof h->descr, err);
    }
    if (bit == KEY_FORTRAN)
        return parse_bool(c, &h->fortran_order, err);
    return parse_shape(c, &h->ndim, h->shape, err);
}

static int parse_dict(cursor *c, header_info *h, char **err)
{
    unsigned seen = 0;
    if (!accept(c, '{'))
        return syntax_error(c, "'{'", err);
    while (!accept(c, '}')) {
        if (parse_entry(c, h, &seen, err))
            return -1;
        if (!accept(c, ',') && !peek(c, '}'))
            return syntax_error(c, "',' or '}'", err);
    }
    skip_ws(c);
    if (c->p != c->end)
        return syntax_error(c, "only padding after the header dict", err);
    if (seen != (KEY_DESCR | KEY_FORTRAN | KEY_SHAPE))
        return report_failure(err, "%s: .npy header lacks '%s'", c->name,
                    !(seen & KEY_DESCR) ? "descr" : !(seen & KEY_FORTRAN) ? "fortran_order"
                                                                            : "shape");
    return 0;
}

/* ---- validation ----------------------------------------------------------------------- */

static bool mul_overflows(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

/* Fortran and C order store the same bytes when at most one dimension exceeds 1. */
static bool order_irrelevant(const header_info *h)
{
    int big = 0;
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] == 0)
            return true;
        big += h->shape[i] > 1;
    }
    return big <= 1;
}

/* Read the preamble: version and header length; sets *header_off and *header_len. */
static int parse_preamble(const unsigned char *b, size_t len, const char *name,
                          size_t *header_off, size_t *header_len, char **err)
{
    if (len < MAGIC_LEN + 2 || memcmp(b, MAGIC, MAGIC_LEN) != 0)
        return report_failure(err, "%s: not a .npy file (%s)", name,
                    len < MAGIC_LEN + 2 ? "too short" : "bad magic, expected \\x93NUMPY");
    unsigned major = b[6], minor = b[7];
    if (minor != 0 || major < 1 || major > 3)
        return report_failure(err, "%s: unsupported .npy format version %u.%u (known: 1.0, 2.0, 3.0)",
                    name, major, minor);
    size_t field = major == 1 ? 2 : 4;
    if (len < MAGIC_LEN + 2 + field)
        return report_failure(err, "%s: truncated .npy file (%zu bytes, no room for the header length)",
                    name, len);
    const unsigned char *f = b + MAGIC_LEN + 2;
    size_t hl = (size_t)f[0] | (size_t)f[1] << 8;
    if (field == 4)
        hl |= (size_t)f[2] << 16 | (size_t)f[3] << 24;
    *header_off = MAGIC_LEN + 2 + field;
    if (hl > len - *header_off)
        return report_failure(err, "%s: truncated .npy file: header of %zu bytes runs past the end "
                         "(file is %zu bytes)",
                    name, hl, len);
    *header_len = hl;
    return 0;
}

/* Check the header against the payload size and fill arr (data pointing into buf). */
static int describe(const header_info *h, const unsigned char *payload, size_t payload_len,
                    const char *name, npy_array *arr, char **err)
{
    npy_dtype dtype = NPY_F4;
    if (descr_to_dtype(h->descr, name, &dtype, err))
        return -1;
    if (h->fortran_order && !order_irrelevant(h))
        return report_failure(err, "%s: array is stored in Fortran order, which is not supported; save "
                         "it with numpy.ascontiguousarray(arr) first",
                    name);
    size_t count = 1, nbytes;
    for (int i = 0; i < h->ndim; i++)
        if (mul_overflows(count, h->shape[i], &count))
            return report_failure(err, "%s: .npy shape is too large (element count overflows)", name);
    if (mul_overflows(count, npy_dtype_size(dtype), &nbytes))
        return report_failure(err, "%s: .npy shape is too large (byte count overflows)", name);
    if (nbytes != payload_len)
        return report_failure(err,
                    "%s: .npy payload is %zu bytes but shape and dtype '%s' need %zu (%s)",
                    name, payload_len, h->descr, nbytes,
                    payload_len < nbytes ? "file truncated?" : "trailing bytes");
    *arr = (npy_array){.dtype = dtype, .ndim = h->ndim, .count = count, .nbytes = nbytes,
                       .data = (void *)payload};
    memcpy(arr->shape, h->shape, sizeof h->shape);
    return 0;
}

/* Parse a file image; arr->data points into buf and nothing is owned yet. */
static int parse_image(const void *buf, size_t len, const char *name, npy_array *arr,
                       char **err)
{
    const unsigned char *b = buf;
    size_t off = 0, hlen = 0;
    if (parse_preamble(b, len, name, &off, &hlen, err))
        return -1;
    header_info h = {0};
    cursor c = {(const char *)b + off, (const char *)b + off + hlen, name};
    if (parse_dict(&c, &h, err))
        return -1;
    return describe(&h, b + off + hlen, len - off - hlen, name, arr, err);
}

/* Drop whatever backs arr (mapping or owned buffer) without touching the header fields. */
static void release_backing(npy_array *arr)
{
    if (arr->map_)
        munmap(arr->map_, arr->map_len_);
    free(arr->owned_);
    arr->map_ = NULL;
    arr->map_len_ = 0;
    arr->owned_ = NULL;
}

/* Callers cast data to float* etc., so hand out element-aligned data; files from writers that
 * aligned the header to 16 bytes or less may not be. Copying is the rare, slow path. */
static void ensure_aligned(npy_array *arr)
{
    size_t item = npy_dtype_size(arr->dtype);
    if (arr->nbytes == 0 || (uintptr_t)arr->data % item == 0)
        return;
    void *copy = xmalloc_large(arr->nbytes);
    memcpy(copy, arr->data, arr->nbytes);
    release_backing(arr);
    arr->owned_ = copy;
    arr->data = copy;
}

int npy_parse(const void *buf, size_t len, const char *name, npy_array *arr, char **err)
{
    *arr = (npy_array){0};
    if (parse_image(buf, len, name, arr, err))
        return -1;
    ensure_aligned(arr);
    return 0;
}

void npy_close(npy_array *arr)
{
    release_backing(arr);
    arr->data = NULL;
}

/* ---- reading files -------------------------------------------------------------------- */

/* Open a regular file and get its size. A FIFO or a device is refused before it is opened:
 * mapping or reading one would block, or never end. */
static int open_sized(const char *path, int *fd_out, size_t *size_out, char **err)
{
    int fd = open_regular_file(path, SIZE_MAX, size_out, err);
    if (fd < 0)
        return -1;
    *fd_out = fd;
    return 0;
}

int npy_open(const char *path, npy_array *arr, char **err)
{
    *arr = (npy_array){0};
    int fd;
    size_t size;
    if (open_sized(path, &fd, &size, err))
        return -1;
    if (size == 0) {
        close(fd);
        return report_failure(err, "%s: not a .npy file (file is empty)", path);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return report_failure(err, "%s: cannot map %zu bytes: %s", path, size, strerror(map_errno));
    if (parse_image(map, size, path, arr, err)) {
        munmap(map, size);
        return -1;
    }
    arr->map_ = map;
    arr->map_len_ = size;
    ensure_aligned(arr);
    return 0;
}

/* Read exactly n bytes from the start of fd, retrying short reads and EINTR. */
static int read_all(int fd, void *buf, size_t n, const char *path, char **err)
{
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
        ssize_t r = pread(fd, (char *)buf + done, chunk, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return report_failure(err, "%s: read failed: %s", path,
                        r == 0 ? "file shrank while reading" : strerror(errno));
        done += (size_t)r;
    }
    return 0;
}

int npy_read(const char *path, npy_array *arr, char **err)
{
    *arr = (npy_array){0};
    int fd;
    size_t size;
    if (open_sized(path, &fd, &size, err))
        return -1;
    void *buf = xmalloc_large(size);
    int rc = read_all(fd, buf, size, path, err);
    close(fd);
    if (rc == 0)
        rc = parse_image(buf, size, path, arr, err);
    if (rc) {
        free(buf);
        return -1;
    }
    arr->owned_ = buf;
    ensure_aligned(arr);
    return 0;
}

/* ---- writing -------------------------------------------------------------------------- */

/* Python's repr() of the shape tuple. */
static void put_shape(strbuf *sb, int ndim, const size_t *shape)
{
    sb_putc(sb, '(');
    for (int i = 0; i < ndim; i++)
        sb_printf(sb, i ? ", %zu" : "%zu", shape[i]);
    sb_puts(sb, ndim == 1 ? ",)" : ")");
}

/* Check write arguments; on success *nbytes is the payload size. */
static int check_args(npy_dtype dtype, int ndim, const size_t *shape, size_t *nbytes,
                      const char *name, char **err)
{
    if (!dtype_valid(dtype))
        return report_failure(err, "%s: invalid npy dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > NPY_MAX_DIMS || (ndim > 0 && !shape))
        return report_failure(err, "%s: invalid number of dimensions %d (0..%d)", name, ndim,
                    NPY_MAX_DIMS);
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        if (mul_overflows(count, shape[i], &count))
            return report_failure(err, "%s: shape too large (element count overflows)", name);
    if (mul_overflows(count, npy_dtype_size(dtype), nbytes))
        return report_failure(err, "%s: shape too large (byte count overflows)", name);
    return 0;
}

/* Build the header for validated arguments. */
static char *format_header(npy_dtype dtype, int ndim, const size_t *shape, size_t *len)
{
    strbuf dict = {0};
    sb_printf(&dict, "{'descr': '%s', 'fortran_order': False, 'shape': ", DTYPES[dtype].descr);
    put_shape(&dict, ndim, shape);
    sb_puts(&dict, ", }");
    if (ndim > 0) {
        /* numpy leaves room for shape[0] to grow to 21 digits when appending in place */
        int digits = snprintf(NULL, 0, "%zu", shape[0]);
        for (int i = digits; i < GROWTH_AXIS_MAX_DIGITS; i++)
            sb_putc(&dict, ' ');
    }
    size_t hlen = dict.len + 1;                               /* dict + '\n' */
    size_t pad = ALIGN - (MAGIC_LEN + 2 + 2 + hlen) % ALIGN;  /* 1..64, never 0, as numpy */
    size_t field = hlen + pad;                                /* fits: NPY_MAX_DIMS bounds it */
    strbuf out = {0};
    sb_putn(&out, MAGIC, MAGIC_LEN);
    char pre[4] = {1, 0, (char)(field & 0xff), (char)(field >> 8)};
    sb_putn(&out, pre, sizeof pre);
    sb_putn(&out, dict.s, dict.len);
    for (size_t i = 0; i < pad; i++)
        sb_putc(&out, ' ');
    sb_putc(&out, '\n');
    sb_free(&dict);
    *len = out.len;
    return out.s;
}

char *npy_header(npy_dtype dtype, int ndim, const size_t *shape, size_t *len, char **err)
{
    size_t nbytes;
    if (check_args(dtype, ndim, shape, &nbytes, "npy header", err))
        return NULL;
    return format_header(dtype, ndim, shape, len);
}

int npy_write(const char *path, npy_dtype dtype, int ndim, const size_t *shape,
              const void *data, char **err)
{
    size_t nbytes, hlen;
    if (check_args(dtype, ndim, shape, &nbytes, path, err))
        return -1;
    if (nbytes > 0 && !data)
        return report_failure(err, "%s: no data given for a non-empty array", path);
    char *header = format_header(dtype, ndim, shape, &hlen);
    atomic_file f;
    int rc = atomic_file_open(&f, path, err);
    atomic_file_reserve(&f, hlen + nbytes);
    if (rc == 0)
        rc = atomic_file_write(&f, header, hlen, err);
    if (rc == 0)
        rc = atomic_file_write(&f, data, nbytes, err);
    if (rc == 0)
        rc = atomic_file_commit(&f, err);
    atomic_file_abort(&f);
    free(header);
    return rc;
}


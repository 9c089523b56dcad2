/*
 * filelist.c — the .npy files of disk_filelist sources.
 *
 * lib/npy reads numeric arrays only, and a file list is a string array: np.save of a list of
 * str writes dtype '<UN' (N UCS-4 code points per item, NUL-padded), of bytes '|SN'. This file
 * parses just enough of the .npy header for those (descr, fortran_order, a 1-D shape) and
 * turns each item into a UTF-8 C string. Pickled object arrays are refused: VISSL reads them
 * only through allow_pickle, which runs arbitrary code.
 */
#include "filelist.h"

#include "npy.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char kind;       /* 'U' or 'S' */
    size_t item_len; /* code points (U) or bytes (S) per item */
    size_t count;
    size_t data_offset;
} string_header;

/* The text after "'key':" inside the header dict, or NULL. */
static const char *dict_value(const char *dict, const char *key)
{
    const char *p = strstr(dict, key);
    if (!p)
        return NULL;
    p += strlen(key);
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

static int parse_header(const uint8_t *buf, size_t len, const char *name, string_header *h, char **err)
{
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
        return report_failure(err, "%s: not a .npy file", name);
    size_t hlen, start;
    if (buf[6] == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if ((buf[6] == 2 || buf[6] == 3) && len >= 12) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        start = 12;
    } else {
        return report_failure(err, "%s: unsupported .npy version %u", name, buf[6]);
    }
    if (hlen > len - start || hlen > 1 << 20)
        return report_failure(err, "%s: .npy header runs past the end of the file", name);
    char *dict = xstrndup((const char *)buf + start, hlen);
    const char *descr = dict_value(dict, "'descr'"), *fortran = dict_value(dict, "'fortran_order'"),
               *shape = dict_value(dict, "'shape'");
    int rc = 0;
    char kind = 0, *end = NULL;
    unsigned long long item_len = 0, count = 0;
    /* (strchr finds the terminating NUL too, so a character is checked non-zero first.) */
    if (descr && (descr[0] == '\'' || descr[0] == '"') && descr[1] && strchr("<|=", descr[1]) && descr[2] &&
        strchr("US", descr[2]) && isdigit((unsigned char)descr[3])) {
        kind = descr[2];
        errno = 0;
        item_len = strtoull(descr + 3, &end, 10);
    }
    if (!kind || errno || end == descr + 3 || (descr[1] != '|' && kind == 'S') || (kind == 'U' && descr[1] == '>'))
        rc = report_failure(err, "%s: a file list must be a numpy array of str ('<U…') or bytes ('|S…'), not %.20s", name,
                            descr ? descr : "?");
    else if (!fortran || strncmp(fortran, "False", 5))
        rc = report_failure(err, "%s: Fortran-ordered arrays are not supported", name);
    else if (!shape || shape[0] != '(' || !isdigit((unsigned char)shape[1]) ||
             (errno = 0, count = strtoull(shape + 1, &end, 10), errno) ||
             end == shape + 1 || strncmp(end, ",)", 2))
        rc = report_failure(err, "%s: a file list must be a 1-D array (shape (N,))", name);
    free(dict);
    if (rc)
        return rc;
    size_t item_bytes = (size_t)item_len * (kind == 'U' ? 4 : 1), total;
    /* strtoull takes a sign, hence the digit checks above; an item has at least one character. */
    if (item_len == 0 || item_len > 1 << 16 || __builtin_mul_overflow((size_t)count, item_bytes, &total) ||
        total > len - start - hlen)
        return report_failure(err, "%s: %llu items of %llu characters do not fit the file", name, count, item_len);
    *h = (string_header){.kind = kind, .item_len = item_len, .count = count, .data_offset = start + hlen};
    return 0;
}

/* One code point as UTF-8 into out (4 bytes room); returns the bytes written, 0 if invalid. */
static size_t utf8_encode(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        if (c >= 0xD800 && c <= 0xDFFF)
            return 0;
        out[0] = (char)(0xE0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    if (c < 0x110000) {
        out[0] = (char)(0xF0 | c >> 18);
        out[1] = (char)(0x80 | (c >> 12 & 0x3F));
        out[2] = (char)(0x80 | (c >> 6 & 0x3F));
        out[3] = (char)(0x80 | (c & 0x3F));
        return 4;
    }
    return 0;
}

/* Item i as a C string; NULL when it holds an invalid code point or an inner NUL. */
static char *item_string(const uint8_t *item, const string_header *h)
{
    if (h->kind == 'S') {
        size_t n = strnlen((const char *)item, h->item_len);
        return xstrndup((const char *)item, n);
    }
    size_t n = h->item_len;
    while (n > 0 && !memcmp(item + 4 * (n - 1), "\0\0\0\0", 4))
        n--; /* numpy pads with NULs */
    char *s = xmalloc(4 * n + 1), *p = s;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *c = item + 4 * k;
        uint32_t cp = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
        size_t w = cp ? utf8_encode(cp, p) : 0;
        if (!w) {
            free(s);
            return NULL;
        }
        p += w;
    }
    *p = 0;
    return s;
}

int decode_filelist_parse(const uint8_t *buf, size_t len, const char *name, char ***paths, size_t *count, char **err)
{
    *paths = NULL;
    *count = 0;
    string_header h = {0};
    if (parse_header(buf, len, name, &h, err) != 0)
        return -1;
    char **out = xcalloc(h.count ? h.count : 1, sizeof *out);
    size_t item_bytes = h.item_len * (h.kind == 'U' ? 4 : 1);
    for (size_t i = 0; i < h.count; i++) {
        out[i] = item_string(buf + h.data_offset + i * item_bytes, &h);
        if (!out[i]) {
            decode_filelist_free(out, i);
            return report_failure(err, "%s: item %zu is not a valid path (bad character)", name, i);
        }
    }
    *paths = out;
    *count = h.count;
    return 0;
}

int decode_filelist_read(const char *path, char ***paths, size_t *count, char **err)
{
    size_t len;
    char *why = NULL;
    char *buf = read_regular_file(path, (size_t)1 << 36, &len, &why); /* a FIFO or device is refused, not waited on */
    if (!buf) {
        report_failure(err, "cannot read file list %s", why);
        free(why);
        return -1;
    }
    int rc = decode_filelist_parse((const uint8_t *)buf, len, path, paths, count, err);
    free(buf);
    return rc;
}

void decode_filelist_free(char **paths, size_t count)
{
    for (size_t i = 0; paths && i < count; i++)
        free(paths[i]);
    free(paths);
}

/* Element i of an integer array as int64; false for a non-integer dtype. */
static bool int_at(const npy_array *a, size_t i, int64_t *v)
{
    const void *d = a->data;
    switch (a->dtype) {
    case NPY_I1: *v = ((const int8_t *)d)[i]; return true;
    case NPY_U1: case NPY_B1: *v = ((const uint8_t *)d)[i]; return true;
    case NPY_I2: *v = ((const int16_t *)d)[i]; return true;
    case NPY_U2: *v = ((const uint16_t *)d)[i]; return true;
    case NPY_I4: *v = ((const int32_t *)d)[i]; return true;
    case NPY_U4: *v = ((const uint32_t *)d)[i]; return true;
    case NPY_I8: *v = ((const int64_t *)d)[i]; return true;
    case NPY_U8: *v = (int64_t)((const uint64_t *)d)[i]; return true;
    default: return false;
    }
}

int decode_labels_read_rows(const char *path, int64_t **labels, size_t *count, size_t *width, char **err)
{
    npy_array a = {0};
    if (npy_open(path, &a, err) != 0) /* refuses Fortran order (naming the file) */
        return -1;
    int64_t v;
    if (a.count && !int_at(&a, 0, &v)) {
        npy_close(&a);
        return report_failure(err, "%s: labels must be integers, not dtype %s", path, npy_dtype_name(a.dtype));
    }
    if (a.ndim != 1 && a.ndim != 2) {
        char shape[256] = "(";
        size_t used = 1;
        for (int d = 0; d < a.ndim && used < sizeof shape - 32; d++)
            used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%zu", d ? ", " : "", a.shape[d]);
        snprintf(shape + used, sizeof shape - used, "%s)", used < sizeof shape - 32 ? "" : ", ...");
        npy_close(&a);
        return report_failure(err, "%s: labels must have shape (N,) or (N, M) (a row of M labels per sample), not %s",
                              path, shape);
    }
    size_t n = a.shape[0], m = a.ndim == 2 ? a.shape[1] : 1;
    if (m == 0) {
        npy_close(&a);
        return report_failure(err, "%s: labels of shape (%zu, 0): every sample needs at least one label", path, n);
    }
    int64_t *out = xmalloc((a.count ? a.count : 1) * sizeof *out);
    for (size_t i = 0; i < a.count; i++)
        int_at(&a, i, &out[i]);
    *labels = out;
    *count = n;
    *width = m;
    npy_close(&a);
    return 0;
}

int decode_labels_read(const char *path, int64_t **labels, size_t *count, char **err)
{
    size_t width;
    if (decode_labels_read_rows(path, labels, count, &width, err) != 0)
        return -1;
    if (width != 1) {
        free(*labels);
        *labels = NULL;
        return report_failure(err, "%s: labels must be integers, one per sample (shape (N,)), not %zu per sample", path,
                              width);
    }
    return 0;
}

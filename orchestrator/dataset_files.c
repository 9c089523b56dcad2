/*
 * dataset_files.c — the files `selfsup dataset` writes as VISSL's scripts write them: numpy's
 * '<U' arrays of paths (what np.save(np.array(list_of_str)) makes), small text files written
 * atomically, and dataset_catalog.json entries (see dataset_files.h).
 */
#include "dataset_files.h"

#include "atomic_file.h"
#include "log.h"
#include "util.h"

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Append the code points of a file name as Python's os.fsdecode sees it (UTF-8, with
 * surrogateescape for bytes that are not UTF-8) to out; returns the number of code points. */
static size_t fsdecode(const char *s, uint32_t *out)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t n = 0;
    while (*p) {
        uint32_t c = *p;
        int extra = c >= 0xf0 && c < 0xf5 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : 0;
        if (c < 0x80) {
            p++;
        } else if (extra && (c < 0xf5)) {
            uint32_t v = c & (0x3f >> extra);
            int k = 1;
            for (; k <= extra && (p[k] & 0xc0) == 0x80; k++)
                v = v << 6 | (p[k] & 0x3f);
            bool ok = k == extra + 1 && !(extra == 2 && (v < 0x800 || (v >= 0xd800 && v < 0xe000))) &&
                      !(extra == 3 && (v < 0x10000 || v > 0x10ffff));
            if (ok) {
                c = v;
                p += k;
            } else {
                c = 0xdc00 + *p++;
            }
        } else {
            c = 0xdc00 + *p++;
        }
        if (out)
            out[n] = c;
        n++;
    }
    return n;
}

/* numpy.save of a 1-d '<U' array of these strings (format 1.0, header padded as numpy does). */
void strlist_push(strlist *l, char *s)
{
    l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
    l->v[l->n++] = s;
}

void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (strlist){0};
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void strlist_sort(strlist *l)
{
    if (l->n > 1) /* qsort must not get NULL, even for nothing to sort */
        qsort(l->v, l->n, sizeof *l->v, cmp_str);
}

int write_unicode_npy(const char *path, char **strings, size_t count, char **err)
{
    size_t width = 1;
    for (size_t k = 0; k < count; k++) {
        size_t n = fsdecode(strings[k], NULL);
        if (n > width)
            width = n;
    }
    strbuf h = {0};
    sb_printf(&h, "{'descr': '<U%zu', 'fortran_order': False, 'shape': (%zu,), }", width, count);
    char digits[32];
    int shape_digits = snprintf(digits, sizeof digits, "%zu", count);
    for (int k = shape_digits; k < 21; k++) /* numpy's GROWTH_AXIS_MAX_DIGITS spare room */
        sb_putc(&h, ' ');
    while ((10 + h.len + 1) % 64)
        sb_putc(&h, ' ');
    sb_putc(&h, '\n');
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(h.len & 0xff), (uint8_t)(h.len >> 8)};
    if (h.len > 65535) {
        sb_free(&h);
        return report_failure(err, "%s: header too long", path);
    }
    atomic_file f;
    if (atomic_file_open(&f, path, err) < 0) {
        sb_free(&h);
        return -1;
    }
    size_t row_bytes = width * 4;
    atomic_file_reserve(&f, sizeof pre + h.len + count * row_bytes);
    int rc = atomic_file_write(&f, pre, sizeof pre, err);
    if (rc == 0)
        rc = atomic_file_write(&f, h.s, h.len, err);
    sb_free(&h);
    /* rows in blocks of ~1 MiB */
    size_t per_block = (1 << 20) / row_bytes + 1;
    uint32_t *block = xmalloc(per_block * row_bytes);
    for (size_t k = 0; rc == 0 && k < count; k += per_block) {
        size_t rows = count - k < per_block ? count - k : per_block;
        memset(block, 0, rows * row_bytes);
        for (size_t r = 0; r < rows; r++) {
            uint32_t *row = block + r * width;
            size_t n = fsdecode(strings[k + r], row);
            for (size_t c = 0; c < n; c++) /* little-endian UCS4 */
                row[c] = htole32(row[c]);
        }
        rc = atomic_file_write(&f, block, rows * row_bytes, err);
    }
    free(block);
    if (rc == 0)
        rc = atomic_file_commit(&f, err);
    if (rc < 0)
        atomic_file_abort(&f);
    return rc;
}

int write_text_atomic(const char *path, const char *text, char **err)
{
    atomic_file f;
    if (atomic_file_open(&f, path, err) < 0)
        return -1;
    if (atomic_file_write(&f, text, strlen(text), err) < 0 || atomic_file_commit(&f, err) < 0) {
        atomic_file_abort(&f);
        return -1;
    }
    return 0;
}

char *py_json_string(const char *s)
{
    json_t *j = json_string(s);
    char *out = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    return out ? out : xstrdup("\"\""); /* not UTF-8: jansson refuses it */
}

json_t *catalog_pair(const char *a, const char *b)
{
    json_t *arr = json_array();
    json_array_append_new(arr, json_string(a));
    json_array_append_new(arr, json_string(b));
    return arr;
}

int write_catalog(const char *dir, json_t *catalog, char **err)
{
    char *text = json_dumps(catalog, JSON_INDENT(4) | JSON_PRESERVE_ORDER);
    char *text_nl = xasprintf("%s\n", text), *path = path_join(dir, "dataset_catalog.json");
    int rc = write_text_atomic(path, text_nl, err);
    free(text), free(text_nl), free(path);
    return rc;
}

int write_filelist_catalog(const char *dst, const char *name, const char *train, const char *val, char **err)
{
    char *abs = realpath(dst, NULL);
    if (!abs)
        return report_failure(err, "%s: %s", dst, strerror(errno));
    json_t *cat = json_object(), *entry = json_object();
    const char *const splits[2][2] = {{"train", train}, {"val", val}};
    for (int k = 0; k < 2; k++) {
        char *img = xasprintf("%s/%s_images.npy", abs, splits[k][1]), *lbl = xasprintf("%s/%s_labels.npy", abs, splits[k][1]);
        json_object_set_new(entry, splits[k][0], catalog_pair(img, lbl));
        free(img), free(lbl);
    }
    json_object_set_new(cat, name, entry);
    int rc = write_catalog(abs, cat, err);
    json_decref(cat);
    free(abs);
    return rc;
}

int parse_src_dst(int argc, char **argv, const char *const *names, bool *flags, int nflags, const char **src,
                  const char **dst, void (*usage)(FILE *))
{
    *src = *dst = NULL;
    for (int i = 1; i < argc; i++) {
        int f = 0;
        while (f < nflags && strcmp(argv[i], names[f]))
            f++;
        if (f < nflags) {
            flags[f] = true;
        } else if (argv[i][0] == '-') {
            log_error("%s: unknown option '%s'", argv[0], argv[i]);
            return EXIT_USAGE;
        } else if (!*src || !*dst) {
            *(*src ? dst : src) = argv[i];
        } else {
            log_error("%s: one SRC and one DST only ('%s' is extra)", argv[0], argv[i]);
            return EXIT_USAGE;
        }
    }
    if (!*src || !*dst) {
        usage(stderr);
        return EXIT_USAGE;
    }
    return 0;
}

/*
 * features.c — VISSL's extracted-feature files (features.h): write one rank's files, read
 * explicit files with their checks, and merge every rank's files as merge_features does.
 *
 * Every reader converts to one in-memory form (float32 features, int64 targets and indices),
 * so the evaluators never see a dtype; every check names the file and, for bad values, the
 * row, because a NaN in row 48,113 of a 1.28 M-row file is otherwise a week's mystery.
 */
#include "features.h"

#include "atomic_file.h"
#include "npy.h"
#include "util.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *feat_path(const char *dir, int rank, const char *split, const char *layer, const char *what)
{
    return xasprintf("%s/rank%d_%s_%s_%s.npy", dir, rank, split, layer, what);
}

void feat_free(feat_set *f)
{
    free(f->features);
    free(f->targets);
    free(f->inds);
    memset(f, 0, sizeof *f);
}

static int fail(char **err, char *msg)
{
    if (err)
        *err = msg;
    else
        free(msg);
    return -1;
}

/* ---- writing --------------------------------------------------------------------------- */

/* Rows at a time through one buffer, so a write costs a system call per megabyte, not per row. */
#define WRITE_CHUNK (1u << 20)

/* The features file, rows order[0..m) (or 0..m) of f, streamed: nothing but one chunk is
 * copied, so the rows may be a memory-mapped spill file bigger than memory. */
static int write_feature_rows(const char *path, const feat_set *f, const size_t *order, size_t m, char **err)
{
    size_t shape[2] = {m, f->dim}, hlen, row = f->dim * sizeof(float);
    char *header = npy_header(NPY_F4, 2, shape, &hlen, err);
    if (!header)
        return -1;
    atomic_file af;
    if (atomic_file_open(&af, path, err) != 0) {
        free(header);
        return -1;
    }
    atomic_file_reserve(&af, hlen + m * row);
    int rc = atomic_file_write(&af, header, hlen, err);
    free(header);
    size_t per_chunk = row && row < WRITE_CHUNK ? WRITE_CHUNK / row : 1;
    char *chunk = xmalloc(per_chunk * row + 1);
    for (size_t i = 0; i < m && rc == 0; i += per_chunk) {
        size_t k = m - i < per_chunk ? m - i : per_chunk;
        for (size_t j = 0; j < k; j++)
            memcpy(chunk + j * row, f->features + (order ? order[i + j] : i + j) * f->dim, row);
        rc = atomic_file_write(&af, chunk, k * row, err);
    }
    free(chunk);
    if (rc == 0)
        return atomic_file_commit(&af, err);
    atomic_file_abort(&af);
    return -1;
}

int feat_write_rows(const char *dir, int rank, const char *split, const char *layer, const feat_set *f,
                    const size_t *order, size_t m, char **err)
{
    int64_t *tgt = xmalloc(m * f->ntargets * sizeof *tgt + 1), *inds = xmalloc(m * sizeof *inds + 1);
    for (size_t i = 0; i < m; i++) {
        size_t r = order ? order[i] : i;
        memcpy(tgt + i * f->ntargets, f->targets + r * f->ntargets, f->ntargets * sizeof *tgt);
        inds[i] = f->inds[r];
    }
    size_t tshape[2] = {m, f->ntargets}, ishape[1] = {m};
    char *paths[3] = {feat_path(dir, rank, split, layer, "features"), feat_path(dir, rank, split, layer, "targets"),
                      feat_path(dir, rank, split, layer, "inds")};
    int rc = write_feature_rows(paths[0], f, order, m, err);
    if (rc == 0)
        rc = npy_write(paths[1], NPY_I8, 2, tshape, tgt, err);
    if (rc == 0)
        rc = npy_write(paths[2], NPY_I8, 1, ishape, inds, err);
    for (int i = 0; i < 3; i++)
        free(paths[i]);
    free(tgt);
    free(inds);
    return rc;
}

int feat_write(const char *dir, int rank, const char *split, const char *layer, const feat_set *f, char **err)
{
    return feat_write_rows(dir, rank, split, layer, f, NULL, f->n, err);
}

/* ---- de-duplication -------------------------------------------------------------------- */

typedef struct {
    int64_t ind;
    size_t row;
} row_key;

static int by_index_then_row(const void *a, const void *b)
{
    const row_key *x = a, *y = b;
    if (x->ind != y->ind)
        return x->ind < y->ind ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

size_t feat_dedup_order(const int64_t *inds, size_t n, size_t *order)
{
    row_key *keys = xmalloc(n * sizeof *keys + 1);
    for (size_t i = 0; i < n; i++)
        keys[i] = (row_key){inds[i], i};
    /* Sorting by (index, row) puts the first occurrence of an index first: VISSL's rule. */
    qsort(keys, n, sizeof *keys, by_index_then_row);
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (k == 0 || keys[k].ind != keys[k - 1].ind)
            order[m++] = keys[k].row;
    free(keys);
    return m;
}

void feat_dedup_sort(feat_set *f)
{
    if (f->n == 0)
        return;
    size_t *order = xmalloc(f->n * sizeof *order);
    size_t m = feat_dedup_order(f->inds, f->n, order);
    float *feat = xmalloc_large(m * f->dim * sizeof *feat + 1);
    int64_t *tgt = xmalloc(m * f->ntargets * sizeof *tgt + 1), *inds = xmalloc(m * sizeof *inds);
    for (size_t k = 0; k < m; k++) {
        size_t r = order[k];
        memcpy(feat + k * f->dim, f->features + r * f->dim, f->dim * sizeof *feat);
        memcpy(tgt + k * f->ntargets, f->targets + r * f->ntargets, f->ntargets * sizeof *tgt);
        inds[k] = f->inds[r];
    }
    free(order);
    free(f->features);
    free(f->targets);
    free(f->inds);
    f->features = feat;
    f->targets = tgt;
    f->inds = inds;
    f->n = m;
}

/* ---- reading --------------------------------------------------------------------------- */

/* Features: 2-D f4 or f8 (1-D is one feature per row), every value finite. */
static int read_features(const char *path, feat_set *out, char **err)
{
    npy_array a;
    if (npy_open(path, &a, err) != 0)
        return -1;
    int rc = -1;
    if (a.dtype != NPY_F4 && a.dtype != NPY_F8) {
        fail(err, xasprintf("%s: features must be float32 (or float64), not %s", path, npy_dtype_name(a.dtype)));
        goto out;
    }
    if (a.ndim != 1 && a.ndim != 2) {
        fail(err, xasprintf("%s: features must be a 2-D array N x D, not %d-D", path, a.ndim));
        goto out;
    }
    out->n = a.shape[0];
    out->dim = a.ndim == 2 ? a.shape[1] : 1;
    out->features = xmalloc_large(a.count * sizeof(float) + 1);
    for (size_t i = 0; i < a.count; i++) {
        double v = a.dtype == NPY_F4 ? ((const float *)a.data)[i] : ((const double *)a.data)[i];
        if (!isfinite(v) || fabs(v) > 3.4e38) {
            fail(err, xasprintf("%s: row %zu, column %zu is %g; features must be finite", path, i / out->dim,
                                i % out->dim, v));
            goto out;
        }
        out->features[i] = (float)v;
    }
    rc = 0;
out:
    npy_close(&a);
    return rc;
}

/* One integer-valued element of a as int64; false for a non-integral or out-of-range value. */
static bool element_int(const npy_array *a, size_t i, int64_t *v)
{
    switch (a->dtype) {
    case NPY_I1: *v = ((const int8_t *)a->data)[i]; return true;
    case NPY_U1: *v = ((const uint8_t *)a->data)[i]; return true;
    case NPY_B1: *v = ((const uint8_t *)a->data)[i] != 0; return true;
    case NPY_I2: *v = ((const int16_t *)a->data)[i]; return true;
    case NPY_U2: *v = ((const uint16_t *)a->data)[i]; return true;
    case NPY_I4: *v = ((const int32_t *)a->data)[i]; return true;
    case NPY_U4: *v = ((const uint32_t *)a->data)[i]; return true;
    case NPY_I8: *v = ((const int64_t *)a->data)[i]; return true;
    case NPY_U8: {
        uint64_t u = ((const uint64_t *)a->data)[i];
        *v = (int64_t)u;
        return u <= INT64_MAX;
    }
    case NPY_F4:
    case NPY_F8: {
        double d = a->dtype == NPY_F4 ? ((const float *)a->data)[i] : ((const double *)a->data)[i];
        *v = (int64_t)d;
        return isfinite(d) && fabs(d) < 9e18 && (double)*v == d;
    }
    default: return false;
    }
}

/* Targets (N or N × L) or indices (N): integers, as many rows as the features. */
static int read_ints(const char *path, const char *what, size_t rows, int max_ndim, int64_t **data, size_t *cols,
                     char **err)
{
    npy_array a;
    if (npy_open(path, &a, err) != 0)
        return -1;
    int rc = -1;
    if (a.ndim < 1 || a.ndim > max_ndim) {
        fail(err, xasprintf("%s: %s must be %s, not %d-D", path, what, max_ndim == 1 ? "1-D (N,)" : "N or N x L",
                            a.ndim));
        goto out;
    }
    if (a.shape[0] != rows) {
        fail(err, xasprintf("%s: %zu rows of %s for %zu rows of features", path, a.shape[0], what, rows));
        goto out;
    }
    *cols = a.ndim == 2 ? a.shape[1] : 1;
    *data = xmalloc(a.count * sizeof **data + 1);
    for (size_t i = 0; i < a.count; i++)
        if (!element_int(&a, i, &(*data)[i])) {
            fail(err, xasprintf("%s: row %zu: %s must be integers (dtype %s)", path, i / *cols, what,
                                npy_dtype_name(a.dtype)));
            goto out;
        }
    rc = 0;
out:
    npy_close(&a);
    return rc;
}

int feat_load(const char *features_path, const char *targets_path, const char *inds_path, feat_set *out, char **err)
{
    memset(out, 0, sizeof *out);
    size_t one;
    if (read_features(features_path, out, err) != 0 ||
        read_ints(targets_path, "targets", out->n, 2, &out->targets, &out->ntargets, err) != 0 ||
        (inds_path && read_ints(inds_path, "indices", out->n, 1, &out->inds, &one, err) != 0)) {
        feat_free(out);
        return -1;
    }
    if (!inds_path) {
        out->inds = xmalloc(out->n * sizeof *out->inds + 1);
        for (size_t i = 0; i < out->n; i++)
            out->inds[i] = (int64_t)i;
    }
    return 0;
}

/* ---- merging --------------------------------------------------------------------------- */

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Append b's rows to a (same widths, checked by the caller). */
static void append(feat_set *a, const feat_set *b)
{
    size_t n = a->n + b->n;
    a->features = xrealloc(a->features, n * a->dim * sizeof *a->features + 1);
    a->targets = xrealloc(a->targets, n * a->ntargets * sizeof *a->targets + 1);
    a->inds = xrealloc(a->inds, n * sizeof *a->inds + 1);
    memcpy(a->features + a->n * a->dim, b->features, b->n * b->dim * sizeof *b->features);
    memcpy(a->targets + a->n * a->ntargets, b->targets, b->n * b->ntargets * sizeof *b->targets);
    memcpy(a->inds + a->n, b->inds, b->n * sizeof *b->inds);
    a->n = n;
}

static int load_rank(const char *dir, int rank, const char *split, const char *layer, feat_set *out, char **err)
{
    char *f = feat_path(dir, rank, split, layer, "features"), *t = feat_path(dir, rank, split, layer, "targets"),
         *i = feat_path(dir, rank, split, layer, "inds");
    int rc = feat_load(f, t, i, out, err);
    free(f);
    free(t);
    free(i);
    return rc;
}

int feat_merge(const char *dir, const char *split, const char *layer, feat_set *out, char **err)
{
    memset(out, 0, sizeof *out);
    char *first = feat_path(dir, 0, split, layer, "features");
    bool any = exists(first);
    free(first);
    if (!any)
        return fail(err, xasprintf("%s: no %s features of layer '%s' (rank0_%s_%s_features.npy); extract them first",
                                   dir, split, layer, split, layer));
    for (int rank = 0;; rank++) {
        char *path = feat_path(dir, rank, split, layer, "features");
        bool there = exists(path);
        free(path);
        if (!there)
            break;
        feat_set r;
        if (load_rank(dir, rank, split, layer, &r, err) != 0) {
            feat_free(out);
            return -1;
        }
        if (rank > 0 && (r.dim != out->dim || r.ntargets != out->ntargets)) {
            *err = xasprintf("%s: rank %d's %s %s features are %zu wide with %zu target columns, rank 0's %zu and %zu",
                             dir, rank, split, layer, r.dim, r.ntargets, out->dim, out->ntargets);
            feat_free(&r);
            feat_free(out);
            return -1;
        }
        if (rank == 0)
            *out = r;
        else {
            append(out, &r);
            feat_free(&r);
        }
    }
    feat_dedup_sort(out);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char **feat_layers(const char *dir, const char *split, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *prefix = xasprintf("rank0_%s_", split);
    const char *suffix = "_features.npy";
    size_t lp = strlen(prefix), ls = strlen(suffix);
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= lp + ls || strncmp(e->d_name, prefix, lp) || strcmp(e->d_name + l - ls, suffix))
            continue;
        names = xrealloc(names, (size_t)(*n + 1) * sizeof *names);
        names[(*n)++] = xasprintf("%.*s", (int)(l - lp - ls), e->d_name + lp);
    }
    closedir(d);
    free(prefix);
    if (*n > 1)
        qsort(names, (size_t)*n, sizeof *names, by_name);
    return names;
}

/*
 * clusterfit.c — ClusterFit's options, numpy's normalisation, and the result files (see
 * clusterfit.h).
 *
 * The .pkl is what pickle.dump writes for VISSL's dict of three numpy arrays, by the rules
 * ndarray.__reduce__ follows (numpy.core.multiarray._reconstruct, then a state of version,
 * shape, dtype, Fortran order and the raw bytes), at protocol 4 without frames, which every
 * unpickler since Python 3.4 reads. It is written from opcodes, not from a general pickler:
 * these three arrays are all it ever holds, and the raw bytes go straight from the arrays to the
 * file.
 */
#include "cluster/clusterfit.h"

#include "atomic_file.h"
#include "npy.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* ---- options ---------------------------------------------------------------------------- */

/* The CLUSTERFIT keys VISSL added after 0.1.5 that change the result, with the default that
 * leaves 0.1.5's behaviour (a number, or a string when text is set). */
static const struct {
    const char *key, *text;
    double number;
} NEWER_KEYS[] = {
    {"CLUSTERFIT.DATA_LIMIT", NULL, -1},
    {"CLUSTERFIT.FEATURES.DIMENSIONALITY_REDUCTION", NULL, 0},
    {"CLUSTERFIT.OUTPUT_DIR", ".", 0},
    {"CLUSTERFIT.FEATURES.PATH", ".", 0},
};

static bool newer_keys_at_defaults(const cfg_node *config, cfg_err *err)
{
    for (size_t i = 0; i < ARRAY_LEN(NEWER_KEYS); i++) {
        const cfg_node *v = cfg_get(config, NEWER_KEYS[i].key);
        bool same = !v || (NEWER_KEYS[i].text ? v->kind == CFG_STR && !strcmp(v->s, NEWER_KEYS[i].text)
                                              : cfg_is_number(v) && cfg_number(v) == NEWER_KEYS[i].number);
        if (!same) {
            char def[32];
            snprintf(def, sizeof def, "%g", NEWER_KEYS[i].number);
            cfg_fail(err, v, NEWER_KEYS[i].key,
                     "is newer than VISSL 0.1.5, whose ClusterFit selfsup follows: leave it at %s (the features "
                     "and the results are in CHECKPOINT.DIR; every feature is clustered, without PCA)",
                     NEWER_KEYS[i].text ? NEWER_KEYS[i].text : def);
            return false;
        }
    }
    return true;
}

static bool read_partition(const cfg_node *config, clusterfit_options *o, cfg_err *err)
{
    const char *p = cfg_str(config, "CLUSTERFIT.FEATURES.DATA_PARTITION");
    o->split = !strcmp(p, "TRAIN") ? "train" : !strcmp(p, "TEST") ? "test" : NULL;
    if (!o->split)
        cfg_fail(err, cfg_get(config, "CLUSTERFIT.FEATURES.DATA_PARTITION"), "config.CLUSTERFIT.FEATURES.DATA_PARTITION",
                 "is '%s': TRAIN or TEST", p);
    return o->split != NULL;
}

bool clusterfit_options_from_config(const cfg_t *cfg, clusterfit_options *o, cfg_err *err)
{
    const cfg_node *config = cfg_map_get(cfg->root, "config");
    *o = (clusterfit_options){.num_clusters = cfg_int(config, "CLUSTERFIT.NUM_CLUSTERS"),
                              .dataset = cfg_str(config, "CLUSTERFIT.FEATURES.DATASET_NAME"),
                              .layer = cfg_str(config, "CLUSTERFIT.FEATURES.LAYER_NAME")};
    int64_t niter = cfg_int(config, "CLUSTERFIT.N_ITER");
    const char *backend = cfg_str(config, "CLUSTERFIT.CLUSTER_BACKEND");
    if (strcmp(backend, "faiss"))
        cfg_fail(err, cfg_get(config, "CLUSTERFIT.CLUSTER_BACKEND"), "config.CLUSTERFIT.CLUSTER_BACKEND",
                 "is '%s', but faiss is the only backend (as in VISSL)", backend);
    else if (o->num_clusters < 1 || o->num_clusters > INT32_MAX)
        cfg_fail(err, cfg_get(config, "CLUSTERFIT.NUM_CLUSTERS"), "config.CLUSTERFIT.NUM_CLUSTERS",
                 "must be between 1 and %d, not %lld", INT32_MAX, (long long)o->num_clusters);
    else if (niter < 1 || niter > INT32_MAX)
        cfg_fail(err, cfg_get(config, "CLUSTERFIT.N_ITER"), "config.CLUSTERFIT.N_ITER",
                 "must be a positive number of k-means iterations, not %lld", (long long)niter);
    else if (!o->layer[0])
        cfg_fail(err, cfg_get(config, "CLUSTERFIT.FEATURES.LAYER_NAME"), "config.CLUSTERFIT.FEATURES.LAYER_NAME",
                 "is empty: name the layer whose features are clustered (e.g. res5, a name of "
                 "LINEAR_EVAL_FEAT_POOL_OPS_MAP)");
    else if (read_partition(config, o, err) && newer_keys_at_defaults(config, err)) {
        o->niter = (int)niter;
        o->dir = cfg_checkpoint_folder(cfg);
        return true;
    }
    return false;
}

void clusterfit_options_free(clusterfit_options *o)
{
    free(o->dir);
    o->dir = NULL;
}

char *clusterfit_path(const clusterfit_options *o, const char *suffix)
{
    char *name = xasprintf("%s_%s_N%lld_faiss%s", o->dataset, o->split, (long long)o->num_clusters, suffix);
    char *path = path_join(o->dir, name);
    free(name);
    return path;
}

/* ---- numpy's normalisation ---------------------------------------------------------------- */

/* numpy's pairwise_sum for float32 (loops_utils.h): below 8 in a row, up to 128 in 8 running
 * sums, above that the two halves (cut at a multiple of 8) summed on their own. */
static float pairwise_sum(const float *a, size_t n)
{
    if (n < 8) {
        float s = 0.f;
        for (size_t i = 0; i < n; i++)
            s += a[i];
        return s;
    }
    if (n <= 128) {
        float r[8];
        memcpy(r, a, sizeof r);
        size_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        float s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            s += a[i];
        return s;
    }
    size_t half = n / 2;
    half -= half % 8;
    return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

void clusterfit_l2_normalize(float *x, size_t n, size_t d)
{
    float *sq = xmalloc((d ? d : 1) * sizeof *sq);
    for (size_t i = 0; i < n; i++) {
        float *row = x + i * d;
        for (size_t j = 0; j < d; j++)
            sq[j] = row[j] * row[j];
        float norm = sqrtf(0.f + pairwise_sum(sq, d)) + 1e-5f; /* add.reduce starts from its identity */
        for (size_t j = 0; j < d; j++)
            row[j] /= norm;
    }
    free(sq);
}

/* ---- the pickle ----------------------------------------------------------------------------- */

static void op_global(strbuf *p, const char *module, const char *name)
{
    sb_printf(p, "c%s\n%s\n", module, name);
}

static void op_int(strbuf *p, int64_t v)
{
    if (v >= 0 && v < 256) {
        sb_putc(p, 'K'); /* BININT1 */
        sb_putc(p, (char)v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        int32_t w = (int32_t)v;
        sb_putc(p, 'J'); /* BININT, little-endian */
        sb_putn(p, (const char *)&w, 4);
    } else {
        sb_putc(p, (char)0x8a); /* LONG1: 8 bytes, two's complement, little-endian */
        sb_putc(p, 8);
        sb_putn(p, (const char *)&v, 8);
    }
}

static void op_str(strbuf *p, const char *s)
{
    uint32_t n = (uint32_t)strlen(s);
    sb_putc(p, (char)0x8c); /* SHORT_BINUNICODE */
    sb_putc(p, (char)n);
    sb_putn(p, s, n);
}

/* The dtype object: numpy.dtype('f4' | 'i8', False, True) with its little-endian state. */
static void op_dtype(strbuf *p, npy_dtype t)
{
    op_global(p, "numpy", "dtype");
    op_str(p, t == NPY_F4 ? "f4" : "i8");
    sb_putn(p, "\x89\x88\x87R(", 5); /* False, True, TUPLE3, REDUCE, MARK */
    op_int(p, 3);
    op_str(p, "<");
    sb_putn(p, "NNN", 3);
    op_int(p, -1);
    op_int(p, -1);
    op_int(p, 0);
    sb_putn(p, "tb", 2); /* TUPLE, BUILD */
}

/* An array's opcodes up to its raw bytes' length prefix; the bytes follow, then "tb". */
static void op_array_head(strbuf *p, npy_dtype t, size_t rows, size_t cols, uint64_t bytes)
{
    op_global(p, "numpy.core.multiarray", "_reconstruct");
    op_global(p, "numpy", "ndarray");
    op_int(p, 0);
    sb_putn(p, "\x85" "C\x01" "b\x87R(", 7); /* (0,), b'b', TUPLE3, REDUCE, MARK */
    op_int(p, 1);
    op_int(p, (int64_t)rows);
    op_int(p, (int64_t)cols);
    sb_putc(p, (char)0x86); /* TUPLE2: the shape */
    op_dtype(p, t);
    sb_putc(p, (char)0x89); /* not Fortran-ordered */
    sb_putc(p, (char)0x8e); /* BINBYTES8 */
    sb_putn(p, (const char *)&bytes, 8);
}

static int flush(atomic_file *f, strbuf *p, char **err)
{
    int rc = atomic_file_write(f, sb_str(p), p->len, err);
    sb_free(p);
    return rc;
}

static int put_array(atomic_file *f, strbuf *p, const char *key, npy_dtype t, size_t rows, size_t cols,
                     const void *data, char **err)
{
    uint64_t bytes = (uint64_t)rows * cols * npy_dtype_size(t);
    op_str(p, key);
    op_array_head(p, t, rows, cols, bytes);
    if (flush(f, p, err) || atomic_file_write(f, data, bytes, err))
        return -1;
    sb_putn(p, "tb", 2);
    return 0;
}

static int write_pickle(const char *path, size_t n, size_t d, size_t k, const int64_t *labels, const float *centroids,
                        const float *distances, char **err)
{
    atomic_file f;
    if (atomic_file_open(&f, path, err))
        return -1;
    strbuf p = {0};
    sb_putn(&p, "\x80\x04}(", 4); /* PROTO 4, EMPTY_DICT, MARK */
    int rc = put_array(&f, &p, "hard_labels", NPY_I8, n, 1, labels, err) ||
             put_array(&f, &p, "centroids", NPY_F4, k, d, centroids, err) ||
             put_array(&f, &p, "distances", NPY_F4, n, 1, distances, err);
    if (rc == 0) {
        sb_putn(&p, "u.", 2); /* SETITEMS, STOP */
        rc = flush(&f, &p, err) || atomic_file_commit(&f, err);
    }
    sb_free(&p);
    if (rc)
        atomic_file_abort(&f);
    return rc ? -1 : 0;
}

int clusterfit_write(const clusterfit_options *o, size_t n, size_t d, const int64_t *labels, const float *centroids,
                     const float *distances, char **err)
{
    char *npy = clusterfit_path(o, "_lbls.npy"), *pkl = clusterfit_path(o, ".pkl");
    size_t shape[1] = {n};
    int rc = write_pickle(pkl, n, d, (size_t)o->num_clusters, labels, centroids, distances, err) ||
             npy_write(npy, NPY_I8, 1, shape, labels, err);
    free(npy), free(pkl);
    return rc ? -1 : 0;
}

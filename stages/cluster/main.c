/*
 * selfsup-cluster — ClusterFit's pseudo-labels: k-means of extracted features with FAISS
 * (VISSL 0.1.5's tools/cluster_features_and_label.py, after its extraction).
 *
 *   selfsup-cluster -c CONFIG [overrides...] [--features DIR] [--output DIR] [--threads N] [--quiet]
 *
 * Reads config.CLUSTERFIT (clusterfit.h): merges the rank{R}_{split}_{layer}_features.npy files
 * of FEATURES.DATA_PARTITION and FEATURES.LAYER_NAME by sample index (as selfsup-extract or
 * VISSL wrote them into CHECKPOINT.DIR, or --features DIR), L2-normalises every row as VISSL
 * does (norm + 1e-5), trains FAISS's k-means of NUM_CLUSTERS centroids for N_ITER iterations,
 * gives every row its nearest centroid, and writes into CHECKPOINT.DIR (or --output DIR):
 *   {DATASET_NAME}_{split}_N{K}_faiss_lbls.npy   int64 (N,): the cluster of sample 0, 1, …
 *   {DATASET_NAME}_{split}_N{K}_faiss.pkl        {hard_labels, centroids, distances}
 * The labels file is what ClusterFit's training reads (DATA.TRAIN.LABEL_PATHS with
 * LABEL_SOURCES [disk_filelist]); `selfsup clusterfit CONFIG --then TRAIN_CONFIG` passes it on.
 *
 * Since entry i of the labels file is sample i's label, the features must cover samples
 * 0 … N−1 with none missing (VISSL would write the labels shifted past a gap); a gap is refused.
 *
 * Options:
 *   --features DIR   where the feature files are (default: CHECKPOINT.DIR)
 *   --output DIR     where the results go (default: CHECKPOINT.DIR)
 *   --threads N      OpenMP threads for FAISS and its GEMM (default: every core)
 *   --quiet          without FAISS's line per iteration
 *
 * Exit status: 0 done; 1 the features cannot be read, leave a gap, or FAISS fails; 2 a bad
 * argument or config (CLUSTERFIT keys, more clusters than features, an output folder that
 * cannot be written), found before the k-means.
 */
#include "cluster/clusterfit.h"
#include "cluster/kmeans_faiss.h"
#include "config.h"
#include "features.h"
#include "log.h"
#include "timer.h"
#include "train/checkpoint.h"
#include "util.h"
#include "version.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *config, *features, *output;
    int threads, n_overrides;
    bool quiet;
    char **overrides;
} args;

static void usage(FILE *out)
{
    fputs("usage: selfsup-cluster -c CONFIG [overrides...] [--features DIR] [--output DIR] [--threads N] [--quiet]\n"
          "\n"
          "ClusterFit's pseudo-labels (VISSL's cluster_features_and_label.py): FAISS k-means of the\n"
          "extracted features that config.CLUSTERFIT names, written as {DATASET_NAME}_{split}_N{K}_faiss_lbls.npy\n"
          "and {DATASET_NAME}_{split}_N{K}_faiss.pkl.\n"
          "\n"
          "  -c, --config FILE  VISSL config (its CLUSTERFIT keys); arguments after it are overrides\n"
          "  --features DIR     the rank{R}_{split}_{layer}_*.npy files (default: CHECKPOINT.DIR)\n"
          "  --output DIR       where the results go (default: CHECKPOINT.DIR)\n"
          "  --threads N        threads (default: every core)\n"
          "  --quiet            no line per k-means iteration\n"
          "  -h, --help, --version\n"
          "\n"
          "exit status: 0 done, 1 unreadable features or a failed k-means, 2 bad arguments or config\n",
          out);
}

/* One option with its value; false (after logging) for an unknown option or a bad value. */
static bool value_option(args *a, const char *opt, const char *v)
{
    if (!strcmp(opt, "-c") || !strcmp(opt, "--config"))
        a->config = v;
    else if (!strcmp(opt, "--features"))
        a->features = v;
    else if (!strcmp(opt, "--output"))
        a->output = v;
    else if (!strcmp(opt, "--threads")) {
        char *end;
        long t = strtol(v, &end, 10);
        if (end == v || *end || t < 0 || t > 4096) {
            log_error("--threads needs a number of threads, not '%s'", v);
            return false;
        }
        a->threads = (int)t;
    } else {
        log_error("unknown option '%s'; see selfsup-cluster --help", opt);
        return false;
    }
    return true;
}

/* -1 to go on, else the exit status (help, version, usage error). */
static int parse_args(args *a, int argc, char **argv)
{
    a->overrides = xcalloc((size_t)argc + 1, sizeof *a->overrides);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help"))
            return usage(stdout), 0;
        if (!strcmp(s, "--version"))
            return printf("selfsup-cluster %s\n", SELFSUP_VERSION), 0;
        if (!strcmp(s, "--quiet")) {
            a->quiet = true;
            continue;
        }
        if (s[0] != '-') {
            a->overrides[a->n_overrides++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            log_error("option '%s' needs a value; see selfsup-cluster --help", s);
            return EXIT_USAGE;
        }
        if (!value_option(a, s, argv[++i]))
            return EXIT_USAGE;
    }
    if (!a->config) {
        usage(stderr);
        return EXIT_USAGE;
    }
    return -1;
}

/* The merged features of the split and layer, covering samples 0 … N−1. */
static int read_features(const clusterfit_options *o, const char *dir, feat_set *f)
{
    char *err = NULL;
    if (feat_merge(dir, o->split, o->layer, f, &err) != 0) {
        int n = 0;
        char **layers = feat_layers(dir, o->split, &n);
        strbuf have = {0};
        for (int i = 0; i < n; i++)
            sb_printf(&have, "%s%s", i ? ", " : "", layers[i]), free(layers[i]);
        log_error("%s (config.CLUSTERFIT.FEATURES.LAYER_NAME is %s; the %s layers in %s: %s)", err, o->layer,
                  o->split, dir, n ? sb_str(&have) : "none");
        free(layers), sb_free(&have), free(err);
        return EXIT_RUNTIME;
    }
    for (size_t i = 0; i < f->n; i++)
        if (f->inds[i] != (int64_t)i) {
            log_error("%s: the %s features of layer %s have no row for sample %zu (the next is %lld): the labels "
                      "file holds sample i's cluster at entry i, so every sample 0 … N-1 must have features",
                      dir, o->split, o->layer, i, (long long)f->inds[i]);
            return EXIT_RUNTIME;
        }
    return 0;
}

/* The checks that need the data, before the k-means: enough rows, and room for the results. */
static int check_before_kmeans(const clusterfit_options *o, const cfg_node *config, const feat_set *f, bool option)
{
    if ((size_t)o->num_clusters > f->n) {
        log_error("config.CLUSTERFIT.NUM_CLUSTERS: %lld clusters, but only %zu %s features to cluster",
                  (long long)o->num_clusters, f->n, o->split);
        return EXIT_USAGE;
    }
    uint64_t need = (uint64_t)f->n * (2 * sizeof(int64_t) + sizeof(float)) +
                    (uint64_t)o->num_clusters * f->dim * sizeof(float) + 4096;
    cfg_err e;
    if (!ckpt_output_dir_usable(o->dir, need, option ? "--output" : "config.CHECKPOINT.DIR",
                                option ? NULL : cfg_path(config, "CHECKPOINT.DIR"), &e)) {
        log_error("%s", e.msg);
        return EXIT_USAGE;
    }
    return 0;
}

/* How the clusters came out: how many are used, the largest, the mean distance. */
static void report(const clusterfit_options *o, const feat_set *f, const int64_t *labels, const float *distances)
{
    int64_t *size = xcalloc((size_t)o->num_clusters, sizeof *size), used = 0, largest = 0;
    double dist = 0;
    for (size_t i = 0; i < f->n; i++) {
        used += size[labels[i]]++ == 0;
        largest = size[labels[i]] > largest ? size[labels[i]] : largest;
        dist += distances[i];
    }
    log_info("%zu features in %lld of %lld clusters (the largest holds %lld); mean squared distance to the "
             "centroid %.4f", f->n, (long long)used, (long long)o->num_clusters, (long long)largest,
             f->n ? dist / (double)f->n : 0.0);
    free(size);
}

/* The k-means of the normalised rows: the results, owned by r. 0, or -1 with *err. */
typedef struct {
    float *centroids, *distances;
    int64_t *labels;
} results;

static int run_kmeans(const clusterfit_options *o, feat_set *f, bool verbose, results *r, char **err)
{
    r->centroids = xmalloc_large((size_t)o->num_clusters * f->dim * sizeof *r->centroids);
    r->distances = xmalloc_large(f->n * sizeof *r->distances);
    r->labels = xmalloc_large(f->n * sizeof *r->labels);
    clusterfit_l2_normalize(f->features, f->n, f->dim);
    log_info("k-means of %zu x %zu %s features (layer %s) into %lld clusters, %d iterations (FAISS)", f->n, f->dim,
             o->split, o->layer, (long long)o->num_clusters, o->niter);
    double t0 = now_seconds();
    if (kmeans_faiss(f->features, (int64_t)f->n, (int64_t)f->dim, o->num_clusters, o->niter, verbose, r->centroids,
                     r->labels, r->distances, err) != 0)
        return -1;
    log_info("k-means done in %.2f s", now_seconds() - t0);
    report(o, f, r->labels, r->distances);
    return 0;
}

static int cluster(clusterfit_options *o, const cfg_node *config, const args *a)
{
    feat_set f = {0};
    int rc = read_features(o, a->features ? a->features : o->dir, &f);
    if (a->output) {
        free(o->dir);
        o->dir = xstrdup(a->output);
    }
    rc = rc ? rc : check_before_kmeans(o, config, &f, a->output != NULL);
    results r = {0};
    char *err = NULL;
    if (rc == 0 && (run_kmeans(o, &f, !a->quiet, &r, &err) != 0 ||
                    clusterfit_write(o, f.n, f.dim, r.labels, r.centroids, r.distances, &err) != 0))
        rc = EXIT_RUNTIME;
    if (rc == 0) {
        char *npy = clusterfit_path(o, "_lbls.npy");
        log_info("labels: %s", npy);
        free(npy);
    }
    if (err)
        log_error("%s", err);
    free(err), free(r.centroids), free(r.distances), free(r.labels);
    feat_free(&f);
    return rc;
}

int main(int argc, char **argv)
{
    log_init("cluster");
    args a = {0};
    int rc = parse_args(&a, argc, argv);
    if (rc < 0) {
        cfg_t cfg = {0};
        cfg_err e;
        clusterfit_options o;
        if (!cfg_compose_arg(&cfg, false, a.config, a.n_overrides, a.overrides, &e) ||
            !clusterfit_options_from_config(&cfg, &o, &e)) {
            log_error("%s", e.msg);
            rc = EXIT_USAGE;
        } else {
            if (a.threads > 0)
                omp_set_num_threads(a.threads);
            rc = cluster(&o, cfg_map_get(cfg.root, "config"), &a);
            clusterfit_options_free(&o);
        }
        cfg_destroy(&cfg);
    }
    free(a.overrides);
    return rc;
}

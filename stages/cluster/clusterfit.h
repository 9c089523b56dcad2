/*
 * clusterfit.h — ClusterFit's first step after the features (VISSL 0.1.5's
 * tools/cluster_features_and_label.py): which features, how they are normalised, and the files
 * the pseudo-labels go to. selfsup-cluster runs it; `selfsup clusterfit` wraps extraction,
 * this, and the training on the labels.
 *
 * The config keys are VISSL's CLUSTERFIT: NUM_CLUSTERS, CLUSTER_BACKEND (faiss, the only one),
 * N_ITER, FEATURES.DATA_PARTITION (TRAIN | TEST), FEATURES.DATASET_NAME (only a part of the file
 * names), FEATURES.LAYER_NAME. The features are CHECKPOINT.DIR's rank files of that split and
 * layer merged by sample index (features.h); the results go to CHECKPOINT.DIR too:
 *   {DATASET_NAME}_{split}_N{K}_faiss_lbls.npy  int64 (N,): sample i's cluster (DATA.*.LABEL_PATHS)
 *   {DATASET_NAME}_{split}_N{K}_faiss.pkl       a pickled dict: hard_labels int64 N × 1,
 *                                               centroids float32 K × D, distances float32 N × 1
 * with split "train" or "test" (DATA_PARTITION in lower case). The keys VISSL added after 0.1.5
 * (PCA, a data limit, another output folder) are refused unless left at their defaults.
 */
#ifndef SELFSUP_CLUSTER_CLUSTERFIT_H
#define SELFSUP_CLUSTER_CLUSTERFIT_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t num_clusters; /* NUM_CLUSTERS */
    int niter;            /* N_ITER */
    const char *split;    /* "train" or "test" */
    const char *dataset;  /* FEATURES.DATASET_NAME (points into the config) */
    const char *layer;    /* FEATURES.LAYER_NAME (points into the config) */
    char *dir;            /* cfg_checkpoint_folder: the features' folder and the results' (owned) */
} clusterfit_options;

/* The options of a composed config, checked: false with err naming the key (nothing to free
 * then). They point into cfg, which must outlive them. */
bool clusterfit_options_from_config(const cfg_t *cfg, clusterfit_options *o, cfg_err *err);
void clusterfit_options_free(clusterfit_options *o);

/* "{dir}/{dataset}_{split}_N{K}_faiss{suffix}" (malloc'd), suffix "_lbls.npy" or ".pkl". */
char *clusterfit_path(const clusterfit_options *o, const char *suffix);

/* VISSL's features / (np.linalg.norm(features, axis=1) + 1e-5) in place, bit for bit as numpy
 * computes it in float32 (its pairwise summation of the squares). */
void clusterfit_l2_normalize(float *x, size_t n, size_t d);

/* Write both result files (atomically). 0, or -1 with *err. */
int clusterfit_write(const clusterfit_options *o, size_t n, size_t d, const int64_t *labels, const float *centroids,
                     const float *distances, char **err);

#endif

/*
 * kmeans_faiss.h — FAISS's k-means, as VISSL's ClusterFit calls it from Python
 * (tools/cluster_features_and_label.py: faiss.Kmeans(d, k, niter=N_ITER).train(x), then
 * kmeans.index.search(x, 1)), behind a C interface.
 *
 * FAISS is C++ and Debian ships it as a static library only (libfaiss-dev), so this is the
 * one C++ file of the project and only selfsup-cluster links it. FAISS's defaults are kept:
 * seed 1234, at most 256 points per centroid (a larger set is subsampled with that seed),
 * one run, IndexFlatL2 for the assignment, empty clusters split as FAISS splits them. Same
 * release, same inputs: the same centroids as Python's faiss up to the rounding of the GEMM.
 *
 * FAISS's GEMM calls (the Fortran sgemm_) go to oneDNN's sgemm, the CPU GEMM selfsup's engine
 * already uses, instead of Debian's reference BLAS, which is an order of magnitude slower. The
 * definition lives in kmeans_faiss.cpp, so it replaces the BLAS one in this binary only.
 */
#ifndef SELFSUP_KMEANS_FAISS_H
#define SELFSUP_KMEANS_FAISS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* k-means of x (n × d, row-major) into k centroids (k × d) with `niter` iterations; then each
 * row's nearest centroid (labels) and its squared L2 distance (distances), both n long.
 * verbose: FAISS's progress lines on stdout. 0, or -1 with *err (FAISS's own message, e.g.
 * fewer points than clusters). */
int kmeans_faiss(const float *x, int64_t n, int64_t d, int64_t k, int niter, bool verbose, float *centroids,
                 int64_t *labels, float *distances, char **err);

#ifdef __cplusplus
}
#endif

#endif

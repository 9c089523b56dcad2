/*
 * kmeans_faiss.cpp — kmeans_faiss.h on faiss::Clustering, and FAISS's BLAS GEMM on oneDNN.
 *
 * What faiss.Kmeans.train does in Python (faiss/extra_wrappers.py, 1.7.3): a Clustering with
 * default ClusteringParameters but niter (and verbose), trained on an IndexFlatL2, whose
 * contents after training are the centroids; VISSL then searches that index for each row's
 * nearest centroid. FAISS reports errors as exceptions; none crosses into C.
 */
#include "kmeans_faiss.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

/* The Fortran BLAS sgemm FAISS calls (column-major C = alpha·op(A)·op(B) + beta·C), on oneDNN's
 * row-major sgemm: a column-major matrix is the row-major transpose, so C' = op(B)'·op(A)'. */
extern "C" int sgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
                      const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
                      const float *beta, float *c, const int *ldc)
{
    dnnl_status_t st = dnnl_sgemm(*transb, *transa, *n, *m, *k, *alpha, b, *ldb, a, *lda, *beta, c, *ldc);
    if (st != dnnl_success) {
        fprintf(stderr, "selfsup-cluster: oneDNN's sgemm failed (status %d) for a %d x %d x %d product\n", (int)st,
                *m, *n, *k);
        abort(); /* BLAS has no error return: FAISS would go on with garbage */
    }
    return 0;
}

static char *copy_message(const std::string &s)
{
    char *m = static_cast<char *>(malloc(s.size() + 1));
    if (m)
        memcpy(m, s.c_str(), s.size() + 1);
    return m;
}

extern "C" int kmeans_faiss(const float *x, int64_t n, int64_t d, int64_t k, int niter, bool verbose,
                            float *centroids, int64_t *labels, float *distances, char **err)
{
    try {
        faiss::ClusteringParameters cp;
        cp.niter = niter;
        cp.verbose = verbose;
        faiss::Clustering clus(static_cast<int>(d), static_cast<int>(k), cp);
        faiss::IndexFlatL2 index(d);
        clus.train(n, x, index);
        memcpy(centroids, clus.centroids.data(), static_cast<size_t>(k * d) * sizeof *centroids);
        std::vector<faiss::Index::idx_t> nearest(static_cast<size_t>(n));
        index.search(n, x, 1, distances, nearest.data());
        for (int64_t i = 0; i < n; i++)
            labels[i] = nearest[static_cast<size_t>(i)];
        return 0;
    } catch (const std::exception &e) {
        if (err)
            *err = copy_message(std::string("FAISS: ") + e.what());
        return -1;
    }
}

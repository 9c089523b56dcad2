/*
 * pca.c — the PCA whitening of the retrieval benchmark (pca.py), fitted from streamed rows.
 *
 * pca.py centres the rows, forms XᵀX and calls numpy's eigh. R-MAC's training rows are every
 * region of every training image (about 20 a picture, 2048 wide for a ResNet-50's res5), which
 * the tool stacks in memory; here they are not kept. Rows wait in a block of PCA_BLOCK, shifted
 * by the first block's mean m0; each full block adds its (x − m0)ᵀ(x − m0) (oneDNN's sgemm) to
 * a double sum, and the fit takes S − n·(μ − m0)(μ − m0)ᵀ, which is the centred XᵀX without
 * the cancellation of subtracting n·μμᵀ from uncentred products. The eigen-decomposition is
 * LAPACK's dsyevd. Eigenvectors are defined up to sign, so DVt may differ from numpy's in the
 * sign of a row; the whitened similarities, which are all the benchmark uses, do not. apply is
 * pca.py's float32 product (x − mean)·DVtᵀ, on sgemm.
 */
#include "retrieval/retrieval.h"
#include "log.h"
#include "util.h"

#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w, double *work,
             const int *lwork, int *iwork, const int *liwork, int *info);

#define PCA_BLOCK 256

void pca_init(pca_model *p, int dim)
{
    memset(p, 0, sizeof *p);
    p->dim = dim;
    p->shift = xcalloc((size_t)dim, sizeof *p->shift);
    p->sum = xcalloc((size_t)dim, sizeof *p->sum);
    p->xtx = xcalloc((size_t)dim * dim, sizeof *p->xtx);
    p->block = xmalloc((size_t)PCA_BLOCK * dim * sizeof *p->block);
}

void retr_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                int64_t ldb, float *c, int64_t ldc)
{
    dnnl_status_t st = dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    if (st != dnnl_success)
        die(EXIT_RUNTIME, "oneDNN sgemm failed (status %d)", (int)st);
}

/* The first block's mean becomes the shift; its rows are shifted in place. */
static void set_shift(pca_model *p)
{
    int d = p->dim;
    for (int j = 0; j < d; j++) {
        double s = 0;
        for (int r = 0; r < p->pending; r++)
            s += p->block[(size_t)r * d + j];
        p->shift[j] = (float)(s / p->pending);
    }
    for (int r = 0; r < p->pending; r++)
        for (int j = 0; j < d; j++)
            p->block[(size_t)r * d + j] -= p->shift[j];
    p->shifted = true;
}

/* The waiting rows' products into the double sum. */
static void flush(pca_model *p)
{
    int d = p->dim;
    if (!p->pending)
        return;
    if (!p->shifted)
        set_shift(p);
    float *prod = xmalloc_large((size_t)d * d * sizeof *prod);
    retr_sgemm('T', 'N', d, d, p->pending, p->block, d, p->block, d, prod, d);
    for (size_t i = 0; i < (size_t)d * d; i++)
        p->xtx[i] += prod[i];
    free(prod);
    p->pending = 0;
}

void pca_add(pca_model *p, const float *row)
{
    int d = p->dim;
    float *dst = p->block + (size_t)p->pending * d;
    for (int j = 0; j < d; j++) {
        p->sum[j] += row[j];
        dst[j] = p->shifted ? row[j] - p->shift[j] : row[j];
    }
    p->rows++;
    if (++p->pending == PCA_BLOCK)
        flush(p);
}

/* The centred XᵀX from the shifted sum: S − n·δδᵀ with δ = mean − shift. */
static void centre(pca_model *p)
{
    int d = p->dim;
    flush(p);
    p->mean = xmalloc((size_t)d * sizeof *p->mean);
    double *delta = xmalloc((size_t)d * sizeof *delta);
    for (int i = 0; i < d; i++) {
        double mu = p->sum[i] / (double)p->rows;
        p->mean[i] = (float)mu;
        delta[i] = mu - p->shift[i];
    }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++)
            p->xtx[(size_t)i * d + j] -= (double)p->rows * delta[i] * delta[j];
    free(delta);
}

static int eigh(double *a, int n, double *w, char **err)
{
    int lwork = -1, liwork = -1, info = 0, iwq = 0;
    double wq = 0;
    dsyevd_("V", "U", &n, a, &n, w, &wq, &lwork, &iwq, &liwork, &info);
    if (info != 0)
        return report_failure(err, "LAPACK dsyevd's workspace query failed (info %d)", info);
    lwork = (int)wq;
    liwork = iwq;
    double *work = xmalloc((size_t)lwork * sizeof *work);
    int *iwork = xmalloc((size_t)liwork * sizeof *iwork);
    dsyevd_("V", "U", &n, a, &n, w, work, &lwork, iwork, &liwork, &info);
    free(work);
    free(iwork);
    return info ? report_failure(err, "LAPACK dsyevd failed (info %d) on a %d × %d covariance", info, n, n) : 0;
}

/* Ascending eigenvalues w; vector k is row k of v (LAPACK's column k). */
static void keep_largest(pca_model *p, const double *v, double *w, int n_components)
{
    int d = p->dim;
    double eps = w[d - 1] * 1e-5, total = 0, kept = 0;
    for (int k = 0; k < d; k++) {
        if (w[k] < eps) {
            w[k] = eps;
            p->clamped++;
        }
        total += w[k];
    }
    p->out = n_components > 0 && n_components < d ? n_components : d;
    p->dvt = xmalloc((size_t)p->out * d * sizeof *p->dvt);
    for (int o = 0; o < p->out; o++) {
        int k = d - 1 - o;
        kept += w[k];
        double s = 1 / sqrt(w[k]);
        for (int j = 0; j < d; j++)
            p->dvt[(size_t)o * d + j] = (float)(s * v[(size_t)k * d + j]);
    }
    p->energy = kept / total;
}

int pca_fit(pca_model *p, int n_components, char **err)
{
    if (p->rows < 1)
        return report_failure(err, "no training rows for the PCA");
    centre(p);
    double *w = xmalloc((size_t)p->dim * sizeof *w);
    int rc = eigh(p->xtx, p->dim, w, err);
    if (rc == 0)
        keep_largest(p, p->xtx, w, n_components);
    free(w);
    free(p->xtx);
    free(p->sum);
    free(p->block);
    p->xtx = p->sum = NULL;
    p->block = NULL;
    return rc;
}

/* Rows in chunks, so that the centred copy stays small. */
void pca_apply(const pca_model *p, const float *x, size_t n, float *y)
{
    int d = p->dim;
    float *c = xmalloc((size_t)PCA_BLOCK * d * sizeof *c);
    for (size_t r0 = 0; r0 < n; r0 += PCA_BLOCK) {
        size_t m = n - r0 < PCA_BLOCK ? n - r0 : PCA_BLOCK;
        for (size_t r = 0; r < m; r++)
            for (int j = 0; j < d; j++)
                c[r * d + j] = x[(r0 + r) * d + j] - p->mean[j];
        retr_sgemm('N', 'T', (int64_t)m, p->out, d, c, d, p->dvt, d, y + r0 * p->out, p->out);
    }
    free(c);
}

void pca_free(pca_model *p)
{
    free(p->shift);
    free(p->sum);
    free(p->xtx);
    free(p->block);
    free(p->mean);
    free(p->dvt);
    memset(p, 0, sizeof *p);
}

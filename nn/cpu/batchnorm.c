/*
 * batchnorm.c — the cpu backend's batch norm (PyTorch's BatchNorm2d over N×C×H×W and
 * BatchNorm1d over N×C), optionally fused with the ReLU that follows it in a ResNet.
 *
 * Both layouts are one: element (n, c, s) lives at (n·C + c)·S + s, with S = H·W for 4-D
 * and S = 1 for 2-D, so every function walks channel c over its N planes of S values.
 * Statistics are summed in double (two passes: mean, then squared deviations), which keeps
 * the result within float rounding of PyTorch for any batch size. Training normalises with
 * the biased variance and folds the unbiased one (m/(m−1)) into running_var, as PyTorch does.
 * gamma/beta NULL mean an affine-free layer (1, 0); NULL running stats or save_* are skipped.
 * Two backwards: the training one (through the batch statistics) and the eval one (running
 * statistics are constants, so BN is a per-channel affine map), for frozen-BN trunks.
 *
 * Fusing the ReLU saves two passes over the activation each way: the forward clamps as it
 * writes, and the backward masks dy by the forward's output (y > 0) as it reads it, exactly
 * what relu_backward would have written into a separate buffer.
 *
 * SyncBN (a reducer, nn.h): the same steps in phases over all channels, the sums reduced over
 * the ranks between them: Σx and the count, then Σ(x − mean)² around the group's mean (the
 * two passes of the single batch, so one rank's arithmetic is unchanged); backward, Σg and
 * Σg·(x − mean) with the count, then dx. Without one, each channel runs all its steps at once,
 * its values still in cache.
 *
 * Speed: channels are spread over the OpenMP threads, one channel per thread at a time, so
 * every sum is taken in the same order whatever the thread count (results do not depend on
 * it); the per-plane loops are SIMD (CPU_HOT: compiled for AVX-512, AVX2 and the baseline).
 */
#include "cpu.h"

#include "log.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Offset of plane n of channel c: a channel is N planes of S values, C·S apart. */
static int64_t plane(const cpu_ncs *d, int64_t n, int64_t c) { return (n * d->c + c) * d->s; }

/* ---- per-plane kernels (SIMD) ---------------------------------------------------------------- */

CPU_HOT static double plane_sum(const float *p, int64_t s)
{
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < s; i++)
        sum += p[i];
    return sum;
}

CPU_HOT static double plane_sqdev(const float *p, int64_t s, double mu)
{
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < s; i++)
        sq += ((double)p[i] - mu) * ((double)p[i] - mu);
    return sq;
}

/* y = (x − mean)·scale + shift, then max(·, 0) when relu (NaN stays NaN, as in PyTorch). */
CPU_HOT static void plane_affine(const float *x, float *y, int64_t s, double mean, double scale, double shift,
                                 bool relu)
{
    if (relu) {
#pragma omp simd
        for (int64_t i = 0; i < s; i++) {
            float v = (float)(((double)x[i] - mean) * scale + shift);
            y[i] = v < 0.0f ? 0.0f : v;
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < s; i++)
            y[i] = (float)(((double)x[i] - mean) * scale + shift);
    }
}

/* Σ g and Σ g·(x − mean) over one plane; g is dy, or dy masked by the fused ReLU's output y. */
CPU_HOT static void plane_grad_sums(const float *x, const float *dy, const float *y, int64_t s, double mean,
                                    double *sum_g, double *sum_gx)
{
    double a = 0.0, b = 0.0;
    if (y) {
#pragma omp simd reduction(+ : a, b)
        for (int64_t i = 0; i < s; i++) {
            double g = y[i] > 0.0f ? dy[i] : 0.0f;
            a += g;
            b += g * ((double)x[i] - mean);
        }
    } else {
#pragma omp simd reduction(+ : a, b)
        for (int64_t i = 0; i < s; i++) {
            a += dy[i];
            b += (double)dy[i] * ((double)x[i] - mean);
        }
    }
    *sum_g += a;
    *sum_gx += b;
}

/* dx += k·(m·g − Σg − x̂·Σg·x̂), x̂ = (x − mean)·invstd: the training backward. */
CPU_HOT static void plane_dx_train(const float *x, const float *dy, const float *y, float *dx, int64_t s,
                                   double mean, double invstd, double k, double m, double sum_g, double sum_gxhat)
{
    if (y) {
#pragma omp simd
        for (int64_t i = 0; i < s; i++) {
            double g = y[i] > 0.0f ? dy[i] : 0.0f;
            dx[i] += (float)(k * (m * g - sum_g - ((double)x[i] - mean) * invstd * sum_gxhat));
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < s; i++)
            dx[i] += (float)(k * (m * dy[i] - sum_g - ((double)x[i] - mean) * invstd * sum_gxhat));
    }
}

/* dx += k·g: the eval backward (a per-channel affine map). */
CPU_HOT static void plane_dx_eval(const float *dy, float *dx, int64_t s, double k)
{
#pragma omp simd
    for (int64_t i = 0; i < s; i++)
        dx[i] += (float)(k * dy[i]);
}

/* ---- per-channel steps -------------------------------------------------------------------- */

/* A training forward's arguments other than the tensors it reads and writes. */
typedef struct {
    double momentum, eps;
    tensor_ref *gamma, *beta, *running_mean, *running_var, *save_mean, *save_invstd;
    bool relu;
} bn_args;

static double channel_sum(const float *x, const cpu_ncs *d, int64_t c)
{
    double sum = 0.0;
    for (int64_t n = 0; n < d->n; n++)
        sum += plane_sum(x + plane(d, n, c), d->s);
    return sum;
}

static double channel_sqdev(const float *x, const cpu_ncs *d, int64_t c, double mean)
{
    double sq = 0.0;
    for (int64_t n = 0; n < d->n; n++)
        sq += plane_sqdev(x + plane(d, n, c), d->s, mean);
    return sq;
}

static void channel_affine(const float *x, float *y, const cpu_ncs *d, int64_t c, double mean, double scale,
                           double shift, bool relu)
{
    for (int64_t n = 0; n < d->n; n++)
        plane_affine(x + plane(d, n, c), y + plane(d, n, c), d->s, mean, scale, shift, relu);
}

/* Channel c's Σ g and Σ g·x̂ (g = masked dy, x̂ = (x − mean)·invstd), added into dβ and dγ where
 * given. Both backwards need them; the training one also for dx. */
static void channel_sums(const cpu_ncs *d, int64_t c, const float *px, const float *pg, const float *py,
                         double mean, double invstd, tensor_ref *dgamma, tensor_ref *dbeta, double *sum_g,
                         double *sum_gxhat)
{
    double sg = 0.0, sgx = 0.0;
    for (int64_t n = 0; n < d->n; n++) {
        int64_t at = plane(d, n, c);
        plane_grad_sums(px + at, pg + at, py ? py + at : NULL, d->s, mean, &sg, &sgx);
    }
    *sum_g = sg;
    *sum_gxhat = sgx * invstd;
    if (dbeta)
        cpu_ptr(dbeta)[c] += (float)*sum_g;
    if (dgamma)
        cpu_ptr(dgamma)[c] += (float)*sum_gxhat;
}

/* ---- the layer ------------------------------------------------------------------------------ */

/* Channel c's training step once its batch mean and biased variance over m values are known:
 * save_*, the running statistics, y. */
static void channel_train(const float *px, float *py, const cpu_ncs *d, int64_t c, double mean, double var,
                          double m, const bn_args *a)
{
    double invstd = 1.0 / sqrt(var + a->eps);
    if (a->save_mean)
        cpu_ptr(a->save_mean)[c] = (float)mean;
    if (a->save_invstd)
        cpu_ptr(a->save_invstd)[c] = (float)invstd;
    if (a->running_mean) {
        float *rm = cpu_ptr(a->running_mean) + c;
        *rm = (float)((1.0 - a->momentum) * *rm + a->momentum * mean);
    }
    if (a->running_var) {
        float *rv = cpu_ptr(a->running_var) + c;
        *rv = (float)((1.0 - a->momentum) * *rv + a->momentum * var * m / (m - 1.0));
    }
    double g = cpu_at_or(a->gamma, c, 1.0);
    channel_affine(px, py, d, c, mean, g * invstd, cpu_at_or(a->beta, c, 0.0), a->relu);
}

/* v[0..n) over the group; a failed reducer leaves the rank's own (nn.h). */
static void over_group(const eng_reducer *r, double *v, size_t n)
{
    double *mine = xmalloc(n * sizeof *mine);
    memcpy(mine, v, n * sizeof *v);
    if (r->reduce(r->ctx, v, n, false) != 0)
        memcpy(v, mine, n * sizeof *v);
    free(mine);
}

/* SyncBN's forward: the statistics of the group's batch, in two reduced passes. */
static void forward_synced(const float *px, float *py, const cpu_ncs *d, const bn_args *a,
                           const eng_reducer *r)
{
    double *sum = xmalloc((size_t)(2 * d->c + 1) * sizeof *sum), *sq = sum + d->c + 1;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        sum[c] = channel_sum(px, d, c);
    sum[d->c] = (double)(d->n * d->s);
    over_group(r, sum, (size_t)d->c + 1);
    double m = sum[d->c];
    if (m < 2)
        die(EXIT_RUNTIME, "batchnorm: training needs more than one value per channel (got %.0f)", m);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        sq[c] = channel_sqdev(px, d, c, sum[c] / m);
    over_group(r, sq, (size_t)d->c);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        channel_train(px, py, d, c, sum[c] / m, sq[c] / m, m, a);
    free(sum);
}

void cpu_batchnorm_forward_train(eng_backend *be, double momentum, double eps, tensor_ref *x,
                                 tensor_ref *gamma, tensor_ref *beta, tensor_ref *running_mean,
                                 tensor_ref *running_var, tensor_ref *save_mean, tensor_ref *save_invstd,
                                 bool relu, tensor_ref *y, const eng_reducer *across)
{
    (void)be;
    cpu_ncs d = cpu_ncs_of(x);
    const bn_args a = {.momentum = momentum,
                       .eps = eps,
                       .gamma = gamma,
                       .beta = beta,
                       .running_mean = running_mean,
                       .running_var = running_var,
                       .save_mean = save_mean,
                       .save_invstd = save_invstd,
                       .relu = relu};
    const float *px = cpu_ptr(x);
    float *py = cpu_ptr(y);
    if (across) {
        forward_synced(px, py, &d, &a, across);
        return;
    }
    double m = (double)(d.n * d.s);
    if (m < 2)
        die(EXIT_RUNTIME, "batchnorm: training needs more than one value per channel (got %.0f)", m);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d.c; c++) {
        double mean = channel_sum(px, &d, c) / m;
        channel_train(px, py, &d, c, mean, channel_sqdev(px, &d, c, mean) / m, m, &a);
    }
}

void cpu_batchnorm_forward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                tensor_ref *beta, tensor_ref *running_mean, tensor_ref *running_var,
                                bool relu, tensor_ref *y)
{
    (void)be;
    cpu_ncs d = cpu_ncs_of(x);
    const float *px = cpu_ptr(x);
    float *py = cpu_ptr(y);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d.c; c++) {
        double invstd = 1.0 / sqrt(cpu_at_or(running_var, c, 1.0) + eps);
        double g = cpu_at_or(gamma, c, 1.0);
        channel_affine(px, py, &d, c, cpu_at_or(running_mean, c, 0.0), g * invstd, cpu_at_or(beta, c, 0.0), relu);
    }
}

/* Channel c's dx += γ·invstd/m · (m·g − Σg − x̂·Σg·x̂) from its sums over m values. */
static void channel_dx(const cpu_ncs *d, int64_t c, const float *px, const float *pg, const float *py,
                       float *pdx, tensor_ref *gamma, double mean, double invstd, double m, double sum_g,
                       double sum_gxhat)
{
    double k = cpu_at_or(gamma, c, 1.0) * invstd / m;
    for (int64_t n = 0; n < d->n; n++) {
        int64_t at = plane(d, n, c);
        plane_dx_train(px + at, pg + at, py ? py + at : NULL, pdx + at, d->s, mean, invstd, k, m, sum_g,
                       sum_gxhat);
    }
}

/* SyncBN's backward: dγ and dβ from this rank's sums, dx from the group's. */
static void backward_synced(const cpu_ncs *d, const float *px, const float *pg, const float *py, float *pdx,
                            tensor_ref *gamma, tensor_ref *save_mean, tensor_ref *save_invstd,
                            tensor_ref *dgamma, tensor_ref *dbeta, const eng_reducer *r)
{
    double *sums = xmalloc((size_t)(2 * d->c + 1) * sizeof *sums); /* Σg per channel, Σg·x̂ per channel, m */
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        channel_sums(d, c, px, pg, py, cpu_ptr(save_mean)[c], cpu_ptr(save_invstd)[c], dgamma, dbeta,
                     &sums[c], &sums[d->c + c]);
    sums[2 * d->c] = (double)(d->n * d->s);
    over_group(r, sums, (size_t)(2 * d->c + 1));
    if (pdx)
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < d->c; c++)
            channel_dx(d, c, px, pg, py, pdx, gamma, cpu_ptr(save_mean)[c], cpu_ptr(save_invstd)[c],
                       sums[2 * d->c], sums[c], sums[d->c + c]);
    free(sums);
}

/* With x̂ = (x − mean)·invstd, g the gradient reaching the norm and m values per channel:
 *   dβ = Σ g,  dγ = Σ g·x̂,  dx = γ·invstd/m · (m·g − dβ − x̂·dγ). */
void cpu_batchnorm_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                            tensor_ref *save_invstd, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *dx,
                            tensor_ref *dgamma, tensor_ref *dbeta, const eng_reducer *across)
{
    (void)be;
    cpu_ncs d = cpu_ncs_of(x);
    double m = (double)(d.n * d.s);
    const float *px = cpu_ptr(x), *pg = cpu_ptr(dy), *py = relu_y ? cpu_ptr(relu_y) : NULL;
    float *pdx = dx ? cpu_ptr(dx) : NULL;
    if (across) {
        backward_synced(&d, px, pg, py, pdx, gamma, save_mean, save_invstd, dgamma, dbeta, across);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d.c; c++) {
        double mean = cpu_ptr(save_mean)[c], invstd = cpu_ptr(save_invstd)[c];
        double sum_g, sum_gxhat;
        channel_sums(&d, c, px, pg, py, mean, invstd, dgamma, dbeta, &sum_g, &sum_gxhat);
        if (pdx)
            channel_dx(&d, c, px, pg, py, pdx, gamma, mean, invstd, m, sum_g, sum_gxhat);
    }
}

/* The eval forward is affine per channel, y = x·k + const with k = γ/sqrt(running_var + eps),
 * so its backward needs no batch statistics: dx += dy·k, dγ += Σ dy·x̂, dβ += Σ dy. */
void cpu_batchnorm_backward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                 tensor_ref *running_mean, tensor_ref *running_var, tensor_ref *dy,
                                 tensor_ref *dx, tensor_ref *dgamma, tensor_ref *dbeta)
{
    (void)be;
    cpu_ncs d = cpu_ncs_of(x);
    const float *px = cpu_ptr(x), *pg = cpu_ptr(dy);
    float *pdx = dx ? cpu_ptr(dx) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d.c; c++) {
        double mean = cpu_ptr(running_mean)[c], invstd = 1.0 / sqrt((double)cpu_ptr(running_var)[c] + eps);
        if (dgamma || dbeta) {
            double sum_g, sum_gxhat;
            channel_sums(&d, c, px, pg, NULL, mean, invstd, dgamma, dbeta, &sum_g, &sum_gxhat);
        }
        if (!pdx)
            continue;
        double k = cpu_at_or(gamma, c, 1.0) * invstd;
        for (int64_t n = 0; n < d.n; n++)
            plane_dx_eval(pg + plane(&d, n, c), pdx + plane(&d, n, c), d.s, k);
    }
}

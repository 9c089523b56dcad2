/*
 * batchnorm.c — the cpu backend's batch norm (PyTorch's BatchNorm2d over N×C×H×W and
 * BatchNorm1d over N×C), as plain loops.
 *
 * Both layouts are one: element (n, c, s) lives at (n·C + c)·S + s, with S = H·W for 4-D
 * and S = 1 for 2-D, so every function walks channel c over its N planes of S values.
 * Statistics are summed in double (two passes: mean, then squared deviations), which keeps
 * the result within float rounding of PyTorch for any batch size. Training normalises with
 * the biased variance and folds the unbiased one (m/(m−1)) into running_var, as PyTorch does.
 * gamma/beta NULL mean an affine-free layer (1, 0); NULL running stats or save_* are skipped.
 * Two backwards: the training one (through the batch statistics) and the eval one (running
 * statistics are constants, so BN is a per-channel affine map), for frozen-BN trunks.
 */
#include "cpu.h"

#include "log.h"

#include <math.h>

/* The planes of one channel: N planes of S values, C·S apart. */
typedef struct {
    int64_t n, c, s;
} bn_dims;

static bn_dims dims_of(const eng_tensor *x)
{
    bn_dims d = {x->shape.dim[0], x->shape.dim[1], 1};
    if (x->shape.ndim == 4)
        d.s = x->shape.dim[2] * x->shape.dim[3];
    return d;
}

static float at_or(const eng_tensor *t, int64_t c, float fallback) { return t ? cpu_ptr(t)[c] : fallback; }

/* Mean and biased variance of channel c. */
static void channel_stats(const float *x, bn_dims d, int64_t c, double *mean, double *var)
{
    double sum = 0.0;
    for (int64_t n = 0; n < d.n; n++) {
        const float *p = x + (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; i++)
            sum += p[i];
    }
    double m = (double)(d.n * d.s), mu = sum / m, sq = 0.0;
    for (int64_t n = 0; n < d.n; n++) {
        const float *p = x + (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; i++)
            sq += ((double)p[i] - mu) * ((double)p[i] - mu);
    }
    *mean = mu;
    *var = sq / m;
}

/* y = (x − mean)·scale + shift over channel c. */
static void channel_affine(const float *x, float *y, bn_dims d, int64_t c, double mean, double scale, double shift)
{
    for (int64_t n = 0; n < d.n; n++) {
        int64_t base = (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; i++)
            y[base + i] = (float)(((double)x[base + i] - mean) * scale + shift);
    }
}

void cpu_batchnorm_forward_train(eng_backend *be, double momentum, double eps, T *x, T *gamma, T *beta,
                                 T *running_mean, T *running_var, T *save_mean, T *save_invstd, T *y)
{
    (void)be;
    bn_dims d = dims_of(x);
    int64_t m = d.n * d.s;
    if (m < 2)
        die(EXIT_RUNTIME, "batchnorm: training needs more than one value per channel (got %lld)", (long long)m);
    const float *px = cpu_ptr(x);
    float *py = cpu_ptr(y);
    for (int64_t c = 0; c < d.c; c++) {
        double mean, var;
        channel_stats(px, d, c, &mean, &var);
        double invstd = 1.0 / sqrt(var + eps);
        if (save_mean)
            cpu_ptr(save_mean)[c] = (float)mean;
        if (save_invstd)
            cpu_ptr(save_invstd)[c] = (float)invstd;
        if (running_mean) {
            float *rm = cpu_ptr(running_mean) + c;
            *rm = (float)((1.0 - momentum) * *rm + momentum * mean);
        }
        if (running_var) {
            float *rv = cpu_ptr(running_var) + c;
            *rv = (float)((1.0 - momentum) * *rv + momentum * var * (double)m / (double)(m - 1));
        }
        double g = at_or(gamma, c, 1.0f);
        channel_affine(px, py, d, c, mean, g * invstd, at_or(beta, c, 0.0f));
    }
}

void cpu_batchnorm_forward_eval(eng_backend *be, double eps, T *x, T *gamma, T *beta, T *running_mean,
                                T *running_var, T *y)
{
    (void)be;
    bn_dims d = dims_of(x);
    const float *px = cpu_ptr(x);
    float *py = cpu_ptr(y);
    for (int64_t c = 0; c < d.c; c++) {
        double invstd = 1.0 / sqrt((double)at_or(running_var, c, 1.0f) + eps);
        double g = at_or(gamma, c, 1.0f);
        channel_affine(px, py, d, c, at_or(running_mean, c, 0.0f), g * invstd, at_or(beta, c, 0.0f));
    }
}

/* With x̂ = (x − mean)·invstd and m values per channel:
 *   dβ = Σ dy,  dγ = Σ dy·x̂,  dx = γ·invstd/m · (m·dy − dβ − x̂·dγ). */
/* Channel c's Σ dy and Σ dy·x̂ (x̂ = (x − mean)·invstd), accumulated into dβ and dγ where given.
 * Both backwards need them: the train one also for dx. */
static void channel_sums(const bn_dims *d, int64_t c, const float *px, const float *pg, double mean, double invstd,
                         T *dgamma, T *dbeta, double *sum_dy, double *sum_dy_xhat)
{
    *sum_dy = 0.0, *sum_dy_xhat = 0.0;
    for (int64_t n = 0; n < d->n; n++) {
        int64_t base = (n * d->c + c) * d->s;
        for (int64_t i = 0; i < d->s; i++) {
            *sum_dy += pg[base + i];
            *sum_dy_xhat += (double)pg[base + i] * ((double)px[base + i] - mean) * invstd;
        }
    }
    if (dbeta)
        cpu_ptr(dbeta)[c] += (float)*sum_dy;
    if (dgamma)
        cpu_ptr(dgamma)[c] += (float)*sum_dy_xhat;
}

void cpu_batchnorm_backward(eng_backend *be, T *x, T *gamma, T *save_mean, T *save_invstd, T *dy, T *dx,
                            T *dgamma, T *dbeta)
{
    (void)be;
    bn_dims d = dims_of(x);
    double m = (double)(d.n * d.s);
    const float *px = cpu_ptr(x), *pg = cpu_ptr(dy);
    for (int64_t c = 0; c < d.c; c++) {
        double mean = cpu_ptr(save_mean)[c], invstd = cpu_ptr(save_invstd)[c];
        double sum_dy, sum_dy_xhat;
        channel_sums(&d, c, px, pg, mean, invstd, dgamma, dbeta, &sum_dy, &sum_dy_xhat);
        if (!dx)
            continue;
        float *pdx = cpu_ptr(dx);
        double k = at_or(gamma, c, 1.0f) * invstd / m;
        for (int64_t n = 0; n < d.n; n++) {
            int64_t base = (n * d.c + c) * d.s;
            for (int64_t i = 0; i < d.s; i++) {
                double xhat = ((double)px[base + i] - mean) * invstd;
                pdx[base + i] += (float)(k * (m * pg[base + i] - sum_dy - xhat * sum_dy_xhat));
            }
        }
    }
}

/* The eval forward is affine per channel, y = x·k + const with k = γ/sqrt(running_var + eps),
 * so its backward needs no batch statistics: dx += dy·k, dγ += Σ dy·x̂, dβ += Σ dy. */
void cpu_batchnorm_backward_eval(eng_backend *be, double eps, T *x, T *gamma, T *running_mean, T *running_var,
                                 T *dy, T *dx, T *dgamma, T *dbeta)
{
    (void)be;
    bn_dims d = dims_of(x);
    const float *px = cpu_ptr(x), *pg = cpu_ptr(dy);
    for (int64_t c = 0; c < d.c; c++) {
        double mean = cpu_ptr(running_mean)[c], invstd = 1.0 / sqrt((double)cpu_ptr(running_var)[c] + eps);
        if (dgamma || dbeta) {
            double sum_dy, sum_dy_xhat;
            channel_sums(&d, c, px, pg, mean, invstd, dgamma, dbeta, &sum_dy, &sum_dy_xhat);
        }
        if (!dx)
            continue;
        float *pdx = cpu_ptr(dx);
        double k = at_or(gamma, c, 1.0f) * invstd;
        for (int64_t n = 0; n < d.n; n++) {
            int64_t base = (n * d.c + c) * d.s;
            for (int64_t i = 0; i < d.s; i++)
                pdx[base + i] += (float)(k * pg[base + i]);
        }
    }
}

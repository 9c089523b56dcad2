/*
 * layernorm.c — the cpu backend's LayerNorm2d (VISSL's name for nn.GroupNorm(1, C)), as plain
 * loops.
 *
 * Each sample n is normalised over all of its M = C·S values (S = H·W, or 1 for N×C input) with
 * the biased variance; the affine weight and bias are per channel. Element (n, c, s) lives at
 * (n·C + c)·S + s, so one sample is M consecutive floats. Statistics are summed in double in two
 * passes (mean, then squared deviations), as batchnorm.c does, which keeps the result within
 * float rounding of PyTorch's GroupNorm whatever M is.
 *
 * Why plain C and not oneDNN: Debian's oneDNN 2.6 has no group-normalization primitive (it came
 * in 3.3), and its layer-normalization primitive normalises over the last dimension with a
 * scale per element of that dimension, not per channel. The build enables no OpenMP pragmas, so
 * these loops are serial; layer norm is a small share of a step next to the convolutions.
 */
#include "cpu.h"

#include <math.h>

/* Mean and biased variance of the m values at p. */
static void sample_stats(const float *p, int64_t m, double *mean, double *var)
{
    double sum = 0.0;
    for (int64_t i = 0; i < m; i++)
        sum += p[i];
    double mu = sum / (double)m, sq = 0.0;
    for (int64_t i = 0; i < m; i++)
        sq += ((double)p[i] - mu) * ((double)p[i] - mu);
    *mean = mu;
    *var = sq / (double)m;
}

void cpu_layernorm2d_forward(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma, tensor_ref *beta,
                             tensor_ref *save_mean, tensor_ref *save_invstd, tensor_ref *y)
{
    (void)be;
    cpu_ncs d = cpu_ncs_of(x);
    int64_t m = d.c * d.s;
    for (int64_t n = 0; n < d.n; n++) {
        const float *px = cpu_ptr(x) + n * m;
        float *py = cpu_ptr(y) + n * m;
        double mean, var;
        sample_stats(px, m, &mean, &var);
        double invstd = 1.0 / sqrt(var + eps);
        if (save_mean)
            cpu_ptr(save_mean)[n] = (float)mean;
        if (save_invstd)
            cpu_ptr(save_invstd)[n] = (float)invstd;
        for (int64_t c = 0; c < d.c; c++) {
            double scale = cpu_at_or(gamma, c, 1.0) * invstd, shift = cpu_at_or(beta, c, 0.0);
            for (int64_t i = c * d.s; i < (c + 1) * d.s; i++)
                py[i] = (float)(((double)px[i] - mean) * scale + shift);
        }
    }
}

/* Per sample, with g = dy·γ[c] the gradient of x̂:
 *   dx = invstd/M · (M·g − Σ g − x̂·Σ g·x̂)
 * (the usual normalisation backward, taken over the sample's M values instead of a channel's).
 * dγ and dβ sum over samples and positions of each channel. */
void cpu_layernorm2d_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                              tensor_ref *save_invstd, tensor_ref *dy, tensor_ref *dx, tensor_ref *dgamma,
                              tensor_ref *dbeta)
{
    (void)be;
    cpu_ncs d = cpu_ncs_of(x);
    int64_t m = d.c * d.s;
    for (int64_t n = 0; n < d.n; n++) {
        const float *px = cpu_ptr(x) + n * m, *pg = cpu_ptr(dy) + n * m;
        double mean = cpu_ptr(save_mean)[n], invstd = cpu_ptr(save_invstd)[n];
        double sum_g = 0.0, sum_g_xhat = 0.0;
        for (int64_t c = 0; c < d.c; c++) {
            double gc = cpu_at_or(gamma, c, 1.0), sum_dy = 0.0, sum_dy_xhat = 0.0;
            for (int64_t i = c * d.s; i < (c + 1) * d.s; i++) {
                double xhat = ((double)px[i] - mean) * invstd;
                sum_dy += pg[i];
                sum_dy_xhat += (double)pg[i] * xhat;
            }
            if (dbeta)
                cpu_ptr(dbeta)[c] += (float)sum_dy;
            if (dgamma)
                cpu_ptr(dgamma)[c] += (float)sum_dy_xhat;
            sum_g += gc * sum_dy;
            sum_g_xhat += gc * sum_dy_xhat;
        }
        if (!dx)
            continue;
        float *pdx = cpu_ptr(dx) + n * m;
        double k = invstd / (double)m;
        for (int64_t c = 0; c < d.c; c++) {
            double gc = cpu_at_or(gamma, c, 1.0);
            for (int64_t i = c * d.s; i < (c + 1) * d.s; i++) {
                double xhat = ((double)px[i] - mean) * invstd;
                pdx[i] += (float)(k * ((double)m * gc * pg[i] - sum_g - xhat * sum_g_xhat));
            }
        }
    }
}

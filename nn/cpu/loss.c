/*
 * loss.c — the cpu backend's loss kernels: InfoNCE over a logit matrix with positive and
 * negative masks (SimCLR and its multi-crop variant), softmax cross-entropy, and VISSL's
 * per-class-normalised BCE with logits (nn.h).
 *
 * Each writes the gradient of the loss with respect to its input in the same pass that
 * computes the value. Sums are in double, one row at a time, so the result does not depend on
 * the thread count; rows are few (a batch), so they run on one thread.
 */
#include "cpu.h"

#include <math.h>

/* One row of InfoNCE on L = s·x: adds −Σ_p log(e_p / (e_p + neg)) to *sum and writes
 * ∂loss/∂x (g = s/Z folds the scale and the mean). */
static void info_nce_row(const float *x, double s, const float *pos, const float *neg, float *d, int64_t c, double g,
                         double *sum)
{
    double negsum = 0.0, wsum = 0.0; /* wsum = Σ_p 1/(e_p + neg): each negative's weight */
    for (int64_t j = 0; j < c; j++)
        if (neg[j] != 0.0f)
            negsum += exp(s * x[j]);
    for (int64_t j = 0; j < c; j++)
        if (pos[j] != 0.0f) {
            double e = exp(s * x[j]), den = e + negsum;
            *sum -= log(e / den);
            wsum += 1.0 / den;
            d[j] = (float)(-(1.0 - e / den) * g);
        } else {
            d[j] = 0.0f;
        }
    for (int64_t j = 0; j < c; j++)
        if (neg[j] != 0.0f) /* a column both positive and negative is not meaningful; neg wins */
            d[j] = (float)(exp(s * x[j]) * wsum * g);
}

double cpu_info_nce(eng_backend *be, T *logits, float scale, T *pos, T *neg, T *dlogits)
{
    (void)be;
    int64_t r = logits->shape.dim[0], c = logits->shape.dim[1];
    const float *pm = cpu_ptr(pos);
    double z = 0.0;
    for (int64_t i = 0; i < r * c; i++)
        z += pm[i] != 0.0f;
    double inv_z = z > 0.0 ? 1.0 / z : 0.0, sum = 0.0;
    for (int64_t i = 0; i < r; i++)
        info_nce_row(cpu_ptr(logits) + i * c, scale, pm + i * c, cpu_ptr(neg) + i * c, cpu_ptr(dlogits) + i * c, c,
                     scale * inv_z, &sum);
    return sum * inv_z;
}

/* log Σ_j e^{s·x_j}, with the max taken out (torch's log_softmax does). */
static double log_sum_exp(const float *x, int64_t c, double s)
{
    double m = -INFINITY, t = 0.0;
    for (int64_t j = 0; j < c; j++)
        m = fmax(m, s * x[j]);
    for (int64_t j = 0; j < c; j++)
        t += exp(s * x[j] - m);
    return m + log(t);
}

double cpu_cross_entropy(eng_backend *be, T *x, float scale, const int64_t *target, const float *weight,
                         int64_t ignore_index, T *dx)
{
    (void)be;
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    double s = scale, total = 0.0, wsum = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ignore_index)
            wsum += weight ? weight[target[i]] : 1.0;
    for (int64_t i = 0; i < n; i++) {
        const float *row = cpu_ptr(x) + i * c;
        float *d = cpu_ptr(dx) + i * c;
        if (target[i] == ignore_index) {
            for (int64_t j = 0; j < c; j++)
                d[j] = 0.0f;
            continue;
        }
        double w = weight ? weight[target[i]] : 1.0, lse = log_sum_exp(row, c, s);
        total += w * (lse - s * row[target[i]]);
        for (int64_t j = 0; j < c; j++) /* ∂/∂x_j = s·w·(softmax_j − [j = t]) / Σw */
            d[j] = (float)(s * w * (exp(s * row[j] - lse) - (j == target[i])) / wsum);
    }
    return total / wsum; /* 0/0 = NaN when every row is ignored, as torch */
}

/* BCE with logits of one element, stably: max(x, 0) − x·t + log(1 + e^{−|x|}). */
static double bce(double x, double t) { return fmax(x, 0.0) - x * t + log1p(exp(-fabs(x))); }

double cpu_bce_logits(eng_backend *be, T *x, const int64_t *target, T *dx)
{
    (void)be;
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    const float *px = cpu_ptr(x);
    float *pd = cpu_ptr(dx);
    double total = 0.0;
    for (int64_t j = 0; j < c; j++) {
        int64_t valid = 0;
        for (int64_t i = 0; i < n; i++)
            valid += target[i * c + j] != -1;
        double inv = 1.0 / (double)(valid > 1 ? valid : 1);
        for (int64_t i = 0; i < n; i++) {
            int64_t k = i * c + j;
            if (target[k] == -1) {
                pd[k] = 0.0f;
                continue;
            }
            double v = px[k], t = (double)target[k];
            total += bce(v, t) * inv;
            pd[k] = (float)((1.0 / (1.0 + exp(-v)) - t) * inv);
        }
    }
    return total;
}

/*
 * loss.c — the cpu backend's loss kernels: InfoNCE over a logit matrix with positive and
 * negative masks (SimCLR and its multi-crop variant), softmax cross-entropy, VISSL's
 * per-class-normalised BCE with logits, and SwAV's two halves: Sinkhorn-Knopp codes and the
 * cross-entropy against them (nn.h).
 *
 * Each writes the gradient of the loss with respect to its input in the same pass that
 * computes the value (the soft cross-entropy adds it). Sums are in double, one row at a time, so the result does not depend on
 * the thread count; rows are few (a batch), so they run on one thread.
 */
#include "cpu.h"

#include "util.h"

#include <math.h>
#include <stdlib.h>

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

double cpu_info_nce(eng_backend *be, tensor_ref *logits, float scale, tensor_ref *pos, tensor_ref *neg,
                    tensor_ref *dlogits)
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

double cpu_cross_entropy(eng_backend *be, tensor_ref *x, float scale, const int64_t *target,
                         const float *weight, int64_t ignore_index, tensor_ref *dx)
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

double cpu_bce_logits(eng_backend *be, tensor_ref *x, const int64_t *target, tensor_ref *dx)
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

/* ---- SwAV: Sinkhorn-Knopp codes and the swapped prediction -------------------------------------- */

/* v[0..n) over the ranks (VISSL's all_reduce calls); nothing to do on one rank. */
static int across_ranks(const eng_reducer *r, double *v, size_t n, bool max)
{
    return r ? r->reduce(r->ctx, v, n, max) : 0;
}

/* Scales every prototype's column to 1/K, as VISSL's loop body does with its row sums of
 * Q = Aᵀ (over every rank's rows), with its two guards: a zero column (a prototype no sample
 * chose) first gets 1e-12 added everywhere; an infinite factor becomes the largest finite one. */
static int sinkhorn_columns(double *a, int64_t n, int64_t k, double *u, const eng_reducer *r)
{
    bool zero = false;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t c = 0; c < k; c++)
            u[c] = 0.0;
        for (int64_t row = 0; row < n; row++)
            for (int64_t c = 0; c < k; c++)
                u[c] += a[row * k + c];
        if (across_ranks(r, u, (size_t)k, false) != 0)
            return -1;
        zero = false;
        for (int64_t c = 0; c < k; c++)
            zero |= u[c] == 0.0;
        if (!zero || pass == 1)
            break;
        for (int64_t i = 0; i < n * k; i++)
            a[i] += 1e-12;
    }
    double top = 0.0;
    for (int64_t c = 0; c < k; c++) {
        u[c] = (1.0 / (double)k) / u[c];
        if (isfinite(u[c]))
            top = fmax(top, u[c]);
    }
    for (int64_t c = 0; c < k; c++)
        if (isinf(u[c]))
            u[c] = top;
    for (int64_t row = 0; row < n; row++)
        for (int64_t c = 0; c < k; c++)
            a[row * k + c] *= u[c];
    return 0;
}

/* Scales row r to `to` (the samples' marginal, 1/N; 1 for the final codes). */
static void sinkhorn_row(double *row, int64_t k, double to)
{
    double s = 0.0;
    for (int64_t c = 0; c < k; c++)
        s += row[c];
    for (int64_t c = 0; c < k; c++)
        row[c] *= to / s;
}

/* A = exp(x/ε − max) over the scores and the queue, scaled to total 1 (max and total over the
 * ranks). */
static int sinkhorn_start(double *a, tensor_ref *x, tensor_ref *queue, int64_t n, int64_t k, double epsilon,
                          const eng_reducer *r)
{
    int64_t nx = x->shape.dim[0];
    double top = -INFINITY, total = 0.0;
    for (int64_t i = 0; i < n * k; i++) {
        a[i] = (i < nx * k ? cpu_ptr(x)[i] : cpu_ptr(queue)[i - nx * k]) / epsilon;
        top = fmax(top, a[i]);
    }
    if (across_ranks(r, &top, 1, true) != 0)
        return -1;
    for (int64_t i = 0; i < n * k; i++) { /* VISSL's log-sum-exp guard: nothing overflows */
        a[i] = exp(a[i] - top);
        total += a[i];
    }
    if (across_ranks(r, &total, 1, false) != 0)
        return -1;
    for (int64_t i = 0; i < n * k; i++)
        a[i] /= total;
    return 0;
}

/* The first nx rows of A as codes: each divided by its sum, or the one-hot of its largest. */
static void sinkhorn_codes(double *a, int64_t nx, int64_t k, bool hard, tensor_ref *q)
{
    for (int64_t r = 0; r < nx; r++) {
        double *row = a + r * k;
        float *out = cpu_ptr(q) + r * k;
        sinkhorn_row(row, k, 1.0);
        int64_t best = 0;
        for (int64_t c = 1; c < k; c++)
            best = row[c] > row[best] ? c : best;
        for (int64_t c = 0; c < k; c++)
            out[c] = hard ? (float)(c == best) : (float)row[c];
    }
}

int cpu_sinkhorn(eng_backend *be, tensor_ref *x, tensor_ref *queue, double epsilon, int iters, bool hard,
                 tensor_ref *q, const eng_reducer *across)
{
    (void)be;
    int64_t nx = x->shape.dim[0], nq = queue ? queue->shape.dim[0] : 0, n = nx + nq, k = x->shape.dim[1];
    double samples = (double)n * (across ? across->world : 1); /* VISSL's N: every rank's rows */
    double *a = xmalloc((size_t)(n * k) * sizeof *a), *u = xmalloc((size_t)k * sizeof *u);
    int rc = sinkhorn_start(a, x, queue, n, k, epsilon, across);
    for (int it = 0; rc == 0 && it < iters; it++) {
        rc = sinkhorn_columns(a, n, k, u, across);
        for (int64_t r = 0; rc == 0 && r < n; r++)
            sinkhorn_row(a + r * k, k, 1.0 / samples);
    }
    if (rc == 0)
        sinkhorn_codes(a, nx, k, hard, q);
    free(a);
    free(u);
    return rc;
}

double cpu_soft_cross_entropy(eng_backend *be, tensor_ref *x, float scale, tensor_ref *q, double g,
                              tensor_ref *dx)
{
    (void)be;
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    double s = scale, total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float *row = cpu_ptr(x) + i * c, *t = cpu_ptr(q) + i * c;
        float *d = cpu_ptr(dx) + i * c;
        double lse = log_sum_exp(row, c, s), tsum = 0.0;
        for (int64_t j = 0; j < c; j++) {
            total += t[j] * (lse - s * row[j]);
            tsum += t[j];
        }
        for (int64_t j = 0; j < c; j++) /* ∂/∂x_j = s·(softmax_j·Σq − q_j) */
            d[j] += (float)(g * s * (exp(s * row[j] - lse) * tsum - t[j]));
    }
    return total;
}

/* ---- the largest column of each row ------------------------------------------------------------ */

void cpu_argmax_rows(eng_backend *be, tensor_ref *x, int64_t *out)
{
    (void)be;
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    const float *px = cpu_ptr(x);
#pragma omp parallel for schedule(static) if (n * c >= 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *row = px + i * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; j++)
            if (row[j] > row[best])
                best = j;
        out[i] = best;
    }
}

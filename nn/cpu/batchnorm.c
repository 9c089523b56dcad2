/*
 * batchnorm.c — the cpu backend's batch norm (PyTorch's BatchNorm2d over N×C×H×W and
 * BatchNorm1d over N×C), optionally fused with the ReLU that follows it in a ResNet.
 *
 * In the logical layout, element (n, c, s) lives at (n·C + c)·S + s, with S = H·W for 4-D
 * and S = 1 for 2-D, so a function walks channel c over its N planes of S values.
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
 * Planes of a few values (small images' last stages, BatchNorm1d) take another path, channels
 * in blocks and the batch sample by sample: see "small planes" below. A channel-blocked tensor
 * (a training ResNet's, cpu_blocking) is walked in its own order: see "channel-blocked".
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

/* Channel c's bookkeeping once its batch mean and biased variance over m values are known:
 * save_* and the running statistics; returns the scale its y = (x − mean)·scale + shift uses. */
static double channel_update(int64_t c, double mean, double var, double m, const bn_args *a)
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
    return cpu_at_or(a->gamma, c, 1.0) * invstd;
}

/* Channel c's training step: its bookkeeping, then y. */
static void channel_train(const float *px, float *py, const cpu_ncs *d, int64_t c, double mean, double var,
                          double m, const bn_args *a)
{
    double scale = channel_update(c, mean, var, m, a);
    channel_affine(px, py, d, c, mean, scale, cpu_at_or(a->beta, c, 0.0), a->relu);
}

/* ---- channel-blocked tensors: B channels interleaved per pixel --------------------------------
 *
 * A training ResNet keeps its activations in the layout oneDNN's convolutions read and write
 * (nChwBc, cpu_blocking), so that nothing is converted between them. There sample n's channel
 * block k is S pixels of B interleaved values, starting where its plane would (plane(d, n,
 * kB)), and value (s, l) belongs to channel kB + l. A block is one thread's; each lane sums
 * over n, then s, into its own double: each channel's order is fixed whatever the thread
 * count, as in the logical layout. Per-channel arrays here are B long, indexed by lane. */

enum { MAX_LANES = 16 }; /* cpu_blocking's blocks are 8 or 16 */

/* Σ x (mu NULL) or Σ (x − mu)² per lane of the block at channel c0, into out. */
CPU_HOT static void lanes_sums(const float *x, const cpu_ncs *d, int64_t c0, int b, const double *mu, double *out)
{
    double acc[MAX_LANES] = {0};
    for (int64_t n = 0; n < d->n; n++) {
        const float *r = x + plane(d, n, c0);
        for (int64_t s = 0; s < d->s; s++, r += b) {
            if (mu) {
#pragma omp simd
                for (int l = 0; l < b; l++)
                    acc[l] += ((double)r[l] - mu[l]) * ((double)r[l] - mu[l]);
            } else {
#pragma omp simd
                for (int l = 0; l < b; l++)
                    acc[l] += r[l];
            }
        }
    }
    memcpy(out, acc, (size_t)b * sizeof *out);
}

/* y = (x − mu)·scale + shift per lane, then max(·, 0) when relu (plane_affine's arithmetic). */
CPU_HOT static void lanes_affine(const float *x, float *y, const cpu_ncs *d, int64_t c0, int b, const double *mu,
                                 const double *scale, const double *shift, bool relu)
{
    for (int64_t n = 0; n < d->n; n++) {
        const float *r = x + plane(d, n, c0);
        float *o = y + plane(d, n, c0);
        for (int64_t s = 0; s < d->s; s++, r += b, o += b) {
#pragma omp simd
            for (int l = 0; l < b; l++) {
                float v = (float)(((double)r[l] - mu[l]) * scale[l] + shift[l]);
                o[l] = relu && v < 0.0f ? 0.0f : v;
            }
        }
    }
}

/* The gradient reaching the norm: dy, or dy where the fused ReLU's output y is positive (NULL:
 * no ReLU). The lanes' and rows' kernels below take their loop once per case, `relu` a constant
 * there, so that each inner loop is one branch-free vector loop: with the test inside, GCC left
 * them scalar, branching on the sign of every value (an eighth of a small-stem ResNet-18 step). */
static inline __attribute__((always_inline)) double masked_grad(const float *g, const float *o, int64_t j, bool relu)
{
    return relu && !(o[j] > 0.0f) ? 0.0 : (double)g[j];
}

static inline __attribute__((always_inline)) void lanes_grad_sums_as(const float *x, const float *dy, const float *y,
                                                                     const cpu_ncs *d, int64_t c0, int b,
                                                                     const double *mu, double *sum_g, double *sum_gx,
                                                                     bool relu)
{
    double a[MAX_LANES] = {0}, ax[MAX_LANES] = {0};
    for (int64_t n = 0; n < d->n; n++) {
        int64_t at = plane(d, n, c0);
        const float *r = x + at, *g = dy + at, *o = relu ? y + at : g;
        for (int64_t s = 0; s < d->s; s++, r += b, g += b, o += b) {
#pragma omp simd
            for (int l = 0; l < b; l++) {
                double gl = masked_grad(g, o, l, relu);
                a[l] += gl;
                ax[l] += gl * ((double)r[l] - mu[l]);
            }
        }
    }
    memcpy(sum_g, a, (size_t)b * sizeof *sum_g);
    memcpy(sum_gx, ax, (size_t)b * sizeof *sum_gx);
}

/* Σ g and Σ g·(x − mu) per lane (plane_grad_sums' arithmetic), into sum_g and sum_gx. */
CPU_HOT static void lanes_grad_sums(const float *x, const float *dy, const float *y, const cpu_ncs *d, int64_t c0,
                                    int b, const double *mu, double *sum_g, double *sum_gx)
{
    if (b == MAX_LANES && y)
        lanes_grad_sums_as(x, dy, y, d, c0, MAX_LANES, mu, sum_g, sum_gx, true);
    else if (b == MAX_LANES)
        lanes_grad_sums_as(x, dy, y, d, c0, MAX_LANES, mu, sum_g, sum_gx, false);
    else if (y)
        lanes_grad_sums_as(x, dy, y, d, c0, b, mu, sum_g, sum_gx, true);
    else
        lanes_grad_sums_as(x, dy, y, d, c0, b, mu, sum_g, sum_gx, false);
}

/* The coefficients of the dx formula (lanes_dx, rows_dx), per lane or value. */
typedef struct {
    const double *mu, *kk, *sg, *t;
    double m;
} dx_coef;

static inline __attribute__((always_inline)) void lanes_dx_as(const float *x, const float *dy, const float *y,
                                                              float *dx, const cpu_ncs *d, int64_t c0, int b,
                                                              const dx_coef *k, bool relu)
{
    const double *mu = k->mu, *kk = k->kk, *sg = k->sg, *t = k->t;
    double m = k->m;
    for (int64_t n = 0; n < d->n; n++) {
        int64_t at = plane(d, n, c0);
        const float *r = x + at, *g = dy + at, *o = relu ? y + at : g;
        float *out = dx + at;
        for (int64_t s = 0; s < d->s; s++, r += b, g += b, o += b, out += b) {
#pragma omp simd
            for (int l = 0; l < b; l++)
                out[l] += (float)(kk[l] * (m * masked_grad(g, o, l, relu) - sg[l] - ((double)r[l] - mu[l]) * t[l]));
        }
    }
}

/* dx += kk·(m·g − sg − (x − mu)·t) per lane (plane_dx_train's formula). */
CPU_HOT static void lanes_dx(const float *x, const float *dy, const float *y, float *dx, const cpu_ncs *d,
                             int64_t c0, int b, const double *mu, const double *kk, const double *sg,
                             const double *t, double m)
{
    const dx_coef k = {mu, kk, sg, t, m};
    if (b == MAX_LANES && y)
        lanes_dx_as(x, dy, y, dx, d, c0, MAX_LANES, &k, true);
    else if (b == MAX_LANES)
        lanes_dx_as(x, dy, y, dx, d, c0, MAX_LANES, &k, false);
    else if (y)
        lanes_dx_as(x, dy, y, dx, d, c0, b, &k, true);
    else
        lanes_dx_as(x, dy, y, dx, d, c0, b, &k, false);
}

/* The lanes' training step from their channels' means and variances (channel_train's). */
static void lanes_train(const float *px, float *py, const cpu_ncs *d, int64_t c0, int b, const double *mean,
                        const double *var, double m, const bn_args *a)
{
    double scale[MAX_LANES], shift[MAX_LANES];
    for (int l = 0; l < b; l++) {
        scale[l] = channel_update(c0 + l, mean[l], var[l], m, a);
        shift[l] = cpu_at_or(a->beta, c0 + l, 0.0);
    }
    lanes_affine(px, py, d, c0, b, mean, scale, shift, a->relu);
}

/* The block at c0's whole training forward (without a reducer): statistics, bookkeeping, y. */
static void lanes_forward(const float *px, float *py, const cpu_ncs *d, int64_t c0, int b, double m,
                          const bn_args *a)
{
    double mean[MAX_LANES], var[MAX_LANES];
    lanes_sums(px, d, c0, b, NULL, mean);
    for (int l = 0; l < b; l++)
        mean[l] /= m;
    lanes_sums(px, d, c0, b, mean, var);
    for (int l = 0; l < b; l++)
        var[l] /= m;
    lanes_train(px, py, d, c0, b, mean, var, m, a);
}

/* ---- small planes: channels in blocks, the batch sample by sample ---------------------------
 *
 * Small images leave the last stages maps of a few pixels (ResNet-18's res5 is 1 × 1 at 24 and
 * 32 px, res4 2 × 2; BatchNorm1d has S = 1). There the per-plane loops above run a few
 * iterations per call and the time goes to calls and reductions: at 24 px, Jigsaw's patches,
 * batch norm took a fifth of ResNet-18's training step. So planes of at most SMALL_PLANE values
 * take BLOCK channels at a time and walk the batch sample by sample, whose BLOCK·S values are
 * contiguous, into one accumulator per value (channel, pixel), summed over the pixels at the
 * end. Each channel's sums still run in one order (over n, then s) whichever thread takes its
 * block, so results do not depend on the thread count. */

enum { BLOCK = 16, SMALL_PLANE = 64, BLOCK_VALUES = BLOCK * SMALL_PLANE };

static bool small_planes(const cpu_ncs *d) { return d->s <= SMALL_PLANE; }

/* Channels [c0, c0 + nc): `len` = nc·S values per sample, value j in channel c0 + j/S. */
typedef struct {
    int64_t c0, nc, len;
} block;

static int64_t block_count(const cpu_ncs *d) { return (d->c + BLOCK - 1) / BLOCK; }

static block block_at(const cpu_ncs *d, int64_t b)
{
    int64_t c0 = b * BLOCK, nc = d->c - c0 < BLOCK ? d->c - c0 : BLOCK;
    return (block){c0, nc, nc * d->s};
}

/* Per-block arrays are indexed by the channel's place in the block, i = c − c0. */

/* per[j] = v[j/S]: per-channel values laid over the block's values. */
static void spread(const cpu_ncs *d, const block *k, const double *v, double *per)
{
    for (int64_t j = 0; j < k->len; j++)
        per[j] = v[j / d->s];
}

/* out[i] = Σ over channel i's pixels of acc. */
static void fold(const cpu_ncs *d, const block *k, const double *acc, double *out)
{
    for (int64_t i = 0; i < k->nc; i++) {
        double sum = 0.0;
        for (int64_t s = 0; s < d->s; s++)
            sum += acc[i * d->s + s];
        out[i] = sum;
    }
}

/* Σ x (mu NULL) or Σ (x − mu)² per value over the batch, into acc. */
CPU_HOT static void rows_sums(const float *x, const cpu_ncs *d, const block *k, const double *mu, double *acc)
{
    memset(acc, 0, (size_t)k->len * sizeof *acc);
    for (int64_t n = 0; n < d->n; n++) {
        const float *r = x + plane(d, n, k->c0);
        if (mu) {
#pragma omp simd
            for (int64_t j = 0; j < k->len; j++)
                acc[j] += ((double)r[j] - mu[j]) * ((double)r[j] - mu[j]);
        } else {
#pragma omp simd
            for (int64_t j = 0; j < k->len; j++)
                acc[j] += r[j];
        }
    }
}

/* The block's channel sums: Σ x, or Σ (x − mean)² given each channel's mean, into out. */
static void block_sums(const float *x, const cpu_ncs *d, const block *k, const double *mean, double *out)
{
    double acc[BLOCK_VALUES], mu[BLOCK_VALUES];
    if (mean)
        spread(d, k, mean, mu);
    rows_sums(x, d, k, mean ? mu : NULL, acc);
    fold(d, k, acc, out);
}

/* y = (x − mu)·scale + shift per value, then max(·, 0) when relu (plane_affine's arithmetic). */
CPU_HOT static void rows_affine(const float *x, float *y, const cpu_ncs *d, const block *k, const double *mu,
                                const double *scale, const double *shift, bool relu)
{
    for (int64_t n = 0; n < d->n; n++) {
        const float *r = x + plane(d, n, k->c0);
        float *o = y + plane(d, n, k->c0);
#pragma omp simd
        for (int64_t j = 0; j < k->len; j++) {
            float v = (float)(((double)r[j] - mu[j]) * scale[j] + shift[j]);
            o[j] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

/* The block's training step from its channels' means and variances (channel_train's). */
static void block_train(const float *px, float *py, const cpu_ncs *d, const block *k, const double *mean,
                        const double *var, double m, const bn_args *a)
{
    double scale[BLOCK], shift[BLOCK], mu[BLOCK_VALUES], sc[BLOCK_VALUES], sh[BLOCK_VALUES];
    for (int64_t i = 0; i < k->nc; i++) {
        int64_t c = k->c0 + i;
        scale[i] = channel_update(c, mean[i], var[i], m, a);
        shift[i] = cpu_at_or(a->beta, c, 0.0);
    }
    spread(d, k, mean, mu);
    spread(d, k, scale, sc);
    spread(d, k, shift, sh);
    rows_affine(px, py, d, k, mu, sc, sh, a->relu);
}

/* Block b's whole training forward (without a reducer): statistics, bookkeeping, y. */
static void block_forward(const float *px, float *py, const cpu_ncs *d, int64_t b, double m, const bn_args *a)
{
    block k = block_at(d, b);
    double mean[BLOCK], var[BLOCK];
    block_sums(px, d, &k, NULL, mean);
    for (int64_t i = 0; i < k.nc; i++)
        mean[i] /= m;
    block_sums(px, d, &k, mean, var);
    for (int64_t i = 0; i < k.nc; i++)
        var[i] /= m;
    block_train(px, py, d, &k, mean, var, m, a);
}

static inline __attribute__((always_inline)) void rows_grad_sums_as(const float *x, const float *dy, const float *y,
                                                                    const cpu_ncs *d, const block *k, const double *mu,
                                                                    double *acc_g, double *acc_gx, bool relu)
{
    memset(acc_g, 0, (size_t)k->len * sizeof *acc_g);
    memset(acc_gx, 0, (size_t)k->len * sizeof *acc_gx);
    for (int64_t n = 0; n < d->n; n++) {
        int64_t at = plane(d, n, k->c0);
        const float *r = x + at, *g = dy + at, *o = relu ? y + at : g;
#pragma omp simd
        for (int64_t j = 0; j < k->len; j++) {
            double gj = masked_grad(g, o, j, relu);
            acc_g[j] += gj;
            acc_gx[j] += gj * ((double)r[j] - mu[j]);
        }
    }
}

/* Σ g and Σ g·(x − mu) per value over the batch (plane_grad_sums' arithmetic), into acc_g, acc_gx. */
CPU_HOT static void rows_grad_sums(const float *x, const float *dy, const float *y, const cpu_ncs *d,
                                   const block *k, const double *mu, double *acc_g, double *acc_gx)
{
    if (y)
        rows_grad_sums_as(x, dy, y, d, k, mu, acc_g, acc_gx, true);
    else
        rows_grad_sums_as(x, dy, y, d, k, mu, acc_g, acc_gx, false);
}

static inline __attribute__((always_inline)) void rows_dx_as(const float *x, const float *dy, const float *y,
                                                             float *dx, const cpu_ncs *d, const block *k,
                                                             const dx_coef *c, bool relu)
{
    const double *mu = c->mu, *kk = c->kk, *sg = c->sg, *t = c->t;
    double m = c->m;
    for (int64_t n = 0; n < d->n; n++) {
        int64_t at = plane(d, n, k->c0);
        const float *r = x + at, *g = dy + at, *o = relu ? y + at : g;
        float *out = dx + at;
#pragma omp simd
        for (int64_t j = 0; j < k->len; j++)
            out[j] += (float)(kk[j] * (m * masked_grad(g, o, j, relu) - sg[j] - ((double)r[j] - mu[j]) * t[j]));
    }
}

/* dx += k·(m·g − Σg − (x − mu)·t) per value, t = invstd·Σg·x̂ (plane_dx_train's formula). */
CPU_HOT static void rows_dx(const float *x, const float *dy, const float *y, float *dx, const cpu_ncs *d,
                            const block *k, const double *mu, const double *kk, const double *sg,
                            const double *t, double m)
{
    const dx_coef c = {mu, kk, sg, t, m};
    if (y)
        rows_dx_as(x, dy, y, dx, d, k, &c, true);
    else
        rows_dx_as(x, dy, y, dx, d, k, &c, false);
}

/* What a block's backward reads: the saved statistics and the gradient's tensors. */
typedef struct {
    const float *x, *dy, *y; /* y: the fused ReLU's output, or NULL */
    float *dx;               /* NULL: no dx wanted */
    const float *mean, *invstd;
    tensor_ref *gamma, *dgamma, *dbeta;
} bn_grad;

/* Channels [c0, c0 + nc)'s Σg·(x − mean) made Σg·x̂, and both sums added into dβ and dγ
 * (channel_sums' bookkeeping). */
static void finish_grad_sums(const bn_grad *a, int64_t c0, int64_t nc, const double *sum_g, double *sum_gxhat)
{
    for (int64_t i = 0; i < nc; i++) {
        int64_t c = c0 + i;
        sum_gxhat[i] *= a->invstd[c];
        if (a->dbeta)
            cpu_ptr(a->dbeta)[c] += (float)sum_g[i];
        if (a->dgamma)
            cpu_ptr(a->dgamma)[c] += (float)sum_gxhat[i];
    }
}

/* Channels [c0, c0 + nc)'s dx coefficients from their sums over m values: the mean, the
 * scale γ·invstd/m and the slope invstd·Σg·x̂ (channel_dx's). */
static void dx_coefficients(const bn_grad *a, int64_t c0, int64_t nc, double m, const double *sum_gxhat,
                            double *mean, double *scale, double *slope)
{
    for (int64_t i = 0; i < nc; i++) {
        int64_t c = c0 + i;
        mean[i] = a->mean[c];
        scale[i] = cpu_at_or(a->gamma, c, 1.0) * a->invstd[c] / m;
        slope[i] = a->invstd[c] * sum_gxhat[i];
    }
}

/* The block's Σg and Σg·x̂ per channel into sum_g, sum_gxhat, added into dβ and dγ. */
static void block_grad_sums(const cpu_ncs *d, const block *k, const bn_grad *a, double *sum_g, double *sum_gxhat)
{
    double mean[BLOCK], mu[BLOCK_VALUES], acc_g[BLOCK_VALUES], acc_gx[BLOCK_VALUES];
    for (int64_t i = 0; i < k->nc; i++)
        mean[i] = a->mean[k->c0 + i];
    spread(d, k, mean, mu);
    rows_grad_sums(a->x, a->dy, a->y, d, k, mu, acc_g, acc_gx);
    fold(d, k, acc_g, sum_g);
    fold(d, k, acc_gx, sum_gxhat);
    finish_grad_sums(a, k->c0, k->nc, sum_g, sum_gxhat);
}

/* The block's dx from its channels' sums over m values (channel_dx's). */
static void block_dx(const cpu_ncs *d, const block *k, const bn_grad *a, double m, const double *sum_g,
                     const double *sum_gxhat)
{
    double mean[BLOCK], scale[BLOCK], slope[BLOCK];
    dx_coefficients(a, k->c0, k->nc, m, sum_gxhat, mean, scale, slope);
    double mu[BLOCK_VALUES], kk[BLOCK_VALUES], sg[BLOCK_VALUES], t[BLOCK_VALUES];
    spread(d, k, mean, mu);
    spread(d, k, scale, kk);
    spread(d, k, sum_g, sg);
    spread(d, k, slope, t);
    rows_dx(a->x, a->dy, a->y, a->dx, d, k, mu, kk, sg, t, m);
}

/* Block b's whole training backward (without a reducer). */
static void block_backward(const cpu_ncs *d, int64_t b, const bn_grad *a, double m)
{
    block k = block_at(d, b);
    double sum_g[BLOCK], sum_gxhat[BLOCK];
    block_grad_sums(d, &k, a, sum_g, sum_gxhat);
    if (a->dx)
        block_dx(d, &k, a, m, sum_g, sum_gxhat);
}

/* The lanes' Σg and Σg·x̂ into sum_g, sum_gxhat, added into dβ and dγ. */
static void lanes_grad_block(const cpu_ncs *d, int64_t c0, int b, const bn_grad *a, double *sum_g,
                             double *sum_gxhat)
{
    double mean[MAX_LANES];
    for (int l = 0; l < b; l++)
        mean[l] = a->mean[c0 + l];
    lanes_grad_sums(a->x, a->dy, a->y, d, c0, b, mean, sum_g, sum_gxhat);
    finish_grad_sums(a, c0, b, sum_g, sum_gxhat);
}

/* The lanes' dx from their channels' sums over m values. */
static void lanes_dx_block(const cpu_ncs *d, int64_t c0, int b, const bn_grad *a, double m, const double *sum_g,
                           const double *sum_gxhat)
{
    double mean[MAX_LANES], scale[MAX_LANES], slope[MAX_LANES];
    dx_coefficients(a, c0, b, m, sum_gxhat, mean, scale, slope);
    lanes_dx(a->x, a->dy, a->y, a->dx, d, c0, b, mean, scale, sum_g, slope, m);
}

/* The block at c0's whole training backward (without a reducer). */
static void lanes_backward(const cpu_ncs *d, int64_t c0, int b, const bn_grad *a, double m)
{
    double sum_g[MAX_LANES], sum_gxhat[MAX_LANES];
    lanes_grad_block(d, c0, b, a, sum_g, sum_gxhat);
    if (a->dx)
        lanes_dx_block(d, c0, b, a, m, sum_g, sum_gxhat);
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

/* Every channel's Σ x (mean NULL) or Σ (x − mean)² into out[c]: by lanes for a channel-blocked
 * tensor (`lanes` channels a block, else 0), by blocks for small planes, else channel by
 * channel, the sums the layer without a reducer takes. */
static void all_sums(const float *px, const cpu_ncs *d, int lanes, const double *mean, double *out)
{
    if (lanes) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < d->c; c0 += lanes)
            lanes_sums(px, d, c0, lanes, mean ? mean + c0 : NULL, out + c0);
        return;
    }
    if (small_planes(d)) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < block_count(d); b++) {
            block k = block_at(d, b);
            block_sums(px, d, &k, mean ? mean + k.c0 : NULL, out + k.c0);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        out[c] = mean ? channel_sqdev(px, d, c, mean[c]) : channel_sum(px, d, c);
}

/* Every channel's training step from its mean and variance over m values. */
static void all_train(const float *px, float *py, const cpu_ncs *d, int lanes, const double *mean,
                      const double *var, double m, const bn_args *a)
{
    if (lanes) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < d->c; c0 += lanes)
            lanes_train(px, py, d, c0, lanes, mean + c0, var + c0, m, a);
        return;
    }
    if (small_planes(d)) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < block_count(d); b++) {
            block k = block_at(d, b);
            block_train(px, py, d, &k, mean + k.c0, var + k.c0, m, a);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        channel_train(px, py, d, c, mean[c], var[c], m, a);
}

/* SyncBN's forward: the statistics of the group's batch, in two reduced passes. */
static void forward_synced(const float *px, float *py, const cpu_ncs *d, int lanes, const bn_args *a,
                           const eng_reducer *r)
{
    double *sum = xmalloc((size_t)(2 * d->c + 1) * sizeof *sum), *sq = sum + d->c + 1;
    all_sums(px, d, lanes, NULL, sum);
    sum[d->c] = (double)(d->n * d->s);
    over_group(r, sum, (size_t)d->c + 1);
    double m = sum[d->c];
    if (m < 2)
        die(EXIT_RUNTIME, "batchnorm: training needs more than one value per channel (got %.0f)", m);
    for (int64_t c = 0; c < d->c; c++)
        sum[c] /= m; /* now the means */
    all_sums(px, d, lanes, sum, sq);
    over_group(r, sq, (size_t)d->c);
    for (int64_t c = 0; c < d->c; c++)
        sq[c] /= m; /* now the variances */
    all_train(px, py, d, lanes, sum, sq, m, a);
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
    int lanes = cpu_blocking(x);
    if (across) {
        forward_synced(px, py, &d, lanes, &a, across);
        return;
    }
    double m = (double)(d.n * d.s);
    if (m < 2)
        die(EXIT_RUNTIME, "batchnorm: training needs more than one value per channel (got %.0f)", m);
    if (lanes) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < d.c; c0 += lanes)
            lanes_forward(px, py, &d, c0, lanes, m, &a);
        return;
    }
    if (small_planes(&d)) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < block_count(&d); b++)
            block_forward(px, py, &d, b, m, &a);
        return;
    }
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

/* Every channel's Σg and Σg·x̂ into sum_g[c], sum_gxhat[c], added into dβ and dγ. */
static void all_grad_sums(const cpu_ncs *d, int lanes, const bn_grad *a, double *sum_g, double *sum_gxhat)
{
    if (lanes) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < d->c; c0 += lanes)
            lanes_grad_block(d, c0, lanes, a, sum_g + c0, sum_gxhat + c0);
        return;
    }
    if (small_planes(d)) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < block_count(d); b++) {
            block k = block_at(d, b);
            block_grad_sums(d, &k, a, sum_g + k.c0, sum_gxhat + k.c0);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        channel_sums(d, c, a->x, a->dy, a->y, a->mean[c], a->invstd[c], a->dgamma, a->dbeta, &sum_g[c],
                     &sum_gxhat[c]);
}

/* Every channel's dx from its sums over m values. */
static void all_dx(const cpu_ncs *d, int lanes, const bn_grad *a, double m, const double *sum_g,
                   const double *sum_gxhat)
{
    if (lanes) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < d->c; c0 += lanes)
            lanes_dx_block(d, c0, lanes, a, m, sum_g + c0, sum_gxhat + c0);
        return;
    }
    if (small_planes(d)) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < block_count(d); b++) {
            block k = block_at(d, b);
            block_dx(d, &k, a, m, sum_g + k.c0, sum_gxhat + k.c0);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d->c; c++)
        channel_dx(d, c, a->x, a->dy, a->y, a->dx, a->gamma, a->mean[c], a->invstd[c], m, sum_g[c],
                   sum_gxhat[c]);
}

/* SyncBN's backward: dγ and dβ from this rank's sums, dx from the group's. */
static void backward_synced(const cpu_ncs *d, int lanes, const bn_grad *a, const eng_reducer *r)
{
    double *sums = xmalloc((size_t)(2 * d->c + 1) * sizeof *sums); /* Σg per channel, Σg·x̂ per channel, m */
    all_grad_sums(d, lanes, a, sums, sums + d->c);
    sums[2 * d->c] = (double)(d->n * d->s);
    over_group(r, sums, (size_t)(2 * d->c + 1));
    if (a->dx)
        all_dx(d, lanes, a, sums[2 * d->c], sums, sums + d->c);
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
    const bn_grad a = {.x = cpu_ptr(x),
                       .dy = cpu_ptr(dy),
                       .y = relu_y ? cpu_ptr(relu_y) : NULL,
                       .dx = dx ? cpu_ptr(dx) : NULL,
                       .mean = cpu_ptr(save_mean),
                       .invstd = cpu_ptr(save_invstd),
                       .gamma = gamma,
                       .dgamma = dgamma,
                       .dbeta = dbeta};
    int lanes = cpu_blocking(x);
    if (across) {
        backward_synced(&d, lanes, &a, across);
        return;
    }
    if (lanes) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < d.c; c0 += lanes)
            lanes_backward(&d, c0, lanes, &a, m);
        return;
    }
    if (small_planes(&d)) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < block_count(&d); b++)
            block_backward(&d, b, &a, m);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d.c; c++) {
        double sum_g, sum_gxhat;
        channel_sums(&d, c, a.x, a.dy, a.y, a.mean[c], a.invstd[c], dgamma, dbeta, &sum_g, &sum_gxhat);
        if (a.dx)
            channel_dx(&d, c, a.x, a.dy, a.y, a.dx, gamma, a.mean[c], a.invstd[c], m, sum_g, sum_gxhat);
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

/*
 * norm.cu — the cuda backend's batch norm (BatchNorm2d over N×C×H×W, BatchNorm1d over N×C,
 * optionally fused with the ReLU after it) and LayerNorm2d (GroupNorm(1, C)), with the cpu
 * backend's semantics (nn/cpu/batchnorm.c, nn/cpu/layernorm.c).
 *
 * Element (n, c, s) lives at (n·C + c)·S + s (S = H·W, or 1 for 2-D). Both norms reduce over
 * "segments": batch norm over a channel (N runs of S values, C·S apart), layer norm over a
 * sample (C runs of S values, back to back). A `walk` describes either, and every kernel here
 * is one of two shapes over it:
 *   - partials: block (g, p) sums part p of segment g into two doubles (each thread strides
 *     over the part, then a fixed tree in shared memory); a finish kernel, one thread per
 *     segment, adds the parts in order. No atomics, so the sums are the same every run;
 *   - map: block (g, p) visits the same elements and writes each one (normalise, dx).
 * Inside a block the walk knows which run (sample for batch norm, channel for layer norm)
 * each element is in without a division per element, so per-channel and per-sample values
 * come for free.
 *
 * Statistics are summed in double in two passes (mean, then squared deviations) and the
 * elementwise formulas are the cpu's, evaluated in double and rounded once to float, so the
 * results agree with the cpu backend to float rounding. Backward passes accumulate (+=) into
 * dx, dgamma and dbeta; a NULL one is skipped; gamma/beta NULL mean 1/0.
 *
 * Scratch: slot 0 holds the partial sums, slot 1 one seg_info per segment (the statistics
 * and coefficients the map kernels read), slot 2 SyncBN's per-channel sums.
 *
 * NATIVE tensors under mixed precision are bf16 N×H×W×C (cuda.h), where a channel's values are
 * C apart: batch norm walks them with nhwc_walk instead, whose blocks are tiles of CT channels
 * × a part of the rows (N·H·W), each thread one channel of the tile, so a warp reads CT
 * neighbouring channels of a row; its partials land where the walk's would, so every
 * per-segment kernel and SyncBN's steps serve both. The element operations are templates over
 * the stored type (elem.cuh): values widened on reading, the result rounded once to bf16.
 *
 * SyncBN (a reducer, nn.h): the cpu's steps, with the per-channel sums going to the host and
 * through the reducer between the passes (Σx and the count, then Σ(x − mean)²; backward Σg,
 * Σg·x̂ and the count): C or 2C doubles a pass, a host round trip each.
 */
#include "cuda.h"
#include "elem.cuh"

#include "../../lib/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Everything but the extern "C" entry points stays inside this file. */
namespace {

enum { THREADS = 256 };

/* Partials aim at this many blocks in all and at least this many elements per block: enough
 * blocks to fill the GPU even when there are few channels, few enough that the finish
 * kernels' serial sums stay short. Both depend only on the shape, so the summation order
 * (and so the result) does too. */
enum { TARGET_BLOCKS = 2048, MIN_PER_BLOCK = 4096 };

/* Segment g's element j (0 ≤ j < count) is run j / inner, offset j % inner within it, at
 * g·seg_stride + (j / inner)·run_stride + j % inner. */
typedef struct {
    int64_t segs, count;
    int64_t seg_stride, inner, run_stride;
    int parts; /* blocks per segment */
} walk;

/* What the map kernels need per segment; filled by the small per-segment kernels. */
typedef struct {
    double mean, invstd;
    double scale, shift;     /* batch norm forward: y = (x − mean)·scale + shift */
    double k;                /* backward: the factor in front of dx */
    double sum_g, sum_gxhat; /* backward: Σ g and Σ g·x̂ */
} seg_info;

static const float *ptr_or_null(tensor_ref *t) { return t ? cuda_ptr(t) : NULL; }
static float *mut_or_null(tensor_ref *t) { return t ? cuda_ptr(t) : NULL; }

static int parts_for(int64_t count, int64_t segs)
{
    int64_t by_size = (count + MIN_PER_BLOCK - 1) / MIN_PER_BLOCK;
    int64_t by_grid = (TARGET_BLOCKS + segs - 1) / segs;
    int64_t p = by_size < by_grid ? by_size : by_grid;
    return (int)(p < 1 ? 1 : p);
}

/* N, C and S of a 2-D or 4-D tensor. */
static void ncs_of(tensor_ref *x, int64_t *n, int64_t *c, int64_t *s)
{
    *n = x->shape.dim[0];
    *c = x->shape.dim[1];
    *s = x->shape.ndim == 4 ? x->shape.dim[2] * x->shape.dim[3] : 1;
}

/* Batch norm: one segment per channel, its runs the N samples' planes. */
static walk channel_walk(tensor_ref *x)
{
    int64_t n, c, s;
    ncs_of(x, &n, &c, &s);
    walk w = {c, n * s, s, s, c * s, 0};
    w.parts = parts_for(w.count, w.segs);
    return w;
}

/* Layer norm: one segment per sample, its runs the C channels' planes. */
static walk sample_walk(tensor_ref *x)
{
    int64_t n, c, s;
    ncs_of(x, &n, &c, &s);
    walk w = {n, c * s, c * s, s, s, 0};
    w.parts = parts_for(w.count, w.segs);
    return w;
}

/* Batch norm on a NATIVE bf16 tensor (N×H×W×C): segment c is channel c, its elements the
 * N·H·W rows, element (row r, channel c) at r·C + c. A block is CT channels × part p of the
 * rows. Parts aim at TARGET_BLOCKS blocks in all, counting tiles of channels, of at least
 * MIN_ROWS rows each (a block then covers as many elements as channel_walk's at least), and
 * at most MAX_PARTS, which the finish kernels add one by one. Shape alone decides. */
enum { CT = 32, RT = THREADS / CT, MIN_ROWS = MIN_PER_BLOCK / CT * 4, MAX_PARTS = 256 };

typedef struct {
    int64_t segs, count; /* channels, rows */
    int parts;
} nhwc_walk;

static nhwc_walk nhwc_channel_walk(tensor_ref *x)
{
    int64_t n, c, s;
    ncs_of(x, &n, &c, &s);
    nhwc_walk w = {c, n * s, 0};
    int64_t tiles = (c + CT - 1) / CT, by_size = (w.count + MIN_ROWS - 1) / MIN_ROWS,
            by_grid = (TARGET_BLOCKS + tiles - 1) / tiles;
    int64_t p = by_size < by_grid ? by_size : by_grid;
    w.parts = (int)(p < 1 ? 1 : p > (int64_t)MAX_PARTS ? (int64_t)MAX_PARTS : p);
    return w;
}

/* ---- device building blocks ------------------------------------------------------------------ */

/* Calls f(run, index) for this thread's elements of block (g = blockIdx.x, part blockIdx.y).
 * The run and offset advance by the block's stride with one compare instead of a division. */
template <class F> __device__ static void walk_part(const walk &w, F f)
{
    int64_t g = blockIdx.x, p = blockIdx.y;
    int64_t lo = p * w.count / w.parts, hi = (p + 1) * w.count / w.parts;
    int64_t j = lo + threadIdx.x;
    int64_t run = j / w.inner, off = j - run * w.inner;
    int64_t step_run = blockDim.x / w.inner, step_off = blockDim.x - step_run * w.inner;
    const int64_t base = g * w.seg_stride;
    for (; j < hi; j += blockDim.x) {
        f(run, base + run * w.run_stride + off);
        off += step_off;
        run += step_run;
        if (off >= w.inner) {
            off -= w.inner;
            run++;
        }
    }
}

/* Sums a and b over the block in a fixed tree (blockDim.x == THREADS, a power of two). */
__device__ static void block_sum2(double *a, double *b)
{
    __shared__ double sa[THREADS], sb[THREADS];
    unsigned t = threadIdx.x;
    sa[t] = *a;
    sb[t] = *b;
    __syncthreads();
    for (unsigned half = THREADS / 2; half > 0; half /= 2) {
        if (t < half) {
            sa[t] += sa[t + half];
            sb[t] += sb[t + half];
        }
        __syncthreads();
    }
    *a = sa[0];
    *b = sb[0];
}

/* The block's segment's info, read once (info NULL: none needed). */
__device__ static seg_info segment_info(const seg_info *info)
{
    seg_info s = {};
    if (info)
        s = info[blockIdx.x];
    return s;
}

/* Op(s, run, index, a, b) adds element `index`'s terms into a and b, s being the segment's
 * info; part p of segment g lands in part[(g·parts + p)·2 + {0, 1}]. */
template <class Op>
__global__ static void __launch_bounds__(THREADS) partials_kernel(walk w, Op op, const seg_info *info, double *part)
{
    double a = 0.0, b = 0.0;
    int64_t g = blockIdx.x;
    const seg_info s = segment_info(info);
    walk_part(w, [&](int64_t run, int64_t at) { op(s, run, at, &a, &b); });
    block_sum2(&a, &b);
    if (threadIdx.x == 0) {
        double *out = part + (g * w.parts + blockIdx.y) * 2;
        out[0] = a;
        out[1] = b;
    }
}

/* Op(s, run, index) writes element `index`, s being the segment's info. */
template <class Op> __global__ static void __launch_bounds__(THREADS) map_kernel(walk w, Op op, const seg_info *info)
{
    const seg_info s = segment_info(info);
    walk_part(w, [&](int64_t run, int64_t at) { op(s, run, at); });
}

/* nhwc_walk's partials: thread (tx, ty) of block (tile, p) sums channel tile·CT + tx over
 * every RT-th row of part p from row ty, then the RT threads of a channel add up in a fixed
 * tree; part p of channel c lands in part[(c·parts + p)·2 + {0, 1}], as partials_kernel's. */
template <class Op>
__global__ static void __launch_bounds__(THREADS)
    nhwc_partials_kernel(nhwc_walk w, Op op, const seg_info *info, double *part)
{
    __shared__ double sa[THREADS], sb[THREADS];
    unsigned tx = threadIdx.x % CT, ty = threadIdx.x / CT;
    int64_t c = (int64_t)blockIdx.x * CT + tx, p = blockIdx.y;
    double a = 0.0, b = 0.0;
    if (c < w.segs) {
        seg_info s = {};
        if (info)
            s = info[c];
        int64_t lo = p * w.count / w.parts, hi = (p + 1) * w.count / w.parts;
        for (int64_t r = lo + ty; r < hi; r += RT)
            op(s, r, r * w.segs + c, &a, &b);
    }
    sa[threadIdx.x] = a;
    sb[threadIdx.x] = b;
    __syncthreads();
    for (unsigned half = RT / 2; half > 0; half /= 2) {
        if (ty < half) {
            sa[threadIdx.x] += sa[threadIdx.x + half * CT];
            sb[threadIdx.x] += sb[threadIdx.x + half * CT];
        }
        __syncthreads();
    }
    if (ty == 0 && c < w.segs) {
        part[(c * w.parts + p) * 2] = sa[tx];
        part[(c * w.parts + p) * 2 + 1] = sb[tx];
    }
}

/* nhwc_walk's map: the same threads visit the same elements and write each. */
template <class Op>
__global__ static void __launch_bounds__(THREADS) nhwc_map_kernel(nhwc_walk w, Op op, const seg_info *info)
{
    unsigned tx = threadIdx.x % CT, ty = threadIdx.x / CT;
    int64_t c = (int64_t)blockIdx.x * CT + tx, p = blockIdx.y;
    if (c >= w.segs)
        return;
    seg_info s = {};
    if (info)
        s = info[c];
    int64_t lo = p * w.count / w.parts, hi = (p + 1) * w.count / w.parts;
    for (int64_t r = lo + ty; r < hi; r += RT)
        op(s, r, r * w.segs + c);
}

template <class Op>
static void launch_partials(eng_backend *be, const nhwc_walk &w, Op op, const seg_info *info, double *part)
{
    dim3 grid((unsigned)((w.segs + CT - 1) / CT), (unsigned)w.parts);
    nhwc_partials_kernel<Op><<<grid, THREADS, 0, cuda_stream(be)>>>(w, op, info, part);
    CUDA_LAUNCHED();
}

template <class Op> static void launch_map(eng_backend *be, const nhwc_walk &w, Op op, const seg_info *info)
{
    dim3 grid((unsigned)((w.segs + CT - 1) / CT), (unsigned)w.parts);
    nhwc_map_kernel<Op><<<grid, THREADS, 0, cuda_stream(be)>>>(w, op, info);
    CUDA_LAUNCHED();
}

template <class Op>
static void launch_partials(eng_backend *be, const walk &w, Op op, const seg_info *info, double *part)
{
    dim3 grid((unsigned)w.segs, (unsigned)w.parts);
    partials_kernel<Op><<<grid, THREADS, 0, cuda_stream(be)>>>(w, op, info, part);
    CUDA_LAUNCHED();
}

template <class Op> static void launch_map(eng_backend *be, const walk &w, Op op, const seg_info *info)
{
    dim3 grid((unsigned)w.segs, (unsigned)w.parts);
    map_kernel<Op><<<grid, THREADS, 0, cuda_stream(be)>>>(w, op, info);
    CUDA_LAUNCHED();
}

/* Σ over the parts of segment g, in order. */
__device__ static void parts_sum(const double *part, int parts, int64_t g, double *a, double *b)
{
    double sa = 0.0, sb = 0.0;
    for (int p = 0; p < parts; p++) {
        sa += part[(g * parts + p) * 2];
        sb += part[(g * parts + p) * 2 + 1];
    }
    *a = sa;
    *b = sb;
}

__device__ static double at_or(const float *p, int64_t i, double fallback) { return p ? (double)p[i] : fallback; }

/* ---- element operations ------------------------------------------------------------------------ */

/* Each op sees its block's segment info `s`: a channel's for batch norm, a sample's for layer
 * norm (the channel walk of layer norm's dγ, dβ reads its samples' from `sample` instead). */

template <class T> struct sum_op {
    const T *x;
    __device__ void operator()(const seg_info &, int64_t, int64_t at, double *a, double *) const
    {
        *a += to_float(x[at]);
    }
};

/* Σ (x − mean)² with the segment's mean. */
template <class T> struct sqdev_op {
    const T *x;
    __device__ void operator()(const seg_info &s, int64_t, int64_t at, double *a, double *) const
    {
        double d = (double)to_float(x[at]) - s.mean;
        *a += d * d;
    }
};

/* Batch norm backward: Σ g and Σ g·x̂ over a channel, g = dy masked by the fused ReLU's y. */
template <class T> struct bn_grad_op {
    const T *x, *dy, *relu_y;
    __device__ void operator()(const seg_info &s, int64_t, int64_t at, double *a, double *b) const
    {
        double grad = relu_y ? (to_float(relu_y[at]) > 0.0f ? to_float(dy[at]) : 0.0f) : to_float(dy[at]);
        *a += grad;
        *b += grad * (((double)to_float(x[at]) - s.mean) * s.invstd);
    }
};

/* y = act((x − mean)·scale + shift [+ residual]); a NaN stays NaN through the ReLU; SiLU as
 * eltwise.cu's silu_kernel (x / (1 + e^−x), PyTorch's). */
template <class T> struct bn_affine_op {
    const T *x, *residual;
    T *y;
    eng_eval_act act;
    __device__ void operator()(const seg_info &s, int64_t, int64_t at) const
    {
        float v = (float)(((double)to_float(x[at]) - s.mean) * s.scale + s.shift);
        if (residual)
            v += to_float(residual[at]);
        if (act == ENG_EVAL_ACT_RELU && v < 0.0f)
            v = 0.0f;
        else if (act == ENG_EVAL_ACT_SILU)
            v = __fdiv_rn(v, __fadd_rn(1.0f, expf(-v)));
        store(&y[at], v);
    }
};

/* dx += k·(m·g − Σg − x̂·Σg·x̂), the training backward. */
template <class T> struct bn_dx_train_op {
    const T *x, *dy, *relu_y;
    T *dx;
    double m;
    __device__ void operator()(const seg_info &s, int64_t, int64_t at) const
    {
        double grad = relu_y ? (to_float(relu_y[at]) > 0.0f ? to_float(dy[at]) : 0.0f) : to_float(dy[at]);
        double xhat = ((double)to_float(x[at]) - s.mean) * s.invstd;
        store(&dx[at], to_float(dx[at]) + (float)(s.k * (m * grad - s.sum_g - xhat * s.sum_gxhat)));
    }
};

/* dx += k·dy, the eval backward (a per-channel affine map). */
struct bn_dx_eval_op {
    const float *dy;
    float *dx;
    __device__ void operator()(const seg_info &s, int64_t, int64_t at) const { dx[at] += (float)(s.k * dy[at]); }
};

/* Layer norm, walked by channel (run = n): Σ dy and Σ dy·x̂ with sample n's statistics. */
struct ln_channel_grad_op {
    const float *x, *dy;
    const seg_info *sample;
    __device__ void operator()(const seg_info &, int64_t n, int64_t at, double *a, double *b) const
    {
        double xhat = ((double)x[at] - sample[n].mean) * sample[n].invstd;
        *a += dy[at];
        *b += (double)dy[at] * xhat;
    }
};

/* Layer norm, walked by sample (run = c): Σ g and Σ g·x̂ with g = dy·γ[c]. */
struct ln_sample_grad_op {
    const float *x, *dy, *gamma;
    __device__ void operator()(const seg_info &s, int64_t c, int64_t at, double *a, double *b) const
    {
        double grad = at_or(gamma, c, 1.0) * dy[at];
        *a += grad;
        *b += grad * (((double)x[at] - s.mean) * s.invstd);
    }
};

/* y = (x − mean)·(γ[c]·invstd) + β[c] */
struct ln_affine_op {
    const float *x, *gamma, *beta;
    float *y;
    __device__ void operator()(const seg_info &s, int64_t c, int64_t at) const
    {
        double scale = at_or(gamma, c, 1.0) * s.invstd;
        y[at] = (float)(((double)x[at] - s.mean) * scale + at_or(beta, c, 0.0));
    }
};

/* dx += invstd/M · (M·g − Σg − x̂·Σg·x̂), g = dy·γ[c]. */
struct ln_dx_op {
    const float *x, *dy, *gamma;
    float *dx;
    double m;
    __device__ void operator()(const seg_info &s, int64_t c, int64_t at) const
    {
        double xhat = ((double)x[at] - s.mean) * s.invstd;
        dx[at] += (float)(s.k * (m * at_or(gamma, c, 1.0) * dy[at] - s.sum_g - xhat * s.sum_gxhat));
    }
};

/* ---- per-segment kernels ---------------------------------------------------------------------- */

__global__ static void finish_mean_kernel(const double *part, int parts, int64_t segs, double count, seg_info *info)
{
    GRID_STRIDE(g, segs)
    {
        double sum, unused;
        parts_sum(part, parts, g, &sum, &unused);
        info[g].mean = sum / count;
    }
}

/* The biased variance gives invstd and the saved statistics; batch norm (running stats and
 * scale/shift given) also updates the running stats with the unbiased variance. */
typedef struct {
    double eps, momentum, count;
    const float *gamma, *beta;
    float *running_mean, *running_var, *save_mean, *save_invstd;
} stats_args;

/* Segment g's statistics from its Σ(x − mean)² `sq` (info[g].mean set): see stats_args. */
__device__ static void finish_stats(int64_t g, double sq, const stats_args &s, seg_info *info)
{
    double mean = info[g].mean, var = sq / s.count;
    double invstd = 1.0 / sqrt(var + s.eps);
    info[g].invstd = invstd;
    if (s.save_mean)
        s.save_mean[g] = (float)mean;
    if (s.save_invstd)
        s.save_invstd[g] = (float)invstd;
    if (s.running_mean)
        s.running_mean[g] = (float)((1.0 - s.momentum) * s.running_mean[g] + s.momentum * mean);
    if (s.running_var)
        s.running_var[g] = (float)((1.0 - s.momentum) * s.running_var[g] + s.momentum * var * s.count / (s.count - 1.0));
    info[g].scale = at_or(s.gamma, g, 1.0) * invstd;
    info[g].shift = at_or(s.beta, g, 0.0);
}

__global__ static void finish_stats_kernel(const double *part, int parts, int64_t segs, stats_args s,
                                           seg_info *info)
{
    GRID_STRIDE(g, segs)
    {
        double sq, unused;
        parts_sum(part, parts, g, &sq, &unused);
        finish_stats(g, sq, s, info);
    }
}

/* ---- SyncBN: the group's sums, one double per segment (or two) between the passes ----------- */

/* tot[g] = Σ over segment g's parts of the first sum. */
__global__ static void totals_kernel(const double *part, int parts, int64_t segs, double *tot)
{
    GRID_STRIDE(g, segs)
    {
        double a, unused;
        parts_sum(part, parts, g, &a, &unused);
        tot[g] = a;
    }
}

__global__ static void set_mean_kernel(const double *sum, int64_t segs, double count, seg_info *info)
{
    GRID_STRIDE(g, segs) { info[g].mean = sum[g] / count; }
}

__global__ static void stats_from_sums_kernel(const double *sq, int64_t segs, stats_args s, seg_info *info)
{
    GRID_STRIDE(g, segs) { finish_stats(g, sq[g], s, info); }
}

/* out = [Σg of every segment, Σg·x̂ of every segment] */
__global__ static void pack_grads_kernel(const seg_info *info, int64_t segs, double *out)
{
    GRID_STRIDE(g, segs)
    {
        out[g] = info[g].sum_g;
        out[segs + g] = info[g].sum_gxhat;
    }
}

/* The group's sums back into info, and the dx factor k = γ·invstd/m with the group's count. */
__global__ static void unpack_grads_kernel(const double *in, int64_t segs, double count, const float *gamma,
                                           seg_info *info)
{
    GRID_STRIDE(g, segs)
    {
        info[g].sum_g = in[g];
        info[g].sum_gxhat = in[segs + g];
        info[g].k = at_or(gamma, g, 1.0) * info[g].invstd / count;
    }
}

/* Statistics given (running ones in eval, missing ones as mean 0, var 1): scale, shift and
 * the eval backward's k = γ·invstd. */
__global__ static void eval_info_kernel(int64_t segs, double eps, const float *gamma, const float *beta,
                                        const float *mean, const float *var, seg_info *info)
{
    GRID_STRIDE(g, segs)
    {
        double invstd = 1.0 / sqrt(at_or(var, g, 1.0) + eps), gm = at_or(gamma, g, 1.0);
        info[g].mean = at_or(mean, g, 0.0);
        info[g].invstd = invstd;
        info[g].scale = gm * invstd;
        info[g].shift = at_or(beta, g, 0.0);
        info[g].k = gm * invstd;
    }
}

/* Saved statistics (the training backward; layer norm's with γ NULL): k = γ·invstd/count. */
__global__ static void saved_info_kernel(int64_t segs, double count, const float *gamma, const float *save_mean,
                                         const float *save_invstd, seg_info *info)
{
    GRID_STRIDE(g, segs)
    {
        double invstd = save_invstd[g];
        info[g].mean = save_mean[g];
        info[g].invstd = invstd;
        info[g].k = at_or(gamma, g, 1.0) * invstd / count;
    }
}

/* Σ g and Σ g·x̂ per segment: into info (when given) and added into dbeta and dgamma. */
__global__ static void finish_grads_kernel(const double *part, int parts, int64_t segs, seg_info *info,
                                           float *dgamma, float *dbeta)
{
    GRID_STRIDE(g, segs)
    {
        double sum_g, sum_gxhat;
        parts_sum(part, parts, g, &sum_g, &sum_gxhat);
        if (info) {
            info[g].sum_g = sum_g;
            info[g].sum_gxhat = sum_gxhat;
        }
        if (dbeta)
            dbeta[g] += (float)sum_g;
        if (dgamma)
            dgamma[g] += (float)sum_gxhat;
    }
}

/* ---- host side ---------------------------------------------------------------------------------- */

template <class W> static unsigned seg_blocks(const W &w) { return cuda_blocks(w.segs, THREADS); }

template <class W> static double *partials_scratch(eng_backend *be, const W &w)
{
    return (double *)cuda_scratch(be, 0, (size_t)(w.segs * w.parts) * 2 * sizeof(double));
}

static seg_info *info_scratch(eng_backend *be, int64_t segs)
{
    return (seg_info *)cuda_scratch(be, 1, (size_t)segs * sizeof(seg_info));
}

/* Two passes over each segment: the mean, then the squared deviations; finish_stats_kernel
 * then writes what `s` asks for and info's mean, invstd, scale and shift. */
template <class W, class T>
static void segment_stats(eng_backend *be, const W &w, const T *x, const stats_args &s, seg_info *info)
{
    double *part = partials_scratch(be, w);
    cudaStream_t st = cuda_stream(be);
    launch_partials(be, w, sum_op<T>{x}, NULL, part);
    finish_mean_kernel<<<seg_blocks(w), THREADS, 0, st>>>(part, w.parts, w.segs, (double)w.count, info);
    CUDA_LAUNCHED();
    launch_partials(be, w, sqdev_op<T>{x}, info, part);
    finish_stats_kernel<<<seg_blocks(w), THREADS, 0, st>>>(part, w.parts, w.segs, s, info);
    CUDA_LAUNCHED();
}

/* Reduce with op (reading the segments' info `in`), then per segment Σa, Σb into `out`'s
 * sum_g, sum_gxhat and added into dbeta, dgamma (each skipped when NULL). */
template <class W, class Op>
static void segment_grads(eng_backend *be, const W &w, Op op, const seg_info *in, seg_info *out, float *dgamma,
                          float *dbeta)
{
    double *part = partials_scratch(be, w);
    launch_partials(be, w, op, in, part);
    finish_grads_kernel<<<seg_blocks(w), THREADS, 0, cuda_stream(be)>>>(part, w.parts, w.segs, out, dgamma, dbeta);
    CUDA_LAUNCHED();
}

template <class W> static bool empty(const W &w) { return w.segs == 0 || w.count == 0; }

/* dev[0..n) (device doubles) and *count summed over the group on the host, in place; a failed
 * reducer leaves the rank's own values, as the cpu backend's batch norm does (nn.h). */
static void over_group(eng_backend *be, double *dev, int64_t n, double *count, const eng_reducer *r)
{
    size_t len = (size_t)n + 1;
    double *h = (double *)malloc(2 * len * sizeof(double));
    if (!h)
        die(EXIT_RUNTIME, "cuda: SyncBN: out of host memory for %lld sums", (long long)n);
    cuda_read_doubles(be, dev, h, (int)n);
    h[n] = *count;
    memcpy(h + len, h, len * sizeof(double));
    if (r->reduce(r->ctx, h, len, false) != 0)
        memcpy(h, h + len, len * sizeof(double));
    CUDA_CHECK(cudaMemcpyAsync(dev, h, (size_t)n * sizeof(double), cudaMemcpyHostToDevice, cuda_stream(be)));
    cuda_sync(be); /* h is freed next */
    *count = h[n];
    free(h);
}

/* SyncBN's forward (the cpu's steps): Σx and the count over the group, then Σ(x − mean)² around
 * the group's mean, then the statistics with the group's count. */
template <class W, class T>
static void forward_synced(eng_backend *be, const W &w, const T *x, stats_args s, seg_info *info,
                           const eng_reducer *r)
{
    double *part = partials_scratch(be, w), *tot = (double *)cuda_scratch(be, 2, (size_t)w.segs * sizeof(double));
    cudaStream_t st = cuda_stream(be);
    launch_partials(be, w, sum_op<T>{x}, NULL, part);
    totals_kernel<<<seg_blocks(w), THREADS, 0, st>>>(part, w.parts, w.segs, tot);
    CUDA_LAUNCHED();
    double m = (double)w.count, unused = 0.0;
    over_group(be, tot, w.segs, &m, r);
    if (m < 2)
        die(EXIT_RUNTIME, "batchnorm: training needs more than one value per channel (got %.0f)", m);
    set_mean_kernel<<<seg_blocks(w), THREADS, 0, st>>>(tot, w.segs, m, info);
    CUDA_LAUNCHED();
    launch_partials(be, w, sqdev_op<T>{x}, info, part);
    totals_kernel<<<seg_blocks(w), THREADS, 0, st>>>(part, w.parts, w.segs, tot);
    CUDA_LAUNCHED();
    over_group(be, tot, w.segs, &unused, r);
    s.count = m;
    stats_from_sums_kernel<<<seg_blocks(w), THREADS, 0, st>>>(tot, w.segs, s, info);
    CUDA_LAUNCHED();
}

/* SyncBN's backward: dγ and dβ from this rank's sums (added by segment_grads), dx from the
 * group's Σg, Σg·x̂ and count. info holds the saved statistics; returns the group's count. */
template <class W>
static double backward_group_sums(eng_backend *be, const W &w, const float *gamma, seg_info *info,
                                  const eng_reducer *r)
{
    double *tot = (double *)cuda_scratch(be, 2, (size_t)(2 * w.segs) * sizeof(double)), m = (double)w.count;
    pack_grads_kernel<<<seg_blocks(w), THREADS, 0, cuda_stream(be)>>>(info, w.segs, tot);
    CUDA_LAUNCHED();
    over_group(be, tot, 2 * w.segs, &m, r);
    unpack_grads_kernel<<<seg_blocks(w), THREADS, 0, cuda_stream(be)>>>(tot, w.segs, m, gamma, info);
    CUDA_LAUNCHED();
    return m;
}

/* Running statistics (mean 0, var 1 where missing) make batch norm a per-channel affine map. */
template <class W>
static seg_info *eval_info(eng_backend *be, const W &w, double eps, tensor_ref *gamma, tensor_ref *beta,
                           tensor_ref *mean, tensor_ref *var)
{
    seg_info *info = info_scratch(be, w.segs);
    eval_info_kernel<<<seg_blocks(w), THREADS, 0, cuda_stream(be)>>>(
        w.segs, eps, ptr_or_null(gamma), ptr_or_null(beta), ptr_or_null(mean), ptr_or_null(var), info);
    CUDA_LAUNCHED();
    return info;
}

/* Batch norm's training forward over walk w (either kind), x and y stored as T. */
template <class W, class T>
static void forward_train(eng_backend *be, const W &w, const T *x, stats_args s, bool relu, T *y,
                          const eng_reducer *across)
{
    if (w.count < 2 && !across)
        die(EXIT_RUNTIME, "batchnorm: training needs more than one value per channel (got %lld)",
            (long long)w.count);
    if (empty(w) && !across) /* with a reducer every rank makes the group's calls */
        return;
    seg_info *info = info_scratch(be, w.segs);
    s.count = (double)w.count;
    if (across)
        forward_synced(be, w, x, s, info, across);
    else
        segment_stats(be, w, x, s, info);
    launch_map(be, w, bn_affine_op<T>{x, NULL, y, relu ? ENG_EVAL_ACT_RELU : ENG_EVAL_ACT_NONE}, info);
}

/* Batch norm's training backward over walk w, the activations stored as T. */
template <class W, class T>
static void backward_train(eng_backend *be, const W &w, tensor_ref *gamma, tensor_ref *save_mean,
                           tensor_ref *save_invstd, const T *x, const T *relu_y, const T *dy, T *dx, float *dgamma,
                           float *dbeta, const eng_reducer *across)
{
    if (empty(w) && !across)
        return;
    seg_info *info = info_scratch(be, w.segs);
    saved_info_kernel<<<seg_blocks(w), THREADS, 0, cuda_stream(be)>>>(
        w.segs, (double)w.count, ptr_or_null(gamma), cuda_ptr(save_mean), cuda_ptr(save_invstd), info);
    CUDA_LAUNCHED();
    segment_grads(be, w, bn_grad_op<T>{x, dy, relu_y}, info, info, dgamma, dbeta);
    double m = across ? backward_group_sums(be, w, ptr_or_null(gamma), info, across) : (double)w.count;
    if (dx)
        launch_map(be, w, bn_dx_train_op<T>{x, dy, relu_y, dx, m}, info);
}

/* y = act(BN_eval(y) [+ residual]) in place, over walk w, y and the residual stored as T. */
template <class W, class T>
static void eval_epilogue(eng_backend *be, const W &w, double eps, tensor_ref *gamma, tensor_ref *beta,
                          tensor_ref *mean, tensor_ref *var, const T *residual, eng_eval_act act, T *y)
{
    if (empty(w))
        return;
    seg_info *info = eval_info(be, w, eps, gamma, beta, mean, var);
    /* in place: each element is read, then written, by the same thread */
    launch_map(be, w, bn_affine_op<T>{y, residual, y, act}, info);
}

/* The stored elements of a NATIVE bf16 tensor (NULL for NULL). */
static bf16 *bf16_or_null(tensor_ref *t) { return t ? cuda_bf16_ptr(t) : NULL; }

} // namespace

extern "C" void cuda_batchnorm_forward_train(eng_backend *be, double momentum, double eps, tensor_ref *x,
                                             tensor_ref *gamma, tensor_ref *beta, tensor_ref *running_mean,
                                             tensor_ref *running_var, tensor_ref *save_mean,
                                             tensor_ref *save_invstd, bool relu, tensor_ref *y,
                                             const eng_reducer *across)
{
    stats_args s = {};
    s.eps = eps;
    s.momentum = momentum;
    s.gamma = ptr_or_null(gamma);
    s.beta = ptr_or_null(beta);
    s.running_mean = mut_or_null(running_mean);
    s.running_var = mut_or_null(running_var);
    s.save_mean = mut_or_null(save_mean);
    s.save_invstd = mut_or_null(save_invstd);
    if (cuda_native_bf16(be, x))
        forward_train(be, nhwc_channel_walk(x), (const bf16 *)cuda_bf16_ptr(x), s, relu, cuda_bf16_ptr(y), across);
    else
        forward_train(be, channel_walk(x), (const float *)cuda_ptr(x), s, relu, cuda_ptr(y), across);
}

extern "C" void cuda_batchnorm_forward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                            tensor_ref *beta, tensor_ref *running_mean,
                                            tensor_ref *running_var, bool relu, tensor_ref *y)
{
    walk w = channel_walk(x);
    if (empty(w))
        return;
    seg_info *info = eval_info(be, w, eps, gamma, beta, running_mean, running_var);
    launch_map(be, w, bn_affine_op<float>{cuda_ptr(x), NULL, cuda_ptr(y), relu ? ENG_EVAL_ACT_RELU : ENG_EVAL_ACT_NONE},
               info);
}

/* The residual is read in y's storage: one in the other layout is converted into scratch slot 4
 * first (a block whose input was a feature a caller reads, LOGICAL, and whose output is not). */
extern "C" void cuda_bn_eval_epilogue(eng_backend *be, double eps, tensor_ref *gamma, tensor_ref *beta,
                                      tensor_ref *mean, tensor_ref *var, tensor_ref *residual,
                                      eng_eval_act act, tensor_ref *y)
{
    eng_tensor moved;
    if (residual && cuda_native_bf16(be, residual) != cuda_native_bf16(be, y)) {
        moved = (eng_tensor){.shape = y->shape, .base = cuda_scratch(be, 4, eng_bytes(be, &y->shape)),
                             .offset = 0, .layout = y->layout};
        eng_copy(be, residual, &moved);
        residual = &moved;
    }
    if (cuda_native_bf16(be, y))
        eval_epilogue(be, nhwc_channel_walk(y), eps, gamma, beta, mean, var, (const bf16 *)bf16_or_null(residual), act,
                      cuda_bf16_ptr(y));
    else
        eval_epilogue(be, channel_walk(y), eps, gamma, beta, mean, var, (const float *)ptr_or_null(residual), act,
                      cuda_ptr(y));
}

/* With x̂ = (x − mean)·invstd, g the gradient reaching the norm and m values per channel:
 *   dβ = Σ g,  dγ = Σ g·x̂,  dx = γ·invstd/m · (m·g − dβ − x̂·dγ). */
extern "C" void cuda_batchnorm_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma,
                                        tensor_ref *save_mean, tensor_ref *save_invstd, tensor_ref *relu_y,
                                        tensor_ref *dy, tensor_ref *dx, tensor_ref *dgamma, tensor_ref *dbeta,
                                        const eng_reducer *across)
{
    if (cuda_native_bf16(be, x))
        backward_train(be, nhwc_channel_walk(x), gamma, save_mean, save_invstd, (const bf16 *)cuda_bf16_ptr(x),
                       (const bf16 *)bf16_or_null(relu_y), (const bf16 *)cuda_bf16_ptr(dy), bf16_or_null(dx),
                       mut_or_null(dgamma), mut_or_null(dbeta), across);
    else
        backward_train(be, channel_walk(x), gamma, save_mean, save_invstd, (const float *)cuda_ptr(x),
                       ptr_or_null(relu_y), (const float *)cuda_ptr(dy), mut_or_null(dx), mut_or_null(dgamma),
                       mut_or_null(dbeta), across);
}

/* The eval forward is affine per channel, so: dx += dy·γ·invstd, dγ += Σ dy·x̂, dβ += Σ dy
 * with x̂ from the running statistics. */
extern "C" void cuda_batchnorm_backward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                             tensor_ref *running_mean, tensor_ref *running_var,
                                             tensor_ref *dy, tensor_ref *dx, tensor_ref *dgamma,
                                             tensor_ref *dbeta)
{
    walk w = channel_walk(x);
    if (empty(w))
        return;
    seg_info *info = eval_info(be, w, eps, gamma, NULL, running_mean, running_var);
    if (dgamma || dbeta)
        segment_grads(be, w, bn_grad_op<float>{cuda_ptr(x), cuda_ptr(dy), NULL}, info, NULL, mut_or_null(dgamma),
                      mut_or_null(dbeta));
    if (dx)
        launch_map(be, w, bn_dx_eval_op{cuda_ptr(dy), cuda_ptr(dx)}, info);
}

extern "C" void cuda_layernorm2d_forward(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                         tensor_ref *beta, tensor_ref *save_mean, tensor_ref *save_invstd,
                                         tensor_ref *y)
{
    walk w = sample_walk(x);
    if (empty(w))
        return;
    seg_info *info = info_scratch(be, w.segs);
    stats_args s = {}; /* no running statistics, no per-sample affine */
    s.eps = eps;
    s.count = (double)w.count;
    s.save_mean = mut_or_null(save_mean);
    s.save_invstd = mut_or_null(save_invstd);
    segment_stats(be, w, cuda_ptr(x), s, info);
    launch_map(be, w, ln_affine_op{cuda_ptr(x), ptr_or_null(gamma), ptr_or_null(beta), cuda_ptr(y)}, info);
}

/* Per sample, with g = dy·γ[c] and M values per sample:
 *   dx += invstd/M · (M·g − Σ g − x̂·Σ g·x̂);
 * dγ and dβ sum over the samples and positions of each channel (a channel walk whose runs
 * are the samples, each with its own statistics). */
extern "C" void cuda_layernorm2d_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma,
                                          tensor_ref *save_mean, tensor_ref *save_invstd, tensor_ref *dy,
                                          tensor_ref *dx, tensor_ref *dgamma, tensor_ref *dbeta)
{
    walk ws = sample_walk(x), wc = channel_walk(x);
    if (empty(ws))
        return;
    seg_info *info = info_scratch(be, ws.segs);
    saved_info_kernel<<<seg_blocks(ws), THREADS, 0, cuda_stream(be)>>>(
        ws.segs, (double)ws.count, NULL, cuda_ptr(save_mean), cuda_ptr(save_invstd), info);
    CUDA_LAUNCHED();
    const float *px = cuda_ptr(x), *pdy = cuda_ptr(dy), *pg = ptr_or_null(gamma);
    if (dgamma || dbeta)
        segment_grads(be, wc, ln_channel_grad_op{px, pdy, info}, NULL, NULL, mut_or_null(dgamma),
                      mut_or_null(dbeta));
    if (!dx)
        return;
    segment_grads(be, ws, ln_sample_grad_op{px, pdy, pg}, info, info, NULL, NULL);
    launch_map(be, ws, ln_dx_op{px, pdy, pg, cuda_ptr(dx), (double)ws.count}, info);
}

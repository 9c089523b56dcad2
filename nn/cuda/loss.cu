/*
 * loss.cu — the cuda backend's losses and reductions: Σx² (LARC's norms), InfoNCE over a logit
 * matrix with positive and negative masks, softmax cross-entropy, VISSL's per-class-normalised
 * BCE with logits, and SwAV's two halves: Sinkhorn-Knopp codes and the cross-entropy against
 * them (nn.h).
 *
 * They compute what the cpu backend's loss.c computes, with the same double and float steps:
 * every value is worked in double from the fp32 inputs and each gradient element is rounded to
 * float once at the end. Products that the cpu rounds before an addition are written
 * __dmul_rn here, so nvcc cannot fuse them into an FMA and round differently.
 *
 * Layout of the work: one block per row (the losses) or per group of columns (Sinkhorn's
 * column sums); inside a block each thread strides over the row and a fixed tree in shared
 * memory combines the threads. Per-row values land in a device array that one more block sums
 * the same way, and the host reads back the single double. Nothing uses floating-point atomics,
 * so a run is repeatable bit for bit; only the order of the double sums differs from the cpu's.
 *
 * Host-side arrays (cross-entropy's targets and weights, BCE's targets) are digested on the
 * host where the cpu does it there too (Σ weights, each column's count of targets) and uploaded
 * through the scratch slots.
 */
#include "cuda.h"

#include "../../lib/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { THREADS = 256 }; /* every block of this file; a power of two, for the trees */

/* One block's threads over the n elements of its row. */
#define BLOCK_STRIDE(j, n) for (int64_t j = threadIdx.x; j < (n); j += blockDim.x)

/* ---- block reductions ------------------------------------------------------------------------- */

struct add_op {
    __device__ double operator()(double a, double b) const { return a + b; }
};
struct max_op {
    __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

/* One value per thread combined in a fixed tree; every thread gets the result. All threads of
 * the block must call it. */
template <typename Op>
__device__ static double block_reduce(double v, Op op)
{
    __shared__ double sh[THREADS];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + half]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); /* the next call may overwrite sh */
    return r;
}

__device__ static double block_sum(double v) { return block_reduce(v, add_op()); }
__device__ static double block_max(double v) { return block_reduce(v, max_op()); }

/* The index of the block's largest value, the lowest index among equals (the cpu's scan keeps
 * the first maximum). (v, i) is the thread's own best; i = INT64_MAX when it had none. */
__device__ static int64_t block_argmax(double v, int64_t i)
{
    __shared__ double sv[THREADS];
    __shared__ int64_t si[THREADS];
    sv[threadIdx.x] = v;
    si[threadIdx.x] = i;
    __syncthreads();
    for (unsigned half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            double bv = sv[threadIdx.x + half];
            int64_t bi = si[threadIdx.x + half];
            if (bv > sv[threadIdx.x] || (bv == sv[threadIdx.x] && bi < si[threadIdx.x]))
                sv[threadIdx.x] = bv, si[threadIdx.x] = bi;
        }
        __syncthreads();
    }
    int64_t r = si[0];
    __syncthreads();
    return r;
}

/* *out = Σ in[0..n) (or its max): one block, the fixed order of block_reduce. */
__global__ static void sum_kernel(const double *in, int64_t n, double *out)
{
    double s = 0.0;
    BLOCK_STRIDE(i, n) s += in[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        *out = s;
}

__global__ static void max_kernel(const double *in, int64_t n, double *out)
{
    double m = -INFINITY;
    BLOCK_STRIDE(i, n) m = fmax(m, in[i]);
    m = block_max(m);
    if (threadIdx.x == 0)
        *out = m;
}

static void sum_doubles(eng_backend *be, const double *in, int64_t n, double *out)
{
    sum_kernel<<<1, THREADS, 0, cuda_stream(be)>>>(in, n, out);
    CUDA_LAUNCHED();
}

/* The value the host wants back, from device memory (waits for the stream). */
static double read_double(eng_backend *be, const double *dev)
{
    double v;
    cuda_read_doubles(be, dev, &v, 1);
    return v;
}

/* s·x, rounded on its own as the cpu does before it subtracts a max or a log-sum-exp. */
__device__ static double scaled(double s, float x) { return __dmul_rn(s, (double)x); }

/* ---- Σ x² ------------------------------------------------------------------------------------ */

enum { SQUARES_BLOCKS = 1024 }; /* at most; the count depends only on n, so the order is fixed */

__global__ static void sum_squares_kernel(const float *x, int64_t n, double *partial)
{
    double s = 0.0;
    GRID_STRIDE(i, n) s += (double)x[i] * (double)x[i]; /* exact in double: FMA or not, the same */
    s = block_sum(s);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* Σ x² into *total on the device, through `partial` (SQUARES_BLOCKS doubles); nothing waits. */
static void sum_squares_into(eng_backend *be, tensor_ref *x, double *partial, double *total)
{
    int64_t n = eng_numel(&x->shape);
    if (n == 0) {
        CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof *total, cuda_stream(be)));
        return;
    }
    unsigned blocks = cuda_blocks(n, THREADS);
    blocks = blocks > (unsigned)SQUARES_BLOCKS ? (unsigned)SQUARES_BLOCKS : blocks;
    sum_squares_kernel<<<blocks, THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), n, partial);
    CUDA_LAUNCHED();
    sum_doubles(be, partial, blocks, total);
}

extern "C" double cuda_sum_squares(eng_backend *be, tensor_ref *x)
{
    double *partial = (double *)cuda_scratch(be, 0, (SQUARES_BLOCKS + 1) * sizeof(double));
    sum_squares_into(be, x, partial, partial + SQUARES_BLOCKS);
    return read_double(be, partial + SQUARES_BLOCKS);
}

/* The same sums, one after another on the stream (the partials' buffer is reused in stream
 * order), and one wait for all of them. */
extern "C" void cuda_sum_squares_many(eng_backend *be, tensor_ref *const *xs, int n, double *out)
{
    double *partial = (double *)cuda_scratch(be, 0, SQUARES_BLOCKS * sizeof(double));
    double *totals = (double *)cuda_scratch(be, 1, (size_t)n * sizeof(double));
    for (int i = 0; i < n; i++)
        sum_squares_into(be, xs[i], partial, totals + i);
    cuda_read_doubles(be, totals, out, n);
}

/* ---- InfoNCE ---------------------------------------------------------------------------------- */

/* Row r's number of positives and Σ_{n∈N_r} e^{s·x_n}. */
__global__ static void nce_stats_kernel(const float *x, const float *pos, const float *neg, int64_t c, double s,
                                        double *count, double *negsum)
{
    int64_t r = blockIdx.x;
    x += r * c, pos += r * c, neg += r * c;
    double k = 0.0, e = 0.0;
    BLOCK_STRIDE(j, c)
    {
        k += pos[j] != 0.0f;
        if (neg[j] != 0.0f)
            e += exp(s * x[j]);
    }
    k = block_sum(k);
    e = block_sum(e);
    if (threadIdx.x == 0)
        count[r] = k, negsum[r] = e;
}

/* Row r's −Σ_p log(e_p / (e_p + neg)) into loss[r], and its gradient: g = s/Z folds the scale
 * and the mean over Z = *z positives. A column both positive and negative takes the negative's
 * gradient, as on the cpu. */
__global__ static void nce_grad_kernel(const float *x, const float *pos, const float *neg, float *d, int64_t c,
                                       double s, const double *negsum, const double *z, double *loss)
{
    int64_t r = blockIdx.x;
    x += r * c, pos += r * c, neg += r * c, d += r * c;
    double inv_z = *z > 0.0 ? 1.0 / *z : 0.0, g = s * inv_z, ns = negsum[r];
    double l = 0.0, w = 0.0; /* w = Σ_p 1/(e_p + neg): each negative's weight */
    BLOCK_STRIDE(j, c)
    {
        if (pos[j] == 0.0f)
            continue;
        double e = exp(s * x[j]), den = e + ns;
        l -= log(e / den);
        w += 1.0 / den;
    }
    l = block_sum(l);
    w = block_sum(w);
    BLOCK_STRIDE(j, c)
    {
        float v = 0.0f;
        if (neg[j] != 0.0f) {
            v = (float)(exp(s * x[j]) * w * g);
        } else if (pos[j] != 0.0f) {
            double e = exp(s * x[j]), den = e + ns;
            v = (float)(-(1.0 - e / den) * g);
        }
        d[j] = v;
    }
    if (threadIdx.x == 0)
        loss[r] = l;
}

extern "C" double cuda_info_nce(eng_backend *be, tensor_ref *logits, float scale, tensor_ref *pos,
                                tensor_ref *neg, tensor_ref *dlogits)
{
    int64_t r = logits->shape.dim[0], c = logits->shape.dim[1];
    if (r == 0)
        return 0.0;
    double s = scale;
    /* count, negsum and loss per row, then Σ loss and Z */
    double *buf = (double *)cuda_scratch(be, 0, (size_t)(3 * r + 2) * sizeof(double));
    double *count = buf, *negsum = buf + r, *loss = buf + 2 * r, *sums = buf + 3 * r;
    cudaStream_t st = cuda_stream(be);
    nce_stats_kernel<<<(unsigned)r, THREADS, 0, st>>>(cuda_ptr(logits), cuda_ptr(pos), cuda_ptr(neg), c, s, count,
                                                       negsum);
    CUDA_LAUNCHED();
    sum_doubles(be, count, r, sums + 1);
    nce_grad_kernel<<<(unsigned)r, THREADS, 0, st>>>(cuda_ptr(logits), cuda_ptr(pos), cuda_ptr(neg),
                                                      cuda_ptr(dlogits), c, s, negsum, sums + 1, loss);
    CUDA_LAUNCHED();
    sum_doubles(be, loss, r, sums);
    double h[2];
    cuda_read_doubles(be, sums, h, 2);
    double inv_z = h[1] > 0.0 ? 1.0 / h[1] : 0.0;
    return h[0] * inv_z;
}

/* ---- softmax cross-entropy -------------------------------------------------------------------- */

/* log Σ_j e^{s·x_j} of one row, the max taken out (torch's log_softmax does); every thread
 * gets it. */
__device__ static double row_log_sum_exp(const float *x, int64_t c, double s)
{
    double m = -INFINITY, t = 0.0;
    BLOCK_STRIDE(j, c) m = fmax(m, scaled(s, x[j]));
    m = block_max(m);
    BLOCK_STRIDE(j, c) t += exp(scaled(s, x[j]) - m);
    return m + log(block_sum(t));
}

/* One row's target and its weight, from the host; cls < 0: the row is ignored. */
typedef struct {
    int64_t cls;
    double w;
} ce_row;

/* Row r's w·(lse − s·x_t) into loss[r]; ∂/∂x_j = s·w·(softmax_j − [j = t]) / Σw. */
__global__ static void ce_kernel(const float *x, const ce_row *rows, int64_t c, double s, double wsum, float *d,
                                 double *loss)
{
    int64_t r = blockIdx.x;
    x += r * c, d += r * c;
    ce_row t = rows[r];
    if (t.cls < 0) { /* the whole block leaves: no reduction follows */
        BLOCK_STRIDE(j, c) d[j] = 0.0f;
        if (threadIdx.x == 0)
            loss[r] = 0.0;
        return;
    }
    double lse = row_log_sum_exp(x, c, s);
    BLOCK_STRIDE(j, c) d[j] = (float)(s * t.w * (exp(scaled(s, x[j]) - lse) - (double)(j == t.cls)) / wsum);
    if (threadIdx.x == 0)
        loss[r] = t.w * (lse - scaled(s, x[t.cls]));
}

extern "C" double cuda_cross_entropy(eng_backend *be, tensor_ref *x, float scale, const int64_t *target,
                                     const float *weight, int64_t ignore_index, tensor_ref *dx)
{
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    double wsum = 0.0, total = 0.0; /* Σw in the cpu's order, on the host where the weights are */
    ce_row *rows = (ce_row *)xmalloc((size_t)(n > 0 ? n : 1) * sizeof *rows);
    for (int64_t i = 0; i < n; i++) {
        bool ignored = target[i] == ignore_index;
        rows[i].cls = ignored ? -1 : target[i];
        rows[i].w = ignored ? 0.0 : weight ? weight[target[i]] : 1.0;
        if (!ignored)
            wsum += rows[i].w;
    }
    if (n > 0) {
        const ce_row *dev_rows = (const ce_row *)cuda_scratch_from_host(be, 0, rows, (size_t)n * sizeof *rows);
        double *loss = (double *)cuda_scratch(be, 1, (size_t)(n + 1) * sizeof(double));
        ce_kernel<<<(unsigned)n, THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), dev_rows, c, scale, wsum, cuda_ptr(dx),
                                                                loss);
        CUDA_LAUNCHED();
        sum_doubles(be, loss, n, loss + n);
        total = read_double(be, loss + n);
    }
    free(rows);
    return total / wsum; /* 0/0 = NaN when every row is ignored, as torch */
}

/* ---- BCE with logits -------------------------------------------------------------------------- */

/* BCE with logits of one element, stably: max(x, 0) − x·t + log(1 + e^{−|x|}). */
__device__ static double bce(double x, double t) { return fmax(x, 0.0) - __dmul_rn(x, t) + log1p(exp(-fabs(x))); }

/* Row r's Σ_j bce·inv_j into loss[r] and its gradient (σ(x) − t)·inv_j; target −1 counts nothing.
 * inv_j = 1 / (column j's targets other than −1, at least 1). */
__global__ static void bce_kernel(const float *x, const int64_t *target, const double *inv, int64_t c, float *d,
                                  double *loss)
{
    int64_t r = blockIdx.x;
    x += r * c, target += r * c, d += r * c;
    double total = 0.0;
    BLOCK_STRIDE(j, c)
    {
        if (target[j] == -1) {
            d[j] = 0.0f;
            continue;
        }
        double v = x[j], t = (double)target[j];
        total += bce(v, t) * inv[j];
        d[j] = (float)((1.0 / (1.0 + exp(-v)) - t) * inv[j]);
    }
    total = block_sum(total);
    if (threadIdx.x == 0)
        loss[r] = total;
}

extern "C" double cuda_bce_logits(eng_backend *be, tensor_ref *x, const int64_t *target, tensor_ref *dx)
{
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    if (n == 0 || c == 0)
        return 0.0;
    double *inv = (double *)xmalloc((size_t)c * sizeof *inv);
    for (int64_t j = 0; j < c; j++) {
        int64_t valid = 0;
        for (int64_t i = 0; i < n; i++)
            valid += target[i * c + j] != -1;
        inv[j] = 1.0 / (double)(valid > 1 ? valid : 1);
    }
    const int64_t *dev_target =
        (const int64_t *)cuda_scratch_from_host(be, 0, target, (size_t)(n * c) * sizeof *target);
    const double *dev_inv = (const double *)cuda_scratch_from_host(be, 1, inv, (size_t)c * sizeof *inv);
    free(inv);
    double *loss = (double *)cuda_scratch(be, 2, (size_t)(n + 1) * sizeof(double));
    bce_kernel<<<(unsigned)n, THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), dev_target, dev_inv, c, cuda_ptr(dx), loss);
    CUDA_LAUNCHED();
    sum_doubles(be, loss, n, loss + n);
    return read_double(be, loss + n);
}

/* ---- SwAV: Sinkhorn-Knopp codes --------------------------------------------------------------- */

/* The assignment matrix A (n × K doubles, scratch) is worked in place as the cpu works its
 * copy. The branches the cpu takes on values (a zero column) are taken on the device from a
 * flag in device memory, so the iterations queue without waiting for the host. */

enum { COL_X = 32, COL_Y = 16 }; /* column-sum blocks: 32 adjacent columns (coalesced) × 16 row strides */

/* Row r of A = x/ε (rows of x, then of the queue), and its max into rowmax[r]. */
__global__ static void sk_load_kernel(const float *x, const float *queue, int64_t nx, int64_t k, double epsilon,
                                      double *a, double *rowmax)
{
    int64_t r = blockIdx.x;
    const float *src = r < nx ? x + r * k : queue + (r - nx) * k;
    double m = -INFINITY;
    BLOCK_STRIDE(c, k)
    {
        double v = (double)src[c] / epsilon;
        a[r * k + c] = v;
        m = fmax(m, v);
    }
    m = block_max(m);
    if (threadIdx.x == 0)
        rowmax[r] = m;
}

/* Row r of A = e^{A − top} (VISSL's guard: nothing overflows), its sum into rowsum[r]. */
__global__ static void sk_exp_kernel(double *a, int64_t k, const double *top, double *rowsum)
{
    double *row = a + blockIdx.x * k, t = *top, s = 0.0;
    BLOCK_STRIDE(c, k)
    {
        row[c] = exp(row[c] - t);
        s += row[c];
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        rowsum[blockIdx.x] = s;
}

__global__ static void sk_divide_kernel(double *a, int64_t n, const double *total)
{
    double t = *total;
    GRID_STRIDE(i, n) a[i] /= t;
}

/* u[c] = Σ_r A[r, c] for a group of COL_X columns; skipped when only_if points at 0 (the
 * recount after a zero column that did not happen). */
__global__ static void sk_col_sums_kernel(const double *a, int64_t n, int64_t k, double *u, const double *only_if)
{
    if (only_if && *only_if == 0.0)
        return;
    __shared__ double sh[COL_Y][COL_X + 1];
    int64_t c = blockIdx.x * (int64_t)COL_X + threadIdx.x;
    double s = 0.0;
    if (c < k)
        for (int64_t r = threadIdx.y; r < n; r += COL_Y)
            s += a[r * k + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (unsigned half = COL_Y / 2; half > 0; half /= 2) {
        if (threadIdx.y < half)
            sh[threadIdx.y][threadIdx.x] += sh[threadIdx.y + half][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < k)
        u[c] = sh[0][threadIdx.x];
}

/* *flag = 1 when some column sums to zero (a prototype no sample chose), else 0. */
__global__ static void sk_zero_flag_kernel(const double *u, int64_t k, double *flag)
{
    double z = 0.0;
    BLOCK_STRIDE(c, k) z = u[c] == 0.0 ? 1.0 : z;
    z = block_max(z);
    if (threadIdx.x == 0)
        *flag = z;
}

/* VISSL's answer to a zero column: 1e-12 added everywhere. */
__global__ static void sk_add_if_kernel(double *a, int64_t n, const double *flag)
{
    if (*flag == 0.0)
        return;
    GRID_STRIDE(i, n) a[i] += 1e-12;
}

/* The column sums become the factors (1/K)/u; an infinite one becomes the largest finite one
 * (0 when none is). One block. */
__global__ static void sk_factors_kernel(double *u, int64_t k)
{
    double inv_k = 1.0 / (double)k, top = 0.0;
    BLOCK_STRIDE(c, k)
    {
        u[c] = inv_k / u[c];
        if (isfinite(u[c]))
            top = fmax(top, u[c]);
    }
    top = block_max(top); /* also orders the writes above before the reads below */
    BLOCK_STRIDE(c, k) if (isinf(u[c])) u[c] = top;
}

/* Row r: the column factors applied (A[r, c]·u[c], stored as the cpu stores it), then the
 * row scaled to `to`. */
__global__ static void sk_rows_kernel(double *a, const double *u, int64_t k, double to)
{
    double *row = a + blockIdx.x * k, s = 0.0;
    BLOCK_STRIDE(c, k)
    {
        double v = __dmul_rn(row[c], u[c]);
        row[c] = v;
        s += v;
    }
    s = block_sum(s);
    double f = to / s;
    BLOCK_STRIDE(c, k) row[c] *= f;
}

/* Row r of the codes: A's row divided by its sum, or with `hard` the one-hot of its largest
 * entry (after the division, as on the cpu, so rounding ties break the same way). */
__global__ static void sk_codes_kernel(const double *a, int64_t k, bool hard, float *q)
{
    const double *row = a + blockIdx.x * k;
    float *out = q + blockIdx.x * k;
    double s = 0.0;
    BLOCK_STRIDE(c, k) s += row[c];
    double f = 1.0 / block_sum(s), best_v = -INFINITY;
    int64_t best_i = INT64_MAX;
    BLOCK_STRIDE(c, k)
    {
        double v = row[c] * f;
        if (best_i == INT64_MAX || v > best_v)
            best_v = v, best_i = c;
        if (!hard)
            out[c] = (float)v;
    }
    int64_t best = block_argmax(best_v, best_i);
    if (hard) {
        BLOCK_STRIDE(c, k) out[c] = c == best ? 1.0f : 0.0f;
    }
}

/* v (n doubles on the device) over the ranks: to the host, reduced, back, in stream order.
 * Nothing to do on one rank. (A host round trip of K doubles per iteration: NCCL's in-place
 * device reduction replaces it when that backend's collectives come.) */
static int across_ranks(eng_backend *be, double *v, int64_t n, bool max, const eng_reducer *r)
{
    if (!r)
        return 0;
    double *h = (double *)malloc((size_t)n * sizeof(double));
    if (!h)
        return -1;
    cuda_read_doubles(be, v, h, (int)n);
    int rc = r->reduce(r->ctx, h, (size_t)n, max);
    if (rc == 0) {
        CUDA_CHECK(
            cudaMemcpyAsync(v, h, (size_t)n * sizeof(double), cudaMemcpyHostToDevice, cuda_stream(be)));
        cuda_sync(be); /* h is freed next */
    }
    free(h);
    return rc;
}

/* The column sums u over every rank's rows, after VISSL's zero-column rule (1e-12 added
 * everywhere when some column sums to zero). One rank decides the rule on the device; several
 * read the flag, which every rank computes from the same sums, so all make the same calls. */
static int column_sums(eng_backend *be, double *a, int64_t n, int64_t k, double *u, double *flag,
                       const eng_reducer *r)
{
    cudaStream_t st = cuda_stream(be);
    unsigned col_blocks = (unsigned)((k + COL_X - 1) / COL_X);
    dim3 col_threads(COL_X, COL_Y);
    sk_col_sums_kernel<<<col_blocks, col_threads, 0, st>>>(a, n, k, u, NULL);
    CUDA_LAUNCHED();
    if (across_ranks(be, u, k, false, r) != 0)
        return -1;
    sk_zero_flag_kernel<<<1, THREADS, 0, st>>>(u, k, flag);
    CUDA_LAUNCHED();
    sk_add_if_kernel<<<cuda_blocks(n * k, THREADS), THREADS, 0, st>>>(a, n * k, flag);
    CUDA_LAUNCHED();
    if (r && read_double(be, flag) == 0.0)
        return 0;
    sk_col_sums_kernel<<<col_blocks, col_threads, 0, st>>>(a, n, k, u, flag);
    CUDA_LAUNCHED();
    return across_ranks(be, u, k, false, r);
}

/* One of the `iters` iterations: columns to 1/K (with the zero-column and infinite-factor
 * rules), then rows to 1/N. */
static int sinkhorn_iteration(eng_backend *be, double *a, int64_t n, int64_t k, double *u, double *flag,
                              double samples, const eng_reducer *r)
{
    cudaStream_t st = cuda_stream(be);
    if (column_sums(be, a, n, k, u, flag, r) != 0)
        return -1;
    sk_factors_kernel<<<1, THREADS, 0, st>>>(u, k);
    CUDA_LAUNCHED();
    sk_rows_kernel<<<(unsigned)n, THREADS, 0, st>>>(a, u, k, 1.0 / samples);
    CUDA_LAUNCHED();
    return 0;
}

extern "C" int cuda_sinkhorn(eng_backend *be, tensor_ref *x, tensor_ref *queue, double epsilon, int iters,
                             bool hard, tensor_ref *q, const eng_reducer *across)
{
    int64_t nx = x->shape.dim[0], nq = queue ? queue->shape.dim[0] : 0, n = nx + nq, k = x->shape.dim[1];
    if (nx == 0 || k == 0)
        return 0; /* no codes to write (every rank's batch is the same size: none takes part) */
    cudaStream_t st = cuda_stream(be);
    double *a = (double *)cuda_scratch(be, 0, (size_t)(n * k) * sizeof(double));
    double *u = (double *)cuda_scratch(be, 1, (size_t)k * sizeof(double));
    double *rows = (double *)cuda_scratch(be, 2, (size_t)n * sizeof(double));
    double *scalars = (double *)cuda_scratch(be, 3, 3 * sizeof(double));
    double *top = scalars, *total = scalars + 1, *flag = scalars + 2;
    double samples = (double)n * (across ? across->world : 1); /* VISSL's N: every rank's rows */

    sk_load_kernel<<<(unsigned)n, THREADS, 0, st>>>(cuda_ptr(x), queue ? cuda_ptr(queue) : NULL, nx, k, epsilon, a,
                                                     rows);
    CUDA_LAUNCHED();
    max_kernel<<<1, THREADS, 0, st>>>(rows, n, top);
    CUDA_LAUNCHED();
    if (across_ranks(be, top, 1, true, across) != 0)
        return -1;
    sk_exp_kernel<<<(unsigned)n, THREADS, 0, st>>>(a, k, top, rows);
    CUDA_LAUNCHED();
    sum_doubles(be, rows, n, total);
    if (across_ranks(be, total, 1, false, across) != 0)
        return -1;
    sk_divide_kernel<<<cuda_blocks(n * k, THREADS), THREADS, 0, st>>>(a, n * k, total);
    CUDA_LAUNCHED();
    for (int it = 0; it < iters; it++)
        if (sinkhorn_iteration(be, a, n, k, u, flag, samples, across) != 0)
            return -1;
    sk_codes_kernel<<<(unsigned)nx, THREADS, 0, st>>>(a, k, hard, cuda_ptr(q));
    CUDA_LAUNCHED();
    return 0;
}

/* ---- SwAV: cross-entropy against soft targets --------------------------------------------------- */

/* Row r's Σ_j q_j·(lse − s·x_j) into loss[r], and dx_j += g·s·(softmax_j·Σq − q_j). */
__global__ static void soft_ce_kernel(const float *x, const float *q, int64_t c, double s, double g, float *d,
                                      double *loss)
{
    int64_t r = blockIdx.x;
    x += r * c, q += r * c, d += r * c;
    double lse = row_log_sum_exp(x, c, s), total = 0.0, tsum = 0.0;
    BLOCK_STRIDE(j, c)
    {
        total += __dmul_rn((double)q[j], lse - scaled(s, x[j]));
        tsum += q[j];
    }
    total = block_sum(total);
    tsum = block_sum(tsum);
    BLOCK_STRIDE(j, c) d[j] += (float)(g * s * (__dmul_rn(exp(scaled(s, x[j]) - lse), tsum) - (double)q[j]));
    if (threadIdx.x == 0)
        loss[r] = total;
}

extern "C" double cuda_soft_cross_entropy(eng_backend *be, tensor_ref *x, float scale, tensor_ref *q,
                                          double g, tensor_ref *dx)
{
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    if (n == 0)
        return 0.0;
    double *loss = (double *)cuda_scratch(be, 0, (size_t)(n + 1) * sizeof(double));
    soft_ce_kernel<<<(unsigned)n, THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), cuda_ptr(q), c, scale, g, cuda_ptr(dx),
                                                                 loss);
    CUDA_LAUNCHED();
    sum_doubles(be, loss, n, loss + n);
    return read_double(be, loss + n);
}

/* ---- the largest column of each row (k-means' E-step) ----------------------------------------- */

__global__ static void argmax_rows_kernel(const float *x, int64_t c, int64_t *out)
{
    const float *row = x + blockIdx.x * c;
    double best_v = -INFINITY;
    int64_t best_i = INT64_MAX;
    BLOCK_STRIDE(j, c)
    {
        if (best_i == INT64_MAX || (double)row[j] > best_v)
            best_v = row[j], best_i = j;
    }
    int64_t best = block_argmax(best_v, best_i);
    if (threadIdx.x == 0)
        out[blockIdx.x] = best;
}

extern "C" void cuda_argmax_rows(eng_backend *be, tensor_ref *x, int64_t *out)
{
    int64_t n = x->shape.dim[0], c = x->shape.dim[1];
    if (n == 0)
        return;
    int64_t *dev = (int64_t *)cuda_scratch(be, 0, (size_t)n * sizeof *dev);
    argmax_rows_kernel<<<(unsigned)n, THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), c, dev);
    CUDA_LAUNCHED();
    CUDA_CHECK(cudaMemcpyAsync(out, dev, (size_t)n * sizeof *out, cudaMemcpyDeviceToHost, cuda_stream(be)));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
}

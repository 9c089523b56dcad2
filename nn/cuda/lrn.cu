/*
 * lrn.cu — the cuda backend's local response normalisation across channels (PyTorch's
 * LocalResponseNorm, AlexNet's), on our own kernels.
 *
 * Tensors are NCHW (cuda.h), so the channels of one position are H·W floats apart and
 * consecutive threads take consecutive positions of a plane: every load is coalesced. The scale
 * term of element (n, c) is PyTorch's, operation for operation in float:
 *   s = (Σ_{c'} x[c']²) / size · α + k,  c' from c − ⌊size/2⌋ to c + ⌊(size−1)/2⌋ within [0, C),
 * its squares summed from the lowest channel up, and y = x / s^β. The cpu backend (oneDNN)
 * computes α/size·Σ in its own order, so the two differ by float rounding only.
 *
 * Backward, recomputed from x (nn.h):
 *   dx[c] += dy[c]·s[c]^(−β) − (2αβ/size)·x[c]·Σ_{c': c in the window of c'} t[c'],
 *   t = dy·x·s^(−β)/s,
 * in two passes: the first writes t (one thread per element, its own window sum) into scratch
 * slot 0, the second recomputes s and gathers the t of the windows that hold its channel. Each
 * element is one thread's and every sum runs in channel order, so a run repeats exactly.
 *
 * Why not cuDNN's cudnnLRNCrossChannelForward/Backward: its backward takes y as well as x, which
 * nn.h's interface does not keep (it would be recomputed into scratch anyway), its window size is
 * limited to 1..16 and its float order is its own; two short kernels keep PyTorch's arithmetic
 * and any window, and accumulate into dx in the same pass.
 */
#include "cuda.h"

/* Everything but the extern "C" entry points stays inside this file. */
namespace {

enum { THREADS = 256 };

/* The layer's geometry and constants, as floats where PyTorch's float operations take them. */
typedef struct {
    int64_t c, hw;    /* channels, positions per channel plane */
    int64_t below;    /* the window: channels c − below … c + above */
    int64_t above;
    float size, alpha, beta, k;
} lrn_geom;

__device__ static int64_t at_least(int64_t v, int64_t lo) { return v < lo ? lo : v; }
__device__ static int64_t at_most(int64_t v, int64_t hi) { return v > hi ? hi : v; }

/* s of element i (channel c): the squares of its window summed from the lowest channel,
 * divided by size, times α, plus k. */
__device__ static float scale_at(const lrn_geom &g, const float *x, int64_t i, int64_t c)
{
    int64_t lo = at_least(c - g.below, 0), hi = at_most(c + g.above, g.c - 1);
    float sum = 0.0f;
    for (int64_t j = lo; j <= hi; j++) {
        float v = x[i + (j - c) * g.hw];
        sum = __fadd_rn(sum, __fmul_rn(v, v));
    }
    return __fadd_rn(__fmul_rn(__fdiv_rn(sum, g.size), g.alpha), g.k);
}

__device__ static int64_t channel_of(const lrn_geom &g, int64_t i) { return (i / g.hw) % g.c; }

__global__ static void lrn_kernel(lrn_geom g, int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n) y[i] = __fdiv_rn(x[i], powf(scale_at(g, x, i, channel_of(g, i)), g.beta));
}

/* t = dy·x·s^(−β)/s, the share of element i's window in its neighbours' gradients. */
__global__ static void lrn_terms_kernel(lrn_geom g, int64_t n, const float *x, const float *dy, float *t)
{
    GRID_STRIDE(i, n)
    {
        float s = scale_at(g, x, i, channel_of(g, i));
        t[i] = __fdiv_rn(__fmul_rn(__fmul_rn(dy[i], x[i]), powf(s, -g.beta)), s);
    }
}

/* dx += dy·s^(−β) − coef·x·Σ t over the channels c' whose window holds c: c' − below ≤ c ≤
 * c' + above, that is c − above ≤ c' ≤ c + below. */
__global__ static void lrn_grad_kernel(lrn_geom g, float coef, int64_t n, const float *x, const float *dy,
                                       const float *t, float *dx)
{
    GRID_STRIDE(i, n)
    {
        int64_t c = channel_of(g, i), lo = at_least(c - g.above, 0), hi = at_most(c + g.below, g.c - 1);
        float sum = 0.0f;
        for (int64_t j = lo; j <= hi; j++)
            sum = __fadd_rn(sum, t[i + (j - c) * g.hw]);
        float own = __fmul_rn(dy[i], powf(scale_at(g, x, i, c), -g.beta));
        dx[i] = __fadd_rn(dx[i], __fsub_rn(own, __fmul_rn(__fmul_rn(coef, x[i]), sum)));
    }
}

static lrn_geom geom_of(const eng_lrn_desc *d, tensor_ref *x)
{
    lrn_geom g;
    g.c = x->shape.dim[1];
    g.hw = x->shape.dim[2] * x->shape.dim[3];
    g.below = d->size / 2;
    g.above = (d->size - 1) / 2;
    g.size = (float)d->size;
    g.alpha = (float)d->alpha;
    g.beta = (float)d->beta;
    g.k = (float)d->k;
    return g;
}

} // namespace

extern "C" void cuda_lrn_forward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *y)
{
    int64_t n = eng_numel(&x->shape);
    if (n == 0)
        return;
    lrn_geom g = geom_of(d, x);
    lrn_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(g, n, cuda_ptr(x), cuda_ptr(y));
    CUDA_LAUNCHED();
}

extern "C" void cuda_lrn_backward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *dy,
                                  tensor_ref *dx)
{
    int64_t n = eng_numel(&x->shape);
    if (n == 0)
        return;
    lrn_geom g = geom_of(d, x);
    float coef = (float)(2.0 * d->alpha * d->beta / (double)d->size);
    float *t = (float *)cuda_scratch(be, 0, (size_t)n * sizeof(float));
    cudaStream_t st = cuda_stream(be);
    lrn_terms_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, st>>>(g, n, cuda_ptr(x), cuda_ptr(dy), t);
    CUDA_LAUNCHED();
    lrn_grad_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, st>>>(g, coef, n, cuda_ptr(x), cuda_ptr(dy), t,
                                                                 cuda_ptr(dx));
    CUDA_LAUNCHED();
}

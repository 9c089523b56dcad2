/*
 * eltwise.cu — the cuda backend's elementwise layers: ReLU, sigmoid, SiLU, the residual add
 * (optionally fused with the ReLU ending a ResNet block), squeeze-and-excitation's per-channel
 * product, L2-normalise, dropout, and the bias and padding helpers the matrix products and
 * convolutions use (an asymmetric padding's copy of x with its extra zeros, and the crop of its
 * gradient back into dx: dnn.c).
 *
 * Each element is one thread's (grid-stride loops), so results do not depend on the launch
 * shape, and they equal the cpu backend's: the same float operations in the same order
 * (written with __f*_rn so nvcc fuses no multiply-add the cpu does not). Sigmoid and SiLU
 * differ from the cpu only by expf (CUDA's and glibc's are each within 2 ulp), the formulas
 * being PyTorch's: 1 / (1 + e^{−x}), x / (1 + e^{−x}), backward dy·(1 − y)·y and
 * dy·s·(1 + x·(1 − s)); an infinite e^{−x} gives 0, not NaN.
 * ReLU is written x < 0 ? 0 : x so a NaN passes through, as in PyTorch and on the cpu.
 * Row reductions (L2 norms, bias and channel-scale gradients) sum in double in a fixed order:
 * one block per output, each thread striding over it, then a fixed tree in shared memory.
 *
 * Dropout's mask is the cpu's: Philox4x32-10 keyed by the backend's seed with the counter
 * (i / 4, RNG_PURPOSE_TRAIN << 16, step), a 24-bit uniform against p. So a run keeps the same
 * elements on either backend, and backward recomputes the mask instead of storing it.
 */
#include "cuda.h"
#include "elem.cuh"
#include "../../lib/rng.h"

#include <string.h>

enum { THREADS = 256, REDUCE_THREADS = 256 };

/* Sum of one value per thread of the block, in a fixed tree; the result in thread 0. */
__device__ static double block_sum(double v, double *shared)
{
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    double total = shared[0];
    __syncthreads(); /* the caller may reuse `shared` */
    return total;
}

/* ---- ReLU, add -------------------------------------------------------------------------------- */
/* Their operands share one layout (nn.c), so one stored type T: bf16 where they are NATIVE
 * under mixed precision (elem.cuh), fp32 otherwise. */

template <class T> __global__ static void relu_kernel(const T *x, T *y, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = to_float(x[i]);
        store(&y[i], v < 0.0f ? 0.0f : v);
    }
}

/* dx += dy·[y > 0] */
template <class T> __global__ static void relu_grad_kernel(const T *y, const T *dy, T *dx, int64_t n)
{
    GRID_STRIDE(i, n) store(&dx[i], to_float(dx[i]) + (to_float(y[i]) > 0.0f ? to_float(dy[i]) : 0.0f));
}

template <class T> __global__ static void add_kernel(const T *a, const T *b, T *y, int64_t n, bool relu)
{
    GRID_STRIDE(i, n)
    {
        float v = __fadd_rn(to_float(a[i]), to_float(b[i]));
        store(&y[i], relu && v < 0.0f ? 0.0f : v);
    }
}

/* da += g and db += g, g = dy or dy·[y > 0]; da or db may be NULL. */
template <class T> __global__ static void add_grad_kernel(const T *y, const T *dy, T *da, T *db, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float g = !y || to_float(y[i]) > 0.0f ? to_float(dy[i]) : 0.0f;
        if (da)
            store(&da[i], to_float(da[i]) + g);
        if (db)
            store(&db[i], to_float(db[i]) + g);
    }
}

/* A tensor's elements as stored (T), or NULL for a NULL tensor. */
template <class T> static T *elems(tensor_ref *t) { return t ? (T *)(void *)cuda_ptr(t) : NULL; }

template <class T> static void relu_forward_as(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    int64_t n = eng_numel(&x->shape);
    relu_kernel<T><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(elems<T>(x), elems<T>(y), n);
    CUDA_LAUNCHED();
}

template <class T> static void relu_backward_as(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx)
{
    int64_t n = eng_numel(&y->shape);
    relu_grad_kernel<T><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(elems<T>(y), elems<T>(dy),
                                                                                   elems<T>(dx), n);
    CUDA_LAUNCHED();
}

template <class T> static void add_forward_as(eng_backend *be, tensor_ref *a, tensor_ref *b, bool relu, tensor_ref *y)
{
    int64_t n = eng_numel(&a->shape);
    add_kernel<T><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(elems<T>(a), elems<T>(b), elems<T>(y),
                                                                             n, relu);
    CUDA_LAUNCHED();
}

template <class T>
static void add_backward_as(eng_backend *be, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *da, tensor_ref *db)
{
    int64_t n = eng_numel(&dy->shape);
    add_grad_kernel<T><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(
        elems<T>(relu_y), elems<T>(dy), elems<T>(da), elems<T>(db), n);
    CUDA_LAUNCHED();
}

extern "C" void cuda_relu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    if (cuda_native_bf16(be, x))
        relu_forward_as<bf16>(be, x, y);
    else
        relu_forward_as<float>(be, x, y);
}

extern "C" void cuda_relu_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx)
{
    if (cuda_native_bf16(be, y))
        relu_backward_as<bf16>(be, y, dy, dx);
    else
        relu_backward_as<float>(be, y, dy, dx);
}

extern "C" void cuda_add_forward(eng_backend *be, tensor_ref *a, tensor_ref *b, bool relu, tensor_ref *y)
{
    if (cuda_native_bf16(be, a))
        add_forward_as<bf16>(be, a, b, relu, y);
    else
        add_forward_as<float>(be, a, b, relu, y);
}

extern "C" void cuda_add_backward(eng_backend *be, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *da,
                                  tensor_ref *db)
{
    if (!da && !db)
        return;
    if (cuda_native_bf16(be, dy))
        add_backward_as<bf16>(be, relu_y, dy, da, db);
    else
        add_backward_as<float>(be, relu_y, dy, da, db);
}

/* ---- sigmoid, SiLU ------------------------------------------------------------------------------- */

/* 1 / (1 + e^{−x}) in float, as torch.sigmoid and the cpu. */
__device__ static float sigmoid_of(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

__global__ static void sigmoid_kernel(const float *x, float *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = sigmoid_of(x[i]);
}

/* dx += dy·(1 − y)·y */
__global__ static void sigmoid_grad_kernel(const float *y, const float *dy, float *dx, int64_t n)
{
    GRID_STRIDE(i, n) dx[i] = __fadd_rn(dx[i], __fmul_rn(__fmul_rn(dy[i], __fsub_rn(1.0f, y[i])), y[i]));
}

__global__ static void silu_kernel(const float *x, float *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = __fdiv_rn(x[i], __fadd_rn(1.0f, expf(-x[i])));
}

/* dx += dy·s·(1 + x·(1 − s)), s = sigmoid(x) */
__global__ static void silu_grad_kernel(const float *x, const float *dy, float *dx, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float s = sigmoid_of(x[i]);
        float g = __fmul_rn(__fmul_rn(dy[i], s), __fadd_rn(1.0f, __fmul_rn(x[i], __fsub_rn(1.0f, s))));
        dx[i] = __fadd_rn(dx[i], g);
    }
}

extern "C" void cuda_sigmoid_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    int64_t n = eng_numel(&x->shape);
    sigmoid_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), cuda_ptr(y), n);
    CUDA_LAUNCHED();
}

extern "C" void cuda_sigmoid_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx)
{
    int64_t n = eng_numel(&y->shape);
    sigmoid_grad_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(cuda_ptr(y), cuda_ptr(dy),
                                                                                   cuda_ptr(dx), n);
    CUDA_LAUNCHED();
}

extern "C" void cuda_silu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    int64_t n = eng_numel(&x->shape);
    silu_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), cuda_ptr(y), n);
    CUDA_LAUNCHED();
}

extern "C" void cuda_silu_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    int64_t n = eng_numel(&x->shape);
    silu_grad_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), cuda_ptr(dy),
                                                                                cuda_ptr(dx), n);
    CUDA_LAUNCHED();
}

/* ---- the per-channel product (squeeze-and-excitation) ------------------------------------------- */

/* y = x·s[plane] over planes of hw values (NCHW). */
__global__ static void channel_scale_kernel(const float *x, const float *s, float *y, int64_t n, int64_t hw)
{
    GRID_STRIDE(i, n) y[i] = __fmul_rn(x[i], s[i / hw]);
}

/* The same on NATIVE bf16 tensors: element i of an N×H×W×C map is channel i % C of sample
 * i / (hw·C), whose factor is s[sample·C + channel]. */
__global__ static void channel_scale_nhwc_kernel(const bf16 *x, const float *s, bf16 *y, int64_t n, int64_t hw,
                                                 int64_t c)
{
    GRID_STRIDE(i, n) store(&y[i], __fmul_rn(to_float(x[i]), s[i / (hw * c) * c + i % c]));
}

/* One block per plane p: dx += dy·s[p] and ds[p] += Σ dy·x, in double in a fixed tree, rounded
 * once (as the cpu); dx or ds may be NULL. */
__global__ static void channel_scale_grad_kernel(const float *x, const float *s, const float *dy, float *dx,
                                                 float *ds, int64_t hw)
{
    __shared__ double shared[REDUCE_THREADS];
    int64_t at = (int64_t)blockIdx.x * hw;
    float sp = s[blockIdx.x];
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) {
        if (dx)
            dx[at + i] = __fadd_rn(dx[at + i], __fmul_rn(dy[at + i], sp));
        if (ds)
            sum += (double)dy[at + i] * x[at + i];
    }
    if (!ds)
        return; /* the same for the whole block: no thread waits in block_sum alone */
    double total = block_sum(sum, shared);
    if (threadIdx.x == 0)
        ds[blockIdx.x] += (float)total;
}

extern "C" void cuda_channel_scale_forward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *y)
{
    int64_t n = eng_numel(&x->shape), hw = x->shape.dim[2] * x->shape.dim[3];
    if (cuda_native_bf16(be, x))
        channel_scale_nhwc_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(
            cuda_bf16_ptr(x), cuda_ptr(s), cuda_bf16_ptr(y), n, hw, x->shape.dim[1]);
    else
        channel_scale_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), cuda_ptr(s),
                                                                                        cuda_ptr(y), n, hw);
    CUDA_LAUNCHED();
}

extern "C" void cuda_channel_scale_backward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *dy,
                                            tensor_ref *dx, tensor_ref *ds)
{
    int64_t planes = x->shape.dim[0] * x->shape.dim[1], hw = x->shape.dim[2] * x->shape.dim[3];
    if (planes == 0)
        return;
    /* a power of two (block_sum's tree), no wider than a small plane needs (SE at 7×7) */
    unsigned threads = 32;
    while (threads < hw && threads < REDUCE_THREADS)
        threads *= 2;
    channel_scale_grad_kernel<<<(unsigned)planes, threads, 0, cuda_stream(be)>>>(
        cuda_ptr(x), cuda_ptr(s), cuda_ptr(dy), dx ? cuda_ptr(dx) : NULL, ds ? cuda_ptr(ds) : NULL, hw);
    CUDA_LAUNCHED();
}

/* ---- L2-normalise rows (F.normalize(x, dim=1, eps=1e-12)) ----------------------------------------- */

#define L2_EPS 1e-12

/* One block per row: y = x / max(‖x‖, eps), the norm summed in double. */
__global__ static void l2norm_kernel(const float *x, float *y, int64_t f)
{
    __shared__ double shared[REDUCE_THREADS];
    const float *in = x + blockIdx.x * f;
    float *out = y + blockIdx.x * f;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x)
        s += (double)in[i] * in[i];
    double norm = sqrt(block_sum(s, shared)), denom = norm > L2_EPS ? norm : L2_EPS;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x)
        out[i] = (float)(in[i] / denom);
}

/* dx += (dy − y·(y·dy)) / ‖x‖, or dy / eps for a row whose norm is below eps (nn/cpu/l2norm.c). */
__global__ static void l2norm_grad_kernel(const float *x, const float *dy, float *dx, int64_t f)
{
    __shared__ double shared[REDUCE_THREADS];
    const float *in = x + blockIdx.x * f, *g = dy + blockIdx.x * f;
    float *out = dx + blockIdx.x * f;
    double s = 0.0, d = 0.0;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x) {
        s += (double)in[i] * in[i];
        d += (double)in[i] * g[i];
    }
    double norm = sqrt(block_sum(s, shared)), dot = block_sum(d, shared) / norm;
    for (int64_t i = threadIdx.x; i < f; i += blockDim.x)
        out[i] += norm <= L2_EPS ? (float)(g[i] / L2_EPS) : (float)((g[i] - in[i] / norm * dot) / norm);
}

extern "C" void cuda_l2norm_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    unsigned rows = (unsigned)x->shape.dim[0];
    l2norm_kernel<<<rows, REDUCE_THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), cuda_ptr(y), x->shape.dim[1]);
    CUDA_LAUNCHED();
}

extern "C" void cuda_l2norm_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    unsigned rows = (unsigned)x->shape.dim[0];
    l2norm_grad_kernel<<<rows, REDUCE_THREADS, 0, cuda_stream(be)>>>(cuda_ptr(x), cuda_ptr(dy), cuda_ptr(dx),
                                                                      x->shape.dim[1]);
    CUDA_LAUNCHED();
}

/* ---- dropout ----------------------------------------------------------------------------------------- */

__device__ static void philox_device(uint32_t x[4], uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint32_t lo0 = 0xD2511F53u * x[0], hi0 = __umulhi(0xD2511F53u, x[0]);
        uint32_t lo1 = 0xCD9E8D57u * x[2], hi1 = __umulhi(0xCD9E8D57u, x[2]);
        uint32_t y0 = hi1 ^ x[1] ^ k0, y2 = hi0 ^ x[3] ^ k1;
        x[0] = y0;
        x[1] = lo1;
        x[2] = y2;
        x[3] = lo0;
    }
}

/* 1 when element i is kept at this step (nn/cpu/dropout.c's keep_block, one element of it). */
__device__ static bool dropout_keeps(uint64_t seed, uint64_t step, int64_t i, float p)
{
    uint64_t block = (uint64_t)i / 4;
    uint32_t x[4] = {(uint32_t)block, (uint32_t)(block >> 32) | (uint32_t)RNG_PURPOSE_TRAIN << 16, (uint32_t)step,
                     (uint32_t)(step >> 32)};
    philox_device(x, (uint32_t)seed, (uint32_t)(seed >> 32));
    return (float)(x[i % 4] >> 8) * (1.0f / 16777216.0f) >= p;
}

/* out (+)= in·mask/(1−p); the same float products as the cpu: in·keep, then ·scale. */
__global__ static void dropout_kernel(const float *in, float *out, int64_t n, float p, float scale, uint64_t seed,
                                      uint64_t step, bool accumulate)
{
    GRID_STRIDE(i, n)
    {
        float v = p > 0.0f ? __fmul_rn(__fmul_rn(in[i], dropout_keeps(seed, step, i, p) ? 1.0f : 0.0f), scale)
                           : in[i];
        out[i] = accumulate ? __fadd_rn(out[i], v) : v;
    }
}

static void dropout(eng_backend *be, float p, uint64_t step, tensor_ref *src, tensor_ref *dst,
                    bool accumulate)
{
    int64_t n = eng_numel(&src->shape);
    float scale = 1.0f / (1.0f - p);
    dropout_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(
        cuda_ptr(src), cuda_ptr(dst), n, p, scale, be->opt.seed, step, accumulate);
    CUDA_LAUNCHED();
}

extern "C" void cuda_dropout_forward(eng_backend *be, float p, uint64_t step, tensor_ref *x, tensor_ref *y)
{
    dropout(be, p, step, x, y, false);
}

extern "C" void cuda_dropout_backward(eng_backend *be, float p, uint64_t step, tensor_ref *dy, tensor_ref *dx)
{
    dropout(be, p, step, dy, dx, true);
}

/* ---- images from the host ------------------------------------------------------------------------- */

/* The per-channel tables and source channels travel as the kernel's argument (3 KB). */
typedef struct {
    float lut[3][256];
    int map[3];
} image_tables;

__global__ static void images_kernel(const uint8_t *src, float *x, int64_t c, int64_t hw, int src_c, int64_t total,
                                     image_tables t)
{
    GRID_STRIDE(i, total)
    {
        int64_t n = i / (c * hw), ch = (i / hw) % c, s = i % hw;
        x[i] = t.lut[ch][src[(n * hw + s) * src_c + t.map[ch]]];
    }
}

extern "C" void cuda_upload_images(eng_backend *be, tensor_ref *x, const uint8_t *src, int src_c,
                                   const int *map, const float *lut)
{
    cuda_impl *ci = cuda_of(be);
    int64_t n = x->shape.dim[0], c = x->shape.dim[1], hw = x->shape.dim[2] * x->shape.dim[3], total = n * c * hw;
    size_t bytes = (size_t)(n * hw * src_c);
    uint8_t *dev = (uint8_t *)cuda_input_buffer(be, bytes);
    CUDA_CHECK(cudaStreamWaitEvent(ci->copy_stream, ci->input_consumed, 0));
    CUDA_CHECK(cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, ci->copy_stream));
    CUDA_CHECK(cudaEventRecord(ci->input_copied, ci->copy_stream));
    CUDA_CHECK(cudaStreamWaitEvent(ci->stream, ci->input_copied, 0));
    CUDA_CHECK(cudaEventSynchronize(ci->input_copied)); /* the caller may reuse src now */
    image_tables t = {};
    for (int64_t k = 0; k < c; k++) {
        memcpy(t.lut[k], lut + k * 256, sizeof t.lut[k]);
        t.map[k] = map[k];
    }
    images_kernel<<<cuda_blocks(total, THREADS), THREADS, 0, cuda_stream(be)>>>(dev, cuda_ptr(x), c, hw, src_c, total,
                                                                                 t);
    CUDA_LAUNCHED();
    CUDA_CHECK(cudaEventRecord(ci->input_consumed, ci->stream));
}

/* ---- bias ------------------------------------------------------------------------------------------- */

/* One block per channel c: db[c] += Σ_{n,s} dy[n, c, s], in double, rounded once (as the cpu). */
__global__ static void bias_grad_kernel(const float *dy, int64_t n, int64_t c, int64_t s, float *db)
{
    __shared__ double shared[REDUCE_THREADS];
    int64_t ch = blockIdx.x, count = n * s;
    double sum = 0.0;
    for (int64_t k = threadIdx.x; k < count; k += blockDim.x)
        sum += dy[((k / s) * c + ch) * s + k % s];
    double total = block_sum(sum, shared);
    if (threadIdx.x == 0)
        db[ch] += (float)total;
}

__global__ static void bias_add_kernel(float *y, const float *b, int64_t total, int64_t c, int64_t s)
{
    GRID_STRIDE(i, total) y[i] = __fadd_rn(y[i], b[(i / s) % c]);
}

extern "C" void cuda_bias_grad(eng_backend *be, const float *dy, int64_t n, int64_t c, int64_t s, float *db)
{
    bias_grad_kernel<<<(unsigned)c, REDUCE_THREADS, 0, cuda_stream(be)>>>(dy, n, c, s, db);
    CUDA_LAUNCHED();
}

extern "C" void cuda_bias_add(eng_backend *be, float *y, const float *b, int64_t n, int64_t c, int64_t s)
{
    int64_t total = n * c * s;
    bias_add_kernel<<<cuda_blocks(total, THREADS), THREADS, 0, cuda_stream(be)>>>(y, b, total, c, s);
    CUDA_LAUNCHED();
}

/* ---- asymmetric padding (dnn.c) ------------------------------------------------------------------- */

/* One thread per element of the padded planes (h + eh rows of w + ew): x's value, or 0 in the
 * extra rows and columns. */
__global__ static void pad_kernel(const float *x, float *xp, int64_t total, int64_t h, int64_t w, int64_t eh,
                                  int64_t ew)
{
    int64_t pw = w + ew, ph = h + eh;
    GRID_STRIDE(i, total)
    {
        int64_t col = i % pw, row = (i / pw) % ph, plane = i / (pw * ph);
        xp[i] = row < h && col < w ? x[(plane * h + row) * w + col] : 0.0f;
    }
}

/* One thread per element of dx: dx += the same row and column of the padded gradient. */
__global__ static void crop_add_kernel(const float *dxp, float *dx, int64_t total, int64_t h, int64_t w, int64_t eh,
                                       int64_t ew)
{
    GRID_STRIDE(i, total)
    {
        int64_t col = i % w, row = (i / w) % h, plane = i / (w * h);
        dx[i] = __fadd_rn(dx[i], dxp[(plane * (h + eh) + row) * (w + ew) + col]);
    }
}

extern "C" void cuda_pad_bottom_right(eng_backend *be, const float *x, float *xp, int64_t planes, int64_t h,
                                      int64_t w, int64_t eh, int64_t ew)
{
    int64_t total = planes * (h + eh) * (w + ew);
    pad_kernel<<<cuda_blocks(total, THREADS), THREADS, 0, cuda_stream(be)>>>(x, xp, total, h, w, eh, ew);
    CUDA_LAUNCHED();
}

extern "C" void cuda_crop_add(eng_backend *be, const float *dxp, float *dx, int64_t planes, int64_t h, int64_t w,
                              int64_t eh, int64_t ew)
{
    int64_t total = planes * h * w;
    crop_add_kernel<<<cuda_blocks(total, THREADS), THREADS, 0, cuda_stream(be)>>>(dxp, dx, total, h, w, eh, ew);
    CUDA_LAUNCHED();
}

/* ---- scale ------------------------------------------------------------------------------------- */

__global__ static void scale_kernel(float alpha, float *x, int64_t n)
{
    GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], alpha);
}

extern "C" void cuda_scale(eng_backend *be, float alpha, tensor_ref *x)
{
    int64_t n = eng_numel(&x->shape);
    scale_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(alpha, cuda_ptr(x), n);
    CUDA_LAUNCHED();
}

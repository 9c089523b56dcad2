/*
 * eltwise.c — the cpu backend's elementwise layers: ReLU, sigmoid, SiLU, the residual add
 * (optionally fused with the ReLU that ends a ResNet block) and squeeze-and-excitation's
 * per-channel product.
 *
 * ReLU's backward reads the output, not the input (PyTorch's in-place ReLU does the same),
 * so the input's memory may be reused once the forward is done. max(x, 0) is written
 * x < 0 ? 0 : x so that a NaN passes through, as it does in PyTorch (the trainer's NaN check
 * must see it).
 *
 * Sigmoid and SiLU are PyTorch's cpu formulas in float, operation for operation:
 * 1 / (1 + e^{−x}) and x / (1 + e^{−x}); backward dy·(1 − y)·y from sigmoid's output and
 * dy·s·(1 + x·(1 − s)) from SiLU's input. A large −x makes e^{−x} infinite: the sigmoid is
 * then 0 and the SiLU −0, never NaN. The channel product's ds sums each plane's dy·x in
 * double, one plane per thread, so it does not depend on the thread count either. The channel
 * product's forward also reads and writes channel-blocked tensors (an evaluation trunk's native
 * layout, cpu_blocking), one multiplication per element as in the logical layout.
 *
 * Every loop is split over the OpenMP threads (each element is one thread's, so the result
 * does not depend on their number) when the tensor is big enough to pay for waking them, and
 * is SIMD (CPU_HOT).
 */
#include "cpu.h"

#include <math.h>

/* Below this many elements one thread is faster than waking the others. */
#define PARALLEL_MIN 32768

CPU_HOT static void relu_rows(const float *in, float *out, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i] < 0.0f ? 0.0f : in[i];
}

/* dx += dy · [y > 0] */
CPU_HOT static void relu_grad_rows(const float *y, const float *g, float *gx, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        gx[i] += y[i] > 0.0f ? g[i] : 0.0f;
}

/* 1 / (1 + e^{−x}), in float as torch.sigmoid's cpu kernel. */
static inline float sigmoid_of(float x) { return 1.0f / (1.0f + expf(-x)); }

CPU_HOT static void sigmoid_rows(const float *in, float *out, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = sigmoid_of(in[i]);
}

/* dx += dy·(1 − y)·y (torch's sigmoid_backward, in its order) */
CPU_HOT static void sigmoid_grad_rows(const float *y, const float *g, float *gx, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        gx[i] += g[i] * (1.0f - y[i]) * y[i];
}

CPU_HOT static void silu_rows(const float *in, float *out, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i] / (1.0f + expf(-in[i]));
}

/* dx += dy·s·(1 + x·(1 − s)), s = sigmoid(x) (torch's silu_backward, in its order) */
CPU_HOT static void silu_grad_rows(const float *x, const float *g, float *gx, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float s = sigmoid_of(x[i]);
        gx[i] += g[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

CPU_HOT static void add_rows(const float *a, const float *b, float *out, int64_t n, bool relu)
{
    if (relu) {
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++) {
            float v = a[i] + b[i];
            out[i] = v < 0.0f ? 0.0f : v;
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] + b[i];
    }
}

/* d += g, where g is dy or, with the fused ReLU's output y, dy · [y > 0]. */
CPU_HOT static void add_grad_rows(const float *y, const float *g, float *d, int64_t n)
{
    if (y) {
        relu_grad_rows(y, g, d, n);
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        d[i] += g[i];
}

/* The same into two gradients in one pass (a block's two branches). */
CPU_HOT static void add_grad_rows2(const float *y, const float *g, float *da, float *db, int64_t n)
{
    if (y) {
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++) {
            float v = y[i] > 0.0f ? g[i] : 0.0f;
            da[i] += v;
            db[i] += v;
        }
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        da[i] += g[i];
        db[i] += g[i];
    }
}

void cpu_relu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    relu_rows(cpu_ptr(x), cpu_ptr(y), eng_numel(&x->shape));
}

void cpu_relu_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    relu_grad_rows(cpu_ptr(y), cpu_ptr(dy), cpu_ptr(dx), eng_numel(&y->shape));
}

void cpu_sigmoid_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    sigmoid_rows(cpu_ptr(x), cpu_ptr(y), eng_numel(&x->shape));
}

void cpu_sigmoid_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    sigmoid_grad_rows(cpu_ptr(y), cpu_ptr(dy), cpu_ptr(dx), eng_numel(&y->shape));
}

void cpu_silu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    silu_rows(cpu_ptr(x), cpu_ptr(y), eng_numel(&x->shape));
}

void cpu_silu_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    silu_grad_rows(cpu_ptr(x), cpu_ptr(dy), cpu_ptr(dx), eng_numel(&x->shape));
}

/* ---- the per-channel product (squeeze-and-excitation) ---------------------------------------- */

/* y[p·hw + i] = x[p·hw + i]·s[p] over `planes` planes of hw values. */
CPU_HOT static void channel_scale_rows(const float *x, const float *s, float *y, int64_t planes, int64_t hw)
{
#pragma omp parallel for schedule(static) if (planes * hw >= PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *in = x + p * hw, sp = s[p];
        float *out = y + p * hw;
#pragma omp simd
        for (int64_t i = 0; i < hw; i++)
            out[i] = in[i] * sp;
    }
}

/* dx += dy·s[p] and ds[p] += Σ dy·x (in double) per plane; either may be NULL. */
CPU_HOT static void channel_scale_grad_rows(const float *x, const float *s, const float *g, float *gx, float *gs,
                                            int64_t planes, int64_t hw)
{
#pragma omp parallel for schedule(static) if (planes * hw >= PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *in = x + p * hw, *gp = g + p * hw;
        if (gx) {
            float sp = s[p], *out = gx + p * hw;
#pragma omp simd
            for (int64_t i = 0; i < hw; i++)
                out[i] += gp[i] * sp;
        }
        if (gs) {
            double sum = 0.0;
            for (int64_t i = 0; i < hw; i++)
                sum += (double)gp[i] * in[i];
            gs[p] += (float)sum;
        }
    }
}

/* The same on channel-blocked x and y (cpu_blocking: b channels interleaved per pixel): block
 * k = n·C/b + c/b holds hw pixels of b values, scaled by s[k·b … k·b + b − 1]. */
CPU_HOT static void channel_scale_blocked(const float *x, const float *s, float *y, int64_t blocks, int64_t hw,
                                          int b)
{
#pragma omp parallel for schedule(static) if (blocks * hw * b >= PARALLEL_MIN)
    for (int64_t k = 0; k < blocks; k++) {
        const float *in = x + k * hw * b, *sk = s + k * b;
        float *out = y + k * hw * b;
        for (int64_t i = 0; i < hw; i++)
#pragma omp simd
            for (int l = 0; l < b; l++)
                out[i * b + l] = in[i * b + l] * sk[l];
    }
}

void cpu_channel_scale_forward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *y)
{
    (void)be;
    int64_t planes = x->shape.dim[0] * x->shape.dim[1], hw = x->shape.dim[2] * x->shape.dim[3];
    int b = cpu_blocking(x);
    if (b)
        channel_scale_blocked(cpu_ptr(x), cpu_ptr(s), cpu_ptr(y), planes / b, hw, b);
    else
        channel_scale_rows(cpu_ptr(x), cpu_ptr(s), cpu_ptr(y), planes, hw);
}

void cpu_channel_scale_backward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *dy, tensor_ref *dx,
                                tensor_ref *ds)
{
    (void)be;
    int64_t planes = x->shape.dim[0] * x->shape.dim[1], hw = x->shape.dim[2] * x->shape.dim[3];
    channel_scale_grad_rows(cpu_ptr(x), cpu_ptr(s), cpu_ptr(dy), dx ? cpu_ptr(dx) : NULL, ds ? cpu_ptr(ds) : NULL,
                            planes, hw);
}

void cpu_add_forward(eng_backend *be, tensor_ref *a, tensor_ref *b, bool relu, tensor_ref *y)
{
    (void)be;
    add_rows(cpu_ptr(a), cpu_ptr(b), cpu_ptr(y), eng_numel(&a->shape), relu);
}

void cpu_add_backward(eng_backend *be, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *da, tensor_ref *db)
{
    (void)be;
    const float *y = relu_y ? cpu_ptr(relu_y) : NULL, *g = cpu_ptr(dy);
    int64_t n = eng_numel(&dy->shape);
    if (da && db)
        add_grad_rows2(y, g, cpu_ptr(da), cpu_ptr(db), n);
    else if (da || db)
        add_grad_rows(y, g, cpu_ptr(da ? da : db), n);
}

CPU_HOT static void scale_rows(float alpha, float *x, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        x[i] *= alpha;
}

void cpu_scale(eng_backend *be, float alpha, tensor_ref *x)
{
    (void)be;
    scale_rows(alpha, cpu_ptr(x), eng_numel(&x->shape));
}

/*
 * eltwise.c — the cpu backend's elementwise layers: ReLU and the residual add.
 *
 * ReLU's backward reads the output, not the input (PyTorch's in-place ReLU does the same),
 * so the input's memory may be reused once the forward is done.
 */
#include "cpu.h"

void cpu_relu_forward(eng_backend *be, T *x, T *y)
{
    (void)be;
    const float *in = cpu_ptr(x);
    float *out = cpu_ptr(y);
    int64_t n = eng_numel(&x->shape);
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void cpu_relu_backward(eng_backend *be, T *y, T *dy, T *dx)
{
    (void)be;
    const float *out = cpu_ptr(y), *g = cpu_ptr(dy);
    float *gx = cpu_ptr(dx);
    int64_t n = eng_numel(&y->shape);
    for (int64_t i = 0; i < n; i++)
        gx[i] += out[i] > 0.0f ? g[i] : 0.0f;
}

void cpu_add_forward(eng_backend *be, T *a, T *b, T *y)
{
    (void)be;
    const float *pa = cpu_ptr(a), *pb = cpu_ptr(b);
    float *out = cpu_ptr(y);
    int64_t n = eng_numel(&a->shape);
    for (int64_t i = 0; i < n; i++)
        out[i] = pa[i] + pb[i];
}

/* Accumulate g into one gradient (NULL: not needed). */
static void accumulate(const float *g, T *d, int64_t n)
{
    if (!d)
        return;
    float *out = cpu_ptr(d);
    for (int64_t i = 0; i < n; i++)
        out[i] += g[i];
}

void cpu_add_backward(eng_backend *be, T *dy, T *da, T *db)
{
    (void)be;
    int64_t n = eng_numel(&dy->shape);
    accumulate(cpu_ptr(dy), da, n);
    accumulate(cpu_ptr(dy), db, n);
}

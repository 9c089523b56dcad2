/*
 * linear.c — the cpu backend's fully connected layer, y = x·Wᵀ + b, on oneDNN's sgemm
 * (row-major, as our tensors are). The gradients are two more products with beta = 1,
 * which is exactly the accumulate-into-gradients convention of nn.h.
 */
#include "cpu.h"

#include "log.h"

#include <oneapi/dnnl/dnnl.h>

/* C = op(A)·op(B) + beta·C, row-major; A is M×K, B is K×N after op. */
void cpu_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
               int64_t ldb, float beta, float *c, int64_t ldc)
{
    dnnl_status_t st = dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    if (st != dnnl_success)
        die(EXIT_RUNTIME, "oneDNN sgemm failed (status %d) for %lldx%lldx%lld", (int)st, (long long)m,
            (long long)n, (long long)k);
}

void cpu_linear_forward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *b, tensor_ref *y)
{
    (void)be;
    int64_t n = x->shape.dim[0], in = x->shape.dim[1], out = w->shape.dim[0];
    float *py = cpu_ptr(y);
    cpu_sgemm('N', 'T', n, out, in, cpu_ptr(x), in, cpu_ptr(w), in, 0.0f, py, out);
    if (!b)
        return;
    const float *pb = cpu_ptr(b);
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < out; o++)
            py[r * out + o] += pb[o];
}

void cpu_linear_backward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *dy, tensor_ref *dx,
                         tensor_ref *dw, tensor_ref *db)
{
    (void)be;
    int64_t n = x->shape.dim[0], in = x->shape.dim[1], out = w->shape.dim[0];
    const float *g = cpu_ptr(dy);
    if (dx) /* dx (n×in) += dy (n×out) · W (out×in) */
        cpu_sgemm('N', 'N', n, in, out, g, out, cpu_ptr(w), in, 1.0f, cpu_ptr(dx), in);
    if (dw) /* dW (out×in) += dyᵀ (out×n) · x (n×in) */
        cpu_sgemm('T', 'N', out, in, n, g, out, cpu_ptr(x), in, 1.0f, cpu_ptr(dw), in);
    if (!db)
        return;
    float *pdb = cpu_ptr(db);
    for (int64_t o = 0; o < out; o++) {
        double s = 0.0; /* a batch of many rows: sum in double, round once */
        for (int64_t r = 0; r < n; r++)
            s += g[r * out + o];
        pdb[o] += (float)s;
    }
}

/*
 * bank.c — the cpu backend's memory-bank scores (eng_bank_scores_*): each row of x against the
 * bank rows its idx names, the products NPID's and PIRL's NCE loss reads.
 *
 * A gemm cannot do it: every row of x meets its own k rows of the bank. So each score is one
 * dot product over D, summed in double and rounded once (as the l2norm and the losses sum),
 * rows of x shared out over the threads; each output element is one thread's, so the result
 * does not depend on their number. The backward adds Σ_j dy[i, j]·bank[idx[i, j]] into dx[i],
 * j in order, also in double.
 */
#include "cpu.h"

#include "util.h"

#include <stdlib.h>

static double dot(const float *a, const float *b, int64_t d)
{
    double s = 0.0;
    for (int64_t t = 0; t < d; t++)
        s += (double)a[t] * (double)b[t];
    return s;
}

void cpu_bank_scores_forward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    int64_t n = y->shape.dim[0], k = y->shape.dim[1], d = x->shape.dim[1];
    const float *pb = cpu_ptr(bank), *px = cpu_ptr(x);
    float *py = cpu_ptr(y);
#pragma omp parallel for schedule(static) if (n * k * d >= 65536)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++)
            py[i * k + j] = (float)dot(pb + idx[i * k + j] * d, px + i * d, d);
}

void cpu_bank_scores_backward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    int64_t n = dy->shape.dim[0], k = dy->shape.dim[1], d = dx->shape.dim[1];
    const float *pb = cpu_ptr(bank), *pg = cpu_ptr(dy);
    float *pdx = cpu_ptr(dx);
#pragma omp parallel for schedule(static) if (n * k * d >= 65536)
    for (int64_t i = 0; i < n; i++) {
        double *acc = xcalloc((size_t)d, sizeof *acc);
        for (int64_t j = 0; j < k; j++) {
            const float *row = pb + idx[i * k + j] * d;
            double g = pg[i * k + j];
            for (int64_t t = 0; t < d; t++)
                acc[t] += g * (double)row[t];
        }
        for (int64_t t = 0; t < d; t++)
            pdx[i * d + t] += (float)acc[t];
        free(acc);
    }
}

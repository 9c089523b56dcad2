/*
 * bank.cu — the cuda backend's memory-bank scores (eng_bank_scores_*), the cpu's bank.c on the
 * GPU: y[i, j] = bank[idx[i, j]] · x[i], and dx[i] += Σ_j dy[i, j]·bank[idx[i, j]].
 *
 * The row numbers travel to a scratch slot in stream order. Forward: one block per row of x,
 * its threads over the k scores, each a dot product over D summed in double (the cpu's order,
 * so the two agree to the last rounding). Backward: one block per row of x, its threads over
 * the D columns, each summing its column over the k rows in order, in double.
 */
#include "cuda.h"

enum { THREADS = 128 };

__global__ static void bank_scores_kernel(const float *bank, const int64_t *idx, const float *x, float *y, int64_t k,
                                          int64_t d)
{
    int64_t i = blockIdx.x;
    const float *xi = x + i * d;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
        const float *row = bank + idx[i * k + j] * d;
        double s = 0.0;
        for (int64_t t = 0; t < d; t++)
            s += (double)row[t] * (double)xi[t];
        y[i * k + j] = (float)s;
    }
}

__global__ static void bank_grad_kernel(const float *bank, const int64_t *idx, const float *dy, float *dx, int64_t k,
                                        int64_t d)
{
    int64_t i = blockIdx.x;
    for (int64_t t = threadIdx.x; t < d; t += blockDim.x) {
        double s = 0.0;
        for (int64_t j = 0; j < k; j++)
            s += (double)dy[i * k + j] * (double)bank[idx[i * k + j] * d + t];
        dx[i * d + t] += (float)s;
    }
}

extern "C" void cuda_bank_scores_forward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *x,
                                         tensor_ref *y)
{
    int64_t n = y->shape.dim[0], k = y->shape.dim[1], d = x->shape.dim[1];
    if (n == 0 || k == 0)
        return;
    const int64_t *dev = (const int64_t *)cuda_scratch_from_host(be, 0, idx, (size_t)(n * k) * sizeof *idx);
    bank_scores_kernel<<<(unsigned)n, THREADS, 0, cuda_stream(be)>>>(cuda_ptr(bank), dev, cuda_ptr(x), cuda_ptr(y),
                                                                      k, d);
    CUDA_LAUNCHED();
}

extern "C" void cuda_bank_scores_backward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *dy,
                                          tensor_ref *dx)
{
    int64_t n = dy->shape.dim[0], k = dy->shape.dim[1], d = dx->shape.dim[1];
    if (n == 0 || k == 0)
        return;
    const int64_t *dev = (const int64_t *)cuda_scratch_from_host(be, 0, idx, (size_t)(n * k) * sizeof *idx);
    bank_grad_kernel<<<(unsigned)n, THREADS, 0, cuda_stream(be)>>>(cuda_ptr(bank), dev, cuda_ptr(dy), cuda_ptr(dx),
                                                                    k, d);
    CUDA_LAUNCHED();
}

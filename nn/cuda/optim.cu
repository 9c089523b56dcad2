/*
 * optim.cu — the cuda backend's optimizer updates: SGD (momentum, Nesterov, weight decay, LARC's
 * gradient scale) and Adam/AdamW, for a whole list of parameter tensors in one kernel launch, and
 * a momentum encoder's moving average.
 *
 * The arithmetic is the cpu backend's (optim.c), which is torch.optim's (v1.13) float32 steps:
 * each element rounds after every operation in the same order, the Python-float scalars
 * (1 − β1, the bias corrections, the step size) are worked in double on the host and used as
 * float32. The kernels write every operation as a round-to-nearest intrinsic (__fmul_rn,
 * __fadd_rn, __fdiv_rn, __fsqrt_rn), which nvcc never fuses into an FMA, so an update equals
 * the cpu's bit for bit (the cpu is compiled with -ffp-contract=off for the same reason).
 *
 * "Many": the host lays out one job per tensor (its pointers, element count and float
 * arguments) and cuts every tensor into CHUNK-element chunks; job i's chunks are the blocks
 * [first_chunk_i, first_chunk_i + chunks_i). The table goes to the device through a scratch
 * slot, and each block finds its job by a binary search over first_chunk. A model's hundreds
 * of small tensors thus cost one launch. Elements are independent, so the launch shape
 * changes nothing in the results.
 */
#include "cuda.h"

#include "../../lib/util.h"

#include <math.h>
#include <stdlib.h>

enum { THREADS = 256, CHUNK = 8192 }; /* a block's threads and its elements */

/* The job whose chunks contain block b: the last one with first_chunk <= b (the jobs before an
 * empty tensor's share its first_chunk, and the last of them is the one that has chunks). */
template <typename Job>
__device__ static const Job *job_of(const Job *jobs, int n, int64_t b)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (jobs[mid].first_chunk <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &jobs[lo];
}

/* Fills in each job's first_chunk (a prefix sum of its chunk count); returns the total. */
template <typename Job>
static int64_t number_chunks(Job *jobs, int n)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        jobs[i].first_chunk = total;
        total += (jobs[i].n + CHUNK - 1) / CHUNK;
    }
    return total;
}

/* The device copy of the table and the launch of kernel over its chunks. */
template <typename Job>
static void launch_jobs(eng_backend *be, Job *jobs, int n, void (*kernel)(const Job *, int))
{
    int64_t chunks = number_chunks(jobs, n);
    if (chunks == 0)
        return;
    const Job *dev = (const Job *)cuda_scratch_from_host(be, 0, jobs, (size_t)n * sizeof *jobs);
    kernel<<<(unsigned)chunks, THREADS, 0, cuda_stream(be)>>>(dev, n);
    CUDA_LAUNCHED();
}

/* ---- SGD -------------------------------------------------------------------------------------- */

typedef struct {
    float *p;
    const float *g;
    float *buf; /* NULL: momentum 0 */
    int64_t n, first_chunk;
    float lr, wd, scale, mom;
    bool nesterov, first;
} sgd_job;

/* d = (g + wd·p)·scale; buf = first ? d : buf·mom + d; p −= lr·(nesterov ? d + mom·buf : buf),
 * or p −= lr·d without momentum. */
__global__ static void sgd_kernel(const sgd_job *jobs, int n)
{
    const sgd_job j = *job_of(jobs, n, blockIdx.x);
    int64_t start = ((int64_t)blockIdx.x - j.first_chunk) * CHUNK;
    int64_t end = start + CHUNK < j.n ? start + CHUNK : j.n;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
        float p = j.p[i];
        float d = __fmul_rn(__fadd_rn(j.g[i], __fmul_rn(j.wd, p)), j.scale);
        if (!j.buf) {
            j.p[i] = __fsub_rn(p, __fmul_rn(j.lr, d));
            continue;
        }
        float b = j.first ? d : __fadd_rn(__fmul_rn(j.buf[i], j.mom), d);
        j.buf[i] = b;
        j.p[i] = __fsub_rn(p, __fmul_rn(j.lr, j.nesterov ? __fadd_rn(d, __fmul_rn(j.mom, b)) : b));
    }
}

extern "C" void cuda_sgd_step_many(eng_backend *be, const eng_sgd_item *items, int n)
{
    if (n <= 0)
        return;
    sgd_job *jobs = (sgd_job *)xmalloc((size_t)n * sizeof *jobs);
    for (int i = 0; i < n; i++) {
        const eng_sgd_item *it = &items[i];
        jobs[i] = (sgd_job){
            .p = cuda_ptr(it->p),
            .g = cuda_ptr(it->g),
            .buf = it->buf ? cuda_ptr(it->buf) : NULL,
            .n = eng_numel(&it->p->shape),
            .first_chunk = 0,
            .lr = it->a.lr,
            .wd = it->a.weight_decay,
            .scale = it->a.grad_scale,
            .mom = it->a.momentum,
            .nesterov = it->a.nesterov,
            .first = it->a.first,
        };
    }
    launch_jobs(be, jobs, n, sgd_kernel);
    free(jobs);
}

/* ---- Adam / AdamW ----------------------------------------------------------------------------- */

/* One tensor's Adam update with its per-step float32 constants (the cpu's adam_consts). */
typedef struct {
    float *p;
    const float *g;
    float *m, *v;
    int64_t n, first_chunk;
    float decay, wd, one_minus_b1, one_minus_b2, b1, b2, bc2_sqrt, eps, neg_step_size;
    bool decoupled;
} adam_job;

/* Exactly the cpu's adam_consts_of: double arithmetic on the host, then rounded to float. */
static void adam_consts(adam_job *j, const eng_adam_args *a)
{
    double t = (double)a->step;
    j->decay = (float)(1.0 - a->lr * a->weight_decay);
    j->wd = (float)a->weight_decay;
    j->one_minus_b1 = (float)(1.0 - a->beta1);
    j->one_minus_b2 = (float)(1.0 - a->beta2);
    j->b1 = (float)a->beta1;
    j->b2 = (float)a->beta2;
    j->bc2_sqrt = (float)sqrt(1.0 - pow(a->beta2, t));
    j->eps = (float)a->eps;
    j->neg_step_size = (float)(-(a->lr / (1.0 - pow(a->beta1, t))));
    j->decoupled = a->decoupled;
}

/* w = decoupled ? p·decay : p; g' = decoupled ? g : g + wd·w; m = m·β1 + (1−β1)·g';
 * v = v·β2 + ((1−β2)·g')·g'; p = w + (−step·m) / (√v / √(1−β2^t) + eps). */
__global__ static void adam_kernel(const adam_job *jobs, int n)
{
    const adam_job j = *job_of(jobs, n, blockIdx.x);
    int64_t start = ((int64_t)blockIdx.x - j.first_chunk) * CHUNK;
    int64_t end = start + CHUNK < j.n ? start + CHUNK : j.n;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
        float w = j.decoupled ? __fmul_rn(j.p[i], j.decay) : j.p[i];
        float gi = j.decoupled ? j.g[i] : __fadd_rn(j.g[i], __fmul_rn(j.wd, w));
        float mi = __fadd_rn(__fmul_rn(j.m[i], j.b1), __fmul_rn(j.one_minus_b1, gi));
        float vi = __fadd_rn(__fmul_rn(j.v[i], j.b2), __fmul_rn(__fmul_rn(j.one_minus_b2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), j.bc2_sqrt), j.eps);
        j.m[i] = mi;
        j.v[i] = vi;
        j.p[i] = __fadd_rn(w, __fdiv_rn(__fmul_rn(j.neg_step_size, mi), denom));
    }
}

extern "C" void cuda_adam_step_many(eng_backend *be, const eng_adam_item *items, int n)
{
    if (n <= 0)
        return;
    adam_job *jobs = (adam_job *)xmalloc((size_t)n * sizeof *jobs);
    for (int i = 0; i < n; i++) {
        const eng_adam_item *it = &items[i];
        adam_job *j = &jobs[i];
        j->p = cuda_ptr(it->p);
        j->g = cuda_ptr(it->g);
        j->m = cuda_ptr(it->m);
        j->v = cuda_ptr(it->v);
        j->n = eng_numel(&it->p->shape);
        adam_consts(j, &it->a);
    }
    launch_jobs(be, jobs, n, adam_kernel);
    free(jobs);
}

/* ---- a momentum encoder's moving average ------------------------------------------------------ */

/* dst = dst·keep + src·take, rounded as the cpu's (optim.c) and PyTorch's: two products, a sum. */
__global__ static void ema_kernel(float keep, float take, const float *src, float *dst, int64_t n)
{
    GRID_STRIDE(i, n) dst[i] = __fadd_rn(__fmul_rn(dst[i], keep), __fmul_rn(src[i], take));
}

extern "C" void cuda_ema(eng_backend *be, float keep, float take, tensor_ref *src, tensor_ref *dst)
{
    int64_t n = eng_numel(&src->shape);
    if (n == 0)
        return;
    ema_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream(be)>>>(keep, take, cuda_ptr(src), cuda_ptr(dst), n);
    CUDA_LAUNCHED();
}

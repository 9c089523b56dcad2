/*
 * cuda.c — the `cuda` backend: the device, its stream and library handles, memory, and the
 * table of operations (backend.h).
 *
 * Opening picks the GPU named by the options (the process's local rank), makes one
 * non-blocking stream and binds cuDNN and cuBLAS to it, so every layer is queued in order on
 * that stream and the host runs ahead until something must come back. Memory is plain
 * cudaMalloc, taken when model code plans its tensors (once, before the first step); the
 * scratch slots and cuDNN's workspace grow to the largest need seen and are then reused.
 *
 * Tensors are fp32 in the logical layout (cuda.h), so upload, download and copy are
 * cudaMemcpy's; a download waits for the stream, because the host reads the result next.
 */
#include "cuda.h"

#include "../../lib/log.h"
#include "../../lib/util.h"

#include <stdlib.h>
#include <string.h>

void cuda_fail(const char *what, const char *detail, const char *file, int line)
{
    die(EXIT_RUNTIME, "cuda: %s failed at %s:%d: %s", what, file, line, detail);
}

void cuda_dnn_check(cudnnStatus_t st, const char *what)
{
    if (st != CUDNN_STATUS_SUCCESS)
        die(EXIT_RUNTIME, "cuda: %s failed: %s", what, cudnnGetErrorString(st));
}

void cuda_blas_check(cublasStatus_t st, const char *what)
{
    if (st != CUBLAS_STATUS_SUCCESS)
        die(EXIT_RUNTIME, "cuda: %s failed: cuBLAS status %d", what, (int)st);
}

void cuda_sync(eng_backend *be) { CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be))); }

/* ---- opening: a GPU that exists, or a clear reason ------------------------------------------- */

/* The GPU `device` exists and can run our kernels (in `precision`): 0, else -1 with *err saying why. */
static int check_device(int device, eng_precision precision, char **err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        report_failure(err, "no usable GPU on this machine (%s)", cudaGetErrorString(e));
        return -1;
    }
    if (device < 0 || device >= count) {
        report_failure(err, "GPU %d was asked for (the local rank) but this machine has %d", device, count);
        return -1;
    }
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 7) {
        report_failure(err, "GPU %d (%s) is compute capability %d.%d; selfsup needs 7.0 or newer", device, prop.name,
                       prop.major, prop.minor);
        return -1;
    }
    if (precision == ENG_BF16 && prop.major < 8) {
        report_failure(err,
                       "GPU %d (%s) is compute capability %d.%d: mixed precision computes in bf16, which "
                       "needs 8.0 or newer; set USE_AMP: False",
                       device, prop.name, prop.major, prop.minor);
        return -1;
    }
    log_info("cuda: GPU %d: %s, compute capability %d.%d, %.1f GiB, cuDNN %zu", device, prop.name, prop.major,
             prop.minor, (double)prop.totalGlobalMem / (1 << 30), cudnnGetVersion());
    return 0;
}

static int cuda_open(eng_backend *be, const eng_backend_options *opt, char **err)
{
    if (check_device(opt->device, opt->precision, err) != 0)
        return -1;
    CUDA_CHECK(cudaSetDevice(opt->device));
    cuda_impl *c = xcalloc(1, sizeof *c);
    c->device = opt->device;
    c->deterministic = opt->deterministic;
    c->precision = opt->precision;
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->input_copied, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->input_consumed, cudaEventDisableTiming));
    cuda_dnn_check(cudnnCreate(&c->dnn), "cudnnCreate");
    cuda_dnn_check(cudnnSetStream(c->dnn, c->stream), "cudnnSetStream");
    cuda_blas_check(cublasCreate(&c->blas), "cublasCreate");
    cuda_blas_check(cublasSetStream(c->blas, c->stream), "cublasSetStream");
    /* fp32 products stay fp32 (no TF32), as PyTorch's matmul by default */
    cuda_blas_check(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    be->impl = c;
    if (c->precision == ENG_BF16)
        log_info("cuda: mixed precision (MODEL.AMP_PARAMS.USE_AMP): convolutions in bf16 on the tensor cores, a "
                 "ResNet trunk's activations in bf16; weights, norms' statistics, losses and the optimizer in fp32");
    return 0;
}

static void cuda_close(eng_backend *be)
{
    cuda_impl *c = cuda_of(be);
    if (!c)
        return;
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->copy_stream));
    cudnnDestroy(c->dnn);
    cublasDestroy(c->blas);
    cudaFree(c->workspace);
    for (int i = 0; i < CUDA_SCRATCH_SLOTS; i++)
        cudaFree(c->scratch[i]);
    cudaFreeHost(c->host_result);
    cudaFree(c->input_dev);
    cudaEventDestroy(c->input_copied);
    cudaEventDestroy(c->input_consumed);
    cudaStreamDestroy(c->copy_stream);
    cudaStreamDestroy(c->stream);
    free(c->algos);
    free(c->live);
    free(c->live_bytes);
    free(c);
    be->impl = NULL;
}

/* ---- memory ----------------------------------------------------------------------------------- */

static size_t cuda_bytes(eng_backend *be, const eng_shape *s)
{
    (void)be;
    return (size_t)eng_numel(s) * sizeof(float);
}

/* The allocation p of `bytes` is held: counted in eng_memory_peak's figure. */
static void hold(cuda_impl *c, void *p, size_t bytes)
{
    if (c->nlive == c->live_cap) {
        c->live_cap = c->live_cap ? 2 * c->live_cap : 64;
        c->live = xrealloc(c->live, (size_t)c->live_cap * sizeof *c->live);
        c->live_bytes = xrealloc(c->live_bytes, (size_t)c->live_cap * sizeof *c->live_bytes);
    }
    c->live[c->nlive] = p;
    c->live_bytes[c->nlive++] = bytes;
    c->held += bytes;
    c->held_peak = c->held > c->held_peak ? c->held : c->held_peak;
}

/* p is given back (the newest first: scratch and workspace regrow at the end of the list). */
static void release(cuda_impl *c, void *p)
{
    for (int i = c->nlive - 1; i >= 0; i--)
        if (c->live[i] == p) {
            c->held -= c->live_bytes[i];
            c->live[i] = c->live[--c->nlive];
            c->live_bytes[i] = c->live_bytes[c->nlive];
            return;
        }
    invariant_failed("cuda: freeing %p, which this backend did not allocate", p);
}

static void *cuda_alloc(eng_backend *be, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        die(EXIT_RUNTIME, "cuda: cannot allocate %.1f MiB on the GPU (%.1f MiB held): %s", (double)bytes / (1 << 20),
            (double)cuda_of(be)->held / (1 << 20), cudaGetErrorString(e));
    hold(cuda_of(be), p, bytes);
    return p;
}

static void cuda_free(eng_backend *be, void *base)
{
    if (base) {
        cuda_sync(be); /* queued work may still read it */
        release(cuda_of(be), base);
        CUDA_CHECK(cudaFree(base));
    }
}

static size_t cuda_memory_peak(eng_backend *be) { return cuda_of(be)->held_peak; }

static void *cuda_device_address(eng_backend *be, const eng_tensor *t)
{
    cuda_sync(be); /* another stream (NCCL's) reads or writes it next */
    return cuda_ptr(t);
}

static void *cuda_device_queue(eng_backend *be) { return cuda_stream(be); }

static void *cuda_device_address_queued(eng_backend *be, const eng_tensor *t)
{
    (void)be;
    return cuda_ptr(t);
}

static void cuda_zero(eng_backend *be, const eng_tensor *t)
{
    CUDA_CHECK(cudaMemsetAsync(cuda_ptr(t), 0, cuda_bytes(be, &t->shape), cuda_stream(be)));
}

/* N, C and S (H·W) of a tensor as the conversions see it: N×C×H×W, N×C (S 1) or N (C, S 1). */
static void ncs_of(const eng_shape *s, int64_t *n, int64_t *c, int64_t *hw)
{
    *n = s->ndim > 0 ? s->dim[0] : 1;
    *c = s->ndim > 1 ? s->dim[1] : 1;
    *hw = 1;
    for (int i = 2; i < s->ndim; i++)
        *hw *= s->dim[i];
}

/* fp32 logical `src` into t: straight, or through to_nhwc_bf16 into a NATIVE bf16 t. */
static void store_logical(eng_backend *be, const float *src, const eng_tensor *t)
{
    int64_t n, c, hw;
    ncs_of(&t->shape, &n, &c, &hw);
    if (cuda_native_bf16(be, t))
        cuda_to_nhwc_bf16(be, src, cuda_ptr(t), n, c, hw);
    else if (src != cuda_ptr(t))
        CUDA_CHECK(cudaMemcpyAsync(cuda_ptr(t), src, cuda_bytes(be, &t->shape), cudaMemcpyDeviceToDevice,
                                   cuda_stream(be)));
}

const float *cuda_as_logical(eng_backend *be, const eng_tensor *t, int slot)
{
    if (!cuda_native_bf16(be, t))
        return cuda_ptr(t);
    int64_t n, c, hw;
    ncs_of(&t->shape, &n, &c, &hw);
    float *wide = cuda_scratch(be, slot, cuda_bytes(be, &t->shape));
    cuda_from_nhwc_bf16(be, cuda_ptr(t), wide, n, c, hw, false);
    return wide;
}

static void cuda_upload(eng_backend *be, const eng_tensor *dst, const float *src)
{
    /* from pageable memory the call returns once src is staged: the caller may reuse it */
    float *at = cuda_native_bf16(be, dst) ? cuda_scratch(be, 0, cuda_bytes(be, &dst->shape)) : cuda_ptr(dst);
    CUDA_CHECK(cudaMemcpyAsync(at, src, cuda_bytes(be, &dst->shape), cudaMemcpyHostToDevice, cuda_stream(be)));
    store_logical(be, at, dst);
}

static void cuda_download(eng_backend *be, const eng_tensor *src, float *dst)
{
    CUDA_CHECK(cudaMemcpyAsync(dst, cuda_as_logical(be, src, 0), cuda_bytes(be, &src->shape), cudaMemcpyDeviceToHost,
                               cuda_stream(be)));
    cuda_sync(be);
}

/* Same storage: one copy of its bytes (bf16 ones for NATIVE bf16); otherwise a conversion. */
static void cuda_copy(eng_backend *be, const eng_tensor *src, const eng_tensor *dst)
{
    bool bf16_src = cuda_native_bf16(be, src), bf16_dst = cuda_native_bf16(be, dst);
    if (bf16_src && bf16_dst)
        CUDA_CHECK(cudaMemcpyAsync(cuda_ptr(dst), cuda_ptr(src), (size_t)eng_numel(&dst->shape) * 2,
                                   cudaMemcpyDeviceToDevice, cuda_stream(be)));
    else if (bf16_dst)
        store_logical(be, cuda_ptr(src), dst);
    else /* the shapes may differ (a flatten); the element order is logical on both sides */
        CUDA_CHECK(cudaMemcpyAsync(cuda_ptr(dst), cuda_as_logical(be, src, 0), cuda_bytes(be, &dst->shape),
                                   cudaMemcpyDeviceToDevice, cuda_stream(be)));
}

void *cuda_scratch(eng_backend *be, int slot, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (slot < 0 || slot >= CUDA_SCRATCH_SLOTS)
        invariant_failed("cuda: scratch slot %d does not exist", slot);
    if (c->scratch_bytes[slot] >= bytes)
        return c->scratch[slot];
    size_t grown = bytes > 2 * c->scratch_bytes[slot] ? bytes : 2 * c->scratch_bytes[slot];
    cuda_free(be, c->scratch[slot]);
    c->scratch[slot] = cuda_alloc(be, grown);
    c->scratch_bytes[slot] = grown;
    return c->scratch[slot];
}

void *cuda_input_buffer(eng_backend *be, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (c->input_bytes >= bytes)
        return c->input_dev;
    CUDA_CHECK(cudaStreamSynchronize(c->copy_stream));
    cuda_free(be, c->input_dev); /* waits for the compute stream, the last reader */
    c->input_dev = cuda_alloc(be, bytes);
    c->input_bytes = bytes;
    return c->input_dev;
}

/* cudaHostRegister: the memory is mapped read-write (a ring's data area); a failure leaves
 * the uploads staged, which is slower, not wrong. */
static bool cuda_pin_host(eng_backend *be, void *p, size_t bytes, char **why)
{
    (void)be;
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e == cudaSuccess)
        return true;
    (void)cudaGetLastError(); /* not sticky, but leave no error for the next check to find */
    report_failure(why, "cudaHostRegister of %.1f MiB: %s", (double)bytes / (1 << 20), cudaGetErrorString(e));
    return false;
}

static void cuda_unpin_host(eng_backend *be, void *p)
{
    cuda_sync(be); /* no copy from it may still be queued */
    CUDA_CHECK(cudaStreamSynchronize(cuda_of(be)->copy_stream));
    CUDA_CHECK(cudaHostUnregister(p));
}

void *cuda_scratch_from_host(eng_backend *be, int slot, const void *host, size_t bytes)
{
    void *dst = cuda_scratch(be, slot, bytes);
    if (bytes)
        CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, cuda_stream(be)));
    cuda_sync(be); /* the caller may free or change `host` as soon as this returns */
    return dst;
}

void cuda_read_doubles(eng_backend *be, const double *src, double *dst, int n)
{
    cuda_impl *c = cuda_of(be);
    if ((size_t)n > c->host_result_len) {
        cudaFreeHost(c->host_result);
        CUDA_CHECK(cudaMallocHost((void **)&c->host_result, (size_t)n * sizeof(double)));
        c->host_result_len = (size_t)n;
    }
    CUDA_CHECK(cudaMemcpyAsync(c->host_result, src, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    cuda_sync(be);
    memcpy(dst, c->host_result, (size_t)n * sizeof(double));
}

const eng_ops eng_cuda_ops = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .bytes = cuda_bytes,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .zero = cuda_zero,
    .upload = cuda_upload,
    .download = cuda_download,
    .sync = cuda_sync,
    .device_address = cuda_device_address,
    .device_queue = cuda_device_queue,
    .device_address_queued = cuda_device_address_queued,
    .memory_peak = cuda_memory_peak,
    .pin_host = cuda_pin_host,
    .unpin_host = cuda_unpin_host,
    .copy = cuda_copy,
    .upload_images = cuda_upload_images,
    .relu_forward = cuda_relu_forward,
    .relu_backward = cuda_relu_backward,
    .sigmoid_forward = cuda_sigmoid_forward,
    .sigmoid_backward = cuda_sigmoid_backward,
    .silu_forward = cuda_silu_forward,
    .silu_backward = cuda_silu_backward,
    .channel_scale_forward = cuda_channel_scale_forward,
    .channel_scale_backward = cuda_channel_scale_backward,
    .linear_forward = cuda_linear_forward,
    .linear_backward = cuda_linear_backward,
    .add_forward = cuda_add_forward,
    .add_backward = cuda_add_backward,
    .l2norm_forward = cuda_l2norm_forward,
    .l2norm_backward = cuda_l2norm_backward,
    .bank_scores_forward = cuda_bank_scores_forward,
    .bank_scores_backward = cuda_bank_scores_backward,
    .dropout_forward = cuda_dropout_forward,
    .dropout_backward = cuda_dropout_backward,
    .sgd_step_many = cuda_sgd_step_many,
    .adam_step_many = cuda_adam_step_many,
    .ema = cuda_ema,
    .scale = cuda_scale,
    .argmax_rows = cuda_argmax_rows,
    .sum_squares = cuda_sum_squares,
    .sum_squares_many = cuda_sum_squares_many,
    .info_nce = cuda_info_nce,
    .cross_entropy = cuda_cross_entropy,
    .bce_logits = cuda_bce_logits,
    .sinkhorn = cuda_sinkhorn,
    .soft_cross_entropy = cuda_soft_cross_entropy,
    /* convolution (dnn.c) */
    .plan_free = cuda_plan_free,
    .conv_plan = cuda_conv_plan,
    .conv_forward = cuda_conv_forward,
    .conv_backward = cuda_conv_backward,
    .conv_bn_forward_eval = cuda_conv_bn_forward_eval,
    /* batch norm and layer norm (norm.cu) */
    .batchnorm_forward_train = cuda_batchnorm_forward_train,
    .batchnorm_forward_eval = cuda_batchnorm_forward_eval,
    .batchnorm_backward = cuda_batchnorm_backward,
    .batchnorm_backward_eval = cuda_batchnorm_backward_eval,
    .layernorm2d_forward = cuda_layernorm2d_forward,
    .layernorm2d_backward = cuda_layernorm2d_backward,
    /* local response normalisation (lrn.cu) */
    .lrn_forward = cuda_lrn_forward,
    .lrn_backward = cuda_lrn_backward,
    /* pooling (pool.cu) */
    .maxpool_forward = cuda_maxpool_forward,
    .maxpool_backward = cuda_maxpool_backward,
    .avgpool_forward = cuda_avgpool_forward,
    .avgpool_backward = cuda_avgpool_backward,
    .adaptive_avgpool_forward = cuda_adaptive_avgpool_forward,
    .adaptive_avgpool_backward = cuda_adaptive_avgpool_backward,
    .adaptive_maxpool_forward = cuda_adaptive_maxpool_forward,
    .adaptive_maxpool_backward = cuda_adaptive_maxpool_backward,
};

/*
 * cuda.h — the cuda backend's parts, gathered into eng_cuda_ops by cuda.c.
 *
 * Tensors are fp32 in PyTorch's logical layout (C-contiguous NCHW / N×F) in device memory,
 * and so is a NATIVE one in fp32 (nn.h allows that). Under mixed precision (ENG_BF16) a NATIVE
 * tensor is bf16 in NHWC order instead, what cuDNN's tensor-core convolutions read and write:
 * a ResNet's trunk keeps its activations and their gradients so from convolution to
 * convolution (through batch norm, ReLU, the residual adds and the pools, whose kernels take
 * either: elem.cuh), and only a LOGICAL tensor meeting a bf16 convolution is converted at its
 * edges (amp.cu, dnn.c). Upload, download and copy convert a NATIVE bf16 tensor from and to
 * fp32 logical. Everything runs in order on one stream per backend
 * (cuda_impl.stream): kernels, cuDNN and cuBLAS calls are queued there and the host waits
 * only where a value must come back (a loss, a norm) or memory comes back to it.
 *
 * The kernels live in .cu files (nvcc) and are reached through the extern "C" functions
 * below; the cuDNN and cuBLAS calls are plain C (dnn.c). A failed CUDA, cuDNN or cuBLAS call
 * is a broken device or a programming error: it aborts with the call and the place.
 *
 * Reductions that return a value to the host sum in double, as the cpu backend does, and
 * where the cpu backend sums in a fixed order the kernels also use a fixed order (one block
 * per output, a tree inside it), so results do not depend on timing: a run is repeatable.
 */
#ifndef SELFSUP_NN_CUDA_H
#define SELFSUP_NN_CUDA_H

#include "../backend.h"
#include "conv_key.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device scratch slots: each op may use any of them for the length of its call. */
enum { CUDA_SCRATCH_SLOTS = 5 };

/* cuDNN's algorithms for one convolution key, chosen once (dnn.c). */
typedef struct {
    conv_key key;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t workspace; /* the most any of the three needs */
} conv_algos;

typedef struct {
    int device;                 /* the GPU this backend runs on (the process's local rank) */
    cudaStream_t stream;
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    void *workspace;            /* cuDNN's workspace, grown to the largest plan's need */
    size_t workspace_bytes;
    void *scratch[CUDA_SCRATCH_SLOTS]; /* grown on demand (cuda_scratch) */
    size_t scratch_bytes[CUDA_SCRATCH_SLOTS];
    double *host_result;        /* pinned host doubles for values read back (cuda_read_doubles) */
    cudaStream_t copy_stream;   /* the images' copies (cuda_upload_images), beside `stream` */
    cudaEvent_t input_copied;   /* the last images' copy is done (copy_stream) */
    cudaEvent_t input_consumed; /* the kernel that read them is done with input_dev (stream) */
    void *input_dev;            /* the images' bytes on the device */
    size_t input_bytes;
    size_t host_result_len;
    bool deterministic;         /* only deterministic cuDNN algorithms */
    eng_precision precision;    /* ENG_BF16: convolutions in bf16 NHWC (mixed precision) */
    conv_algos *algos;          /* the algorithm cache: one entry per convolution key seen */
    int nalgos, algos_cap;
    void **live;                /* device allocations held now, and their sizes (eng_memory_peak) */
    size_t *live_bytes;
    int nlive, live_cap;
    size_t held, held_peak;     /* their total now, and its most */
} cuda_impl;

static inline cuda_impl *cuda_of(eng_backend *be) { return (cuda_impl *)be->impl; }
static inline cudaStream_t cuda_stream(eng_backend *be) { return cuda_of(be)->stream; }
/* The first element of a tensor (its allocation plus its offset). */
static inline float *cuda_ptr(const eng_tensor *t) { return (float *)((char *)t->base + t->offset); }
/* Whether t is stored as bf16 NHWC: a NATIVE tensor under mixed precision. */
static inline bool cuda_native_bf16(eng_backend *be, const eng_tensor *t)
{
    return t->layout == ENG_LAYOUT_NATIVE && cuda_of(be)->precision == ENG_BF16;
}

/* Abort with the failed call and where it was made. */
void cuda_fail(const char *what, const char *detail, const char *file, int line);
#define CUDA_CHECK(call) \
    do { \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) \
            cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
/* The same for a cuDNN or cuBLAS status, naming the call. */
void cuda_dnn_check(cudnnStatus_t st, const char *what);
void cuda_blas_check(cublasStatus_t st, const char *what);
/* After a kernel launch: a bad launch configuration shows here, not at the next call. */
#define CUDA_LAUNCHED() CUDA_CHECK(cudaGetLastError())

/* Device memory of at least `bytes` in scratch slot `slot` (0..CUDA_SCRATCH_SLOTS-1), valid
 * until the next call for the same slot. Growing waits for the stream first. */
void *cuda_scratch(eng_backend *be, int slot, size_t bytes);
/* `bytes` of host memory copied into scratch slot `slot`, in stream order (the host buffer
 * may be reused as soon as this returns: the copy is made synchronous with the host). */
void *cuda_scratch_from_host(eng_backend *be, int slot, const void *host, size_t bytes);
/* Copy n doubles at device address `src` back to the host (waits for the stream). */
void cuda_read_doubles(eng_backend *be, const double *src, double *dst, int n);
/* Block until everything queued on the backend's stream has run. */
void cuda_sync(eng_backend *be);

/* Launch shape for n elements, `threads` per block, capped so a grid-stride loop covers the rest. */
static inline unsigned cuda_blocks(int64_t n, unsigned threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65535LL * 16 ? 65535LL * 16 : b);
}

#ifdef __CUDACC__
/* A kernel's loop over n elements whatever its launch shape (cuda_blocks caps the grid). */
#define GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#endif

/* ---- input (eltwise.cu) ------------------------------------------------------------------------- */
/* The images' bytes to the device, then x = lut[channel][byte] (nn.c's eng_upload_images). The
 * bytes go on copy_stream into input_dev (cuda_input_buffer), which waits for the kernel that
 * read the last ones; the compute stream waits for the copy, and the host for the copy alone
 * (the caller may reuse src when this returns), not for the work queued before it. From
 * memory pinned with eng_pin_host the copy is DMA, without staging. */
void *cuda_input_buffer(eng_backend *be, size_t bytes);
void cuda_upload_images(eng_backend *be, tensor_ref *x, const uint8_t *src, int src_c, const int *map,
                        const float *lut);

/* ---- mixed precision's conversions (amp.cu) ----------------------------------------------------- */
/* src N×C×S fp32 (NCHW, S = H·W; or a weight O×I×KH·KW) to dst N×S×C bf16 (NHWC; KRSC). */
void cuda_to_nhwc_bf16(eng_backend *be, const float *src, void *dst, int64_t n, int64_t c, int64_t s);
/* dst N×C×S fp32 = src N×S×C bf16 widened, or with `accumulate` dst += it. */
void cuda_from_nhwc_bf16(eng_backend *be, const void *src, float *dst, int64_t n, int64_t c, int64_t s,
                         bool accumulate);
/* t as fp32 logical: itself, or a NATIVE bf16 t widened into scratch slot `slot` (cuda.c). */
const float *cuda_as_logical(eng_backend *be, const eng_tensor *t, int slot);

/* ---- elementwise (eltwise.cu) ------------------------------------------------------------------ */
void cuda_relu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cuda_relu_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx);
void cuda_sigmoid_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cuda_sigmoid_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx);
void cuda_silu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cuda_silu_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);
void cuda_channel_scale_forward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *y);
void cuda_channel_scale_backward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *dy, tensor_ref *dx,
                                 tensor_ref *ds);
void cuda_add_forward(eng_backend *be, tensor_ref *a, tensor_ref *b, bool relu, tensor_ref *y);
void cuda_add_backward(eng_backend *be, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *da, tensor_ref *db);
void cuda_l2norm_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cuda_l2norm_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);
void cuda_dropout_forward(eng_backend *be, float p, uint64_t step, tensor_ref *x, tensor_ref *y);
void cuda_dropout_backward(eng_backend *be, float p, uint64_t step, tensor_ref *dy, tensor_ref *dx);
/* db[o] += Σ_n dy[n, o] over rows (linear) or Σ over n and the plane (conv, s = H·W). */
void cuda_bias_grad(eng_backend *be, const float *dy, int64_t n, int64_t c, int64_t s, float *db);
/* y[n, c, s] += b[c] (a linear's or a convolution's bias after the product). */
void cuda_bias_add(eng_backend *be, float *y, const float *b, int64_t n, int64_t c, int64_t s);
/* An asymmetric padding's convolution (dnn.c): xp (planes × (h + eh) × (w + ew)) = x (planes ×
 * h × w) with eh zero rows below and ew zero columns right; and back, dx += the h × w corner of
 * each plane of dxp. */
void cuda_pad_bottom_right(eng_backend *be, const float *x, float *xp, int64_t planes, int64_t h, int64_t w,
                           int64_t eh, int64_t ew);
void cuda_crop_add(eng_backend *be, const float *dxp, float *dx, int64_t planes, int64_t h, int64_t w, int64_t eh,
                   int64_t ew);

/* ---- optimizer (optim.cu) ---------------------------------------------------------------------- */
void cuda_sgd_step_many(eng_backend *be, const eng_sgd_item *items, int n);
void cuda_adam_step_many(eng_backend *be, const eng_adam_item *items, int n);

/* ---- losses and reductions (loss.cu) ---------------------------------------------------------- */
void cuda_ema(eng_backend *be, float keep, float take, tensor_ref *src, tensor_ref *dst);
void cuda_bank_scores_forward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *x, tensor_ref *y);
void cuda_bank_scores_backward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *dy,
                               tensor_ref *dx);
void cuda_scale(eng_backend *be, float alpha, tensor_ref *x);
void cuda_argmax_rows(eng_backend *be, tensor_ref *x, int64_t *out);
double cuda_sum_squares(eng_backend *be, tensor_ref *x);
void cuda_sum_squares_many(eng_backend *be, tensor_ref *const *xs, int n, double *out);
double cuda_info_nce(eng_backend *be, tensor_ref *logits, float scale, tensor_ref *pos, tensor_ref *neg,
                     tensor_ref *dlogits);
double cuda_cross_entropy(eng_backend *be, tensor_ref *x, float scale, const int64_t *target,
                          const float *weight, int64_t ignore_index, tensor_ref *dx);
double cuda_bce_logits(eng_backend *be, tensor_ref *x, const int64_t *target, tensor_ref *dx);
int cuda_sinkhorn(eng_backend *be, tensor_ref *x, tensor_ref *queue, double epsilon, int iters, bool hard,
                  tensor_ref *q, const eng_reducer *across);
double cuda_soft_cross_entropy(eng_backend *be, tensor_ref *x, float scale, tensor_ref *q, double g,
                               tensor_ref *dx);

/* ---- matrix products and convolution (dnn.c: cuBLAS, cuDNN) -------------------------------------- */
void cuda_linear_forward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *b, tensor_ref *y);
void cuda_linear_backward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *dy, tensor_ref *dx,
                          tensor_ref *dw, tensor_ref *db);
void cuda_plan_free(eng_backend *be, eng_plan *plan);
eng_plan *cuda_conv_plan(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias);
void cuda_conv_forward(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *b,
                       tensor_ref *y);
void cuda_conv_backward(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *dy,
                        tensor_ref *dx, tensor_ref *dw, tensor_ref *db);
void cuda_conv_bn_forward_eval(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, double eps,
                               tensor_ref *gamma, tensor_ref *beta, tensor_ref *mean, tensor_ref *var,
                               tensor_ref *residual, eng_eval_act act, tensor_ref *y);

/* ---- batch norm and layer norm (norm.cu) ------------------------------------------------------- */
void cuda_batchnorm_forward_train(eng_backend *be, double momentum, double eps, tensor_ref *x,
                                  tensor_ref *gamma, tensor_ref *beta, tensor_ref *running_mean,
                                  tensor_ref *running_var, tensor_ref *save_mean, tensor_ref *save_invstd,
                                  bool relu, tensor_ref *y, const eng_reducer *across);
void cuda_batchnorm_forward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                 tensor_ref *beta, tensor_ref *running_mean, tensor_ref *running_var,
                                 bool relu, tensor_ref *y);
void cuda_batchnorm_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                             tensor_ref *save_invstd, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *dx,
                             tensor_ref *dgamma, tensor_ref *dbeta, const eng_reducer *across);
void cuda_batchnorm_backward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                  tensor_ref *running_mean, tensor_ref *running_var, tensor_ref *dy,
                                  tensor_ref *dx, tensor_ref *dgamma, tensor_ref *dbeta);
/* y = act(BN_eval(y) [+ residual]) in place on a convolution's output (conv_bn_forward_eval). */
void cuda_bn_eval_epilogue(eng_backend *be, double eps, tensor_ref *gamma, tensor_ref *beta, tensor_ref *mean,
                           tensor_ref *var, tensor_ref *residual, eng_eval_act act, tensor_ref *y);
void cuda_layernorm2d_forward(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma, tensor_ref *beta,
                              tensor_ref *save_mean, tensor_ref *save_invstd, tensor_ref *y);
void cuda_layernorm2d_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                               tensor_ref *save_invstd, tensor_ref *dy, tensor_ref *dx, tensor_ref *dgamma,
                               tensor_ref *dbeta);

/* ---- local response normalisation (lrn.cu) ------------------------------------------------------- */
void cuda_lrn_forward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *y);
void cuda_lrn_backward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);

/* ---- pooling (pool.cu) ------------------------------------------------------------------------- */
void cuda_maxpool_forward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y);
void cuda_maxpool_backward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *dy,
                           tensor_ref *dx);
void cuda_avgpool_forward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y);
void cuda_avgpool_backward(eng_backend *be, const eng_pool_desc *d, tensor_ref *dy, tensor_ref *dx);
void cuda_adaptive_avgpool_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cuda_adaptive_avgpool_backward(eng_backend *be, tensor_ref *dy, tensor_ref *dx);
void cuda_adaptive_maxpool_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cuda_adaptive_maxpool_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);

#ifdef __cplusplus
}
#endif

#endif

/*
 * cpu.h — the cpu backend's layers, one file each (relu.c, linear.c, ...), gathered into
 * eng_cpu_ops by cpu.c. Tensors are fp32, C-contiguous, in PyTorch's logical layout, except a
 * NATIVE 4-D one whose channels split into whole blocks: that one is oneDNN's nChwBc (see
 * cpu_blocking), which its convolutions read and write without converting.
 */
#ifndef SELFSUP_NN_CPU_H
#define SELFSUP_NN_CPU_H

#include "../backend.h"

#include <oneapi/dnnl/dnnl.h>

/* The first element of a tensor (its allocation plus its offset). */
float *cpu_ptr(const eng_tensor *t);

/* How t's elements sit: 0 for the logical order, or B for nChwBc — N, C/B channel blocks, H, W,
 * then B channels innermost. That is a NATIVE 4-D tensor's order when B divides C; B is the
 * block oneDNN's direct convolutions use on this CPU (16 with AVX-512, else 8). */
int cpu_blocking(const eng_tensor *t);
/* Converts a 4-D tensor of shape sh between the logical order and nChwBc (b = B): into the
 * blocked one when to_blocked, else out of it; `add`: adds into `to` instead of overwriting. */
void cpu_reorder_blocked(const float *from, float *to, const eng_shape *sh, int b, bool to_blocked, bool add);

/* An N×C×H×W (or N×C) tensor as the norms walk it: N samples of C channel planes of S = H·W
 * values (S = 1 for 2-D); element (n, c, s) lives at (n·C + c)·S + s. */
typedef struct {
    int64_t n, c, s;
} cpu_ncs;
cpu_ncs cpu_ncs_of(const eng_tensor *x);
/* t[c], or `fallback` when t is NULL (an affine-free norm's γ = 1, β = 0). */
double cpu_at_or(const eng_tensor *t, int64_t c, double fallback);

/* The hot loops (elementwise layers, batch norm) are compiled three times, for AVX-512, AVX2
 * and the baseline, and the loader picks one for the CPU it runs on (GCC's target_clones).
 * -ffp-contract=off holds in every version, so only the order of the SIMD sums differs. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_HOT
#endif

/* C = op(A)·op(B) + beta·C on oneDNN's sgemm, row-major; op is 'N' or 'T', A is M×K and B is
 * K×N after op (linear.c). */
void cpu_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
               int64_t ldb, float beta, float *c, int64_t ldc);

void cpu_relu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cpu_relu_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx);
void cpu_sigmoid_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cpu_sigmoid_backward(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx);
void cpu_silu_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cpu_silu_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);
void cpu_channel_scale_forward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *y);
void cpu_channel_scale_backward(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *dy, tensor_ref *dx,
                                tensor_ref *ds);
void cpu_linear_forward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *b, tensor_ref *y);
void cpu_linear_backward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *dy, tensor_ref *dx,
                         tensor_ref *dw, tensor_ref *db);
void cpu_add_forward(eng_backend *be, tensor_ref *a, tensor_ref *b, bool relu, tensor_ref *y);
void cpu_add_backward(eng_backend *be, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *da, tensor_ref *db);
void cpu_l2norm_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cpu_l2norm_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);
void cpu_dropout_forward(eng_backend *be, float p, uint64_t step, tensor_ref *x, tensor_ref *y);
void cpu_dropout_backward(eng_backend *be, float p, uint64_t step, tensor_ref *dy, tensor_ref *dx);
void cpu_sgd_step_many(eng_backend *be, const eng_sgd_item *items, int n);
void cpu_adam_step_many(eng_backend *be, const eng_adam_item *items, int n);
void cpu_ema(eng_backend *be, float keep, float take, tensor_ref *src, tensor_ref *dst);
void cpu_bank_scores_forward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *x, tensor_ref *y);
void cpu_bank_scores_backward(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *dy, tensor_ref *dx);
void cpu_scale(eng_backend *be, float alpha, tensor_ref *x);
void cpu_argmax_rows(eng_backend *be, tensor_ref *x, int64_t *out);
double cpu_sum_squares(eng_backend *be, tensor_ref *x);
void cpu_sum_squares_many(eng_backend *be, tensor_ref *const *xs, int n, double *out);
double cpu_info_nce(eng_backend *be, tensor_ref *logits, float scale, tensor_ref *pos, tensor_ref *neg,
                    tensor_ref *dlogits);
double cpu_cross_entropy(eng_backend *be, tensor_ref *x, float scale, const int64_t *target,
                         const float *weight, int64_t ignore_index, tensor_ref *dx);
double cpu_bce_logits(eng_backend *be, tensor_ref *x, const int64_t *target, tensor_ref *dx);
int cpu_sinkhorn(eng_backend *be, tensor_ref *x, tensor_ref *queue, double epsilon, int iters, bool hard,
                 tensor_ref *q, const eng_reducer *across);
double cpu_soft_cross_entropy(eng_backend *be, tensor_ref *x, float scale, tensor_ref *q, double g,
                              tensor_ref *dx);

/* convolution and batch norm (conv.c, batchnorm.c) */

/* A prepared layer (nn.h's eng_plan). Every kind of plan starts with this header, so
 * cpu_plan_free can free any of them without knowing its kind. */
enum { CPU_PLAN_CONV = 1 };
struct eng_plan {
    int kind;
    void (*destroy)(struct eng_plan *plan);
};
void cpu_plan_free(eng_backend *be, eng_plan *plan);
eng_plan *cpu_conv_plan(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias);
void cpu_conv_forward(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *b,
                      tensor_ref *y);
void cpu_conv_backward(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *dy,
                       tensor_ref *dx, tensor_ref *dw, tensor_ref *db);
void cpu_conv_bn_forward_eval(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, double eps,
                              tensor_ref *gamma, tensor_ref *beta, tensor_ref *mean, tensor_ref *var,
                              tensor_ref *residual, eng_eval_act act, tensor_ref *y);
/* Give attr a sum post-op: the primitive adds into its destination instead of overwriting it (a
 * reorder back to our layout that accumulates a gradient, as nn.h's gradients do). */
void cpu_dnnl_attr_add_sum(dnnl_primitive_attr_t attr);
/* The backward of a convolution with a 1 × 1 output as two matrix products (conv_gemm.c): made
 * for groups 1 and no bias, else cpu_conv_gemm_new gives NULL and oneDNN's primitives do the
 * work. Same contract as cpu_conv_backward (dx, dw may be NULL; they accumulate). */
typedef struct cpu_conv_gemm cpu_conv_gemm;
cpu_conv_gemm *cpu_conv_gemm_new(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias);
void cpu_conv_gemm_free(cpu_conv_gemm *g);
void cpu_conv_gemm_backward(cpu_conv_gemm *g, const float *x, const float *w, const float *dy, float *dx, float *dw);
/* The weight gradient of a depthwise convolution (groups = channels, one filter each, no bias,
 * no dilation, square kernel) by sums per channel and tap (conv_dw.c); NULL for any other. */
typedef struct cpu_conv_dw cpu_conv_dw;
cpu_conv_dw *cpu_conv_dw_new(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias);
void cpu_conv_dw_free(cpu_conv_dw *g);
/* dw += ∂L/∂w for x and dy in PyTorch's layout. */
void cpu_conv_dw_backward_weights(cpu_conv_dw *g, const float *x, const float *dy, float *dw);
void cpu_batchnorm_forward_train(eng_backend *be, double momentum, double eps, tensor_ref *x,
                                 tensor_ref *gamma, tensor_ref *beta, tensor_ref *running_mean,
                                 tensor_ref *running_var, tensor_ref *save_mean, tensor_ref *save_invstd,
                                 bool relu, tensor_ref *y, const eng_reducer *across);
void cpu_batchnorm_forward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                tensor_ref *beta, tensor_ref *running_mean, tensor_ref *running_var,
                                bool relu, tensor_ref *y);
void cpu_batchnorm_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                            tensor_ref *save_invstd, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *dx,
                            tensor_ref *dgamma, tensor_ref *dbeta, const eng_reducer *across);
void cpu_batchnorm_backward_eval(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                 tensor_ref *running_mean, tensor_ref *running_var, tensor_ref *dy,
                                 tensor_ref *dx, tensor_ref *dgamma, tensor_ref *dbeta);

/* layer norm (layernorm.c) */
void cpu_layernorm2d_forward(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma, tensor_ref *beta,
                             tensor_ref *save_mean, tensor_ref *save_invstd, tensor_ref *y);
void cpu_layernorm2d_backward(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                              tensor_ref *save_invstd, tensor_ref *dy, tensor_ref *dx, tensor_ref *dgamma,
                              tensor_ref *dbeta);

/* local response normalisation (lrn.c) */
void cpu_lrn_forward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *y);
void cpu_lrn_backward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);

/* pooling (pool.c) */
void cpu_maxpool_forward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y);
void cpu_maxpool_backward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *dy,
                          tensor_ref *dx);
void cpu_avgpool_forward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y);
void cpu_avgpool_backward(eng_backend *be, const eng_pool_desc *d, tensor_ref *dy, tensor_ref *dx);
void cpu_adaptive_avgpool_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cpu_adaptive_avgpool_backward(eng_backend *be, tensor_ref *dy, tensor_ref *dx);
void cpu_adaptive_maxpool_forward(eng_backend *be, tensor_ref *x, tensor_ref *y);
void cpu_adaptive_maxpool_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);

#endif

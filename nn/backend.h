/*
 * backend.h — what a backend implements: the table of operations behind nn.h.
 *
 * nn.c checks shapes and dispatches every eng_* call through this table, so a backend only
 * does the arithmetic, and a new one (cuda) is a new table, never a change to model code.
 * Each backend keeps its own state in `impl`.
 */
#ifndef SELFSUP_NN_BACKEND_H
#define SELFSUP_NN_BACKEND_H

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An operation's tensor: its shape and memory; outputs are written through it. */
typedef const eng_tensor tensor_ref;

typedef struct {
    const char *name;
    int (*open)(eng_backend *be, const eng_backend_options *opt, char **err);
    void (*close)(eng_backend *be);

    size_t (*bytes)(eng_backend *be, const eng_shape *s);
    void *(*alloc)(eng_backend *be, size_t bytes);
    void (*free)(eng_backend *be, void *base);
    void (*zero)(eng_backend *be, tensor_ref *t);
    void (*upload)(eng_backend *be, tensor_ref *dst, const float *src);
    void (*download)(eng_backend *be, tensor_ref *src, float *dst);
    void (*sync)(eng_backend *be);
    /* Optional (NULL where tensors are host memory): t's device address, its queued work done. */
    void *(*device_address)(eng_backend *be, tensor_ref *t);
    /* Optional, with device_address: the backend's queue; t's address without waiting. */
    void *(*device_queue)(eng_backend *be);
    void *(*device_address_queued)(eng_backend *be, tensor_ref *t);
    size_t (*memory_peak)(eng_backend *be);
    /* Optional (NULL where tensors are host memory): page-lock host memory inputs come from. */
    bool (*pin_host)(eng_backend *be, void *p, size_t bytes, char **why);
    void (*unpin_host)(eng_backend *be, void *p);
    void (*copy)(eng_backend *be, tensor_ref *src, tensor_ref *dst);
    /* x[n, c, h, w] = lut[c·256 + src[((n·H + h)·W + w)·src_c + map[c]]]: nn.c works the table */
    void (*upload_images)(eng_backend *be, tensor_ref *x, const uint8_t *src, int src_c, const int *map,
                          const float *lut);

    void (*relu_forward)(eng_backend *be, tensor_ref *x, tensor_ref *y);
    void (*relu_backward)(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx);
    void (*sigmoid_forward)(eng_backend *be, tensor_ref *x, tensor_ref *y);
    void (*sigmoid_backward)(eng_backend *be, tensor_ref *y, tensor_ref *dy, tensor_ref *dx);
    void (*silu_forward)(eng_backend *be, tensor_ref *x, tensor_ref *y);
    void (*silu_backward)(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);
    /* x N×C×H×W, s N·C values (N×C×1×1 or N×C); dx or ds NULL, not both (nn.c skips that) */
    void (*channel_scale_forward)(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *y);
    void (*channel_scale_backward)(eng_backend *be, tensor_ref *x, tensor_ref *s, tensor_ref *dy, tensor_ref *dx,
                                   tensor_ref *ds);
    void (*linear_forward)(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *b, tensor_ref *y);
    void (*linear_backward)(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *dy, tensor_ref *dx,
                            tensor_ref *dw, tensor_ref *db);
    /* relu / relu_y: the add is followed by a ReLU, fused (y is its output) */
    void (*add_forward)(eng_backend *be, tensor_ref *a, tensor_ref *b, bool relu, tensor_ref *y);
    void (*add_backward)(eng_backend *be, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *da, tensor_ref *db);
    void (*l2norm_forward)(eng_backend *be, tensor_ref *x, tensor_ref *y);
    void (*l2norm_backward)(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);
    /* idx: n × k row numbers of bank, checked by nn.c */
    void (*bank_scores_forward)(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *x, tensor_ref *y);
    void (*bank_scores_backward)(eng_backend *be, tensor_ref *bank, const int64_t *idx, tensor_ref *dy,
                                 tensor_ref *dx);
    void (*dropout_forward)(eng_backend *be, float p, uint64_t step, tensor_ref *x, tensor_ref *y);
    void (*dropout_backward)(eng_backend *be, float p, uint64_t step, tensor_ref *dy, tensor_ref *dx);
    /* checked items: same shapes, logical layout, buf set exactly when momentum != 0 */
    void (*sgd_step_many)(eng_backend *be, const eng_sgd_item *items, int n);
    void (*adam_step_many)(eng_backend *be, const eng_adam_item *items, int n);
    /* dst = dst·keep + src·take: nn.c rounds m and 1 − m to float32 as PyTorch does */
    void (*ema)(eng_backend *be, float keep, float take, tensor_ref *src, tensor_ref *dst);
    void (*scale)(eng_backend *be, float alpha, tensor_ref *x);
    void (*argmax_rows)(eng_backend *be, tensor_ref *x, int64_t *out);
    double (*sum_squares)(eng_backend *be, tensor_ref *x);
    void (*sum_squares_many)(eng_backend *be, tensor_ref *const *xs, int n, double *out);
    double (*info_nce)(eng_backend *be, tensor_ref *logits, float scale, tensor_ref *pos, tensor_ref *neg,
                       tensor_ref *dlogits);
    double (*cross_entropy)(eng_backend *be, tensor_ref *x, float scale, const int64_t *target,
                            const float *weight, int64_t ignore_index, tensor_ref *dx);
    double (*bce_logits)(eng_backend *be, tensor_ref *x, const int64_t *target, tensor_ref *dx);
    int (*sinkhorn)(eng_backend *be, tensor_ref *x, tensor_ref *queue, double epsilon, int iters, bool hard,
                    tensor_ref *q, const eng_reducer *across);
    double (*soft_cross_entropy)(eng_backend *be, tensor_ref *x, float scale, tensor_ref *q, double g,
                                 tensor_ref *dx);

    void (*plan_free)(eng_backend *be, eng_plan *plan);
    eng_plan *(*conv_plan)(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w,
                           bool bias);
    void (*conv_forward)(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *b,
                         tensor_ref *y);
    void (*conv_backward)(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *dy,
                          tensor_ref *dx, tensor_ref *dw, tensor_ref *db);
    void (*conv_bn_forward_eval)(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, double eps,
                                 tensor_ref *gamma, tensor_ref *beta, tensor_ref *mean, tensor_ref *var,
                                 tensor_ref *residual, eng_eval_act act, tensor_ref *y);
    void (*batchnorm_forward_train)(eng_backend *be, double momentum, double eps, tensor_ref *x,
                                    tensor_ref *gamma, tensor_ref *beta, tensor_ref *running_mean,
                                    tensor_ref *running_var, tensor_ref *save_mean, tensor_ref *save_invstd,
                                    bool relu, tensor_ref *y, const eng_reducer *across);
    void (*batchnorm_forward_eval)(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                   tensor_ref *beta, tensor_ref *running_mean, tensor_ref *running_var,
                                   bool relu, tensor_ref *y);
    void (*batchnorm_backward)(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                               tensor_ref *save_invstd, tensor_ref *relu_y, tensor_ref *dy, tensor_ref *dx,
                               tensor_ref *dgamma, tensor_ref *dbeta, const eng_reducer *across);
    void (*batchnorm_backward_eval)(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                    tensor_ref *running_mean, tensor_ref *running_var, tensor_ref *dy,
                                    tensor_ref *dx, tensor_ref *dgamma, tensor_ref *dbeta);
    void (*layernorm2d_forward)(eng_backend *be, double eps, tensor_ref *x, tensor_ref *gamma,
                                tensor_ref *beta, tensor_ref *save_mean, tensor_ref *save_invstd,
                                tensor_ref *y);
    void (*layernorm2d_backward)(eng_backend *be, tensor_ref *x, tensor_ref *gamma, tensor_ref *save_mean,
                                 tensor_ref *save_invstd, tensor_ref *dy, tensor_ref *dx, tensor_ref *dgamma,
                                 tensor_ref *dbeta);
    /* x N×C×H×W, y not x, size odd; dx not NULL (nn.c checks and skips) */
    void (*lrn_forward)(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *y);
    void (*lrn_backward)(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);

    void (*maxpool_forward)(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y);
    void (*maxpool_backward)(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *dy,
                             tensor_ref *dx);
    void (*avgpool_forward)(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y);
    void (*avgpool_backward)(eng_backend *be, const eng_pool_desc *d, tensor_ref *dy, tensor_ref *dx);
    void (*adaptive_avgpool_forward)(eng_backend *be, tensor_ref *x, tensor_ref *y);
    void (*adaptive_avgpool_backward)(eng_backend *be, tensor_ref *dy, tensor_ref *dx);
    void (*adaptive_maxpool_forward)(eng_backend *be, tensor_ref *x, tensor_ref *y);
    void (*adaptive_maxpool_backward)(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx);
} eng_ops;

struct eng_backend {
    const eng_ops *ops;
    eng_backend_options opt;
    void *impl;
};

/* The name of the first operation `ops` leaves NULL, or NULL when it has them all: a backend
 * must implement every one (eng_backend_open refuses one that does not, naming the gap). */
const char *eng_ops_missing(const eng_ops *ops);

extern const eng_ops eng_cpu_ops;
#ifdef HAVE_CUDA
extern const eng_ops eng_cuda_ops;
#endif

#ifdef __cplusplus
}
#endif

#endif

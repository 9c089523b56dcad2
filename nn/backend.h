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

typedef const eng_tensor T; /* short for the many signatures below */

typedef struct {
    const char *name;
    int (*open)(eng_backend *be, const eng_backend_options *opt, char **err);
    void (*close)(eng_backend *be);

    size_t (*bytes)(eng_backend *be, const eng_shape *s);
    void *(*alloc)(eng_backend *be, size_t bytes);
    void (*free)(eng_backend *be, void *base);
    void (*zero)(eng_backend *be, T *t);
    void (*upload)(eng_backend *be, T *dst, const float *src);
    void (*download)(eng_backend *be, T *src, float *dst);
    void (*sync)(eng_backend *be);
    void (*copy)(eng_backend *be, T *src, T *dst);
    /* x[n, c, h, w] = lut[c·256 + src[((n·H + h)·W + w)·src_c + map[c]]]: nn.c works the table */
    void (*upload_images)(eng_backend *be, T *x, const uint8_t *src, int src_c, const int *map, const float *lut);

    void (*relu_forward)(eng_backend *be, T *x, T *y);
    void (*relu_backward)(eng_backend *be, T *y, T *dy, T *dx);
    void (*linear_forward)(eng_backend *be, T *x, T *w, T *b, T *y);
    void (*linear_backward)(eng_backend *be, T *x, T *w, T *dy, T *dx, T *dw, T *db);
    /* relu / relu_y: the add is followed by a ReLU, fused (y is its output) */
    void (*add_forward)(eng_backend *be, T *a, T *b, bool relu, T *y);
    void (*add_backward)(eng_backend *be, T *relu_y, T *dy, T *da, T *db);
    void (*l2norm_forward)(eng_backend *be, T *x, T *y);
    void (*l2norm_backward)(eng_backend *be, T *x, T *dy, T *dx);
    void (*dropout_forward)(eng_backend *be, float p, uint64_t step, T *x, T *y);
    void (*dropout_backward)(eng_backend *be, float p, uint64_t step, T *dy, T *dx);
    /* checked items: same shapes, logical layout, buf set exactly when momentum != 0 */
    void (*sgd_step_many)(eng_backend *be, const eng_sgd_item *items, int n);
    void (*adam_step_many)(eng_backend *be, const eng_adam_item *items, int n);
    double (*sum_squares)(eng_backend *be, T *x);
    void (*sum_squares_many)(eng_backend *be, T *const *xs, int n, double *out);
    double (*info_nce)(eng_backend *be, T *logits, float scale, T *pos, T *neg, T *dlogits);
    double (*cross_entropy)(eng_backend *be, T *x, float scale, const int64_t *target, const float *weight,
                            int64_t ignore_index, T *dx);
    double (*bce_logits)(eng_backend *be, T *x, const int64_t *target, T *dx);
    void (*sinkhorn)(eng_backend *be, T *x, T *queue, double epsilon, int iters, bool hard, T *q);
    double (*soft_cross_entropy)(eng_backend *be, T *x, float scale, T *q, double g, T *dx);

    void (*plan_free)(eng_backend *be, eng_plan *plan);
    eng_plan *(*conv_plan)(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w,
                           bool bias);
    void (*conv_forward)(eng_backend *be, eng_plan *plan, T *x, T *w, T *b, T *y);
    void (*conv_backward)(eng_backend *be, eng_plan *plan, T *x, T *w, T *dy, T *dx, T *dw, T *db);
    void (*conv_bn_forward_eval)(eng_backend *be, eng_plan *plan, T *x, T *w, double eps, T *gamma, T *beta,
                                 T *mean, T *var, T *residual, bool relu, T *y);
    void (*batchnorm_forward_train)(eng_backend *be, double momentum, double eps, T *x, T *gamma, T *beta,
                                    T *running_mean, T *running_var, T *save_mean, T *save_invstd, bool relu,
                                    T *y);
    void (*batchnorm_forward_eval)(eng_backend *be, double eps, T *x, T *gamma, T *beta, T *running_mean,
                                   T *running_var, bool relu, T *y);
    void (*batchnorm_backward)(eng_backend *be, T *x, T *gamma, T *save_mean, T *save_invstd, T *relu_y, T *dy,
                               T *dx, T *dgamma, T *dbeta);
    void (*batchnorm_backward_eval)(eng_backend *be, double eps, T *x, T *gamma, T *running_mean, T *running_var,
                                    T *dy, T *dx, T *dgamma, T *dbeta);
    void (*layernorm2d_forward)(eng_backend *be, double eps, T *x, T *gamma, T *beta, T *save_mean,
                                T *save_invstd, T *y);
    void (*layernorm2d_backward)(eng_backend *be, T *x, T *gamma, T *save_mean, T *save_invstd, T *dy, T *dx,
                                 T *dgamma, T *dbeta);

    void (*maxpool_forward)(eng_backend *be, const eng_pool_desc *d, T *x, T *y);
    void (*maxpool_backward)(eng_backend *be, const eng_pool_desc *d, T *x, T *dy, T *dx);
    void (*avgpool_forward)(eng_backend *be, const eng_pool_desc *d, T *x, T *y);
    void (*avgpool_backward)(eng_backend *be, const eng_pool_desc *d, T *dy, T *dx);
    void (*adaptive_avgpool_forward)(eng_backend *be, T *x, T *y);
    void (*adaptive_avgpool_backward)(eng_backend *be, T *dy, T *dx);
    void (*adaptive_maxpool_forward)(eng_backend *be, T *x, T *y);
    void (*adaptive_maxpool_backward)(eng_backend *be, T *x, T *dy, T *dx);
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

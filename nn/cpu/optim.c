/*
 * optim.c — the cpu backend's optimizer updates: SGD (momentum, Nesterov, weight decay, LARC's
 * gradient scale) and Adam/AdamW, one pass over a parameter tensor, and the sum of squares
 * LARC's norms need.
 *
 * Each update rounds after every operation in the order torch.optim (v1.13) writes it, with
 * the Python-float scalars (1 − β1, the bias corrections, the step size) computed in double
 * and then used as float32, as ATen does with a scalar argument. -ffp-contract=off keeps the
 * compiler from fusing them. Elements are independent, so threads change nothing.
 */
#include "cpu.h"

#include <math.h>

CPU_HOT static void sgd_momentum(const float *g, float *p, float *buf, int64_t n, float lr, float wd, float scale,
                                 float mom, bool nesterov, bool first)
{
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++) {
        float d = (g[i] + wd * p[i]) * scale;
        float b = first ? d : buf[i] * mom + d;
        buf[i] = b;
        p[i] = p[i] - lr * (nesterov ? d + mom * b : b);
    }
}

CPU_HOT static void sgd_plain(const float *g, float *p, int64_t n, float lr, float wd, float scale)
{
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++)
        p[i] = p[i] - lr * ((g[i] + wd * p[i]) * scale);
}

void cpu_sgd_step(eng_backend *be, const eng_sgd_args *a, T *p, T *g, T *buf)
{
    (void)be;
    int64_t n = eng_numel(&p->shape);
    if (buf)
        sgd_momentum(cpu_ptr(g), cpu_ptr(p), cpu_ptr(buf), n, a->lr, a->weight_decay, a->grad_scale, a->momentum,
                     a->nesterov, a->first);
    else
        sgd_plain(cpu_ptr(g), cpu_ptr(p), n, a->lr, a->weight_decay, a->grad_scale);
}

/* The per-step float32 constants of one Adam update. */
typedef struct {
    float decay, wd, one_minus_b1, one_minus_b2, b1, b2, bc2_sqrt, eps, neg_step_size;
} adam_consts;

static adam_consts adam_consts_of(const eng_adam_args *a)
{
    double t = (double)a->step;
    return (adam_consts){
        .decay = (float)(1.0 - a->lr * a->weight_decay),
        .wd = (float)a->weight_decay,
        .one_minus_b1 = (float)(1.0 - a->beta1),
        .one_minus_b2 = (float)(1.0 - a->beta2),
        .b1 = (float)a->beta1,
        .b2 = (float)a->beta2,
        .bc2_sqrt = (float)sqrt(1.0 - pow(a->beta2, t)),
        .eps = (float)a->eps,
        .neg_step_size = (float)(-(a->lr / (1.0 - pow(a->beta1, t)))),
    };
}

CPU_HOT static void adam_pass(const float *g, float *p, float *m, float *v, int64_t n, adam_consts c, bool decoupled)
{
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++) {
        float w = decoupled ? p[i] * c.decay : p[i];
        float gi = decoupled ? g[i] : g[i] + c.wd * w;
        float mi = m[i] * c.b1 + c.one_minus_b1 * gi;
        float vi = v[i] * c.b2 + c.one_minus_b2 * gi * gi; /* addcmul: (value·t1)·t2 */
        float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
        m[i] = mi, v[i] = vi;
        p[i] = w + c.neg_step_size * mi / denom; /* addcdiv: (value·t1)/t2 */
    }
}

void cpu_adam_step(eng_backend *be, const eng_adam_args *a, T *p, T *g, T *m, T *v)
{
    (void)be;
    adam_pass(cpu_ptr(g), cpu_ptr(p), cpu_ptr(m), cpu_ptr(v), eng_numel(&p->shape), adam_consts_of(a), a->decoupled);
}

CPU_HOT static double sum_squares(const float *x, int64_t n)
{
    double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s) if (n >= 65536)
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

double cpu_sum_squares(eng_backend *be, T *x)
{
    (void)be;
    return sum_squares(cpu_ptr(x), eng_numel(&x->shape));
}

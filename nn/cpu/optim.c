/*
 * optim.c — the cpu backend's optimizer updates: SGD (momentum, Nesterov, weight decay, LARC's
 * gradient scale) and Adam/AdamW, one pass over a parameter tensor, the sum of squares
 * LARC's norms need, and a momentum encoder's moving average.
 *
 * Each update rounds after every operation in the order torch.optim (v1.13) writes it, with
 * the Python-float scalars (1 − β1, the bias corrections, the step size) computed in double
 * and then used as float32, as ATen does with a scalar argument. -ffp-contract=off keeps the
 * compiler from fusing them. Elements are independent, so threads change nothing.
 *
 * A step updates every tensor in one parallel region: the tensors are cut into chunks of
 * CHUNK elements (the last of each shorter) and the threads share out the chunks, so a
 * model's hundreds of small tensors cost one fork and join, not one each.
 */
#include "cpu.h"

#include "util.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK = 32768 };

/* Chunk k of the list: item, first element, length. */
typedef struct {
    int item;
    int64_t start, len;
} chunk;

/* The parameter tensor of item i: items of `stride` bytes, its pointer at `p_offset`. */
static const eng_tensor *item_param(const void *items, size_t stride, size_t p_offset, int i)
{
    const eng_tensor *t;
    memcpy(&t, (const char *)items + (size_t)i * stride + p_offset, sizeof t);
    return t;
}

/* fn(item, start, len) over every CHUNK-element piece of every item's tensors, all in one
 * parallel region. */
static void for_each_chunk(const void *items, size_t stride, size_t p_offset, int n,
                           void (*fn)(const void *item, int64_t start, int64_t len))
{
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += (eng_numel(&item_param(items, stride, p_offset, i)->shape) + CHUNK - 1) / CHUNK;
    chunk *c = xmalloc((size_t)(total > 0 ? total : 1) * sizeof *c);
    int nc = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = eng_numel(&item_param(items, stride, p_offset, i)->shape);
        for (int64_t s = 0; s < numel; s += CHUNK)
            c[nc++] = (chunk){.item = i, .start = s, .len = numel - s < CHUNK ? numel - s : CHUNK};
    }
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int k = 0; k < nc; k++)
        fn((const char *)items + (size_t)c[k].item * stride, c[k].start, c[k].len);
    free(c);
}

CPU_HOT static void sgd_momentum(const float *g, float *p, float *buf, int64_t n, float lr, float wd, float scale,
                                 float mom, bool nesterov, bool first)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float d = (g[i] + wd * p[i]) * scale;
        float b = first ? d : buf[i] * mom + d;
        buf[i] = b;
        p[i] = p[i] - lr * (nesterov ? d + mom * b : b);
    }
}

CPU_HOT static void sgd_plain(const float *g, float *p, int64_t n, float lr, float wd, float scale)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        p[i] = p[i] - lr * ((g[i] + wd * p[i]) * scale);
}

static void sgd_chunk(const void *item, int64_t s, int64_t len)
{
    const eng_sgd_item *it = item;
    const eng_sgd_args *a = &it->a;
    float *p = cpu_ptr(it->p) + s, *g = cpu_ptr(it->g) + s;
    if (it->buf)
        sgd_momentum(g, p, cpu_ptr(it->buf) + s, len, a->lr, a->weight_decay, a->grad_scale, a->momentum,
                     a->nesterov, a->first);
    else
        sgd_plain(g, p, len, a->lr, a->weight_decay, a->grad_scale);
}

void cpu_sgd_step_many(eng_backend *be, const eng_sgd_item *items, int n)
{
    (void)be;
    for_each_chunk(items, sizeof *items, offsetof(eng_sgd_item, p), n, sgd_chunk);
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
#pragma omp simd
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

static void adam_chunk(const void *item, int64_t s, int64_t len)
{
    const eng_adam_item *it = item;
    adam_pass(cpu_ptr(it->g) + s, cpu_ptr(it->p) + s, cpu_ptr(it->m) + s, cpu_ptr(it->v) + s, len,
              adam_consts_of(&it->a), it->a.decoupled);
}

void cpu_adam_step_many(eng_backend *be, const eng_adam_item *items, int n)
{
    (void)be;
    for_each_chunk(items, sizeof *items, offsetof(eng_adam_item, p), n, adam_chunk);
}

CPU_HOT static void ema(float keep, float take, const float *src, float *dst, int64_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++) {
        float kept = dst[i] * keep, taken = src[i] * take; /* two roundings, then the sum's */
        dst[i] = kept + taken;
    }
}

void cpu_ema(eng_backend *be, float keep, float take, tensor_ref *src, tensor_ref *dst)
{
    (void)be;
    ema(keep, take, cpu_ptr(src), cpu_ptr(dst), eng_numel(&src->shape));
}

CPU_HOT static double sum_squares(const float *x, int64_t n)
{
    double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s) if (n >= 65536)
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

double cpu_sum_squares(eng_backend *be, tensor_ref *x)
{
    (void)be;
    return sum_squares(cpu_ptr(x), eng_numel(&x->shape));
}

void cpu_sum_squares_many(eng_backend *be, tensor_ref *const *xs, int n, double *out)
{
    for (int i = 0; i < n; i++)
        out[i] = cpu_sum_squares(be, xs[i]);
}

/*
 * nn.c — the front of the model engine: backend lookup, shape helpers, and one checked
 * dispatch per layer (see nn.h). Shape mismatches are programming errors in model code, so
 * they abort with a message naming the layer and both shapes rather than return codes that
 * every caller would have to thread through.
 */
#include "nn.h"

#include "backend.h"
#include "log.h"
#include "util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
static const eng_ops *const BACKENDS[] = {&eng_cpu_ops, &eng_cuda_ops};
#define BACKEND_NAMES "cpu, cuda"
#else
static const eng_ops *const BACKENDS[] = {&eng_cpu_ops};
#define BACKEND_NAMES "cpu"
#endif

/* Every operation of eng_ops by name, for eng_ops_missing. */
#define OP(name) {#name, offsetof(eng_ops, name)}
static const struct {
    const char *name;
    size_t at;
} OPS[] = {
    OP(open), OP(close), OP(bytes), OP(alloc), OP(free), OP(zero), OP(upload), OP(download), OP(sync),
    OP(memory_peak), OP(copy), OP(upload_images), OP(relu_forward), OP(relu_backward), OP(sigmoid_forward),
    OP(sigmoid_backward), OP(silu_forward), OP(silu_backward), OP(channel_scale_forward),
    OP(channel_scale_backward), OP(linear_forward), OP(linear_backward), OP(add_forward), OP(add_backward), OP(l2norm_forward), OP(l2norm_backward), OP(bank_scores_forward), OP(bank_scores_backward), OP(dropout_forward), OP(dropout_backward),
    OP(sgd_step_many), OP(adam_step_many), OP(ema), OP(scale), OP(argmax_rows), OP(sum_squares), OP(sum_squares_many), OP(info_nce), OP(cross_entropy),
    OP(bce_logits), OP(sinkhorn), OP(soft_cross_entropy), OP(plan_free), OP(conv_plan), OP(conv_forward),
    OP(conv_backward), OP(conv_bn_forward_eval), OP(batchnorm_forward_train), OP(batchnorm_forward_eval),
    OP(batchnorm_backward), OP(batchnorm_backward_eval), OP(layernorm2d_forward), OP(layernorm2d_backward),
    OP(lrn_forward), OP(lrn_backward),
    OP(maxpool_forward), OP(maxpool_backward), OP(avgpool_forward), OP(avgpool_backward),
    OP(adaptive_avgpool_forward), OP(adaptive_avgpool_backward), OP(adaptive_maxpool_forward),
    OP(adaptive_maxpool_backward),
};
#undef OP

const char *eng_ops_missing(const eng_ops *ops)
{
    static const char nothing[sizeof(void (*)(void))];
    for (size_t i = 0; i < ARRAY_LEN(OPS); i++)
        if (memcmp((const char *)ops + OPS[i].at, nothing, sizeof nothing) == 0)
            return OPS[i].name;
    return NULL;
}

eng_backend *eng_backend_open(const char *name, const eng_backend_options *opt, char **err)
{
    for (size_t i = 0; i < ARRAY_LEN(BACKENDS); i++) {
        if (strcmp(BACKENDS[i]->name, name) != 0)
            continue;
        const char *missing = eng_ops_missing(BACKENDS[i]);
        if (missing) {
            report_failure(err, "backend '%s' lacks the operation '%s'", name, missing);
            return NULL;
        }
        eng_backend *be = xcalloc(1, sizeof *be);
        be->ops = BACKENDS[i];
        be->opt = opt ? *opt : (eng_backend_options){0};
        if (be->ops->open(be, &be->opt, err) != 0) {
            free(be);
            return NULL;
        }
        return be;
    }
    report_failure(err, "unknown backend '%s' (this build has: " BACKEND_NAMES ")", name);
    return NULL;
}

void eng_backend_close(eng_backend *be)
{
    if (!be)
        return;
    be->ops->close(be);
    free(be);
}

const char *eng_backend_name(const eng_backend *be) { return be->ops->name; }

void eng_sync(eng_backend *be) { be->ops->sync(be); }

bool eng_pin_host(eng_backend *be, void *p, size_t bytes, char **why)
{
    return !be->ops->pin_host || be->ops->pin_host(be, p, bytes, why);
}

void eng_unpin_host(eng_backend *be, void *p)
{
    if (be->ops->unpin_host)
        be->ops->unpin_host(be, p);
}

void *eng_device_address(eng_backend *be, const eng_tensor *t)
{
    return be->ops->device_address ? be->ops->device_address(be, t) : NULL;
}

void *eng_device_queue(eng_backend *be) { return be->ops->device_queue ? be->ops->device_queue(be) : NULL; }

void *eng_device_address_queued(eng_backend *be, const eng_tensor *t)
{
    return be->ops->device_address_queued ? be->ops->device_address_queued(be, t) : NULL;
}

size_t eng_memory_peak(eng_backend *be) { return be->ops->memory_peak(be); }

/* ---- shapes ------------------------------------------------------------------------------- */

int64_t eng_numel(const eng_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->dim[i];
    return n;
}

eng_shape eng_shape2(int64_t n, int64_t f) { return (eng_shape){.ndim = 2, .dim = {n, f}}; }
eng_shape eng_shape3(int64_t a, int64_t b, int64_t c) { return (eng_shape){.ndim = 3, .dim = {a, b, c}}; }

eng_shape eng_shape4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    return (eng_shape){.ndim = 4, .dim = {n, c, h, w}};
}

bool eng_shape_equal(const eng_shape *a, const eng_shape *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    return true;
}

static void shape_text(const eng_shape *s, char *out, size_t size)
{
    size_t n = (size_t)snprintf(out, size, "[");
    for (int i = 0; i < s->ndim && n < size; i++)
        n += (size_t)snprintf(out + n, size - n, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
    if (n < size)
        snprintf(out + n, size - n, "]");
}

/* Abort when `got` is not `want`: model code built the layer wrongly. */
static void expect_shape(const char *layer, const char *what, const eng_tensor *got, const eng_shape *want)
{
    if (eng_shape_equal(&got->shape, want))
        return;
    char a[96], b[96];
    shape_text(&got->shape, a, sizeof a);
    shape_text(want, b, sizeof b);
    invariant_failed("%s: %s has shape %s, expected %s", layer, what, a, b);
}

static void expect_same(const char *layer, const char *what, const eng_tensor *got, const eng_tensor *like)
{
    if (got)
        expect_shape(layer, what, got, &like->shape);
}

/* Abort when a layer that reads and writes only the logical layout is handed a NATIVE tensor
 * (nn.h lists the few that take one). NULL entries are skipped. */
static void expect_logical(const char *layer, const eng_tensor *const *ts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ts[i] && ts[i]->layout != ENG_LAYOUT_LOGICAL)
            invariant_failed("%s: tensor %zu is in the backend's native layout; this layer takes logical ones",
                layer, i + 1);
}
#define LOGICAL(layer, ...) \
    expect_logical((layer), (const eng_tensor *const[]){__VA_ARGS__}, \
                   sizeof((const eng_tensor *const[]){__VA_ARGS__}) / sizeof(const eng_tensor *))

/* Abort unless the tensors (NULL entries skipped) share one layout: an elementwise layer, or
 * one that walks its operands together, takes the native layout only for all of them. */
static void expect_one_layout(const char *layer, const eng_tensor *const *ts, size_t n)
{
    const eng_tensor *first = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        if (!first)
            first = ts[i];
        else if (ts[i]->layout != first->layout)
            invariant_failed("%s: tensor %zu is not in the layout of the others", layer, i + 1);
    }
}
#define ONE_LAYOUT(layer, ...) \
    expect_one_layout((layer), (const eng_tensor *const[]){__VA_ARGS__}, \
                      sizeof((const eng_tensor *const[]){__VA_ARGS__}) / sizeof(const eng_tensor *))

/* ---- memory ------------------------------------------------------------------------------ */

void eng_upload_images(eng_backend *be, const eng_tensor *x, const uint8_t *src, int src_c, const int *map,
                       const float norm[9])
{
    int64_t c = x->shape.dim[1];
    if (x->shape.ndim != 4 || c < 1 || c > 3)
        invariant_failed("upload images: x must be N×C×H×W with 1 to 3 channels");
    LOGICAL("upload images", x);
    /* every channel's 256 possible values, worked once in torch's order of float steps */
    float lut[3 * 256];
    for (int64_t k = 0; k < c; k++) {
        int s = map[k];
        if (s < 0 || s >= src_c)
            invariant_failed("upload images: channel %lld reads source channel %d of %d", (long long)k, s, src_c);
        for (int v = 0; v < 256; v++)
            lut[k * 256 + v] = ((float)v / norm[s] - norm[3 + s]) / norm[6 + s];
    }
    be->ops->upload_images(be, x, src, src_c, map, lut);
}

size_t eng_bytes(eng_backend *be, const eng_shape *s) { return be->ops->bytes(be, s); }
void *eng_alloc(eng_backend *be, size_t bytes) { return be->ops->alloc(be, bytes); }
void eng_free(eng_backend *be, void *base) { be->ops->free(be, base); }

eng_tensor eng_tensor_new(eng_backend *be, eng_shape shape)
{
    return (eng_tensor){.shape = shape, .base = eng_alloc(be, eng_bytes(be, &shape)), .offset = 0};
}

void eng_tensor_free(eng_backend *be, eng_tensor *t)
{
    eng_free(be, t->base);
    t->base = NULL;
}

eng_tensor eng_reshape(const eng_tensor *t, eng_shape shape)
{
    if (eng_numel(&shape) != eng_numel(&t->shape))
        invariant_failed("reshape: %lld elements cannot become %lld", (long long)eng_numel(&t->shape),
            (long long)eng_numel(&shape));
    if (t->layout != ENG_LAYOUT_LOGICAL && !eng_shape_equal(&shape, &t->shape))
        invariant_failed("reshape: a tensor in the backend's native layout keeps its shape");
    eng_tensor v = *t;
    v.shape = shape;
    return v;
}

eng_tensor eng_rows(eng_backend *be, const eng_tensor *t, int64_t first, int64_t count)
{
    if (t->shape.ndim < 1 || first < 0 || count < 0 || first + count > t->shape.dim[0])
        invariant_failed("rows: [%lld, %lld) of a tensor of %lld rows", (long long)first, (long long)(first + count),
            (long long)(t->shape.ndim ? t->shape.dim[0] : 0));
    if (t->layout != ENG_LAYOUT_LOGICAL)
        invariant_failed("rows: a tensor in the backend's native layout has no row views");
    eng_shape row = t->shape, head = t->shape;
    row.dim[0] = count;
    head.dim[0] = first;
    eng_tensor v = *t;
    v.offset += eng_bytes(be, &head);
    v.shape = row;
    return v;
}

void eng_zero(eng_backend *be, const eng_tensor *t) { be->ops->zero(be, t); }
void eng_upload(eng_backend *be, const eng_tensor *dst, const float *src) { be->ops->upload(be, dst, src); }
void eng_download(eng_backend *be, const eng_tensor *src, float *dst) { be->ops->download(be, src, dst); }

void eng_copy(eng_backend *be, const eng_tensor *src, const eng_tensor *dst)
{
    if (eng_numel(&src->shape) != eng_numel(&dst->shape))
        invariant_failed("copy: %lld elements into %lld", (long long)eng_numel(&src->shape),
            (long long)eng_numel(&dst->shape));
    be->ops->copy(be, src, dst);
}

/* ---- layers ------------------------------------------------------------------------------ */

void eng_relu_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y)
{
    expect_same("relu", "output", y, x);
    ONE_LAYOUT("relu", x, y);
    be->ops->relu_forward(be, x, y);
}

void eng_relu_backward(eng_backend *be, const eng_tensor *y, const eng_tensor *dy, const eng_tensor *dx)
{
    expect_same("relu backward", "dy", dy, y);
    expect_same("relu backward", "dx", dx, y);
    ONE_LAYOUT("relu backward", y, dy, dx);
    if (dx)
        be->ops->relu_backward(be, y, dy, dx);
}

void eng_sigmoid_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y)
{
    expect_same("sigmoid", "output", y, x);
    LOGICAL("sigmoid", x, y);
    be->ops->sigmoid_forward(be, x, y);
}

void eng_sigmoid_backward(eng_backend *be, const eng_tensor *y, const eng_tensor *dy, const eng_tensor *dx)
{
    expect_same("sigmoid backward", "dy", dy, y);
    expect_same("sigmoid backward", "dx", dx, y);
    LOGICAL("sigmoid backward", y, dy, dx);
    if (dx)
        be->ops->sigmoid_backward(be, y, dy, dx);
}

void eng_silu_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y)
{
    expect_same("silu", "output", y, x);
    LOGICAL("silu", x, y);
    be->ops->silu_forward(be, x, y);
}

void eng_silu_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *dy, const eng_tensor *dx)
{
    expect_same("silu backward", "dy", dy, x);
    expect_same("silu backward", "dx", dx, x);
    LOGICAL("silu backward", x, dy, dx);
    if (dx)
        be->ops->silu_backward(be, x, dy, dx);
}

/* x N×C×H×W and s N×C×1×1 or N×C. */
static void check_channel_scale(const char *layer, const eng_tensor *x, const eng_tensor *s)
{
    if (x->shape.ndim != 4)
        invariant_failed("%s: input must be N×C×H×W", layer);
    eng_shape s4 = eng_shape4(x->shape.dim[0], x->shape.dim[1], 1, 1),
              s2 = eng_shape2(x->shape.dim[0], x->shape.dim[1]);
    expect_shape(layer, "scale", s, s->shape.ndim == 2 ? &s2 : &s4);
}

void eng_channel_scale_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *s, const eng_tensor *y)
{
    check_channel_scale("channel scale", x, s);
    expect_same("channel scale", "output", y, x);
    if (x->layout != y->layout)
        invariant_failed("channel scale: the input and the output must share a layout");
    LOGICAL("channel scale", s);
    be->ops->channel_scale_forward(be, x, s, y);
}

void eng_channel_scale_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *s, const eng_tensor *dy,
                                const eng_tensor *dx, const eng_tensor *ds)
{
    check_channel_scale("channel scale backward", x, s);
    expect_same("channel scale backward", "dy", dy, x);
    expect_same("channel scale backward", "dx", dx, x);
    expect_same("channel scale backward", "ds", ds, s);
    LOGICAL("channel scale backward", x, s, dy, dx, ds);
    if (dx || ds)
        be->ops->channel_scale_backward(be, x, s, dy, dx, ds);
}

static void check_linear(const char *layer, const eng_tensor *x, const eng_tensor *w, const eng_tensor *b,
                         const eng_tensor *y)
{
    if (x->shape.ndim != 2 || w->shape.ndim != 2)
        invariant_failed("%s: input and weight must be 2-D (flatten first)", layer);
    eng_shape ws = eng_shape2(w->shape.dim[0], x->shape.dim[1]);
    expect_shape(layer, "weight", w, &ws);
    eng_shape bs = {.ndim = 1, .dim = {w->shape.dim[0]}};
    if (b)
        expect_shape(layer, "bias", b, &bs);
    eng_shape ys = eng_shape2(x->shape.dim[0], w->shape.dim[0]);
    expect_shape(layer, "output", y, &ys);
}

void eng_linear_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *w, const eng_tensor *b,
                       const eng_tensor *y)
{
    check_linear("linear", x, w, b, y);
    LOGICAL("linear", x, w, b, y);
    be->ops->linear_forward(be, x, w, b, y);
}

void eng_linear_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *w, const eng_tensor *dy,
                        const eng_tensor *dx, const eng_tensor *dw, const eng_tensor *db)
{
    check_linear("linear backward", x, w, db, dy);
    expect_same("linear backward", "dx", dx, x);
    expect_same("linear backward", "dw", dw, w);
    LOGICAL("linear backward", x, w, dy, dx, dw, db);
    be->ops->linear_backward(be, x, w, dy, dx, dw, db);
}

static void add_forward(eng_backend *be, const eng_tensor *a, const eng_tensor *b, bool relu, const eng_tensor *y)
{
    expect_same("add", "second input", b, a);
    expect_same("add", "output", y, a);
    ONE_LAYOUT("add", a, b, y);
    be->ops->add_forward(be, a, b, relu, y);
}

static void add_backward(eng_backend *be, const eng_tensor *relu_y, const eng_tensor *dy, const eng_tensor *da,
                         const eng_tensor *db)
{
    expect_same("add backward", "y", relu_y, dy);
    expect_same("add backward", "da", da, dy);
    expect_same("add backward", "db", db, dy);
    ONE_LAYOUT("add backward", relu_y, dy, da, db);
    be->ops->add_backward(be, relu_y, dy, da, db);
}

void eng_add_forward(eng_backend *be, const eng_tensor *a, const eng_tensor *b, const eng_tensor *y)
{
    add_forward(be, a, b, false, y);
}

void eng_add_backward(eng_backend *be, const eng_tensor *dy, const eng_tensor *da, const eng_tensor *db)
{
    add_backward(be, NULL, dy, da, db);
}

void eng_add_relu_forward(eng_backend *be, const eng_tensor *a, const eng_tensor *b, const eng_tensor *y)
{
    add_forward(be, a, b, true, y);
}

void eng_add_relu_backward(eng_backend *be, const eng_tensor *y, const eng_tensor *dy, const eng_tensor *da,
                           const eng_tensor *db)
{
    if (!y)
        invariant_failed("add+relu backward: the forward's output is required");
    add_backward(be, y, dy, da, db);
}

void eng_l2norm_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y)
{
    if (x->shape.ndim != 2)
        invariant_failed("l2norm: input must be N×F");
    expect_same("l2norm", "output", y, x);
    LOGICAL("l2norm", x, y);
    be->ops->l2norm_forward(be, x, y);
}

void eng_l2norm_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *dy, const eng_tensor *dx)
{
    expect_same("l2norm backward", "dy", dy, x);
    expect_same("l2norm backward", "dx", dx, x);
    LOGICAL("l2norm backward", x, dy, dx);
    if (dx)
        be->ops->l2norm_backward(be, x, dy, dx);
}

static void check_p(float p)
{
    if (!(p >= 0.0f && p < 1.0f))
        die(EXIT_RUNTIME, "dropout: p = %g must be in [0, 1)", (double)p);
}

void eng_dropout_forward(eng_backend *be, float p, uint64_t step, const eng_tensor *x, const eng_tensor *y)
{
    check_p(p);
    expect_same("dropout", "output", y, x);
    LOGICAL("dropout", x, y);
    be->ops->dropout_forward(be, p, step, x, y);
}

void eng_dropout_backward(eng_backend *be, float p, uint64_t step, const eng_tensor *dy, const eng_tensor *dx)
{
    check_p(p);
    expect_same("dropout backward", "dx", dx, dy);
    LOGICAL("dropout backward", dy, dx);
    if (dx)
        be->ops->dropout_backward(be, p, step, dy, dx);
}

/* ---- losses ---------------------------------------------------------------------------------- */

static void expect_matrix(const char *layer, const eng_tensor *x)
{
    if (x->shape.ndim != 2)
        invariant_failed("%s: input must be N × C", layer);
}

double eng_info_nce(eng_backend *be, const eng_tensor *logits, float scale, const eng_tensor *pos,
                    const eng_tensor *neg, const eng_tensor *dlogits)
{
    expect_matrix("info_nce", logits);
    expect_same("info_nce", "positive mask", pos, logits);
    expect_same("info_nce", "negative mask", neg, logits);
    expect_same("info_nce", "gradient", dlogits, logits);
    LOGICAL("info_nce", logits, pos, neg, dlogits);
    return be->ops->info_nce(be, logits, scale, pos, neg, dlogits);
}

double eng_cross_entropy(eng_backend *be, const eng_tensor *x, float scale, const int64_t *target,
                         const float *weight, int64_t ignore_index, const eng_tensor *dx)
{
    expect_matrix("cross_entropy", x);
    expect_same("cross_entropy", "gradient", dx, x);
    LOGICAL("cross_entropy", x, dx);
    for (int64_t i = 0; i < x->shape.dim[0]; i++)
        if (target[i] != ignore_index && (target[i] < 0 || target[i] >= x->shape.dim[1]))
            die(EXIT_RUNTIME, "cross_entropy: target %lld of row %lld is not a class of %lld", (long long)target[i],
                (long long)i, (long long)x->shape.dim[1]);
    return be->ops->cross_entropy(be, x, scale, target, weight, ignore_index, dx);
}

double eng_bce_logits(eng_backend *be, const eng_tensor *x, const int64_t *target, const eng_tensor *dx)
{
    expect_matrix("bce_logits", x);
    expect_same("bce_logits", "gradient", dx, x);
    LOGICAL("bce_logits", x, dx);
    return be->ops->bce_logits(be, x, target, dx);
}

int eng_sinkhorn(eng_backend *be, const eng_tensor *x, const eng_tensor *queue, double epsilon, int iters,
                 bool hard, const eng_tensor *q, const eng_reducer *across)
{
    expect_matrix("sinkhorn", x);
    expect_same("sinkhorn", "codes", q, x);
    if (queue && (queue->shape.ndim != 2 || queue->shape.dim[1] != x->shape.dim[1]))
        invariant_failed("sinkhorn: the queue's scores must have the batch's %lld columns",
            (long long)x->shape.dim[1]);
    LOGICAL("sinkhorn", x, q);
    if (queue)
        LOGICAL("sinkhorn", queue);
    if (!(epsilon > 0.0) || iters < 0)
        die(EXIT_RUNTIME, "sinkhorn: epsilon %g and %d iterations", epsilon, iters);
    if (across && across->world < 1)
        invariant_failed("sinkhorn: a reducer over %d ranks", across->world);
    return be->ops->sinkhorn(be, x, queue, epsilon, iters, hard, q, across);
}

double eng_soft_cross_entropy(eng_backend *be, const eng_tensor *x, float scale, const eng_tensor *q, double g,
                              const eng_tensor *dx)
{
    expect_matrix("soft_cross_entropy", x);
    expect_same("soft_cross_entropy", "targets", q, x);
    expect_same("soft_cross_entropy", "gradient", dx, x);
    LOGICAL("soft_cross_entropy", x, q, dx);
    return be->ops->soft_cross_entropy(be, x, scale, q, g, dx);
}

/* ---- optimizer updates ------------------------------------------------------------------------ */

void eng_sgd_step_many(eng_backend *be, const eng_sgd_item *items, int n)
{
    eng_sgd_item *checked = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *checked);
    for (int i = 0; i < n; i++) {
        const eng_sgd_item *it = &items[i];
        expect_same("sgd", "gradient", it->g, it->p);
        expect_same("sgd", "momentum buffer", it->buf, it->p);
        if (it->a.momentum != 0.0f && !it->buf)
            invariant_failed("sgd: momentum %g needs a momentum buffer", (double)it->a.momentum);
        LOGICAL("sgd", it->p, it->g, it->buf);
        checked[i] = *it;
        checked[i].buf = it->a.momentum != 0.0f ? it->buf : NULL;
    }
    be->ops->sgd_step_many(be, checked, n);
    free(checked);
}

void eng_sgd_step(eng_backend *be, const eng_sgd_args *a, const eng_tensor *p, const eng_tensor *g,
                  const eng_tensor *buf)
{
    eng_sgd_step_many(be, &(eng_sgd_item){.a = *a, .p = p, .g = g, .buf = buf}, 1);
}

void eng_adam_step_many(eng_backend *be, const eng_adam_item *items, int n)
{
    for (int i = 0; i < n; i++) {
        const eng_adam_item *it = &items[i];
        expect_same("adam", "gradient", it->g, it->p);
        expect_same("adam", "first moment", it->m, it->p);
        expect_same("adam", "second moment", it->v, it->p);
        if (it->a.step < 1)
            invariant_failed("adam: step %lld (the first update is step 1)", (long long)it->a.step);
        LOGICAL("adam", it->p, it->g, it->m, it->v);
    }
    be->ops->adam_step_many(be, items, n);
}

void eng_adam_step(eng_backend *be, const eng_adam_args *a, const eng_tensor *p, const eng_tensor *g,
                   const eng_tensor *m, const eng_tensor *v)
{
    eng_adam_step_many(be, &(eng_adam_item){.a = *a, .p = p, .g = g, .m = m, .v = v}, 1);
}

/* bank M × D, x n × D, y n × k, and every row number inside the bank. */
static void check_bank_scores(const char *layer, const eng_tensor *bank, const int64_t *idx, const eng_tensor *x,
                              const eng_tensor *y)
{
    if (bank->shape.ndim != 2 || x->shape.ndim != 2 || y->shape.ndim != 2 || x->shape.dim[1] != bank->shape.dim[1] ||
        y->shape.dim[0] != x->shape.dim[0])
        die(EXIT_RUNTIME, "%s: bank M × D, x n × D and y n × k do not fit", layer);
    int64_t n = eng_numel(&y->shape), m = bank->shape.dim[0];
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= m)
            die(EXIT_RUNTIME, "%s: row %lld is not one of the bank's %lld", layer, (long long)idx[i], (long long)m);
    LOGICAL(layer, bank, x, y);
}

void eng_bank_scores_forward(eng_backend *be, const eng_tensor *bank, const int64_t *idx, const eng_tensor *x,
                             const eng_tensor *y)
{
    check_bank_scores("bank scores", bank, idx, x, y);
    be->ops->bank_scores_forward(be, bank, idx, x, y);
}

void eng_bank_scores_backward(eng_backend *be, const eng_tensor *bank, const int64_t *idx, const eng_tensor *dy,
                              const eng_tensor *dx)
{
    check_bank_scores("bank scores backward", bank, idx, dx, dy);
    be->ops->bank_scores_backward(be, bank, idx, dy, dx);
}

void eng_ema(eng_backend *be, double momentum, const eng_tensor *src, const eng_tensor *dst)
{
    expect_same("ema", "dst", dst, src);
    LOGICAL("ema", src, dst);
    be->ops->ema(be, (float)momentum, (float)(1.0 - momentum), src, dst);
}

void eng_scale(eng_backend *be, float alpha, const eng_tensor *x)
{
    LOGICAL("scale", x);
    be->ops->scale(be, alpha, x);
}

void eng_argmax_rows(eng_backend *be, const eng_tensor *x, int64_t *out)
{
    expect_matrix("argmax_rows", x);
    LOGICAL("argmax_rows", x);
    if (x->shape.dim[0] > 0 && x->shape.dim[1] < 1)
        die(EXIT_RUNTIME, "argmax_rows: rows of no columns");
    be->ops->argmax_rows(be, x, out);
}

double eng_sum_squares(eng_backend *be, const eng_tensor *x)
{
    LOGICAL("sum of squares", x);
    return be->ops->sum_squares(be, x);
}

void eng_sum_squares_many(eng_backend *be, const eng_tensor *const *xs, int n, double *out)
{
    for (int i = 0; i < n; i++)
        LOGICAL("sum of squares", xs[i]);
    if (n > 0)
        be->ops->sum_squares_many(be, xs, n, out);
}

/* ---- convolution, batch norm, pooling -------------------------------------------------------- */

/* Abort when a backend lacks an operation: model code asked for a layer it cannot run. */
#define NEED(be, op) \
    do { \
        if (!(be)->ops->op) \
            invariant_failed("the %s backend has no " #op, (be)->ops->name); \
    } while (0)

static int64_t or_one(int64_t v) { return v ? v : 1; }

/* floor((in + 2·pad − dil·(k − 1) − 1) / stride) + 1, or with ceil for ceil_mode. */
static int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, bool ceil_mode)
{
    int64_t span = in + 2 * pad - dil * (k - 1) - 1;
    if (span < 0)
        return 0;
    int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
    /* PyTorch: with ceil_mode the last window must start inside the input or left padding */
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

void eng_plan_free(eng_backend *be, eng_plan *plan)
{
    if (plan)
        be->ops->plan_free(be, plan);
}

eng_shape eng_conv_output_shape(const eng_shape *x, const eng_shape *w, const eng_conv_desc *d)
{
    if (x->ndim != 4 || w->ndim != 4)
        invariant_failed("conv: input and weight must be 4-D (N×C×H×W, O×I×KH×KW)");
    int64_t groups = or_one(d->groups);
    if (x->dim[1] != w->dim[1] * groups || w->dim[0] % groups)
        die(EXIT_RUNTIME, "conv: %lld input channels do not fit a weight of %lld×%lld with %lld groups",
            (long long)x->dim[1], (long long)w->dim[0], (long long)w->dim[1], (long long)groups);
    if (d->pad_extra[0] < 0 || d->pad_extra[1] < 0)
        invariant_failed("conv: pad_extra (%lld, %lld) must not be negative", (long long)d->pad_extra[0],
            (long long)d->pad_extra[1]);
    eng_shape y = eng_shape4(x->dim[0], w->dim[0], 0, 0);
    /* the extra zeros below and right of the image count as a taller and wider input */
    for (int i = 0; i < 2; i++)
        y.dim[2 + i] = out_size(x->dim[2 + i] + d->pad_extra[i], w->dim[2 + i], or_one(d->stride[i]), d->pad[i],
                                or_one(d->dilation[i]), false);
    if (y.dim[2] < 1 || y.dim[3] < 1)
        die(EXIT_RUNTIME, "conv: a %lldx%lld input is smaller than the %lldx%lld kernel", (long long)x->dim[2],
            (long long)x->dim[3], (long long)w->dim[2], (long long)w->dim[3]);
    return y;
}

eng_plan *eng_conv_plan(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias)
{
    NEED(be, conv_plan);
    (void)eng_conv_output_shape(x, w, d); /* validates */
    return be->ops->conv_plan(be, d, x, w, bias);
}

void eng_conv_forward(eng_backend *be, eng_plan *plan, const eng_tensor *x, const eng_tensor *w,
                      const eng_tensor *b, const eng_tensor *y)
{
    NEED(be, conv_forward);
    LOGICAL("conv", w, b);
    be->ops->conv_forward(be, plan, x, w, b, y);
}

void eng_conv_backward(eng_backend *be, eng_plan *plan, const eng_tensor *x, const eng_tensor *w,
                       const eng_tensor *dy, const eng_tensor *dx, const eng_tensor *dw, const eng_tensor *db)
{
    NEED(be, conv_backward);
    expect_same("conv backward", "dx", dx, x);
    expect_same("conv backward", "dw", dw, w);
    LOGICAL("conv backward", w, dw, db);
    be->ops->conv_backward(be, plan, x, w, dy, dx, dw, db);
}

/* The per-channel tensors of batch norm must all be C long. */
static void check_channels(const char *layer, const eng_tensor *x, const eng_tensor *const *per_channel, size_t n)
{
    if (x->shape.ndim != 2 && x->shape.ndim != 4)
        invariant_failed("%s: input must be N×C or N×C×H×W", layer);
    eng_shape c = {.ndim = 1, .dim = {x->shape.dim[1]}};
    for (size_t i = 0; i < n; i++)
        if (per_channel[i])
            expect_shape(layer, "a per-channel tensor", per_channel[i], &c);
}

void eng_conv_bn_forward_eval(eng_backend *be, eng_plan *plan, const eng_tensor *x, const eng_tensor *w,
                              double eps, const eng_tensor *gamma, const eng_tensor *beta, const eng_tensor *mean,
                              const eng_tensor *var, const eng_tensor *residual, eng_eval_act act,
                              const eng_tensor *y)
{
    NEED(be, conv_bn_forward_eval);
    const eng_tensor *pc[] = {gamma, beta, mean, var};
    check_channels("conv + batch norm (eval)", y, pc, ARRAY_LEN(pc));
    if (!mean || !var)
        invariant_failed("conv + batch norm (eval): the running statistics are required");
    expect_same("conv + batch norm (eval)", "residual", residual, y);
    LOGICAL("conv + batch norm (eval)", w, gamma, beta, mean, var);
    be->ops->conv_bn_forward_eval(be, plan, x, w, eps, gamma, beta, mean, var, residual, act, y);
}

static void bn_forward_train(eng_backend *be, double momentum, double eps, const eng_tensor *x,
                             const eng_tensor *gamma, const eng_tensor *beta, const eng_tensor *running_mean,
                             const eng_tensor *running_var, const eng_tensor *save_mean,
                             const eng_tensor *save_invstd, bool relu, const eng_tensor *y,
                             const eng_reducer *across)
{
    NEED(be, batchnorm_forward_train);
    const eng_tensor *pc[] = {gamma, beta, running_mean, running_var, save_mean, save_invstd};
    check_channels("batchnorm", x, pc, ARRAY_LEN(pc));
    expect_same("batchnorm", "output", y, x);
    ONE_LAYOUT("batchnorm", x, y);
    be->ops->batchnorm_forward_train(be, momentum, eps, x, gamma, beta, running_mean, running_var, save_mean,
                                     save_invstd, relu, y, across);
}

static void bn_forward_eval(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                            const eng_tensor *beta, const eng_tensor *running_mean, const eng_tensor *running_var,
                            bool relu, const eng_tensor *y)
{
    NEED(be, batchnorm_forward_eval);
    const eng_tensor *pc[] = {gamma, beta, running_mean, running_var};
    check_channels("batchnorm (eval)", x, pc, ARRAY_LEN(pc));
    expect_same("batchnorm (eval)", "output", y, x);
    LOGICAL("batchnorm (eval)", x, y);
    be->ops->batchnorm_forward_eval(be, eps, x, gamma, beta, running_mean, running_var, relu, y);
}

static void bn_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *gamma,
                        const eng_tensor *save_mean, const eng_tensor *save_invstd, const eng_tensor *relu_y,
                        const eng_tensor *dy, const eng_tensor *dx, const eng_tensor *dgamma,
                        const eng_tensor *dbeta, const eng_reducer *across)
{
    NEED(be, batchnorm_backward);
    const eng_tensor *pc[] = {gamma, save_mean, save_invstd, dgamma, dbeta};
    check_channels("batchnorm backward", x, pc, ARRAY_LEN(pc));
    expect_same("batchnorm backward", "y", relu_y, x);
    expect_same("batchnorm backward", "dy", dy, x);
    expect_same("batchnorm backward", "dx", dx, x);
    ONE_LAYOUT("batchnorm backward", x, relu_y, dy, dx);
    be->ops->batchnorm_backward(be, x, gamma, save_mean, save_invstd, relu_y, dy, dx, dgamma, dbeta, across);
}

void eng_batchnorm_forward_train(eng_backend *be, double momentum, double eps, const eng_tensor *x,
                                 const eng_tensor *gamma, const eng_tensor *beta,
                                 const eng_tensor *running_mean, const eng_tensor *running_var,
                                 const eng_tensor *save_mean, const eng_tensor *save_invstd,
                                 const eng_tensor *y, const eng_reducer *across)
{
    bn_forward_train(be, momentum, eps, x, gamma, beta, running_mean, running_var, save_mean, save_invstd,
                     false, y, across);
}

void eng_batchnorm_relu_forward_train(eng_backend *be, double momentum, double eps, const eng_tensor *x,
                                      const eng_tensor *gamma, const eng_tensor *beta,
                                      const eng_tensor *running_mean, const eng_tensor *running_var,
                                      const eng_tensor *save_mean, const eng_tensor *save_invstd,
                                      const eng_tensor *y, const eng_reducer *across)
{
    bn_forward_train(be, momentum, eps, x, gamma, beta, running_mean, running_var, save_mean, save_invstd,
                     true, y, across);
}

void eng_batchnorm_forward_eval(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                                const eng_tensor *beta, const eng_tensor *running_mean,
                                const eng_tensor *running_var, const eng_tensor *y)
{
    bn_forward_eval(be, eps, x, gamma, beta, running_mean, running_var, false, y);
}

void eng_batchnorm_relu_forward_eval(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                                     const eng_tensor *beta, const eng_tensor *running_mean,
                                     const eng_tensor *running_var, const eng_tensor *y)
{
    bn_forward_eval(be, eps, x, gamma, beta, running_mean, running_var, true, y);
}

void eng_batchnorm_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *gamma,
                            const eng_tensor *save_mean, const eng_tensor *save_invstd, const eng_tensor *dy,
                            const eng_tensor *dx, const eng_tensor *dgamma, const eng_tensor *dbeta,
                            const eng_reducer *across)
{
    bn_backward(be, x, gamma, save_mean, save_invstd, NULL, dy, dx, dgamma, dbeta, across);
}

void eng_batchnorm_relu_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *gamma,
                                 const eng_tensor *save_mean, const eng_tensor *save_invstd,
                                 const eng_tensor *y, const eng_tensor *dy, const eng_tensor *dx,
                                 const eng_tensor *dgamma, const eng_tensor *dbeta, const eng_reducer *across)
{
    if (!y)
        invariant_failed("batchnorm+relu backward: the forward's output is required");
    bn_backward(be, x, gamma, save_mean, save_invstd, y, dy, dx, dgamma, dbeta, across);
}

void eng_batchnorm_backward_eval(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                                 const eng_tensor *running_mean, const eng_tensor *running_var,
                                 const eng_tensor *dy, const eng_tensor *dx, const eng_tensor *dgamma,
                                 const eng_tensor *dbeta)
{
    NEED(be, batchnorm_backward_eval);
    const eng_tensor *pc[] = {gamma, running_mean, running_var, dgamma, dbeta};
    check_channels("batchnorm backward (eval)", x, pc, ARRAY_LEN(pc));
    if (!running_mean || !running_var)
        invariant_failed("batchnorm backward (eval): the running statistics are required");
    expect_same("batchnorm backward (eval)", "dy", dy, x);
    expect_same("batchnorm backward (eval)", "dx", dx, x);
    LOGICAL("batchnorm backward (eval)", x, dy, dx);
    be->ops->batchnorm_backward_eval(be, eps, x, gamma, running_mean, running_var, dy, dx, dgamma, dbeta);
}

/* Layer norm: gamma/beta (and their gradients) are C long, the saved statistics N long. */
static void check_layernorm(const char *layer, const eng_tensor *x, const eng_tensor *const *per_channel, size_t nc,
                            const eng_tensor *save_mean, const eng_tensor *save_invstd)
{
    check_channels(layer, x, per_channel, nc);
    eng_shape n = {.ndim = 1, .dim = {x->shape.dim[0]}};
    if (save_mean)
        expect_shape(layer, "save_mean", save_mean, &n);
    if (save_invstd)
        expect_shape(layer, "save_invstd", save_invstd, &n);
}

void eng_layernorm2d_forward(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                             const eng_tensor *beta, const eng_tensor *save_mean, const eng_tensor *save_invstd,
                             const eng_tensor *y)
{
    NEED(be, layernorm2d_forward);
    const eng_tensor *pc[] = {gamma, beta};
    check_layernorm("layernorm", x, pc, ARRAY_LEN(pc), save_mean, save_invstd);
    expect_same("layernorm", "output", y, x);
    LOGICAL("layernorm", x, y);
    be->ops->layernorm2d_forward(be, eps, x, gamma, beta, save_mean, save_invstd, y);
}

void eng_layernorm2d_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *gamma,
                              const eng_tensor *save_mean, const eng_tensor *save_invstd, const eng_tensor *dy,
                              const eng_tensor *dx, const eng_tensor *dgamma, const eng_tensor *dbeta)
{
    NEED(be, layernorm2d_backward);
    const eng_tensor *pc[] = {gamma, dgamma, dbeta};
    check_layernorm("layernorm backward", x, pc, ARRAY_LEN(pc), save_mean, save_invstd);
    if (!save_mean || !save_invstd)
        invariant_failed("layernorm backward: needs the forward's save_mean and save_invstd");
    expect_same("layernorm backward", "dy", dy, x);
    expect_same("layernorm backward", "dx", dx, x);
    LOGICAL("layernorm backward", x, dy, dx);
    be->ops->layernorm2d_backward(be, x, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta);
}

/* x N×C×H×W and an odd window (nn.h: an even one is PyTorch's one-sided window, which the cpu's
 * oneDNN does not compute). */
static void check_lrn(const char *layer, const eng_lrn_desc *d, const eng_tensor *x)
{
    if (x->shape.ndim != 4)
        invariant_failed("%s: input must be N×C×H×W", layer);
    if (d->size < 1 || d->size % 2 == 0)
        invariant_failed("%s: size %lld; the window must be an odd number of channels", layer, (long long)d->size);
}

void eng_lrn_forward(eng_backend *be, const eng_lrn_desc *d, const eng_tensor *x, const eng_tensor *y)
{
    NEED(be, lrn_forward);
    check_lrn("lrn", d, x);
    expect_same("lrn", "output", y, x);
    if (x->base == y->base && x->offset == y->offset)
        invariant_failed("lrn: the output must not be the input (its window reads the neighbouring channels)");
    LOGICAL("lrn", x, y);
    be->ops->lrn_forward(be, d, x, y);
}

void eng_lrn_backward(eng_backend *be, const eng_lrn_desc *d, const eng_tensor *x, const eng_tensor *dy,
                      const eng_tensor *dx)
{
    NEED(be, lrn_backward);
    check_lrn("lrn backward", d, x);
    expect_same("lrn backward", "dy", dy, x);
    expect_same("lrn backward", "dx", dx, x);
    LOGICAL("lrn backward", x, dy, dx);
    if (dx)
        be->ops->lrn_backward(be, d, x, dy, dx);
}

eng_shape eng_pool_output_shape(const eng_shape *x, const eng_pool_desc *d)
{
    if (x->ndim != 4)
        invariant_failed("pool: input must be N×C×H×W");
    eng_shape y = *x;
    for (int i = 0; i < 2; i++) {
        if (d->kernel[i] < 1 || d->pad[i] < 0 || 2 * d->pad[i] > d->kernel[i])
            die(EXIT_RUNTIME, "pool: kernel %lld with padding %lld (padding must be at most half the kernel)",
                (long long)d->kernel[i], (long long)d->pad[i]);
        int64_t stride = d->stride[i] ? d->stride[i] : d->kernel[i];
        y.dim[2 + i] = out_size(x->dim[2 + i], d->kernel[i], stride, d->pad[i], 1, d->ceil_mode);
        if (y.dim[2 + i] < 1)
            die(EXIT_RUNTIME, "pool: a %lld-wide input is smaller than the %lld-wide window",
                (long long)x->dim[2 + i], (long long)d->kernel[i]);
    }
    return y;
}

static void check_pool(const char *layer, const eng_pool_desc *d, const eng_tensor *x, const eng_tensor *y)
{
    eng_shape want = eng_pool_output_shape(&x->shape, d);
    expect_shape(layer, "output", y, &want);
}

void eng_maxpool_forward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *x, const eng_tensor *y)
{
    NEED(be, maxpool_forward);
    check_pool("maxpool", d, x, y);
    if (x->layout != y->layout)
        invariant_failed("maxpool: the input and the output must share a layout");
    be->ops->maxpool_forward(be, d, x, y);
}

void eng_maxpool_backward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *x, const eng_tensor *dy,
                          const eng_tensor *dx)
{
    NEED(be, maxpool_backward);
    check_pool("maxpool backward", d, x, dy);
    expect_same("maxpool backward", "dx", dx, x);
    ONE_LAYOUT("maxpool backward", x, dy, dx);
    if (dx)
        be->ops->maxpool_backward(be, d, x, dy, dx);
}

void eng_avgpool_forward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *x, const eng_tensor *y)
{
    NEED(be, avgpool_forward);
    check_pool("avgpool", d, x, y);
    LOGICAL("avgpool", x, y);
    be->ops->avgpool_forward(be, d, x, y);
}

void eng_avgpool_backward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *dy, const eng_tensor *dx)
{
    NEED(be, avgpool_backward);
    check_pool("avgpool backward", d, dx, dy);
    LOGICAL("avgpool backward", dy, dx);
    be->ops->avgpool_backward(be, d, dy, dx);
}

/* Adaptive pools keep N and C and take their output size from y. */
static void check_adaptive(const char *layer, const eng_tensor *x, const eng_tensor *y)
{
    if (x->shape.ndim != 4 || y->shape.ndim != 4 || x->shape.dim[0] != y->shape.dim[0] ||
        x->shape.dim[1] != y->shape.dim[1] || y->shape.dim[2] < 1 || y->shape.dim[3] < 1)
        invariant_failed("%s: input and output must be N×C×H×W with the same N and C", layer);
}

void eng_adaptive_avgpool_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y)
{
    NEED(be, adaptive_avgpool_forward);
    check_adaptive("adaptive avgpool", x, y);
    if (y->layout != ENG_LAYOUT_LOGICAL && x->layout == ENG_LAYOUT_LOGICAL)
        invariant_failed("adaptive avgpool: a native output needs a native input");
    be->ops->adaptive_avgpool_forward(be, x, y);
}

void eng_adaptive_avgpool_backward(eng_backend *be, const eng_tensor *dy, const eng_tensor *dx)
{
    NEED(be, adaptive_avgpool_backward);
    check_adaptive("adaptive avgpool backward", dx, dy);
    LOGICAL("adaptive avgpool backward", dy);
    be->ops->adaptive_avgpool_backward(be, dy, dx);
}

void eng_adaptive_maxpool_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y)
{
    NEED(be, adaptive_maxpool_forward);
    check_adaptive("adaptive maxpool", x, y);
    LOGICAL("adaptive maxpool", x, y);
    be->ops->adaptive_maxpool_forward(be, x, y);
}

void eng_adaptive_maxpool_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *dy,
                                   const eng_tensor *dx)
{
    NEED(be, adaptive_maxpool_backward);
    check_adaptive("adaptive maxpool backward", x, dy);
    expect_same("adaptive maxpool backward", "dx", dx, x);
    LOGICAL("adaptive maxpool backward", x, dy, dx);
    if (dx)
        be->ops->adaptive_maxpool_backward(be, x, dy, dx);
}

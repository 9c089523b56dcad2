/*
 * lrn.c — the cpu backend's local response normalisation across channels (PyTorch's
 * LocalResponseNorm, AlexNet's), on oneDNN's LRN primitive (lrn_across_channels).
 *
 * oneDNN's formula is PyTorch's for an odd size: the window c − (size−1)/2 … c + (size−1)/2
 * clipped to the channels, its sum of squares times alpha/size (the divisor stays `size` at the
 * edges, as PyTorch's zero padding and average pool give), y = x·(k + …)^(−β). Only the order of
 * the float operations differs (oneDNN's alpha/size·Σ against PyTorch's (Σ/size)·alpha, and its
 * power). For an even size oneDNN centres a window of size − 1 channels where PyTorch takes size
 * of them, one more below c than above: nn.c refuses even sizes (nn.h).
 *
 * The forward reads and writes our nchw tensors in place (oneDNN 2.6 has JIT kernels for nchw
 * when C is a multiple of 8, its reference kernels otherwise). The backward is oneDNN's backward
 * primitive in nhwc: on nchw oneDNN 2.6 has only its reference backward, which recomputes every
 * neighbour's scale and power per element: 320 ms for 8×96×55×55 (AlexNet's first LRN) on 2
 * AVX-512 threads, against 17 ms for the forward. Its nhwc JIT kernels take 20 ms, so x and dy are
 * reordered into nhwc scratch and the gradient is reordered back into dx, 60 ms in all (the three
 * reorders are most of it). The last reorder carries a sum post-op, so it adds into the caller's
 * gradient in the same pass (nn.h's accumulate convention; conv.c does the same). A window of 1
 * stays nchw (the copies are then plain copies): oneDNN 2.6's AVX-512 nhwc backward crashes on it.
 * A CPU without AVX-512 gets the reference backward in either layout (oneDNN 2.6 has no AVX2
 * kernel for nhwc), and there the reorders are a small cost on top of it.
 *
 * The JIT backward reads the workspace a forward_training run leaves (the scale terms); nothing is
 * kept between calls (nn.h: recomputed from x), so when the backward asks for one the forward runs
 * again first, into the scratch that then takes diff_src. The reference kernels ask for none.
 *
 * No plan: the layer's API has none, and the primitives are made on every call. oneDNN keeps
 * the primitives it made in its own cache, keyed by their descriptors, so a step after the first
 * reuses them; the engine and the stream are light objects. An LRN takes no format "any": the
 * layouts are named.
 */
#include "cpu.h"

#include "log.h"
#include "util.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>

static void check(dnnl_status_t st, const char *what)
{
    if (st != dnnl_success)
        die(EXIT_RUNTIME, "oneDNN: %s failed (status %d)", what, (int)st);
}

/* One call's oneDNN objects: md describes x, y, dy and dx alike (nchw), inner the backward's
 * copies of them (nhwc, or nchw for a window of 1). */
typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_memory_desc_t md, inner;
} lrn_call;

static lrn_call call_open(const eng_lrn_desc *d, tensor_ref *x)
{
    lrn_call c;
    const int64_t *s = x->shape.dim;
    dnnl_dims_t dims = {s[0], s[1], s[2], s[3]};
    check(dnnl_memory_desc_init_by_tag(&c.md, 4, dims, dnnl_f32, dnnl_nchw), "memory descriptor");
    check(dnnl_memory_desc_init_by_tag(&c.inner, 4, dims, dnnl_f32, d->size > 1 ? dnnl_nhwc : dnnl_nchw),
          "memory descriptor");
    check(dnnl_engine_create(&c.engine, dnnl_cpu, 0), "cpu engine");
    check(dnnl_stream_create(&c.stream, c.engine, dnnl_stream_default_flags), "stream");
    return c;
}

static void call_close(lrn_call *c)
{
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->engine);
}

/* The forward on tensors laid out as md. */
static dnnl_primitive_desc_t forward_pd(const lrn_call *c, const dnnl_memory_desc_t *md, const eng_lrn_desc *d,
                                        dnnl_prop_kind_t kind)
{
    dnnl_lrn_desc_t ld;
    check(dnnl_lrn_forward_desc_init(&ld, kind, dnnl_lrn_across_channels, md, d->size, (float)d->alpha,
                                     (float)d->beta, (float)d->k),
          "lrn forward descriptor");
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &ld, NULL, c->engine, NULL), "lrn forward");
    return pd;
}

/* The backward on the inner copies, hinted by the training forward's (whose workspace it may read). */
static dnnl_primitive_desc_t backward_pd(const lrn_call *c, const eng_lrn_desc *d, const_dnnl_primitive_desc_t fwd)
{
    dnnl_lrn_desc_t ld;
    check(dnnl_lrn_backward_desc_init(&ld, dnnl_lrn_across_channels, &c->inner, &c->inner, d->size,
                                      (float)d->alpha, (float)d->beta, (float)d->k),
          "lrn backward descriptor");
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &ld, NULL, c->engine, fwd), "lrn backward");
    return pd;
}

/* A memory object over `handle` (the caller's tensor or a scratch: oneDNN writes only outputs). */
static dnnl_memory_t over(const lrn_call *c, const dnnl_memory_desc_t *md, const void *handle)
{
    dnnl_memory_t m;
    check(dnnl_memory_create(&m, md, c->engine, (void *)handle), "memory object");
    return m;
}

/* Makes pd's primitive (from oneDNN's cache after the first call), runs it, waits, and destroys
 * the arguments' memory objects. */
static void execute(const lrn_call *c, const_dnnl_primitive_desc_t pd, int nargs, dnnl_exec_arg_t *args)
{
    dnnl_primitive_t prim;
    check(dnnl_primitive_create(&prim, pd), "lrn primitive");
    check(dnnl_primitive_execute(prim, c->stream, nargs, args), "lrn execute");
    check(dnnl_stream_wait(c->stream), "stream wait");
    dnnl_primitive_destroy(prim);
    for (int i = 0; i < nargs; i++)
        dnnl_memory_destroy(args[i].memory);
}

void cpu_lrn_forward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    if (eng_numel(&x->shape) == 0)
        return;
    lrn_call c = call_open(d, x);
    dnnl_primitive_desc_t pd = forward_pd(&c, &c.md, d, dnnl_forward_inference);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, over(&c, &c.md, cpu_ptr(x))},
                              {DNNL_ARG_DST, over(&c, &c.md, cpu_ptr(y))}};
    execute(&c, pd, 2, args);
    dnnl_primitive_desc_destroy(pd);
    call_close(&c);
}

/* to = from in another layout, or with `accumulate` to += from (a sum post-op: one pass). */
static void reorder(const lrn_call *c, const dnnl_memory_desc_t *from_md, const float *from,
                    const dnnl_memory_desc_t *to_md, float *to, bool accumulate)
{
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attribute");
    if (accumulate)
        cpu_dnnl_attr_add_sum(attr);
    dnnl_primitive_desc_t pd;
    check(dnnl_reorder_primitive_desc_create(&pd, from_md, c->engine, to_md, c->engine, attr),
          "reorder descriptor");
    dnnl_primitive_attr_destroy(attr);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, over(c, from_md, from)}, {DNNL_ARG_TO, over(c, to_md, to)}};
    execute(c, pd, 2, args);
    dnnl_primitive_desc_destroy(pd);
}

/* The forward again (the inner x into y_scratch), for the workspace it leaves in `ws`. */
static void forward_for_workspace(const lrn_call *c, const_dnnl_primitive_desc_t fwd,
                                  const dnnl_memory_desc_t *ws_md, const float *xi, float *y_scratch, void *ws)
{
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, over(c, &c->inner, xi)},
                              {DNNL_ARG_DST, over(c, &c->inner, y_scratch)},
                              {DNNL_ARG_WORKSPACE, over(c, ws_md, ws)}};
    execute(c, fwd, 3, args);
}

/* diff_src (into `out`) from the inner x and dy, reading the workspace when there is one. */
static void run_backward(const lrn_call *c, const_dnnl_primitive_desc_t bwd, const dnnl_memory_desc_t *ws_md,
                         const float *xi, const float *dyi, float *out, void *ws)
{
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, over(c, &c->inner, xi)},
                              {DNNL_ARG_DIFF_DST, over(c, &c->inner, dyi)},
                              {DNNL_ARG_DIFF_SRC, over(c, &c->inner, out)},
                              {DNNL_ARG_WORKSPACE, ws ? over(c, ws_md, ws) : NULL}};
    execute(c, bwd, ws ? 4 : 3, args);
}

void cpu_lrn_backward(eng_backend *be, const eng_lrn_desc *d, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    if (eng_numel(&x->shape) == 0)
        return;
    lrn_call c = call_open(d, x);
    dnnl_primitive_desc_t fwd = forward_pd(&c, &c.inner, d, dnnl_forward_training), bwd = backward_pd(&c, d, fwd);
    const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(bwd, dnnl_query_workspace_md, 0);
    size_t ws_bytes = ws_md ? dnnl_memory_desc_get_size(ws_md) : 0, n = (size_t)eng_numel(&x->shape);
    /* x and dy as the backward reads them, then the recomputed y, which diff_src replaces once
     * the workspace holds the scales */
    float *xi = xmalloc_large(3 * n * sizeof(float)), *dyi = xi + n, *out = dyi + n;
    void *ws = ws_bytes ? xmalloc_large(ws_bytes) : NULL;
    reorder(&c, &c.md, cpu_ptr(x), &c.inner, xi, false);
    reorder(&c, &c.md, cpu_ptr(dy), &c.inner, dyi, false);
    if (ws)
        forward_for_workspace(&c, fwd, ws_md, xi, out, ws);
    run_backward(&c, bwd, ws_md, xi, dyi, out, ws);
    reorder(&c, &c.inner, out, &c.md, cpu_ptr(dx), true);
    free(xi), free(ws);
    dnnl_primitive_desc_destroy(bwd), dnnl_primitive_desc_destroy(fwd);
    call_close(&c);
}

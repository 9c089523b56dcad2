/*
 * conv.c — the cpu backend's 2-D convolution on oneDNN 2.6 (C API).
 *
 * A plan (made once per layer and input shape) holds three primitives: forward, backward-data
 * and backward-weights (with the bias gradient when the layer has a bias), all on plain
 * nchw / oihw memory, which is exactly our C-contiguous tensors, so no reorders are needed.
 * Groups use oneDNN's 5-D goihw weight descriptor: the same bytes as PyTorch's
 * O × I/groups × KH × KW. oneDNN's dilation counts the gaps (PyTorch's minus one).
 *
 * oneDNN overwrites its outputs, but nn.h's gradients accumulate, so backward computes into
 * plan-owned temporaries and adds them in (oneDNN 2.6 has no sum post-op on backward
 * primitives). The scratchpad and the temporaries are allocated once, in the plan, so a
 * steady-state step allocates nothing. Memory objects are made once and re-pointed at the
 * caller's tensors on every call.
 */
#include "cpu.h"

#include "log.h"
#include "util.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

enum { FWD, BWD_DATA, BWD_WEIGHTS, NPRIM };

/* The memory objects a plan's primitives read and write (handles set per call). */
enum { M_SRC, M_WEI, M_BIAS, M_DST, M_DSRC, M_DWEI, M_DBIAS, M_DDST, M_SCRATCH, NMEM };

typedef struct {
    struct eng_plan base; /* first: cpu_plan_free sees an eng_plan */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t prim[NPRIM];
    dnnl_memory_t mem[NMEM];
    bool bias;
    size_t x_count, w_count, o_count; /* elements of x, w, and output channels */
    float *tmp_dx, *tmp_dw, *tmp_db;  /* oneDNN writes here; we add into the caller's */
    void *scratch;
} conv_plan;

static void check(dnnl_status_t st, const char *what)
{
    if (st != dnnl_success)
        die(EXIT_RUNTIME, "oneDNN: %s failed (status %d)", what, (int)st);
}

static dnnl_memory_desc_t plain_md(int ndims, const dnnl_dims_t dims, dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t md;
    check(dnnl_memory_desc_init_by_tag(&md, ndims, dims, dnnl_f32, tag), "memory descriptor");
    return md;
}

/* The descriptors of one convolution geometry. */
typedef struct {
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_geom;

static conv_geom geometry(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w)
{
    conv_geom g;
    eng_shape y = eng_conv_output_shape(x, w, d);
    int64_t groups = d->groups ? d->groups : 1;
    dnnl_dims_t xd = {x->dim[0], x->dim[1], x->dim[2], x->dim[3]};
    dnnl_dims_t yd = {y.dim[0], y.dim[1], y.dim[2], y.dim[3]};
    dnnl_dims_t bd = {w->dim[0]};
    g.src = plain_md(4, xd, dnnl_nchw);
    g.dst = plain_md(4, yd, dnnl_nchw);
    g.bias = plain_md(1, bd, dnnl_a);
    if (groups > 1) {
        dnnl_dims_t wd = {groups, w->dim[0] / groups, w->dim[1], w->dim[2], w->dim[3]};
        g.wei = plain_md(5, wd, dnnl_goihw);
    } else {
        dnnl_dims_t wd = {w->dim[0], w->dim[1], w->dim[2], w->dim[3]};
        g.wei = plain_md(4, wd, dnnl_oihw);
    }
    for (int i = 0; i < 2; i++) {
        int64_t stride = d->stride[i] ? d->stride[i] : 1, dil = d->dilation[i] ? d->dilation[i] : 1;
        g.strides[i] = stride;
        g.dilates[i] = dil - 1;
        /* Symmetric, as PyTorch pads (and as its own oneDNN path passes it): oneDNN floors
         * (in + pad_l + pad_r − span) / stride exactly as PyTorch does, so the output sizes
         * agree even when the stride drops the last columns. */
        g.pad_l[i] = g.pad_r[i] = d->pad[i];
    }
    return g;
}

/* A primitive from its operation descriptor; the scratchpad is ours (one per plan). */
static dnnl_primitive_desc_t make_pd(const void *op, dnnl_engine_t engine, const_dnnl_primitive_desc_t hint,
                                     const char *what)
{
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attribute");
    check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, op, attr, engine, hint), what);
    dnnl_primitive_attr_destroy(attr);
    return pd;
}

static size_t scratch_bytes(const_dnnl_primitive_desc_t pd)
{
    return dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
}

static dnnl_memory_t make_mem(const dnnl_memory_desc_t *md, dnnl_engine_t engine)
{
    dnnl_memory_t m;
    check(dnnl_memory_create(&m, md, engine, DNNL_MEMORY_NONE), "memory object");
    return m;
}

static void conv_destroy(struct eng_plan *base)
{
    conv_plan *p = (conv_plan *)base;
    for (int i = 0; i < NMEM; i++)
        if (p->mem[i])
            dnnl_memory_destroy(p->mem[i]);
    for (int i = 0; i < NPRIM; i++)
        dnnl_primitive_destroy(p->prim[i]);
    dnnl_stream_destroy(p->stream);
    dnnl_engine_destroy(p->engine);
    free(p->tmp_dx), free(p->tmp_dw), free(p->tmp_db), free(p->scratch);
    free(p);
}

/* The three operation descriptors, made into primitives; returns the largest scratchpad. */
static size_t make_primitives(conv_plan *p, conv_geom *g)
{
    const dnnl_alg_kind_t alg = dnnl_convolution_direct;
    dnnl_convolution_desc_t fwd, bwd_data, bwd_wei;
    check(dnnl_dilated_convolution_forward_desc_init(&fwd, dnnl_forward_training, alg, &g->src, &g->wei,
                                                     p->bias ? &g->bias : NULL, &g->dst, g->strides, g->dilates,
                                                     g->pad_l, g->pad_r),
          "convolution forward descriptor");
    check(dnnl_dilated_convolution_backward_data_desc_init(&bwd_data, alg, &g->src, &g->wei, &g->dst, g->strides,
                                                           g->dilates, g->pad_l, g->pad_r),
          "convolution backward-data descriptor");
    check(dnnl_dilated_convolution_backward_weights_desc_init(&bwd_wei, alg, &g->src, &g->wei,
                                                              p->bias ? &g->bias : NULL, &g->dst, g->strides,
                                                              g->dilates, g->pad_l, g->pad_r),
          "convolution backward-weights descriptor");
    dnnl_primitive_desc_t pd[NPRIM];
    pd[FWD] = make_pd(&fwd, p->engine, NULL, "convolution forward");
    pd[BWD_DATA] = make_pd(&bwd_data, p->engine, pd[FWD], "convolution backward-data");
    pd[BWD_WEIGHTS] = make_pd(&bwd_wei, p->engine, pd[FWD], "convolution backward-weights");
    size_t scratch = 0;
    for (int i = 0; i < NPRIM; i++) {
        size_t s = scratch_bytes(pd[i]);
        scratch = s > scratch ? s : scratch;
        check(dnnl_primitive_create(&p->prim[i], pd[i]), "convolution primitive");
        dnnl_primitive_desc_destroy(pd[i]);
    }
    return scratch;
}

eng_plan *cpu_conv_plan(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias)
{
    (void)be;
    conv_plan *p = xcalloc(1, sizeof *p);
    p->base.kind = CPU_PLAN_CONV;
    p->base.destroy = conv_destroy;
    p->bias = bias;
    check(dnnl_engine_create(&p->engine, dnnl_cpu, 0), "cpu engine");
    check(dnnl_stream_create(&p->stream, p->engine, dnnl_stream_default_flags), "stream");
    conv_geom g = geometry(d, x, w);
    size_t scratch = make_primitives(p, &g);

    p->x_count = (size_t)eng_numel(x);
    p->w_count = (size_t)eng_numel(w);
    p->o_count = (size_t)w->dim[0];
    p->tmp_dx = xmalloc_large(p->x_count * sizeof(float));
    p->tmp_dw = xmalloc_large(p->w_count * sizeof(float));
    p->tmp_db = xmalloc_large(p->o_count * sizeof(float));
    p->scratch = xmalloc_large(scratch ? scratch : 64);
    dnnl_dims_t sd = {(dnnl_dim_t)(scratch ? scratch : 64)};
    dnnl_memory_desc_t scratch_md; /* bytes */
    check(dnnl_memory_desc_init_by_tag(&scratch_md, 1, sd, dnnl_u8, dnnl_a), "scratchpad descriptor");

    const dnnl_memory_desc_t *mds[NMEM] = {
        [M_SRC] = &g.src,   [M_WEI] = &g.wei,   [M_BIAS] = &g.bias,   [M_DST] = &g.dst,       [M_DSRC] = &g.src,
        [M_DWEI] = &g.wei, [M_DBIAS] = &g.bias, [M_DDST] = &g.dst, [M_SCRATCH] = &scratch_md,
    };
    for (int i = 0; i < NMEM; i++)
        p->mem[i] = make_mem(mds[i], p->engine);
    check(dnnl_memory_set_data_handle(p->mem[M_SCRATCH], p->scratch), "scratchpad handle");
    check(dnnl_memory_set_data_handle(p->mem[M_DSRC], p->tmp_dx), "dx handle");
    check(dnnl_memory_set_data_handle(p->mem[M_DWEI], p->tmp_dw), "dw handle");
    check(dnnl_memory_set_data_handle(p->mem[M_DBIAS], p->tmp_db), "db handle");
    return &p->base;
}

void cpu_plan_free(eng_backend *be, eng_plan *plan)
{
    (void)be;
    plan->destroy(plan);
}

static conv_plan *as_conv(eng_plan *plan)
{
    if (!plan || plan->kind != CPU_PLAN_CONV)
        die(EXIT_RUNTIME, "conv: the plan is not a convolution plan");
    return (conv_plan *)plan;
}

/* oneDNN does not write through const: the handles are the caller's tensors. */
static void point(conv_plan *p, int m, const eng_tensor *t)
{
    check(dnnl_memory_set_data_handle(p->mem[m], cpu_ptr(t)), "memory handle");
}

static void run(conv_plan *p, int prim, int nargs, const dnnl_exec_arg_t *args)
{
    check(dnnl_primitive_execute(p->prim[prim], p->stream, nargs, args), "convolution execute");
    check(dnnl_stream_wait(p->stream), "stream wait");
}

void cpu_conv_forward(eng_backend *be, eng_plan *plan, T *x, T *w, T *b, T *y)
{
    (void)be;
    conv_plan *p = as_conv(plan);
    if (p->bias != (b != NULL))
        die(EXIT_RUNTIME, "conv forward: the plan was made %s a bias", p->bias ? "with" : "without");
    point(p, M_SRC, x);
    point(p, M_WEI, w);
    point(p, M_DST, y);
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, p->mem[M_SRC]},
        {DNNL_ARG_WEIGHTS, p->mem[M_WEI]},
        {DNNL_ARG_DST, p->mem[M_DST]},
        {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
        {DNNL_ARG_BIAS, p->mem[M_BIAS]},
    };
    if (b)
        point(p, M_BIAS, b);
    run(p, FWD, b ? 5 : 4, args);
}

static void add_into(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void cpu_conv_backward(eng_backend *be, eng_plan *plan, T *x, T *w, T *dy, T *dx, T *dw, T *db)
{
    (void)be;
    conv_plan *p = as_conv(plan);
    if (db && !p->bias)
        die(EXIT_RUNTIME, "conv backward: a bias gradient from a plan made without a bias");
    point(p, M_DDST, dy);
    if (dx) {
        point(p, M_WEI, w);
        dnnl_exec_arg_t args[] = {
            {DNNL_ARG_DIFF_DST, p->mem[M_DDST]},
            {DNNL_ARG_WEIGHTS, p->mem[M_WEI]},
            {DNNL_ARG_DIFF_SRC, p->mem[M_DSRC]},
            {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
        };
        run(p, BWD_DATA, 4, args);
        add_into(cpu_ptr(dx), p->tmp_dx, p->x_count);
    }
    if (!dw && !db)
        return;
    point(p, M_SRC, x);
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, p->mem[M_SRC]},
        {DNNL_ARG_DIFF_DST, p->mem[M_DDST]},
        {DNNL_ARG_DIFF_WEIGHTS, p->mem[M_DWEI]},
        {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
        {DNNL_ARG_DIFF_BIAS, p->mem[M_DBIAS]},
    };
    /* A plan with a bias always computes its gradient (the primitive was made so); it is
     * only added when the caller asked. */
    run(p, BWD_WEIGHTS, p->bias ? 5 : 4, args);
    if (dw)
        add_into(cpu_ptr(dw), p->tmp_dw, p->w_count);
    if (db)
        add_into(cpu_ptr(db), p->tmp_db, p->o_count);
}

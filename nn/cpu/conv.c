/*
 * conv.c — the cpu backend's 2-D convolution on oneDNN 2.6 (C API).
 *
 * A plan (made once per layer and input shape) holds three primitives: forward, backward-data
 * and backward-weights (with the bias gradient when the layer has a bias). Groups use
 * oneDNN's 5-D goihw weight descriptor: the same bytes as PyTorch's O × I/groups × KH × KW.
 * oneDNN's dilation counts the gaps (PyTorch's minus one).
 * Asymmetric padding (pad_extra) is oneDNN's own: its right padding may differ from its left.
 *
 * Layout. Logical tensors are plain nchw / oihw, but on plain memory oneDNN falls back to its
 * slow GEMM-based kernels. So the primitives are created with format_tag_any for the
 * activations and weights, letting oneDNN pick its blocked layouts (nChw16c, OIhw16i16o, ...)
 * and its JIT kernels; each primitive argument is a "port" that, where the chosen layout
 * differs from the caller's, reorders between the caller's tensor and a plan-owned blocked
 * buffer on every call (weights change every step; the forward's buffers are not reused by
 * backward, since a layer may run forward twice before its backward). The blocked buffers are
 * shared by role (x-, y- and w-sized) across the three primitives, which run one at a time.
 * The bias stays plain. Converting costs far less than the GEMM path loses, but it is not
 * free: a training ResNet therefore keeps its activations and their gradients channel-blocked
 * (NATIVE, cpu_blocking), and an activation argument has a second port for such a caller, made
 * on first use (bport), which converts nothing where oneDNN chose the caller's layout.
 *
 * Algorithm. Direct kernels, as PyTorch's CPU convolutions. A backend opened with `winograd`
 * (MACHINE.CPU_WINOGRAD) trains the 3 × 3 stride-1 convolutions with oneDNN's Winograd kernels
 * where they measured faster (winograd_mask). Their transforms round differently: a ResNet's
 * features come out a few 1e-4 relative from PyTorch's instead of 1e-5, so it is a choice, not
 * the default. Evaluation stays direct.
 *
 * oneDNN overwrites its outputs, but nn.h's gradients accumulate (oneDNN 2.6 has no sum
 * post-op on backward primitives). Where a gradient comes out blocked, the reorder back to our
 * layout carries a sum post-op, so it adds into the caller's gradient in the same pass; where
 * it comes out plain, the primitive writes a plan-owned temporary that is then added in. The
 * scratchpad, the temporaries and the blocked buffers are allocated once, in the plan, so a
 * steady-state step allocates nothing. Memory objects are made once and re-pointed at the
 * caller's tensors on every call.
 *
 * The backward of a convolution whose output is one pixel (res5 of small images) skips all
 * of this: it is two matrix products (conv_gemm.c), oneDNN's direct kernels being slow there.
 * So does the weight gradient of a depthwise convolution for which oneDNN chose a GEMM-based
 * implementation (it has direct ones for 3 × 3 only): conv_dw.c's sums per channel and tap;
 * such a plan makes no backward-weights primitive.
 *
 * Evaluation (conv_bn_forward_eval): an eval-mode conv → batch norm [→ + residual] [→ ReLU |
 * SiLU] is one oneDNN primitive. Batch norm is folded into the weights and a bias (w·γ/√(var+ε) and
 * β − mean·γ/√(var+ε), computed per call into the plan's gradient temporaries, which
 * evaluation does not use), the residual enters through a sum post-op and the activation
 * through an eltwise post-op (SiLU as oneDNN's swish with α = 1), so no pass over the activation is left besides the convolution's own.
 * That primitive is made on the first such call (only then are its post-ops known) and kept.
 * Its activations are read and written in place when the caller's tensors are channel-blocked
 * (NATIVE, cpu_blocking): an evaluation trunk then runs conv to conv with no conversion at all.
 */
#include "cpu.h"

#include "log.h"
#include "util.h"

#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

enum { FWD, BWD_DATA, BWD_WEIGHTS, NPRIM };

/* The primitives' layout-converted arguments. */
enum { P_FWD_SRC, P_FWD_WEI, P_FWD_DST, P_BD_DDST, P_BD_WEI, P_BD_DSRC, P_BW_SRC, P_BW_DDST, P_BW_DWEI, NPORT };

/* The plan's blocked buffers, by the tensor size they hold; each port uses one. */
enum { BUF_X, BUF_Y, BUF_W, NBUF };

/* The plain-only memory objects (handles set per call). */
enum { M_BIAS, M_DBIAS, M_SCRATCH, NMEM };

/* One primitive argument: `user` is in our plain layout (the caller's tensor or a temporary),
 * `inner` in the primitive's; when they agree they are the same object and there is no reorder. */
typedef struct {
    dnnl_memory_t user, inner;
    dnnl_primitive_t reorder; /* user → inner for inputs, inner → user for outputs; or NULL */
} port;

/* The descriptors of one convolution geometry: ours (plain) and oneDNN's choice (any). */
typedef struct {
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_memory_desc_t any_src, any_wei, any_dst;
    dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_geom;

/* The evaluation primitive (conv + folded batch norm + post-ops) and its ports; `residual`
 * reorders the residual into the blocked output before the sum post-op adds onto it. */
typedef struct {
    bool with_residual;
    eng_eval_act act;
    int x_block, y_block, residual_block; /* the callers' layouts (cpu_blocking) */
} fused_key;

typedef struct {
    dnnl_primitive_t prim;
    port src, wei, dst, residual;
    dnnl_memory_t bias;
    void *buf[NBUF]; /* its own blocked buffers, where training's are missing or too small */
    fused_key key;   /* what it was made for: another call pattern remakes it */
} fused_eval;

typedef struct {
    struct eng_plan base; /* first: cpu_plan_free sees an eng_plan */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t prim[NPRIM];
    port port[NPORT];                 /* for callers' tensors in our plain layout */
    port bport[NPORT];                /* for channel-blocked ones (activations only), made on first use */
    int bport_block[NPORT];           /* the block bport[i] was made for; 0: not made */
    void *bbuf[NPORT];                /* bport[i]'s own converted side, where it has one */
    dnnl_memory_desc_t chosen[NPORT]; /* the layout each primitive argument has */
    dnnl_memory_t mem[NMEM];
    bool bias;
    bool dy_shared; /* backward-weights reads the blocked dy that backward-data reordered */
    size_t x_count, w_count, o_count; /* elements of x, w, and output channels */
    float *tmp_dx, *tmp_dw, *tmp_db;  /* gradients land here; we add into the caller's */
    float *tmp_x;                     /* a blocked x in our layout (one-pixel outputs' backward) */
    void *buf[NBUF];                  /* blocked copies (NULL when no port needs one) */
    size_t buf_bytes[NBUF];
    void *scratch;
    size_t scratch_size;
    conv_geom geom;
    fused_eval *fused;   /* made by the first conv_bn_forward_eval */
    cpu_conv_gemm *gemm; /* a 1 × 1 output's backward (conv_gemm.c), or NULL */
    cpu_conv_dw *dw;     /* a depthwise weight gradient oneDNN has no direct kernel for, or NULL */
} conv_plan;

static void check(dnnl_status_t st, const char *what)
{
    if (st != dnnl_success)
        die(EXIT_RUNTIME, "oneDNN: %s failed (status %d)", what, (int)st);
}

static dnnl_memory_desc_t tag_md(int ndims, const dnnl_dims_t dims, dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t md;
    check(dnnl_memory_desc_init_by_tag(&md, ndims, dims, dnnl_f32, tag), "memory descriptor");
    return md;
}

static conv_geom geometry(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w)
{
    conv_geom g;
    eng_shape y = eng_conv_output_shape(x, w, d);
    int64_t groups = d->groups ? d->groups : 1;
    dnnl_dims_t xd = {x->dim[0], x->dim[1], x->dim[2], x->dim[3]};
    dnnl_dims_t yd = {y.dim[0], y.dim[1], y.dim[2], y.dim[3]};
    dnnl_dims_t bd = {w->dim[0]};
    g.src = tag_md(4, xd, dnnl_nchw);
    g.dst = tag_md(4, yd, dnnl_nchw);
    g.bias = tag_md(1, bd, dnnl_a);
    g.any_src = tag_md(4, xd, dnnl_format_tag_any);
    g.any_dst = tag_md(4, yd, dnnl_format_tag_any);
    if (groups > 1) {
        dnnl_dims_t wd = {groups, w->dim[0] / groups, w->dim[1], w->dim[2], w->dim[3]};
        g.wei = tag_md(5, wd, dnnl_goihw);
        g.any_wei = tag_md(5, wd, dnnl_format_tag_any);
    } else {
        dnnl_dims_t wd = {w->dim[0], w->dim[1], w->dim[2], w->dim[3]};
        g.wei = tag_md(4, wd, dnnl_oihw);
        g.any_wei = tag_md(4, wd, dnnl_format_tag_any);
    }
    for (int i = 0; i < 2; i++) {
        int64_t stride = d->stride[i] ? d->stride[i] : 1, dil = d->dilation[i] ? d->dilation[i] : 1;
        g.strides[i] = stride;
        g.dilates[i] = dil - 1;
        /* pad above and left, pad + pad_extra below and right (TensorFlow's "same" padding;
         * symmetric, as PyTorch pads, when pad_extra is 0): oneDNN floors (in + pad_l + pad_r −
         * span) / stride exactly as eng_conv_output_shape does, so the output sizes agree even
         * when the stride drops the last columns. The three primitives and the evaluation one
         * all take these, so every path pads alike. */
        g.pad_l[i] = d->pad[i];
        g.pad_r[i] = d->pad[i] + d->pad_extra[i];
    }
    return g;
}

/* An attribute asking for our own scratchpad (one per plan). */
static dnnl_primitive_attr_t user_scratch_attr(void)
{
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attribute");
    check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
    return attr;
}

static dnnl_primitive_desc_t make_pd(const void *op, dnnl_engine_t engine, const_dnnl_primitive_desc_t hint,
                                     const char *what)
{
    dnnl_primitive_attr_t attr = user_scratch_attr();
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, op, attr, engine, hint), what);
    dnnl_primitive_attr_destroy(attr);
    return pd;
}

static size_t scratch_bytes(const_dnnl_primitive_desc_t pd)
{
    return dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
}

static size_t max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

static dnnl_memory_t make_mem(const dnnl_memory_desc_t *md, dnnl_engine_t engine, void *handle)
{
    dnnl_memory_t m;
    check(dnnl_memory_create(&m, md, engine, handle), "memory object");
    return m;
}

static void port_destroy(port *pt)
{
    if (pt->reorder) {
        dnnl_primitive_destroy(pt->reorder);
        dnnl_memory_destroy(pt->inner);
    }
    if (pt->user)
        dnnl_memory_destroy(pt->user);
}

static void fused_destroy(fused_eval *f)
{
    if (!f)
        return;
    port_destroy(&f->src), port_destroy(&f->wei), port_destroy(&f->dst), port_destroy(&f->residual);
    dnnl_memory_destroy(f->bias);
    dnnl_primitive_destroy(f->prim);
    for (int i = 0; i < NBUF; i++)
        free(f->buf[i]);
    free(f);
}

static void conv_destroy(struct eng_plan *base)
{
    conv_plan *p = (conv_plan *)base;
    fused_destroy(p->fused);
    cpu_conv_gemm_free(p->gemm);
    cpu_conv_dw_free(p->dw);
    for (int i = 0; i < NPORT; i++) {
        port_destroy(&p->port[i]);
        port_destroy(&p->bport[i]);
        free(p->bbuf[i]);
    }
    for (int i = 0; i < NMEM; i++)
        if (p->mem[i])
            dnnl_memory_destroy(p->mem[i]);
    for (int i = 0; i < NPRIM; i++)
        if (p->prim[i])
            dnnl_primitive_destroy(p->prim[i]);
    dnnl_stream_destroy(p->stream);
    dnnl_engine_destroy(p->engine);
    for (int i = 0; i < NBUF; i++)
        free(p->buf[i]);
    free(p->tmp_dx), free(p->tmp_dw), free(p->tmp_db), free(p->tmp_x), free(p->scratch);
    free(p);
}

/* The three operation descriptors with algorithm alg[i] each. */
static void init_ops(conv_plan *p, const conv_geom *g, const dnnl_alg_kind_t alg[NPRIM], dnnl_convolution_desc_t op[NPRIM])
{
    const dnnl_memory_desc_t *bias = p->bias ? &g->bias : NULL;
    check(dnnl_dilated_convolution_forward_desc_init(&op[FWD], dnnl_forward_training, alg[FWD], &g->any_src,
                                                     &g->any_wei, bias, &g->any_dst, g->strides, g->dilates,
                                                     g->pad_l, g->pad_r),
          "convolution forward descriptor");
    check(dnnl_dilated_convolution_backward_data_desc_init(&op[BWD_DATA], alg[BWD_DATA], &g->any_src, &g->any_wei,
                                                           &g->any_dst, g->strides, g->dilates, g->pad_l, g->pad_r),
          "convolution backward-data descriptor");
    check(dnnl_dilated_convolution_backward_weights_desc_init(&op[BWD_WEIGHTS], alg[BWD_WEIGHTS], &g->any_src,
                                                              &g->any_wei, bias, &g->any_dst, g->strides,
                                                              g->dilates, g->pad_l, g->pad_r),
          "convolution backward-weights descriptor");
}

/* Which training primitives take oneDNN's Winograd kernels (bit i for primitive i): 3 × 3,
 * stride 1, no dilation or groups, whole channel blocks (its F(4 × 4, 3 × 3) AVX-512 kernels
 * take nothing else; make_pds falls back to direct where oneDNN has none). Its 6 × 6 tiles do
 * 2.25 times fewer multiplications than the direct kernels on the maps they cover, but on a
 * map of a few pixels they are mostly padding: measured on ResNet-18's small-stem step (28 px,
 * batch 32, 2 cores), the forward and backward-data of res5's 4 × 4 maps got slower (17 → 19
 * and 16 → 19 ms), its backward-weights faster (30 → 21), and every larger map faster in all
 * three (the 28 × 28 ones nearly twice). So forward and backward-data from 7 × 7 up. */
enum { WINO_MIN_MAP = 7 };

static unsigned winograd_mask(const eng_backend *be, const conv_geom *g, const eng_conv_desc *d, const eng_shape *x,
                              const eng_shape *w)
{
    if (!be->opt.winograd)
        return 0;
    int64_t groups = d->groups ? d->groups : 1;
    bool fits = w->dim[2] == 3 && w->dim[3] == 3 && g->strides[0] == 1 && g->strides[1] == 1 && g->dilates[0] == 0 &&
                g->dilates[1] == 0 && groups == 1 && x->dim[1] % 16 == 0 && w->dim[0] % 16 == 0;
    if (!fits)
        return 0;
    bool large = x->dim[2] >= WINO_MIN_MAP && x->dim[3] >= WINO_MIN_MAP;
    return 1u << BWD_WEIGHTS | (large ? 1u << FWD | 1u << BWD_DATA : 0u);
}

/* The three primitive descriptors, the backward ones hinted by the forward: each Winograd where
 * `wino` asks and oneDNN has it, else direct. */
static void make_pds(conv_plan *p, const conv_geom *g, unsigned wino, dnnl_primitive_desc_t pd[NPRIM])
{
    static const char *const what[NPRIM] = {"convolution forward", "convolution backward-data",
                                            "convolution backward-weights"};
    dnnl_alg_kind_t direct[NPRIM] = {dnnl_convolution_direct, dnnl_convolution_direct, dnnl_convolution_direct},
                    chosen[NPRIM];
    for (int i = 0; i < NPRIM; i++)
        chosen[i] = wino >> i & 1 ? dnnl_convolution_winograd : dnnl_convolution_direct;
    dnnl_convolution_desc_t op[NPRIM], op_direct[NPRIM];
    init_ops(p, g, chosen, op);
    init_ops(p, g, direct, op_direct);
    for (int i = 0; i < NPRIM; i++) {
        const_dnnl_primitive_desc_t hint = i == FWD ? NULL : pd[FWD];
        dnnl_primitive_attr_t attr = user_scratch_attr();
        if (chosen[i] == dnnl_convolution_direct ||
            dnnl_primitive_desc_create(&pd[i], &op[i], attr, p->engine, hint) != dnnl_success)
            pd[i] = make_pd(&op_direct[i], p->engine, hint, what[i]);
        dnnl_primitive_attr_destroy(attr);
    }
}

/* Where each port's layouts come from: its primitive, what to query, our plain layout, the
 * buffer it uses when the layouts differ, and whether it is an input. */
typedef struct {
    int prim;
    dnnl_query_t query;
    int role; /* BUF_X / BUF_Y / BUF_W, also picks the plain descriptor */
    bool in;
} port_spec;

static const port_spec specs[NPORT] = {
    [P_FWD_SRC] = {FWD, dnnl_query_src_md, BUF_X, true},
    [P_FWD_WEI] = {FWD, dnnl_query_weights_md, BUF_W, true},
    [P_FWD_DST] = {FWD, dnnl_query_dst_md, BUF_Y, false},
    [P_BD_DDST] = {BWD_DATA, dnnl_query_diff_dst_md, BUF_Y, true},
    [P_BD_WEI] = {BWD_DATA, dnnl_query_weights_md, BUF_W, true},
    [P_BD_DSRC] = {BWD_DATA, dnnl_query_diff_src_md, BUF_X, false},
    [P_BW_SRC] = {BWD_WEIGHTS, dnnl_query_src_md, BUF_X, true},
    [P_BW_DDST] = {BWD_WEIGHTS, dnnl_query_diff_dst_md, BUF_Y, true},
    [P_BW_DWEI] = {BWD_WEIGHTS, dnnl_query_diff_weights_md, BUF_W, false},
};

static const dnnl_memory_desc_t *plain_of(const conv_geom *g, int role)
{
    return role == BUF_X ? &g->src : role == BUF_Y ? &g->dst : &g->wei;
}

static const dnnl_memory_desc_t *chosen_md(dnnl_primitive_desc_t pd[NPRIM], int i)
{
    return dnnl_primitive_desc_query_md(pd[specs[i].prim], specs[i].query, 0);
}

/* Allocates each role's blocked buffer, as large as the largest layout that needs it. */
static void alloc_buffers(conv_plan *p, const conv_geom *g, dnnl_primitive_desc_t pd[NPRIM])
{
    size_t bytes[NBUF] = {0};
    for (int i = 0; i < NPORT; i++) {
        const dnnl_memory_desc_t *md = chosen_md(pd, i);
        if (!dnnl_memory_desc_equal(md, plain_of(g, specs[i].role)))
            bytes[specs[i].role] = max_size(bytes[specs[i].role], dnnl_memory_desc_get_size(md));
    }
    for (int r = 0; r < NBUF; r++)
        if (bytes[r]) {
            p->buf[r] = xmalloc_large(bytes[r]);
            p->buf_bytes[r] = bytes[r];
        }
}

void cpu_dnnl_attr_add_sum(dnnl_primitive_attr_t attr)
{
    dnnl_post_ops_t ops;
    check(dnnl_post_ops_create(&ops), "post-ops");
    check(dnnl_post_ops_append_sum(ops, 1.0f), "sum post-op");
    check(dnnl_primitive_attr_set_post_ops(attr, ops), "primitive attribute");
    dnnl_post_ops_destroy(ops);
}

/* A reorder between two layouts; returns its scratchpad size. `accumulate`: it adds into its
 * destination (a sum post-op) instead of overwriting it. */
static size_t make_reorder(conv_plan *p, dnnl_primitive_t *out, const dnnl_memory_desc_t *from,
                           const dnnl_memory_desc_t *to, bool accumulate)
{
    dnnl_primitive_attr_t attr = user_scratch_attr();
    if (accumulate)
        cpu_dnnl_attr_add_sum(attr);
    dnnl_primitive_desc_t pd;
    check(dnnl_reorder_primitive_desc_create(&pd, from, p->engine, to, p->engine, attr), "reorder descriptor");
    dnnl_primitive_attr_destroy(attr);
    size_t scratch = scratch_bytes(pd);
    check(dnnl_primitive_create(out, pd), "reorder primitive");
    dnnl_primitive_desc_destroy(pd);
    return scratch;
}

/* Sets up a port between our `plain` layout and the primitive's `md`, its blocked side in `buf`
 * (unused when the two agree); returns its reorder's scratchpad size. An output's reorder adds
 * into the caller's tensor when `accumulate`. */
static size_t port_init(conv_plan *p, port *pt, const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *md,
                        void *buf, bool in, bool accumulate)
{
    pt->user = make_mem(plain, p->engine, DNNL_MEMORY_NONE);
    if (dnnl_memory_desc_equal(md, plain)) {
        pt->inner = pt->user;
        return 0;
    }
    pt->inner = make_mem(md, p->engine, buf);
    return in ? make_reorder(p, &pt->reorder, plain, md, false) : make_reorder(p, &pt->reorder, md, plain, accumulate);
}

/* Makes one port; returns its reorder's scratchpad size. */
static size_t make_port(conv_plan *p, const conv_geom *g, dnnl_primitive_desc_t pd[NPRIM], int i)
{
    /* The gradients' reorders add into the caller's gradient (nn.h's convention). */
    return port_init(p, &p->port[i], plain_of(g, specs[i].role), chosen_md(pd, i), p->buf[specs[i].role],
                     specs[i].in, i != P_FWD_DST);
}

/* Whether oneDNN implements pd with its GEMM-based fallback ("gemm:jit", "gemm:ref", ...). */
static bool uses_gemm(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "implementation name");
    return impl && strstr(impl, "gemm") != NULL;
}

/* The primitives and their ports; returns the largest scratchpad any of them needs. A
 * depthwise weight gradient that conv_dw.c computes (oneDNN having only its GEMM fallback for
 * it) gets no backward-weights primitive: that fallback's im2col scratchpad would be the plan's
 * largest allocation, and never used. */
static size_t make_primitives(const eng_backend *be, conv_plan *p, const conv_geom *g, const eng_conv_desc *d,
                              const eng_shape *x, const eng_shape *w)
{
    dnnl_primitive_desc_t pd[NPRIM];
    make_pds(p, g, winograd_mask(be, g, d, x, w), pd);
    alloc_buffers(p, g, pd);
    size_t scratch = 0;
    for (int i = 0; i < NPORT; i++) {
        p->chosen[i] = *chosen_md(pd, i);
        scratch = max_size(scratch, make_port(p, g, pd, i));
    }
    p->dy_shared = p->port[P_BD_DDST].reorder && p->port[P_BW_DDST].reorder &&
                   dnnl_memory_desc_equal(chosen_md(pd, P_BD_DDST), chosen_md(pd, P_BW_DDST));
    if (uses_gemm(pd[BWD_WEIGHTS]))
        p->dw = cpu_conv_dw_new(d, x, w, p->bias);
    for (int i = 0; i < NPRIM; i++) {
        if (i != BWD_WEIGHTS || !p->dw) {
            scratch = max_size(scratch, scratch_bytes(pd[i]));
            check(dnnl_primitive_create(&p->prim[i], pd[i]), "convolution primitive");
        }
        dnnl_primitive_desc_destroy(pd[i]);
    }
    return scratch;
}

/* (Re)makes the scratchpad, `bytes` long (the largest any primitive of the plan needs). */
static void set_scratch(conv_plan *p, size_t bytes)
{
    bytes = bytes ? bytes : 64;
    if (p->mem[M_SCRATCH])
        dnnl_memory_destroy(p->mem[M_SCRATCH]);
    free(p->scratch);
    p->scratch = xmalloc_large(bytes);
    p->scratch_size = bytes;
    dnnl_dims_t sd = {(dnnl_dim_t)bytes};
    dnnl_memory_desc_t scratch_md; /* bytes */
    check(dnnl_memory_desc_init_by_tag(&scratch_md, 1, sd, dnnl_u8, dnnl_a), "scratchpad descriptor");
    p->mem[M_SCRATCH] = make_mem(&scratch_md, p->engine, p->scratch);
}

eng_plan *cpu_conv_plan(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias)
{
    conv_plan *p = xcalloc(1, sizeof *p);
    p->base.kind = CPU_PLAN_CONV;
    p->base.destroy = conv_destroy;
    p->bias = bias;
    check(dnnl_engine_create(&p->engine, dnnl_cpu, 0), "cpu engine");
    check(dnnl_stream_create(&p->stream, p->engine, dnnl_stream_default_flags), "stream");
    conv_geom g = geometry(d, x, w);
    p->geom = g;
    p->gemm = cpu_conv_gemm_new(d, x, w, bias);
    size_t scratch = make_primitives(be, p, &g, d, x, w);

    p->x_count = (size_t)eng_numel(x);
    p->w_count = (size_t)eng_numel(w);
    p->o_count = (size_t)w->dim[0];
    p->tmp_dx = xmalloc_large(p->x_count * sizeof(float));
    p->tmp_dw = xmalloc_large(p->w_count * sizeof(float));
    p->tmp_db = xmalloc_large(p->o_count * sizeof(float));
    set_scratch(p, scratch);
    p->mem[M_BIAS] = make_mem(&g.bias, p->engine, DNNL_MEMORY_NONE);
    p->mem[M_DBIAS] = make_mem(&g.bias, p->engine, p->tmp_db);
    /* A gradient that comes out plain lands in our temporary, then is added in. */
    if (!p->port[P_BD_DSRC].reorder)
        check(dnnl_memory_set_data_handle(p->port[P_BD_DSRC].user, p->tmp_dx), "dx handle");
    if (!p->port[P_BW_DWEI].reorder)
        check(dnnl_memory_set_data_handle(p->port[P_BW_DWEI].user, p->tmp_dw), "dw handle");
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
        invariant_failed("conv: the plan is not a convolution plan");
    return (conv_plan *)plan;
}

static void run(conv_plan *p, dnnl_primitive_t prim, int nargs, const dnnl_exec_arg_t *args)
{
    check(dnnl_primitive_execute(prim, p->stream, nargs, args), "convolution execute");
    check(dnnl_stream_wait(p->stream), "stream wait");
}

/* Runs a port's reorder (if it has one): into the primitive's layout for an input, out of it
 * for an output. */
static void reorder_port(conv_plan *p, const port *pt, bool in)
{
    if (!pt->reorder)
        return;
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_FROM, in ? pt->user : pt->inner},
        {DNNL_ARG_TO, in ? pt->inner : pt->user},
        {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
    };
    run(p, pt->reorder, 3, args);
}

static dnnl_memory_desc_t caller_md(const dnnl_memory_desc_t *plain, int block);

/* Makes bport[i], argument i's port for a caller whose tensor is channel-blocked by b. Where
 * the primitive chose that very layout (oneDNN's direct kernels take nChw16c, what a training
 * trunk keeps) the port converts nothing: the primitive reads and writes the caller's tensor. */
static void make_blocked_port(conv_plan *p, int i, int b)
{
    if (specs[i].role == BUF_W)
        invariant_failed("conv: the weights are logical");
    if (p->bport_block[i]) {
        port_destroy(&p->bport[i]);
        free(p->bbuf[i]);
        p->bbuf[i] = NULL;
        p->bport[i] = (port){0};
    }
    dnnl_memory_desc_t user = caller_md(plain_of(&p->geom, specs[i].role), b);
    const dnnl_memory_desc_t *md = &p->chosen[i];
    if (!dnnl_memory_desc_equal(md, &user))
        p->bbuf[i] = xmalloc_large(dnnl_memory_desc_get_size(md));
    size_t scratch = port_init(p, &p->bport[i], &user, md, p->bbuf[i], specs[i].in, i != P_FWD_DST);
    if (scratch > p->scratch_size)
        set_scratch(p, scratch);
    if (i == P_BD_DSRC && !p->bport[i].reorder) /* as for the plain port: land, then add in */
        check(dnnl_memory_set_data_handle(p->bport[i].user, p->tmp_dx), "dx handle");
    p->bport_block[i] = b;
}

/* Argument i's port for the caller's tensor t, in t's layout. */
static port *port_for(conv_plan *p, int i, const eng_tensor *t)
{
    int b = cpu_blocking(t);
    if (!b)
        return &p->port[i];
    if (p->bport_block[i] != b)
        make_blocked_port(p, i, b);
    return &p->bport[i];
}

/* Points an input port at the caller's tensor and converts it in. oneDNN does not write
 * through const: the handles are the caller's tensors. */
static port *feed(conv_plan *p, int i, const eng_tensor *t)
{
    port *pt = port_for(p, i, t);
    check(dnnl_memory_set_data_handle(pt->user, cpu_ptr(t)), "memory handle");
    reorder_port(p, pt, specs[i].in);
    return pt;
}

void cpu_conv_forward(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *b,
                      tensor_ref *y)
{
    (void)be;
    conv_plan *p = as_conv(plan);
    if (p->bias != (b != NULL))
        invariant_failed("conv forward: the plan was made %s a bias", p->bias ? "with" : "without");
    port *src = feed(p, P_FWD_SRC, x), *wei = feed(p, P_FWD_WEI, w), *dst = port_for(p, P_FWD_DST, y);
    check(dnnl_memory_set_data_handle(dst->user, cpu_ptr(y)), "memory handle");
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, src->inner},
        {DNNL_ARG_WEIGHTS, wei->inner},
        {DNNL_ARG_DST, dst->inner},
        {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
        {DNNL_ARG_BIAS, p->mem[M_BIAS]},
    };
    if (b)
        check(dnnl_memory_set_data_handle(p->mem[M_BIAS], cpu_ptr(b)), "memory handle");
    run(p, p->prim[FWD], b ? 5 : 4, args);
    reorder_port(p, dst, false);
}

CPU_HOT static void add_into(float *dst, const float *src, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= 32768)
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* Adds a computed gradient into the caller's `d`: through the reorder's sum post-op when the
 * gradient came out blocked, else from the plain temporary it was written to. */
static void accumulate(conv_plan *p, const port *pt, const eng_tensor *d, const float *tmp, size_t n)
{
    if (pt->reorder) {
        check(dnnl_memory_set_data_handle(pt->user, cpu_ptr(d)), "memory handle");
        reorder_port(p, pt, false);
    } else {
        add_into(cpu_ptr(d), tmp, n);
    }
}

/* dx += ∂L/∂x. */
static void backward_data(conv_plan *p, tensor_ref *w, tensor_ref *dy, tensor_ref *dx)
{
    port *ddst = feed(p, P_BD_DDST, dy), *wei = feed(p, P_BD_WEI, w), *dsrc = port_for(p, P_BD_DSRC, dx);
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_DIFF_DST, ddst->inner},
        {DNNL_ARG_WEIGHTS, wei->inner},
        {DNNL_ARG_DIFF_SRC, dsrc->inner},
        {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
    };
    run(p, p->prim[BWD_DATA], 4, args);
    accumulate(p, dsrc, dx, p->tmp_dx, p->x_count);
}

/* dw += ∂L/∂w and db += ∂L/∂b. `dy_ready`: the blocked dy that
 * backward-data left in the y buffer is the one this primitive reads (a plain dy only). */
static void backward_weights(conv_plan *p, tensor_ref *x, tensor_ref *dy, tensor_ref *dw, tensor_ref *db,
                             bool dy_ready)
{
    port *src = feed(p, P_BW_SRC, x), *ddst = &p->port[P_BW_DDST];
    if (dy_ready)
        check(dnnl_memory_set_data_handle(ddst->user, cpu_ptr(dy)), "memory handle");
    else
        ddst = feed(p, P_BW_DDST, dy);
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, src->inner},
        {DNNL_ARG_DIFF_DST, ddst->inner},
        {DNNL_ARG_DIFF_WEIGHTS, p->port[P_BW_DWEI].inner},
        {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
        {DNNL_ARG_DIFF_BIAS, p->mem[M_DBIAS]},
    };
    /* A plan with a bias always computes its gradient (the primitive was made so); it is
     * only added when the caller asked. */
    run(p, p->prim[BWD_WEIGHTS], p->bias ? 5 : 4, args);
    if (dw)
        accumulate(p, &p->port[P_BW_DWEI], dw, p->tmp_dw, p->w_count);
    if (db)
        add_into(cpu_ptr(db), p->tmp_db, p->o_count);
}

/* The backward of a one-pixel output as conv_gemm.c's matrix products, which read and write the
 * logical layout. A one-pixel dy is the same bytes in either layout; a blocked x is converted
 * into a temporary, and a blocked dx gets the gradient through one (zeroed, then added in). */
static void gemm_backward(conv_plan *p, tensor_ref *x, tensor_ref *w, tensor_ref *dy, tensor_ref *dx,
                          tensor_ref *dw)
{
    int xb = cpu_blocking(x), dxb = dx ? cpu_blocking(dx) : 0;
    const float *px = cpu_ptr(x);
    if (xb) {
        if (!p->tmp_x)
            p->tmp_x = xmalloc_large(p->x_count * sizeof(float));
        cpu_reorder_blocked(px, p->tmp_x, &x->shape, xb, false, false);
        px = p->tmp_x;
    }
    float *pdx = dx ? cpu_ptr(dx) : NULL;
    if (dxb) {
        memset(p->tmp_dx, 0, p->x_count * sizeof(float));
        pdx = p->tmp_dx;
    }
    cpu_conv_gemm_backward(p->gemm, px, cpu_ptr(w), cpu_ptr(dy), pdx, dw ? cpu_ptr(dw) : NULL);
    if (dxb)
        cpu_reorder_blocked(p->tmp_dx, cpu_ptr(dx), &dx->shape, dxb, true, true);
}

void cpu_conv_backward(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, tensor_ref *dy,
                       tensor_ref *dx, tensor_ref *dw, tensor_ref *db)
{
    (void)be;
    conv_plan *p = as_conv(plan);
    if (db && !p->bias)
        invariant_failed("conv backward: a bias gradient from a plan made without a bias");
    if (p->gemm) {
        gemm_backward(p, x, w, dy, dx, dw);
        return;
    }
    if (dx)
        backward_data(p, w, dy, dx);
    if (p->dw && dw) {
        if (cpu_blocking(x) || cpu_blocking(dy))
            invariant_failed("conv backward: a depthwise weight gradient reads logical x and dy");
        cpu_conv_dw_backward_weights(p->dw, cpu_ptr(x), cpu_ptr(dy), cpu_ptr(dw));
    } else if (dw || db) {
        backward_weights(p, x, dy, dw, db, dx && p->dy_shared && !cpu_blocking(dy));
    }
}

/* ---- evaluation: conv + folded batch norm [+ residual] [+ ReLU] ------------------------------ */

static dnnl_primitive_attr_t fused_attr(bool residual, eng_eval_act act)
{
    dnnl_primitive_attr_t attr = user_scratch_attr();
    dnnl_post_ops_t ops;
    check(dnnl_post_ops_create(&ops), "post-ops");
    if (residual)
        check(dnnl_post_ops_append_sum(ops, 1.0f), "sum post-op");
    if (act == ENG_EVAL_ACT_RELU)
        check(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f), "relu post-op");
    if (act == ENG_EVAL_ACT_SILU) /* swish: x·sigmoid(α·x) */
        check(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f), "swish post-op");
    check(dnnl_primitive_attr_set_post_ops(attr, ops), "convolution attribute");
    dnnl_post_ops_destroy(ops);
    return attr;
}

/* A port of the eval primitive: its blocked side in the training primitives' buffer of that
 * role when it is large enough (they never run at the same time), else in the eval
 * primitive's own (made when first needed, so two ports may share one). */
static size_t fused_port(conv_plan *p, fused_eval *f, port *pt, int role, const dnnl_memory_desc_t *plain,
                         const dnnl_memory_desc_t *md, bool in)
{
    void *buf = NULL;
    if (!dnnl_memory_desc_equal(md, plain)) {
        size_t bytes = dnnl_memory_desc_get_size(md);
        buf = p->buf_bytes[role] >= bytes ? p->buf[role] : f->buf[role];
        if (!buf)
            buf = f->buf[role] = xmalloc_large(bytes);
    }
    return port_init(p, pt, plain, md, buf, in, false);
}

/* The layout the training forward chose for a port (ours when it converts nothing). */
static dnnl_memory_desc_t inner_md(const port *pt)
{
    const dnnl_memory_desc_t *md;
    check(dnnl_memory_get_memory_desc(pt->inner, &md), "memory descriptor");
    return *md;
}

static bool same_key(const fused_key *a, const fused_key *b)
{
    return a->with_residual == b->with_residual && a->act == b->act && a->x_block == b->x_block &&
           a->y_block == b->y_block && a->residual_block == b->residual_block;
}

/* An activation descriptor like `plain` (nchw) in the caller's layout: nchw or nChwBc. */
static dnnl_memory_desc_t caller_md(const dnnl_memory_desc_t *plain, int block)
{
    if (!block)
        return *plain;
    return tag_md(4, plain->dims, block == 16 ? dnnl_nChw16c : dnnl_nChw8c);
}

static fused_eval *make_fused(conv_plan *p, fused_key key)
{
    const conv_geom *g = &p->geom;
    fused_eval *f = xcalloc(1, sizeof *f);
    f->key = key;
    /* Activations in the caller's blocked layout when it has one; else in the training
     * forward's: left to itself, oneDNN picks nhwc for inference, and the transposes from and
     * to our nchw cost more than its faster kernels gain (measured: the reorders took longer
     * than the convolutions). */
    dnnl_memory_desc_t x_md = caller_md(&g->src, key.x_block), y_md = caller_md(&g->dst, key.y_block),
                       r_md = caller_md(&g->dst, key.residual_block);
    dnnl_memory_desc_t src = key.x_block ? x_md : inner_md(&p->port[P_FWD_SRC]),
                       dst = key.y_block ? y_md : inner_md(&p->port[P_FWD_DST]);
    dnnl_convolution_desc_t cd;
    check(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src,
                                                     &g->any_wei, &g->bias, &dst, g->strides, g->dilates,
                                                     g->pad_l, g->pad_r),
          "convolution (eval) descriptor");
    dnnl_primitive_attr_t attr = fused_attr(key.with_residual, key.act);
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &cd, attr, p->engine, NULL), "convolution (eval)");
    dnnl_primitive_attr_destroy(attr);
    size_t scratch = scratch_bytes(pd);
    scratch = max_size(scratch, fused_port(p, f, &f->src, BUF_X, &x_md, &src, true));
    scratch = max_size(scratch, fused_port(p, f, &f->wei, BUF_W, &g->wei,
                                           dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), true));
    scratch = max_size(scratch, fused_port(p, f, &f->dst, BUF_Y, &y_md, &dst, false));
    scratch = max_size(scratch, fused_port(p, f, &f->residual, BUF_Y, &r_md, &dst, true));
    /* The folded weights and bias live in the gradient temporaries (unused in evaluation). */
    check(dnnl_memory_set_data_handle(f->wei.user, p->tmp_dw), "weights handle");
    f->bias = make_mem(&g->bias, p->engine, p->tmp_db);
    check(dnnl_primitive_create(&f->prim, pd), "convolution (eval) primitive");
    dnnl_primitive_desc_destroy(pd);
    if (scratch > p->scratch_size)
        set_scratch(p, scratch);
    return f;
}

CPU_HOT static void scale_row(const float *w, float *out, int64_t n, double scale)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)(w[i] * scale);
}

/* w' = w·s and b' = β − mean·s per output channel, s = γ/√(var + ε), in double. */
static void fold_batchnorm(conv_plan *p, tensor_ref *w, double eps, tensor_ref *gamma, tensor_ref *beta,
                           tensor_ref *mean, tensor_ref *var)
{
    int64_t outs = (int64_t)p->o_count, per = (int64_t)(p->w_count / p->o_count);
    const float *pw = cpu_ptr(w), *pg = gamma ? cpu_ptr(gamma) : NULL, *pb = beta ? cpu_ptr(beta) : NULL;
    const float *pm = cpu_ptr(mean), *pv = cpu_ptr(var);
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outs; o++) {
        double s = (pg ? pg[o] : 1.0) / sqrt((double)pv[o] + eps);
        scale_row(pw + o * per, p->tmp_dw + o * per, per, s);
        p->tmp_db[o] = (float)((pb ? pb[o] : 0.0) - pm[o] * s);
    }
}

/* The sum post-op adds onto what the primitive's output holds: put the residual there, in the
 * output's layout (y itself, or the blocked buffer that is then converted into y). */
static void place_residual(conv_plan *p, fused_eval *f, tensor_ref *residual)
{
    void *out;
    check(dnnl_memory_get_data_handle(f->dst.inner, &out), "memory handle");
    check(dnnl_memory_set_data_handle(f->residual.user, cpu_ptr(residual)), "memory handle");
    if (f->residual.reorder) {
        check(dnnl_memory_set_data_handle(f->residual.inner, out), "memory handle");
        reorder_port(p, &f->residual, true);
    } else if (cpu_ptr(residual) != out) {
        memcpy(out, cpu_ptr(residual), (size_t)eng_numel(&residual->shape) * sizeof(float));
    }
}

void cpu_conv_bn_forward_eval(eng_backend *be, eng_plan *plan, tensor_ref *x, tensor_ref *w, double eps,
                              tensor_ref *gamma, tensor_ref *beta, tensor_ref *mean, tensor_ref *var,
                              tensor_ref *residual, eng_eval_act act, tensor_ref *y)
{
    (void)be;
    conv_plan *p = as_conv(plan);
    if (p->bias)
        invariant_failed("conv + batch norm (eval): the plan was made with a bias");
    bool with_residual = residual != NULL;
    fused_key key = {.with_residual = with_residual, .act = act, .x_block = cpu_blocking(x),
                     .y_block = cpu_blocking(y), .residual_block = residual ? cpu_blocking(residual) : 0};
    if (p->fused && !same_key(&p->fused->key, &key)) {
        fused_destroy(p->fused);
        p->fused = NULL;
    }
    if (!p->fused)
        p->fused = make_fused(p, key);
    fused_eval *f = p->fused;
    fold_batchnorm(p, w, eps, gamma, beta, mean, var);
    reorder_port(p, &f->wei, true);
    check(dnnl_memory_set_data_handle(f->src.user, cpu_ptr(x)), "memory handle");
    reorder_port(p, &f->src, true);
    check(dnnl_memory_set_data_handle(f->dst.user, cpu_ptr(y)), "memory handle");
    if (with_residual)
        place_residual(p, f, residual);
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, f->src.inner},         {DNNL_ARG_WEIGHTS, f->wei.inner},
        {DNNL_ARG_BIAS, f->bias},             {DNNL_ARG_DST, f->dst.inner},
        {DNNL_ARG_SCRATCHPAD, p->mem[M_SCRATCH]},
    };
    run(p, f->prim, 5, args);
    reorder_port(p, &f->dst, false);
}

/*
 * unit.c — the conv → norm → activation brick and the activation-memory planner of the
 * convolutional trunks (see unit.h).
 *
 * The activation decides what a unit keeps. Batch norm fuses its ReLU both ways (one pass, no
 * buffer between them, the ReLU's backward reading the output). Every other pairing runs the
 * activation as its own step: LayerNorm + ReLU applies the ReLU in place on the output and
 * needs a gradient buffer between the two backward steps (pre_grad); SiLU's backward reads its
 * input, so a SiLU unit also keeps the norm's output (normed).
 */
#include "unit.h"

#include "log.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define ACT_ALIGN 64 /* bytes between activation views: cache lines, SIMD loads */

/* ---- activation memory ---------------------------------------------------------------------- */

static void track(eng_tensor ***list, int *n, int *cap, eng_tensor *t)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *list = xrealloc(*list, (size_t)*cap * sizeof **list);
    }
    (*list)[(*n)++] = t;
}

static size_t aligned_bytes(eng_backend *be, const eng_shape *s)
{
    return (eng_bytes(be, s) + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN;
}

/* A gradient's offset is within its arena until commit places the arenas. */
void act_plan_add(eng_backend *be, act_plan *p, eng_tensor *t, eng_shape s, bool is_grad)
{
    bool segment = !is_grad && p->in_segment;
    size_t *at = is_grad ? &p->arena_at[p->arena] : segment ? &p->segment_at : &p->bytes;
    *t = (eng_tensor){.shape = s, .base = NULL, .offset = *at};
    *at += aligned_bytes(be, &s);
    track(&p->views, &p->nviews, &p->vcap, t);
    if (segment) {
        track(&p->seg_views, &p->nseg, &p->segcap, t);
        p->segment_size = p->segment_at > p->segment_size ? p->segment_at : p->segment_size;
    }
    if (!is_grad)
        return;
    int n = p->ngrads, cap = p->gcap;
    track(&p->grads, &p->ngrads, &p->gcap, t);
    if (p->gcap != cap)
        p->grad_arena = xrealloc(p->grad_arena, (size_t)p->gcap * sizeof *p->grad_arena);
    p->grad_arena[n] = p->arena;
    if (*at > p->arena_size[p->arena])
        p->arena_size[p->arena] = *at;
}

void act_plan_enter_arena(act_plan *p, int a)
{
    p->arena = a;
    p->arena_at[a] = 0;
}

void act_plan_segment_begin(act_plan *p)
{
    p->in_segment = true;
    p->segment_at = 0;
}

void act_plan_segment_end(act_plan *p) { p->in_segment = false; }

void act_plan_commit(eng_backend *be, act_plan *p)
{
    for (int i = 0; i < p->nseg; i++)
        p->seg_views[i]->offset += p->bytes;
    p->bytes += p->segment_size;
    size_t start[ACT_ARENAS];
    for (int a = 0; a < ACT_ARENAS; a++) {
        start[a] = p->bytes;
        p->bytes += p->arena_size[a];
    }
    for (int i = 0; i < p->ngrads; i++)
        p->grads[i]->offset += start[p->grad_arena[i]];
    p->base = eng_alloc(be, p->bytes);
    for (int i = 0; i < p->nviews; i++)
        p->views[i]->base = p->base;
}

void act_plan_release(eng_backend *be, act_plan *p)
{
    eng_free(be, p->base);
    free(p->views);
    free(p->grads);
    free(p->grad_arena);
    free(p->seg_views);
    *p = (act_plan){0};
}

/* ---- construction and planning -------------------------------------------------------------- */

static eng_shape shape1(int64_t n) { return (eng_shape){.ndim = 1, .dim = {n}}; }

void conv_unit_make(eng_backend *be, eng_params *p, conv_unit *u, const char *conv, const char *norm, int64_t in,
                    int64_t out, int64_t k, int64_t stride, int64_t groups, unit_act act, unit_norm nm)
{
    *u = (conv_unit){.act = act, .norm = nm, .rmean = -1, .rvar = -1,
                     .desc = {.stride = {stride, stride}, .pad = {k / 2, k / 2}, .dilation = {1, 1}, .groups = groups}};
    u->w = eng_params_add(be, p, ENG_PARAM, eng_shape4(out, in / groups, k, k), 0, "%s.weight", conv);
    u->gamma = eng_params_add(be, p, ENG_PARAM, shape1(out), 0, "%s.weight", norm);
    u->beta = eng_params_add(be, p, ENG_PARAM, shape1(out), 0, "%s.bias", norm);
    if (nm.layer_norm) /* GroupNorm's state dict: weight and bias only */
        return;
    u->rmean = eng_params_add(be, p, ENG_BUFFER, shape1(out), 0, "%s.running_mean", norm);
    u->rvar = eng_params_add(be, p, ENG_BUFFER, shape1(out), 0, "%s.running_var", norm);
}

/* Batch norm + ReLU is one step each way; any other activation is a step of its own. */
static bool act_fused(const conv_unit *u)
{
    return u->act == UNIT_ACT_NONE || (u->act == UNIT_ACT_RELU && !u->norm.layer_norm);
}

eng_shape conv_unit_plan(eng_backend *be, act_plan *ap, const eng_params *p, conv_unit *u, const eng_shape *x)
{
    const eng_shape *ws = &p->entries[u->w].value.shape;
    eng_shape y = eng_conv_output_shape(x, ws, &u->desc);
    u->plan = eng_conv_plan(be, &u->desc, x, ws, false);
    act_plan_add(be, ap, &u->conv_out, y, false);
    act_plan_add(be, ap, &u->conv_grad, y, true);
    if (u->act == UNIT_ACT_SILU)
        act_plan_add(be, ap, &u->normed, y, false);
    act_plan_add(be, ap, &u->out, y, false);
    act_plan_add(be, ap, &u->out_grad, y, true);
    if (!act_fused(u))
        act_plan_add(be, ap, &u->pre_grad, y, true);
    int64_t nstats = u->norm.layer_norm ? y.dim[0] : y.dim[1]; /* per sample : per channel */
    act_plan_add(be, ap, &u->mean, shape1(nstats), false);
    act_plan_add(be, ap, &u->invstd, shape1(nstats), false);
    return y;
}

void conv_unit_unplan(eng_backend *be, conv_unit *u)
{
    eng_plan_free(be, u->plan);
    u->plan = NULL;
}

/* ---- forward ------------------------------------------------------------------------------ */

static const eng_tensor *ent(const eng_params *p, int i) { return &p->entries[i].value; }
static const eng_tensor *grad(const eng_params *p, int i) { return &p->entries[i].grad; }

void conv_unit_forward_eval_fused(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x,
                                  const eng_tensor *residual, eng_eval_act act, const eng_tensor *y)
{
    eng_conv_bn_forward_eval(be, u->plan, x, ent(p, u->w), u->norm.eps, ent(p, u->gamma), ent(p, u->beta),
                             ent(p, u->rmean), ent(p, u->rvar), residual, act, y);
}

eng_eval_act unit_eval_act(unit_act act)
{
    return act == UNIT_ACT_RELU ? ENG_EVAL_ACT_RELU : act == UNIT_ACT_SILU ? ENG_EVAL_ACT_SILU : ENG_EVAL_ACT_NONE;
}

/* conv_out → the norm → y, with batch norm's fused ReLU when `relu`. */
static void norm_forward(eng_backend *be, const eng_params *p, conv_unit *u, bool relu, double momentum,
                         const eng_tensor *y, const eng_reducer *across)
{
    const eng_tensor *g = ent(p, u->gamma), *b = ent(p, u->beta);
    if (u->norm.layer_norm) { /* the same in training and evaluation: no running statistics */
        eng_layernorm2d_forward(be, u->norm.eps, &u->conv_out, g, b, &u->mean, &u->invstd, y);
        return;
    }
    const eng_tensor *rm = ent(p, u->rmean), *rv = ent(p, u->rvar);
    if (relu)
        eng_batchnorm_relu_forward_train(be, momentum, u->norm.eps, &u->conv_out, g, b, rm, rv, &u->mean,
                                         &u->invstd, y, across);
    else
        eng_batchnorm_forward_train(be, momentum, u->norm.eps, &u->conv_out, g, b, rm, rv, &u->mean,
                                    &u->invstd, y, across);
}

/* The forward with the running statistics moved by `momentum` (batch norm in training). */
static void unit_forward(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x, bool train,
                         double momentum, const eng_reducer *across)
{
    if (!train && !u->norm.layer_norm) { /* evaluation keeps no input of a backward: SiLU fuses too */
        conv_unit_forward_eval_fused(be, p, u, x, NULL, unit_eval_act(u->act), &u->out);
        return;
    }
    const eng_tensor *normed = u->act == UNIT_ACT_SILU ? &u->normed : &u->out;
    eng_conv_forward(be, u->plan, x, ent(p, u->w), NULL, &u->conv_out);
    norm_forward(be, p, u, act_fused(u) && u->act == UNIT_ACT_RELU, momentum, normed, across);
    if (u->act == UNIT_ACT_RELU && u->norm.layer_norm)
        eng_relu_forward(be, &u->out, &u->out);
    if (u->act == UNIT_ACT_SILU)
        eng_silu_forward(be, &u->normed, &u->out);
}

void conv_unit_forward(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x, bool train,
                       const eng_reducer *across)
{
    unit_forward(be, p, u, x, train, u->norm.momentum, across);
}

/* Momentum 0: running = 1·running + 0·batch, the running statistics' bits unchanged. */
void conv_unit_recompute(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x,
                         const eng_reducer *across)
{
    unit_forward(be, p, u, x, true, 0.0, across);
}

/* ---- backward ----------------------------------------------------------------------------- */

void conv_unit_zero_inner_grads(eng_backend *be, const conv_unit *u)
{
    eng_zero(be, &u->conv_grad);
    if (!act_fused(u))
        eng_zero(be, &u->pre_grad);
}

void conv_unit_zero_grads(eng_backend *be, const conv_unit *u)
{
    conv_unit_zero_inner_grads(be, u);
    eng_zero(be, &u->out_grad);
}

/* The gradient at the norm's output: out_grad, or pre_grad after an unfused activation's backward. */
static const eng_tensor *activation_backward(eng_backend *be, conv_unit *u)
{
    if (act_fused(u))
        return &u->out_grad;
    if (u->act == UNIT_ACT_SILU)
        eng_silu_backward(be, &u->normed, &u->out_grad, &u->pre_grad);
    else
        eng_relu_backward(be, &u->out, &u->out_grad, &u->pre_grad);
    return &u->pre_grad;
}

void conv_unit_backward(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x,
                        const eng_tensor *dx, const eng_reducer *across)
{
    const eng_tensor *dy = activation_backward(be, u), *g = ent(p, u->gamma), *dg = grad(p, u->gamma),
                     *db = grad(p, u->beta);
    if (u->norm.layer_norm)
        eng_layernorm2d_backward(be, &u->conv_out, g, &u->mean, &u->invstd, dy, &u->conv_grad, dg, db);
    else if (u->act == UNIT_ACT_RELU)
        eng_batchnorm_relu_backward(be, &u->conv_out, g, &u->mean, &u->invstd, &u->out, dy, &u->conv_grad, dg, db,
                                    across);
    else
        eng_batchnorm_backward(be, &u->conv_out, g, &u->mean, &u->invstd, dy, &u->conv_grad, dg, db, across);
    eng_conv_backward(be, u->plan, x, ent(p, u->w), &u->conv_grad, dx, grad(p, u->w), NULL);
}

/* ---- squeeze-excitation ---------------------------------------------------------------------- */

void se_unit_make(eng_backend *be, eng_params *p, se_unit *se, const char *reduce, const char *expand,
                  int64_t channels, int64_t reduced, unit_act act)
{
    se->act = act;
    se->w1 = eng_params_add(be, p, ENG_PARAM, eng_shape4(reduced, channels, 1, 1), 0, "%s.weight", reduce);
    se->b1 = eng_params_add(be, p, ENG_PARAM, shape1(reduced), 0, "%s.bias", reduce);
    se->w2 = eng_params_add(be, p, ENG_PARAM, eng_shape4(channels, reduced, 1, 1), 0, "%s.weight", expand);
    se->b2 = eng_params_add(be, p, ENG_PARAM, shape1(channels), 0, "%s.bias", expand);
}

void se_unit_plan(eng_backend *be, act_plan *ap, const eng_params *p, se_unit *se, const eng_shape *x)
{
    int64_t n = x->dim[0], c = x->dim[1], r = p->entries[se->b1].value.shape.dim[0];
    act_plan_add(be, ap, &se->pooled, eng_shape4(n, c, 1, 1), false);
    act_plan_add(be, ap, &se->pooled_grad, eng_shape4(n, c, 1, 1), true);
    act_plan_add(be, ap, &se->hidden_pre, eng_shape2(n, r), false);
    act_plan_add(be, ap, &se->hidden_pre_grad, eng_shape2(n, r), true);
    act_plan_add(be, ap, &se->hidden, eng_shape2(n, r), false);
    act_plan_add(be, ap, &se->hidden_grad, eng_shape2(n, r), true);
    act_plan_add(be, ap, &se->gate, eng_shape2(n, c), false);
    act_plan_add(be, ap, &se->gate_grad, eng_shape2(n, c), true);
    act_plan_add(be, ap, &se->gate_pre_grad, eng_shape2(n, c), true);
    act_plan_add(be, ap, &se->out, *x, false);
    act_plan_add(be, ap, &se->out_grad, *x, true);
}

static const eng_tensor *value_of(const eng_params *p, int i) { return &p->entries[i].value; }
static const eng_tensor *grad_of(const eng_params *p, int i) { return &p->entries[i].grad; }

/* A 1×1 convolution's weight (or its gradient) O × I × 1 × 1 seen as the linear layer's O × I. */
static eng_tensor as_matrix(const eng_tensor *w)
{
    return eng_reshape(w, eng_shape2(w->shape.dim[0], w->shape.dim[1]));
}

void se_unit_forward(eng_backend *be, const eng_params *p, se_unit *se, const eng_tensor *x)
{
    eng_adaptive_avgpool_forward(be, x, &se->pooled);
    eng_tensor pooled = eng_reshape(&se->pooled, eng_shape2(x->shape.dim[0], x->shape.dim[1]));
    eng_tensor w1 = as_matrix(value_of(p, se->w1)), w2 = as_matrix(value_of(p, se->w2));
    eng_linear_forward(be, &pooled, &w1, value_of(p, se->b1), &se->hidden_pre);
    if (se->act == UNIT_ACT_SILU)
        eng_silu_forward(be, &se->hidden_pre, &se->hidden);
    else
        eng_relu_forward(be, &se->hidden_pre, &se->hidden);
    eng_linear_forward(be, &se->hidden, &w2, value_of(p, se->b2), &se->gate);
    eng_sigmoid_forward(be, &se->gate, &se->gate);
    eng_channel_scale_forward(be, x, &se->gate, &se->out);
}

void se_unit_zero_grads(eng_backend *be, const se_unit *se)
{
    const eng_tensor *g[] = {&se->pooled_grad, &se->hidden_pre_grad, &se->hidden_grad, &se->gate_grad,
                             &se->gate_pre_grad, &se->out_grad};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        eng_zero(be, g[i]);
}

void se_unit_backward(eng_backend *be, const eng_params *p, se_unit *se, const eng_tensor *x, const eng_tensor *dx)
{
    eng_tensor w1 = as_matrix(value_of(p, se->w1)), w2 = as_matrix(value_of(p, se->w2));
    eng_tensor gw1 = as_matrix(grad_of(p, se->w1)), gw2 = as_matrix(grad_of(p, se->w2));
    eng_channel_scale_backward(be, x, &se->gate, &se->out_grad, dx, &se->gate_grad);
    eng_sigmoid_backward(be, &se->gate, &se->gate_grad, &se->gate_pre_grad);
    eng_linear_backward(be, &se->hidden, &w2, &se->gate_pre_grad, &se->hidden_grad, &gw2, grad_of(p, se->b2));
    if (se->act == UNIT_ACT_SILU)
        eng_silu_backward(be, &se->hidden_pre, &se->hidden_grad, &se->hidden_pre_grad);
    else
        eng_relu_backward(be, &se->hidden, &se->hidden_grad, &se->hidden_pre_grad);
    eng_tensor pooled = eng_reshape(&se->pooled, eng_shape2(x->shape.dim[0], x->shape.dim[1]));
    eng_tensor pooled_grad = eng_reshape(&se->pooled_grad, pooled.shape);
    eng_linear_backward(be, &pooled, &w1, &se->hidden_pre_grad, &pooled_grad, &gw1, grad_of(p, se->b1));
    eng_adaptive_avgpool_backward(be, &se->pooled_grad, dx);
}

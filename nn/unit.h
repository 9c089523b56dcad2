/*
 * unit.h — what the convolutional trunks (resnet.c, regnet.c) are built from: the
 * conv → norm → activation brick, and the planner that lays out their activation memory.
 *
 * A `conv_unit` is one convolution without bias, its norm (BatchNorm2d, or VISSL's LayerNorm2d)
 * and an optional activation (ReLU, or SiLU for ClassyVision's RegNetZ). Its tensors are
 * entries of the trunk's eng_params, named as the trunk's state dict names them; its
 * activations are views laid out by an `act_plan`. Forward and backward follow nn.h: the
 * backward reads the activations of a training forward and accumulates into the parameter
 * gradients and into dx.
 *
 * A `se_unit` is squeeze-excitation as ClassyVision writes it for RegNet and EfficientNet: pool
 * to 1 × 1, a 1×1 conv with bias, an activation, a second 1×1 conv with bias, a sigmoid, and the
 * input's channels scaled by the result. On a 1 × 1 map the 1×1 convs are the linear layers they
 * are (weights O × I × 1 × 1 read as O × I).
 *
 * The `act_plan` lays out every activation of a trunk by bump allocation, then makes ONE
 * allocation and points all the views at it, so forward and backward allocate nothing.
 * Gradients go to "arenas": a trunk's blocks take turns in arenas 0 and 1 (block i in arena
 * i % 2: a block's gradients are live only while backward is in that block or the next one
 * down), and arena 2 holds what lives through the whole backward (the stem's). Each arena is
 * as big as the largest block that used it, not the sum.
 *
 * Activation checkpointing adds one more arena, for activations: between act_plan_segment_begin
 * and act_plan_segment_end, activations are laid out from the start of the "segment arena", which
 * every segment reuses. Only one segment's activations are alive at a time: training overwrites
 * them segment by segment, and the backward recomputes a segment's from its input (kept outside
 * the arena) just before it needs them.
 */
#ifndef SELFSUP_NN_UNIT_H
#define SELFSUP_NN_UNIT_H

#include "nn.h"
#include "params.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- activation memory ---------------------------------------------------------------------- */

enum { ACT_ARENAS = 3, ACT_STEM_ARENA = 2 };

typedef struct {
    size_t bytes;                /* the activations' bytes, then (after commit) everything's */
    void *base;                  /* the one allocation (after commit) */
    eng_tensor **views;          /* every view laid out, re-pointed at commit */
    eng_tensor **grads;          /* the gradient views, and their arenas */
    int *grad_arena;
    int nviews, ngrads, vcap, gcap;
    int arena;                   /* where gradients are being laid out now */
    size_t arena_at[ACT_ARENAS], arena_size[ACT_ARENAS];
    bool in_segment;             /* activations go to the segment arena */
    size_t segment_at, segment_size;
    eng_tensor **seg_views;      /* the views laid out there (their offsets move at commit) */
    int nseg, segcap;
} act_plan;

/* Lay out t with shape s: an activation, or (is_grad) a gradient in the current arena. */
void act_plan_add(eng_backend *be, act_plan *p, eng_tensor *t, eng_shape s, bool is_grad);
/* Gradients from here on go to arena a, from its start. */
void act_plan_enter_arena(act_plan *p, int a);
/* Activations from here on go to the segment arena, from its start; _end: back to their own room. */
void act_plan_segment_begin(act_plan *p);
void act_plan_segment_end(act_plan *p);
/* Place the arenas after the activations, make the allocation and point every view at it. */
void act_plan_commit(eng_backend *be, act_plan *p);
/* Free the allocation and forget every view (the plan can be used again). */
void act_plan_release(eng_backend *be, act_plan *p);

/* ---- conv → norm → activation --------------------------------------------------------------- */

typedef enum { UNIT_ACT_NONE, UNIT_ACT_RELU, UNIT_ACT_SILU } unit_act;

typedef struct {
    double eps, momentum;  /* the norm's (PyTorch's BatchNorm2d arguments) */
    bool layer_norm;       /* VISSL's LayerNorm2d (GroupNorm(1, C)) instead of batch norm */
} unit_norm;

typedef struct {
    int w, gamma, beta, rmean, rvar; /* entries of the trunk's params; rmean/rvar -1 for LayerNorm */
    unit_norm norm;
    unit_act act;
    eng_conv_desc desc;
    eng_plan *plan;
    eng_tensor conv_out, conv_grad; /* the norm's input and its gradient */
    eng_tensor normed;              /* SiLU only: the norm's output (SiLU's backward reads it) */
    eng_tensor out, out_grad;       /* the unit's output and its gradient */
    eng_tensor pre_grad;            /* an unfused activation's input gradient (LayerNorm + ReLU, SiLU) */
    eng_tensor mean, invstd;        /* the norm's saved statistics: per channel (BN), per sample (LN) */
} conv_unit;

/* Declare the unit's tensors in p, state-dict order: "<conv>.weight" (out × in/groups × k × k),
 * then "<norm>.weight", ".bias" and, for batch norm, ".running_mean", ".running_var".
 * Padding is k / 2. */
void conv_unit_make(eng_backend *be, eng_params *p, conv_unit *u, const char *conv, const char *norm, int64_t in,
                    int64_t out, int64_t k, int64_t stride, int64_t groups, unit_act act, unit_norm nm);
/* Plan the convolution for input x and lay out the unit's activations; returns its output shape. */
eng_shape conv_unit_plan(eng_backend *be, act_plan *ap, const eng_params *p, conv_unit *u, const eng_shape *x);
void conv_unit_unplan(eng_backend *be, conv_unit *u);

/* Forward into u->out. train: batch statistics (over the ranks of `across`, NULL: this rank's),
 * running statistics updated; else the running statistics. */
void conv_unit_forward(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x, bool train,
                       const eng_reducer *across);
/* The training forward again, for activation checkpointing's backward: the same batch
 * statistics and outputs, bit for bit, but the running statistics are left as they are (the
 * forward already moved them once; torch.utils.checkpoint, VISSL's, moves them twice). */
void conv_unit_recompute(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x,
                         const eng_reducer *across);
/* Which of `splits` segments block i of n is in (consecutive blocks, as even as can be), and
 * whether block i is the first or the last of its segment. */
static inline int act_segment_of(int i, int n, int splits) { return (int)((long)i * splits / n); }
static inline bool act_segment_starts(int i, int n, int splits)
{
    return i == 0 || act_segment_of(i, n, splits) != act_segment_of(i - 1, n, splits);
}
static inline bool act_segment_ends(int i, int n, int splits)
{
    return i == n - 1 || act_segment_of(i, n, splits) != act_segment_of(i + 1, n, splits);
}
/* The backward is about to enter block i: the first block of the segment to recompute now (the
 * one that ends at i), or -1 when there is none (no checkpointing, not a segment's end, or the
 * last segment, whose activations the forward left in place). */
static inline int act_segment_to_recompute(int i, int n, int splits)
{
    if (!splits || i == n - 1 || !act_segment_ends(i, n, splits))
        return -1;
    while (!act_segment_starts(i, n, splits))
        i--;
    return i;
}
/* Evaluation with batch norm into y: conv, norm, [+ residual], [act] as one backend step
 * (eng_conv_bn_forward_eval); act applies after the residual. Not for LayerNorm units. */
void conv_unit_forward_eval_fused(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x,
                                  const eng_tensor *residual, eng_eval_act act, const eng_tensor *y);
/* An activation as a fused evaluation's. */
eng_eval_act unit_eval_act(unit_act act);
/* Zero the unit's own gradient views (before its first backward use: they accumulate). */
void conv_unit_zero_grads(eng_backend *be, const conv_unit *u);
/* The same but for out_grad (a block whose output is its last unit's keeps what arrived there). */
void conv_unit_zero_inner_grads(eng_backend *be, const conv_unit *u);
/* Backward from u->out_grad: parameter gradients accumulate into p's, the input gradient into
 * dx (NULL: skipped). x is the forward's input. */
void conv_unit_backward(eng_backend *be, const eng_params *p, conv_unit *u, const eng_tensor *x,
                        const eng_tensor *dx, const eng_reducer *across);

/* ---- squeeze-excitation ---------------------------------------------------------------------- */

typedef struct {
    int w1, b1, w2, b2;               /* the reducing and the expanding 1×1 conv (entries) */
    unit_act act;
    eng_tensor pooled, pooled_grad;   /* N × C × 1 × 1 */
    eng_tensor hidden_pre, hidden_pre_grad, hidden, hidden_grad; /* N × reduced */
    eng_tensor gate, gate_grad, gate_pre_grad;                   /* N × C, after the sigmoid */
    eng_tensor out, out_grad;         /* the input, scaled */
} se_unit;

/* Declare "<reduce>.weight", "<reduce>.bias", "<expand>.weight", "<expand>.bias" in p. */
void se_unit_make(eng_backend *be, eng_params *p, se_unit *se, const char *reduce, const char *expand,
                  int64_t channels, int64_t reduced, unit_act act);
void se_unit_plan(eng_backend *be, act_plan *ap, const eng_params *p, se_unit *se, const eng_shape *x);
void se_unit_forward(eng_backend *be, const eng_params *p, se_unit *se, const eng_tensor *x);
void se_unit_zero_grads(eng_backend *be, const se_unit *se);
/* Backward from se->out_grad into the parameters and into dx (x: the forward's input). */
void se_unit_backward(eng_backend *be, const eng_params *p, se_unit *se, const eng_tensor *x, const eng_tensor *dx);

#endif

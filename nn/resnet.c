/*
 * resnet.c — VISSL's ResNet / ResNeXt trunk on the model engine (see resnet.h).
 *
 * How it works, in the spirit of llm.c: the network is a stem `unit` (conv → BN → ReLU), an
 * optional max pool, a flat array of residual `block`s (each 2 or 3 units plus an optional
 * downsample unit), then an adaptive average pool whose N × C × 1 × 1 output is also the N × C
 * flatten feature. Forward and backward are explicit loops over that array; there is no graph.
 *
 * Memory is laid out by bump allocation in three passes over the same structures:
 *   - construction lays out parameters (and their gradients, same offsets) and BN running
 *     statistics, recording every tensor as a named entry in state-dict order;
 *   - resnet_plan lays out every activation, its gradient and the BN batch statistics for one
 *     input shape, then makes one allocation and points all the views at it.
 * Each unit keeps the conv output (the BN's input, needed by BN backward) and the BN output,
 * ReLU'd in place (ReLU backward reads the output, as PyTorch's in-place ReLU does). Gradients
 * of activations get their own tensors; backward zeroes each just before its first use because
 * the engine's backward functions accumulate, which also makes the residual fan-out correct for
 * free. A block's gradients are live only while backward is in that block or the one before it
 * (its output's gradient is the next block's dx), so the blocks take turns in two gradient
 * arenas, block i in arena i % 2: the gradients take two blocks' room, not every block's (the
 * stem's and the pool's have a third arena of their own).
 * With NORM LayerNorm a unit's norm is eng_layernorm2d_* instead of batch norm (the same in
 * training and evaluation, per-sample statistics in mean/invstd) and it has no running stats.
 */
#include "resnet.h"
#include "test_hooks.h"
#include "unit.h"

#include "log.h"
#include "rng.h"
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BN_MOMENTUM 0.1
#define BN_EPS 1e-5

typedef conv_unit unit;

/* out = ReLU(last unit + identity or downsample(x)), ReLU'd in place. */
typedef struct {
    unit u[3];
    int nu;
    bool has_down;
    unit down;
    eng_tensor out, out_grad;
} block;

struct resnet {
    resnet_options opt;
    bool bottleneck;
    eng_params params; /* every named tensor, in state-dict order */

    unit stem;
    eng_pool_desc pool;
    block *blocks;
    int nblocks;
    int layer_end[4]; /* index of each layer's last block */
    int64_t out_dim;

    /* planned for one input shape */
    bool planned;
    eng_shape in_shape;
    act_plan acts;       /* every activation and gradient view, one allocation */
    eng_tensor pool_out, pool_grad, avg, flat;
    eng_tensor last_x; /* the image of the last forward: conv1's weight gradient reads it */
    bool last_train;
    unsigned exposed; /* features (bit per resnet_feature_id) the caller reads: kept logical */
    bool recomputing; /* activation checkpointing's second forward of a segment */
    const eng_reducer *bn_across; /* SyncBN: batch norm over the group's ranks (NULL: this rank's batch) */
};

resnet_options resnet_defaults(void)
{
    return (resnet_options){.depth = 50, .width_multiplier = 1, .groups = 1, .width_per_group = 64,
                            .layer4_stride = 2, .in_channels = 3};
}

/* ---- construction: named entries in state-dict order ------------------------------------------ */

/* conv → norm (→ ReLU), named "<prefix><conv>" and "<prefix><bn>". */
static void unit_make(eng_backend *be, resnet *net, unit *u, const char *prefix, const char *conv, const char *bn,
                      int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups, bool relu)
{
    char cname[96], bname[96];
    snprintf(cname, sizeof cname, "%s%s", prefix, conv);
    snprintf(bname, sizeof bname, "%s%s", prefix, bn);
    unit_norm nm = {.eps = BN_EPS, .momentum = BN_MOMENTUM, .layer_norm = net->opt.norm == RESNET_NORM_LAYER};
    conv_unit_make(be, &net->params, u, cname, bname, in, out, k, stride, groups, relu ? UNIT_ACT_RELU : UNIT_ACT_NONE,
                   nm);
}

/* torchvision's Bottleneck / BasicBlock; the stride sits on the 3×3 conv (v1.5). */
static int64_t block_make(eng_backend *be, resnet *net, block *b, int layer, int index, int64_t in, int64_t planes,
                          int64_t stride)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "_feature_blocks.layer%d.%d.", layer, index);
    const resnet_options *o = &net->opt;
    int64_t out;
    if (net->bottleneck) {
        int64_t width = planes * o->width_per_group / 64 * o->groups;
        out = planes * 4;
        b->nu = 3;
        unit_make(be, net, &b->u[0], prefix, "conv1", "bn1", in, width, 1, 1, 1, true);
        unit_make(be, net, &b->u[1], prefix, "conv2", "bn2", width, width, 3, stride, o->groups, true);
        unit_make(be, net, &b->u[2], prefix, "conv3", "bn3", width, out, 1, 1, 1, false);
    } else {
        out = planes;
        b->nu = 2;
        unit_make(be, net, &b->u[0], prefix, "conv1", "bn1", in, planes, 3, stride, 1, true);
        unit_make(be, net, &b->u[1], prefix, "conv2", "bn2", planes, planes, 3, 1, 1, false);
    }
    b->has_down = stride != 1 || in != out;
    if (b->has_down)
        unit_make(be, net, &b->down, prefix, "downsample.0", "downsample.1", in, out, 1, stride, 1, false);
    return out;
}

static int blocks_per_layer(int depth, int layers[4])
{
    static const struct { int depth, n[4]; } CONFIG[] = {
        {18, {2, 2, 2, 2}},   {34, {3, 4, 6, 3}},    {50, {3, 4, 6, 3}},
        {101, {3, 4, 23, 3}}, {152, {3, 8, 36, 3}}, {200, {3, 24, 36, 3}},
    };
    for (size_t i = 0; i < ARRAY_LEN(CONFIG); i++)
        if (CONFIG[i].depth == depth) {
            memcpy(layers, CONFIG[i].n, sizeof CONFIG[i].n);
            return 0;
        }
    return -1;
}

static int check_options(const resnet_options *o, int layers[4], char **err)
{
    if (blocks_per_layer(o->depth, layers) != 0)
        return report_failure(err, "resnet: DEPTH %d is not one of 18, 34, 50, 101, 152, 200", o->depth);
    if (o->width_multiplier < 1 || o->groups < 1 || o->width_per_group < 1)
        return report_failure(err, "resnet: WIDTH_MULTIPLIER, GROUPS and WIDTH_PER_GROUP must be ≥ 1");
    if (o->depth < 50 && (o->groups != 1 || o->width_per_group != 64))
        return report_failure(err, "resnet: depth %d (BasicBlock) needs GROUPS 1 and WIDTH_PER_GROUP 64", o->depth);
    if (o->layer4_stride != 1 && o->layer4_stride != 2)
        return report_failure(err, "resnet: LAYER4_STRIDE must be 1 or 2 (got %d)", o->layer4_stride);
    if (o->in_channels != 1 && o->in_channels != 3)
        return report_failure(err, "resnet: input channels must be 3 (rgb/bgr) or 1 (lab)");
    if (o->norm != RESNET_NORM_BATCH && o->norm != RESNET_NORM_LAYER)
        return report_failure(err, "resnet: NORM must be BatchNorm or LayerNorm");
    if (o->checkpoint_splits < 0)
        return report_failure(err, "resnet: NUM_ACTIVATION_CHECKPOINTING_SPLITS must be ≥ 1");
    return 0;
}

int resnet_norm_by_name(const char *name)
{
    if (strcmp(name, "BatchNorm") == 0)
        return RESNET_NORM_BATCH;
    if (strcmp(name, "LayerNorm") == 0)
        return RESNET_NORM_LAYER;
    return -1;
}

resnet *resnet_new(eng_backend *be, const resnet_options *opt, uint64_t seed, char **err)
{
    int layers[4];
    if (check_options(opt, layers, err) != 0)
        return NULL;
    resnet *net = xcalloc(1, sizeof *net);
    net->opt = *opt;
    net->bottleneck = opt->depth >= 50;
    int64_t w = opt->width_multiplier;
    if (opt->small_stem)
        unit_make(be, net, &net->stem, "_feature_blocks.", "conv1", "bn1", opt->in_channels, 64 * w, 3, 1, 1, true);
    else
        unit_make(be, net, &net->stem, "_feature_blocks.", "conv1", "bn1", opt->in_channels, 64 * w, 7, 2, 1, true);
    net->pool = (eng_pool_desc){.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}};
    net->nblocks = layers[0] + layers[1] + layers[2] + layers[3];
    net->blocks = xcalloc((size_t)net->nblocks, sizeof *net->blocks);
    int64_t in = 64 * w;
    int k = 0;
    for (int l = 0; l < 4; l++) {
        int64_t planes = (64 << l) * w, stride = l == 0 ? 1 : l == 3 ? opt->layer4_stride : 2;
        for (int i = 0; i < layers[l]; i++, k++)
            in = block_make(be, net, &net->blocks[k], l + 1, i, in, planes, i == 0 ? stride : 1);
        net->layer_end[l] = k - 1;
    }
    net->out_dim = in;
    eng_params_alloc(be, &net->params);
    resnet_init(be, net, seed);
    resnet_zero_grad(be, net);
    return net;
}

static void unplan(eng_backend *be, resnet *net);

void resnet_free(eng_backend *be, resnet *net)
{
    if (!net)
        return;
    unplan(be, net);
    eng_params_free(be, &net->params);
    free(net->blocks);
    free(net);
}

/* ---- accessors ------------------------------------------------------------------------------ */

int resnet_entry_count(const resnet *net) { return net->params.nentries; }
eng_params *resnet_param_table(resnet *net) { return &net->params; }
const resnet_entry *resnet_entry_at(const resnet *net, int i) { return &net->params.entries[i]; }
int64_t resnet_out_dim(const resnet *net) { return net->out_dim; }
const resnet_options *resnet_get_options(const resnet *net) { return &net->opt; }
int64_t resnet_param_count(const resnet *net) { return eng_params_count(&net->params); }
eng_tensor resnet_params(const resnet *net) { return eng_params_values(&net->params); }
eng_tensor resnet_grads(const resnet *net) { return eng_params_grads(&net->params); }
eng_tensor resnet_buffers(const resnet *net) { return eng_params_buffers(&net->params); }
void resnet_zero_grad(eng_backend *be, resnet *net) { eng_params_zero_grad(be, &net->params); }

/* ---- initialisation ------------------------------------------------------------------------- */

static int64_t fan_in(const eng_shape *s) { return s->dim[1] * s->dim[2] * s->dim[3]; }

/* PyTorch's reset_parameters: conv weights kaiming_uniform_(a=√5) — gain √(1/3), bound =
 * gain·√3/√fan_in = 1/√fan_in; BN weight 1, bias 0, running mean 0, running var 1. */
static void init_values(const eng_entry *e, rng_stream *r, float *h)
{
    int64_t n = eng_numel(&e->value.shape);
    double bound = e->value.shape.ndim == 4 ? 1.0 / sqrt((double)fan_in(&e->value.shape)) : 0.0;
    float v = eng_name_ends_with(e->name, ".weight") || eng_name_ends_with(e->name, "running_var") ? 1.0f : 0.0f;
    for (int64_t j = 0; j < n; j++)
        h[j] = e->value.shape.ndim == 4 ? (float)rng_uniform_range(r, -bound, bound) : v;
}

void resnet_init(eng_backend *be, resnet *net, uint64_t seed)
{
    eng_params_init_with(be, &net->params, seed, init_values);
    if (net->opt.zero_init_residual)
        for (int b = 0; b < net->nblocks; b++) {
            const eng_tensor *g = &net->params.entries[net->blocks[b].u[net->blocks[b].nu - 1].gamma].value;
            eng_zero(be, g);
        }
}

void resnet_init_formula(eng_backend *be, resnet *net) { eng_params_init_formula(be, &net->params); }

/* ---- planning: every activation laid out, then one allocation ------------------------------ */

static void act(eng_backend *be, resnet *net, eng_tensor *t, eng_shape s, bool is_grad)
{
    act_plan_add(be, &net->acts, t, s, is_grad);
}

static eng_shape unit_plan(eng_backend *be, resnet *net, unit *u, const eng_shape *x)
{
    return conv_unit_plan(be, &net->acts, &net->params, u, x);
}

/* With activation checkpointing a block's activations go to the segment arena, but for the
 * output of its segment's last block, which the next segment's recompute starts from. */
static eng_shape block_plan(eng_backend *be, resnet *net, block *b, int index, const eng_shape *x)
{
    int splits = net->opt.checkpoint_splits;
    act_plan_enter_arena(&net->acts, index % 2);
    if (splits && act_segment_starts(index, net->nblocks, splits))
        act_plan_segment_begin(&net->acts);
    eng_shape s = *x;
    for (int i = 0; i < b->nu; i++)
        s = unit_plan(be, net, &b->u[i], &s);
    if (b->has_down)
        unit_plan(be, net, &b->down, x);
    if (splits && act_segment_ends(index, net->nblocks, splits))
        act_plan_segment_end(&net->acts);
    act(be, net, &b->out, s, false);
    act(be, net, &b->out_grad, s, true);
    return s;
}

static void unplan(eng_backend *be, resnet *net)
{
    if (!net->planned)
        return;
    conv_unit_unplan(be, &net->stem);
    for (int i = 0; i < net->nblocks; i++) {
        block *b = &net->blocks[i];
        for (int j = 0; j < b->nu; j++)
            conv_unit_unplan(be, &b->u[j]);
        if (b->has_down)
            conv_unit_unplan(be, &b->down);
    }
    act_plan_release(be, &net->acts);
    net->planned = false;
}

void resnet_plan(eng_backend *be, resnet *net, const eng_shape *input)
{
    if (net->planned && eng_shape_equal(&net->in_shape, input))
        return;
    unplan(be, net);
    if (input->ndim != 4 || input->dim[1] != net->opt.in_channels)
        die(EXIT_RUNTIME, "resnet: input must be N × %d × H × W", net->opt.in_channels);
    act_plan_enter_arena(&net->acts, ACT_STEM_ARENA); /* the stem's and the pool's gradients live the whole backward */
    eng_shape s = unit_plan(be, net, &net->stem, input);
    if (!net->opt.small_stem) {
        s = eng_pool_output_shape(&s, &net->pool);
        act(be, net, &net->pool_out, s, false);
        act(be, net, &net->pool_grad, s, true);
    }
    for (int i = 0; i < net->nblocks; i++)
        s = block_plan(be, net, &net->blocks[i], i, &s);
    eng_shape avg = eng_shape4(s.dim[0], s.dim[1], 1, 1);
    act(be, net, &net->avg, avg, false);
    act_plan_commit(be, &net->acts);
    net->flat = eng_reshape(&net->avg, eng_shape2(s.dim[0], s.dim[1]));
    net->in_shape = *input;
    net->planned = true;
    net->last_train = false;
}

/* ---- forward ------------------------------------------------------------------------------ */

static void unit_forward(eng_backend *be, resnet *net, unit *u, const eng_tensor *x, bool train)
{
    if (net->recomputing)
        conv_unit_recompute(be, &net->params, u, x, net->bn_across);
    else
        conv_unit_forward(be, &net->params, u, x, train, net->bn_across);
}

static void block_forward(eng_backend *be, resnet *net, block *b, const eng_tensor *x, bool train)
{
    const eng_tensor *identity = x;
    if (b->has_down) {
        unit_forward(be, net, &b->down, x, train);
        identity = &b->down.out;
    }
    const eng_tensor *h = x;
    for (int i = 0; i < b->nu - 1; i++) {
        unit_forward(be, net, &b->u[i], h, train);
        h = &b->u[i].out;
    }
    unit *last = &b->u[b->nu - 1];
    if (!train && !last->norm.layer_norm) { /* the residual add and the ReLU join the last conv */
        conv_unit_forward_eval_fused(be, &net->params, last, h, identity, ENG_EVAL_ACT_RELU, &b->out);
        return;
    }
    unit_forward(be, net, last, h, train);
    eng_add_relu_forward(be, &last->out, identity, &b->out);
}

static const eng_tensor *res1(const resnet *net) { return net->opt.small_stem ? &net->stem.out : &net->pool_out; }

static eng_tensor *stage_out(resnet *net, int stage) { return &net->blocks[net->layer_end[stage]].out; }

/* The unit's activations and their gradients (the backward walks them in one layout). */
static void set_unit_layout(unit *u, eng_layout l)
{
    u->conv_out.layout = u->conv_grad.layout = u->out.layout = u->out_grad.layout = u->pre_grad.layout = l;
}

/* Whether a caller reads a feature from inside the trunk (res5avg and flatten are the pool's). */
static bool inner_exposed(const resnet *net)
{
    unsigned inner = 0;
    for (int f = RESNET_CONV1; f <= RESNET_RES5; f++)
        inner |= 1u << f;
    return (net->exposed & inner) != 0;
}

/* The activations' layouts for this forward. With batch norm the trunk is conv, BN, ReLU,
 * residual adds and a max pool, which all take the backend's native layout (oneDNN's
 * channel-blocked one on the cpu) in training and in evaluation, so every activation between
 * them keeps it and nothing is converted from conv to conv. Training keeps the gradients in it
 * too. The exceptions are the features a caller reads (exposed): evaluation writes those
 * logical (its fused conv writes either); training, whose residual add takes one layout for
 * all its operands, then runs the whole trunk logical. The stem's output and the max pool's
 * share one layout (the pool's rule). */
static void set_layouts(resnet *net, bool train)
{
    bool native = net->opt.norm == RESNET_NORM_BATCH && !(train && inner_exposed(net));
    eng_layout inner = native ? ENG_LAYOUT_NATIVE : ENG_LAYOUT_LOGICAL;
    set_unit_layout(&net->stem, inner);
    net->pool_out.layout = net->pool_grad.layout = inner;
    for (int i = 0; i < net->nblocks; i++) {
        block *b = &net->blocks[i];
        for (int j = 0; j < b->nu; j++)
            set_unit_layout(&b->u[j], inner);
        if (b->has_down)
            set_unit_layout(&b->down, inner);
        b->out.layout = b->out_grad.layout = inner;
    }
    if (train)
        return;
    if (net->exposed & (1u << RESNET_CONV1 | 1u << RESNET_RES1))
        net->stem.out.layout = net->pool_out.layout = ENG_LAYOUT_LOGICAL;
    for (int f = RESNET_RES2; f <= RESNET_RES5; f++)
        if (net->exposed & 1u << f)
            stage_out(net, f - RESNET_RES2)->layout = ENG_LAYOUT_LOGICAL;
}

void resnet_set_batchnorm_reducer(resnet *net, const eng_reducer *across) { net->bn_across = across; }

void resnet_expose(resnet *net, resnet_feature_id f)
{
    if ((int)f < 0 || f >= RESNET_NFEATURES)
        die(EXIT_RUNTIME, "resnet: no feature number %d", (int)f);
    net->exposed |= 1u << f;
}

size_t resnet_activation_bytes(const resnet *net) { return net->planned ? net->acts.bytes : 0; }

const eng_tensor *resnet_forward(eng_backend *be, resnet *net, const eng_tensor *x, bool train)
{
    if (!net->planned || !eng_shape_equal(&x->shape, &net->in_shape))
        die(EXIT_RUNTIME, "resnet: forward on a shape that resnet_plan did not plan");
    set_layouts(net, train);
    unit_forward(be, net, &net->stem, x, train);
    if (!net->opt.small_stem)
        eng_maxpool_forward(be, &net->pool, &net->stem.out, &net->pool_out);
    const eng_tensor *h = res1(net);
    for (int i = 0; i < net->nblocks; i++) {
        block_forward(be, net, &net->blocks[i], h, train);
        h = &net->blocks[i].out;
    }
    eng_adaptive_avgpool_forward(be, h, &net->avg);
    net->last_x = *x;
    net->last_train = train;
    return &net->flat;
}

const eng_tensor *resnet_feature(const resnet *net, resnet_feature_id f)
{
    switch (f) {
    case RESNET_CONV1: return &net->stem.out;
    case RESNET_RES1: return res1(net);
    case RESNET_RES2:
    case RESNET_RES3:
    case RESNET_RES4:
    case RESNET_RES5: return &net->blocks[net->layer_end[f - RESNET_RES2]].out;
    case RESNET_RES5AVG: return &net->avg;
    case RESNET_FLATTEN: return &net->flat;
    default: die(EXIT_RUNTIME, "resnet: no feature number %d", (int)f);
    }
}

int resnet_feature_by_name(const char *name)
{
    static const char *const NAMES[RESNET_NFEATURES] = {"conv1", "res1", "res2", "res3", "res4",
                                                         "res5", "res5avg", "flatten"};
    for (int i = 0; i < RESNET_NFEATURES; i++)
        if (strcmp(NAMES[i], name) == 0)
            return i;
    return -1;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* A block's own gradients but its output's (which the next block has filled), just before its
 * backward: their arena held the gradients of the block two after it until now. */
static void zero_block_grads(eng_backend *be, const block *b)
{
    for (int j = 0; j < b->nu; j++)
        conv_unit_zero_grads(be, &b->u[j]);
    if (b->has_down)
        conv_unit_zero_grads(be, &b->down);
}

static void unit_backward(eng_backend *be, resnet *net, unit *u, const eng_tensor *x, const eng_tensor *dx)
{
    conv_unit_backward(be, &net->params, u, x, dx, net->bn_across);
}

static void block_backward(eng_backend *be, resnet *net, block *b, const eng_tensor *x, const eng_tensor *dx)
{
    eng_add_relu_backward(be, &b->out, &b->out_grad, &b->u[b->nu - 1].out_grad, b->has_down ? &b->down.out_grad : dx);
    for (int i = b->nu - 1; i >= 0; i--)
        unit_backward(be, net, &b->u[i], i ? &b->u[i - 1].out : x, i ? &b->u[i - 1].out_grad : dx);
    if (b->has_down)
        unit_backward(be, net, &b->down, x, dx);
}

/* Activation checkpointing: blocks first..last's activations again, from first's input. */
static void recompute_segment(eng_backend *be, resnet *net, int first, int last)
{
    net->recomputing = true;
    for (int j = first; j <= last; j++)
        block_forward(be, net, &net->blocks[j], j ? &net->blocks[j - 1].out : res1(net), true);
    net->recomputing = false;
}

/* The block's first entry in state-dict order (torchvision: conv1 first, downsample last). */
static int block_first_entry(const block *b) { return b->has_down && b->down.w < b->u[0].w ? b->down.w : b->u[0].w; }

void resnet_backward(eng_backend *be, resnet *net, const eng_tensor *dfeat) { resnet_backward_watched(be, net, dfeat, NULL); }

void resnet_backward_watched(eng_backend *be, resnet *net, const eng_tensor *dfeat, const eng_grads_ready *ready)
{
    if (!net->planned || !net->last_train)
        die(EXIT_RUNTIME, "resnet: backward needs a training-mode forward first");
    conv_unit_zero_grads(be, &net->stem);
    if (!net->opt.small_stem)
        eng_zero(be, &net->pool_grad);
    eng_tensor d4 = eng_reshape(dfeat, net->avg.shape);
    block *last = &net->blocks[net->nblocks - 1];
    eng_zero(be, &last->out_grad);
    eng_adaptive_avgpool_backward(be, &d4, &last->out_grad);
    for (int i = net->nblocks - 1; i >= 0; i--) {
        const eng_tensor *x = i ? &net->blocks[i - 1].out : res1(net);
        const eng_tensor *dx = i ? &net->blocks[i - 1].out_grad : net->opt.small_stem ? &net->stem.out_grad
                                                                                       : &net->pool_grad;
        int first = act_segment_to_recompute(i, net->nblocks, net->opt.checkpoint_splits);
        if (first >= 0)
            recompute_segment(be, net, first, i);
        zero_block_grads(be, &net->blocks[i]);
        if (i)
            eng_zero(be, dx);
        block_backward(be, net, &net->blocks[i], x, dx);
        eng_grads_tell(ready, block_first_entry(&net->blocks[i]));
    }
    if (!net->opt.small_stem)
        eng_maxpool_backward(be, &net->pool, &net->stem.out, &net->pool_grad, &net->stem.out_grad);
    /* The image needs no gradient: NULL skips conv1's backward-data. */
    unit_backward(be, net, &net->stem, &net->last_x, NULL);
    eng_grads_tell(ready, 0);
}

/*
 * efficientnet.c — VISSL's EfficientNet trunk (ClassyVision's EfficientNet) on the model engine
 * (see efficientnet.h).
 *
 * How it works, as regnet.c: a stem unit, a flat array of MBConv blocks, a head unit, then an
 * adaptive average pool whose N × C × 1 × 1 output is also the flatten feature, and dropout.
 * A block is up to three conv units (unit.h): the expansion, the depthwise conv and the
 * projection, with squeeze-excitation (unit.h's se_unit) between the last two; a block that
 * keeps its shape adds its input back, after drop-connect in training.
 *
 * "Same" padding is set on each unit's convolution descriptor when the trunk is planned, from the
 * size that reaches it: pad = total / 2 above and left, the odd pixel below and right
 * (pad_extra), as ClassyVision's ZeroPad2d((p // 2, p − p // 2, …)).
 *
 * Drop-connect is inverted dropout on one value per sample: eng_dropout over an N × 1 × 1 × 1
 * tensor of ones gives each sample's factor (0 or 1/keep), and eng_channel_scale multiplies the
 * block's output, seen as N × 1 × (C·H) × W, by it. The masks are keyed like the heads' dropout
 * (a pure function of the backend's seed and an id), with ids of their own: TRUNK_ID_BASE, the
 * train step, the trunk's view number and the block (EFFICIENTNET_MAX_BLOCKS for the final
 * dropout) — so a resumed run draws the same masks, and no two layers, steps or crops share one.
 *
 * Evaluation runs in the backend's native layout from convolution to convolution (as resnet.c):
 * each unit is one fused conv + BN + SiLU, squeeze-excitation pools and scales the native tensor,
 * and a block that adds its input does so in its projection's fused step. Converting to and from
 * the logical layout around each of B0's 49 convolutions cost more than the convolutions
 * (EfficientNet-B0 inference went from 53 to 127 images/s on 2 cores when they stopped). The
 * features a caller reads stay logical (efficientnet_expose); training keeps every activation
 * logical.
 *
 * Memory is planned as in regnet.c (unit.h's act_plan; gradients of block i in arena i % 2).
 */
#include "efficientnet.h"
#include "unit.h"

#include "log.h"
#include "rng.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "_feature_blocks."
#define TRUNK_ID_BASE (1ull << 62) /* above any id a head's dropout uses */
#define SE_RATIO 0.25

/* ClassyVision's BLOCK_PARAMS: num_repeat, kernel_size, stride, expand_ratio, input_filters,
 * output_filters (se_ratio 0.25 and id_skip true in every row). */
static const int64_t STAGES[7][6] = {
    {1, 3, 1, 1, 32, 16},   {2, 3, 2, 6, 16, 24},   {2, 5, 2, 6, 24, 40},   {3, 3, 2, 6, 40, 80},
    {3, 5, 1, 6, 80, 112},  {4, 5, 2, 6, 112, 192}, {1, 3, 1, 6, 192, 320},
};

/* MODEL_PARAMS: width, depth, resolution, dropout. */
static const struct {
    const char *name;
    double width, depth;
    int resolution;
    double dropout;
} PRESETS[] = {
    {"B0", 1.0, 1.0, 224, 0.2}, {"B1", 1.0, 1.1, 240, 0.2}, {"B2", 1.1, 1.2, 260, 0.3}, {"B3", 1.2, 1.4, 300, 0.3},
    {"B4", 1.4, 1.8, 380, 0.4}, {"B5", 1.6, 2.2, 456, 0.4}, {"B6", 1.8, 2.6, 528, 0.5}, {"B7", 2.0, 3.1, 600, 0.5},
};

efficientnet_options efficientnet_defaults(void)
{
    efficientnet_options o = {.bn_momentum = 0.01, .bn_epsilon = 1e-3, .width_divisor = 8, .drop_connect_rate = 0.2,
                              .use_se = true};
    efficientnet_preset("B0", &o);
    return o;
}

int efficientnet_preset(const char *version, efficientnet_options *o)
{
    for (size_t i = 0; i < ARRAY_LEN(PRESETS); i++)
        if (!strcmp(version, PRESETS[i].name)) {
            o->width_coefficient = PRESETS[i].width, o->depth_coefficient = PRESETS[i].depth;
            o->resolution = PRESETS[i].resolution, o->dropout_rate = PRESETS[i].dropout;
            return 0;
        }
    return -1;
}

int64_t efficientnet_scale_width(int64_t filters, const efficientnet_options *o)
{
    if (o->width_coefficient == 0.0)
        return filters;
    double n = (double)filters * o->width_coefficient;
    int64_t div = o->width_divisor, min_width = o->min_width ? o->min_width : div;
    int64_t w = (int64_t)(n + (double)div / 2.0) / div * div;
    w = w > min_width ? w : min_width;
    if ((double)w < 0.9 * n) /* never round down by more than 10 % */
        w += div;
    return w;
}

int64_t efficientnet_scale_depth(int64_t repeats, const efficientnet_options *o)
{
    return o->depth_coefficient == 0.0 ? repeats : (int64_t)ceil(o->depth_coefficient * (double)repeats);
}

int efficientnet_block_count(const efficientnet_options *o)
{
    int64_t n = 0;
    for (int s = 0; s < 7; s++)
        n += efficientnet_scale_depth(STAGES[s][0], o);
    return (int)n;
}

void efficientnet_block_geometry(const efficientnet_options *o, int b, int64_t *expand, int64_t *stride)
{
    for (int s = 0; s < 7; s++) {
        int64_t repeats = efficientnet_scale_depth(STAGES[s][0], o);
        if (b < repeats) {
            *expand = STAGES[s][3], *stride = b == 0 ? STAGES[s][2] : 1;
            return;
        }
        b -= (int)repeats;
    }
    invariant_failed("efficientnet: no block %d", b);
}

int efficientnet_check(const efficientnet_options *o, char **err)
{
    if (o->width_coefficient < 0 || o->depth_coefficient < 0 || o->width_divisor < 1 || o->min_width < 0)
        return report_failure(err, "efficientnet: the width and depth coefficients, width_divisor and min_width must "
                                   "be positive");
    if (o->dropout_rate < 0 || o->dropout_rate >= 1 || o->drop_connect_rate < 0 || o->drop_connect_rate >= 1)
        return report_failure(err, "efficientnet: dropout and drop_connect_rate must be in [0, 1)");
    if (o->bn_epsilon <= 0 || o->bn_momentum < 0 || o->bn_momentum > 1)
        return report_failure(err, "efficientnet: bn_epsilon must be positive and bn_momentum in [0, 1]");
    if (efficientnet_block_count(o) > EFFICIENTNET_MAX_BLOCKS)
        return report_failure(err, "efficientnet: %d blocks (depth_coefficient %g); at most %d", efficientnet_block_count(o),
                              o->depth_coefficient, EFFICIENTNET_MAX_BLOCKS);
    return 0;
}

/* ---- features ------------------------------------------------------------------------------- */

int efficientnet_feature_count(const efficientnet_options *o) { return efficientnet_block_count(o) + 5; }

const char *efficientnet_feature_name(const efficientnet_options *o, int f, char *buf, size_t len)
{
    static const char *const TAIL[] = {"conv_final", "avgpool", "flatten", "dropout"};
    int b = efficientnet_block_count(o);
    if (f == 0)
        snprintf(buf, len, "conv1");
    else if (f >= 1 && f <= b)
        snprintf(buf, len, "block%d", f - 1);
    else if (f > b && f <= b + 4)
        snprintf(buf, len, "%s", TAIL[f - b - 1]);
    else
        snprintf(buf, len, "?");
    return buf;
}

int efficientnet_feature_by_name(const efficientnet_options *o, const char *name)
{
    char buf[24];
    for (int f = 0; f < efficientnet_feature_count(o); f++)
        if (!strcmp(name, efficientnet_feature_name(o, f, buf, sizeof buf)))
            return f;
    return -1;
}

/* ---- the network ---------------------------------------------------------------------------- */

typedef struct {
    conv_unit expand, depthwise, project;
    bool has_expand, has_se, skip;
    se_unit se;
    float drop_rate;                  /* drop-connect's, this block's share */
    eng_tensor dropped, dropped_grad; /* the projection after drop-connect */
    eng_tensor own, own_grad;         /* the block's output when it adds */
    eng_tensor *out, *out_grad;
} mbconv;

struct efficientnet {
    efficientnet_options opt;
    eng_params params;
    conv_unit stem, head;
    mbconv blocks[EFFICIENTNET_MAX_BLOCKS];
    int nblocks;
    int64_t out_dim;
    bool planned, last_train;
    eng_shape in_shape;
    act_plan acts;
    eng_tensor avg, flat, dropped, dropped_grad, avg_grad;
    eng_tensor ones, keep;            /* N × 1 × 1 × 1: drop-connect's input and a block's factors */
    eng_tensor last_x;
    uint64_t step, view;              /* the dropout masks' ids */
    bool want_dx;                     /* efficientnet_set_input_grad */
    bool exposed[EFFICIENTNET_MAX_BLOCKS + 5]; /* efficientnet_expose */
    eng_tensor dx;                    /* the input's gradient, when wanted */
    const eng_reducer *bn_across;
};

static void unit(eng_backend *be, efficientnet *net, conv_unit *u, const char *conv, const char *norm, int64_t in,
                 int64_t out, int64_t k, int64_t stride, int64_t groups, bool act)
{
    unit_norm nm = {.eps = net->opt.bn_epsilon, .momentum = net->opt.bn_momentum};
    conv_unit_make(be, &net->params, u, conv, norm, in, out, k, stride, groups, act ? UNIT_ACT_SILU : UNIT_ACT_NONE,
                   nm);
}

/* MBConvBlock: [expand_conv bn0] depthwise_conv bn1 [se_reduce se_expand] project_conv bn2. */
static void mbconv_make(eng_backend *be, efficientnet *net, mbconv *b, int index, int64_t in, int64_t out,
                        const int64_t *stage, int64_t stride)
{
    char p[48], c[96], n[96];
    snprintf(p, sizeof p, PREFIX "block%d.", index);
    int64_t expanded = in * stage[3], k = stage[1];
    b->has_expand = stage[3] != 1;
    if (b->has_expand) {
        snprintf(c, sizeof c, "%sexpand_conv", p), snprintf(n, sizeof n, "%sbn0", p);
        unit(be, net, &b->expand, c, n, in, expanded, 1, 1, 1, true);
    }
    snprintf(c, sizeof c, "%sdepthwise_conv", p), snprintf(n, sizeof n, "%sbn1", p);
    unit(be, net, &b->depthwise, c, n, expanded, expanded, k, stride, expanded, true);
    b->has_se = net->opt.use_se;
    if (b->has_se) {
        int64_t reduced = (int64_t)((double)in * SE_RATIO);
        snprintf(c, sizeof c, "%sse_reduce", p), snprintf(n, sizeof n, "%sse_expand", p);
        se_unit_make(be, &net->params, &b->se, c, n, expanded, reduced > 1 ? reduced : 1, UNIT_ACT_SILU);
    }
    snprintf(c, sizeof c, "%sproject_conv", p), snprintf(n, sizeof n, "%sbn2", p);
    unit(be, net, &b->project, c, n, expanded, out, 1, 1, 1, false);
    b->skip = stride == 1 && in == out;
    b->drop_rate = (float)(net->opt.drop_connect_rate * (double)index / (double)efficientnet_block_count(&net->opt));
}

static void build(eng_backend *be, efficientnet *net)
{
    const efficientnet_options *o = &net->opt;
    int64_t in = efficientnet_scale_width(32, o);
    unit(be, net, &net->stem, PREFIX "conv1.0", PREFIX "conv1.1", 3, in, 3, 2, 1, true);
    for (int s = 0; s < 7; s++) {
        int64_t out = efficientnet_scale_width(STAGES[s][5], o), repeats = efficientnet_scale_depth(STAGES[s][0], o);
        for (int64_t j = 0; j < repeats; j++, net->nblocks++) {
            mbconv_make(be, net, &net->blocks[net->nblocks], net->nblocks, in, out, STAGES[s], j ? 1 : STAGES[s][2]);
            in = out;
        }
    }
    net->out_dim = efficientnet_scale_width(1280, o);
    unit(be, net, &net->head, PREFIX "conv_final.0", PREFIX "conv_final.1", in, net->out_dim, 1, 1, 1, true);
}

efficientnet *efficientnet_new(eng_backend *be, const efficientnet_options *o, uint64_t seed, char **err)
{
    if (efficientnet_check(o, err) != 0)
        return NULL;
    efficientnet *net = xcalloc(1, sizeof *net);
    net->opt = *o;
    build(be, net);
    eng_params_alloc(be, &net->params);
    efficientnet_init(be, net, seed);
    return net;
}

static void unplan(eng_backend *be, efficientnet *net);

void efficientnet_free(eng_backend *be, efficientnet *net)
{
    if (!net)
        return;
    unplan(be, net);
    eng_params_free(be, &net->params);
    free(net);
}

eng_params *efficientnet_param_table(efficientnet *net) { return &net->params; }
const efficientnet_options *efficientnet_get_options(const efficientnet *net) { return &net->opt; }
int64_t efficientnet_out_dim(const efficientnet *net) { return net->out_dim; }
void efficientnet_set_batchnorm_reducer(efficientnet *net, const eng_reducer *across) { net->bn_across = across; }
void efficientnet_set_step(efficientnet *net, uint64_t step, uint64_t view) { net->step = step, net->view = view; }

/* ---- initialisation ------------------------------------------------------------------------- */

/* ClassyVision's init_weights: every Conv2d (SE's included) N(0, √(2/fan_out)) with zero bias. */
static void init_values(const eng_entry *e, rng_stream *r, float *h)
{
    const eng_shape *s = &e->value.shape;
    int64_t n = eng_numel(s);
    double std = s->ndim == 4 ? sqrt(2.0 / (double)(s->dim[0] * s->dim[2] * s->dim[3])) : 0.0;
    bool one = eng_name_ends_with(e->name, "running_var") ||
               (e->kind == ENG_PARAM && eng_name_ends_with(e->name, ".weight") && s->ndim == 1);
    for (int64_t j = 0; j < n; j++)
        h[j] = s->ndim == 4 ? (float)rng_normal(r, 0.0, std) : one ? 1.0f : 0.0f;
}

void efficientnet_init(eng_backend *be, efficientnet *net, uint64_t seed)
{
    eng_params_init_with(be, &net->params, seed, init_values);
}

/* ---- planning ------------------------------------------------------------------------------- */

static void act(eng_backend *be, efficientnet *net, eng_tensor *t, eng_shape s, bool is_grad)
{
    act_plan_add(be, &net->acts, t, s, is_grad);
}

/* Conv2dSamePadding's padding for an input of `size`: ceil(size / stride) outputs. */
static void same_padding(conv_unit *u, const eng_params *p, const eng_shape *x)
{
    int64_t k = p->entries[u->w].value.shape.dim[2], s = u->desc.stride[0];
    for (int d = 0; d < 2; d++) {
        int64_t size = x->dim[2 + d], out = (size + s - 1) / s, total = (out - 1) * s + k - size;
        total = total > 0 ? total : 0;
        u->desc.pad[d] = total / 2;
        u->desc.pad_extra[d] = total - 2 * (total / 2);
    }
}

static eng_shape unit_plan(eng_backend *be, efficientnet *net, conv_unit *u, const eng_shape *x)
{
    same_padding(u, &net->params, x);
    return conv_unit_plan(be, &net->acts, &net->params, u, x);
}

static eng_shape mbconv_plan(eng_backend *be, efficientnet *net, mbconv *b, int index, const eng_shape *x)
{
    act_plan_enter_arena(&net->acts, index % 2);
    eng_shape s = b->has_expand ? unit_plan(be, net, &b->expand, x) : *x;
    s = unit_plan(be, net, &b->depthwise, &s);
    if (b->has_se)
        se_unit_plan(be, &net->acts, &net->params, &b->se, &s);
    s = unit_plan(be, net, &b->project, &s);
    b->out = &b->project.out, b->out_grad = &b->project.out_grad;
    if (!b->skip)
        return s;
    act(be, net, &b->dropped, s, false);
    act(be, net, &b->dropped_grad, s, true);
    act(be, net, &b->own, s, false);
    act(be, net, &b->own_grad, s, true);
    b->out = &b->own, b->out_grad = &b->own_grad;
    return s;
}

static void unplan(eng_backend *be, efficientnet *net)
{
    if (!net->planned)
        return;
    conv_unit_unplan(be, &net->stem);
    conv_unit_unplan(be, &net->head);
    for (int i = 0; i < net->nblocks; i++) {
        mbconv *b = &net->blocks[i];
        if (b->has_expand)
            conv_unit_unplan(be, &b->expand);
        conv_unit_unplan(be, &b->depthwise);
        conv_unit_unplan(be, &b->project);
    }
    act_plan_release(be, &net->acts);
    net->planned = false;
}

static void fill_ones(eng_backend *be, const eng_tensor *t)
{
    int64_t n = eng_numel(&t->shape);
    float *h = xmalloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++)
        h[i] = 1.0f;
    eng_upload(be, t, h);
    free(h);
}

void efficientnet_plan(eng_backend *be, efficientnet *net, const eng_shape *input)
{
    if (net->planned && eng_shape_equal(&net->in_shape, input))
        return;
    unplan(be, net);
    if (input->ndim != 4 || input->dim[1] != 3)
        die(EXIT_RUNTIME, "efficientnet: input must be N × 3 × H × W");
    int64_t n = input->dim[0];
    act_plan_enter_arena(&net->acts, ACT_STEM_ARENA);
    if (net->want_dx)
        act(be, net, &net->dx, *input, true);
    eng_shape s = unit_plan(be, net, &net->stem, input);
    for (int i = 0; i < net->nblocks; i++)
        s = mbconv_plan(be, net, &net->blocks[i], i, &s);
    act_plan_enter_arena(&net->acts, net->nblocks % 2); /* the stem's arena lives through the backward */
    s = unit_plan(be, net, &net->head, &s);
    act(be, net, &net->avg, eng_shape4(n, s.dim[1], 1, 1), false);
    act(be, net, &net->avg_grad, eng_shape4(n, s.dim[1], 1, 1), true);
    act(be, net, &net->dropped, eng_shape2(n, s.dim[1]), false);
    act(be, net, &net->ones, eng_shape4(n, 1, 1, 1), false);
    act(be, net, &net->keep, eng_shape4(n, 1, 1, 1), false);
    act_plan_commit(be, &net->acts);
    fill_ones(be, &net->ones);
    net->flat = eng_reshape(&net->avg, eng_shape2(n, s.dim[1]));
    net->in_shape = *input;
    net->planned = true;
    net->last_train = false;
}

size_t efficientnet_activation_bytes(const efficientnet *net) { return net->planned ? net->acts.bytes : 0; }

/* ---- forward -------------------------------------------------------------------------------- */

/* The dropout id of slot (a block, or EFFICIENTNET_MAX_BLOCKS: the final dropout) this step. */
static uint64_t mask_id(const efficientnet *net, int slot)
{
    return TRUNK_ID_BASE + ((net->step * 64 + net->view) * (EFFICIENTNET_MAX_BLOCKS + 1) + (uint64_t)slot);
}

/* x (N × C × H × W) seen as N × 1 × (C·H) × W, so eng_channel_scale scales whole samples. */
static eng_tensor per_sample(const eng_tensor *x)
{
    const eng_shape *s = &x->shape;
    return eng_reshape(x, eng_shape4(s->dim[0], 1, s->dim[1] * s->dim[2], s->dim[3]));
}

/* Drop-connect: y = x · (a sample's 0 or 1/keep), the factors drawn for this block and step. */
static void drop_connect_forward(eng_backend *be, efficientnet *net, const mbconv *b, int index, const eng_tensor *x,
                                 const eng_tensor *y)
{
    eng_dropout_forward(be, b->drop_rate, mask_id(net, index), &net->ones, &net->keep);
    eng_tensor xs = per_sample(x), ys = per_sample(y);
    eng_channel_scale_forward(be, &xs, &net->keep, &ys);
}

static void mbconv_forward(eng_backend *be, efficientnet *net, mbconv *b, int index, const eng_tensor *x, bool train)
{
    const eng_tensor *h = x;
    if (b->has_expand) {
        conv_unit_forward(be, &net->params, &b->expand, h, train, net->bn_across);
        h = &b->expand.out;
    }
    conv_unit_forward(be, &net->params, &b->depthwise, h, train, net->bn_across);
    h = &b->depthwise.out;
    if (b->has_se) {
        se_unit_forward(be, &net->params, &b->se, h);
        h = &b->se.out;
    }
    if (!train && b->skip) { /* evaluation: no drop-connect, and the add joins the projection */
        conv_unit_forward_eval_fused(be, &net->params, &b->project, h, x, ENG_EVAL_ACT_NONE, &b->own);
        return;
    }
    conv_unit_forward(be, &net->params, &b->project, h, train, net->bn_across);
    if (!b->skip)
        return;
    const eng_tensor *branch = &b->project.out;
    if (train && b->drop_rate > 0) {
        drop_connect_forward(be, net, b, index, branch, &b->dropped);
        branch = &b->dropped;
    }
    eng_add_forward(be, branch, x, &b->own);
}

void efficientnet_expose(efficientnet *net, int f)
{
    if (f < 0 || f >= efficientnet_feature_count(&net->opt))
        die(EXIT_RUNTIME, "efficientnet: no feature number %d", f);
    net->exposed[f] = true;
}

static void set_block_layouts(mbconv *b, eng_layout inner, bool exposed)
{
    b->expand.out.layout = b->depthwise.out.layout = b->se.out.layout = inner;
    b->project.out.layout = b->own.layout = inner;
    b->out->layout = exposed ? ENG_LAYOUT_LOGICAL : inner;
}

/* The activations' layouts for this forward, as regnet.c's: evaluation keeps the backend's
 * native layout from convolution to convolution (the fused conv + BN + SiLU, squeeze-excitation's
 * pool and product, the fused projection + skip add, the final pool take it) but for the
 * features a caller reads (efficientnet_expose); training keeps everything logical for the
 * norms, the dropouts and the backward. */
static void set_layouts(efficientnet *net, bool train)
{
    eng_layout inner = train ? ENG_LAYOUT_LOGICAL : ENG_LAYOUT_NATIVE;
    net->stem.out.layout = net->exposed[0] ? ENG_LAYOUT_LOGICAL : inner;
    for (int i = 0; i < net->nblocks; i++)
        set_block_layouts(&net->blocks[i], inner, net->exposed[i + 1]);
    net->head.out.layout = net->exposed[net->nblocks + 1] ? ENG_LAYOUT_LOGICAL : inner;
}

const eng_tensor *efficientnet_forward(eng_backend *be, efficientnet *net, const eng_tensor *x, bool train)
{
    if (!net->planned || !eng_shape_equal(&x->shape, &net->in_shape))
        die(EXIT_RUNTIME, "efficientnet: forward on a shape that efficientnet_plan did not plan");
    set_layouts(net, train);
    conv_unit_forward(be, &net->params, &net->stem, x, train, net->bn_across);
    const eng_tensor *h = &net->stem.out;
    for (int i = 0; i < net->nblocks; i++) {
        mbconv_forward(be, net, &net->blocks[i], i, h, train);
        h = net->blocks[i].out;
    }
    conv_unit_forward(be, &net->params, &net->head, h, train, net->bn_across);
    eng_adaptive_avgpool_forward(be, &net->head.out, &net->avg);
    float p = train ? (float)net->opt.dropout_rate : 0.0f;
    eng_dropout_forward(be, p, mask_id(net, EFFICIENTNET_MAX_BLOCKS), &net->flat, &net->dropped);
    net->last_x = *x;
    net->last_train = train;
    return &net->dropped;
}

const eng_tensor *efficientnet_feature(const efficientnet *net, int f)
{
    int b = net->nblocks;
    if (f == 0)
        return &net->stem.out;
    if (f >= 1 && f <= b)
        return net->blocks[f - 1].out;
    if (f == b + 1)
        return &net->head.out;
    if (f == b + 2)
        return &net->avg;
    if (f == b + 3)
        return &net->flat;
    if (f == b + 4)
        return &net->dropped;
    die(EXIT_RUNTIME, "efficientnet: no feature number %d", f);
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Every gradient of the block but its output's, which the block above has filled. */
static void mbconv_zero_grads(eng_backend *be, const mbconv *b)
{
    if (b->has_expand)
        conv_unit_zero_grads(be, &b->expand);
    conv_unit_zero_grads(be, &b->depthwise);
    if (b->has_se)
        se_unit_zero_grads(be, &b->se);
    if (b->skip) {
        conv_unit_zero_grads(be, &b->project);
        eng_zero(be, &b->dropped_grad);
    } else {
        conv_unit_zero_inner_grads(be, &b->project);
    }
}

/* The add's backward: the branch's gradient (through drop-connect's factors) and dx's. */
static void skip_backward(eng_backend *be, efficientnet *net, const mbconv *b, int index, const eng_tensor *dx)
{
    if (!net->last_train || b->drop_rate <= 0) {
        eng_add_backward(be, &b->own_grad, &b->project.out_grad, dx);
        return;
    }
    eng_add_backward(be, &b->own_grad, &b->dropped_grad, dx);
    eng_dropout_forward(be, b->drop_rate, mask_id(net, index), &net->ones, &net->keep);
    eng_tensor xs = per_sample(&b->project.out), dys = per_sample(&b->dropped_grad);
    eng_tensor dxs = per_sample(&b->project.out_grad);
    eng_channel_scale_backward(be, &xs, &net->keep, &dys, &dxs, NULL);
}

static void mbconv_backward(eng_backend *be, efficientnet *net, mbconv *b, int index, const eng_tensor *x,
                            const eng_tensor *dx)
{
    if (b->skip)
        skip_backward(be, net, b, index, dx);
    const eng_tensor *h = b->has_se ? &b->se.out : &b->depthwise.out;
    const eng_tensor *dh = b->has_se ? &b->se.out_grad : &b->depthwise.out_grad;
    conv_unit_backward(be, &net->params, &b->project, h, dh, net->bn_across);
    if (b->has_se)
        se_unit_backward(be, &net->params, &b->se, &b->depthwise.out, &b->depthwise.out_grad);
    const eng_tensor *in = b->has_expand ? &b->expand.out : x, *din = b->has_expand ? &b->expand.out_grad : dx;
    conv_unit_backward(be, &net->params, &b->depthwise, in, din, net->bn_across);
    if (b->has_expand)
        conv_unit_backward(be, &net->params, &b->expand, x, dx, net->bn_across);
}

void efficientnet_backward(eng_backend *be, efficientnet *net, const eng_tensor *dfeat)
{
    if (!net->planned || !net->last_train)
        die(EXIT_RUNTIME, "efficientnet: backward needs a training-mode forward first");
    conv_unit_zero_grads(be, &net->stem);
    conv_unit_zero_grads(be, &net->head);
    eng_zero(be, &net->avg_grad);
    eng_tensor dflat = eng_reshape(&net->avg_grad, net->flat.shape);
    eng_dropout_backward(be, (float)net->opt.dropout_rate, mask_id(net, EFFICIENTNET_MAX_BLOCKS), dfeat, &dflat);
    eng_adaptive_avgpool_backward(be, &net->avg_grad, &net->head.out_grad);
    mbconv *last = &net->blocks[net->nblocks - 1];
    eng_zero(be, last->out_grad);
    conv_unit_backward(be, &net->params, &net->head, last->out, last->out_grad, net->bn_across);
    for (int i = net->nblocks - 1; i >= 0; i--) {
        const eng_tensor *x = i ? net->blocks[i - 1].out : &net->stem.out;
        const eng_tensor *dx = i ? net->blocks[i - 1].out_grad : &net->stem.out_grad;
        mbconv_zero_grads(be, &net->blocks[i]);
        if (i)
            eng_zero(be, dx);
        mbconv_backward(be, net, &net->blocks[i], i, x, dx);
    }
    if (net->want_dx)
        eng_zero(be, &net->dx);
    conv_unit_backward(be, &net->params, &net->stem, &net->last_x, net->want_dx ? &net->dx : NULL, net->bn_across);
}

const eng_tensor *efficientnet_input_grad(const efficientnet *net) { return net->want_dx && net->planned ? &net->dx : NULL; }

void efficientnet_set_input_grad(eng_backend *be, efficientnet *net, bool on)
{
    if (on != net->want_dx)
        unplan(be, net);
    net->want_dx = on;
}

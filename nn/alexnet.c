/*
 * alexnet.c — VISSL's AlexNet trunks on the model engine (see alexnet.h).
 *
 * How it works: each variant is a table (alexnet_spec) of five convolutions and where its local
 * response normalisations sit; alexnet_new turns the table into a flat array of layers —
 * convolution (with bias), batch norm fused with its ReLU, ReLU, LRN, max pool — and records
 * which layer ends each of VISSL's nine feature blocks. Forward runs the array in order, backward
 * in reverse, each layer through its eng_ops pair; nothing else is special. DeepCluster's Sobel
 * stage is two more convolution layers in front, marked `fixed`: their weights are buffers, and
 * the backward stops before them (nothing upstream learns).
 *
 * Memory is planned as in the other trunks (unit.h's act_plan): every activation once, the
 * gradients of feature block b in arena b % 2 (a block's gradients are live only while the
 * backward is in it or in the block after it).
 */
#include "alexnet.h"
#include "unit.h"

#include "log.h"
#include "rng.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the variants --------------------------------------------------------------------------- */

static const alexnet_spec VARIANTS[] = {
    [ALEXNET_BVLC] = {"alexnet_bvlc", 3, false, ALEXNET_LRN_BEFORE_POOL,
                      {{96, 11, 4, 0, 1, false}, {256, 5, 1, 2, 2, false}, {384, 3, 1, 1, 1, false},
                       {384, 3, 1, 1, 2, false}, {256, 3, 1, 1, 2, false}}},
    [ALEXNET_COLORIZATION] = {"alexnet_colorization", 1, false, ALEXNET_LRN_NONE,
                              {{96, 11, 4, 0, 1, true}, {256, 5, 1, 2, 2, true}, {384, 3, 1, 1, 1, true},
                               {384, 3, 1, 1, 2, true}, {256, 3, 1, 1, 2, true}}},
    [ALEXNET_DEEPCLUSTER] = {"alexnet_deepcluster", 3, true, ALEXNET_LRN_NONE,
                             {{96, 11, 4, 2, 1, true}, {256, 5, 1, 2, 1, true}, {384, 3, 1, 1, 1, true},
                              {384, 3, 1, 1, 1, true}, {256, 3, 1, 1, 1, true}}},
    [ALEXNET_JIGSAW] = {"alexnet_jigsaw", 3, false, ALEXNET_LRN_AFTER_POOL,
                        {{96, 11, 2, 0, 1, false}, {256, 5, 1, 2, 2, false}, {384, 3, 1, 1, 1, true},
                         {384, 3, 1, 1, 2, true}, {256, 3, 1, 1, 2, true}}},
    [ALEXNET_ROTNET] = {"alexnet_rotnet", 3, false, ALEXNET_LRN_NONE,
                        {{64, 11, 4, 2, 1, true}, {192, 5, 1, 2, 1, true}, {384, 3, 1, 1, 1, true},
                         {256, 3, 1, 1, 1, true}, {256, 3, 1, 1, 1, true}}},
};
enum { NVARIANTS = sizeof VARIANTS / sizeof VARIANTS[0] };

/* VISSL's feature blocks: which hold a convolution (and which one), which a pool. */
static const char *const FEATURE_NAMES[ALEXNET_NFEATURES] = {"conv1", "pool1", "conv2", "pool2", "conv3",
                                                             "conv4", "conv5", "pool5", "flatten"};
static const int BLOCK_CONV[ALEXNET_NFEATURES - 1] = {0, -1, 1, -1, 2, 3, 4, -1};

static const eng_lrn_desc LRN = {.size = 5, .alpha = 1e-4, .beta = 0.75, .k = 1.0};
static const eng_pool_desc POOL = {.kernel = {3, 3}, .stride = {2, 2}};
#define BN_EPS 1e-5
#define BN_MOMENTUM 0.1

int alexnet_variant_by_name(const char *trunk_name)
{
    for (int v = 0; v < NVARIANTS; v++)
        if (!strcmp(trunk_name, VARIANTS[v].name))
            return v;
    return -1;
}

const alexnet_spec *alexnet_spec_of(alexnet_variant v) { return &VARIANTS[v]; }
int alexnet_block_conv(int b) { return BLOCK_CONV[b]; }
const char *alexnet_variant_name(alexnet_variant v) { return VARIANTS[v].name; }
int64_t alexnet_in_channels(alexnet_variant v) { return VARIANTS[v].in; }

int alexnet_feature_by_name(const char *name)
{
    for (int f = 0; f < ALEXNET_NFEATURES; f++)
        if (!strcmp(name, FEATURE_NAMES[f]))
            return f;
    return -1;
}

const char *alexnet_feature_name(int f) { return f >= 0 && f < ALEXNET_NFEATURES ? FEATURE_NAMES[f] : "?"; }

/* ---- geometry ------------------------------------------------------------------------------- */

static int64_t conv_out(int64_t s, const alexnet_conv *c) { return (s + 2 * c->pad - c->k) / c->stride + 1; }
static int64_t pool_out(int64_t s) { return s < 3 ? 0 : (s - 3) / 2 + 1; }

/* pool5's side for an input side s; 0 when some layer gets less than its window. */
static int64_t pool5_side(const alexnet_spec *v, int64_t s)
{
    for (int b = 0; b < ALEXNET_NFEATURES - 1 && s > 0; b++) {
        const alexnet_conv *c = BLOCK_CONV[b] >= 0 ? &v->conv[BLOCK_CONV[b]] : NULL;
        s = c ? (s + 2 * c->pad < c->k ? 0 : conv_out(s, c)) : pool_out(s);
    }
    return s;
}

int64_t alexnet_min_input(alexnet_variant v)
{
    int64_t s = 1;
    while (pool5_side(&VARIANTS[v], s) == 0)
        s++;
    return s;
}

int alexnet_check_input(alexnet_variant v, const eng_shape *input, char **err)
{
    if (input->ndim != 4 || input->dim[1] != VARIANTS[v].in)
        return report_failure(err, "%s: the input must be N x %lld x H x W", VARIANTS[v].name,
                              (long long)VARIANTS[v].in);
    if (pool5_side(&VARIANTS[v], input->dim[2]) == 0 || pool5_side(&VARIANTS[v], input->dim[3]) == 0)
        return report_failure(err, "%s: a %lldx%lld input is too small (its pools need %lld px or more)",
                              VARIANTS[v].name, (long long)input->dim[2], (long long)input->dim[3],
                              (long long)alexnet_min_input(v));
    return 0;
}

/* ---- the network ---------------------------------------------------------------------------- */

typedef enum { LAYER_CONV, LAYER_BN_RELU, LAYER_RELU, LAYER_LRN, LAYER_POOL } layer_kind;

typedef struct {
    layer_kind kind;
    int w, b, rmean, rvar;      /* entries: conv weight and bias, or BN gamma, beta and stats */
    bool fixed;                 /* Sobel's: no gradients */
    eng_conv_desc desc;
    eng_plan *plan;
    eng_tensor out, grad;       /* the layer's output and its gradient */
    eng_tensor mean, invstd;    /* BN's saved statistics */
} layer;

struct alexnet {
    alexnet_variant variant;
    eng_params params;
    layer layers[32];
    int nlayers, first_learning;          /* the layers before first_learning are Sobel's */
    int block_end[ALEXNET_NFEATURES - 1]; /* the layer that ends each feature block */
    int64_t out_dim;
    bool planned;
    eng_shape in_shape;
    act_plan acts;
    eng_tensor flat;
    bool want_dx;                         /* alexnet_set_input_grad */
    eng_tensor dx;                        /* the input's gradient, when wanted */
    const eng_tensor *last_x;
    const eng_reducer *bn_across;
};

static eng_shape shape1(int64_t n) { return (eng_shape){.ndim = 1, .dim = {n}}; }

static layer *push(alexnet *net, layer_kind kind)
{
    layer *l = &net->layers[net->nlayers++];
    *l = (layer){.kind = kind, .w = -1, .b = -1, .rmean = -1, .rvar = -1};
    return l;
}

static void conv_layer(eng_backend *be, alexnet *net, const char *at, int64_t in, const alexnet_conv *c, bool fixed)
{
    layer *l = push(net, LAYER_CONV);
    eng_entry_kind kind = fixed ? ENG_BUFFER : ENG_PARAM;
    int64_t fan_in = in / c->groups * c->k * c->k;
    l->fixed = fixed;
    l->w = eng_params_add(be, &net->params, kind, eng_shape4(c->out, in / c->groups, c->k, c->k), fan_in,
                          "%s.weight", at);
    l->b = eng_params_add(be, &net->params, kind, shape1(c->out), fan_in, "%s.bias", at);
    net->params.entries[l->w].fixed = net->params.entries[l->b].fixed = fixed;
    l->desc = (eng_conv_desc){.stride = {c->stride, c->stride}, .pad = {c->pad, c->pad}, .groups = c->groups};
}

static void bn_relu_layer(eng_backend *be, alexnet *net, const char *at, int64_t c)
{
    layer *l = push(net, LAYER_BN_RELU);
    l->w = eng_params_add(be, &net->params, ENG_PARAM, shape1(c), 0, "%s.weight", at);
    l->b = eng_params_add(be, &net->params, ENG_PARAM, shape1(c), 0, "%s.bias", at);
    l->rmean = eng_params_add(be, &net->params, ENG_BUFFER, shape1(c), 0, "%s.running_mean", at);
    l->rvar = eng_params_add(be, &net->params, ENG_BUFFER, shape1(c), 0, "%s.running_var", at);
}

/* Feature block b: Conv2d [BatchNorm2d] ReLU, or [LRN] MaxPool2d [LRN]. */
static int64_t block_make(eng_backend *be, alexnet *net, int b, int64_t in)
{
    const alexnet_spec *v = &VARIANTS[net->variant];
    char at[64];
    if (BLOCK_CONV[b] < 0) {
        bool lrn = v->lrn != ALEXNET_LRN_NONE && b < 7;
        if (lrn && v->lrn == ALEXNET_LRN_BEFORE_POOL)
            push(net, LAYER_LRN);
        push(net, LAYER_POOL);
        if (lrn && v->lrn == ALEXNET_LRN_AFTER_POOL)
            push(net, LAYER_LRN);
        return in;
    }
    const alexnet_conv *c = &v->conv[BLOCK_CONV[b]];
    snprintf(at, sizeof at, "_feature_blocks.%d.0", b);
    conv_layer(be, net, at, in, c, false);
    snprintf(at, sizeof at, "_feature_blocks.%d.1", b);
    if (c->bn)
        bn_relu_layer(be, net, at, c->out);
    else
        push(net, LAYER_RELU);
    return c->out;
}

/* DeepCluster's sobel = Sequential(Conv2d(3, 1, 1), Conv2d(1, 2, 3, padding=1)). */
static void sobel_make(eng_backend *be, alexnet *net)
{
    static const alexnet_conv gray = {1, 1, 1, 0, 1, false}, edges = {2, 3, 1, 1, 1, false};
    conv_layer(be, net, "sobel.0", 3, &gray, true);
    conv_layer(be, net, "sobel.1", 1, &edges, true);
}

alexnet *alexnet_new(eng_backend *be, alexnet_variant v, uint64_t seed)
{
    alexnet *net = xcalloc(1, sizeof *net);
    net->variant = v;
    int64_t in = VARIANTS[v].in;
    if (VARIANTS[v].sobel) {
        sobel_make(be, net);
        in = 2;
    }
    net->first_learning = net->nlayers;
    for (int b = 0; b < ALEXNET_NFEATURES - 1; b++) {
        in = block_make(be, net, b, in);
        net->block_end[b] = net->nlayers - 1;
    }
    eng_params_alloc(be, &net->params);
    alexnet_init(be, net, seed);
    return net;
}

static void unplan(eng_backend *be, alexnet *net)
{
    if (!net->planned)
        return;
    for (int i = 0; i < net->nlayers; i++) {
        eng_plan_free(be, net->layers[i].plan);
        net->layers[i].plan = NULL;
    }
    act_plan_release(be, &net->acts);
    net->planned = false;
}

void alexnet_free(eng_backend *be, alexnet *net)
{
    if (!net)
        return;
    unplan(be, net);
    eng_params_free(be, &net->params);
    free(net);
}

alexnet_variant alexnet_get_variant(const alexnet *net) { return net->variant; }
const eng_tensor *alexnet_input_grad(const alexnet *net) { return net->want_dx && net->planned ? &net->dx : NULL; }

void alexnet_set_input_grad(eng_backend *be, alexnet *net, bool on)
{
    if (on != net->want_dx)
        unplan(be, net);
    net->want_dx = on;
}
eng_params *alexnet_param_table(alexnet *net) { return &net->params; }
int64_t alexnet_out_dim(const alexnet *net) { return net->out_dim; }
void alexnet_set_batchnorm_reducer(alexnet *net, const eng_reducer *across) { net->bn_across = across; }

/* ---- initialisation ------------------------------------------------------------------------- */

/* VISSL's fixed Sobel weights: a mean over RGB, then the horizontal and vertical Sobel kernels. */
static void sobel_values(eng_backend *be, alexnet *net)
{
    static const float gray[3] = {1.0f / 3.0f, 1.0f / 3.0f, 1.0f / 3.0f}, zero[2] = {0, 0};
    static const float edges[18] = {1, 0, -1, 2, 0, -2, 1, 0, -1, 1, 2, 1, 0, 0, 0, -1, -2, -1};
    if (!VARIANTS[net->variant].sobel)
        return;
    eng_upload(be, &net->params.entries[net->layers[0].w].value, gray);
    eng_upload(be, &net->params.entries[net->layers[0].b].value, zero);
    eng_upload(be, &net->params.entries[net->layers[1].w].value, edges);
    eng_upload(be, &net->params.entries[net->layers[1].b].value, zero);
}

/* PyTorch's reset_parameters: Conv2d U(±1/√fan_in) for weight and bias; BatchNorm2d 1, 0, 0, 1. */
static void init_values(const eng_entry *e, rng_stream *r, float *h)
{
    int64_t n = eng_numel(&e->value.shape);
    double bound = e->fan_in ? 1.0 / sqrt((double)e->fan_in) : 0.0; /* convolutions (Sobel's: replaced) */
    float fill = eng_name_ends_with(e->name, ".weight") || eng_name_ends_with(e->name, "running_var") ? 1.0f : 0.0f;
    for (int64_t j = 0; j < n; j++)
        h[j] = e->fan_in ? (float)rng_uniform_range(r, -bound, bound) : fill;
}

void alexnet_init(eng_backend *be, alexnet *net, uint64_t seed)
{
    eng_params_init_with(be, &net->params, seed, init_values);
    sobel_values(be, net);
}

void alexnet_init_formula(eng_backend *be, alexnet *net)
{
    eng_params_init_formula(be, &net->params);
    sobel_values(be, net);
}

/* ---- planning ------------------------------------------------------------------------------- */

static const eng_tensor *ent(const alexnet *net, int i) { return &net->params.entries[i].value; }
static const eng_tensor *grad(const alexnet *net, int i) { return &net->params.entries[i].grad; }

static eng_shape layer_plan(eng_backend *be, alexnet *net, layer *l, const eng_shape *x)
{
    eng_shape y = *x;
    if (l->kind == LAYER_CONV) {
        const eng_shape *w = &ent(net, l->w)->shape;
        l->plan = eng_conv_plan(be, &l->desc, x, w, true);
        y = eng_conv_output_shape(x, w, &l->desc);
    } else if (l->kind == LAYER_POOL) {
        y = eng_pool_output_shape(x, &POOL);
    } else if (l->kind == LAYER_BN_RELU) {
        act_plan_add(be, &net->acts, &l->mean, shape1(x->dim[1]), false);
        act_plan_add(be, &net->acts, &l->invstd, shape1(x->dim[1]), false);
    }
    act_plan_add(be, &net->acts, &l->out, y, false);
    if (!l->fixed || net->want_dx)
        act_plan_add(be, &net->acts, &l->grad, y, true);
    return y;
}

void alexnet_plan(eng_backend *be, alexnet *net, const eng_shape *input)
{
    if (net->planned && eng_shape_equal(&net->in_shape, input))
        return;
    unplan(be, net);
    char *err = NULL;
    if (alexnet_check_input(net->variant, input, &err) != 0)
        die(EXIT_RUNTIME, "%s", err);
    eng_shape s = *input;
    if (net->want_dx) {
        act_plan_enter_arena(&net->acts, ACT_STEM_ARENA);
        act_plan_add(be, &net->acts, &net->dx, *input, true);
    }
    for (int b = 0, i = 0; b < ALEXNET_NFEATURES - 1; b++) {
        act_plan_enter_arena(&net->acts, b % 2);
        for (; i <= net->block_end[b]; i++)
            s = layer_plan(be, net, &net->layers[i], &s);
    }
    act_plan_commit(be, &net->acts);
    net->out_dim = s.dim[1] * s.dim[2] * s.dim[3];
    net->flat = eng_reshape(&net->layers[net->nlayers - 1].out, eng_shape2(s.dim[0], net->out_dim));
    net->in_shape = *input;
    net->planned = true;
}

size_t alexnet_activation_bytes(const alexnet *net) { return net->planned ? net->acts.bytes : 0; }

/* ---- forward -------------------------------------------------------------------------------- */

static void layer_forward(eng_backend *be, alexnet *net, layer *l, const eng_tensor *x, bool train)
{
    switch (l->kind) {
    case LAYER_CONV: eng_conv_forward(be, l->plan, x, ent(net, l->w), ent(net, l->b), &l->out); break;
    case LAYER_RELU: eng_relu_forward(be, x, &l->out); break;
    case LAYER_LRN: eng_lrn_forward(be, &LRN, x, &l->out); break;
    case LAYER_POOL: eng_maxpool_forward(be, &POOL, x, &l->out); break;
    case LAYER_BN_RELU:
        if (train)
            eng_batchnorm_relu_forward_train(be, BN_MOMENTUM, BN_EPS, x, ent(net, l->w), ent(net, l->b),
                                             ent(net, l->rmean), ent(net, l->rvar), &l->mean, &l->invstd,
                                             &l->out, net->bn_across);
        else
            eng_batchnorm_relu_forward_eval(be, BN_EPS, x, ent(net, l->w), ent(net, l->b), ent(net, l->rmean),
                                            ent(net, l->rvar), &l->out);
        break;
    }
}

const eng_tensor *alexnet_forward(eng_backend *be, alexnet *net, const eng_tensor *x, bool train)
{
    if (!net->planned || !eng_shape_equal(&x->shape, &net->in_shape))
        invariant_failed("alexnet: forward on an input it was not planned for");
    const eng_tensor *in = x;
    for (int i = 0; i < net->nlayers; i++) {
        layer_forward(be, net, &net->layers[i], in, train);
        in = &net->layers[i].out;
    }
    net->last_x = x;
    return &net->flat;
}

const eng_tensor *alexnet_feature(const alexnet *net, int f)
{
    if (f < 0 || f >= ALEXNET_NFEATURES)
        invariant_failed("alexnet: no feature %d", f);
    return f == ALEXNET_NFEATURES - 1 ? &net->flat : &net->layers[net->block_end[f]].out;
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Layer l's backward from dy into dx (NULL: not needed), with x its forward input. */
static void layer_backward(eng_backend *be, alexnet *net, layer *l, const eng_tensor *x, const eng_tensor *dy,
                           const eng_tensor *dx)
{
    switch (l->kind) {
    case LAYER_CONV:
        eng_conv_backward(be, l->plan, x, ent(net, l->w), dy, dx, l->fixed ? NULL : grad(net, l->w),
                          l->fixed ? NULL : grad(net, l->b));
        break;
    case LAYER_RELU: eng_relu_backward(be, &l->out, dy, dx); break;
    case LAYER_LRN: eng_lrn_backward(be, &LRN, x, dy, dx); break;
    case LAYER_POOL: eng_maxpool_backward(be, &POOL, x, dy, dx); break;
    case LAYER_BN_RELU:
        eng_batchnorm_relu_backward(be, x, ent(net, l->w), &l->mean, &l->invstd, &l->out, dy, dx, grad(net, l->w),
                                    grad(net, l->b), net->bn_across);
        break;
    }
}

void alexnet_backward(eng_backend *be, alexnet *net, const eng_tensor *dfeat)
{
    if (!net->planned || !net->last_x)
        invariant_failed("alexnet: backward before a forward");
    if (eng_numel(&dfeat->shape) != eng_numel(&net->flat.shape))
        invariant_failed("alexnet: the gradient has %lld values, flatten %lld", (long long)eng_numel(&dfeat->shape),
                         (long long)eng_numel(&net->flat.shape));
    eng_tensor dy = eng_reshape(dfeat, net->layers[net->nlayers - 1].out.shape);
    for (int i = net->nlayers - 1; i >= (net->want_dx ? 0 : net->first_learning); i--) {
        layer *l = &net->layers[i];
        const eng_tensor *x = i ? &net->layers[i - 1].out : net->last_x;
        const eng_tensor *dx = i > net->first_learning || net->want_dx ? (i ? &net->layers[i - 1].grad : &net->dx)
                                                                        : NULL;
        if (dx)
            eng_zero(be, dx);
        layer_backward(be, net, l, x, &dy, dx);
        if (dx)
            dy = *dx;
    }
}

/*
 * complexity.c — the ClassyVision profiler's per-layer counts for VISSL's model-complexity hook
 * (see complexity.h for the rules).
 *
 * How it works: a small `walk` appends one row per module call while tracking the activation
 * shape, in the order torchvision's / VISSL's forward calls the modules. The trunk walk mirrors
 * resnet.c's construction (stem, blocks with their downsample, pool, flatten) from the trunk's
 * options; every parameter count comes from the trunk's own named entries, looked up by name,
 * so a walk that strayed from the real network would stop on a missing entry rather than count
 * something else. The head walk mirrors heads.c's builders in the same way.
 */
#include "complexity.h"

#include "log.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    eng_layer_cost *rows;
    int n, cap;
    eng_shape x;          /* the current activation shape */
    const eng_entry *(*entry)(const void *model, int i);
    int nentries;
    const void *model;
    const char *prefix;   /* prepended to every row's name (NULL: none) */
    char *err;            /* the first failure, owned */
} walk;

static const eng_entry *resnet_entry_fn(const void *m, int i) { return resnet_entry_at(m, i); }
static const eng_entry *head_entry_fn(const void *m, int i) { return head_entry_at(m, i); }

static void fail(walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(walk *w, const char *fmt, ...)
{
    if (w->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&w->err, fmt, ap) < 0)
        w->err = NULL;
    va_end(ap);
}

/* The shape of the named parameter `module`.`tail` (NULL with an error when the model lacks it).
 * fixed: a parameter PyTorch does not train (DeepCluster's Sobel weights), a fixed buffer here. */
static const eng_shape *tensor_shape(walk *w, const char *module, const char *tail, bool fixed)
{
    char name[160];
    snprintf(name, sizeof name, "%s.%s", module, tail);
    for (int i = 0; i < w->nentries; i++) {
        const eng_entry *e = w->entry(w->model, i);
        if ((fixed ? e->fixed : e->kind == ENG_PARAM) && strcmp(e->name, name) == 0)
            return &e->value.shape;
    }
    fail(w, "complexity: the model has no parameter %s", name);
    return NULL;
}

static const eng_shape *param_shape(walk *w, const char *module, const char *tail)
{
    return tensor_shape(w, module, tail, false);
}

/* Elements of the named parameter `module`.`tail` (0 with an error when the model lacks it). */
static int64_t param_numel(walk *w, const char *module, const char *tail)
{
    const eng_shape *s = param_shape(w, module, tail);
    return s ? eng_numel(s) : 0;
}

static void row(walk *w, const char *module, const char *kind, int64_t flops, int64_t params, int64_t acts)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->rows = xrealloc(w->rows, (size_t)w->cap * sizeof *w->rows);
    }
    w->rows[w->n++] = (eng_layer_cost){.name = xasprintf("%s%s", w->prefix ? w->prefix : "", module), .kind = kind,
                                       .flops = flops, .params = params, .activations = acts};
}

/* ---- the profiler's rules, one per module type ---------------------------------------------- */

/* How a Conv2d is built beyond its weight: its padding (-1: k / 2), whether it has a bias, and
 * whether its tensors are fixed (buffers here). */
typedef struct {
    int64_t stride, pad, groups;
    bool bias, fixed;
} conv_args;

/* Conv2d (no dilation in these models): the profiler's int((H + 2p − K)/s + 1); a bias adds
 * parameters, not FLOPs. */
static void conv_with(walk *w, const char *module, conv_args a)
{
    const eng_shape *ws = tensor_shape(w, module, "weight", a.fixed);
    const eng_shape *bs = a.bias ? tensor_shape(w, module, "bias", a.fixed) : NULL;
    if (!ws || (a.bias && !bs))
        return;
    int64_t n = w->x.dim[0], cin = w->x.dim[1], cout = ws->dim[0], k = ws->dim[2], groups = a.groups;
    int64_t stride = a.stride, pad = a.pad < 0 ? k / 2 : a.pad;
    if (cin != ws->dim[1] * groups) {
        fail(w, "complexity: %s receives %lld channels", module, (long long)cin);
        return;
    }
    int64_t oh = (w->x.dim[2] + 2 * pad - k) / stride + 1, ow = (w->x.dim[3] + 2 * pad - k) / stride + 1;
    if (w->x.dim[2] + 2 * pad < k || w->x.dim[3] + 2 * pad < k) {
        fail(w, "complexity: a %lldx%lld input is smaller than %s's kernel", (long long)w->x.dim[2],
             (long long)w->x.dim[3], module);
        return;
    }
    int64_t flops = n * cin * cout * k * k * oh * ow / groups;
    w->x = eng_shape4(n, cout, oh, ow);
    row(w, module, "conv", flops, eng_numel(ws) + (bs ? eng_numel(bs) : 0), eng_numel(&w->x));
}

static void conv(walk *w, const char *module, int64_t stride, int64_t groups)
{
    conv_with(w, module, (conv_args){.stride = stride, .pad = -1, .groups = groups});
}

/* BatchNorm1d/2d: 2·numel(x). LayerNorm2d: not in the profiler's list (unknown). */
static void norm(walk *w, const char *module, bool layer_norm)
{
    int64_t params = param_numel(w, module, "weight") + param_numel(w, module, "bias");
    if (layer_norm)
        row(w, module, "layernorm", ENG_COST_UNKNOWN, params, 0);
    else
        row(w, module, "batchnorm", 2 * eng_numel(&w->x), params, 0);
}

static void relu(walk *w, const char *module) { row(w, module, "relu", eng_numel(&w->x), 0, 0); }
static void dropout(walk *w, const char *module) { row(w, module, "dropout", eng_numel(&w->x), 0, 0); }

/* MaxPool2d(3, 2, 1): N·C·OH·OW·9 with OH = 1 + int((H + 2p − K)/s). */
static void maxpool(walk *w, const char *module, int64_t k, int64_t stride, int64_t pad)
{
    int64_t oh = 1 + (w->x.dim[2] + 2 * pad - k) / stride, ow = 1 + (w->x.dim[3] + 2 * pad - k) / stride;
    w->x.dim[2] = oh, w->x.dim[3] = ow;
    row(w, module, "maxpool", w->x.dim[0] * w->x.dim[1] * oh * ow * k * k, 0, 0);
}

/* AdaptiveAvgPool2d((1, 1)): N·C·1·1·(H − 1 + 1)·(W − 1 + 1), then N × C × 1 × 1. */
static void adaptive_avgpool(walk *w, const char *module)
{
    int64_t kernel = w->x.dim[2] * w->x.dim[3];
    w->x = eng_shape4(w->x.dim[0], w->x.dim[1], 1, 1);
    row(w, module, "avgpool", w->x.dim[0] * w->x.dim[1] * kernel, 0, 0);
}

/* Linear: N·(weights + biases); the input is read as N × numel/N. */
static void linear(walk *w, const char *module, bool bias)
{
    const eng_shape *ws = param_shape(w, module, "weight");
    if (!ws)
        return;
    int64_t n = w->x.dim[0], params = eng_numel(ws) + (bias ? param_numel(w, module, "bias") : 0);
    if (eng_numel(&w->x) / n != ws->dim[1]) {
        fail(w, "complexity: %s receives %lld features, expects %lld", module,
             (long long)(eng_numel(&w->x) / n), (long long)ws->dim[1]);
        return;
    }
    w->x = eng_shape2(n, ws->dim[0]);
    row(w, module, "linear", n * params, params, 0);
}

static int finish(walk *w, eng_layer_cost **out, int *n, char **err)
{
    if (w->err) {
        eng_costs_free(w->rows, w->n);
        report_failure(err, "%s", w->err);
        free(w->err);
        *out = NULL;
        *n = 0;
        return -1;
    }
    *out = w->rows;
    *n = w->n;
    return 0;
}

/* ---- the trunk -------------------------------------------------------------------------------- */

/* One residual block, in torchvision's call order: conv1 bn1 relu conv2 bn2 [relu conv3 bn3]
 * [downsample.0 downsample.1] relu. The stride sits on the 3×3 conv (v1.5). */
static void block(walk *w, const resnet_options *o, bool bottleneck, int layer, int index, int64_t stride)
{
    char m[96], p[64];
    snprintf(p, sizeof p, "_feature_blocks.layer%d.%d.", layer, index);
    bool ln = o->norm == RESNET_NORM_LAYER;
    eng_shape in = w->x;
    int nconv = bottleneck ? 3 : 2;
    for (int i = 1; i <= nconv; i++) {
        bool strided = bottleneck ? i == 2 : i == 1;
        snprintf(m, sizeof m, "%sconv%d", p, i);
        conv(w, m, strided ? stride : 1, bottleneck && i == 2 ? o->groups : 1);
        snprintf(m, sizeof m, "%sbn%d", p, i);
        norm(w, m, ln);
        if (i < nconv) {
            snprintf(m, sizeof m, "%srelu", p);
            relu(w, m);
        }
    }
    eng_shape out = w->x;
    if (stride != 1 || in.dim[1] != out.dim[1]) {
        w->x = in;
        snprintf(m, sizeof m, "%sdownsample.0", p);
        conv(w, m, stride, 1);
        snprintf(m, sizeof m, "%sdownsample.1", p);
        norm(w, m, ln);
    }
    w->x = out;
    snprintf(m, sizeof m, "%srelu", p);
    relu(w, m);
}

int resnet_costs_upto(const resnet *net, const eng_shape *input, const char *prefix, resnet_feature_id last,
                      eng_shape *feat, eng_layer_cost **out, int *n, char **err)
{
    const resnet_options *o = resnet_get_options(net);
    walk w = {.x = *input, .entry = resnet_entry_fn, .nentries = resnet_entry_count(net), .model = net,
              .prefix = prefix};
    if (input->ndim != 4 || input->dim[1] != o->in_channels || input->dim[0] < 1)
        return report_failure(err, "complexity: the trunk's input must be N × %d × H × W", o->in_channels);
    static const int LAYERS[][5] = {{18, 2, 2, 2, 2},   {34, 3, 4, 6, 3},    {50, 3, 4, 6, 3},
                                    {101, 3, 4, 23, 3}, {152, 3, 8, 36, 3}, {200, 3, 24, 36, 3}};
    const int *blocks = NULL;
    for (size_t i = 0; i < ARRAY_LEN(LAYERS); i++)
        if (LAYERS[i][0] == o->depth)
            blocks = &LAYERS[i][1];
    if (!blocks)
        return report_failure(err, "complexity: no ResNet of depth %d", o->depth);
    eng_shape shapes[RESNET_NFEATURES];
    /* VISSL's get_trunk_forward_outputs stops after the deepest requested feature: the blocks
     * after it are never called. */
    conv(&w, "_feature_blocks.conv1", o->small_stem ? 1 : 2, 1);
    norm(&w, "_feature_blocks.bn1", o->norm == RESNET_NORM_LAYER);
    relu(&w, "_feature_blocks.conv1_relu");
    shapes[RESNET_CONV1] = w.x;
    if (last >= RESNET_RES1 && !o->small_stem)
        maxpool(&w, "_feature_blocks.maxpool", 3, 2, 1);
    shapes[RESNET_RES1] = w.x;
    for (int l = 0; l < 4 && !w.err && (int)last >= RESNET_RES2 + l; l++) {
        int64_t stride = l == 0 ? 1 : l == 3 ? o->layer4_stride : 2;
        for (int i = 0; i < blocks[l]; i++)
            block(&w, o, o->depth >= 50, l + 1, i, i == 0 ? stride : 1);
        shapes[RESNET_RES2 + l] = w.x;
    }
    if (!w.err && last >= RESNET_RES5AVG) {
        adaptive_avgpool(&w, "_feature_blocks.avgpool");
        shapes[RESNET_RES5AVG] = w.x;
    }
    if (!w.err && last >= RESNET_FLATTEN) {
        row(&w, "_feature_blocks.flatten", "flatten", 0, 0, 0); /* VISSL's Flatten.flops = 0 */
        shapes[RESNET_FLATTEN] = eng_shape2(w.x.dim[0], eng_numel(&w.x) / w.x.dim[0]);
    }
    if (feat && !w.err)
        memcpy(feat, shapes, (size_t)(last + 1) * sizeof *feat);
    return finish(&w, out, n, err);
}

int resnet_costs(const resnet *net, const eng_shape *input, eng_layer_cost **out, int *n, char **err)
{
    return resnet_costs_upto(net, input, NULL, RESNET_FLATTEN, NULL, out, n, err);
}

/* ---- RegNet ----------------------------------------------------------------------------------- */

/* SiLU is in none of the profiler's lists: NotImplementedError (unknown FLOPs). */
static void activation(walk *w, const char *module, unit_act a)
{
    if (a == UNIT_ACT_SILU)
        row(w, module, "silu", ENG_COST_UNKNOWN, 0, 0);
    else
        relu(w, module);
}

/* A convolution whose groups are what its weight's shape says (the grouped 3×3). */
static void conv_grouped(walk *w, const char *module, int64_t stride)
{
    const eng_shape *ws = param_shape(w, module, "weight");
    if (ws)
        conv(w, module, stride, ws->dim[1] ? w->x.dim[1] / ws->dim[1] : 1);
}

/* SqueezeAndExcitationLayer: avgpool, excitation.0 (conv with bias), .1, .2, .3 (sigmoid); the
 * product with x is a tensor op (no row) and leaves x's shape. */
static void squeeze_excitation(walk *w, const char *p, unit_act a)
{
    char m[160];
    eng_shape x = w->x;
    snprintf(m, sizeof m, "%sf.se.avgpool", p);
    adaptive_avgpool(w, m);
    for (int i = 0; i < 3 && !w->err; i += 2) {
        snprintf(m, sizeof m, "%sf.se.excitation.%d", p, i);
        conv(w, m, 1, 1);
        if (!w->err)
            w->rows[w->n - 1].params += param_numel(w, m, "bias");
        snprintf(m, sizeof m, "%sf.se.excitation.%d", p, i + 1);
        if (i == 0)
            activation(w, m, a);
        else
            row(w, m, "sigmoid", eng_numel(&w->x), 0, 0);
    }
    w->x = x;
}

/* conv, norm[, activation] under "<p><conv>", "<p><norm>", "<p><act>". */
static void conv_norm(walk *w, const char *p, const char *c, const char *nm, const char *act, int64_t stride,
                      unit_act a)
{
    char m[160];
    snprintf(m, sizeof m, "%s%s", p, c);
    conv_grouped(w, m, stride);
    snprintf(m, sizeof m, "%s%s", p, nm);
    norm(w, m, false);
    if (act) {
        snprintf(m, sizeof m, "%s%s", p, act);
        activation(w, m, a);
    }
}

/* One block in ClassyVision's call order: [proj, bn,] f's modules, [activation]. */
static void regnet_block_costs(walk *w, const regnet_options *o, int64_t width, int s, int j)
{
    char p[96], m[160];
    snprintf(p, sizeof p, "_feature_blocks.res%d.block%d-%d.", s + 2, s + 1, j);
    int64_t stride = j == 0 ? 2 : 1;
    regnet_block t = o->block_type;
    bool residual = t == REGNET_RES_BASIC_BLOCK || t == REGNET_RES_BOTTLENECK_BLOCK;
    eng_shape in = w->x;
    if (residual && (in.dim[1] != width || stride != 1)) {
        conv_norm(w, p, "proj", "bn", NULL, stride, o->activation);
        w->x = in;
    }
    if (t == REGNET_VANILLA_BLOCK) {
        conv_norm(w, p, "a.0", "a.1", "a.2", stride, o->activation);
        conv_norm(w, p, "b.0", "b.1", "b.2", 1, o->activation);
    } else if (t == REGNET_RES_BASIC_BLOCK) {
        conv_norm(w, p, "f.a.0", "f.a.1", "f.a.2", stride, o->activation);
        conv_norm(w, p, "f.a.3", "f.final_bn", NULL, 1, o->activation);
    } else {
        conv_norm(w, p, "f.a.0", "f.a.1", "f.a.2", 1, o->activation);
        conv_norm(w, p, "f.b.0", "f.b.1", "f.b.2", stride, o->activation);
        if (o->use_se && o->se_ratio > 0)
            squeeze_excitation(w, p, o->activation);
        conv_norm(w, p, "f.c", "f.final_bn", NULL, 1, o->activation);
    }
    if (residual) {
        snprintf(m, sizeof m, "%sactivation", p);
        activation(w, m, o->activation);
    }
}

static const eng_entry *regnet_entry_fn(const void *m, int i)
{
    return &regnet_param_table((regnet *)m)->entries[i];
}

int regnet_costs_upto(const regnet *net, const eng_shape *input, const char *prefix, int last, eng_shape *feat,
                      eng_layer_cost **out, int *n, char **err)
{
    const regnet_options *o = regnet_get_options(net);
    const regnet_stages *st = regnet_get_stages(net);
    walk w = {.x = *input, .entry = regnet_entry_fn, .nentries = regnet_param_table((regnet *)net)->nentries,
              .model = net, .prefix = prefix};
    if (input->ndim != 4 || input->dim[1] != 3 || input->dim[0] < 1)
        return report_failure(err, "complexity: the trunk's input must be N × 3 × H × W");
    eng_shape shapes[REGNET_MAX_STAGES + 3];
    bool pool = o->stem_type == REGNET_STEM_RES_IN;
    conv_norm(&w, "_feature_blocks.conv1.", "stem.0", "stem.1", "stem.2", o->stem_type == REGNET_STEM_RES_CIFAR ? 1 : 2,
              o->activation);
    if (pool)
        maxpool(&w, "_feature_blocks.conv1.stem.3", 3, 2, 1);
    shapes[0] = w.x;
    for (int s = 0; s < st->n && !w.err && last >= s + 1; s++) {
        for (int j = 0; j < st->depth[s]; j++)
            regnet_block_costs(&w, o, st->width[s], s, j);
        shapes[s + 1] = w.x;
    }
    if (!w.err && last >= st->n + 1) {
        adaptive_avgpool(&w, "_feature_blocks.avgpool");
        shapes[st->n + 1] = w.x;
    }
    if (!w.err && last >= st->n + 2) {
        row(&w, "_feature_blocks.flatten", "flatten", 0, 0, 0);
        shapes[st->n + 2] = eng_shape2(w.x.dim[0], eng_numel(&w.x) / w.x.dim[0]);
    }
    if (feat && !w.err)
        memcpy(feat, shapes, (size_t)(last + 1) * sizeof *feat);
    return finish(&w, out, n, err);
}

/* ---- AlexNet ---------------------------------------------------------------------------------- */

static const eng_entry *alexnet_entry_fn(const void *m, int i)
{
    return &alexnet_param_table((alexnet *)m)->entries[i];
}

/* LocalResponseNorm is in none of the profiler's lists: NotImplementedError (unknown FLOPs). */
static void lrn(walk *w, const char *module) { row(w, module, "lrn", ENG_COST_UNKNOWN, 0, 0); }

/* Feature block b: "_feature_blocks.b.0" Conv2d, ".1" BatchNorm2d or ReLU, ".2" ReLU; or the
 * pool block's MaxPool2d with its LRN before or after it. */
static void alexnet_block_costs(walk *w, const alexnet_spec *v, int b)
{
    char m0[40], m1[40], m2[40];
    snprintf(m0, sizeof m0, "_feature_blocks.%d.0", b);
    snprintf(m1, sizeof m1, "_feature_blocks.%d.1", b);
    snprintf(m2, sizeof m2, "_feature_blocks.%d.2", b);
    int c = alexnet_block_conv(b);
    if (c < 0) {
        bool has_lrn = v->lrn != ALEXNET_LRN_NONE && b < 7, before = v->lrn == ALEXNET_LRN_BEFORE_POOL;
        if (!has_lrn) { /* the MaxPool2d is the ModuleList's item itself */
            snprintf(m0, sizeof m0, "_feature_blocks.%d", b);
            maxpool(w, m0, 3, 2, 0);
            return;
        }
        if (before)
            lrn(w, m0);
        maxpool(w, before ? m1 : m0, 3, 2, 0);
        if (!before)
            lrn(w, m1);
        return;
    }
    const alexnet_conv *k = &v->conv[c];
    conv_with(w, m0, (conv_args){.stride = k->stride, .pad = k->pad, .groups = k->groups, .bias = true});
    if (k->bn)
        norm(w, m1, false);
    relu(w, k->bn ? m2 : m1);
}

int alexnet_costs_upto(const alexnet *net, const eng_shape *input, const char *prefix, int last, eng_shape *feat,
                       eng_layer_cost **out, int *n, char **err)
{
    const alexnet_spec *v = alexnet_spec_of(alexnet_get_variant(net));
    walk w = {.x = *input, .entry = alexnet_entry_fn, .nentries = alexnet_param_table((alexnet *)net)->nentries,
              .model = net, .prefix = prefix};
    if (alexnet_check_input(alexnet_get_variant(net), input, err) != 0)
        return -1;
    eng_shape shapes[ALEXNET_NFEATURES];
    if (v->sobel) {
        conv_with(&w, "sobel.0", (conv_args){.stride = 1, .pad = 0, .groups = 1, .bias = true, .fixed = true});
        conv_with(&w, "sobel.1", (conv_args){.stride = 1, .pad = 1, .groups = 1, .bias = true, .fixed = true});
    }
    for (int b = 0; b < ALEXNET_NFEATURES - 1 && b <= last && !w.err; b++) {
        alexnet_block_costs(&w, v, b);
        shapes[b] = w.x;
    }
    if (!w.err && last >= ALEXNET_NFEATURES - 1) {
        row(&w, "_feature_blocks.8", "flatten", 0, 0, 0);
        shapes[ALEXNET_NFEATURES - 1] = eng_shape2(w.x.dim[0], eng_numel(&w.x) / w.x.dim[0]);
    }
    if (feat && !w.err)
        memcpy(feat, shapes, (size_t)(last + 1) * sizeof *feat);
    return finish(&w, out, n, err);
}

/* ---- EfficientNet ----------------------------------------------------------------------------- */

static const eng_entry *efficientnet_entry_fn(const void *m, int i)
{
    return &efficientnet_param_table((efficientnet *)m)->entries[i];
}

/* Conv2dSamePadding's own flops(): N·Cin·Cout·K·K·ceil(H/s)·ceil(W/s)/groups, its padding being
 * whatever gives ceil(H/s) outputs. Where that padding is not zero, its ZeroPad2d child runs
 * first: a row of its own, with no rule (unknown FLOPs). */
static void conv_same(walk *w, const char *module, int64_t stride, int64_t groups, bool bias)
{
    const eng_shape *ws = param_shape(w, module, "weight");
    if (!ws)
        return;
    int64_t n = w->x.dim[0], cin = w->x.dim[1], cout = ws->dim[0], k = ws->dim[2];
    int64_t oh = (w->x.dim[2] + stride - 1) / stride, ow = (w->x.dim[3] + stride - 1) / stride;
    if ((oh - 1) * stride + k > w->x.dim[2] || (ow - 1) * stride + k > w->x.dim[3]) {
        char pad[128];
        snprintf(pad, sizeof pad, "%s.same_padding", module);
        row(w, pad, "zeropad", ENG_COST_UNKNOWN, 0, 0);
    }
    int64_t params = eng_numel(ws) + (bias ? param_numel(w, module, "bias") : 0);
    w->x = eng_shape4(n, cout, oh, ow);
    row(w, module, "conv", n * cin * cout * k * k * oh * ow / groups, params, eng_numel(&w->x));
}

/* VISSL's Wrap(swish) module: no rule and no flops() (unknown FLOPs). */
static void swish(walk *w, const char *module) { row(w, module, "swish", ENG_COST_UNKNOWN, 0, 0); }

/* MBConvBlock's modules in forward order: [expand_conv bn0] depthwise_conv bn1
 * [se_avgpool se_reduce se_expand] project_conv bn2 (swish, sigmoid and drop-connect are
 * functions: no rows). */
static void mbconv_costs(walk *w, const efficientnet_options *o, int index, int64_t expand, int64_t stride)
{
    char p[48], m[96];
    snprintf(p, sizeof p, "_feature_blocks.block%d.", index);
#define MOD(name) (snprintf(m, sizeof m, "%s%s", p, name), m)
    int64_t c = w->x.dim[1];
    if (expand != 1) {
        conv_same(w, MOD("expand_conv"), 1, 1, false);
        norm(w, MOD("bn0"), false);
    }
    conv_same(w, MOD("depthwise_conv"), stride, c * expand, false);
    norm(w, MOD("bn1"), false);
    if (o->use_se) {
        eng_shape x = w->x;
        adaptive_avgpool(w, MOD("se_avgpool"));
        conv_same(w, MOD("se_reduce"), 1, 1, true);
        conv_same(w, MOD("se_expand"), 1, 1, true);
        w->x = x;
    }
    conv_same(w, MOD("project_conv"), 1, 1, false);
    norm(w, MOD("bn2"), false);
#undef MOD
}

int efficientnet_costs_upto(const efficientnet *net, const eng_shape *input, const char *prefix, int last,
                            eng_shape *feat, eng_layer_cost **out, int *n, char **err)
{
    const efficientnet_options *o = efficientnet_get_options(net);
    walk w = {.x = *input, .entry = efficientnet_entry_fn, .model = net, .prefix = prefix,
              .nentries = efficientnet_param_table((efficientnet *)net)->nentries};
    if (input->ndim != 4 || input->dim[1] != 3 || input->dim[0] < 1)
        return report_failure(err, "complexity: the trunk's input must be N × 3 × H × W");
    int nb = efficientnet_block_count(o);
    eng_shape shapes[TRUNK_MAX_FEATURES];
    conv_same(&w, "_feature_blocks.conv1.0", 2, 1, false);
    norm(&w, "_feature_blocks.conv1.1", false);
    swish(&w, "_feature_blocks.conv1.2");
    shapes[0] = w.x;
    for (int b = 0; b < nb && b + 1 <= last && !w.err; b++) {
        int64_t expand, stride;
        efficientnet_block_geometry(o, b, &expand, &stride);
        mbconv_costs(&w, o, b, expand, stride);
        shapes[b + 1] = w.x;
    }
    if (!w.err && last >= nb + 1) {
        conv_same(&w, "_feature_blocks.conv_final.0", 1, 1, false);
        norm(&w, "_feature_blocks.conv_final.1", false);
        swish(&w, "_feature_blocks.conv_final.2");
        shapes[nb + 1] = w.x;
    }
    if (!w.err && last >= nb + 2) {
        adaptive_avgpool(&w, "_feature_blocks.avgpool");
        shapes[nb + 2] = w.x;
    }
    if (!w.err && last >= nb + 3) {
        row(&w, "_feature_blocks.flatten", "flatten", 0, 0, 0);
        w.x = eng_shape2(w.x.dim[0], eng_numel(&w.x) / w.x.dim[0]);
        shapes[nb + 3] = w.x;
    }
    if (!w.err && last >= nb + 4 && o->dropout_rate > 0) { /* ClassyVision has no module at rate 0 */
        dropout(&w, "_feature_blocks.dropout");
        shapes[nb + 4] = w.x;
    }
    if (feat && !w.err)
        memcpy(feat, shapes, (size_t)(last + 1) * sizeof *feat);
    return finish(&w, out, n, err);
}

int trunk_costs_upto(const trunk *t, const eng_shape *input, const char *prefix, int last, eng_shape *feat,
                     eng_layer_cost **out, int *n, char **err)
{
    if (trunk_regnet(t))
        return regnet_costs_upto(trunk_regnet(t), input, prefix, last, feat, out, n, err);
    if (trunk_alexnet(t))
        return alexnet_costs_upto(trunk_alexnet(t), input, prefix, last, feat, out, n, err);
    if (trunk_efficientnet(t))
        return efficientnet_costs_upto(trunk_efficientnet(t), input, prefix, last, feat, out, n, err);
    return resnet_costs_upto(trunk_resnet(t), input, prefix, (resnet_feature_id)last, feat, out, n, err);
}

/* ---- pool ops --------------------------------------------------------------------------------- */

int64_t eng_pool_flops(const eng_pool_desc *d, const eng_shape *x)
{
    int64_t s0 = d->stride[0] ? d->stride[0] : d->kernel[0], s1 = d->stride[1] ? d->stride[1] : d->kernel[1];
    int64_t oh = 1 + (x->dim[2] + 2 * d->pad[0] - d->kernel[0]) / s0;
    int64_t ow = 1 + (x->dim[3] + 2 * d->pad[1] - d->kernel[1]) / s1;
    return x->dim[0] * x->dim[1] * oh * ow * d->kernel[0] * d->kernel[1];
}

int64_t eng_adaptive_avgpool_flops(const int64_t out_hw[2], const eng_shape *x)
{
    if (out_hw[0] > x->dim[2] || out_hw[1] > x->dim[3])
        return ENG_COST_UNKNOWN; /* the profiler raises NotImplementedError */
    return x->dim[0] * x->dim[1] * out_hw[0] * out_hw[1] * (x->dim[2] - out_hw[0] + 1) * (x->dim[3] - out_hw[1] + 1);
}

/* ---- heads -------------------------------------------------------------------------------------- */

/* VISSL's MLP into Sequential slots prefix{i}: Linear [BN] [ReLU] [Dropout] per dims step. */
static void mlp(walk *w, const head_options *o, const char *prefix)
{
    char m[96];
    int slot = 0;
    for (int i = 1; i < o->ndims && !w->err; i++) {
        snprintf(m, sizeof m, "%s%d", prefix, slot++);
        linear(w, m, o->use_bias);
        if (o->use_bn) {
            snprintf(m, sizeof m, "%s%d", prefix, slot++);
            norm(w, m, false);
        }
        if (o->use_relu) {
            snprintf(m, sizeof m, "%s%d", prefix, slot++);
            relu(w, m);
        }
        if (o->use_dropout) {
            snprintf(m, sizeof m, "%s%d", prefix, slot++);
            dropout(w, m);
        }
    }
}

/* SwAVPrototypesHead: projection_head slots (the last BN/ReLU skipped with skip_last_bn), the
 * functional L2 normalisation (no module, no row), then prototypes{j}, each reading the embedding. */
static void swav(walk *w, const head_options *o)
{
    char m[96];
    int slot = 0;
    for (int i = 1; i < o->ndims && !w->err; i++) {
        snprintf(m, sizeof m, "projection_head.%d", slot++);
        linear(w, m, o->use_bias);
        if (i == o->ndims - 1 && o->skip_last_bn)
            break;
        if (o->use_bn) {
            snprintf(m, sizeof m, "projection_head.%d", slot++);
            norm(w, m, false);
        }
        snprintf(m, sizeof m, "projection_head.%d", slot++);
        relu(w, m);
    }
    eng_shape emb = w->x;
    for (int j = 0; j < o->nclusters && !w->err; j++) {
        w->x = emb;
        snprintf(m, sizeof m, "prototypes%d", j);
        linear(w, m, false);
    }
}

int head_costs(const head *h, const eng_shape *in, eng_layer_cost **out, int *n, char **err)
{
    const head_options *o = head_opts(h);
    walk w = {.x = *in, .entry = head_entry_fn, .nentries = head_entry_count(h), .model = h};
    if (in->ndim < 2 || in->dim[0] < 1)
        return report_failure(err, "complexity: a head's input must be N × F or N × C × H × W");
    switch (o->type) {
    case HEAD_MLP: mlp(&w, o, "clf."); break;
    case HEAD_EVAL_MLP:
        if (in->ndim == 2) /* VISSL unsqueezes N × C to N × C × 1 × 1 */
            w.x = eng_shape4(in->dim[0], in->dim[1], 1, 1);
        norm(&w, "channel_bn", false);
        mlp(&w, o, "clf.clf.");
        break;
    case HEAD_SWAV: swav(&w, o); break;
    case HEAD_SIAMESE_CONCAT_VIEW: /* no flops() and not in the profiler's list */
        row(&w, "", "siamese_concat_view", ENG_COST_UNKNOWN, 0, 0);
        break;
    }
    return finish(&w, out, n, err);
}

/* ---- totals --------------------------------------------------------------------------------- */

eng_layer_cost eng_costs_total(const eng_layer_cost *rows, int n)
{
    eng_layer_cost t = {.name = "total", .kind = "total"};
    for (int i = 0; i < n; i++) {
        if (t.flops != ENG_COST_UNKNOWN)
            t.flops = rows[i].flops == ENG_COST_UNKNOWN ? ENG_COST_UNKNOWN : t.flops + rows[i].flops;
        t.params += rows[i].params;
        t.activations += rows[i].activations;
    }
    return t;
}

void eng_costs_free(eng_layer_cost *rows, int n)
{
    for (int i = 0; rows && i < n; i++)
        free((char *)rows[i].name);
    free(rows);
}

/*
 * heads.c — VISSL's heads on the model engine (see heads.h).
 *
 * How it works: construction turns the options into a flat array of `layer`s, each naming the
 * earlier layer it reads (`src`, -1 = the head's input) and the entries it owns, while laying
 * out parameters, gradients (same offsets) and BN running statistics by bump allocation in
 * state-dict order, exactly as resnet.c does. head_plan computes every layer's shapes for one
 * input and makes one activation allocation. Forward walks the array; backward zeroes the
 * activation gradients (the engine accumulates), seeds the outputs' gradients and walks it
 * backwards: a layer's consumers always come later in the array, so by the time a layer is
 * reached its output gradient is complete (swav's embedding collects every prototype's share).
 * Every layer keeps its own output (no in-place ReLU): heads are small next to the trunk.
 */
#include "heads.h"

#include "log.h"
#include "rng.h"
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS (4 * HEAD_MAX_DIMS + HEAD_MAX_PROTOTYPES + 2)
#define ACT_ALIGN 64

typedef enum { OP_LINEAR, OP_BN, OP_RELU, OP_DROPOUT, OP_L2NORM } layer_op;

typedef struct {
    layer_op op;
    int src;             /* the layer this one reads; -1 = the head's input */
    int w, b, rm, rv;    /* entry indices (linear: w, b or -1; BN: w = gamma, b = beta) */
    int64_t in_features; /* linear: the weight's in_features; BN: channels */
    eng_shape in_shape;  /* planned: the shape this layer reads its input as */
    eng_tensor out, out_grad, mean, invstd;
} layer;

struct head {
    head_options opt;
    eng_params params; /* every named tensor; a Linear's fan_in is its in_features, BN's 0 */
    layer layers[MAX_LAYERS];
    int nlayers;
    int outputs[HEAD_MAX_PROTOTYPES + 1]; /* layer indices (siamese: none, see siamese_out) */
    int noutputs;

    bool planned, last_train;
    eng_shape in_shape, x_shape; /* as given; as the layers read it (eval_mlp: 4-D) */
    void *act_base;
    size_t act_bytes;
    eng_tensor siamese_out; /* a view of the last input */
    eng_tensor last_x;
    uint64_t step;
    const eng_reducer *bn_across; /* SyncBN (NULL: this rank's batch) */
};

head_options head_defaults(head_type type)
{
    return (head_options){.type = type, .use_bias = true, .return_embeddings = true, .skip_last_bn = true,
                          .normalize_feats = true, .num_towers = 2, .bn_eps = HEAD_BN_EPS,
                          .bn_momentum = HEAD_BN_MOMENTUM};
}

int head_type_by_name(const char *name)
{
    static const char *const NAMES[] = {"mlp", "eval_mlp", "siamese_concat_view", "swav_head"};
    for (int i = 0; i < (int)ARRAY_LEN(NAMES); i++)
        if (strcmp(NAMES[i], name) == 0)
            return i;
    return -1;
}

/* ---- construction ---------------------------------------------------------------------------- */

static eng_shape shape1(int64_t n) { return (eng_shape){.ndim = 1, .dim = {n}}; }

#define add_entry(be, h, kind, s, fan_in, ...) eng_params_add((be), &(h)->params, (kind), (s), (fan_in), __VA_ARGS__)

static int add_layer(head *h, layer_op op, int src)
{
    if (h->nlayers == MAX_LAYERS)
        die(EXIT_RUNTIME, "heads: too many layers");
    h->layers[h->nlayers] = (layer){.op = op, .src = src, .w = -1, .b = -1, .rm = -1, .rv = -1};
    return h->nlayers++;
}

static int add_linear(eng_backend *be, head *h, int src, const char *prefix, int64_t in, int64_t out, bool bias)
{
    int l = add_layer(h, OP_LINEAR, src);
    layer *L = &h->layers[l];
    L->in_features = in;
    L->w = add_entry(be, h, HEAD_PARAM, eng_shape2(out, in), in, "%s.weight", prefix);
    if (bias)
        L->b = add_entry(be, h, HEAD_PARAM, shape1(out), in, "%s.bias", prefix);
    return l;
}

static int add_bn(eng_backend *be, head *h, int src, const char *prefix, int64_t c)
{
    int l = add_layer(h, OP_BN, src);
    layer *L = &h->layers[l];
    L->in_features = c;
    L->w = add_entry(be, h, HEAD_PARAM, shape1(c), 0, "%s.weight", prefix);
    L->b = add_entry(be, h, HEAD_PARAM, shape1(c), 0, "%s.bias", prefix);
    L->rm = add_entry(be, h, HEAD_BUFFER, shape1(c), 0, "%s.running_mean", prefix);
    L->rv = add_entry(be, h, HEAD_BUFFER, shape1(c), 0, "%s.running_var", prefix);
    return l;
}

static int check_dims(const head_options *o, const char *what, char **err)
{
    if (o->ndims < 2 || o->ndims > HEAD_MAX_DIMS)
        return report_failure(err, "%s: dims needs 2 to %d entries (got %d)", what, HEAD_MAX_DIMS, o->ndims);
    for (int i = 0; i < o->ndims; i++)
        if (o->dims[i] < 1)
            return report_failure(err, "%s: dims[%d] = %lld must be ≥ 1", what, i, (long long)o->dims[i]);
    return 0;
}

/* VISSL's (fixed) MLP into nn.Sequential slots `prefix`{i}: Linear(dims[i-1], dims[i]), then
 * BN, ReLU, Dropout as asked, except after the last Linear with skip_last_layer_relu_bn.
 * Slots count every module, so the names match PyTorch's state dict. */
static int mlp_build(eng_backend *be, head *h, const head_options *o, const char *prefix, int src, char **err)
{
    if (check_dims(o, "mlp", err) != 0)
        return -2;
    int slot = 0;
    char name[64];
    for (int i = 1; i < o->ndims; i++) {
        int64_t dim = o->dims[i];
        snprintf(name, sizeof name, "%s%d", prefix, slot++);
        src = add_linear(be, h, src, name, o->dims[i - 1], dim, o->use_bias);
        if (i == o->ndims - 1 && o->skip_last_layer_relu_bn)
            break;
        if (o->use_bn) {
            snprintf(name, sizeof name, "%s%d", prefix, slot++);
            src = add_bn(be, h, src, name, dim);
        }
        if (o->use_relu) {
            src = add_layer(h, OP_RELU, src);
            slot++;
        }
        if (o->use_dropout) {
            src = add_layer(h, OP_DROPOUT, src);
            slot++;
        }
    }
    return src;
}

/* SwAVPrototypesHead: the projection stops after its last Linear when skip_last_bn. */
static int swav_build(eng_backend *be, head *h, const head_options *o, char **err)
{
    if (check_dims(o, "swav_head", err) != 0)
        return -1;
    if (o->nclusters < 1 || o->nclusters > HEAD_MAX_PROTOTYPES)
        return report_failure(err, "swav_head: num_clusters needs 1 to %d entries", HEAD_MAX_PROTOTYPES);
    int src = -1, slot = 0;
    char name[64];
    for (int i = 1; i < o->ndims; i++) {
        snprintf(name, sizeof name, "projection_head.%d", slot++);
        src = add_linear(be, h, src, name, o->dims[i - 1], o->dims[i], o->use_bias);
        if (i == o->ndims - 1 && o->skip_last_bn)
            break;
        if (o->use_bn) {
            snprintf(name, sizeof name, "projection_head.%d", slot++);
            src = add_bn(be, h, src, name, o->dims[i]);
        }
        src = add_layer(h, OP_RELU, src);
        slot++;
    }
    if (o->normalize_feats)
        src = add_layer(h, OP_L2NORM, src);
    if (o->return_embeddings)
        h->outputs[h->noutputs++] = src;
    for (int j = 0; j < o->nclusters; j++) {
        if (o->num_clusters[j] < 1)
            return report_failure(err, "swav_head: num_clusters[%d] must be ≥ 1", j);
        snprintf(name, sizeof name, "prototypes%d", j);
        h->outputs[h->noutputs++] = add_linear(be, h, src, name, o->dims[o->ndims - 1], o->num_clusters[j], false);
    }
    return 0;
}

static int build(eng_backend *be, head *h, char **err)
{
    const head_options *o = &h->opt;
    int last;
    switch (o->type) {
    case HEAD_MLP:
        if ((last = mlp_build(be, h, o, "clf.", -1, err)) < -1)
            return -1;
        h->outputs[h->noutputs++] = last;
        return 0;
    case HEAD_EVAL_MLP:
        if (o->in_channels < 1)
            return report_failure(err, "eval_mlp: in_channels must be ≥ 1");
        last = add_bn(be, h, -1, "channel_bn", o->in_channels);
        if ((last = mlp_build(be, h, o, "clf.clf.", last, err)) < -1)
            return -1;
        h->outputs[h->noutputs++] = last;
        return 0;
    case HEAD_SIAMESE_CONCAT_VIEW:
        if (o->num_towers < 1)
            return report_failure(err, "siamese_concat_view: num_towers must be ≥ 1");
        h->noutputs = 1;
        return 0;
    case HEAD_SWAV: return swav_build(be, h, o, err);
    }
    return report_failure(err, "heads: unknown head type %d", (int)o->type);
}

head *head_new(eng_backend *be, const head_options *opt, uint64_t seed, char **err)
{
    head *h = xcalloc(1, sizeof *h);
    h->opt = *opt;
    if (build(be, h, err) != 0) {
        head_free(be, h);
        return NULL;
    }
    eng_params_alloc(be, &h->params); /* heads without parameters (siamese) keep NULL bases */
    head_init(be, h, seed);
    head_zero_grad(be, h);
    return h;
}

static void unplan(eng_backend *be, head *h)
{
    if (h->act_base)
        eng_free(be, h->act_base);
    h->act_base = NULL;
    h->act_bytes = 0;
    h->planned = false;
}

void head_free(eng_backend *be, head *h)
{
    if (!h)
        return;
    unplan(be, h);
    eng_params_free(be, &h->params);
    free(h);
}

/* ---- accessors ------------------------------------------------------------------------------- */

int head_entry_count(const head *h) { return h->params.nentries; }
const head_options *head_opts(const head *h) { return &h->opt; }
eng_params *head_param_table(head *h) { return &h->params; }
const head_entry *head_entry_at(const head *h, int i) { return &h->params.entries[i]; }
int64_t head_param_count(const head *h) { return eng_params_count(&h->params); }
int head_output_count(const head *h) { return h->noutputs; }
uint64_t head_step(const head *h) { return h->step; }
void head_set_step(head *h, uint64_t step) { h->step = step; }
void head_set_batchnorm_reducer(head *h, const eng_reducer *across) { h->bn_across = across; }

eng_tensor head_params(const head *h) { return eng_params_values(&h->params); }
eng_tensor head_grads(const head *h) { return eng_params_grads(&h->params); }
eng_tensor head_buffers(const head *h) { return eng_params_buffers(&h->params); }
void head_zero_grad(eng_backend *be, head *h) { eng_params_zero_grad(be, &h->params); }

/* ---- initialisation -------------------------------------------------------------------------- */

/* nn.Linear.reset_parameters: both weight and bias U(±1/√in_features); BN weight 1, bias 0,
 * running mean 0, running var 1. */
static void init_values(const eng_entry *e, rng_stream *r, float *h)
{
    int64_t n = eng_numel(&e->value.shape);
    double bound = e->fan_in > 0 ? 1.0 / sqrt((double)e->fan_in) : 0.0;
    float v = eng_name_ends_with(e->name, ".weight") || eng_name_ends_with(e->name, "running_var") ? 1.0f : 0.0f;
    for (int64_t j = 0; j < n; j++)
        h[j] = e->fan_in > 0 ? (float)rng_uniform_range(r, -bound, bound) : v;
}

void head_init(eng_backend *be, head *h, uint64_t seed) { eng_params_init_with(be, &h->params, seed, init_values); }

/* The formula of make_heads_fixtures.py on the shared Weyl sequence (params.h). */
static double formula_value(const head_entry *e, int64_t i, int k)
{
    double u = eng_params_weyl(i, k);
    if (e->kind == HEAD_BUFFER)
        return eng_name_ends_with(e->name, "running_mean") ? 0.1 * (2.0 * u - 1.0) : 1.0 + 0.5 * u;
    if (e->value.shape.ndim == 2)
        return sqrt(3.0 / (double)e->value.shape.dim[1]) * (2.0 * u - 1.0);
    return eng_name_ends_with(e->name, ".weight") ? 1.0 + 0.25 * (2.0 * u - 1.0) : 0.1 * (2.0 * u - 1.0);
}

void head_init_formula(eng_backend *be, head *h)
{
    float *buf = eng_params_host_scratch(&h->params);
    int counter[2] = {0, 0};
    for (int i = 0; i < h->params.nentries; i++) {
        head_entry *e = &h->params.entries[i];
        int k = counter[e->kind]++;
        for (int64_t j = 0; j < eng_numel(&e->value.shape); j++)
            buf[j] = (float)formula_value(e, j, k);
        eng_upload(be, &e->value, buf);
    }
    free(buf);
}

/* ---- planning -------------------------------------------------------------------------------- */

static void act(eng_backend *be, head *h, eng_tensor *t, eng_shape s)
{
    *t = (eng_tensor){.shape = s, .base = NULL, .offset = h->act_bytes};
    h->act_bytes += (eng_bytes(be, &s) + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN;
}

static eng_shape flat2(const eng_shape *s) { return eng_shape2(s->dim[0], eng_numel(s) / s->dim[0]); }

/* The layer's output shape in *y; -1 with *err when its input cannot fit. */
static int layer_plan_shape(head *h, layer *L, const eng_shape *src, eng_shape *y, char **err)
{
    switch (L->op) {
    case OP_LINEAR:
        L->in_shape = flat2(src);
        if (L->in_shape.dim[1] != L->in_features)
            return report_failure(err, "a Linear with in_features %lld receives %lld features",
                                  (long long)L->in_features, (long long)L->in_shape.dim[1]);
        *y = eng_shape2(src->dim[0], h->params.entries[L->w].value.shape.dim[0]);
        return 0;
    case OP_BN:
        L->in_shape = *src;
        if (src->dim[1] != L->in_features)
            return report_failure(err, "a BatchNorm of %lld channels receives %lld",
                                  (long long)L->in_features, (long long)src->dim[1]);
        *y = *src;
        return 0;
    default:
        L->in_shape = flat2(src);
        *y = L->in_shape;
        return 0;
    }
}

/* Whether the head takes inputs of this shape (their rank, the towers' rows); h->x_shape is
 * the shape its layers see. */
static int check_plan_input(head *h, const eng_shape *in, char **err)
{
    h->x_shape = *in;
    if (h->opt.type == HEAD_EVAL_MLP) {
        if (in->ndim == 2) /* VISSL unsqueezes a 2-D input to N × C × 1 × 1 */
            h->x_shape = eng_shape4(in->dim[0], in->dim[1], 1, 1);
        if (h->x_shape.ndim != 4)
            return report_failure(err, "eval_mlp: input must be N × C or N × C × H × W (got %d dimensions)",
                                  in->ndim);
    } else if (in->ndim != 2) {
        return report_failure(err, "input must be N × F (got %d dimensions)", in->ndim);
    }
    if (h->opt.type == HEAD_SIAMESE_CONCAT_VIEW && in->dim[0] % h->opt.num_towers != 0)
        return report_failure(err, "siamese_concat_view: %lld rows are not a multiple of %lld towers",
                              (long long)in->dim[0], (long long)h->opt.num_towers);
    return 0;
}

int head_plan(eng_backend *be, head *h, const eng_shape *in, char **err)
{
    if (h->planned && eng_shape_equal(&h->in_shape, in))
        return 0;
    unplan(be, h);
    if (check_plan_input(h, in, err) != 0)
        return -1;
    h->in_shape = *in;
    if (h->opt.type == HEAD_SIAMESE_CONCAT_VIEW) {
        h->planned = true;
        return 0;
    }
    for (int i = 0; i < h->nlayers; i++) {
        layer *L = &h->layers[i];
        const eng_shape *src = L->src < 0 ? &h->x_shape : &h->layers[L->src].out.shape;
        eng_shape y;
        if (layer_plan_shape(h, L, src, &y, err) != 0) {
            unplan(be, h);
            return -1;
        }
        act(be, h, &L->out, y);
        act(be, h, &L->out_grad, y);
        if (L->op == OP_BN) {
            act(be, h, &L->mean, shape1(L->in_features));
            act(be, h, &L->invstd, shape1(L->in_features));
        }
    }
    h->act_base = eng_alloc(be, h->act_bytes);
    for (int i = 0; i < h->nlayers; i++) {
        layer *L = &h->layers[i];
        L->out.base = L->out_grad.base = L->mean.base = L->invstd.base = h->act_base;
    }
    h->planned = true;
    h->last_train = false;
    return 0;
}

eng_shape head_output_shape(const head *h)
{
    if (!h->planned)
        invariant_failed("heads: head_output_shape before head_plan");
    if (h->opt.type == HEAD_SIAMESE_CONCAT_VIEW)
        return eng_shape2(h->in_shape.dim[0] / h->opt.num_towers, h->in_shape.dim[1] * h->opt.num_towers);
    return h->layers[h->outputs[0]].out.shape;
}

/* ---- forward / backward ---------------------------------------------------------------------- */

static const eng_tensor *val(const head *h, int i) { return &h->params.entries[i].value; }
static const eng_tensor *grd(const head *h, int i) { return &h->params.entries[i].grad; }

/* The layer's input, seen with its planned shape. */
static eng_tensor layer_input(const head *h, const layer *L)
{
    const eng_tensor *src = L->src < 0 ? &h->last_x : &h->layers[L->src].out;
    return eng_reshape(src, L->in_shape);
}

/* Each dropout layer of each step gets its own mask. */
static uint64_t dropout_id(const head *h, const layer *L)
{
    return h->step * MAX_LAYERS + (uint64_t)(L - h->layers);
}

static void layer_forward(eng_backend *be, head *h, layer *L, bool train)
{
    eng_tensor x = layer_input(h, L);
    switch (L->op) {
    case OP_LINEAR: eng_linear_forward(be, &x, val(h, L->w), L->b >= 0 ? val(h, L->b) : NULL, &L->out); break;
    case OP_BN:
        if (train)
            eng_batchnorm_forward_train(be, h->opt.bn_momentum, h->opt.bn_eps, &x, val(h, L->w), val(h, L->b),
                                        val(h, L->rm), val(h, L->rv), &L->mean, &L->invstd, &L->out,
                                        h->bn_across);
        else
            eng_batchnorm_forward_eval(be, h->opt.bn_eps, &x, val(h, L->w), val(h, L->b), val(h, L->rm),
                                       val(h, L->rv), &L->out);
        break;
    case OP_RELU: eng_relu_forward(be, &x, &L->out); break;
    /* p = 0 copies: eval-mode Dropout is the identity. */
    case OP_DROPOUT: eng_dropout_forward(be, train ? HEAD_DROPOUT_P : 0.0f, dropout_id(h, L), &x, &L->out); break;
    case OP_L2NORM: eng_l2norm_forward(be, &x, &L->out); break;
    }
}

const eng_tensor *head_forward(eng_backend *be, head *h, const eng_tensor *x, bool train)
{
    if (!h->planned || !eng_shape_equal(&x->shape, &h->in_shape))
        invariant_failed("heads: forward on a shape that head_plan did not plan");
    if (train)
        h->step++;
    h->last_x = eng_reshape(x, h->x_shape);
    h->last_train = train;
    if (h->opt.type == HEAD_SIAMESE_CONCAT_VIEW) {
        /* view(N, T·C): rows of one image are consecutive, so this is only a reshape. */
        h->siamese_out = eng_reshape(x, head_output_shape(h));
        return &h->siamese_out;
    }
    for (int i = 0; i < h->nlayers; i++)
        layer_forward(be, h, &h->layers[i], train);
    return head_output(h, 0);
}

const eng_tensor *head_output(const head *h, int i)
{
    if (i < 0 || i >= h->noutputs)
        invariant_failed("heads: no output %d (the head has %d)", i, h->noutputs);
    if (h->opt.type == HEAD_SIAMESE_CONCAT_VIEW)
        return &h->siamese_out;
    return &h->layers[h->outputs[i]].out;
}

/* dx: the gradient of the layer's input (NULL: not needed). */
static void layer_backward(eng_backend *be, head *h, layer *L, const eng_tensor *dx)
{
    eng_tensor x = layer_input(h, L);
    const eng_tensor *dy = &L->out_grad;
    switch (L->op) {
    case OP_LINEAR:
        eng_linear_backward(be, &x, val(h, L->w), dy, dx, grd(h, L->w), L->b >= 0 ? grd(h, L->b) : NULL);
        break;
    case OP_BN:
        eng_batchnorm_backward(be, &x, val(h, L->w), &L->mean, &L->invstd, dy, dx, grd(h, L->w), grd(h, L->b),
                               h->bn_across);
        break;
    case OP_RELU:
        if (dx)
            eng_relu_backward(be, &L->out, dy, dx);
        break;
    case OP_DROPOUT:
        if (dx)
            eng_dropout_backward(be, HEAD_DROPOUT_P, dropout_id(h, L), dy, dx);
        break;
    case OP_L2NORM:
        if (dx)
            eng_l2norm_backward(be, &x, dy, dx);
        break;
    }
}

void head_backward(eng_backend *be, head *h, const eng_tensor *const *dout, const eng_tensor *dx)
{
    if (!h->planned || !h->last_train)
        invariant_failed("heads: backward needs a training-mode forward first");
    if (h->opt.type == HEAD_SIAMESE_CONCAT_VIEW) {
        if (dout && dout[0] && dx) {
            eng_tensor d = eng_reshape(dout[0], h->in_shape);
            eng_add_backward(be, &d, dx, NULL);
        }
        return;
    }
    for (int i = 0; i < h->nlayers; i++)
        eng_zero(be, &h->layers[i].out_grad);
    for (int i = 0; dout && i < h->noutputs; i++)
        if (dout[i])
            eng_add_backward(be, dout[i], &h->layers[h->outputs[i]].out_grad, NULL);
    eng_tensor dx4 = {0};
    if (dx)
        dx4 = eng_reshape(dx, h->x_shape);
    for (int i = h->nlayers - 1; i >= 0; i--) {
        layer *L = &h->layers[i];
        eng_tensor d = {0};
        const eng_tensor *pd = NULL;
        if (L->src >= 0) {
            d = eng_reshape(&h->layers[L->src].out_grad, L->in_shape);
            pd = &d;
        } else if (dx) {
            d = eng_reshape(&dx4, L->in_shape);
            pd = &d;
        }
        layer_backward(be, h, L, pd);
    }
}

/* ---- sequential lists ------------------------------------------------------------------------ */

int head_list_new(eng_backend *be, head_list *l, const head_options *opts, int n, uint64_t seed, char **err)
{
    *l = (head_list){0};
    if (n < 1)
        return report_failure(err, "heads: a head list needs at least one head");
    l->heads = xcalloc((size_t)n, sizeof *l->heads);
    for (int i = 0; i < n; i++) {
        l->heads[i] = head_new(be, &opts[i], seed + (uint64_t)i, err);
        if (!l->heads[i]) {
            l->n = i;
            head_list_free(be, l);
            return -1;
        }
    }
    l->n = n;
    return 0;
}

static void list_unplan(eng_backend *be, head_list *l)
{
    if (!l->grads)
        return;
    for (int i = 0; i + 1 < l->n; i++) /* those a failed plan did not reach have no base */
        eng_tensor_free(be, &l->grads[i]);
    free(l->grads);
    l->grads = NULL;
    l->planned = false;
}

void head_list_free(eng_backend *be, head_list *l)
{
    list_unplan(be, l);
    for (int i = 0; i < l->n; i++)
        head_free(be, l->heads[i]);
    free(l->heads);
    *l = (head_list){0};
}

int head_list_plan(eng_backend *be, head_list *l, const eng_shape *in, int *failed, char **err)
{
    if (l->planned && eng_shape_equal(&l->heads[0]->in_shape, in))
        return 0;
    list_unplan(be, l);
    l->grads = xcalloc((size_t)l->n, sizeof *l->grads);
    eng_shape s = *in;
    for (int i = 0; i < l->n; i++) {
        if (head_plan(be, l->heads[i], &s, err) != 0) {
            *failed = i;
            list_unplan(be, l);
            return -1;
        }
        s = head_output_shape(l->heads[i]);
        if (i + 1 < l->n)
            l->grads[i] = eng_tensor_new(be, s);
    }
    l->planned = true;
    return 0;
}

const eng_tensor *head_list_forward(eng_backend *be, head_list *l, const eng_tensor *x, bool train)
{
    const eng_tensor *y = x;
    for (int i = 0; i < l->n; i++)
        y = head_forward(be, l->heads[i], y, train);
    return y;
}

int head_list_output_count(const head_list *l) { return head_output_count(l->heads[l->n - 1]); }
const eng_tensor *head_list_output(const head_list *l, int i) { return head_output(l->heads[l->n - 1], i); }

void head_list_backward(eng_backend *be, head_list *l, const eng_tensor *const *dout, const eng_tensor *dx)
{
    if (!l->planned)
        invariant_failed("heads: head_list_backward before head_list_plan");
    for (int i = 0; i + 1 < l->n; i++)
        eng_zero(be, &l->grads[i]);
    for (int i = l->n - 1; i >= 0; i--) {
        const eng_tensor *link = i + 1 < l->n ? &l->grads[i] : NULL;
        const eng_tensor *const *d = link ? &link : dout;
        head_backward(be, l->heads[i], d, i ? &l->grads[i - 1] : dx);
    }
}

void head_list_set_batchnorm_reducer(head_list *l, const eng_reducer *across)
{
    for (int i = 0; i < l->n; i++)
        head_set_batchnorm_reducer(l->heads[i], across);
}

void head_list_zero_grad(eng_backend *be, head_list *l)
{
    for (int i = 0; i < l->n; i++)
        head_zero_grad(be, l->heads[i]);
}

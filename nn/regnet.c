/*
 * regnet.c — VISSL's RegNet trunk (ClassyVision's AnyNet) on the model engine (see regnet.h).
 *
 * How it works, as resnet.c: a stem unit (plus a max pool for res_stem_in), a flat array of
 * blocks, then an adaptive average pool whose N × C × 1 × 1 output is also the flatten feature;
 * forward and backward are explicit loops over the array. A block is up to three conv units
 * (unit.h) in ClassyVision's order a, b, c, an optional squeeze-excitation between b and c, an
 * optional projection unit, and how the two paths meet:
 *   - res_bottleneck_block, res_basic_block: y = act(f(x) + shortcut), the shortcut the
 *     projection where the shape changes, x otherwise;
 *   - res_bottleneck_linear_block: y = f(x) + x where the shape is kept, else y = f(x);
 *   - vanilla_block: y = f(x) (its last unit's activation is the block's).
 * A block whose output is its last unit's (no add) does not copy it: `out` points at the unit's.
 *
 * Squeeze-excitation, as ClassyVision's SqueezeAndExcitationLayer: pool to 1 × 1, a 1×1 conv
 * with bias (run as the linear layer it is on a 1 × 1 map, weight O × I × 1 × 1 read as O × I),
 * the block's activation, a second 1×1 conv, a sigmoid, and the channels of b's output scaled by
 * the result.
 *
 * Memory is planned as in resnet.c: activations once, gradients in arenas (unit.h). Layouts are
 * too: evaluation keeps the backend's native layout from convolution to convolution, save where
 * a layer that takes only logical tensors reads (set_layouts).
 */
#include "regnet.h"
#include "test_hooks.h"

#include "log.h"
#include "rng.h"
#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PREFIX "_feature_blocks."

typedef struct {
    conv_unit u[3];
    int nu;
    bool has_se;
    se_unit se;           /* between u[1] and u[2] */
    bool has_proj, add;    /* a projection unit; an add of a shortcut */
    conv_unit proj;
    unit_act act;          /* after the add */
    eng_tensor sum, sum_grad; /* the add's output before a SiLU */
    eng_tensor own, own_grad; /* the block's output when it adds */
    eng_tensor *out, *out_grad;
} block;

struct regnet {
    regnet_options opt;
    regnet_stages stages;
    eng_params params;
    conv_unit stem;
    bool stem_pool;
    eng_pool_desc pool;
    block *blocks;
    int nblocks;
    int stage_end[REGNET_MAX_STAGES]; /* each stage's last block */
    int64_t out_dim;
    bool planned, last_train;
    eng_shape in_shape;
    act_plan acts;
    eng_tensor pool_out, pool_grad, avg, flat;
    eng_tensor last_x;
    bool want_dx;     /* regnet_set_input_grad */
    eng_tensor dx;    /* the input's gradient, when wanted */
    unsigned exposed; /* features (bit per number) the caller reads: kept logical */
    bool recomputing; /* activation checkpointing's second forward of a segment */
    const eng_reducer *bn_across;
};

/* ---- options and the width arithmetic ---------------------------------------------------------- */

regnet_options regnet_defaults(void)
{
    return (regnet_options){.bottleneck_multiplier = 1.0, .stem_type = REGNET_STEM_SIMPLE_IN, .stem_width = 32,
                            .block_type = REGNET_RES_BOTTLENECK_BLOCK, .activation = UNIT_ACT_RELU,
                            .use_se = true, .se_ratio = 0.25, .bn_epsilon = 1e-5, .bn_momentum = 0.1};
}

/* classy_vision/models/regnet.py's registered models. */
static const struct preset {
    const char *name;
    int depth, w_0;
    double w_a, w_m;
    int group_width;
    bool se;
    bool z; /* RegNetZ: bottleneck 4, linear blocks, SiLU */
} PRESETS[] = {
    {"regnet_y_400mf", 16, 48, 27.89, 2.09, 8, true, false},
    {"regnet_y_800mf", 14, 56, 38.84, 2.4, 16, true, false},
    {"regnet_y_1.6gf", 27, 48, 20.71, 2.65, 24, true, false},
    {"regnet_y_3.2gf", 21, 80, 42.63, 2.66, 24, true, false},
    {"regnet_y_8gf", 17, 192, 76.82, 2.19, 56, true, false},
    {"regnet_y_16gf", 18, 200, 106.23, 2.48, 112, true, false},
    {"regnet_y_32gf", 20, 232, 115.89, 2.53, 232, true, false},
    {"regnet_y_64gf", 20, 368, 102.79, 2.05, 496, true, false},
    {"regnet_y_128gf", 27, 456, 160.83, 2.52, 264, true, false},
    {"regnet_y_256gf", 27, 640, 124.47, 2.04, 848, true, false},
    {"regnet_x_400mf", 22, 24, 24.48, 2.54, 16, false, false},
    {"regnet_x_800mf", 16, 56, 35.73, 2.28, 16, false, false},
    {"regnet_x_1.6gf", 18, 80, 34.01, 2.25, 24, false, false},
    {"regnet_x_3.2gf", 25, 88, 26.31, 2.25, 48, false, false},
    {"regnet_x_8gf", 23, 80, 49.56, 2.88, 120, false, false},
    {"regnet_x_16gf", 22, 216, 55.59, 2.1, 128, false, false},
    {"regnet_x_32gf", 23, 320, 69.86, 2.0, 168, false, false},
    {"regnet_z_500mf", 21, 16, 10.7, 2.51, 4, true, true},
    {"regnet_z_4gf", 28, 48, 14.5, 2.226, 8, true, true},
};

int regnet_preset(const char *name, regnet_options *o)
{
    for (size_t i = 0; i < ARRAY_LEN(PRESETS); i++) {
        const struct preset *p = &PRESETS[i];
        if (strcmp(p->name, name) != 0)
            continue;
        o->depth = p->depth, o->w_0 = p->w_0, o->w_a = p->w_a, o->w_m = p->w_m, o->group_width = p->group_width;
        o->use_se = p->se;
        if (p->z) {
            o->bottleneck_multiplier = 4.0;
            o->block_type = REGNET_RES_BOTTLENECK_LINEAR_BLOCK;
            o->activation = UNIT_ACT_SILU;
        }
        return 0;
    }
    return -1;
}

const char *const *regnet_preset_names(void)
{
    static const char *names[ARRAY_LEN(PRESETS) + 1];
    for (size_t i = 0; i < ARRAY_LEN(PRESETS); i++)
        names[i] = PRESETS[i].name;
    return names;
}

/* The index of `name` in `names`, compared without case (ClassyVision looks up name.upper()). */
static int lookup(const char *name, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(name, names[i]) == 0)
            return i;
    return -1;
}

int regnet_stem_by_name(const char *name)
{
    static const char *const N[] = {"res_stem_cifar", "res_stem_in", "simple_stem_in"};
    return lookup(name, N, 3);
}

int regnet_block_by_name(const char *name)
{
    static const char *const N[] = {"vanilla_block", "res_basic_block", "res_bottleneck_block",
                                    "res_bottleneck_linear_block"};
    return lookup(name, N, 4);
}

int regnet_activation_by_name(const char *name)
{
    static const char *const N[] = {"relu", "silu"};
    int i = lookup(name, N, 2);
    return i < 0 ? -1 : i == 0 ? UNIT_ACT_RELU : UNIT_ACT_SILU;
}

/* numpy's np.round and Python's round on a float: half to even (the default rounding mode). */
static double round_even(double x) { return nearbyint(x); }

/* RegNetParams.get_expanded_params, step one: the quantised width of every block. */
static void block_widths(const regnet_options *o, int64_t *w)
{
    for (int j = 0; j < o->depth; j++) {
        double cont = (double)j * o->w_a + (double)o->w_0;
        double capacity = round_even(log(cont / (double)o->w_0) / log(o->w_m));
        w[j] = (int64_t)(round_even((double)o->w_0 * pow(o->w_m, capacity) / 8.0) * 8.0);
    }
}

/* _adjust_widths_groups_compatibilty for one stage. */
static void adjust_stage(regnet_stages *st, int s)
{
    double b = st->bottleneck[s];
    int64_t w_bot = (int64_t)((double)st->width[s] * b);
    int64_t g = st->group_width[s] < w_bot ? st->group_width[s] : w_bot;
    int64_t ws_bot = (int64_t)round_even((double)w_bot / (double)g) * g;
    st->width[s] = (int64_t)((double)ws_bot / b);
    st->group_width[s] = g;
}

int regnet_expand(const regnet_options *o, regnet_stages *st, char **err)
{
    if (o->depth < 1 || o->w_0 <= 0 || o->w_0 % 8 || o->w_a < 0 || !(o->w_m > 1) || o->group_width < 1 ||
        !(o->bottleneck_multiplier > 0))
        return report_failure(err, "regnet: invalid RegNet settings (ClassyVision asks w_a >= 0, w_0 > 0 and a "
                                   "multiple of 8, w_m > 1; here depth %d, w_0 %d, w_a %g, w_m %g, group_width %d)",
                              o->depth, o->w_0, o->w_a, o->w_m, o->group_width);
    int64_t *w = xmalloc((size_t)o->depth * sizeof *w);
    block_widths(o, w);
    *st = (regnet_stages){0};
    for (int j = 0; j < o->depth; j++) {
        if (j > 0 && w[j] == w[j - 1]) {
            st->depth[st->n - 1]++;
            continue;
        }
        if (st->n == REGNET_MAX_STAGES) {
            free(w);
            return report_failure(err, "regnet: these settings make more than %d stages", REGNET_MAX_STAGES);
        }
        st->width[st->n] = w[j], st->depth[st->n] = 1, st->group_width[st->n] = o->group_width;
        st->bottleneck[st->n++] = o->bottleneck_multiplier;
    }
    free(w);
    for (int s = 0; s < st->n; s++)
        adjust_stage(st, s);
    return 0;
}

int regnet_feature_count(const regnet_stages *st) { return st->n + 3; }

const char *regnet_feature_name(const regnet_stages *st, int f, char *buf, size_t len)
{
    if (f == 0)
        snprintf(buf, len, "conv1");
    else if (f <= st->n)
        snprintf(buf, len, "res%d", f + 1);
    else
        snprintf(buf, len, "%s", f == st->n + 1 ? "avgpool" : "flatten");
    return buf;
}

int regnet_feature_by_name(const regnet_stages *st, const char *name)
{
    char buf[16];
    for (int f = 0; f < regnet_feature_count(st); f++)
        if (strcmp(regnet_feature_name(st, f, buf, sizeof buf), name) == 0)
            return f;
    return -1;
}

/* ---- construction: named entries in state-dict order ------------------------------------------ */

static void unit(eng_backend *be, regnet *net, conv_unit *u, const char *prefix, const char *conv, const char *norm,
                 int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups, bool act)
{
    char c[128], n[128];
    snprintf(c, sizeof c, "%s%s", prefix, conv);
    snprintf(n, sizeof n, "%s%s", prefix, norm);
    unit_norm nm = {.eps = net->opt.bn_epsilon, .momentum = net->opt.bn_momentum};
    conv_unit_make(be, &net->params, u, c, n, in, out, k, stride, groups, act ? net->opt.activation : UNIT_ACT_NONE,
                   nm);
}

static void se_make(eng_backend *be, regnet *net, se_unit *se, const char *prefix, int64_t channels,
                    int64_t reduced)
{
    char reduce[128], expand[128];
    snprintf(reduce, sizeof reduce, "%sf.se.excitation.0", prefix);
    snprintf(expand, sizeof expand, "%sf.se.excitation.2", prefix);
    se_unit_make(be, &net->params, se, reduce, expand, channels, reduced, net->opt.activation);
}

/* BottleneckTransform: f.a (1×1), f.b (grouped 3×3), [f.se], f.c (1×1) with f.final_bn. */
static int bottleneck_make(eng_backend *be, regnet *net, block *b, const char *prefix, int64_t in, int64_t out,
                           int64_t stride, int64_t group_width, double mult, char **err)
{
    int64_t w_b = (int64_t)round_even((double)out * mult), groups = w_b / group_width;
    if (groups < 1 || w_b % groups)
        return report_failure(err, "regnet: a bottleneck of %lld channels cannot be split into groups of %lld",
                              (long long)w_b, (long long)group_width);
    b->nu = 3;
    unit(be, net, &b->u[0], prefix, "f.a.0", "f.a.1", in, w_b, 1, 1, 1, true);
    unit(be, net, &b->u[1], prefix, "f.b.0", "f.b.1", w_b, w_b, 3, stride, groups, true);
    b->has_se = net->opt.use_se && net->opt.se_ratio > 0;
    if (b->has_se)
        se_make(be, net, &b->se, prefix, w_b, (int64_t)round_even(net->opt.se_ratio * (double)in));
    unit(be, net, &b->u[2], prefix, "f.c", "f.final_bn", w_b, out, 1, 1, 1, false);
    return 0;
}

/* One block of stage s (0-based), number j in it. */
static int block_make(eng_backend *be, regnet *net, block *b, int s, int j, int64_t in, char **err)
{
    const regnet_stages *st = &net->stages;
    int64_t out = st->width[s], stride = j == 0 ? 2 : 1;
    char prefix[96];
    snprintf(prefix, sizeof prefix, PREFIX "res%d.block%d-%d.", s + 2, s + 1, j);
    regnet_block type = net->opt.block_type;
    bool residual = type == REGNET_RES_BASIC_BLOCK || type == REGNET_RES_BOTTLENECK_BLOCK;
    bool reshape = in != out || stride != 1;
    b->has_proj = residual && reshape;
    b->add = residual || (type == REGNET_RES_BOTTLENECK_LINEAR_BLOCK && !reshape);
    b->act = residual ? net->opt.activation : UNIT_ACT_NONE;
    if (b->has_proj)
        unit(be, net, &b->proj, prefix, "proj", "bn", in, out, 1, stride, 1, false);
    if (type == REGNET_VANILLA_BLOCK || type == REGNET_RES_BASIC_BLOCK) {
        bool vanilla = type == REGNET_VANILLA_BLOCK;
        b->nu = 2;
        unit(be, net, &b->u[0], prefix, vanilla ? "a.0" : "f.a.0", vanilla ? "a.1" : "f.a.1", in, out, 3, stride, 1,
             true);
        unit(be, net, &b->u[1], prefix, vanilla ? "b.0" : "f.a.3", vanilla ? "b.1" : "f.final_bn", out, out, 3, 1, 1,
             vanilla);
        return 0;
    }
    return bottleneck_make(be, net, b, prefix, in, out, stride, st->group_width[s], st->bottleneck[s], err);
}

static void stem_make(eng_backend *be, regnet *net)
{
    const regnet_options *o = &net->opt;
    int64_t k = o->stem_type == REGNET_STEM_RES_IN ? 7 : 3, stride = o->stem_type == REGNET_STEM_RES_CIFAR ? 1 : 2;
    unit(be, net, &net->stem, PREFIX "conv1.", "stem.0", "stem.1", 3, o->stem_width, k, stride, 1, true);
    net->stem_pool = o->stem_type == REGNET_STEM_RES_IN;
    net->pool = (eng_pool_desc){.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}};
}

static int build(eng_backend *be, regnet *net, char **err)
{
    stem_make(be, net);
    for (int s = 0; s < net->stages.n; s++)
        net->nblocks += (int)net->stages.depth[s];
    net->blocks = xcalloc((size_t)net->nblocks, sizeof *net->blocks);
    int64_t in = net->opt.stem_width;
    for (int s = 0, k = 0; s < net->stages.n; s++) {
        for (int j = 0; j < net->stages.depth[s]; j++, k++) {
            if (block_make(be, net, &net->blocks[k], s, j, in, err) != 0)
                return -1;
            in = net->stages.width[s];
        }
        net->stage_end[s] = k - 1;
    }
    net->out_dim = in;
    return 0;
}

regnet *regnet_new(eng_backend *be, const regnet_options *o, uint64_t seed, char **err)
{
    regnet *net = xcalloc(1, sizeof *net);
    net->opt = *o;
    if (o->stem_width < 1 || o->checkpoint_splits < 0 || (int)o->stem_type < 0 || o->stem_type > REGNET_STEM_SIMPLE_IN ||
        (int)o->block_type < 0 || o->block_type > REGNET_RES_BOTTLENECK_LINEAR_BLOCK) {
        report_failure(err, "regnet: stem_width must be ≥ 1, and the stem and block types ClassyVision's");
        free(net);
        return NULL;
    }
    if (regnet_expand(o, &net->stages, err) != 0 || build(be, net, err) != 0) {
        regnet_free(be, net);
        return NULL;
    }
    eng_params_alloc(be, &net->params);
    regnet_init(be, net, seed);
    eng_params_zero_grad(be, &net->params);
    return net;
}

static void unplan(eng_backend *be, regnet *net);

void regnet_free(eng_backend *be, regnet *net)
{
    if (!net)
        return;
    unplan(be, net);
    eng_params_free(be, &net->params);
    free(net->blocks);
    free(net);
}

eng_params *regnet_param_table(regnet *net) { return &net->params; }
const regnet_options *regnet_get_options(const regnet *net) { return &net->opt; }
const regnet_stages *regnet_get_stages(const regnet *net) { return &net->stages; }
int64_t regnet_out_dim(const regnet *net) { return net->out_dim; }
void regnet_set_batchnorm_reducer(regnet *net, const eng_reducer *across) { net->bn_across = across; }
void regnet_init_formula(eng_backend *be, regnet *net) { eng_params_init_formula(be, &net->params); }

/* ---- initialisation ------------------------------------------------------------------------- */

/* One entry's values under ClassyVision's init_weights (PyTorch's default for what it skips). */
static void init_values(const eng_entry *e, rng_stream *r, float *h)
{
    const eng_shape *s = &e->value.shape;
    int64_t n = eng_numel(s);
    bool se_bias = s->ndim == 1 && strstr(e->name, ".se.excitation.") != NULL;
    double std = s->ndim == 4 ? sqrt(2.0 / (double)(s->dim[0] * s->dim[2] * s->dim[3])) : 0.0;
    double bound = se_bias ? 1.0 / sqrt((double)e[-1].value.shape.dim[1]) : 0.0; /* the conv before it: fan_in */
    float fill = e->kind == ENG_BUFFER ? (eng_name_ends_with(e->name, "running_var") ? 1.0f : 0.0f)
                                       : (eng_name_ends_with(e->name, ".weight") ? 1.0f : 0.0f);
    for (int64_t j = 0; j < n; j++)
        h[j] = s->ndim == 4 ? (float)rng_normal(r, 0.0, std)
               : se_bias    ? (float)rng_uniform_range(r, -bound, bound)
                            : fill;
}

void regnet_init(eng_backend *be, regnet *net, uint64_t seed)
{
    eng_params_init_with(be, &net->params, seed, init_values);
}

/* ---- planning ------------------------------------------------------------------------------- */

static void act(eng_backend *be, regnet *net, eng_tensor *t, eng_shape s, bool is_grad)
{
    act_plan_add(be, &net->acts, t, s, is_grad);
}

/* With activation checkpointing a block's activations go to the segment arena, but for the
 * output of its segment's last block (the last unit's whole, where that is the output), which
 * the next segment's recompute starts from. */
static eng_shape block_plan(eng_backend *be, regnet *net, block *b, int index, const eng_shape *x)
{
    int splits = net->opt.checkpoint_splits;
    bool ends = splits && act_segment_ends(index, net->nblocks, splits);
    act_plan_enter_arena(&net->acts, index % 2);
    if (splits && act_segment_starts(index, net->nblocks, splits))
        act_plan_segment_begin(&net->acts);
    eng_shape s = *x;
    for (int i = 0; i < b->nu; i++) {
        if (ends && !b->add && i == b->nu - 1)
            act_plan_segment_end(&net->acts);
        s = conv_unit_plan(be, &net->acts, &net->params, &b->u[i], &s);
        if (i == 1 && b->has_se)
            se_unit_plan(be, &net->acts, &net->params, &b->se, &s);
    }
    if (b->has_proj)
        conv_unit_plan(be, &net->acts, &net->params, &b->proj, x);
    b->out = &b->u[b->nu - 1].out, b->out_grad = &b->u[b->nu - 1].out_grad;
    if (!b->add)
        return s;
    if (b->act == UNIT_ACT_SILU) {
        act(be, net, &b->sum, s, false);
        act(be, net, &b->sum_grad, s, true);
    }
    if (ends)
        act_plan_segment_end(&net->acts);
    act(be, net, &b->own, s, false);
    act(be, net, &b->own_grad, s, true);
    b->out = &b->own, b->out_grad = &b->own_grad;
    return s;
}

static void unplan(eng_backend *be, regnet *net)
{
    if (!net->planned)
        return;
    conv_unit_unplan(be, &net->stem);
    for (int i = 0; i < net->nblocks; i++) {
        for (int j = 0; j < net->blocks[i].nu; j++)
            conv_unit_unplan(be, &net->blocks[i].u[j]);
        if (net->blocks[i].has_proj)
            conv_unit_unplan(be, &net->blocks[i].proj);
    }
    act_plan_release(be, &net->acts);
    net->planned = false;
}

void regnet_plan(eng_backend *be, regnet *net, const eng_shape *input)
{
    if (net->planned && eng_shape_equal(&net->in_shape, input))
        return;
    unplan(be, net);
    if (input->ndim != 4 || input->dim[1] != 3)
        die(EXIT_RUNTIME, "regnet: input must be N × 3 × H × W");
    act_plan_enter_arena(&net->acts, ACT_STEM_ARENA);
    if (net->want_dx)
        act(be, net, &net->dx, *input, true);
    eng_shape s = conv_unit_plan(be, &net->acts, &net->params, &net->stem, input);
    if (net->stem_pool) {
        s = eng_pool_output_shape(&s, &net->pool);
        act(be, net, &net->pool_out, s, false);
        act(be, net, &net->pool_grad, s, true);
    }
    for (int i = 0; i < net->nblocks; i++)
        s = block_plan(be, net, &net->blocks[i], i, &s);
    act(be, net, &net->avg, eng_shape4(s.dim[0], s.dim[1], 1, 1), false);
    act_plan_commit(be, &net->acts);
    net->flat = eng_reshape(&net->avg, eng_shape2(s.dim[0], s.dim[1]));
    net->in_shape = *input;
    net->planned = true;
    net->last_train = false;
}

/* ---- forward ------------------------------------------------------------------------------ */

static void unit_forward(eng_backend *be, regnet *net, conv_unit *u, const eng_tensor *x, bool train)
{
    if (net->recomputing)
        conv_unit_recompute(be, &net->params, u, x, net->bn_across);
    else
        conv_unit_forward(be, &net->params, u, x, train, net->bn_across);
}

/* The block's residual path up to the input of its last unit (b's output, or SE's). */
static const eng_tensor *residual_head(eng_backend *be, regnet *net, block *b, const eng_tensor *x, bool train)
{
    const eng_tensor *h = x;
    for (int i = 0; i < b->nu - 1; i++) {
        unit_forward(be, net, &b->u[i], h, train);
        h = &b->u[i].out;
        if (i == 1 && b->has_se) {
            se_unit_forward(be, &net->params, &b->se, h);
            h = &b->se.out;
        }
    }
    return h;
}

static void block_forward(eng_backend *be, regnet *net, block *b, const eng_tensor *x, bool train)
{
    const eng_tensor *h = residual_head(be, net, b, x, train);
    conv_unit *last = &b->u[b->nu - 1];
    if (!b->add) {
        unit_forward(be, net, last, h, train);
        return;
    }
    const eng_tensor *shortcut = x;
    if (b->has_proj) {
        unit_forward(be, net, &b->proj, x, train);
        shortcut = &b->proj.out;
    }
    if (!train) { /* evaluation: the add and the activation join the last conv */
        conv_unit_forward_eval_fused(be, &net->params, last, h, shortcut, unit_eval_act(b->act), &b->own);
        return;
    }
    unit_forward(be, net, last, h, train);
    if (b->act == UNIT_ACT_RELU) {
        eng_add_relu_forward(be, &last->out, shortcut, &b->own);
    } else if (b->act == UNIT_ACT_SILU) {
        eng_add_forward(be, &last->out, shortcut, &b->sum);
        eng_silu_forward(be, &b->sum, &b->own);
    } else {
        eng_add_forward(be, &last->out, shortcut, &b->own);
    }
}

static const eng_tensor *stem_out(const regnet *net) { return net->stem_pool ? &net->pool_out : &net->stem.out; }
static eng_tensor *stem_grad(regnet *net) { return net->stem_pool ? &net->pool_grad : &net->stem.out_grad; }

void regnet_expose(regnet *net, int f)
{
    if (f < 0 || f >= regnet_feature_count(&net->stages))
        die(EXIT_RUNTIME, "regnet: no feature number %d", f);
    net->exposed |= 1u << f;
}

static void set_block_layouts(block *b, eng_layout inner)
{
    for (int j = 0; j < b->nu; j++)
        b->u[j].out.layout = inner;
    /* A grouped convolution whose groups are narrower than the backend's channel block has no
     * fast kernel on blocked activations (oneDNN falls back to its reference one: 50× slower),
     * so it reads and writes logical ones and converts inside. */
    if (b->nu == 3 && b->u[1].desc.groups > 1)
        b->u[0].out.layout = b->u[1].out.layout = ENG_LAYOUT_LOGICAL;
    if (b->has_se)
        b->se.out.layout = b->u[1].out.layout;
    b->proj.out.layout = inner;
    b->own.layout = inner;
}

/* The activations' layouts for this forward, as resnet.c's: evaluation keeps the backend's
 * native layout from convolution to convolution (eng_conv_bn_forward_eval with its ReLU or SiLU,
 * squeeze-excitation's pool and product, max pool and the final pool take it), except for an
 * exposed feature; training keeps everything logical for the norms and the backward. */
static void set_layouts(regnet *net, bool train)
{
    eng_layout inner = train ? ENG_LAYOUT_LOGICAL : ENG_LAYOUT_NATIVE;
    net->stem.out.layout = net->pool_out.layout = net->exposed & 1u ? ENG_LAYOUT_LOGICAL : inner;
    for (int i = 0; i < net->nblocks; i++)
        set_block_layouts(&net->blocks[i], inner);
    for (int s = 0; s < net->stages.n; s++)
        if (net->exposed & 1u << (s + 1))
            net->blocks[net->stage_end[s]].out->layout = ENG_LAYOUT_LOGICAL;
}

size_t regnet_activation_bytes(const regnet *net) { return net->planned ? net->acts.bytes : 0; }

const eng_tensor *regnet_forward(eng_backend *be, regnet *net, const eng_tensor *x, bool train)
{
    if (!net->planned || !eng_shape_equal(&x->shape, &net->in_shape))
        die(EXIT_RUNTIME, "regnet: forward on a shape that regnet_plan did not plan");
    set_layouts(net, train);
    conv_unit_forward(be, &net->params, &net->stem, x, train, net->bn_across);
    if (net->stem_pool)
        eng_maxpool_forward(be, &net->pool, &net->stem.out, &net->pool_out);
    const eng_tensor *h = stem_out(net);
    for (int i = 0; i < net->nblocks; i++) {
        block_forward(be, net, &net->blocks[i], h, train);
        h = net->blocks[i].out;
    }
    eng_adaptive_avgpool_forward(be, h, &net->avg);
    net->last_x = *x;
    net->last_train = train;
    return &net->flat;
}

const eng_tensor *regnet_feature(const regnet *net, int f)
{
    int s = net->stages.n;
    if (f == 0)
        return stem_out(net);
    if (f >= 1 && f <= s)
        return net->blocks[net->stage_end[f - 1]].out;
    if (f == s + 1)
        return &net->avg;
    if (f == s + 2)
        return &net->flat;
    die(EXIT_RUNTIME, "regnet: no feature number %d", f);
}

/* ---- backward ----------------------------------------------------------------------------- */

/* Every gradient of the block but its output's, which the block above has filled. */
static void zero_block_grads(eng_backend *be, const block *b)
{
    for (int j = 0; j < b->nu; j++) {
        const conv_unit *u = &b->u[j];
        conv_unit_zero_inner_grads(be, u);
        if (b->out_grad != &u->out_grad) /* the block's output keeps what arrived */
            eng_zero(be, &u->out_grad);
    }
    if (b->has_proj)
        conv_unit_zero_grads(be, &b->proj);
    if (b->has_se)
        se_unit_zero_grads(be, &b->se);
    if (b->add && b->act == UNIT_ACT_SILU)
        eng_zero(be, &b->sum_grad);
}

/* The add's backward: the gradients of the residual path's end and of the shortcut's. */
static void merge_backward(eng_backend *be, block *b, const eng_tensor *dx)
{
    const eng_tensor *da = &b->u[b->nu - 1].out_grad, *db = b->has_proj ? &b->proj.out_grad : dx;
    if (b->act == UNIT_ACT_RELU) {
        eng_add_relu_backward(be, &b->own, &b->own_grad, da, db);
    } else if (b->act == UNIT_ACT_SILU) {
        eng_silu_backward(be, &b->sum, &b->own_grad, &b->sum_grad);
        eng_add_backward(be, &b->sum_grad, da, db);
    } else {
        eng_add_backward(be, &b->own_grad, da, db);
    }
}

static void block_backward(eng_backend *be, regnet *net, block *b, const eng_tensor *x, const eng_tensor *dx)
{
    if (b->add)
        merge_backward(be, b, dx);
    for (int i = b->nu - 1; i >= 0; i--) {
        bool after_se = i == 2 && b->has_se;
        const eng_tensor *in = i == 0 ? x : after_se ? &b->se.out : &b->u[i - 1].out;
        const eng_tensor *din = i == 0 ? dx : after_se ? &b->se.out_grad : &b->u[i - 1].out_grad;
        conv_unit_backward(be, &net->params, &b->u[i], in, din, net->bn_across);
        if (after_se)
            se_unit_backward(be, &net->params, &b->se, &b->u[1].out, &b->u[1].out_grad);
    }
    if (b->has_proj)
        conv_unit_backward(be, &net->params, &b->proj, x, dx, net->bn_across);
}

/* Activation checkpointing: blocks first..last's activations again, from first's input. */
static void recompute_segment(eng_backend *be, regnet *net, int first, int last)
{
    net->recomputing = true;
    for (int j = first; j <= last; j++)
        block_forward(be, net, &net->blocks[j], j ? net->blocks[j - 1].out : stem_out(net), true);
    net->recomputing = false;
}

/* The block's first entry in state-dict order (ClassyVision: the projection, when there is
 * one, before the transform). */
static int block_first_entry(const block *b) { return b->has_proj && b->proj.w < b->u[0].w ? b->proj.w : b->u[0].w; }

void regnet_backward(eng_backend *be, regnet *net, const eng_tensor *dfeat) { regnet_backward_watched(be, net, dfeat, NULL); }

void regnet_backward_watched(eng_backend *be, regnet *net, const eng_tensor *dfeat, const eng_grads_ready *ready)
{
    if (!net->planned || !net->last_train)
        die(EXIT_RUNTIME, "regnet: backward needs a training-mode forward first");
    conv_unit_zero_grads(be, &net->stem);
    if (net->stem_pool)
        eng_zero(be, &net->pool_grad);
    block *last = &net->blocks[net->nblocks - 1];
    eng_zero(be, last->out_grad);
    eng_tensor d4 = eng_reshape(dfeat, net->avg.shape);
    eng_adaptive_avgpool_backward(be, &d4, last->out_grad);
    for (int i = net->nblocks - 1; i >= 0; i--) {
        const eng_tensor *x = i ? net->blocks[i - 1].out : stem_out(net);
        const eng_tensor *dx = i ? net->blocks[i - 1].out_grad : stem_grad(net);
        int first = act_segment_to_recompute(i, net->nblocks, net->opt.checkpoint_splits);
        if (first >= 0)
            recompute_segment(be, net, first, i);
        zero_block_grads(be, &net->blocks[i]);
        if (i)
            eng_zero(be, dx);
        block_backward(be, net, &net->blocks[i], x, dx);
        eng_grads_tell(ready, block_first_entry(&net->blocks[i]));
    }
    if (net->stem_pool)
        eng_maxpool_backward(be, &net->pool, &net->stem.out, &net->pool_grad, &net->stem.out_grad);
    if (net->want_dx)
        eng_zero(be, &net->dx);
    conv_unit_backward(be, &net->params, &net->stem, &net->last_x, net->want_dx ? &net->dx : NULL, net->bn_across);
    eng_grads_tell(ready, 0);
}

const eng_tensor *regnet_input_grad(const regnet *net) { return net->want_dx && net->planned ? &net->dx : NULL; }

void regnet_set_input_grad(eng_backend *be, regnet *net, bool on)
{
    if (on != net->want_dx)
        unplan(be, net);
    net->want_dx = on;
}

/*
 * test_efficientnet.c — the EfficientNet trunk (nn/efficientnet.c) against ClassyVision's
 * EfficientNet as VISSL wraps it, re-stated in PyTorch by tests/golden/make_efficientnet_fixtures.py
 * (whose docstring documents every fixture and the closed formula that sets weights and inputs on
 * both sides).
 *
 * What is checked:
 *   - the width and depth arithmetic (scale_width, scale_depth): for MODEL_PARAMS B0 … B7 and a
 *     few custom parameter sets, the stem and head widths, every stage's input and output widths
 *     and repeats, and the block count are ClassyVision's, and efficientnet_preset gives
 *     MODEL_PARAMS' coefficients, resolution and dropout; options ClassyVision refuses are refused;
 *   - names, order and shapes of the state dict (VISSL's `_feature_blocks.…` names) and the
 *     parameter counts of the cases tiny, odd and b0, and the counts of B1, B2 and two custom sets;
 *   - VISSL's feature names (conv1, block0 … block{B−1}, conv_final, avgpool, flatten, dropout)
 *     both ways;
 *   - forward (eval and train), every feature's per-channel means, the BN running statistics,
 *     and the backward's gradients of tiny (SE, 32 px: asymmetric same padding) and odd (no SE,
 *     35 px: a symmetric/asymmetric mix) against a float64 reference, per parameter within
 *     FLOOR_FACTOR × max(GRAD_TOL, torch float32's own error) as test_resnet.c measures them, and
 *     the stem weight's whole gradient and the input's (relative GRAD_TOL); B0's eval features at
 *     224 px, and its input gradient in training at 64 px (drop-connect and dropout off);
 *   - gradients accumulate and a second step allocates nothing;
 *   - drop-connect and dropout in training: a block with a skip keeps each sample's branch with
 *     probability 1 − rate·i/B (binomial bound over 4096 samples per block, block i) and scales a
 *     kept one by 1/keep (against the same net without drop-connect); dropout keeps elements with
 *     probability 1 − p and scales them by 1/(1 − p); the masks change with the step and the view
 *     (efficientnet_set_step) and come back with them; eval mode ignores both;
 *   - a VISSL checkpoint written by PyTorch loads through WEIGHTS_INIT's rules and gives its
 *     features;
 *   - the complexity rows (FLOPs, parameters, activations per module call) follow ClassyVision's
 *     profiler on the same networks;
 *   - a config with MODEL.TRUNK.NAME efficientnet and EFFICIENT_NETS.model_version B0 builds the
 *     model, with VISSL's names, and gives B0's features.
 * EFFICIENTNET_VERBOSE=1 prints every measured error (=2 also each parameter's).
 */
#include "backend.h"
#include "complexity.h"
#include "efficientnet.h"
#include "nn.h"
#include "params.h"
#include "util.h"
#include "weights.h"

#include "test_nn_util.h"
#include "test_trunk_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRUNK "efficientnet" /* the fixtures' prefix (test_trunk_util.h) */
#define BINOMIAL_SIGMAS 5.0 /* a kept fraction this many standard deviations off fails (p ≈ 6e-7) */

/* ---- fixtures ------------------------------------------------------------------------------- */

/* One key=value of efficientnet_cases.txt / efficientnet_presets.txt into options. */
static void parse_option(efficientnet_options *o, const char *k, const char *v)
{
    if (!strcmp(k, "width_coefficient")) o->width_coefficient = atof(v);
    else if (!strcmp(k, "depth_coefficient")) o->depth_coefficient = atof(v);
    else if (!strcmp(k, "resolution")) o->resolution = atoi(v);
    else if (!strcmp(k, "dropout_rate")) o->dropout_rate = atof(v);
    else if (!strcmp(k, "bn_momentum")) o->bn_momentum = atof(v);
    else if (!strcmp(k, "bn_epsilon")) o->bn_epsilon = atof(v);
    else if (!strcmp(k, "width_divisor")) o->width_divisor = atoi(v);
    else if (!strcmp(k, "min_width")) o->min_width = atoi(v);
    else if (!strcmp(k, "drop_connect_rate")) o->drop_connect_rate = atof(v);
    else if (!strcmp(k, "use_se")) o->use_se = !strcmp(v, "True");
}

/* A line of a fixture list: its options and the other key=value pairs. */
typedef struct {
    efficientnet_options opt;
    int n, size, blocks, stem, head;
    int64_t params;
    char inputs[128], outputs[128], repeats[128];
} effnet_line;

/* One key=value of a line: an option, or one of the line's other values. */
static void set_pair(void *into, const char *k, const char *v)
{
    effnet_line *c = into;
    parse_option(&c->opt, k, v);
    if (!strcmp(k, "n")) c->n = atoi(v);
    else if (!strcmp(k, "size")) c->size = atoi(v);
    else if (!strcmp(k, "blocks")) c->blocks = atoi(v);
    else if (!strcmp(k, "stem")) c->stem = atoi(v);
    else if (!strcmp(k, "head")) c->head = atoi(v);
    else if (!strcmp(k, "params")) c->params = atoll(v);
    else if (!strcmp(k, "inputs")) snprintf(c->inputs, sizeof c->inputs, "%s", v);
    else if (!strcmp(k, "outputs")) snprintf(c->outputs, sizeof c->outputs, "%s", v);
    else if (!strcmp(k, "repeats")) snprintf(c->repeats, sizeof c->repeats, "%s", v);
}

/* The line of `file` named `name`, over efficientnet_defaults(). */
static effnet_line load_line(const char *file, const char *name)
{
    effnet_line c = {.opt = efficientnet_defaults()};
    tt_load_line(file, name, set_pair, &c);
    return c;
}

static effnet_line load_case(const char *kase) { return load_line(TRUNK "_cases.txt", kase); }

static efficientnet *make(eng_backend *be, const efficientnet_options *o)
{
    char *err = NULL;
    efficientnet *net = efficientnet_new(be, o, 7, &err);
    cr_assert(net, "%s", err);
    eng_params_init_formula(be, efficientnet_param_table(net));
    return net;
}

/* Every case's input is at phase 0. */
static eng_tensor make_input(eng_backend *be, int n, int size) { return tt_input(be, eng_shape4(n, 3, size, size), 0); }

/* ---- the width and depth arithmetic ------------------------------------------------------------- */

/* ClassyVision's BLOCK_PARAMS: (num_repeat, kernel_size, stride, expand_ratio, input_filters,
 * output_filters); se_ratio 0.25 and id_skip True in every stage. */
static const int STAGES[7][6] = {
    {1, 3, 1, 1, 32, 16},   {2, 3, 2, 6, 16, 24},    {2, 5, 2, 6, 24, 40},  {3, 3, 2, 6, 40, 80},
    {3, 5, 1, 6, 80, 112}, {4, 5, 2, 6, 112, 192}, {1, 3, 1, 6, 192, 320},
};

static void stage_list(const efficientnet_options *o, int what, char *out, size_t len)
{
    out[0] = '\0';
    for (int s = 0; s < 7; s++) {
        int64_t v = what == 2 ? efficientnet_scale_depth(STAGES[s][0], o)
                              : efficientnet_scale_width(STAGES[s][what == 0 ? 4 : 5], o);
        snprintf(out + strlen(out), len - strlen(out), "%s%lld", s ? "," : "", (long long)v);
    }
}

Test(efficientnet, presets_and_custom_sets_scale_as_classyvision)
{
    char *path = test_fixture("nn", "efficientnet_presets.txt");
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char line[1024];
    int lines = 0, presets = 0;
    while (fgets(line, sizeof line, f)) {
        char name[64];
        cr_assert_eq(sscanf(line, "%63s", name), 1);
        effnet_line c = {.opt = efficientnet_defaults()};
        tt_parse_pairs(line, set_pair, &c);
        if (name[0] == 'B') { /* MODEL_PARAMS[name] with efficientnet_bN's other arguments */
            efficientnet_options p = efficientnet_defaults();
            cr_assert_eq(efficientnet_preset(name, &p), 0, "%s is a preset", name);
            cr_expect(p.width_coefficient == c.opt.width_coefficient && p.depth_coefficient == c.opt.depth_coefficient
                          && p.resolution == c.opt.resolution && p.dropout_rate == c.opt.dropout_rate,
                      "%s: (%g, %g, %d, %g), ClassyVision (%g, %g, %d, %g)", name, p.width_coefficient,
                      p.depth_coefficient, p.resolution, p.dropout_rate, c.opt.width_coefficient,
                      c.opt.depth_coefficient, c.opt.resolution, c.opt.dropout_rate);
            cr_expect(p.width_divisor == 8 && p.min_width == 0, "%s: efficientnet_bN's divisor", name);
            presets++;
        }
        const efficientnet_options *o = &c.opt;
        cr_expect_eq(efficientnet_scale_width(32, o), c.stem, "%s stem", name);
        cr_expect_eq(efficientnet_scale_width(1280, o), c.head, "%s head", name);
        char got[128];
        stage_list(o, 0, got, sizeof got);
        cr_expect_str_eq(got, c.inputs, "%s input widths", name);
        stage_list(o, 1, got, sizeof got);
        cr_expect_str_eq(got, c.outputs, "%s output widths", name);
        stage_list(o, 2, got, sizeof got);
        cr_expect_str_eq(got, c.repeats, "%s repeats", name);
        cr_expect_eq(efficientnet_block_count(o), c.blocks, "%s blocks", name);
        cr_expect_eq(efficientnet_feature_count(o), c.blocks + 5, "%s features", name);
        char *err = NULL;
        cr_expect_eq(efficientnet_check(o, &err), 0, "%s: %s", name, err ? err : "");
        free(err);
        lines++;
    }
    fclose(f);
    free(path);
    cr_expect_eq(presets, 8, "B0 … B7");
    cr_expect_geq(lines, 13, "every preset and custom set");
}

Test(efficientnet, refuses_what_classyvision_refuses)
{
    efficientnet_options o = efficientnet_defaults();
    cr_expect_eq(efficientnet_preset("B8", &o), -1);
    cr_expect_eq(efficientnet_preset("", &o), -1);
    char *err = NULL;
    o = efficientnet_defaults();
    o.width_divisor = 0; /* scale_width divides by it: ZeroDivisionError */
    cr_expect_eq(efficientnet_check(&o, &err), -1);
    cr_expect(err != NULL);
    free(err);
    err = NULL;
    o = efficientnet_defaults();
    o.dropout_rate = 1.5; /* nn.Dropout: "dropout probability has to be between 0 and 1" */
    cr_expect_eq(efficientnet_check(&o, &err), -1);
    cr_expect(err != NULL);
    free(err);
    err = NULL;
    eng_backend *be = nnt_open_cpu();
    cr_expect_null(efficientnet_new(be, &o, 1, &err), "efficientnet_new refuses what efficientnet_check does");
    cr_expect(err != NULL);
    free(err);
    eng_backend_close(be);
}

/* ---- names, order and shapes ------------------------------------------------------------------ */

static void check_names(const efficientnet_options *o, const char *tag, int64_t want_params)
{
    eng_backend *be = nnt_open_cpu();
    efficientnet *net = make(be, o);
    tt_check_names(TRUNK, efficientnet_param_table(net), tag, "ClassyVision", want_params);
    efficientnet_free(be, net);
    eng_backend_close(be);
}

Test(efficientnet, state_dict_names_order_shapes_match_vissl)
{
    const char *cases[] = {"tiny", "odd", "b0"};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        effnet_line c = load_case(cases[i]);
        check_names(&c.opt, cases[i], c.params);
    }
    cr_expect_eq(load_case("b0").params, 4007548, "EfficientNet-B0's 5,288,548 less its 1280 × 1000 fc");
}

/* The parameter counts of presets and custom sets the cases do not cover (B3 and up are left to
 * the arithmetic test: B7 alone is 64 M parameters). */
Test(efficientnet, parameter_counts_match_classyvision, .timeout = 60)
{
    const char *names[] = {"B1", "B2", "custom_div16", "custom_w035"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        effnet_line c = load_line("efficientnet_presets.txt", names[i]);
        eng_backend *be = nnt_open_cpu();
        char *err = NULL;
        efficientnet *net = efficientnet_new(be, &c.opt, 1, &err);
        cr_assert(net, "%s: %s", names[i], err);
        cr_expect_eq(eng_params_count(efficientnet_param_table(net)), c.params, "%s", names[i]);
        efficientnet_free(be, net);
        eng_backend_close(be);
    }
}

Test(efficientnet, feature_names_are_vissls)
{
    efficientnet_options o = efficientnet_defaults();
    cr_assert_eq(efficientnet_preset("B0", &o), 0);
    cr_expect_eq(efficientnet_block_count(&o), 16);
    cr_expect_eq(efficientnet_feature_count(&o), 21);
    const char *names[] = {"conv1", "block0", "block1", "block15", "conv_final", "avgpool", "flatten", "dropout"};
    const int index[] = {0, 1, 2, 16, 17, 18, 19, 20};
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        cr_expect_eq(efficientnet_feature_by_name(&o, names[i]), index[i], "%s", names[i]);
    for (int f = 0; f < efficientnet_feature_count(&o); f++) {
        char buf[32];
        const char *name = efficientnet_feature_name(&o, f, buf, sizeof buf);
        cr_assert(name, "feature %d", f);
        cr_expect_eq(efficientnet_feature_by_name(&o, name), f, "%s", name);
    }
    const char *none[] = {"block16", "block", "block-1", "block01", "res5", "res5avg", "conv_head", "fc", ""};
    for (size_t i = 0; i < ARRAY_LEN(none); i++)
        cr_expect_eq(efficientnet_feature_by_name(&o, none[i]), -1, "'%s' is no VISSL EfficientNet feature", none[i]);
    cr_assert_eq(efficientnet_preset("B7", &o), 0);
    cr_expect_eq(efficientnet_feature_by_name(&o, "block54"), 55, "B7: 55 blocks");
    cr_expect_eq(efficientnet_feature_by_name(&o, "dropout"), 59);
}

/* ---- forward and backward against the float64 reference ----------------------------------------- */

/* Per-channel means over N, H, W of conv1, block0, …, conv_final concatenated (means_eval). */
static float *feature_means(eng_backend *be, efficientnet *net, int blocks, int64_t *n)
{
    float *m = NULL;
    *n = 0;
    for (int f = 0; f <= blocks + 1; f++) {
        const eng_tensor *t = efficientnet_feature(net, f);
        cr_assert_eq(t->shape.ndim, 4, "feature %d is N × C × H × W", f);
        m = tt_append_channel_means(be, t, m, n);
    }
    return m;
}

/* Every parameter's gradient summary, and the stem weight's whole gradient. */
static void check_grads(eng_backend *be, efficientnet *net, const char *kase, double factor)
{
    tt_check_grads(TRUNK, be, efficientnet_param_table(net), kase, factor);
    tt_check_stem_grad(TRUNK, be, efficientnet_param_table(net), kase, factor);
}

/* Eval forward, its means, train forward, the statistics, the backward of L = Σ feat·r. */
static void check_case(const char *kase)
{
    effnet_line c = load_case(kase);
    eng_backend *be = nnt_open_cpu();
    efficientnet *net = make(be, &c.opt);
    eng_tensor x = make_input(be, c.n, c.size);
    efficientnet_set_input_grad(be, net, true);
    efficientnet_plan(be, net, &x.shape);
    const eng_tensor *feat = efficientnet_forward(be, net, &x, false);
    cr_assert_eq(feat->shape.ndim, 2);
    cr_assert_eq(feat->shape.dim[1], efficientnet_out_dim(net));
    float *f = nnt_download(be, feat);
    tt_expect_array(TRUNK, f, kase, "feat_eval", FWD_TOL);
    free(f);
    int64_t nm;
    float *m = feature_means(be, net, c.blocks, &nm);
    tt_expect_array(TRUNK, m, kase, "means_eval", FWD_TOL);
    free(m);
    feat = efficientnet_forward(be, net, &x, true);
    f = nnt_download(be, feat);
    tt_expect_array(TRUNK, f, kase, "feat_train", FWD_TOL);
    free(f);
    int ns;
    float *sums = nnt_buffer_sums(be, efficientnet_param_table(net), &ns);
    tt_expect_array(TRUNK, sums, kase, "stats", FWD_TOL);
    free(sums);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, efficientnet_param_table(net));
    efficientnet_backward(be, net, &r);
    check_grads(be, net, kase, 1.0);
    float *dx = nnt_download(be, efficientnet_input_grad(net));
    tt_expect_array(TRUNK, dx, kase, "dx", GRAD_TOL);
    free(dx);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    efficientnet_free(be, net);
    eng_backend_close(be);
}

Test(efficientnet, tiny_with_se_asymmetric_padding_matches_classyvision) { check_case("tiny"); }
Test(efficientnet, odd_without_se_mixed_padding_matches_classyvision) { check_case("odd"); }

Test(efficientnet, b0_eval_features_match_classyvision, .timeout = 60)
{
    effnet_line c = load_case("b0");
    efficientnet_options o = efficientnet_defaults();
    cr_assert_eq(efficientnet_preset("B0", &o), 0);
    cr_expect(o.bn_momentum == c.opt.bn_momentum && o.bn_epsilon == c.opt.bn_epsilon
                  && o.drop_connect_rate == c.opt.drop_connect_rate && o.use_se == c.opt.use_se,
              "efficientnet_defaults are efficientnet_b0's arguments");
    eng_backend *be = nnt_open_cpu();
    efficientnet *net = make(be, &o);
    eng_tensor x = make_input(be, c.n, c.size);
    efficientnet_plan(be, net, &x.shape);
    float *f = nnt_download(be, efficientnet_forward(be, net, &x, false));
    tt_expect_array(TRUNK, f, "b0", "feat_eval", FWD_TOL);
    cr_expect_eq(efficientnet_out_dim(net), 1280);
    free(f);
    eng_tensor_free(be, &x);
    efficientnet_free(be, net);
    eng_backend_close(be);
}

/* B0 in training without its random masks: efficientnet_b0's arguments, but drop_connect_rate 0 and
 * dropout_rate 0 so that no drop-connect or dropout mask enters the forward (and resolution 64, the
 * input's size, as ClassyVision's Conv2dSamePadding needs; selfsup takes it from the input). */
static efficientnet_options b0_without_masks(void)
{
    efficientnet_options o = efficientnet_defaults();
    cr_assert_eq(efficientnet_preset("B0", &o), 0);
    o.drop_connect_rate = 0.0, o.dropout_rate = 0.0, o.resolution = 64;
    return o;
}

/* B0 (no drop-connect or dropout) in training, 4 images of 64 px at input phase 0 (why 4:
 * make_efficientnet_fixtures.py's B0_TRAIN): one train-mode forward, the backward of L = Σ feat·r,
 * and the gradient with respect to the input against ClassyVision's float64 one
 * (efficientnet_b0_dx, relative GRAD_TOL). */
Test(efficientnet, b0_input_gradient_matches_classyvision, .timeout = 120)
{
    efficientnet_options o = b0_without_masks();
    eng_backend *be = nnt_open_cpu();
    efficientnet *net = make(be, &o);
    eng_tensor x = make_input(be, 4, 64);
    efficientnet_set_input_grad(be, net, true);
    efficientnet_plan(be, net, &x.shape);
    const eng_tensor *feat = efficientnet_forward(be, net, &x, true);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, efficientnet_param_table(net));
    efficientnet_backward(be, net, &r);
    float *dx = nnt_download(be, efficientnet_input_grad(net));
    tt_expect_array_n(TRUNK, dx, (size_t)eng_numel(&x.shape), "b0", "dx", GRAD_TOL);
    free(dx);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    efficientnet_free(be, net);
    eng_backend_close(be);
}

/* ---- accumulation, memory ------------------------------------------------------------------------ */

/* Two backward passes without zeroing give twice the gradients, and a second step at the
 * planned shape (plan again, eval and train forwards, backward) allocates nothing. */
Test(efficientnet, gradients_accumulate_and_a_step_allocates_nothing)
{
    const char *kase = "tiny";
    effnet_line c = load_case(kase);
    eng_backend *be = nnt_open_cpu();
    tt_count_allocations(be);
    efficientnet *net = make(be, &c.opt);
    eng_tensor x = make_input(be, c.n, c.size);
    efficientnet_plan(be, net, &x.shape);
    const eng_tensor *feat = efficientnet_forward(be, net, &x, true);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, efficientnet_param_table(net));
    efficientnet_backward(be, net, &r);
    int before = tt_allocations();
    efficientnet_plan(be, net, &x.shape);
    efficientnet_forward(be, net, &x, false);
    efficientnet_forward(be, net, &x, true); /* the running statistics move again: not compared */
    efficientnet_backward(be, net, &r);
    cr_expect_eq(tt_allocations(), before, "a planned step allocates nothing");
    check_grads(be, net, kase, 2.0);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    efficientnet_free(be, net);
    eng_backend_close(be);
}

/* ---- drop-connect and dropout -------------------------------------------------------------------- */

/* Which blocks have the skip (and so drop-connect): stride 1 and as many output channels as
 * input ones, block by block as EfficientNet.__init__ builds them. Returns B. */
static int skip_blocks(const efficientnet_options *o, bool *skip)
{
    int b = 0;
    for (int s = 0; s < 7; s++) {
        int64_t in = efficientnet_scale_width(STAGES[s][4], o), out = efficientnet_scale_width(STAGES[s][5], o);
        for (int64_t j = 0; j < efficientnet_scale_depth(STAGES[s][0], o); j++) {
            cr_assert_lt(b, EFFICIENTNET_MAX_BLOCKS);
            skip[b++] = (j == 0 ? STAGES[s][2] : 1) == 1 && (j == 0 ? in : out) == out;
        }
    }
    return b;
}

static void expect_binomial(const char *what, long kept, long total, double p)
{
    double sd = sqrt((double)total * p * (1.0 - p));
    double off = fabs((double)kept - p * (double)total);
    if (tt_verbose(TRUNK))
        fprintf(stderr, TRUNK ": %-44s kept %ld of %ld (%.4f, law %.4f: %.2f sd)\n", what, kept, total,
                (double)kept / (double)total, p, sd > 0 ? off / sd : 0.0);
    cr_expect_leq(off, BINOMIAL_SIGMAS * sd + 1e-9, "%s: kept %ld of %ld, the law keeps %.4f (%.1f sd off)", what,
                  kept, total, p, sd > 0 ? off / sd : INFINITY);
}

/* Net A (drop_connect_rate 0.6, dropout 0.3) and net B (both 0) share tiny's formula weights; small
 * images (8 px: the later stages run at 1 × 1) and a large batch give many samples per step.
 *   - each skip block i's change out − in of a sample is all zero (dropped) or not (kept); the kept
 *     count over STEPS × N samples is binomial with keep = 1 − 0.6·i/B (block0's rate is 0: never
 *     dropped). A law with the index off by one (0.6·(i+1)/B) is ≥ 6 % off at every block: over
 *     4096 samples that is ≥ 8 sd, so it fails;
 *   - the first block with a nonzero rate has the same input in A and B (the blocks before it
 *     never drop), so a kept sample's change in A is B's divided by keep, and a dropped one's zero;
 *   - dropout: each element of A's `dropout` feature is 0 or its `flatten` value / (1 − 0.3), kept
 *     with probability 0.7;
 *   - the masks are keyed by efficientnet_set_step's step and view: each step's patterns differ
 *     from the step before's, the first step's come back when it is set again, and another view
 *     draws others. */
Test(efficientnet, drop_connect_and_dropout_keep_by_their_law_in_training, .timeout = 120)
{
    enum { N = 512, SIZE = 8, STEPS = 8, FIRST_STEP = 100 };
    const double rate = 0.6, p_drop = 0.3;
    effnet_line c = load_case("tiny");
    efficientnet_options oa = c.opt, ob = c.opt;
    oa.drop_connect_rate = rate, oa.dropout_rate = p_drop;
    ob.drop_connect_rate = 0.0, ob.dropout_rate = 0.0;
    bool skip[EFFICIENTNET_MAX_BLOCKS];
    const int blocks = skip_blocks(&oa, skip);
    cr_assert_eq(blocks, efficientnet_block_count(&oa));
    int first = -1; /* the first skip block with a nonzero rate */
    for (int i = 1; i < blocks && first < 0; i++)
        first = skip[i] ? i : -1;
    cr_assert(skip[0] && first > 0, "tiny: block0 and a later block have the skip");

    eng_backend *be = nnt_open_cpu();
    efficientnet *a = make(be, &oa), *b = make(be, &ob);
    eng_tensor x = make_input(be, N, SIZE);
    efficientnet_plan(be, a, &x.shape);
    efficientnet_plan(be, b, &x.shape);
    efficientnet_forward(be, b, &x, true);
    float *b_in = nnt_download(be, efficientnet_feature(b, first)); /* block first−1's output */
    float *b_out = nnt_download(be, efficientnet_feature(b, first + 1));
    const int64_t per = eng_numel(&efficientnet_feature(b, first)->shape) / N;

    long kept[EFFICIENTNET_MAX_BLOCKS] = {0}, drop_kept = 0, drop_total = 0;
    bool last_mask[EFFICIENTNET_MAX_BLOCKS][N], first_mask[EFFICIENTNET_MAX_BLOCKS][N], changed[EFFICIENTNET_MAX_BLOCKS] = {false}, drop_changed = false;
    float *last_drop = NULL;
    double scale_err = 0.0, same_input = 0.0;
    for (int step = 0; step < STEPS; step++) {
        efficientnet_set_step(a, FIRST_STEP + (uint64_t)step, 0);
        efficientnet_forward(be, a, &x, true);
        for (int i = 0; i < blocks; i++) {
            if (!skip[i])
                continue;
            const eng_tensor *tin = efficientnet_feature(a, i), *tout = efficientnet_feature(a, i + 1);
            cr_assert(eng_shape_equal(&tin->shape, &tout->shape), "block%d keeps its shape", i);
            float *in = nnt_download(be, tin), *out = nnt_download(be, tout);
            const int64_t m = eng_numel(&tin->shape) / N;
            const double keep = 1.0 - rate * i / blocks;
            if (i == first)
                same_input = fmax(same_input, nnt_rel_error_host(in, b_in, (size_t)(N * m)));
            for (int n = 0; n < N; n++) {
                double dmax = 0.0;
                for (int64_t j = 0; j < m; j++)
                    dmax = fmax(dmax, fabs((double)out[n * m + j] - in[n * m + j]));
                bool k = dmax > 0.0;
                kept[i] += k;
                if (step > 0 && k != last_mask[i][n])
                    changed[i] = true;
                last_mask[i][n] = k;
                if (step == 0)
                    first_mask[i][n] = k;
                if (i == first && k) { /* out − in against B's branch / keep */
                    double num = 0.0, den = 0.0;
                    for (int64_t j = 0; j < per; j++) {
                        double want = ((double)b_out[n * per + j] - b_in[n * per + j]) / keep;
                        num = fmax(num, fabs((double)out[n * m + j] - in[n * m + j] - want));
                        den = fmax(den, fabs(want));
                    }
                    scale_err = fmax(scale_err, den > 0 ? num / den : num);
                }
            }
            free(in);
            free(out);
        }
        const int nf = efficientnet_feature_count(&oa);
        const eng_tensor *tflat = efficientnet_feature(a, nf - 2), *tdrop = efficientnet_feature(a, nf - 1);
        cr_assert_eq(eng_numel(&tflat->shape), eng_numel(&tdrop->shape));
        float *flat = nnt_download(be, tflat), *drop = nnt_download(be, tdrop);
        const int64_t count = eng_numel(&tdrop->shape);
        double bad = 0.0;
        for (int64_t j = 0; j < count; j++) {
            if (drop[j] == 0.0f && flat[j] != 0.0f)
                continue;
            drop_kept++;
            double want = flat[j] / (1.0 - p_drop);
            bad = fmax(bad, fabs(drop[j] - want) / fmax(fabs(want), 1e-30));
            if (last_drop && (last_drop[j] == 0.0f) != (drop[j] == 0.0f))
                drop_changed = true;
        }
        drop_total += count;
        cr_expect_leq(bad, 1e-6, "step %d: a kept dropout element is its flatten value / (1 − p) (error %g)", step, bad);
        free(flat);
        free(last_drop);
        last_drop = drop;
    }
    tt_report(TRUNK, "drop-connect: first block's input as without", same_input, 1e-6);
    tt_report(TRUNK, "drop-connect: kept branch = branch / keep", scale_err, 1e-5);
    for (int i = 0; i < blocks; i++) {
        if (!skip[i])
            continue;
        char what[64];
        snprintf(what, sizeof what, "drop-connect block%d", i);
        if (i == 0) {
            cr_expect_eq(kept[i], (long)STEPS * N, "block0's rate is 0·rate/B: never dropped");
            continue;
        }
        expect_binomial(what, kept[i], (long)STEPS * N, 1.0 - rate * i / blocks);
        cr_expect(changed[i], "block%d: the masks change from step to step", i);
    }
    expect_binomial("dropout", drop_kept, drop_total, 1.0 - p_drop);
    cr_expect(drop_changed, "dropout: the masks change from step to step");
    /* The first step again (view 0, then 1): the same masks, then others. */
    for (int view = 0; view < 2; view++) {
        efficientnet_set_step(a, FIRST_STEP, (uint64_t)view);
        efficientnet_forward(be, a, &x, true);
        int same = 0, total = 0;
        for (int i = 1; i < blocks; i++) {
            if (!skip[i])
                continue;
            const eng_tensor *tin = efficientnet_feature(a, i);
            float *in = nnt_download(be, tin), *out = nnt_download(be, efficientnet_feature(a, i + 1));
            const int64_t m = eng_numel(&tin->shape) / N;
            for (int n = 0; n < N; n++) {
                double dmax = 0.0;
                for (int64_t j = 0; j < m; j++)
                    dmax = fmax(dmax, fabs((double)out[n * m + j] - in[n * m + j]));
                same += (dmax > 0.0) == first_mask[i][n], total++;
            }
            free(in);
            free(out);
        }
        if (view == 0)
            cr_expect_eq(same, total, "step %d again: the same drop-connect masks", FIRST_STEP);
        else
            cr_expect_lt(same, total, "view 1: other drop-connect masks than view 0's");
    }
    free(last_drop);
    free(b_in);
    free(b_out);
    eng_tensor_free(be, &x);
    efficientnet_free(be, a);
    efficientnet_free(be, b);
    eng_backend_close(be);
}

/* In eval mode drop-connect and dropout do nothing: every feature of net A (rates 0.6 and 0.3) is
 * net B's (rates 0), and A's dropout is its flatten. */
Test(efficientnet, eval_mode_ignores_drop_connect_and_dropout)
{
    effnet_line c = load_case("tiny");
    efficientnet_options oa = c.opt, ob = c.opt;
    oa.drop_connect_rate = 0.6, oa.dropout_rate = 0.3;
    eng_backend *be = nnt_open_cpu();
    efficientnet *a = make(be, &oa), *b = make(be, &ob);
    eng_tensor x = make_input(be, c.n, c.size);
    efficientnet_plan(be, a, &x.shape);
    efficientnet_plan(be, b, &x.shape);
    efficientnet_forward(be, a, &x, false);
    efficientnet_forward(be, b, &x, false);
    const int nf = efficientnet_feature_count(&oa);
    double worst = 0.0;
    for (int f = 0; f < nf; f++) {
        const eng_tensor *ta = efficientnet_feature(a, f), *tb = efficientnet_feature(b, f);
        cr_assert_eq(eng_numel(&ta->shape), eng_numel(&tb->shape), "feature %d", f);
        float *ha = nnt_download(be, ta), *hb = nnt_download(be, tb);
        worst = fmax(worst, nnt_rel_error_host(ha, hb, (size_t)eng_numel(&ta->shape)));
        free(ha);
        free(hb);
    }
    tt_report(TRUNK, "eval: rates change no feature", worst, 1e-6);
    float *flat = nnt_download(be, efficientnet_feature(a, nf - 2)), *drop = nnt_download(be, efficientnet_feature(a, nf - 1));
    tt_report(TRUNK, "eval: dropout is flatten",
              nnt_rel_error_host(drop, flat, (size_t)eng_numel(&efficientnet_feature(a, nf - 1)->shape)), 0.0);
    tt_expect_array(TRUNK, drop, "tiny", "feat_eval", FWD_TOL);
    free(flat);
    free(drop);
    eng_tensor_free(be, &x);
    efficientnet_free(be, a);
    efficientnet_free(be, b);
    eng_backend_close(be);
}

/* ---- a checkpoint written by PyTorch ------------------------------------------------------------ */

/* efficientnet_tiny_vissl.torch holds case tiny's weights as VISSL saves a checkpoint; loaded
 * with WEIGHTS_INIT's defaults (weights_load, the entries under their model names "trunk.…")
 * into a randomly initialised net, it gives tiny's eval features. Tiny's options are not a
 * MODEL_PARAMS preset, which is all a VISSL config can build, so the trunk is loaded alone. */
Test(efficientnet, a_vissl_checkpoint_written_by_pytorch_loads_and_gives_its_features)
{
    effnet_line c = load_case("tiny");
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    efficientnet *net = efficientnet_new(be, &c.opt, 3, &err); /* random init, which the file replaces */
    cr_assert(net, "%s", err);
    eng_params *p = efficientnet_param_table(net);
    eng_entry *named = xcalloc((size_t)p->nentries, sizeof *named);
    for (int i = 0; i < p->nentries; i++) {
        named[i] = p->entries[i];
        named[i].name = xasprintf("trunk.%s", p->entries[i].name);
    }
    char *path = test_fixture("nn", "efficientnet_tiny_vissl.torch");
    weights_init_options w = weights_init_defaults();
    w.params_file = path;
    cr_assert_eq(weights_load(be, named, p->nentries, &w, &err), 0, "%s", err);
    eng_tensor x = make_input(be, c.n, c.size);
    efficientnet_plan(be, net, &x.shape);
    float *f = nnt_download(be, efficientnet_forward(be, net, &x, false));
    tt_expect_array(TRUNK, f, "tiny", "feat_eval", FWD_TOL);
    free(f);
    int ns;
    float *sums = nnt_buffer_sums(be, p, &ns); /* the running statistics came from the file too */
    eng_backend *be2 = nnt_open_cpu();
    efficientnet *ref = make(be2, &c.opt);
    int nr;
    float *want = nnt_buffer_sums(be2, efficientnet_param_table(ref), &nr);
    cr_assert_eq(ns, nr);
    tt_report(TRUNK, "checkpoint running statistics", nnt_rel_error_host(sums, want, (size_t)ns), 0.0);
    free(sums);
    free(want);
    efficientnet_free(be2, ref);
    eng_backend_close(be2);
    for (int i = 0; i < p->nentries; i++)
        free((char *)named[i].name);
    free(named);
    free(path);
    eng_tensor_free(be, &x);
    efficientnet_free(be, net);
    eng_backend_close(be);
}

/* ---- complexity ---------------------------------------------------------------------------------- */

/* efficientnet_costs_upto's rows against ClassyVision's profiler rules run on the re-stated model:
 * efficientnet_TAG_complexity.txt, "name kind flops params activations" per module call, then the
 * total. Kinds conv, zeropad (a padded convolution's ZeroPad2d, FLOPs unknown), batchnorm, swish
 * (VISSL's Wrap, FLOPs unknown), avgpool, flatten, dropout (only where dropout_rate > 0: VISSL's
 * trunk has no dropout module at 0, though efficientnet.h has the feature). */
static void check_costs(const efficientnet_options *o, const char *tag, int64_t size)
{
    eng_backend *be = nnt_open_cpu();
    efficientnet *net = make(be, o);
    eng_shape in = eng_shape4(1, 3, size, size);
    eng_layer_cost *rows;
    int n;
    char *err = NULL;
    cr_assert_eq(efficientnet_costs_upto(net, &in, NULL, efficientnet_feature_count(o) - 1, NULL, &rows, &n, &err), 0,
                 "%s: %s", tag, err);
    tt_check_cost_rows(TRUNK, tag, rows, n);
    eng_costs_free(rows, n);
    efficientnet_free(be, net);
    eng_backend_close(be);
}

Test(efficientnet, complexity_rows_follow_classyvisions_profiler)
{
    const char *cases[] = {"tiny", "odd", "b0"};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        effnet_line c = load_case(cases[i]);
        check_costs(&c.opt, cases[i], c.size);
    }
}

/* ---- from a config ------------------------------------------------------------------------------ */

/* VISSL's configs/config/pretrain/simclr/models/efficientnet_B0.yaml's trunk, as a feature
 * extractor reading conv_final (pooled to 1 × 1) and dropout: the model has VISSL's names and,
 * with the formula's weights, both outputs are B0's flatten features (eval mode). */
/* The model's tensor named PREFIX-less `name` (trunk.base_model._feature_blocks.<name>). */
static const eng_tensor *model_tensor(const model *m, const char *name)
{
    char *full = xasprintf("trunk.base_model._feature_blocks.%s", name);
    const eng_tensor *t = NULL;
    for (int i = 0; i < model_entry_count(m) && !t; i++)
        if (!strcmp(model_entry_at(m, i)->name, full))
            t = &model_entry_at(m, i)->value;
    cr_assert(t, "no tensor %s", full);
    free(full);
    return t;
}

/* avgpool(SiLU(BN_eval(conv_final(x)))) with the separate logical layers, downloaded. */
static float *recompute_conv_final(eng_backend *be, const model *m, const eng_tensor *x)
{
    const eng_tensor *w = model_tensor(m, "conv_final.0.weight");
    eng_conv_desc d = {.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
    eng_shape ys = eng_conv_output_shape(&x->shape, &w->shape, &d);
    eng_plan *plan = eng_conv_plan(be, &d, &x->shape, &w->shape, false);
    eng_tensor y = eng_tensor_new(be, ys), pooled = eng_tensor_new(be, eng_shape4(ys.dim[0], ys.dim[1], 1, 1));
    eng_conv_forward(be, plan, x, w, NULL, &y);
    eng_batchnorm_forward_eval(be, 1e-3, &y, model_tensor(m, "conv_final.1.weight"),
                               model_tensor(m, "conv_final.1.bias"), model_tensor(m, "conv_final.1.running_mean"),
                               model_tensor(m, "conv_final.1.running_var"), &y);
    eng_silu_forward(be, &y, &y);
    eng_adaptive_avgpool_forward(be, &y, &pooled);
    float *f = nnt_download(be, &pooled);
    eng_tensor_free(be, &y);
    eng_tensor_free(be, &pooled);
    eng_plan_free(be, plan);
    return f;
}

Test(efficientnet, a_config_builds_b0_with_vissl_names_and_features, .timeout = 60)
{
    model_options o = nnt_model_options("config:\n  MODEL:\n    TRUNK:\n      NAME: efficientnet\n      TRUNK_PARAMS:\n"
                                        "        EFFICIENT_NETS:\n          model_version: B0\n"
                                        "          bn_momentum: 0.01\n          bn_epsilon: 0.001\n"
                                        "          drop_connect_rate: 0.2\n          width_divisor: 8\n"
                                        "          min_width: null\n          use_se: True\n"
                                        "    FEATURE_EVAL_SETTINGS:\n      EVAL_MODE_ON: True\n"
                                        "      FREEZE_TRUNK_ONLY: True\n      EXTRACT_TRUNK_FEATURES_ONLY: True\n"
                                        "      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[conv_final, [AdaptiveAvgPool2d, [[1, 1]]]],"
                                        " [dropout, [Identity, []]], [block15, [Identity, []]]]\n",
                                        NULL);
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, &o, 1, &err);
    cr_assert(m, "%s", err);
    cr_expect_str_eq(model_entry_at(m, 0)->name, "trunk.base_model._feature_blocks.conv1.0.weight");
    int64_t trunk_params = 0;
    for (int i = 0; i < model_entry_count(m); i++) {
        const eng_entry *e = model_entry_at(m, i);
        if (e->kind == ENG_PARAM && !strncmp(e->name, "trunk.", 6))
            trunk_params += eng_numel(&e->value.shape);
    }
    cr_expect_eq(trunk_params, 4007548, "B0's trunk: %lld parameters", (long long)trunk_params);
    eng_params_init_formula(be, trunk_param_table(model_trunk(m)));
    effnet_line c = load_case("b0");
    eng_shape in[1] = {eng_shape4(c.n, 3, c.size, c.size)};
    cr_assert_eq(model_plan(be, m, in, 1, &err), 0, "%s", err);
    float *x = nnt_formula_fill(eng_numel(&in[0]), X_ALPHA, 0);
    model_upload_input(be, m, 0, x);
    model_forward(be, m, false);
    cr_assert_eq(model_output_count(m), 3);
    for (int k = 0; k < 2; k++) {
        cr_expect_eq(eng_numel(&model_output(m, k)->shape), (int64_t)c.n * 1280, "output %d: N × 1280", k);
        float *f = nnt_download(be, model_output(m, k));
        tt_expect_array(TRUNK, f, "b0", "feat_eval", FWD_TOL);
        free(f);
    }
    /* An inner block read as it is (Identity hands the tensor on): evaluation keeps the trunk's
     * activations in the backend's native layout, but not a feature a head reads
     * (efficientnet_expose), else its bytes would be channel-blocked under a logical view. The
     * last block's output is conv_final's input: conv, BN, SiLU and the pool applied to it here,
     * layer by layer, give ClassyVision's features again. */
    const eng_tensor *b15 = model_output(m, 2);
    cr_assert_eq(eng_numel(&b15->shape), (int64_t)c.n * 320 * 7 * 7, "block15: N × 320 × 7 × 7");
    eng_tensor b15_map = eng_reshape(b15, eng_shape4(c.n, 320, 7, 7)); /* the model flattened it */
    float *f = recompute_conv_final(be, m, &b15_map);
    tt_expect_array(TRUNK, f, "b0", "feat_eval", FWD_TOL);
    free(f);
    free(x);
    model_free(be, m);
    eng_backend_close(be);
}

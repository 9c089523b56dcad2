/*
 * test_regnet.c — the RegNet trunk (nn/regnet.c) against ClassyVision's RegNet as VISSL wraps it,
 * re-stated in PyTorch by tests/golden/make_regnet_fixtures.py (whose docstring documents every
 * fixture and the closed formula that sets weights and inputs on both sides).
 *
 * What is checked:
 *   - the width arithmetic: every ClassyVision preset and a set of free parameter choices give
 *     ClassyVision's stage widths, depths, group widths and bottleneck multipliers;
 *   - names, order and shapes of the state dict (VISSL's `_feature_blocks.…` names), and the
 *     parameter counts, for four small cases covering every stem, block type and activation,
 *     and for regnet_y_400mf;
 *   - forward (eval and train), the BN running statistics, and the backward's gradients of the
 *     four cases against a float64 reference, per parameter within FLOOR_FACTOR × max(GRAD_TOL,
 *     torch float32's own error) as test_resnet.c measures them, and the input's gradient
 *     (relative GRAD_TOL); regnet_y_400mf's eval features and, in training, its input gradient;
 *   - gradients accumulate and a second step allocates nothing;
 *   - a config with MODEL.TRUNK.NAME regnet builds the model, with VISSL's feature names, and
 *     VISSL's SwAV model files for RegNets compose;
 *   - the complexity rows (FLOPs, parameters, activations per module call) follow ClassyVision's
 *     profiler on the same networks;
 *   - weights written by PyTorch load: a VISSL checkpoint, and torchvision's RegNet through
 *     `selfsup convert` (and back to torchvision's names).
 * REGNET_VERBOSE=1 prints every measured error (2: every parameter's gradient error too).
 */
#include "backend.h"
#include "complexity.h"
#include "nn.h"
#include "regnet.h"
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

#define TRUNK "regnet" /* the fixtures' prefix (test_trunk_util.h) */

/* ---- fixtures ------------------------------------------------------------------------------- */

/* One option of a regnet_cases.txt line or of a "custom:" preset into o. */
static void parse_option(regnet_options *o, const char *k, const char *v)
{
    if (!strcmp(k, "depth")) o->depth = atoi(v);
    else if (!strcmp(k, "w_0")) o->w_0 = atoi(v);
    else if (!strcmp(k, "w_a")) o->w_a = atof(v);
    else if (!strcmp(k, "w_m")) o->w_m = atof(v);
    else if (!strcmp(k, "group_width")) o->group_width = atoi(v);
    else if (!strcmp(k, "bottleneck_multiplier")) o->bottleneck_multiplier = atof(v);
    else if (!strcmp(k, "stem_type")) o->stem_type = (regnet_stem)regnet_stem_by_name(v);
    else if (!strcmp(k, "stem_width")) o->stem_width = atoi(v);
    else if (!strcmp(k, "block_type")) o->block_type = (regnet_block)regnet_block_by_name(v);
    else if (!strcmp(k, "activation")) o->activation = (unit_act)regnet_activation_by_name(v);
    else if (!strcmp(k, "use_se")) o->use_se = !strcmp(v, "True");
    else if (!strcmp(k, "se_ratio")) o->se_ratio = atof(v);
    else if (!strcmp(k, "bn_epsilon")) o->bn_epsilon = atof(v);
    else if (!strcmp(k, "bn_momentum")) o->bn_momentum = atof(v);
}

typedef struct {
    regnet_options opt;
    int n, size;
    int64_t params;
} regnet_case;

/* One key=value of regnet_cases.txt: an option, or the case's n, size or params. */
static void set_case(void *into, const char *k, const char *v)
{
    regnet_case *c = into;
    parse_option(&c->opt, k, v);
    if (!strcmp(k, "n")) c->n = atoi(v);
    else if (!strcmp(k, "size")) c->size = atoi(v);
    else if (!strcmp(k, "params")) c->params = atoll(v);
}

/* The line of regnet_cases.txt for `kase`, over regnet_defaults(). */
static regnet_case load_case(const char *kase)
{
    regnet_case c = {.opt = regnet_defaults()};
    tt_load_line(TRUNK "_cases.txt", kase, set_case, &c);
    return c;
}

static regnet *make(eng_backend *be, const regnet_options *o)
{
    char *err = NULL;
    regnet *net = regnet_new(be, o, 7, &err);
    cr_assert(net, "%s", err);
    regnet_init_formula(be, net);
    return net;
}

static eng_tensor make_input(eng_backend *be, int n, int size, int phase)
{
    return tt_input(be, eng_shape4(n, 3, size, size), phase);
}

/* ---- the width arithmetic --------------------------------------------------------------------- */

/* "custom:depth=27,w_0=640,..." into o; a preset name through regnet_preset. */
static void preset_options(const char *name, regnet_options *o)
{
    *o = regnet_defaults();
    if (strncmp(name, "custom:", 7) != 0) {
        cr_assert_eq(regnet_preset(name, o), 0, "%s is a preset", name);
        return;
    }
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", name + 7);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        parse_option(o, tok, eq + 1);
    }
}

static void list_of(const regnet_stages *st, int what, char *out, size_t len)
{
    out[0] = '\0';
    for (int s = 0; s < st->n; s++) {
        char v[32];
        if (what == 3) /* as Python prints a float: 1.0, 0.25 */
            snprintf(v, sizeof v, st->bottleneck[s] == floor(st->bottleneck[s]) ? "%.1f" : "%g", st->bottleneck[s]);
        else
            snprintf(v, sizeof v, "%lld", (long long)(what == 0 ? st->width[s] : what == 1 ? st->depth[s]
                                                                                        : st->group_width[s]));
        snprintf(out + strlen(out), len - strlen(out), "%s%s", s ? "," : "", v);
    }
}

Test(regnet, presets_and_free_parameters_expand_as_classyvision)
{
    char *path = test_fixture("nn", "regnet_presets.txt");
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char name[256], want[4][256];
    int lines = 0;
    while (fscanf(f, "%255s %255s %255s %255s %255s", name, want[0], want[1], want[2], want[3]) == 5) {
        regnet_options o;
        preset_options(name, &o);
        regnet_stages st;
        char *err = NULL;
        cr_assert_eq(regnet_expand(&o, &st, &err), 0, "%s: %s", name, err);
        for (int w = 0; w < 4; w++) {
            char got[256];
            list_of(&st, w, got, sizeof got);
            cr_expect_str_eq(got, want[w], "%s list %d", name, w);
        }
        lines++;
    }
    fclose(f);
    free(path);
    cr_expect_geq(lines, 29, "every preset and custom set");
    for (const char *const *p = regnet_preset_names(); *p; p++)
        lines--;
    cr_expect_geq(lines, 0);
}

Test(regnet, refuses_what_regnetparams_refuses)
{
    regnet_options o = regnet_defaults();
    regnet_preset("regnet_y_400mf", &o);
    regnet_stages st;
    char *err = NULL;
    o.w_0 = 44;
    cr_expect_eq(regnet_expand(&o, &st, &err), -1);
    cr_expect(err && strstr(err, "multiple of 8"), "%s", err);
    free(err);
    err = NULL;
    o.w_0 = 48, o.w_m = 1.0;
    cr_expect_eq(regnet_expand(&o, &st, &err), -1);
    free(err);
    cr_expect_eq(regnet_preset("regnet_y_400gf", &o), -1);
    cr_expect_eq(regnet_stem_by_name("SIMPLE_STEM_IN"), REGNET_STEM_SIMPLE_IN, "names are case-blind, as .upper()");
    cr_expect_eq(regnet_activation_by_name("gelu"), -1);
}

/* ---- names, order and shapes ------------------------------------------------------------------ */

static void check_names(const regnet_options *o, const char *tag, int64_t want_params)
{
    eng_backend *be = nnt_open_cpu();
    regnet *net = make(be, o);
    tt_check_names(TRUNK, regnet_param_table(net), tag, "ClassyVision", want_params);
    regnet_free(be, net);
    eng_backend_close(be);
}

Test(regnet, state_dict_names_order_shapes_match_classyvision)
{
    const char *cases[] = {"y", "x_basic", "z", "vanilla"};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        regnet_case c = load_case(cases[i]);
        check_names(&c.opt, cases[i], c.params);
    }
    regnet_options o = regnet_defaults();
    regnet_preset("regnet_y_400mf", &o);
    check_names(&o, "y400", 3903144); /* torchvision's regnet_y_400mf, 4344144, less its fc's 441000 */
    o = regnet_defaults();
    regnet_preset("regnet_y_16gf", &o);
    check_names(&o, "y16", 80565140); /* torchvision's regnet_y_16gf, 83590140, less its fc's 3025000 */
}

Test(regnet, feature_names_are_vissls)
{
    regnet_options o = regnet_defaults();
    regnet_preset("regnet_y_400mf", &o);
    regnet_stages st;
    cr_assert_eq(regnet_expand(&o, &st, NULL), 0);
    const char *names[] = {"conv1", "res2", "res3", "res4", "res5", "avgpool", "flatten"};
    cr_expect_eq(regnet_feature_count(&st), 7);
    for (int i = 0; i < (int)ARRAY_LEN(names); i++)
        cr_expect_eq(regnet_feature_by_name(&st, names[i]), i, "%s", names[i]);
    cr_expect_eq(regnet_feature_by_name(&st, "res5avg"), -1, "VISSL's RegNet has no res5avg");
    cr_expect_eq(regnet_feature_by_name(&st, "res1"), -1);
}

/* ---- forward and backward against the float64 reference ----------------------------------------- */

/* Per-channel means over N, H, W of conv1, res2, ... concatenated (the fixture's means_eval). */
static float *feature_means(eng_backend *be, regnet *net, int64_t *n)
{
    const regnet_stages *st = regnet_get_stages(net);
    float *m = NULL;
    *n = 0;
    for (int f = 0; f <= st->n; f++)
        m = tt_append_channel_means(be, regnet_feature(net, f), m, n);
    return m;
}

static void check_stats(eng_backend *be, regnet *net, const char *kase)
{
    int n;
    float *sums = nnt_buffer_sums(be, regnet_param_table(net), &n);
    tt_expect_array(TRUNK, sums, kase, "stats", FWD_TOL);
    free(sums);
}

/* Every parameter's gradient summary, and the stem weight's whole gradient. */
static void check_grads(eng_backend *be, regnet *net, const char *kase, double factor)
{
    tt_check_grads(TRUNK, be, regnet_param_table(net), kase, factor);
    tt_check_stem_grad(TRUNK, be, regnet_param_table(net), kase, factor);
}

/* Eval forward, train forward, the statistics, the backward of L = Σ feat·r. */
static void check_case(const char *kase)
{
    regnet_case c = load_case(kase);
    eng_backend *be = nnt_open_cpu();
    regnet *net = make(be, &c.opt);
    eng_tensor x = make_input(be, c.n, c.size, tt_fixture_phase(TRUNK, kase));
    regnet_set_input_grad(be, net, true);
    regnet_plan(be, net, &x.shape);
    float *f = nnt_download(be, regnet_forward(be, net, &x, false));
    tt_expect_array(TRUNK, f, kase, "feat_eval", FWD_TOL);
    free(f);
    int64_t nm;
    float *m = feature_means(be, net, &nm);
    tt_expect_array(TRUNK, m, kase, "means_eval", FWD_TOL);
    free(m);
    const eng_tensor *feat = regnet_forward(be, net, &x, true);
    f = nnt_download(be, feat);
    tt_expect_array(TRUNK, f, kase, "feat_train", FWD_TOL);
    free(f);
    check_stats(be, net, kase);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, regnet_param_table(net));
    regnet_backward(be, net, &r);
    check_grads(be, net, kase, 1.0);
    float *dx = nnt_download(be, regnet_input_grad(net));
    tt_expect_array(TRUNK, dx, kase, "dx", GRAD_TOL);
    free(dx);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    regnet_free(be, net);
    eng_backend_close(be);
}

Test(regnet, y_bottleneck_se_matches_classyvision) { check_case("y"); }
Test(regnet, x_basic_cifar_stem_matches_classyvision) { check_case("x_basic"); }
Test(regnet, z_linear_blocks_silu_res_stem_matches_classyvision) { check_case("z"); }
Test(regnet, vanilla_blocks_bn_settings_match_classyvision) { check_case("vanilla"); }

/* A preset's eval features for n images of `size` px (input phase 0), the fixture's TAG_feat_eval. */
static void check_preset_features(const char *name, const char *tag, int n, int size, int64_t out_dim)
{
    regnet_options o = regnet_defaults();
    regnet_preset(name, &o);
    eng_backend *be = nnt_open_cpu();
    regnet *net = make(be, &o);
    eng_tensor x = make_input(be, n, size, 0);
    regnet_plan(be, net, &x.shape);
    float *f = nnt_download(be, regnet_forward(be, net, &x, false));
    tt_expect_array(TRUNK, f, tag, "feat_eval", FWD_TOL);
    cr_expect_eq(regnet_out_dim(net), out_dim, "%s", name);
    free(f);
    eng_tensor_free(be, &x);
    regnet_free(be, net);
    eng_backend_close(be);
}

Test(regnet, y400_eval_features_match_classyvision) { check_preset_features("regnet_y_400mf", "y400", 2, 64, 440); }

/* A preset's input gradient: one train-mode forward of n images of `size` px (the input phase of
 * TAG_dx_phase.npy), the backward of L = Σ feat·r, and the gradient with respect to the input
 * against TAG_dx (relative GRAD_TOL). */
static void check_preset_input_grad(const char *name, const char *tag, int n, int size)
{
    regnet_options o = regnet_defaults();
    regnet_preset(name, &o);
    eng_backend *be = nnt_open_cpu();
    regnet *net = make(be, &o);
    char *phase_of = xasprintf("%s_dx", tag);
    eng_tensor x = make_input(be, n, size, tt_fixture_phase(TRUNK, phase_of));
    free(phase_of);
    regnet_set_input_grad(be, net, true);
    regnet_plan(be, net, &x.shape);
    const eng_tensor *feat = regnet_forward(be, net, &x, true);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, regnet_param_table(net));
    regnet_backward(be, net, &r);
    float *dx = nnt_download(be, regnet_input_grad(net));
    tt_expect_array_n(TRUNK, dx, (size_t)eng_numel(&x.shape), tag, "dx", GRAD_TOL);
    free(dx);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    regnet_free(be, net);
    eng_backend_close(be);
}

/* regnet_y_400mf (ClassyVision's defaults) in training, 4 images of 64 px: the input gradient
 * against ClassyVision's float64 one (regnet_y400_dx; why 4 images and which phase:
 * make_regnet_fixtures.py's Y400_DX). */
Test(regnet, y400_input_gradient_matches_classyvision, .timeout = 120)
{
    check_preset_input_grad("regnet_y_400mf", "y400", 4, 64);
}

/* A large preset: VISSL's SwAV RegNet, 80 M parameters, one 32 px image. */
Test(regnet, y16gf_eval_features_match_classyvision, .timeout = 120)
{
    check_preset_features("regnet_y_16gf", "y16", 1, 32, 3024);
}

/* ---- accumulation, memory ------------------------------------------------------------------------ */

/* Two backward passes without zeroing give twice the gradients, and a second step at the
 * planned shape (plan again, eval and train forwards, backward) allocates nothing. */
Test(regnet, gradients_accumulate_and_a_step_allocates_nothing)
{
    const char *kase = "z"; /* SE, SiLU, max pool, blocks with and without a shortcut */
    regnet_case c = load_case(kase);
    eng_backend *be = nnt_open_cpu();
    tt_count_allocations(be);
    regnet *net = make(be, &c.opt);
    eng_tensor x = make_input(be, c.n, c.size, tt_fixture_phase(TRUNK, kase));
    regnet_plan(be, net, &x.shape);
    const eng_tensor *feat = regnet_forward(be, net, &x, true);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, regnet_param_table(net));
    regnet_backward(be, net, &r);
    int before = tt_allocations();
    regnet_plan(be, net, &x.shape);
    regnet_forward(be, net, &x, false);
    regnet_forward(be, net, &x, true); /* the running statistics move again: not compared */
    regnet_backward(be, net, &r);
    cr_expect_eq(tt_allocations(), before, "a planned step allocates nothing");
    check_grads(be, net, kase, 2.0);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    regnet_free(be, net);
    eng_backend_close(be);
}

/* ---- from a config ------------------------------------------------------------------------------ */

Test(regnet, a_config_builds_the_trunk_with_vissl_names)
{
    model_options o = nnt_model_options("config:\n  MODEL:\n    TRUNK:\n      NAME: regnet\n      TRUNK_PARAMS:\n"
                                        "        REGNET: {name: regnet_x_400mf}\n"
                                        "    FEATURE_EVAL_SETTINGS:\n      EVAL_MODE_ON: True\n"
                                        "      FREEZE_TRUNK_ONLY: True\n      EXTRACT_TRUNK_FEATURES_ONLY: True\n"
                                        "      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res4, [AdaptiveAvgPool2d, [[2, 2]]]],"
                                        " [avgpool, [Identity, []]]]\n",
                                        NULL);
    cr_assert_eq(o.trunk.kind, TRUNK_REGNET);
    cr_expect_eq(o.trunk.regnet.use_se, false, "RegNetX: no squeeze-excitation");
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, &o, 1, &err);
    cr_assert(m, "%s", err);
    cr_expect_str_eq(model_entry_at(m, 0)->name, "trunk.base_model._feature_blocks.conv1.stem.0.weight");
    eng_shape in[1] = {eng_shape4(2, 3, 64, 64)};
    cr_assert_eq(model_plan(be, m, in, 1, &err), 0, "%s", err);
    model_forward(be, m, false);
    cr_assert_eq(model_output_count(m), 2);
    cr_expect_eq(model_output(m, 0)->shape.dim[1], 160 * 4, "res4 (x_400mf: 160 channels) pooled to 2 × 2");
    cr_expect_eq(model_output(m, 1)->shape.dim[1], 384, "avgpool: the last stage's 384 channels (ClassyVision; "
                                                        "torchvision rounds it to 400)");
    model_free(be, m);
    eng_backend_close(be);
}

/* VISSL's SwAV model files for RegNets (configs/pretrain/swav/models/): each composes, and its
 * swav_head takes the trunk's feature width. */
Test(regnet, swav_model_files_give_the_widths_their_heads_take)
{
    static const struct {
        const char *file;
        int64_t width;
    } FILES[] = {
        {"configs/pretrain/swav/models/regnet400mf.yaml", 440},
        {"configs/pretrain/swav/models/regnet16Gf.yaml", 3024},
        {"configs/pretrain/swav/models/regnet128Gf.yaml", 7392},
        {"configs/pretrain/swav/models/regnet256Gf.yaml", 10444},
    };
    for (size_t i = 0; i < ARRAY_LEN(FILES); i++) {
        model_options o = nnt_model_options(NULL, FILES[i].file);
        cr_assert_eq(o.trunk.kind, TRUNK_REGNET, "%s", FILES[i].file);
        const regnet_stages *st = &o.trunk.stages;
        cr_expect_eq(st->width[st->n - 1], FILES[i].width, "%s", FILES[i].file);
        cr_expect_eq(o.heads[0].chain[0].dims[0], FILES[i].width, "%s: the head's input", FILES[i].file);
    }
}

/* ---- complexity ---------------------------------------------------------------------------------- */

/* regnet_costs_upto's rows against ClassyVision's profiler rules run on the re-stated model:
 * regnet_TAG_complexity.txt, "name kind flops params activations" per module call, then the total. */
static void check_costs(const regnet_options *o, const char *tag, int64_t size)
{
    eng_backend *be = nnt_open_cpu();
    regnet *net = make(be, o);
    eng_shape in = eng_shape4(1, 3, size, size);
    eng_layer_cost *rows;
    int n;
    char *err = NULL;
    cr_assert_eq(regnet_costs_upto(net, &in, NULL, regnet_feature_count(regnet_get_stages(net)) - 1, NULL, &rows, &n,
                                   &err), 0, "%s: %s", tag, err);
    tt_check_cost_rows(TRUNK, tag, rows, n);
    eng_costs_free(rows, n);
    regnet_free(be, net);
    eng_backend_close(be);
}

Test(regnet, complexity_rows_follow_classyvisions_profiler)
{
    const char *cases[] = {"y", "x_basic", "z", "vanilla"};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        regnet_case c = load_case(cases[i]);
        check_costs(&c.opt, cases[i], 32);
    }
    const char *presets[][2] = {{"regnet_y_400mf", "y400"}, {"regnet_x_400mf", "x400"}};
    for (size_t i = 0; i < ARRAY_LEN(presets); i++) {
        regnet_options o = regnet_defaults();
        regnet_preset(presets[i][0], &o);
        check_costs(&o, presets[i][1], 224);
    }
}

/* ---- a checkpoint written by PyTorch ------------------------------------------------------------ */

/* Case y's model (its parameters from a config) with the weights of `path` loaded through
 * MODEL.WEIGHTS_INIT's defaults: its eval features must be the case's. */
static void expect_case_y_features_from(const char *path)
{
    model_options o = nnt_model_options("config:\n  MODEL:\n    TRUNK:\n      NAME: regnet\n      TRUNK_PARAMS:\n"
                                        "        REGNET: {depth: 4, w_0: 16, w_a: 8, w_m: 2.0, group_width: 8, "
                                        "stem_width: 16}\n", NULL);
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, &o, 3, &err); /* random init, which the file replaces */
    cr_assert(m, "%s", err);
    model_weights_init w = {.opt = weights_init_defaults()};
    w.opt.params_file = path;
    cr_assert_eq(model_load_weights(be, m, &w, &err), 0, "%s", err);
    eng_shape in[1] = {eng_shape4(4, 3, 32, 32)};
    cr_assert_eq(model_plan(be, m, in, 1, &err), 0, "%s", err);
    float *x = nnt_formula_fill(eng_numel(&in[0]), X_ALPHA, tt_fixture_phase(TRUNK, "y"));
    model_upload_input(be, m, 0, x);
    model_forward(be, m, false);
    float *f = nnt_download(be, model_output(m, 0));
    tt_expect_array(TRUNK, f, "y", "feat_eval", FWD_TOL);
    free(f);
    free(x);
    model_free(be, m);
    eng_backend_close(be);
}

/* regnet_y_vissl.pt is case y's weights saved by torch as VISSL saves a checkpoint. */
Test(regnet, a_vissl_checkpoint_written_by_pytorch_loads_and_gives_its_features)
{
    char *path = test_fixture("nn", "regnet_y_vissl.pt");
    expect_case_y_features_from(path);
    free(path);
}

static int convert(const char *in, const char *out, const char *to, char **output)
{
    char *bin = test_build_path("selfsup");
    char *cmd = xasprintf("'%s' convert '%s' '%s' --to %s", bin, in, out, to);
    int rc = test_run(cmd, output);
    free(cmd);
    free(bin);
    return rc;
}

/* regnet_y_torchvision.pth holds the same weights in torchvision's RegNet: `selfsup convert`
 * gives them VISSL's names, and the way back gives torchvision's names again, every one;
 * regnet_y_classy.pth holds them under ClassyVision's names, which convert maps too. */
Test(regnet, selfsup_convert_maps_torchvision_regnet_names_both_ways, .timeout = 120)
{
    char *tv = test_fixture("nn", "regnet_y_torchvision.pth"), *dir = test_make_tmpdir(), *out = NULL;
    char *vissl = xasprintf("%s/vissl.torch", dir), *back = xasprintf("%s/back.safetensors", dir);
    cr_assert_eq(convert(tv, vissl, "vissl", &out), 0, "%s", out);
    cr_expect(strstr(out, "dropped 2 tensors (fc.weight, fc.bias)"), "%s", out);
    free(out);
    expect_case_y_features_from(vissl);
    cr_assert_eq(convert(vissl, back, "torchvision", &out), 0, "%s", out);
    free(out);
    weights_file *a, *b;
    char *err = NULL;
    cr_assert_eq(weights_read(tv, NULL, &a, &err), 0, "%s", err);
    cr_assert_eq(weights_read(back, NULL, &b, &err), 0, "%s", err);
    size_t matched = 0;
    for (size_t i = 0; i < weights_count(b); i++)
        for (size_t j = 0; j < weights_count(a); j++)
            matched += !strcmp(weights_at(b, i)->name, weights_at(a, j)->name);
    cr_expect_eq(matched, weights_count(b), "every name back in torchvision's");
    cr_expect_eq(weights_count(b) + 2, weights_count(a), "all but fc.weight and fc.bias");
    weights_close(a);
    weights_close(b);
    char *classy = test_fixture("nn", "regnet_y_classy.pth"); /* ClassyVision's own names */
    cr_assert_eq(convert(classy, vissl, "vissl", &out), 0, "%s", out);
    free(out);
    expect_case_y_features_from(vissl);
    free(classy);
    remove(vissl);
    remove(back);
    free(vissl);
    free(back);
    free(tv);
    test_rm_dir(dir);
}

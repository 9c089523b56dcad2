/*
 * test_optim.c — the trainer's optimizer (stages/train/optim.c) against torch.optim.
 *
 * tests/golden/make_optim_fixtures.py builds a small model with VISSL's module names out of
 * real torch modules, sorts its parameters into groups with VISSL 0.1.5's rules (written over
 * the module TYPES, where optim.c reads names and shapes), and runs 5 updates of SGD (momentum,
 * Nesterov, none), SGD inside Apex's LARC (scale and clip modes, a zero gradient on the way),
 * Adam and AdamW, from fixed gradients with a different lr and lr_head at every step. Here the
 * same parameters and gradients go through optim_step: the groups must be the same, and the
 * final parameters within 1e-5 of torch's (relative to each tensor's largest value; the only
 * differences are fused multiply-adds in ATen's kernels and LARC's norms summed in double).
 */
#include "config.h"
#include "nn.h"
#include "npy.h"
#include "params.h"
#include "train/optim.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5
#define STEPS 5

/* The fixture's model: parameters in named_parameters() order, and its BN buffers. */
static const struct {
    const char *name;
    eng_shape shape;
} PARAMS[] = {
    {"trunk._feature_blocks.conv1.weight", {4, {4, 3, 3, 3}}},
    {"trunk._feature_blocks.bn1.weight", {1, {4}}},
    {"trunk._feature_blocks.bn1.bias", {1, {4}}},
    {"trunk._feature_blocks.proj.weight", {2, {5, 4}}},
    {"trunk._feature_blocks.proj.bias", {1, {5}}},
    {"trunk._feature_blocks.ln.weight", {1, {5}}},
    {"trunk._feature_blocks.ln.bias", {1, {5}}},
    {"heads.0.clf.0.weight", {2, {6, 5}}},
    {"heads.0.clf.0.bias", {1, {6}}},
    {"heads.0.clf.1.weight", {1, {6}}},
    {"heads.0.clf.1.bias", {1, {6}}},
    {"heads.0.prototypes0.weight", {2, {3, 6}}},
};
#define NPARAMS ((int)(sizeof PARAMS / sizeof PARAMS[0]))
static const char *const BUFFERS[] = {"trunk._feature_blocks.bn1.running_mean", "trunk._feature_blocks.bn1.running_var",
                                      "heads.0.clf.1.running_mean", "heads.0.clf.1.running_var"};

static npy_array load(const char *kase, const char *what) { return test_fixture_npy("optim", kase, what); }

/* Parameters first (entry i = PARAMS[i]), then the buffers. */
static void build(eng_backend *be, eng_params *p)
{
    *p = (eng_params){0};
    for (int i = 0; i < NPARAMS; i++)
        eng_params_add(be, p, ENG_PARAM, PARAMS[i].shape, 0, "%s", PARAMS[i].name);
    for (size_t i = 0; i < sizeof BUFFERS / sizeof BUFFERS[0]; i++)
        eng_params_add(be, p, ENG_BUFFER, PARAMS[1].shape, 0, "%s", BUFFERS[i]);
    eng_params_alloc(be, p);
}

/* Each parameter's slice of a flat array into its value (or gradient) tensor. */
static void scatter(eng_backend *be, eng_params *p, const float *flat, bool grad)
{
    for (int i = 0, at = 0; i < NPARAMS; at += (int)eng_numel(&PARAMS[i].shape), i++)
        eng_upload(be, grad ? &p->entries[i].grad : &p->entries[i].value, flat + at);
}

static void run_case(const char *kase, const optim_options *o, const bool *trainable)
{
    eng_backend *be = nnt_open_cpu();
    eng_params p;
    build(be, &p);
    npy_array init = load(kase, "init"), lrs = load(kase, "lrs"), groups = load(kase, "groups"),
              final = load(kase, "final");
    scatter(be, &p, init.data, false);
    eng_tensor all = eng_params_values(&p);
    char *err = NULL;
    optim *opt = optim_new(be, p.entries, p.nentries, &all, trainable, o, &err);
    cr_assert(opt, "%s", err);
    for (int i = 0; i < NPARAMS; i++)
        cr_expect_eq((int)optim_group_of(opt, i), (int)((const float *)groups.data)[i], "%s: group of %s", kase,
                     PARAMS[i].name);
    for (int i = NPARAMS; i < p.nentries; i++)
        cr_expect_eq(optim_group_of(opt, i), OPTIM_NOT_UPDATED, "a buffer is not updated");
    for (int k = 0; k < STEPS; k++) {
        char what[16];
        snprintf(what, sizeof what, "grad%d", k);
        npy_array g = load(kase, what);
        scatter(be, &p, g.data, true);
        npy_close(&g);
        const double *r = (const double *)lrs.data + 2 * k;
        optim_step(be, opt, r[0], r[1]);
    }
    cr_expect_eq(optim_step_count(opt), STEPS);
    const float *want = final.data;
    for (int i = 0; i < NPARAMS; want += eng_numel(&PARAMS[i].shape), i++) {
        float *got = nnt_download(be, &p.entries[i].value);
        double e = nnt_rel_error_host(got, want, (size_t)eng_numel(&PARAMS[i].shape));
        cr_expect_leq(e, TOL, "%s: %s relative error %g", kase, PARAMS[i].name, e);
        free(got);
    }
    npy_close(&init), npy_close(&lrs), npy_close(&groups), npy_close(&final);
    optim_free(be, opt);
    eng_params_free(be, &p);
    eng_backend_close(be);
}

/* The fixture's settings (make_optim_fixtures.py: WD 0.05, HEAD_WD 0.02). */
static optim_options options(optim_name name, bool reg_bn, bool reg_bias)
{
    optim_options o = optim_defaults();
    o.name = name;
    o.weight_decay = 0.05;
    o.head_weight_decay = 0.02;
    o.regularize_bn = reg_bn;
    o.regularize_bias = reg_bias;
    return o;
}

Test(optim, sgd_in_larc_scale_mode_matches_torch_and_apex)
{
    optim_options o = options(OPTIM_SGD, false, false);
    o.use_larc = true;
    run_case("sgd_larc", &o, NULL);
}

Test(optim, nesterov_sgd_in_larc_clip_mode_with_a_non_trainable_parameter)
{
    optim_options o = options(OPTIM_SGD, true, true);
    o.nesterov = true;
    o.use_larc = true;
    o.larc_clip = true;
    o.larc_trust = 0.02;
    o.non_trainable[0] = "heads.0.prototypes0.weight";
    o.n_non_trainable = 1;
    run_case("sgd_nesterov_larc_clip", &o, NULL);
}

Test(optim, sgd_without_momentum_matches_torch)
{
    optim_options o = options(OPTIM_SGD, true, false);
    o.momentum = 0.0;
    run_case("sgd_plain", &o, NULL);
}

Test(optim, adam_matches_torch) { optim_options o = options(OPTIM_ADAM, false, true); run_case("adam", &o, NULL); }

Test(optim, adamw_matches_torch)
{
    optim_options o = options(OPTIM_ADAMW, true, true);
    o.beta1 = 0.8;
    o.beta2 = 0.99;
    run_case("adamw", &o, NULL);
}

/* A frozen part (trainable false) is left exactly as it was. */
Test(optim, frozen_entries_do_not_move)
{
    eng_backend *be = nnt_open_cpu();
    eng_params p;
    build(be, &p);
    npy_array init = load("sgd_plain", "init"), g = load("sgd_plain", "grad0");
    scatter(be, &p, init.data, false);
    scatter(be, &p, g.data, true);
    bool trainable[NPARAMS + 4];
    for (int i = 0; i < p.nentries; i++)
        trainable[i] = strncmp(p.entries[i].name, "trunk.", 6) != 0; /* FREEZE_TRUNK_ONLY */
    eng_tensor all = eng_params_values(&p);
    optim_options o = optim_defaults();
    char *err = NULL;
    optim *opt = optim_new(be, p.entries, p.nentries, &all, trainable, &o, &err);
    cr_assert(opt, "%s", err);
    float *before = nnt_download(be, &p.entries[0].value), *head_before = nnt_download(be, &p.entries[7].value);
    optim_step(be, opt, 0.5, 0.5);
    float *after = nnt_download(be, &p.entries[0].value), *head_after = nnt_download(be, &p.entries[7].value);
    cr_expect(memcmp(before, after, 108 * sizeof(float)) == 0, "the frozen trunk moved");
    cr_expect(memcmp(head_before, head_after, 30 * sizeof(float)) != 0, "the head did not move");
    cr_expect_eq(optim_group_of(opt, 0), OPTIM_NOT_UPDATED);
    free(before), free(after), free(head_before), free(head_after);
    npy_close(&init), npy_close(&g);
    optim_free(be, opt);
    eng_params_free(be, &p);
    eng_backend_close(be);
}

/* ---- from the config ---------------------------------------------------------------------- */

static bool from_yaml(const char *yaml, optim_options *o, cfg_err *err, cfg_t *cfg)
{
    *cfg = (cfg_t){0};
    return test_compose(cfg, err, yaml, NULL) && optim_options_from_config(cfg_map_get(cfg->root, "config"), o, err);
}

Test(optim, options_from_the_config)
{
    cfg_t cfg;
    cfg_err err;
    optim_options o;
    cr_assert(from_yaml("config:\n  OPTIMIZER:\n    use_larc: true\n    larc_config: {clip: true, trust_coefficient: 0.02}\n"
                        "    weight_decay: 0.000001\n    nesterov: true\n    regularize_bn: true\n"
                        "    head_optimizer_params: {use_different_wd: true, weight_decay: 0.02}\n"
                        "  MODEL:\n    NON_TRAINABLE_PARAMS: [heads.0.prototypes0.weight]\n",
                        &o, &err, &cfg),
              "%s", err.msg);
    cr_expect(o.name == OPTIM_SGD && o.use_larc && o.larc_clip && o.nesterov && o.regularize_bn && o.regularize_bias);
    cr_expect_float_eq(o.larc_trust, 0.02, 1e-15);
    cr_expect_float_eq(o.larc_eps, 1e-8, 1e-20);
    cr_expect_float_eq(o.weight_decay, 1e-6, 1e-20);
    cr_expect_float_eq(o.head_weight_decay, 0.02, 1e-15);
    cr_expect_float_eq(o.momentum, 0.9, 1e-15);
    cr_expect_eq(o.n_non_trainable, 1);
    cr_expect_str_eq(o.non_trainable[0], "heads.0.prototypes0.weight");
    cfg_destroy(&cfg);
    /* without use_different_wd the heads take OPTIMIZER.weight_decay */
    cr_assert(from_yaml("config:\n  OPTIMIZER: {name: adamw, weight_decay: 0.05, betas: [0.8, 0.99],\n"
                        "    head_optimizer_params: {weight_decay: 0.3}}\n",
                        &o, &err, &cfg),
              "%s", err.msg);
    cr_expect(o.name == OPTIM_ADAMW);
    cr_expect_float_eq(o.head_weight_decay, 0.05, 1e-15);
    cr_expect_float_eq(o.beta1, 0.8, 1e-15);
    cr_expect_float_eq(o.beta2, 0.99, 1e-15);
    cfg_destroy(&cfg);
}

Test(optim, optimizers_it_does_not_run_are_refused_with_their_line)
{
    cfg_t cfg;
    cfg_err err;
    optim_options o;
    cr_expect(!from_yaml("config:\n  OPTIMIZER:\n    name: rmsprop\n", &o, &err, &cfg));
    cr_expect(strstr(err.msg, ":3:") && strstr(err.msg, "'rmsprop' is not run"), "%s", err.msg);
    cfg_destroy(&cfg);
    cr_expect(!from_yaml("config:\n  OPTIMIZER:\n    name: adam\n    use_larc: true\n", &o, &err, &cfg));
    cr_expect(strstr(err.msg, "use_larc") && strstr(err.msg, "SGD only"), "%s", err.msg);
    cfg_destroy(&cfg);
}

/* ---- one call for every tensor ------------------------------------------------------------- */

/* Tensors of sizes around the cpu backend's 32768-element chunks (one element, a partial
 * chunk, exactly one, one more, several with a tail), each with its own rates: one fused call
 * leaves every element as a call per tensor does, for SGD (Nesterov momentum, the first step
 * and a later one) and AdamW. */
Test(optim, one_fused_call_updates_every_tensor_as_a_call_each)
{
    eng_backend *be = nnt_open_cpu();
    enum { K = 5 };
    static const int64_t sizes[K] = {1, 7, 32768, 32769, 100003};
    eng_tensor p[2][K], g[K], s1[2][K], s2[2][K];
    uint64_t state = 0x853c49e6748fea9bu;
    for (int k = 0; k < K; k++) {
        float *h = xmalloc((size_t)sizes[k] * sizeof *h);
        g[k] = eng_tensor_new(be, eng_shape2(1, sizes[k]));
        for (int64_t i = 0; i < sizes[k]; i++) {
            state = state * 6364136223846793005u + 1442695040888963407u;
            h[i] = (float)((int64_t)(state >> 40) - (1 << 23)) / (float)(1 << 22);
        }
        eng_upload(be, &g[k], h);
        for (int c = 0; c < 2; c++) {
            p[c][k] = eng_tensor_new(be, eng_shape2(1, sizes[k]));
            s1[c][k] = eng_tensor_new(be, eng_shape2(1, sizes[k]));
            s2[c][k] = eng_tensor_new(be, eng_shape2(1, sizes[k]));
            for (int64_t i = 0; i < sizes[k]; i++)
                h[i] = 0.5f + (float)i * 1e-5f;
            eng_upload(be, &p[c][k], h);
            eng_zero(be, &s1[c][k]);
            eng_zero(be, &s2[c][k]);
        }
        free(h);
    }
    eng_sgd_item sgd[K];
    eng_adam_item adam[K];
    for (int step = 0; step < 3; step++)
        for (int k = 0; k < K; k++) {
            eng_sgd_args a = {.lr = 0.1f * (float)(k + 1), .weight_decay = 1e-4f * (float)k, .momentum = 0.9f,
                              .grad_scale = 1.0f, .nesterov = true, .first = step == 0};
            eng_adam_args b = {.lr = 0.01 * (k + 1), .weight_decay = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                               .decoupled = true, .step = step + 1};
            if (step < 2) {
                eng_sgd_step(be, &a, &p[0][k], &g[k], &s1[0][k]);
                sgd[k] = (eng_sgd_item){.a = a, .p = &p[1][k], .g = &g[k], .buf = &s1[1][k]};
            } else {
                eng_adam_step(be, &b, &p[0][k], &g[k], &s1[0][k], &s2[0][k]);
                adam[k] = (eng_adam_item){.a = b, .p = &p[1][k], .g = &g[k], .m = &s1[1][k], .v = &s2[1][k]};
            }
            if (k == K - 1 && step < 2)
                eng_sgd_step_many(be, sgd, K);
            if (k == K - 1 && step == 2)
                eng_adam_step_many(be, adam, K);
        }
    for (int k = 0; k < K; k++) {
        float *a = xmalloc((size_t)sizes[k] * sizeof *a), *b = xmalloc((size_t)sizes[k] * sizeof *b);
        eng_download(be, &p[0][k], a);
        eng_download(be, &p[1][k], b);
        cr_expect_arr_eq(a, b, (size_t)sizes[k] * sizeof *a, "tensor %d (%lld elements)", k, (long long)sizes[k]);
        free(a), free(b);
        eng_tensor_free(be, &g[k]);
        for (int c = 0; c < 2; c++)
            eng_tensor_free(be, &p[c][k]), eng_tensor_free(be, &s1[c][k]), eng_tensor_free(be, &s2[c][k]);
    }
    eng_backend_close(be);
}

/* A momentum encoder's update, k·m + q·(1 − m), against PyTorch 1.13's float32 tensors
 * (`k * 0.999 + q * (1.0 - 0.999)`, printed with float.hex): each product is rounded, then the
 * sum. The pairs are ones where computing it in double and rounding once gives another float. */
Test(optim, ema_rounds_each_product_as_torch_does)
{
    static const float k[] = {-0x1.bc4abap-2f, -0x1.4398dap-2f, -0x1.4369e8p+0f, 0x1.6661fep-2f, 1.0f, 0.0f};
    static const float q[] = {0x1.2ac7a4p-3f, 0x1.376bc8p-3f, -0x1.5f0344p-1f, 0x1.371f8ap-1f, 0.0f, 1.0f};
    static const float torch[] = {-0x1.bbb2c0p-2f, -0x1.431e28p-2f, -0x1.43440cp+0f, 0x1.66a58cp-2f, 0.999f,
                                  (float)(1.0 - 0.999)};
    eng_backend *be = nnt_open_cpu();
    eng_tensor src = eng_tensor_new(be, eng_shape2(1, 6)), dst = eng_tensor_new(be, eng_shape2(1, 6));
    eng_upload(be, &src, q);
    eng_upload(be, &dst, k);
    eng_ema(be, 0.999, &src, &dst);
    float got[6];
    eng_download(be, &dst, got);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(got[i], torch[i], "element %d: %a, torch %a", i, (double)got[i], (double)torch[i]);
    eng_tensor_free(be, &src), eng_tensor_free(be, &dst);
    eng_backend_close(be);
}

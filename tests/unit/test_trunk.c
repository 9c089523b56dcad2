/*
 * test_trunk.c — what holds for every trunk behind nn/trunk.h: activation checkpointing
 * (MODEL.ACTIVATION_CHECKPOINTING) gives bit for bit the gradients and the running statistics of
 * the run that keeps every activation, with less activation memory, whatever the number of
 * segments and whatever the blocks are (ResNet's, RegNet's with squeeze-excitation and SiLU,
 * blocks without a shortcut). TRUNK_VERBOSE=1 prints the memory figures. And VISSL's own config
 * files for the AlexNet and EfficientNet trunks (linear and SVM benchmarks, SimCLR's and SwAV's
 * model files) compose, build their model and plan it at their input size: every head takes the
 * feature width its config says.
 */
#include "config.h"
#include "model.h"
#include "nn.h"
#include "trunk.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole parameter-gradient and buffer allocations after one training step from the formula
 * weights on input x; *bytes: the trunk's planned activation memory. */
static float *step(eng_backend *be, trunk_options o, const eng_tensor *x, size_t *bytes, int64_t *n)
{
    char *err = NULL;
    trunk *t = trunk_new(be, &o, 1, &err);
    cr_assert(t, "%s", err);
    eng_params_init_formula(be, trunk_param_table(t));
    trunk_plan(be, t, &x->shape);
    const eng_tensor *feat = trunk_forward(be, t, x, true);
    eng_tensor r = eng_tensor_new(be, feat->shape);
    float *rh = nnt_formula_fill(eng_numel(&r.shape), 0.3247179572447460, 0);
    eng_upload(be, &r, rh);
    trunk_backward(be, t, &r);
    eng_tensor g = eng_params_grads(trunk_param_table(t)), b = eng_params_buffers(trunk_param_table(t));
    *n = eng_numel(&g.shape) + eng_numel(&b.shape);
    float *out = xmalloc((size_t)*n * sizeof *out);
    eng_download(be, &g, out);
    eng_download(be, &b, out + eng_numel(&g.shape));
    *bytes = trunk_activation_bytes(t);
    free(rh);
    eng_tensor_free(be, &r);
    trunk_free(be, t);
    return out;
}

static void expect_same_with_checkpointing(const char *what, trunk_options o, int64_t n, int64_t size)
{
    eng_backend *be = nnt_open_cpu();
    float *xh;
    eng_tensor x = nnt_host_tensor(be, eng_shape4(n, 3, size, size), 5, &xh);
    size_t whole, part;
    int64_t count, count2;
    float *want = step(be, o, &x, &whole, &count);
    for (int splits = 1; splits <= 4; splits++) {
        o.resnet.checkpoint_splits = o.regnet.checkpoint_splits = splits;
        float *got = step(be, o, &x, &part, &count2);
        cr_assert_eq(count2, count);
        cr_expect(!memcmp(got, want, (size_t)count * sizeof *got), "%s, %d segments: gradients or running "
                  "statistics differ", what, splits);
        if (splits == 1) /* one segment holds every block: nothing is saved */
            cr_expect_leq(part, whole, "%s, 1 segment: activation memory", what);
        else
            cr_expect_lt(part, whole, "%s, %d segments: activation memory", what, splits);
        if (getenv("TRUNK_VERBOSE"))
            fprintf(stderr, "trunk: %-28s %d segments: activation memory %.2f MB of %.2f MB (%.0f%%)\n", what,
                    splits, part / 1e6, whole / 1e6, 100.0 * part / whole);
        free(got);
    }
    free(want);
    free(xh);
    eng_tensor_free(be, &x);
    eng_backend_close(be);
}

Test(trunk, activation_checkpointing_gives_the_same_gradients_with_less_memory, .timeout = 300)
{
    trunk_options o = trunk_defaults();
    o.resnet.depth = 18;
    expect_same_with_checkpointing("ResNet-18, 4 x 64 px", o, 4, 64);
    o.resnet.depth = 50;
    expect_same_with_checkpointing("ResNet-50, 2 x 64 px", o, 2, 64);

    o = trunk_defaults();
    o.kind = TRUNK_REGNET;
    regnet_preset("regnet_y_400mf", &o.regnet);
    expect_same_with_checkpointing("RegNetY-400MF, 4 x 64 px", o, 4, 64);
    o.regnet = regnet_defaults();
    regnet_preset("regnet_z_500mf", &o.regnet); /* SiLU, blocks without a shortcut */
    expect_same_with_checkpointing("RegNetZ-500MF, 4 x 64 px", o, 4, 64);
    o.regnet = regnet_defaults();
    o.regnet.depth = 4, o.regnet.w_0 = 8, o.regnet.w_a = 8, o.regnet.w_m = 2, o.regnet.group_width = 8;
    o.regnet.block_type = REGNET_VANILLA_BLOCK, o.regnet.use_se = false;
    expect_same_with_checkpointing("RegNet of vanilla blocks", o, 4, 32);
}

/* From the config: VISSL's keys turn it on, with the number of segments; a feature extractor
 * (no backward) keeps every activation. */
Test(trunk, activation_checkpointing_comes_from_the_config)
{
    model_options o = nnt_model_options("config:\n  MODEL:\n    ACTIVATION_CHECKPOINTING:\n"
                                        "      USE_ACTIVATION_CHECKPOINTING: True\n"
                                        "      NUM_ACTIVATION_CHECKPOINTING_SPLITS: 3\n", NULL);
    cr_expect_eq(o.trunk.resnet.checkpoint_splits, 3);
    o = nnt_model_options("config:\n  MODEL:\n    ACTIVATION_CHECKPOINTING:\n"
                          "      NUM_ACTIVATION_CHECKPOINTING_SPLITS: 3\n", NULL);
    cr_expect_eq(o.trunk.resnet.checkpoint_splits, 0, "USE_ACTIVATION_CHECKPOINTING is off by default");
}

/* ---- VISSL's config files for the other trunks ---------------------------------------------- */

/* `base` with `+config/<group>=<model>` composed on top, as VISSL's command lines do it. */
static model_options compose_with_model(const char *base, const char *group, const char *file_name)
{
    char *override = xasprintf("+config/%s=%s", group, file_name), *file = test_path(base), *dir = test_path("configs");
    char *overrides[] = {override};
    cfg_t cfg = {0};
    cfg_err err;
    cfg_options opt = {.configs_dir = dir, .check_paths = false};
    cr_assert(cfg_compose(&cfg, &opt, file, 1, overrides, &err), "%s + %s: %s", base, file_name, err.msg);
    model_options o;
    cr_assert(model_options_from_config(cfg_path(cfg.root, "config.MODEL"), &o, &err), "%s: %s", file_name, err.msg);
    cfg_destroy(&cfg);
    free(override), free(file), free(dir);
    return o;
}

/* Build the model and plan it for one image of `size` px: the heads' widths must fit. */
static void expect_plans(const model_options *o, int64_t size, const char *what)
{
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, o, 1, &err);
    cr_assert(m, "%s: %s", what, err);
    eng_shape in = eng_shape4(2, 3, size, size);
    cr_expect_eq(model_plan(be, m, &in, 1, &err), 0, "%s at %lld px: %s", what, (long long)size, err);
    model_free(be, m);
    eng_backend_close(be);
}

Test(trunk, vissl_alexnet_benchmark_configs_build_and_plan, .timeout = 300)
{
    static const char *const MODELS[] = {"alexnet_bvlc_supervised", "alexnet_colorization", "alexnet_deepcluster",
                                         "alexnet_jigsaw", "alexnet_rotnet"};
    static const char *const BENCH[][2] = {
        {"configs/benchmark/linear_image_classification/imagenet1k/eval_alexnet_8gpu_transfer_in1k_linear.yaml",
         "benchmark/linear_image_classification/imagenet1k/models"},
        {"configs/benchmark/linear_image_classification/voc07/eval_alexnet_8gpu_transfer_voc07_svm.yaml",
         "benchmark/linear_image_classification/voc07/models"},
    };
    for (size_t b = 0; b < ARRAY_LEN(BENCH); b++)
        for (size_t i = 0; i < ARRAY_LEN(MODELS); i++) {
            model_options o = compose_with_model(BENCH[b][0], BENCH[b][1], MODELS[i]);
            cr_expect_eq(o.trunk.kind, TRUNK_ALEXNET, "%s", MODELS[i]);
            /* HEAD.BATCHNORM_MOMENTUM: the base file's 0.1, the Caffe2 models' files' 0.001 */
            bool caffe2_bn = b == 0 && (strstr(MODELS[i], "bvlc") || strstr(MODELS[i], "jigsaw"));
            cr_expect_float_eq(o.heads[0].chain[0].bn_momentum, caffe2_bn ? 0.001 : 0.1, 1e-12, "%s", MODELS[i]);
            /* the model files' crops: 227 px for the Caffe2 models (bvlc, colorization, jigsaw) */
            bool crop227 = !strstr(MODELS[i], "rotnet") && !strstr(MODELS[i], "deepcluster");
            expect_plans(&o, crop227 ? 227 : 224, MODELS[i]);
        }
}

/* VISSL's Colorization benchmark: the ResNet-50 of Goyal et al. 2019 reads the L of a LAB image
 * (one input channel) and keeps res5 at 14 x 14 (LAYER4_STRIDE 1), which the linear heads' pools
 * (res5: 12 x 12 stride 2 -> 2 x 2 x 2048 = 8192) are sized for. */
Test(trunk, vissl_colorization_resnet_benchmark_configs_build_and_plan, .timeout = 300)
{
    static const char *const BENCH[][2] = {
        {"configs/benchmark/linear_image_classification/imagenet1k/eval_resnet_8gpu_transfer_in1k_linear.yaml",
         "benchmark/linear_image_classification/imagenet1k/models"},
        {"configs/benchmark/linear_image_classification/voc07/eval_resnet_8gpu_transfer_voc07_svm.yaml",
         "benchmark/linear_image_classification/voc07/models"},
    };
    for (size_t b = 0; b < ARRAY_LEN(BENCH); b++) {
        model_options o = compose_with_model(BENCH[b][0], BENCH[b][1], "resnet50_colorization");
        cr_expect_eq(o.trunk.kind, TRUNK_RESNET, "%s", BENCH[b][0]);
        cr_expect_eq(o.input_type, MODEL_INPUT_LAB, "%s", BENCH[b][0]);
        cr_expect_eq(o.trunk.resnet.in_channels, 1, "%s", BENCH[b][0]);
        cr_expect_eq(o.trunk.resnet.layer4_stride, 1, "%s", BENCH[b][0]);
        expect_plans(&o, 224, "resnet50_colorization");
    }
}

Test(trunk, vissl_efficientnet_configs_build_and_plan, .timeout = 300)
{
    model_options o = compose_with_model(
        "configs/benchmark/linear_image_classification/imagenet1k/eval_resnet_8gpu_transfer_in1k_linear.yaml",
        "benchmark/linear_image_classification/imagenet1k/models", "efficientNet_B0");
    cr_assert_eq(o.trunk.kind, TRUNK_EFFICIENTNET);
    cr_expect_eq(efficientnet_block_count(&o.trunk.efficientnet), 16);
    expect_plans(&o, 224, "efficientNet_B0 linear");
    static const char *const PRETRAIN[][2] = {{"configs/pretrain/simclr/simclr_8node_resnet.yaml", "pretrain/simclr/models"},
                                              {"configs/pretrain/swav/swav_8node_resnet.yaml", "pretrain/swav/models"}};
    static const int64_t WIDTH[] = {1280, 1280, 1408}; /* scale_width(1280) for B0, B1, B2 */
    for (size_t p = 0; p < ARRAY_LEN(PRETRAIN); p++)
        for (int v = 0; v < 3; v++) {
            char *name = xasprintf("efficientnet_B%d", v);
            o = compose_with_model(PRETRAIN[p][0], PRETRAIN[p][1], name);
            cr_expect_eq(o.trunk.kind, TRUNK_EFFICIENTNET, "%s", name);
            cr_expect_eq(o.heads[0].chain[0].dims[0], WIDTH[v], "%s: the head's input", name);
            cr_expect_eq(efficientnet_scale_width(1280, &o.trunk.efficientnet), WIDTH[v], "%s", name);
            free(name);
        }
}

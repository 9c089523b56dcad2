/*
 * test_complexity.c — per-layer FLOPs, parameters and activations (nn/complexity.c) against
 * ClassyVision's profiler rules applied to torchvision's modules.
 *
 * tests/golden/make_complexity_fixtures.py restates the profiler's rules in Python, hooks every
 * leaf module of torchvision's ResNet-50 (arranged as VISSL's trunk) and of PyTorch copies of
 * VISSL's heads, and writes one row per module call: name, kind, FLOPs, parameters, activations,
 * then the totals. Every row must match exactly, in order. Anchors besides the fixture:
 * ResNet-50 has 23,508,032 trunk parameters and 25,557,032 with torchvision's fc (an mlp
 * [2048, 1000] head), about 4.1 G multiply-adds at 224 px; LayerNorm and siamese_concat_view make
 * the FLOPs unknown, as the profiler's NotImplementedError makes VISSL skip them.
 * Feature extractors (LINEAR_EVAL_FEAT_POOL_OPS_MAP), built from composed configs: fe_r50_evalmlp
 * (the in1k linear benchmark's res3 / res4 AvgPool2d entries, eval_mlp heads; the trunk stops
 * after layer3, so layer4 is uncalled but its parameters count) and fe_r50_ops (MaxPool2d,
 * AdaptiveAvgPool2d, AdaptiveMaxPool2d, Identity; FLOPs unknown through AdaptiveMaxPool2d).
 * COMPLEXITY_VERBOSE=1 prints the totals.
 */
#include "complexity.h"
#include "config.h"
#include "heads.h"
#include "model.h"
#include "resnet.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every row of fixtures/nn/complexity_CASE.txt against `rows`, then the totals line. */
static void expect_rows(const char *kase, const eng_layer_cost *rows, int n)
{
    char *file = xasprintf("complexity_%s.txt", kase);
    char *path = test_fixture("nn", file);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char name[160], kind[32];
    long long flops, params, acts;
    int i = 0;
    bool total_seen = false;
    while (fscanf(f, "%159s %31s %lld %lld %lld", name, kind, &flops, &params, &acts) == 5) {
        if (strcmp(name, "total") == 0) {
            eng_layer_cost t = eng_costs_total(rows, n);
            cr_expect_eq(t.flops, flops, "%s total FLOPs %" PRId64 ", want %lld", kase, t.flops, flops);
            cr_expect_eq(t.params, params, "%s total parameters %" PRId64 ", want %lld", kase, t.params, params);
            cr_expect_eq(t.activations, acts, "%s total activations %" PRId64 ", want %lld", kase, t.activations,
                         acts);
            total_seen = true;
            break;
        }
        cr_assert_lt(i, n, "%s: the profiler has more rows (%s)", kase, name);
        const eng_layer_cost *r = &rows[i++];
        cr_expect_str_eq(r->name, name, "%s row %d", kase, i - 1);
        cr_expect_str_eq(r->kind, kind, "%s %s kind", kase, name);
        cr_expect_eq(r->flops, flops, "%s %s FLOPs %" PRId64 ", want %lld", kase, name, r->flops, flops);
        cr_expect_eq(r->params, params, "%s %s parameters %" PRId64 ", want %lld", kase, name, r->params, params);
        cr_expect_eq(r->activations, acts, "%s %s activations %" PRId64 ", want %lld", kase, name, r->activations,
                     acts);
    }
    fclose(f);
    cr_expect(total_seen, "%s: no totals line", kase);
    cr_expect_eq(i, n, "%s: %d rows, the profiler has %d", kase, n, i);
    free(path);
    free(file);
}

static resnet *make_trunk(eng_backend *be, int depth, resnet_norm norm)
{
    resnet_options o = resnet_defaults();
    o.depth = depth;
    o.norm = norm;
    char *err = NULL;
    resnet *net = resnet_new(be, &o, 1, &err);
    cr_assert(net, "%s", err);
    return net;
}

static head *make_head(eng_backend *be, const head_options *o)
{
    char *err = NULL;
    head *h = head_new(be, o, 1, &err);
    cr_assert(h, "%s", err);
    return h;
}

static head_options dims_opts(head_type t, const int64_t *dims, int n)
{
    head_options o = head_defaults(t);
    o.ndims = n;
    memcpy(o.dims, dims, (size_t)n * sizeof *dims);
    return o;
}

Test(complexity, resnet50_224_matches_the_profiler_row_by_row)
{
    eng_backend *be = nnt_open_cpu();
    resnet *net = make_trunk(be, 50, RESNET_NORM_BATCH);
    eng_shape in = eng_shape4(1, 3, 224, 224);
    eng_layer_cost *rows;
    int n;
    char *err = NULL;
    cr_assert_eq(resnet_costs(net, &in, &rows, &n, &err), 0, "%s", err);
    expect_rows("r50_224", rows, n);
    eng_layer_cost t = eng_costs_total(rows, n);
    if (getenv("COMPLEXITY_VERBOSE"))
        fprintf(stderr, "complexity: r50 %" PRId64 " FLOPs, %" PRId64 " params, %" PRId64 " activations, %d rows\n",
                t.flops, t.params, t.activations, n);
    cr_expect_eq(t.params, 23508032, "the trunk alone");
    cr_expect_eq(t.params, resnet_param_count(net));
    cr_expect(t.flops > 4000000000 && t.flops < 4200000000, "about 4.1 G multiply-adds: %" PRId64, t.flops);
    /* With torchvision's fc as an mlp [2048, 1000] head on the 1 × 2048 feature. */
    static const int64_t fc[] = {2048, 1000};
    head_options o = dims_opts(HEAD_MLP, fc, 2);
    head *h = make_head(be, &o);
    eng_layer_cost *hrows;
    int hn;
    eng_shape feat = eng_shape2(1, 2048);
    cr_assert_eq(head_costs(h, &feat, &hrows, &hn, &err), 0, "%s", err);
    expect_rows("head_fc", hrows, hn);
    eng_layer_cost ht = eng_costs_total(hrows, hn);
    cr_expect_eq(t.params + ht.params, 25557032, "torchvision's resnet50 with fc");
    eng_costs_free(hrows, hn);
    eng_costs_free(rows, n);
    head_free(be, h);
    resnet_free(be, net);
    eng_backend_close(be);
}

Test(complexity, batch_size_scales_everything_but_parameters)
{
    eng_backend *be = nnt_open_cpu();
    resnet *net = make_trunk(be, 50, RESNET_NORM_BATCH);
    eng_shape one = eng_shape4(1, 3, 224, 224), four = eng_shape4(4, 3, 224, 224);
    eng_layer_cost *a, *b;
    int na, nb;
    char *err = NULL;
    cr_assert_eq(resnet_costs(net, &one, &a, &na, &err), 0, "%s", err);
    cr_assert_eq(resnet_costs(net, &four, &b, &nb, &err), 0, "%s", err);
    cr_assert_eq(na, nb);
    eng_layer_cost ta = eng_costs_total(a, na), tb = eng_costs_total(b, nb);
    cr_expect_eq(tb.flops, 4 * ta.flops);
    cr_expect_eq(tb.activations, 4 * ta.activations);
    cr_expect_eq(tb.params, ta.params);
    eng_costs_free(a, na);
    eng_costs_free(b, nb);
    resnet_free(be, net);
    eng_backend_close(be);
}

Test(complexity, layernorm_trunk_rows_match_and_flops_are_unknown)
{
    eng_backend *be = nnt_open_cpu();
    resnet *net = make_trunk(be, 18, RESNET_NORM_LAYER);
    eng_shape in = eng_shape4(1, 3, 224, 224);
    eng_layer_cost *rows;
    int n;
    char *err = NULL;
    cr_assert_eq(resnet_costs(net, &in, &rows, &n, &err), 0, "%s", err);
    expect_rows("r18ln_224", rows, n);
    eng_layer_cost t = eng_costs_total(rows, n);
    cr_expect_eq(t.flops, ENG_COST_UNKNOWN);
    cr_expect_eq(t.params, resnet_param_count(net));
    eng_costs_free(rows, n);
    resnet_free(be, net);
    eng_backend_close(be);
}

Test(complexity, heads_match_the_profiler_row_by_row)
{
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    eng_layer_cost *rows;
    int n;
    eng_shape feat = eng_shape2(1, 2048);

    static const int64_t md[] = {2048, 512, 128};
    head_options o = dims_opts(HEAD_MLP, md, 3);
    o.use_bn = o.use_relu = o.use_dropout = true;
    head *h = make_head(be, &o);
    cr_assert_eq(head_costs(h, &feat, &rows, &n, &err), 0, "%s", err);
    expect_rows("head_mlp", rows, n);
    cr_expect_eq(eng_costs_total(rows, n).params, head_param_count(h));
    eng_costs_free(rows, n);
    head_free(be, h);

    static const int64_t sd[] = {2048, 2048, 128};
    o = dims_opts(HEAD_SWAV, sd, 3);
    o.use_bn = true;
    o.nclusters = 2;
    o.num_clusters[0] = 3000;
    o.num_clusters[1] = 100;
    h = make_head(be, &o);
    cr_assert_eq(head_costs(h, &feat, &rows, &n, &err), 0, "%s", err);
    expect_rows("head_swav", rows, n);
    cr_expect_eq(eng_costs_total(rows, n).params, head_param_count(h));
    eng_costs_free(rows, n);
    head_free(be, h);

    static const int64_t ed[] = {2048, 1000};
    o = dims_opts(HEAD_EVAL_MLP, ed, 2);
    o.in_channels = 2048;
    h = make_head(be, &o);
    eng_shape pooled = eng_shape4(1, 2048, 1, 1);
    cr_assert_eq(head_costs(h, &pooled, &rows, &n, &err), 0, "%s", err);
    expect_rows("head_evalmlp", rows, n);
    eng_costs_free(rows, n);
    /* N × C is unsqueezed to N × C × 1 × 1, as VISSL does: the same rows. */
    cr_assert_eq(head_costs(h, &feat, &rows, &n, &err), 0, "%s", err);
    expect_rows("head_evalmlp", rows, n);
    eng_costs_free(rows, n);
    head_free(be, h);
    eng_backend_close(be);
}

Test(complexity, siamese_flops_are_unknown_and_bad_inputs_are_errors)
{
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    eng_layer_cost *rows;
    int n;
    head_options o = head_defaults(HEAD_SIAMESE_CONCAT_VIEW);
    head *h = make_head(be, &o);
    eng_shape feat = eng_shape2(2, 128);
    cr_assert_eq(head_costs(h, &feat, &rows, &n, &err), 0, "%s", err);
    cr_expect_eq(n, 1);
    cr_expect_eq(eng_costs_total(rows, n).flops, ENG_COST_UNKNOWN);
    eng_costs_free(rows, n);
    head_free(be, h);

    static const int64_t md[] = {64, 10};
    o = dims_opts(HEAD_MLP, md, 2);
    h = make_head(be, &o);
    eng_shape wrong = eng_shape2(1, 65);
    cr_expect_eq(head_costs(h, &wrong, &rows, &n, &err), -1);
    cr_expect(err && strstr(err, "65"), "%s", err ? err : "(no message)");
    free(err);
    err = NULL;
    head_free(be, h);

    resnet *net = make_trunk(be, 18, RESNET_NORM_BATCH);
    eng_shape gray = eng_shape4(1, 1, 224, 224);
    cr_expect_eq(resnet_costs(net, &gray, &rows, &n, &err), -1);
    cr_expect(err && strstr(err, "3"), "%s", err ? err : "(no message)");
    free(err);
    resnet_free(be, net);
    eng_backend_close(be);
}

/* The totals line of fixtures/nn/complexity_CASE.txt. */
static eng_layer_cost fixture_total(const char *kase)
{
    char *file = xasprintf("complexity_%s.txt", kase), *path = test_fixture("nn", file);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char name[160], kind[32];
    long long flops, params, acts;
    eng_layer_cost t = {0};
    while (fscanf(f, "%159s %31s %lld %lld %lld", name, kind, &flops, &params, &acts) == 5)
        if (!strcmp(name, "total"))
            t = (eng_layer_cost){.flops = flops, .params = params, .activations = acts};
    fclose(f);
    free(path), free(file);
    return t;
}

/* The rows of the model built from o, on one 1 × 3 × 224 × 224 image (INPUT_SHAPE's default). */
static eng_layer_cost *count_model(eng_backend *be, const model_options *o, model **m, int *n)
{
    char *err = NULL;
    *m = model_new(be, o, 1, &err);
    cr_assert(*m, "%s", err);
    eng_shape in = eng_shape4(1, 3, 224, 224);
    eng_layer_cost *rows;
    cr_assert_eq(model_costs(*m, &in, &rows, n, &err), 0, "%s", err);
    return rows;
}

/* The whole model as VISSL's hook counts it: torchvision's ResNet-50 as VISSL builds it (trunk
 * + mlp [2048, 1000]) is the profiler's trunk plus its fc head, row for row summed; rows carry
 * their model names (trunk._feature_blocks.…, heads.0.…). */
Test(complexity, a_whole_model_is_its_trunk_and_its_heads)
{
    eng_backend *be = nnt_open_cpu();
    model_options o = model_defaults();
    o.nheads = 1;
    o.heads[0] = (model_head_entry){.chain = {dims_opts(HEAD_MLP, (const int64_t[]){2048, 1000}, 2)}, .n = 1};
    model *m;
    int n;
    eng_layer_cost *rows = count_model(be, &o, &m, &n);
    eng_layer_cost got = eng_costs_total(rows, n), a = fixture_total("r50_224"), b = fixture_total("head_fc");
    cr_expect_eq(got.flops, a.flops + b.flops);
    cr_expect_eq(got.params, a.params + b.params);
    cr_expect_eq(got.params, model_param_count(m), "every parameter of the model");
    cr_expect_eq(got.activations, a.activations + b.activations);
    cr_expect_str_eq(rows[0].name, "trunk._feature_blocks.conv1");
    cr_expect_str_eq(rows[n - 1].name, "heads.0.clf.0");
    eng_costs_free(rows, n);
    model_free(be, m);
    eng_backend_close(be);
}

/* A ResNet-50 feature extractor: FE_R50(flatten) "<map entries>" FE_HEADS "<head entries>" "      ]\n". */
#define FE_R50(flatten)                                                                                        \
    "config:\n  MODEL:\n    FEATURE_EVAL_SETTINGS:\n      EVAL_MODE_ON: True\n      FREEZE_TRUNK_ONLY: True\n"        \
    "      SHOULD_FLATTEN_FEATS: " flatten "\n      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [\n"
#define FE_HEADS                                                                                               \
    "      ]\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 50}}}\n    HEAD:\n      PARAMS: [\n"

/* A feature-extraction model composed from YAML (defaults.yaml ← yaml), counted on one
 * 1 × 3 × 224 × 224 image against fixtures/nn/complexity_CASE.txt row by row. */
static void expect_feature_extractor(const char *kase, const char *yaml)
{
    model_options o = nnt_model_options(yaml, NULL);
    eng_backend *be = nnt_open_cpu();
    model *m;
    int n;
    eng_layer_cost *rows = count_model(be, &o, &m, &n);
    expect_rows(kase, rows, n);
    eng_layer_cost t = eng_costs_total(rows, n);
    cr_expect_eq(t.params, model_param_count(m), "%s: count_params counts every parameter", kase);
    if (getenv("COMPLEXITY_VERBOSE"))
        fprintf(stderr, "complexity: %s %" PRId64 " FLOPs, %" PRId64 " params, %" PRId64 " activations, %d rows\n",
                kase, t.flops, t.params, t.activations, n);
    eng_costs_free(rows, n);
    model_free(be, m);
    eng_backend_close(be);
}

Test(complexity, feature_extractor_with_eval_mlp_heads_matches_the_profiler_row_by_row)
{
    expect_feature_extractor("fe_r50_evalmlp",
                             FE_R50("False")
                             "        [\"res3\", [\"AvgPool2d\", [[13, 13], 5, 0]]],\n"
                             "        [\"res4\", [\"AvgPool2d\", [[8, 8], 3, 0]]],\n"
                             FE_HEADS
                             "        [\"eval_mlp\", {\"in_channels\": 512, \"dims\": [8192, 1000]}],\n"
                             "        [\"eval_mlp\", {\"in_channels\": 1024, \"dims\": [9216, 1000]}],\n"
                             "      ]\n");
}

Test(complexity, feature_extractor_pool_ops_match_the_profiler_and_adaptive_max_is_unknown)
{
    expect_feature_extractor("fe_r50_ops",
                             FE_R50("True")
                             "        [\"conv1\", [\"MaxPool2d\", [[10, 10], 10, 4]]],\n"
                             "        [\"res2\", [\"AdaptiveAvgPool2d\", [[2, 2]]]],\n"
                             "        [\"res4\", [\"AdaptiveMaxPool2d\", [1]]],\n"
                             "        [\"res5avg\", [\"Identity\", []]],\n"
                             FE_HEADS
                             "        [\"eval_mlp\", {\"in_channels\": 9216, \"dims\": [9216, 10]}],\n"
                             "        [\"eval_mlp\", {\"in_channels\": 1024, \"dims\": [1024, 10]}],\n"
                             "        [\"eval_mlp\", {\"in_channels\": 1024, \"dims\": [1024, 10]}],\n"
                             "        [\"eval_mlp\", {\"in_channels\": 2048, \"dims\": [2048, 10]}],\n"
                             "      ]\n");
}

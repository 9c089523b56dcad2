/*
 * test_alexnet.c — VISSL's five AlexNet trunks (nn/alexnet.c) against VISSL's modules
 * (vissl/models/trunks/alexnet_*.py), re-stated in PyTorch by tests/golden/make_alexnet_fixtures.py,
 * whose docstring documents every fixture and the closed formula that sets weights and inputs on
 * both sides (and the numbering rule: deepcluster's Sobel tensors are buffers 0..3, keeping VISSL's
 * fixed values).
 *
 * What is checked:
 *   - the variant and feature names (MODEL.TRUNK.NAME alexnet_bvlc … alexnet_rotnet; conv1 … flatten),
 *     the input channels, and alexnet_min_input against the size PyTorch first accepts;
 *     alexnet_check_input refuses a side below it (naming the minimum) and a wrong channel count;
 *   - names, order, kinds and shapes of the state dict (VISSL's `_feature_blocks.<block>.<layer>.…`,
 *     Sobel's `sobel.*` as buffers) and the parameter counts, for every variant; Sobel's buffers hold
 *     VISSL's fixed values whatever the init; alexnet_init follows PyTorch's defaults;
 *   - for each variant (2 images a little above the minimum size, pool5 2 × 2): forward in eval and
 *     train mode (the flatten features and every feature's per-channel means, relative 1e-4), the BN
 *     running statistics after the train forward, and the backward's parameter gradients against a
 *     float64 reference, per parameter within FLOOR_FACTOR × max(GRAD_TOL, torch float32's own error)
 *     as test_regnet.c measures them; the input gradient (alexnet_set_input_grad) within
 *     max(GRAD_TOL, FLOOR_FACTOR × torch float32's error);
 *   - rotnet and bvlc at 224 px: the eval features (2 × 9216, 2 × 6400) and out_dim, and the input
 *     gradient of one image in training (its 4 × 4 tile sums and its 32 × 32 centre window, relative
 *     GRAD_TOL each);
 *   - gradients accumulate (two backwards give twice the gradients) and a planned step allocates
 *     nothing;
 *   - a config with MODEL.TRUNK.NAME alexnet_rotnet builds the model with VISSL's names and refuses a
 *     32 px input with a message naming the minimum; alexnet_colorization reads the L channel of a
 *     MODEL.INPUT_TYPE lab input (and, as VISSL asserts, is refused without it);
 *   - the complexity rows (FLOPs, parameters, activations per module call) follow ClassyVision's
 *     profiler at VISSL's 224 px (LocalResponseNorm: unknown FLOPs);
 *   - weights written by PyTorch load through MODEL.WEIGHTS_INIT and give the same features: VISSL
 *     checkpoints of rotnet and deepcluster, and deepcluster as VISSL's
 *     extra_scripts/convert_caffe2_to_vissl_alexnet.py writes it (no sobel.* keys). These files are
 *     9-10 MB each, so the test has make_alexnet_fixtures.py --checkpoint write them into a fresh
 *     directory (skipped when /usr/bin/python3 cannot import torch).
 * ALEXNET_VERBOSE=1 prints every measured error (2: every parameter's).
 */
#include "alexnet.h"
#include "backend.h"
#include "complexity.h"
#include "model.h"
#include "nn.h"
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

#define TRUNK "alexnet" /* the fixtures' prefix (test_trunk_util.h) */
#define SCRIPT "tests/golden/make_alexnet_fixtures.py"

static const char *const VARIANTS[] = {"bvlc", "colorization", "deepcluster", "jigsaw", "rotnet"};

/* ---- fixtures ------------------------------------------------------------------------------- */

/* A line of alexnet_cases.txt: "CASE variant=V n=N size=S params=P min_input=M". */
typedef struct {
    alexnet_variant variant;
    int n, size;
    int64_t params, min_input;
} alexnet_case;

/* One key=value of alexnet_cases.txt into the case (the variant without its "alexnet_"). */
static void set_case(void *into, const char *k, const char *v)
{
    alexnet_case *c = into;
    if (!strcmp(k, "variant")) {
        char *name = xasprintf("alexnet_%s", v);
        c->variant = (alexnet_variant)alexnet_variant_by_name(name);
        cr_assert_neq((int)c->variant, -1, "%s is a variant", name);
        free(name);
    } else if (!strcmp(k, "n"))
        c->n = atoi(v);
    else if (!strcmp(k, "size"))
        c->size = atoi(v);
    else if (!strcmp(k, "params"))
        c->params = atoll(v);
    else if (!strcmp(k, "min_input"))
        c->min_input = atoll(v);
}

static alexnet_case load_case(const char *kase)
{
    alexnet_case c = {.variant = (alexnet_variant)-1};
    tt_load_line(TRUNK "_cases.txt", kase, set_case, &c);
    return c;
}

static alexnet *make(eng_backend *be, alexnet_variant v)
{
    alexnet *net = alexnet_new(be, v, 7);
    cr_assert(net, "alexnet_new(%s)", alexnet_variant_name(v));
    alexnet_init_formula(be, net);
    return net;
}

static eng_shape case_input_shape(const alexnet_case *c)
{
    return eng_shape4(c->n, alexnet_in_channels(c->variant), c->size, c->size);
}

static const eng_entry *find_entry(eng_params *p, const char *name)
{
    for (int i = 0; i < p->nentries; i++)
        if (!strcmp(p->entries[i].name, name))
            return &p->entries[i];
    return NULL;
}

/* ---- names ------------------------------------------------------------------------------------ */

Test(alexnet, variant_and_feature_names_are_vissls)
{
    for (int v = 0; v < (int)ARRAY_LEN(VARIANTS); v++) {
        char *name = xasprintf("alexnet_%s", VARIANTS[v]);
        cr_expect_eq(alexnet_variant_by_name(name), v, "%s", name);
        cr_expect_str_eq(alexnet_variant_name((alexnet_variant)v), name);
        cr_expect_eq(alexnet_in_channels((alexnet_variant)v), v == ALEXNET_COLORIZATION ? 1 : 3, "%s", name);
        alexnet_case c = load_case(VARIANTS[v]);
        cr_expect_eq(c.variant, (alexnet_variant)v);
        cr_expect_eq(alexnet_min_input((alexnet_variant)v), c.min_input, "%s: the smallest size PyTorch runs", name);
        free(name);
    }
    cr_expect_eq(alexnet_variant_by_name("alexnet"), -1);
    cr_expect_eq(alexnet_variant_by_name("alexnet_bvlc2"), -1);
    cr_expect_eq(alexnet_variant_by_name("resnet"), -1);
    const char *features[] = {"conv1", "pool1", "conv2", "pool2", "conv3", "conv4", "conv5", "pool5", "flatten"};
    cr_assert_eq(ARRAY_LEN(features), (size_t)ALEXNET_NFEATURES);
    for (int f = 0; f < ALEXNET_NFEATURES; f++) {
        cr_expect_eq(alexnet_feature_by_name(features[f]), f, "%s", features[f]);
        cr_expect_str_eq(alexnet_feature_name(f), features[f]);
    }
    cr_expect_eq(alexnet_feature_by_name("res5"), -1);
    cr_expect_eq(alexnet_feature_by_name("pool3"), -1, "VISSL names the last pool pool5");
}

/* The minimum from alexnet_cases.txt (the smallest square size PyTorch runs) passes; one pixel less
 * on either side is refused with the minimum named; so are the wrong channel count and rank. */
Test(alexnet, check_input_refuses_small_inputs_and_wrong_channels)
{
    for (int v = 0; v < (int)ARRAY_LEN(VARIANTS); v++) {
        alexnet_case c = load_case(VARIANTS[v]);
        int64_t m = c.min_input, ch = alexnet_in_channels(c.variant);
        char *err = NULL, want[32];
        snprintf(want, sizeof want, "%lld", (long long)m);
        eng_shape ok = eng_shape4(2, ch, m, m);
        cr_expect_eq(alexnet_check_input(c.variant, &ok, &err), 0, "%s at %lld px: %s", VARIANTS[v], (long long)m, err);
        free(err);
        err = NULL;
        eng_shape wide = eng_shape4(1, ch, m, 4 * m);
        cr_expect_eq(alexnet_check_input(c.variant, &wide, &err), 0, "%s %lld × %lld: %s", VARIANTS[v], (long long)m,
                     (long long)(4 * m), err);
        free(err);
        eng_shape bad[] = {eng_shape4(2, ch, m - 1, m), eng_shape4(2, ch, m, m - 1), eng_shape4(2, ch, 32, 32)};
        for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
            err = NULL;
            cr_expect_eq(alexnet_check_input(c.variant, &bad[i], &err), -1, "%s: %lld × %lld accepted", VARIANTS[v],
                         (long long)bad[i].dim[2], (long long)bad[i].dim[3]);
            cr_expect(err && strstr(err, want), "%s: the message names the minimum %s: %s", VARIANTS[v], want, err);
            free(err);
        }
        err = NULL;
        eng_shape channels = eng_shape4(2, ch == 1 ? 3 : 1, m, m);
        cr_expect_eq(alexnet_check_input(c.variant, &channels, &err), -1, "%s: %lld channels accepted", VARIANTS[v],
                     (long long)channels.dim[1]);
        cr_expect(err != NULL, "%s: a message", VARIANTS[v]);
        free(err);
        err = NULL;
        eng_shape flat = {.ndim = 2, .dim = {2, ch * m * m}};
        cr_expect_eq(alexnet_check_input(c.variant, &flat, &err), -1, "%s: a 2-D input accepted", VARIANTS[v]);
        free(err);
    }
}

static void check_names(alexnet_variant v, const char *tag, int64_t want_params)
{
    eng_backend *be = nnt_open_cpu();
    alexnet *net = make(be, v);
    tt_check_names(TRUNK, alexnet_param_table(net), tag, "VISSL", want_params);
    alexnet_free(be, net);
    eng_backend_close(be);
}

Test(alexnet, state_dict_names_order_shapes_match_vissl)
{
    for (size_t i = 0; i < ARRAY_LEN(VARIANTS); i++) {
        alexnet_case c = load_case(VARIANTS[i]);
        check_names(c.variant, VARIANTS[i], c.params);
    }
    /* By hand: bvlc's five convs, weights and biases, conv2, conv4 and conv5 in 2 groups
     * (34944 + 307456 + 885120 + 663936 + 442624); rotnet's five ungrouped convs and their BNs
     * (23296 + 128 + 307392 + 384 + 663936 + 768 + 884992 + 512 + 590080 + 512). */
    cr_expect_eq(load_case("bvlc").params, 2334080);
    cr_expect_eq(load_case("rotnet").params, 2472000);
    cr_expect_eq(load_case("rotnet224").params, load_case("rotnet").params);
}

/* DeepCluster's Sobel stage: VISSL's fixed grayscale (1/3 each, bias 0) and Sobel kernels (bias 0),
 * as buffers, untouched by the test formula and by the default init. */
static void expect_sobel(eng_backend *be, alexnet *net, const char *when)
{
    static const float gx[9] = {1, 0, -1, 2, 0, -2, 1, 0, -1}, gy[9] = {1, 2, 1, 0, 0, 0, -1, -2, -1};
    eng_params *p = alexnet_param_table(net);
    const char *names[] = {"sobel.0.weight", "sobel.0.bias", "sobel.1.weight", "sobel.1.bias"};
    const int64_t counts[] = {3, 1, 18, 2};
    for (int k = 0; k < 4; k++) {
        const eng_entry *e = find_entry(p, names[k]);
        cr_assert(e, "%s: no %s", when, names[k]);
        cr_expect_eq(e->kind, ENG_BUFFER, "%s: %s is a buffer", when, names[k]);
        cr_assert_eq(eng_numel(&e->value.shape), counts[k], "%s: %s", when, names[k]);
        float *h = nnt_download(be, &e->value);
        for (int64_t j = 0; j < counts[k]; j++) {
            float want = k == 0 ? (float)(1.0 / 3.0) : k == 2 ? (j < 9 ? gx[j] : gy[j - 9]) : 0.0f;
            cr_expect_eq(h[j], want, "%s: %s[%lld] = %.9g, VISSL's %.9g", when, names[k], (long long)j, h[j], want);
        }
        free(h);
    }
}

Test(alexnet, sobel_buffers_keep_vissls_fixed_values)
{
    eng_backend *be = nnt_open_cpu();
    alexnet *net = alexnet_new(be, ALEXNET_DEEPCLUSTER, 11);
    cr_assert(net);
    expect_sobel(be, net, "alexnet_new");
    alexnet_init(be, net, 12);
    expect_sobel(be, net, "alexnet_init");
    alexnet_init_formula(be, net);
    expect_sobel(be, net, "alexnet_init_formula");
    alexnet_free(be, net);
    eng_backend_close(be);
}

/* PyTorch's defaults: conv weights and biases within ±1/√fan_in, BN weight 1, bias 0, running
 * mean 0, var 1; the same seed gives the same values, another seed others. */
Test(alexnet, init_follows_pytorch_defaults)
{
    eng_backend *be = nnt_open_cpu();
    for (int v = 0; v < (int)ARRAY_LEN(VARIANTS); v++) {
        alexnet *a = alexnet_new(be, (alexnet_variant)v, 5), *b = alexnet_new(be, (alexnet_variant)v, 5);
        alexnet *c = alexnet_new(be, (alexnet_variant)v, 6);
        eng_params *pa = alexnet_param_table(a), *pb = alexnet_param_table(b), *pc = alexnet_param_table(c);
        cr_assert_eq(pa->nentries, pb->nentries);
        int64_t fan_in = 0;
        for (int i = 0; i < pa->nentries; i++) {
            const eng_entry *e = &pa->entries[i];
            if (!strncmp(e->name, "sobel.", 6))
                continue;
            float *h = nnt_download(be, &e->value), *hb = nnt_download(be, &pb->entries[i].value);
            float *hc = nnt_download(be, &pc->entries[i].value);
            int64_t n = eng_numel(&e->value.shape);
            bool conv_w = e->value.shape.ndim == 4;
            if (conv_w)
                fan_in = e->value.shape.dim[1] * e->value.shape.dim[2] * e->value.shape.dim[3];
            bool conv_b = !conv_w && eng_name_ends_with(e->name, ".0.bias"); /* Conv2d is layer 0 of its block */
            double bound = fan_in ? 1.0 / sqrt((double)fan_in) : 0.0, worst = 0.0;
            bool same = true, differs = false;
            for (int64_t j = 0; j < n; j++) {
                worst = fmax(worst, fabs(h[j]));
                same = same && h[j] == hb[j];
                differs = differs || h[j] != hc[j];
            }
            if (conv_w || conv_b) {
                cr_expect_leq(worst, bound * (1 + 1e-6), "%s %s: %g beyond 1/√%lld", VARIANTS[v], e->name, worst,
                              (long long)fan_in);
                cr_expect_gt(worst, 0.5 * bound, "%s %s: %g, nothing near 1/√%lld", VARIANTS[v], e->name, worst,
                             (long long)fan_in);
                cr_expect(differs, "%s %s: another seed, the same values", VARIANTS[v], e->name);
            } else {
                float want = eng_name_ends_with(e->name, ".weight") || eng_name_ends_with(e->name, "running_var") ? 1.0f
                                                                                                                 : 0.0f;
                for (int64_t j = 0; j < n; j++)
                    if (h[j] != want) {
                        cr_expect_eq(h[j], want, "%s %s[%lld]", VARIANTS[v], e->name, (long long)j);
                        break;
                    }
            }
            cr_expect(same, "%s %s: the same seed, other values", VARIANTS[v], e->name);
            free(h), free(hb), free(hc);
        }
        alexnet_free(be, a), alexnet_free(be, b), alexnet_free(be, c);
    }
    eng_backend_close(be);
}

/* ---- forward and backward against the float64 reference ----------------------------------------- */

/* Per-channel means over N, H, W of conv1 … pool5 concatenated (the fixture's means_eval). */
static float *feature_means(eng_backend *be, alexnet *net, int64_t *n)
{
    float *m = NULL;
    *n = 0;
    for (int f = 0; f < ALEXNET_NFEATURES - 1; f++) {
        const eng_tensor *t = alexnet_feature(net, f);
        cr_assert(t && t->shape.ndim == 4, "feature %s is N × C × H × W", alexnet_feature_name(f));
        m = tt_append_channel_means(be, t, m, n);
    }
    return m;
}

static void check_input_grad(eng_backend *be, alexnet *net, const char *kase)
{
    const eng_tensor *dx = alexnet_input_grad(net);
    cr_assert(dx, "%s: no input gradient after the backward", kase);
    npy_array floor = tt_load_npy(TRUNK, kase, "dx_floor");
    double tol = fmax(GRAD_TOL, FLOOR_FACTOR * ((const float *)floor.data)[0]);
    npy_close(&floor);
    float *g = nnt_download(be, dx);
    tt_expect_array_n(TRUNK, g, (size_t)eng_numel(&dx->shape), kase, "dx", tol);
    free(g);
}

/* Eval forward, train forward, the statistics, the backward of L = Σ feat·r. */
static void check_case(const char *kase, bool input_grad)
{
    alexnet_case c = load_case(kase);
    eng_backend *be = nnt_open_cpu();
    alexnet *net = make(be, c.variant);
    eng_shape in = case_input_shape(&c);
    char *err = NULL;
    cr_assert_eq(alexnet_check_input(c.variant, &in, &err), 0, "%s: %s", kase, err);
    eng_tensor x = tt_input(be, in, tt_fixture_phase(TRUNK, kase));
    alexnet_set_input_grad(be, net, input_grad);
    alexnet_plan(be, net, &x.shape);
    const eng_tensor *feat = alexnet_forward(be, net, &x, false);
    cr_expect_eq(feat->shape.ndim, 2, "%s: flatten is N × (C·H·W)", kase);
    cr_expect_eq(feat->shape.dim[0], c.n);
    cr_expect_eq(alexnet_out_dim(net), 256 * 2 * 2, "%s: pool5 is 256 × 2 × 2 at %d px", kase, c.size);
    float *f = nnt_download(be, feat);
    tt_expect_array_n(TRUNK, f, (size_t)eng_numel(&feat->shape), kase, "feat_eval", FWD_TOL);
    free(f);
    int64_t nm;
    float *m = feature_means(be, net, &nm);
    tt_expect_array_n(TRUNK, m, (size_t)nm, kase, "means_eval", FWD_TOL);
    free(m);
    feat = alexnet_forward(be, net, &x, true);
    f = nnt_download(be, feat);
    tt_expect_array_n(TRUNK, f, (size_t)eng_numel(&feat->shape), kase, "feat_train", FWD_TOL);
    free(f);
    int nb;
    float *sums = nnt_buffer_sums(be, alexnet_param_table(net), &nb);
    tt_expect_array_n(TRUNK, sums, (size_t)nb, kase, "stats", FWD_TOL);
    free(sums);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, alexnet_param_table(net));
    alexnet_backward(be, net, &r);
    tt_check_grads(TRUNK, be, alexnet_param_table(net), kase, 1.0);
    if (input_grad)
        check_input_grad(be, net, kase);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    alexnet_free(be, net);
    eng_backend_close(be);
}

Test(alexnet, bvlc_lrn_before_pool_groups_no_bn_matches_vissl) { check_case("bvlc", false); }
Test(alexnet, colorization_one_channel_bn_matches_vissl) { check_case("colorization", false); }
Test(alexnet, deepcluster_sobel_bn_matches_vissl) { check_case("deepcluster", false); }
Test(alexnet, jigsaw_stride2_lrn_after_pool_matches_vissl) { check_case("jigsaw", false); }
Test(alexnet, rotnet_bn_matches_vissl) { check_case("rotnet", false); }

/* The gradient with respect to the input image, every variant (through Sobel for deepcluster). */
Test(alexnet, input_gradients_match_pytorch, .timeout = 120)
{
    for (size_t i = 0; i < ARRAY_LEN(VARIANTS); i++)
        check_case(VARIANTS[i], true);
}

/* rotnet and bvlc at 224 px, 2 images (input phase 0): eval features and out_dim. */
static void check_large(const char *kase, int64_t out_dim)
{
    alexnet_case c = load_case(kase);
    eng_backend *be = nnt_open_cpu();
    alexnet *net = make(be, c.variant);
    eng_tensor x = tt_input(be, case_input_shape(&c), 0);
    alexnet_plan(be, net, &x.shape);
    cr_expect_eq(alexnet_out_dim(net), out_dim, "%s", kase);
    const eng_tensor *feat = alexnet_forward(be, net, &x, false);
    float *f = nnt_download(be, feat);
    tt_expect_array_n(TRUNK, f, (size_t)eng_numel(&feat->shape), kase, "feat_eval", FWD_TOL);
    free(f);
    check_names(c.variant, alexnet_variant_name(c.variant) + strlen("alexnet_"), c.params);
    eng_tensor_free(be, &x);
    alexnet_free(be, net);
    eng_backend_close(be);
}

Test(alexnet, rotnet_224_eval_features_match_vissl, .timeout = 60) { check_large("rotnet224", 9216); }
Test(alexnet, bvlc_224_eval_features_match_vissl, .timeout = 60) { check_large("bvlc224", 6400); }

/* The large cases' input gradient is committed as two summaries (make_alexnet_fixtures.py's DX_TILE,
 * DX_CENTRE): its sums over non-overlapping DX_TILE × DX_TILE tiles, and the gradient itself in the
 * DX_CENTRE_SIDE × DX_CENTRE_SIDE window from row and column DX_CENTRE_FROM (the centre of 224 px). */
#define DX_TILE 4
#define DX_CENTRE_FROM 96
#define DX_CENTRE_SIDE 32

/* The tile sums of an N × C × H × W gradient g (summed in double), N × C × H/DX_TILE × W/DX_TILE
 * (*count values). */
static float *tile_sums(const float *g, const eng_shape *s, size_t *count)
{
    const int64_t nc = s->dim[0] * s->dim[1], h = s->dim[2], w = s->dim[3], th = h / DX_TILE, tw = w / DX_TILE;
    *count = (size_t)(nc * th * tw);
    float *out = xmalloc(*count * sizeof *out);
    for (int64_t p = 0; p < nc; p++)
        for (int64_t ty = 0; ty < th; ty++)
            for (int64_t tx = 0; tx < tw; tx++) {
                double sum = 0.0;
                for (int64_t y = ty * DX_TILE; y < (ty + 1) * DX_TILE; y++)
                    for (int64_t xx = tx * DX_TILE; xx < (tx + 1) * DX_TILE; xx++)
                        sum += g[(p * h + y) * w + xx];
                out[(p * th + ty) * tw + tx] = (float)sum;
            }
    return out;
}

/* The centre window of an N × C × H × W gradient g, N × C × DX_CENTRE_SIDE × DX_CENTRE_SIDE (*count
 * values). */
static float *centre_window(const float *g, const eng_shape *s, size_t *count)
{
    const int64_t nc = s->dim[0] * s->dim[1], h = s->dim[2], w = s->dim[3];
    *count = (size_t)(nc * DX_CENTRE_SIDE * DX_CENTRE_SIDE);
    float *out = xmalloc(*count * sizeof *out);
    for (int64_t p = 0; p < nc; p++)
        for (int64_t y = 0; y < DX_CENTRE_SIDE; y++) {
            const float *row = g + (p * h + DX_CENTRE_FROM + y) * w + DX_CENTRE_FROM;
            memcpy(out + (p * DX_CENTRE_SIDE + y) * DX_CENTRE_SIDE, row, DX_CENTRE_SIDE * sizeof *out);
        }
    return out;
}

/* A large case's input gradient: one train-mode forward of ONE image (input phase 0), the backward
 * of L = Σ feat·r, and the gradient's tile sums and centre window against KASE_dx_tiles and
 * KASE_dx_centre (relative GRAD_TOL each). */
static void check_large_input_grad(const char *kase)
{
    alexnet_case c = load_case(kase);
    c.n = 1; /* the fixtures' gradient is of one image (alexnet_cases.txt's n is the features') */
    eng_backend *be = nnt_open_cpu();
    alexnet *net = make(be, c.variant);
    eng_tensor x = tt_input(be, case_input_shape(&c), 0);
    alexnet_set_input_grad(be, net, true);
    alexnet_plan(be, net, &x.shape);
    const eng_tensor *feat = alexnet_forward(be, net, &x, true);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, alexnet_param_table(net));
    alexnet_backward(be, net, &r);
    const eng_tensor *dx = alexnet_input_grad(net);
    cr_assert(dx, "%s: no input gradient after the backward", kase);
    cr_assert(x.shape.dim[2] % DX_TILE == 0 && x.shape.dim[2] >= DX_CENTRE_FROM + DX_CENTRE_SIDE, "%s", kase);
    float *g = nnt_download(be, dx);
    size_t nsums, ncentre;
    float *sums = tile_sums(g, &x.shape, &nsums), *centre = centre_window(g, &x.shape, &ncentre);
    tt_expect_array_n(TRUNK, sums, nsums, kase, "dx_tiles", GRAD_TOL);
    tt_expect_array_n(TRUNK, centre, ncentre, kase, "dx_centre", GRAD_TOL);
    free(centre);
    free(sums);
    free(g);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    alexnet_free(be, net);
    eng_backend_close(be);
}

/* rotnet (BN) and bvlc (LRN, groups, no BN) at 224 px in training: the input gradient's tile sums
 * and centre window against VISSL's float64 ones. */
Test(alexnet, rotnet_224_input_gradient_matches_vissl, .timeout = 120) { check_large_input_grad("rotnet224"); }
Test(alexnet, bvlc_224_input_gradient_matches_vissl, .timeout = 120) { check_large_input_grad("bvlc224"); }

/* ---- accumulation, memory ------------------------------------------------------------------------ */

/* Two backward passes without zeroing give twice the gradients, and a second step at the
 * planned shape (plan again, eval and train forwards, backward) allocates nothing. */
static void check_accumulation(const char *kase)
{
    alexnet_case c = load_case(kase);
    eng_backend *be = nnt_open_cpu();
    tt_count_allocations(be);
    alexnet *net = make(be, c.variant);
    eng_tensor x = tt_input(be, case_input_shape(&c), tt_fixture_phase(TRUNK, kase));
    alexnet_plan(be, net, &x.shape);
    const eng_tensor *feat = alexnet_forward(be, net, &x, true);
    eng_tensor r = tt_upstream(be, feat->shape);
    eng_params_zero_grad(be, alexnet_param_table(net));
    alexnet_backward(be, net, &r);
    int before = tt_allocations();
    alexnet_plan(be, net, &x.shape);
    alexnet_forward(be, net, &x, false);
    alexnet_forward(be, net, &x, true); /* the running statistics move again: not compared */
    alexnet_backward(be, net, &r);
    cr_expect_eq(tt_allocations(), before, "%s: a planned step allocates nothing", kase);
    tt_check_grads(TRUNK, be, alexnet_param_table(net), kase, 2.0);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &x);
    alexnet_free(be, net);
    eng_backend_close(be);
}

Test(alexnet, gradients_accumulate_and_a_step_allocates_nothing)
{
    check_accumulation("deepcluster"); /* Sobel, BN, max pools */
    check_accumulation("bvlc");        /* LRN, groups, no BN */
}

/* ---- from a config ------------------------------------------------------------------------------ */

/* The refusal message for a config, from model_options_from_config or model_new (NULL: built). */
static char *refusal(const char *yaml)
{
    cfg_t cfg = {0};
    cfg_err cerr;
    model_options o;
    char *msg = NULL;
    if (!test_compose(&cfg, &cerr, yaml, NULL) || !model_options_from_config(cfg_path(cfg.root, "config.MODEL"), &o, &cerr)) {
        msg = xstrdup(cerr.msg);
    } else {
        eng_backend *be = nnt_open_cpu();
        model *m = model_new(be, &o, 1, &msg);
        if (m) {
            model_free(be, m);
            msg = NULL;
        } else if (!msg) {
            msg = xstrdup("(refused without a message)");
        }
        eng_backend_close(be);
    }
    cfg_destroy(&cfg);
    return msg;
}

#define ROTNET_YAML "config:\n  MODEL:\n    TRUNK:\n      NAME: alexnet_rotnet\n"

Test(alexnet, a_config_builds_alexnet_rotnet_and_refuses_a_32px_input)
{
    model_options o = nnt_model_options(ROTNET_YAML, NULL);
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, &o, 1, &err);
    cr_assert(m, "%s", err);
    cr_expect_str_eq(model_entry_at(m, 0)->name, "trunk._feature_blocks.0.0.weight");
    cr_expect_str_eq(model_entry_at(m, 3)->name, "trunk._feature_blocks.0.1.bias", "conv1's BN after its conv");
    eng_shape small[1] = {eng_shape4(2, 3, 32, 32)};
    cr_expect_eq(model_plan(be, m, small, 1, &err), -1, "a 32 px input planned");
    cr_expect(err && strstr(err, "63"), "the message names the minimum, 63 px: %s", err);
    free(err);
    err = NULL;
    alexnet_case c = load_case("rotnet");
    eng_shape in[1] = {eng_shape4(c.n, 3, c.size, c.size)};
    cr_assert_eq(model_plan(be, m, in, 1, &err), 0, "%s", err);
    model_init_formula(be, m);
    float *x = nnt_formula_fill(eng_numel(&in[0]), X_ALPHA, tt_fixture_phase(TRUNK, "rotnet"));
    model_upload_input(be, m, 0, x);
    model_forward(be, m, false);
    cr_assert_eq(model_output_count(m), 1);
    const eng_tensor *out = model_output(m, 0);
    float *f = nnt_download(be, out);
    tt_expect_array_n(TRUNK, f, (size_t)eng_numel(&out->shape), "rotnet", "feat_eval", FWD_TOL);
    free(f);
    free(x);
    model_free(be, m);
    eng_backend_close(be);
}

/* VISSL's alexnet_colorization takes MODEL.INPUT_TYPE lab and reads channel 0 (L): a LAB image whose
 * L channel is the colorization case's input gives that case's features. Without INPUT_TYPE lab
 * VISSL's trunk asserts ("AlexNet Colorization model takes LAB image only"). */
Test(alexnet, colorization_reads_the_l_channel_of_a_lab_input)
{
    char *msg = refusal("config:\n  MODEL:\n    TRUNK:\n      NAME: alexnet_colorization\n");
    cr_expect(msg, "alexnet_colorization built with INPUT_TYPE rgb");
    free(msg);
    model_options o = nnt_model_options("config:\n  MODEL:\n    INPUT_TYPE: lab\n    TRUNK:\n"
                                        "      NAME: alexnet_colorization\n", NULL);
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, &o, 1, &err);
    cr_assert(m, "%s", err);
    alexnet_case c = load_case("colorization");
    eng_shape in[1] = {eng_shape4(c.n, 3, c.size, c.size)};
    cr_assert_eq(model_plan(be, m, in, 1, &err), 0, "%s", err);
    model_init_formula(be, m);
    int64_t hw = (int64_t)c.size * c.size;
    float *l = nnt_formula_fill(c.n * hw, X_ALPHA, tt_fixture_phase(TRUNK, "colorization"));
    float *lab = xmalloc((size_t)eng_numel(&in[0]) * sizeof *lab);
    for (int64_t b = 0; b < c.n; b++)
        for (int64_t j = 0; j < hw; j++) {
            lab[(b * 3 + 0) * hw + j] = l[b * hw + j];
            lab[(b * 3 + 1) * hw + j] = 50.0f; /* a and b: anything */
            lab[(b * 3 + 2) * hw + j] = -30.0f;
        }
    model_upload_input(be, m, 0, lab);
    model_forward(be, m, false);
    const eng_tensor *out = model_output(m, 0);
    float *f = nnt_download(be, out);
    tt_expect_array_n(TRUNK, f, (size_t)eng_numel(&out->shape), "colorization", "feat_eval", FWD_TOL);
    free(f);
    free(lab);
    free(l);
    model_free(be, m);
    eng_backend_close(be);
}

/* ---- complexity ---------------------------------------------------------------------------------- */

/* alexnet_costs_upto's rows against ClassyVision's profiler rules run on the re-stated trunk at 224
 * px: alexnet_VARIANT_complexity.txt, "name kind flops params activations" per module call, then
 * the total (deepcluster's parameters include Sobel's 24: count_params counts every parameter). */
static void check_costs(alexnet_variant v, const char *tag)
{
    eng_backend *be = nnt_open_cpu();
    alexnet *net = make(be, v);
    eng_shape in = eng_shape4(1, alexnet_in_channels(v), 224, 224);
    eng_layer_cost *rows;
    int n;
    char *err = NULL;
    eng_shape feat[ALEXNET_NFEATURES];
    cr_assert_eq(alexnet_costs_upto(net, &in, NULL, ALEXNET_NFEATURES - 1, feat, &rows, &n, &err), 0, "%s: %s", tag,
                 err);
    cr_expect_eq(feat[ALEXNET_NFEATURES - 2].dim[1], 256, "%s: pool5's channels", tag);
    tt_check_cost_rows(TRUNK, tag, rows, n);
    eng_costs_free(rows, n);
    alexnet_free(be, net);
    eng_backend_close(be);
}

Test(alexnet, complexity_rows_follow_classyvisions_profiler)
{
    for (int v = 0; v < (int)ARRAY_LEN(VARIANTS); v++)
        check_costs((alexnet_variant)v, VARIANTS[v]);
}

/* ---- weights written by PyTorch ------------------------------------------------------------------ */

/* A fresh directory holding make_alexnet_fixtures.py --checkpoint's files (skips without torch). */
static char *checkpoints(void)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
        cr_skip_test("/usr/bin/python3 cannot import torch (make deps)");
    char *dir = test_make_tmpdir(), *script = test_path(SCRIPT), *out = NULL;
    char *cmd = xasprintf("/usr/bin/python3 '%s' --checkpoint '%s'", script, dir);
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s failed (exit %d):\n%s", cmd, rc, out);
    free(out);
    free(cmd);
    free(script);
    return dir;
}

/* The variant's model from a config, random init, the weights of `file` loaded through
 * MODEL.WEIGHTS_INIT (`key`: STATE_DICT_KEY_NAME, `append`: APPEND_PREFIX or NULL): its eval
 * features must be the case's. */
static void expect_features_from(const char *dir, const char *file, const char *kase, const char *key,
                                 const char *append)
{
    alexnet_case c = load_case(kase);
    char *yaml = xasprintf("config:\n  MODEL:\n    TRUNK:\n      NAME: %s\n", alexnet_variant_name(c.variant));
    model_options o = nnt_model_options(yaml, NULL);
    free(yaml);
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, &o, 3, &err); /* random init, which the file replaces */
    cr_assert(m, "%s", err);
    char *path = path_join(dir, file);
    model_weights_init w = {.opt = weights_init_defaults()};
    w.opt.params_file = path;
    if (key)
        w.opt.state_dict_key_name = key;
    w.opt.append_prefix = append;
    cr_assert_eq(model_load_weights(be, m, &w, &err), 0, "%s: %s", file, err);
    eng_shape in[1] = {eng_shape4(c.n, 3, c.size, c.size)};
    cr_assert_eq(model_plan(be, m, in, 1, &err), 0, "%s", err);
    float *x = nnt_formula_fill(eng_numel(&in[0]), X_ALPHA, tt_fixture_phase(TRUNK, kase));
    model_upload_input(be, m, 0, x);
    model_forward(be, m, false);
    const eng_tensor *out = model_output(m, 0);
    float *f = nnt_download(be, out);
    char *what = xasprintf("%s from %s", kase, file);
    npy_array want = tt_load_npy(TRUNK, kase, "feat_eval");
    cr_expect_eq((size_t)eng_numel(&out->shape), want.count, "%s: feature count", what);
    tt_report(TRUNK, what, nnt_rel_error_host(f, want.data, want.count), FWD_TOL);
    npy_close(&want);
    free(what);
    free(f);
    free(x);
    free(path);
    model_free(be, m);
    eng_backend_close(be);
}

/* Checkpoints as VISSL writes them (classy_state_dict → base_model → model → trunk), num_batches_tracked
 * included; deepcluster's holds its sobel.* tensors, which load into the buffers (same values). */
Test(alexnet, a_vissl_checkpoint_written_by_pytorch_loads_and_gives_its_features, .timeout = 120)
{
    char *dir = checkpoints();
    expect_features_from(dir, "alexnet_rotnet_vissl.torch", "rotnet", NULL, NULL);
    expect_features_from(dir, "alexnet_deepcluster_vissl.torch", "deepcluster", NULL, NULL);
    test_rm_dir(dir);
}

/* VISSL's converted DeepCluster model ({"model_state_dict": {"_feature_blocks.…"}}, the sobel tensors
 * skipped by the converter): VISSL loads it with STATE_DICT_KEY_NAME model_state_dict and
 * APPEND_PREFIX trunk., logging sobel.* as "Not found" and keeping their fixed values. */
Test(alexnet, a_converted_deepcluster_model_without_sobel_keys_loads, .timeout = 120)
{
    char *dir = checkpoints();
    expect_features_from(dir, "alexnet_deepcluster_converted.torch", "deepcluster", "model_state_dict", "trunk.");
    test_rm_dir(dir);
}

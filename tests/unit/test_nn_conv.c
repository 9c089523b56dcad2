/*
 * test_nn_conv.c — convolution and batch norm on the cpu backend, against PyTorch and
 * against finite differences.
 *
 * Golden: tests/golden/make_nn_conv_fixtures.py saved PyTorch's outputs, autograd gradients
 * and running statistics (fixtures/nn/conv_* and bn_*); each must match within 1e-4
 * (forward) and 1e-3 (gradients) relative to the largest reference value, as in test_nn.c.
 * Conv cases: 3×3 with bias, the 7×7/2 ResNet stem, a 1×1/2 downsample (odd and even input),
 * groups = 4, dilation 2; TensorFlow's "same" padding (pad_extra: PyTorch's F.pad then an
 * unpadded convolution) on a 3×3/2, a depthwise 5×5/2, a symmetric 3×3/1 for contrast, rows and
 * columns padded apart, and a 2×2 → 1×1 one that takes the cpu's matrix-product backward.
 * Finite differences: for L = Σ y·r, each analytic gradient element must match central
 * differences of L (summed in double). Conventions: gradients accumulate, NULL skips.
 * NN_CONV_VERBOSE=1 prints every measured error.
 */
#include "nn.h"
#include "npy.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FWD_TOL 1e-4
#define GRAD_TOL 1e-3
#define FD_TOL 2e-3

static void expect_close(eng_backend *be, const eng_tensor *got, const nnt_fixture *want, double tol, const char *what)
{
    double e = nnt_rel_error(be, got, want);
    if (getenv("NN_CONV_VERBOSE"))
        fprintf(stderr, "nn_conv: %-22s rel error %.3g\n", what, e);
    cr_expect_leq(e, tol, "%s: relative error %g", what, e);
}

/* ---- convolution against PyTorch ---------------------------------------------------------- */

/* Seven entries, or nine with pad_extra (the conv_same_* cases). */
static eng_conv_desc geom_of(const nnt_fixture *g)
{
    const float *v = g->a.data;
    cr_assert(g->a.count == 7u || g->a.count == 9u, "geom: %zu entries", g->a.count);
    eng_conv_desc d = {.stride = {(int64_t)v[0], (int64_t)v[1]}, .pad = {(int64_t)v[2], (int64_t)v[3]},
                       .dilation = {(int64_t)v[4], (int64_t)v[5]}, .groups = (int64_t)v[6]};
    if (g->a.count == 9u)
        d.pad_extra[0] = (int64_t)v[7], d.pad_extra[1] = (int64_t)v[8];
    return d;
}

static void conv_case(const char *name, bool bias)
{
    eng_backend *be = nnt_open_cpu();
    char *kase = xasprintf("conv_%s", name);
    nnt_fixture g = nnt_load(be, kase, "geom"), x = nnt_load(be, kase, "x"), w = nnt_load(be, kase, "w"), y = nnt_load(be, kase, "y"),
            dy = nnt_load(be, kase, "dy"), dx = nnt_load(be, kase, "dx"), dw = nnt_load(be, kase, "dw"), b = {0}, db = {0};
    if (bias)
        b = nnt_load(be, kase, "b"), db = nnt_load(be, kase, "db");
    eng_conv_desc d = geom_of(&g);
    eng_shape ys = eng_conv_output_shape(&x.t.shape, &w.t.shape, &d);
    cr_assert(eng_shape_equal(&ys, &y.t.shape), "%s: output shape", name);
    eng_plan *plan = eng_conv_plan(be, &d, &x.t.shape, &w.t.shape, bias);
    eng_tensor out = nnt_zeros_like(be, &y.t), gx = nnt_zeros_like(be, &x.t), gw = nnt_zeros_like(be, &w.t), gb = {0};
    if (bias)
        gb = nnt_zeros_like(be, &b.t);
    char what[64];
    eng_conv_forward(be, plan, &x.t, &w.t, bias ? &b.t : NULL, &out);
    snprintf(what, sizeof what, "%s y", name);
    expect_close(be, &out, &y, FWD_TOL, what);
    eng_conv_backward(be, plan, &x.t, &w.t, &dy.t, &gx, &gw, bias ? &gb : NULL);
    snprintf(what, sizeof what, "%s dx", name);
    expect_close(be, &gx, &dx, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s dw", name);
    expect_close(be, &gw, &dw, GRAD_TOL, what);
    if (bias) {
        snprintf(what, sizeof what, "%s db", name);
        expect_close(be, &gb, &db, GRAD_TOL, what);
        eng_tensor_free(be, &gb);
        nnt_unload(be, &b), nnt_unload(be, &db);
    }
    eng_plan_free(be, plan);
    eng_tensor *mine[] = {&out, &gx, &gw};
    for (size_t i = 0; i < ARRAY_LEN(mine); i++)
        eng_tensor_free(be, mine[i]);
    nnt_fixture *all[] = {&g, &x, &w, &y, &dy, &dx, &dw};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    free(kase);
    eng_backend_close(be);
}

Test(nn_conv, conv3x3_bias_matches_torch) { conv_case("3x3", true); }
Test(nn_conv, resnet_stem_7x7_stride2_matches_torch) { conv_case("stem", false); }
Test(nn_conv, downsample_1x1_stride2_matches_torch) { conv_case("down", false); }
Test(nn_conv, downsample_1x1_stride2_on_even_input_matches_torch) { conv_case("down_even", false); }
Test(nn_conv, grouped_conv_matches_torch) { conv_case("group", true); }
Test(nn_conv, dilated_conv_matches_torch) { conv_case("dil", true); }
/* One output pixel: the cpu backend's matrix product (conv_gemm.c), x in place or gathered. */
Test(nn_conv, conv3x3_on_one_pixel_matches_torch) { conv_case("point3x3", false); }
Test(nn_conv, conv3x3_stride2_to_one_pixel_matches_torch) { conv_case("point_s2", false); }
Test(nn_conv, shortcut_1x1_stride2_to_one_pixel_matches_torch) { conv_case("point_down", false); }
Test(nn_conv, dilated_conv_to_one_pixel_matches_torch) { conv_case("point_dil", false); }
Test(nn_conv, conv_to_one_pixel_with_bias_matches_torch) { conv_case("point_bias", true); }
/* TensorFlow's "same" padding: the odd total's extra zero below and right (pad_extra). */
Test(nn_conv, same_padding_3x3_stride2_matches_torch) { conv_case("same_s2", false); }
Test(nn_conv, same_padding_depthwise_5x5_stride2_matches_torch) { conv_case("same_dw5_s2", false); }
Test(nn_conv, same_padding_symmetric_3x3_matches_torch) { conv_case("same_sym", false); }
Test(nn_conv, same_padding_rows_and_columns_apart_matches_torch) { conv_case("same_rect", false); }
Test(nn_conv, same_padding_to_one_pixel_matches_torch) { conv_case("same_point_s2", false); }

/* Backward twice doubles every gradient; dx NULL skips backward-data and leaves dw right;
 * db NULL on a plan with a bias is allowed (pass bias = false for a case without one). */
static void accumulate_case(const char *name, bool bias)
{
    eng_backend *be = nnt_open_cpu();
    char *kase = xasprintf("conv_%s", name), what[64];
    nnt_fixture g = nnt_load(be, kase, "geom"), x = nnt_load(be, kase, "x"), w = nnt_load(be, kase, "w"),
            dy = nnt_load(be, kase, "dy"), dx = nnt_load(be, kase, "dx"), dw = nnt_load(be, kase, "dw"), b = {0}, db = {0};
    if (bias)
        b = nnt_load(be, kase, "b"), db = nnt_load(be, kase, "db");
    eng_conv_desc d = geom_of(&g);
    eng_plan *plan = eng_conv_plan(be, &d, &x.t.shape, &w.t.shape, bias);
    eng_tensor gx = nnt_zeros_like(be, &x.t), gw = nnt_zeros_like(be, &w.t), gb = {0};
    if (bias)
        gb = nnt_zeros_like(be, &b.t);
    eng_conv_backward(be, plan, &x.t, &w.t, &dy.t, NULL, &gw, NULL);
    snprintf(what, sizeof what, "%s dw (dx NULL)", name);
    expect_close(be, &gw, &dw, GRAD_TOL, what);
    eng_conv_backward(be, plan, &x.t, &w.t, &dy.t, &gx, &gw, bias ? &gb : NULL);
    eng_conv_backward(be, plan, &x.t, &w.t, &dy.t, &gx, NULL, bias ? &gb : NULL);
    /* dw was accumulated twice, dx and db twice: compare with 2× PyTorch's. */
    nnt_fixture *twice[] = {&dx, &dw, &db};
    for (size_t i = 0; i < ARRAY_LEN(twice); i++)
        for (size_t k = 0; k < twice[i]->a.count; k++)
            ((float *)twice[i]->a.data)[k] *= 2.0f;
    eng_tensor *got[] = {&gx, &gw, &gb};
    const char *names[] = {"2×dx", "2×dw", "2×db"};
    for (size_t i = 0; i < (bias ? 3u : 2u); i++) {
        snprintf(what, sizeof what, "%s %s", name, names[i]);
        expect_close(be, got[i], twice[i], GRAD_TOL, what);
        eng_tensor_free(be, got[i]);
    }
    eng_plan_free(be, plan);
    nnt_fixture *all[] = {&g, &x, &w, &dy, &dx, &dw, &b, &db};
    for (size_t i = 0; i < ARRAY_LEN(all) - (bias ? 0 : 2); i++)
        nnt_unload(be, all[i]);
    free(kase);
    eng_backend_close(be);
}

Test(nn_conv, gradients_accumulate_and_null_skips) { accumulate_case("group", true); }
Test(nn_conv, one_pixel_gradients_accumulate_and_null_skips)
{
    accumulate_case("point3x3", false); /* x in place: dx through the product's beta = 1 */
    accumulate_case("point_s2", false);
    accumulate_case("point_down", false); /* x gathered: dx through the scatter-add */
}
Test(nn_conv, same_padding_gradients_accumulate_and_null_skips)
{
    accumulate_case("same_s2", false);
    accumulate_case("same_dw5_s2", false);
    accumulate_case("same_point_s2", false);
}

/* The output size counts the extra zeros: a 3×3/2 on 8×8 is 3×3 without them, 4×4 with one. */
Test(nn_conv, output_shape_counts_pad_extra)
{
    eng_shape x = eng_shape4(1, 2, 8, 8), w = eng_shape4(3, 2, 3, 3);
    eng_conv_desc plain = {.stride = {2, 2}}, same = {.stride = {2, 2}, .pad_extra = {1, 0}};
    eng_shape a = eng_conv_output_shape(&x, &w, &plain), b = eng_conv_output_shape(&x, &w, &same);
    cr_expect(a.dim[2] == 3 && a.dim[3] == 3, "unpadded: %lldx%lld", (long long)a.dim[2], (long long)a.dim[3]);
    cr_expect(b.dim[2] == 4 && b.dim[3] == 3, "one extra row: %lldx%lld", (long long)b.dim[2], (long long)b.dim[3]);
}

/* ---- finite differences ---------------------------------------------------------------------- */

static eng_shape shape1(int64_t n) { return (eng_shape){.ndim = 1, .dim = {n}}; }

static void check_fd(eng_backend *be, void (*forward)(eng_backend *, void *), void *arg, eng_tensor *param,
                     float *host, const eng_tensor *grad, const eng_tensor *y, const float *r, const char *what)
{
    double worst = nnt_fd_error(be, forward, arg, param, host, grad, y, r);
    if (getenv("NN_CONV_VERBOSE"))
        fprintf(stderr, "nn_conv: %-22s fd error %.3g\n", what, worst);
    cr_expect_leq(worst, FD_TOL, "%s: finite differences disagree by %g", what, worst);
}

typedef struct {
    eng_plan *plan;
    eng_tensor *x, *w, *b, *y;
} conv_args;

static void run_conv(eng_backend *be, void *arg)
{
    conv_args *a = arg;
    eng_conv_forward(be, a->plan, a->x, a->w, a->b, a->y);
}

/* Stride, padding, dilation and groups at once, on a tiny odd shape. */
Test(nn_conv, conv_gradients_match_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    eng_conv_desc d = {.stride = {2, 1}, .pad = {1, 2}, .dilation = {1, 2}, .groups = 2};
    float *hx, *hw, *hb, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape4(2, 4, 5, 6), 11, &hx), w = nnt_host_tensor(be, eng_shape4(6, 2, 3, 3), 12, &hw),
               b = nnt_host_tensor(be, shape1(6), 13, &hb);
    eng_shape ys = eng_conv_output_shape(&x.shape, &w.shape, &d);
    eng_tensor dy = nnt_host_tensor(be, ys, 14, &r), y = nnt_zeros_like(be, &dy);
    eng_tensor gx = nnt_zeros_like(be, &x), gw = nnt_zeros_like(be, &w), gb = nnt_zeros_like(be, &b);
    eng_plan *plan = eng_conv_plan(be, &d, &x.shape, &w.shape, true);
    eng_conv_backward(be, plan, &x, &w, &dy, &gx, &gw, &gb);
    conv_args a = {plan, &x, &w, &b, &y};
    check_fd(be, run_conv, &a, &x, hx, &gx, &y, r, "conv fd dx");
    check_fd(be, run_conv, &a, &w, hw, &gw, &y, r, "conv fd dw");
    check_fd(be, run_conv, &a, &b, hb, &gb, &y, r, "conv fd db");
    eng_plan_free(be, plan);
    eng_tensor *all[] = {&x, &w, &b, &dy, &y, &gx, &gw, &gb};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hw), free(hb), free(r);
    eng_backend_close(be);
}

/* The same with pad_extra, rows and columns unlike (EfficientNet's depthwise stride 2 and more). */
Test(nn_conv, same_padding_gradients_match_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    eng_conv_desc d = {.stride = {2, 2}, .pad = {1, 0}, .groups = 4, .pad_extra = {1, 2}};
    float *hx, *hw, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape4(2, 4, 6, 5), 15, &hx),
               w = nnt_host_tensor(be, eng_shape4(4, 1, 5, 3), 16, &hw);
    eng_shape ys = eng_conv_output_shape(&x.shape, &w.shape, &d);
    eng_tensor dy = nnt_host_tensor(be, ys, 17, &r), y = nnt_zeros_like(be, &dy);
    eng_tensor gx = nnt_zeros_like(be, &x), gw = nnt_zeros_like(be, &w);
    eng_plan *plan = eng_conv_plan(be, &d, &x.shape, &w.shape, false);
    eng_conv_backward(be, plan, &x, &w, &dy, &gx, &gw, NULL);
    conv_args a = {plan, &x, &w, NULL, &y};
    check_fd(be, run_conv, &a, &x, hx, &gx, &y, r, "same conv fd dx");
    check_fd(be, run_conv, &a, &w, hw, &gw, &y, r, "same conv fd dw");
    eng_plan_free(be, plan);
    eng_tensor *all[] = {&x, &w, &dy, &y, &gx, &gw};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hw), free(r);
    eng_backend_close(be);
}

typedef struct {
    eng_tensor *x, *gamma, *beta, *rm, *rv, *mean, *invstd, *y;
} bn_args;

static void run_bn(eng_backend *be, void *arg)
{
    bn_args *a = arg;
    eng_batchnorm_forward_train(be, 0.1, 1e-5, a->x, a->gamma, a->beta, a->rm, a->rv, a->mean, a->invstd,
                                a->y, NULL);
}

static void bn_fd(eng_shape xs, const char *what_x, const char *what_g, const char *what_b)
{
    eng_backend *be = nnt_open_cpu();
    int64_t c = xs.dim[1];
    float *hx, *hg, *hb, *r, *hrm, *hrv;
    eng_tensor x = nnt_host_tensor(be, xs, 21, &hx), gamma = nnt_host_tensor(be, shape1(c), 22, &hg),
               beta = nnt_host_tensor(be, shape1(c), 23, &hb), dy = nnt_host_tensor(be, xs, 24, &r),
               rm = nnt_host_tensor(be, shape1(c), 25, &hrm), rv = nnt_host_tensor(be, shape1(c), 26, &hrv);
    eng_tensor mean = nnt_zeros_like(be, &gamma), invstd = nnt_zeros_like(be, &gamma), y = nnt_zeros_like(be, &x);
    eng_tensor gx = nnt_zeros_like(be, &x), gg = nnt_zeros_like(be, &gamma), gb = nnt_zeros_like(be, &beta);
    bn_args a = {&x, &gamma, &beta, &rm, &rv, &mean, &invstd, &y};
    run_bn(be, &a);
    eng_batchnorm_backward(be, &x, &gamma, &mean, &invstd, &dy, &gx, &gg, &gb, NULL);
    check_fd(be, run_bn, &a, &x, hx, &gx, &y, r, what_x);
    check_fd(be, run_bn, &a, &gamma, hg, &gg, &y, r, what_g);
    check_fd(be, run_bn, &a, &beta, hb, &gb, &y, r, what_b);
    eng_tensor *all[] = {&x, &gamma, &beta, &dy, &rm, &rv, &mean, &invstd, &y, &gx, &gg, &gb};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hg), free(hb), free(r), free(hrm), free(hrv);
    eng_backend_close(be);
}

Test(nn_conv, batchnorm2d_gradients_match_finite_differences)
{
    bn_fd(eng_shape4(3, 2, 2, 3), "bn4d fd dx", "bn4d fd dgamma", "bn4d fd dbeta");
}

Test(nn_conv, batchnorm1d_gradients_match_finite_differences)
{
    bn_fd(eng_shape2(5, 3), "bn2d fd dx", "bn2d fd dgamma", "bn2d fd dbeta");
}

/* ---- batch norm against PyTorch ----------------------------------------------------------- */

static void bn_train_case(const char *kase)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, kase, "x"), gamma = nnt_load(be, kase, "gamma"), beta = nnt_load(be, kase, "beta"),
            rm0 = nnt_load(be, kase, "rm0"), rv0 = nnt_load(be, kase, "rv0"), rm1 = nnt_load(be, kase, "rm1"),
            rv1 = nnt_load(be, kase, "rv1"), y = nnt_load(be, kase, "y"), dy = nnt_load(be, kase, "dy"), dx = nnt_load(be, kase, "dx"),
            dgamma = nnt_load(be, kase, "dgamma"), dbeta = nnt_load(be, kase, "dbeta");
    eng_tensor mean = nnt_zeros_like(be, &gamma.t), invstd = nnt_zeros_like(be, &gamma.t), out = nnt_zeros_like(be, &x.t);
    eng_tensor gx = nnt_zeros_like(be, &x.t), gg = nnt_zeros_like(be, &gamma.t), gb = nnt_zeros_like(be, &beta.t);
    /* rm0/rv0 are updated in place into PyTorch's rm1/rv1. */
    eng_batchnorm_forward_train(be, 0.1, 1e-5, &x.t, &gamma.t, &beta.t, &rm0.t, &rv0.t, &mean, &invstd, &out,
                                NULL);
    char what[64];
    snprintf(what, sizeof what, "%s y", kase);
    expect_close(be, &out, &y, FWD_TOL, what);
    snprintf(what, sizeof what, "%s running_mean", kase);
    expect_close(be, &rm0.t, &rm1, FWD_TOL, what);
    snprintf(what, sizeof what, "%s running_var", kase);
    expect_close(be, &rv0.t, &rv1, FWD_TOL, what);
    eng_batchnorm_backward(be, &x.t, &gamma.t, &mean, &invstd, &dy.t, &gx, &gg, &gb, NULL);
    snprintf(what, sizeof what, "%s dx", kase);
    expect_close(be, &gx, &dx, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s dgamma", kase);
    expect_close(be, &gg, &dgamma, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s dbeta", kase);
    expect_close(be, &gb, &dbeta, GRAD_TOL, what);
    /* dx NULL skips; dgamma and dbeta accumulate. */
    eng_batchnorm_backward(be, &x.t, &gamma.t, &mean, &invstd, &dy.t, NULL, &gg, &gb, NULL);
    for (size_t k = 0; k < dgamma.a.count; k++)
        ((float *)dgamma.a.data)[k] *= 2.0f, ((float *)dbeta.a.data)[k] *= 2.0f;
    snprintf(what, sizeof what, "%s 2×dgamma", kase);
    expect_close(be, &gg, &dgamma, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s 2×dbeta", kase);
    expect_close(be, &gb, &dbeta, GRAD_TOL, what);
    eng_tensor *mine[] = {&mean, &invstd, &out, &gx, &gg, &gb};
    for (size_t i = 0; i < ARRAY_LEN(mine); i++)
        eng_tensor_free(be, mine[i]);
    nnt_fixture *all[] = {&x, &gamma, &beta, &rm0, &rv0, &rm1, &rv1, &y, &dy, &dx, &dgamma, &dbeta};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

Test(nn_conv, batchnorm2d_train_matches_torch) { bn_train_case("bn_train4d"); }
Test(nn_conv, batchnorm1d_train_matches_torch) { bn_train_case("bn_train2d"); }
Test(nn_conv, batchnorm2d_train_in_channel_blocks_matches_torch) { bn_train_case("bn_train4d_blocks"); }
Test(nn_conv, batchnorm2d_train_on_large_planes_matches_torch) { bn_train_case("bn_train4d_large"); }

Test(nn_conv, batchnorm_eval_matches_torch)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "bn_eval", "x"), gamma = nnt_load(be, "bn_eval", "gamma"), beta = nnt_load(be, "bn_eval", "beta"),
            rm = nnt_load(be, "bn_eval", "rm"), rv = nnt_load(be, "bn_eval", "rv"), y = nnt_load(be, "bn_eval", "y");
    eng_tensor out = nnt_zeros_like(be, &x.t);
    eng_batchnorm_forward_eval(be, 1e-5, &x.t, &gamma.t, &beta.t, &rm.t, &rv.t, &out);
    expect_close(be, &out, &y, FWD_TOL, "bn_eval y");
    eng_tensor_free(be, &out);
    nnt_fixture *all[] = {&x, &gamma, &beta, &rm, &rv, &y};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

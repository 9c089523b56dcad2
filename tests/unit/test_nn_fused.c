/*
 * test_nn_fused.c — the fused layers of the model engine (batch norm + ReLU, residual add +
 * ReLU, and eval-mode conv + batch norm [+ residual] [+ ReLU | SiLU]) against the separate layers
 * they replace, which test_nn*.c check against PyTorch; and what the threads may not change.
 *
 * BN+ReLU and add+ReLU do the same arithmetic as the separate layers, so they must agree to
 * the bit (backward within 1e-6: the masked sums may be vectorised differently). The eval
 * convolution folds batch norm into the weights, which rounds differently: within 1e-5 of the
 * largest value. Gradients accumulate (nn.h), so every gradient starts non-zero here.
 * ReLU lets NaN through, as PyTorch does (the trainer's NaN check depends on it), and batch
 * norm gives the same bits on 1 thread as on 2.
 *
 * The native layout (nn.h) the evaluation chain runs in: on the cpu, oneDNN's nChwBc, checked
 * element by element against its index formula, for both blocks the backend may pick (8 and
 * 16, forced through cpu_force_block whatever this CPU is); the eval convolution, the pools and
 * the channel product that take it must give what the logical path gives, and so must the
 * training layers a ResNet runs in it (convolution, batch norm, pools' and the residual add's
 * backwards); every other layer must refuse it.
 */
#include "cpu/cpu.h"
#include "log.h"
#include "nn.h"
#include "util.h"

#include "test_nn_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static eng_backend *open_threads(int threads)
{
    char *err = NULL;
    eng_backend_options opt = {.threads = threads, .seed = 1234};
    eng_backend *be = eng_backend_open("cpu", &opt, &err);
    cr_assert(be, "%s", err);
    return be;
}

/* max |a − b| / max(|b|, tiny) over two tensors. */
static double rel_diff(eng_backend *be, const eng_tensor *a, const eng_tensor *b)
{
    float *ha = nnt_download(be, a), *hb = nnt_download(be, b);
    double e = nnt_rel_error_host(ha, hb, (size_t)eng_numel(&a->shape));
    free(ha), free(hb);
    return e;
}

static bool same_bits(eng_backend *be, const eng_tensor *a, const eng_tensor *b)
{
    float *ha = nnt_download(be, a), *hb = nnt_download(be, b);
    bool same = memcmp(ha, hb, (size_t)eng_numel(&a->shape) * sizeof(float)) == 0;
    free(ha), free(hb);
    return same;
}

/* A tensor of normal values (shifted by `shift`, so a ReLU after it masks a good share). */
static eng_tensor normal(eng_backend *be, eng_shape s, unsigned seed, float shift)
{
    float *h;
    eng_tensor t = nnt_host_tensor(be, s, seed, &h);
    for (int64_t i = 0; i < eng_numel(&s); i++)
        h[i] += shift;
    eng_upload(be, &t, h);
    free(h);
    return t;
}

static eng_tensor copy_of(eng_backend *be, const eng_tensor *t)
{
    eng_tensor c = eng_tensor_new(be, t->shape);
    eng_copy(be, t, &c);
    return c;
}

static void free_all(eng_backend *be, eng_tensor *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        eng_tensor_free(be, &t[i]);
}

/* ---- batch norm + ReLU --------------------------------------------------------------------- */

/* The per-channel tensors of one batch norm. */
typedef struct {
    eng_tensor gamma, beta, rmean, rvar, mean, invstd, dgamma, dbeta;
} bn_params;

/* Running variances in [0.5, 4): positive, as a real network's are. */
static eng_tensor variances(eng_backend *be, eng_shape s, unsigned seed)
{
    float *h;
    eng_tensor t = nnt_host_tensor(be, s, seed, &h);
    for (int64_t i = 0; i < eng_numel(&s); i++)
        h[i] = 0.5f + fmodf(fabsf(h[i]), 3.5f);
    eng_upload(be, &t, h);
    free(h);
    return t;
}

static bn_params bn_new(eng_backend *be, int64_t c, unsigned seed)
{
    eng_shape s = {.ndim = 1, .dim = {c}};
    bn_params p = {normal(be, s, seed, 1.0f),  normal(be, s, seed + 1, 0.0f), normal(be, s, seed + 2, 0.0f),
                   variances(be, s, seed + 3), eng_tensor_new(be, s),         eng_tensor_new(be, s),
                   normal(be, s, seed + 4, 0.0f), normal(be, s, seed + 5, 0.0f)};
    return p;
}

static bn_params bn_copy(eng_backend *be, const bn_params *p)
{
    bn_params q = {copy_of(be, &p->gamma), copy_of(be, &p->beta), copy_of(be, &p->rmean), copy_of(be, &p->rvar),
                   copy_of(be, &p->mean), copy_of(be, &p->invstd), copy_of(be, &p->dgamma), copy_of(be, &p->dbeta)};
    return q;
}

static void bn_free(eng_backend *be, bn_params *p) { free_all(be, &p->gamma, sizeof *p / sizeof(eng_tensor)); }

/* Fused and separate, train mode: outputs and running statistics bit for bit, gradients
 * (accumulated onto non-zero ones) within 1e-6. */
static void bn_relu_train_case(eng_shape s)
{
    eng_backend *be = nnt_open_cpu();
    int64_t c = s.dim[1];
    eng_tensor x = normal(be, s, 1, 0.3f), dy = normal(be, s, 2, 0.0f), y1 = eng_tensor_new(be, s),
               y2 = eng_tensor_new(be, s), dx1 = normal(be, s, 3, 0.0f), dx2 = copy_of(be, &dx1),
               pre = eng_tensor_new(be, s);
    bn_params a = bn_new(be, c, 10), b = bn_copy(be, &a);
    eng_batchnorm_relu_forward_train(be, 0.1, 1e-5, &x, &a.gamma, &a.beta, &a.rmean, &a.rvar, &a.mean,
                                     &a.invstd, &y1, NULL);
    eng_batchnorm_forward_train(be, 0.1, 1e-5, &x, &b.gamma, &b.beta, &b.rmean, &b.rvar, &b.mean, &b.invstd,
                                &y2, NULL);
    eng_relu_forward(be, &y2, &y2);
    cr_expect(same_bits(be, &y1, &y2), "forward differs from batchnorm then relu");
    cr_expect(same_bits(be, &a.rmean, &b.rmean) && same_bits(be, &a.rvar, &b.rvar), "running statistics differ");

    eng_batchnorm_relu_backward(be, &x, &a.gamma, &a.mean, &a.invstd, &y1, &dy, &dx1, &a.dgamma, &a.dbeta,
                                NULL);
    eng_zero(be, &pre);
    eng_relu_backward(be, &y2, &dy, &pre);
    eng_batchnorm_backward(be, &x, &b.gamma, &b.mean, &b.invstd, &pre, &dx2, &b.dgamma, &b.dbeta, NULL);
    cr_expect_leq(rel_diff(be, &dx1, &dx2), 1e-6);
    cr_expect_leq(rel_diff(be, &a.dgamma, &b.dgamma), 1e-6);
    cr_expect_leq(rel_diff(be, &a.dbeta, &b.dbeta), 1e-6);

    eng_tensor all[] = {x, dy, y1, y2, dx1, dx2, pre};
    free_all(be, all, ARRAY_LEN(all));
    bn_free(be, &a), bn_free(be, &b);
    eng_backend_close(be);
}

Test(nn_fused, batchnorm_relu_is_batchnorm_then_relu_2d) { bn_relu_train_case(eng_shape4(3, 5, 7, 9)); }

Test(nn_fused, batchnorm_relu_is_batchnorm_then_relu_1d) { bn_relu_train_case(eng_shape2(6, 11)); }

Test(nn_fused, batchnorm_relu_eval_is_batchnorm_eval_then_relu)
{
    eng_backend *be = nnt_open_cpu();
    eng_shape s = eng_shape4(2, 6, 5, 3);
    eng_tensor x = normal(be, s, 4, 0.2f), y1 = eng_tensor_new(be, s), y2 = eng_tensor_new(be, s);
    bn_params p = bn_new(be, 6, 20);
    eng_batchnorm_relu_forward_eval(be, 1e-5, &x, &p.gamma, &p.beta, &p.rmean, &p.rvar, &y1);
    eng_batchnorm_forward_eval(be, 1e-5, &x, &p.gamma, &p.beta, &p.rmean, &p.rvar, &y2);
    eng_relu_forward(be, &y2, &y2);
    cr_expect(same_bits(be, &y1, &y2));
    eng_tensor all[] = {x, y1, y2};
    free_all(be, all, ARRAY_LEN(all));
    bn_free(be, &p);
    eng_backend_close(be);
}

/* ---- residual add + ReLU ------------------------------------------------------------------- */

Test(nn_fused, add_relu_is_add_then_relu)
{
    eng_backend *be = nnt_open_cpu();
    eng_shape s = eng_shape4(2, 16, 33, 17); /* past the size where the loops go parallel */
    eng_tensor a = normal(be, s, 5, 0.0f), b = normal(be, s, 6, 0.0f), dy = normal(be, s, 7, 0.0f),
               y1 = eng_tensor_new(be, s), y2 = eng_tensor_new(be, s), da1 = normal(be, s, 8, 0.0f),
               db1 = normal(be, s, 9, 0.0f), da2 = copy_of(be, &da1), db2 = copy_of(be, &db1),
               mid = eng_tensor_new(be, s), one1 = normal(be, s, 10, 0.0f), one2 = copy_of(be, &one1);
    eng_add_relu_forward(be, &a, &b, &y1);
    eng_add_forward(be, &a, &b, &y2);
    eng_relu_forward(be, &y2, &y2);
    cr_expect(same_bits(be, &y1, &y2));

    eng_add_relu_backward(be, &y1, &dy, &da1, &db1);
    eng_zero(be, &mid);
    eng_relu_backward(be, &y2, &dy, &mid);
    eng_add_backward(be, &mid, &da2, &db2);
    cr_expect(same_bits(be, &da1, &da2) && same_bits(be, &db1, &db2), "two gradients");
    eng_add_relu_backward(be, &y1, &dy, NULL, &one1); /* one gradient only */
    eng_add_backward(be, &mid, NULL, &one2);
    cr_expect(same_bits(be, &one1, &one2), "one gradient");

    eng_tensor all[] = {a, b, dy, y1, y2, da1, db1, da2, db2, mid, one1, one2};
    free_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

/* ---- eval conv + batch norm [+ residual] [+ ReLU] -------------------------------------------- */

typedef struct {
    const char *name;
    int64_t n, c, h, w, o, k;
    eng_conv_desc d;
} conv_case;

static const conv_case CONV_CASES[] = {
    {"stem 7x7/2 from 3 channels", 2, 3, 23, 19, 16, 7, {.stride = {2, 2}, .pad = {3, 3}}},
    {"3x3 16->32", 2, 16, 9, 11, 32, 3, {.pad = {1, 1}}},
    {"1x1/2 downsample 32->64", 3, 32, 9, 8, 64, 1, {.stride = {2, 2}}},
    {"3x3 groups 4", 2, 32, 7, 7, 32, 3, {.pad = {1, 1}, .groups = 4}},
    {"3x3 odd channels", 1, 5, 6, 7, 7, 3, {.pad = {1, 1}}},
    {"3x3/2 TensorFlow same, 0 above, 1 below", 2, 16, 8, 8, 32, 3, {.stride = {2, 2}, .pad_extra = {1, 1}}},
    {"5x5/2 depthwise TensorFlow same, 1 above, 2 below", 2, 16, 8, 8, 16, 5,
     {.stride = {2, 2}, .pad = {1, 1}, .groups = 16, .pad_extra = {1, 1}}},
};

/* A case's input, weight and output shapes, and its plan. */
static eng_plan *conv_case_plan(eng_backend *be, const conv_case *k, eng_shape *xs, eng_shape *ws, eng_shape *ys)
{
    *xs = eng_shape4(k->n, k->c, k->h, k->w);
    *ws = eng_shape4(k->o, k->c / (k->d.groups ? k->d.groups : 1), k->k, k->k);
    *ys = eng_conv_output_shape(xs, ws, &k->d);
    return eng_conv_plan(be, &k->d, xs, ws, false);
}

static const char *const ACT_NAMES[] = {"none", "relu", "silu"};

/* The separate layers: conv, batch norm (eval), add, relu or silu. */
static void reference(eng_backend *be, eng_plan *plan, const eng_tensor *x, const eng_tensor *w, const bn_params *p,
                      const eng_tensor *residual, eng_eval_act act, const eng_tensor *y)
{
    eng_conv_forward(be, plan, x, w, NULL, y);
    eng_batchnorm_forward_eval(be, 1e-5, y, &p->gamma, &p->beta, &p->rmean, &p->rvar, y);
    if (residual)
        eng_add_forward(be, y, residual, y);
    if (act == ENG_EVAL_ACT_RELU)
        eng_relu_forward(be, y, y);
    if (act == ENG_EVAL_ACT_SILU)
        eng_silu_forward(be, y, y);
}

Test(nn_fused, conv_bn_eval_is_the_separate_layers)
{
    eng_backend *be = nnt_open_cpu();
    for (size_t i = 0; i < ARRAY_LEN(CONV_CASES); i++) {
        const conv_case *k = &CONV_CASES[i];
        eng_shape xs, ws, ys;
        eng_plan *plan = conv_case_plan(be, k, &xs, &ws, &ys);
        eng_tensor x = normal(be, xs, 30, 0.0f), w = normal(be, ws, 31, 0.0f), r = normal(be, ys, 32, 0.0f),
                   got = eng_tensor_new(be, ys), want = eng_tensor_new(be, ys);
        bn_params p = bn_new(be, k->o, 40);
        /* every post-op combination, on one plan (each change remakes its eval primitive) */
        for (int with_residual = 0; with_residual < 2; with_residual++)
            for (eng_eval_act act = ENG_EVAL_ACT_NONE; act <= ENG_EVAL_ACT_SILU; act++) {
                const eng_tensor *res = with_residual ? &r : NULL;
                eng_conv_bn_forward_eval(be, plan, &x, &w, 1e-5, &p.gamma, &p.beta, &p.rmean, &p.rvar, res, act,
                                         &got);
                reference(be, plan, &x, &w, &p, res, act, &want);
                double e = rel_diff(be, &got, &want);
                cr_expect_leq(e, 1e-5, "%s, residual %d, %s: relative error %g", k->name, with_residual,
                              ACT_NAMES[act], e);
            }
        eng_tensor all[] = {x, w, r, got, want};
        free_all(be, all, ARRAY_LEN(all));
        bn_free(be, &p);
        eng_plan_free(be, plan);
    }
    eng_backend_close(be);
}

/* The training primitives of a plan still work after its eval primitive was made. */
Test(nn_fused, conv_plan_trains_after_eval)
{
    eng_backend *be = nnt_open_cpu();
    eng_conv_desc d = {.pad = {1, 1}};
    eng_shape xs = eng_shape4(2, 16, 8, 8), ws = eng_shape4(16, 16, 3, 3);
    eng_plan *plan = eng_conv_plan(be, &d, &xs, &ws, false), *fresh = eng_conv_plan(be, &d, &xs, &ws, false);
    eng_tensor x = normal(be, xs, 50, 0.0f), w = normal(be, ws, 51, 0.0f), y = eng_tensor_new(be, xs),
               y0 = eng_tensor_new(be, xs), dy = normal(be, xs, 52, 0.0f), dx = normal(be, xs, 53, 0.0f),
               dw = normal(be, ws, 54, 0.0f), dx0 = copy_of(be, &dx), dw0 = copy_of(be, &dw);
    bn_params p = bn_new(be, 16, 60);
    eng_conv_bn_forward_eval(be, plan, &x, &w, 1e-5, &p.gamma, &p.beta, &p.rmean, &p.rvar, NULL, ENG_EVAL_ACT_RELU,
                             &y);
    eng_conv_forward(be, plan, &x, &w, NULL, &y);
    eng_conv_forward(be, fresh, &x, &w, NULL, &y0);
    cr_expect(same_bits(be, &y, &y0));
    eng_conv_backward(be, plan, &x, &w, &dy, &dx, &dw, NULL);
    eng_conv_backward(be, fresh, &x, &w, &dy, &dx0, &dw0, NULL);
    cr_expect(same_bits(be, &dx, &dx0) && same_bits(be, &dw, &dw0));
    eng_tensor all[] = {x, w, y, y0, dy, dx, dw, dx0, dw0};
    free_all(be, all, ARRAY_LEN(all));
    bn_free(be, &p);
    eng_plan_free(be, plan);
    eng_plan_free(be, fresh);
    eng_backend_close(be);
}

/* ---- NaN and threads ------------------------------------------------------------------------ */

Test(nn_fused, relu_passes_nan_like_torch)
{
    eng_backend *be = nnt_open_cpu();
    eng_shape s = eng_shape2(1, 4);
    const float in[4] = {NAN, -1.0f, 2.0f, -0.0f};
    eng_tensor x = eng_tensor_new(be, s), zero = eng_tensor_new(be, s), y = eng_tensor_new(be, s);
    eng_upload(be, &x, in);
    eng_zero(be, &zero);
    float out[4];
    eng_relu_forward(be, &x, &y);
    eng_download(be, &y, out);
    cr_expect(isnan(out[0]) && out[1] == 0.0f && out[2] == 2.0f && out[3] == 0.0f);
    eng_add_relu_forward(be, &x, &zero, &y);
    eng_download(be, &y, out);
    cr_expect(isnan(out[0]) && out[1] == 0.0f && out[2] == 2.0f);
    eng_tensor all[] = {x, zero, y};
    free_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

/* Batch norm's forward and backward on one thread and on two: the same bits. */
static void bn_run(int threads, eng_shape s, float *out[3])
{
    eng_backend *be = open_threads(threads);
    eng_tensor x = normal(be, s, 70, 0.0f), dy = normal(be, s, 71, 0.0f), y = eng_tensor_new(be, s),
               dx = eng_tensor_new(be, s);
    bn_params p = bn_new(be, s.dim[1], 80);
    eng_zero(be, &dx);
    eng_batchnorm_relu_forward_train(be, 0.1, 1e-5, &x, &p.gamma, &p.beta, &p.rmean, &p.rvar, &p.mean,
                                     &p.invstd, &y, NULL);
    eng_batchnorm_relu_backward(be, &x, &p.gamma, &p.mean, &p.invstd, &y, &dy, &dx, &p.dgamma, &p.dbeta,
                                NULL);
    out[0] = nnt_download(be, &y), out[1] = nnt_download(be, &dx), out[2] = nnt_download(be, &p.dgamma);
    eng_tensor all[] = {x, dy, y, dx};
    free_all(be, all, ARRAY_LEN(all));
    bn_free(be, &p);
    eng_backend_close(be);
}

static void bn_threads_case(eng_shape s)
{
    float *one[3], *two[3];
    bn_run(1, s, one);
    bn_run(2, s, two);
    size_t values = (size_t)eng_numel(&s), n[3] = {values, values, (size_t)s.dim[1]};
    for (int i = 0; i < 3; i++) {
        cr_expect(memcmp(one[i], two[i], n[i] * sizeof(float)) == 0, "output %d differs", i);
        free(one[i]), free(two[i]);
    }
}

/* Planes of 143 values go channel by channel; of 9, in blocks of 16 channels (the last of 8). */
Test(nn_fused, batchnorm_does_not_depend_on_the_thread_count) { bn_threads_case(eng_shape4(4, 24, 13, 11)); }

Test(nn_fused, batchnorm_in_blocks_does_not_depend_on_the_thread_count)
{
    bn_threads_case(eng_shape4(4, 40, 3, 3));
}

/* ---- native layout ----------------------------------------------------------------------------- */

static eng_tensor native(eng_tensor t)
{
    t.layout = ENG_LAYOUT_NATIVE;
    return t;
}

/* A native tensor's memory is nChwBc; upload, download and copy convert both ways. */
static void blocked_layout_case(int block)
{
    cpu_force_block(block);
    eng_backend *be = nnt_open_cpu();
    const int64_t n = 2, c = 32, h = 3, w = 5, hw = h * w, count = n * c * hw;
    eng_shape s = eng_shape4(n, c, h, w);
    float *logical = malloc((size_t)count * sizeof *logical), *back = malloc((size_t)count * sizeof *back);
    for (int64_t i = 0; i < count; i++)
        logical[i] = (float)i;
    eng_tensor t = native(eng_tensor_new(be, s)), plain = eng_tensor_new(be, s), again = native(eng_tensor_new(be, s));
    eng_upload(be, &t, logical);
    const float *raw = (const float *)t.base;
    int wrong = 0;
    for (int64_t in = 0; in < n; in++)
        for (int64_t ic = 0; ic < c; ic++)
            for (int64_t is = 0; is < hw; is++)
                wrong += raw[((in * (c / block) + ic / block) * hw + is) * block + ic % block] !=
                         logical[(in * c + ic) * hw + is];
    cr_expect_eq(wrong, 0, "block %d: %d elements out of place", block, wrong);
    eng_download(be, &t, back);
    cr_expect(memcmp(back, logical, (size_t)count * sizeof *back) == 0, "download");
    eng_copy(be, &t, &plain); /* native → logical is a plain copy of the values */
    cr_expect(memcmp(plain.base, logical, (size_t)count * sizeof *back) == 0, "copy out");
    eng_copy(be, &plain, &again);
    cr_expect(memcmp(again.base, t.base, (size_t)count * sizeof *back) == 0, "copy in");
    /* 12 channels do not split into blocks of 8 or 16: a native tensor stays logical */
    eng_tensor odd = native(eng_tensor_new(be, eng_shape4(1, 12, 2, 2)));
    eng_upload(be, &odd, logical);
    cr_expect(memcmp(odd.base, logical, 48 * sizeof(float)) == 0, "12 channels");
    eng_tensor all[] = {t, plain, again, odd};
    free_all(be, all, ARRAY_LEN(all));
    free(logical), free(back);
    eng_backend_close(be);
}

Test(nn_layout, native_is_nchw16c_by_index) { blocked_layout_case(16); }
Test(nn_layout, native_is_nchw8c_by_index) { blocked_layout_case(8); }

/* Every mix of native and logical x, residual and y gives the separate layers' result. */
static void conv_native_case(int block)
{
    cpu_force_block(block);
    eng_backend *be = nnt_open_cpu();
    for (size_t i = 0; i < ARRAY_LEN(CONV_CASES); i++) {
        const conv_case *k = &CONV_CASES[i];
        eng_shape xs, ws, ys;
        eng_plan *plan = conv_case_plan(be, k, &xs, &ws, &ys);
        eng_tensor x = normal(be, xs, 30, 0.0f), w = normal(be, ws, 31, 0.0f), r = normal(be, ys, 32, 0.0f),
                   want = eng_tensor_new(be, ys), xn = native(eng_tensor_new(be, xs)),
                   rn = native(eng_tensor_new(be, ys)), yn = native(eng_tensor_new(be, ys)),
                   got = eng_tensor_new(be, ys);
        eng_copy(be, &x, &xn);
        eng_copy(be, &r, &rn);
        bn_params p = bn_new(be, k->o, 40);
        for (eng_eval_act act = ENG_EVAL_ACT_RELU; act <= ENG_EVAL_ACT_SILU; act++) {
            reference(be, plan, &x, &w, &p, &r, act, &want);
            for (int mix = 1; mix < 8; mix++) {
                const eng_tensor *xa = mix & 1 ? &xn : &x, *ra = mix & 2 ? &rn : &r, *ya = mix & 4 ? &yn : &got;
                eng_conv_bn_forward_eval(be, plan, xa, &w, 1e-5, &p.gamma, &p.beta, &p.rmean, &p.rvar, ra, act, ya);
                double e = rel_diff(be, ya, &want);
                cr_expect_leq(e, 1e-5, "block %d, %s, %s, x %s, residual %s, y %s: relative error %g", block, k->name,
                              ACT_NAMES[act], mix & 1 ? "native" : "logical", mix & 2 ? "native" : "logical",
                              mix & 4 ? "native" : "logical", e);
            }
        }
        eng_tensor all[] = {x, w, r, want, xn, rn, yn, got};
        free_all(be, all, ARRAY_LEN(all));
        bn_free(be, &p);
        eng_plan_free(be, plan);
    }
    eng_backend_close(be);
}

Test(nn_layout, conv_bn_eval_reads_and_writes_native_16) { conv_native_case(16); }
Test(nn_layout, conv_bn_eval_reads_and_writes_native_8) { conv_native_case(8); }

/* Max pool (with a NaN, which must win its windows) and adaptive average pool read a native
 * input to the same bits as a logical one. */
static void pool_native_case(int block)
{
    cpu_force_block(block);
    eng_backend *be = nnt_open_cpu();
    eng_shape xs = eng_shape4(2, 32, 9, 7);
    float *h;
    eng_tensor x = nnt_host_tensor(be, xs, 90, &h);
    h[5 * 63 + 10] = NAN;
    eng_upload(be, &x, h);
    eng_tensor xn = native(eng_tensor_new(be, xs));
    eng_copy(be, &x, &xn);
    eng_pool_desc d = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}};
    eng_shape ps = eng_pool_output_shape(&xs, &d);
    eng_tensor y = eng_tensor_new(be, ps), yn = native(eng_tensor_new(be, ps));
    eng_maxpool_forward(be, &d, &x, &y);
    eng_maxpool_forward(be, &d, &xn, &yn);
    float *a = nnt_download(be, &y), *b = nnt_download(be, &yn);
    cr_expect(memcmp(a, b, (size_t)eng_numel(&ps) * sizeof *a) == 0, "block %d: max pool", block);
    free(a), free(b);
    eng_shape one = eng_shape4(2, 32, 1, 1), some = eng_shape4(2, 32, 2, 3);
    eng_tensor g1 = eng_tensor_new(be, one), g1n = eng_tensor_new(be, one), g2 = eng_tensor_new(be, some),
               g2n = native(eng_tensor_new(be, some)), g2l = eng_tensor_new(be, some);
    eng_adaptive_avgpool_forward(be, &x, &g1);
    eng_adaptive_avgpool_forward(be, &xn, &g1n);
    eng_adaptive_avgpool_forward(be, &x, &g2);
    eng_adaptive_avgpool_forward(be, &xn, &g2n); /* native in, native out */
    eng_adaptive_avgpool_forward(be, &xn, &g2l); /* native in, logical out */
    cr_expect(same_bits(be, &g1, &g1n) && same_bits(be, &g2, &g2n) && same_bits(be, &g2, &g2l),
              "block %d: adaptive average pool", block);
    eng_tensor all[] = {x, xn, y, yn, g1, g1n, g2, g2n, g2l};
    free_all(be, all, ARRAY_LEN(all));
    free(h);
    eng_backend_close(be);
}

Test(nn_layout, pools_read_native_16) { pool_native_case(16); }
Test(nn_layout, pools_read_native_8) { pool_native_case(8); }

/* Squeeze-excitation's channel product on a native x and y: the logical product's bits (one
 * multiplication per element either way), for a scale of N × C × 1 × 1 and of N × C. */
static void channel_scale_native_case(int block)
{
    cpu_force_block(block);
    eng_backend *be = nnt_open_cpu();
    eng_shape xs = eng_shape4(3, 48, 5, 7);
    eng_tensor x = normal(be, xs, 70, 0.0f), s4 = normal(be, eng_shape4(3, 48, 1, 1), 71, 0.0f),
               xn = native(eng_tensor_new(be, xs)), y = eng_tensor_new(be, xs), yn = native(eng_tensor_new(be, xs)),
               back = eng_tensor_new(be, xs);
    eng_tensor s2 = eng_reshape(&s4, eng_shape2(3, 48));
    eng_copy(be, &x, &xn);
    const eng_tensor *scales[] = {&s4, &s2};
    for (int i = 0; i < 2; i++) {
        eng_channel_scale_forward(be, &x, scales[i], &y);
        eng_channel_scale_forward(be, &xn, scales[i], &yn);
        eng_copy(be, &yn, &back);
        cr_expect(same_bits(be, &y, &back), "block %d, scale of %d dims", block, scales[i]->shape.ndim);
    }
    eng_tensor all[] = {x, s4, xn, y, yn, back};
    free_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

Test(nn_layout, channel_scale_reads_and_writes_native_16) { channel_scale_native_case(16); }
Test(nn_layout, channel_scale_reads_and_writes_native_8) { channel_scale_native_case(8); }

Test(nn_layout, channel_scale_from_native_to_logical_is_refused, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_shape xs = eng_shape4(1, 16, 2, 2);
    eng_tensor x = native(eng_tensor_new(be, xs)), s = eng_tensor_new(be, eng_shape4(1, 16, 1, 1)),
               y = eng_tensor_new(be, xs);
    eng_zero(be, &x);
    eng_zero(be, &s);
    eng_channel_scale_forward(be, &x, &s, &y);
}

/* A layer that only knows the logical layout refuses a native tensor (it would read it in
 * the wrong order): a broken invariant, so an abort with file and line, not wrong numbers. */
Test(nn_layout, silu_refuses_a_native_tensor, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_tensor x = native(eng_tensor_new(be, eng_shape4(1, 16, 2, 2)));
    eng_zero(be, &x);
    eng_silu_forward(be, &x, &x);
}

/* An elementwise layer takes the native layout only for all its operands. */
Test(nn_layout, add_of_native_and_logical_is_refused, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_shape s = eng_shape4(1, 16, 2, 2);
    eng_tensor a = native(eng_tensor_new(be, s)), b = eng_tensor_new(be, s);
    eng_zero(be, &a);
    eng_zero(be, &b);
    eng_add_relu_forward(be, &a, &b, &a);
}

Test(nn_layout, adaptive_pool_from_logical_to_native_is_refused, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_tensor x = eng_tensor_new(be, eng_shape4(1, 16, 4, 4)), y = native(eng_tensor_new(be, eng_shape4(1, 16, 2, 2)));
    eng_zero(be, &x);
    eng_adaptive_avgpool_forward(be, &x, &y);
}

/* ---- native layout in training -------------------------------------------------------------- */

static eng_tensor native_copy(eng_backend *be, const eng_tensor *t)
{
    eng_tensor n = native(eng_tensor_new(be, t->shape));
    eng_copy(be, t, &n);
    return n;
}

/* A copy of t in the native layout when `as_native`, else in the logical one. */
static eng_tensor copy_as(eng_backend *be, const eng_tensor *t, bool as_native)
{
    return as_native ? native_copy(be, t) : copy_of(be, t);
}

/* The training convolutions a ResNet runs, and a one-pixel output (conv_gemm.c's backward). */
static const conv_case TRAIN_CONV_CASES[] = {
    {"stem 7x7/2 from 3 channels", 2, 3, 23, 19, 16, 7, {.stride = {2, 2}, .pad = {3, 3}}},
    {"3x3 16->32", 2, 16, 9, 11, 32, 3, {.pad = {1, 1}}},
    {"1x1/2 downsample 32->64", 3, 32, 9, 8, 64, 1, {.stride = {2, 2}}},
    {"3x3/2 to one pixel 32->48", 3, 32, 2, 2, 48, 3, {.stride = {2, 2}, .pad = {1, 1}}},
    {"3x3 odd channels", 1, 5, 6, 7, 7, 3, {.pad = {1, 1}}},
};

/* Forward and backward with each of x, y, dy and dx native or logical give the logical result
 * (gradients accumulated onto non-zero ones): the same primitives run, only where a gradient
 * is added in may round differently. */
static void conv_train_native_case(int block)
{
    cpu_force_block(block);
    eng_backend *be = nnt_open_cpu();
    for (size_t i = 0; i < ARRAY_LEN(TRAIN_CONV_CASES); i++) {
        const conv_case *k = &TRAIN_CONV_CASES[i];
        eng_shape xs, ws, ys;
        eng_plan *plan = conv_case_plan(be, k, &xs, &ws, &ys);
        eng_tensor x = normal(be, xs, 80, 0.0f), w = normal(be, ws, 81, 0.0f), dy = normal(be, ys, 82, 0.0f),
                   dx0 = normal(be, xs, 83, 0.0f), dw0 = normal(be, ws, 84, 0.0f), y = eng_tensor_new(be, ys),
                   dx = copy_of(be, &dx0), dw = copy_of(be, &dw0);
        eng_conv_forward(be, plan, &x, &w, NULL, &y);
        eng_conv_backward(be, plan, &x, &w, &dy, &dx, &dw, NULL);
        for (int mix = 1; mix < 16; mix++) {
            eng_tensor xa = copy_as(be, &x, mix & 1), ya = copy_as(be, &y, mix & 2), dya = copy_as(be, &dy, mix & 4),
                       dxa = copy_as(be, &dx0, mix & 8), dwa = copy_of(be, &dw0);
            eng_zero(be, &ya);
            eng_conv_forward(be, plan, &xa, &w, NULL, &ya);
            eng_conv_backward(be, plan, &xa, &w, &dya, &dxa, &dwa, NULL);
            double ey = rel_diff(be, &ya, &y), ex = rel_diff(be, &dxa, &dx), ew = rel_diff(be, &dwa, &dw);
            cr_expect(ey <= 1e-6 && ex <= 1e-6 && ew <= 1e-6, "block %d, %s, mix %d: y %g, dx %g, dw %g", block,
                      k->name, mix, ey, ex, ew);
            eng_tensor some[] = {xa, ya, dya, dxa, dwa};
            free_all(be, some, ARRAY_LEN(some));
        }
        eng_tensor all[] = {x, w, dy, dx0, dw0, y, dx, dw};
        free_all(be, all, ARRAY_LEN(all));
        eng_plan_free(be, plan);
    }
    eng_backend_close(be);
}

Test(nn_layout, conv_trains_on_native_16) { conv_train_native_case(16); }
Test(nn_layout, conv_trains_on_native_8) { conv_train_native_case(8); }

/* A reducer over a group of one (SyncBN's phases, with this rank's sums). */
static int reduce_alone(void *ctx, double *v, size_t n, bool max)
{
    (void)ctx, (void)v, (void)n, (void)max;
    return 0;
}

/* Batch norm's training forward and backward (with and without the fused ReLU, with and without
 * a reducer) on a native x: the logical result within 1e-6 (each channel's sums run in another
 * order), running and saved statistics included. */
static void bn_train_native_case(int block, eng_shape s)
{
    cpu_force_block(block);
    eng_backend *be = nnt_open_cpu();
    const eng_reducer alone = {.reduce = reduce_alone, .world = 1};
    eng_tensor x = normal(be, s, 90, 0.3f), dy = normal(be, s, 91, 0.0f), dx0 = normal(be, s, 92, 0.0f);
    for (int variant = 0; variant < 4; variant++) {
        bool relu = variant & 1;
        const eng_reducer *across = variant & 2 ? &alone : NULL;
        bn_params a = bn_new(be, s.dim[1], 93), b = bn_copy(be, &a);
        eng_tensor y = eng_tensor_new(be, s), dx = copy_of(be, &dx0), xn = native_copy(be, &x),
                   dyn = native_copy(be, &dy), yn = native(eng_tensor_new(be, s)), dxn = native_copy(be, &dx0);
        void (*fwd)(eng_backend *, double, double, const eng_tensor *, const eng_tensor *, const eng_tensor *,
                    const eng_tensor *, const eng_tensor *, const eng_tensor *, const eng_tensor *,
                    const eng_tensor *, const eng_reducer *) =
            relu ? eng_batchnorm_relu_forward_train : eng_batchnorm_forward_train;
        fwd(be, 0.1, 1e-5, &x, &a.gamma, &a.beta, &a.rmean, &a.rvar, &a.mean, &a.invstd, &y, across);
        fwd(be, 0.1, 1e-5, &xn, &b.gamma, &b.beta, &b.rmean, &b.rvar, &b.mean, &b.invstd, &yn, across);
        if (relu) {
            eng_batchnorm_relu_backward(be, &x, &a.gamma, &a.mean, &a.invstd, &y, &dy, &dx, &a.dgamma, &a.dbeta,
                                        across);
            eng_batchnorm_relu_backward(be, &xn, &b.gamma, &b.mean, &b.invstd, &yn, &dyn, &dxn, &b.dgamma,
                                        &b.dbeta, across);
        } else {
            eng_batchnorm_backward(be, &x, &a.gamma, &a.mean, &a.invstd, &dy, &dx, &a.dgamma, &a.dbeta, across);
            eng_batchnorm_backward(be, &xn, &b.gamma, &b.mean, &b.invstd, &dyn, &dxn, &b.dgamma, &b.dbeta, across);
        }
        const eng_tensor *got[] = {&yn, &b.rmean, &b.rvar, &b.mean, &b.invstd, &dxn, &b.dgamma, &b.dbeta},
                         *want[] = {&y, &a.rmean, &a.rvar, &a.mean, &a.invstd, &dx, &a.dgamma, &a.dbeta};
        for (size_t i = 0; i < ARRAY_LEN(got); i++) {
            double e = rel_diff(be, got[i], want[i]);
            cr_expect_leq(e, 1e-6, "block %d, %lld channels of %lld values, relu %d, reducer %d: output %zu off by %g",
                          block, (long long)s.dim[1], (long long)(s.dim[2] * s.dim[3]), relu, across != NULL, i, e);
        }
        eng_tensor some[] = {y, dx, xn, dyn, yn, dxn};
        free_all(be, some, ARRAY_LEN(some));
        bn_free(be, &a), bn_free(be, &b);
    }
    eng_tensor all[] = {x, dy, dx0};
    free_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

/* Large planes (the logical layer goes channel by channel) and small ones (in blocks). */
Test(nn_layout, batchnorm_trains_on_native_16)
{
    bn_train_native_case(16, eng_shape4(3, 32, 9, 7));
    bn_train_native_case(16, eng_shape4(5, 48, 2, 2));
}

Test(nn_layout, batchnorm_trains_on_native_8) { bn_train_native_case(8, eng_shape4(3, 24, 9, 7)); }

/* The backwards of the max pool (NaN and ties in its windows) and of the adaptive average pool
 * into a native dx, and the residual add + ReLU on native tensors: the logical bits. */
static void pool_add_backward_native_case(int block)
{
    cpu_force_block(block);
    eng_backend *be = nnt_open_cpu();
    eng_shape xs = eng_shape4(2, 32, 9, 7);
    float *h;
    eng_tensor x = nnt_host_tensor(be, xs, 100, &h);
    h[5 * 63 + 10] = NAN;
    h[7 * 63 + 1] = h[7 * 63 + 2] = h[7 * 63 + 8] = 3.0f; /* a three-way tie */
    eng_upload(be, &x, h);
    eng_pool_desc d = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}};
    eng_shape ps = eng_pool_output_shape(&xs, &d), one = eng_shape4(2, 32, 1, 1), some = eng_shape4(2, 32, 2, 3);
    eng_tensor dy = normal(be, ps, 101, 0.0f), dx = normal(be, xs, 102, 0.0f), g1 = normal(be, one, 103, 0.0f),
               g2 = normal(be, some, 104, 0.0f), xn = native_copy(be, &x), dyn = native_copy(be, &dy),
               dxn = native_copy(be, &dx);
    eng_maxpool_backward(be, &d, &x, &dy, &dx);
    eng_maxpool_backward(be, &d, &xn, &dyn, &dxn);
    cr_expect(same_bits(be, &dx, &dxn), "block %d: max pool backward", block);
    eng_adaptive_avgpool_backward(be, &g1, &dx);
    eng_adaptive_avgpool_backward(be, &g1, &dxn);
    eng_adaptive_avgpool_backward(be, &g2, &dx);
    eng_adaptive_avgpool_backward(be, &g2, &dxn);
    cr_expect(same_bits(be, &dx, &dxn), "block %d: adaptive average pool backward", block);
    eng_tensor y = eng_tensor_new(be, xs), yn = native(eng_tensor_new(be, xs)), da = copy_of(be, &dx),
               dan = native_copy(be, &dx);
    eng_add_relu_forward(be, &x, &dx, &y);
    eng_add_relu_forward(be, &xn, &dxn, &yn);
    eng_add_relu_backward(be, &y, &dx, &da, NULL);
    eng_add_relu_backward(be, &yn, &dxn, &dan, NULL);
    cr_expect(same_bits(be, &y, &yn) && same_bits(be, &da, &dan), "block %d: add + relu", block);
    eng_tensor all[] = {x, dy, dx, g1, g2, xn, dyn, dxn, y, yn, da, dan};
    free_all(be, all, ARRAY_LEN(all));
    free(h);
    eng_backend_close(be);
}

Test(nn_layout, pool_and_add_backwards_on_native_16) { pool_add_backward_native_case(16); }
Test(nn_layout, pool_and_add_backwards_on_native_8) { pool_add_backward_native_case(8); }

/* ---- Winograd (MACHINE.CPU_WINOGRAD) ---------------------------------------------------------- */

static eng_backend *open_winograd(bool winograd)
{
    char *err = NULL;
    eng_backend_options opt = {.threads = 2, .seed = 1234, .winograd = winograd};
    eng_backend *be = eng_backend_open("cpu", &opt, &err);
    cr_assert(be, "%s", err);
    return be;
}

/* The values of a 3 × 3 stride-1 convolution's output, x and w gradients (in that order) on a
 * backend opened with or without Winograd; its input native when `as_native`. */
static void winograd_run(bool winograd, bool as_native, eng_shape xs, float *out[3])
{
    cpu_force_block(16);
    eng_backend *be = open_winograd(winograd);
    eng_conv_desc d = {.pad = {1, 1}};
    eng_shape ws = eng_shape4(32, xs.dim[1], 3, 3), ys = eng_conv_output_shape(&xs, &ws, &d);
    eng_plan *plan = eng_conv_plan(be, &d, &xs, &ws, false);
    eng_tensor x0 = normal(be, xs, 110, 0.0f), dy0 = normal(be, ys, 111, 0.0f), w = normal(be, ws, 112, 0.0f),
               x = copy_as(be, &x0, as_native), dy = copy_as(be, &dy0, as_native), y = copy_as(be, &dy0, as_native),
               dx = copy_as(be, &x0, as_native), dw = eng_tensor_new(be, ws);
    eng_zero(be, &dx);
    eng_zero(be, &dw);
    eng_conv_forward(be, plan, &x, &w, NULL, &y);
    eng_conv_backward(be, plan, &x, &w, &dy, &dx, &dw, NULL);
    out[0] = nnt_download(be, &y), out[1] = nnt_download(be, &dx), out[2] = nnt_download(be, &dw);
    eng_tensor all[] = {x0, dy0, w, x, dy, y, dx, dw};
    free_all(be, all, ARRAY_LEN(all));
    eng_plan_free(be, plan);
    eng_backend_close(be);
}

/* Winograd's results are the direct kernels' (checked against PyTorch in test_nn_conv.c) to
 * within 1e-4 of the largest value, and not their bits (its kernels ran), on both layouts. */
Test(nn_layout, winograd_training_is_direct_within_rounding)
{
    eng_shape xs = eng_shape4(4, 32, 14, 14);
    size_t n[3] = {(size_t)(4 * 32 * 14 * 14), (size_t)(4 * 32 * 14 * 14), (size_t)(32 * 32 * 9)};
    static const char *const what[3] = {"y", "dx", "dw"};
    for (int as_native = 0; as_native < 2; as_native++) {
        float *direct[3], *wino[3];
        winograd_run(false, as_native, xs, direct);
        winograd_run(true, as_native, xs, wino);
        for (int i = 0; i < 3; i++) {
            double e = nnt_rel_error_host(wino[i], direct[i], n[i]);
            cr_expect_leq(e, 1e-4, "native %d, %s: %g", as_native, what[i], e);
            cr_expect(memcmp(wino[i], direct[i], n[i] * sizeof(float)) != 0, "native %d, %s: the direct bits",
                      as_native, what[i]);
            free(direct[i]), free(wino[i]);
        }
    }
}

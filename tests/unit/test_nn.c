/*
 * test_nn.c — the model engine's layers on the cpu backend, against PyTorch and against
 * finite differences.
 *
 * Golden: tests/golden/make_nn_fixtures.py saved PyTorch's forward outputs and autograd
 * gradients for fixed inputs (fixtures/nn/CASE_TENSOR.npy); every layer must match them within
 * 1e-4 (forward) and 1e-3 (gradients) relative to the largest reference value, and sigmoid,
 * SiLU and the channel scale (PyTorch's float formulas, inputs up to ±100) within 1e-6 of each
 * element (forward) and 4e-6 (gradients), every element finite where PyTorch's is; local response
 * normalisation (oneDNN's float formula in another order) within 2e-6 of the largest value.
 * Finite differences: for a loss L = Σ y·r with a fixed random r, every analytic gradient
 * element must match (L(θ+h) − L(θ−h)) / 2h, the loss summed in double: linear, L2 norm, ReLU
 * (inputs kept 0.1 from the kink), residual add, dropout (train mode, mask fixed by (seed, step)),
 * sigmoid, SiLU, channel scale (dx and ds), local response normalisation (windows of 1, 3, 5).
 * Dropout in train mode: exact 0 or x·(1/(1−p)), kept count within a binomial bound, the mask
 * replayed by backward and independent of the thread count.
 * Conventions of nn.h: gradients accumulate, NULL input gradients are skipped, dropout's mask
 * is a pure function of (seed, step, index), sigmoid runs in place, a wrong shape or a native
 * tensor aborts, and so do an even LRN window and an LRN in place.
 */
#include "nn.h"
#include "npy.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FWD_TOL 1e-4
#define GRAD_TOL 1e-3

/* ---- golden ------------------------------------------------------------------------------ */

Test(nn, relu_matches_torch)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "relu", "x"), y = nnt_load(be, "relu", "y"), dy = nnt_load(be, "relu", "dy"),
            dx = nnt_load(be, "relu", "dx");
    eng_tensor out = nnt_zeros_like(be, &x.t), grad = nnt_zeros_like(be, &x.t);
    eng_relu_forward(be, &x.t, &out);
    cr_expect_leq(nnt_rel_error(be, &out, &y), FWD_TOL);
    eng_relu_backward(be, &out, &dy.t, &grad);
    cr_expect_leq(nnt_rel_error(be, &grad, &dx), GRAD_TOL);
    eng_tensor_free(be, &out);
    eng_tensor_free(be, &grad);
    nnt_fixture *all[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

Test(nn, linear_matches_torch)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "linear", "x"), w = nnt_load(be, "linear", "w"), b = nnt_load(be, "linear", "b"),
            y = nnt_load(be, "linear", "y"), dy = nnt_load(be, "linear", "dy"), dx = nnt_load(be, "linear", "dx"),
            dw = nnt_load(be, "linear", "dw"), db = nnt_load(be, "linear", "db");
    eng_tensor out = nnt_zeros_like(be, &y.t), gx = nnt_zeros_like(be, &x.t), gw = nnt_zeros_like(be, &w.t),
              gb = nnt_zeros_like(be, &b.t);
    eng_linear_forward(be, &x.t, &w.t, &b.t, &out);
    cr_expect_leq(nnt_rel_error(be, &out, &y), FWD_TOL);
    eng_linear_backward(be, &x.t, &w.t, &dy.t, &gx, &gw, &gb);
    cr_expect_leq(nnt_rel_error(be, &gx, &dx), GRAD_TOL);
    cr_expect_leq(nnt_rel_error(be, &gw, &dw), GRAD_TOL);
    cr_expect_leq(nnt_rel_error(be, &gb, &db), GRAD_TOL);
    eng_tensor *mine[] = {&out, &gx, &gw, &gb};
    for (size_t i = 0; i < ARRAY_LEN(mine); i++)
        eng_tensor_free(be, mine[i]);
    nnt_fixture *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

Test(nn, l2norm_matches_torch_including_a_zero_row)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "l2norm", "x"), y = nnt_load(be, "l2norm", "y"), dy = nnt_load(be, "l2norm", "dy"),
            dx = nnt_load(be, "l2norm", "dx");
    eng_tensor out = nnt_zeros_like(be, &x.t), grad = nnt_zeros_like(be, &x.t);
    eng_l2norm_forward(be, &x.t, &out);
    cr_expect_leq(nnt_rel_error(be, &out, &y), FWD_TOL);
    eng_l2norm_backward(be, &x.t, &dy.t, &grad);
    cr_expect_leq(nnt_rel_error(be, &grad, &dx), GRAD_TOL);
    eng_tensor_free(be, &out);
    eng_tensor_free(be, &grad);
    nnt_fixture *all[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

/* ---- finite differences ---------------------------------------------------------------------- */

/* The linear layer as a function of (x, w, b): forward into y. */
typedef struct {
    eng_tensor *x, *w, *b, *y;
} linear_args;

static void run_linear(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_linear_forward(be, a->x, a->w, a->b, a->y);
}

static void run_l2norm(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_l2norm_forward(be, a->x, a->y);
}

static void check_fd(eng_backend *be, void (*forward)(eng_backend *, void *), void *arg, eng_tensor *param,
                     float *host, const eng_tensor *grad, const eng_tensor *y, const float *r, const char *what)
{
    double worst = nnt_fd_error(be, forward, arg, param, host, grad, y, r);
    cr_expect_leq(worst, 2e-3, "%s: finite differences disagree by %g", what, worst);
}

Test(nn, linear_gradients_match_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *hw, *hb, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(3, 5), 1, &hx), w = nnt_host_tensor(be, eng_shape2(4, 5), 2, &hw);
    eng_shape bs = {.ndim = 1, .dim = {4}};
    eng_tensor b = nnt_host_tensor(be, bs, 3, &hb);
    eng_tensor dy = nnt_host_tensor(be, eng_shape2(3, 4), 4, &r); /* dL/dy = r */
    eng_tensor y = nnt_zeros_like(be, &dy), gx = nnt_zeros_like(be, &x), gw = nnt_zeros_like(be, &w), gb = nnt_zeros_like(be, &b);
    eng_linear_backward(be, &x, &w, &dy, &gx, &gw, &gb);
    linear_args a = {&x, &w, &b, &y};
    check_fd(be, run_linear, &a, &x, hx, &gx, &y, r, "linear dx");
    check_fd(be, run_linear, &a, &w, hw, &gw, &y, r, "linear dW");
    check_fd(be, run_linear, &a, &b, hb, &gb, &y, r, "linear db");
    eng_tensor *all[] = {&x, &w, &b, &dy, &y, &gx, &gw, &gb};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hw), free(hb), free(r);
    eng_backend_close(be);
}

Test(nn, l2norm_gradient_matches_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(3, 7), 5, &hx), dy = nnt_host_tensor(be, eng_shape2(3, 7), 6, &r);
    eng_tensor y = nnt_zeros_like(be, &x), gx = nnt_zeros_like(be, &x);
    eng_l2norm_backward(be, &x, &dy, &gx);
    linear_args a = {.x = &x, .y = &y};
    check_fd(be, run_l2norm, &a, &x, hx, &gx, &y, r, "l2norm dx");
    eng_tensor *all[] = {&x, &dy, &y, &gx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(r);
    eng_backend_close(be);
}

/* ---- conventions --------------------------------------------------------------------------- */

Test(nn, gradients_accumulate_and_null_skips)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *hw, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(2, 3), 7, &hx), w = nnt_host_tensor(be, eng_shape2(2, 3), 8, &hw);
    eng_tensor dy = nnt_host_tensor(be, eng_shape2(2, 2), 9, &r), gw = nnt_zeros_like(be, &w);
    eng_linear_backward(be, &x, &w, &dy, NULL, &gw, NULL);
    float once[6], twice[6];
    eng_download(be, &gw, once);
    eng_linear_backward(be, &x, &w, &dy, NULL, &gw, NULL);
    eng_download(be, &gw, twice);
    for (int i = 0; i < 6; i++)
        cr_expect_float_eq(twice[i], 2.0f * once[i], 1e-6f, "dW must accumulate");
    /* dW[o][i] = Σ_n dy[n][o]·x[n][i], by hand for one element. */
    cr_expect_float_eq(once[1 * 3 + 2], r[0 * 2 + 1] * hx[0 * 3 + 2] + r[1 * 2 + 1] * hx[1 * 3 + 2], 1e-5f);
    /* The residual add hands dy to both branches, accumulating. */
    eng_tensor da = nnt_zeros_like(be, &x), db = nnt_zeros_like(be, &x);
    eng_upload(be, &da, hx);
    free(hw); /* the weights' host copy is done with; hw now holds the sum's gradient */
    eng_tensor dsum = nnt_host_tensor(be, eng_shape2(2, 3), 10, &hw);
    eng_add_backward(be, &dsum, &da, &db);
    float a_out[6], b_out[6];
    eng_download(be, &da, a_out);
    eng_download(be, &db, b_out);
    for (int i = 0; i < 6; i++) {
        cr_expect_float_eq(a_out[i], hx[i] + hw[i], 1e-6f);
        cr_expect_float_eq(b_out[i], hw[i], 0.0f);
    }
    eng_tensor *all[] = {&x, &w, &dy, &gw, &da, &db, &dsum};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hw), free(r);
    eng_backend_close(be);
}

Test(nn, dropout_keeps_the_right_fraction_and_replays_its_mask)
{
    eng_backend *be = nnt_open_cpu();
    const int64_t n = 100003; /* odd: the last Philox block is partial */
    eng_tensor x = eng_tensor_new(be, eng_shape2(1, n)), y = nnt_zeros_like(be, &x), dx = nnt_zeros_like(be, &x);
    float *ones = xmalloc((size_t)n * sizeof *ones), *out = xmalloc((size_t)n * sizeof *out);
    for (int64_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    eng_upload(be, &x, ones);
    const float p = 0.3f;
    eng_dropout_forward(be, p, 7, &x, &y);
    eng_download(be, &y, out);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        cr_assert(out[i] == 0.0f || fabsf(out[i] - 1.0f / 0.7f) < 1e-6f, "element %lld is %g", (long long)i,
                  (double)out[i]);
        kept += out[i] != 0.0f;
    }
    /* Binomial(n, 0.7): 4.5 standard deviations is about 650. */
    cr_expect(llabs(kept - (int64_t)(0.7 * n)) < 650, "kept %lld of %lld", (long long)kept, (long long)n);
    /* The backward replays the same mask (the gradient of y w.r.t. x is y itself here). */
    eng_dropout_backward(be, p, 7, &x, &dx);
    float *grad = xmalloc((size_t)n * sizeof *grad);
    eng_download(be, &dx, grad);
    cr_expect_eq(memcmp(grad, out, (size_t)n * sizeof *grad), 0, "backward must use the forward's mask");
    /* Another step draws another mask; p = 0 is the identity. */
    eng_dropout_forward(be, p, 8, &x, &y);
    eng_download(be, &y, grad);
    cr_expect_neq(memcmp(grad, out, (size_t)n * sizeof *grad), 0);
    eng_dropout_forward(be, 0.0f, 8, &x, &y);
    eng_download(be, &y, grad);
    cr_expect_eq(memcmp(grad, ones, (size_t)n * sizeof *grad), 0);
    free(ones), free(out), free(grad);
    eng_tensor_free(be, &x), eng_tensor_free(be, &y), eng_tensor_free(be, &dx);
    eng_backend_close(be);
}

Test(nn, unknown_backend_is_a_clear_error)
{
    char *err = NULL;
    cr_expect_null(eng_backend_open("tpu", NULL, &err));
    cr_expect(err && strstr(err, "unknown backend 'tpu'"), "%s", err ? err : "(none)");
    free(err);
}

/* ---- finite differences: ReLU, residual add, dropout --------------------------------------------- */

static void run_relu(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_relu_forward(be, a->x, a->y);
}

/* Inputs at least 0.1 from the kink, so a 1e-2 step never crosses it. */
Test(nn, relu_gradient_matches_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape4(2, 3, 2, 3), 71, &hx), dy = nnt_host_tensor(be, x.shape, 72, &r);
    for (int64_t i = 0; i < eng_numel(&x.shape); i++)
        hx[i] = hx[i] >= 0 ? hx[i] + 0.1f : hx[i] - 0.1f;
    eng_upload(be, &x, hx);
    eng_tensor y = nnt_zeros_like(be, &x), gx = nnt_zeros_like(be, &x);
    linear_args a = {.x = &x, .y = &y};
    run_relu(be, &a);
    eng_relu_backward(be, &y, &dy, &gx);
    check_fd(be, run_relu, &a, &x, hx, &gx, &y, r, "relu dx");
    eng_tensor *all[] = {&x, &dy, &y, &gx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(r);
    eng_backend_close(be);
}

static void run_add(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_add_forward(be, a->x, a->w, a->y);
}

Test(nn, residual_add_gradients_match_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    float *ha, *hb, *r;
    eng_tensor xa = nnt_host_tensor(be, eng_shape4(2, 2, 3, 2), 73, &ha), xb = nnt_host_tensor(be, xa.shape, 74, &hb),
               dy = nnt_host_tensor(be, xa.shape, 75, &r);
    eng_tensor y = nnt_zeros_like(be, &xa), ga = nnt_zeros_like(be, &xa), gb = nnt_zeros_like(be, &xa);
    eng_add_backward(be, &dy, &ga, &gb);
    linear_args a = {.x = &xa, .w = &xb, .y = &y};
    check_fd(be, run_add, &a, &xa, ha, &ga, &y, r, "add da");
    check_fd(be, run_add, &a, &xb, hb, &gb, &y, r, "add db");
    eng_tensor *all[] = {&xa, &xb, &dy, &y, &ga, &gb};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(ha), free(hb), free(r);
    eng_backend_close(be);
}

#define DROPOUT_P 0.3f
#define DROPOUT_STEP 11

static void run_dropout(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_dropout_forward(be, DROPOUT_P, DROPOUT_STEP, a->x, a->y);
}

/* Train mode with the mask fixed by (seed, step): the layer is linear in x, and its backward
 * must be the same masked scaling. */
Test(nn, dropout_gradient_matches_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(3, 13), 76, &hx), dy = nnt_host_tensor(be, x.shape, 77, &r);
    eng_tensor y = nnt_zeros_like(be, &x), gx = nnt_zeros_like(be, &x);
    eng_dropout_backward(be, DROPOUT_P, DROPOUT_STEP, &dy, &gx);
    linear_args a = {.x = &x, .y = &y};
    check_fd(be, run_dropout, &a, &x, hx, &gx, &y, r, "dropout dx");
    eng_tensor *all[] = {&x, &dy, &y, &gx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(r);
    eng_backend_close(be);
}

/* On random inputs at p = 0.5 and 0.1: every output is exactly 0 or exactly x·(1/(1−p)) (the
 * float product, no other rounding); the kept count is within 5 standard deviations of the
 * binomial mean; backward sends dy·(1/(1−p)) exactly through the kept elements and nothing
 * through the others; the mask does not depend on the thread count, and another seed draws
 * another one. */
static void dropout_train_case(float p)
{
    const int64_t n = 50001;
    eng_backend *be = nnt_open_cpu();
    float *hx, *hdy;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(1, n), 81, &hx), dy = nnt_host_tensor(be, x.shape, 82, &hdy);
    eng_tensor y = nnt_zeros_like(be, &x), dx = nnt_zeros_like(be, &x);
    eng_dropout_forward(be, p, 3, &x, &y);
    eng_dropout_backward(be, p, 3, &dy, &dx);
    float *hy = xmalloc((size_t)n * sizeof *hy), *hdx = xmalloc((size_t)n * sizeof *hdx);
    eng_download(be, &y, hy);
    eng_download(be, &dx, hdx);
    const float scale = 1.0f / (1.0f - p);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = hy[i] != 0.0f; /* normal inputs have no exact zeros */
        kept += keep;
        cr_assert(keep ? hy[i] == hx[i] * scale : true, "p %g: y[%lld] = %.9g, want %.9g", (double)p, (long long)i,
                  (double)hy[i], (double)(hx[i] * scale));
        cr_assert_eq(hdx[i], keep ? hdy[i] * scale : 0.0f, "p %g: dx[%lld] does not replay the mask", (double)p,
                     (long long)i);
    }
    double mean = (1.0 - p) * (double)n, sd = sqrt((double)n * p * (1.0 - p));
    cr_expect(fabs((double)kept - mean) < 5.0 * sd, "p %g: kept %lld of %lld (mean %.0f, sd %.1f)", (double)p,
              (long long)kept, (long long)n, mean, sd);
    /* One thread draws the same mask; another seed another. */
    char *err = NULL;
    eng_backend_options o1 = {.threads = 1, .seed = 1234}, o2 = {.threads = 2, .seed = 4321};
    eng_backend *b1 = eng_backend_open("cpu", &o1, &err), *b2 = eng_backend_open("cpu", &o2, &err);
    cr_assert(b1 && b2, "%s", err);
    float *other = xmalloc((size_t)n * sizeof *other);
    eng_dropout_forward(b1, p, 3, &x, &y);
    eng_download(be, &y, other);
    cr_expect_eq(memcmp(other, hy, (size_t)n * sizeof *other), 0, "p %g: the mask changed with the thread count",
                 (double)p);
    eng_dropout_forward(b2, p, 3, &x, &y);
    eng_download(be, &y, other);
    cr_expect_neq(memcmp(other, hy, (size_t)n * sizeof *other), 0, "p %g: another seed must draw another mask",
                  (double)p);
    eng_backend_close(b1);
    eng_backend_close(b2);
    free(other), free(hy), free(hdx), free(hx), free(hdy);
    eng_tensor *all[] = {&x, &dy, &y, &dx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    eng_backend_close(be);
}

Test(nn, dropout_train_mode_half) { dropout_train_case(0.5f); }
Test(nn, dropout_train_mode_tenth) { dropout_train_case(0.1f); }

/* ---- k-means' pieces: a scale and each row's largest column ------------------------------- */

/* Hand-made rows: the first maximum wins a tie (torch's max(dim=1)), negatives and a single
 * column included; the scale is one float product per element. */
Test(nn, argmax_rows_takes_the_first_maximum_and_scale_rounds_once)
{
    eng_backend *be = nnt_open_cpu();
    const float v[] = {0.5f, 2.0f, 2.0f, -1.0f, /* tie: column 1 */
                       -3.0f, -2.5f, -7.0f, -2.5f, /* negatives: column 1 */
                       1.0f, 1.0f, 1.0f, 1.0f, /* all equal: column 0 */
                       0.0f, 0.0f, 0.0f, 1e-30f};
    eng_tensor x = eng_tensor_new(be, eng_shape2(4, 4));
    eng_upload(be, &x, v);
    int64_t idx[4];
    eng_argmax_rows(be, &x, idx);
    cr_expect(idx[0] == 1 && idx[1] == 1 && idx[2] == 0 && idx[3] == 3, "argmax %lld %lld %lld %lld",
              (long long)idx[0], (long long)idx[1], (long long)idx[2], (long long)idx[3]);
    eng_scale(be, 1.0f / 3.0f, &x);
    float got[16];
    eng_download(be, &x, got);
    for (int i = 0; i < 16; i++)
        cr_expect_eq(got[i], v[i] * (1.0f / 3.0f), "element %d: %.9g", i, (double)got[i]);
    eng_tensor_free(be, &x);
    eng_backend_close(be);
}

/* ---- sigmoid, SiLU, squeeze-and-excitation's channel scale ------------------------------------- */

/* PyTorch's fp32 formulas, operation for operation (nn/cpu/eltwise.c): only exp's last bit may
 * differ (glibc's expf against Sleef's), so the bounds are a few float roundings of the largest
 * value, tighter than FWD_TOL / GRAD_TOL. */
#define ELT_FWD_TOL 1e-6
#define ELT_GRAD_TOL 4e-6

/* got against PyTorch's: the same elements finite (nnt_rel_error's fmax passes over a NaN), and
 * max |got − want| / max |want| within tol; with `each`, also every element within tol of its
 * own magnitude (a forward's tail, sigmoid(−30) ≈ 9e-14, must be right too; a gradient's
 * elements near a cancellation, SiLU's at x ≈ −1.28, carry more relative error and skip this). */
static void expect_golden(const float *got, const nnt_fixture *want, double tol, bool each, const char *what)
{
    const float *w = want->a.data;
    for (size_t i = 0; i < want->a.count; i++) {
        cr_assert(isfinite(got[i]) == isfinite(w[i]), "%s[%zu] = %g, torch %g", what, i, (double)got[i],
                  (double)w[i]);
        cr_assert(!each || fabs((double)got[i] - w[i]) <= tol * fabs((double)w[i]), "%s[%zu] = %.9g, torch %.9g",
                  what, i, (double)got[i], (double)w[i]);
    }
    double e = nnt_rel_error_host(got, w, want->a.count);
    cr_expect_leq(e, tol, "%s: max error %.3g of max |torch|", what, e);
}

static void expect_golden_t(eng_backend *be, const eng_tensor *got, const nnt_fixture *want, double tol, bool each,
                            const char *what)
{
    cr_assert_eq((size_t)eng_numel(&got->shape), want->a.count);
    float *h = nnt_download(be, got);
    expect_golden(h, want, tol, each, what);
    free(h);
}

/* A forward output, element by element; a gradient, against its largest value. */
static void expect_forward(eng_backend *be, const eng_tensor *got, const nnt_fixture *want, const char *what)
{
    expect_golden_t(be, got, want, ELT_FWD_TOL, true, what);
}

static void expect_gradient(eng_backend *be, const eng_tensor *got, const nnt_fixture *want, const char *what)
{
    expect_golden_t(be, got, want, ELT_GRAD_TOL, false, what);
}

/* t holds exactly `times` (1 or 2) times the values of `once`: a second backward into the same
 * gradient adds the same float again, which doubles it exactly. */
static void expect_times(eng_backend *be, const eng_tensor *t, const float *once, float times, const char *what)
{
    float *h = nnt_download(be, t);
    for (int64_t i = 0; i < eng_numel(&t->shape); i++)
        cr_assert_eq(h[i], times * once[i], "%s[%lld]: %g, want %g × %g", what, (long long)i, (double)h[i],
                     (double)times, (double)once[i]);
    free(h);
}

static void unload_all(eng_backend *be, nnt_fixture *const *all, size_t n)
{
    for (size_t i = 0; i < n; i++)
        nnt_unload(be, all[i]);
}

/* On 3×5×7×9 with ±30 and ±100 among the inputs (e^100 is inf in float: y is 0, not NaN):
 * forward and backward as torch's; a second backward doubles the gradient; in place (y = x)
 * gives the same bits; a NULL dx is skipped. */
Test(nn, sigmoid_matches_torch_with_extremes_in_place_and_accumulating)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "sigmoid", "x"), y = nnt_load(be, "sigmoid", "y"),
                dy = nnt_load(be, "sigmoid", "dy"), dx = nnt_load(be, "sigmoid", "dx");
    eng_tensor out = nnt_zeros_like(be, &x.t), grad = nnt_zeros_like(be, &x.t), inplace = nnt_zeros_like(be, &x.t);
    eng_sigmoid_forward(be, &x.t, &out);
    expect_forward(be, &out, &y, "sigmoid y");
    eng_sigmoid_backward(be, &y.t, &dy.t, &grad); /* from torch's y, so the gradient is tested alone */
    expect_gradient(be, &grad, &dx, "sigmoid dx");
    float *once = nnt_download(be, &grad), *ref = nnt_download(be, &out);
    eng_sigmoid_backward(be, &y.t, &dy.t, &grad);
    expect_times(be, &grad, once, 2.0f, "sigmoid dx");
    eng_sigmoid_backward(be, &y.t, &dy.t, NULL);
    eng_copy(be, &x.t, &inplace);
    eng_sigmoid_forward(be, &inplace, &inplace);
    float *in_place = nnt_download(be, &inplace);
    cr_expect_eq(memcmp(in_place, ref, x.a.count * sizeof *ref), 0, "in place must give the same bits");
    free(once), free(ref), free(in_place);
    eng_tensor_free(be, &out), eng_tensor_free(be, &grad), eng_tensor_free(be, &inplace);
    nnt_fixture *all[] = {&x, &y, &dy, &dx};
    unload_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

/* The same for SiLU (backward from x), the gradient accumulated onto torch's own dx. */
Test(nn, silu_matches_torch_with_extremes_and_accumulates)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "silu", "x"), y = nnt_load(be, "silu", "y"), dy = nnt_load(be, "silu", "dy"),
                dx = nnt_load(be, "silu", "dx");
    eng_tensor out = nnt_zeros_like(be, &x.t), grad = nnt_zeros_like(be, &x.t);
    eng_silu_forward(be, &x.t, &out);
    expect_forward(be, &out, &y, "silu y");
    eng_silu_backward(be, &x.t, &dy.t, &grad);
    expect_gradient(be, &grad, &dx, "silu dx");
    float *once = nnt_download(be, &grad);
    eng_silu_backward(be, &x.t, &dy.t, &grad);
    expect_times(be, &grad, once, 2.0f, "silu dx");
    /* pre-filled with torch's dx: the backward adds its own, twice torch's within rounding */
    eng_copy(be, &dx.t, &grad);
    eng_silu_backward(be, &x.t, &dy.t, &grad);
    eng_silu_backward(be, &x.t, &dy.t, NULL);
    float *sum = nnt_download(be, &grad);
    for (size_t i = 0; i < x.a.count; i++)
        sum[i] *= 0.5f;
    expect_golden(sum, &dx, ELT_GRAD_TOL, false, "silu dx added to a filled gradient, halved");
    free(once), free(sum);
    eng_tensor_free(be, &out), eng_tensor_free(be, &grad);
    nnt_fixture *all[] = {&x, &y, &dy, &dx};
    unload_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

/* x·s with s N×C×1×1 (torch's broadcast) and the same s seen as N×C; dx and ds as autograd's,
 * each accumulating, each skipped when NULL. */
Test(nn, channel_scale_matches_torch_accumulates_and_skips_null)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "channel_scale", "x"), s = nnt_load(be, "channel_scale", "s"),
                y = nnt_load(be, "channel_scale", "y"), dy = nnt_load(be, "channel_scale", "dy"),
                dx = nnt_load(be, "channel_scale", "dx"), ds = nnt_load(be, "channel_scale", "ds");
    eng_tensor out = nnt_zeros_like(be, &x.t), gx = nnt_zeros_like(be, &x.t), gs = nnt_zeros_like(be, &s.t);
    eng_shape nc = eng_shape2(s.t.shape.dim[0], s.t.shape.dim[1]);
    eng_tensor s2 = eng_reshape(&s.t, nc), gs2 = eng_reshape(&gs, nc);
    eng_channel_scale_forward(be, &x.t, &s.t, &out);
    expect_forward(be, &out, &y, "channel scale y");
    eng_zero(be, &out);
    eng_channel_scale_forward(be, &x.t, &s2, &out);
    expect_forward(be, &out, &y, "channel scale y, s N×C");
    eng_channel_scale_backward(be, &x.t, &s.t, &dy.t, &gx, &gs);
    expect_gradient(be, &gx, &dx, "channel scale dx");
    expect_gradient(be, &gs, &ds, "channel scale ds");
    float *gx1 = nnt_download(be, &gx), *gs1 = nnt_download(be, &gs);
    /* ds alone (dx NULL), through the N×C view: only ds doubles */
    eng_channel_scale_backward(be, &x.t, &s2, &dy.t, NULL, &gs2);
    expect_times(be, &gs, gs1, 2.0f, "channel scale ds");
    expect_times(be, &gx, gx1, 1.0f, "channel scale dx, untouched by a NULL-dx backward");
    /* dx alone (ds NULL): only dx doubles */
    eng_channel_scale_backward(be, &x.t, &s.t, &dy.t, &gx, NULL);
    expect_times(be, &gx, gx1, 2.0f, "channel scale dx");
    expect_times(be, &gs, gs1, 2.0f, "channel scale ds, untouched by a NULL-ds backward");
    eng_channel_scale_backward(be, &x.t, &s.t, &dy.t, NULL, NULL);
    free(gx1), free(gs1);
    eng_tensor_free(be, &out), eng_tensor_free(be, &gx), eng_tensor_free(be, &gs);
    nnt_fixture *all[] = {&x, &s, &y, &dy, &dx, &ds};
    unload_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

/* ---- finite differences: sigmoid, SiLU, channel scale --------------------------------------------- */

static void run_sigmoid(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_sigmoid_forward(be, a->x, a->y);
}

static void run_silu(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_silu_forward(be, a->x, a->y);
}

/* x in a->x, s in a->w */
static void run_channel_scale(eng_backend *be, void *arg)
{
    linear_args *a = arg;
    eng_channel_scale_forward(be, a->x, a->w, a->y);
}

Test(nn, sigmoid_and_silu_gradients_match_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape4(2, 3, 2, 3), 83, &hx), dy = nnt_host_tensor(be, x.shape, 84, &r);
    eng_tensor y = nnt_zeros_like(be, &x), gx = nnt_zeros_like(be, &x);
    linear_args a = {.x = &x, .y = &y};
    run_sigmoid(be, &a);
    eng_sigmoid_backward(be, &y, &dy, &gx);
    check_fd(be, run_sigmoid, &a, &x, hx, &gx, &y, r, "sigmoid dx");
    eng_zero(be, &gx);
    eng_silu_backward(be, &x, &dy, &gx);
    check_fd(be, run_silu, &a, &x, hx, &gx, &y, r, "silu dx");
    eng_tensor *all[] = {&x, &dy, &y, &gx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(r);
    eng_backend_close(be);
}

Test(nn, channel_scale_gradients_match_finite_differences)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *hs, *r;
    eng_tensor x = nnt_host_tensor(be, eng_shape4(2, 3, 3, 2), 85, &hx),
               s = nnt_host_tensor(be, eng_shape4(2, 3, 1, 1), 86, &hs), dy = nnt_host_tensor(be, x.shape, 87, &r);
    eng_tensor y = nnt_zeros_like(be, &x), gx = nnt_zeros_like(be, &x), gs = nnt_zeros_like(be, &s);
    eng_channel_scale_backward(be, &x, &s, &dy, &gx, &gs);
    linear_args a = {.x = &x, .w = &s, .y = &y};
    check_fd(be, run_channel_scale, &a, &x, hx, &gx, &y, r, "channel scale dx");
    check_fd(be, run_channel_scale, &a, &s, hs, &gs, &y, r, "channel scale ds");
    eng_tensor *all[] = {&x, &s, &dy, &y, &gx, &gs};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hs), free(r);
    eng_backend_close(be);
}

/* A scale that is not one value per (sample, channel) is model code's mistake: an abort. */
Test(nn, channel_scale_refuses_a_scale_of_the_wrong_shape, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_tensor x = eng_tensor_new(be, eng_shape4(2, 3, 4, 4)), s = eng_tensor_new(be, eng_shape4(2, 3, 2, 1)),
               y = eng_tensor_new(be, x.shape);
    eng_zero(be, &x);
    eng_zero(be, &s);
    eng_channel_scale_forward(be, &x, &s, &y);
}

/* Like every layer not documented to take one, SiLU refuses a tensor in the native layout. */
Test(nn, silu_refuses_a_native_tensor, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_tensor x = eng_tensor_new(be, eng_shape4(1, 16, 2, 2));
    eng_zero(be, &x);
    x.layout = ENG_LAYOUT_NATIVE;
    eng_silu_forward(be, &x, &x);
}


/* ---- local response normalisation -------------------------------------------------------------- */

/* The fixtures' layers (make_nn_fixtures.py's lrn()): AlexNet's on inputs ×100, on 16 channels
 * (oneDNN's JIT kernels and their workspace), and a strong one (α = 0.5, k = 2) on 7 channels
 * (its reference kernels), where the backward's cross-channel term is as large as its own. */
static const eng_lrn_desc LRN_ALEXNET = {.size = 5, .alpha = 1e-4, .beta = 0.75, .k = 1.0};
static const eng_lrn_desc LRN_STRONG = {.size = 5, .alpha = 0.5, .beta = 0.75, .k = 2.0};

/* oneDNN's float formula against PyTorch's: the same operations in another order (α/size·Σ
 * against (Σ/size)·α, its own power), a few roundings of the largest value. */
#define LRN_FWD_TOL 2e-6
#define LRN_GRAD_TOL 2e-6

/* Forward and backward as torch's; a second backward doubles dx exactly; one added onto torch's
 * own dx gives twice torch's; a NULL dx is skipped. */
static void lrn_case(const char *kase, const eng_lrn_desc *d)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, kase, "x"), y = nnt_load(be, kase, "y"), dy = nnt_load(be, kase, "dy"),
                dx = nnt_load(be, kase, "dx");
    eng_tensor out = nnt_zeros_like(be, &x.t), grad = nnt_zeros_like(be, &x.t);
    char what[64];
    eng_lrn_forward(be, d, &x.t, &out);
    snprintf(what, sizeof what, "%s y", kase);
    expect_golden_t(be, &out, &y, LRN_FWD_TOL, false, what);
    eng_lrn_backward(be, d, &x.t, &dy.t, &grad);
    snprintf(what, sizeof what, "%s dx", kase);
    expect_golden_t(be, &grad, &dx, LRN_GRAD_TOL, false, what);
    float *once = nnt_download(be, &grad);
    eng_lrn_backward(be, d, &x.t, &dy.t, &grad);
    expect_times(be, &grad, once, 2.0f, "lrn dx");
    eng_lrn_backward(be, d, &x.t, &dy.t, NULL);
    eng_copy(be, &dx.t, &grad);
    eng_lrn_backward(be, d, &x.t, &dy.t, &grad);
    float *sum = nnt_download(be, &grad);
    for (size_t i = 0; i < x.a.count; i++)
        sum[i] *= 0.5f;
    expect_golden(sum, &dx, LRN_GRAD_TOL, false, "lrn dx added to a filled gradient, halved");
    free(once), free(sum);
    eng_tensor_free(be, &out), eng_tensor_free(be, &grad);
    nnt_fixture *all[] = {&x, &y, &dy, &dx};
    unload_all(be, all, ARRAY_LEN(all));
    eng_backend_close(be);
}

Test(nn, lrn_alexnet_matches_torch_and_accumulates) { lrn_case("lrn", &LRN_ALEXNET); }
Test(nn, lrn_strong_matches_torch_and_accumulates) { lrn_case("lrn_strong", &LRN_STRONG); }

typedef struct {
    const eng_lrn_desc *d;
    eng_tensor *x, *y;
} lrn_args;

static void run_lrn(eng_backend *be, void *arg)
{
    lrn_args *a = arg;
    eng_lrn_forward(be, a->d, a->x, a->y);
}

static void lrn_fd(const eng_lrn_desc *d, eng_shape xs, const char *what)
{
    eng_backend *be = nnt_open_cpu();
    float *hx, *r;
    eng_tensor x = nnt_host_tensor(be, xs, 88, &hx), dy = nnt_host_tensor(be, xs, 89, &r);
    eng_tensor y = nnt_zeros_like(be, &x), gx = nnt_zeros_like(be, &x);
    eng_lrn_backward(be, d, &x, &dy, &gx);
    lrn_args a = {d, &x, &y};
    check_fd(be, run_lrn, &a, &x, hx, &gx, &y, r, what);
    eng_tensor *all[] = {&x, &dy, &y, &gx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(r);
    eng_backend_close(be);
}

/* β = 0.75 (oneDNN's AVX-512 kernels, whose backward reads the recomputed forward's workspace) on
 * 8 channels and, with a window of 3, on 5; a window wider than the 3 channels, clipped at both
 * ends, with another β (its reference kernels); a window of 1 (x / (k + α·x²)^β, kept in nchw). */
Test(nn, lrn_gradients_match_finite_differences)
{
    lrn_fd(&LRN_STRONG, eng_shape4(2, 8, 2, 3), "lrn dx, 8 channels");
    lrn_fd(&(eng_lrn_desc){.size = 3, .alpha = 0.7, .beta = 0.75, .k = 1.5}, eng_shape4(2, 5, 2, 2),
           "lrn dx, window 3");
    lrn_fd(&(eng_lrn_desc){.size = 5, .alpha = 1.0, .beta = 0.5, .k = 1.0}, eng_shape4(2, 3, 3, 2),
           "lrn dx, window past both ends");
    lrn_fd(&(eng_lrn_desc){.size = 1, .alpha = 0.3, .beta = 0.75, .k = 1.0}, eng_shape4(1, 4, 2, 2),
           "lrn dx, window 1");
}

/* An even window is one-sided in PyTorch and centred in oneDNN: refused, not answered twice. */
Test(nn, lrn_refuses_an_even_size, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_tensor x = eng_tensor_new(be, eng_shape4(1, 8, 2, 2)), y = eng_tensor_new(be, x.shape);
    eng_zero(be, &x);
    eng_lrn_forward(be, &(eng_lrn_desc){.size = 4, .alpha = 1e-4, .beta = 0.75, .k = 1.0}, &x, &y);
}

/* Each output reads its neighbours' inputs: y = x would read values already normalised. */
Test(nn, lrn_refuses_to_run_in_place, .signal = SIGABRT)
{
    eng_backend *be = nnt_open_cpu();
    eng_tensor x = eng_tensor_new(be, eng_shape4(1, 8, 2, 2));
    eng_zero(be, &x);
    eng_lrn_forward(be, &LRN_ALEXNET, &x, &x);
}

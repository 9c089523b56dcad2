/*
 * test_nn_norm.c — layer norm (VISSL's LayerNorm2d = GroupNorm(1, C)) and the eval-mode batch-norm
 * backward on the cpu backend, against PyTorch and against finite differences.
 *
 * Golden: tests/golden/make_nn_norm_fixtures.py saved GroupNorm(1, C)'s output and autograd's
 * dx, dgamma, dbeta on odd shapes (4-D, 2-D, 33 channels, affine-free), and BatchNorm2d in eval
 * mode with autograd's gradients (fixtures/nn/ln_* and bn_evalbw_*). Tolerances as in
 * test_nn_conv.c: 1e-4 (forward) and 1e-3 (gradients) relative to the largest reference value.
 * Finite differences: for L = Σ y·r, every analytic gradient element against central
 * differences of the fp32 forward with step 1e-2, L summed in double (nnt_fd_error).
 * Conventions: gradients accumulate, NULL skips. NN_NORM_VERBOSE=1 prints every measured error.
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
#define EPS 1e-5

static eng_shape shape1(int64_t n) { return (eng_shape){.ndim = 1, .dim = {n}}; }

static void expect_close(eng_backend *be, const eng_tensor *got, const nnt_fixture *want, double tol, const char *what)
{
    double e = nnt_rel_error(be, got, want);
    if (getenv("NN_NORM_VERBOSE"))
        fprintf(stderr, "nn_norm: %-26s rel error %.3g\n", what, e);
    cr_expect_leq(e, tol, "%s: relative error %g", what, e);
}

static void check_fd(eng_backend *be, void (*forward)(eng_backend *, void *), void *arg, eng_tensor *param,
                     float *host, const eng_tensor *grad, const eng_tensor *y, const float *r, const char *what)
{
    double worst = nnt_fd_error(be, forward, arg, param, host, grad, y, r);
    if (getenv("NN_NORM_VERBOSE"))
        fprintf(stderr, "nn_norm: %-26s fd error %.3g\n", what, worst);
    cr_expect_leq(worst, FD_TOL, "%s: finite differences disagree by %g", what, worst);
}

static void doubled(nnt_fixture *f)
{
    for (size_t k = 0; k < f->a.count; k++)
        ((float *)f->a.data)[k] *= 2.0f;
}

/* ---- layer norm against PyTorch ------------------------------------------------------------- */

static void ln_case(const char *kase)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, kase, "x"), gamma = nnt_load(be, kase, "gamma"), beta = nnt_load(be, kase, "beta"),
                y = nnt_load(be, kase, "y"), dy = nnt_load(be, kase, "dy"), dx = nnt_load(be, kase, "dx"),
                dgamma = nnt_load(be, kase, "dgamma"), dbeta = nnt_load(be, kase, "dbeta");
    int64_t n = x.t.shape.dim[0];
    eng_tensor mean = eng_tensor_new(be, shape1(n)), invstd = eng_tensor_new(be, shape1(n)),
               out = nnt_zeros_like(be, &x.t), gx = nnt_zeros_like(be, &x.t), gg = nnt_zeros_like(be, &gamma.t),
               gb = nnt_zeros_like(be, &beta.t);
    char what[64];
    eng_layernorm2d_forward(be, EPS, &x.t, &gamma.t, &beta.t, &mean, &invstd, &out);
    snprintf(what, sizeof what, "%s y", kase);
    expect_close(be, &out, &y, FWD_TOL, what);
    eng_layernorm2d_backward(be, &x.t, &gamma.t, &mean, &invstd, &dy.t, &gx, &gg, &gb);
    snprintf(what, sizeof what, "%s dx", kase);
    expect_close(be, &gx, &dx, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s dgamma", kase);
    expect_close(be, &gg, &dgamma, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s dbeta", kase);
    expect_close(be, &gb, &dbeta, GRAD_TOL, what);
    /* A second backward accumulates; NULL dgamma skips it, NULL dx leaves dx alone. */
    eng_layernorm2d_backward(be, &x.t, &gamma.t, &mean, &invstd, &dy.t, &gx, NULL, &gb);
    eng_layernorm2d_backward(be, &x.t, &gamma.t, &mean, &invstd, &dy.t, NULL, &gg, NULL);
    doubled(&dx), doubled(&dgamma), doubled(&dbeta);
    snprintf(what, sizeof what, "%s 2×dx", kase);
    expect_close(be, &gx, &dx, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s 2×dgamma", kase);
    expect_close(be, &gg, &dgamma, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s 2×dbeta", kase);
    expect_close(be, &gb, &dbeta, GRAD_TOL, what);
    eng_tensor *mine[] = {&mean, &invstd, &out, &gx, &gg, &gb};
    for (size_t i = 0; i < ARRAY_LEN(mine); i++)
        eng_tensor_free(be, mine[i]);
    nnt_fixture *all[] = {&x, &gamma, &beta, &y, &dy, &dx, &dgamma, &dbeta};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

Test(nn_norm, layernorm2d_matches_torch_groupnorm) { ln_case("ln_4d"); }
Test(nn_norm, layernorm_on_n_by_c_matches_torch_groupnorm) { ln_case("ln_2d"); }
Test(nn_norm, layernorm_with_33_channels_matches_torch_groupnorm) { ln_case("ln_wide"); }

/* GroupNorm(1, C, affine=False): gamma and beta NULL. The saved statistics are the sample's
 * mean and 1/sqrt(biased var + eps), computed here by hand. */
Test(nn_norm, affine_free_layernorm_matches_torch_and_saves_per_sample_stats)
{
    eng_backend *be = nnt_open_cpu();
    nnt_fixture x = nnt_load(be, "ln_noaffine", "x"), y = nnt_load(be, "ln_noaffine", "y"),
                dy = nnt_load(be, "ln_noaffine", "dy"), dx = nnt_load(be, "ln_noaffine", "dx");
    int64_t n = x.t.shape.dim[0], m = eng_numel(&x.t.shape) / n;
    eng_tensor mean = eng_tensor_new(be, shape1(n)), invstd = eng_tensor_new(be, shape1(n)),
               out = nnt_zeros_like(be, &x.t), gx = nnt_zeros_like(be, &x.t);
    eng_layernorm2d_forward(be, EPS, &x.t, NULL, NULL, &mean, &invstd, &out);
    expect_close(be, &out, &y, FWD_TOL, "ln_noaffine y");
    eng_layernorm2d_backward(be, &x.t, NULL, &mean, &invstd, &dy.t, &gx, NULL, NULL);
    expect_close(be, &gx, &dx, GRAD_TOL, "ln_noaffine dx");
    float hm[8], hs[8];
    cr_assert_leq(n, 8);
    eng_download(be, &mean, hm);
    eng_download(be, &invstd, hs);
    const float *hx = x.a.data;
    for (int64_t s = 0; s < n; s++) {
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < m; i++)
            sum += hx[s * m + i];
        for (int64_t i = 0; i < m; i++)
            sq += (hx[s * m + i] - sum / m) * (hx[s * m + i] - sum / m);
        cr_expect(fabs(hm[s] - sum / m) <= 1e-6 * fmax(1.0, fabs(sum / m)), "sample %lld mean", (long long)s);
        double want = 1.0 / sqrt(sq / m + EPS);
        cr_expect(fabs(hs[s] - want) <= 1e-6 * want, "sample %lld invstd %g, want %g", (long long)s, hs[s], want);
    }
    eng_tensor *mine[] = {&mean, &invstd, &out, &gx};
    for (size_t i = 0; i < ARRAY_LEN(mine); i++)
        eng_tensor_free(be, mine[i]);
    nnt_fixture *all[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

/* ---- layer norm against finite differences ---------------------------------------------------- */

typedef struct {
    eng_tensor *x, *gamma, *beta, *rm, *rv, *mean, *invstd, *y;
} norm_args;

static void run_ln(eng_backend *be, void *arg)
{
    norm_args *a = arg;
    eng_layernorm2d_forward(be, EPS, a->x, a->gamma, a->beta, a->mean, a->invstd, a->y);
}

static void ln_fd(eng_shape xs, const char *tag)
{
    eng_backend *be = nnt_open_cpu();
    int64_t c = xs.dim[1], n = xs.dim[0];
    float *hx, *hg, *hb, *r;
    eng_tensor x = nnt_host_tensor(be, xs, 31, &hx), gamma = nnt_host_tensor(be, shape1(c), 32, &hg),
               beta = nnt_host_tensor(be, shape1(c), 33, &hb), dy = nnt_host_tensor(be, xs, 34, &r);
    eng_tensor mean = eng_tensor_new(be, shape1(n)), invstd = eng_tensor_new(be, shape1(n)), y = nnt_zeros_like(be, &x);
    eng_tensor gx = nnt_zeros_like(be, &x), gg = nnt_zeros_like(be, &gamma), gb = nnt_zeros_like(be, &beta);
    norm_args a = {.x = &x, .gamma = &gamma, .beta = &beta, .mean = &mean, .invstd = &invstd, .y = &y};
    run_ln(be, &a);
    eng_layernorm2d_backward(be, &x, &gamma, &mean, &invstd, &dy, &gx, &gg, &gb);
    char what[64];
    snprintf(what, sizeof what, "%s fd dx", tag);
    check_fd(be, run_ln, &a, &x, hx, &gx, &y, r, what);
    snprintf(what, sizeof what, "%s fd dgamma", tag);
    check_fd(be, run_ln, &a, &gamma, hg, &gg, &y, r, what);
    snprintf(what, sizeof what, "%s fd dbeta", tag);
    check_fd(be, run_ln, &a, &beta, hb, &gb, &y, r, what);
    eng_tensor *all[] = {&x, &gamma, &beta, &dy, &mean, &invstd, &y, &gx, &gg, &gb};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hg), free(hb), free(r);
    eng_backend_close(be);
}

Test(nn_norm, layernorm2d_gradients_match_finite_differences) { ln_fd(eng_shape4(2, 3, 3, 2), "ln4d"); }
Test(nn_norm, layernorm_n_by_c_gradients_match_finite_differences) { ln_fd(eng_shape2(3, 5), "ln2d"); }

/* ---- eval-mode batch-norm backward ------------------------------------------------------------ */

Test(nn_norm, batchnorm_eval_backward_matches_torch_autograd)
{
    eng_backend *be = nnt_open_cpu();
    const char *k = "bn_evalbw";
    nnt_fixture x = nnt_load(be, k, "x"), gamma = nnt_load(be, k, "gamma"), beta = nnt_load(be, k, "beta"),
                rm = nnt_load(be, k, "rm"), rv = nnt_load(be, k, "rv"), y = nnt_load(be, k, "y"), dy = nnt_load(be, k, "dy"),
                dx = nnt_load(be, k, "dx"), dgamma = nnt_load(be, k, "dgamma"), dbeta = nnt_load(be, k, "dbeta");
    eng_tensor out = nnt_zeros_like(be, &x.t), gx = nnt_zeros_like(be, &x.t), gg = nnt_zeros_like(be, &gamma.t),
               gb = nnt_zeros_like(be, &beta.t);
    eng_batchnorm_forward_eval(be, EPS, &x.t, &gamma.t, &beta.t, &rm.t, &rv.t, &out);
    expect_close(be, &out, &y, FWD_TOL, "bn_evalbw y");
    eng_batchnorm_backward_eval(be, EPS, &x.t, &gamma.t, &rm.t, &rv.t, &dy.t, &gx, &gg, &gb);
    expect_close(be, &gx, &dx, GRAD_TOL, "bn_evalbw dx");
    expect_close(be, &gg, &dgamma, GRAD_TOL, "bn_evalbw dgamma");
    expect_close(be, &gb, &dbeta, GRAD_TOL, "bn_evalbw dbeta");
    /* Accumulation and NULL skips: each gradient gets exactly one more share. */
    eng_batchnorm_backward_eval(be, EPS, &x.t, &gamma.t, &rm.t, &rv.t, &dy.t, &gx, NULL, NULL);
    eng_batchnorm_backward_eval(be, EPS, &x.t, &gamma.t, &rm.t, &rv.t, &dy.t, NULL, &gg, &gb);
    doubled(&dx), doubled(&dgamma), doubled(&dbeta);
    expect_close(be, &gx, &dx, GRAD_TOL, "bn_evalbw 2×dx");
    expect_close(be, &gg, &dgamma, GRAD_TOL, "bn_evalbw 2×dgamma");
    expect_close(be, &gb, &dbeta, GRAD_TOL, "bn_evalbw 2×dbeta");
    /* dx is dy scaled per channel by γ/sqrt(var + eps): one element by hand. */
    float h[4 * 15 * 3];
    cr_assert_eq((size_t)eng_numel(&x.t.shape), ARRAY_LEN(h));
    eng_download(be, &gx, h);
    const float *g = gamma.a.data, *v = rv.a.data, *d = dy.a.data;
    int64_t at = 2 * 60 + 3 * 15 + 7; /* n = 2, c = 3, s = 7 */
    double want = 2.0 * d[at] * g[3] / sqrt((double)v[3] + EPS);
    cr_expect(fabs(h[at] - want) <= 1e-5 * fabs(want), "dx by hand: %g, want %g", h[at], want);
    eng_tensor *mine[] = {&out, &gx, &gg, &gb};
    for (size_t i = 0; i < ARRAY_LEN(mine); i++)
        eng_tensor_free(be, mine[i]);
    nnt_fixture *all[] = {&x, &gamma, &beta, &rm, &rv, &y, &dy, &dx, &dgamma, &dbeta};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

static void run_bn_eval(eng_backend *be, void *arg)
{
    norm_args *a = arg;
    eng_batchnorm_forward_eval(be, EPS, a->x, a->gamma, a->beta, a->rm, a->rv, a->y);
}

static void bn_eval_fd(eng_shape xs, const char *tag)
{
    eng_backend *be = nnt_open_cpu();
    int64_t c = xs.dim[1];
    float *hx, *hg, *hb, *r, *hrm, *hrv;
    eng_tensor x = nnt_host_tensor(be, xs, 41, &hx), gamma = nnt_host_tensor(be, shape1(c), 42, &hg),
               beta = nnt_host_tensor(be, shape1(c), 43, &hb), dy = nnt_host_tensor(be, xs, 44, &r),
               rm = nnt_host_tensor(be, shape1(c), 45, &hrm), rv = eng_tensor_new(be, shape1(c));
    hrv = xmalloc((size_t)c * sizeof *hrv);
    for (int64_t i = 0; i < c; i++) /* a variance: positive, and away from eps */
        hrv[i] = 0.5f + 0.3f * (float)i;
    eng_upload(be, &rv, hrv);
    eng_tensor y = nnt_zeros_like(be, &x), gx = nnt_zeros_like(be, &x), gg = nnt_zeros_like(be, &gamma),
               gb = nnt_zeros_like(be, &beta);
    norm_args a = {.x = &x, .gamma = &gamma, .beta = &beta, .rm = &rm, .rv = &rv, .y = &y};
    eng_batchnorm_backward_eval(be, EPS, &x, &gamma, &rm, &rv, &dy, &gx, &gg, &gb);
    char what[64];
    snprintf(what, sizeof what, "%s fd dx", tag);
    check_fd(be, run_bn_eval, &a, &x, hx, &gx, &y, r, what);
    snprintf(what, sizeof what, "%s fd dgamma", tag);
    check_fd(be, run_bn_eval, &a, &gamma, hg, &gg, &y, r, what);
    snprintf(what, sizeof what, "%s fd dbeta", tag);
    check_fd(be, run_bn_eval, &a, &beta, hb, &gb, &y, r, what);
    eng_tensor *all[] = {&x, &gamma, &beta, &dy, &rm, &rv, &y, &gx, &gg, &gb};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(hg), free(hb), free(r), free(hrm), free(hrv);
    eng_backend_close(be);
}

Test(nn_norm, batchnorm2d_eval_backward_matches_finite_differences) { bn_eval_fd(eng_shape4(3, 2, 2, 3), "bn4d eval"); }
Test(nn_norm, batchnorm1d_eval_backward_matches_finite_differences) { bn_eval_fd(eng_shape2(4, 3), "bn2d eval"); }

/*
 * test_heads.c — VISSL's heads (nn/heads.c) against PyTorch.
 *
 * tests/golden/make_heads_fixtures.py rebuilds VISSL's MLP, LinearEvalMLP and SwAVPrototypesHead
 * in plain PyTorch with formula-set weights (head_init_formula), and saves per case the input,
 * eval- and train-mode outputs, upstream gradients, the input gradient, all parameter gradients
 * (flattened in state-dict order, which is the C gradient buffer's layout) and the running stats.
 * Checked: forward ≤ 1e-4 and gradients ≤ 1e-3 relative (per parameter tensor), names and order
 * of entries, the fixed MLP (hidden widths without ReLU, skip_last_layer_relu_bn), too few
 * dims, SimCLR's head list, swav with two prototype heads and a gradient for a subset of
 * outputs, siamese_concat_view, accumulation.
 * Also finite differences (see the section below): dx and every parameter gradient of an mlp
 * with BN + ReLU + dropout, an eval_mlp and a swav_head with two prototype heads.
 */
#include "heads.h"
#include "nn.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FWD_TOL 1e-4
#define GRAD_TOL 1e-3

static double worst_fwd, worst_grad;

/* "heads_KASE", the fixture prefix (nnt_load copies what it needs). */
static const char *hk(const char *kase)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "heads_%s", kase);
    return buf;
}

static void report(const char *kase, const char *what, double e, double tol)
{
    if (tol == FWD_TOL)
        worst_fwd = fmax(worst_fwd, e);
    else
        worst_grad = fmax(worst_grad, e);
    if (getenv("HEADS_VERBOSE"))
        fprintf(stderr, "heads: %-10s %-28s error %.3g\n", kase, what, e);
    cr_expect_leq(e, tol, "%s %s: error %g > %g", kase, what, e, tol);
}

static head_options opts(head_type t, const int64_t *dims, int n)
{
    head_options o = head_defaults(t);
    o.ndims = n;
    memcpy(o.dims, dims, (size_t)n * sizeof *dims);
    return o;
}

static void check_tensor(eng_backend *be, const char *kase, const char *name, const eng_tensor *got, double tol)
{
    nnt_fixture f = nnt_load(be, hk(kase), name);
    report(kase, name, nnt_rel_error(be, got, &f), tol);
    nnt_unload(be, &f);
}

static float *download(eng_backend *be, const eng_tensor *t)
{
    float *h = xmalloc((size_t)(eng_numel(&t->shape) + 1) * sizeof *h);
    if (eng_numel(&t->shape))
        eng_download(be, t, h);
    return h;
}

/* Per entry of `kind`: the slice of the flat fixture against the entry's tensor. */
static void check_flat(eng_backend *be, const char *kase, const char *name, const head *h, head_kind kind,
                       bool grad, double tol)
{
    nnt_fixture f = nnt_load(be, hk(kase), name);
    /* A Linear's bias right before a BN has a zero true gradient (BN removes it): its slice is
     * rounding noise, so each slice's scale is floored at 1e-3 of the whole array's. */
    double global = 0;
    for (size_t j = 0; j < f.a.count; j++)
        global = fmax(global, fabs((double)((const float *)f.a.data)[j]));
    int64_t at = 0;
    for (int i = 0; i < head_entry_count(h); i++) {
        const head_entry *e = head_entry_at(h, i);
        if (e->kind != kind)
            continue;
        float *got = download(be, grad ? &e->grad : &e->value);
        int64_t n = eng_numel(&e->value.shape);
        cr_assert_leq((size_t)(at + n), f.a.count);
        double worst = 0, scale = 0;
        for (int64_t j = 0; j < n; j++) {
            worst = fmax(worst, fabs((double)got[j] - ((const float *)f.a.data)[at + j]));
            scale = fmax(scale, fabs((double)((const float *)f.a.data)[at + j]));
        }
        char what[96];
        snprintf(what, sizeof what, "%s %s", name, e->name);
        scale = fmax(scale, 1e-3 * global);
        report(kase, what, worst / (scale > 0 ? scale : 1), tol);
        at += n;
        free(got);
    }
    cr_expect_eq((size_t)at, f.a.count, "%s %s: %lld values, fixture has %zu", kase, name, (long long)at, f.a.count);
    nnt_unload(be, &f);
}

static void check_names(const head *h, const char *kase, const char *prefix)
{
    char file[96];
    snprintf(file, sizeof file, "heads_%s_names.txt", kase);
    char *path = test_fixture("nn", file);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    free(path);
    char name[256], kind[16], shape[64];
    int i = 0;
    size_t np = strlen(prefix);
    while (fscanf(f, "%255s %15s %63s", name, kind, shape) == 3) {
        if (strncmp(name, prefix, np) != 0)
            continue;
        cr_assert_lt(i, head_entry_count(h));
        const head_entry *e = head_entry_at(h, i++);
        cr_expect_str_eq(e->name, name + np);
        cr_expect_eq(e->kind, strcmp(kind, "param") == 0 ? HEAD_PARAM : HEAD_BUFFER, "%s", name);
        char s[64] = "";
        for (int d = 0; d < e->value.shape.ndim; d++)
            snprintf(s + strlen(s), sizeof s - strlen(s), d ? ",%lld" : "%lld", (long long)e->value.shape.dim[d]);
        cr_expect_str_eq(s, shape, "%s", name);
    }
    cr_expect_eq(i, head_entry_count(h), "%s: %d of %d entries named", kase, i, head_entry_count(h));
    fclose(f);
}

/* Eval outputs, then train outputs, running stats, dx and parameter gradients. */
static void check_head(const head_options *o, const char *kase)
{
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    head *h = head_new(be, o, 7, &err);
    cr_assert(h, "%s", err);
    head_init_formula(be, h);
    check_names(h, kase, "");
    nnt_fixture x = nnt_load(be, hk(kase), "x");
    cr_assert_eq(head_plan(be, h, &x.t.shape, NULL), 0);
    head_forward(be, h, &x.t, false);
    char name[32];
    for (int i = 0; i < head_output_count(h); i++) {
        snprintf(name, sizeof name, "eval%d", i);
        check_tensor(be, kase, name, head_output(h, i), FWD_TOL);
    }
    head_forward(be, h, &x.t, true);
    nnt_fixture dout[HEAD_MAX_PROTOTYPES + 1];
    const eng_tensor *dp[HEAD_MAX_PROTOTYPES + 1] = {0};
    for (int i = 0; i < head_output_count(h); i++) {
        snprintf(name, sizeof name, "train%d", i);
        check_tensor(be, kase, name, head_output(h, i), FWD_TOL);
        snprintf(name, sizeof name, "heads_%s_dout%d.npy", kase, i);
        char *p = test_fixture("nn", name);
        bool have = access(p, R_OK) == 0;
        free(p);
        if (have) {
            snprintf(name, sizeof name, "dout%d", i);
            dout[i] = nnt_load(be, hk(kase), name);
            dp[i] = &dout[i].t;
        }
    }
    check_flat(be, kase, "stats", h, HEAD_BUFFER, false, FWD_TOL);
    eng_tensor dx = nnt_zeros_like(be, &x.t);
    head_backward(be, h, dp, &dx);
    check_tensor(be, kase, "dx", &dx, GRAD_TOL);
    check_flat(be, kase, "grads", h, HEAD_PARAM, true, GRAD_TOL);
    for (int i = 0; i < head_output_count(h); i++)
        if (dp[i])
            nnt_unload(be, &dout[i]);
    eng_tensor_free(be, &dx);
    nnt_unload(be, &x);
    head_free(be, h);
    eng_backend_close(be);
    if (getenv("HEADS_VERBOSE"))
        fprintf(stderr, "heads: worst forward %.3g, gradient %.3g\n", worst_fwd, worst_grad);
}

static const int64_t D16_16_8[] = {16, 16, 8};

Test(heads, mlp_bn_relu)
{
    head_options o = opts(HEAD_MLP, D16_16_8, 3);
    o.use_bn = o.use_relu = true;
    check_head(&o, "mlp");
}

static const int64_t D16_32_8[] = {16, 32, 8};

/* VISSL's fixed MLP: without ReLU each Linear still reads the previous one's width. */
Test(heads, mlp_without_relu_chains_the_dims)
{
    head_options o = opts(HEAD_MLP, D16_32_8, 3);
    o.use_bn = true;
    o.use_bias = false;
    check_head(&o, "norelu");
}

/* clf.0 Linear, clf.1 BN, clf.2 ReLU, clf.3 Linear and nothing after it. */
Test(heads, mlp_skip_last_layer_relu_bn)
{
    head_options o = opts(HEAD_MLP, D16_32_8, 3);
    o.use_bn = o.use_relu = o.skip_last_layer_relu_bn = true;
    check_head(&o, "skip");
}

Test(heads, mlp_needs_two_dims)
{
    eng_backend *be = nnt_open_cpu();
    head_options o = opts(HEAD_MLP, D16_32_8, 1);
    char *err = NULL;
    cr_expect_null(head_new(be, &o, 1, &err));
    cr_expect(err);
    free(err);
    eng_backend_close(be);
}

Test(heads, eval_mlp_4d) {
    static const int64_t d[] = {64, 10};
    head_options o = opts(HEAD_EVAL_MLP, d, 2);
    o.in_channels = 16;
    o.use_bn = true;
    check_head(&o, "evalmlp");
}

Test(heads, eval_mlp_2d) {
    static const int64_t d[] = {16, 10};
    head_options o = opts(HEAD_EVAL_MLP, d, 2);
    o.in_channels = 16;
    check_head(&o, "evalmlp2d");
}

Test(heads, swav_two_prototypes_subset_gradient)
{
    head_options o = opts(HEAD_SWAV, D16_16_8, 3);
    o.use_bn = true;
    o.nclusters = 2;
    o.num_clusters[0] = 10;
    o.num_clusters[1] = 7;
    check_head(&o, "swav");
}

Test(heads, simclr_head_list)
{
    eng_backend *be = nnt_open_cpu();
    static const int64_t a[] = {16, 16}, b[] = {16, 8};
    head_options o[2] = {opts(HEAD_MLP, a, 2), opts(HEAD_MLP, b, 2)};
    o[0].use_relu = true;
    head_list l;
    char *err = NULL;
    cr_assert_eq(head_list_new(be, &l, o, 2, 3, &err), 0, "%s", err);
    for (int i = 0; i < 2; i++)
        head_init_formula(be, l.heads[i]);
    check_names(l.heads[0], "simclr", "0.");
    check_names(l.heads[1], "simclr", "1.");
    nnt_fixture x = nnt_load(be, "heads_simclr", "x"), r = nnt_load(be, "heads_simclr", "dout0");
    int failed;
    cr_assert_eq(head_list_plan(be, &l, &x.t.shape, &failed, NULL), 0);
    check_tensor(be, "simclr", "eval0", head_list_forward(be, &l, &x.t, false), FWD_TOL);
    check_tensor(be, "simclr", "train0", head_list_forward(be, &l, &x.t, true), FWD_TOL);
    cr_expect_eq(head_list_output_count(&l), 1);
    eng_tensor dx = nnt_zeros_like(be, &x.t);
    const eng_tensor *dp[1] = {&r.t};
    head_list_backward(be, &l, dp, &dx);
    check_tensor(be, "simclr", "dx", &dx, GRAD_TOL);
    /* The fixture's grads are head 0's then head 1's, as the two gradient buffers are. */
    nnt_fixture g = nnt_load(be, "heads_simclr", "grads");
    eng_tensor g0 = head_grads(l.heads[0]), g1 = head_grads(l.heads[1]);
    float *h0 = download(be, &g0), *h1 = download(be, &g1);
    int64_t n0 = eng_numel(&g0.shape), n1 = eng_numel(&g1.shape);
    cr_assert_eq((size_t)(n0 + n1), g.a.count);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n0 + n1; i++) {
        worst = fmax(worst, fabs((double)(i < n0 ? h0[i] : h1[i - n0]) - ((const float *)g.a.data)[i]));
        scale = fmax(scale, fabs((double)((const float *)g.a.data)[i]));
    }
    report("simclr", "grads", worst / scale, GRAD_TOL);
    free(h0);
    free(h1);
    nnt_unload(be, &g);
    eng_tensor_free(be, &dx);
    nnt_unload(be, &x);
    nnt_unload(be, &r);
    head_list_free(be, &l);
    eng_backend_close(be);
}

Test(heads, siamese_concat_view)
{
    eng_backend *be = nnt_open_cpu();
    head_options o = head_defaults(HEAD_SIAMESE_CONCAT_VIEW);
    o.num_towers = 3;
    char *err = NULL;
    head *h = head_new(be, &o, 1, &err);
    cr_assert(h, "%s", err);
    cr_expect_eq(head_entry_count(h), 0);
    float *hx;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(6, 4), 5, &hx);
    cr_assert_eq(head_plan(be, h, &x.shape, NULL), 0);
    const eng_tensor *y = head_forward(be, h, &x, true);
    cr_assert_eq(y->shape.ndim, 2);
    cr_expect_eq(y->shape.dim[0], 2);
    cr_expect_eq(y->shape.dim[1], 12);
    float *hy = download(be, y);
    for (int i = 0; i < 24; i++) /* row n of the output is rows 3n..3n+2 of the input */
        cr_expect_eq(hy[i], hx[i]);
    /* backward: the inverse reshape, accumulated twice */
    float *hd;
    eng_tensor d = nnt_host_tensor(be, y->shape, 6, &hd);
    eng_tensor dx = nnt_zeros_like(be, &x);
    const eng_tensor *dp[1] = {&d};
    head_backward(be, h, dp, &dx);
    head_backward(be, h, dp, &dx);
    float *hdx = download(be, &dx);
    for (int i = 0; i < 24; i++)
        cr_expect_float_eq(hdx[i], 2 * hd[i], 1e-6);
    free(hx);
    free(hy);
    free(hd);
    free(hdx);
    eng_tensor_free(be, &x);
    eng_tensor_free(be, &d);
    eng_tensor_free(be, &dx);
    head_free(be, h);
    eng_backend_close(be);
}

Test(heads, gradients_accumulate_and_default_init)
{
    eng_backend *be = nnt_open_cpu();
    head_options o = opts(HEAD_SWAV, D16_16_8, 3);
    o.use_bn = true;
    o.nclusters = 1;
    o.num_clusters[0] = 5;
    char *err = NULL;
    head *h = head_new(be, &o, 11, &err);
    cr_assert(h, "%s", err);
    /* default init: Linear weights within ±1/√in, BN weight 1 */
    const head_entry *w0 = head_entry_at(h, 0), *bn = head_entry_at(h, 2);
    cr_expect_str_eq(w0->name, "projection_head.0.weight");
    cr_expect_str_eq(bn->name, "projection_head.1.weight");
    float *hw = download(be, &w0->value), *hb = download(be, &bn->value);
    for (int i = 0; i < 256; i++)
        cr_expect_leq(fabsf(hw[i]), 0.25f);
    cr_expect_eq(hb[0], 1.0f);
    free(hw);
    free(hb);
    float *hx;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(4, 16), 3, &hx);
    cr_assert_eq(head_plan(be, h, &x.shape, NULL), 0);
    head_forward(be, h, &x, true);
    float *hr;
    eng_tensor r = nnt_host_tensor(be, head_output(h, 1)->shape, 4, &hr);
    const eng_tensor *dp[2] = {NULL, &r};
    eng_tensor dx = nnt_zeros_like(be, &x);
    head_backward(be, h, dp, &dx);
    eng_tensor g = head_grads(h);
    float *once = download(be, &g), *dx1 = download(be, &dx);
    head_backward(be, h, dp, &dx);
    float *twice = download(be, &g), *dx2 = download(be, &dx);
    for (int64_t i = 0; i < head_param_count(h); i++)
        cr_expect_float_eq(twice[i], 2 * once[i], 1e-5 + 1e-5 * fabsf(once[i]));
    for (int i = 0; i < 64; i++)
        cr_expect_float_eq(dx2[i], 2 * dx1[i], 1e-5 + 1e-5 * fabsf(dx1[i]));
    free(once);
    free(twice);
    free(dx1);
    free(dx2);
    free(hx);
    free(hr);
    eng_tensor_free(be, &x);
    eng_tensor_free(be, &r);
    eng_tensor_free(be, &dx);
    head_free(be, h);
    eng_backend_close(be);
}

/* ---- finite differences ----------------------------------------------------------------------- */

/* Every gradient of a head (its input's and every parameter's) against central differences of
 * L = Σ_i Σ out_i·r_i, a random linear functional of ALL outputs (swav: the embedding and both
 * score heads), in training mode: BN with batch statistics, dropout with a mask replayed by
 * resetting the head's step counter before each forward (head_set_step).
 * Honest about precision: the heads run in fp32 on the cpu backend and are differentiated as
 * they are, in fp32 (L summed in double), not through a double host reimplementation. The step
 * is a compromise measured on these cases: train-mode BN over 4–5 rows makes L strongly curved
 * in the first Linear's weights (and a ReLU input may sit near its kink), so H = 1e-2 is off by
 * up to 0.26 and H = 1e-3 by 5e-3, while fp32 rounding grows as 1/H (≈7e-4 at H = 2e-4). At
 * H = 5e-4 the worst error is 4.1e-4; an element passes within FD_TOL·max(1, |fd|), and a wrong
 * gradient shows as an O(1) error. HEADS_FD_DEBUG=1 prints the elements that fail. */
#define FD_H 5e-4f
#define FD_TOL 2e-3

typedef struct {
    head *h;
    eng_tensor x;
    eng_tensor r[HEAD_MAX_PROTOTYPES + 1];
    float *rh[HEAD_MAX_PROTOTYPES + 1];
    int nout;
    uint64_t step;
} fd_case;

static double fd_loss(eng_backend *be, fd_case *c)
{
    head_set_step(c->h, c->step);
    head_forward(be, c->h, &c->x, true);
    double l = 0;
    for (int i = 0; i < c->nout; i++)
        l += nnt_loss(be, head_output(c->h, i), c->rh[i]);
    return l;
}

/* (L(v + h) − L(v − h)) / 2h for element j, with h as the float step really taken. */
static double central(eng_backend *be, fd_case *c, const eng_tensor *t, float *v, int64_t j, float h)
{
    float keep = v[j];
    v[j] = keep + h;
    double step = (double)v[j];
    eng_upload(be, t, v);
    double up = fd_loss(be, c);
    v[j] = keep - h;
    step -= (double)v[j];
    eng_upload(be, t, v);
    double down = fd_loss(be, c);
    v[j] = keep;
    eng_upload(be, t, v);
    return (up - down) / step;
}

/* Worst |fd − g| / max(1, |fd|) over the n values of `t` (host copy `v`), gradient `g`. */
static double fd_worst(eng_backend *be, fd_case *c, const eng_tensor *t, float *v, const float *g, int64_t n)
{
    double worst = 0;
    for (int64_t j = 0; j < n; j++) {
        double fd = central(be, c, t, v, j, FD_H);
        if (getenv("HEADS_FD_DEBUG") && fabs(fd - g[j]) / fmax(1.0, fabs(fd)) > FD_TOL)
            fprintf(stderr, "  element %lld: fd %.6g, analytic %.6g\n", (long long)j, fd, (double)g[j]);
        worst = fmax(worst, fabs(fd - g[j]) / fmax(1.0, fabs(fd)));
    }
    return worst;
}

static void head_fd(const head_options *o, eng_shape in, const char *kase)
{
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    head *h = head_new(be, o, 77, &err);
    cr_assert(h, "%s", err);
    fd_case c = {.h = h, .nout = head_output_count(h), .step = 5};
    float *xh;
    c.x = nnt_host_tensor(be, in, 51, &xh);
    cr_assert_eq(head_plan(be, h, &in, NULL), 0);
    head_forward(be, h, &c.x, true);
    const eng_tensor *dout[HEAD_MAX_PROTOTYPES + 1];
    for (int i = 0; i < c.nout; i++) {
        c.r[i] = nnt_host_tensor(be, head_output(h, i)->shape, 60 + (unsigned)i, &c.rh[i]);
        dout[i] = &c.r[i];
    }
    /* Analytic gradients of the forward at step c.step. */
    eng_tensor dx = nnt_zeros_like(be, &c.x);
    head_zero_grad(be, h);
    head_set_step(h, c.step);
    head_forward(be, h, &c.x, true);
    head_backward(be, h, dout, &dx);
    float *gx = download(be, &dx);
    double ex = fd_worst(be, &c, &c.x, xh, gx, eng_numel(&in));
    eng_tensor pv = head_params(h), pg = head_grads(h);
    float *vh = download(be, &pv), *gh = download(be, &pg);
    double ep = fd_worst(be, &c, &pv, vh, gh, eng_numel(&pv.shape));
    if (getenv("HEADS_VERBOSE"))
        fprintf(stderr, "heads: %-10s fd dx %.3g, fd params (%lld) %.3g\n", kase, ex,
                (long long)eng_numel(&pv.shape), ep);
    cr_expect_leq(ex, FD_TOL, "%s: dx disagrees with finite differences by %g", kase, ex);
    cr_expect_leq(ep, FD_TOL, "%s: parameter gradients disagree with finite differences by %g", kase, ep);
    for (int i = 0; i < c.nout; i++) {
        eng_tensor_free(be, &c.r[i]);
        free(c.rh[i]);
    }
    free(gx), free(vh), free(gh), free(xh);
    eng_tensor_free(be, &dx);
    eng_tensor_free(be, &c.x);
    head_free(be, h);
    eng_backend_close(be);
}

Test(heads, mlp_bn_relu_dropout_gradients_match_finite_differences)
{
    static const int64_t d[] = {6, 7, 5, 3};
    head_options o = opts(HEAD_MLP, d, 4);
    o.use_bn = o.use_relu = o.use_dropout = true;
    head_fd(&o, eng_shape2(5, 6), "mlp fd");
}

Test(heads, eval_mlp_gradients_match_finite_differences)
{
    static const int64_t d[] = {12, 4};
    head_options o = opts(HEAD_EVAL_MLP, d, 2);
    o.in_channels = 3;
    head_fd(&o, eng_shape4(4, 3, 2, 2), "eval_mlp fd");
}

Test(heads, swav_two_prototypes_gradients_match_finite_differences)
{
    static const int64_t d[] = {6, 8, 5};
    head_options o = opts(HEAD_SWAV, d, 3);
    o.use_bn = true;
    o.nclusters = 2;
    o.num_clusters[0] = 4;
    o.num_clusters[1] = 3;
    head_fd(&o, eng_shape2(4, 6), "swav fd");
}

/* HEAD.BATCHNORM_EPS and HEAD.BATCHNORM_MOMENTUM reach every head's BatchNorm: one train forward
 * of an mlp with use_bn moves the running mean by momentum × the batch mean (the running mean
 * starts at 0), and the output is the batch normalised with that eps (γ = 1, β = 0 at init). */
Test(heads, batchnorm_eps_and_momentum_come_from_the_options)
{
    eng_backend *be = nnt_open_cpu();
    head_options o = head_defaults(HEAD_MLP);
    o.dims[0] = 3, o.dims[1] = 2, o.ndims = 2, o.use_bn = true, o.bn_eps = 0.5, o.bn_momentum = 0.001;
    char *err = NULL;
    head *h = head_new(be, &o, 1, &err);
    cr_assert(h, "%s", err);
    float *hx;
    eng_tensor x = nnt_host_tensor(be, eng_shape2(4, 3), 5, &hx);
    cr_assert_eq(head_plan(be, h, &x.shape, NULL), 0);
    const eng_tensor *y = head_forward(be, h, &x, true);
    float *hy = download(be, y);
    /* the Linear's output, by hand, then its batch statistics */
    const head_entry *w = head_entry_at(h, 0), *b = head_entry_at(h, 1);
    float *hw = download(be, &w->value), *hb = download(be, &b->value);
    for (int j = 0; j < 2; j++) {
        double z[4], mean = 0, var = 0;
        for (int n = 0; n < 4; n++) {
            z[n] = hb[j];
            for (int i = 0; i < 3; i++)
                z[n] += (double)hw[j * 3 + i] * hx[n * 3 + i];
            mean += z[n] / 4;
        }
        for (int n = 0; n < 4; n++)
            var += (z[n] - mean) * (z[n] - mean) / 4;
        for (int n = 0; n < 4; n++)
            cr_expect_float_eq(hy[n * 2 + j], (z[n] - mean) / sqrt(var + 0.5), 1e-5, "output %d %d", n, j);
        for (int e = 0; e < head_entry_count(h); e++) {
            const head_entry *rm = head_entry_at(h, e);
            if (!eng_name_ends_with(rm->name, "running_mean"))
                continue;
            float *hr = download(be, &rm->value);
            cr_expect_float_eq(hr[j], 0.001 * mean, 1e-7, "running mean %d", j);
            free(hr);
        }
    }
    free(hx), free(hy), free(hw), free(hb);
    eng_tensor_free(be, &x);
    head_free(be, h);
    eng_backend_close(be);
}

/*
 * test_nn_pool.c — the pooling layers (MaxPool2d, AvgPool2d, AdaptiveAvgPool2d,
 * AdaptiveMaxPool2d) on the cpu backend, against PyTorch and against finite differences.
 *
 * Golden: tests/golden/make_nn_pool_fixtures.py saved, per case, PyTorch's input, output,
 * upstream gradient and autograd input gradient (fixtures/nn/pool_CASE_TENSOR.npy), and for
 * fixed pools the geometry (pool_CASE_desc.npy), so the cases live in one place. The case
 * name's prefix names the layer. Forward must match within 1e-4 and gradients within 1e-3,
 * relative to the largest reference value (test_nn.c's measure). Ties (max_tie*, amax3_tie)
 * check that the first maximum in scan order takes the gradient.
 * Finite differences: L = Σ y·r; average pools are smooth, max pools are checked on inputs
 * whose values are 0.1 apart so the ±h steps never change a window's argmax.
 * Also: gradients accumulate, NaN and -inf follow PyTorch, and eng_pool_output_shape agrees
 * with PyTorch's output sizes (pool_shapes_table.npy), ceil_mode included.
 */
#include "nn.h"
#include "npy.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pool fixtures are named pool_CASE_TENSOR.npy. */
static nnt_fixture pool_load(eng_backend *be, const char *kase, const char *name)
{
    char *prefixed = xasprintf("pool_%s", kase);
    nnt_fixture f = nnt_load(be, prefixed, name);
    free(prefixed);
    return f;
}

static double rel_error_affine(eng_backend *be, const eng_tensor *got, const nnt_fixture *want, float a, float b)
{
    size_t n = want->a.count;
    float *host = xmalloc(n * sizeof *host);
    eng_download(be, got, host);
    const float *ref = want->a.data;
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = (double)a * ref[i] + b;
        worst = fmax(worst, fabs((double)host[i] - r));
        scale = fmax(scale, fabs(r));
    }
    free(host);
    return worst / (scale > 0 ? scale : 1.0);
}

#define FWD_TOL 1e-4
#define GRAD_TOL 1e-3

/* ---- one pool, whatever its kind ------------------------------------------------------------ */

typedef enum { MAX, AVG, AMAX, AAVG } pool_kind;

typedef struct {
    pool_kind kind;
    eng_pool_desc d; /* fixed pools only */
} pool;

static void pool_forward(eng_backend *be, const pool *p, const eng_tensor *x, const eng_tensor *y)
{
    switch (p->kind) {
    case MAX: eng_maxpool_forward(be, &p->d, x, y); break;
    case AVG: eng_avgpool_forward(be, &p->d, x, y); break;
    case AMAX: eng_adaptive_maxpool_forward(be, x, y); break;
    case AAVG: eng_adaptive_avgpool_forward(be, x, y); break;
    }
}

static void pool_backward(eng_backend *be, const pool *p, const eng_tensor *x, const eng_tensor *dy,
                          const eng_tensor *dx)
{
    switch (p->kind) {
    case MAX: eng_maxpool_backward(be, &p->d, x, dy, dx); break;
    case AVG: eng_avgpool_backward(be, &p->d, dy, dx); break;
    case AMAX: eng_adaptive_maxpool_backward(be, x, dy, dx); break;
    case AAVG: eng_adaptive_avgpool_backward(be, dy, dx); break;
    }
}

/* The kind from the case name's prefix; a fixed pool's geometry from its desc nnt_fixture. */
static pool pool_of_case(eng_backend *be, const char *kase)
{
    pool p = {0};
    if (strncmp(kase, "amax", 4) == 0)
        p.kind = AMAX;
    else if (strncmp(kase, "aavg", 4) == 0)
        p.kind = AAVG;
    else {
        p.kind = strncmp(kase, "max", 3) == 0 ? MAX : AVG;
        nnt_fixture f = pool_load(be, kase, "desc");
        cr_assert_eq(f.a.count, 8);
        const float *v = f.a.data;
        p.d = (eng_pool_desc){.kernel = {(int64_t)v[0], (int64_t)v[1]},
                              .stride = {(int64_t)v[2], (int64_t)v[3]},
                              .pad = {(int64_t)v[4], (int64_t)v[5]},
                              .ceil_mode = v[6] != 0.0f,
                              .count_include_pad = v[7] != 0.0f};
        nnt_unload(be, &f);
    }
    return p;
}

/* ---- golden ------------------------------------------------------------------------------ */

static const char *const CASES[] = {
    "max_stem",       "max_ceil",       "max_ceil_pad",   "max_tie",         "max_tie_flat",
    "avg_incl",       "avg_excl",       "avg_ceil_incl",  "avg_ceil_excl",   "avg_ceil_nopad",
    "avg_vissl_res4", "avg_vissl_res5", "avg_vissl_conv1", "aavg2_7x7",      "aavg1_7x7",
    "amax3_7x7",      "aavg2_10x7",     "aavg1_10x7",     "amax3_10x7",      "amax3_tie",
};

/* Forward and backward of one case against PyTorch; the backward starts from ones and runs
 * twice, so dx must come out as 1 + 2·(PyTorch's dx): accumulation checked on every case. */
static void check_case(const char *kase)
{
    eng_backend *be = nnt_open_cpu();
    pool p = pool_of_case(be, kase);
    nnt_fixture x = pool_load(be, kase, "x"), y = pool_load(be, kase, "y"), dy = pool_load(be, kase, "dy"), dx = pool_load(be, kase, "dx");
    eng_tensor out = nnt_zeros_like(be, &y.t), grad = nnt_zeros_like(be, &x.t);
    pool_forward(be, &p, &x.t, &out);
    double fwd = nnt_rel_error(be, &out, &y);
    pool_backward(be, &p, &x.t, &dy.t, &grad);
    double bwd = nnt_rel_error(be, &grad, &dx);
    float *ones = xmalloc(x.a.count * sizeof *ones);
    for (size_t i = 0; i < x.a.count; i++)
        ones[i] = 1.0f;
    eng_upload(be, &grad, ones);
    pool_backward(be, &p, &x.t, &dy.t, &grad);
    pool_backward(be, &p, &x.t, &dy.t, &grad);
    double acc = rel_error_affine(be, &grad, &dx, 2.0f, 1.0f);
    cr_log_info("pool %-16s forward %.3g  dx %.3g  accumulated dx %.3g", kase, fwd, bwd, acc);
    cr_expect_leq(fwd, FWD_TOL, "%s forward: %g", kase, fwd);
    cr_expect_leq(bwd, GRAD_TOL, "%s dx: %g", kase, bwd);
    cr_expect_leq(acc, GRAD_TOL, "%s accumulated dx: %g", kase, acc);
    free(ones);
    eng_tensor_free(be, &out);
    eng_tensor_free(be, &grad);
    nnt_fixture *all[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        nnt_unload(be, all[i]);
    eng_backend_close(be);
}

Test(nn_pool, every_case_matches_torch)
{
    for (size_t i = 0; i < ARRAY_LEN(CASES); i++)
        check_case(CASES[i]);
}

/* ---- finite differences ---------------------------------------------------------------------- */

/* Values 0.1·perm(0..n−1) − n/20: all distinct and 0.1 apart, so max pools stay smooth
 * under the ±h steps below. */
static void fill_distinct(float *p, int64_t n, unsigned seed)
{
    srand(seed);
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = rand() % (i + 1);
        float t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = 0.1f * p[i] - 0.05f * (float)n;
}

/* The analytic dx of pool p on an x of shape xs (output shape ys) against central
 * differences of L = Σ y·r, every element. */
static void check_fd(const pool *p, eng_shape xs, eng_shape ys, const char *what)
{
    eng_backend *be = nnt_open_cpu();
    int64_t n = eng_numel(&xs), m = eng_numel(&ys);
    float *hx = xmalloc((size_t)n * sizeof *hx), *r = xmalloc((size_t)m * sizeof *r);
    float *g = xmalloc((size_t)n * sizeof *g);
    if (p->kind == MAX || p->kind == AMAX)
        fill_distinct(hx, n, 11);
    else
        nnt_fill_normal(hx, n, 11);
    nnt_fill_normal(r, m, 12);
    eng_tensor x = eng_tensor_new(be, xs), y = eng_tensor_new(be, ys), dy = eng_tensor_new(be, ys);
    eng_tensor dx = nnt_zeros_like(be, &x);
    eng_upload(be, &x, hx);
    eng_upload(be, &dy, r);
    pool_backward(be, p, &x, &dy, &dx);
    eng_download(be, &dx, g);
    const float h = 1e-2f;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float keep = hx[i];
        hx[i] = keep + h;
        eng_upload(be, &x, hx);
        pool_forward(be, p, &x, &y);
        double up = nnt_loss(be, &y, r);
        hx[i] = keep - h;
        eng_upload(be, &x, hx);
        pool_forward(be, p, &x, &y);
        double down = nnt_loss(be, &y, r);
        hx[i] = keep;
        double fd = (up - down) / (2.0 * h);
        worst = fmax(worst, fabs(fd - g[i]) / fmax(1.0, fabs(fd)));
    }
    cr_log_info("pool fd %-24s %.3g", what, worst);
    cr_expect_leq(worst, 2e-3, "%s: finite differences disagree by %g", what, worst);
    eng_tensor *all[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    free(hx), free(r), free(g);
    eng_backend_close(be);
}

static pool fixed_pool(pool_kind kind, int64_t k, int64_t s, int64_t pad, bool ceil_mode, bool include_pad)
{
    return (pool){.kind = kind,
                  .d = {.kernel = {k, k}, .stride = {s, s}, .pad = {pad, pad}, .ceil_mode = ceil_mode,
                        .count_include_pad = include_pad}};
}

/* Output shape of a fixed pool on xs. */
static eng_shape out_of(const pool *p, eng_shape xs) { return eng_pool_output_shape(&xs, &p->d); }

Test(nn_pool, avgpool_gradients_match_finite_differences)
{
    eng_shape xs = eng_shape4(2, 2, 9, 8);
    pool a = fixed_pool(AVG, 3, 2, 1, false, true), b = fixed_pool(AVG, 3, 2, 1, true, false),
         c = fixed_pool(AVG, 3, 2, 1, true, true);
    check_fd(&a, xs, out_of(&a, xs), "avg 3/2/1 include pad");
    check_fd(&b, xs, out_of(&b, xs), "avg 3/2/1 ceil exclude pad");
    check_fd(&c, xs, out_of(&c, xs), "avg 3/2/1 ceil include pad");
}

Test(nn_pool, adaptive_avgpool_gradient_matches_finite_differences)
{
    pool p = {.kind = AAVG};
    check_fd(&p, eng_shape4(2, 2, 10, 7), eng_shape4(2, 2, 3, 3), "adaptive avg 10x7 -> 3x3");
    check_fd(&p, eng_shape4(1, 2, 7, 7), eng_shape4(1, 2, 2, 2), "adaptive avg 7x7 -> 2x2");
}

Test(nn_pool, maxpool_gradients_match_finite_differences)
{
    eng_shape xs = eng_shape4(2, 2, 9, 8);
    pool a = fixed_pool(MAX, 3, 2, 1, false, true), b = fixed_pool(MAX, 3, 2, 0, true, true);
    check_fd(&a, xs, out_of(&a, xs), "max 3/2/1");
    check_fd(&b, xs, out_of(&b, xs), "max 3/2/0 ceil");
    pool c = {.kind = AMAX};
    check_fd(&c, eng_shape4(2, 2, 10, 7), eng_shape4(2, 2, 3, 3), "adaptive max 10x7 -> 3x3");
}

/* ---- NaN, -inf and shapes ------------------------------------------------------------------- */

/* One row of four through a 1-row pool: returns y (up to 5 values) and dx for dy = 1. */
static void run_row(const pool *p, const float x4[4], int64_t ow, float *y, float dx[4])
{
    eng_backend *be = nnt_open_cpu();
    eng_tensor x = eng_tensor_new(be, eng_shape4(1, 1, 1, 4)), out = eng_tensor_new(be, eng_shape4(1, 1, 1, ow));
    eng_tensor dy = eng_tensor_new(be, out.shape), gx = nnt_zeros_like(be, &x);
    float ones[5] = {1, 1, 1, 1, 1};
    eng_upload(be, &x, x4);
    eng_upload(be, &dy, ones);
    pool_forward(be, p, &x, &out);
    pool_backward(be, p, &x, &dy, &gx);
    eng_download(be, &out, y);
    eng_download(be, &gx, dx);
    eng_tensor *all[] = {&x, &out, &dy, &gx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    eng_backend_close(be);
}

Test(nn_pool, nan_propagates_and_its_last_occurrence_takes_the_gradient)
{
    /* PyTorch: y = NaN, dx = [0, 0, 0, 1] for both MaxPool2d((1, 4)) and AdaptiveMaxPool2d(1). */
    const float x[4] = {1.0f, NAN, 2.0f, NAN};
    pool fixed = {.kind = MAX, .d = {.kernel = {1, 4}, .stride = {1, 1}}}, adaptive = {.kind = AMAX};
    const pool *both[] = {&fixed, &adaptive};
    for (size_t k = 0; k < ARRAY_LEN(both); k++) {
        float y[1], dx[4];
        run_row(both[k], x, 1, y, dx);
        cr_expect(isnan(y[0]), "pool %zu: y = %g", k, (double)y[0]);
        for (int i = 0; i < 4; i++)
            cr_expect_eq(dx[i], i == 3 ? 1.0f : 0.0f, "pool %zu: dx[%d] = %g", k, i, (double)dx[i]);
    }
}

Test(nn_pool, all_minus_infinity_windows_send_the_gradient_to_their_first_element)
{
    /* PyTorch: MaxPool2d((1, 2), 1, padding (0, 1)) on four -inf gives five -inf and
     * dx = [2, 1, 1, 1] (the padded first window's first real element is index 0). */
    const float x[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    pool p = {.kind = MAX, .d = {.kernel = {1, 2}, .stride = {1, 1}, .pad = {0, 1}}};
    float y[5], dx[4];
    run_row(&p, x, 5, y, dx);
    const float want[4] = {2, 1, 1, 1};
    for (int i = 0; i < 5; i++)
        cr_expect(isinf(y[i]) && y[i] < 0, "y[%d] = %g", i, (double)y[i]);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(dx[i], want[i], "dx[%d] = %g", i, (double)dx[i]);
}

Test(nn_pool, output_shapes_match_torch_including_ceil_mode)
{
    char *path = test_fixture("nn", "pool_shapes_table.npy");
    npy_array t;
    char *err = NULL;
    cr_assert_eq(npy_read(path, &t, &err), 0, "%s", err);
    cr_assert_eq(t.ndim, 2);
    cr_assert_eq(t.shape[1], 6);
    const float *row = t.data;
    for (size_t i = 0; i < t.shape[0]; i++, row += 6) {
        int64_t in = (int64_t)row[0], k = (int64_t)row[1], s = (int64_t)row[2], pad = (int64_t)row[3];
        bool ceil_mode = row[4] != 0.0f;
        int64_t want = (int64_t)row[5];
        eng_pool_desc d = {.kernel = {k, 1}, .stride = {s, 1}, .pad = {pad, 0}, .ceil_mode = ceil_mode};
        eng_shape xs = eng_shape4(2, 3, in, 5), ys = eng_pool_output_shape(&xs, &d);
        cr_expect(ys.ndim == 4 && ys.dim[0] == 2 && ys.dim[1] == 3 && ys.dim[3] == 5 && ys.dim[2] == want,
                  "in %lld k %lld s %lld pad %lld ceil %d: got %lld, PyTorch %lld", (long long)in, (long long)k,
                  (long long)s, (long long)pad, ceil_mode, (long long)ys.dim[2], (long long)want);
    }
    cr_expect_gt(t.shape[0], 100);
    npy_close(&t);
    free(path);
    /* stride 0 means stride = kernel, as PyTorch's default */
    eng_pool_desc dflt = {.kernel = {6, 3}}, expl = {.kernel = {6, 3}, .stride = {6, 3}};
    eng_shape xs = eng_shape4(1, 1, 13, 10);
    eng_shape a = eng_pool_output_shape(&xs, &dflt), b = eng_pool_output_shape(&xs, &expl);
    cr_expect(eng_shape_equal(&a, &b) && a.dim[2] == 2 && a.dim[3] == 3);
}

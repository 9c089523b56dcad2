/*
 * backend_ops.c — the backend conformance test: every operation of the model engine (nn.h),
 * forward and backward, run on the backend under test ("cuda") and on the "cpu" backend, on
 * the same random inputs, with the results compared (after ggml's test-backend-ops).
 *
 * How it works. CASES (at the bottom) is a table of {op, function, tolerance, parameters}.
 * A case's function is written once against nn.h and runs twice, once per backend. Its
 * inputs come from the counter-based generator (rng.h, RNG_PURPOSE_TEST, keyed by the case's
 * number and the input's), drawn on the first run and kept for the second, so both backends
 * get the same bits; every result it declares (forward outputs, accumulated gradients,
 * running statistics, saved statistics, loss values) is downloaded, and the two runs'
 * results are compared element by element. One line per case:
 *     ok   <op> <shape> max_rel=<x>
 *     FAIL <op> <shape> max_rel=<x> at <result>[<index>] gpu=<v> cpu=<v>
 * then "backend-ops: N passed, M failed"; the exit status is 1 when any failed. gpu= is the
 * backend under test, cpu= the reference.
 *
 * What else a case checks on the way:
 *   - outputs start as NaN, so an element a forward forgets to write shows;
 *   - gradients start with random content, so a backward that overwrites instead of
 *     accumulating shows, and the losses' gradients (which are written, not added, except
 *     soft_cross_entropy's) start the same way, so one that adds shows;
 *   - dropout's zero pattern must be the cpu's exactly: both draw the same Philox mask;
 *   - a backward's inputs are uploaded, not taken from each backend's forward: a ReLU mask
 *     or a max pool's argmax must not flip between backends on float noise. Batch and layer
 *     norm's saved statistics are worked on the host, in double, from x.
 *
 * Metric, per result r (cpu) and g (tested), the worst element of
 *     |g − r| / (|r| + mean |r|)
 * relative to the element, with the result's mean magnitude as the floor for elements near
 * zero (where a sum with cancellation leaves only rounding). NaN matches only NaN, an
 * infinity only itself. A loss value is a one-element result.
 *
 * Tolerances (the TOL_* each case names):
 *   op                                               tol    why
 *   relu, add, add_relu, l2norm, dropout,            1e-5   elementwise, or sums short or
 *   sigmoid, silu (expf within 2 ulp on either),            taken in double: float rounding
 *   channel_scale (ds summed in double),                    of a few operations
 *   lrn (fwd, bwd: ≤ size squares and a power each,
 *   in oneDNN's order on the cpu, PyTorch's on cuda),
 *   sgd_step_many, adam_step_many, sum_squares(_many),
 *   info_nce, cross_entropy, bce_logits,
 *   soft_cross_entropy, maxpool, avgpool, adaptive
 *   pools, and batch norm / layer norm on the small
 *   shapes (every variant); linear with a small
 *   reduction (≤ 7)
 *   dropout's zero pattern                           exact  the same counter-based mask
 *   ema                                              exact  two float products and a sum
 *   scale                                            exact  one float product
 *   argmax_rows                                      exact  the same comparisons of floats
 *   bank_scores (fwd, bwd)                           1e-5   dot products summed in double
 *   upload_images                                    exact  the same table of 256 values
 *   conv (fwd, bwd), conv_bn_forward_eval,           1e-4   fp32 dot products of up to 25088
 *   linear with a large reduction (2048, or N = 64)         terms summed in another order
 *                                                           (cuDNN / cuBLAS algorithms)
 *   conv_bwd at 8×64×56×56, 3×3 (TOL_WGRAD)          2e-4   dW's elements are sums of 25088
 *                                                           products (N·H·W) that cancel down
 *                                                           to a tenth of their terms: their
 *                                                           rounding measured 1.2e-4 on an H200
 *                                                           (cuDNN's fp32 FMA algorithms)
 *   batch norm, layer norm and the global average    1e-4   fp32 sums of 3136 to 200704 terms
 *   pool on the ResNet shape 8×64×56×56 (TOL_SUM)           (statistics, dγ, dβ) in a GPU's
 *                                                           reduction order; the small shapes
 *                                                           hold the formulas to 1e-5
 *   conv and conv_bn_forward_eval in mixed           3e-2   x and w rounded to bf16 (2^-9 of
 *   precision (F_BF16: the tested backend opened            each), the result too: a dot
 *   with ENG_BF16, against the cpu's fp32)                  product of random signs keeps about
 *   (TOL_BF16)                                              2^-8 of its typical term, and the
 *                                                           worst of 10^5 elements a few times it
 *   every op a trunk keeps native, on NATIVE         3e-2   its bf16 results (and accumulated
 *   tensors in mixed precision (F_NATIVE | F_BF16:          gradients) rounded once, 2^-9 of
 *   bf16 N×H×W×C on cuda; relu, add, batch norm,            each; the inputs of an F_BF16 case
 *   pools, channel_scale, conv) (TOL_BF16)                  are bf16 values on both backends
 *   sinkhorn                                         1e-4   exp(x/ε) magnifies rounding by 1/ε,
 *                                                           and the iterations compound it;
 *                                                           hard codes are one-hot rows, so a
 *                                                           different argmax is an error of 1
 * TF32 is not fp32: a backend that lets cuDNN or cuBLAS use it fails the 1e-4 cases.
 *
 * Crashes. The test must report a wrong op, not die of it: the cases run in a child process
 * that opens both backends and reports each case over a pipe. When the child dies inside a
 * case (an abort, a bad address, a CUDA error that poisons the context, no result within
 * case_timeout_s()), the parent reports that case as FAIL ... crashed and starts a fresh child
 * at the next case. An op that crashes twice has its other cases reported as not run, and
 * after RESTART_BUDGET_S of wall time no new child is started, so a run stays short.
 *
 * Usage: backend-ops [--summary FILE] [--only TEXT]
 *   --summary FILE  also write the summary, the time and the per-case lines to FILE
 *   --only TEXT     run only the cases whose op name contains TEXT
 * Environment: SELFSUP_BACKEND_OPS_PEER=NAME tests backend NAME instead of "cuda"; with
 * "cpu" the cpu is compared with a second cpu backend, which checks the test itself (each
 * case should give max_rel=0) on a machine without a GPU: the mixed-precision cases then run
 * on the second cpu in fp32 (the cpu has no bf16), so every case's inputs, layouts and calls
 * are exercised where no GPU is. `make unit` runs it so.
 * Without a GPU, or in a build without CUDA, it prints "backend-ops: skipped: <why>" and
 * exits 0.
 */
#include "log.h"
#include "nn.h"
#include "rng.h"
#include "util.h"

#include <math.h>
#include <signal.h>
#include <stdnoreturn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOL_FP32 1e-5
#define TOL_GEMM 1e-4
#define TOL_ITER 1e-4
#define TOL_SUM 1e-4
#define TOL_WGRAD 2e-4
#define TOL_BF16 3e-2

static const uint64_t SEED = 0x5e1f5a9ULL; /* the backends' dropout seed and the inputs' */
/* A case that hangs longer is reported as crashed: 10 s on a GPU, where a case takes well under
 * a second; cpu against cpu runs both sides of the largest cases on the cpu (4 s for the
 * k-means argmax under ASan on 2 busy cores here), so there a minute. */
enum { CASE_TIMEOUT_S = 10, CPU_CASE_TIMEOUT_S = 60 };
static const double RESTART_BUDGET_S = 45.0;

enum { MAX_INPUTS = 40, MAX_OWNED = 40, MAX_RESULTS = 24, MAX_PLANS = 2, LINE_MAX_LEN = 512 };

/* ---- cases: parameters -------------------------------------------------------------------- */

enum {
    F_BIAS = 1 << 0,      /* conv / linear with a bias */
    F_NODX = 1 << 1,      /* the input's gradient is NULL (not needed) */
    F_NODB = 1 << 2,      /* the other gradients are NULL: add's db, conv's db, a norm's dγ and dβ,
                             channel_scale's ds */
    F_RELU = 1 << 3,      /* the fused ReLU variant */
    F_RESID = 1 << 4,     /* conv_bn_forward_eval with a residual */
    F_NATIVE = 1 << 5,    /* activations (x, residual, y) in the backend's native layout */
    F_NATIVE_X = 1 << 6,  /* only the input native */
    F_CEIL = 1 << 7,      /* pools' ceil_mode */
    F_EXCL_PAD = 1 << 8,  /* avgpool's count_include_pad false */
    F_TIES = 1 << 9,      /* inputs quantised, so pool windows hold equal maxima */
    F_NOAFFINE = 1 << 10, /* γ and β NULL */
    F_NOSAVE = 1 << 11,   /* layer norm keeps no statistics */
    F_HARD = 1 << 12,     /* sinkhorn's one-hot codes */
    F_QUEUE = 1 << 13,    /* sinkhorn with a queue of o rows */
    F_WEIGHT = 1 << 14,   /* cross_entropy's class weights */
    F_ZERO = 1 << 15,     /* the op's degenerate corner: a zero row, a dead column, all ignored */
    F_BF16 = 1 << 16,     /* on the tested backend opened for mixed precision (ENG_BF16) */
    F_SYNCED = 1 << 17,   /* SyncBN: batch norm over a group of three ranks that hold this batch */
    F_SILU = 1 << 18,     /* conv_bn_forward_eval's fused SiLU */
    F_NATIVE_Y = 1 << 19, /* only the output native (a trunk's stem reading the logical images) */
};

static const struct {
    unsigned flag;
    const char *word;
} FLAG_WORDS[] = {
    {F_BIAS, "bias"},          {F_NODX, "dx=NULL"},        {F_NODB, "db=NULL"},     {F_RELU, "relu"},
    {F_RESID, "residual"},     {F_NATIVE, "native"},       {F_NATIVE_X, "native_x"}, {F_CEIL, "ceil"},
    {F_EXCL_PAD, "exclude_pad"}, {F_TIES, "ties"},         {F_NOAFFINE, "no_affine"}, {F_NOSAVE, "no_save"},
    {F_HARD, "hard"},          {F_WEIGHT, "weight"},       {F_ZERO, "zero"},        {F_BF16, "bf16"},
    {F_SILU, "silu"},          {F_NATIVE_Y, "native_y"},
    /* F_QUEUE: "queue<rows>" */
};

typedef struct {
    int64_t n, c, h, w; /* the input, N×C×H×W; N×C when h is 0 */
    int64_t o;          /* conv's and linear's outputs; sinkhorn's queue rows */
    int64_t kh, kw;     /* conv's kernel, a pool's window */
    int64_t stride, pad, dil, groups;
    int64_t extra[2];   /* conv's pad_extra: zero rows below, columns right (TensorFlow's "same") */
    int64_t oh, ow;     /* an adaptive pool's output plane */
    int64_t step;       /* dropout's step; sinkhorn's iterations */
    int variant;        /* an op's numbered variant (optimizer settings, masks, ignore_index) */
    double f, g;        /* an op's scalars: dropout's p, a loss's scale, sinkhorn's ε; soft CE's g */
    unsigned flags;
    const char *note;   /* appended to the shape in the case's line */
} params;

typedef struct ctx ctx;

typedef struct {
    const char *op;
    void (*run)(ctx *c);
    double tol;
    params p;
} test_case;

/* ---- one run of a case on one backend --------------------------------------------------------- */

/* A case's host inputs: made on its first run, the same bytes on its second. */
typedef struct {
    void *data[MAX_INPUTS];
    size_t bytes[MAX_INPUTS];
} input_cache;

typedef struct {
    char name[24];
    eng_shape shape; /* ndim 0: a scalar, in `value` */
    float *v;        /* the values in logical order */
    double value;
    bool exact_zeros; /* which elements are zero must match exactly */
} result;

struct ctx {
    eng_backend *be;
    const params *p;
    int case_no;
    input_cache *cache;
    int ninputs;
    eng_tensor owned[MAX_OWNED];
    int nowned;
    eng_plan *plans[MAX_PLANS];
    int nplans;
    result res[MAX_RESULTS];
    int nres;
};

static bool has(const ctx *c, unsigned flag) { return (c->p->flags & flag) != 0; }

static eng_layout layout_if(const ctx *c, unsigned flags)
{
    return has(c, flags) ? ENG_LAYOUT_NATIVE : ENG_LAYOUT_LOGICAL;
}

static eng_shape act_shape(const params *p)
{
    return p->h ? eng_shape4(p->n, p->c, p->h, p->w) : eng_shape2(p->n, p->c);
}

static eng_shape vec(int64_t n) { return (eng_shape){.ndim = 1, .dim = {n}}; }

/* The case's next host input buffer and a stream of its own to fill it from; *fresh when
 * this is the first run (fill it), else it holds the first run's bytes (leave them). */
static void *host_slot(ctx *c, size_t bytes, rng_stream *rs, bool *fresh)
{
    if (c->ninputs >= MAX_INPUTS)
        die(EXIT_RUNTIME, "backend-ops: a case with more than %d inputs", MAX_INPUTS);
    int k = c->ninputs++;
    rng_stream_init(rs, (rng_key){.seed = SEED, .purpose = RNG_PURPOSE_TEST, .epoch = (uint32_t)c->case_no,
                                  .sample_index = (uint64_t)k});
    *fresh = c->cache->data[k] == NULL;
    if (*fresh) {
        c->cache->data[k] = xmalloc(bytes ? bytes : 1);
        c->cache->bytes[k] = bytes;
    } else if (c->cache->bytes[k] != bytes) {
        die(EXIT_RUNTIME, "backend-ops: a case asked for different inputs on its two runs");
    }
    return c->cache->data[k];
}

static float *host_floats(ctx *c, int64_t n, rng_stream *rs, bool *fresh)
{
    return host_slot(c, (size_t)n * sizeof(float), rs, fresh);
}

/* A touch-up of freshly drawn values (a zero row, ties, ...) before they are uploaded. */
typedef void (*edit_fn)(float *h, const eng_shape *s);

/* Uniform in [lo, hi] from one 32-bit word (24 bits): half of rng_uniform_float's draws,
 * which matters for the millions of values a ResNet-sized case needs. */
static float uniform24(rng_stream *rs, float lo, float hi)
{
    return lo + (hi - lo) * ((float)(rng_u32(rs) >> 8) * 0x1p-24f);
}

/* Uniform values in [lo, hi], then `edit` (may be NULL). */
static const float *host_uniform(ctx *c, eng_shape s, float lo, float hi, edit_fn edit)
{
    int64_t n = eng_numel(&s);
    rng_stream rs;
    bool fresh;
    float *h = host_floats(c, n, &rs, &fresh);
    if (fresh) {
        for (int64_t i = 0; i < n; i++)
            h[i] = uniform24(&rs, lo, hi);
        if (edit)
            edit(h, &s);
    }
    return h;
}

/* v rounded to the nearest bf16 (ties to even), as a float. */
static float bf16_rounded(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) /* infinities and NaN stay */
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A tensor of the case's, freed with it, holding `host`. In a mixed-precision case every
 * input is a bf16 value on both backends, so the comparison sees the op's own rounding (its
 * bf16 results), not the inputs' (a max pool's ties must be the same ties on both). */
static eng_tensor *upload(ctx *c, eng_shape s, eng_layout layout, const float *host)
{
    if (c->nowned >= MAX_OWNED)
        die(EXIT_RUNTIME, "backend-ops: a case with more than %d tensors", MAX_OWNED);
    eng_tensor *t = &c->owned[c->nowned++];
    *t = eng_tensor_new(c->be, s);
    t->layout = layout;
    if (!has(c, F_BF16)) {
        eng_upload(c->be, t, host);
        return t;
    }
    int64_t n = eng_numel(&s);
    float *rounded = xmalloc((size_t)(n ? n : 1) * sizeof *rounded);
    for (int64_t i = 0; i < n; i++)
        rounded[i] = bf16_rounded(host[i]);
    eng_upload(c->be, t, rounded);
    free(rounded);
    return t;
}

static eng_tensor *input_as(ctx *c, eng_shape s, eng_layout layout, float lo, float hi, edit_fn edit)
{
    return upload(c, s, layout, host_uniform(c, s, lo, hi, edit));
}

static eng_tensor *input(ctx *c, eng_shape s, float lo, float hi)
{
    return input_as(c, s, ENG_LAYOUT_LOGICAL, lo, hi, NULL);
}

static eng_tensor *input_edit(ctx *c, eng_shape s, float lo, float hi, edit_fn edit)
{
    return input_as(c, s, ENG_LAYOUT_LOGICAL, lo, hi, edit);
}

/* A gradient to accumulate into, with random content of about the size the backward adds. */
static eng_tensor *grad(ctx *c, eng_shape s, float scale) { return input(c, s, -scale, scale); }

/* An output, all NaN until the op writes it. */
static eng_tensor *output_as(ctx *c, eng_shape s, eng_layout layout)
{
    int64_t n = eng_numel(&s);
    float *nan_fill = xmalloc((size_t)n * sizeof *nan_fill);
    for (int64_t i = 0; i < n; i++)
        nan_fill[i] = NAN;
    eng_tensor *t = upload(c, s, layout, nan_fill);
    free(nan_fill);
    return t;
}

static eng_tensor *output(ctx *c, eng_shape s) { return output_as(c, s, ENG_LAYOUT_LOGICAL); }

static eng_plan *conv_plan(ctx *c, const eng_conv_desc *d, const eng_shape *xs, const eng_shape *ws, bool bias)
{
    if (c->nplans >= MAX_PLANS)
        die(EXIT_RUNTIME, "backend-ops: a case with more than %d plans", MAX_PLANS);
    return c->plans[c->nplans++] = eng_conv_plan(c->be, d, xs, ws, bias);
}

static result *new_result(ctx *c, const char *name, eng_shape s)
{
    if (c->nres >= MAX_RESULTS)
        die(EXIT_RUNTIME, "backend-ops: a case with more than %d results", MAX_RESULTS);
    result *r = &c->res[c->nres++];
    *r = (result){.shape = s};
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

/* Declares t (skipped when NULL) a result: its values are compared between the backends. */
static void check(ctx *c, const char *name, const eng_tensor *t)
{
    if (!t)
        return;
    result *r = new_result(c, name, t->shape);
    r->v = xmalloc((size_t)eng_numel(&t->shape) * sizeof *r->v);
    eng_download(c->be, t, r->v);
}

static void check_zeros_exact(ctx *c, const char *name, const eng_tensor *t)
{
    check(c, name, t);
    c->res[c->nres - 1].exact_zeros = true;
}

static void check_value(ctx *c, const char *name, double v) { new_result(c, name, (eng_shape){0})->value = v; }

static void ctx_free(ctx *c)
{
    for (int i = 0; i < c->nplans; i++)
        eng_plan_free(c->be, c->plans[i]);
    for (int i = 0; i < c->nowned; i++)
        eng_tensor_free(c->be, &c->owned[i]);
    for (int i = 0; i < c->nres; i++)
        free(c->res[i].v);
}

/* ---- input edits --------------------------------------------------------------------------- */

/* What a ReLU leaves: a backward reads [y > 0], and on real outputs [y != 0] says the same. */
static void edit_relu(float *h, const eng_shape *s)
{
    for (int64_t i = 0; i < eng_numel(s); i++)
        h[i] = h[i] > 0.0f ? h[i] : 0.0f;
}

/* Five levels only, so most pool windows hold several equal maxima: the first in scan order
 * must win, as in PyTorch. */
static void edit_ties(float *h, const eng_shape *s)
{
    for (int64_t i = 0; i < eng_numel(s); i++)
        h[i] = roundf(h[i] * 2.0f) / 2.0f;
}

/* Row 0 all zero: l2norm's ‖x‖ < eps branch. */
static void edit_zero_row(float *h, const eng_shape *s) { memset(h, 0, (size_t)s->dim[1] * sizeof *h); }

/* Column 0 far below the rest: exp underflows to 0 in float and double alike, so sinkhorn's
 * dead-prototype guard (1e-12 added everywhere) runs. */
static void edit_dead_column(float *h, const eng_shape *s)
{
    for (int64_t r = 0; r < s->dim[0]; r++)
        h[r * s->dim[1]] = -50.0f;
}

/* Rows summing to 1, as codes do. */
static void edit_rows_to_one(float *h, const eng_shape *s)
{
    for (int64_t r = 0; r < s->dim[0]; r++) {
        float *row = h + r * s->dim[1];
        double sum = 0.0;
        for (int64_t j = 0; j < s->dim[1]; j++)
            sum += row[j];
        for (int64_t j = 0; j < s->dim[1]; j++)
            row[j] = (float)(row[j] / sum);
    }
}

/* ---- elementwise ------------------------------------------------------------------------------ */

/* F_NATIVE (here and in every op a trunk keeps native): the activations native. */
static void relu_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *x = input_as(c, s, l, -1, 1, NULL), *y = output_as(c, s, l);
    eng_relu_forward(c->be, x, y);
    check(c, "y", y);
}

static void relu_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *y = input_as(c, s, l, -1, 1, edit_relu), *dy = input_as(c, s, l, -1, 1, NULL),
               *dx = input_as(c, s, l, -1, 1, NULL);
    eng_relu_backward(c->be, y, dy, dx);
    check(c, "dx", dx);
}

/* ±30 and ±100 among the first elements: e^{−x} near float's top and past it (inf), where
 * sigmoid and SiLU must give 0 or x on both backends, never NaN. */
static void edit_extremes(float *h, const eng_shape *s)
{
    static const float EXTREMES[] = {30.0f, -30.0f, 100.0f, -100.0f};
    for (int64_t i = 0; i < eng_numel(s) && i < (int64_t)ARRAY_LEN(EXTREMES); i++)
        h[i] = EXTREMES[i];
}

static void sigmoid_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *x = input_edit(c, s, -8, 8, edit_extremes), *y = output(c, s);
    eng_sigmoid_forward(c->be, x, y);
    check(c, "y", y);
}

/* from y, a sigmoid's output in (0, 1); dy·(1 − y)·y is at most dy/4 */
static void sigmoid_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *y = input(c, s, 0, 1), *dy = input(c, s, -1, 1), *dx = grad(c, s, 0.25f);
    eng_sigmoid_backward(c->be, y, dy, dx);
    check(c, "dx", dx);
}

static void silu_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *x = input_edit(c, s, -8, 8, edit_extremes), *y = output(c, s);
    eng_silu_forward(c->be, x, y);
    check(c, "y", y);
}

static void silu_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *x = input_edit(c, s, -8, 8, edit_extremes), *dy = input(c, s, -1, 1), *dx = grad(c, s, 1);
    eng_silu_backward(c->be, x, dy, dx);
    check(c, "dx", dx);
}

/* Squeeze-and-excitation's scale: N×C×1×1, or N×C with variant 1; in (0, 1), a sigmoid's. */
static eng_shape channel_scale_shape(const params *p)
{
    return p->variant == 1 ? eng_shape2(p->n, p->c) : eng_shape4(p->n, p->c, 1, 1);
}

static void channel_scale_fwd(ctx *c)
{
    eng_shape xs = act_shape(c->p), ss = channel_scale_shape(c->p);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *x = input_as(c, xs, l, -1, 1, NULL), *sc = input(c, ss, 0, 1), *y = output_as(c, xs, l);
    eng_channel_scale_forward(c->be, x, sc, y);
    check(c, "y", y);
}

/* F_NODX: dx NULL; F_NODB: ds NULL. ds[n, c] sums H·W products of two uniform(−1, 1) values,
 * about √(H·W / 9) in size. */
static void channel_scale_bwd(ctx *c)
{
    eng_shape xs = act_shape(c->p), ss = channel_scale_shape(c->p);
    float sum = sqrtf((float)(c->p->h * c->p->w) / 9.0f);
    eng_tensor *x = input(c, xs, -1, 1), *sc = input(c, ss, 0, 1), *dy = input(c, xs, -1, 1),
               *dx = has(c, F_NODX) ? NULL : grad(c, xs, 1), *ds = has(c, F_NODB) ? NULL : grad(c, ss, sum);
    eng_channel_scale_backward(c->be, x, sc, dy, dx, ds);
    check(c, "dx", dx);
    check(c, "ds", ds);
}

/* uint8 images (N×H×W×3) through the records' normalize rows: a table lookup on both sides,
 * so the floats must be equal bit for bit. Variant 1 takes BGR, variant 2 the first channel. */
static void upload_images(ctx *c)
{
    static const int MAPS[3][3] = {{0, 1, 2}, {2, 1, 0}, {0, 0, 0}};
    static const float NORM[9] = {255, 255, 255, 0.485f, 0.456f, 0.406f, 0.229f, 0.224f, 0.225f};
    const params *p = c->p;
    int64_t outc = p->variant == 2 ? 1 : 3, bytes = p->n * p->h * p->w * 3;
    rng_stream rs;
    bool fresh;
    uint8_t *px = host_slot(c, (size_t)bytes, &rs, &fresh);
    for (int64_t i = 0; fresh && i < bytes; i++)
        px[i] = (uint8_t)rng_u32(&rs);
    eng_tensor *x = output(c, eng_shape4(p->n, outc, p->h, p->w));
    eng_upload_images(c->be, x, px, 3, MAPS[p->variant], NORM);
    check(c, "x", x);
}

/* F_RELU: add_relu. */
static void add_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *a = input_as(c, s, l, -1, 1, NULL), *b = input_as(c, s, l, -1, 1, NULL), *y = output_as(c, s, l);
    if (has(c, F_RELU))
        eng_add_relu_forward(c->be, a, b, y);
    else
        eng_add_forward(c->be, a, b, y);
    check(c, "y", y);
}

static void add_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *y = has(c, F_RELU) ? input_as(c, s, l, -1, 1, edit_relu) : NULL, *dy = input_as(c, s, l, -1, 1, NULL),
               *da = has(c, F_NODX) ? NULL : input_as(c, s, l, -1, 1, NULL),
               *db = has(c, F_NODB) ? NULL : input_as(c, s, l, -1, 1, NULL);
    if (y)
        eng_add_relu_backward(c->be, y, dy, da, db);
    else
        eng_add_backward(c->be, dy, da, db);
    check(c, "da", da);
    check(c, "db", db);
}

static void l2norm_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *x = input_edit(c, s, -1, 1, has(c, F_ZERO) ? edit_zero_row : NULL), *y = output(c, s);
    eng_l2norm_forward(c->be, x, y);
    check(c, "y", y);
}

static void l2norm_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    float added = sqrtf(3.0f / (float)s.dim[1]); /* (dy − y(y·dy)) / ‖x‖ with ‖x‖ ≈ √(F/3) */
    eng_tensor *x = input_edit(c, s, -1, 1, has(c, F_ZERO) ? edit_zero_row : NULL), *dy = input(c, s, -1, 1),
               *dx = grad(c, s, added);
    eng_l2norm_backward(c->be, x, dy, dx);
    if (!has(c, F_ZERO)) {
        check(c, "dx", dx);
        return;
    }
    /* the zero row's dy/eps (~1e12) would hide the other rows' errors under its magnitude */
    eng_tensor zero_row = eng_rows(c->be, dx, 0, 1), rest = eng_rows(c->be, dx, 1, s.dim[0] - 1);
    check(c, "dx_row0", &zero_row);
    check(c, "dx_rows", &rest);
}

static void dropout_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *x = input(c, s, -1, 1), *y = output(c, s);
    eng_dropout_forward(c->be, (float)c->p->f, (uint64_t)c->p->step, x, y);
    check_zeros_exact(c, "y", y);
}

static void dropout_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *dy = input(c, s, -1, 1), *dx = grad(c, s, 1);
    eng_dropout_backward(c->be, (float)c->p->f, (uint64_t)c->p->step, dy, dx);
    check(c, "dx", dx);
}

static void sum_squares(ctx *c)
{
    eng_tensor *x = input(c, act_shape(c->p), -1, 1);
    check_value(c, "sum", eng_sum_squares(c->be, x));
}

/* LARC's batch of norms: tensors of many sizes (an empty one among them) in one call, each
 * sum against the cpu's. */
static void sum_squares_many(ctx *c)
{
    static const int64_t SIZES[] = {1, 0, 7, 4096, 123457, 64 * 3 * 7 * 7, 33};
    enum { K = (int)ARRAY_LEN(SIZES) };
    const eng_tensor *xs[K];
    for (int k = 0; k < K; k++)
        xs[k] = input(c, vec(SIZES[k]), -1, 1);
    double out[K];
    eng_sum_squares_many(c->be, xs, K, out);
    for (int k = 0; k < K; k++) {
        char name[16];
        snprintf(name, sizeof name, "sum%d", k);
        check_value(c, name, out[k]);
    }
}

static void linear_fwd(ctx *c)
{
    const params *p = c->p;
    float a = 1.0f / sqrtf((float)p->c); /* PyTorch's init scale: outputs near 1 */
    eng_tensor *x = input(c, eng_shape2(p->n, p->c), -1, 1), *w = input(c, eng_shape2(p->o, p->c), -a, a),
               *b = has(c, F_BIAS) ? input(c, vec(p->o), -1, 1) : NULL, *y = output(c, eng_shape2(p->n, p->o));
    eng_linear_forward(c->be, x, w, b, y);
    check(c, "y", y);
}

static void linear_bwd(ctx *c)
{
    const params *p = c->p;
    float a = 1.0f / sqrtf((float)p->c);
    eng_tensor *x = input(c, eng_shape2(p->n, p->c), -1, 1), *w = input(c, eng_shape2(p->o, p->c), -a, a),
               *dy = input(c, eng_shape2(p->n, p->o), -1, 1),
               *dx = has(c, F_NODX) ? NULL : grad(c, eng_shape2(p->n, p->c), 1),
               *dw = grad(c, eng_shape2(p->o, p->c), 1), *db = has(c, F_BIAS) ? grad(c, vec(p->o), 1) : NULL;
    eng_linear_backward(c->be, x, w, dy, dx, dw, db);
    check(c, "dx", dx);
    check(c, "dw", dw);
    check(c, "db", db);
}

/* ---- optimizers -------------------------------------------------------------------------------- */

/* Parameter tensors as a model has them: a one-element one, odd vectors and matrices, one
 * longer than the cpu's 32768-element chunk, a conv weight; all in one call. */
static const eng_shape OPT_SHAPES[] = {
    {.ndim = 1, .dim = {1}},          {.ndim = 1, .dim = {7}},     {.ndim = 2, .dim = {5, 3}},
    {.ndim = 4, .dim = {3, 5, 7, 9}}, {.ndim = 1, .dim = {40000}}, {.ndim = 4, .dim = {64, 64, 3, 3}},
};
enum { OPT_ITEMS = (int)ARRAY_LEN(OPT_SHAPES), OPT_MIXED = 100 };

/* SGD settings by number (the case's variant; OPT_MIXED gives item i setting i). Large
 * learning rates and weight decay, so a slip in either term moves p well past the tolerance. */
static eng_sgd_args sgd_args(int v)
{
    static const eng_sgd_args V[] = {
        {.lr = 0.5f, .weight_decay = 0.1f, .grad_scale = 1.0f},                                    /* plain */
        {.lr = 0.5f, .weight_decay = 0.1f, .momentum = 0.9f, .grad_scale = 1.0f, .first = true},   /* first */
        {.lr = 0.5f, .momentum = 0.9f, .grad_scale = 1.0f},                                        /* momentum */
        {.lr = 0.5f, .weight_decay = 0.1f, .momentum = 0.9f, .grad_scale = 1.0f, .nesterov = true}, /* nesterov */
        {.lr = 0.5f, .weight_decay = 0.1f, .momentum = 0.9f, .grad_scale = 1.0f, .nesterov = true, .first = true},
        {.lr = 4.8f, .weight_decay = 0.1f, .momentum = 0.9f, .grad_scale = 0.0372f}, /* LARC's local rate */
    };
    return V[v % (int)ARRAY_LEN(V)];
}

static void sgd_step(ctx *c)
{
    eng_sgd_item it[OPT_ITEMS];
    for (int i = 0; i < OPT_ITEMS; i++) {
        eng_sgd_args a = sgd_args(c->p->variant == OPT_MIXED ? i : c->p->variant);
        eng_shape s = OPT_SHAPES[i];
        /* a first step's buffer holds garbage: it must be written, not read */
        eng_tensor *p = input(c, s, -1, 1), *g = input(c, s, -1, 1),
                   *buf = a.momentum != 0.0f ? input(c, s, -1, 1) : NULL;
        it[i] = (eng_sgd_item){.a = a, .p = p, .g = g, .buf = buf};
    }
    eng_sgd_step_many(c->be, it, OPT_ITEMS);
    for (int i = 0; i < OPT_ITEMS; i++) {
        char name[24];
        snprintf(name, sizeof name, "p%d", i);
        check(c, name, it[i].p);
        snprintf(name, sizeof name, "buf%d", i);
        check(c, name, it[i].buf);
    }
}

/* NPID's scores: n rows of d against k bank rows each (of o), row numbers spread over the bank
 * with repeats. */
static int64_t *bank_rows(const params *p)
{
    int64_t *idx = xmalloc((size_t)(p->n * p->w) * sizeof *idx);
    for (int64_t i = 0; i < p->n * p->w; i++)
        idx[i] = (i * 7919 + 13) % p->o;
    return idx;
}

static void bank_fwd(ctx *c)
{
    const params *p = c->p;
    int64_t *idx = bank_rows(p);
    eng_tensor *bank = input(c, eng_shape2(p->o, p->c), -1, 1), *x = input(c, eng_shape2(p->n, p->c), -1, 1),
               *y = output(c, eng_shape2(p->n, p->w));
    eng_bank_scores_forward(c->be, bank, idx, x, y);
    check(c, "y", y);
    free(idx);
}

static void bank_bwd(ctx *c)
{
    const params *p = c->p;
    int64_t *idx = bank_rows(p);
    eng_tensor *bank = input(c, eng_shape2(p->o, p->c), -1, 1), *dy = input(c, eng_shape2(p->n, p->w), -1, 1),
               *dx = grad(c, eng_shape2(p->n, p->c), 1);
    eng_bank_scores_backward(c->be, bank, idx, dy, dx);
    check(c, "dx", dx);
    free(idx);
}

/* A momentum encoder's update: both backends round the two products and the sum alike. */
static void ema(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *src = input(c, s, -1, 1), *dst = input(c, s, -1, 1);
    eng_ema(c->be, c->p->f, src, dst);
    check(c, "dst", dst);
}

/* A gradient's scale: one float product per element on both backends. */
static void scale(ctx *c)
{
    eng_tensor *x = input(c, act_shape(c->p), -1, 1);
    eng_scale(c->be, (float)c->p->f, x);
    check(c, "x", x);
}

/* k-means' E-step: each row's largest column, as a result of one float per row (indices are
 * small, so the float is exact). Rows that tie (F_ZERO: row 0 all equal) take the first. */
static void argmax_rows(ctx *c)
{
    eng_shape s = eng_shape2(c->p->n, c->p->c);
    eng_tensor *x = input(c, s, -1, 1);
    if (has(c, F_ZERO))
        eng_zero(c->be, x);
    int64_t *idx = xmalloc((size_t)c->p->n * sizeof *idx);
    eng_argmax_rows(c->be, x, idx);
    result *r = new_result(c, "argmax", eng_shape2(c->p->n, 1));
    r->v = xmalloc((size_t)c->p->n * sizeof *r->v);
    for (int64_t i = 0; i < c->p->n; i++)
        r->v[i] = (float)idx[i];
    free(idx);
}

/* Adam and AdamW at their first step (m = v = 0) and at step 5 (moments already there). */
static eng_adam_args adam_args(int v)
{
    return (eng_adam_args){.lr = 0.1, .weight_decay = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                           .decoupled = (v % 4) >= 2, .step = (v % 2) ? 5 : 1};
}

static void adam_step(ctx *c)
{
    eng_adam_item it[OPT_ITEMS];
    for (int i = 0; i < OPT_ITEMS; i++) {
        eng_adam_args a = adam_args(c->p->variant == OPT_MIXED ? i : c->p->variant);
        eng_shape s = OPT_SHAPES[i];
        float mm = a.step > 1 ? 0.1f : 0.0f, vlo = a.step > 1 ? 1e-4f : 0.0f, vhi = a.step > 1 ? 1e-2f : 0.0f;
        eng_tensor *p = input(c, s, -1, 1), *g = input(c, s, -1, 1), *m = input(c, s, -mm, mm),
                   *v = input(c, s, vlo, vhi);
        it[i] = (eng_adam_item){.a = a, .p = p, .g = g, .m = m, .v = v};
    }
    eng_adam_step_many(c->be, it, OPT_ITEMS);
    for (int i = 0; i < OPT_ITEMS; i++) {
        char name[24];
        snprintf(name, sizeof name, "p%d", i);
        check(c, name, it[i].p);
        snprintf(name, sizeof name, "m%d", i);
        check(c, name, it[i].m);
        snprintf(name, sizeof name, "v%d", i);
        check(c, name, it[i].v);
    }
}

/* ---- losses ------------------------------------------------------------------------------------- */

/* InfoNCE masks. Variant 0 is SimCLR's: 2N rows and columns, row r's positive its other
 * view r ± N, every column but itself and that one negative. Variant 1: row r's positives
 * are column r mod C and, every third row, the next one too; a column j with (r + j) mod 4
 * = 0 is neither. */
static bool nce_positive(int variant, int64_t r, int64_t j, int64_t cols)
{
    if (variant == 0)
        return j == (r + cols / 2) % cols;
    return j == r % cols || (r % 3 == 0 && j == (r + 1) % cols);
}

static bool nce_negative(int variant, int64_t r, int64_t j, int64_t cols)
{
    if (nce_positive(variant, r, j, cols))
        return false;
    return variant == 0 ? j != r : (r + j) % 4 != 0;
}

static eng_tensor *nce_mask(ctx *c, eng_shape s, bool positive)
{
    rng_stream rs;
    bool fresh;
    float *h = host_floats(c, eng_numel(&s), &rs, &fresh);
    for (int64_t r = 0; fresh && r < s.dim[0]; r++)
        for (int64_t j = 0; j < s.dim[1]; j++)
            h[r * s.dim[1] + j] = (positive ? nce_positive : nce_negative)(c->p->variant, r, j, s.dim[1]);
    return upload(c, s, ENG_LAYOUT_LOGICAL, h);
}

static void info_nce(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *x = input(c, s, -1, 1), *pos = nce_mask(c, s, true), *neg = nce_mask(c, s, false),
               *dx = grad(c, s, 1);
    check_value(c, "loss", eng_info_nce(c->be, x, (float)c->p->f, pos, neg, dx));
    check(c, "dx", dx);
}

/* Random classes; every third row (from row 1) ignored, or every row with F_ZERO. */
static const int64_t *ce_targets(ctx *c, int64_t n, int64_t classes, int64_t ignore)
{
    rng_stream rs;
    bool fresh;
    int64_t *t = host_slot(c, (size_t)n * sizeof *t, &rs, &fresh);
    for (int64_t i = 0; fresh && i < n; i++)
        t[i] = has(c, F_ZERO) || i % 3 == 1 ? ignore : rng_randint(&rs, 0, classes);
    return t;
}

/* Variant 1: ignore_index is a class (2), as torch allows. F_ZERO: the loss is NaN. */
static void cross_entropy(ctx *c)
{
    eng_shape s = act_shape(c->p);
    int64_t ignore = c->p->variant == 1 ? 2 : -100;
    eng_tensor *x = input(c, s, -3, 3), *dx = grad(c, s, 1);
    const int64_t *target = ce_targets(c, s.dim[0], s.dim[1], ignore);
    const float *weight = has(c, F_WEIGHT) ? host_uniform(c, vec(s.dim[1]), 0.5f, 2.0f, NULL) : NULL;
    check_value(c, "loss", eng_cross_entropy(c->be, x, (float)c->p->f, target, weight, ignore, dx));
    check(c, "dx", dx);
}

/* Targets 0, 1 or −1 (no label); with F_ZERO column 1 has none at all. */
static const int64_t *bce_targets(ctx *c, eng_shape s)
{
    rng_stream rs;
    bool fresh;
    int64_t n = eng_numel(&s), *t = host_slot(c, (size_t)n * sizeof *t, &rs, &fresh);
    for (int64_t i = 0; fresh && i < n; i++)
        t[i] = has(c, F_ZERO) && i % s.dim[1] == 1 ? -1 : rng_randint(&rs, -1, 2);
    return t;
}

static void bce_logits(ctx *c)
{
    eng_shape s = act_shape(c->p);
    eng_tensor *x = input(c, s, -3, 3), *dx = grad(c, s, 1);
    const int64_t *target = bce_targets(c, s);
    check_value(c, "loss", eng_bce_logits(c->be, x, target, dx));
    check(c, "dx", dx);
}

/* Scores are cosines in [−1, 1], as SwAV's are. */
static void sinkhorn(ctx *c)
{
    const params *p = c->p;
    eng_shape s = act_shape(p), qs = eng_shape2(p->o, p->c);
    edit_fn dead = has(c, F_ZERO) ? edit_dead_column : NULL;
    eng_tensor *x = input_edit(c, s, -1, 1, dead), *queue = has(c, F_QUEUE) ? input_edit(c, qs, -1, 1, dead) : NULL,
               *q = output(c, s);
    eng_sinkhorn(c->be, x, queue, p->f, (int)p->step, has(c, F_HARD), q, NULL);
    check(c, "q", q);
}

/* Variant 0: codes whose rows sum to 1; variant 1: rows that do not (Σq enters the gradient). */
static void soft_cross_entropy(ctx *c)
{
    const params *p = c->p;
    eng_shape s = act_shape(p);
    float added = (float)(fabs(p->g) * p->f / (double)p->c); /* g·s·(softmax·Σq − q) */
    eng_tensor *x = input(c, s, -1, 1), *q = input_edit(c, s, 0, 1, p->variant == 0 ? edit_rows_to_one : NULL),
               *dx = grad(c, s, added);
    check_value(c, "loss", eng_soft_cross_entropy(c->be, x, (float)p->f, q, p->g, dx));
    check(c, "dx", dx);
}

/* ---- convolution --------------------------------------------------------------------------------- */

static eng_conv_desc conv_desc(const params *p)
{
    return (eng_conv_desc){.stride = {p->stride, p->stride}, .pad = {p->pad, p->pad},
                           .dilation = {p->dil, p->dil}, .groups = p->groups,
                           .pad_extra = {p->extra[0], p->extra[1]}};
}

static eng_shape conv_weight_shape(const params *p)
{
    return eng_shape4(p->o, p->c / (p->groups ? p->groups : 1), p->kh, p->kw);
}

/* At PyTorch's init scale (±1/√fan-in), so outputs stay near 1 whatever the reduction. */
static eng_tensor *conv_weight(ctx *c, eng_shape ws)
{
    float a = 1.0f / sqrtf((float)(ws.dim[1] * ws.dim[2] * ws.dim[3]));
    return input(c, ws, -a, a);
}

static void conv_fwd(ctx *c)
{
    const params *p = c->p;
    eng_conv_desc d = conv_desc(p);
    eng_shape xs = act_shape(p), ws = conv_weight_shape(p), ys = eng_conv_output_shape(&xs, &ws, &d);
    eng_plan *plan = conv_plan(c, &d, &xs, &ws, has(c, F_BIAS));
    eng_tensor *x = input_as(c, xs, layout_if(c, F_NATIVE | F_NATIVE_X), -1, 1, NULL), *w = conv_weight(c, ws),
               *b = has(c, F_BIAS) ? input(c, vec(p->o), -1, 1) : NULL,
               *y = output_as(c, ys, layout_if(c, F_NATIVE | F_NATIVE_Y));
    eng_conv_forward(c->be, plan, x, w, b, y);
    check(c, "y", y);
}

static void conv_bwd(ctx *c)
{
    const params *p = c->p;
    eng_conv_desc d = conv_desc(p);
    eng_shape xs = act_shape(p), ws = conv_weight_shape(p), ys = eng_conv_output_shape(&xs, &ws, &d);
    eng_plan *plan = conv_plan(c, &d, &xs, &ws, has(c, F_BIAS));
    eng_layout xl = layout_if(c, F_NATIVE | F_NATIVE_X), yl = layout_if(c, F_NATIVE | F_NATIVE_Y);
    eng_tensor *x = input_as(c, xs, xl, -1, 1, NULL), *w = conv_weight(c, ws), *dy = input_as(c, ys, yl, -1, 1, NULL),
               *dx = has(c, F_NODX) ? NULL : input_as(c, xs, xl, -1, 1, NULL), *dw = grad(c, ws, 1),
               *db = has(c, F_BIAS) && !has(c, F_NODB) ? grad(c, vec(p->o), 1) : NULL;
    eng_conv_backward(c->be, plan, x, w, dy, dx, dw, db);
    check(c, "dx", dx);
    check(c, "dw", dw);
    check(c, "db", db);
}

/* F_NATIVE: x, residual and y native; F_NATIVE_X: x only; F_RELU or F_SILU: the activation. */
static void conv_bn_eval(ctx *c)
{
    const params *p = c->p;
    eng_conv_desc d = conv_desc(p);
    eng_shape xs = act_shape(p), ws = conv_weight_shape(p), ys = eng_conv_output_shape(&xs, &ws, &d), cs = vec(p->o);
    eng_layout xl = layout_if(c, F_NATIVE | F_NATIVE_X), yl = layout_if(c, F_NATIVE);
    bool affine = !has(c, F_NOAFFINE);
    eng_plan *plan = conv_plan(c, &d, &xs, &ws, false);
    eng_tensor *x = input_as(c, xs, xl, -1, 1, NULL), *w = conv_weight(c, ws),
               *gamma = affine ? input(c, cs, 0.5f, 1.5f) : NULL, *beta = affine ? input(c, cs, -0.5f, 0.5f) : NULL,
               *mean = input(c, cs, -0.2f, 0.2f), *var = input(c, cs, 0.5f, 1.5f),
               *residual = has(c, F_RESID) ? input_as(c, ys, yl, -1, 1, NULL) : NULL, *y = output_as(c, ys, yl);
    eng_eval_act act = has(c, F_SILU) ? ENG_EVAL_ACT_SILU : has(c, F_RELU) ? ENG_EVAL_ACT_RELU : ENG_EVAL_ACT_NONE;
    eng_conv_bn_forward_eval(c->be, plan, x, w, 1e-5, gamma, beta, mean, var, residual, act, y);
    check(c, "y", y);
}

/* ---- batch norm and layer norm ------------------------------------------------------------------ */

static const double BN_EPS = 1e-5, LN_EPS = 1e-6;

/* x (N×C×S) as a batch norm sees it: channel c of sample n is S values at (n·C + c)·S. */
typedef struct {
    int64_t n, c, s;
} ncs;

static ncs ncs_of(const eng_shape *s)
{
    return (ncs){s->dim[0], s->dim[1], s->ndim == 4 ? s->dim[2] * s->dim[3] : 1};
}

/* Activations as a convolution leaves them: a mean away from zero, so a variance taken as
 * E[x²] − E[x]² in float would show its cancellation. */
static const float *activations(ctx *c, eng_shape s) { return host_uniform(c, s, 0.0f, 2.0f, NULL); }

/* The mean and 1/√(biased variance + eps) of the m values of x at stride `step` in runs of
 * `run`: one channel (batch norm) or one sample (layer norm), in double. */
static void host_moments(const float *x, int64_t count, int64_t run, int64_t step, double eps, float *mean,
                         float *invstd)
{
    double sum = 0.0, sq = 0.0;
    for (int64_t k = 0; k < count; k++)
        for (int64_t i = 0; i < run; i++)
            sum += x[k * step + i];
    double mu = sum / (double)(count * run);
    for (int64_t k = 0; k < count; k++)
        for (int64_t i = 0; i < run; i++)
            sq += ((double)x[k * step + i] - mu) * ((double)x[k * step + i] - mu);
    *mean = (float)mu;
    *invstd = (float)(1.0 / sqrt(sq / (double)(count * run) + eps));
}

/* Batch norm's save_mean and save_invstd for x, as its training forward would leave them
 * (host copies in *hmean, *hinvstd). */
static void bn_saved(ctx *c, const float *hx, eng_shape s, eng_tensor **mean, eng_tensor **invstd,
                     const float **hmean, const float **hinvstd)
{
    ncs d = ncs_of(&s);
    rng_stream rs;
    bool fresh;
    float *m = host_floats(c, d.c, &rs, &fresh), *is = host_floats(c, d.c, &rs, &fresh);
    for (int64_t ch = 0; fresh && ch < d.c; ch++)
        host_moments(hx + ch * d.s, d.n, d.s, d.c * d.s, BN_EPS, &m[ch], &is[ch]);
    *mean = upload(c, vec(d.c), ENG_LAYOUT_LOGICAL, m);
    *invstd = upload(c, vec(d.c), ENG_LAYOUT_LOGICAL, is);
    *hmean = m;
    *hinvstd = is;
}

/* The fused forward's y = max(0, (x − mean)·invstd·γ + β), which the fused backward masks by. */
static eng_tensor *bn_relu_y(ctx *c, const float *hx, eng_shape s, const float *mean, const float *invstd,
                             const float *hg, const float *hb, eng_layout layout)
{
    ncs d = ncs_of(&s);
    rng_stream rs;
    bool fresh;
    float *y = host_floats(c, eng_numel(&s), &rs, &fresh);
    for (int64_t i = 0; fresh && i < eng_numel(&s); i++) {
        int64_t ch = i / d.s % d.c;
        double v = ((double)hx[i] - mean[ch]) * invstd[ch] * hg[ch] + hb[ch];
        y[i] = v > 0.0 ? (float)v : 0.0f;
    }
    return upload(c, s, layout, y);
}

/* SyncBN's group in one process: three ranks holding the same batch, so each sum over the group
 * is three times this rank's (exact in double) and the group's batch norm is the one of the
 * batch repeated three times: a larger count, the same mean and variance. */
static int three_ranks(void *state, double *v, size_t n, bool max)
{
    (void)state;
    for (size_t i = 0; !max && i < n; i++)
        v[i] *= 3.0;
    return 0;
}

static const eng_reducer THREE_RANKS = {.reduce = three_ranks, .world = 3};

static const eng_reducer *reducer(const ctx *c) { return has(c, F_SYNCED) ? &THREE_RANKS : NULL; }

/* F_RELU: batchnorm_relu; F_SYNCED: over THREE_RANKS. */
static void bn_fwd_train(ctx *c)
{
    eng_shape s = act_shape(c->p), cs = vec(c->p->c);
    bool affine = !has(c, F_NOAFFINE);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *x = upload(c, s, l, activations(c, s)),
               *gamma = affine ? input(c, cs, 0.5f, 1.5f) : NULL, *beta = affine ? input(c, cs, -0.5f, 0.5f) : NULL,
               *rmean = input(c, cs, -0.5f, 0.5f), *rvar = input(c, cs, 0.5f, 1.5f), *smean = output(c, cs),
               *sinv = output(c, cs), *y = output_as(c, s, l);
    if (has(c, F_RELU))
        eng_batchnorm_relu_forward_train(c->be, 0.1, BN_EPS, x, gamma, beta, rmean, rvar, smean, sinv, y,
                                         reducer(c));
    else
        eng_batchnorm_forward_train(c->be, 0.1, BN_EPS, x, gamma, beta, rmean, rvar, smean, sinv, y, reducer(c));
    check(c, "y", y);
    check(c, "running_mean", rmean);
    check(c, "running_var", rvar);
    check(c, "save_mean", smean);
    check(c, "save_invstd", sinv);
}

static void bn_fwd_eval(ctx *c)
{
    eng_shape s = act_shape(c->p), cs = vec(c->p->c);
    eng_tensor *x = upload(c, s, ENG_LAYOUT_LOGICAL, activations(c, s)), *gamma = input(c, cs, 0.5f, 1.5f),
               *beta = input(c, cs, -0.5f, 0.5f), *rmean = input(c, cs, 0.5f, 1.5f), *rvar = input(c, cs, 0.2f, 0.5f),
               *y = output(c, s);
    if (has(c, F_RELU))
        eng_batchnorm_relu_forward_eval(c->be, BN_EPS, x, gamma, beta, rmean, rvar, y);
    else
        eng_batchnorm_forward_eval(c->be, BN_EPS, x, gamma, beta, rmean, rvar, y);
    check(c, "y", y);
}

/* The training backward (F_RELU: batchnorm_relu's), through the saved batch statistics
 * (F_SYNCED: the group's sums for dx, this rank's for dγ and dβ). */
static void bn_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p), cs = vec(c->p->c);
    const float *hx = activations(c, s), *hg = host_uniform(c, cs, 0.5f, 1.5f, NULL),
                *hb = host_uniform(c, cs, -0.5f, 0.5f, NULL);
    const float *hmean, *hinvstd;
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *x = upload(c, s, l, hx), *gamma = upload(c, cs, ENG_LAYOUT_LOGICAL, hg), *mean, *invstd;
    bn_saved(c, hx, s, &mean, &invstd, &hmean, &hinvstd);
    eng_tensor *y = has(c, F_RELU) ? bn_relu_y(c, hx, s, hmean, hinvstd, hg, hb, l) : NULL,
               *dy = input_as(c, s, l, -1, 1, NULL), *dx = has(c, F_NODX) ? NULL : input_as(c, s, l, -1, 1, NULL),
               *dgamma = grad(c, cs, 1), *dbeta = grad(c, cs, 1);
    if (y)
        eng_batchnorm_relu_backward(c->be, x, gamma, mean, invstd, y, dy, dx, dgamma, dbeta, reducer(c));
    else
        eng_batchnorm_backward(c->be, x, gamma, mean, invstd, dy, dx, dgamma, dbeta, reducer(c));
    check(c, "dx", dx);
    check(c, "dgamma", dgamma);
    check(c, "dbeta", dbeta);
}

/* The backward of the eval forward: running statistics are constants. */
static void bn_bwd_eval(ctx *c)
{
    eng_shape s = act_shape(c->p), cs = vec(c->p->c);
    bool sums = !has(c, F_NODB);
    eng_tensor *x = upload(c, s, ENG_LAYOUT_LOGICAL, activations(c, s)),
               *gamma = has(c, F_NOAFFINE) ? NULL : input(c, cs, 0.5f, 1.5f), *rmean = input(c, cs, 0.5f, 1.5f),
               *rvar = input(c, cs, 0.2f, 0.5f), *dy = input(c, s, -1, 1),
               *dx = has(c, F_NODX) ? NULL : grad(c, s, 1), *dgamma = sums ? grad(c, cs, 1) : NULL,
               *dbeta = sums ? grad(c, cs, 1) : NULL;
    eng_batchnorm_backward_eval(c->be, BN_EPS, x, gamma, rmean, rvar, dy, dx, dgamma, dbeta);
    check(c, "dx", dx);
    check(c, "dgamma", dgamma);
    check(c, "dbeta", dbeta);
}

static void ln_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p), cs = vec(c->p->c), ns = vec(c->p->n);
    bool affine = !has(c, F_NOAFFINE), save = !has(c, F_NOSAVE);
    eng_tensor *x = upload(c, s, ENG_LAYOUT_LOGICAL, activations(c, s)),
               *gamma = affine ? input(c, cs, 0.5f, 1.5f) : NULL, *beta = affine ? input(c, cs, -0.5f, 0.5f) : NULL,
               *smean = save ? output(c, ns) : NULL, *sinv = save ? output(c, ns) : NULL, *y = output(c, s);
    eng_layernorm2d_forward(c->be, LN_EPS, x, gamma, beta, smean, sinv, y);
    check(c, "y", y);
    check(c, "save_mean", smean);
    check(c, "save_invstd", sinv);
}

/* Layer norm's per-sample statistics, as its forward would save them. */
static void ln_saved(ctx *c, const float *hx, eng_shape s, eng_tensor **mean, eng_tensor **invstd)
{
    int64_t n = s.dim[0], m = eng_numel(&s) / n;
    rng_stream rs;
    bool fresh;
    float *mu = host_floats(c, n, &rs, &fresh), *is = host_floats(c, n, &rs, &fresh);
    for (int64_t i = 0; fresh && i < n; i++)
        host_moments(hx + i * m, 1, m, m, LN_EPS, &mu[i], &is[i]);
    *mean = upload(c, vec(n), ENG_LAYOUT_LOGICAL, mu);
    *invstd = upload(c, vec(n), ENG_LAYOUT_LOGICAL, is);
}

static void ln_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p), cs = vec(c->p->c);
    bool sums = !has(c, F_NODB);
    const float *hx = activations(c, s);
    eng_tensor *x = upload(c, s, ENG_LAYOUT_LOGICAL, hx), *gamma = has(c, F_NOAFFINE) ? NULL : input(c, cs, 0.5f, 1.5f),
               *mean, *invstd;
    ln_saved(c, hx, s, &mean, &invstd);
    eng_tensor *dy = input(c, s, -1, 1), *dx = has(c, F_NODX) ? NULL : grad(c, s, 1),
               *dgamma = sums ? grad(c, cs, 1) : NULL, *dbeta = sums ? grad(c, cs, 1) : NULL;
    eng_layernorm2d_backward(c->be, x, gamma, mean, invstd, dy, dx, dgamma, dbeta);
    check(c, "dx", dx);
    check(c, "dgamma", dgamma);
    check(c, "dbeta", dbeta);
}

/* ---- local response normalisation ------------------------------------------------------------- */

/* The layers a case's variant names: AlexNet's (on inputs ±100, so the scale term is far from
 * 1), a strong one (the backward's cross-channel term as large as its own), another window and
 * β, and a window of 1. */
static const eng_lrn_desc LRN_DESCS[] = {
    {.size = 5, .alpha = 1e-4, .beta = 0.75, .k = 1.0},
    {.size = 5, .alpha = 0.5, .beta = 0.75, .k = 2.0},
    {.size = 3, .alpha = 1.0, .beta = 0.5, .k = 1.0},
    {.size = 1, .alpha = 0.3, .beta = 0.75, .k = 1.0},
};

static float lrn_range(const ctx *c) { return c->p->variant == 0 ? 100.0f : 2.0f; }

static void lrn_fwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    float r = lrn_range(c);
    eng_tensor *x = input(c, s, -r, r), *y = output(c, s);
    eng_lrn_forward(c->be, &LRN_DESCS[c->p->variant], x, y);
    check(c, "y", y);
}

static void lrn_bwd(ctx *c)
{
    eng_shape s = act_shape(c->p);
    float r = lrn_range(c);
    eng_tensor *x = input(c, s, -r, r), *dy = input(c, s, -1, 1), *dx = grad(c, s, 1);
    eng_lrn_backward(c->be, &LRN_DESCS[c->p->variant], x, dy, dx);
    check(c, "dx", dx);
}

/* ---- pooling ------------------------------------------------------------------------------------ */

static eng_pool_desc pool_desc(const ctx *c)
{
    const params *p = c->p;
    return (eng_pool_desc){.kernel = {p->kh, p->kw}, .stride = {p->stride, p->stride}, .pad = {p->pad, p->pad},
                           .ceil_mode = has(c, F_CEIL), .count_include_pad = !has(c, F_EXCL_PAD)};
}

static eng_tensor *pool_input(ctx *c, eng_shape s, eng_layout layout)
{
    return input_as(c, s, layout, -1, 1, has(c, F_TIES) ? edit_ties : NULL);
}

static void maxpool_fwd(ctx *c)
{
    eng_pool_desc d = pool_desc(c);
    eng_shape xs = act_shape(c->p), ys = eng_pool_output_shape(&xs, &d);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *x = pool_input(c, xs, l), *y = output_as(c, ys, l);
    eng_maxpool_forward(c->be, &d, x, y);
    check(c, "y", y);
}

static void maxpool_bwd(ctx *c)
{
    eng_pool_desc d = pool_desc(c);
    eng_shape xs = act_shape(c->p), ys = eng_pool_output_shape(&xs, &d);
    eng_layout l = layout_if(c, F_NATIVE);
    eng_tensor *x = pool_input(c, xs, l), *dy = input_as(c, ys, l, -1, 1, NULL), *dx = input_as(c, xs, l, -1, 1, NULL);
    eng_maxpool_backward(c->be, &d, x, dy, dx);
    check(c, "dx", dx);
}

static void avgpool_fwd(ctx *c)
{
    eng_pool_desc d = pool_desc(c);
    eng_shape xs = act_shape(c->p), ys = eng_pool_output_shape(&xs, &d);
    eng_tensor *x = input(c, xs, -1, 1), *y = output(c, ys);
    eng_avgpool_forward(c->be, &d, x, y);
    check(c, "y", y);
}

static void avgpool_bwd(ctx *c)
{
    eng_pool_desc d = pool_desc(c);
    eng_shape xs = act_shape(c->p), ys = eng_pool_output_shape(&xs, &d);
    float added = 1.0f / (float)(d.kernel[0] * d.kernel[1]); /* dy / window */
    eng_tensor *dy = input(c, ys, -1, 1), *dx = grad(c, xs, added);
    eng_avgpool_backward(c->be, &d, dy, dx);
    check(c, "dx", dx);
}

static eng_shape adaptive_out(const params *p) { return eng_shape4(p->n, p->c, p->oh, p->ow); }

/* F_NATIVE: x and y native; F_NATIVE_X: x only (a trunk's last map into a logical feature). */
static void aavg_fwd(ctx *c)
{
    eng_shape xs = act_shape(c->p), ys = adaptive_out(c->p);
    eng_tensor *x = input_as(c, xs, layout_if(c, F_NATIVE | F_NATIVE_X), -1, 1, NULL),
               *y = output_as(c, ys, layout_if(c, F_NATIVE));
    eng_adaptive_avgpool_forward(c->be, x, y);
    check(c, "y", y);
}

/* F_NATIVE_X: dx native (a trunk's last map, whose gradient comes from a logical feature). */
static void aavg_bwd(ctx *c)
{
    eng_shape xs = act_shape(c->p), ys = adaptive_out(c->p);
    float added = (float)(eng_numel(&ys) / c->p->n) / (float)(eng_numel(&xs) / c->p->n); /* dy / window */
    eng_tensor *dy = input(c, ys, -1, 1), *dx = input_as(c, xs, layout_if(c, F_NATIVE_X), -added, added, NULL);
    eng_adaptive_avgpool_backward(c->be, dy, dx);
    check(c, "dx", dx);
}

static void amax_fwd(ctx *c)
{
    eng_shape xs = act_shape(c->p), ys = adaptive_out(c->p);
    eng_tensor *x = pool_input(c, xs, ENG_LAYOUT_LOGICAL), *y = output(c, ys);
    eng_adaptive_maxpool_forward(c->be, x, y);
    check(c, "y", y);
}

static void amax_bwd(ctx *c)
{
    eng_shape xs = act_shape(c->p), ys = adaptive_out(c->p);
    eng_tensor *x = pool_input(c, xs, ENG_LAYOUT_LOGICAL), *dy = input(c, ys, -1, 1), *dx = grad(c, xs, 1);
    eng_adaptive_maxpool_backward(c->be, x, dy, dx);
    check(c, "dx", dx);
}

/* ---- the cases ---------------------------------------------------------------------------------- */

#define ODD .n = 3, .c = 5, .h = 7, .w = 9      /* odd everything */
#define RES .n = 8, .c = 64, .h = 56, .w = 56   /* ResNet-50's layer1 at batch 8 */
#define STEM .n = 8, .c = 64, .h = 112, .w = 112 /* the stem's output, into its max pool */
#define NC(a, b) .n = (a), .c = (b)
#define NCHW(a, b, c_, d) .n = (a), .c = (b), .h = (c_), .w = (d)
#define K(k) .kh = (k), .kw = (k)

static const test_case CASES[] = {
    {"upload_images", upload_images, 0, {NCHW(3, 3, 7, 9)}},
    {"upload_images", upload_images, 0, {NCHW(16, 3, 224, 224), .variant = 1, .note = "bgr"}},
    {"upload_images", upload_images, 0, {NCHW(4, 1, 32, 32), .variant = 2, .note = "lab"}},

    {"relu_fwd", relu_fwd, TOL_FP32, {ODD}},
    {"relu_fwd", relu_fwd, TOL_FP32, {RES}},
    {"relu_bwd", relu_bwd, TOL_FP32, {ODD}},
    {"relu_bwd", relu_bwd, TOL_FP32, {RES}},
    {"sigmoid_fwd", sigmoid_fwd, TOL_FP32, {ODD, .note = "x=±30,±100"}},
    {"sigmoid_fwd", sigmoid_fwd, TOL_FP32, {RES, .note = "x=±30,±100"}},
    {"sigmoid_bwd", sigmoid_bwd, TOL_FP32, {ODD}},
    {"sigmoid_bwd", sigmoid_bwd, TOL_FP32, {RES}},
    {"silu_fwd", silu_fwd, TOL_FP32, {ODD, .note = "x=±30,±100"}},
    {"silu_fwd", silu_fwd, TOL_FP32, {RES, .note = "x=±30,±100"}},
    {"silu_bwd", silu_bwd, TOL_FP32, {ODD, .note = "x=±30,±100"}},
    {"silu_bwd", silu_bwd, TOL_FP32, {RES, .note = "x=±30,±100"}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_FP32, {ODD}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_FP32, {ODD, .variant = 1, .note = "s_NxC"}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_FP32, {RES}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_FP32, {NCHW(8, 1512, 7, 7), .note = "se_7x7"}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_FP32, {RES, .flags = F_NATIVE}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_FP32, {NCHW(8, 1512, 7, 7), .flags = F_NATIVE, .note = "se_7x7"}},
    {"channel_scale_bwd", channel_scale_bwd, TOL_FP32, {ODD}},
    {"channel_scale_bwd", channel_scale_bwd, TOL_FP32, {ODD, .variant = 1, .note = "s_NxC"}},
    {"channel_scale_bwd", channel_scale_bwd, TOL_FP32, {ODD, .flags = F_NODX}},
    {"channel_scale_bwd", channel_scale_bwd, TOL_FP32, {ODD, .flags = F_NODB, .note = "ds=NULL"}},
    {"channel_scale_bwd", channel_scale_bwd, TOL_FP32, {RES}},
    {"channel_scale_bwd", channel_scale_bwd, TOL_FP32, {NCHW(8, 1512, 7, 7), .note = "se_7x7"}},

    {"linear_fwd", linear_fwd, TOL_FP32, {NC(3, 5), .o = 7, .flags = F_BIAS}},
    {"linear_fwd", linear_fwd, TOL_FP32, {NC(5, 7), .o = 3}},
    {"linear_fwd", linear_fwd, TOL_GEMM, {NC(64, 2048), .o = 1000, .flags = F_BIAS}},
    {"linear_bwd", linear_bwd, TOL_FP32, {NC(3, 5), .o = 7, .flags = F_BIAS}},
    {"linear_bwd", linear_bwd, TOL_FP32, {NC(5, 7), .o = 3, .flags = F_NODX}},
    {"linear_bwd", linear_bwd, TOL_GEMM, {NC(64, 2048), .o = 1000, .flags = F_BIAS}},
    {"linear_bwd", linear_bwd, TOL_GEMM, {NC(64, 2048), .o = 128, .flags = F_NODX}},

    {"add_fwd", add_fwd, TOL_FP32, {ODD}},
    {"add_fwd", add_fwd, TOL_FP32, {RES}},
    {"add_relu_fwd", add_fwd, TOL_FP32, {ODD, .flags = F_RELU}},
    {"add_relu_fwd", add_fwd, TOL_FP32, {RES, .flags = F_RELU}},
    {"add_bwd", add_bwd, TOL_FP32, {ODD}},
    {"add_bwd", add_bwd, TOL_FP32, {RES}},
    {"add_bwd", add_bwd, TOL_FP32, {ODD, .flags = F_NODX}},
    {"add_bwd", add_bwd, TOL_FP32, {ODD, .flags = F_NODB}},
    {"add_relu_bwd", add_bwd, TOL_FP32, {ODD, .flags = F_RELU}},
    {"add_relu_bwd", add_bwd, TOL_FP32, {RES, .flags = F_RELU}},
    {"add_relu_bwd", add_bwd, TOL_FP32, {ODD, .flags = F_RELU | F_NODB}},

    {"l2norm_fwd", l2norm_fwd, TOL_FP32, {NC(3, 5)}},
    {"l2norm_fwd", l2norm_fwd, TOL_FP32, {NC(256, 2048)}},
    {"l2norm_fwd", l2norm_fwd, TOL_FP32, {NC(4, 7), .flags = F_ZERO, .note = "row0_all_zero"}},
    {"l2norm_bwd", l2norm_bwd, TOL_FP32, {NC(3, 5)}},
    {"l2norm_bwd", l2norm_bwd, TOL_FP32, {NC(256, 2048)}},
    {"l2norm_bwd", l2norm_bwd, TOL_FP32, {NC(4, 7), .flags = F_ZERO, .note = "row0_all_zero"}},

    {"dropout_fwd", dropout_fwd, TOL_FP32, {ODD, .f = 0.0, .step = 1, .note = "p=0,step=1"}},
    {"dropout_fwd", dropout_fwd, TOL_FP32, {ODD, .f = 0.3, .step = 7, .note = "p=0.3,step=7"}},
    {"dropout_fwd", dropout_fwd, TOL_FP32, {NC(256, 2048), .f = 0.3, .step = (1LL << 33) + 5,
         .note = "p=0.3,step=2^33+5"}},
    {"dropout_bwd", dropout_bwd, TOL_FP32, {ODD, .f = 0.0, .step = 1, .note = "p=0,step=1"}},
    {"dropout_bwd", dropout_bwd, TOL_FP32, {ODD, .f = 0.3, .step = 7, .note = "p=0.3,step=7"}},
    {"dropout_bwd", dropout_bwd, TOL_FP32, {NC(256, 2048), .f = 0.3, .step = (1LL << 33) + 5,
         .note = "p=0.3,step=2^33+5"}},

    {"sgd_step_many", sgd_step, TOL_FP32, {.variant = 0, .note = "6items,momentum=0,buf=NULL"}},
    {"sgd_step_many", sgd_step, TOL_FP32, {.variant = 1, .note = "6items,momentum,first"}},
    {"sgd_step_many", sgd_step, TOL_FP32, {.variant = 2, .note = "6items,momentum,not_first,wd=0"}},
    {"sgd_step_many", sgd_step, TOL_FP32, {.variant = 3, .note = "6items,nesterov"}},
    {"sgd_step_many", sgd_step, TOL_FP32, {.variant = 4, .note = "6items,nesterov,first"}},
    {"sgd_step_many", sgd_step, TOL_FP32, {.variant = 5, .note = "6items,larc_grad_scale=0.0372"}},
    {"sgd_step_many", sgd_step, TOL_FP32, {.variant = OPT_MIXED, .note = "6items,each_setting_once"}},
    {"bank_scores_fwd", bank_fwd, TOL_FP32, {.n = 3, .c = 5, .o = 7, .w = 9, .note = "k=9,bank=7"}},
    {"bank_scores_fwd", bank_fwd, TOL_FP32, {.n = 64, .c = 128, .o = 10000, .w = 4097, .note = "npid,k=4097"}},
    {"bank_scores_bwd", bank_bwd, TOL_FP32, {.n = 3, .c = 5, .o = 7, .w = 9, .note = "k=9,bank=7"}},
    {"bank_scores_bwd", bank_bwd, TOL_FP32, {.n = 64, .c = 128, .o = 10000, .w = 4097, .note = "npid,k=4097"}},
    {"ema", ema, 0, {ODD, .f = 0.999, .note = "m=0.999"}},
    {"ema", ema, 0, {NC(1, 11689512), .f = 0.99, .note = "m=0.99,resnet18_params"}},
    {"scale", scale, 0, {ODD, .f = 1.0 / 3.0, .note = "1/3"}},
    {"argmax_rows", argmax_rows, 0, {NC(7, 5)}},
    {"argmax_rows", argmax_rows, 0, {NC(4, 9), .flags = F_ZERO, .note = "all_equal"}},
    {"argmax_rows", argmax_rows, 0, {NC(20000, 3000), .note = "deepclusterv2_kmeans"}},
    {"adam_step_many", adam_step, TOL_FP32, {.variant = 0, .note = "6items,adam,step=1"}},
    {"adam_step_many", adam_step, TOL_FP32, {.variant = 1, .note = "6items,adam,step=5"}},
    {"adam_step_many", adam_step, TOL_FP32, {.variant = 2, .note = "6items,adamw,step=1"}},
    {"adam_step_many", adam_step, TOL_FP32, {.variant = 3, .note = "6items,adamw,step=5"}},
    {"adam_step_many", adam_step, TOL_FP32, {.variant = OPT_MIXED, .note = "6items,mixed"}},

    {"sum_squares", sum_squares, TOL_FP32, {ODD}},
    {"sum_squares", sum_squares, TOL_FP32, {RES}},
    {"sum_squares_many", sum_squares_many, TOL_FP32, {.n = 7, .note = "sizes_0_to_123457"}},

    {"info_nce", info_nce, TOL_FP32, {NC(8, 8), .variant = 0, .f = 10.0, .note = "simclr,scale=10"}},
    {"info_nce", info_nce, TOL_FP32, {NC(256, 256), .variant = 0, .f = 2.0, .note = "simclr,scale=2"}},
    {"info_nce", info_nce, TOL_FP32, {NC(5, 7), .variant = 1, .f = 3.0, .note = "two_positives,unmasked_cols"}},
    {"cross_entropy", cross_entropy, TOL_FP32, {NC(3, 5), .f = 1.0, .note = "scale=1,ignore=-100"}},
    {"cross_entropy", cross_entropy, TOL_FP32, {NC(64, 1000), .f = 1.0, .flags = F_WEIGHT, .note = "ignore=-100"}},
    {"cross_entropy", cross_entropy, TOL_FP32, {NC(7, 3), .f = 2.5, .variant = 1, .flags = F_WEIGHT,
         .note = "scale=2.5,ignore=2"}},
    {"cross_entropy", cross_entropy, TOL_FP32, {NC(4, 5), .f = 1.0, .flags = F_ZERO, .note = "all_ignored(NaN)"}},
    {"bce_logits", bce_logits, TOL_FP32, {NC(3, 5)}},
    {"bce_logits", bce_logits, TOL_FP32, {NC(64, 1000)}},
    {"bce_logits", bce_logits, TOL_FP32, {NC(6, 4), .flags = F_ZERO, .note = "col1_unlabelled"}},
    {"sinkhorn", sinkhorn, TOL_ITER, {NC(16, 30), .f = 0.05, .step = 3, .note = "eps=0.05,iters=3"}},
    {"sinkhorn", sinkhorn, TOL_ITER, {NC(16, 30), .f = 0.05, .step = 3, .flags = F_HARD, .note = "eps=0.05,iters=3"}},
    {"sinkhorn", sinkhorn, TOL_ITER, {NC(64, 300), .o = 128, .f = 0.05, .step = 3, .flags = F_QUEUE,
         .note = "eps=0.05,iters=3"}},
    {"sinkhorn", sinkhorn, TOL_ITER, {NC(64, 300), .o = 128, .f = 0.05, .step = 3, .flags = F_QUEUE | F_HARD,
         .note = "eps=0.05,iters=3"}},
    {"sinkhorn", sinkhorn, TOL_ITER, {NC(256, 3000), .o = 1024, .f = 0.05, .step = 3, .flags = F_QUEUE,
         .note = "eps=0.05,iters=3"}},
    {"sinkhorn", sinkhorn, TOL_ITER, {NC(8, 10), .o = 4, .f = 0.05, .step = 3, .flags = F_QUEUE | F_ZERO,
         .note = "dead_prototype,eps=0.05,iters=3"}},
    {"sinkhorn", sinkhorn, TOL_ITER, {NC(5, 7), .f = 0.1, .step = 0, .note = "eps=0.1,iters=0"}},
    {"soft_cross_entropy", soft_cross_entropy, TOL_FP32, {NC(3, 5), .f = 10.0, .g = 0.5, .note = "scale=10,g=0.5"}},
    {"soft_cross_entropy", soft_cross_entropy, TOL_FP32, {NC(256, 3000), .f = 10.0, .g = 0.25,
         .note = "scale=10,g=0.25"}},
    {"soft_cross_entropy", soft_cross_entropy, TOL_FP32, {NC(4, 6), .f = 2.0, .g = 1.5, .variant = 1,
         .note = "rows_not_summing_to_1,g=1.5"}},

    {"conv_fwd", conv_fwd, TOL_GEMM, {ODD, .o = 4, K(1)}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_BIAS}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {ODD, .o = 4, K(3), .stride = 2, .pad = 1}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(3, 3, 15, 13), .o = 8, K(7), .stride = 2, .pad = 3}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(3, 8, 7, 9), .o = 12, K(3), .pad = 1, .groups = 4, .flags = F_BIAS}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(3, 6, 7, 9), .o = 6, K(3), .pad = 1, .groups = 6}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(3, 5, 9, 11), .o = 4, K(3), .pad = 2, .dil = 2, .flags = F_BIAS}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {RES, .o = 64, K(3), .pad = 1}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {RES, .o = 128, K(3), .stride = 2, .pad = 1}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {RES, .o = 128, K(1), .stride = 2}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(2, 3, 224, 224), .o = 64, K(7), .stride = 2, .pad = 3}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {ODD, .o = 4, K(1)}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_BIAS}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_BIAS | F_NODX}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_BIAS | F_NODB}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {ODD, .o = 4, K(3), .stride = 2, .pad = 1}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(3, 3, 15, 13), .o = 8, K(7), .stride = 2, .pad = 3}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(3, 8, 7, 9), .o = 12, K(3), .pad = 1, .groups = 4, .flags = F_BIAS}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(3, 6, 7, 9), .o = 6, K(3), .pad = 1, .groups = 6}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(3, 5, 9, 11), .o = 4, K(3), .pad = 2, .dil = 2, .flags = F_BIAS}},
    {"conv_bwd", conv_bwd, TOL_WGRAD, {RES, .o = 64, K(3), .pad = 1}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {RES, .o = 128, K(3), .stride = 2, .pad = 1}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {RES, .o = 128, K(1), .stride = 2}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(2, 3, 224, 224), .o = 64, K(7), .stride = 2, .pad = 3, .flags = F_NODX}},

    {"conv_fwd", conv_fwd, TOL_BF16, {ODD, .o = 6, K(3), .pad = 1, .flags = F_BIAS | F_BF16}},
    {"conv_fwd", conv_fwd, TOL_BF16, {NCHW(3, 8, 7, 9), .o = 12, K(3), .pad = 1, .groups = 4, .flags = F_BF16}},
    {"conv_fwd", conv_fwd, TOL_BF16, {RES, .o = 64, K(3), .pad = 1, .flags = F_BF16}},
    {"conv_fwd", conv_fwd, TOL_BF16, {RES, .o = 128, K(1), .stride = 2, .flags = F_BF16}},
    {"conv_fwd", conv_fwd, TOL_BF16, {NCHW(2, 3, 224, 224), .o = 64, K(7), .stride = 2, .pad = 3, .flags = F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {ODD, .o = 6, K(3), .pad = 1, .flags = F_BIAS | F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {NCHW(3, 8, 7, 9), .o = 12, K(3), .pad = 1, .groups = 4, .flags = F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {RES, .o = 64, K(3), .pad = 1, .flags = F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {RES, .o = 128, K(1), .stride = 2, .flags = F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {NCHW(2, 3, 224, 224), .o = 64, K(7), .stride = 2, .pad = 3,
                                      .flags = F_NODX | F_BF16}},

    /* Mixed precision with a trunk's activations native: bf16 N×H×W×C on cuda (cuDNN reads and
     * writes them in place; batch norm, ReLU, the adds and the pools read and write bf16). */
#define NB (F_NATIVE | F_BF16)
    {"relu_fwd", relu_fwd, TOL_BF16, {RES, .flags = NB}},
    {"relu_bwd", relu_bwd, TOL_BF16, {RES, .flags = NB}},
    {"add_fwd", add_fwd, TOL_BF16, {RES, .flags = NB}},
    {"add_relu_fwd", add_fwd, TOL_BF16, {ODD, .flags = F_RELU | NB}},
    {"add_bwd", add_bwd, TOL_BF16, {RES, .flags = NB}},
    {"add_bwd", add_bwd, TOL_BF16, {ODD, .flags = F_NODB | NB}},
    {"add_relu_bwd", add_bwd, TOL_BF16, {RES, .flags = F_RELU | NB}},
    {"conv_fwd", conv_fwd, TOL_BF16, {ODD, .o = 6, K(3), .pad = 1, .flags = NB}},
    {"conv_fwd", conv_fwd, TOL_BF16, {RES, .o = 64, K(3), .pad = 1, .flags = NB}},
    {"conv_fwd", conv_fwd, TOL_BF16, {RES, .o = 128, K(1), .stride = 2, .flags = NB}},
    {"conv_fwd", conv_fwd, TOL_BF16, {RES, .o = 64, K(1), .flags = F_NATIVE_X | F_BF16}},
    {"conv_fwd", conv_fwd, TOL_BF16, {NCHW(2, 3, 224, 224), .o = 64, K(7), .stride = 2, .pad = 3,
                                      .flags = F_NATIVE_Y | F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {ODD, .o = 6, K(3), .pad = 1, .flags = NB}},
    {"conv_bwd", conv_bwd, TOL_BF16, {RES, .o = 64, K(3), .pad = 1, .flags = NB}},
    {"conv_bwd", conv_bwd, TOL_BF16, {RES, .o = 128, K(1), .stride = 2, .flags = NB}},
    {"conv_bwd", conv_bwd, TOL_BF16, {RES, .o = 64, K(1), .flags = F_NATIVE_X | F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {NCHW(2, 3, 224, 224), .o = 64, K(7), .stride = 2, .pad = 3,
                                      .flags = F_NODX | F_NATIVE_Y | F_BF16}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_BF16, {ODD, .o = 6, K(3), .pad = 1, .flags = F_RESID | F_RELU | NB}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_BF16, {RES, .o = 64, K(1), .flags = F_RELU | F_NATIVE_X | F_BF16}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_BF16, {RES, .o = 64, K(3), .pad = 1, .flags = F_SILU | NB}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_BF16, {NCHW(2, 16, 8, 8), .o = 32, K(3), .stride = 2, .extra = {1, 1},
                                                  .flags = F_RESID | F_RELU | NB}},
    {"bn_fwd_train", bn_fwd_train, TOL_BF16, {ODD, .flags = NB}},
    {"bn_relu_fwd_train", bn_fwd_train, TOL_BF16, {RES, .flags = F_RELU | NB}},
    {"bn_fwd_train", bn_fwd_train, TOL_BF16, {NCHW(4, 200, 5, 5), .flags = NB, .note = "partial_tile"}},
    {"bn_relu_fwd_train_synced", bn_fwd_train, TOL_BF16, {ODD, .flags = F_RELU | F_SYNCED | NB}},
    {"bn_bwd", bn_bwd, TOL_BF16, {ODD, .flags = NB}},
    {"bn_bwd", bn_bwd, TOL_BF16, {ODD, .flags = F_NODX | NB}},
    {"bn_relu_bwd", bn_bwd, TOL_BF16, {RES, .flags = F_RELU | NB}},
    {"bn_bwd", bn_bwd, TOL_BF16, {NCHW(4, 200, 5, 5), .flags = NB, .note = "partial_tile"}},
    {"bn_bwd_synced", bn_bwd, TOL_BF16, {RES, .flags = F_SYNCED | NB}},
    {"maxpool_fwd", maxpool_fwd, TOL_BF16, {STEM, K(3), .stride = 2, .pad = 1, .flags = NB}},
    {"maxpool_fwd", maxpool_fwd, TOL_BF16, {ODD, K(3), .stride = 1, .pad = 1, .flags = F_TIES | NB}},
    {"maxpool_bwd", maxpool_bwd, TOL_BF16, {STEM, K(3), .stride = 2, .pad = 1, .flags = NB}},
    {"maxpool_bwd", maxpool_bwd, TOL_BF16, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_TIES | NB}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_BF16, {RES, .oh = 1, .ow = 1, .flags = F_NATIVE_X | F_BF16}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_BF16, {ODD, .oh = 3, .ow = 4, .flags = NB}},
    {"adaptive_avgpool_bwd", aavg_bwd, TOL_BF16, {RES, .oh = 1, .ow = 1, .flags = F_NATIVE_X | F_BF16}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_BF16, {NCHW(8, 1512, 7, 7), .flags = NB, .note = "se_7x7"}},
    {"channel_scale_fwd", channel_scale_fwd, TOL_BF16, {ODD, .variant = 1, .flags = NB, .note = "s_NxC"}},
#undef NB

    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_RESID | F_RELU}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_NOAFFINE | F_RELU}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_RESID | F_RELU | F_NATIVE}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {RES, .o = 64, K(3), .pad = 1, .flags = F_RELU}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {RES, .o = 64, K(3), .pad = 1, .flags = F_RESID | F_RELU | F_NATIVE}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {RES, .o = 64, K(1), .flags = F_RELU | F_NATIVE_X}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {RES, .o = 128, K(1), .stride = 2, .flags = F_NATIVE}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {ODD, .o = 6, K(3), .pad = 1, .flags = F_SILU}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {RES, .o = 64, K(3), .pad = 1, .flags = F_SILU | F_NATIVE}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {RES, .o = 64, K(1), .flags = F_RESID | F_NATIVE}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_BF16, {RES, .o = 64, K(3), .pad = 1,
                                                  .flags = F_RESID | F_RELU | F_NATIVE | F_BF16}},

    /* TensorFlow's "same" padding: pad above and left, pad + extra below and right (EfficientNet's
     * stride-2 convolutions; cuda pads x into scratch, the cpu hands oneDNN its right padding) */
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(2, 4, 8, 8), .o = 6, K(3), .stride = 2, .extra = {1, 1}}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(2, 6, 8, 8), .o = 6, K(5), .stride = 2, .pad = 1, .groups = 6,
                                      .extra = {1, 1}}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(2, 4, 8, 7), .o = 6, K(3), .stride = 2, .extra = {1, 2},
                                      .flags = F_BIAS}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(5, 8, 2, 2), .o = 12, K(3), .stride = 2, .extra = {1, 1},
                                      .note = "one_pixel"}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(2, 96, 112, 112), .o = 96, K(3), .stride = 2, .groups = 96,
                                      .extra = {1, 1}, .note = "effnet_dw3"}},
    {"conv_fwd", conv_fwd, TOL_GEMM, {NCHW(2, 144, 28, 28), .o = 144, K(5), .stride = 2, .pad = 1, .groups = 144,
                                      .extra = {1, 1}, .note = "effnet_dw5"}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(2, 4, 8, 8), .o = 6, K(3), .stride = 2, .extra = {1, 1}}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(2, 6, 8, 8), .o = 6, K(5), .stride = 2, .pad = 1, .groups = 6,
                                      .extra = {1, 1}}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(2, 4, 8, 7), .o = 6, K(3), .stride = 2, .extra = {1, 2},
                                      .flags = F_BIAS}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(2, 4, 8, 7), .o = 6, K(3), .stride = 2, .extra = {1, 2},
                                      .flags = F_NODX}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(5, 8, 2, 2), .o = 12, K(3), .stride = 2, .extra = {1, 1},
                                      .note = "one_pixel"}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(2, 96, 112, 112), .o = 96, K(3), .stride = 2, .groups = 96,
                                      .extra = {1, 1}, .note = "effnet_dw3"}},
    {"conv_bwd", conv_bwd, TOL_GEMM, {NCHW(2, 144, 28, 28), .o = 144, K(5), .stride = 2, .pad = 1, .groups = 144,
                                      .extra = {1, 1}, .note = "effnet_dw5"}},
    {"conv_fwd", conv_fwd, TOL_BF16, {NCHW(2, 6, 8, 8), .o = 6, K(5), .stride = 2, .pad = 1, .groups = 6,
                                      .extra = {1, 1}, .flags = F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {NCHW(2, 6, 8, 8), .o = 6, K(5), .stride = 2, .pad = 1, .groups = 6,
                                      .extra = {1, 1}, .flags = F_BF16}},
    {"conv_bwd", conv_bwd, TOL_BF16, {NCHW(2, 4, 8, 7), .o = 6, K(3), .stride = 2, .extra = {1, 2},
                                      .flags = F_NODX | F_BF16}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {NCHW(2, 16, 8, 8), .o = 32, K(3), .stride = 2, .extra = {1, 1},
                                                  .flags = F_RELU}},
    {"conv_bn_fwd_eval", conv_bn_eval, TOL_GEMM, {NCHW(2, 16, 8, 8), .o = 32, K(3), .stride = 2, .extra = {1, 1},
                                                  .flags = F_RESID | F_RELU | F_NATIVE}},

    {"bn_fwd_train", bn_fwd_train, TOL_FP32, {ODD}},
    {"bn_fwd_train", bn_fwd_train, TOL_SUM, {RES}},
    {"bn_fwd_train", bn_fwd_train, TOL_FP32, {NC(7, 5)}},
    {"bn_fwd_train", bn_fwd_train, TOL_FP32, {NC(256, 2048)}},
    {"bn_fwd_train", bn_fwd_train, TOL_FP32, {ODD, .flags = F_NOAFFINE}},
    {"bn_relu_fwd_train", bn_fwd_train, TOL_FP32, {ODD, .flags = F_RELU}},
    {"bn_relu_fwd_train", bn_fwd_train, TOL_SUM, {RES, .flags = F_RELU}},
    {"bn_relu_fwd_train", bn_fwd_train, TOL_FP32, {NC(7, 5), .flags = F_RELU}},
    {"bn_fwd_train_synced", bn_fwd_train, TOL_FP32, {ODD, .flags = F_SYNCED}},
    {"bn_fwd_train_synced", bn_fwd_train, TOL_SUM, {RES, .flags = F_SYNCED}},
    {"bn_relu_fwd_train_synced", bn_fwd_train, TOL_FP32, {NC(7, 5), .flags = F_RELU | F_SYNCED}},
    {"bn_fwd_eval", bn_fwd_eval, TOL_FP32, {ODD}},
    {"bn_fwd_eval", bn_fwd_eval, TOL_FP32, {RES}},
    {"bn_fwd_eval", bn_fwd_eval, TOL_FP32, {NC(7, 5)}},
    {"bn_relu_fwd_eval", bn_fwd_eval, TOL_FP32, {ODD, .flags = F_RELU}},
    {"bn_relu_fwd_eval", bn_fwd_eval, TOL_FP32, {RES, .flags = F_RELU}},
    {"bn_relu_fwd_eval", bn_fwd_eval, TOL_FP32, {NC(7, 5), .flags = F_RELU}},
    {"bn_bwd", bn_bwd, TOL_FP32, {ODD}},
    {"bn_bwd", bn_bwd, TOL_SUM, {RES}},
    {"bn_bwd", bn_bwd, TOL_FP32, {NC(7, 5)}},
    {"bn_bwd", bn_bwd, TOL_FP32, {NC(256, 2048)}},
    {"bn_bwd", bn_bwd, TOL_FP32, {ODD, .flags = F_NODX}},
    {"bn_relu_bwd", bn_bwd, TOL_FP32, {ODD, .flags = F_RELU}},
    {"bn_relu_bwd", bn_bwd, TOL_SUM, {RES, .flags = F_RELU}},
    {"bn_relu_bwd", bn_bwd, TOL_FP32, {NC(7, 5), .flags = F_RELU}},
    {"bn_bwd_synced", bn_bwd, TOL_FP32, {ODD, .flags = F_SYNCED}},
    {"bn_bwd_synced", bn_bwd, TOL_SUM, {RES, .flags = F_SYNCED}},
    {"bn_bwd_synced", bn_bwd, TOL_FP32, {ODD, .flags = F_NODX | F_SYNCED}},
    {"bn_relu_bwd_synced", bn_bwd, TOL_FP32, {NC(7, 5), .flags = F_RELU | F_SYNCED}},
    {"bn_bwd_eval", bn_bwd_eval, TOL_FP32, {ODD}},
    {"bn_bwd_eval", bn_bwd_eval, TOL_SUM, {RES}},
    {"bn_bwd_eval", bn_bwd_eval, TOL_FP32, {NC(7, 5)}},
    {"bn_bwd_eval", bn_bwd_eval, TOL_FP32, {ODD, .flags = F_NOAFFINE | F_NODX}},
    {"bn_bwd_eval", bn_bwd_eval, TOL_FP32, {ODD, .flags = F_NODB}},

    {"layernorm_fwd", ln_fwd, TOL_FP32, {ODD}},
    {"layernorm_fwd", ln_fwd, TOL_SUM, {RES}},
    {"layernorm_fwd", ln_fwd, TOL_FP32, {NC(7, 5)}},
    {"layernorm_fwd", ln_fwd, TOL_FP32, {ODD, .flags = F_NOAFFINE | F_NOSAVE}},
    {"layernorm_bwd", ln_bwd, TOL_FP32, {ODD}},
    {"layernorm_bwd", ln_bwd, TOL_SUM, {RES}},
    {"layernorm_bwd", ln_bwd, TOL_FP32, {NC(7, 5)}},
    {"layernorm_bwd", ln_bwd, TOL_FP32, {ODD, .flags = F_NOAFFINE | F_NODB}},
    {"layernorm_bwd", ln_bwd, TOL_FP32, {ODD, .flags = F_NODX}},

    {"lrn_fwd", lrn_fwd, TOL_FP32, {ODD, .note = "alexnet"}},
    {"lrn_fwd", lrn_fwd, TOL_FP32, {ODD, .variant = 1, .note = "strong"}},
    {"lrn_fwd", lrn_fwd, TOL_FP32, {NCHW(3, 3, 5, 4), .variant = 2, .note = "window3"}},
    {"lrn_fwd", lrn_fwd, TOL_FP32, {NCHW(2, 16, 6, 5), .variant = 3, .note = "window1"}},
    {"lrn_fwd", lrn_fwd, TOL_FP32, {NCHW(8, 96, 55, 55), .note = "alexnet_lrn1"}},
    {"lrn_fwd", lrn_fwd, TOL_FP32, {NCHW(8, 256, 27, 27), .note = "alexnet_lrn2"}},
    {"lrn_bwd", lrn_bwd, TOL_FP32, {ODD, .note = "alexnet"}},
    {"lrn_bwd", lrn_bwd, TOL_FP32, {ODD, .variant = 1, .note = "strong"}},
    {"lrn_bwd", lrn_bwd, TOL_FP32, {NCHW(3, 3, 5, 4), .variant = 2, .note = "window3"}},
    {"lrn_bwd", lrn_bwd, TOL_FP32, {NCHW(2, 16, 6, 5), .variant = 3, .note = "window1"}},
    {"lrn_bwd", lrn_bwd, TOL_FP32, {NCHW(2, 16, 6, 5), .variant = 1, .note = "strong"}},
    {"lrn_bwd", lrn_bwd, TOL_FP32, {NCHW(8, 96, 55, 55), .note = "alexnet_lrn1"}},
    {"lrn_bwd", lrn_bwd, TOL_FP32, {NCHW(8, 256, 27, 27), .note = "alexnet_lrn2"}},

    {"maxpool_fwd", maxpool_fwd, TOL_FP32, {STEM, K(3), .stride = 2, .pad = 1}},
    {"maxpool_fwd", maxpool_fwd, TOL_FP32, {STEM, K(3), .stride = 2, .pad = 1, .flags = F_NATIVE}},
    {"maxpool_fwd", maxpool_fwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_CEIL}},
    {"maxpool_fwd", maxpool_fwd, TOL_FP32, {ODD, K(2), .stride = 2}},
    {"maxpool_fwd", maxpool_fwd, TOL_FP32, {ODD, K(3), .stride = 1, .pad = 1, .flags = F_TIES}},
    {"maxpool_fwd", maxpool_fwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_NATIVE}},
    {"maxpool_fwd", maxpool_fwd, TOL_FP32, {NCHW(3, 16, 7, 9), K(3), .stride = 2, .pad = 1,
         .flags = F_NATIVE | F_CEIL}},
    {"maxpool_bwd", maxpool_bwd, TOL_FP32, {STEM, K(3), .stride = 2, .pad = 1}},
    {"maxpool_bwd", maxpool_bwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_CEIL}},
    {"maxpool_bwd", maxpool_bwd, TOL_FP32, {ODD, K(2), .stride = 2}},
    {"maxpool_bwd", maxpool_bwd, TOL_FP32, {ODD, K(3), .stride = 1, .pad = 1, .flags = F_TIES}},
    {"maxpool_bwd", maxpool_bwd, TOL_FP32, {NCHW(3, 5, 8, 8), K(2), .stride = 2, .flags = F_TIES}},
    {"avgpool_fwd", avgpool_fwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1}},
    {"avgpool_fwd", avgpool_fwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_EXCL_PAD}},
    {"avgpool_fwd", avgpool_fwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_CEIL}},
    {"avgpool_fwd", avgpool_fwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_CEIL | F_EXCL_PAD}},
    {"avgpool_fwd", avgpool_fwd, TOL_FP32, {ODD, K(2), .stride = 2, .flags = F_CEIL}},
    {"avgpool_fwd", avgpool_fwd, TOL_FP32, {RES, K(2), .stride = 2}},
    {"avgpool_bwd", avgpool_bwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1}},
    {"avgpool_bwd", avgpool_bwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_EXCL_PAD}},
    {"avgpool_bwd", avgpool_bwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_CEIL}},
    {"avgpool_bwd", avgpool_bwd, TOL_FP32, {ODD, K(3), .stride = 2, .pad = 1, .flags = F_CEIL | F_EXCL_PAD}},
    {"avgpool_bwd", avgpool_bwd, TOL_FP32, {ODD, K(2), .stride = 2, .flags = F_CEIL}},
    {"avgpool_bwd", avgpool_bwd, TOL_FP32, {RES, K(2), .stride = 2}},

    {"adaptive_avgpool_fwd", aavg_fwd, TOL_FP32, {ODD, .oh = 3, .ow = 4}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_FP32, {ODD, .oh = 5, .ow = 5}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_FP32, {NCHW(3, 5, 5, 5), .oh = 7, .ow = 7}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_FP32, {NCHW(8, 512, 7, 7), .oh = 1, .ow = 1}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_SUM, {RES, .oh = 1, .ow = 1, .flags = F_NATIVE_X}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_FP32, {RES, .oh = 3, .ow = 3, .flags = F_NATIVE}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_FP32, {NCHW(3, 16, 7, 9), .oh = 3, .ow = 4, .flags = F_NATIVE}},
    {"adaptive_avgpool_fwd", aavg_fwd, TOL_FP32, {ODD, .oh = 3, .ow = 4, .flags = F_NATIVE}},
    {"adaptive_avgpool_bwd", aavg_bwd, TOL_FP32, {ODD, .oh = 3, .ow = 4}},
    {"adaptive_avgpool_bwd", aavg_bwd, TOL_FP32, {NCHW(3, 5, 5, 5), .oh = 7, .ow = 7}},
    {"adaptive_avgpool_bwd", aavg_bwd, TOL_FP32, {NCHW(8, 512, 7, 7), .oh = 1, .ow = 1}},
    {"adaptive_avgpool_bwd", aavg_bwd, TOL_FP32, {RES, .oh = 1, .ow = 1}},
    {"adaptive_maxpool_fwd", amax_fwd, TOL_FP32, {ODD, .oh = 3, .ow = 4}},
    {"adaptive_maxpool_fwd", amax_fwd, TOL_FP32, {ODD, .oh = 3, .ow = 4, .flags = F_TIES}},
    {"adaptive_maxpool_fwd", amax_fwd, TOL_FP32, {NCHW(3, 5, 5, 5), .oh = 7, .ow = 7}},
    {"adaptive_maxpool_fwd", amax_fwd, TOL_FP32, {NCHW(8, 512, 7, 7), .oh = 1, .ow = 1}},
    {"adaptive_maxpool_bwd", amax_bwd, TOL_FP32, {ODD, .oh = 3, .ow = 4}},
    {"adaptive_maxpool_bwd", amax_bwd, TOL_FP32, {ODD, .oh = 3, .ow = 4, .flags = F_TIES}},
    {"adaptive_maxpool_bwd", amax_bwd, TOL_FP32, {NCHW(3, 5, 5, 5), .oh = 7, .ow = 7, .flags = F_TIES}},
    {"adaptive_maxpool_bwd", amax_bwd, TOL_FP32, {NCHW(8, 512, 7, 7), .oh = 1, .ow = 1}},
};
enum { NCASES = (int)ARRAY_LEN(CASES) };

/* "<dims>[,o..][,kKxK,sS,pP,dD,gG][,outHxW][,flags][,note]": one token, no spaces. */
static void case_label(int i, char *out, size_t size)
{
    const params *p = &CASES[i].p;
    strbuf sb = {0};
    if (p->n)
        sb_printf(&sb, p->h ? "%lldx%lldx%lldx%lld" : "%lldx%lld", (long long)p->n, (long long)p->c,
                  (long long)p->h, (long long)p->w);
    if (p->o)
        sb_printf(&sb, (p->flags & F_QUEUE) ? ",queue%lld" : ",o%lld", (long long)p->o);
    if (p->kh)
        sb_printf(&sb, ",k%lldx%lld", (long long)p->kh, (long long)p->kw);
    if (p->stride > 1)
        sb_printf(&sb, ",s%lld", (long long)p->stride);
    if (p->pad)
        sb_printf(&sb, ",p%lld", (long long)p->pad);
    if (p->dil > 1)
        sb_printf(&sb, ",d%lld", (long long)p->dil);
    if (p->groups > 1)
        sb_printf(&sb, ",g%lld", (long long)p->groups);
    if (p->extra[0] || p->extra[1])
        sb_printf(&sb, ",e%lldx%lld", (long long)p->extra[0], (long long)p->extra[1]);
    if (p->oh)
        sb_printf(&sb, ",out%lldx%lld", (long long)p->oh, (long long)p->ow);
    for (size_t k = 0; k < ARRAY_LEN(FLAG_WORDS); k++)
        if (p->flags & FLAG_WORDS[k].flag)
            sb_printf(&sb, ",%s", FLAG_WORDS[k].word);
    if (p->note)
        sb_printf(&sb, ",%s", p->note);
    const char *text = sb_str(&sb);
    snprintf(out, size, "%s", text[0] == ',' ? text + 1 : text);
    sb_free(&sb);
}

/* ---- comparing the two runs ------------------------------------------------------------------- */

/* An element of a case's results, with both backends' values. */
typedef struct {
    int res; /* -1: none */
    int64_t at;
    double got, want;
} element;

typedef struct {
    double max_rel;
    element worst;
    int64_t zero_mismatches; /* elements zero on one backend only, in an exact-zeros result */
    element first_zero_mismatch;
} verdict;

static int64_t result_count(const result *r) { return r->shape.ndim ? eng_numel(&r->shape) : 1; }
static double result_at(const result *r, int64_t i) { return r->shape.ndim ? r->v[i] : r->value; }

/* The error floor: the reference's mean magnitude over its finite values. */
static double mean_abs(const result *r)
{
    double sum = 0.0;
    int64_t finite = 0;
    for (int64_t i = 0; i < result_count(r); i++)
        if (isfinite(result_at(r, i))) {
            sum += fabs(result_at(r, i));
            finite++;
        }
    return sum > 0.0 ? sum / (double)finite : 1e-30;
}

static double element_error(double got, double want, double floor_)
{
    if (isnan(got) || isnan(want))
        return isnan(got) && isnan(want) ? 0.0 : INFINITY;
    if (isinf(got) || isinf(want))
        return got == want ? 0.0 : INFINITY;
    return fabs(got - want) / (fabs(want) + floor_);
}

static void compare_result(const result *got, const result *want, int k, verdict *v)
{
    double floor_ = mean_abs(want);
    for (int64_t i = 0; i < result_count(want); i++) {
        double g = result_at(got, i), w = result_at(want, i), e = element_error(g, w, floor_);
        if (e > v->max_rel || (v->worst.res < 0 && e > 0.0)) {
            v->max_rel = e;
            v->worst = (element){k, i, g, w};
        }
        if (want->exact_zeros && (g == 0.0) != (w == 0.0) && v->zero_mismatches++ == 0)
            v->first_zero_mismatch = (element){k, i, g, w};
    }
}

static verdict compare_runs(const ctx *got, const ctx *want)
{
    verdict v = {.worst.res = -1, .first_zero_mismatch.res = -1};
    if (got->nres != want->nres)
        die(EXIT_RUNTIME, "backend-ops: the two runs of a case declared %d and %d results", got->nres, want->nres);
    for (int k = 0; k < want->nres; k++)
        compare_result(&got->res[k], &want->res[k], k, &v);
    return v;
}

/* "dx[1,0,3,2]" for element i of result r; the name alone for a loss value. */
static void element_name(const result *r, int64_t i, char *out, size_t size)
{
    int64_t idx[NN_MAX_DIMS];
    for (int d = r->shape.ndim - 1; d >= 0; d--) {
        idx[d] = i % r->shape.dim[d];
        i /= r->shape.dim[d];
    }
    size_t n = (size_t)snprintf(out, size, "%s", r->name);
    for (int d = 0; d < r->shape.ndim && n < size; d++)
        n += (size_t)snprintf(out + n, size - n, "%c%lld%s", d ? ',' : '[', (long long)idx[d],
                              d == r->shape.ndim - 1 ? "]" : "");
}

/* The case's line: ok, or FAIL with the worst element (or, when only dropout's zero pattern
 * differs, the first element where it does). */
static bool format_verdict(int i, const ctx *want, const verdict *v, char *line, size_t size)
{
    char label[160], at[96];
    case_label(i, label, sizeof label);
    bool pass = v->max_rel <= CASES[i].tol && v->zero_mismatches == 0;
    if (pass) {
        snprintf(line, size, "ok   %s %s max_rel=%.3g", CASES[i].op, label, v->max_rel);
        return true;
    }
    const element *e = v->max_rel > CASES[i].tol ? &v->worst : &v->first_zero_mismatch;
    element_name(&want->res[e->res], e->at, at, sizeof at);
    int n = snprintf(line, size, "FAIL %s %s max_rel=%.3g at %s gpu=%.9g cpu=%.9g", CASES[i].op, label, v->max_rel,
                     at, e->got, e->want);
    if (v->zero_mismatches && n > 0 && (size_t)n < size)
        snprintf(line + n, size - (size_t)n, " (zero pattern differs at %lld elements)",
                 (long long)v->zero_mismatches);
    return false;
}

/* ---- running a case ------------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    bool pass;
    double dut_s, ref_s;
    char line[LINE_MAX_LEN];
} outcome;

/* Runs case i on the cpu, then on the backend under test, and compares. The cpu goes first
 * so that it also pays for drawing the inputs: the tested backend's time is its own. */
static outcome run_case(eng_backend *dut, eng_backend *ref, int i)
{
    outcome o = {0};
    if (!dut) { /* the mixed-precision backend, which did not open (child_open said why) */
        snprintf(o.line, sizeof o.line, "FAIL %s: the backend for mixed precision did not open", CASES[i].op);
        return o;
    }
    input_cache cache = {0};
    ctx want = {.be = ref, .p = &CASES[i].p, .case_no = i, .cache = &cache};
    ctx got = {.be = dut, .p = &CASES[i].p, .case_no = i, .cache = &cache};
    double t0 = now_s();
    CASES[i].run(&want);
    double t1 = now_s();
    CASES[i].run(&got);
    o.ref_s = t1 - t0;
    o.dut_s = now_s() - t1;
    verdict v = compare_runs(&got, &want);
    o.pass = format_verdict(i, &want, &v, o.line, sizeof o.line);
    ctx_free(&got);
    ctx_free(&want);
    for (int k = 0; k < MAX_INPUTS; k++)
        free(cache.data[k]);
    return o;
}

/* ---- the child: opens the backends and runs cases, reporting over a pipe -------------------------- */

static struct {
    const char *peer;          /* the backend under test */
    const char *only;          /* run only ops whose name contains this */
    const char *summary_path;
    bool has_bf16;             /* the tested backend has mixed precision (the cpu has not) */
    bool skip[NCASES];         /* not to run: filtered out, or given up on */
} g_run = {.peer = "cuda"};

/* Records, one line each: "S <why>" skipped (the tested backend did not open), "B <i>" case i
 * begins, "E <i> <pass> <tested s> <cpu s> <line>" it ended, "D" all done. */
static int case_timeout_s(void) { return g_run.has_bf16 ? CASE_TIMEOUT_S : CPU_CASE_TIMEOUT_S; }

static void child_open(FILE *out, eng_backend **dut, eng_backend **dut_bf16, eng_backend **ref)
{
    eng_backend_options opt = {.threads = 0, .seed = SEED};
    char *err = NULL;
    *dut = eng_backend_open(g_run.peer, &opt, &err);
    if (!*dut) {
        for (char *p = err; p && *p; p++)
            *p = *p == '\n' ? ' ' : *p;
        fprintf(out, "S %s\n", err ? err : "(no reason given)");
        fclose(out);
        _exit(0);
    }
    *ref = eng_backend_open("cpu", &opt, &err);
    if (!*ref)
        die(EXIT_RUNTIME, "backend-ops: the cpu backend did not open: %s", err);
    *dut_bf16 = NULL;
    if (g_run.has_bf16) {
        eng_backend_options mixed = opt;
        mixed.precision = ENG_BF16;
        if (!(*dut_bf16 = eng_backend_open(g_run.peer, &mixed, &err)))
            log_error("backend-ops: %s with mixed precision did not open: %s", g_run.peer, err);
    }
}

static noreturn void child_main(int first, int fd)
{
    FILE *out = fdopen(fd, "w");
    if (!out)
        die(EXIT_RUNTIME, "backend-ops: fdopen failed");
    eng_backend *dut, *dut_bf16, *ref;
    child_open(out, &dut, &dut_bf16, &ref);
    for (int i = first; i < NCASES; i++) {
        if (g_run.skip[i])
            continue;
        fprintf(out, "B %d\n", i);
        fflush(out);
        alarm((unsigned)case_timeout_s()); /* a hung kernel ends the child; the parent reports the case */
        outcome o = run_case(CASES[i].p.flags & F_BF16 && g_run.has_bf16 ? dut_bf16 : dut, ref, i);
        alarm(0);
        fprintf(out, "E %d %d %.6f %.6f %s\n", i, o.pass, o.dut_s, o.ref_s, o.line);
        fflush(out);
    }
    fprintf(out, "D\n");
    fclose(out);
    eng_backend_close(ref);
    eng_backend_close(dut_bf16);
    eng_backend_close(dut);
    _exit(0);
}

/* ---- the parent: starts children, collects lines, survives crashes ------------------------------- */

typedef struct {
    int next;  /* the first case the next child runs */
    int begun; /* the case in progress; -1 none */
    bool done, skipped;
    char *skip_reason;
    int passed, failed;
    double dut_s, ref_s, slowest_s;
    int slowest;
    int crashes[NCASES]; /* by case: crashes of the case's op so far (kept at the op's first case) */
    strbuf lines;
} tally;

static void report(tally *t, bool pass, const char *line)
{
    printf("%s\n", line);
    fflush(stdout);
    sb_printf(&t->lines, "%s\n", line);
    if (pass)
        t->passed++;
    else
        t->failed++;
}

static void ended(tally *t, const char *rec)
{
    int i, pass, off = 0;
    double dut_s, ref_s;
    if (sscanf(rec, "E %d %d %lf %lf %n", &i, &pass, &dut_s, &ref_s, &off) != 4 || off == 0 || i < 0 ||
        i >= NCASES)
        die(EXIT_RUNTIME, "backend-ops: a garbled record from the child: %s", rec);
    report(t, pass != 0, rec + off);
    t->dut_s += dut_s;
    t->ref_s += ref_s;
    if (dut_s + ref_s > t->slowest_s) {
        t->slowest_s = dut_s + ref_s;
        t->slowest = i;
    }
    t->begun = -1;
    t->next = i + 1;
}

static void handle_record(tally *t, const char *rec)
{
    switch (rec[0]) {
    case 'S':
        t->skipped = true;
        t->skip_reason = xstrdup(rec[1] ? rec + 2 : "");
        break;
    case 'B':
        t->begun = atoi(rec + 2);
        break;
    case 'E':
        ended(t, rec);
        break;
    case 'D':
        t->done = true;
        break;
    default:
        die(EXIT_RUNTIME, "backend-ops: a garbled record from the child: %s", rec);
    }
}

static pid_t spawn(int first, FILE **in)
{
    int fd[2];
    if (pipe(fd) != 0)
        die(EXIT_RUNTIME, "backend-ops: pipe failed");
    fflush(stdout); /* or the child's exit() would print the parent's buffered lines again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        die(EXIT_RUNTIME, "backend-ops: fork failed");
    if (pid == 0) {
        close(fd[0]);
        child_main(first, fd[1]);
    }
    close(fd[1]);
    *in = fdopen(fd[0], "r");
    if (!*in)
        die(EXIT_RUNTIME, "backend-ops: fdopen failed");
    return pid;
}

static void describe_exit(int status, char *out, size_t size)
{
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        snprintf(out, size, "no result within %d s", case_timeout_s());
    else if (WIFSIGNALED(status))
        snprintf(out, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(out, size, "exited with status %d", WEXITSTATUS(status));
}

/* The first case of op `op`: where its crashes are counted. */
static int op_index(const char *op)
{
    int i = 0;
    while (strcmp(CASES[i].op, op) != 0)
        i++;
    return i;
}

/* Case i killed the child: report it; an op's second crash gives up on its other cases. */
static void crashed(tally *t, int i, int status)
{
    char how[96], label[160], line[LINE_MAX_LEN];
    describe_exit(status, how, sizeof how);
    case_label(i, label, sizeof label);
    snprintf(line, sizeof line, "FAIL %s %s crashed: %s (its message, if any, is on stderr)", CASES[i].op, label,
             how);
    report(t, false, line);
    int first = op_index(CASES[i].op);
    if (++t->crashes[first] < 2)
        return;
    for (int k = i + 1; k < NCASES; k++)
        if (!g_run.skip[k] && strcmp(CASES[k].op, CASES[i].op) == 0) {
            g_run.skip[k] = true;
            case_label(k, label, sizeof label);
            snprintf(line, sizeof line, "FAIL %s %s not run: the op crashed twice", CASES[k].op, label);
            report(t, false, line);
        }
}

/* Out of time for more children: every case left is reported as not run. */
static void give_up(tally *t)
{
    char label[160], line[LINE_MAX_LEN];
    for (int k = t->next; k < NCASES; k++)
        if (!g_run.skip[k]) {
            case_label(k, label, sizeof label);
            snprintf(line, sizeof line, "FAIL %s %s not run: crashes used up the %.0f s budget", CASES[k].op, label,
                     RESTART_BUDGET_S);
            report(t, false, line);
        }
}

static int next_to_run(int from)
{
    while (from < NCASES && g_run.skip[from])
        from++;
    return from;
}

/* One child's life: its records, then how it ended. False when no further child is needed. */
static bool one_child(tally *t)
{
    FILE *in;
    pid_t pid = spawn(t->next, &in);
    char *rec = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&rec, &cap, in)) > 0) {
        rec[strcspn(rec, "\n")] = '\0';
        handle_record(t, rec);
    }
    free(rec);
    fclose(in);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        ;
    if (t->done || t->skipped)
        return false;
    if (t->begun < 0) {
        char how[96], line[LINE_MAX_LEN];
        describe_exit(status, how, sizeof how);
        snprintf(line, sizeof line, "FAIL (setup) the test process %s outside any case (stderr says why)", how);
        report(t, false, line);
        return false;
    }
    crashed(t, t->begun, status);
    t->next = t->begun + 1;
    t->begun = -1;
    return true;
}

static void run_all(tally *t, double start)
{
    t->begun = -1;
    t->slowest = -1;
    while ((t->next = next_to_run(t->next)) < NCASES) {
        if (t->passed + t->failed > 0 && now_s() - start > RESTART_BUDGET_S) {
            give_up(t);
            return;
        }
        if (!one_child(t))
            return;
    }
}

/* ---- main ------------------------------------------------------------------------------------------ */

static noreturn void usage(void)
{
    fprintf(stderr, "usage: backend-ops [--summary FILE] [--only TEXT]\n"
                    "  every nn.h operation on the backend $SELFSUP_BACKEND_OPS_PEER (default cuda) against cpu\n");
    exit(EXIT_USAGE);
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--summary") == 0 && i + 1 < argc)
            g_run.summary_path = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            g_run.only = argv[++i];
        else
            usage();
    }
    const char *peer = getenv("SELFSUP_BACKEND_OPS_PEER");
    if (peer && *peer)
        g_run.peer = peer;
    g_run.has_bf16 = strcmp(g_run.peer, "cpu") != 0;
    for (int i = 0; i < NCASES; i++)
        g_run.skip[i] = g_run.only && !strstr(CASES[i].op, g_run.only);
}

static void write_summary(const char *text, const tally *t)
{
    if (!g_run.summary_path)
        return;
    FILE *f = fopen(g_run.summary_path, "w");
    if (!f)
        die(EXIT_RUNTIME, "backend-ops: cannot write %s", g_run.summary_path);
    fprintf(f, "%s%s", text, t ? sb_str(&t->lines) : "");
    if (fclose(f) != 0)
        die(EXIT_RUNTIME, "backend-ops: cannot write %s", g_run.summary_path);
}

/* The closing lines: times, then passed and failed. */
static void finish(const tally *t, double wall_s)
{
    char slow[200] = "";
    if (t->slowest >= 0) {
        char label[160];
        case_label(t->slowest, label, sizeof label);
        snprintf(slow, sizeof slow, "; slowest %s %s %.2f s", CASES[t->slowest].op, label, t->slowest_s);
    }
    strbuf sb = {0};
    sb_printf(&sb, "backend-ops: time %s %.2f s, cpu %.2f s (with drawing the inputs), wall %.2f s%s\n", g_run.peer,
              t->dut_s, t->ref_s, wall_s, slow);
    sb_printf(&sb, "backend-ops: %d passed, %d failed\n", t->passed, t->failed);
    fputs(sb_str(&sb), stdout);
    write_summary(sb_str(&sb), t);
    sb_free(&sb);
}

int main(int argc, char **argv)
{
    log_init("backend-ops");
    parse_args(argc, argv);
    double start = now_s();
    static tally t;
    run_all(&t, start);
    if (t.skipped) {
        char *line = xasprintf("backend-ops: skipped: %s\n", t.skip_reason);
        fputs(line, stdout);
        write_summary(line, NULL);
        free(line);
        return 0;
    }
    finish(&t, now_s() - start);
    sb_free(&t.lines);
    return t.failed ? EXIT_RUNTIME : 0;
}

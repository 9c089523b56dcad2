/*
 * pool.c — the cpu backend's pooling layers: MaxPool2d, AvgPool2d and the adaptive average
 * and max pools, with exactly PyTorch's CPU semantics (nn.h).
 *
 * Every layer walks the N·C planes and, for each output element, a window of the input plane:
 * window_at() gives it, either from the pool descriptor (kernel, stride, padding, ceil_mode) or
 * from the adaptive rule [floor(i·in/out), ceil((i+1)·in/out)) when there is no descriptor.
 * The four kernels (max and average, forward and backward) are then shared by the fixed and
 * adaptive pools. Max pool keeps no indices: the backward finds each window's argmax again
 * from x with the same scan, so the gradient goes where PyTorch sends it. The planes are
 * spread over the OpenMP threads. A max window is the product of a row span and a column
 * span, so the max pools work them out once per call (spans_of) rather than per output:
 * ResNet's stem pool on 24 px images (Jigsaw's patches) reads 3 × 3 windows of 12 × 12 maps,
 * where finding each window cost more than scanning it.
 *
 * The max pool and the adaptive average pool also take a channel-blocked (nChwBc) input, as
 * an evaluation trunk leaves it and a training one keeps it (cpu_blocking), and its gradient:
 * a "plane" is then B channels interleaved, element (h, w) of lane l at (h·W + w)·B + l, and
 * each lane goes through exactly the scan and the sum of the plain kernel, so both layouts
 * give the same bits.
 */
#include "cpu.h"

#include "util.h"

#include <math.h>
#include <stdlib.h>

/* N·C/lanes planes of ih × iw in, oh × ow out, `lanes` channels interleaved in each input
 * plane (1 for the logical layout). The output's lane l at position i is out[i·ystep +
 * l·ylane]: interleaved too, or (a logical output of a blocked input) lane after lane. */
typedef struct {
    int64_t planes, ih, iw, oh, ow;
    int lanes;
    int64_t ystep, ylane;
} geometry;

/* One output element's input rows [h0, h1) and columns [w0, w1), already clipped to the
 * input, and the divisor an average uses. */
typedef struct {
    int64_t h0, h1, w0, w1;
    int64_t divisor;
} window;

static geometry geometry_of(tensor_ref *x, tensor_ref *y)
{
    int lanes = cpu_blocking(x) ? cpu_blocking(x) : 1;
    bool y_blocked = cpu_blocking(y) != 0;
    int64_t positions = y->shape.dim[2] * y->shape.dim[3];
    return (geometry){.planes = x->shape.dim[0] * x->shape.dim[1] / lanes,
                      .ih = x->shape.dim[2],
                      .iw = x->shape.dim[3],
                      .oh = y->shape.dim[2],
                      .ow = y->shape.dim[3],
                      .lanes = lanes,
                      .ystep = y_blocked ? lanes : 1,
                      .ylane = y_blocked ? 1 : positions};
}

/* PyTorch's AvgPool2d: the window may run into the right padding but never past it, and with
 * count_include_pad the divisor counts that padded window (so a ceil_mode window that hangs
 * past the padding is divided by less than kernel²). */
static void fixed_span(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t in, int64_t *lo, int64_t *hi,
                       int64_t *padded)
{
    int64_t start = o * (stride ? stride : k) - pad;
    int64_t end = start + k < in + pad ? start + k : in + pad;
    *padded = end - start;
    *lo = start > 0 ? start : 0;
    *hi = end < in ? end : in;
}

/* The adaptive rule: [floor(o·in/out), ceil((o+1)·in/out)). */
static void adaptive_span(int64_t o, int64_t out, int64_t in, int64_t *lo, int64_t *hi)
{
    *lo = o * in / out;
    *hi = ((o + 1) * in + out - 1) / out;
}

/* d NULL: the adaptive window. */
static window window_at(const eng_pool_desc *d, const geometry *g, int64_t oh, int64_t ow)
{
    window w;
    if (!d) {
        adaptive_span(oh, g->oh, g->ih, &w.h0, &w.h1);
        adaptive_span(ow, g->ow, g->iw, &w.w0, &w.w1);
        w.divisor = (w.h1 - w.h0) * (w.w1 - w.w0);
        return w;
    }
    int64_t ph, pw;
    fixed_span(oh, d->kernel[0], d->stride[0], d->pad[0], g->ih, &w.h0, &w.h1, &ph);
    fixed_span(ow, d->kernel[1], d->stride[1], d->pad[1], g->iw, &w.w0, &w.w1, &pw);
    w.divisor = d->count_include_pad ? ph * pw : (w.h1 - w.h0) * (w.w1 - w.w0);
    return w;
}

/* Input rows [lo, hi) (or columns) of an output row (or column), clipped to the input. */
typedef struct {
    int64_t lo, hi;
} span;

/* The row spans of the g->oh output rows, then the column spans of the g->ow output columns
 * (window_at's, without the divisor); the caller frees. */
static span *spans_of(const eng_pool_desc *d, const geometry *g)
{
    span *sp = xmalloc((size_t)(g->oh + g->ow) * sizeof *sp);
    for (int64_t oh = 0; oh < g->oh; oh++) {
        window w = window_at(d, g, oh, 0);
        sp[oh] = (span){w.h0, w.h1};
    }
    for (int64_t ow = 0; ow < g->ow; ow++) {
        window w = window_at(d, g, 0, ow);
        sp[g->oh + ow] = (span){w.w0, w.w1};
    }
    return sp;
}

/* Output (oh, ow)'s window from the spans (no divisor: the max pools need none). */
static window window_of(const geometry *g, const span *sp, int64_t oh, int64_t ow)
{
    return (window){sp[oh].lo, sp[oh].hi, sp[g->oh + ow].lo, sp[g->oh + ow].hi, 0};
}

/* The index in the plane of lane l's maximum in the window (`lanes` channels interleaved),
 * scanning rows then columns: the first of equal maxima wins (strict >), and a NaN always
 * takes over so it propagates — both as PyTorch's CPU kernel does. Padding never wins: it is
 * -inf. */
static int64_t window_argmax(const float *plane, int64_t iw, int lanes, int l, const window *w)
{
    int64_t best = (w->h0 * iw + w->w0) * lanes + l;
    float top = -INFINITY;
    for (int64_t h = w->h0; h < w->h1; h++)
        for (int64_t c = w->w0; c < w->w1; c++) {
            int64_t at = (h * iw + c) * lanes + l;
            float v = plane[at];
            if (v > top || isnan(v)) {
                top = v;
                best = at;
            }
        }
    return best;
}

/* max(top, v) by window_argmax's rule, without a branch: a larger v takes over, an equal one
 * does not, and a NaN is kept aside in *nan (the last one seen) to take over at the end
 * (nan_or). Branches on the comparison were most of the stem pool's time: random data
 * mispredicts them. */
static inline float max_step(float top, float v, float *nan)
{
    *nan = v != v ? v : *nan;
    return v > top ? v : top;
}

static inline float nan_or(float nan, float top) { return nan != nan ? nan : top; }

/* The window's maximum in each of `lanes` interleaved channels (window_argmax's rule), lane
 * l into out[l·ylane]. Inlined with lanes a constant (window_max), the lanes vectorise. */
static inline void window_max_lanes(const float *plane, int64_t iw, int lanes, const window *w, float *out,
                                    int64_t ylane)
{
    float top[16], nan[16]; /* lanes ≤ 16: cpu_blocking's blocks are 8 or 16 */
    for (int l = 0; l < lanes; l++)
        top[l] = -INFINITY, nan[l] = 0.0f;
    for (int64_t h = w->h0; h < w->h1; h++)
        for (int64_t c = w->w0; c < w->w1; c++) {
            const float *v = plane + (h * iw + c) * lanes;
            for (int l = 0; l < lanes; l++)
                top[l] = max_step(top[l], v[l], &nan[l]);
        }
    for (int l = 0; l < lanes; l++)
        out[l * ylane] = nan_or(nan[l], top[l]);
}

/* window_max_lanes for the logical layout (1 lane) and the block sizes cpu_blocking uses,
 * each compiled for its constant. */
static void window_max(const float *plane, int64_t iw, int lanes, const window *w, float *out, int64_t ylane)
{
    if (lanes == 1)
        window_max_lanes(plane, iw, 1, w, out, ylane);
    else if (lanes == 16)
        window_max_lanes(plane, iw, 16, w, out, ylane);
    else if (lanes == 8)
        window_max_lanes(plane, iw, 8, w, out, ylane);
    else
        window_max_lanes(plane, iw, lanes, w, out, ylane);
}

/* Each kernel works on one plane (one sample's channel); the layers spread the planes over
 * the OpenMP threads, each plane one thread's, so the result does not depend on their number. */

static void max_forward_plane(const geometry *g, const span *sp, const float *in, float *out)
{
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++, out += g->ystep) {
            window w = window_of(g, sp, oh, ow);
            /* an empty window cannot arise from nn.c's shape rule; PyTorch would give -inf */
            window_max(in, g->iw, g->lanes, &w, out, g->ylane);
        }
}

static void max_backward_plane(const geometry *g, const span *sp, const float *in, const float *gy, float *gx)
{
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++, gy += g->ystep) {
            window w = window_of(g, sp, oh, ow);
            if (w.h0 < w.h1 && w.w0 < w.w1)
                for (int l = 0; l < g->lanes; l++)
                    gx[window_argmax(in, g->iw, g->lanes, l, &w)] += gy[l * g->ylane];
        }
}

static void avg_forward_plane(const eng_pool_desc *d, const geometry *g, const float *in, float *out)
{
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++, out += g->ystep) {
            window w = window_at(d, g, oh, ow);
            for (int l = 0; l < g->lanes; l++) {
                double sum = 0.0; /* double: a large adaptive window sums many terms */
                for (int64_t h = w.h0; h < w.h1; h++)
                    for (int64_t c = w.w0; c < w.w1; c++)
                        sum += in[(h * g->iw + c) * g->lanes + l];
                out[l * g->ylane] = w.divisor > 0 ? (float)(sum / (double)w.divisor) : 0.0f;
            }
        }
}

static void avg_backward_plane(const eng_pool_desc *d, const geometry *g, const float *gy, float *gx)
{
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++, gy += g->ystep) {
            window w = window_at(d, g, oh, ow);
            if (w.divisor <= 0)
                continue;
            for (int l = 0; l < g->lanes; l++) {
                float share = gy[l * g->ylane] / (float)w.divisor;
                for (int64_t h = w.h0; h < w.h1; h++)
                    for (int64_t c = w.w0; c < w.w1; c++)
                        gx[(h * g->iw + c) * g->lanes + l] += share;
            }
        }
}

static void max_forward(const eng_pool_desc *d, tensor_ref *x, tensor_ref *y)
{
    geometry g = geometry_of(x, y);
    const float *in = cpu_ptr(x);
    float *out = cpu_ptr(y);
    span *sp = spans_of(d, &g);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; p++)
        max_forward_plane(&g, sp, in + p * g.ih * g.iw * g.lanes, out + p * g.oh * g.ow * g.lanes);
    free(sp);
}

static void max_backward(const eng_pool_desc *d, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    geometry g = geometry_of(x, dy);
    const float *in = cpu_ptr(x), *gy = cpu_ptr(dy);
    float *gx = cpu_ptr(dx);
    span *sp = spans_of(d, &g);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; p++)
        max_backward_plane(&g, sp, in + p * g.ih * g.iw * g.lanes, gy + p * g.oh * g.ow * g.lanes,
                           gx + p * g.ih * g.iw * g.lanes);
    free(sp);
}

static void avg_forward(const eng_pool_desc *d, tensor_ref *x, tensor_ref *y)
{
    geometry g = geometry_of(x, y);
    const float *in = cpu_ptr(x);
    float *out = cpu_ptr(y);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; p++)
        avg_forward_plane(d, &g, in + p * g.ih * g.iw * g.lanes, out + p * g.oh * g.ow * g.lanes);
}

static void avg_backward(const eng_pool_desc *d, tensor_ref *dy, tensor_ref *dx)
{
    geometry g = geometry_of(dx, dy);
    const float *gy = cpu_ptr(dy);
    float *gx = cpu_ptr(dx);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; p++)
        avg_backward_plane(d, &g, gy + p * g.oh * g.ow * g.lanes, gx + p * g.ih * g.iw * g.lanes);
}

void cpu_maxpool_forward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    max_forward(d, x, y);
}

void cpu_maxpool_backward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *dy,
                          tensor_ref *dx)
{
    (void)be;
    max_backward(d, x, dy, dx);
}

void cpu_avgpool_forward(eng_backend *be, const eng_pool_desc *d, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    avg_forward(d, x, y);
}

void cpu_avgpool_backward(eng_backend *be, const eng_pool_desc *d, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    avg_backward(d, dy, dx);
}

void cpu_adaptive_avgpool_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    avg_forward(NULL, x, y);
}

void cpu_adaptive_avgpool_backward(eng_backend *be, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    avg_backward(NULL, dy, dx);
}

void cpu_adaptive_maxpool_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    max_forward(NULL, x, y);
}

void cpu_adaptive_maxpool_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    max_backward(NULL, x, dy, dx);
}

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
 * spread over the OpenMP threads.
 *
 * The forward max pool and the adaptive average pool also read a channel-blocked (nChwBc)
 * input, as an evaluation trunk leaves it (cpu_blocking): a "plane" is then B channels
 * interleaved, element (h, w) of lane l at (h·W + w)·B + l, and each lane goes through exactly
 * the scan and the sum of the plain kernel, so both layouts give the same bits.
 */
#include "cpu.h"

#include <math.h>

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

/* The index in the plane of the window's maximum, scanning rows then columns: the first of
 * equal maxima wins (strict >), and a NaN always takes over so it propagates — both as
 * PyTorch's CPU kernel does. Padding never wins: it is -inf. */
static int64_t window_argmax(const float *plane, int64_t iw, const window *w)
{
    int64_t best = w->h0 * iw + w->w0;
    float top = -INFINITY;
    for (int64_t h = w->h0; h < w->h1; h++)
        for (int64_t c = w->w0; c < w->w1; c++) {
            float v = plane[h * iw + c];
            if (v > top || isnan(v)) {
                top = v;
                best = h * iw + c;
            }
        }
    return best;
}

/* The window's maximum in each of `lanes` interleaved channels (window_argmax's rule), lane
 * l into out[l·ylane]. */
static void window_max_lanes(const float *plane, int64_t iw, int lanes, const window *w, float *out, int64_t ylane)
{
    float top[16]; /* lanes ≤ 16: cpu_blocking's blocks are 8 or 16 */
    for (int l = 0; l < lanes; l++)
        top[l] = -INFINITY;
    for (int64_t h = w->h0; h < w->h1; h++)
        for (int64_t c = w->w0; c < w->w1; c++) {
            const float *v = plane + (h * iw + c) * lanes;
            for (int l = 0; l < lanes; l++)
                top[l] = v[l] > top[l] || isnan(v[l]) ? v[l] : top[l];
        }
    for (int l = 0; l < lanes; l++)
        out[l * ylane] = top[l];
}

/* Each kernel works on one plane (one sample's channel); the layers spread the planes over
 * the OpenMP threads, each plane one thread's, so the result does not depend on their number. */

static void max_forward_plane(const eng_pool_desc *d, const geometry *g, const float *in, float *out)
{
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++, out += g->ystep) {
            window w = window_at(d, g, oh, ow);
            /* an empty window cannot arise from nn.c's shape rule; PyTorch would give -inf */
            window_max_lanes(in, g->iw, g->lanes, &w, out, g->ylane);
        }
}

static void max_backward_plane(const eng_pool_desc *d, const geometry *g, const float *in, const float *gy,
                               float *gx)
{
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++, gy++) {
            window w = window_at(d, g, oh, ow);
            if (w.h0 < w.h1 && w.w0 < w.w1)
                gx[window_argmax(in, g->iw, &w)] += *gy;
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
        for (int64_t ow = 0; ow < g->ow; ow++, gy++) {
            window w = window_at(d, g, oh, ow);
            if (w.divisor <= 0)
                continue;
            float share = *gy / (float)w.divisor;
            for (int64_t h = w.h0; h < w.h1; h++)
                for (int64_t c = w.w0; c < w.w1; c++)
                    gx[h * g->iw + c] += share;
        }
}

static void max_forward(const eng_pool_desc *d, tensor_ref *x, tensor_ref *y)
{
    geometry g = geometry_of(x, y);
    const float *in = cpu_ptr(x);
    float *out = cpu_ptr(y);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; p++)
        max_forward_plane(d, &g, in + p * g.ih * g.iw * g.lanes, out + p * g.oh * g.ow * g.lanes);
}

static void max_backward(const eng_pool_desc *d, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    geometry g = geometry_of(x, dy);
    const float *in = cpu_ptr(x), *gy = cpu_ptr(dy);
    float *gx = cpu_ptr(dx);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; p++)
        max_backward_plane(d, &g, in + p * g.ih * g.iw, gy + p * g.oh * g.ow, gx + p * g.ih * g.iw);
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
        avg_backward_plane(d, &g, gy + p * g.oh * g.ow, gx + p * g.ih * g.iw);
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

/*
 * conv_dw.c — the weight gradient of a depthwise convolution whose kernel oneDNN has no direct
 * backward-weights kernel for.
 *
 * oneDNN 2.6's depthwise backward-weights kernel (jit_dw) takes 3 × 3 kernels only. For any
 * other (EfficientNet's 5 × 5) it falls back to its GEMM-based implementation, which lowers
 * every channel to an im2col and a product of one row: profiling two training steps of
 * EfficientNet-B0 at batch 16, its 18 calls on the 5 × 5 convolutions took 32 of the 43.5
 * seconds spent in oneDNN.
 *
 * A depthwise weight gradient is a small sum per channel and tap:
 *   dw[c, kh, kw] += Σ_n Σ_{oh, ow} dy[n, c, oh, ow] · x[n, c, oh·s − pt + kh, ow·s − pl + kw]
 * over the output pixels whose input pixel is inside the image (the padding's zeros add
 * nothing). Channels are independent, so each thread takes whole channels, and each channel's
 * sums run in one fixed order (rows in float, accumulated in double): the result does not
 * depend on the thread count. A channel's planes are a few kilobytes, so the K² passes over
 * them stay in the core's cache.
 *
 * The forward and the data gradient keep oneDNN's direct depthwise kernels, which exist.
 */
#include "cpu.h"

#include "util.h"

#include <stdlib.h>

struct cpu_conv_dw {
    int64_t n, c, h, w, oh, ow, k, stride, pad_top, pad_left;
};

cpu_conv_dw *cpu_conv_dw_new(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias)
{
    int64_t groups = d->groups ? d->groups : 1;
    int64_t dil_h = d->dilation[0] ? d->dilation[0] : 1, dil_w = d->dilation[1] ? d->dilation[1] : 1;
    int64_t s = d->stride[0] ? d->stride[0] : 1, s_w = d->stride[1] ? d->stride[1] : 1;
    bool depthwise = groups == x->dim[1] && w->dim[0] == groups && w->dim[1] == 1;
    if (!depthwise || bias || dil_h != 1 || dil_w != 1 || s != s_w || w->dim[2] != w->dim[3])
        return NULL;
    eng_shape y = eng_conv_output_shape(x, w, d);
    cpu_conv_dw *g = xcalloc(1, sizeof *g);
    *g = (cpu_conv_dw){.n = x->dim[0], .c = x->dim[1], .h = x->dim[2], .w = x->dim[3], .oh = y.dim[2], .ow = y.dim[3],
                       .k = w->dim[2], .stride = s, .pad_top = d->pad[0], .pad_left = d->pad[1]};
    return g;
}

void cpu_conv_dw_free(cpu_conv_dw *g) { free(g); }

/* The first and one-past-last output index whose input index o·s − pad + tap lies in [0, size). */
static void valid_range(int64_t size, int64_t out, int64_t s, int64_t pad, int64_t tap, int64_t *lo, int64_t *hi)
{
    int64_t first = pad - tap; /* o·s ≥ pad − tap */
    *lo = first > 0 ? (first + s - 1) / s : 0;
    int64_t last = size - 1 + pad - tap; /* o·s ≤ size − 1 + pad − tap */
    *hi = last < 0 ? 0 : last / s + 1;
    *hi = *hi < out ? *hi : out;
    *lo = *lo < *hi ? *lo : *hi;
}

/* Σ over one (sample, channel) plane of dy · x at tap (kh, kw). */
CPU_HOT static double plane_tap(const cpu_conv_dw *g, const float *x, const float *dy, int64_t kh, int64_t kw)
{
    int64_t oh0, oh1, ow0, ow1, s = g->stride;
    valid_range(g->h, g->oh, s, g->pad_top, kh, &oh0, &oh1);
    valid_range(g->w, g->ow, s, g->pad_left, kw, &ow0, &ow1);
    double total = 0.0;
    for (int64_t oh = oh0; oh < oh1; oh++) {
        const float *dyr = dy + oh * g->ow, *xr = x + (oh * s - g->pad_top + kh) * g->w + (ow0 * s - g->pad_left + kw);
        float row = 0.0f;
        for (int64_t ow = ow0; ow < ow1; ow++)
            row += dyr[ow] * xr[(ow - ow0) * s];
        total += row;
    }
    return total;
}

void cpu_conv_dw_backward_weights(cpu_conv_dw *g, const float *x, const float *dy, float *dw)
{
    int64_t plane_x = g->h * g->w, plane_y = g->oh * g->ow, kk = g->k * g->k;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t t = 0; t < kk; t++) {
            double sum = 0.0;
            for (int64_t n = 0; n < g->n; n++) {
                size_t plane = (size_t)(n * g->c + c);
                sum += plane_tap(g, x + plane * (size_t)plane_x, dy + plane * (size_t)plane_y, t / g->k, t % g->k);
            }
            dw[c * kk + t] += (float)sum;
        }
}

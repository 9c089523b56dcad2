/*
 * conv_gemm.c — the backward of a convolution whose output is a single pixel, as two matrix
 * products.
 *
 * Small images leave ResNet's last stage a 1 × 1 map: at 32 px through the ImageNet stem, res5
 * is 1 × 1 and its first (stride-2) convolution reads a 2 × 2 map. A 3 × 3 convolution with
 * padding 1 then multiplies eight of its nine taps by the padding's zeros, and oneDNN's direct
 * kernels, built for maps of many pixels, still walk all nine: on ResNet-18's res5 at batch 256
 * its backward-weights ran at 17 GFLOP/s, against 190 on res4's 2 × 2 maps, and res5's
 * convolutions took 49 of the trunk's 225 ms of convolution a step, 85% of it in the backward.
 *
 * With one output pixel each input pixel is read through at most one tap, so the convolution
 * is exactly y[n, o] = Σ_{i, t} W[o, i, tap t] · x[n, i, pixel t] over the T taps that land
 * inside the image: an N × (I·T) by (I·T) × O product, whose gradients are two more:
 * dx = dy · Wg and dWg = dyᵀ · x, added into the caller's (beta = 1, or a scatter-add), as nn.h's
 * convention asks. The weights' live taps are gathered into an O × I·T matrix Wg on every call
 * (they change every step); x is read in place when its pixels are exactly the taps in order
 * (3 × 3 on 1 × 1, 3 × 3 stride 2 on 2 × 2), else gathered. Only the order of the sums differs
 * from oneDNN's.
 *
 * The forward stays oneDNN's. As a product, its sums would be split along I·T in an order that
 * depends on the thread count (oneDNN's sgemm partitions K by it), so a sample's activations
 * would depend on how many threads, and so how many trainers, computed them; oneDNN's direct
 * forward gives each sample the same sums however the batch is split, which is what lets two
 * trainers train the model one trainer trains (tests/unit/test_ddp.c). It is the cheaper third
 * anyway: the backward was 85% of res5's convolution time. Groups other than 1 and biases keep
 * oneDNN's backward too (cpu_conv_gemm_new says NULL).
 */
#include "cpu.h"

#include "util.h"

#include <stdlib.h>

struct cpu_conv_gemm {
    int64_t n, in, out; /* batch, input and output channels */
    int64_t taps;       /* T: the kernel positions that read a pixel of the image */
    int64_t hw, khw;    /* pixels per input plane, positions per kernel plane */
    int64_t *pixel;     /* tap t reads input pixel pixel[t] (h·W + w) ... */
    int64_t *tap;       /* ... through kernel position tap[t] (kh·KW + kw) */
    bool x_in_place;    /* pixel[t] = t and T = H·W: x already is the N × I·T matrix */
    float *xg, *dxg;    /* x and dx as N × I·T (unused when x_in_place) */
    float *wg, *dwg;    /* the live taps of w and dw as O × I·T */
};

/* The kernel positions of output pixel (0, 0) that land inside the image, row by row; returns
 * their count. Their input pixels increase with t, so all H·W of them means pixel[t] = t. Only
 * the top and left padding place the window; extra zeros below and right (pad_extra) are more
 * taps outside the image, skipped like the rest, so an asymmetric padding needs nothing else. */
static int64_t live_taps(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, int64_t *pixel,
                         int64_t *tap)
{
    int64_t h = x->dim[2], wd = x->dim[3], kh = w->dim[2], kw = w->dim[3], t = 0;
    int64_t dil_h = d->dilation[0] ? d->dilation[0] : 1, dil_w = d->dilation[1] ? d->dilation[1] : 1;
    for (int64_t a = 0; a < kh; a++)
        for (int64_t b = 0; b < kw; b++) {
            int64_t ih = a * dil_h - d->pad[0], iw = b * dil_w - d->pad[1];
            if (ih < 0 || ih >= h || iw < 0 || iw >= wd)
                continue;
            pixel[t] = ih * wd + iw;
            tap[t++] = a * kw + b;
        }
    return t;
}

cpu_conv_gemm *cpu_conv_gemm_new(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias)
{
    eng_shape y = eng_conv_output_shape(x, w, d);
    if (bias || (d->groups && d->groups != 1) || y.dim[2] != 1 || y.dim[3] != 1)
        return NULL;
    cpu_conv_gemm *g = xcalloc(1, sizeof *g);
    g->n = x->dim[0], g->in = x->dim[1], g->out = w->dim[0];
    g->hw = x->dim[2] * x->dim[3], g->khw = w->dim[2] * w->dim[3];
    g->pixel = xcalloc((size_t)g->khw, sizeof *g->pixel);
    g->tap = xcalloc((size_t)g->khw, sizeof *g->tap);
    g->taps = live_taps(d, x, w, g->pixel, g->tap);
    if (g->taps == 0) { /* every tap in the padding: y = 0; not worth a path of its own */
        cpu_conv_gemm_free(g);
        return NULL;
    }
    g->x_in_place = g->taps == g->hw;
    size_t k = (size_t)(g->in * g->taps);
    if (!g->x_in_place) {
        g->xg = xmalloc_large((size_t)g->n * k * sizeof(float));
        g->dxg = xmalloc_large((size_t)g->n * k * sizeof(float));
    }
    g->wg = xmalloc_large((size_t)g->out * k * sizeof(float));
    g->dwg = xmalloc_large((size_t)g->out * k * sizeof(float));
    return g;
}

void cpu_conv_gemm_free(cpu_conv_gemm *g)
{
    if (!g)
        return;
    free(g->pixel), free(g->tap), free(g->xg), free(g->dxg), free(g->wg), free(g->dwg);
    free(g);
}

/* Row r of a rows × (I·T) matrix from (or into) row r of a rows × I × plane tensor, through the
 * index list `at` (pixel or tap). */
static void gather_rows(const cpu_conv_gemm *g, const float *src, int64_t rows, int64_t plane, const int64_t *at,
                        float *dst)
{
#pragma omp parallel for schedule(static) if (rows * g->in * g->taps >= 32768)
    for (int64_t r = 0; r < rows * g->in; r++)
        for (int64_t t = 0; t < g->taps; t++)
            dst[r * g->taps + t] = src[r * plane + at[t]];
}

static void scatter_add_rows(const cpu_conv_gemm *g, const float *src, int64_t rows, int64_t plane,
                             const int64_t *at, float *dst)
{
#pragma omp parallel for schedule(static) if (rows * g->in * g->taps >= 32768)
    for (int64_t r = 0; r < rows * g->in; r++)
        for (int64_t t = 0; t < g->taps; t++)
            dst[r * plane + at[t]] += src[r * g->taps + t];
}

/* x as the N × I·T matrix: itself, or gathered. */
static const float *x_matrix(cpu_conv_gemm *g, const float *x)
{
    if (g->x_in_place)
        return x;
    gather_rows(g, x, g->n, g->hw, g->pixel, g->xg);
    return g->xg;
}

void cpu_conv_gemm_backward(cpu_conv_gemm *g, const float *x, const float *w, const float *dy, float *dx, float *dw)
{
    int64_t k = g->in * g->taps;
    if (dx) { /* dx (N × K) += dy (N × O) · wg (O × K) */
        gather_rows(g, w, g->out, g->khw, g->tap, g->wg);
        if (g->x_in_place) {
            cpu_sgemm('N', 'N', g->n, k, g->out, dy, g->out, g->wg, k, 1.0f, dx, k);
        } else {
            cpu_sgemm('N', 'N', g->n, k, g->out, dy, g->out, g->wg, k, 0.0f, g->dxg, k);
            scatter_add_rows(g, g->dxg, g->n, g->hw, g->pixel, dx);
        }
    }
    if (dw) { /* dwg (O × K) = dyᵀ (O × N) · x (N × K), then added into dw's live taps */
        cpu_sgemm('T', 'N', g->out, k, g->n, dy, g->out, x_matrix(g, x), k, 0.0f, g->dwg, k);
        scatter_add_rows(g, g->dwg, g->out, g->khw, g->tap, dw);
    }
}

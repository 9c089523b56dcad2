/*
 * descriptors.c — one image's activation map to one descriptor: R-MAC (Tolias et al.'s regional
 * maximum activations, rmac.py) and GeM (generalized-mean pooling, data_util.py's gem and l2n).
 *
 * The region grid is rmac.py's translation of the Matlab original, kept step for step: the one
 * float32 computation in it (the overlap search over numpy float32 steps) is float here too, so
 * the grid is the same for every map size. Sums are in double; a map holds C × H × W floats.
 */
#include "retrieval/retrieval.h"

#include <math.h>
#include <string.h>

/* How many extra regions the longer side gets (rmac.py's idx): the step count whose overlap is
 * closest to 40 %, computed as numpy does in float32. */
static int rmac_extra_steps(int H, int W)
{
    const float ovr = 0.4f;
    int w = H < W ? H : W, longer = H < W ? W : H;
    int best = 0;
    float best_err = INFINITY;
    for (int s = 2; s <= 7; s++) {
        float b = (float)(longer - w) / (float)(s - 1);
        float e = fabsf(((float)w * (float)w - (float)w * b) / (float)(w * w) - ovr);
        if (e < best_err) { /* argmin: the first of equal values */
            best_err = e;
            best = s - 2;
        }
    }
    return best + 1;
}

/* Region corners along one side of `len` at one level: floor(wl2 + b·i) − wl2 for i < count. */
static int level_starts(int len, double wl, double wl2, int count, double *out)
{
    double b = count > 1 ? (len - wl) / (count - 1) : 0;
    for (int i = 0; i < count; i++)
        out[i] = floor(wl2 + b * i) - wl2;
    return count;
}

int rmac_regions(int H, int W, int L, int (*out)[4])
{
    int idx = rmac_extra_steps(H, W);
    int Wd = H < W ? idx : 0, Hd = H > W ? idx : 0;
    double w = H < W ? H : W;
    int n = 0;
    for (int l = 1; l <= L; l++) {
        double wl = floor(2 * w / (l + 1)), wl2 = floor(wl / 2 - 1);
        double cx[16], cy[16]; /* l + extra <= L + 7; L is held to 8 by the caller */
        int nx = level_starts(W, wl, wl2, l + Wd, cx), ny = level_starts(H, wl, wl2, l + Hd, cy);
        for (int i = 0; i < ny; i++)
            for (int j = 0; j < nx; j++, n++) {
                if (!out)
                    continue;
                int x = (int)nearbyint(cx[j]), y = (int)nearbyint(cy[i]), s = (int)nearbyint(wl);
                out[n][0] = x + s > W ? W - s : x; /* "careful with the borders" */
                out[n][1] = y + s > H ? H - s : y;
                out[n][2] = out[n][3] = s;
            }
    }
    return n;
}

void l2_normalize(float *x, size_t n)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    if (ss <= 0)
        return;
    double inv = 1 / sqrt(ss);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(x[i] * inv);
}

/* The maximum of channel c over a region. */
static float region_max(const float *plane, int W, const int r[4])
{
    float m = -INFINITY;
    for (int y = r[1]; y < r[1] + r[3]; y++)
        for (int x = r[0]; x < r[0] + r[2]; x++)
            m = plane[(size_t)y * W + x] > m ? plane[(size_t)y * W + x] : m;
    return m;
}

void rmac_region_vectors(const float *map, int C, int H, int W, const int (*regions)[4], int nr, float *out)
{
    for (int k = 0; k < nr; k++) {
        float *v = out + (size_t)k * C;
        for (int c = 0; c < C; c++)
            v[c] = region_max(map + (size_t)c * H * W, W, regions[k]);
        l2_normalize(v, (size_t)C);
    }
}

void rmac_aggregate(const float *rows, int nr, int n, float *out)
{
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < nr; k++)
            s += rows[(size_t)k * n + i];
        out[i] = (float)s;
    }
    l2_normalize(out, (size_t)n);
}

/* One channel's generalized mean. */
static double gem_channel(const float *plane, size_t hw, double p)
{
    double acc = isinf(p) ? -INFINITY : 0;
    for (size_t i = 0; i < hw; i++) {
        if (isinf(p))
            acc = plane[i] > acc ? plane[i] : acc;
        else if (p == 1)
            acc += plane[i];
        else
            acc += pow(plane[i] > 1e-6f ? plane[i] : 1e-6f, p);
    }
    if (isinf(p))
        return acc;
    return p == 1 ? acc / (double)hw : pow(acc / (double)hw, 1 / p);
}

void gem_descriptor(const float *map, int C, int H, int W, double p, float *out)
{
    size_t hw = (size_t)H * W;
    double ss = 1; /* the bias channel */
    for (int c = 0; c < C; c++) {
        out[c] = (float)gem_channel(map + (size_t)c * hw, hw, p);
        ss += (double)out[c] * out[c];
    }
    out[C] = 1;
    double denom = sqrt(ss) + 1e-6;
    for (int c = 0; c <= C; c++)
        out[c] = (float)(out[c] / denom);
}

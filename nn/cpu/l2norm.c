/*
 * l2norm.c — rows scaled to unit length, as torch.nn.functional.normalize(x, dim=1,
 * eps=1e-12) (SwAV's and SimCLR's heads end with it).
 *
 * With r = max(‖x‖, eps) and y = x / r, the backward is
 *     dx = (dy − y·(y·dy)) / r     when ‖x‖ > eps,
 *     dx = dy / eps                otherwise (r is then a constant),
 * the projection of dy onto the sphere's tangent, scaled by 1/r. Norms and dot products
 * are summed in double: rows are long (2048+) and the result feeds a softmax.
 */
#include "cpu.h"

#include <math.h>

#define L2_EPS 1e-12

static double row_norm(const float *x, int64_t f)
{
    double s = 0.0;
    for (int64_t i = 0; i < f; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

void cpu_l2norm_forward(eng_backend *be, tensor_ref *x, tensor_ref *y)
{
    (void)be;
    int64_t n = x->shape.dim[0], f = x->shape.dim[1];
    for (int64_t r = 0; r < n; r++) {
        const float *in = cpu_ptr(x) + r * f;
        float *out = cpu_ptr(y) + r * f;
        double norm = row_norm(in, f), denom = norm > L2_EPS ? norm : L2_EPS;
        for (int64_t i = 0; i < f; i++)
            out[i] = (float)(in[i] / denom);
    }
}

void cpu_l2norm_backward(eng_backend *be, tensor_ref *x, tensor_ref *dy, tensor_ref *dx)
{
    (void)be;
    int64_t n = x->shape.dim[0], f = x->shape.dim[1];
    for (int64_t r = 0; r < n; r++) {
        const float *in = cpu_ptr(x) + r * f, *g = cpu_ptr(dy) + r * f;
        float *out = cpu_ptr(dx) + r * f;
        double norm = row_norm(in, f);
        if (norm <= L2_EPS) {
            for (int64_t i = 0; i < f; i++)
                out[i] += (float)(g[i] / L2_EPS);
            continue;
        }
        double dot = 0.0; /* y·dy, with y = x / norm */
        for (int64_t i = 0; i < f; i++)
            dot += (double)in[i] * g[i];
        dot /= norm;
        for (int64_t i = 0; i < f; i++)
            out[i] += (float)((g[i] - in[i] / norm * dot) / norm);
    }
}

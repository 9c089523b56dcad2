/*
 * dropout.c — inverted dropout with a mask that is never stored.
 *
 * Whether element i is kept at step s is decided by Philox4x32-10 (rng.h) keyed by the
 * backend's seed, with the counter (i / 4, RNG_PURPOSE_TRAIN, s): four decisions per block.
 * The backward recomputes the same mask, so dropout costs no memory, and the mask does not
 * depend on the thread count or on the order elements are visited. (PyTorch's mask comes
 * from its own generator; parity is on the distribution, not the bits.)
 */
#include "cpu.h"

#include "rng.h"

/* 1 when element i is kept. */
static void keep_block(uint64_t seed, uint64_t step, int64_t block, float p, float keep[4])
{
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)((uint64_t)block >> 32) | (uint32_t)RNG_PURPOSE_TRAIN << 16,
                       (uint32_t)step, (uint32_t)(step >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    philox4x32_10(ctr, key, out);
    for (int k = 0; k < 4; k++) /* 24-bit uniform in [0, 1), as torch's bernoulli draws */
        keep[k] = (float)(out[k] >> 8) * (1.0f / 16777216.0f) >= p ? 1.0f : 0.0f;
}

/* out[i] (+)= in[i] · mask[i] / (1-p); `accumulate` for the backward. */
static void apply(eng_backend *be, float p, uint64_t step, tensor_ref *src, tensor_ref *dst, bool accumulate)
{
    const float *in = cpu_ptr(src);
    float *out = cpu_ptr(dst);
    int64_t n = eng_numel(&src->shape);
    float scale = 1.0f / (1.0f - p), keep[4] = {1, 1, 1, 1};
    for (int64_t i = 0; i < n; i++) {
        if (p > 0.0f && i % 4 == 0)
            keep_block(be->opt.seed, step, i / 4, p, keep);
        float v = p > 0.0f ? in[i] * keep[i % 4] * scale : in[i];
        out[i] = accumulate ? out[i] + v : v;
    }
}

void cpu_dropout_forward(eng_backend *be, float p, uint64_t step, tensor_ref *x, tensor_ref *y)
{
    apply(be, p, step, x, y, false);
}

void cpu_dropout_backward(eng_backend *be, float p, uint64_t step, tensor_ref *dy, tensor_ref *dx)
{
    apply(be, p, step, dy, dx, true);
}

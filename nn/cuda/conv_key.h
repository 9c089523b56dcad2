/*
 * conv_key.h — what identifies a convolution to the cuda backend's algorithm cache.
 *
 * cuDNN's choice of algorithms depends only on the shapes, the geometry, the precision (fp32, or
 * bf16 in NHWC for mixed precision) and whether only deterministic algorithms may run, so a
 * plan whose key was seen before reuses that choice instead of asking cuDNN again (ResNet-50 repeats each of its few shapes many times, and a
 * model is planned again for every new input resolution). Plain C with no CUDA header, so the
 * unit tests check the keys on any machine.
 */
#ifndef SELFSUP_NN_CUDA_CONV_KEY_H
#define SELFSUP_NN_CUDA_CONV_KEY_H

#include "../nn.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t x[4], w[4];                     /* input N×C×H×W, weight O×I/g×KH×KW */
    int64_t stride[2], pad[2], dilation[2]; /* with PyTorch's defaults filled in (0 → 1) */
    int64_t pad_extra[2];                   /* cuDNN then sees x with these zeros appended */
    int64_t groups;
    bool deterministic;
    eng_precision precision;
} conv_key;

/* The key of a convolution as eng_conv_plan describes it: two descriptions that mean the same
 * convolution (stride 0 and stride 1, groups 0 and 1) give equal keys. */
conv_key conv_key_of(const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool deterministic,
                     eng_precision precision);
bool conv_key_equal(const conv_key *a, const conv_key *b);

#ifdef __cplusplus
}
#endif

#endif

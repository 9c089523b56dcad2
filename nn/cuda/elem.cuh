/*
 * elem.cuh — the element types a cuda kernel reads and writes (for .cu files only).
 *
 * Under mixed precision (ENG_BF16) a NATIVE tensor is bf16 in NHWC order (cuda.h); every other
 * tensor is fp32. Kernels that take either are templates over the stored type T and go
 * through these two functions: arithmetic is in float (or double) whatever T is, a value is
 * widened exactly when read and rounded once, to nearest even, when stored. With T = float
 * both are the identity, so the fp32 kernels' arithmetic does not change.
 */
#ifndef SELFSUP_NN_CUDA_ELEM_CUH
#define SELFSUP_NN_CUDA_ELEM_CUH

#include "cuda.h"

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

__device__ static inline float to_float(float v) { return v; }
__device__ static inline float to_float(bf16 v) { return __bfloat162float(v); }
__device__ static inline void store(float *p, float v) { *p = v; }
__device__ static inline void store(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* A tensor's first element as stored: bf16 where it is a mixed-precision NATIVE one. */
static inline bf16 *cuda_bf16_ptr(const eng_tensor *t) { return (bf16 *)((char *)t->base + t->offset); }

#endif

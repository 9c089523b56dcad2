/*
 * amp.cu — the layout-and-precision conversions behind mixed precision (dnn.c's bf16 plans,
 * and cuda.c's upload, download and copy of a NATIVE tensor, which is bf16 NHWC then).
 *
 * With ENG_BF16 a convolution runs in cuDNN's bf16 NHWC kernels (the tensor cores' layout).
 * A NATIVE activation already is one; a LOGICAL fp32 NCHW one goes through to_nhwc_bf16 into
 * a scratch slot, the weight too (O×I×KH×KW is, per output channel, the same C×S to S×C
 * transpose), and a bf16 result meant for a LOGICAL tensor comes back through from_nhwc_bf16,
 * written (a forward's output) or added (nn.h's accumulating gradients). Both are one tiled transpose:
 * a 32×32 tile of the C×S plane goes through shared memory so that reads and writes are both
 * along contiguous addresses, and each value is rounded to bf16 (nearest, ties to even) or
 * widened from it exactly.
 */
#include "cuda.h"

#include <cuda_bf16.h>

enum { TILE = 32, TILE_ROWS = 8 };

/* Grid for n transposes of a rows×cols matrix: tiles over cols (x) and rows (y), matrices over
 * z (a grid-stride loop past the 65535 a z dimension takes). */
static dim3 transpose_grid(int64_t n, int64_t rows, int64_t cols)
{
    if ((rows + TILE - 1) / TILE > 65535)
        cuda_fail("a bf16 conversion", "a plane of more than 2 097 120 rows", __FILE__, __LINE__);
    return dim3((unsigned)((cols + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE),
                (unsigned)(n < 65535 ? n : 65535));
}

__device__ static float widen(float v) { return v; }
__device__ static float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ static void store(float *p, float v, bool accumulate) { *p = accumulate ? *p + v : v; }
__device__ static void store(__nv_bfloat16 *p, float v, bool) { *p = __float2bfloat16_rn(v); }

/* dst[i] = src[i]ᵀ for each of n rows×cols matrices, converted from In to Out on the way
 * (with `accumulate`, an fp32 dst is added to). */
template <typename In, typename Out>
__global__ void transpose_kernel(const In *src, Out *dst, int64_t n, int64_t rows, int64_t cols, bool accumulate)
{
    __shared__ float tile[TILE][TILE + 1]; /* +1: a column read hits 32 different banks */
    int64_t c0 = (int64_t)blockIdx.x * TILE, r0 = (int64_t)blockIdx.y * TILE;
    for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
        const In *in = src + i * rows * cols;
        Out *out = dst + i * rows * cols;
        for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) { /* along a row of src: coalesced */
            int64_t r = r0 + j, c = c0 + threadIdx.x;
            if (r < rows && c < cols)
                tile[j][threadIdx.x] = widen(in[r * cols + c]);
        }
        __syncthreads();
        for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) { /* along a row of dst: coalesced */
            int64_t c = c0 + j, r = r0 + threadIdx.x;
            if (r < rows && c < cols)
                store(&out[c * rows + r], tile[threadIdx.x][j], accumulate);
        }
        __syncthreads();
    }
}

extern "C" void cuda_to_nhwc_bf16(eng_backend *be, const float *src, void *dst, int64_t n, int64_t c, int64_t s)
{
    if (n * c * s == 0)
        return;
    transpose_kernel<<<transpose_grid(n, c, s), dim3(TILE, TILE_ROWS), 0, cuda_stream(be)>>>(
        src, (__nv_bfloat16 *)dst, n, c, s, false);
    CUDA_LAUNCHED();
}

extern "C" void cuda_from_nhwc_bf16(eng_backend *be, const void *src, float *dst, int64_t n, int64_t c, int64_t s,
                                    bool accumulate)
{
    if (n * c * s == 0)
        return;
    transpose_kernel<<<transpose_grid(n, s, c), dim3(TILE, TILE_ROWS), 0, cuda_stream(be)>>>(
        (const __nv_bfloat16 *)src, dst, n, s, c, accumulate);
    CUDA_LAUNCHED();
}


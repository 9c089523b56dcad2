/*
 * blur_internal.h — what blur.c and color.c share and img.h does not promise: PIL's SMOOTH
 * 3x3 filter (the degenerate image of ImageEnhance.Sharpness) and the vector helpers both
 * files use.
 *
 * Vectors: GCC/clang vector extensions, 8 lanes of 32 bits. 32 bytes of a row are read as
 * eight 32-bit words and split into their bytes without any shuffle, so "lane vector" m
 * holds samples m, 4+m, 8+m, ... of the block; results are or-ed back with the same shifts,
 * which restores the byte order. Lane-wise the arithmetic is exactly the scalar C (same
 * IEEE float or unsigned operations in the same order), so results do not depend on the
 * target. On x86-64 GCC the hot loops are also built for AVX2 and chosen at load time.
 */
#ifndef SELFSUP_AUGMENT_BLUR_INTERNAL_H
#define SELFSUP_AUGMENT_BLUR_INTERNAL_H

#include "augment/img.h"

#include <stdint.h>
#include <string.h>

typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));
enum { VBLOCK = 32 }; /* bytes per block: four lane vectors of 8 */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SIMD_CLONES
#endif

/* The 32 bytes at p as eight little-endian words. */
#define VLOAD(w, p) memcpy(&(w), (p), sizeof(w))
/* Byte m of every word, as int32 lanes. */
#define VBYTE(w, m) ((i32x8)(((w) >> (8 * (m))) & 0xff))
/* Truncate float lanes to int, clip to 0..255 (a float in (-1, 0) truncates to 0, as
 * PIL's "<= 0 -> 0" wants) and or them into byte m of res. */
#define VPUT(res, t, m)                                                                    \
    do {                                                                                   \
        i32x8 q_ = __builtin_convertvector((t), i32x8);                                    \
        q_ &= ~(q_ >> 31);                                                                 \
        i32x8 big_ = q_ > 255;                                                             \
        q_ = (q_ & ~big_) | (big_ & 255);                                                  \
        (res) |= (u32x8)q_ << (8 * (m));                                                   \
    } while (0)

/* dst := src.filter(ImageFilter.SMOOTH): kernel (1 1 1 / 1 5 1 / 1 1 1) / 13 in PIL's float
 * arithmetic; the first and last row and column are copied from src, and an image narrower
 * or shorter than 3 is copied whole, as PIL does. src and dst have the same size and
 * channels and must not overlap. */
void img_smooth3x3(const img_u8 *src, img_u8 *dst);

#endif

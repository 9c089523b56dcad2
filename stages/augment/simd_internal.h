/*
 * simd_internal.h — SIMD pieces that several pixel kernels share (resample.c, blur.c). x86-64
 * with GCC or clang only; each function is compiled for its target and called only after a
 * run-time check of the CPU.
 */
#ifndef SELFSUP_AUGMENT_SIMD_INTERNAL_H
#define SELFSUP_AUGMENT_SIMD_INTERNAL_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* dst[x * line + 3 r + ch] = in[r][3 x + ch] for the 8 rows at in (stride apart), x < w. Four
 * pixels of each row are widened to RGBX words with a shuffle, transposed 4x8 as words, and
 * each column's 8 words squeezed back to 24 bytes of RGB. */
__attribute__((target("avx2"))) static inline void transpose8_rgb_avx2(const uint8_t *in, size_t stride, int w,
                                                                     uint8_t *dst, size_t line)
{
    const __m128i widen = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    const __m256i squeeze = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1,
                                             -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1,
                                             -1, -1);
    const __m256i join = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
    int x = 0;
    for (; x + 6 <= w; x += 4) { /* a 16-byte load at pixel x stays inside the row */
        __m256i a[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *p = in + (size_t)r * stride + 3 * (size_t)x;
            __m128i lo = _mm_loadu_si128((const __m128i *)p);
            __m128i hi = _mm_loadu_si128((const __m128i *)(p + 4 * stride));
            a[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_shuffle_epi8(lo, widen)),
                                           _mm_shuffle_epi8(hi, widen), 1);
        }
        /* a[r] = [row r: p0 p1 p2 p3 | row r+4: p0 p1 p2 p3] */
        __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
        __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
        __m256i c4[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                         _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
        uint8_t *o = dst + (size_t)x * line;
        for (int j = 0; j < 4; j++, o += line) {
            __m256i v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(c4[j], squeeze), join);
            _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(v));
            _mm_storel_epi64((__m128i *)(o + 16), _mm256_extracti128_si256(v, 1));
        }
    }
    for (; x < w; x++)
        for (int r = 0; r < 8; r++)
            memcpy(dst + (size_t)x * line + 3 * r, in + (size_t)r * stride + 3 * (size_t)x, 3);
}

/* out[r][3x + ch] = ocol[step x + 3r + ch] for the 8 rows out[r] and x < n: the inverse of
 * transpose8_rgb_avx2 (with `step` for its `line`), writing to 8 row pointers (which may repeat a
 * dummy row for a short block). Four pixels of each of the 8 rows a step: the
 * 24-byte entries are widened to RGBX words, transposed 4x8 and squeezed back to RGB. The
 * 16-byte stores run 4 bytes into the next pixels of the row, written afterwards; the loads
 * read 4 bytes past an entry's 24 (`ocol` needs 4 spare bytes after the last). */
__attribute__((target("avx2"))) static inline void transpose8_rgb_back_avx2(const uint8_t *ocol, size_t step, int n,
                                                                          uint8_t *const out[8])
{
    const __m128i widen = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    const __m256i squeeze = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1,
                                             -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1,
                                             -1, -1);
    int x = 0;
    for (; x + 6 <= n; x += 4) { /* a 16-byte store at pixel x stays inside the row */
        __m256i a[4];
        for (int j = 0; j < 4; j++) {
            const uint8_t *p = ocol + (size_t)(x + j) * step;
            __m128i lo = _mm_loadu_si128((const __m128i *)p);        /* rows 0-3 */
            __m128i hi = _mm_loadu_si128((const __m128i *)(p + 12)); /* rows 4-7 */
            a[j] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_shuffle_epi8(lo, widen)),
                                           _mm_shuffle_epi8(hi, widen), 1);
        }
        /* a[j] = [pixel x+j: rows 0 1 2 3 | rows 4 5 6 7] */
        __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
        __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
        __m256i rw[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                         _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
        for (int r = 0; r < 4; r++) { /* rw[r] = [row r: x..x+3 | row r+4: x..x+3] */
            __m256i v = _mm256_shuffle_epi8(rw[r], squeeze);
            _mm_storeu_si128((__m128i *)(out[r] + 3 * (size_t)x), _mm256_castsi256_si128(v));
            _mm_storeu_si128((__m128i *)(out[r + 4] + 3 * (size_t)x),
                             _mm256_extracti128_si256(v, 1));
        }
    }
    for (; x < n; x++)
        for (int r = 0; r < 8; r++)
            memcpy(out[r] + 3 * (size_t)x, ocol + (size_t)x * step + 3 * r, 3);
}

#endif

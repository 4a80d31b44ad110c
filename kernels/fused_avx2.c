/* fused_avx2.c — the fused kernel's AVX2+FMA path: 8 query rows per vector,
 * tiles of 8 keys, 4 output columns per P·V step (8 score vectors + 4
 * accumulators + the rescale factor + a broadcast fit the 16 ymm registers).
 * Compiled with AVX2 flags; reached only after simd.c has checked CPUID. */
#include "fused_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>

#define VL            8
#define KT            8
#define PVC           4
#define FUSED_NAME(x) x##_avx2
typedef __m256 vf;

static inline vf v_zero(void) {
    return _mm256_setzero_ps();
}
static inline vf v_set1(float x) {
    return _mm256_set1_ps(x);
}
static inline vf v_load(const float *p) {
    return _mm256_loadu_ps(p);
}
static inline vf v_bcast(const float *p) {
    return _mm256_broadcast_ss(p);
}
static inline void v_store(float *p, vf x) {
    _mm256_storeu_ps(p, x);
}
static inline vf v_add(vf a, vf b) {
    return _mm256_add_ps(a, b);
}
static inline vf v_sub(vf a, vf b) {
    return _mm256_sub_ps(a, b);
}
static inline vf v_mul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}
static inline vf v_div(vf a, vf b) {
    return _mm256_div_ps(a, b);
}
static inline vf v_fma(vf a, vf b, vf c) {
    return _mm256_fmadd_ps(a, b, c);
}
static inline vf v_max(vf a, vf b) {
    return _mm256_max_ps(a, b);
}

static inline vf v_pow2_bits(vf t) {
    const __m256i e = _mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}

static inline vf v_fill_below(vf x, int n, float fill) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i hide = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
    return _mm256_blendv_ps(x, _mm256_set1_ps(fill), _mm256_castsi256_ps(hide));
}

static inline vf v_fill_from(vf x, int n, float fill) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), x, _mm256_castsi256_ps(keep));
}

/* 8×8 transpose: 2×2 blocks (unpack), 4×4 within 128-bit lanes (shuffle),
 * then the lanes across registers (permute2f128). Fully unrolled so the
 * rows stay in registers. */
static inline void v_transpose(float *dst, size_t ds, const float *src, size_t ss) {
    __m256 r[8], t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + (size_t)i * ss);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; g += 4) {
        /* r[g + c] becomes: lane L holds column 4L + c of rows g..g+3 */
        r[g] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 8
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(dst + (size_t)c * ds, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
        _mm256_storeu_ps(dst + (size_t)(4 + c) * ds, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
    }
}

#include "fused_tile.h"
#endif

/* fused_avx512.c — the fused kernel's AVX-512 path: 16 query rows per vector,
 * tiles of 16 keys, 8 output columns per P·V step (16 score vectors + 8
 * accumulators + the rescale factor fit the 32 zmm registers). Compiled with
 * AVX-512 flags; reached only after simd.c has checked CPUID. */
#include "fused_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>

#define VL            16
#define KT            16
#define PVC           8
#define FUSED_NAME(x) x##_avx512
typedef __m512 vf;

static inline vf v_zero(void) {
    return _mm512_setzero_ps();
}
static inline vf v_set1(float x) {
    return _mm512_set1_ps(x);
}
static inline vf v_load(const float *p) {
    return _mm512_loadu_ps(p);
}
static inline vf v_bcast(const float *p) {
    return _mm512_set1_ps(*p);
}
static inline void v_store(float *p, vf x) {
    _mm512_storeu_ps(p, x);
}
static inline vf v_add(vf a, vf b) {
    return _mm512_add_ps(a, b);
}
static inline vf v_sub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
}
static inline vf v_mul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
static inline vf v_div(vf a, vf b) {
    return _mm512_div_ps(a, b);
}
static inline vf v_fma(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}
static inline vf v_max(vf a, vf b) {
    return _mm512_max_ps(a, b);
}

static inline vf v_pow2_bits(vf t) {
    const __m512i e = _mm512_add_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

static inline vf v_fill_below(vf x, int n, float fill) {
    const __mmask16 keep = n <= 0 ? (__mmask16)0xffff : n >= VL ? 0 : (__mmask16)(0xffffu << n);
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), keep, x);
}

static inline vf v_fill_from(vf x, int n, float fill) {
    const __mmask16 keep = n <= 0 ? 0 : n >= VL ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), keep, x);
}

/* 16×16 transpose: 2×2 blocks of floats (unpack ps), then 4×4 (unpack pd),
 * then the 128-bit lanes across registers (shuffle_f32x4, two steps).
 * Fully unrolled so the 16 rows stay in registers. */
static inline void v_transpose(float *dst, size_t ds, const float *src, size_t ss) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(src + (size_t)i * ss);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int g = 0; g < 16; g += 4) {
        /* r[g + c] becomes: lane L holds column 4L + c of rows g..g+3 */
        const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]),
                      c = _mm512_castps_pd(t[g + 2]), d = _mm512_castps_pd(t[g + 3]);
        r[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        const __m512 lo01 = _mm512_shuffle_f32x4(r[c], r[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi01 = _mm512_shuffle_f32x4(r[c], r[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 lo23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
        _mm512_storeu_ps(dst + (size_t)(c)*ds,
                         _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_ps(dst + (size_t)(4 + c) * ds,
                         _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_storeu_ps(dst + (size_t)(8 + c) * ds,
                         _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_ps(dst + (size_t)(12 + c) * ds,
                         _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1)));
    }
}

#include "fused_tile.h"
#endif

/* gelu_avx512.c — the GELU of gelu_impl.h on 16-float AVX-512 vectors.
 * Compiled with AVX-512 flags; reached only after simd.c has checked CPUID. */
#include "gelu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define VL           16
#define GELU_NAME(x) x##_avx512
typedef __m512 vf;

void bert_gelu_avx512(float *x, size_t rows, size_t cols, size_t stride);

static inline vf v_set1(float a) {
    return _mm512_set1_ps(a);
}
static inline vf v_load(const float *p) {
    return _mm512_loadu_ps(p);
}
static inline void v_store(float *p, vf a) {
    _mm512_storeu_ps(p, a);
}
static inline vf v_mul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
static inline vf v_sub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
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
static inline vf v_neg(vf a) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u)));
}
static inline vf v_abs(vf a) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
}
static inline vf v_round(vf a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^n for integral n in [-126, 127], built in the exponent field. */
static inline vf v_pow2(vf n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
/* neg where x < 0, else pos. */
static inline vf v_select_neg(vf x, vf neg, vf pos) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), pos, neg);
}

#include "gelu_impl.h"
#endif

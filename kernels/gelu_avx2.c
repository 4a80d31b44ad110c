/* gelu_avx2.c — the GELU of gelu_impl.h on 8-float AVX2+FMA vectors.
 * Compiled with AVX2 flags; reached only after simd.c has checked CPUID. */
#include "gelu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define VL           8
#define GELU_NAME(x) x##_avx2
typedef __m256 vf;

void bert_gelu_avx2(float *x, size_t rows, size_t cols, size_t stride);

static inline vf v_set1(float a) {
    return _mm256_set1_ps(a);
}
static inline vf v_load(const float *p) {
    return _mm256_loadu_ps(p);
}
static inline void v_store(float *p, vf a) {
    _mm256_storeu_ps(p, a);
}
static inline vf v_mul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}
static inline vf v_sub(vf a, vf b) {
    return _mm256_sub_ps(a, b);
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
static inline vf v_neg(vf a) {
    return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f));
}
static inline vf v_abs(vf a) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}
static inline vf v_round(vf a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^n for integral n in [-126, 127], built in the exponent field. */
static inline vf v_pow2(vf n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
/* neg where x < 0, else pos. */
static inline vf v_select_neg(vf x, vf neg, vf pos) {
    return _mm256_blendv_ps(pos, neg, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}

#include "gelu_impl.h"
#endif

/* gemm_norm_avx512.c — the LayerNorm row of the GEMM epilogues (and of the
 * embeddings) on AVX-512. The arithmetic is gemm_layernorm_row's: mean and
 * variance in double over two passes, the centred value (x - mean) computed
 * in double and rounded once to float, then · rstd · w + b in float as
 * separate roundings (the vector code does not fuse them; the scalar tail
 * follows the same C contraction rules as the portable path, off under gcc
 * -std=c11), so it differs from the portable path only in the order (and
 * the fused rounding) of the double sums. Eight doubles per vector, two chains per sum: the
 * portable loop's single chain of dependent double adds made the LayerNorm of a 384-wide row cost
 * about a twentieth of the row's whole GEMM work. Compiled with AVX-512 flags; reached only after
 * simd.c has checked CPUID. */
#include "gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>

void gemm_layernorm_row_avx512(float *y, const float *x, const float *w, const float *b, int n,
                               float eps);

void gemm_layernorm_row_avx512(float *y, const float *x, const float *w, const float *b, int n,
                               float eps) {
    /* Whole 16-float blocks in vectors; a ragged tail (none at the widths
     * of the models served) by scalars. */
    const int nv = n & ~15;
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < nv; i += 16) {
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm256_loadu_ps(x + i)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)));
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (int i = nv; i < n; i++)
        sum += x[i];
    const double mean = sum / n;

    const __m512d mv = _mm512_set1_pd(mean);
    s0 = s1 = _mm512_setzero_pd();
    for (int i = 0; i < nv; i += 16) {
        const __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), mv);
        const __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)), mv);
        s0 = _mm512_fmadd_pd(d0, d0, s0);
        s1 = _mm512_fmadd_pd(d1, d1, s1);
    }
    double var = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (int i = nv; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    const float rstd = (float)(1.0 / sqrt(var / n + eps));

    const __m512 rv = _mm512_set1_ps(rstd);
    for (int i = 0; i < nv; i += 16) {
        const __m256 c0 =
            _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), mv));
        const __m256 c1 =
            _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)), mv));
        const __m512 c = _mm512_insertf32x8(_mm512_castps256_ps512(c0), c1, 1);
        _mm512_storeu_ps(y + i,
                         _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(c, rv), _mm512_loadu_ps(w + i)),
                                       _mm512_loadu_ps(b + i)));
    }
    for (int i = nv; i < n; i++)
        y[i] = (float)(x[i] - mean) * rstd * w[i] + b[i];
}
#endif

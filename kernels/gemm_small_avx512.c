/* gemm_small_avx512.c — gemm_small.h on AVX-512: two rows of W against up to
 * twelve rows of x at a time, 24 accumulators of 16 partial sums over K.
 *
 * Each step loads 16 floats of the two W rows once and of each x row once
 * (from L1) for 2 FMAs per x load, which keeps Zen 4's one 512-bit FMA per
 * cycle fed with its two loads per cycle. The 16 lanes of each accumulator
 * are summed once at the end (about a fifth of the work at K = 384, less at
 * larger K). A K that is not a multiple of 16 ends with a masked step.
 * Compiled with AVX-512 flags; reached only after simd.c has checked CPUID. */
#include "gemm_small.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

void gemm_small_f32_avx512(const float *x, size_t ldx, const float *w, size_t ldw, const float *b,
                           float *y, size_t ldy, int M, int K, int n0, int n1, int accumulate);

enum { MB = 12 }; /* x rows per block: 2 × MB accumulators + 2 W vectors in 32 zmm */

/* Rows [m0, m0 + mb) of x against W rows n and n + 1 (nb = 1 or 2); each sum
 * is added to the bias, or with accumulate to what y holds. */
static inline void block(const float *x, size_t ldx, const float *w, size_t ldw, const float *b,
                         float *y, size_t ldy, int m0, int mb, int K, int n, int nb,
                         int accumulate) {
    __m512 acc0[MB], acc1[MB];
    /* Unrolled in full so the accumulators live in registers. */
#pragma GCC unroll 12
    for (int i = 0; i < MB; i++)
        acc0[i] = acc1[i] = _mm512_setzero_ps();
    const float *w0 = w + (size_t)n * ldw;
    const float *w1 = nb > 1 ? w0 + ldw : w0;
    const float *xb = x + (size_t)m0 * ldx;
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        const __m512 a = _mm512_loadu_ps(w0 + k), c = _mm512_loadu_ps(w1 + k);
        /* The next two W rows, one cache line each per step, so they are
         * in L1 when their block starts (W streams from L3 or memory). */
        _mm_prefetch((const char *)(w1 + ldw + k), _MM_HINT_T0);
        _mm_prefetch((const char *)(w1 + 2 * ldw + k), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int i = 0; i < MB; i++) {
            if (i < mb) {
                const __m512 v = _mm512_loadu_ps(xb + (size_t)i * ldx + k);
                acc0[i] = _mm512_fmadd_ps(v, a, acc0[i]);
                acc1[i] = _mm512_fmadd_ps(v, c, acc1[i]);
            }
        }
    }
    if (k < K) {
        const __mmask16 mk = (__mmask16)((1u << (K - k)) - 1);
        const __m512 a = _mm512_maskz_loadu_ps(mk, w0 + k), c = _mm512_maskz_loadu_ps(mk, w1 + k);
#pragma GCC unroll 12
        for (int i = 0; i < MB; i++) {
            if (i >= mb)
                break;
            const __m512 v = _mm512_maskz_loadu_ps(mk, xb + (size_t)i * ldx + k);
            acc0[i] = _mm512_fmadd_ps(v, a, acc0[i]);
            acc1[i] = _mm512_fmadd_ps(v, c, acc1[i]);
        }
    }
    const float b0 = b ? b[n] : 0.0f, b1 = b && nb > 1 ? b[n + 1] : 0.0f;
#pragma GCC unroll 12
    for (int i = 0; i < MB; i++) {
        if (i >= mb)
            break;
        float *yi = y + (size_t)(m0 + i) * ldy + n;
        yi[0] = (accumulate ? yi[0] : b0) + _mm512_reduce_add_ps(acc0[i]);
        if (nb > 1)
            yi[1] = (accumulate ? yi[1] : b1) + _mm512_reduce_add_ps(acc1[i]);
    }
}

void gemm_small_f32_avx512(const float *x, size_t ldx, const float *w, size_t ldw, const float *b,
                           float *y, size_t ldy, int M, int K, int n0, int n1, int accumulate) {
    for (int m0 = 0; m0 < M; m0 += MB) {
        const int mb = M - m0 < MB ? M - m0 : MB;
        for (int n = n0; n < n1; n += 2) {
            const int nb = n1 - n < 2 ? n1 - n : 2;
            if (mb == MB)
                block(x, ldx, w, ldw, b, y, ldy, m0, MB, K, n, nb, accumulate); /* unrolled */
            else
                block(x, ldx, w, ldw, b, y, ldy, m0, mb, K, n, nb, accumulate);
        }
    }
}

#endif

/* peak_avx512.c — the AVX-512 FMA peak loop (see peak.h). Sixteen named
 * accumulators, not an array: an array can stay in memory at -O2, and a loop
 * that spills measures the load/store units instead of the FMA units. */
#include "peak.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define PEAK_ACC(X)                                                                                \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define PEAK_DECL(i) __m512 a##i = _mm512_set1_ps(0.01f * (float)(i));
#define PEAK_STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
#define PEAK_SUM(i)  s = _mm512_add_ps(s, a##i);

double attn_peak_fma_avx512(long iters) {
    /* a = 0.999·a + 0.001 converges to 1: no overflow, no denormals. */
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
    PEAK_ACC(PEAK_DECL)
    for (long n = 0; n < iters; n++) {
        PEAK_ACC(PEAK_STEP)
    }
    __m512 s = _mm512_setzero_ps();
    PEAK_ACC(PEAK_SUM)
    /* The sum is observed so the loop cannot be dropped. */
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 16 * 16 * 2;
}
#endif

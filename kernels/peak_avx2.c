/* peak_avx2.c — the AVX2+FMA peak loop (see peak.h). Twelve named ymm
 * accumulators plus the two constants fit the 16 registers without spilling. */
#include "peak.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define PEAK_ACC(X)  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define PEAK_DECL(i) __m256 a##i = _mm256_set1_ps(0.01f * (float)(i));
#define PEAK_STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
#define PEAK_SUM(i)  s = _mm256_add_ps(s, a##i);

double attn_peak_fma_avx2(long iters) {
    const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
    PEAK_ACC(PEAK_DECL)
    for (long n = 0; n < iters; n++) {
        PEAK_ACC(PEAK_STEP)
    }
    __m256 s = _mm256_setzero_ps();
    PEAK_ACC(PEAK_SUM)
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    volatile float sink = lanes[0];
    (void)sink;
    return (double)iters * 12 * 8 * 2;
}
#endif

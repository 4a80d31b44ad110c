/* peak_avx512bf16.c — the vdpbf16ps peak loop (see peak.h): sixteen named
 * fp32 accumulators each taking a bf16 pair-dot per iteration, no memory. */
#include "peak.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define PEAK_ACC(X)                                                                                \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define PEAK_DECL(i) __m512 a##i = _mm512_set1_ps(0.01f * (float)(i));
#define PEAK_STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
#define PEAK_SUM(i)  s = _mm512_add_ps(s, a##i);

double attn_peak_bf16_avx512(long iters) {
    /* Each step adds 2·(1/64)·(1/64) per lane: small, finite, no denormals. */
    const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.015625f), _mm512_set1_ps(0.015625f));
    const __m512bh y = x;
    PEAK_ACC(PEAK_DECL)
    for (long n = 0; n < iters; n++) {
        PEAK_ACC(PEAK_STEP)
    }
    __m512 s = _mm512_setzero_ps();
    PEAK_ACC(PEAK_SUM)
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    /* 16 lanes, each 2 multiplies and 2 adds per instruction. */
    return (double)iters * 16 * 16 * 4;
}
#endif

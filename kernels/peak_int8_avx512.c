/* peak_int8_avx512.c — the AVX512-VNNI int8 peak loop (see peak.h): sixteen
 * named vpdpbusd accumulators, enough to cover its latency, no memory. The
 * instruction is written in asm with the sum tied to its register: with the
 * intrinsic GCC 12 copies every sum through the stack, and the loop would
 * measure stores. */
#include "peak.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define PEAK_ACC(X)                                                                                \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define PEAK_DECL(i) __m512i a##i = _mm512_set1_epi32(i);
#define PEAK_STEP(i) __asm__("vpdpbusd %2, %1, %0" : "+v"(a##i) : "v"(x), "v"(y));
#define PEAK_SUM(i)  s = _mm512_add_epi32(s, a##i);

double attn_peak_int8_vnni(long iters) {
    /* 1·(±1) products: the int32 sums wrap harmlessly, nothing traps. */
    const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(-1);
    PEAK_ACC(PEAK_DECL)
    for (long n = 0; n < iters; n++) {
        PEAK_ACC(PEAK_STEP)
    }
    __m512i s = _mm512_setzero_si512();
    PEAK_ACC(PEAK_SUM)
    volatile int sink = _mm512_reduce_add_epi32(s);
    (void)sink;
    return (double)iters * 16 * 64 * 2;
}
#endif

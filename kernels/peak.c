/* peak.c — dispatch of the FMA peak loop, and its portable form: eight scalar
 * multiply-add chains (what a plain C kernel can reach at best). */
#include "peak.h"

#define PEAK_ACC(X)  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define PEAK_DECL(i) float a##i = 0.01f * (float)(i);
#define PEAK_STEP(i) a##i = a##i * x + y;

static double peak_portable(long iters) {
    const float x = 0.999f, y = 0.001f;
    PEAK_ACC(PEAK_DECL)
    for (long n = 0; n < iters; n++) {
        PEAK_ACC(PEAK_STEP)
    }
    volatile float sink = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    (void)sink;
    return (double)iters * 8 * 2;
}

double attn_peak_fma(attn_simd path, long iters) {
    if ((int)path < 0 || path > attn_simd_detect())
        return 0.0;
#if defined(__x86_64__) || defined(__i386__)
    if (path == ATTN_SIMD_AVX512)
        return attn_peak_fma_avx512(iters);
    if (path == ATTN_SIMD_AVX2)
        return attn_peak_fma_avx2(iters);
#endif
    return peak_portable(iters);
}

double attn_peak_int8(long iters) {
    if (!attn_cpu_has(ATTN_CPU_AVX512_VNNI))
        return 0.0;
#if defined(__x86_64__) || defined(__i386__)
    return attn_peak_int8_vnni(iters);
#else
    return 0.0;
#endif
}

double attn_peak_bf16(long iters) {
#if defined(__x86_64__) || defined(__i386__)
    if (attn_cpu_has(ATTN_CPU_AVX512_BF16))
        return attn_peak_bf16_avx512(iters);
#endif
    (void)iters;
    return 0.0;
}

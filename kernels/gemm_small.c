/* gemm_small.c — the portable path of gemm_small.h and the SIMD dispatch. */
#include "gemm_small.h"

#include "simd.h"

void gemm_small_f32_avx512(const float *x, size_t ldx, const float *w, size_t ldw, const float *b,
                           float *y, size_t ldy, int M, int K, int n0, int n1, int accumulate);

static void portable(const float *x, size_t ldx, const float *w, size_t ldw, const float *b,
                     float *y, size_t ldy, int M, int K, int n0, int n1, int accumulate) {
    for (int n = n0; n < n1; n++) {
        const float *wn = w + (size_t)n * ldw; /* (K) */
        for (int m = 0; m < M; m++) {
            const float *xm = x + (size_t)m * ldx; /* (K) */
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += xm[k] * wn[k];
            float *yo = y + (size_t)m * ldy + n;
            *yo = (accumulate ? *yo : b ? b[n] : 0.0f) + acc;
        }
    }
}

static void run(const float *x, size_t ldx, const float *w, size_t ldw, const float *b, float *y,
                size_t ldy, int M, int K, int n0, int n1, int accumulate) {
    if (M <= 0 || n1 <= n0)
        return;
#if defined(__x86_64__) || defined(__i386__)
    if (attn_simd_active() == ATTN_SIMD_AVX512) {
        gemm_small_f32_avx512(x, ldx, w, ldw, b, y, ldy, M, K, n0, n1, accumulate);
        return;
    }
#endif
    portable(x, ldx, w, ldw, b, y, ldy, M, K, n0, n1, accumulate);
}

void gemm_small_f32(const float *x, size_t ldx, const float *w, size_t ldw, const float *b,
                    float *y, size_t ldy, int M, int K, int n0, int n1) {
    run(x, ldx, w, ldw, b, y, ldy, M, K, n0, n1, 0);
}

void gemm_small_f32_acc(const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                        size_t ldy, int M, int K, int n0, int n1) {
    run(x, ldx, w, ldw, NULL, y, ldy, M, K, n0, n1, 1);
}

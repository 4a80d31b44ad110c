/* gelu.c — picks the GELU path for this CPU; the portable path is libm's erff. */
#include "gelu.h"

#include <math.h>

#include "kernels/simd.h"

void bert_gelu_avx2(float *x, size_t rows, size_t cols, size_t stride);
void bert_gelu_avx512(float *x, size_t rows, size_t cols, size_t stride);

static void gelu_portable(float *x, size_t rows, size_t cols, size_t stride) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            float *v = &x[r * stride + c];
            *v = 0.5f * *v * (1.0f + erff(*v * (float)M_SQRT1_2));
        }
}

void bert_gelu(float *x, size_t rows, size_t cols, size_t stride) {
#if defined(__x86_64__) || defined(__i386__)
    switch (attn_simd_active()) {
    case ATTN_SIMD_AVX512:
        bert_gelu_avx512(x, rows, cols, stride);
        return;
    case ATTN_SIMD_AVX2:
        bert_gelu_avx2(x, rows, cols, stride);
        return;
    case ATTN_SIMD_PORTABLE:
        break;
    }
#endif
    gelu_portable(x, rows, cols, stride);
}

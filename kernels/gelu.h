/* gelu.h — exact (erf) GELU over a row of floats, vectorised.
 *
 * GELU(x) = x·Φ(x) = x·erfc(−x/√2)/2, the form BERT is trained with (not the
 * tanh approximation). The AVX2 and AVX-512 paths evaluate erfc with a
 * rational-exponential fit (absolute error of GELU below 4e-7, on par with
 * libm's erff); the portable path calls erff. The path follows
 * attn_simd_active(), as the attention kernels do. */
#ifndef MODEL_GELU_H
#define MODEL_GELU_H

#include <stddef.h>

/* x[r * stride + c] = GELU(x[r * stride + c]) for r < rows, c < cols: a
 * block of a row-major matrix. */
void bert_gelu(float *x, size_t rows, size_t cols, size_t stride);

#endif

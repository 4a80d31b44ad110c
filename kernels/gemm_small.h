/* gemm_small.h — fp32 linear layers at few rows, reading the weights as
 * PyTorch stores them, with no packing.
 *
 * y (M, N) = x (M, K) · Wᵀ + b, W (N, K) row-major. OpenBLAS's sgemm copies
 * ("packs") the whole of W into its own panel layout on every call; at the
 * few rows of a small batch that copy costs more than the multiply itself
 * (bench_latency: at M = 12 the pack is about two thirds of the GEMM time).
 * Here each output is a dot product of a row of x with a row of W, W is read
 * once, straight from the model's weights, and the rows of x (M·K floats,
 * 18 KiB at M = 12, K = 384) stay in L1. For M beyond ~32 the library's
 * blocked GEMM is the better choice.
 *
 * A caller splits the output columns [n0, n1) over its pool; any split is
 * valid and results do not depend on it.
 *
 * The linear layers no longer call it: on the AVX-512 path, the only one
 * where it had a vector loop, fp32 runs the packed kernel (gemm_f32.h),
 * which measured faster at 4 to 32 rows and level at 1 (packing once at
 * load removes the per-call copy this kernel avoided). bench_latency still
 * times it beside sgemm. */
#ifndef ATTN_GEMM_SMALL_H
#define ATTN_GEMM_SMALL_H

#include <stddef.h>

/* Up to this many rows the kernel beats the library's GEMM on the shapes of
 * a BERT-base-or-smaller encoder (bench_latency). */
#define GEMM_SMALL_MAX_ROWS 32

/* y[m][n] = b[n] + Σ_k x[m][k] · w[n][k] for m < M, n in [n0, n1). b may be
 * NULL (no bias). y must not alias x or w. */
void gemm_small_f32(const float *x, size_t ldx, const float *w, size_t ldw, const float *b,
                    float *y, size_t ldy, int M, int K, int n0, int n1);

/* y[m][n] += Σ_k x[m][k] · w[n][k] for m < M, n in [n0, n1): sgemm's
 * beta = 1, so a caller that puts the bias (and a residual) into y first
 * gets them added exactly as gemm.c's library path adds them. y must not
 * alias x or w. */
void gemm_small_f32_acc(const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                        size_t ldy, int M, int K, int n0, int n1);

#endif

/* gemm_bf16.h — the bf16 kernels behind gemm.h's GEMM_BF16 (AVX512-BF16,
 * kernels/gemm_avx512bf16.c). gemm.c calls these with the arguments of the
 * public functions of the same role, only after attn_cpu_has has found
 * AVX512_BF16. */
#ifndef ATTN_GEMM_BF16_H
#define ATTN_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "gemm.h"
#include "parallel.h"

typedef struct gemm_bf16_weights gemm_bf16_weights;

int gemm_bf16_pack(const float *w, const float *bias, int N, int K, gemm_bf16_weights **out,
                   char *err, size_t err_len);
void gemm_bf16_free(gemm_bf16_weights *w);
size_t gemm_bf16_bytes(const gemm_bf16_weights *w);
size_t gemm_bf16_scratch_bytes(const gemm_bf16_weights *w, int max_rows, int nthreads);
void gemm_bf16_run(const gemm_bf16_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                   float *y, size_t ldy, int M, const gemm_epilogue *epi, void *scratch);

/* dst (rows, ldd) bf16 = src (rows, K, row stride lds) rounded to nearest
 * even, with column K zeroed when ldd > K: the on-the-fly conversion of the
 * activations, also what the benchmark feeds the libraries it compares. */
void gemm_bf16_convert(uint16_t *dst, size_t ldd, const float *src, size_t lds, int rows, int K);

#endif

/* gemm_bf16.h — the bf16 kernel behind gemm.h's GEMM_BF16 (AVX512-BF16,
 * kernels/gemm_avx512bf16.c, driven by gemm_panel.c). gemm.c calls these
 * only after attn_cpu_has has found AVX512_BF16. */
#ifndef ATTN_GEMM_BF16_H
#define ATTN_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "gemm_panel.h"

typedef struct gemm_bf16_weights gemm_bf16_weights;

int gemm_bf16_pack(const float *w, const float *bias, int N, int K, gemm_bf16_weights **out,
                   char *err, size_t err_len);
void gemm_bf16_free(gemm_bf16_weights *w);
size_t gemm_bf16_bytes(const gemm_bf16_weights *w);
/* The packed weights, conversion and tile for gemm_panel_run, which runs
 * them (its scratch: one converted chunk of activations per worker). */
const gemm_panel_kernel *gemm_bf16_kernel(const gemm_bf16_weights *w);

/* dst (rows, ldd) bf16 = src (rows, K, row stride lds) rounded to nearest
 * even, with column K zeroed when ldd > K: the on-the-fly conversion of the
 * activations, also what the benchmark feeds the libraries it compares. */
void gemm_bf16_convert(uint16_t *dst, size_t ldd, const float *src, size_t lds, int rows, int K);

#endif

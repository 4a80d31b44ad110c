/* gemm_f32.h — the packed fp32 kernels behind gemm.h's GEMM_FP32 on the
 * AVX-512 path (kernels/gemm_f32_avx512.c). gemm.c packs with these only
 * when the AVX-512 path is active at gemm_pack, and runs them only while it
 * still is; elsewhere OpenBLAS's sgemm reads the weights as stored. */
#ifndef ATTN_GEMM_F32_H
#define ATTN_GEMM_F32_H

#include <stddef.h>

#include "gemm.h"
#include "parallel.h"

typedef struct gemm_f32_weights gemm_f32_weights;

int gemm_f32_pack(const float *w, const float *bias, int N, int K, gemm_f32_weights **out,
                  char *err, size_t err_len);
void gemm_f32_free(gemm_f32_weights *w);
size_t gemm_f32_bytes(const gemm_f32_weights *w);
/* No scratch: the activations are read in place. */
void gemm_f32_run(const gemm_f32_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                  float *y, size_t ldy, int M, const gemm_epilogue *epi);

#endif

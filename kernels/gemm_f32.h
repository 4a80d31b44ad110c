/* gemm_f32.h — the packed fp32 kernel behind gemm.h's GEMM_FP32 on the
 * AVX-512 path (kernels/gemm_f32_avx512.c, driven by gemm_panel.c). gemm.c
 * packs with these only when the AVX-512 path is active at gemm_pack, and
 * runs them only while it still is; elsewhere OpenBLAS's sgemm reads the
 * weights as stored. */
#ifndef ATTN_GEMM_F32_H
#define ATTN_GEMM_F32_H

#include <stddef.h>

#include "gemm_panel.h"

typedef struct gemm_f32_weights gemm_f32_weights;

int gemm_f32_pack(const float *w, const float *bias, int N, int K, gemm_f32_weights **out,
                  char *err, size_t err_len);
void gemm_f32_free(gemm_f32_weights *w);
size_t gemm_f32_bytes(const gemm_f32_weights *w);
/* The packed weights and tile for gemm_panel_run, which runs them; no
 * scratch: the activations are read in place. */
const gemm_panel_kernel *gemm_f32_kernel(const gemm_f32_weights *w);

#endif

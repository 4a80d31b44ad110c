/* gemm_int8.h — the int8 kernels behind gemm.h's GEMM_INT8.
 *
 * gemm.c dispatches on the precision and calls these with the arguments of
 * the public functions of the same role; the int8 weights are their own
 * opaque type, held by a gemm_weights. They are built only when
 * kernels/gemm_int8.c exists (the Makefile then defines ATTN_HAVE_GEMM_INT8);
 * without it gemm_unsupported(GEMM_INT8) says so and nothing here is called.
 * gemm.c has checked the CPU (AVX512_VNNI) before any of them runs. */
#ifndef ATTN_GEMM_INT8_H
#define ATTN_GEMM_INT8_H

#include <stddef.h>

#include "gemm.h"
#include "parallel.h"

typedef struct gemm_int8_weights gemm_int8_weights;

int gemm_int8_pack(const float *w, const float *bias, int N, int K, gemm_int8_weights **out,
                   char *err, size_t err_len);
/* The same with gemm_pack_smoothed's hint (smooth may be NULL). */
int gemm_int8_pack_smoothed(const float *w, const float *bias, const float *smooth, int N, int K,
                            gemm_int8_weights **out, char *err, size_t err_len);
void gemm_int8_free(gemm_int8_weights *w);
size_t gemm_int8_bytes(const gemm_int8_weights *w);
size_t gemm_int8_scratch_bytes(const gemm_int8_weights *w, int max_rows, int nthreads);
void gemm_int8_run(const gemm_int8_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                   float *y, size_t ldy, int M, const gemm_epilogue *epi, void *scratch);

#endif

/* gemm_int8_impl.h — the packed int8 weights and the AVX512-VNNI kernels,
 * shared by gemm_int8.c (packing, split, epilogue) and gemm_int8_avx512.c.
 *
 * Quantisation. Weight row n (one output channel) is stored as
 * qw = round(W[n,k] / sw[n]) with sw[n] = max_k |W[n,k]| / 127; each token's
 * activation row as qx = round(x[k] / sx) with sx = max_k |x[k]| / 127,
 * computed on the fly. vpdpbusd multiplies unsigned by signed bytes, so the
 * activations go in shifted by 128 (qx + 128 in 1..255) and the 128·Σ_k qw[n,k]
 * this adds is subtracted from each column's int32 sum; the result is exact
 * integer arithmetic, y = sx·sw[n]·Σ_k qx·qw + b[n]. With a smoothing vector
 * s the same is done on x_k / s_k and W[n,k]·s_k (see gemm_pack_smoothed). */
#ifndef ATTN_GEMM_INT8_IMPL_H
#define ATTN_GEMM_INT8_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gemm_int8.h"

/* Columns per packed panel: one zmm of int32 sums. */
#define GEMM_INT8_NR 16

/* The packed weights. A panel holds 16 output channels; for each group of 4
 * k it stores 64 bytes, channel by channel (n0 k0..k3, n1 k0..k3, ...), the
 * operand order vpdpbusd wants. Channels past N and k past K are zero. */
struct gemm_int8_weights {
    int N, K;
    int Np;            /* N rounded up to GEMM_INT8_NR */
    int K4;            /* groups of 4 k: ceil(K / 4) */
    int8_t *qw;        /* [Np / 16][K4][16][4] */
    float *scale;      /* [Np] sw, 0 past N */
    int32_t *comp;     /* [Np] 128 · Σ_k qw[n,k] */
    float *bias;       /* [Np] b, 0 past N or without bias */
    float *inv_smooth; /* [K] 1 / smooth_k, or NULL: no smoothing */
    void *block;       /* the one allocation the arrays above are carved from */
    size_t bytes;
};

/* Quantises rows [r0, r1) of x (each first multiplied by inv_smooth, when
 * not NULL) into qa (row stride lda bytes, padded to a multiple of 4 with the
 * shifted zero 128) and their scales into sx. */
void gemm_int8_quantize_rows_avx512(const float *x, size_t ldx, int K, const float *inv_smooth,
                                    int r0, int r1, uint8_t *qa, size_t lda, float *sx);

/* acc → fp32: out[i·ldo + j] = (sum − comp[c0+j]) · sx[i] · sw[c0+j] + b[c0+j]
 * for rows i < rows and the columns [c0, c1) (multiples of 16 but c1 may be
 * Np), from the quantised rows qa. */
void gemm_int8_block_avx512(const gemm_int8_weights *p, const uint8_t *qa, size_t lda,
                            const float *sx, int rows, int c0, int c1, float *out, size_t ldo);

#endif

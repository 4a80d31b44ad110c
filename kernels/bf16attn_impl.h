/* bf16attn_impl.h — internals of the bf16 attention backend shared by its
 * table (bf16attn.c) and its kernel (bf16attn_avx512bf16.c): the workspace
 * layout of one worker, the task numbering and the kernel's entry point. The
 * context and the exp2 constants are the fused backend's (fused_impl.h). */
#ifndef ATTN_BF16ATTN_IMPL_H
#define ATTN_BF16ATTN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "fused_impl.h"

/* Query rows per vector (one lane per row) and keys per tile. */
#define BF16ATTN_VL 16
#define BF16ATTN_KT 16
/* Query rows per task: twice the fused backend's. Each task converts every
 * key and value tile its rows see, so the conversion is paid once per BR
 * rows; at 64 rows it took about a third of the kernel's cycles (perf, 1×2048
 * at head_dim 64). Measured interleaved (2 threads, medians of 3): 128 rows
 * run 1.00–1.31× faster than 64 over 32×128, 8×512 and 1×2048 at head_dim 32
 * and 64; 256 rows no faster than 128 but on 8×512 at 64. */
#ifndef BF16ATTN_BR
#define BF16ATTN_BR 128
#endif
/* Largest head_dim: the fused backend's, so the two refuse the same shapes. */
#define BF16ATTN_MAX_HEAD_DIM FUSED_MAX_HEAD_DIM

/* Sizes in 32-bit words of one worker's slices for head_dim D. A word holds
 * two bf16 values: a pair of head dimensions (queries, keys) or a pair of
 * keys (values, probabilities), which is what one lane of vdpbf16ps takes. */
typedef struct bf16attn_dims {
    int dp;  /* pairs of head dimensions, ceil(D / 2) */
    int dpr; /* dp rounded up to 16: a converted row is whole vectors */
    int dv;  /* D rounded up to 16: output columns, whole P·V steps */
} bf16attn_dims;

static inline bf16attn_dims bf16attn_dims_of(int D) {
    bf16attn_dims d;
    d.dp = (D + 1) / 2;
    d.dpr = (d.dp + 15) & ~15;
    d.dv = (D + 15) & ~15;
    return d;
}

/* Words per worker, a multiple of 16 (64 bytes):
 *   qt  (BR/VL, dp, VL)  query pairs, lanes = rows, scaled by scale·log2(e)
 *   ot  (BR/VL, dv, VL)  fp32 output accumulator, lanes = rows
 *   m,l (BR)             running max (base 2) and sum per row
 *   kt  (KT, dpr)        one key tile, rows of dimension pairs
 *   vt  (KT/2, dv)       one value tile, pairs of keys per column
 *   tmp (VL, dpr)        converted query rows before their transpose */
static inline size_t bf16attn_ws_words(int D) {
    const bf16attn_dims d = bf16attn_dims_of(D);
    const size_t br = BF16ATTN_BR, groups = BF16ATTN_BR / BF16ATTN_VL;
    return groups * (size_t)d.dp * BF16ATTN_VL + groups * (size_t)d.dv * BF16ATTN_VL + 2 * br +
           (size_t)BF16ATTN_KT * (size_t)d.dpr + (size_t)(BF16ATTN_KT / 2) * (size_t)d.dv +
           (size_t)BF16ATTN_VL * (size_t)d.dpr;
}

/* Blocks of BF16ATTN_BR query rows in a sequence of len tokens. */
static inline int64_t bf16attn_nblocks(int32_t len) {
    return ((int64_t)len + BF16ATTN_BR - 1) / BF16ATTN_BR;
}

/* As fused_task_coords, with blocks of BF16ATTN_BR rows (c->seq_task counts
 * bf16attn_nblocks): sequence-major, then head, then query block, a causal
 * sequence's last blocks first. Depends only on the batch. */
static inline void bf16attn_task_coords(const fused_ctx *c, size_t task, int32_t *b, int *h,
                                        int32_t *q0) {
    const int64_t *st = c->seq_task;
    int32_t lo = 0, hi = c->p->shape.batch - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (st[mid] <= (int64_t)task)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int32_t len = c->p->cu_seqlens[lo + 1] - c->p->cu_seqlens[lo];
    const int64_t nb = bf16attn_nblocks(len), r = (int64_t)task - st[lo];
    int64_t blk = r % nb;
    if (c->p->shape.causal)
        blk = nb - 1 - blk;
    *b = lo;
    *h = (int)(r / nb);
    *q0 = (int32_t)(blk * BF16ATTN_BR);
}

#if defined(__x86_64__) || defined(__i386__)
/* One task (see bf16attn_task_coords); ctx is a fused_ctx whose ws_floats is
 * bf16attn_ws_words(D). Runs only where attn_cpu_has(ATTN_CPU_AVX512_BF16). */
void bf16attn_task_avx512bf16(void *ctx, size_t task, int worker);
#endif

#endif

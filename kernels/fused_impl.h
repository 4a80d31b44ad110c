/* fused_impl.h — internals of the fused backend shared by fused.c and its
 * per-ISA files (fused_avx2.c, fused_avx512.c): block sizes, the workspace
 * layout, the task numbering, the exp2 polynomial, and the entry points of
 * each path. Not part of the backend contract; tests use it to reach the
 * vector exp2 of every path. */
#ifndef ATTN_FUSED_IMPL_H
#define ATTN_FUSED_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "attention.h"
#include "simd.h"

/* Query rows per task. Every path uses the same value so the task list (and
 * the workspace) does not depend on the path. Each task packs every key and
 * value tile its rows see (strided reads of K and V), so this many rows share
 * each packing: at 64 rows perf put the packing (v_transpose, pack_values) at
 * 29 % of the kernel's samples at 1×2048 and 52 % at 1×8192 causal (head_dim
 * 64); 128 rows (8 AVX-512 row groups, 16 AVX2) measured 1.04–1.26× faster
 * (2 threads, interleaved) with the accumulators still in L2. */
#define FUSED_BR 128
/* Keys per tile on the widest path: sizes the packed key tile. */
#define FUSED_KT_MAX       16
#define FUSED_MAX_HEAD_DIM 256

/* The softmax runs in base 2: log2(e) is folded into the query scale, so
 * every score needs exp2 alone, without a multiply by log2(e). */
#define FUSED_LOG2E 1.4426950408889634f

/* exp2(x) = 2^n · p(f), n = round(x), f = x - n in [-0.5, 0.5], p the degree-6
 * minimax polynomial for relative error (3e-2 ulp before rounding). Inputs are
 * clamped below at FUSED_EXP2_MIN so 2^n is built from bits and the result
 * stays a normal float: softmax terms below 2^-125 of the row maximum do not
 * change a float32 sum, and denormal operands would slow the PV products. */
#define FUSED_EXP2_C0  1.0f
#define FUSED_EXP2_C1  0.69314720574f
#define FUSED_EXP2_C2  0.24022646891f
#define FUSED_EXP2_C3  0.05550328777f
#define FUSED_EXP2_C4  0.00961848896f
#define FUSED_EXP2_C5  0.00133999312f
#define FUSED_EXP2_C6  0.00015345812f
#define FUSED_EXP2_MIN (-125.0f)
/* 1.5·2^23: adding it rounds to an integer that then sits in the low mantissa
 * bits, where a shift by 23 turns it into an exponent. */
#define FUSED_ROUND_MAGIC 12582912.0f

/* One forward call as the tasks see it. */
typedef struct fused_ctx {
    const attn_problem *p;
    const int64_t *seq_task; /* [B + 1]: first task of each sequence */
    float *ws;               /* workspace of worker 0; worker w at ws + w·ws_floats */
    size_t ws_floats;        /* floats per worker, a multiple of 16 */
    float qscale;            /* scale · log2(e) */
} fused_ctx;

/* One worker's slices of the workspace (sizes in floats). */
typedef struct fused_ws {
    float *qt; /* (BR/VL, D, VL): query rows transposed, lanes = rows */
    float *ot; /* (BR/VL, D, VL): output accumulator, same layout */
    float *m;  /* (BR): running max per query row, base 2 */
    float *l;  /* (BR): running sum of exp2 per query row */
    float *kt; /* (D, KT): one key tile transposed */
    float *vt; /* (KT, D): one value tile, contiguous */
} fused_ws;

static inline size_t fused_round16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

static inline size_t fused_ws_floats(int D) {
    size_t d = (size_t)D;
    return 2 * fused_round16(FUSED_BR * d) + 2 * fused_round16(FUSED_BR) +
           2 * fused_round16(FUSED_KT_MAX * d);
}

static inline fused_ws fused_worker_ws(const fused_ctx *c, int worker) {
    size_t d = (size_t)c->p->shape.head_dim;
    float *base = c->ws + (size_t)worker * c->ws_floats;
    fused_ws w;
    w.qt = base;
    w.ot = w.qt + fused_round16(FUSED_BR * d);
    w.m = w.ot + fused_round16(FUSED_BR * d);
    w.l = w.m + fused_round16(FUSED_BR);
    w.kt = w.l + fused_round16(FUSED_BR);
    w.vt = w.kt + fused_round16(FUSED_KT_MAX * d);
    return w;
}

/* How far from a query row its keys may lie, within one sequence of len
 * tokens: ahead, keys after the row (0 under the causal mask); behind, keys
 * before it. len stands for no limit (no distance within the sequence
 * reaches it), and a window of len or more is none either, so the tiles'
 * lane arithmetic stays within ±2·len. */
typedef struct fused_reach {
    int ahead, behind;
    int windowed; /* 1: behind is a window's, so tiles may hide trailing rows */
} fused_reach;

static inline fused_reach fused_reach_of(const attn_shape *s, int32_t len) {
    const int w = s->window > 0 && s->window < len ? (int)s->window : (int)len;
    fused_reach r;
    r.ahead = s->causal ? 0 : w;
    r.behind = w;
    r.windowed = s->window > 0 && s->window < len;
    return r;
}

/* The keys [*lo, *hi) that rows first..last of a sequence see together: the
 * ends of attn_key_range never decrease with the row. */
static inline void fused_group_keys(const attn_shape *s, int32_t first, int32_t last, int32_t len,
                                    int32_t *lo, int32_t *hi) {
    int32_t unused;
    attn_key_range(s, first, len, lo, &unused);
    attn_key_range(s, last, len, &unused, hi);
}

/* Which mask a tile of kt keys (nkeys of them real) needs for a group of vl
 * rows starting kofs positions before the tile's first key: 0, none; 1, the
 * leading rows (keys past the end, the causal diagonal, the window's edge
 * ahead of the rows); 2, that and the trailing rows past the window behind
 * the keys. A shape without a window never gets 2, so its tiles are the
 * ones it had before windows existed. */
static inline int fused_tile_mask(fused_reach r, int kofs, int nkeys, int kt, int vl) {
    if (r.windowed && kofs + r.behind + 1 < vl)
        return 2;
    return nkeys < kt || kofs + kt - 1 - r.ahead > 0;
}

/* Blocks of FUSED_BR query rows in a sequence of len tokens. */
static inline int64_t fused_nblocks(int32_t len) {
    return ((int64_t)len + FUSED_BR - 1) / FUSED_BR;
}

/* Task numbering: sequence-major, then head, then query block, so that
 * neighbouring tasks read the same keys (and, with grouped K/V heads, the
 * heads of one group are neighbours too). A causal sequence hands out its
 * last (most expensive) blocks first, which evens out the end of the loop;
 * under a window every block but the first few costs the same (BR·(w + 1)
 * pairs at most), so that order stays as good. The numbering depends only
 * on the batch, never on threads or timing. */
static inline void fused_task_coords(const fused_ctx *c, size_t task, int32_t *b, int *h,
                                     int32_t *q0) {
    const int64_t *st = c->seq_task;
    int32_t lo = 0, hi = c->p->shape.batch - 1; /* last b with st[b] <= task */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (st[mid] <= (int64_t)task)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int32_t len = c->p->cu_seqlens[lo + 1] - c->p->cu_seqlens[lo];
    const int64_t nb = fused_nblocks(len), r = (int64_t)task - st[lo];
    int64_t blk = r % nb;
    if (c->p->shape.causal)
        blk = nb - 1 - blk;
    *b = lo;
    *h = (int)(r / nb);
    *q0 = (int32_t)(blk * FUSED_BR);
}

/* The task function and the vector exp2 of each path. The SIMD ones exist
 * only on x86-64 and may run only where attn_simd_detect() allows them. */
void fused_task_portable(void *ctx, size_t task, int worker);
void fused_exp2_portable(float *y, const float *x, size_t n);
#if defined(__x86_64__) || defined(__i386__)
void fused_task_avx2(void *ctx, size_t task, int worker);
void fused_exp2_avx2(float *y, const float *x, size_t n);
void fused_task_avx512(void *ctx, size_t task, int worker);
void fused_exp2_avx512(float *y, const float *x, size_t n);
#endif

/* y[i] = exp2(x[i]) with the vector code of path (for tests). Returns 0, or -1
 * when this CPU cannot run path. */
int fused_exp2(attn_simd path, float *y, const float *x, size_t n);

#endif

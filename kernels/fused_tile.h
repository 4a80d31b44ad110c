/* fused_tile.h — the fused attention kernel, written once over a small vector
 * API and included by each path (fused.c, fused_avx2.c, fused_avx512.c), so
 * the three paths run one algorithm and differ only in vector width. No
 * include guard: every includer instantiates it once.
 *
 * Layout trick: a vector holds VL query rows (one lane per row), never VL
 * head dimensions. Then S^T = K·Q^T is built by broadcasting one key element
 * against a vector of VL query elements, and the online softmax (row max, row
 * sum, rescale) is plain lane-wise arithmetic across the KT score vectors of a
 * tile, with no horizontal reductions. P·V broadcasts value elements against
 * those same score vectors. Query rows are transposed once per task; each key
 * tile is transposed once and reused by all BR/VL row groups of the task.
 *
 * The includer defines, before including:
 *   VL, KT, PVC    lanes per vector, keys per tile, output columns per PV step
 *   vf             the vector type
 *   FUSED_NAME(x)  x with the path's suffix
 *   vf v_zero(void), v_set1(float), v_load(const float *), v_bcast(const float *)
 *   void v_store(float *, vf)
 *   vf v_add(a, b), v_sub(a, b), v_mul(a, b), v_div(a, b), v_fma(a, b, c) = a·b + c
 *   vf v_max(a, b)           b where a is NaN (as x86 maxps)
 *   vf v_pow2_bits(vf t)     2^n where t = n + FUSED_ROUND_MAGIC, |n| <= 127
 *   vf v_fill_below(vf x, int n, float fill)   lanes < n replaced by fill
 *   vf v_fill_from(vf x, int n, float fill)    lanes >= n replaced by fill
 *   void v_transpose(float *dst, size_t ds, const float *src, size_t ss)
 *                            dst[i·ds + j] = src[j·ss + i] for i, j < VL
 *
 * The tile loops over keys and columns are unrolled and their accumulators
 * inlined, so that arrays of vectors become registers. */

#define FUSED_PRAGMA(x) _Pragma(#x)
/* The portable path (FUSED_GENERIC_ONLY) is the fallback and the oracle for
 * the others, not a fast path: it skips the unrolling and the head_dim
 * specialisations and leaves inlining to the compiler, which would only
 * multiply its code (and its compile time under the sanitizers) without
 * making plain C fast. */
#ifdef FUSED_GENERIC_ONLY
#define FUSED_INLINE static inline
#define FUSED_UNROLL(n)
#else
#define FUSED_INLINE    static inline __attribute__((always_inline))
#define FUSED_UNROLL(n) FUSED_PRAGMA(GCC unroll n)
#endif

/* Key tiles are transposed with the VL×VL block transpose. */
_Static_assert(KT == VL, "a key tile must be one transpose block");

/* exp2 of each lane, see FUSED_EXP2_* in fused_impl.h. NaN and -inf give
 * 2^-125, so masked scores are zeroed by the caller, not here. */
FUSED_INLINE vf v_exp2(vf x) {
    x = v_max(x, v_set1(FUSED_EXP2_MIN));
    const vf t = v_add(x, v_set1(FUSED_ROUND_MAGIC));
    const vf f = v_sub(x, v_sub(t, v_set1(FUSED_ROUND_MAGIC)));
    vf p = v_set1(FUSED_EXP2_C6);
    p = v_fma(p, f, v_set1(FUSED_EXP2_C5));
    p = v_fma(p, f, v_set1(FUSED_EXP2_C4));
    p = v_fma(p, f, v_set1(FUSED_EXP2_C3));
    p = v_fma(p, f, v_set1(FUSED_EXP2_C2));
    p = v_fma(p, f, v_set1(FUSED_EXP2_C1));
    p = v_fma(p, f, v_set1(FUSED_EXP2_C0));
    return v_mul(p, v_pow2_bits(t));
}

void FUSED_NAME(fused_exp2)(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        v_store(y + i, v_exp2(v_load(x + i)));
    if (i < n) {
        float in[VL] = {0}, out[VL];
        for (size_t j = i; j < n; j++)
            in[j - i] = x[j];
        v_store(out, v_exp2(v_load(in)));
        for (size_t j = i; j < n; j++)
            y[j] = out[j - i];
    }
}

/* Leading lanes (query rows) that may not see key j of a tile: all of them
 * past the last key the block sees, else the rows the key lies more than
 * ahead positions after (fused_reach: 0 under the causal mask, else the
 * window or no limit). kofs = first key of the tile - first row of the
 * group. */
FUSED_INLINE int hidden_rows(int j, int kofs, int nkeys, int ahead) {
    if (j >= nkeys)
        return VL;
    return kofs + j - ahead;
}

/* The first lane (query row) past key j's window: rows more than behind
 * positions after the key do not see it. */
FUSED_INLINE int visible_end(int j, int kofs, int behind) {
    return kofs + j + behind + 1;
}

/* ot[c] = alpha·ot[c] + sum_j P[j]·v[j][c] for NC output columns: NC
 * independent accumulators cover the FMA latency; P stays in registers. */
FUSED_INLINE void pv_step(float *ot /* (NC, VL) */, const vf *pj /* (KT) */, vf alpha,
                          const float *v /* (KT, ·) stride vs */, size_t vs, const int NC) {
    vf acc[PVC];
    FUSED_UNROLL(PVC)
    for (int c = 0; c < NC; c++)
        acc[c] = v_mul(v_load(ot + c * VL), alpha);
    FUSED_UNROLL(KT)
    for (int j = 0; j < KT; j++) {
        const float *vj = v + (size_t)j * vs;
        FUSED_UNROLL(PVC)
        for (int c = 0; c < NC; c++)
            acc[c] = v_fma(pj[j], v_bcast(vj + c), acc[c]);
    }
    FUSED_UNROLL(PVC)
    for (int c = 0; c < NC; c++)
        v_store(ot + c * VL, acc[c]);
}

/* Lane-wise max and sum of a tile's KT score vectors, as pairwise trees:
 * log2(KT) operation latencies on the tile's critical path instead of KT - 1
 * in a chain (the max gates every exp2 of the tile, and the P·V that
 * follows). KT is a power of two. The max is exact either way; the sum of KT
 * non-negative terms rounds no worse as a tree. */
_Static_assert((KT & (KT - 1)) == 0 && KT >= 2, "a key tile is a power of two");

FUSED_INLINE vf tree_max(const vf *s /* (KT) */) {
    vf t[KT / 2];
    FUSED_UNROLL(KT)
    for (int j = 0; j < KT / 2; j++)
        t[j] = v_max(s[2 * j], s[2 * j + 1]);
    FUSED_UNROLL(KT)
    for (int w = KT / 2; w > 1; w /= 2)
        FUSED_UNROLL(KT)
    for (int j = 0; j < w / 2; j++)
        t[j] = v_max(t[2 * j], t[2 * j + 1]);
    return t[0];
}

FUSED_INLINE vf tree_sum(const vf *s /* (KT) */) {
    vf t[KT / 2];
    FUSED_UNROLL(KT)
    for (int j = 0; j < KT / 2; j++)
        t[j] = v_add(s[2 * j], s[2 * j + 1]);
    FUSED_UNROLL(KT)
    for (int w = KT / 2; w > 1; w /= 2)
        FUSED_UNROLL(KT)
    for (int j = 0; j < w / 2; j++)
        t[j] = v_add(t[2 * j], t[2 * j + 1]);
    return t[0];
}

/* The relative position bias of one key for the VL rows of a group: lane r
 * gets bh[x0 + r], bh centred on distance 0 (valid within ±(span − 1)),
 * x0 = the group's first row − the key. A lane outside that range is a row
 * or a key past the sequence end, which the tile masks or the caller
 * discards: it gets 0 from a copy, so no load leaves the vector. */
FUSED_INLINE vf bias_vec(const float *bh, int32_t span, int32_t x0) {
    if (x0 > -span && x0 + VL - 1 < span)
        return v_load(bh + x0);
    float tmp[VL];
    for (int r = 0; r < VL; r++)
        tmp[r] = x0 + r > -span && x0 + r < span ? bh[x0 + r] : 0.0f;
    return v_load(tmp);
}

/* One tile: VL query rows × KT keys. Scores S^T (KT vectors of VL rows) live
 * in registers from the dot products through the softmax update to P·V.
 * masked: 0, every (row, key) pair of the tile is seen; 1, some are hidden
 * by the keys' end (nkeys), the causal diagonal or the window's leading
 * edge (hidden_rows: kofs, ahead); 2, those and the window's trailing edge
 * (visible_end: behind), which only a window has. */
FUSED_INLINE void tile(const float *qt /* (D, VL) */, const float *kt /* (D, KT) */,
                       const float *v /* (KT, D) stride vs */, size_t vs, float *ot /* (D, VL) */,
                       float *m /* (VL) */, float *l /* (VL) */, const int D, const int masked,
                       int kofs, int nkeys, int ahead, int behind, const float *bh, int32_t span) {
    vf s[KT];
    FUSED_UNROLL(KT)
    for (int j = 0; j < KT; j++)
        s[j] = v_zero();
    for (int d = 0; d < D; d++) {
        const vf q = v_load(qt + (size_t)d * VL);
        FUSED_UNROLL(KT)
        for (int j = 0; j < KT; j++)
            s[j] = v_fma(q, v_bcast(kt + (size_t)d * KT + j), s[j]);
    }
    if (bh) {
        /* Scores are in base 2 (log2(e) folded into the queries): the bias
         * joins them the same way, in one rounding. */
        const vf l2e = v_set1(FUSED_LOG2E);
        FUSED_UNROLL(KT)
        for (int j = 0; j < KT; j++)
            s[j] = v_fma(bias_vec(bh, span, -kofs - j), l2e, s[j]);
    }
    if (masked) {
        FUSED_UNROLL(KT)
        for (int j = 0; j < KT; j++)
            s[j] = v_fill_below(s[j], hidden_rows(j, kofs, nkeys, ahead), -INFINITY);
    }
    if (masked == 2) {
        FUSED_UNROLL(KT)
        for (int j = 0; j < KT; j++)
            s[j] = v_fill_from(s[j], visible_end(j, kofs, behind), -INFINITY);
    }

    /* Online softmax, lane-wise: new max, rescale factor, exp2, sum. A row
     * that sees no key of the tile (a window's edge) has m_new = -inf while
     * it has seen none before: its exp2 arguments are NaN, which v_exp2
     * takes to 2^-125, and the masks below zero its terms, so it keeps
     * m = -inf, l = 0 and ot = 0 until its first seen key. */
    const vf m_old = v_load(m);
    const vf m_new = v_max(tree_max(s), m_old);
    const vf alpha = v_exp2(v_sub(m_old, m_new));
    FUSED_UNROLL(KT)
    for (int j = 0; j < KT; j++) {
        s[j] = v_exp2(v_sub(s[j], m_new));
        if (masked)
            s[j] = v_fill_below(s[j], hidden_rows(j, kofs, nkeys, ahead), 0.0f);
        if (masked == 2)
            s[j] = v_fill_from(s[j], visible_end(j, kofs, behind), 0.0f);
    }
    const vf sum = tree_sum(s);
    v_store(m, m_new);
    v_store(l, v_fma(v_load(l), alpha, sum));

    int d0 = 0;
    for (; d0 + PVC <= D; d0 += PVC)
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, PVC);
    switch (D - d0) { /* constant column counts keep the accumulators in registers */
#if PVC > 4
    case 7:
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, 7);
        break;
    case 6:
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, 6);
        break;
    case 5:
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, 5);
        break;
    case 4:
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, 4);
        break;
#endif
    case 3:
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, 3);
        break;
    case 2:
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, 2);
        break;
    case 1:
        pv_step(ot + (size_t)d0 * VL, s, alpha, v + d0, vs, 1);
        break;
    default:
        break;
    }
}

/* dst[d][lane] = src[lane][d] for lanes < nrows and d < D, lanes past nrows
 * zero: whole VL×VL blocks through v_transpose, the ragged edges by scalars. */
static void transpose_in(float *dst /* (D, VL) */, const float *src /* (nrows, D) stride ss */,
                         size_t ss, int nrows, int D) {
    int d0 = 0;
    if (nrows == VL)
        for (; d0 + VL <= D; d0 += VL)
            v_transpose(dst + (size_t)d0 * VL, VL, src + d0, ss);
    for (int d = d0; d < D; d++)
        for (int lane = 0; lane < VL; lane++)
            dst[(size_t)d * VL + lane] = lane < nrows ? src[(size_t)lane * ss + d] : 0.0f;
}

/* dst[lane][d] = src[d][lane] for lanes < nrows: the inverse of transpose_in. */
static void transpose_out(float *dst /* (nrows, D) stride ds */, size_t ds,
                          const float *src /* (D, VL) */, int nrows, int D) {
    int d0 = 0;
    if (nrows == VL)
        for (; d0 + VL <= D; d0 += VL)
            v_transpose(dst + d0, ds, src + (size_t)d0 * VL, VL);
    for (int lane = 0; lane < nrows; lane++)
        for (int d = d0; d < D; d++)
            dst[(size_t)lane * ds + d] = src[(size_t)d * VL + lane];
}

/* Query rows q0.. of one (sequence, head), transposed into row groups of VL
 * lanes and scaled by scale·log2(e); rows past the sequence end are zero. */
static void pack_queries(float *qt /* (ngroups, D, VL) */, const float *q, size_t qs, int32_t nq,
                         int ngroups, int D, float qscale) {
    const vf sc = v_set1(qscale);
    for (int g = 0; g < ngroups; g++) {
        float *dst = qt + (size_t)g * D * VL;
        const int nrows = nq - g * VL < VL ? (int)(nq - g * VL) : VL;
        transpose_in(dst, q + (size_t)g * VL * qs, qs, nrows, D);
        for (int d = 0; d < D; d++)
            v_store(dst + (size_t)d * VL, v_mul(v_load(dst + (size_t)d * VL), sc));
    }
}

/* A value tile copied into a contiguous (KT, D) buffer, zero past the
 * sequence end: the P·V loop then reads one small block at a fixed stride
 * instead of KT token rows a whole token stride apart (fewer TLB misses on
 * long sequences), and never reads past the sequence or the tensor. */
static void pack_values(float *vt /* (KT, D) */, const float *v, size_t vs, int nkeys, int D) {
    for (int j = 0; j < KT; j++) {
        float *dst = vt + (size_t)j * D;
        const float *src = v + (size_t)j * vs;
        int d = 0;
        if (j < nkeys) {
            for (; d + VL <= D; d += VL)
                v_store(dst + d, v_load(src + d));
            for (; d < D; d++)
                dst[d] = src[d];
        }
        for (; d < D; d++)
            dst[d] = 0.0f;
    }
}

/* Asks for the key and value rows of the next tile while this one computes.
 * Token rows are a whole token stride apart (one 4 KiB page or more on a
 * model's fused QKV), so the hardware prefetchers, which stay within a page,
 * do not fetch them, and without this the tile's transpose and copy wait on
 * each row's load; one tile's arithmetic (BR/VL groups × 2·KT·D FMAs) is far
 * longer than a load from L3 or memory. */
FUSED_INLINE void prefetch_tile(const float *k, size_t ks, const float *v, size_t vs, int nkeys,
                                int D) {
    for (int j = 0; j < nkeys; j++) {
        for (int d = 0; d < D; d += 64 / (int)sizeof(float)) {
            __builtin_prefetch(k + (size_t)j * ks + d);
            __builtin_prefetch(v + (size_t)j * vs + d);
        }
        /* A row that does not start on a cache line ends on one more. */
        __builtin_prefetch(k + (size_t)j * ks + D - 1);
        __builtin_prefetch(v + (size_t)j * vs + D - 1);
    }
}

/* One task: query rows [q0, q0 + BR) of head h of the sequence at tokens
 * [start, start + len), against every key those rows may see: the key tiles
 * between the first row's first key and the last row's last one
 * (attn_key_range), so a window costs O(BR·w), never the whole sequence.
 * windowed (a constant, fused_reach.windowed) compiles the tiles with a
 * window's trailing mask in; without it the tile calls are the four a
 * shape without a window always had: with six in one loop GCC hoisted
 * their common work and spilled score registers in the hot unmasked tile
 * (perf: 8×512 at head_dim 64 lost about a tenth of its rate). */
FUSED_INLINE void query_block(const fused_ctx *c, const fused_ws *w, int32_t start, int32_t len,
                              int h, int32_t q0, const int D, const int windowed) {
    const attn_problem *p = c->p;
    const attn_shape *sh = &p->shape;
    const int32_t nq = len - q0 < FUSED_BR ? len - q0 : FUSED_BR;
    const int ngroups = (nq + VL - 1) / VL;
    const size_t hd = (size_t)h * (size_t)D;
    /* K and V of the head's group (grouped-query attention). */
    const size_t kd = (size_t)attn_kv_head(sh, h) * (size_t)D;
    const fused_reach reach = fused_reach_of(sh, len);
    const int32_t span = p->rel_span;
    /* The head's bias vector centred on distance 0 (attention.h). */
    const float *bh = p->shape.rel_bias
                          ? p->rel_bias + (size_t)h * (2 * (size_t)span - 1) + (size_t)(span - 1)
                          : NULL;

    pack_queries(w->qt, p->q + (size_t)(start + q0) * p->q_stride + hd, p->q_stride, nq, ngroups, D,
                 c->qscale);
    for (size_t i = 0; i < (size_t)ngroups * D * VL; i++)
        w->ot[i] = 0.0f;
    for (int i = 0; i < ngroups * VL; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }

    /* Keys [klo, khi): every key some row of the block sees. */
    int32_t klo, khi;
    fused_group_keys(sh, q0, q0 + nq - 1, len, &klo, &khi);
    for (int32_t k0 = klo; k0 < khi; k0 += KT) {
        const int nkeys = khi - k0 < KT ? (int)(khi - k0) : KT;
        /* kt: (D, KT) key tile transposed, vt: (KT, D) value tile */
        transpose_in(w->kt, p->k + (size_t)(start + k0) * p->k_stride + kd, p->k_stride, nkeys, D);
        pack_values(w->vt, p->v + (size_t)(start + k0) * p->v_stride + kd, p->v_stride, nkeys, D);
        if (k0 + KT < khi)
            prefetch_tile(p->k + (size_t)(start + k0 + KT) * p->k_stride + kd, p->k_stride,
                          p->v + (size_t)(start + k0 + KT) * p->v_stride + kd, p->v_stride,
                          khi - (k0 + KT) < KT ? (int)(khi - (k0 + KT)) : KT, D);
        for (int g = 0; g < ngroups; g++) {
            const int32_t r0 = q0 + g * VL; /* first row of the group */
            const int32_t rlast = (r0 + VL < len ? r0 + VL : len) - 1;
            int32_t glo, ghi;
            fused_group_keys(sh, r0, rlast, len, &glo, &ghi);
            if (k0 >= ghi || k0 + nkeys <= glo)
                continue; /* no row of the group sees a key of the tile */
            const int kofs = (int)(k0 - r0);
            float *qt = w->qt + (size_t)g * D * VL, *ot = w->ot + (size_t)g * D * VL;
            float *m = w->m + g * VL, *l = w->l + g * VL;
            const int masked = fused_tile_mask(reach, kofs, nkeys, KT, VL);
            /* Constant masked and bias arguments keep the common tile free
             * of both. */
            if (windowed && bh && masked == 2)
                tile(qt, w->kt, w->vt, (size_t)D, ot, m, l, D, 2, kofs, nkeys, reach.ahead,
                     reach.behind, bh, span);
            else if (bh && masked)
                tile(qt, w->kt, w->vt, (size_t)D, ot, m, l, D, 1, kofs, nkeys, reach.ahead, 0, bh,
                     span);
            else if (bh)
                tile(qt, w->kt, w->vt, (size_t)D, ot, m, l, D, 0, kofs, KT, 0, 0, bh, span);
            else if (windowed && masked == 2)
                tile(qt, w->kt, w->vt, (size_t)D, ot, m, l, D, 2, kofs, nkeys, reach.ahead,
                     reach.behind, NULL, 0);
            else if (masked)
                tile(qt, w->kt, w->vt, (size_t)D, ot, m, l, D, 1, kofs, nkeys, reach.ahead, 0, NULL,
                     0);
            else
                tile(qt, w->kt, w->vt, (size_t)D, ot, m, l, D, 0, 0, KT, 0, 0, NULL, 0);
        }
    }

    /* The one division per row, and the transpose back to token rows. */
    for (int g = 0; g < ngroups; g++) {
        float *ot = w->ot + (size_t)g * D * VL;
        const vf inv = v_div(v_set1(1.0f), v_load(w->l + g * VL));
        for (int d = 0; d < D; d++)
            v_store(ot + (size_t)d * VL, v_mul(v_load(ot + (size_t)d * VL), inv));
        const int32_t r0 = q0 + g * VL;
        transpose_out(p->out + (size_t)(start + r0) * p->out_stride + hd, p->out_stride, ot,
                      nq - g * VL < VL ? (int)(nq - g * VL) : VL, D);
    }
}

/* One task's block with the head_dim fast paths: a constant head_dim lets
 * the compiler unroll the column loops and drop the partial PV step. */
FUSED_INLINE void blocks(const fused_ctx *c, const fused_ws *w, int32_t start, int32_t len, int h,
                         int32_t q0, const int windowed) {
    const int D = c->p->shape.head_dim;
#ifndef FUSED_GENERIC_ONLY
    switch (D) {
    case 32:
        query_block(c, w, start, len, h, q0, 32, windowed);
        return;
    case 64:
        query_block(c, w, start, len, h, q0, 64, windowed);
        return;
    case 128:
        query_block(c, w, start, len, h, q0, 128, windowed);
        return;
    default:
        break;
    }
#endif
    query_block(c, w, start, len, h, q0, D, windowed);
}

/* A sequence with a window that limits it and one without, each its own
 * function (query_block's note), named with the path's suffix so that a
 * profile attributes the kernel's time to its SIMD path. */
static void FUSED_NAME(fused_blocks_windowed)(const fused_ctx *c, const fused_ws *w, int32_t start,
                                              int32_t len, int h, int32_t q0) {
    blocks(c, w, start, len, h, q0, 1);
}

static void FUSED_NAME(fused_blocks)(const fused_ctx *c, const fused_ws *w, int32_t start,
                                     int32_t len, int h, int32_t q0) {
    blocks(c, w, start, len, h, q0, 0);
}

void FUSED_NAME(fused_task)(void *ctx, size_t task, int worker) {
    const fused_ctx *c = ctx;
    int32_t b, q0;
    int h;
    fused_task_coords(c, task, &b, &h, &q0);
    const int32_t start = c->p->cu_seqlens[b], len = c->p->cu_seqlens[b + 1] - start;
    const fused_ws w = fused_worker_ws(c, worker);
    if (fused_reach_of(&c->p->shape, len).windowed)
        FUSED_NAME(fused_blocks_windowed)(c, &w, start, len, h, q0);
    else
        FUSED_NAME(fused_blocks)(c, &w, start, len, h, q0);
}

#undef FUSED_INLINE
#undef FUSED_PRAGMA
#undef FUSED_UNROLL

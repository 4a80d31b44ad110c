/* bf16attn_avx512bf16.c — the bf16 attention kernel: the fused backend's
 * FlashAttention-2 loop (fused_tile.h) with both products on vdpbf16ps.
 *
 * A vector holds 16 query rows, one lane per row, as in the fused kernel.
 * vdpbf16ps adds to each fp32 lane the dot product of one pair of bf16
 * values from each operand, so the pairs run along the reduced dimension:
 *   S^T = K·Q^T   lane r of query word dp holds (q[r][2dp], q[r][2dp+1]);
 *                 the other operand broadcasts the same pair of key j;
 *   O  += P·V     lane r of probability word jp holds (p[2jp][r], p[2jp+1][r]);
 *                 the other operand broadcasts (v[2jp][c], v[2jp+1][c]).
 * Each instruction does two multiply-adds per lane, half the instructions of
 * the fp32 kernel for the same tile. Scores, the online softmax (max, exp2,
 * sum, rescale) and the output accumulator stay fp32; only Q, K, V and the
 * probabilities entering P·V are rounded to bf16 (nearest even). The row sum
 * l adds the fp32 probabilities, before their rounding: the bound in
 * reference.h counts that rounding once, as a relative error of each weight.
 *
 * Conversion is per tile: a key and a value tile are converted once per task
 * and used by its BR/16 row groups, queries once per task. The workspace
 * stays a few tiles per worker, whatever the sequence lengths.
 *
 * Compiled with AVX512-BF16 flags; reached only after the backend has found
 * AVX512_BF16 (attn_cpu_has). */
#include "bf16attn_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

enum { VL = BF16ATTN_VL, KT = BF16ATTN_KT, BR = BF16ATTN_BR, NG = BF16ATTN_BR / BF16ATTN_VL };
/* Output columns per P·V step: 16 accumulators, the 8 probability pair
 * vectors and the rescale factor use 25 of the 32 zmm registers. */
enum { PVC = 16 };

#define INLINE static inline __attribute__((always_inline))

/* Word i of the result is (bf16(lo[i]), bf16(hi[i])): rounds both to nearest
 * even (vcvtne2ps2bf16 gives lo's 16 values then hi's) and interleaves them. */
INLINE __m512i pair_bf16(__m512 lo, __m512 hi) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

INLINE __m512 dot2(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* As fused_tile.h's v_exp2: 2^n · p(f) with FUSED_EXP2_* (fused_impl.h). */
INLINE __m512 exp2v(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(FUSED_EXP2_MIN));
    const __m512 t = _mm512_add_ps(x, _mm512_set1_ps(FUSED_ROUND_MAGIC));
    const __m512 f = _mm512_sub_ps(x, _mm512_sub_ps(t, _mm512_set1_ps(FUSED_ROUND_MAGIC)));
    __m512 p = _mm512_set1_ps(FUSED_EXP2_C6);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FUSED_EXP2_C5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FUSED_EXP2_C4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FUSED_EXP2_C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FUSED_EXP2_C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FUSED_EXP2_C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FUSED_EXP2_C0));
    const __m512i e = _mm512_add_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(127));
    return _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(e, 23)));
}

/* Lanes below n replaced by fill (n <= 0: none, n >= 16: all). */
INLINE __m512 fill_below(__m512 x, int n, float fill) {
    const __mmask16 keep = n <= 0 ? (__mmask16)0xffff : n >= VL ? 0 : (__mmask16)(0xffffu << n);
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), keep, x);
}

/* Lanes at and past n replaced by fill (n <= 0: all, n >= 16: none). */
INLINE __m512 fill_from(__m512 x, int n, float fill) {
    const __mmask16 keep = n <= 0 ? 0 : n >= VL ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), keep, x);
}

/* Leading lanes (query rows) that may not see key j of a tile, and the first
 * lane past its window (fused_tile.h's, with fused_reach's ahead and
 * behind). */
INLINE int hidden_rows(int j, int kofs, int nkeys, int ahead) {
    if (j >= nkeys)
        return VL;
    return kofs + j - ahead;
}

INLINE int visible_end(int j, int kofs, int behind) {
    return kofs + j + behind + 1;
}

static inline __mmask16 first_lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* dst[0..dpr) = the D values of src·scale as bf16 pairs, zero past D; src
 * NULL gives a zero row. */
INLINE void convert_row(uint32_t *dst, const float *src, int D, int dpr, float scale) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int w = 0; w < dpr; w += 16) {
        const int c = 2 * w;
        __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
        if (src) {
            lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(first_lanes(D - c), src + c), sc);
            hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(first_lanes(D - c - 16), src + c + 16), sc);
        }
        _mm512_storeu_si512(dst + w, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* 16×16 transpose of 32-bit elements (the fused AVX-512 path's, on floats). */
static inline void transpose16(float *dst, size_t ds, const float *src, size_t ss) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(src + (size_t)i * ss);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int g = 0; g < 16; g += 4) {
        const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]),
                      c = _mm512_castps_pd(t[g + 2]), d = _mm512_castps_pd(t[g + 3]);
        r[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        const __m512 lo01 = _mm512_shuffle_f32x4(r[c], r[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi01 = _mm512_shuffle_f32x4(r[c], r[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 lo23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
        _mm512_storeu_ps(dst + (size_t)(c)*ds,
                         _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_ps(dst + (size_t)(4 + c) * ds,
                         _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_storeu_ps(dst + (size_t)(8 + c) * ds,
                         _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_ps(dst + (size_t)(12 + c) * ds,
                         _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1)));
    }
}

/* The 16 query rows of one group (nrows of them real) as (dp, VL) words. */
INLINE void pack_queries(uint32_t *qt, uint32_t *tmp, const float *q, size_t qs, int nrows,
                         const int D, const bf16attn_dims d, float qscale) {
    for (int r = 0; r < VL; r++)
        convert_row(tmp + (size_t)r * d.dpr, r < nrows ? q + (size_t)r * qs : NULL, D, d.dpr,
                    qscale);
    for (int w = 0; w < d.dp; w += 16) {
        if (w + 16 <= d.dp) {
            transpose16((float *)(qt + (size_t)w * VL), VL, (const float *)(tmp + w),
                        (size_t)d.dpr);
            continue;
        }
        for (int x = w; x < d.dp; x++)
            for (int r = 0; r < VL; r++)
                qt[(size_t)x * VL + r] = tmp[(size_t)r * d.dpr + x];
    }
}

/* kt (KT, dpr): key rows as pairs, zero past nkeys. */
INLINE void pack_keys(uint32_t *kt, const float *k, size_t ks, int nkeys, const int D,
                      const bf16attn_dims d) {
    for (int j = 0; j < KT; j++)
        convert_row(kt + (size_t)j * d.dpr, j < nkeys ? k + (size_t)j * ks : NULL, D, d.dpr, 1.0f);
}

/* vt (KT/2, dv): word c of row jp is (v[2jp][c], v[2jp+1][c]); zero past
 * nkeys and past D. */
INLINE void pack_values(uint32_t *vt, const float *v, size_t vs, int nkeys, const int D,
                        const bf16attn_dims d) {
    for (int jp = 0; jp < KT / 2; jp++) {
        const int j = 2 * jp;
        const float *a = v + (size_t)j * vs, *b = a + vs;
        for (int c = 0; c < d.dv; c += 16) {
            const __mmask16 m = first_lanes(D - c);
            const __m512 lo = j < nkeys ? _mm512_maskz_loadu_ps(m, a + c) : _mm512_setzero_ps();
            const __m512 hi = j + 1 < nkeys ? _mm512_maskz_loadu_ps(m, b + c) : _mm512_setzero_ps();
            _mm512_storeu_si512(vt + (size_t)jp * d.dv + c, pair_bf16(lo, hi));
        }
    }
}

/* ot[c] = alpha·ot[c] + Σ_jp P[jp]·vt[jp][c] for PVC columns from c0. */
INLINE void pv_step(float *ot, const __m512i *pp, __m512 alpha, const uint32_t *vt, int dv) {
    __m512 acc[PVC];
#pragma GCC unroll 16
    for (int c = 0; c < PVC; c++)
        acc[c] = _mm512_mul_ps(_mm512_loadu_ps(ot + (size_t)c * VL), alpha);
#pragma GCC unroll 8
    for (int jp = 0; jp < KT / 2; jp++) {
        const uint32_t *row = vt + (size_t)jp * dv;
#pragma GCC unroll 16
        for (int c = 0; c < PVC; c++)
            acc[c] = dot2(acc[c], pp[jp], _mm512_set1_epi32((int)row[c]));
    }
#pragma GCC unroll 16
    for (int c = 0; c < PVC; c++)
        _mm512_storeu_ps(ot + (size_t)c * VL, acc[c]);
}

/* As fused_tile.h's bias_vec: the bias of one key for the 16 rows of a
 * group, lane r from bh[x0 + r]; lanes out of ±(span − 1) (rows or keys past
 * the sequence end) get 0 from a copy, so no load leaves the vector. */
INLINE __m512 bias_vec(const float *bh, int32_t span, int32_t x0) {
    if (x0 > -span && x0 + VL - 1 < span)
        return _mm512_loadu_ps(bh + x0);
    float tmp[VL];
    for (int r = 0; r < VL; r++)
        tmp[r] = x0 + r > -span && x0 + r < span ? bh[x0 + r] : 0.0f;
    return _mm512_loadu_ps(tmp);
}

/* One tile: 16 query rows × 16 keys, as fused_tile.h's tile() (masked: 0,
 * 1 or 2 as there). */
INLINE void tile(const uint32_t *qt /* (dp, VL) */, const uint32_t *kt /* (KT, dpr) */,
                 const uint32_t *vt /* (KT/2, dv) */, float *ot /* (dv, VL) */, float *m, float *l,
                 const bf16attn_dims d, const int masked, int kofs, int nkeys, int ahead,
                 int behind, const float *bh, int32_t span) {
    __m512 s[KT];
#pragma GCC unroll 16
    for (int j = 0; j < KT; j++)
        s[j] = _mm512_setzero_ps();
    for (int w = 0; w < d.dp; w++) {
        const __m512i q = _mm512_loadu_si512(qt + (size_t)w * VL);
#pragma GCC unroll 16
        for (int j = 0; j < KT; j++)
            s[j] = dot2(s[j], q, _mm512_set1_epi32((int)kt[(size_t)j * d.dpr + w]));
    }
    if (bh) {
        /* Base-2 scores (log2(e) is in the queries): the bias joins in one
         * fp32 rounding. */
        const __m512 l2e = _mm512_set1_ps(FUSED_LOG2E);
#pragma GCC unroll 16
        for (int j = 0; j < KT; j++)
            s[j] = _mm512_fmadd_ps(bias_vec(bh, span, -kofs - j), l2e, s[j]);
    }
    if (masked) {
#pragma GCC unroll 16
        for (int j = 0; j < KT; j++)
            s[j] = fill_below(s[j], hidden_rows(j, kofs, nkeys, ahead), -INFINITY);
    }
    if (masked == 2) {
#pragma GCC unroll 16
        for (int j = 0; j < KT; j++)
            s[j] = fill_from(s[j], visible_end(j, kofs, behind), -INFINITY);
    }

    __m512 mx = s[0];
#pragma GCC unroll 16
    for (int j = 1; j < KT; j++)
        mx = _mm512_max_ps(mx, s[j]);
    const __m512 m_old = _mm512_loadu_ps(m);
    const __m512 m_new = _mm512_max_ps(mx, m_old);
    const __m512 alpha = exp2v(_mm512_sub_ps(m_old, m_new));
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int j = 0; j < KT; j++) {
        s[j] = exp2v(_mm512_sub_ps(s[j], m_new));
        if (masked)
            s[j] = fill_below(s[j], hidden_rows(j, kofs, nkeys, ahead), 0.0f);
        if (masked == 2) /* a row that sees none of the tile: as in fused_tile.h */
            s[j] = fill_from(s[j], visible_end(j, kofs, behind), 0.0f);
        sum = _mm512_add_ps(sum, s[j]);
    }
    _mm512_storeu_ps(m, m_new);
    _mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), alpha, sum));

    __m512i pp[KT / 2];
#pragma GCC unroll 8
    for (int jp = 0; jp < KT / 2; jp++)
        pp[jp] = pair_bf16(s[2 * jp], s[2 * jp + 1]);
    for (int c = 0; c < d.dv; c += PVC)
        pv_step(ot + (size_t)c * VL, pp, alpha, vt + c, d.dv);
}

/* One task: query rows [q0, q0 + BR) of head h of the sequence at tokens
 * [start, start + len), against the key tiles those rows may see (as
 * fused_tile.h's query_block: a window's far tiles are never touched). */
INLINE void query_block(const fused_ctx *c, uint32_t *ws, int32_t start, int32_t len, int h,
                        int32_t q0, const int D) {
    const attn_problem *p = c->p;
    const attn_shape *sh = &p->shape;
    const bf16attn_dims d = bf16attn_dims_of(D);
    const int32_t nq = len - q0 < BR ? len - q0 : BR;
    const int ngroups = (nq + VL - 1) / VL;
    const size_t hd = (size_t)h * (size_t)D;
    const size_t kd = (size_t)attn_kv_head(sh, h) * (size_t)D; /* the head's K/V */
    const fused_reach reach = fused_reach_of(sh, len);
    const int32_t span = p->rel_span;
    const float *bh = p->shape.rel_bias
                          ? p->rel_bias + (size_t)h * (2 * (size_t)span - 1) + (size_t)(span - 1)
                          : NULL;

    uint32_t *qt = ws;
    float *ot = (float *)(qt + (size_t)NG * d.dp * VL);
    float *m = ot + (size_t)NG * d.dv * VL;
    float *l = m + BR;
    uint32_t *kt = (uint32_t *)(l + BR);
    uint32_t *vt = kt + (size_t)KT * d.dpr;
    uint32_t *tmp = vt + (size_t)(KT / 2) * d.dv;

    for (int g = 0; g < ngroups; g++) {
        const int nrows = nq - g * VL < VL ? (int)(nq - g * VL) : VL;
        pack_queries(qt + (size_t)g * d.dp * VL, tmp,
                     p->q + (size_t)(start + q0 + g * VL) * p->q_stride + hd, p->q_stride, nrows, D,
                     d, c->qscale);
    }
    memset(ot, 0, (size_t)ngroups * d.dv * VL * sizeof(float));
    for (int i = 0; i < ngroups * VL; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }

    int32_t klo, khi;
    fused_group_keys(sh, q0, q0 + nq - 1, len, &klo, &khi);
    for (int32_t k0 = klo; k0 < khi; k0 += KT) {
        const int nkeys = khi - k0 < KT ? (int)(khi - k0) : KT;
        pack_keys(kt, p->k + (size_t)(start + k0) * p->k_stride + kd, p->k_stride, nkeys, D, d);
        pack_values(vt, p->v + (size_t)(start + k0) * p->v_stride + kd, p->v_stride, nkeys, D, d);
        for (int g = 0; g < ngroups; g++) {
            const int32_t r0 = q0 + g * VL;
            const int32_t rlast = (r0 + VL < len ? r0 + VL : len) - 1;
            int32_t glo, ghi;
            fused_group_keys(sh, r0, rlast, len, &glo, &ghi);
            if (k0 >= ghi || k0 + nkeys <= glo)
                continue;
            const int kofs = (int)(k0 - r0);
            const uint32_t *qg = qt + (size_t)g * d.dp * VL;
            float *og = ot + (size_t)g * d.dv * VL;
            const int masked = fused_tile_mask(reach, kofs, nkeys, KT, VL);
            float *mg = m + g * VL, *lg = l + g * VL;
            if (bh && masked == 2)
                tile(qg, kt, vt, og, mg, lg, d, 2, kofs, nkeys, reach.ahead, reach.behind, bh,
                     span);
            else if (bh && masked)
                tile(qg, kt, vt, og, mg, lg, d, 1, kofs, nkeys, reach.ahead, 0, bh, span);
            else if (bh)
                tile(qg, kt, vt, og, mg, lg, d, 0, kofs, KT, 0, 0, bh, span);
            else if (masked == 2)
                tile(qg, kt, vt, og, mg, lg, d, 2, kofs, nkeys, reach.ahead, reach.behind, NULL, 0);
            else if (masked)
                tile(qg, kt, vt, og, mg, lg, d, 1, kofs, nkeys, reach.ahead, 0, NULL, 0);
            else
                tile(qg, kt, vt, og, mg, lg, d, 0, 0, KT, 0, 0, NULL, 0);
        }
    }

    for (int g = 0; g < ngroups; g++) {
        float *og = ot + (size_t)g * d.dv * VL;
        const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_loadu_ps(l + g * VL));
        for (int x = 0; x < D; x++)
            _mm512_storeu_ps(og + (size_t)x * VL,
                             _mm512_mul_ps(_mm512_loadu_ps(og + (size_t)x * VL), inv));
        const int nrows = nq - g * VL < VL ? (int)(nq - g * VL) : VL;
        float *dst = p->out + (size_t)(start + q0 + g * VL) * p->out_stride + hd;
        int x0 = 0;
        if (nrows == VL)
            for (; x0 + VL <= D; x0 += VL)
                transpose16(dst + x0, p->out_stride, og + (size_t)x0 * VL, VL);
        for (int r = 0; r < nrows; r++)
            for (int x = x0; x < D; x++)
                dst[(size_t)r * p->out_stride + x] = og[(size_t)x * VL + r];
    }
}

void bf16attn_task_avx512bf16(void *ctx, size_t task, int worker) {
    const fused_ctx *c = ctx;
    int32_t b, q0;
    int h;
    bf16attn_task_coords(c, task, &b, &h, &q0);
    const int32_t start = c->p->cu_seqlens[b], len = c->p->cu_seqlens[b + 1] - start;
    uint32_t *ws = (uint32_t *)c->ws + (size_t)worker * c->ws_floats;
    /* A constant head_dim lets the compiler unroll the pair loops. */
    switch (c->p->shape.head_dim) {
    case 32:
        query_block(c, ws, start, len, h, q0, 32);
        return;
    case 64:
        query_block(c, ws, start, len, h, q0, 64);
        return;
    case 128:
        query_block(c, ws, start, len, h, q0, 128);
        return;
    default:
        query_block(c, ws, start, len, h, q0, c->p->shape.head_dim);
        return;
    }
}
#endif

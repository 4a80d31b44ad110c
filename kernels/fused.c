/* fused.c — the fused backend: FlashAttention-2 on the CPU.
 *
 * Each task takes FUSED_BR query rows of one (sequence, head) and streams
 * every key tile they may see through an online softmax (running max and sum
 * per row, rescale, one division at the end), so scores never leave
 * registers and the workspace is a few tiles per worker, never L×L. The
 * kernel itself is fused_tile.h; this file holds the backend table, the
 * dispatch to the instruction-set path chosen per call, and the portable C
 * path (vectors emulated as small arrays). */
#include "backends.h"
#include "fused_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- portable path ---------------------------------------------------------- */

#define VL            8
#define KT            8
#define PVC           4
#define FUSED_NAME(x) x##_portable
#define FUSED_GENERIC_ONLY
typedef struct {
    float x[VL];
} vf;

#define V_MAP(expr)                                                                                \
    vf r;                                                                                          \
    for (int i = 0; i < VL; i++)                                                                   \
        r.x[i] = (expr);                                                                           \
    return r

static inline vf v_set1(float a) {
    V_MAP(a);
}
static inline vf v_zero(void) {
    return v_set1(0.0f);
}
static inline vf v_load(const float *p) {
    V_MAP(p[i]);
}
static inline vf v_bcast(const float *p) {
    return v_set1(*p);
}
static inline void v_store(float *p, vf a) {
    memcpy(p, a.x, sizeof a.x);
}
static inline vf v_add(vf a, vf b) {
    V_MAP(a.x[i] + b.x[i]);
}
static inline vf v_sub(vf a, vf b) {
    V_MAP(a.x[i] - b.x[i]);
}
static inline vf v_mul(vf a, vf b) {
    V_MAP(a.x[i] * b.x[i]);
}
static inline vf v_div(vf a, vf b) {
    V_MAP(a.x[i] / b.x[i]);
}
static inline vf v_fma(vf a, vf b, vf c) {
    V_MAP(a.x[i] * b.x[i] + c.x[i]);
}
static inline vf v_max(vf a, vf b) {
    V_MAP(a.x[i] > b.x[i] ? a.x[i] : b.x[i]);
}
static inline vf v_fill_below(vf a, int n, float fill) {
    V_MAP(i < n ? fill : a.x[i]);
}
static inline vf v_fill_from(vf a, int n, float fill) {
    V_MAP(i >= n ? fill : a.x[i]);
}

static inline vf v_pow2_bits(vf t) {
    vf r;
    for (int i = 0; i < VL; i++) {
        uint32_t u;
        memcpy(&u, &t.x[i], sizeof u);
        u = (u + 127u) << 23;
        memcpy(&r.x[i], &u, sizeof u);
    }
    return r;
}

static inline void v_transpose(float *dst, size_t ds, const float *src, size_t ss) {
    for (int i = 0; i < VL; i++)
        for (int j = 0; j < VL; j++)
            dst[(size_t)i * ds + j] = src[(size_t)j * ss + i];
}

#include "fused_tile.h"

#undef V_MAP
#undef VL
#undef KT
#undef PVC
#undef FUSED_NAME
#undef FUSED_GENERIC_ONLY

/* ---- backend ------------------------------------------------------------------ */

static size_t round64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

static int fused_supports(const attn_shape *s, char *why, size_t why_len) {
    if (s->heads < 1 || s->head_dim < 1 || s->head_dim > FUSED_MAX_HEAD_DIM) {
        if (why && why_len)
            snprintf(why, why_len, "needs heads >= 1 and head_dim in 1..%d (got %d, %d)",
                     FUSED_MAX_HEAD_DIM, s->heads, s->head_dim);
        return ATTN_EUNSUPPORTED;
    }
    return ATTN_OK;
}

/* The task table of the batch, then one slice per worker whose size depends
 * on head_dim only: O(threads × block), whatever the sequence lengths. */
static size_t fused_workspace_size(const attn_shape *s, int nthreads) {
    const size_t table = round64(((size_t)(s->batch > 0 ? s->batch : 0) + 1) * sizeof(int64_t));
    const int d = s->head_dim > 0 ? s->head_dim : 1;
    return table + (size_t)(nthreads > 0 ? nthreads : 1) * fused_ws_floats(d) * sizeof(float);
}

static attn_task_fn task_for(attn_simd path) {
#if defined(__x86_64__) || defined(__i386__)
    if (path == ATTN_SIMD_AVX512)
        return fused_task_avx512;
    if (path == ATTN_SIMD_AVX2)
        return fused_task_avx2;
#endif
    (void)path;
    return fused_task_portable;
}

static int fused_forward(const attn_problem *p, void *workspace, size_t workspace_bytes,
                         const attn_parallel *par) {
    if (!par || par->nthreads < 1 || !par->parallel_for ||
        attn_problem_check(p, NULL, 0) != ATTN_OK)
        return ATTN_EINVAL;
    if (fused_supports(&p->shape, NULL, 0) != ATTN_OK)
        return ATTN_EUNSUPPORTED;
    if (!workspace || workspace_bytes < fused_workspace_size(&p->shape, par->nthreads))
        return ATTN_EWORKSPACE;

    int64_t *seq_task = workspace; /* (B + 1) */
    int64_t ntasks = 0;
    for (int32_t b = 0; b < p->shape.batch; b++) {
        seq_task[b] = ntasks;
        ntasks += (int64_t)p->shape.heads * fused_nblocks(p->cu_seqlens[b + 1] - p->cu_seqlens[b]);
    }
    seq_task[p->shape.batch] = ntasks;

    const size_t table = round64(((size_t)p->shape.batch + 1) * sizeof(int64_t));
    fused_ctx c = {
        .p = p,
        .seq_task = seq_task,
        .ws = (float *)((char *)workspace + table),
        .ws_floats = fused_ws_floats(p->shape.head_dim),
        .qscale = p->scale * FUSED_LOG2E,
    };
    par->parallel_for(par->impl, (size_t)ntasks, task_for(attn_simd_active()), &c);
    return ATTN_OK;
}

static const char *fused_simd_path(void) {
    return attn_simd_name(attn_simd_active());
}

int fused_exp2(attn_simd path, float *y, const float *x, size_t n) {
    if ((int)path < 0 || path > attn_simd_detect())
        return -1;
#if defined(__x86_64__) || defined(__i386__)
    if (path == ATTN_SIMD_AVX512) {
        fused_exp2_avx512(y, x, n);
        return 0;
    }
    if (path == ATTN_SIMD_AVX2) {
        fused_exp2_avx2(y, x, n);
        return 0;
    }
#endif
    fused_exp2_portable(y, x, n);
    return 0;
}

const attn_backend attn_backend_fused = {
    .name = "fused",
    .summary = "FlashAttention-2 style: tiled, online softmax, AVX-512/AVX2/portable",
    .speed_rank = 10,
    .supports = fused_supports,
    .workspace_size = fused_workspace_size,
    .forward = fused_forward,
    .simd_path = fused_simd_path,
    .rel_bias = 1,
    .gqa = 1,
    .window = 1,
};

/* naive.c — the reference backend: plain portable C, obviously correct.
 *
 * For each (sequence, head) and each query row: the row of scores
 * scale·q·kᵀ over the keys the query sees, the row max subtracted, exact
 * expf, normalised, multiplied by V. Rows are done one at a time, so the
 * workspace is one score row per worker (O(threads × max_seqlen)) rather than
 * a whole L×L matrix: the arithmetic is the same, and the reference can run
 * the longest sequences the service accepts. */
#include "attention.h"
#include "backends.h"

#include <math.h>
#include <stdio.h>

/* Sequences longer than this would make one score row exceed what a worker
 * should hold; 1 Mi keys is 4 MiB per worker. */
#define NAIVE_MAX_SEQLEN (1 << 20)

typedef struct {
    const attn_problem *p;
    float *scores; /* [nthreads][max_seqlen] */
} naive_ctx;

static int naive_supports(const attn_shape *s, char *why, size_t why_len) {
    if (s->head_dim < 1 || s->heads < 1) {
        if (why && why_len)
            snprintf(why, why_len, "heads and head_dim must be >= 1");
        return ATTN_EUNSUPPORTED;
    }
    if (s->max_seqlen > NAIVE_MAX_SEQLEN) {
        if (why && why_len)
            snprintf(why, why_len, "max_seqlen %d exceeds %d", s->max_seqlen, NAIVE_MAX_SEQLEN);
        return ATTN_EUNSUPPORTED;
    }
    return ATTN_OK;
}

static size_t naive_workspace_size(const attn_shape *s, int nthreads) {
    return (size_t)(nthreads > 0 ? nthreads : 1) * (size_t)(s->max_seqlen > 0 ? s->max_seqlen : 0) *
           sizeof(float);
}

/* One task: every query row of one (sequence, head). */
static void naive_task(void *arg, size_t task, int worker) {
    const naive_ctx *c = arg;
    const attn_problem *p = c->p;
    const int H = p->shape.heads, D = p->shape.head_dim;
    const int32_t b = (int32_t)(task / (size_t)H);
    const int h = (int)(task % (size_t)H), hk = attn_kv_head(&p->shape, h);
    const int32_t start = p->cu_seqlens[b], len = p->cu_seqlens[b + 1] - start;
    float *s = c->scores + (size_t)worker * (size_t)p->shape.max_seqlen; /* (len) */
    /* bias[i - j]: the head's relative position bias, centred on distance 0. */
    const float *bias =
        p->shape.rel_bias
            ? p->rel_bias + (size_t)h * (2 * (size_t)p->rel_span - 1) + (size_t)(p->rel_span - 1)
            : NULL;

    for (int32_t i = 0; i < len; i++) {
        const float *qi = p->q + (size_t)(start + i) * p->q_stride + (size_t)h * D; /* (D) */
        int32_t lo, hi;
        attn_key_range(&p->shape, i, len, &lo, &hi);
        float m = -INFINITY;
        for (int32_t j = lo; j < hi; j++) {
            const float *kj = p->k + (size_t)(start + j) * p->k_stride + (size_t)hk * D;
            float dot = 0.0f;
            for (int d = 0; d < D; d++)
                dot += qi[d] * kj[d];
            s[j] = dot * p->scale;
            if (bias)
                s[j] += bias[i - j];
            m = s[j] > m ? s[j] : m;
        }
        float sum = 0.0f;
        for (int32_t j = lo; j < hi; j++) {
            s[j] = expf(s[j] - m);
            sum += s[j];
        }
        float *oi = p->out + (size_t)(start + i) * p->out_stride + (size_t)h * D; /* (D) */
        for (int d = 0; d < D; d++)
            oi[d] = 0.0f;
        for (int32_t j = lo; j < hi; j++) {
            const float *vj = p->v + (size_t)(start + j) * p->v_stride + (size_t)hk * D;
            const float w = s[j] / sum;
            for (int d = 0; d < D; d++)
                oi[d] += w * vj[d];
        }
    }
}

static int naive_forward(const attn_problem *p, void *workspace, size_t workspace_bytes,
                         const attn_parallel *par) {
    if (attn_problem_check(p, NULL, 0) != ATTN_OK || !par)
        return ATTN_EINVAL;
    if (naive_supports(&p->shape, NULL, 0) != ATTN_OK)
        return ATTN_EUNSUPPORTED;
    if (workspace_bytes < naive_workspace_size(&p->shape, par->nthreads) ||
        (!workspace && p->shape.max_seqlen > 0))
        return ATTN_EWORKSPACE;
    naive_ctx c = {.p = p, .scores = workspace};
    par->parallel_for(par->impl, (size_t)p->shape.batch * (size_t)p->shape.heads, naive_task, &c);
    return ATTN_OK;
}

static const char *naive_simd_path(void) {
    return "portable";
}

const attn_backend attn_backend_naive = {
    .name = "naive",
    .summary = "reference: full softmax per row, exact expf, portable C",
    .speed_rank = 0,
    .supports = naive_supports,
    .workspace_size = naive_workspace_size,
    .forward = naive_forward,
    .simd_path = naive_simd_path,
    .rel_bias = 1,
    .gqa = 1,
    .window = 1,
};

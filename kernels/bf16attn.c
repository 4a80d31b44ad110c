/* bf16attn.c — the bf16 backend: the fused backend's tiling and online
 * softmax with Q, K, V and the probabilities rounded to bf16 and both
 * products on vdpbf16ps (bf16attn_avx512bf16.c). Offered only where the CPU
 * has AVX512_BF16 and the AVX-512 path is active; elsewhere supports()
 * refuses with the reason. Its error bound is reference.h's bf16 one
 * (precision ATTN_PREC_BF16), which the self-test and shadow verification
 * apply to it. */
#include "backends.h"
#include "bf16attn_impl.h"

#include <stdio.h>

static size_t round64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

static int bf16attn_supports(const attn_shape *s, char *why, size_t why_len) {
    if (!attn_cpu_has(ATTN_CPU_AVX512_BF16)) {
        if (why && why_len)
            snprintf(why, why_len,
                     "needs AVX512_BF16 (vdpbf16ps) on the active AVX-512 path; this CPU or "
                     "path (%s) does not offer it",
                     attn_simd_name(attn_simd_active()));
        return ATTN_EUNSUPPORTED;
    }
    if (s->heads < 1 || s->head_dim < 1 || s->head_dim > BF16ATTN_MAX_HEAD_DIM) {
        if (why && why_len)
            snprintf(why, why_len, "needs heads >= 1 and head_dim in 1..%d (got %d, %d)",
                     BF16ATTN_MAX_HEAD_DIM, s->heads, s->head_dim);
        return ATTN_EUNSUPPORTED;
    }
    return ATTN_OK;
}

/* The task table of the batch, then one slice per worker whose size depends
 * on head_dim only (bf16attn_ws_words). */
static size_t bf16attn_workspace_size(const attn_shape *s, int nthreads) {
    const size_t table = round64(((size_t)(s->batch > 0 ? s->batch : 0) + 1) * sizeof(int64_t));
    const int d = s->head_dim > 0 ? s->head_dim : 1;
    return table + (size_t)(nthreads > 0 ? nthreads : 1) * bf16attn_ws_words(d) * sizeof(uint32_t);
}

static int bf16attn_forward(const attn_problem *p, void *workspace, size_t workspace_bytes,
                            const attn_parallel *par) {
    if (!par || par->nthreads < 1 || !par->parallel_for ||
        attn_problem_check(p, NULL, 0) != ATTN_OK)
        return ATTN_EINVAL;
    if (bf16attn_supports(&p->shape, NULL, 0) != ATTN_OK)
        return ATTN_EUNSUPPORTED;
    if (!workspace || workspace_bytes < bf16attn_workspace_size(&p->shape, par->nthreads))
        return ATTN_EWORKSPACE;
#if defined(__x86_64__) || defined(__i386__)
    int64_t *seq_task = workspace; /* (B + 1) */
    int64_t ntasks = 0;
    for (int32_t b = 0; b < p->shape.batch; b++) {
        seq_task[b] = ntasks;
        ntasks +=
            (int64_t)p->shape.heads * bf16attn_nblocks(p->cu_seqlens[b + 1] - p->cu_seqlens[b]);
    }
    seq_task[p->shape.batch] = ntasks;
    const size_t table = round64(((size_t)p->shape.batch + 1) * sizeof(int64_t));
    fused_ctx c = {
        .p = p,
        .seq_task = seq_task,
        .ws = (float *)((char *)workspace + table),
        .ws_floats = bf16attn_ws_words(p->shape.head_dim),
        .qscale = p->scale * FUSED_LOG2E,
    };
    par->parallel_for(par->impl, (size_t)ntasks, bf16attn_task_avx512bf16, &c);
    return ATTN_OK;
#else
    return ATTN_EUNSUPPORTED;
#endif
}

static const char *bf16attn_simd_path(void) {
    return attn_cpu_has(ATTN_CPU_AVX512_BF16) ? "avx512bf16" : "unavailable";
}

const attn_backend attn_backend_bf16 = {
    .name = "bf16",
    .summary = "fused tiling with Q, K, V in bf16: QK^T and PV on vdpbf16ps, softmax in fp32 "
               "(AVX512_BF16 only)",
    /* Below fused: `auto` must never trade the fp32 service's accuracy for
     * speed; bf16 runs only where it is named. */
    .speed_rank = 5,
    .supports = bf16attn_supports,
    .workspace_size = bf16attn_workspace_size,
    .forward = bf16attn_forward,
    .simd_path = bf16attn_simd_path,
    .precision = ATTN_PREC_BF16,
    .rel_bias = 1,
    .gqa = 1,
    .window = 1,
};

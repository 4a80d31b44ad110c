/* attention.c — helpers every backend and caller shares: errors, problem
 * validation, FLOP counts. */
#include "attention.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

const char *attn_strerror(int err) {
    switch (err) {
#define ATTN_ERR_CASE(name, code, msg)                                                             \
    case code:                                                                                     \
        return msg;
        ATTN_ERRORS(ATTN_ERR_CASE)
#undef ATTN_ERR_CASE
    }
    return "unknown error";
}

void attn_problem_dense(attn_problem *p, attn_shape shape, const int32_t *cu_seqlens,
                        const float *q, const float *k, const float *v, float *out) {
    size_t row = (size_t)shape.heads * (size_t)shape.head_dim;
    *p = (attn_problem){
        .shape = shape,
        .cu_seqlens = cu_seqlens,
        .q = q,
        .k = k,
        .v = v,
        .out = out,
        .q_stride = row,
        .k_stride = row,
        .v_stride = row,
        .out_stride = row,
        .scale = shape.head_dim > 0 ? 1.0f / sqrtf((float)shape.head_dim) : 1.0f,
    };
}

static int fail(char *why, size_t why_len, const char *fmt, ...) {
    if (why && why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return ATTN_EINVAL;
}

int attn_problem_check(const attn_problem *p, char *why, size_t why_len) {
    if (!p)
        return fail(why, why_len, "no problem given");
    const attn_shape *s = &p->shape;
    if (s->batch < 1 || s->heads < 1 || s->head_dim < 1 || s->total_tokens < 0 ||
        s->max_seqlen < 0 || s->max_seqlen > s->total_tokens)
        return fail(why, why_len,
                    "bad shape: batch=%d heads=%d head_dim=%d total_tokens=%d max_seqlen=%d",
                    s->batch, s->heads, s->head_dim, s->total_tokens, s->max_seqlen);
    if (!p->cu_seqlens)
        return fail(why, why_len, "cu_seqlens is NULL");
    if (p->cu_seqlens[0] != 0)
        return fail(why, why_len, "cu_seqlens[0] = %d, must be 0", p->cu_seqlens[0]);
    for (int32_t b = 0; b < s->batch; b++) {
        int32_t len = p->cu_seqlens[b + 1] - p->cu_seqlens[b];
        if (len < 0 || len > s->max_seqlen)
            return fail(why, why_len, "sequence %d has length %d, outside [0, max_seqlen=%d]", b,
                        len, s->max_seqlen);
    }
    if (p->cu_seqlens[s->batch] != s->total_tokens)
        return fail(why, why_len, "cu_seqlens[batch] = %d but total_tokens = %d",
                    p->cu_seqlens[s->batch], s->total_tokens);
    size_t row = (size_t)s->heads * (size_t)s->head_dim;
    if (p->q_stride < row || p->k_stride < row || p->v_stride < row || p->out_stride < row)
        return fail(why, why_len, "token strides must be at least heads*head_dim = %zu", row);
    if (s->total_tokens > 0 && (!p->q || !p->k || !p->v || !p->out))
        return fail(why, why_len, "q, k, v and out must be non-NULL");
    if (!isfinite(p->scale))
        return fail(why, why_len, "scale is not finite");
    if (s->rel_bias && (!p->rel_bias || p->rel_span < s->max_seqlen || p->rel_span < 1))
        return fail(why, why_len,
                    "a relative position bias needs its vector and rel_span >= max_seqlen = %d "
                    "(got %d)",
                    s->max_seqlen, p->rel_span);
    return ATTN_OK;
}

int attn_backend_supports(const attn_backend *b, const attn_shape *shape, char *why,
                          size_t why_len) {
    if (shape->rel_bias && !b->rel_bias) {
        if (why && why_len)
            snprintf(why, why_len, "backend '%s' does not add a relative position bias", b->name);
        return ATTN_EUNSUPPORTED;
    }
    return b->supports(shape, why, why_len);
}

double attn_flops(const attn_problem *p) {
    double f = 0.0;
    for (int32_t b = 0; b < p->shape.batch; b++) {
        double n = (double)(p->cu_seqlens[b + 1] - p->cu_seqlens[b]);
        /* (query, key) pairs: n² in full, counted as half when causal, the
         * convention FlashAttention's benchmarks use. */
        double pairs = p->shape.causal ? n * n / 2.0 : n * n;
        f += 4.0 * pairs * p->shape.head_dim * p->shape.heads;
    }
    return f;
}

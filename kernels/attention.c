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
    size_t kv_row = (size_t)attn_kv_heads(&shape) * (size_t)shape.head_dim;
    *p = (attn_problem){
        .shape = shape,
        .cu_seqlens = cu_seqlens,
        .q = q,
        .k = k,
        .v = v,
        .out = out,
        .q_stride = row,
        .k_stride = kv_row,
        .v_stride = kv_row,
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
    if (s->kv_heads < 0 || s->kv_heads > s->heads || (s->kv_heads && s->heads % s->kv_heads))
        return fail(why, why_len, "kv_heads = %d must be 0 or divide heads = %d", s->kv_heads,
                    s->heads);
    if (s->window < 0)
        return fail(why, why_len, "window = %d must be >= 0", s->window);
    size_t row = (size_t)s->heads * (size_t)s->head_dim;
    size_t kv_row = (size_t)attn_kv_heads(s) * (size_t)s->head_dim;
    if (p->q_stride < row || p->out_stride < row)
        return fail(why, why_len, "q and out token strides must be at least heads*head_dim = %zu",
                    row);
    if (p->k_stride < kv_row || p->v_stride < kv_row)
        return fail(why, why_len, "k and v token strides must be at least kv_heads*head_dim = %zu",
                    kv_row);
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
    const char *lacks = NULL;
    if (shape->rel_bias && !b->rel_bias)
        lacks = "add a relative position bias";
    else if (shape->kv_heads > 0 && shape->kv_heads < shape->heads && !b->gqa)
        lacks = "group query heads over fewer K/V heads";
    else if (shape->window > 0 && !b->window)
        lacks = "keep a sliding window";
    if (lacks) {
        if (why && why_len)
            snprintf(why, why_len, "backend '%s' does not %s", b->name, lacks);
        return ATTN_EUNSUPPORTED;
    }
    return b->supports(shape, why, why_len);
}

double attn_flops(const attn_problem *p) {
    double f = 0.0;
    for (int32_t b = 0; b < p->shape.batch; b++) {
        const int32_t len = p->cu_seqlens[b + 1] - p->cu_seqlens[b];
        const double n = (double)len;
        double pairs = p->shape.causal ? n * n / 2.0 : n * n;
        if (p->shape.window > 0 && p->shape.window < len) {
            /* A window leaves each query its own key range: count them. */
            pairs = 0.0;
            for (int32_t i = 0; i < len; i++) {
                int32_t lo, hi;
                attn_key_range(&p->shape, i, len, &lo, &hi);
                pairs += (double)(hi - lo);
            }
        }
        f += 4.0 * pairs * p->shape.head_dim * p->shape.heads;
    }
    return f;
}

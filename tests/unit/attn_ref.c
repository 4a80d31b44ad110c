/* attn_ref.c — float64 reference attention for the tests. */
#include "attn_ref.h"

#include <criterion/criterion.h>

#include "kernels/simd.h"
#include "kernels/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t rng_next(test_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

int rng_int(test_rng *r, int lo, int hi) {
    return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

float rng_normal(test_rng *r) {
    /* Box–Muller from two uniforms in (0, 1]. */
    double u1 = ((double)(rng_next(r) >> 11) + 1.0) / 9007199254740992.0;
    double u2 = (double)(rng_next(r) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Whether the query at position i sees the key at position j. */
static int sees(const attn_shape *s, int32_t i, int32_t j) {
    const int32_t dist = i > j ? i - j : j - i;
    return !(s->causal && j > i) && !(s->window && dist > s->window);
}

void attn_reference(const attn_problem *p, int32_t row_lo, int32_t row_hi, double *ref,
                    double *vmax, double *smax) {
    double smax_seen = 0.0;
    const int H = p->shape.heads, D = p->shape.head_dim;
    double *s =
        malloc(sizeof(double) * (size_t)(p->shape.max_seqlen > 0 ? p->shape.max_seqlen : 1));
    for (int32_t b = 0; b < p->shape.batch; b++) {
        const int32_t start = p->cu_seqlens[b], len = p->cu_seqlens[b + 1] - start;
        for (int32_t i = 0; i < len; i++) {
            const int32_t t = start + i;
            if (t < row_lo || t >= row_hi)
                continue;
            for (int h = 0; h < H; h++) {
                /* Written out here rather than through attention.h's
                 * attn_kv_head and attn_key_range, so that the backends'
                 * use of those is checked against an independent reading. */
                const int kvh = p->shape.kv_heads ? p->shape.kv_heads : H;
                const int hk = h / (H / kvh);
                const float *qi = p->q + (size_t)t * p->q_stride + (size_t)h * D;
                double m = -INFINITY;
                for (int32_t j = 0; j < len; j++) {
                    if (!sees(&p->shape, i, j)) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    const float *kj = p->k + (size_t)(start + j) * p->k_stride + (size_t)hk * D;
                    double dot = 0.0;
                    for (int d = 0; d < D; d++)
                        dot += (double)qi[d] * (double)kj[d];
                    s[j] = dot * (double)p->scale;
                    m = fmax(m, s[j]);
                    smax_seen = fmax(smax_seen, fabs(s[j]));
                }
                double sum = 0.0;
                for (int32_t j = 0; j < len; j++) {
                    s[j] = exp(s[j] - m);
                    sum += s[j];
                }
                double *r = ref + ((size_t)(t - row_lo) * H + h) * D;
                double *vm = vmax ? vmax + ((size_t)(t - row_lo) * H + h) * D : NULL;
                for (int d = 0; d < D; d++) {
                    r[d] = 0.0;
                    if (vm)
                        vm[d] = 0.0;
                }
                for (int32_t j = 0; j < len; j++) {
                    if (!sees(&p->shape, i, j))
                        continue; /* vmax counts only the keys seen */
                    const float *vj = p->v + (size_t)(start + j) * p->v_stride + (size_t)hk * D;
                    for (int d = 0; d < D; d++) {
                        r[d] += s[j] / sum * (double)vj[d];
                        if (vm)
                            vm[d] = fmax(vm[d], fabs((double)vj[d]));
                    }
                }
            }
        }
    }
    free(s);
    if (smax)
        *smax = smax_seen;
}

int attn_run_backend(const attn_backend *b, const attn_problem *p, int nthreads) {
    tp_pool *pool = tp_create(nthreads);
    const size_t bytes = b->workspace_size(&p->shape, nthreads);
    void *ws = aligned_alloc(64, (bytes + 64) / 64 * 64);
    int rc = ATTN_EINVAL;
    if (pool && ws) {
        const attn_parallel par = tp_parallel(pool);
        rc = b->forward(p, ws, bytes, &par);
    }
    free(ws);
    if (pool)
        tp_destroy(pool);
    return rc;
}

attn_check attn_check_every_row(attn_precision prec, const attn_problem *p) {
    int32_t *rows = malloc((size_t)(p->shape.total_tokens + 1) * sizeof *rows);
    for (int32_t t = 0; t < p->shape.total_tokens; t++)
        rows[t] = t;
    double *scratch = malloc(attn_check_scratch(&p->shape) * sizeof *scratch);
    attn_check res = {0};
    attn_check_rows_as(p, prec, rows, p->shape.total_tokens, scratch, &res);
    free(rows);
    free(scratch);
    return res;
}

attn_check attn_run_and_check(const attn_backend *b, const attn_problem *p) {
    char why[256] = "";
    cr_assert_eq(attn_backend_supports(b, &p->shape, why, sizeof why), ATTN_OK, "%s: %s", b->name,
                 why);
    cr_assert_eq(attn_run_backend(b, p, 2), ATTN_OK, "%s", b->name);
    return attn_check_every_row(b->precision, p);
}

int32_t *attn_cu_seqlens(const int32_t *lens, int batch, int32_t *maxlen) {
    int32_t *cu = calloc((size_t)batch + 1, sizeof *cu);
    cr_assert_not_null(cu);
    *maxlen = 0;
    for (int b = 0; b < batch; b++) {
        cu[b + 1] = cu[b] + lens[b];
        *maxlen = lens[b] > *maxlen ? lens[b] : *maxlen;
    }
    return cu;
}

int attn_accept_all(const attn_shape *s, char *why, size_t why_len) {
    (void)s;
    (void)why;
    (void)why_len;
    return ATTN_OK;
}

void attn_on_every_path(void (*each)(const attn_backend *b, const char *path),
                        const attn_backend *b) {
    for (int path = ATTN_SIMD_PORTABLE; path <= (int)attn_simd_detect(); path++) {
        cr_assert_eq(attn_simd_force((attn_simd)path), 0);
        each(b, attn_simd_name((attn_simd)path));
    }
    attn_simd_unforce();
}

int attn_bf16_offered(const attn_shape *s) {
    char why[256] = "";
    if (attn_backend_supports(&attn_backend_bf16, s, why, sizeof why) == ATTN_OK)
        return 1;
    cr_assert(strstr(why, "AVX512_BF16"), "%s", why);
    cr_log_warn("bf16 backend not offered here: %s", why);
    return 0;
}

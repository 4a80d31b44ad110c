/* test_rel_bias.c — the relative position bias of the attention contract
 * (kernels/attention.h: rel_bias, rel_span) in every CPU backend and on
 * every SIMD path this machine runs, against the float64 reference.
 *
 * Bound: each backend is held to kernels/reference.h's bound of its own
 * precision (attn_check_rows_as with the table's precision), the one the
 * self-test and shadow verification apply; with a bias, smax counts it and
 * the bound has one more score rounding (reference.c, bound_full). The same
 * bound rejects a backend that ignores the bias: the biases drawn here move
 * every output far past it (checked below, so the test cannot pass by
 * accident). Cases: lengths around the fused tiles (1, 15, 16, 17, 127, 128,
 * 129, 300) packed together, a rel_span longer than the batch, causal,
 * padded token strides, and MPNet's bucketed bias (model/position.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"
#include "kernels/attention.h"
#include "kernels/backends.h"
#include "kernels/reference.h"
#include "kernels/threadpool.h"
#include "model/position.h"

typedef struct {
    attn_problem p;
    int32_t *cu;
    float *q, *k, *v, *out, *bias;
} bcase;

static void bcase_make(bcase *c, uint64_t seed, const int32_t *lens, int batch, int heads, int D,
                       int causal, int32_t span, int pad, int buckets) {
    test_rng r = {seed};
    memset(c, 0, sizeof *c);
    int32_t maxlen;
    c->cu = attn_cu_seqlens(lens, batch, &maxlen);
    const int32_t T = c->cu[batch];
    const size_t stride = (size_t)heads * D + (size_t)pad, n = (size_t)(T > 0 ? T : 1) * stride;
    c->q = malloc(n * sizeof(float));
    c->k = malloc(n * sizeof(float));
    c->v = malloc(n * sizeof(float));
    c->out = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        c->q[i] = rng_normal(&r);
        c->k[i] = rng_normal(&r);
        c->v[i] = rng_normal(&r);
        c->out[i] = NAN;
    }
    const size_t row = 2 * (size_t)span - 1;
    c->bias = malloc((size_t)heads * row * sizeof(float));
    if (buckets) {
        /* MPNet's: 32 buckets, max_distance 128, a N(0, 2) table. */
        const enc_pos_buckets bk = {.num_buckets = 32, .max_distance = 128};
        float table[32 * 16];
        for (int i = 0; i < 32 * heads; i++)
            table[i] = 2.0f * rng_normal(&r);
        enc_pos_bucket_bias(&bk, table, heads, span, c->bias);
    } else {
        for (size_t i = 0; i < (size_t)heads * row; i++)
            c->bias[i] = 3.0f * rng_normal(&r);
    }
    const attn_shape s = {.batch = batch,
                          .total_tokens = T,
                          .max_seqlen = maxlen,
                          .heads = heads,
                          .head_dim = D,
                          .causal = causal,
                          .rel_bias = 1};
    attn_problem_dense(&c->p, s, c->cu, c->q, c->k, c->v, c->out);
    c->p.q_stride = c->p.k_stride = c->p.v_stride = c->p.out_stride = stride;
    c->p.rel_bias = c->bias;
    c->p.rel_span = span;
}

static void bcase_free(bcase *c) {
    free(c->cu);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->out);
    free(c->bias);
}

static void run_case(const attn_backend *b, const char *path, const int32_t *lens, int batch,
                     int heads, int D, int causal, int32_t span, int pad, int buckets,
                     uint64_t seed) {
    bcase c;
    bcase_make(&c, seed, lens, batch, heads, D, causal, span, pad, buckets);
    const attn_check res = attn_run_and_check(b, &c.p);
    cr_assert_eq(res.bad, 0,
                 "%s/%s B=%d H=%d D=%d causal=%d span=%d buckets=%d: %lld of %lld past the "
                 "bound; worst token %d head %d dim %d got %.9g want %.9g bound %.3g",
                 b->name, path, batch, heads, D, causal, (int)span, buckets, (long long)res.bad,
                 (long long)res.elements, (int)res.bad_token, res.bad_head, res.bad_dim,
                 (double)res.bad_got, res.bad_want, res.bad_bound);
    cr_log_info("%s/%s B=%d D=%d causal=%d buckets=%d: worst %.3f of the bound", b->name, path,
                batch, D, causal, buckets, res.max_ratio);

    /* The same output held to the reference without the bias must fail:
     * the bias moves the outputs far past the bound. */
    c.p.shape.rel_bias = 0;
    const attn_check without = attn_check_every_row(attn_backend_naive.precision, &c.p);
    cr_assert_gt(without.bad, res.elements / 4, "%s: the bias barely moved the outputs (%lld)",
                 b->name, (long long)without.bad);
    bcase_free(&c);
}

static void every_case(const attn_backend *b, const char *path) {
    static const int32_t mixed[] = {1, 15, 16, 17, 127, 128, 129, 300};
    static const int32_t edges[] = {33, 0, 64, 5};
    static const int dims[] = {8, 16, 32, 64, 17};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int D = dims[i];
        run_case(b, path, mixed, 8, 3, D, 0, 300, 0, 0, 11 + (uint64_t)D);
        run_case(b, path, mixed, 8, 2, D, 0, 512, 0, 1, 21 + (uint64_t)D);
        run_case(b, path, edges, 4, 4, D, 1, 80, 5, 0, 31 + (uint64_t)D);
        run_case(b, path, edges, 4, 4, D, 0, 64, 3, 1, 41 + (uint64_t)D);
    }
}

Test(rel_bias, naive) {
    every_case(&attn_backend_naive, "portable");
}

Test(rel_bias, fused_every_path, .timeout = 300) {
    attn_on_every_path(every_case, &attn_backend_fused);
}

Test(rel_bias, bf16, .timeout = 300) {
    const attn_shape s = {
        .batch = 1, .total_tokens = 8, .max_seqlen = 8, .heads = 1, .head_dim = 16, .rel_bias = 1};
    if (attn_bf16_offered(&s))
        every_case(&attn_backend_bf16, "avx512bf16");
}

/* A backend table that does not say it adds the bias is refused for a shape
 * that carries one, by name, and `auto` passes over it; the contract's check
 * refuses a biased problem without its vector or with a short span. */
Test(rel_bias, capability_and_problem_checks) {
    attn_backend old = attn_backend_fused;
    old.name = "old";
    old.rel_bias = 0;
    old.supports = attn_accept_all;
    const attn_shape s = {
        .batch = 1, .total_tokens = 4, .max_seqlen = 4, .heads = 1, .head_dim = 8, .rel_bias = 1};
    char why[256] = "";
    cr_assert_eq(attn_backend_supports(&old, &s, why, sizeof why), ATTN_EUNSUPPORTED);
    cr_assert(strstr(why, "old") && strstr(why, "relative position bias"), "%s", why);
    attn_shape plain = s;
    plain.rel_bias = 0;
    cr_assert_eq(attn_backend_supports(&old, &plain, why, sizeof why), ATTN_OK);
    for (const attn_backend *const *b = attn_backends(); *b; b++)
        if (strcmp((*b)->name, "naive") == 0 || strcmp((*b)->name, "fused") == 0 ||
            strcmp((*b)->name, "bf16") == 0)
            cr_assert((*b)->rel_bias, "%s", (*b)->name);

    const int32_t cu[2] = {0, 4};
    float x[32] = {0}, out[32], bias[7] = {0};
    attn_problem p;
    attn_problem_dense(&p, s, cu, x, x, x, out);
    cr_assert_eq(attn_problem_check(&p, why, sizeof why), ATTN_EINVAL);
    p.rel_bias = bias;
    p.rel_span = 3;
    cr_assert_eq(attn_problem_check(&p, why, sizeof why), ATTN_EINVAL);
    cr_assert(strstr(why, "rel_span"), "%s", why);
    p.rel_span = 4;
    cr_assert_eq(attn_problem_check(&p, why, sizeof why), ATTN_OK, "%s", why);
}

/* The bucket function against a few values of transformers'
 * relative_position_bucket (num_buckets 32, max_distance 128); the golden
 * test in test_model_mpnet.c holds it to transformers at every distance up
 * to 1,100. */
Test(rel_bias, bucket_values) {
    const enc_pos_buckets b = {.num_buckets = 32, .max_distance = 128};
    /* rel = key - query: keys before the query are buckets 0..15. */
    static const int32_t rel[] = {0,    -1,    -7, -8, -15, -16, -31, -32, -127,
                                  -128, -5000, 1,  7,  8,   16,  32,  128, 5000};
    static const int want[] = {0, 1, 7, 8, 9, 10, 11, 12, 15, 15, 15, 17, 23, 24, 26, 28, 31, 31};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++)
        cr_assert_eq(enc_pos_bucket(rel[i], &b), want[i], "rel %d: %d, want %d", rel[i],
                     enc_pos_bucket(rel[i], &b), want[i]);
}

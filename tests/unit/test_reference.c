/* test_reference.c — the shared reference and bound (kernels/reference.h):
 * the same numbers as the tests' own reference, a correct backend passes,
 * and a single wrong element is found and located. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "attn_ref.h"
#include "kernels/attention.h"
#include "kernels/reference.h"

typedef struct {
    int32_t cu[4];
    float *q, *k, *v, *out;
    attn_problem p;
} small_case;

/* Three sequences (5, 0 and 17 tokens), 2 heads of 8. */
static void build(small_case *c, int causal) {
    test_rng r = {0x5eed5eedULL};
    const int H = 2, D = 8;
    c->cu[0] = 0, c->cu[1] = 5, c->cu[2] = 5, c->cu[3] = 22;
    const size_t n = 22 * (size_t)H * D;
    c->q = malloc(n * sizeof(float));
    c->k = malloc(n * sizeof(float));
    c->v = malloc(n * sizeof(float));
    c->out = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        c->q[i] = rng_normal(&r);
        c->k[i] = rng_normal(&r);
        c->v[i] = rng_normal(&r);
    }
    attn_shape s = {.batch = 3,
                    .total_tokens = 22,
                    .max_seqlen = 17,
                    .heads = H,
                    .head_dim = D,
                    .causal = causal};
    attn_problem_dense(&c->p, s, c->cu, c->q, c->k, c->v, c->out);
    const attn_backend *naive = attn_backend_find("naive");
    const size_t ws = naive->workspace_size(&s, 1);
    void *work = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
    cr_assert_eq(naive->forward(&c->p, work, ws, &attn_parallel_serial), ATTN_OK);
    free(work);
}

static void release(small_case *c) {
    free(c->q), free(c->k), free(c->v), free(c->out);
}

Test(reference, rows_match_the_tests_reference) {
    for (int causal = 0; causal <= 1; causal++) {
        small_case c;
        build(&c, causal);
        double all[22 * 16], allv[22 * 16], smax_all;
        attn_reference(&c.p, 0, 22, all, allv, &smax_all);
        double scratch[64];
        cr_assert_leq(attn_check_scratch(&c.p.shape), 64);
        for (int32_t t = 0; t < 22; t++)
            for (int h = 0; h < 2; h++) {
                int32_t seq = t < 5 ? 0 : 2;
                double ref[8], vmax[8];
                double smax = attn_reference_row(&c.p, seq, t, h, ref, vmax, scratch);
                cr_assert_leq(smax, smax_all);
                for (int d = 0; d < 8; d++) {
                    cr_assert_eq(ref[d], all[((size_t)t * 2 + h) * 8 + d], "t %d h %d d %d", t, h,
                                 d);
                    cr_assert_eq(vmax[d], allv[((size_t)t * 2 + h) * 8 + d]);
                }
            }
        release(&c);
    }
}

Test(reference, a_correct_output_passes_and_one_wrong_element_is_located) {
    small_case c;
    build(&c, 1);
    int32_t rows[22];
    for (int32_t i = 0; i < 22; i++)
        rows[i] = 21 - i;
    double scratch[64];
    attn_check res = {0};
    cr_assert_eq(attn_check_rows(&c.p, rows, 22, scratch, &res), 0);
    cr_assert_eq(res.elements, 22 * 16);
    cr_assert_eq(res.bad, 0);
    cr_assert(res.max_ratio < 1.0 && res.max_ratio > 0.0, "ratio %g", res.max_ratio);

    c.out[(7 * 2 + 1) * 8 + 3] += 1e-3f; /* token 7 (seq 2), head 1, dim 3 */
    c.out[(2 * 2 + 0) * 8 + 0] = NAN;    /* token 2 (seq 0), head 0, dim 0 */
    attn_check bad = {0};
    cr_assert_eq(attn_check_rows(&c.p, rows, 22, scratch, &bad), 2);
    cr_assert_eq(bad.bad, 2);
    cr_assert(isinf(bad.max_abs_err));
    cr_assert_eq(bad.bad_token, 2, "the worst element is the non-finite one");
    cr_assert_eq(bad.bad_seq, 0);
    cr_assert_eq(bad.bad_head, 0);
    cr_assert_eq(bad.bad_dim, 0);

    attn_check one = {0};
    int32_t row7 = 7;
    cr_assert_eq(attn_check_rows(&c.p, &row7, 1, scratch, &one), 1);
    cr_assert_eq(one.bad_seq, 2);
    cr_assert_eq(one.bad_head, 1);
    cr_assert_eq(one.bad_dim, 3);
    cr_assert_gt(one.bad_bound, 0.0);
    cr_assert(fabs(one.bad_got - one.bad_want) > one.bad_bound);
    release(&c);
}

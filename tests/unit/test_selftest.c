/* test_selftest.c — the start-up self-test (kernels/selftest.h): the real
 * backends pass it on every SIMD path this CPU has, on a pool and serially,
 * and broken backends defined here (never registered) fail it with the
 * element they broke named as the worst one. Only the assertions the TSan
 * stand-in has (tests/tsan/criterion) are used, so mk/selftest.mk can run
 * this file under ThreadSanitizer. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/selftest.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

/* all-MiniLM-L6-v2: 12 heads of 32, inputs up to 512 tokens. */
static const attn_selftest_spec minilm = {.heads = 12, .head_dim = 32, .max_seqlen = 512};

/* Every case checks every element of the rows it names; the short ones name
 * every row, the long one at least the first and last of its sequence. */
static void assert_complete(const attn_selftest_result *r) {
    cr_assert_geq(r->ncases, 6, "%s: %d cases", r->backend->name, r->ncases);
    int sampled = 0;
    for (int i = 0; i < r->ncases; i++) {
        const attn_selftest_case *c = &r->cases[i];
        const int64_t row = (int64_t)c->shape.heads * c->shape.head_dim;
        cr_assert_eq(c->check.elements, c->rows_checked * row, "%s", c->name);
        cr_assert_gt(c->rows_checked, 0, "%s", c->name);
        if (c->rows_checked < c->shape.total_tokens) {
            sampled++;
            cr_assert_geq(c->rows_checked, 2, "%s", c->name);
        }
    }
    cr_assert_eq(sampled, 1, "only the longest input is sampled");
}

static void assert_passes(const attn_backend *b, const attn_selftest_spec *spec,
                          const attn_parallel *par) {
    attn_selftest_result r;
    cr_assert_eq(attn_selftest_run(b, spec, par, &r), 0);
    cr_assert(r.passed, "%s on %s: %s", b->name, r.simd, r.reason);
    cr_assert_eq(r.cases_passed, r.ncases);
    cr_assert_eq(r.reason[0], '\0', "%s", r.reason);
    cr_assert_str_eq(r.simd, b->simd_path());
    assert_complete(&r);
    /* Float32 is not exact: a ratio of 0 would mean nothing was compared. */
    cr_assert(r.max_ratio > 0.0 && r.max_ratio <= 1.0, "%s: ratio %g", b->name, r.max_ratio);
    cr_assert(r.max_abs_err > 0.0 && r.mean_abs_err > 0.0 && r.mean_abs_err <= r.max_abs_err);
    cr_assert_gt(r.ms, 0.0);
}

Test(selftest, naive_and_fused_pass_on_every_simd_path, .timeout = 300) {
    tp_pool *pool = tp_create(2);
    cr_assert_not_null(pool);
    const attn_parallel par = tp_parallel(pool);
    const char *names[] = {"naive", "fused"};
    for (int path = ATTN_SIMD_PORTABLE; path <= (int)attn_simd_detect(); path++) {
        cr_assert_eq(attn_simd_force((attn_simd)path), 0);
        for (size_t i = 0; i < 2; i++) {
            const attn_backend *b = attn_backend_find(names[i]);
            cr_assert_not_null(b);
            assert_passes(b, &minilm, &par);
        }
    }
    attn_simd_unforce();
    tp_destroy(pool);
}

/* The bf16 backend passes by its own bound (reference.h's bf16 one), on the
 * model's shapes and BERT-base's; where the CPU has no AVX512_BF16 it is
 * refused before it runs, and the run says so. */
Test(selftest, bf16_passes_by_its_own_bound, .timeout = 300) {
    const attn_backend *b = attn_backend_find("bf16");
    cr_assert_not_null(b);
    const attn_shape s = {
        .batch = 1, .total_tokens = 8, .max_seqlen = 8, .heads = 12, .head_dim = 32};
    if (b->supports(&s, NULL, 0) != ATTN_OK) {
        cr_skip_test("NOT RUN: this CPU has no AVX512_BF16, the bf16 backend is not offered");
    }
    tp_pool *pool = tp_create(2);
    cr_assert_not_null(pool);
    const attn_parallel par = tp_parallel(pool);
    const attn_selftest_spec base = {.heads = 12, .head_dim = 64, .max_seqlen = 512};
    assert_passes(b, &minilm, &par);
    assert_passes(b, &base, &par);
    tp_destroy(pool);
}

/* Another model's shape (BERT-base: 12 heads of 64) and a model shorter than
 * the tile-edge lengths, whose cases are clipped to its length. */
Test(selftest, other_model_shapes_pass, .timeout = 300) {
    tp_pool *pool = tp_create(2);
    const attn_parallel par = tp_parallel(pool);
    const attn_selftest_spec base = {.heads = 12, .head_dim = 64, .max_seqlen = 160};
    const attn_selftest_spec tiny = {.heads = 2, .head_dim = 8, .max_seqlen = 20};
    assert_passes(attn_backend_find("fused"), &base, &par);
    assert_passes(attn_backend_find("fused"), &tiny, &par);
    assert_passes(attn_backend_find("naive"), &tiny, &par);
    attn_selftest_result r;
    attn_selftest_run(attn_backend_find("naive"), &tiny, &par, &r);
    for (int i = 0; i < r.ncases; i++)
        if (r.cases[i].shape.heads == tiny.heads)
            cr_assert_leq(r.cases[i].shape.max_seqlen, 20, "%s", r.cases[i].name);
    tp_destroy(pool);
}

/* The pool splits the reference check over workers and merges in row order:
 * the outcome is the one a serial run gives. */
Test(selftest, pool_and_serial_agree) {
    tp_pool *pool = tp_create(2);
    const attn_parallel par = tp_parallel(pool);
    attn_selftest_result a, b;
    const attn_backend *naive = attn_backend_find("naive");
    attn_selftest_run(naive, &minilm, &par, &a);
    attn_selftest_run(naive, &minilm, &attn_parallel_serial, &b);
    cr_assert(a.passed && b.passed);
    cr_assert_eq(a.ncases, b.ncases);
    for (int i = 0; i < a.ncases; i++) {
        cr_assert_eq(a.cases[i].check.elements, b.cases[i].check.elements);
        cr_assert_eq(a.cases[i].check.max_abs_err, b.cases[i].check.max_abs_err);
        cr_assert_eq(a.cases[i].check.max_ratio, b.cases[i].check.max_ratio);
    }
    tp_destroy(pool);
}

/* ---- broken backends (defined here, never registered) ------------------------- */

typedef enum {
    BREAK_LAST_ELEMENT_CAUSAL, /* causal batches: + 0.5 on the last element of the batch */
    BREAK_TAIL,                /* every sequence's last token: o·1.25 + 0.5 */
    BREAK_SKIP_ONE,            /* never writes token 5, head 1, dim 2 (stays NaN) */
    BREAK_ERROR,               /* forward returns ATTN_EWORKSPACE */
} break_mode;

static break_mode mode;

static const attn_backend *naive(void) {
    return attn_backend_find("naive");
}

static int broken_supports(const attn_shape *s, char *why, size_t len) {
    return naive()->supports(s, why, len);
}
static size_t broken_ws(const attn_shape *s, int n) {
    return naive()->workspace_size(s, n);
}
static const char *broken_simd(void) {
    return "portable";
}

static int broken_forward(const attn_problem *p, void *ws, size_t ws_bytes,
                          const attn_parallel *par) {
    if (mode == BREAK_ERROR)
        return ATTN_EWORKSPACE;
    float keep = 0.0f;
    const int H = p->shape.heads, D = p->shape.head_dim;
    const int32_t T = p->shape.total_tokens;
    float *skip = T > 5 ? p->out + 5 * p->out_stride + (size_t)1 * D + 2 : NULL;
    if (mode == BREAK_SKIP_ONE && skip)
        keep = *skip;
    int rc = naive()->forward(p, ws, ws_bytes, par);
    if (rc != ATTN_OK)
        return rc;
    switch (mode) {
    case BREAK_LAST_ELEMENT_CAUSAL:
        if (p->shape.causal)
            p->out[(size_t)(T - 1) * p->out_stride + (size_t)(H - 1) * D + (D - 1)] += 0.5f;
        break;
    case BREAK_TAIL:
        for (int32_t b = 0; b < p->shape.batch; b++)
            if (p->cu_seqlens[b + 1] > p->cu_seqlens[b])
                for (int i = 0; i < H * D; i++) {
                    float *o = p->out + (size_t)(p->cu_seqlens[b + 1] - 1) * p->out_stride + i;
                    *o = *o * 1.25f + 0.5f;
                }
        break;
    case BREAK_SKIP_ONE:
        if (skip)
            *skip = keep;
        break;
    case BREAK_ERROR:
        break;
    }
    return ATTN_OK;
}

static const attn_backend broken = {
    .name = "broken",
    .summary = "test only",
    .speed_rank = 0,
    .supports = broken_supports,
    .workspace_size = broken_ws,
    .forward = broken_forward,
    .simd_path = broken_simd,
};

static attn_selftest_result run_broken(break_mode m) {
    mode = m;
    attn_selftest_result r;
    cr_assert_eq(attn_selftest_run(&broken, &minilm, &attn_parallel_serial, &r), 0);
    cr_assert_not(r.passed);
    cr_assert_lt(r.cases_passed, r.ncases);
    cr_assert_neq(r.reason[0], '\0');
    return r;
}

/* The reported case is the failing one with the largest error/bound ratio. */
static const attn_selftest_case *worst_case(const attn_selftest_result *r) {
    const attn_selftest_case *w = NULL;
    for (int i = 0; i < r->ncases; i++)
        if (!r->cases[i].passed && (!w || r->cases[i].check.max_ratio > w->check.max_ratio))
            w = &r->cases[i];
    cr_assert_not_null(w);
    cr_assert(strstr(r->reason, w->name), "reason names the worst case: %s", r->reason);
    return w;
}

Test(selftest, one_wrong_element_is_found_and_located) {
    const attn_selftest_result r = run_broken(BREAK_LAST_ELEMENT_CAUSAL);
    int failed = 0;
    for (int i = 0; i < r.ncases; i++) {
        const attn_selftest_case *c = &r.cases[i];
        cr_assert_eq(c->passed, !c->shape.causal, "%s", c->name);
        if (c->passed)
            continue;
        failed++;
        cr_assert_eq(c->check.bad, 1, "%s", c->name);
        cr_assert_eq(c->check.bad_seq, c->shape.batch - 1);
        cr_assert_eq(c->check.bad_token, c->shape.total_tokens - 1);
        cr_assert_eq(c->check.bad_head, c->shape.heads - 1);
        cr_assert_eq(c->check.bad_dim, c->shape.head_dim - 1);
        cr_assert_lt(fabs(c->check.bad_got - c->check.bad_want - 0.5), 1e-5);
    }
    cr_assert_eq(failed, 2, "the model's and the endpoint's causal cases");
    const attn_selftest_case *w = worst_case(&r);
    /* In both causal cases the last sequence is the longest, so the last
     * token is row max_seqlen - 1 of its sequence. */
    char want[160];
    snprintf(want, sizeof want, "seq %d token %d (row %d of the sequence) head %d dim %d",
             w->shape.batch - 1, w->shape.total_tokens - 1, w->shape.max_seqlen - 1,
             w->shape.heads - 1, w->shape.head_dim - 1);
    cr_assert(strstr(r.reason, want), "reason: %s\nwant: %s", r.reason, want);
    cr_assert(strstr(r.reason, "1 of "), "%s", r.reason);
}

/* A kernel with a bad remainder loop: only each sequence's last token is
 * wrong. The long case is checked on sampled rows, and still fails, since
 * every sequence's last row is among them. */
Test(selftest, a_wrong_last_token_fails_every_case) {
    const attn_selftest_result r = run_broken(BREAK_TAIL);
    cr_assert_eq(r.cases_passed, 0, "%s", r.reason);
    for (int i = 0; i < r.ncases; i++) {
        const attn_selftest_case *c = &r.cases[i];
        cr_assert_gt(c->check.bad, 0, "%s", c->name);
        cr_assert_gt(c->check.max_ratio, 1.0);
    }
    const attn_selftest_case *longest = NULL;
    for (int i = 0; i < r.ncases; i++)
        if (r.cases[i].rows_checked < r.cases[i].shape.total_tokens)
            longest = &r.cases[i];
    cr_assert_not_null(longest);
    cr_assert_eq(longest->check.bad_token, minilm.max_seqlen - 1);
    cr_assert_eq(longest->check.bad, (int64_t)minilm.heads * minilm.head_dim);
    worst_case(&r);
}

Test(selftest, an_element_never_written_fails) {
    const attn_selftest_result r = run_broken(BREAK_SKIP_ONE);
    cr_assert(isinf(r.max_abs_err));
    cr_assert(isinf(r.max_ratio));
    for (int i = 0; i < r.ncases; i++) {
        const attn_selftest_case *c = &r.cases[i];
        /* Every case has a token 5 with a head 1; the long case's sample
         * does not hold row 5, so only it passes. */
        const bool sampled = c->rows_checked < c->shape.total_tokens;
        cr_assert_eq(c->passed, sampled, "%s", c->name);
        if (c->passed)
            continue;
        cr_assert_eq(c->check.bad, 1, "%s", c->name);
        cr_assert_eq(c->check.bad_token, 5);
        cr_assert_eq(c->check.bad_head, 1);
        cr_assert_eq(c->check.bad_dim, 2);
        cr_assert(isnan(c->check.bad_got));
    }
    cr_assert_eq(r.cases_passed, 1);
    cr_assert(strstr(r.reason, "token 5 ") && strstr(r.reason, "head 1 dim 2: got nan"), "%s",
              r.reason);
}

Test(selftest, a_forward_error_fails_with_its_message) {
    const attn_selftest_result r = run_broken(BREAK_ERROR);
    cr_assert_eq(r.cases_passed, 0);
    for (int i = 0; i < r.ncases; i++)
        cr_assert_eq(r.cases[i].status, ATTN_EWORKSPACE);
    cr_assert(strstr(r.reason, attn_strerror(ATTN_EWORKSPACE)), "%s", r.reason);
}

/* ---- results kept per backend ----------------------------------------------------- */

Test(selftest, kept_results_answer_backend_passed_selftest) {
    const attn_backend *n = attn_backend_find("naive"), *f = attn_backend_find("fused");
    attn_selftest_forget();
    cr_assert_not(backend_passed_selftest(n), "never tested has not passed");
    cr_assert_null(attn_selftest_kept(n));
    attn_selftest_result r;
    cr_assert_eq(attn_selftest_run(n, &minilm, &attn_parallel_serial, &r), 0);
    attn_selftest_keep(&r);
    cr_assert(backend_passed_selftest(n));
    cr_assert_not(backend_passed_selftest(f));
    cr_assert_eq(attn_selftest_kept(n)->ncases, r.ncases);
    r.passed = false;
    attn_selftest_keep(&r);
    cr_assert_not(backend_passed_selftest(n), "a later result replaces the earlier one");

    mode = BREAK_ERROR;
    attn_selftest_result b;
    attn_selftest_run(&broken, &minilm, &attn_parallel_serial, &b);
    b.passed = true; /* even a pass is not kept for a backend the registry lacks */
    attn_selftest_keep(&b);
    cr_assert_not(backend_passed_selftest(&broken));
    cr_assert_not(backend_passed_selftest(NULL));
    attn_selftest_forget();
    cr_assert_not(backend_passed_selftest(n));
}

Test(selftest, memory_is_known_in_advance) {
    const attn_backend *f = attn_backend_find("fused");
    const size_t bytes = attn_selftest_bytes(f, &minilm, 2);
    /* At least Q, K, V and the output of the longest input. */
    cr_assert_geq(bytes, (size_t)4 * 512 * 12 * 32 * sizeof(float));
    cr_assert_lt(bytes, (size_t)64 << 20);
    cr_assert_geq(attn_selftest_bytes(f, &minilm, 16), bytes, "more workers, more scratch");
}

/* A model with a relative position bias (MPNet-base's shape): its model
 * cases carry one, every CPU backend passes with it, and a backend that
 * drops it (forwarding as if the problem had none) fails. */
static int dropping_forward(const attn_problem *p, void *ws, size_t ws_bytes,
                            const attn_parallel *par) {
    attn_problem q = *p;
    q.shape.rel_bias = 0;
    q.rel_bias = NULL;
    return attn_backend_find("fused")->forward(&q, ws, ws_bytes, par);
}

Test(selftest, a_relative_position_bias_is_checked, .timeout = 300) {
    tp_pool *pool = tp_create(2);
    const attn_parallel par = tp_parallel(pool);
    const attn_selftest_spec mpnet = {
        .heads = 12, .head_dim = 64, .max_seqlen = 300, .rel_bias = 1};
    assert_passes(attn_backend_find("naive"), &mpnet, &par);
    assert_passes(attn_backend_find("fused"), &mpnet, &par);
    const attn_backend *bf16 = attn_backend_find("bf16");
    const attn_shape s = {
        .batch = 1, .total_tokens = 8, .max_seqlen = 8, .heads = 12, .head_dim = 64, .rel_bias = 1};
    if (attn_backend_supports(bf16, &s, NULL, 0) == ATTN_OK)
        assert_passes(bf16, &mpnet, &par);
    attn_selftest_result r;
    cr_assert_eq(attn_selftest_run(attn_backend_find("fused"), &mpnet, &par, &r), 0);
    int biased = 0;
    for (int i = 0; i < r.ncases; i++)
        biased += r.cases[i].shape.rel_bias;
    cr_assert_eq(biased, 4, "the four model cases carry the bias");
    attn_backend dropping = *attn_backend_find("fused");
    dropping.name = "dropping";
    dropping.forward = dropping_forward;
    cr_assert_eq(attn_selftest_run(&dropping, &mpnet, &par, &r), 0);
    cr_assert(!r.passed, "a backend that drops the bias passed");
    cr_assert_eq(r.cases_passed, r.ncases - 4, "%d of %d passed", r.cases_passed, r.ncases);
    tp_destroy(pool);
}

/* test_attn_shapes.c — grouped K/V heads (attn_shape.kv_heads) and the
 * sliding window (attn_shape.window) of the attention contract, against two
 * float64 references: kernels/reference.c (what the self-test and shadow
 * verification use, through attn_key_range and attn_kv_head) and the tests'
 * own attn_ref.c, which spells the mask and the head grouping out
 * independently, so a wrong definition in attention.h cannot pass by
 * agreeing with itself.
 *
 * Bound: each backend is held to kernels/reference.h's bound of its own
 * precision (attn_check_rows_as), with nkeys the keys the query sees. The
 * same outputs held to the reference of the full, ungrouped problem must
 * fail (checked below), so the window and the grouping are shown to move
 * the outputs. Cases: lengths around the fused tiles (1, 15, 16, 17, 127,
 * 128, 129, 300) packed together, windows shorter and longer than a tile,
 * causal and not, 1, 2 and 4 K/V heads for 4 query heads, padded strides
 * and K/V read in place from a fused [Q | K | V] row as the models do.
 * Inputs are N(0, 1), as in the other contract tests: the float32 bound's
 * score term is √D·smax (reference.h), fitted on such inputs; with larger
 * ones (N(0, 1.5²)) and a window of 1 (two keys seen, whose scores can
 * cancel to far below Σ|q·k|) naive reaches 1.24× it, a limit of that
 * term recorded in reference.h, not of the window. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"
#include "kernels/attention.h"
#include "kernels/backends.h"
#include "kernels/bf16attn_impl.h"
#include "kernels/reference.h"
#include "kernels/threadpool.h"

typedef struct {
    attn_problem p;
    int32_t *cu;
    float *qkv, *out;
} scase;

/* A batch whose rows are [Q (H·D) | K (Hkv·D) | V (Hkv·D) | pad] per
 * token, as a model's fused projection lays them out. */
static void scase_make(scase *c, uint64_t seed, const int32_t *lens, int batch, int heads,
                       int kv_heads, int D, int causal, int32_t window, int pad) {
    test_rng r = {seed};
    memset(c, 0, sizeof *c);
    int32_t maxlen;
    c->cu = attn_cu_seqlens(lens, batch, &maxlen);
    const int32_t T = c->cu[batch];
    const size_t q_w = (size_t)heads * D, kv_w = (size_t)kv_heads * D;
    const size_t stride = q_w + 2 * kv_w + (size_t)pad;
    const size_t n = (size_t)(T > 0 ? T : 1) * stride;
    c->qkv = malloc(n * sizeof(float));
    c->out = malloc((size_t)(T > 0 ? T : 1) * (q_w + (size_t)pad) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        c->qkv[i] = rng_normal(&r);
    for (size_t i = 0; i < (size_t)(T > 0 ? T : 1) * (q_w + (size_t)pad); i++)
        c->out[i] = NAN;
    const attn_shape s = {.batch = batch,
                          .total_tokens = T,
                          .max_seqlen = maxlen,
                          .heads = heads,
                          .head_dim = D,
                          .causal = causal,
                          .kv_heads = kv_heads == heads ? 0 : kv_heads,
                          .window = window};
    attn_problem_dense(&c->p, s, c->cu, c->qkv, c->qkv + q_w, c->qkv + q_w + kv_w, c->out);
    c->p.q_stride = c->p.k_stride = c->p.v_stride = stride;
    c->p.out_stride = q_w + (size_t)pad;
}

static void scase_free(scase *c) {
    free(c->cu);
    free(c->qkv);
    free(c->out);
}

/* kernels/reference.c's rows against attn_ref.c's: two readings of the
 * same mask and grouping must give the same float64 outputs. */
static void references_agree(const attn_problem *p) {
    const int H = p->shape.heads, D = p->shape.head_dim;
    const int32_t T = p->shape.total_tokens;
    double *want = malloc(((size_t)T * H * D + 1) * sizeof *want);
    attn_reference(p, 0, T, want, NULL, NULL);
    double *scratch = malloc(attn_check_scratch(&p->shape) * sizeof *scratch);
    double *ref = malloc((size_t)D * sizeof *ref), *vmax = malloc((size_t)D * sizeof *vmax);
    int32_t seq = 0;
    for (int32_t t = 0; t < T; t++) {
        while (p->cu_seqlens[seq + 1] <= t)
            seq++;
        for (int h = 0; h < H; h++) {
            attn_reference_row(p, seq, t, h, ref, vmax, scratch + 2 * (size_t)D);
            for (int d = 0; d < D; d++) {
                const double w = want[((size_t)t * H + h) * D + d];
                cr_assert(fabs(ref[d] - w) <= 1e-12 * (1.0 + fabs(w)),
                          "token %d head %d dim %d: reference.c %.17g, attn_ref.c %.17g", t, h, d,
                          ref[d], w);
            }
        }
    }
    free(want);
    free(scratch);
    free(ref);
    free(vmax);
}

static void run_case(const attn_backend *b, const char *path, const int32_t *lens, int batch,
                     int heads, int kv_heads, int D, int causal, int32_t window, int pad,
                     uint64_t seed) {
    scase c;
    scase_make(&c, seed, lens, batch, heads, kv_heads, D, causal, window, pad);
    char why[256] = "";
    cr_assert_eq(attn_problem_check(&c.p, why, sizeof why), ATTN_OK, "%s", why);
    const attn_check res = attn_run_and_check(b, &c.p);
    cr_assert_eq(res.bad, 0,
                 "%s/%s B=%d H=%d Hkv=%d D=%d causal=%d window=%d: %lld of %lld past the "
                 "bound; worst token %d head %d dim %d got %.9g want %.9g bound %.3g",
                 b->name, path, batch, heads, kv_heads, D, causal, (int)window, (long long)res.bad,
                 (long long)res.elements, (int)res.bad_token, res.bad_head, res.bad_dim,
                 (double)res.bad_got, res.bad_want, res.bad_bound);
    cr_log_info("%s/%s Hkv=%d D=%d causal=%d window=%d: worst %.3f of the bound", b->name, path,
                kv_heads, D, causal, (int)window, res.max_ratio);

    /* The window must matter: without it the reference sees other keys,
     * and the outputs land far past the bound. Not at bf16's bound when the
     * window leaves most keys in (200 of 300: the keys it drops move the
     * outputs by less than that bound, which rounds every weight to 2^-8);
     * the windows of 1, 8 and 64 carry this check for bf16. */
    if (window > 0 && window + 1 < c.p.shape.max_seqlen) {
        c.p.shape.window = 0;
        const attn_check full = attn_check_every_row(b->precision, &c.p);
        if (b->precision == ATTN_PREC_BF16 && 3 * window >= 2 * c.p.shape.max_seqlen)
            cr_log_info("%s: a window of %d of %d keys is not held to move outputs past the "
                        "bf16 bound (%lld did)",
                        b->name, (int)window, (int)c.p.shape.max_seqlen, (long long)full.bad);
        else
            cr_assert_gt(full.bad, 0, "%s: the window of %d moved no output", b->name, (int)window);
        c.p.shape.window = window;
    }
    scase_free(&c);
}

/* Every case for backend b (path names the SIMD path in messages): what
 * each backend that declares gqa and window runs. */
static void every_case(const attn_backend *b, const char *path) {
    static const int32_t mixed[] = {1, 15, 16, 17, 127, 128, 129, 300};
    static const int32_t edges[] = {33, 0, 64, 5};
    static const int dims[] = {16, 32, 64, 17};
    static const int32_t windows[] = {0, 1, 8, 64, 200};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int D = dims[i];
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
            const int32_t win = windows[w];
            const uint64_t seed = 101 + 7 * (uint64_t)D + (uint64_t)win;
            run_case(b, path, mixed, 8, 4, 2, D, 0, win, 0, seed);
            run_case(b, path, mixed, 8, 4, 1, D, 1, win, 3, seed + 1);
            run_case(b, path, edges, 4, 4, 4, D, win % 2, win, 5, seed + 2);
        }
    }
}

Test(attn_shapes, references_agree) {
    static const int32_t lens[] = {1, 9, 0, 40};
    for (int causal = 0; causal < 2; causal++)
        for (int32_t window = 0; window < 12; window += 3) {
            scase c;
            scase_make(&c, 7 + (uint64_t)window, lens, 4, 6, 3, 8, causal, window, 2);
            references_agree(&c.p);
            scase_free(&c);
        }
}

Test(attn_shapes, key_range_is_the_mask) {
    for (int causal = 0; causal < 2; causal++)
        for (int32_t window = 0; window < 50; window += 7)
            for (int32_t len = 1; len < 60; len += 5)
                for (int32_t i = 0; i < len; i++) {
                    const attn_shape s = {.causal = causal, .window = window};
                    int32_t lo, hi;
                    attn_key_range(&s, i, len, &lo, &hi);
                    for (int32_t j = 0; j < len; j++) {
                        const int seen = (!causal || j <= i) && (!window || abs(i - j) <= window);
                        cr_assert_eq(j >= lo && j < hi, seen,
                                     "causal=%d window=%d len=%d i=%d j=%d", causal, window, len, i,
                                     j);
                    }
                }
}

Test(attn_shapes, naive, .timeout = 300) {
    every_case(&attn_backend_naive, "portable");
}

Test(attn_shapes, flops_count_the_window) {
    const int32_t cu[3] = {0, 10, 110};
    const attn_shape s = {.batch = 2,
                          .total_tokens = 110,
                          .max_seqlen = 100,
                          .heads = 2,
                          .head_dim = 4,
                          .kv_heads = 1,
                          .window = 3};
    attn_problem p;
    attn_problem_dense(&p, s, cu, NULL, NULL, NULL, NULL);
    double pairs = 0.0;
    for (int b = 0; b < 2; b++) {
        const int32_t len = cu[b + 1] - cu[b];
        for (int32_t i = 0; i < len; i++)
            for (int32_t j = 0; j < len; j++)
                pairs += abs(i - j) <= 3;
    }
    cr_assert_float_eq(attn_flops(&p), 4.0 * pairs * 4 * 2, 1e-9);
}

Test(attn_shapes, capability_and_problem_checks) {
    attn_backend old = attn_backend_naive;
    old.name = "old";
    old.gqa = old.window = 0;
    old.supports = attn_accept_all;
    attn_shape s = {.batch = 1, .total_tokens = 4, .max_seqlen = 4, .heads = 4, .head_dim = 8};
    char why[256] = "";
    cr_assert_eq(attn_backend_supports(&old, &s, why, sizeof why), ATTN_OK);
    s.kv_heads = 4; /* as many as the query heads: no grouping */
    cr_assert_eq(attn_backend_supports(&old, &s, why, sizeof why), ATTN_OK, "%s", why);
    s.kv_heads = 2;
    cr_assert_eq(attn_backend_supports(&old, &s, why, sizeof why), ATTN_EUNSUPPORTED);
    cr_assert(strstr(why, "old") && strstr(why, "K/V heads"), "%s", why);
    s.kv_heads = 0;
    s.window = 16;
    cr_assert_eq(attn_backend_supports(&old, &s, why, sizeof why), ATTN_EUNSUPPORTED);
    cr_assert(strstr(why, "old") && strstr(why, "window"), "%s", why);

    const int32_t cu[2] = {0, 4};
    float x[4 * 32] = {0}, out[4 * 32];
    attn_problem p;
    s.window = -1;
    attn_problem_dense(&p, s, cu, x, x, x, out);
    cr_assert_eq(attn_problem_check(&p, why, sizeof why), ATTN_EINVAL);
    cr_assert(strstr(why, "window"), "%s", why);
    s.window = 0;
    s.kv_heads = 3; /* does not divide 4 */
    attn_problem_dense(&p, s, cu, x, x, x, out);
    cr_assert_eq(attn_problem_check(&p, why, sizeof why), ATTN_EINVAL);
    cr_assert(strstr(why, "kv_heads"), "%s", why);
    s.kv_heads = 2;
    attn_problem_dense(&p, s, cu, x, x, x, out);
    cr_assert_eq(p.k_stride, 16u);
    cr_assert_eq(attn_problem_check(&p, why, sizeof why), ATTN_OK, "%s", why);
    p.v_stride = 15;
    cr_assert_eq(attn_problem_check(&p, why, sizeof why), ATTN_EINVAL);
    cr_assert(strstr(why, "kv_heads*head_dim"), "%s", why);
}

/* The fused backend on every SIMD path this CPU runs: each path has its own
 * tile masks and lane widths (8 on AVX2, 16 on AVX-512). */
Test(attn_shapes, fused_every_path, .timeout = 600) {
    attn_on_every_path(every_case, &attn_backend_fused);
}

Test(attn_shapes, bf16, .timeout = 300) {
    const attn_shape s = {.batch = 1,
                          .total_tokens = 8,
                          .max_seqlen = 8,
                          .heads = 2,
                          .head_dim = 16,
                          .kv_heads = 1,
                          .window = 2};
    if (attn_bf16_offered(&s))
        every_case(&attn_backend_bf16, "avx512bf16");
}

/* A window's point is O(L·w) work: a task touches only the key tiles some
 * row of its block of br query rows sees, never the whole sequence. Here
 * the keys and values of the first br tokens are NaN; every query row from
 * 2·br on has its window (16 keys) and its block's (the rows from a
 * multiple of br) past them, so those rows come out within the bound only
 * if no tile of the NaN keys was read: a masked key still multiplies its
 * NaN value by a zero weight in P·V. */
static void far_tiles_unread(const attn_backend *b, const char *path, int32_t br) {
    const int32_t len = 4 * br, window = 16;
    for (int causal = 0; causal < 2; causal++) {
        scase c;
        scase_make(&c, 77 + (uint64_t)causal, &len, 1, 4, 2, 32, causal, window, 0);
        const size_t q_w = 4 * 32, kv_w = 2 * 32;
        for (int32_t t = 0; t < br; t++)
            for (size_t i = q_w; i < q_w + 2 * kv_w; i++)
                c.qkv[(size_t)t * c.p.k_stride + i] = NAN;
        cr_assert_eq(attn_run_backend(b, &c.p, 2), ATTN_OK, "%s", b->name);
        const int32_t first = 2 * br, n = len - first;
        int32_t *rows = malloc((size_t)n * sizeof *rows);
        for (int32_t i = 0; i < n; i++)
            rows[i] = first + i;
        double *scratch = malloc(attn_check_scratch(&c.p.shape) * sizeof *scratch);
        attn_check res = {0};
        attn_check_rows_as(&c.p, b->precision, rows, n, scratch, &res);
        cr_assert(res.elements == (int64_t)n * 4 * 32 && res.bad == 0,
                  "%s/%s causal=%d: %lld of %lld elements past the bound (token %d got %.9g): "
                  "a key tile outside every window of the block was used",
                  b->name, path, causal, (long long)res.bad, (long long)res.elements,
                  (int)res.bad_token, (double)res.bad_got);
        free(rows);
        free(scratch);
        scase_free(&c);
    }
}

static void far_tiles_unread_fused(const attn_backend *b, const char *path) {
    far_tiles_unread(b, path, FUSED_BR);
}

Test(attn_shapes, window_skips_far_tiles) {
    attn_on_every_path(far_tiles_unread_fused, &attn_backend_fused);
    const attn_shape s = {
        .batch = 1, .total_tokens = 8, .max_seqlen = 8, .heads = 2, .head_dim = 16, .window = 2};
    if (attn_bf16_offered(&s))
        far_tiles_unread(&attn_backend_bf16, "avx512bf16", BF16ATTN_BR);
}

/* A window together with grouped K/V heads and a relative position bias
 * (N(0, 3²), as test_rel_bias.c draws it): the tiles at a window's edges
 * with a bias are their own instantiation in fused and bf16. Held to each
 * backend's bound, as run_case does. */
static void window_and_bias(const attn_backend *b, const char *path) {
    static const int32_t mixed[] = {1, 15, 16, 17, 127, 128, 129, 300};
    for (int causal = 0; causal < 2; causal++)
        for (int32_t window = 1; window <= 64; window *= 8) {
            scase c;
            scase_make(&c, 500 + 10 * (uint64_t)window + (uint64_t)causal, mixed, 8, 4, 2, 32,
                       causal, window, 3);
            test_rng r = {900 + (uint64_t)window};
            const int32_t span = c.p.shape.max_seqlen;
            const size_t n = 4 * (2 * (size_t)span - 1);
            float *bias = malloc(n * sizeof *bias);
            for (size_t i = 0; i < n; i++)
                bias[i] = 3.0f * rng_normal(&r);
            c.p.shape.rel_bias = 1;
            c.p.rel_bias = bias;
            c.p.rel_span = span;
            char why[256] = "";
            cr_assert_eq(attn_problem_check(&c.p, why, sizeof why), ATTN_OK, "%s", why);
            const attn_check res = attn_run_and_check(b, &c.p);
            cr_assert(res.elements > 0 && res.bad == 0,
                      "%s/%s causal=%d window=%d with a bias: %lld of %lld past the bound; worst "
                      "token %d head %d dim %d got %.9g want %.9g bound %.3g",
                      b->name, path, causal, (int)window, (long long)res.bad,
                      (long long)res.elements, (int)res.bad_token, res.bad_head, res.bad_dim,
                      (double)res.bad_got, res.bad_want, res.bad_bound);
            free(bias);
            scase_free(&c);
        }
}

Test(attn_shapes, window_with_rel_bias, .timeout = 300) {
    window_and_bias(&attn_backend_naive, "portable");
    attn_on_every_path(window_and_bias, &attn_backend_fused);
    const attn_shape s = {.batch = 1,
                          .total_tokens = 8,
                          .max_seqlen = 8,
                          .heads = 2,
                          .head_dim = 16,
                          .rel_bias = 1,
                          .kv_heads = 1,
                          .window = 2};
    if (attn_bf16_offered(&s))
        window_and_bias(&attn_backend_bf16, "avx512bf16");
}

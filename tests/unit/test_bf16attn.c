/* test_bf16attn.c — the bf16 attention backend against the float64 reference.
 *
 * Two measures, both derived rather than fitted:
 *  - the backend's bound (reference.h, attn_error_bound_bf16): the float64
 *    reference of the float32 inputs, allowing for bf16 rounding of Q, K, V
 *    and the probabilities. It is what the self-test and shadow verification
 *    apply, and it is a worst case, loose where logits are large;
 *  - the kernel's own arithmetic: the float64 reference of the inputs as the
 *    kernel rounds them (Q scaled by scale·log2(e) in float32 then rounded,
 *    K and V rounded, scale ln 2 for the base-2 scores). What remains is the
 *    rounding of the probabilities to bf16 (at most ub·vmax: the row sum adds
 *    them unrounded) and float32 arithmetic: the score sums (γ_D·amax, plus
 *    u·amax for ln 2 held in float32) through the softmax as expm1(2Δ)·vmax,
 *    and the float32 bound for exp2, the sums and the output. This one stays
 *    tight on large logits, so a wrong mask, rescale or tile fails there too.
 * Cases: random varlen batches with odd lengths and strides, every head_dim
 * the model families use and odd ones, causal, length-1 sequences (exactly
 * the rounded value row), long rows and large logits. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"
#include "kernels/attention.h"
#include "kernels/fused_impl.h"
#include "kernels/reference.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

static tp_pool *pool;
static attn_parallel par;
static const attn_backend *bf16;

/* The backend runs only where the CPU has AVX512_BF16: elsewhere each test
 * says it did not run, and the refusal test checks the reason instead. */
static int offered(void) {
    const attn_shape s = {
        .batch = 1, .total_tokens = 1, .max_seqlen = 1, .heads = 1, .head_dim = 32};
    if (bf16->supports(&s, NULL, 0) == ATTN_OK)
        return 1;
    /* Reported skipped, never passed. */
    cr_skip_test("NOT RUN: this CPU has no AVX512_BF16, the bf16 backend is not offered");
    return 0;
}

static void setup(void) {
    pool = tp_create(2);
    cr_assert_not_null(pool);
    par = tp_parallel(pool);
    bf16 = attn_backend_find("bf16");
    cr_assert_not_null(bf16);
}

static void teardown(void) {
    tp_destroy(pool);
    attn_simd_unforce();
}

/* Round to nearest even, as vcvtne2ps2bf16. */
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef struct {
    attn_problem p;
    int32_t *cu;
    float *q, *k, *v, *out;
    size_t n;
} bcase;

static void bcase_make(bcase *c, uint64_t seed, const int32_t *lens, int batch, int heads, int D,
                       int causal, float amp, int pad) {
    test_rng r = {seed};
    memset(c, 0, sizeof *c);
    int32_t maxlen;
    c->cu = attn_cu_seqlens(lens, batch, &maxlen);
    const int32_t T = c->cu[batch];
    const size_t stride = (size_t)heads * D + (size_t)pad;
    c->n = (size_t)(T > 0 ? T : 1) * stride;
    c->q = malloc(c->n * sizeof(float));
    c->k = malloc(c->n * sizeof(float));
    c->v = malloc(c->n * sizeof(float));
    c->out = malloc(c->n * sizeof(float));
    for (size_t i = 0; i < c->n; i++) {
        c->q[i] = rng_normal(&r) * amp;
        c->k[i] = rng_normal(&r) * amp;
        c->v[i] = rng_normal(&r);
        c->out[i] = NAN;
    }
    const attn_shape s = {.batch = batch,
                          .total_tokens = T,
                          .max_seqlen = maxlen,
                          .heads = heads,
                          .head_dim = D,
                          .causal = causal};
    attn_problem_dense(&c->p, s, c->cu, c->q, c->k, c->v, c->out);
    c->p.q_stride = c->p.k_stride = c->p.v_stride = c->p.out_stride = stride;
}

static void bcase_free(bcase *c) {
    free(c->cu);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->out);
}

static void bcase_run(bcase *c) {
    const size_t ws = bf16->workspace_size(&c->p.shape, par.nthreads);
    void *w = aligned_alloc(64, (ws + 63) / 64 * 64);
    cr_assert_eq(bf16->forward(&c->p, w, ws, &par), ATTN_OK);
    free(w);
}

/* Rows to check: all of them, or (long cases) the first, last and a spread. */
static int32_t pick_rows(const bcase *c, int32_t *rows, int32_t cap) {
    const int32_t T = c->p.shape.total_tokens;
    if (T <= cap) {
        for (int32_t t = 0; t < T; t++)
            rows[t] = t;
        return T;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < cap; i++)
        rows[n++] = (int32_t)(((int64_t)i * (T - 1)) / (cap - 1));
    return n;
}

/* The backend's bound (reference.h): returns the worst error/bound ratio. */
static double check_bound(const bcase *c, const char *label) {
    int32_t rows[256];
    const int32_t nrows = pick_rows(c, rows, 256);
    double *scratch = malloc(attn_check_scratch(&c->p.shape) * sizeof(double));
    attn_check res = {0};
    attn_check_rows_as(&c->p, ATTN_PREC_BF16, rows, nrows, scratch, &res);
    free(scratch);
    cr_assert_eq(res.bad, 0,
                 "%s: token %d head %d dim %d: got %.9g, want %.9g (bound %.3g); %lld bad", label,
                 res.bad_token, res.bad_head, res.bad_dim, (double)res.bad_got, res.bad_want,
                 res.bad_bound, (long long)res.bad);
    cr_assert_eq(res.elements, (int64_t)nrows * c->p.shape.heads * c->p.shape.head_dim);
    return res.max_ratio;
}

/* The kernel's own arithmetic (see the top of the file): returns the worst
 * error/bound ratio, failing on the first element past it. */
static double check_own_arithmetic(const bcase *c, const char *label) {
    const attn_shape *s = &c->p.shape;
    const int H = s->heads, D = s->head_dim;
    float *q = malloc(c->n * sizeof(float)), *k = malloc(c->n * sizeof(float)),
          *v = malloc(c->n * sizeof(float));
    const float qscale = c->p.scale * FUSED_LOG2E;
    for (size_t i = 0; i < c->n; i++) {
        q[i] = bf16_round(c->q[i] * qscale);
        k[i] = bf16_round(c->k[i]);
        v[i] = bf16_round(c->v[i]);
    }
    attn_problem e = c->p;
    e.q = q;
    e.k = k;
    e.v = v;
    e.scale = (float)M_LN2;
    const double ub = ATTN_BF16_UNIT_ROUNDOFF, u = FLT_EPSILON / 2.0;
    const double gamma_d = D * u / (1.0 - D * u);
    int32_t rows[256];
    const int32_t nrows = pick_rows(c, rows, 256);
    double *ref = malloc((size_t)D * sizeof(double)), *vmax = malloc((size_t)D * sizeof(double)),
           *scores = malloc((size_t)(s->max_seqlen > 0 ? s->max_seqlen : 1) * sizeof(double));
    double worst = 0.0;
    for (int32_t i = 0; i < nrows; i++) {
        const int32_t t = rows[i];
        int32_t b = 0;
        while (c->cu[b + 1] <= t)
            b++;
        const int32_t start = c->cu[b];
        const int32_t nkeys = s->causal ? t - start + 1 : c->cu[b + 1] - start;
        for (int h = 0; h < H; h++) {
            const double smax = attn_reference_row(&e, b, t, h, ref, vmax, scores);
            double amax = 0.0;
            for (int32_t j = 0; j < nkeys; j++) {
                double a = 0.0;
                for (int d = 0; d < D; d++)
                    a += fabs((double)q[(size_t)t * e.q_stride + (size_t)h * D + d] *
                              (double)k[(size_t)(start + j) * e.k_stride + (size_t)h * D + d]);
                amax = fmax(amax, a * (double)e.scale);
            }
            const double delta = (gamma_d + u) * amax;
            for (int d = 0; d < D; d++) {
                const double bound = vmax[d] * (fmin(expm1(2.0 * delta), 2.0) + ub) +
                                     attn_error_bound(vmax[d], nkeys, D, smax);
                const float got = c->out[(size_t)t * c->p.out_stride + (size_t)h * D + d];
                const double err = fabs((double)got - ref[d]);
                cr_assert(isfinite(got) && err <= bound,
                          "%s: token %d head %d dim %d: got %.9g, want %.9g (err %.3g > %.3g)",
                          label, t, h, d, (double)got, ref[d], err, bound);
                worst = fmax(worst, err / bound);
            }
        }
    }
    free(ref);
    free(vmax);
    free(scores);
    free(q);
    free(k);
    free(v);
    return worst;
}

static void run_and_check(const int32_t *lens, int batch, int heads, int D, int causal, float amp,
                          int pad, uint64_t seed) {
    bcase c;
    bcase_make(&c, seed, lens, batch, heads, D, causal, amp, pad);
    bcase_run(&c);
    char label[96];
    snprintf(label, sizeof label, "B=%d H=%d D=%d causal=%d amp=%g", batch, heads, D, causal,
             (double)amp);
    const double rb = check_bound(&c, label);
    const double ro = check_own_arithmetic(&c, label);
    cr_log_info("%s: worst ratio %.3f of the bf16 bound, %.3f of the own-arithmetic bound", label,
                rb, ro);
    bcase_free(&c);
}

Test(bf16attn, refused_with_a_reason_without_avx512_bf16, .init = setup, .fini = teardown) {
    const attn_shape s = {
        .batch = 1, .total_tokens = 8, .max_seqlen = 8, .heads = 2, .head_dim = 64};
    char why[256] = "";
    /* Forcing a path below AVX-512 hides AVX512_BF16 even where the CPU has it. */
    if (attn_simd_detect() >= ATTN_SIMD_AVX2)
        cr_assert_eq(attn_simd_force(ATTN_SIMD_AVX2), 0);
    else
        cr_assert_eq(attn_simd_force(ATTN_SIMD_PORTABLE), 0);
    cr_assert_eq(bf16->supports(&s, why, sizeof why), ATTN_EUNSUPPORTED);
    cr_assert_not_null(strstr(why, "AVX512_BF16"), "%s", why);
    const attn_backend *b = NULL;
    char err[512];
    cr_assert_eq(attn_backend_select("bf16", &s, &b, err, sizeof err), ATTN_EUNSUPPORTED);
    cr_assert_not_null(strstr(err, "AVX512_BF16"), "%s", err);
    cr_assert_str_eq(bf16->simd_path(), "unavailable");
    attn_simd_unforce();
    /* `auto` never picks it: it would trade the float32 service's accuracy. */
    cr_assert_eq(attn_backend_select("auto", &s, &b, err, sizeof err), ATTN_OK);
    cr_assert_str_neq(b->name, "bf16");
    cr_assert_eq(bf16->precision, ATTN_PREC_BF16);
}

Test(bf16attn, random_varlen_every_head_dim, .init = setup, .fini = teardown, .timeout = 600) {
    if (!offered())
        return;
    const int32_t lens[6] = {17, 1, 64, 65, 130, 3};
    const int dims[] = {32, 64, 128, 24, 80, 7, 1};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int causal = 0; causal < 2; causal++)
            run_and_check(lens, 6, 3, dims[i], causal, 1.0f, (int)i % 3, 100 + i * 2 + causal);
}

/* All of a batch's sequences of length one: each output row is its value
 * row as bf16 (its one probability is exactly 1), bit for bit. */
Test(bf16attn, length_one_is_the_rounded_value, .init = setup, .fini = teardown) {
    if (!offered())
        return;
    const int32_t lens[5] = {1, 1, 1, 1, 1};
    for (int causal = 0; causal < 2; causal++) {
        bcase c;
        bcase_make(&c, 7 + causal, lens, 5, 4, 64, causal, 3.0f, 5);
        bcase_run(&c);
        for (int32_t t = 0; t < 5; t++)
            for (int i = 0; i < 4 * 64; i++) {
                const size_t at = (size_t)t * c.p.out_stride + (size_t)i;
                cr_assert_eq(c.out[at], bf16_round(c.v[at]), "token %d element %d: %.9g vs %.9g", t,
                             i, (double)c.out[at], (double)bf16_round(c.v[at]));
            }
        bcase_free(&c);
    }
}

/* Logits in the hundreds: softmax nearly one-hot and every rescale taken.
 * The backend's bound says little here (amax is large); its own arithmetic
 * still holds it to ub·vmax. */
Test(bf16attn, large_logits, .init = setup, .fini = teardown, .timeout = 300) {
    if (!offered())
        return;
    const int32_t lens[3] = {200, 33, 97};
    for (int causal = 0; causal < 2; causal++) {
        run_and_check(lens, 3, 2, 64, causal, 6.0f, 0, 300 + causal);
        run_and_check(lens, 3, 2, 32, causal, 12.0f, 3, 310 + causal);
    }
}

Test(bf16attn, long_rows, .init = setup, .fini = teardown, .timeout = 600) {
    if (!offered())
        return;
    const int32_t len = 4099;
    for (int causal = 0; causal < 2; causal++)
        run_and_check(&len, 1, 2, 64, causal, 1.0f, 0, 400 + causal);
}

/* The bound can fail: small logits make it tight (a few % of vmax), and a
 * 10 % error in one element of a correct output is caught and located. */
Test(bf16attn, an_error_past_the_bound_is_caught, .init = setup, .fini = teardown) {
    if (!offered())
        return;
    const int32_t lens[2] = {40, 90};
    bcase c;
    bcase_make(&c, 500, lens, 2, 2, 64, 0, 0.25f, 0);
    bcase_run(&c);
    const double ratio = check_bound(&c, "clean");
    cr_assert(ratio > 0.0 && ratio < 1.0, "ratio %g", ratio);
    const int32_t t = 77;
    c.out[(size_t)t * c.p.out_stride + 64 + 5] += 0.1f;
    double *scratch = malloc(attn_check_scratch(&c.p.shape) * sizeof(double));
    attn_check res = {0};
    const int32_t rows[1] = {t};
    cr_assert_eq(attn_check_rows_as(&c.p, ATTN_PREC_BF16, rows, 1, scratch, &res), 1);
    cr_assert_eq(res.bad_token, t);
    cr_assert_eq(res.bad_head, 1);
    cr_assert_eq(res.bad_dim, 5);
    free(scratch);
    bcase_free(&c);
}

/* bf16 is not float32: the same output checked by the float32 bound fails,
 * so the precision a backend declares decides what it is held to. */
Test(bf16attn, float32_bound_would_reject_it, .init = setup, .fini = teardown) {
    if (!offered())
        return;
    const int32_t lens[2] = {64, 50};
    bcase c;
    bcase_make(&c, 600, lens, 2, 2, 64, 1, 1.0f, 0);
    bcase_run(&c);
    int32_t rows[114];
    const int32_t n = pick_rows(&c, rows, 114);
    double *scratch = malloc(attn_check_scratch(&c.p.shape) * sizeof(double));
    attn_check res = {0};
    cr_assert_gt(attn_check_rows_as(&c.p, ATTN_PREC_FP32, rows, n, scratch, &res), 0);
    free(scratch);
    check_bound(&c, "bf16 bound");
    bcase_free(&c);
}

/* The bound's terms, by hand: at amax = 0 only the roundings of V and the
 * probabilities and the float32 bound remain; it grows with amax; it never
 * exceeds 2·vmax plus the float32 bound. */
Test(bf16attn, bound_terms) {
    const double ub = 1.0 / 256.0;
    const double f32 = attn_error_bound(1.0, 100, 64, 3.0);
    cr_assert_float_eq(attn_error_bound_bf16(1.0, 100, 64, 3.0, 0.0), 2 * ub + ub * ub + f32,
                       1e-15);
    const double a = attn_error_bound_bf16(1.0, 100, 64, 3.0, 4.0);
    const double delta =
        (2 * ub + ub * ub + 64 * (FLT_EPSILON / 2) / (1 - 64 * (FLT_EPSILON / 2))) * 4.0;
    cr_assert_float_eq(a, expm1(2 * delta) + 2 * ub + ub * ub + f32, 1e-12);
    cr_assert_float_eq(attn_error_bound_bf16(2.0, 100, 64, 3.0, 1e6),
                       2.0 * (2.0 + 2 * ub + ub * ub) + attn_error_bound(2.0, 100, 64, 3.0), 1e-12);
    cr_assert_float_eq(attn_error_bound_of(ATTN_PREC_FP32, 1.0, 100, 64, 3.0, 4.0), f32, 1e-18);
}

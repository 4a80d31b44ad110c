/* test_gemm_int8.c — the int8 GEMM, through gemm.h, against a float64 reference,
 * on odd shapes, every epilogue, both ways of splitting, padded strides and
 * an exactly sized scratch.
 *
 * Error bound, per output element y = Σ_k x_k·w_k + b. The kernel computes
 * ŷ = sx·sw·Σ_k qx_k·qw_k + b with x_k = sx·qx_k + ex_k, w_k = sw·qw_k + ew_k,
 * |ex_k| ≤ sx/2 and |ew_k| ≤ sw/2 (round to nearest, no clamping since
 * |x|/sx ≤ 127). Then x·w − sx·qx·sw·qw = x·ew + w·ex − ex·ew, so
 *   |y − ŷ| ≤ Σ_k (|x_k|·sw/2 + |w_k|·sx/2 + sx·sw/4) + 10u·(Σ_k |x_k·w_k| + |b|)
 * where the last term (u = 2⁻²⁴) covers the float rounding: the scales and
 * their reciprocals (3u each on x and w), int32 → float, sx·sw, the product
 * and the fused bias add (u each). The int32 sum itself is exact (|Σ| ≤
 * K·255·127 < 2³¹ for K < 66 000). The epilogue then propagates it:
 *   GELU: |GELU'| ≤ 1.13, plus the vector GELU's 4e-7 and 2u·|GELU|;
 *   + residual: 2u·|sum|;
 *   LayerNorm: an error of at most e per element (the row's largest) moves
 *   each centred value by d_j, |d_j| ≤ 2e, and σ = rms of the centred row
 *   (with ε) by at most rms(d) ≤ 2e, so with z_j = (v_j − μ)/σ
 *   |z'_j − z_j| ≤ |d_j|/σ' + |z_j|·|σ − σ'|/σ' ≤ 2e·(1 + |z_j|)/(σ − 2e),
 *   times |γ_j|, while 2e < σ/2 (asserted), plus 8u·(|γ_j|·(1 + |z_j|) + |β_j|)
 *   for LayerNorm's own float rounding.
 * The bound is worst case (every rounding error aligned), so it grows like K
 * where the outputs grow like √K; it is still asserted to stay well below
 * the outputs (a fifth of the largest; half with 50× outliers), so a wrong
 * column or a missing term fails it.
 *
 * Being worst case, that bound would let a small systematic error through
 * (a scale off by 1 %), so cases without an epilogue are also checked against
 * the same quantisation done here in scalar code: qx, qw and the int32 sum
 * are then exact and only the epilogue's float rounding remains,
 * |ŷ − ŷ_emulated| ≤ 4u·(|sx·sw·Σ| + |b|). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

#define U        (1.0 / 16777216.0)
#define SENTINEL 12345.0f

static unsigned rng = 7u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static int vnni_or_skip(void) {
    const char *why = gemm_unsupported(GEMM_INT8);
    if (why) {
        fprintf(stderr, "skipped: no AVX512_VNNI (%s)\n", why);
        cr_skip_test("skipped: no AVX512_VNNI (%s)", why);
        return 0;
    }
    return 1;
}

typedef struct {
    int M, N, K;
    size_t ldx, ldy;
    gemm_act act;
    int residual; /* 0 none, 1 separate buffer, 2 aliasing y */
    int ln;
    float outlier; /* one activation per row scaled by this (0: none) */
    int smooth;    /* pack with a smoothing vector (gemm_pack_smoothed) */
} gcase;

/* round(v / (max|v| / 127)) as the kernel computes it: the same float ops. */
static float quant_scale(const float *v, int n, float *inv) {
    float mx = 0.0f;
    for (int k = 0; k < n; k++)
        mx = fmaxf(mx, fabsf(v[k]));
    const float s = mx / 127.0f;
    *inv = mx > 0.0f && s > 0.0f ? 127.0f / mx : 0.0f;
    return *inv > 0.0f ? s : 0.0f;
}

static int quant(float v, float inv) {
    const float q = nearbyintf(v * inv);
    return q > 127.0f ? 127 : q < -127.0f ? -127 : (int)q;
}

static double gelu_ref(double v) {
    return 0.5 * v * erfc(-v / sqrt(2.0));
}

static void run_case(const gcase *t, const attn_parallel *par) {
    const int M = t->M, N = t->N, K = t->K;
    float *w = malloc(sizeof(float) * (size_t)N * K), *b = malloc(sizeof(float) * (size_t)N);
    float *x = malloc(sizeof(float) * (size_t)M * t->ldx);
    float *y = malloc(sizeof(float) * (size_t)M * t->ldy);
    float *res = malloc(sizeof(float) * (size_t)M * t->ldy);
    float *lnw = malloc(sizeof(float) * (size_t)N), *lnb = malloc(sizeof(float) * (size_t)N);
    double *ref = malloc(sizeof(double) * (size_t)N), *err = malloc(sizeof(double) * (size_t)N);
    for (size_t i = 0; i < (size_t)N * K; i++)
        w[i] = 0.1f * frand();
    for (int n = 0; n < N; n++) {
        b[n] = frand();
        lnw[n] = 1.0f + 0.5f * frand();
        lnb[n] = 0.2f * frand();
    }
    for (int m = 0; m < M; m++)
        for (size_t k = 0; k < t->ldx; k++)
            x[m * t->ldx + k] = (int)k < K ? frand() : NAN; /* padding must not be read */
    if (t->outlier != 0.0f)
        for (int m = 0; m < M; m++)
            x[m * t->ldx + (size_t)(m * 7 % K)] *= t->outlier;
    for (size_t i = 0; i < (size_t)M * t->ldy; i++)
        y[i] = res[i] = SENTINEL;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++)
            res[m * t->ldy + n] = frand();
    if (t->residual == 2)
        memcpy(y, res, sizeof(float) * (size_t)M * t->ldy);

    gemm_weights *pw = NULL;
    char msg[128] = "";
    /* With smoothing the kernel quantises xs = x·fl(1/s) and ws = w·s, both
     * rounded once more: the bound below is taken on xs and ws, plus 3u·|x·w|
     * per term for those roundings (13u in all instead of 10u). */
    float *sm = NULL, *xs = malloc(sizeof(float) * (size_t)K),
          *ws = malloc(sizeof(float) * (size_t)K);
    if (t->smooth) {
        sm = malloc(sizeof(float) * (size_t)K);
        /* Random factors in [1/2, 2]; with outliers, what SmoothQuant with
         * α = 0.5 would pick: 1, and √50 for the outlier channels. */
        for (int k = 0; k < K; k++)
            sm[k] = t->outlier != 0.0f ? 1.0f : exp2f(frand());
        for (int m = 0; t->outlier != 0.0f && m < M; m++)
            sm[m * 7 % K] = sqrtf(t->outlier);
    }
    cr_assert_eq(gemm_pack_smoothed(GEMM_INT8, w, b, sm, N, K, &pw, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(gemm_weights_bytes(pw) >= (size_t)N * K, 1);
    const size_t sb = gemm_scratch_bytes(pw, M, par->nthreads);
    /* Exactly the scratch asked for, deliberately misaligned, with a guard. */
    unsigned char *raw = malloc(sb + 1 + 64);
    memset(raw, 0xa5, sb + 1 + 64);
    gemm_epilogue epi = {.act = t->act, .ln_eps = 1e-12f};
    if (t->residual) {
        epi.residual = t->residual == 2 ? y : res;
        epi.ld_residual = t->ldy;
    }
    if (t->ln) {
        epi.ln_w = lnw;
        epi.ln_b = lnb;
    }
    gemm_run(pw, par, x, t->ldx, y, t->ldy, M, &epi, raw + 1);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(raw[1 + sb + i], 0xa5, "scratch overrun at %zu + %d", sb, i);

    double worst = 0.0, bound_max = 0.0, out_max = 0.0;
    for (int m = 0; m < M; m++) {
        const float *xr = x + m * t->ldx;
        for (int k = 0; k < K; k++)
            xs[k] = sm ? xr[k] * (1.0f / sm[k]) : xr[k];
        float xm = 0.0f;
        for (int k = 0; k < K; k++)
            xm = fmaxf(xm, fabsf(xs[k]));
        const double sx = xm / 127.0f;
        for (int n = 0; n < N; n++) {
            const float *wr = w + (size_t)n * K;
            for (int k = 0; k < K; k++)
                ws[k] = sm ? wr[k] * sm[k] : wr[k];
            float wm = 0.0f;
            for (int k = 0; k < K; k++)
                wm = fmaxf(wm, fabsf(ws[k]));
            const double sw = wm / 127.0f;
            double s = b[n], q = 0.0, a = fabs(b[n]);
            for (int k = 0; k < K; k++) {
                s += (double)xr[k] * wr[k];
                q += fabs(xs[k]) * sw / 2 + fabs(ws[k]) * sx / 2 + sx * sw / 4;
                a += fabs((double)xr[k] * wr[k]);
            }
            double e = q + (sm ? 13 : 10) * U * a;
            if (t->act == GEMM_ACT_NONE && !t->residual && !t->ln) {
                float ix, iw;
                const double qsx = quant_scale(xs, K, &ix), qsw = quant_scale(ws, K, &iw);
                int64_t sum = 0;
                for (int k = 0; k < K; k++)
                    sum += (int64_t)quant(xs[k], ix) * quant(ws[k], iw);
                const double emu = (double)sum * qsx * qsw + b[n];
                const double got = y[m * t->ldy + n], tol = 4 * U * (fabs(emu - b[n]) + fabs(b[n]));
                cr_assert(fabs(got - emu) <= tol, "y[%d][%d] = %.9g, emulated %.9g (tol %.3g)", m,
                          n, got, emu, tol);
            }
            if (t->act == GEMM_ACT_GELU) {
                s = gelu_ref(s);
                e = 1.13 * e + 4e-7 + 2 * U * fabs(s);
            }
            if (t->residual) {
                s += res[m * t->ldy + n];
                e += 2 * U * fabs(s);
            }
            ref[n] = s;
            err[n] = e;
        }
        if (t->ln) {
            double mean = 0.0, var = 0.0, emax = 0.0;
            for (int n = 0; n < N; n++) {
                mean += ref[n];
                emax = fmax(emax, err[n]);
            }
            mean /= N;
            for (int n = 0; n < N; n++)
                var += (ref[n] - mean) * (ref[n] - mean);
            const double sigma = sqrt(var / N + 1e-12);
            cr_assert_lt(2 * emax, 0.5 * sigma, "LayerNorm bound out of range");
            for (int n = 0; n < N; n++) {
                const double z = (ref[n] - mean) / sigma;
                ref[n] = z * lnw[n] + lnb[n];
                err[n] = fabs(lnw[n]) * 2 * emax * (1 + fabs(z)) / (sigma - 2 * emax) +
                         8 * U * (fabs(lnw[n]) * (1 + fabs(z)) + fabs(lnb[n]));
            }
        }
        for (int n = 0; n < N; n++) {
            const double d = fabs((double)y[m * t->ldy + n] - ref[n]);
            cr_assert(d <= err[n],
                      "M=%d N=%d K=%d: y[%d][%d] = %.7g, ref %.7g, |err| %.3g > bound %.3g", M, N,
                      K, m, n, y[m * t->ldy + n], ref[n], d, err[n]);
            worst = fmax(worst, d / err[n]);
            bound_max = fmax(bound_max, err[n]);
            out_max = fmax(out_max, fabs(ref[n]));
        }
        for (size_t n = (size_t)N; n < t->ldy; n++)
            cr_assert_eq(y[m * t->ldy + n], t->residual == 2 ? res[m * t->ldy + n] : SENTINEL,
                         "column %zu past N written", n);
    }
    /* A bound as large as the outputs would pass anything. */
    cr_assert_lt(bound_max, (t->outlier != 0.0f ? 0.5 : 0.2) * out_max,
                 "bound %.3g is vacuous against outputs %.3g", bound_max, out_max);
    cr_log_info("M=%d N=%d K=%d act=%d res=%d ln=%d: worst |err|/bound %.3f (bound up to %.3g)", M,
                N, K, t->act, t->residual, t->ln, worst, bound_max);
    gemm_free(pw);
    free(sm);
    free(xs);
    free(ws);
    free(raw);
    free(w);
    free(b);
    free(x);
    free(y);
    free(res);
    free(lnw);
    free(lnb);
    free(ref);
    free(err);
}

static void run_both(gcase t) {
    run_case(&t, &attn_parallel_serial);
    tp_pool *pool = tp_create(2);
    attn_parallel par = tp_parallel(pool);
    run_case(&t, &par);
    /* Tall enough for two threads to split by rows, not columns. */
    t.M = t.M < 200 ? 200 : t.M;
    run_case(&t, &par);
    tp_destroy(pool);
}

Test(gemm_int8, odd_shapes) {
    if (!vnni_or_skip())
        return;
    static const int shapes[][3] = {{1, 16, 4},      {1, 1, 1},     {1, 17, 5},    {2, 15, 3},
                                    {3, 33, 7},      {7, 100, 131}, {13, 64, 384}, {5, 129, 66},
                                    {12, 384, 1536}, {1, 1152, 384}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        run_both((gcase){.M = M, .N = N, .K = K, .ldx = (size_t)K, .ldy = (size_t)N});
    }
}

Test(gemm_int8, padded_strides) {
    if (!vnni_or_skip())
        return;
    run_both((gcase){.M = 9, .N = 40, .K = 37, .ldx = 50, .ldy = 47});
}

Test(gemm_int8, gelu) {
    if (!vnni_or_skip())
        return;
    run_both((gcase){.M = 11, .N = 1536, .K = 384, .ldx = 384, .ldy = 1536, .act = GEMM_ACT_GELU});
    run_both((gcase){.M = 3, .N = 21, .K = 9, .ldx = 9, .ldy = 23, .act = GEMM_ACT_GELU});
}

Test(gemm_int8, residual) {
    if (!vnni_or_skip())
        return;
    run_both((gcase){.M = 6, .N = 384, .K = 1536, .ldx = 1536, .ldy = 384, .residual = 1});
    run_both((gcase){.M = 5, .N = 30, .K = 10, .ldx = 10, .ldy = 33, .residual = 2});
}

Test(gemm_int8, gelu_then_residual) {
    if (!vnni_or_skip())
        return;
    run_both((gcase){
        .M = 4, .N = 50, .K = 64, .ldx = 64, .ldy = 50, .act = GEMM_ACT_GELU, .residual = 1});
}

Test(gemm_int8, residual_then_layernorm) {
    if (!vnni_or_skip())
        return;
    run_both((gcase){.M = 12, .N = 384, .K = 64, .ldx = 64, .ldy = 384, .residual = 2, .ln = 1});
    run_both((gcase){.M = 1, .N = 19, .K = 6, .ldx = 6, .ldy = 20, .residual = 1, .ln = 1});
}

Test(gemm_int8, activation_outliers) {
    if (!vnni_or_skip())
        return;
    /* One activation per row 50× the rest, as after GELU in a trained model:
     * the per-token step grows and the bound (which follows sx) with it. */
    run_both((gcase){.M = 8, .N = 64, .K = 256, .ldx = 256, .ldy = 64, .outlier = 50.0f});
}

Test(gemm_int8, smoothed) {
    if (!vnni_or_skip())
        return;
    run_both((gcase){.M = 7, .N = 70, .K = 130, .ldx = 130, .ldy = 70, .smooth = 1});
    run_both((gcase){
        .M = 12, .N = 384, .K = 32, .ldx = 32, .ldy = 384, .residual = 2, .ln = 1, .smooth = 1});
    run_both((gcase){
        .M = 9, .N = 48, .K = 301, .ldx = 301, .ldy = 48, .act = GEMM_ACT_GELU, .smooth = 1});
}

Test(gemm_int8, smoothing_tames_outliers) {
    if (!vnni_or_skip())
        return;
    /* Half of the outlier channels' range moved into the weights: the bound,
     * which follows both steps, holds. */
    run_both(
        (gcase){.M = 8, .N = 64, .K = 256, .ldx = 256, .ldy = 64, .outlier = 50.0f, .smooth = 1});
}

Test(gemm_int8, bad_smoothing_refused) {
    if (!vnni_or_skip())
        return;
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8}, sm[4] = {1, 0, 1, 1};
    gemm_weights *pw = (gemm_weights *)1;
    char msg[128] = "";
    cr_assert_eq(gemm_pack_smoothed(GEMM_INT8, w, NULL, sm, 2, 4, &pw, msg, sizeof msg), -1);
    cr_assert_null(pw);
    cr_assert(strstr(msg, "smoothing") != NULL, "message: %s", msg);
}

Test(gemm_int8, zero_rows_give_the_bias) {
    if (!vnni_or_skip())
        return;
    const int N = 20, K = 8;
    float w[20 * 8], b[20], x[2 * 8] = {0}, y[2 * 20];
    for (int i = 0; i < N * K; i++)
        w[i] = frand();
    for (int n = 0; n < N; n++)
        b[n] = frand();
    gemm_weights *pw = NULL;
    char msg[128];
    cr_assert_eq(gemm_pack(GEMM_INT8, w, b, N, K, &pw, msg, sizeof msg), 0, "%s", msg);
    void *scratch = malloc(gemm_scratch_bytes(pw, 2, 1));
    gemm_run(pw, &attn_parallel_serial, x, K, y, N, 2, NULL, scratch);
    for (int m = 0; m < 2; m++)
        for (int n = 0; n < N; n++)
            cr_assert_eq(y[m * N + n], b[n], "y[%d][%d] = %g, bias %g", m, n, y[m * N + n], b[n]);
    free(scratch);
    gemm_free(pw);
}

Test(gemm_int8, refused_without_the_avx512_path) {
    if (attn_simd_detect() < ATTN_SIMD_AVX2) {
        cr_skip_test("skipped: this CPU has no AVX2 path to force");
        return;
    }
    cr_assert_eq(attn_simd_force(ATTN_SIMD_AVX2), 0);
    const char *why = gemm_unsupported(GEMM_INT8);
    float w[4] = {1, 2, 3, 4};
    gemm_weights *pw = (gemm_weights *)1;
    char msg[128] = "";
    const int rc = gemm_pack(GEMM_INT8, w, NULL, 1, 4, &pw, msg, sizeof msg);
    attn_simd_unforce();
    cr_assert_not_null(why);
    cr_assert_eq(rc, -1);
    cr_assert_null(pw);
    cr_assert(strstr(msg, "int8") != NULL && strstr(msg, "VNNI") != NULL, "message: %s", msg);
}

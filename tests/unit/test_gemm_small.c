/* test_gemm_small.c — gemm_small_f32 against a float64 reference, on every
 * SIMD path this CPU has, for row counts around the kernel's blocks of 12,
 * depths that are and are not multiples of 16, and column sub-ranges.
 *
 * Error bound. Each output is b + a sum of K products computed in fp32 in
 * some order; whatever the order, the rounding error of a recursive or
 * blocked sum of K terms plus the bias is at most γ_{K+1} · (|b| + Σ|x·w|),
 * γ_n = n·u / (1 − n·u) with u = 2⁻²⁴ (Higham, Accuracy and Stability of
 * Numerical Algorithms, §3.1). The test allows exactly that. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/gemm_small.h"
#include "kernels/simd.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Runs M × K × [n0, n1) of an N-column layer with padded leading dimensions
 * and checks every output against the bound, and that nothing outside the
 * columns was written. */
static void check_case(int M, int K, int N, int n0, int n1, int with_bias, const char *path) {
    const size_t ldx = (size_t)K + 3, ldw = (size_t)K + 5, ldy = (size_t)N + 7;
    float *x = malloc((size_t)M * ldx * sizeof *x), *w = malloc((size_t)N * ldw * sizeof *w);
    float *b = malloc((size_t)N * sizeof *b), *y = malloc((size_t)M * ldy * sizeof *y);
    unsigned s = (unsigned)(M * 131 + K * 7 + N);
    for (size_t i = 0; i < (size_t)M * ldx; i++)
        x[i] = frand(&s);
    for (size_t i = 0; i < (size_t)N * ldw; i++)
        w[i] = frand(&s);
    for (int i = 0; i < N; i++)
        b[i] = frand(&s);
    const float sentinel = 12345.0f;
    for (size_t i = 0; i < (size_t)M * ldy; i++)
        y[i] = sentinel;
    gemm_small_f32(x, ldx, w, ldw, with_bias ? b : NULL, y, ldy, M, K, n0, n1);
    const double u = ldexp(1.0, -24), gamma = (K + 1) * u / (1.0 - (K + 1) * u);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < (int)ldy; n++) {
            const float got = y[(size_t)m * ldy + n];
            if (n < n0 || n >= n1) {
                cr_assert_eq(got, sentinel, "%s M=%d K=%d: wrote column %d outside [%d, %d)", path,
                             M, K, n, n0, n1);
                continue;
            }
            double ref = with_bias ? b[n] : 0.0, mag = with_bias ? fabs(b[n]) : 0.0;
            for (int k = 0; k < K; k++) {
                const double p = (double)x[(size_t)m * ldx + k] * w[(size_t)n * ldw + k];
                ref += p;
                mag += fabs(p);
            }
            cr_assert_leq(fabs(got - ref), gamma * mag,
                          "%s M=%d K=%d n=%d: %.9g vs %.9g (bound %.3g)", path, M, K, n, got, ref,
                          gamma * mag);
        }
    free(x);
    free(w);
    free(b);
    free(y);
}

Test(gemm_small, matches_float64_on_every_path) {
    static const int rows[] = {1, 2, 5, 11, 12, 13, 24, 25, 32};
    static const int depths[] = {1, 15, 16, 17, 100, 384, 1536};
    const attn_simd paths[] = {ATTN_SIMD_PORTABLE, ATTN_SIMD_AVX2, ATTN_SIMD_AVX512};
    int ran = 0;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (attn_simd_force(paths[p]) != 0) {
            cr_log_info("gemm_small: path %s not available on this CPU, not tested",
                        attn_simd_name(paths[p]));
            continue;
        }
        ran++;
        const char *name = attn_simd_name(paths[p]);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (size_t j = 0; j < sizeof depths / sizeof depths[0]; j++) {
                check_case(rows[i], depths[j], 37, 0, 37, 1, name);
                check_case(rows[i], depths[j], 37, 5, 22, (int)(i % 2), name); /* odd start */
                check_case(rows[i], depths[j], 37, 36, 37, 1, name);           /* one column */
            }
    }
    attn_simd_unforce();
    cr_assert_geq(ran, 1);
}

Test(gemm_small, empty_ranges_write_nothing) {
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 1}, y[2] = {7, 7};
    gemm_small_f32(x, 4, w, 4, NULL, y, 2, 1, 4, 1, 1);
    gemm_small_f32(x, 4, w, 4, NULL, y, 2, 0, 4, 0, 1);
    cr_assert_eq(y[0], 7);
    cr_assert_eq(y[1], 7);
    gemm_small_f32(x, 4, w, 4, NULL, y, 2, 1, 4, 0, 1);
    cr_assert_eq(y[0], 10);
}

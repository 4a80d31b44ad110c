/* gemm_selftest.c — the error bound of each precision's GEMMs and the check
 * of a precision against a float64 reference (see gemm.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gemm.h"

double gemm_error_bound(gemm_precision p, int K, double sum_abs, double abs_y) {
    const double u32 = 0x1p-24;
    switch (p) {
    case GEMM_FP32:
        return K * u32 * sum_abs + u32 * abs_y;
    case GEMM_BF16:
        return (2 * 0x1p-8 + K * u32) * sum_abs + u32 * abs_y;
    default:
        return -1.0;
    }
}

/* Uniform in [-scale, scale), reproducible. */
static void fill(float *a, size_t n, unsigned seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = ((float)(seed >> 8) * (2.0f / 16777216.0f) - 1.0f) * scale;
    }
}

/* One problem: returns the worst error / bound, or -1 when it could not run
 * (why set). */
static double check_one(gemm_precision p, const attn_parallel *par, int M, int N, int K, char *why,
                        size_t why_len) {
    float *w = malloc((size_t)N * K * sizeof *w), *b = malloc((size_t)N * sizeof *b);
    float *x = malloc((size_t)M * K * sizeof *x), *y = malloc((size_t)M * N * sizeof *y);
    gemm_weights *pw = NULL;
    void *scratch = NULL;
    double worst = -1.0;
    if (!w || !b || !x || !y) {
        snprintf(why, why_len, "out of memory");
        goto done;
    }
    fill(w, (size_t)N * K, 1u + (unsigned)N, 0.1f);
    fill(b, (size_t)N, 2u + (unsigned)K, 0.5f);
    fill(x, (size_t)M * K, 3u + (unsigned)M, 1.0f);
    if (gemm_pack(p, w, b, N, K, &pw, why, why_len))
        goto done;
    const size_t sb = gemm_scratch_bytes(pw, M, par->nthreads);
    if (sb && !(scratch = aligned_alloc(64, (sb + 63) / 64 * 64))) {
        snprintf(why, why_len, "out of memory");
        goto done;
    }
    gemm_run(pw, par, x, (size_t)K, y, (size_t)N, M, NULL, scratch);
    worst = 0.0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = b[j], s = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)x[(size_t)i * K + k] * w[(size_t)j * K + k];
                acc += t;
                s += fabs(t);
            }
            const double got = y[(size_t)i * N + j];
            const double r = fabs(got - acc) / gemm_error_bound(p, K, s, fabs(acc));
            if (!(r <= worst)) { /* also catches NaN */
                worst = isnan(r) ? INFINITY : r;
                if (worst > 1.0)
                    snprintf(why, why_len,
                             "%s %dx%dx%d: y[%d][%d] = %.9g, exact %.9g: error %.3g of the bound",
                             gemm_precision_name(p), M, N, K, i, j, got, acc, worst);
            }
        }
done:
    gemm_free(pw);
    free(scratch);
    free(w);
    free(b);
    free(x);
    free(y);
    return worst;
}

int gemm_selftest(gemm_precision p, const attn_parallel *par, double *worst, char *why,
                  size_t why_len) {
    *worst = 0.0;
    if (why_len)
        why[0] = '\0';
    const char *no = gemm_unsupported(p);
    if (no) {
        snprintf(why, why_len, "%s", no);
        return -1;
    }
    if (gemm_error_bound(p, 1, 1.0, 1.0) < 0) {
        snprintf(why, why_len, "no error bound for %s here", gemm_precision_name(p));
        return -1;
    }
    /* The encoder's four shapes at a short batch (column split) and a tall
     * one (row split), and odd sizes that leave partial tiles: rows not a
     * multiple of a tile's, columns not of a panel's, odd K, split both
     * ways. */
    static const int shapes[][3] = {{12, 1152, 384},  {12, 384, 1536}, {160, 1536, 384},
                                    {160, 384, 1536}, {7, 33, 17},     {129, 31, 385},
                                    {13, 200, 385},   {101, 130, 77}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const double r = check_one(p, par, shapes[i][0], shapes[i][1], shapes[i][2], why, why_len);
        if (r < 0)
            return -1;
        *worst = r > *worst ? r : *worst;
        if (r > 1.0)
            return -1;
    }
    return 0;
}

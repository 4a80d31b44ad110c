/* test_model_gelu.c — every GELU path against x·erfc(−x/√2)/2 in double.
 *
 * Bound: 4e-7 absolute (the erfc fit and float rounding of Φ, whose values
 * are at most 1) plus one float ulp of x (the final product). libm's erff
 * form meets the same bound; a fit or exponent bug misses it by far. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gelu.h"
#include "kernels/simd.h"

static double gelu_ref(double x) {
    return 0.5 * x * erfc(-x / sqrt(2.0));
}

static void check_path(attn_simd path) {
    if (attn_simd_force(path) != 0) {
        cr_log_info("GELU path %s not available on this CPU", attn_simd_name(path));
        return;
    }
    /* A sweep over [-20, 20] laid out as rows of 37 columns (not a multiple
     * of any vector width) with a stride, so tails are exercised. */
    enum { N = 200000, COLS = 37, STRIDE = 41 };
    const size_t rows = (N + COLS - 1) / COLS;
    float *x = malloc(rows * STRIDE * sizeof *x);
    for (size_t i = 0; i < rows * STRIDE; i++)
        x[i] = (float)(-20.0 + 40.0 * (double)i / (double)(rows * STRIDE));
    float *orig = malloc(rows * STRIDE * sizeof *orig);
    memcpy(orig, x, rows * STRIDE * sizeof *x);
    bert_gelu(x, rows, COLS, STRIDE);
    double worst = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < STRIDE; c++) {
            const size_t i = r * STRIDE + c;
            if (c >= COLS) {
                cr_assert_eq(x[i], orig[i], "%s wrote outside the block", attn_simd_name(path));
                continue;
            }
            const double err = fabs(x[i] - gelu_ref(orig[i]));
            const double bound = 4e-7 + FLT_EPSILON * fabs(orig[i]);
            cr_assert_leq(err, bound, "%s: GELU(%.9g) = %.9g, want %.9g", attn_simd_name(path),
                          orig[i], x[i], gelu_ref(orig[i]));
            worst = fmax(worst, err / bound);
        }
    cr_log_info("GELU %s: worst error %.2f of the bound", attn_simd_name(path), worst);

    float special[5] = {0.0f, -0.0f, INFINITY, 1e30f, -1e30f};
    bert_gelu(special, 1, 5, 5);
    cr_assert_eq(special[0], 0.0f);
    cr_assert_eq(special[1], 0.0f);
    cr_assert(isinf(special[2]) && special[2] > 0, "%s: GELU(inf) = %g", attn_simd_name(path),
              special[2]);
    cr_assert_eq(special[3], 1e30f);
    cr_assert_eq(special[4], 0.0f);
    float nan_in[1] = {NAN};
    bert_gelu(nan_in, 1, 1, 1);
    cr_assert(isnan(nan_in[0]));
    free(x);
    free(orig);
    attn_simd_unforce();
}

Test(model_gelu, portable) {
    check_path(ATTN_SIMD_PORTABLE);
}
Test(model_gelu, avx2) {
    check_path(ATTN_SIMD_AVX2);
}
Test(model_gelu, avx512) {
    check_path(ATTN_SIMD_AVX512);
}

/* A value gets the same GELU whether it sits in a full vector or a tail,
 * so a batch's split never changes an activation. */
Test(model_gelu, position_does_not_change_the_value) {
    float row[64], one[1];
    for (int i = 0; i < 64; i++)
        row[i] = 0.37f * (float)(i - 30);
    float copy[64];
    memcpy(copy, row, sizeof row);
    bert_gelu(row, 1, 64, 64);
    for (int i = 0; i < 64; i++) {
        one[0] = copy[i];
        bert_gelu(one, 1, 1, 1);
        cr_assert_eq(one[0], row[i], "element %d: %g alone vs %g in a row", i, one[0], row[i]);
    }
}

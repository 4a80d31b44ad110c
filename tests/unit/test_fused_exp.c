/* test_fused_exp.c — the fused backend's vector exp2, on every SIMD path this
 * CPU can run, against double-precision exp2.
 *
 * The softmax calls exp2(s - max) (log2 e is folded into the query scale), so
 * the range that matters is x <= 0, down to where terms stop mattering; the
 * kernel clamps at -125 to keep results normal. We check [-125, 127]: every
 * float in [-1, 1] with a stride, and a strided sweep over the whole range,
 * and require at most 2 ulp (of the float32 result). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fused_impl.h"
#include "kernels/simd.h"

#define MAX_ULP 2.0

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Error of y in units of the float32 ulp at the exact value. */
static double ulp_error(float y, double exact) {
    int e;
    frexp(exact, &e); /* exact = m·2^e, m in [0.5, 1) */
    return fabs((double)y - exact) / ldexp(1.0, e - 24);
}

/* Appends every float between lo and hi whose bit pattern is a multiple of
 * step apart, walking the bits of |x|. */
static size_t sweep(float *xs, size_t n, size_t cap, float lo, float hi, uint32_t step) {
    uint32_t ulo, uhi;
    memcpy(&ulo, &lo, sizeof ulo);
    memcpy(&uhi, &hi, sizeof uhi);
    for (uint32_t u = 0; n < cap; u += step) {
        const float pos = from_bits(u);
        if (!(pos <= hi) && !(-pos >= lo))
            break;
        if (pos <= hi)
            xs[n++] = pos;
        if (-pos >= lo && n < cap)
            xs[n++] = -pos;
    }
    return n;
}

static double max_ulp_on_path(attn_simd path, float *worst_x) {
    const size_t cap = 4u << 20;
    float *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
    cr_assert(x && y);
    size_t n = sweep(x, 0, cap, -1.0f, 1.0f, 1u << 10);     /* dense near 0 */
    n = sweep(x, n, cap, FUSED_EXP2_MIN, 127.0f, 1u << 11); /* the whole range */
    for (int i = -125; i <= 127; i++) /* exact powers of two and half-way points */
        if (n + 2 <= cap) {
            x[n++] = (float)i;
            x[n++] = (float)i + 0.5f;
        }
    cr_assert(fused_exp2(path, y, x, n) == 0);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] < FUSED_EXP2_MIN || x[i] > 127.0f)
            continue;
        const double e = ulp_error(y[i], exp2((double)x[i]));
        if (e > worst) {
            worst = e;
            *worst_x = x[i];
        }
    }
    free(x);
    free(y);
    return worst;
}

Test(fused_exp, within_two_ulp_on_every_path) {
    for (int p = ATTN_SIMD_PORTABLE; p <= (int)attn_simd_detect(); p++) {
        float wx = 0.0f;
        const double worst = max_ulp_on_path((attn_simd)p, &wx);
        cr_log_info("exp2 %s: max error %.3f ulp at x = %.9g", attn_simd_name((attn_simd)p), worst,
                    wx);
        cr_expect(worst <= MAX_ULP, "exp2 on %s: %.3f ulp at x = %.9g (limit %.1f)",
                  attn_simd_name((attn_simd)p), worst, wx, MAX_ULP);
    }
}

/* Masked scores reach exp2 as -inf (and, for rows that see no key at all, as
 * -inf - -inf = NaN); both must give a tiny finite number, never NaN or inf,
 * which the kernel then zeroes. */
Test(fused_exp, masked_inputs_stay_finite) {
    const float x[4] = {-INFINITY, NAN, -1e30f, -126.0f};
    for (int p = ATTN_SIMD_PORTABLE; p <= (int)attn_simd_detect(); p++) {
        float y[4];
        cr_assert(fused_exp2((attn_simd)p, y, x, 4) == 0);
        for (int i = 0; i < 4; i++) {
            cr_expect(isfinite(y[i]) && y[i] >= 0.0f && y[i] <= 0x1p-124f, "%s: exp2(%g) = %g",
                      attn_simd_name((attn_simd)p), x[i], y[i]);
        }
    }
}

Test(fused_exp, refuses_paths_the_cpu_lacks) {
    float x = 0.0f, y;
    if (attn_simd_detect() < ATTN_SIMD_AVX512)
        cr_expect(fused_exp2(ATTN_SIMD_AVX512, &y, &x, 1) == -1);
    cr_expect(fused_exp2((attn_simd)7, &y, &x, 1) == -1);
}

/* gelu_impl.h — the body of the vector GELU, shared by the AVX2 and AVX-512
 * files; each defines VL, vf, GELU_NAME and the v_* operations first.
 *
 * With z = |x|/√2 and t = 1/(1 + z/2):
 *     erfc(z) = t·Q(t)·e^(−z²)
 * where Q is a degree-10 polynomial fitted (least squares in relative error,
 * over z in [0, 10]) to erfc(z)·e^(z²)/t; its relative error is 2e-8. e^y is
 * 2^n·e^r with n = round(y·log2 e) and |r| <= ln2/2, e^r by its Taylor series
 * to r⁷. Then Φ(x) = erfc(z)/2 for x < 0 and 1 − erfc(z)/2 otherwise, so the
 * negative tail keeps its relative accuracy. */
#include <stdint.h>
#include <string.h>

static inline vf GELU_NAME(gelu_vec)(vf x) {
    const vf z = v_mul(v_abs(x), v_set1(0.70710678118654752f));
    const vf t = v_div(v_set1(1.0f), v_fma(v_set1(0.5f), z, v_set1(1.0f)));
    /* −z², floored where e^y would leave the normal range (Φ is 0 or 1
     * there to float precision). */
    const vf y = v_max(v_mul(v_neg(z), z), v_set1(-87.0f));
    const vf n = v_round(v_mul(y, v_set1(1.44269504088896341f)));
    vf r = v_fma(n, v_set1(-0.693145751953125f), y);
    r = v_fma(n, v_set1(-1.42860682030941723e-6f), r);
    vf p = v_set1(1.9841270e-4f);
    p = v_fma(p, r, v_set1(1.3888889e-3f));
    p = v_fma(p, r, v_set1(8.3333338e-3f));
    p = v_fma(p, r, v_set1(4.1666668e-2f));
    p = v_fma(p, r, v_set1(1.6666667e-1f));
    p = v_fma(p, r, v_set1(0.5f));
    p = v_fma(p, r, v_set1(1.0f));
    p = v_fma(p, r, v_set1(1.0f));
    const vf e = v_mul(p, v_pow2(n)); /* e^(−z²) */

    static const float q[11] = {
        2.820911100e-01f, 2.821844942e-01f,  2.459418034e-01f, 1.807611802e-01f,
        7.405535795e-02f, -1.446969717e-02f, 6.438332908e-02f, -3.881203360e-01f,
        4.525506855e-01f, -2.204522461e-01f, 4.107433823e-02f,
    };
    vf poly = v_set1(q[10]);
    for (int k = 9; k >= 0; k--)
        poly = v_fma(poly, t, v_set1(q[k]));
    const vf half = v_mul(v_mul(v_set1(0.5f), v_mul(t, poly)), e); /* erfc(z)/2 */
    const vf phi = v_select_neg(x, half, v_sub(v_set1(1.0f), half));
    return v_mul(x, phi);
}

/* Whole vectors in place; a row's tail goes through a padded copy so that
 * every element takes the same arithmetic wherever it sits. */
void GELU_NAME(bert_gelu)(float *x, size_t rows, size_t cols, size_t stride) {
    for (size_t r = 0; r < rows; r++) {
        float *row = x + r * stride; /* (cols) */
        size_t i = 0;
        for (; i + VL <= cols; i += VL)
            v_store(row + i, GELU_NAME(gelu_vec)(v_load(row + i)));
        if (i < cols) {
            float tail[VL] = {0};
            memcpy(tail, row + i, (cols - i) * sizeof(float));
            v_store(tail, GELU_NAME(gelu_vec)(v_load(tail)));
            memcpy(row + i, tail, (cols - i) * sizeof(float));
        }
    }
}

/* reference.c — the float64 reference and the error bound (see reference.h).
 * Plain loops on purpose: this code has to be obviously right, not fast. */
#include "reference.h"

#include <float.h>
#include <math.h>

/* The bounds of reference.h. biased: the problem adds a relative position
 * bias, in float32, to each score after its dot product: one more rounding,
 * at most u·|score| ≤ u·smax (smax then counts the bias), so the float32
 * bound gains ATTN_TOL_UNITS·u·vmax·smax (the √D·smax term for one more
 * rounding) and the bf16 score error Δ gains u·(smax + Δ) (the rounded sum
 * of a score off by Δ). */
static double bound_full(attn_precision prec, double vmax, int32_t nkeys, int head_dim, double smax,
                         double amax, int biased) {
    const double u = FLT_EPSILON / 2.0;
    const double extra = biased ? smax : 0.0;
    const double fp32 = ATTN_TOL_UNITS * u * vmax *
                            (1.0 + sqrt((double)nkeys) + sqrt((double)head_dim) * smax + extra) +
                        DBL_MIN;
    if (prec != ATTN_PREC_BF16)
        return fp32;
    const double ub = ATTN_BF16_UNIT_ROUNDOFF;
    const double du = (double)head_dim * u, gamma_d = du / (1.0 - du);
    double delta = (2.0 * ub + ub * ub + gamma_d) * amax;
    if (biased)
        delta += u * (smax + delta);
    /* Output and reference are both convex combinations of values within
     * ±vmax, so the softmax term never needs to exceed 2·vmax. */
    return vmax * (fmin(expm1(2.0 * delta), 2.0) + 2.0 * ub + ub * ub) + fp32;
}

double attn_error_bound(double vmax, int32_t nkeys, int head_dim, double smax) {
    return bound_full(ATTN_PREC_FP32, vmax, nkeys, head_dim, smax, 0.0, 0);
}

double attn_error_bound_bf16(double vmax, int32_t nkeys, int head_dim, double smax, double amax) {
    return bound_full(ATTN_PREC_BF16, vmax, nkeys, head_dim, smax, amax, 0);
}

double attn_error_bound_of(attn_precision prec, double vmax, int32_t nkeys, int head_dim,
                           double smax, double amax) {
    return bound_full(prec, vmax, nkeys, head_dim, smax, amax, 0);
}

/* max_j scale·Σ_d |q[d]·k_j[d]| over the keys [lo, hi) of the sequence
 * starting at start that token t sees, for head h: the condition of the
 * row's score dot products. */
static double abs_dot_max(const attn_problem *p, int32_t start, int32_t lo, int32_t hi, int32_t t,
                          int h) {
    const int D = p->shape.head_dim, hk = attn_kv_head(&p->shape, h);
    const float *qi = p->q + (size_t)t * p->q_stride + (size_t)h * D;
    double amax = 0.0;
    for (int32_t j = lo; j < hi; j++) {
        const float *kj = p->k + (size_t)(start + j) * p->k_stride + (size_t)hk * D;
        double a = 0.0;
        for (int d = 0; d < D; d++)
            a += fabs((double)qi[d] * (double)kj[d]);
        amax = fmax(amax, a * fabs((double)p->scale));
    }
    return amax;
}

double attn_reference_row(const attn_problem *p, int32_t seq, int32_t t, int h, double *ref,
                          double *vmax, double *scores) {
    const int D = p->shape.head_dim, hk = attn_kv_head(&p->shape, h);
    const int32_t start = p->cu_seqlens[seq], len = p->cu_seqlens[seq + 1] - start;
    int32_t lo, hi;
    attn_key_range(&p->shape, t - start, len, &lo, &hi);
    const int32_t nkeys = hi - lo;
    const float *qi = p->q + (size_t)t * p->q_stride + (size_t)h * D;
    double m = -INFINITY, smax = 0.0;
    /* scores[j] is key lo + j's */
    for (int32_t j = 0; j < nkeys; j++) {
        const float *kj = p->k + (size_t)(start + lo + j) * p->k_stride + (size_t)hk * D;
        double dot = 0.0;
        for (int d = 0; d < D; d++)
            dot += (double)qi[d] * (double)kj[d];
        scores[j] = dot * (double)p->scale;
        if (p->shape.rel_bias) /* t - start - (lo + j): the query's position minus the key's */
            scores[j] += (double)p->rel_bias[(size_t)h * (2 * (size_t)p->rel_span - 1) +
                                             (size_t)(p->rel_span - 1 + (t - start) - (lo + j))];
        m = fmax(m, scores[j]);
        smax = fmax(smax, fabs(scores[j]));
    }
    double sum = 0.0;
    for (int32_t j = 0; j < nkeys; j++) {
        scores[j] = exp(scores[j] - m);
        sum += scores[j];
    }
    for (int d = 0; d < D; d++)
        ref[d] = vmax[d] = 0.0;
    for (int32_t j = 0; j < nkeys; j++) {
        const float *vj = p->v + (size_t)(start + lo + j) * p->v_stride + (size_t)hk * D;
        const double w = scores[j] / sum;
        for (int d = 0; d < D; d++) {
            ref[d] += w * (double)vj[d];
            vmax[d] = fmax(vmax[d], fabs((double)vj[d]));
        }
    }
    return smax;
}

size_t attn_check_scratch(const attn_shape *shape) {
    const size_t keys = shape->max_seqlen > 0 ? (size_t)shape->max_seqlen : 1;
    return keys + 2 * (size_t)(shape->head_dim > 0 ? shape->head_dim : 1);
}

/* The sequence holding token t: the last b with cu[b] <= t < cu[b + 1]
 * (zero-length sequences hold no token and are skipped). */
static int32_t seq_of(const attn_problem *p, int32_t t) {
    int32_t lo = 0, hi = p->shape.batch - 1;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if (p->cu_seqlens[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    while (lo < p->shape.batch - 1 && p->cu_seqlens[lo + 1] <= t)
        lo++;
    return lo;
}

int64_t attn_check_rows(const attn_problem *p, const int32_t *rows, int32_t nrows, double *scratch,
                        attn_check *res) {
    return attn_check_rows_as(p, ATTN_PREC_FP32, rows, nrows, scratch, res);
}

int64_t attn_check_rows_as(const attn_problem *p, attn_precision prec, const int32_t *rows,
                           int32_t nrows, double *scratch, attn_check *res) {
    const int H = p->shape.heads, D = p->shape.head_dim;
    double *ref = scratch, *vmax = scratch + D, *scores = scratch + 2 * (size_t)D;
    int64_t bad = 0;
    for (int32_t r = 0; r < nrows; r++) {
        const int32_t t = rows[r];
        if (t < 0 || t >= p->shape.total_tokens)
            continue;
        const int32_t seq = seq_of(p, t);
        const int32_t start = p->cu_seqlens[seq];
        int32_t lo, hi;
        attn_key_range(&p->shape, t - start, p->cu_seqlens[seq + 1] - start, &lo, &hi);
        const int32_t nkeys = hi - lo;
        for (int h = 0; h < H; h++) {
            const double smax = attn_reference_row(p, seq, t, h, ref, vmax, scores);
            const double amax = prec == ATTN_PREC_BF16 ? abs_dot_max(p, start, lo, hi, t, h) : 0.0;
            const float *out = p->out + (size_t)t * p->out_stride + (size_t)h * D;
            for (int d = 0; d < D; d++) {
                const double bound =
                    bound_full(prec, vmax[d], nkeys, D, smax, amax, p->shape.rel_bias);
                const double err =
                    isfinite(out[d]) ? fabs((double)out[d] - ref[d]) : (double)INFINITY;
                const double ratio = err / bound;
                res->elements++;
                res->sum_abs_err += err;
                res->max_abs_err = fmax(res->max_abs_err, err);
                if (!(err <= bound)) {
                    if (res->bad == 0 || ratio > res->max_ratio) {
                        res->bad_seq = seq;
                        res->bad_token = t;
                        res->bad_head = h;
                        res->bad_dim = d;
                        res->bad_got = out[d];
                        res->bad_want = ref[d];
                        res->bad_bound = bound;
                    }
                    res->bad++;
                    bad++;
                }
                res->max_ratio = fmax(res->max_ratio, ratio);
            }
        }
    }
    return bad;
}

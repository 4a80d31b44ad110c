/* reference.h — what "correct" means for an attention backend: a float64
 * reference and the error bound a float32 backend must stay within.
 *
 * One definition serves the unit tests, the start-up self-test and the shadow
 * verification while serving, so a backend that passes CI passes on a
 * customer's machine by the same measure, and a mismatch in production means
 * what a failing test would.
 *
 * The bound, per output element of query row i (all heads h, dims d):
 *
 *     |out − ref| ≤ ATTN_TOL_UNITS · u · vmax · (1 + √n + √D · smax) + DBL_MIN
 *
 * u = FLT_EPSILON / 2 (float32 unit roundoff); n the keys row i sees (its
 * sequence's length, or i + 1 when causal); vmax = max over those keys of
 * |v_j[h][d]|; smax the largest |score| of the row (head h). The √n term is
 * the summation error of softmax-weighted sums, √D·smax the rounding of each
 * score's dot product as it enters exp. ATTN_TOL_UNITS is the only constant:
 * backends measured here stay within 0.07–0.31 of it (the unit tests' random
 * cases, and the self-test's cases where naive reaches 0.31). smax stands
 * in for the size of the products each dot product sums, which is what its
 * rounding scales with; where a row sees two or three keys whose scores
 * cancel to far below scale·Σ|q·k| (a window of 1, the first rows of a
 * causal sequence, inputs of N(0, 1.5²)), naive has been measured at 1.24×
 * the bound: the bf16 bound's amax is the better condition number there.
 *
 * The bf16 bound (backends with precision ATTN_PREC_BF16) is derived, not
 * fitted, from the roundings such a backend makes: Q, K, V and the
 * probabilities entering P·V rounded to bf16 (nearest even, unit roundoff
 * ub = 2^-8), every sum in float32. For row i, head h, dim d:
 *
 *   score error   |ŝ_j − s_j| ≤ Δ = (2·ub + ub² + γ_D) · amax,
 *                 amax = max_j scale·Σ_d |q_i[d]·k_j[d]|, γ_D = D·u/(1 − D·u):
 *                 each product q·k carries (1+α)(1+β), |α|,|β| ≤ ub, and the
 *                 float32 sum over D adds γ_D (products of two bf16 values
 *                 are exact in float32);
 *   softmax       scores off by at most Δ each move every weight p_j by a
 *                 factor within e^(±2Δ), so |Σ (p̂_j − p_j)·v_j| ≤ expm1(2Δ)·vmax;
 *   rounding      V and the probabilities entering P·V (the row sum adds them
 *                 unrounded) add (1+ub)² − 1 = 2·ub + ub² relative to each term;
 *
 *     |out − ref| ≤ vmax · (min(expm1(2Δ), 2) + 2·ub + ub²) + the float32 bound above
 *
 * (the min: two convex combinations of values within ±vmax differ by at most
 * 2·vmax; a non-finite output still fails)
 * and the float32 bound covers exp2, the sums and the output's own rounding.
 * It is a worst case, not a statistical estimate: every term holds for any
 * input, so adversarial inputs (large logits, cancellation) cannot pass a
 * correct kernel over it; the price is that it is loose where amax is large
 * (at amax = 8, Δ ≈ 0.06 and the bound ≈ 0.13·vmax, while random inputs
 * measure about 1 % of it). Inputs below 2^-126 are read as zero by
 * vdpbf16ps; each such product is below 2^-126·max|k|, far under DBL_MIN
 * relative terms here, and is not counted.
 *
 * A problem with a relative position bias (attention.h) is held to the same
 * bounds with smax counting the bias and one more score rounding (the bias
 * is added in float32 after the dot product): see bound_full in reference.c.
 *
 * Nothing here allocates: callers pass scratch sized by attn_check_scratch. */
#ifndef ATTN_REFERENCE_H
#define ATTN_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "attention.h"

#define ATTN_TOL_UNITS 2.0

/* The bound for one element (see above); pass smax = 0 for cases built so
 * that float32 holds every score exactly. */
double attn_error_bound(double vmax, int32_t nkeys, int head_dim, double smax);

/* bf16's unit roundoff: 8 significant bits, round to nearest. */
#define ATTN_BF16_UNIT_ROUNDOFF (1.0 / 256.0)

/* The bf16 bound for one element (see above): amax is the row's largest
 * scale·Σ_d |q[d]·k_j[d]| over the keys it sees. */
double attn_error_bound_bf16(double vmax, int32_t nkeys, int head_dim, double smax, double amax);

/* The bound of precision prec (amax is ignored for float32). */
double attn_error_bound_of(attn_precision prec, double vmax, int32_t nkeys, int head_dim,
                           double smax, double amax);

/* Float64 attention of token t (a global token index, within sequence seq)
 * for head h: ref[D] receives the output, vmax[D] the per-dimension bound
 * input, and the return value is the row's largest |score|. scores is
 * scratch of at least max_seqlen doubles. */
double attn_reference_row(const attn_problem *p, int32_t seq, int32_t t, int h, double *ref,
                          double *vmax, double *scores);

/* The outcome of comparing some rows of p->out with the reference. */
typedef struct attn_check {
    int64_t elements;   /* output elements compared */
    int64_t bad;        /* past the bound, or not finite */
    double max_abs_err; /* largest |out − ref| (inf when an output was not finite) */
    double sum_abs_err; /* mean = sum_abs_err / elements */
    double max_ratio;   /* largest |out − ref| / bound: <= 1 passes */
    /* The worst element past the bound (valid when bad > 0), for messages. */
    int32_t bad_seq, bad_token, bad_head, bad_dim;
    float bad_got;
    double bad_want, bad_bound;
} attn_check;

/* Doubles of scratch attn_check_rows needs for batches within shape. */
size_t attn_check_scratch(const attn_shape *shape);

/* Compares p->out on the given query rows (global token indices, each in
 * [0, T), any order, repeats allowed), every head and dimension, with the
 * float64 reference of p's inputs, by the float32 bound. Adds to *res (zero
 * it first to start a new check). Returns the number of elements past the
 * bound in this call. */
int64_t attn_check_rows(const attn_problem *p, const int32_t *rows, int32_t nrows, double *scratch,
                        attn_check *res);

/* The same by the bound of precision prec: what the self-test and shadow
 * verification call with the backend's own precision. */
int64_t attn_check_rows_as(const attn_problem *p, attn_precision prec, const int32_t *rows,
                           int32_t nrows, double *scratch, attn_check *res);

#endif

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
 * cases, and the self-test's cases where naive reaches 0.31).
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
 * float64 reference of p's inputs. Adds to *res (zero it first to start a new
 * check). Returns the number of elements past the bound in this call. */
int64_t attn_check_rows(const attn_problem *p, const int32_t *rows, int32_t nrows, double *scratch,
                        attn_check *res);

#endif

/* attn_ref.h — test helpers shared by the attention tests: a float64
 * reference, a deterministic RNG and batch builders. */
#ifndef TEST_ATTN_REF_H
#define TEST_ATTN_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/backends.h"
#include "kernels/reference.h"

/* xorshift64*: deterministic across platforms, so a failing case can be
 * reproduced from its seed. */
typedef struct {
    uint64_t s;
} test_rng;

uint64_t rng_next(test_rng *r);
int rng_int(test_rng *r, int lo, int hi); /* uniform in [lo, hi] */
float rng_normal(test_rng *r);

/* The float64 reference for query rows [row_lo, row_hi) of p (token
 * indices, all sequences): ref receives (row_hi - row_lo, H, D) doubles.
 * vmax (may be NULL) receives, per element, max_j |v_j[d]| over the keys the
 * query sees; *smax (may be NULL) the largest |score| met. Both feed the
 * error bound. */
void attn_reference(const attn_problem *p, int32_t row_lo, int32_t row_hi, double *ref,
                    double *vmax, double *smax);

/* Runs backend b on p over a pool of nthreads with a workspace of the size
 * b asks for: b's return code, or ATTN_EINVAL when the pool or the
 * workspace cannot be made. */
int attn_run_backend(const attn_backend *b, const attn_problem *p, int nthreads);

/* Every row of p's output against kernels/reference.c's float64 rows, by
 * the bound of precision prec (attn_check_rows_as). */
attn_check attn_check_every_row(attn_precision prec, const attn_problem *p);

/* Backend b on p, asserted to support p's shape and to run (on two
 * threads), then every row checked as attn_check_every_row does at b's own
 * precision: the check, which the caller asserts with its case in the
 * message. */
attn_check attn_run_and_check(const attn_backend *b, const attn_problem *p);

/* cu_seqlens (batch + 1, calloc'd) of a batch packing sequences of the
 * given lengths; *maxlen receives the longest. */
int32_t *attn_cu_seqlens(const int32_t *lens, int batch, int32_t *maxlen);

/* A supports() that takes every shape: a test backend table built on it is
 * refused only by what its capability flags (gqa, window, rel_bias) say. */
int attn_accept_all(const attn_shape *s, char *why, size_t why_len);

/* Runs each(b, path name) on every SIMD path this CPU runs, forced in
 * turn, then lets the detection choose again. */
void attn_on_every_path(void (*each)(const attn_backend *b, const char *path),
                        const attn_backend *b);

/* Whether the bf16 backend runs shape s here. Where it does not, the
 * refusal must be for the CPU (no AVX512_BF16), never for what s carries
 * (grouped heads, a window, a bias), and is logged as a warning. */
int attn_bf16_offered(const attn_shape *s);

#endif

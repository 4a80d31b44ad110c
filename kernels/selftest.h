/* selftest.h — a short check that a backend computes attention correctly on
 * this machine, run before the service uses it.
 *
 * A hand-tuned kernel usually fails on a CPU, a library version or a shape
 * nobody tested, not on the test machine. So before serving, every backend
 * runs a fixed, deterministic set of shapes around the model's (its heads and
 * head_dim; sequence lengths at tile edges and up to the model's longest;
 * several sequences packed with a zero-length one; causal and not; the
 * model's fused-QKV token strides) and two typical /v1/attention shapes, and
 * each output is compared with kernels/reference.h by the bound the unit
 * tests use. Short cases are checked on every row; the long one on sampled
 * rows that include the first and last token of every sequence.
 *
 * Results are also kept per backend for the life of the process
 * (attn_selftest_keep), so a reload can refuse a backend that failed without
 * running anything again. */
#ifndef ATTN_SELFTEST_H
#define ATTN_SELFTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attention.h"
#include "reference.h"

/* Cases one run holds (attn_selftest_run uses fewer). */
#define ATTN_SELFTEST_MAX_CASES 8

/* The model the self-test is shaped around. */
typedef struct attn_selftest_spec {
    int heads;          /* the model's attention heads */
    int head_dim;       /* and their size */
    int32_t max_seqlen; /* the model's longest input: the long case's length */
    int rel_bias;       /* 1: the model adds a relative position bias (attention.h), which
                           its cases then carry */
} attn_selftest_spec;

/* One shape of the run. */
typedef struct attn_selftest_case {
    const char *name;     /* what the case exercises (a string literal) */
    attn_shape shape;     /* its bounds */
    int32_t rows_checked; /* query rows compared (every head and dim of each) */
    int status;           /* forward's return (or supports' refusal) */
    attn_check check;     /* the comparison; check.bad > 0 fails */
    double ms;            /* forward and check, wall time */
    bool passed;
} attn_selftest_case;

/* One backend's run on the SIMD path active at the time. */
typedef struct attn_selftest_result {
    const attn_backend *backend;
    const char *simd; /* backend->simd_path() during the run */
    int ncases;
    attn_selftest_case cases[ATTN_SELFTEST_MAX_CASES];
    int cases_passed;
    bool passed; /* every case passed */
    /* Over all cases: largest |out − ref|, mean |out − ref|, largest
     * error / bound (<= 1 passes; inf when an output was not finite). */
    double max_abs_err, mean_abs_err, max_ratio;
    double ms; /* the whole run, setup included */
    /* Why it failed (the worst element past the bound, or the error of a
     * forward call); "" when it passed. */
    char reason[320];
} attn_selftest_result;

/* Runs backend on every case for spec, through par, on the SIMD path now
 * active, and fills *res. Allocates its inputs for the run (at most
 * attn_selftest_bytes) and frees them before returning. Returns 0 whether the
 * backend passed or not, or -1 when out of memory (res->reason says so). */
int attn_selftest_run(const attn_backend *backend, const attn_selftest_spec *spec,
                      const attn_parallel *par, attn_selftest_result *res);

/* Bytes attn_selftest_run allocates for spec with nthreads workers (inputs,
 * outputs, reference scratch and the largest workspace of backend). */
size_t attn_selftest_bytes(const attn_backend *backend, const attn_selftest_spec *spec,
                           int nthreads);

/* ---- results kept for the process ---------------------------------------------
 * Written at start, before any thread that reads them runs; read-only after. */

/* Keeps a copy of r as its backend's result (replacing an earlier one). */
void attn_selftest_keep(const attn_selftest_result *r);

/* The result kept for b, or NULL when b was not self-tested. */
const attn_selftest_result *attn_selftest_kept(const attn_backend *b);

/* Whether b ran the self-test in this process and passed it. A backend never
 * self-tested (it cannot run the configured shapes) has not passed. */
bool backend_passed_selftest(const attn_backend *b);

/* Forgets every kept result (for tests). */
void attn_selftest_forget(void);

#endif

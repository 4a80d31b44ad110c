/* verify.h — shadow verification while serving: a sampled fraction of
 * batches has one attention call recomputed in float64 (kernels/reference.h)
 * on a checker thread, off the hot path, and compared with what the backend
 * in force returned.
 *
 * What is checked: one layer's attention, not the whole forward. The backend
 * computes only attention; everything else in the forward is common code
 * that runs the same whatever the backend. One attention call has a tight,
 * principled bound (attn_error_bound, the unit tests' own), so a mismatch
 * means what a failing unit test would; a whole-forward comparison would
 * need a loose, empirical tolerance and the full reference model's cost.
 * For an embedding batch the layer is drawn at random per sampled batch;
 * for a /v1/attention batch the call is one group of the batch.
 *
 * Memory: ONE capture slot, allocated at verify_create for the largest
 * problem the service can run, holds a sampled call's inputs until the
 * checker has finished with it. The compute thread copies into it (memcpy
 * only: K and V of the sequences whose rows are checked, Q and output of
 * those rows, cu_seqlens); when the slot is still busy the sample is
 * skipped and counted. Nothing is allocated after verify_create.
 *
 * Threads: verify_sample and verify_capture run on the compute thread only;
 * the checker thread does the float64 work, updates the metrics and, past
 * the mismatch threshold within the window (counted per backend), calls
 * the trip callback. Settings are atomics, changeable from any thread. */
#ifndef ATTN_VERIFY_H
#define ATTN_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/reference.h"

/* Most mismatches a window can require (verify_mismatch_threshold's bound):
 * the window keeps that many timestamps in a fixed ring. */
#define VERIFY_MAX_THRESHOLD 1024
/* Most rows one check compares (verify_max_rows' bound). */
#define VERIFY_MAX_ROWS 1024

/* ---- pieces with no threads, unit-tested on their own --------------------------- */

/* xorshift64* : cheap, seeded, good enough to pick batches and rows. */
typedef struct verify_rng {
    uint64_t s;
} verify_rng;

void verify_rng_seed(verify_rng *r, uint64_t seed);
uint64_t verify_rng_next(verify_rng *r);
/* Uniform in [0, 1). */
double verify_rng_unit(verify_rng *r);

/* True with probability rate: 0 never draws true, 1 always does. */
bool verify_draw(verify_rng *r, double rate);

/* Picks at most max_rows query rows (global token indices) of a packed batch
 * of B sequences: up to half of them each sequence's first and last token
 * (where kernels' edge handling lives), starting at a random sequence, the
 * rest tokens drawn uniformly from the whole batch (interior rows). Writes
 * them to rows (sorted, distinct) and returns how many. */
int32_t verify_pick_rows(verify_rng *r, const int32_t *cu_seqlens, int32_t batch, int32_t max_rows,
                         int32_t *rows);

/* Mismatches within a sliding time window: trips when threshold of them fall
 * within window_ns of each other. */
typedef struct verify_window {
    uint64_t at[VERIFY_MAX_THRESHOLD]; /* ring of the last `threshold` times */
    int32_t threshold, n, head;
    uint64_t window_ns;
} verify_window;

void verify_window_init(verify_window *w, int32_t threshold, uint64_t window_ns);
/* Records a mismatch at now_ns (non-decreasing); true when it makes
 * threshold mismatches within the window. */
bool verify_window_add(verify_window *w, uint64_t now_ns);

/* ---- the verifier ------------------------------------------------------------------ */

typedef struct verifier verifier;

/* What a check found; given to the trip callback and logged. */
typedef struct verify_evidence {
    const attn_backend *backend;
    int layer; /* model layer, or -1 for a /v1/attention batch */
    uint64_t batch_id;
    attn_shape shape; /* of the captured problem */
    int32_t rows;     /* query rows compared */
    attn_check check; /* errors; bad_* is the worst element past the bound */
    int32_t mismatches_in_window;
} verify_evidence;

/* Called on the checker thread when the threshold is reached. Returns true
 * when it acted (switched backends): the window then starts again, so the
 * next switch needs the threshold of the new backend's own mismatches.
 * false (say, the failing backend is no longer the one in force, or no
 * fallback was usable) leaves the window as it is. */
typedef bool (*verify_trip_fn)(const verify_evidence *ev, void *ctx);

typedef struct verify_options {
    int32_t max_tokens;     /* K/V rows the slot holds */
    int32_t max_row_floats; /* largest heads * head_dim */
    int64_t max_kv_floats;  /* largest tokens * heads * head_dim of one call */
    int32_t max_seqs;       /* most sequences of one call */
    int32_t max_seqlen;     /* longest sequence (reference scratch) */
    int32_t max_head_dim;
    /* Largest heads * (2 * rel_span - 1) of a problem with a relative
     * position bias (attention.h), 0 when no model has one: the slot copies
     * the bias, as it copies K and V, so a check never reads a model's
     * memory after the model may be gone. */
    int64_t max_bias_floats;
    int32_t max_rows; /* verify_max_rows (restart: it sizes the slot) */
    double sample_rate;
    int32_t mismatch_threshold;
    int64_t window_s;
    uint64_t seed;
    verify_trip_fn trip;
    void *trip_ctx;
} verify_options;

/* Allocates the slot and starts the checker thread. NULL with a message. */
verifier *verify_create(const verify_options *opt, char *err, size_t err_len);

/* Stops and joins the checker (a check under way finishes first); captures
 * after this are refused. Call while the scheduler still runs, before
 * sched_destroy: a trip callback may be using the scheduler. */
void verify_stop(verifier *v);
/* Stops if needed and frees. NULL is a no-op. */
void verify_destroy(verifier *v);

/* Bytes allocated at create (for /info's worst-case memory). */
size_t verify_bytes(const verifier *v);

/* Reloadable settings. */
void verify_set_rate(verifier *v, double rate);
void verify_set_policy(verifier *v, int32_t threshold, int64_t window_s);

/* Clears the window and the tripped flag (a reload that changed the backend
 * in force). verify_tripped: whether a trip switched backends since start or
 * the last re-arm. */
void verify_rearm(verifier *v);
bool verify_tripped(const verifier *v);

/* Compute thread, once per batch part: whether to capture one call of it. */
bool verify_sample(verifier *v);

/* Compute thread: a layer in [0, nlayers), uniformly. */
int verify_pick_layer(verifier *v, int nlayers);

/* Compute thread: copies what the check of p (just computed by backend)
 * needs into the slot and wakes the checker. Returns true if captured,
 * false if the slot was busy (counted as skipped) or the problem does not
 * fit the slot (counted as skipped too; cannot happen within the bounds
 * given at create). */
bool verify_capture(verifier *v, const attn_problem *p, const attn_backend *backend, int layer,
                    uint64_t batch_id);

/* Waits until the slot is free (no check pending or running); for tests and
 * the benchmark. Returns false after timeout_ms. */
bool verify_wait_idle(verifier *v, int64_t timeout_ms);

/* Checks done, mismatches and skipped captures since create (also in
 * /metrics); for tests. */
void verify_counts(const verifier *v, uint64_t *checked, uint64_t *mismatched, uint64_t *skipped);

/* CPU seconds the checker thread has spent checking (its own clock, so
 * waiting for a core does not count); for the benchmark. */
double verify_check_cpu_seconds(const verifier *v);

#endif

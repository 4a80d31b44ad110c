/* backend_selftest.h — the service's use of kernels/selftest.h: every
 * backend that can run the configured shapes is self-tested before /ready
 * turns 200 (results kept for reload, /info and /metrics), and the
 * `attnserve selftest` command runs the same checks on every SIMD path the
 * CPU has and prints them as a table. */
#ifndef SRV_BACKEND_SELFTEST_H
#define SRV_BACKEND_SELFTEST_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "kernels/attention.h"
#include "kernels/selftest.h"
#include "model/encoder.h"

/* The self-test shaped around model m: its heads, head size and longest
 * input. */
attn_selftest_spec backend_selftest_spec(const encoder_info *m);

/* The distinct self-test specs (heads, head_dim, max_seqlen) of models[0,
 * n), in order, into out (room for n). Returns how many. */
size_t backend_selftest_specs(const encoder_info *const *models, size_t n, attn_selftest_spec *out);

/* Self-tests, on the SIMD path active now, every backend of the binary that
 * accepts every shape in bounds[0..nbounds), once for each of specs[0,
 * nspecs) (every served model's attention shape), and keeps one result per
 * backend (attn_selftest_keep, so backend_passed_selftest answers from now
 * on): it passed only if every run did. Logs each (a warning with the worst
 * element when it failed) and sets its metrics. Returns 0, or -1 when out of
 * memory. Call before serving. */
int backend_selftest_start(const attn_selftest_spec *specs, size_t nspecs, const attn_shape *bounds,
                           size_t nbounds, const attn_parallel *par);

/* The kept results as /info's "selftest" array (non-finite numbers as null);
 * NULL when out of memory. */
json_t *backend_selftest_json(void);

/* `prog selftest [--config PATH] [--NAME=VALUE ...]` (argv[0] is
 * "selftest"): reads the settings as serving does and the config.json (not
 * the weights) of every model they serve (each of `models`, else `model`),
 * self-tests every backend that can run the configured shapes (the
 * attention endpoint's and every model's) on every SIMD path the CPU has,
 * for each model's shape in turn, and prints a table per model to out with
 * the reasons of failures and the verdicts after it; then checks every
 * precision's GEMMs on every SIMD path against their element bound
 * (gemm_selftest). Returns the exit status: 0 when every backend that
 * `backend` and `fallback_backends` name passed everywhere for every model
 * and every GEMM check that ran passed, 1 otherwise, 2 for a configuration
 * or model error. --help, --version and --print-config do what they do when
 * serving. */
int backend_selftest_command(const char *prog, const char *version, int argc, char **argv,
                             FILE *out);

#endif

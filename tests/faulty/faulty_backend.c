/* faulty_backend.c — a test-only backend that computes correct attention
 * (it delegates to naive) until it has run a given number of forward calls,
 * then corrupts its output. It exists to prove the safety net: the start-up
 * self-test must refuse it, shadow verification must catch it while serving
 * and switch to the fallback.
 *
 * Linked only into test binaries (mk/faulty.mk builds build/attnserve-faulty);
 * a constructor registers it, so it is selectable as backend "faulty".
 *
 * Environment, read at the first forward:
 *   ATTNSERVE_FAULTY_AFTER  forward calls that stay correct (default 0: the
 *                           very first call is already wrong)
 *   ATTNSERVE_FAULTY_MODE   "all": every output element is off by 0.5 + 25%
 *                           (default); "tail": only each sequence's last
 *                           token, as a kernel with a bad remainder loop
 *                           would be. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"

static atomic_long calls;
static long after = -1;
static int tail_only;

static const attn_backend *naive(void) { return attn_backend_find("naive"); }

static void read_env(void) {
    const char *a = getenv("ATTNSERVE_FAULTY_AFTER");
    const char *m = getenv("ATTNSERVE_FAULTY_MODE");
    after = a ? strtol(a, NULL, 10) : 0;
    tail_only = m && strcmp(m, "tail") == 0;
}

static int faulty_supports(const attn_shape *shape, char *why, size_t why_len) {
    return naive()->supports(shape, why, why_len);
}

static size_t faulty_workspace_size(const attn_shape *shape, int nthreads) {
    return naive()->workspace_size(shape, nthreads);
}

static void corrupt_row(const attn_problem *p, int32_t t) {
    float *o = p->out + (size_t)t * p->out_stride;
    for (size_t i = 0; i < (size_t)p->shape.heads * (size_t)p->shape.head_dim; i++)
        o[i] = o[i] * 1.25f + 0.5f;
}

static int faulty_forward(const attn_problem *p, void *ws, size_t ws_bytes,
                          const attn_parallel *par) {
    int rc = naive()->forward(p, ws, ws_bytes, par);
    if (rc != ATTN_OK)
        return rc;
    /* Forward calls come from one thread at a time (the compute thread or
     * the self-test), so reading the environment here is not racy. */
    if (after < 0)
        read_env();
    if (atomic_fetch_add(&calls, 1) < after)
        return ATTN_OK;
    for (int32_t b = 0; b < p->shape.batch; b++) {
        const int32_t lo = p->cu_seqlens[b], hi = p->cu_seqlens[b + 1];
        for (int32_t t = tail_only ? hi - 1 : lo; t >= lo && t < hi; t++)
            corrupt_row(p, t);
    }
    return ATTN_OK;
}

static const char *faulty_simd_path(void) { return "portable"; }

/* speed_rank above every real backend: `auto` picks it, so the tests show
 * that the self-test guards `auto` as well as a backend named outright. */
static const attn_backend faulty = {
    .name = "faulty",
    .summary = "test only: naive that corrupts its output after ATTNSERVE_FAULTY_AFTER calls",
    .speed_rank = 1000,
    .supports = faulty_supports,
    .workspace_size = faulty_workspace_size,
    .forward = faulty_forward,
    .simd_path = faulty_simd_path,
};

__attribute__((constructor)) static void register_faulty(void) {
    if (attn_backend_register(&faulty) != ATTN_OK) {
        fprintf(stderr, "faulty_backend: cannot register\n");
        abort();
    }
}

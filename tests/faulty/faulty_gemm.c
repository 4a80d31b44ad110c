/* faulty_gemm.c — in the test-only binary only: with ATTNSERVE_FAULTY_GEMM
 * set (to anything), every GEMM's first output element comes out 1 too
 * large, so the tests can see `attnserve selftest` fail a precision's GEMM
 * check and exit 1. Linked with -Wl,--wrap=gemm_run (mk/faulty.mk): every
 * call of gemm_run, gemm_selftest's included, lands here first. Without the
 * variable the real gemm_run runs untouched. */
#include <stdlib.h>

#include "kernels/gemm.h"

void __real_gemm_run(const gemm_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                     float *y, size_t ldy, int M, const gemm_epilogue *epi, void *scratch);
void __wrap_gemm_run(const gemm_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                     float *y, size_t ldy, int M, const gemm_epilogue *epi, void *scratch);

void __wrap_gemm_run(const gemm_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                     float *y, size_t ldy, int M, const gemm_epilogue *epi, void *scratch) {
    __real_gemm_run(w, par, x, ldx, y, ldy, M, epi, scratch);
    if (M > 0 && getenv("ATTNSERVE_FAULTY_GEMM"))
        y[0] += 1.0f;
}

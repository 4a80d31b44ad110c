/* gemm.h — the linear layers of an encoder, y = epilogue(x · Wᵀ + b), with
 * the weights packed once at load in the layout and precision the kernel
 * wants.
 *
 * One contract for every precision, so the encoder's forward pass is written
 * once and an engine changes only how its weights are packed: fp32 (our
 * kernel on panels packed at load where AVX-512 runs, else the library
 * GEMM on the weights as stored), bf16 (weights in bf16, activations
 * converted on the fly, fp32 accumulation) and int8 (per-output-channel
 * symmetric weights, per-token dynamic activations, int32 accumulation,
 * dequantised to fp32 in the epilogue). Activations in and out are always
 * fp32 rows, so LayerNorm, softmax and GELU stay in fp32 whatever the GEMMs
 * run in.
 *
 * Weights come as PyTorch's nn.Linear stores them: W (N, K) row-major, bias
 * (N). fp32 copies W into its panels when the AVX-512 path is active at
 * gemm_pack, and keeps a reference to w and bias as well for OpenBLAS's
 * sgemm, which runs whenever that path is not active at gemm_run (forced
 * lower, or a CPU without it): for fp32, w and bias must outlive the packed
 * weights. The other precisions copy what they need. The packed form is
 * immutable after gemm_pack and may be shared by any number of threads and
 * workspaces. Like the attention backends, a GEMM
 * never creates threads or allocates while running: the caller hands it its
 * pool (attn_parallel) and a scratch arena sized by gemm_scratch_bytes. */
#ifndef ATTN_GEMM_H
#define ATTN_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "parallel.h"

/* The names are the `precision` setting's values, so scripts can rely on
 * them: "fp32", "bf16", "int8", "fp16", "tf32". fp16 (weights and
 * activations in half) and tf32 (fp32 with the GEMMs' inputs rounded to
 * TF32 on tensor cores) are GPU precisions: gemm_unsupported refuses them
 * by name on the CPU (gemm_precision_gpu_only). */
typedef enum gemm_precision {
    GEMM_FP32,
    GEMM_BF16,
    GEMM_INT8,
    GEMM_FP16,
    GEMM_TF32,
    GEMM_NPRECISIONS
} gemm_precision;

/* Whether p is a precision only a GPU engine runs (fp16, tf32). */
int gemm_precision_gpu_only(gemm_precision p);

const char *gemm_precision_name(gemm_precision p);
/* -1 when name is none of the above. */
int gemm_precision_parse(const char *name);

/* NULL when precision p can run on this CPU; otherwise why not (for a log
 * line and /info), e.g. "no AVX512_BF16 on this CPU". */
const char *gemm_unsupported(gemm_precision p);

typedef struct gemm_weights gemm_weights;

/* Packs W (N, K) and bias (N, may be NULL) for precision p. Returns 0, or
 * -1 with a message (unsupported precision, out of memory). */
int gemm_pack(gemm_precision p, const float *w, const float *bias, int N, int K, gemm_weights **out,
              char *err, size_t err_len);
/* gemm_pack with a quantisation hint: smooth (K, > 0, may be NULL) moves
 * the range of each input channel from the activations to the weights, as
 * SmoothQuant does: int8 quantises x_k / smooth_k per token and
 * W[n,k] · smooth_k per channel, which leaves y unchanged but evens out
 * activation channels with outliers. fp32 and bf16 ignore it. */
int gemm_pack_smoothed(gemm_precision p, const float *w, const float *bias, const float *smooth,
                       int N, int K, gemm_weights **out, char *err, size_t err_len);
void gemm_free(gemm_weights *w);

gemm_precision gemm_weights_precision(const gemm_weights *w);
int gemm_n(const gemm_weights *w);
int gemm_k(const gemm_weights *w);
/* Bytes the packed weights own (what /info's worst case counts); for fp32
 * the packed copy, 0 where there is none (the AVX-512 path was not active
 * at gemm_pack: OpenBLAS reads the caller's weights in place). */
size_t gemm_weights_bytes(const gemm_weights *w);

/* What runs after x · Wᵀ + b, on each output element while it is still in
 * registers or cache, so no extra pass over memory is spent on it. In this
 * order: activation, then + residual, then LayerNorm over the whole row (a
 * post-norm encoder's y = LayerNorm(x + x·Wᵀ + b) in one call). */
typedef enum gemm_act { GEMM_ACT_NONE, GEMM_ACT_GELU } gemm_act;

typedef struct gemm_epilogue {
    gemm_act act;
    /* (M, N) with row stride ld_residual; may alias y (with the same
     * stride) when act is GEMM_ACT_NONE */
    const float *residual;
    size_t ld_residual;
    const float *ln_w, *ln_b; /* (N) each; both NULL: no LayerNorm */
    float ln_eps;
} gemm_epilogue;

/* Scratch gemm_run needs with par->nthreads workers for up to max_rows rows
 * (converted or quantised activations, per-token scales, row buffers). */
size_t gemm_scratch_bytes(const gemm_weights *w, int max_rows, int nthreads);

/* y (M, N, row stride ldy) = epi(x (M, K, row stride ldx) · Wᵀ + b), split
 * over par. epi may be NULL (bias only). scratch holds at least
 * gemm_scratch_bytes(w, M, par->nthreads). y must not alias x. */
void gemm_run(const gemm_weights *w, const attn_parallel *par, const float *x, size_t ldx, float *y,
              size_t ldy, int M, const gemm_epilogue *epi, void *scratch);

/* ---- error bound and self-test ---------------------------------------------
 * The bound every precision's output must meet, per element of x·Wᵀ + b,
 * given S = Σ_k |x_k·w_k| and |y| (both in exact arithmetic):
 *   fp32: K·2⁻²⁴·S + 2⁻²⁴·|y|  (the K roundings of the running sum, and the
 *         bias add)
 *   bf16: (2·2⁻⁸ + K·2⁻²⁴)·S + 2⁻²⁴·|y|  (x and w each rounded once to
 *         bf16, unit roundoff 2⁻⁸: a relative error of at most 2·2⁻⁸ in
 *         every product, then fp32 accumulation as above)
 * Never widened to make a kernel pass. Negative for a precision without a
 * bound here (int8's belongs with its kernels). */
double gemm_error_bound(gemm_precision p, int K, double sum_abs, double abs_y);

/* Checks precision p's GEMMs on this CPU against a float64 reference on an
 * encoder's shapes (C = 384, F = 1536, short and tall batches, so both
 * splits run) and odd ones, every element against gemm_error_bound, on par.
 * Returns 0
 * when all pass, else -1 with the worst element in why; *worst gets the
 * largest error as a fraction of its bound. Allocates and frees its own
 * buffers (about 5 MB). `attnserve selftest` runs it for every precision on
 * every SIMD path; the service's start-up check of a reduced precision is
 * instead the model's own cosine against fp32 (server/ops/engine.c), which
 * needs the weights this does not. */
int gemm_selftest(gemm_precision p, const attn_parallel *par, double *worst, char *why,
                  size_t why_len);

/* ---- for the kernels of each precision ---------------------------------------
 * The fp32 epilogue pieces, so every precision rounds the same way after its
 * accumulators are in y. */

/* y = (x - mean) / sqrt(var + eps) * w + b over one row of n (may be in
 * place); also the encoder's embedding LayerNorm. */
void gemm_layernorm_row(float *y, const float *x, const float *w, const float *b, int n, float eps);

/* Rows [r0, r1) x columns [c0, c1) of y hold x·Wᵀ + b: applies the
 * activation, then adds the residual unless residual_done (it was folded in
 * before accumulating). Not the LayerNorm, which needs whole rows. */
void gemm_epilogue_block(const gemm_epilogue *epi, float *y, size_t ldy, int r0, int r1, int c0,
                         int c1, int residual_done);
/* The LayerNorm of rows [r0, r1) of y, each N wide (nothing without one). */
void gemm_epilogue_norm(const gemm_epilogue *epi, float *y, size_t ldy, int r0, int r1, int N);
/* The LayerNorm of all M rows of y as a pass of its own over par (nothing
 * without one): after a split by columns, where no task had whole rows. */
void gemm_epilogue_norm_split(const gemm_epilogue *epi, const attn_parallel *par, float *y,
                              size_t ldy, int M, int N);

/* [*lo, *hi): part i of n items cut into parts nearly equal parts, the split
 * of rows (or panels) among tasks. */
void gemm_split(int n, size_t parts, size_t i, int *lo, int *hi);

#endif

/* gemm.c — the precision dispatch of gemm.h and the fp32 path.
 *
 * fp32 has two kernels. Where the AVX-512 path is active at gemm_pack, the
 * weights are also packed into panels for gemm_f32_avx512.c's tile, which
 * gemm_panel.c drives (as it does bf16's) whenever that path is still
 * active at gemm_run: OpenBLAS's own choice of kernels cannot be relied on
 * there (Debian's 0.3.21 takes an Emerald Rapids for a Prescott and runs
 * SSE3 code at about a tenth of the FMA peak). Elsewhere fp32 runs
 * OpenBLAS's sgemm (one thread inside; the split is ours, over the caller's
 * pool) on the weights as PyTorch stores them, W (N, K) row-major, i.e.
 * sgemm(NoTrans, Trans): OpenBLAS packs its Wᵀ panels itself as it runs, so
 * that path needs the caller's weights.
 *
 * Split of the sgemm path. Tall problems (M >= 64 rows per worker) are
 * split by rows, so each sgemm stays large; short ones by output columns,
 * so a single short input still uses every core and each core streams only
 * its part of W. A LayerNorm epilogue needs whole rows: with a column split
 * it runs as a second pass over the (then small, cache-resident) output. */
#include "gemm.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gelu.h"
#include "simd.h"
#if defined(__x86_64__) || defined(__i386__)
#define ATTN_HAVE_GEMM_BF16 1
#define ATTN_HAVE_GEMM_F32  1
#include "gemm_bf16.h"
#include "gemm_f32.h"
#include "gemm_panel.h"
#endif
#ifdef ATTN_HAVE_GEMM_INT8
#include "gemm_int8.h"
#endif

struct gemm_weights {
    gemm_precision precision;
    int N, K;
    const float *w;    /* fp32: (N, K), the caller's */
    const float *bias; /* fp32: (N) or NULL, the caller's */
#ifdef ATTN_HAVE_GEMM_F32
    gemm_f32_weights *f32; /* fp32 packed, when AVX-512 was active at gemm_pack */
#endif
#ifdef ATTN_HAVE_GEMM_BF16
    gemm_bf16_weights *bf16;
#endif
#ifdef ATTN_HAVE_GEMM_INT8
    gemm_int8_weights *int8;
#endif
};

static const char *const names[GEMM_NPRECISIONS] = {"fp32", "bf16", "int8", "fp16", "tf32"};

int gemm_precision_gpu_only(gemm_precision p) {
    return p == GEMM_FP16 || p == GEMM_TF32;
}

const char *gemm_precision_name(gemm_precision p) {
    return (int)p >= 0 && p < GEMM_NPRECISIONS ? names[p] : "unknown";
}

int gemm_precision_parse(const char *name) {
    for (int i = 0; name && i < GEMM_NPRECISIONS; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

const char *gemm_unsupported(gemm_precision p) {
    switch (p) {
    case GEMM_FP32:
        return NULL;
    case GEMM_BF16:
        /* The kernels are AVX512-BF16 (vdpbf16ps); every CPU with AMX-BF16
         * has it too, so AMX alone would not run them. */
#ifdef ATTN_HAVE_GEMM_BF16
        if (attn_cpu_has(ATTN_CPU_AVX512_BF16))
            return NULL;
        return attn_simd_active() < ATTN_SIMD_AVX512
                   ? "no AVX512_BF16: the avx512 path is not active"
                   : "no AVX512_BF16 on this CPU";
#else
        return "bf16 kernels not built (not x86-64)";
#endif
    case GEMM_INT8:
#ifdef ATTN_HAVE_GEMM_INT8
        if (attn_cpu_has(ATTN_CPU_AVX512_VNNI))
            return NULL;
        return attn_simd_active() < ATTN_SIMD_AVX512
                   ? "no AVX512_VNNI: the avx512 path is not active"
                   : "no AVX512_VNNI on this CPU";
#else
        return "int8 kernels not built";
#endif
    case GEMM_FP16:
        return "fp16 is a GPU precision (engine: cuda); the cpu engine runs fp32, bf16 and int8";
    case GEMM_TF32:
        return "tf32 is a GPU precision (engine: cuda: fp32 with TF32 tensor-core GEMMs); the cpu "
               "engine runs fp32, bf16 and int8";
    default:
        return "unknown precision";
    }
}

static int fail(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int gemm_pack(gemm_precision p, const float *w, const float *bias, int N, int K, gemm_weights **out,
              char *err, size_t err_len) {
    return gemm_pack_smoothed(p, w, bias, NULL, N, K, out, err, err_len);
}

int gemm_pack_smoothed(gemm_precision p, const float *w, const float *bias, const float *smooth,
                       int N, int K, gemm_weights **out, char *err, size_t err_len) {
    *out = NULL;
    if (!w || N < 1 || K < 1)
        return fail(err, err_len, "gemm_pack: no weights, or a %d x %d shape", N, K);
    const char *why = gemm_unsupported(p);
    if (why)
        return fail(err, err_len, "precision %s: %s", gemm_precision_name(p), why);
    gemm_weights *g = calloc(1, sizeof *g);
    if (!g)
        return fail(err, err_len, "out of memory");
    *g = (gemm_weights){.precision = p, .N = N, .K = K};
    int rc = 0;
    switch (p) {
    case GEMM_FP32:
        g->w = w;
        g->bias = bias;
#ifdef ATTN_HAVE_GEMM_F32
        /* The reference above stays for the sgemm path, which runs if the
         * AVX-512 path is forced off later. */
        if (attn_simd_active() == ATTN_SIMD_AVX512)
            rc = gemm_f32_pack(w, bias, N, K, &g->f32, err, err_len);
#endif
        break;
#ifdef ATTN_HAVE_GEMM_BF16
    case GEMM_BF16:
        rc = gemm_bf16_pack(w, bias, N, K, &g->bf16, err, err_len);
        break;
#endif
    case GEMM_INT8:
#ifdef ATTN_HAVE_GEMM_INT8
        rc = gemm_int8_pack_smoothed(w, bias, smooth, N, K, &g->int8, err, err_len);
#endif
        break;
    default:
        break;
    }
    if (rc) {
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void gemm_free(gemm_weights *w) {
    if (!w)
        return;
#ifdef ATTN_HAVE_GEMM_BF16
    gemm_bf16_free(w->bf16);
#endif
#ifdef ATTN_HAVE_GEMM_F32
    gemm_f32_free(w->f32);
#endif
#ifdef ATTN_HAVE_GEMM_INT8
    gemm_int8_free(w->int8);
#endif
    free(w);
}

gemm_precision gemm_weights_precision(const gemm_weights *w) {
    return w->precision;
}
int gemm_n(const gemm_weights *w) {
    return w->N;
}
int gemm_k(const gemm_weights *w) {
    return w->K;
}

size_t gemm_weights_bytes(const gemm_weights *w) {
    switch (w->precision) {
#ifdef ATTN_HAVE_GEMM_F32
    case GEMM_FP32:
        return gemm_f32_bytes(w->f32);
#endif
#ifdef ATTN_HAVE_GEMM_BF16
    case GEMM_BF16:
        return gemm_bf16_bytes(w->bf16);
#endif
#ifdef ATTN_HAVE_GEMM_INT8
    case GEMM_INT8:
        return gemm_int8_bytes(w->int8);
#endif
    default:
        return 0;
    }
}

size_t gemm_scratch_bytes(const gemm_weights *w, int max_rows, int nthreads) {
    (void)max_rows;
    (void)nthreads;
    switch (w->precision) {
#ifdef ATTN_HAVE_GEMM_BF16
    case GEMM_BF16:
        return gemm_panel_scratch_bytes(gemm_bf16_kernel(w->bf16), nthreads);
#endif
#ifdef ATTN_HAVE_GEMM_INT8
    case GEMM_INT8:
        return gemm_int8_scratch_bytes(w->int8, max_rows, nthreads);
#endif
    default:
        return 0;
    }
}

/* ---- epilogues shared by every precision ------------------------------------- */

/* The statistics are accumulated in double so they do not depend on n; in
 * LANES independent partial sums, so the adds pipeline instead of waiting on
 * one another (the order of the double sums can move a float result by one
 * rounding, rarely, well within the bound the tests hold it to). */
enum { LN_LANES = 8 };

static double lane_total(const double *s, double tail) {
    for (int j = 0; j < LN_LANES; j++)
        tail += s[j];
    return tail;
}

static void layernorm_row_portable(float *y, const float *x, const float *w, const float *b, int n,
                                   float eps) {
    const int nl = n - n % LN_LANES;
    double s[LN_LANES] = {0}, tail = 0.0;
    for (int i = 0; i < nl; i += LN_LANES)
        for (int j = 0; j < LN_LANES; j++)
            s[j] += x[i + j];
    for (int i = nl; i < n; i++)
        tail += x[i];
    const double mean = lane_total(s, tail) / n;
    double v[LN_LANES] = {0};
    tail = 0.0;
    for (int i = 0; i < nl; i += LN_LANES)
        for (int j = 0; j < LN_LANES; j++)
            v[j] += (x[i + j] - mean) * (x[i + j] - mean);
    for (int i = nl; i < n; i++)
        tail += (x[i] - mean) * (x[i] - mean);
    const float rstd = (float)(1.0 / sqrt(lane_total(v, tail) / n + eps));
    for (int i = 0; i < n; i++)
        y[i] = (float)(x[i] - mean) * rstd * w[i] + b[i];
}

#if defined(__x86_64__) || defined(__i386__)
void gemm_layernorm_row_avx512(float *y, const float *x, const float *w, const float *b, int n,
                               float eps);
#endif

void gemm_layernorm_row(float *y, const float *x, const float *w, const float *b, int n,
                        float eps) {
#if defined(__x86_64__) || defined(__i386__)
    if (attn_simd_active() == ATTN_SIMD_AVX512) {
        gemm_layernorm_row_avx512(y, x, w, b, n, eps);
        return;
    }
#endif
    layernorm_row_portable(y, x, w, b, n, eps);
}

void gemm_epilogue_block(const gemm_epilogue *epi, float *y, size_t ldy, int r0, int r1, int c0,
                         int c1, int residual_done) {
    if (!epi || r0 >= r1 || c0 >= c1)
        return;
    float *y0 = y + (size_t)r0 * ldy + c0;
    if (epi->act == GEMM_ACT_GELU)
        bert_gelu(y0, (size_t)(r1 - r0), (size_t)(c1 - c0), ldy);
    if (epi->residual && !residual_done)
        for (int r = r0; r < r1; r++) {
            float *yr = y + (size_t)r * ldy;
            const float *res = epi->residual + (size_t)r * epi->ld_residual;
            for (int c = c0; c < c1; c++)
                yr[c] += res[c];
        }
}

void gemm_epilogue_norm(const gemm_epilogue *epi, float *y, size_t ldy, int r0, int r1, int N) {
    if (!epi || !epi->ln_w)
        return;
    for (int r = r0; r < r1; r++)
        gemm_layernorm_row(y + (size_t)r * ldy, y + (size_t)r * ldy, epi->ln_w, epi->ln_b, N,
                           epi->ln_eps);
}

void gemm_split(int n, size_t parts, size_t i, int *lo, int *hi) {
    *lo = (int)((size_t)n * i / parts);
    *hi = (int)((size_t)n * (i + 1) / parts);
}

typedef struct norm_ctx {
    const gemm_epilogue *epi;
    float *y;
    size_t ldy;
    int M, N;
    size_t ntasks;
} norm_ctx;

static void norm_task(void *arg, size_t task, int worker) {
    (void)worker;
    const norm_ctx *c = arg;
    int r0, r1;
    gemm_split(c->M, c->ntasks, task, &r0, &r1);
    gemm_epilogue_norm(c->epi, c->y, c->ldy, r0, r1, c->N);
}

void gemm_epilogue_norm_split(const gemm_epilogue *epi, const attn_parallel *par, float *y,
                              size_t ldy, int M, int N) {
    if (!epi || !epi->ln_w || M < 1)
        return;
    const size_t nt = (size_t)par->nthreads;
    norm_ctx c = {.epi = epi, .y = y, .ldy = ldy, .M = M, .N = N};
    c.ntasks = (size_t)M < nt ? (size_t)M : nt;
    par->parallel_for(par->impl, c.ntasks, norm_task, &c);
}

/* ---- fp32 ------------------------------------------------------------------------ */

typedef struct fp32_ctx {
    const gemm_weights *w;
    const gemm_epilogue *epi;
    const float *x;
    size_t ldx;
    float *y;
    size_t ldy;
    int M;
    size_t ntasks;
    int by_rows; /* 1: tasks are row blocks; 0: column blocks */
    int fold;    /* the residual is added while initialising y */
} fp32_ctx;

static void fp32_task(void *arg, size_t task, int worker) {
    (void)worker;
    const fp32_ctx *c = arg;
    const int N = c->w->N, K = c->w->K;
    int r0 = 0, r1 = c->M, c0 = 0, c1 = N;
    if (c->by_rows)
        gemm_split(c->M, c->ntasks, task, &r0, &r1);
    else {
        /* Column blocks are whole multiples of 16 floats (one cache line). */
        const int step = (int)(((size_t)N + c->ntasks - 1) / c->ntasks + 15) / 16 * 16;
        c0 = (int)task * step < N ? (int)task * step : N;
        c1 = c0 + step < N ? c0 + step : N;
    }
    if (r0 >= r1 || c0 >= c1)
        return;
    /* The bias (and, when nothing comes between, the residual) goes in
     * first and the GEMM accumulates onto it (beta = 1): no pass is spent
     * zeroing the output or adding them afterwards. A residual aliasing y
     * is read here, before the GEMM overwrites it. */
    const float *b = c->w->bias;
    for (int r = r0; r < r1; r++) {
        float *yr = c->y + (size_t)r * c->ldy;
        if (c->fold) {
            const float *res = c->epi->residual + (size_t)r * c->epi->ld_residual;
            for (int j = c0; j < c1; j++)
                yr[j] = res[j] + (b ? b[j] : 0.0f);
        } else if (b)
            memcpy(yr + c0, b + c0, (size_t)(c1 - c0) * sizeof(float));
        else
            memset(yr + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, c1 - c0, K, 1.0f,
                c->x + (size_t)r0 * c->ldx, (int)c->ldx, c->w->w + (size_t)c0 * K, K, 1.0f,
                c->y + (size_t)r0 * c->ldy + c0, (int)c->ldy);
    gemm_epilogue_block(c->epi, c->y, c->ldy, r0, r1, c0, c1, c->fold);
    if (c->by_rows)
        gemm_epilogue_norm(c->epi, c->y, c->ldy, r0, r1, N);
}

static void fp32_run(const gemm_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                     float *y, size_t ldy, int M, const gemm_epilogue *epi) {
    const size_t nt = (size_t)par->nthreads, N = (size_t)w->N;
    fp32_ctx c = {.w = w, .epi = epi, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .M = M};
    c.by_rows = (size_t)M >= 64 * nt;
    c.ntasks = c.by_rows ? nt : (N / 16 < nt ? (N + 15) / 16 : nt);
    if (c.ntasks < 1)
        c.ntasks = 1;
    c.fold = epi && epi->residual && epi->act == GEMM_ACT_NONE;
    par->parallel_for(par->impl, c.ntasks, fp32_task, &c);
    if (!c.by_rows)
        gemm_epilogue_norm_split(epi, par, y, ldy, M, w->N);
}

void gemm_run(const gemm_weights *w, const attn_parallel *par, const float *x, size_t ldx, float *y,
              size_t ldy, int M, const gemm_epilogue *epi, void *scratch) {
    if (M < 1)
        return;
    switch (w->precision) {
    case GEMM_FP32:
#ifdef ATTN_HAVE_GEMM_F32
        if (w->f32 && attn_simd_active() == ATTN_SIMD_AVX512) {
            gemm_panel_run(gemm_f32_kernel(w->f32), par, x, ldx, y, ldy, M, epi, NULL);
            break;
        }
#endif
        fp32_run(w, par, x, ldx, y, ldy, M, epi);
        break;
#ifdef ATTN_HAVE_GEMM_BF16
    case GEMM_BF16:
        gemm_panel_run(gemm_bf16_kernel(w->bf16), par, x, ldx, y, ldy, M, epi, scratch);
        break;
#endif
#ifdef ATTN_HAVE_GEMM_INT8
    case GEMM_INT8:
        gemm_int8_run(w->int8, par, x, ldx, y, ldy, M, epi, scratch);
        break;
#endif
    default:
        break;
    }
    (void)scratch;
}

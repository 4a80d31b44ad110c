/* gemm_f32_avx512.c — the fp32 linear layers on AVX-512 (gemm_f32.h):
 * weights packed once into panels, FMA tiles that start from the bias, and
 * the epilogue applied to each tile while it is in L1. The same structure
 * as the bf16 kernel (gemm_avx512bf16.c), without the conversions.
 *
 * Packing. W (N, K) is cut into panels of NR = 64 output columns; in a panel
 * row k holds w[n][k] for n = 0..63, the B operand of four FMAs. N is padded
 * to a whole panel with zeros, so only the stores of the last panel are
 * masked.
 *
 * Micro-kernel. MR = 6 rows by 4 vectors of 16 columns: 24 accumulators, 4
 * weight vectors and one broadcast of x[i][k], 29 of the 32 zmm registers;
 * per k it issues 24 FMAs for 4 vector loads and 6 scalar broadcasts, well
 * within two loads per cycle. The accumulators start at zero and the bias
 * is added once at the store: started from the bias, the sum would round
 * the bias K times over, which gemm_error_bound's fp32 term (K roundings of
 * Σ|x·w|, then one of |y|) does not allow at small K. Measured on an Emerald Rapids core against
 * its register-only FMA peak (one thread, M = 384 and 8192): 6 x 64, 8 x 48
 * and 14 x 32 all ran at 83-91 % (within the noise of a shared machine),
 * 12 x 32 at about 70 % and 4 x 96 / 7 x 48 at about 65 %; 6 x 64 keeps the
 * panels of the bf16 kernel, so both split the same way. Blocking K so
 * that a panel's slice stays in L1 measured no better: the hardware
 * prefetchers stream a panel (96 KB at K = 384) from L2 fast enough.
 *
 * Activations are read in place: a block of CHUNK rows (590 KB at K = 1536)
 * stays in L2 while every panel of the task passes over it. */
#include "gemm_f32.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

enum { NR = 64, NV = NR / 16, MR = 6, CHUNK = 96 };

struct gemm_f32_weights {
    int N, K;
    int npanels; /* ceil(N / NR) */
    float *w;    /* [npanels][K][NR] */
    float *bias; /* [npanels * NR], zero where absent */
    size_t bytes;
};

static int fail(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int gemm_f32_pack(const float *w, const float *bias, int N, int K, gemm_f32_weights **out,
                  char *err, size_t err_len) {
    *out = NULL;
    gemm_f32_weights *g = calloc(1, sizeof *g);
    if (!g)
        return fail(err, err_len, "out of memory");
    g->N = N;
    g->K = K;
    g->npanels = (N + NR - 1) / NR;
    const size_t nb = (size_t)g->npanels * NR, words = nb * (size_t)K;
    g->bytes = (words + nb) * sizeof(float);
    g->w = aligned_alloc(64, words * sizeof(float));
    g->bias = aligned_alloc(64, nb * sizeof(float));
    if (!g->w || !g->bias) {
        const size_t bytes = g->bytes;
        gemm_f32_free(g);
        return fail(err, err_len, "cannot allocate %zu bytes of packed fp32 weights", bytes);
    }
    for (size_t j = 0; j < nb; j++)
        g->bias[j] = bias && j < (size_t)N ? bias[j] : 0.0f;
    for (int p = 0; p < g->npanels; p++)
        for (int k = 0; k < K; k++) {
            float *dst = g->w + ((size_t)p * K + k) * NR;
            for (int j = 0; j < NR; j++) {
                const int n = p * NR + j;
                dst[j] = n < N ? w[(size_t)n * K + k] : 0.0f;
            }
        }
    *out = g;
    return 0;
}

void gemm_f32_free(gemm_f32_weights *w) {
    if (!w)
        return;
    free(w->w);
    free(w->bias);
    free(w);
}

size_t gemm_f32_bytes(const gemm_f32_weights *w) {
    return w ? w->bytes : 0;
}

typedef struct tile_args {
    const float *x;    /* (mr, K) at row stride ldx */
    const float *b;    /* the panel: (K, NR) */
    const float *bias; /* (NR) the panel's */
    float *y;          /* (mr, cols) at row stride ldy */
    const float *res;  /* NULL, or (mr, cols) at row stride ldr, added at the store */
    size_t ldx, ldy, ldr;
    int K, cols;
} tile_args;

static inline __attribute__((always_inline)) void tile(const int mr, const int nv,
                                                       const tile_args *t) {
    __m512 acc[MR][NV];
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) acc[i][j] = _mm512_setzero_ps();
    const float *b = t->b, *x = t->x;
    const size_t ldx = t->ldx;
    for (int k = 0; k < t->K; k++, b += NR) {
        __m512 bv[NV];
        _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) bv[j] = _mm512_load_ps(b + 16 * j);
        _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) {
            const __m512 av = _mm512_set1_ps(x[(size_t)i * ldx + k]);
            _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) acc[i][j] =
                _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) {
        const int left = t->cols - 16 * j;
        const __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 v = _mm512_add_ps(acc[i][j], _mm512_load_ps(t->bias + 16 * j));
        /* Read just before the store of the same elements, so a residual
         * aliasing y is still the residual here. */
        if (t->res)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->res + i * t->ldr + 16 * j));
        _mm512_mask_storeu_ps(t->y + i * t->ldy + 16 * j, m, v);
    }
}

typedef void (*tile_fn)(const tile_args *t);
#define TILE_FN(mr, nv)                                                                            \
    static void tile_##mr##_##nv(const tile_args *t) {                                             \
        tile(mr, nv, t);                                                                           \
    }
/* One specialisation per tile shape, so every loop bound in tile() is a
 * constant and the accumulators stay in registers. */
// clang-format off
#define TILE_ROW(mr) TILE_FN(mr, 1) TILE_FN(mr, 2) TILE_FN(mr, 3) TILE_FN(mr, 4)
TILE_ROW(1) TILE_ROW(2) TILE_ROW(3) TILE_ROW(4) TILE_ROW(5) TILE_ROW(6)
#define TILE_REF(mr) {tile_##mr##_1, tile_##mr##_2, tile_##mr##_3, tile_##mr##_4}
static const tile_fn tiles[MR][NV] = {TILE_REF(1), TILE_REF(2), TILE_REF(3),
                                      TILE_REF(4), TILE_REF(5), TILE_REF(6)};
// clang-format on

typedef struct run_ctx {
    const gemm_f32_weights *w;
    const gemm_epilogue *epi;
    const float *x;
    size_t ldx;
    float *y;
    size_t ldy;
    int M;
    size_t ntasks;
    int by_rows;
    int fold; /* the residual is added at the tile's store */
} run_ctx;

static void block(int n, size_t ntasks, size_t i, int *lo, int *hi) {
    *lo = (int)((size_t)n * i / ntasks);
    *hi = (int)((size_t)n * (i + 1) / ntasks);
}

static void run_task(void *arg, size_t task, int worker) {
    (void)worker;
    const run_ctx *c = arg;
    const gemm_f32_weights *w = c->w;
    int r0 = 0, r1 = c->M, p0 = 0, p1 = w->npanels;
    if (c->by_rows)
        block(c->M, c->ntasks, task, &r0, &r1);
    else
        block(w->npanels, c->ntasks, task, &p0, &p1);
    const gemm_epilogue *epi = c->epi;
    for (int rc = r0; rc < r1; rc += CHUNK) {
        const int rows = r1 - rc < CHUNK ? r1 - rc : CHUNK;
        for (int p = p0; p < p1; p++) {
            const int n0 = p * NR, cols = w->N - n0 < NR ? w->N - n0 : NR;
            tile_args t = {.b = w->w + (size_t)p * w->K * NR,
                           .bias = w->bias + n0,
                           .ldx = c->ldx,
                           .ldy = c->ldy,
                           .ldr = epi ? epi->ld_residual : 0,
                           .K = w->K,
                           .cols = cols};
            const int nv = (cols + 15) / 16;
            for (int i = 0; i < rows; i += MR) {
                const int mr = rows - i < MR ? rows - i : MR;
                t.x = c->x + (size_t)(rc + i) * c->ldx;
                t.y = c->y + (size_t)(rc + i) * c->ldy + n0;
                t.res = c->fold ? epi->residual + (size_t)(rc + i) * epi->ld_residual + n0 : NULL;
                tiles[mr - 1][nv - 1](&t);
                gemm_epilogue_block(epi, c->y, c->ldy, rc + i, rc + i + mr, n0, n0 + cols, c->fold);
            }
        }
        if (c->by_rows)
            gemm_epilogue_norm(epi, c->y, c->ldy, rc, rc + rows, w->N);
    }
}

static void norm_task(void *arg, size_t task, int worker) {
    (void)worker;
    const run_ctx *c = arg;
    int r0, r1;
    block(c->M, c->ntasks, task, &r0, &r1);
    gemm_epilogue_norm(c->epi, c->y, c->ldy, r0, r1, c->w->N);
}

void gemm_f32_run(const gemm_f32_weights *w, const attn_parallel *par, const float *x, size_t ldx,
                  float *y, size_t ldy, int M, const gemm_epilogue *epi) {
    const size_t nt = (size_t)par->nthreads;
    run_ctx c = {.w = w, .epi = epi, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .M = M};
    /* Short batches split the panels, so every core works and each streams
     * only its share of the weights. */
    c.by_rows = (size_t)M >= 32 * nt || (size_t)w->npanels < nt;
    c.ntasks = nt;
    c.fold = epi && epi->residual && epi->act == GEMM_ACT_NONE;
    par->parallel_for(par->impl, c.ntasks, run_task, &c);
    if (!c.by_rows && epi && epi->ln_w) {
        c.ntasks = (size_t)M < nt ? (size_t)M : nt;
        par->parallel_for(par->impl, c.ntasks, norm_task, &c);
    }
}
#endif

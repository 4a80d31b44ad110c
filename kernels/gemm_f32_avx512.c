/* gemm_f32_avx512.c — the fp32 linear layers on AVX-512 (gemm_f32.h):
 * weights packed once into panels and the FMA tile; gemm_panel.c drives
 * them (split, loops, epilogue), as it does the bf16 kernel's
 * (gemm_avx512bf16.c), which differs only in converting the activations.
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
 * Activations are read in place: a chunk of CHUNK rows (590 KB at K = 1536)
 * stays in L2 while every panel of the task passes over it.
 *
 * The tile takes the driver's prefetch hint (gemm_panel.c): one line of the
 * task's next panel a step, to L2 (T1: the panel is streamed, not kept in
 * L1), which fits in the spare load slots (10 loads a step against two a
 * cycle); issuing up to four a step, so that sweeps of one to three tiles
 * would cover whole panels too, measured slower at 64 rows and no better
 * at 12 and 32. */
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
    gemm_panel_kernel kernel; /* the above, for gemm_panel_run */
};

static const void *prepare(const gemm_panel_kernel *k, const float *x, size_t ldx, int rows,
                           void *buf, size_t *lda);
static void run_tile(const gemm_panel_tile *t);

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
    g->kernel = (gemm_panel_kernel){.N = N,
                                    .npanels = g->npanels,
                                    .nr = NR,
                                    .mr = MR,
                                    .chunk = CHUNK,
                                    .depth = K,
                                    .panels = g->w,
                                    .panel_bytes = (size_t)K * NR * sizeof(float),
                                    .bias = g->bias,
                                    .impl = g,
                                    .prepare = prepare,
                                    .tile = run_tile};
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

const gemm_panel_kernel *gemm_f32_kernel(const gemm_f32_weights *w) {
    return &w->kernel;
}

/* The activations need nothing: the tiles read them in place. */
static const void *prepare(const gemm_panel_kernel *k, const float *x, size_t ldx, int rows,
                           void *buf, size_t *lda) {
    (void)k, (void)rows, (void)buf;
    *lda = ldx * sizeof(float);
    return x;
}

/* t->a: (mr, K) floats; t->b: the panel, (K, NR). */
static inline __attribute__((always_inline)) void tile(const int mr, const int nv,
                                                       const gemm_panel_tile *t) {
    __m512 acc[MR][NV];
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) acc[i][j] = _mm512_setzero_ps();
    const float *b = t->b, *x = t->a;
    const size_t ldx = t->lda / sizeof(float);
    const char *pf = t->pf;
    const int pf_lines = t->pf_lines;
    for (int k = 0; k < t->depth; k++, b += NR) {
        if (k < pf_lines)
            _mm_prefetch(pf + (size_t)k * GEMM_PANEL_LINE, _MM_HINT_T1);
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

typedef void (*tile_fn)(const gemm_panel_tile *t);
#define TILE_FN(mr, nv)                                                                            \
    static void tile_##mr##_##nv(const gemm_panel_tile *t) {                                       \
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

static void run_tile(const gemm_panel_tile *t) {
    tiles[t->mr - 1][(t->cols + 15) / 16 - 1](t);
}
#endif

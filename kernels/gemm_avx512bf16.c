/* gemm_avx512bf16.c — the bf16 linear layers (gemm_bf16.h): weights packed
 * once in bf16, activations converted to bf16 on the fly, the vdpbf16ps tile
 * with fp32 accumulation; gemm_panel.c drives them (split, loops, and the
 * epilogue on each tile while it is in L1).
 *
 * Packing. W (N, K) is cut into panels of NR = 64 output columns; in a panel
 * the k-pairs come one after another, each as 64 32-bit words (w[n][k],
 * w[n][k+1]) for n = 0..63, which is exactly the B operand of four
 * vdpbf16ps. K is padded to even and N to a whole panel with zeros, so the
 * kernel never needs a k or load mask; only the stores of the last panel
 * are masked.
 *
 * Micro-kernel. MR = 6 rows by 4 vectors of 16 columns: 24 accumulators, 4
 * weight vectors and one broadcast of an activation pair, 29 of the 32 zmm
 * registers; per k-pair it issues 24 vdpbf16ps for 4 loads and 6 broadcasts.
 * The accumulators start at the bias. An activation chunk (CHUNK rows,
 * ≤ 300 KB in bf16 at K = 1536) is converted once into the worker's scratch
 * and stays in L2 while every panel of the task passes over it.
 *
 * The tile does not take the driver's prefetch hint, which the fp32 tile
 * does: a bf16 panel is half the bytes per FMA-equivalent, and the gain is
 * unmeasured on a CPU with AVX512_BF16. Taking it means two lines per
 * k-pair, as depth counts k. */
#include "gemm_bf16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NR = 64, NV = NR / 16, MR = 6, CHUNK = 96 };

struct gemm_bf16_weights {
    int N, K;
    int kp;      /* K rounded up to even */
    int npanels; /* ceil(N / NR) */
    uint32_t *w; /* [npanels][kp / 2][NR] bf16 pairs */
    float *bias; /* [npanels * NR], zero where absent */
    size_t bytes;
    gemm_panel_kernel kernel; /* the above, for gemm_panel_run */
};

static size_t chunk_bytes(const gemm_bf16_weights *w);
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

/* Round to nearest even, as vcvtne2ps2bf16 does (NaN stays NaN). */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

int gemm_bf16_pack(const float *w, const float *bias, int N, int K, gemm_bf16_weights **out,
                   char *err, size_t err_len) {
    *out = NULL;
    gemm_bf16_weights *g = calloc(1, sizeof *g);
    if (!g)
        return fail(err, err_len, "out of memory");
    g->N = N;
    g->K = K;
    g->kp = (K + 1) & ~1;
    g->npanels = (N + NR - 1) / NR;
    const size_t words = (size_t)g->npanels * (size_t)(g->kp / 2) * NR;
    const size_t nb = (size_t)g->npanels * NR;
    g->bytes = words * sizeof(uint32_t) + nb * sizeof(float);
    g->w = aligned_alloc(64, words * sizeof(uint32_t));
    g->bias = aligned_alloc(64, nb * sizeof(float));
    if (!g->w || !g->bias) {
        const size_t bytes = g->bytes;
        gemm_bf16_free(g);
        return fail(err, err_len, "cannot allocate %zu bytes of bf16 weights", bytes);
    }
    for (size_t j = 0; j < nb; j++)
        g->bias[j] = bias && j < (size_t)N ? bias[j] : 0.0f;
    for (int p = 0; p < g->npanels; p++)
        for (int k2 = 0; k2 < g->kp / 2; k2++) {
            uint32_t *dst = g->w + ((size_t)p * (g->kp / 2) + k2) * NR;
            for (int j = 0; j < NR; j++) {
                const int n = p * NR + j, k = 2 * k2;
                uint16_t lo = 0, hi = 0;
                if (n < N) {
                    lo = to_bf16(w[(size_t)n * K + k]);
                    hi = k + 1 < K ? to_bf16(w[(size_t)n * K + k + 1]) : 0;
                }
                dst[j] = (uint32_t)lo | (uint32_t)hi << 16;
            }
        }
    g->kernel = (gemm_panel_kernel){.N = N,
                                    .npanels = g->npanels,
                                    .nr = NR,
                                    .mr = MR,
                                    .chunk = CHUNK,
                                    .depth = g->kp,
                                    .panels = g->w,
                                    .panel_bytes = (size_t)(g->kp / 2) * NR * sizeof(uint32_t),
                                    .bias = g->bias,
                                    .scratch_per_worker = chunk_bytes(g),
                                    .impl = g,
                                    .prepare = prepare,
                                    .tile = run_tile};
    *out = g;
    return 0;
}

void gemm_bf16_free(gemm_bf16_weights *w) {
    if (!w)
        return;
    free(w->w);
    free(w->bias);
    free(w);
}

size_t gemm_bf16_bytes(const gemm_bf16_weights *w) {
    return w->bytes;
}

/* One CHUNK x kp block of bf16 activations per worker. */
static size_t chunk_bytes(const gemm_bf16_weights *w) {
    return ((size_t)CHUNK * (size_t)w->kp * sizeof(uint16_t) + 63) / 64 * 64;
}

const gemm_panel_kernel *gemm_bf16_kernel(const gemm_bf16_weights *w) {
    return &w->kernel;
}

void gemm_bf16_convert(uint16_t *dst, size_t kp, const float *src, size_t lds, int rows, int K) {
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * lds;
        uint16_t *d = dst + (size_t)r * kp;
        int k = 0;
        for (; k + 32 <= K; k += 32) {
            const __m512bh v =
                _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + k + 16), _mm512_loadu_ps(s + k));
            _mm512_storeu_si512(d + k, (__m512i)v);
        }
        if (k < K) {
            const int n = K - k;
            const __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
            const __mmask16 m1 = n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
            const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, s + k + 16),
                                                   _mm512_maskz_loadu_ps(m0, s + k));
            const __mmask32 m = n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1);
            _mm512_mask_storeu_epi16(d + k, m, (__m512i)v);
        }
        if (kp > (size_t)K)
            d[K] = 0;
    }
}

/* A chunk of activations converted into the worker's scratch, kp apart. */
static const void *prepare(const gemm_panel_kernel *k, const float *x, size_t ldx, int rows,
                           void *buf, size_t *lda) {
    const gemm_bf16_weights *w = k->impl;
    gemm_bf16_convert(buf, (size_t)w->kp, x, ldx, rows, w->K);
    *lda = (size_t)w->kp * sizeof(uint16_t);
    return buf;
}

/* t->a: (mr, kp) bf16 activations, kp apart; t->b: the panel, (kp / 2, NR)
 * pairs. */
static inline __attribute__((always_inline)) void tile(const int mr, const int nv,
                                                       const gemm_panel_tile *t) {
    __m512 acc[MR][NV];
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) acc[i][j] =
            _mm512_load_ps(t->bias + 16 * j);
    const uint32_t *b = t->b;
    const uint16_t *a = t->a;
    const int kp = t->depth;
    for (int k = 0; k < kp; k += 2, b += NR) {
        __m512bh bv[NV];
        _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) bv[j] =
            (__m512bh)_mm512_load_si512(b + 16 * j);
        _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, a + (size_t)i * kp + k, sizeof pair);
            const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) acc[i][j] =
                _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < nv; j++) {
        const int left = t->cols - 16 * j;
        const __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 v = acc[i][j];
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

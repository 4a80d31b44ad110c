/* gemm_int8_avx512.c — the AVX512-VNNI kernels of the int8 GEMM (see
 * gemm_int8.h): activation quantisation and the register-blocked vpdpbusd
 * loop with its dequantising store. Reached only after gemm.c has checked
 * CPUID (attn_cpu_has(ATTN_CPU_AVX512_VNNI)). */
#include "gemm_int8_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <float.h>
#include <immintrin.h>
#include <string.h>

/* x[k], times inv_smooth[k] when there is one (m: the lanes to load). */
static inline __m512 load_x(const float *x, const float *inv_smooth, int k, __mmask16 m) {
    const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
    return inv_smooth ? _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, inv_smooth + k)) : v;
}

void gemm_int8_quantize_rows_avx512(const float *x, size_t ldx, int K, const float *inv_smooth,
                                    int r0, int r1, uint8_t *qa, size_t lda, float *sx) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i shift = _mm512_set1_epi32(128);
    for (int r = r0; r < r1; r++) {
        const float *xr = x + (size_t)r * ldx;
        uint8_t *qr = qa + (size_t)r * lda;
        __m512 amax = _mm512_setzero_ps();
        int k = 0;
        for (; k + 16 <= K; k += 16)
            amax = _mm512_max_ps(amax, _mm512_and_ps(load_x(xr, inv_smooth, k, 0xffff), absmask));
        if (k < K) {
            const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
            amax = _mm512_max_ps(amax, _mm512_and_ps(load_x(xr, inv_smooth, k, m), absmask));
        }
        const float mx = _mm512_reduce_max_ps(amax);
        /* A row of zeros (or one too small to scale) quantises to zeros with
         * scale 0, so it contributes exactly the bias. */
        const float s = mx / 127.0f, inv = s >= FLT_MIN ? 127.0f / mx : 0.0f;
        sx[r] = inv > 0.0f ? s : 0.0f;
        const __m512 vinv = _mm512_set1_ps(inv);
        for (k = 0; k + 16 <= K; k += 16) {
            /* cvtps rounds to nearest even; |x·inv| ≤ 127 by construction. */
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(load_x(xr, inv_smooth, k, 0xffff), vinv));
            q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)),
                                 _mm512_set1_epi32(-127));
            _mm_storeu_si128((__m128i *)(qr + k), _mm512_cvtepi32_epi8(_mm512_add_epi32(q, shift)));
        }
        if (k < K) {
            const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(load_x(xr, inv_smooth, k, m), vinv));
            q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)),
                                 _mm512_set1_epi32(-127));
            _mm_mask_storeu_epi8(qr + k, m, _mm512_cvtepi32_epi8(_mm512_add_epi32(q, shift)));
        }
        /* Padding up to a whole group of 4 holds the shifted zero; the packed
         * weights there are zero too, so either alone would do. */
        for (int kk = K; kk < (K + 3) / 4 * 4; kk++)
            qr[kk] = 128;
    }
}

/* MR rows × NP panels of 16 columns: MR·NP zmm accumulators, NP weight
 * vectors and one broadcast — 6 × 4 uses 29 of the 32 registers. */
#define MR_MAX 6
#define NP_MAX 4

/* The accumulators are named variables, not an array: GCC keeps an array of
 * vectors in memory and then the loop measures the stack, not vpdpbusd. The
 * conditions on the constants mr and np vanish once inlined. */
#define ROWS(X, j) X(0, j) X(1, j) X(2, j) X(3, j) X(4, j) X(5, j)
#define ALL(X)     ROWS(X, 0) ROWS(X, 1) ROWS(X, 2) ROWS(X, 3)
#define DECL(i, j) __m512i acc##i##j = _mm512_setzero_si512();
#define LOADB(j)                                                                                   \
    __m512i b##j = _mm512_setzero_si512();                                                         \
    if (np > j)                                                                                    \
        b##j = _mm512_loadu_si512((const void *)(b + (size_t)j * pstride + (size_t)g * 64));
#define BCAST(i)                                                                                   \
    __m512i a##i = _mm512_setzero_si512();                                                         \
    if (mr > i) {                                                                                  \
        int32_t word;                                                                              \
        memcpy(&word, qa + (size_t)i * lda + (size_t)g * 4, 4);                                    \
        a##i = _mm512_set1_epi32(word);                                                            \
    }
#define STEP(i, j)                                                                                 \
    if (mr > i && np > j)                                                                          \
        dpbusd(&acc##i##j, a##i, b##j);
#define STORE(i, j)                                                                                \
    if (mr > i && np > j) {                                                                        \
        const int c = c0 + j * GEMM_INT8_NR;                                                       \
        const __m512i comp = _mm512_loadu_si512((const void *)(p->comp + c));                      \
        const __m512 sw = _mm512_loadu_ps(p->scale + c), bias = _mm512_loadu_ps(p->bias + c);      \
        const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc##i##j, comp));                    \
        _mm512_storeu_ps(out + (size_t)i * ldo + (size_t)(j * GEMM_INT8_NR),                       \
                         _mm512_fmadd_ps(f, _mm512_mul_ps(sw, _mm512_set1_ps(sx[i])), bias));      \
    }

/* acc += a·b by groups of 4 bytes. In asm with the sum tied to its register:
 * GCC 12 copies the sum through a fresh register, and the stack, on every
 * _mm512_dpbusd_epi32 in a loop this crowded. */
static inline __attribute__((always_inline)) void dpbusd(__m512i *acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(*acc) : "v"(a), "v"(b));
}

static inline __attribute__((always_inline)) void tile(const gemm_int8_weights *p,
                                                       const uint8_t *qa, size_t lda,
                                                       const float *sx, int c0, float *out,
                                                       size_t ldo, const int mr, const int np) {
    const size_t pstride = (size_t)p->K4 * 64;
    const int8_t *b = p->qw + (size_t)(c0 / GEMM_INT8_NR) * pstride;
    ALL(DECL)
    for (int g = 0; g < p->K4; g++) {
        /* 24 sums + 6 broadcasts + 1 weight vector = 31 registers: the
         * weight vectors are loaded one at a time, or they would spill. */
        BCAST(0)
        BCAST(1)
        BCAST(2)
        BCAST(3)
        BCAST(4)
        BCAST(5)
        LOADB(0) ROWS(STEP, 0) LOADB(1) ROWS(STEP, 1) LOADB(2) ROWS(STEP, 2) LOADB(3) ROWS(STEP, 3)
    }
    ALL(STORE)
}

typedef void (*tile_fn)(const gemm_int8_weights *, const uint8_t *, size_t, const float *, int,
                        float *, size_t);

#define TILE_FN(MR, NP)                                                                            \
    static void tile_##MR##_##NP(const gemm_int8_weights *p, const uint8_t *qa, size_t lda,        \
                                 const float *sx, int c0, float *out, size_t ldo) {                \
        tile(p, qa, lda, sx, c0, out, ldo, MR, NP);                                                \
    }
#define TILE_ROW(MR) TILE_FN(MR, 1) TILE_FN(MR, 2) TILE_FN(MR, 3) TILE_FN(MR, 4)
TILE_ROW(1)
TILE_ROW(2)
TILE_ROW(3)
TILE_ROW(4)
TILE_ROW(5)
TILE_ROW(6)
#define TILE_REF(MR)                                                                               \
    { tile_##MR##_1, tile_##MR##_2, tile_##MR##_3, tile_##MR##_4 }
static const tile_fn tiles[MR_MAX][NP_MAX] = {TILE_REF(1), TILE_REF(2), TILE_REF(3),
                                              TILE_REF(4), TILE_REF(5), TILE_REF(6)};

void gemm_int8_block_avx512(const gemm_int8_weights *p, const uint8_t *qa, size_t lda,
                            const float *sx, int rows, int c0, int c1, float *out, size_t ldo) {
    /* Column groups outside, rows inside: one group's weights (64 columns ×
     * K bytes) stay in L2 while every row block streams past them. */
    for (int c = c0; c < c1; c += NP_MAX * GEMM_INT8_NR) {
        int np = (c1 - c) / GEMM_INT8_NR;
        np = np > NP_MAX ? NP_MAX : np;
        for (int i = 0; i < rows; i += MR_MAX) {
            const int mr = rows - i < MR_MAX ? rows - i : MR_MAX;
            tiles[mr - 1][np - 1](p, qa + (size_t)i * lda, lda, sx + i, c,
                                  out + (size_t)i * ldo + (c - c0), ldo);
        }
    }
}
#endif

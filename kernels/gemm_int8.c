/* gemm_int8.c — packing, scratch and the parallel split of the int8 GEMM
 * (see gemm_int8.h); the vpdpbusd kernels are in gemm_int8_avx512.c. */
#include "gemm_int8_impl.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_panel.h"
#include "kernels/gelu.h"
#include "simd.h"

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* base + off bytes, as void * so that carving an arena into typed arrays
 * needs no cast between pointer types. */
static void *at(void *base, size_t off) {
    return (char *)base + off;
}

int gemm_int8_pack(const float *w, const float *bias, int N, int K, gemm_int8_weights **out,
                   char *err, size_t err_len) {
    return gemm_int8_pack_smoothed(w, bias, NULL, N, K, out, err, err_len);
}

int gemm_int8_pack_smoothed(const float *w, const float *bias, const float *smooth, int N, int K,
                            gemm_int8_weights **out, char *err, size_t err_len) {
    *out = NULL;
    /* gemm.c has checked already; packing for kernels that cannot run would
     * only defer the failure to the first forward. */
    if (!attn_cpu_has(ATTN_CPU_AVX512_VNNI)) {
        snprintf(err, err_len, "int8: no AVX512_VNNI on this CPU (or the SIMD path is lowered)");
        return -1;
    }
    if (N < 1 || K < 1) {
        snprintf(err, err_len, "int8: bad shape N=%d K=%d", N, K);
        return -1;
    }
    const int Np = (N + GEMM_INT8_NR - 1) / GEMM_INT8_NR * GEMM_INT8_NR, K4 = (K + 3) / 4;
    const size_t qw_bytes = align64((size_t)Np * K4 * 4), vec_bytes = align64((size_t)Np * 4);
    const size_t smooth_bytes = smooth ? align64((size_t)K * sizeof(float)) : 0;
    for (int k = 0; smooth && k < K; k++)
        if (!(smooth[k] > 0.0f) || !isfinite(smooth[k])) {
            snprintf(err, err_len, "int8: smoothing factor %d is %g, not a positive number", k,
                     (double)smooth[k]);
            return -1;
        }
    gemm_int8_weights *p = calloc(1, sizeof *p);
    void *block = NULL;
    if (!p || posix_memalign(&block, 64, qw_bytes + 3 * vec_bytes + smooth_bytes) != 0) {
        free(p);
        snprintf(err, err_len, "int8: out of memory packing %dx%d", N, K);
        return -1;
    }
    memset(block, 0, qw_bytes + 3 * vec_bytes + smooth_bytes);
    *p = (gemm_int8_weights){.N = N,
                             .K = K,
                             .Np = Np,
                             .K4 = K4,
                             .qw = block,
                             .scale = at(block, qw_bytes),
                             .comp = at(block, qw_bytes + vec_bytes),
                             .bias = at(block, qw_bytes + 2 * vec_bytes),
                             .inv_smooth = smooth ? at(block, qw_bytes + 3 * vec_bytes) : NULL,
                             .block = block,
                             .bytes = sizeof *p + qw_bytes + 3 * vec_bytes + smooth_bytes};
    for (int k = 0; smooth && k < K; k++)
        p->inv_smooth[k] = 1.0f / smooth[k];
    for (int n = 0; n < N; n++) {
        const float *wr = w + (size_t)n * K;
        float mx = 0.0f;
        for (int k = 0; k < K; k++)
            mx = fmaxf(mx, fabsf(smooth ? wr[k] * smooth[k] : wr[k]));
        /* A row too small for its scale to be a normal float (or all zero)
         * quantises to zeros with scale 0: 127/mx would overflow. */
        const float s = mx / 127.0f, inv = s >= FLT_MIN ? 127.0f / mx : 0.0f;
        p->scale[n] = inv > 0.0f ? s : 0.0f;
        int32_t sum = 0;
        int8_t *panel = p->qw + (size_t)(n / GEMM_INT8_NR) * K4 * 64 + (n % GEMM_INT8_NR) * 4;
        for (int k = 0; k < K; k++) {
            float q = nearbyintf((smooth ? wr[k] * smooth[k] : wr[k]) * inv);
            q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
            panel[(size_t)(k / 4) * 64 + k % 4] = (int8_t)q;
            sum += (int32_t)q;
        }
        p->comp[n] = 128 * sum;
        p->bias[n] = bias ? bias[n] : 0.0f;
    }
    *out = p;
    return 0;
}

void gemm_int8_free(gemm_int8_weights *p) {
    if (!p)
        return;
    free(p->block);
    free(p);
}

size_t gemm_int8_bytes(const gemm_int8_weights *w) {
    return w->bytes;
}

/* Rows a worker turns into fp32 at a time before its epilogue: 12 rows of
 * 1536 floats (72 KiB) stay in L2 between the GEMM and the epilogue. */
#define CHUNK_ROWS 12

static size_t qa_stride(const gemm_int8_weights *p) {
    return align64((size_t)p->K4 * 4);
}

/* Scratch: the quantised rows and their scales for all M rows (shared: each
 * row is written by one task), then one fp32 row buffer per worker. */
static size_t rowbuf_bytes(const gemm_int8_weights *p) {
    return align64((size_t)CHUNK_ROWS * p->Np * sizeof(float));
}

size_t gemm_int8_scratch_bytes(const gemm_int8_weights *p, int max_rows, int nthreads) {
    const size_t rows = max_rows > 0 ? (size_t)max_rows : 0;
    const size_t workers = nthreads > 0 ? (size_t)nthreads : 1;
    return 64 + rows * qa_stride(p) + align64(rows * sizeof(float)) + workers * rowbuf_bytes(p);
}

typedef struct int8_run {
    const gemm_int8_weights *p;
    const float *x;
    size_t ldx;
    float *y;
    size_t ldy;
    int M;
    const gemm_epilogue *epi;
    uint8_t *qa;
    size_t lda;
    float *sx;
    void *rowbufs;
    size_t ntasks;
    int by_rows;
} int8_run;

/* y row r, columns [c0, c0 + n) = epilogue(v): v holds x·Wᵀ + b already. The
 * residual is read before y is written, so it may alias y. */
static void epilogue_row(const int8_run *c, float *v, int r, int c0, int n) {
    const gemm_epilogue *e = c->epi;
    float *yr = c->y + (size_t)r * c->ldy + c0;
    if (e && e->act == GEMM_ACT_GELU)
        bert_gelu(v, 1, (size_t)n, (size_t)n);
    if (e && e->residual) {
        const float *res = e->residual + (size_t)r * e->ld_residual + c0;
        for (int j = 0; j < n; j++)
            v[j] += res[j];
    }
    if (e && e->ln_w) {
        /* The fp32 path's LayerNorm, so every precision rounds it alike. */
        gemm_layernorm_row(yr, v, e->ln_w, e->ln_b, n, e->ln_eps);
        return;
    }
    memcpy(yr, v, (size_t)n * sizeof(float));
}

static void block_range(size_t n, size_t ntasks, size_t i, size_t *lo, size_t *hi) {
    *lo = n * i / ntasks;
    *hi = n * (i + 1) / ntasks;
}

static void int8_task(void *arg, size_t task, int worker) {
    const int8_run *c = arg;
    const gemm_int8_weights *p = c->p;
    size_t r0 = 0, r1 = (size_t)c->M;
    int c0 = 0, c1 = p->Np;
    if (c->by_rows) {
        block_range((size_t)c->M, c->ntasks, task, &r0, &r1);
        if (r0 == r1)
            return;
        gemm_int8_quantize_rows_avx512(c->x, c->ldx, p->K, p->inv_smooth, (int)r0, (int)r1, c->qa,
                                       c->lda, c->sx);
    } else {
        /* Column blocks are whole groups of 64 channels, the kernel's width. */
        const int groups = (p->Np + 63) / 64;
        size_t g0, g1;
        block_range((size_t)groups, c->ntasks, task, &g0, &g1);
        c0 = (int)g0 * 64;
        c1 = (int)g1 * 64 < p->Np ? (int)g1 * 64 : p->Np;
        if (c0 >= c1)
            return;
    }
    float *buf = at(c->rowbufs, (size_t)worker * rowbuf_bytes(p));
    const int width = c1 - c0, valid = (c1 < p->N ? c1 : p->N) - c0;
    for (size_t r = r0; r < r1; r += CHUNK_ROWS) {
        const int rows = r1 - r < CHUNK_ROWS ? (int)(r1 - r) : CHUNK_ROWS;
        gemm_int8_block_avx512(p, c->qa + r * c->lda, c->lda, c->sx + r, rows, c0, c1, buf,
                               (size_t)width);
        for (int i = 0; i < rows; i++)
            epilogue_row(c, buf + (size_t)i * width, (int)r + i, c0, valid);
    }
}

void gemm_int8_run(const gemm_int8_weights *p, const attn_parallel *par, const float *x, size_t ldx,
                   float *y, size_t ldy, int M, const gemm_epilogue *epi, void *scratch) {
    if (M <= 0)
        return;
    void *s = at(scratch, (64 - (uintptr_t)scratch % 64) % 64);
    int8_run c = {.p = p,
                  .x = x,
                  .ldx = ldx,
                  .y = y,
                  .ldy = ldy,
                  .M = M,
                  .epi = epi,
                  .qa = s,
                  .lda = qa_stride(p)};
    c.sx = at(s, (size_t)M * c.lda);
    c.rowbufs = at(s, (size_t)M * c.lda + align64((size_t)M * sizeof(float)));
    /* As the fp32 path: tall batches split by token rows, so each task's
     * GEMM stays large and owns whole rows (which LayerNorm needs); short
     * ones split the output channels, so every core works and streams only
     * its share of the weights. Then the few rows are quantised once, here. */
    const size_t nt = (size_t)par->nthreads;
    const int has_ln = epi && epi->ln_w;
    c.by_rows = has_ln || (size_t)M >= 64 * nt;
    if (c.by_rows) {
        c.ntasks = (size_t)gemm_row_blocks(M, par->nthreads);
    } else {
        const size_t groups = (size_t)(p->Np + 63) / 64;
        c.ntasks = groups < nt ? groups : nt;
        gemm_int8_quantize_rows_avx512(x, ldx, p->K, p->inv_smooth, 0, M, c.qa, c.lda, c.sx);
    }
    if (c.ntasks <= 1)
        int8_task(&c, 0, 0);
    else
        par->parallel_for(par->impl, c.ntasks, int8_task, &c);
}

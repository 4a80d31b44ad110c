/* test_gemm.c — kernels/gemm.h against a float64 reference, for every
 * precision this CPU can run, on the model's shapes and odd ones, split by
 * rows and by columns, with every epilogue.
 *
 * Error bounds per element of x·Wᵀ + b: gemm_error_bound (derived in
 * gemm.h: K·2⁻²⁴·S for fp32, (2·2⁻⁸ + K·2⁻²⁴)·S for bf16, S = Σ|x·w|).
 * After GELU (|GELU'| <= 1.13) the bound is scaled by 1.13, plus GELU's own
 * 4e-7; adding a residual rounds at most twice more (2⁻²⁴·(|b + r| +
 * |y|)); after LayerNorm an error e in the inputs moves each output by at most
 * 2·e·rstd·|γ| (the value and the mean each off by e), plus fp32 rounding
 * of the normalised value. A precision this CPU lacks is reported as
 * skipped, with the reason, and its checks count as nothing.
 *
 * fp32 has two paths: its own kernel on weights packed at load where the
 * AVX-512 path is active, OpenBLAS's sgemm elsewhere. The sweeps run the
 * path in force; fp32_sgemm_path_within_its_bound forces the library's
 * (attn_simd_force, as ATTNSERVE_SIMD does) so both are checked on a CPU
 * with AVX-512. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/gemm_panel.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

/* Uniform in [-1, 1), reproducible. */
static float rnd(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}

static float *rnd_array(size_t n, unsigned seed, float scale) {
    float *a = malloc(n * sizeof *a);
    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = rnd(&seed) * scale;
    return a;
}

typedef enum {
    EPI_NONE,
    EPI_GELU,
    EPI_RESIDUAL,
    EPI_LN,
    EPI_RESIDUAL_LN,
    EPI_GELU_RESIDUAL,
    EPI_COUNT
} epi_kind;
static const char *const epi_names[] = {
    "bias only",    "GELU", "residual in place", "LayerNorm", "residual+LayerNorm in place",
    "GELU+residual"};

/* An attn_parallel of nthreads workers that runs the tasks one after
 * another, each as worker task % nthreads, and counts the tasks of a loop
 * that changed y: how many workers of a real pool that loop had work for
 * (a real pool hands tasks out by timing, so it cannot say). check() points
 * it at its output. */
typedef struct spread {
    int nthreads;
    const float *y;
    size_t n;
    float *before;
    int writers; /* the most tasks of one loop that changed y */
} spread;

static void spread_for(void *impl, size_t ntasks, attn_task_fn fn, void *ctx) {
    spread *s = impl;
    int writers = 0;
    for (size_t i = 0; i < ntasks; i++) {
        memcpy(s->before, s->y, s->n * sizeof *s->before);
        fn(ctx, i, (int)(i % (size_t)s->nthreads));
        writers += memcmp(s->before, s->y, s->n * sizeof *s->before) != 0;
    }
    s->writers = writers > s->writers ? writers : s->writers;
}

static void spread_watch(spread *s, const float *y, size_t n) {
    free(s->before);
    s->before = malloc(n * sizeof *s->before);
    cr_assert_not_null(s->before);
    s->y = y;
    s->n = n;
    s->writers = 0;
}

/* Runs one problem and returns the largest error as a fraction of its
 * bound (<= 1 passes). */
static double check(gemm_precision p, const attn_parallel *par, int M, int N, int K, epi_kind e,
                    double *vs_fp32) {
    char err[256] = "";
    float *w = rnd_array((size_t)N * K, 1u + (unsigned)N, 0.1f);
    float *b = rnd_array((size_t)N, 2u + (unsigned)K, 0.5f);
    float *x = rnd_array((size_t)M * K, 3u + (unsigned)M, 1.0f);
    float *res = rnd_array((size_t)M * N, 4u, 1.0f);
    float *g = rnd_array((size_t)N, 5u, 1.0f), *be = rnd_array((size_t)N, 6u, 0.2f);
    for (int j = 0; j < N; j++)
        g[j] += 1.5f;
    float *y = malloc((size_t)M * N * sizeof *y);
    double *ref = malloc((size_t)M * N * sizeof *ref),
           *bound = malloc((size_t)M * N * sizeof *bound);
    double *b32 = malloc((size_t)M * N * sizeof *b32);
    cr_assert(y && ref && bound && b32);
    /* NaN, so an element gemm_run leaves unwritten fails below even where
     * the allocator hands back a previous run's results. */
    for (size_t i = 0; i < (size_t)M * N; i++)
        y[i] = NAN;
    if (par->parallel_for == spread_for)
        spread_watch(par->impl, y, (size_t)M * N);

    gemm_weights *pw;
    cr_assert_eq(gemm_pack(p, w, b, N, K, &pw, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gemm_n(pw), N);
    cr_assert_eq(gemm_k(pw), K);
    cr_assert_eq(gemm_weights_precision(pw), p);
    const size_t sb = gemm_scratch_bytes(pw, M, par->nthreads);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;

    gemm_epilogue epi = {.act = (e == EPI_GELU || e == EPI_GELU_RESIDUAL) ? GEMM_ACT_GELU
                                                                          : GEMM_ACT_NONE};
    if (e == EPI_RESIDUAL || e == EPI_RESIDUAL_LN) {
        memcpy(y, res, (size_t)M * N * sizeof *y); /* residual aliases y */
        epi.residual = y;
        epi.ld_residual = (size_t)N;
    }
    if (e == EPI_LN || e == EPI_RESIDUAL_LN) {
        epi.ln_w = g;
        epi.ln_b = be;
        epi.ln_eps = 1e-12f;
    } else if (e == EPI_GELU_RESIDUAL) {
        epi.residual = res;
        epi.ld_residual = (size_t)N;
    }

    for (int i = 0; i < M; i++) {
        double *ri = ref + (size_t)i * N, *bi = bound + (size_t)i * N;
        for (int j = 0; j < N; j++) {
            double acc = b[j], s = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)x[(size_t)i * K + k] * w[(size_t)j * K + k];
                acc += t;
                s += fabs(t);
            }
            bi[j] = gemm_error_bound(p, K, s, fabs(acc));
            b32[(size_t)i * N + j] = gemm_error_bound(GEMM_FP32, K, s, fabs(acc));
            if (epi.act == GEMM_ACT_GELU) {
                acc = 0.5 * acc * erfc(-acc / sqrt(2.0));
                bi[j] = 1.13 * bi[j] + 4e-7;
            }
            if (epi.residual) {
                /* Adding the residual rounds at most twice more: the bias
                 * plus the residual (the sgemm path adds them first) and
                 * the final sum. */
                const double r = res[(size_t)i * N + j];
                acc += r;
                bi[j] += 0x1p-24 * (fabs(b[j] + r) + fabs(acc));
            }
            ri[j] = acc;
        }
        if (epi.ln_w) {
            double mean = 0, var = 0, emax = 0;
            for (int j = 0; j < N; j++) {
                mean += ri[j];
                emax = bi[j] > emax ? bi[j] : emax;
            }
            mean /= N;
            for (int j = 0; j < N; j++)
                var += (ri[j] - mean) * (ri[j] - mean);
            const double rstd = 1.0 / sqrt(var / N + epi.ln_eps);
            for (int j = 0; j < N; j++) {
                const double v = (ri[j] - mean) * rstd;
                ri[j] = v * g[j] + be[j];
                bi[j] = 2 * (emax + 0x1p-24 * fabs(ri[j] / rstd)) * rstd * fabs(g[j]) +
                        4 * 0x1p-24 * (fabs(v * g[j]) + fabs(be[j]));
            }
        }
    }

    gemm_run(pw, par, x, (size_t)K, y, (size_t)N, M, e == EPI_NONE ? NULL : &epi, scratch);
    double worst = 0;
    *vs_fp32 = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        cr_assert(isfinite(y[i]));
        const double r = fabs(y[i] - ref[i]) / bound[i];
        worst = r > worst ? r : worst;
        if (e == EPI_NONE)
            *vs_fp32 = fmax(*vs_fp32, fabs(y[i] - ref[i]) / b32[i]);
    }
    gemm_free(pw);
    free(scratch);
    free(w);
    free(b);
    free(x);
    free(res);
    free(g);
    free(be);
    free(y);
    free(ref);
    free(bound);
    free(b32);
    return worst;
}

static void sweep(gemm_precision p) {
    const char *why = gemm_unsupported(p);
    if (why) {
        fprintf(stderr, "gemm %s: skipped: %s\n", gemm_precision_name(p), why);
        cr_skip_test("%s: %s", gemm_precision_name(p), why);
    }
    tp_pool *pool = tp_create(2);
    cr_assert_not_null(pool);
    const attn_parallel pooled = tp_parallel(pool);
    /* The model's shapes (C = 384, F = 1536) at a short and a tall batch,
     * and odd ones that leave partial tiles everywhere. */
    static const int shapes[][3] = {
        {12, 1152, 384}, {12, 384, 1536}, {300, 1536, 384}, {300, 384, 1536}, {1, 1, 1},
        {7, 33, 17},     {130, 50, 100},  {129, 31, 385},   {1, 384, 384},    {1, 1536, 384},
        {32, 384, 1536}, {32, 1152, 384}, {33, 384, 1536},  {33, 1536, 384},  {32, 50, 100},
        {13, 200, 385},  {101, 130, 77},  {4, 1000, 3}};
    const attn_parallel *pars[] = {&attn_parallel_serial, &pooled};
    double worst = 0, vs_fp32 = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int e = EPI_NONE; e < EPI_COUNT; e++)
            for (int q = 0; q < 2; q++) {
                const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                double v = 0;
                const double r = check(p, pars[q], M, N, K, (epi_kind)e, &v);
                vs_fp32 = fmax(vs_fp32, v);
                cr_expect_leq(r, 1.0, "%s %dx%dx%d %s, %d threads: error %.3g of the bound",
                              gemm_precision_name(p), M, N, K, epi_names[e], pars[q]->nthreads, r);
                worst = r > worst ? r : worst;
            }
    /* Not exact: a ratio of 0 would mean nothing was compared. And the
     * bounds tell precisions apart: bf16's results break fp32's bound, so a
     * bf16 rounding slipped into the fp32 path would fail it. */
    cr_expect_gt(worst, 0.0);
    if (p == GEMM_BF16)
        cr_expect_gt(vs_fp32, 1.0, "bf16 within fp32's bound (%g): was it rounded at all?",
                     vs_fp32);
    fprintf(stderr, "gemm %s: worst error %.3g of its bound\n", gemm_precision_name(p), worst);
    tp_destroy(pool);
}

Test(gemm, fp32_within_its_bound) {
    sweep(GEMM_FP32);
}

Test(gemm, bf16_within_its_bound) {
    sweep(GEMM_BF16);
}

/* More workers than panels (N = 384 is six of 64 columns): a batch of one
 * row, and of a few, still reaches as many workers as it has panels, and a
 * few rows on many workers split their rows as well; the results stay
 * within the bound with every epilogue, on a real pool of 8 too. */
Test(gemm, more_workers_than_panels) {
    static const int shapes[][3] = {{1, 384, 384}, {5, 384, 384}, {3, 200, 77}, {2, 1536, 384}};
    static const int threads[] = {7, 8, 16};
    tp_pool *pool = tp_create(8);
    cr_assert_not_null(pool);
    const attn_parallel pooled = tp_parallel(pool);
    spread sp = {0};
    int ran = 0;
    for (int p = GEMM_FP32; p <= GEMM_BF16; p++) {
        if (gemm_unsupported((gemm_precision)p))
            continue;
        ran++;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int e = EPI_NONE; e < EPI_COUNT; e++) {
                const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                const int panels = (N + 63) / 64;
                double v;
                double r = check((gemm_precision)p, &pooled, M, N, K, (epi_kind)e, &v);
                cr_expect_leq(r, 1.0, "%s %dx%dx%d %s, pool of 8: error %.3g of the bound",
                              gemm_precision_name(p), M, N, K, epi_names[e], r);
                for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
                    sp.nthreads = threads[t];
                    const attn_parallel par = {threads[t], spread_for, &sp};
                    r = check((gemm_precision)p, &par, M, N, K, (epi_kind)e, &v);
                    cr_expect_leq(r, 1.0, "%s %dx%dx%d %s, %d workers: error %.3g of the bound",
                                  gemm_precision_name(p), M, N, K, epi_names[e], threads[t], r);
                    const int least = threads[t] < panels ? threads[t] : panels;
                    cr_expect_geq(sp.writers, least, "%s %dx%dx%d, %d workers: %d had work",
                                  gemm_precision_name(p), M, N, K, threads[t], sp.writers);
                    if (M > 1 && threads[t] >= 2 * panels)
                        cr_expect_gt(sp.writers, panels,
                                     "%s %dx%dx%d, %d workers: %d had work, rows not split",
                                     gemm_precision_name(p), M, N, K, threads[t], sp.writers);
                }
            }
    }
    cr_assert_geq(ran, 1);
    free(sp.before);
    tp_destroy(pool);
}

/* A batch split by rows: every worker gets a block when there are rows
 * for it, never a block without rows, and more blocks than workers (for a
 * late worker to leave to the others) only as long as each keeps 64 rows
 * (each block reads all the weights) and there are at most 4 per worker. */
Test(gemm, row_blocks_reach_every_worker_and_stay_tall) {
    int more = 0;
    for (int nt = 1; nt <= 16; nt++)
        for (int M = 1; M <= 4096; M++) {
            const int b = gemm_row_blocks(M, nt);
            cr_assert(b >= 1 && b <= M, "M=%d, %d workers: %d blocks", M, nt, b);
            cr_assert_geq(b, M < nt ? M : nt, "M=%d, %d workers: %d blocks", M, nt, b);
            cr_assert_leq(b, 4 * nt, "M=%d, %d workers: %d blocks", M, nt, b);
            if (b > nt) {
                more++;
                /* gemm_split's smallest block has floor(M / b) rows */
                cr_assert_geq(M / b, 64, "M=%d, %d workers: %d blocks of under 64 rows", M, nt, b);
            }
        }
    /* The model's 256-token batch of one on two workers: four blocks. */
    cr_expect_eq(gemm_row_blocks(256, 2), 4);
    cr_expect_eq(gemm_row_blocks(100, 2), 2);
    cr_expect_eq(gemm_row_blocks(8192, 2), 8);
    cr_assert_gt(more, 0);
}

/* The driver's prefetch hints, seen by a kernel whose tiles record what
 * they are handed instead of computing. */
typedef struct hint {
    size_t task;
    int row; /* the tile's first row */
    const char *b, *pf;
    int pf_lines;
} hint;

static struct {
    hint *h;
    size_t n, cap;
    size_t task;
    const float *x;
    size_t ldx;
} hints;

static const void *hint_prepare(const gemm_panel_kernel *k, const float *x, size_t ldx, int rows,
                                void *buf, size_t *lda) {
    (void)k, (void)rows, (void)buf;
    *lda = ldx * sizeof *x;
    return x;
}

static void hint_tile(const gemm_panel_tile *t) {
    cr_assert_lt(hints.n, hints.cap);
    const int row = (int)(((const float *)t->a - hints.x) / (ptrdiff_t)hints.ldx);
    hints.h[hints.n++] = (hint){hints.task, row, t->b, t->pf, t->pf_lines};
}

/* Runs the tasks in order, as worker task % nthreads, naming each. */
static void hint_for(void *impl, size_t ntasks, attn_task_fn fn, void *ctx) {
    const int nthreads = *(const int *)impl;
    for (size_t i = 0; i < ntasks; i++) {
        hints.task = i;
        fn(ctx, i, (int)(i % (size_t)nthreads));
    }
}

/* While a task's tiles run on one panel they hint the panel it reads next
 * (the next of its chunk, else the first of its next chunk): together,
 * from that panel's start and without gap or overlap, all of it where
 * they have a line a step for it (tiles × depth >= its lines), else that
 * many lines; never past it, never more than a line a step, and nothing
 * after a task's last panel or for the panel it is on. Depths of 1 and 3
 * give more tiles than a panel has lines. The model's 64-token batch on
 * two workers hints every panel whole. */
Test(gemm, prefetch_hints_cover_the_next_panel) {
    enum { NR = 64, MR = 6, CHUNK = 96 };
    static const int Ks[] = {1, 3, 384, 1536}, panels[] = {1, 6, 24}, Ms[] = {1, 12, 64, 200, 1000};
    static const int threads[] = {1, 2, 8};
    int whole_64 = 0, part_64 = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t pi = 0; pi < sizeof panels / sizeof panels[0]; pi++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
                    const int K = Ks[ki], np = panels[pi], M = Ms[mi], nt = threads[ti];
                    const size_t panel_bytes = (size_t)K * NR * sizeof(float);
                    const long lines = (long)(panel_bytes / GEMM_PANEL_LINE);
                    char *w = aligned_alloc(64, (size_t)np * panel_bytes);
                    float *bias = calloc((size_t)np * NR, sizeof *bias);
                    float *x = calloc((size_t)M * K, sizeof *x);
                    float *y = calloc((size_t)M * np * NR, sizeof *y);
                    cr_assert(w && bias && x && y);
                    const gemm_panel_kernel k = {.N = np * NR,
                                                 .npanels = np,
                                                 .nr = NR,
                                                 .mr = MR,
                                                 .chunk = CHUNK,
                                                 .depth = K,
                                                 .panels = w,
                                                 .panel_bytes = panel_bytes,
                                                 .bias = bias,
                                                 .prepare = hint_prepare,
                                                 .tile = hint_tile};
                    hints.cap = (size_t)np * (size_t)(M + MR) * 2;
                    hints.h = calloc(hints.cap, sizeof *hints.h);
                    hints.n = 0, hints.x = x, hints.ldx = (size_t)K;
                    cr_assert_not_null(hints.h);
                    int nthreads = nt;
                    const attn_parallel par = {nt, hint_for, &nthreads};
                    gemm_panel_run(&k, &par, x, (size_t)K, y, (size_t)np * NR, M, NULL, NULL);
                    cr_assert_gt(hints.n, 0);
                    const hint *h = hints.h;
                    /* A sweep: one task's tiles on one panel for one chunk. */
                    for (size_t s = 0, e, first = 0; s < hints.n; s = e) {
                        if (h[s].task != h[first].task)
                            first = s; /* a task's chunks count from its first row */
                        const int chunk = (h[s].row - h[first].row) / CHUNK;
                        for (e = s + 1; e < hints.n && h[e].task == h[s].task && h[e].b == h[s].b &&
                                        (h[e].row - h[first].row) / CHUNK == chunk;
                             e++)
                            ;
                        /* Its next sweep reads the panel it hints, unless
                         * that is this panel again (still in L2). */
                        const int last = e == hints.n || h[e].task != h[s].task || h[e].b == h[s].b;
                        const char *next = last ? NULL : h[e].b;
                        long got = 0;
                        for (size_t i = s; i < e; i++) {
                            cr_assert(h[i].pf_lines >= 0 && h[i].pf_lines <= K,
                                      "K=%d M=%d %d workers: %d lines in a tile of %d steps", K, M,
                                      nt, h[i].pf_lines, K);
                            if (!h[i].pf_lines)
                                continue;
                            cr_assert(!last,
                                      "K=%d M=%d %d panels %d workers: a hint with no next panel",
                                      K, M, np, nt);
                            /* As offsets, so a wrong hint is a failure,
                             * not pointer arithmetic outside w. */
                            const long at = (long)((uintptr_t)h[i].pf - (uintptr_t)next);
                            cr_assert_eq(at, got * GEMM_PANEL_LINE,
                                         "K=%d M=%d %d panels %d workers: tile at row %d hints "
                                         "byte %ld of the next panel, not %ld",
                                         K, M, np, nt, h[i].row, at, got * GEMM_PANEL_LINE);
                            got += h[i].pf_lines;
                        }
                        if (last)
                            continue;
                        const long steps = (long)(e - s) * K;
                        const long want = steps < lines ? steps : lines;
                        cr_assert_eq(got, want,
                                     "K=%d M=%d %d panels %d workers: %ld lines of the next "
                                     "panel hinted by %zu tiles, not %ld",
                                     K, M, np, nt, got, e - s, want);
                        if (M == 64 && nt == 2 && np > 1 && K >= 384) {
                            whole_64 += got == lines;
                            part_64 += got != lines;
                        }
                    }
                    free(hints.h);
                    free(w);
                    free(bias);
                    free(x);
                    free(y);
                }
    cr_assert_gt(whole_64, 0);
    cr_assert_eq(part_64, 0, "%d sweeps of the 64-token batch hinted part of a panel", part_64);
}

/* OpenBLAS's sgemm, the fp32 path wherever AVX-512 is not active: forced
 * here, so a CPU with AVX-512 checks it too. */
Test(gemm, fp32_sgemm_path_within_its_bound) {
    cr_assert_eq(attn_simd_force(ATTN_SIMD_PORTABLE), 0);
    sweep(GEMM_FP32);
    attn_simd_unforce();
}

/* Where AVX-512 is active, fp32 packs its own copy of the weights (and
 * /info counts it); the same packed weights still run on the sgemm path
 * if the AVX-512 path is forced off later, and both agree within the
 * bound with the float64 reference. */
Test(gemm, fp32_packed_where_avx512_runs) {
    if (attn_simd_active() != ATTN_SIMD_AVX512) {
        fprintf(stderr, "gemm fp32 packed kernel: NOT RUN: the AVX-512 path is not active\n");
        cr_skip_test("NOT RUN: the packed fp32 kernel needs the AVX-512 path, not active here");
    }
    const int M = 37, N = 200, K = 77;
    float *w = rnd_array((size_t)N * K, 7u, 0.1f), *b = rnd_array((size_t)N, 8u, 0.5f);
    float *x = rnd_array((size_t)M * K, 9u, 1.0f);
    float *y[2] = {malloc((size_t)M * N * sizeof(float)), malloc((size_t)M * N * sizeof(float))};
    cr_assert(y[0] && y[1]);
    char err[256] = "";
    gemm_weights *pw;
    cr_assert_eq(gemm_pack(GEMM_FP32, w, b, N, K, &pw, err, sizeof err), 0, "%s", err);
    /* Four panels of 64 columns by K, and their bias. */
    cr_expect_eq(gemm_weights_bytes(pw), (size_t)4 * 64 * (K + 1) * sizeof(float));
    gemm_run(pw, &attn_parallel_serial, x, (size_t)K, y[0], (size_t)N, M, NULL, NULL);
    cr_assert_eq(attn_simd_force(ATTN_SIMD_PORTABLE), 0);
    gemm_run(pw, &attn_parallel_serial, x, (size_t)K, y[1], (size_t)N, M, NULL, NULL);
    gemm_weights *unpacked;
    cr_assert_eq(gemm_pack(GEMM_FP32, w, b, N, K, &unpacked, err, sizeof err), 0, "%s", err);
    attn_simd_unforce();
    cr_expect_eq(gemm_weights_bytes(unpacked), 0, "packed below AVX-512: nothing to own");
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = b[j], sum = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)x[(size_t)i * K + k] * w[(size_t)j * K + k];
                acc += t;
                sum += fabs(t);
            }
            const double bound = gemm_error_bound(GEMM_FP32, K, sum, fabs(acc));
            for (int q = 0; q < 2; q++)
                cr_expect_leq(fabs(y[q][(size_t)i * N + j] - acc), bound, "%s y[%d][%d]",
                              q ? "sgemm" : "packed", i, j);
        }
    gemm_free(pw);
    gemm_free(unpacked);
    free(w);
    free(b);
    free(x);
    free(y[0]);
    free(y[1]);
}

/* The element-bound check `attnserve selftest` runs for each precision. */
Test(gemm, selftest_passes_every_precision_offered) {
    tp_pool *pool = tp_create(2);
    cr_assert_not_null(pool);
    const attn_parallel par = tp_parallel(pool);
    int ran = 0;
    for (int p = GEMM_FP32; p <= GEMM_BF16; p++) {
        double worst = -1;
        char why[256] = "";
        if (gemm_unsupported((gemm_precision)p)) {
            cr_assert_eq(gemm_selftest((gemm_precision)p, &par, &worst, why, sizeof why), -1);
            fprintf(stderr, "gemm selftest %s: skipped: %s\n", gemm_precision_name(p), why);
            continue;
        }
        cr_expect_eq(gemm_selftest((gemm_precision)p, &par, &worst, why, sizeof why), 0, "%s: %s",
                     gemm_precision_name(p), why);
        cr_expect(worst > 0 && worst <= 1, "%s: worst %g", gemm_precision_name(p), worst);
        fprintf(stderr, "gemm selftest %s: worst error %.3g of the bound\n", gemm_precision_name(p),
                worst);
        ran++;
    }
    cr_assert_geq(ran, 1);
    tp_destroy(pool);
}

Test(gemm, int8_within_its_bound_or_refused) {
    /* The int8 bound belongs with its kernels; here only that a build
     * without them refuses cleanly. */
    const char *why = gemm_unsupported(GEMM_INT8);
    if (why) {
        gemm_weights *w = NULL;
        char err[256] = "";
        const float one = 1.0f;
        cr_assert_eq(gemm_pack(GEMM_INT8, &one, NULL, 1, 1, &w, err, sizeof err), -1);
        cr_assert_null(w);
        cr_assert(strstr(err, why), "%s", err);
        fprintf(stderr, "gemm int8: skipped: %s\n", why);
        cr_skip_test("int8: %s", why);
    }
}

Test(gemm, names_round_trip) {
    for (int p = 0; p < GEMM_NPRECISIONS; p++)
        cr_assert_eq(gemm_precision_parse(gemm_precision_name((gemm_precision)p)), p);
    cr_assert_str_eq(gemm_precision_name(GEMM_FP32), "fp32");
    cr_assert_str_eq(gemm_precision_name(GEMM_BF16), "bf16");
    cr_assert_str_eq(gemm_precision_name(GEMM_INT8), "int8");
    cr_assert_str_eq(gemm_precision_name(GEMM_FP16), "fp16");
    cr_assert_str_eq(gemm_precision_name(GEMM_TF32), "tf32");
    /* GPU precisions: never run here, refused by name. */
    cr_assert(gemm_precision_gpu_only(GEMM_FP16) && gemm_precision_gpu_only(GEMM_TF32));
    cr_assert(!gemm_precision_gpu_only(GEMM_FP32) && !gemm_precision_gpu_only(GEMM_BF16) &&
              !gemm_precision_gpu_only(GEMM_INT8));
    cr_assert(strstr(gemm_unsupported(GEMM_FP16), "fp16 is a GPU precision"));
    cr_assert(strstr(gemm_unsupported(GEMM_TF32), "tf32 is a GPU precision"));
    cr_assert_eq(gemm_precision_parse("auto"), -1);
    cr_assert_eq(gemm_precision_parse(NULL), -1);
    cr_assert_null(gemm_unsupported(GEMM_FP32));
}

Test(gemm, reduced_precisions_refused_below_avx512) {
    if (attn_simd_detect() < ATTN_SIMD_AVX2)
        cr_skip_test("no AVX2 path to force");
    cr_assert_eq(attn_simd_force(ATTN_SIMD_AVX2), 0);
    const char *bf = gemm_unsupported(GEMM_BF16), *i8 = gemm_unsupported(GEMM_INT8);
    gemm_weights *w = NULL;
    char err[256] = "";
    const float one = 1.0f;
    const int rc = gemm_pack(GEMM_BF16, &one, NULL, 1, 1, &w, err, sizeof err);
    attn_simd_unforce();
    cr_assert_not_null(bf);
    cr_assert_not_null(i8);
    cr_assert_eq(rc, -1);
    cr_assert_null(w);
    cr_assert(strstr(err, "bf16"), "%s", err);
}

Test(gemm, bad_shapes_refused) {
    gemm_weights *w = (gemm_weights *)1;
    char err[256] = "";
    const float one = 1.0f;
    cr_assert_eq(gemm_pack(GEMM_FP32, &one, NULL, 0, 1, &w, err, sizeof err), -1);
    cr_assert_null(w);
    cr_assert_eq(gemm_pack(GEMM_FP32, NULL, NULL, 1, 1, &w, err, sizeof err), -1);
    cr_assert_neq(err[0], '\0');
}

/* gemm_layernorm_row on every SIMD path this CPU has, against a long double
 * reference: widths with and without a ragged tail, in place and not, and
 * rows whose mean is far larger than their spread (where a one-pass variance
 * would cancel). Bound per element: the centred value rounds once to float
 * (2⁻²⁴·|c|), rstd once (2⁻²⁴), then · rstd, · w and + b round once each, so
 * |y - ref| <= 4·2⁻²⁴·|c·rstd·w| + 2⁻²⁴·|ref| in all, with 2⁻²⁴ of the same
 * to spare for the double statistics and the reference's own rounding. */
Test(gemm, layernorm_row_every_path_within_its_bound) {
    static const int widths[] = {1, 7, 16, 100, 384, 1031};
    static const float offsets[] = {0.0f, 1000.0f};
    const attn_simd best = attn_simd_detect();
    int paths = 0;
    for (int path = ATTN_SIMD_PORTABLE; path <= (int)best; path++) {
        cr_assert_eq(attn_simd_force((attn_simd)path), 0);
        paths++;
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
            for (size_t oi = 0; oi < 2; oi++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    const int n = widths[wi];
                    float *x = rnd_array((size_t)n, 11u + (unsigned)n, 3.0f);
                    float *g = rnd_array((size_t)n, 12u + (unsigned)n, 1.0f);
                    float *b = rnd_array((size_t)n, 13u + (unsigned)n, 0.5f);
                    float *y = malloc((size_t)n * sizeof *y);
                    cr_assert_not_null(y);
                    for (int i = 0; i < n; i++)
                        x[i] += offsets[oi];
                    long double mean = 0.0L, var = 0.0L;
                    for (int i = 0; i < n; i++)
                        mean += x[i];
                    mean /= n;
                    for (int i = 0; i < n; i++)
                        var += (x[i] - mean) * (x[i] - mean);
                    const float eps = 1e-12f;
                    const long double rstd = 1.0L / sqrtl(var / n + eps);
                    long double *ref = malloc((size_t)n * sizeof *ref);
                    cr_assert_not_null(ref);
                    for (int i = 0; i < n; i++)
                        ref[i] = (x[i] - mean) * rstd * g[i] + b[i];
                    float *out = in_place ? x : y;
                    gemm_layernorm_row(out, x, g, b, n, eps);
                    for (int i = 0; i < n; i++) {
                        const long double c = fabsl((ref[i] - b[i]));
                        const double bound = ldexp(5.0 * (double)c + (double)fabsl(ref[i]), -24);
                        const double e = fabs((double)((long double)out[i] - ref[i]));
                        cr_assert(e <= bound,
                                  "%s path, n=%d offset %g%s: y[%d] = %.9g, want %.9Lg (error "
                                  "%.3g > bound %.3g)",
                                  attn_simd_name((attn_simd)path), n, (double)offsets[oi],
                                  in_place ? " in place" : "", i, (double)out[i], ref[i], e, bound);
                    }
                    free(ref);
                    free(x);
                    free(g);
                    free(b);
                    free(y);
                }
    }
    attn_simd_unforce();
    cr_assert_geq(paths, 1);
}

/* bench_gemm.c — the encoder's linear layers, in bf16 and in fp32: our
 * kernels (kernels/gemm_avx512bf16.c and kernels/gemm_f32_avx512.c, through
 * gemm_run) against the libraries that offer the same GEMM — oneDNN's
 * matmul, libxsmm's JIT kernels and OpenBLAS's cblas_sbgemm for bf16;
 * OpenBLAS's cblas_sgemm (whatever core it picks here) and oneDNN's matmul
 * for fp32 — on all-MiniLM-L6-v2's shapes, on our pool (2 threads; every
 * library one thread inside, split the way gemm_run splits but at most one
 * call per worker: see task_range), as GFLOP/s and
 * as a fraction of the peak of the same precision (vdpbf16ps, fp32 FMA)
 * measured on the same pool.
 *
 * Every variant starts from fp32 activations and ends with fp32 y =
 * x·Wᵀ + b, its weights prepared once outside the timing in the layout it
 * wants; converting the activations to bf16 is timed for all. Variants run
 * round-robin, ROUNDS times, and the median is reported. A library missing
 * at build time is reported as not built.
 *
 *   build/bench_gemm [--rounds N] [--threads N]
 *   (unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE: they force slow kernels;
 *   set OPENBLAS_CORETYPE=SkylakeX to time OpenBLAS's AVX-512 sgemm) */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_panel.h"
#include "kernels/peak.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

#ifdef BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
void omp_set_num_threads(int n);
#endif
#ifdef BENCH_HAVE_XSMM
#include <libxsmm.h>
#endif

enum { MAXT = 8, PANEL = 64 };

typedef struct problem {
    int M, N, K;
    const float *x, *w, *b; /* (M, K), (N, K), (N) */
    float *y;               /* (M, N) */
    int nt;
} problem;

/* The libraries' split: gemm_run's (gemm_panel_grid), a grid of row blocks
 * by blocks of whole 64-column panels, but one task per worker where
 * gemm_run splits a tall batch's rows or a short batch's panels finer — a
 * library call per task costs more than one of our tiles, and the per-task
 * setup below holds one call per worker. A task past the grid gets nothing. */
static void task_range(const problem *p, int task, int *r0, int *r1, int *c0, int *c1) {
    const int np = (p->N + PANEL - 1) / PANEL;
    int rb, pb;
    gemm_panel_grid(p->M, np, p->nt, &rb, &pb);
    if (rb > p->nt)
        rb = p->nt;
    if (rb * pb > p->nt)
        pb = p->nt / rb;
    *r0 = *r1 = *c0 = *c1 = 0;
    if (task >= rb * pb)
        return;
    gemm_split(p->M, (size_t)rb, (size_t)(task / pb), r0, r1);
    gemm_split(np, (size_t)pb, (size_t)(task % pb), c0, c1);
    *c0 *= PANEL;
    *c1 = *c1 * PANEL < p->N ? *c1 * PANEL : p->N;
}

static void bias_rows(const problem *p, int r0, int r1, int c0, int c1) {
    for (int r = r0; r < r1; r++)
        memcpy(p->y + (size_t)r * p->N + c0, p->b + c0, (size_t)(c1 - c0) * sizeof(float));
}

/* ---- variants ------------------------------------------------------------------ */

/* What a variant is, for the ratio columns. */
typedef enum { OURS_FP32, OURS_BF16, LIB_FP32, LIB_BF16 } variant_kind;

typedef struct variant {
    const char *name;
    variant_kind kind;
    const char *(*unavailable)(void);
    void *(*setup)(const problem *p);
    void (*run)(void *ctx, const problem *p, const attn_parallel *par);
    void (*destroy)(void *ctx);
} variant;

typedef struct ours_ctx {
    gemm_weights *w;
    void *scratch;
} ours_ctx;

static void *ours_setup(const problem *p, gemm_precision prec) {
    ours_ctx *c = calloc(1, sizeof *c);
    char err[256];
    if (gemm_pack(prec, p->w, p->b, p->N, p->K, &c->w, err, sizeof err)) {
        fprintf(stderr, "pack: %s\n", err);
        exit(1);
    }
    const size_t sb = gemm_scratch_bytes(c->w, p->M, p->nt);
    c->scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    return c;
}
static void *ours_fp32_setup(const problem *p) {
    return ours_setup(p, GEMM_FP32);
}
static void *ours_bf16_setup(const problem *p) {
    return ours_setup(p, GEMM_BF16);
}
static void ours_run(void *ctx, const problem *p, const attn_parallel *par) {
    ours_ctx *c = ctx;
    gemm_run(c->w, par, p->x, (size_t)p->K, p->y, (size_t)p->N, p->M, NULL, c->scratch);
}
static void ours_destroy(void *ctx) {
    ours_ctx *c = ctx;
    gemm_free(c->w);
    free(c->scratch);
    free(c);
}
static const char *bf16_unavailable(void) {
    return gemm_unsupported(GEMM_BF16);
}
static const char *always_available(void) {
    return NULL;
}

/* OpenBLAS cblas_sgemm on W as stored, one thread inside, onto y holding
 * the bias (beta = 1): the fp32 path gemm.c takes where AVX-512 is absent. */
static void sgemm_task(void *arg, size_t task, int worker) {
    (void)worker;
    const problem *p = arg;
    int r0, r1, c0, c1;
    task_range(p, (int)task, &r0, &r1, &c0, &c1);
    if (r0 >= r1 || c0 >= c1)
        return;
    bias_rows(p, r0, r1, c0, c1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, c1 - c0, p->K, 1.0f,
                p->x + (size_t)r0 * p->K, p->K, p->w + (size_t)c0 * p->K, p->K, 1.0f,
                p->y + (size_t)r0 * p->N + c0, p->N);
}
static void *sgemm_setup(const problem *p) {
    (void)p;
    return calloc(1, 1);
}
static void sgemm_run(void *ctx, const problem *p, const attn_parallel *par) {
    (void)ctx;
    par->parallel_for(par->impl, (size_t)p->nt, sgemm_task, (void *)p);
}

/* Activations converted per task into the task's own buffer, as ours does. */
typedef struct conv_ctx {
    uint16_t *w;       /* (N, K) bf16, or the library's layout */
    uint16_t *a[MAXT]; /* per task (rows, K) bf16 */
    const problem *p;
    void *lib[MAXT]; /* per task library state */
    void *lib_w[MAXT];
} conv_ctx;

static conv_ctx *conv_setup(const problem *p) {
    conv_ctx *c = calloc(1, sizeof *c);
    c->p = p;
    for (int t = 0; t < p->nt; t++)
        c->a[t] = aligned_alloc(64, ((size_t)p->M * p->K * 2 + 63) / 64 * 64);
    c->w = aligned_alloc(64, ((size_t)p->N * p->K * 2 + 63) / 64 * 64);
    gemm_bf16_convert(c->w, (size_t)p->K, p->w, (size_t)p->K, p->N, p->K);
    return c;
}
static void conv_destroy(void *ctx) {
    conv_ctx *c = ctx;
    for (int t = 0; t < c->p->nt; t++)
        free(c->a[t]);
    free(c->w);
    free(c);
}

/* OpenBLAS cblas_sbgemm, one thread inside. Referenced weakly: OpenBLAS
 * builds without BUILD_BFLOAT16 (Debian 12's 0.3.21) do not have it. */
#pragma weak cblas_sbgemm
static const char *sbgemm_unavailable(void) {
    const char *why = gemm_unsupported(GEMM_BF16);
    return why             ? why
           : !cblas_sbgemm ? "this OpenBLAS has no cblas_sbgemm (built without BUILD_BFLOAT16)"
                           : NULL;
}

typedef struct task_arg {
    conv_ctx *c;
    const problem *p;
} task_arg;

static void sbgemm_task(void *arg, size_t task, int worker) {
    (void)worker;
    const task_arg *ta = arg;
    const problem *p = ta->p;
    int r0, r1, c0, c1;
    task_range(p, (int)task, &r0, &r1, &c0, &c1);
    if (r0 >= r1 || c0 >= c1)
        return;
    uint16_t *a = ta->c->a[task];
    gemm_bf16_convert(a, (size_t)p->K, p->x + (size_t)r0 * p->K, (size_t)p->K, r1 - r0, p->K);
    bias_rows(p, r0, r1, c0, c1);
    cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, c1 - c0, p->K, 1.0f,
                 (const bfloat16 *)a, p->K, (const bfloat16 *)ta->c->w + (size_t)c0 * p->K, p->K,
                 1.0f, p->y + (size_t)r0 * p->N + c0, p->N);
}
static void *sbgemm_setup(const problem *p) {
    return conv_setup(p);
}
static void sbgemm_run(void *ctx, const problem *p, const attn_parallel *par) {
    task_arg ta = {ctx, p};
    par->parallel_for(par->impl, (size_t)p->nt, sbgemm_task, &ta);
}

#ifdef BENCH_HAVE_XSMM
/* libxsmm: column-major C (m = columns of y, n = rows of y) = A · B with A
 * the weights in VNNI pairs [K/2][N][2] (what its bf16 kernels read) and B
 * the bf16 activations as stored. One kernel per panel width and row count,
 * JIT-compiled at setup. */
typedef struct xsmm_ctx {
    conv_ctx *c;
    uint16_t *wv; /* [K/2][N][2] */
    libxsmm_bsmmfunction k[MAXT];
} xsmm_ctx;

enum { XROWS = 64 };

static const char *xsmm_unavailable(void) {
    return NULL;
}
static void *xsmm_setup(const problem *p) {
    xsmm_ctx *x = calloc(1, sizeof *x);
    x->c = conv_setup(p);
    x->wv = aligned_alloc(64, ((size_t)p->N * p->K * 2 + 63) / 64 * 64);
    for (int k2 = 0; k2 < p->K / 2; k2++)
        for (int n = 0; n < p->N; n++)
            for (int e = 0; e < 2; e++)
                x->wv[((size_t)k2 * p->N + n) * 2 + e] = x->c->w[(size_t)n * p->K + 2 * k2 + e];
    return x;
}
static void xsmm_task(void *arg, size_t task, int worker) {
    (void)worker;
    const task_arg *ta = arg;
    const problem *p = ta->p;
    xsmm_ctx *x = (xsmm_ctx *)ta->c;
    int r0, r1, c0, c1;
    task_range(p, (int)task, &r0, &r1, &c0, &c1);
    if (r0 >= r1 || c0 >= c1)
        return;
    uint16_t *a = x->c->a[task];
    gemm_bf16_convert(a, (size_t)p->K, p->x + (size_t)r0 * p->K, (size_t)p->K, r1 - r0, p->K);
    bias_rows(p, r0, r1, c0, c1);
    const libxsmm_blasint lda = p->N, ldb = p->K, ldc = p->N;
    const float alpha = 1.0f, beta = 1.0f;
    const int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
    for (int r = r0; r < r1; r += XROWS) {
        const int n = r1 - r < XROWS ? r1 - r : XROWS;
        for (int cc = c0; cc < c1; cc += PANEL) {
            const int m = c1 - cc < PANEL ? c1 - cc : PANEL;
            libxsmm_bsmmfunction f =
                libxsmm_bsmmdispatch(m, n, p->K, &lda, &ldb, &ldc, &alpha, &beta, &flags, NULL);
            if (!f) {
                fprintf(stderr, "libxsmm: no bf16 kernel for %dx%dx%d\n", m, n, p->K);
                exit(1);
            }
            f((const libxsmm_bfloat16 *)(x->wv + (size_t)cc * 2),
              (const libxsmm_bfloat16 *)(a + (size_t)(r - r0) * p->K),
              p->y + (size_t)r * p->N + cc);
        }
    }
}
static void xsmm_run(void *ctx, const problem *p, const attn_parallel *par) {
    task_arg ta = {ctx, p};
    par->parallel_for(par->impl, (size_t)p->nt, xsmm_task, &ta);
}
static void xsmm_destroy(void *ctx) {
    xsmm_ctx *x = ctx;
    conv_destroy(x->c);
    free(x->wv);
    free(x);
}
#endif

#ifdef BENCH_HAVE_DNNL
/* oneDNN matmul per task: src (rows, K) bf16, weights reordered once into
 * the layout the primitive asks for (format any), bias and dst f32. */
typedef struct dnnl_task {
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, bias, dst;
    dnnl_stream_t stream;
    int r0, r1, c0, c1;
} dnnl_task;

typedef struct dnnl_ctx {
    conv_ctx *c; /* bf16: the converted weights and activation buffers */
    dnnl_data_type_t dt;
    int nt;
    dnnl_engine_t eng;
    dnnl_task t[MAXT];
} dnnl_ctx;

#define DN(call)                                                                                   \
    do {                                                                                           \
        dnnl_status_t s_ = (call);                                                                 \
        if (s_ != dnnl_success) {                                                                  \
            fprintf(stderr, "oneDNN: %s failed (%d)\n", #call, (int)s_);                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char *dnnl_unavailable(void) {
    return NULL;
}
/* src and weights in dt (bf16 or f32), bias and dst f32. f32 reads the
 * activations in place and reorders W from the caller's fp32 copy. */
static void *dnnl_setup_dt(const problem *p, dnnl_data_type_t dt) {
    dnnl_ctx *d = calloc(1, sizeof *d);
    d->dt = dt;
    d->nt = p->nt;
    if (dt == dnnl_bf16)
        d->c = conv_setup(p);
    omp_set_num_threads(1);
    DN(dnnl_engine_create(&d->eng, dnnl_cpu, 0));
    for (int t = 0; t < p->nt; t++) {
        dnnl_task *k = &d->t[t];
        task_range(p, t, &k->r0, &k->r1, &k->c0, &k->c1);
        const int64_t m = k->r1 - k->r0, n = k->c1 - k->c0;
        if (m <= 0 || n <= 0)
            continue;
        dnnl_memory_desc_t src_md, wany_md, wuser_md, bias_md, dst_md;
        const dnnl_dims_t sd = {m, p->K}, wd = {p->K, n}, bd = {1, n}, dd = {m, n};
        const dnnl_dims_t ws = {1, p->K}, ds = {p->N, 1};
        DN(dnnl_memory_desc_init_by_tag(&src_md, 2, sd, dt, dnnl_ab));
        DN(dnnl_memory_desc_init_by_tag(&wany_md, 2, wd, dt, dnnl_format_tag_any));
        DN(dnnl_memory_desc_init_by_strides(&wuser_md, 2, wd, dt, ws));
        DN(dnnl_memory_desc_init_by_tag(&bias_md, 2, bd, dnnl_f32, dnnl_ab));
        DN(dnnl_memory_desc_init_by_strides(&dst_md, 2, dd, dnnl_f32, ds));
        dnnl_matmul_desc_t md;
        DN(dnnl_matmul_desc_init(&md, &src_md, &wany_md, &bias_md, &dst_md));
        dnnl_primitive_desc_t pd;
        DN(dnnl_primitive_desc_create(&pd, &md, NULL, d->eng, NULL));
        DN(dnnl_primitive_create(&k->prim, pd));
        const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        void *src = dt == dnnl_bf16 ? (void *)d->c->a[t] : (void *)(p->x + (size_t)k->r0 * p->K);
        DN(dnnl_memory_create(&k->src, &src_md, d->eng, src));
        DN(dnnl_memory_create(&k->wei, wmd, d->eng, DNNL_MEMORY_ALLOCATE));
        DN(dnnl_memory_create(&k->bias, &bias_md, d->eng, (void *)(p->b + k->c0)));
        DN(dnnl_memory_create(&k->dst, &dst_md, d->eng, p->y + (size_t)k->r0 * p->N + k->c0));
        DN(dnnl_stream_create(&k->stream, d->eng, dnnl_stream_default_flags));
        /* The weights, once: the user's (K, n) view of W's rows c0.. as
         * stored (N, K), reordered into the primitive's layout. */
        dnnl_memory_t wuser;
        void *wsrc = dt == dnnl_bf16 ? (void *)(d->c->w + (size_t)k->c0 * p->K)
                                     : (void *)(p->w + (size_t)k->c0 * p->K);
        DN(dnnl_memory_create(&wuser, &wuser_md, d->eng, wsrc));
        dnnl_primitive_desc_t rpd;
        DN(dnnl_reorder_primitive_desc_create(&rpd, &wuser_md, d->eng, wmd, d->eng, NULL));
        dnnl_primitive_t r;
        DN(dnnl_primitive_create(&r, rpd));
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wuser}, {DNNL_ARG_TO, k->wei}};
        DN(dnnl_primitive_execute(r, k->stream, 2, ra));
        DN(dnnl_stream_wait(k->stream));
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(wuser);
        dnnl_primitive_desc_destroy(pd);
    }
    return d;
}
static void *dnnl_bf16_setup(const problem *p) {
    return dnnl_setup_dt(p, dnnl_bf16);
}
static void *dnnl_f32_setup(const problem *p) {
    return dnnl_setup_dt(p, dnnl_f32);
}
static void dnnl_task_fn(void *arg, size_t task, int worker) {
    (void)worker;
    const task_arg *ta = arg;
    const problem *p = ta->p;
    dnnl_ctx *d = (dnnl_ctx *)ta->c;
    dnnl_task *k = &d->t[task];
    if (!k->prim)
        return;
    omp_set_num_threads(1); /* this worker's OpenMP: no team of its own */
    if (d->dt == dnnl_bf16)
        gemm_bf16_convert(d->c->a[task], (size_t)p->K, p->x + (size_t)k->r0 * p->K, (size_t)p->K,
                          k->r1 - k->r0, p->K);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, k->src},
                               {DNNL_ARG_WEIGHTS, k->wei},
                               {DNNL_ARG_BIAS, k->bias},
                               {DNNL_ARG_DST, k->dst}};
    DN(dnnl_primitive_execute(k->prim, k->stream, 4, args));
    DN(dnnl_stream_wait(k->stream));
}
static void dnnl_run(void *ctx, const problem *p, const attn_parallel *par) {
    task_arg ta = {ctx, p};
    par->parallel_for(par->impl, (size_t)p->nt, dnnl_task_fn, &ta);
}
static void dnnl_destroy(void *ctx) {
    dnnl_ctx *d = ctx;
    for (int t = 0; t < d->nt; t++) {
        dnnl_task *k = &d->t[t];
        if (!k->prim)
            continue;
        dnnl_primitive_destroy(k->prim);
        dnnl_memory_destroy(k->src);
        dnnl_memory_destroy(k->wei);
        dnnl_memory_destroy(k->bias);
        dnnl_memory_destroy(k->dst);
        dnnl_stream_destroy(k->stream);
    }
    dnnl_engine_destroy(d->eng);
    if (d->c)
        conv_destroy(d->c);
    free(d);
}
#endif

static const variant variants[] = {
    {"fp32 ours", OURS_FP32, always_available, ours_fp32_setup, ours_run, ours_destroy},
    {"fp32 OpenBLAS sgemm", LIB_FP32, always_available, sgemm_setup, sgemm_run, free},
#ifdef BENCH_HAVE_DNNL
    {"fp32 oneDNN", LIB_FP32, dnnl_unavailable, dnnl_f32_setup, dnnl_run, dnnl_destroy},
#endif
    {"bf16 ours", OURS_BF16, bf16_unavailable, ours_bf16_setup, ours_run, ours_destroy},
#ifdef BENCH_HAVE_DNNL
    {"bf16 oneDNN", LIB_BF16, dnnl_unavailable, dnnl_bf16_setup, dnnl_run, dnnl_destroy},
#endif
#ifdef BENCH_HAVE_XSMM
    {"bf16 libxsmm", LIB_BF16, xsmm_unavailable, xsmm_setup, xsmm_run, xsmm_destroy},
#endif
    {"bf16 OpenBLAS sbgemm", LIB_BF16, sbgemm_unavailable, sbgemm_setup, sbgemm_run, conv_destroy},
};
enum { NV = sizeof variants / sizeof variants[0] };

/* ---- peak ------------------------------------------------------------------------- */

typedef struct peak_job {
    int bf16; /* 1: the vdpbf16ps loop; 0: the fp32 FMA loop */
    long iters;
    double flops[MAXT];
} peak_job;

static void peak_task(void *arg, size_t task, int worker) {
    (void)worker;
    peak_job *j = arg;
    j->flops[task] = j->bf16 ? attn_peak_bf16(j->iters) : attn_peak_fma(ATTN_SIMD_AVX512, j->iters);
}

/* GFLOP/s of the vdpbf16ps (bf16) or FMA (fp32) loop on every worker at once
 * (about 30 ms): measured in every round beside the GEMMs, so a loaded
 * machine slows both. 0 where the CPU lacks the instructions. */
static double peak_gflops(const attn_parallel *par, int bf16) {
    peak_job j = {.bf16 = bf16, .iters = bf16 ? 3000000 : 6000000};
    const double t0 = now_s();
    par->parallel_for(par->impl, (size_t)par->nthreads, peak_task, &j);
    const double dt = now_s() - t0;
    double f = 0;
    for (int i = 0; i < par->nthreads; i++)
        f += j.flops[i];
    return f / dt * 1e-9;
}

static float *rnd_array(size_t n, unsigned seed, float scale) {
    float *a = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = ((float)(seed >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale;
    }
    return a;
}

int main(int argc, char **argv) {
    int rounds = 7, nt = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            nt = atoi(argv[i + 1]);
    }
    if (nt < 1 || nt > MAXT || rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: %s [--rounds 1..64] [--threads 1..%d]\n", argv[0], MAXT);
        return 2;
    }
    openblas_set_num_threads(1);
#ifdef BENCH_HAVE_XSMM
    libxsmm_init();
#endif
    tp_pool *pool = tp_create(nt);
    const attn_parallel par = tp_parallel(pool);
    const double peak = peak_gflops(&par, 1), peak32 = peak_gflops(&par, 0);
    double peaks[64], peaks32[64];
    printf("fp32 and bf16 GEMMs, %d threads (our pool), median of %d interleaved rounds; "
           "OpenBLAS core: %s\n",
           nt, rounds, openblas_get_corename());
    if (peak32 > 0)
        printf("fp32 FMA peak (AVX-512 register-only loop, %d workers, measured in every round): "
               "%.1f GFLOP/s at start\n",
               nt, peak32);
    else
        printf("fp32 FMA peak: skipped: the AVX-512 path is not active\n");
    if (peak > 0)
        printf("vdpbf16ps peak (register-only loop, %d workers, measured in every round): "
               "%.1f GFLOP/s at start\n",
               nt, peak);
    else
        printf("vdpbf16ps peak: skipped: no AVX512_BF16\n");
    for (int v = 0; v < NV; v++) {
        const char *why = variants[v].unavailable();
        if (why)
            printf("%s: skipped: %s\n", variants[v].name, why);
    }

    /* all-MiniLM-L6-v2: C = 384, F = 1536. */
    static const struct {
        const char *name;
        int N, K;
    } layers[] = {
        {"QKV", 1152, 384}, {"out", 384, 384}, {"FFN in", 1536, 384}, {"FFN out", 384, 1536}};
    static const int Ms[] = {12, 384, 1536, 4096, 8192};

    printf("\n| layer | M | N | K |");
    for (int v = 0; v < NV; v++)
        printf(" %s GFLOP/s |", variants[v].name);
    printf(" fp32 ours %% of peak | best fp32 library / ours | bf16 ours %% of peak | best bf16 "
           "library / ours |\n|---|---:|---:|---:|");
    for (int v = 0; v < NV; v++)
        printf("---:|");
    printf("---:|---:|---:|---:|\n");

    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int M = Ms[mi], N = layers[l].N, K = layers[l].K;
            problem p = {.M = M, .N = N, .K = K, .nt = nt};
            float *x = rnd_array((size_t)M * K, 1, 1.0f), *w = rnd_array((size_t)N * K, 2, 0.1f);
            float *b = rnd_array((size_t)N, 3, 0.1f);
            p.x = x, p.w = w, p.b = b;
            p.y = aligned_alloc(64, ((size_t)M * N * sizeof(float) + 63) / 64 * 64);
            void *ctx[NV] = {0};
            for (int v = 0; v < NV; v++)
                if (!variants[v].unavailable())
                    ctx[v] = variants[v].setup(&p);
            const double flops = 2.0 * M * N * K;
            /* Enough repetitions for ~30 ms per timing at 200 GFLOP/s. */
            int reps = (int)(6e9 / flops);
            reps = reps < 1 ? 1 : reps;
            double t[NV][64];
            for (int v = 0; v < NV; v++)
                if (ctx[v])
                    variants[v].run(ctx[v], &p, &par); /* warm */
            for (int r = 0; r < rounds; r++) {
                peaks[r] = peak > 0 ? peak_gflops(&par, 1) : 0;
                peaks32[r] = peak32 > 0 ? peak_gflops(&par, 0) : 0;
                for (int v = 0; v < NV; v++) {
                    if (!ctx[v])
                        continue;
                    const double t0 = now_s();
                    for (int i = 0; i < reps; i++)
                        variants[v].run(ctx[v], &p, &par);
                    t[v][r] = (now_s() - t0) / reps;
                }
            }
            const double pk[2] = {median(peaks32, rounds), median(peaks, rounds)};
            double gf[NV], ours[2] = {0, 0}, best_lib[2] = {0, 0};
            printf("| %s | %d | %d | %d |", layers[l].name, M, N, K);
            for (int v = 0; v < NV; v++) {
                gf[v] = ctx[v] ? flops / median(t[v], rounds) * 1e-9 : 0;
                if (ctx[v])
                    printf(" %.1f |", gf[v]);
                else
                    printf(" — |");
                const variant_kind k = variants[v].kind;
                if (k == OURS_FP32 || k == OURS_BF16)
                    ours[k == OURS_BF16] = gf[v];
                else if (gf[v] > best_lib[k == LIB_BF16])
                    best_lib[k == LIB_BF16] = gf[v];
            }
            for (int q = 0; q < 2; q++) {
                if (ours[q] > 0 && pk[q] > 0)
                    printf(" %.0f %% |", 100 * ours[q] / pk[q]);
                else
                    printf(" — |");
                if (ours[q] > 0)
                    printf(" %.2f |", best_lib[q] / ours[q]);
                else
                    printf(" — |");
            }
            printf("\n");
            fflush(stdout);
            for (int v = 0; v < NV; v++)
                if (ctx[v])
                    variants[v].destroy(ctx[v]);
            free(x);
            free(w);
            free(b);
            free(p.y);
        }
    tp_destroy(pool);
    return 0;
}

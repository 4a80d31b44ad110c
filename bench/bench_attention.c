/* bench_attention.c — times every attention backend on encoder shapes.
 *
 * First measures this machine's FP32 FMA peak (kernels/peak.h) on one thread
 * and on all threads, then runs each backend × shape × head_dim × thread
 * count and prints ms (median of the reps), GFLOP/s (attn_flops), percent of
 * the measured peak for that thread count, workspace bytes and, for backends
 * other than naive, the speedup over naive on the same case. --json prints
 * one JSON object per line instead. A benchmark reports; it asserts nothing.
 *
 * Where the CPU has AVX512_BF16 it also measures the vdpbf16ps peak the same
 * way (kernels/peak_avx512bf16.c), and a bf16 backend's %peak columns are
 * against that peak, its own ceiling, not the FP32 one.
 *
 * Shared machines: the cpu% column is process CPU time / (wall time ×
 * threads) over the reps; below ~95% other processes took the cores, and
 * %peak(cpu) — GFLOP per CPU-second against the peak measured the same way —
 * shows what the kernel reaches on the cycles it actually got.
 *
 *   bench_attention [--json] [--backends naive,fused,bf16] [--threads 1,2]
 *                   [--shapes 32x128,8x512,1x2048,1x8192c] [--dims 32,64]
 *                   [--heads 12] [--kv-heads 0] [--window 0] [--reps 5] [--budget 2]
 *                   [--naive-max-gflop 60]
 *
 * A shape is BATCHxSEQ, with a trailing c for causal. --budget caps the
 * seconds spent on one case, so slow cases get a single rep. naive streams
 * all keys through the cache once per query row and runs at 1 GFLOP/s or less
 * on long sequences, so it skips cases above --naive-max-gflop GFLOP (by
 * default it runs 1x8192c at head_dim 32, about a minute, but not at 64,
 * which would take two more); the skip is printed. --kv-heads N gives K and V
 * N heads (grouped-query attention; N divides --heads, 0 = as many as the
 * queries) and --window W a sliding window of W keys either side
 * (attention.h); both apply to every case and are printed once (and in
 * every --json line). GFLOP/s counts only the (query, key) pairs the window
 * leaves (attn_flops), so a windowed case's ms, not its rate, shows the work
 * it skips. */
#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/peak.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 16

typedef struct {
    int batch, seq, causal;
} bench_shape;

typedef struct {
    int json;
    const char *backends[MAX_LIST];
    int nbackends;
    int threads[MAX_LIST];
    int nthreads;
    bench_shape shapes[MAX_LIST];
    int nshapes;
    int dims[MAX_LIST];
    int ndims;
    int heads, kv_heads, window, reps;
    double budget_s, naive_max_gflop;
} bench_opts;

/* ---- options -------------------------------------------------------------------- */

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--json] [--backends naive,fused,bf16] [--threads 1,N] "
            "[--shapes 32x128,8x512,1x2048,1x8192c] [--dims 32,64] [--heads 12] "
            "[--kv-heads 0] [--window 0] [--reps 5] [--budget 2] [--naive-max-gflop 60]\n",
            argv0);
    exit(2);
}

/* Splits a comma list in place; returns the number of items. */
static int split(char *s, char **items) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < MAX_LIST; tok = strtok(NULL, ","))
        items[n++] = tok;
    return n;
}

static int parse_ints(char *s, int *out, int min) {
    char *items[MAX_LIST];
    int n = split(s, items);
    for (int i = 0; i < n; i++) {
        out[i] = atoi(items[i]);
        if (out[i] < min)
            return -1;
    }
    return n;
}

static int parse_shapes(char *s, bench_shape *out) {
    char *items[MAX_LIST];
    int n = split(s, items);
    for (int i = 0; i < n; i++) {
        char c = 0;
        int got = sscanf(items[i], "%dx%d%c", &out[i].batch, &out[i].seq, &c);
        if (got < 2 || out[i].batch < 1 || out[i].seq < 1 || (got == 3 && c != 'c'))
            return -1;
        out[i].causal = got == 3;
    }
    return n;
}

static void parse_opts(int argc, char **argv, bench_opts *o) {
    static char default_shapes[] = "32x128,8x512,1x2048,1x8192c", default_dims[] = "32,64",
                default_backends[] = "naive,fused,bf16";
    const int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    *o = (bench_opts){.heads = 12, .reps = 5, .budget_s = 2.0, .naive_max_gflop = 60.0};
    o->nshapes = parse_shapes(default_shapes, o->shapes);
    o->ndims = parse_ints(default_dims, o->dims, 1);
    o->nbackends = split(default_backends, (char **)o->backends);
    o->threads[o->nthreads++] = 1;
    if (ncpu > 1)
        o->threads[o->nthreads++] = ncpu;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            continue;
        }
        if (!val)
            usage(argv[0]);
        i++;
        if (strcmp(a, "--backends") == 0)
            o->nbackends = split(val, (char **)o->backends);
        else if (strcmp(a, "--threads") == 0)
            o->nthreads = parse_ints(val, o->threads, 1);
        else if (strcmp(a, "--shapes") == 0)
            o->nshapes = parse_shapes(val, o->shapes);
        else if (strcmp(a, "--dims") == 0)
            o->ndims = parse_ints(val, o->dims, 1);
        else if (strcmp(a, "--heads") == 0)
            o->heads = atoi(val);
        else if (strcmp(a, "--kv-heads") == 0)
            o->kv_heads = atoi(val);
        else if (strcmp(a, "--window") == 0)
            o->window = atoi(val);
        else if (strcmp(a, "--reps") == 0)
            o->reps = atoi(val);
        else if (strcmp(a, "--budget") == 0)
            o->budget_s = atof(val);
        else if (strcmp(a, "--naive-max-gflop") == 0)
            o->naive_max_gflop = atof(val);
        else
            usage(argv[0]);
    }
    if (o->nbackends < 1 || o->nthreads < 1 || o->nshapes < 1 || o->ndims < 1 || o->heads < 1 ||
        o->reps < 1 || o->budget_s <= 0 || o->window < 0 || o->kv_heads < 0 ||
        (o->kv_heads > 0 && o->heads % o->kv_heads != 0))
        usage(argv[0]);
}

/* ---- peak ------------------------------------------------------------------------- */

typedef struct {
    attn_simd path;
    int bf16; /* the vdpbf16ps loop instead of the FMA loop of path */
    long iters;
} peak_job;

static double peak_loop(const peak_job *j, long iters) {
    return j->bf16 ? attn_peak_bf16(iters) : attn_peak_fma(j->path, iters);
}

static void peak_task(void *ctx, size_t task, int worker) {
    (void)task;
    (void)worker;
    const peak_job *j = ctx;
    peak_loop(j, j->iters);
}

typedef struct {
    double wall, cpu; /* GFLOP per wall second, per CPU second × threads */
} peak_rate;

/* Best of three runs: noise from other processes only ever lowers the rate.
 * On several threads the work is cut into many chunks so a worker that starts
 * late does not leave the others idle at the end. */
static peak_rate measure_peak(tp_pool *pool, attn_simd path, int bf16) {
    const int nt = tp_nthreads(pool);
    const size_t chunks = 16 * (size_t)nt;
    attn_parallel par = tp_parallel(pool);
    peak_job job = {path, bf16, 1000};
    if (peak_loop(&job, 1) == 0)
        return (peak_rate){0.0, 0.0};
    /* Size the chunks to about 20 ms each. */
    for (;;) {
        double t0 = now_s();
        peak_loop(&job, job.iters);
        if (now_s() - t0 > 0.02 || job.iters > (1L << 40))
            break;
        job.iters *= 2;
    }
    const double flops = peak_loop(&job, job.iters) * (double)chunks;
    peak_rate best = {0.0, 0.0};
    for (int r = 0; r < 3; r++) {
        const double t0 = now_s(), c0 = cpu_s();
        par.parallel_for(par.impl, chunks, peak_task, &job);
        const double g = flops / (now_s() - t0) * 1e-9, gc = flops / (cpu_s() - c0) * 1e-9 * nt;
        best.wall = g > best.wall ? g : best.wall;
        best.cpu = gc > best.cpu ? gc : best.cpu;
    }
    return best;
}

/* ---- one case ---------------------------------------------------------------------- */

typedef struct {
    double ms, gflops;
    double cpu_frac;   /* CPU time / (wall time × threads) over the reps */
    double gflops_cpu; /* GFLOP per CPU second × threads */
    size_t ws_bytes;
    int reps;
    int rc;
} bench_result;

static float frand(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static bench_result run_case(const attn_backend *be, const attn_problem *p, tp_pool *pool,
                             const bench_opts *o) {
    bench_result r = {0};
    attn_parallel par = tp_parallel(pool);
    r.ws_bytes = be->workspace_size(&p->shape, par.nthreads);
    void *ws = r.ws_bytes ? aligned_alloc(64, (r.ws_bytes + 63) / 64 * 64) : NULL;
    if (r.ws_bytes && !ws) {
        r.rc = -1;
        return r;
    }
    double times[64], wall = 0.0, cpu = 0.0;
    const int cap = o->reps < 64 ? o->reps : 64;
    /* The first run warms caches and the pool; it counts as a rep only when
     * the case is slow enough that the budget allows few runs. */
    double t0 = now_s(), c0 = cpu_s();
    r.rc = be->forward(p, ws, r.ws_bytes, &par);
    const double first = now_s() - t0, first_cpu = cpu_s() - c0;
    int n = 0, want = cap;
    if (first * cap > o->budget_s) {
        want = (int)(o->budget_s / first);
        want = want < 1 ? 1 : want;
        times[n++] = first;
        wall += first;
        cpu += first_cpu;
    }
    while (r.rc == ATTN_OK && n < want) {
        t0 = now_s();
        c0 = cpu_s();
        be->forward(p, ws, r.ws_bytes, &par);
        times[n++] = now_s() - t0;
        wall += times[n - 1];
        cpu += cpu_s() - c0;
    }
    free(ws);
    if (r.rc != ATTN_OK)
        return r;
    const double med = median(times, n);
    r.reps = n;
    r.ms = med * 1e3;
    r.gflops = attn_flops(p) / med * 1e-9;
    r.cpu_frac = cpu / (wall * par.nthreads);
    r.gflops_cpu = attn_flops(p) * n / cpu * 1e-9 * par.nthreads;
    return r;
}

/* ---- main ---------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    bench_opts o;
    parse_opts(argc, argv, &o);
    const attn_simd path = attn_simd_active();

    tp_pool *pools[MAX_LIST];
    peak_rate peak[MAX_LIST], peak_bf16[MAX_LIST];
    for (int t = 0; t < o.nthreads; t++) {
        pools[t] = tp_create(o.threads[t]);
        if (!pools[t]) {
            fprintf(stderr, "cannot start %d threads\n", o.threads[t]);
            return 1;
        }
        peak[t] = measure_peak(pools[t], path, 0);
        peak_bf16[t] = measure_peak(pools[t], path, 1);
        if (o.json)
            printf("{\"peak_gflops\": %.1f, \"peak_gflops_cpu\": %.1f, \"bf16_peak_gflops\": "
                   "%.1f, \"bf16_peak_gflops_cpu\": %.1f, \"threads\": %d, \"simd\": \"%s\"}\n",
                   peak[t].wall, peak[t].cpu, peak_bf16[t].wall, peak_bf16[t].cpu, o.threads[t],
                   attn_simd_name(path));
        else {
            printf("FP32 FMA peak (%s, register-only loop, best of 3) on %d thread%s: "
                   "%.1f GFLOP/s wall, %.1f per CPU second\n",
                   attn_simd_name(path), o.threads[t], o.threads[t] > 1 ? "s" : "", peak[t].wall,
                   peak[t].cpu);
            if (peak_bf16[t].wall > 0)
                printf("BF16 vdpbf16ps peak (register-only loop, best of 3) on %d thread%s: "
                       "%.1f GFLOP/s wall, %.1f per CPU second\n",
                       o.threads[t], o.threads[t] > 1 ? "s" : "", peak_bf16[t].wall,
                       peak_bf16[t].cpu);
        }
    }
    if (!o.json && (o.kv_heads > 0 || o.window > 0))
        printf("\n%d query heads over %d K/V heads; window %d%s\n", o.heads,
               o.kv_heads > 0 ? o.kv_heads : o.heads, o.window, o.window ? "" : " (none)");
    if (!o.json)
        printf("\n%-7s %-10s %-7s %3s %3s %6s %10s %8s %6s %5s %9s %9s %7s %4s\n", "backend",
               "simd", "shape", "D", "thr", "causal", "ms", "GFLOP/s", "%peak", "cpu%",
               "%peak(cpu)", "workspace", "xnaive", "reps");

    for (int s = 0; s < o.nshapes; s++)
        for (int di = 0; di < o.ndims; di++) {
            const bench_shape sh = o.shapes[s];
            const int D = o.dims[di], H = o.heads, Hkv = o.kv_heads > 0 ? o.kv_heads : H;
            const int32_t T = sh.batch * sh.seq;
            const size_t n = (size_t)T * (size_t)H * (size_t)D;
            const size_t nkv = (size_t)T * (size_t)Hkv * (size_t)D;
            int32_t *cu = malloc(((size_t)sh.batch + 1) * sizeof *cu);
            float *q = malloc(n * sizeof *q), *k = malloc(nkv * sizeof *k),
                  *v = malloc(nkv * sizeof *v), *out = malloc(n * sizeof *out);
            if (!cu || !q || !k || !v || !out) {
                fprintf(stderr, "out of memory for %dx%d D=%d\n", sh.batch, sh.seq, D);
                return 1;
            }
            unsigned seed = 12345u;
            for (size_t i = 0; i < n; i++) {
                q[i] = frand(&seed);
                if (i < nkv) {
                    k[i] = frand(&seed);
                    v[i] = frand(&seed);
                }
            }
            for (int b = 0; b <= sh.batch; b++)
                cu[b] = b * sh.seq;
            const attn_shape shape = {.batch = sh.batch,
                                      .total_tokens = T,
                                      .max_seqlen = sh.seq,
                                      .heads = H,
                                      .head_dim = D,
                                      .causal = sh.causal,
                                      .kv_heads = o.kv_heads,
                                      .window = o.window};
            attn_problem p;
            attn_problem_dense(&p, shape, cu, q, k, v, out);

            for (int t = 0; t < o.nthreads; t++) {
                double naive_ms = 0.0;
                for (int bi = 0; bi < o.nbackends; bi++) {
                    const attn_backend *be = attn_backend_find(o.backends[bi]);
                    if (!be) {
                        fprintf(stderr, "unknown backend '%s' (valid: %s)\n", o.backends[bi],
                                attn_backend_names());
                        return 1;
                    }
                    if (attn_backend_supports(be, &shape, NULL, 0) != ATTN_OK)
                        continue;
                    if (strcmp(be->name, "naive") == 0 &&
                        attn_flops(&p) * 1e-9 > o.naive_max_gflop) {
                        if (!o.json)
                            printf("naive   skipped: %dx%d%s D=%d is %.0f GFLOP > "
                                   "--naive-max-gflop %.0f\n",
                                   sh.batch, sh.seq, sh.causal ? "c" : "", D, attn_flops(&p) * 1e-9,
                                   o.naive_max_gflop);
                        continue;
                    }
                    const bench_result r = run_case(be, &p, pools[t], &o);
                    if (r.rc != ATTN_OK) {
                        fprintf(stderr, "%s failed: %s\n", be->name, attn_strerror(r.rc));
                        return 1;
                    }
                    if (strcmp(be->name, "naive") == 0)
                        naive_ms = r.ms;
                    /* A bf16 backend against the vdpbf16ps peak, its ceiling. */
                    const peak_rate pk = be->precision == ATTN_PREC_BF16 ? peak_bf16[t] : peak[t];
                    const double pct = 100.0 * r.gflops / pk.wall,
                                 pct_cpu = 100.0 * r.gflops_cpu / pk.cpu;
                    if (o.json) {
                        printf("{\"backend\": \"%s\", \"simd\": \"%s\", \"batch\": %d, "
                               "\"seq\": %d, \"heads\": %d, \"kv_heads\": %d, \"window\": %d, "
                               "\"head_dim\": %d, \"causal\": %s, \"threads\": %d, \"ms\": %.4f, "
                               "\"gflops\": %.2f, "
                               "\"peak_gflops\": %.1f, \"pct_peak\": %.1f, \"cpu_pct\": %.1f, "
                               "\"pct_peak_cpu\": %.1f, \"workspace_bytes\": %zu, "
                               "\"reps\": %d}\n",
                               be->name, be->simd_path(), sh.batch, sh.seq, H, Hkv, o.window, D,
                               sh.causal ? "true" : "false", o.threads[t], r.ms, r.gflops, pk.wall,
                               pct, 100.0 * r.cpu_frac, pct_cpu, r.ws_bytes, r.reps);
                    } else {
                        char shape_s[32], speed[16] = "";
                        snprintf(shape_s, sizeof shape_s, "%dx%d", sh.batch, sh.seq);
                        if (naive_ms > 0 && strcmp(be->name, "naive") != 0)
                            snprintf(speed, sizeof speed, "%.1fx", naive_ms / r.ms);
                        printf("%-7s %-10s %-7s %3d %3d %6s %10.3f %8.1f %5.1f%% %4.0f%% %9.1f%% "
                               "%9zu %7s %4d\n",
                               be->name, be->simd_path(), shape_s, D, o.threads[t],
                               sh.causal ? "yes" : "no", r.ms, r.gflops, pct, 100.0 * r.cpu_frac,
                               pct_cpu, r.ws_bytes, speed, r.reps);
                    }
                    fflush(stdout);
                }
            }
            free(cu);
            free(q);
            free(k);
            free(v);
            free(out);
        }
    for (int t = 0; t < o.nthreads; t++)
        tp_destroy(pools[t]);
    return 0;
}

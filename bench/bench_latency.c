/* bench_latency.c — where one small forward spends its time: the latency of
 * bert_forward at batch 1 (by default 12 tokens, all threads), stage by stage,
 * and the fixed costs under it: one parallel_for on the pool, and each of the
 * model's GEMMs at this many rows as the service runs them (gemm_run, fp32:
 * the packed kernel on the AVX-512 path, OpenBLAS's sgemm elsewhere), as one
 * call on one thread and split over the pool.
 *
 *   bench_latency [--model DIR] [--threads N] [--tokens 12] [--batch 1]
 *                 [--reps 2000] [--backend fused] [--gap-us 0] [--spin-us 50]
 *                 [--forward-only] [--json]
 *
 * --threads 0 (the default) means every online core. --gap-us sleeps that
 * long between forwards, as a server does between requests, so the cost of
 * waking a pool that has gone to sleep is in the numbers; 0 runs them back
 * to back. Every figure is the median over the reps (p99 where said);
 * cpu/fwd is process CPU time per forward: more than the wall time × threads
 * would mean a worker burns cycles while it waits. --spin-us sets the pool's
 * polling (tp_set_spin_us, the service's pool_spin_us). --forward-only skips the
 * pool and GEMM timings (for a profile of the forwards alone).
 *
 * The ids are fixed (a [CLS] … [SEP] frame around ordinary word-piece ids), so
 * no tokenizer runs: this measures the forward alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"
#include "model/bert.h"

typedef struct {
    const char *model_dir, *backend;
    int threads, tokens, batch, reps, gap_us, json, forward_only, spin_us;
} opts;

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--model DIR] [--threads N] [--tokens 12] [--batch 1] [--reps 2000] "
            "[--backend fused] [--gap-us 0] [--spin-us 50] [--forward-only] [--json]\n",
            argv0);
    exit(2);
}

static int int_arg(const char *s, int min, const char *argv0) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < min || v > 1000000)
        usage(argv0);
    return (int)v;
}

static void parse(int argc, char **argv, opts *o) {
    *o = (opts){.model_dir = "models/all-MiniLM-L6-v2",
                .backend = "fused",
                .tokens = 12,
                .batch = 1,
                .reps = 2000,
                .spin_us = TP_SPIN_US_DEFAULT};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            o->json = 1;
        else if (!strcmp(a, "--forward-only"))
            o->forward_only = 1;
        else if (!v)
            usage(argv[0]);
        else if (!strcmp(a, "--model"))
            o->model_dir = argv[++i];
        else if (!strcmp(a, "--backend"))
            o->backend = argv[++i];
        else if (!strcmp(a, "--threads"))
            o->threads = int_arg(argv[++i], 0, argv[0]);
        else if (!strcmp(a, "--tokens"))
            o->tokens = int_arg(argv[++i], 3, argv[0]);
        else if (!strcmp(a, "--batch"))
            o->batch = int_arg(argv[++i], 1, argv[0]);
        else if (!strcmp(a, "--reps"))
            o->reps = int_arg(argv[++i], 5, argv[0]);
        else if (!strcmp(a, "--gap-us"))
            o->gap_us = int_arg(argv[++i], 0, argv[0]);
        else if (!strcmp(a, "--spin-us"))
            o->spin_us = int_arg(argv[++i], 0, argv[0]);
        else
            usage(argv[0]);
    }
    if (o->threads == 0)
        o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
}

static void sleep_us(int us) {
    if (us > 0)
        nanosleep(&(struct timespec){.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000L},
                  NULL);
}

static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof v[0], bench_cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* ---- a pool that counts its loops ------------------------------------------------ */

typedef struct {
    attn_parallel inner;
    long calls, tasks;
} counting;

static void counting_for(void *impl, size_t ntasks, attn_task_fn fn, void *ctx) {
    counting *c = impl;
    c->calls++;
    c->tasks += (long)ntasks;
    c->inner.parallel_for(c->inner.impl, ntasks, fn, ctx);
}

static void noop_task(void *ctx, size_t task, int worker) {
    (void)ctx;
    (void)task;
    (void)worker;
}

/* Median µs of one parallel_for of nthreads empty tasks, gap_us apart. */
static double pool_call_us(const attn_parallel *par, int reps, int gap_us) {
    double *v = malloc((size_t)reps * sizeof *v);
    for (int r = 0; r < reps; r++) {
        sleep_us(gap_us);
        const double t0 = now_s();
        par->parallel_for(par->impl, (size_t)par->nthreads, noop_task, NULL);
        v[r] = (now_s() - t0) * 1e6;
    }
    const double m = median(v, reps);
    free(v);
    return m;
}

/* ---- GEMMs at few rows ----------------------------------------------------------- */

/* Thread CPU seconds: what a call costs whatever else shares the cores. */
static double thread_cpu_s(void) {
    return bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
}

typedef struct {
    double one_us, one_cpu_us; /* one call on the calling thread (wall, CPU) */
    double split_us;           /* split over the pool */
    double flops;
} gemm_time;

/* Weights cycle through `layers` copies so each call reads its weights from
 * where the model's would be (not all in L2 after the first rep). */
static gemm_time time_gemm(const attn_parallel *par, int T, int K, int N, int layers, int reps) {
    float **w = calloc((size_t)layers, sizeof *w);
    gemm_weights **pw = calloc((size_t)layers, sizeof *pw);
    float *b = calloc((size_t)N, sizeof *b);
    float *x = malloc((size_t)T * K * sizeof *x), *y = malloc((size_t)T * N * sizeof *y);
    char err[256];
    for (int l = 0; l < layers; l++) {
        w[l] = malloc((size_t)N * K * sizeof *w[l]);
        for (size_t i = 0; i < (size_t)N * K; i++)
            w[l][i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        if (gemm_pack(GEMM_FP32, w[l], b, N, K, &pw[l], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
    }
    for (size_t i = 0; i < (size_t)T * K; i++)
        x[i] = (float)(i % 7) * 0.1f;
    const size_t sb = gemm_scratch_bytes(pw[0], T, par->nthreads);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    enum { NV = 3 };
    double *v[NV];
    for (int i = 0; i < NV; i++)
        v[i] = malloc((size_t)reps * sizeof *v[i]);
    /* One loop per way of running, each cycling through the layers, so that
     * both find a call's weights as long untouched (interleaved, one way
     * would always run on weights the other had just read). */
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s(), c0 = thread_cpu_s();
        gemm_run(pw[r % layers], &attn_parallel_serial, x, (size_t)K, y, (size_t)N, T, NULL,
                 scratch);
        v[0][r] = (now_s() - t0) * 1e6;
        v[1][r] = (thread_cpu_s() - c0) * 1e6;
    }
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        gemm_run(pw[r % layers], par, x, (size_t)K, y, (size_t)N, T, NULL, scratch);
        v[2][r] = (now_s() - t0) * 1e6;
    }
    gemm_time g = {median(v[0], reps), median(v[1], reps), median(v[2], reps), 2.0 * T * K * N};
    for (int l = 0; l < layers; l++) {
        gemm_free(pw[l]);
        free(w[l]);
    }
    for (int i = 0; i < NV; i++)
        free(v[i]);
    free(scratch);
    free(pw);
    free(w);
    free(b);
    free(x);
    free(y);
    return g;
}

/* ---- main -------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    opts o;
    parse(argc, argv, &o);
    char err[512];
    bert_model *m = NULL;
    if (bert_load(o.model_dir, &m, err, sizeof err) != BERT_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const bert_config *cfg = bert_get_config(m);
    const attn_backend *be = attn_backend_find(o.backend);
    if (!be) {
        fprintf(stderr, "unknown backend %s (have %s)\n", o.backend, attn_backend_names());
        return 1;
    }
    const int T = o.tokens * o.batch;
    bert_workspace *ws = NULL;
    tp_pool *pool = tp_create(o.threads);
    if (pool)
        tp_set_spin_us(pool, (unsigned)o.spin_us);
    if (!pool || bert_workspace_create(m, T, o.threads, &be, 1, &ws, err, sizeof err) != BERT_OK) {
        fprintf(stderr, "%s\n", pool ? err : "cannot start the pool");
        return 1;
    }
    int32_t *ids = malloc((size_t)T * sizeof *ids), *cu = malloc(((size_t)o.batch + 1) * 4);
    float *out = malloc((size_t)o.batch * cfg->hidden_size * sizeof *out);
    for (int b = 0; b < o.batch; b++) {
        cu[b] = b * o.tokens;
        for (int t = 0; t < o.tokens; t++)
            ids[b * o.tokens + t] = t == 0              ? 101
                                    : t == o.tokens - 1 ? 102
                                                        : 1996 + (b * 31 + t * 17) % 5000;
    }
    cu[o.batch] = T;

    counting cnt = {.inner = tp_parallel(pool)};
    const attn_parallel par = {.nthreads = o.threads, .parallel_for = counting_for, .impl = &cnt};

    /* Warm-up: pages, caches, OpenBLAS buffers. */
    for (int r = 0; r < 20; r++)
        if (bert_forward(m, ws, be, &par, ids, cu, o.batch, out, err, sizeof err) != BERT_OK) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    const long calls_per_fwd = cnt.calls / 20, tasks_per_fwd = cnt.tasks / 20;

    enum { NSTAGE = 8 };
    static const char *const names[NSTAGE] = {"embeddings", "qkv",   "attention", "out_proj",
                                              "ffn",        "norms", "pooling",   "total"};
    double *wall = malloc((size_t)o.reps * sizeof *wall);
    double *cpu = malloc((size_t)o.reps * sizeof *cpu);
    double *stage[NSTAGE];
    for (int s = 0; s < NSTAGE; s++)
        stage[s] = malloc((size_t)o.reps * sizeof *stage[s]);
    const double start = now_s(), cpu_start = cpu_s();
    for (int r = 0; r < o.reps; r++) {
        sleep_us(o.gap_us);
        const double t0 = now_s(), c0 = cpu_s();
        bert_forward(m, ws, be, &par, ids, cu, o.batch, out, err, sizeof err);
        wall[r] = (now_s() - t0) * 1e6;
        cpu[r] = (cpu_s() - c0) * 1e6;
        const bert_stage_ns *st = bert_workspace_stage_ns(ws);
        const uint64_t v[NSTAGE] = {st->embeddings, st->qkv,   st->attention, st->out_proj,
                                    st->ffn,        st->norms, st->pooling,   0};
        for (int s = 0; s < NSTAGE - 1; s++)
            stage[s][r] = (double)v[s] * 1e-3;
        stage[NSTAGE - 1][r] = wall[r];
    }
    const double elapsed = now_s() - start, cpu_all = cpu_s() - cpu_start;
    const double p50 = pct(wall, o.reps, 0.5), p99 = pct(wall, o.reps, 0.99);
    const double cpu50 = median(cpu, o.reps);

    /* Fixed costs, after the forwards so they do not disturb them. */
    const attn_parallel raw = tp_parallel(pool);
    const int fixed_reps = o.forward_only ? 5 : o.reps < 500 ? o.reps : 500;
    const double call_hot = pool_call_us(&raw, o.forward_only ? 5 : o.reps, 0);
    const double call_cold = pool_call_us(&raw, fixed_reps, 1000);
    const int C = cfg->hidden_size, F = cfg->intermediate_size, L = cfg->num_layers;
    const struct {
        const char *name;
        int K, N;
    } shapes[4] = {{"qkv", C, 3 * C}, {"out_proj", C, C}, {"ffn_in", C, F}, {"ffn_out", F, C}};
    gemm_time g[4];
    for (int i = 0; i < 4; i++)
        g[i] = time_gemm(&raw, T, shapes[i].K, shapes[i].N, L, fixed_reps);

    if (o.json) {
        printf(
            "{\"kind\": \"latency\", \"threads\": %d, \"tokens\": %d, \"batch\": %d, "
            "\"backend\": \"%s\", \"gap_us\": %d, \"spin_us\": %d, \"reps\": %d, \"p50_us\": %.1f, "
            "\"p99_us\": %.1f, \"cpu_us\": %.1f, \"cpu_util\": %.3f, \"loops\": %ld, "
            "\"tasks\": %ld, \"pool_call_us\": %.2f, \"pool_call_cold_us\": %.2f",
            o.threads, o.tokens, o.batch, be->name, o.gap_us, o.spin_us, o.reps, p50, p99, cpu50,
            cpu_all / (elapsed * o.threads), calls_per_fwd, tasks_per_fwd, call_hot, call_cold);
        for (int s = 0; s < NSTAGE - 1; s++)
            printf(", \"%s_us\": %.1f", names[s], median(stage[s], o.reps));
        for (int i = 0; i < 4; i++)
            printf(", \"gemm_%s\": {\"one_thread_us\": %.1f, \"one_thread_cpu_us\": %.1f, "
                   "\"split_us\": %.1f}",
                   shapes[i].name, g[i].one_us, g[i].one_cpu_us, g[i].split_us);
        printf("}\n");
    } else {
        printf("bert_forward: %d x %d tokens, %d threads, backend %s, gap %d us, %d reps\n",
               o.batch, o.tokens, o.threads, be->name, o.gap_us, o.reps);
        printf("  forward  p50 %.1f us  p99 %.1f us  cpu/fwd %.1f us  (cpu use %.0f%% of %d "
               "threads)\n",
               p50, p99, cpu50, 100.0 * cpu_all / (elapsed * o.threads), o.threads);
        printf("  pool loops per forward %ld (%ld tasks); one empty parallel_for: %.2f us back to "
               "back, %.2f us after 1 ms idle\n",
               calls_per_fwd, tasks_per_fwd, call_hot, call_cold);
        printf("  stage medians (us):");
        for (int s = 0; s < NSTAGE - 1; s++)
            printf(" %s %.1f", names[s], median(stage[s], o.reps));
        printf("\n  GEMMs at M=%d, us (median; x%d layers in a forward), fp32 as gemm_run runs "
               "them here (%s). 1 thr = one call on one thread, wall [thread CPU]; split = over "
               "the pool\n",
               T, L,
               attn_simd_active() == ATTN_SIMD_AVX512 ? "the packed AVX-512 kernel"
                                                      : "OpenBLAS sgemm");
        double sum[3] = {0};
        for (int i = 0; i < 4; i++) {
            printf("    %-8s K=%4d N=%4d  1 thr %6.1f [%6.1f] split %6.1f   (GFLOP/thread-CPU-s "
                   "%5.1f)\n",
                   shapes[i].name, shapes[i].K, shapes[i].N, g[i].one_us, g[i].one_cpu_us,
                   g[i].split_us, g[i].flops / g[i].one_cpu_us * 1e-3);
            const double add[3] = {g[i].one_us, g[i].one_cpu_us, g[i].split_us};
            for (int k = 0; k < 3; k++)
                sum[k] += add[k] * L;
        }
        printf("    all GEMMs of a forward: 1 thr %.0f [%.0f] split %.0f\n", sum[0], sum[1],
               sum[2]);
    }
    for (int s = 0; s < NSTAGE; s++)
        free(stage[s]);
    free(wall);
    free(cpu);
    free(ids);
    free(cu);
    free(out);
    bert_workspace_free(ws);
    tp_destroy(pool);
    bert_free(m);
    return 0;
}

/* bench_gemm_int8.c — the int8 GEMM on all-MiniLM-L6-v2's linear layers
 * against this machine's int8 peak (a register-only vpdpbusd loop, see
 * kernels/peak.h), on 1 and 2 threads.
 *
 * Usage: bench_gemm_int8 [threads (2)] [seconds per shape (0.3)]. Prints one
 * line per (M, N, K): median time, GOP/s (2·M·N·K / t) and % of the int8
 * peak's median measured in the same run on the same threads; then the
 * fastest run against the peak's best (less exposed to a loaded machine),
 * and GOP per CPU-second against the peak's (%cpu: not exposed to it). */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "kernels/gemm.h"
#include "kernels/peak.h"
#include "kernels/threadpool.h"

typedef struct {
    long iters;
} peak_job;

static void peak_task(void *ctx, size_t task, int worker) {
    (void)task;
    (void)worker;
    attn_peak_int8(((const peak_job *)ctx)->iters);
}

/* Integer operations per second of the peak loop with every worker running
 * it: median and best of many 2 ms bursts, so that on a shared machine the
 * peak meets the same preemption as the GEMMs it is compared with. */
static void peak_ops(const attn_parallel *par, double *med, double *best) {
    peak_job j = {.iters = 50000};
    double r[101];
    *best = 0.0;
    for (int i = 0; i < 101; i++) {
        const double t0 = now_s();
        par->parallel_for(par->impl, (size_t)par->nthreads, peak_task, &j);
        r[i] = (double)j.iters * 16 * 64 * 2 * par->nthreads / (now_s() - t0);
        *best = r[i] > *best ? r[i] : *best;
    }
    *med = median(r, 101);
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const double budget = argc > 2 ? atof(argv[2]) : 0.3;
    const char *why = gemm_unsupported(GEMM_INT8);
    if (why) {
        printf("int8 GEMM not run: %s\n", why);
        return 0;
    }
    tp_pool *pool = tp_create(threads);
    attn_parallel par = tp_parallel(pool);
    double peak, peak_best;
    peak_ops(&par, &peak, &peak_best);
    printf("int8 peak (vpdpbusd, %d threads): median %.0f GOP/s, best %.0f\n", threads, peak * 1e-9,
           peak_best * 1e-9);
    /* Per CPU-second on one thread: what a core does while it runs, whatever
     * the preemption; the GEMM's CPU time includes its workers' waits. */
    const double c0 = cpu_s();
    attn_peak_int8(2000000);
    const double peak_cpu = 2000000.0 * 16 * 64 * 2 / (cpu_s() - c0);
    printf("int8 peak per CPU-second: %.0f GOP/s\n", peak_cpu * 1e-9);
    printf("%6s %5s %5s %10s %9s %7s %9s %7s %8s\n", "M", "N", "K", "median_us", "GOP/s", "%peak",
           "best_us", "%best", "%cpu");
    static const int nk[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};
    static const int ms[] = {12, 384, 4096};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t s = 0; s < sizeof nk / sizeof nk[0]; s++) {
            const int M = ms[mi], N = nk[s][0], K = nk[s][1];
            float *w = malloc(sizeof(float) * (size_t)N * K), *b = calloc((size_t)N, sizeof(float));
            float *x = malloc(sizeof(float) * (size_t)M * K),
                  *y = malloc(sizeof(float) * (size_t)M * N);
            for (size_t i = 0; i < (size_t)N * K; i++)
                w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
            for (size_t i = 0; i < (size_t)M * K; i++)
                x[i] = (float)((i * 40503u) % 997) / 997.0f - 0.5f;
            gemm_weights *pw = NULL;
            char err[128];
            if (gemm_pack(GEMM_INT8, w, b, N, K, &pw, err, sizeof err) != 0) {
                printf("pack failed: %s\n", err);
                return 1;
            }
            void *scratch = malloc(gemm_scratch_bytes(pw, M, threads));
            double t[200], c[200];
            int n = 0;
            const double start = now_s();
            while (n < 200 && (n < 5 || now_s() - start < budget)) {
                const double t0 = now_s(), c0 = cpu_s();
                gemm_run(pw, &par, x, (size_t)K, y, (size_t)N, M, NULL, scratch);
                c[n] = cpu_s() - c0;
                t[n++] = now_s() - t0;
            }
            const double med = median(t, n), ops = 2.0 * M * N * K / med, fastest = t[0];
            const double cpu = median(c, n);
            printf("%6d %5d %5d %10.1f %9.0f %6.1f%% %9.1f %6.1f%% %7.1f%%\n", M, N, K, med * 1e6,
                   ops * 1e-9, 100.0 * ops / peak, fastest * 1e6,
                   100.0 * 2.0 * M * N * K / fastest / peak_best,
                   100.0 * 2.0 * M * N * K / cpu / peak_cpu);
            free(scratch);
            gemm_free(pw);
            free(w);
            free(b);
            free(x);
            free(y);
        }
    tp_destroy(pool);
    return 0;
}

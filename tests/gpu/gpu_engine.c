/* gpu_engine.c — the cuda engine through the engine contract, on a GPU:
 * golden embeddings against the fp32 CPU engine and PyTorch's vectors, and
 * embeddings/s against the CPU engines. Built and run by tests/gpu/run.sh,
 * linked with the core library only: the engine comes from the plugin
 * directory, as the service loads it. Exit 3 (NOT RUN) where the registry
 * does not offer it.
 *
 * Floors (cosine per golden sentence):
 *   fp32 against PyTorch and the CPU fp32 engine: 0.99999, as test_model.c
 *     and test_engine.c hold the CPU engines (the GEMMs run in true fp32,
 *     CUBLAS_COMPUTE_32F, no TF32);
 *   bf16 against the CPU fp32 engine: 0.9999, the service's start-up floor
 *     for bf16 (server/ops/engine.c), which the engine must meet to be served.
 * A model directory other than models/all-MiniLM-L6-v2 (a copy converted to
 * fp16 to travel to an offline GPU machine, say) is compared with the CPU
 * engine on the same weights; PyTorch's vectors are then printed, not
 * checked, since they were made from the original fp32 weights.
 * Throughput: batch 128 of 64-token sequences (synthetic ids, [CLS] .. [SEP]),
 * median of 10 forwards (3 for the CPU engine); printed, never asserted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engines/engine.h"
#include "kernels/threadpool.h"
#include "tests/unit/golden_embeddings.h"

static const char *model_dir = "models/all-MiniLM-L6-v2";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

/* A golden text, quoted, its first 60 bytes: bytes outside printable ASCII
 * (the NUL one text holds, escapes, UTF-8) as \xNN. */
static void print_text(const char *s, size_t len) {
    putchar('"');
    for (size_t i = 0; i < len && i < 60; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            putchar(c);
        else
            printf("\\x%02x", c);
    }
    printf("\"%s\n", len > 60 ? "..." : "");
}

static engine *make(const engine_iface *t, gemm_precision p, tp_pool *pool,
                    const attn_backend *const *backends, int max_tokens, int max_seqs) {
    const engine_options o = {.model_dir = model_dir,
                              .precision = p,
                              .max_tokens = max_tokens,
                              .max_seqs = max_seqs,
                              .nthreads = tp_nthreads(pool),
                              .backends = backends,
                              .nbackends = 1};
    engine *e = NULL;
    char err[512] = "";
    const int rc = engine_create(t, &o, &e, err, sizeof err);
    if (rc != ENGINE_OK) {
        printf("FAILED: engine_create(%s, %s): %s: %s\n", t->name, engine_precision_name(p),
               engine_strerror(rc), err);
        return NULL;
    }
    return e;
}

static int run(engine *e, tp_pool *pool, const int32_t *ids, const int32_t *cu, int n, float *out) {
    const attn_parallel par = tp_parallel(pool);
    const engine_batch b = {.ids = ids, .cu_seqlens = cu, .batch = n, .out = out};
    char err[256] = "";
    const int rc = engine_forward(e, &b, attn_backend_find("fused"), &par, NULL, err, sizeof err);
    if (rc != ENGINE_OK)
        printf("FAILED: forward on %s: %s\n", engine_name(e), err);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median embeddings/s of rounds forwards of the (B, L) batch. */
static double throughput(engine *e, tp_pool *pool, int B, int L, int rounds) {
    int32_t *ids = malloc((size_t)B * L * sizeof *ids), *cu = malloc((size_t)(B + 1) * sizeof *cu);
    float *out = malloc((size_t)B * 4096 * sizeof *out);
    unsigned s = 3;
    cu[0] = 0;
    for (int b = 0; b < B; b++) {
        cu[b + 1] = cu[b] + L;
        for (int t = 0; t < L; t++) {
            s = s * 1664525u + 1013904223u;
            ids[b * L + t] = t == 0 ? 101 : t == L - 1 ? 102 : 1000 + (int32_t)((s >> 8) % 20000);
        }
    }
    double r[16] = {0};
    run(e, pool, ids, cu, B, out); /* warm-up */
    for (int i = 0; i < rounds; i++) {
        const double t0 = now();
        run(e, pool, ids, cu, B, out);
        r[i] = B / (now() - t0);
    }
    qsort(r, (size_t)rounds, sizeof r[0], cmp_double);
    free(ids);
    free(cu);
    free(out);
    return r[rounds / 2];
}

int main(int argc, char **argv) {
    const char *plugins = argc > 1 ? argv[1] : "build/gpu-engines";
    if (argc > 2)
        model_dir = argv[2];
    char err[512] = "";
    /* The golden set first, so that a file it cannot read fails here too,
     * on a machine without a GPU. */
    golden_set gold;
    if (golden_set_load("mean_normalized", &gold, err, sizeof err) != 0) {
        printf("FAILED: %s\n", err);
        return 1;
    }
    engine_registry_init(plugins, err, sizeof err);
    const engine_entry *cu_e = engine_registry_find("cuda");
    if (!cu_e || !cu_e->offered) {
        printf("NOT RUN: the cuda engine is not offered: %s\n", cu_e ? cu_e->reason : "not found");
        golden_set_free(&gold);
        return 3;
    }
    const int n = gold.n, C = gold.dim;
    int32_t *cu = calloc((size_t)n + 1, sizeof *cu);
    for (int i = 0; i < n; i++)
        cu[i + 1] = cu[i] + gold.len[i];
    int32_t *ids = malloc((size_t)cu[n] * sizeof *ids);
    float *golden = malloc((size_t)n * C * sizeof *golden);
    for (int i = 0; i < n; i++) {
        memcpy(ids + cu[i], gold.ids[i], (size_t)gold.len[i] * sizeof *ids);
        memcpy(golden + (size_t)i * C, gold.emb[i], (size_t)C * sizeof *golden);
    }

    tp_pool *pool = tp_create(16);
    const attn_backend *backends[] = {attn_backend_find("fused")};
    const int MT = 8192, MS = 128;
    engine *cpu = make(&engine_cpu, GEMM_FP32, pool, backends, MT, MS);
    float *ref = malloc((size_t)n * C * sizeof *ref), *out = malloc((size_t)n * C * sizeof *out);
    if (!cpu || run(cpu, pool, ids, cu, n, ref) != ENGINE_OK)
        return 1;
    int failed = 0;
    static const gemm_precision ps[] = {GEMM_FP32, GEMM_BF16};
    static const double floors[] = {0.99999, 0.9999};
    double eps[2] = {0};
    for (int k = 0; k < 2; k++) {
        engine *g = make(cu_e->iface, ps[k], pool, backends, MT, MS);
        if (!g || run(g, pool, ids, cu, n, out) != ENGINE_OK) {
            failed++;
            continue;
        }
        double lo_cpu = 1.0, lo_torch = 1.0;
        int worst = 0;
        for (int i = 0; i < n; i++) {
            const double a = cosine(out + (size_t)i * C, ref + (size_t)i * C, C);
            const double b = cosine(out + (size_t)i * C, golden + (size_t)i * C, C);
            worst = a < lo_cpu ? i : worst;
            lo_cpu = a < lo_cpu ? a : lo_cpu;
            lo_torch = b < lo_torch ? b : lo_torch;
        }
        const int torch_checked = strcmp(model_dir, "models/all-MiniLM-L6-v2") == 0;
        const int ok =
            lo_cpu >= floors[k] && (ps[k] != GEMM_FP32 || !torch_checked || lo_torch >= floors[k]);
        failed += !ok;
        printf("golden %s: lowest cosine vs cpu fp32 %.7f, vs PyTorch %.7f%s, floor %g  %s\n",
               engine_precision_name(ps[k]), lo_cpu, lo_torch,
               torch_checked ? "" : " (not checked: other weights)", floors[k],
               ok ? "ok" : "FAILED");
        printf("  lowest vs cpu at golden %d: ", worst);
        print_text(gold.text[worst], gold.text_len[worst]);
        engine_memory m;
        engine_memory_of(g, &m);
        printf("  memory: weights %zu B on the device, workspace %zu B (device + pinned)\n",
               m.weights_owned, m.workspace);
        eps[k] = throughput(g, pool, 128, 64, 10);
        const engine_run *lr = engine_last_run(g);
        printf("  stages of the last forward (device ms): embeddings %.3f qkv %.3f attention %.3f "
               "out %.3f ffn %.3f pooling %.3f\n",
               lr->stages.embeddings / 1e6, lr->stages.qkv / 1e6, lr->stages.attention / 1e6,
               lr->stages.out_proj / 1e6, lr->stages.ffn / 1e6, lr->stages.pooling / 1e6);
        engine_destroy(g);
    }
    const double cpu_eps = throughput(cpu, pool, 128, 64, 3);
    printf("\nembeddings/s, batch 128 x 64 tokens: cuda fp32 %.0f, cuda bf16 %.0f, cpu fp32 (16 "
           "threads) %.0f; bf16/cpu = %.1fx (target >= 20x)\n",
           eps[0], eps[1], cpu_eps, cpu_eps > 0 ? eps[1] / cpu_eps : 0.0);
    engine_destroy(cpu);
    tp_destroy(pool);
    golden_set_free(&gold);
    free(golden);
    free(ids);
    free(cu);
    free(ref);
    free(out);
    printf("engine checks: %s (%d failed)\n", failed ? "FAILED" : "passed", failed);
    return failed ? 1 : 0;
}

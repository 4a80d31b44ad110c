/* gpu_engine.c — the cuda engine through the engine contract, on a GPU:
 * golden embeddings against the fp32 CPU engine and PyTorch's vectors, the
 * task models (classifier heads, Dense modules, every pooling) against the
 * fp32 CPU engine, and embeddings/s against the CPU engines. Built and run by tests/gpu/run.sh,
 * linked with the core library only: the engine comes from the plugin
 * directory, as the service loads it. Exit 3 (NOT RUN) where the registry
 * does not offer it.
 *
 * Floors (cosine per golden sentence):
 *   fp32 against PyTorch and the CPU fp32 engine: 0.99999, as test_model.c
 *     and test_engine.c hold the CPU engines (the GEMMs run in true fp32,
 *     CUBLAS_COMPUTE_32F, no TF32);
 *   bf16 against the CPU fp32 engine: 0.9999, the service's start-up floor
 *     for bf16 (server/ops/engine.c), which the engine must meet to be served;
 *   fp16 and tf32 against the CPU fp32 engine: 0.99999, the service's floor
 *     for both, derived from bf16's: they round to 10 explicit mantissa bits
 *     (unit roundoff 2^-11, bf16's 2^-8), so the relative error is 8x and
 *     1 - cosine 64x smaller: bf16's worst measured 8.2e-5 on these goldens
 *     (0.9999176, H200) predicts 1.3e-6, and the floor 1e-5 leaves 7.7x.
 *     fp16 is bf16's path with half storage (activations and weights in
 *     half, fp32 accumulation); tf32 keeps fp32 storage and rounds only the
 *     encoder GEMMs' inputs, so it should land below fp16's error.
 * A model directory other than models/all-MiniLM-L6-v2 (a copy converted to
 * fp16 to travel to an offline GPU machine, say) is compared with the CPU
 * engine on the same weights; PyTorch's vectors are then printed, not
 * checked, since they were made from the original fp32 weights.
 * Task models (gpu-engine PLUGINS MODEL TASK_DIR; TASK_DIR from
 * tests/gpu/task_models.py): see check_task_models for their floors.
 * Throughput: batch 128 of 64-token sequences (synthetic ids, [CLS] .. [SEP]),
 * median of 10 forwards (3 for the CPU engine); printed, never asserted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engines/engine.h"
#include "kernels/threadpool.h"
#include "model/safetensors.h"
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

static engine *make_at(const char *dir, const engine_iface *t, gemm_precision p, tp_pool *pool,
                       const attn_backend *const *backends, int max_tokens, int max_seqs) {
    const engine_options o = {.model_dir = dir,
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
        printf("FAILED: engine_create(%s, %s) on %s: %s: %s\n", t->name, engine_precision_name(p),
               dir, engine_strerror(rc), err);
        return NULL;
    }
    return e;
}

static engine *make(const engine_iface *t, gemm_precision p, tp_pool *pool,
                    const attn_backend *const *backends, int max_tokens, int max_seqs) {
    return make_at(model_dir, t, p, pool, backends, max_tokens, max_seqs);
}

static int run_typed(engine *e, tp_pool *pool, const int32_t *ids, const int32_t *types,
                     const int32_t *cu, int n, float *out) {
    const attn_parallel par = tp_parallel(pool);
    const engine_batch b = {
        .ids = ids, .type_ids = types, .cu_seqlens = cu, .batch = n, .out = out};
    char err[256] = "";
    const int rc = engine_forward(e, &b, attn_backend_find("fused"), &par, NULL, err, sizeof err);
    if (rc != ENGINE_OK)
        printf("FAILED: forward on %s: %s\n", engine_name(e), err);
    return rc;
}

static int run(engine *e, tp_pool *pool, const int32_t *ids, const int32_t *cu, int n, float *out) {
    return run_typed(e, pool, ids, NULL, cu, n, out);
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

/* ---- the task models ------------------------------------------------------------ */

/* tests/gpu/task_models.py's copies of the committed tiny task models. */
static const char *const task_models[] = {"bert-cls-tiny",     "xlmr-cls-tiny",
                                          "st-dense-max-tiny", "st-meansqrt-tiny",
                                          "st-lasttoken-tiny", "roberta-tiny-model"};

/* Floors against the fp32 CPU engine on the same directory:
 *   embedders, fp32: cosine >= 1 - 1e-6, test_task_models.c's floor and
 *     derivation for this 2-layer shape (rounding leaves ~1e-5 relative in
 *     the states: cosine 1 - 5e-11); the engine's pooling sums in fp32, at
 *     most len·2^-24 (4e-6 for len <= 128) relative, and its head and Dense
 *     GEMMs are true fp32 (CUBLAS_COMPUTE_32F), neither visible at that
 *     floor;
 *   embedders, bf16: cosine >= 0.9999, the service's bf16 floor, as
 *     test_task_models.c holds the CPU's bf16 (Dense modules stay fp32);
 *   classifiers, fp32: |Δ logit| <= 1e-4 · max(1, max|logit| / 3):
 *     test_task_models.c's bound for logits within ±3 (error ~3e-5 at
 *     worst), scaled with the logits where they are larger;
 *   embedders, fp16 and tf32: cosine >= 1 - 1e-5, bf16's 1e-4 over 64 (the
 *     unit roundoff 8x smaller, as for the goldens above) with 6x left;
 *   classifiers, bf16: |Δ logit_j| <= ρ · ||h|| · ||W1||_F · ||W2_j||, with
 *     ρ = 0.01414 test_task_models.c's bound on the first token's relative
 *     state error in bf16 (MAX_STATE_ERR_BF16), 0.01414 / 8 in fp16 and
 *     tf32 (the relative error scales with the unit roundoff): the head W2·tanh(W1·h + b1)
 *     + b2 moves logit j by at most ||W2_j||·||W1||₂·||δh|| (tanh is
 *     1-Lipschitz, ||W1||₂ <= ||W1||_F), and h, the last LayerNorm's output,
 *     has norm at most sqrt(C)·max|γ| + ||β|| (the normalised vector's norm
 *     is sqrt(C)). Computed from the model's own tensors (task_bounds). */
#define TASK_MIN_COSINE      (1.0 - 1e-6)
#define TASK_MIN_COSINE_BF16 0.9999
#define TASK_MIN_COSINE_HALF (1.0 - 1e-5)
#define TASK_MAX_LOGIT_DIFF  1e-4
#define TASK_STATE_ERR_BF16  0.01414
#define TASK_STATE_ERR_HALF  (0.01414 / 8)

/* The precisions the task models and the goldens are checked in. */
static const gemm_precision gpu_precisions[] = {GEMM_FP32, GEMM_BF16, GEMM_FP16, GEMM_TF32};
#define NPREC 4

/* Sum of squares and max |x| of the n floats of an F32 tensor from first. */
static int f32_stats(const st_file *f, const char *name, size_t first, size_t n, double *ss,
                     double *amax) {
    const st_tensor *t = st_find(f, name);
    if (!t || t->dtype != ST_F32 || (first + n) * 4 > t->nbytes) {
        printf("FAILED: %s is missing or not F32 with %zu floats\n", name, first + n);
        return -1;
    }
    *ss = 0.0;
    *amax = 0.0;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, (const char *)t->data + 4 * (first + i), 4);
        *ss += (double)v * v;
        *amax = fabs(v) > *amax ? fabs(v) : *amax;
    }
    return 0;
}

/* For each of a classifier's N logits ||h||·||W1||_F·||W2_j|| (see above):
 * its bound in a reduced precision over that precision's state error. */
static int task_bounds(const char *dir, const encoder_info *info, double *bound) {
    char path[1024], name[160];
    st_file *f = NULL;
    char err[256];
    if ((size_t)snprintf(path, sizeof path, "%s/model.safetensors", dir) >= sizeof path ||
        st_open(path, &f, err, sizeof err) < 0) {
        printf("FAILED: %s\n", err);
        return -1;
    }
    const int roberta = strstr(info->architecture, "Roberta") != NULL;
    const char *prefix = roberta ? "roberta." : "bert.";
    const size_t C = (size_t)info->hidden_size, N = (size_t)info->num_labels;
    double g_ss, g_max, b_ss, b_max, w1_ss, w_max;
    int rc = 0;
    snprintf(name, sizeof name, "%sencoder.layer.%d.output.LayerNorm.weight", prefix,
             (int)info->num_layers - 1);
    rc |= f32_stats(f, name, 0, C, &g_ss, &g_max);
    snprintf(name, sizeof name, "%sencoder.layer.%d.output.LayerNorm.bias", prefix,
             (int)info->num_layers - 1);
    rc |= f32_stats(f, name, 0, C, &b_ss, &b_max);
    if (roberta)
        snprintf(name, sizeof name, "classifier.dense.weight");
    else
        snprintf(name, sizeof name, "%spooler.dense.weight", prefix);
    rc |= f32_stats(f, name, 0, C * C, &w1_ss, &w_max);
    const double h = sqrt((double)C) * g_max + sqrt(b_ss);
    for (size_t j = 0; !rc && j < N; j++) {
        double w2_ss;
        rc |= f32_stats(f, roberta ? "classifier.out_proj.weight" : "classifier.weight", j * C, C,
                        &w2_ss, &w_max);
        bound[j] = h * sqrt(w1_ss) * sqrt(w2_ss); /* times the precision's state error */
    }
    st_close(f);
    return rc ? -1 : 0;
}

/* A batch for the model: 12 sequences of lengths 1, 2, 3, the longest the
 * model takes and pseudo-random ones between, random ids over the whole
 * vocabulary (RoBERTa's padding id among them: its position rule is
 * exercised too), and for a model with token types a pair's second half as
 * type 1, as a reranker's input is. Returns the count. */
#define TASK_SEQS 12
static int task_batch(const encoder_info *info, int32_t *cu, int32_t **ids, int32_t **types) {
    const int32_t max_len = info->max_positions < 128 ? info->max_positions : 128;
    unsigned s = 11;
    cu[0] = 0;
    for (int b = 0; b < TASK_SEQS; b++) {
        s = s * 1664525u + 1013904223u;
        const int32_t len = b < 3 ? b + 1 : b == 3 ? max_len : 1 + (int32_t)((s >> 8) % max_len);
        cu[b + 1] = cu[b] + len;
    }
    *ids = malloc((size_t)cu[TASK_SEQS] * sizeof **ids);
    *types = info->token_types ? malloc((size_t)cu[TASK_SEQS] * sizeof **types) : NULL;
    for (int b = 0; b < TASK_SEQS; b++)
        for (int32_t t = cu[b]; t < cu[b + 1]; t++) {
            s = s * 1664525u + 1013904223u;
            (*ids)[t] = (int32_t)((s >> 8) % (unsigned)info->vocab_size);
            if (*types)
                (*types)[t] = t - cu[b] >= (cu[b + 1] - cu[b] + 1) / 2 && cu[b + 1] - cu[b] > 1;
        }
    return TASK_SEQS;
}

/* Each task model on the cuda engine, fp32 and bf16, against the fp32 CPU
 * engine on the same directory and batch. Returns the failures. */
static int check_task_models(const char *task_dir, const engine_iface *cuda, tp_pool *pool,
                             const attn_backend *const *backends) {
    int failed = 0;
    for (size_t k = 0; k < sizeof task_models / sizeof task_models[0]; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", task_dir, task_models[k]);
        engine *cpu = make_at(dir, &engine_cpu, GEMM_FP32, pool, backends, 4096, 64);
        if (!cpu) {
            failed++;
            continue;
        }
        const encoder_info *info = engine_model(cpu);
        const int D = engine_output_dim(cpu);
        const int classifier = info->task != ENCODER_TASK_EMBED;
        int32_t cu[TASK_SEQS + 1], *ids = NULL, *types = NULL;
        const int n = task_batch(info, cu, &ids, &types);
        const int C = info->hidden_size, T = cu[n];
        float *ref = malloc((size_t)n * D * sizeof *ref),
              *out = malloc((size_t)n * D * sizeof *out);
        float *href = malloc((size_t)T * C * sizeof *href);
        double bound[4096] = {0};
        if (run_typed(cpu, pool, ids, types, cu, n, ref) != ENGINE_OK || !engine_last_hidden(cpu) ||
            (classifier && (info->num_labels > 4096 || task_bounds(dir, info, bound) < 0))) {
            failed++;
            goto next;
        }
        memcpy(href, engine_last_hidden(cpu), (size_t)T * C * sizeof *href);
        const gemm_precision *ps = gpu_precisions;
        for (int p = 0; p < NPREC; p++) {
            engine *g = make_at(dir, cuda, ps[p], pool, backends, 4096, 64);
            if (g && engine_output_dim(g) != D)
                printf("FAILED: %s: cuda writes %d floats per sequence, cpu %d\n", dir,
                       engine_output_dim(g), D);
            if (!g || engine_output_dim(g) != D ||
                run_typed(g, pool, ids, types, cu, n, out) != ENGINE_OK) {
                failed++;
                engine_destroy(g);
                continue;
            }
            int ok = 1;
            const double floor = ps[p] == GEMM_FP32   ? TASK_MIN_COSINE
                                 : ps[p] == GEMM_BF16 ? TASK_MIN_COSINE_BF16
                                                      : TASK_MIN_COSINE_HALF;
            if (classifier) {
                double worst = 0.0, worst_ratio = 0.0, lmax = 0.0;
                for (int i = 0; i < n * D; i++)
                    lmax = fabs(ref[i]) > lmax ? fabs(ref[i]) : lmax;
                const double fp32_bound = TASK_MAX_LOGIT_DIFF * (lmax / 3 > 1 ? lmax / 3 : 1);
                for (int i = 0; i < n * D; i++) {
                    const double d = fabs((double)out[i] - ref[i]);
                    const double rho =
                        ps[p] == GEMM_BF16 ? TASK_STATE_ERR_BF16 : TASK_STATE_ERR_HALF;
                    const double b = ps[p] == GEMM_FP32 ? fp32_bound : rho * bound[i % D];
                    worst = d > worst ? d : worst;
                    worst_ratio = d / b > worst_ratio ? d / b : worst_ratio;
                    ok &= d <= b; /* NaN fails */
                }
                printf("task %s %s: max |logit - cpu fp32| %.3g (max |logit| %.3g), worst "
                       "error/bound %.3g  %s\n",
                       task_models[k], engine_precision_name(ps[p]), worst, lmax, worst_ratio,
                       ok ? "ok" : "FAILED");
            } else {
                double lo = 1.0;
                for (int i = 0; i < n; i++) {
                    const double c = cosine(out + (size_t)i * D, ref + (size_t)i * D, D);
                    lo = c < lo || c != c ? c : lo;
                }
                ok = lo >= floor;
                printf("task %s %s: lowest cosine vs cpu fp32 %.9f over %d vectors of %d, floor "
                       "%.9f  %s\n",
                       task_models[k], engine_precision_name(ps[p]), lo, n, D, floor,
                       ok ? "ok" : "FAILED");
            }
            failed += !ok;
            /* Every token's last hidden state (the engine's hidden slot:
             * TEI's /embed_all, a classifier's start-up check), copied back
             * on request: the embedders' floors, a state within relative
             * error rho having cosine about 1 - rho^2 / 2. */
            const float *hg = engine_last_hidden(g);
            double lo_h = hg ? 1.0 : 0.0;
            for (int t = 0; hg && t < T; t++) {
                const double c = cosine(hg + (size_t)t * C, href + (size_t)t * C, C);
                lo_h = c < lo_h || c != c ? c : lo_h;
            }
            const int ok_h = lo_h >= floor;
            failed += !ok_h;
            printf("task %s %s: hidden states%s: lowest cosine vs cpu fp32 %.9f over %d tokens, "
                   "floor %.9f  %s\n",
                   task_models[k], engine_precision_name(ps[p]), hg ? "" : " NOT EXPOSED", lo_h, T,
                   floor, ok_h ? "ok" : "FAILED");
            engine_destroy(g);
        }
    next:
        free(href);
        free(ref);
        free(out);
        free(ids);
        free(types);
        engine_destroy(cpu);
    }
    return failed;
}

int main(int argc, char **argv) {
    const char *plugins = argc > 1 ? argv[1] : "build/gpu-engines";
    if (argc > 2)
        model_dir = argv[2];
    const char *task_dir = argc > 3 ? argv[3] : NULL;
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
    const gemm_precision *ps = gpu_precisions;
    static const double floors[NPREC] = {0.99999, 0.9999, 0.99999, 0.99999};
    double eps[NPREC] = {0};
    for (int k = 0; k < NPREC; k++) {
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
    if (task_dir) {
        const int tf = check_task_models(task_dir, cu_e->iface, pool, backends);
        printf("task models (heads, Dense, poolings) vs cpu fp32: %s (%d failed)\n",
               tf ? "FAILED" : "passed", tf);
        failed += tf;
    } else {
        printf("task models: NOT RUN (no TASK_DIR argument)\n");
    }
    const double cpu_eps = throughput(cpu, pool, 128, 64, 3);
    printf("\nembeddings/s, batch 128 x 64 tokens: cuda fp32 %.0f, cuda bf16 %.0f, cpu fp32 (16 "
           "threads) %.0f; bf16/cpu = %.1fx (target >= 20x); cuda fp16 %.0f, cuda tf32 %.0f\n",
           eps[0], eps[1], cpu_eps, cpu_eps > 0 ? eps[1] / cpu_eps : 0.0, eps[2], eps[3]);
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

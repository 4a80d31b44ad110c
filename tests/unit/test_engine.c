/* test_engine.c — the engine registry, plugins and the forward wrapper.
 *
 * Plugins come from the build: $(BUILD)/engines/cpu-avx512.so is the real
 * cpu engine built as a plugin (mk/engines.mk); $(BUILD)/test-engines/ holds
 * small broken plugins, one per refusal the registry must make, and the
 * instant test engine. The model is models/all-MiniLM-L6-v2 (`make model`);
 * without it the model tests fail, they do not skip. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engines/engine.h"
#include "golden_embeddings.h"
#include "kernels/threadpool.h"
#include "tests/golden/golden_io.h"

#ifndef ATTN_BUILD_DIR
#define ATTN_BUILD_DIR "build"
#endif
#define PLUGINS      ATTN_BUILD_DIR "/engines"
#define TEST_PLUGINS ATTN_BUILD_DIR "/test-engines"
#define MODEL_DIR    "models/all-MiniLM-L6-v2"
/* test_model.c's floor against PyTorch, for the same inputs and model. */
#define MIN_COSINE 0.99999
#define THREADS    2

static const engine_entry *entry(const char *name) {
    const engine_entry *e = engine_registry_find(name);
    cr_assert_not_null(e, "engine '%s' not listed", name);
    return e;
}

Test(engine_registry, builtin_cpu_without_plugin_dir) {
    char err[256] = "";
    cr_assert_eq(engine_registry_init(NULL, err, sizeof err), 1, "%s", err);
    const engine_entry *cpu = entry("cpu");
    cr_assert(cpu->offered);
    cr_assert_str_eq(cpu->origin, "built-in");
    cr_assert_gt(cpu->score, 0);
    const engine_iface *t = NULL;
    gemm_precision p = GEMM_NPRECISIONS;
    cr_assert_eq(engine_select("auto", "auto", &t, &p, err, sizeof err), ENGINE_OK, "%s", err);
    cr_assert_eq(t, &engine_cpu);
    /* auto: the fastest this CPU runs, int8 before bf16 before fp32. */
    const gemm_precision want = !gemm_unsupported(GEMM_INT8)   ? GEMM_INT8
                                : !gemm_unsupported(GEMM_BF16) ? GEMM_BF16
                                                               : GEMM_FP32;
    cr_assert_eq(p, want, "auto chose %s, the fastest this CPU runs is %s", gemm_precision_name(p),
                 gemm_precision_name(want));
    cr_assert_eq(engine_select("cpu", "fp32", &t, &p, err, sizeof err), ENGINE_OK, "%s", err);
}

Test(engine_registry, reduced_precision_refused_with_reason) {
    char err[256] = "";
    engine_registry_init(NULL, err, sizeof err);
    const engine_iface *t = NULL;
    gemm_precision p;
    /* A reduced precision is offered exactly where gemm.h runs it, and
     * otherwise refused with gemm.h's reason. */
    const gemm_precision reduced[] = {GEMM_BF16, GEMM_INT8};
    for (size_t i = 0; i < 2; i++) {
        const char *name = gemm_precision_name(reduced[i]);
        const char *why = gemm_unsupported(reduced[i]);
        int rc = engine_select("cpu", name, &t, &p, err, sizeof err);
        if (why) {
            cr_log_info("this CPU lacks %s (%s): checked the refusal", name, why);
            cr_assert_eq(rc, ENGINE_EUNSUPPORTED);
            cr_assert(strstr(err, name) && strstr(err, why), "%s", err);
        } else {
            cr_log_info("this CPU runs %s: the refusal path is not reachable here", name);
            cr_assert_eq(rc, ENGINE_OK, "%s", err);
            cr_assert_eq(p, reduced[i]);
        }
    }
    /* The GPU's precisions are names the cpu engine refuses as such. */
    static const char *const gpu_only[] = {"fp16", "tf32"};
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(engine_select("cpu", gpu_only[i], &t, &p, err, sizeof err),
                     ENGINE_EUNSUPPORTED);
        cr_assert(strstr(err, "engine 'cpu' cannot run") && strstr(err, gpu_only[i]) &&
                      strstr(err, "is a GPU precision") && strstr(err, "fp32, bf16 and int8"),
                  "%s", err);
    }
    cr_assert_eq(engine_select("cpu", "fp8", &t, &p, err, sizeof err), ENGINE_EINVAL);
    cr_assert(strstr(err, "fp32, bf16, int8, fp16, tf32, auto"), "%s", err);
    cr_assert_eq(engine_select("gpu", "fp32", &t, &p, err, sizeof err), ENGINE_EUNKNOWN);
    cr_assert(strstr(err, "valid: cpu, auto"), "%s", err);
}

Test(engine_registry, bad_plugins_refused_with_reasons) {
    char err[256] = "";
    cr_assert_eq(engine_registry_init(TEST_PLUGINS, err, sizeof err), 6, "%s", err);
    const engine_entry *no_sym = entry("no_symbol");
    cr_assert_not(no_sym->offered);
    cr_assert(strstr(no_sym->reason, "no symbol " ENGINE_PLUGIN_SYMBOL), "%s", no_sym->reason);
    cr_assert(strstr(no_sym->origin, "no_symbol.so"), "%s", no_sym->origin);

    const engine_entry *old = entry("old_api");
    cr_assert_not(old->offered);
    /* Built against version 1, the contract before token types. */
    char now[32];
    snprintf(now, sizeof now, "version %d", ENGINE_API_VERSION);
    cr_assert(strstr(old->reason, "API version 1") && strstr(old->reason, now), "%s", old->reason);

    const engine_entry *zero = entry("no-cpu"); /* listed under its table's name */
    cr_assert_not(zero->offered);
    cr_assert_eq(zero->score, 0);
    cr_assert(strstr(zero->reason, "scores 0 on this machine: needs an accelerator"), "%s",
              zero->reason);

    /* Refused engines are never chosen, named or by auto. */
    const engine_iface *t = NULL;
    gemm_precision p;
    cr_assert_eq(engine_select("no-cpu", "fp32", &t, &p, err, sizeof err), ENGINE_EUNSUPPORTED);
    cr_assert(strstr(err, "not offered") && strstr(err, "needs an accelerator"), "%s", err);
    cr_assert_eq(engine_select("auto", "auto", &t, &p, err, sizeof err), ENGINE_OK, "%s", err);
    cr_assert_eq(t, entry("picky")->iface, "auto takes the highest score offered");
    /* What the service asks when that engine cannot load the model: the
     * next one, never a refused one, and nothing once all are passed by. */
    const engine_iface *skip[] = {t};
    cr_assert_eq(engine_select_except("auto", skip, 1, &t, &p, err, sizeof err), ENGINE_OK, "%s",
                 err);
    cr_assert_eq(t, &engine_cpu);
    /* instant, the front end's test engine, scores below cpu: auto reaches
     * it only once every real engine is passed by. */
    cr_assert_eq(engine_select_except("auto", (const engine_iface *[]){skip[0], &engine_cpu}, 2, &t,
                                      &p, err, sizeof err),
                 ENGINE_OK, "%s", err);
    cr_assert_eq(t, entry("instant")->iface);
    const engine_iface *all[] = {skip[0], &engine_cpu, t};
    cr_assert_eq(engine_select_except("auto", all, 3, &t, &p, err, sizeof err),
                 ENGINE_EUNSUPPORTED);
    cr_assert_null(t);
    char names[128];
    engine_names(names, sizeof names);
    cr_assert_str_eq(names, "cpu, instant, picky, auto");
}

Test(engine_registry, missing_dir_keeps_builtins) {
    char err[256] = "";
    cr_assert_eq(engine_registry_init(TEST_PLUGINS "/absent", err, sizeof err), -1);
    cr_assert(strstr(err, "absent"), "%s", err);
    cr_assert_eq(engine_registry_count(), 1);
    cr_assert(entry("cpu")->offered);
}

static bool cpu_has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

Test(engine_registry, real_plugin_scored_for_this_cpu) {
    char err[256] = "";
    cr_assert_eq(engine_registry_init(PLUGINS, err, sizeof err), 2, "%s", err);
    const engine_entry *p = entry("cpu-avx512");
    cr_assert(strstr(p->origin, "cpu-avx512.so"), "%s", p->origin);
    if (cpu_has_avx512()) {
        cr_assert(p->offered, "refused: %s", p->reason);
        /* Offered, but auto keeps the built-in engine (higher score). */
        const engine_iface *t = NULL;
        gemm_precision pr;
        cr_assert_eq(engine_select("auto", "auto", &t, &pr, err, sizeof err), ENGINE_OK);
        cr_assert_eq(t, &engine_cpu);
        cr_assert_eq(engine_select("cpu-avx512", "fp32", &t, &pr, err, sizeof err), ENGINE_OK, "%s",
                     err);
        cr_assert_eq(t, p->iface);
    } else {
        cr_assert_not(p->offered);
        cr_assert(strstr(p->reason, "needs AVX-512F"), "%s", p->reason);
    }
    /* The same file again: its name is taken. */
    const engine_entry *again = engine_registry_load(PLUGINS "/cpu-avx512.so");
    cr_assert_not(again->offered);
    cr_assert(strstr(again->reason, "already taken"), "%s", again->reason);
}

/* ---- the instance and the wrapper, on the real model ---------------------------------- */

typedef struct inputs {
    int n;
    int32_t *ids, *cu; /* packed */
    float *golden;     /* (n, C) */
    int C;
} inputs;

static inputs golden_inputs(int n) {
    golden_set g;
    char err[512] = "";
    cr_assert_eq(golden_set_load("mean_normalized", &g, err, sizeof err), 0, "%s", err);
    cr_assert_geq(g.n, n);
    inputs in = {.n = n, .C = g.dim};
    in.cu = calloc((size_t)n + 1, sizeof *in.cu);
    for (int i = 0; i < n; i++)
        in.cu[i + 1] = in.cu[i] + g.len[i];
    in.ids = malloc((size_t)in.cu[n] * sizeof *in.ids);
    in.golden = malloc((size_t)n * (size_t)in.C * sizeof *in.golden);
    for (int i = 0; i < n; i++) {
        memcpy(in.ids + in.cu[i], g.ids[i], (size_t)g.len[i] * sizeof *in.ids);
        memcpy(in.golden + (size_t)i * (size_t)in.C, g.emb[i], (size_t)in.C * sizeof *in.golden);
    }
    golden_set_free(&g);
    return in;
}

static void inputs_free(inputs *in) {
    free(in->ids);
    free(in->cu);
    free(in->golden);
}

static engine *make(const engine_iface *t, tp_pool *pool, const attn_backend *const *backends,
                    size_t nb) {
    const engine_options o = {.model_dir = MODEL_DIR,
                              .precision = GEMM_FP32,
                              .max_tokens = 2048,
                              .max_seqs = 64,
                              .nthreads = tp_nthreads(pool),
                              .backends = backends,
                              .nbackends = nb};
    engine *e = NULL;
    char err[512] = "";
    int rc = engine_create(t, &o, &e, err, sizeof err);
    cr_assert_eq(rc, ENGINE_OK, "engine_create(%s): %s: %s", t->name, engine_strerror(rc), err);
    return e;
}

/* Runs in on e with the fused backend and checks every vector against
 * PyTorch's. */
static void check_golden(engine *e, tp_pool *pool, const inputs *in, float *out) {
    const attn_parallel par = tp_parallel(pool);
    const engine_batch b = {.ids = in->ids, .cu_seqlens = in->cu, .batch = in->n, .out = out};
    char err[256] = "";
    cr_assert_eq(engine_forward(e, &b, attn_backend_find("fused"), &par, NULL, err, sizeof err),
                 ENGINE_OK, "%s: %s", engine_name(e), err);
    for (int i = 0; i < in->n; i++) {
        double c = golden_cosine(out + (size_t)i * (size_t)in->C,
                                 in->golden + (size_t)i * (size_t)in->C, in->C);
        cr_assert_geq(c, MIN_COSINE, "%s: input %d cosine %.8f", engine_name(e), i, c);
    }
}

Test(engine_forward, plugin_engine_matches_pytorch_and_builtin, .timeout = 120) {
    if (!cpu_has_avx512())
        cr_skip_test("NOT RUN: the cpu-avx512 plugin needs AVX-512, which this CPU lacks (its "
                     "refusal is checked by real_plugin_scored_for_this_cpu)");
    char err[256] = "";
    engine_registry_init(PLUGINS, err, sizeof err);
    const engine_entry *p = entry("cpu-avx512");
    cr_assert(p->offered, "%s", p->reason);
    tp_pool *pool = tp_create(THREADS);
    const attn_backend *backends[] = {attn_backend_find("fused"), attn_backend_find("naive")};
    inputs in = golden_inputs(16);
    float *a = calloc((size_t)in.n * (size_t)in.C, sizeof *a);
    float *b = calloc((size_t)in.n * (size_t)in.C, sizeof *b);
    engine *builtin = make(&engine_cpu, pool, backends, 2);
    engine *plugin = make(p->iface, pool, backends, 2);
    cr_assert_str_eq(engine_name(plugin), "cpu-avx512");
    check_golden(builtin, pool, &in, a);
    check_golden(plugin, pool, &in, b);
    for (int i = 0; i < in.n; i++) {
        double c = golden_cosine(a + (size_t)i * (size_t)in.C, b + (size_t)i * (size_t)in.C, in.C);
        cr_assert_geq(c, MIN_COSINE, "input %d: plugin vs built-in cosine %.8f", i, c);
    }
    engine_memory m;
    engine_memory_of(plugin, &m);
    cr_assert_gt(m.weights_mapped, 0);
    cr_assert_gt(m.workspace, 0);
    engine_destroy(plugin);
    engine_destroy(builtin);
    free(a);
    free(b);
    inputs_free(&in);
    tp_destroy(pool);
}

typedef struct tap_seen {
    int calls, layer;
    int32_t batch, tokens;
} tap_seen;

static void tap(const attn_problem *p, int layer, void *ctx) {
    tap_seen *s = ctx;
    s->calls++;
    s->layer = layer;
    s->batch = p->shape.batch;
    s->tokens = p->shape.total_tokens;
}

Test(engine_forward, wrapper_validates_times_counts_and_hooks, .timeout = 120) {
    char err[256] = "";
    engine_registry_init(NULL, err, sizeof err);
    tp_pool *pool = tp_create(THREADS);
    const attn_parallel par = tp_parallel(pool);
    const attn_backend *naive = attn_backend_find("naive");
    engine *e = make(&engine_cpu, pool, &naive, 1);
    const encoder_info *c = engine_model(e);
    inputs in = golden_inputs(4);
    float *out = calloc((size_t)in.n * (size_t)in.C, sizeof *out);
    engine_batch b = {.ids = in.ids, .cu_seqlens = in.cu, .batch = in.n, .out = out};

    /* The hook sees the layer it asked for, once, with the whole batch. */
    tap_seen seen = {0};
    const engine_hook hook = {.layer = 3, .fn = tap, .ctx = &seen};
    cr_assert_eq(engine_forward(e, &b, naive, &par, &hook, err, sizeof err), ENGINE_OK, "%s", err);
    cr_assert_eq(seen.calls, 1);
    cr_assert_eq(seen.layer, 3);
    cr_assert_eq(seen.batch, in.n);
    cr_assert_eq(seen.tokens, in.cu[in.n]);
    const engine_run *r = engine_last_run(e);
    cr_assert(r->hooked);
    cr_assert_eq(r->sequences, in.n);
    cr_assert_eq(r->tokens, in.cu[in.n]);
    cr_assert_gt(r->ns, 0);
    /* FLOPs by hand: per layer 2·T·C·(4C + 2F) in the GEMMs plus 4·L²·C per
     * sequence in attention. */
    double C = c->hidden_size, F = c->intermediate_size, attn = 0;
    for (int i = 0; i < in.n; i++) {
        double L = in.cu[i + 1] - in.cu[i];
        attn += 4 * L * L * C;
    }
    const double want = c->num_layers * (2.0 * in.cu[in.n] * C * (4 * C + 2 * F) + attn);
    cr_assert_float_eq(r->flops, want, want * 1e-12);
    cr_assert_float_eq(r->attn_flops, attn * c->num_layers, attn * 1e-12);
    cr_assert_float_eq(r->stages.attn_flops, r->attn_flops, attn * 1e-12);
    cr_assert_gt(r->stages.attention, 0);

    /* The hook lasts one forward only; one outside the model is not installed. */
    seen.calls = 0;
    cr_assert_eq(engine_forward(e, &b, naive, &par, NULL, err, sizeof err), ENGINE_OK);
    cr_assert_eq(seen.calls, 0);
    const engine_hook outside = {.layer = c->num_layers, .fn = tap, .ctx = &seen};
    cr_assert_eq(engine_forward(e, &b, naive, &par, &outside, err, sizeof err), ENGINE_OK);
    cr_assert_eq(seen.calls, 0);
    cr_assert_not(engine_last_run(e)->hooked);

    /* Bad batches are refused before the engine runs, each with its reason. */
    int32_t bad_cu[3] = {1, 3, 5};
    engine_batch bad = b;
    bad.cu_seqlens = bad_cu;
    bad.batch = 2;
    cr_assert_eq(engine_forward(e, &bad, naive, &par, NULL, err, sizeof err), ENGINE_EINPUT);
    cr_assert(strstr(err, "cu_seqlens[0]"), "%s", err);
    int32_t empty_cu[3] = {0, 0, 2};
    bad.cu_seqlens = empty_cu;
    cr_assert_eq(engine_forward(e, &bad, naive, &par, NULL, err, sizeof err), ENGINE_EINPUT);
    cr_assert(strstr(err, "sequence 0 has 0 tokens"), "%s", err);
    int32_t long_cu[2] = {0, c->max_positions + 1};
    bad.cu_seqlens = long_cu;
    bad.batch = 1;
    cr_assert_eq(engine_forward(e, &bad, naive, &par, NULL, err, sizeof err), ENGINE_EINPUT);
    int32_t ids[2] = {101, c->vocab_size};
    int32_t cu2[2] = {0, 2};
    bad = (engine_batch){.ids = ids, .cu_seqlens = cu2, .batch = 1, .out = out};
    cr_assert_eq(engine_forward(e, &bad, naive, &par, NULL, err, sizeof err), ENGINE_EINPUT);
    cr_assert(strstr(err, "outside the vocabulary"), "%s", err);
    bad.batch = 65;
    cr_assert_eq(engine_forward(e, &bad, naive, &par, NULL, err, sizeof err), ENGINE_EINPUT);
    cr_assert(strstr(err, "batch of 65"), "%s", err);

    engine_destroy(e);
    free(out);
    inputs_free(&in);
    tp_destroy(pool);
}

Test(engine_forward, create_refuses_a_precision_the_cpu_lacks) {
    const char *why = gemm_unsupported(GEMM_BF16);
    if (!why) {
        cr_log_info("skipped: this CPU runs bf16, so no refusal to check");
        cr_skip_test("this CPU runs bf16");
    }
    char err[256] = "";
    const attn_backend *naive = attn_backend_find("naive");
    const engine_options o = {.model_dir = MODEL_DIR,
                              .precision = GEMM_BF16,
                              .max_tokens = 512,
                              .max_seqs = 4,
                              .nthreads = 1,
                              .backends = &naive,
                              .nbackends = 1};
    engine *e = NULL;
    cr_assert_eq(engine_create(&engine_cpu, &o, &e, err, sizeof err), ENGINE_EUNSUPPORTED);
    cr_assert_null(e);
    cr_assert(strstr(err, "bf16"), "%s", err);
}

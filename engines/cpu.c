/* cpu.c — the CPU engine: model/encoder.h's forward on the service's thread
 * pool, with the attention backend in force as the swappable op inside.
 *
 * Built twice from this one file:
 *   - into the core (engine_cpu, "cpu"), with the flags of every other
 *     portable object: runs on any x86-64 or other CPU;
 *   - into the plugin build/engines/cpu-avx512.so with CPU_ENGINE_PLUGIN
 *     defined, this file and the model objects compiled for AVX-512, its
 *     table exported by engines/plugins/cpu_avx512.c, which also holds its
 *     score (compiled without AVX-512, so it may run on any CPU).
 *
 * Precision reaches the model through kernels/gemm.h's packed weights: the
 * engine offers whatever precision gemm_unsupported says this CPU runs. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct cpu_ctx {
    encoder *model;
    encoder_workspace *ws;
} cpu_ctx;

static const char *cpu_precision_unsupported(gemm_precision p) {
    return gemm_unsupported(p);
}

static int cpu_init(const engine_options *opt, void **out, char *err, size_t err_len) {
    *out = NULL;
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return ENGINE_ENOMEM;
    }
    int rc = encoder_load(opt->model_dir, opt->precision, &c->model, err, err_len);
    if (rc != BERT_OK) {
        free(c);
        return rc == BERT_ENOMEM ? ENGINE_ENOMEM : ENGINE_EMODEL;
    }
    rc = encoder_workspace_create(c->model, opt->max_tokens, opt->nthreads, opt->backends,
                                  opt->nbackends, &c->ws, err, err_len);
    if (rc != BERT_OK) {
        encoder_free(c->model);
        free(c);
        return rc == BERT_ENOMEM ? ENGINE_ENOMEM : ENGINE_EUNSUPPORTED;
    }
    *out = c;
    return ENGINE_OK;
}

static void cpu_free(void *ctx) {
    cpu_ctx *c = ctx;
    if (!c)
        return;
    encoder_workspace_free(c->ws);
    encoder_free(c->model);
    free(c);
}

static const encoder_info *cpu_model(void *ctx) {
    return encoder_get_info(((cpu_ctx *)ctx)->model);
}

static const float *cpu_hidden(void *ctx) {
    return encoder_workspace_hidden(((cpu_ctx *)ctx)->ws);
}

static int cpu_forward(void *ctx, const engine_batch *b, const attn_backend *attn,
                       const attn_parallel *par, char *err, size_t err_len) {
    cpu_ctx *c = ctx;
    encoder_workspace_set_raw(c->ws, b->raw);
    int rc = encoder_forward(c->model, c->ws, attn, par, b->ids, b->type_ids, b->cu_seqlens,
                             b->batch, b->out, err, err_len);
    if (rc == BERT_OK)
        return ENGINE_OK;
    return rc == BERT_EINPUT ? ENGINE_EINPUT : ENGINE_EFORWARD;
}

static void cpu_memory(void *ctx, engine_memory *m) {
    cpu_ctx *c = ctx;
    m->weights_owned = encoder_owned_bytes(c->model);
    m->weights_mapped = encoder_mapped_bytes(c->model);
    m->workspace = encoder_workspace_bytes(c->ws);
}

static int cpu_set_attn_tap(void *ctx, int layer, engine_attn_tap_fn fn, void *fn_ctx) {
    encoder_workspace_set_attn_tap(((cpu_ctx *)ctx)->ws, layer, fn, fn_ctx);
    return 0;
}

static void cpu_stage_ns(void *ctx, encoder_stage_ns *out) {
    *out = *encoder_workspace_stage_ns(((cpu_ctx *)ctx)->ws);
}

#ifndef CPU_ENGINE_PLUGIN
/* Portable: runs wherever the binary runs. */
static int cpu_score(char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    return 10;
}
#define CPU_TABLE   engine_cpu
#define CPU_NAME    "cpu"
#define CPU_SUMMARY "model/encoder.h on the thread pool, attention through the backend in force"
#define CPU_SCORE   cpu_score
#else
int cpu_avx512_score(char *why, size_t why_len);
#define CPU_TABLE   engine_cpu_avx512
#define CPU_NAME    "cpu-avx512"
#define CPU_SUMMARY "the cpu engine with the model compiled for AVX-512 (plugin)"
#define CPU_SCORE   cpu_avx512_score
extern const engine_iface engine_cpu_avx512;
#endif

const engine_iface CPU_TABLE = {
    .name = CPU_NAME,
    .summary = CPU_SUMMARY,
    .score = CPU_SCORE,
    .precision_unsupported = cpu_precision_unsupported,
    .init = cpu_init,
    .free = cpu_free,
    .model = cpu_model,
    .forward = cpu_forward,
    .memory = cpu_memory,
    .set_attn_tap = cpu_set_attn_tap,
    .stage_ns = cpu_stage_ns,
    .hidden = cpu_hidden,
};

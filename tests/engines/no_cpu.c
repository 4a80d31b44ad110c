/* no_cpu.c — a plugin whose engine scores 0 on every machine, as one
 * needing hardware that is absent would: listed with its reason, never
 * offered. Its other slots refuse to run, so offering it by mistake fails
 * loudly. */
#include "engines/engine.h"

#include <stdio.h>

static int score(char *why, size_t why_len) {
    snprintf(why, why_len, "needs an accelerator this machine does not have");
    return 0;
}

static int init(const engine_options *opt, void **ctx, char *err, size_t err_len) {
    (void)opt;
    *ctx = NULL;
    snprintf(err, err_len, "no_cpu: never offered, never initialised");
    return ENGINE_EUNSUPPORTED;
}

static void release(void *ctx) {
    (void)ctx;
}

static const encoder_info *model(void *ctx) {
    (void)ctx;
    return NULL;
}

static int forward(void *ctx, const engine_batch *b, const attn_backend *attn,
                   const attn_parallel *par, char *err, size_t err_len) {
    (void)ctx, (void)b, (void)attn, (void)par;
    snprintf(err, err_len, "no_cpu: never offered");
    return ENGINE_EFORWARD;
}

static const engine_iface table = {
    .name = "no-cpu",
    .summary = "test only: scores 0",
    .score = score,
    .init = init,
    .free = release,
    .model = model,
    .forward = forward,
};

__attribute__((visibility("default"))) const engine_plugin attnserve_engine_plugin = {
    .api_version = ENGINE_API_VERSION,
    .iface = &table,
};

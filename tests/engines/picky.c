/* picky.c — a plugin offered with a score above every built-in engine
 * whose init refuses every model, as a GPU engine refuses a classifier head
 * it has no kernel for. `engine: auto` must then start on the next engine;
 * `engine: picky` must stop the start with init's reason. */
#include "engines/engine.h"

#include <stdio.h>

static int score(char *why, size_t why_len) {
    (void)why, (void)why_len;
    return 1000;
}

static int init(const engine_options *opt, void **ctx, char *err, size_t err_len) {
    *ctx = NULL;
    snprintf(err, err_len, "picky: serves no model (asked for %s)", opt->model_dir);
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
    snprintf(err, err_len, "picky: never initialised");
    return ENGINE_EFORWARD;
}

static const engine_iface table = {
    .name = "picky",
    .summary = "test only: offered, refuses every model at init",
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

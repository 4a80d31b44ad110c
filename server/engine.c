/* engine.c (server) — the engine and the attention backend in force. */
#include "engine.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "log.h"
#include "metrics.h"

struct srv_engine {
    engine *eng;
    attn_parallel par;
    _Atomic(const attn_backend *) backend;
};

static void log_registry(void) {
    for (size_t i = 0; i < engine_registry_count(); i++) {
        const engine_entry *en = engine_registry_get(i);
        if (en->offered)
            log_info("engine offered", LOG_KV("engine", en->name), LOG_KV("origin", en->origin),
                     LOG_KV("score", en->score));
        else
            log_warn("engine refused", LOG_KV("engine", en->name), LOG_KV("origin", en->origin),
                     LOG_KV("reason", en->reason));
    }
}

int srv_engine_create(const srv_engine_options *o, srv_engine **out) {
    char err[512];
    *out = NULL;
    if (engine_registry_init(o->plugin_dir, err, sizeof err) < 0)
        log_warn("cannot read plugin_dir; only built-in engines are offered",
                 LOG_KV("plugin_dir", o->plugin_dir), LOG_KV("error", err));
    log_registry();
    const engine_iface *iface = NULL;
    gemm_precision precision = GEMM_FP32;
    if (engine_select(o->engine, o->precision, &iface, &precision, err, sizeof err) != ENGINE_OK) {
        log_error("engine refused", LOG_KV("engine", o->engine), LOG_KV("precision", o->precision),
                  LOG_KV("reason", err));
        return CONFIG_EXIT_INVALID;
    }
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) {
        log_error("out of memory");
        return 1;
    }
    e->par = tp_parallel(o->pool);
    atomic_store(&e->backend, o->backend);
    const engine_options eo = {.model_dir = o->model_dir,
                               .precision = precision,
                               .max_tokens = o->max_tokens,
                               .max_seqs = o->max_seqs,
                               .nthreads = tp_nthreads(o->pool),
                               .backends = o->backends,
                               .nbackends = o->nbackends};
    int rc = engine_create(iface, &eo, &e->eng, err, sizeof err);
    if (rc != ENGINE_OK) {
        log_error("cannot start the engine", LOG_KV("engine", iface->name),
                  LOG_KV("precision", engine_precision_name(precision)),
                  LOG_KV("problem", engine_strerror(rc)), LOG_KV("error", err));
        free(e);
        return rc == ENGINE_ENOMEM ? 1 : CONFIG_EXIT_INVALID;
    }
    metrics_set_engine(iface->name, engine_precision_name(precision));
    engine_memory m;
    engine_memory_of(e->eng, &m);
    log_info("engine started", LOG_KV("engine", iface->name),
             LOG_KV("precision", engine_precision_name(precision)),
             LOG_KV("weights_owned_bytes", m.weights_owned),
             LOG_KV("weights_mapped_bytes", m.weights_mapped),
             LOG_KV("workspace_bytes", m.workspace));
    *out = e;
    return 0;
}

void srv_engine_destroy(srv_engine *e) {
    if (!e)
        return;
    engine_destroy(e->eng);
    free(e);
}

const engine *srv_engine_instance(const srv_engine *e) {
    return e->eng;
}
const char *srv_engine_name(const srv_engine *e) {
    return engine_name(e->eng);
}
const char *srv_engine_precision(const srv_engine *e) {
    return engine_precision_name(engine_precision(e->eng));
}

const attn_backend *srv_engine_backend(const srv_engine *e) {
    return atomic_load(&e->backend);
}

typedef struct swap_arg {
    srv_engine *e;
    const attn_backend *backend;
} swap_arg;

static int swap_backend(void *arg) {
    swap_arg *a = arg;
    atomic_store(&a->e->backend, a->backend);
    return SCHED_OK;
}

int srv_engine_set_backend(srv_engine *e, sched *s, const attn_backend *backend) {
    swap_arg a = {e, backend};
    return sched_call(s, swap_backend, &a);
}

int srv_engine_forward(srv_engine *e, const engine_batch *b, const engine_hook *hook,
                       const attn_backend **ran, char *err, size_t err_len) {
    /* One read per batch: a switch lands between batches only. */
    const attn_backend *backend = atomic_load(&e->backend);
    *ran = backend;
    int rc = engine_forward(e->eng, b, backend, &e->par, hook, err, err_len);
    if (rc != ENGINE_OK)
        return rc;
    const engine_run *r = engine_last_run(e->eng);
    metrics_engine_forward((double)r->ns * 1e-9, r->flops);
    /* The attention time comes summed over layers; every layer has the same
     * shape and work, so each call is counted with an equal share (the
     * totals, and so GFLOP/s, are exact). */
    const int layers = engine_model(e->eng)->num_layers;
    for (int l = 0; l < layers; l++)
        metrics_kernel(backend, (double)r->stages.attention * 1e-9 / layers,
                       r->attn_flops / layers);
    return ENGINE_OK;
}

const engine_run *srv_engine_last_run(const srv_engine *e) {
    return engine_last_run(e->eng);
}

json_t *srv_engine_info(const srv_engine *e, const char *engine_setting,
                        const char *precision_setting, const char *plugin_dir) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < engine_registry_count(); i++) {
        const engine_entry *en = engine_registry_get(i);
        json_t *precisions = json_array();
        for (int p = 0; precisions && en->offered && p < GEMM_NPRECISIONS; p++)
            if (!engine_precision_unsupported(en->iface, (gemm_precision)p) &&
                json_array_append_new(precisions,
                                      json_string(engine_precision_name((gemm_precision)p))) != 0) {
                json_decref(precisions);
                precisions = NULL;
            }
        json_t *item = precisions
                           ? json_pack("{s:s, s:s, s:b, s:i, s:s, s:o}", "name", en->name, "origin",
                                       en->origin, "offered", en->offered, "score", en->score,
                                       "reason", en->reason, "precisions", precisions)
                           : NULL;
        if (!item || json_array_append_new(list, item) != 0) {
            json_decref(list); /* a part missing: no document */
            list = NULL;
        }
    }
    if (!list)
        return NULL;
    engine_memory m;
    engine_memory_of(e->eng, &m);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:i, s:o}", "name",
                     srv_engine_name(e), "precision", srv_engine_precision(e), "engine_setting",
                     engine_setting, "precision_setting", precision_setting, "plugin_dir",
                     plugin_dir ? plugin_dir : "", "weights_owned_bytes",
                     (json_int_t)m.weights_owned, "weights_mapped_bytes",
                     (json_int_t)m.weights_mapped, "workspace_bytes", (json_int_t)m.workspace,
                     "api_version", ENGINE_API_VERSION, "engines", list);
}

/* reload.c — SIGHUP's order: re-read and validate (config_reload), apply
 * through the settings table (config_apply), then swap the configuration
 * under the lock /info reads it with. */
#include "server/ops/reload.h"

#include <pthread.h>
#include <stdatomic.h>

#include "server/app.h"
#include "server/ops/backend_choice.h"
#include "server/ops/log.h"

sched_limits reload_sched_limits(const config *c) {
    return (sched_limits){.max_batch_tokens = (int32_t)c->max_batch_tokens,
                          .max_batch_requests = (int32_t)c->max_batch_requests,
                          .max_wait_us = (uint32_t)c->max_wait_us,
                          .max_queue = (uint32_t)c->max_queue};
}

/* ---- the settings table's apply functions -------------------------------------- *
 * One per config_apply_group (service is the app). Each takes the whole of
 * next and applies every setting of its group, so a reload runs it once. */

static void reload_log(void *service, const config *next) {
    (void)service;
    if (log_configure(next->log_level, next->log_format) != 0)
        log_warn("log settings refused", LOG_KV("level", next->log_level),
                 LOG_KV("format", next->log_format));
}

/* One decision under the backend lock (backend_choice_reload). */
static void reload_backend(void *service, const config *next) {
    backend_choice_reload(service, next);
}

static void reload_batching(void *service, const config *next) {
    app *a = service;
    sched_limits lim = reload_sched_limits(next);
    if (sched_set_limits(a->sched, &lim) != SCHED_OK)
        log_warn("batch limits refused; keeping the ones in force");
}

static void reload_requests(void *service, const config *next) {
    app *a = service;
    atomic_store(&a->api.request_timeout_ms, next->request_timeout_ms);
    for (size_t i = 0; i < a->nm; i++) {
        embed_api *e = &a->m[i].eapi;
        atomic_store(&e->request_timeout_ms, next->request_timeout_ms);
        atomic_store(&e->max_inputs_per_request, next->max_inputs_per_request);
        atomic_store(&e->max_document_tokens, next->max_document_tokens);
    }
}

/* The key file and $ATTNSERVE_API_KEY are re-read whether or not the
 * file's name changed. */
static void reload_access(void *service, const config *next) {
    app *a = service;
    if (http_set_api_keys(a->http, next->api_keys, next->n_api_keys) != 0)
        log_error("out of memory copying API keys; keeping the old ones");
    http_set_metrics_require_key(a->http, next->metrics_require_key);
}

/* drain_timeout_s and drain_linger_ms are read from the configuration in
 * force when the signal comes: the swap that ends a reload applies them. */
static void reload_by_swap(void *service, const config *next) {
    (void)service;
    (void)next;
}

/* ---- reload (SIGHUP) ---------------------------------------------------------------- */

static void on_change(void *ctx, const char *name, const char *old_value, const char *new_value,
                      bool applied) {
    (void)ctx;
    if (applied)
        log_info("setting changed", LOG_KV("name", name), LOG_KV("from", old_value),
                 LOG_KV("to", new_value));
    else
        log_warn("setting needs a restart; keeping the running value", LOG_KV("name", name),
                 LOG_KV("running", old_value), LOG_KV("requested", new_value));
}

void reload_settings(app *a) {
    config next;
    char err[512];
    log_info("reloading configuration");
    if (config_reload(&a->cfg, &next, on_change, a, err, sizeof err) != 0) {
        log_error("reload refused; configuration unchanged", LOG_KV("error", err));
        return;
    }
    static const config_apply_fn apply[CONFIG_APPLY_GROUPS] = {
        [CONFIG_APPLY_LOG] = reload_log,           [CONFIG_APPLY_BACKEND] = reload_backend,
        [CONFIG_APPLY_BATCHING] = reload_batching, [CONFIG_APPLY_REQUESTS] = reload_requests,
        [CONFIG_APPLY_ACCESS] = reload_access,     [CONFIG_APPLY_SWAP] = reload_by_swap};
    config_apply(&next, apply, a);

    pthread_mutex_lock(&a->cfg_mu);
    config old = a->cfg;
    a->cfg = next;
    pthread_mutex_unlock(&a->cfg_mu);
    config_free(&old);
    log_info("configuration reloaded", LOG_KV("backend", srv_engine_backend(a->engine)->name));
}

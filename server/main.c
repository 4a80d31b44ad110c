/* main.c — attnserve: configuration, models, compute pool, backend,
 * scheduler and HTTP wired together, and the lifecycle (start, serve,
 * reload, drain, stop).
 *
 * Signals are blocked in every thread and taken synchronously by the main
 * thread with sigwaitinfo, so reload and drain run as ordinary code rather
 * than in signal handlers. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"
#include "server/api/attention_api.h"
#include "server/app.h"
#include "server/config.h"
#include "server/http/http.h"
#include "server/http/openapi.h"
#include "server/ops/backend_choice.h"
#include "server/ops/backend_selftest.h"
#include "server/ops/engine.h"
#include "server/ops/info.h"
#include "server/ops/log.h"
#include "server/ops/memmodel.h"
#include "server/ops/metrics.h"
#include "server/ops/models.h"
#include "server/ops/reload.h"
#include "server/ops/trace.h"
#include "server/ops/verify.h"
#include "server/work/batch.h"
#include "server/work/membudget.h"
#include "server/work/scheduler.h"
#include "server/work/workpool.h"

/* ---- start-up -------------------------------------------------------------------- */

static const char *backend_name(void *ctx) {
    const app *a = ctx;
    return srv_engine_backend(a->engine)->name;
}

/* The verifier and the trace, sized for the largest attention call the
 * service can run: the model's per-layer problem or the /v1/attention
 * bounds, whichever is larger. */
static int start_verification(app *a) {
    const config *c = &a->cfg;
    const int64_t T = c->max_batch_tokens;
    int32_t C = 0, D = 0; /* the largest over the models */
    int64_t bias = 0;     /* a relative position bias over a sequence's distances */
    for (size_t i = 0; i < a->nm; i++) {
        const encoder_info *m = a->m[i].mcfg;
        C = m->hidden_size > C ? m->hidden_size : C;
        D = m->head_dim > D ? m->head_dim : D;
        const attn_shape s = encoder_attn_shape(m, (int)T);
        const int64_t b = s.rel_bias ? (int64_t)m->num_heads * (2 * (int64_t)s.max_seqlen - 1) : 0;
        bias = b > bias ? b : bias;
    }
    const int32_t api_row = ATTN_API_MAX_HEADS * ATTN_API_MAX_HEAD_DIM;
    verify_options vo = {
        .max_tokens = (int32_t)T,
        .max_row_floats = C > api_row ? C : api_row,
        .max_kv_floats = T * (C > ATTN_API_ROW_FLOATS ? C : ATTN_API_ROW_FLOATS),
        .max_seqs = (int32_t)(c->max_batch_requests < c->verify_max_rows ? c->max_batch_requests
                                                                         : c->verify_max_rows),
        .max_seqlen = (int32_t)T,
        .max_head_dim = D > ATTN_API_MAX_HEAD_DIM ? D : ATTN_API_MAX_HEAD_DIM,
        .max_bias_floats = bias,
        .max_rows = (int32_t)c->verify_max_rows,
        .sample_rate = c->verify_sample_rate,
        .mismatch_threshold = (int32_t)c->verify_mismatch_threshold,
        .window_s = c->verify_window_s,
        .seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32),
        .trip = backend_choice_on_verify_trip,
        .trip_ctx = a,
    };
    char err[256];
    if (!(a->verify = verify_create(&vo, err, sizeof err)) ||
        !(a->trace = trace_create(c->trace_file, err, sizeof err))) {
        log_error("cannot start verification", LOG_KV("error", err));
        return 1;
    }
    attn_service_set_verifier(a->svc, a->verify);
    for (size_t i = 0; i < a->nm; i++)
        embed_service_set_verifier(a->m[i].embed, a->verify);
    batch_runner_set_trace(a->runner, a->trace, backend_name, a);
    return 0;
}

static void on_batch(const sched_batch *b, int run_status, void *ctx) {
    (void)run_status;
    (void)ctx;
    metrics_batch(b);
    metrics_model_batch((int)b->group, b); /* the group is the model's index */
}

static int start(app *a) {
    const config *c = &a->cfg;
    char err[256];
    a->nthreads = config_pool_threads(c);
    a->simd = attn_simd_name(attn_simd_active());
    metrics_init(ATTNSERVE_VERSION, a->simd);

    /* A request of max_body_bytes must be able to pass: its body and its
     * parse tree, which is at least as large as the body (text; numbers
     * take up to ~40 times their text). */
    if (c->max_request_memory_bytes / 2 < c->max_body_bytes) {
        log_error("max_request_memory_bytes cannot hold one request of max_body_bytes (its body "
                  "and its parsed JSON need at least twice max_body_bytes); raise it or lower "
                  "max_body_bytes",
                  LOG_KV("max_request_memory_bytes", c->max_request_memory_bytes),
                  LOG_KV("max_body_bytes", c->max_body_bytes));
        return CONFIG_EXIT_INVALID;
    }
    membudget_init(&a->budget, (size_t)c->max_request_memory_bytes);
    /* Plugins are loaded before the baseline is read, so what their
     * libraries hold once loaded is counted in runtime_bytes, offered or
     * not: a refused cuda plugin's cuBLASLt keeps about 100 MB resident. */
    srv_engines_init(c->plugin_dir);
    a->base_bytes = memmodel_resident_bytes();

    int rc = models_configure(a);
    for (size_t i = 0; rc == 0 && i < a->nm; i++)
        rc = models_load(c, &a->m[i]);
    if (rc != 0)
        return rc;
    if (!(a->pool = tp_create(a->nthreads))) {
        log_error("cannot start the compute threads", LOG_KV("threads", a->nthreads));
        return 1;
    }
    tp_set_spin_us(a->pool, (unsigned)c->pool_spin_us);
    /* Every backend that could serve is self-tested on this machine before
     * /ready turns 200; one that fails is never used (backend_choice.h). */
    const encoder_info *infos[CONFIG_MAX_MODELS];
    for (size_t i = 0; i < a->nm; i++)
        infos[i] = a->m[i].mcfg;
    attn_selftest_spec specs[CONFIG_MAX_MODELS];
    const size_t nspecs = backend_selftest_specs(infos, a->nm, specs);
    attn_shape shapes[1 + CONFIG_MAX_MODELS] = {backend_choice_bounds(c)};
    for (size_t i = 0; i < a->nm; i++)
        shapes[1 + i] = backend_choice_model_bounds(a, i, c);
    const attn_parallel par = tp_parallel(a->pool);
    if (backend_selftest_start(specs, nspecs, shapes, 1 + a->nm, &par) != 0)
        return 1;
    const attn_backend *backend = backend_choice_choose(a);
    if (!backend) {
        log_error("no attention backend can run the configured shapes and passed its self-test",
                  LOG_KV("backend", c->backend), LOG_KV("fallback_backends", c->fallback_backends));
        return CONFIG_EXIT_INVALID;
    }
    a->configured = backend_choice_configured(a, c);
    metrics_set_fallback_active(backend != a->configured);
    const attn_backend *usable[16];
    size_t nusable = backend_choice_usable(a, usable, sizeof usable / sizeof usable[0]);
    if (!(a->runner = batch_runner_create((int32_t)c->max_batch_requests))) {
        log_error("out of memory");
        return 1;
    }
    for (size_t i = 0; i < a->nm; i++)
        if ((rc = models_start(a, &a->m[i], backend, usable, nusable)) != 0)
            return rc;
    a->engine = a->m[0].engine;
    batch_runner_set_models(a->runner, a->model_names, a->nm);
    a->svc = attn_service_create((int32_t)c->max_batch_tokens, (int32_t)c->max_batch_requests,
                                 a->pool, a->engine, err, sizeof err);
    if (!a->svc) {
        log_error("cannot allocate the workspace", LOG_KV("error", err));
        return 1;
    }
    /* Each API registers its compute kind with the runner and its routes;
     * kinds run in this order within a batch. */
    a->api.svc = a->svc;
    if (info_register(a) != 0 || attn_api_register(&a->api, a->runner, &a->routes) != 0 ||
        models_register(a) != 0 || openapi_register(&a->routes) != 0) {
        log_error("cannot register the routes (a route taken twice or the table full)");
        return 1;
    }
    if ((rc = start_verification(a)) != 0) /**/
        return rc;
    metrics_set_workspace_bytes(memmodel_workspace_bytes(a));
    metrics_set_backend(backend);

    sched_config sc = {.limits = reload_sched_limits(c),
                       .run_batch = batch_run,
                       .run_ctx = a->runner,
                       .on_batch = on_batch};
    rc = sched_create(&a->sched, &sc);
    if (rc != SCHED_OK) {
        log_error("cannot start the scheduler", LOG_KV("error", sched_strerror(rc)));
        return 1;
    }
    metrics_set_scheduler(a->sched);
    a->api.sched = a->sched;
    a->api.max_batch_tokens = (int32_t)c->max_batch_tokens;
    atomic_store(&a->api.request_timeout_ms, c->request_timeout_ms);
    for (size_t i = 0; i < a->nm; i++)
        a->m[i].eapi.sched = a->sched;
    return 0;
}

static int listen_http(app *a) {
    const config *c = &a->cfg;
    http_options opt = {.host = c->host,
                        .port = (int)c->port,
                        .max_connections = (unsigned)c->max_connections,
                        .connection_timeout_s = (unsigned)c->connection_timeout_s,
                        .max_body_bytes = (size_t)c->max_body_bytes,
                        .backend_name = backend_name,
                        .backend_ctx = a,
                        .cors_allow_origins = c->cors_allow_origins,
                        .codec_workers = workpool_default_size(c->codec_workers)};
    if (!(a->http = http_create(&opt, a->routes.r, a->routes.n)))
        return 1;
    if (http_set_api_keys(a->http, c->api_keys, c->n_api_keys) != 0) {
        log_error("out of memory copying API keys");
        return 1;
    }
    http_set_metrics_require_key(a->http, c->metrics_require_key);
    metrics_set_codec(http_codec_pool(a->http));
    return 0;
}

/* ---- drain (SIGTERM, SIGINT) -------------------------------------------------------- */

static int64_t ms_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* First lingers for drain_linger_ms: /ready is 503, so balancers take the
 * instance out, while connections are still accepted and every request is
 * served, each answer with Connection: close, so a keep-alive request on
 * its way and a connection in the listen backlog are answered, not reset.
 * Then stops taking connections and answers every request already started:
 * requests that start from then on get 503 (http_draining), the scheduler
 * keeps running the ones before. Returns 0 once none is left, or -1 if work
 * was still queued or running at drain_timeout_s (requests are then still
 * parked and nothing can be freed safely). */
static int drain(app *a, int sig) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int64_t limit_ms = a->cfg.drain_timeout_s * 1000;
    const int64_t linger_ms = a->cfg.drain_linger_ms < limit_ms ? a->cfg.drain_linger_ms : limit_ms;
    log_info("draining", LOG_KV("signal", strsignal(sig)),
             LOG_KV("active_requests", http_active(a->http)), LOG_KV("drain_linger_ms", linger_ms),
             LOG_KV("drain_timeout_s", a->cfg.drain_timeout_s));
    atomic_store(&a->ready, false);
    metrics_set_ready(0);
    http_linger(a->http);
    const struct timespec linger = {linger_ms / 1000, (linger_ms % 1000) * 1000000};
    while (nanosleep(&linger, NULL) != 0 && errno == EINTR)
        ;
    http_quiesce(a->http);
    log_info("listener closed", LOG_KV("active_requests", http_active(a->http)),
             LOG_KV("ms", ms_since(&t0)));
    const struct timespec tick = {0, 5 * 1000 * 1000};
    while (http_active(a->http) > 0 && ms_since(&t0) < limit_ms)
        nanosleep(&tick, NULL);
    sched_drain(a->sched, NULL, NULL);
    int64_t left = limit_ms - ms_since(&t0);
    if (sched_wait_drained(a->sched, left > 0 ? left : 0) != SCHED_OK) {
        log_error("drain timed out with requests still queued or running",
                  LOG_KV("active_requests", http_active(a->http)));
        return -1;
    }
    /* Requests still active now started after the quiesce (keep-alive
     * clients) and have had their 503, or are slow uploads cut at the limit. */
    if (ms_since(&t0) >= limit_ms)
        log_warn("drain timed out; closing connections with requests unfinished",
                 LOG_KV("active_requests", http_active(a->http)));
    log_info("drained", LOG_KV("ms", ms_since(&t0)));
    return 0;
}

/* ---- main ------------------------------------------------------------------------------ */

static void stop(app *a) {
    metrics_set_codec(NULL);
    http_destroy(a->http);
    verify_stop(a->verify); /* its trip callback may call the scheduler */
    sched_destroy(a->sched);
    verify_destroy(a->verify);
    trace_destroy(a->trace);
    batch_runner_destroy(a->runner);
    attn_service_destroy(a->svc);
    models_free(a);
    tp_destroy(a->pool);
    openapi_free();
    config_free(&a->cfg);
    pthread_mutex_destroy(&a->cfg_mu);
    pthread_mutex_destroy(&a->backend_mu);
}

static void log_start(app *a) {
    json_t *settings = config_to_json(&a->cfg);
    json_t *memory = memmodel_json(a);
    const attn_backend *b = srv_engine_backend(a->engine);
    log_info("serving", LOG_KV("version", ATTNSERVE_VERSION), LOG_KV("host", a->cfg.host),
             LOG_KV("port", http_port(a->http)), LOG_KV("backend", b->name),
             LOG_KV("simd", b->simd_path()), LOG_KV("cpu_simd", a->simd),
             LOG_KV("threads", a->nthreads), LOG_KV("api_keys", a->cfg.n_api_keys),
             LOG_JSON("memory", memory), LOG_JSON("config", settings));
    json_decref(settings);
    json_decref(memory);
}

int main(int argc, char **argv) {
    /* Blocked before any thread starts, so every thread inherits the mask and
     * only sigwaitinfo below ever sees these signals. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* `attnserve selftest [settings]`: the start-up self-test of every
     * backend on every SIMD path, as a table (backend_selftest.h). */
    if (argc > 1 && strcmp(argv[1], "selftest") == 0)
        return backend_selftest_command(argv[0], ATTNSERVE_VERSION, argc - 1, argv + 1, stdout);

    static app a;
    pthread_mutex_init(&a.cfg_mu, NULL);
    pthread_mutex_init(&a.backend_mu, NULL);
    /* Before any JSON value exists (the config file is JSON): jansson
     * allocates through the request-memory budget's allocator from now on,
     * charging it only inside a request's scope. The limit is set at start. */
    membudget_init(&a.budget, 0);
    membudget_install(&a.budget);
    config_action action;
    char err[512];
    if (config_load(&a.cfg, argc, argv, &action, err, sizeof err) != 0) {
        fprintf(stderr, "attnserve: %s\n", err);
        return CONFIG_EXIT_INVALID;
    }
    if (action != CONFIG_RUN) {
        int rc = 0;
        if (action == CONFIG_HELP)
            config_print_help(stdout, argv[0]);
        else if (action == CONFIG_PRINT)
            rc = config_print(&a.cfg, stdout) == 0 ? 0 : 1;
        else
            printf("attnserve %s\n", ATTNSERVE_VERSION);
        config_free(&a.cfg);
        return rc;
    }
    log_configure(a.cfg.log_level, a.cfg.log_format);

    int rc = start(&a);
    if (rc == 0 && openapi_init(ATTNSERVE_VERSION) != 0) {
        log_error("cannot load the built-in OpenAPI document");
        rc = 1;
    }
    /* Checked before the listener opens, so that a refused start never
     * accepts a request: every mapping exists now, and so does every thread
     * but the listener's. */
    const size_t threads = memmodel_process_threads() + memmodel_listen_threads(&a.cfg);
    if (rc == 0) {
        a.code_bytes = memmodel_code_bytes();
        a.threads_bytes = memmodel_threads_bytes(threads);
        rc = memmodel_check_limit(&a);
    }
    if (rc == 0)
        rc = listen_http(&a);
    if (rc != 0) {
        stop(&a);
        return rc;
    }
    const size_t running = memmodel_process_threads();
    if (running > threads)
        log_warn("more threads run than the worst-case memory counts",
                 LOG_KV("threads", (uint64_t)running), LOG_KV("counted", (uint64_t)threads));
    metrics_set_memory(memmodel_worst_case_bytes(&a), &a.budget);
    atomic_store(&a.ready, true);
    metrics_set_ready(1);
    log_start(&a);

    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&sigs, &si);
        if (sig < 0 && errno == EINTR)
            continue;
        if (sig == SIGHUP) {
            reload_settings(&a);
            continue;
        }
        if (drain(&a, sig) != 0) {
            /* Parked requests still belong to the scheduler and MHD: freeing
             * either now would be unsafe, so leave without cleaning up. */
            _exit(1);
        }
        break;
    }
    stop(&a);
    log_info("stopped");
    return 0;
}

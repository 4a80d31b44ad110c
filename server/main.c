/* main.c — attnserve: configuration, model, compute pool, backend,
 * scheduler and HTTP wired together, the operations endpoints, and the
 * lifecycle.
 *
 * Signals are blocked in every thread and taken synchronously by the main
 * thread with sigwaitinfo, so reload and drain run as ordinary code rather
 * than in signal handlers. */
#include <assert.h>
#include <errno.h>
#include <math.h>
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
#include "kernels/selftest.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "model/encoder.h"
#include "model/tokenizer.h"
#include "server/app.h"
#include "server/attention_api.h"
#include "server/backend_choice.h"
#include "server/backend_selftest.h"
#include "server/batch.h"
#include "server/compat_api.h"
#include "server/config.h"
#include "server/embed_api.h"
#include "server/embed_offload.h"
#include "server/engine.h"
#include "server/errors.h"
#include "server/http.h"
#include "server/info.h"
#include "server/log.h"
#include "server/membudget.h"
#include "server/memmodel.h"
#include "server/metrics.h"
#include "server/openapi.h"
#include "server/routes.h"
#include "server/scheduler.h"
#include "server/score_api.h"
#include "server/trace.h"
#include "server/verify.h"

#ifndef ATTNSERVE_VERSION
#define ATTNSERVE_VERSION "0.1.0"
#endif

/* Every model's kinds and metrics slot must have room: a change to one
 * bound that forgets the others fails here, not at start. */
static_assert(BATCH_MAX_KINDS >= 1 + 2 * CONFIG_MAX_MODELS, "an attention kind, two per model");
static_assert(METRICS_MAX_MODELS >= CONFIG_MAX_MODELS, "a metrics slot per model");

static const char *backend_name(void *ctx) {
    const app *a = ctx;
    return srv_engine_backend(a->engine)->name;
}

/* ---- start-up -------------------------------------------------------------------- */

/* The verifier and the trace, sized for the largest attention call the
 * service can run: the model's per-layer problem or the /v1/attention
 * bounds, whichever is larger. */
static int start_verification(app *a) {
    const config *c = &a->cfg;
    const int64_t T = c->max_batch_tokens;
    int32_t C = 0, D = 0; /* the largest over the models */
    for (size_t i = 0; i < a->nm; i++) {
        C = a->m[i].mcfg->hidden_size > C ? a->m[i].mcfg->hidden_size : C;
        D = a->m[i].mcfg->head_dim > D ? a->m[i].mcfg->head_dim : D;
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

static sched_limits limits_of(const config *c) {
    return (sched_limits){.max_batch_tokens = (int32_t)c->max_batch_tokens,
                          .max_batch_requests = (int32_t)c->max_batch_requests,
                          .max_wait_us = (uint32_t)c->max_wait_us,
                          .max_queue = (uint32_t)c->max_queue};
}

/* The tokenizer and the model's shapes, and the settings checked against
 * them. What the model directory or the settings get wrong is a start-up
 * error (status 2); only running out of memory is status 1. */
static int load_model(const config *c, served_model *sm) {
    char err[512];
    int rc = tok_load(&sm->tok, sm->path, err, sizeof err);
    if (rc != TOK_OK) {
        log_error("cannot load the tokenizer", LOG_KV("model", sm->path), LOG_KV("error", err));
        return rc == TOK_ENOMEM ? 1 : CONFIG_EXIT_INVALID;
    }
    /* The shapes only: the engine loads the weights (start), once the
     * attention backends its workspace must serve are known from them. */
    rc = encoder_describe(sm->path, &sm->mdesc, err, sizeof err);
    if (rc != BERT_OK) {
        log_error("cannot load the model", LOG_KV("model", sm->path),
                  LOG_KV("problem", bert_strerror(rc)), LOG_KV("error", err));
        return rc == BERT_ENOMEM ? 1 : CONFIG_EXIT_INVALID;
    }
    /* The weights themselves load later (start_model, after every backend's
     * self-test); their header is checked now, so a broken file refuses the
     * start at once instead of after the self-tests. */
    rc = encoder_check_weights(sm->path, err, sizeof err);
    if (rc != BERT_OK) {
        log_error("cannot load the model", LOG_KV("model", sm->path),
                  LOG_KV("problem", bert_strerror(rc)), LOG_KV("error", err));
        return CONFIG_EXIT_INVALID;
    }
    sm->mcfg = encoder_desc_info(sm->mdesc);
    const encoder_info *m = sm->mcfg;
    if (tok_vocab_size(sm->tok) > m->vocab_size) {
        log_error("the tokenizer's vocabulary is larger than the model's",
                  LOG_KV("model", sm->path), LOG_KV("tokenizer_vocab", tok_vocab_size(sm->tok)),
                  LOG_KV("model_vocab", m->vocab_size));
        return CONFIG_EXIT_INVALID;
    }
    /* An input of the model's full length must fit one batch: with
     * truncation off any input may be that long, and with it on inputs are
     * cut to exactly that length. */
    if (c->max_batch_tokens < m->max_positions) {
        log_error("max_batch_tokens is below the model's maximum input length; raise it",
                  LOG_KV("max_batch_tokens", c->max_batch_tokens),
                  LOG_KV("model_max_length", m->max_positions), LOG_KV("model", sm->path));
        return CONFIG_EXIT_INVALID;
    }
    /* Truncation as sentence-transformers does it: at the model's
     * max_seq_length unless the setting overrides it, never beyond what the
     * position embeddings allow. */
    if (sm->max_seq_setting > m->max_positions ||
        (sm->max_seq_setting && sm->max_seq_setting <= tok_num_special(sm->tok))) {
        log_error("max_seq_length must leave room for a token beside the special tokens and be "
                  "at most the model's max_position_embeddings",
                  LOG_KV("max_seq_length", sm->max_seq_setting),
                  LOG_KV("special_tokens", tok_num_special(sm->tok)),
                  LOG_KV("max_position_embeddings", m->max_positions), LOG_KV("model", sm->path));
        return CONFIG_EXIT_INVALID;
    }
    sm->max_seq_length = sm->max_seq_setting ? (int32_t)sm->max_seq_setting : m->max_seq_length;
    log_info("model config read", LOG_KV("model", sm->path), LOG_KV("name", sm->name),
             LOG_KV("hidden_size", m->hidden_size), LOG_KV("layers", m->num_layers),
             LOG_KV("max_length", m->max_positions));
    return 0;
}

static char *dup_or_null(const char *s, bool *oom) {
    char *d = strdup(s);
    *oom = *oom || !d;
    return d;
}

/* A copy of the directory's last component, which names the one model:
 * "models/x/" is "x". */
static char *dir_name(const char *path, bool *oom) {
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    if (start == end) /* "/" */
        start = 0;
    char *d = strndup(path + start, end - start);
    *oom = *oom || !d;
    return d;
}

/* The served models from the settings: the `models` list, or else the one
 * `model` (named by its directory's last component, "models/x/" is "x")
 * with model_aliases, max_seq_length and truncate. Copies, since a reload
 * replaces cfg's strings (these settings need a restart). */
static int configure_models(app *a) {
    const config *c = &a->cfg;
    config_model list[CONFIG_MAX_MODELS];
    size_t n = 0;
    char err[512];
    if (c->models[0] &&
        config_models_parse(c->models, list, CONFIG_MAX_MODELS, &n, err, sizeof err) != 0) {
        log_error("setting \"models\" is invalid", LOG_KV("error", err));
        return CONFIG_EXIT_INVALID;
    }
    bool oom = false;
    if (n == 0) {
        /* The one `model`, from the settings themselves: nothing is cut to
         * a buffer's size (a long path must still name its model). */
        served_model *sm = &a->m[0];
        sm->path = dup_or_null(c->model, &oom);
        sm->name = dir_name(c->model, &oom);
        sm->aliases = dup_or_null(c->model_aliases, &oom);
        sm->engine_setting = dup_or_null(c->engine, &oom);
        sm->precision_setting = dup_or_null(c->precision, &oom);
        sm->truncate = c->truncate;
        sm->max_seq_setting = c->max_seq_length;
        a->nm = 1;
    }
    for (size_t i = 0; i < n; i++) {
        served_model *sm = &a->m[i];
        sm->name = dup_or_null(list[i].name, &oom);
        sm->path = dup_or_null(list[i].path, &oom);
        sm->aliases = dup_or_null(list[i].aliases, &oom);
        sm->engine_setting = dup_or_null(list[i].engine[0] ? list[i].engine : c->engine, &oom);
        sm->precision_setting =
            dup_or_null(list[i].precision[0] ? list[i].precision : c->precision, &oom);
        sm->truncate = list[i].truncate >= 0 ? list[i].truncate != 0 : c->truncate;
        sm->max_seq_setting =
            list[i].max_seq_length >= 0 ? list[i].max_seq_length : c->max_seq_length;
        a->nm = i + 1;
    }
    if (oom) {
        log_error("out of memory");
        return 1;
    }
    return 0;
}

/* Model sm's engine (its weights), embeddings service and API state. */
static int start_model(app *a, served_model *sm, const attn_backend *backend,
                       const attn_backend *const *usable, size_t nusable) {
    const config *c = &a->cfg;
    char err[256];
    const srv_engine_options eo = {.engine = sm->engine_setting,
                                   .precision = sm->precision_setting,
                                   .plugin_dir = c->plugin_dir,
                                   .gpu_attention = c->gpu_attention,
                                   .model_dir = sm->path,
                                   .model_name = sm->name,
                                   .max_tokens = (int32_t)c->max_batch_tokens,
                                   .max_seqs = (int32_t)c->max_batch_requests,
                                   .pool = a->pool,
                                   .backends = usable,
                                   .nbackends = nusable,
                                   .backend = backend};
    int rc = srv_engine_create(&eo, &sm->engine);
    if (rc != 0)
        return rc;
    sm->embed = embed_service_create(sm->engine, (int32_t)c->max_batch_tokens,
                                     (int32_t)c->max_batch_requests, err, sizeof err);
    if (!sm->embed) {
        log_error("cannot allocate the model workspace", LOG_KV("model", sm->name),
                  LOG_KV("error", err));
        return 1;
    }
    const size_t i = (size_t)(sm - a->m);
    const encoder_info *m = engine_model(srv_engine_instance(sm->engine));
    embed_api *e = &sm->eapi;
    e->svc = sm->embed;
    e->tok = sm->tok;
    e->model = m;
    e->model_name = sm->name;
    e->max_batch_tokens = (int32_t)c->max_batch_tokens;
    e->max_batch_requests = (int32_t)c->max_batch_requests;
    e->truncate = sm->truncate;
    e->max_seq_length = sm->max_seq_length;
    e->model_aliases = sm->aliases;
    e->accept_any_model = c->accept_any_model;
    e->created = (int64_t)time(NULL);
    atomic_store(&e->max_inputs_per_request, c->max_inputs_per_request);
    atomic_store(&e->max_document_tokens, c->max_document_tokens);
    atomic_store(&e->request_timeout_ms, c->request_timeout_ms);
    e->group = (uint32_t)i;
    score_api *s = &sm->score;
    s->eapi = e;
    s->classifier = m->task == ENCODER_TASK_CLASSIFY;
    s->num_labels = m->num_labels;
    s->labels = m->labels;
    s->multi_label = m->problem_type && strcmp(m->problem_type, "multi_label_classification") == 0;
    s->type_vocab_size = m->type_vocab_size > 0 ? m->type_vocab_size : 1;
    s->max_length = embed_max_seq_length(e);
    if (compat_api_init(&sm->compat, e, sm->path, err, sizeof err) != 0) {
        log_error("cannot read the model's prompts", LOG_KV("model", sm->name),
                  LOG_KV("error", err));
        return CONFIG_EXIT_INVALID;
    }
    /* The metrics slot is the scheduler group: on_batch counts group i's
     * batches in slot i. */
    if (metrics_add_model(sm->name, s->classifier ? "classify" : "embed",
                          srv_engine_name(sm->engine),
                          srv_engine_precision(sm->engine)) != (int)i) {
        log_error("cannot register the model's metrics", LOG_KV("model", sm->name));
        return 1;
    }
    srv_engine_set_metrics_slot(sm->engine, (int)i);
    metrics_set_model_attention((int)i, engine_attn_kernel(srv_engine_instance(sm->engine), NULL));
    a->model_names[i] = sm->name;
    a->eapis[i] = e;
    a->compats[i] = &sm->compat;
    a->scores[i] = &sm->score;
    return 0;
}

/* The first classifier with one label (reranker) or with more (not), else
 * the first classifier of any kind, or -1: rerank routes prefer a
 * reranker, /predict and /classify a classifier of several labels. */
static int first_classifier(const app *a, bool reranker) {
    for (size_t i = 0; i < a->nm; i++)
        if (a->m[i].score.classifier && (a->m[i].score.num_labels == 1) == reranker)
            return (int)i;
    for (size_t i = 0; i < a->nm; i++)
        if (a->m[i].score.classifier)
            return (int)i;
    return -1;
}

/* Each model's kinds, and every route once: routes without a model field
 * (TEI's) are the first embedder's or the first classifier's, POST / and
 * /invocations the first model's task, as TEI serving that model routes
 * them; a request naming a model is handed to it (the modules' peers). */
static int register_models(app *a) {
    int embedder = -1;
    for (size_t i = 0; i < a->nm && embedder < 0; i++)
        if (!a->m[i].score.classifier)
            embedder = (int)i;
    const int classifier = first_classifier(a, false), reranker = first_classifier(a, true);
    const size_t e = embedder >= 0 ? (size_t)embedder : 0;
    const size_t k = classifier >= 0 ? (size_t)classifier : 0;
    for (size_t i = 0; i < a->nm; i++) {
        served_model *sm = &a->m[i];
        if (a->nm > 1) {
            sm->eapi.peers = a->eapis;
            sm->eapi.npeers = a->nm;
            sm->compat.peers = a->compats;
            sm->score.peers = a->scores;
            sm->score.rerank = reranker >= 0 ? a->scores[reranker] : NULL;
            sm->score.root = a->scores[0];
        }
        sm->compat.no_root = i != e || a->m[0].score.classifier;
        sm->score.no_root = i != k || !a->m[0].score.classifier;
        int rc = i == e ? embed_api_register(&sm->eapi, a->runner, &a->routes)
                        : embed_api_add_kind(&sm->eapi, a->runner);
        if (rc == 0)
            rc = i == k ? score_api_register(&sm->score, sm->embed, a->runner, &a->routes)
                        : score_api_add_kind(&sm->score, sm->embed, a->runner);
        if (rc == 0 && i == e)
            rc = compat_api_register(&sm->compat, &a->routes);
        if (rc != 0)
            return -1;
    }
    return 0;
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

    int rc = configure_models(a);
    for (size_t i = 0; rc == 0 && i < a->nm; i++)
        rc = load_model(c, &a->m[i]);
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
        if ((rc = start_model(a, &a->m[i], backend, usable, nusable)) != 0)
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
        register_models(a) != 0 || openapi_register(&a->routes) != 0) {
        log_error("cannot register the routes (a route taken twice or the table full)");
        return 1;
    }
    if ((rc = start_verification(a)) != 0) /**/
        return rc;
    metrics_set_workspace_bytes(memmodel_workspace_bytes(a));
    metrics_set_backend(backend);

    sched_config sc = {
        .limits = limits_of(c), .run_batch = batch_run, .run_ctx = a->runner, .on_batch = on_batch};
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
    embed_offload_set_threshold((size_t)c->tokenize_offload_bytes);
    if (embed_offload_start() != 0) {
        log_error("cannot start the tokenization thread");
        return 1;
    }
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
                        .cors_allow_origins = c->cors_allow_origins};
    if (!(a->http = http_create(&opt, a->routes.r, a->routes.n)))
        return 1;
    if (http_set_api_keys(a->http, c->api_keys, c->n_api_keys) != 0) {
        log_error("out of memory copying API keys");
        return 1;
    }
    http_set_metrics_require_key(a->http, c->metrics_require_key);
    return 0;
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

static void reload(app *a) {
    config next;
    char err[512];
    log_info("reloading configuration");
    if (config_reload(&a->cfg, &next, on_change, a, err, sizeof err) != 0) {
        log_error("reload refused; configuration unchanged", LOG_KV("error", err));
        return;
    }
    if (log_configure(next.log_level, next.log_format) != 0)
        log_warn("log settings refused", LOG_KV("level", next.log_level),
                 LOG_KV("format", next.log_format));
    backend_choice_reload(a, &next);
    sched_limits lim = limits_of(&next);
    if (sched_set_limits(a->sched, &lim) != SCHED_OK)
        log_warn("batch limits refused; keeping the ones in force");
    atomic_store(&a->api.request_timeout_ms, next.request_timeout_ms);
    for (size_t i = 0; i < a->nm; i++) {
        embed_api *e = &a->m[i].eapi;
        atomic_store(&e->request_timeout_ms, next.request_timeout_ms);
        atomic_store(&e->max_inputs_per_request, next.max_inputs_per_request);
        atomic_store(&e->max_document_tokens, next.max_document_tokens);
    }
    embed_offload_set_threshold((size_t)next.tokenize_offload_bytes);
    if (http_set_api_keys(a->http, next.api_keys, next.n_api_keys) != 0)
        log_error("out of memory copying API keys; keeping the old ones");
    http_set_metrics_require_key(a->http, next.metrics_require_key);

    pthread_mutex_lock(&a->cfg_mu);
    config old = a->cfg;
    a->cfg = next;
    pthread_mutex_unlock(&a->cfg_mu);
    config_free(&old);
    log_info("configuration reloaded", LOG_KV("backend", srv_engine_backend(a->engine)->name));
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
    embed_offload_stop(); /* drained: no request waits for its tokenization */
    http_destroy(a->http);
    verify_stop(a->verify); /* its trip callback may call the scheduler */
    sched_destroy(a->sched);
    verify_destroy(a->verify);
    trace_destroy(a->trace);
    batch_runner_destroy(a->runner);
    attn_service_destroy(a->svc);
    for (size_t i = 0; i < a->nm; i++) {
        served_model *sm = &a->m[i];
        embed_service_destroy(sm->embed);
        srv_engine_destroy(sm->engine);
        tok_free(sm->tok);
        encoder_desc_free(sm->mdesc);
        compat_api_free(&sm->compat);
        free(sm->name);
        free(sm->path);
        free(sm->aliases);
        free(sm->engine_setting);
        free(sm->precision_setting);
    }
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
    const size_t threads = memmodel_process_threads() + MEMMODEL_LISTEN_THREADS;
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
            reload(&a);
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

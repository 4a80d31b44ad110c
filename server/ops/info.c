/* info.c — the operations routes: health, readiness, /metrics, and /info's
 * document (version, backend and its fallback, limits, memory, models,
 * engine, self-test, verification, and TEI's fields beside ours). */
#include "server/ops/info.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/errors.h"
#include "server/ops/backend_selftest.h"
#include "server/ops/memmodel.h"
#include "server/ops/metrics.h"
#include "server/work/workpool.h"

static int handle_health(http_request *req, void *ctx) {
    (void)ctx;
    return http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

static int handle_ready(http_request *req, void *ctx) {
    app *a = ctx;
    if (!atomic_load(&a->ready))
        return http_reply_error(req, SRV_EUNAVAILABLE, "not ready: starting or draining");
    return http_reply_json(req, 200, json_pack("{s:s}", "status", "ready"));
}

static int handle_metrics(http_request *req, void *ctx) {
    (void)ctx;
    size_t len = 0;
    char *text = metrics_render(&len);
    if (!text)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory rendering metrics");
    int r = http_reply_text(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
    return r;
}

static json_t *model_json(const served_model *sm) {
    const encoder_info *m = engine_model(srv_engine_instance(sm->engine));
    /* max_length: what the position embeddings allow (token-id inputs may
     * be that long); max_seq_length: where text inputs are truncated, and
     * max_seq_length_model the model's own (sentence_bert_config.json).
     * task, architecture, output_dim and labels: what the model answers. */
    json_t *labels = json_array();
    for (int32_t i = 0; labels && i < m->num_labels; i++)
        json_array_append_new(labels, json_string(m->labels[i]));
    /* family .. window: what runs (encoder_info), NULL where an engine
     * does not say. */
    json_t *blocks = json_pack(
        "{s:s?, s:s?, s:s?, s:s?, s:s?, s:i, s:i}", "family", m->family, "position", m->position,
        "norm", m->norm, "mlp", m->mlp, "attention", m->attention, "kv_heads",
        m->num_kv_heads ? m->num_kv_heads : m->num_heads, "window", m->window);
    json_t *o =
        json_pack("{s:s, s:s, s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:b, s:b, s:s, "
                  "s:s, s:s, s:i, s:i, s:o, s:s, s:b}",
                  "name", sm->name, "path", sm->path, "loaded", 1, "hidden_size", m->hidden_size,
                  "layers", m->num_layers, "heads", m->num_heads, "intermediate_size",
                  m->intermediate_size, "vocab_size", m->vocab_size, "max_length", m->max_positions,
                  "max_seq_length", sm->max_seq_length, "max_seq_length_model", m->max_seq_length,
                  "pooling", m->pooling, "normalize", m->normalize, "truncate", sm->truncate,
                  "task", m->task == ENCODER_TASK_CLASSIFY ? "classify" : "embed", "model_type",
                  m->model_type, "architecture", m->architecture, "output_dim", m->output_dim,
                  "dense_modules", m->dense_modules, "labels", labels, "problem_type",
                  m->problem_type, "token_types", m->token_types);
    if (o && blocks)
        json_object_update(o, blocks);
    json_decref(blocks);
    return o;
}

/* Text Embeddings Inference's /info fields, beside ours, so TEI's clients
 * read what they expect: requests are tokenized on the codec workers,
 * the model computes in float32, a request takes max_inputs_per_request
 * inputs; model_dtype names the precision the engine computes in. */
static int tei_info(const app *a, json_t *info) {
    const config *c = &a->cfg;
    const served_model *sm = &a->m[0];
    const encoder_info *m = engine_model(srv_engine_instance(sm->engine));
    const char *prec = srv_engine_precision(sm->engine);
    const char *dtype = !strcmp(prec, "bf16")   ? "bfloat16"
                        : !strcmp(prec, "fp16") ? "float16"
                        : !strcmp(prec, "int8") ? "int8"
                                                : "float32"; /* fp32, and tf32's fp32 storage */
    /* TEI's model_type: {"embedding": {"pooling"}}, or for a classifier
     * {"classifier" | "reranker": {"id2label", "label2id"}}, a reranker being
     * a classifier with one label, as TEI decides. */
    json_t *kind = NULL;
    if (m->task == ENCODER_TASK_CLASSIFY) {
        json_t *id2label = json_object(), *label2id = json_object();
        for (int32_t i = 0; id2label && label2id && i < m->num_labels; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", (int)i);
            json_object_set_new(id2label, key, json_string(m->labels[i]));
            json_object_set_new(label2id, m->labels[i], json_integer(i));
        }
        kind = json_pack("{s:{s:o, s:o}}", m->num_labels == 1 ? "reranker" : "classifier",
                         "id2label", id2label, "label2id", label2id);
    } else
        kind = json_pack("{s:{s:s}}", "embedding", "pooling", m->pooling);
    json_t *tei = json_pack(
        "{s:s, s:s, s:n, s:s, s:o, s:I, s:i, s:I, s:I, s:I, s:b, s:i, s:n, s:n}", "model_id",
        sm->name, "served_model_name", sm->name, "model_sha", "model_dtype", dtype, "model_type",
        kind, "max_concurrent_requests", (json_int_t)c->max_queue, "max_input_length",
        sm->max_seq_length, "max_batch_tokens", (json_int_t)c->max_batch_tokens,
        "max_batch_requests", (json_int_t)c->max_batch_requests, "max_client_batch_size",
        (json_int_t)c->max_inputs_per_request, "auto_truncate", sm->truncate,
        "tokenization_workers", (int)workpool_default_size(c->codec_workers), "sha",
        "docker_label");
    int rc = tei ? json_object_update_missing(info, tei) : -1;
    json_decref(tei);
    return rc;
}

/* The verification settings and whether it has switched. */
static json_t *verification_json(const app *a) {
    const config *c = &a->cfg;
    uint64_t checked = 0, mismatched = 0, skipped = 0;
    if (a->verify)
        verify_counts(a->verify, &checked, &mismatched, &skipped);
    return json_pack(
        "{s:f, s:I, s:I, s:I, s:b, s:s, s:I, s:I, s:I, s:s}", "sample_rate", c->verify_sample_rate,
        "mismatch_threshold", (json_int_t)c->verify_mismatch_threshold, "window_s",
        (json_int_t)c->verify_window_s, "max_rows", (json_int_t)c->verify_max_rows, "tripped",
        a->verify && verify_tripped(a->verify), "fallback_reason", a->fallback_reason, "checked",
        (json_int_t)checked, "mismatches", (json_int_t)mismatched, "skipped", (json_int_t)skipped,
        "trace_file", c->trace_file);
}

/* /info's "models": every served model as "model" describes the first,
 * with its aliases, engine, precision and share of the memory. */
static json_t *models_json(const app *a) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < a->nm; i++) {
        const served_model *sm = &a->m[i];
        json_int_t owned, mapped, ws;
        memmodel_model(sm, &owned, &mapped, &ws);
        json_t *one = model_json(sm);
        json_t *extra = json_pack(
            "{s:o, s:s, s:s, s:I, s:I}", "aliases", config_names_json(sm->aliases), "engine",
            srv_engine_name(sm->engine), "precision", srv_engine_precision(sm->engine),
            "weights_bytes", owned + mapped, "workspace_bytes", ws);
        int rc = one && extra ? json_object_update_missing(one, extra) : -1;
        json_decref(extra);
        if (rc != 0)
            json_decref(one);
        if (rc != 0 || json_array_append_new(list, one) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    return list;
}

static json_t *info_json(app *a) {
    pthread_mutex_lock(&a->cfg_mu);
    const config *c = &a->cfg;
    const attn_backend *b = srv_engine_backend(a->engine);
    json_t *backends = json_array();
    for (const attn_backend *const *it = attn_backends(); backends && *it; it++)
        if (json_array_append_new(backends, json_string((*it)->name)) != 0) {
            json_decref(backends); /* a part missing: no document */
            backends = NULL;
        }
    /* `o`, not `o*`: a part that could not be made (the budget refused it)
     * fails the whole document rather than silently leaving it out. */
    json_t *info = json_pack(
        "{s:s, s:s, s:s, s:o, s:s, s:s, s:i, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
        "s:i, s:i, s:i}, s:o, s:o}",
        "version", ATTNSERVE_VERSION, "backend", b->name, "backend_setting", c->backend, "backends",
        backends, "simd", b->simd_path(), "cpu_simd", a->simd, "threads", a->nthreads, "limits",
        "max_batch_tokens", (json_int_t)c->max_batch_tokens, "max_batch_requests",
        (json_int_t)c->max_batch_requests, "max_wait_us", (json_int_t)c->max_wait_us, "max_queue",
        (json_int_t)c->max_queue, "request_timeout_ms", (json_int_t)c->request_timeout_ms,
        "max_body_bytes", (json_int_t)c->max_body_bytes, "max_connections",
        (json_int_t)c->max_connections, "connection_timeout_s", (json_int_t)c->connection_timeout_s,
        "drain_timeout_s", (json_int_t)c->drain_timeout_s, "max_inputs_per_request",
        (json_int_t)c->max_inputs_per_request, "attention_max_heads", ATTN_API_MAX_HEADS,
        "attention_max_head_dim", ATTN_API_MAX_HEAD_DIM, "attention_row_floats",
        ATTN_API_ROW_FLOATS, "memory", memmodel_json(a), "model", model_json(&a->m[0]));
    /* Safety net: the self-test of every backend, whether the
     * backend in force is a fallback for the configured one (after a failed
     * self-test or a verification trip), and verification's state. */
    if (info &&
        (json_object_set_new(info, "backend_configured",
                             a->configured ? json_string(a->configured->name) : json_null()) ||
         json_object_set_new(info, "fallback_active", json_boolean(b != a->configured)) ||
         json_object_set_new(info, "selftest", backend_selftest_json()) ||
         json_object_set_new(info, "engine",
                             srv_engine_info(a->engine, a->m[0].engine_setting,
                                             a->m[0].precision_setting, c->plugin_dir)) ||
         json_object_set_new(info, "verification", verification_json(a)) ||
         json_object_set_new(info, "models", models_json(a)) ||
         /* Chunking's bound beside the other request limits. */
         json_object_set_new(json_object_get(info, "limits"), "max_document_tokens",
                             json_integer((json_int_t)c->max_document_tokens)) ||
         tei_info(a, info))) {
        json_decref(info);
        info = NULL;
    }
    pthread_mutex_unlock(&a->cfg_mu);
    return info;
}

static int handle_info(http_request *req, void *ctx) {
    json_t *info = info_json(ctx);
    /* A refusal by the request-memory budget is its 503 (or 413),
     * not a 500, and never a 200 with parts missing. */
    if (membudget_refused()) {
        json_decref(info);
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    }
    if (!info)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory");
    return http_reply_json(req, 200, info);
}

/* The operations routes: health, readiness, /info and /metrics. */
int info_register(app *a) {
    const http_route ops[] = {
        {"GET", "/health", false, HTTP_AUTH_OPEN, handle_health, NULL, a, HTTP_ERRORS_OPENAI},
        {"GET", "/ready", false, HTTP_AUTH_OPEN, handle_ready, NULL, a, HTTP_ERRORS_OPENAI},
        {"GET", "/info", false, HTTP_AUTH_KEY, handle_info, NULL, a, HTTP_ERRORS_OPENAI},
        {"GET", "/metrics", false, HTTP_AUTH_METRICS, handle_metrics, NULL, a, HTTP_ERRORS_OPENAI},
        /* TEI's health routes: / (its Inference API) and /ping (SageMaker's). */
        {"GET", "/", false, HTTP_AUTH_OPEN, handle_ready, NULL, a, HTTP_ERRORS_TEI},
        {"GET", "/ping", false, HTTP_AUTH_OPEN, handle_ready, NULL, a, HTTP_ERRORS_TEI},
    };
    return routes_add_all(&a->routes, ops, sizeof ops / sizeof ops[0]);
}

/* models.c — the served models: read from the settings (the `models` list
 * or the one `model`), each checked against its tokenizer and shapes, started
 * (engine, embeddings service, API state, metrics slot) and given its routes. */
#include "server/ops/models.h"

#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/bert.h"
#include "server/api/cohere_embed.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"

/* Every model's kinds and metrics slot must have room: a change to one
 * bound that forgets the others fails here, not at start. */
static_assert(BATCH_MAX_KINDS >= 1 + 2 * CONFIG_MAX_MODELS, "an attention kind, two per model");
static_assert(METRICS_MAX_MODELS >= CONFIG_MAX_MODELS, "a metrics slot per model");

/* The tokenizer and the model's shapes, and the settings checked against
 * them. What the model directory or the settings get wrong is a start-up
 * error (status 2); only running out of memory is status 1. */
int models_load(const config *c, served_model *sm) {
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
    /* The weights themselves load later (models_start, after every backend's
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
    /* A text of max_seq_length tokens must fit one batch: with truncation on
     * texts are cut to exactly that length. A long-context model (8k–32k
     * positions) may run with smaller batches, as long as that holds: then
     * token-id inputs are held to max_batch_tokens too (embed_max_id_length). */
    if (c->max_batch_tokens < sm->max_seq_length) {
        log_error("max_batch_tokens is below the model's max_seq_length; raise it, or lower "
                  "max_seq_length",
                  LOG_KV("max_batch_tokens", c->max_batch_tokens),
                  LOG_KV("max_seq_length", sm->max_seq_length), LOG_KV("model", sm->path));
        return CONFIG_EXIT_INVALID;
    }
    if (c->max_batch_tokens < m->max_positions)
        log_info("token-id inputs are held to max_batch_tokens, below the model's positions",
                 LOG_KV("max_batch_tokens", c->max_batch_tokens),
                 LOG_KV("max_position_embeddings", m->max_positions), LOG_KV("model", sm->path));
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
int models_configure(app *a) {
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
int models_start(app *a, served_model *sm, const attn_backend *backend,
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
    s->types_unused = m->types_unused;
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
int models_register(app *a) {
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
        if (rc == 0 && i == e)
            rc = cohere_embed_register(&sm->compat, &a->routes);
        if (rc != 0)
            return -1;
    }
    return 0;
}

void models_free(app *a) {
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
}

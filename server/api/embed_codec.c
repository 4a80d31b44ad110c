/* embed_codec.c — decoding embedding requests into jobs (checking and
 * tokenizing their inputs), encoding finished jobs as answers, and
 * /tokenize's answer. Runs on the codec workers; nothing here touches the
 * scheduler or the model's weights.
 *
 * A request becomes an embed_job: its inputs' token ids back to back with
 * their cu_seqlens, an output of one vector per input, and an embedded job
 * (job.h). */
#include "server/api/embed_codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/errors.h"
#include "server/api/job_tokens.h"
#include "server/config.h"
#include "server/work/membudget.h"

/* Jobs are charged to the request-memory budget (membudget.h) while they
 * live: allocated in the handler's scope, released here. */
void embed_job_release(void *p) {
    embed_job *job = p;
    if (!job)
        return;
    void *arrays[] = {job->cu,       job->ids,    job->out,  job->hidden,
                      job->type_ids, job->doc_cu, job->spans};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        membudget_free(arrays[i]);
    json_decref(job->model);
    membudget_free(job);
}

embed_job *embed_job_grow(embed_job *job, size_t size, embed_refusal *r) {
    embed_job *grown = membudget_realloc(job, size);
    if (!grown) {
        embed_job_release(job);
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    memset((char *)grown + sizeof *grown, 0, size - sizeof *grown);
    return grown;
}

/* ---- decoding ----------------------------------------------------------------- */

typedef embed_refusal refusal;

/* What each grammar takes, as its refusals say. */
static const char *inputs_allowed(embed_inputs grammar) {
    switch (grammar) {
    case EMBED_INPUTS_OPENAI:
        return "a string, an array of strings, an array of token ids or an array of arrays of "
               "token ids";
    case EMBED_INPUTS_MIXED:
        return "a string, an array of token ids, or an array of strings and token-id arrays";
    case EMBED_INPUTS_TEXTS:
        break;
    }
    return "a string or an array of strings";
}

int embed_inputs_shape(const embed_api *api, const char *field, json_t *in, embed_inputs grammar,
                       int32_t *n, json_t **list, refusal *r) {
    const char *allowed = inputs_allowed(grammar);
    *list = NULL;
    if (!in)
        return refuse(r, SRV_EBADREQUEST, "missing field \"%s\"", field);
    if (json_is_string(in)) {
        *n = 1;
        return SRV_OK;
    }
    if (!json_is_array(in))
        return refuse(r, SRV_EBADREQUEST, "%s must be %s", field, allowed);
    size_t size = json_array_size(in);
    if (size == 0)
        return refuse(r, SRV_EEMPTY,
                      grammar == EMBED_INPUTS_MIXED ? "%s cannot be empty" : "%s is an empty array",
                      field);
    json_t *first = json_array_get(in, 0);
    if (grammar != EMBED_INPUTS_TEXTS && json_is_integer(first)) {
        *n = 1;
        return SRV_OK;
    }
    const int64_t max_inputs = atomic_load(&api->max_inputs_per_request);
    if ((int64_t)size > max_inputs)
        return refuse(r, SRV_EINVALID, "%s has %zu inputs; max_inputs_per_request is %lld", field,
                      size, (long long)max_inputs);
    /* One kind a request, but for the mixed grammar, whose inputs are
     * checked one by one as they are read. */
    const bool texts = grammar == EMBED_INPUTS_TEXTS || !json_is_array(first);
    for (size_t i = 0; grammar != EMBED_INPUTS_MIXED && i < size; i++) {
        json_t *x = json_array_get(in, i);
        if (texts ? !json_is_string(x) : !json_is_array(x))
            return refuse(r, SRV_EBADREQUEST, "%s[%zu]: %s must be %s", field, i, field, allowed);
    }
    *n = (int32_t)size;
    *list = in;
    return SRV_OK;
}

const fld_choice embed_truncation_choices[] = {{"Right", EMBED_TRUNCATE_RIGHT},
                                               {"right", EMBED_TRUNCATE_RIGHT},
                                               {"Left", EMBED_TRUNCATE_LEFT},
                                               {"left", EMBED_TRUNCATE_LEFT},
                                               {NULL, 0}};

int32_t embed_max_seq_length(const embed_api *api) {
    if (api->max_seq_length > 0)
        return api->max_seq_length;
    return api->model->max_seq_length > 0 ? api->model->max_seq_length : api->model->max_positions;
}

int32_t embed_max_id_length(const embed_api *api) {
    const int32_t p = api->model->max_positions, b = api->max_batch_tokens;
    return b > 0 && b < p ? b : p;
}

int embed_tokenize(const embed_api *api, const char *text, size_t len, bool truncate,
                   embed_truncation dir, int32_t *ids, int32_t *n, int32_t *n_full,
                   size_t *error_at) {
    const int32_t max = embed_max_seq_length(api);
    /* The post-processor adds tok_num_special() tokens, fewer than max (a
     * max_seq_length below that is refused at start): a left cut keeps at
     * least one piece of text. */
    tok_output o = {.ids = ids, .capacity = max};
    int rc = truncate && dir == EMBED_TRUNCATE_LEFT
                 ? job_tokens_encode_left(api->tok, text, len, 1, &o)
                 : tok_encode(api->tok, text, len, truncate, &o);
    *n = o.n;
    *n_full = o.n_full;
    *error_at = o.error_at;
    return rc;
}

int embed_check_text(size_t i, size_t len, refusal *r) {
    return len ? SRV_OK : refuse(r, SRV_EEMPTY, "input %zu is an empty string", i);
}

/* A classifier's forward answers logits, not a vector to embed with: every
 * embedding route refuses it with TEI's status for a model that does not do
 * the task (424). */
int embed_check_task(const embed_api *api, refusal *r) {
    if (api->model->task == ENCODER_TASK_EMBED)
        return SRV_OK;
    return refuse(r, SRV_ETASK,
                  "Model is not an embedding model: %s is a classifier (%s, %d labels); it answers "
                  "/predict, /rerank, /classify and /v1/rerank, not embeddings",
                  api->model_name ? api->model_name : "", api->model->architecture,
                  (int)api->model->num_labels);
}

/* ---- the request bodies' fields ------------------------------------------------------ */

void embed_dimension_bounds(const void *api, int64_t *lo, int64_t *hi) {
    *lo = 1;
    *hi = ((const embed_api *)api)->model->output_dim;
}

int embed_model_check(const void *api, const json_t *model, refusal *r) {
    return embed_check_model(api, model, r);
}

/* /tokenize's (TEI's shape). */
typedef struct tokens_req {
    json_t *inputs;
    bool specials;
} tokens_req;

#define TOKENS(f) offsetof(tokens_req, f)
static const fld_row TOKENS_ROWS[] = {
    {"inputs", FLD_ANY, FLD_NULL, TOKENS(inputs), .param = "inputs"},
    {"add_special_tokens", FLD_BOOL, FLD_NULL, TOKENS(specials), .dflt = true},
};
static const fld_table TOKENS_TABLE = FLD_TABLE(TOKENS_ROWS, NULL, NULL);

/* ---- encoding ------------------------------------------------------------------- */

void embed_write_vector(jwriter *w, const embed_job *job, const float *v, size_t d) {
    if (job->base64)
        jw_f32_base64(w, v, d);
    else
        jw_f32s(w, v, d);
}

size_t embed_answer_hint(const embed_job *job, int C) {
    const size_t d =
        job->dimensions > 0 && job->dimensions < C ? (size_t)job->dimensions : (size_t)C;
    /* Most floats of a unit vector print in 11 to 13 bytes, comma included. */
    const size_t per = job->base64 ? JW_BASE64_LEN(d) : 13 * d;
    const size_t vectors = (size_t)job->n + (job->doc_cu ? (size_t)job->n_docs : 0);
    return vectors * (per + 96) + 256;
}

void embed_write_openai_head(jwriter *w) {
    jw_lit(w, "{\"object\":\"list\",\"data\":[");
}

void embed_write_openai_item(jwriter *w, int32_t i) {
    jw_lit(w, "{\"object\":\"embedding\",\"index\":");
    jw_int(w, i);
    jw_lit(w, ",\"embedding\":");
}

void embed_write_openai_tail(jwriter *w, const embed_job *job) {
    jw_lit(w, "],\"model\":");
    jw_str(w, json_string_value(job->model), json_string_length(job->model));
    jw_lit(w, ",\"usage\":{\"prompt_tokens\":");
    jw_int(w, job->cu[job->n]);
    jw_lit(w, ",\"total_tokens\":");
    jw_int(w, job->cu[job->n]);
    jw_lit(w, "}}");
}

void embed_write_list_head(jwriter *w, const embed_job *job) {
    if (job->api == API_OPENAI)
        embed_write_openai_head(w);
    else
        jw_lit(w, "[");
}

void embed_write_list_tail(jwriter *w, const embed_job *job) {
    if (job->api == API_OPENAI)
        embed_write_openai_tail(w, job);
    else
        jw_lit(w, "]");
}

/* ---- post-processing --------------------------------------------------------------------------
 */

/* llama.cpp's common_embd_normalize: -1 none, 0 max absolute value (scaled
 * to int16's range, as it does), 1 taxicab, 2 Euclidean, p > 2 the p-norm. */
static void p_normalize(float *v, size_t n, int p) {
    double sum = 0;
    if (p < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)v[i]);
        if (p == 0)
            sum = a > sum ? a : sum;
        else
            sum += p == 1 ? a : p == 2 ? a * a : pow(a, p);
    }
    if (p == 0)
        sum /= 32760.0;
    else if (p == 2)
        sum = sqrt(sum);
    else if (p > 2)
        sum = pow(sum, 1.0 / p);
    double scale = sum > 0 ? 1.0 / sum : 0.0;
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(v[i] * scale);
}

size_t embed_vector_finish(const embed_job *job, float *v, int C) {
    const size_t d =
        job->dimensions > 0 && job->dimensions < C ? (size_t)job->dimensions : (size_t)C;
    /* A shortened vector is renormalised, as OpenAI's are. */
    if (job->normalize && d < (size_t)C)
        bert_l2_normalize(v, (int)d);
    if (job->has_p_norm)
        p_normalize(v, d, job->p_norm);
    return d;
}

/* ---- the codec's entry points ------------------------------------------------------- */

/* Whether name[0, len) is api's model's name or one of its aliases. */
static bool model_known(const embed_api *api, const char *name, size_t len) {
    if (strlen(api->model_name) == len && memcmp(api->model_name, name, len) == 0)
        return true;
    size_t l;
    for (const char *p = api->model_aliases, *a; (a = config_names_next(&p, ',', &l));)
        if (l && l == len && memcmp(a, name, len) == 0)
            return true;
    return false;
}

int embed_model_find(const embed_api *api, const char *name, size_t len) {
    if (!api->peers)
        return model_known(api, name, len) ? 0 : -1;
    for (size_t i = 0; i < api->npeers; i++)
        if (model_known(api->peers[i], name, len))
            return (int)i;
    return -1;
}

uint32_t embed_route_index(const embed_api *api, const json_t *root, uint32_t dflt) {
    const json_t *model = json_is_object(root) ? json_object_get(root, "model") : NULL;
    const int i = json_is_string(model) && api->peers
                      ? embed_model_find(api, json_string_value(model), json_string_length(model))
                      : -1;
    return i >= 0 ? (uint32_t)i : dflt;
}

embed_api *embed_api_route(http_request *req, embed_api *api, const json_t *root) {
    if (!api->peers)
        return api;
    embed_api *to = api->peers[embed_route_index(api, root, api->group)];
    if (to != api)
        http_set_ctx(req, to);
    return to;
}

int embed_unknown_model(const embed_api *api, const char *name, refusal *r) {
    /* Every served model by name; their aliases are one request away. */
    char served[160];
    const size_t n = api->peers ? api->npeers : 1;
    size_t used = 0;
    served[0] = '\0';
    for (size_t i = 0; i < n && used < sizeof served; i++) {
        const int w = snprintf(served + used, sizeof served - used, "%s`%s`", i ? ", " : "",
                               (api->peers ? api->peers[i] : api)->model_name);
        used = w < 0 ? sizeof served : used + (size_t)w;
    }
    if (used < sizeof served)
        snprintf(served + used, sizeof served - used, " (their aliases: GET /v1/models)");
    r->param = "model";
    r->code = "model_not_found";
    return refuse(r, SRV_ENOTFOUND, "The model `%.60s` does not exist; served: %s", name, served);
}

int embed_check_model(const embed_api *api, const json_t *model, refusal *r) {
    if (!model || json_is_null(model))
        return SRV_OK;
    if (!json_is_string(model)) {
        r->param = "model";
        return refuse(r, SRV_EBADREQUEST, "model must be a string");
    }
    if (api->accept_any_model ||
        model_known(api, json_string_value(model), json_string_length(model)))
        return SRV_OK;
    return embed_unknown_model(api, json_string_value(model), r);
}

size_t embed_job_bytes(const embed_job *job) {
    const size_t C = job->out ? (size_t)job->out_dim : 0;
    return membudget_cost(sizeof *job) + membudget_cost(((size_t)job->n + 1) * sizeof *job->cu) +
           membudget_cost(job->ids_cap * sizeof *job->ids) +
           (job->type_ids ? membudget_cost(job->ids_cap * sizeof *job->type_ids) : 0) +
           (job->out ? membudget_cost((size_t)job->n * C * sizeof *job->out) : 0) +
           (job->doc_cu ? membudget_cost(((size_t)job->n_docs + 1) * sizeof *job->doc_cu) +
                              membudget_cost((size_t)job->n * 2 * sizeof *job->spans)
                        : 0);
}

void embed_job_free(embed_job *job) {
    embed_job_release(job);
}

int32_t embed_job_inputs(const embed_job *job, const int32_t **cu, const int32_t **ids) {
    *cu = job->cu;
    *ids = job->ids;
    return job->n;
}

/* ---- POST /tokenize ------------------------------------------------------------------- */

/* One token in TEI's shape: special tokens have their vocabulary string and
 * null offsets; others the input's bytes [start, stop) they came from. */
static json_t *token_json(const embed_api *api, const char *text, int32_t id, tok_span sp) {
    /* The post-processor's tokens, and only they, have empty spans. */
    if (sp.start == sp.end)
        return json_pack("{s:i, s:s, s:b, s:n, s:n}", "id", (json_int_t)id, "text",
                         tok_id_to_token(api->tok, id), "special", 1, "start", "stop");
    json_t *piece = json_stringn(text + sp.start, sp.end - sp.start);
    /* NULL is also the budget refusing the string: then the token fails
     * (and so the answer, with the budget's error), never "[UNK]" or a
     * vocabulary string standing in for it. */
    if (!piece && membudget_refused())
        return NULL;
    if (!piece) /* not whole characters: fall back to the vocabulary string */
        piece = json_string(tok_id_to_token(api->tok, id));
    return json_pack("{s:i, s:o, s:b, s:i, s:i}", "id", (json_int_t)id, "text", piece, "special", 0,
                     "start", (json_int_t)sp.start, "stop", (json_int_t)sp.end);
}

/* The tokens of one input, all of them: /tokenize never truncates (as TEI),
 * so a client can count what truncation would cut. */
static json_t *tokenize_one(const embed_api *api, int32_t i, json_t *in, bool specials,
                            refusal *r) {
    const char *text = json_string_value(in);
    const size_t len = json_string_length(in);
    if (embed_check_text((size_t)i, len, r) != SRV_OK)
        return NULL;
    tok_output o = {0};
    const int rc = job_tokens_encode_whole(api->tok, text, len, api->model->max_positions, &o);
    json_t *out = NULL;
    if (rc != TOK_OK)
        job_tokens_refuse(rc, i, o.error_at, SRV_EINTERNAL, r);
    else if (!(out = json_array()))
        refuse(r, SRV_EINTERNAL, "out of memory");
    for (int32_t k = 0; out && k < o.n; k++) {
        if (!specials && o.offsets[k].start == o.offsets[k].end)
            continue;
        if (json_array_append_new(out, token_json(api, text, o.ids[k], o.offsets[k])) != 0) {
            json_decref(out);
            out = NULL;
            refuse(r, SRV_EINTERNAL, "out of memory");
        }
    }
    membudget_free(o.ids);
    membudget_free(o.offsets);
    return out;
}

json_t *embed_api_tokens(const embed_api *api, json_t *root, int *err, char *msg, size_t msg_len) {
    refusal r = {0};
    tokens_req q;
    json_t *list = NULL, *out = NULL;
    int32_t n = 0;
    if (fld_decode(&TOKENS_TABLE, root, &q, api, &r) == SRV_OK &&
        embed_inputs_shape(api, "inputs", q.inputs, EMBED_INPUTS_TEXTS, &n, &list, &r) == SRV_OK) {
        out = json_array();
        for (int32_t i = 0; out && i < n; i++) {
            json_t *tokens = tokenize_one(api, i, list ? json_array_get(list, (size_t)i) : q.inputs,
                                          q.specials, &r);
            if (!tokens || json_array_append_new(out, tokens) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        if (!out && !r.err)
            refuse(&r, SRV_EINTERNAL, "out of memory");
    }
    *err = out ? SRV_OK : r.err;
    snprintf(msg, msg_len, "%s", out ? "" : r.msg);
    return out;
}

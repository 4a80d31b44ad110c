/* score_api.c — rerank and classification routes (score_api.h): bodies
 * decoded into jobs of pairs or texts with type ids, answered in the shape
 * of the API each route imitates. Decoding (tokenization) and answers run on
 * the codec workers (http.h); the forward runs in the embeddings service's batches as the "score"
 * kind. */
#include "server/api/score_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api/embed_api.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/job_tokens.h"
#include "server/work/membudget.h"

typedef embed_refusal refusal;

/* ---- scores --------------------------------------------------------------------------- */

void score_activate(const float *logits, int32_t k, bool raw, float *out) {
    if (raw || k < 1) {
        memcpy(out, logits, (size_t)(k > 0 ? k : 0) * sizeof *out);
        return;
    }
    if (k == 1) {
        out[0] = (float)(1.0 / (1.0 + exp(-(double)logits[0])));
        return;
    }
    /* Softmax, shifted by the largest logit so that exp never overflows. */
    double max = logits[0], den = 0;
    for (int32_t i = 1; i < k; i++)
        max = logits[i] > max ? logits[i] : max;
    for (int32_t i = 0; i < k; i++)
        den += exp((double)logits[i] - max);
    for (int32_t i = 0; i < k; i++)
        out[i] = (float)(exp((double)logits[i] - max) / den);
}

void score_activate_labels(const float *logits, int32_t k, bool raw, bool per_label, float *out) {
    if (raw || !per_label) {
        score_activate(logits, k, raw, out);
        return;
    }
    for (int32_t i = 0; i < k; i++)
        score_activate(logits + i, 1, false, out + i);
}

int32_t score_first_not_finite(const float *logits, int32_t n, int32_t k, bool raw,
                               bool per_label) {
    float *one = membudget_malloc((size_t)(k > 0 ? k : 1) * sizeof *one);
    if (!one)
        return -2;
    int32_t bad = -1;
    for (int32_t i = 0; i < n && bad < 0; i++) {
        score_activate_labels(logits + (size_t)i * (size_t)k, k, raw, per_label, one);
        for (int32_t l = 0; l < k; l++)
            if (!isfinite(one[l]))
                bad = i;
    }
    membudget_free(one);
    return bad;
}

/* ---- decoding --------------------------------------------------------------------------- */

/* A request's pairs as their texts encoded alone (tok_pair_text_encode):
 * the first text kept while the next pair has the same one (a rerank's
 * query, encoded once per request, not once per document), the second
 * text's scratch reused from pair to pair. */
typedef struct pair_cache {
    tok_pair_text a, b;
    const char *a_text; /* what a holds, NULL: nothing */
    size_t a_len;
} pair_cache;

static void pair_cache_free(pair_cache *c) {
    tok_pair_text_free(&c->a);
    tok_pair_text_free(&c->b);
    *c = (pair_cache){0};
}

/* tok_encode_pair's answer for in, from the cache. */
static int encode_pair(const tok_tokenizer *tok, pair_cache *c, const score_input *in,
                       tok_truncation trunc, tok_output *o) {
    o->n = o->n_full = 0;
    o->error_at = 0;
    const int32_t nsp = tok_num_special_pair(tok);
    if (nsp < 0)
        return TOK_ENOPAIR;
    if (o->capacity < nsp)
        return TOK_EINVAL;
    const int32_t keep = tok_pair_keep(tok, o->capacity, trunc);
    if (!c->a_text || c->a_text != in->a || c->a_len != in->alen) {
        c->a_text = NULL;
        int rc = tok_pair_text_encode(tok, in->a, in->alen, keep, &c->a);
        if (rc != TOK_OK) {
            o->error_at = c->a.error_at;
            return rc;
        }
        c->a_text = in->a;
        c->a_len = in->alen;
    }
    int rc = tok_pair_text_encode(tok, in->b, in->blen, keep, &c->b);
    if (rc != TOK_OK) {
        o->error_at = in->alen + c->b.error_at;
        return rc;
    }
    return tok_pair_assemble(tok, &c->a, &c->b, trunc, o);
}

static int tokenize(const score_api *s, embed_job *job, int32_t i, const score_input *in,
                    bool truncate, bool left, int32_t max, pair_cache *cache, refusal *r) {
    if (job_tokens_reserve(job, (size_t)job->cu[i], (size_t)max, true) != 0)
        return refuse(r, SRV_EMEMORY, "out of memory");
    int rc;
    tok_output o = {
        .ids = job->ids + job->cu[i], .type_ids = job->type_ids + job->cu[i], .capacity = max};
    const tok_truncation trunc = !truncate ? TOK_TRUNCATE_NONE
                                 : left    ? TOK_TRUNCATE_LEFT
                                           : TOK_TRUNCATE_RIGHT;
    const tok_tokenizer *tok = s->eapi->tok;
    if (in->b) {
        rc = encode_pair(tok, cache, in, trunc, &o);
    } else if (trunc == TOK_TRUNCATE_LEFT) {
        rc = job_tokens_encode_left(tok, in->a, in->alen, 0, &o);
    } else {
        rc = tok_encode(tok, in->a, in->alen, truncate, &o);
    }
    if (rc == TOK_EUTF8 && in->b && o.error_at >= in->alen)
        return refuse(r, SRV_EBADREQUEST, "input %d: the second text is not valid UTF-8 (byte %zu)",
                      (int)i, o.error_at - in->alen);
    if (rc == TOK_EUTF8)
        return refuse(r, SRV_EBADREQUEST, "input %d is not valid UTF-8 (byte %zu)", (int)i,
                      o.error_at);
    if (rc == TOK_ETOOLONG)
        return refuse(r, SRV_EINVALID,
                      "input %d has %d tokens; at most %d are taken and truncation is off", (int)i,
                      (int)o.n_full, (int)max);
    if (rc == TOK_ENOPAIR)
        return refuse(r, SRV_ETOKENIZER,
                      "the model's tokenizer has no template for a pair of texts (its "
                      "post_processor has no \"pair\")");
    if (rc == TOK_ECOMPLEX)
        return refuse(r, SRV_ETOKENIZER, "input %d: %s", (int)i, tok_strerror(rc));
    if (rc == TOK_ENOMEM)
        return refuse(r, SRV_EMEMORY, "out of memory");
    if (rc != TOK_OK)
        return refuse(r, SRV_EINTERNAL, "tokenizer: %s", tok_strerror(rc));
    /* A pair template that types the second text 1 on a model with one
     * token type (a tokenizer and model that do not belong together) would
     * index past the model's type embeddings. */
    for (int32_t k = 0; k < o.n; k++)
        if (o.type_ids[k] < 0 || o.type_ids[k] >= s->type_vocab_size)
            return refuse(r, SRV_EINVALID,
                          "input %d: the tokenizer gives token type %d, but the model has %d "
                          "token types (type_vocab_size)",
                          (int)i, (int)o.type_ids[k], (int)s->type_vocab_size);
    job->cu[i + 1] = job->cu[i] + o.n;
    return SRV_OK;
}

embed_job *score_job_make(const score_api *s, const score_input *in, int32_t n, bool truncate,
                          bool left, int32_t limit, refusal *r) {
    const embed_api *api = s->eapi;
    const int32_t max = limit > 0 && limit < s->max_length ? limit : s->max_length;
    const int64_t max_inputs = atomic_load(&api->max_inputs_per_request);
    if (n < 1) {
        refuse(r, SRV_EEMPTY, "nothing to score");
        return NULL;
    }
    if ((int64_t)n > max_inputs) {
        refuse(r, SRV_EINVALID, "the request has %d inputs; max_inputs_per_request is %lld", (int)n,
               (long long)max_inputs);
        return NULL;
    }
    embed_job *job = job_tokens_new(n);
    if (!job) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    pair_cache cache = {0};
    for (int32_t i = 0; i < n; i++)
        if (tokenize(s, job, i, &in[i], truncate, left, max, &cache, r) != SRV_OK) {
            pair_cache_free(&cache);
            embed_job_release(job);
            return NULL;
        }
    pair_cache_free(&cache);
    if (job_tokens_seal(job, api->max_batch_tokens, s->num_labels, s->kind, api->group, SRV_EMEMORY,
                        r) != SRV_OK) {
        embed_job_release(job);
        return NULL;
    }
    return job;
}

/* ---- the request's answer options, kept with its job ----------------------------------- */

/* The answer's shape. */
typedef enum score_shape {
    SHAPE_TEI_RERANK,
    SHAPE_TEI_PREDICT,
    SHAPE_INFINITY_RERANK,
    SHAPE_INFINITY_CLASSIFY,
    SHAPE_V1_RERANK,
    SHAPE_VLLM_SCORE,
} score_shape;

typedef struct score_job {
    embed_job e; /* first: what job_submit and the service see */
    score_shape shape;
    bool raw;
    bool batch;        /* /predict: inputs was a batch (the answer is a list per input) */
    int32_t top_n;     /* rerank: keep the best this many (0: all) */
    json_t *documents; /* rerank with the texts returned: the request's, else NULL */
    json_t *model;     /* the name to echo (Infinity, /v1/rerank) */
} score_job;

static void score_job_release(void *p) {
    score_job *j = p;
    if (!j)
        return;
    json_decref(j->documents);
    json_decref(j->model);
    embed_job_release(&j->e);
}

/* Moves job's arrays into a score_job (the answer options beside them). */
static score_job *wrap(embed_job *job, score_shape shape, refusal *r) {
    if (!job)
        return NULL;
    score_job *j = membudget_realloc(job, sizeof *j);
    if (!j) {
        embed_job_release(job);
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    memset((char *)j + sizeof j->e, 0, sizeof *j - sizeof j->e);
    j->shape = shape;
    return j;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static int want_bool(json_t *v, const char *name, bool def, bool *out, refusal *r) {
    *out = def;
    if (!v || json_is_null(v))
        return SRV_OK;
    if (!json_is_boolean(v))
        return refuse(r, SRV_EBADREQUEST, "%s must be true or false", name);
    *out = json_is_true(v);
    return SRV_OK;
}

/* The refusal of a model that is not a reranker, as TEI words it. */
static bool not_reranker(const score_api *s, refusal *r) {
    if (s->classifier && s->num_labels == 1)
        return false;
    if (s->classifier)
        refuse(r, SRV_ETASK,
               "model is not a re-ranker model: `%s` is a classifier with %d labels (use /predict "
               "or /classify)",
               s->eapi->model_name, (int)s->num_labels);
    else
        refuse(r, SRV_ETASK,
               "model is not a re-ranker model: `%s` is an embedding model (use /embed or "
               "/v1/embeddings)",
               s->eapi->model_name);
    return true;
}

static bool not_classifier(const score_api *s, refusal *r) {
    if (s->classifier)
        return false;
    refuse(r, SRV_ETASK,
           "Model is not a classifier model: `%s` is an embedding model (use /embed or "
           "/v1/embeddings)",
           s->eapi->model_name);
    return true;
}

/* The model name an answer echoes: the request's, else the served one (a
 * copy: the request's tree is freed before the answer); NULL when out of
 * memory. */
static json_t *model_echo(const score_api *s, json_t *root) {
    json_t *model = json_object_get(root, "model");
    return json_is_string(model) ? json_stringn(json_string_value(model), json_string_length(model))
                                 : json_string(s->eapi->model_name);
}

/* The query and each document as pairs (query, document): documents is an
 * array of strings, or with allow_objects of {"text": string} too. */
static score_input *rerank_inputs(json_t *query, json_t *documents, const char *field,
                                  bool allow_objects, int32_t *n, refusal *r) {
    if (!json_is_string(query)) {
        refuse(r, SRV_EBADREQUEST, query ? "query must be a string" : "missing field \"query\"");
        return NULL;
    }
    if (!json_is_array(documents)) {
        refuse(r, SRV_EBADREQUEST,
               documents ? "%s must be an array of strings" : "missing field \"%s\"", field);
        return NULL;
    }
    const size_t size = json_array_size(documents);
    if (size == 0) {
        refuse(r, SRV_EEMPTY, "`%s` cannot be empty", field);
        return NULL;
    }
    if (size > INT32_MAX) {
        refuse(r, SRV_EINVALID, "%s has too many entries", field);
        return NULL;
    }
    score_input *in = membudget_calloc(size, sizeof *in);
    if (!in) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < size; i++) {
        json_t *d = json_array_get(documents, i);
        if (allow_objects && json_is_object(d))
            d = json_object_get(d, "text");
        if (!json_is_string(d)) {
            refuse(r, SRV_EBADREQUEST, "%s[%zu] must be a string%s", field, i,
                   allow_objects ? " or {\"text\": string}" : "");
            membudget_free(in);
            return NULL;
        }
        in[i] = (score_input){.a = json_string_value(query),
                              .alen = json_string_length(query),
                              .b = json_string_value(d),
                              .blen = json_string_length(d)};
    }
    *n = (int32_t)size;
    return in;
}

/* The documents' texts, for an answer that returns them (a copy: the
 * request's tree is freed before the answer). */
static json_t *texts_of(json_t *documents, refusal *r) {
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(documents); i++) {
        json_t *d = json_array_get(documents, i);
        d = json_is_object(d) ? json_object_get(d, "text") : d;
        if (json_array_append_new(out, json_stringn(json_string_value(d), json_string_length(d)))) {
            json_decref(out);
            out = NULL;
        }
    }
    if (!out)
        refuse(r, SRV_EMEMORY, "out of memory");
    return out;
}

/* ---- decoding each body -------------------------------------------------------------------- */

/* Every score dialect's fields, in one struct: each table fills its own,
 * with the embed_api as the decoder's ctx. The inputs (query, documents,
 * texts...) are read by the decoders below, null included where a null is
 * answered as a value of the wrong shape. */
typedef struct score_req {
    json_t *model, *query, *documents, *inputs, *text_1, *text_2, *truncate_prompt_tokens;
    json_t *unused; /* fields taken for compatibility and not applied */
    bool raw, ret, truncate;
    int direction; /* embed_truncation */
    int64_t top_n; /* 0: all */
} score_req;

#define AT(f) offsetof(score_req, f)
#define BOOL_ROW(name, slot, on)                                                                   \
    { name, FLD_BOOL, 0, AT(slot), .dflt = (on) }
#define UNUSED_ROW(name)                                                                           \
    { name, FLD_ANY, 0, AT(unused), .param = NULL }

/* TEI answers an empty `texts` as Empty before it reads the other fields. */
static int texts_check(const void *ctx, const json_t *v, refusal *r) {
    (void)ctx;
    if (json_is_array(v) && json_array_size(v) == 0)
        return refuse(r, SRV_EEMPTY, "`texts` cannot be empty");
    return SRV_OK;
}

/* TEI's /rerank; truncate's default is the setting. */
static const fld_row TEI_RERANK_ROWS[] = {
    {"query", FLD_ANY, FLD_NULL, AT(query), .param = NULL},
    {"texts", FLD_ANY, FLD_NULL, AT(documents), .param = NULL, .check = texts_check},
    BOOL_ROW("raw_scores", raw, false),
    BOOL_ROW("return_text", ret, false),
    {"truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL},
    EMBED_TRUNCATION_ROW(AT(direction)),
};
static const fld_table TEI_RERANK = FLD_TABLE(TEI_RERANK_ROWS, NULL, NULL);

/* Infinity's /rerank: top_n at least 1. */
static const fld_row INFINITY_RERANK_ROWS[] = {
    {"query", FLD_ANY, FLD_NULL, AT(query), .param = NULL},
    {"documents", FLD_ANY, FLD_NULL, AT(documents), .param = NULL},
    BOOL_ROW("return_documents", ret, false),
    BOOL_ROW("raw_scores", raw, false),
    {"top_n", FLD_INT, 0, AT(top_n), .min = 1, .max = INT64_MAX, .range = FLD_RANGE_AT_LEAST},
    EMBED_MODEL_ROW(AT(model)),
};
static const fld_table INFINITY_RERANK = FLD_TABLE(INFINITY_RERANK_ROWS, NULL, NULL);

/* Cohere's and vLLM's /v1/rerank: top_n 0 is all (vLLM's default), the
 * documents are returned unless asked not to be. */
static const fld_row V1_RERANK_ROWS[] = {
    EMBED_MODEL_ROW(AT(model)),
    {"query", FLD_ANY, FLD_NULL, AT(query), .param = NULL},
    {"documents", FLD_ANY, FLD_NULL, AT(documents), .param = NULL},
    {"top_n", FLD_INT, 0, AT(top_n), .min = 0, .max = INT64_MAX, .range = FLD_RANGE_AT_LEAST},
    BOOL_ROW("return_documents", ret, true),
    UNUSED_ROW("max_chunks_per_doc"),
    UNUSED_ROW("rank_fields"),
    {"truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL},
    UNUSED_ROW("user"),
};
static const fld_table V1_RERANK = FLD_TABLE(V1_RERANK_ROWS, NULL, NULL);

/* TEI's /predict. */
static const fld_row PREDICT_ROWS[] = {
    {"inputs", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL},
    BOOL_ROW("raw_scores", raw, false),
    {"truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL},
    EMBED_TRUNCATION_ROW(AT(direction)),
};
static const fld_table PREDICT = FLD_TABLE(PREDICT_ROWS, NULL, NULL);

/* Infinity's /classify. */
static const fld_row CLASSIFY_ROWS[] = {
    {"input", FLD_ANY, FLD_NULL, AT(inputs), .param = "input"},
    EMBED_MODEL_ROW(AT(model)),
    BOOL_ROW("raw_scores", raw, false),
};
static const fld_table CLASSIFY = FLD_TABLE(CLASSIFY_ROWS, NULL, NULL);

/* vLLM's priority: 0, the only one there is without priority scheduling. */
static int priority_check(const void *ctx, const json_t *v, refusal *r) {
    (void)ctx;
    if (json_is_integer(v) && json_integer_value(v) == 0)
        return SRV_OK;
    return refuse(r, SRV_EBADREQUEST,
                  "priority must be 0: this service schedules in arrival order, as vLLM does "
                  "without priority scheduling");
}

/* vLLM's /score. Its activation flag goes by three names (vllm_activation);
 * the multi-modal processor's options have nothing to apply to. */
static const fld_row VLLM_SCORE_ROWS[] = {
    EMBED_MODEL_ROW(AT(model)),
    {"text_1", FLD_ANY, 0, AT(text_1), .param = "text_1"},
    {"text_2", FLD_ANY, 0, AT(text_2), .param = "text_2"},
    {"truncate_prompt_tokens", FLD_ANY, 0, AT(truncate_prompt_tokens),
     .param = "truncate_prompt_tokens"},
    {"priority", FLD_ANY, 0, AT(unused), .param = "priority", .check = priority_check},
    UNUSED_ROW("softmax"),
    UNUSED_ROW("activation"),
    UNUSED_ROW("use_activation"),
    {"mm_processor_kwargs", FLD_OBJECT, 0, AT(unused), .param = "mm_processor_kwargs"},
    UNUSED_ROW("user"),
};
static const fld_table VLLM_SCORE = FLD_TABLE(VLLM_SCORE_ROWS, NULL, NULL);

static score_job *decode_tei_rerank(const score_api *s, json_t *root, refusal *r) {
    score_req q = {.truncate = s->eapi->truncate};
    if (fld_decode(&TEI_RERANK, root, &q, s->eapi, r) != SRV_OK)
        return NULL;
    json_t *texts = q.documents;
    const bool raw = q.raw, ret = q.ret, trunc = q.truncate;
    const bool left = q.direction == EMBED_TRUNCATE_LEFT;
    int32_t n = 0;
    score_input *in = rerank_inputs(q.query, texts, "texts", false, &n, r);
    if (!in)
        return NULL;
    /* The body first, then the model, as TEI checks them. */
    if (not_reranker(s, r)) {
        membudget_free(in);
        return NULL;
    }
    score_job *j = wrap(score_job_make(s, in, n, trunc, left, 0, r), SHAPE_TEI_RERANK, r);
    membudget_free(in);
    if (j) {
        j->raw = raw;
        if (ret && !(j->documents = texts_of(texts, r))) {
            score_job_release(j);
            return NULL;
        }
    }
    return j;
}

static score_job *decode_rerank_cohere(const score_api *s, json_t *root, score_shape shape,
                                       refusal *r) {
    const bool v1 = shape == SHAPE_V1_RERANK;
    score_req q = {.truncate = s->eapi->truncate};
    if (fld_decode(v1 ? &V1_RERANK : &INFINITY_RERANK, root, &q, s->eapi, r) != SRV_OK)
        return NULL;
    const bool raw = q.raw, ret = q.ret, trunc = q.truncate;
    const int32_t top_n = q.top_n > INT32_MAX ? INT32_MAX : (int32_t)q.top_n;
    json_t *documents = q.documents;
    int32_t n = 0;
    score_input *in = rerank_inputs(q.query, documents, "documents", v1, &n, r);
    if (!in)
        return NULL;
    if (not_reranker(s, r)) {
        membudget_free(in);
        return NULL;
    }
    score_job *j = wrap(score_job_make(s, in, n, trunc, false, 0, r), shape, r);
    membudget_free(in);
    if (!j)
        return NULL;
    j->raw = raw;
    j->top_n = top_n;
    j->model = model_echo(s, root);
    if (!j->model || (ret && !(j->documents = texts_of(documents, r)))) {
        score_job_release(j);
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    return j;
}

/* TEI's /predict inputs: "text", ["a", "b"] (one pair), ["a"] (one text),
 * or [[...], [...]] (a batch of texts and pairs). */
static score_input *predict_inputs(json_t *inputs, int32_t *n, bool *batch, refusal *r) {
    static const char *const shape =
        "inputs must be a string, a pair of strings [string, string] or a batch of strings and "
        "pairs [[string], [string, string], ...]";
    *batch = false;
    if (!inputs) {
        refuse(r, SRV_EBADREQUEST, "missing field \"inputs\"");
        return NULL;
    }
    const bool single = json_is_string(inputs) ||
                        (json_is_array(inputs) && json_is_string(json_array_get(inputs, 0)));
    if (!single && !json_is_array(inputs)) {
        refuse(r, SRV_EBADREQUEST, "%s", shape);
        return NULL;
    }
    if (!single && json_array_size(inputs) == 0) {
        refuse(r, SRV_EEMPTY, "`inputs` cannot be empty");
        return NULL;
    }
    const size_t size = single ? 1 : json_array_size(inputs);
    if (size > INT32_MAX) {
        refuse(r, SRV_EINVALID, "inputs has too many entries");
        return NULL;
    }
    score_input *in = membudget_calloc(size, sizeof *in);
    if (!in) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < size; i++) {
        json_t *x = single ? inputs : json_array_get(inputs, i);
        if (json_is_string(x)) {
            in[i] = (score_input){.a = json_string_value(x), .alen = json_string_length(x)};
            continue;
        }
        const size_t k = json_array_size(x);
        json_t *a = json_array_get(x, 0), *b = json_array_get(x, 1);
        if (!json_is_array(x) || k < 1 || k > 2 || !json_is_string(a) ||
            (k == 2 && !json_is_string(b))) {
            if (single)
                refuse(r, SRV_EBADREQUEST, "%s", shape);
            else
                refuse(r, SRV_EBADREQUEST, "inputs[%zu]: %s", i, shape);
            membudget_free(in);
            return NULL;
        }
        in[i] = (score_input){.a = json_string_value(a), .alen = json_string_length(a)};
        if (k == 2) {
            in[i].b = json_string_value(b);
            in[i].blen = json_string_length(b);
        }
    }
    *n = (int32_t)size;
    *batch = !single;
    return in;
}

static score_job *decode_predict(const score_api *s, json_t *root, refusal *r) {
    score_req q = {.truncate = s->eapi->truncate};
    if (fld_decode(&PREDICT, root, &q, s->eapi, r) != SRV_OK)
        return NULL;
    const bool raw = q.raw, trunc = q.truncate, left = q.direction == EMBED_TRUNCATE_LEFT;
    bool batch;
    int32_t n = 0;
    score_input *in = predict_inputs(q.inputs, &n, &batch, r);
    if (!in)
        return NULL;
    if (not_classifier(s, r)) {
        membudget_free(in);
        return NULL;
    }
    score_job *j = wrap(score_job_make(s, in, n, trunc, left, 0, r), SHAPE_TEI_PREDICT, r);
    membudget_free(in);
    if (j) {
        j->raw = raw;
        j->batch = batch;
    }
    return j;
}

static score_job *decode_classify(const score_api *s, json_t *root, refusal *r) {
    score_req q;
    if (fld_decode(&CLASSIFY, root, &q, s->eapi, r) != SRV_OK)
        return NULL;
    const bool raw = q.raw;
    json_t *input = q.inputs;
    if (!json_is_array(input) || json_array_size(input) == 0 ||
        json_array_size(input) > INT32_MAX) {
        r->param = "input";
        refuse(r, SRV_EBADREQUEST,
               input ? "input must be a non-empty array of strings" : "missing field \"input\"");
        return NULL;
    }
    const size_t size = json_array_size(input);
    score_input *in = membudget_calloc(size, sizeof *in);
    if (!in) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < size; i++) {
        json_t *x = json_array_get(input, i);
        if (!json_is_string(x)) {
            r->param = "input";
            refuse(r, SRV_EBADREQUEST, "input[%zu] must be a string", i);
            membudget_free(in);
            return NULL;
        }
        in[i] = (score_input){.a = json_string_value(x), .alen = json_string_length(x)};
    }
    if (not_classifier(s, r)) {
        membudget_free(in);
        return NULL;
    }
    score_job *j = wrap(score_job_make(s, in, (int32_t)size, s->eapi->truncate, false, 0, r),
                        SHAPE_INFINITY_CLASSIFY, r);
    membudget_free(in);
    if (!j)
        return NULL;
    j->raw = raw;
    j->model = model_echo(s, root);
    if (!j->model) {
        score_job_release(j);
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    return j;
}

/* ---- answering ------------------------------------------------------------------------------- */

typedef struct ranked {
    int32_t index;
    float score;
} ranked;

/* vLLM's text_1 or text_2: a string or a non-empty array of strings; its
 * ScoreMultiModalParam (an object of content parts) is refused. */
static int vllm_texts(json_t *v, const char *field, size_t *n, refusal *r) {
    r->param = field;
    if (!v || json_is_null(v))
        return refuse(r, SRV_EBADREQUEST, "missing field \"%s\"", field);
    if (json_is_object(v))
        return refuse(r, SRV_EINVALID,
                      "%s: multi-modal content is not supported; this service scores text", field);
    if (json_is_string(v)) {
        *n = 1;
        r->param = NULL;
        return SRV_OK;
    }
    if (!json_is_array(v))
        return refuse(r, SRV_EBADREQUEST, "%s must be a string or an array of strings", field);
    *n = json_array_size(v);
    if (*n == 0)
        return refuse(r, SRV_EBADREQUEST, "%s: at least one text must be given", field);
    for (size_t i = 0; i < *n; i++)
        if (!json_is_string(json_array_get(v, i)))
            return refuse(r, SRV_EBADREQUEST, "%s[%zu] must be a string", field, i);
    r->param = NULL;
    return SRV_OK;
}

/* The i-th text of a string or an array of strings. */
static json_t *vllm_text(json_t *v, size_t i) {
    return json_is_string(v) ? v : json_array_get(v, i);
}

/* vLLM's activation flag under its three names, first set wins as vLLM
 * reads them (softmax and activation are its deprecated spellings of
 * use_activation); default on: the sigmoid of the logit. */
static int vllm_activation(json_t *root, bool *raw, refusal *r) {
    static const char *const names[] = {"softmax", "activation", "use_activation"};
    *raw = false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        json_t *v = json_object_get(root, names[i]);
        if (!v || json_is_null(v))
            continue;
        bool on;
        r->param = names[i];
        if (want_bool(v, names[i], true, &on, r) != SRV_OK)
            return r->err;
        r->param = NULL;
        *raw = !on;
        return SRV_OK;
    }
    return SRV_OK;
}

/* vLLM's truncate_prompt_tokens: absent or null, no truncation (longer is
 * refused); -1, the model's maximum; k, at most k tokens a pair, special
 * tokens included, cut as the tokenizer's longest_first does. *limit 0
 * means the model's maximum. */
static int vllm_truncation(const score_api *s, json_t *v, bool *trunc, int32_t *limit, refusal *r) {
    *trunc = false;
    *limit = 0;
    if (!v || json_is_null(v))
        return SRV_OK;
    r->param = "truncate_prompt_tokens";
    if (!json_is_integer(v))
        return refuse(r, SRV_EBADREQUEST, "truncate_prompt_tokens must be an integer");
    const json_int_t k = json_integer_value(v);
    /* The fewest tokens a pair can be cut to: its special tokens and one
     * token of each text. */
    const int32_t least = tok_num_special_pair(s->eapi->tok) + 2;
    if (k == -1) {
        *trunc = true;
    } else if (k < least) {
        return refuse(r, SRV_EINVALID,
                      "truncate_prompt_tokens must be -1 or at least %d (a pair's special tokens "
                      "and one token of each text)",
                      (int)least);
    } else if (k > s->max_length) {
        return refuse(r, SRV_EINVALID,
                      "truncate_prompt_tokens (%lld) is greater than the model's maximum length "
                      "(%d)",
                      (long long)k, (int)s->max_length);
    } else {
        *trunc = true;
        *limit = (int32_t)k;
    }
    r->param = NULL;
    return SRV_OK;
}

/* vLLM's /score: text_1 and text_2 paired 1:1, 1:N or N:N, each pair
 * scored by the served cross-encoder, answered in input order. */
static score_job *decode_vllm_score(const score_api *s, json_t *root, refusal *r) {
    score_req q;
    if (fld_decode(&VLLM_SCORE, root, &q, s->eapi, r) != SRV_OK)
        return NULL;
    json_t *t1 = q.text_1, *t2 = q.text_2;
    size_t n1 = 0, n2 = 0;
    bool raw, trunc;
    int32_t limit;
    if (vllm_texts(t1, "text_1", &n1, r) || vllm_texts(t2, "text_2", &n2, r) ||
        vllm_activation(root, &raw, r) ||
        vllm_truncation(s, q.truncate_prompt_tokens, &trunc, &limit, r))
        return NULL;
    if (n1 > 1 && n1 != n2) {
        refuse(r, SRV_EBADREQUEST,
               "text_1 has %zu texts and text_2 %zu: the lengths must be 1:1, 1:N or N:N", n1, n2);
        return NULL;
    }
    if (n2 > INT32_MAX) {
        refuse(r, SRV_EINVALID, "text_2 has too many entries");
        return NULL;
    }
    if (not_reranker(s, r))
        return NULL;
    score_input *in = membudget_calloc(n2, sizeof *in);
    if (!in) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n2; i++) {
        json_t *a = vllm_text(t1, n1 == 1 ? 0 : i), *b = vllm_text(t2, i);
        in[i] = (score_input){.a = json_string_value(a),
                              .alen = json_string_length(a),
                              .b = json_string_value(b),
                              .blen = json_string_length(b)};
    }
    score_job *j =
        wrap(score_job_make(s, in, (int32_t)n2, trunc, false, limit, r), SHAPE_VLLM_SCORE, r);
    membudget_free(in);
    if (!j)
        return NULL;
    j->raw = raw;
    j->model = model_echo(s, root);
    if (!j->model) {
        score_job_release(j);
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    return j;
}

/* Best first. TEI sorts ascending (stable) and reverses, so equal scores
 * come highest index first; Infinity and vLLM sort descending (stable),
 * lowest index first. */
static int by_score_tei(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score < b->score ? 1 : -1;
    return a->index < b->index ? 1 : -1;
}
static int by_score(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score < b->score ? 1 : -1;
    return a->index < b->index ? -1 : 1;
}

/* The tokens the job ran: its inputs' lengths. */
static int64_t tokens_of(const embed_job *e) {
    return e->cu[e->n] - e->cu[0];
}

static json_t *usage(const embed_job *e) {
    const json_int_t t = (json_int_t)tokens_of(e);
    return json_pack("{s:I, s:I}", "prompt_tokens", t, "total_tokens", t);
}

/* "<prefix>-" and 32 hex digits: an id for the answer, as Infinity and vLLM
 * give one; unique enough to tell answers apart in logs, not a secret. */
static json_t *answer_id(const char *prefix) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t a = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    /* splitmix64 of the time and a counter: two answers never share an id. */
    uint64_t b = a + (atomic_fetch_add(&counter, 1) + 1) * 0x9E3779B97F4A7C15ull;
    b = (b ^ (b >> 30)) * 0xBF58476D1CE4E5B9ull;
    b = (b ^ (b >> 27)) * 0x94D049BB133111EBull;
    b ^= b >> 31;
    char id[64];
    snprintf(id, sizeof id, "%s-%016llx%016llx", prefix, (unsigned long long)a,
             (unsigned long long)b);
    return json_string(id);
}

/* The rerank answers: scores best first, cut to top_n. */
static json_t *rerank_answer(const score_job *j) {
    const embed_job *e = &j->e;
    const int32_t n = e->n;
    ranked *rk = membudget_malloc((size_t)n * sizeof *rk);
    if (!rk)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        rk[i].index = i;
        score_activate(e->out + i, 1, j->raw, &rk[i].score);
    }
    qsort(rk, (size_t)n, sizeof *rk, j->shape == SHAPE_TEI_RERANK ? by_score_tei : by_score);
    const int32_t keep = j->top_n > 0 && j->top_n < n ? j->top_n : n;
    json_t *list = json_array();
    for (int32_t k = 0; list && k < keep; k++) {
        json_t *doc = j->documents ? json_array_get(j->documents, (size_t)rk[k].index) : NULL;
        json_t *item;
        if (j->shape == SHAPE_TEI_RERANK)
            item = json_pack("{s:i, s:f}", "index", (int)rk[k].index, "score", (double)rk[k].score);
        else
            item = json_pack("{s:i, s:f}", "index", (int)rk[k].index, "relevance_score",
                             (double)rk[k].score);
        if (item && doc) {
            const char *key = j->shape == SHAPE_TEI_RERANK ? "text" : "document";
            json_t *v =
                j->shape == SHAPE_V1_RERANK ? json_pack("{s:O}", "text", doc) : json_incref(doc);
            if (json_object_set_new(item, key, v) != 0) {
                json_decref(item);
                item = NULL;
            }
        }
        if (json_array_append_new(list, item) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    membudget_free(rk);
    if (!list || j->shape == SHAPE_TEI_RERANK)
        return list;
    if (j->shape == SHAPE_INFINITY_RERANK)
        return json_pack("{s:s, s:o, s:O, s:o, s:o, s:I}", "object", "rerank", "results", list,
                         "model", j->model, "usage", usage(e), "id", answer_id("infinity"),
                         "created", (json_int_t)time(NULL));
    return json_pack("{s:o, s:O, s:o, s:o}", "id", answer_id("rerank"), "model", j->model,
                     "results", list, "usage", usage(e));
}

/* vLLM's /score answer: a score per pair, in input order. */
static json_t *vllm_score_answer(const score_job *j) {
    const embed_job *e = &j->e;
    json_t *data = json_array();
    for (int32_t i = 0; data && i < e->n; i++) {
        float score;
        score_activate(e->out + i, 1, j->raw, &score);
        if (json_array_append_new(data, json_pack("{s:i, s:s, s:f}", "index", (int)i, "object",
                                                  "score", "score", (double)score)) != 0) {
            json_decref(data);
            data = NULL;
        }
    }
    if (!data)
        return NULL;
    const json_int_t t = (json_int_t)tokens_of(e);
    return json_pack("{s:o, s:s, s:I, s:O, s:o, s:{s:I, s:I, s:i}}", "id", answer_id("score"),
                     "object", "list", "created", (json_int_t)time(NULL), "model", j->model, "data",
                     data, "usage", "prompt_tokens", t, "total_tokens", t, "completion_tokens", 0);
}

/* Infinity's /classify scores a multi-label model (config.json problem_type
 * multi_label_classification) with a sigmoid per label, as Hugging Face's
 * text-classification pipeline does; TEI's /predict keeps TEI's rule (the
 * softmax over several labels). */
static bool per_label(const score_api *s, const score_job *j) {
    return s->multi_label && j->shape == SHAPE_INFINITY_CLASSIFY;
}

/* One input's [{score, label}], best first. */
static json_t *predictions(const score_api *s, const score_job *j, int32_t i) {
    const int32_t k = s->num_labels;
    ranked *rk = membudget_malloc((size_t)k * sizeof *rk);
    float *sc = membudget_malloc((size_t)k * sizeof *sc);
    json_t *list = rk && sc ? json_array() : NULL;
    if (list) {
        score_activate_labels(j->e.out + (size_t)i * (size_t)k, k, j->raw, per_label(s, j), sc);
        for (int32_t l = 0; l < k; l++)
            rk[l] = (ranked){.index = l, .score = sc[l]};
        qsort(rk, (size_t)k, sizeof *rk, j->shape == SHAPE_TEI_PREDICT ? by_score_tei : by_score);
        for (int32_t l = 0; list && l < k; l++)
            if (json_array_append_new(list, json_pack("{s:f, s:s}", "score", (double)rk[l].score,
                                                      "label", s->labels[rk[l].index])) != 0) {
                json_decref(list);
                list = NULL;
            }
    }
    membudget_free(rk);
    membudget_free(sc);
    return list;
}

static json_t *predict_answer(const score_api *s, const score_job *j) {
    if (j->shape == SHAPE_TEI_PREDICT && !j->batch)
        return predictions(s, j, 0);
    json_t *all = json_array();
    for (int32_t i = 0; all && i < j->e.n; i++)
        if (json_array_append_new(all, predictions(s, j, i)) != 0) {
            json_decref(all);
            all = NULL;
        }
    if (!all || j->shape == SHAPE_TEI_PREDICT)
        return all;
    return json_pack("{s:s, s:o, s:O, s:o, s:o, s:I}", "object", "classify", "data", all, "model",
                     j->model, "usage", usage(&j->e), "id", answer_id("infinity"), "created",
                     (json_int_t)time(NULL));
}

/* ---- the routes ---------------------------------------------------------------------------------
 */

static int refused(http_request *req, const refusal *r) {
    if (membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    return http_reply_error_at(req, r->err ? r->err : SRV_EINTERNAL, r->param, r->code, "%s",
                               r->msg);
}

typedef score_job *(*decode_fn)(const score_api *s, json_t *root, refusal *r);
static score_job *decode_rerank_either(const score_api *s, json_t *root, refusal *r);

static score_job *decode_v1(const score_api *s, json_t *root, refusal *r);

/* The model that answers: the one root's `model` names, else for a rerank
 * or score route the first reranker, else the route's own; made the
 * context of the resumed function when it is not the route's own. */
static score_api *route_model(http_request *req, score_api *s, json_t *root, decode_fn decode) {
    if (!s->peers)
        return s;
    const bool rerank =
        decode == decode_rerank_either || decode == decode_v1 || decode == decode_vllm_score;
    const score_api *dflt = rerank && s->rerank ? s->rerank : s;
    score_api *to = s->peers[embed_route_index(s->eapi, root, dflt->eapi->group)];
    if (to != s)
        http_set_ctx(req, to);
    return to;
}

/* A route's decoding, on a codec worker. */
static int handle(http_request *req, score_api *s, decode_fn decode) {
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    s = route_model(req, s, root, decode);
    refusal r = {0};
    score_job *j = NULL;
    /* /rerank answers Infinity's body, and its errors, in Infinity's shape. */
    if (decode == decode_rerank_either && json_object_get(root, "documents") &&
        !json_object_get(root, "texts"))
        http_set_error_shape(req, HTTP_ERRORS_OPENAI);
    if (!json_is_object(root))
        refuse(&r, SRV_EBADREQUEST, "the body must be a JSON object");
    else
        j = decode(s, root, &r);
    http_body_json_free(req, root);
    if (!j)
        return refused(req, &r);
    return job_submit(req, &j->e.base, s->eapi->sched, atomic_load(&s->eapi->request_timeout_ms),
                      score_job_release);
}

static int resumed(http_request *req, void *ctx) {
    const score_api *s = ctx;
    score_job *j = http_user(req);
    embed_api_stamp(req, s->eapi, &j->e);
    if (j->e.base.err != SRV_OK)
        return http_reply_error(req, j->e.base.err, "%s", j->e.base.why);
    if (!j->e.base.ran)
        return http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
    /* An infinite logit, or a softmax over one, would make json_real fail
     * (JSON has no infinity or NaN): the model's output is unusable, which
     * TEI answers 424 (its Backend error). A rerank scores one logit. */
    const bool rerank = j->shape != SHAPE_TEI_PREDICT && j->shape != SHAPE_INFINITY_CLASSIFY;
    const int32_t bad =
        score_first_not_finite(j->e.out, j->e.n, s->num_labels, j->raw, !rerank && per_label(s, j));
    if (bad == -2 && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (bad == -2)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory checking the scores");
    if (bad >= 0)
        return http_reply_error(req, SRV_ETASK, "score is not finite (input %d)", (int)bad);
    json_t *out = j->shape == SHAPE_TEI_PREDICT || j->shape == SHAPE_INFINITY_CLASSIFY
                      ? predict_answer(s, j)
                  : j->shape == SHAPE_VLLM_SCORE ? vllm_score_answer(j)
                                                 : rerank_answer(j);
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory encoding the answer");
    return http_reply_json(req, 200, out);
}

static int tei_predict(http_request *req, void *ctx) {
    return handle(req, ctx, decode_predict);
}

static score_job *decode_v1(const score_api *s, json_t *root, refusal *r) {
    return decode_rerank_cohere(s, root, SHAPE_V1_RERANK, r);
}
static score_job *decode_infinity(const score_api *s, json_t *root, refusal *r) {
    return decode_rerank_cohere(s, root, SHAPE_INFINITY_RERANK, r);
}

/* POST /rerank: TEI's body has `texts`, Infinity's (Cohere's) `documents`;
 * neither has the other's, so the body says which API is calling, and the
 * answer and its errors take that API's shape. */
static score_job *decode_rerank_either(const score_api *s, json_t *root, refusal *r) {
    const bool tei = json_object_get(root, "texts") != NULL;
    const bool inf = json_object_get(root, "documents") != NULL;
    if (tei && inf) {
        refuse(r, SRV_EBADREQUEST,
               "the body has both `texts` (Text Embeddings Inference) and `documents` (Infinity, "
               "Cohere): send one");
        return NULL;
    }
    return inf ? decode_infinity(s, root, r) : decode_tei_rerank(s, root, r);
}

static int rerank_route(http_request *req, void *ctx) {
    return handle(req, ctx, decode_rerank_either);
}

static int v1_rerank(http_request *req, void *ctx) {
    return handle(req, ctx, decode_v1);
}

static int infinity_classify(http_request *req, void *ctx) {
    return handle(req, ctx, decode_classify);
}

static int vllm_score(http_request *req, void *ctx) {
    return handle(req, ctx, decode_vllm_score);
}

/* POST / and /invocations: TEI's route for the served model's task. */
static int tei_default(http_request *req, void *ctx) {
    const score_api *s = ctx;
    if (s->num_labels == 1)
        return handle(req, ctx, decode_tei_rerank);
    return handle(req, ctx, decode_predict);
}

/* The trace line's "score" member (batch.h's batch_kind trace): what the
 * part held. The forward's stages are the embed member's when both ran. */
static int score_trace(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified) {
    (void)ctx;
    *verified = false;
    return snprintf(buf, cap, ",\"score\":{\"requests\":%d,\"sequences\":%d,\"tokens\":%d}",
                    part->n_reqs, part->n_seqs, part->n_tokens);
}

int score_api_add_kind(score_api *s, embed_service *svc, batch_runner *runner) {
    const batch_kind kind = {
        .name = "score", .run = embed_service_run_batch, .trace = score_trace, .ctx = svc};
    return (s->kind = batch_runner_add_kind(runner, &kind)) < 0 ? -1 : 0;
}

int score_api_register(score_api *s, embed_service *svc, batch_runner *runner, routes *t) {
    if (score_api_add_kind(s, svc, runner) != 0)
        return -1;
    const http_error_shape TEI = HTTP_ERRORS_TEI, OAI = HTTP_ERRORS_OPENAI;
    const http_route mine[] = {
        {"POST", "/rerank", true, HTTP_AUTH_KEY, rerank_route, resumed, s, TEI},
        {"POST", "/predict", true, HTTP_AUTH_KEY, tei_predict, resumed, s, TEI},
        {"POST", "/classify", true, HTTP_AUTH_KEY, infinity_classify, resumed, s, OAI},
        {"POST", "/v1/rerank", true, HTTP_AUTH_KEY, v1_rerank, resumed, s, OAI},
        {"POST", "/v2/rerank", true, HTTP_AUTH_KEY, v1_rerank, resumed, s, OAI},
        {"POST", "/score", true, HTTP_AUTH_KEY, vllm_score, resumed, s, OAI},
        {"POST", "/v1/score", true, HTTP_AUTH_KEY, vllm_score, resumed, s, OAI},
    };
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (routes_add(t, mine[i]) != 0)
            return -1;
    if (!s->classifier || s->no_root)
        return 0;
    score_api *root = s->root ? s->root : s;
    const http_route dflt[] = {
        {"POST", "/", true, HTTP_AUTH_KEY, tei_default, resumed, root, TEI},
        {"POST", "/invocations", true, HTTP_AUTH_KEY, tei_default, resumed, root, TEI},
    };
    for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++)
        if (routes_add(t, dflt[i]) != 0)
            return -1;
    return 0;
}

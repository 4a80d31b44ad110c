/* score_request.c — the canonical scoring request (score_request.h): its
 * inputs tokenized into one job, and its scores activated, ordered and cut
 * for the answers. Runs on the codec workers. */
#include "server/api/score_request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api/errors.h"
#include "server/api/job_tokens.h"
#include "server/api/jwriter.h"
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

/* ---- tokenizing ------------------------------------------------------------------------ */

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
    /* A pair is empty when both its texts are, as TEI's tokenizer has it. */
    if (embed_check_text((size_t)i, in->alen + (in->b ? in->blen : 0), r) != SRV_OK)
        return r->err;
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
    if (rc == TOK_ETOOLONG)
        return refuse(r, SRV_EINVALID,
                      "input %d has %d tokens; at most %d are taken and truncation is off", (int)i,
                      (int)o.n_full, (int)max);
    if (rc == TOK_ENOPAIR)
        return refuse(r, SRV_ETOKENIZER,
                      "the model's tokenizer has no template for a pair of texts (its "
                      "post_processor has no \"pair\")");
    if (rc != TOK_OK)
        return job_tokens_refuse(rc, i, o.error_at, SRV_EMEMORY, r);
    /* A model without a type table (ModernBERT) never sees the types its
     * tokenizer's pair template gives (transformers' forward takes none).
     * Otherwise a template that types the second text 1 on a model with one
     * token type (a tokenizer and model that do not belong together) would
     * index past the model's type embeddings. */
    for (int32_t k = 0; s->types_unused && k < o.n; k++)
        o.type_ids[k] = 0;
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

/* ---- the request to its job ------------------------------------------------------------ */

void score_job_release(void *p) {
    score_job *j = p;
    if (j)
        json_decref(j->documents);
    embed_job_release(p);
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
static json_t *model_echo(const score_api *s, const json_t *root) {
    json_t *model = json_object_get(root, "model");
    return json_is_string(model) ? json_stringn(json_string_value(model), json_string_length(model))
                                 : json_string(s->eapi->model_name);
}

/* The documents' texts, for an answer that returns them (a copy: the
 * request's tree is freed before the answer); NULL when out of memory. */
static json_t *texts_of(const json_t *documents) {
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(documents); i++) {
        json_t *d = json_array_get(documents, i);
        d = json_is_object(d) ? json_object_get(d, "text") : d;
        if (json_array_append_new(out, json_stringn(json_string_value(d), json_string_length(d)))) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

score_job *score_request_job(const score_api *s, const score_request *q, const json_t *root,
                             refusal *r) {
    /* The body first, then the model, as TEI checks them. */
    const unsigned flags = q->dialect->flags;
    if (flags & SCORE_RERANKER ? not_reranker(s, r) : not_classifier(s, r))
        return NULL;
    embed_job *e = score_job_make(s, q->in, q->n, q->truncate, q->direction == EMBED_TRUNCATE_LEFT,
                                  q->limit, r);
    if (!e)
        return NULL;
    /* The job's arrays move into a score_job, the answer's options beside them. */
    score_job *j = (score_job *)embed_job_grow(e, sizeof *j, r);
    if (!j)
        return NULL;
    j->dialect = q->dialect;
    j->raw = q->raw;
    j->per_label = (flags & SCORE_PER_LABEL) && s->multi_label;
    j->batch = q->batch;
    j->top_n = q->top_n > INT32_MAX ? INT32_MAX : (int32_t)q->top_n;
    j->e.model = model_echo(s, root);
    if (!j->e.model || (q->ret && !(j->documents = texts_of(q->documents)))) {
        score_job_release(j);
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    return j;
}

/* ---- the dialects' shared reading ----------------------------------------------------- */

int score_inputs_new(score_request *q, size_t n, refusal *r) {
    q->in = membudget_calloc(n, sizeof *q->in);
    if (!q->in)
        return refuse(r, SRV_EMEMORY, "out of memory");
    q->n = (int32_t)n;
    return SRV_OK;
}

/* q->query with each of q->documents (the body's `field`) as pairs: an
 * array of strings, or with objects of {"text": string} too. */
static int rerank_pairs(score_request *q, const char *field, bool objects, refusal *r) {
    const json_t *query = q->query, *documents = q->documents;
    if (!json_is_string(query))
        return refuse(r, SRV_EBADREQUEST,
                      query ? "query must be a string" : "missing field \"query\"");
    if (!json_is_array(documents))
        return refuse(r, SRV_EBADREQUEST,
                      documents ? "%s must be an array of strings" : "missing field \"%s\"", field);
    const size_t size = json_array_size(documents);
    if (size == 0)
        return refuse(r, SRV_EEMPTY, "`%s` cannot be empty", field);
    if (size > INT32_MAX)
        return refuse(r, SRV_EINVALID, "%s has too many entries", field);
    if (score_inputs_new(q, size, r) != SRV_OK)
        return r->err;
    for (size_t i = 0; i < size; i++) {
        json_t *d = json_array_get(documents, i);
        if (objects && json_is_object(d))
            d = json_object_get(d, "text");
        if (!json_is_string(d))
            return refuse(r, SRV_EBADREQUEST, "%s[%zu] must be a string%s", field, i,
                          objects ? " or {\"text\": string}" : "");
        q->in[i] = (score_input){.a = json_string_value(query),
                                 .alen = json_string_length(query),
                                 .b = json_string_value(d),
                                 .blen = json_string_length(d)};
    }
    return SRV_OK;
}

int score_request_decode(const score_api *s, const json_t *root, score_request *q, refusal *r) {
    const score_dialect *d = q->dialect;
    if (d->fields && fld_decode(d->fields, root, q, s->eapi, r) != SRV_OK)
        return r->err;
    if (d->inputs)
        return d->inputs(s, root, q, r);
    return rerank_pairs(q, d->documents, d->flags & SCORE_DOC_OBJECTS, r);
}

/* ---- post-processing and the answers' parts ------------------------------------------- */

/* Best first. TEI sorts ascending (stable) and reverses, so equal scores
 * come highest index first; Infinity and vLLM sort descending (stable),
 * lowest index first. */
static int by_score_tei(const void *pa, const void *pb) {
    const score_ranked *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score < b->score ? 1 : -1;
    return a->index < b->index ? 1 : -1;
}
static int by_score(const void *pa, const void *pb) {
    const score_ranked *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score < b->score ? 1 : -1;
    return a->index < b->index ? -1 : 1;
}

static void rank(const score_job *j, score_ranked *rk, int32_t n) {
    qsort(rk, (size_t)n, sizeof *rk, j->dialect->flags & SCORE_TEI_ORDER ? by_score_tei : by_score);
}

float score_one(const score_job *j, int32_t i) {
    float score;
    score_activate(j->e.out + i, 1, j->raw, &score);
    return score;
}

json_t *score_rerank_results(const score_job *j, const char *score_key, const char *doc_key,
                             bool doc_object) {
    const int32_t n = j->e.n;
    score_ranked *rk = membudget_malloc((size_t)n * sizeof *rk);
    if (!rk)
        return NULL;
    for (int32_t i = 0; i < n; i++)
        rk[i] = (score_ranked){.index = i, .score = score_one(j, i)};
    rank(j, rk, n);
    const int32_t keep = j->top_n > 0 && j->top_n < n ? j->top_n : n;
    json_t *list = json_array();
    for (int32_t k = 0; list && k < keep; k++) {
        json_t *doc = j->documents ? json_array_get(j->documents, (size_t)rk[k].index) : NULL;
        json_t *item =
            json_pack("{s:i, s:f}", "index", (int)rk[k].index, score_key, (double)rk[k].score);
        if (item && doc) {
            json_t *v = doc_object ? json_pack("{s:O}", "text", doc) : json_incref(doc);
            if (json_object_set_new(item, doc_key, v) != 0) {
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
    return list;
}

json_t *score_labels(const score_api *s, const score_job *j, int32_t i) {
    const int32_t k = s->num_labels;
    score_ranked *rk = membudget_malloc((size_t)k * sizeof *rk);
    float *sc = membudget_malloc((size_t)k * sizeof *sc);
    json_t *list = rk && sc ? json_array() : NULL;
    if (list) {
        score_activate_labels(j->e.out + (size_t)i * (size_t)k, k, j->raw, j->per_label, sc);
        for (int32_t l = 0; l < k; l++)
            rk[l] = (score_ranked){.index = l, .score = sc[l]};
        rank(j, rk, k);
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

json_t *score_labels_all(const score_api *s, const score_job *j) {
    json_t *all = json_array();
    for (int32_t i = 0; all && i < j->e.n; i++)
        if (json_array_append_new(all, score_labels(s, j, i)) != 0) {
            json_decref(all);
            all = NULL;
        }
    return all;
}

int64_t score_tokens(const score_job *j) {
    return j->e.cu[j->e.n] - j->e.cu[0];
}

json_t *score_usage(const score_job *j) {
    const json_int_t t = (json_int_t)score_tokens(j);
    return json_pack("{s:I, s:I}", "prompt_tokens", t, "total_tokens", t);
}

json_t *score_answer_id(const char *prefix) {
    char id[JW_ID_LEN];
    jw_make_id(id, prefix);
    return json_string(id);
}

/* score_vllm.c — vLLM's score dialect: POST /score and /v1/score {model,
 * text_1, text_2 (each a string or an array: paired 1:1, 1:N or N:N),
 * truncate_prompt_tokens, use_activation} answered {id, object: "list",
 * created, model, data: [{index, object: "score", score}] in input order,
 * usage}. Errors in OpenAI's shape. */
#include <stddef.h>
#include <time.h>

#include "server/api/score_request.h"

typedef embed_refusal refusal;

#define AT(f) offsetof(score_request, f)
/* Taken for compatibility and not applied. */
#define UNUSED_ROW(name)                                                                           \
    { name, FLD_ANY, 0, AT(unused), .param = NULL }

/* priority 0, the only one there is without priority scheduling. */
static int priority_check(const void *ctx, const json_t *v, refusal *r) {
    (void)ctx;
    if (json_is_integer(v) && json_integer_value(v) == 0)
        return SRV_OK;
    return refuse(r, SRV_EBADREQUEST,
                  "priority must be 0: this service schedules in arrival order, as vLLM does "
                  "without priority scheduling");
}

/* text_1 pairs as a rerank's query, text_2 as its documents. The activation
 * flag goes by three names (activation()); the multi-modal processor's
 * options have nothing to apply to. */
static const fld_row SCORE_ROWS[] = {
    EMBED_MODEL_ROW(AT(model)),
    {"text_1", FLD_ANY, 0, AT(query), .param = "text_1"},
    {"text_2", FLD_ANY, 0, AT(documents), .param = "text_2"},
    {"truncate_prompt_tokens", FLD_ANY, 0, AT(truncate_to), .param = "truncate_prompt_tokens"},
    {"priority", FLD_ANY, 0, AT(unused), .param = "priority", .check = priority_check},
    UNUSED_ROW("softmax"),
    UNUSED_ROW("activation"),
    UNUSED_ROW("use_activation"),
    {"mm_processor_kwargs", FLD_OBJECT, 0, AT(unused), .param = "mm_processor_kwargs"},
    UNUSED_ROW("user"),
};
static const fld_table SCORE = FLD_TABLE(SCORE_ROWS, NULL, NULL);

/* text_1 or text_2: a string or a non-empty array of strings; its
 * ScoreMultiModalParam (an object of content parts) is refused. */
static int texts(const json_t *v, const char *field, size_t *n, refusal *r) {
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
static json_t *text(json_t *v, size_t i) {
    return json_is_string(v) ? v : json_array_get(v, i);
}

/* The activation flag under its three names, first set wins as vLLM reads
 * them (softmax and activation are its deprecated spellings of
 * use_activation); default on: the sigmoid of the logit. */
static int activation(const json_t *root, bool *raw, refusal *r) {
    static const char *const names[] = {"softmax", "activation", "use_activation"};
    *raw = false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        json_t *v = json_object_get(root, names[i]);
        if (!v || json_is_null(v))
            continue;
        if (!json_is_boolean(v)) {
            r->param = names[i];
            return refuse(r, SRV_EBADREQUEST, "%s must be true or false", names[i]);
        }
        *raw = !json_is_true(v);
        return SRV_OK;
    }
    return SRV_OK;
}

/* truncate_prompt_tokens: absent or null, no truncation (longer is
 * refused); -1, the model's maximum; k, at most k tokens a pair, special
 * tokens included, cut as the tokenizer's longest_first does. */
static int truncation(const score_api *s, score_request *q, refusal *r) {
    const json_t *v = q->truncate_to;
    q->truncate = false;
    q->limit = 0;
    if (!v || json_is_null(v))
        return SRV_OK;
    r->param = "truncate_prompt_tokens";
    if (!json_is_integer(v))
        return refuse(r, SRV_EBADREQUEST, "truncate_prompt_tokens must be an integer");
    const json_int_t k = json_integer_value(v);
    /* The fewest tokens a pair can be cut to: its special tokens and one
     * token of each text. */
    const int32_t least = tok_num_special_pair(s->eapi->tok) + 2;
    if (k != -1 && k < least)
        return refuse(r, SRV_EINVALID,
                      "truncate_prompt_tokens must be -1 or at least %d (a pair's special tokens "
                      "and one token of each text)",
                      (int)least);
    if (k > s->max_length)
        return refuse(r, SRV_EINVALID,
                      "truncate_prompt_tokens (%lld) is greater than the model's maximum length "
                      "(%d)",
                      (long long)k, (int)s->max_length);
    q->truncate = true;
    q->limit = k == -1 ? 0 : (int32_t)k;
    r->param = NULL;
    return SRV_OK;
}

static int score_inputs(const score_api *s, const json_t *root, score_request *q, refusal *r) {
    json_t *t1 = q->query, *t2 = q->documents;
    size_t n1 = 0, n2 = 0;
    if (texts(t1, "text_1", &n1, r) || texts(t2, "text_2", &n2, r) ||
        activation(root, &q->raw, r) || truncation(s, q, r))
        return r->err;
    if (n1 > 1 && n1 != n2)
        return refuse(r, SRV_EBADREQUEST,
                      "text_1 has %zu texts and text_2 %zu: the lengths must be 1:1, 1:N or N:N",
                      n1, n2);
    if (n2 > INT32_MAX)
        return refuse(r, SRV_EINVALID, "text_2 has too many entries");
    if (score_inputs_new(q, n2, r) != SRV_OK)
        return r->err;
    for (size_t i = 0; i < n2; i++) {
        json_t *a = text(t1, n1 == 1 ? 0 : i), *b = text(t2, i);
        q->in[i] = (score_input){.a = json_string_value(a),
                                 .alen = json_string_length(a),
                                 .b = json_string_value(b),
                                 .blen = json_string_length(b)};
    }
    return SRV_OK;
}

/* A score per pair, in input order. */
static json_t *score_answer(const score_api *s, const score_job *j) {
    (void)s;
    json_t *data = json_array();
    for (int32_t i = 0; data && i < j->e.n; i++)
        if (json_array_append_new(data, json_pack("{s:i, s:s, s:f}", "index", (int)i, "object",
                                                  "score", "score", (double)score_one(j, i))) !=
            0) {
            json_decref(data);
            data = NULL;
        }
    if (!data)
        return NULL;
    const json_int_t t = (json_int_t)score_tokens(j);
    return json_pack("{s:o, s:s, s:I, s:O, s:o, s:{s:I, s:I, s:i}}", "id", score_answer_id("score"),
                     "object", "list", "created", (json_int_t)time(NULL), "model", j->e.model,
                     "data", data, "usage", "prompt_tokens", t, "total_tokens", t,
                     "completion_tokens", 0);
}

const score_dialect score_vllm_score = {.fields = &SCORE,
                                        .inputs = score_inputs,
                                        .flags = SCORE_RERANKER,
                                        .errors = HTTP_ERRORS_OPENAI,
                                        .answer = score_answer};

/* score_infinity.c — Infinity's scoring dialect: POST /rerank {query,
 * documents, return_documents, raw_scores, top_n, model} answered {object:
 * "rerank", results: [{relevance_score, index, document?}], model, usage,
 * id, created}, and POST /classify {input: [texts], raw_scores, model}
 * answered {object: "classify", data: [[{score, label}]], ...}; on a
 * multi-label model (config.json problem_type multi_label_classification)
 * /classify gives each label its sigmoid, as Hugging Face's
 * text-classification pipeline does. Errors in OpenAI's shape. */
#include <stddef.h>
#include <time.h>

#include "server/api/score_request.h"

typedef embed_refusal refusal;

#define AT(f) offsetof(score_request, f)

/* top_n at least 1. */
static const fld_row RERANK_ROWS[] = {
    {"query", FLD_ANY, FLD_NULL, AT(query), .param = NULL},
    {"documents", FLD_ANY, FLD_NULL, AT(documents), .param = NULL},
    {"return_documents", FLD_BOOL, 0, AT(ret), .dflt = false},
    {"raw_scores", FLD_BOOL, 0, AT(raw), .dflt = false},
    {"top_n", FLD_INT, 0, AT(top_n), .min = 1, .max = INT64_MAX, .range = FLD_RANGE_AT_LEAST},
    EMBED_MODEL_ROW(AT(model)),
};
static const fld_table RERANK = FLD_TABLE(RERANK_ROWS, NULL, NULL);

static const fld_row CLASSIFY_ROWS[] = {
    {"input", FLD_ANY, FLD_NULL, AT(inputs), .param = "input"},
    EMBED_MODEL_ROW(AT(model)),
    {"raw_scores", FLD_BOOL, 0, AT(raw), .dflt = false},
};
static const fld_table CLASSIFY = FLD_TABLE(CLASSIFY_ROWS, NULL, NULL);

static int classify_inputs(const score_api *s, const json_t *root, score_request *q, refusal *r) {
    (void)s;
    (void)root;
    json_t *input = q->inputs;
    if (!json_is_array(input) || json_array_size(input) == 0 ||
        json_array_size(input) > INT32_MAX) {
        r->param = "input";
        return refuse(r, SRV_EBADREQUEST,
                      input ? "input must be a non-empty array of strings"
                            : "missing field \"input\"");
    }
    if (score_inputs_new(q, json_array_size(input), r) != SRV_OK)
        return r->err;
    for (int32_t i = 0; i < q->n; i++) {
        json_t *x = json_array_get(input, (size_t)i);
        if (!json_is_string(x)) {
            r->param = "input";
            return refuse(r, SRV_EBADREQUEST, "input[%d] must be a string", (int)i);
        }
        q->in[i] = (score_input){.a = json_string_value(x), .alen = json_string_length(x)};
    }
    return SRV_OK;
}

/* Infinity's list around the answer's key: the object's name, the model,
 * the usage, an id and the time. */
static json_t *infinity_list(const char *object, const char *key, json_t *list,
                             const score_job *j) {
    if (!list)
        return NULL;
    return json_pack("{s:s, s:o, s:O, s:o, s:o, s:I}", "object", object, key, list, "model",
                     j->e.model, "usage", score_usage(j), "id", score_answer_id("infinity"),
                     "created", (json_int_t)time(NULL));
}

static json_t *rerank_answer(const score_api *s, const score_job *j) {
    (void)s;
    return infinity_list("rerank", "results",
                         score_rerank_results(j, "relevance_score", "document", false), j);
}

const score_dialect score_infinity_rerank = {.fields = &RERANK,
                                             .documents = "documents",
                                             .flags = SCORE_RERANKER,
                                             .errors = HTTP_ERRORS_OPENAI,
                                             .answer = rerank_answer};

static json_t *classify_answer(const score_api *s, const score_job *j) {
    return infinity_list("classify", "data", score_labels_all(s, j), j);
}

const score_dialect score_infinity_classify = {.fields = &CLASSIFY,
                                               .inputs = classify_inputs,
                                               .flags = SCORE_PER_LABEL,
                                               .errors = HTTP_ERRORS_OPENAI,
                                               .answer = classify_answer};

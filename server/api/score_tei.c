/* score_tei.c — Text Embeddings Inference's scoring dialect: POST /rerank
 * {query, texts, raw_scores, return_text, truncate, truncation_direction}
 * answered [{index, score, text?}] best first, and POST /predict {inputs,
 * raw_scores, truncate, truncation_direction} answered [{score, label}]
 * best first (a batch: one such list per input). Errors in TEI's shape. */
#include <stddef.h>

#include "server/api/score_request.h"

typedef embed_refusal refusal;

#define AT(f) offsetof(score_request, f)

/* TEI answers an empty `texts` as Empty before it reads the other fields. */
static int texts_check(const void *ctx, const json_t *v, refusal *r) {
    (void)ctx;
    if (json_is_array(v) && json_array_size(v) == 0)
        return refuse(r, SRV_EEMPTY, "`texts` cannot be empty");
    return SRV_OK;
}

/* truncate's default is the setting. */
static const fld_row RERANK_ROWS[] = {
    {"query", FLD_ANY, FLD_NULL, AT(query), .param = NULL},
    {"texts", FLD_ANY, FLD_NULL, AT(documents), .param = NULL, .check = texts_check},
    {"raw_scores", FLD_BOOL, 0, AT(raw), .dflt = false},
    {"return_text", FLD_BOOL, 0, AT(ret), .dflt = false},
    {"truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL},
    EMBED_TRUNCATION_ROW(AT(direction)),
};
static const fld_table RERANK = FLD_TABLE(RERANK_ROWS, NULL, NULL);

static const fld_row PREDICT_ROWS[] = {
    {"inputs", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL},
    {"raw_scores", FLD_BOOL, 0, AT(raw), .dflt = false},
    {"truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL},
    EMBED_TRUNCATION_ROW(AT(direction)),
};
static const fld_table PREDICT = FLD_TABLE(PREDICT_ROWS, NULL, NULL);

static json_t *rerank_answer(const score_api *s, const score_job *j) {
    (void)s;
    return score_rerank_results(j, "score", "text", false);
}

const score_dialect score_tei_rerank = {.fields = &RERANK,
                                        .documents = "texts",
                                        .flags = SCORE_RERANKER | SCORE_TEI_ORDER,
                                        .errors = HTTP_ERRORS_TEI,
                                        .answer = rerank_answer};

/* /predict's inputs: "text", ["a", "b"] (one pair), ["a"] (one text), or
 * [[...], [...]] (a batch of texts and pairs). */
static int predict_inputs(const score_api *s, const json_t *root, score_request *q, refusal *r) {
    (void)s;
    (void)root;
    static const char *const shape =
        "inputs must be a string, a pair of strings [string, string] or a batch of strings and "
        "pairs [[string], [string, string], ...]";
    json_t *inputs = q->inputs;
    if (!inputs)
        return refuse(r, SRV_EBADREQUEST, "missing field \"inputs\"");
    const bool single = json_is_string(inputs) ||
                        (json_is_array(inputs) && json_is_string(json_array_get(inputs, 0)));
    if (!single && !json_is_array(inputs))
        return refuse(r, SRV_EBADREQUEST, "%s", shape);
    if (!single && json_array_size(inputs) == 0)
        return refuse(r, SRV_EEMPTY, "`inputs` cannot be empty");
    const size_t size = single ? 1 : json_array_size(inputs);
    if (size > INT32_MAX)
        return refuse(r, SRV_EINVALID, "inputs has too many entries");
    if (score_inputs_new(q, size, r) != SRV_OK)
        return r->err;
    for (size_t i = 0; i < size; i++) {
        json_t *x = single ? inputs : json_array_get(inputs, i);
        if (json_is_string(x)) {
            q->in[i] = (score_input){.a = json_string_value(x), .alen = json_string_length(x)};
            continue;
        }
        const size_t k = json_array_size(x);
        json_t *a = json_array_get(x, 0), *b = json_array_get(x, 1);
        if (!json_is_array(x) || k < 1 || k > 2 || !json_is_string(a) ||
            (k == 2 && !json_is_string(b)))
            return single ? refuse(r, SRV_EBADREQUEST, "%s", shape)
                          : refuse(r, SRV_EBADREQUEST, "inputs[%zu]: %s", i, shape);
        q->in[i] = (score_input){.a = json_string_value(a), .alen = json_string_length(a)};
        if (k == 2) {
            q->in[i].b = json_string_value(b);
            q->in[i].blen = json_string_length(b);
        }
    }
    q->batch = !single;
    return SRV_OK;
}

static json_t *predict_answer(const score_api *s, const score_job *j) {
    return j->batch ? score_labels_all(s, j) : score_labels(s, j, 0);
}

const score_dialect score_tei_predict = {.fields = &PREDICT,
                                         .inputs = predict_inputs,
                                         .flags = SCORE_TEI_ORDER,
                                         .errors = HTTP_ERRORS_TEI,
                                         .answer = predict_answer};

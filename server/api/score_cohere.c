/* score_cohere.c — Cohere's rerank, as Jina and vLLM speak it too: POST
 * /v1/rerank and /v2/rerank {model, query, documents (strings or {text}),
 * top_n, return_documents, truncate} answered {id, model, results: [{index,
 * relevance_score, document: {text}?}], usage}. top_n 0 is all (vLLM's
 * default); the documents are returned unless asked not to be. Errors in
 * OpenAI's shape. */
#include <stddef.h>

#include "server/api/score_request.h"

typedef embed_refusal refusal;

#define AT(f) offsetof(score_request, f)
/* Taken for compatibility and not applied. */
#define UNUSED_ROW(name)                                                                           \
    { name, FLD_ANY, 0, AT(unused), .param = NULL }

static const fld_row RERANK_ROWS[] = {
    EMBED_MODEL_ROW(AT(model)),
    {"query", FLD_ANY, FLD_NULL, AT(query), .param = NULL},
    {"documents", FLD_ANY, FLD_NULL, AT(documents), .param = NULL},
    {"top_n", FLD_INT, 0, AT(top_n), .min = 0, .max = INT64_MAX, .range = FLD_RANGE_AT_LEAST},
    {"return_documents", FLD_BOOL, 0, AT(ret), .dflt = true},
    UNUSED_ROW("max_chunks_per_doc"),
    UNUSED_ROW("rank_fields"),
    {"truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL},
    UNUSED_ROW("user"),
};
static const fld_table RERANK = FLD_TABLE(RERANK_ROWS, NULL, NULL);

static json_t *rerank_answer(const score_api *s, const score_job *j) {
    (void)s;
    json_t *list = score_rerank_results(j, "relevance_score", "document", true);
    if (!list)
        return NULL;
    return json_pack("{s:o, s:O, s:o, s:o}", "id", score_answer_id("rerank"), "model", j->e.model,
                     "results", list, "usage", score_usage(j));
}

const score_dialect score_cohere_rerank = {.fields = &RERANK,
                                           .documents = "documents",
                                           .flags = SCORE_RERANKER | SCORE_DOC_OBJECTS,
                                           .errors = HTTP_ERRORS_OPENAI,
                                           .answer = rerank_answer};

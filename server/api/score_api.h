/* score_api.h — rerank and classification: the routes of a served
 * sequence classifier (a cross-encoder reranker is one with a single label),
 * in the shapes its clients already speak:
 *
 *   Text Embeddings Inference: POST /rerank {query, texts, raw_scores,
 *     return_text, truncate, truncation_direction} answers [{index, score,
 *     text?}] best first; POST /predict {inputs: a text, a pair [a, b], or a
 *     batch of either; raw_scores, truncate, truncation_direction} answers
 *     [{score, label}] best first (a batch: one such list per input); POST /
 *     and POST /invocations go to /rerank for a reranker and /predict for
 *     any other classifier, as TEI routes them. Errors in TEI's shape.
 *   Infinity: POST /rerank with {query, documents, return_documents,
 *     raw_scores, top_n, model} (told from TEI's body by `documents`, which
 *     TEI's has not, and `texts`, which Infinity's has not; a body with
 *     both or neither is refused) answers {object: "rerank", results:
 *     [{relevance_score, index, document?}], model, usage, id, created};
 *     POST /classify {input: [texts], raw_scores, model} answers {object:
 *     "classify", data: [[{score, label}]], ...}. Errors in OpenAI's shape.
 *   Cohere / Jina / vLLM: POST /v1/rerank (and vLLM's /v2/rerank) {model,
 *     query, documents (strings or {text}), top_n, return_documents}
 *     answers {id, model, results: [{index, relevance_score, document:
 *     {text}?}], usage}.
 *   vLLM: POST /score and /v1/score {model, text_1, text_2 (each a string
 *     or an array: paired 1:1, 1:N or N:N), truncate_prompt_tokens,
 *     use_activation} answers {id, object: "list", created, model, data:
 *     [{index, object: "score", score}] in input order, usage}.
 *
 * Scores: the model's logits, or unless raw_scores, the sigmoid of the one
 * logit of a reranker and the softmax over the labels of a classifier (the
 * sigmoid when it has one label), as TEI computes them; Infinity's /classify
 * on a multi-label model, the sigmoid of each label. Scores that are not
 * finite are answered 424 (TEI's Backend error), in the route's shape. A pair is tokenized
 * as the model's tokenizer encodes a pair (tok_encode_pair: type ids,
 * longest_first truncation to the model's maximum length).
 *
 * Each API is a thin dialect file (score_tei.c, score_infinity.c,
 * score_cohere.c, score_vllm.c: its fields' table and its answer) over one
 * canonical request (score_request.h: the score_api a model has, the
 * decoding the unit tests and fuzz targets drive), which makes every job
 * and post-processes every score.
 *
 * Every pair or text is one input of an embed_job with type ids: the job
 * runs in the scheduler's batches beside embeddings, in pieces when it is
 * larger than a batch (job.h), under max_inputs_per_request and the
 * request-memory budget, through the engine with type ids. */
#ifndef ATTN_SCORE_API_H
#define ATTN_SCORE_API_H

#include <stdbool.h>
#include <stdint.h>

#include "server/api/embed_codec.h"
#include "server/api/score_request.h"
#include "server/http/routes.h"
#include "server/work/batch.h"

/* Registers the "score" kind with runner (run on the embeddings service
 * svc, whose batches take type ids) and the routes above. POST / and POST
 * /invocations are registered only for a classifier (compat_api takes them
 * for an embedder). Returns 0, or -1 (a kind or route refused). */
int score_api_register(score_api *s, embed_service *svc, batch_runner *runner, routes *t);

/* Only the "score" kind, for a model whose routes another model's
 * score_api registered (several models). Returns 0 or -1. */
int score_api_add_kind(score_api *s, embed_service *svc, batch_runner *runner);

#endif

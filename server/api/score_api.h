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
 * canonical request (score_request.h), which makes every job and
 * post-processes every score.
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
#include "server/http/routes.h"
#include "server/work/batch.h"

typedef struct score_api {
    embed_api *eapi; /* the tokenizer, the scheduler, the limits, the model's name */
    int kind;        /* the runner's id of the "score" kind */
    /* The served model: a classifier with num_labels labels (labels[i] its
     * id2label name), or not a classifier (every route here refuses, 424). */
    bool classifier;
    int32_t num_labels;
    const char *const *labels;
    int32_t max_length;      /* tokens of a pair or text, special tokens included */
    int32_t type_vocab_size; /* token type ids the model has: [0, this) */
    bool multi_label;        /* config.json problem_type multi_label_classification */
    /* Several models: every model's score_api in the configured order (as
     * eapi->peers), so a request naming a model is answered by that one;
     * rerank, the first reranker, answers the rerank and score routes of a
     * request that names none (the routes are registered with the first
     * classifier's, which answers /predict and /classify); root, the first
     * model's when it is a classifier, answers POST / and /invocations, as
     * TEI serving that model would, whichever classifier registers them;
     * no_root: those two belong to an embedder. NULL / false: one model. */
    struct score_api *const *peers;
    struct score_api *rerank;
    struct score_api *root;
    bool no_root;
} score_api;

/* Registers the "score" kind with runner (run on the embeddings service
 * svc, whose batches take type ids) and the routes above. POST / and POST
 * /invocations are registered only for a classifier (compat_api takes them
 * for an embedder). Returns 0, or -1 (a kind or route refused). */
int score_api_register(score_api *s, embed_service *svc, batch_runner *runner, routes *t);

/* Only the "score" kind, for a model whose routes another model's
 * score_api registered (several models). Returns 0 or -1. */
int score_api_add_kind(score_api *s, embed_service *svc, batch_runner *runner);

/* ---- decoding, exposed for the unit tests and the fuzz targets --------------------- */

/* One input: text a alone (b NULL) or the pair (a, b). */
typedef struct score_input {
    const char *a, *b;
    size_t alen, blen;
} score_input;

/* The job of n inputs, each tokenized (a pair with tok_encode_pair, a text
 * with tok_encode) to at most limit tokens (0: s->max_length; never more),
 * cut on the left when left, else the right, when truncate, else refused
 * (SRV_EINVALID) when longer; type ids kept; out sized for num_labels
 * logits per input. NULL with the refusal in r. */
embed_job *score_job_make(const score_api *s, const score_input *in, int32_t n, bool truncate,
                          bool left, int32_t limit, embed_refusal *r);

/* The scores of logits[0, k): raw, or the sigmoid of a single logit, or the
 * softmax of several, written to out. */
void score_activate(const float *logits, int32_t k, bool raw, float *out);
/* score_activate, or with per_label (Infinity's /classify on a multi-label
 * model) and not raw, the sigmoid of each logit. */
void score_activate_labels(const float *logits, int32_t k, bool raw, bool per_label, float *out);
/* The first of n inputs (k logits each) whose activated scores are not all
 * finite (an infinite logit, a softmax over one: JSON cannot carry them),
 * -1 when none, -2 when out of memory. */
int32_t score_first_not_finite(const float *logits, int32_t n, int32_t k, bool raw, bool per_label);

#endif

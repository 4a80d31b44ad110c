/* score_request.h — one scoring request, whatever dialect it came in: the
 * canonical request every dialect's field table decodes into, the one path
 * from it to a job (score_request_job), and the one place where the scores
 * are post-processed for an answer (activation, order, top_n). A dialect
 * (score_tei.c, score_infinity.c, score_cohere.c, score_vllm.c) is a table,
 * a decode that fills the request and an answer writer. */
#ifndef ATTN_SCORE_REQUEST_H
#define ATTN_SCORE_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/api/embed_codec.h"
#include "server/api/fields.h"
#include "server/http/http.h"

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
    bool types_unused;       /* the model takes no type ids: a template's are dropped */
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

typedef struct score_dialect score_dialect;

typedef struct score_request {
    /* Read by the dialect's field table (fields.h), whose ctx is the
     * embed_api; the inputs are read further by its inputs function, null
     * included where a null is answered as a value of the wrong shape. */
    json_t *model;             /* echoed by the answers that name the model */
    json_t *query, *documents; /* a rerank's query and what it ranks (vLLM: text_1, text_2) */
    json_t *inputs;            /* texts or pairs to classify */
    json_t *truncate_to;       /* vLLM's truncate_prompt_tokens */
    json_t *unused;            /* fields taken for compatibility and not applied */
    bool raw;                  /* the logits, not their activation */
    bool ret;                  /* the documents returned beside their scores */
    bool truncate;             /* a long input cut, not refused (preset: the setting) */
    int direction;             /* embed_truncation: the end a cut takes */
    int64_t top_n;             /* the best this many answered; 0: all */
    /* Made from the fields (score_request_decode). */
    score_input *in; /* n pairs or texts into the body (membudget; freed after the job) */
    int32_t n;
    int32_t limit;                /* tokens an input; 0: the model's maximum */
    bool batch;                   /* a list of inputs, answered a list per input */
    const score_dialect *dialect; /* the answer's writer (a route may pick one by the body) */
} score_request;

/* A decoded request: the job the service runs, and what its answer needs. */
typedef struct score_job {
    embed_job e; /* first: what job_submit and the service see */
    const score_dialect *dialect;
    bool raw;
    bool per_label; /* a sigmoid per label, not a softmax over them */
    bool batch;
    int32_t top_n;     /* 0: all */
    json_t *documents; /* the texts to return (copies), else NULL; the model's
                          name to echo is e.model */
} score_job;

/* What a dialect asks of the model and of its answer (score_dialect.flags). */
enum {
    SCORE_RERANKER = 1u << 0,    /* the model must be a reranker (else any classifier); the
                                    route's default model is the first reranker */
    SCORE_TEI_ORDER = 1u << 1,   /* equal scores best first by the highest index, as TEI sorts
                                    (ascending, stable, reversed); else by the lowest */
    SCORE_PER_LABEL = 1u << 2,   /* on a multi-label model, the sigmoid of each label */
    SCORE_DOC_OBJECTS = 1u << 3, /* a rerank's documents may be {"text": string} too */
};

/* A client's API for scoring: its body's fields, how its inputs are read
 * from them, and its answer. */
struct score_dialect {
    const fld_table *fields; /* read into score_request; NULL: inputs reads the body */
    /* The inputs, after the fields; NULL: a rerank's query and each of its
     * documents, which come in the field named documents. */
    int (*inputs)(const score_api *s, const json_t *root, score_request *q, srv_refusal *r);
    const char *documents;
    unsigned flags; /* SCORE_* */
    http_error_shape errors;
    /* The answer to a job that ran; NULL when out of memory. */
    json_t *(*answer)(const score_api *s, const score_job *j);
};

extern const score_dialect score_tei_rerank, score_tei_predict, score_infinity_rerank,
    score_infinity_classify, score_cohere_rerank, score_vllm_score;

/* Reads root (an object) into q as q->dialect says. Returns SRV_OK or the
 * refusal's code; q->in is the caller's to free either way. */
int score_request_decode(const score_api *s, const json_t *root, score_request *q, srv_refusal *r);

/* The job of q, for a root (the body, for the model it names) decoded by
 * q->dialect: the model checked for the dialect's task, the inputs
 * tokenized (score_job_make), the answer's options and copies kept. NULL
 * with the refusal in r. */
score_job *score_request_job(const score_api *s, const score_request *q, const json_t *root,
                             srv_refusal *r);
/* score_job_release for job_submit. */
void score_job_release(void *j);

/* ---- the dialects' shared reading ----------------------------------------------------- */

/* q->in of n zeroed inputs; SRV_OK or SRV_EMEMORY. */
int score_inputs_new(score_request *q, size_t n, srv_refusal *r);

/* ---- post-processing and the answers' parts ------------------------------------------- */

typedef struct score_ranked {
    int32_t index;
    float score;
} score_ranked;

/* A rerank's results best first (the dialect's order), cut to top_n:
 * [{index, <score_key>: score, <doc_key>: document}] with the document when
 * returned, as {"text": document} when doc_object. NULL when out of memory. */
json_t *score_rerank_results(const score_job *j, const char *score_key, const char *doc_key,
                             bool doc_object);

/* Input i's [{score, label}], best first. */
json_t *score_labels(const score_api *s, const score_job *j, int32_t i);
/* Every input's, in input order. */
json_t *score_labels_all(const score_api *s, const score_job *j);

/* The sigmoid (or raw logit) of input i's one logit: a reranker's score. */
float score_one(const score_job *j, int32_t i);

/* The tokens the job ran; {prompt_tokens, total_tokens}; "<prefix>-" and
 * 32 hex digits, an answer's id as Infinity and vLLM give one. */
int64_t score_tokens(const score_job *j);
json_t *score_usage(const score_job *j);
json_t *score_answer_id(const char *prefix);

#endif

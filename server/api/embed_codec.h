/* embed_codec.h — what the embeddings endpoints (POST /v1/embeddings,
 * OpenAI; POST /embed and POST /tokenize, Text Embeddings Inference; and
 * the other dialects' routes) share: the job, the inputs' shapes, the
 * tokenizing, the vectors' one post-processing and their writing. The one
 * request every dialect fills, and its path to a job, are
 * embed_request.h's.
 *
 * Texts are tokenized before submission: the scheduler batches by token
 * count, so the count must be known at submit, and the tokenizer (millions
 * of tokens per second) costs far less than the forward pass it feeds.
 * Requests are decoded on the codec workers (http.h). One request with
 * n inputs is one scheduler request of n sequences; the inputs of every
 * embedding request in a batch run through one packed bert_forward (varlen,
 * no padding).
 *
 * Inputs. /v1/embeddings takes `input` as a string, an array of strings, an
 * array of token ids or an array of arrays of token ids. Token ids are
 * passed to the model exactly as given (no [CLS]/[SEP] added, never cut:
 * an array longer than the model's maximum is refused), as OpenAI treats
 * token input as already tokenized. `model` is accepted whatever it names
 * and echoed back (the service serves one model, as TEI does); absent, the
 * loaded model's name is echoed. /tokenize takes `inputs` as a string or
 * an array of strings; /embed (tei_dialect.c) also token ids, and arrays
 * mixing texts and id arrays (embed_inputs).
 *
 * Vectors. /v1/embeddings returns what the model defines (its Normalize
 * module, if any), cut to `dimensions` and renormalised when asked. /embed
 * returns L2-normalised vectors unless normalize is false, then the pooled
 * vector as pooling made it. Unknown fields are refused (400). */
#ifndef ATTN_EMBED_CODEC_H
#define ATTN_EMBED_CODEC_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/bert.h"
#include "model/encoder.h"
#include "model/tokenizer.h"
#include "server/api/embed_job.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/jwriter.h"
#include "server/work/job.h"
#include "server/work/scheduler.h"

/* The embeddings service that computes the jobs (work/embed_service.h): a
 * name only, so that the service, which reads the jobs, and this codec,
 * which makes them, do not include each other. */
typedef struct embed_service embed_service;

typedef struct embed_api {
    embed_service *svc;
    sched *sched;
    int kind; /* the runner's id of the embeddings service */
    const tok_tokenizer *tok;
    const encoder_info *model;
    const char *model_name;                 /* echoed when a request names none */
    int32_t max_batch_tokens;               /* the start-time ceiling */
    int32_t max_batch_requests;             /* likewise */
    bool truncate;                          /* the default of /embed's truncate */
    int32_t max_seq_length;                 /* where text is cut; 0: the model's */
    const char *model_aliases;              /* comma-separated other names of the model */
    bool accept_any_model;                  /* /v1/embeddings: any `model` (as TEI) */
    int64_t created;                        /* /v1/models' "created": start, Unix seconds */
    _Atomic int64_t max_inputs_per_request; /* reloadable */
    _Atomic int64_t request_timeout_ms;     /* reloadable */
    _Atomic int64_t max_document_tokens;    /* reloadable: chunking's bound */
    /* Several models in one process: each has its own embed_api, and every
     * one holds the list of all of them, in the configured order, so that a
     * route registered once finds the model a request names. group is this
     * model's index there and its jobs' scheduler group (their batches hold
     * no other model's). peers NULL: the one model. */
    uint32_t group;
    struct embed_api *const *peers;
    size_t npeers;
} embed_api;

void embed_job_free(embed_job *job);

/* Why a request was refused (errors.h). */
typedef srv_refusal embed_refusal;

/* SRV_OK when the served model embeds; otherwise SRV_ETASK (TEI's 424 for a
 * model that does not do the task) with the message in r. Every embedding
 * route calls it before reading its inputs or its chunking, so a classifier
 * is refused the same way whatever else the request asks. */
int embed_check_task(const embed_api *api, embed_refusal *r);

/* ---- finding the model a request names -------------------------------------------------
 * Every route finds its model here, whatever its module: the peers arrays
 * of embed_api, compat_api and score_api all hold the served models in the
 * same order, so an index found here picks the same model in each. */

/* The served model name[0, len) names (its name or one of its aliases):
 * its index in the models' order (api->peers; 0, api itself, when api
 * serves alone), or -1 when it names none. */
int embed_model_find(const embed_api *api, const char *name, size_t len);

/* The index in the models' order of the model a request with body root
 * goes to: the one its `model` names, else dflt (the route's own model's
 * group, or a route's default such as the first reranker). An unknown
 * name goes to dflt too, whose embed_check_model refuses it. */
uint32_t embed_route_index(const embed_api *api, const json_t *root, uint32_t dflt);

/* Routes req to the model root names: returns that model's embed_api and
 * makes it the context of req's resumed function (http_set_ctx), or api
 * when root names no other served model. */
embed_api *embed_api_route(http_request *req, embed_api *api, const json_t *root);

/* A request's `model` field, checked the same way on every route that
 * reads it: absent, null, the name of api's model or one of its aliases
 * (any string under accept_any_model) is SRV_OK; a value that is not a
 * string is 400, an unknown name embed_unknown_model's 404. */
int embed_check_model(const embed_api *api, const json_t *model, embed_refusal *r);

/* The 404 for name, which no served model answers to: model_not_found,
 * naming the served models. Returns SRV_ENOTFOUND. */
int embed_unknown_model(const embed_api *api, const char *name, embed_refusal *r);
/* job moved into a struct of size bytes that begins with it (a route's
 * answer options kept beside the job), the rest zeroed: the new address,
 * or NULL with job released and the refusal in r. Before submission only. */
embed_job *embed_job_grow(embed_job *job, size_t size, embed_refusal *r);
/* What job holds of the request-memory budget. */
size_t embed_job_bytes(const embed_job *job);
/* embed_job_free for job_submit and http_set_user (job is an embed_job). */
void embed_job_release(void *job);

/* A decoded job's inputs: returns n and sets *cu (n + 1 token offsets into
 * *ids) and *ids (cu[n] token ids). */
int32_t embed_job_inputs(const embed_job *job, const int32_t **cu, const int32_t **ids);

/* /tokenize's answer for a request's JSON object (root is not stolen): the
 * array of token arrays, or NULL with the SRV_E* code in *err and a message
 * in msg. */
json_t *embed_api_tokens(const embed_api *api, json_t *root, int *err, char *msg, size_t msg_len);

/* ---- truncation, as sentence-transformers does it ---------------------------------- */

/* Which end of a long input truncation cuts (TEI's truncation_direction). */
typedef enum embed_truncation { EMBED_TRUNCATE_RIGHT, EMBED_TRUNCATE_LEFT } embed_truncation;

/* Which inputs a dialect takes, and how its refusals word them. */
typedef enum embed_inputs {
    EMBED_INPUTS_TEXTS,  /* a string or an array of non-empty strings */
    EMBED_INPUTS_OPENAI, /* also token ids, or an array of arrays of them (one kind a request) */
    /* TEI's and llama.cpp's: a string, token ids, or an array mixing strings
     * and id arrays; an empty string is a text ([CLS] [SEP]). */
    EMBED_INPUTS_MIXED,
} embed_inputs;

/* Checks the shape of the inputs `in` (the body's `field`) as grammar
 * takes them, and the count against max_inputs_per_request: sets *n and
 * *list, the array of inputs, or NULL when `in` itself is the one input.
 * The mixed grammar's inputs are checked one by one as they are read
 * (embed_request.c). Returns SRV_OK or refuses. */
int embed_inputs_shape(const embed_api *api, const char *field, json_t *in, embed_inputs grammar,
                       int32_t *n, json_t **list, embed_refusal *r);

/* TEI's truncation_direction, as every route that imitates TEI reads it:
 * "Right" or "Left" (TEI's spelling) or the same in lower case, into an int
 * (embed_truncation) at offset at; absent or null is Right. */
extern const fld_choice embed_truncation_choices[];
#define EMBED_TRUNCATION_MSG "truncation_direction must be \"Left\" or \"Right\""
#define EMBED_TRUNCATION_ROW(at)                                                                   \
    {                                                                                              \
        "truncation_direction", FLD_ENUM, 0, (at),                                                 \
            .dflt = EMBED_TRUNCATE_RIGHT, .choices = embed_truncation_choices,                     \
            .msg = EMBED_TRUNCATION_MSG, .type_msg = EMBED_TRUNCATION_MSG                          \
    }

/* The rows every dialect that takes `model` or `dimensions` shares; the
 * table's ctx is the embed_api. A model is checked as embed_check_model
 * does; dimensions keep 1..C of the model's C. */
int embed_model_check(const void *api, const json_t *model, embed_refusal *r);
void embed_dimension_bounds(const void *api, int64_t *lo, int64_t *hi);
#define EMBED_MODEL_ROW(at)                                                                        \
    { "model", FLD_STRING, 0, (at), .param = "model", .check = embed_model_check }
#define EMBED_DIMENSIONS_ROW(at)                                                                   \
    {                                                                                              \
        "dimensions", FLD_INT, 0, (at), .bounds = embed_dimension_bounds,                          \
                                        .range = FLD_RANGE_MODEL, .param = "dimensions"            \
    }

/* The most tokens of one text input, special tokens included: the
 * max_seq_length setting, or the model's (sentence_bert_config.json). */
int32_t embed_max_seq_length(const embed_api *api);

/* The longest token-id input: what the position embeddings allow, within
 * one batch (a long-context model may serve with max_batch_tokens below its
 * max_position_embeddings, as long as texts are cut below it). */
int32_t embed_max_id_length(const embed_api *api);

/* Refuses input i when it is an empty text (len 0), as TEI's tokenizer
 * refuses an empty input (its Empty error, 400) and OpenAI does: every route
 * checks its texts here before any prompt is prepended. A text of spaces is
 * a text ([CLS] [SEP]), as TEI tokenizes it. Returns SRV_OK or SRV_EEMPTY. */
int embed_check_text(size_t i, size_t len, embed_refusal *r);

/* Tokenizes text[0, len) as sentence-transformers does for this model:
 * [CLS] pieces [SEP], at most embed_max_seq_length(api) tokens. A longer
 * input is cut on side dir when truncate (the special tokens stay), and is
 * TOK_ETOOLONG otherwise. ids holds embed_max_seq_length(api) ints. Returns
 * a TOK_* code, with *n (tokens written), *n_full (tokens of the whole
 * input) and, on TOK_EUTF8, *error_at. Cutting on the left tokenizes the
 * whole input first, into arrays charged to the request-memory budget
 * (TOK_ENOMEM when it refuses them). */
int embed_tokenize(const embed_api *api, const char *text, size_t len, bool truncate,
                   embed_truncation dir, int32_t *ids, int32_t *n, int32_t *n_full,
                   size_t *error_at);

/* No p-norm at answer time (embed_request's p_norm): llama.cpp's -1. */
#define EMBED_PNORM_NONE (-1)

/* The one post-processing of vector v (C floats, as the batch left it) of
 * a finished job, in place: cut to the job's dimensions (renormalised when
 * it normalises), then its p-norm. Returns the floats to answer. Called
 * once a vector. */
size_t embed_vector_finish(const embed_job *job, float *v, int C);

/* One vector of d floats in the job's encoding: a JSON array, or for
 * OpenAI's encoding_format "base64" a string of their little-endian bytes. */
void embed_write_vector(jwriter *w, const embed_job *job, const float *v, size_t d);

/* OpenAI's list up to its data array's first item: {"object":"list","data":[ */
void embed_write_openai_head(jwriter *w);

/* OpenAI's item i up to its vector: {"object":"embedding","index":i,"embedding": */
void embed_write_openai_item(jwriter *w, int32_t i);

/* OpenAI's list from the end of its data array on: "],", the model echoed,
 * the usage, "}". */
void embed_write_openai_tail(jwriter *w, const embed_job *job);

/* The answer's list of vectors opened and closed in the job's dialect:
 * OpenAI's list object (embed_write_openai_head and _tail, the model and
 * usage echoed), or the bare JSON array the other dialects answer. */
void embed_write_list_head(jwriter *w, const embed_job *job);
void embed_write_list_tail(jwriter *w, const embed_job *job);

/* About the bytes a finished job's answer takes (C: the model's output
 * size): what to reserve at once, so that the buffer seldom grows. */
size_t embed_answer_hint(const embed_job *job, int C);

#endif

/* embed_api.h — the embeddings endpoints: POST /v1/embeddings (OpenAI),
 * POST /embed (Text Embeddings Inference) and POST /tokenize (TEI).
 *
 * Texts are tokenized on the I/O thread, before submission: the scheduler
 * batches by token count, so the count must be known at submit, and the
 * tokenizer (millions of tokens per second) costs far less than the
 * forward pass it feeds. One request with n inputs is one scheduler
 * request of n sequences; the inputs of every embedding request in a batch
 * run through one packed engine forward (varlen, no padding).
 *
 * Inputs. /v1/embeddings takes `input` as a string, an array of strings, an
 * array of token ids or an array of arrays of token ids. Token ids are
 * passed to the model exactly as given (no [CLS]/[SEP] added, never cut:
 * an array longer than the model's maximum is refused), as OpenAI treats
 * token input as already tokenized. `model` is accepted whatever it names
 * and echoed back (the service serves one model, as TEI does); absent, the
 * loaded model's name is echoed. /embed and /tokenize take `inputs` as a
 * string or an array of strings.
 *
 * Vectors. /v1/embeddings returns what the model defines (its Normalize
 * module, if any), cut to `dimensions` and renormalised when asked. /embed
 * returns L2-normalised vectors unless normalize is false, then the pooled
 * vector as pooling made it. Unknown fields are refused (400). */
#ifndef ATTN_EMBED_API_H
#define ATTN_EMBED_API_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attention_api.h"
#include "engine.h"
#include "http.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "model/tokenizer.h"
#include "scheduler.h"

/* ---- the compute side: runs on the scheduler's compute thread ------------------- */

typedef struct embed_service embed_service;

/* Allocates, once, the packed ids, cu_seqlens and output of the largest
 * batch. Every batch runs as one forward of engine (which owns the model,
 * its workspace and the attention backend in force, read once per batch, so
 * a backend swap applies to the model and the attention endpoint alike).
 * Returns NULL with a message in err. */
embed_service *embed_service_create(srv_engine *engine, int32_t max_batch_tokens,
                                    int32_t max_batch_requests, char *err, size_t err_len);
void embed_service_destroy(embed_service *svc);

/* Bytes allocated by embed_service_create (the engine's workspace is the
 * engine's: engine_memory_of). */
size_t embed_service_workspace_bytes(const embed_service *svc);

/* Runs the embedding requests of a batch (batch_run's part for them). */
int embed_service_run_batch(const sched_batch *b, void *ctx);

/* ---- shadow verification and trace (issue 7 §2, §3) ---- */
struct verifier;

/* Batches sampled by v (may be NULL: off) have the attention of one layer,
 * drawn at random, captured for checking. Set before serving. */
void embed_service_set_verifier(embed_service *svc, struct verifier *v);

/* What the last run_batch did, for the trace. */
typedef struct embed_batch_info {
    int32_t sequences, tokens; /* 0 when no forward ran */
    bert_stage_ns stages;      /* of its forward */
    int verified_layer;        /* -1: not captured */
} embed_batch_info;
const embed_batch_info *embed_service_last_batch(const embed_service *svc);

/* ---- the HTTP side: runs on the I/O thread ----------------------------------------- */

typedef struct embed_api {
    embed_service *svc;
    sched *sched;
    const tok_tokenizer *tok;
    const bert_config *model;
    const char *model_name;                 /* echoed when a request names none */
    int32_t max_batch_tokens;               /* the start-time ceiling */
    int32_t max_batch_requests;             /* likewise */
    bool truncate;                          /* the default of /embed's truncate */
    _Atomic int64_t max_inputs_per_request; /* reloadable */
    _Atomic int64_t request_timeout_ms;     /* reloadable */
} embed_api;

/* Decoding on its own: the routes call these, and tests/fuzz drives them
 * with arbitrary bodies. They read tok, model, model_name, truncate and the
 * limits of api, never svc or sched. */
typedef enum embed_route { EMBED_ROUTE_OPENAI, EMBED_ROUTE_TEI } embed_route;
typedef struct embed_job embed_job;

/* Checks, tokenizes and decodes a request's JSON object as /v1/embeddings
 * (EMBED_ROUTE_OPENAI) or /embed (EMBED_ROUTE_TEI) does. Returns the job,
 * freed with embed_job_free, or NULL with the SRV_E* code in *err and a
 * message in msg. */
embed_job *embed_api_decode(const embed_api *api, embed_route route, json_t *root, int *err,
                            char *msg, size_t msg_len);
void embed_job_free(embed_job *job);

/* A decoded job's inputs: returns n and sets *cu (n + 1 token offsets into
 * *ids) and *ids (cu[n] token ids). */
int32_t embed_job_inputs(const embed_job *job, const int32_t **cu, const int32_t **ids);

/* /tokenize's answer for a request's JSON object (root is not stolen): the
 * array of token arrays, or NULL with the SRV_E* code in *err and a message
 * in msg. */
json_t *embed_api_tokens(const embed_api *api, json_t *root, int *err, char *msg, size_t msg_len);

/* Route functions for http_route (ctx is the embed_api). The two embedding
 * routes park and share embed_api_resumed; /tokenize answers at once. */
int embed_api_openai(http_request *req, void *ctx);
int embed_api_tei(http_request *req, void *ctx);
int embed_api_resumed(http_request *req, void *ctx);
int embed_api_tokenize(http_request *req, void *ctx);

#endif

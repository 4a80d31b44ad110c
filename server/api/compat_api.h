/* compat_api.h — the routes and shapes of the embedding servers clients
 * already speak, beside /v1/embeddings, one dialect a file (tei_dialect.c,
 * llama_dialect.c, infinity_dialect.c) over what this module shares:
 *
 *   Text Embeddings Inference: POST /embed (and POST / and POST /invocations,
 *     TEI's route for an embedding model and SageMaker's), POST /similarity,
 *     POST /decode, POST /tokenize (TEI's shape when the body has `inputs`);
 *     errors in TEI's {"error", "error_type"}.
 *   Infinity: POST /embeddings (OpenAI's shape), GET /models.
 *   llama.cpp server: POST /embedding, POST /tokenize (its shape when the
 *     body has `content`), POST /detokenize.
 *
 * Every embedding route reads its body with its own field table into the one
 * embeddings request (embed_request.h), so the inputs, the limits, the
 * memory budget and the batching are the ones /v1/embeddings has, and
 * answers from the job's vectors in its own shape. */
#ifndef ATTN_COMPAT_API_H
#define ATTN_COMPAT_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api/embed_codec.h"
#include "server/api/embed_request.h"
#include "server/api/errors.h"
#include "server/http/http.h"
#include "server/http/routes.h"

typedef struct compat_api {
    embed_api *eapi; /* the tokenizer, the model, the scheduler and the limits */
    /* config_sentence_transformers.json: prompt name → text (NULL: none),
     * and the text of its default_prompt_name (NULL: none). */
    json_t *prompts;
    const char *default_prompt;
    int64_t created; /* /models' `created`: when the model was loaded */
    /* Several models: every model's compat_api in the configured order (as
     * eapi->peers), so /models lists them all and a request naming a model
     * is answered by that one; no_root: POST / and /invocations belong to
     * another model's task. NULL / false: one model. */
    struct compat_api *const *peers;
    bool no_root;
} compat_api;

/* Reads the model directory's prompts. Returns 0, or -1
 * with a message in err (a malformed config_sentence_transformers.json, or a
 * default_prompt_name that names no prompt). */
int compat_api_init(compat_api *c, embed_api *eapi, const char *model_dir, char *err,
                    size_t err_len);
void compat_api_free(compat_api *c);

/* Registers the routes above (taking POST /tokenize and POST /embed from the
 * embeddings module). Returns 0, or -1 (routes_add). */
int compat_api_register(compat_api *c, routes *t);

/* ---- what the dialect files share ------------------------------------------------------ */

/* The prompt's text for prompt_name (a string, null or absent: the model's
 * default prompt), as TEI: a name the model's configuration does not have
 * is a 422. SRV_OK or refuses. */
int compat_prompt(const compat_api *c, const json_t *name, const char **text, srv_refusal *r);

/* One JSON array of token ids as text (tok_decode: the model's tokenizer's
 * decoder, special tokens dropped when skip_special), or NULL with the
 * refusal: an id outside the vocabulary is a 422. */
json_t *compat_decode_ids(const compat_api *c, const json_t *ids, bool skip_special,
                          srv_refusal *r);

/* An embedding route: its body parsed, routed to the model its `model`
 * names where by_model and several models are served, read by fill into
 * the one request (fill may keep an array it made in *hold, freed after),
 * its job made by the one path (embed_request_job) and submitted, else the
 * refusal answered in the route's error shape. */
typedef int (*compat_fill)(const compat_api *c, json_t *root, embed_request *e, json_t **hold,
                           srv_refusal *r);
int compat_embed_route(http_request *req, void *ctx, compat_fill fill, bool by_model);

/* TEI's /embed body (root not stolen) as a job, or NULL with the refusal:
 * what the route submits, and what tests/fuzz drives with arbitrary bodies
 * (it reads c's prompts and c->eapi's tokenizer, model and limits only). */
embed_job *tei_embed_decode(const compat_api *c, json_t *root, srv_refusal *r);

/* An embedding route's resumed function: the job's timing stamped, a
 * failed job answered as its error, a finished one by answer (its
 * dialect's shape). */
typedef int (*compat_answer)(http_request *req, const compat_api *c, embed_job *job);
int compat_resumed(http_request *req, void *ctx, compat_answer answer);

/* A route answered at once from its body (root not stolen): answer's JSON,
 * or its refusal (the budget's when it refused). */
typedef json_t *(*compat_json)(http_request *req, const compat_api *c, json_t *root,
                               srv_refusal *r);
int compat_json_route(http_request *req, void *ctx, compat_json answer);

/* A JSON answer (stolen; NULL: out of memory, the budget's error when it
 * refused). */
int compat_reply(http_request *req, json_t *out);

/* Each dialect's routes (tei_dialect.c, llama_dialect.c,
 * infinity_dialect.c), registered by compat_api_register. Return 0 or -1. */
int tei_dialect_register(compat_api *c, routes *t);
int llama_dialect_register(compat_api *c, routes *t);
int infinity_dialect_register(compat_api *c, routes *t);

/* llama.cpp's /tokenize answer for a body with `content` (root not
 * stolen), or NULL with the refusal. */
json_t *llama_tokens(const compat_api *c, json_t *root, srv_refusal *r);

#endif

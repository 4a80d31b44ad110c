/* embed_api.h — the embeddings routes: POST /v1/embeddings (OpenAI),
 * POST /embed (Text Embeddings Inference) and POST /tokenize (TEI). What
 * they accept and answer is embed_codec.h's; the compute is
 * embed_service.h's. */
#ifndef ATTN_EMBED_API_H
#define ATTN_EMBED_API_H

#include "batch.h"
#include "embed_codec.h"
#include "embed_service.h"
#include "http.h"
#include "routes.h"

/* Route functions for http_route (ctx is the embed_api). The two embedding
 * routes park and share embed_api_resumed; /tokenize answers at once. */
int embed_api_openai(http_request *req, void *ctx);
int embed_api_tei(http_request *req, void *ctx);
int embed_api_resumed(http_request *req, void *ctx);
int embed_api_tokenize(http_request *req, void *ctx);
/* GET /v1/models and GET /v1/models/{id}: the served model and its aliases
 * (model_aliases) in OpenAI's shapes; another id is 404 model_not_found. */
int embed_api_models(http_request *req, void *ctx);
int embed_api_model(http_request *req, void *ctx);

/* Registers the embeddings service as a kind with runner (api->kind is set)
 * and the routes above in t. api->svc must be set. Returns 0, or -1 when a
 * table is full or a route is taken. */
int embed_api_register(embed_api *api, batch_runner *runner, routes *t);

#endif

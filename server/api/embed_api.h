/* embed_api.h — the OpenAI embeddings route, POST /v1/embeddings, and the
 * embeddings service's registration. What it accepts and answers is
 * embed_codec.h's; the compute is embed_service.h's. TEI's, Infinity's and
 * llama.cpp's routes (compat_api.h) submit jobs of the same kind. */
#ifndef ATTN_EMBED_API_H
#define ATTN_EMBED_API_H

#include "server/api/embed_codec.h"
#include "server/http/http.h"
#include "server/http/routes.h"
#include "server/work/batch.h"
#include "server/work/embed_service.h"

/* Route functions for http_route (ctx is the embed_api): the route parks,
 * embed_api_resumed answers. */
int embed_api_openai(http_request *req, void *ctx);
int embed_api_resumed(http_request *req, void *ctx);
/* embed_api_openai's decoding and submission of root, a body already read
 * (http_work_body) and then freed here: for a route that adjusts OpenAI's
 * body before it decodes as OpenAI's (Infinity's /embeddings). */
int embed_api_openai_root(http_request *req, embed_api *api, json_t *root);
/* GET /v1/models and GET /v1/models/{id}: the served model and its aliases
 * (model_aliases) in OpenAI's shapes; another id is 404 model_not_found. */
int embed_api_models(http_request *req, void *ctx);
int embed_api_model(http_request *req, void *ctx);

/* What every embeddings route's answer carries about how job ran: queue and
 * compute time, the attention backend, the engine and its precision
 * (x-queue-time-ms ... x-precision). Also counts the job as this request's
 * memory, so a budget refusal while encoding tells 413 from 503. Called
 * first by each route's resume. */
void embed_api_stamp(http_request *req, const embed_api *api, const embed_job *job);

/* Registers the embeddings service as a kind with runner (api->kind is set)
 * and the routes above in t. api->svc must be set. Returns 0, or -1 when a
 * table is full or a route is taken. */
int embed_api_register(embed_api *api, batch_runner *runner, routes *t);

/* Only the kind, for a model whose routes another model's embed_api
 * registered (several models). Returns 0 or -1. */
int embed_api_add_kind(embed_api *api, batch_runner *runner);

#endif

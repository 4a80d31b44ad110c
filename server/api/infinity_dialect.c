/* infinity_dialect.c — Infinity's routes: POST /embeddings (OpenAI's body and
 * answer, with what Infinity's own client sends beside it taken as Infinity
 * takes it) and GET /models, every served
 * model with its capability. Errors in OpenAI's shape. */
#include "server/api/compat_api.h"
#include "server/api/embed_api.h"

#include <string.h>

#include "server/api/errors.h"

/* Infinity's /embeddings is OpenAI's body with what Infinity's own client
 * (infinity_client) always sends beside it, as Infinity's server takes it:
 * `modality` "text" (another is refused: the served model embeds text),
 * `dimensions` 0 for every dimension, and the model name
 * "default/not-specified" for the route's own model. Each is taken out of
 * root, which then decodes as OpenAI's. */
static int infinity_fields(json_t *root, embed_refusal *r) {
    const json_t *modality = json_object_get(root, "modality");
    if (modality && !json_is_null(modality) &&
        !(json_is_string(modality) && strcmp(json_string_value(modality), "text") == 0)) {
        r->param = "modality";
        return refuse(r, SRV_EINVALID, "modality must be \"text\": the served model embeds text");
    }
    const json_t *dims = json_object_get(root, "dimensions");
    const json_t *model = json_object_get(root, "model");
    if (json_is_integer(dims) && json_integer_value(dims) == 0)
        json_object_del(root, "dimensions");
    if (json_is_string(model) && strcmp(json_string_value(model), "default/not-specified") == 0)
        json_object_del(root, "model");
    json_object_del(root, "modality");
    return SRV_OK;
}

static int infinity_embeddings(http_request *req, void *ctx) {
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    embed_refusal r = {0};
    if (json_is_object(root) && infinity_fields(root, &r) != SRV_OK) {
        http_body_json_free(req, root);
        return http_reply_refusal(req, &r);
    }
    return embed_api_openai_root(req, ctx, root);
}

/* Infinity's capability of a model: a one-label classifier is a reranker
 * ("rerank", as Infinity says), another classifier "classify". One model
 * is listed as it always was: "embed", whatever its task. */
static const char *infinity_capability(const compat_api *c) {
    const encoder_info *m = c->eapi->model;
    if (!c->peers || m->task != ENCODER_TASK_CLASSIFY)
        return "embed";
    return m->num_labels == 1 ? "rerank" : "classify";
}

/* owned_by "infinity", the one value Infinity's server answers and its
 * client (infinity_client's ModelInfoOwnedBy) accepts. */
static json_t *infinity_model(const compat_api *c) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[s], s:{}}", "id", c->eapi->model_name, "object",
                     "model", "created", (json_int_t)c->created, "owned_by", "infinity", "backend",
                     "attnserve", "capabilities", infinity_capability(c), "stats");
}

/* Every served model, as Infinity lists them. */
static int infinity_models(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    json_t *data = json_array();
    const size_t n = c->peers ? c->eapi->npeers : 1;
    for (size_t i = 0; data && i < n; i++)
        if (json_array_append_new(data, infinity_model(c->peers ? c->peers[i] : c)) != 0) {
            json_decref(data);
            data = NULL;
        }
    return compat_reply(req, data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL);
}

int infinity_dialect_register(compat_api *c, routes *t) {
    const http_route mine[] = {
        {"POST", "/embeddings", true, HTTP_AUTH_KEY, infinity_embeddings, embed_api_resumed,
         c->eapi, HTTP_ERRORS_OPENAI},
        {"GET", "/models", false, HTTP_AUTH_KEY, infinity_models, NULL, c, HTTP_ERRORS_OPENAI},
    };
    return routes_add_all(t, mine, sizeof mine / sizeof mine[0]);
}

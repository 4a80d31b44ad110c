/* infinity_dialect.c — Infinity's routes: POST /embeddings (OpenAI's body and
 * answer, /v1/embeddings' route function) and GET /models, every served
 * model with its capability. Errors in OpenAI's shape. */
#include "server/api/compat_api.h"
#include "server/api/embed_api.h"

/* Infinity's capability of a model: a one-label classifier is a reranker
 * ("rerank", as Infinity says), another classifier "classify". One model
 * is listed as it always was: "embed", whatever its task. */
static const char *infinity_capability(const compat_api *c) {
    const encoder_info *m = c->eapi->model;
    if (!c->peers || m->task != ENCODER_TASK_CLASSIFY)
        return "embed";
    return m->num_labels == 1 ? "rerank" : "classify";
}

static json_t *infinity_model(const compat_api *c) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[s], s:{}}", "id", c->eapi->model_name, "object",
                     "model", "created", (json_int_t)c->created, "owned_by", "attnserve", "backend",
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
        {"POST", "/embeddings", true, HTTP_AUTH_KEY, embed_api_openai, embed_api_resumed, c->eapi,
         HTTP_ERRORS_OPENAI},
        {"GET", "/models", false, HTTP_AUTH_KEY, infinity_models, NULL, c, HTTP_ERRORS_OPENAI},
    };
    return routes_add_all(t, mine, sizeof mine / sizeof mine[0]);
}

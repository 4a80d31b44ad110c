/* embed_api.c — the OpenAI embeddings route, POST /v1/embeddings (the
 * routes of TEI, Infinity and llama.cpp are compat_api.c's). A route decodes (embed_codec.h),
 * submits the job (job.h) and, once resumed, encodes the answer; the embeddings service
 * (embed_service.h) computes it in the scheduler's batches. */
#include "server/api/embed_api.h"

#include <stdio.h>
#include <string.h>

#include "server/api/embed_chunk.h"
#include "server/api/embed_dialect.h"
#include "server/api/errors.h"
#include "server/config.h"
#include "server/work/membudget.h"

int embed_api_openai_root(http_request *req, embed_api *api, json_t *root) {
    api = embed_api_route(req, api, root);
    embed_refusal r;
    embed_job *job = embed_openai_decode(api, root, &r);
    http_body_json_free(req, root);
    if (!job)
        return http_reply_refusal(req, &r);

    return embed_submit(req, api, job);
}

int embed_api_openai(http_request *req, void *ctx) {
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    return embed_api_openai_root(req, ctx, root);
}

void embed_api_stamp(http_request *req, const embed_api *api, const embed_job *job) {
    /* The job is this request's too: a refusal while any route encodes its
     * answer is a 413 when job and answer together could never fit. */
    membudget_note_held(embed_job_bytes(job));
    http_set_timing(req, job_queue_ms(&job->base), job_compute_ms(&job->base),
                    job->base.ran ? job->base.ran->name : NULL);
    if (job->base.ran)
        http_set_engine(req, srv_engine_name(embed_service_engine(api->svc)),
                        srv_engine_precision(embed_service_engine(api->svc)));
}

int embed_api_resumed(http_request *req, void *ctx) {
    const embed_api *api = ctx;
    embed_job *job = http_user(req);
    embed_api_stamp(req, api, job);
    if (job->base.err != SRV_OK)
        return http_reply_error(req, job->base.err, "%s", job->base.why);
    if (!job->base.ran)
        return http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
    const int C = api->model->output_dim;
    jwriter w;
    jw_init(&w, embed_answer_hint(job, C));
    embed_encode(job, C, &w);
    return jw_reply(req, 200, &w);
}

/* ---- GET /v1/models, GET /v1/models/{id} (OpenAI) ------------------------------------ */

static json_t *model_object(const embed_api *api, const char *id, size_t len) {
    return json_pack("{s:s%, s:s, s:I, s:s}", "id", id, len, "object", "model", "created",
                     (json_int_t)api->created, "owned_by", "attnserve");
}

/* One model's name and each alias appended to data; -1 when out of memory. */
static int list_model(const embed_api *api, json_t *data) {
    if (json_array_append_new(data, model_object(api, api->model_name, strlen(api->model_name))))
        return -1;
    size_t l;
    for (const char *p = api->model_aliases, *a; (a = config_names_next(&p, ',', &l));)
        if (l && json_array_append_new(data, model_object(api, a, l)) != 0)
            return -1;
    return 0;
}

/* Every served model and each alias, as OpenAI lists models. */
static json_t *models_list(const embed_api *api) {
    json_t *data = json_array();
    int rc = data ? 0 : -1;
    if (!api->peers)
        rc = rc ? rc : list_model(api, data);
    for (size_t i = 0; api->peers && i < api->npeers && rc == 0; i++)
        rc = list_model(api->peers[i], data);
    if (rc) {
        json_decref(data);
        return NULL;
    }
    return json_pack("{s:s, s:o}", "object", "list", "data", data);
}

/* out (stolen), or NULL's error: the budget's when it refused. */
static int reply(http_request *req, json_t *out) {
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory");
    return http_reply_json(req, 200, out);
}

int embed_api_models(http_request *req, void *ctx) {
    return reply(req, models_list(ctx));
}

int embed_api_model(http_request *req, void *ctx) {
    const embed_api *api = ctx;
    const char *id = strrchr(http_path(req), '/') + 1; /* the route ends in a slash and a star */
    const int i = embed_model_find(api, id, strlen(id));
    if (i < 0) {
        embed_refusal r = {0};
        embed_unknown_model(api, id, &r);
        return http_reply_error_at(req, r.err, r.param, r.code, "%s", r.msg);
    }
    api = api->peers ? api->peers[i] : api;
    return reply(req, model_object(api, id, strlen(id)));
}

int embed_api_add_kind(embed_api *api, batch_runner *runner) {
    const batch_kind kind = {.name = "embed",
                             .run = embed_service_run_batch,
                             .trace = embed_service_trace,
                             .ctx = api->svc};
    return (api->kind = batch_runner_add_kind(runner, &kind)) < 0 ? -1 : 0;
}

int embed_api_register(embed_api *api, batch_runner *runner, routes *t) {
    if (embed_api_add_kind(api, runner) != 0)
        return -1;
    const http_route mine[] = {
        {"POST", "/v1/embeddings", true, HTTP_AUTH_KEY, embed_api_openai, embed_api_resumed, api,
         HTTP_ERRORS_OPENAI},
        {"GET", "/v1/models", false, HTTP_AUTH_KEY, embed_api_models, NULL, api,
         HTTP_ERRORS_OPENAI},
        {"GET", "/v1/models/*", false, HTTP_AUTH_KEY, embed_api_model, NULL, api,
         HTTP_ERRORS_OPENAI},
    };
    return routes_add_all(t, mine, sizeof mine / sizeof mine[0]);
}

/* embed_api.c — the OpenAI embeddings route, POST /v1/embeddings (the
 * routes of TEI, Infinity and llama.cpp are compat_api.c's). A route decodes (embed_codec.h),
 * submits the job (job.h) and, once resumed, encodes the answer; the embeddings service
 * (embed_service.h) computes it in the scheduler's batches. */
#include "embed_api.h"

#include <stdio.h>

#include "errors.h"
#include "membudget.h"

static int handle(http_request *req, embed_api *api, embed_route route) {
    if (http_draining(req))
        return http_reply_error(req, SRV_EUNAVAILABLE, "server is draining");
    int answered = HTTP_FAIL;
    json_t *root = http_body_json(req, &answered);
    if (!root)
        return answered;
    int err = SRV_OK;
    char msg[256];
    embed_job *job = embed_api_decode(api, route, root, &err, msg, sizeof msg);
    http_body_json_free(req, root);
    if (!job && membudget_refused()) /* the job did not fit the request-memory budget */
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!job)
        return http_reply_error(req, err, "%s", msg);

    return job_submit(req, &job->base, api->sched, atomic_load(&api->request_timeout_ms),
                      embed_job_release);
}

int embed_api_openai(http_request *req, void *ctx) {
    return handle(req, ctx, EMBED_ROUTE_OPENAI);
}

void embed_api_stamp(http_request *req, const embed_api *api, const embed_job *job) {
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
    const int C = api->model->hidden_size;
    json_t *out = embed_encode(job, C);
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory encoding the embeddings");
    return http_reply_json(req, 200, out);
}

int embed_api_register(embed_api *api, batch_runner *runner, routes *t) {
    const batch_kind kind = {.name = "embed",
                             .run = embed_service_run_batch,
                             .trace = embed_service_trace,
                             .ctx = api->svc};
    if ((api->kind = batch_runner_add_kind(runner, &kind)) < 0)
        return -1;
    const http_route mine[] = {
        {"POST", "/v1/embeddings", true, HTTP_AUTH_KEY, embed_api_openai, embed_api_resumed, api,
         HTTP_ERRORS_OPENAI},
    };
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (routes_add(t, mine[i]) != 0)
            return -1;
    return 0;
}

/* score_api.c — the rerank and classification routes (score_api.h): each
 * route's body decoded by its dialect into one canonical request
 * (score_request.h), made a job, and answered in the dialect's shape.
 * Decoding (tokenization) and answers run on the codec workers (http.h); the
 * forward runs in the embeddings service's batches as the "score" kind. */
#include "server/api/score_api.h"

#include <stdio.h>

#include "server/api/embed_api.h"
#include "server/api/errors.h"
#include "server/api/score_request.h"
#include "server/work/membudget.h"

typedef embed_refusal refusal;

/* POST /rerank: TEI's body has `texts`, Infinity's (Cohere's) `documents`;
 * neither has the other's, so the body says which API is calling, and the
 * answer and its errors take that API's shape. */
static int rerank_either(const score_api *s, const json_t *root, score_request *q, refusal *r) {
    const bool tei = json_object_get(root, "texts") != NULL;
    const bool inf = json_object_get(root, "documents") != NULL;
    if (tei && inf)
        return refuse(r, SRV_EBADREQUEST,
                      "the body has both `texts` (Text Embeddings Inference) and `documents` "
                      "(Infinity, Cohere): send one");
    q->dialect = inf ? &score_infinity_rerank : &score_tei_rerank;
    return score_request_decode(s, root, q, r);
}

static const score_dialect either = {
    .inputs = rerank_either, .flags = SCORE_RERANKER, .errors = HTTP_ERRORS_TEI};

/* The model that answers: the one root's `model` names, else for a
 * reranker's dialect the first reranker, else the route's own; made the
 * context of the resumed function when it is not the route's own. */
static score_api *route_model(http_request *req, score_api *s, const json_t *root,
                              const score_dialect *d) {
    if (!s->peers)
        return s;
    const score_api *dflt = d->flags & SCORE_RERANKER && s->rerank ? s->rerank : s;
    score_api *to = s->peers[embed_route_index(s->eapi, root, dflt->eapi->group)];
    if (to != s)
        http_set_ctx(req, to);
    return to;
}

/* Every scoring route, on a codec worker: the body decoded by the route's
 * dialect into the canonical request, and that made a job. */
static int handle(http_request *req, score_api *s, const score_dialect *d) {
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    s = route_model(req, s, root, d);
    refusal r = {0};
    score_request q = {.truncate = s->eapi->truncate, .dialect = d};
    score_job *j = NULL;
    if (!json_is_object(root))
        refuse(&r, SRV_EBADREQUEST, "the body must be a JSON object");
    else if (score_request_decode(s, root, &q, &r) == SRV_OK)
        j = score_request_job(s, &q, root, &r);
    /* The dialect the body picked answers, its errors included. */
    http_set_error_shape(req, q.dialect->errors);
    membudget_free(q.in);
    http_body_json_free(req, root);
    if (!j)
        return http_reply_refusal(req, &r);
    return job_submit(req, &j->e.base, s->eapi->sched, atomic_load(&s->eapi->request_timeout_ms),
                      score_job_release);
}

static int resumed(http_request *req, void *ctx) {
    const score_api *s = ctx;
    score_job *j = http_user(req);
    embed_api_stamp(req, s->eapi, &j->e);
    if (j->e.base.err != SRV_OK)
        return http_reply_error(req, j->e.base.err, "%s", j->e.base.why);
    if (!j->e.base.ran)
        return http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
    /* An infinite logit, or a softmax over one, would make json_real fail
     * (JSON has no infinity or NaN): the model's output is unusable, which
     * TEI answers 424 (its Backend error). */
    const int32_t bad =
        score_first_not_finite(j->e.out, j->e.n, s->num_labels, j->raw, j->per_label);
    if (bad == -2 && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (bad == -2)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory checking the scores");
    if (bad >= 0)
        return http_reply_error(req, SRV_ETASK, "score is not finite (input %d)", (int)bad);
    json_t *out = j->dialect->answer(s, j);
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory encoding the answer");
    return http_reply_json(req, 200, out);
}

static int rerank_route(http_request *req, void *ctx) {
    return handle(req, ctx, &either);
}

static int tei_predict(http_request *req, void *ctx) {
    return handle(req, ctx, &score_tei_predict);
}

static int infinity_classify(http_request *req, void *ctx) {
    return handle(req, ctx, &score_infinity_classify);
}

static int v1_rerank(http_request *req, void *ctx) {
    return handle(req, ctx, &score_cohere_rerank);
}

static int vllm_score(http_request *req, void *ctx) {
    return handle(req, ctx, &score_vllm_score);
}

/* POST / and /invocations: TEI's route for the served model's task. */
static int tei_default(http_request *req, void *ctx) {
    const score_api *s = ctx;
    return handle(req, ctx, s->num_labels == 1 ? &score_tei_rerank : &score_tei_predict);
}

/* The trace line's "score" member (batch.h's batch_kind trace): what the
 * part held. The forward's stages are the embed member's when both ran. */
static int score_trace(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified) {
    (void)ctx;
    *verified = false;
    return snprintf(buf, cap, ",\"score\":{\"requests\":%d,\"sequences\":%d,\"tokens\":%d}",
                    part->n_reqs, part->n_seqs, part->n_tokens);
}

int score_api_add_kind(score_api *s, embed_service *svc, batch_runner *runner) {
    const batch_kind kind = {
        .name = "score", .run = embed_service_run_batch, .trace = score_trace, .ctx = svc};
    return (s->kind = batch_runner_add_kind(runner, &kind)) < 0 ? -1 : 0;
}

int score_api_register(score_api *s, embed_service *svc, batch_runner *runner, routes *t) {
    if (score_api_add_kind(s, svc, runner) != 0)
        return -1;
    const http_error_shape TEI = HTTP_ERRORS_TEI, OAI = HTTP_ERRORS_OPENAI;
    const http_route mine[] = {
        {"POST", "/rerank", true, HTTP_AUTH_KEY, rerank_route, resumed, s, TEI},
        {"POST", "/predict", true, HTTP_AUTH_KEY, tei_predict, resumed, s, TEI},
        {"POST", "/classify", true, HTTP_AUTH_KEY, infinity_classify, resumed, s, OAI},
        {"POST", "/v1/rerank", true, HTTP_AUTH_KEY, v1_rerank, resumed, s, OAI},
        {"POST", "/v2/rerank", true, HTTP_AUTH_KEY, v1_rerank, resumed, s, OAI},
        {"POST", "/score", true, HTTP_AUTH_KEY, vllm_score, resumed, s, OAI},
        {"POST", "/v1/score", true, HTTP_AUTH_KEY, vllm_score, resumed, s, OAI},
    };
    if (routes_add_all(t, mine, sizeof mine / sizeof mine[0]) != 0)
        return -1;
    if (!s->classifier || s->no_root)
        return 0;
    score_api *root = s->root ? s->root : s;
    const http_route dflt[] = {
        {"POST", "/", true, HTTP_AUTH_KEY, tei_default, resumed, root, TEI},
        {"POST", "/invocations", true, HTTP_AUTH_KEY, tei_default, resumed, root, TEI},
    };
    return routes_add_all(t, dflt, sizeof dflt / sizeof dflt[0]);
}

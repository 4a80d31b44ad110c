/* batch.c — splitting a batch by kind. The parts keep FIFO order, and each
 * service sees an ordinary sched_batch holding only its own requests. */
#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "errors.h"
#include "trace.h"

struct batch_runner {
    attn_service *attn;
    embed_service *embed;
    const srv_engine *engine;       /* the backend in force, for the trace */
    sched_req **part[BATCH_NKINDS]; /* (max_batch_requests) each */
    tracer *trace;
};

batch_runner *batch_runner_create(const srv_engine *engine, attn_service *attn,
                                  embed_service *embed, int32_t max_batch_requests) {
    batch_runner *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->attn = attn;
    r->embed = embed;
    r->engine = engine;
    for (int k = 0; k < BATCH_NKINDS; k++)
        if (!(r->part[k] = calloc((size_t)max_batch_requests, sizeof *r->part[k]))) {
            batch_runner_destroy(r);
            return NULL;
        }
    return r;
}

void batch_runner_destroy(batch_runner *r) {
    if (!r)
        return;
    for (int k = 0; k < BATCH_NKINDS; k++)
        free(r->part[k]);
    free(r);
}

static void trace_batch(batch_runner *r, const sched_batch *b, const sched_batch *part);

int batch_run(const sched_batch *b, void *ctx) {
    batch_runner *r = ctx;
    sched_batch part[BATCH_NKINDS];
    for (int k = 0; k < BATCH_NKINDS; k++)
        part[k] = (sched_batch){.reqs = r->part[k], .id = b->id, .start_ns = b->start_ns};
    /* Every request is at most one sequence's worth of the batch's
     * max_batch_requests, so each part fits its list. */
    for (int32_t i = 0; i < b->n_reqs; i++) {
        sched_req *req = b->reqs[i];
        sched_batch *p = &part[SCHED_CONTAINER_OF(req, batch_job, sreq)->kind];
        r->part[p - part][p->n_reqs++] = req;
        p->n_seqs += req->n_seqs;
        p->n_tokens += req->n_tokens;
    }
    /* Each service records per-request failures in its jobs; a failure of
     * the whole part (none today) fails the batch. */
    int rc = 0;
    if (part[BATCH_ATTENTION].n_reqs)
        rc = attn_service_run_batch(&part[BATCH_ATTENTION], r->attn);
    if (part[BATCH_EMBED].n_reqs) {
        int e = embed_service_run_batch(&part[BATCH_EMBED], r->embed);
        rc = rc ? rc : e;
    }
    if (trace_enabled(r->trace))
        trace_batch(r, b, part);
    return rc;
}

/* ---- the trace line (issue 7 §3) ---------------------------------------------------- */

void batch_runner_set_trace(batch_runner *r, tracer *t) {
    r->trace = t;
}

static double ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

/* One JSON line: the batch, its parts, where its time went. Formatted with
 * snprintf into a stack buffer (no allocation); trace_emit copies it. */
static void trace_batch(batch_runner *r, const sched_batch *b, const sched_batch *part) {
    const uint64_t end = sched_now_ns();
    uint64_t wait_max = 0, wait_sum = 0;
    for (int32_t i = 0; i < b->n_reqs; i++) {
        const uint64_t w = b->start_ns - b->reqs[i]->enqueue_ns;
        wait_max = w > wait_max ? w : wait_max;
        wait_sum += w;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const attn_backend *backend = srv_engine_backend(r->engine);
    char line[TRACE_LINE_MAX];
    int n =
        snprintf(line, sizeof line,
                 "{\"batch\":%llu,\"time\":%.6f,\"requests\":%d,\"sequences\":%d,"
                 "\"tokens\":%d,\"queue_wait_ms\":{\"max\":%.3f,\"mean\":%.3f},"
                 "\"compute_ms\":%.3f,\"backend\":\"%s\"",
                 (unsigned long long)b->id, (double)now.tv_sec + (double)now.tv_nsec * 1e-9,
                 b->n_reqs, b->n_seqs, b->n_tokens, ms(wait_max),
                 b->n_reqs ? ms(wait_sum) / b->n_reqs : 0.0, ms(end - b->start_ns), backend->name);
    bool verified = false;
    const sched_batch *e = &part[BATCH_EMBED], *a = &part[BATCH_ATTENTION];
    if (e->n_reqs && n > 0 && (size_t)n < sizeof line) {
        const embed_batch_info *ei = embed_service_last_batch(r->embed);
        const bert_stage_ns *s = &ei->stages;
        verified = ei->verified_layer >= 0;
        n += snprintf(line + n, sizeof line - (size_t)n,
                      ",\"embed\":{\"requests\":%d,\"sequences\":%d,\"tokens\":%d,"
                      "\"stages_ms\":{\"embeddings\":%.3f,\"qkv\":%.3f,\"attention\":%.3f,"
                      "\"out_proj\":%.3f,\"ffn\":%.3f,\"norms\":%.3f,\"pooling\":%.3f},"
                      "\"verified_layer\":%d}",
                      e->n_reqs, ei->sequences, ei->tokens, ms(s->embeddings), ms(s->qkv),
                      ms(s->attention), ms(s->out_proj), ms(s->ffn), ms(s->norms), ms(s->pooling),
                      ei->verified_layer);
    }
    if (a->n_reqs && n > 0 && (size_t)n < sizeof line) {
        const attn_batch_info *ai = attn_service_last_batch(r->attn);
        verified = verified || ai->verified;
        n += snprintf(line + n, sizeof line - (size_t)n,
                      ",\"attention\":{\"requests\":%d,\"tokens\":%d,\"groups\":%d,"
                      "\"kernel_ms\":%.3f,\"verified\":%s}",
                      a->n_reqs, a->n_tokens, ai->groups, ms(ai->kernel_ns),
                      ai->verified ? "true" : "false");
    }
    if (n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ",\"verified\":%s}",
                      verified ? "true" : "false");
    /* Every field is bounded (numbers and a backend name), so the line fits;
     * a line that did not would be dropped whole rather than cut. */
    if (n > 0 && (size_t)n < sizeof line)
        trace_emit(r->trace, line, (size_t)n);
}

/* ---- submitting and parking ------------------------------------------------------ */

static double ns_to_ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

/* Loop thread: the result is in the job (or the request never ran). */
static void job_done(sched_req *sreq, int status) {
    batch_job *job = SCHED_CONTAINER_OF(sreq, batch_job, sreq);
    if (status == SCHED_EDEADLINE) {
        job->err = SRV_ETIMEOUT;
        snprintf(job->why, sizeof job->why, "request timed out after %.0f ms in the queue",
                 ns_to_ms(sreq->start_ns - sreq->enqueue_ns));
    } else if (status == SCHED_ESHUTDOWN || status == SCHED_ECANCELED) {
        job->err = SRV_EUNAVAILABLE;
        snprintf(job->why, sizeof job->why, "%s", sched_strerror(status));
    } else if (status != SCHED_OK) {
        job->err = SRV_EINTERNAL;
        snprintf(job->why, sizeof job->why, "%s", sched_strerror(status));
    }
    if (atomic_fetch_add(&job->gate, 1) == 1)
        http_resume(job->http);
}

/* http.c's watch thread: the client closed while the job was parked. The
 * job is valid memory here (it is freed only after http_resume, which waits
 * for the watch), and a job already in a batch or done ignores the cancel. */
static void job_client_closed(void *arg) {
    batch_job *job = arg;
    sched_cancel(job->sched, &job->sreq);
}

static int submit_error(http_request *req, int rc) {
    switch (rc) {
    case SCHED_EFULL:
        return http_reply_error(req, SRV_EQUEUEFULL, "queue full (max_queue requests waiting)");
    case SCHED_EDRAINING:
    case SCHED_ESHUTDOWN:
        return http_reply_error(req, SRV_EUNAVAILABLE, "server is draining");
    case SCHED_ETOOBIG:
        return http_reply_error(req, SRV_EINVALID, "request exceeds the batch limits in force");
    default:
        return http_reply_error(req, SRV_EINTERNAL, "%s", sched_strerror(rc));
    }
}

int batch_submit(http_request *req, batch_job *job, sched *s, int64_t timeout_ms,
                 void (*free_fn)(void *)) {
    job->http = req;
    job->sched = s;
    job->sreq.done = job_done;
    /* request_timeout_ms counts from arrival; a request that used it all up
     * reading its body gets a deadline long past (0 would mean none), so the
     * scheduler answers it 504 at once. */
    double left_ms = (double)timeout_ms - http_age_ms(req);
    job->sreq.deadline_ns = left_ms > 0 ? sched_now_ns() + (uint64_t)(left_ms * 1e6) : 1;
    int rc = sched_submit(s, &job->sreq);
    if (rc != SCHED_OK) {
        free_fn(job);
        return submit_error(req, rc);
    }
    http_set_user(req, job, free_fn);
    http_park(req, job_client_closed, job);
    if (atomic_fetch_add(&job->gate, 1) == 1)
        http_resume(req);
    return HTTP_PARKED;
}

/* batch.c — splitting a batch by kind. The parts keep FIFO order, and each
 * service sees an ordinary sched_batch holding only its own requests. */
#include "server/work/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "server/ops/trace.h"

struct batch_runner {
    int32_t max_batch_requests;
    int nkinds;
    batch_kind kinds[BATCH_MAX_KINDS];
    sched_req **part[BATCH_MAX_KINDS]; /* (max_batch_requests) each */
    tracer *trace;
    const char *(*backend)(void *ctx);
    void *backend_ctx;
    const char *const *models; /* the trace's model of each scheduler group */
    size_t nmodels;
};

batch_runner *batch_runner_create(int32_t max_batch_requests) {
    batch_runner *r = calloc(1, sizeof *r);
    if (r)
        r->max_batch_requests = max_batch_requests;
    return r;
}

void batch_runner_destroy(batch_runner *r) {
    if (!r)
        return;
    for (int k = 0; k < r->nkinds; k++)
        free(r->part[k]);
    free(r);
}

int batch_runner_add_kind(batch_runner *r, const batch_kind *kind) {
    if (r->nkinds == BATCH_MAX_KINDS)
        return -1;
    if (!(r->part[r->nkinds] = calloc((size_t)r->max_batch_requests, sizeof *r->part[0])))
        return -1;
    r->kinds[r->nkinds] = *kind;
    return r->nkinds++;
}

static void trace_batch(batch_runner *r, const sched_batch *b, const sched_batch *part);

int batch_run(const sched_batch *b, void *ctx) {
    batch_runner *r = ctx;
    sched_batch part[BATCH_MAX_KINDS];
    for (int k = 0; k < r->nkinds; k++)
        part[k] = (sched_batch){.reqs = r->part[k], .id = b->id, .start_ns = b->start_ns};
    /* Every request is at most one sequence's worth of the batch's
     * max_batch_requests, so each part fits its list. A job of a kind never
     * registered is a bug: it is left out, and its done callback finds it
     * never ran. */
    for (int32_t i = 0; i < b->n_reqs; i++) {
        sched_req *req = b->reqs[i];
        const int k = SCHED_CONTAINER_OF(req, job, sreq)->kind;
        if (k < 0 || k >= r->nkinds)
            continue;
        sched_batch *p = &part[k];
        r->part[k][p->n_reqs++] = req;
        p->n_seqs += req->n_seqs;
        p->n_tokens += req->n_tokens;
    }
    /* Each service records per-request failures in its jobs; a failure of
     * the whole part (none today) fails the batch. */
    int rc = 0;
    for (int k = 0; k < r->nkinds; k++)
        if (part[k].n_reqs) {
            int e = r->kinds[k].run(&part[k], r->kinds[k].ctx);
            rc = rc ? rc : e;
        }
    if (trace_enabled(r->trace))
        trace_batch(r, b, part);
    return rc;
}

/* ---- the trace line ---------------------------------------------------------------- */

void batch_runner_set_trace(batch_runner *r, tracer *t, const char *(*backend)(void *ctx),
                            void *backend_ctx) {
    r->trace = t;
    r->backend = backend;
    r->backend_ctx = backend_ctx;
}

void batch_runner_set_models(batch_runner *r, const char *const *names, size_t n) {
    r->models = names;
    r->nmodels = n;
}

/* The batch's model as a JSON string member: a name is a validated setting
 * or a directory's last component, which may hold a quote or backslash. */
static int model_member(const batch_runner *r, const sched_batch *b, char *buf, size_t cap) {
    if (b->group >= r->nmodels)
        return 0;
    size_t n = 0;
    const char *head = ",\"model\":\"";
    for (const char *p = head; *p && n < cap; p++)
        buf[n++] = *p;
    for (const unsigned char *p = (const unsigned char *)r->models[b->group]; *p && n < cap; p++) {
        if (*p == '"' || *p == '\\')
            buf[n++] = '\\';
        if (n < cap)
            buf[n++] = *p < 0x20 ? '?' : (char)*p;
    }
    if (n < cap)
        buf[n++] = '"';
    return n < cap ? (int)n : -1;
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
    char line[TRACE_LINE_MAX];
    int n = snprintf(line, sizeof line,
                     "{\"batch\":%llu,\"time\":%.6f,\"requests\":%d,\"sequences\":%d,"
                     "\"tokens\":%d,\"queue_wait_ms\":{\"max\":%.3f,\"mean\":%.3f},"
                     "\"compute_ms\":%.3f,\"backend\":\"%s\"",
                     (unsigned long long)b->id, (double)now.tv_sec + (double)now.tv_nsec * 1e-9,
                     b->n_reqs, b->n_seqs, b->n_tokens, ms(wait_max),
                     b->n_reqs ? ms(wait_sum) / b->n_reqs : 0.0, ms(end - b->start_ns),
                     r->backend ? r->backend(r->backend_ctx) : "");
    if (n > 0 && (size_t)n < sizeof line) {
        const int m = model_member(r, b, line + n, sizeof line - (size_t)n);
        n = m < 0 ? -1 : n + m;
    }
    bool verified = false;
    for (int k = 0; k < r->nkinds; k++)
        if (part[k].n_reqs && r->kinds[k].trace && n > 0 && (size_t)n < sizeof line) {
            bool v = false;
            int m =
                r->kinds[k].trace(r->kinds[k].ctx, &part[k], line + n, sizeof line - (size_t)n, &v);
            n = m < 0 ? -1 : n + m;
            verified = verified || v;
        }
    if (n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ",\"verified\":%s}",
                      verified ? "true" : "false");
    /* Every field is bounded (numbers and a backend name), so the line fits;
     * a line that did not would be dropped whole rather than cut. */
    if (n > 0 && (size_t)n < sizeof line)
        trace_emit(r->trace, line, (size_t)n);
}

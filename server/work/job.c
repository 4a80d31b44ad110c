/* job.c — submitting a job, parking its connection, finishing it. */
#include "server/work/job.h"

#include <stdio.h>

#include "server/api/errors.h"

static double ns_to_ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

double job_queue_ms(const job *j) {
    return ns_to_ms(j->queue_ns);
}

double job_compute_ms(const job *j) {
    return ns_to_ms(j->compute_ns);
}

/* Sets sreq's counts for the next piece from j->first: consecutive inputs
 * while they fit lim (at least one). Only the caller's fields of sreq are
 * written: the watch thread may be cancelling it at the same time. */
static void make_piece(job *j, const sched_limits *lim) {
    const int32_t *cu = j->items_cu;
    int32_t end = j->first;
    int64_t tokens = 0;
    while (end < j->n_items && end - j->first < lim->max_batch_requests) {
        const int32_t t = cu[end + 1] - cu[end];
        if (end > j->first && tokens + t > lim->max_batch_tokens)
            break;
        tokens += t;
        end++;
    }
    j->count = end - j->first;
    j->sreq.n_tokens = (int32_t)tokens;
    j->sreq.n_seqs = j->count;
}

static void job_done(sched_req *sreq, int status);

/* Loop thread, in the done callback of a piece that ran: queues the next
 * one. Returns SCHED_OK when it is queued (the job goes on), or why not. */
static int queue_next_piece(job *j) {
    /* Queued even after a close, then cancelled: the scheduler takes it out
     * unrun and counts the cancel, as it counts a closed client's first
     * piece. */
    j->first += j->count;
    sched_limits lim;
    sched_get_limits(j->sched, &lim);
    make_piece(j, &lim);
    j->sreq.deadline_ns = j->deadline_ns;
    j->sreq.done = job_done;
    int rc = sched_submit_continuation(j->sched, &j->sreq);
    /* The submit clears the cancel flag a close may have set: cancel again
     * (the piece then never runs). */
    if (rc == SCHED_OK && atomic_load(&j->closed))
        sched_cancel(j->sched, &j->sreq);
    return rc;
}

/* Loop thread: a piece is done (or never ran). */
static void job_done(sched_req *sreq, int status) {
    job *j = SCHED_CONTAINER_OF(sreq, job, sreq);
    j->queue_ns += sreq->start_ns - sreq->enqueue_ns;
    j->compute_ns += sreq->end_ns - sreq->start_ns;
    if (status == SCHED_OK && j->err == SRV_OK && j->on_piece)
        j->on_piece(j);
    /* After a close the next piece is still queued, to be cancelled and
     * counted (a streamed piece's lines fail to write once the client is
     * gone, which sets err). */
    if (status == SCHED_OK && (j->err == SRV_OK || atomic_load(&j->closed)) && j->items_cu &&
        j->first + j->count < j->n_items) {
        int rc = queue_next_piece(j);
        if (rc == SCHED_OK)
            return;
        status = rc;
    }
    if (status == SCHED_EDEADLINE) {
        j->err = SRV_ETIMEOUT;
        if (j->first > 0)
            snprintf(j->why, sizeof j->why,
                     "request timed out (request_timeout_ms) with %d of its %d inputs computed",
                     (int)j->first, (int)j->n_items);
        else
            snprintf(j->why, sizeof j->why, "request timed out after %.0f ms in the queue",
                     ns_to_ms(sreq->start_ns - sreq->enqueue_ns));
    } else if (status == SCHED_ESHUTDOWN || status == SCHED_ECANCELED ||
               status == SCHED_EDRAINING) {
        j->err = SRV_EUNAVAILABLE;
        snprintf(j->why, sizeof j->why, "%s", sched_strerror(status));
    } else if (status != SCHED_OK) {
        j->err = SRV_EINTERNAL;
        snprintf(j->why, sizeof j->why, "%s", sched_strerror(status));
    }
    if (j->stream) {
        j->on_end(j);
        http_stream_end(j->stream, j->err != SRV_OK);
        j->free_fn(j);
        return;
    }
    if (atomic_fetch_add(&j->gate, 1) == 1)
        http_resume(j->http);
}

/* http.c's watch thread: the client closed while the job was parked. The
 * job is valid memory here (it is freed only after http_resume, which waits
 * for the watch); a piece already in a batch or done ignores the cancel,
 * and no piece is queued after it. */
static void job_client_closed(void *arg) {
    job *j = arg;
    atomic_store(&j->closed, true);
    sched_cancel(j->sched, &j->sreq);
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

/* What job_submit and job_submit_stream share: the deadline and the first
 * piece set, the job submitted; or a refusal answered and j freed (returns
 * what a handler returns, with *submitted false). */
static int submit(http_request *req, job *j, sched *s, int64_t timeout_ms, void (*free_fn)(void *),
                  bool *submitted);

int job_submit(http_request *req, job *j, sched *s, int64_t timeout_ms, void (*free_fn)(void *)) {
    bool submitted;
    int r = submit(req, j, s, timeout_ms, free_fn, &submitted);
    if (!submitted)
        return r;
    http_set_user(req, j, free_fn);
    http_park(req, job_client_closed, j);
    if (atomic_fetch_add(&j->gate, 1) == 1)
        http_resume(req);
    return HTTP_PARKED;
}

int job_submit_stream(http_request *req, job *j, sched *s, int64_t timeout_ms,
                      void (*free_fn)(void *), const char *content_type) {
    /* The stream exists before the job is submitted, so that its first
     * piece may be written whenever it is done; its headers go once the
     * submit is accepted. */
    j->stream = http_stream_open(req, job_client_closed, j);
    if (!j->stream) {
        free_fn(j);
        return http_reply_error(req, SRV_EINTERNAL, "out of memory");
    }
    j->free_fn = free_fn;
    http_stream *st = j->stream;
    bool submitted;
    int r = submit(req, j, s, timeout_ms, free_fn, &submitted);
    if (!submitted) {
        http_stream_discard(st);
        return r;
    }
    return http_stream_queue(st, content_type);
}

static int submit(http_request *req, job *j, sched *s, int64_t timeout_ms, void (*free_fn)(void *),
                  bool *submitted) {
    *submitted = false;
    j->http = req;
    j->sched = s;
    j->sreq.done = job_done;
    /* request_timeout_ms counts from arrival; a request that used it all up
     * reading its body gets a deadline long past (0 would mean none), so the
     * scheduler answers it 504 at once. */
    double left_ms = (double)timeout_ms - http_age_ms(req);
    j->deadline_ns = left_ms > 0 ? sched_now_ns() + (uint64_t)(left_ms * 1e6) : 1;
    j->sreq.deadline_ns = j->deadline_ns;
    if (j->items_cu) {
        sched_limits lim;
        sched_get_limits(s, &lim);
        /* Every piece holds at least one input: one that alone exceeds a
         * batch can never run. */
        for (int32_t i = 0; i < j->n_items; i++) {
            const int32_t t = j->items_cu[i + 1] - j->items_cu[i];
            if (t > lim.max_batch_tokens) {
                free_fn(j);
                return http_reply_error(req, SRV_EINVALID,
                                        "input %d has %d tokens; a batch holds at most %d "
                                        "(max_batch_tokens)",
                                        (int)i, (int)t, (int)lim.max_batch_tokens);
            }
        }
        j->first = 0;
        make_piece(j, &lim);
    } else {
        j->first = 0;
        j->count = j->sreq.n_seqs;
    }
    int rc = sched_submit(s, &j->sreq);
    if (rc != SCHED_OK) {
        free_fn(j);
        return submit_error(req, rc);
    }
    *submitted = true;
    return HTTP_DONE;
}

/* job.c — submitting a job, parking its connection, finishing it. */
#include "job.h"

#include <stdio.h>

#include "errors.h"

static double ns_to_ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

double job_queue_ms(const job *j) {
    return ns_to_ms(j->sreq.start_ns - j->sreq.enqueue_ns);
}

double job_compute_ms(const job *j) {
    return ns_to_ms(j->sreq.end_ns - j->sreq.start_ns);
}

/* Loop thread: the result is in the job (or the request never ran). */
static void job_done(sched_req *sreq, int status) {
    job *j = SCHED_CONTAINER_OF(sreq, job, sreq);
    if (status == SCHED_EDEADLINE) {
        j->err = SRV_ETIMEOUT;
        snprintf(j->why, sizeof j->why, "request timed out after %.0f ms in the queue",
                 ns_to_ms(sreq->start_ns - sreq->enqueue_ns));
    } else if (status == SCHED_ESHUTDOWN || status == SCHED_ECANCELED) {
        j->err = SRV_EUNAVAILABLE;
        snprintf(j->why, sizeof j->why, "%s", sched_strerror(status));
    } else if (status != SCHED_OK) {
        j->err = SRV_EINTERNAL;
        snprintf(j->why, sizeof j->why, "%s", sched_strerror(status));
    }
    if (atomic_fetch_add(&j->gate, 1) == 1)
        http_resume(j->http);
}

/* http.c's watch thread: the client closed while the job was parked. The
 * job is valid memory here (it is freed only after http_resume, which waits
 * for the watch), and a job already in a batch or done ignores the cancel. */
static void job_client_closed(void *arg) {
    job *j = arg;
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

int job_submit(http_request *req, job *j, sched *s, int64_t timeout_ms, void (*free_fn)(void *)) {
    j->http = req;
    j->sched = s;
    j->sreq.done = job_done;
    /* request_timeout_ms counts from arrival; a request that used it all up
     * reading its body gets a deadline long past (0 would mean none), so the
     * scheduler answers it 504 at once. */
    double left_ms = (double)timeout_ms - http_age_ms(req);
    j->sreq.deadline_ns = left_ms > 0 ? sched_now_ns() + (uint64_t)(left_ms * 1e6) : 1;
    int rc = sched_submit(s, &j->sreq);
    if (rc != SCHED_OK) {
        free_fn(j);
        return submit_error(req, rc);
    }
    http_set_user(req, j, free_fn);
    http_park(req, job_client_closed, j);
    if (atomic_fetch_add(&j->gate, 1) == 1)
        http_resume(req);
    return HTTP_PARKED;
}

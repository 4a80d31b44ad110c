/* job.h — the bottom of every compute route: one request's work handed to
 * the scheduler, the connection parked until it is done, and a client that
 * closes cancelling it.
 *
 * A service embeds a job as the first member of its own job struct, fills
 * its inputs and sreq's token counts, and calls job_submit. The scheduler's
 * done callback and the watch's client-closed callback are here; what a job
 * computes is the service's (its kind, registered with the runner in
 * batch.h), and how it is answered is the route's (the resumed handler).
 * This module knows neither. */
#ifndef ATTN_JOB_H
#define ATTN_JOB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/http/http.h"
#include "server/work/scheduler.h"

struct attn_backend;

/* The first member of every job a service submits; the scheduler's request
 * is inside it, so SCHED_CONTAINER_OF(req, job, sreq) finds the kind. It
 * also holds what every kind shares: the parked HTTP request, the piece of
 * it in the scheduler, and how the job ended.
 *
 * Pieces. A job of several inputs (items_cu set) may hold more inputs or
 * tokens than one batch: it runs in pieces, each the longest run of
 * consecutive inputs that fits one batch under the limits in force, and
 * only one piece is in the scheduler at a time. The next piece is queued
 * when the last one is done, behind whatever arrived meanwhile, so a
 * request arriving after a large one waits for at most the batch running
 * when it arrived, and large requests take turns. The service runs inputs
 * [first, first + count) of the job; the answer is encoded once every
 * piece is done. A client that closes cancels the piece queued and no more
 * are queued; the deadline is the whole request's. */
typedef struct job {
    sched_req sreq;
    int kind; /* batch_runner_add_kind's id: which service runs it */
    http_request *http;
    sched *sched; /* the one it was submitted to, for a cancel */

    /* Set by the service before job_submit. items_cu: n_items + 1 token
     * offsets of the inputs (the service's own array); NULL: the job is one
     * piece with sreq's counts as set. */
    int32_t n_items;
    const int32_t *items_cu;
    /* The piece in the scheduler now: inputs [first, first + count). */
    int32_t first, count;
    uint64_t deadline_ns;
    uint64_t queue_ns, compute_ns; /* over the pieces done so far */
    atomic_bool closed;            /* the client went away */

    /* Written by the compute thread, read after the done callback. */
    int err; /* SRV_OK or the SRV_E* to answer with */
    char why[160];
    const struct attn_backend *ran;

    /* Two parties finish with a job: the handler once it has parked the
     * connection, the done callback once the last piece is done. The
     * second one resumes, so a resume never precedes the suspend. */
    atomic_int gate;

    /* A streamed job (job_submit_stream): on the loop thread, on_piece after
     * each piece ran (inputs [first, first + count)), then on_end once, with
     * err set, after the last piece or the failure; then the job is freed. */
    http_stream *stream;
    void (*on_piece)(struct job *j);
    void (*on_end)(struct job *j);
    void (*free_fn)(void *);
} job;

/* Submits j (its kind and inputs filled: items_cu and n_items, or sreq's
 * token counts) for req and parks req until every piece is done; the
 * deadline is timeout_ms from the request's arrival. On a refusal (queue
 * full, draining, an input larger than a batch) j is freed with free_fn and
 * req answered with the matching error. Returns what a route handler
 * returns. */
int job_submit(http_request *req, job *j, sched *s, int64_t timeout_ms, void (*free_fn)(void *));

/* job_submit for an answer streamed as it is computed: the 200 and its
 * content_type are sent at once and the connection is never parked; the
 * job's on_piece and on_end (set by the caller) write to j->stream. A
 * client that closes cancels the piece queued and no more are queued (the
 * scheduler counts the cancel). Refusals are answered as job_submit's. */
int job_submit_stream(http_request *req, job *j, sched *s, int64_t timeout_ms,
                      void (*free_fn)(void *), const char *content_type);

/* Queue and compute time of a finished job over its pieces, in
 * milliseconds, for http_set_timing. */
double job_queue_ms(const job *j);
double job_compute_ms(const job *j);

#endif

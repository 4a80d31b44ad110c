/* batch.h — one scheduler, several kinds of work.
 *
 * Every request the scheduler queues is a batch_job: its sched_req and a
 * tag saying which service computes it. batch_run, the scheduler's one
 * run_batch, splits each batch by kind and hands every part to its service
 * on the compute thread, so attention and embedding requests share the
 * queue, the token budget and the batches. */
#ifndef ATTN_BATCH_H
#define ATTN_BATCH_H

#include <stdatomic.h>
#include <stdint.h>

#include "attention_api.h"
#include "embed_api.h"
#include "scheduler.h"

typedef enum batch_kind { BATCH_ATTENTION, BATCH_EMBED, BATCH_NKINDS } batch_kind;

/* The first member of every job a service submits; the scheduler's request
 * is inside it, so SCHED_CONTAINER_OF(req, batch_job, sreq) finds the tag.
 * It also holds what every kind shares: the parked HTTP request and how the
 * job ended. */
typedef struct batch_job {
    sched_req sreq;
    batch_kind kind;
    http_request *http;
    sched *sched; /* the one it was submitted to, for a cancel */

    /* Written by the compute thread, read after the done callback. */
    int err; /* SRV_OK or the SRV_E* to answer with */
    char why[160];
    const attn_backend *ran;

    /* Two parties finish with a job: the handler once it has parked the
     * connection, the done callback once the result is in. The second one
     * resumes, so a resume never precedes the suspend. */
    atomic_int gate;
} batch_job;

/* Submits job (its kind and inputs filled, sreq's token counts set) for req
 * and parks req until the job is done; the deadline is timeout_ms from the
 * request's arrival. On a refusal (queue full, draining, too big) job is
 * freed with free_fn and req answered with the matching error. Returns what
 * a route handler returns. */
int batch_submit(http_request *req, batch_job *job, sched *s, int64_t timeout_ms,
                 void (*free_fn)(void *));

typedef struct batch_runner batch_runner;

/* engine, attn and embed must outlive the runner. max_batch_requests is
 * the scheduler's ceiling: the per-kind request lists are sized for it
 * once. */
batch_runner *batch_runner_create(const srv_engine *engine, attn_service *attn,
                                  embed_service *embed, int32_t max_batch_requests);
void batch_runner_destroy(batch_runner *r);

/* The scheduler's run_batch (ctx is the batch_runner). */
int batch_run(const sched_batch *b, void *ctx);

/* Issue 7 §3: with t set (may be NULL), every batch writes one trace line
 * (server/trace.h) while trace_file is set. Set before serving. */
struct tracer;
void batch_runner_set_trace(batch_runner *r, struct tracer *t);

#endif

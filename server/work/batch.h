/* batch.h — one scheduler, several kinds of work.
 *
 * Every request the scheduler queues is a job (job.h) whose kind says which
 * service computes it. Services register their kind here (a name, how to
 * run a batch of its jobs, what it adds to the trace line); batch_run, the
 * scheduler's one run_batch, splits each batch by kind and hands every part
 * to its service on the compute thread, so attention and embedding requests
 * share the queue, the token budget and the batches. The runner knows no
 * kind by name. */
#ifndef ATTN_BATCH_H
#define ATTN_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/config.h"
#include "server/work/job.h"
#include "server/work/scheduler.h"

/* /v1/attention's kind, then two (embed, score) per served model. */
#define BATCH_MAX_KINDS (1 + 2 * CONFIG_MAX_MODELS)

typedef struct batch_kind {
    const char *name;
    /* Runs the part of a batch holding this kind's jobs (compute thread):
     * a sched_batch of only its requests, in FIFO order. Per-job failures
     * go in the jobs; a nonzero return fails the whole batch. */
    int (*run)(const sched_batch *part, void *ctx);
    /* Optional: appends this kind's member of the trace line (starting with
     * a comma, e.g. ,"embed":{...}) to buf, after run, and sets *verified
     * when shadow verification captured from it. Returns the bytes written
     * as snprintf does (>= cap: the line is dropped whole). */
    int (*trace)(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified);
    void *ctx;
} batch_kind;

typedef struct batch_runner batch_runner;

/* max_batch_requests is the scheduler's ceiling: the per-kind request lists
 * are sized for it when a kind is added. */
batch_runner *batch_runner_create(int32_t max_batch_requests);
void batch_runner_destroy(batch_runner *r);

/* Registers a kind before serving; returns its id (the job's kind), or -1
 * when BATCH_MAX_KINDS are registered or memory is short. Kinds run in the
 * order they were added. */
int batch_runner_add_kind(batch_runner *r, const batch_kind *kind);

/* The scheduler's run_batch (ctx is the batch_runner). */
int batch_run(const sched_batch *b, void *ctx);

/* With t set (may be NULL), every batch writes one trace line
 * (server/ops/trace.h) while trace_file is set; backend names the backend in
 * force for the line. Set before serving. */
struct tracer;
void batch_runner_set_trace(batch_runner *r, struct tracer *t, const char *(*backend)(void *ctx),
                            void *backend_ctx);

/* The served models' names by scheduler group (group i is names[i]); the
 * trace line's "model" is its batch's. The strings must outlive r. */
void batch_runner_set_models(batch_runner *r, const char *const *names, size_t n);

#endif

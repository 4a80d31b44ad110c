/* scheduler.h — the batching scheduler: a bounded FIFO queue of requests
 * packed into token-budget batches that run one at a time.
 *
 * It knows requests, token counts, deadlines and batches; nothing of HTTP,
 * JSON or the model. The HTTP layer submits, the model runs batches through
 * the run_batch callback, and the metrics layer reads sched_stats.
 *
 * Threads. sched_create starts exactly two threads and no others (libuv's
 * uv_queue_work pool is never used):
 *   - the loop thread runs a private libuv loop that owns the queue, the
 *     timers and every completion; done callbacks, on_batch and the drain
 *     callback run on it;
 *   - the compute thread runs run_batch, one batch at a time, and the
 *     functions handed to sched_call between batches.
 * Every other function here may be called from any thread, except that
 * sched_destroy, sched_call and sched_wait_drained must not be called from
 * the loop or compute thread (they wait for those threads).
 *
 * Memory. The scheduler allocates nothing per request: the caller embeds a
 * sched_req in its own request struct and gets it back in callbacks with
 * SCHED_CONTAINER_OF. Batch arrays are allocated once by sched_create.
 *
 * Times are monotonic nanoseconds from sched_now_ns() (libuv's uv_hrtime,
 * CLOCK_MONOTONIC on Linux). */
#ifndef ATTN_SCHEDULER_H
#define ATTN_SCHEDULER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---- errors -----------------------------------------------------------------
 * Negative codes, one list; sched_strerror() gives the message and
 * sched_errname() the symbol (for logs). The HTTP status each one suggests is
 * in the comment; the scheduler itself never speaks HTTP. */
#define SCHED_ERRORS(X)                                                                            \
    X(SCHED_OK, 0, "success")                                     /* 200 */                        \
    X(SCHED_EINVAL, -1, "invalid argument")                       /* 500 */                        \
    X(SCHED_EFULL, -2, "queue full")                              /* 429 */                        \
    X(SCHED_ETOOBIG, -3, "request exceeds the batch limits")      /* 422 */                        \
    X(SCHED_EDRAINING, -4, "draining: not accepting requests")    /* 503 */                        \
    X(SCHED_ESHUTDOWN, -5, "scheduler shut down")                 /* 503 */                        \
    X(SCHED_EDEADLINE, -6, "deadline passed while queued")        /* 504 */                        \
    X(SCHED_ECANCELED, -7, "cancelled before it ran")             /* none */                       \
    X(SCHED_EBATCH, -8, "batch computation failed")               /* 500 */                        \
    X(SCHED_ENOMEM, -9, "out of memory")                          /* start */                      \
    X(SCHED_ESYS, -10, "cannot start a thread or the event loop") /* start */                      \
    X(SCHED_ETIMEDOUT, -11, "timed out waiting")                  /* drain */

enum {
#define SCHED_ERR_ENUM(name, code, msg) name = code,
    SCHED_ERRORS(SCHED_ERR_ENUM)
#undef SCHED_ERR_ENUM
};

/* The message of err ("queue full"); "unknown error" for codes not listed. */
const char *sched_strerror(int err);
/* The symbol of err ("SCHED_EFULL"); "SCHED_E?" for codes not listed. */
const char *sched_errname(int err);

/* ---- requests -----------------------------------------------------------------
 * One scheduler request is one HTTP request, which may hold several inputs
 * (sequences). It is accounted as n_tokens (the sum over its sequences) and
 * n_seqs. A request is never split across batches by the scheduler; a
 * caller splits a larger one into parts (sched_submit_continuation). */
typedef struct sched_req sched_req;

/* Called exactly once per accepted request, on the loop thread, with status
 * SCHED_OK (its batch ran), SCHED_EBATCH (run_batch failed), SCHED_EDEADLINE,
 * SCHED_ECANCELED or SCHED_ESHUTDOWN. It must be quick (every completion and
 * the next batch wait for it) and safe against the HTTP thread: hand the
 * result over (e.g. MHD_resume_connection) rather than do the I/O here. After
 * it returns the scheduler never touches req again, so it may free req. It
 * may call sched_submit / sched_cancel. */
typedef void (*sched_done_fn)(sched_req *req, int status);

struct sched_req {
    /* Set by the caller before sched_submit (sched_req_init does it). */
    int32_t n_tokens;     /* tokens over all its sequences, >= 1 */
    int32_t n_seqs;       /* sequences (inputs), >= 1 */
    uint64_t deadline_ns; /* drop if still queued at this sched_now_ns(); 0: none */
    sched_done_fn done;
    /* Requests of different groups never share a batch: each served model
     * is a group, so that a batch is one forward of one model's engine
     * (the batch limits bound that forward) and counts for one model.
     * sched_req_init sets 0; the caller may set it before submitting. */
    uint32_t group;

    /* Set by the scheduler before done is called; read them in done or later.
     * For a request that never ran (deadline, cancelled, shutdown) start_ns
     * and end_ns are both the time it was dropped and batch_id is 0, so
     * queue time is always start_ns - enqueue_ns and inference time
     * end_ns - start_ns. */
    int status;
    uint64_t enqueue_ns; /* sched_submit accepted it */
    uint64_t start_ns;   /* its batch started computing */
    uint64_t end_ns;     /* its batch finished */
    uint64_t batch_id;   /* 1-based number of its batch, 0 if it never ran */

    /* Private to the scheduler. */
    sched_req *next_;
    atomic_int cancel_;
};

/* Fills the caller's fields and clears the rest. */
void sched_req_init(sched_req *req, int32_t n_tokens, int32_t n_seqs, uint64_t deadline_ns,
                    sched_done_fn done);

/* The struct that embeds ptr as member: libuv's container_of. */
#define SCHED_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- batches -------------------------------------------------------------------- */
typedef struct sched_batch {
    sched_req *const *reqs; /* [n_reqs] in FIFO (submission) order */
    int32_t n_reqs;
    int32_t n_seqs;    /* sum of reqs[i]->n_seqs, <= max_batch_requests */
    int32_t n_tokens;  /* sum of reqs[i]->n_tokens, <= max_batch_tokens */
    uint64_t id;       /* 1-based, increasing */
    uint32_t group;    /* the group of every request in it */
    uint64_t start_ns; /* set just before run_batch is called */
    uint64_t end_ns;   /* set just after it returns (0 while running) */
} sched_batch;

/* Runs on the compute thread and does the batch's work on the caller's thread
 * pool. It reads its inputs through SCHED_CONTAINER_OF(b->reqs[i], ...) and
 * writes each request's results into the caller's struct. Returns 0, or a
 * negative code (the caller's own namespace): every request of the batch then
 * completes with SCHED_EBATCH, and the caller may keep the details in its
 * structs. Per-request failures are recorded by the caller likewise. */
typedef int (*sched_run_fn)(const sched_batch *b, void *ctx);

/* Optional observer, on the loop thread after a batch finished and before its
 * done callbacks: the place to feed histograms (b->n_reqs, n_seqs, n_tokens,
 * end_ns - start_ns, and each b->start_ns - b->reqs[i]->enqueue_ns). */
typedef void (*sched_batch_fn)(const sched_batch *b, int run_status, void *ctx);

/* ---- limits ------------------------------------------------------------------- */
typedef struct sched_limits {
    /* A batch holds at most this many tokens. A request with more is refused
     * at submit (SCHED_ETOOBIG). >= 1. */
    int32_t max_batch_tokens;
    /* A batch holds at most this many sequences (so at most this many
     * requests): sequences, because that is the B of the packed batch that
     * model and kernel workspaces are sized for. A request with more is
     * refused at submit (SCHED_ETOOBIG). >= 1. */
    int32_t max_batch_requests;
    /* Batches are continuous: one is formed as soon as the compute thread is
     * free, from whatever is queued, so a request that finds the engine idle
     * starts at once and those that arrive during a batch form the next.
     * max_wait_us is an optional linger on top: for this long after a batch
     * ends, the next batch, if not full, waits for more requests (under
     * closed-loop load the clients' next requests arrive just after their
     * answers; waiting for them trades latency for larger batches). A full
     * batch, or any batch while draining, goes at once, and a request that
     * arrives later than max_wait_us after the last batch ended never waits.
     * 0 (the default): never wait. Timers have millisecond resolution, so a
     * linger is rounded up to whole milliseconds; a batch never starts within
     * the linger unless it is full or the scheduler drains. */
    uint32_t max_wait_us;
    /* Requests accepted but not yet in a running batch; past it, sched_submit
     * returns SCHED_EFULL. >= 1. */
    uint32_t max_queue;
} sched_limits;

typedef struct sched_config {
    /* The starting limits. Their max_batch_tokens and max_batch_requests are
     * also ceilings for the scheduler's life: batch arrays and the caller's
     * workspaces are sized for them, so sched_set_limits may not exceed them. */
    sched_limits limits;
    sched_run_fn run_batch; /* required */
    void *run_ctx;
    sched_batch_fn on_batch; /* optional */
    void *observer_ctx;
} sched_config;

/* ---- lifecycle ------------------------------------------------------------------- */
typedef struct sched sched;

/* Validates cfg, allocates, starts the loop and compute threads. Returns
 * SCHED_OK and *out, or SCHED_EINVAL / SCHED_ENOMEM / SCHED_ESYS with nothing
 * left allocated or running. */
int sched_create(sched **out, const sched_config *cfg);

/* Stops admission; requests still queued complete with SCHED_ESHUTDOWN at
 * once, a running batch is waited for and completes normally; then both
 * threads are joined and everything is freed. Every accepted request has had
 * its done callback when this returns. No other sched_* call on s may run
 * concurrently with it or follow it. NULL is a no-op. */
void sched_destroy(sched *s);

/* ---- requests ------------------------------------------------------------------- */

/* Queues req. SCHED_OK: req is accepted and done will be called exactly once;
 * req must stay valid and untouched until then. Otherwise done is never
 * called and req is the caller's again:
 *   SCHED_EINVAL     n_tokens < 1, n_seqs < 1 or no done callback
 *   SCHED_ETOOBIG    n_tokens > max_batch_tokens or n_seqs > max_batch_requests
 *   SCHED_EFULL      max_queue requests are already waiting (counted)
 *   SCHED_EDRAINING  sched_drain was called
 *   SCHED_ESHUTDOWN  sched_destroy has begun
 * A deadline already past is accepted and completes with SCHED_EDEADLINE. */
int sched_submit(sched *s, sched_req *req);

/* Queues req as the next part of a request already accepted (a request
 * split over several batches submits its parts one after another from its
 * done callback): as sched_submit, except that neither a drain nor a full
 * queue refuses it, and its counts are checked against the sched_create
 * ceilings rather than the limits in force. */
int sched_submit_continuation(sched *s, sched_req *req);

/* The limits in force (a reload may change them at any time). */
void sched_get_limits(sched *s, sched_limits *out);

/* Asks that req be dropped if it has not yet joined a batch (the HTTP layer
 * calls it when the client went away). It only holds the scheduler's lock
 * for a moment and never waits for the loop. The outcome is the status done gets: SCHED_ECANCELED
 * if it was still queued, otherwise its normal status; cancelling a request that is running or
 * already completed does nothing. req must still be valid memory: a caller that may cancel from one
 * thread while done frees from another should count references (free on the later of the two).
 * Returns SCHED_OK, or SCHED_EINVAL for NULL arguments. */
int sched_cancel(sched *s, sched_req *req);

/* ---- drain, reload, compute-thread calls ----------------------------------------- */

/* Called once on the loop thread when a drain has finished. */
typedef void (*sched_drained_fn)(void *ctx);

/* Stops admission (sched_submit returns SCHED_EDRAINING from now on) and lets
 * queued and running work finish, without waiting for batches to fill. When
 * nothing is queued or running, cb (may be NULL) runs on the loop thread and
 * sched_wait_drained returns. Returns SCHED_OK, or SCHED_EDRAINING if a drain
 * was already under way (cb is then not registered). */
int sched_drain(sched *s, sched_drained_fn cb, void *ctx);

/* Waits until a drain has finished: SCHED_OK, or SCHED_ETIMEDOUT after
 * timeout_ms (< 0: no limit), or SCHED_EINVAL if sched_drain was not called.
 * Not from the loop or compute thread. */
int sched_wait_drained(sched *s, int64_t timeout_ms);

/* Replaces the limits (SIGHUP reload); the next batch formed obeys them and
 * the next sched_submit checks them. Requests already queued stay queued even
 * if they exceed a lowered limit: such a request runs alone in its batch.
 * Returns SCHED_EINVAL, changing nothing, when a value is out of range or
 * max_batch_tokens / max_batch_requests exceed the sched_create values. */
int sched_set_limits(sched *s, const sched_limits *limits);

/* Runs fn(arg) on the compute thread between two batches (never during one)
 * and returns its result; waits for the running batch, if any, to end. This is
 * how a reload swaps the attention backend or other state that run_batch
 * reads without racing a running batch. Not from the loop or compute thread.
 * Returns fn's result (which should be >= 0 or a negative code of the
 * caller's), or SCHED_ESHUTDOWN once sched_destroy has begun. */
typedef int (*sched_call_fn)(void *arg);
int sched_call(sched *s, sched_call_fn fn, void *arg);

/* ---- stats ------------------------------------------------------------------------ */

/* A snapshot for /metrics. Each field is read atomically but the fields are
 * not one consistent cut; once the scheduler is idle,
 *   accepted == queue_depth + in_flight + completed + failed + timed_out
 *               + cancelled + shut_down. */
typedef struct sched_stats {
    /* gauges */
    uint64_t queue_depth; /* accepted, not yet in a batch */
    uint64_t in_flight;   /* in the running batch, done not yet called */
    int draining;         /* sched_drain was called */
    sched_limits limits;  /* the limits in force */
    /* counters since sched_create */
    uint64_t accepted;
    uint64_t rejected_full;    /* SCHED_EFULL at submit (429) */
    uint64_t rejected_too_big; /* SCHED_ETOOBIG at submit */
    uint64_t rejected_closed;  /* SCHED_EDRAINING / SCHED_ESHUTDOWN at submit */
    uint64_t completed;        /* done with SCHED_OK */
    uint64_t failed;           /* done with SCHED_EBATCH */
    uint64_t timed_out;        /* done with SCHED_EDEADLINE */
    uint64_t cancelled;        /* done with SCHED_ECANCELED */
    uint64_t shut_down;        /* done with SCHED_ESHUTDOWN */
    uint64_t batches;          /* batches run */
    /* running sums, the _sum of the histograms on_batch feeds */
    uint64_t batch_reqs_sum;
    uint64_t batch_seqs_sum;
    uint64_t batch_tokens_sum;
    uint64_t compute_ns_sum; /* end_ns - start_ns over batches */
    uint64_t queue_ns_sum;   /* start_ns - enqueue_ns over requests that ran */
} sched_stats;

void sched_stats_get(sched *s, sched_stats *out);

/* Monotonic nanoseconds, the clock of every time above. */
uint64_t sched_now_ns(void);

#endif

/* scheduler.c — a libuv loop thread that owns the request queue and forms
 * token-budget batches, and a compute thread that runs them one at a time.
 *
 * Other threads reach the loop only through a mutex-protected inbox and
 * uv_async_send. uv_async_send coalesces, so every wake-up (async, timers)
 * runs the same service() pass, which looks at everything that may have
 * changed: new requests, cancellations, deadlines, a finished batch, limits,
 * drain and stop. */
#include "server/work/scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <uv.h>

#include "server/work/ticks.h"

#define NS_PER_MS   1000000ull
#define NS_PER_US   1000ull
#define NO_DEADLINE UINT64_MAX

/* A call posted by sched_call; it lives on the caller's stack. */
typedef struct call_slot {
    sched_call_fn fn;
    void *arg;
    int result;
    bool finished;
} call_slot;

/* A singly linked list of requests through next_ (queue, inbox, drops). */
typedef struct req_list {
    sched_req *head;
    sched_req *tail;
} req_list;

/* Fields are grouped by the thread that owns them, not packed: there is one
 * of these per process. */
struct sched { /* NOLINT(clang-analyzer-optin.performance.Padding) */
    /* Fixed at create. */
    sched_run_fn run_batch;
    void *run_ctx;
    sched_batch_fn on_batch;
    void *observer_ctx;
    int32_t cap_tokens; /* ceilings for max_batch_tokens/requests */
    int32_t cap_seqs;

    /* Guarded by mu: what other threads hand to the loop or the compute
     * thread. Every uv_async_send happens under mu while !stopping, so once
     * the loop has seen stopping and no batch runs, no sender can still be
     * touching the async handle and the loop may close it. */
    pthread_mutex_t mu;
    pthread_cond_t compute_cv; /* compute thread: batch ready, call posted, stop */
    pthread_cond_t idle_cv;    /* waiters: drain finished, call finished */
    sched_limits limits;
    req_list inbox;
    bool draining;
    bool drained;
    bool stopping;
    sched_drained_fn drained_cb;
    void *drained_ctx;
    sched_batch *ready;  /* formed by the loop, not yet taken by compute */
    bool batch_finished; /* compute finished the running batch */
    int batch_status;    /* run_batch's return for it */
    call_slot *call;     /* posted by sched_call, not yet run */
    bool compute_stop;

    /* Owned by the loop thread. */
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t wait_timer;     /* the max_wait_us linger after a batch */
    uv_timer_t deadline_timer; /* the earliest deadline of a queued request */
    req_list queue;
    int64_t q_tokens; /* sums over the queue, to tell a full batch in O(1) */
    int64_t q_seqs;
    uint64_t next_deadline; /* a lower bound of the queue's earliest deadline */
    sched_batch batches[2]; /* double buffer: one runs, the other is formed */
    sched_req **slots[2];   /* their reqs arrays, [cap_seqs] each */
    int next_buf;
    sched_batch *running; /* handed to compute and not yet completed */
    uint64_t last_batch_id;
    uint64_t last_end_ns; /* the end of the last batch that ran; 0: none yet */
    bool drain_reported;
    bool closing;

    pthread_t loop_thread;
    pthread_t compute_thread;

    /* Set by sched_cancel so the loop sweeps the queue for cancelled ones. */
    atomic_bool cancel_pending;

    /* Stats, readable from any thread. */
    atomic_uint_fast64_t depth, in_flight, accepted, rejected_full, rejected_too_big,
        rejected_closed, completed, failed, timed_out, cancelled, shut_down, n_batches,
        batch_reqs_sum, batch_seqs_sum, batch_tokens_sum, compute_ns_sum, queue_ns_sum;
};

/* ---- errors ---------------------------------------------------------------- */

const char *sched_strerror(int err) {
    switch (err) {
#define SCHED_ERR_MSG(name, code, msg)                                                             \
    case code:                                                                                     \
        return msg;
        SCHED_ERRORS(SCHED_ERR_MSG)
#undef SCHED_ERR_MSG
    }
    return "unknown error";
}

const char *sched_errname(int err) {
    switch (err) {
#define SCHED_ERR_NAME(name, code, msg)                                                            \
    case code:                                                                                     \
        return #name;
        SCHED_ERRORS(SCHED_ERR_NAME)
#undef SCHED_ERR_NAME
    }
    return "SCHED_E?";
}

uint64_t sched_now_ns(void) {
    return uv_hrtime();
}

void sched_req_init(sched_req *req, int32_t n_tokens, int32_t n_seqs, uint64_t deadline_ns,
                    sched_done_fn done) {
    *req = (sched_req){
        .n_tokens = n_tokens,
        .n_seqs = n_seqs,
        .deadline_ns = deadline_ns,
        .done = done,
    };
    atomic_init(&req->cancel_, 0);
}

/* ---- small helpers ------------------------------------------------------------ */

static void count(atomic_uint_fast64_t *c, uint64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void uncount(atomic_uint_fast64_t *c, uint64_t n) {
    atomic_fetch_sub_explicit(c, n, memory_order_relaxed);
}

static uint64_t read_count(atomic_uint_fast64_t *c) {
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void list_push(req_list *l, sched_req *r) {
    r->next_ = NULL;
    if (l->tail)
        l->tail->next_ = r;
    else
        l->head = r;
    l->tail = r;
}

static bool limits_valid(const sched_limits *l) {
    return l->max_batch_tokens >= 1 && l->max_batch_requests >= 1 && l->max_queue >= 1;
}

/* Milliseconds for a libuv timer to cover delta_ns, rounded up because a
 * timer may fire up to a millisecond early in real time; service() re-arms
 * when it woke too soon. */
static uint64_t timer_ms(uint64_t delta_ns) {
    uint64_t ms = (delta_ns + NS_PER_MS - 1) / NS_PER_MS;
    return ms ? ms : 1;
}

/* ---- the loop thread ------------------------------------------------------------ */

/* Moves the inbox to the queue tail. Called with mu held. */
static void splice_inbox(sched *s) {
    for (sched_req *r = s->inbox.head; r; r = r->next_) {
        s->q_tokens += r->n_tokens;
        s->q_seqs += r->n_seqs;
        if (r->deadline_ns && r->deadline_ns < s->next_deadline)
            s->next_deadline = r->deadline_ns;
    }
    if (!s->inbox.head)
        return;
    if (s->queue.tail)
        s->queue.tail->next_ = s->inbox.head;
    else
        s->queue.head = s->inbox.head;
    s->queue.tail = s->inbox.tail;
    s->inbox = (req_list){0};
}

/* Marks r as dropped with status and moves it to drops. */
static void drop(sched *s, sched_req *r, int status, uint64_t now, req_list *drops) {
    s->q_tokens -= r->n_tokens;
    s->q_seqs -= r->n_seqs;
    uncount(&s->depth, 1);
    r->status = status;
    r->start_ns = r->end_ns = now;
    r->batch_id = 0;
    list_push(drops, r);
}

/* Drops cancelled requests (when asked to look) and expired ones, and
 * recomputes the earliest deadline left. O(queue), run only when a cancel was
 * posted or a deadline passed, and the queue is bounded by max_queue. */
static void sweep(sched *s, bool cancels, uint64_t now, req_list *drops) {
    req_list kept = {0};
    s->next_deadline = NO_DEADLINE;
    sched_req *r = s->queue.head;
    while (r) {
        sched_req *next = r->next_;
        if (cancels && atomic_load_explicit(&r->cancel_, memory_order_relaxed))
            drop(s, r, SCHED_ECANCELED, now, drops);
        else if (r->deadline_ns && r->deadline_ns <= now)
            drop(s, r, SCHED_EDEADLINE, now, drops);
        else {
            list_push(&kept, r);
            if (r->deadline_ns && r->deadline_ns < s->next_deadline)
                s->next_deadline = r->deadline_ns;
        }
        r = next;
    }
    s->queue = kept;
}

static void drop_all(sched *s, int status, uint64_t now, req_list *drops) {
    while (s->queue.head) {
        sched_req *r = s->queue.head;
        s->queue.head = r->next_;
        drop(s, r, status, now, drops);
    }
    s->queue.tail = NULL;
    s->next_deadline = NO_DEADLINE;
}

/* Takes the queue head and, in order, the later requests of its group while
 * they fit; the first one always goes, so a request admitted under higher
 * limits than a reload set still runs (alone). Requests of other groups stay
 * queued in place. One queue for every group, not one per group, keeps
 * max_queue, deadlines, cancellation and draining exactly as they are, and
 * taking the oldest request's group first is fair without a round robin:
 * no group waits longer than the batches formed for requests older than its
 * own. Hands the batch to the compute thread. */
static void dispatch(sched *s, const sched_limits *lim) {
    sched_batch *b = &s->batches[s->next_buf];
    sched_req **slots = s->slots[s->next_buf];
    s->next_buf ^= 1;
    int32_t n = 0, seqs = 0, tokens = 0;
    const uint32_t group = s->queue.head->group;
    sched_req *prev = NULL;
    for (sched_req *r = s->queue.head; r;) {
        sched_req *next = r->next_;
        if (r->group != group) {
            prev = r;
            r = next;
            continue;
        }
        /* 64-bit sums: two int32 counts near the limit must not wrap. */
        if (n > 0 && ((int64_t)tokens + r->n_tokens > lim->max_batch_tokens ||
                      (int64_t)seqs + r->n_seqs > lim->max_batch_requests))
            break;
        if (prev)
            prev->next_ = next;
        else
            s->queue.head = next;
        if (s->queue.tail == r)
            s->queue.tail = prev;
        slots[n++] = r;
        seqs += r->n_seqs;
        tokens += r->n_tokens;
        r = next;
    }
    s->q_tokens -= tokens;
    s->q_seqs -= seqs;
    uncount(&s->depth, (uint64_t)n);
    count(&s->in_flight, (uint64_t)n);
    *b = (sched_batch){.reqs = slots,
                       .n_reqs = n,
                       .n_seqs = seqs,
                       .n_tokens = tokens,
                       .id = ++s->last_batch_id,
                       .group = group};
    s->running = b;
    pthread_mutex_lock(&s->mu);
    s->ready = b;
    pthread_cond_signal(&s->compute_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Continuous batching: a batch is formed the moment the compute thread is
 * free, from everything queued then (up to the limits), so a request that
 * reaches an idle engine starts at once and the ones that arrive during a
 * batch make up the next one. The only wait is the optional max_wait_us
 * linger after a batch: for that long after the last batch ended, a batch
 * that is not full waits for more (a full one, or any while draining, goes at
 * once). Fullness counts the whole queue, every group together: the batch
 * still takes the head's group only, but once the queue holds a batch's
 * worth of work, of one model or several, the engine has no reason to idle,
 * and waiting for the head's group alone to fill would hold that work behind
 * it. Returns the time a waiting batch becomes due, or 0. */
static uint64_t maybe_dispatch(sched *s, const sched_limits *lim, bool draining, uint64_t now) {
    if (s->running || !s->queue.head)
        return 0;
    bool full = s->q_tokens >= lim->max_batch_tokens || s->q_seqs >= lim->max_batch_requests;
    uint64_t due = s->last_end_ns + (uint64_t)lim->max_wait_us * NS_PER_US;
    if (!full && !draining && s->last_end_ns && now < due)
        return due;
    dispatch(s, lim);
    return 0;
}

/* Completes the requests of a finished batch: stats, observer, done. */
static void complete_batch(sched *s, sched_batch *b, int run_status) {
    int status = run_status == 0 ? SCHED_OK : SCHED_EBATCH;
    count(&s->n_batches, 1);
    count(&s->batch_reqs_sum, (uint64_t)b->n_reqs);
    count(&s->batch_seqs_sum, (uint64_t)b->n_seqs);
    count(&s->batch_tokens_sum, (uint64_t)b->n_tokens);
    count(&s->compute_ns_sum, b->end_ns - b->start_ns);
    for (int32_t i = 0; i < b->n_reqs; i++) {
        sched_req *r = b->reqs[i];
        r->status = status;
        r->start_ns = b->start_ns;
        r->end_ns = b->end_ns;
        r->batch_id = b->id;
        count(&s->queue_ns_sum, b->start_ns - r->enqueue_ns);
    }
    if (s->on_batch)
        s->on_batch(b, run_status, s->observer_ctx);
    for (int32_t i = 0; i < b->n_reqs; i++) {
        sched_req *r = b->reqs[i];
        uncount(&s->in_flight, 1);
        count(status == SCHED_OK ? &s->completed : &s->failed, 1);
        r->done(r, status); /* may free r */
    }
}

static void complete_drops(sched *s, req_list *drops) {
    sched_req *r = drops->head;
    while (r) {
        sched_req *next = r->next_; /* done may free r */
        switch (r->status) {
        case SCHED_ECANCELED:
            count(&s->cancelled, 1);
            break;
        case SCHED_EDEADLINE:
            count(&s->timed_out, 1);
            break;
        default:
            count(&s->shut_down, 1);
            break;
        }
        r->done(r, r->status);
        r = next;
    }
}

/* Reports a finished drain once: to sched_wait_drained and the callback. */
static void report_drained(sched *s) {
    pthread_mutex_lock(&s->mu);
    s->drained = true;
    sched_drained_fn cb = s->drained_cb;
    void *ctx = s->drained_ctx;
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
    s->drain_reported = true;
    if (cb)
        cb(ctx);
}

static void close_handles(sched *s) {
    s->closing = true;
    uv_close((uv_handle_t *)&s->wake, NULL);
    uv_close((uv_handle_t *)&s->wait_timer, NULL);
    uv_close((uv_handle_t *)&s->deadline_timer, NULL);
}

static void arm(uv_timer_t *t, uv_timer_cb cb, uint64_t at, uint64_t now) {
    if (at && at != NO_DEADLINE)
        uv_timer_start(t, cb, timer_ms(at > now ? at - now : 0), 0);
    else
        uv_timer_stop(t);
}

static void on_wait_timer(uv_timer_t *t);
static void on_deadline_timer(uv_timer_t *t);

static void service(sched *s) {
    pthread_mutex_lock(&s->mu);
    splice_inbox(s);
    sched_limits lim = s->limits;
    bool draining = s->draining;
    bool stopping = s->stopping;
    bool finished = s->batch_finished;
    int run_status = s->batch_status;
    s->batch_finished = false;
    pthread_mutex_unlock(&s->mu);

    /* A finished batch frees the compute thread for the next one. */
    sched_batch *done_batch = finished ? s->running : NULL;
    if (finished) {
        s->running = NULL;
        s->last_end_ns = done_batch->end_ns;
    }
    uint64_t now = sched_now_ns();
    req_list drops = {0};
    bool cancels = atomic_exchange(&s->cancel_pending, false);
    if (stopping)
        drop_all(s, SCHED_ESHUTDOWN, now, &drops);
    else if (cancels || now >= s->next_deadline)
        sweep(s, cancels, now, &drops);
    /* The next batch starts before the last one's callbacks run. */
    uint64_t due = maybe_dispatch(s, &lim, draining, now);
    if (done_batch)
        complete_batch(s, done_batch, run_status);
    complete_drops(s, &drops);

    /* A done callback may have queued a continuation (in the inbox until
     * the next pass, which its wake-up brings): not idle yet. */
    pthread_mutex_lock(&s->mu);
    const bool inbox_empty = !s->inbox.head;
    pthread_mutex_unlock(&s->mu);
    bool idle = !s->running && !s->queue.head && inbox_empty;
    if (draining && idle && !s->drain_reported)
        report_drained(s);
    if (stopping && idle) {
        close_handles(s);
        return;
    }
    uv_update_time(&s->loop);
    now = sched_now_ns();
    arm(&s->wait_timer, on_wait_timer, due, now);
    arm(&s->deadline_timer, on_deadline_timer, s->next_deadline, now);
}

static void on_wake(uv_async_t *a) {
    service(a->data);
}
static void on_wait_timer(uv_timer_t *t) {
    service(t->data);
}
static void on_deadline_timer(uv_timer_t *t) {
    service(t->data);
}

static void *loop_main(void *arg) {
    sched *s = arg;
    pthread_setname_np(pthread_self(), "attn-loop");
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- the compute thread ------------------------------------------------------------ */

static void *compute_main(void *arg) {
    sched *s = arg;
    pthread_setname_np(pthread_self(), "attn-compute");
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->call) {
            /* Between batches by construction: this thread runs both. */
            call_slot *c = s->call;
            s->call = NULL;
            pthread_mutex_unlock(&s->mu);
            int result = c->fn(c->arg);
            pthread_mutex_lock(&s->mu);
            c->result = result;
            c->finished = true;
            pthread_cond_broadcast(&s->idle_cv);
        } else if (s->ready) {
            sched_batch *b = s->ready;
            s->ready = NULL;
            pthread_mutex_unlock(&s->mu);
            b->start_ns = sched_now_ns();
            int status = s->run_batch(b, s->run_ctx);
            b->end_ns = sched_now_ns();
            pthread_mutex_lock(&s->mu);
            s->batch_status = status;
            s->batch_finished = true;
            uv_async_send(&s->wake);
        } else if (s->compute_stop) {
            break;
        } else {
            pthread_cond_wait(&s->compute_cv, &s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------- */

/* Closes the loop's handles and the loop from the calling thread; used when
 * the loop thread never started. */
static void close_loop_here(sched *s) {
    close_handles(s);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
}

static void stop_compute(sched *s) {
    pthread_mutex_lock(&s->mu);
    s->compute_stop = true;
    pthread_cond_signal(&s->compute_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->compute_thread, NULL);
}

static void free_sched(sched *s) {
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->compute_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->slots[0]);
    free(s->slots[1]);
    free(s);
}

/* The sync primitives; idle_cv waits against CLOCK_MONOTONIC, the clock of
 * every time here, so a wall-clock step cannot stretch a drain timeout. */
static int init_sync(sched *s) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr))
        return SCHED_ESYS;
    int rc = SCHED_ESYS;
    if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC))
        goto out;
    if (pthread_mutex_init(&s->mu, NULL))
        goto out;
    if (pthread_cond_init(&s->compute_cv, NULL)) {
        pthread_mutex_destroy(&s->mu);
        goto out;
    }
    if (pthread_cond_init(&s->idle_cv, &attr)) {
        pthread_cond_destroy(&s->compute_cv);
        pthread_mutex_destroy(&s->mu);
        goto out;
    }
    rc = SCHED_OK;
out:
    pthread_condattr_destroy(&attr);
    return rc;
}

static int init_loop(sched *s) {
    if (uv_loop_init(&s->loop))
        return SCHED_ESYS;
    if (uv_async_init(&s->loop, &s->wake, on_wake)) {
        uv_loop_close(&s->loop);
        return SCHED_ESYS;
    }
    uv_timer_init(&s->loop, &s->wait_timer);
    uv_timer_init(&s->loop, &s->deadline_timer);
    s->wake.data = s->wait_timer.data = s->deadline_timer.data = s;
    return SCHED_OK;
}

int sched_create(sched **out, const sched_config *cfg) {
    if (!out || !cfg || !cfg->run_batch || !limits_valid(&cfg->limits))
        return SCHED_EINVAL;
    *out = NULL;
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return SCHED_ENOMEM;
    s->run_batch = cfg->run_batch;
    s->run_ctx = cfg->run_ctx;
    s->on_batch = cfg->on_batch;
    s->observer_ctx = cfg->observer_ctx;
    s->limits = cfg->limits;
    s->cap_tokens = cfg->limits.max_batch_tokens;
    s->cap_seqs = cfg->limits.max_batch_requests;
    s->next_deadline = NO_DEADLINE;
    /* A batch holds at most max_batch_requests sequences, each request at
     * least one, so that many slots hold any batch. */
    s->slots[0] = calloc((size_t)s->cap_seqs, sizeof(sched_req *));
    s->slots[1] = calloc((size_t)s->cap_seqs, sizeof(sched_req *));
    if (!s->slots[0] || !s->slots[1]) {
        free(s->slots[0]);
        free(s->slots[1]);
        free(s);
        return SCHED_ENOMEM;
    }
    int rc = init_sync(s);
    if (rc) {
        free(s->slots[0]);
        free(s->slots[1]);
        free(s);
        return rc;
    }
    rc = init_loop(s);
    if (rc) {
        free_sched(s);
        return rc;
    }
    if (pthread_create(&s->compute_thread, NULL, compute_main, s)) {
        close_loop_here(s);
        free_sched(s);
        return SCHED_ESYS;
    }
    if (pthread_create(&s->loop_thread, NULL, loop_main, s)) {
        stop_compute(s);
        close_loop_here(s);
        free_sched(s);
        return SCHED_ESYS;
    }
    *out = s;
    return SCHED_OK;
}

void sched_destroy(sched *s) {
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    uv_async_send(&s->wake);
    pthread_mutex_unlock(&s->mu);
    /* The loop completes the queue with SCHED_ESHUTDOWN, waits for a running
     * batch, closes its handles and returns. */
    pthread_join(s->loop_thread, NULL);
    uv_loop_close(&s->loop);
    stop_compute(s);
    free_sched(s);
}

/* ---- requests ------------------------------------------------------------------------ */

/* A continuation is the next part of work already accepted: neither a
 * drain nor a full queue refuses it (refusing would lose an accepted
 * request), and it is checked against the ceilings the buffers are sized
 * for, as a request queued before a reload lowered the limits is. */
static int submit(sched *s, sched_req *req, bool continuation) {
    if (!s || !req || !req->done || req->n_tokens < 1 || req->n_seqs < 1)
        return SCHED_EINVAL;
    pthread_mutex_lock(&s->mu);
    int rc = SCHED_OK;
    const int32_t max_tokens = continuation ? s->cap_tokens : s->limits.max_batch_tokens;
    const int32_t max_seqs = continuation ? s->cap_seqs : s->limits.max_batch_requests;
    if (s->stopping)
        rc = SCHED_ESHUTDOWN;
    else if (s->draining && !continuation)
        rc = SCHED_EDRAINING;
    else if (req->n_tokens > max_tokens || req->n_seqs > max_seqs)
        rc = SCHED_ETOOBIG;
    else if (read_count(&s->depth) >= s->limits.max_queue && !continuation)
        rc = SCHED_EFULL;
    if (rc == SCHED_OK) {
        req->status = SCHED_OK;
        req->enqueue_ns = sched_now_ns();
        req->start_ns = req->end_ns = req->batch_id = 0;
        atomic_store_explicit(&req->cancel_, 0, memory_order_relaxed);
        list_push(&s->inbox, req);
        count(&s->depth, 1);
        count(&s->accepted, 1);
        uv_async_send(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    switch (rc) {
    case SCHED_EFULL:
        count(&s->rejected_full, 1);
        break;
    case SCHED_ETOOBIG:
        count(&s->rejected_too_big, 1);
        break;
    case SCHED_EDRAINING:
    case SCHED_ESHUTDOWN:
        count(&s->rejected_closed, 1);
        break;
    }
    return rc;
}

int sched_submit(sched *s, sched_req *req) {
    return submit(s, req, false);
}

int sched_submit_continuation(sched *s, sched_req *req) {
    return submit(s, req, true);
}

void sched_get_limits(sched *s, sched_limits *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->limits;
    pthread_mutex_unlock(&s->mu);
}

int sched_cancel(sched *s, sched_req *req) {
    if (!s || !req)
        return SCHED_EINVAL;
    /* Only a flag on the request and a wake-up: the scheduler keeps no
     * pointer to req beyond its queue, so a cancel can never outlive it. */
    atomic_store_explicit(&req->cancel_, 1, memory_order_relaxed);
    pthread_mutex_lock(&s->mu);
    if (!s->stopping) {
        atomic_store(&s->cancel_pending, true);
        uv_async_send(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    return SCHED_OK;
}

/* ---- drain, reload, compute-thread calls ----------------------------------------------- */

int sched_drain(sched *s, sched_drained_fn cb, void *ctx) {
    if (!s)
        return SCHED_EINVAL;
    pthread_mutex_lock(&s->mu);
    int rc = SCHED_EDRAINING;
    if (!s->draining) {
        s->draining = true;
        s->drained_cb = cb;
        s->drained_ctx = ctx;
        if (!s->stopping)
            uv_async_send(&s->wake);
        rc = SCHED_OK;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sched_wait_drained(sched *s, int64_t timeout_ms) {
    if (!s)
        return SCHED_EINVAL;
    struct timespec until = {0};
    if (timeout_ms >= 0)
        until = ticks_after_ms(CLOCK_MONOTONIC, timeout_ms); /* idle_cv's clock */
    pthread_mutex_lock(&s->mu);
    int rc = s->draining ? SCHED_OK : SCHED_EINVAL;
    while (rc == SCHED_OK && !s->drained) {
        if (timeout_ms < 0)
            pthread_cond_wait(&s->idle_cv, &s->mu);
        else if (pthread_cond_timedwait(&s->idle_cv, &s->mu, &until) == ETIMEDOUT)
            rc = s->drained ? SCHED_OK : SCHED_ETIMEDOUT;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sched_set_limits(sched *s, const sched_limits *limits) {
    if (!s || !limits || !limits_valid(limits) || limits->max_batch_tokens > s->cap_tokens ||
        limits->max_batch_requests > s->cap_seqs)
        return SCHED_EINVAL;
    pthread_mutex_lock(&s->mu);
    s->limits = *limits;
    /* A lower limit may make the queued work a full batch now. */
    if (!s->stopping)
        uv_async_send(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return SCHED_OK;
}

int sched_call(sched *s, sched_call_fn fn, void *arg) {
    if (!s || !fn)
        return SCHED_EINVAL;
    call_slot c = {.fn = fn, .arg = arg};
    pthread_mutex_lock(&s->mu);
    /* One call posted at a time; later callers queue up behind it. */
    while (s->call && !s->stopping)
        pthread_cond_wait(&s->idle_cv, &s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return SCHED_ESHUTDOWN;
    }
    /* c lives on this stack until it has run: this function waits for it. */
    /* cppcheck-suppress autoVariables */
    s->call = &c;
    pthread_cond_signal(&s->compute_cv);
    while (!c.finished)
        pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return c.result;
}

/* ---- stats ------------------------------------------------------------------------------- */

void sched_stats_get(sched *s, sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    out->limits = s->limits;
    out->draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    out->queue_depth = read_count(&s->depth);
    out->in_flight = read_count(&s->in_flight);
    out->accepted = read_count(&s->accepted);
    out->rejected_full = read_count(&s->rejected_full);
    out->rejected_too_big = read_count(&s->rejected_too_big);
    out->rejected_closed = read_count(&s->rejected_closed);
    out->completed = read_count(&s->completed);
    out->failed = read_count(&s->failed);
    out->timed_out = read_count(&s->timed_out);
    out->cancelled = read_count(&s->cancelled);
    out->shut_down = read_count(&s->shut_down);
    out->batches = read_count(&s->n_batches);
    out->batch_reqs_sum = read_count(&s->batch_reqs_sum);
    out->batch_seqs_sum = read_count(&s->batch_seqs_sum);
    out->batch_tokens_sum = read_count(&s->batch_tokens_sum);
    out->compute_ns_sum = read_count(&s->compute_ns_sum);
    out->queue_ns_sum = read_count(&s->queue_ns_sum);
}

/* test_scheduler.c — the batching policy and the lifecycle of the scheduler.
 *
 * Batches are made deterministic with a gate: run_batch blocks the first
 * ("blocker") batch until the test opens the gate, so everything submitted
 * meanwhile is queued when the next batch forms. Timing tests assert order
 * and causality (a lingering batch never starts before max_wait after the
 * last batch ended), never tight bounds; a wait that must not happen is set
 * longer than the test's timeout, so honouring it fails the test. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "server/work/scheduler.h"

#define MAX_REQS     8192
#define MAX_BATCHES  8192
#define MAX_IN_BATCH 64
#define WAIT_MS      5000 /* bound on any wait; a pass takes milliseconds */
#define MS           1000000ull

typedef struct harness harness;

typedef struct treq {
    sched_req req;
    harness *h;
    int id;
    int thread; /* submitting thread in the stress test */
    int seq;    /* its index within that thread */
    int done_calls;
    int status;
    int ran;
} treq;

struct harness {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sched *s;
    bool gated; /* the first batch waits for open_gate */
    bool gate_open;
    int hold;        /* batches [0, hold) each wait for their own release_batch */
    int released;    /* batches released so far */
    int fail_status; /* run_batch's return */
    int entered;     /* batches that reached run_batch */
    bool in_batch;
    pthread_t compute_thread;
    int n_batches;
    int batch_n[MAX_BATCHES];
    int batch_ids[MAX_BATCHES][MAX_IN_BATCH];
    int batch_tokens[MAX_BATCHES];
    int batch_seqs[MAX_BATCHES];
    uint32_t batch_group[MAX_BATCHES];
    bool groups_mixed;  /* a batch held a request of a group other than its own */
    bool limits_broken; /* a batch over max_batch_tokens/requests */
    int32_t check_tokens, check_seqs;
    int stream_last[8]; /* stress: last seq run per thread */
    bool fifo_broken;
    bool callback_broken; /* criterion asserts only on the test's own thread */
    bool submit_broken;
    int completions;
    int drained_calls;
    int observed;
    int call_ran;
    bool call_during_batch;
    pthread_t call_thread;
    treq reqs[MAX_REQS];
};

static harness *H;

static void lock(harness *h) {
    pthread_mutex_lock(&h->mu);
}
static void unlock(harness *h) {
    pthread_mutex_unlock(&h->mu);
}

static void deadline_in(struct timespec *ts, long ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits (bounded) until cond holds under the harness lock. */
#define WAIT_FOR(h, cond)                                                                          \
    do {                                                                                           \
        struct timespec until_;                                                                    \
        deadline_in(&until_, WAIT_MS);                                                             \
        lock(h);                                                                                   \
        while (!(cond) && pthread_cond_timedwait(&(h)->cv, &(h)->mu, &until_) != ETIMEDOUT)        \
            ;                                                                                      \
        bool ok_ = (cond);                                                                         \
        unlock(h);                                                                                 \
        cr_assert(ok_, "timed out waiting for %s", #cond);                                         \
    } while (0)

static int run_batch(const sched_batch *b, void *ctx) {
    harness *h = ctx;
    lock(h);
    h->compute_thread = pthread_self();
    const int nth = h->n_batches++;
    int k = nth % MAX_BATCHES;
    h->batch_n[k] = b->n_reqs;
    h->batch_group[k] = b->group;
    h->batch_tokens[k] = b->n_tokens;
    h->batch_seqs[k] = b->n_seqs;
    int32_t tokens = 0, seqs = 0;
    for (int i = 0; i < b->n_reqs; i++) {
        treq *t = SCHED_CONTAINER_OF(b->reqs[i], treq, req);
        if (i < MAX_IN_BATCH)
            h->batch_ids[k][i] = t->id;
        t->ran++;
        tokens += t->req.n_tokens;
        seqs += t->req.n_seqs;
        if (t->req.group != b->group || t->req.group != b->reqs[0]->group)
            h->groups_mixed = true;
        if (t->seq <= h->stream_last[t->thread])
            h->fifo_broken = true;
        h->stream_last[t->thread] = t->seq;
    }
    if (tokens != b->n_tokens || seqs != b->n_seqs ||
        (h->check_tokens && (tokens > h->check_tokens || seqs > h->check_seqs)))
        h->limits_broken = true;
    h->entered++;
    h->in_batch = true;
    pthread_cond_broadcast(&h->cv);
    while ((h->gated && !h->gate_open) || (nth < h->hold && nth >= h->released))
        pthread_cond_wait(&h->cv, &h->mu);
    h->gated = false;
    h->in_batch = false;
    int rc = h->fail_status;
    unlock(h);
    return rc;
}

static void on_done(sched_req *r, int status) {
    treq *t = SCHED_CONTAINER_OF(r, treq, req);
    harness *h = t->h;
    lock(h);
    t->done_calls++;
    t->status = status;
    if (r->status != status)
        h->callback_broken = true;
    h->completions++;
    pthread_cond_broadcast(&h->cv);
    unlock(h);
}

static void on_batch(const sched_batch *b, int run_status, void *ctx) {
    harness *h = ctx;
    (void)run_status;
    lock(h);
    h->observed++;
    if (b->end_ns < b->start_ns)
        h->callback_broken = true;
    unlock(h);
}

static void on_drained(void *ctx) {
    harness *h = ctx;
    lock(h);
    h->drained_calls++;
    pthread_cond_broadcast(&h->cv);
    unlock(h);
}

static sched_limits limits(int32_t tokens, int32_t seqs, uint32_t wait_us, uint32_t queue) {
    return (sched_limits){.max_batch_tokens = tokens,
                          .max_batch_requests = seqs,
                          .max_wait_us = wait_us,
                          .max_queue = queue};
}

static void setup(void) {
    H = calloc(1, sizeof *H);
    cr_assert_not_null(H);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&H->mu, NULL);
    pthread_cond_init(&H->cv, &attr);
    pthread_condattr_destroy(&attr);
    for (int i = 0; i < MAX_REQS; i++) {
        H->reqs[i].h = H;
        H->reqs[i].id = i;
        H->reqs[i].seq = i;
    }
    for (int i = 0; i < 8; i++)
        H->stream_last[i] = -1;
}

static void teardown(void) {
    sched_destroy(H->s);
    cr_expect_not(H->callback_broken);
    cr_expect_not(H->groups_mixed, "a batch held requests of two groups");
    pthread_cond_destroy(&H->cv);
    pthread_mutex_destroy(&H->mu);
    free(H);
    H = NULL;
}

TestSuite(scheduler, .init = setup, .fini = teardown, .timeout = 20);

static void start(sched_limits lim, bool gated) {
    H->gated = gated;
    sched_config cfg = {.limits = lim,
                        .run_batch = run_batch,
                        .run_ctx = H,
                        .on_batch = on_batch,
                        .observer_ctx = H};
    cr_assert_eq(sched_create(&H->s, &cfg), SCHED_OK);
}

static int submit(int id, int32_t tokens, int32_t seqs, uint64_t deadline) {
    treq *t = &H->reqs[id];
    sched_req_init(&t->req, tokens, seqs, deadline, on_done);
    return sched_submit(H->s, &t->req);
}

/* Submits request 0 as a blocker of the given size and waits until it runs. */
static void block_with(int32_t tokens) {
    cr_assert_eq(submit(0, tokens, 1, 0), SCHED_OK);
    WAIT_FOR(H, H->entered == 1);
}

/* A one-token blocker (the first batch never waits: the engine is idle). */
static void block(void) {
    block_with(1);
}

/* Lets the oldest held batch (see hold) finish. */
static void release_batch(void) {
    lock(H);
    H->released++;
    pthread_cond_broadcast(&H->cv);
    unlock(H);
}

static int submit_in(int id, uint32_t group, int32_t tokens, uint64_t deadline) {
    treq *t = &H->reqs[id];
    sched_req_init(&t->req, tokens, 1, deadline, on_done);
    t->req.group = group;
    return sched_submit(H->s, &t->req);
}

static void expect_group(int k, uint32_t group) {
    lock(H);
    cr_expect_eq(H->batch_group[k], group, "batch %d is group %u, want %u", k, H->batch_group[k],
                 group);
    unlock(H);
}

static void open_gate(void) {
    lock(H);
    H->gate_open = true;
    pthread_cond_broadcast(&H->cv);
    unlock(H);
}

static void expect_batch(int k, const int *ids, int n) {
    lock(H);
    cr_expect_eq(H->batch_n[k], n, "batch %d has %d requests, want %d", k, H->batch_n[k], n);
    for (int i = 0; i < n && i < H->batch_n[k]; i++)
        cr_expect_eq(H->batch_ids[k][i], ids[i], "batch %d slot %d", k, i);
    unlock(H);
}

/* Every request in [0, n) completed exactly once with the given status. */
static void expect_all_done(int from, int to, int status) {
    lock(H);
    for (int i = from; i < to; i++) {
        cr_expect_eq(H->reqs[i].done_calls, 1, "request %d done %d times", i,
                     H->reqs[i].done_calls);
        cr_expect_eq(H->reqs[i].status, status, "request %d: %s", i,
                     sched_errname(H->reqs[i].status));
    }
    unlock(H);
}

/* accepted == sum of outcomes once idle. */
static void expect_accounted(void) {
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.queue_depth, 0);
    cr_expect_eq(st.in_flight, 0);
    cr_expect_eq(st.accepted, st.completed + st.failed + st.timed_out + st.cancelled + st.shut_down,
                 "accepted %lu != outcomes", (unsigned long)st.accepted);
}

Test(scheduler, token_budget) {
    start(limits(100, 64, 0, 64), true);
    block();
    const int32_t tokens[] = {40, 40, 40, 30, 50, 10};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(submit(1 + i, tokens[i], 1, 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 7);
    /* FIFO without skipping: a batch closes at the first request that does
     * not fit, even when a later, smaller one would. */
    expect_batch(1, (int[]){1, 2}, 2);
    expect_batch(2, (int[]){3, 4}, 2);
    expect_batch(3, (int[]){5, 6}, 2);
    lock(H);
    cr_expect_eq(H->n_batches, 4);
    cr_expect_eq(H->batch_tokens[1], 80);
    cr_expect_eq(H->batch_tokens[3], 60);
    unlock(H);
    expect_all_done(0, 7, SCHED_OK);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.batches, 4);
    cr_expect_eq(st.batch_tokens_sum, 1 + 40 + 40 + 40 + 30 + 50 + 10);
    cr_expect_eq(st.batch_reqs_sum, 7);
    expect_accounted();
}

Test(scheduler, request_limit_counts_sequences) {
    start(limits(1000, 3, 0, 64), true);
    block();
    const int32_t seqs[] = {1, 1, 1, 1, 2, 1};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(submit(1 + i, 5 * seqs[i], seqs[i], 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 7);
    expect_batch(1, (int[]){1, 2, 3}, 3);
    expect_batch(2, (int[]){4, 5}, 2);
    expect_batch(3, (int[]){6}, 1);
    lock(H);
    cr_expect_eq(H->batch_seqs[2], 3);
    unlock(H);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.batch_seqs_sum, 1 + 7);
}

/* Longer than any test may run: a batch that honoured such a wait would time
 * the test out, so finishing at all proves it did not wait. */
#define FOREVER_US (60u * 1000 * 1000)

Test(scheduler, idle_engine_starts_a_request_at_once) {
    /* Continuous batching: the linger applies only after a batch, so the
     * first request on an idle engine goes alone and at once. */
    start(limits(1000, 64, FOREVER_US, 64), false);
    cr_assert_eq(submit(1, 4, 1, 0), SCHED_OK);
    WAIT_FOR(H, H->completions == 1);
    sched_req *r = &H->reqs[1].req;
    cr_expect_eq(r->batch_id, 1);
    cr_expect_geq(r->start_ns, r->enqueue_ns);
    cr_expect_geq(r->end_ns, r->start_ns);
    expect_batch(0, (int[]){1}, 1);
}

Test(scheduler, arrivals_during_a_batch_form_the_next_at_once) {
    /* No linger: what queued during the blocker goes the moment it ends, all
     * of it in one batch (limits allowing). */
    start(limits(1000, 64, 0, 64), true);
    block();
    for (int i = 1; i <= 5; i++)
        cr_assert_eq(submit(i, 3, 1, 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 6);
    expect_batch(1, (int[]){1, 2, 3, 4, 5}, 5);
    lock(H);
    cr_expect_eq(H->n_batches, 2);
    unlock(H);
    /* The next batch started no earlier than the blocker ended. */
    cr_expect_geq(H->reqs[1].req.start_ns, H->reqs[0].req.end_ns);
}

Test(scheduler, full_batch_skips_the_linger) {
    /* The linger after the blocker outlasts the test: only fullness (or a
     * drain) can send the next batches. */
    start(limits(1000, 2, FOREVER_US, 64), true);
    block();
    cr_assert_eq(submit(1, 3, 1, 0), SCHED_OK);
    cr_assert_eq(submit(2, 3, 1, 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 3);
    expect_batch(1, (int[]){1, 2}, 2);
    /* The token budget fills a batch too. */
    cr_assert_eq(submit(3, 1000, 1, 0), SCHED_OK);
    WAIT_FOR(H, H->completions == 4);
    expect_batch(2, (int[]){3}, 1);
}

Test(scheduler, linger_after_a_batch_gathers_late_arrivals) {
    const uint32_t wait_us = 1000 * 1000;
    /* Both arrive within the linger that follows the blocker, so they wait
     * for its end and run together. The linger is endless while they are
     * submitted and 1 s after: a test thread descheduled for a second
     * between the two submits cannot split them, and the lowered linger,
     * counted from the blocker's end, is what the batch waits for. */
    start(limits(1000, 64, FOREVER_US, 64), true);
    block();
    open_gate();
    WAIT_FOR(H, H->completions == 1);
    cr_assert_eq(submit(1, 4, 1, 0), SCHED_OK);
    cr_assert_eq(submit(2, 4, 1, 0), SCHED_OK);
    const sched_limits lowered = limits(1000, 64, wait_us, 64);
    cr_assert_eq(sched_set_limits(H->s, &lowered), SCHED_OK);
    WAIT_FOR(H, H->completions == 3);
    expect_batch(1, (int[]){1, 2}, 2);
    sched_req *r = &H->reqs[1].req;
    const uint64_t blocker_end = H->reqs[0].req.end_ns;
    cr_expect_geq(r->start_ns, blocker_end + (uint64_t)wait_us * 1000,
                  "started %ld ns after the blocker ended", (long)(r->start_ns - blocker_end));
}

Test(scheduler, lowered_linger_applies_to_the_waiting_batch) {
    /* A reload that drops max_wait_us to 0 releases a lingering batch. */
    start(limits(1000, 64, FOREVER_US, 64), true);
    block();
    open_gate();
    WAIT_FOR(H, H->completions == 1);
    cr_assert_eq(submit(1, 4, 1, 0), SCHED_OK);
    nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000}, NULL);
    lock(H);
    cr_expect_eq(H->entered, 1, "the request did not linger");
    unlock(H);
    cr_assert_eq(sched_set_limits(H->s, &(sched_limits){1000, 64, 0, 64}), SCHED_OK);
    WAIT_FOR(H, H->completions == 2);
}

Test(scheduler, fifo_order) {
    start(limits(1000, 4, 0, 256), true);
    block();
    for (int i = 1; i <= 40; i++)
        cr_assert_eq(submit(i, 1 + i % 5, 1, 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 41);
    lock(H);
    int next = 0;
    for (int k = 0; k < H->n_batches; k++) {
        cr_expect_leq(H->batch_n[k], 4);
        for (int i = 0; i < H->batch_n[k]; i++)
            cr_expect_eq(H->batch_ids[k][i], next++);
    }
    cr_expect_eq(next, 41);
    cr_expect_eq(H->n_batches, 11);
    unlock(H);
}

Test(scheduler, deadline_expired_while_queued) {
    start(limits(1000, 64, 0, 64), true);
    block();
    uint64_t now = sched_now_ns();
    cr_assert_eq(submit(1, 2, 1, 0), SCHED_OK);
    cr_assert_eq(submit(2, 2, 1, now + 30 * MS), SCHED_OK);
    cr_assert_eq(submit(3, 2, 1, now - 1), SCHED_OK); /* already past */
    cr_assert_eq(submit(4, 2, 1, now + 60000 * MS), SCHED_OK);
    /* Dropped while the blocker still runs: the deadline timer fires on its
     * own, the request does not wait to reach the head of the queue. */
    WAIT_FOR(H, H->reqs[2].done_calls == 1 && H->reqs[3].done_calls == 1);
    lock(H);
    cr_expect_eq(H->entered, 1);
    cr_expect_eq(H->reqs[2].status, SCHED_EDEADLINE);
    cr_expect_eq(H->reqs[3].status, SCHED_EDEADLINE);
    unlock(H);
    sched_req *r = &H->reqs[2].req;
    cr_expect_geq(r->end_ns, r->deadline_ns);
    cr_expect_eq(r->start_ns, r->end_ns);
    cr_expect_eq(r->batch_id, 0);
    open_gate();
    WAIT_FOR(H, H->completions == 5);
    expect_batch(1, (int[]){1, 4}, 2);
    lock(H);
    cr_expect_eq(H->reqs[2].ran, 0);
    cr_expect_eq(H->reqs[3].ran, 0);
    unlock(H);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.timed_out, 2);
    cr_expect_eq(st.completed, 3);
    expect_accounted();
}

Test(scheduler, cancel_queued_only) {
    start(limits(1000, 64, 0, 64), true);
    block();
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(submit(i, 2, 1, 0), SCHED_OK);
    cr_assert_eq(sched_cancel(H->s, &H->reqs[2].req), SCHED_OK);
    WAIT_FOR(H, H->reqs[2].done_calls == 1);
    /* The running blocker cannot be cancelled; it completes normally. */
    cr_assert_eq(sched_cancel(H->s, &H->reqs[0].req), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 4);
    lock(H);
    cr_expect_eq(H->reqs[2].status, SCHED_ECANCELED);
    cr_expect_eq(H->reqs[2].ran, 0);
    cr_expect_eq(H->reqs[0].status, SCHED_OK);
    unlock(H);
    expect_batch(1, (int[]){1, 3}, 2);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.cancelled, 1);
    cr_expect_eq(sched_cancel(NULL, &H->reqs[1].req), SCHED_EINVAL);
    expect_accounted();
}

Test(scheduler, queue_full_rejects) {
    start(limits(1000, 64, 0, 3), true);
    block();
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(submit(i, 2, 1, 0), SCHED_OK);
    cr_expect_eq(submit(4, 2, 1, 0), SCHED_EFULL);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.rejected_full, 1);
    cr_expect_eq(st.queue_depth, 3);
    cr_expect_eq(st.in_flight, 1);
    cr_expect_eq(st.accepted, 4);
    open_gate();
    WAIT_FOR(H, H->completions == 4);
    cr_expect_eq(H->reqs[4].done_calls, 0);
    cr_expect_eq(submit(5, 2, 1, 0), SCHED_OK);
    WAIT_FOR(H, H->completions == 5);
    expect_accounted();
}

Test(scheduler, invalid_and_too_big) {
    start(limits(100, 4, 0, 8), false);
    cr_expect_eq(submit(1, 101, 1, 0), SCHED_ETOOBIG);
    cr_expect_eq(submit(2, 10, 5, 0), SCHED_ETOOBIG);
    cr_expect_eq(submit(3, 0, 1, 0), SCHED_EINVAL);
    cr_expect_eq(submit(4, 1, 0, 0), SCHED_EINVAL);
    sched_req_init(&H->reqs[5].req, 1, 1, 0, NULL);
    cr_expect_eq(sched_submit(H->s, &H->reqs[5].req), SCHED_EINVAL);
    cr_expect_eq(submit(6, 100, 4, 0), SCHED_OK);
    WAIT_FOR(H, H->completions == 1);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.rejected_too_big, 2);
    cr_expect_eq(st.accepted, 1);

    sched *s = NULL;
    sched_config bad = {.limits = limits(0, 4, 0, 8), .run_batch = run_batch};
    cr_expect_eq(sched_create(&s, &bad), SCHED_EINVAL);
    bad.limits = limits(10, 4, 0, 0);
    cr_expect_eq(sched_create(&s, &bad), SCHED_EINVAL);
    bad = (sched_config){.limits = limits(10, 4, 0, 8)};
    cr_expect_eq(sched_create(&s, &bad), SCHED_EINVAL);
    cr_expect_null(s);
    cr_expect_eq(sched_wait_drained(H->s, 0), SCHED_EINVAL); /* no drain asked */
}

Test(scheduler, error_strings) {
    cr_expect_str_eq(sched_strerror(SCHED_EFULL), "queue full");
    cr_expect_str_eq(sched_errname(SCHED_EDEADLINE), "SCHED_EDEADLINE");
    cr_expect_str_eq(sched_strerror(-999), "unknown error");
    cr_expect_str_eq(sched_errname(-999), "SCHED_E?");
    for (int e = SCHED_OK; e >= SCHED_ETIMEDOUT; e--)
        cr_expect_str_neq(sched_strerror(e), "unknown error", "code %d", e);
}

Test(scheduler, batch_failure_completes_every_request) {
    H->fail_status = -42;
    start(limits(1000, 64, 0, 64), true);
    block();
    cr_assert_eq(submit(1, 2, 1, 0), SCHED_OK);
    cr_assert_eq(submit(2, 2, 1, 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 3);
    expect_all_done(0, 3, SCHED_EBATCH);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.failed, 3);
    cr_expect_eq(st.completed, 0);
    expect_accounted();
}

Test(scheduler, drain_with_work_in_flight) {
    /* A long max_wait proves a drain does not wait for batches to fill. */
    start(limits(1000, 4, FOREVER_US, 64), true);
    block_with(1000);
    for (int i = 1; i <= 10; i++)
        cr_assert_eq(submit(i, 2, 1, 0), SCHED_OK);
    cr_assert_eq(sched_drain(H->s, on_drained, H), SCHED_OK);
    cr_expect_eq(sched_drain(H->s, NULL, NULL), SCHED_EDRAINING);
    cr_expect_eq(submit(11, 2, 1, 0), SCHED_EDRAINING);
    /* Work is still running, so the drain cannot have finished. */
    cr_expect_eq(sched_wait_drained(H->s, 20), SCHED_ETIMEDOUT);
    lock(H);
    cr_expect_eq(H->drained_calls, 0);
    unlock(H);
    open_gate();
    cr_expect_eq(sched_wait_drained(H->s, WAIT_MS), SCHED_OK);
    WAIT_FOR(H, H->drained_calls == 1);
    lock(H);
    cr_expect_eq(H->completions, 11);
    cr_expect_eq(H->n_batches, 4); /* blocker, then 4 + 4 + 2 */
    unlock(H);
    expect_all_done(0, 11, SCHED_OK);
    cr_expect_eq(H->reqs[11].done_calls, 0);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect(st.draining);
    cr_expect_eq(st.rejected_closed, 1);
    expect_accounted();
}

/* The next piece of a request already accepted (a request split over
 * batches): neither a full queue nor a drain refuses it, the create-time
 * ceilings still do, and the drain waits for it. */
Test(scheduler, continuation_passes_a_full_queue_and_a_drain) {
    start(limits(1000, 4, 0, 1), true);
    block();
    cr_assert_eq(submit(1, 2, 1, 0), SCHED_OK);
    cr_expect_eq(submit(2, 2, 1, 0), SCHED_EFULL);
    sched_req_init(&H->reqs[2].req, 2, 1, 0, on_done);
    cr_expect_eq(sched_submit_continuation(H->s, &H->reqs[2].req), SCHED_OK);
    cr_assert_eq(sched_drain(H->s, on_drained, H), SCHED_OK);
    cr_expect_eq(submit(3, 2, 1, 0), SCHED_EDRAINING);
    sched_req_init(&H->reqs[4].req, 2, 1, 0, on_done);
    cr_expect_eq(sched_submit_continuation(H->s, &H->reqs[4].req), SCHED_OK);
    sched_req_init(&H->reqs[5].req, 2, 5, 0, on_done);
    cr_expect_eq(sched_submit_continuation(H->s, &H->reqs[5].req), SCHED_ETOOBIG);
    open_gate();
    cr_expect_eq(sched_wait_drained(H->s, WAIT_MS), SCHED_OK);
    lock(H);
    cr_expect_eq(H->completions, 4);
    unlock(H);
    expect_all_done(0, 3, SCHED_OK);
    cr_expect_eq(H->reqs[4].status, SCHED_OK);
    cr_expect_eq(H->reqs[3].done_calls, 0);
    cr_expect_eq(H->reqs[5].done_calls, 0);
    sched_limits lim;
    sched_get_limits(H->s, &lim);
    cr_expect_eq(lim.max_queue, 1u);
}

Test(scheduler, drain_when_idle) {
    start(limits(1000, 4, 0, 64), false);
    cr_assert_eq(sched_drain(H->s, on_drained, H), SCHED_OK);
    cr_expect_eq(sched_wait_drained(H->s, WAIT_MS), SCHED_OK);
    WAIT_FOR(H, H->drained_calls == 1);
}

/* ---- groups: one queue, batches of one group ------------------------------------
 * Each served model is a group, and a batch runs one model's forward: the
 * head's group goes first, with its group's later requests in order; the
 * other groups' requests keep their places. */

Test(scheduler, interleaved_groups_each_get_their_own_batches) {
    start(limits(1000, 64, 0, 256), true);
    block();
    for (int i = 1; i <= 20; i++)
        cr_assert_eq(submit_in(i, (uint32_t)(i % 3), 2, 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 21);
    /* Request 1 is the head: group 1 first, then 2's group, then 0's. */
    expect_batch(1, (int[]){1, 4, 7, 10, 13, 16, 19}, 7);
    expect_group(1, 1);
    expect_batch(2, (int[]){2, 5, 8, 11, 14, 17, 20}, 7);
    expect_group(2, 2);
    expect_batch(3, (int[]){3, 6, 9, 12, 15, 18}, 6);
    expect_group(3, 0);
    lock(H);
    cr_expect_eq(H->n_batches, 4);
    unlock(H);
    expect_all_done(0, 21, SCHED_OK);
    expect_accounted();
}

/* Limits apply within the head's group: a batch of it closes at the first of
 * its requests that does not fit, and the next batch starts from the new
 * head, whichever group that is. */
Test(scheduler, group_batches_close_at_the_limit_and_the_head_goes_next) {
    start(limits(1000, 2, 0, 256), true);
    block();
    const uint32_t groups[] = {1, 0, 1, 1, 0};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(submit_in(1 + i, groups[i], 2, 0), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 6);
    expect_batch(1, (int[]){1, 3}, 2);
    expect_batch(2, (int[]){2, 5}, 2);
    expect_batch(3, (int[]){4}, 1);
    expect_accounted();
}

/* Taking the last queued request while an earlier one of another group
 * stays must leave the tail on the one that stays: requests submitted next
 * are queued behind it, not lost. */
Test(scheduler, taking_the_queue_tail_then_submitting_loses_nothing) {
    H->hold = 2;
    start(limits(1000, 64, 0, 256), false);
    cr_assert_eq(submit_in(0, 0, 1, 0), SCHED_OK);
    WAIT_FOR(H, H->entered == 1);
    cr_assert_eq(submit_in(1, 0, 2, 0), SCHED_OK);
    cr_assert_eq(submit_in(2, 1, 2, 0), SCHED_OK);
    cr_assert_eq(submit_in(3, 0, 2, 0), SCHED_OK); /* the tail, taken with 1 */
    release_batch();
    WAIT_FOR(H, H->entered == 2);
    cr_assert_eq(submit_in(4, 1, 2, 0), SCHED_OK);
    cr_assert_eq(submit_in(5, 0, 2, 0), SCHED_OK);
    release_batch();
    WAIT_FOR(H, H->completions == 6);
    expect_batch(1, (int[]){1, 3}, 2);
    expect_batch(2, (int[]){2, 4}, 2);
    expect_batch(3, (int[]){5}, 1);
    expect_all_done(0, 6, SCHED_OK);
    expect_accounted();
}

/* The linger ends when the queue as a whole holds a batch's worth of work,
 * whatever its groups: the head's group still goes first, alone if it is not
 * full, and the full group right after it, rather than both waiting out the
 * linger. */
Test(scheduler, a_full_batch_of_another_group_ends_the_linger) {
    start(limits(1000, 2, FOREVER_US, 64), true);
    block();
    open_gate();
    WAIT_FOR(H, H->completions == 1);
    cr_assert_eq(submit_in(1, 0, 2, 0), SCHED_OK);
    cr_assert_eq(submit_in(2, 1, 2, 0), SCHED_OK);
    cr_assert_eq(submit_in(3, 1, 2, 0), SCHED_OK);
    WAIT_FOR(H, H->completions == 4);
    expect_batch(1, (int[]){1}, 1);
    expect_group(1, 0);
    expect_batch(2, (int[]){2, 3}, 2);
    expect_group(2, 1);
    expect_accounted();
}

/* Cancels, deadlines and a drain over interleaved groups: every request
 * completes exactly once, the dropped ones unrun, and no batch mixes. */
Test(scheduler, cancel_deadline_and_drain_with_mixed_groups_lose_nothing) {
    start(limits(1000, 3, FOREVER_US, 256), true);
    block();
    const uint64_t now = sched_now_ns();
    for (int i = 1; i <= 15; i++)
        cr_assert_eq(submit_in(i, (uint32_t)(i % 2), 2, i == 4 || i == 9 ? now - 1 : 0), SCHED_OK);
    cr_assert_eq(sched_cancel(H->s, &H->reqs[6].req), SCHED_OK);
    cr_assert_eq(sched_cancel(H->s, &H->reqs[15].req), SCHED_OK); /* the tail */
    WAIT_FOR(H, H->reqs[4].done_calls == 1 && H->reqs[9].done_calls == 1 &&
                    H->reqs[6].done_calls == 1 && H->reqs[15].done_calls == 1);
    cr_assert_eq(submit_in(16, 1, 2, 0), SCHED_OK);
    cr_assert_eq(sched_drain(H->s, on_drained, H), SCHED_OK);
    open_gate();
    cr_expect_eq(sched_wait_drained(H->s, WAIT_MS), SCHED_OK);
    WAIT_FOR(H, H->drained_calls == 1);
    lock(H);
    cr_expect_eq(H->completions, 17);
    for (int i = 0; i <= 16; i++) {
        const treq *t = &H->reqs[i];
        const int want = i == 4 || i == 9    ? SCHED_EDEADLINE
                         : i == 6 || i == 15 ? SCHED_ECANCELED
                                             : SCHED_OK;
        cr_expect_eq(t->done_calls, 1, "request %d done %d times", i, t->done_calls);
        cr_expect_eq(t->status, want, "request %d: %s", i, sched_errname(t->status));
        cr_expect_eq(t->ran, want == SCHED_OK, "request %d ran %d times", i, t->ran);
    }
    unlock(H);
    /* 1 (odd, group 1) heads: 1 3 5, then 2 8 10 (4, 6 gone), 7 11 13, 12 14,
     * 16: three groups' worth of batches after the blocker. */
    expect_batch(1, (int[]){1, 3, 5}, 3);
    expect_batch(2, (int[]){2, 8, 10}, 3);
    expect_batch(3, (int[]){7, 11, 13}, 3);
    expect_batch(4, (int[]){12, 14}, 2);
    expect_batch(5, (int[]){16}, 1);
    expect_accounted();
}

/* The next piece of a split request is the same sched_req submitted again:
 * it keeps its group, so it joins its own group's batch, not the head's. */
Test(scheduler, a_continuation_keeps_its_group) {
    H->hold = 2;
    start(limits(1000, 64, 0, 256), false);
    cr_assert_eq(submit_in(0, 1, 2, 0), SCHED_OK);
    WAIT_FOR(H, H->entered == 1);
    release_batch();
    WAIT_FOR(H, H->completions == 1);
    cr_assert_eq(submit_in(5, 0, 2, 0), SCHED_OK);
    WAIT_FOR(H, H->entered == 2); /* held: what follows queues behind it */
    H->reqs[0].req.n_tokens = 3;  /* its next piece */
    cr_assert_eq(sched_submit_continuation(H->s, &H->reqs[0].req), SCHED_OK);
    cr_assert_eq(submit_in(6, 0, 2, 0), SCHED_OK);
    cr_assert_eq(submit_in(7, 1, 2, 0), SCHED_OK);
    release_batch();
    WAIT_FOR(H, H->completions == 5);
    expect_batch(2, (int[]){0, 7}, 2);
    expect_group(2, 1);
    expect_batch(3, (int[]){6}, 1);
    expect_group(3, 0);
    lock(H);
    cr_expect_eq(H->reqs[0].done_calls, 2);
    cr_expect_eq(H->reqs[0].ran, 2);
    unlock(H);
}

/* Opens the gate once destroy has shut down the queued requests, proving they
 * complete while the running batch still runs. */
static void *open_after_shutdown(void *arg) {
    int queued = *(int *)arg;
    for (int i = 0; i < WAIT_MS; i++) {
        sched_stats st;
        sched_stats_get(H->s, &st);
        if (st.shut_down == (uint64_t)queued)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    open_gate();
    return NULL;
}

Test(scheduler, destroy_with_queued_work) {
    start(limits(1000, 64, FOREVER_US, 64), true);
    block_with(1000);
    int queued = 5;
    for (int i = 1; i <= queued; i++)
        cr_assert_eq(submit(i, 2, 1, 0), SCHED_OK);
    pthread_t opener;
    cr_assert_eq(pthread_create(&opener, NULL, open_after_shutdown, &queued), 0);
    sched_destroy(H->s);
    H->s = NULL;
    pthread_join(opener, NULL);
    expect_all_done(0, 1, SCHED_OK);
    expect_all_done(1, 1 + queued, SCHED_ESHUTDOWN);
    lock(H);
    cr_expect_eq(H->entered, 1);
    cr_expect_eq(H->completions, 1 + queued);
    unlock(H);
}

Test(scheduler, reload_limits) {
    start(limits(100, 64, 0, 64), true);
    block();
    for (int i = 1; i <= 10; i++)
        cr_assert_eq(submit(i, 10, 1, 0), SCHED_OK);
    cr_assert_eq(sched_set_limits(H->s, &(sched_limits){30, 64, 0, 64}), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 11);
    expect_batch(1, (int[]){1, 2, 3}, 3);
    expect_batch(2, (int[]){4, 5, 6}, 3);
    expect_batch(3, (int[]){7, 8, 9}, 3);
    expect_batch(4, (int[]){10}, 1);

    cr_expect_eq(sched_set_limits(H->s, &(sched_limits){101, 64, 0, 64}), SCHED_EINVAL);
    cr_expect_eq(sched_set_limits(H->s, &(sched_limits){30, 65, 0, 64}), SCHED_EINVAL);
    cr_expect_eq(sched_set_limits(H->s, &(sched_limits){30, 64, 0, 0}), SCHED_EINVAL);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.limits.max_batch_tokens, 30);
    cr_expect_eq(submit(11, 40, 1, 0), SCHED_ETOOBIG);
    cr_assert_eq(sched_set_limits(H->s, &(sched_limits){100, 2, 0, 1}), SCHED_OK);
    cr_expect_eq(submit(12, 40, 3, 0), SCHED_ETOOBIG);
}

Test(scheduler, lowered_limit_still_runs_admitted_request) {
    start(limits(100, 64, 0, 64), true);
    block();
    cr_assert_eq(submit(1, 80, 1, 0), SCHED_OK);
    cr_assert_eq(submit(2, 10, 1, 0), SCHED_OK);
    cr_assert_eq(sched_set_limits(H->s, &(sched_limits){50, 64, 0, 64}), SCHED_OK);
    open_gate();
    WAIT_FOR(H, H->completions == 3);
    expect_batch(1, (int[]){1}, 1);
    expect_batch(2, (int[]){2}, 1);
}

static int note_call(void *arg) {
    harness *h = arg;
    lock(h);
    h->call_ran++;
    h->call_during_batch = h->in_batch;
    h->call_thread = pthread_self();
    unlock(h);
    return 42;
}

static void *call_from_thread(void *arg) {
    (void)arg;
    *(int *)arg = sched_call(H->s, note_call, H);
    return NULL;
}

Test(scheduler, call_runs_between_batches_on_compute_thread) {
    start(limits(1000, 64, 0, 64), true);
    block();
    int result = 0;
    pthread_t caller;
    cr_assert_eq(pthread_create(&caller, NULL, call_from_thread, &result), 0);
    /* The compute thread is inside the blocker, so the call cannot run yet. */
    nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000}, NULL);
    lock(H);
    cr_expect_eq(H->call_ran, 0);
    unlock(H);
    open_gate();
    pthread_join(caller, NULL);
    cr_expect_eq(result, 42);
    lock(H);
    cr_expect_eq(H->call_ran, 1);
    cr_expect_not(H->call_during_batch);
    cr_expect(pthread_equal(H->call_thread, H->compute_thread));
    unlock(H);
    /* Work keeps flowing after it. */
    cr_assert_eq(submit(1, 2, 1, 0), SCHED_OK);
    WAIT_FOR(H, H->completions == 2);
}

/* ---- stress ------------------------------------------------------------------ */

#define STRESS_THREADS    4
#define STRESS_PER_THREAD 1500

static void *stress_submitter(void *arg) {
    int th = (int)(intptr_t)arg;
    for (int i = 0; i < STRESS_PER_THREAD; i++) {
        treq *t = &H->reqs[th * STRESS_PER_THREAD + i];
        t->thread = th;
        t->seq = i;
        sched_req_init(&t->req, 1 + i % 8, 1 + i % 2, 0, on_done);
        int rc = sched_submit(H->s, &t->req);
        if (rc != SCHED_OK && rc != SCHED_EFULL) {
            lock(H);
            H->submit_broken = true;
            unlock(H);
        }
        if (rc == SCHED_EFULL) {
            t->status = rc; /* never accepted: no done call may come */
            sched_yield();
        } else if (i % 7 == 0) {
            sched_cancel(H->s, &t->req);
        }
    }
    return NULL;
}

Test(scheduler, concurrent_submit_stress) {
    H->check_tokens = 64;
    H->check_seqs = 16;
    start(limits(64, 16, 100, 128), false);
    pthread_t th[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, stress_submitter, (void *)(intptr_t)i), 0);
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    sched_stats st;
    sched_stats_get(H->s, &st);
    cr_assert_eq(st.accepted + st.rejected_full, STRESS_THREADS * STRESS_PER_THREAD);
    WAIT_FOR(H, (uint64_t)H->completions == st.accepted);
    lock(H);
    int ok = 0, cancelled = 0;
    for (int i = 0; i < STRESS_THREADS * STRESS_PER_THREAD; i++) {
        treq *t = &H->reqs[i];
        if (t->status == SCHED_EFULL) {
            cr_expect_eq(t->done_calls, 0);
            continue;
        }
        cr_expect_eq(t->done_calls, 1, "request %d done %d times", i, t->done_calls);
        if (t->status == SCHED_OK) {
            ok++;
            cr_expect_eq(t->ran, 1);
        } else {
            cr_expect_eq(t->status, SCHED_ECANCELED);
            cr_expect_eq(t->ran, 0);
            cancelled++;
        }
    }
    cr_expect_not(H->limits_broken);
    cr_expect_not(H->submit_broken);
    cr_expect_not(H->fifo_broken, "a thread's requests ran out of submission order");
    cr_expect_eq(H->observed, H->n_batches);
    unlock(H);
    sched_stats_get(H->s, &st);
    cr_expect_eq(st.completed, (uint64_t)ok);
    cr_expect_eq(st.cancelled, (uint64_t)cancelled);
    cr_expect_gt(st.batch_reqs_sum, st.batches, "no batching happened at all");
    expect_accounted();
}

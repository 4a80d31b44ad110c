/* threadpool.c — a fixed pool of workers that runs one parallel_for at a time.
 *
 * Tasks are handed out by an atomic counter, so a slow task never holds up
 * the others and the split does not depend on timing. The caller runs tasks
 * too (worker 0), and a loop is over when its tasks are, not when every
 * helper has seen it: a helper that is asleep, or whose core the host has
 * not given back yet, leaves its share to whoever is running. (Waiting for
 * every helper to join made a forward after an idle spell pay a helper's
 * wake-up on each of its forty loops: on 2-vCPU guests a helper woken from
 * sleep seems to take longer than the caller's spin to arrive, so both sides
 * went back to sleep every loop, and a 12-token forward 20 ms after the last took
 * 6.5 ms against 2.4 back to back; without the wait it takes 5.2.)
 *
 * Claims. The counter holds the loop's generation in its high 32 bits and the
 * next task in its low ones, and a task is claimed by compare-and-swap, so a
 * helper that read the loop late cannot claim a task of the next one: between
 * two loops the caller closes the counter (task CLOSED), and only then writes
 * the next loop's function, context and task count. (The generation wraps
 * after 2^32 loops; a helper would have to stall for a multiple of that many.)
 *
 * Waiting. A forward pass of the encoder is some forty parallel_for calls
 * back to back, each only tens of microseconds long at batch 1. Sleeping on
 * a condition variable between them made every call pay a futex wake-up of
 * each helper and one of the caller (several microseconds each, far more
 * when the wakee has to be scheduled in), so waiters first spin on the
 * generation / done counters for a while (tp_set_spin_us) and only then
 * sleep. The spin is bounded, so an idle pool costs nothing after that, and
 * it stops as soon as it sees that the thread it waits for is not running
 * (see spin_until_ready): on oversubscribed cores two threads that spin for
 * each other only delay each other, and sleeping at once, as this pool did
 * before it spun at all, is the better choice there. Who sleeps says so in an
 * atomic (sleepers, caller_asleep), and the other side takes the mutex to
 * wake it only then: the two sides write their own flag and then read the
 * other's with sequentially consistent atomics, so at least one of them sees
 * the other and no wake-up is lost. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Sixteen pauses take about a microsecond; a stretch of them that took this
 * long means the spinning thread lost its core. */
#define PREEMPTED_NS 20000u

/* The low half of the claim counter between two loops: no task to claim. */
#define CLOSED 0xffffffffu

struct tp_pool {
    int nthreads;
    pthread_t *threads; /* [nthreads - 1] helpers; the caller is worker 0 */
    /* The current loop: written by the caller after it closed the last one
     * and before it opens this one in claim; a helper may read them while
     * they change (it was late), which its claim then fails (see claim_tasks). */
    _Atomic(attn_task_fn) fn;
    _Atomic(void *) ctx;
    atomic_size_t ntasks;
    _Atomic uint64_t claim;  /* generation << 32 | next task (CLOSED: none) */
    atomic_size_t done;      /* tasks of the current loop finished */
    uint32_t loops;          /* the caller's count of loops: the generation */
    atomic_ulong generation; /* one more per loop: what sleeping helpers wait for */
    atomic_int sleepers;     /* helpers asleep (or about to be) on start */
    atomic_bool caller_asleep;
    atomic_bool stopping;
    atomic_uint spin_ns; /* how long a waiter polls (tp_set_spin_us) */
    pthread_mutex_t mu;
    pthread_cond_t start;   /* a new loop or stop, for sleeping helpers */
    pthread_cond_t done_cv; /* the last task finished, for a sleeping caller */
};

typedef struct {
    tp_pool *pool;
    int worker;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Claims and runs tasks of the loop whose claim counter read c, of n tasks
 * of fn(ctx), until none is left or the loop is no longer c's. A claim
 * succeeds only while the counter still holds c's generation below n; the
 * caller rewrites fn, ctx and n only after it closed the counter, so a
 * claim that succeeds proves they were this loop's when read. The one that
 * finishes the last task wakes the caller if it sleeps. */
static void claim_tasks(tp_pool *p, uint64_t c, attn_task_fn fn, void *ctx, size_t n, int worker) {
    const uint64_t gen = c >> 32;
    for (;;) {
        const uint32_t i = (uint32_t)c;
        if (c >> 32 != gen || i >= n)
            return;
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1))
            continue; /* c now holds the counter's value */
        fn(ctx, i, worker);
        if (atomic_fetch_add(&p->done, 1) + 1 == n && atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
        c = atomic_load(&p->claim);
    }
}

/* What a waiter waits for: a helper for a loop after the one it last saw
 * (or stop), the caller for the tasks of its loop to be done. */
typedef struct {
    tp_pool *pool;
    unsigned long seen; /* helper: the generation it last saw */
    size_t ntasks;      /* caller: the tasks of its loop */
    bool helper;
} waiter;

static bool ready(const waiter *w) {
    tp_pool *p = w->pool;
    if (w->helper)
        return atomic_load(&p->generation) != w->seen || atomic_load(&p->stopping);
    return atomic_load(&p->done) == w->ntasks;
}

/* Waits until ready(w) or spin_ns pass, without sleeping; true if ready.
 * A hand-off between two running threads takes well under a microsecond, so
 * a pause loop sees it at once. The clock is read every 16 pauses: a gap of
 * more than PREEMPTED_NS between two reads means this thread lost its core,
 * i.e. the cores are oversubscribed and the other side is likely waiting for
 * one too; spinning on would only take CPU from it, so the waiter sleeps at
 * once, as a pool without spinning would. (Yielding instead was measured to
 * be worse there: a yielding thread gives its core away for a whole time
 * slice of another process, with none of the priority a woken sleeper gets.) */
static bool spin_until_ready(const waiter *w) {
    const uint64_t spin_ns = atomic_load_explicit(&w->pool->spin_ns, memory_order_relaxed);
    if (spin_ns == 0)
        return ready(w);
    const uint64_t start = mono_ns();
    uint64_t last = start;
    for (unsigned i = 1;; i++) {
        if (ready(w))
            return true;
        cpu_relax();
        if (i % 16)
            continue;
        const uint64_t now = mono_ns();
        if (now - start >= spin_ns || now - last >= PREEMPTED_NS)
            return ready(w);
        last = now;
    }
}

static void *worker_main(void *argp) {
    worker_arg arg = *(worker_arg *)argp;
    free(argp);
    char name[32]; /* cut to the kernel's 16 bytes, terminator included */
    snprintf(name, sizeof name, "attn-pool-%d", arg.worker);
    name[15] = '\0';
    pthread_setname_np(pthread_self(), name);
    tp_pool *p = arg.pool;
    waiter w = {.pool = p, .seen = 0, .helper = true};
    for (;;) {
        if (!spin_until_ready(&w)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!ready(&w))
                pthread_cond_wait(&p->start, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stopping))
            break;
        /* Loops may have come and gone meanwhile: the claim counter says
         * which is open now (it is written before the generation). */
        w.seen = atomic_load(&p->generation);
        const uint64_t c = atomic_load(&p->claim);
        claim_tasks(p, c, atomic_load(&p->fn), atomic_load(&p->ctx), atomic_load(&p->ntasks),
                    arg.worker);
    }
    return NULL;
}

static void pool_parallel_for(void *impl, size_t ntasks, attn_task_fn fn, void *ctx) {
    tp_pool *p = impl;
    if (p->nthreads == 1 || ntasks <= 1 || ntasks >= CLOSED) {
        for (size_t i = 0; i < ntasks; i++)
            fn(ctx, i, 0);
        return;
    }
    /* The last loop is closed (its tasks are done and no claim of it can
     * succeed any more), so these may change. */
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->ntasks, ntasks);
    atomic_store(&p->done, 0);
    const uint64_t open = (uint64_t)++p->loops << 32;
    atomic_store(&p->claim, open);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->mu);
    }

    claim_tasks(p, open, fn, ctx, ntasks, 0);

    /* Only tasks that helpers claimed and are running are left. */
    const waiter w = {.pool = p, .ntasks = ntasks, .helper = false};
    if (!spin_until_ready(&w)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_asleep, true);
        while (!ready(&w))
            pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->caller_asleep, false);
        pthread_mutex_unlock(&p->mu);
    }
    atomic_store(&p->claim, open | CLOSED);
}

tp_pool *tp_create(int nthreads) {
    if (nthreads < 1)
        return NULL;
    tp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->ntasks, 0);
    atomic_init(&p->claim, CLOSED);
    atomic_init(&p->done, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_asleep, false);
    atomic_init(&p->stopping, false);
    atomic_init(&p->spin_ns, TP_SPIN_US_DEFAULT * 1000u);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            p->nthreads = 1; /* no helper was started: none to join */
            tp_destroy(p);
            return NULL;
        }
    }
    for (int i = 1; i < nthreads; i++) {
        worker_arg *arg = malloc(sizeof *arg);
        if (arg)
            *arg = (worker_arg){p, i};
        if (!arg || pthread_create(&p->threads[i - 1], NULL, worker_main, arg) != 0) {
            free(arg);
            p->nthreads = i; /* tp_destroy joins only the helpers started */
            tp_destroy(p);
            return NULL;
        }
    }
    return p;
}

void tp_destroy(tp_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stopping, true);
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->nthreads; i++)
        pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->start);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int tp_nthreads(const tp_pool *p) {
    return p->nthreads;
}

void tp_set_spin_us(tp_pool *p, unsigned us) {
    const unsigned max_us = 1000000; /* a second: far beyond any use, and no overflow */
    atomic_store_explicit(&p->spin_ns, (us < max_us ? us : max_us) * 1000u, memory_order_relaxed);
}

attn_parallel tp_parallel(tp_pool *p) {
    return (attn_parallel){.nthreads = p->nthreads, .parallel_for = pool_parallel_for, .impl = p};
}

static void serial_for(void *impl, size_t ntasks, attn_task_fn fn, void *ctx) {
    (void)impl;
    for (size_t i = 0; i < ntasks; i++)
        fn(ctx, i, 0);
}

const attn_parallel attn_parallel_serial = {
    .nthreads = 1,
    .parallel_for = serial_for,
    .impl = NULL,
};

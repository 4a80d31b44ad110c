/* threadpool.c — a fixed pool of workers that runs one parallel_for at a time.
 *
 * Tasks are handed out by an atomic counter, so a slow task never holds up
 * the others and the split does not depend on timing. The caller runs tasks
 * too (worker 0).
 *
 * Waiting. A forward pass of the encoder is some forty parallel_for calls
 * back to back, each only tens of microseconds long at batch 1. Sleeping on
 * a condition variable between them made every call pay a futex wake-up of
 * each helper and one of the caller (several microseconds each, far more
 * when the wakee has to be scheduled in), so waiters first spin on the
 * generation / pending counters for a while (tp_set_spin_us) and only then
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
#include <stdlib.h>
#include <time.h>

/* Sixteen pauses take about a microsecond; a stretch of them that took this
 * long means the spinning thread lost its core. */
#define PREEMPTED_NS 20000u

struct tp_pool {
    int nthreads;
    pthread_t *threads; /* [nthreads - 1] helpers; the caller is worker 0 */
    /* The current loop: written by the caller before it bumps generation,
     * read by helpers after they see the new generation. */
    attn_task_fn fn;
    void *ctx;
    size_t ntasks;
    atomic_size_t next;
    atomic_ulong generation; /* one more per loop */
    atomic_int pending;      /* helpers still inside the current loop */
    atomic_int joined;       /* helpers that have seen the current loop */
    atomic_int sleepers;     /* helpers asleep (or about to be) on start */
    atomic_bool caller_asleep;
    atomic_bool stopping;
    atomic_uint spin_ns; /* how long a waiter polls (tp_set_spin_us) */
    pthread_mutex_t mu;
    pthread_cond_t start; /* a new loop or stop, for sleeping helpers */
    pthread_cond_t done;  /* the last helper finished, for a sleeping caller */
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

static void run_tasks(tp_pool *p, int worker) {
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->ntasks)
            return;
        p->fn(p->ctx, i, worker);
    }
}

/* What a waiter waits for: a helper for a loop after the one it last ran
 * (or stop), the caller for every helper to finish. */
typedef struct {
    tp_pool *pool;
    unsigned long seen; /* helper: the generation it last ran */
    bool helper;
} waiter;

static bool ready(const waiter *w) {
    tp_pool *p = w->pool;
    if (w->helper)
        return atomic_load(&p->generation) != w->seen || atomic_load(&p->stopping);
    return atomic_load(&p->pending) == 0;
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
        /* A helper that has not picked up the loop by now is not spinning
         * (asleep, or waiting for a core): the caller sleeps, which also
         * frees its core for that helper. */
        if (!w->helper && atomic_load(&w->pool->joined) < w->pool->nthreads - 1)
            return ready(w);
        last = now;
    }
}

static void *worker_main(void *argp) {
    worker_arg arg = *(worker_arg *)argp;
    free(argp);
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
        /* The caller starts no other loop before this helper has finished
         * this one, so the generation read here is the one just seen. */
        w.seen = atomic_load(&p->generation);
        atomic_fetch_add(&p->joined, 1);
        run_tasks(p, arg.worker);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static void pool_parallel_for(void *impl, size_t ntasks, attn_task_fn fn, void *ctx) {
    tp_pool *p = impl;
    if (p->nthreads == 1 || ntasks <= 1) {
        for (size_t i = 0; i < ntasks; i++)
            fn(ctx, i, 0);
        return;
    }
    /* Every helper finished the last loop (the caller waited for it), so
     * none reads these until the new generation is published. */
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store(&p->pending, p->nthreads - 1);
    atomic_store(&p->joined, 0);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->mu);
    }

    run_tasks(p, 0);

    const waiter w = {.pool = p, .helper = false};
    if (!spin_until_ready(&w)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_asleep, true);
        while (!ready(&w))
            pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->caller_asleep, false);
        pthread_mutex_unlock(&p->mu);
    }
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
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->joined, 0);
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
    pthread_cond_destroy(&p->done);
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

/* test_threadpool.c — the pool's one promise: every task of every loop runs
 * exactly once, on a worker of the pool, one at a time per worker, before
 * parallel_for returns, and never with another loop's function or context.
 * Helpers that come late to a loop (asleep, spinning on another core, or
 * preempted) take part or not; the tasks decide nothing by who runs them.
 * Run under TSan too (make tsan). */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/threadpool.h"

enum { MAX_TASKS = 40, LOOPS = 2000 };

typedef struct loop_ctx loop_ctx;

struct loop_ctx {
    long loop;            /* which loop this context belongs to */
    attn_task_fn fn;      /* the function the loop was given with it */
    atomic_long *current; /* the loop the test is in */
    atomic_int *busy;     /* [nthreads] a task is running on that worker */
    atomic_int hits[MAX_TASKS];
    atomic_int bad_worker; /* a task ran on a worker outside the pool */
    atomic_int stale;      /* a task ran with this context outside its loop */
    atomic_int wrong_fn;   /* ... or with another loop's function */
    atomic_int overlap;    /* two tasks ran at once on one worker */
    int nthreads;
    unsigned spin; /* work per task, varied so that claims interleave */
};

static void work(loop_ctx *c, size_t i, int worker, attn_task_fn self) {
    if (worker < 0 || worker >= c->nthreads) {
        atomic_fetch_add(&c->bad_worker, 1);
        return;
    }
    if (atomic_load(c->current) != c->loop)
        atomic_fetch_add(&c->stale, 1);
    if (c->fn != self)
        atomic_fetch_add(&c->wrong_fn, 1);
    if (atomic_exchange(&c->busy[worker], 1))
        atomic_fetch_add(&c->overlap, 1);
    volatile unsigned x = 0;
    for (unsigned k = 0; k < (c->spin * (unsigned)(i + 1)) % 4000u; k++)
        x += k;
    atomic_store(&c->busy[worker], 0);
    atomic_fetch_add(&c->hits[i], 1);
}

/* Two functions, alternated by loop: a late helper that paired one loop's
 * context with another's function would show. */
static void task_a(void *arg, size_t i, int worker) {
    work(arg, i, worker, task_a);
}
static void task_b(void *arg, size_t i, int worker) {
    work(arg, i, worker, task_b);
}

static void run_loops(int nthreads, unsigned spin_us) {
    tp_pool *pool = tp_create(nthreads);
    cr_assert_not_null(pool);
    tp_set_spin_us(pool, spin_us);
    const attn_parallel par = tp_parallel(pool);
    atomic_long current = 0;
    atomic_int *busy = calloc((size_t)nthreads, sizeof *busy);
    /* Two contexts, alternated: a late helper holding the last loop's
     * context would count a hit against it while it is checked. */
    loop_ctx *ctx = calloc(2, sizeof *ctx);
    cr_assert(busy && ctx);
    uint32_t rng = 12345u + (uint32_t)nthreads * 7u + spin_us;
    for (long loop = 1; loop <= LOOPS; loop++) {
        loop_ctx *c = &ctx[loop % 2];
        rng = rng * 1664525u + 1013904223u;
        const size_t ntasks = 1 + (rng >> 8) % MAX_TASKS;
        c->loop = loop;
        c->fn = loop % 2 ? task_a : task_b;
        c->current = &current;
        c->busy = busy;
        c->nthreads = nthreads;
        c->spin = rng >> 20;
        for (int i = 0; i < MAX_TASKS; i++)
            atomic_store(&c->hits[i], 0);
        atomic_store(&current, loop);
        par.parallel_for(par.impl, ntasks, c->fn, c);
        /* Past this point no task of this loop may run: the next loop's
         * number makes one that did count as stale. */
        atomic_store(&current, -loop);
        for (size_t i = 0; i < MAX_TASKS; i++)
            cr_assert_eq(atomic_load(&c->hits[i]), i < ntasks ? 1 : 0,
                         "%d threads, spin %u us, loop %ld of %zu tasks: task %zu ran %d times",
                         nthreads, spin_us, loop, ntasks, i, atomic_load(&c->hits[i]));
        cr_assert_eq(atomic_load(&c->bad_worker), 0);
        cr_assert_eq(atomic_load(&c->stale), 0,
                     "%d threads, spin %u us: a task ran outside loop %ld", nthreads, spin_us,
                     loop);
        cr_assert_eq(atomic_load(&c->wrong_fn), 0, "loop %ld ran another loop's function", loop);
        cr_assert_eq(atomic_load(&c->overlap), 0, "two tasks at once on one worker");
    }
    tp_destroy(pool);
    /* A task that ran after its loop returned would have been counted on
     * the context after the check; look once more now that none can run. */
    for (int k = 0; k < 2; k++)
        cr_assert_eq(atomic_load(&ctx[k].stale), 0);
    /* Whether helpers took part here is the scheduler's choice: on a loaded
     * machine a sleeping helper may wake after the caller has run all 2000
     * loops alone. helpers_wake_for_a_task_the_caller_cannot_run checks the
     * waking without depending on it. */
    free(busy);
    free(ctx);
}

/* Spin 0: helpers sleep between loops and usually arrive after the caller
 * has started, often after it has finished alone. */
Test(threadpool, every_task_once_with_sleeping_helpers) {
    run_loops(2, 0);
    run_loops(3, 0);
}

/* The default spin: helpers mostly take part. */
Test(threadpool, every_task_once_with_spinning_helpers) {
    run_loops(2, TP_SPIN_US_DEFAULT);
    run_loops(5, TP_SPIN_US_DEFAULT);
}

/* More workers than cores: helpers are preempted inside loops and mid-task. */
Test(threadpool, every_task_once_on_oversubscribed_cores) {
    run_loops(8, 1000);
}

/* A pool whose helpers never woke would pass every check above with the
 * caller running every task. Here the caller cannot: the task it takes
 * waits until a helper has run the other one, so only a helper that wakes
 * ends the loop. The wait is bounded far beyond any wake-up (microseconds
 * when idle, a scheduler tick or so on a loaded machine) so that a pool
 * that never wakes fails with its name rather than the suite's timeout. */
typedef struct wake_ctx {
    atomic_int helped; /* tasks run by a helper */
    atomic_int stuck;  /* the caller's task gave up waiting */
} wake_ctx;

enum { WAKE_WAIT_MS = 30000 };

static void wait_for_a_helper(void *arg, size_t i, int worker) {
    (void)i;
    wake_ctx *c = arg;
    if (worker != 0) {
        atomic_fetch_add(&c->helped, 1);
        return;
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&c->helped) == 0) {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > WAKE_WAIT_MS) {
            atomic_store(&c->stuck, 1);
            return;
        }
    }
}

Test(threadpool, helpers_wake_for_a_task_the_caller_cannot_run) {
    static const int threads[] = {2, 3, 8};
    static const unsigned spins[] = {0, TP_SPIN_US_DEFAULT};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++)
        for (size_t s = 0; s < sizeof spins / sizeof spins[0]; s++) {
            tp_pool *pool = tp_create(threads[t]);
            cr_assert_not_null(pool);
            tp_set_spin_us(pool, spins[s]);
            const attn_parallel par = tp_parallel(pool);
            /* Many loops: a helper that woke for the first but not after
             * it slept again shows too. */
            for (int loop = 0; loop < 50; loop++) {
                wake_ctx c = {0};
                par.parallel_for(par.impl, 2, wait_for_a_helper, &c);
                cr_assert_eq(atomic_load(&c.stuck), 0,
                             "%d threads, spin %u us, loop %d: no helper ran a task in %d ms",
                             threads[t], spins[s], loop, WAKE_WAIT_MS);
                cr_assert_geq(atomic_load(&c.helped), 1);
            }
            tp_destroy(pool);
        }
}

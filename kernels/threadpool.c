/* threadpool.c — a fixed pool of workers that runs one parallel_for at a time.
 *
 * Tasks are handed out by an atomic counter, so a slow task never holds up
 * the others and the split does not depend on timing. Workers sleep on a
 * condition variable between loops; the caller runs tasks too (worker 0). */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct tp_pool {
    int nthreads;
    pthread_t *threads; /* [nthreads - 1] helpers; the caller is worker 0 */
    pthread_mutex_t mu;
    pthread_cond_t start; /* a new loop (generation) or stop */
    pthread_cond_t done;  /* the last helper finished the loop */
    unsigned long generation;
    int stopping;
    int busy; /* helpers still inside the current loop */
    /* the current loop */
    attn_task_fn fn;
    void *ctx;
    size_t ntasks;
    atomic_size_t next;
};

typedef struct {
    tp_pool *pool;
    int worker;
} worker_arg;

static void run_tasks(tp_pool *p, int worker) {
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->ntasks)
            return;
        p->fn(p->ctx, i, worker);
    }
}

static void *worker_main(void *argp) {
    worker_arg arg = *(worker_arg *)argp;
    free(argp);
    tp_pool *p = arg.pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->stopping)
            pthread_cond_wait(&p->start, &p->mu);
        if (p->stopping)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, arg.worker);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_parallel_for(void *impl, size_t ntasks, attn_task_fn fn, void *ctx) {
    tp_pool *p = impl;
    if (p->nthreads == 1 || ntasks <= 1) {
        for (size_t i = 0; i < ntasks; i++)
            fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p, 0);

    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
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
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
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
    p->stopping = 1;
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

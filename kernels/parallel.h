/* parallel.h — the parallel-for interface that kernels are handed.
 *
 * Kernels never create threads. The service (or a test, or a benchmark) owns a
 * pool and hands kernels this small interface, so one pool runs every parallel
 * loop and nothing oversubscribes the cores. */
#ifndef ATTN_PARALLEL_H
#define ATTN_PARALLEL_H

#include <stddef.h>

/* One unit of work: task in [0, ntasks), worker in [0, nthreads) names the
 * calling thread so a task can use that worker's slice of a shared workspace.
 * Two tasks never run at once on the same worker. */
typedef void (*attn_task_fn)(void *ctx, size_t task, int worker);

typedef struct attn_parallel {
    /* Number of workers that may run tasks; worker ids are below this. >= 1. */
    int nthreads;
    /* Runs fn(ctx, i, worker) for every i in [0, ntasks) and returns when all
     * have finished. Tasks may run in any order on any worker. */
    void (*parallel_for)(void *impl, size_t ntasks, attn_task_fn fn, void *ctx);
    void *impl;
} attn_parallel;

/* A one-thread executor that runs the tasks in order on the calling thread. */
extern const attn_parallel attn_parallel_serial;

#endif

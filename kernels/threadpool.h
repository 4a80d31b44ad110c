/* threadpool.h — a fixed pool of worker threads behind attn_parallel.
 *
 * Created once at start with the number of cores the service may use; the
 * calling thread takes part as worker 0, so a pool of n threads starts n-1
 * helper threads. One parallel_for runs at a time per pool. */
#ifndef ATTN_THREADPOOL_H
#define ATTN_THREADPOOL_H

#include "parallel.h"

typedef struct tp_pool tp_pool;

/* Returns NULL when nthreads < 1 or a thread cannot be started. */
tp_pool *tp_create(int nthreads);
void tp_destroy(tp_pool *pool);
int tp_nthreads(const tp_pool *pool);

/* How long a waiting worker (or the caller) polls before it sleeps, in
 * microseconds. The default covers the gap between two loops of a small
 * forward (the previous loop's imbalance: tens of microseconds at batch 1)
 * and stops using the cores almost at once when the pool goes idle. 0 sleeps
 * at once (no polling): the better choice where other busy processes share
 * the cores. May be called at any time; later waits use the new value. */
#define TP_SPIN_US_DEFAULT 50
void tp_set_spin_us(tp_pool *pool, unsigned us);

/* The attn_parallel view of the pool, valid until tp_destroy. */
attn_parallel tp_parallel(tp_pool *pool);

#endif

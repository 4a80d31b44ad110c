/* workpool.h — a fixed set of threads running tasks in arrival order.
 *
 * The codec workers: http.c runs every JSON route's handler (parse, decode,
 * tokenize, submit) and its resumed function (encode the answer) here, so
 * libmicrohttpd's I/O thread only moves bytes and every core can work on
 * requests. A task is caller-owned memory (embed it, recover the owner with
 * its address), so posting never allocates and never fails for want of
 * memory; the queue holds at most one task per request in flight, which
 * max_connections bounds. */
#ifndef ATTN_WORKPOOL_H
#define ATTN_WORKPOOL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct workpool workpool;

typedef struct workpool_task {
    void (*run)(struct workpool_task *t);
    struct workpool_task *next; /* the pool's */
} workpool_task;

/* n threads (at least one) named "<name>-<i>"; NULL when one cannot start. */
workpool *workpool_create(unsigned n, const char *name);
/* Queues t (its run set); false once workpool_stop has begun, and then t
 * is not run. */
bool workpool_post(workpool *p, workpool_task *t);
/* Refuses posts from now on, runs what is queued, and joins the threads.
 * The pool stays valid memory (a late post is refused, not a use after
 * free) until workpool_destroy. */
void workpool_stop(workpool *p);
/* Stops p if it runs, and frees it. NULL: nothing. */
void workpool_destroy(workpool *p);

unsigned workpool_size(const workpool *p);
/* Tasks queued and not yet started, and the seconds the threads have spent
 * running tasks since the start (for /metrics: its rate over the size is
 * how busy the workers are). */
uint64_t workpool_waiting(workpool *p);
double workpool_busy_seconds(workpool *p);

/* The number of codec workers a setting of n asks for: n, or with 0 one
 * per core this process may run on (its affinity, capped by a cgroup v2
 * CPU quota rounded up). */
unsigned workpool_default_size(long n);

#endif

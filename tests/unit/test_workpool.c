/* test_workpool.c — the codec workers' pool (server/work/workpool.h): every task
 * posted runs exactly once; one worker runs them in the order posted; the
 * ones still queued when the pool stops run before it returns; a post after
 * the stop is refused and its task never runs. Run under TSan too (make
 * tsan). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stddef.h>

#include "server/work/workpool.h"

enum { TASKS = 5000 };

typedef struct counted {
    workpool_task t;
    int index;
    atomic_int runs;
} counted;

static atomic_int next_in_order;
static atomic_int out_of_order;

static void count(workpool_task *t) {
    counted *c = (counted *)((char *)t - offsetof(counted, t));
    atomic_fetch_add(&c->runs, 1);
}

static void in_order(workpool_task *t) {
    counted *c = (counted *)((char *)t - offsetof(counted, t));
    if (atomic_fetch_add(&next_in_order, 1) != c->index)
        atomic_fetch_add(&out_of_order, 1);
    atomic_fetch_add(&c->runs, 1);
}

static counted tasks[TASKS];

static void post_all(workpool *p, void (*run)(workpool_task *)) {
    for (int i = 0; i < TASKS; i++) {
        tasks[i] = (counted){.t.run = run, .index = i};
        cr_assert(workpool_post(p, &tasks[i].t));
    }
}

Test(workpool, every_task_runs_once_on_four_workers) {
    workpool *p = workpool_create(4, "test");
    cr_assert_not_null(p);
    cr_assert_eq(workpool_size(p), 4);
    post_all(p, count);
    /* Stopping runs whatever is still queued. */
    workpool_destroy(p);
    for (int i = 0; i < TASKS; i++)
        cr_assert_eq(atomic_load(&tasks[i].runs), 1, "task %d ran %d times", i,
                     atomic_load(&tasks[i].runs));
}

Test(workpool, one_worker_keeps_arrival_order) {
    atomic_store(&next_in_order, 0);
    atomic_store(&out_of_order, 0);
    workpool *p = workpool_create(1, "test");
    cr_assert_not_null(p);
    post_all(p, in_order);
    workpool_destroy(p);
    cr_assert_eq(atomic_load(&next_in_order), TASKS);
    cr_assert_eq(atomic_load(&out_of_order), 0);
}

Test(workpool, a_post_after_the_stop_is_refused) {
    workpool *p = workpool_create(2, "test");
    cr_assert_not_null(p);
    workpool_stop(p);
    counted late = {.t.run = count};
    cr_assert(!workpool_post(p, &late.t));
    workpool_destroy(p);
    cr_assert_eq(atomic_load(&late.runs), 0);
    cr_assert_eq(workpool_waiting(p = workpool_create(1, "test")), 0);
    workpool_destroy(p);
}

Test(workpool, default_size_is_the_setting_or_the_cores) {
    cr_assert_eq(workpool_default_size(3), 3);
    cr_assert_geq(workpool_default_size(0), 1);
}

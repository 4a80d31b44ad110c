/* test_membudget.c — the request-memory budget: reservations at the limit,
 * from many threads at once, and the charging allocator that jansson uses.
 *
 * Each Criterion test runs in its own process, so installing the allocator
 * into jansson here touches no other test. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "server/errors.h"
#include "server/membudget.h"

Test(membudget, reserves_up_to_the_limit_and_no_further) {
    membudget b;
    membudget_init(&b, 1000);
    cr_assert(membudget_reserve(&b, 600));
    cr_assert(membudget_reserve(&b, 400));
    cr_assert_eq(membudget_used(&b), 1000);
    cr_assert_not(membudget_reserve(&b, 1));
    cr_assert_eq(membudget_refusals(&b), 1);
    membudget_release(&b, 400);
    cr_assert_not(membudget_reserve(&b, 401));
    cr_assert(membudget_reserve(&b, 400));
    membudget_release(&b, 1000);
    cr_assert_eq(membudget_used(&b), 0);
    cr_assert_eq(membudget_peak(&b), 1000);
    cr_assert_eq(membudget_refusals(&b), 2);
}

Test(membudget, sizes_that_would_wrap_are_refused) {
    membudget b;
    membudget_init(&b, 1000);
    cr_assert(membudget_reserve(&b, 10));
    cr_assert_not(membudget_reserve(&b, SIZE_MAX));
    cr_assert_not(membudget_reserve(&b, SIZE_MAX - 5));
    cr_assert_eq(membudget_used(&b), 10);
}

/* ---- many threads ------------------------------------------------------------------ */

#define THREADS 8
#define ROUNDS  20000
#define UNIT    1000

typedef struct worker {
    membudget *b;
    pthread_barrier_t *start;
    unsigned seed;
    uint64_t granted, refused;
    size_t most_seen; /* the most used ever seen while holding a reservation */
} worker;

/* Holds one to three units at a time while the others do the same; the
 * limit lets only some hold at once, so the threads keep colliding at it. */
static void *churn(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start);
    for (int i = 0; i < ROUNDS; i++) {
        w->seed = w->seed * 1103515245u + 12345u;
        size_t n = UNIT * (1 + (w->seed >> 16) % 3);
        if (!membudget_reserve(w->b, n)) {
            w->refused++;
            continue;
        }
        w->granted++;
        size_t used = membudget_used(w->b);
        if (used > w->most_seen)
            w->most_seen = used;
        membudget_release(w->b, n);
    }
    return NULL;
}

Test(membudget, threads_never_pass_the_limit_together) {
    membudget b;
    const size_t limit = 5 * UNIT; /* eight threads want up to 24 units */
    membudget_init(&b, limit);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t tid[THREADS];
    worker w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (worker){.b = &b, .start = &start, .seed = (unsigned)t * 7919u + 1};
        cr_assert_eq(pthread_create(&tid[t], NULL, churn, &w[t]), 0);
    }
    uint64_t granted = 0, refused = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        granted += w[t].granted;
        refused += w[t].refused;
        cr_assert_leq(w[t].most_seen, limit, "thread %d saw %zu in use", t, w[t].most_seen);
    }
    pthread_barrier_destroy(&start);
    cr_assert_eq(granted + refused, (uint64_t)THREADS * ROUNDS);
    cr_assert_eq(membudget_refusals(&b), refused);
    cr_assert_eq(membudget_used(&b), 0, "every reservation was released");
    cr_assert_leq(membudget_peak(&b), limit);
    cr_assert_gt(granted, 0);
}

/* ---- the allocator ----------------------------------------------------------------- */

static membudget budget;

static void install(void) {
    membudget_init(&budget, 1 << 20);
    membudget_install(&budget);
}

TestSuite(membudget_alloc, .init = install);

Test(membudget_alloc, charges_inside_a_scope_only) {
    void *outside = membudget_malloc(1000);
    cr_assert_not_null(outside);
    cr_assert_eq(membudget_used(&budget), 0);

    membudget_enter(0);
    char *p = membudget_malloc(1000);
    cr_assert_not_null(p);
    memset(p, 7, 1000);
    cr_assert_eq(membudget_used(&budget), membudget_cost(1000 + 16));
    cr_assert_geq(membudget_cost(1000 + 16), 1000 + 16 + 8);
    membudget_leave();

    /* Freed after the scope, even unscoped, the charge goes back. */
    membudget_free(p);
    membudget_free(outside);
    cr_assert_eq(membudget_used(&budget), 0);
    cr_assert_eq(membudget_refused(), 0);
}

Test(membudget_alloc, a_refusal_says_busy_or_too_big) {
    membudget_enter(0);
    void *big = membudget_malloc(700 << 10);
    cr_assert_not_null(big);
    membudget_leave();

    /* Another request: 400 KiB would fit the budget alone, not now. */
    membudget_enter(0);
    cr_assert_null(membudget_malloc(400 << 10));
    cr_assert_eq(membudget_refused(), 1);
    cr_assert_eq(membudget_error(), SRV_EMEMORY);
    membudget_leave();

    /* A request that already holds 900 KiB (its body): another 200 KiB can
     * never fit, whoever else holds what. */
    membudget_free(big);
    cr_assert(membudget_reserve(&budget, 900 << 10)); /* as http.c charges a body */
    membudget_enter(900 << 10);
    cr_assert_null(membudget_malloc(200 << 10));
    cr_assert_eq(membudget_refused(), 2);
    cr_assert_eq(membudget_error(), SRV_ETOOLARGE);
    membudget_leave();
    membudget_release(&budget, 900 << 10);
    cr_assert_eq(membudget_used(&budget), 0);
    cr_assert_eq(membudget_refusals(&budget), 2);
}

Test(membudget_alloc, a_suspended_scope_charges_nothing) {
    membudget_enter(0);
    int token = membudget_suspend();
    void *p = membudget_malloc(4096);
    cr_assert_eq(membudget_used(&budget), 0);
    membudget_resume(token);
    void *q = membudget_malloc(4096);
    cr_assert_gt(membudget_used(&budget), 4096);
    membudget_free(p);
    membudget_free(q);
    membudget_leave();
    cr_assert_eq(membudget_used(&budget), 0);
}

Test(membudget_alloc, realloc_keeps_the_contents_and_the_count) {
    membudget_enter(0);
    int *v = membudget_calloc(16, sizeof *v);
    cr_assert_not_null(v);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(v[i], 0);
    for (int i = 0; i < 16; i++)
        v[i] = i * i;
    v = membudget_realloc(v, 4096 * sizeof *v);
    cr_assert_not_null(v);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(v[i], i * i);
    cr_assert_eq(membudget_used(&budget), membudget_cost(4096 * sizeof *v + 16));
    membudget_free(v);
    membudget_leave();
    cr_assert_eq(membudget_used(&budget), 0);
}

/* jansson allocates through the hooks: a parse tree larger than the budget
 * fails as a parse error (jansson handles the NULL), nothing stays charged,
 * and a dump is charged until it is freed. */
Test(membudget_alloc, jansson_is_charged_and_refused) {
    /* 200 000 numbers: about 10 MB of values, far past the 1 MiB budget. */
    size_t n = 200000;
    char *text = malloc(2 * n + 2);
    text[0] = '[';
    for (size_t i = 0; i < n; i++) {
        text[1 + 2 * i] = '1';
        text[2 + 2 * i] = i + 1 < n ? ',' : ']';
    }
    text[2 * n + 1] = '\0';
    membudget_enter(0);
    json_error_t e;
    cr_assert_null(json_loads(text, 0, &e));
    cr_assert_eq(membudget_refused(), 2);
    membudget_leave();
    cr_assert_eq(membudget_used(&budget), 0, "a failed parse leaves nothing charged");

    membudget_enter(0);
    json_t *small = json_loads("{\"a\": [1, 2, 3], \"b\": \"text\"}", 0, &e);
    cr_assert_not_null(small);
    size_t tree = membudget_used(&budget);
    cr_assert_gt(tree, 5 * 32, "every value is charged: %zu", tree);
    char *dump = json_dumps(small, JSON_COMPACT);
    cr_assert_str_eq(dump, "{\"a\":[1,2,3],\"b\":\"text\"}");
    json_decref(small);
    cr_assert_gt(membudget_used(&budget), 0, "the dump is held until freed");
    membudget_leave();
    membudget_free(dump);
    cr_assert_eq(membudget_used(&budget), 0);
    free(text);
}

static void *free_elsewhere(void *p) {
    membudget_free(p);
    return NULL;
}

Test(membudget_alloc, any_thread_may_free) {
    membudget_enter(0);
    void *p = membudget_malloc(10000);
    membudget_leave();
    cr_assert_gt(membudget_used(&budget), 10000);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, free_elsewhere, p), 0);
    pthread_join(t, NULL);
    cr_assert_eq(membudget_used(&budget), 0);
}

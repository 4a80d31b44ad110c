/* test_membudget.c — the request-memory budget: reservations at the limit,
 * from many threads at once, and the charging allocator that jansson uses.
 *
 * Each Criterion test runs in its own process, so installing the allocator
 * into jansson here touches no other test. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/api/errors.h"
#include "server/work/membudget.h"

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

/* The bound charged before a parse covers what jansson really allocates
 * (peak, the lexer's buffer and table growth included), for every shape of
 * body: number-dense, nested, keyed, long strings, escapes, literals. */
static char *repeat(const char *head, const char *item, size_t count, const char *tail) {
    size_t hl = strlen(head), il = strlen(item), tl = strlen(tail);
    char *s = malloc(hl + count * (il + 1) + tl + 1);
    char *p = s;
    memcpy(p, head, hl), p += hl;
    for (size_t i = 0; i < count; i++) {
        if (i)
            *p++ = ',';
        memcpy(p, item, il), p += il;
    }
    memcpy(p, tail, tl + 1);
    return s;
}

Test(membudget_alloc, the_parse_bound_covers_jansson) {
    budget.limit = SIZE_MAX / 4;
    char *longs = malloc((3 << 20) + 64);
    strcpy(longs, "{\"input\": \"hello\", \"user\": \"");
    size_t head = strlen(longs);
    memset(longs + head, 'x', 3 << 20);
    strcpy(longs + head + (3 << 20), "\"}");
    /* One object of 20 000 distinct keys of 100 characters. */
    char *keyed = malloc(20000 * 110 + 16), *k = keyed;
    *k++ = '{';
    for (int i = 0; i < 20000; i++)
        k += sprintf(k, "%s\"%0100d\": %d", i ? "," : "", i, i);
    strcpy(k, "}");
    char *bodies[] = {
        keyed,
        repeat("[", "1", 200000, "]"),
        repeat("[", "-1.5e-3", 50000, "]"),
        repeat("[", "[]", 100000, "]"),
        repeat("[", "{}", 100000, "]"),
        repeat("[", "{\"k\":1,\"key2\":[true,null,false]}", 20000, "]"),
        repeat("{\"a\":[", "\"text \\u00e9\\n\\\"q\\\"\"", 30000, "]}"),
        repeat("[", "[[0.5,0.25],[1,2]]", 30000, "]"),
        longs,
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        size_t n = strlen(bodies[i]);
        membudget_init(&budget, SIZE_MAX / 4);
        membudget_enter(0);
        json_error_t e;
        json_t *root = json_loadb(bodies[i], n, 0, &e);
        cr_assert_not_null(root, "body %zu: %s", i, e.text);
        json_decref(root);
        membudget_leave();
        size_t peak = membudget_peak(&budget), bound = membudget_json_bound(bodies[i], n);
        cr_log_info("body %zu: %zu bytes, peak %zu, bound %zu", i, n, peak, bound);
        cr_assert_leq(peak, bound, "body %zu: jansson took %zu, the bound says %zu", i, peak,
                      bound);
        /* and not so loose that it refuses what fits: */
        cr_assert_leq(bound, 3 * peak + 16384, "body %zu: bound %zu for %zu", i, bound, peak);
        cr_assert_eq(membudget_used(&budget), 0);
        free(bodies[i]);
    }
}

/* Building and dumping values may be refused safely (jansson checks those
 * allocations): NULL, and nothing stays charged. A dump is charged until
 * freed. */
Test(membudget_alloc, jansson_values_and_dumps_are_charged_and_refused) {
    membudget_enter(0);
    json_t *arr = json_array();
    for (int i = 0; arr && i < 100000; i++)
        if (json_array_append_new(arr, json_real(i * 0.5)) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    cr_assert_null(arr, "100 000 reals do not fit 1 MiB");
    cr_assert_eq(membudget_refused(), 2);
    membudget_leave();
    cr_assert_eq(membudget_used(&budget), 0);

    membudget_enter(0);
    json_t *small = json_pack("{s:[i,i,i], s:s}", "a", 1, 2, 3, "b", "text");
    cr_assert_not_null(small);
    cr_assert_gt(membudget_used(&budget), 5 * 32, "every value is charged");
    char *dump = json_dumps(small, JSON_COMPACT);
    cr_assert_str_eq(dump, "{\"a\":[1,2,3],\"b\":\"text\"}");
    json_decref(small);
    cr_assert_gt(membudget_used(&budget), 0, "the dump is held until freed");
    membudget_leave();
    membudget_free(dump);
    cr_assert_eq(membudget_used(&budget), 0);
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

/* ---- the cgroup memory limit --------------------------------------------------------- */

static void put(const char *dir, const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    /* every directory on the way */
    for (char *p = strchr(path + strlen(dir) + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = '\0';
        mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* The test's fake tree: made by fake_root, removed by remove_fake_root,
 * each test's fini, so a failed assertion leaves nothing under /tmp either
 * (Criterion runs fini after a failure; only a crash skips it). */
static char fake_dir[64];

static char *fake_root(void) {
    snprintf(fake_dir, sizeof fake_dir, "/tmp/attn-cgroup-XXXXXX");
    cr_assert_not_null(mkdtemp(fake_dir));
    return fake_dir;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_fake_root(void) {
    if (fake_dir[0])
        nftw(fake_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    fake_dir[0] = '\0';
}

Test(membudget, cgroup_v2_takes_the_tightest_limit_on_the_way_to_the_root,
     .fini = remove_fake_root) {
    char *d = fake_root(), proc[128], from[512];
    snprintf(proc, sizeof proc, "%s/proc-cgroup", d);
    put(d, "proc-cgroup", "0::/kubepods/pod1/ctr\n");
    put(d, "fs/kubepods/pod1/ctr/memory.max", "max\n");
    put(d, "fs/kubepods/pod1/memory.max", "1073741824\n");
    put(d, "fs/kubepods/memory.max", "4294967296\n");
    char root[128];
    snprintf(root, sizeof root, "%s/fs", d);
    cr_assert_eq(membudget_cgroup_limit(root, proc, from, sizeof from), 1073741824ull);
    cr_assert(strstr(from, "kubepods/pod1/memory.max"), "%s", from);
    /* The process's own cgroup tighter still. */
    put(d, "fs/kubepods/pod1/ctr/memory.max", "536870912\n");
    cr_assert_eq(membudget_cgroup_limit(root, proc, NULL, 0), 536870912ull);
}

Test(membudget, cgroup_namespace_reads_the_root_and_max_is_no_limit, .fini = remove_fake_root) {
    char *d = fake_root(), proc[128], root[128];
    snprintf(proc, sizeof proc, "%s/proc-cgroup", d);
    snprintf(root, sizeof root, "%s/fs", d);
    put(d, "proc-cgroup", "0::/\n");
    put(d, "fs/memory.max", "max\n");
    cr_assert_eq(membudget_cgroup_limit(root, proc, NULL, 0), 0);
    put(d, "fs/memory.max", "943718400\n");
    cr_assert_eq(membudget_cgroup_limit(root, proc, NULL, 0), 943718400ull);
    /* A host path the container does not mount: its own limit at the root. */
    put(d, "proc-cgroup", "0::/system.slice/docker-abc.scope\n");
    cr_assert_eq(membudget_cgroup_limit(root, proc, NULL, 0), 943718400ull);
}

Test(membudget, cgroup_v1_memory_controller_and_unlimited, .fini = remove_fake_root) {
    char *d = fake_root(), proc[128], root[128];
    snprintf(proc, sizeof proc, "%s/proc-cgroup", d);
    snprintf(root, sizeof root, "%s/fs", d);
    put(d, "proc-cgroup",
        "12:cpu,cpuacct:/docker/x\n4:memory:/docker/x\n1:name=systemd:/docker/x\n");
    put(d, "fs/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(d, "fs/memory/docker/x/memory.limit_in_bytes", "9223372036854771712\n");
    cr_assert_eq(membudget_cgroup_limit(root, proc, NULL, 0), 0);
    put(d, "fs/memory/docker/memory.limit_in_bytes", "2147483648\n");
    cr_assert_eq(membudget_cgroup_limit(root, proc, NULL, 0), 2147483648ull);
    /* No /proc file and no limit files: none. */
    cr_assert_eq(membudget_cgroup_limit("/nonexistent", "/nonexistent", NULL, 0), 0);
}

Test(membudget, cgroup_hybrid_hosts_take_the_v1_memory_controller, .fini = remove_fake_root) {
    char *d = fake_root(), proc[128], root[128];
    snprintf(proc, sizeof proc, "%s/proc-cgroup", d);
    snprintf(root, sizeof root, "%s/fs", d);
    put(d, "proc-cgroup", "4:memory:/job/7\n1:cpu:/\n0::/\n");
    put(d, "fs/memory/job/7/memory.limit_in_bytes", "25769803776\n");
    cr_assert_eq(membudget_cgroup_limit(root, proc, NULL, 0), 25769803776ull);
}

/* runner.c — main() of the ThreadSanitizer test binary (`make tsan`), the
 * other half of the Criterion stand-in in tests/tsan/criterion/criterion.h
 * (Criterion itself cannot start under TSan: Snaipe/Criterion#274).
 *
 *   tsan-tests [--filter=GLOB]... [--exclude=GLOB]... [--list]
 *
 * Tests are named suite/name, as Criterion's --filter names them, and run in
 * that order. With --filter only the matching tests run (any of them may
 * match); --exclude drops matching ones. Each test runs in a child of its own
 * (the runner itself never starts a thread, so forking is safe under TSan):
 * a crash, an assert or a TSan report (exit status 66 by default) fails that
 * test alone. A .timeout is scaled by TIMEOUT_SCALE, as TSan runs code 5-15x
 * slower. Ends with the line "N passed, N failed, N skipped"; exits 1 if any
 * test failed or no test matched. */
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "criterion/criterion.h"

#define TIMEOUT_SCALE 10

static const struct cr_tsan_test **tests;
static size_t n_tests, cap_tests;
static const struct cr_tsan_suite **suites;
static size_t n_suites, cap_suites;

static void *grow(void *p, size_t *cap, size_t elem) {
    *cap = *cap ? *cap * 2 : 64;
    p = realloc(p, *cap * elem);
    if (!p) {
        perror("tsan-tests");
        exit(2);
    }
    return p;
}

void cr_tsan_register_test(const struct cr_tsan_test *t) {
    if (n_tests == cap_tests)
        tests = grow(tests, &cap_tests, sizeof *tests);
    tests[n_tests++] = t;
}

void cr_tsan_register_suite(const struct cr_tsan_suite *s) {
    if (n_suites == cap_suites)
        suites = grow(suites, &cap_suites, sizeof *suites);
    suites[n_suites++] = s;
}

/* Set by a failed cr_expect, possibly from a test's own threads. */
static int expect_failed;

void cr_tsan_fail(int fatal, const char *file, int line, const char *expr, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* msg[0] is the macros' "x"; what follows is the test's own message. */
    fprintf(stderr, "  %s:%d: %s failed: %s%s%s\n", file, line, fatal ? "assert" : "expect", expr,
            msg[1] ? ": " : "", msg + 1);
    if (fatal) {
        fflush(NULL);
        _exit(1); /* like Criterion, the test ends here; its process goes with it */
    }
    __atomic_store_n(&expect_failed, 1, __ATOMIC_RELAXED);
}

/* The child's exit status for a test that skipped itself: the parent reports
 * it as skipped, apart from passed and failed. */
#define CR_TSAN_SKIPPED 77

void cr_tsan_skip(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  %s:%d: skipped: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(NULL);
    _exit(CR_TSAN_SKIPPED);
}

void cr_tsan_log(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "  %s:%d: %s\n", file, line, msg);
}

static const struct cr_tsan_opts *suite_opts(const char *name) {
    for (size_t i = 0; i < n_suites; i++)
        if (strcmp(suites[i]->name, name) == 0)
            return suites[i]->opts;
    return NULL;
}

static int by_name(const void *a, const void *b) {
    const struct cr_tsan_test *x = *(const struct cr_tsan_test *const *)a;
    const struct cr_tsan_test *y = *(const struct cr_tsan_test *const *)b;
    int c = strcmp(x->suite, y->suite);
    return c ? c : strcmp(x->name, y->name);
}

/* The body of one test, in the child. */
static void run_child(const struct cr_tsan_test *t, const struct cr_tsan_opts *s, double timeout) {
    if (timeout > 0)
        alarm((unsigned)(timeout + 0.999));
    if (s && s->init)
        s->init();
    if (t->opts->init)
        t->opts->init();
    t->fn();
    if (t->opts->fini)
        t->opts->fini();
    if (s && s->fini)
        s->fini();
    fflush(NULL);
    exit(__atomic_load_n(&expect_failed, __ATOMIC_RELAXED) ? 1 : 0);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int matches(const char *name, char **globs, int n) {
    for (int i = 0; i < n; i++)
        if (fnmatch(globs[i], name, 0) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv) {
    char **filters = calloc((size_t)argc, sizeof *filters);
    char **excludes = calloc((size_t)argc, sizeof *excludes);
    int n_filters = 0, n_excludes = 0, list = 0;
    if (!filters || !excludes)
        return 2;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--filter=", 9) == 0)
            filters[n_filters++] = argv[i] + 9;
        else if (strncmp(argv[i], "--exclude=", 10) == 0)
            excludes[n_excludes++] = argv[i] + 10;
        else if (strcmp(argv[i], "--list") == 0)
            list = 1;
        else {
            fprintf(stderr, "usage: %s [--filter=GLOB]... [--exclude=GLOB]... [--list]\n", argv[0]);
            return 2;
        }
    }
    qsort(tests, n_tests, sizeof *tests, by_name);

    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < n_tests; i++) {
        const struct cr_tsan_test *t = tests[i];
        char name[256];
        snprintf(name, sizeof name, "%s/%s", t->suite, t->name);
        if ((n_filters && !matches(name, filters, n_filters)) ||
            matches(name, excludes, n_excludes))
            continue;
        if (list) {
            printf("%s\n", name);
            passed++;
            continue;
        }
        const struct cr_tsan_opts *s = suite_opts(t->suite);
        double timeout = t->opts->timeout > 0 ? t->opts->timeout : s ? s->timeout : 0;
        timeout *= TIMEOUT_SCALE;
        fflush(NULL);
        double t0 = now_s();
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0)
            run_child(t, s, timeout);
        int st;
        while (waitpid(pid, &st, 0) < 0)
            ;
        double dt = now_s() - t0;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            passed++;
            printf("[PASS] %s (%.2f s)\n", name, dt);
            continue;
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) == CR_TSAN_SKIPPED) {
            skipped++;
            printf("[SKIP] %s (%.2f s)\n", name, dt);
            continue;
        }
        failed++;
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
            printf("[FAIL] %s: timed out after %.0f s\n", name, timeout);
        else if (WIFSIGNALED(st))
            printf("[FAIL] %s: killed by signal %d (%s)\n", name, WTERMSIG(st),
                   strsignal(WTERMSIG(st)));
        else if (WEXITSTATUS(st) == 66)
            printf("[FAIL] %s: exit status 66: a ThreadSanitizer report, or a crash it caught "
                   "(%.2f s)\n",
                   name, dt);
        else
            printf("[FAIL] %s: exit status %d (%.2f s)\n", name, WEXITSTATUS(st), dt);
    }
    if (list)
        return passed ? 0 : 1;
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    free(filters);
    free(excludes);
    if (passed + failed + skipped == 0)
        fprintf(stderr, "tsan-tests: no test matched\n");
    return failed || passed + failed + skipped == 0 ? 1 : 0;
}

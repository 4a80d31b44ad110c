/* criterion/criterion.h — a stand-in for Criterion, used ONLY by the
 * ThreadSanitizer build (`make tsan`).
 *
 * Why: Criterion 2.4.1 (Debian libcriterion) aborts at start under TSan with
 * "Could not initialize inheritable arena" (Snaipe/Criterion#274), so no test
 * can run through it in a -fsanitize=thread binary. `make tsan` compiles the
 * unit tests it runs with -Itests/tsan, so their `#include
 * <criterion/criterion.h>` finds this file instead of the system one; every
 * other build keeps using the real Criterion.
 *
 * It implements exactly the subset those test files use: Test and TestSuite
 * with .init, .fini and .timeout; cr_assert/cr_expect and their _not, _eq,
 * _neq, _lt, _leq, _gt, _geq, _null, _not_null, _str_eq and _str_neq forms,
 * each with an optional printf-style message; cr_log_info; and cr_skip_test,
 * which ends the test reported as skipped, never as passed. Semantics
 * follow Criterion's: each test runs in its own forked process (runner.c),
 * suite init then test init before the body and test fini then suite fini
 * after it; a failed cr_assert ends the test, a failed cr_expect marks it
 * failed and lets it go on; the condition is evaluated once, the message
 * arguments only on failure. Anything else Criterion offers is deliberately
 * absent, so a test that starts using it fails to compile here rather than
 * silently doing nothing. */
#ifndef ATTN_TSAN_CRITERION_H
#define ATTN_TSAN_CRITERION_H

/* The real header brings these in, and the tests rely on it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cr_tsan_opts {
    int cr_unused_; /* lets the macros start the initializer with no option given */
    void (*init)(void);
    void (*fini)(void);
    double timeout; /* seconds; 0: none, as in Criterion */
};

struct cr_tsan_test {
    const char *suite, *name;
    void (*fn)(void);
    const struct cr_tsan_opts *opts;
};

struct cr_tsan_suite {
    const char *name;
    const struct cr_tsan_opts *opts;
};

void cr_tsan_register_test(const struct cr_tsan_test *t);
void cr_tsan_register_suite(const struct cr_tsan_suite *s);
/* Reports a failed check; ends the test when fatal. fmt always starts with
 * one character to drop (the macros' "x"), so an absent message is no
 * zero-length format. */
void cr_tsan_fail(int fatal, const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
_Noreturn void cr_tsan_skip(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void cr_tsan_log(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* strcmp that treats NULL as unequal to any string (Criterion would crash). */
static inline int cr_tsan_strcmp(const char *a, const char *b) {
    if (!a || !b)
        return a == b ? 0 : (a ? 1 : -1);
    return strcmp(a, b);
}

#define Test(suite, name, ...)                                                                     \
    static void cr_test_##suite##_##name(void);                                                    \
    static const struct cr_tsan_opts cr_opts_##suite##_##name = {.cr_unused_ = 0, __VA_ARGS__};    \
    static const struct cr_tsan_test cr_desc_##suite##_##name = {                                  \
        #suite, #name, cr_test_##suite##_##name, &cr_opts_##suite##_##name};                       \
    __attribute__((constructor)) static void cr_reg_##suite##_##name(void) {                       \
        cr_tsan_register_test(&cr_desc_##suite##_##name);                                          \
    }                                                                                              \
    static void cr_test_##suite##_##name(void)

#define TestSuite(suite, ...)                                                                      \
    static const struct cr_tsan_opts cr_suite_opts_##suite = {.cr_unused_ = 0, __VA_ARGS__};       \
    static const struct cr_tsan_suite cr_suite_desc_##suite = {#suite, &cr_suite_opts_##suite};    \
    __attribute__((constructor)) static void cr_suite_reg_##suite(void) {                          \
        cr_tsan_register_suite(&cr_suite_desc_##suite);                                            \
    }                                                                                              \
    struct cr_tsan_swallow_semicolon_##suite

#define CR_TSAN_CHECK_(fatal, cond, text, ...)                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            cr_tsan_fail(fatal, __FILE__, __LINE__, text, "x" __VA_ARGS__);                        \
    } while (0)

#define CR_TSAN_BOOL_(fatal, cond, ...) CR_TSAN_CHECK_(fatal, (cond), #cond, __VA_ARGS__)
#define CR_TSAN_NOT_(fatal, cond, ...)  CR_TSAN_CHECK_(fatal, !(cond), "!(" #cond ")", __VA_ARGS__)
#define CR_TSAN_OP_(fatal, op, a, b, ...)                                                          \
    CR_TSAN_CHECK_(fatal, (a)op(b), "(" #a ") " #op " (" #b ")", __VA_ARGS__)
#define CR_TSAN_NULL_(fatal, op, v, ...)                                                           \
    CR_TSAN_CHECK_(fatal, (v)op NULL, "(" #v ") " #op " NULL", __VA_ARGS__)
#define CR_TSAN_STR_(fatal, op, a, b, ...)                                                         \
    CR_TSAN_CHECK_(fatal, cr_tsan_strcmp((a), (b)) op 0, "(" #a ") " #op " (" #b ")", __VA_ARGS__)

#define cr_assert(...)          CR_TSAN_BOOL_(1, __VA_ARGS__)
#define cr_expect(...)          CR_TSAN_BOOL_(0, __VA_ARGS__)
#define cr_assert_not(...)      CR_TSAN_NOT_(1, __VA_ARGS__)
#define cr_expect_not(...)      CR_TSAN_NOT_(0, __VA_ARGS__)
#define cr_assert_eq(...)       CR_TSAN_OP_(1, ==, __VA_ARGS__)
#define cr_expect_eq(...)       CR_TSAN_OP_(0, ==, __VA_ARGS__)
#define cr_assert_neq(...)      CR_TSAN_OP_(1, !=, __VA_ARGS__)
#define cr_expect_neq(...)      CR_TSAN_OP_(0, !=, __VA_ARGS__)
#define cr_assert_lt(...)       CR_TSAN_OP_(1, <, __VA_ARGS__)
#define cr_expect_lt(...)       CR_TSAN_OP_(0, <, __VA_ARGS__)
#define cr_assert_leq(...)      CR_TSAN_OP_(1, <=, __VA_ARGS__)
#define cr_expect_leq(...)      CR_TSAN_OP_(0, <=, __VA_ARGS__)
#define cr_assert_gt(...)       CR_TSAN_OP_(1, >, __VA_ARGS__)
#define cr_expect_gt(...)       CR_TSAN_OP_(0, >, __VA_ARGS__)
#define cr_assert_geq(...)      CR_TSAN_OP_(1, >=, __VA_ARGS__)
#define cr_expect_geq(...)      CR_TSAN_OP_(0, >=, __VA_ARGS__)
#define cr_assert_null(...)     CR_TSAN_NULL_(1, ==, __VA_ARGS__)
#define cr_expect_null(...)     CR_TSAN_NULL_(0, ==, __VA_ARGS__)
#define cr_assert_not_null(...) CR_TSAN_NULL_(1, !=, __VA_ARGS__)
#define cr_expect_not_null(...) CR_TSAN_NULL_(0, !=, __VA_ARGS__)
#define cr_assert_str_eq(...)   CR_TSAN_STR_(1, ==, __VA_ARGS__)
#define cr_expect_str_eq(...)   CR_TSAN_STR_(0, ==, __VA_ARGS__)
#define cr_assert_str_neq(...)  CR_TSAN_STR_(1, !=, __VA_ARGS__)
#define cr_expect_str_neq(...)  CR_TSAN_STR_(0, !=, __VA_ARGS__)

#define cr_log_info(...)  cr_tsan_log(__FILE__, __LINE__, __VA_ARGS__)
#define cr_log_warn(...)  cr_tsan_log(__FILE__, __LINE__, __VA_ARGS__)
#define cr_skip_test(...) cr_tsan_skip(__FILE__, __LINE__, __VA_ARGS__)

#endif

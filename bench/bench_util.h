/* bench_util.h — clocks and the median shared by the benchmark programs
 * (every benchmark source is its own binary, so these are static inline). */
#ifndef ATTN_BENCH_UTIL_H
#define ATTN_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double bench_clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Wall-clock seconds (monotonic). */
static inline double now_s(void) {
    return bench_clock_s(CLOCK_MONOTONIC);
}

/* CPU seconds of the whole process, every thread. */
static inline double cpu_s(void) {
    return bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n), n >= 1; sorts v in place. */
static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif

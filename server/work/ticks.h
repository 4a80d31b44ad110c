/* ticks.h — the two clock readings the server's threads share: monotonic
 * nanoseconds for measuring, and an absolute time some milliseconds ahead
 * for pthread_cond_timedwait, on the clock its condition variable uses. */
#ifndef ATTN_TICKS_H
#define ATTN_TICKS_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t ticks_now_ns(void);

/* The time on clock (CLOCK_REALTIME for a default condition variable,
 * CLOCK_MONOTONIC for one set to it) ms milliseconds from now, normalised. */
struct timespec ticks_after_ms(clockid_t clock, int64_t ms);

#endif

/* trace.h — the optional per-batch trace (setting trace_file): one JSON
 * line per batch appended to a file, for offline analysis.
 *
 * The compute thread formats a line into a fixed ring of lines (a memcpy
 * under a mutex the writer holds only to copy a line out); a writer thread
 * does the file I/O. The compute thread never waits for the disk: a line
 * that finds the ring full is dropped and counted
 * (attnserve_trace_lines_dropped_total). Memory is the ring, allocated at
 * create. The path is reloadable: "" closes the file and stops tracing. */
#ifndef ATTN_TRACE_H
#define ATTN_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACE_LINE_MAX 1024 /* bytes of one line, newline included */
#define TRACE_RING     256  /* lines buffered between the two threads */

typedef struct tracer tracer;

/* Allocates the ring and starts the writer; path "" (or NULL) starts off.
 * NULL with a message. */
tracer *trace_create(const char *path, char *err, size_t err_len);
/* Writes what is buffered, closes the file, joins the writer. */
void trace_destroy(tracer *t);

size_t trace_bytes(const tracer *t);

/* Any thread: a new path ("" turns tracing off). The writer reopens. */
void trace_set_path(tracer *t, const char *path);

/* Compute thread: whether lines are wanted now (a cheap atomic read). */
bool trace_enabled(const tracer *t);

/* Compute thread: queues one line (len < TRACE_LINE_MAX, without its
 * newline). Returns false when dropped (ring full or tracing off). */
bool trace_emit(tracer *t, const char *line, size_t len);

/* Waits until every queued line is written (tests); false after timeout_ms. */
bool trace_flush(tracer *t, int64_t timeout_ms);

uint64_t trace_lines_written(const tracer *t);
uint64_t trace_lines_dropped(const tracer *t);

#endif

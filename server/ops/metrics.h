/* metrics.h — the service's counters, gauges and histograms, and the one
 * function that renders them in Prometheus text format for /metrics.
 *
 * One process-wide set. Updates are relaxed atomic adds, safe and cheap from
 * the I/O, loop and compute threads; rendering reads them without stopping
 * anyone, so a scrape is not one consistent cut (as in every Prometheus
 * client). Routes and backends get fixed slots at start, so no update ever
 * allocates or locks. */
#ifndef ATTN_METRICS_H
#define ATTN_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "server/config.h"
#include "server/work/scheduler.h"

/* Route labels beyond this many share one "overflow" slot. */
#define METRICS_MAX_ROUTES 80

/* Starts the clock and records the build-info labels. version and simd must
 * outlive the process (string literals). */
void metrics_init(const char *version, const char *simd);

/* The slot of a route label, registering it on first use; call at start,
 * before serving (not thread-safe against updates). */
int metrics_route(const char *route);

/* One finished HTTP request; times in seconds. status 0: the client went away
 * before it had the answer (rendered status="undelivered", counted as
 * dropped as well). */
void metrics_request(int route, unsigned status, double queue_s, double inference_s,
                     double total_s);

/* A connection the HTTP layer closed itself: refused past max_connections,
 * or its request not in within connection_timeout_s. */
/* METRICS_CONN_CUT (h-http2): an early 413 that went out only in part,
 * after which the connection is shut down rather than answered twice. */
/* METRICS_CONN_EVICTED: an idle connection closed to admit a new one at
 * max_connections; METRICS_CONN_FRAMING: a request with ambiguous length
 * answered 400, after which the connection closes. */
enum {
    METRICS_CONN_LIMIT,
    METRICS_CONN_LATE,
    METRICS_CONN_CUT,
    METRICS_CONN_EVICTED,
    METRICS_CONN_FRAMING,
    METRICS_CONN_NREASONS
};
void metrics_connection_closed(int reason);

/* One batch as the scheduler saw it (its on_batch observer). */
void metrics_batch(const sched_batch *b);

/* Each served model, registered at start in order (its slot is its
 * scheduler group); the strings must outlive the process's serving.
 * Returns the slot, or -1 past METRICS_MAX_MODELS. */
#define METRICS_MAX_MODELS CONFIG_MAX_MODELS
int metrics_add_model(const char *name, const char *task, const char *engine,
                      const char *precision);
/* The attention kernel model slot's engine runs in place of the attention
 * backend (engine_attn_kernel; NULL: none, the backend runs), for
 * attnserve_engine_attention_info. The string must outlive serving. */
void metrics_set_model_attention(int slot, const char *kernel);
/* A finished batch of model slot: attnserve_model_*_total{model=...}. */
void metrics_model_batch(int slot, const sched_batch *b);

/* One forward call of a backend: wall seconds and floating-point work. */
void metrics_kernel(const attn_backend *backend, double seconds, double flops);

/* One embedding request computed: its inputs and their tokens. */
void metrics_embeddings(uint64_t inputs, uint64_t tokens);

/* HTTP requests started (+1) and completed (-1): the in-flight gauge. */
void metrics_http_in_flight(int delta);

/* Gauges set by whoever owns the value. */
void metrics_set_workspace_bytes(size_t bytes);
void metrics_set_backend(const attn_backend *backend); /* the one in force */
void metrics_set_ready(int ready);
/* The worst-case memory of the configuration and the request-memory budget
 * whose use is rendered (membudget.h; may be NULL). */
struct membudget;
void metrics_set_memory(size_t worst_case_bytes, const struct membudget *budget);

/* ---- safety net: start-up self-test and fallback ----
 * One backend's self-test on the SIMD path it runs (simd: its simd_path()
 * string, which outlives the process); set at start, before serving. */
void metrics_set_selftest(const attn_backend *backend, const char *simd, int passed,
                          double max_error_ratio);
/* 1 while the backend in force is not the one configured, for any reason. */
void metrics_set_fallback_active(int active);

/* The scheduler whose stats (queue depth, in flight, rejected, cancelled)
 * are rendered; may be NULL. */
void metrics_set_scheduler(sched *s);

/* The codec workers (workpool.h) whose size, waiting tasks and busy time
 * are rendered; may be NULL (none run). */
struct workpool;
void metrics_set_codec(struct workpool *p);

/* ---- shadow verification and fallback (server/ops/verify.c) ----
 * attnserve_verify_batches_total{backend}, attnserve_verify_mismatches_total
 * {backend}, attnserve_verify_skipped_total, the histograms
 * attnserve_verify_max_error_over_bound and attnserve_verify_mean_abs_error,
 * and attnserve_attention_kernel_flops_per_second{backend} (rendered from
 * metrics_kernel's calls). */

/* One finished check of backend: mismatch or not, its largest error/bound
 * ratio and its mean absolute error. */
void metrics_verify(const attn_backend *backend, int mismatch, double max_ratio, double mean_abs);
/* A sampled batch not checked because the checker was still busy. */
void metrics_verify_skipped(void);

/* One trace line written (true) or dropped (false): attnserve_trace_lines_total
 * and attnserve_trace_lines_dropped_total. */
void metrics_trace_line(int written);

/* ---- the engine (server/ops/engine.h) ----
 * attnserve_engine_info{model,engine,precision} and the forward counters,
 * one series per model registered by metrics_add_model (its engine and
 * precision). One encoder forward of model slot's engine: wall seconds and
 * its FLOPs (engine_flops). */
void metrics_engine_forward(int slot, double seconds, double flops);

/* The exposition text (malloc'd, NUL-terminated, *len without the NUL), or
 * NULL when out of memory. */
char *metrics_render(size_t *len);

#endif

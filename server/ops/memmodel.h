/* memmodel.h — the worst-case memory the configuration lets the service
 * hold (weights, workspaces, connections, requests, threads, runtime),
 * computed once start has allocated everything, logged, shown on /info and
 * enforced against the memory limit before the listener opens. */
#ifndef SRV_MEMMODEL_H
#define SRV_MEMMODEL_H

#include <stddef.h>

#include <jansson.h>

#include "server/app.h"

/* The threads listening adds, on top of those start() leaves running:
 * libmicrohttpd's I/O thread, the connection watch and the codec workers.
 * Everything else (the pool, the scheduler's loop and compute threads, the
 * verification checker, the trace writer, and whatever an engine or a
 * plugin's runtime started) exists by then and is counted as it runs, so
 * the memory check can run before the listener opens; main warns, once
 * listening, when more run than were counted. */
size_t memmodel_listen_threads(const config *c);

/* Every workspace allocated at start: the attention service's and each
 * model's. */
size_t memmodel_workspace_bytes(const app *a);

/* What the process holds now, measured from /proc/self: resident memory,
 * every executable mapping whole, and the running threads; 0 if unknown. */
size_t memmodel_resident_bytes(void);
size_t memmodel_code_bytes(void);
size_t memmodel_process_threads(void);

/* threads' stacks, whole. */
size_t memmodel_threads_bytes(size_t threads);

/* One model's share: its weights, owned and mapped, and its workspace. */
void memmodel_model(const served_model *sm, json_int_t *owned, json_int_t *mapped,
                    json_int_t *workspace);

/* The worst case part by part, as /info's "memory" and the start log show
 * it; NULL when out of memory. */
json_t *memmodel_json(const app *a);

/* The sum of memmodel_json's parts. */
size_t memmodel_worst_case_bytes(const app *a);

/* Returns 0 when the worst case fits the memory limit (memory_limit_bytes,
 * else the cgroup's) or only a cgroup limit is exceeded (then it warns);
 * CONFIG_EXIT_INVALID when memory_limit_bytes is exceeded. Either way past
 * the limit logs the worst case and each model's share. */
int memmodel_check_limit(const app *a);

#endif

/* reload.h — SIGHUP: the settings re-read and validated as at start, every
 * reloadable setting applied to the running service through its row's apply
 * function in the settings table, then the new configuration swapped in; a
 * refused reload changes nothing. */
#ifndef SRV_RELOAD_H
#define SRV_RELOAD_H

#include "server/config.h"
#include "server/work/scheduler.h"

typedef struct app app;

/* Reloads a's configuration (config.h's config_reload, then config_apply
 * with a as the service), logging each change and what needs a restart.
 * Runs on the main thread, one reload at a time. */
void reload_settings(app *a);

/* The scheduler's limits the settings give: start creates the scheduler
 * with them, a reload sets them again. */
sched_limits reload_sched_limits(const config *c);

/* The apply functions the settings table names (config_apply_fn; service is
 * the app). Each takes the whole of next and applies every setting that
 * names it, so a reload runs it once. */

/* log_level, log_format. */
void reload_log(void *service, const config *next);
/* backend, fallback_backends, the verification settings and trace_file: one
 * decision under the backend lock (backend_choice_reload). */
void reload_backend(void *service, const config *next);
/* max_wait_us: the scheduler's limits, between batches. */
void reload_batching(void *service, const config *next);
/* The request limits every API reads per request. */
void reload_requests(void *service, const config *next);
/* The API keys (api_key_file and $ATTNSERVE_API_KEY, re-read whether or
 * not the file's name changed) and metrics_require_key. */
void reload_access(void *service, const config *next);
/* Settings read from the configuration in force whenever they are used
 * (drain_timeout_s and drain_linger_ms, when the signal comes): the swap
 * that ends a reload applies them, so this does nothing. */
void reload_by_swap(void *service, const config *next);

#endif

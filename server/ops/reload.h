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

#endif

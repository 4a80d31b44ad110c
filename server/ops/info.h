/* info.h — the operations routes: /health, /ready (and TEI's / and /ping),
 * /metrics and /info, whose document describes the running service as it
 * is now, read under the configuration lock. */
#ifndef SRV_INFO_H
#define SRV_INFO_H

#include "server/app.h"

/* Adds the operations routes to a->routes, each with a as its context.
 * Returns 0, or -1 when the table refuses one. */
int info_register(app *a);

#endif

/* routes.h — the route table every module adds its routes to before the
 * server starts (http_create takes the result). Each API module registers
 * its own routes; main only wires the modules together. */
#ifndef ATTN_ROUTES_H
#define ATTN_ROUTES_H

#include <stddef.h>

#include "server/http/http.h"

#define ROUTES_MAX 64

typedef struct routes {
    http_route r[ROUTES_MAX];
    size_t n;
} routes;

/* Appends route; -1 (nothing added) when the table is full or the method
 * and path are already taken, so two modules can never claim one route. */
int routes_add(routes *t, http_route route);

/* Appends the n routes of mine in order; -1 at the first one refused. */
int routes_add_all(routes *t, const http_route *mine, size_t n);

#endif

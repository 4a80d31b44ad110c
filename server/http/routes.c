/* routes.c — the route table. */
#include "server/http/routes.h"

#include <string.h>

int routes_add(routes *t, http_route route) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->r[i].method, route.method) == 0 && strcmp(t->r[i].path, route.path) == 0)
            return -1;
    if (t->n == ROUTES_MAX)
        return -1;
    t->r[t->n++] = route;
    return 0;
}

int routes_add_all(routes *t, const http_route *mine, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (routes_add(t, mine[i]) != 0)
            return -1;
    return 0;
}

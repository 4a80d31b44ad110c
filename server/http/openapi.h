/* openapi.h — GET /openapi.json, the OpenAPI 3.1 document of every route, and
 * GET /docs, Swagger UI on it (its files under GET /docs/), with nothing
 * fetched from elsewhere.
 *
 * The document is server/http/openapi.json (written by scripts/gen_openapi.py),
 * built into the binary; openapi_init sets its info.version to the binary's
 * once, at start, so both answers are sent from memory that lives as long as
 * the process and cost a request nothing. tests/e2e/test_openapi.py keeps the
 * document's paths and methods equal to the route table. */
#ifndef ATTN_OPENAPI_H
#define ATTN_OPENAPI_H

#include "server/http/http.h"
#include "server/http/routes.h"

/* Returns 0, or -1 when the embedded document does not parse or memory runs
 * out (a build defect: start-up fails). Also builds the /docs page, which
 * links Swagger UI's files by its version. */
int openapi_init(const char *version);
void openapi_free(void);

/* Adds GET /openapi.json, GET /docs and GET /docs/<file>, open to all (no
 * key: they say nothing about the data served). Returns 0, or -1
 * (routes_add). */
int openapi_register(routes *t);

#endif

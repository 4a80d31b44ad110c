/* openapi.c — the OpenAPI document and its page, built into the binary.
 *
 * Both files are taken in whole by the assembler (.incbin, paths from the
 * repository root, where make runs), so what is served is byte for byte what
 * is committed; mk/openapi.mk rebuilds this object when either changes. */
#include "server/http/openapi.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/api/errors.h"

#define EMBED(name, path)                                                                          \
    __asm__(".section .rodata\n"                                                                   \
            ".balign 16\n"                                                                         \
            ".hidden " #name "\n" #name ":\n"                                                      \
            ".incbin \"" path "\"\n"                                                               \
            ".byte 0\n"                                                                            \
            ".previous\n")

EMBED(openapi_json_src, "server/http/openapi.json");
EMBED(openapi_docs_html, "server/http/docs.html");
/* Each file is followed by a NUL byte: text, its length is strlen's. */
extern const char openapi_json_src[];
extern const char openapi_docs_html[];

static char *served; /* the document with this binary's version */
static size_t served_len;

int openapi_init(const char *version) {
    json_error_t e;
    /* Start-up memory, not a request's: outside any budget scope. */
    json_t *doc = json_loadb(openapi_json_src, strlen(openapi_json_src), 0, &e);
    json_t *info = doc ? json_object_get(doc, "info") : NULL;
    if (!info || json_object_set_new(info, "version", json_string(version)) != 0) {
        json_decref(doc);
        return -1;
    }
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (!text)
        return -1;
    /* jansson allocates through the budget's allocator: keep a copy of our
     * own so that freeing it never depends on that. */
    served_len = strlen(text);
    served = malloc(served_len + 1);
    if (served)
        memcpy(served, text, served_len + 1);
    json_free_t jfree;
    json_malloc_t jmalloc;
    json_get_alloc_funcs(&jmalloc, &jfree);
    jfree(text);
    return served ? 0 : -1;
}

void openapi_free(void) {
    free(served);
    served = NULL;
}

static int handle_json(http_request *req, void *ctx) {
    (void)ctx;
    if (!served)
        return http_reply_error(req, SRV_EINTERNAL, "the OpenAPI document was not loaded");
    return http_reply_static(req, 200, "application/json", served, served_len);
}

static int handle_docs(http_request *req, void *ctx) {
    (void)ctx;
    return http_reply_static(req, 200, "text/html; charset=utf-8", openapi_docs_html,
                             strlen(openapi_docs_html));
}

int openapi_register(routes *t) {
    const http_route mine[] = {
        {"GET", "/openapi.json", false, HTTP_AUTH_OPEN, handle_json, NULL, NULL,
         HTTP_ERRORS_OPENAI},
        {"GET", "/docs", false, HTTP_AUTH_OPEN, handle_docs, NULL, NULL, HTTP_ERRORS_OPENAI},
    };
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (routes_add(t, mine[i]) != 0)
            return -1;
    return 0;
}

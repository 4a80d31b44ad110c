/* openapi.c — the OpenAPI document and its page, built into the binary.
 *
 * Every file is taken in whole by the assembler (.incbin), so what is served
 * is byte for byte what was built: the document and the page's own files from
 * the repository (paths from its root, where make runs), Swagger UI's from
 * SWAGGER_UI_DIR (scripts/get-swagger-ui.sh puts them there). mk/openapi.mk
 * rebuilds this object when any of them changes. */
#include "server/http/openapi.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/api/errors.h"

#ifndef SWAGGER_UI_DIR
#ifdef __CPPCHECK__
#define SWAGGER_UI_DIR "swagger-ui"
#else
#error "SWAGGER_UI_DIR (Swagger UI's files) is set by mk/openapi.mk"
#endif
#endif

/* name: the file's bytes followed by a NUL (the text files are then C
 * strings); name_size: their number, without the NUL. */
#define EMBED(name, path)                                                                          \
    __asm__(".section .rodata\n"                                                                   \
            ".balign 16\n"                                                                         \
            ".hidden " #name "\n" #name ":\n"                                                      \
            ".incbin \"" path "\"\n"                                                               \
            ".set " #name "_n, . - " #name "\n"                                                    \
            ".byte 0\n"                                                                            \
            ".balign 8\n"                                                                          \
            ".hidden " #name "_size\n" #name "_size:\n"                                            \
            ".quad " #name "_n\n"                                                                  \
            ".previous\n");                                                                        \
    extern const char name[];                                                                      \
    extern const unsigned long long name##_size

EMBED(openapi_json_src, "server/http/openapi.json");
EMBED(docs_html_src, "server/http/docs.html");
EMBED(docs_js, "server/http/docs.js");
EMBED(swagger_ui_js, SWAGGER_UI_DIR "/swagger-ui-bundle.js");
EMBED(swagger_ui_css, SWAGGER_UI_DIR "/swagger-ui.css");
EMBED(swagger_ui_icon, SWAGGER_UI_DIR "/favicon-32x32.png");
EMBED(swagger_ui_license, SWAGGER_UI_DIR "/LICENSE");
EMBED(swagger_ui_version, SWAGGER_UI_DIR "/VERSION");

static char *served; /* the document with this binary's version */
static size_t served_len;
static char *page; /* docs.html with Swagger UI's version in its links */
static size_t page_len;

/* The page loads nothing from another origin; its scripts and styles are
 * files of its own (no inline ones), and what it fetches is this service.
 * data: images are Swagger UI's icons, drawn by its stylesheet. */
#define DOCS_CSP                                                                                   \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* Swagger UI's files are linked with its version as the query, so a
 * browser may keep them for good; the rest is small and may change with the
 * binary, so a browser asks again each time. */
#define CACHE_FOREVER     "public, max-age=31536000, immutable"
#define CACHE_NEVER_STALE "no-cache"

/* The page with every "@SWAGGER_UI_VERSION@" replaced by the version that
 * Swagger UI's VERSION file names ("v5.34.0\n" gives "5.34.0"). */
static char *make_page(size_t *len) {
    static const char mark[] = "@SWAGGER_UI_VERSION@";
    const char *v = swagger_ui_version + (swagger_ui_version[0] == 'v');
    size_t vlen = strcspn(v, "\r\n");
    size_t marks = 0;
    for (const char *p = strstr(docs_html_src, mark); p; p = strstr(p + 1, mark))
        marks++;
    size_t n = (size_t)docs_html_src_size + marks * vlen;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    char *o = out;
    const char *in = docs_html_src;
    for (const char *p; (p = strstr(in, mark)) != NULL; in = p + sizeof mark - 1) {
        memcpy(o, in, (size_t)(p - in));
        o += p - in;
        memcpy(o, v, vlen);
        o += vlen;
    }
    strcpy(o, in);
    *len = strlen(out);
    return out;
}

int openapi_init(const char *version) {
    json_error_t e;
    /* Start-up memory, not a request's: outside any budget scope. */
    json_t *doc = json_loadb(openapi_json_src, (size_t)openapi_json_src_size, 0, &e);
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
    page = make_page(&page_len);
    return served && page ? 0 : -1;
}

void openapi_free(void) {
    free(served);
    served = NULL;
    free(page);
    page = NULL;
}

static int handle_json(http_request *req, void *ctx) {
    (void)ctx;
    if (!served)
        return http_reply_error(req, SRV_EINTERNAL, "the OpenAPI document was not loaded");
    return http_reply_static(req, 200, "application/json", served, served_len);
}

static int handle_docs(http_request *req, void *ctx) {
    (void)ctx;
    static const char *const headers[] = {"Content-Security-Policy",
                                          DOCS_CSP,
                                          "Cache-Control",
                                          CACHE_NEVER_STALE,
                                          "X-Content-Type-Options",
                                          "nosniff",
                                          NULL};
    if (!page)
        return http_reply_error(req, SRV_EINTERNAL, "the /docs page was not built");
    return http_reply_static_headers(req, 200, "text/html; charset=utf-8", page, page_len, headers);
}

/* The files the page links, under /docs/. */
typedef struct docs_file {
    const char *name;
    const char *type;
    const char *data;
    const unsigned long long *size;
    const char *cache;
} docs_file;

static const docs_file docs_files[] = {
    {"swagger-ui-bundle.js", "text/javascript; charset=utf-8", swagger_ui_js, &swagger_ui_js_size,
     CACHE_FOREVER},
    {"swagger-ui.css", "text/css; charset=utf-8", swagger_ui_css, &swagger_ui_css_size,
     CACHE_FOREVER},
    {"favicon-32x32.png", "image/png", swagger_ui_icon, &swagger_ui_icon_size, CACHE_FOREVER},
    {"docs.js", "text/javascript; charset=utf-8", docs_js, &docs_js_size, CACHE_NEVER_STALE},
    {"LICENSE", "text/plain; charset=utf-8", swagger_ui_license, &swagger_ui_license_size,
     CACHE_NEVER_STALE},
};

static int handle_docs_file(http_request *req, void *ctx) {
    (void)ctx;
    const char *name = http_path(req) + strlen("/docs/");
    for (size_t i = 0; i < sizeof docs_files / sizeof docs_files[0]; i++) {
        const docs_file *f = &docs_files[i];
        if (strcmp(name, f->name) != 0)
            continue;
        const char *const headers[] = {"Cache-Control", f->cache, "X-Content-Type-Options",
                                       "nosniff", NULL};
        return http_reply_static_headers(req, 200, f->type, f->data, (size_t)*f->size, headers);
    }
    return http_reply_error(req, SRV_ENOTFOUND, "no such file under /docs/");
}

int openapi_register(routes *t) {
    const http_route mine[] = {
        {"GET", "/openapi.json", false, HTTP_AUTH_OPEN, handle_json, NULL, NULL,
         HTTP_ERRORS_OPENAI},
        {"GET", "/docs", false, HTTP_AUTH_OPEN, handle_docs, NULL, NULL, HTTP_ERRORS_OPENAI},
        {"GET", "/docs/*", false, HTTP_AUTH_OPEN, handle_docs_file, NULL, NULL, HTTP_ERRORS_OPENAI},
    };
    return routes_add_all(t, mine, sizeof mine / sizeof mine[0]);
}

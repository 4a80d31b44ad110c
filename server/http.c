/* http.c — libmicrohttpd glue: routes, bodies with a hard cap, API keys,
 * common response headers, suspend/resume, one log line per request.
 *
 * MHD calls on_access several times per request: once when the headers are
 * in (the state is allocated and every header-level check is made), once per
 * piece of body, and once more when the body is complete (the handler runs).
 * A parked request is called once more after http_resume. on_completed frees
 * the state whatever happened. Only the I/O thread touches a request, except
 * http_resume and what the handler's own worker writes into its user state
 * before calling it. */
#include "http.h"

#include <ctype.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "errors.h"
#include "log.h"
#include "metrics.h"

/* A client-sent x-request-id longer than this, or with characters outside
 * printable ASCII, is replaced by a generated one. */
#define REQUEST_ID_MAX 128

/* A body without Content-Length that passes max_body_bytes is read on and
 * thrown away so the client can still read its 413; past this many times the
 * limit the connection is simply closed, so a client cannot keep the I/O
 * thread busy reading an endless stream. */
#define DISCARD_FACTOR 16

struct http_server {
    struct MHD_Daemon *daemon;
    const http_route *routes;
    size_t nroutes;
    int route_slot[METRICS_MAX_ROUTES]; /* metrics slot of routes[i] */
    int unmatched_slot;
    const char *(*backend_name)(void *ctx);
    void *backend_ctx;
    int port;

    size_t max_body_bytes;
    _Atomic bool metrics_require_key;
    _Atomic bool quiesced;
    _Atomic bool started; /* MHD's own messages drop to debug once serving */
    _Atomic uint64_t active;

    pthread_mutex_t keys_mu; /* guards keys: a reload swaps them while serving */
    char **keys;
    size_t nkeys;

    char id_prefix[9];
    _Atomic uint64_t id_counter;
};

struct http_request {
    http_server *srv;
    struct MHD_Connection *conn;
    const http_route *route; /* NULL: unknown path */
    int slot;                /* metrics route slot */
    const char *method;
    char path[128]; /* for the log line; cut if longer */
    char id[REQUEST_ID_MAX + 1];
    struct timespec t0;

    /* An answer decided from the headers, written once the body is in. */
    int pending;
    char pending_msg[192];
    char allow[32]; /* the Allow header of a 405 */

    char *body;
    size_t len, cap, discarded;

    bool parked;
    bool after_quiesce; /* started once draining had begun */
    unsigned status;    /* the status queued; 0 until then */
    double queue_ms, inference_ms;
    const char *backend;

    void *user;
    void (*user_free)(void *);
};

static double ms_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* ---- responses -------------------------------------------------------------- */

static int queue(http_request *req, unsigned status, struct MHD_Response *resp) {
    char num[32];
    const char *backend = req->backend;
    if (!backend && req->srv->backend_name)
        backend = req->srv->backend_name(req->srv->backend_ctx);
    MHD_add_response_header(resp, "x-request-id", req->id);
    snprintf(num, sizeof num, "%.3f", req->queue_ms);
    MHD_add_response_header(resp, "x-queue-time-ms", num);
    snprintf(num, sizeof num, "%.3f", req->inference_ms);
    MHD_add_response_header(resp, "x-inference-time-ms", num);
    MHD_add_response_header(resp, "x-attention-backend", backend ? backend : "none");
    /* While draining, keep-alive clients are told to go elsewhere. */
    if (atomic_load(&req->srv->quiesced))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result r = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    if (r != MHD_YES)
        return HTTP_FAIL;
    req->status = status;
    return HTTP_DONE;
}

static struct MHD_Response *response_from(char *text, size_t len, const char *content_type) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    return resp;
}

int http_reply_json(http_request *req, unsigned status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    if (!text)
        return status == 500 ? HTTP_FAIL : http_reply_error(req, SRV_EINTERNAL, "out of memory");
    struct MHD_Response *resp = response_from(text, strlen(text), "application/json");
    return resp ? queue(req, status, resp) : HTTP_FAIL;
}

int http_reply_text(http_request *req, unsigned status, const char *content_type, const char *text,
                    size_t len) {
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return HTTP_FAIL;
    memcpy(copy, text, len);
    struct MHD_Response *resp = response_from(copy, len, content_type);
    return resp ? queue(req, status, resp) : HTTP_FAIL;
}

int http_reply_error(http_request *req, int err, const char *fmt, ...) {
    char msg[512];
    const char *text = NULL;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        /* Messages may quote client input (parser errors do): keep them
         * printable ASCII so they are valid JSON strings and safe to log. */
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                *p = '?';
        text = msg;
    }
    json_t *body = srv_error_body(err, text);
    char *dumped = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!dumped)
        return HTTP_FAIL;
    struct MHD_Response *resp = response_from(dumped, strlen(dumped), "application/json");
    if (!resp)
        return HTTP_FAIL;
    unsigned status = srv_error_status(err);
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, req->allow);
    return queue(req, status, resp);
}

/* ---- per-request state ------------------------------------------------------- */

static bool usable_request_id(const char *id) {
    size_t n = 0;
    for (; id[n]; n++)
        if (n >= REQUEST_ID_MAX || id[n] < '!' || id[n] > '~' || id[n] == '"' || id[n] == '\\')
            return false;
    return n > 0;
}

static void set_request_id(http_request *req) {
    const char *given = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "x-request-id");
    if (given && usable_request_id(given)) {
        snprintf(req->id, sizeof req->id, "%s", given);
        return;
    }
    uint64_t n = atomic_fetch_add_explicit(&req->srv->id_counter, 1, memory_order_relaxed);
    snprintf(req->id, sizeof req->id, "%s%08llx", req->srv->id_prefix,
             (unsigned long long)(n & 0xffffffffu));
}

static bool method_matches(const char *route_method, const char *method) {
    return strcmp(route_method, method) == 0 ||
           (strcmp(route_method, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

/* Finds the route; on a path known under other methods, fills req->allow. */
static const http_route *find_route(http_request *req, const char *url, const char *method) {
    const http_server *srv = req->srv;
    req->allow[0] = '\0';
    for (size_t i = 0; i < srv->nroutes; i++) {
        const http_route *r = &srv->routes[i];
        if (strcmp(r->path, url) != 0)
            continue;
        req->slot = srv->route_slot[i];
        if (method_matches(r->method, method))
            return r;
        size_t used = strlen(req->allow);
        snprintf(req->allow + used, sizeof req->allow - used, "%s%s%s", used ? ", " : "", r->method,
                 strcmp(r->method, "GET") == 0 ? ", HEAD" : "");
    }
    return NULL;
}

/* Constant time in the presented key for each configured key; every key is
 * compared, so the time does not tell which one (or whether any) matched. */
static bool key_equal(const char *given, size_t given_len, const char *key) {
    size_t key_len = strlen(key);
    unsigned char diff = (unsigned char)(given_len != key_len);
    for (size_t i = 0; i < key_len; i++)
        diff |= (unsigned char)(key[i] ^ (i < given_len ? given[i] : 0));
    return diff == 0;
}

static bool authorized(http_request *req) {
    http_server *srv = req->srv;
    if (req->route->auth == HTTP_AUTH_OPEN)
        return true;
    if (req->route->auth == HTTP_AUTH_METRICS && !atomic_load(&srv->metrics_require_key))
        return true;
    const char *h =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    pthread_mutex_lock(&srv->keys_mu);
    bool ok = srv->nkeys == 0;
    if (!ok && h && strncasecmp(h, "Bearer ", 7) == 0) {
        const char *given = h + 7;
        while (*given == ' ')
            given++;
        size_t given_len = strlen(given);
        bool any = false;
        for (size_t i = 0; i < srv->nkeys; i++)
            any |= key_equal(given, given_len, srv->keys[i]);
        ok = any;
    }
    pthread_mutex_unlock(&srv->keys_mu);
    return ok;
}

/* "application/json", any case, optionally followed by parameters. */
static bool is_json_type(const char *ct) {
    static const char json[] = "application/json";
    if (!ct || strncasecmp(ct, json, sizeof json - 1) != 0)
        return false;
    char next = ct[sizeof json - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

static void set_pending(http_request *req, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_pending(http_request *req, int err, const char *fmt, ...) {
    req->pending = err;
    req->pending_msg[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(req->pending_msg, sizeof req->pending_msg, fmt, ap);
        va_end(ap);
    }
}

static http_request *request_start(http_server *srv, struct MHD_Connection *conn, const char *url,
                                   const char *method) {
    http_request *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    clock_gettime(CLOCK_MONOTONIC, &req->t0);
    req->srv = srv;
    req->conn = conn;
    req->method = method;
    req->slot = srv->unmatched_slot;
    snprintf(req->path, sizeof req->path, "%s", url);
    set_request_id(req);
    req->after_quiesce = atomic_load(&srv->quiesced);
    atomic_fetch_add(&srv->active, 1);
    metrics_http_in_flight(1);

    req->route = find_route(req, url, method);
    if (!req->route) {
        if (req->allow[0])
            set_pending(req, SRV_EMETHOD, "method %s not allowed on %s (allowed: %s)", method,
                        req->path, req->allow);
        else
            set_pending(req, SRV_ENOTFOUND, "no route %s", req->path);
    } else if (!authorized(req)) {
        set_pending(req, SRV_EUNAUTHORIZED, NULL);
    } else if (req->route->json_body && !is_json_type(MHD_lookup_connection_value(
                                            conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE))) {
        set_pending(req, SRV_EMEDIATYPE, NULL);
    }
    return req;
}

/* The first call: an announced body over the limit is refused before a byte
 * of it is read (MHD then closes the connection). */
static int early_answer(http_request *req) {
    const char *cl =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    size_t max = req->srv->max_body_bytes;
    if (!cl || strtoull(cl, NULL, 10) <= max)
        return HTTP_DONE;
    if (req->pending)
        return http_reply_error(req, req->pending, req->pending_msg[0] ? "%s" : NULL,
                                req->pending_msg);
    return http_reply_error(req, SRV_ETOOLARGE, "request body of %s bytes exceeds the limit of %zu",
                            cl, max);
}

/* Keeps a piece of body, or throws it away once an answer is decided. */
static int take_body(http_request *req, const char *data, size_t n) {
    size_t max = req->srv->max_body_bytes;
    if (!req->pending && req->len + n > max)
        set_pending(req, SRV_ETOOLARGE, "request body exceeds the limit of %zu bytes", max);
    if (req->pending) {
        req->discarded += n;
        return req->discarded / DISCARD_FACTOR > max ? HTTP_FAIL : HTTP_DONE;
    }
    if (req->len + n > req->cap) {
        size_t cap = req->cap ? req->cap : 4096;
        while (cap < req->len + n)
            cap *= 2;
        if (cap > max)
            cap = max;
        char *grown = realloc(req->body, cap + 1);
        if (!grown) {
            set_pending(req, SRV_EINTERNAL, "out of memory reading the body");
            return HTTP_DONE;
        }
        req->body = grown;
        req->cap = cap;
    }
    memcpy(req->body + req->len, data, n);
    req->len += n;
    req->body[req->len] = '\0';
    return HTTP_DONE;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_size, void **con_cls) {
    (void)version;
    http_server *srv = cls;
    http_request *req = *con_cls;
    int r;
    if (!req) {
        req = request_start(srv, conn, url, method);
        if (!req)
            return MHD_NO;
        *con_cls = req;
        r = early_answer(req);
    } else if (*upload_size) {
        r = take_body(req, upload_data, *upload_size);
        *upload_size = 0;
    } else if (req->parked) {
        req->parked = false;
        r = req->route->resumed(req, req->route->ctx);
    } else if (req->pending) {
        r = http_reply_error(req, req->pending, req->pending_msg[0] ? "%s" : NULL,
                             req->pending_msg);
    } else {
        r = req->route->handler(req, req->route->ctx);
    }
    return r == HTTP_FAIL ? MHD_NO : MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    http_request *req = *con_cls;
    if (!req)
        return;
    *con_cls = NULL;
    double total_ms = ms_since(&req->t0);
    unsigned status = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? req->status : 0;
    const char *backend = req->backend ? req->backend : "";
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        log_info("request", LOG_KV("request_id", req->id), LOG_KV("method", req->method),
                 LOG_KV("route", req->path), LOG_KV("status", status),
                 LOG_KV("queue_ms", req->queue_ms), LOG_KV("inference_ms", req->inference_ms),
                 LOG_KV("total_ms", total_ms), LOG_KV("backend", backend));
    else
        log_info("request", LOG_KV("request_id", req->id), LOG_KV("method", req->method),
                 LOG_KV("route", req->path), LOG_KV("status", status),
                 LOG_KV("queue_ms", req->queue_ms), LOG_KV("inference_ms", req->inference_ms),
                 LOG_KV("total_ms", total_ms), LOG_KV("backend", backend),
                 LOG_KV("closed", toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED   ? "timeout"
                                  : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? "shutdown"
                                                                                  : "client"));
    metrics_request(req->slot, status, req->queue_ms * 1e-3, req->inference_ms * 1e-3,
                    total_ms * 1e-3);
    if (req->user_free)
        req->user_free(req->user);
    free(req->body);
    http_server *srv = req->srv;
    free(req);
    metrics_http_in_flight(-1);
    atomic_fetch_sub(&srv->active, 1);
}

/* ---- handler helpers --------------------------------------------------------- */

double http_age_ms(const http_request *req) {
    return ms_since(&req->t0);
}

bool http_draining(const http_request *req) {
    return req->after_quiesce;
}

const char *http_body(const http_request *req, size_t *len) {
    *len = req->len;
    return req->body ? req->body : "";
}

void http_set_user(http_request *req, void *user, void (*free_fn)(void *)) {
    req->user = user;
    req->user_free = free_fn;
}

void *http_user(const http_request *req) {
    return req->user;
}

void http_set_timing(http_request *req, double queue_ms, double inference_ms, const char *backend) {
    req->queue_ms = queue_ms;
    req->inference_ms = inference_ms;
    req->backend = backend;
}

/* Nesting depth outside strings, so that a body nested 100 000 deep is
 * refused before the parser builds anything of it. */
static bool nesting_within(const char *s, size_t n, int limit) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit)
                return false;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return true;
}

json_t *http_json_parse(const char *body, size_t n, char *why, size_t why_len) {
    if (n == 0) {
        snprintf(why, why_len, "request body is empty; expected a JSON object");
        return NULL;
    }
    if (!nesting_within(body, n, HTTP_JSON_MAX_DEPTH)) {
        snprintf(why, why_len, "JSON nested deeper than %d levels", HTTP_JSON_MAX_DEPTH);
        return NULL;
    }
    json_error_t e;
    /* Texts to embed may hold U+0000 (the tokenizer drops it, as Hugging
     * Face's does); jansson still refuses it in keys. Handlers compare
     * string values with their lengths. */
    json_t *root = json_loadb(body, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e);
    if (!root) {
        snprintf(why, why_len, "invalid JSON: %s (line %d, column %d)", e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        snprintf(why, why_len, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

json_t *http_body_json(http_request *req, int *answered) {
    size_t n;
    const char *body = http_body(req, &n);
    char why[256];
    json_t *root = http_json_parse(body, n, why, sizeof why);
    if (!root)
        *answered = http_reply_error(req, SRV_EBADREQUEST, "%s", why);
    return root;
}

void http_park(http_request *req) {
    req->parked = true;
    MHD_suspend_connection(req->conn);
}

void http_resume(http_request *req) {
    MHD_resume_connection(req->conn);
}

/* ---- the server --------------------------------------------------------------- */

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    http_server *srv = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    /* Once serving, MHD's messages are mostly about clients misbehaving:
     * worth a debug line, not a warning per client. */
    if (atomic_load(&srv->started))
        log_debug("libmicrohttpd", LOG_KV("message", msg));
    else
        log_warn("libmicrohttpd", LOG_KV("message", msg));
}

static int resolve(const char *host, int port, struct sockaddr_storage *addr, socklen_t *len) {
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host && host[0] ? host : NULL, service, &hints, &res);
    if (rc != 0) {
        log_error("cannot resolve the listen address", LOG_KV("host", host),
                  LOG_KV("error", gai_strerror(rc)));
        return -1;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void make_id_prefix(http_server *srv) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint32_t)time(NULL) ^ (uint32_t)getpid();
    snprintf(srv->id_prefix, sizeof srv->id_prefix, "%08x", r);
}

http_server *http_create(const http_options *opt, const http_route *routes, size_t n) {
    if (n == 0 || n >= METRICS_MAX_ROUTES)
        return NULL;
    http_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return NULL;
    pthread_mutex_init(&srv->keys_mu, NULL);
    srv->routes = routes;
    srv->nroutes = n;
    for (size_t i = 0; i < n; i++)
        srv->route_slot[i] = metrics_route(routes[i].path);
    srv->unmatched_slot = metrics_route("unmatched");
    srv->backend_name = opt->backend_name;
    srv->backend_ctx = opt->backend_ctx;
    srv->max_body_bytes = opt->max_body_bytes;
    make_id_prefix(srv);

    struct sockaddr_storage addr;
    socklen_t addr_len;
    if (resolve(opt->host, opt->port, &addr, &addr_len) != 0) {
        http_destroy(srv);
        return NULL;
    }
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    /* poll, not epoll: libmicrohttpd 0.9.75 (Debian 12) stalls in epoll mode
     * when the ready connections are an exact multiple of its 128-event
     * batch (it waits again, with the full timeout, before handling the ones
     * it collected): 128 or 256 keep-alive clients dropped /health from ~30k
     * to ~200 requests/s. poll is level-triggered and showed no stall. */
    flags |= MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES ? MHD_USE_POLL_INTERNAL_THREAD
                                                                   : MHD_USE_AUTO_INTERNAL_THREAD;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    srv->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_access, srv, MHD_OPTION_EXTERNAL_LOGGER,
                                   mhd_log, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                   MHD_OPTION_CONNECTION_LIMIT, opt->max_connections,
                                   MHD_OPTION_CONNECTION_TIMEOUT, opt->connection_timeout_s,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                   MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
    if (!srv->daemon) {
        log_error("cannot listen", LOG_KV("host", opt->host), LOG_KV("port", opt->port));
        http_destroy(srv);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : opt->port;
    atomic_store(&srv->started, true);
    return srv;
}

int http_port(const http_server *srv) {
    return srv->port;
}

void http_quiesce(http_server *srv) {
    if (atomic_exchange(&srv->quiesced, true))
        return;
    MHD_socket fd = MHD_quiesce_daemon(srv->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

uint64_t http_active(const http_server *srv) {
    return atomic_load(&srv->active);
}

static void free_keys(char **keys, size_t n) {
    for (size_t i = 0; i < n; i++) {
        explicit_bzero(keys[i], strlen(keys[i]));
        free(keys[i]);
    }
    free(keys);
}

void http_destroy(http_server *srv) {
    if (!srv)
        return;
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    free_keys(srv->keys, srv->nkeys);
    pthread_mutex_destroy(&srv->keys_mu);
    free(srv);
}

int http_set_api_keys(http_server *srv, char *const *keys, size_t n) {
    char **copy = n ? calloc(n, sizeof *copy) : NULL;
    if (n && !copy)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!(copy[i] = strdup(keys[i]))) {
            free_keys(copy, i);
            return -1;
        }
    pthread_mutex_lock(&srv->keys_mu);
    char **old = srv->keys;
    size_t old_n = srv->nkeys;
    srv->keys = copy;
    srv->nkeys = n;
    pthread_mutex_unlock(&srv->keys_mu);
    free_keys(old, old_n);
    return 0;
}

void http_set_metrics_require_key(http_server *srv, bool require) {
    atomic_store(&srv->metrics_require_key, require);
}

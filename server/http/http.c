/* http.c — libmicrohttpd glue: routes, bodies with a hard cap, API keys,
 * common response headers, suspend/resume, one log line per request.
 *
 * MHD calls on_access several times per request: once when the headers are
 * in (the state is allocated and every header-level check is made), once per
 * piece of body, and once more when the body is complete (a JSON route's
 * request is then suspended and its handler runs on a codec worker; any
 * other route's handler runs there and then). A suspended request is called
 * once more when a worker resumes it, to send what the worker answered.
 * on_completed frees the state whatever happened. Only the I/O thread
 * touches a request, except the codec worker that runs its handler or its
 * resumed function while it is suspended, http_resume, and the connection
 * watch (its own thread, below), which marks a suspended request whose
 * client went away. */
#include "server/http/http.h"

#include <ctype.h>
#include <errno.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/api/errors.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"
#include "server/work/membudget.h"
#include "server/work/ticks.h"
#include "server/work/workpool.h"

/* A client-sent x-request-id longer than this, or with characters outside
 * printable ASCII, is replaced by a generated one. */
#define REQUEST_ID_MAX 128

/* A body refused from its headers (404, 401, 415...) is read on and thrown
 * away so the client can still read the answer written after it; past this
 * many times max_body_bytes the connection is simply closed, so a client
 * cannot keep the I/O thread busy reading an endless stream. */
#define DISCARD_FACTOR 16

/* One open connection. Its fd stays valid while the slot is taken: MHD
 * reports the close (on_connection, under conns_mu) before it closes the fd,
 * so the watch never acts on a descriptor that may have been reused. */
typedef struct conn_slot {
    int fd;               /* -1: the slot is free */
    uint32_t gen;         /* bumped whenever the slot changes hands or is watched */
    uint64_t deadline_ns; /* the request under way must be in by then; 0: none */
    uint64_t idle_since;  /* when its last request completed (or it opened) */
    http_request *parked; /* parked and watched for the client closing */
    int next_free;
    bool busy;     /* a request is under way (headers in, not yet completed) */
    bool evicting; /* shut down to admit a new connection; MHD has yet to close it */
} conn_slot;

/* Counted per connection in the worst-case memory (HTTP_CONNECTION_BYTES). */
_Static_assert(sizeof(conn_slot) <= 64, "the connection slot must stay within 64 bytes");

struct http_server {
    struct MHD_Daemon *daemon;
    const http_route *routes;
    size_t nroutes;
    int route_slot[METRICS_MAX_ROUTES]; /* metrics slot of routes[i] */
    int unmatched_slot;
    int unparsed_slot; /* requests libmicrohttpd refused before routing */
    const char *(*backend_name)(void *ctx);
    void *backend_ctx;
    int port;

    size_t max_body_bytes;
    char **cors_origins; /* NULL-terminated; NULL: CORS off */
    bool cors_any;       /* "*" among them */
    _Atomic bool metrics_require_key;
    _Atomic bool quiesced;
    _Atomic bool closing; /* every answer says Connection: close (http_linger) */
    _Atomic bool started; /* MHD's own messages drop to debug once serving */
    _Atomic uint64_t active;
    _Atomic unsigned uncharged_answers; /* /metrics answers not charged to the budget */
    workpool *workers;                  /* the codec workers: every JSON route runs there */

    pthread_mutex_t keys_mu; /* guards keys: a reload swaps them while serving */
    char **keys;
    size_t nkeys;

    char id_prefix[9];
    _Atomic uint64_t id_counter;

    /* The connection watch (see its section): one slot per open connection,
     * guarded by conns_mu, and the thread that enforces request deadlines
     * and notices parked clients going away. */
    pthread_mutex_t conns_mu;
    conn_slot *conns;          /* (max_connections) */
    unsigned nconns;           /* max_connections */
    unsigned nslots, used_hwm; /* nconns + 1; slots from used_hwm on were never used */
    unsigned evicting;         /* slots shut down for a new connection, not yet closed */
    int free_head;             /* the first freed slot, -1: none */
    _Atomic unsigned live_conns;
    uint64_t request_deadline_ns; /* connection_timeout_s */
    int epfd, stopfd;
    pthread_t watcher;
    bool watcher_running;
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
    bool preflight; /* a CORS preflight on a known path: answered 204 */
    http_error_shape errors;

    char *body;
    size_t len, cap, discarded;
    bool answered_early; /* an early 413 written by http.c, the body read on after it */
    size_t read_on;      /* how much of that body is read and thrown away before closing */
    bool framing_error;  /* its length was ambiguous: answered 400, the connection closes */
    bool uncharged;      /* holds one of the HTTP_UNCHARGED_ANSWERS */
    bool answer_cut;     /* that 413 went out only in part: the connection is shut down */
    bool headers_only;   /* in the call with the headers: an answer now comes before the body */
    bool http10;         /* an HTTP/1.0 request */
    size_t json_charge;  /* the parse tree's bound, charged until it is freed */

    conn_slot *cslot; /* NULL when the connection is not watched */
    bool parked;
    /* Set by the watch when the client closed while parked; the
     * completion then closes the connection unanswered. */
    _Atomic bool client_gone;
    void (*on_client_closed)(void *arg);
    void *on_client_closed_arg;
    bool after_quiesce; /* started once draining had begun */
    unsigned status;    /* the status queued; 0 until then */
    uint64_t wire_end;  /* where the answer ends in the connection's byte stream; 0: unknown */
    double queue_ms, inference_ms;
    const char *backend;
    const char *engine, *precision; /* x-engine, x-precision; NULL: no forward ran */

    void *user;
    void (*user_free)(void *);
    void *ctx; /* http_set_ctx's: the route functions' context; NULL: the route's */
    struct http_stream *stream; /* a streamed answer (http_stream_open); NULL: none */

    /* Its handler and resumed function run on the codec workers (a route
     * with a JSON body, when the server has workers): the connection stays
     * suspended while they run, and an answer they make waits in ready for
     * the I/O thread to queue. */
    bool on_worker;
    bool task_resumed; /* the task runs the resumed function, not the handler */
    workpool_task task;
    struct MHD_Response *ready;
    unsigned ready_status;
    size_t ready_len;
};

static void stream_detach(struct http_stream *s);

/* Counted per connection in the worst-case memory (main.c). */
_Static_assert(sizeof(struct http_request) <= HTTP_REQUEST_STATE_BYTES,
               "HTTP_REQUEST_STATE_BYTES must cover the request state");

static double ms_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* ---- responses -------------------------------------------------------------- */

/* Whether an answer reached the client. libmicrohttpd 0.9.75 reports a
 * resumed (parked) request whose client read the whole answer and then reset
 * the connection at once as MHD_REQUEST_TERMINATED_WITH_ERROR: it saw the
 * reset before it marked the request complete (behind haproxy, about 1 in
 * 300-900 requests; a client that reads its answer and closes with SO_LINGER
 * 0 shows it in about 1 in 5). The kernel knows better: TCP_INFO still holds,
 * after the reset, how many bytes the client acknowledged. So queue() notes
 * where the answer will end in the connection's outgoing byte stream, and
 * on_completed counts a request whose client acknowledged up to there as
 * answered with its status, not as dropped. */

static bool tcp_stats(struct MHD_Connection *conn, struct tcp_info *ti) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    socklen_t len = sizeof *ti;
    memset(ti, 0, sizeof *ti);
    return ci && getsockopt(ci->connect_fd, IPPROTO_TCP, TCP_INFO, ti, &len) == 0 &&
           len >= offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof ti->tcpi_bytes_retrans;
}

static enum MHD_Result add_header_bytes(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + 2 + strlen(value) + 2; /* "key: value\r\n" */
    return MHD_YES;
}

typedef struct token_search {
    const char *token;
    bool found;
} token_search;

static enum MHD_Result find_connection_token(void *cls, enum MHD_ValueKind kind, const char *key,
                                             const char *value) {
    (void)kind;
    token_search *t = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONNECTION) != 0 || !value)
        return MHD_YES;
    const size_t n = strlen(t->token);
    for (const char *p = value; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *end = p;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if ((size_t)(end - start) == n && strncasecmp(start, t->token, n) == 0) {
            t->found = true;
            return MHD_NO;
        }
    }
    return MHD_YES;
}

/* Whether a Connection header of the request lists token, read as
 * libmicrohttpd reads it: any of the headers, tokens separated by commas,
 * spaces and tabs around them, case ignored. */
static bool connection_token(const http_request *req, const char *token) {
    token_search t = {token, false};
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, find_connection_token, &t);
    return t.found;
}

/* Whether the client's FIN is the next thing on the connection. MHD closes
 * after the answer once it has read it, and then says so in the answer;
 * whether it has read it yet cannot be asked, so it is taken that it has,
 * which makes the answer's length err high. */
static bool client_finished(const http_request *req) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char byte;
    return ci && recv(ci->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* The Connection header libmicrohttpd 0.9.75 adds to an answer without one
 * of its own (keepalive_possible and build_header_response there), which
 * it decides when the answer is queued: "close" when the connection ends
 * after it (an answer queued before the body was read, a client that asked
 * for that or has sent its FIN, HTTP/1.0 without Keep-Alive), "Keep-Alive"
 * to an HTTP/1.0 client that keeps it, nothing to an HTTP/1.1 one. */
static size_t connection_header_bytes(const http_request *req, struct MHD_Response *resp) {
    if (MHD_get_response_header(resp, MHD_HTTP_HEADER_CONNECTION))
        return 0; /* among the response's headers */
    if (req->headers_only || connection_token(req, "close") ||
        (req->http10 && !connection_token(req, "Keep-Alive")) || client_finished(req))
        return strlen("Connection: close\r\n");
    return req->http10 ? strlen("Connection: Keep-Alive\r\n") : 0;
}

/* The bytes of the answer on the wire: the status line, MHD's Date and
 * Connection headers, Content-Length (none on 1xx and 204), the response's
 * headers, the blank line and the body (none for HEAD, 1xx, 204 and 304),
 * all as libmicrohttpd 0.9.75 writes them. Exact, and where it cannot be
 * (a FIN MHD may not have read) high: an answer is never taken for
 * delivered before its last byte was acknowledged, and one acknowledged in
 * full always is. */
static size_t wire_bytes(http_request *req, unsigned status, struct MHD_Response *resp,
                         size_t body_len) {
    const char *reason = MHD_get_reason_phrase_for(status);
    const bool body_headers = status >= 200 && status != 204;
    char num[32];
    size_t n = strlen("HTTP/1.1 200 \r\n") + strlen(reason ? reason : "");
    n += strlen("Date: Mon, 30 Nov 2026 00:00:00 GMT\r\n");
    if (body_headers)
        n += (size_t)snprintf(num, sizeof num, "Content-Length: %zu\r\n", body_len);
    MHD_get_response_headers(resp, add_header_bytes, &n);
    n += connection_header_bytes(req, resp);
    n += 2;
    if (body_headers && status != 304 && strcmp(req->method, "HEAD") != 0)
        n += body_len;
    return n;
}

/* ---- CORS ------------------------------------------------------------------------
 * Off unless cors_allow_origins names origins. A browser's request from an
 * allowed origin gets Access-Control-Allow-Origin on every answer, errors
 * included (so a page can read why it failed); a preflight (OPTIONS on a known
 * path) gets 204 with the methods of that path, the headers it asked for and
 * a max age. An origin not allowed gets no CORS header, and the browser keeps
 * the answer from the page. No credentials are involved: keys travel in
 * Authorization, which a page sends only after the preflight allowed it. */

/* Headers a page may read from an answer: the service's own timings and id. */
#define CORS_EXPOSE  "x-request-id, x-queue-time-ms, x-inference-time-ms, x-attention-backend"
#define CORS_MAX_AGE "600"

static const char *cors_origin(const http_request *req) {
    const http_server *srv = req->srv;
    if (!srv->cors_origins)
        return NULL;
    const char *origin =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    if (!origin)
        return NULL;
    if (srv->cors_any)
        return "*";
    for (char *const *o = srv->cors_origins; *o; o++)
        if (strcmp(*o, origin) == 0)
            return origin;
    return NULL;
}

static void cors_headers(http_request *req, struct MHD_Response *resp) {
    const char *allow = cors_origin(req);
    if (!allow)
        return;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    if (!req->srv->cors_any)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
    if (!req->preflight) {
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", CORS_EXPOSE);
        return;
    }
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", req->allow);
    const char *asked =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            asked ? asked : "authorization, content-type, x-request-id");
    MHD_add_response_header(resp, "Access-Control-Max-Age", CORS_MAX_AGE);
}

/* The CORS headers of cors_headers as lines, for an answer http.c writes
 * itself (a browser's page reads it too); "" when the request gets none.
 * False when they do not fit in size. */
static bool cors_lines(const http_request *req, char *out, size_t size) {
    const char *allow = cors_origin(req);
    out[0] = '\0';
    if (!allow)
        return true;
    int n = snprintf(out, size,
                     "Access-Control-Allow-Origin: %s\r\n%sAccess-Control-Expose-Headers: %s\r\n",
                     allow, req->srv->cors_any ? "" : "Vary: Origin\r\n", CORS_EXPOSE);
    return n > 0 && (size_t)n < size;
}

static int queue(http_request *req, unsigned status, struct MHD_Response *resp, size_t body_len);

static int reply_preflight(http_request *req) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    return resp ? queue(req, 204, resp, 0) : HTTP_FAIL;
}

static void cors_free(http_server *srv) {
    if (!srv->cors_origins)
        return;
    for (char **o = srv->cors_origins; *o; o++)
        free(*o);
    free(srv->cors_origins);
    srv->cors_origins = NULL;
}

/* "a, b" or "*" → the NULL-terminated list; "" leaves CORS off. */
static int cors_init(http_server *srv, const char *list) {
    if (!list || !*list)
        return 0;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (!(srv->cors_origins = calloc(n + 1, sizeof *srv->cors_origins)))
        return -1;
    size_t k = 0;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = p;
        while (*end && *end != ',' && *end != ' ')
            end++;
        if (end > p) {
            if (!(srv->cors_origins[k] = strndup(p, (size_t)(end - p))))
                return -1;
            srv->cors_any |= strcmp(srv->cors_origins[k], "*") == 0;
            k++;
        }
        p = end;
    }
    return 0;
}

/* Queues resp on the I/O thread, the only thread libmicrohttpd takes an
 * answer from while the connection runs. */
static int queue_now(http_request *req, unsigned status, struct MHD_Response *resp,
                     size_t body_len) {
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
    if (req->engine && req->precision) {
        MHD_add_response_header(resp, "x-engine", req->engine);
        MHD_add_response_header(resp, "x-precision", req->precision);
    }
    cors_headers(req, resp);
    /* While draining, keep-alive clients are told to go elsewhere. */
    if (atomic_load(&req->srv->closing) || req->framing_error)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    /* Everything handed to the kernel so far comes before this answer. */
    struct tcp_info ti;
    if (tcp_stats(req->conn, &ti))
        req->wire_end = ti.tcpi_bytes_sent - ti.tcpi_bytes_retrans + ti.tcpi_notsent_bytes +
                        wire_bytes(req, status, resp, body_len);
    enum MHD_Result r = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    if (r != MHD_YES)
        return HTTP_FAIL;
    req->status = status;
    return HTTP_DONE;
}

/* An answer made on a codec worker waits for the I/O thread (take_ready);
 * a second answer to one request fails, as a second MHD_queue_response
 * would. */
static int queue(http_request *req, unsigned status, struct MHD_Response *resp, size_t body_len) {
    if (!req->on_worker)
        return queue_now(req, status, resp, body_len);
    if (req->ready) {
        MHD_destroy_response(resp);
        return HTTP_FAIL;
    }
    req->ready = resp;
    req->ready_status = status;
    req->ready_len = body_len;
    return HTTP_DONE;
}

/* jansson's free, whatever it is: main points jansson at membudget_malloc. */
static void json_text_free(void *text) {
    json_malloc_t jmalloc;
    json_free_t jfree;
    json_get_alloc_funcs(&jmalloc, &jfree);
    jfree(text);
}

/* text is freed with free_fn once MHD has sent it: json_dumps' text and
 * membudget_malloc blocks stay charged to the request-memory budget
 * (membudget.h) until then. */
static struct MHD_Response *response_from(char *text, size_t len, const char *content_type,
                                          void (*free_fn)(void *)) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer_with_free_callback(len, text, free_fn);
    if (!resp) {
        free_fn(text);
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    return resp;
}

int http_reply_json(http_request *req, unsigned status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    /* A refusal anywhere in building the document (a json_pack `o*` or an
     * append whose result went unchecked, a fallback taken for a refused
     * string) may have left it incomplete: a success is never sent after
     * one. The budget's answer (503, or 413) goes instead. */
    if (text && status < 300 && membudget_refused()) {
        json_text_free(text);
        text = NULL;
    }
    if (!text && membudget_refused()) /* the budget is full: 503 (or 413), not 500 */
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!text)
        return status == 500 ? HTTP_FAIL : http_reply_error(req, SRV_EINTERNAL, "out of memory");
    size_t len = strlen(text);
    struct MHD_Response *resp = response_from(text, len, "application/json", json_text_free);
    return resp ? queue(req, status, resp, len) : HTTP_FAIL;
}

int http_reply_text(http_request *req, unsigned status, const char *content_type, const char *text,
                    size_t len) {
    char *copy = membudget_malloc(len ? len : 1);
    if (!copy && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!copy)
        return HTTP_FAIL;
    memcpy(copy, text, len);
    struct MHD_Response *resp = response_from(copy, len, content_type, membudget_free);
    return resp ? queue(req, status, resp, len) : HTTP_FAIL;
}

int http_reply_buffer(http_request *req, unsigned status, const char *content_type, char *buf,
                      size_t len) {
    if (buf && status < 300 && membudget_refused()) {
        membudget_free(buf);
        buf = NULL;
    }
    if (!buf && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!buf)
        return status == 500 ? HTTP_FAIL : http_reply_error(req, SRV_EINTERNAL, "out of memory");
    struct MHD_Response *resp = response_from(buf, len, content_type, membudget_free);
    return resp ? queue(req, status, resp, len) : HTTP_FAIL;
}

void http_set_error_shape(http_request *req, http_error_shape shape) {
    req->errors = shape;
}

int http_reply_static(http_request *req, unsigned status, const char *content_type,
                      const char *text, size_t len) {
    return http_reply_static_headers(req, status, content_type, text, len, NULL);
}

int http_reply_static_headers(http_request *req, unsigned status, const char *content_type,
                              const char *text, size_t len, const char *const *headers) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return HTTP_FAIL;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    for (const char *const *h = headers; h && h[0] && h[1]; h += 2)
        MHD_add_response_header(resp, h[0], h[1]);
    return queue(req, status, resp, len);
}

static int reply_error(http_request *req, int err, const char *param, const char *code,
                       const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

int http_reply_error(http_request *req, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = reply_error(req, err, NULL, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

int http_reply_error_at(http_request *req, int err, const char *param, const char *code,
                        const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = reply_error(req, err, param, code, fmt, ap);
    va_end(ap);
    return rc;
}

int http_reply_refusal(http_request *req, const struct srv_refusal *r) {
    if (membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    return http_reply_error_at(req, r->err ? r->err : SRV_EINTERNAL, r->param, r->code, "%s",
                               r->msg);
}

static int reply_error(http_request *req, int err, const char *param, const char *code,
                       const char *fmt, va_list ap) {
    char msg[512];
    const char *text = NULL;
    if (fmt) {
        vsnprintf(msg, sizeof msg, fmt, ap);
        /* Messages may quote client input (parser errors do): keep them
         * printable ASCII so they are valid JSON strings and safe to log. */
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                *p = '?';
        text = msg;
    }
    /* Error bodies are small and bounded (counted per connection): never
     * refused, so a request the budget refuses still gets its answer. */
    int scope = membudget_suspend();
    json_t *body = req->errors == HTTP_ERRORS_TEI ? srv_error_body_tei(err, text)
                                                  : srv_error_body_at(err, text, param, code);
    char *dumped = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    membudget_resume(scope);
    if (!dumped)
        return HTTP_FAIL;
    size_t len = strlen(dumped);
    struct MHD_Response *resp = response_from(dumped, len, "application/json", json_text_free);
    if (!resp)
        return HTTP_FAIL;
    unsigned status = srv_error_status(err);
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, req->allow);
    return queue(req, status, resp, len);
}

/* ---- the connection watch -------------------------------------------------------
 * libmicrohttpd closes a connection only after connection_timeout_s without
 * a byte, so a client sending its headers one byte a second would hold a
 * connection for ever; and it does not look at a suspended (parked)
 * connection at all, so a client that went away while its request was
 * queued would have it computed anyway. One thread of http.c's own watches
 * both. A request's headers must be in within connection_timeout_s of its
 * connection opening (or of the previous request on it completing), and the
 * whole request, headers and body, within connection_timeout_s of its
 * headers arriving; otherwise the watch shuts the socket down and MHD,
 * seeing it closed, frees the connection. The second clock starts at the
 * headers so that a keep-alive connection that idled most of the timeout
 * still gives its next request a whole timeout to upload its body.
 * And while a request is parked, its socket sits in an epoll set for
 * EPOLLRDHUP: the client's FIN or RST (never a pipelined request, which is
 * only data) marks the request gone and calls its owner's on_client_closed,
 * which cancels the queued work. A client
 * that only half-closes (shutdown(SHUT_WR)) after sending its request looks
 * the same on the wire and is taken as gone too, unanswered (MHD answers it
 * on routes that do not park): nothing short of writing to it tells the two
 * apart, and HTTP clients rarely half-close while waiting for an answer.
 *
 * Every slot is changed under conns_mu, and a parked request is only freed
 * after http_resume has taken it out of the watch under that lock, so the
 * watch never touches a freed request nor a descriptor MHD has closed. */

#define WATCH_STOP UINT64_MAX /* epoll data of the wake-up that stops the watch */

/* MHD's connection-start and connection-close notifications (I/O thread). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    http_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&srv->live_conns, 1);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        pthread_mutex_lock(&srv->conns_mu);
        /* A freed slot, else the first never used. */
        conn_slot *c = NULL;
        if (ci && srv->free_head >= 0) {
            c = &srv->conns[srv->free_head];
            srv->free_head = c->next_free;
        } else if (ci && srv->used_hwm < srv->nslots) {
            c = &srv->conns[srv->used_hwm++];
        }
        if (c) {
            c->fd = ci->connect_fd;
            c->gen++;
            c->idle_since = ticks_now_ns();
            c->deadline_ns = c->idle_since + srv->request_deadline_ns;
            c->parked = NULL;
            c->busy = false;
            c->evicting = false;
            *socket_context = c;
        }
        pthread_mutex_unlock(&srv->conns_mu);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_slot *c = *socket_context;
        *socket_context = NULL;
        if (c) {
            pthread_mutex_lock(&srv->conns_mu);
            if (c->parked)
                epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
            c->fd = -1;
            c->gen++;
            c->deadline_ns = 0;
            c->parked = NULL;
            c->busy = false;
            if (c->evicting)
                srv->evicting--;
            c->evicting = false;
            c->next_free = srv->free_head;
            srv->free_head = (int)(c - srv->conns);
            pthread_mutex_unlock(&srv->conns_mu);
        }
        atomic_fetch_sub(&srv->live_conns, 1);
    }
}

/* req's connection slot with conns_mu held, or NULL (nothing held) when
 * the connection is not watched. */
static conn_slot *lock_slot(http_request *req) {
    conn_slot *c = req->cslot;
    if (c)
        pthread_mutex_lock(&req->srv->conns_mu);
    return c;
}

/* Arms (the next request's headers, or this request whole, must be in by
 * now + connection_timeout_s) or disarms the deadline of req's connection. */
static void request_deadline(http_request *req, bool arm) {
    conn_slot *c = lock_slot(req);
    if (!c)
        return;
    c->deadline_ns = arm ? ticks_now_ns() + req->srv->request_deadline_ns : 0;
    pthread_mutex_unlock(&req->srv->conns_mu);
}

/* Marks req's connection as carrying a request (from its headers to its
 * completion), which makes it ineligible for eviction, or idle again. */
static void connection_busy(http_request *req, bool busy) {
    conn_slot *c = lock_slot(req);
    if (!c)
        return;
    c->busy = busy;
    if (!busy)
        c->idle_since = ticks_now_ns();
    pthread_mutex_unlock(&req->srv->conns_mu);
}

/* With the table full, shuts down the connection idle the longest with no
 * request under way (none whose headers are in), as nginx reuses its
 * keep-alive connections: an idle client only loses a connection it can
 * open again, while a new client would otherwise be refused. Returns
 * whether one was found (I/O thread). Closing is left to MHD, which sees the
 * shutdown; meanwhile the slot counts as evicting, so one idle connection
 * admits one new connection only. */
static bool evict_idle(http_server *srv) {
    pthread_mutex_lock(&srv->conns_mu);
    conn_slot *oldest = NULL;
    for (unsigned i = 0; i < srv->used_hwm; i++) {
        conn_slot *c = &srv->conns[i];
        if (c->fd < 0 || c->busy || c->evicting || c->parked)
            continue;
        /* Bytes waiting in the kernel are the next request on a keep-alive
         * connection, which MHD has not read yet: not idle. */
        int pending = 0;
        if (ioctl(c->fd, FIONREAD, &pending) == 0 && pending > 0)
            continue;
        if (!oldest || c->idle_since < oldest->idle_since)
            oldest = c;
    }
    if (oldest) {
        /* Counted before the shutdown, and not closed, as in close_late. */
        metrics_connection_closed(METRICS_CONN_EVICTED);
        shutdown(oldest->fd, SHUT_RDWR);
        oldest->evicting = true;
        oldest->deadline_ns = 0;
        srv->evicting++;
    }
    pthread_mutex_unlock(&srv->conns_mu);
    return oldest != NULL;
}

/* MHD's accept policy: at max_connections the longest-idle connection makes
 * room (evict_idle); when every one carries a request, the new connection
 * is closed at once. MHD's own limit would instead stop accepting, leaving
 * the extra clients waiting unanswered in the listen backlog. An evicted
 * connection is open until MHD sees it shut: the table has one slot more
 * than max_connections and MHD's own limit is that one more too, so the
 * new connection finds a slot, and MHD accepts nothing more until the
 * evicted one is closed. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t len) {
    (void)addr;
    (void)len;
    http_server *srv = cls;
    pthread_mutex_lock(&srv->conns_mu);
    unsigned evicting = srv->evicting;
    pthread_mutex_unlock(&srv->conns_mu);
    if (atomic_load(&srv->live_conns) - evicting < srv->nconns)
        return MHD_YES;
    if (evict_idle(srv))
        return MHD_YES;
    metrics_connection_closed(METRICS_CONN_LIMIT);
    log_debug("connection refused: max_connections reached",
              LOG_KV("max_connections", srv->nconns));
    return MHD_NO;
}

/* Shuts down the connections whose request is late (under conns_mu);
 * returns how many, and lowers *next to the earliest deadline left. */
static unsigned close_late(http_server *srv, uint64_t now, uint64_t *next) {
    unsigned closed = 0;
    for (unsigned i = 0; i < srv->used_hwm; i++) {
        conn_slot *c = &srv->conns[i];
        if (c->fd < 0 || !c->deadline_ns || c->evicting)
            continue;
        if (c->deadline_ns <= now) {
            /* Counted before the shutdown: a client that sees its
             * connection end and then scrapes /metrics finds it counted.
             * Not close: the descriptor stays MHD's, which sees the
             * connection end and frees it as any other. */
            metrics_connection_closed(METRICS_CONN_LATE);
            shutdown(c->fd, SHUT_RDWR);
            c->deadline_ns = 0;
            closed++;
        } else if (c->deadline_ns < *next) {
            *next = c->deadline_ns;
        }
    }
    return closed;
}

/* An epoll event on a parked connection: the client may have gone. */
static void parked_event(http_server *srv, uint64_t data) {
    unsigned i = (unsigned)(data & 0xffffffffu);
    uint32_t gen = (uint32_t)(data >> 32);
    char id[REQUEST_ID_MAX + 1] = "";
    pthread_mutex_lock(&srv->conns_mu);
    conn_slot *c = i < srv->used_hwm ? &srv->conns[i] : NULL;
    if (c && c->fd >= 0 && c->gen == gen && c->parked) {
        char byte;
        ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        bool gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        /* n > 0: the client half-closed after sending more requests; it may
         * still read, so this one is answered, and the watch ends lest the
         * level-triggered event repeat. */
        if (gone || n > 0) {
            http_request *req = c->parked;
            epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
            c->parked = NULL;
            if (gone) {
                atomic_store(&req->client_gone, true);
                if (req->on_client_closed)
                    req->on_client_closed(req->on_client_closed_arg);
                memcpy(id, req->id, sizeof id);
            }
        }
    }
    pthread_mutex_unlock(&srv->conns_mu);
    if (id[0])
        log_info("client closed while its request was parked", LOG_KV("request_id", id));
}

static void *watch_main(void *arg) {
    http_server *srv = arg;
    pthread_setname_np(pthread_self(), "http-watch");
    struct epoll_event ev[64];
    for (;;) {
        uint64_t now = ticks_now_ns();
        /* New deadlines are at least a second away (connection_timeout_s
         * >= 1), so waking at least once a second never misses one. */
        uint64_t next = now + 1000000000u;
        pthread_mutex_lock(&srv->conns_mu);
        unsigned late = close_late(srv, now, &next);
        pthread_mutex_unlock(&srv->conns_mu);
        if (late)
            log_info("connections closed: request not in within connection_timeout_s",
                     LOG_KV("connections", late),
                     LOG_KV("connection_timeout_s", srv->request_deadline_ns / 1000000000u));
        int wait_ms = (int)((next - now + 999999) / 1000000);
        int n = epoll_wait(srv->epfd, ev, (int)(sizeof ev / sizeof ev[0]), wait_ms);
        for (int k = 0; k < n; k++) {
            if (ev[k].data.u64 == WATCH_STOP)
                return NULL;
            parked_event(srv, ev[k].data.u64);
        }
    }
}

/* Puts req's connection in the watch for the client closing (I/O thread). */
static void watch_parked(http_request *req) {
    conn_slot *c = lock_slot(req);
    if (!c)
        return;
    http_server *srv = req->srv;
    c->gen++; /* events of an earlier watch of this connection are stale */
    struct epoll_event ev = {.events = EPOLLRDHUP,
                             .data.u64 = (uint64_t)(c - srv->conns) | (uint64_t)c->gen << 32};
    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, c->fd, &ev) == 0)
        c->parked = req;
    pthread_mutex_unlock(&srv->conns_mu);
}

/* Takes req's connection out of the watch (any thread, before resuming). */
static void unwatch_parked(http_request *req) {
    conn_slot *c = lock_slot(req);
    if (!c)
        return;
    http_server *srv = req->srv;
    if (c->parked == req) {
        epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->parked = NULL;
    }
    pthread_mutex_unlock(&srv->conns_mu);
}

static int watch_start(http_server *srv, unsigned max_connections, unsigned timeout_s) {
    srv->nconns = max_connections;
    srv->nslots = max_connections + 1;
    srv->request_deadline_ns = (uint64_t)timeout_s * 1000000000u;
    srv->free_head = -1;
    /* calloc, and slots taken in order: the pages of slots never used are
     * never touched, so a large max_connections costs address space, not
     * memory. */
    if (!(srv->conns = calloc(srv->nslots, sizeof *srv->conns)))
        return -1;
    srv->epfd = epoll_create1(EPOLL_CLOEXEC);
    srv->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (srv->epfd < 0 || srv->stopfd < 0)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WATCH_STOP};
    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->stopfd, &ev) != 0)
        return -1;
    if (pthread_create(&srv->watcher, NULL, watch_main, srv) != 0)
        return -1;
    srv->watcher_running = true;
    return 0;
}

static void watch_stop(http_server *srv) {
    if (srv->watcher_running) {
        /* An eventfd write fails only when its counter would overflow. */
        uint64_t one = 1;
        ssize_t w = write(srv->stopfd, &one, sizeof one);
        (void)w;
        pthread_join(srv->watcher, NULL);
        srv->watcher_running = false;
    }
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

/* Exact, or for a route ending in a slash and a star its prefix and one
 * non-empty segment after it (a resource id such as /v1/models/{id}). */
static bool path_matches(const char *route, const char *url) {
    const size_t n = strlen(route);
    if (n >= 2 && route[n - 1] == '*' && route[n - 2] == '/')
        return strncmp(route, url, n - 1) == 0 && url[n - 1] && !strchr(url + n - 1, '/');
    return strcmp(route, url) == 0;
}

/* Finds the route; on a path known under other methods, fills req->allow. */
static const http_route *find_route(http_request *req, const char *url, const char *method) {
    const http_server *srv = req->srv;
    req->allow[0] = '\0';
    for (size_t i = 0; i < srv->nroutes; i++) {
        const http_route *r = &srv->routes[i];
        if (!path_matches(r->path, url))
            continue;
        req->slot = srv->route_slot[i];
        req->errors = r->errors;
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
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    req->cslot = ci ? ci->socket_context : NULL;
    req->after_quiesce = atomic_load(&srv->quiesced);
    atomic_fetch_add(&srv->active, 1);
    metrics_http_in_flight(1);

    req->route = find_route(req, url, method);
    if (!req->route && req->allow[0] && strcmp(method, "OPTIONS") == 0 && srv->cors_origins) {
        req->preflight = true;
    } else if (!req->route) {
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

/* ---- message framing ------------------------------------------------------------
 * RFC 9112 section 6 as nginx applies it. A request whose length could be
 * read two ways (by this server and by a proxy in front of it) is a 400
 * with Connection: close, answered from its headers before a byte of its
 * body is read, so nothing after it on the connection is ever taken for a
 * request (no request smuggling). libmicrohttpd 0.9.75 refuses on its own
 * a Content-Length that is not one decimal number (a list, a sign, hex,
 * junk: 400), one that overflows (413), bad chunk sizes, a chunk longer
 * than its size and a header line without a colon; it accepts, and this
 * check refuses:
 *   - Transfer-Encoding with Content-Length (MHD would take the chunked
 *     body and ignore the length, a proxy might do the opposite);
 *   - more than one Content-Length line (MHD takes the first);
 *   - Transfer-Encoding other than one "chunked" (a list, chunked twice,
 *     another coding, chunked not last: MHD would read the body until the
 *     connection closes), and any Transfer-Encoding on HTTP/1.0;
 *   - no Host, or more than one, on HTTP/1.1;
 *   - whitespace before a header's colon, or any name that is not a token
 *     (MHD 0.9.75 keeps "Content-Length :" as a header named with the space,
 *     so it reads no length and takes the body for the next request);
 *   - NUL, CR or LF inside a header value (a bare CR a proxy may split on);
 *   - a body on GET or HEAD, which have no use for one here and whose
 *     bodies some proxies ignore while forwarding.
 * Folded header lines (obs-fold) are joined by MHD with spaces, as the RFC
 * allows; chunk extensions are ignored, as it requires. */

typedef struct framing_scan {
    unsigned content_length, transfer_encoding, host;
    const char *te;
    bool bad_name, bad_value;
} framing_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size) {
    (void)kind;
    framing_scan *f = cls;
    /* A field name is a token: MHD keeps "Content-Length " (a space before
     * the colon) as a header of that name, and would read no length. */
    static const char tchar[] = "!#$%&'*+-.^_`|~";
    if (key_size == 0)
        f->bad_name = true;
    for (size_t i = 0; i < key_size; i++)
        if (!isalnum((unsigned char)key[i]) && !strchr(tchar, key[i]))
            f->bad_name = true;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->content_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->transfer_encoding++;
        f->te = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        f->host++;
    if (value) {
        if (strlen(value) != value_size)
            f->bad_value = true;
        for (size_t i = 0; i < value_size; i++)
            if (value[i] == '\r' || value[i] == '\n')
                f->bad_value = true;
    }
    return MHD_YES;
}

/* The first call: refuses ambiguous framing (above). Returns what
 * http_reply_error returned when it answered, else HTTP_DONE. */
static int framing_check(http_request *req, const char *version) {
    framing_scan f = {0};
    MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, scan_header, &f);
    bool http10 = version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
    const char *why = NULL;
    if (f.transfer_encoding && f.content_length)
        why = "Transfer-Encoding and Content-Length together";
    else if (f.content_length > 1)
        why = "more than one Content-Length";
    else if (f.transfer_encoding > 1 || (f.te && strcasecmp(f.te, "chunked") != 0))
        why = "Transfer-Encoding other than one chunked coding";
    else if (f.transfer_encoding && http10)
        why = "Transfer-Encoding on HTTP/1.0";
    else if (!http10 && f.host != 1)
        why = f.host ? "more than one Host header" : "no Host header";
    else if (f.bad_name)
        why = "a header name that is not a token (whitespace before the colon?)";
    else if (f.bad_value)
        why = "NUL, CR or LF in a header value";
    else if ((strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0) &&
             (f.transfer_encoding ||
              (f.content_length &&
               strcmp(MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_CONTENT_LENGTH),
                      "0") != 0)))
        why = "a body on GET or HEAD";
    if (!why)
        return HTTP_DONE;
    req->framing_error = true;
    metrics_connection_closed(METRICS_CONN_FRAMING);
    set_pending(req, SRV_EBADREQUEST, "ambiguous message framing: %s", why);
    return http_reply_error(req, SRV_EBADREQUEST, "ambiguous message framing: %s", why);
}

/* A body without Content-Length (chunked) that passes max_body_bytes gets
 * its 413 at once, not after the client has sent it all (it may never end);
 * so does one whose Content-Length is over the limit (early_answer).
 * libmicrohttpd 0.9.75 queues no response while it reads a body, so the
 * answer is written straight to the socket (empty then: MHD writes nothing
 * while a request arrives), followed by a FIN. The connection is closed
 * once the body ends or read_on more bytes have been read and thrown away:
 * closing at once, with the client's bytes unread, would reset the
 * connection, and a reset can cost the client the answer it has not read
 * yet. The request's deadline stays armed meanwhile, so a client that
 * dribbles the rest of its body still loses the connection within
 * connection_timeout_s of its headers (MHD's idle timeout alone would let it
 * hold it for ever). Returns false, changing nothing, when nothing of the
 * answer could be written (MHD answers after the body, as for any pending
 * error); when only part of it went out, no second answer can follow on that
 * byte stream: the connection is shut down both ways for good, answer_cut
 * is set and take_body closes it. */
static bool answer_too_large_now(http_request *req) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    json_t *err = req->errors == HTTP_ERRORS_TEI
                      ? srv_error_body_tei(SRV_ETOOLARGE, req->pending_msg)
                      : srv_error_body(SRV_ETOOLARGE, req->pending_msg);
    char *body = err ? json_dumps(err, JSON_COMPACT) : NULL;
    json_decref(err);
    if (!ci || !body) {
        json_text_free(body); /* jansson allocated it */
        return false;
    }
    const char *backend =
        req->srv->backend_name ? req->srv->backend_name(req->srv->backend_ctx) : NULL;
    char cors[512], buf[2048];
    int n = cors_lines(req, cors, sizeof cors)
                ? snprintf(buf, sizeof buf,
                           "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n"
                           "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                           "x-request-id: %s\r\nx-queue-time-ms: 0.000\r\n"
                           "x-inference-time-ms: 0.000\r\nx-attention-backend: %s\r\n%s\r\n%s",
                           strlen(body), req->id, backend ? backend : "none", cors, body)
                : 0;
    json_text_free(body); /* jansson allocated it */
    if (n <= 0 || (size_t)n >= sizeof buf)
        return false;
    ssize_t sent = send(ci->connect_fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0 && sent < n) {
        metrics_connection_closed(METRICS_CONN_CUT); /* before the client can see it */
        shutdown(ci->connect_fd, SHUT_RDWR);
        req->answer_cut = true;
        log_info("connection closed: the early 413 could be written only in part",
                 LOG_KV("request_id", req->id), LOG_KV("sent", (long long)sent),
                 LOG_KV("bytes", n));
        return false;
    }
    if (sent != n)
        return false;
    shutdown(ci->connect_fd, SHUT_WR);
    req->answered_early = true;
    req->status = 413;
    return true;
}

/* Whether the client waits for 100 Continue before it sends its body. */
static bool expects_continue(const http_request *req) {
    const char *expect =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    return !req->http10 && expect && strcasecmp(expect, "100-continue") == 0;
}

/* The first call: an announced body over the limit is refused before a byte
 * of it is read. The 413 is written at once, then the body is read and
 * thrown away as after the early 413 of a chunked body (above), until it
 * ends or DISCARD_FACTOR times max_body_bytes have gone: its length is
 * known, so it is let end rather than cut after max_body_bytes. Queued to
 * libmicrohttpd instead, the answer would be followed by the connection's
 * close with the body unread, which resets the connection while the client
 * is still sending it: a client that then reports the reset never reads
 * its 413. A client that waits for 100 Continue has sent no body, and
 * MHD's own early answer and close suit it. */
static int early_answer(http_request *req) {
    const char *cl =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    size_t max = req->srv->max_body_bytes;
    if (!cl || strtoull(cl, NULL, 10) <= max)
        return HTTP_DONE;
    if (req->pending)
        return http_reply_error(req, req->pending, req->pending_msg[0] ? "%s" : NULL,
                                req->pending_msg);
    set_pending(req, SRV_ETOOLARGE, "request body of %s bytes exceeds the limit of %zu", cl, max);
    if (!expects_continue(req) && answer_too_large_now(req)) {
        req->read_on = DISCARD_FACTOR * max;
        return HTTP_DONE;
    }
    if (req->answer_cut)
        return HTTP_FAIL;
    return http_reply_error(req, SRV_ETOOLARGE, "%s", req->pending_msg);
}

/* The request-memory budget (membudget.h) is charged for the body's buffer
 * as it grows to cap bytes, and released in on_completed. */
static size_t body_cost(size_t cap) {
    return cap ? membudget_cost(cap + 1) : 0;
}

static bool charge_body(http_request *req, size_t cap) {
    membudget_enter(body_cost(req->cap));
    bool ok = membudget_charge(body_cost(cap) - body_cost(req->cap));
    if (!ok)
        set_pending(req, membudget_error(), "%s", membudget_message());
    membudget_leave();
    return ok;
}

/* Runs a route function with what it allocates charged to the budget.
 * /health and /ready are left out, so probes answer even when it is full;
 * so is /metrics (HTTP_AUTH_METRICS), which operators need most exactly when
 * the budget is full: its text is small and bounded by the fixed set of
 * series (routes, statuses, buckets, backends). Only HTTP_UNCHARGED_ANSWERS
 * /metrics answers at a time go uncharged (a scraper sends one at a time);
 * more at once are charged as any answer, so the worst case counts them
 * once for the server, not once per connection. */
static int run_charged(http_request *req, http_handler_fn fn) {
    http_server *srv = req->srv;
    void *ctx = req->ctx ? req->ctx : req->route->ctx;
    if (req->route->auth == HTTP_AUTH_OPEN)
        return fn(req, ctx);
    if (req->route->auth == HTTP_AUTH_METRICS && !req->uncharged) {
        unsigned n = atomic_load(&srv->uncharged_answers);
        while (n < HTTP_UNCHARGED_ANSWERS &&
               !atomic_compare_exchange_weak(&srv->uncharged_answers, &n, n + 1))
            ;
        req->uncharged = n < HTTP_UNCHARGED_ANSWERS;
    }
    if (req->uncharged)
        return fn(req, ctx);
    membudget_enter(body_cost(req->cap));
    int r = fn(req, ctx);
    membudget_leave();
    return r;
}

/* Keeps a piece of body, or throws it away once an answer is decided. */
static int take_body(http_request *req, const char *data, size_t n) {
    size_t max = req->srv->max_body_bytes;
    if (!req->pending && req->len + n > max) {
        set_pending(req, SRV_ETOOLARGE, "request body exceeds the limit of %zu bytes", max);
        if (answer_too_large_now(req))
            req->read_on = max; /* it may never end */
    }
    if (req->answer_cut)
        return HTTP_FAIL; /* part of an answer is out: never answer again */
    if (req->pending) {
        req->discarded += n;
        if (req->answered_early)
            return req->discarded > req->read_on ? HTTP_FAIL : HTTP_DONE;
        return req->discarded / DISCARD_FACTOR > max ? HTTP_FAIL : HTTP_DONE;
    }
    if (req->len + n > req->cap) {
        size_t cap = req->cap ? req->cap : 4096;
        while (cap < req->len + n)
            cap *= 2;
        if (cap > max)
            cap = max;
        if (!charge_body(req, cap)) {
            req->discarded += n;
            return HTTP_DONE;
        }
        char *grown = realloc(req->body, cap + 1);
        if (!grown) {
            /* on_completed gives back body_cost(req->cap) only: the growth
             * charged above goes back now, or it would leak from the budget. */
            membudget_uncharge(body_cost(cap) - body_cost(req->cap));
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

/* ---- the codec workers --------------------------------------------------------
 * A route with a JSON body runs on the codec workers: the I/O thread parks
 * the request once its body is in and posts it; the handler (parse, decode,
 * tokenize, submit) runs there, and so does the resumed function (encode)
 * once its work is done. Whatever a worker answers waits in req->ready, and
 * the worker resumes the connection for the I/O thread to queue it. The
 * connection is watched for the client closing throughout, so a request
 * whose client left is never decoded or encoded. */

/* Takes req's connection out of the watch and hands it back to the I/O
 * thread, which queues what was answered (take_ready). */
static void worker_done(http_request *req) {
    unwatch_parked(req);
    MHD_resume_connection(req->conn);
}

static void run_on_worker(workpool_task *t) {
    http_request *req = (http_request *)((char *)t - offsetof(http_request, task));
    if (req->task_resumed) {
        /* http_resume took the connection out of the watch already. */
        if (!atomic_load(&req->client_gone) && run_charged(req, req->route->resumed) == HTTP_PARKED)
            return;
        MHD_resume_connection(req->conn);
        return;
    }
    int r = HTTP_FAIL;
    if (!atomic_load(&req->client_gone))
        r = run_charged(req, req->route->handler);
    /* Parked: its work resumes it, perhaps already on another worker, and
     * req may be gone by now. */
    if (r != HTTP_PARKED)
        worker_done(req);
}

/* Posts req's task; when the workers have stopped taking tasks (the server
 * is being destroyed) it runs here instead, which is still correct, only
 * not off this thread. */
static void post_task(http_request *req, bool resumed) {
    req->task_resumed = resumed;
    req->task.run = run_on_worker;
    if (!workpool_post(req->srv->workers, &req->task))
        run_on_worker(&req->task);
}

/* I/O thread: the body is in; the handler runs on a worker. */
static int to_worker(http_request *req) {
    req->on_worker = true;
    req->parked = true;
    req->on_client_closed = NULL;
    MHD_suspend_connection(req->conn);
    watch_parked(req);
    post_task(req, false);
    return HTTP_PARKED;
}

/* I/O thread, once a worker resumed req: queues its answer, or closes the
 * connection when there is none or the client has gone. */
static int take_ready(http_request *req) {
    struct MHD_Response *resp = req->ready;
    req->ready = NULL;
    if (!resp || atomic_load(&req->client_gone)) {
        if (resp)
            MHD_destroy_response(resp);
        return HTTP_FAIL;
    }
    int r = queue_now(req, req->ready_status, resp, req->ready_len);
    if (req->stream)
        req->wire_end = 0; /* as http_stream_queue says */
    return r;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_size, void **con_cls) {
    http_server *srv = cls;
    http_request *req = *con_cls;
    int r;
    if (!req) {
        req = request_start(srv, conn, url, method);
        if (!req)
            return MHD_NO;
        *con_cls = req;
        connection_busy(req, true);
        /* The headers are in: the whole request has connection_timeout_s
         * from now. An early answer keeps it too, so that a client that
         * never stops sending cannot hold the connection past it. */
        request_deadline(req, true);
        req->http10 = version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
        req->headers_only = true;
        r = framing_check(req, version);
        if (r == HTTP_DONE && !req->framing_error)
            r = early_answer(req);
        req->headers_only = false;
    } else if (req->framing_error) {
        /* Answered from its headers; nothing of what follows is read as a
         * request: the connection closes once the 400 is out. */
        *upload_size = 0;
        r = HTTP_DONE;
    } else if (*upload_size) {
        r = take_body(req, upload_data, *upload_size);
        *upload_size = 0;
    } else if (req->answered_early || req->answer_cut) {
        r = HTTP_FAIL; /* the body is over: close, as the answer said */
    } else if (req->parked) {
        req->parked = false;
        r = take_ready(req); /* a worker answered, or the client is gone */
    } else {
        request_deadline(req, false); /* the request is in */
        if (req->pending)
            r = http_reply_error(req, req->pending, req->pending_msg[0] ? "%s" : NULL,
                                 req->pending_msg);
        else if (req->preflight)
            r = reply_preflight(req);
        else if (req->route->json_body)
            r = to_worker(req);
        else
            r = run_charged(req, req->route->handler);
    }
    return r == HTTP_FAIL ? MHD_NO : MHD_YES;
}

/* How MHD says a request ended, for the log line. */
static const char *termination_name(enum MHD_RequestTerminationCode toe) {
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return "completed";
    case MHD_REQUEST_TERMINATED_WITH_ERROR:
        return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR:
        return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        return "client_abort";
    }
    return "unknown";
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    http_request *req = *con_cls;
    if (!req)
        return;
    *con_cls = NULL;
    double total_ms = ms_since(&req->t0);
    bool delivered = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK || req->answered_early;
    struct tcp_info ti;
    if (!delivered && req->status && req->wire_end && tcp_stats(conn, &ti))
        delivered = ti.tcpi_bytes_acked >= req->wire_end;
    unsigned status = delivered ? req->status : 0;
    const char *backend = req->backend ? req->backend : "";
    /* A request libmicrohttpd did not see through to the end says how it
     * ended (closed=) and what it had answered, whether or not that answer
     * counted as delivered. */
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
                 LOG_KV("closed", termination_name(toe)), LOG_KV("answered", req->status));
    metrics_request(req->slot, status, req->queue_ms * 1e-3, req->inference_ms * 1e-3,
                    total_ms * 1e-3);
    /* A keep-alive connection's next request has connection_timeout_s for
     * its headers to arrive, as the first one had. */
    request_deadline(req, true);
    connection_busy(req, false);
    if (req->stream)
        stream_detach(req->stream);
    if (req->ready) /* made by a worker, never queued: the connection closed first */
        MHD_destroy_response(req->ready);
    if (req->user_free)
        req->user_free(req->user);
    free(req->body);
    membudget_uncharge(body_cost(req->cap) + req->json_charge);
    http_server *srv = req->srv;
    if (req->uncharged)
        atomic_fetch_sub(&srv->uncharged_answers, 1);
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

const char *http_path(const http_request *req) {
    return req->path;
}

void http_set_user(http_request *req, void *user, void (*free_fn)(void *)) {
    req->user = user;
    req->user_free = free_fn;
}

void *http_user(const http_request *req) {
    return req->user;
}

void http_set_ctx(http_request *req, void *ctx) {
    req->ctx = ctx;
}

void http_set_timing(http_request *req, double queue_ms, double inference_ms, const char *backend) {
    req->queue_ms = queue_ms;
    req->inference_ms = inference_ms;
    req->backend = backend;
}

void http_set_engine(http_request *req, const char *engine, const char *precision) {
    req->engine = engine;
    req->precision = precision;
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
    /* The tree is charged whole before parsing, from a bound of the text,
     * and the parse runs with charging suspended: jansson must never see a
     * refused allocation while it lexes (membudget.h). */
    size_t bound = membudget_json_bound(body, n);
    if (!membudget_charge(bound)) {
        *answered = http_reply_error(req, membudget_error(), "%s", membudget_message());
        return NULL;
    }
    req->json_charge = membudget_charging() ? bound : 0;
    char why[256];
    int scope = membudget_suspend();
    json_t *root = http_json_parse(body, n, why, sizeof why);
    membudget_resume(scope);
    if (!root) {
        http_body_json_free(req, NULL);
        *answered = http_reply_error(req, SRV_EBADREQUEST, "%s", why);
    }
    return root;
}

json_t *http_work_body(http_request *req, int *answered) {
    if (http_draining(req)) {
        *answered = http_reply_error(req, SRV_EUNAVAILABLE, "server is draining");
        return NULL;
    }
    *answered = HTTP_FAIL;
    return http_body_json(req, answered);
}

size_t http_body_held(const http_request *req) {
    return body_cost(req->cap) + req->json_charge;
}

void http_body_json_free(http_request *req, json_t *root) {
    json_decref(root);
    membudget_uncharge(req->json_charge);
    req->json_charge = 0;
}

/* Sets the callback for the client closing while req is watched: under
 * conns_mu, as the watch reads it, and run here when the watch has already
 * seen the close (a request on a worker is watched from the start). */
static void set_closed_callback(http_request *req, void (*fn)(void *arg), void *arg) {
    http_server *srv = req->srv;
    pthread_mutex_lock(&srv->conns_mu);
    req->on_client_closed = fn;
    req->on_client_closed_arg = arg;
    const bool gone = atomic_load(&req->client_gone);
    pthread_mutex_unlock(&srv->conns_mu);
    if (gone && fn)
        fn(arg);
}

void http_park(http_request *req, void (*on_client_closed)(void *arg), void *arg) {
    if (!req->on_worker) {
        /* Only a JSON route's handler, on a worker, has a connection to
         * park; a route on the I/O thread answers at once. */
        log_error("http_park outside a codec worker", LOG_KV("route", req->path));
        abort();
    }
    /* Suspended and watched since its body came in. */
    set_closed_callback(req, on_client_closed, arg);
}

void http_resume(http_request *req) {
    /* Out of the watch first: the client-closed callback never runs once
     * this returns. */
    unwatch_parked(req);
    post_task(req, true); /* the answer is written on a worker */
}

/* ---- streamed answers ---------------------------------------------------------
 * Three parties hold a queued stream: the response (MHD frees it with the
 * connection's request, stream_free_cb), the request (until on_completed's
 * stream_detach) and the producer (until http_stream_end); the last one
 * frees it. mu guards the buffer, the flags and req (NULL once the
 * request completed); the content reader suspends the connection under mu
 * and a write resumes it under mu, so a resume always follows its suspend.
 * cb_mu guards the client-closed callback alone: the watch calls it under
 * conns_mu, which the reader takes under mu, so it cannot take mu. */
struct http_stream {
    pthread_mutex_t mu, cb_mu;
    http_request *req;
    struct MHD_Connection *conn;
    char *buf;
    size_t off, len, cap; /* bytes [off, len) of buf are still to send */
    size_t charged;       /* of the request-memory budget, for buf */
    bool suspended, ended, failed, gone;
    int refs;
    void (*closed_fn)(void *);
    void *closed_arg;
};

static void stream_unref(http_stream *s) {
    pthread_mutex_lock(&s->mu);
    const bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last)
        return;
    membudget *b = membudget_installed();
    if (b && s->charged)
        membudget_release(b, s->charged);
    free(s->buf);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->cb_mu);
    free(s);
}

/* The client went away: tells the producer, once, unless it has ended. */
static void stream_client_closed(void *arg) {
    http_stream *s = arg;
    pthread_mutex_lock(&s->cb_mu);
    void (*fn)(void *) = s->closed_fn;
    s->closed_fn = NULL;
    if (fn)
        fn(s->closed_arg);
    pthread_mutex_unlock(&s->cb_mu);
}

/* on_completed: the request is gone (its reference with it); the producer
 * may still write. */
static void stream_detach(http_stream *s) {
    /* The producer hears of the close before its writes start failing. */
    stream_client_closed(s);
    pthread_mutex_lock(&s->mu);
    s->req = NULL;
    s->gone = true;
    pthread_mutex_unlock(&s->mu);
    stream_unref(s);
}

/* Resumes the suspended connection (under s->mu). */
static void stream_wake(http_stream *s) {
    if (!s->suspended || !s->req)
        return;
    s->suspended = false;
    unwatch_parked(s->req);
    MHD_resume_connection(s->conn);
}

/* MHD's content reader (I/O thread). */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    http_stream *s = cls;
    ssize_t n;
    pthread_mutex_lock(&s->mu);
    if (s->len > s->off) {
        size_t k = s->len - s->off < max ? s->len - s->off : max;
        memcpy(out, s->buf + s->off, k);
        s->off += k;
        if (s->off == s->len)
            s->off = s->len = 0;
        n = (ssize_t)k;
    } else if (s->ended || !s->req || atomic_load(&s->req->client_gone)) {
        n = s->ended && !s->failed ? MHD_CONTENT_READER_END_OF_STREAM
                                   : MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        /* Nothing to send yet: wait, watched for the client closing. */
        s->suspended = true;
        MHD_suspend_connection(s->conn);
        watch_parked(s->req);
        n = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void stream_free_cb(void *cls) {
    stream_unref(cls);
}

http_stream *http_stream_open(http_request *req, void (*on_client_closed)(void *arg), void *arg) {
    http_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->cb_mu, NULL);
    s->req = req;
    s->conn = req->conn;
    s->refs = 2; /* the producer's, and the handler's until the response takes it */
    s->closed_fn = on_client_closed;
    s->closed_arg = arg;
    return s;
}

void http_stream_discard(http_stream *s) {
    stream_unref(s);
    stream_unref(s);
}

int http_stream_queue(http_stream *s, const char *content_type) {
    http_request *req = s->req;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                  stream_read, s, stream_free_cb);
    if (!resp) {
        pthread_mutex_lock(&s->mu);
        s->gone = true;
        pthread_mutex_unlock(&s->mu);
        stream_client_closed(s); /* the work stops */
        stream_unref(s);
        return http_reply_error(req, SRV_EINTERNAL, "out of memory");
    }
    /* The handler's reference is the response's from here on, and the
     * request takes one of its own, dropped in stream_detach: libmicrohttpd
     * may destroy the response (a failed queue, a closed connection) before
     * the request completes, and the producer may have ended by then. */
    pthread_mutex_lock(&s->mu);
    s->refs++;
    pthread_mutex_unlock(&s->mu);
    req->stream = s;
    set_closed_callback(req, stream_client_closed, s);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    /* The answer's length is unknown: its end is not where the connection's
     * bytes say (wire_end stays 0 and a cut is counted as dropped). */
    const int r = queue(req, 200, resp, 0);
    req->wire_end = 0;
    return r;
}

bool http_stream_write(http_stream *s, const char *data, size_t n) {
    pthread_mutex_lock(&s->mu);
    bool ok = !s->gone && !s->ended;
    if (ok && s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n)
            cap *= 2;
        membudget *b = membudget_installed();
        const size_t more = membudget_cost(cap) - (s->charged ? membudget_cost(s->cap) : 0);
        char *buf = NULL;
        if (!b || membudget_reserve(b, more)) {
            buf = realloc(s->buf, cap);
            if (!buf && b)
                membudget_release(b, more);
        }
        if (buf) {
            s->buf = buf;
            s->cap = cap;
            s->charged += b ? more : 0;
        } else {
            ok = false;
            s->failed = true;
        }
    }
    if (ok) {
        memcpy(s->buf + s->len, data, n);
        s->len += n;
        stream_wake(s);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void http_stream_end(http_stream *s, bool failed) {
    /* From here on the producer's callback is never called. */
    pthread_mutex_lock(&s->cb_mu);
    s->closed_fn = NULL;
    pthread_mutex_unlock(&s->cb_mu);
    pthread_mutex_lock(&s->mu);
    s->ended = true;
    s->failed |= failed;
    stream_wake(s);
    pthread_mutex_unlock(&s->mu);
    stream_unref(s);
}

/* ---- the server --------------------------------------------------------------- */

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    http_server *srv = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    /* libmicrohttpd answers some requests itself, before on_access: a
     * Content-Length that is not a number (400) or overflows (413), a bad
     * chunk size (400, 413), headers past its pool (431). Its only trace is
     * this message (0.9.75's wording); each is counted as a request of the
     * route "unparsed", so that every 413 and 400 shows in the metrics. */
    static const char answered[] = "Error processing request (HTTP response code is ";
    const char *code = strstr(msg, answered);
    if (code) {
        unsigned status = (unsigned)strtoul(code + sizeof answered - 1, NULL, 10);
        if (status >= 400 && status < 600)
            metrics_request(srv->unparsed_slot, status, 0, 0, 0);
    }
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

/* Each connection is a descriptor: the soft limit (often 1024) is raised
 * to the hard one, as nginx's worker_rlimit_nofile does, so the default
 * max_connections is not cut short by accept failing with EMFILE. */
static void raise_fd_limit(unsigned max_connections) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)max_connections + 128; /* the model, logs, epoll, eventfds */
    if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < want)
        log_warn("open-file limit below max_connections: connections past it fail to open",
                 LOG_KV("limit", (long long)rl.rlim_cur),
                 LOG_KV("max_connections", max_connections));
}

http_server *http_create(const http_options *opt, const http_route *routes, size_t n) {
    if (n == 0 || n >= METRICS_MAX_ROUTES) {
        log_error("too many routes for the metrics table", LOG_KV("routes", (uint64_t)n),
                  LOG_KV("max", METRICS_MAX_ROUTES - 1));
        return NULL;
    }
    raise_fd_limit(opt->max_connections);
    http_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return NULL;
    pthread_mutex_init(&srv->keys_mu, NULL);
    pthread_mutex_init(&srv->conns_mu, NULL);
    srv->epfd = srv->stopfd = -1;
    srv->routes = routes;
    srv->nroutes = n;
    for (size_t i = 0; i < n; i++)
        srv->route_slot[i] = metrics_route(routes[i].path);
    srv->unmatched_slot = metrics_route("unmatched");
    srv->unparsed_slot = metrics_route("unparsed");
    srv->backend_name = opt->backend_name;
    srv->backend_ctx = opt->backend_ctx;
    srv->max_body_bytes = opt->max_body_bytes;
    make_id_prefix(srv);
    if (!(srv->workers = workpool_create(opt->codec_workers ? opt->codec_workers : 1, "codec"))) {
        log_error("cannot start the codec workers", LOG_KV("codec_workers", opt->codec_workers));
        http_destroy(srv);
        return NULL;
    }
    if (cors_init(srv, opt->cors_allow_origins) != 0) {
        log_error("out of memory copying cors_allow_origins");
        http_destroy(srv);
        return NULL;
    }
    /* The route table, for tools that compare it with the API's documents
     * (tests/e2e/test_openapi.py). */
    for (size_t i = 0; i < n; i++)
        log_debug("route", LOG_KV("method", routes[i].method), LOG_KV("path", routes[i].path));

    if (watch_start(srv, opt->max_connections, opt->connection_timeout_s) != 0) {
        log_error("cannot start the connection watch", LOG_KV("error", strerror(errno)));
        http_destroy(srv);
        return NULL;
    }

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
    /* MHD's limit is one above ours so that it keeps accepting at the
     * limit, and on_accept refuses the extra connection. */
    srv->daemon = MHD_start_daemon(
        flags, 0, on_accept, srv, on_access, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
        opt->max_connections + 1, MHD_OPTION_CONNECTION_TIMEOUT, opt->connection_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_POOL_BYTES, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
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

workpool *http_codec_pool(http_server *srv) {
    return srv->workers;
}

int http_port(const http_server *srv) {
    return srv->port;
}

void http_linger(http_server *srv) {
    atomic_store(&srv->closing, true);
}

void http_quiesce(http_server *srv) {
    atomic_store(&srv->closing, true);
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
    watch_stop(srv);
    /* What the workers hold resumes its connection before the daemon stops
     * (libmicrohttpd must not stop with a connection suspended); a request
     * arriving meanwhile runs its handler on the I/O thread. */
    if (srv->workers)
        workpool_stop(srv->workers); /* NULL: the start failed before it */
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon); /* its close notifications still use the table */
    workpool_destroy(srv->workers);
    if (srv->epfd >= 0)
        close(srv->epfd);
    if (srv->stopfd >= 0)
        close(srv->stopfd);
    free(srv->conns);
    pthread_mutex_destroy(&srv->conns_mu);
    free_keys(srv->keys, srv->nkeys);
    pthread_mutex_destroy(&srv->keys_mu);
    cors_free(srv);
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

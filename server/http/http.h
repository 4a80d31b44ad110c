/* http.h — the HTTP front end: libmicrohttpd, a routes table, bodies, auth.
 *
 * libmicrohttpd runs its own I/O thread (poll). For every request http.c
 * allocates its state on the first callback, collects the body up to
 * max_body_bytes, checks the route, the method, the API key and the
 * Content-Type, and only then calls the route's handler with the whole body:
 * a route with a JSON body on one of the codec workers (codec_workers, its
 * connection parked meanwhile), any other on the I/O thread. A handler
 * answers at once (http_reply_*), or parks the request while its work is
 * queued elsewhere and calls http_resume from any thread when the result is
 * ready; the route's `resumed` function then writes the answer, on a codec
 * worker for a JSON route. The I/O thread sends every answer. The state is
 * freed in MHD's completion callback however the request ended, after the
 * request's log line and metrics are written.
 *
 * One more thread, the connection watch, closes connections whose request's
 * headers do not arrive within connection_timeout_s of the connection opening
 * (or of the previous request ending), or whose request is not in whole
 * within connection_timeout_s of its headers (MHD's idle timeout
 * never fires on a client that sends a byte a second) and notices a client
 * closing while its request is parked (MHD does not watch suspended
 * connections).
 *
 * Every response carries x-request-id (the client's when it sent a usable
 * one), x-queue-time-ms, x-inference-time-ms and x-attention-backend. Every
 * error is written by http_reply_error, in the one shape of errors.h. */
#ifndef ATTN_HTTP_H
#define ATTN_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct http_server http_server;
typedef struct http_request http_request;

/* The shape errors are answered in: the API the route imitates (errors.h). */
typedef enum http_error_shape {
    HTTP_ERRORS_OPENAI, /* {"error": {"message", "type", "code"}}, the default */
    HTTP_ERRORS_TEI,    /* {"error", "error_type"}, Text Embeddings Inference */
} http_error_shape;

/* Who may call a route. */
typedef enum http_auth {
    HTTP_AUTH_OPEN,    /* always open (/health, /ready) */
    HTTP_AUTH_KEY,     /* needs a key whenever keys are configured */
    HTTP_AUTH_METRICS, /* needs a key when keys exist and metrics_require_key */
} http_auth;

/* A handler returns what http_reply_* returned, or HTTP_PARKED after
 * http_park. Returning anything else closes the connection unanswered. */
enum { HTTP_FAIL = 0, HTTP_DONE = 1, HTTP_PARKED = 2 };
typedef int (*http_handler_fn)(http_request *req, void *ctx);

typedef struct http_route {
    const char *method; /* "GET" (also answers HEAD) or "POST" */
    /* Exact match, or a path ending in a slash and a star: that prefix and
     * one further non-empty segment (a resource id). */
    const char *path;
    bool json_body; /* the body must be application/json */
    http_auth auth;
    http_handler_fn handler; /* the body is complete when it runs */
    http_handler_fn resumed; /* after http_resume; NULL for routes that never park */
    void *ctx;
    http_error_shape errors; /* also for a method the path does not take */
} http_route;

typedef struct http_options {
    const char *host; /* numeric address or name to bind */
    int port;
    /* At the limit the longest-idle connection without a request under way
     * is closed to admit a new one; when none is idle, the new one is closed
     * as soon as accepted. */
    unsigned max_connections;
    /* A connection idle this long is closed, and so is one whose request
     * has not arrived in full this long after the connection opened (or
     * its previous request completed): a slow sender cannot hold it. */
    unsigned connection_timeout_s;
    size_t max_body_bytes;
    /* The backend named in x-attention-backend when a request ran none
     * (e.g. /health); called from the I/O thread. */
    const char *(*backend_name)(void *ctx);
    void *backend_ctx;
    /* Origins whose browser pages may call the service ("a, b", or "*" for
     * any); "" or NULL: no CORS header is ever sent and OPTIONS is 405. */
    const char *cors_allow_origins;
    /* Threads that run the handlers and resumed functions of the routes
     * with a JSON body (workpool.h); at least one (0 is taken as 1). */
    unsigned codec_workers;
} http_options;

/* ---- what a connection costs, for the worst-case memory ----
 * libmicrohttpd's memory pool per connection: the request line and headers,
 * its read buffer (body pieces pass through it) and the answer's headers.
 * 16 KiB takes headers up to about 12 KiB (nginx's default line limit is
 * 8 KiB); larger ones get MHD's 431. Its default, 32 KiB, kept the default
 * max_connections in the hundreds. */
#define HTTP_POOL_BYTES (16 * 1024)
/* MHD's connection struct (~1 KiB in 0.9.75; 4 KiB allowed). */
#define HTTP_MHD_CONNECTION_BYTES (4 * 1024)
/* Our request state (checked in http.c) and the watch's slot. */
#define HTTP_REQUEST_STATE_BYTES 1024
#define HTTP_SLOT_BYTES          64
/* One error answer, never charged to the budget while it is sent (body
 * under 1 KiB, under 2 KiB with headers and MHD's response struct). */
#define HTTP_ERROR_ANSWER_BYTES (2 * 1024)
#define HTTP_CONNECTION_BYTES                                                                      \
    (HTTP_POOL_BYTES + HTTP_MHD_CONNECTION_BYTES + HTTP_REQUEST_STATE_BYTES + HTTP_SLOT_BYTES +    \
     HTTP_ERROR_ANSWER_BYTES)
/* /metrics answers sent at once without charge to the request-memory
 * budget (so that it answers when the budget is full), each at most
 * HTTP_UNCHARGED_ANSWER_BYTES (its text is about 24 KiB with the built-in
 * backends); more at once are charged. Counted once per server, plus the
 * one the I/O thread may still be freeing as the next is made. */
#define HTTP_UNCHARGED_ANSWERS      2
#define HTTP_UNCHARGED_ANSWER_BYTES (64 * 1024)
#define HTTP_UNCHARGED_BYTES        ((HTTP_UNCHARGED_ANSWERS + 1) * HTTP_UNCHARGED_ANSWER_BYTES)

/* The codec workers, for /metrics. */
struct workpool;
struct workpool *http_codec_pool(http_server *srv);

/* Starts the daemon on its own thread with routes (n of them, kept by
 * pointer until http_destroy). Returns NULL, with a log line naming why,
 * when it cannot listen. */
http_server *http_create(const http_options *opt, const http_route *routes, size_t n);

/* The port actually bound (differs from opt->port when that was 0). */
int http_port(const http_server *srv);

/* The first step of a drain: every answer from now on carries
 * "Connection: close", while connections are still accepted and requests
 * served as before, so that neither a keep-alive request already on its way
 * nor a connection in the listen backlog is cut. */
void http_linger(http_server *srv);

/* The second: stops accepting connections (the listening socket is closed,
 * so new clients are refused at once) and marks every later response
 * "Connection: close"; requests that start from now on are draining
 * (http_draining), requests already started are still served. */
void http_quiesce(http_server *srv);

/* Requests started and not yet completed (parked ones included). */
uint64_t http_active(const http_server *srv);

/* Stops the daemon and frees everything. No request may be parked: drain
 * first. NULL is a no-op. */
void http_destroy(http_server *srv);

/* Settings that a reload may change; safe from any thread. keys are copied;
 * n == 0 turns authentication off. Returns 0, or -1 when out of memory (the
 * old keys stay). */
int http_set_api_keys(http_server *srv, char *const *keys, size_t n);
void http_set_metrics_require_key(http_server *srv, bool require);

/* ---- inside a handler (I/O thread) ---- */

/* Whether the request started after http_quiesce: work it asks for should be
 * refused (503), while requests that started before are still served. */
bool http_draining(const http_request *req);

/* Milliseconds since the request's headers arrived (deadlines count from
 * there, so a slow upload uses up its own time). */
double http_age_ms(const http_request *req);
const char *http_body(const http_request *req, size_t *len);

/* The request's path (without the query): how a route whose path ends in a
 * slash and a star tells which resource was asked for. */
const char *http_path(const http_request *req);

/* Parses the body as one JSON object, with nesting limited to
 * HTTP_JSON_MAX_DEPTH and duplicate keys refused. String values may hold
 * U+0000 (json_string_length, not strlen, gives their length). NULL, with the 400
 * already answered, when it is not; *answered tells which happened so the
 * handler can return HTTP_DONE or HTTP_FAIL. */
#define HTTP_JSON_MAX_DEPTH 64
json_t *http_body_json(http_request *req, int *answered);
/* http_body_json for a route that queues work: while the server drains,
 * the 503 ("server is draining") instead, so that no new work starts. */
json_t *http_work_body(http_request *req, int *answered);
/* Frees the tree http_body_json gave (NULL: none) and gives back its charge
 * to the request-memory budget; nothing taken from the tree may be kept. */
void http_body_json_free(http_request *req, json_t *root);
/* What the request holds of the request-memory budget for its body and its
 * parse tree: the `held` of a budget scope opened for it on another thread
 * (membudget_enter), so a refusal there is told apart as it is here. */
size_t http_body_held(const http_request *req);

/* http_body_json's parsing on its own, with no request (tests/fuzz drives
 * it with arbitrary bytes): the object, or NULL with the 400's message in
 * why. */
json_t *http_json_parse(const char *body, size_t n, char *why, size_t why_len);

/* Errors of this request from now on in this shape (a route that serves two
 * APIs decides from the body). */
void http_set_error_shape(http_request *req, http_error_shape shape);

/* Handler state that lives as long as the request: free_fn(user) runs in the
 * completion callback, whatever happened. */
void http_set_user(http_request *req, void *user, void (*free_fn)(void *));
void *http_user(const http_request *req);
/* Hands the request to another context: the route's resumed function gets
 * ctx instead of the route's (a route registered once for several served
 * models picks the model from the body, and its answer is that model's). */
void http_set_ctx(http_request *req, void *ctx);

/* Times and backend reported in the response headers and the log line. */
void http_set_timing(http_request *req, double queue_ms, double inference_ms, const char *backend);

/* The engine and precision that computed the answer, sent as x-engine and
 * x-precision (only by requests that ran an encoder forward); both must
 * outlive the request. */
void http_set_engine(http_request *req, const char *engine, const char *precision);

/* Answers. body is stolen (json_decref'd) whatever happens. */
int http_reply_json(http_request *req, unsigned status, json_t *body);
int http_reply_text(http_request *req, unsigned status, const char *content_type, const char *text,
                    size_t len);
/* buf (len bytes from membudget_malloc) is sent as is and freed once MHD
 * has sent it, so it stays charged to the request-memory budget until then;
 * the call takes it whatever happens. NULL says building the answer failed:
 * the budget's 503 (or 413) goes when it refused anything in this scope,
 * else a 500. Likewise a success is never sent after a refusal in this
 * scope, since the text may be incomplete. */
int http_reply_buffer(http_request *req, unsigned status, const char *content_type, char *buf,
                      size_t len);
/* text lives as long as the server (a document built at start): sent as is,
 * never copied, so it costs the request nothing. */
int http_reply_static(http_request *req, unsigned status, const char *content_type,
                      const char *text, size_t len);
/* The same with more headers: headers is a NULL-terminated list of name,
 * value pairs (copied before the call returns); NULL adds none. */
int http_reply_static_headers(http_request *req, unsigned status, const char *content_type,
                              const char *text, size_t len, const char *const *headers);
/* err is an SRV_E* code; fmt NULL means the default message. */
int http_reply_error(http_request *req, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with the body's "param" (the request field at fault) and "code"
 * (a string code such as "model_not_found"); either may be NULL. */
int http_reply_error_at(http_request *req, int err, const char *param, const char *code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A decoder's refusal (errors.h) answered: the request-memory budget's own
 * error when the budget refused an allocation on the way (what the decoder
 * saw was its symptom), else r's code, param, code string and message (a
 * refusal without a code is a 500). */
struct srv_refusal;
int http_reply_refusal(http_request *req, const struct srv_refusal *r);

/* Parks the request (only a JSON route's handler, which runs on a codec
 * worker with its connection already suspended): its answer waits until
 * http_resume. Call before handing the request to another thread, then
 * return HTTP_PARKED. If the client closes the connection while the request is
 * parked, on_client_closed(arg) (may be NULL) runs once, on http.c's watch
 * thread and before http_resume returns on any thread: it must be quick and
 * call no http_* function (e.g. cancel the queued work). http_resume is
 * still due, and the route's `resumed` is then skipped: the connection is
 * closed unanswered and the request counted as dropped (status 0). */
void http_park(http_request *req, void (*on_client_closed)(void *arg), void *arg);

/* From any thread, once per park: the route's `resumed` runs next on a
 * codec worker and must answer. */
void http_resume(http_request *req);

/* ---- streamed answers ----
 * A 200 whose body is written as it is produced (NDJSON lines, say), from any
 * thread. http_stream_open (in a handler, before the work is handed on)
 * makes the stream; http_stream_queue sends the headers, and the
 * handler returns what it returned. The producer calls http_stream_write any
 * number of times and http_stream_end once, its last use of the stream.
 * Whenever everything written is sent and the stream has not ended, the
 * connection is suspended (from libmicrohttpd's content reader) and watched
 * for the client closing, as a parked request is; a write or the end resumes
 * it. If the client goes away before the end (seen by the watch, or by a
 * failed send), on_client_closed(arg) runs once, on some thread other than
 * the producer's and never after http_stream_end has returned: it must be
 * quick and call no http_* function (e.g. cancel the queued work). The
 * bytes waiting to be sent are charged to the request-memory budget. */
typedef struct http_stream http_stream;
/* NULL when out of memory. */
http_stream *http_stream_open(http_request *req, void (*on_client_closed)(void *arg), void *arg);
/* Queues the 200 with content_type; returns what a handler returns. On
 * failure the stream lives on for its producer, whose writes then go
 * nowhere. */
int http_stream_queue(http_stream *s, const char *content_type);
/* Drops a stream never queued whose producer never started (a refusal
 * between open and queue). */
void http_stream_discard(http_stream *s);
/* Appends n bytes; false when they will never be sent (the client is gone,
 * or the budget refused them): the producer may stop early. */
bool http_stream_write(http_stream *s, const char *data, size_t n);
/* The producer's last call. failed: the answer is cut short (the connection
 * closes once what was written is sent, so the client sees no clean end). */
void http_stream_end(http_stream *s, bool failed);

#endif

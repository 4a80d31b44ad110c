/* errors.h — every error the service answers with, in one list.
 *
 * Each entry gives a negative code, the HTTP status it maps to, the error
 * "type" clients can branch on, the error_type Text Embeddings Inference
 * gives the same error on the routes that imitate it, and a default message.
 * One function, srv_error_body(), builds every error body in OpenAI's shape
 *   {"error": {"message": "...", "type": "...", "param": null, "code": 422}}
 * where "param" names the request field at fault (null when none is) and
 * "code" repeats the HTTP status (clients that only see the body still know
 * what happened), or is OpenAI's string code where one applies
 * ("model_not_found"); srv_error_body_tei() builds TEI's.
 *
 * The status is the same in both shapes, and where TEI has the error it is
 * TEI's: its router answers Validation 422 (413 before TEI 1.9), Tokenizer
 * 422, Empty 400, Overloaded 429, Unhealthy 503 and Backend 424. So an empty
 * batch is SRV_EEMPTY and a text the tokenizer cannot encode SRV_ETOKENIZER,
 * each with the OpenAI type of its kin. Errors TEI answers otherwise, or not
 * at all, keep our status under TEI's nearest type: a malformed body is a
 * Validation 400 (TEI's JSON rejections are plain text), a body too large a
 * Validation 413, a full memory budget an Overloaded 503, a passed deadline
 * a Backend 504. */
#ifndef ATTN_ERRORS_H
#define ATTN_ERRORS_H

#include <jansson.h>

/*  name                 code  status type                     TEI's type    default message */
#define SRV_ERRORS(X)                                                                              \
    X(SRV_EBADREQUEST, -1, 400, "invalid_request_error", "Validation", "malformed request")        \
    X(SRV_EUNAUTHORIZED, -2, 401, "authentication_error", "Validation",                            \
      "missing or invalid API key")                                                                \
    X(SRV_ENOTFOUND, -3, 404, "not_found_error", "Validation", "no such route")                    \
    X(SRV_EMETHOD, -4, 405, "method_not_allowed_error", "Validation",                              \
      "method not allowed on this route")                                                          \
    X(SRV_ETOOLARGE, -5, 413, "request_too_large_error", "Validation", "request body too large")   \
    X(SRV_EMEDIATYPE, -6, 415, "unsupported_media_type_error", "Validation",                       \
      "Content-Type must be application/json")                                                     \
    X(SRV_EINVALID, -7, 422, "invalid_value_error", "Validation",                                  \
      "request is well-formed but invalid")                                                        \
    X(SRV_EQUEUEFULL, -8, 429, "overloaded_error", "Overloaded", "queue full, retry later")        \
    X(SRV_EUNAVAILABLE, -9, 503, "unavailable_error", "Unhealthy",                                 \
      "service not ready or draining")                                                             \
    X(SRV_ETIMEOUT, -10, 504, "timeout_error", "Backend", "deadline passed while queued")          \
    X(SRV_EINTERNAL, -11, 500, "internal_error", "Backend", "internal error")                      \
    X(SRV_EMEMORY, -12, 503, "overloaded_error", "Overloaded",                                     \
      "the request memory budget (max_request_memory_bytes) is held by other requests; retry "     \
      "later")                                                                                     \
    X(SRV_ETASK, -13, 424, "model_task_error", "Backend",                                          \
      "the served model does not do this task")                                                    \
    X(SRV_EEMPTY, -14, 400, "invalid_request_error", "Empty", "the request's batch is empty")      \
    X(SRV_ETOKENIZER, -15, 422, "invalid_value_error", "Tokenizer",                                \
      "the tokenizer cannot encode the input")

enum {
    SRV_OK = 0,
#define SRV_ERR_ENUM(name, code, status, type, tei_type, msg) name = code,
    SRV_ERRORS(SRV_ERR_ENUM)
#undef SRV_ERR_ENUM
};

/* HTTP status of err; 500 for a code not in the list. */
unsigned srv_error_status(int err);

/* {"error": {"message", "type", "param", "code"}}: message NULL means the
 * default, param NULL is null, code NULL is the HTTP status. Returns a new
 * reference, NULL only when out of memory. */
json_t *srv_error_body(int err, const char *message);
json_t *srv_error_body_at(int err, const char *message, const char *param, const char *code);

/* The same error in Text Embeddings Inference's shape, {"error": message,
 * "error_type": type}, for the routes that imitate TEI: the entry's TEI
 * type, the same HTTP status (srv_error_status). */
json_t *srv_error_body_tei(int err, const char *message);

/* Why a request was refused: the SRV_E* code, a message, and for OpenAI's
 * error body the request field at fault and a string code (each NULL when
 * none applies; static strings). Every decoder writes its refusals here,
 * and each route answers it in its own shape. */
typedef struct srv_refusal {
    int err;
    char msg[256];
    const char *param;
    const char *code;
} srv_refusal;

/* Sets r's code to err and its message from fmt; returns err, so that a
 * decoder can `return refuse(r, ...)`. param and code are left as they are.
 * The one helper every decoder shares, hence the short name. */
int refuse(srv_refusal *r, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

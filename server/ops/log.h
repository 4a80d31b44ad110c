/* log.h — leveled, structured log lines on stderr, as text or JSON.
 *
 * A line is a message plus typed key/value fields:
 *
 *   log_info("request", LOG_KV("request_id", id), LOG_KV("route", "/v1/attention"),
 *            LOG_KV("status", 200), LOG_KV("queue_ms", 0.41), LOG_KV("total_ms", 3.2));
 *
 * text: 2024-05-01T12:00:00.123Z INFO  request request_id=ab12 route=/v1/attention status=200 ...
 * json: {"ts":"2024-05-01T12:00:00.123Z","level":"info","msg":"request","request_id":"ab12",...}
 *
 * Every line is formatted whole and written with one write() under a lock,
 * so lines from different threads never interleave. Level and format may be
 * changed at any time from any thread (SIGHUP reload). Arguments are not
 * evaluated when the level is disabled. Text values with spaces, quotes or
 * control characters are quoted and escaped, so a client-supplied value
 * cannot forge a line; string values longer than LOG_VALUE_MAX bytes are cut.
 * The keys "ts", "level" and "msg" are reserved for the line itself. */
#ifndef ATTN_LOG_H
#define ATTN_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

typedef enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;
typedef enum log_format { LOG_TEXT, LOG_JSON } log_format;

/* String values are cut to this many bytes (marked with "..."). */
#define LOG_VALUE_MAX 4096

/* One key/value field. Build them with LOG_KV or the typed LOG_* macros. */
typedef enum log_type {
    LOG_T_END,
    LOG_T_STR,
    LOG_T_INT,
    LOG_T_UINT,
    LOG_T_DBL,
    LOG_T_BOOL,
    LOG_T_JSON
} log_type;
typedef struct log_field {
    const char *key; /* NULL only in the terminator */
    log_type type;
    union {
        const char *s; /* NULL is written as null */
        int64_t i;
        uint64_t u;
        double d; /* non-finite is written as null (json) or nan/inf (text) */
        bool b;
        const json_t *j; /* borrowed; embedded as JSON (compact in text lines) */
    } v;
} log_field;

#define LOG_STR(k, x)  ((log_field){.key = (k), .type = LOG_T_STR, .v.s = (x)})
#define LOG_INT(k, x)  ((log_field){.key = (k), .type = LOG_T_INT, .v.i = (x)})
#define LOG_UINT(k, x) ((log_field){.key = (k), .type = LOG_T_UINT, .v.u = (x)})
#define LOG_DBL(k, x)  ((log_field){.key = (k), .type = LOG_T_DBL, .v.d = (x)})
#define LOG_BOOL(k, x) ((log_field){.key = (k), .type = LOG_T_BOOL, .v.b = (x)})
#define LOG_JSON(k, x) ((log_field){.key = (k), .type = LOG_T_JSON, .v.j = (x)})

/* A field whose type follows the value's C type (strings, integers of any
 * width, float/double, bool). The literals true and false are ints in C11:
 * write LOG_BOOL("ok", true) for them. */
#ifdef __CPPCHECK__
/* cppcheck 2.10 cannot parse _Generic. */
#define LOG_KV(k, x) log_field_str_(k, x)
#else
#define LOG_KV(k, x)                                                                               \
    _Generic((x),                                                                                  \
        char *: log_field_str_, const char *: log_field_str_,                                      \
        _Bool: log_field_bool_,                                                                    \
        char: log_field_int_, signed char: log_field_int_, short: log_field_int_,                  \
        int: log_field_int_, long: log_field_int_, long long: log_field_int_,                      \
        unsigned char: log_field_uint_, unsigned short: log_field_uint_,                           \
        unsigned: log_field_uint_, unsigned long: log_field_uint_,                                 \
        unsigned long long: log_field_uint_,                                                       \
        float: log_field_dbl_, double: log_field_dbl_)(k, x)
#endif

/* Log a message with zero or more fields at a level. */
#define log_debug(...) LOG_AT_(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  LOG_AT_(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  LOG_AT_(LOG_WARN, __VA_ARGS__)
#define log_error(...) LOG_AT_(LOG_ERROR, __VA_ARGS__)

/* Sets level and format from their configuration names ("info", "json").
 * Returns 0, or -1 (and changes nothing) if either name is unknown. */
int log_configure(const char *level, const char *format);

void log_set_level(log_level level);
void log_set_format(log_format format);

/* Where lines go; stderr (2) unless changed (tests use a file). */
void log_set_fd(int fd);

/* Whether a line at level would be written now. */
bool log_enabled(log_level level);

/* The same line from an array of n fields, for callers that build fields at
 * run time. */
void log_writev(log_level level, const char *msg, const log_field *fields, size_t n);

/* ---- implementation details of the macros above ---- */
#define LOG_END_ ((log_field){.key = NULL, .type = LOG_T_END})
#ifdef __CPPCHECK__
/* cppcheck 2.10 misreads a compound literal inside ?: ("AST broken"). */
#define LOG_AT_(level, ...) log_write_((level), __VA_ARGS__, LOG_END_)
#else
#define LOG_AT_(level, ...)                                                                        \
    (log_enabled(level) ? log_write_((level), __VA_ARGS__, LOG_END_) : (void)0)
#endif
void log_write_(log_level level, const char *msg, ...);
log_field log_field_str_(const char *key, const char *value);
log_field log_field_int_(const char *key, long long value);
log_field log_field_uint_(const char *key, unsigned long long value);
log_field log_field_dbl_(const char *key, double value);
log_field log_field_bool_(const char *key, bool value);

#endif

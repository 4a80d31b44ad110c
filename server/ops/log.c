/* log.c — formats each line whole in memory, then writes it with one
 * write() under a lock, so that concurrent lines never interleave. JSON
 * lines are built and escaped by jansson; text lines are escaped here. */
#include "server/ops/log.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int current_level = LOG_INFO;
static atomic_int current_format = LOG_TEXT;
static atomic_int out_fd = 2;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const level_labels[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
static const char *const format_names[] = {"text", "json"};

/* Fields beyond this on the stack go to the heap. */
#define STACK_FIELDS 32

/* ---- settings ----------------------------------------------------------------- */

static int find_name(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

int log_configure(const char *level, const char *format) {
    int l = find_name(level_names, 4, level), f = find_name(format_names, 2, format);
    if (l < 0 || f < 0)
        return -1;
    atomic_store(&current_level, l);
    atomic_store(&current_format, f);
    return 0;
}

void log_set_level(log_level level) {
    atomic_store(&current_level, (int)level);
}
void log_set_format(log_format format) {
    atomic_store(&current_format, (int)format);
}
void log_set_fd(int fd) {
    atomic_store(&out_fd, fd);
}

bool log_enabled(log_level level) {
    return (int)level >= atomic_load(&current_level) && level <= LOG_ERROR;
}

/* ---- field constructors for LOG_KV ------------------------------------------------ */

log_field log_field_str_(const char *key, const char *value) {
    return LOG_STR(key, value);
}
log_field log_field_int_(const char *key, long long value) {
    return LOG_INT(key, value);
}
log_field log_field_uint_(const char *key, unsigned long long value) {
    return LOG_UINT(key, value);
}
log_field log_field_dbl_(const char *key, double value) {
    return LOG_DBL(key, value);
}
log_field log_field_bool_(const char *key, bool value) {
    return LOG_BOOL(key, value);
}

/* ---- a growing line buffer ------------------------------------------------------- */

typedef struct line {
    char *p;
    size_t len, cap;
    bool failed; /* out of memory: the line is dropped */
    char stack[1024];
} line;

static void line_init(line *b) {
    b->p = b->stack;
    b->len = 0;
    b->cap = sizeof b->stack;
    b->failed = false;
}

static void line_free(line *b) {
    if (b->p != b->stack)
        free(b->p);
}

static void put(line *b, const char *s, size_t n) {
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap * 2;
        while (cap < b->len + n)
            cap *= 2;
        char *p = b->p == b->stack ? malloc(cap) : realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        if (b->p == b->stack)
            memcpy(p, b->stack, b->len);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(line *b, const char *s) {
    put(b, s, strlen(s));
}

static void putf(line *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(line *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static int dump_into(const char *buffer, size_t size, void *data) {
    put(data, buffer, size);
    return 0;
}

/* ---- pieces shared by both formats -------------------------------------------- */

/* RFC 3339 UTC with milliseconds, e.g. 2024-05-01T12:00:00.123Z. */
static void put_time(line *b) {
    struct timespec ts;
    struct tm tm;
    char tmp[40];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(tmp, sizeof tmp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(tmp + n, sizeof tmp - n, ".%03ldZ", ts.tv_nsec / 1000000L);
    puts_(b, tmp);
}

/* Length of s cut to LOG_VALUE_MAX bytes without splitting a UTF-8
 * sequence; *cut tells whether anything was dropped. */
static size_t clip(const char *s, bool *cut) {
    size_t n = strnlen(s, LOG_VALUE_MAX + 1);
    *cut = n > LOG_VALUE_MAX;
    if (*cut) {
        n = LOG_VALUE_MAX;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    return n;
}

/* ---- text lines ------------------------------------------------------------------ */

static bool needs_quotes(const char *s, size_t n) {
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return true;
    }
    return false;
}

/* Control characters are escaped so that no value can start a new line or
 * hide text from a terminal. */
static void put_escaped(line *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            putf(b, "\\%c", c);
        else if (c == '\n')
            puts_(b, "\\n");
        else if (c == '\t')
            puts_(b, "\\t");
        else if (c == '\r')
            puts_(b, "\\r");
        else if (c < ' ' || c == 0x7f)
            putf(b, "\\x%02x", c);
        else
            put(b, (const char *)&s[i], 1);
    }
}

static void put_text_string(line *b, const char *s) {
    bool cut;
    size_t n = clip(s, &cut);
    bool quote = cut || needs_quotes(s, n);
    if (quote)
        puts_(b, "\"");
    put_escaped(b, s, n);
    if (cut)
        puts_(b, "...");
    if (quote)
        puts_(b, "\"");
}

static void put_text_value(line *b, const log_field *f) {
    switch (f->type) {
    case LOG_T_STR:
        if (f->v.s)
            put_text_string(b, f->v.s);
        else
            puts_(b, "null");
        return;
    case LOG_T_INT:
        putf(b, "%lld", (long long)f->v.i);
        return;
    case LOG_T_UINT:
        putf(b, "%llu", (unsigned long long)f->v.u);
        return;
    case LOG_T_DBL:
        putf(b, "%.15g", f->v.d);
        return;
    case LOG_T_BOOL:
        puts_(b, f->v.b ? "true" : "false");
        return;
    case LOG_T_JSON:
        if (!f->v.j ||
            json_dump_callback(f->v.j, dump_into, b,
                               JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) != 0)
            puts_(b, "null");
        return;
    case LOG_T_END:
        return;
    }
}

static void format_text(line *b, log_level level, const char *msg, const log_field *fields,
                        size_t n) {
    put_time(b);
    puts_(b, " ");
    puts_(b, level_labels[level]);
    puts_(b, " ");
    bool cut;
    size_t len = clip(msg, &cut);
    put_escaped(b, msg, len);
    for (size_t i = 0; i < n; i++) {
        puts_(b, " ");
        puts_(b, fields[i].key);
        puts_(b, "=");
        put_text_value(b, &fields[i]);
    }
    puts_(b, "\n");
}

/* ---- JSON lines ------------------------------------------------------------------- */

/* A JSON string of s, cut like text values; bytes that are not valid UTF-8
 * (jansson refuses them) become '?' rather than losing the line. */
static json_t *json_text(const char *s) {
    if (!s)
        return json_null();
    bool cut;
    size_t n = clip(s, &cut);
    char tmp[LOG_VALUE_MAX + 4];
    memcpy(tmp, s, n);
    if (cut) {
        memcpy(tmp + n, "...", 3);
        n += 3;
    }
    json_t *j = json_stringn(tmp, n);
    if (!j) {
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)tmp[i] >= 0x80)
                tmp[i] = '?';
        j = json_stringn(tmp, n);
    }
    return j;
}

static json_t *json_value(const log_field *f) {
    switch (f->type) {
    case LOG_T_STR:
        return json_text(f->v.s);
    case LOG_T_INT:
        return json_integer(f->v.i);
    case LOG_T_UINT:
        /* Past INT64_MAX a JSON integer cannot hold it in jansson; a
         * number keeps the magnitude. */
        return f->v.u <= INT64_MAX ? json_integer((json_int_t)f->v.u) : json_real((double)f->v.u);
    case LOG_T_DBL:
        return isfinite(f->v.d) ? json_real(f->v.d) : json_null();
    case LOG_T_BOOL:
        return json_boolean(f->v.b);
    case LOG_T_JSON:
        return f->v.j ? json_deep_copy(f->v.j) : json_null();
    case LOG_T_END:
        break;
    }
    return json_null();
}

static void format_json(line *b, log_level level, const char *msg, const log_field *fields,
                        size_t n) {
    line ts;
    line_init(&ts);
    put_time(&ts);
    json_t *obj = json_object();
    int rc = obj ? 0 : -1;
    rc |= json_object_set_new(obj, "ts", json_stringn(ts.p, ts.len));
    rc |= json_object_set_new(obj, "level", json_string(level_names[level]));
    rc |= json_object_set_new(obj, "msg", json_text(msg));
    for (size_t i = 0; i < n; i++)
        rc |= json_object_set_new(obj, fields[i].key, json_value(&fields[i]));
    /* 15 digits: 0.41 prints as 0.41, not 0.40999999999999998. */
    if (rc != 0 ||
        json_dump_callback(obj, dump_into, b,
                           JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) != 0)
        b->failed = true;
    puts_(b, "\n");
    json_decref(obj);
    line_free(&ts);
}

/* ---- writing ----------------------------------------------------------------------- */

static void write_all(const char *p, size_t n) {
    int fd = atomic_load(&out_fd);
    pthread_mutex_lock(&write_lock);
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* nowhere left to report a failing log */
        p += w;
        n -= (size_t)w;
    }
    pthread_mutex_unlock(&write_lock);
}

void log_writev(log_level level, const char *msg, const log_field *fields, size_t n) {
    if (!log_enabled(level))
        return;
    line b;
    line_init(&b);
    if (atomic_load(&current_format) == LOG_JSON)
        format_json(&b, level, msg ? msg : "", fields, n);
    else
        format_text(&b, level, msg ? msg : "", fields, n);
    if (b.failed) {
        static const char oom[] = "log: out of memory, a line was dropped\n";
        write_all(oom, sizeof oom - 1);
    } else {
        write_all(b.p, b.len);
    }
    line_free(&b);
}

void log_write_(log_level level, const char *msg, ...) {
    va_list ap, count;
    va_start(ap, msg);
    va_copy(count, ap);
    size_t n = 0;
    while (va_arg(count, log_field).type != LOG_T_END)
        n++;
    va_end(count);
    log_field stack[STACK_FIELDS] = {0}; /* zeroed: GCC cannot see n bounds the reads */
    log_field *fields = n <= STACK_FIELDS ? stack : malloc(n * sizeof *fields);
    if (fields) {
        for (size_t i = 0; i < n; i++)
            fields[i] = va_arg(ap, log_field);
        log_writev(level, msg, fields, n);
    }
    va_end(ap);
    if (fields != stack)
        free(fields);
}

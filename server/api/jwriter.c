/* jwriter.c — a growable text buffer charged to the request-memory budget,
 * and the JSON pieces answers are made of. Vectors reserve their worst case
 * once and then write without checks. */
#include "server/api/jwriter.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/api/errors.h"
#include "server/api/f32text.h"
#include "server/work/membudget.h"

void jw_init(jwriter *w, size_t hint) {
    *w = (jwriter){0};
    if (hint)
        jw_reserve(w, hint);
}

void jw_free(jwriter *w) {
    membudget_free(w->buf);
    *w = (jwriter){0};
}

bool jw_reserve(jwriter *w, size_t more) {
    if (w->failed)
        return false;
    if (w->cap - w->len >= more)
        return true;
    size_t cap = w->cap ? w->cap * 2 : 256;
    if (cap < w->len + more)
        cap = w->len + more;
    char *buf = membudget_realloc(w->buf, cap);
    if (!buf) {
        w->failed = true;
        return false;
    }
    w->buf = buf;
    w->cap = cap;
    return true;
}

void jw_raw(jwriter *w, const char *s, size_t n) {
    if (!jw_reserve(w, n))
        return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static const char hex_digits[] = "0123456789ABCDEF";

void jw_str(jwriter *w, const char *s, size_t n) {
    /* The worst case: every byte a six-byte \u00XX. */
    if (!jw_reserve(w, 6 * n + 2))
        return;
    char *p = w->buf + w->len;
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        default:
            break;
        }
        if (esc) {
            memcpy(p, esc, 2);
            p += 2;
        } else if (c < 0x20) {
            memcpy(p, "\\u00", 4);
            p[4] = hex_digits[c >> 4];
            p[5] = hex_digits[c & 15];
            p += 6;
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    w->len = (size_t)(p - w->buf);
}

void jw_int(jwriter *w, int64_t v) {
    char tmp[24];
    size_t i = sizeof tmp;
    /* The magnitude as unsigned, so that INT64_MIN has one. */
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--i] = '-';
    jw_raw(w, tmp + i, sizeof tmp - i);
}

/* f32text_write at the end of a buffer with room for it. */
static size_t put_f32(jwriter *w, char *p, float v) {
    const size_t n = f32text_write(p, v);
    if (n == 4 && p[0] == 'n')
        w->nonfinite = true;
    return n;
}

void jw_f32(jwriter *w, float v) {
    if (!jw_reserve(w, F32TEXT_MAX))
        return;
    w->len += put_f32(w, w->buf + w->len, v);
}

void jw_f32s(jwriter *w, const float *v, size_t n) {
    if (!jw_reserve(w, n * (F32TEXT_MAX + 1) + 2))
        return;
    char *p = w->buf + w->len;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        p += put_f32(w, p, v[i]);
    }
    *p++ = ']';
    w->len = (size_t)(p - w->buf);
}

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Three bytes (take of them real, the rest zero) as four characters. */
static char *put_b64(char *p, uint32_t triple, size_t take) {
    p[0] = b64_chars[triple >> 18 & 63];
    p[1] = b64_chars[triple >> 12 & 63];
    p[2] = take > 1 ? b64_chars[triple >> 6 & 63] : '=';
    p[3] = take > 2 ? b64_chars[triple & 63] : '=';
    return p + 4;
}

/* A float's bytes in little-endian order, whatever the host's. */
static void le_bytes(unsigned char *b, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    b[0] = (unsigned char)u;
    b[1] = (unsigned char)(u >> 8);
    b[2] = (unsigned char)(u >> 16);
    b[3] = (unsigned char)(u >> 24);
}

size_t jw_base64_f32(char *out, const float *v, size_t n) {
    char *p = out;
    size_t i = 0;
    /* Three floats are twelve bytes, sixteen characters. */
    for (; i + 3 <= n; i += 3) {
        unsigned char b[12];
        le_bytes(b, v[i]);
        le_bytes(b + 4, v[i + 1]);
        le_bytes(b + 8, v[i + 2]);
        for (int j = 0; j < 12; j += 3)
            p = put_b64(p, (uint32_t)b[j] << 16 | (uint32_t)b[j + 1] << 8 | b[j + 2], 3);
    }
    unsigned char b[8] = {0};
    const size_t rest = (n - i) * 4;
    for (size_t j = 0; i + j < n; j++)
        le_bytes(b + 4 * j, v[i + j]);
    for (size_t j = 0; j < rest; j += 3) {
        const size_t take = rest - j < 3 ? rest - j : 3;
        const uint32_t triple = (uint32_t)b[j] << 16 | (take > 1 ? (uint32_t)b[j + 1] << 8 : 0) |
                                (take > 2 ? b[j + 2] : 0);
        p = put_b64(p, triple, take);
    }
    return (size_t)(p - out);
}

void jw_f32_base64(jwriter *w, const float *v, size_t n) {
    if (!jw_reserve(w, JW_BASE64_LEN(n) + 2))
        return;
    char *p = w->buf + w->len;
    *p++ = '"';
    p += jw_base64_f32(p, v, n);
    *p++ = '"';
    w->len = (size_t)(p - w->buf);
}

char *jw_take(jwriter *w, size_t *len) {
    if (!w->buf)
        jw_reserve(w, 1); /* an empty text is still an answer */
    char *buf = w->failed ? NULL : w->buf;
    *len = buf ? w->len : 0;
    if (!buf)
        membudget_free(w->buf);
    *w = (jwriter){0};
    return buf;
}

int jw_reply(http_request *req, unsigned status, jwriter *w) {
    if (w->nonfinite && !w->failed) {
        jw_free(w);
        return http_reply_error(req, SRV_EINTERNAL, "the answer holds a non-finite value");
    }
    size_t len;
    char *text = jw_take(w, &len);
    return http_reply_buffer(req, status, "application/json", text, len);
}

void jw_make_id(char id[JW_ID_LEN], const char *prefix) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t a = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    /* splitmix64 of the time and a counter: two answers never share an id. */
    uint64_t b = a + (atomic_fetch_add(&counter, 1) + 1) * 0x9E3779B97F4A7C15ull;
    b = (b ^ (b >> 30)) * 0xBF58476D1CE4E5B9ull;
    b = (b ^ (b >> 27)) * 0x94D049BB133111EBull;
    b ^= b >> 31;
    snprintf(id, JW_ID_LEN, "%s-%016llx%016llx", prefix, (unsigned long long)a,
             (unsigned long long)b);
}

/* errors.c — lookups over the SRV_ERRORS list and the one error body. */
#include "server/api/errors.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

typedef struct srv_error_entry {
    int code;
    unsigned status;
    const char *type;
    const char *tei_type;
    const char *message;
} srv_error_entry;

static const srv_error_entry entries[] = {
#define SRV_ERR_ENTRY(name, code, status, type, tei_type, msg) {code, status, type, tei_type, msg},
    SRV_ERRORS(SRV_ERR_ENTRY)
#undef SRV_ERR_ENTRY
};

/* An unknown code is a bug in the caller, so it reads as the internal error. */
static const srv_error_entry *find(int err) {
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (entries[i].code == err)
            return &entries[i];
    return find(SRV_EINTERNAL);
}

unsigned srv_error_status(int err) {
    return find(err)->status;
}

json_t *srv_error_body_at(int err, const char *message, const char *param, const char *code) {
    const srv_error_entry *e = find(err);
    return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", message ? message : e->message,
                     "type", e->type, "param", param ? json_string(param) : json_null(), "code",
                     code ? json_string(code) : json_integer((json_int_t)e->status));
}

json_t *srv_error_body(int err, const char *message) {
    return srv_error_body_at(err, message, NULL, NULL);
}

json_t *srv_error_body_tei(int err, const char *message) {
    const srv_error_entry *e = find(err);
    return json_pack("{s:s, s:s}", "error", message ? message : e->message, "error_type",
                     e->tei_type);
}

int refuse(srv_refusal *r, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->err = err;
    return err;
}

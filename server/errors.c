/* errors.c — lookups over the SRV_ERRORS list and the one error body. */
#include "errors.h"

#include <stddef.h>

typedef struct srv_error_entry {
    int code;
    unsigned status;
    const char *type;
    const char *message;
} srv_error_entry;

static const srv_error_entry entries[] = {
#define SRV_ERR_ENTRY(name, code, status, type, msg) {code, status, type, msg},
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
    const char *type = "Validation";
    if (err == SRV_EQUEUEFULL || err == SRV_EMEMORY)
        type = "Overloaded";
    else if (err == SRV_EUNAVAILABLE)
        type = "Unhealthy";
    else if (err == SRV_EINTERNAL || err == SRV_ETIMEOUT || err == SRV_ETASK)
        type = "Backend";
    return json_pack("{s:s, s:s}", "error", message ? message : e->message, "error_type", type);
}

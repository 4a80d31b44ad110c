/* fields.c — the one decoder of request objects against a field table
 * (fields.h), and the wording of every error it answers. */
#include "server/api/fields.h"

#include <stdio.h>
#include <string.h>

/* Whether the JSON string s is exactly lit (s may hold U+0000). */
static bool string_is(const json_t *s, const char *lit) {
    return json_string_length(s) == strlen(lit) &&
           memcmp(json_string_value(s), lit, strlen(lit)) == 0;
}

static const fld_row *find(const fld_table *t, const char *key) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->rows[i].name, key) == 0)
            return &t->rows[i];
    return NULL;
}

/* Every field of t, in its order: "a, b, c". */
static void field_list(const fld_table *t, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < t->n && at < cap; i++) {
        const int w = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", t->rows[i].name);
        at = w < 0 ? cap : at + (size_t)w;
    }
}

/* The first member of obj that t does not name, refused with the list. */
static int unknown_fields(const fld_table *t, const json_t *obj, srv_refusal *r) {
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        if (find(t, key))
            continue;
        char list[256];
        field_list(t, list, sizeof list);
        r->param = t->param;
        return refuse(r, SRV_EBADREQUEST, "unknown field \"%s%.64s\" (expected %s)",
                      t->prefix ? t->prefix : "", key, list);
    }
    return SRV_OK;
}

static bool type_ok(fld_type type, const json_t *v) {
    switch (type) {
    case FLD_ANY:
        return true;
    case FLD_BOOL:
        return json_is_boolean(v);
    case FLD_INT:
        return json_is_integer(v);
    case FLD_OBJECT:
        return json_is_object(v);
    case FLD_STRING:
    case FLD_ENUM:
        return json_is_string(v);
    }
    return false;
}

static const char *type_words(fld_type type) {
    switch (type) {
    case FLD_BOOL:
        return "true or false";
    case FLD_INT:
        return "an integer";
    case FLD_OBJECT:
        return "an object";
    default:
        return "a string";
    }
}

/* The choices' names as a sentence: "a", "b" or "c". */
static void choice_list(const fld_choice *c, char *buf, size_t cap) {
    size_t at = 0, n = 0;
    while (c[n].name)
        n++;
    buf[0] = '\0';
    for (size_t i = 0; i < n && at < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        const int w = snprintf(buf + at, cap - at, "%s\"%s\"", sep, c[i].name);
        at = w < 0 ? cap : at + (size_t)w;
    }
}

static int out_of_range(const fld_table *t, const fld_row *row, int64_t x, int64_t lo, int64_t hi,
                        srv_refusal *r) {
    const char *p = t->prefix ? t->prefix : "";
    if (row->msg)
        return refuse(r, SRV_EINVALID, "%s", row->msg);
    switch (row->range) {
    case FLD_RANGE_MODEL:
        return refuse(r, SRV_EINVALID, "%s%s is %lld; this model allows %lld..%lld", p, row->name,
                      (long long)x, (long long)lo, (long long)hi);
    case FLD_RANGE_AT_LEAST:
        return refuse(r, SRV_EINVALID, "%s%s must be at least %lld", p, row->name, (long long)lo);
    case FLD_RANGE_IN:
        break;
    }
    return refuse(r, SRV_EINVALID, "%s%s is %lld; it must be in %lld..%lld", p, row->name,
                  (long long)x, (long long)lo, (long long)hi);
}

/* Checks v (present) against row and stores it. */
static int take(const fld_table *t, const fld_row *row, const json_t *v, char *slot,
                const void *ctx, srv_refusal *r) {
    const char *p = t->prefix ? t->prefix : "";
    if (!type_ok(row->type, v)) {
        if (row->type_msg)
            return refuse(r, SRV_EBADREQUEST, "%s", row->type_msg);
        return refuse(r, SRV_EBADREQUEST, "%s%s must be %s", p, row->name, type_words(row->type));
    }
    switch (row->type) {
    case FLD_BOOL:
        *(bool *)(void *)slot = json_is_true(v);
        break;
    case FLD_INT: {
        const int64_t x = json_integer_value(v);
        int64_t lo = row->min, hi = row->max;
        if (row->bounds)
            row->bounds(ctx, &lo, &hi);
        if (x < lo || x > hi)
            return out_of_range(t, row, x, lo, hi, r);
        *(int64_t *)(void *)slot = x;
        break;
    }
    case FLD_ENUM: {
        const fld_choice *c = row->choices;
        while (c->name && !string_is(v, c->name))
            c++;
        if (!c->name) {
            char list[160];
            if (row->msg)
                return refuse(r, SRV_EINVALID, "%s", row->msg);
            choice_list(row->choices, list, sizeof list);
            return refuse(r, SRV_EINVALID, "%s%s must be %s", p, row->name, list);
        }
        *(int *)(void *)slot = c->value;
        break;
    }
    default:
        *(const json_t **)(void *)slot = v;
    }
    return row->check ? row->check(ctx, v, r) : SRV_OK;
}

/* The slot of an absent field. */
static void take_default(const fld_row *row, char *slot) {
    if (row->flags & FLD_PRESET)
        return;
    switch (row->type) {
    case FLD_BOOL:
        *(bool *)(void *)slot = row->dflt != 0;
        break;
    case FLD_INT:
        *(int64_t *)(void *)slot = row->dflt;
        break;
    case FLD_ENUM:
        *(int *)(void *)slot = (int)row->dflt;
        break;
    default:
        *(const json_t **)(void *)slot = NULL;
    }
}

int fld_decode(const fld_table *t, const json_t *obj, void *out, const void *ctx, srv_refusal *r) {
    if (!t->open && unknown_fields(t, obj, r) != SRV_OK)
        return r->err;
    for (size_t i = 0; i < t->n; i++) {
        const fld_row *row = &t->rows[i];
        const json_t *v = json_object_get(obj, row->name);
        char *slot = (char *)out + row->at;
        if (v && json_is_null(v) && !(row->flags & FLD_NULL))
            v = NULL;
        if (!v && (row->flags & FLD_REQUIRED)) {
            r->param = row->param;
            return refuse(r, SRV_EBADREQUEST, "missing field \"%s%s\"", t->prefix ? t->prefix : "",
                          row->name);
        }
        if (!v) {
            take_default(row, slot);
            continue;
        }
        const char *param = r->param;
        r->param = row->param;
        if (take(t, row, v, slot, ctx, r) != SRV_OK)
            return r->err;
        r->param = param;
    }
    return SRV_OK;
}

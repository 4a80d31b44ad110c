/* test_fields.c — the field-table decoder: values stored where the rows say,
 * defaults for absent and null fields, and every refusal worded, coded and
 * given its param as the dialects' clients expect. */
#include <criterion/criterion.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/api/fields.h"

typedef struct req {
    json_t *input, *name;
    bool flag, strict;
    int64_t count, level;
    int color;
} req;

static const fld_choice COLORS[] = {{"red", 1}, {"green", 2}, {"blue", 3}, {NULL, 0}};

static void level_bounds(const void *ctx, int64_t *lo, int64_t *hi) {
    *lo = 1;
    *hi = *(const int64_t *)ctx;
}

static int name_check(const void *ctx, const json_t *v, srv_refusal *r) {
    (void)ctx;
    if (strcmp(json_string_value(v), "nobody") != 0)
        return SRV_OK;
    r->param = "name";
    r->code = "not_found";
    return refuse(r, SRV_ENOTFOUND, "no such name");
}

#define AT(f) offsetof(req, f)
static const fld_row ROWS[] = {
    {"input", FLD_ANY, FLD_REQUIRED | FLD_NULL, AT(input), .param = "input"},
    {"name", FLD_STRING, 0, AT(name), .param = "name", .check = name_check},
    {"flag", FLD_BOOL, 0, AT(flag), .dflt = true},
    {"strict", FLD_BOOL, FLD_NULL | FLD_PRESET, AT(strict), .param = "strict"},
    {"count", FLD_INT, 0, AT(count), .dflt = 3, .min = 0, .max = 10, .param = "count"},
    {"level", FLD_INT, 0, AT(level), .bounds = level_bounds, .range = FLD_RANGE_MODEL},
    {"color", FLD_ENUM, 0, AT(color), .dflt = 2, .choices = COLORS, .param = "color"},
};
static const fld_table TABLE = FLD_TABLE(ROWS, NULL, NULL);
static const fld_table NESTED = FLD_TABLE(ROWS, "opts.", "opts");

/* Decodes text against t: the refusal's code (SRV_OK when none). */
static int decode(const fld_table *t, const char *text, req *q, srv_refusal *r) {
    json_error_t e;
    json_t *obj = json_loads(text, JSON_ALLOW_NUL, &e);
    cr_assert_not_null(obj, "%s: %s", text, e.text);
    *r = (srv_refusal){0};
    const int64_t max_level = 8;
    const int rc = fld_decode(t, obj, q, &max_level, r);
    /* The slots borrow from obj: a test reads only the scalars past here. */
    json_decref(obj);
    return rc;
}

static void refused(const char *text, int err, const char *msg, const char *param) {
    req q = {0};
    srv_refusal r;
    cr_assert_eq(decode(&TABLE, text, &q, &r), err, "%s: %d %s", text, r.err, r.msg);
    cr_assert_eq(r.err, err);
    cr_assert_str_eq(r.msg, msg, "%s", text);
    if (param)
        cr_assert_str_eq(r.param, param, "%s", text);
    else
        cr_assert_null(r.param, "%s: param %s", text, r.param);
}

Test(fields, stores_values_and_defaults) {
    req q = {.strict = true, .count = 99};
    srv_refusal r;
    cr_assert_eq(decode(&TABLE, "{\"input\": [1], \"count\": 7, \"color\": \"blue\"}", &q, &r),
                 SRV_OK, "%s", r.msg);
    cr_assert_not_null(q.input);
    cr_assert_null(q.name);
    cr_assert(q.flag, "an absent bool takes the row's default");
    cr_assert(q.strict, "an absent preset field keeps the caller's value");
    cr_assert_eq(q.count, 7);
    cr_assert_eq(q.level, 0);
    cr_assert_eq(q.color, 3);
    cr_assert_eq(decode(&TABLE, "{\"input\": 1, \"flag\": null, \"count\": null}", &q, &r), SRV_OK);
    cr_assert(q.flag, "null is absent unless the row takes it as a value");
    cr_assert_eq(q.count, 3);
    cr_assert_eq(q.color, 2);
    cr_assert_eq(decode(&TABLE, "{\"input\": null, \"level\": 8}", &q, &r), SRV_OK);
    cr_assert(json_is_null(q.input), "null is the value of a row that takes null");
    cr_assert_eq(q.level, 8);
}

Test(fields, unknown_fields_name_every_field) {
    refused("{\"input\": 1, \"extra\": 2}", SRV_EBADREQUEST,
            "unknown field \"extra\" (expected input, name, flag, strict, count, level, color)",
            NULL);
    req q = {0};
    srv_refusal r;
    cr_assert_eq(decode(&NESTED, "{\"input\": 1, \"extra\": 2}", &q, &r), SRV_EBADREQUEST);
    cr_assert_str_eq(r.msg, "unknown field \"opts.extra\" (expected input, name, flag, strict, "
                            "count, level, color)");
    cr_assert_str_eq(r.param, "opts");
}

Test(fields, missing_and_wrong_types) {
    refused("{}", SRV_EBADREQUEST, "missing field \"input\"", "input");
    refused("{\"input\": 1, \"flag\": 1}", SRV_EBADREQUEST, "flag must be true or false", NULL);
    refused("{\"input\": 1, \"strict\": null}", SRV_EBADREQUEST, "strict must be true or false",
            "strict");
    refused("{\"input\": 1, \"count\": 1.5}", SRV_EBADREQUEST, "count must be an integer", "count");
    refused("{\"input\": 1, \"name\": 5}", SRV_EBADREQUEST, "name must be a string", "name");
    refused("{\"input\": 1, \"color\": 5}", SRV_EBADREQUEST, "color must be a string", "color");
    req q = {0};
    srv_refusal r;
    cr_assert_eq(decode(&NESTED, "{\"input\": 1, \"count\": \"x\"}", &q, &r), SRV_EBADREQUEST);
    cr_assert_str_eq(r.msg, "opts.count must be an integer");
}

Test(fields, values_out_of_bounds_or_choices) {
    refused("{\"input\": 1, \"count\": 11}", SRV_EINVALID, "count is 11; it must be in 0..10",
            "count");
    refused("{\"input\": 1, \"level\": 9}", SRV_EINVALID, "level is 9; this model allows 1..8",
            NULL);
    refused("{\"input\": 1, \"color\": \"pink\"}", SRV_EINVALID,
            "color must be \"red\", \"green\" or \"blue\"", "color");
    refused("{\"input\": 1, \"color\": \"red\\u0000x\"}", SRV_EINVALID,
            "color must be \"red\", \"green\" or \"blue\"", "color");
}

Test(fields, a_rows_check_refuses_with_its_own_param) {
    req q = {0};
    srv_refusal r;
    cr_assert_eq(decode(&TABLE, "{\"input\": 1, \"name\": \"nobody\"}", &q, &r), SRV_ENOTFOUND);
    cr_assert_str_eq(r.param, "name");
    cr_assert_str_eq(r.code, "not_found");
    cr_assert_eq(decode(&TABLE, "{\"input\": 1, \"name\": \"somebody\"}", &q, &r), SRV_OK);
    cr_assert_null(r.param, "a field that passes leaves no param behind");
}

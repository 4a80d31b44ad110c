/* test_errors.c — the error list: codes distinct, TEI's types among TEI's
 * own, both bodies in their shapes, and the errors TEI tells apart by type
 * answered like their kin in OpenAI's shape. */
#include <criterion/criterion.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "server/api/errors.h"

#define SRV_ERR_CODE(name, code, ...) name,
static const int codes[] = {SRV_ERRORS(SRV_ERR_CODE)};
#undef SRV_ERR_CODE
#define NCODES (sizeof codes / sizeof codes[0])

/* TEI's ErrorType names, as its router writes them. */
static bool is_tei_type(const char *t) {
    static const char *const names[] = {"Unhealthy",  "Backend",   "Overloaded",
                                        "Validation", "Tokenizer", "Empty"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(t, names[i]) == 0)
            return true;
    return false;
}

static const char *tei_type(int err) {
    static char type[32];
    json_t *b = srv_error_body_tei(err, NULL);
    cr_assert_not_null(b);
    cr_assert_eq(json_object_size(b), 2);
    cr_assert(json_is_string(json_object_get(b, "error")));
    snprintf(type, sizeof type, "%s", json_string_value(json_object_get(b, "error_type")));
    json_decref(b);
    return type;
}

/* OpenAI's type and code of err. */
static void openai(int err, char *type, size_t len, json_int_t *code) {
    json_t *b = srv_error_body(err, "m");
    cr_assert_not_null(b);
    json_t *e = json_object_get(b, "error");
    snprintf(type, len, "%s", json_string_value(json_object_get(e, "type")));
    *code = json_integer_value(json_object_get(e, "code"));
    json_decref(b);
}

Test(errors, codes_are_distinct_negative_and_known) {
    for (size_t i = 0; i < NCODES; i++) {
        cr_assert_lt(codes[i], 0);
        for (size_t j = i + 1; j < NCODES; j++)
            cr_assert_neq(codes[i], codes[j], "%d twice", codes[i]);
        const unsigned s = srv_error_status(codes[i]);
        cr_assert(s >= 400 && s < 600, "%d: status %u", codes[i], s);
        cr_assert(is_tei_type(tei_type(codes[i])), "%d: %s", codes[i], tei_type(codes[i]));
    }
}

Test(errors, an_unknown_code_reads_as_the_internal_error) {
    cr_assert_eq(srv_error_status(-1000), 500);
    cr_assert_str_eq(tei_type(-1000), "Backend");
}

Test(errors, empty_and_tokenizer_are_their_kin_in_openai_shape) {
    char a[64], b[64];
    json_int_t ca, cb;
    openai(SRV_EEMPTY, a, sizeof a, &ca);
    openai(SRV_EBADREQUEST, b, sizeof b, &cb);
    cr_assert_str_eq(a, b);
    cr_assert_eq(ca, cb);
    openai(SRV_ETOKENIZER, a, sizeof a, &ca);
    openai(SRV_EINVALID, b, sizeof b, &cb);
    cr_assert_str_eq(a, b);
    cr_assert_eq(ca, cb);
}

/* TEI's router: Empty 400, Tokenizer and Validation 422 (since TEI 1.9). */
Test(errors, tei_types_and_statuses_of_a_request_at_fault) {
    cr_assert_str_eq(tei_type(SRV_EEMPTY), "Empty");
    cr_assert_eq(srv_error_status(SRV_EEMPTY), 400);
    cr_assert_str_eq(tei_type(SRV_ETOKENIZER), "Tokenizer");
    cr_assert_eq(srv_error_status(SRV_ETOKENIZER), 422);
    cr_assert_str_eq(tei_type(SRV_EINVALID), "Validation");
    cr_assert_eq(srv_error_status(SRV_EINVALID), 422);
    cr_assert_str_eq(tei_type(SRV_EBADREQUEST), "Validation");
    cr_assert_eq(srv_error_status(SRV_EBADREQUEST), 400);
}

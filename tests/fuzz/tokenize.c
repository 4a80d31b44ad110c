/* tokenize.c — fuzzes POST /tokenize: body bytes through http_json_parse
 * and embed_api_tokens (inputs, add_special_tokens), as the route does.
 *
 * Checks, beyond no crash, leak or undefined behaviour: the answer holds one
 * array per input; every token has an id in the vocabulary; a special token
 * has null offsets, any other one 0 <= start < stop <= the input's length. */
#include <string.h>

#include "embed_common.h"

static void check_token(const embed_api *api, const json_t *tok, size_t len) {
    json_int_t id = json_integer_value(json_object_get(tok, "id"));
    FUZZ_CHECK(json_is_integer(json_object_get(tok, "id")) && id >= 0 &&
                   id < api->model->vocab_size,
               "id %lld", (long long)id);
    FUZZ_CHECK(json_is_string(json_object_get(tok, "text")), "text is not a string");
    const json_t *start = json_object_get(tok, "start"), *stop = json_object_get(tok, "stop");
    if (json_is_true(json_object_get(tok, "special"))) {
        FUZZ_CHECK(json_is_null(start) && json_is_null(stop), "special token with offsets");
        return;
    }
    FUZZ_CHECK(json_is_integer(start) && json_is_integer(stop), "offsets are not integers");
    json_int_t a = json_integer_value(start), b = json_integer_value(stop);
    FUZZ_CHECK(0 <= a && a < b && (size_t)b <= len, "offsets [%lld, %lld) in %zu bytes",
               (long long)a, (long long)b, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const embed_api *api = fuzz_embed_api();
    char why[256] = "";
    json_t *root = http_json_parse((const char *)data, size, why, sizeof why);
    if (!root) {
        FUZZ_CHECK(why[0], "a refused body has no message");
        return 0;
    }
    int err = SRV_OK;
    char msg[256] = "";
    json_t *out = embed_api_tokens(api, root, &err, msg, sizeof msg);
    if (!out) {
        fuzz_check_refusal(err, msg);
        json_decref(root);
        return 0;
    }
    json_t *inputs = json_object_get(root, "inputs");
    size_t n = json_is_array(inputs) ? json_array_size(inputs) : 1;
    FUZZ_CHECK(json_is_array(out) && json_array_size(out) == n, "%zu answers for %zu inputs",
               json_array_size(out), n);
    for (size_t i = 0; i < n; i++) {
        const json_t *in = json_is_array(inputs) ? json_array_get(inputs, i) : inputs;
        const json_t *toks = json_array_get(out, i);
        FUZZ_CHECK(json_is_array(toks), "answer %zu is not an array", i);
        for (size_t k = 0; k < json_array_size(toks); k++)
            check_token(api, json_array_get(toks, k), json_string_length(in));
    }
    json_decref(out);
    json_decref(root);
    return 0;
}

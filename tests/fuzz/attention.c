/* attention.c — fuzzes POST /v1/attention's decoding: request body bytes
 * through http_json_parse (nesting limit, duplicate keys, U+0000) and
 * attn_api_decode (nested and base64 tensors, shapes, limits), as the route
 * does, with the default max_batch_tokens.
 *
 * Checks: no crash, leak or undefined behaviour; every refusal is a 400 or a
 * 422 with a message (a 500 would mean the decoder failed on its own). */
#include <string.h>

#include "fuzz_util.h"
#include "server/api/attention_api.h"
#include "server/api/errors.h"
#include "server/http/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char why[256] = "";
    json_t *root = http_json_parse((const char *)data, size, why, sizeof why);
    if (!root) {
        FUZZ_CHECK(why[0], "a refused body has no message");
        return 0;
    }
    attn_api api = {.max_batch_tokens = 16384}; /* config/attnserve.json */
    int err = SRV_OK;
    char msg[256] = "";
    attn_job *job = attn_api_decode(&api, root, &err, msg, sizeof msg);
    if (job)
        FUZZ_CHECK(err == SRV_OK, "decoded, yet err %d", err);
    else
        FUZZ_CHECK((srv_error_status(err) == 400 || srv_error_status(err) == 422) && msg[0],
                   "refused with err %d, message \"%s\"", err, msg);
    attn_job_free(job);
    json_decref(root);
    return 0;
}

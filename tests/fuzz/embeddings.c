/* embeddings.c — fuzzes POST /v1/embeddings (OpenAI): body bytes through
 * http_json_parse and embed_openai_decode (input as a string, strings, token
 * ids or arrays of them; model, encoding_format, dimensions), tokenizing
 * with the real vocabulary, as the route does. Checks in embed_common.h. */
#include "embed_common.h"

static embed_job *decode(json_t *root, srv_refusal *r) {
    return embed_openai_decode(fuzz_embed_api(), root, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_embed_decode(data, size, decode);
}

/* embed.c — fuzzes POST /embed (Text Embeddings Inference): body bytes
 * through http_json_parse and tei_embed_decode (inputs as strings, token ids
 * or both; normalize, truncate, truncation_direction, prompt_name,
 * dimensions, chunking), tokenizing with the real vocabulary, as the route
 * does. The model directory's prompts are not read: prompt_name is refused
 * as for a model without them. Checks in embed_common.h. */
#include "embed_common.h"

static embed_job *decode(json_t *root, srv_refusal *r) {
    static compat_api tei;
    fuzz_embed_api();
    tei.eapi = &fuzz_api;
    return tei_embed_decode(&tei, root, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_embed_decode(data, size, decode);
}

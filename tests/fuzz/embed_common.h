/* embed_common.h — the embed_api the embeddings fuzz targets decode with:
 * the real tokenizer and model configuration of fuzz_model_dir() and the
 * limits of config/attnserve.json, loaded once. No weights are loaded and
 * nothing is scheduled: only decoding runs. */
#ifndef ATTN_FUZZ_EMBED_COMMON_H
#define ATTN_FUZZ_EMBED_COMMON_H

#include <stdatomic.h>

#include "fuzz_util.h"
#include "model/encoder.h"
#include "model/tokenizer.h"
#include "server/api/compat_api.h"
#include "server/api/embed_api.h"
#include "server/api/embed_dialect.h"
#include "server/api/errors.h"
#include "server/http/http.h"

static embed_api fuzz_api;
static encoder_desc *fuzz_model;

static inline const embed_api *fuzz_embed_api(void) {
    if (fuzz_api.tok)
        return &fuzz_api;
    char err[512];
    tok_tokenizer *tok = NULL;
    if (tok_load(&tok, fuzz_model_dir(), err, sizeof err) != TOK_OK ||
        encoder_describe(fuzz_model_dir(), &fuzz_model, err, sizeof err) != 0) {
        fprintf(stderr, "cannot load the model (run `make model` from the repository root): %s\n",
                err);
        exit(1);
    }
    fuzz_api.tok = tok;
    fuzz_api.model = encoder_desc_info(fuzz_model);
    fuzz_api.model_name = "all-MiniLM-L6-v2";
    fuzz_api.max_batch_tokens = 16384;
    fuzz_api.max_batch_requests = 64;
    fuzz_api.truncate = true;
    atomic_store(&fuzz_api.max_inputs_per_request, 256);
    atomic_store(&fuzz_api.max_document_tokens, 4096);
    return &fuzz_api;
}

/* A refusal: a 400 or a 422 (whichever code of the request's fault: a
 * malformed body, an invalid value, an empty batch, a text the tokenizer
 * cannot encode), OpenAI's 404 for a model this service does not serve, or a
 * 413 for a chunked document past max_document_tokens, with a message. By
 * status, so that a new code of the request's fault needs no change here. */
static inline void fuzz_check_refusal(int err, const char *msg) {
    const unsigned status = srv_error_status(err);
    FUZZ_CHECK((status == 400 || status == 422 || err == SRV_ENOTFOUND || err == SRV_ETOOLARGE) &&
                   msg[0],
               "refused with err %d, message \"%s\"", err, msg);
}

/* A route's decoding of a parsed body (root not stolen): the job, or NULL
 * with the refusal in r. */
typedef embed_job *(*fuzz_embed_decoder)(json_t *root, srv_refusal *r);

/* Body bytes through http_json_parse and decode; a
 * decoded job must hold what the scheduler and the model may be handed:
 * 1..max_inputs_per_request inputs (a job larger than a batch runs in
 * pieces), each of 1..max_positions tokens and at most max_batch_tokens,
 * every id in the vocabulary. */
static inline int fuzz_embed_decode(const uint8_t *data, size_t size, fuzz_embed_decoder decode) {
    const embed_api *api = fuzz_embed_api();
    char why[256] = "";
    json_t *root = http_json_parse((const char *)data, size, why, sizeof why);
    if (!root) {
        FUZZ_CHECK(why[0], "a refused body has no message");
        return 0;
    }
    srv_refusal r = {0};
    embed_job *job = decode(root, &r);
    json_decref(root);
    if (!job) {
        fuzz_check_refusal(r.err, r.msg);
        return 0;
    }
    const int32_t *cu, *ids;
    int32_t n = embed_job_inputs(job, &cu, &ids);
    /* Chunked: the documents are the request's inputs, each of at least
     * one chunk, the chunks in order within it. */
    const int32_t docs = job->doc_cu ? job->n_docs : n;
    FUZZ_CHECK(docs >= 1 && docs <= atomic_load(&api->max_inputs_per_request), "%d inputs", docs);
    for (int32_t d = 0; job->doc_cu && d < docs; d++)
        FUZZ_CHECK(job->doc_cu[d + 1] > job->doc_cu[d], "document %d has no chunk", d);
    for (int32_t i = 0; job->doc_cu && i < n; i++)
        FUZZ_CHECK(job->spans[2 * i] <= job->spans[2 * i + 1], "chunk %d: span", i);
    FUZZ_CHECK(cu[0] == 0, "cu[0] = %d", cu[0]);
    for (int32_t i = 0; i < n; i++) {
        int32_t len = cu[i + 1] - cu[i];
        FUZZ_CHECK(len >= 1 && len <= api->model->max_positions && len <= api->max_batch_tokens,
                   "input %d has %d tokens", i, len);
    }
    for (int32_t k = 0; k < cu[n]; k++)
        FUZZ_CHECK(ids[k] >= 0 && ids[k] < api->model->vocab_size, "id %d at %d", ids[k], k);
    embed_job_free(job);
    return 0;
}

#endif

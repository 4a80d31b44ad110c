/* embed_dialect.c — OpenAI's embeddings body (POST /v1/embeddings) read
 * into the one request (embed_request.h), and the answers of finished jobs
 * in OpenAI's and TEI's shapes: the one place where plain vectors and
 * chunked documents (embed_chunk.c) are answered, so that the codec and
 * the chunking do not include each other. */
#include "server/api/embed_dialect.h"

#include "server/api/embed_chunk.h"
#include "server/api/embed_request.h"
#include "server/api/errors.h"
#include "server/api/fields.h"

/* ---- the request bodies' fields ------------------------------------------------------ */

/* /v1/embeddings' fields. null is absent for every optional one (OpenAI's
 * clients send it); `input` is read by the request path, null included. */
typedef struct openai_req {
    json_t *input, *model, *user, *chunking, *stream;
    int format;
    int64_t dimensions; /* 0: every dimension */
} openai_req;

enum { FORMAT_FLOAT, FORMAT_BASE64 };

static const fld_choice FORMATS[] = {{"float", FORMAT_FLOAT}, {"base64", FORMAT_BASE64}, {NULL, 0}};

#define OPENAI(f) offsetof(openai_req, f)
static const fld_row OPENAI_ROWS[] = {
    {"input", FLD_ANY, FLD_NULL, OPENAI(input), .param = "input"},
    EMBED_MODEL_ROW(OPENAI(model)),
    {"encoding_format", FLD_ENUM, 0, OPENAI(format), .dflt = FORMAT_FLOAT, .choices = FORMATS,
     .param = "encoding_format"},
    EMBED_DIMENSIONS_ROW(OPENAI(dimensions)),
    {"user", FLD_STRING, 0, OPENAI(user), .param = "user"},
    {"chunking", FLD_ANY, 0, OPENAI(chunking), .param = "chunking"},
    {"stream", FLD_ANY, 0, OPENAI(stream), .param = "stream"},
};
static const fld_table OPENAI_TABLE = FLD_TABLE(OPENAI_ROWS, NULL, NULL);

/* POST /v1/embeddings */
embed_job *embed_openai_decode(const embed_api *api, json_t *root, embed_refusal *r) {
    *r = (embed_refusal){0};
    openai_req q;
    if (fld_decode(&OPENAI_TABLE, root, &q, api, r) != SRV_OK)
        return NULL;
    embed_request e = embed_request_of(api, q.input, "input", EMBED_INPUTS_OPENAI);
    /* Unit vectors whatever the model's modules say, as OpenAI's (and TEI's
     * /v1/embeddings) are: clients compare them by dot product. */
    e.normalize = true;
    e.base64 = q.format == FORMAT_BASE64;
    e.dimensions = q.dimensions;
    e.model = q.model;
    e.chunking = q.chunking;
    e.stream = q.stream;
    return embed_request_job(api, &e, r);
}

/* ---- answers -------------------------------------------------------------------- */

/* OpenAI's list of embedding objects, or TEI's array of vectors: each
 * vector post-processed (embed_vector_finish) and written in the job's
 * encoding. */
static void encode_plain(embed_job *job, int C, jwriter *w) {
    const bool openai = job->api == API_OPENAI;
    embed_write_list_head(w, job);
    for (int32_t i = 0; i < job->n && !w->failed; i++) {
        float *v = job->out + (size_t)i * (size_t)C;
        const size_t d = embed_vector_finish(job, v, C);
        if (i)
            jw_lit(w, ",");
        if (openai)
            embed_write_openai_item(w, i);
        embed_write_vector(w, job, v, d);
        if (openai)
            jw_lit(w, "}");
    }
    embed_write_list_tail(w, job);
}

void embed_encode(embed_job *job, int C, jwriter *w) {
    if (job->doc_cu)
        embed_chunk_encode(job, C, w);
    else
        encode_plain(job, C, w);
}

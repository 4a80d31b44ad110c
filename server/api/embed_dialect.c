/* embed_dialect.c — the embeddings bodies of OpenAI (POST /v1/embeddings) and
 * TEI (POST /embed) read into jobs, and their answers written: the one
 * place where plain inputs (embed_codec.c) and chunked documents
 * (embed_chunk.c) meet, so that neither of those includes the other. */
#include "server/api/embed_dialect.h"

#include <stdio.h>

#include "server/api/embed_chunk.h"
#include "server/api/embed_request.h"
#include "server/api/errors.h"
#include "server/api/fields.h"

/* ---- the request bodies' fields ------------------------------------------------------ */

/* /v1/embeddings' fields. null is absent for every optional one (OpenAI's
 * clients send it); `input` is read by make_job or the chunking, null
 * included. */
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

/* /embed's (embed_api_decode's EMBED_ROUTE_TEI): null is refused where a
 * boolean goes, as TEI's serde does. */
typedef struct tei_req {
    json_t *inputs, *chunking;
    bool normalize, truncate;
    int direction; /* embed_truncation */
} tei_req;

#define TEI(f) offsetof(tei_req, f)
static const fld_row TEI_ROWS[] = {
    {"inputs", FLD_ANY, FLD_NULL, TEI(inputs), .param = "inputs"},
    {"normalize", FLD_BOOL, FLD_NULL, TEI(normalize), .dflt = true},
    {"truncate", FLD_BOOL, FLD_NULL | FLD_PRESET, TEI(truncate), .param = NULL},
    EMBED_TRUNCATION_ROW(TEI(direction)),
    {"chunking", FLD_ANY, 0, TEI(chunking), .param = "chunking"},
};
static const fld_table TEI_TABLE = FLD_TABLE(TEI_ROWS, NULL, NULL);

/* POST /v1/embeddings */
static embed_job *decode_openai(const embed_api *api, json_t *root, embed_refusal *r) {
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

/* POST /embed */
static embed_job *decode_tei(const embed_api *api, json_t *root, embed_refusal *r) {
    tei_req q = {.truncate = api->truncate};
    if (fld_decode(&TEI_TABLE, root, &q, api, r) != SRV_OK)
        return NULL;
    embed_request e = embed_request_of(api, q.inputs, "inputs", EMBED_INPUTS_TEXTS);
    e.truncate = q.truncate;
    e.direction = (embed_truncation)q.direction;
    e.chunking = q.chunking;
    e.answer = API_TEI;
    e.normalize = q.normalize;
    return embed_request_job(api, &e, r);
}

/* ---- answers -------------------------------------------------------------------- */

static void encode_openai(embed_job *job, int C, jwriter *w) {
    jw_lit(w, "{\"object\":\"list\",\"data\":[");
    for (int32_t i = 0; i < job->n && !w->failed; i++) {
        float *v = job->out + (size_t)i * (size_t)C;
        const size_t d = embed_vector_finish(job, v, C);
        if (i)
            jw_lit(w, ",");
        jw_lit(w, "{\"object\":\"embedding\",\"index\":");
        jw_int(w, i);
        jw_lit(w, ",\"embedding\":");
        embed_write_vector(w, job, v, d);
        jw_lit(w, "}");
    }
    embed_write_openai_tail(w, job);
}

/* [[floats], ...]: each vector post-processed (cut to `dimensions`,
 * renormalised when normalize asked for unit vectors). */
static void encode_tei(const embed_job *job, int C, jwriter *w) {
    jw_lit(w, "[");
    for (int32_t i = 0; i < job->n && !w->failed; i++) {
        float *v = job->out + (size_t)i * (size_t)C;
        const size_t d = embed_vector_finish(job, v, C);
        if (i)
            jw_lit(w, ",");
        jw_f32s(w, v, d);
    }
    jw_lit(w, "]");
}

embed_job *embed_api_decode_refusal(const embed_api *api, embed_route route, json_t *root,
                                    embed_refusal *r) {
    *r = (embed_refusal){0};
    return route == EMBED_ROUTE_OPENAI ? decode_openai(api, root, r) : decode_tei(api, root, r);
}

embed_job *embed_api_decode(const embed_api *api, embed_route route, json_t *root, int *err,
                            char *msg, size_t msg_len) {
    embed_refusal r = {0};
    embed_job *job =
        route == EMBED_ROUTE_OPENAI ? decode_openai(api, root, &r) : decode_tei(api, root, &r);
    *err = job ? SRV_OK : r.err;
    snprintf(msg, msg_len, "%s", job ? "" : r.msg);
    return job;
}

void embed_encode(embed_job *job, int C, jwriter *w) {
    if (job->doc_cu)
        embed_chunk_encode(job, C, w);
    else if (job->api == API_OPENAI)
        encode_openai(job, C, w);
    else
        encode_tei(job, C, w);
}

/* embed_dialect.c — the embeddings bodies of OpenAI (POST /v1/embeddings) and
 * TEI (POST /embed) read into jobs, and their answers written: the one
 * place where plain inputs (embed_codec.c) and chunked documents
 * (embed_chunk.c) meet, so that neither of those includes the other. */
#include "server/api/embed_dialect.h"

#include <stdio.h>

#include "server/api/embed_chunk.h"
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
    json_t *input = q.input, *model = q.model, *chunking = q.chunking;
    const bool base64 = q.format == FORMAT_BASE64;
    if (embed_check_task(api, r) != SRV_OK)
        return NULL;
    embed_chunking ch;
    bool streamed;
    if (chunking && embed_chunking_parse(api, chunking, &ch, r) != SRV_OK)
        return NULL;
    if (embed_stream_parse(q.stream, chunking, &streamed, r) != SRV_OK)
        return NULL;
    embed_job *job = chunking ? embed_chunk_job(api, "input", input, &ch, r)
                              : embed_make_job(api, "input", input, true, api->truncate,
                                               EMBED_TRUNCATE_RIGHT, r);
    if (!job)
        return NULL;
    job->stream = streamed;
    job->api = API_OPENAI;
    /* Unit vectors whatever the model's modules say, as OpenAI's (and TEI's
     * /v1/embeddings) are: clients compare them by dot product. */
    job->normalize = true;
    job->base64 = base64;
    job->dimensions = (int)q.dimensions;
    /* A copy, charged to the budget: the request's tree is freed next. */
    job->model = model ? json_stringn(json_string_value(model), json_string_length(model))
                       : json_string(api->model_name);
    if (!job->model) {
        embed_job_release(job);
        refuse(r, SRV_EINTERNAL, "out of memory");
        return NULL;
    }
    return job;
}

/* POST /embed */
static embed_job *decode_tei(const embed_api *api, json_t *root, embed_refusal *r) {
    tei_req q = {.truncate = api->truncate};
    if (fld_decode(&TEI_TABLE, root, &q, api, r) != SRV_OK)
        return NULL;
    if (embed_check_task(api, r) != SRV_OK)
        return NULL;
    embed_chunking ch;
    if (q.chunking && embed_chunking_parse(api, q.chunking, &ch, r) != SRV_OK)
        return NULL;
    embed_job *job = q.chunking ? embed_chunk_job(api, "inputs", q.inputs, &ch, r)
                                : embed_make_job(api, "inputs", q.inputs, false, q.truncate,
                                                 (embed_truncation)q.direction, r);
    if (!job)
        return NULL;
    job->api = API_TEI;
    job->normalize = q.normalize;
    return job;
}

/* ---- answers -------------------------------------------------------------------- */

static void encode_openai(embed_job *job, int C, jwriter *w) {
    const size_t d = job->dimensions ? (size_t)job->dimensions : (size_t)C;
    jw_lit(w, "{\"object\":\"list\",\"data\":[");
    for (int32_t i = 0; i < job->n && !w->failed; i++) {
        float *v = job->out + (size_t)i * (size_t)C;
        /* A shortened vector is renormalised, as OpenAI's are. */
        if (d < (size_t)C)
            bert_l2_normalize(v, (int)d);
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

static void encode_tei(const embed_job *job, int C, jwriter *w) {
    jw_lit(w, "[");
    for (int32_t i = 0; i < job->n && !w->failed; i++) {
        if (i)
            jw_lit(w, ",");
        jw_f32s(w, job->out + (size_t)i * (size_t)C, (size_t)C);
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

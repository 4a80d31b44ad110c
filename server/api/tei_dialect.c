/* tei_dialect.c — Text Embeddings Inference's embedding routes: POST /embed
 * (and POST / and POST /invocations, TEI's route for an embedding model and
 * SageMaker's), POST /embed_all, POST /similarity and POST /decode, their
 * bodies as field tables read into the one embeddings request
 * (embed_request.h), and their answers. Errors in TEI's
 * {"error", "error_type"}. */
#include <string.h>

#include "server/api/compat_api.h"
#include "server/api/embed_dialect.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/work/membudget.h"

typedef srv_refusal refusal;

/* ---- the bodies' fields ------------------------------------------------------------------ */

/* Every TEI body here, in one struct: each table fills its own fields,
 * with the embed_api as the decoder's ctx. The inputs are read by the one
 * request path and the routes, null included where a null is answered as
 * a value of the wrong shape. */
typedef struct tei_req {
    json_t *inputs, *prompt_name, *chunking, *stream, *parameters;
    bool normalize, truncate, skip_special;
    int direction;      /* embed_truncation */
    int64_t dimensions; /* 0: every dimension */
} tei_req;

#define AT(f) offsetof(tei_req, f)
/* truncate's default is the setting (preset). */
#define TRUNCATE_ROW                                                                               \
    { "truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL }
#define PROMPT_ROW                                                                                 \
    { "prompt_name", FLD_STRING, 0, AT(prompt_name), .param = NULL }
#define INPUTS_ROW                                                                                 \
    { "inputs", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL }

static const fld_row EMBED_ROWS[] = {
    INPUTS_ROW,
    {"normalize", FLD_BOOL, 0, AT(normalize), .dflt = true},
    TRUNCATE_ROW,
    EMBED_TRUNCATION_ROW(AT(direction)),
    PROMPT_ROW,
    EMBED_DIMENSIONS_ROW(AT(dimensions)),
    {"chunking", FLD_ANY, 0, AT(chunking), .param = NULL},
    {"stream", FLD_ANY, 0, AT(stream), .param = NULL},
};
static const fld_table EMBED = FLD_TABLE(EMBED_ROWS, NULL, NULL);

static const fld_row EMBED_ALL_ROWS[] = {
    INPUTS_ROW,
    TRUNCATE_ROW,
    EMBED_TRUNCATION_ROW(AT(direction)),
    PROMPT_ROW,
};
static const fld_table EMBED_ALL = FLD_TABLE(EMBED_ALL_ROWS, NULL, NULL);

/* /similarity's inputs are read whole by the route; its parameters take
 * the text options and, as TEI's, ignore any other member. */
static const fld_row SIMILARITY_ROWS[] = {
    INPUTS_ROW,
    {"parameters", FLD_OBJECT, 0, AT(parameters), .param = NULL},
};
static const fld_table SIMILARITY = FLD_TABLE(SIMILARITY_ROWS, NULL, NULL);
static const fld_row PARAMETERS_ROWS[] = {
    TRUNCATE_ROW,
    EMBED_TRUNCATION_ROW(AT(direction)),
    PROMPT_ROW,
};
static const fld_table PARAMETERS = FLD_OPEN_TABLE(PARAMETERS_ROWS);

static const fld_row DECODE_ROWS[] = {
    {"ids", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL},
    {"skip_special_tokens", FLD_BOOL, 0, AT(skip_special), .dflt = true},
};
static const fld_table DECODE = FLD_TABLE(DECODE_ROWS, NULL, NULL);

/* The request for texts (a string, token ids, or an array of strings and id
 * arrays) with the text options q asks for: its truncation and prompt. */
static int request_of(const compat_api *c, const tei_req *q, json_t *texts, embed_request *e,
                      refusal *r) {
    *e = embed_request_of(c->eapi, texts, "inputs", EMBED_INPUTS_MIXED);
    e->answer = API_TEI;
    e->truncate = q->truncate;
    e->direction = (embed_truncation)q->direction;
    return compat_prompt(c, q->prompt_name, &e->prompt, r);
}

/* A body whose `inputs` are the texts, read with table into q and the
 * request. */
static int inputs_request(const compat_api *c, const fld_table *table, json_t *root, tei_req *q,
                          embed_request *e, refusal *r) {
    *q = (tei_req){.truncate = c->eapi->truncate};
    if (fld_decode(table, root, q, c->eapi, r) != SRV_OK)
        return r->err;
    return request_of(c, q, q->inputs, e, r);
}

/* ---- /embed, /, /invocations -------------------------------------------------------------- */

static int embed_fill(const compat_api *c, json_t *root, embed_request *e, json_t **hold,
                      refusal *r) {
    (void)hold;
    tei_req q;
    if (inputs_request(c, &EMBED, root, &q, e, r) != SRV_OK)
        return r->err;
    e->normalize = q.normalize;
    e->dimensions = q.dimensions;
    e->chunking = q.chunking;
    e->stream = q.stream;
    return SRV_OK;
}

embed_job *tei_embed_decode(const compat_api *c, json_t *root, refusal *r) {
    embed_request e;
    *r = (refusal){0};
    return embed_fill(c, root, &e, NULL, r) == SRV_OK ? embed_request_job(c->eapi, &e, r) : NULL;
}

static int tei_embed(http_request *req, void *ctx) {
    return compat_embed_route(req, ctx, embed_fill, false);
}

/* [[floats], ...], or with chunking an object per input: the embeddings
 * answer in TEI's shape (embed_dialect.h). */
static int embed_answer(http_request *req, const compat_api *c, embed_job *job) {
    const int C = c->eapi->model->output_dim;
    jwriter w;
    jw_init(&w, embed_answer_hint(job, C));
    embed_encode(job, C, &w);
    return jw_reply(req, 200, &w);
}

static int tei_embed_resumed(http_request *req, void *ctx) {
    return compat_resumed(req, ctx, embed_answer);
}

/* ---- /embed_all ---------------------------------------------------------------------------- */

static int embed_all_fill(const compat_api *c, json_t *root, embed_request *e, json_t **hold,
                          refusal *r) {
    (void)hold;
    tei_req q;
    if (inputs_request(c, &EMBED_ALL, root, &q, e, r) != SRV_OK)
        return r->err;
    e->normalize = false;
    e->hidden = true;
    return SRV_OK;
}

static int tei_embed_all(http_request *req, void *ctx) {
    return compat_embed_route(req, ctx, embed_all_fill, false);
}

/* [[[floats] per token] per input]: the last hidden state of every token,
 * the special ones included, as TEI answers. */
static int embed_all_answer(http_request *req, const compat_api *c, embed_job *job) {
    const size_t C = (size_t)c->eapi->model->hidden_size;
    const int32_t *cu, *ids;
    const int32_t n = embed_job_inputs(job, &cu, &ids);
    jwriter w;
    jw_init(&w, (size_t)cu[n] * (13 * C + 2) + 2 * (size_t)n + 2);
    jw_lit(&w, "[");
    for (int32_t i = 0; i < n && !w.failed; i++) {
        if (i)
            jw_lit(&w, ",");
        jw_lit(&w, "[");
        for (int32_t t = cu[i]; t < cu[i + 1]; t++) {
            if (t > cu[i])
                jw_lit(&w, ",");
            jw_f32s(&w, job->hidden + (size_t)t * C, C);
        }
        jw_lit(&w, "]");
    }
    jw_lit(&w, "]");
    return jw_reply(req, 200, &w);
}

static int tei_embed_all_resumed(http_request *req, void *ctx) {
    return compat_resumed(req, ctx, embed_all_answer);
}

/* ---- /similarity ---------------------------------------------------------------------------- */

/* The source sentence and the others, in one array (*texts, freed after
 * the job is made), as the request's inputs. */
static int similarity_fill(const compat_api *c, json_t *root, embed_request *e, json_t **texts,
                           refusal *r) {
    tei_req q = {.truncate = c->eapi->truncate};
    if (fld_decode(&SIMILARITY, root, &q, c->eapi, r) != SRV_OK)
        return r->err;
    json_t *source = json_object_get(q.inputs, "source_sentence");
    json_t *sentences = json_object_get(q.inputs, "sentences");
    if (!json_is_object(q.inputs) || !json_is_string(source) || !json_is_array(sentences))
        return refuse(r, SRV_EBADREQUEST,
                      "inputs must be {\"source_sentence\": string, \"sentences\": [string, ...]}");
    if (json_array_size(sentences) == 0)
        return refuse(r, SRV_EEMPTY, "`inputs.sentences` cannot be empty");
    if (q.parameters && fld_decode(&PARAMETERS, q.parameters, &q, c->eapi, r) != SRV_OK)
        return r->err;
    if (request_of(c, &q, NULL, e, r) != SRV_OK)
        return r->err;
    if (!(*texts = json_array()) || json_array_append(*texts, source) != 0 ||
        json_array_extend(*texts, sentences) != 0)
        return refuse(r, SRV_EMEMORY, "out of memory");
    for (size_t i = 1; i < json_array_size(*texts); i++)
        if (!json_is_string(json_array_get(*texts, i)))
            return refuse(r, SRV_EBADREQUEST, "inputs.sentences[%zu] must be a string", i - 1);
    e->input = *texts;
    e->normalize = true;
    e->answer = API_TEI_SIMILARITY;
    return SRV_OK;
}

static int tei_similarity(http_request *req, void *ctx) {
    return compat_embed_route(req, ctx, similarity_fill, false);
}

/* The cosine of the source sentence's vector with each other's: both are
 * unit vectors, so their dot product. */
static int similarity_answer(http_request *req, const compat_api *c, embed_job *job) {
    const size_t C = (size_t)c->eapi->model->output_dim;
    json_t *out = json_array();
    for (int32_t i = 1; out && i < job->n; i++) {
        double dot = 0;
        for (size_t k = 0; k < C; k++)
            dot += (double)job->out[k] * job->out[(size_t)i * C + k];
        if (json_array_append_new(out, json_real(dot)) != 0) {
            json_decref(out);
            out = NULL;
        }
    }
    return compat_reply(req, out);
}

static int tei_similarity_resumed(http_request *req, void *ctx) {
    return compat_resumed(req, ctx, similarity_answer);
}

/* ---- / and /invocations -------------------------------------------------------------------- */

/* TEI's route for the served model's task: /embed's body, or /similarity's
 * (`inputs` an object, as huggingface_hub's sentence_similarity posts it,
 * `parameters` beside it), which TEI's root answers when its task is
 * sentence-similarity. The job's answer shape tells the resume which. */
static int root_fill(const compat_api *c, json_t *root, embed_request *e, json_t **hold,
                     refusal *r) {
    return json_is_object(json_object_get(root, "inputs")) ? similarity_fill(c, root, e, hold, r)
                                                           : embed_fill(c, root, e, hold, r);
}

static int tei_root(http_request *req, void *ctx) {
    return compat_embed_route(req, ctx, root_fill, false);
}

static int root_answer(http_request *req, const compat_api *c, embed_job *job) {
    return job->api == API_TEI_SIMILARITY ? similarity_answer(req, c, job)
                                          : embed_answer(req, c, job);
}

static int tei_root_resumed(http_request *req, void *ctx) {
    return compat_resumed(req, ctx, root_answer);
}

/* ---- /decode ------------------------------------------------------------------------------- */

static json_t *decode_answer(http_request *req, const compat_api *c, json_t *root, refusal *r) {
    (void)req;
    tei_req q;
    if (fld_decode(&DECODE, root, &q, c->eapi, r) != SRV_OK)
        return NULL;
    json_t *ids = q.inputs;
    if (!json_is_array(ids)) {
        refuse(r, SRV_EBADREQUEST,
               "ids must be a non-empty array of token ids or of arrays of token ids");
        return NULL;
    }
    if (json_array_size(ids) == 0) {
        refuse(r, SRV_EEMPTY, "`ids` cannot be empty");
        return NULL;
    }
    const bool batch = json_is_array(json_array_get(ids, 0));
    const size_t n = batch ? json_array_size(ids) : 1;
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++) {
        json_t *one = batch ? json_array_get(ids, i) : ids;
        json_t *text = json_is_array(one) ? compat_decode_ids(c, one, q.skip_special, r) : NULL;
        if (!text && !r->err)
            refuse(r, SRV_EBADREQUEST, "ids[%zu] must be an array of token ids", i);
        if (!text || json_array_append_new(out, text) != 0) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

static int tei_decode(http_request *req, void *ctx) {
    return compat_json_route(req, ctx, decode_answer);
}

/* ---- registration ----------------------------------------------------------------------- */

int tei_dialect_register(compat_api *c, routes *t) {
    const http_error_shape TEI = HTTP_ERRORS_TEI;
    const http_route mine[] = {
        {"POST", "/embed", true, HTTP_AUTH_KEY, tei_embed, tei_embed_resumed, c, TEI},
        {"POST", "/", true, HTTP_AUTH_KEY, tei_root, tei_root_resumed, c, TEI},
        {"POST", "/invocations", true, HTTP_AUTH_KEY, tei_root, tei_root_resumed, c, TEI},
        {"POST", "/embed_all", true, HTTP_AUTH_KEY, tei_embed_all, tei_embed_all_resumed, c, TEI},
        {"POST", "/similarity", true, HTTP_AUTH_KEY, tei_similarity, tei_similarity_resumed, c,
         TEI},
        {"POST", "/decode", true, HTTP_AUTH_KEY, tei_decode, NULL, c, TEI},
    };
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) {
        /* A classifier's / and /invocations are score_api's, as TEI routes
         * them by the model's task. */
        const bool dflt =
            strcmp(mine[i].path, "/") == 0 || strcmp(mine[i].path, "/invocations") == 0;
        if (dflt && (c->eapi->model->task != ENCODER_TASK_EMBED || c->no_root))
            continue;
        if (routes_add(t, mine[i]) != 0)
            return -1;
    }
    return 0;
}

/* cohere_embed.c — Cohere's embed (cohere_embed.h): its two bodies as a
 * field table each, their texts made into an embeddings job (embed_codec.h)
 * with the prompt of their input_type, and the answer written straight from
 * the job's vectors in every embedding type asked for. */
#include "server/api/cohere_embed.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/api/embed_api.h"
#include "server/api/embed_request.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/jwriter.h"
#include "server/work/job.h"
#include "server/work/membudget.h"

typedef srv_refusal refusal;

/* ---- quantization, as sentence-transformers' quantize_embeddings ---------------------- */

/* Its int8 buckets for ranges [start, start + 2] in every dimension: 255
 * steps of (2 / 255) from -1, each value's bucket floor((x - start) / step)
 * clipped to 0..255, in float32 arithmetic as numpy does it on float32
 * arrays, so the buckets are the same bit for bit. */
static uint8_t bucket(float x) {
    const float start = -1.0f, step = (1.0f - start) / 255.0f;
    const float q = floorf((x - start) / step);
    return q <= 0.0f ? 0 : q >= 255.0f ? 255 : (uint8_t)q; /* NaN: bucket 0 */
}

void cohere_quantize_uint8(const float *v, size_t d, uint8_t *out) {
    for (size_t k = 0; k < d; k++)
        out[k] = bucket(v[k]);
}

void cohere_quantize_int8(const float *v, size_t d, int8_t *out) {
    for (size_t k = 0; k < d; k++)
        out[k] = (int8_t)((int)bucket(v[k]) - 128);
}

/* numpy.packbits(v > 0): the first value in the high bit. */
void cohere_pack_ubinary(const float *v, size_t d, uint8_t *out) {
    for (size_t b = 0; b < (d + 7) / 8; b++) {
        unsigned byte = 0;
        for (size_t k = 0; k < 8; k++)
            byte = byte << 1 | (8 * b + k < d && v[8 * b + k] > 0.0f);
        out[b] = (uint8_t)byte;
    }
}

void cohere_pack_binary(const float *v, size_t d, int8_t *out) {
    cohere_pack_ubinary(v, d, (uint8_t *)out);
    for (size_t b = 0; b < (d + 7) / 8; b++)
        out[b] = (int8_t)((int)((uint8_t *)out)[b] - 128);
}

/* ---- the request bodies' fields ------------------------------------------------------ */

enum { T_FLOAT, T_INT8, T_UINT8, T_BINARY, T_UBINARY, T_BASE64, T_COUNT };
static const char *const TYPE_NAMES[T_COUNT] = {"float",  "int8",    "uint8",
                                                "binary", "ubinary", "base64"};

enum {
    INPUT_NONE,
    INPUT_DOCUMENT,
    INPUT_QUERY,
    INPUT_CLASSIFICATION,
    INPUT_CLUSTERING,
    INPUT_IMAGE
};
static const fld_choice INPUT_TYPES[] = {{"search_document", INPUT_DOCUMENT},
                                         {"search_query", INPUT_QUERY},
                                         {"classification", INPUT_CLASSIFICATION},
                                         {"clustering", INPUT_CLUSTERING},
                                         {"image", INPUT_IMAGE},
                                         {NULL, 0}};

enum { TRUNC_END, TRUNC_START, TRUNC_NONE };
static const fld_choice TRUNCATES[] = {
    {"END", TRUNC_END}, {"START", TRUNC_START}, {"NONE", TRUNC_NONE},
    {"end", TRUNC_END}, {"start", TRUNC_START}, {"none", TRUNC_NONE},
    {NULL, 0}};

typedef struct cohere_req {
    json_t *texts, *inputs, *images, *model, *types, *max_tokens;
    int input_type, truncate;
    int64_t dimensions; /* 0: every dimension */
    int64_t priority;   /* read, not used: requests run in arrival order */
} cohere_req;

/* max_tokens would cut below max_seq_length: refused rather than ignored,
 * so a client never gets vectors of more text than it asked for. */
static int max_tokens_check(const void *api, const json_t *v, refusal *r) {
    (void)v;
    return refuse(r, SRV_EINVALID,
                  "max_tokens is not supported: texts are cut at the model's max_seq_length (%d "
                  "tokens) as `truncate` says",
                  (int)embed_max_seq_length(api));
}

#define AT(f) offsetof(cohere_req, f)
#define ANY_ROW(name, slot)                                                                        \
    { name, FLD_ANY, 0, AT(slot), .param = name }
#define INPUT_TYPE_ROW(flags)                                                                      \
    {                                                                                              \
        "input_type", FLD_ENUM, (flags), AT(input_type),                                           \
            .dflt = INPUT_NONE, .choices = INPUT_TYPES, .param = "input_type"                      \
    }
#define TRUNCATE_ROW                                                                               \
    {                                                                                              \
        "truncate", FLD_ENUM, 0, AT(truncate), .dflt = TRUNC_END, .choices = TRUNCATES,            \
                                               .param = "truncate"                                 \
    }

static const fld_row V1_ROWS[] = {
    ANY_ROW("texts", texts), ANY_ROW("images", images),         EMBED_MODEL_ROW(AT(model)),
    INPUT_TYPE_ROW(0),       ANY_ROW("embedding_types", types), TRUNCATE_ROW,
};
static const fld_table V1 = FLD_TABLE(V1_ROWS, NULL, NULL);

/* v2 requires input_type, as Cohere's does. */
static const fld_row V2_ROWS[] = {
    ANY_ROW("texts", texts),
    ANY_ROW("inputs", inputs),
    ANY_ROW("images", images),
    EMBED_MODEL_ROW(AT(model)),
    INPUT_TYPE_ROW(FLD_REQUIRED),
    ANY_ROW("embedding_types", types),
    TRUNCATE_ROW,
    {"output_dimension", FLD_INT, 0, AT(dimensions), .bounds = embed_dimension_bounds,
     .range = FLD_RANGE_MODEL, .param = "output_dimension"},
    {"max_tokens", FLD_ANY, 0, AT(max_tokens), .param = "max_tokens", .check = max_tokens_check},
    {"priority", FLD_INT, 0, AT(priority), .min = INT64_MIN, .max = INT64_MAX, .param = "priority"},
};
static const fld_table V2 = FLD_TABLE(V2_ROWS, NULL, NULL);

/* ---- decoding ------------------------------------------------------------------------ */

typedef struct cohere_job {
    embed_job e;     /* first: what job_submit and the service see */
    bool v2;         /* the answer's version */
    bool by_type;    /* v1: embeddings as an object by type, not a list of floats */
    unsigned types;  /* 1 << T_*: the embedding types to answer */
    json_t *texts;   /* the texts, echoed (copies: the request's tree is freed) */
    int32_t n_texts; /* how many of them */
} cohere_job;

static void cohere_job_release(void *p) {
    cohere_job *j = p;
    if (!j)
        return;
    json_decref(j->texts);
    embed_job_release(&j->e);
}

/* embedding_types as a set; absent, null or empty: float. */
static int types_of(const json_t *v, unsigned *types, refusal *r) {
    *types = 0;
    r->param = "embedding_types";
    if (v && !json_is_array(v))
        return refuse(r, SRV_EBADREQUEST, "embedding_types must be an array of strings");
    for (size_t i = 0; v && i < json_array_size(v); i++) {
        const json_t *t = json_array_get(v, i);
        int k = 0;
        while (k < T_COUNT &&
               !(json_is_string(t) && strcmp(json_string_value(t), TYPE_NAMES[k]) == 0))
            k++;
        if (k == T_COUNT)
            return refuse(r, SRV_EBADREQUEST,
                          "embedding_types[%zu] must be one of float, int8, uint8, binary, "
                          "ubinary, base64",
                          i);
        *types |= 1u << k;
    }
    if (!*types)
        *types = 1u << T_FLOAT;
    r->param = NULL;
    return SRV_OK;
}

/* The texts of v2's `inputs`: each input one content part of type "text"
 * (this service embeds text, one vector per input). */
static int inputs_texts(const json_t *inputs, json_t *out, refusal *r) {
    r->param = "inputs";
    if (!json_is_array(inputs))
        return refuse(r, SRV_EBADREQUEST, "inputs must be an array of {\"content\": [...]}");
    for (size_t i = 0; i < json_array_size(inputs); i++) {
        const json_t *content = json_object_get(json_array_get(inputs, i), "content");
        const json_t *part = json_array_get(content, 0);
        const json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_array(content) || json_array_size(content) != 1 || !json_is_string(type))
            return refuse(r, SRV_EBADREQUEST,
                          "inputs[%zu].content must hold one part, {\"type\": \"text\", "
                          "\"text\": string}: one vector per input, of one text",
                          i);
        if (strcmp(json_string_value(type), "text") != 0)
            return refuse(r, SRV_EINVALID, "inputs[%zu]: the served model embeds text, not %.32s",
                          i, json_string_value(type));
        if (!json_is_string(text))
            return refuse(r, SRV_EBADREQUEST, "inputs[%zu].content[0].text must be a string", i);
        if (json_array_append_new(
                out, json_stringn(json_string_value(text), json_string_length(text))) != 0)
            return refuse(r, SRV_EMEMORY, "out of memory");
    }
    r->param = NULL;
    return SRV_OK;
}

/* The texts to echo, copied out of the body: `texts`, or v2's `inputs`. */
static json_t *texts_of(const cohere_req *q, bool v2, refusal *r) {
    if (q->images && !(json_is_array(q->images) && json_array_size(q->images) == 0)) {
        r->param = "images";
        refuse(r, SRV_EINVALID, "the served model embeds text, not images");
        return NULL;
    }
    if (v2 && q->texts && q->inputs) {
        refuse(r, SRV_EBADREQUEST, "the body has both `texts` and `inputs`: send one");
        return NULL;
    }
    json_t *out = json_array();
    if (!out) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    int rc = SRV_OK;
    if (q->inputs) {
        rc = inputs_texts(q->inputs, out, r);
    } else if (!q->texts) {
        rc = refuse(r, SRV_EBADREQUEST,
                    v2 ? "missing field \"texts\" (or \"inputs\")" : "missing field \"texts\"");
    } else if (!json_is_array(q->texts)) {
        r->param = "texts";
        rc = refuse(r, SRV_EBADREQUEST, "texts must be an array of strings");
    }
    for (size_t i = 0; rc == SRV_OK && !q->inputs && i < json_array_size(q->texts); i++) {
        const json_t *t = json_array_get(q->texts, i);
        r->param = "texts";
        rc = json_is_string(t) ? SRV_OK
                               : refuse(r, SRV_EBADREQUEST, "texts[%zu] must be a string", i);
        if (rc == SRV_OK &&
            json_array_append_new(out, json_stringn(json_string_value(t), json_string_length(t))))
            rc = refuse(r, SRV_EMEMORY, "out of memory");
    }
    if (rc != SRV_OK) {
        json_decref(out);
        return NULL;
    }
    r->param = NULL;
    return out;
}

/* The prompt of input_type in the model's config_sentence_transformers.json,
 * else its default prompt (as sentence-transformers applies with no prompt
 * named); NULL: none. */
static const char *prompt_of(const compat_api *c, int input_type) {
    static const char *const names[][2] = {
        [INPUT_DOCUMENT] = {"document", "passage"},
        [INPUT_QUERY] = {"query", NULL},
        [INPUT_CLASSIFICATION] = {"classification", NULL},
        [INPUT_CLUSTERING] = {"clustering", NULL},
    };
    for (size_t k = 0; c->prompts && input_type < INPUT_IMAGE && k < 2; k++) {
        const char *name = names[input_type][k];
        const json_t *p = name ? json_object_get(c->prompts, name) : NULL;
        if (p)
            return json_string_value(p);
    }
    return c->default_prompt;
}

static cohere_job *decode(const compat_api *c, json_t *root, bool v2, refusal *r) {
    const embed_api *api = c->eapi;
    cohere_req q = {0}; /* v1 has no inputs, output_dimension or max_tokens */
    unsigned types;
    if (fld_decode(v2 ? &V2 : &V1, root, &q, api, r) != SRV_OK ||
        types_of(q.types, &types, r) != SRV_OK || embed_check_task(api, r) != SRV_OK)
        return NULL;
    if (q.input_type == INPUT_IMAGE) {
        r->param = "input_type";
        refuse(r, SRV_EINVALID, "the served model embeds text, not images");
        return NULL;
    }
    json_t *texts = texts_of(&q, v2, r);
    if (!texts)
        return NULL;
    /* The model's prompt of input_type before each text; unit vectors, so
     * the quantization ranges [-1, 1] hold; a cut vector renormalised. */
    embed_request e = embed_request_of(api, texts, "texts", EMBED_INPUTS_TEXTS);
    e.prompt = prompt_of(c, q.input_type);
    e.truncate = q.truncate != TRUNC_NONE;
    e.direction = q.truncate == TRUNC_START ? EMBED_TRUNCATE_LEFT : EMBED_TRUNCATE_RIGHT;
    e.normalize = true;
    e.dimensions = q.dimensions;
    embed_job *job = embed_request_job(api, &e, r);
    cohere_job *j = job ? (cohere_job *)embed_job_grow(job, sizeof *j, r) : NULL;
    if (!j) {
        json_decref(texts);
        return NULL;
    }
    j->v2 = v2;
    j->by_type = v2 || q.types;
    j->types = types;
    j->texts = texts;
    j->n_texts = (int32_t)json_array_size(texts);
    return j;
}

/* ---- answers ------------------------------------------------------------------------- */

/* One vector as its type asks; scratch holds d bytes. */
static void write_vector(jwriter *w, int type, const float *v, size_t d, uint8_t *scratch) {
    size_t n = d;
    switch (type) {
    case T_FLOAT:
        jw_f32s(w, v, d);
        return;
    case T_BASE64:
        jw_f32_base64(w, v, d);
        return;
    case T_UINT8:
        cohere_quantize_uint8(v, d, scratch);
        break;
    case T_INT8:
        cohere_quantize_int8(v, d, (int8_t *)scratch);
        break;
    case T_UBINARY:
        cohere_pack_ubinary(v, d, scratch);
        n = (d + 7) / 8;
        break;
    default:
        cohere_pack_binary(v, d, (int8_t *)scratch);
        n = (d + 7) / 8;
    }
    const bool is_signed = type == T_INT8 || type == T_BINARY;
    jw_lit(w, "[");
    for (size_t k = 0; k < n; k++) {
        if (k)
            jw_lit(w, ",");
        jw_int(w, is_signed ? (int64_t)(int8_t)scratch[k] : (int64_t)scratch[k]);
    }
    jw_lit(w, "]");
}

static void write_embeddings(jwriter *w, const cohere_job *j, size_t d, size_t C) {
    uint8_t *scratch = membudget_malloc(d ? d : 1);
    if (!scratch) {
        w->failed = true;
        return;
    }
    if (j->by_type)
        jw_lit(w, "{");
    bool first = true;
    for (int t = 0; t < T_COUNT; t++) {
        if (!(j->types & (1u << t)))
            continue;
        if (j->by_type) {
            if (!first)
                jw_lit(w, ",");
            jw_str(w, TYPE_NAMES[t], strlen(TYPE_NAMES[t]));
            jw_lit(w, ":");
        }
        first = false;
        jw_lit(w, "[");
        for (int32_t i = 0; i < j->e.n && !w->failed; i++) {
            if (i)
                jw_lit(w, ",");
            write_vector(w, t, j->e.out + (size_t)i * C, d, scratch);
        }
        jw_lit(w, "]");
    }
    if (j->by_type)
        jw_lit(w, "}");
    membudget_free(scratch);
}

/* {"id", "embeddings", "texts", "meta", "response_type"}. */
static void encode(cohere_job *j, size_t C, jwriter *w) {
    /* Each vector finished once, before the types each write it. */
    size_t d = C;
    for (int32_t i = 0; i < j->e.n; i++)
        d = embed_vector_finish(&j->e, j->e.out + (size_t)i * C, (int)C);
    char id[JW_ID_LEN];
    jw_make_id(id, "embed");
    jw_lit(w, "{\"id\":");
    jw_str(w, id, strlen(id));
    jw_lit(w, ",\"embeddings\":");
    write_embeddings(w, j, d, C);
    jw_lit(w, ",\"texts\":[");
    for (int32_t i = 0; i < j->n_texts && !w->failed; i++) {
        const json_t *t = json_array_get(j->texts, (size_t)i);
        if (i)
            jw_lit(w, ",");
        jw_str(w, json_string_value(t), json_string_length(t));
    }
    jw_lit(w, "],\"meta\":{\"api_version\":{\"version\":");
    if (j->v2)
        jw_lit(w, "\"2\"");
    else
        jw_lit(w, "\"1\"");
    jw_lit(w, "},\"billed_units\":{\"input_tokens\":");
    jw_int(w, j->e.cu[j->e.n]);
    jw_lit(w, "}},\"response_type\":");
    if (j->by_type)
        jw_lit(w, "\"embeddings_by_type\"}");
    else
        jw_lit(w, "\"embeddings_floats\"}");
}

/* ---- the routes ---------------------------------------------------------------------- */

static int handle(http_request *req, compat_api *c, bool v2) {
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    if (c->peers) {
        compat_api *to = c->peers[embed_route_index(c->eapi, root, c->eapi->group)];
        if (to != c)
            http_set_ctx(req, c = to);
    }
    refusal r = {0};
    cohere_job *j = decode(c, root, v2, &r);
    http_body_json_free(req, root);
    if (!j)
        return http_reply_refusal(req, &r);
    const int64_t timeout_ms = atomic_load(&c->eapi->request_timeout_ms);
    return job_submit(req, &j->e.base, c->eapi->sched, timeout_ms, cohere_job_release);
}

static int embed_v1(http_request *req, void *ctx) {
    return handle(req, ctx, false);
}

static int embed_v2(http_request *req, void *ctx) {
    return handle(req, ctx, true);
}

static int resumed(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    cohere_job *j = http_user(req);
    embed_api_stamp(req, c->eapi, &j->e);
    if (j->e.base.err != SRV_OK)
        return http_reply_error(req, j->e.base.err, "%s", j->e.base.why);
    if (!j->e.base.ran)
        return http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
    const size_t C = (size_t)c->eapi->model->output_dim;
    /* Every type's text: at most 13 bytes a float, 5 an int. */
    size_t per = 0;
    for (int t = 0; t < T_COUNT; t++)
        per += j->types & (1u << t) ? (t == T_BASE64 ? JW_BASE64_LEN(C) : 13 * C) + 4 : 0;
    jwriter w;
    jw_init(&w, (size_t)j->e.n * per + 256);
    encode(j, C, &w);
    return jw_reply(req, 200, &w);
}

int cohere_embed_register(compat_api *c, routes *t) {
    const http_route mine[] = {
        {"POST", "/v1/embed", true, HTTP_AUTH_KEY, embed_v1, resumed, c, HTTP_ERRORS_OPENAI},
        {"POST", "/v2/embed", true, HTTP_AUTH_KEY, embed_v2, resumed, c, HTTP_ERRORS_OPENAI},
    };
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (routes_add(t, mine[i]) != 0)
            return -1;
    return 0;
}

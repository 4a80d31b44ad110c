/* embed_api.c — decoding embedding requests, tokenizing them, running every
 * embedding request of a batch through one packed forward, encoding the
 * answers; and /tokenize.
 *
 * A request becomes an embed_job: its inputs' token ids back to back with
 * their cu_seqlens, an output of one vector per input, and an embedded
 * batch_job. The I/O thread decodes, tokenizes and submits; the compute
 * thread packs the jobs of a batch, runs one engine forward and copies each
 * job's vectors back; the loop thread's done callback hands the job back to
 * the I/O thread, which encodes the answer. */
#include "embed_api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "errors.h"
#include "membudget.h"
#include "metrics.h"
#include "verify.h"

/* ---- jobs --------------------------------------------------------------------- */

enum { API_OPENAI, API_TEI };

typedef struct embed_job {
    batch_job base; /* first: the scheduler's request, kind, HTTP request, outcome */
    int api;        /* API_OPENAI or API_TEI: the answer's shape */
    int32_t n;      /* inputs */
    int32_t *cu;    /* (n + 1) token offsets of each input in ids */
    int32_t *ids;   /* (cu[n]) */
    size_t ids_cap; /* ints allocated for ids */
    float *out;     /* (n, C) pooled vectors, raw until run_batch */
    bool normalize; /* run_batch L2-normalises each vector */
    int dimensions; /* OpenAI: keep the first this many (0: all) */
    bool base64;    /* OpenAI encoding_format */
    json_t *model;  /* OpenAI: the name to echo */
} embed_job;

/* Jobs are charged to the request-memory budget (membudget.h) while they
 * live: allocated in the handler's scope, released here. */
static void job_free(void *p) {
    embed_job *job = p;
    if (!job)
        return;
    membudget_free(job->cu);
    membudget_free(job->ids);
    membudget_free(job->out);
    json_decref(job->model);
    membudget_free(job);
}

/* ---- the compute side ------------------------------------------------------- */

struct embed_service {
    srv_engine *engine; /* runs the forward, with the attention backend in force */
    int C, layers;
    int32_t max_tokens, max_seqs;
    int32_t *ids; /* (max_tokens) the packed batch */
    int32_t *cu;  /* (max_seqs + 1) */
    float *out;   /* (max_seqs, C) */
    size_t total_bytes;
    /* Shadow verification and trace (issue 7): compute thread only. */
    verifier *verify;
    const attn_backend *tap_backend; /* the running batch's, for the tap */
    uint64_t tap_batch;
    embed_batch_info last;
};

embed_service *embed_service_create(srv_engine *engine, int32_t max_batch_tokens,
                                    int32_t max_batch_requests, char *err, size_t err_len) {
    embed_service *svc = calloc(1, sizeof *svc);
    if (!svc) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    const bert_config *m = engine_model(srv_engine_instance(engine));
    svc->engine = engine;
    svc->C = m->hidden_size;
    svc->layers = m->num_layers;
    svc->max_tokens = max_batch_tokens;
    svc->max_seqs = max_batch_requests;
    svc->ids = malloc((size_t)max_batch_tokens * sizeof *svc->ids);
    svc->cu = malloc(((size_t)max_batch_requests + 1) * sizeof *svc->cu);
    svc->out = malloc((size_t)max_batch_requests * (size_t)svc->C * sizeof *svc->out);
    svc->total_bytes = (size_t)max_batch_tokens * sizeof *svc->ids +
                       ((size_t)max_batch_requests + 1) * sizeof *svc->cu +
                       (size_t)max_batch_requests * (size_t)svc->C * sizeof *svc->out;
    if (!svc->ids || !svc->cu || !svc->out) {
        snprintf(err, err_len, "cannot allocate %zu bytes of batch buffers", svc->total_bytes);
        embed_service_destroy(svc);
        return NULL;
    }
    return svc;
}

void embed_service_destroy(embed_service *svc) {
    if (!svc)
        return;
    free(svc->ids);
    free(svc->cu);
    free(svc->out);
    free(svc);
}

size_t embed_service_workspace_bytes(const embed_service *svc) {
    return svc->total_bytes;
}

void embed_service_set_verifier(embed_service *svc, verifier *v) {
    svc->verify = v;
}

const embed_batch_info *embed_service_last_batch(const embed_service *svc) {
    return &svc->last;
}

/* The engine's attention tap: on the compute thread, right after the drawn layer's
 * attention. */
static void tap(const attn_problem *p, int layer, void *ctx) {
    embed_service *svc = ctx;
    if (verify_capture(svc->verify, p, svc->tap_backend, layer, svc->tap_batch))
        svc->last.verified_layer = layer;
}

static embed_job *job_of(const sched_req *req) {
    return SCHED_CONTAINER_OF(req, embed_job, base.sreq);
}

int embed_service_run_batch(const sched_batch *b, void *ctx) {
    embed_service *svc = ctx;
    int32_t B = 0, T = 0;
    svc->cu[0] = 0;
    for (int32_t i = 0; i < b->n_reqs; i++) {
        embed_job *job = job_of(b->reqs[i]);
        const int32_t tokens = job->cu[job->n];
        /* The scheduler's limits keep every batch within the buffers; a
         * request that would not fit is a bug, answered 500 rather than
         * overrun. */
        if (T + tokens > svc->max_tokens || B + job->n > svc->max_seqs) {
            job->base.err = SRV_EINTERNAL;
            snprintf(job->base.why, sizeof job->base.why, "batch exceeds the model buffers");
            continue;
        }
        memcpy(svc->ids + T, job->ids, (size_t)tokens * sizeof *svc->ids);
        for (int32_t k = 0; k < job->n; k++)
            svc->cu[B + k + 1] = T + job->cu[k + 1];
        B += job->n;
        T += tokens;
    }
    char why[256] = "";
    svc->last = (embed_batch_info){.sequences = B, .tokens = T, .verified_layer = -1};
    /* A sampled batch has one layer's attention, drawn at random, copied by
     * the tap right after that layer's forward. Vectors leave the forward
     * raw: each request chooses its normalisation. */
    engine_hook hook = {.layer = -1};
    if (B && verify_sample(svc->verify)) {
        svc->tap_batch = b->id;
        hook = (engine_hook){
            .layer = verify_pick_layer(svc->verify, svc->layers), .fn = tap, .ctx = svc};
    }
    const engine_batch eb = {
        .ids = svc->ids, .cu_seqlens = svc->cu, .batch = B, .out = svc->out, .raw = 1};
    const attn_backend *backend = srv_engine_backend(svc->engine);
    /* The tap names the backend the forward runs with, read before it. */
        svc->tap_backend = backend;
    int rc = B ? srv_engine_forward(svc->engine, &eb, &hook, &backend, why, sizeof why) : ENGINE_OK;
    if (B && rc == ENGINE_OK)
        svc->last.stages = srv_engine_last_run(svc->engine)->stages;
    const size_t C = (size_t)svc->C;
    int32_t seq = 0;
    for (int32_t i = 0; i < b->n_reqs; i++) {
        embed_job *job = job_of(b->reqs[i]);
        if (job->base.err != SRV_OK)
            continue;
        if (rc != ENGINE_OK) {
            job->base.err = SRV_EINTERNAL;
            snprintf(job->base.why, sizeof job->base.why, "model forward failed: %s", why);
            continue;
        }
        memcpy(job->out, svc->out + (size_t)seq * C, (size_t)job->n * C * sizeof *job->out);
        seq += job->n;
        if (job->normalize)
            for (int32_t k = 0; k < job->n; k++)
                bert_l2_normalize(job->out + (size_t)k * C, (int)C);
        job->base.ran = backend;
        metrics_embeddings((uint64_t)job->n, (uint64_t)job->cu[job->n]);
    }
    return 0;
}

/* ---- decoding ----------------------------------------------------------------- */

typedef struct refusal {
    int err;
    char msg[256];
} refusal;

static int refuse(refusal *r, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(refusal *r, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->err = err;
    return err;
}

/* What `input` / `inputs` holds. */
enum { IN_TEXTS, IN_IDS };

/* Checks the shape of the inputs: a string, or a non-empty array of strings;
 * with allow_ids also an array of token ids or an array of such arrays.
 * Sets *kind and *n (inputs), and *list: the array of inputs, or NULL when
 * `in` itself is the one input. */
static int classify(const embed_api *api, const char *field, json_t *in, bool allow_ids, int *kind,
                    int32_t *n, json_t **list, refusal *r) {
    const char *allowed = allow_ids ? "a string, an array of strings, an array of token ids or "
                                      "an array of arrays of token ids"
                                    : "a string or an array of strings";
    *list = NULL;
    if (!in)
        return refuse(r, SRV_EBADREQUEST, "missing field \"%s\"", field);
    if (json_is_string(in)) {
        *kind = IN_TEXTS;
        *n = 1;
        return SRV_OK;
    }
    if (!json_is_array(in))
        return refuse(r, SRV_EBADREQUEST, "%s must be %s", field, allowed);
    size_t size = json_array_size(in);
    if (size == 0)
        return refuse(r, SRV_EBADREQUEST, "%s is an empty array", field);
    json_t *first = json_array_get(in, 0);
    if (allow_ids && json_is_integer(first)) {
        *kind = IN_IDS;
        *n = 1;
        return SRV_OK;
    }
    const int64_t max_inputs = atomic_load(&api->max_inputs_per_request);
    if ((int64_t)size > max_inputs)
        return refuse(r, SRV_EINVALID, "%s has %zu inputs; max_inputs_per_request is %lld", field,
                      size, (long long)max_inputs);
    *kind = allow_ids && json_is_array(first) ? IN_IDS : IN_TEXTS;
    for (size_t i = 0; i < size; i++) {
        json_t *x = json_array_get(in, i);
        if (*kind == IN_TEXTS ? !json_is_string(x) : !json_is_array(x))
            return refuse(r, SRV_EBADREQUEST, "%s[%zu]: %s must be %s", field, i, field, allowed);
    }
    *n = (int32_t)size;
    *list = in;
    return SRV_OK;
}

/* Room in job->ids for more ints after the first have. */
static int reserve(embed_job *job, size_t have, size_t more, refusal *r) {
    if (have + more <= job->ids_cap)
        return SRV_OK;
    size_t cap = job->ids_cap ? job->ids_cap : 256;
    while (cap < have + more)
        cap *= 2;
    int32_t *ids = membudget_realloc(job->ids, cap * sizeof *ids);
    if (!ids)
        return refuse(r, SRV_EINTERNAL, "out of memory");
    job->ids = ids;
    job->ids_cap = cap;
    return SRV_OK;
}

static int tokenize_text(const embed_api *api, embed_job *job, int32_t i, json_t *text,
                         bool truncate, refusal *r) {
    const size_t len = json_string_length(text);
    const int32_t max_len = api->model->max_positions;
    if (len == 0)
        return refuse(r, SRV_EBADREQUEST, "input %d is an empty string", (int)i);
    int rc = reserve(job, (size_t)job->cu[i], (size_t)max_len, r);
    if (rc != SRV_OK)
        return rc;
    tok_output o = {.ids = job->ids + job->cu[i], .capacity = max_len};
    rc = tok_encode(api->tok, json_string_value(text), len, truncate, &o);
    if (rc == TOK_EUTF8)
        return refuse(r, SRV_EBADREQUEST, "input %d is not valid UTF-8 (byte %zu)", (int)i,
                      o.error_at);
    if (rc == TOK_ETOOLONG)
        return refuse(r, SRV_EINVALID,
                      "input %d has %d tokens; the model takes at most %d and truncation is off",
                      (int)i, (int)o.n_full, (int)max_len);
    if (rc != TOK_OK)
        return refuse(r, SRV_EINTERNAL, "tokenizer: %s", tok_strerror(rc));
    job->cu[i + 1] = job->cu[i] + o.n;
    return SRV_OK;
}

/* Token ids go to the model as given: in the vocabulary, 1..max length. */
static int take_ids(const embed_api *api, embed_job *job, int32_t i, json_t *arr, refusal *r) {
    const size_t len = json_array_size(arr);
    const int32_t max_len = api->model->max_positions, vocab = api->model->vocab_size;
    if (len == 0)
        return refuse(r, SRV_EBADREQUEST, "input %d is an empty array of token ids", (int)i);
    if (len > (size_t)max_len)
        return refuse(r, SRV_EINVALID, "input %d has %zu token ids; the model takes at most %d",
                      (int)i, len, (int)max_len);
    int rc = reserve(job, (size_t)job->cu[i], len, r);
    if (rc != SRV_OK)
        return rc;
    for (size_t k = 0; k < len; k++) {
        json_t *x = json_array_get(arr, k);
        if (!json_is_integer(x))
            return refuse(r, SRV_EBADREQUEST, "input %d, token %zu is not an integer id", (int)i,
                          k);
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= vocab)
            return refuse(r, SRV_EINVALID,
                          "input %d, token %zu: id %lld outside the vocabulary "
                          "[0, %d)",
                          (int)i, k, (long long)id, (int)vocab);
        job->ids[job->cu[i] + (int32_t)k] = (int32_t)id;
    }
    job->cu[i + 1] = job->cu[i] + (int32_t)len;
    return SRV_OK;
}

/* A new job with every input of `in` tokenized (or taken as ids), checked
 * against the limits, and its output allocated. */
static embed_job *make_job(const embed_api *api, const char *field, json_t *in, bool allow_ids,
                           bool truncate, refusal *r) {
    int kind = IN_TEXTS;
    int32_t n = 0;
    json_t *list = NULL;
    if (classify(api, field, in, allow_ids, &kind, &n, &list, r) != SRV_OK)
        return NULL;
    embed_job *job = membudget_calloc(1, sizeof *job);
    if (!job || !(job->cu = membudget_calloc((size_t)n + 1, sizeof *job->cu))) {
        membudget_free(job);
        refuse(r, SRV_EINTERNAL, "out of memory");
        return NULL;
    }
    job->n = n;
    for (int32_t i = 0; i < n; i++) {
        json_t *x = list ? json_array_get(list, (size_t)i) : in;
        int rc = kind == IN_IDS ? take_ids(api, job, i, x, r)
                                : tokenize_text(api, job, i, x, truncate, r);
        if (rc != SRV_OK) {
            job_free(job);
            return NULL;
        }
    }
    const int32_t tokens = job->cu[n];
    if (tokens > api->max_batch_tokens || n > api->max_batch_requests) {
        refuse(r, SRV_EINVALID,
               "request has %d inputs and %d tokens; a batch holds at most %d inputs "
               "(max_batch_requests) and %d tokens (max_batch_tokens)",
               (int)n, (int)tokens, (int)api->max_batch_requests, (int)api->max_batch_tokens);
        job_free(job);
        return NULL;
    }
    job->out = membudget_malloc((size_t)n * (size_t)api->model->hidden_size * sizeof *job->out);
    if (!job->out) {
        job_free(job);
        refuse(r, SRV_EINTERNAL, "out of memory");
        return NULL;
    }
    job->base.kind = BATCH_EMBED;
    sched_req_init(&job->base.sreq, tokens, n, 0, NULL);
    return job;
}

static int want_bool(json_t *v, const char *name, bool *out, refusal *r) {
    if (!v)
        return SRV_OK;
    if (!json_is_boolean(v))
        return refuse(r, SRV_EBADREQUEST, "%s must be true or false", name);
    *out = json_is_true(v);
    return SRV_OK;
}

/* Whether the JSON string s is exactly lit (s may hold U+0000). */
static bool string_is(const json_t *s, const char *lit) {
    return json_string_length(s) == strlen(lit) &&
           memcmp(json_string_value(s), lit, strlen(lit)) == 0;
}

/* POST /v1/embeddings */
static embed_job *decode_openai(const embed_api *api, json_t *root, refusal *r) {
    json_t *input = NULL, *model = NULL, *format = NULL, *dims = NULL;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "input") == 0)
            input = value;
        else if (strcmp(key, "model") == 0)
            model = value;
        else if (strcmp(key, "encoding_format") == 0)
            format = value;
        else if (strcmp(key, "dimensions") == 0)
            dims = value;
        else if (strcmp(key, "user") != 0) {
            refuse(r, SRV_EBADREQUEST,
                   "unknown field \"%.64s\" (expected input, model, encoding_format, dimensions, "
                   "user)",
                   key);
            return NULL;
        }
    }
    if (model && !json_is_string(model)) {
        refuse(r, SRV_EBADREQUEST, "model must be a string");
        return NULL;
    }
    bool base64 = false;
    if (format && !json_is_string(format)) {
        refuse(r, SRV_EBADREQUEST, "encoding_format must be a string");
        return NULL;
    }
    if (format) {
        base64 = string_is(format, "base64");
        if (!base64 && !string_is(format, "float")) {
            refuse(r, SRV_EINVALID, "encoding_format must be \"float\" or \"base64\"");
            return NULL;
        }
    }
    const int C = api->model->hidden_size;
    if (dims && !json_is_integer(dims)) {
        refuse(r, SRV_EBADREQUEST, "dimensions must be an integer");
        return NULL;
    }
    if (dims && (json_integer_value(dims) < 1 || json_integer_value(dims) > C)) {
        refuse(r, SRV_EINVALID, "dimensions is %lld; this model allows 1..%d",
               (long long)json_integer_value(dims), C);
        return NULL;
    }
    embed_job *job = make_job(api, "input", input, true, api->truncate, r);
    if (!job)
        return NULL;
    job->api = API_OPENAI;
    job->normalize = api->model->normalize;
    job->base64 = base64;
    job->dimensions = dims ? (int)json_integer_value(dims) : 0;
    /* A copy, charged to the budget: the request's tree is freed next. */
    job->model = model ? json_stringn(json_string_value(model), json_string_length(model))
                       : json_string(api->model_name);
    if (!job->model) {
        job_free(job);
        refuse(r, SRV_EINTERNAL, "out of memory");
        return NULL;
    }
    return job;
}

/* POST /embed */
static embed_job *decode_tei(const embed_api *api, json_t *root, refusal *r) {
    json_t *inputs = NULL, *normalize = NULL, *truncate = NULL;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "inputs") == 0)
            inputs = value;
        else if (strcmp(key, "normalize") == 0)
            normalize = value;
        else if (strcmp(key, "truncate") == 0)
            truncate = value;
        else {
            refuse(r, SRV_EBADREQUEST,
                   "unknown field \"%.64s\" (expected inputs, normalize, truncate)", key);
            return NULL;
        }
    }
    bool norm = true, trunc = api->truncate;
    if (want_bool(normalize, "normalize", &norm, r) != SRV_OK ||
        want_bool(truncate, "truncate", &trunc, r) != SRV_OK)
        return NULL;
    embed_job *job = make_job(api, "inputs", inputs, false, trunc, r);
    if (!job)
        return NULL;
    job->api = API_TEI;
    job->normalize = norm;
    return job;
}

/* ---- encoding ------------------------------------------------------------------- */

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* n floats as base64 of their little-endian bytes. */
static json_t *floats_base64(const float *v, size_t n) {
    size_t bytes = n * 4, len = (bytes + 2) / 3 * 4;
    unsigned char *raw = membudget_malloc(bytes);
    char *text = membudget_malloc(len + 1);
    json_t *out = NULL;
    if (raw && text) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], sizeof u);
            for (int j = 0; j < 4; j++)
                raw[4 * i + (size_t)j] = (unsigned char)(u >> (8 * j));
        }
        size_t o = 0;
        for (size_t i = 0; i < bytes; i += 3) {
            size_t take = bytes - i < 3 ? bytes - i : 3;
            uint32_t triple = (uint32_t)raw[i] << 16 | (take > 1 ? (uint32_t)raw[i + 1] << 8 : 0) |
                              (take > 2 ? raw[i + 2] : 0);
            text[o++] = b64_chars[triple >> 18 & 63];
            text[o++] = b64_chars[triple >> 12 & 63];
            text[o++] = take > 1 ? b64_chars[triple >> 6 & 63] : '=';
            text[o++] = take > 2 ? b64_chars[triple & 63] : '=';
        }
        out = json_stringn(text, o);
    }
    membudget_free(raw);
    membudget_free(text);
    return out;
}

static json_t *floats_array(const float *v, size_t n) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_real(v[i])) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    return arr;
}

static json_t *encode_openai(embed_job *job, int C) {
    const size_t d = job->dimensions ? (size_t)job->dimensions : (size_t)C;
    json_t *data = json_array();
    for (int32_t i = 0; data && i < job->n; i++) {
        float *v = job->out + (size_t)i * (size_t)C;
        /* A shortened vector is renormalised, as OpenAI's are. */
        if (d < (size_t)C)
            bert_l2_normalize(v, (int)d);
        json_t *e = job->base64 ? floats_base64(v, d) : floats_array(v, d);
        if (!e ||
            json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index",
                                                  (json_int_t)i, "embedding", e)) != 0) {
            json_decref(data);
            data = NULL;
        }
    }
    if (!data)
        return NULL;
    const json_int_t tokens = job->cu[job->n];
    return json_pack("{s:s, s:o, s:O, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                     job->model, "usage", "prompt_tokens", tokens, "total_tokens", tokens);
}

static json_t *encode_tei(const embed_job *job, int C) {
    json_t *out = json_array();
    for (int32_t i = 0; out && i < job->n; i++) {
        json_t *v = floats_array(job->out + (size_t)i * (size_t)C, (size_t)C);
        if (!v || json_array_append_new(out, v) != 0) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

/* ---- the embedding routes ----------------------------------------------------------- */

static double ns_to_ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

embed_job *embed_api_decode(const embed_api *api, embed_route route, json_t *root, int *err,
                            char *msg, size_t msg_len) {
    refusal r = {0};
    embed_job *job =
        route == EMBED_ROUTE_OPENAI ? decode_openai(api, root, &r) : decode_tei(api, root, &r);
    *err = job ? SRV_OK : r.err;
    snprintf(msg, msg_len, "%s", job ? "" : r.msg);
    return job;
}

void embed_job_free(embed_job *job) {
    job_free(job);
}

int32_t embed_job_inputs(const embed_job *job, const int32_t **cu, const int32_t **ids) {
    *cu = job->cu;
    *ids = job->ids;
    return job->n;
}

static int handle(http_request *req, embed_api *api, embed_route route) {
    if (http_draining(req))
        return http_reply_error(req, SRV_EUNAVAILABLE, "server is draining");
    int answered = HTTP_FAIL;
    json_t *root = http_body_json(req, &answered);
    if (!root)
        return answered;
    int err = SRV_OK;
    char msg[256];
    embed_job *job = embed_api_decode(api, route, root, &err, msg, sizeof msg);
    http_body_json_free(req, root);
    if (!job && membudget_refused()) /* the job did not fit the request-memory budget */
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!job)
        return http_reply_error(req, err, "%s", msg);

    return batch_submit(req, &job->base, api->sched, atomic_load(&api->request_timeout_ms),
                        job_free);
}

int embed_api_openai(http_request *req, void *ctx) {
    return handle(req, ctx, EMBED_ROUTE_OPENAI);
}

int embed_api_tei(http_request *req, void *ctx) {
    return handle(req, ctx, EMBED_ROUTE_TEI);
}

int embed_api_resumed(http_request *req, void *ctx) {
    const embed_api *api = ctx;
    embed_job *job = http_user(req);
    const sched_req *s = &job->base.sreq;
    http_set_timing(req, ns_to_ms(s->start_ns - s->enqueue_ns), ns_to_ms(s->end_ns - s->start_ns),
                    job->base.ran ? job->base.ran->name : NULL);
    if (job->base.ran)
        http_set_engine(req, srv_engine_name(api->svc->engine),
                        srv_engine_precision(api->svc->engine));
    if (job->base.err != SRV_OK)
        return http_reply_error(req, job->base.err, "%s", job->base.why);
    if (!job->base.ran)
        return http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
    const int C = api->model->hidden_size;
    json_t *out = job->api == API_OPENAI ? encode_openai(job, C) : encode_tei(job, C);
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory encoding the embeddings");
    return http_reply_json(req, 200, out);
}

/* ---- POST /tokenize ------------------------------------------------------------------- */

/* One token in TEI's shape: special tokens have their vocabulary string and
 * null offsets; others the input's bytes [start, stop) they came from. */
static json_t *token_json(const embed_api *api, const char *text, int32_t id, tok_span sp) {
    /* The post-processor's tokens, and only they, have empty spans. */
    if (sp.start == sp.end)
        return json_pack("{s:i, s:s, s:b, s:n, s:n}", "id", (json_int_t)id, "text",
                         tok_id_to_token(api->tok, id), "special", 1, "start", "stop");
    json_t *piece = json_stringn(text + sp.start, sp.end - sp.start);
    /* NULL is also the budget refusing the string: then the token fails
     * (and so the answer, with the budget's error), never "[UNK]" or a
     * vocabulary string standing in for it. */
    if (!piece && membudget_refused())
        return NULL;
    if (!piece) /* not whole characters: fall back to the vocabulary string */
        piece = json_string(tok_id_to_token(api->tok, id));
    return json_pack("{s:i, s:o, s:b, s:i, s:i}", "id", (json_int_t)id, "text", piece, "special", 0,
                     "start", (json_int_t)sp.start, "stop", (json_int_t)sp.end);
}

/* The tokens of one input, all of them: /tokenize never truncates (as TEI),
 * so a client can count what truncation would cut. */
static json_t *tokenize_one(const embed_api *api, int32_t i, json_t *in, bool specials,
                            refusal *r) {
    const char *text = json_string_value(in);
    const size_t len = json_string_length(in);
    if (len == 0) {
        refuse(r, SRV_EBADREQUEST, "input %d is an empty string", (int)i);
        return NULL;
    }
    tok_output o = {.capacity = api->model->max_positions};
    int rc = TOK_ETOOLONG;
    for (int pass = 0; pass < 2 && rc == TOK_ETOOLONG; pass++) {
        if (pass)
            o.capacity = o.n_full;
        membudget_free(o.ids);
        membudget_free(o.offsets);
        o.ids = membudget_malloc((size_t)o.capacity * sizeof *o.ids);
        o.offsets = membudget_malloc((size_t)o.capacity * sizeof *o.offsets);
        rc = o.ids && o.offsets ? tok_encode(api->tok, text, len, 0, &o) : TOK_ENOMEM;
    }
    json_t *out = NULL;
    if (rc == TOK_EUTF8)
        refuse(r, SRV_EBADREQUEST, "input %d is not valid UTF-8 (byte %zu)", (int)i, o.error_at);
    else if (rc != TOK_OK)
        refuse(r, SRV_EINTERNAL, "tokenizer: %s", tok_strerror(rc));
    else if (!(out = json_array()))
        refuse(r, SRV_EINTERNAL, "out of memory");
    for (int32_t k = 0; out && k < o.n; k++) {
        if (!specials && o.offsets[k].start == o.offsets[k].end)
            continue;
        if (json_array_append_new(out, token_json(api, text, o.ids[k], o.offsets[k])) != 0) {
            json_decref(out);
            out = NULL;
            refuse(r, SRV_EINTERNAL, "out of memory");
        }
    }
    membudget_free(o.ids);
    membudget_free(o.offsets);
    return out;
}

json_t *embed_api_tokens(const embed_api *api, json_t *root, int *err, char *msg, size_t msg_len) {
    refusal r = {0};
    json_t *inputs = NULL, *add = NULL, *list = NULL, *out = NULL;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "inputs") == 0)
            inputs = value;
        else if (strcmp(key, "add_special_tokens") == 0)
            add = value;
        else if (!r.err)
            refuse(&r, SRV_EBADREQUEST,
                   "unknown field \"%.64s\" (expected inputs, add_special_tokens)", key);
    }
    bool specials = true;
    int kind = IN_TEXTS;
    int32_t n = 0;
    if (!r.err && want_bool(add, "add_special_tokens", &specials, &r) == SRV_OK &&
        classify(api, "inputs", inputs, false, &kind, &n, &list, &r) == SRV_OK) {
        out = json_array();
        for (int32_t i = 0; out && i < n; i++) {
            json_t *tokens =
                tokenize_one(api, i, list ? json_array_get(list, (size_t)i) : inputs, specials, &r);
            if (!tokens || json_array_append_new(out, tokens) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        if (!out && !r.err)
            refuse(&r, SRV_EINTERNAL, "out of memory");
    }
    *err = out ? SRV_OK : r.err;
    snprintf(msg, msg_len, "%s", out ? "" : r.msg);
    return out;
}

int embed_api_tokenize(http_request *req, void *ctx) {
    const embed_api *api = ctx;
    int answered = HTTP_FAIL;
    json_t *root = http_body_json(req, &answered);
    if (!root)
        return answered;
    int err = SRV_OK;
    char msg[256];
    json_t *out = embed_api_tokens(api, root, &err, msg, sizeof msg);
    http_body_json_free(req, root);
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, err, "%s", msg);
    return http_reply_json(req, 200, out);
}

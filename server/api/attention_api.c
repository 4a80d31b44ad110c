/* attention_api.c — decoding and checking /v1/attention requests, running
 * them in packed batches, encoding the answers.
 *
 * A request becomes an attn_job: its q, k, v decoded to float32, an output
 * buffer, and an embedded sched_req. A codec worker decodes and submits; the
 * compute thread packs each group of equal (heads, head_dim, causal) into
 * the service's buffers, runs one forward per group and copies each output
 * back; the loop thread's done callback hands the job back to a codec
 * worker, which encodes the answer. */
#include "server/api/attention_api.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/jwriter.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"
#include "server/ops/verify.h"
#include "server/work/job.h"
#include "server/work/membudget.h"

/* ---- jobs --------------------------------------------------------------------- */

enum { ENC_NESTED, ENC_BASE64 };

typedef struct attn_job {
    job base; /* first: the scheduler's request, kind, HTTP request, outcome */
    int32_t seq, heads, head_dim;
    int causal;
    int encoding;           /* of the answer: the one q came in */
    size_t n;               /* floats per tensor: seq * heads * head_dim */
    float *q, *k, *v, *out; /* (seq, heads, head_dim) each, one allocation */
    bool packed;            /* run_batch scratch: already in a group */
} attn_job;

/* Jobs are charged to the request-memory budget (membudget.h) while they
 * live: allocated in the handler's scope, released here. */
static void job_free(void *p) {
    attn_job *job = p;
    if (job)
        membudget_free(job->q);
    membudget_free(job);
}

/* ---- the compute side ------------------------------------------------------- */

struct attn_service {
    tp_pool *pool;
    attn_parallel par;
    const srv_engine *engine;      /* owns the backend in force */
    const attn_backend *reference; /* runs groups the backend refuses */
    size_t cap;                    /* floats per packed tensor */
    int32_t max_batch_requests;
    float *q, *k, *v, *out; /* (cap) each */
    int32_t *cu_seqlens;    /* (max_batch_requests + 1) */
    attn_job **members;     /* (max_batch_requests): the group being run */
    void *ws;               /* kernel workspace, 64-byte aligned */
    size_t ws_bytes, total_bytes;
    /* Shadow verification and trace: compute thread only. */
    verifier *verify;
    bool sample;       /* this batch was drawn: capture its next group */
    uint64_t batch_id; /* of the running batch */
    attn_batch_info last;
};

attn_shape attn_service_bounds(int32_t max_batch_tokens, int32_t max_batch_requests) {
    return (attn_shape){.batch = max_batch_requests,
                        .total_tokens = max_batch_tokens,
                        .max_seqlen = max_batch_tokens,
                        .heads = ATTN_API_MAX_HEADS,
                        .head_dim = ATTN_API_MAX_HEAD_DIM,
                        .causal = 0};
}

static size_t round64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

attn_service *attn_service_create(int32_t max_batch_tokens, int32_t max_batch_requests,
                                  tp_pool *pool, const srv_engine *engine, char *err,
                                  size_t err_len) {
    attn_service *svc = calloc(1, sizeof *svc);
    if (!svc) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    svc->pool = pool;
    svc->par = tp_parallel(pool);
    svc->engine = engine;
    svc->reference = attn_backend_find("naive");
    svc->max_batch_requests = max_batch_requests;
    svc->cap = (size_t)max_batch_tokens * ATTN_API_ROW_FLOATS;

    /* Every built-in backend's workspace fits, so a reload can switch to any
     * of them without allocating while serving. */
    attn_shape bounds = attn_service_bounds(max_batch_tokens, max_batch_requests);
    for (const attn_backend *const *b = attn_backends(); *b; b++) {
        size_t need = (*b)->workspace_size(&bounds, tp_nthreads(pool));
        svc->ws_bytes = need > svc->ws_bytes ? need : svc->ws_bytes;
    }
    size_t tensor_bytes = round64(svc->cap * sizeof(float));
    svc->q = aligned_alloc(64, tensor_bytes);
    svc->k = aligned_alloc(64, tensor_bytes);
    svc->v = aligned_alloc(64, tensor_bytes);
    svc->out = aligned_alloc(64, tensor_bytes);
    svc->cu_seqlens = calloc((size_t)max_batch_requests + 1, sizeof *svc->cu_seqlens);
    svc->members = calloc((size_t)max_batch_requests, sizeof *svc->members);
    svc->ws = svc->ws_bytes ? aligned_alloc(64, round64(svc->ws_bytes)) : NULL;
    svc->total_bytes = 4 * tensor_bytes + ((size_t)max_batch_requests + 1) * sizeof(int32_t) +
                       (size_t)max_batch_requests * sizeof(attn_job *) + round64(svc->ws_bytes);
    if (!svc->q || !svc->k || !svc->v || !svc->out || !svc->cu_seqlens || !svc->members ||
        (svc->ws_bytes && !svc->ws)) {
        snprintf(err, err_len, "cannot allocate %zu bytes of attention workspace",
                 svc->total_bytes);
        attn_service_destroy(svc);
        return NULL;
    }
    /* Touched now, not by the first batch big enough to reach each page:
     * resident memory is then what /info counts from the start and stays
     * flat under load, and no request pays the page faults. */
    memset(svc->q, 0, tensor_bytes);
    memset(svc->k, 0, tensor_bytes);
    memset(svc->v, 0, tensor_bytes);
    memset(svc->out, 0, tensor_bytes);
    if (svc->ws)
        memset(svc->ws, 0, round64(svc->ws_bytes));
    return svc;
}

void attn_service_destroy(attn_service *svc) {
    if (!svc)
        return;
    free(svc->q);
    free(svc->k);
    free(svc->v);
    free(svc->out);
    free(svc->cu_seqlens);
    free(svc->members);
    free(svc->ws);
    free(svc);
}

size_t attn_service_workspace_bytes(const attn_service *svc) {
    return svc->total_bytes;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void fail_group(attn_service *svc, int32_t n, int err, const char *why) {
    for (int32_t i = 0; i < n; i++) {
        svc->members[i]->base.err = err;
        snprintf(svc->members[i]->base.why, sizeof svc->members[i]->base.why, "%s", why);
    }
}

/* Runs the n jobs in svc->members (equal heads, head_dim, causal), already
 * packed, and copies each output back to its job. */
static void run_group(attn_service *svc, const attn_backend *backend, int32_t n, int32_t max_len) {
    const attn_job *first = svc->members[0];
    attn_shape shape = {.batch = n,
                        .total_tokens = svc->cu_seqlens[n],
                        .max_seqlen = max_len,
                        .heads = first->heads,
                        .head_dim = first->head_dim,
                        .causal = first->causal};
    /* A shape the configured backend refuses still gets a correct answer,
     * from the reference; the response names the backend that ran. */
    if (backend->supports(&shape, NULL, 0) != ATTN_OK)
        backend = svc->reference;
    if (backend->workspace_size(&shape, svc->par.nthreads) > svc->ws_bytes) {
        fail_group(svc, n, SRV_EINTERNAL, "attention workspace too small for this batch");
        return;
    }
    attn_problem p;
    attn_problem_dense(&p, shape, svc->cu_seqlens, svc->q, svc->k, svc->v, svc->out);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = backend->forward(&p, svc->ws, svc->ws_bytes, &svc->par);
    const double seconds = seconds_since(&t0);
    metrics_kernel(backend, seconds, attn_flops(&p));
    svc->last.groups++;
    svc->last.kernel_ns += (uint64_t)(seconds * 1e9);
    if (rc != ATTN_OK) {
        fail_group(svc, n, SRV_EINTERNAL, attn_strerror(rc));
        return;
    }
    /* Shadow verification: copy what the check needs; the float64 work runs
     * on the checker thread while this batch goes on. */
    if (svc->sample) {
        svc->sample = false;
        svc->last.verified = verify_capture(svc->verify, &p, backend, -1, svc->batch_id);
    }
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        attn_job *job = svc->members[i];
        memcpy(job->out, svc->out + off, job->n * sizeof(float));
        off += job->n;
        job->base.ran = backend;
        job->base.err = SRV_OK;
        for (size_t j = 0; j < job->n; j++)
            if (!isfinite(job->out[j])) {
                job->base.err = SRV_EINVALID;
                snprintf(job->base.why, sizeof job->base.why,
                         "the attention output overflowed float32; scale the inputs down");
                break;
            }
    }
}

int attn_service_run_batch(const sched_batch *b, void *ctx) {
    attn_service *svc = ctx;
    /* One read per batch: a reload swaps the backend between batches only. */
    const attn_backend *backend = srv_engine_backend(svc->engine);
    for (int32_t i = 0; i < b->n_reqs; i++)
        SCHED_CONTAINER_OF(b->reqs[i], attn_job, base.sreq)->packed = false;
    svc->last = (attn_batch_info){0};
    svc->sample = verify_sample(svc->verify);
    svc->batch_id = b->id;

    for (int32_t i = 0; i < b->n_reqs; i++) {
        attn_job *lead = SCHED_CONTAINER_OF(b->reqs[i], attn_job, base.sreq);
        if (lead->packed)
            continue;
        int32_t n = 0, max_len = 0;
        size_t off = 0;
        svc->cu_seqlens[0] = 0;
        for (int32_t j = i; j < b->n_reqs; j++) {
            attn_job *job = SCHED_CONTAINER_OF(b->reqs[j], attn_job, base.sreq);
            if (job->packed || job->heads != lead->heads || job->head_dim != lead->head_dim ||
                job->causal != lead->causal)
                continue;
            job->packed = true;
            /* The token budget keeps every batch within cap; a request that
             * would not fit is a bug, answered 500 rather than overrun. */
            if (off + job->n > svc->cap || n >= svc->max_batch_requests) {
                job->base.err = SRV_EINTERNAL;
                snprintf(job->base.why, sizeof job->base.why,
                         "batch exceeds the attention buffers");
                continue;
            }
            memcpy(svc->q + off, job->q, job->n * sizeof(float));
            memcpy(svc->k + off, job->k, job->n * sizeof(float));
            memcpy(svc->v + off, job->v, job->n * sizeof(float));
            off += job->n;
            svc->members[n++] = job;
            svc->cu_seqlens[n] = svc->cu_seqlens[n - 1] + job->seq;
            max_len = job->seq > max_len ? job->seq : max_len;
        }
        if (n)
            run_group(svc, backend, n, max_len);
    }
    return 0;
}

void attn_service_set_verifier(attn_service *svc, verifier *v) {
    svc->verify = v;
}

const attn_batch_info *attn_service_last_batch(const attn_service *svc) {
    return &svc->last;
}

static double ns_ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

int attn_service_trace(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified) {
    const attn_service *svc = ctx;
    const attn_batch_info *ai = &svc->last;
    *verified = ai->verified;
    return snprintf(buf, cap,
                    ",\"attention\":{\"requests\":%d,\"tokens\":%d,\"groups\":%d,"
                    "\"kernel_ms\":%.3f,\"verified\":%s}",
                    part->n_reqs, part->n_tokens, ai->groups, ns_ms(ai->kernel_ns),
                    ai->verified ? "true" : "false");
}

/* ---- decoding ----------------------------------------------------------------- */

typedef srv_refusal refusal;

/* What a tensor claims before any of its numbers are read. */
typedef struct tensor_desc {
    const char *name;
    json_t *json;
    int encoding;
    int64_t dims[3];
    const char *data; /* base64 text */
    size_t data_len;
} tensor_desc;

static int nested_dims(tensor_desc *t, refusal *r) {
    json_t *level = t->json;
    static const char *const what[3] = {"seq", "heads", "head_dim"};
    for (int d = 0; d < 3; d++) {
        if (!json_is_array(level))
            return refuse(r, SRV_EBADREQUEST,
                          "%s must be a nested array [seq][heads][head_dim] of numbers or "
                          "{\"shape\", \"data\"}",
                          t->name);
        t->dims[d] = (int64_t)json_array_size(level);
        if (t->dims[d] == 0)
            return refuse(r, SRV_EINVALID, "%s has %s = 0", t->name, what[d]);
        level = json_array_get(level, 0);
    }
    return SRV_OK;
}

static int base64_dims(tensor_desc *t, refusal *r) {
    json_t *shape = NULL, *data = NULL;
    const char *key;
    json_t *value;
    json_object_foreach(t->json, key, value) {
        if (strcmp(key, "shape") == 0)
            shape = value;
        else if (strcmp(key, "data") == 0)
            data = value;
        else
            return refuse(r, SRV_EBADREQUEST, "%s: unknown field \"%.64s\" (expected shape, data)",
                          t->name, key);
    }
    if (!json_is_array(shape) || json_array_size(shape) != 3)
        return refuse(r, SRV_EBADREQUEST, "%s.shape must be [seq, heads, head_dim]", t->name);
    if (!json_is_string(data))
        return refuse(r, SRV_EBADREQUEST, "%s.data must be a base64 string", t->name);
    for (int d = 0; d < 3; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v))
            return refuse(r, SRV_EBADREQUEST, "%s.shape[%d] must be an integer", t->name, d);
        t->dims[d] = (int64_t)json_integer_value(v);
        if (t->dims[d] <= 0)
            return refuse(r, SRV_EINVALID, "%s.shape[%d] is %lld; dimensions must be >= 1", t->name,
                          d, (long long)t->dims[d]);
    }
    t->data = json_string_value(data);
    t->data_len = json_string_length(data);
    return SRV_OK;
}

static int describe(tensor_desc *t, refusal *r) {
    if (!t->json)
        return refuse(r, SRV_EBADREQUEST, "missing field \"%s\"", t->name);
    if (json_is_object(t->json)) {
        t->encoding = ENC_BASE64;
        return base64_dims(t, r);
    }
    t->encoding = ENC_NESTED;
    return nested_dims(t, r);
}

/* Checks that a nested array is rectangular: dims[0] rows of dims[1]
 * vectors of dims[2] values. */
static int nested_extent(const tensor_desc *t, refusal *r) {
    for (int64_t s = 0; s < t->dims[0]; s++) {
        json_t *row = json_array_get(t->json, (size_t)s);
        if (!json_is_array(row) || (int64_t)json_array_size(row) != t->dims[1])
            return refuse(r, json_is_array(row) ? SRV_EINVALID : SRV_EBADREQUEST,
                          "%s[%lld] must be an array of %lld heads", t->name, (long long)s,
                          (long long)t->dims[1]);
        for (int64_t h = 0; h < t->dims[1]; h++) {
            json_t *vec = json_array_get(row, (size_t)h);
            if (!json_is_array(vec) || (int64_t)json_array_size(vec) != t->dims[2])
                return refuse(r, json_is_array(vec) ? SRV_EINVALID : SRV_EBADREQUEST,
                              "%s[%lld][%lld] must be an array of %lld numbers", t->name,
                              (long long)s, (long long)h, (long long)t->dims[2]);
        }
    }
    return SRV_OK;
}

/* Fills out (dims[0]*dims[1]*dims[2] floats) from a nested array that
 * nested_extent accepted, checking that every number fits float32. */
static int decode_nested(const tensor_desc *t, float *out, refusal *r) {
    size_t o = 0;
    for (int64_t s = 0; s < t->dims[0]; s++) {
        json_t *row = json_array_get(t->json, (size_t)s);
        for (int64_t h = 0; h < t->dims[1]; h++) {
            json_t *vec = json_array_get(row, (size_t)h);
            for (int64_t d = 0; d < t->dims[2]; d++) {
                json_t *x = json_array_get(vec, (size_t)d);
                if (!json_is_number(x))
                    return refuse(r, SRV_EBADREQUEST, "%s[%lld][%lld][%lld] is not a number",
                                  t->name, (long long)s, (long long)h, (long long)d);
                float f = (float)json_number_value(x);
                if (!isfinite(f))
                    return refuse(r, SRV_EINVALID, "%s[%lld][%lld][%lld] is outside float32 range",
                                  t->name, (long long)s, (long long)h, (long long)d);
                out[o++] = f;
            }
        }
    }
    return SRV_OK;
}

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Bytes that len characters of base64 (padding included or not) decode to;
 * -1 for a length no base64 text can have. */
static int64_t b64_decoded_len(const char *s, size_t len) {
    size_t pad = 0;
    while (pad < 2 && len > pad && s[len - 1 - pad] == '=')
        pad++;
    if (pad && len % 4)
        return -1;
    size_t body = len - pad;
    if (body % 4 == 1)
        return -1;
    return (int64_t)(body / 4 * 3 + (body % 4 ? body % 4 - 1 : 0));
}

static float float_le(const unsigned char *b) {
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Checks that base64 data decodes to exactly n floats. */
static int base64_extent(const tensor_desc *t, size_t n, refusal *r) {
    int64_t bytes = b64_decoded_len(t->data, t->data_len);
    if (bytes < 0)
        return refuse(r, SRV_EBADREQUEST, "%s.data is not valid base64 (bad length)", t->name);
    if ((uint64_t)bytes != (uint64_t)n * 4)
        return refuse(r, SRV_EINVALID,
                      "%s.data holds %lld bytes; shape [%lld, %lld, %lld] needs %zu", t->name,
                      (long long)bytes, (long long)t->dims[0], (long long)t->dims[1],
                      (long long)t->dims[2], n * 4);
    return SRV_OK;
}

/* Fills out (n floats) from base64 data that base64_extent accepted. */
static int decode_base64(const tensor_desc *t, float *out, refusal *r) {
    /* Four bytes make a float: decode in groups, collect bytes in quad. */
    unsigned char quad[4];
    int have = 0;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < t->data_len && t->data[i] != '='; i++) {
        int v = b64_value((unsigned char)t->data[i]);
        if (v < 0)
            return refuse(r, SRV_EBADREQUEST, "%s.data is not valid base64 (character %zu)",
                          t->name, i);
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            quad[have++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
            if (have == 4) {
                out[o] = float_le(quad);
                if (!isfinite(out[o]))
                    return refuse(r, SRV_EINVALID, "%s holds a non-finite value at index %zu",
                                  t->name, o);
                o++;
                have = 0;
            }
        }
    }
    return SRV_OK;
}

/* The request's fields: the tensors are read by describe (a missing one
 * included, after causal), and null is no tensor nor a flag. */
typedef struct attn_req {
    json_t *tensor[3];
    bool causal;
} attn_req;

#define AT(f) offsetof(attn_req, f)
static const fld_row REQUEST_ROWS[] = {
    {"q", FLD_ANY, FLD_NULL, AT(tensor[0]), .param = NULL},
    {"k", FLD_ANY, FLD_NULL, AT(tensor[1]), .param = NULL},
    {"v", FLD_ANY, FLD_NULL, AT(tensor[2]), .param = NULL},
    {"causal", FLD_BOOL, FLD_NULL, AT(causal), .dflt = false},
};
static const fld_table REQUEST = FLD_TABLE(REQUEST_ROWS, NULL, NULL);

/* Checks the whole request and decodes it into a new job. */
static attn_job *decode_request(const attn_api *api, json_t *root, refusal *r) {
    attn_req q;
    if (fld_decode(&REQUEST, root, &q, api, r) != SRV_OK)
        return NULL;
    tensor_desc t[3] = {{.name = "q", .json = q.tensor[0]},
                        {.name = "k", .json = q.tensor[1]},
                        {.name = "v", .json = q.tensor[2]}};
    for (int i = 0; i < 3; i++)
        if (describe(&t[i], r) != SRV_OK)
            return NULL;
    for (int i = 1; i < 3; i++)
        if (memcmp(t[i].dims, t[0].dims, sizeof t[0].dims) != 0) {
            refuse(r, SRV_EINVALID,
                   "shapes differ: q is [%lld, %lld, %lld], %s is [%lld, %lld, %lld]",
                   (long long)t[0].dims[0], (long long)t[0].dims[1], (long long)t[0].dims[2],
                   t[i].name, (long long)t[i].dims[0], (long long)t[i].dims[1],
                   (long long)t[i].dims[2]);
            return NULL;
        }
    const int64_t seq = t[0].dims[0], heads = t[0].dims[1], head_dim = t[0].dims[2];
    if (heads > ATTN_API_MAX_HEADS || head_dim > ATTN_API_MAX_HEAD_DIM ||
        seq > api->max_batch_tokens) {
        refuse(r, SRV_EINVALID,
               "shape [%lld, %lld, %lld] is too large (limits: seq <= %d, heads <= %d, "
               "head_dim <= %d)",
               (long long)seq, (long long)heads, (long long)head_dim, (int)api->max_batch_tokens,
               ATTN_API_MAX_HEADS, ATTN_API_MAX_HEAD_DIM);
        return NULL;
    }
    const int64_t row = heads * head_dim;
    const int64_t cost = seq * ((row + ATTN_API_ROW_FLOATS - 1) / ATTN_API_ROW_FLOATS);
    if (cost > api->max_batch_tokens) {
        refuse(r, SRV_EINVALID,
               "shape [%lld, %lld, %lld] needs %lld batch tokens (seq x ceil(heads x head_dim "
               "/ %d)); max_batch_tokens is %d",
               (long long)seq, (long long)heads, (long long)head_dim, (long long)cost,
               ATTN_API_ROW_FLOATS, (int)api->max_batch_tokens);
        return NULL;
    }

    /* Each tensor must hold what its shape claims before anything is
     * allocated for it: otherwise a body of a few hundred bytes claiming
     * [16384, 2, 256] makes the service allocate 128 MiB only to refuse it
     * (tests/fuzz/corpus/attention/regress-alloc-* under -malloc_limit_mb). */
    size_t n = (size_t)(seq * row);
    for (int i = 0; i < 3; i++) {
        int rc = t[i].encoding == ENC_NESTED ? nested_extent(&t[i], r) : base64_extent(&t[i], n, r);
        if (rc != SRV_OK)
            return NULL;
    }
    attn_job *job = membudget_calloc(1, sizeof *job);
    float *buf = job ? membudget_malloc(4 * n * sizeof(float)) : NULL;
    if (!buf) {
        membudget_free(job);
        refuse(r, SRV_EINTERNAL, "out of memory");
        return NULL;
    }
    job->q = buf;
    job->k = buf + n;
    job->v = buf + 2 * n;
    job->out = buf + 3 * n;
    job->n = n;
    job->seq = (int32_t)seq;
    job->heads = (int32_t)heads;
    job->head_dim = (int32_t)head_dim;
    job->causal = q.causal;
    job->encoding = t[0].encoding;
    sched_req_init(&job->base.sreq, (int32_t)cost, 1, 0, NULL);
    job->base.kind = api->kind;
    float *dst[3] = {job->q, job->k, job->v};
    for (int i = 0; i < 3; i++) {
        int rc = t[i].encoding == ENC_NESTED ? decode_nested(&t[i], dst[i], r)
                                             : decode_base64(&t[i], dst[i], r);
        if (rc != SRV_OK) {
            job_free(job);
            return NULL;
        }
    }
    return job;
}

attn_job *attn_api_decode(const attn_api *api, json_t *root, int *err, char *msg, size_t msg_len) {
    refusal r = {0};
    attn_job *job = decode_request(api, root, &r);
    *err = job ? SRV_OK : r.err;
    snprintf(msg, msg_len, "%s", job ? "" : r.msg);
    return job;
}

void attn_job_free(attn_job *job) {
    job_free(job);
}

/* ---- encoding ------------------------------------------------------------------- */

/* {"shape": [seq, heads, head_dim], "data": base64 of the floats}. */
static void encode_base64(jwriter *w, const attn_job *job) {
    jw_lit(w, "{\"shape\":[");
    jw_int(w, job->seq);
    jw_lit(w, ",");
    jw_int(w, job->heads);
    jw_lit(w, ",");
    jw_int(w, job->head_dim);
    jw_lit(w, "],\"data\":");
    jw_f32_base64(w, job->out, job->n);
    jw_lit(w, "}");
}

/* [seq][heads][head_dim] nested arrays. */
static void encode_nested(jwriter *w, const attn_job *job) {
    const size_t d = (size_t)job->head_dim;
    const float *v = job->out;
    jw_lit(w, "[");
    for (int32_t s = 0; s < job->seq && !w->failed; s++) {
        if (s)
            jw_lit(w, ",");
        jw_lit(w, "[");
        for (int32_t h = 0; h < job->heads; h++, v += d) {
            if (h)
                jw_lit(w, ",");
            jw_f32s(w, v, d);
        }
        jw_lit(w, "]");
    }
    jw_lit(w, "]");
}

/* ---- the route ---------------------------------------------------------------------- */

int attn_api_handle(http_request *req, void *ctx) {
    attn_api *api = ctx;
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    int err = SRV_OK;
    char msg[256];
    attn_job *job = attn_api_decode(api, root, &err, msg, sizeof msg);
    http_body_json_free(req, root);
    if (!job && membudget_refused()) /* the job did not fit the request-memory budget */
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!job)
        return http_reply_error(req, err, "%s", msg);

    return job_submit(req, &job->base, api->sched, atomic_load(&api->request_timeout_ms), job_free);
}

int attn_api_resumed(http_request *req, void *ctx) {
    (void)ctx;
    attn_job *job = http_user(req);
    http_set_timing(req, job_queue_ms(&job->base), job_compute_ms(&job->base),
                    job->base.ran ? job->base.ran->name : NULL);
    if (job->base.err != SRV_OK)
        return http_reply_error(req, job->base.err, "%s", job->base.why);
    if (!job->base.ran)
        return http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
    jwriter w;
    jw_init(&w, job->encoding == ENC_BASE64 ? JW_BASE64_LEN(job->n) + 256 : 13 * job->n + 256);
    jw_lit(&w, "{\"output\":");
    if (job->encoding == ENC_BASE64)
        encode_base64(&w, job);
    else
        encode_nested(&w, job);
    jw_lit(&w, ",\"backend\":");
    jw_str(&w, job->base.ran->name, strlen(job->base.ran->name));
    jw_lit(&w, "}");
    return jw_reply(req, 200, &w);
}

int attn_api_register(attn_api *api, batch_runner *runner, routes *t) {
    const batch_kind kind = {.name = "attention",
                             .run = attn_service_run_batch,
                             .trace = attn_service_trace,
                             .ctx = api->svc};
    if ((api->kind = batch_runner_add_kind(runner, &kind)) < 0)
        return -1;
    return routes_add(t, (http_route){"POST", "/v1/attention", true, HTTP_AUTH_KEY, attn_api_handle,
                                      attn_api_resumed, api, HTTP_ERRORS_OPENAI});
}

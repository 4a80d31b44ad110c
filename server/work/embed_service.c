/* embed_service.c — the embeddings compute service: every embedding job of
 * a batch runs through one packed engine forward (varlen, no padding) on the
 * compute thread, and each job's vectors are copied back to it. */
#include "server/work/embed_service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/embed_codec.h"
#include "server/api/errors.h"
#include "server/ops/metrics.h"
#include "server/ops/verify.h"

static double ns_ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

struct embed_service {
    srv_engine *engine; /* runs the forward, with the attention backend in force */
    int C, H, layers;   /* floats per sequence out, per token hidden */
    int32_t max_tokens, max_seqs;
    int32_t *ids;   /* (max_tokens) the packed batch */
    int32_t *cu;    /* (max_seqs + 1) */
    int32_t *types; /* (max_tokens) the packed type ids, when a job of the batch has them */
    float *out;     /* (max_seqs, C) */
    size_t total_bytes;
    /* Shadow verification and trace: compute thread only. */
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
    const encoder_info *m = engine_model(srv_engine_instance(engine));
    svc->engine = engine;
    svc->C = m->output_dim;
    svc->H = m->hidden_size;
    svc->layers = m->num_layers;
    svc->max_tokens = max_batch_tokens;
    svc->max_seqs = max_batch_requests;
    svc->ids = malloc((size_t)max_batch_tokens * sizeof *svc->ids);
    svc->cu = malloc(((size_t)max_batch_requests + 1) * sizeof *svc->cu);
    svc->out = malloc((size_t)max_batch_requests * (size_t)svc->C * sizeof *svc->out);
    /* Only a classifier is sent pairs, whose second text may be type 1. */
    if (m->task == ENCODER_TASK_CLASSIFY)
        svc->types = malloc((size_t)max_batch_tokens * sizeof *svc->types);
    svc->total_bytes = (size_t)max_batch_tokens * sizeof *svc->ids +
                       (svc->types ? (size_t)max_batch_tokens * sizeof *svc->types : 0) +
                       ((size_t)max_batch_requests + 1) * sizeof *svc->cu +
                       (size_t)max_batch_requests * (size_t)svc->C * sizeof *svc->out;
    if (!svc->ids || !svc->cu || !svc->out || (m->task == ENCODER_TASK_CLASSIFY && !svc->types)) {
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
    free(svc->types);
    free(svc);
}

const srv_engine *embed_service_engine(const embed_service *svc) {
    return svc->engine;
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
    bool typed = false; /* a job of the batch has type ids */
    svc->cu[0] = 0;
    /* Each job contributes its piece: inputs [first, first + count). */
    for (int32_t i = 0; i < b->n_reqs; i++) {
        embed_job *job = job_of(b->reqs[i]);
        const int32_t first = job->base.first, n = job->base.count;
        const int32_t *cu = job->cu + first;
        const int32_t tokens = cu[n] - cu[0];
        /* The scheduler's limits keep every batch within the buffers; a
         * request that would not fit is a bug, answered 500 rather than
         * overrun. */
        if (T + tokens > svc->max_tokens || B + n > svc->max_seqs) {
            job->base.err = SRV_EINTERNAL;
            snprintf(job->base.why, sizeof job->base.why, "batch exceeds the model buffers");
            continue;
        }
        memcpy(svc->ids + T, job->ids + cu[0], (size_t)tokens * sizeof *svc->ids);
        if (svc->types) {
            if (job->type_ids)
                memcpy(svc->types + T, job->type_ids + cu[0], (size_t)tokens * sizeof *svc->types);
            else
                memset(svc->types + T, 0, (size_t)tokens * sizeof *svc->types);
            typed = typed || job->type_ids != NULL;
        }
        for (int32_t k = 0; k < n; k++)
            svc->cu[B + k + 1] = T + cu[k + 1] - cu[0];
        B += n;
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
    const engine_batch eb = {.ids = svc->ids,
                             .type_ids = typed ? svc->types : NULL,
                             .cu_seqlens = svc->cu,
                             .batch = B,
                             .out = svc->out,
                             .raw = 1};
    /* Backends switch between batches only (sched_call), so this is the one
     * the forward runs with; the tap names it. */
    const attn_backend *backend = srv_engine_backend(svc->engine);
    svc->tap_backend = backend;
    int rc = B ? srv_engine_forward(svc->engine, &eb, &hook, &backend, why, sizeof why) : ENGINE_OK;
    if (B && rc == ENGINE_OK)
        svc->last.stages = srv_engine_last_run(svc->engine)->stages;
    const size_t C = (size_t)svc->C, H = (size_t)svc->H;
    const float *hidden = rc == ENGINE_OK ? srv_engine_last_hidden(svc->engine) : NULL;
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
        const int32_t first = job->base.first, n = job->base.count;
        if (job->hidden && !hidden) {
            job->base.err = SRV_EINVALID;
            snprintf(job->base.why, sizeof job->base.why,
                     "engine %s does not expose per-token hidden states",
                     srv_engine_name(svc->engine));
            seq += n;
            continue;
        }
        float *out = job->out + (size_t)first * C;
        memcpy(out, svc->out + (size_t)seq * C, (size_t)n * C * sizeof *out);
        if (job->hidden) /* this piece's tokens, where the batch packed them */
            memcpy(job->hidden + (size_t)job->cu[first] * H, hidden + (size_t)svc->cu[seq] * H,
                   (size_t)(job->cu[first + n] - job->cu[first]) * H * sizeof *job->hidden);
        seq += n;
        if (job->normalize)
            for (int32_t k = 0; k < n; k++)
                bert_l2_normalize(out + (size_t)k * C, (int)C);
        job->base.ran = backend;
        metrics_embeddings((uint64_t)n, (uint64_t)(job->cu[first + n] - job->cu[first]));
    }
    return 0;
}

/* The trace line's "embed" member (batch.h's batch_kind trace). */
int embed_service_trace(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified) {
    const embed_service *svc = ctx;
    const embed_batch_info *ei = &svc->last;
    const bert_stage_ns *s = &ei->stages;
    *verified = ei->verified_layer >= 0;
    return snprintf(buf, cap,
                    ",\"embed\":{\"requests\":%d,\"sequences\":%d,\"tokens\":%d,"
                    "\"stages_ms\":{\"embeddings\":%.3f,\"qkv\":%.3f,\"attention\":%.3f,"
                    "\"out_proj\":%.3f,\"ffn\":%.3f,\"norms\":%.3f,\"pooling\":%.3f},"
                    "\"verified_layer\":%d}",
                    part->n_reqs, ei->sequences, ei->tokens, ns_ms(s->embeddings), ns_ms(s->qkv),
                    ns_ms(s->attention), ns_ms(s->out_proj), ns_ms(s->ffn), ns_ms(s->norms),
                    ns_ms(s->pooling), ei->verified_layer);
}

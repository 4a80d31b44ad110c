/* embed_service.c — the embeddings compute service: every embedding job of
 * a batch runs through one packed bert_forward (varlen, no padding) on the
 * compute thread, and each job's vectors are copied back to it. */
#include "embed_service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_codec.h"
#include "errors.h"
#include "metrics.h"
#include "verify.h"

static double ns_ms(uint64_t ns) {
    return (double)ns * 1e-6;
}

struct embed_service {
    const bert_model *model;
    const attn_service *attn; /* whose backend batches use */
    attn_parallel par;
    bert_workspace *ws;
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

embed_service *embed_service_create(const bert_model *model, const attn_service *attn,
                                    tp_pool *pool, int32_t max_batch_tokens,
                                    int32_t max_batch_requests, const attn_backend *const *backends,
                                    size_t nbackends, char *err, size_t err_len) {
    embed_service *svc = calloc(1, sizeof *svc);
    if (!svc) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    svc->model = model;
    svc->attn = attn;
    svc->par = tp_parallel(pool);
    svc->C = bert_get_config(model)->hidden_size;
    svc->layers = bert_get_config(model)->num_layers;
    svc->max_tokens = max_batch_tokens;
    svc->max_seqs = max_batch_requests;
    int rc = bert_workspace_create(model, max_batch_tokens, tp_nthreads(pool), backends, nbackends,
                                   &svc->ws, err, err_len);
    if (rc != BERT_OK) {
        free(svc);
        return NULL;
    }
    /* Vectors leave forward raw: each request chooses its normalisation. */
    bert_workspace_set_raw(svc->ws, 1);
    svc->ids = malloc((size_t)max_batch_tokens * sizeof *svc->ids);
    svc->cu = malloc(((size_t)max_batch_requests + 1) * sizeof *svc->cu);
    svc->out = malloc((size_t)max_batch_requests * (size_t)svc->C * sizeof *svc->out);
    svc->total_bytes = bert_workspace_bytes(svc->ws) + (size_t)max_batch_tokens * sizeof *svc->ids +
                       ((size_t)max_batch_requests + 1) * sizeof *svc->cu +
                       (size_t)max_batch_requests * (size_t)svc->C * sizeof *svc->out;
    if (!svc->ids || !svc->cu || !svc->out) {
        snprintf(err, err_len, "cannot allocate %zu bytes of model workspace", svc->total_bytes);
        embed_service_destroy(svc);
        return NULL;
    }
    return svc;
}

void embed_service_destroy(embed_service *svc) {
    if (!svc)
        return;
    bert_workspace_free(svc->ws);
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

/* bert_forward's tap: on the compute thread, right after the drawn layer's
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
    /* One read per batch: a reload swaps the backend between batches only. */
    const attn_backend *backend = attn_service_backend(svc->attn);
    int32_t B = 0, T = 0;
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
        for (int32_t k = 0; k < n; k++)
            svc->cu[B + k + 1] = T + cu[k + 1] - cu[0];
        B += n;
        T += tokens;
    }
    char why[256] = "";
    svc->last = (embed_batch_info){.sequences = B, .tokens = T, .verified_layer = -1};
    /* A sampled batch has one layer's attention, drawn at random, copied by
     * the tap right after that layer's forward. */
    const bool sample = B && verify_sample(svc->verify);
    if (sample) {
        svc->tap_backend = backend;
        svc->tap_batch = b->id;
        bert_workspace_set_attn_tap(svc->ws, verify_pick_layer(svc->verify, svc->layers), tap, svc);
    }
    int rc = B ? bert_forward(svc->model, svc->ws, backend, &svc->par, svc->ids, svc->cu, B,
                              svc->out, why, sizeof why)
               : BERT_OK;
    if (sample)
        bert_workspace_set_attn_tap(svc->ws, -1, NULL, NULL);
    if (B && rc == BERT_OK) {
        const bert_stage_ns *st = bert_workspace_stage_ns(svc->ws);
        svc->last.stages = *st;
        /* The forward times attention over all its layers together; every
         * layer has the same shape and work, so each call is counted with an
         * equal share (the totals, and so GFLOP/s, are exact). */
        for (int l = 0; l < svc->layers; l++)
            metrics_kernel(backend, (double)st->attention * 1e-9 / svc->layers,
                           st->attn_flops / svc->layers);
    }
    const size_t C = (size_t)svc->C;
    int32_t seq = 0;
    for (int32_t i = 0; i < b->n_reqs; i++) {
        embed_job *job = job_of(b->reqs[i]);
        if (job->base.err != SRV_OK)
            continue;
        if (rc != BERT_OK) {
            job->base.err = SRV_EINTERNAL;
            snprintf(job->base.why, sizeof job->base.why, "model forward failed: %s", why);
            continue;
        }
        const int32_t first = job->base.first, n = job->base.count;
        float *out = job->out + (size_t)first * C;
        memcpy(out, svc->out + (size_t)seq * C, (size_t)n * C * sizeof *out);
        if (job->hidden) /* this piece's tokens, where the batch packed them */
            memcpy(job->hidden + (size_t)job->cu[first] * C,
                   bert_workspace_hidden(svc->ws) + (size_t)svc->cu[seq] * C,
                   (size_t)(job->cu[first + n] - job->cu[first]) * C * sizeof *job->hidden);
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

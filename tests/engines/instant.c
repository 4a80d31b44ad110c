/* instant.c — a test-only engine that answers at once: each sequence's
 * vector is a hash of its token ids, of the model's output width, so the
 * service's front end (HTTP, JSON, tokenizer, answer writers) can be
 * measured and tested without the encoder's cost on any machine.
 *
 * It reads the model directory's description (config files, never the
 * weights) for the widths and bounds the service checks against, serves
 * embedders only (a classifier's logits from a hash would pass for scores),
 * exposes neither hidden states nor attention, and gives the same vector in
 * every precision. Named only (`engine: instant`): its score is the lowest,
 * so `auto` prefers any real engine, and its summary, logged and in /info,
 * says what it is. */
#include "engines/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct instant_ctx {
    encoder_desc *desc;
} instant_ctx;

static int score(char *why, size_t why_len) {
    (void)why, (void)why_len;
    return 1;
}

/* Every precision: the vectors do not depend on it, which also makes the
 * start-up check of a reduced precision against fp32 pass at cosine 1. */
static const char *precision_unsupported(gemm_precision p) {
    (void)p;
    return NULL;
}

static int init(const engine_options *opt, void **out, char *err, size_t err_len) {
    *out = NULL;
    encoder_desc *desc = NULL;
    int rc = encoder_describe(opt->model_dir, &desc, err, err_len);
    if (rc != BERT_OK)
        return rc == BERT_EUNSUPPORTED ? ENGINE_EUNSUPPORTED
               : rc == BERT_ENOMEM     ? ENGINE_ENOMEM
                                       : ENGINE_EMODEL;
    const encoder_info *m = encoder_desc_info(desc);
    if (m->task != ENCODER_TASK_EMBED) {
        snprintf(err, err_len,
                 "%s is a classifier (%d labels): the instant engine serves embedders only",
                 m->architecture[0] ? m->architecture : m->model_type, m->num_labels);
        encoder_desc_free(desc);
        return ENGINE_EUNSUPPORTED;
    }
    instant_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        encoder_desc_free(desc);
        snprintf(err, err_len, "out of memory");
        return ENGINE_ENOMEM;
    }
    c->desc = desc;
    *out = c;
    return ENGINE_OK;
}

static void release(void *ctx) {
    instant_ctx *c = ctx;
    if (!c)
        return;
    encoder_desc_free(c->desc);
    free(c);
}

static const encoder_info *model(void *ctx) {
    return encoder_desc_info(((instant_ctx *)ctx)->desc);
}

/* splitmix64's finaliser: one well-mixed word per input word. */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

/* out[0, D): element d drawn from (seed, d) in [-1, 1), L2-normalised when
 * norm is set. */
static void vector(float *out, int32_t D, uint64_t seed, int norm) {
    double ss = 0;
    for (int32_t d = 0; d < D; d++) {
        const float v = (float)((double)(mix(seed ^ mix((uint64_t)d)) >> 11) * 0x1p-52 - 1.0);
        out[d] = v;
        ss += (double)v * v;
    }
    if (!norm || ss <= 0)
        return;
    const float inv = (float)(1.0 / sqrt(ss));
    for (int32_t d = 0; d < D; d++)
        out[d] *= inv;
}

static int forward(void *ctx, const engine_batch *b, const attn_backend *attn,
                   const attn_parallel *par, char *err, size_t err_len) {
    (void)attn, (void)par, (void)err, (void)err_len;
    const encoder_info *m = model(ctx);
    const int32_t D = m->output_dim;
    for (int32_t s = 0; s < b->batch; s++) {
        /* The sequence's ids and types in order, so inputs that differ in
         * any token (or in its segment) get different vectors. */
        uint64_t h = mix((uint64_t)(b->cu_seqlens[s + 1] - b->cu_seqlens[s]));
        for (int32_t t = b->cu_seqlens[s]; t < b->cu_seqlens[s + 1]; t++) {
            const uint64_t type = b->type_ids ? (uint64_t)b->type_ids[t] : 0;
            h = mix(h ^ (uint32_t)b->ids[t] ^ (type << 32));
        }
        vector(b->out + (size_t)s * (size_t)D, D, h, m->normalize && !b->raw);
    }
    return ENGINE_OK;
}

static const engine_iface table = {
    .name = "instant",
    .summary = "TEST ONLY: answers a hash of the token ids at once, not embeddings; for measuring "
               "the front end",
    .score = score,
    .precision_unsupported = precision_unsupported,
    .init = init,
    .free = release,
    .model = model,
    .forward = forward,
};

__attribute__((visibility("default"))) const engine_plugin attnserve_engine_plugin = {
    .api_version = ENGINE_API_VERSION,
    .iface = &table,
};

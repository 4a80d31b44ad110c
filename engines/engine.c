/* engine.c — the instance, the optional slots' defaults and the one wrapper
 * around every forward (validation, timing, FLOPs, the verification hook). */
#include "engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *engine_strerror(int err) {
    switch (err) {
#define ENGINE_ERR_CASE(name, code, msg)                                                           \
    case code:                                                                                     \
        return msg;
        ENGINE_ERRORS(ENGINE_ERR_CASE)
#undef ENGINE_ERR_CASE
    }
    return "unknown error";
}

struct engine {
    const engine_iface *iface;
    void *ctx;
    gemm_precision precision;
    int32_t max_tokens, max_seqs;
    int nthreads;
    engine_run last;
};

static int fail(int rc, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(int rc, char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

const char *engine_precision_unsupported(const engine_iface *iface, gemm_precision p) {
    if ((int)p < 0 || p >= GEMM_NPRECISIONS)
        return "unknown precision";
    if (iface->precision_unsupported)
        return iface->precision_unsupported(p);
    return p == GEMM_FP32 ? NULL : "this engine runs fp32 only";
}

int engine_create(const engine_iface *iface, const engine_options *opt, engine **out, char *err,
                  size_t err_len) {
    *out = NULL;
    if (!iface || !opt || !opt->model_dir || opt->max_tokens < 1 || opt->max_seqs < 1 ||
        opt->nthreads < 1)
        return fail(ENGINE_EINVAL, err, err_len, "engine: missing table, model or bounds");
    const char *why = engine_precision_unsupported(iface, opt->precision);
    if (why)
        return fail(ENGINE_EUNSUPPORTED, err, err_len, "engine '%s' cannot run %s: %s", iface->name,
                    engine_precision_name(opt->precision), why);
    engine *e = calloc(1, sizeof *e);
    if (!e)
        return fail(ENGINE_ENOMEM, err, err_len, "out of memory");
    e->iface = iface;
    e->precision = opt->precision;
    e->max_tokens = opt->max_tokens;
    e->max_seqs = opt->max_seqs;
    e->nthreads = opt->nthreads;
    int rc = iface->init(opt, &e->ctx, err, err_len);
    if (rc != ENGINE_OK) {
        free(e);
        return rc;
    }
    *out = e;
    return ENGINE_OK;
}

void engine_destroy(engine *e) {
    if (!e)
        return;
    e->iface->free(e->ctx);
    free(e);
}

const char *engine_name(const engine *e) {
    return e->iface->name;
}
const char *engine_summary(const engine *e) {
    return e->iface->summary ? e->iface->summary : "";
}
const char *engine_attn_kernel(const engine *e, const char **detail) {
    const char *d = "", *k = e->iface->attn_kernel ? e->iface->attn_kernel(e->ctx, &d) : NULL;
    if (detail)
        *detail = k && d ? d : "";
    return k;
}
gemm_precision engine_precision(const engine *e) {
    return e->precision;
}
const encoder_info *engine_model(const engine *e) {
    return e->iface->model(e->ctx);
}
int32_t engine_output_dim(const engine *e) {
    return engine_model(e)->output_dim;
}
int32_t engine_max_tokens(const engine *e) {
    return e->max_tokens;
}

void engine_memory_of(const engine *e, engine_memory *m) {
    *m = (engine_memory){0};
    if (e->iface->memory)
        e->iface->memory(e->ctx, m);
}

const float *engine_last_hidden(const engine *e) {
    return e->iface->hidden ? e->iface->hidden(e->ctx) : NULL;
}

const engine_run *engine_last_run(const engine *e) {
    return &e->last;
}

double engine_flops(const encoder_info *c, const int32_t *cu, int32_t batch, double *attn_flops) {
    const double C = c->hidden_size, F = c->intermediate_size, L = c->num_layers;
    double gemm = 0, attn = 0;
    for (int32_t b = 0; b < batch; b++) {
        const double n = (double)(cu[b + 1] - cu[b]);
        gemm += n * 2.0 * C * (3.0 * C + C + 2.0 * F);
        attn += 4.0 * n * n * C;
    }
    if (attn_flops)
        *attn_flops = attn * L;
    return (gemm + attn) * L;
}

/* The batch against the instance's bounds and the model: checked here once,
 * so no engine repeats it and every engine refuses the same inputs with the
 * same words. */
static int check(const engine *e, const encoder_info *c, const engine_batch *b, char *err,
                 size_t err_len) {
    if (!b || !b->ids || !b->cu_seqlens || !b->out)
        return fail(ENGINE_EINPUT, err, err_len, "missing ids, cu_seqlens or output");
    if (b->batch < 1 || b->batch > e->max_seqs)
        return fail(ENGINE_EINPUT, err, err_len, "batch of %d sequences outside [1, %d]", b->batch,
                    e->max_seqs);
    const int32_t *cu = b->cu_seqlens;
    if (cu[0] != 0)
        return fail(ENGINE_EINPUT, err, err_len, "cu_seqlens[0] is %d, not 0", cu[0]);
    for (int32_t i = 0; i < b->batch; i++) {
        const int32_t n = cu[i + 1] - cu[i];
        if (cu[i + 1] < cu[i] || n < 1 || n > c->max_positions)
            return fail(ENGINE_EINPUT, err, err_len,
                        "sequence %d has %d tokens; each needs 1 to %d", i, n, c->max_positions);
        if (cu[i + 1] > e->max_tokens)
            return fail(ENGINE_EINPUT, err, err_len, "batch exceeds %d tokens", e->max_tokens);
    }
    for (int32_t t = 0; t < cu[b->batch]; t++)
        if (b->ids[t] < 0 || b->ids[t] >= c->vocab_size)
            return fail(ENGINE_EINPUT, err, err_len,
                        "token %d: id %d outside the vocabulary [0, %d)", t, b->ids[t],
                        c->vocab_size);
    for (int32_t t = 0; b->type_ids && t < cu[b->batch]; t++)
        if (b->type_ids[t] < 0 || b->type_ids[t] >= c->type_vocab_size)
            return fail(ENGINE_EINPUT, err, err_len, "token %d: token type %d outside [0, %d)", t,
                        b->type_ids[t], c->type_vocab_size);
    return ENGINE_OK;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int engine_forward(engine *e, const engine_batch *b, const attn_backend *attn,
                   const attn_parallel *par, const engine_hook *hook, char *err, size_t err_len) {
    const encoder_info *c = engine_model(e);
    e->last = (engine_run){0};
    if (!attn || !par || par->nthreads < 1 || par->nthreads > e->nthreads)
        return fail(ENGINE_EINPUT, err, err_len,
                    "missing attention backend or pool, or more than %d workers", e->nthreads);
    int rc = check(e, c, b, err, err_len);
    if (rc != ENGINE_OK)
        return rc;
    const bool hooked = hook && hook->fn && hook->layer >= 0 && hook->layer < c->num_layers &&
                        e->iface->set_attn_tap &&
                        e->iface->set_attn_tap(e->ctx, hook->layer, hook->fn, hook->ctx) == 0;
    const uint64_t t0 = now_ns();
    rc = e->iface->forward(e->ctx, b, attn, par, err, err_len);
    const uint64_t t1 = now_ns();
    if (hooked)
        e->iface->set_attn_tap(e->ctx, -1, NULL, NULL);
    if (rc != ENGINE_OK)
        return rc == ENGINE_EINPUT ? ENGINE_EINPUT : ENGINE_EFORWARD;
    engine_run *r = &e->last;
    r->sequences = b->batch;
    r->tokens = b->cu_seqlens[b->batch];
    r->ns = t1 - t0;
    r->flops = engine_flops(c, b->cu_seqlens, b->batch, &r->attn_flops);
    r->hooked = hooked;
    if (e->iface->stage_ns)
        e->iface->stage_ns(e->ctx, &r->stages);
    r->stages.attn_flops = r->attn_flops;
    return ENGINE_OK;
}

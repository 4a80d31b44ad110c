/* memmodel.c — the worst-case memory: what each part of the service can
 * hold, summed from what start allocated and what the settings bound, and
 * checked against the memory limit. */
#include "server/ops/memmodel.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/ops/log.h"
#include "server/ops/trace.h"
#include "server/ops/verify.h"
#include "server/work/workpool.h"

/* What connections hold whatever they send, beyond the request-memory
 * budget (membudget.h), which holds everything that grows with a request:
 * per connection HTTP_CONNECTION_BYTES (http.h: libmicrohttpd's pool and
 * connection struct, our request state and one error answer), for
 * max_connections + 1 (one evicted connection may still be closing as its
 * replacement opens), and once per server the /metrics answers that are
 * never charged to the budget while sent (HTTP_UNCHARGED_BYTES).
 * Socket buffers are the kernel's, not the process's. */
#define CONNECTION_BYTES HTTP_CONNECTION_BYTES

size_t memmodel_workspace_bytes(const app *a) {
    size_t total = attn_service_workspace_bytes(a->svc);
    for (size_t i = 0; i < a->nm; i++) {
        engine_memory em;
        engine_memory_of(srv_engine_instance(a->m[i].engine), &em);
        total += embed_service_workspace_bytes(a->m[i].embed) + em.workspace;
    }
    return total;
}

/* Resident memory now (/proc/self/statm), 0 if unknown. */
size_t memmodel_resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (f && fscanf(f, "%llu %llu", &size, &resident) != 2)
        resident = 0;
    if (f)
        fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* The size of every executable file mapping (our code, libc, OpenBLAS,
 * libmicrohttpd, ...): what code can ever be resident. */
size_t memmodel_code_bytes(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    size_t total = 0;
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) == 3 && perms[2] == 'x')
            total += (size_t)(hi - lo);
    }
    if (f)
        fclose(f);
    return total;
}

/* The threads of the process now (/proc/self/status), 0 if unknown. */
size_t memmodel_process_threads(void) {
    size_t threads = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %zu", &threads) == 1)
            break;
    if (f)
        fclose(f);
    return threads;
}

/* Every thread there is once serving times the default stack size:
 * stacks are resident only where touched, so this bounds them. */
size_t memmodel_listen_threads(const config *c) {
    return 2 + workpool_default_size(c->codec_workers);
}

size_t memmodel_threads_bytes(size_t threads) {
    size_t stack = 8u << 20;
    pthread_attr_t attr;
    if (pthread_getattr_default_np(&attr) == 0) {
        pthread_attr_getstacksize(&attr, &stack);
        pthread_attr_destroy(&attr);
    }
    return threads * stack;
}

/* One model's weights and workspace. */
void memmodel_model(const served_model *sm, json_int_t *owned, json_int_t *mapped,
                    json_int_t *workspace) {
    engine_memory em;
    engine_memory_of(srv_engine_instance(sm->engine), &em);
    *owned = (json_int_t)em.weights_owned;
    *mapped = (json_int_t)em.weights_mapped;
    *workspace = (json_int_t)(embed_service_workspace_bytes(sm->embed) + em.workspace);
}

/* The most memory the configuration lets the service hold:
 *   weights            the model, owned and mapped (the mapped file counted
 *                      whole: without AVX-512 each forward reads every page
 *                      of it; with it the linear layers read their packed
 *                      copy, owned, and the file's pages of them may stay
 *                      cold, so the figure is an upper bound there)
 *   workspace          allocated once at start for max_batch_tokens
 *   connections        (max_connections + 1) x CONNECTION_BYTES, plus the
 *                      uncharged /metrics answers (HTTP_UNCHARGED_BYTES)
 *   request_memory     max_request_memory_bytes: every byte requests hold
 *                      (bodies, parsed JSON, jobs, responses until sent),
 *                      whatever the queue and the number of connections
 *   threads            every thread's stack, whole
 *   runtime            resident before the model was loaded (libraries'
 *                      data, the allocator, the configuration) plus every
 *                      executable mapping whole (code paged in later)
 * Not counted, each bounded: scratch a codec worker allocates and frees
 * while it decodes, at most one at a time per worker (the tokenizer's word
 * buffer, ~2 KiB, and its normalisation run, 24 bytes per code point of
 * the longest run of combining marks in one input), and the metrics text
 * (~20 KiB) the one I/O thread builds; OpenBLAS's per-thread buffers
 * (allocated on the first GEMM, no more later); log lines (on the stack, or
 * one line's heap while written); allocator fragmentation. Measured: 1500
 * idle connections with 3 KiB of headers and 4 KiB of a body in cost
 * 12.7 KiB each (4 KiB of it body, charged to the budget) against
 * CONNECTION_BYTES' 23. Several models: each one's weights and workspace
 * are summed (each engine owns its weights and a workspace sized for a
 * whole batch). */
json_t *memmodel_json(const app *a) {
    const config *c = &a->cfg;
    json_int_t owned = 0, mapped = 0, model_ws = 0;
    for (size_t i = 0; i < a->nm; i++) {
        json_int_t o, m, w;
        memmodel_model(&a->m[i], &o, &m, &w);
        owned += o, mapped += m, model_ws += w;
    }
    json_int_t weights = owned + mapped;
    json_int_t attn_ws = (json_int_t)attn_service_workspace_bytes(a->svc);
    json_int_t workspace = attn_ws + model_ws;
    json_int_t conns =
        ((json_int_t)c->max_connections + 1) * CONNECTION_BYTES + HTTP_UNCHARGED_BYTES;
    json_int_t requests = (json_int_t)a->budget.limit;
    json_int_t threads = (json_int_t)a->threads_bytes;
    json_int_t runtime = (json_int_t)(a->base_bytes + a->code_bytes);
    /* The verification capture slot and the trace ring, both allocated at
     * start. */
    json_int_t verify = (json_int_t)(verify_bytes(a->verify) + trace_bytes(a->trace));
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                     "weights_bytes", weights, "weights_mapped_bytes", mapped,
                     "weights_owned_bytes", owned, "workspace_bytes", workspace,
                     "attention_workspace_bytes", attn_ws, "model_workspace_bytes", model_ws,
                     "connections_bytes", conns, "connection_bytes", (json_int_t)CONNECTION_BYTES,
                     "request_memory_bytes", requests, "request_memory_in_use_bytes",
                     (json_int_t)membudget_used(&a->budget), "threads_bytes", threads,
                     "runtime_bytes", runtime, "verification_bytes", verify, "worst_case_bytes",
                     weights + workspace + conns + requests + threads + runtime + verify);
}

size_t memmodel_worst_case_bytes(const app *a) {
    json_t *m = memmodel_json(a);
    size_t worst = (size_t)json_integer_value(json_object_get(m, "worst_case_bytes"));
    json_decref(m);
    return worst;
}

/* The memory the process may use: the setting, else the tightest limit of
 * the process's cgroup and those above it (membudget_cgroup_limit); 0 when
 * there is none. *explicit_ is true for the setting. */
static uint64_t memory_limit(const config *c, char *from, size_t from_len, bool *explicit_) {
    *explicit_ = c->memory_limit_bytes > 0;
    if (*explicit_) {
        snprintf(from, from_len, "memory_limit_bytes");
        return (uint64_t)c->memory_limit_bytes;
    }
    return membudget_cgroup_limit("/sys/fs/cgroup", "/proc/self/cgroup", from, from_len);
}

/* A worst case above the memory the process may use would be killed under
 * load, when the budget fills, rather than refused at start. Start refuses
 * it when memory_limit_bytes says so; above a limit it only found in its
 * cgroup it warns and serves, so a deployment sized on an earlier release's
 * figures keeps starting (the limit may also be one the operator knows
 * the load never reaches). Returns 0, or the exit status, with the worst
 * case, the limit and each model's share logged. */
int memmodel_check_limit(const app *a) {
    char from[2400];
    bool explicit_;
    const uint64_t limit = memory_limit(&a->cfg, from, sizeof from, &explicit_);
    const size_t worst = memmodel_worst_case_bytes(a);
    if (!limit || worst <= limit)
        return 0;
    const log_level level = explicit_ ? LOG_ERROR : LOG_WARN;
    if (explicit_)
        log_error("the worst-case memory is above the memory limit; lower max_batch_tokens, "
                  "max_connections, max_request_memory_bytes or the models, or raise the limit",
                  LOG_KV("worst_case_bytes", (uint64_t)worst), LOG_KV("limit_bytes", limit),
                  LOG_KV("limit_from", from));
    else
        log_warn("the worst-case memory is above the cgroup's memory limit: under full load "
                 "the process can be killed; lower max_batch_tokens, max_connections, "
                 "max_request_memory_bytes or the models, raise the limit, or set "
                 "memory_limit_bytes to refuse such a start",
                 LOG_KV("worst_case_bytes", (uint64_t)worst), LOG_KV("limit_bytes", limit),
                 LOG_KV("limit_from", from));
    for (size_t i = 0; i < a->nm; i++) {
        json_int_t owned, mapped, ws;
        memmodel_model(&a->m[i], &owned, &mapped, &ws);
        LOG_AT_(level, "the worst-case memory's share of a model", LOG_KV("model", a->m[i].name),
                LOG_KV("weights_bytes", (int64_t)(owned + mapped)),
                LOG_KV("workspace_bytes", (int64_t)ws));
    }
    return explicit_ ? CONFIG_EXIT_INVALID : 0;
}

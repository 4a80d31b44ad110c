/* attention_api.h — POST /v1/attention: the attention operator as a service.
 *
 * Request: {"q": T, "k": T, "v": T, "causal": false} where each tensor T is
 * either a nested array [seq][heads][head_dim] of numbers or
 * {"shape": [seq, heads, head_dim], "data": "<base64 of little-endian float32>"}.
 * q, k and v must have the same shape (self-attention over one sequence).
 * Response: {"output": T, "backend": "naive"} with output in the encoding q
 * used. Every request is one sequence of a packed varlen batch; requests
 * queued together run in one batch, one attention call per group of equal
 * (heads, head_dim, causal).
 *
 * Limits: heads <= ATTN_API_MAX_HEADS, head_dim <= ATTN_API_MAX_HEAD_DIM, and
 * a request costs seq * ceil(heads * head_dim / ATTN_API_ROW_FLOATS) tokens of
 * the scheduler's max_batch_tokens budget. The cost keeps the packed batch
 * within buffers sized once at start (max_batch_tokens rows of
 * ATTN_API_ROW_FLOATS floats per tensor), whatever the shapes. */
#ifndef ATTN_ATTENTION_API_H
#define ATTN_ATTENTION_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "server/http/http.h"
#include "server/http/routes.h"
#include "server/ops/engine.h"
#include "server/work/batch.h"
#include "server/work/scheduler.h"

#define ATTN_API_MAX_HEADS    128
#define ATTN_API_MAX_HEAD_DIM 256
#define ATTN_API_ROW_FLOATS   512

/* ---- the compute side: runs on the scheduler's compute thread ------------------- */

typedef struct attn_service attn_service;

/* The widest batch the service can be handed: what backends are checked
 * against and workspaces are sized for. */
attn_shape attn_service_bounds(int32_t max_batch_tokens, int32_t max_batch_requests);

/* Allocates every buffer a batch needs (packed Q, K, V, output, cu_seqlens,
 * the largest kernel workspace of any built-in backend, so a reload can swap
 * backends without allocating). Batches run with engine's backend in force
 * (srv_engine_backend), which must already have passed attn_backend_select
 * for the bounds. Returns NULL with a message in err. */
attn_service *attn_service_create(int32_t max_batch_tokens, int32_t max_batch_requests,
                                  tp_pool *pool, const srv_engine *engine, char *err,
                                  size_t err_len);
void attn_service_destroy(attn_service *svc);

/* Bytes allocated by attn_service_create. */
size_t attn_service_workspace_bytes(const attn_service *svc);

/* Runs the attention requests of a batch (ctx is the attn_service) and adds
 * the trace line's "attention" member: the runner's batch_kind run and
 * trace (batch.h). Batches run with the engine's backend in force
 * (srv_engine_backend). */
int attn_service_run_batch(const sched_batch *b, void *ctx);
int attn_service_trace(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified);

/* ---- shadow verification and trace ---- */
struct verifier;

/* Batches sampled by v (may be NULL: off) have their first group's attention
 * captured for checking. Set before serving. */
void attn_service_set_verifier(attn_service *svc, struct verifier *v);

/* What the last run_batch did, for the trace: groups run, their kernel
 * time, and whether one of them was captured for verification. */
typedef struct attn_batch_info {
    int32_t groups;
    uint64_t kernel_ns;
    bool verified;
} attn_batch_info;
const attn_batch_info *attn_service_last_batch(const attn_service *svc);

/* ---- the HTTP side: runs on the codec workers -------------------------------------- */

typedef struct attn_api {
    attn_service *svc;
    sched *sched;
    int kind;                           /* the runner's id of the attention service */
    int32_t max_batch_tokens;           /* the start-time ceiling */
    _Atomic int64_t request_timeout_ms; /* reloadable */
} attn_api;

/* Checks and decodes a request's JSON object as the route does (the route
 * calls it; tests/fuzz drives it with arbitrary bodies). Only
 * api->max_batch_tokens is read. Returns the job, freed with attn_job_free,
 * or NULL with the SRV_E* code in *err and a message in msg. */
typedef struct attn_job attn_job;
attn_job *attn_api_decode(const attn_api *api, json_t *root, int *err, char *msg, size_t msg_len);
void attn_job_free(attn_job *job);

/* Route functions for http_route (ctx is the attn_api). */
int attn_api_handle(http_request *req, void *ctx);
int attn_api_resumed(http_request *req, void *ctx);

/* Registers the attention service as a kind with runner (api->kind is set)
 * and POST /v1/attention in t. api->svc must be set. Returns 0, or -1 when
 * a table is full or the route is taken. */
int attn_api_register(attn_api *api, batch_runner *runner, routes *t);

#endif

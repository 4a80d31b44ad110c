/* embed_service.h — the embeddings compute service: runs the embedding jobs
 * of a batch through one packed engine forward on the scheduler's compute
 * thread. Registered with the runner (batch.h) as the "embed" kind. */
#ifndef ATTN_EMBED_SERVICE_H
#define ATTN_EMBED_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/threadpool.h"
#include "model/bert.h"
#include "server/api/attention_api.h"
#include "server/ops/engine.h"
#include "server/work/scheduler.h"

/* ---- the compute side: runs on the scheduler's compute thread ------------------- */

typedef struct embed_service embed_service;

/* Allocates, once, the packed ids, cu_seqlens and output of the largest
 * batch. Every batch runs as one forward of engine (which owns the model,
 * its workspace and the attention backend in force, read once per batch, so
 * a backend swap applies to the model and the attention endpoint alike).
 * Returns NULL with a message in err. */
embed_service *embed_service_create(srv_engine *engine, int32_t max_batch_tokens,
                                    int32_t max_batch_requests, char *err, size_t err_len);
void embed_service_destroy(embed_service *svc);

/* The engine batches run on (what x-engine and x-precision name). */
const srv_engine *embed_service_engine(const embed_service *svc);

/* Bytes allocated by embed_service_create (the engine's workspace is the
 * engine's: engine_memory_of). */
size_t embed_service_workspace_bytes(const embed_service *svc);

/* Runs the embedding requests of a batch (batch_run's part for them; ctx
 * is the embed_service), and adds the trace line's "embed" member: the
 * runner's batch_kind run and trace. */
int embed_service_run_batch(const sched_batch *b, void *ctx);
int embed_service_trace(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified);

/* ---- shadow verification and trace ---- */
struct verifier;

/* Batches sampled by v (may be NULL: off) have the attention of one layer,
 * drawn at random, captured for checking. Set before serving. */
void embed_service_set_verifier(embed_service *svc, struct verifier *v);

/* What the last run_batch did, for the trace. */
typedef struct embed_batch_info {
    int32_t sequences, tokens; /* 0 when no forward ran */
    bert_stage_ns stages;      /* of its forward */
    int verified_layer;        /* -1: not captured */
} embed_batch_info;
const embed_batch_info *embed_service_last_batch(const embed_service *svc);

#endif

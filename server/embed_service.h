/* embed_service.h — the embeddings compute service: runs the embedding jobs
 * of a batch through one packed bert_forward on the scheduler's compute
 * thread. Registered with the runner (batch.h) as the "embed" kind. */
#ifndef ATTN_EMBED_SERVICE_H
#define ATTN_EMBED_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attention_api.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "scheduler.h"

/* ---- the compute side: runs on the scheduler's compute thread ------------------- */

typedef struct embed_service embed_service;

/* Allocates, once, the model workspace for max_batch_tokens tokens with the
 * scratch of every backend in backends[0..nbackends) (those a reload may
 * select), and the packed ids, cu_seqlens and output of the largest batch.
 * The backend each batch uses is attn's, read once per batch, so a backend
 * swap (sched_call) applies to the model and the attention endpoint alike.
 * Returns NULL with a message in err. */
embed_service *embed_service_create(const bert_model *model, const attn_service *attn,
                                    tp_pool *pool, int32_t max_batch_tokens,
                                    int32_t max_batch_requests, const attn_backend *const *backends,
                                    size_t nbackends, char *err, size_t err_len);
void embed_service_destroy(embed_service *svc);

/* Bytes allocated by embed_service_create (the model workspace included). */
size_t embed_service_workspace_bytes(const embed_service *svc);

/* Runs the embedding requests of a batch (batch_run's part for them; ctx
 * is the embed_service), and adds the trace line's "embed" member: the
 * runner's batch_kind run and trace. */
int embed_service_run_batch(const sched_batch *b, void *ctx);
int embed_service_trace(void *ctx, const sched_batch *part, char *buf, size_t cap, bool *verified);

/* ---- shadow verification and trace (issue 7 §2, §3) ---- */
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

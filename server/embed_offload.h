/* embed_offload.h — decoding a large embeddings request off the I/O thread.
 *
 * Decoding tokenizes every input, and a long document (a chunked 1 MB text,
 * or a long input that truncation reads whole to count it) takes the
 * tokenizer tens to hundreds of milliseconds: on libmicrohttpd's one I/O
 * thread that would hold every other client, /health included. So a request
 * whose body is larger than tokenize_offload_bytes is parked (as a request
 * waiting for its batch is, job.h) and decoded on the tokenization thread;
 * the route's resumed handler then submits the job or answers the refusal.
 * Smaller requests decode inline, as before: a hand-off costs two thread
 * switches, more than tokenizing a short text.
 *
 * One thread, tasks in arrival order: the tokenizer is read-only and
 * thread-safe (model/tokenizer.h), and one core is what the I/O thread would
 * have spent. The task's allocations are charged to the request-memory
 * budget in a scope of its own, with the request's body and parse tree
 * counted as held, so a refusal is the same 413 or 503 as inline. */
#ifndef ATTN_EMBED_OFFLOAD_H
#define ATTN_EMBED_OFFLOAD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "embed_codec.h"
#include "http.h"

/* A route's decoding: the job for root (not stolen), or NULL with the
 * refusal in r (and a budget refusal in membudget_refused()). */
typedef embed_job *(*embed_decode_fn)(void *ctx, json_t *root, embed_refusal *r);

/* Starts the tokenization thread, once; 0, or -1 when it cannot. */
int embed_offload_start(void);
/* Stops it; every offloaded request must have been answered (after the
 * drain, before the HTTP server is destroyed). */
void embed_offload_stop(void);

/* Bodies larger than this many bytes are decoded off the I/O thread
 * (tokenize_offload_bytes; 0 offloads all, reloadable). */
void embed_offload_set_threshold(size_t bytes);
bool embed_offload_wanted(http_request *req);

/* Parks req and decodes root with fn(ctx, ...) on the tokenization thread,
 * then frees root (http_body_json_free) and resumes req. Returns what a
 * handler returns. */
int embed_offload(http_request *req, json_t *root, embed_decode_fn fn, void *ctx);
/* embed_offload for a route whose jobs hold more than an embed_job (the
 * scoring routes' score_job, its first member one): release frees what fn
 * gives, and is the submitted job's release. */
int embed_offload_release(http_request *req, json_t *root, embed_decode_fn fn, void *ctx,
                          void (*release)(void *job));

/* In a route's resumed handler: when req was parked for its decoding, submits
 * the job (api's scheduler and deadline) or answers the refusal, sets
 * *answered and returns true; false when req is a job that ran. */
bool embed_offload_resumed(http_request *req, const embed_api *api, int *answered);

/* Frees a task (embed_job_release's part for a placeholder job). */
struct embed_offload_task;
void embed_offload_task_free(struct embed_offload_task *t);

#endif

/* embed_dialect.h — the OpenAI embeddings body as a job, and the answers
 * of finished jobs in OpenAI's and TEI's shapes, plain or chunked. Decoding
 * on its own: the route calls it, and tests/fuzz drives it with arbitrary
 * bodies; it reads tok, model, model_name, truncate and the limits of api,
 * never svc or sched. */
#ifndef ATTN_EMBED_DIALECT_H
#define ATTN_EMBED_DIALECT_H

#include <jansson.h>
#include <stddef.h>

#include "server/api/embed_codec.h"
#include "server/api/jwriter.h"

/* Checks, tokenizes and decodes a request's JSON object as /v1/embeddings
 * does (root is not stolen; the job keeps nothing of it). Returns the job,
 * freed with embed_job_free, or NULL with the refusal in r. */
embed_job *embed_openai_decode(const embed_api *api, json_t *root, embed_refusal *r);

/* Writes the answer for a finished job in its route's shape (C: the model's
 * output size) to w, chunked or not; a refusal leaves w failed
 * (jwriter.h). */
void embed_encode(embed_job *job, int C, jwriter *w);

#endif

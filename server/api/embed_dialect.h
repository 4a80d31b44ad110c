/* embed_dialect.h — the OpenAI and TEI embeddings bodies as jobs, and the
 * answers of finished jobs, plain or chunked. Decoding on its own: the
 * routes call these, and tests/fuzz drives them with arbitrary bodies; they
 * read tok, model, model_name, truncate and the limits of api, never svc or
 * sched. */
#ifndef ATTN_EMBED_DIALECT_H
#define ATTN_EMBED_DIALECT_H

#include <jansson.h>
#include <stddef.h>

#include "server/api/embed_codec.h"
#include "server/api/jwriter.h"

/* Checks, tokenizes and decodes a request's JSON object as /v1/embeddings
 * (EMBED_ROUTE_OPENAI) or /embed (EMBED_ROUTE_TEI) does. Returns the job,
 * freed with embed_job_free, or NULL with the SRV_E* code in *err and a
 * message in msg. */
embed_job *embed_api_decode(const embed_api *api, embed_route route, json_t *root, int *err,
                            char *msg, size_t msg_len);

/* embed_api_decode with the whole refusal. */
embed_job *embed_api_decode_refusal(const embed_api *api, embed_route route, json_t *root,
                                    embed_refusal *r);

/* Writes the answer for a finished job in its route's shape (C: the model's
 * output size) to w, chunked or not; a refusal leaves w failed
 * (jwriter.h). */
void embed_encode(embed_job *job, int C, jwriter *w);

#endif

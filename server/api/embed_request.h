/* embed_request.h — the one embeddings request every dialect decodes into,
 * the one path from it to a job, and the one place a finished job's
 * vectors are post-processed.
 *
 * A dialect (OpenAI's /v1/embeddings, TEI's /embed, /embed_all and
 * /similarity, llama.cpp's /embedding, ...) reads its body with its own
 * field table (fields.h), fills an embed_request — the inputs as the body
 * holds them and what to do with them — and calls embed_request_job; once
 * the job has run, its answer writer takes each vector through
 * embed_vector_finish (embed_codec.h: the chunked answers use it too) and
 * writes it in the dialect's shape. Adding a dialect is its table, the
 * request it fills and its answer; adding a field a dialect maps onto
 * this request is a table row and one assignment. Pooling is the model's
 * (its Pooling module): no dialect picks it. */
#ifndef ATTN_EMBED_REQUEST_H
#define ATTN_EMBED_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api/embed_codec.h"

typedef struct embed_request {
    /* The inputs, as the body holds them (borrowed: the job copies what it
     * keeps), and the body's name for them in messages and `param`. */
    json_t *input;
    const char *field;
    embed_inputs grammar;
    const char *prompt; /* put before every text; NULL: none */
    bool truncate;      /* cut a text past max_seq_length, else refuse it */
    embed_truncation direction;
    /* Chunking (embed_chunk.h): the body's "chunking" object and "stream"
     * value as given, NULL when absent; read after the model's task. */
    const json_t *chunking, *stream;
    /* The answer. */
    int answer;          /* API_OPENAI, API_TEI (embed_encode.s shapes) or API_TEI_SIMILARITY */
    bool normalize;      /* L2 over the whole vector in the batch, again after a cut */
    int p_norm;          /* llama.cpp's embd_normalize at answer time; EMBED_PNORM_NONE */
    int64_t dimensions;  /* keep the first this many (0: all) */
    bool base64;         /* vectors as base64 of little-endian float32 */
    const json_t *model; /* the name to echo (API_OPENAI); NULL: the served model's */
    bool hidden;         /* also every token's last hidden state (TEI's /embed_all) */
} embed_request;

/* A request for api's inputs `input` named field in grammar, with every
 * other choice at its default: truncation as api's setting, on the right,
 * no prompt, no chunking, unit vectors in OpenAI's shape. */
embed_request embed_request_of(const embed_api *api, json_t *input, const char *field,
                               embed_inputs grammar);

/* The job for q: the model's task checked, then the chunking (refused
 * beside a prompt, which would shift every chunk's offsets) and the
 * stream, then every input tokenized (or taken as token ids), checked
 * against the limits and charged to the request-memory budget, and the
 * outputs allocated. NULL with the refusal in r (its param the input
 * field's where the inputs are at fault). */
embed_job *embed_request_job(const embed_api *api, const embed_request *q, embed_refusal *r);

#endif

/* embed_job.h — the job an embeddings, rerank or classification request
 * becomes: its inputs' tokens, the vectors or logits the batch writes, and
 * how the answer is shaped. Below every file that makes or answers one
 * (embed_codec.h, job_tokens.h, score_request.h), so that they need not
 * include each other. */
#ifndef ATTN_EMBED_JOB_H
#define ATTN_EMBED_JOB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/work/job.h"

typedef struct embed_job embed_job;

/* The answer's shape (API_TEI_SIMILARITY: TEI's /similarity's, which its
 * root route also answers). */
enum { API_OPENAI, API_TEI, API_TEI_SIMILARITY };

/* A decoded request: the job the service runs and the route answers. */
struct embed_job {
    job base;       /* first: the scheduler's request, kind, HTTP request, outcome */
    int api;        /* API_OPENAI or API_TEI: the answer's shape */
    int32_t n;      /* inputs */
    int32_t *cu;    /* (n + 1) token offsets of each input in ids */
    int32_t *ids;   /* (cu[n]) */
    size_t ids_cap; /* ints allocated for ids */
    float *out;     /* (n, C) pooled vectors, raw until run_batch */
    int out_dim;    /* C */
    bool normalize; /* run_batch L2-normalises each vector */
    /* llama.cpp's embd_normalize at answer time, when has_p_norm (a zeroed
     * job has none; p_norm 0 is llama.cpp's max-abs norm). */
    bool has_p_norm;
    int p_norm;
    int dimensions; /* OpenAI: keep the first this many (0: all) */
    bool base64;    /* OpenAI encoding_format */
    json_t *model;  /* OpenAI: the name to echo */
    float *hidden;  /* (cu[n], C) every token's last hidden state; NULL: not asked */
    /* (ids_cap) each token's type id, beside ids; NULL: every token type 0
     * (embeddings). score_api.h's pairs set it. */
    int32_t *type_ids;
    /* Chunking (embed_chunk.h): each of the n inputs above is a chunk of one
     * of n_docs documents; NULL doc_cu: the inputs are the request's own. */
    int32_t n_docs;
    int32_t *doc_cu;      /* (n_docs + 1) the first chunk of each document */
    uint32_t *spans;      /* (2 n) each chunk's bytes [start, stop) in its document */
    int doc_vector;       /* embed_doc_vector: how chunk vectors make a document's */
    bool stream;          /* "stream": true: NDJSON lines as the pieces complete */
    int32_t streamed_doc; /* the document of the next chunk line */
};

#endif

/* embed_chunk.h — whole documents in: a request's `"chunking"` cuts each text
 * input into windows of at most max_tokens tokens (special tokens included),
 * consecutive windows sharing `overlap` tokens, and each window (a chunk) runs
 * as one input of the request through the ordinary batches (job.h's pieces).
 * The answer gives, per document, every chunk's bytes [start, stop) in the
 * document as UTF-8 (the offsets /tokenize gives), its token count and its
 * vector, and a document vector made from the chunk vectors.
 *
 * Where a chunk ends. A window is cut on a token boundary; within its last
 * quarter the cut goes to the last sentence boundary (a sentence terminator
 * followed by whitespace, a line break, or a CJK full stop), else to the last
 * whitespace boundary, else at the window's end (a word with no boundary in
 * reach, such as a 100k-character word, is cut between its tokens). The next
 * chunk starts `overlap` tokens back from the cut, moved forward to the
 * first word start within the overlap when there is one.
 *
 * What a chunk's vector is. Each chunk's token ids are those of its own text
 * tokenized alone (so its vector is the one a plain request for
 * document[start, stop) gets); a chunk whose text alone takes more tokens
 * than the window (a cut inside a word re-tokenizes differently) is shrunk
 * until it fits. A document that fits one window is one chunk with the plain
 * request's ids.
 *
 * Bounds. A document has at most max_document_tokens tokens (413 beyond,
 * with both numbers); overlap is at most half the window (so the forward
 * runs at most about four times the document's tokens) and a request's
 * chunks number at most max_inputs_per_request (422 beyond, with the
 * numbers: chunks are the request's inputs); every array is charged to the request-memory budget,
 * which refuses with 413 (could never fit) or 503 (busy). */
#ifndef ATTN_EMBED_CHUNK_H
#define ATTN_EMBED_CHUNK_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/api/embed_codec.h"

/* How the chunk vectors of a document make its vector. */
typedef enum embed_doc_vector {
    EMBED_DOCVEC_NONE,           /* no document vector: `embedding` is null */
    EMBED_DOCVEC_MEAN,           /* the mean of the chunk vectors */
    EMBED_DOCVEC_TOKEN_WEIGHTED, /* weighted by each chunk's token count */
} embed_doc_vector;

typedef struct embed_chunking {
    int32_t max_tokens; /* tokens of a chunk, special tokens included */
    int32_t overlap;    /* tokens consecutive chunks share; <= (max_tokens - specials) / 2 */
    embed_doc_vector doc_vector;
} embed_chunking;

/* Reads a request's "chunking" object: max_tokens (default and ceiling the
 * max_seq_length in force), overlap (default 0) and document_vector ("none",
 * "mean" — the default — or "token_weighted"). Unknown members are refused.
 * Returns SRV_OK, or the SRV_E* code with the message in r. */
int embed_chunking_parse(const embed_api *api, const json_t *v, embed_chunking *out,
                         embed_refusal *r);

/* The job for `in` (field: the request's name for it; a string or an array
 * of strings): every document chunked as c says, its chunks the job's inputs
 * (job->doc_cu and job->spans set). NULL with the refusal in r; a refusal of
 * the request-memory budget shows in membudget_refused(). */
embed_job *embed_chunk_job(const embed_api *api, const char *field, json_t *in,
                           const embed_chunking *c, embed_refusal *r);

/* Document d's vector from its chunk vectors (job->out, C floats each, as the
 * batch left them), into v (C floats), L2-normalised when job->normalize. */
void embed_chunk_doc_vector(const embed_job *job, int32_t d, int C, float *v);

/* The answer of a chunked job in its route's shape: OpenAI's list whose items
 * carry `chunks` (and `embedding`: the document vector, or null), or for TEI
 * an array of {"embedding", "chunks"} per input. Vectors cut to
 * job->dimensions when set (renormalised when normalising). Written to w; a
 * refusal leaves w failed. */
void embed_chunk_encode(embed_job *job, int C, jwriter *w);

/* "stream": true on a chunked request (a boolean; true without chunking is
 * refused). Returns SRV_OK, or the SRV_E* code with the message in r. */
int embed_stream_parse(const json_t *v, bool chunked, bool *out, embed_refusal *r);

/* A streamed chunked job's NDJSON (job_submit_stream's on_piece and on_end,
 * on the scheduler's loop thread). Each piece writes one line per chunk it
 * ran, in order: {"document", "index", "start", "stop", "tokens",
 * "embedding"}, vectors as the unstreamed answer's. The end writes one line:
 * {"data": [{"index", "embedding", "chunks"}], "usage": {"prompt_tokens",
 * "total_tokens"}} (plus "object": "list" and "model" on OpenAI's routes)
 * with each document's vector and chunk count, or on a failure
 * {"error": {"message", "code"}} and the stream is cut. */
void embed_chunk_stream_piece(job *j);
void embed_chunk_stream_end(job *j);

/* Submits a decoded job for req: streamed when job->stream (NDJSON,
 * job_submit_stream), else parked until done (job_submit). */
int embed_submit(http_request *req, const embed_api *api, embed_job *job);

#endif

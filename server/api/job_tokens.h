/* job_tokens.h — the token arrays of an embed_job, as every route that
 * tokenizes into one builds them (embeddings, rerank, classification):
 * the job and its offsets, the ids (and type ids) grown as inputs are
 * tokenized, a text cut on the left, and the checks and output that end
 * the making of a job. Everything is charged to the request-memory budget
 * (membudget.h). */
#ifndef ATTN_JOB_TOKENS_H
#define ATTN_JOB_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"
#include "server/api/embed_job.h"
#include "server/api/errors.h"

/* A zeroed job of n inputs with its n + 1 offsets; NULL when out of memory. */
embed_job *job_tokens_new(int32_t n);

/* Room for `more` ints after the first `have` in job->ids, and with types
 * in job->type_ids beside them (allocated on the first call). Returns 0, or
 * -1 when out of memory (the arrays stay as they were). */
int job_tokens_reserve(embed_job *job, size_t have, size_t more, bool types);

/* Tokenizes text[0, len) into o (o->capacity tokens at most), cut on the
 * left when it is longer: the whole text, then its special tokens around
 * the last pieces that fit, as Hugging Face tokenizers do with
 * truncation_side "left" (the cut happens before the post-processor adds
 * them). The specials come from the tokenizer's own mask, not from empty
 * spans (trimmed byte-level offsets give whitespace pieces empty spans).
 * Fewer than least pieces of text left beside the specials is a tokenizer
 * this code does not understand: TOK_EINVAL, never cut. o->type_ids, when
 * set, is written 0. Returns a TOK_* code with o->n, o->n_full and
 * o->error_at as tok_encode sets them. */
int job_tokens_encode_left(const tok_tokenizer *tok, const char *text, size_t len, int32_t least,
                           tok_output *o);

/* Tokenizes text[0, len) whole, never cut, into o->ids and o->offsets,
 * which this allocates (request memory; the caller frees both whatever the
 * answer): a first try with room for guess tokens (the specials' and one
 * more at least), then, when the text has
 * more, with room for exactly o->n_full. No guess from the text's length
 * can bound it: a normalizer may make one byte many characters (NFKC makes
 * U+FDFA's three bytes eighteen characters, four words). Returns a TOK_*
 * code (TOK_ENOMEM when out of memory). */
int job_tokens_encode_whole(const tok_tokenizer *tok, const char *text, size_t len, int32_t guess,
                            tok_output *o);

/* The refusal of input i's tokenizer code rc that every route words the
 * same (TOK_ETOOLONG, which names the route's limit, is not one): text
 * that is not UTF-8 (error_at, its first bad byte), a text too complex for
 * the tokenizer, oom when out of memory, else an internal error. Returns
 * the refusal's code. */
int job_tokens_refuse(int rc, int32_t i, size_t error_at, int oom, srv_refusal *r);

/* The end of making a job of tokenized inputs: every input within a
 * batch's max_batch_tokens (the job runs in pieces of one batch each,
 * job.h; a larger input never could), the output of out_dim floats an
 * input, and the job's kind and scheduler group. Returns SRV_OK, or the
 * refusal in r: SRV_EINVALID, or oom when out of memory. */
int job_tokens_seal(embed_job *job, int32_t max_batch_tokens, int out_dim, int kind, uint32_t group,
                    int oom, srv_refusal *r);

#endif

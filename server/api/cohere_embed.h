/* cohere_embed.h — Cohere's embed, POST /v1/embed and POST /v2/embed, over
 * the one embeddings service.
 *
 * A body's texts (v1 and v2 `texts`, v2 `inputs` of one text part each) are
 * embedded as unit vectors with the model's prompt for `input_type` where
 * its config_sentence_transformers.json has one (search_query: "query",
 * search_document: "document" or "passage", classification, clustering;
 * else its default prompt, as with no prompt named), cut as `truncate` says
 * (END: the end, START: the start, NONE: refused when too long), and
 * answered as every `embedding_types` asks: float, base64 (the floats'
 * little-endian bytes), and the quantized kinds of sentence-transformers'
 * quantize_embeddings with the fixed ranges [-1, 1] in every dimension (a
 * unit vector's values lie there): int8/uint8 buckets of width 2/255,
 * binary/ubinary one bit per value (> 0), eight to a byte, first value in
 * the high bit, binary being ubinary - 128. Errors come in the shape of the
 * other Cohere route, /v1/rerank (OpenAI's). */
#ifndef ATTN_COHERE_EMBED_H
#define ATTN_COHERE_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "server/api/compat_api.h"
#include "server/http/routes.h"

/* The quantized forms of a unit vector v[0, d): out[k] for int8 and uint8
 * (d values), for binary and ubinary ((d + 7) / 8 bytes, the last padded
 * with zero bits). Exposed for the unit tests. */
void cohere_quantize_uint8(const float *v, size_t d, uint8_t *out);
void cohere_quantize_int8(const float *v, size_t d, int8_t *out);
void cohere_pack_ubinary(const float *v, size_t d, uint8_t *out);
void cohere_pack_binary(const float *v, size_t d, int8_t *out);

/* Registers POST /v1/embed and POST /v2/embed with c (its prompts, its
 * model; a request naming another served model goes to that one's
 * compat_api, c->peers). Returns 0, or -1 (routes_add). */
int cohere_embed_register(compat_api *c, routes *t);

#endif

/* jwriter.h — answers written as JSON text straight into the response
 * buffer, for the answers that carry vectors.
 *
 * A jansson tree costs a value per float and a printf per float to dump; a
 * 2048-input answer is tens of megabytes of tree. The writer appends text to
 * one growable buffer instead, floats in their shortest form (f32text.h) or
 * as base64, and hands the buffer to http_reply_buffer, which sends it
 * without a copy. The buffer comes from membudget_malloc, so it is charged
 * to the request-memory budget of the thread's scope like everything else a
 * request holds.
 *
 * A writer that cannot grow (the budget refused, or memory ran out) fails
 * for good: every later call is a no-op and jw_reply answers the budget's
 * 503/413 (or 500), never the truncated text. Callers write without checking
 * each call. */
#ifndef ATTN_JWRITER_H
#define ATTN_JWRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/http/http.h"

typedef struct jwriter {
    char *buf; /* membudget_malloc'd; NULL until the first write */
    size_t len, cap;
    bool failed;    /* a growth was refused: the text is incomplete */
    bool nonfinite; /* a NaN or an infinity was written (as null) */
} jwriter;

/* An empty writer with room for about hint bytes reserved (0: none yet). */
void jw_init(jwriter *w, size_t hint);
/* Frees the buffer unless jw_take took it. */
void jw_free(jwriter *w);

/* Room for more bytes after len; false (and failed) when refused. */
bool jw_reserve(jwriter *w, size_t more);

void jw_raw(jwriter *w, const char *s, size_t n);
/* A string literal, without strlen. */
#define jw_lit(w, s) jw_raw((w), "" s, sizeof(s) - 1)
/* s[0, n) as a JSON string: quoted, with '"', '\\' and control characters
 * escaped as jansson escapes them; other bytes (UTF-8) as they are. */
void jw_str(jwriter *w, const char *s, size_t n);
void jw_int(jwriter *w, int64_t v);
/* v in its shortest form (f32text_write); NaN and infinities as null, and
 * noted in nonfinite. */
void jw_f32(jwriter *w, float v);
/* [v0,v1,...] */
void jw_f32s(jwriter *w, const float *v, size_t n);
/* n floats as one JSON string: base64 of their little-endian bytes (OpenAI's
 * encoding_format "base64"). */
void jw_f32_base64(jwriter *w, const float *v, size_t n);

/* The base64 text of n floats' little-endian bytes, padded: what
 * jw_f32_base64 writes between the quotes. out holds
 * JW_BASE64_LEN(n) bytes; returns that length. */
#define JW_BASE64_LEN(n) (((n)*4 + 2) / 3 * 4)
size_t jw_base64_f32(char *out, const float *v, size_t n);

/* "<prefix>-" and 32 hex digits, into id: an answer's id, as Infinity,
 * vLLM and Cohere give one; unique enough to tell answers apart in logs,
 * not a secret. prefix is short (a word). */
#define JW_ID_LEN 64
void jw_make_id(char id[JW_ID_LEN], const char *prefix);

/* The text written, its ownership passed to the caller (membudget_free it),
 * or NULL when the writer failed; the writer is left empty. */
char *jw_take(jwriter *w, size_t *len);

/* Sends the text written as an application/json answer with this status
 * (http_reply_buffer) and empties w. A failed writer is answered with the
 * budget's refusal, else 500; a writer that met a non-finite value with
 * 500 (JSON has no number for it). */
int jw_reply(http_request *req, unsigned status, jwriter *w);

#endif

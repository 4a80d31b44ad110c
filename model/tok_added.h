/* tok_added.h — tokenizer.json's added tokens ("<mask>", "<|endoftext|>",
 * "[CLS]" typed in the text) found as the library's AddedVocabulary finds
 * them, for every tokenizer model.
 *
 * The library matches the tokens with a leftmost-longest automaton, first
 * those with normalized false on the raw text, then those with normalized
 * true on each normalized piece between the first ones; a match that fails
 * single_word is dropped and the search goes on after it; lstrip and rstrip
 * take the whitespace around a kept match into it. */
#ifndef ATTN_TOK_ADDED_H
#define ATTN_TOK_ADDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct tok_added_token {
    char *content; /* as written in tokenizer.json, NUL-terminated */
    size_t len;
    char *match; /* what is searched: content, or for a normalized token
                    content through the normalizer (set by the model) */
    size_t match_len;
    int32_t id;
    bool lstrip, rstrip, single_word, normalized, special;
} tok_added_token;

typedef struct tok_added_set {
    tok_added_token *v;
    int n;
    bool any_normalized;
    uint8_t first[256]; /* bit 1: a raw token starts with this byte; bit 2: a normalized one */
    int *order;         /* [n] token indices by first byte, longest first within one */
    int at[257];        /* order[at[b], at[b + 1]): the tokens starting with byte b */
    uint8_t *word;      /* [0x110000 / 8] the regex crate's \w, only with a single_word token */
    /* Looked up once a token when decoding, among thousands (Gemma's):
     * by_id, the indices by id (the lowest index first among equal ids);
     * specials, the special tokens' indices by content. */
    int *by_id;
    int *specials;
    int nspecials;
} tok_added_set;

/* Reads added_tokens (an array or absent) into s: contents, ids below
 * max_id, the four flags. Normalized tokens match their content until
 * tok_added_set_match gives their normalized form. TOK_ELOAD / TOK_ENOMEM
 * with the reason in err. */
int tok_added_load(tok_added_set *s, json_t *arr, int64_t max_id, const char *file, char *err,
                   size_t err_len);
/* Sets what normalized token i is searched as (copied). */
int tok_added_set_match(tok_added_set *s, int i, const char *match, size_t len);
void tok_added_free(tok_added_set *s);

/* The token with this id, or NULL. */
const tok_added_token *tok_added_by_id(const tok_added_set *s, int32_t id);

/* Whether s[0, len) is the content of a special token. */
bool tok_added_is_special(const tok_added_set *s, const char *text, size_t len);

/* One pass over a text: where the automaton resumes and where the last
 * kept match (with its stripped whitespace) ended. Zero it to start. */
typedef struct tok_added_iter {
    size_t search, floor;
} tok_added_iter;

/* The next kept match among the tokens with normalized == normalized in
 * text[0, len) (valid UTF-8): the token, and its span [*start, *end) with
 * the whitespace lstrip and rstrip take; NULL when none is left. *start can
 * fall before the previous span's end only where the library's does too. */
const tok_added_token *tok_added_next(const tok_added_set *s, bool normalized, const char *text,
                                      size_t len, tok_added_iter *it, size_t *start, size_t *end);

#endif

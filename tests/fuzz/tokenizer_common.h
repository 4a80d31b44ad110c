/* tokenizer_common.h — the checks both tokenizer targets make on tok_encode
 * (tokenizer.c with the WordPiece model, tokenizer_unigram.c with the
 * SentencePiece Unigram one, tokenizer_bpe.c with the byte-level BPE one,
 * tokenizer_normalizers.c, tokenizer_split.c and tokenizer_families.c with
 * several tokenizers each); each target hands its tokenizer to
 * fuzz_tokenizer_one().
 *
 * The first byte picks truncation (bit 0) and the capacity (the rest: one of
 * a few, from below the special tokens up to the model's 512); the other
 * bytes are the text. Checks, beyond no crash, leak or undefined behaviour:
 * the return code fits the inputs; ids are in the vocabulary; every offset
 * lies within the text, on UTF-8 character boundaries, never going back;
 * exactly the post-processor's tokens are special, with empty spans, and no
 * other span is empty (both relaxed where offsets are trimmed, see
 * trimmed_offsets()); a truncated encoding
 * is the full one with its middle cut (as tok_encode promises); and the ids
 * decode (tok_decode) to valid UTF-8, with and without the special tokens.
 * A target over several tokenizer folders spends one more leading byte on
 * picking the folder (fuzz_tokenizer_pick). */
#ifndef ATTN_FUZZ_TOKENIZER_COMMON_H
#define ATTN_FUZZ_TOKENIZER_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/tokenizer.h"

/* The tokenizer of dir, or exit: a target that cannot load one tests nothing. */
static inline tok_tokenizer *fuzz_load(const char *dir) {
    tok_tokenizer *tok = NULL;
    char err[512];
    if (tok_load(&tok, dir, err, sizeof err) != TOK_OK) {
        fprintf(stderr, "cannot load the tokenizer of %s: %s\n", dir, err);
        exit(1);
    }
    return tok;
}

static inline const tok_tokenizer *tokenizer_at(const char *dir) {
    static tok_tokenizer *tok;
    if (!tok)
        tok = fuzz_load(dir);
    return tok;
}

static int utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] < 0x80                    ? 1
                   : p[i] >= 0xC2 && p[i] <= 0xDF ? 2
                   : p[i] >= 0xE0 && p[i] <= 0xEF ? 3
                   : p[i] >= 0xF0 && p[i] <= 0xF4 ? 4
                                                  : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80)
                return 0;
        i += k;
    }
    return 1;
}

/* Decoding what was encoded works and gives UTF-8, as the library's does. */
static void check_decode(const tok_tokenizer *tok, const tok_output *o) {
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        size_t len = 0;
        int rc = tok_decode(tok, o->ids, (size_t)o->n, skip, &text, &len);
        FUZZ_CHECK(rc == TOK_OK && text && strlen(text) <= len, "tok_decode: %d", rc);
        FUZZ_CHECK(utf8_valid(text, len), "decoded text is not UTF-8");
        free(text);
    }
}

static int is_continuation(const uint8_t *text, size_t len, size_t at) {
    return at < len && (text[at] & 0xC0) == 0x80;
}

/* Encodes with fresh arrays of capacity; the caller frees them (enc_free). */
static int encode(const tok_tokenizer *tok, const uint8_t *text, size_t len, int truncate,
                  int32_t capacity, tok_output *out) {
    size_t n = (size_t)(capacity ? capacity : 1);
    *out = (tok_output){.capacity = capacity};
    out->ids = malloc(n * sizeof *out->ids);
    out->offsets = malloc(n * sizeof *out->offsets);
    out->special = malloc(n);
    FUZZ_CHECK(out->ids && out->offsets && out->special, "out of memory");
    return tok_encode(tok, (const char *)text, len, truncate, out);
}

static void enc_free(tok_output *o) {
    free(o->ids);
    free(o->offsets);
    free(o->special);
}

/* Offsets trimmed by RobertaProcessing (the BPE target) may be empty or, after
 * a multi-byte space, inside a character, as the library's are. */
static int trimmed_offsets(const tok_tokenizer *tok) {
    return strcmp(tok_model_type(tok), "BPE") == 0;
}

static void check_ok(const tok_tokenizer *tok, const uint8_t *text, size_t len,
                     const tok_output *o) {
    const int32_t nspecial = tok_num_special(tok);
    const int trimmed = trimmed_offsets(tok);
    FUZZ_CHECK(o->n >= nspecial && o->n <= o->capacity && o->n <= o->n_full, "n %d, n_full %d",
               o->n, o->n_full);
    int32_t specials = 0;
    uint32_t last_start = 0, last_end = 0;
    for (int32_t i = 0; i < o->n; i++) {
        FUZZ_CHECK(o->ids[i] >= 0 && o->ids[i] < tok_vocab_size(tok) &&
                       tok_id_to_token(tok, o->ids[i]),
                   "id %d at %d", o->ids[i], i);
        tok_span sp = o->offsets[i];
        FUZZ_CHECK(o->special[i] <= 1, "special flag %d", o->special[i]);
        if (o->special[i]) {
            FUZZ_CHECK(sp.start == 0 && sp.end == 0, "special token %d spans [%u, %u)", i, sp.start,
                       sp.end);
            specials++;
            continue;
        }
        FUZZ_CHECK(sp.start <= sp.end && sp.end <= len, "span [%u, %u) of %zu bytes", sp.start,
                   sp.end, len);
        FUZZ_CHECK(trimmed || sp.start < sp.end, "token %d has an empty span", i);
        FUZZ_CHECK(trimmed || (!is_continuation(text, len, sp.start) &&
                               !is_continuation(text, len, sp.end)),
                   "span [%u, %u) cuts a character", sp.start, sp.end);
        /* Pieces of one character (a Hangul syllable split into jamo, a
         * prefix space and the character it stands before) share its span,
         * as in Hugging Face's tokenizer; spans never go back. */
        FUZZ_CHECK(sp.start >= last_start && sp.end >= last_end, "span [%u, %u) after [%u, %u)",
                   sp.start, sp.end, last_start, last_end);
        last_start = sp.start;
        last_end = sp.end;
    }
    FUZZ_CHECK(specials == nspecial, "%d special tokens, the post-processor adds %d", specials,
               nspecial);
}

static int fuzz_tokenizer_one(const tok_tokenizer *tok, const uint8_t *data, size_t size) {
    static const int32_t capacities[] = {0, 1, 2, 3, 4, 8, 16, 128, 512};
    if (size == 0)
        return 0;
    const int truncate = data[0] & 1;
    const int32_t capacity = capacities[(data[0] >> 1) % (sizeof capacities / sizeof *capacities)];
    const uint8_t *text = data + 1;
    const size_t len = size - 1;
    const int32_t nspecial = tok_num_special(tok);

    tok_output o;
    int rc = encode(tok, text, len, truncate, capacity, &o);
    switch (rc) {
    case TOK_EINVAL:
        FUZZ_CHECK(capacity < nspecial, "TOK_EINVAL with capacity %d", capacity);
        break;
    case TOK_EUTF8:
        FUZZ_CHECK(capacity >= nspecial && o.error_at < len, "error_at %zu of %zu", o.error_at,
                   len);
        break;
    case TOK_ETOOLONG:
        FUZZ_CHECK(!truncate && o.n_full > capacity, "TOK_ETOOLONG: n_full %d, capacity %d",
                   o.n_full, capacity);
        break;
    case TOK_OK:
        check_ok(tok, text, len, &o);
        check_decode(tok, &o);
        FUZZ_CHECK(truncate || o.n == o.n_full, "n %d, n_full %d untruncated", o.n, o.n_full);
        break;
    default:
        FUZZ_CHECK(0, "tok_encode returned %d (%s)", rc, tok_strerror(rc));
    }
    /* Truncation keeps the head specials, the first pieces and the tail
     * specials of the whole encoding. */
    if (rc == TOK_OK && o.n < o.n_full) {
        tok_output full;
        int rc_full = encode(tok, text, len, 0, o.n_full, &full);
        FUZZ_CHECK(rc_full == TOK_OK && full.n == o.n_full, "untruncated: %d, n %d of %d", rc_full,
                   full.n, o.n_full);
        check_ok(tok, text, len, &full);
        /* The whole encoding has pieces (it is longer), so its leading
         * empty spans are exactly the head specials. */
        int32_t head = 0;
        while (head < full.n && full.special[head])
            head++;
        const int32_t tail = nspecial - head;
        for (int32_t i = 0; i < o.n; i++) {
            int32_t j = i < o.n - tail ? i : full.n - (o.n - i);
            FUZZ_CHECK(o.ids[i] == full.ids[j] && o.offsets[i].start == full.offsets[j].start &&
                           o.offsets[i].end == full.offsets[j].end,
                       "truncated token %d differs from token %d of the whole", i, j);
        }
        enc_free(&full);
    }
    enc_free(&o);
    return 0;
}

/* The most folders one target picks among (tokenizer_split.c has 12). */
#define FUZZ_MAX_FOLDERS 16

/* For a target over n tokenizer folders: the first byte picks dirs[its value
 * % n], loaded the first time it is picked and kept, and the rest goes to
 * fuzz_tokenizer_one. */
static inline int fuzz_tokenizer_pick(const char *const *dirs, size_t n, const uint8_t *data,
                                      size_t size) {
    static tok_tokenizer *loaded[FUZZ_MAX_FOLDERS];
    if (n > FUZZ_MAX_FOLDERS) {
        fprintf(stderr, "%zu tokenizer folders, at most %d\n", n, FUZZ_MAX_FOLDERS);
        exit(1);
    }
    if (size == 0)
        return 0;
    const size_t pick = data[0] % n;
    if (!loaded[pick])
        loaded[pick] = fuzz_load(dirs[pick]);
    return fuzz_tokenizer_one(loaded[pick], data + 1, size - 1);
}

#endif

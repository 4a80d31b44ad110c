/* tokenizer.c — fuzzes tok_encode on arbitrary bytes with the real
 * vocabulary (fuzz_model_dir()).
 *
 * The first byte picks truncation (bit 0) and the capacity (the rest: one of
 * a few, from below the special tokens up to the model's 512); the other
 * bytes are the text. Checks, beyond no crash, leak or undefined behaviour:
 * the return code fits the inputs; ids are in the vocabulary; every offset
 * lies within the text, on UTF-8 character boundaries, never going back; exactly the
 * post-processor's tokens have empty spans; and a truncated encoding is the
 * full one with its middle cut (as tok_encode promises). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/tokenizer.h"

static const tok_tokenizer *tokenizer(void) {
    static tok_tokenizer *tok;
    if (!tok) {
        char err[512];
        if (tok_load(&tok, fuzz_model_dir(), err, sizeof err) != TOK_OK) {
            fprintf(stderr, "cannot load the tokenizer (run `make model`): %s\n", err);
            exit(1);
        }
    }
    return tok;
}

static int is_continuation(const uint8_t *text, size_t len, size_t at) {
    return at < len && (text[at] & 0xC0) == 0x80;
}

/* Encodes with fresh arrays of capacity; the caller frees out->ids and
 * out->offsets. */
static int encode(const tok_tokenizer *tok, const uint8_t *text, size_t len, int truncate,
                  int32_t capacity, tok_output *out) {
    *out = (tok_output){.capacity = capacity};
    out->ids = malloc((size_t)(capacity ? capacity : 1) * sizeof *out->ids);
    out->offsets = malloc((size_t)(capacity ? capacity : 1) * sizeof *out->offsets);
    FUZZ_CHECK(out->ids && out->offsets, "out of memory");
    return tok_encode(tok, (const char *)text, len, truncate, out);
}

static void check_ok(const tok_tokenizer *tok, const uint8_t *text, size_t len,
                     const tok_output *o) {
    const int32_t nspecial = tok_num_special(tok);
    FUZZ_CHECK(o->n >= nspecial && o->n <= o->capacity && o->n <= o->n_full, "n %d, n_full %d",
               o->n, o->n_full);
    int32_t empty = 0;
    uint32_t last_start = 0, last_end = 0;
    for (int32_t i = 0; i < o->n; i++) {
        FUZZ_CHECK(o->ids[i] >= 0 && o->ids[i] < tok_vocab_size(tok) &&
                       tok_id_to_token(tok, o->ids[i]),
                   "id %d at %d", o->ids[i], i);
        tok_span sp = o->offsets[i];
        FUZZ_CHECK(sp.start <= sp.end && sp.end <= len, "span [%u, %u) of %zu bytes", sp.start,
                   sp.end, len);
        if (sp.start == sp.end) {
            empty++;
            continue;
        }
        FUZZ_CHECK(!is_continuation(text, len, sp.start) && !is_continuation(text, len, sp.end),
                   "span [%u, %u) cuts a character", sp.start, sp.end);
        /* Pieces of one character (a Hangul syllable split into jamo)
         * share its span, as in Hugging Face's tokenizer; spans never go
         * back. */
        FUZZ_CHECK(sp.start >= last_start && sp.end >= last_end, "span [%u, %u) after [%u, %u)",
                   sp.start, sp.end, last_start, last_end);
        last_start = sp.start;
        last_end = sp.end;
    }
    FUZZ_CHECK(empty == nspecial, "%d empty spans, %d special tokens", empty, nspecial);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int32_t capacities[] = {0, 1, 2, 3, 4, 8, 16, 128, 512};
    if (size == 0)
        return 0;
    const tok_tokenizer *tok = tokenizer();
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
        while (head < full.n && full.offsets[head].start == full.offsets[head].end)
            head++;
        const int32_t tail = nspecial - head;
        for (int32_t i = 0; i < o.n; i++) {
            int32_t j = i < o.n - tail ? i : full.n - (o.n - i);
            FUZZ_CHECK(o.ids[i] == full.ids[j] && o.offsets[i].start == full.offsets[j].start &&
                           o.offsets[i].end == full.offsets[j].end,
                       "truncated token %d differs from token %d of the whole", i, j);
        }
        free(full.ids);
        free(full.offsets);
    }
    free(o.ids);
    free(o.offsets);
    return 0;
}

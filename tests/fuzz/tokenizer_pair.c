/* tokenizer_pair.c — fuzzes tok_encode_pair on arbitrary bytes with three
 * pair templates: XLM-R's TemplateProcessing (tests/golden/xlmr-tiny),
 * RoBERTa's byte-level BPE with RobertaProcessing (roberta-tiny) and
 * BertProcessing on the Unigram model (pair-bert, the second text type 1).
 *
 * Byte 0: bits 0-1 the tokenizer, bits 2-3 truncation (none, right, left),
 * the rest the capacity (one of a few, from below the pair's special tokens
 * up to 512). Byte 1: where the rest splits into the two texts. Checks,
 * beyond no crash, leak or undefined behaviour: the return code fits the
 * inputs; exactly the template's special tokens are marked, with empty
 * spans; ids are in the vocabulary; type ids are 0, or 1 only on BERT's
 * second text; every other span lies within its own text; n_full is the two
 * texts' pieces plus the template's specials (each text encoded alone); and
 * a pair that fits is never cut, one that does not is cut to exactly the
 * capacity. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/tokenizer.h"

static const tok_tokenizer *tokenizer(int which) {
    static const char *const dirs[3] = {"tests/golden/xlmr-tiny", "tests/golden/roberta-tiny",
                                        "tests/golden/pair-bert"};
    static tok_tokenizer *tok[3];
    if (!tok[which]) {
        char err[512];
        if (tok_load(&tok[which], dirs[which], err, sizeof err) != TOK_OK) {
            fprintf(stderr, "cannot load the tokenizer of %s: %s\n", dirs[which], err);
            exit(1);
        }
    }
    return tok[which];
}

/* The pieces of text alone (its single encoding less its specials), or -1
 * when it is not valid UTF-8. */
static int32_t pieces(const tok_tokenizer *tok, const uint8_t *text, size_t len) {
    int32_t ids[16]; /* the single template's specials; pieces are only counted */
    tok_output o = {.ids = ids, .capacity = tok_num_special(tok)};
    int rc = tok_encode(tok, (const char *)text, len, 1, &o);
    return rc == TOK_OK ? o.n_full - tok_num_special(tok) : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int32_t capacities[] = {0, 2, 3, 4, 5, 6, 9, 16, 64, 512};
    if (size < 2)
        return 0;
    const int which = (data[0] & 3) % 3;
    const tok_truncation trunc = (tok_truncation)(((data[0] >> 2) & 3) % 3);
    const int32_t capacity = capacities[(data[0] >> 4) % (sizeof capacities / sizeof *capacities)];
    const uint8_t *a = data + 2, *b;
    const size_t rest = size - 2, alen = rest ? data[1] % (rest + 1) : 0;
    b = a + alen;
    const size_t blen = rest - alen;
    const tok_tokenizer *tok = tokenizer(which);
    const int32_t nsp = tok_num_special_pair(tok);
    FUZZ_CHECK(nsp >= 0, "no pair template");

    size_t cap = (size_t)(capacity ? capacity : 1);
    tok_output o = {.capacity = capacity};
    o.ids = malloc(cap * sizeof *o.ids);
    o.offsets = malloc(cap * sizeof *o.offsets);
    o.special = malloc(cap);
    o.type_ids = malloc(cap * sizeof *o.type_ids);
    FUZZ_CHECK(o.ids && o.offsets && o.special && o.type_ids, "out of memory");
    int rc = tok_encode_pair(tok, (const char *)a, alen, (const char *)b, blen, trunc, &o);
    const int32_t pa = pieces(tok, a, alen), pb = pieces(tok, b, blen);
    switch (rc) {
    case TOK_EINVAL:
        FUZZ_CHECK(capacity < nsp, "TOK_EINVAL with capacity %d", capacity);
        break;
    case TOK_EUTF8:
        FUZZ_CHECK(o.error_at < alen ? pa < 0 : pa >= 0 && pb < 0 && o.error_at < alen + blen,
                   "error_at %zu (texts of %zu and %zu bytes)", o.error_at, alen, blen);
        break;
    case TOK_ETOOLONG:
        FUZZ_CHECK(trunc == TOK_TRUNCATE_NONE && o.n_full > capacity, "TOK_ETOOLONG: %d of %d",
                   o.n_full, capacity);
        break;
    case TOK_OK: {
        FUZZ_CHECK(pa >= 0 && pb >= 0 && o.n_full == pa + pb + nsp, "n_full %d, pieces %d + %d",
                   o.n_full, pa, pb);
        FUZZ_CHECK(o.n == (o.n_full <= capacity ? o.n_full : capacity), "n %d, n_full %d, cap %d",
                   o.n, o.n_full, capacity);
        int32_t specials = 0;
        for (int32_t i = 0; i < o.n; i++) {
            FUZZ_CHECK(o.ids[i] >= 0 && tok_id_to_token(tok, o.ids[i]), "id %d", o.ids[i]);
            FUZZ_CHECK(o.type_ids[i] == 0 || (which == 2 && o.type_ids[i] == 1), "type %d",
                       o.type_ids[i]);
            if (o.special[i]) {
                FUZZ_CHECK(o.offsets[i].start == 0 && o.offsets[i].end == 0, "special span");
                specials++;
                continue;
            }
            FUZZ_CHECK(o.offsets[i].start <= o.offsets[i].end &&
                           o.offsets[i].end <= (alen > blen ? alen : blen),
                       "span [%u, %u)", o.offsets[i].start, o.offsets[i].end);
        }
        FUZZ_CHECK(specials == nsp, "%d special tokens, the template has %d", specials, nsp);
        break;
    }
    default:
        FUZZ_CHECK(0, "tok_encode_pair returned %d (%s)", rc, tok_strerror(rc));
    }
    free(o.ids);
    free(o.offsets);
    free(o.special);
    free(o.type_ids);
    return 0;
}

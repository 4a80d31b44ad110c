/* test_job_tokens.c — job_tokens_encode_whole (server/api/job_tokens.h):
 * a text tokenized whole whatever the first guess of its length, compared
 * with tok_encode given room to spare. */
#include <criterion/criterion.h>
#include <string.h>

#include "model/tokenizer.h"
#include "server/api/job_tokens.h"
#include "server/work/membudget.h"

static tok_tokenizer *load(const char *dir) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, dir, err, sizeof err), TOK_OK, "%s: %s", dir, err);
    return t;
}

/* text whole with a first guess of guess tokens: what tok_encode gives with
 * room for 256. */
static void expect_whole(const tok_tokenizer *t, const char *text, int32_t guess) {
    int32_t ids[256];
    tok_span sp[256];
    tok_output want = {.ids = ids, .offsets = sp, .capacity = 256};
    cr_assert_eq(tok_encode(t, text, strlen(text), 0, &want), TOK_OK);
    tok_output o;
    cr_assert_eq(job_tokens_encode_whole(t, text, strlen(text), guess, &o), TOK_OK, "%s", text);
    cr_expect_eq(o.n, want.n, "%s: %d tokens, want %d", text, o.n, want.n);
    cr_expect_eq(o.n, o.n_full);
    for (int32_t k = 0; k < o.n && k < want.n; k++) {
        cr_expect_eq(o.ids[k], ids[k], "%s: token %d", text, k);
        cr_expect_eq(o.offsets[k].start, sp[k].start, "%s: token %d", text, k);
        cr_expect_eq(o.offsets[k].end, sp[k].end, "%s: token %d", text, k);
    }
    membudget_free(o.ids);
    membudget_free(o.offsets);
}

/* NFKC (XLM-R's normalizer) makes U+FDFA's three bytes eighteen characters:
 * more tokens than bytes plus the specials, the guess llama.cpp's /tokenize
 * made, so the second pass must size itself from the first's count. */
Test(job_tokens, a_text_with_more_tokens_than_the_guess_is_tokenized_whole) {
    tok_tokenizer *t = load("tests/golden/xlmr-tiny");
    const char *const texts[] = {"\xEF\xB7\xBA", "\xEF\xB7\xBA\xEF\xB7\xBA a", "a"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const int32_t guess = (int32_t)strlen(texts[i]) + tok_num_special(t) + 1;
        expect_whole(t, texts[i], guess);
        expect_whole(t, texts[i], 1);
    }
    /* The case above is the one that needs the second pass. */
    int32_t ids[8];
    tok_output small = {.ids = ids, .capacity = 3 + tok_num_special(t) + 1};
    cr_expect_eq(tok_encode(t, "\xEF\xB7\xBA", 3, 0, &small), TOK_ETOOLONG);
    tok_free(t);
}

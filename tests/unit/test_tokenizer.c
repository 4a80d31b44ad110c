/* test_tokenizer.c — the WordPiece tokenizer against Hugging Face `tokenizers`
 * (tests/golden/tokenizer_cases.json.gz, made by make_tokenizer_cases.py), and its
 * normalizer pieces, invalid UTF-8, truncation and [UNK] on their own.
 *
 * The golden tests need the model directory (default models/all-MiniLM-L6-v2,
 * or $ATTN_TEST_MODEL_DIR); without it they fail, saying to run `make model`. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/tokenizer.h"
#include "model/unicode_tables.h"
#include "tests/golden/golden_io.h"

#define CASES_FILE "tests/golden/tokenizer_cases.json.gz"
#define CAP        4096

static const char *model_dir(void) {
    const char *d = getenv("ATTN_TEST_MODEL_DIR");
    return d && *d ? d : "models/all-MiniLM-L6-v2";
}

static tok_tokenizer *load_model(void) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    int rc = tok_load(&t, model_dir(), err, sizeof err);
    cr_assert_eq(rc, TOK_OK,
                 "cannot load the tokenizer from %s (%s): run `make model` first, or set "
                 "ATTN_TEST_MODEL_DIR",
                 model_dir(), err);
    return t;
}

static json_t *load_cases(void) {
    json_error_t jerr;
    json_t *root = golden_load_json(CASES_FILE, JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(root, "%s:%d: %s", CASES_FILE, jerr.line, jerr.text);
    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_array_size(cases) >= 150, "%s holds too few cases", CASES_FILE);
    json_incref(cases);
    json_decref(root);
    return cases;
}

/* Writes text with non-printable bytes escaped, for failure messages. */
static void escape(const char *s, size_t n, char *dst, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\')
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    dst[o] = '\0';
}

typedef struct result {
    int32_t ids[CAP];
    tok_span offsets[CAP];
    tok_output out;
    int rc;
} result;

static void encode(const tok_tokenizer *t, const char *text, size_t len, int32_t cap, int truncate,
                   result *r) {
    r->out = (tok_output){.ids = r->ids, .offsets = r->offsets, .capacity = cap};
    r->rc = tok_encode(t, text, len, truncate, &r->out);
}

/* Compares one golden case; on a mismatch fills why with the details of the
 * first differing token and returns 0. */
static int check_case(const tok_tokenizer *t, json_t *c, int with_offsets, char *why, size_t cap) {
    const char *text = json_string_value(json_object_get(c, "text"));
    size_t len = json_string_length(json_object_get(c, "text"));
    json_t *ids = json_object_get(c, "ids"), *toks = json_object_get(c, "tokens");
    json_t *offs = json_object_get(c, "offsets");
    static _Thread_local result r;
    char esc[512];
    escape(text, len, esc, sizeof esc);
    encode(t, text, len, CAP, 0, &r);
    if (r.rc != TOK_OK) {
        snprintf(why, cap, "text \"%s\": tok_encode returned %s", esc, tok_strerror(r.rc));
        return 0;
    }
    size_t n = json_array_size(ids);
    for (size_t i = 0; i < n || i < (size_t)r.out.n; i++) {
        int32_t want = i < n ? (int32_t)json_integer_value(json_array_get(ids, i)) : -1;
        int32_t got = i < (size_t)r.out.n ? r.ids[i] : -1;
        const char *gs = tok_id_to_token(t, got);
        if (want != got) {
            snprintf(why, cap,
                     "text \"%s\": token %zu is %d \"%s\", expected %d \"%s\" (got %d tokens, "
                     "expected %zu)",
                     esc, i, got, gs ? gs : "-", want,
                     i < n ? json_string_value(json_array_get(toks, i)) : "-", r.out.n, n);
            return 0;
        }
        if (!with_offsets)
            continue;
        json_t *o = json_array_get(offs, i);
        uint32_t ws = (uint32_t)json_integer_value(json_array_get(o, 0));
        uint32_t we = (uint32_t)json_integer_value(json_array_get(o, 1));
        if (r.offsets[i].start != ws || r.offsets[i].end != we) {
            snprintf(why, cap,
                     "text \"%s\": token %zu \"%s\" spans bytes [%u, %u), expected [%u, %u)", esc,
                     i, gs ? gs : "-", r.offsets[i].start, r.offsets[i].end, ws, we);
            return 0;
        }
    }
    if (r.out.n_full != (int32_t)n) {
        snprintf(why, cap, "text \"%s\": n_full %d, expected %zu", esc, r.out.n_full, n);
        return 0;
    }
    return 1;
}

/* Runs every golden case; reports how many match and the first mismatch. */
static void check_all(const tok_tokenizer *t, int with_offsets, const char *what) {
    json_t *cases = load_cases();
    size_t i, bad = 0;
    json_t *c;
    char first[2304] = "", why[2048];
    json_array_foreach(cases, i, c) {
        if (!check_case(t, c, with_offsets, why, sizeof why)) {
            if (!bad++)
                snprintf(first, sizeof first, "case %zu: %s", i, why);
        }
    }
    size_t total = json_array_size(cases);
    json_decref(cases);
    cr_expect_eq(bad, 0, "%s: %zu of %zu cases differ from HF tokenizers; first: %s", what, bad,
                 total, first);
}

Test(tokenizer, golden_ids) {
    tok_tokenizer *t = load_model();
    check_all(t, 0, "ids");
    tok_free(t);
}

Test(tokenizer, golden_offsets) {
    tok_tokenizer *t = load_model();
    check_all(t, 1, "ids and byte offsets");
    tok_free(t);
}

/* The vocab.txt + tokenizer_config.json path must give the same ids. */
Test(tokenizer, vocab_txt_fallback) {
    char dir[] = "/tmp/attn-tok-XXXXXX", src[1024], dst[1024], cmd[4096];
    cr_assert_not_null(mkdtemp(dir));
    const char *files[] = {"vocab.txt", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", model_dir(), files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        cr_assert_eq(access(src, R_OK), 0, "%s missing: run `make model`", src);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
        cr_assert_eq(system(cmd), 0);
    }
    char err[512] = "";
    tok_tokenizer *t = NULL;
    int rc = tok_load(&t, dir, err, sizeof err);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rc, TOK_OK, "%s", err);
    check_all(t, 1, "vocab.txt");
    tok_free(t);
}

/* Many threads on one tokenizer: it is read-only after load. */
static void *worker(void *arg) {
    const tok_tokenizer *t = arg;
    json_t *cases = load_cases();
    char why[2048];
    size_t i, bad = 0;
    json_t *c;
    for (int rep = 0; rep < 3; rep++)
        json_array_foreach(cases, i, c) bad += !check_case(t, c, 1, why, sizeof why);
    json_decref(cases);
    return (void *)bad;
}

Test(tokenizer, concurrent) {
    tok_tokenizer *t = load_model();
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, worker, t), 0);
    size_t bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        bad += (size_t)r;
    }
    cr_expect_eq(bad, 0, "%zu mismatches under concurrency", bad);
    tok_free(t);
}

/* ---- pieces --------------------------------------------------------------- */

/* Tokens of text between [CLS] and [SEP], joined by spaces. */
static void tokens_of(const tok_tokenizer *t, const char *text, size_t len, char *dst, size_t cap) {
    static result r;
    encode(t, text, len, CAP, 0, &r);
    cr_assert_eq(r.rc, TOK_OK, "%s", tok_strerror(r.rc));
    size_t o = 0;
    dst[0] = '\0';
    for (int32_t i = 1; i + 1 < r.out.n; i++)
        o += (size_t)snprintf(dst + o, cap - o, "%s%s", i > 1 ? " " : "",
                              tok_id_to_token(t, r.ids[i]));
}

#define EXPECT_TOKENS(t, text, want)                                                               \
    do {                                                                                           \
        char got_[1024];                                                                           \
        tokens_of(t, text, sizeof(text) - 1, got_, sizeof got_);                                   \
        cr_expect_str_eq(got_, want, "tokens of %s: \"%s\"", #text, got_);                         \
    } while (0)

Test(tokenizer, unicode_tables) {
    cr_expect(uni_lookup(' ')->flags & UNI_WHITESPACE);
    cr_expect(uni_lookup(0x3000)->flags & UNI_WHITESPACE);
    cr_expect_not(uni_lookup(0x1C)->flags & UNI_WHITESPACE, "U+001C is not White_Space in Rust");
    cr_expect(uni_lookup('\t')->flags & UNI_CLEAN_SPACE);
    cr_expect(uni_lookup(0)->flags & UNI_REMOVE);
    cr_expect(uni_lookup(0xFFFD)->flags & UNI_REMOVE);
    cr_expect(uni_lookup(0x200B)->flags & UNI_REMOVE);
    cr_expect(uni_lookup(0x1B)->flags & UNI_REMOVE);
    cr_expect(uni_lookup('$')->flags & UNI_PUNCT, "ASCII punctuation counts even if Sc");
    cr_expect(uni_lookup(0x3002)->flags & UNI_PUNCT);
    cr_expect_not(uni_lookup(0x2E43)->flags & UNI_PUNCT, "unassigned in the library's Unicode 8");
    cr_expect(uni_lookup(0x4E00)->flags & UNI_CHINESE);
    cr_expect_not(uni_lookup(0x3042)->flags & UNI_CHINESE, "kana is not padded");
    cr_expect(uni_lookup(0x0301)->flags & UNI_MN);
    cr_expect_eq(uni_lookup(0x0301)->ccc, 230);
    const uni_record *e = uni_lookup(0xE9);
    cr_assert_eq(e->decomp_len, 2);
    cr_expect_eq(uni_pool[e->decomp_at], 'e');
    cr_expect_eq(uni_pool[e->decomp_at + 1], 0x0301);
    const uni_record *dotted = uni_lookup(0x0130);
    cr_assert_eq(dotted->lower_len, 2, "U+0130 lowercases to two characters");
    cr_expect_eq(uni_pool[dotted->lower_at], 'i');
    cr_expect_eq(uni_pool[dotted->lower_at + 1], 0x0307);
    cr_expect_eq(uni_lookup(0x1EA5)->decomp_len, 3, "NFD is recursive");
}

Test(tokenizer, normalizer_pieces) {
    tok_tokenizer *t = load_model();
    EXPECT_TOKENS(t, "Café", "cafe");
    EXPECT_TOKENS(t, "cafe\xcc\x81", "cafe");
    EXPECT_TOKENS(t, "HELLO", "hello");
    EXPECT_TOKENS(t,
                  "a\x00"
                  "b\x1b"
                  "c",
                  "abc");
    EXPECT_TOKENS(t, "zero\xe2\x80\x8bwidth", "zero ##wi ##dt ##h"); /* U+200B is Cf: removed */
    EXPECT_TOKENS(t, "tab\there\nnow", "tab here now");
    EXPECT_TOKENS(t, "\xe5\x8c\x97\xe4\xba\xac\xe5\xa4\xa7\xe5\xad\xa6", "北 京 大 学");
    EXPECT_TOKENS(t, "a,b", "a , b");
    EXPECT_TOKENS(t, "...", ". . .");
    EXPECT_TOKENS(t, "", "");
    EXPECT_TOKENS(t, " \t\n ", "");
    EXPECT_TOKENS(t, "x [SEP] y", "x [SEP] y");
    tok_free(t);
}

Test(tokenizer, unknown_words) {
    tok_tokenizer *t = load_model();
    char w[256];
    memset(w, 'x', 101);
    static result r;
    encode(t, w, 101, CAP, 0, &r);
    cr_assert_eq(r.rc, TOK_OK);
    cr_expect_eq(r.out.n, 3, "a word over 100 characters is one [UNK]");
    cr_expect_eq(r.ids[1], tok_unk_id(t));
    cr_expect_eq(r.offsets[1].start, 0);
    cr_expect_eq(r.offsets[1].end, 101);
    encode(t, w, 100, CAP, 0, &r);
    cr_expect_gt(r.out.n, 3, "100 characters are still split into pieces");
    cr_expect_neq(r.ids[1], tok_unk_id(t));
    /* Greek small letter heta (U+0371) is not in the vocabulary: the whole
     * word, not just the letter, becomes [UNK]. */
    EXPECT_TOKENS(t,
                  "ab\xcd\xb1"
                  "cd ok",
                  "[UNK] ok");
    tok_free(t);
}

/* A run of reorderable marks longer than the inline buffer: it moves to the
 * heap, stays one word, and the word spans all of it (HF: [UNK] over bytes
 * [0, 401), then "ok"). */
Test(tokenizer, long_combining_run) {
    tok_tokenizer *t = load_model();
    char text[512];
    size_t n = 0;
    text[n++] = 'a';
    for (int i = 0; i < 50; i++) {
        memcpy(text + n, "\xf0\x9d\x85\xad\xf0\x9d\x85\xa5", 8); /* U+1D16D U+1D165 */
        n += 8;
    }
    memcpy(text + n, " ok", 3);
    n += 3;
    static result r;
    encode(t, text, n, CAP, 0, &r);
    cr_assert_eq(r.rc, TOK_OK);
    cr_assert_eq(r.out.n, 4);
    cr_expect_eq(r.ids[1], tok_unk_id(t));
    cr_expect_eq(r.offsets[1].start, 0);
    cr_expect_eq(r.offsets[1].end, 401);
    cr_expect_str_eq(tok_id_to_token(t, r.ids[2]), "ok");
    tok_free(t);
}

Test(tokenizer, invalid_utf8) {
    tok_tokenizer *t = load_model();
    struct {
        const char *s;
        size_t len, at;
    } bad[] = {
        {"\xff", 1, 0},
        {"ab\x80", 3, 2},
        {"\xc0\x80", 2, 0},         /* overlong NUL */
        {"x\xc1\xbf", 3, 1},        /* overlong */
        {"\xe0\x80\xaf", 3, 0},     /* overlong */
        {"\xed\xa0\x80", 3, 0},     /* surrogate */
        {"\xf4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0},
        {"ok \xe2\x82", 5, 3}, /* cut at the end */
        {"\xe2\x28\xa1", 3, 0},
        {"caf\xc3", 4, 3},
    };
    static result r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        encode(t, bad[i].s, bad[i].len, CAP, 1, &r);
        cr_expect_eq(r.rc, TOK_EUTF8, "case %zu: %s", i, tok_strerror(r.rc));
        cr_expect_eq(r.out.error_at, bad[i].at, "case %zu", i);
    }
    /* The length is respected: bytes past len are never read. */
    encode(t, "ok\xff", 2, CAP, 1, &r);
    cr_expect_eq(r.rc, TOK_OK);
    tok_free(t);
}

Test(tokenizer, truncation) {
    tok_tokenizer *t = load_model();
    const char *text = "one two three four five six seven eight nine ten eleven twelve";
    size_t len = strlen(text);
    static result full, cut;
    encode(t, text, len, CAP, 0, &full);
    cr_assert_eq(full.rc, TOK_OK);
    cr_assert_eq(full.out.n, 14);
    cr_assert_eq(tok_num_special(t), 2);

    encode(t, text, len, 6, 1, &cut);
    cr_assert_eq(cut.rc, TOK_OK);
    cr_expect_eq(cut.out.n, 6);
    cr_expect_eq(cut.out.n_full, 14);
    cr_expect_eq(cut.ids[0], full.ids[0]);
    for (int i = 1; i < 5; i++)
        cr_expect_eq(cut.ids[i], full.ids[i], "piece %d", i);
    cr_expect_eq(cut.ids[5], full.ids[13], "[SEP] closes a truncated sequence");

    encode(t, text, len, 6, 0, &cut);
    cr_expect_eq(cut.rc, TOK_ETOOLONG);
    cr_expect_eq(cut.out.n_full, 14, "the untruncated length is given for the 422");
    encode(t, text, len, 14, 0, &cut);
    cr_expect_eq(cut.rc, TOK_OK, "exactly the maximum fits");

    encode(t, text, len, 2, 1, &cut);
    cr_expect_eq(cut.rc, TOK_OK);
    cr_expect_eq(cut.out.n, 2);
    encode(t, text, len, 1, 1, &cut);
    cr_expect_eq(cut.rc, TOK_EINVAL);

    /* offsets are optional */
    tok_output o = {.ids = cut.ids, .capacity = 8};
    cr_expect_eq(tok_encode(t, text, len, 1, &o), TOK_OK);
    cr_expect_eq(o.n, 8);
    tok_free(t);
}

Test(tokenizer, vocabulary) {
    tok_tokenizer *t = load_model();
    cr_expect_eq(tok_vocab_size(t), 30522);
    cr_expect_str_eq(tok_id_to_token(t, 101), "[CLS]");
    cr_expect_eq(tok_token_to_id(t, "##ing", 5), 2075);
    cr_expect_eq(tok_token_to_id(t, "notawordatall", 13), -1);
    cr_expect_null(tok_id_to_token(t, 30522));
    cr_expect_null(tok_id_to_token(t, -1));
    tok_free(t);
}

Test(tokenizer, load_errors) {
    char err[512] = "";
    tok_tokenizer *t = (tok_tokenizer *)1;
    cr_expect_eq(tok_load(&t, "/nonexistent/model", err, sizeof err), TOK_ELOAD);
    cr_expect_null(t);
    cr_expect(strstr(err, "/nonexistent/model/vocab.txt"), "message names the file: %s", err);

    char dir[] = "/tmp/attn-tok-XXXXXX", path[256];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", f);
    fclose(f);
    cr_expect_eq(tok_load(&t, dir, err, sizeof err), TOK_ELOAD);
    cr_expect(strstr(err, "model type WordLevel is not supported"), "%s", err);

    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": "
          "{\"[UNK]\": 0, \"a\": 1}}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},"
          "\"added_tokens\": [{\"id\": 0, \"content\": \"[UNK]\", \"normalized\": true}]}",
          f);
    fclose(f);
    cr_expect_eq(tok_load(&t, dir, err, sizeof err), TOK_ELOAD);
    cr_expect(strstr(err, "added token [UNK] has normalized true"), "%s", err);
    unlink(path);
    rmdir(dir);
}

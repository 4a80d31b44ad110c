/* test_tokenizer_unigram.c — the Unigram tokenizer against Hugging Face
 * `tokenizers` on a real SentencePiece model converted to tokenizer.json by
 * `transformers` (tests/golden/xlmr-tiny, made by make_unigram_tokenizer.py;
 * cases in tests/golden/unigram_cases.json.gz, made by make_unigram_cases.py):
 * ids, byte offsets and decoded text of every case, then the pieces on their
 * own (truncation, invalid UTF-8, what is refused at load). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/tokenizer.h"
#include "tests/golden/golden_io.h"

#define TOK_DIR    "tests/golden/xlmr-tiny"
#define CASES_FILE "tests/golden/unigram_cases.json.gz"
#define CAP        4096

static tok_tokenizer *load_xlmr(void) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    int rc = tok_load(&t, TOK_DIR, err, sizeof err);
    cr_assert_eq(rc, TOK_OK, "cannot load %s: %s", TOK_DIR, err);
    cr_assert_str_eq(tok_model_type(t), "Unigram");
    return t;
}

static json_t *load_cases_from(const char *file, size_t at_least) {
    json_error_t jerr;
    json_t *root = golden_load_json(file, JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(root, "%s:%d: %s", file, jerr.line, jerr.text);
    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_array_size(cases) >= at_least, "%s holds too few cases", file);
    json_incref(cases);
    json_decref(root);
    return cases;
}

static json_t *load_cases(void) {
    return load_cases_from(CASES_FILE, 3000);
}

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
    uint8_t special[CAP];
    tok_output out;
} result;

enum { CHECK_IDS = 1, CHECK_OFFSETS = 2, CHECK_DECODE = 4 };

/* One case; on a mismatch, the details in why and 0. */
static int check_case(const tok_tokenizer *t, json_t *c, int what, char *why, size_t cap) {
    json_t *jt = json_object_get(c, "text");
    const char *text = json_string_value(jt);
    size_t len = json_string_length(jt);
    json_t *ids = json_object_get(c, "ids"), *offs = json_object_get(c, "offsets");
    static _Thread_local result r;
    char esc[512];
    escape(text, len, esc, sizeof esc);
    r.out = (tok_output){.ids = r.ids, .offsets = r.offsets, .special = r.special, .capacity = CAP};
    int rc = tok_encode(t, text, len, 0, &r.out);
    if (rc != TOK_OK) {
        snprintf(why, cap, "\"%s\": tok_encode: %s", esc, tok_strerror(rc));
        return 0;
    }
    size_t n = json_array_size(ids);
    for (size_t i = 0; i < n || i < (size_t)r.out.n; i++) {
        int32_t want = i < n ? (int32_t)json_integer_value(json_array_get(ids, i)) : -1;
        int32_t got = i < (size_t)r.out.n ? r.ids[i] : -1;
        if (want != got) {
            const char *gs = tok_id_to_token(t, got), *ws = tok_id_to_token(t, want);
            snprintf(why, cap, "\"%s\": token %zu is %d \"%s\", expected %d \"%s\" (%d vs %zu)",
                     esc, i, got, gs ? gs : "-", want, ws ? ws : "-", r.out.n, n);
            return 0;
        }
        int want_special =
            (int)json_integer_value(json_array_get(json_object_get(c, "special"), i));
        if (r.special[i] != want_special) {
            snprintf(why, cap, "\"%s\": token %zu (%d) special %d, expected %d", esc, i, got,
                     r.special[i], want_special);
            return 0;
        }
        if (!(what & CHECK_OFFSETS))
            continue;
        json_t *o = json_array_get(offs, i);
        uint32_t s = (uint32_t)json_integer_value(json_array_get(o, 0));
        uint32_t e = (uint32_t)json_integer_value(json_array_get(o, 1));
        if (r.offsets[i].start != s || r.offsets[i].end != e) {
            snprintf(why, cap, "\"%s\": token %zu (%d) spans [%u, %u), expected [%u, %u)", esc, i,
                     got, r.offsets[i].start, r.offsets[i].end, s, e);
            return 0;
        }
    }
    if (r.out.n_full != (int32_t)n) {
        snprintf(why, cap, "\"%s\": n_full %d, expected %zu", esc, r.out.n_full, n);
        return 0;
    }
    if (!(what & CHECK_DECODE))
        return 1;
    static const char *const keys[2] = {"decoded_special", "decoded"};
    for (int skip = 0; skip < 2; skip++) {
        json_t *want = json_object_get(c, keys[skip]);
        char *got = NULL;
        size_t got_len = 0;
        rc = tok_decode(t, r.ids, (size_t)r.out.n, skip, &got, &got_len);
        if (rc != TOK_OK || got_len != json_string_length(want) ||
            memcmp(got, json_string_value(want), got_len) != 0) {
            char g[256] = "", w[256];
            if (got)
                escape(got, got_len, g, sizeof g);
            escape(json_string_value(want), json_string_length(want), w, sizeof w);
            snprintf(why, cap,
                     "\"%s\": decode (skip_special %d) gives \"%s\" (%s), expected \"%s\"", esc,
                     skip, g, tok_strerror(rc), w);
            free(got);
            return 0;
        }
        free(got);
    }
    return 1;
}

static size_t check_cases(const tok_tokenizer *t, json_t *cases, int what, const char *name) {
    size_t i, bad = 0;
    json_t *c;
    char first[4][1200], why[1024];
    json_array_foreach(cases, i, c) {
        if (!check_case(t, c, what, why, sizeof why)) {
            if (bad < 4)
                snprintf(first[bad], sizeof first[bad], "case %zu: %s", i, why);
            bad++;
        }
    }
    size_t total = json_array_size(cases);
    cr_expect_eq(bad, 0, "%s: %zu of %zu cases differ from HF tokenizers; first: %s | %s | %s | %s",
                 name, bad, total, bad > 0 ? first[0] : "", bad > 1 ? first[1] : "",
                 bad > 2 ? first[2] : "", bad > 3 ? first[3] : "");
    return total - bad;
}

static size_t check_all(const tok_tokenizer *t, int what, const char *name) {
    json_t *cases = load_cases();
    size_t ok = check_cases(t, cases, what, name);
    json_decref(cases);
    return ok;
}

Test(tokenizer_unigram, golden_ids) {
    tok_tokenizer *t = load_xlmr();
    size_t ok = check_all(t, CHECK_IDS, "ids");
    printf("tokenizer_unigram: ids of %zu cases equal to HF tokenizers\n", ok);
    tok_free(t);
}

Test(tokenizer_unigram, golden_offsets) {
    tok_tokenizer *t = load_xlmr();
    check_all(t, CHECK_IDS | CHECK_OFFSETS, "ids and byte offsets");
    tok_free(t);
}

Test(tokenizer_unigram, golden_decode) {
    tok_tokenizer *t = load_xlmr();
    check_all(t, CHECK_IDS | CHECK_DECODE, "decode");
    tok_free(t);
}

/* Other layouts of the same model (make_unigram_cases.py, variants()): the
 * older hub layout, prepend_scheme "first" with Lowercase/Replace/Strip and
 * RobertaProcessing, and byte fallback with a Llama-style decoder chain;
 * and (make_normalizer_cases.py) the Unicode normalizers in place of the
 * charsmap: NFKC with the converter's Replace, NFC, NFD with Lowercase,
 * NFKD with Strip. */
static const char *const variants[] = {"legacy", "first", "bytefallback", "nfkc",
                                       "nfc",    "nfd",   "nfkd"};

Test(tokenizer_unigram, golden_variants) {
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        char dir[256], file[300], err[512] = "";
        snprintf(dir, sizeof dir, "tests/golden/unigram-%s", variants[v]);
        snprintf(file, sizeof file, "%s/cases.json.gz", dir);
        tok_tokenizer *t = NULL;
        cr_assert_eq(tok_load(&t, dir, err, sizeof err), TOK_OK, "%s: %s", dir, err);
        json_t *cases = load_cases_from(file, 800);
        size_t ok = check_cases(t, cases, CHECK_IDS | CHECK_OFFSETS | CHECK_DECODE, dir);
        printf("tokenizer_unigram: %s: ids, offsets and decode of %zu cases equal to HF "
               "tokenizers\n",
               variants[v], ok);
        json_decref(cases);
        tok_free(t);
    }
}

/* The Split pre-tokenizer (make_split_cases.py): every behavior, String and
 * Regex patterns, invert, empty matches and line anchors before Metaspace on
 * the Unigram model; the GPT-2, Llama-3 and o200k patterns before ByteLevel
 * on the byte-level BPE. */
static const char *const splits[] = {"removed",    "isolated", "previous", "next",
                                     "contiguous", "invert",   "empty",    "anchors",
                                     "literal",    "gpt2",     "llama3",   "o200k"};

Test(tokenizer_unigram, golden_split) {
    for (size_t v = 0; v < sizeof splits / sizeof splits[0]; v++) {
        char dir[256], file[300], err[512] = "";
        snprintf(dir, sizeof dir, "tests/golden/split-%s", splits[v]);
        snprintf(file, sizeof file, "%s/cases.json.gz", dir);
        tok_tokenizer *t = NULL;
        cr_assert_eq(tok_load(&t, dir, err, sizeof err), TOK_OK, "%s: %s", dir, err);
        json_t *cases = load_cases_from(file, 400);
        size_t ok = check_cases(t, cases, CHECK_IDS | CHECK_OFFSETS | CHECK_DECODE, dir);
        printf("tokenizer_unigram: split-%s: ids, offsets and decode of %zu cases equal to HF "
               "tokenizers\n",
               splits[v], ok);
        json_decref(cases);
        tok_free(t);
    }
}

/* A byte-level BPE in RoBERTa's layout, trained by `tokenizers` on the same
 * text (tests/golden/roberta-tiny): ByteLevel pre-tokenizer and decoder,
 * RobertaProcessing with trim_offsets, <mask> added past the vocabulary. */
Test(tokenizer_unigram, golden_bpe_roberta) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, "tests/golden/roberta-tiny", err, sizeof err), TOK_OK, "%s", err);
    cr_expect_str_eq(tok_model_type(t), "BPE");
    json_t *cases = load_cases_from("tests/golden/roberta-tiny/cases.json.gz", 1500);
    size_t ok = check_cases(t, cases, CHECK_IDS | CHECK_OFFSETS | CHECK_DECODE, "roberta-tiny");
    printf("tokenizer_unigram: BPE: ids, offsets and decode of %zu cases equal to HF "
           "tokenizers\n",
           ok);
    json_decref(cases);
    tok_free(t);
}

/* The layouts of the newer embedding families (make_family_tokenizers.py):
 * MPNet's WordPiece with its template and <mask> lstrip, ModernBERT's
 * byte-level BPE with a [CLS]/[SEP] template and normalized added tokens,
 * Qwen3-Embedding's NFC + Split + ByteLevel with <|endoftext|> appended,
 * EmbeddingGemma's BPE with byte fallback, added tokens using lstrip,
 * rstrip, single_word and normalized in combination, and Llama-3's
 * post-processor Sequence (ByteLevel trimming offsets, then a template). */
static const char *const families[] = {"mpnet",  "modernbert", "qwen3",
                                       "gemma3", "flags",      "bytelevel"};

Test(tokenizer_unigram, golden_families) {
    for (size_t v = 0; v < sizeof families / sizeof families[0]; v++) {
        char dir[256], file[300], err[512] = "";
        snprintf(dir, sizeof dir, "tests/golden/fam-%s", families[v]);
        snprintf(file, sizeof file, "%s/cases.json.gz", dir);
        tok_tokenizer *t = NULL;
        cr_assert_eq(tok_load(&t, dir, err, sizeof err), TOK_OK, "%s: %s", dir, err);
        json_t *cases = load_cases_from(file, 700);
        size_t ok = check_cases(t, cases, CHECK_IDS | CHECK_OFFSETS | CHECK_DECODE, dir);
        printf("tokenizer_unigram: fam-%s: ids, offsets and decode of %zu cases equal to HF "
               "tokenizers\n",
               families[v], ok);
        json_decref(cases);
        tok_free(t);
    }
}

static void *worker(void *arg) {
    const tok_tokenizer *t = arg;
    json_t *cases = load_cases();
    char why[1024];
    size_t i, bad = 0;
    json_t *c;
    json_array_foreach(cases, i, c) bad +=
        !check_case(t, c, CHECK_IDS | CHECK_OFFSETS, why, sizeof why);
    json_decref(cases);
    return (void *)bad;
}

Test(tokenizer_unigram, concurrent) {
    tok_tokenizer *t = load_xlmr();
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

Test(tokenizer_unigram, specials_and_vocabulary) {
    tok_tokenizer *t = load_xlmr();
    cr_expect_eq(tok_num_special(t), 2);
    cr_expect_eq(tok_unk_id(t), 3);
    cr_expect_str_eq(tok_id_to_token(t, 0), "<s>");
    cr_expect_eq(tok_token_to_id(t, "</s>", 4), 2);
    cr_expect_eq(tok_token_to_id(t, "<mask>", 6), tok_vocab_size(t) - 1);
    cr_expect_null(tok_id_to_token(t, tok_vocab_size(t)));
    cr_expect_null(tok_id_to_token(t, -1));
    int32_t bad[] = {0, tok_vocab_size(t)};
    char *text = NULL;
    size_t len = 0;
    cr_expect_eq(tok_decode(t, bad, 2, 1, &text, &len), TOK_EINVAL);
    cr_expect_null(text);
    tok_free(t);
}

/* An allocator for tok_set_alloc_funcs that counts what is live and refuses
 * past a limit, as the service's budget does. */
static size_t scratch_live, scratch_limit, scratch_peak;
static long scratch_blocks;

static void *limited_realloc(void *p, size_t n) {
    size_t old = p ? ((size_t *)p)[-2] : 0;
    if (scratch_live - old + n > scratch_limit)
        return NULL;
    size_t *h = realloc(p ? (size_t *)p - 2 : NULL, n + 2 * sizeof(size_t));
    if (!h)
        return NULL;
    scratch_blocks += p ? 0 : 1;
    scratch_live = scratch_live - old + n;
    scratch_peak = scratch_live > scratch_peak ? scratch_live : scratch_peak;
    h[0] = n;
    return h + 2;
}

static void limited_free(void *p) {
    if (!p)
        return;
    scratch_live -= ((size_t *)p)[-2];
    scratch_blocks--;
    free((size_t *)p - 2);
}

/* tok_encode's scratch, normalizer, Split and PCRE2's frames included, comes
 * from the allocator set, within the bound model/tokenizer.h states, and a
 * refusal fails the encode cleanly with everything given back. */
Test(tokenizer_unigram, scratch_from_the_allocator_set) {
    /* fam-gemma3 has no pre-tokenizer (the text is one word) and falls back
     * to byte pieces for U+A66E; fam-modernbert searches its normalized
     * added tokens (runs of spaces) in the normalized text. */
    const char *dirs[] = {"tests/golden/xlmr-tiny", "tests/golden/unigram-nfkc",
                          "tests/golden/split-o200k", "tests/golden/fam-gemma3",
                          "tests/golden/fam-modernbert"};
    size_t len = 60000;
    char *text = malloc(len);
    cr_assert_not_null(text);
    for (size_t i = 0; i < len; i++)
        text[i] = "w  \xea\x99\xae, \n"[i % 8];
    int32_t ids[128];
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char err[512] = "";
        tok_tokenizer *t = NULL;
        cr_assert_eq(tok_load(&t, dirs[d], err, sizeof err), TOK_OK, "%s", err);
        tok_set_alloc_funcs(limited_realloc, limited_free);
        scratch_limit = SIZE_MAX;
        scratch_peak = 0;
        tok_output o = {.ids = ids, .capacity = 128};
        cr_expect_eq(tok_encode(t, text, len, 1, &o), TOK_OK, "%s", dirs[d]);
        cr_expect_eq(scratch_live, 0, "%s: %zu bytes left", dirs[d], scratch_live);
        cr_expect_eq(scratch_blocks, 0);
        /* N <= 2 len (Metaspace's growth; ByteLevel's bytes of this text);
         * 208 N + 224 W + 8 N with W <= N, plus Split's 52 N and PCRE2's
         * frames (1 MiB) where there is one. */
        cr_expect(scratch_peak > len && scratch_peak <= 260 * 2 * len + (1u << 20),
                  "%s: peak %zu for %zu bytes", dirs[d], scratch_peak, len);
        size_t peak = scratch_peak;
        scratch_limit = peak / 2;
        cr_expect_eq(tok_encode(t, text, len, 1, &o), TOK_ENOMEM, "%s", dirs[d]);
        cr_expect_eq(scratch_live, 0, "%s: %zu bytes left after a refusal", dirs[d], scratch_live);
        cr_expect_eq(scratch_blocks, 0);
        tok_set_alloc_funcs(NULL, NULL);
        printf(
            "tokenizer_unigram: %s: %zu bytes of text, scratch peak %zu from the allocator set\n",
            dirs[d], len, peak);
        tok_free(t);
    }
    free(text);
}

/* WordPiece's scratch comes from the allocator set too, the combining-mark
 * run included: a body of 10000 reorderable marks that strip_accents keeps
 * (U+1D165, class 216, a spacing mark, so not dropped as Mn; U+0301 would be
 * dropped at once and never wait in the run) is one run, whose arrays grow
 * to 16384 12-byte characters each. The peak is within model/tokenizer.h's
 * bound (72 bytes per input byte plus 28 m + 16 of word scratch), the answer
 * equals the one made with malloc, and a refusal fails the encode with
 * TOK_ENOMEM and everything given back. */
Test(tokenizer_unigram, wordpiece_mark_run_from_the_allocator_set) {
    enum { MARKS = 10000 };
    size_t len = 1 + 4 * MARKS;
    char *text = malloc(len);
    cr_assert_not_null(text);
    text[0] = 'a';
    for (size_t i = 0; i < MARKS; i++)
        memcpy(text + 1 + 4 * i, "\xf0\x9d\x85\xa5", 4); /* U+1D165 */
    char err[512] = "";
    tok_tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, "tests/golden/bert-cls-tiny", err, sizeof err), TOK_OK, "%s", err);
    int32_t want[16], ids[16];
    tok_output w = {.ids = want, .capacity = 16};
    cr_assert_eq(tok_encode(t, text, len, 1, &w), TOK_OK);

    tok_set_alloc_funcs(limited_realloc, limited_free);
    scratch_limit = SIZE_MAX;
    scratch_peak = 0;
    tok_output o = {.ids = ids, .capacity = 16};
    cr_expect_eq(tok_encode(t, text, len, 1, &o), TOK_OK);
    cr_expect_eq(scratch_live, 0, "%zu bytes left", scratch_live);
    cr_expect_eq(scratch_blocks, 0);
    cr_expect_eq(o.n, w.n);
    cr_expect_arr_eq(ids, want, (size_t)w.n * sizeof *ids);
    size_t peak = scratch_peak;
    cr_expect(peak >= 2 * 16384 * 12 && peak <= 72 * len + 28 * 100 + 16,
              "peak %zu for %zu bytes of marks", peak, len);
    scratch_limit = peak / 2;
    cr_expect_eq(tok_encode(t, text, len, 1, &o), TOK_ENOMEM);
    cr_expect_eq(scratch_live, 0, "%zu bytes left after a refusal", scratch_live);
    cr_expect_eq(scratch_blocks, 0);
    tok_set_alloc_funcs(NULL, NULL);
    printf("tokenizer_unigram: WordPiece, %d marks in one run: scratch peak %zu from the "
           "allocator set\n",
           MARKS, peak);
    tok_free(t);
    free(text);
}

Test(tokenizer_unigram, truncation_and_errors) {
    tok_tokenizer *t = load_xlmr();
    const char *text = "Бързата кафява лисица прескача мързеливото куче.";
    int32_t ids[64], full[64];
    tok_span offs[64];
    tok_output out = {.ids = full, .offsets = offs, .capacity = 64};
    cr_assert_eq(tok_encode(t, text, strlen(text), 0, &out), TOK_OK);
    int32_t n_full = out.n;
    cr_assert_gt(n_full, 6);
    out = (tok_output){.ids = ids, .offsets = offs, .capacity = 5};
    cr_expect_eq(tok_encode(t, text, strlen(text), 0, &out), TOK_ETOOLONG);
    cr_expect_eq(out.n_full, n_full);
    cr_assert_eq(tok_encode(t, text, strlen(text), 1, &out), TOK_OK);
    cr_expect_eq(out.n, 5);
    cr_expect_eq(ids[0], 0);
    cr_expect_eq(ids[4], 2);
    cr_expect_arr_eq(ids + 1, full + 1, 3 * sizeof(int32_t));
    out.capacity = 1;
    cr_expect_eq(tok_encode(t, text, strlen(text), 1, &out), TOK_EINVAL);
    const char bad[] = "ok \xC3\x28 no";
    out.capacity = 64;
    cr_expect_eq(tok_encode(t, bad, sizeof bad - 1, 0, &out), TOK_EUTF8);
    cr_expect_eq(out.error_at, 3);
    const char surrogate[] = "\xED\xA0\x80";
    cr_expect_eq(tok_encode(t, surrogate, 3, 0, &out), TOK_EUTF8);
    tok_free(t);
}

/* Writes tokenizer.json in a fresh directory, loads it, and expects a refusal
 * whose message contains want. */
/* Writes json as tokenizer.json in a fresh directory, loads it with
 * tok_load and removes the directory; returns tok_load's code. */
static int load_json_rc(const char *json, tok_tokenizer **t, char *err, size_t cap) {
    char dir[] = "/tmp/attn-ug-XXXXXX", path[256];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(json, f);
    fclose(f);
    int rc = tok_load(t, dir, err, cap);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void expect_refused(const char *json, const char *want) {
    char err[512] = "";
    tok_tokenizer *t = (tok_tokenizer *)1;
    int rc = load_json_rc(json, &t, err, sizeof err);
    cr_expect_eq(rc, TOK_ELOAD, "loaded although %s should be refused", want);
    cr_expect_null(t);
    cr_expect(strstr(err, want), "message \"%s\" does not say \"%s\"", err, want);
}

#define UG_MODEL                                                                                   \
    "\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"a\", -1]]}"

Test(tokenizer_unigram, refused_by_name) {
    expect_refused("{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}, "
                   "\"merges\": []}}",
                   "BPE with dropout is not supported");
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
                   "\"unk_token\": \"<unk>\"}}",
                   "unk_token <unk> is not in the vocabulary");
    expect_refused("{\"model\": {\"type\": \"WordLevel\"}}", "model type WordLevel");
    expect_refused("{" UG_MODEL ", \"normalizer\": {\"type\": \"Nmt\"}}", "normalizer Nmt");
    expect_refused("{" UG_MODEL ", \"normalizer\": {\"type\": \"Replace\", \"pattern\": "
                   "{\"Regex\": \"[0-9]+\"}, \"content\": \"\"}}",
                   "pattern [0-9]+ is not supported");
    expect_refused("{" UG_MODEL ", \"pre_tokenizer\": {\"type\": \"CharDelimiterSplit\"}}",
                   "pre_tokenizer CharDelimiterSplit");
    expect_refused("{" UG_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
                   "{\"Regex\": \"x\"}}}",
                   "bad Split pre-tokenizer");
    expect_refused("{" UG_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
                   "{\"Regex\": \"[\\\\d\\\\w]+\"}, \"behavior\": \"Isolated\"}}",
                   "\\w is not supported");
    expect_refused("{" UG_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
                   "{\"Regex\": \"(x\"}, \"behavior\": \"Isolated\"}}",
                   "missing closing parenthesis");
    expect_refused("{" UG_MODEL ", \"post_processor\": {\"type\": \"Bogus\"}}",
                   "post_processor Bogus");
    expect_refused("{" UG_MODEL ", \"post_processor\": {\"type\": \"Sequence\", \"processors\": "
                   "[{\"type\": \"BertProcessing\", \"sep\": [\"a\", 1], \"cls\": [\"a\", 1]}, "
                   "{\"type\": \"ByteLevel\"}]}}",
                   "trimming ByteLevel after the special tokens");
    expect_refused("{" UG_MODEL ", \"decoder\": {\"type\": \"CTC\"}}", "decoder CTC");
    expect_refused("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1]]}}", "unk_id");
    expect_refused("{" UG_MODEL ", \"normalizer\": {\"type\": \"Precompiled\", "
                   "\"precompiled_charsmap\": \"AAAA\"}}",
                   "not a SentencePiece charsmap");
}

/* Writes tokenizer.json in a fresh directory and loads it. */
static tok_tokenizer *load_json(const char *json) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    int rc = load_json_rc(json, &t, err, sizeof err);
    cr_assert_eq(rc, TOK_OK, "%s", err);
    return t;
}

/* Encodes text with t and compares ids and byte offsets with want
 * ({id, start, end} each). */
static void expect_tokens(const tok_tokenizer *t, const char *text, const uint32_t (*want)[3],
                          int32_t n) {
    int32_t ids[16];
    tok_span offs[16];
    tok_output out = {.ids = ids, .offsets = offs, .capacity = 16};
    cr_assert_eq(tok_encode(t, text, strlen(text), 0, &out), TOK_OK);
    cr_assert_eq(out.n, n, "\"%s\": %d tokens, expected %d", text, out.n, n);
    for (int32_t i = 0; i < n; i++)
        cr_expect(ids[i] == (int32_t)want[i][0] && offs[i].start == want[i][1] &&
                      offs[i].end == want[i][2],
                  "\"%s\": token %d is %d [%u, %u), expected %u [%u, %u)", text, i, ids[i],
                  offs[i].start, offs[i].end, want[i][0], want[i][1], want[i][2]);
}

/* BPE's first symbols as the library's merge_word makes them, values from
 * tokenizers 0.23.3: without unk a character with no piece is dropped; the
 * symbols' offsets are their lengths laid end to end (so what follows a
 * drop moves left); with fuse_unk a pending unk absorbs later unknown
 * characters and is written only at the next known one, after the byte
 * pieces met in between; ignore_merges takes a whole word that is a piece. */
Test(tokenizer_unigram, bpe_merge_word_as_the_library) {
    tok_tokenizer *t = load_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
                                 "\"<unk>\": 1, \"<0x62>\": 2}, \"merges\": []}}");
    static const uint32_t dropped[][3] = {{0, 0, 1}, {0, 1, 2}};
    expect_tokens(t, "abca", dropped, 2);
    tok_free(t);
    t = load_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"<unk>\": 1, "
                  "\"<0x62>\": 2}, \"merges\": [], \"unk_token\": \"<unk>\", "
                  "\"byte_fallback\": true, \"fuse_unk\": true}}");
    static const uint32_t fused[][3] = {{0, 0, 1}, {2, 1, 2}, {1, 2, 5}, {0, 5, 6}};
    expect_tokens(t, "acdbda", fused, 4);
    tok_free(t);
    static const char *const im = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
                                  "\"b\": 1, \"c\": 2, \"bc\": 3, \"abc\": 4}, \"merges\": "
                                  "[[\"b\", \"c\"]], \"ignore_merges\": %s}}";
    char json[512];
    snprintf(json, sizeof json, im, "true");
    t = load_json(json);
    static const uint32_t whole[][3] = {{4, 0, 3}};
    expect_tokens(t, "abc", whole, 1);
    tok_free(t);
    snprintf(json, sizeof json, im, "false");
    t = load_json(json);
    static const uint32_t merged[][3] = {{0, 0, 1}, {3, 1, 3}};
    expect_tokens(t, "abc", merged, 2);
    tok_free(t);
}

/* An added token with normalized true that the normalizer turns into
 * nothing (" " through Strip) loads and never matches, as in tokenizers
 * 0.23.3: "a a" is a, unk, a. */
Test(tokenizer_unigram, added_token_normalized_to_nothing) {
    tok_tokenizer *t = load_json("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": "
                                 "[[\"<unk>\", 0], [\"a\", -1]]}, \"normalizer\": {\"type\": "
                                 "\"Strip\", \"strip_left\": true, \"strip_right\": true}, "
                                 "\"added_tokens\": [{\"id\": 2, \"content\": \" \", "
                                 "\"normalized\": true}]}");
    static const uint32_t want[][3] = {{1, 0, 1}, {0, 1, 2}, {1, 2, 3}};
    expect_tokens(t, "a a", want, 3);
    tok_free(t);
}

/* A Split pattern that backtracks exponentially, (a+)+b on 30 a's then "cb",
 * passes PCRE2's match limit: the input is refused as too complex
 * (TOK_ECOMPLEX, which the routes answer with 422), not as out of memory
 * (which they answer as the service's failure); a short run still matches. */
Test(tokenizer_unigram, split_match_limit_is_not_out_of_memory) {
    tok_tokenizer *t = load_json("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": "
                                 "[[\"<unk>\", 0], [\"a\", -1], [\"b\", -1], [\"c\", -1]]}, "
                                 "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
                                 "{\"Regex\": \"(a+)+b\"}, \"behavior\": \"Isolated\"}}");
    int32_t ids[64];
    tok_output out = {.ids = ids, .capacity = 64};
    const char *ok = "aaab";
    cr_expect_eq(tok_encode(t, ok, strlen(ok), 0, &out), TOK_OK);
    char text[40];
    memset(text, 'a', 30);
    memcpy(text + 30, "cb", 2);
    cr_expect_eq(tok_encode(t, text, 32, 1, &out), TOK_ECOMPLEX);
    cr_expect_str_eq(tok_strerror(TOK_ECOMPLEX),
                     "input too complex for the tokenizer's Split pattern");
    tok_free(t);
}

/* Split patterns see only LF as a line end, as Oniguruma's ^ and $ do,
 * whatever newline PCRE2 was built with: "a$" cuts "a\nb" after the a but
 * not "a\rb", which stays one word and so the one token "a\rb". */
Test(tokenizer_unigram, split_newline_is_lf) {
    tok_tokenizer *t =
        load_json("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], "
                  "[\"a\", -5], [\"b\", -5], [\"\\r\", -5], [\"\\n\", -5], [\"a\\rb\", -1], "
                  "[\"a\\nb\", -1]]}, "
                  "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a$\"}, "
                  "\"behavior\": \"Isolated\"}}");
    int32_t ids[16];
    tok_output out = {.ids = ids, .capacity = 16};
    cr_assert_eq(tok_encode(t, "a\rb", 3, 0, &out), TOK_OK);
    cr_expect_eq(out.n, 1);
    cr_expect_str_eq(tok_id_to_token(t, ids[0]), "a\rb");
    cr_assert_eq(tok_encode(t, "a\nb", 3, 0, &out), TOK_OK);
    cr_expect_gt(out.n, 1);
    cr_expect_str_eq(tok_id_to_token(t, ids[0]), "a");
    tok_free(t);
}

/* A hand-made model: byte fallback, the Viterbi choice, unk fusion. */
Test(tokenizer_unigram, byte_fallback_and_unk) {
    char dir[] = "/tmp/attn-ug-XXXXXX", path[256], err[512] = "";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true, \"vocab\": "
          "[[\"<unk>\", 0], [\"ab\", -1], [\"a\", -2], [\"b\", -2], [\"abc\", -4], [\"c\", -1],"
          " [\"<0xC3>\", -5], [\"<0xA9>\", -5]]},"
          " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"},"
          " {\"type\": \"Fuse\"}]}}",
          f);
    fclose(f);
    tok_tokenizer *t = NULL;
    int rc = tok_load(&t, dir, err, sizeof err);
    unlink(path);
    rmdir(dir);
    cr_assert_eq(rc, TOK_OK, "%s", err);
    int32_t ids[16];
    tok_span offs[16];
    tok_output out = {.ids = ids, .offsets = offs, .capacity = 16};
    /* "ab"+"c" scores -2, better than "abc" at -4. */
    cr_assert_eq(tok_encode(t, "abc", 3, 0, &out), TOK_OK);
    cr_expect_eq(out.n, 2);
    cr_expect_eq(ids[0], 1);
    cr_expect_eq(ids[1], 5);
    /* é is no piece: its two bytes, both spanning the character. */
    cr_assert_eq(tok_encode(t, "\xC3\xA9", 2, 0, &out), TOK_OK);
    cr_expect_eq(out.n, 2);
    cr_expect_eq(ids[0], 6);
    cr_expect_eq(ids[1], 7);
    cr_expect_eq(offs[1].start, 0);
    cr_expect_eq(offs[1].end, 2);
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(tok_decode(t, ids, 2, 1, &text, &len), TOK_OK);
    cr_expect_str_eq(text, "\xC3\xA9");
    free(text);
    /* Two unknown characters without byte pieces fuse into one unk. */
    cr_assert_eq(tok_encode(t, "xyc", 3, 0, &out), TOK_OK);
    cr_expect_eq(out.n, 2);
    cr_expect_eq(ids[0], 0);
    cr_expect_eq(offs[0].end, 2);
    cr_expect_eq(ids[1], 5);
    tok_free(t);
}

/* RobertaProcessing's trim_offsets with a multi-byte space, which the golden
 * cases cannot hold (the Python binding reports character offsets): the
 * library takes the count of space characters off byte offsets, so the
 * piece "\u2003" at bytes [2, 5) of "em\u2003space" becomes [3, 4). */
Test(tokenizer_unigram, trim_offsets_counts_characters) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, "tests/golden/unigram-first", err, sizeof err), TOK_OK, "%s", err);
    int32_t ids[32];
    tok_span offs[32];
    tok_output out = {.ids = ids, .offsets = offs, .capacity = 32};
    const char *text = "em\xE2\x80\x83space";
    cr_assert_eq(tok_encode(t, text, strlen(text), 0, &out), TOK_OK);
    int found = 0;
    for (int32_t i = 0; i < out.n; i++) {
        const char *s = tok_id_to_token(t, ids[i]);
        if (ids[i] == tok_unk_id(t) || (s && strcmp(s, "\xE2\x80\x83") == 0)) {
            cr_expect_eq(offs[i].start, 3);
            cr_expect_eq(offs[i].end, 4);
            found = 1;
        }
    }
    cr_expect(found, "no token for the em space");
    tok_free(t);
}

/* tok_decode of the WordPiece tokenizer (models/all-MiniLM-L6-v2, `make
 * model`) against the library on the ids of every WordPiece golden case
 * (tests/golden/wordpiece_decode.json.gz, make_wordpiece_decode.py). */
Test(tokenizer_unigram, wordpiece_decode) {
    const char *dir = getenv("ATTN_TEST_MODEL_DIR");
    char err[512] = "";
    tok_tokenizer *t = NULL;
    dir = dir && *dir ? dir : "models/all-MiniLM-L6-v2";
    cr_assert_eq(tok_load(&t, dir, err, sizeof err), TOK_OK, "%s (run `make model`)", err);
    json_t *cases = load_cases_from("tests/golden/wordpiece_decode.json.gz", 200);
    size_t i, bad = 0;
    json_t *c;
    char first[1024] = "";
    json_array_foreach(cases, i, c) {
        json_t *jids = json_object_get(c, "ids");
        size_t n = json_array_size(jids);
        int32_t ids[CAP];
        cr_assert_leq(n, CAP);
        for (size_t k = 0; k < n; k++)
            ids[k] = (int32_t)json_integer_value(json_array_get(jids, k));
        static const char *const keys[2] = {"decoded_special", "decoded"};
        for (int skip = 0; skip < 2; skip++) {
            json_t *want = json_object_get(c, keys[skip]);
            char *got = NULL;
            size_t len = 0;
            int rc = tok_decode(t, ids, n, skip, &got, &len);
            if (rc != TOK_OK || len != json_string_length(want) ||
                memcmp(got, json_string_value(want), len) != 0) {
                if (!bad++) {
                    char g[256] = "", w[256];
                    if (got)
                        escape(got, len, g, sizeof g);
                    escape(json_string_value(want), json_string_length(want), w, sizeof w);
                    snprintf(first, sizeof first, "case %zu skip %d: \"%s\", expected \"%s\"", i,
                             skip, g, w);
                }
            }
            free(got);
        }
    }
    cr_expect_eq(bad, 0, "%zu WordPiece decodes differ from HF tokenizers; first: %s", bad, first);
    printf("tokenizer_unigram: WordPiece decode of %zu cases equal to HF tokenizers\n",
           json_array_size(cases) - bad / 2);
    json_decref(cases);
    tok_free(t);
}

/* test_tokenizer_pair.c — tok_encode_pair against Hugging Face `tokenizers`
 * encoding a pair (tests/golden/pair_cases.json.gz, made by
 * make_pair_cases.py): ids, type ids, special mask and byte offsets of every
 * case, untruncated and truncated longest_first on either side, for each
 * post-processor layout (BERT's template, XLM-R's, RobertaProcessing,
 * BertProcessing, none, a template whose pair has fewer specials than its
 * single, the MPNet, ModernBERT, Qwen3 and Gemma templates of tests/golden/fam-*
 * and Llama-3's ByteLevel-then-template Sequence)
 * and for BERT's vocab.txt alone. Then the pieces on their own:
 * longest_first's arithmetic, refusals, errors. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/tokenizer.h"
#include "tests/golden/golden_io.h"

#define CASES_FILE "tests/golden/pair_cases.json.gz"
#define CAP        2048

static const char *model_dir(void) {
    const char *d = getenv("ATTN_TEST_MODEL_DIR");
    return d && *d ? d : "models/all-MiniLM-L6-v2";
}

static tok_tokenizer *load(const char *dir) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    int rc = tok_load(&t, dir, err, sizeof err);
    cr_assert_eq(rc, TOK_OK, "cannot load %s: %s (the MiniLM layout needs `make model`)", dir, err);
    return t;
}

static json_t *layout_cases(const char *name) {
    json_error_t jerr;
    json_t *root = golden_load_json(CASES_FILE, JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(root, "%s:%d: %s", CASES_FILE, jerr.line, jerr.text);
    json_t *cases = json_object_get(json_object_get(root, "layouts"), name);
    cr_assert(json_array_size(cases) >= 800, "%s: layout %s holds too few cases", CASES_FILE, name);
    json_incref(cases);
    json_decref(root);
    return cases;
}

typedef struct result {
    int32_t ids[CAP], types[CAP];
    tok_span offsets[CAP];
    uint8_t special[CAP];
} result;

static int32_t int_at(json_t *arr, size_t i) {
    return (int32_t)json_integer_value(json_array_get(arr, i));
}

/* One case; on a mismatch, the details in why and 0. */
static int check_case(const tok_tokenizer *t, json_t *c, char *why, size_t cap) {
    static result r;
    json_t *ja = json_object_get(c, "a"), *jb = json_object_get(c, "b");
    json_t *max = json_object_get(c, "max_length");
    const char *dir = json_string_value(json_object_get(c, "direction"));
    tok_truncation trunc = !dir                       ? TOK_TRUNCATE_NONE
                           : strcmp(dir, "left") == 0 ? TOK_TRUNCATE_LEFT
                                                      : TOK_TRUNCATE_RIGHT;
    tok_output o = {.ids = r.ids,
                    .offsets = r.offsets,
                    .special = r.special,
                    .type_ids = r.types,
                    .capacity = json_is_integer(max) ? (int32_t)json_integer_value(max) : CAP};
    int rc = tok_encode_pair(t, json_string_value(ja), json_string_length(ja),
                             json_string_value(jb), json_string_length(jb), trunc, &o);
    if (rc != TOK_OK) {
        snprintf(why, cap, "\"%.60s\" / \"%.60s\": %s", json_string_value(ja),
                 json_string_value(jb), tok_strerror(rc));
        return 0;
    }
    json_t *ids = json_object_get(c, "ids");
    const size_t n = json_array_size(ids);
    if ((size_t)o.n != n) {
        snprintf(why, cap, "\"%.60s\" / \"%.60s\" (max %d, %s): %d tokens, expected %zu",
                 json_string_value(ja), json_string_value(jb), o.capacity, dir ? dir : "none", o.n,
                 n);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *off = json_array_get(json_object_get(c, "offsets"), i);
        const uint32_t s = (uint32_t)int_at(off, 0), e = (uint32_t)int_at(off, 1);
        if (r.ids[i] != int_at(ids, i) || r.types[i] != int_at(json_object_get(c, "type_ids"), i) ||
            r.special[i] != int_at(json_object_get(c, "special"), i) || r.offsets[i].start != s ||
            r.offsets[i].end != e) {
            snprintf(why, cap,
                     "\"%.60s\" / \"%.60s\" (max %d, %s): token %zu is id %d type %d special %d "
                     "[%u, %u), expected id %d type %d special %d [%u, %u)",
                     json_string_value(ja), json_string_value(jb), o.capacity, dir ? dir : "none",
                     i, r.ids[i], r.types[i], r.special[i], r.offsets[i].start, r.offsets[i].end,
                     int_at(ids, i), int_at(json_object_get(c, "type_ids"), i),
                     int_at(json_object_get(c, "special"), i), s, e);
            return 0;
        }
    }
    return 1;
}

static size_t check_layout(const tok_tokenizer *t, const char *name) {
    json_t *cases = layout_cases(name);
    size_t i, bad = 0;
    json_t *c;
    char first[3][1100], why[1024];
    json_array_foreach(cases, i, c) {
        if (!check_case(t, c, why, sizeof why)) {
            if (bad < 3)
                snprintf(first[bad], sizeof first[bad], "case %zu: %s", i, why);
            bad++;
        }
    }
    const size_t total = json_array_size(cases);
    cr_expect_eq(bad, 0, "%s: %zu of %zu pairs differ from HF tokenizers; first: %s | %s | %s",
                 name, bad, total, bad > 0 ? first[0] : "", bad > 1 ? first[1] : "",
                 bad > 2 ? first[2] : "");
    printf("tokenizer_pair: %s: %zu of %zu pairs equal to HF tokenizers\n", name, total - bad,
           total);
    json_decref(cases);
    return total - bad;
}

static void golden(const char *name, const char *dir) {
    tok_tokenizer *t = load(dir);
    check_layout(t, name);
    tok_free(t);
}

Test(tokenizer_pair, golden_bert_template) {
    golden("minilm", model_dir());
}
Test(tokenizer_pair, golden_xlmr_template) {
    golden("xlmr", "tests/golden/xlmr-tiny");
}
Test(tokenizer_pair, golden_roberta_processing_bpe) {
    golden("roberta", "tests/golden/roberta-tiny");
}
Test(tokenizer_pair, golden_roberta_processing_unigram) {
    golden("first", "tests/golden/unigram-first");
}
Test(tokenizer_pair, golden_template_fewer_specials) {
    golden("bytefallback", "tests/golden/unigram-bytefallback");
}
Test(tokenizer_pair, golden_bert_processing) {
    golden("bert", "tests/golden/pair-bert");
}
Test(tokenizer_pair, golden_no_post_processor) {
    golden("none", "tests/golden/pair-none");
}
Test(tokenizer_pair, golden_families) {
    static const char *const names[] = {"mpnet", "modernbert", "qwen3", "gemma3", "bytelevel"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[128];
        snprintf(dir, sizeof dir, "tests/golden/fam-%s", names[i]);
        golden(names[i], dir);
    }
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in && out, "copy %s to %s", from, to);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* BERT's vocab.txt without tokenizer.json pairs as transformers'
 * BertTokenizer does, which is what the template says: the same cases. */
Test(tokenizer_pair, golden_bert_vocab_txt) {
    char dir[] = "/tmp/attn-pair-XXXXXX", from[512], to[512];
    cr_assert_not_null(mkdtemp(dir));
    static const char *const files[] = {"vocab.txt", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", model_dir(), files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        copy_file(from, to);
    }
    tok_tokenizer *t = load(dir);
    cr_expect_eq(tok_num_special_pair(t), 3);
    check_layout(t, "minilm");
    tok_free(t);
    for (int i = 0; i < 2; i++) {
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        unlink(to);
    }
    rmdir(dir);
}

/* The library's longest_first on lengths alone: every (n1, n2, room) up to
 * 40, against the rule written out as the library writes it. */
Test(tokenizer_pair, longest_first_lengths) {
    tok_tokenizer *t = load("tests/golden/pair-none"); /* no specials: room = capacity */
    char a[200], b[200];
    int32_t ids[128];
    for (int n1 = 0; n1 <= 40; n1++)
        for (int n2 = 0; n2 <= 40; n2++)
            for (int room = 0; room <= 40; room++) {
                /* "a" is one piece of this model, and " a" repeats it. */
                size_t la = 0, lb = 0;
                for (int i = 0; i < n1; i++)
                    la += (size_t)snprintf(a + la, sizeof a - la, "%sa", i ? " " : "");
                for (int i = 0; i < n2; i++)
                    lb += (size_t)snprintf(b + lb, sizeof b - lb, "%sa", i ? " " : "");
                tok_output o = {.ids = ids, .capacity = room};
                cr_assert_eq(tok_encode_pair(t, a, la, b, lb, TOK_TRUNCATE_RIGHT, &o), TOK_OK);
                int s = n1 < n2 ? n1 : n2, l = n1 < n2 ? n2 : n1;
                int k1 = n1, k2 = n2;
                if (n1 + n2 > room) {
                    l = s > room ? s : (s > room - s ? s : room - s);
                    if (s + l > room) {
                        s = room / 2;
                        l = s + room % 2;
                    }
                    k1 = n1 > n2 ? l : s;
                    k2 = n1 > n2 ? s : l;
                    k1 = k1 < n1 ? k1 : n1;
                    k2 = k2 < n2 ? k2 : n2;
                }
                cr_assert_eq(o.n, k1 + k2, "n1 %d n2 %d room %d: %d tokens, expected %d", n1, n2,
                             room, o.n, k1 + k2);
                cr_assert_eq(o.n_full, n1 + n2);
                cr_assert_leq(o.n, room);
            }
    tok_free(t);
}

Test(tokenizer_pair, refusals_and_errors) {
    tok_tokenizer *t = load("tests/golden/xlmr-tiny");
    int32_t ids[64], types[64];
    cr_expect_eq(tok_num_special_pair(t), 4);
    cr_expect_eq(tok_num_special(t), 2);
    /* Too long without truncation: TOK_ETOOLONG, with the whole count. */
    tok_output o = {.ids = ids, .type_ids = types, .capacity = 8};
    const char *longer = "The quick brown fox jumps over the lazy dog.";
    cr_expect_eq(tok_encode_pair(t, "a", 1, longer, strlen(longer), TOK_TRUNCATE_NONE, &o),
                 TOK_ETOOLONG);
    cr_expect_gt(o.n_full, 8);
    /* Capacity below the pair's special tokens. */
    o.capacity = 3;
    cr_expect_eq(tok_encode_pair(t, "a", 1, "b", 1, TOK_TRUNCATE_RIGHT, &o), TOK_EINVAL);
    /* Exactly the specials: both texts cut away. */
    o.capacity = 4;
    cr_expect_eq(tok_encode_pair(t, "a", 1, "b", 1, TOK_TRUNCATE_LEFT, &o), TOK_OK);
    cr_expect_eq(o.n, 4);
    /* Invalid UTF-8 in either text: error_at counts a then b. */
    o.capacity = 64;
    cr_expect_eq(tok_encode_pair(t, "ab\xff", 3, "b", 1, TOK_TRUNCATE_RIGHT, &o), TOK_EUTF8);
    cr_expect_eq(o.error_at, 2);
    cr_expect_eq(tok_encode_pair(t, "ab", 2, "bc\xc3", 3, TOK_TRUNCATE_RIGHT, &o), TOK_EUTF8);
    cr_expect_eq(o.error_at, 2 + 2);
    cr_expect_eq(tok_encode_pair(NULL, "a", 1, "b", 1, TOK_TRUNCATE_RIGHT, &o), TOK_EINVAL);
    /* tok_encode writes type 0 everywhere. */
    memset(types, 0x55, sizeof types);
    cr_expect_eq(tok_encode(t, "hello", 5, 1, &o), TOK_OK);
    for (int32_t i = 0; i < o.n; i++)
        cr_expect_eq(types[i], 0);
    tok_free(t);
}

/* A template whose pair names one text twice is not followed: pairs are
 * refused by name, single texts still work. */
Test(tokenizer_pair, template_without_pair_refuses_pairs) {
    char dir[] = "/tmp/attn-pair-XXXXXX", file[300];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    json_error_t jerr;
    json_t *tj = json_load_file("tests/golden/xlmr-tiny/tokenizer.json", 0, &jerr);
    cr_assert_not_null(tj);
    json_t *pair = json_object_get(json_object_get(tj, "post_processor"), "pair");
    json_array_clear(pair);
    json_array_append_new(pair, json_pack("{s:{s:s,s:i}}", "Sequence", "id", "A", "type_id", 0));
    json_array_append_new(pair, json_pack("{s:{s:s,s:i}}", "Sequence", "id", "A", "type_id", 1));
    cr_assert_eq(json_dump_file(tj, file, 0), 0);
    json_decref(tj);
    tok_tokenizer *t = load(dir);
    int32_t ids[16];
    tok_output o = {.ids = ids, .capacity = 16};
    cr_expect_eq(tok_num_special_pair(t), -1);
    cr_expect_eq(tok_encode_pair(t, "a", 1, "b", 1, TOK_TRUNCATE_RIGHT, &o), TOK_ENOPAIR);
    cr_expect_eq(tok_encode(t, "a", 1, 1, &o), TOK_OK);
    tok_free(t);
    unlink(file);
    rmdir(dir);
}

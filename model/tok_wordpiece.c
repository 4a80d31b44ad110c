/* tok_wordpiece.c — BERT WordPiece, exact to Hugging Face `tokenizers`.
 *
 * The input is read once, left to right, through a chain of stages that each
 * pass code points on together with the input bytes they came from:
 *   added tokens ([CLS], [SEP], ... written in the text) → clean_text →
 *   handle_chinese_chars → NFD + canonical reordering + drop Mn (strip_accents)
 *   → lowercase → pre-tokenizer (whitespace, punctuation) → WordPiece.
 * Only the current word is held, so memory does not grow with the input. */
#include "model/tok_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model/tok_added.h"
#include "model/unicode_tables.h"

/* ---- the loaded tokenizer ------------------------------------------------- */

#define TOK_MAX_SPECIAL    8 /* post-processor tokens before or after the text */
#define TOK_MAX_WORD_CHARS 4096

typedef struct wp_model wp_model;
struct wp_model {
    /* Vocabulary: token strings packed in one blob, addressed by id. */
    char *blob;
    uint32_t *tok_at;  /* [vocab_size] offset in blob, UINT32_MAX for a hole */
    uint16_t *tok_len; /* [vocab_size] */
    int32_t vocab_size;
    size_t max_token_bytes;

    /* Open-addressing hash of the vocabulary: ids, -1 empty. */
    int32_t *slots;
    uint32_t slot_mask;

    char prefix[16]; /* continuing_subword_prefix, "##" */
    size_t prefix_len;
    int32_t unk_id;
    int32_t max_word_chars;

    bool clean_text, chinese, strip_accents, lowercase;

    int32_t head[TOK_MAX_SPECIAL], tail[TOK_MAX_SPECIAL]; /* post-processor ids */
    int32_t n_head, n_tail;

    tok_added_set added; /* matched in the raw text, all with normalized false */
};

/* FNV-1a: short keys, cheap to extend byte by byte, which the greedy search
 * uses to hash every candidate piece of a word incrementally. */
#define FNV_BASIS 2166136261u
static inline uint32_t fnv_add(uint32_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static bool token_equals(const wp_model *t, int32_t id, const char *pre, size_t pre_len,
                         const char *s, size_t len) {
    if (t->tok_len[id] != pre_len + len)
        return false;
    const char *tok = t->blob + t->tok_at[id];
    return memcmp(tok, pre, pre_len) == 0 && memcmp(tok + pre_len, s, len) == 0;
}

/* Finds pre+s in the vocabulary given h = hash(pre+s); -1 if absent. */
static int32_t vocab_find(const wp_model *t, uint32_t h, const char *pre, size_t pre_len,
                          const char *s, size_t len) {
    for (uint32_t i = h & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        int32_t id = t->slots[i];
        if (id < 0)
            return -1;
        if (token_equals(t, id, pre, pre_len, s, len))
            return id;
    }
}

static int32_t wp_token_to_id(const wp_model *t, const char *token, size_t len) {
    if (!t || !token || len > t->max_token_bytes)
        return -1;
    return vocab_find(t, fnv_add(FNV_BASIS, (const uint8_t *)token, len), "", 0, token, len);
}

/* Added tokens may have ids past the vocabulary (a <mask> added after
 * training): the vocabulary then runs to the largest of them. */
static int32_t wp_vocab_size(const wp_model *t) {
    if (!t)
        return 0;
    int32_t n = t->vocab_size;
    for (int i = 0; i < t->added.n; i++)
        if (t->added.v[i].id >= n)
            n = t->added.v[i].id + 1;
    return n;
}
static int32_t wp_num_special(const wp_model *t) {
    return t ? t->n_head + t->n_tail : 0;
}
static int32_t wp_unk_id(const wp_model *t) {
    return t ? t->unk_id : -1;
}

static const char *wp_id_to_token(const wp_model *t, int32_t id) {
    if (!t || id < 0)
        return NULL;
    const tok_added_token *a = tok_added_by_id(&t->added, id);
    if (a)
        return a->content;
    if (id >= t->vocab_size || t->tok_at[id] == UINT32_MAX)
        return NULL;
    return t->blob + t->tok_at[id];
}

static void wp_free(wp_model *t) {
    if (!t)
        return;
    tok_added_free(&t->added);
    free(t->blob);
    free(t->tok_at);
    free(t->tok_len);
    free(t->slots);
    free(t);
}

/* ---- loading -------------------------------------------------------------- */

/* A vocabulary entry while loading: the string stays owned by its source. */
typedef struct vocab_entry {
    const char *s;
    size_t len;
    int32_t id;
} vocab_entry;

/* Builds blob, id table and hash from entries (ids may be sparse, never
 * repeated). */
static int build_vocab(wp_model *t, const vocab_entry *e, size_t n, const char *file, char *err,
                       size_t err_len) {
    int32_t max_id = -1;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].id < 0 || e[i].len == 0 || e[i].len > UINT16_MAX) {
            tok_set_err(err, err_len, "%s: bad vocabulary entry (id %d)", file, (int)e[i].id);
            return TOK_ELOAD;
        }
        if (e[i].id > max_id)
            max_id = e[i].id;
        bytes += e[i].len + 1;
    }
    if (n == 0 || max_id >= INT32_MAX / 2 || (size_t)max_id >= 4 * n + 1024 ||
        bytes >= UINT32_MAX) {
        tok_set_err(err, err_len, "%s: empty or implausible vocabulary", file);
        return TOK_ELOAD;
    }
    t->vocab_size = max_id + 1;
    uint32_t nslots = 1;
    while (nslots < 2 * n)
        nslots <<= 1;
    t->blob = malloc(bytes);
    t->tok_at = malloc(sizeof *t->tok_at * (size_t)t->vocab_size);
    t->tok_len = calloc((size_t)t->vocab_size, sizeof *t->tok_len);
    t->slots = malloc(sizeof *t->slots * nslots);
    if (!t->blob || !t->tok_at || !t->tok_len || !t->slots) {
        tok_set_err(err, err_len, "%s: out of memory for the vocabulary", file);
        return TOK_ENOMEM;
    }
    t->slot_mask = nslots - 1;
    memset(t->tok_at, 0xFF, sizeof *t->tok_at * (size_t)t->vocab_size);
    memset(t->slots, 0xFF, sizeof *t->slots * nslots);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = e[i].id;
        if (t->tok_at[id] != UINT32_MAX) {
            tok_set_err(err, err_len, "%s: id %d appears twice", file, (int)id);
            return TOK_ELOAD;
        }
        uint32_t h = fnv_add(FNV_BASIS, (const uint8_t *)e[i].s, e[i].len);
        if (vocab_find(t, h, "", 0, e[i].s, e[i].len) >= 0) {
            /* HF keeps the last id of a repeated vocab.txt line; tokenizer.json
             * cannot repeat a key. Refuse rather than guess. */
            tok_set_err(err, err_len, "%s: token \"%.*s\" appears twice", file, (int)e[i].len,
                        e[i].s);
            return TOK_ELOAD;
        }
        memcpy(t->blob + at, e[i].s, e[i].len);
        t->blob[at + e[i].len] = '\0';
        t->tok_at[id] = (uint32_t)at;
        t->tok_len[id] = (uint16_t)e[i].len;
        at += e[i].len + 1;
        if (e[i].len > t->max_token_bytes)
            t->max_token_bytes = e[i].len;
        uint32_t s = h & t->slot_mask;
        while (t->slots[s] >= 0)
            s = (s + 1) & t->slot_mask;
        t->slots[s] = id;
    }
    return TOK_OK;
}

static int set_prefix(wp_model *t, const char *p, const char *file, char *err, size_t err_len) {
    size_t n = strlen(p);
    if (n >= sizeof t->prefix) {
        tok_set_err(err, err_len, "%s: continuing_subword_prefix too long", file);
        return TOK_ELOAD;
    }
    memcpy(t->prefix, p, n + 1);
    t->prefix_len = n;
    return TOK_OK;
}

/* Reads an optional boolean member; null or absent gives dflt. */
static int json_bool(json_t *obj, const char *key, int dflt) {
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* The ids of one special token of a TemplateProcessing post-processor. */
static int template_ids(wp_model *t, json_t *specials, const char *name, int32_t *dst, int32_t *n,
                        const char *file, char *err, size_t err_len) {
    json_t *ids = json_object_get(json_object_get(specials, name), "ids");
    if (!json_is_array(ids)) {
        tok_set_err(err, err_len, "%s: post_processor: no ids for special token %s", file, name);
        return TOK_ELOAD;
    }
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) {
        if (!json_is_integer(v) || *n == TOK_MAX_SPECIAL || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX ||
            !wp_id_to_token(t, (int32_t)json_integer_value(v))) {
            tok_set_err(err, err_len, "%s: post_processor: bad ids for %s", file, name);
            return TOK_ELOAD;
        }
        dst[(*n)++] = (int32_t)json_integer_value(v);
    }
    return TOK_OK;
}

static int load_post_processor(wp_model *t, json_t *pp, const char *file, char *err,
                               size_t err_len) {
    if (json_is_null(pp) || !pp)
        return TOK_OK;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (type && strcmp(type, "BertProcessing") == 0) {
        json_t *cls = json_array_get(json_object_get(pp, "cls"), 1);
        json_t *sep = json_array_get(json_object_get(pp, "sep"), 1);
        if (!json_is_integer(cls) || !json_is_integer(sep)) {
            tok_set_err(err, err_len, "%s: BertProcessing without cls/sep ids", file);
            return TOK_ELOAD;
        }
        t->head[t->n_head++] = (int32_t)json_integer_value(cls);
        t->tail[t->n_tail++] = (int32_t)json_integer_value(sep);
        return TOK_OK;
    }
    if (!type || strcmp(type, "TemplateProcessing") != 0) {
        tok_set_err(err, err_len, "%s: unsupported post_processor %s", file, type ? type : "?");
        return TOK_ELOAD;
    }
    json_t *single = json_object_get(pp, "single");
    json_t *specials = json_object_get(pp, "special_tokens");
    bool seen_seq = false;
    size_t i;
    json_t *piece;
    json_array_foreach(single, i, piece) {
        json_t *sp = json_object_get(piece, "SpecialToken");
        if (json_object_get(piece, "Sequence")) {
            if (seen_seq) {
                tok_set_err(err, err_len, "%s: template with two sequences", file);
                return TOK_ELOAD;
            }
            seen_seq = true;
            continue;
        }
        const char *name = json_string_value(json_object_get(sp, "id"));
        if (!name) {
            tok_set_err(err, err_len, "%s: bad TemplateProcessing piece", file);
            return TOK_ELOAD;
        }
        int rc = seen_seq
                     ? template_ids(t, specials, name, t->tail, &t->n_tail, file, err, err_len)
                     : template_ids(t, specials, name, t->head, &t->n_head, file, err, err_len);
        if (rc)
            return rc;
    }
    if (!seen_seq) {
        tok_set_err(err, err_len, "%s: TemplateProcessing without the sequence", file);
        return TOK_ELOAD;
    }
    return TOK_OK;
}

static int load_normalizer(wp_model *t, json_t *norm, const char *file, char *err, size_t err_len) {
    if (!norm || json_is_null(norm))
        return TOK_OK;
    const char *type = json_string_value(json_object_get(norm, "type"));
    if (!type || strcmp(type, "BertNormalizer") != 0) {
        tok_set_err(err, err_len, "%s: unsupported normalizer %s", file, type ? type : "?");
        return TOK_ELOAD;
    }
    t->clean_text = json_bool(norm, "clean_text", 1);
    t->chinese = json_bool(norm, "handle_chinese_chars", 1);
    t->lowercase = json_bool(norm, "lowercase", 1);
    /* null strip_accents follows lowercase, as in the library. */
    t->strip_accents = json_bool(norm, "strip_accents", t->lowercase);
    return TOK_OK;
}

/* Added tokens with lstrip, rstrip and single_word are found as the
 * library finds them (model/tok_added.c); normalized true would need the
 * added tokens searched again in the normalized text, which this streaming
 * tokenizer does not hold, so it is refused. */
static int load_added_tokens(wp_model *t, json_t *arr, const char *file, char *err,
                             size_t err_len) {
    int rc = tok_added_load(&t->added, arr, INT32_MAX, file, err, err_len);
    for (int i = 0; i < t->added.n && !rc; i++)
        if (t->added.v[i].normalized) {
            tok_set_err(err, err_len,
                        "%s: added token %s has normalized true, which the WordPiece tokenizer "
                        "does not support",
                        file, t->added.v[i].content);
            rc = TOK_ELOAD;
        }
    return rc;
}

static int load_tokenizer_json(wp_model *t, const char *file, char *err, size_t err_len) {
    json_error_t jerr;
    json_t *root = json_load_file(file, 0, &jerr);
    if (!root) {
        tok_set_err(err, err_len, "%s:%d: %s", file, jerr.line, jerr.text);
        return TOK_ELOAD;
    }
    int rc = TOK_ELOAD;
    vocab_entry *entries = NULL;
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    const char *type = json_string_value(json_object_get(model, "type"));
    const char *pre =
        json_string_value(json_object_get(json_object_get(root, "pre_tokenizer"), "type"));
    if (!type || strcmp(type, "WordPiece") != 0 || !json_is_object(vocab)) {
        tok_set_err(err, err_len, "%s: model is %s, not WordPiece", file, type ? type : "missing");
        goto out;
    }
    if (!pre || strcmp(pre, "BertPreTokenizer") != 0) {
        tok_set_err(err, err_len, "%s: unsupported pre_tokenizer %s", file, pre ? pre : "null");
        goto out;
    }
    size_t n = json_object_size(vocab), i = 0;
    entries = malloc(sizeof *entries * (n ? n : 1));
    if (!entries) {
        rc = TOK_ENOMEM;
        tok_set_err(err, err_len, "%s: out of memory", file);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            tok_set_err(err, err_len, "%s: vocab entry %s has no valid id", file, key);
            goto out;
        }
        entries[i++] = (vocab_entry){key, strlen(key), (int32_t)json_integer_value(v)};
    }
    if ((rc = build_vocab(t, entries, n, file, err, err_len)))
        goto out;
    rc = TOK_ELOAD;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    const char *prefix = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    json_t *maxw = json_object_get(model, "max_input_chars_per_word");
    t->unk_id = unk ? wp_token_to_id(t, unk, strlen(unk)) : -1;
    if (t->unk_id < 0) {
        tok_set_err(err, err_len, "%s: unk_token %s is not in the vocabulary", file,
                    unk ? unk : "null");
        goto out;
    }
    if ((rc = set_prefix(t, prefix ? prefix : "##", file, err, err_len)))
        goto out;
    rc = TOK_ELOAD;
    if (json_is_integer(maxw)) {
        json_int_t m = json_integer_value(maxw);
        if (m < 1 || m > TOK_MAX_WORD_CHARS) {
            tok_set_err(err, err_len, "%s: max_input_chars_per_word %lld out of range 1..%d", file,
                        (long long)m, TOK_MAX_WORD_CHARS);
            goto out;
        }
        t->max_word_chars = (int32_t)m;
    }
    if ((rc = load_normalizer(t, json_object_get(root, "normalizer"), file, err, err_len)) ||
        (rc = load_added_tokens(t, json_object_get(root, "added_tokens"), file, err, err_len)) ||
        (rc = load_post_processor(t, json_object_get(root, "post_processor"), file, err, err_len)))
        goto out;
    rc = TOK_OK;
out:
    free(entries);
    json_decref(root);
    return rc;
}

/* A special-token name from tokenizer_config.json: a string, or an object
 * with "content" (the AddedToken form). */
static const char *config_token(json_t *cfg, const char *key, const char *dflt) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : dflt;
}

/* vocab.txt (one token a line, id = line number) with tokenizer_config.json,
 * as transformers builds BertTokenizerFast from them. */
static int load_vocab_txt(wp_model *t, const char *dir, char *err, size_t err_len) {
    char file[4096], cfg_file[4096];
    snprintf(file, sizeof file, "%s/vocab.txt", dir);
    snprintf(cfg_file, sizeof cfg_file, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(file, "rb");
    if (!f) {
        tok_set_err(err, err_len, "%s: %s (and no tokenizer.json)", file, strerror(errno));
        return TOK_ELOAD;
    }
    int rc = TOK_ENOMEM;
    char *text = NULL;
    vocab_entry *entries = NULL;
    json_t *cfg = NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        rc = TOK_ELOAD;
        goto out;
    }
    long size = ftell(f);
    if (size < 0 || size > (1L << 30) || fseek(f, 0, SEEK_SET) != 0) {
        rc = TOK_ELOAD;
        tok_set_err(err, err_len, "%s: cannot size the file", file);
        goto out;
    }
    text = malloc((size_t)size + 1);
    entries = malloc(sizeof *entries * ((size_t)size / 2 + 1));
    if (!text || !entries) {
        tok_set_err(err, err_len, "%s: out of memory", file);
        goto out;
    }
    if (fread(text, 1, (size_t)size, f) != (size_t)size) {
        rc = TOK_ELOAD;
        tok_set_err(err, err_len, "%s: read error", file);
        goto out;
    }
    text[size] = '\0';
    size_t n = 0;
    for (char *line = text; line < text + size;) {
        char *nl = memchr(line, '\n', (size_t)(text + size - line));
        char *end = nl ? nl : text + size;
        size_t len = (size_t)(end - line);
        if (len && line[len - 1] == '\r')
            len--;
        line[len] = '\0';
        entries[n] = (vocab_entry){line, len, (int32_t)n};
        n++;
        line = end + 1;
    }
    if ((rc = build_vocab(t, entries, n, file, err, err_len)))
        goto out;

    /* A missing config means the BertTokenizer defaults. */
    json_error_t jerr;
    cfg = json_load_file(cfg_file, 0, &jerr);
    if (!cfg && errno != ENOENT) {
        rc = TOK_ELOAD;
        tok_set_err(err, err_len, "%s:%d: %s", cfg_file, jerr.line, jerr.text);
        goto out;
    }
    t->clean_text = true;
    t->chinese = json_bool(cfg, "tokenize_chinese_chars", 1);
    t->lowercase = json_bool(cfg, "do_lower_case", 1);
    t->strip_accents = json_bool(cfg, "strip_accents", t->lowercase);
    const char *names[5] = {
        config_token(cfg, "pad_token", "[PAD]"), config_token(cfg, "unk_token", "[UNK]"),
        config_token(cfg, "cls_token", "[CLS]"), config_token(cfg, "sep_token", "[SEP]"),
        config_token(cfg, "mask_token", "[MASK]")};
    int32_t ids[5];
    json_t *added = json_array();
    rc = added ? TOK_OK : TOK_ENOMEM;
    for (int i = 0; i < 5 && !rc; i++) {
        ids[i] = wp_token_to_id(t, names[i], strlen(names[i]));
        if (ids[i] >= 0 &&
            json_array_append_new(
                added, json_pack("{s:s,s:i,s:b}", "content", names[i], "id", ids[i], "special", 1)))
            rc = TOK_ENOMEM;
    }
    if (!rc)
        rc = tok_added_load(&t->added, added, INT32_MAX, file, err, err_len);
    json_decref(added);
    if (rc) {
        if (rc == TOK_ENOMEM)
            tok_set_err(err, err_len, "%s: out of memory", file);
        goto out;
    }
    rc = TOK_ELOAD;
    t->unk_id = ids[1];
    if (ids[1] < 0 || ids[2] < 0 || ids[3] < 0) {
        tok_set_err(err, err_len, "%s: %s, %s or %s is not in the vocabulary", file, names[1],
                    names[2], names[3]);
        goto out;
    }
    t->head[t->n_head++] = ids[2];
    t->tail[t->n_tail++] = ids[3];
    rc = set_prefix(t, "##", file, err, err_len);
out:
    json_decref(cfg);
    free(entries);
    free(text);
    fclose(f);
    return rc;
}

static int wp_load_dir(wp_model **out, const char *model_dir, char *err, size_t err_len) {
    if (!out || !model_dir) {
        tok_set_err(err, err_len, "tok_load: no model directory");
        return TOK_EINVAL;
    }
    *out = NULL;
    wp_model *t = calloc(1, sizeof *t);
    if (!t) {
        tok_set_err(err, err_len, "tok_load: out of memory");
        return TOK_ENOMEM;
    }
    t->max_word_chars = 100;
    char file[4096];
    snprintf(file, sizeof file, "%s/tokenizer.json", model_dir);
    FILE *probe = fopen(file, "rb");
    int rc;
    if (probe) {
        fclose(probe);
        rc = load_tokenizer_json(t, file, err, err_len);
    } else {
        rc = load_vocab_txt(t, model_dir, err, err_len);
    }
    if (rc) {
        wp_free(t);
        return rc;
    }
    *out = t;
    return TOK_OK;
}

/* ---- encoding: state ----------------------------------------------------- */

/* One normalized code point and the input bytes it came from. */
typedef struct norm_cp {
    uint32_t cp;
    uint32_t start, end;
} norm_cp;

/* One character of the current word. */
typedef struct word_char {
    uint32_t byte_at; /* offset of its UTF-8 in word_bytes */
    uint32_t start, end;
} word_char;

typedef struct enc_state {
    const wp_model *t;
    tok_output *out;
    int32_t body_cap; /* pieces that fit between the head and tail tokens */
    int32_t pieces;   /* pieces produced so far (kept or not) */

    /* The current word: up to max_word_chars characters are kept; past that
     * only the count grows, since the whole word becomes [UNK]. */
    word_char *chars;    /* [max_word_chars + 1] */
    uint32_t *hashes;    /* [max_word_chars + 1] scratch for the greedy search */
    int32_t *piece_ids;  /* [max_word_chars] */
    uint32_t *piece_end; /* [max_word_chars] */
    char *word_bytes;    /* [4 * max_word_chars] */
    int32_t nchars;
    uint32_t nbytes;
    uint32_t word_start, word_end;

    /* Marks with a nonzero combining class waiting for canonical reordering. */
    norm_cp *run, *run_tmp;
    size_t run_len, run_cap;
    norm_cp run_inline[32], run_tmp_inline[32];
    int err;
} enc_state;

static void emit_piece(enc_state *s, int32_t id, uint32_t start, uint32_t end) {
    if (s->pieces < s->body_cap) {
        int32_t at = s->t->n_head + s->pieces;
        s->out->ids[at] = id;
        if (s->out->offsets)
            s->out->offsets[at] = (tok_span){start, end};
        if (s->out->special)
            s->out->special[at] = 0;
    }
    if (s->pieces < INT32_MAX)
        s->pieces++;
}

/* ---- encoding: WordPiece ------------------------------------------------- */

/* Greedy longest-match-first over the current word; the whole word becomes
 * [UNK] when it is too long or some position matches nothing. */
static void end_word(enc_state *s) {
    const wp_model *t = s->t;
    int32_t n = s->nchars;
    if (n == 0)
        return;
    uint32_t nbytes = s->nbytes;
    s->nchars = 0;
    s->nbytes = 0;
    if (n > t->max_word_chars) {
        emit_piece(s, t->unk_id, s->word_start, s->word_end);
        return;
    }
    s->chars[n].byte_at = nbytes;
    const char *w = s->word_bytes;
    int32_t npieces = 0;
    for (int32_t a = 0; a < n;) {
        const char *pre = a ? t->prefix : "";
        size_t pre_len = a ? t->prefix_len : 0;
        uint32_t h = fnv_add(FNV_BASIS, (const uint8_t *)pre, pre_len);
        /* Hash every candidate a..b once, front to back, stopping at the
         * longest vocabulary entry; then try them longest first. */
        int32_t last = a;
        for (int32_t b = a + 1; b <= n; b++) {
            uint32_t from = s->chars[b - 1].byte_at, to = s->chars[b].byte_at;
            if (pre_len + (to - s->chars[a].byte_at) > t->max_token_bytes)
                break;
            h = fnv_add(h, (const uint8_t *)w + from, to - from);
            s->hashes[b] = h;
            last = b;
        }
        int32_t id = -1, b = last;
        for (; b > a; b--) {
            uint32_t from = s->chars[a].byte_at;
            id = vocab_find(t, s->hashes[b], pre, pre_len, w + from, s->chars[b].byte_at - from);
            if (id >= 0)
                break;
        }
        if (id < 0) {
            emit_piece(s, t->unk_id, s->word_start, s->word_end);
            return;
        }
        s->piece_ids[npieces] = id;
        s->piece_end[npieces++] = (uint32_t)b;
        a = b;
    }
    for (int32_t i = 0, a = 0; i < npieces; i++) {
        int32_t b = (int32_t)s->piece_end[i];
        /* Canonical reordering can put a later input character first, so a
         * piece spans the union of its characters' bytes. */
        uint32_t start = s->chars[a].start, end = s->chars[a].end;
        for (int32_t k = a + 1; k < b; k++) {
            start = s->chars[k].start < start ? s->chars[k].start : start;
            end = s->chars[k].end > end ? s->chars[k].end : end;
        }
        emit_piece(s, s->piece_ids[i], start, end);
        a = b;
    }
}

/* ---- encoding: pre-tokenizer --------------------------------------------- */

/* BertPreTokenizer: whitespace ends a word and vanishes; punctuation ends a
 * word and is a word of its own. */
static void pretokenize(enc_state *s, uint32_t cp, uint32_t start, uint32_t end) {
    uint8_t flags = uni_lookup(cp)->flags;
    if (flags & UNI_WHITESPACE) {
        end_word(s);
        return;
    }
    if (flags & UNI_PUNCT)
        end_word(s);
    if (s->nchars == 0) {
        s->word_start = start;
        s->word_end = end;
    }
    s->word_start = start < s->word_start ? start : s->word_start;
    s->word_end = end > s->word_end ? end : s->word_end;
    if (s->nchars < s->t->max_word_chars) {
        s->chars[s->nchars].byte_at = s->nbytes;
        s->chars[s->nchars].start = start;
        s->chars[s->nchars].end = end;
        s->nbytes += (uint32_t)tok_utf8_put(s->word_bytes + s->nbytes, cp);
    }
    if (s->nchars <= s->t->max_word_chars)
        s->nchars++;
    if (flags & UNI_PUNCT)
        end_word(s);
}

/* ---- encoding: normalizer ------------------------------------------------ */

static void lowercase_stage(enc_state *s, norm_cp c) {
    const uni_record *r = uni_lookup(c.cp);
    if (!s->t->lowercase || r->lower_len == 0) {
        pretokenize(s, c.cp, c.start, c.end);
        return;
    }
    for (int i = 0; i < r->lower_len; i++)
        pretokenize(s, uni_pool[r->lower_at + i], c.start, c.end);
}

/* Canonical ordering: a stable sort by combining class, done as a counting
 * sort so an adversarial run of marks stays linear. */
static void flush_run(enc_state *s) {
    size_t n = s->run_len;
    if (n == 0)
        return;
    s->run_len = 0;
    if (n > 1) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++)
            count[uni_lookup(s->run[i].cp)->ccc + 1]++;
        for (int k = 1; k < 257; k++)
            count[k] += count[k - 1];
        for (size_t i = 0; i < n; i++)
            s->run_tmp[count[uni_lookup(s->run[i].cp)->ccc]++] = s->run[i];
        memcpy(s->run, s->run_tmp, n * sizeof *s->run);
    }
    for (size_t i = 0; i < n; i++)
        lowercase_stage(s, s->run[i]);
}

static int run_push(enc_state *s, norm_cp c) {
    if (s->run_len == s->run_cap) {
        /* Past the inline arrays both move to the heap together; only run
         * holds anything to keep. The run grows with the input (a body of
         * marks is one run), so it comes from the scratch allocator that
         * charges the request's budget, like every other encode scratch. */
        size_t cap = s->run_cap * 2;
        norm_cp *run = tok_scratch_realloc(NULL, cap * sizeof *run);
        norm_cp *tmp = tok_scratch_realloc(NULL, cap * sizeof *tmp);
        if (!run || !tmp) {
            tok_scratch_free(run);
            tok_scratch_free(tmp);
            return TOK_ENOMEM;
        }
        memcpy(run, s->run, s->run_len * sizeof *run);
        if (s->run != s->run_inline) {
            tok_scratch_free(s->run);
            tok_scratch_free(s->run_tmp);
        }
        s->run = run;
        s->run_tmp = tmp;
        s->run_cap = cap;
    }
    s->run[s->run_len++] = c;
    return TOK_OK;
}

/* strip_accents: NFD, then drop nonspacing marks. Marks with a nonzero class
 * wait in the run until the next starter fixes their canonical order. A mark
 * that is dropped anyway can be dropped at once: removing elements from a
 * stably sorted run leaves the others in order. A dropped mark of class 0
 * still ends the run, as it would have in the NFD text. */
static void decomposed_stage(enc_state *s, norm_cp c) {
    const uni_record *r = uni_lookup(c.cp);
    if (r->ccc != 0) {
        if (!(r->flags & UNI_MN) && run_push(s, c))
            s->err = TOK_ENOMEM;
        return;
    }
    flush_run(s);
    if (!(r->flags & UNI_MN))
        lowercase_stage(s, c);
}

static void strip_stage(enc_state *s, norm_cp c) {
    if (!s->t->strip_accents) {
        lowercase_stage(s, c);
        return;
    }
    enum { S_BASE = 0xAC00, S_COUNT = 11172, N_COUNT = 588, T_COUNT = 28 };
    if (c.cp >= S_BASE && c.cp < S_BASE + S_COUNT) {
        uint32_t i = c.cp - S_BASE;
        decomposed_stage(s, (norm_cp){0x1100 + i / N_COUNT, c.start, c.end});
        decomposed_stage(s, (norm_cp){0x1161 + (i % N_COUNT) / T_COUNT, c.start, c.end});
        if (i % T_COUNT)
            decomposed_stage(s, (norm_cp){0x11A7 + i % T_COUNT, c.start, c.end});
        return;
    }
    const uni_record *r = uni_lookup(c.cp);
    if (r->decomp_len == 0) {
        decomposed_stage(s, c);
        return;
    }
    for (int i = 0; i < r->decomp_len; i++)
        decomposed_stage(s, (norm_cp){uni_pool[r->decomp_at + i], c.start, c.end});
}

/* clean_text and handle_chinese_chars, on one input character. */
static void normalize_char(enc_state *s, norm_cp c) {
    const uni_record *r = uni_lookup(c.cp);
    if (s->t->clean_text) {
        if (r->flags & UNI_REMOVE)
            return;
        if (r->flags & UNI_CLEAN_SPACE)
            c.cp = ' ';
    }
    if (s->t->chinese && (r->flags & UNI_CHINESE)) {
        strip_stage(s, (norm_cp){' ', c.start, c.end});
        strip_stage(s, c);
        strip_stage(s, (norm_cp){' ', c.start, c.end});
        return;
    }
    strip_stage(s, c);
}

/* ---- encoding: input ----------------------------------------------------- */

/* Ends the current piece of text: as the library normalizes each piece
 * between added tokens on its own, a pending run of marks ends here too. */
static void end_piece(enc_state *s) {
    flush_run(s);
    end_word(s);
}

/* The text between added tokens, through the normalizer. */
static void normalize_text(enc_state *s, const char *text, size_t from, size_t to) {
    for (size_t i = from; i < to && !s->err;) {
        uint32_t cp = 0;
        size_t n = tok_utf8_get((const uint8_t *)text + i, to - i, &cp);
        normalize_char(s, (norm_cp){cp, (uint32_t)i, (uint32_t)(i + n)});
        i += n;
    }
}

static int encode_text(enc_state *s, const char *text, size_t len) {
    const wp_model *t = s->t;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = tok_utf8_get((const uint8_t *)text + i, len - i, &cp);
        if (n == 0) {
            s->out->error_at = i;
            return TOK_EUTF8;
        }
        i += n;
    }
    tok_added_iter it = {0, 0};
    size_t at = 0;
    while (!s->err) {
        size_t from, to;
        const tok_added_token *a = tok_added_next(&t->added, false, text, len, &it, &from, &to);
        normalize_text(s, text, at, a ? from : len);
        if (!a || s->err)
            break;
        end_piece(s);
        emit_piece(s, a->id, (uint32_t)from, (uint32_t)to);
        at = to;
    }
    if (!s->err)
        end_piece(s);
    return s->err;
}

static int wp_encode(const wp_model *t, const char *text, size_t len, int truncate,
                     tok_output *out) {
    if (!t || !out || !out->ids || (!text && len) || len > UINT32_MAX)
        return TOK_EINVAL;
    int32_t nspecial = t->n_head + t->n_tail;
    out->n = 0;
    out->n_full = 0;
    out->error_at = 0;
    if (out->capacity < nspecial)
        return TOK_EINVAL;
    size_t m = (size_t)t->max_word_chars;
    enc_state s = {.t = t, .out = out, .body_cap = out->capacity - nspecial};
    s.run = s.run_inline;
    s.run_tmp = s.run_tmp_inline;
    s.run_cap = sizeof s.run_inline / sizeof s.run_inline[0];
    /* One allocation for the word scratch, sized by max_input_chars_per_word. */
    size_t bytes = (m + 1) * sizeof(word_char) + (m + 1) * sizeof(uint32_t) + m * sizeof(int32_t) +
                   m * sizeof(uint32_t) + 4 * m;
    char *scratch = tok_scratch_realloc(NULL, bytes);
    if (!scratch)
        return TOK_ENOMEM;
    s.chars = (word_char *)scratch;
    s.hashes = (uint32_t *)(s.chars + m + 1);
    s.piece_ids = (int32_t *)(s.hashes + m + 1);
    s.piece_end = (uint32_t *)(s.piece_ids + m);
    s.word_bytes = (char *)(s.piece_end + m);

    int rc = encode_text(&s, text ? text : "", len);
    if (s.run != s.run_inline)
        tok_scratch_free(s.run);
    if (s.run_tmp != s.run_tmp_inline)
        tok_scratch_free(s.run_tmp);
    tok_scratch_free(scratch);
    if (rc)
        return rc;

    int32_t kept = s.pieces < s.body_cap ? s.pieces : s.body_cap;
    out->n_full = s.pieces > INT32_MAX - nspecial ? INT32_MAX : s.pieces + nspecial;
    if (!truncate && s.pieces > s.body_cap)
        return TOK_ETOOLONG;
    for (int32_t i = 0; i < t->n_head; i++) {
        out->ids[i] = t->head[i];
        if (out->offsets)
            out->offsets[i] = (tok_span){0, 0};
        if (out->special)
            out->special[i] = 1;
    }
    for (int32_t i = 0; i < t->n_tail; i++) {
        int32_t at = t->n_head + kept + i;
        out->ids[at] = t->tail[i];
        if (out->offsets)
            out->offsets[at] = (tok_span){0, 0};
        if (out->special)
            out->special[at] = 1;
    }
    out->n = kept + nspecial;
    return TOK_OK;
}

/* ---- decoding ------------------------------------------------------------ */

/* The WordPiece decoder: pieces joined by spaces, a continuing piece glued to
 * the one before without its prefix, then the library's cleanup of spaces
 * before punctuation and English contractions, applied to each piece with its
 * leading space. */
static const char *const wp_cleanup[][2] = {
    {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},
    {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"},
    {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

/* Replaces every from by to in buf[0, *n) (to is never longer than from). */
static void replace_all(char *buf, size_t *n, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), w = 0;
    for (size_t r = 0; r < *n;) {
        if (r + fl <= *n && memcmp(buf + r, from, fl) == 0) {
            memmove(buf + w, to, tl);
            w += tl;
            r += fl;
        } else {
            buf[w++] = buf[r++];
        }
    }
    *n = w;
}

static int wp_decode(const void *m, const int32_t *ids, size_t n, int skip_special, char **text,
                     size_t *len) {
    const wp_model *t = m;
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        const char *s = wp_id_to_token(t, ids[i]);
        if (!s)
            return TOK_EINVAL;
        cap += strlen(s) + 1;
    }
    char *out = malloc(cap), *piece = malloc(cap);
    if (!out || !piece) {
        free(out);
        free(piece);
        return TOK_ENOMEM;
    }
    size_t o = 0;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        /* As the library: a token whose string is a special token's
         * content is skipped, whatever its id. */
        const char *s = wp_id_to_token(t, ids[i]);
        size_t sl = strlen(s), pl = 0;
        if (skip_special && tok_added_is_special(&t->added, s, sl))
            continue;
        if (!first && t->prefix_len && sl >= t->prefix_len &&
            memcmp(s, t->prefix, t->prefix_len) == 0) {
            s += t->prefix_len;
            sl -= t->prefix_len;
        } else if (!first) {
            piece[pl++] = ' ';
        }
        memcpy(piece + pl, s, sl);
        pl += sl;
        for (size_t k = 0; k < sizeof wp_cleanup / sizeof wp_cleanup[0]; k++)
            replace_all(piece, &pl, wp_cleanup[k][0], wp_cleanup[k][1]);
        memcpy(out + o, piece, pl);
        o += pl;
        first = false;
    }
    free(piece);
    out[o] = '\0';
    *text = out;
    *len = o;
    return TOK_OK;
}

/* ---- the model's slots --------------------------------------------------- */

int tok_wordpiece_load(void **impl, const char *model_dir, char *err, size_t err_len) {
    wp_model *t = NULL;
    int rc = wp_load_dir(&t, model_dir, err, err_len);
    *impl = t;
    return rc;
}

static int wp_encode_slot(const void *m, const char *text, size_t len, int truncate,
                          tok_output *out) {
    return wp_encode(m, text, len, truncate, out);
}
static int32_t wp_num_special_slot(const void *m) {
    return wp_num_special(m);
}
static int32_t wp_vocab_size_slot(const void *m) {
    return wp_vocab_size(m);
}
static const char *wp_id_to_token_slot(const void *m, int32_t id) {
    return wp_id_to_token(m, id);
}
static int32_t wp_token_to_id_slot(const void *m, const char *s, size_t len) {
    return wp_token_to_id(m, s, len);
}
static int32_t wp_unk_id_slot(const void *m) {
    return wp_unk_id(m);
}
static void wp_free_slot(void *m) {
    wp_free(m);
}

const tok_ops tok_wordpiece_ops = {
    .name = "WordPiece",
    .encode = wp_encode_slot,
    .decode = wp_decode,
    .num_special = wp_num_special_slot,
    .vocab_size = wp_vocab_size_slot,
    .id_to_token = wp_id_to_token_slot,
    .token_to_id = wp_token_to_id_slot,
    .unk_id = wp_unk_id_slot,
    .free = wp_free_slot,
};

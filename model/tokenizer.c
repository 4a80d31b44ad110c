/* tokenizer.c — the tokenizer front: picks the model from tokenizer.json's
 * model.type and forwards every call to that model's slots (tok_impl.h). */
#include "model/tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model/tok_impl.h"

/* The post-processor's pair template: special tokens and the two texts in
 * order, each with its type id. */
#define TOK_PAIR_MAX 16
typedef struct pair_piece {
    int32_t id;  /* the special token's id; unused for a text */
    int8_t text; /* -1: a special token, 0: the first text, 1: the second */
    int32_t type;
} pair_piece;

typedef struct pair_template {
    pair_piece p[TOK_PAIR_MAX];
    int n;
    int32_t n_special;
    bool ok; /* false: no pair template (tok_encode_pair gives TOK_ENOPAIR) */
} pair_template;

struct tok_tokenizer {
    const tok_ops *ops;
    void *impl;
    pair_template pair;
};

const char *tok_strerror(int err) {
    switch (err) {
#define TOK_ERR_CASE(name, code, msg)                                                              \
    case name:                                                                                     \
        return msg;
        TOK_ERRORS(TOK_ERR_CASE)
#undef TOK_ERR_CASE
    }
    return "unknown tokenizer error";
}

static void *(*scratch_realloc)(void *, size_t) = realloc;
static void (*scratch_free)(void *) = free;

void tok_set_alloc_funcs(void *(*realloc_fn)(void *, size_t), void (*free_fn)(void *)) {
    scratch_realloc = realloc_fn ? realloc_fn : realloc;
    scratch_free = free_fn ? free_fn : free;
}

void *tok_scratch_realloc(void *p, size_t n) {
    return scratch_realloc(p, n);
}

void tok_scratch_free(void *p) {
    scratch_free(p);
}

void tok_set_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || !err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* The model families tokenizer.json may name, and their loaders. A type that
 * is not here (WordLevel, ...) is refused by name at load. */
typedef struct tok_family {
    const char *type;
    const tok_ops *ops;
    int (*load)(void **impl, const char *arg, char *err, size_t err_len);
    int wants_dir; /* 1: the loader takes the directory, 0: the file */
} tok_family;

static const tok_family tok_families[] = {
    {"WordPiece", &tok_wordpiece_ops, tok_wordpiece_load, 1},
    {"Unigram", &tok_unigram_ops, tok_pipeline_load, 0},
    {"BPE", &tok_bpe_ops, tok_pipeline_load, 0},
};

/* ---- the pair template ---------------------------------------------------- */

static int pair_add(pair_template *pt, int8_t text, int32_t id, int32_t type) {
    if (pt->n == TOK_PAIR_MAX)
        return -1;
    pt->p[pt->n++] = (pair_piece){.id = id, .text = text, .type = type};
    if (text < 0)
        pt->n_special++;
    return 0;
}

/* ["[CLS]", 101]: the id of a BertProcessing / RobertaProcessing token. */
static int32_t processor_id(json_t *pair) {
    json_t *id = json_array_get(pair, 1);
    return json_is_integer(id) && json_integer_value(id) >= 0 && json_integer_value(id) <= INT32_MAX
               ? (int32_t)json_integer_value(id)
               : -1;
}

/* The pair template of tokenizer.json's post_processor, as the library
 * builds it: BertProcessing [CLS] A [SEP] B [SEP] with B's part type 1;
 * RobertaProcessing <s> A </s> </s> B </s>, every type 0; TemplateProcessing
 * its "pair" list, each special token expanded to its ids. Returns -1 when
 * there is none this code can follow. */
static int parse_pair(json_t *pp, pair_template *pt) {
    const char *type = json_string_value(json_object_get(pp, "type"));
    *pt = (pair_template){.ok = true};
    /* ByteLevel adds no token: the texts back to back, as without a
     * post-processor; in a Sequence the one that adds tokens decides. */
    if (type && strcmp(type, "ByteLevel") == 0)
        return 0;
    if (type && strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pp, "processors"), i, p) {
            const char *pt_type = json_string_value(json_object_get(p, "type"));
            if (!pt_type || strcmp(pt_type, "ByteLevel") != 0)
                return parse_pair(p, pt);
        }
        return 0;
    }
    if (type && (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0)) {
        const int32_t cls = processor_id(json_object_get(pp, "cls"));
        const int32_t sep = processor_id(json_object_get(pp, "sep"));
        if (cls < 0 || sep < 0)
            return -1;
        const int32_t tb = strcmp(type, "BertProcessing") == 0 ? 1 : 0;
        pair_add(pt, -1, cls, 0);
        pair_add(pt, 0, 0, 0);
        pair_add(pt, -1, sep, 0);
        if (!tb)
            pair_add(pt, -1, sep, 0);
        pair_add(pt, 1, 0, tb);
        pair_add(pt, -1, sep, tb);
        return 0;
    }
    if (!type || strcmp(type, "TemplateProcessing") != 0)
        return -1;
    json_t *specials = json_object_get(pp, "special_tokens");
    json_t *pieces = json_object_get(pp, "pair");
    bool seen[2] = {false, false};
    size_t i;
    json_t *piece;
    if (!json_is_array(pieces) || json_array_size(pieces) == 0)
        return -1;
    json_array_foreach(pieces, i, piece) {
        json_t *seq = json_object_get(piece, "Sequence");
        json_t *sp = json_object_get(piece, "SpecialToken");
        json_t *o = seq ? seq : sp;
        json_t *ty = json_object_get(o, "type_id");
        const char *name = json_string_value(json_object_get(o, "id"));
        if (!name || !json_is_integer(ty) || json_integer_value(ty) < 0 ||
            json_integer_value(ty) > INT32_MAX)
            return -1;
        const int32_t tid = (int32_t)json_integer_value(ty);
        if (seq) {
            const int which = strcmp(name, "A") == 0 ? 0 : strcmp(name, "B") == 0 ? 1 : -1;
            if (which < 0 || seen[which] || pair_add(pt, (int8_t)which, 0, tid))
                return -1;
            seen[which] = true;
            continue;
        }
        json_t *ids = json_object_get(json_object_get(specials, name), "ids");
        size_t k;
        json_t *v;
        if (!json_is_array(ids))
            return -1;
        json_array_foreach(ids, k, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > INT32_MAX ||
                pair_add(pt, -1, (int32_t)json_integer_value(v), tid))
                return -1;
        }
    }
    return seen[0] && seen[1] ? 0 : -1;
}

/* The pair when tokenizer.json has no post-processor (the texts back to
 * back, the second's type 1, as the library's default processing) or
 * there is no tokenizer.json (BERT's vocab.txt: the single template's
 * [CLS] and [SEP], as transformers' BertTokenizer builds a pair). */
static int pair_from_single(tok_tokenizer *t, bool bert) {
    pair_template *pt = &t->pair;
    *pt = (pair_template){.ok = true};
    if (!bert) {
        pair_add(pt, 0, 0, 0);
        pair_add(pt, 1, 0, 1);
        return TOK_OK;
    }
    int32_t ids[8];
    tok_output o = {.ids = ids, .capacity = 8};
    int rc = tok_encode(t, "", 0, 1, &o);
    if (rc)
        return rc;
    if (o.n != 2) {
        pt->ok = false;
        return TOK_OK;
    }
    pair_add(pt, -1, ids[0], 0);
    pair_add(pt, 0, 0, 0);
    pair_add(pt, -1, ids[1], 0);
    pair_add(pt, 1, 0, 1);
    pair_add(pt, -1, ids[1], 1);
    return TOK_OK;
}

/* tokenizer.json's model.type, or "" for a directory with only vocab.txt
 * (WordPiece). Only the small "model" member matters, but jansson has no
 * partial parse; the file is parsed again by the model's loader. */
static int parse_pair(json_t *pp, pair_template *pt);

static int probe_type(const char *file, char *type, size_t cap, pair_template *pair, char *err,
                      size_t err_len) {
    FILE *f = fopen(file, "rb");
    if (!f) {
        if (errno == ENOENT) {
            type[0] = '\0';
            return TOK_OK;
        }
        snprintf(err, err_len, "%s: %s", file, strerror(errno));
        return TOK_ELOAD;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
    if (!root) {
        snprintf(err, err_len, "%s:%d: %s", file, jerr.line, jerr.text);
        return TOK_ELOAD;
    }
    const char *t = json_string_value(json_object_get(json_object_get(root, "model"), "type"));
    int rc = TOK_OK;
    if (!t) {
        snprintf(err, err_len, "%s: model.type is missing", file);
        rc = TOK_ELOAD;
    } else {
        snprintf(type, cap, "%s", t);
        json_t *pp = json_object_get(root, "post_processor");
        pair->ok = true;
        if (pp && !json_is_null(pp) && parse_pair(pp, pair)) {
            /* The model's own loader refuses a post-processor it does not
             * know; one it knows with no usable pair template only lacks
             * pairs. */
            *pair = (pair_template){0};
        }
    }
    json_decref(root);
    return rc;
}

int tok_load(tok_tokenizer **out, const char *model_dir, char *err, size_t err_len) {
    char dummy[1];
    if (!err || !err_len) {
        err = dummy;
        err_len = sizeof dummy;
    }
    if (!out || !model_dir) {
        snprintf(err, err_len, "tok_load: no model directory");
        return TOK_EINVAL;
    }
    *out = NULL;
    char file[4096], type[64];
    snprintf(file, sizeof file, "%s/tokenizer.json", model_dir);
    pair_template pair = {0};
    int rc = probe_type(file, type, sizeof type, &pair, err, err_len);
    if (rc)
        return rc;
    const tok_family *fam = NULL;
    for (size_t i = 0; i < sizeof tok_families / sizeof tok_families[0]; i++)
        if (strcmp(type[0] ? type : "WordPiece", tok_families[i].type) == 0)
            fam = &tok_families[i];
    if (!fam) {
        snprintf(err, err_len,
                 "%s: model type %s is not supported (supported: WordPiece, Unigram, BPE)", file,
                 type);
        return TOK_ELOAD;
    }
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, err_len, "tok_load: out of memory");
        return TOK_ENOMEM;
    }
    t->ops = fam->ops;
    rc = fam->load(&t->impl, fam->wants_dir ? model_dir : file, err, err_len);
    if (rc) {
        free(t);
        return rc;
    }
    t->pair = pair;
    if (!type[0] || (pair.ok && pair.n == 0))
        rc = pair_from_single(t, !type[0]);
    if (rc) {
        snprintf(err, err_len, "tok_load: out of memory");
        tok_free(t);
        return rc;
    }
    for (int i = 0; i < t->pair.n; i++)
        if (t->pair.p[i].text < 0 && !tok_id_to_token(t, t->pair.p[i].id))
            t->pair = (pair_template){0};
    *out = t;
    return TOK_OK;
}

void tok_free(tok_tokenizer *t) {
    if (!t)
        return;
    t->ops->free(t->impl);
    free(t);
}

const char *tok_model_type(const tok_tokenizer *t) {
    return t ? t->ops->name : NULL;
}

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, int truncate,
               tok_output *out) {
    if (!t || !out || !out->ids || (!text && len) || len > UINT32_MAX)
        return TOK_EINVAL;
    int rc = t->ops->encode(t->impl, text ? text : "", len, truncate, out);
    if (rc == TOK_OK && out->type_ids)
        memset(out->type_ids, 0, (size_t)out->n * sizeof *out->type_ids);
    return rc;
}

/* ---- pairs ------------------------------------------------------------------ */

void tok_pair_text_free(tok_pair_text *x) {
    scratch_free(x->ids);
    scratch_free(x->offsets);
    scratch_free(x->special);
    *x = (tok_pair_text){0};
}

/* Finds the pieces between the single template's specials: the special
 * mask marks the template's tokens, never the text's own. */
int tok_pair_text_encode(const tok_tokenizer *t, const char *s, size_t len, int32_t keep,
                         tok_pair_text *x) {
    if (!t || !x || (!s && len) || len > UINT32_MAX)
        return TOK_EINVAL;
    s = s ? s : "";
    for (int pass = 0; pass < 2; pass++) {
        const int32_t nsp = tok_num_special(t);
        int32_t cap = (keep < 0 ? x->full : keep) + nsp;
        cap = cap > 0 ? cap : 1;
        if (cap > x->cap) {
            tok_pair_text_free(x);
            /* From the request's budget, as tok_encode's own scratch. */
            x->ids = scratch_realloc(NULL, (size_t)cap * sizeof *x->ids);
            x->offsets = scratch_realloc(NULL, (size_t)cap * sizeof *x->offsets);
            x->special = scratch_realloc(NULL, (size_t)cap * sizeof *x->special);
            if (!x->ids || !x->offsets || !x->special)
                return TOK_ENOMEM;
            x->cap = cap;
        }
        tok_output o = {
            .ids = x->ids, .offsets = x->offsets, .special = x->special, .capacity = cap};
        int rc = tok_encode(t, s, len, 1, &o);
        if (rc) {
            x->error_at = o.error_at;
            return rc;
        }
        x->full = o.n_full - nsp;
        int32_t lead = 0, trail = 0;
        while (lead < o.n && x->special[lead])
            lead++;
        while (trail < o.n - lead && x->special[o.n - 1 - trail])
            trail++;
        x->lead = lead;
        x->n = o.n - lead - trail;
        /* A first pass that was cut is done over when every piece is wanted. */
        if (keep >= 0 || x->n == x->full)
            return TOK_OK;
    }
    return TOK_OK;
}

/* Hugging Face's longest_first: the lengths n1, n2 of the two texts cut so
 * that they sum to at most max. */
static void longest_first(int32_t n1, int32_t n2, int32_t max, int32_t *k1, int32_t *k2) {
    *k1 = n1;
    *k2 = n2;
    if ((int64_t)n1 + n2 <= max)
        return;
    const bool swap = n1 > n2;
    int32_t s = swap ? n2 : n1;
    int32_t l = s > max ? s : (s > max - s ? s : max - s);
    if ((int64_t)s + l > max) {
        s = max / 2;
        l = s + max % 2;
    }
    *k1 = swap ? l : s;
    *k2 = swap ? s : l;
    *k1 = *k1 < n1 ? *k1 : n1;
    *k2 = *k2 < n2 ? *k2 : n2;
}

int32_t tok_pair_keep(const tok_tokenizer *t, int32_t capacity, tok_truncation trunc) {
    /* Cutting on the right needs only the first room pieces of each text,
     * and so does refusing (the count of the rest is n_full); cutting on the
     * left needs them all. */
    const int32_t room = capacity - (t && t->pair.ok ? t->pair.n_special : 0);
    return trunc == TOK_TRUNCATE_LEFT ? -1 : (room > 0 ? room : 0);
}

int tok_pair_assemble(const tok_tokenizer *t, const tok_pair_text *a, const tok_pair_text *b,
                      tok_truncation trunc, tok_output *out) {
    if (!t || !out || !out->ids || !a || !b)
        return TOK_EINVAL;
    out->n = out->n_full = 0;
    out->error_at = 0;
    const pair_template *pt = &t->pair;
    if (!pt->ok)
        return TOK_ENOPAIR;
    const int32_t room = out->capacity - pt->n_special;
    if (room < 0)
        return TOK_EINVAL;
    const tok_pair_text *x[2] = {a, b};
    /* Each text must hold the pieces this cut reads (tok_pair_keep). */
    const int32_t want = tok_pair_keep(t, out->capacity, trunc);
    for (int i = 0; i < 2; i++)
        if (x[i]->n < (want < 0 || want > x[i]->full ? x[i]->full : want))
            return TOK_EINVAL;
    const int64_t full = (int64_t)a->full + b->full + pt->n_special;
    out->n_full = full > INT32_MAX ? INT32_MAX : (int32_t)full;
    int32_t k[2];
    longest_first(a->full, b->full, room, &k[0], &k[1]);
    if (trunc == TOK_TRUNCATE_NONE && full > out->capacity)
        return TOK_ETOOLONG;
    int32_t at = 0;
    for (int i = 0; i < pt->n; i++) {
        const pair_piece *p = &pt->p[i];
        if (p->text < 0) {
            out->ids[at] = p->id;
            if (out->offsets)
                out->offsets[at] = (tok_span){0, 0};
            if (out->special)
                out->special[at] = 1;
            if (out->type_ids)
                out->type_ids[at] = p->type;
            at++;
            continue;
        }
        const tok_pair_text *s = x[p->text];
        const int32_t from = s->lead + (trunc == TOK_TRUNCATE_LEFT ? s->full - k[p->text] : 0);
        for (int32_t j = 0; j < k[p->text]; j++, at++) {
            out->ids[at] = s->ids[from + j];
            if (out->offsets)
                out->offsets[at] = s->offsets[from + j];
            if (out->special)
                out->special[at] = 0;
            if (out->type_ids)
                out->type_ids[at] = p->type;
        }
    }
    out->n = at;
    return TOK_OK;
}

int tok_encode_pair(const tok_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                    tok_truncation trunc, tok_output *out) {
    if (!t || !out || !out->ids || (!a && alen) || (!b && blen) || alen > UINT32_MAX ||
        blen > UINT32_MAX)
        return TOK_EINVAL;
    out->n = out->n_full = 0;
    out->error_at = 0;
    if (!t->pair.ok)
        return TOK_ENOPAIR;
    if (out->capacity < t->pair.n_special)
        return TOK_EINVAL;
    const int32_t keep = tok_pair_keep(t, out->capacity, trunc);
    tok_pair_text x[2] = {{0}, {0}};
    int rc = tok_pair_text_encode(t, a, alen, keep, &x[0]);
    if (rc == TOK_EUTF8)
        out->error_at = x[0].error_at;
    if (!rc) {
        rc = tok_pair_text_encode(t, b, blen, keep, &x[1]);
        if (rc == TOK_EUTF8)
            out->error_at = alen + x[1].error_at;
    }
    if (!rc)
        rc = tok_pair_assemble(t, &x[0], &x[1], trunc, out);
    tok_pair_text_free(&x[0]);
    tok_pair_text_free(&x[1]);
    return rc;
}

int32_t tok_num_special_pair(const tok_tokenizer *t) {
    return t && t->pair.ok ? t->pair.n_special : -1;
}

int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
               size_t *len) {
    if (!t || (!ids && n) || !text || !len)
        return TOK_EINVAL;
    *text = NULL;
    *len = 0;
    return t->ops->decode(t->impl, ids, n, skip_special, text, len);
}

int32_t tok_num_special(const tok_tokenizer *t) {
    return t ? t->ops->num_special(t->impl) : 0;
}
int32_t tok_vocab_size(const tok_tokenizer *t) {
    return t ? t->ops->vocab_size(t->impl) : 0;
}
const char *tok_id_to_token(const tok_tokenizer *t, int32_t id) {
    return t ? t->ops->id_to_token(t->impl, id) : NULL;
}
int32_t tok_token_to_id(const tok_tokenizer *t, const char *token, size_t len) {
    return t && token ? t->ops->token_to_id(t->impl, token, len) : -1;
}
int32_t tok_unk_id(const tok_tokenizer *t) {
    return t ? t->ops->unk_id(t->impl) : -1;
}

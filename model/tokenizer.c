/* tokenizer.c — the tokenizer front: picks the model from tokenizer.json's
 * model.type and forwards every call to that model's slots (tok_impl.h). */
#include "model/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model/tok_impl.h"

struct tok_tokenizer {
    const tok_ops *ops;
    void *impl;
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

/* tokenizer.json's model.type, or "" for a directory with only vocab.txt
 * (WordPiece). Only the small "model" member matters, but jansson has no
 * partial parse; the file is parsed again by the model's loader. */
static int probe_type(const char *file, char *type, size_t cap, char *err, size_t err_len) {
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
    int rc = probe_type(file, type, sizeof type, err, err_len);
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
    return t->ops->encode(t->impl, text ? text : "", len, truncate, out);
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

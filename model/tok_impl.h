/* tok_impl.h — what a tokenizer model implements behind model/tokenizer.h.
 *
 * tok_load reads tokenizer.json's model.type and hands the directory to the
 * matching loader; every public call then goes through these slots. An
 * implementation is read-only once loaded, so the slots may run concurrently. */
#ifndef ATTN_TOK_IMPL_H
#define ATTN_TOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

typedef struct tok_ops {
    const char *name; /* "WordPiece", "Unigram": what /info and errors say */
    int (*encode)(const void *m, const char *text, size_t len, int truncate, tok_output *out);
    /* ids to text in *text (malloc'd, NUL-terminated, *len bytes). */
    int (*decode)(const void *m, const int32_t *ids, size_t n, int skip_special, char **text,
                  size_t *len);
    int32_t (*num_special)(const void *m);
    int32_t (*vocab_size)(const void *m);
    const char *(*id_to_token)(const void *m, int32_t id);
    int32_t (*token_to_id)(const void *m, const char *s, size_t len);
    int32_t (*unk_id)(const void *m);
    void (*free)(void *m);
} tok_ops;

/* Each loader fills *impl from model_dir or returns TOK_ELOAD / TOK_ENOMEM
 * with the reason in err. */
int tok_wordpiece_load(void **impl, const char *model_dir, char *err, size_t err_len);
extern const tok_ops tok_wordpiece_ops;

/* Unigram and BPE share one pipeline (model/tok_pipeline.c): the loader reads
 * model.type from the file. */
int tok_pipeline_load(void **impl, const char *file, char *err, size_t err_len);
extern const tok_ops tok_unigram_ops;
extern const tok_ops tok_bpe_ops;

/* tok_encode's scratch, through the functions of tok_set_alloc_funcs. */
void *tok_scratch_realloc(void *p, size_t n);
void tok_scratch_free(void *p);

/* A loader's reason, printf-style, into err[0, err_len) (nothing when err
 * is NULL or err_len 0): the one writer every tokenizer file shares. */
void tok_set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Strictly valid UTF-8: the length of the character at p[0, n) and *cp, or 0
 * (overlong forms, surrogates, above U+10FFFF, cut sequences). */
static inline size_t tok_utf8_get(const uint8_t *p, size_t n, uint32_t *cp) {
    uint8_t b = p[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint32_t min, v;
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2, min = 0x80, v = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3, min = 0x800, v = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4, min = 0x10000, v = b & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

static inline size_t tok_utf8_put(char *dst, uint32_t cp) {
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif

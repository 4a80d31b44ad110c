/* golden_embeddings.h — the golden embeddings of all-MiniLM-L6-v2 (made by
 * tests/golden/make_golden.py) as arrays, for the unit tests and the GPU
 * checks: one loader of a set's texts, token ids and vectors, where each
 * had its own. The file is read through tests/golden/golden_io.h. */
#ifndef TEST_GOLDEN_EMBEDDINGS_H
#define TEST_GOLDEN_EMBEDDINGS_H

#include <stddef.h>
#include <stdint.h>

#define GOLDEN_EMBEDDINGS "tests/golden/embeddings.json.gz"

/* One named set of the file ("mean_normalized", "cls_raw", ...). A text
 * may hold a NUL (a golden input tests control characters), so it comes
 * with its length and is never read as a C string. */
typedef struct golden_set {
    int n;            /* inputs */
    int dim;          /* C, the embedding's width */
    char **text;      /* [n][text_len[i] + 1] */
    size_t *text_len; /* [n] */
    int32_t **ids;    /* [n][len[i]] */
    int32_t *len;     /* [n] */
    float **emb;      /* [n][C] */
} golden_set;

/* Loads set from GOLDEN_EMBEDDINGS into *g. Returns 0, or -1 with why in
 * err (*g then holds nothing to free). */
int golden_set_load(const char *set, golden_set *g, char *err, size_t err_len);
/* The same from another golden file of that shape (the other families'
 * tiny models: tests/golden/mpnet_embeddings.json). */
int golden_set_load_from(const char *path, const char *set, golden_set *g, char *err,
                         size_t err_len);
void golden_set_free(golden_set *g);

#endif

/* golden_embeddings.c — a set of the golden embeddings as arrays
 * (golden_embeddings.h). */
#include "golden_embeddings.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/golden/golden_io.h"

/* The only place the file is read. JSON_ALLOW_NUL: jansson refuses
 * "\u0000" inside a string without it, and one golden text holds one. */
static json_t *read_file(const char *path, char *err, size_t err_len) {
    json_error_t jerr;
    json_t *root = golden_load_json(path, JSON_ALLOW_NUL, &jerr);
    if (!root)
        snprintf(err, err_len, "%s: %s (line %d)", path, jerr.text, jerr.line);
    return root;
}

void golden_set_free(golden_set *g) {
    for (int i = 0; i < g->n; i++) {
        if (g->text)
            free(g->text[i]);
        if (g->ids)
            free(g->ids[i]);
        if (g->emb)
            free(g->emb[i]);
    }
    free(g->text);
    free(g->text_len);
    free(g->ids);
    free(g->len);
    free(g->emb);
    *g = (golden_set){0};
}

/* Copies case e (its text, ids and embedding) into slot i of g. */
static int read_case(const json_t *e, golden_set *g, int i) {
    const json_t *text = json_object_get(e, "text"), *ids = json_object_get(e, "ids");
    const json_t *emb = json_object_get(e, "embedding");
    if (!json_is_string(text) || !json_is_array(ids) || json_array_size(emb) != (size_t)g->dim)
        return -1;
    g->text_len[i] = json_string_length(text);
    g->len[i] = (int32_t)json_array_size(ids);
    g->text[i] = malloc(g->text_len[i] + 1);
    g->ids[i] = malloc(((size_t)g->len[i] + 1) * sizeof **g->ids);
    g->emb[i] = malloc((size_t)g->dim * sizeof **g->emb);
    if (!g->text[i] || !g->ids[i] || !g->emb[i])
        return -1;
    memcpy(g->text[i], json_string_value(text), g->text_len[i] + 1);
    for (int32_t t = 0; t < g->len[i]; t++)
        g->ids[i][t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
    for (int d = 0; d < g->dim; d++)
        g->emb[i][d] = (float)json_number_value(json_array_get(emb, (size_t)d));
    return 0;
}

int golden_set_load(const char *set, golden_set *g, char *err, size_t err_len) {
    return golden_set_load_from(GOLDEN_EMBEDDINGS, set, g, err, err_len);
}

int golden_set_load_from(const char *path, const char *set, golden_set *g, char *err,
                         size_t err_len) {
    *g = (golden_set){0};
    json_t *root = read_file(path, err, err_len);
    if (!root)
        return -1;
    const json_t *arr = json_object_get(root, set);
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        snprintf(err, err_len, "%s has no cases in '%s'", path, set);
        json_decref(root);
        return -1;
    }
    const size_t n = json_array_size(arr);
    g->n = (int)n;
    g->dim = (int)json_array_size(json_object_get(json_array_get(arr, 0), "embedding"));
    g->text = calloc(n, sizeof *g->text);
    g->text_len = calloc(n, sizeof *g->text_len);
    g->ids = calloc(n, sizeof *g->ids);
    g->len = calloc(n, sizeof *g->len);
    g->emb = calloc(n, sizeof *g->emb);
    int rc = g->text && g->text_len && g->ids && g->len && g->emb ? 0 : -1;
    if (rc != 0)
        snprintf(err, err_len, "out of memory");
    for (int i = 0; rc == 0 && i < g->n; i++)
        if ((rc = read_case(json_array_get(arr, (size_t)i), g, i)) != 0)
            snprintf(err, err_len, "%s: case %d of '%s' is malformed (or out of memory)", path, i,
                     set);
    json_decref(root);
    if (rc != 0)
        golden_set_free(g);
    return rc;
}

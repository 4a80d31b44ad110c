/* golden_io.c — the C reader of tests/golden (golden_io.h). zlib's gzread
 * passes a file without the gzip header through unchanged, so the same
 * stream feeds jansson both forms. */
#include "tests/golden/golden_io.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

/* jansson's json_load_callback_t: up to buflen bytes of the inflated text,
 * 0 at its end. gzread counts in int. jansson takes (size_t)-1 for the end
 * of the text too, so golden_load_json asks zlib afterwards whether the
 * stream ended or failed. */
static size_t read_some(void *buffer, size_t buflen, void *data) {
    const unsigned want = buflen > INT_MAX ? INT_MAX : (unsigned)buflen;
    const int n = gzread((gzFile)data, buffer, want);
    return n < 0 ? (size_t)-1 : (size_t)n;
}

static void set_error(json_error_t *error, const char *path, const char *what) {
    if (!error)
        return;
    error->line = error->column = -1;
    error->position = 0;
    snprintf(error->source, sizeof error->source, "%s", path);
    snprintf(error->text, sizeof error->text, "%s", what);
}

json_t *golden_load_json(const char *path, size_t flags, json_error_t *error) {
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        set_error(error, path, errno ? strerror(errno) : "cannot open");
        return NULL;
    }
    json_t *root = json_load_callback(read_some, f, flags, error);
    /* A cut .gz ends with Z_BUF_ERROR and a corrupt one with Z_DATA_ERROR,
     * either of which jansson may have seen as the end of a valid text. */
    int zerr = Z_OK;
    const char *why = gzerror(f, &zerr);
    if (zerr != Z_OK) {
        json_decref(root);
        root = NULL;
        set_error(error, path, why);
    } else if (error) {
        snprintf(error->source, sizeof error->source, "%s", path);
    }
    gzclose(f);
    return root;
}

double golden_cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

/* bench_json_parse.c — what parsing a request body with jansson costs, per
 * input, beside the front end's budget per embedding.
 *
 * The body is an OpenAI embeddings request of N inputs (default 2048, the
 * most a request may hold), each 15–30 words of English (about 140 bytes,
 * a "medium" sentence), made here from a fixed seed. It is parsed as the
 * service parses bodies (http_json_parse: duplicate keys refused, U+0000
 * allowed) ROUNDS times; prints the median and the fastest round, in
 * microseconds per input and MB/s. A report, not a test.
 *
 *   build/bench_json_parse [INPUTS] [ROUNDS]   (defaults 2048, 31) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/http/http.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *const WORDS[] = {"the",     "quick", "brown",     "fox",     "jumps",
                                    "over",    "lazy",  "dog",       "service", "embedding",
                                    "model",   "query", "answer",    "vector",  "document",
                                    "returns", "with",  "relevance", "search",  "index"};

/* {"input": [n sentences], "model": "m"}; the caller frees it. */
static char *make_body(int n, size_t *len) {
    size_t cap = (size_t)n * 256 + 64, at = 0;
    char *b = malloc(cap);
    if (!b)
        return NULL;
    unsigned seed = 1;
    at += (size_t)snprintf(b + at, cap - at, "{\"input\": [");
    for (int i = 0; i < n; i++) {
        b[at++] = i ? ',' : ' ';
        b[at++] = '"';
        seed = seed * 1103515245u + 12345u;
        int words = 15 + (int)((seed >> 16) % 16);
        for (int w = 0; w < words; w++) {
            seed = seed * 1103515245u + 12345u;
            const char *word = WORDS[(seed >> 16) % (sizeof WORDS / sizeof WORDS[0])];
            at += (size_t)snprintf(b + at, cap - at, "%s%s", w ? " " : "", word);
        }
        b[at++] = '"';
    }
    at += (size_t)snprintf(b + at, cap - at, "], \"model\": \"m\"}");
    *len = at;
    return b;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    int rounds = argc > 2 ? atoi(argv[2]) : 31;
    if (n < 1 || rounds < 1) {
        fprintf(stderr, "usage: %s [INPUTS >= 1] [ROUNDS >= 1]\n", argv[0]);
        return 2;
    }
    size_t len = 0;
    char *body = make_body(n, &len);
    double *t = calloc((size_t)rounds, sizeof *t);
    if (!body || !t)
        return 1;
    for (int r = 0; r < rounds; r++) {
        char why[128];
        double t0 = now();
        json_t *root = http_json_parse(body, len, why, sizeof why);
        t[r] = now() - t0;
        if (!root) {
            fprintf(stderr, "the body did not parse: %s\n", why);
            return 1;
        }
        json_decref(root);
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    double med = t[rounds / 2];
    printf("jansson %s: %d inputs, %zu bytes; median %.3f ms (%.2f us/input, %.0f MB/s), "
           "fastest %.3f ms (%.2f us/input), %d rounds\n",
           jansson_version_str(), n, len, med * 1e3, med * 1e6 / n, (double)len / med / 1e6,
           t[0] * 1e3, t[0] * 1e6 / n, rounds);
    free(t);
    free(body);
    return 0;
}

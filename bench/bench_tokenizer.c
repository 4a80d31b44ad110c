/* bench_tokenizer.c — tokenization speed of model/tokenizer.c on one core.
 *
 * Two corpora: English prose (what the service mostly sees) and the golden
 * corpus (tests/golden/tokenizer_cases.json.gz: many scripts, emoji, long words).
 * Prints inputs/s, tokens/s and MB/s; a report, not a test.
 *
 *   build/bench_tokenizer [MODEL_DIR] [SECONDS]   (defaults models/all-MiniLM-L6-v2, 1) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/tokenizer.h"
#include "tests/golden/golden_io.h"

#define MAX_TEXTS 1024
#define CAP       512

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct corpus {
    const char *name;
    const char *text[MAX_TEXTS];
    size_t len[MAX_TEXTS];
    int n;
} corpus;

static void run(const tok_tokenizer *t, const corpus *c, double seconds) {
    static int32_t ids[CAP];
    tok_output out = {.ids = ids, .capacity = CAP};
    long inputs = 0, tokens = 0;
    double bytes = 0, t0 = now(), el;
    do {
        for (int i = 0; i < c->n; i++) {
            if (tok_encode(t, c->text[i], c->len[i], 1, &out) != TOK_OK) {
                fprintf(stderr, "%s: input %d failed\n", c->name, i);
                exit(1);
            }
            tokens += out.n;
            bytes += (double)c->len[i];
        }
        inputs += c->n;
        el = now() - t0;
    } while (el < seconds);
    printf("%-8s %6d texts  %10.0f inputs/s  %10.2f Mtokens/s  %8.1f MB/s\n", c->name, c->n,
           (double)inputs / el, (double)tokens / el / 1e6, bytes / el / 1e6);
}

static const char *PROSE[] = {
    "The quick brown fox jumps over the lazy dog.",
    "Sentence embeddings map text to a dense vector space where similar meanings lie close "
    "together.",
    "How do I reset my password if I no longer have access to the email address on my account?",
    "In 2023, the company reported revenue of $4.2 billion, up 12% from the previous year, driven "
    "by "
    "strong demand for cloud services and a recovery in its advertising business.",
    "Photosynthesis converts light energy into chemical energy, storing it in the bonds of glucose "
    "molecules that plants later break down to power their cells.",
    "Please summarize the attached report and highlight any risks the auditors mentioned.",
    "Transformers use self-attention to weigh the relevance of every token to every other token in "
    "the sequence, which makes long-range dependencies easy to learn but costs quadratic time.",
    "Best hiking trails near Zürich for a half-day trip with kids?",
};

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "models/all-MiniLM-L6-v2";
    double seconds = argc > 2 ? atof(argv[2]) : 1.0;
    char err[512];
    tok_tokenizer *t;
    if (tok_load(&t, dir, err, sizeof err) != TOK_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    static corpus prose = {.name = "prose"}, golden = {.name = "golden"};
    for (size_t i = 0; i < sizeof PROSE / sizeof PROSE[0]; i++) {
        prose.text[prose.n] = PROSE[i];
        prose.len[prose.n++] = strlen(PROSE[i]);
    }
    json_error_t jerr;
    json_t *root = golden_load_json("tests/golden/tokenizer_cases.json.gz", JSON_ALLOW_NUL, &jerr);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        json_t *s = json_object_get(c, "text");
        if (golden.n < MAX_TEXTS) {
            golden.text[golden.n] = json_string_value(s);
            golden.len[golden.n++] = json_string_length(s);
        }
    }
    run(t, &prose, seconds);
    if (golden.n)
        run(t, &golden, seconds);
    else
        fprintf(stderr, "golden corpus not found (%s); run from the repository root\n", jerr.text);
    json_decref(root);
    tok_free(t);
    return 0;
}

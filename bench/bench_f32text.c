/* bench_f32text.c — what writing floats costs an answer.
 *
 * 1. ns per float: f32text_write (shortest text) against snprintf "%.9g"
 *    (what jansson's JSON_REAL_PRECISION(9) does per float) and "%.17g",
 *    on unit-vector components and on random bit patterns.
 * 2. µs per embedding for a whole /v1/embeddings answer of 32 and 2048
 *    vectors of 384 floats, float and base64: a jansson tree dumped with
 *    json_dumps (how answers were built before the writer) against
 *    embed_encode writing into one buffer.
 * One thread; each figure is the median of 7 runs, timed in the thread's CPU
 * time, so that other processes on a shared machine count less. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "server/api/embed_codec.h"
#include "server/api/embed_dialect.h"
#include "server/api/f32text.h"
#include "server/api/jwriter.h"
#include "server/work/membudget.h"

enum { REPS = 7, NFLOATS = 1 << 18, DIM = 384 };

static double thread_s(void) {
    return bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Unit vectors of DIM gaussian components, as a sentence embedding's. */
static void unit_vectors(float *v, size_t n) {
    for (size_t i = 0; i < n; i += DIM) {
        double ss = 0;
        for (size_t j = 0; j < DIM; j++) {
            const double u1 = ((double)(next_u64() >> 11) + 0.5) / 9007199254740992.0;
            const double u2 = (double)(next_u64() >> 11) / 9007199254740992.0;
            v[i + j] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
            ss += (double)v[i + j] * v[i + j];
        }
        for (size_t j = 0; j < DIM; j++)
            v[i + j] = (float)(v[i + j] / sqrt(ss));
    }
}

static void random_patterns(float *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        do
            u = (uint32_t)(next_u64() >> 32);
        while ((u >> 23 & 0xff) == 0xff);
        memcpy(&v[i], &u, sizeof u);
    }
}

typedef size_t (*write_fn)(char *out, float v);

static size_t with_9g(char *out, float v) {
    return (size_t)snprintf(out, 32, "%.9g", (double)v);
}
static size_t with_17g(char *out, float v) {
    return (size_t)snprintf(out, 32, "%.17g", (double)v);
}

/* Median ns per float of fn over v, and the mean text length. */
static double ns_per_float(write_fn fn, const float *v, size_t n, double *mean_len) {
    static char buf[32];
    double t[REPS];
    size_t bytes = 0;
    for (int r = 0; r < REPS; r++) {
        bytes = 0;
        const double t0 = thread_s();
        for (size_t i = 0; i < n; i++)
            bytes += fn(buf, v[i]);
        t[r] = (thread_s() - t0) * 1e9 / (double)n;
    }
    *mean_len = (double)bytes / (double)n;
    return median(t, REPS);
}

/* ---- whole answers ------------------------------------------------------------------- */

/* The answer as a jansson tree dumped at 9 digits, as embed_encode built it
 * before the writer; returns the text's length. */
static size_t answer_jansson(embed_job *job, int C) {
    json_t *data = json_array();
    for (int32_t i = 0; i < job->n; i++) {
        const float *v = job->out + (size_t)i * (size_t)C;
        json_t *e;
        if (job->base64) {
            char *text = malloc(JW_BASE64_LEN((size_t)C) + 1);
            const size_t len = jw_base64_f32(text, v, (size_t)C);
            e = json_stringn(text, len);
            free(text);
        } else {
            e = json_array();
            for (int j = 0; j < C; j++)
                json_array_append_new(e, json_real(v[j]));
        }
        json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", e));
    }
    const json_int_t tokens = job->cu[job->n];
    json_t *root =
        json_pack("{s:s, s:o, s:O, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                  job->model, "usage", "prompt_tokens", tokens, "total_tokens", tokens);
    char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    const size_t len = strlen(text);
    free(text);
    json_decref(root);
    return len;
}

static size_t answer_writer(embed_job *job, int C) {
    jwriter w;
    jw_init(&w, embed_answer_hint(job, C));
    embed_encode(job, C, &w);
    size_t len;
    char *text = jw_take(&w, &len);
    membudget_free(text);
    return len;
}

/* Median µs per embedding of one way of answering job. */
static double us_per_embedding(size_t (*answer)(embed_job *, int), embed_job *job, size_t *bytes) {
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        const double t0 = thread_s();
        *bytes = answer(job, DIM);
        t[r] = (thread_s() - t0) * 1e6 / job->n;
    }
    return median(t, REPS);
}

int main(void) {
    float *v = malloc(NFLOATS * sizeof *v);
    if (!v)
        return 1;
    static const struct {
        const char *name;
        write_fn fn;
    } ways[] = {{"f32text_write", f32text_write}, {"%.9g", with_9g}, {"%.17g", with_17g}};
    printf("ns per float, median of %d runs over %d floats\n", REPS, NFLOATS);
    printf("%-16s %22s %22s\n", "", "unit vectors (384)", "random bit patterns");
    for (size_t k = 0; k < sizeof ways / sizeof ways[0]; k++) {
        double len_unit, len_rand;
        unit_vectors(v, NFLOATS);
        const double unit = ns_per_float(ways[k].fn, v, NFLOATS, &len_unit);
        random_patterns(v, NFLOATS);
        const double rand = ns_per_float(ways[k].fn, v, NFLOATS, &len_rand);
        printf("%-16s %8.1f ns %5.1f bytes %8.1f ns %5.1f bytes\n", ways[k].name, unit, len_unit,
               rand, len_rand);
    }

    printf("\nus per embedding of a /v1/embeddings answer (384 floats each)\n");
    printf("%-6s %-7s %14s %14s %8s %12s %12s\n", "inputs", "format", "jansson tree", "writer",
           "speedup", "bytes before", "bytes after");
    for (int n = 32; n <= 2048; n *= 64) {
        float *out = malloc((size_t)n * DIM * sizeof *out);
        int32_t *cu = malloc(((size_t)n + 1) * sizeof *cu);
        if (!out || !cu)
            return 1;
        unit_vectors(out, (size_t)n * DIM);
        for (int i = 0; i <= n; i++)
            cu[i] = 12 * i;
        for (int b64 = 0; b64 <= 1; b64++) {
            embed_job job = {.api = API_OPENAI,
                             .n = n,
                             .cu = cu,
                             .out = out,
                             .out_dim = DIM,
                             .base64 = b64,
                             .model = json_string("all-MiniLM-L6-v2")};
            size_t before_bytes, after_bytes;
            const double before = us_per_embedding(answer_jansson, &job, &before_bytes);
            const double after = us_per_embedding(answer_writer, &job, &after_bytes);
            printf("%-6d %-7s %11.2f us %11.2f us %7.1fx %12zu %12zu\n", n,
                   b64 ? "base64" : "float", before, after, before / after, before_bytes,
                   after_bytes);
            json_decref(job.model);
        }
        free(out);
        free(cu);
    }
    free(v);
    return 0;
}

/* test_model_int8.c — the encoder in int8 (bert_load_precision(GEMM_INT8),
 * i.e. bert_int8_plan) against the same model in fp32 and against PyTorch,
 * on the golden inputs of tests/golden/embeddings.json.gz.
 *
 * Floor. int8 is not within a rounding bound of fp32 (each GEMM input is
 * rounded to 8 bits), so its floor is measured, not derived: with
 * bench_precision the plan's lowest cosine against fp32 over the 58 inputs
 * is 0.99205 (mean 0.99820); all four GEMMs in int8 without smoothing give
 * 0.98302 and smoothing FFN out too 0.98993, which this test exists to
 * catch. The int8 arithmetic is exact integer work per token and does not
 * depend on the batch or the thread split, and the fp32 parts move the
 * cosine by < 1e-6, so the measured value is reproducible to the 6th digit:
 * the floor is it rounded down to 0.991 (above the 0.99 asked of int8).
 * Needs AVX512_VNNI; elsewhere the test says it is skipped. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "tests/golden/golden_io.h"

#define MODEL_DIR  "models/all-MiniLM-L6-v2"
#define GOLDEN     "tests/golden/embeddings.json.gz"
#define INT8_FLOOR 0.991
#define BATCH_DIFF 1e-6 /* one input alone against the same in a batch */
#define THREADS    2

typedef struct {
    int n, dim;
    int32_t *ids, *cu; /* all inputs packed */
    float *emb;        /* (n, dim) PyTorch's */
} golden;

static golden golden_load(void) {
    json_error_t jerr;
    json_t *root = golden_load_json(GOLDEN, JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(root, "%s: %s (line %d)", GOLDEN, jerr.text, jerr.line);
    json_t *arr = json_object_get(root, "mean_normalized");
    cr_assert(json_is_array(arr));
    golden g = {.n = (int)json_array_size(arr)};
    g.cu = calloc((size_t)g.n + 1, sizeof *g.cu);
    for (int i = 0; i < g.n; i++)
        g.cu[i + 1] = g.cu[i] + (int32_t)json_array_size(
                                    json_object_get(json_array_get(arr, (size_t)i), "ids"));
    g.dim = (int)json_array_size(json_object_get(json_array_get(arr, 0), "embedding"));
    g.ids = malloc(sizeof *g.ids * (size_t)g.cu[g.n]);
    g.emb = malloc(sizeof *g.emb * (size_t)g.n * (size_t)g.dim);
    for (int i = 0; i < g.n; i++) {
        json_t *e = json_array_get(arr, (size_t)i);
        json_t *ids = json_object_get(e, "ids"), *emb = json_object_get(e, "embedding");
        for (int32_t t = g.cu[i]; t < g.cu[i + 1]; t++)
            g.ids[t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)(t - g.cu[i])));
        for (int d = 0; d < g.dim; d++)
            g.emb[(size_t)i * g.dim + d] = (float)json_number_value(json_array_get(emb, (size_t)d));
    }
    json_decref(root);
    return g;
}

/* Every golden input through a model of precision p in one batch. */
static float *embed_all(gemm_precision p, const golden *g, const attn_parallel *par,
                        bert_model **keep) {
    bert_model *m = NULL;
    char err[512] = "";
    int rc = bert_load_precision(MODEL_DIR, p, &m, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "bert_load_precision(%s): %s: %s (run `make model`)",
                 gemm_precision_name(p), bert_strerror(rc), err);
    cr_assert_eq(bert_precision(m), p);
    const attn_backend *b = attn_backend_find("fused");
    bert_workspace *ws = NULL;
    rc = bert_workspace_create(m, g->cu[g->n], THREADS, &b, 1, &ws, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "%s", err);
    float *out = malloc(sizeof(float) * (size_t)g->n * g->dim);
    rc = bert_forward(m, ws, b, par, g->ids, g->cu, g->n, out, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "%s", err);
    bert_workspace_free(ws);
    if (keep)
        *keep = m;
    else
        bert_free(m);
    return out;
}

static int vnni_or_skip(void) {
    const char *why = gemm_unsupported(GEMM_INT8);
    if (why) {
        fprintf(stderr, "model int8: skipped: no AVX512_VNNI (%s)\n", why);
        cr_skip_test("skipped: no AVX512_VNNI (%s)", why);
        return 0;
    }
    return 1;
}

TestSuite(model_int8, .timeout = 300);

Test(model_int8, golden_within_the_floor_and_batch_independent) {
    if (!vnni_or_skip())
        return;
    golden g = golden_load();
    const int C = g.dim;
    tp_pool *pool = tp_create(THREADS);
    attn_parallel par = tp_parallel(pool);
    bert_model *m8 = NULL;
    float *f32 = embed_all(GEMM_FP32, &g, &par, NULL), *i8 = embed_all(GEMM_INT8, &g, &par, &m8);
    double lo = 1.0, mean = 0.0, lo_torch = 1.0;
    for (int i = 0; i < g.n; i++) {
        const double c = golden_cosine(i8 + (size_t)i * C, f32 + (size_t)i * C, C);
        const double t = golden_cosine(i8 + (size_t)i * C, g.emb + (size_t)i * C, C);
        cr_expect_geq(c, INT8_FLOOR, "input %d (%d tokens): cosine vs fp32 %.6f", i,
                      g.cu[i + 1] - g.cu[i], c);
        cr_expect_geq(t, INT8_FLOOR, "input %d: cosine vs PyTorch %.6f", i, t);
        lo = fmin(lo, c);
        lo_torch = fmin(lo_torch, t);
        mean += c / g.n;
    }
    fprintf(stderr,
            "model golden int8: %d inputs: lowest cosine vs fp32 %.6f (mean %.6f), vs PyTorch "
            "%.6f; floor %.3f\n",
            g.n, lo, mean, lo_torch, INT8_FLOOR);

    /* Alone, each of a few inputs gets the vector it got inside the batch:
     * the activations are quantised per token, never across the batch. */
    const attn_backend *b = attn_backend_find("fused");
    bert_workspace *ws = NULL;
    char err[512] = "";
    cr_assert_eq(bert_workspace_create(m8, g.cu[g.n], THREADS, &b, 1, &ws, err, sizeof err),
                 BERT_OK, "%s", err);
    float *one = malloc(sizeof(float) * (size_t)C);
    for (int i = 0; i < g.n; i += 11) {
        const int32_t cu[2] = {0, g.cu[i + 1] - g.cu[i]};
        cr_assert_eq(bert_forward(m8, ws, b, &par, g.ids + g.cu[i], cu, 1, one, err, sizeof err),
                     BERT_OK, "%s", err);
        double d = 0.0;
        for (int k = 0; k < C; k++)
            d = fmax(d, fabs((double)one[k] - i8[(size_t)i * C + k]));
        cr_expect_leq(d, BATCH_DIFF, "input %d alone differs by %.3g", i, d);
    }
    free(one);
    bert_workspace_free(ws);
    bert_free(m8);
    free(f32);
    free(i8);
    tp_destroy(pool);
    free(g.ids);
    free(g.cu);
    free(g.emb);
}

Test(model_int8, refused_below_the_avx512_path) {
    if (attn_simd_detect() < ATTN_SIMD_AVX2) {
        cr_skip_test("skipped: this CPU has no AVX2 path to force");
        return;
    }
    cr_assert_eq(attn_simd_force(ATTN_SIMD_AVX2), 0);
    bert_model *m = (bert_model *)1;
    char err[512] = "";
    const int rc = bert_load_precision(MODEL_DIR, GEMM_INT8, &m, err, sizeof err);
    attn_simd_unforce();
    cr_assert_eq(rc, BERT_EUNSUPPORTED, "%s", err);
    cr_assert_null(m);
    cr_assert(strstr(err, "int8") != NULL && strstr(err, "VNNI") != NULL, "message: %s", err);
}

/* test_model.c — the encoder against sentence-transformers (PyTorch).
 *
 * tests/golden/embeddings.json.gz (made by tests/golden/make_golden.py) holds, for
 * 58 inputs, the token ids the Hugging Face tokenizer produced and the
 * embedding PyTorch computed. Every backend must reproduce every embedding to
 * cosine >= 0.99999, and an input must get the same vector alone as inside a
 * large mixed batch. The model is read from models/all-MiniLM-L6-v2 (`make
 * model`); without it these tests fail, they do not skip. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "golden_embeddings.h"
#include "kernels/attention.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "model_variant.h"
#include "tests/golden/golden_io.h"

#define MODEL_DIR      "models/all-MiniLM-L6-v2"
#define MIN_COSINE     0.99999
#define MAX_BATCH_DIFF 1e-6
#define THREADS        2

/* The golden set, or the test fails with why. */
static golden_set golden_require(const char *set) {
    golden_set g;
    char err[512] = "";
    cr_assert_eq(golden_set_load(set, &g, err, sizeof err), 0, "%s", err);
    return g;
}

static void require_model(const char *dir) {
    struct stat sb;
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(stat(path, &sb), 0,
                 "model missing: %s not found — run `make model` (the tests need the real "
                 "all-MiniLM-L6-v2 and do not skip without it)",
                 path);
}

static bert_model *load_precision(const char *dir, gemm_precision p) {
    require_model(MODEL_DIR);
    bert_model *m = NULL;
    char err[512] = "";
    int rc = bert_load_precision(dir, p, &m, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "bert_load_precision(%s, %s): %s: %s", dir, gemm_precision_name(p),
                 bert_strerror(rc), err);
    cr_assert_eq(bert_precision(m), p);
    return m;
}

static bert_model *load_model(const char *dir) {
    return load_precision(dir, GEMM_FP32);
}

static const attn_backend *backend(const char *name) {
    const attn_backend *b = attn_backend_find(name);
    cr_assert_not_null(b, "no attention backend %s", name);
    return b;
}

static bert_workspace *make_workspace(const bert_model *m, int max_tokens, const attn_backend *b) {
    bert_workspace *ws = NULL;
    char err[512] = "";
    int rc = bert_workspace_create(m, max_tokens, THREADS, &b, 1, &ws, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "workspace for %s: %s", b->name, err);
    return ws;
}

/* Packs inputs idx[0..n) of g into ids / cu (caller frees). */
static int32_t pack(const golden_set *g, const int *idx, int n, int32_t **ids, int32_t **cu) {
    *cu = calloc((size_t)n + 1, sizeof **cu);
    for (int b = 0; b < n; b++)
        (*cu)[b + 1] = (*cu)[b] + g->len[idx[b]];
    *ids = malloc((size_t)(*cu)[n] * sizeof **ids);
    for (int b = 0; b < n; b++)
        memcpy(*ids + (*cu)[b], g->ids[idx[b]], (size_t)g->len[idx[b]] * sizeof **ids);
    return (*cu)[n];
}

/* Runs every input of set through `name` with the linear layers in precision
 * p, in one packed batch, and checks each against PyTorch's fp32 vectors to
 * cosine >= floor. Returns the smallest cosine. */
static double check_golden_at(const char *dir, const char *set, const char *name, gemm_precision p,
                              double floor) {
    golden_set g = golden_require(set);
    bert_model *m = load_precision(dir, p);
    const int C = bert_get_config(m)->hidden_size;
    cr_assert_eq(g.dim, C);

    int *idx = malloc((size_t)g.n * sizeof *idx);
    for (int i = 0; i < g.n; i++)
        idx[i] = i;
    int32_t *ids, *cu;
    const int32_t T = pack(&g, idx, g.n, &ids, &cu);
    const attn_backend *b = backend(name);
    bert_workspace *ws = make_workspace(m, T, b);
    tp_pool *pool = tp_create(THREADS);
    attn_parallel par = tp_parallel(pool);
    float *out = malloc((size_t)g.n * C * sizeof *out);
    char err[512] = "";
    int rc = bert_forward(m, ws, b, &par, ids, cu, g.n, out, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "forward with %s: %s", name, err);

    double min_cos = 1.0, max_abs = 0.0;
    for (int i = 0; i < g.n; i++) {
        const double c = golden_cosine(out + (size_t)i * C, g.emb[i], C);
        for (int d = 0; d < C; d++)
            max_abs = fmax(max_abs, fabs(out[(size_t)i * C + d] - g.emb[i][d]));
        cr_expect_geq(c, floor, "%s %s, %s input %d (%d tokens): cosine %.8f", name,
                      gemm_precision_name(p), set, i, g.len[i], c);
        min_cos = fmin(min_cos, c);
    }
    fprintf(stderr,
            "model golden %s/%s %s: %d inputs, %d tokens: min cosine 1 - %.2g, max |diff| %.3g\n",
            set, name, gemm_precision_name(p), g.n, T, 1.0 - min_cos, max_abs);

    free(out);
    tp_destroy(pool);
    bert_workspace_free(ws);
    bert_free(m);
    free(ids);
    free(cu);
    free(idx);
    golden_set_free(&g);
    return min_cos;
}

static double check_golden(const char *dir, const char *set, const char *name) {
    return check_golden_at(dir, set, name, GEMM_FP32, MIN_COSINE);
}

TestSuite(model, .timeout = 300);

Test(model, reads_the_minilm_description) {
    require_model(MODEL_DIR);
    bert_config c;
    char err[512] = "";
    cr_assert_eq(bert_config_load(MODEL_DIR, &c, err, sizeof err), BERT_OK, "%s", err);
    cr_assert_eq(c.vocab_size, 30522);
    cr_assert_eq(c.hidden_size, 384);
    cr_assert_eq(c.num_layers, 6);
    cr_assert_eq(c.num_heads, 12);
    cr_assert_eq(c.intermediate_size, 1536);
    cr_assert_eq(c.max_positions, 512);
    cr_assert_eq(c.max_seq_length, 256); /* sentence_bert_config.json */
    cr_assert_eq(c.pooling, BERT_POOL_MEAN);
    cr_assert_eq(c.normalize, 1);
    cr_assert_float_eq(c.layer_norm_eps, 1e-12f, 1e-18);
}

Test(model, golden_naive) {
    check_golden(MODEL_DIR, "mean_normalized", "naive");
}

Test(model, golden_fused) {
    check_golden(MODEL_DIR, "mean_normalized", "fused");
}

/* ---- reduced precisions --------------------------------------------------------
 * bf16: lowest cosine against PyTorch's fp32 vectors >= 0.9999, never
 * widened. Why: bf16 keeps 8 significant bits, unit roundoff u = 2^-8.
 * Rounding x and W to bf16 gives each product of a GEMM a relative error
 * of at most 2u, zero-mean with RMS sqrt(2/3)·u ≈ 0.0032 (each factor's
 * error about uniform on [-u, u]); summed over K independent terms the
 * output's relative RMS error is 0.0032·‖x∘w‖₂/|x·w|, about 0.0032 for a
 * row whose terms do not cancel. Over the model's depth, 6 layers x 4 GEMMs
 * plus the bf16 embedding tables = 25 such roundings, independent errors
 * add in quadrature: ρ ≈ sqrt(25)·0.0032 = 0.016 of the vector's norm, so
 * cosine ≈ 1 - ρ²/2 = 1 - 1.3e-4 — before the residual stream, which adds
 * each sublayer's output to an fp32 x and so dilutes its error by
 * ‖f(x)‖/‖x + f(x)‖, and before mean pooling averages over tokens. Measured:
 * 1 - 3e-5 (mean pooling, 58 inputs), 1 - 1.1e-5 (CLS, unnormalised). The
 * floor 1 - 1e-4 sits between the diluted and the undiluted estimate: a
 * kernel whose errors stop being zero-mean (truncating instead of rounding
 * to nearest: a bias of u/2 per product, adding linearly over the 25
 * roundings) or that rounds anything twice fails it. */
#define MIN_COSINE_BF16 0.9999

Test(model, golden_bf16) {
    const char *why = gemm_unsupported(GEMM_BF16);
    if (why) {
        fprintf(stderr, "model golden bf16: skipped: %s\n", why);
        cr_skip_test("bf16: %s", why);
    }
    check_golden_at(MODEL_DIR, "mean_normalized", "fused", GEMM_BF16, MIN_COSINE_BF16);
    check_golden_at(MODEL_DIR, "mean_normalized", "naive", GEMM_BF16, MIN_COSINE_BF16);
}

/* bf16 holds the weights in half the bytes of fp32 and keeps no mapping;
 * fp32 reads most of them in place from the file. */
Test(model, bf16_weights_take_half) {
    const char *why = gemm_unsupported(GEMM_BF16);
    if (why) {
        fprintf(stderr, "model bf16 weights: skipped: %s\n", why);
        cr_skip_test("bf16: %s", why);
    }
    bert_model *f = load_precision(MODEL_DIR, GEMM_FP32);
    bert_model *b = load_precision(MODEL_DIR, GEMM_BF16);
    const size_t fp32 = bert_owned_bytes(f) + bert_mapped_bytes(f);
    const size_t bf16 = bert_owned_bytes(b) + bert_mapped_bytes(b);
    fprintf(stderr, "model weights: fp32 %zu bytes (%zu mapped), bf16 %zu bytes (%zu mapped)\n",
            fp32, bert_mapped_bytes(f), bf16, bert_mapped_bytes(b));
    cr_assert_eq(bert_mapped_bytes(b), 0);
    /* Half, plus the fp32 vectors and the panels' padding: under 52 %. */
    cr_assert_lt((double)bf16, 0.52 * (double)fp32, "bf16 %zu of fp32 %zu bytes", bf16, fp32);
    bert_free(f);
    bert_free(b);
}

Test(model, bf16_refused_below_avx512) {
    if (attn_simd_detect() < ATTN_SIMD_AVX2)
        cr_skip_test("no AVX2 path to force");
    require_model(MODEL_DIR);
    cr_assert_eq(attn_simd_force(ATTN_SIMD_AVX2), 0);
    bert_model *m = (bert_model *)1;
    char err[512] = "";
    const int rc = bert_load_precision(MODEL_DIR, GEMM_BF16, &m, err, sizeof err);
    attn_simd_unforce();
    cr_assert_eq(rc, BERT_EUNSUPPORTED, "%s", err);
    cr_assert_null(m);
    cr_assert_not_null(strstr(err, "AVX512_BF16"), "%s", err);
}

/* The main sets are cut at the model's max_seq_length (256), as a default
 * sentence-transformers call is; the inputs longer than that, at the full
 * 512 positions (the max_seq_length setting raised), and cut on the left. */
Test(model, golden_512_tokens_and_left_truncation) {
    check_golden(MODEL_DIR, "long_512", "naive");
    check_golden(MODEL_DIR, "long_512", "fused");
    check_golden(MODEL_DIR, "long_left", "fused");
}

/* The narrower instruction-set paths (GELU and the fused kernel), which the
 * golden tests above do not take on a CPU with AVX-512, on a subset that
 * still has short, CJK, emoji and 512-token inputs. */
Test(model, golden_on_every_simd_path) {
    golden_set g = golden_require("mean_normalized");
    bert_model *m = load_model(MODEL_DIR);
    const int C = bert_get_config(m)->hidden_size;
    const int idx[] = {0, 4, 31, 46, 48, 52, 57};
    const int n = (int)(sizeof idx / sizeof idx[0]);
    int32_t *ids, *cu;
    const int32_t T = pack(&g, idx, n, &ids, &cu);
    const attn_backend *both[2] = {backend("naive"), backend("fused")};
    bert_workspace *ws = NULL;
    char err[512] = "";
    cr_assert_eq(bert_workspace_create(m, T, THREADS, both, 2, &ws, err, sizeof err), BERT_OK, "%s",
                 err);
    tp_pool *pool = tp_create(THREADS);
    attn_parallel par = tp_parallel(pool);
    float *out = malloc((size_t)n * C * sizeof *out);
    static const attn_simd paths[] = {ATTN_SIMD_PORTABLE, ATTN_SIMD_AVX2, ATTN_SIMD_AVX512};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (attn_simd_force(paths[p]) != 0)
            continue; /* not on this CPU */
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(bert_forward(m, ws, both[k], &par, ids, cu, n, out, err, sizeof err),
                         BERT_OK, "%s", err);
            double min_cos = 1.0;
            for (int b = 0; b < n; b++) {
                const double c = golden_cosine(out + (size_t)b * C, g.emb[idx[b]], C);
                cr_expect_geq(c, MIN_COSINE, "%s on %s, input %d: cosine %.8f", both[k]->name,
                              attn_simd_name(paths[p]), idx[b], c);
                min_cos = fmin(min_cos, c);
            }
            fprintf(stderr, "model golden %s on %s: %d inputs: min cosine 1 - %.2g\n",
                    both[k]->name, attn_simd_name(paths[p]), n, 1.0 - min_cos);
        }
    }
    attn_simd_unforce();
    free(out);
    tp_destroy(pool);
    bert_workspace_free(ws);
    bert_free(m);
    free(ids);
    free(cu);
    golden_set_free(&g);
}

/* ---- batch independence ------------------------------------------------------ */

/* Each input alone, then all inputs in a mixed order with every third one
 * repeated, in one batch: the vectors must agree to MAX_BATCH_DIFF. */
static void check_batch_independence(const char *name) {
    golden_set g = golden_require("mean_normalized");
    bert_model *m = load_model(MODEL_DIR);
    const int C = bert_get_config(m)->hidden_size;
    const attn_backend *b = backend(name);

    int n = 0, *idx = malloc((size_t)g.n * 2 * sizeof *idx);
    for (int i = 0; i < g.n; i++) {
        idx[n++] = (i * 37) % g.n; /* 37 is prime to 58: a permutation */
        if (i % 3 == 0)
            idx[n++] = i;
    }
    int32_t *ids, *cu;
    const int32_t T = pack(&g, idx, n, &ids, &cu);
    bert_workspace *ws = make_workspace(m, T, b);
    tp_pool *pool = tp_create(THREADS);
    attn_parallel par = tp_parallel(pool);
    float *batched = malloc((size_t)n * C * sizeof *batched);
    float *alone = malloc((size_t)C * sizeof *alone);
    char err[512] = "";
    cr_assert_eq(bert_forward(m, ws, b, &par, ids, cu, n, batched, err, sizeof err), BERT_OK, "%s",
                 err);

    double worst = 0.0;
    for (int i = 0; i < g.n; i++) {
        const int32_t one[2] = {0, g.len[i]};
        cr_assert_eq(bert_forward(m, ws, b, &par, g.ids[i], one, 1, alone, err, sizeof err),
                     BERT_OK, "%s", err);
        for (int k = 0; k < n; k++) {
            if (idx[k] != i)
                continue;
            double diff = 0.0;
            for (int d = 0; d < C; d++)
                diff = fmax(diff, fabs(alone[d] - batched[(size_t)k * C + d]));
            cr_expect_leq(diff, MAX_BATCH_DIFF,
                          "%s: input %d (%d tokens) alone vs at %d in a batch of %d: %.3g", name, i,
                          g.len[i], k, n, diff);
            worst = fmax(worst, diff);
        }
    }
    fprintf(stderr, "model batch independence %s: %d sequences, %d tokens: max |diff| %.3g\n", name,
            n, T, worst);

    free(alone);
    free(batched);
    tp_destroy(pool);
    bert_workspace_free(ws);
    bert_free(m);
    free(ids);
    free(cu);
    free(idx);
    golden_set_free(&g);
}

Test(model, alone_equals_batched_naive) {
    check_batch_independence("naive");
}

Test(model, alone_equals_batched_fused) {
    check_batch_independence("fused");
}

/* A single-threaded pool must give what the two-thread pool gives: the
 * GEMM split changes with the thread count. */
/* A raw workspace gives the pooled vectors before normalisation, and
 * bert_l2_normalize on them gives exactly what the model's own forward does:
 * the service serves both from one batch. */
Test(model, raw_pooling_then_normalize_equals_forward) {
    golden_set g = golden_require("mean_normalized");
    bert_model *m = load_model(MODEL_DIR);
    const int C = bert_get_config(m)->hidden_size;
    const int idx[] = {0, 4, 31, 52};
    const int n = (int)(sizeof idx / sizeof idx[0]);
    int32_t *ids, *cu;
    const int32_t T = pack(&g, idx, n, &ids, &cu);
    const attn_backend *b = backend("naive");
    bert_workspace *ws = make_workspace(m, T, b);
    tp_pool *pool = tp_create(THREADS);
    attn_parallel par = tp_parallel(pool);
    float *norm = malloc((size_t)n * C * sizeof *norm), *raw = malloc((size_t)n * C * sizeof *raw);
    char err[512] = "";
    cr_assert_eq(bert_forward(m, ws, b, &par, ids, cu, n, norm, err, sizeof err), BERT_OK, "%s",
                 err);
    bert_workspace_set_raw(ws, 1);
    cr_assert_eq(bert_forward(m, ws, b, &par, ids, cu, n, raw, err, sizeof err), BERT_OK, "%s",
                 err);
    for (int i = 0; i < n; i++) {
        float *v = raw + (size_t)i * C;
        double sq = 0.0;
        for (int d = 0; d < C; d++)
            sq += (double)v[d] * v[d];
        cr_expect(fabs(sqrt(sq) - 1.0) > 1e-3, "input %d: raw vector already has norm 1", idx[i]);
        bert_l2_normalize(v, C);
        cr_expect_eq(memcmp(v, norm + (size_t)i * C, (size_t)C * sizeof *v), 0,
                     "input %d: normalised raw differs from forward", idx[i]);
    }
    free(norm);
    free(raw);
    tp_destroy(pool);
    bert_workspace_free(ws);
    bert_free(m);
    free(ids);
    free(cu);
    golden_set_free(&g);
}

Test(model, thread_count_does_not_change_results) {
    golden_set g = golden_require("mean_normalized");
    bert_model *m = load_model(MODEL_DIR);
    const int C = bert_get_config(m)->hidden_size;
    const attn_backend *b = backend("naive");
    int idx[] = {4, 52, 31, 55};
    int32_t *ids, *cu;
    const int32_t T = pack(&g, idx, 4, &ids, &cu);
    bert_workspace *ws = make_workspace(m, T, b);
    tp_pool *pool = tp_create(THREADS);
    attn_parallel par = tp_parallel(pool);
    float a[4 * 384], s[4 * 384];
    char err[512] = "";
    cr_assert_eq(bert_forward(m, ws, b, &par, ids, cu, 4, a, err, sizeof err), BERT_OK, "%s", err);
    cr_assert_eq(bert_forward(m, ws, b, &attn_parallel_serial, ids, cu, 4, s, err, sizeof err),
                 BERT_OK, "%s", err);
    for (int i = 0; i < 4 * C; i++)
        cr_assert_leq(fabsf(a[i] - s[i]), MAX_BATCH_DIFF, "element %d: %g vs %g", i, a[i], s[i]);
    tp_destroy(pool);
    bert_workspace_free(ws);
    bert_free(m);
    free(ids);
    free(cu);
    golden_set_free(&g);
}

/* ---- model directories made for a test -------------------------------------- */

static char tmpdir[VARIANT_DIR_LEN];

/* A copy of the MiniLM directory whose weights are a link and whose JSON
 * files can be replaced. */
static void make_variant(void) {
    require_model(MODEL_DIR);
    static const char *const copy[] = {"config.json", "modules.json", "1_Pooling/config.json",
                                       NULL};
    variant_link(tmpdir, MODEL_DIR, copy);
}

static void remove_variant(void) {
    variant_remove(tmpdir);
}

static void write_file(const char *rel, const char *text) {
    variant_write(tmpdir, rel, text);
}

/* Rewrites one key of config.json (value is JSON text). */
static void set_config(const char *key, const char *value) {
    variant_set_json(tmpdir, "config.json", key, value);
}

static const char *const CLS_POOLING =
    "{\"word_embedding_dimension\": 384, \"pooling_mode_cls_token\": true, "
    "\"pooling_mode_mean_tokens\": false, \"pooling_mode_max_tokens\": false}";
static const char *const NO_NORMALIZE = "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":"
                                        "\"sentence_transformers.models.Transformer\"},"
                                        "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":"
                                        "\"sentence_transformers.models.Pooling\"}]";

Test(model, golden_cls_unnormalised, .init = make_variant, .fini = remove_variant) {
    write_file("1_Pooling/config.json", CLS_POOLING);
    write_file("modules.json", NO_NORMALIZE);
    bert_config c;
    char err[512] = "";
    cr_assert_eq(bert_config_load(tmpdir, &c, err, sizeof err), BERT_OK, "%s", err);
    cr_assert_eq(c.pooling, BERT_POOL_CLS);
    cr_assert_eq(c.normalize, 0);
    check_golden(tmpdir, "cls_raw", "naive");
    check_golden(tmpdir, "cls_raw", "fused");
    if (gemm_unsupported(GEMM_BF16))
        fprintf(stderr, "model golden cls_raw bf16: skipped: %s\n", gemm_unsupported(GEMM_BF16));
    else
        check_golden_at(tmpdir, "cls_raw", "fused", GEMM_BF16, MIN_COSINE_BF16);
}

/* Loading dir must fail with code and a message containing want. */
static void expect_load_error(int code, const char *want) {
    bert_model *m = (bert_model *)1;
    char err[512] = "";
    int rc = bert_load(tmpdir, &m, err, sizeof err);
    cr_assert_eq(rc, code, "got %s (%s), wanted %s", bert_strerror(rc), err, bert_strerror(code));
    cr_assert_null(m);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
}

Test(model, refuses_other_architectures, .init = make_variant, .fini = remove_variant) {
    set_config("model_type", "\"deberta-v2\"");
    expect_load_error(BERT_EUNSUPPORTED, "model_type \"deberta-v2\"");
}

Test(model, refuses_other_activations, .init = make_variant, .fini = remove_variant) {
    set_config("hidden_act", "\"gelu_new\"");
    expect_load_error(BERT_EUNSUPPORTED, "hidden_act \"gelu_new\"");
}

Test(model, refuses_relative_positions, .init = make_variant, .fini = remove_variant) {
    set_config("position_embedding_type", "\"relative_key\"");
    expect_load_error(BERT_EUNSUPPORTED, "relative_key");
}

Test(model, refuses_other_pooling, .init = make_variant, .fini = remove_variant) {
    write_file("1_Pooling/config.json",
               "{\"pooling_mode_weightedmean_tokens\": true, \"pooling_mode_mean_tokens\": false}");
    expect_load_error(BERT_EUNSUPPORTED, "pooling_mode_weightedmean_tokens");
    write_file("1_Pooling/config.json", "{\"pooling_mode\": \"weightedmean\"}");
    expect_load_error(BERT_EUNSUPPORTED, "pooling_mode weightedmean");
    write_file("1_Pooling/config.json",
               "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": true}");
    expect_load_error(BERT_EUNSUPPORTED, "2 pooling modes");
    write_file("1_Pooling/config.json", "{\"pooling_mode\": \"mean\", \"include_prompt\": false}");
    expect_load_error(BERT_EUNSUPPORTED, "include_prompt");
}

Test(model, refuses_other_modules, .init = make_variant, .fini = remove_variant) {
    write_file("modules.json",
               "[{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
               "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
               "{\"path\":\"2_LayerNorm\",\"type\":\"sentence_transformers.models.LayerNorm\"}]");
    expect_load_error(BERT_EUNSUPPORTED, "models.LayerNorm");
    /* Normalize is last: a Dense after it is refused. */
    write_file("modules.json",
               "[{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
               "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
               "{\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"},"
               "{\"path\":\"3_Dense\",\"type\":\"sentence_transformers.models.Dense\"}]");
    expect_load_error(BERT_EUNSUPPORTED, "module 2");
}

Test(model, refuses_other_dense_modules, .init = make_variant, .fini = remove_variant) {
    write_file("modules.json",
               "[{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
               "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
               "{\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"}]");
    expect_load_error(BERT_EIO, "2_Dense/config.json");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/2_Dense", tmpdir);
    cr_assert_eq(mkdir(dir, 0700), 0);
    write_file("2_Dense/config.json",
               "{\"in_features\": 384, \"out_features\": 8, \"bias\": true, "
               "\"activation_function\": \"torch.nn.modules.activation.ReLU\"}");
    expect_load_error(BERT_EUNSUPPORTED,
                      "activation_function \"torch.nn.modules.activation.ReLU\"");
    write_file("2_Dense/config.json",
               "{\"in_features\": 100, \"out_features\": 8, \"bias\": true, "
               "\"activation_function\": \"torch.nn.modules.activation.Tanh\"}");
    expect_load_error(BERT_EFORMAT, "in_features 100");
    /* The old layout's weights are refused by name. */
    write_file("2_Dense/config.json",
               "{\"in_features\": 384, \"out_features\": 8, \"bias\": true, "
               "\"activation_function\": \"torch.nn.modules.linear.Identity\"}");
    write_file("2_Dense/pytorch_model.bin", "not read");
    expect_load_error(BERT_EUNSUPPORTED, "pytorch_model.bin");
}

Test(model, refuses_other_task_heads, .init = make_variant, .fini = remove_variant) {
    set_config("architectures", "[\"BertForTokenClassification\"]");
    expect_load_error(BERT_EUNSUPPORTED, "architecture \"BertForTokenClassification\"");
    set_config("architectures", "[\"XLMRobertaForSequenceClassification\"]");
    expect_load_error(BERT_EUNSUPPORTED, "model_type \"bert\"");
    /* A classifier needs its head's weights. */
    set_config("architectures", "[\"BertForSequenceClassification\"]");
    expect_load_error(BERT_EFORMAT, "is missing");
}

Test(model, missing_and_malformed_files, .init = make_variant, .fini = remove_variant) {
    write_file("config.json", "{\"model_type\": \"bert\",");
    expect_load_error(BERT_EFORMAT, "invalid JSON");
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    unlink(path);
    expect_load_error(BERT_EIO, "config.json: cannot open");
}

Test(model, weights_must_match_the_config, .init = make_variant, .fini = remove_variant) {
    set_config("intermediate_size", "1024");
    expect_load_error(BERT_EFORMAT, "intermediate.dense.weight has the wrong shape");
    set_config("intermediate_size", "1536");
    set_config("num_hidden_layers", "7");
    expect_load_error(BERT_EFORMAT, "encoder.layer.6.attention.self.query.weight is missing");
    set_config("num_hidden_layers", "6");
    set_config("num_attention_heads", "5");
    expect_load_error(BERT_EFORMAT, "not a multiple");
}

/* ---- bad batches ----------------------------------------------------------------- */

Test(model, refuses_bad_batches) {
    bert_model *m = load_model(MODEL_DIR);
    const attn_backend *b = backend("naive");
    bert_workspace *ws = make_workspace(m, 600, b);
    cr_assert_eq(bert_workspace_max_tokens(ws), 600);
    cr_assert_gt(bert_workspace_bytes(ws), (size_t)600 * 384 * 4 * 3);
    float out[2 * 384];
    int32_t ids[600];
    for (int i = 0; i < 600; i++)
        ids[i] = 1000 + i;
    char err[512];
    const attn_parallel *par = &attn_parallel_serial;

    const int32_t too_long[] = {0, 513};
    cr_assert_eq(bert_forward(m, ws, b, par, ids, too_long, 1, out, err, sizeof err), BERT_EINPUT);
    cr_assert_not_null(strstr(err, "at most 512"), "%s", err);
    const int32_t too_many[] = {0, 300, 601};
    cr_assert_eq(bert_forward(m, ws, b, par, ids, too_many, 2, out, err, sizeof err), BERT_EINPUT);
    const int32_t empty_seq[] = {0, 0, 4};
    cr_assert_eq(bert_forward(m, ws, b, par, ids, empty_seq, 2, out, err, sizeof err), BERT_EINPUT);
    const int32_t bad_start[] = {1, 4};
    cr_assert_eq(bert_forward(m, ws, b, par, ids, bad_start, 1, out, err, sizeof err), BERT_EINPUT);
    cr_assert_eq(bert_forward(m, ws, b, par, ids, too_long, 0, out, err, sizeof err), BERT_EINPUT);
    ids[2] = 30522;
    const int32_t ok[] = {0, 4};
    cr_assert_eq(bert_forward(m, ws, b, par, ids, ok, 1, out, err, sizeof err), BERT_EINPUT);
    cr_assert_not_null(strstr(err, "outside the vocabulary"), "%s", err);
    ids[2] = -1;
    cr_assert_eq(bert_forward(m, ws, b, par, ids, ok, 1, out, err, sizeof err), BERT_EINPUT);
    ids[2] = 1002;
    cr_assert_eq(bert_forward(m, ws, b, par, ids, ok, 1, out, err, sizeof err), BERT_OK, "%s", err);

    tp_pool *pool = tp_create(THREADS + 1);
    attn_parallel wide = tp_parallel(pool);
    cr_assert_eq(bert_forward(m, ws, b, &wide, ids, ok, 1, out, err, sizeof err), BERT_EINPUT);
    tp_destroy(pool);
    bert_workspace_free(ws);
    bert_free(m);
}

/* test_model_xlmr.c — the XLM-RoBERTa encoder against sentence-transformers.
 *
 * tests/golden/xlmr-tiny-model is a 2-layer, hidden-64 XLMRobertaModel with
 * random weights and the real SentencePiece tokenizer of tests/golden/xlmr-tiny,
 * saved as a sentence-transformers embedder (mean pooling, Normalize);
 * tests/golden/xlmr_embeddings.json holds, for 24 inputs in many scripts, the
 * token ids and the vector PyTorch computed (both made by
 * tests/golden/make_xlmr_model.py and committed, so nothing here needs PyPI).
 *
 * Floor, fp32: lowest cosine >= 1 - 1e-6 on every attention backend. Why: the
 * C forward and PyTorch run the same fp32 operations and differ only in the
 * order of summation. Each dot product of length K <= 128 then differs by at
 * most about sqrt(K)·u·|x||w| with u = 2^-24 (random rounding errors add in
 * quadrature), about 7e-7 relative; through 2 layers of 4 GEMMs, softmax,
 * GELU and 5 LayerNorms (each of which at most rescales a relative error by
 * its weight's spread) that stays within ~1e-5 relative in the worst case,
 * so cosine >= 1 - (1e-5)²/2 = 1 - 5e-11. 1 - 1e-6 lies far above what a
 * position numbering off by one, a skipped tensor or a wrong LayerNorm eps
 * gives (the random weights are drawn large so each of those moves a vector
 * by cosine 1 - 1e-2 or more), and far below the rounding noise. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "model/tokenizer.h"
#include "model_variant.h"
#include "tests/golden/golden_io.h"

#define XLMR_DIR    "tests/golden/xlmr-tiny-model"
#define XLMR_GOLDEN "tests/golden/xlmr_embeddings.json"
#define MIN_COSINE  (1.0 - 1e-6)
/* bf16: the derivation of test_model.c (ρ ≈ sqrt(n)·0.0032 over n roundings)
 * with n = 2 layers x 4 GEMMs + the embedding tables = 9 gives ρ ≈ 0.0096,
 * cosine ≈ 1 - 4.6e-5 before the residual stream dilutes it: the same floor
 * 1 - 1e-4 holds. */
#define MIN_COSINE_BF16 0.9999
#define THREADS         2

typedef struct {
    int n;
    char **text;
    int32_t **ids;
    int32_t *len;
    float **emb;
    int dim;
    int max_tokens;
} xgolden;

static xgolden xgolden_load(void) {
    json_error_t jerr;
    json_t *root = golden_load_json(XLMR_GOLDEN, 0, &jerr);
    cr_assert_not_null(root, "%s: %s (line %d)", XLMR_GOLDEN, jerr.text, jerr.line);
    json_t *arr = json_object_get(root, "mean_normalized");
    cr_assert(json_is_array(arr) && json_array_size(arr) > 0);
    xgolden g = {.n = (int)json_array_size(arr),
                 .max_tokens = (int)json_integer_value(json_object_get(root, "max_tokens"))};
    g.text = calloc((size_t)g.n, sizeof *g.text);
    g.ids = calloc((size_t)g.n, sizeof *g.ids);
    g.len = calloc((size_t)g.n, sizeof *g.len);
    g.emb = calloc((size_t)g.n, sizeof *g.emb);
    for (int i = 0; i < g.n; i++) {
        json_t *e = json_array_get(arr, (size_t)i);
        json_t *ids = json_object_get(e, "ids"), *emb = json_object_get(e, "embedding");
        g.text[i] = strdup(json_string_value(json_object_get(e, "text")));
        g.len[i] = (int32_t)json_array_size(ids);
        g.dim = (int)json_array_size(emb);
        g.ids[i] = malloc((size_t)g.len[i] * sizeof(int32_t));
        g.emb[i] = malloc((size_t)g.dim * sizeof(float));
        for (int32_t t = 0; t < g.len[i]; t++)
            g.ids[i][t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
        for (int d = 0; d < g.dim; d++)
            g.emb[i][d] = (float)json_number_value(json_array_get(emb, (size_t)d));
    }
    json_decref(root);
    return g;
}

static void xgolden_free(xgolden *g) {
    for (int i = 0; i < g->n; i++) {
        free(g->text[i]);
        free(g->ids[i]);
        free(g->emb[i]);
    }
    free(g->text);
    free(g->ids);
    free(g->len);
    free(g->emb);
}

/* Every golden input in one packed batch through backend `name` with the
 * linear layers in precision p; each vector against PyTorch's to >= floor. */
static void check_golden(const char *name, gemm_precision p, double floor) {
    xgolden g = xgolden_load();
    bert_model *m = NULL;
    char err[512] = "";
    int rc = bert_load_precision(XLMR_DIR, p, &m, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "bert_load_precision(%s): %s", XLMR_DIR, err);
    const int C = bert_get_config(m)->hidden_size;
    cr_assert_eq(g.dim, C);

    int32_t *cu = calloc((size_t)g.n + 1, sizeof *cu);
    for (int b = 0; b < g.n; b++)
        cu[b + 1] = cu[b] + g.len[b];
    int32_t *ids = malloc((size_t)cu[g.n] * sizeof *ids);
    for (int b = 0; b < g.n; b++)
        memcpy(ids + cu[b], g.ids[b], (size_t)g.len[b] * sizeof *ids);

    const attn_backend *be = attn_backend_find(name);
    cr_assert_not_null(be, "no attention backend %s", name);
    bert_workspace *ws = NULL;
    rc = bert_workspace_create(m, cu[g.n], THREADS, &be, 1, &ws, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "workspace: %s", err);
    tp_pool *pool = tp_create(THREADS);
    attn_parallel par = tp_parallel(pool);
    float *out = malloc((size_t)g.n * C * sizeof *out);
    rc = bert_forward(m, ws, be, &par, ids, cu, g.n, out, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "forward with %s: %s", name, err);

    double min_cos = 1.0;
    for (int i = 0; i < g.n; i++) {
        const double c = golden_cosine(out + (size_t)i * C, g.emb[i], C);
        cr_expect_geq(c, floor, "%s %s, input %d (%d tokens): cosine 1 - %.3g", name,
                      gemm_precision_name(p), i, g.len[i], 1.0 - c);
        min_cos = fmin(min_cos, c);
    }
    fprintf(stderr, "xlmr golden %s %s: %d inputs, %d tokens: min cosine 1 - %.2g\n", name,
            gemm_precision_name(p), g.n, cu[g.n], 1.0 - min_cos);

    free(out);
    tp_destroy(pool);
    bert_workspace_free(ws);
    bert_free(m);
    free(ids);
    free(cu);
    xgolden_free(&g);
}

TestSuite(xlmr, .timeout = 120);

/* config.json says 130 position rows and pad_token_id 1: positions start at
 * 2, so 128 tokens fit, and the golden's longest input is exactly that. */
Test(xlmr, reads_the_position_numbering) {
    bert_config c;
    char err[512] = "";
    int rc = bert_config_load(XLMR_DIR, &c, err, sizeof err);
    cr_assert_eq(rc, BERT_OK, "%s", err);
    cr_expect_eq(c.position_pad_id, 1);
    cr_expect_eq(c.position_offset, 2);
    cr_expect_eq(c.max_positions, 128);
    cr_expect_eq(c.type_vocab_size, 1);
    cr_expect_eq(c.pooling, BERT_POOL_MEAN);
    cr_expect_eq(c.normalize, 1);
    xgolden g = xgolden_load();
    int longest = 0, has_pad = 0;
    for (int i = 0; i < g.n; i++) {
        longest = g.len[i] > longest ? g.len[i] : longest;
        for (int t = 0; t < g.len[i]; t++)
            has_pad |= g.ids[i][t] == 1;
    }
    cr_expect_eq(longest, c.max_positions, "no golden input uses the last position row");
    cr_expect(has_pad, "no golden input holds the padding id");
    xgolden_free(&g);
}

Test(xlmr, golden_naive) {
    check_golden("naive", GEMM_FP32, MIN_COSINE);
}

Test(xlmr, golden_fused) {
    check_golden("fused", GEMM_FP32, MIN_COSINE);
}

Test(xlmr, golden_bf16) {
    const char *why = gemm_unsupported(GEMM_BF16);
    if (why) {
        fprintf(stderr, "xlmr golden bf16: skipped: %s\n", why);
        cr_skip_test("bf16: %s", why);
    }
    check_golden("fused", GEMM_BF16, MIN_COSINE_BF16);
}

/* The C tokenizer on the model directory gives the ids the golden was
 * computed from (truncating at the model's 128 tokens, as the service does),
 * so the served vectors are the golden ones. */
Test(xlmr, tokenizer_gives_the_golden_ids) {
    xgolden g = xgolden_load();
    tok_tokenizer *t = NULL;
    char err[512] = "";
    cr_assert_eq(tok_load(&t, XLMR_DIR, err, sizeof err), 0, "%s", err);
    int32_t ids[128];
    tok_output o = {.ids = ids, .capacity = 128};
    for (int i = 0; i < g.n; i++) {
        cr_assert_eq(tok_encode(t, g.text[i], strlen(g.text[i]), 1, &o), 0, "input %d", i);
        cr_expect_eq(o.n, g.len[i], "input %d: %d ids, golden %d", i, o.n, g.len[i]);
        cr_expect(o.n == g.len[i] && memcmp(ids, g.ids[i], (size_t)o.n * sizeof *ids) == 0,
                  "input %d: ids differ from the golden's", i);
    }
    tok_free(t);
    xgolden_free(&g);
}

/* ---- variants of the directory ------------------------------------------------ */

static char tmpdir[VARIANT_DIR_LEN];

/* A copy of the tiny model whose files can be replaced. */
static void make_variant(void) {
    variant_copy(tmpdir, XLMR_DIR);
}

static void remove_variant(void) {
    variant_remove(tmpdir);
}

Test(xlmr, needs_the_padding_index, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "pad_token_id", NULL);
    variant_expect_config_error(tmpdir, BERT_EFORMAT, "pad_token_id");
}

Test(xlmr, refuses_a_table_with_no_position_after_the_padding_index, .init = make_variant,
     .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "max_position_embeddings", "2");
    variant_expect_config_error(tmpdir, BERT_EFORMAT, "leaves no position");
}

Test(xlmr, refuses_other_pooling_modes, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "1_Pooling/config.json", "pooling_mode", "\"weightedmean\"");
    variant_expect_config_error(tmpdir, BERT_EUNSUPPORTED, "pooling_mode weightedmean");
    variant_set_json(tmpdir, "1_Pooling/config.json", "pooling_mode", "[\"mean\", \"max\"]");
    variant_expect_config_error(tmpdir, BERT_EUNSUPPORTED, "pooling_mode");
}

/* "roberta" is the same computation; a checkpoint saved from a task head
 * names every tensor under "roberta.": the tensors are renamed in place of
 * the file (the safetensors header is JSON, offsets count from the data) and
 * the vectors must not move at all. */
Test(xlmr, reads_roberta_prefixed_weights, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "model_type", "\"roberta\"");
    char *data;
    size_t data_len;
    json_t *in = variant_read_safetensors(tmpdir, &data, &data_len), *out = json_object();
    const char *key;
    json_t *v;
    json_object_foreach(in, key, v) {
        char name[256];
        snprintf(name, sizeof name, "%s%s", strcmp(key, "__metadata__") ? "roberta." : "", key);
        json_object_set(out, name, v);
    }
    variant_write_safetensors(tmpdir, out, data, data_len, 0);
    free(data);
    json_decref(in);
    json_decref(out);

    bert_model *a = NULL, *b = NULL;
    char err[512] = "";
    cr_assert_eq(bert_load(XLMR_DIR, &a, err, sizeof err), BERT_OK, "%s", err);
    cr_assert_eq(bert_load(tmpdir, &b, err, sizeof err), BERT_OK, "%s", err);
    xgolden g = xgolden_load();
    const attn_backend *be = attn_backend_find("naive");
    cr_assert_not_null(be);
    tp_pool *pool = tp_create(1);
    attn_parallel par = tp_parallel(pool);
    const int C = g.dim;
    float *va = malloc((size_t)C * sizeof *va), *vb = malloc((size_t)C * sizeof *vb);
    for (int i = 0; i < g.n; i++) {
        const int32_t cu[2] = {0, g.len[i]};
        bert_workspace *wa = NULL, *wb = NULL;
        cr_assert_eq(bert_workspace_create(a, g.len[i], 1, &be, 1, &wa, err, sizeof err), 0);
        cr_assert_eq(bert_workspace_create(b, g.len[i], 1, &be, 1, &wb, err, sizeof err), 0);
        cr_assert_eq(bert_forward(a, wa, be, &par, g.ids[i], cu, 1, va, err, sizeof err), 0);
        cr_assert_eq(bert_forward(b, wb, be, &par, g.ids[i], cu, 1, vb, err, sizeof err), 0);
        cr_expect_eq(memcmp(va, vb, (size_t)C * sizeof *va), 0, "input %d differs", i);
        bert_workspace_free(wa);
        bert_workspace_free(wb);
    }
    free(va);
    free(vb);
    tp_destroy(pool);
    bert_free(a);
    bert_free(b);
    xgolden_free(&g);
}

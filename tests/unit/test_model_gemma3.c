/* test_model_gemma3.c — EmbeddingGemma (model_type "gemma3_text" with
 * use_bidirectional_attention) against transformers and
 * sentence-transformers in float64.
 *
 * tests/golden/gemma3-tiny-model is a 4-layer, hidden-64 Gemma3TextModel
 * with 2 query heads over 1 K/V head of head_dim 32, random float16 weights
 * (Gemma's norm weights as offsets from one), layers 0, 1 and 3 sliding
 * (sliding_window 16: keys within |i − j| <= 8) with θ 10000, layer 2 full
 * with θ 1e6, query_pre_attn_scalar 32; saved as EmbeddingGemma is: mean
 * pooling, Dense 64→256 and 256→64 without bias or activation, Normalize,
 * and its prompts (made by tests/golden/make_gemma3_model.py).
 * tests/golden/gemma3_embeddings.json holds, for 28 inputs, the ids and the
 * vector computed in float64, plain and with the query and document prompts.
 *
 * Floors as test_model_modernbert.c's:
 *   fp32 (naive)  1 - 1e-6: the same operations in fp32 in another order;
 *   bf16 GEMMs    1 - 1e-3, measured as ModernBERT's: test_model.c's
 *                 derivation (17 roundings, 1 - 4.5e-5) holds for the plain
 *                 inputs (1 - 8.6e-5) but not with the prompts, whose longer
 *                 inputs reach 1 - 1.7e-4 (query) and 1 - 1.4e-4 (document):
 *                 attention amplifies Q and K's rounding, as in ModernBERT;
 *   int8          measured (GEMMA3_INT8_FLOOR).
 * Each block is shown to matter: the vectors leave the bf16 floor with the
 * window made global (the_window_matters) and with layer 0's post norms
 * changed (the_post_norms_matter), and the fp32 floor with the two θ
 * swapped (the_local_theta_matters). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family_golden.h"
#include "kernels/attention.h"
#include "model/bert.h"
#include "model/encoder.h"
#include "model_variant.h"

#define G3_DIR     "tests/golden/gemma3-tiny-model"
#define G3_GOLDEN  "tests/golden/gemma3_embeddings.json"
#define MIN_COSINE (1.0 - 1e-6)
#define MIN_BF16   0.999
/* int8 (bert_int8_plan): the lowest cosine against fp32 over the golden
 * inputs, printed on every run: 0.999069, rounded down to 0.99 (hidden 64:
 * this model's floor, not a promise for embeddinggemma-300m). */
#define GEMMA3_INT8_FLOOR 0.99
#define THREADS           2

/* Backends that lack the window or grouped K/V heads are refused by name
 * (the first capability each lacks is what it names). */
static int refused_for_a_capability(const char *dir, const char *name) {
    encoder_desc *d = NULL;
    char err[512] = "";
    cr_assert_eq(encoder_describe(dir, &d, err, sizeof err), BERT_OK, "%s", err);
    const attn_shape s = encoder_attn_shape(encoder_desc_info(d), 512);
    const int rc = attn_backend_supports(attn_backend_find(name), &s, err, sizeof err);
    encoder_desc_free(d);
    return rc != ATTN_OK && (strstr(err, "window") || strstr(err, "group query heads"));
}

static const char *const sets[] = {"mean_normalized", "query_mean_normalized",
                                   "document_mean_normalized", NULL};
static const fam_model gemma3 = {.family = "gemma3",
                                 .dir = G3_DIR,
                                 .golden = G3_GOLDEN,
                                 .sets = sets,
                                 .threads = THREADS,
                                 .refused = refused_for_a_capability};

TestSuite(gemma3, .timeout = 300);

Test(gemma3, reads_the_config) {
    bert_config c;
    char err[512] = "";
    cr_assert_eq(bert_config_load(G3_DIR, &c, err, sizeof err), BERT_OK, "%s", err);
    cr_expect_eq(c.family, BERT_FAMILY_GEMMA3);
    cr_expect_eq(c.layout, BERT_LAYOUT_GEMMA3);
    cr_expect(c.pre_norm && c.norm_first && !c.emb_norm && c.final_norm && c.post_norms);
    cr_expect_eq(c.norm, ENC_NORM_RMS_GEMMA);
    cr_expect(c.qk_norm && !c.causal && c.rope);
    cr_expect_eq(c.mlp, ENC_MLP_GEGLU_TANH);
    cr_expect(c.rope_theta[0] == 1000000.0 && c.rope_theta[1] == 10000.0);
    cr_expect_eq(c.window, 8);
    cr_expect(c.sliding[0] && c.sliding[1] && !c.sliding[2] && c.sliding[3]);
    cr_expect_eq(c.head_dim, 32);
    cr_expect_eq(c.num_kv_heads, 1);
    cr_expect_float_eq(c.emb_scale, 8.0f, 1e-6);
    cr_expect_float_eq(c.attn_scale, 1.0f / sqrtf(32.0f), 1e-7);
    cr_expect_eq(c.ndense, 2);
    cr_expect_eq(c.pooling, BERT_POOL_MEAN);
    encoder_desc *d = NULL;
    cr_assert_eq(encoder_describe(G3_DIR, &d, err, sizeof err), BERT_OK, "%s", err);
    const encoder_info *i = encoder_desc_info(d);
    cr_expect_str_eq(i->family, "gemma3");
    cr_expect_str_eq(i->norm, "pre- and post-rmsnorm (gemma)");
    cr_expect_str_eq(i->mlp, "geglu (tanh)");
    cr_expect_str_eq(i->attention, "bidirectional");
    cr_expect_eq(i->window, 8);
    encoder_desc_free(d);
}

Test(gemma3, golden_every_backend) {
    fam_golden_every_backend(&gemma3, GEMM_FP32, MIN_COSINE, MIN_BF16);
}

Test(gemma3, golden_bf16) {
    fam_golden_every_backend(&gemma3, GEMM_BF16, MIN_BF16, MIN_BF16);
}

Test(gemma3, golden_int8) {
    fam_golden_int8(&gemma3, "mean_normalized", GEMMA3_INT8_FLOOR);
}

/* ---- each block matters ------------------------------------------------------ */

static char tmpdir[VARIANT_DIR_LEN];
static void make_variant(void) {
    variant_copy(tmpdir, G3_DIR);
}
static void remove_variant(void) {
    variant_remove(tmpdir);
}

Test(gemma3, the_window_matters, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "layer_types",
                     "[\"full_attention\", \"full_attention\", \"full_attention\", "
                     "\"full_attention\"]");
    fam_expect_off_floor(&gemma3, "mean_normalized", tmpdir, 17, MIN_BF16, "without the window");
}

Test(gemma3, the_local_theta_matters, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "rope_theta", "10000.0");
    variant_set_json(tmpdir, "config.json", "rope_local_base_freq", "1000000.0");
    /* Short inputs barely rotate: every input past two tokens leaves the
     * fp32 floor the golden tests hold (measured: 0.99918 at most). */
    fam_expect_off_floor(&gemma3, "mean_normalized", tmpdir, 2, MIN_COSINE, "with the θ swapped");
}

/* Zero weights are Gemma's norm without its learned scale (1 + 0). */
Test(gemma3, the_post_norms_matter, .init = make_variant, .fini = remove_variant) {
    variant_fill_tensor(tmpdir, "layers.0.post_feedforward_layernorm.weight", 0);
    variant_fill_tensor(tmpdir, "layers.0.post_attention_layernorm.weight", 0);
    fam_expect_off_floor(&gemma3, "mean_normalized", tmpdir, 2, MIN_BF16,
                         "with layer 0's post norms plain");
}

/* ---- refusals ----------------------------------------------------------------- */

Test(gemma3, refusals, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "use_bidirectional_attention", "false");
    variant_expect_config_error(tmpdir, BERT_EUNSUPPORTED, "causal Gemma3");
    variant_set_json(tmpdir, "config.json", "use_bidirectional_attention", "true");
    variant_set_json(tmpdir, "config.json", "attn_logit_softcapping", "50.0");
    variant_expect_config_error(tmpdir, BERT_EUNSUPPORTED, "attn_logit_softcapping");
}

Test(gemma3, tokenizer_gives_the_golden_ids) {
    fam_tokenizer_gives_the_golden_ids(&gemma3, "mean_normalized");
}

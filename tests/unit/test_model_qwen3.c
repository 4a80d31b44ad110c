/* test_model_qwen3.c — Qwen3-Embedding (model_type "qwen3") against
 * transformers and sentence-transformers in float64.
 *
 * tests/golden/qwen3-tiny-model is a 2-layer, hidden-64 Qwen3 with 4 query
 * heads over 2 K/V heads of head_dim 32 (so Q is 128 wide, not C), random
 * float16 weights, saved as Qwen3ForCausalLM with last-token pooling,
 * Normalize and the `query` prompt of Qwen3-Embedding (made by
 * tests/golden/make_qwen3_model.py). tests/golden/qwen3_embeddings.json
 * holds, for 28 inputs, the ids (the tokenizer appends <|endoftext|>) and
 * the vector computed in float64, plain and with the query prompt.
 *
 * Floors as test_model_modernbert.c's:
 *   fp32 (naive)  1 - 1e-6: the same operations in fp32 in another order;
 *   bf16 GEMMs    1 - 1e-3, measured as ModernBERT's (with only the QKV GEMM
 *                 in bf16 the worst input is at 1 - 1.7e-4, only one of the
 *                 others 1 - 1e-5 to 2.5e-5, all at 1 - 2.5e-4);
 *   int8          measured (QWEN3_INT8_FLOOR).
 * Each block is shown to matter: the vectors leave the bf16 floor with the
 * attention made bidirectional (causal_attention_matters), with RoPE's θ
 * moved (rope_matters) and with layer 0's q/k norms' weights set to one
 * (the_qk_norm_matters). */
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

#define Q3_DIR     "tests/golden/qwen3-tiny-model"
#define Q3_GOLDEN  "tests/golden/qwen3_embeddings.json"
#define MIN_COSINE (1.0 - 1e-6)
#define MIN_BF16   0.999
/* int8 (bert_int8_plan): the lowest cosine against fp32 over the golden
 * inputs, printed on every run: 0.996873, rounded down to 0.99 (hidden 64:
 * this model's floor, not a promise for Qwen3-Embedding-0.6B). */
#define QWEN3_INT8_FLOOR 0.99
#define THREADS          2

static const char *const sets[] = {"lasttoken_normalized", "query_lasttoken_normalized", NULL};
/* Backends without grouped K/V heads are refused by name, not run. */
static const fam_model qwen3 = {.family = "qwen3",
                                .dir = Q3_DIR,
                                .golden = Q3_GOLDEN,
                                .sets = sets,
                                .threads = THREADS,
                                .allowed_refusal = "group query heads"};

TestSuite(qwen3, .timeout = 300);

Test(qwen3, reads_the_config) {
    bert_config c;
    char err[512] = "";
    cr_assert_eq(bert_config_load(Q3_DIR, &c, err, sizeof err), BERT_OK, "%s", err);
    cr_expect_eq(c.family, BERT_FAMILY_QWEN3);
    cr_expect_eq(c.layout, BERT_LAYOUT_QWEN3);
    cr_expect(c.pre_norm && c.norm_first && !c.emb_norm && c.final_norm && !c.post_norms);
    cr_expect_eq(c.norm, ENC_NORM_RMS);
    cr_expect(c.qk_norm && c.causal && c.rope && !c.abs_positions);
    cr_expect_eq(c.mlp, ENC_MLP_SWIGLU);
    cr_expect(c.rope_theta[0] == 1000000.0 && c.rope_theta[1] == 1000000.0);
    cr_expect_eq(c.window, 0);
    cr_expect_eq(c.head_dim, 32);
    cr_expect_eq(c.num_kv_heads, 2);
    cr_expect_eq(c.pooling, BERT_POOL_LASTTOKEN);
    encoder_desc *d = NULL;
    cr_assert_eq(encoder_describe(Q3_DIR, &d, err, sizeof err), BERT_OK, "%s", err);
    const encoder_info *i = encoder_desc_info(d);
    cr_expect_str_eq(i->family, "qwen3");
    cr_expect_str_eq(i->position, "rope");
    cr_expect_str_eq(i->norm, "pre-rmsnorm");
    cr_expect_str_eq(i->mlp, "swiglu");
    cr_expect_str_eq(i->attention, "causal");
    cr_expect_eq(i->head_dim, 32);
    const attn_shape s = encoder_attn_shape(i, 64);
    cr_expect(s.kv_heads == 2 && s.causal && s.window == 0 && s.head_dim == 32);
    encoder_desc_free(d);
}

Test(qwen3, golden_every_backend) {
    fam_golden_every_backend(&qwen3, GEMM_FP32, MIN_COSINE, MIN_BF16);
}

Test(qwen3, golden_bf16) {
    fam_golden_every_backend(&qwen3, GEMM_BF16, MIN_BF16, MIN_BF16);
}

Test(qwen3, golden_int8) {
    fam_golden_int8(&qwen3, "lasttoken_normalized", QWEN3_INT8_FLOOR);
}

/* ---- each block matters ------------------------------------------------------ */

static char tmpdir[VARIANT_DIR_LEN];
static void make_variant(void) {
    variant_copy(tmpdir, Q3_DIR);
}
static void remove_variant(void) {
    variant_remove(tmpdir);
}

Test(qwen3, rope_matters, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "rope_theta", "10000");
    fam_expect_off_floor(&qwen3, "lasttoken_normalized", tmpdir, 2, MIN_BF16, "with θ 1e4");
}

Test(qwen3, the_qk_norm_matters, .init = make_variant, .fini = remove_variant) {
    variant_fill_tensor(tmpdir, "layers.0.self_attn.q_norm.weight", 1);
    variant_fill_tensor(tmpdir, "layers.0.self_attn.k_norm.weight", 1);
    fam_expect_off_floor(&qwen3, "lasttoken_normalized", tmpdir, 2, MIN_BF16,
                         "with layer 0's q/k norms one");
}

/* naive with the causal mask dropped: a table whose forward hands naive
 * the problem with shape.causal cleared. */
static int bidirectional_forward(const attn_problem *p, void *ws, size_t bytes,
                                 const attn_parallel *par) {
    attn_problem q = *p;
    q.shape.causal = 0;
    return attn_backend_find("naive")->forward(&q, ws, bytes, par);
}

/* The same model with every query seeing every key of its sequence leaves
 * the floor: the causal flag reaches the backend and matters. */
Test(qwen3, causal_attention_matters) {
    golden_set g = fam_load_golden(&qwen3, "lasttoken_normalized");
    encoder *e = NULL;
    char err[512] = "";
    cr_assert_eq(encoder_load(Q3_DIR, GEMM_FP32, &e, err, sizeof err), BERT_OK, "%s", err);
    cr_assert(encoder_attn_shape(encoder_get_info(e), 64).causal);
    attn_backend bidir = *attn_backend_find("naive");
    bidir.name = "bidirectional";
    bidir.forward = bidirectional_forward;
    const double hi = fam_best_cosine_each(e, &bidir, &g, 512, 2);
    fprintf(stderr, "qwen3 bidirectional: inputs reach cosine %.6f at most\n", hi);
    cr_assert_lt(hi, MIN_BF16);
    encoder_free(e);
    golden_set_free(&g);
}

/* ---- refusals ----------------------------------------------------------------- */

Test(qwen3, refusals, .init = make_variant, .fini = remove_variant) {
    variant_set_json(tmpdir, "config.json", "use_sliding_window", "true");
    variant_expect_config_error(tmpdir, BERT_EUNSUPPORTED, "use_sliding_window");
    variant_set_json(tmpdir, "config.json", "use_sliding_window", "false");
    variant_set_json(tmpdir, "config.json", "num_key_value_heads", "3");
    variant_expect_config_error(tmpdir, BERT_EFORMAT, "num_key_value_heads 3");
    variant_set_json(tmpdir, "config.json", "num_key_value_heads", "2");
    variant_set_json(tmpdir, "config.json", "architectures",
                     "[\"Qwen3ForSequenceClassification\"]");
    variant_expect_config_error(tmpdir, BERT_EUNSUPPORTED, "Qwen3ForSequenceClassification");
}

Test(qwen3, tokenizer_gives_the_golden_ids) {
    fam_tokenizer_gives_the_golden_ids(&qwen3, "lasttoken_normalized");
}

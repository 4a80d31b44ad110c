/* test_calib_frame.c — the framing of int8 calibration's synthetic
 * sequences (bert_config_frame): for every family's checkpoint, the special
 * tokens its own tokenizer puts around a text, and the old BERT / RoBERTa
 * guess only for a directory without a tokenizer.
 *
 * Each expected framing is written out from the checkpoint's tokenizer.json
 * post-processor (or vocab.txt for MiniLM), and checked again against
 * tok_encode of another text, so neither a wrong table nor a framing read
 * off one lucky text passes; and the int8 load is shown to calibrate with
 * it (calibration_reads_the_tokenizer). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backends.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "model/bert.h"
#include "model/bert_config.h"
#include "model/tokenizer.h"
#include "model_variant.h"

typedef struct frame_case {
    const char *dir;
    int32_t lead[BERT_FRAME_MAX], trail[BERT_FRAME_MAX];
    int nlead, ntrail;
} frame_case;

static const frame_case cases[] = {
    {"models/all-MiniLM-L6-v2", {101}, {102}, 1, 1},              /* [CLS] [SEP], vocab.txt */
    {"tests/golden/bert-cls-tiny", {2}, {3}, 1, 1},               /* BERT, a small vocabulary */
    {"tests/golden/roberta-tiny-model", {0}, {2}, 1, 1},          /* RobertaProcessing */
    {"tests/golden/xlmr-tiny-model", {0}, {2}, 1, 1},             /* <s> </s> */
    {"tests/golden/xlmr-cls-tiny", {0}, {2}, 1, 1},               /* <s> </s> */
    {"tests/golden/mpnet-tiny-model", {0}, {2}, 1, 1},            /* <s> </s> */
    {"tests/golden/modernbert-tiny-model", {1032}, {1033}, 1, 1}, /* [CLS] [SEP] */
    {"tests/golden/qwen3-tiny-model", {0}, {1200}, 0, 1},         /* <|endoftext|>, no BOS */
    {"tests/golden/gemma3-tiny-model", {2}, {1}, 1, 1},           /* <bos> <eos> */
    {"tests/golden/nomic-bert-tiny-model", {2}, {3}, 1, 1},       /* [CLS] [SEP] */
};

static void load_config(const char *dir, bert_config *c) {
    char err[512];
    memset(c, 0, sizeof *c);
    cr_assert_eq(bert_config_load(dir, c, err, sizeof err), BERT_OK, "%s: %s (run `make model`)",
                 dir, err);
}

/* f is what tok_encode gives text: its first specials f->lead, its last
 * f->trail, and a piece of the text between them. */
static void expect_encoding(const char *dir, const bert_frame *f, const char *text) {
    char err[512];
    tok_tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, dir, err, sizeof err), TOK_OK, "%s: %s", dir, err);
    int32_t ids[64];
    uint8_t special[64];
    tok_output o = {.ids = ids, .special = special, .capacity = 64};
    cr_assert_eq(tok_encode(t, text, strlen(text), 1, &o), TOK_OK, "%s", dir);
    cr_assert_gt(o.n, f->nlead + f->ntrail, "%s: %d tokens", dir, o.n);
    for (int i = 0; i < f->nlead; i++)
        cr_expect(special[i] && ids[i] == f->lead[i], "%s: token %d is %d", dir, i, ids[i]);
    for (int i = 0; i < f->ntrail; i++) {
        const int k = o.n - f->ntrail + i;
        cr_expect(special[k] && ids[k] == f->trail[i], "%s: token %d is %d", dir, k, ids[k]);
    }
    cr_expect(!special[f->nlead] && !special[o.n - f->ntrail - 1],
              "%s: more specials around the text than the framing", dir);
    tok_free(t);
}

Test(calib_frame, each_family_as_its_tokenizer) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const frame_case *c = &cases[i];
        bert_config cfg;
        load_config(c->dir, &cfg);
        bert_frame f;
        bert_config_frame(c->dir, &cfg, &f);
        cr_expect_eq(f.source, BERT_FRAME_TOKENIZER, "%s", c->dir);
        cr_expect_eq(f.nlead, c->nlead, "%s: %d ids before", c->dir, f.nlead);
        cr_expect_eq(f.ntrail, c->ntrail, "%s: %d ids after", c->dir, f.ntrail);
        if (f.nlead != c->nlead || f.ntrail != c->ntrail)
            continue;
        for (int k = 0; k < c->nlead; k++)
            cr_expect_eq(f.lead[k], c->lead[k], "%s: lead[%d] %d", c->dir, k, f.lead[k]);
        for (int k = 0; k < c->ntrail; k++)
            cr_expect_eq(f.trail[k], c->trail[k], "%s: trail[%d] %d", c->dir, k, f.trail[k]);
        expect_encoding(c->dir, &f, "hello world, 42 times");
    }
}

/* A tokenizer whose specials lie outside the model's vocabulary frames
 * nothing: those ids cannot be the model's, and no guess replaces them. */
Test(calib_frame, ids_outside_the_vocabulary_are_not_used) {
    const char *dir = "tests/golden/modernbert-tiny-model";
    bert_config cfg;
    load_config(dir, &cfg);
    cfg.vocab_size = 1033; /* [CLS] 1032 fits, [SEP] 1033 does not */
    bert_frame f;
    bert_config_frame(dir, &cfg, &f);
    cr_expect_eq(f.source, BERT_FRAME_TOKENIZER);
    cr_expect_eq(f.nlead + f.ntrail, 0, "%d + %d ids", f.nlead, f.ntrail);
}

/* Without a tokenizer, the guess as before tokenizers were read: BERT's
 * [CLS] 101 ... [SEP] 102, RoBERTa's <s> 0 ... </s> 2 for a position
 * offset, nothing for a vocabulary too small for either. */
Test(calib_frame, a_directory_without_a_tokenizer_is_guessed) {
    char dir[] = "/tmp/attn-calib-frame-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    bert_config cfg = {.vocab_size = 30522};
    bert_frame f;
    bert_config_frame(dir, &cfg, &f);
    cr_expect_eq(f.source, BERT_FRAME_GUESS);
    cr_expect(f.nlead == 1 && f.ntrail == 1 && f.lead[0] == 101 && f.trail[0] == 102);
    cfg.position_offset = 2;
    bert_config_frame(dir, &cfg, &f);
    cr_expect(f.nlead == 1 && f.ntrail == 1 && f.lead[0] == 0 && f.trail[0] == 2);
    cfg.vocab_size = 100;
    bert_config_frame(dir, &cfg, &f);
    cr_expect_eq(f.source, BERT_FRAME_GUESS);
    cr_expect_eq(f.nlead + f.ntrail, 0);
    rmdir(dir);
}

/* The int8 vectors of one fixed sequence after loading dir (Qwen3's
 * output_dim floats into out); skips where this CPU has no int8 GEMMs. */
static void int8_vector(const char *dir, float *out, int n) {
    char err[512];
    bert_model *m = NULL;
    const int rc = bert_load_precision(dir, GEMM_INT8, &m, err, sizeof err);
    if (rc == BERT_EUNSUPPORTED)
        cr_skip_test("int8 is not available here: %s; calibration's framing was NOT checked", err);
    cr_assert_eq(rc, BERT_OK, "%s: %s", dir, err);
    cr_assert_eq(bert_get_config(m)->output_dim, n);
    const attn_backend *be = &attn_backend_naive;
    bert_workspace *ws = NULL;
    cr_assert_eq(bert_workspace_create(m, 16, 1, &be, 1, &ws, err, sizeof err), BERT_OK, "%s", err);
    const int32_t ids[6] = {1010, 1020, 1030, 1040, 1050, 1200}, cu[2] = {0, 6};
    cr_assert_eq(bert_forward(m, ws, be, &attn_parallel_serial, ids, cu, 1, out, err, sizeof err),
                 BERT_OK, "%s", err);
    bert_workspace_free(ws);
    bert_free(m);
}

/* Qwen3's tokenizer frames a sequence as text <|endoftext|>, without a BOS:
 * the same directory without its tokenizer.json is calibrated with the old
 * [CLS] 101 ... [SEP] 102 guess, and its int8 vectors move; a copy with
 * the tokenizer gives the original's bits. */
Test(calib_frame, calibration_reads_the_tokenizer) {
    const char *src = "tests/golden/qwen3-tiny-model";
    bert_config cfg;
    load_config(src, &cfg);
    const int n = cfg.output_dim;
    float *a = malloc(3 * sizeof(float) * (size_t)n);
    cr_assert_not_null(a);
    float *same = a + n, *guessed = a + 2 * n;
    int8_vector(src, a, n);
    char dir[VARIANT_DIR_LEN];
    variant_copy(dir, src);
    int8_vector(dir, same, n);
    char path[VARIANT_DIR_LEN + 32];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    cr_assert_eq(unlink(path), 0);
    int8_vector(dir, guessed, n);
    variant_remove(dir);
    cr_expect_eq(memcmp(a, same, sizeof(float) * (size_t)n), 0, "a copy calibrates differently");
    float diff = 0.0f;
    for (int i = 0; i < n; i++)
        diff = fmaxf(diff, fabsf(a[i] - guessed[i]));
    cr_expect_gt(diff, 0.0f, "the tokenizer's framing did not reach calibration");
    fprintf(stderr, "calib_frame qwen3 int8: largest change without the tokenizer %.3g\n",
            (double)diff);
    free(a);
}

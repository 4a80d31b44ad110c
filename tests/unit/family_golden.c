/* family_golden.c — the family model tests' shared steps (family_golden.h). */
#include "family_golden.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "model/bert_config.h"
#include "model/encoder.h"
#include "model/tokenizer.h"
#include "tests/golden/golden_io.h"

float *fam_embed_all(const char *dir, const golden_set *g, const char *name, gemm_precision p,
                     int threads, const char *allowed_refusal) {
    const char *why = gemm_unsupported(p);
    if (why) {
        fprintf(stderr, "%s %s %s: skipped: %s\n", dir, name, gemm_precision_name(p), why);
        return NULL;
    }
    encoder *e = NULL;
    char err[512] = "";
    cr_assert_eq(encoder_load(dir, p, &e, err, sizeof err), BERT_OK, "%s", err);
    const encoder_info *info = encoder_get_info(e);
    cr_assert_eq(info->output_dim, g->dim);
    int32_t *cu = calloc((size_t)g->n + 1, sizeof *cu);
    for (int b = 0; b < g->n; b++)
        cu[b + 1] = cu[b] + g->len[b];
    int32_t *ids = malloc((size_t)cu[g->n] * sizeof *ids);
    for (int b = 0; b < g->n; b++)
        memcpy(ids + cu[b], g->ids[b], (size_t)g->len[b] * sizeof *ids);
    const attn_backend *be = attn_backend_find(name);
    cr_assert_not_null(be, "no attention backend %s", name);
    const attn_shape shape = encoder_attn_shape(info, cu[g->n]);
    float *out = NULL;
    if (attn_backend_supports(be, &shape, err, sizeof err) != ATTN_OK) {
        fprintf(stderr, "%s %s %s: skipped: %s\n", dir, name, gemm_precision_name(p), err);
        cr_assert(strstr(err, "AVX512_BF16") || (allowed_refusal && strstr(err, allowed_refusal)),
                  "%s refused %s: %s", name, dir, err);
    } else {
        encoder_workspace *ws = NULL;
        cr_assert_eq(encoder_workspace_create(e, cu[g->n], threads, &be, 1, &ws, err, sizeof err),
                     BERT_OK, "%s", err);
        tp_pool *pool = tp_create(threads);
        const attn_parallel par = tp_parallel(pool);
        out = malloc((size_t)g->n * (size_t)g->dim * sizeof *out);
        cr_assert_eq(encoder_forward(e, ws, be, &par, ids, NULL, cu, g->n, out, err, sizeof err),
                     BERT_OK, "forward with %s: %s", name, err);
        tp_destroy(pool);
        encoder_workspace_free(ws);
    }
    encoder_free(e);
    free(ids);
    free(cu);
    return out;
}

double fam_check_against(const golden_set *g, const float *out, const char *label, double floor) {
    double lo = 1.0;
    for (int i = 0; i < g->n; i++) {
        const double c = golden_cosine(out + (size_t)i * g->dim, g->emb[i], g->dim);
        cr_expect_geq(c, floor, "%s: input %d (%d tokens): cosine 1 - %.3g", label, i, g->len[i],
                      1.0 - c);
        lo = fmin(lo, c);
    }
    fprintf(stderr, "golden %s: %d inputs: min cosine 1 - %.2g (floor 1 - %.2g)\n", label, g->n,
            1.0 - lo, 1.0 - floor);
    return lo;
}

golden_set fam_load_golden(const fam_model *m, const char *set) {
    golden_set g;
    char err[512] = "";
    cr_assert_eq(golden_set_load_from(m->golden, set, &g, err, sizeof err), 0, "%s", err);
    return g;
}

double fam_check_golden(const fam_model *m, const char *set, const char *name, gemm_precision p,
                        double floor) {
    if (m->refused && m->refused(m->dir, name)) {
        fprintf(stderr, "%s %s: skipped: refused for a capability of the model\n", m->family, name);
        return 2.0;
    }
    golden_set g = fam_load_golden(m, set);
    float *out = fam_embed_all(m->dir, &g, name, p, m->threads, m->allowed_refusal);
    double lo = 2.0;
    if (out) {
        char label[128];
        snprintf(label, sizeof label, "%s %s %s %s", m->family, set, name, gemm_precision_name(p));
        lo = fam_check_against(&g, out, label, floor);
    }
    free(out);
    golden_set_free(&g);
    return lo;
}

void fam_golden_every_backend(const fam_model *m, gemm_precision p, double floor,
                              double floor_bf16) {
    for (const attn_backend *const *b = attn_backends(); *b; b++)
        for (const char *const *set = m->sets; *set; set++)
            fam_check_golden(m, *set, (*b)->name, p,
                             (*b)->precision == ATTN_PREC_BF16 ? floor_bf16 : floor);
}

void fam_golden_int8(const fam_model *m, const char *set, double floor) {
    golden_set g = fam_load_golden(m, set);
    float *i8 = fam_embed_all(m->dir, &g, "naive", GEMM_INT8, m->threads, NULL);
    if (i8) {
        float *f32 = fam_embed_all(m->dir, &g, "naive", GEMM_FP32, m->threads, NULL);
        double lo = 1.0;
        for (int i = 0; i < g.n; i++) {
            const double c = golden_cosine(i8 + (size_t)i * g.dim, f32 + (size_t)i * g.dim, g.dim);
            cr_expect_geq(c, floor, "int8: input %d: cosine vs fp32 %.6f", i, c);
            lo = fmin(lo, c);
        }
        char label[64];
        snprintf(label, sizeof label, "%s int8", m->family);
        const double lo_torch = fam_check_against(&g, i8, label, floor);
        fprintf(stderr, "%s int8: lowest cosine vs fp32 %.6f, vs PyTorch %.6f\n", m->family, lo,
                lo_torch);
        free(f32);
    }
    free(i8);
    golden_set_free(&g);
}

double fam_best_cosine(const fam_model *m, const char *set, const char *dir, int min_len) {
    golden_set g = fam_load_golden(m, set);
    float *out = fam_embed_all(dir, &g, "naive", GEMM_FP32, 1, NULL);
    cr_assert_not_null(out);
    double hi = -1.0;
    for (int i = 0; i < g.n; i++)
        if (g.len[i] > min_len)
            hi = fmax(hi, golden_cosine(out + (size_t)i * g.dim, g.emb[i], g.dim));
    free(out);
    golden_set_free(&g);
    return hi;
}

void fam_expect_off_floor(const fam_model *m, const char *set, const char *dir, int min_len,
                          double floor, const char *what) {
    const double hi = fam_best_cosine(m, set, dir, min_len);
    fprintf(stderr, "%s %s: inputs reach cosine %.6f at most\n", m->family, what, hi);
    cr_assert_lt(hi, floor);
}

double fam_best_cosine_each(encoder *e, const attn_backend *be, const golden_set *g, int max_tokens,
                            int min_len) {
    encoder_workspace *ws = NULL;
    char err[512] = "";
    cr_assert_eq(encoder_workspace_create(e, max_tokens, 1, &be, 1, &ws, err, sizeof err), BERT_OK,
                 "%s", err);
    float *out = malloc((size_t)g->dim * sizeof *out);
    double hi = -1.0;
    for (int i = 0; i < g->n; i++) {
        const int32_t cu[2] = {0, g->len[i]};
        cr_assert_eq(encoder_forward(e, ws, be, &attn_parallel_serial, g->ids[i], NULL, cu, 1, out,
                                     err, sizeof err),
                     BERT_OK, "%s", err);
        if (g->len[i] > min_len)
            hi = fmax(hi, golden_cosine(out, g->emb[i], g->dim));
    }
    free(out);
    encoder_workspace_free(ws);
    return hi;
}

void fam_check_token_ids(const char *dir, const golden_set *g, int capacity) {
    tok_tokenizer *t = NULL;
    char err[512] = "";
    cr_assert_eq(tok_load(&t, dir, err, sizeof err), 0, "%s", err);
    int32_t *ids = malloc((size_t)capacity * sizeof *ids);
    tok_output o = {.ids = ids, .capacity = capacity};
    for (int i = 0; i < g->n; i++) {
        cr_assert_eq(tok_encode(t, g->text[i], g->text_len[i], 1, &o), 0, "input %d", i);
        cr_expect(o.n == g->len[i] && memcmp(ids, g->ids[i], (size_t)o.n * sizeof *ids) == 0,
                  "input %d: %d ids differ from the golden's %d", i, o.n, g->len[i]);
    }
    free(ids);
    tok_free(t);
}

void fam_tokenizer_gives_the_golden_ids(const fam_model *m, const char *set) {
    golden_set g = fam_load_golden(m, set);
    fam_check_token_ids(m->dir, &g, 512);
    golden_set_free(&g);
}

void fam_expect_backend_refused(const char *dir, const attn_backend *old, const char *want) {
    encoder *e = NULL;
    char err[512] = "";
    cr_assert_eq(encoder_load(dir, GEMM_FP32, &e, err, sizeof err), BERT_OK, "%s", err);
    const attn_backend *be = old;
    encoder_workspace *ws = NULL;
    cr_assert_eq(encoder_workspace_create(e, 64, 1, &be, 1, &ws, err, sizeof err),
                 BERT_EUNSUPPORTED);
    cr_assert(strstr(err, "old") && strstr(err, want), "%s", err);
    encoder_free(e);
}

/* family_golden.c — the family model tests' shared steps (family_golden.h). */
#include "family_golden.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "model/bert_config.h"
#include "model/encoder.h"

double fam_cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

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
        const double c = fam_cosine(out + (size_t)i * g->dim, g->emb[i], g->dim);
        cr_expect_geq(c, floor, "%s: input %d (%d tokens): cosine 1 - %.3g", label, i, g->len[i],
                      1.0 - c);
        lo = fmin(lo, c);
    }
    fprintf(stderr, "golden %s: %d inputs: min cosine 1 - %.2g (floor 1 - %.2g)\n", label, g->n,
            1.0 - lo, 1.0 - floor);
    return lo;
}

void fam_copy_model(const char *src, char *dir) {
    char cmd[512];
    strcpy(dir, "/tmp/attn-family-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp -r %s/. %s/", src, dir);
    cr_assert_eq(system(cmd), 0);
}

void fam_remove_model(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

void fam_fill_tensor(const char *dir, const char *name, int one) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    uint64_t hlen = 0;
    cr_assert_eq(fread(&hlen, 8, 1, f), 1);
    char *h = calloc(hlen + 1, 1);
    cr_assert_eq(fread(h, 1, hlen, f), hlen);
    json_t *j = json_loads(h, 0, NULL);
    cr_assert_not_null(j);
    const json_t *t = json_object_get(j, name);
    const json_t *off = json_object_get(t, "data_offsets");
    const char *dtype = json_string_value(json_object_get(t, "dtype"));
    cr_assert(json_array_size(off) == 2 && dtype, "%s has no %s", path, name);
    /* 1.0 in each dtype, little-endian; 0.0 is all zero bytes in all. */
    const unsigned char f32[4] = {0, 0, 0x80, 0x3f}, f16[2] = {0, 0x3c}, b16[2] = {0x80, 0x3f};
    const unsigned char *v = !strcmp(dtype, "F32") ? f32 : !strcmp(dtype, "F16") ? f16 : b16;
    const int width = !strcmp(dtype, "F32") ? 4 : 2;
    cr_assert(!strcmp(dtype, "F32") || !strcmp(dtype, "F16") || !strcmp(dtype, "BF16"), "%s: %s",
              name, dtype);
    const long lo = (long)json_integer_value(json_array_get(off, 0));
    const long hi = (long)json_integer_value(json_array_get(off, 1));
    cr_assert_eq(fseek(f, 8 + (long)hlen + lo, SEEK_SET), 0);
    for (long i = lo; i < hi; i++)
        cr_assert_neq(fputc(one ? v[(i - lo) % width] : 0, f), EOF);
    fclose(f);
    json_decref(j);
    free(h);
}

void fam_edit_json(const char *dir, const char *rel, const char *key, const char *value) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    json_t *j = json_load_file(path, 0, NULL);
    cr_assert_not_null(j, "%s", path);
    json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
    cr_assert_not_null(v, "%s", value);
    json_object_set_new(j, key, v);
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

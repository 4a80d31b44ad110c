/* test_model_dtypes.c — weight loading on a tiny BERT written by the test.
 *
 * The same weights, chosen exactly representable in F16 and BF16, are saved
 * as F32 (aligned: used in place), F32 misaligned (copied), F16 and BF16
 * (converted). All four must give bit-identical embeddings, which checks the
 * conversions and the in-place/copied paths without a reference model. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "model/bert.h"
#include "model_variant.h"

enum { V = 40, C = 32, L = 2, H = 4, F = 64, P = 16, TT = 2 };

typedef enum { AS_F32, AS_F32_MISALIGNED, AS_F16, AS_BF16 } layout;

static char dir[64];

/* k/256 for |k| <= 127 (7 significant bits) is exact in F16 and BF16; so is
 * 1 + k/128 for the LayerNorm gains. */
static float weight_value(uint64_t *s, int gain) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    const int k = (int)((*s >> 33) % 255) - 127;
    return gain ? 1.0f + (float)(k / 2) / 128.0f : (float)k / 256.0f;
}

static uint16_t to_f16(float f) {
    /* Exact for the values above: normal halves with 10 mantissa bits. */
    uint32_t b;
    memcpy(&b, &f, 4);
    const uint32_t sign = (b >> 16) & 0x8000u;
    if ((b & 0x7fffffffu) == 0)
        return (uint16_t)sign;
    const int exp = (int)((b >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (uint32_t)exp << 10 | (b & 0x7fffffu) >> 13);
}

typedef struct {
    char name[96];
    int rows, cols; /* cols 0: a vector */
    int gain;
} tensor_spec;

static int specs(tensor_spec *t) {
    int n = 0;
#define ADD(r, c, g, ...)                                                                          \
    (snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__), t[n].rows = (r), t[n].cols = (c),         \
     t[n].gain = (g), n++)
    ADD(V, C, 0, "embeddings.word_embeddings.weight");
    ADD(P, C, 0, "embeddings.position_embeddings.weight");
    ADD(TT, C, 0, "embeddings.token_type_embeddings.weight");
    ADD(C, 0, 1, "embeddings.LayerNorm.weight");
    ADD(C, 0, 0, "embeddings.LayerNorm.bias");
    for (int l = 0; l < L; l++) {
        const char *p = "encoder.layer";
        ADD(C, C, 0, "%s.%d.attention.self.query.weight", p, l);
        ADD(C, 0, 0, "%s.%d.attention.self.query.bias", p, l);
        ADD(C, C, 0, "%s.%d.attention.self.key.weight", p, l);
        ADD(C, 0, 0, "%s.%d.attention.self.key.bias", p, l);
        ADD(C, C, 0, "%s.%d.attention.self.value.weight", p, l);
        ADD(C, 0, 0, "%s.%d.attention.self.value.bias", p, l);
        ADD(C, C, 0, "%s.%d.attention.output.dense.weight", p, l);
        ADD(C, 0, 0, "%s.%d.attention.output.dense.bias", p, l);
        ADD(C, 0, 1, "%s.%d.attention.output.LayerNorm.weight", p, l);
        ADD(C, 0, 0, "%s.%d.attention.output.LayerNorm.bias", p, l);
        ADD(F, C, 0, "%s.%d.intermediate.dense.weight", p, l);
        ADD(F, 0, 0, "%s.%d.intermediate.dense.bias", p, l);
        ADD(C, F, 0, "%s.%d.output.dense.weight", p, l);
        ADD(C, 0, 0, "%s.%d.output.dense.bias", p, l);
        ADD(C, 0, 1, "%s.%d.output.LayerNorm.weight", p, l);
        ADD(C, 0, 0, "%s.%d.output.LayerNorm.bias", p, l);
    }
#undef ADD
    return n;
}

/* Writes the tiny model into dir with its weights laid out as `how`. */
static void write_model(layout how) {
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"bert\",\"hidden_act\":\"gelu\",\"vocab_size\":%d,"
             "\"hidden_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
             "\"intermediate_size\":%d,\"max_position_embeddings\":%d,\"type_vocab_size\":%d,"
             "\"layer_norm_eps\":1e-12}",
             V, C, L, H, F, P, TT);
    variant_write(dir, "config.json", cfg);
    variant_write(
        dir, "modules.json",
        "[{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
        "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
        "{\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}]");
    variant_write(dir, "1_Pooling/config.json", "{\"pooling_mode_mean_tokens\": true}");

    tensor_spec t[8 + 16 * L];
    const int n = specs(t);
    const char *dtype = how == AS_F16 ? "F16" : how == AS_BF16 ? "BF16" : "F32";
    const size_t esize = how == AS_F16 || how == AS_BF16 ? 2 : 4;
    json_t *hdr = json_object();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const size_t bytes = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1) * esize;
        json_t *shape =
            t[i].cols ? json_pack("[ii]", t[i].rows, t[i].cols) : json_pack("[i]", t[i].rows);
        json_object_set_new(hdr, t[i].name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    /* Pad the header with spaces so the data starts 4-aligned, or, for the
     * misaligned layout, 2 bytes past alignment. */
    size_t hlen = strlen(text);
    const size_t want = how == AS_F32_MISALIGNED ? 2 : 0;
    while ((8 + hlen) % 4 != want)
        hlen++;

    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    for (int i = 0; i < 8; i++)
        fputc((int)((hlen >> (8 * i)) & 0xff), f);
    fputs(text, f);
    for (size_t i = strlen(text); i < hlen; i++)
        fputc(' ', f);
    free(text);
    uint64_t seed = 42;
    for (int i = 0; i < n; i++) {
        const size_t count = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1);
        for (size_t j = 0; j < count; j++) {
            const float v = weight_value(&seed, t[i].gain);
            uint32_t bits;
            memcpy(&bits, &v, 4);
            uint16_t h = how == AS_F16 ? to_f16(v) : (uint16_t)(bits >> 16);
            if (esize == 4)
                fwrite(&v, 4, 1, f);
            else
                fwrite(&h, 2, 1, f);
        }
    }
    fclose(f);
}

static void setup(void) {
    strcpy(dir, "/tmp/attn-tiny-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/1_Pooling", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Embeds three sequences with the model as laid out by how. */
static void embed(layout how, float out[3 * C], size_t *owned) {
    write_model(how);
    bert_model *m;
    char err[512] = "";
    cr_assert_eq(bert_load(dir, &m, err, sizeof err), BERT_OK, "%s", err);
    *owned = bert_owned_bytes(m);
    const attn_backend *b = attn_backend_find("naive");
    bert_workspace *ws;
    cr_assert_eq(bert_workspace_create(m, 32, 1, &b, 1, &ws, err, sizeof err), BERT_OK, "%s", err);
    const int32_t ids[] = {1, 5, 9, 2, 1, 39, 2, 1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 2};
    const int32_t cu[] = {0, 4, 7, 18};
    cr_assert_eq(bert_forward(m, ws, b, &attn_parallel_serial, ids, cu, 3, out, err, sizeof err),
                 BERT_OK, "%s", err);
    bert_workspace_free(ws);
    bert_free(m);
}

TestSuite(model_dtypes, .init = setup, .fini = teardown);

/* What fp32 packing owns for one linear layer (N, K) on the path in force:
 * a packed copy where AVX-512 runs, nothing elsewhere. */
static size_t packed_bytes(int N, int K) {
    float *w = calloc((size_t)N * K, sizeof *w);
    cr_assert_not_null(w);
    gemm_weights *g;
    char err[256] = "";
    cr_assert_eq(gemm_pack(GEMM_FP32, w, NULL, N, K, &g, err, sizeof err), 0, "%s", err);
    const size_t bytes = gemm_weights_bytes(g);
    gemm_free(g);
    free(w);
    return bytes;
}

Test(model_dtypes, every_layout_gives_identical_vectors) {
    float ref[3 * C], got[3 * C];
    size_t owned_ref, owned;
    embed(AS_F32, ref, &owned_ref);
    /* In place: only the stacked QKV projections are owned, and whatever
     * the linear layers pack. */
    const size_t packed =
        packed_bytes(3 * C, C) + packed_bytes(C, C) + packed_bytes(F, C) + packed_bytes(C, F);
    cr_assert_eq(owned_ref, (size_t)L * ((3 * C * C + 3 * C) * sizeof(float) + packed));
    double norm = 0;
    for (int i = 0; i < C; i++)
        norm += (double)ref[i] * ref[i];
    cr_assert_float_eq(norm, 1.0, 1e-5, "the tiny model normalises");

    static const layout others[] = {AS_F32_MISALIGNED, AS_F16, AS_BF16};
    static const char *const names[] = {"misaligned F32", "F16", "BF16"};
    for (int k = 0; k < 3; k++) {
        embed(others[k], got, &owned);
        cr_assert_gt(owned, owned_ref, "%s weights must be copied", names[k]);
        cr_assert_eq(memcmp(ref, got, sizeof ref), 0, "%s weights give different vectors",
                     names[k]);
    }
}

Test(model_dtypes, integer_weights_are_refused) {
    write_model(AS_F32);
    /* Relabel the first tensor (word embeddings, V×C F32) as I32: same size,
     * still a valid file, but not weights. */
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    char buf[256];
    cr_assert_eq(fread(buf, 1, sizeof buf, f), sizeof buf);
    char *d = strstr(buf + 8, "\"F32\"");
    cr_assert_not_null(d);
    fseek(f, d - buf + 1, SEEK_SET);
    fwrite("I32", 1, 3, f);
    fclose(f);
    bert_model *m = NULL;
    char err[512] = "";
    cr_assert_eq(bert_load(dir, &m, err, sizeof err), BERT_EUNSUPPORTED, "%s", err);
    cr_assert_not_null(strstr(err, "dtype I32"), "%s", err);
}

Test(model_dtypes, truncated_weights_are_a_format_error) {
    write_model(AS_F16);
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(truncate(path, sb.st_size - 1), 0);
    bert_model *m = NULL;
    char err[512] = "";
    cr_assert_eq(bert_load(dir, &m, err, sizeof err), BERT_EFORMAT, "%s", err);
    cr_assert_not_null(strstr(err, "model.safetensors"), "%s", err);
}

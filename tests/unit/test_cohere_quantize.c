/* test_cohere_quantize.c — Cohere's quantized embedding types (cohere_embed.h)
 * against sentence-transformers' quantize_embeddings: the same float32
 * vectors (tests/golden/quantized.json.gz, made by make_quantized.py with
 * ranges [-1, 1]) must give the same int8, uint8, binary and ubinary values,
 * every one of them: the buckets are computed in the same float32
 * arithmetic, so there is no tolerance to allow. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "server/api/cohere_embed.h"
#include "tests/golden/golden_io.h"

#define QUANTIZED "tests/golden/quantized.json.gz"

/* Compares out[0, n) with the golden array arr of case i's precision. */
static void expect(const json_t *arr, const int *out, size_t n, size_t i, const char *precision) {
    cr_assert_eq(json_array_size(arr), n, "case %zu %s: %zu values, want %zu", i, precision, n,
                 json_array_size(arr));
    for (size_t k = 0; k < n; k++)
        cr_assert_eq(out[k], (int)json_integer_value(json_array_get(arr, k)),
                     "case %zu %s[%zu]: %d, sentence-transformers %d", i, precision, k, out[k],
                     (int)json_integer_value(json_array_get(arr, k)));
}

Test(cohere_quantize, equals_sentence_transformers) {
    json_error_t e;
    json_t *root = golden_load_json(QUANTIZED, JSON_ALLOW_NUL, &e);
    cr_assert(root, "%s: %s", QUANTIZED, e.text);
    const json_t *range = json_object_get(root, "ranges");
    cr_assert(json_real_value(json_array_get(range, 0)) == -1.0 &&
                  json_real_value(json_array_get(range, 1)) == 1.0,
              "the golden file was made with other ranges");
    const json_t *cases = json_object_get(root, "cases");
    cr_assert(json_array_size(cases) > 10);
    size_t values = 0, nonzero_bits = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i), *fl = json_object_get(c, "float");
        const size_t d = json_array_size(fl), nb = (d + 7) / 8;
        float *v = malloc(d * sizeof *v);
        uint8_t *u = malloc(d);
        int *out = malloc(d * sizeof *out);
        cr_assert(v && u && out);
        for (size_t k = 0; k < d; k++)
            v[k] = (float)json_real_value(json_array_get(fl, k));
        cohere_quantize_uint8(v, d, u);
        for (size_t k = 0; k < d; k++)
            out[k] = u[k];
        expect(json_object_get(c, "uint8"), out, d, i, "uint8");
        cohere_quantize_int8(v, d, (int8_t *)u);
        for (size_t k = 0; k < d; k++)
            out[k] = ((int8_t *)u)[k];
        expect(json_object_get(c, "int8"), out, d, i, "int8");
        cohere_pack_ubinary(v, d, u);
        for (size_t k = 0; k < nb; k++)
            nonzero_bits += (out[k] = u[k]) != 0;
        expect(json_object_get(c, "ubinary"), out, nb, i, "ubinary");
        cohere_pack_binary(v, d, (int8_t *)u);
        for (size_t k = 0; k < nb; k++)
            out[k] = ((int8_t *)u)[k];
        expect(json_object_get(c, "binary"), out, nb, i, "binary");
        values += d;
        free(v);
        free(u);
        free(out);
    }
    cr_assert(values > 10000 && nonzero_bits > 0);
    json_decref(root);
}

/* The edges of the ranges, as numpy computes them in float32: -1 is bucket
 * 0, and 1 is 254 (2 / (2 / 255) rounds just below 255), beyond it 255;
 * a length that is not a multiple of 8 pads its last byte with zero bits. */
Test(cohere_quantize, edges) {
    const float v[] = {-1.0f, 1.0f, 2.0f, -3.0f, 0.0f, 1e-9f, -1e-9f, 0.5f, 0.25f, -0.5f};
    uint8_t u[10];
    int8_t s[10];
    cohere_quantize_uint8(v, 10, u);
    cr_assert_eq(u[0], 0);
    cr_assert_eq(u[1], 254);
    cr_assert_eq(u[2], 255);
    cr_assert_eq(u[3], 0);
    cr_assert_eq(u[4], 127); /* floor(1 / (2 / 255)) */
    cr_assert_eq(u[7], 191);
    cr_assert_eq(u[9], 63);
    cohere_quantize_int8(v, 10, s);
    cr_assert_eq(s[0], -128);
    cr_assert_eq(s[1], 126);
    cr_assert_eq(s[2], 127);
    cr_assert_eq(s[4], -1);
    cohere_pack_ubinary(v, 10, u);
    /* > 0: 0 1 1 0 0 1 0 1 | 1 0 (then six zero bits) */
    cr_assert_eq(u[0], 0x65);
    cr_assert_eq(u[1], 0x80);
    cohere_pack_binary(v, 10, s);
    cr_assert_eq(s[0], 0x65 - 128);
    cr_assert_eq(s[1], 0);
}

/* position.c — the position scheme's shared pieces (position.h). */
#include "position.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

int enc_pos_bucket(int32_t rel, const enc_pos_buckets *b) {
    const int half = b->num_buckets / 2, exact = half / 2;
    /* n = query − key: keys before the query (n > 0) take the lower half. */
    const int64_t n = -(int64_t)rel;
    const int base = n < 0 ? half : 0;
    const int64_t a = n < 0 ? -n : n;
    if (a < exact)
        return base + (int)a;
    /* transformers computes the logarithm in float32; the unit test holds
     * this double form to its buckets, distance by distance, past 1,000. */
    const double v = log((double)a / exact) / log((double)b->max_distance / exact) * (half - exact);
    const int64_t large = exact + (int64_t)v;
    return base + (int)(large < half - 1 ? large : half - 1);
}

void enc_pos_bucket_bias(const enc_pos_buckets *b, const float *table, int heads, int32_t span,
                         float *out) {
    const size_t row = 2 * (size_t)span - 1;
    for (int32_t x = -(span - 1); x <= span - 1; x++) { /* x = query − key */
        const int k = enc_pos_bucket(-x, b);
        for (int h = 0; h < heads; h++)
            out[(size_t)h * row + (size_t)(span - 1 + x)] = table[(size_t)k * heads + h];
    }
}

const char *enc_pos_attn_name(enc_pos_attn kind) {
    return kind == ENC_POS_ATTN_BUCKETS ? "relative buckets" : "none";
}

int enc_rope_init(enc_rope *r, double theta, int32_t positions, int32_t dim) {
    const size_t half = (size_t)dim / 2, n = (size_t)positions * half;
    *r = (enc_rope){.theta = theta, .positions = positions, .dim = dim};
    r->cos = malloc(n * sizeof(float));
    r->sin = malloc(n * sizeof(float));
    if (!r->cos || !r->sin) {
        enc_rope_free(r);
        return -1;
    }
    for (size_t i = 0; i < half; i++) {
        const double inv = 1.0 / pow(theta, (double)(2 * i) / dim);
        for (int32_t p = 0; p < positions; p++) {
            const double a = (double)p * inv;
            r->cos[(size_t)p * half + i] = (float)cos(a);
            r->sin[(size_t)p * half + i] = (float)sin(a);
        }
    }
    return 0;
}

void enc_rope_free(enc_rope *r) {
    free(r->cos);
    free(r->sin);
    r->cos = r->sin = NULL;
}

void enc_rope_apply(const enc_rope *r, float *v, int heads, int32_t pos) {
    const int half = r->dim / 2;
    const float *c = r->cos + (size_t)pos * half, *s = r->sin + (size_t)pos * half;
    for (int h = 0; h < heads; h++) {
        float *x = v + (size_t)h * r->dim;
        for (int i = 0; i < half; i++) {
            const float x1 = x[i], x2 = x[i + half];
            x[i] = x1 * c[i] - x2 * s[i];
            x[i + half] = x2 * c[i] + x1 * s[i];
        }
    }
}

const char *enc_pos_scheme_name(int absolute, enc_pos_attn attn, int rope) {
    if (rope)
        return "rope";
    if (attn == ENC_POS_ATTN_BUCKETS)
        return absolute ? "absolute + relative buckets" : "relative buckets";
    return "absolute";
}

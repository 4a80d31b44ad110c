/* position.c — the position scheme's shared pieces (position.h). */
#include "position.h"

#include <math.h>
#include <stddef.h>

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

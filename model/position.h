/* position.h — the position scheme, one of the building blocks a family's
 * loader composes from config.json: where an encoder learns token order.
 *
 * Two parts, each independent of the other:
 *   - absolute: a learned table of rows added at the embeddings (BERT,
 *     RoBERTa, MPNet), numbered from an offset (position_offset and
 *     position_pad_id in bert_config);
 *   - what attention adds (enc_pos_attn): nothing, or a bias on every score
 *     that depends on the distance key − query alone. MPNet's learned
 *     T5-style buckets are one; ALiBi (a slope per head times the distance)
 *     fills the same per-distance vector;
 *   - RoPE: Q and K rotated by their token's position before the scores
 *     (ModernBERT, Qwen3, Gemma3), in the fused projection buffer, with
 *     cos/sin tables made once at load (enc_rope below).
 * The bias reaches the attention backends as kernels/attention.h's
 * per-head, per-distance vector (rel_bias, rel_span), filled once at load:
 * O(heads × positions) floats, never a matrix per sequence. */
#ifndef MODEL_POSITION_H
#define MODEL_POSITION_H

#include <stdint.h>

typedef enum enc_pos_attn {
    ENC_POS_ATTN_NONE,    /* attention sees positions only through the embeddings */
    ENC_POS_ATTN_BUCKETS, /* a learned bias per head and bucket of the distance (MPNet, T5) */
} enc_pos_attn;

typedef struct enc_pos_buckets {
    int num_buckets;  /* both directions together: half for keys before the query */
    int max_distance; /* distances from here on share the last bucket */
} enc_pos_buckets;

/* The bucket of relative position rel = key − query, as transformers'
 * MPNetEncoder.relative_position_bucket (bidirectional, T5's): keys after
 * the query in the upper half; distances below num_buckets/4 exact, then
 * logarithmic up to max_distance, then the half's last bucket. */
int enc_pos_bucket(int32_t rel, const enc_pos_buckets *b);

/* out[h·(2·span − 1) + span − 1 + i − j] = table[bucket(j − i)·heads + h]
 * for every distance |i − j| < span: the attention contract's rel_bias
 * vector from a learned table of num_buckets rows of heads floats (as
 * PyTorch stores nn.Embedding(num_buckets, heads)). */
void enc_pos_bucket_bias(const enc_pos_buckets *b, const float *table, int heads, int32_t span,
                         float *out);

/* A name for logs and refusals: "none", "relative buckets". */
const char *enc_pos_attn_name(enc_pos_attn kind);

/* RoPE's tables for one base θ: cos and sin of p · θ^(−2i/D) for every
 * position p < positions and i < D/2, [positions][D/2] each: O(positions ·
 * D/2) floats per distinct θ, however many layers share it. The angle
 * p · θ^(−2i/D) is formed in double and its cos and sin rounded once:
 * transformers forms it in float32, which is off by up to p · 2⁻²⁴ radians
 * at position p (below 1e-6 in the tiny checkpoints' vectors, 7e-7 measured
 * on the ModernBERT golden); the golden references compute it in float64. */
typedef struct enc_rope {
    double theta;
    int32_t positions, dim;
    float *cos, *sin;
} enc_rope;

/* Fills r for θ, positions and an even head size dim. 0, or -1 when out
 * of memory (r then holds nothing to free). */
int enc_rope_init(enc_rope *r, double theta, int32_t positions, int32_t dim);
void enc_rope_free(enc_rope *r);

/* Rotates heads vectors of r->dim floats at v (consecutive) for position
 * pos < r->positions, rotate-half as transformers' apply_rotary_pos_emb:
 * v[i], v[i + D/2] ← v[i]·cos − v[i + D/2]·sin, v[i + D/2]·cos + v[i]·sin. */
void enc_rope_apply(const enc_rope *r, float *v, int heads, int32_t pos);

/* The position scheme as /info names it: "absolute" (a learned table),
 * "absolute + relative buckets" (MPNet), "rope". */
const char *enc_pos_scheme_name(int absolute, enc_pos_attn attn, int rope);

#endif

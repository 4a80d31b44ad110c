/* bert_impl.h — what the encoder's two halves share: the weights as the
 * loader arranges them (bert.c: binding, packing, calibration, compaction)
 * and the workspace the forward runs in (bert_forward.c). Internal to
 * model/; everything else goes through bert.h. */
#ifndef MODEL_BERT_IMPL_H
#define MODEL_BERT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model/bert.h"
#include "model/blocks.h"
#include "model/position.h"
#include "model/safetensors.h"

/* Shapes below: QN = (H + 2·Hkv)·D the fused projection's width (3C for
 * BERT), AO = H·D attention's output width, G = 2 for a gated MLP, else 1.
 * A bias or norm a family lacks is NULL. */
typedef struct bert_layer {
    const float *qkv_w;     /* (QN, C): rows of W_q, then W_k, then W_v */
    const float *qkv_b;     /* (QN) */
    const float *attn_o_w;  /* (C, AO) */
    const float *attn_o_b;  /* (C) */
    const float *ln1_w;     /* (C) post-norm: after attention; pre-norm: attention's input */
    const float *ln1_b;     /* (C) */
    const float *ffn_in_w;  /* (G·F, C) */
    const float *ffn_in_b;  /* (G·F) */
    const float *ffn_out_w; /* (C, F) */
    const float *ffn_out_b; /* (C) */
    const float *ln2_w;     /* (C) post-norm: after the FFN; pre-norm: the FFN's input */
    const float *ln2_b;     /* (C) */
    const float *q_norm_w;  /* (D) qk_norm: each Q head's norm */
    const float *k_norm_w;  /* (D) each K head's */
    const float *ln1p_w;    /* (C) post_norms: attention's output, before the residual add */
    const float *ln2p_w;    /* (C) post_norms: the FFN's output */
    /* The four linear layers packed for the model's precision from the
     * tensors above (which fp32 keeps reading; the others copy). */
    gemm_weights *qkv, *attn_o, *ffn_in, *ffn_out;
} bert_layer;

struct bert_model {
    bert_config cfg;
    gemm_precision precision;
    /* Each kind of linear layer's precision; precision is the lowest of them
     * (the enum runs from the most precise). */
    bert_plan plan;
    st_file *file;         /* the mapping most weights point into */
    const float *wte;      /* (V, C) word embeddings */
    const float *wpe;      /* (P + position_offset, C) position embeddings */
    const float *wtt;      /* (type_vocab_size, C) token type embeddings; NULL without */
    const float *emb_ln_w; /* (C) */
    const float *emb_ln_b; /* (C) */
    const float *final_w;  /* (C) pre-norm: the norm after the last layer */
    const float *final_b;  /* (C) */
    bert_layer *layers;    /* [L] */
    /* A LayerNorm without a bias adds these (C) zeros: the one LayerNorm
     * kernel takes a bias. */
    float *zeros;
    /* RoPE's tables (position.h): [0] the full-attention layers' θ, [1] the
     * sliding-window layers' (the same table when both θ agree). */
    enc_rope rope[2];
    size_t rope_floats;
    /* Relative position buckets: the table as the file has it (num_buckets,
     * H), and the attention contract's per-distance vector made from it at
     * load, [H][2·P − 1] (rel_span P = max_positions), always owned. */
    const float *rel_table;
    float *rel_bias;
    size_t rel_bias_floats;
    float *owned; /* [owned_floats]: stacked QKV and converted tensors */
    size_t owned_floats;
    /* Reduced precisions: the embedding tables in bf16 (wte, wpe above are
     * then NULL), one allocation of emb16_count halves; the mapping is
     * closed and owned holds only the LayerNorm and token-type vectors. */
    uint16_t *emb16;
    size_t emb16_count;
    const uint16_t *wte16; /* (V, C) */
    const uint16_t *wpe16; /* (P + position_offset, C) */
    size_t packed_bytes;   /* what the packed linear layers own */
    /* The classifier head and the Dense modules, always fp32 and always
     * owned (one allocation of extra_floats), as a reduced precision closes
     * the mapping: they run once per sequence, not per token. */
    float *extra;
    size_t extra_floats;
    const float *head_w1, *head_b1;     /* (C, C), (C): pooler / classifier.dense */
    const float *head_w2, *head_b2;     /* (N, C), (N): classifier / classifier.out_proj */
    const float *head_ln_w, *head_ln_b; /* (C): ModernBERT's head.norm (bias NULL without) */
    struct {
        const float *w, *b; /* (out, in), (out) or NULL without bias */
    } dense[BERT_MAX_DENSE];
    int scratch_dim; /* the widest vector pooling, Dense or a head produces */
};

struct bert_workspace {
    int max_tokens; /* T_max */
    int nthreads;
    int32_t *pos;  /* (T) position of each token within its sequence */
    float *x;      /* (T, C) residual stream */
    float *h;      /* (T, C) pre-norm: a sublayer's normalised input; NULL post-norm */
    float *qkv;    /* (T, QN) [Q | K | V] per token; overlaps ffn */
    float *att;    /* (T, AO) attention output, heads side by side; overlaps ffn */
    float *ffn;    /* (T, G·F) FFN hidden activations; overlaps qkv and att */
    void *attn_ws; /* [attn_bytes] attention backend scratch */
    size_t attn_bytes;
    void *gemm_ws; /* [gemm_bytes] the linear layers' scratch, one GEMM at a time */
    size_t gemm_bytes;
    float *vec; /* (nthreads, 2, scratch_dim) each worker's vectors for pooling,
                   Dense modules and the classifier head */
    void *mem;  /* the one allocation everything above is carved from */
    size_t bytes;
    int raw; /* pool without normalising (bert_workspace_set_raw) */
    /* Observation (bert_workspace_set_attn_tap, bert_workspace_stage_ns). */
    bert_attn_tap_fn tap;
    void *tap_ctx;
    int tap_layer;
    bert_stage_ns stages;
    /* Calibration (bert_load_plan with smoothing): when set, forward records
     * max |input| per channel of each GEMM, calib[(l·4 + which)·F + k]. */
    float *calib;
};

/* The widths of a layer's projections (see bert_layer). */
static inline int64_t qkv_rows(const bert_config *c) {
    return (int64_t)(c->num_heads + 2 * c->num_kv_heads) * c->head_dim;
}
static inline int64_t attn_width(const bert_config *c) {
    return (int64_t)c->num_heads * c->head_dim;
}
static inline int64_t ffn_rows(const bert_config *c) {
    return (enc_mlp_gated(c->mlp) ? 2 : 1) * (int64_t)c->intermediate_size;
}

/* Floats per (layer, GEMM) slot of the calibration record: the widest input. */
static inline int calib_stride(const bert_config *c) {
    const int a = (int)attn_width(c), w = c->intermediate_size > a ? c->intermediate_size : a;
    return w > c->hidden_size ? w : c->hidden_size;
}

/* Writes the printf-style message into err and returns code. */
int bert_fail(int code, char *err, size_t err_len, const char *fmt, ...);

#endif

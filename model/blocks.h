/* blocks.h — the norm and MLP building blocks a family's loader composes
 * from config.json, beside the position scheme (position.h).
 *
 * Norm: which normalisation and where it sits.
 *   - LayerNorm, with or without a bias (BERT's, ModernBERT's);
 *   - RMSNorm, x / rms(x) · w (Qwen3, Llama);
 *   - Gemma's RMSNorm, x / rms(x) · (1 + w), its weight stored as an offset
 *     from one.
 * A post-norm encoder (BERT) normalises x + sublayer(x), fused into the
 * GEMM epilogues (kernels/gemm.h); a pre-norm one normalises each sublayer's
 * input and adds its output to the residual stream unnormalised.
 *
 * MLP: the feed-forward block's shape.
 *   - GELU: W_out · gelu(W_in x), F hidden units (BERT);
 *   - gated (GeGLU, SwiGLU): W_in yields 2F per token, [a | g] in the order
 *     the checkpoint's tensors are stacked, and W_out reads act(a) · g.
 *     ModernBERT's fused Wi is [input | gate] with the activation on the
 *     input half; Qwen3's and Gemma's gate_proj / up_proj are stacked
 *     [gate | up] with the activation on the gate: both are act(first half)
 *     · second half. */
#ifndef MODEL_BLOCKS_H
#define MODEL_BLOCKS_H

#include <stddef.h>

typedef enum enc_norm {
    ENC_NORM_LAYER,     /* (x − mean) / sqrt(var + eps) · w + b */
    ENC_NORM_RMS,       /* x / sqrt(mean(x²) + eps) · w */
    ENC_NORM_RMS_GEMMA, /* x / sqrt(mean(x²) + eps) · (1 + w) */
} enc_norm;

typedef enum enc_mlp {
    ENC_MLP_GELU,       /* act(W_in x), erf GELU, fused into the GEMM epilogue */
    ENC_MLP_GEGLU,      /* erf gelu(a) · g */
    ENC_MLP_GEGLU_TANH, /* tanh-approximated gelu(a) · g (Gemma's gelu_pytorch_tanh) */
    ENC_MLP_SWIGLU,     /* silu(a) · g */
} enc_mlp;

/* y = norm(x) over one row of n floats (y may be x). LayerNorm is
 * kernels/gemm.h's gemm_layernorm_row, the one BERT's epilogues run, so b
 * is required (a zero vector for a LayerNorm without a bias); the RMS norms
 * take none (b ignored) and sum in double. */
void enc_norm_row(enc_norm kind, float *y, const float *x, const float *w, const float *b, int n,
                  float eps);

/* 1 for the gated kinds: W_in is 2F rows wide. */
int enc_mlp_gated(enc_mlp kind);

/* A gated MLP's activation over rows [0, rows) of h, each 2F floats at
 * stride ld: h[r][i] = act(h[r][i]) · h[r][F + i] for i < F, written over
 * the first half, which W_out then reads at the same stride. */
void enc_glu_rows(enc_mlp kind, float *h, size_t rows, int F, size_t ld);

/* Names for /info, logs and refusals: "layernorm", "rmsnorm",
 * "gemma rmsnorm"; "gelu", "geglu", "geglu (tanh)", "swiglu". */
const char *enc_norm_name(enc_norm kind);
const char *enc_mlp_name(enc_mlp kind);

#endif

/* cuda_kernels.h — the launchers of the CUDA engine's own kernels
 * (kernels.cu), callable from C. Every launcher enqueues on the stream it is
 * given, returns the launch's cudaError_t as an int (0: launched) and never
 * synchronises. Element types follow cuda_plan.h's cuda_dtype: "act" is the
 * activations' and weights' type, LayerNorm vectors and pooled vectors are
 * fp32. Shapes use bert.h's letters. */
#ifndef ENGINES_CUDA_KERNELS_H
#define ENGINES_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Attention kernel tiles, shared by both tensor-core kernels and by
 * cuda_attn_tiles' callers: BLOCK_M query rows per thread block (four warps
 * of 16 rows), keys consumed BLOCK_N at a time. */
#define CUDA_ATTN_BLOCK_M 64
#define CUDA_ATTN_BLOCK_N 64

typedef struct cuda_attn_args {
    const void *qkv;           /* act (T, 3C): [Q | K | V], head h at columns h·D */
    void *out;                 /* act (T, C) */
    const int32_t *cu_seqlens; /* device [B + 1] */
    const int32_t *tiles;      /* device [2·ntiles] from cuda_attn_tiles */
    int32_t ntiles;
    int32_t batch; /* B */
    int32_t heads, head_dim;
    float scale;
} cuda_attn_args;

/* x[t] = LayerNorm(wte[ids[t]] + wpe[pos[t]] + wtt[types[t]]) over C, in act. */
int cuda_embed_ln(int dtype, const int32_t *ids, const int32_t *types, const int32_t *pos,
                  const void *wte, const void *wpe, const void *wtt, const float *ln_w,
                  const float *ln_b, float eps, void *x, int32_t T, int32_t C, void *stream);

/* y[t] = LayerNorm(x[t]) over C, in act (x is the GEMM's output with the
 * bias and residual already added). */
int cuda_layernorm(int dtype, const void *x, const float *w, const float *b, float eps, void *y,
                   int32_t T, int32_t C, void *stream);

/* In place: x = GELU(x), the exact erf form BERT uses. */
int cuda_gelu(int dtype, void *x, int64_t n, void *stream);

/* FlashAttention-2-style varlen attention on tensor cores (act fp16 or bf16;
 * head_dim 32, 64 or 128): no padding, one thread block per (query tile,
 * head), online softmax in fp32. */
int cuda_flash_attention(int dtype, const cuda_attn_args *a, void *stream);
/* The same problem, same tiles and same arithmetic (fp32 accumulation,
 * probabilities rounded to act before P·V), with S, P and O held in
 * registers (mma.sync m16n8k16, ldmatrix, cp.async double-buffered K/V):
 * the `flash2` choice. Its shared memory never exceeds the flash kernel's,
 * so cuda_flash_smem_bytes and cuda_flash_prepare cover both. */
int cuda_flash2_attention(int dtype, const cuda_attn_args *a, void *stream);
/* The same problem in fp32 arithmetic, one warp per (token, head): the
 * fp32 engine's attention and the reference of the GPU self-test. */
int cuda_attention_ref(int dtype, const cuda_attn_args *a, int32_t T, void *stream);
/* Dynamic shared memory the flash kernel needs for head_dim (0: unsupported),
 * and the one-time opt-in above the default 48 KiB (both kernels'). */
int cuda_flash_smem_bytes(int head_dim);
int cuda_flash_prepare(void);

/* sentence-transformers' pooling modes, as model/bert.c's pool_seq computes
 * them (a classifier reads its first token: CUDA_POOL_CLS). */
enum {
    CUDA_POOL_MEAN,      /* the mean over the tokens */
    CUDA_POOL_CLS,       /* the first token */
    CUDA_POOL_MAX,       /* elementwise max over the tokens (fmaxf, from the first) */
    CUDA_POOL_MEAN_SQRT, /* the sum over the tokens / sqrt(tokens) */
    CUDA_POOL_LAST       /* the last token */
};

/* pooled[b] = the pooling (CUDA_POOL_*) of x over sequence b, then divided
 * by its L2 norm when normalize: fp32 (B, C). */
int cuda_pool(int dtype, const void *x, const int32_t *cu_seqlens, int32_t B, int32_t C, int mode,
              int normalize, float *pooled, void *stream);

/* In place, fp32 (B, n): each row divided by max(its L2 norm, 1e-12), as
 * model/bert.c's bert_l2_normalize (the Normalize module after Dense
 * modules). */
int cuda_l2_normalize(float *v, int32_t B, int32_t n, void *stream);

/* In place, fp32: v = tanh(v) (a Dense module's or a classifier head's
 * activation, after cuBLASLt's GEMM with its bias). */
int cuda_tanh_f32(float *v, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif

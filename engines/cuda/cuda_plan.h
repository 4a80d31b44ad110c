/* cuda_plan.h — the CUDA engine's host-side logic, in plain C.
 *
 * Everything the engine decides without a GPU lives here, so that it is
 * compiled by the C compiler, linked into the unit tests and checked on
 * machines that have no device: where each weight sits in the one device
 * allocation made at load, how large the one workspace allocation is for the
 * engine's bounds, how a packed varlen batch is cut into the attention
 * kernel's query tiles, the position ids of every token, the refusal of
 * models and machines the engine cannot serve, and the float conversions of
 * the weights. engines/cuda/cuda_engine.c does the CUDA calls and nothing
 * else that can be tested here.
 *
 * Shapes use bert.h's letters: T tokens, B sequences, C hidden size, H heads,
 * D = C/H head size, F FFN size, V vocabulary, P positions, L layers. */
#ifndef ENGINES_CUDA_PLAN_H
#define ENGINES_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "engines/cuda/cuda_kernels.h"
#include "kernels/gemm.h"
#include "model/bert_config.h"
#include "model/encoder.h"

/* Every device buffer starts on this boundary: cuBLASLt and the vector loads
 * of the kernels (16 bytes) are satisfied, and so is any 128-byte
 * transaction. */
#define CUDA_PLAN_ALIGN 256u

/* The element type of weights and activations on the device. Biases and
 * activations share it (cuBLASLt's bias takes the output's type); the
 * LayerNorm vectors are always fp32 (they are C floats per layer and the
 * normalisation is computed in fp32). */
typedef enum cuda_dtype { CUDA_DT_F32, CUDA_DT_F16, CUDA_DT_BF16 } cuda_dtype;

size_t cuda_dtype_size(cuda_dtype t);
const char *cuda_dtype_name(cuda_dtype t);

/* The `precision` setting on the engine: NULL for the ones it runs (fp32,
 * tf32, bf16, fp16), otherwise why not. */
const char *cuda_precision_unsupported(gemm_precision p);
/* The weights' and activations' type of a precision the engine runs: bf16
 * and fp16 store in half width (the same kernels, templated on the type);
 * fp32 and tf32 in fp32. */
cuda_dtype cuda_precision_dtype(gemm_precision p);
/* Whether the encoder's GEMMs compute with CUBLAS_COMPUTE_32F_FAST_TF32
 * (inputs rounded to TF32 on tensor cores, fp32 accumulation): tf32 only.
 * Attention (the fp32 kernel), LayerNorm and the fp32 GEMMs after pooling
 * stay true fp32 in every precision. */
int cuda_precision_tf32(gemm_precision p);

/* ---- weights: one device allocation, offsets in bytes ------------------------ */
typedef struct cuda_layer_offsets {
    size_t qkv_w, qkv_b;         /* (3C, C) rows Q then K then V, (3C) */
    size_t attn_o_w, attn_o_b;   /* (C, C), (C) */
    size_t ln1_w, ln1_b;         /* fp32 (C) */
    size_t ffn_in_w, ffn_in_b;   /* (F, C), (F) */
    size_t ffn_out_w, ffn_out_b; /* (C, F), (C) */
    size_t ln2_w, ln2_b;         /* fp32 (C) */
} cuda_layer_offsets;

/* What follows pooling, always fp32 as model/bert.c keeps it (it runs once
 * per sequence, not per token): a classifier head's two linear layers, or
 * the Dense modules in order. An offset is SIZE_MAX where there is no such
 * tensor (no head, fewer Dense modules, a Dense module without bias). */
typedef struct cuda_head_offsets {
    size_t w1, b1; /* (C, C), (C): bert.pooler.dense / classifier.dense */
    size_t w2, b2; /* (N, C), (N): classifier / classifier.out_proj */
    size_t dense_w[BERT_MAX_DENSE], dense_b[BERT_MAX_DENSE]; /* (out, in), (out) */
} cuda_head_offsets;

typedef struct cuda_weight_layout {
    cuda_dtype dtype;
    size_t wte;                 /* (V, C) */
    size_t wpe;                 /* (P + position_offset, C) */
    size_t wtt;                 /* (type_vocab_size, C): the token type table */
    size_t emb_ln_w, emb_ln_b;  /* fp32 (C) */
    cuda_layer_offsets *layers; /* [L], owned */
    int nlayers;
    cuda_head_offsets head; /* after the layers */
    size_t bytes;           /* the whole allocation */
} cuda_weight_layout;

/* Lays the model out in dtype. Returns 0, or -1 when out of host memory or
 * the sizes overflow (message in err). */
int cuda_weight_layout_make(const bert_config *c, cuda_dtype dtype, cuda_weight_layout *out,
                            char *err, size_t err_len);
void cuda_weight_layout_free(cuda_weight_layout *w);

/* ---- the workspace: one device allocation and one pinned host buffer ---------- */
typedef struct cuda_workspace_plan {
    int32_t max_tokens, max_seqs, max_tiles;
    /* Device, bytes from the start of the workspace. */
    size_t ids, types, pos; /* int32 (T_max) each */
    size_t cu_seqlens;      /* int32 (B_max + 1) */
    size_t tiles;           /* int32 2·max_tiles: (sequence, first query row) */
    /* The cudnn kernel's per-batch arrays (cuda_sdpa_arrays), for B_max
     * sequences: lengths int32 (B_max), ragged offsets int64 (B_max + 1)
     * into the QKV rows and into the output rows. */
    size_t sdpa_seq, sdpa_off_qkv, sdpa_off_o;
    size_t x;   /* act (T_max, C): residual stream */
    size_t qkv; /* act (T_max, 3C) */
    size_t att; /* act (T_max, C): attention output */
    size_t tmp; /* act (T_max, C): GEMM output before LayerNorm */
    size_t ffn; /* act (T_max, F) */
    /* fp32 (B_max, vec_dim) each: the pooled vectors, then the classifier
     * head or the Dense modules ping-pong between the two. */
    size_t pooled, pooled2;
    int32_t vec_dim; /* the widest vector: C, num_labels or a Dense module's out */
    size_t lt_ws;    /* cuBLASLt's scratch */
    size_t lt_ws_bytes;
    size_t device_bytes;
    /* Pinned host staging: ids, positions, cu_seqlens, tiles and the cudnn
     * arrays go up in one copy (laid out as on the device, from ids to
     * sdpa_off_o), the output vectors (B_max, output_dim) come back, and
     * the last hidden states (T_max, C) as fp32 when asked for (the
     * engine's hidden slot: TEI's /embed_all, a classifier's start-up
     * check). */
    size_t host_in_bytes; /* ids .. sdpa_off_o end; the output vectors start here */
    size_t host_hidden;   /* fp32 (T_max, C), after the output vectors */
    size_t host_bytes;    /* the whole pinned buffer */
} cuda_workspace_plan;

/* The workspace for batches of up to max_tokens tokens in max_seqs sequences
 * (max_seqs <= 0: max_tokens). Returns 0, or -1 for bounds outside
 * 1..INT32_MAX/4 or a size that overflows (message in err). */
int cuda_workspace_plan_make(const bert_config *c, cuda_dtype act, int32_t max_tokens,
                             int32_t max_seqs, cuda_workspace_plan *out, char *err, size_t err_len);

/* Most query tiles any batch within the bounds can have: every sequence
 * contributes ceil(len / BLOCK_M) tiles, at most T/BLOCK_M + B in all. */
int32_t cuda_attn_max_tiles(int32_t max_tokens, int32_t max_seqs);

/* ---- a batch ------------------------------------------------------------- */

/* Checks cu_seqlens[0..batch] (starts at 0, each sequence 1..max_len tokens,
 * total <= max_tokens, batch <= max_seqs). 0, or -1 with the reason. */
int cuda_check_batch(const int32_t *cu_seqlens, int32_t batch, int32_t max_len, int32_t max_tokens,
                     int32_t max_seqs, char *err, size_t err_len);

/* Fills tiles[2·i], tiles[2·i + 1] with (sequence, first query row relative
 * to the sequence) for each query tile of block_m rows, sequence by
 * sequence. Returns the tile count, or -1 when more than max_tiles. */
int32_t cuda_attn_tiles(const int32_t *cu_seqlens, int32_t batch, int32_t block_m, int32_t *tiles,
                        int32_t max_tiles);

/* Stages the token types of a batch of T tokens into dst: type_ids, or 0
 * for every token when type_ids is NULL (what the engine contract hands an
 * embedder). Returns 0, or -1 naming the first type outside
 * [0, type_vocab_size). */
int cuda_stage_types(const int32_t *type_ids, int32_t T, int32_t type_vocab_size, int32_t *dst,
                     char *err, size_t err_len);

/* Position ids of every token as model/bert.c numbers them: BERT counts
 * from 0 in each sequence; RoBERTa and XLM-R from position_pad_id + 1, with
 * a token equal to position_pad_id given position_pad_id itself. */
void cuda_positions(const bert_config *c, const int32_t *ids, const int32_t *cu_seqlens,
                    int32_t batch, int32_t *pos);

/* ---- refusals -------------------------------------------------------------- */

/* The score the engine gives a machine, from what cudaGetDeviceCount and
 * cudaGetDeviceProperties said: err != 0 (the runtime's error, e.g. no
 * driver) or count 0 is 0 with why naming the cause ("no CUDA device: " and
 * the runtime's message); a device below compute capability 8.0 (no bf16
 * tensor cores, which the attention kernel needs) is 0; otherwise 100, above
 * every CPU engine, so `auto` takes the GPU wherever one can run. */
int cuda_score_from(int err, const char *err_string, int count, int cc_major, int cc_minor,
                    const char *device_name, char *why, size_t why_len);

/* Whether the engine computes what info (encoder_describe's) describes:
 * every pooling mode model/bert.c computes (mean, cls, max,
 * mean_sqrt_len_tokens, lasttoken), Dense modules, Normalize and both
 * classifier heads are; a position bias in attention (MPNet's) and any
 * other pooling name are refused rather than answered with other vectors.
 * Returns 0, or -1 with why naming what is refused. Called by init before
 * any CUDA call, so it is reached, and tested, on machines without a
 * device. */
int cuda_refuse_model(const encoder_info *info, char *why, size_t why_len);

/* The pooling kernel's mode (cuda_kernels.h's CUDA_POOL_*) for a model: a
 * classifier reads its first token whatever the Pooling module says. */
int cuda_pool_mode(const bert_config *c);

/* Head sizes the attention kernel is compiled for. */
int cuda_head_dim_supported(int d);

/* ---- attention kernels ------------------------------------------------------- */

/* The `gpu_attention` engine option: which kernel computes attention in
 * fp16/bf16. AUTO times every kernel that passes its start-up check on the
 * model's own shape at start and keeps the fastest. */
typedef enum cuda_attn_choice {
    CUDA_ATTN_AUTO,
    CUDA_ATTN_FLASH,
    CUDA_ATTN_CUDNN,
    CUDA_ATTN_FLASH2
} cuda_attn_choice;

/* NULL or "" is AUTO; "auto", "flash", "cudnn", "flash2"; -1 for anything
 * else. */
int cuda_attn_choice_parse(const char *name);

/* The oldest cuDNN whose fused SDPA operation (one backend descriptor,
 * CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) takes per-sequence lengths,
 * which a packed varlen batch needs: 9.15.0 (the operation itself came in
 * 9.13.1, without them). */
#define CUDA_CUDNN_MIN_VERSION 91500

/* Whether cudnnGetVersion's value is one the cudnn kernel runs on: 0, or -1
 * with why naming both versions. */
int cuda_cudnn_version_check(size_t version, char *why, size_t why_len);

/* dlopens lib and resolves names[0, n) into fns (RTLD_NOW | RTLD_LOCAL).
 * Returns the handle, or NULL with why naming the library or the first
 * missing symbol with dlerror's text (nothing stays open). */
void *cuda_dl_open(const char *lib, const char *const *names, size_t n, void **fns, char *why,
                   size_t why_len);

/* What the cudnn kernel reads per batch, for a graph built for b_max
 * sequences: seq_len[b] the length of sequence b (0 past batch, so those
 * sequences compute nothing), and the ragged offsets in elements of each
 * sequence's first row, qkv_row (3C) and o_row (C) elements per token:
 * off_qkv[b] = cu[b]·qkv_row, off_o[b] = cu[b]·o_row, b <= b_max (cu[batch]
 * repeated past batch). */
void cuda_sdpa_arrays(const int32_t *cu_seqlens, int32_t batch, int32_t b_max, int64_t qkv_row,
                      int64_t o_row, int32_t *seq_len, int64_t *off_qkv, int64_t *off_o);

/* The batch the start-up check and the `auto` timing run attention on: up
 * to CUDA_PROBE_SEQS sequences of lengths cycling below max_len (the
 * longest min(max_len, 128), the shortest half that), within max_tokens
 * and max_seqs. Fills lens and returns the count (>= 1). */
#define CUDA_PROBE_SEQS 32
int32_t cuda_attn_probe(int32_t max_tokens, int32_t max_seqs, int32_t max_len, int32_t *lens);

/* The start-up check's bound on |kernel - fp32 kernel| over max|v| for an
 * fp16/bf16 kernel, unit roundoff u (2^-11, 2^-8): the flash and flash2
 * kernels are within 3u + 1e-5 of exact (tests/gpu/gpu_attn.c derives it), cuDNN's
 * likewise (fp32 accumulation, probabilities rounded to the dtype), the fp32
 * kernel within u + 1e-5 (its output's rounding): 4u + 2e-5 between them. */
double cuda_attn_check_bound(cuda_dtype t);

/* ---- conversions ------------------------------------------------------------ */
/* Round to nearest even, as the device's __float2bfloat16_rn and
 * __float2half_rn do; NaN stays NaN, overflow goes to infinity. */
uint16_t cuda_f32_to_bf16(float f);
uint16_t cuda_f32_to_f16(float f);
float cuda_bf16_to_f32(uint16_t h);
float cuda_f16_to_f32(uint16_t h);

/* Stores n floats at dst in dtype. */
void cuda_store(cuda_dtype t, void *dst, const float *src, size_t n);

#endif

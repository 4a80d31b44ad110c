/* cuda_cudnn.h — cuDNN's fused attention (SDPA forward, flash-attention
 * style) as the CUDA engine's second attention kernel beside our flash
 * kernel. cuDNN is loaded at run time (dlopen "libcudnn.so.9"), never
 * linked: where it is absent, too old (cuda_cudnn_version_check) or refuses
 * the graph on this GPU, cudnn_sdpa_create says why and the engine keeps the
 * flash kernel.
 *
 * One plan per (dtype, head size, most sequences, longest sequence), built
 * at start and bound to fixed device buffers, reads the engine's packed
 * layout in place: QKV act (T, 3C) with [Q | K | V] and head h at columns
 * h·D, described by strides (row stride 3C) and ragged offsets (elements of
 * each sequence's first row), the per-sequence lengths as cuDNN's
 * seq_len_q/seq_len_kv; the output act (T, C) alike. Nothing is copied. */
#ifndef ENGINES_CUDA_CUDNN_H
#define ENGINES_CUDA_CUDNN_H

#include <stddef.h>
#include <stdint.h>

typedef struct cudnn_sdpa cudnn_sdpa;

/* The plan's shape and the device buffers it is bound to. */
typedef struct cudnn_sdpa_desc {
    int dtype;        /* cuda_dtype: CUDA_DT_F16 or CUDA_DT_BF16 */
    int32_t max_seqs; /* B_max: the graph's batch; shorter batches give the rest length 0 */
    int32_t max_len;  /* the longest sequence any batch has */
    int32_t heads, head_dim;
    int causal; /* 1: causal mask; refused for now (the cuDNN floor's SDPA lacks it) */
    float scale;
    const void *qkv;        /* act (T, 3C) */
    void *out;              /* act (T, C) */
    const int32_t *seq;     /* int32 (B_max), cuda_sdpa_arrays' seq_len */
    const int64_t *off_qkv; /* int64 (B_max + 1) */
    const int64_t *off_o;   /* int64 (B_max + 1) */
    void *stream;           /* cudaStream_t every run is enqueued on */
} cudnn_sdpa_desc;

/* The loaded cuDNN's version (cudnnGetVersion), or 0 with why when it
 * cannot be loaded. Loads once per process; thread-safe. */
size_t cudnn_sdpa_version(char *why, size_t why_len);

/* Loads cuDNN, checks its version, builds and finalises the plan for d and
 * allocates its workspace on the device. Returns 0 and *out, or -1 with why
 * (cuDNN's own error text where cuDNN refused). */
int cudnn_sdpa_create(const cudnn_sdpa_desc *d, cudnn_sdpa **out, char *why, size_t why_len);

/* Device bytes the plan's workspace holds. */
size_t cudnn_sdpa_workspace(const cudnn_sdpa *s);

/* Enqueues the attention of the batch whose arrays are in d's buffers.
 * Returns 0, or -1 with cuDNN's reason. Allocates nothing. */
int cudnn_sdpa_run(cudnn_sdpa *s, char *why, size_t why_len);

void cudnn_sdpa_destroy(cudnn_sdpa *s);

#endif

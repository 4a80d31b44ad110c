/* attention.h — the contract every attention backend keeps.
 *
 * A backend is a const table of function pointers. The rest of the service
 * (loader, scheduler, metrics) sees only this table, so backends can be
 * swapped by configuration without touching anything else.
 *
 * Layout (as FlashAttention's varlen API): a batch of B sequences packed
 * without padding. Sequence b owns tokens [cu_seqlens[b], cu_seqlens[b+1]).
 * Q, K, V and the output are rows of H heads × D floats per token:
 *   q[t * q_stride + h * D + d]      t < total_tokens, h < H, d < D
 * A token stride larger than H*D lets a caller point Q, K and V into one
 * fused [T][3][H][D] projection without copying. */
#ifndef ATTN_ATTENTION_H
#define ATTN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "parallel.h"

/* ---- errors ---------------------------------------------------------------
 * Negative codes, one list; attn_strerror() gives the message. */
#define ATTN_ERRORS(X)                                                                             \
    X(ATTN_OK, 0, "success")                                                                       \
    X(ATTN_EINVAL, -1, "invalid argument")                                                         \
    X(ATTN_EUNSUPPORTED, -2, "shape not supported by this backend")                                \
    X(ATTN_EWORKSPACE, -3, "workspace too small for this batch")                                   \
    X(ATTN_EUNKNOWN, -4, "unknown backend name")

enum {
#define ATTN_ERR_ENUM(name, code, msg) name = code,
    ATTN_ERRORS(ATTN_ERR_ENUM)
#undef ATTN_ERR_ENUM
};

const char *attn_strerror(int err);

/* ---- shapes ---------------------------------------------------------------
 * The bounds of a batch: what capability checks and workspace sizing need.
 * A workspace sized for a shape serves every batch within its bounds. */
typedef struct attn_shape {
    int32_t batch;        /* B: sequences in the batch (>= 1) */
    int32_t total_tokens; /* T: tokens over all sequences (>= 0) */
    int32_t max_seqlen;   /* longest sequence, <= T */
    int32_t heads;        /* H (>= 1) */
    int32_t head_dim;     /* D (>= 1) */
    int causal;           /* 1: token i attends to keys 0..i of its sequence */
    int rel_bias;         /* 1: problems carry a relative position bias (below) */
    /* Hkv: heads of K and V. 0 (or H) gives every query head its own; a
     * divisor of H groups them, as grouped-query attention does: query head
     * h reads K/V head h / (H / Hkv), and K and V rows hold Hkv·D floats. */
    int32_t kv_heads;
    /* 0: every key of the sequence (up to the query, when causal). w > 0:
     * the query at position i sees the key at position j only when
     * |i − j| <= w, as a sliding-window (local) attention layer does. */
    int32_t window;
} attn_shape;

/* The K/V head query head h reads (attn_shape.kv_heads). */
static inline int attn_kv_head(const attn_shape *s, int h) {
    return s->kv_heads > 0 && s->kv_heads < s->heads ? h / (s->heads / s->kv_heads) : h;
}

/* The heads K and V rows hold: kv_heads, or heads when it is 0. */
static inline int32_t attn_kv_heads(const attn_shape *s) {
    return s->kv_heads > 0 ? s->kv_heads : s->heads;
}

/* The keys [*lo, *hi) that the query at position i of a sequence of len
 * tokens sees, under the causal mask and the window: the one definition
 * every backend and the reference use. */
static inline void attn_key_range(const attn_shape *s, int32_t i, int32_t len, int32_t *lo,
                                  int32_t *hi) {
    int32_t a = 0, b = s->causal ? i + 1 : len;
    if (s->window > 0) {
        a = i > s->window ? i - s->window : 0;
        if (b > i + s->window + 1)
            b = i + s->window + 1;
    }
    *lo = a;
    *hi = b;
}

/* One forward call. Pointers are caller-owned; out must not alias q, k, v. */
typedef struct attn_problem {
    attn_shape shape;
    const int32_t *cu_seqlens; /* [B + 1], cu[0] = 0, non-decreasing, cu[B] = T */
    const float *q;            /* (T, H, D) with token stride q_stride */
    const float *k;            /* (T, Hkv, D) with token stride k_stride */
    const float *v;            /* (T, Hkv, D) with token stride v_stride */
    float *out;                /* (T, H, D) with token stride out_stride */
    size_t q_stride, k_stride, v_stride, out_stride; /* floats; >= H*D (K, V: Hkv*D) */
    float scale;                                     /* softmax scale, usually 1/sqrt(D) */
    /* The relative position bias, when shape.rel_bias (NULL otherwise): the
     * score of query i and key j of one sequence (i, j their positions in
     * it) becomes scale·q_i·k_j + rel_bias[h·(2·rel_span − 1) + rel_span − 1
     * + i − j], before the softmax. A bias that depends on the distance
     * alone is what relative schemes give (MPNet's and T5's learned buckets;
     * ALiBi's slopes fit the same vector), so it is one vector of
     * 2·rel_span − 1 floats per head: O(H·rel_span) memory however long the
     * sequences, and the same vector serves every sequence of a packed
     * batch, where an [H][L][L] matrix would grow with L² and differ per
     * sequence. Indexed by i − j so that consecutive query rows (the lanes of
     * the fused kernels) read consecutive floats. */
    const float *rel_bias; /* [H][2·rel_span − 1] */
    int32_t rel_span;      /* >= shape.max_seqlen */
} attn_problem;

/* Fills p for dense [T][H][D] tensors with scale 1/sqrt(D). */
void attn_problem_dense(attn_problem *p, attn_shape shape, const int32_t *cu_seqlens,
                        const float *q, const float *k, const float *v, float *out);

/* Checks that p is self-consistent (cu_seqlens against the shape, strides,
 * pointers, finite scale). Returns ATTN_OK or ATTN_EINVAL with a reason. */
int attn_problem_check(const attn_problem *p, char *why, size_t why_len);

/* Floating-point operations of one forward: 4·D·H per (query, key) pair
 * (QK^T and PV): L² pairs per sequence of length L, L²/2 when causal (the
 * convention FlashAttention's benchmarks use), and with a window the pairs
 * it leaves. */
double attn_flops(const attn_problem *p);

/* ---- the backend table ---------------------------------------------------- */

/* What a backend rounds its inputs to, which picks its error bound in
 * reference.h. Zero is float32, so a table that does not say is held to the
 * float32 bound. */
typedef enum attn_precision {
    ATTN_PREC_FP32 = 0, /* float32 throughout */
    ATTN_PREC_BF16 = 1, /* Q, K, V and probabilities rounded to bf16, fp32 sums */
} attn_precision;

typedef struct attn_backend {
    /* Name used in configuration, logs and metrics ("naive", "fused"). */
    const char *name;

    /* One line for --help and /info. */
    const char *summary;

    /* Relative speed on the shapes the service runs; `auto` picks the highest
     * whose capability check passes. */
    int speed_rank;

    /* Capability check. Returns ATTN_OK if forward can run every batch within
     * shape; otherwise ATTN_EUNSUPPORTED and a NUL-terminated reason in why
     * (why may be NULL). Never allocates. */
    int (*supports)(const attn_shape *shape, char *why, size_t why_len);

    /* Bytes of workspace forward needs for any batch within shape when run
     * with nthreads workers. May be 0. */
    size_t (*workspace_size)(const attn_shape *shape, int nthreads);

    /* Computes the attention output of p. workspace (aligned to 64 bytes,
     * workspace_bytes >= workspace_size(&p->shape, par->nthreads)) is
     * scratch the caller owns. Parallel work runs through par. Never
     * allocates, never blocks on anything but par. Returns ATTN_OK or a
     * negative ATTN_E* code, leaving out unspecified on error. */
    int (*forward)(const attn_problem *p, void *workspace, size_t workspace_bytes,
                   const attn_parallel *par);

    /* The instruction-set path forward uses on this machine now ("avx512",
     * "avx2", "portable"), for /info, metrics and logs. */
    const char *(*simd_path)(void);

    /* The precision forward computes in: selects the error bound that the
     * self-test and shadow verification hold it to. */
    attn_precision precision;

    /* 1: forward adds p->rel_bias. A table without it (one written before
     * the bias existed) is never handed a problem that carries one:
     * attn_backend_supports refuses the shape by name. */
    int rel_bias;
    /* 1: forward groups query heads over shape.kv_heads K/V heads; 1:
     * forward keeps shape.window. Each refused by name alike when 0. */
    int gqa;
    int window;
} attn_backend;

/* b's capability check for shape, with the contract's own gates first (a
 * relative position bias, grouped K/V heads or a window that b does not
 * declare): what every caller asks before
 * choosing or sizing b. Returns ATTN_OK or ATTN_EUNSUPPORTED with a reason. */
int attn_backend_supports(const attn_backend *b, const attn_shape *shape, char *why,
                          size_t why_len);

/* ---- registry (registry.c) -------------------------------------------------- */

/* Most backends one binary can hold (built-in and registered). */
#define ATTN_MAX_BACKENDS 16

/* All backends of this binary, in a fixed order (built-in ones first, then
 * registered ones in registration order), NULL-terminated. */
const attn_backend *const *attn_backends(void);

/* Finds a backend by exact name ("naive", "fused"); NULL if none. */
const attn_backend *attn_backend_find(const char *name);

/* Resolves a configured name ("naive", "fused" or "auto") for the given
 * bounds. "auto" picks the highest speed_rank backend that supports shape.
 * A named backend that refuses shape is an error with its reason. Returns
 * ATTN_OK and *out, or ATTN_EUNKNOWN / ATTN_EUNSUPPORTED with a message in
 * err that, for an unknown name, lists the valid ones. */
int attn_backend_select(const char *name, const attn_shape *shape, const attn_backend **out,
                        char *err, size_t err_len);

/* The valid configuration names, comma-separated ("naive, fused, auto"). */
const char *attn_backend_names(void);

/* Adds a backend to this binary's list: how a build links in a backend that
 * is not built in (the test-only faulty backend does it from a constructor).
 * Call before any thread starts. Returns ATTN_OK, or ATTN_EINVAL for NULL, a
 * table without forward/supports/workspace_size/simd_path, a name already
 * taken (or "auto"), or a full list. */
int attn_backend_register(const attn_backend *b);

#endif

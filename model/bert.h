/* bert.h — a BERT-family sentence encoder: token ids of a packed batch in,
 * one pooled vector per sequence out.
 *
 * Loads a sentence-transformers directory (config.json, model.safetensors,
 * modules.json, the pooling config), keeps the weights memory-mapped and runs
 * the encoder on a variable-length packed batch — no padding is ever
 * computed — with attention through a backend from kernels/attention.h. It
 * knows nothing of HTTP, tokenisation or scheduling, but for the special
 * tokens the directory's tokenizer adds, which frame int8's calibration
 * batch (bert_config_frame).
 *
 * Dimension letters used in shape comments:
 *   B sequences in the batch, T tokens in the batch, C hidden size,
 *   H heads, D = C/H head size, F intermediate (FFN) size, V vocabulary,
 *   P max positions, L layers. */
#ifndef MODEL_BERT_H
#define MODEL_BERT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

#include "model/bert_config.h"
#include "model/encoder_stages.h"

/* ---- weights ----------------------------------------------------------------- */
typedef struct bert_model bert_model;

/* Loads the directory: config as bert_config_load, then dir/model.safetensors. F16 and
 * BF16 weights are converted to F32 at load; F32 weights are used in place
 * from the read-only mapping; Q, K and V projections are concatenated for
 * one fused GEMM. Sets OpenBLAS to one thread: parallelism comes from the
 * attn_parallel pool handed to forward (see bert.c). OpenBLAS starts its own
 * idle threads when the library loads, before this can run; a process that
 * wants none sets OPENBLAS_NUM_THREADS=1 in its environment. */
int bert_load(const char *dir, bert_model **out, char *err, size_t err_len);

/* bert_load with the linear layers packed for precision (kernels/gemm.h):
 * fp32 is bert_load. A reduced precision keeps nothing of the file: the
 * embedding tables are held in bf16, the LayerNorm vectors in fp32, the
 * linear layers as packed, and the file is unmapped (bert_mapped_bytes 0),
 * so the weights take about half of fp32's bytes. A precision this CPU
 * cannot run (gemm_unsupported) is BERT_EUNSUPPORTED with the reason. */
int bert_load_precision(const char *dir, gemm_precision precision, bert_model **out, char *err,
                        size_t err_len);

/* The four linear layers of an encoder layer, to give each its precision. */
typedef enum bert_linear {
    BERT_LINEAR_QKV,      /* x -> [Q | K | V] */
    BERT_LINEAR_ATTN_OUT, /* attention -> x, then residual + LayerNorm */
    BERT_LINEAR_FFN_IN,   /* x -> FFN hidden, then GELU */
    BERT_LINEAR_FFN_OUT,  /* GELU output -> x, then residual + LayerNorm */
    BERT_NLINEAR
} bert_linear;

/* How the linear layers are packed: each kind for its own precision, the
 * same in every encoder layer, and for int8 each kind's SmoothQuant
 * strength α (0: none). With α > 0 the model is first run in fp32 on a fixed synthetic
 * calibration batch (pseudo-random word pieces, never user or test data, each
 * sequence framed as the directory's tokenizer frames it: bert_config_frame)
 * that records a_k, the largest |input| of every GEMM's input channel k; the
 * int8 GEMMs then quantise x_k / s_k and W[·,k]·s_k with
 * s_k = a_k^α / w_k^(1−α), w_k the largest |W[·,k]| (gemm_pack_smoothed):
 * y is unchanged, and the few channels that carry outliers no longer set
 * every token's int8 step. */
typedef struct bert_plan {
    gemm_precision p[BERT_NLINEAR];
    float alpha[BERT_NLINEAR];
} bert_plan;

/* bert_load with plan; bert_precision() then names the lowest precision in
 * it. bert_load_precision(GEMM_INT8) is bert_int8_plan. */
int bert_load_plan(const char *dir, const bert_plan *plan, bert_model **out, char *err,
                   size_t err_len);
extern const bert_plan bert_int8_plan;
void bert_free(bert_model *m);

const bert_config *bert_get_config(const bert_model *m);
gemm_precision bert_precision(const bert_model *m);

/* Bytes of weights the model allocated (converted or rearranged), and bytes
 * of the mapped weight file (shared, read-only page cache). */
size_t bert_owned_bytes(const bert_model *m);
size_t bert_mapped_bytes(const bert_model *m);

/* The attention bounds of every batch of at most max_tokens tokens: what a
 * backend's capability check and workspace sizing are asked about. */
attn_shape bert_attn_shape(const bert_config *cfg, int max_tokens);

/* ---- workspace ------------------------------------------------------------- */
typedef struct bert_workspace bert_workspace;

/* Allocates, once, the activations for batches of up to max_tokens tokens
 * and the attention scratch that every backend in backends[0..nbackends)
 * needs with nthreads workers, so forward may run any of them. A backend
 * that refuses the bounds is BERT_EUNSUPPORTED with its reason. */
int bert_workspace_create(const bert_model *m, int max_tokens, int nthreads,
                          const attn_backend *const *backends, size_t nbackends,
                          bert_workspace **out, char *err, size_t err_len);
void bert_workspace_free(bert_workspace *ws);

/* Total bytes the workspace holds: with bert_owned_bytes, the model's
 * worst-case memory beyond the mapped weights. */
size_t bert_workspace_bytes(const bert_workspace *ws);
int bert_workspace_max_tokens(const bert_workspace *ws);

/* raw != 0: forwards on ws write the pooled vectors without the model's L2
 * normalisation (a caller that serves both normalised and raw vectors from
 * one batch, as TEI's normalize flag asks, normalises per sequence itself
 * with bert_l2_normalize, which gives the same bits). Default 0. */
void bert_workspace_set_raw(bert_workspace *ws, int raw);

/* (T, C) the last layer's output of the last forward on ws, token by token
 * as the batch was packed: every token's vector before pooling (what TEI's
 * /embed_all answers). Valid until the next forward on ws. */
const float *bert_workspace_hidden(const bert_workspace *ws);

/* v (n floats) /= max(||v||, 1e-12): the model's normalisation, as
 * PyTorch's F.normalize computes it. */
void bert_l2_normalize(float *v, int n);

/* ---- observation -------------------------------------------------- */

/* Called right after layer `layer`'s attention forward, on the thread that
 * runs bert_forward, with the problem the backend just computed (Q, K, V
 * strided into the fused projection, the output in place): what shadow
 * verification copies. It must not modify anything p points to. */
typedef void (*bert_attn_tap_fn)(const attn_problem *p, int layer, void *ctx);

/* Sets the tap for the next forwards on ws; fn NULL (or a layer outside the
 * model) turns it off. */
void bert_workspace_set_attn_tap(bert_workspace *ws, int layer, bert_attn_tap_fn fn, void *ctx);

/* The stage times of the last forward on ws (encoder_stage_ns, whose
 * fields are this family's stages). */
typedef encoder_stage_ns bert_stage_ns;

const bert_stage_ns *bert_workspace_stage_ns(const bert_workspace *ws);

/* ---- forward ------------------------------------------------------------------ */

/* Encodes a packed batch: sequence b is ids[cu_seqlens[b] .. cu_seqlens[b+1])
 * (each 1..P tokens, [CLS] ... [SEP] as the tokenizer made them, total <= the
 * workspace's max_tokens) and writes its output, cfg.output_dim floats (see
 * bert_forward_types), to out[b * output_dim ..). Attention runs through
 * attn, whose workspace must have been sized at bert_workspace_create;
 * par->nthreads must not exceed the nthreads given there. Allocates nothing.
 * Returns BERT_OK, BERT_EINPUT (bad batch) or BERT_EATTN, with a message.
 * A workspace serves one forward at a time; the model is read-only after
 * load and may be shared by several workspaces. */
int bert_forward(const bert_model *m, bert_workspace *ws, const attn_backend *attn,
                 const attn_parallel *par, const int32_t *ids, const int32_t *cu_seqlens, int batch,
                 float *out, char *err, size_t err_len);

/* bert_forward with each token's type (packed as ids; NULL: every token
 * type 0), each in [0, type_vocab_size): a BERT cross-encoder gives the
 * second segment of a pair type 1. out holds cfg.output_dim floats per
 * sequence: the pooled (and Dense-projected) vector, or a classifier's
 * logits (num_labels, no sigmoid or softmax; raw is then moot). */
int bert_forward_types(const bert_model *m, bert_workspace *ws, const attn_backend *attn,
                       const attn_parallel *par, const int32_t *ids, const int32_t *type_ids,
                       const int32_t *cu_seqlens, int batch, float *out, char *err, size_t err_len);

#endif

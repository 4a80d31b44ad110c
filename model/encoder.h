/* encoder.h — the encoder interface between server/ and model/.
 *
 * What the service serves is an encoder family (a config reader, weights, a
 * workspace and a forward) behind this one interface; the server and the
 * engines see the model only through encoder_info and the encoder_*
 * functions, never a family's own config. A new family is a table in
 * encoder.c and its own files on the model side.
 *
 * One family table today, "bert" (model/bert.h), which serves config.json
 * model_type "bert", "roberta", "xlm-roberta", "mpnet", "modernbert",
 * "qwen3" and "gemma3_text", each composed from the blocks of
 * model/blocks.h and model/position.h (encoder_info.family names which:
 * "bert", "modernbert", "qwen3", "gemma3"; MPNet, Qwen3 and Gemma3 as
 * embedders only), as
 *   - an embedder: a sentence-transformers directory (modules.json:
 *     Transformer, Pooling, Dense modules, Normalize), out: the pooled
 *     vector;
 *   - a classifier: a plain HF directory whose config.json "architectures"
 *     is BertForSequenceClassification, RobertaForSequenceClassification,
 *     XLMRobertaForSequenceClassification or
 *     ModernBertForSequenceClassification (a sentence-transformers
 *     CrossEncoder is one), out: the raw logits.
 * Every call returns a BERT_* code of model/bert_config.h with a message. */
#ifndef MODEL_ENCODER_H
#define MODEL_ENCODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "model/bert_config.h"
#include "model/encoder_stages.h"

typedef enum encoder_task { ENCODER_TASK_EMBED, ENCODER_TASK_CLASSIFY } encoder_task;

/* The model the server serves, as the directory describes it. */
typedef struct encoder_info {
    const char *family;       /* "bert", "modernbert", "qwen3", "gemma3" */
    const char *model_type;   /* config.json's: "bert", "roberta", "xlm-roberta" */
    const char *architecture; /* config.json "architectures"[0], "" when absent */
    encoder_task task;
    /* Floats per sequence a forward writes: the pooled (and Dense-projected)
     * vector of an embedder, the num_labels logits of a classifier. */
    int32_t output_dim;
    int32_t hidden_size;       /* per token: what the hidden states have */
    int32_t num_labels;        /* a classifier's; 0 for an embedder */
    const char *const *labels; /* [num_labels]: id2label in index order, "LABEL_i" when absent */
    /* config.json "problem_type" ("single_label_classification",
     * "multi_label_classification", "regression") or "" when absent: how
     * the logits were trained to be read; forward never applies it. */
    const char *problem_type;
    bool token_types;        /* type_vocab_size > 1: a pair's second segment is type 1 */
    int32_t type_vocab_size; /* token type ids are in [0, type_vocab_size) */
    int32_t vocab_size;
    int32_t num_layers, num_heads, head_dim, intermediate_size;
    int32_t max_positions;  /* the longest sequence forward takes */
    int32_t max_seq_length; /* where sentence-transformers truncates (<= max_positions) */
    /* sentence-transformers' pooling mode name ("mean", "cls", "max",
     * "mean_sqrt_len_tokens", "lasttoken"); a classifier reads its first
     * token: "cls". */
    const char *pooling;
    bool normalize;        /* an embedder's Normalize module */
    int32_t dense_modules; /* an embedder's Dense modules */
    /* What attention adds for positions (model/position.h):
     * enc_pos_attn_name, "none" or "relative buckets" (MPNet). An engine
     * whose attention adds no bias refuses a model that needs one. */
    const char *position_bias;
    /* What runs, for /info and refusals: the position scheme
     * (enc_pos_scheme_name: "absolute", "absolute + relative buckets",
     * "rope"), the norm ("post-layernorm", "pre-layernorm", "pre-rmsnorm"),
     * the MLP (enc_mlp_name) and the attention ("bidirectional",
     * "causal"); num_kv_heads (== num_heads: no grouping) and window (0: none;
     * w: the sliding layers' keys within distance w) as the attention
     * contract takes them. */
    const char *position;
    const char *norm;
    const char *mlp;
    const char *attention;
    int32_t num_kv_heads;
    int32_t window;
    /* true: the model has no token type table and takes no type ids
     * (MPNet, ModernBERT, Qwen3, Gemma3), so the type ids a pair template
     * gives the second text are dropped, as transformers' forward never
     * receives them; false: they must be within type_vocab_size. */
    bool types_unused;
} encoder_info;

/* ---- the directory's description, without weights ------------------------------ */
typedef struct encoder_desc encoder_desc;

/* Reads what dir describes (config files only) and picks the family by
 * config.json's model_type. Anything no family serves is BERT_EUNSUPPORTED
 * naming it. */
int encoder_describe(const char *dir, encoder_desc **out, char *err, size_t err_len);
const encoder_info *encoder_desc_info(const encoder_desc *d);
void encoder_desc_free(encoder_desc *d);

/* Opens dir's model.safetensors and validates its header and offsets as the
 * loaders will, then closes it: BERT_OK, BERT_EIO (absent, unreadable) or
 * BERT_EFORMAT, with the reason in err. Cheap (the header only), so a start
 * can refuse a broken file before its self-tests rather than after. */
int encoder_check_weights(const char *dir, char *err, size_t err_len);

/* The attention bounds of every batch of at most max_tokens tokens: what a
 * backend's capability check and workspace sizing are asked about. */
attn_shape encoder_attn_shape(const encoder_info *info, int max_tokens);

/* ---- the loaded encoder -------------------------------------------------------- */
typedef struct encoder encoder;

/* Loads dir's weights with the linear layers in precision (kernels/gemm.h);
 * a precision this CPU cannot run is BERT_EUNSUPPORTED. */
int encoder_load(const char *dir, gemm_precision precision, encoder **out, char *err,
                 size_t err_len);
void encoder_free(encoder *e);
/* Valid until encoder_free. */
const encoder_info *encoder_get_info(const encoder *e);
gemm_precision encoder_precision(const encoder *e);
/* Bytes of weights allocated, and of the read-only file mapping. */
size_t encoder_owned_bytes(const encoder *e);
size_t encoder_mapped_bytes(const encoder *e);

/* ---- workspace and forward ------------------------------------------------------ */
typedef struct encoder_workspace encoder_workspace;

/* Called right after layer `layer`'s attention with the problem the
 * backend just computed; must not modify it. */
typedef void (*encoder_attn_tap_fn)(const attn_problem *p, int layer, void *ctx);

/* Allocates, once, everything a forward of up to max_tokens tokens needs
 * with nthreads workers and any of backends[0..nbackends). */
int encoder_workspace_create(const encoder *e, int max_tokens, int nthreads,
                             const attn_backend *const *backends, size_t nbackends,
                             encoder_workspace **out, char *err, size_t err_len);
void encoder_workspace_free(encoder_workspace *ws);
size_t encoder_workspace_bytes(const encoder_workspace *ws);
/* raw != 0: embedders' vectors without the Normalize module. */
void encoder_workspace_set_raw(encoder_workspace *ws, int raw);
/* (T, hidden_size) every token's last hidden state of the last forward. */
const float *encoder_workspace_hidden(const encoder_workspace *ws);
void encoder_workspace_set_attn_tap(encoder_workspace *ws, int layer, encoder_attn_tap_fn fn,
                                    void *ctx);
const encoder_stage_ns *encoder_workspace_stage_ns(const encoder_workspace *ws);

/* Sequence b is ids[cu_seqlens[b] .. cu_seqlens[b+1]) with type_ids packed
 * alike (NULL: all type 0); out[b * output_dim ..) gets its output
 * (encoder_info.output_dim). Allocates nothing; one forward at a time per
 * workspace. BERT_OK, BERT_EINPUT or BERT_EATTN. */
int encoder_forward(const encoder *e, encoder_workspace *ws, const attn_backend *attn,
                    const attn_parallel *par, const int32_t *ids, const int32_t *type_ids,
                    const int32_t *cu_seqlens, int batch, float *out, char *err, size_t err_len);

#endif

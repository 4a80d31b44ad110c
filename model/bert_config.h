/* bert_config.h — what a sentence-transformers directory says about a
 * BERT-family encoder, and the model's error codes: everything that needs no
 * kernel, so the config reader (bert_config.c) stands apart from the
 * encoder (bert.h, which includes this). */
#ifndef MODEL_BERT_CONFIG_H
#define MODEL_BERT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "model/blocks.h"
#include "model/position.h"

/* ---- errors ---------------------------------------------------------------
 * Negative codes, one list; bert_strerror() gives the category, and every
 * failing call also writes a specific message. BERT_EFORMAT and
 * BERT_EUNSUPPORTED are start-up errors (the service exits with status 2). */
#define BERT_ERRORS(X)                                                                             \
    X(BERT_OK, 0, "success")                                                                       \
    X(BERT_EIO, -1, "cannot read a model file")                                                    \
    X(BERT_EFORMAT, -2, "malformed model file")                                                    \
    X(BERT_EUNSUPPORTED, -3, "model not supported")                                                \
    X(BERT_ENOMEM, -4, "out of memory")                                                            \
    X(BERT_EINPUT, -5, "invalid batch")                                                            \
    X(BERT_EATTN, -6, "attention backend failed")

enum {
#define BERT_ERR_ENUM(name, code, msg) name = code,
    BERT_ERRORS(BERT_ERR_ENUM)
#undef BERT_ERR_ENUM
};

const char *bert_strerror(int err);

/* ---- model description ----------------------------------------------------- */
/* sentence-transformers' Pooling modes this encoder computes (one at a
 * time; weightedmean and concatenated modes are refused). */
typedef enum bert_pooling {
    BERT_POOL_MEAN,
    BERT_POOL_CLS,
    BERT_POOL_MAX,           /* elementwise max over the tokens */
    BERT_POOL_MEAN_SQRT_LEN, /* sum over the tokens / sqrt(tokens) */
    BERT_POOL_LASTTOKEN      /* the sequence's last token */
} bert_pooling;

/* The task head on top of the encoder. Both classifier heads compute
 * logits = W2 · tanh(W1 · h_first + b1) + b2 on the first token's hidden
 * state, [CLS] or <s>; they differ in where HF stores W1 and W2. */
typedef enum bert_head {
    BERT_HEAD_NONE,    /* an embedder: pooling, Dense modules, Normalize */
    BERT_HEAD_POOLER,  /* BertForSequenceClassification: bert.pooler.dense, classifier */
    BERT_HEAD_ROBERTA, /* (XLM-)RobertaForSequenceClassification: classifier.dense,
                          classifier.out_proj */
    /* ModernBertForSequenceClassification: logits = W2 · norm(gelu(W1 · p
     * (+ b1))) + b2 on p, the first token or the mean of the tokens
     * (classifier_pooling, in pooling); head.dense, head.norm, classifier. */
    BERT_HEAD_MODERNBERT,
} bert_head;

/* A sentence-transformers Dense module: y = act(W x + b), W (out, in). */
typedef enum bert_act { BERT_ACT_IDENTITY, BERT_ACT_TANH } bert_act;
#define BERT_MAX_DENSE 4
/* The most labels a classifier may have: id2label beyond this is refused. */
#define BERT_MAX_LABELS 4096
typedef struct bert_dense {
    int in_features, out_features;
    int bias;
    bert_act act;
    char path[256]; /* the module's directory, relative to the model's */
} bert_dense;

/* How the checkpoint names the tensors of the same building blocks. */
typedef enum bert_layout {
    BERT_LAYOUT_BERT,       /* BERT, RoBERTa, XLM-R: attention.self.query, attention.output.dense */
    BERT_LAYOUT_MPNET,      /* MPNet: attention.attn.q .. .o, encoder.relative_attention_bias */
    BERT_LAYOUT_MODERNBERT, /* ModernBERT: layers.N.attn.Wqkv (fused), mlp.Wi (fused GeGLU) */
    BERT_LAYOUT_QWEN3,      /* Qwen3: layers.N.self_attn.q_proj .. o_proj, mlp.gate_proj .. */
    BERT_LAYOUT_GEMMA3,     /* Gemma3: Qwen3's names and four norms per layer */
    /* NomicBERT as nomic's own code names it (the published checkpoints):
     * emb_ln, encoder.layers.N.attn.Wqkv (fused), mlp.fc11 / fc12, norm1 */
    BERT_LAYOUT_NOMIC,
    /* NomicBERT as transformers' NomicBertModel names it: embeddings.LayerNorm,
     * layers.N.self_attn.q_proj .., mlp.gate_proj .., post_attention_layernorm */
    BERT_LAYOUT_NOMIC_HF,
} bert_layout;

/* The families this encoder composes from the blocks below, for /info. */
typedef enum bert_family {
    BERT_FAMILY_BERT,       /* post-norm BERT, RoBERTa, XLM-R, MPNet */
    BERT_FAMILY_MODERNBERT, /* pre-norm, RoPE, GeGLU, alternating sliding-window layers */
    BERT_FAMILY_QWEN3,      /* a causal decoder: RMSNorm, q/k norm, RoPE, SwiGLU, GQA */
    BERT_FAMILY_GEMMA3,     /* bidirectional Gemma3: Gemma's RMSNorm around each sublayer */
    BERT_FAMILY_NOMIC,      /* post-norm BERT with RoPE and SwiGLU, no absolute positions */
} bert_family;

/* The most layers a config may declare (num_hidden_layers' bound). */
#define BERT_MAX_LAYERS 1024

typedef struct bert_config {
    int vocab_size;        /* V */
    int hidden_size;       /* C */
    int num_layers;        /* L */
    int num_heads;         /* H; C % H == 0 */
    int intermediate_size; /* F */
    int max_positions;     /* P: the longest sequence forward accepts */
    int type_vocab_size;   /* token types: type_ids in [0, type_vocab_size) */
    /* Where positions start in the position table, which has
     * max_positions + position_offset rows. BERT: 0, and position_pad_id -1.
     * RoBERTa and XLM-RoBERTa number tokens from padding_idx + 1 and give a
     * token whose id is the padding id (position_pad_id) the position
     * padding_idx itself, as HF's create_position_ids_from_input_ids does. */
    int position_offset;
    int position_pad_id;
    /* 0: no token type table (MPNet): type_vocab_size is then 1, every
     * token type 0, and nothing is added for it. */
    int token_type_table;
    bert_layout layout;
    bert_family family;
    /* ---- the building blocks (blocks.h, position.h) ----
     * BERT: post-norm LayerNorm with biases, an absolute table, erf GELU,
     * bidirectional full attention, D = C / H, every linear layer biased.
     * pre_norm: each sublayer's input normalised (norm_first: layer 0's
     * attention input too; ModernBERT has an Identity there), the residual
     * stream added to unnormalised, a final norm after the last layer;
     * emb_norm: a norm right after the embedding lookup. */
    int pre_norm, norm_first, emb_norm, final_norm;
    enc_norm norm;
    int norm_bias; /* LayerNorms carry a bias */
    enc_mlp mlp;
    int attn_bias, mlp_bias; /* the attention's and the MLP's linear layers carry biases */
    int abs_positions;       /* a learned position table at the embeddings */
    int head_dim;            /* D: Q is H·D wide, K and V Hkv·D each */
    int num_kv_heads;        /* Hkv; H % Hkv == 0 (H: no grouping) */
    int causal;
    /* qk_norm: Q and K normalised per head (a D-wide norm) before RoPE;
     * post_norms: each sublayer's output normalised before it is added to
     * the residual stream (Gemma3's post-attention and post-feedforward
     * norms); emb_scale: the embedding row times this (Gemma: √C; 0: none);
     * attn_scale: the softmax scale (0: 1/√D; Gemma: query_pre_attn_scalar^−½). */
    int qk_norm, post_norms;
    float emb_scale, attn_scale;
    /* RoPE (rope 1): θ of the full-attention layers [0] and of the
     * sliding-window ones [1]. */
    int rope;
    double rope_theta[2];
    /* window > 0: the layers marked in sliding see keys j with |i − j| <=
     * window (the attention contract's window); the others see all. */
    int window;
    unsigned char sliding[BERT_MAX_LAYERS];
    /* What attention adds for positions (position.h): MPNet's relative
     * buckets, whose table is encoder.relative_attention_bias. */
    enc_pos_attn pos_attn;
    enc_pos_buckets pos_buckets;
    float layer_norm_eps; /* every norm's eps */
    bert_pooling pooling; /* from the sentence-transformers Pooling module */
    int normalize;        /* 1 when a Normalize module follows pooling */
    int ndense;           /* Dense modules between pooling and Normalize, in order */
    bert_dense dense[BERT_MAX_DENSE];
    /* config.json "architectures"[0] ("" when absent) and, for a
     * *ForSequenceClassification architecture, the head and its label count
     * (the size of id2label; "num_labels" or HF's default 2 without it). */
    char architecture[64];
    bert_head head;
    int num_labels;
    int head_bias; /* BERT_HEAD_MODERNBERT: head.dense has a bias (classifier_bias) */
    /* Floats forward writes per sequence: num_labels for a classifier, the
     * last Dense module's out_features, or hidden_size. */
    int output_dim;
    /* Where sentence-transformers truncates: sentence_bert_config.json's
     * max_seq_length (1..max_positions; a larger one is cut to
     * max_positions, as a longer sequence could not run), max_positions when
     * the file or the key is absent. */
    int max_seq_length;
} bert_config;

/* Reads config.json and, for an embedder, modules.json, the Pooling and
 * Dense modules' config.json and, when present, sentence_bert_config.json
 * from dir. model_type "bert", "roberta" or "xlm-roberta" (the same encoder
 * with the position numbering above), or "mpnet" (RoBERTa's numbering, no
 * token types, relative position buckets in attention; an embedder only), or
 * "modernbert" (pre-norm, bias-free LayerNorms, RoPE with a global and a
 * local θ, GeGLU, sliding-window attention on all but every n-th layer, no
 * token types; an embedder only), "qwen3" (a causal decoder embedder:
 * RMSNorm, per-head q/k RMSNorm, RoPE, SwiGLU, grouped K/V heads, D from
 * head_dim) or "gemma3_text" with use_bidirectional_attention (EmbeddingGemma:
 * Gemma's RMSNorm before and after each sublayer, q/k norm, the embedding
 * scaled by √C, GeGLU with tanh GELU, sliding layers with their own θ,
 * query_pre_attn_scalar), or "nomic_bert" (nomic-embed-text: BERT's post-norm
 * LayerNorms, RoPE over the whole head, SwiGLU, token types, no absolute
 * positions; an embedder only). A directory whose
 * architecture is BertForSequenceClassification, RobertaForSequenceClassification or
 * XLMRobertaForSequenceClassification is a classifier and needs no
 * modules.json. Anything outside what forward computes (another
 * architecture, activation or head, another pooling mode, other modules) is
 * BERT_EUNSUPPORTED naming it; a missing file BERT_EIO; a malformed one
 * BERT_EFORMAT. */
int bert_config_load(const char *dir, bert_config *cfg, char *err, size_t err_len);

/* ---- the calibration batch's framing ---------------------------------------- */
/* The special tokens put around one sequence: what int8 calibration frames
 * its synthetic sequences with, since the first token (an attention sink)
 * carries the largest activations. */
#define BERT_FRAME_MAX 4
typedef enum bert_frame_source {
    BERT_FRAME_TOKENIZER, /* what dir's tokenizer adds (tok_encode's special mask) */
    BERT_FRAME_GUESS,     /* no usable tokenizer: BERT's or RoBERTa's, by cfg */
} bert_frame_source;
typedef struct bert_frame {
    int32_t lead[BERT_FRAME_MAX], trail[BERT_FRAME_MAX];
    int nlead, ntrail;
    bert_frame_source source;
} bert_frame;

/* The framing of one sequence as dir's tokenizer (model/tokenizer.h: its
 * post-processor, or vocab.txt's [CLS] and [SEP]) gives it: the special
 * tokens before and after a short text's pieces. A tokenizer that adds ids
 * outside cfg's vocabulary, or more than BERT_FRAME_MAX on a side, frames
 * nothing: those cannot be the model's own. Only when dir has no tokenizer
 * this code loads is the framing guessed as before tokenizers were read:
 * [CLS] 101 ... [SEP] 102, or <s> 0 ... </s> 2 for RoBERTa's position
 * numbering, and nothing for a vocabulary without those ids. */
void bert_config_frame(const char *dir, const bert_config *cfg, bert_frame *f);

#endif

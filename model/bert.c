/* bert.c — the encoder's weights arranged for GEMMs: binding by the
 * layout's tensor names, packing for the precision, calibration,
 * compaction; the forward pass that runs them is bert_forward.c.
 *
 * Threads. The service owns every thread: OpenBLAS is set to one thread and
 * every linear layer runs through kernels/gemm.h, which splits it over the
 * attn_parallel pool handed to forward. Embeddings, attention and pooling
 * run on the same pool, so one pool runs everything and nothing
 * oversubscribes the cores.
 *
 * Linear layers. Weights are read as PyTorch stores them, W (out, in), and
 * packed once at load for the model's precision (gemm_pack; fp32 uses them
 * in place). The one rearrangement is Q, K, V stacked into W_qkv (3C, C), so
 * one GEMM yields qkv (T, 3C) = [Q | K | V] per token, which the attention
 * contract reads in place through token strides of 3C. BERT is post-norm,
 * x = LayerNorm(x + sublayer(x)): the residual add and the LayerNorm run in
 * the epilogues of the out-projection and FFN-out GEMMs, which write x in
 * place, so no separate pass over the activations is spent on them.
 *
 * Pre-norm families (ModernBERT, Qwen3, Gemma3) compose the same GEMMs
 * otherwise: each sublayer's input is normalised into a buffer of its own
 * (blocks.h), the sublayer's output is added to the residual stream in the
 * out-projection's epilogue (or normalised first, Gemma3's post norms), and
 * RoPE rotates Q and K in the fused projection before attention
 * (position.h), after their per-head norms where the family has them. Q is
 * H·D wide and K, V Hkv·D each; separate q/k/v or gate/up tensors are
 * stacked for one GEMM, a fused checkpoint tensor (ModernBERT's Wqkv, Wi)
 * is used as it is stored. */
#include "bert.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bert_impl.h"
#include "kernels/backends.h"
#include "kernels/gemm.h"
#include "safetensors.h"

int bert_fail(int code, char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- weights ------------------------------------------------------------------ */

/* Binding runs twice over the same list of tensors: the first pass (arena
 * NULL) checks every name and shape and counts the floats to own, the second
 * carves them from one allocation and fills them. */
typedef struct loader {
    const st_file *file;
    const char *path;   /* of the safetensors file, for messages */
    const char *prefix; /* "", "bert." or "roberta." */
    float *arena;       /* NULL in the counting pass */
    size_t used;        /* floats reserved so far */
    int rc;             /* the BERT_E* code of the first failure */
    char *err;
    size_t err_len;
} loader;

static float *reserve(loader *ld, size_t n) {
    float *p = ld->arena ? ld->arena + ld->used : NULL;
    ld->used += n;
    return p;
}

static float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (man << 13); /* inf, NaN */
    else if (exp != 0)
        bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0)
        bits = sign; /* ±0 */
    else {
        /* Subnormal: shift the mantissa up until it is normal. */
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Copies t into dst as F32; t's bytes may be unaligned inside the mapping. */
static void convert(const st_tensor *t, float *dst, size_t n) {
    const uint8_t *src = t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == ST_F32) {
            memcpy(&dst[i], src + 4 * i, 4);
            continue;
        }
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        if (t->dtype == ST_F16)
            dst[i] = half_to_float(h);
        else {
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&dst[i], &bits, sizeof bits);
        }
    }
}

/* Finds name with the file's prefix and checks it is a float tensor of the
 * given shape (cols 0: a vector of rows). */
static const st_tensor *find(loader *ld, const char *name, int64_t rows, int64_t cols) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", ld->prefix, name);
    const st_tensor *t = st_find(ld->file, full);
    if (!t) {
        ld->rc = bert_fail(BERT_EFORMAT, ld->err, ld->err_len, "%s: tensor %s is missing", ld->path,
                           full);
        return NULL;
    }
    const int ndim = cols ? 2 : 1;
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
        ld->rc = bert_fail(BERT_EUNSUPPORTED, ld->err, ld->err_len,
                           "%s: tensor %s has dtype %s; weights must be F32, F16 or BF16", ld->path,
                           full, st_dtype_name(t->dtype));
        return NULL;
    }
    if (t->ndim != ndim || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        ld->rc =
            bert_fail(BERT_EFORMAT, ld->err, ld->err_len,
                      "%s: tensor %s has the wrong shape for config.json (expected [%lld%s%.0lld])",
                      ld->path, full, (long long)rows, cols ? ", " : "", (long long)cols);
        return NULL;
    }
    return t;
}

/* Points *dst at the tensor in the mapping when it is aligned F32, else at
 * a converted copy. Returns 0 or -1 with ld->err set. */
static int bind(loader *ld, const float **dst, const char *name, int64_t rows, int64_t cols) {
    const st_tensor *t = find(ld, name, rows, cols);
    if (!t)
        return -1;
    const size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    if (t->dtype == ST_F32 && (uintptr_t)t->data % _Alignof(float) == 0) {
        *dst = t->data;
        return 0;
    }
    float *p = reserve(ld, n);
    if (p)
        convert(t, p, n);
    *dst = p;
    return 0;
}

/* Copies the tensor into dst (a slice of an owned stacked tensor). */
static int bind_into(loader *ld, float *dst, const char *name, int64_t rows, int64_t cols) {
    const st_tensor *t = find(ld, name, rows, cols);
    if (!t)
        return -1;
    if (dst)
        convert(t, dst, (size_t)rows * (size_t)(cols ? cols : 1));
    return 0;
}

/* Each layout's names: of the embeddings' tensors (NULL: none), and of
 * one layer's modules (".weight" and ".bias" appended) under the layer's
 * prefix (a printf format of its index). qkv[1] NULL: qkv[0] is one fused
 * [Q | K | V] projection; ffn_in[1] NULL: ffn_in[0] is the whole FFN input,
 * 2F rows wide when gated. */
typedef struct layer_names {
    const char *word, *pos, *type, *emb_norm, *final_norm;
    const char *layer;
    const char *qkv[3], *attn_o, *ln1, *ffn_in[2], *ffn_out, *ln2;
    const char *q_norm, *k_norm, *ln1_post, *ln2_post;
} layer_names;

static const layer_names layouts[] = {
    [BERT_LAYOUT_BERT] = {.word = "embeddings.word_embeddings",
                          .pos = "embeddings.position_embeddings",
                          .type = "embeddings.token_type_embeddings",
                          .emb_norm = "embeddings.LayerNorm",
                          .layer = "encoder.layer.%d.",
                          .qkv = {"attention.self.query", "attention.self.key",
                                  "attention.self.value"},
                          .attn_o = "attention.output.dense",
                          .ln1 = "attention.output.LayerNorm",
                          .ffn_in = {"intermediate.dense"},
                          .ffn_out = "output.dense",
                          .ln2 = "output.LayerNorm"},
    [BERT_LAYOUT_MPNET] = {.word = "embeddings.word_embeddings",
                           .pos = "embeddings.position_embeddings",
                           .emb_norm = "embeddings.LayerNorm",
                           .layer = "encoder.layer.%d.",
                           .qkv = {"attention.attn.q", "attention.attn.k", "attention.attn.v"},
                           .attn_o = "attention.attn.o",
                           .ln1 = "attention.LayerNorm",
                           .ffn_in = {"intermediate.dense"},
                           .ffn_out = "output.dense",
                           .ln2 = "output.LayerNorm"},
    [BERT_LAYOUT_MODERNBERT] = {.word = "embeddings.tok_embeddings",
                                .emb_norm = "embeddings.norm",
                                .final_norm = "final_norm",
                                .layer = "layers.%d.",
                                .qkv = {"attn.Wqkv"},
                                .attn_o = "attn.Wo",
                                .ln1 = "attn_norm",
                                .ffn_in = {"mlp.Wi"},
                                .ffn_out = "mlp.Wo",
                                .ln2 = "mlp_norm"},
    [BERT_LAYOUT_QWEN3] = {.word = "embed_tokens",
                           .final_norm = "norm",
                           .layer = "layers.%d.",
                           .qkv = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                           .attn_o = "self_attn.o_proj",
                           .ln1 = "input_layernorm",
                           .ffn_in = {"mlp.gate_proj", "mlp.up_proj"},
                           .ffn_out = "mlp.down_proj",
                           .ln2 = "post_attention_layernorm",
                           .q_norm = "self_attn.q_norm",
                           .k_norm = "self_attn.k_norm"},
    /* Gemma3's post_attention_layernorm normalises attention's output;
     * the FFN's input norm is pre_feedforward_layernorm. */
    [BERT_LAYOUT_GEMMA3] = {.word = "embed_tokens",
                            .final_norm = "norm",
                            .layer = "layers.%d.",
                            .qkv = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                            .attn_o = "self_attn.o_proj",
                            .ln1 = "input_layernorm",
                            .ffn_in = {"mlp.gate_proj", "mlp.up_proj"},
                            .ffn_out = "mlp.down_proj",
                            .ln2 = "pre_feedforward_layernorm",
                            .q_norm = "self_attn.q_norm",
                            .k_norm = "self_attn.k_norm",
                            .ln1_post = "post_attention_layernorm",
                            .ln2_post = "post_feedforward_layernorm"},
    /* fc12 is the gate, fc11 the up projection: stacked [gate | up], so
     * the activation falls on the first half (blocks.h). */
    [BERT_LAYOUT_NOMIC] = {.word = "embeddings.word_embeddings",
                           .type = "embeddings.token_type_embeddings",
                           .emb_norm = "emb_ln",
                           .layer = "encoder.layers.%d.",
                           .qkv = {"attn.Wqkv"},
                           .attn_o = "attn.out_proj",
                           .ln1 = "norm1",
                           .ffn_in = {"mlp.fc12", "mlp.fc11"},
                           .ffn_out = "mlp.fc2",
                           .ln2 = "norm2"},
    [BERT_LAYOUT_NOMIC_HF] = {.word = "embeddings.word_embeddings",
                              .type = "embeddings.token_type_embeddings",
                              .emb_norm = "embeddings.LayerNorm",
                              .layer = "layers.%d.",
                              .qkv = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                              .attn_o = "self_attn.o_proj",
                              .ln1 = "post_attention_layernorm",
                              .ffn_in = {"mlp.gate_proj", "mlp.up_proj"},
                              .ffn_out = "mlp.down_proj",
                              .ln2 = "post_mlp_layernorm"},
};

/* A norm's weight (n floats: C, or D for a q/k norm) and, when the
 * family's norms have one, its bias. */
static int bind_norm_n(loader *ld, const bert_config *c, const float **w, const float **b,
                       const char *name, int64_t n_floats) {
    char n[192];
    snprintf(n, sizeof n, "%s.weight", name);
    int rc = bind(ld, w, n, n_floats, 0);
    *b = NULL;
    if (!rc && c->norm == ENC_NORM_LAYER && c->norm_bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        rc = bind(ld, b, n, n_floats, 0);
    }
    return rc;
}

static int bind_norm(loader *ld, const bert_config *c, const float **w, const float **b,
                     const char *name) {
    return bind_norm_n(ld, c, w, b, name, c->hidden_size);
}

/* A linear layer (rows, cols) and, when has_bias, its bias, bound in place
 * (or converted) as one tensor. */
static int bind_linear(loader *ld, const float **w, const float **b, const char *name, int64_t rows,
                       int64_t cols, int has_bias) {
    char n[192];
    snprintf(n, sizeof n, "%s.weight", name);
    int rc = bind(ld, w, n, rows, cols);
    *b = NULL;
    if (!rc && has_bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        rc = bind(ld, b, n, rows, 0);
    }
    return rc;
}

/* Several tensors stacked by rows into one owned (sum rows, cols) weight
 * and, when has_bias, its bias: separate Q, K, V (or gate and up) for one
 * GEMM. */
static int bind_stacked(loader *ld, const float **w, const float **b, const char *const *names,
                        const int64_t *rows, int n, int64_t cols, int has_bias) {
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += rows[i];
    float *sw = reserve(ld, (size_t)(total * cols));
    float *sb = has_bias ? reserve(ld, (size_t)total) : NULL;
    int64_t at = 0;
    char nm[192];
    for (int i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "%s.weight", names[i]);
        if (bind_into(ld, sw ? sw + at * cols : NULL, nm, rows[i], cols) < 0)
            return -1;
        snprintf(nm, sizeof nm, "%s.bias", names[i]);
        if (has_bias && bind_into(ld, sb ? sb + at : NULL, nm, rows[i], 0) < 0)
            return -1;
        at += rows[i];
    }
    *w = sw;
    *b = sb;
    return 0;
}

static int bind_layer(loader *ld, bert_layer *w, int l, const bert_config *c) {
    const int64_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    const layer_names *ln = &layouts[c->layout];
    char pre[64], n[6][160];
    snprintf(pre, sizeof pre, ln->layer, l);
#define NAME(i, module) (snprintf(n[i], sizeof n[i], "%s%s", pre, module), n[i])
    int rc;
    if (ln->qkv[1]) {
        const char *const names[3] = {NAME(0, ln->qkv[0]), NAME(1, ln->qkv[1]),
                                      NAME(2, ln->qkv[2])};
        const int64_t rows[3] = {c->num_heads * D, c->num_kv_heads * D, c->num_kv_heads * D};
        rc = bind_stacked(ld, &w->qkv_w, &w->qkv_b, names, rows, 3, C, c->attn_bias);
    } else
        rc = bind_linear(ld, &w->qkv_w, &w->qkv_b, NAME(0, ln->qkv[0]), qkv_rows(c), C,
                         c->attn_bias);
    rc = rc ? rc
            : bind_linear(ld, &w->attn_o_w, &w->attn_o_b, NAME(0, ln->attn_o), C, attn_width(c),
                          c->attn_bias);
    if (ln->ffn_in[1]) {
        const char *const names[2] = {NAME(0, ln->ffn_in[0]), NAME(1, ln->ffn_in[1])};
        const int64_t rows[2] = {F, F};
        rc = rc ? rc : bind_stacked(ld, &w->ffn_in_w, &w->ffn_in_b, names, rows, 2, C, c->mlp_bias);
    } else
        rc = rc ? rc
                : bind_linear(ld, &w->ffn_in_w, &w->ffn_in_b, NAME(0, ln->ffn_in[0]), ffn_rows(c),
                              C, c->mlp_bias);
    rc =
        rc ? rc
           : bind_linear(ld, &w->ffn_out_w, &w->ffn_out_b, NAME(0, ln->ffn_out), C, F, c->mlp_bias);
    /* A pre-norm family may leave layer 0's attention input unnormalised
     * (ModernBERT's Identity). */
    if (!c->pre_norm || l > 0 || c->norm_first)
        rc = rc ? rc : bind_norm(ld, c, &w->ln1_w, &w->ln1_b, NAME(0, ln->ln1));
    rc = rc ? rc : bind_norm(ld, c, &w->ln2_w, &w->ln2_b, NAME(0, ln->ln2));
    const float *none;
    if (c->qk_norm) {
        rc = rc ? rc : bind_norm_n(ld, c, &w->q_norm_w, &none, NAME(0, ln->q_norm), D);
        rc = rc ? rc : bind_norm_n(ld, c, &w->k_norm_w, &none, NAME(0, ln->k_norm), D);
    }
    if (c->post_norms) {
        rc = rc ? rc : bind_norm(ld, c, &w->ln1p_w, &none, NAME(0, ln->ln1_post));
        rc = rc ? rc : bind_norm(ld, c, &w->ln2p_w, &none, NAME(0, ln->ln2_post));
    }
#undef NAME
    return rc;
}

static int bind_all(loader *ld, bert_model *m) {
    const bert_config *c = &m->cfg;
    const int64_t C = c->hidden_size;
    const layer_names *ln = &layouts[c->layout];
    const float *wtt = NULL; /* (type_vocab_size, C) */
    char n[160];
#define NAME(module) (snprintf(n, sizeof n, "%s.weight", module), n)
    int rc = bind(ld, &m->wte, NAME(ln->word), c->vocab_size, C);
    if (c->abs_positions)
        rc = rc ? rc
                : bind(ld, &m->wpe, NAME(ln->pos), (int64_t)c->max_positions + c->position_offset,
                       C);
    if (c->token_type_table)
        rc = rc ? rc : bind(ld, &wtt, NAME(ln->type), c->type_vocab_size, C);
#undef NAME
    if (c->emb_norm)
        rc = rc ? rc : bind_norm(ld, c, &m->emb_ln_w, &m->emb_ln_b, ln->emb_norm);
    if (c->final_norm)
        rc = rc ? rc : bind_norm(ld, c, &m->final_w, &m->final_b, ln->final_norm);
    /* (num_buckets, H) as nn.Embedding stores it; expanded into the
     * per-distance vector at load (bert_load_plan). */
    if (c->pos_attn == ENC_POS_ATTN_BUCKETS)
        rc = rc ? rc
                : bind(ld, &m->rel_table, "encoder.relative_attention_bias.weight",
                       c->pos_buckets.num_buckets, c->num_heads);
    if (rc)
        return rc;
    m->wtt = wtt;
    for (int l = 0; l < c->num_layers; l++)
        if (bind_layer(ld, &m->layers[l], l, c) < 0)
            return -1;
    return 0;
}

static int load_extras(bert_model *m, const char *dir, const char *prefix, char *err,
                       size_t err_len);

static int load_weights(bert_model *m, const char *dir, char *err, size_t err_len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/model.safetensors", dir) >= sizeof path)
        return bert_fail(BERT_EIO, err, err_len, "%s: path too long", dir);
    char why[512];
    const int st = st_open(path, &m->file, why, sizeof why);
    if (st < 0)
        return bert_fail(st == ST_EIO ? BERT_EIO : BERT_EFORMAT, err, err_len, "%s", why);
    loader ld = {.file = m->file, .path = path, .prefix = "", .err = err, .err_len = err_len};
    /* Checkpoints saved from a task head name the encoder's tensors under
     * the head's base model: "bert.", for (XLM-)RoBERTa "roberta.", for
     * MPNet "mpnet.", for ModernBERT "model.". */
    static const char *const prefixes[] = {"bert.", "roberta.", "mpnet.", "model."};
    char word[96];
    snprintf(word, sizeof word, "%s.weight", layouts[m->cfg.layout].word);
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0] && !st_find(m->file, word); i++) {
        char name[128];
        snprintf(name, sizeof name, "%s%s", prefixes[i], word);
        if (st_find(m->file, name)) {
            ld.prefix = prefixes[i];
            break;
        }
    }
    /* NomicBERT under either naming: nomic's own (the published
     * checkpoints) or transformers' NomicBertModel, told apart by the
     * embeddings' norm. */
    char emb_ln[128];
    snprintf(emb_ln, sizeof emb_ln, "%semb_ln.weight", ld.prefix);
    if (m->cfg.layout == BERT_LAYOUT_NOMIC && !st_find(m->file, emb_ln))
        m->cfg.layout = BERT_LAYOUT_NOMIC_HF;

    if (bind_all(&ld, m) < 0)
        return ld.rc;
    m->owned_floats = ld.used;
    m->owned = aligned_alloc(64, (ld.used * sizeof(float) + 63) / 64 * 64);
    if (!m->owned)
        return bert_fail(BERT_ENOMEM, err, err_len, "%s: cannot allocate %zu bytes of weights",
                         path, ld.used * sizeof(float));
    ld.arena = m->owned;
    ld.used = 0;
    bind_all(&ld, m);
    return load_extras(m, dir, ld.prefix, err, err_len);
}

/* One fp32 tensor of the given shape (cols 0: a vector) copied into dst,
 * or, with dst NULL, only checked. */
static int copy_tensor(const st_file *f, const char *path, const char *name, int64_t rows,
                       int64_t cols, float *dst, char *err, size_t err_len) {
    loader ld = {.file = f, .path = path, .prefix = "", .err = err, .err_len = err_len};
    const st_tensor *t = find(&ld, name, rows, cols);
    if (!t)
        return ld.rc;
    if (dst)
        convert(t, dst, (size_t)rows * (size_t)(cols ? cols : 1));
    return BERT_OK;
}

/* The classifier head's tensors (in model.safetensors, by HF's names) and
 * each Dense module's (its own model.safetensors, "linear.weight" and
 * "linear.bias"), in two passes as bind_all: counting with arena NULL, then
 * copying. */
static int bind_extras(bert_model *m, const char *dir, const char *prefix, float *arena,
                       size_t *used, char *err, size_t err_len) {
    const bert_config *c = &m->cfg;
    const int64_t C = c->hidden_size, N = c->num_labels;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    *used = 0;
#define TAKE(n)                                                                                    \
    (arena ? arena + (*used += (size_t)(n)) - (size_t)(n) : (*used += (size_t)(n), NULL))
    if (c->head == BERT_HEAD_MODERNBERT) {
        const int nb = c->norm_bias;
        float *p[6] = {TAKE(C * C), c->head_bias ? TAKE(C) : NULL,
                       TAKE(C),     nb ? TAKE(C) : NULL,
                       TAKE(N * C), TAKE(N)};
        int rc = copy_tensor(m->file, path, "head.dense.weight", C, C, p[0], err, err_len);
        if (!rc && c->head_bias)
            rc = copy_tensor(m->file, path, "head.dense.bias", C, 0, p[1], err, err_len);
        rc = rc ? rc : copy_tensor(m->file, path, "head.norm.weight", C, 0, p[2], err, err_len);
        if (!rc && nb)
            rc = copy_tensor(m->file, path, "head.norm.bias", C, 0, p[3], err, err_len);
        rc = rc ? rc : copy_tensor(m->file, path, "classifier.weight", N, C, p[4], err, err_len);
        rc = rc ? rc : copy_tensor(m->file, path, "classifier.bias", N, 0, p[5], err, err_len);
        if (rc)
            return rc;
        m->head_w1 = p[0];
        m->head_b1 = p[1];
        m->head_ln_w = p[2];
        m->head_ln_b = p[3];
        m->head_w2 = p[4];
        m->head_b2 = p[5];
    } else if (c->head != BERT_HEAD_NONE) {
        char w1[96], b1[96];
        const char *w2 =
            c->head == BERT_HEAD_POOLER ? "classifier.weight" : "classifier.out_proj.weight";
        const char *b2 =
            c->head == BERT_HEAD_POOLER ? "classifier.bias" : "classifier.out_proj.bias";
        if (c->head == BERT_HEAD_POOLER) {
            snprintf(w1, sizeof w1, "%spooler.dense.weight", prefix);
            snprintf(b1, sizeof b1, "%spooler.dense.bias", prefix);
        } else {
            snprintf(w1, sizeof w1, "classifier.dense.weight");
            snprintf(b1, sizeof b1, "classifier.dense.bias");
        }
        float *p[4] = {TAKE(C * C), TAKE(C), TAKE(N * C), TAKE(N)};
        int rc = copy_tensor(m->file, path, w1, C, C, p[0], err, err_len);
        rc = rc ? rc : copy_tensor(m->file, path, b1, C, 0, p[1], err, err_len);
        rc = rc ? rc : copy_tensor(m->file, path, w2, N, C, p[2], err, err_len);
        rc = rc ? rc : copy_tensor(m->file, path, b2, N, 0, p[3], err, err_len);
        if (rc)
            return rc;
        m->head_w1 = p[0];
        m->head_b1 = p[1];
        m->head_w2 = p[2];
        m->head_b2 = p[3];
    }
    for (int i = 0; i < c->ndense; i++) {
        const bert_dense *d = &c->dense[i];
        char dpath[4096], why[512];
        snprintf(dpath, sizeof dpath, "%s/%s/model.safetensors", dir, d->path);
        st_file *f;
        const int st = st_open(dpath, &f, why, sizeof why);
        if (st < 0) {
            char bin[4096];
            snprintf(bin, sizeof bin, "%s/%s/pytorch_model.bin", dir, d->path);
            FILE *pb = fopen(bin, "rb");
            if (pb) {
                fclose(pb);
                return bert_fail(
                    BERT_EUNSUPPORTED, err, err_len,
                    "%s: Dense weights in pytorch_model.bin are not supported; save the "
                    "model again with sentence-transformers to get model.safetensors",
                    bin);
            }
            return bert_fail(st == ST_EIO ? BERT_EIO : BERT_EFORMAT, err, err_len, "%s", why);
        }
        float *w = TAKE((int64_t)d->out_features * d->in_features);
        float *b = d->bias ? TAKE(d->out_features) : NULL;
        int rc = copy_tensor(f, dpath, "linear.weight", d->out_features, d->in_features, w, err,
                             err_len);
        if (!rc && d->bias)
            rc = copy_tensor(f, dpath, "linear.bias", d->out_features, 0, b, err, err_len);
        st_close(f);
        if (rc)
            return rc;
        m->dense[i].w = w;
        m->dense[i].b = b;
    }
#undef TAKE
    return BERT_OK;
}

static int load_extras(bert_model *m, const char *dir, const char *prefix, char *err,
                       size_t err_len) {
    const bert_config *c = &m->cfg;
    m->scratch_dim = c->hidden_size > c->num_labels ? c->hidden_size : c->num_labels;
    for (int i = 0; i < c->ndense; i++)
        if (c->dense[i].out_features > m->scratch_dim)
            m->scratch_dim = c->dense[i].out_features;
    size_t n = 0;
    int rc = bind_extras(m, dir, prefix, NULL, &n, err, err_len);
    if (rc || n == 0)
        return rc;
    m->extra = malloc(n * sizeof(float));
    if (!m->extra)
        return bert_fail(BERT_ENOMEM, err, err_len, "cannot allocate the head's weights");
    m->extra_floats = n;
    return bind_extras(m, dir, prefix, m->extra, &n, err, err_len);
}

/* Each linear layer's (N, K): output and input widths. */
static void linear_dims(const bert_config *c, int *N, int *K) {
    const int C = c->hidden_size, F = c->intermediate_size, AO = (int)attn_width(c);
    N[BERT_LINEAR_QKV] = (int)qkv_rows(c);
    K[BERT_LINEAR_QKV] = C;
    N[BERT_LINEAR_ATTN_OUT] = C;
    K[BERT_LINEAR_ATTN_OUT] = AO;
    N[BERT_LINEAR_FFN_IN] = (int)ffn_rows(c);
    K[BERT_LINEAR_FFN_IN] = C;
    N[BERT_LINEAR_FFN_OUT] = C;
    K[BERT_LINEAR_FFN_OUT] = F;
}

/* Packs every layer's linear layers for precisions p; smooth, when not
 * NULL, holds per layer and GEMM the smoothing vectors (laid out as
 * bert_workspace.calib). */
static int pack_with(bert_model *m, const gemm_precision *p, const float *smooth,
                     const float *alpha, char *err, size_t err_len) {
    const int S = calib_stride(&m->cfg);
    int N[BERT_NLINEAR], K[BERT_NLINEAR];
    linear_dims(&m->cfg, N, K);
    m->packed_bytes = 0;
    for (int l = 0; l < m->cfg.num_layers; l++) {
        bert_layer *w = &m->layers[l];
        const float *s[BERT_NLINEAR] = {NULL};
        for (int i = 0; smooth && i < BERT_NLINEAR; i++)
            if (alpha[i] > 0.0f)
                s[i] = smooth + ((size_t)l * BERT_NLINEAR + i) * (size_t)S;
        char why[256] = "";
        enum { lq = BERT_LINEAR_QKV, la = BERT_LINEAR_ATTN_OUT, li = BERT_LINEAR_FFN_IN };
        enum { lo = BERT_LINEAR_FFN_OUT };
        if (gemm_pack_smoothed(p[lq], w->qkv_w, w->qkv_b, s[lq], N[lq], K[lq], &w->qkv, why,
                               sizeof why) ||
            gemm_pack_smoothed(p[la], w->attn_o_w, w->attn_o_b, s[la], N[la], K[la], &w->attn_o,
                               why, sizeof why) ||
            gemm_pack_smoothed(p[li], w->ffn_in_w, w->ffn_in_b, s[li], N[li], K[li], &w->ffn_in,
                               why, sizeof why) ||
            gemm_pack_smoothed(p[lo], w->ffn_out_w, w->ffn_out_b, s[lo], N[lo], K[lo], &w->ffn_out,
                               why, sizeof why))
            return bert_fail(BERT_ENOMEM, err, err_len, "layer %d: cannot pack the %s weights: %s",
                             l, gemm_precision_name(m->precision), why);
        m->packed_bytes += gemm_weights_bytes(w->qkv) + gemm_weights_bytes(w->attn_o) +
                           gemm_weights_bytes(w->ffn_in) + gemm_weights_bytes(w->ffn_out);
    }
    return BERT_OK;
}

static void unpack(bert_model *m) {
    for (int l = 0; l < m->cfg.num_layers; l++) {
        bert_layer *w = &m->layers[l];
        gemm_free(w->qkv);
        gemm_free(w->attn_o);
        gemm_free(w->ffn_in);
        gemm_free(w->ffn_out);
        w->qkv = w->attn_o = w->ffn_in = w->ffn_out = NULL;
    }
}

/* The calibration batch: CALIB_SEQS sequences of CALIB_LEN tokens, word
 * pieces drawn by a fixed LCG from the ids past the specials, framed by the
 * special tokens the model's tokenizer adds (bert_config_frame). */
#define CALIB_SEQS 8
#define CALIB_LEN  64

/* smooth = a^α / w^(1−α) per GEMM input channel (see bert_plan), from one
 * fp32 forward over the calibration batch. */
static int calibrate(bert_model *m, const char *dir, const float *alpha, float *smooth, char *err,
                     size_t err_len) {
    const int L = m->cfg.num_layers;
    const int V = m->cfg.vocab_size, S = calib_stride(&m->cfg);
    const int len = CALIB_LEN < m->cfg.max_positions ? CALIB_LEN : m->cfg.max_positions;
    const gemm_precision fp32[BERT_NLINEAR] = {GEMM_FP32, GEMM_FP32, GEMM_FP32, GEMM_FP32};
    int rc = pack_with(m, fp32, NULL, NULL, err, err_len);
    /* The plain reference attention: calibration wants the model's
     * activations, not any fast backend's. */
    const attn_backend *be = &attn_backend_naive;
    bert_workspace *ws = NULL;
    if (!rc)
        rc = bert_workspace_create(m, CALIB_SEQS * len, 1, &be, 1, &ws, err, err_len);
    int32_t ids[CALIB_SEQS * CALIB_LEN], cu[CALIB_SEQS + 1];
    float *out = malloc(sizeof(float) * (size_t)CALIB_SEQS * (size_t)m->cfg.output_dim);
    if (!rc && !out)
        rc = bert_fail(BERT_ENOMEM, err, err_len, "out of memory");
    if (!rc) {
        uint32_t r = 12345u;
        const int first = V > 1000 ? 1000 : 0;
        for (int b = 0; b <= CALIB_SEQS; b++)
            cu[b] = b * len;
        for (int t = 0; t < CALIB_SEQS * len; t++) {
            r = r * 1664525u + 1013904223u;
            ids[t] = first + (int32_t)((r >> 8) % (uint32_t)(V - first));
        }
        /* Each sequence framed as the tokenizer frames it: its first token
         * (an attention sink) carries the largest activations, so a batch
         * without the model's own specials under-estimates exactly those. */
        bert_frame f;
        bert_config_frame(dir, &m->cfg, &f);
        for (int b = 0; f.nlead + f.ntrail < len && b < CALIB_SEQS; b++) {
            memcpy(ids + b * len, f.lead, (size_t)f.nlead * sizeof *ids);
            memcpy(ids + (b + 1) * len - f.ntrail, f.trail, (size_t)f.ntrail * sizeof *ids);
        }
        memset(smooth, 0, sizeof(float) * (size_t)L * BERT_NLINEAR * S);
        ws->calib = smooth; /* forward fills it with the activation maxima */
        rc = bert_forward(m, ws, be, &attn_parallel_serial, ids, cu, CALIB_SEQS, out, err, err_len);
        ws->calib = NULL;
    }
    for (int l = 0; !rc && l < L; l++) {
        const bert_layer *w = &m->layers[l];
        const float *wt[BERT_NLINEAR] = {w->qkv_w, w->attn_o_w, w->ffn_in_w, w->ffn_out_w};
        int N[BERT_NLINEAR], K[BERT_NLINEAR];
        linear_dims(&m->cfg, N, K);
        for (int i = 0; i < BERT_NLINEAR; i++) {
            float *s = smooth + ((size_t)l * BERT_NLINEAR + i) * (size_t)S;
            for (int k = 0; k < K[i]; k++) {
                float wmax = 0.0f;
                for (int n = 0; n < N[i]; n++)
                    wmax = fmaxf(wmax, fabsf(wt[i][(size_t)n * K[i] + k]));
                const float v =
                    powf(fmaxf(s[k], 1e-5f), alpha[i]) / powf(fmaxf(wmax, 1e-5f), 1.0f - alpha[i]);
                s[k] = v > 0.0f && isfinite(v) ? v : 1.0f;
            }
        }
    }
    free(out);
    bert_workspace_free(ws);
    unpack(m);
    return rc;
}

/* Packs the linear layers as m->plan says, calibrating first for smoothing. */
static int pack_layers(bert_model *m, const char *dir, char *err, size_t err_len) {
    int smoothed = 0;
    for (int i = 0; i < BERT_NLINEAR; i++)
        smoothed |= m->plan.p[i] == GEMM_INT8 && m->plan.alpha[i] > 0.0f;
    if (!smoothed)
        return pack_with(m, m->plan.p, NULL, NULL, err, err_len);
    float *smooth = malloc(sizeof(float) * (size_t)m->cfg.num_layers * BERT_NLINEAR *
                           (size_t)calib_stride(&m->cfg));
    if (!smooth)
        return bert_fail(BERT_ENOMEM, err, err_len, "out of memory");
    int rc = calibrate(m, dir, m->plan.alpha, smooth, err, err_len);
    if (!rc)
        rc = pack_with(m, m->plan.p, smooth, m->plan.alpha, err, err_len);
    free(smooth);
    return rc;
}

static uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1);          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* Copies n floats to dst and returns dst + n; a NULL *src (a vector the
 * family lacks) takes nothing. */
static float *take(float *dst, const float **src, size_t n) {
    if (!*src)
        return dst;
    memcpy(dst, *src, n * sizeof *dst);
    *src = dst;
    return dst + n;
}

/* The model's fp32 vectors that outlive the mapping (token types, norms),
 * each with its length: what compact_weights copies. Returns the count. */
static size_t vector_list(bert_model *m, const float ***v, size_t *len) {
    const bert_config *c = &m->cfg;
    const size_t C = (size_t)c->hidden_size;
    size_t n = 0;
#define VEC(p, count) (v[n] = (p), len[n++] = (count))
    VEC(&m->wtt, (c->token_type_table ? (size_t)c->type_vocab_size : 0) * C);
    VEC(&m->emb_ln_w, C);
    VEC(&m->emb_ln_b, C);
    VEC(&m->final_w, C);
    VEC(&m->final_b, C);
    for (int l = 0; l < c->num_layers; l++) {
        bert_layer *w = &m->layers[l];
        VEC(&w->ln1_w, C);
        VEC(&w->ln1_b, C);
        VEC(&w->ln2_w, C);
        VEC(&w->ln2_b, C);
        VEC(&w->q_norm_w, (size_t)c->head_dim);
        VEC(&w->k_norm_w, (size_t)c->head_dim);
        VEC(&w->ln1p_w, C);
        VEC(&w->ln2p_w, C);
    }
#undef VEC
    return n;
}
#define VECTORS_FIXED     5
#define VECTORS_PER_LAYER 8

/* After a reduced precision has packed the linear layers, the model keeps
 * nothing of the file: the embedding tables move to bf16 (a lookup widens a
 * row exactly, and the tables then weigh what the linear layers do), the
 * vectors (LayerNorms, token type) are copied in fp32, and the mapping and
 * the fp32 copies are released. That is what halves the weight memory. */
static int compact_weights(bert_model *m, char *err, size_t err_len) {
    const bert_config *c = &m->cfg;
    const size_t C = (size_t)c->hidden_size, L = (size_t)c->num_layers;
    const size_t V = (size_t)c->vocab_size;
    const size_t P = m->wpe ? (size_t)c->max_positions + c->position_offset : 0;
    const size_t nmax = VECTORS_FIXED + VECTORS_PER_LAYER * L;
    const float ***vp = malloc(nmax * sizeof *vp);
    size_t *vlen = malloc(nmax * sizeof *vlen);
    size_t nvec = 0;
    const size_t nv = vp && vlen ? vector_list(m, vp, vlen) : 0;
    for (size_t i = 0; i < nv; i++)
        nvec += *vp[i] ? vlen[i] : 0;
    float *vec = aligned_alloc(64, (nvec * sizeof(float) + 63) / 64 * 64 + 64);
    uint16_t *emb = aligned_alloc(64, ((V + P) * C * sizeof(uint16_t) + 63) / 64 * 64);
    if (!vp || !vlen || !vec || !emb) {
        free(vp);
        free(vlen);
        free(vec);
        free(emb);
        return bert_fail(BERT_ENOMEM, err, err_len, "cannot allocate the bf16 embedding tables");
    }
    for (size_t i = 0; i < V * C; i++)
        emb[i] = float_to_bf16(m->wte[i]);
    for (size_t i = 0; i < P * C; i++) /* P 0: no position table */
        emb[V * C + i] = float_to_bf16(m->wpe[i]);
    float *v = vec;
    for (size_t i = 0; i < nv; i++)
        v = take(v, vp[i], vlen[i]);
    free(vp);
    free(vlen);
    for (size_t l = 0; l < L; l++) {
        bert_layer *w = &m->layers[l];
        /* Packed: the fp32 tensors are about to go. */
        w->qkv_w = w->qkv_b = w->attn_o_w = w->attn_o_b = NULL;
        w->ffn_in_w = w->ffn_in_b = w->ffn_out_w = w->ffn_out_b = NULL;
    }
    m->wte = m->wpe = NULL;
    m->rel_table = NULL; /* expanded into rel_bias at load */
    m->wte16 = emb;
    m->wpe16 = P ? emb + V * C : NULL;
    m->emb16 = emb;
    m->emb16_count = (V + P) * C;
    free(m->owned);
    m->owned = vec;
    m->owned_floats = nvec;
    st_close(m->file);
    m->file = NULL;
    return BERT_OK;
}

/* The attention contract's relative position bias, [H][2·P − 1] for
 * rel_span P = max_positions, from the bucket table: made once here, so a
 * forward only points at it, and any batch's distances (< P) are in it. */
static int make_rel_bias(bert_model *m, char *err, size_t err_len) {
    const bert_config *c = &m->cfg;
    if (c->pos_attn != ENC_POS_ATTN_BUCKETS)
        return BERT_OK;
    m->rel_bias_floats = (size_t)c->num_heads * (2 * (size_t)c->max_positions - 1);
    m->rel_bias = malloc(m->rel_bias_floats * sizeof(float));
    if (!m->rel_bias)
        return bert_fail(BERT_ENOMEM, err, err_len, "cannot allocate the relative position bias");
    enc_pos_bucket_bias(&c->pos_buckets, m->rel_table, c->num_heads, c->max_positions, m->rel_bias);
    return BERT_OK;
}

/* RoPE's tables for the full-attention θ and, when it differs, the
 * sliding layers' θ; and the zero bias of a LayerNorm without one. Made
 * once here; every position below max_positions is in them. */
static int make_rope(bert_model *m, char *err, size_t err_len) {
    const bert_config *c = &m->cfg;
    if (c->norm == ENC_NORM_LAYER && !c->norm_bias) {
        m->zeros = calloc((size_t)c->hidden_size, sizeof(float));
        if (!m->zeros)
            return bert_fail(BERT_ENOMEM, err, err_len, "out of memory");
    }
    if (!c->rope)
        return BERT_OK;
    const int two = c->rope_theta[1] != c->rope_theta[0];
    for (int i = 0; i <= two; i++) {
        if (enc_rope_init(&m->rope[i], c->rope_theta[i], c->max_positions, c->head_dim) < 0)
            return bert_fail(BERT_ENOMEM, err, err_len, "cannot allocate the RoPE tables");
        m->rope_floats += 2 * (size_t)c->max_positions * (size_t)(c->head_dim / 2);
    }
    if (!two)
        m->rope[1] = m->rope[0]; /* shared, freed once */
    return BERT_OK;
}

int bert_load(const char *dir, bert_model **out, char *err, size_t err_len) {
    return bert_load_precision(dir, GEMM_FP32, out, err, err_len);
}

/* What int8 means for the whole model: all four linear layers in int8, the
 * three whose inputs come from a LayerNorm or the attention smoothed with
 * α = 0.5, FFN out (input after GELU) not smoothed, which measured best.
 * Lowest cosine against fp32 on the golden inputs 0.99205 (bench_precision;
 * docs/engines.md, "int8 precision"): unsmoothed 0.98302, FFN out in fp32 0.99754 at
 * about two thirds of the speed. */
const bert_plan bert_int8_plan = {
    .p = {[BERT_LINEAR_QKV] = GEMM_INT8,
          [BERT_LINEAR_ATTN_OUT] = GEMM_INT8,
          [BERT_LINEAR_FFN_IN] = GEMM_INT8,
          [BERT_LINEAR_FFN_OUT] = GEMM_INT8},
    .alpha = {0.5f, 0.5f, 0.5f, 0.0f},
};

int bert_load_precision(const char *dir, gemm_precision precision, bert_model **out, char *err,
                        size_t err_len) {
    bert_plan plan = {.alpha = {0.0f}};
    for (int i = 0; i < BERT_NLINEAR; i++)
        plan.p[i] = precision;
    return bert_load_plan(dir, precision == GEMM_INT8 ? &bert_int8_plan : &plan, out, err, err_len);
}

int bert_load_plan(const char *dir, const bert_plan *plan, bert_model **out, char *err,
                   size_t err_len) {
    *out = NULL;
    gemm_precision lowest = GEMM_FP32;
    for (int i = 0; i < BERT_NLINEAR; i++) {
        const char *why = gemm_unsupported(plan->p[i]);
        if (why)
            return bert_fail(BERT_EUNSUPPORTED, err, err_len, "precision %s: %s",
                             gemm_precision_name(plan->p[i]), why);
        lowest = plan->p[i] > lowest ? plan->p[i] : lowest;
    }
    bert_model *m = calloc(1, sizeof *m);
    if (!m)
        return bert_fail(BERT_ENOMEM, err, err_len, "out of memory");
    m->precision = lowest;
    m->plan = *plan;
    int rc = bert_config_load(dir, &m->cfg, err, err_len);
    if (!rc) {
        m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
        rc = m->layers ? load_weights(m, dir, err, err_len)
                       : bert_fail(BERT_ENOMEM, err, err_len, "out of memory");
    }
    if (!rc)
        rc = make_rel_bias(m, err, err_len);
    if (!rc)
        rc = make_rope(m, err, err_len);
    if (!rc)
        rc = pack_layers(m, dir, err, err_len);
    /* Only when no linear layer reads the fp32 tensors in place. */
    int compact = 1;
    for (int i = 0; i < BERT_NLINEAR; i++)
        compact &= plan->p[i] != GEMM_FP32;
    if (!rc && compact)
        rc = compact_weights(m, err, err_len);
    if (rc) {
        bert_free(m);
        return rc;
    }
    /* The GEMMs are split across the service's pool (see the top of this
     * file); OpenBLAS threads on top of that would oversubscribe the cores. */
    openblas_set_num_threads(1);
    *out = m;
    return BERT_OK;
}

void bert_free(bert_model *m) {
    if (!m)
        return;
    for (int l = 0; m->layers && l < m->cfg.num_layers; l++) {
        gemm_free(m->layers[l].qkv);
        gemm_free(m->layers[l].attn_o);
        gemm_free(m->layers[l].ffn_in);
        gemm_free(m->layers[l].ffn_out);
    }
    st_close(m->file);
    free(m->emb16);
    free(m->layers);
    free(m->owned);
    free(m->extra);
    free(m->rel_bias);
    free(m->zeros);
    if (m->rope[1].cos != m->rope[0].cos)
        enc_rope_free(&m->rope[1]);
    enc_rope_free(&m->rope[0]);
    free(m);
}

const bert_config *bert_get_config(const bert_model *m) {
    return &m->cfg;
}
gemm_precision bert_precision(const bert_model *m) {
    return m->precision;
}
size_t bert_owned_bytes(const bert_model *m) {
    return m->owned_floats * sizeof(float) + m->emb16_count * sizeof(uint16_t) + m->packed_bytes +
           (m->extra_floats + m->rel_bias_floats + m->rope_floats) * sizeof(float) +
           (m->zeros ? (size_t)m->cfg.hidden_size * sizeof(float) : 0);
}
size_t bert_mapped_bytes(const bert_model *m) {
    return m->file ? st_file_bytes(m->file) : 0;
}

/* 1 when any layer runs sliding-window attention. */
static int any_sliding(const bert_config *c) {
    for (int l = 0; c->window > 0 && l < c->num_layers; l++)
        if (c->sliding[l])
            return 1;
    return 0;
}

attn_shape bert_attn_shape(const bert_config *c, int max_tokens) {
    return (attn_shape){
        .batch = max_tokens,
        .total_tokens = max_tokens,
        .max_seqlen = max_tokens < c->max_positions ? max_tokens : c->max_positions,
        .heads = c->num_heads,
        .head_dim = c->head_dim,
        .causal = c->causal,
        .rel_bias = c->pos_attn != ENC_POS_ATTN_NONE,
        .kv_heads = c->num_kv_heads == c->num_heads ? 0 : c->num_kv_heads,
        .window = any_sliding(c) ? c->window : 0,
    };
}

/* bert.c — BERT weights arranged for GEMMs, and the encoder forward pass on a
 * packed varlen batch.
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
 * Pre-norm families (ModernBERT) compose the same GEMMs otherwise: each
 * sublayer's input is normalised into a buffer of its own (blocks.h), the
 * sublayer's output is added to the residual stream in the out-projection's
 * epilogue, and RoPE rotates Q and K in the fused projection before
 * attention (position.h). Q is H·D wide and K, V Hkv·D each; a fused
 * checkpoint tensor (ModernBERT's Wqkv, Wi) is used as it is stored. */
#include "bert.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backends.h"
#include "kernels/gemm.h"
#include "safetensors.h"

/* ---- weights ------------------------------------------------------------------ */

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
    const float *head_w1, *head_b1; /* (C, C), (C): pooler / classifier.dense */
    const float *head_w2, *head_b2; /* (N, C), (N): classifier / classifier.out_proj */
    struct {
        const float *w, *b; /* (out, in), (out) or NULL without bias */
    } dense[BERT_MAX_DENSE];
    int scratch_dim; /* the widest vector pooling, Dense or a head produces */
};

static int fail(int code, char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

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
        ld->rc =
            fail(BERT_EFORMAT, ld->err, ld->err_len, "%s: tensor %s is missing", ld->path, full);
        return NULL;
    }
    const int ndim = cols ? 2 : 1;
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
        ld->rc = fail(BERT_EUNSUPPORTED, ld->err, ld->err_len,
                      "%s: tensor %s has dtype %s; weights must be F32, F16 or BF16", ld->path,
                      full, st_dtype_name(t->dtype));
        return NULL;
    }
    if (t->ndim != ndim || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        ld->rc = fail(BERT_EFORMAT, ld->err, ld->err_len,
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
};

/* The widths of a layer's projections (see bert_layer). */
static int64_t qkv_rows(const bert_config *c) {
    return (int64_t)(c->num_heads + 2 * c->num_kv_heads) * c->head_dim;
}
static int64_t attn_width(const bert_config *c) {
    return (int64_t)c->num_heads * c->head_dim;
}
static int64_t ffn_rows(const bert_config *c) {
    return (enc_mlp_gated(c->mlp) ? 2 : 1) * (int64_t)c->intermediate_size;
}

/* A norm's weight and, when the family's norms have one, its bias. */
static int bind_norm(loader *ld, const bert_config *c, const float **w, const float **b,
                     const char *name) {
    char n[192];
    snprintf(n, sizeof n, "%s.weight", name);
    int rc = bind(ld, w, n, c->hidden_size, 0);
    *b = NULL;
    if (!rc && c->norm == ENC_NORM_LAYER && c->norm_bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        rc = bind(ld, b, n, c->hidden_size, 0);
    }
    return rc;
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
        return fail(BERT_EIO, err, err_len, "%s: path too long", dir);
    char why[512];
    const int st = st_open(path, &m->file, why, sizeof why);
    if (st < 0)
        return fail(st == ST_EIO ? BERT_EIO : BERT_EFORMAT, err, err_len, "%s", why);
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

    if (bind_all(&ld, m) < 0)
        return ld.rc;
    m->owned_floats = ld.used;
    m->owned = aligned_alloc(64, (ld.used * sizeof(float) + 63) / 64 * 64);
    if (!m->owned)
        return fail(BERT_ENOMEM, err, err_len, "%s: cannot allocate %zu bytes of weights", path,
                    ld.used * sizeof(float));
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
    if (c->head != BERT_HEAD_NONE) {
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
                return fail(BERT_EUNSUPPORTED, err, err_len,
                            "%s: Dense weights in pytorch_model.bin are not supported; save the "
                            "model again with sentence-transformers to get model.safetensors",
                            bin);
            }
            return fail(st == ST_EIO ? BERT_EIO : BERT_EFORMAT, err, err_len, "%s", why);
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
        return fail(BERT_ENOMEM, err, err_len, "cannot allocate the head's weights");
    m->extra_floats = n;
    return bind_extras(m, dir, prefix, m->extra, &n, err, err_len);
}

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

/* Floats per (layer, GEMM) slot of the calibration record: the widest input. */
static int calib_stride(const bert_config *c) {
    const int a = (int)attn_width(c), w = c->intermediate_size > a ? c->intermediate_size : a;
    return w > c->hidden_size ? w : c->hidden_size;
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
            return fail(BERT_ENOMEM, err, err_len, "layer %d: cannot pack the %s weights: %s", l,
                        gemm_precision_name(m->precision), why);
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

/* The calibration batch: CALIB_SEQS sequences of CALIB_LEN tokens, [CLS]
 * (101 in BERT's WordPiece vocabulary), word pieces drawn by a fixed LCG from
 * the ids past the specials, [SEP] (102). */
#define CALIB_SEQS 8
#define CALIB_LEN  64

/* smooth = a^α / w^(1−α) per GEMM input channel (see bert_plan), from one
 * fp32 forward over the calibration batch. */
static int calibrate(bert_model *m, const float *alpha, float *smooth, char *err, size_t err_len) {
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
        rc = fail(BERT_ENOMEM, err, err_len, "out of memory");
    if (!rc) {
        uint32_t r = 12345u;
        const int first = V > 1000 ? 1000 : 0;
        for (int b = 0; b <= CALIB_SEQS; b++)
            cu[b] = b * len;
        for (int t = 0; t < CALIB_SEQS * len; t++) {
            r = r * 1664525u + 1013904223u;
            ids[t] = first + (int32_t)((r >> 8) % (uint32_t)(V - first));
            /* Each sequence framed as the tokenizer frames it, whose first
             * token carries the largest activations: BERT's [CLS] 101 and
             * [SEP] 102, RoBERTa's and XLM-R's <s> 0 and </s> 2. */
            const int roberta = m->cfg.position_offset > 0;
            if (V > 102 && t % len == 0)
                ids[t] = roberta ? 0 : 101;
            else if (V > 102 && t % len == len - 1)
                ids[t] = roberta ? 2 : 102;
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
static int pack_layers(bert_model *m, char *err, size_t err_len) {
    int smoothed = 0;
    for (int i = 0; i < BERT_NLINEAR; i++)
        smoothed |= m->plan.p[i] == GEMM_INT8 && m->plan.alpha[i] > 0.0f;
    if (!smoothed)
        return pack_with(m, m->plan.p, NULL, NULL, err, err_len);
    float *smooth = malloc(sizeof(float) * (size_t)m->cfg.num_layers * BERT_NLINEAR *
                           (size_t)calib_stride(&m->cfg));
    if (!smooth)
        return fail(BERT_ENOMEM, err, err_len, "out of memory");
    int rc = calibrate(m, m->plan.alpha, smooth, err, err_len);
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
    }
#undef VEC
    return n;
}
#define VECTORS_FIXED     5
#define VECTORS_PER_LAYER 4

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
        return fail(BERT_ENOMEM, err, err_len, "cannot allocate the bf16 embedding tables");
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
        return fail(BERT_ENOMEM, err, err_len, "cannot allocate the relative position bias");
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
            return fail(BERT_ENOMEM, err, err_len, "out of memory");
    }
    if (!c->rope)
        return BERT_OK;
    const int two = c->rope_theta[1] != c->rope_theta[0];
    for (int i = 0; i <= two; i++) {
        if (enc_rope_init(&m->rope[i], c->rope_theta[i], c->max_positions, c->head_dim) < 0)
            return fail(BERT_ENOMEM, err, err_len, "cannot allocate the RoPE tables");
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
            return fail(BERT_EUNSUPPORTED, err, err_len, "precision %s: %s",
                        gemm_precision_name(plan->p[i]), why);
        lowest = plan->p[i] > lowest ? plan->p[i] : lowest;
    }
    bert_model *m = calloc(1, sizeof *m);
    if (!m)
        return fail(BERT_ENOMEM, err, err_len, "out of memory");
    m->precision = lowest;
    m->plan = *plan;
    int rc = bert_config_load(dir, &m->cfg, err, err_len);
    if (!rc) {
        m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
        rc = m->layers ? load_weights(m, dir, err, err_len)
                       : fail(BERT_ENOMEM, err, err_len, "out of memory");
    }
    if (!rc)
        rc = make_rel_bias(m, err, err_len);
    if (!rc)
        rc = make_rope(m, err, err_len);
    if (!rc)
        rc = pack_layers(m, err, err_len);
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

/* ---- workspace ---------------------------------------------------------------- */

const float *bert_workspace_hidden(const bert_workspace *ws) {
    return ws->x; /* pooling only reads the residual stream */
}

static size_t round64(size_t n) {
    return (n + 63) / 64 * 64;
}

int bert_workspace_create(const bert_model *m, int max_tokens, int nthreads,
                          const attn_backend *const *backends, size_t nbackends,
                          bert_workspace **out, char *err, size_t err_len) {
    *out = NULL;
    const bert_config *c = &m->cfg;
    if (max_tokens < 1 || nthreads < 1)
        return fail(BERT_EINPUT, err, err_len, "max_tokens and nthreads must be >= 1");
    const attn_shape bound = bert_attn_shape(c, max_tokens);
    /* A model with sliding-window layers runs full-attention layers too:
     * scratch for both. */
    attn_shape full = bound;
    full.window = 0;
    size_t attn_bytes = 0;
    for (size_t i = 0; i < nbackends; i++) {
        char why[256] = "";
        if (attn_backend_supports(backends[i], &bound, why, sizeof why) != ATTN_OK)
            return fail(BERT_EUNSUPPORTED, err, err_len,
                        "attention backend %s cannot run this model's batches: %s",
                        backends[i]->name, why);
        size_t b = backends[i]->workspace_size(&bound, nthreads);
        attn_bytes = b > attn_bytes ? b : attn_bytes;
        b = backends[i]->workspace_size(&full, nthreads);
        attn_bytes = b > attn_bytes ? b : attn_bytes;
    }

    size_t gemm_bytes = 0;
    for (int l = 0; l < c->num_layers; l++) {
        const bert_layer *w = &m->layers[l];
        const gemm_weights *const all[] = {w->qkv, w->attn_o, w->ffn_in, w->ffn_out};
        for (int i = 0; i < 4; i++) {
            const size_t b = gemm_scratch_bytes(all[i], max_tokens, nthreads);
            gemm_bytes = b > gemm_bytes ? b : gemm_bytes;
        }
    }

    /* The FFN activations are live only after attention's are dead, so
     * they share one region: per token max(QN + AO, G·F) floats (BERT:
     * max(3C + C, F)). */
    const size_t T = (size_t)max_tokens, C = (size_t)c->hidden_size;
    const size_t QN = (size_t)qkv_rows(c), AO = (size_t)attn_width(c), GF = (size_t)ffn_rows(c);
    const size_t shared = QN + AO > GF ? QN + AO : GF;
    const size_t sizes[] = {
        round64(T * sizeof(int32_t)),                           /* pos */
        round64((c->pre_norm ? 2 : 1) * T * C * sizeof(float)), /* x, and h pre-norm */
        round64(T * shared * sizeof(float)),                    /* qkv + att, or ffn */
        round64(attn_bytes),
        round64(gemm_bytes),
        round64((size_t)nthreads * 2 * (size_t)m->scratch_dim * sizeof(float)), /* vec */
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];

    bert_workspace *ws = calloc(1, sizeof *ws);
    void *mem = aligned_alloc(64, total);
    if (!ws || !mem) {
        free(ws);
        free(mem);
        return fail(BERT_ENOMEM, err, err_len, "cannot allocate a %zu-byte model workspace", total);
    }
    /* Touched at once, so the workspace is resident from the start rather
     * than growing with the first batch that reaches each page (a step in
     * RSS minutes into serving, and page faults on the hot path). */
    memset(mem, 0, total);
    char *p = mem;
    ws->pos = (void *)p;
    p += sizes[0];
    ws->x = (void *)p;
    ws->h = c->pre_norm ? ws->x + T * C : NULL;
    p += sizes[1];
    ws->qkv = (void *)p;
    ws->att = ws->qkv + T * QN;
    ws->ffn = (void *)p;
    p += sizes[2];
    ws->attn_ws = attn_bytes ? p : NULL;
    ws->attn_bytes = attn_bytes;
    p += sizes[3];
    ws->gemm_ws = gemm_bytes ? p : NULL;
    ws->gemm_bytes = gemm_bytes;
    p += sizes[4];
    ws->vec = (void *)p;
    ws->mem = mem;
    ws->bytes = total;
    ws->max_tokens = max_tokens;
    ws->nthreads = nthreads;
    *out = ws;
    return BERT_OK;
}

void bert_workspace_free(bert_workspace *ws) {
    if (!ws)
        return;
    free(ws->mem);
    free(ws);
}

size_t bert_workspace_bytes(const bert_workspace *ws) {
    return ws->bytes;
}
int bert_workspace_max_tokens(const bert_workspace *ws) {
    return ws->max_tokens;
}
void bert_workspace_set_raw(bert_workspace *ws, int raw) {
    ws->raw = raw != 0;
}

void bert_workspace_set_attn_tap(bert_workspace *ws, int layer, bert_attn_tap_fn fn, void *ctx) {
    ws->tap = fn;
    ws->tap_ctx = ctx;
    ws->tap_layer = layer;
}

const bert_stage_ns *bert_workspace_stage_ns(const bert_workspace *ws) {
    return &ws->stages;
}

/* Monotonic nanoseconds, for the stage times. */
static uint64_t stage_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- layers (each one parallel loop on the pool) ------------------------------- */

/* Splits [0, n) into ntasks near-equal blocks; task i gets [*lo, *hi). */
static void block(size_t n, size_t ntasks, size_t i, size_t *lo, size_t *hi) {
    *lo = n * i / ntasks;
    *hi = n * (i + 1) / ntasks;
}

/* Elementwise loops get a few blocks per worker so a slow worker is evened
 * out by the pool's dynamic hand-out. */
static size_t row_tasks(const attn_parallel *par, size_t rows) {
    size_t n = (size_t)par->nthreads * 4;
    return n < rows ? n : rows;
}

static float bf16_to_float(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

typedef struct embed_ctx {
    const bert_model *m;
    const int32_t *ids;   /* (T) */
    const int32_t *types; /* (T) or NULL: all type 0 */
    const int32_t *pos;   /* (T) */
    float *x;             /* (T, C) */
    size_t T, ntasks;
} embed_ctx;

/* x[t] = LayerNorm(wte[id] + wtt[type] + wpe[pos]), summed in PyTorch's order;
 * without a position table (RoPE) or a type table the terms are left out,
 * without an embedding norm (emb_ln_w NULL) the sum is x. */
static void embed_task(void *arg, size_t task, int worker) {
    (void)worker;
    const embed_ctx *c = arg;
    const bert_model *m = c->m;
    const int C = m->cfg.hidden_size;
    size_t t0, t1;
    block(c->T, c->ntasks, task, &t0, &t1);
    for (size_t t = t0; t < t1; t++) {
        float *xt = c->x + t * C; /* (C) */
        /* (C), or NULL without a token type table (MPNet: word + position) */
        const float *tt = m->wtt ? m->wtt + (c->types ? (size_t)c->types[t] * C : 0) : NULL;
        if (m->wte16 && !m->wpe16) {
            const uint16_t *we = m->wte16 + (size_t)c->ids[t] * C; /* (C) */
            for (int i = 0; i < C; i++)
                xt[i] = bf16_to_float(we[i]) + (tt ? tt[i] : 0.0f);
        } else if (m->wte16) {
            const uint16_t *we = m->wte16 + (size_t)c->ids[t] * C; /* (C) */
            const uint16_t *pe = m->wpe16 + (size_t)c->pos[t] * C; /* (C) */
            for (int i = 0; i < C; i++)
                xt[i] = (bf16_to_float(we[i]) + (tt ? tt[i] : 0.0f)) + bf16_to_float(pe[i]);
        } else if (!m->wpe) {
            const float *we = m->wte + (size_t)c->ids[t] * C; /* (C) */
            for (int i = 0; i < C; i++)
                xt[i] = we[i] + (tt ? tt[i] : 0.0f);
        } else {
            const float *we = m->wte + (size_t)c->ids[t] * C; /* (C) */
            const float *pe = m->wpe + (size_t)c->pos[t] * C; /* (C) */
            for (int i = 0; i < C; i++)
                xt[i] = (we[i] + (tt ? tt[i] : 0.0f)) + pe[i];
        }
        if (m->emb_ln_w)
            enc_norm_row(m->cfg.norm, xt, xt, m->emb_ln_w, m->emb_ln_b ? m->emb_ln_b : m->zeros, C,
                         m->cfg.layer_norm_eps);
    }
}

typedef struct pool_ctx {
    const bert_model *m;
    int normalize;
    const float *x;    /* (T, C) */
    const int32_t *cu; /* (B + 1) */
    float *vec;        /* (nthreads, 2, scratch_dim) */
    float *out;        /* (B, output_dim) */
} pool_ctx;

/* y (n) = act(W x + b) with W (n, k) as PyTorch stores it, summed in double. */
static void linear_vec(const float *w, const float *bias, const float *x, int k, int n, float *y,
                       int tanh_act) {
    for (int r = 0; r < n; r++) {
        const float *wr = w + (size_t)r * k;
        double acc = 0.0;
        for (int i = 0; i < k; i++)
            acc += (double)wr[i] * x[i];
        float v = (float)acc + (bias ? bias[r] : 0.0f);
        y[r] = tanh_act ? tanhf(v) : v;
    }
}

/* One sequence into its pooled vector o (C): the mode of the Pooling
 * module. */
static void pool_seq(const bert_config *cfg, const float *xs, int32_t len, float *o) {
    const int C = cfg->hidden_size;
    if (cfg->pooling == BERT_POOL_CLS || cfg->pooling == BERT_POOL_LASTTOKEN) {
        const int32_t t = cfg->pooling == BERT_POOL_CLS ? 0 : len - 1;
        memcpy(o, xs + (size_t)t * C, (size_t)C * sizeof *o);
        return;
    }
    if (cfg->pooling == BERT_POOL_MAX) {
        memcpy(o, xs, (size_t)C * sizeof *o);
        for (int32_t t = 1; t < len; t++)
            for (int i = 0; i < C; i++)
                o[i] = fmaxf(o[i], xs[(size_t)t * C + i]);
        return;
    }
    /* Mean or mean over sqrt(len): sums in double, a slice of columns at a
     * time, walking the tokens row by row so the reads stay contiguous. */
    const double den = cfg->pooling == BERT_POOL_MEAN ? (double)len : sqrt((double)len);
    enum { SLICE = 64 };
    for (int i0 = 0; i0 < C; i0 += SLICE) {
        const int n = C - i0 < SLICE ? C - i0 : SLICE;
        double acc[SLICE] = {0};
        for (int32_t t = 0; t < len; t++)
            for (int i = 0; i < n; i++)
                acc[i] += xs[(size_t)t * C + i0 + i];
        for (int i = 0; i < n; i++)
            o[i0 + i] = (float)(acc[i] / den);
    }
}

/* One sequence: a classifier's logits from its first token, or an
 * embedder's pooled vector through the Dense modules, then, unless the
 * workspace is raw, L2 normalisation (bert_l2_normalize). */
static void pool_task(void *arg, size_t b, int worker) {
    const pool_ctx *c = arg;
    const bert_model *m = c->m;
    const bert_config *cfg = &m->cfg;
    const int C = cfg->hidden_size, D = cfg->output_dim;
    const int32_t start = c->cu[b], len = c->cu[b + 1] - start;
    const float *xs = c->x + (size_t)start * C; /* (len, C) the sequence's tokens */
    float *o = c->out + b * (size_t)D;          /* (D) */
    float *v0 = c->vec + (size_t)worker * 2 * m->scratch_dim, *v1 = v0 + m->scratch_dim;
    if (cfg->head != BERT_HEAD_NONE) {
        linear_vec(m->head_w1, m->head_b1, xs, C, C, v0, 1);
        linear_vec(m->head_w2, m->head_b2, v0, C, cfg->num_labels, o, 0);
        return;
    }
    if (cfg->ndense == 0) {
        pool_seq(cfg, xs, len, o);
    } else {
        pool_seq(cfg, xs, len, v0);
        for (int i = 0; i < cfg->ndense; i++) {
            const bert_dense *d = &cfg->dense[i];
            float *y = i == cfg->ndense - 1 ? o : v1;
            linear_vec(m->dense[i].w, m->dense[i].b, v0, d->in_features, d->out_features, y,
                       d->act == BERT_ACT_TANH);
            float *swap = v0;
            v0 = v1;
            v1 = swap;
        }
    }
    if (c->normalize)
        bert_l2_normalize(o, D);
}

void bert_l2_normalize(float *v, int n) {
    double norm = 0.0;
    for (int i = 0; i < n; i++)
        norm += (double)v[i] * v[i];
    norm = sqrt(norm);
    const float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
    for (int i = 0; i < n; i++)
        v[i] *= inv;
}

/* ---- forward ------------------------------------------------------------------- */

/* Checks the batch and fills pos (T) with each token's position. */
static int check_batch(const bert_model *m, bert_workspace *ws, const int32_t *ids,
                       const int32_t *types, const int32_t *cu, int B, int32_t *max_len, char *err,
                       size_t err_len) {
    const bert_config *c = &m->cfg;
    if (!ids || !cu || B < 1)
        return fail(BERT_EINPUT, err, err_len, "empty batch or missing ids / cu_seqlens");
    if (cu[0] != 0)
        return fail(BERT_EINPUT, err, err_len, "cu_seqlens[0] must be 0");
    *max_len = 0;
    for (int b = 0; b < B; b++) {
        if (cu[b + 1] <= cu[b] || cu[b + 1] > ws->max_tokens)
            return fail(BERT_EINPUT, err, err_len,
                        "sequence %d: empty, or the batch exceeds the workspace's %d tokens", b,
                        ws->max_tokens);
        const int32_t len = cu[b + 1] - cu[b];
        if (len > c->max_positions)
            return fail(BERT_EINPUT, err, err_len,
                        "sequence %d has %d tokens; the model takes at most %d", b, len,
                        c->max_positions);
        *max_len = len > *max_len ? len : *max_len;
        /* BERT: 0, 1, 2, ... RoBERTa: offset, offset + 1, ... counting only
         * tokens that are not the padding id, which itself sits at position
         * padding_idx (create_position_ids_from_input_ids). */
        int32_t next = c->position_offset;
        for (int32_t i = 0; i < len; i++) {
            const int32_t id = ids[cu[b] + i];
            if (id < 0 || id >= c->vocab_size)
                return fail(BERT_EINPUT, err, err_len,
                            "sequence %d token %d: id %d outside the vocabulary [0, %d)", b, i, id,
                            c->vocab_size);
            if (types && (types[cu[b] + i] < 0 || types[cu[b] + i] >= c->type_vocab_size))
                return fail(BERT_EINPUT, err, err_len,
                            "sequence %d token %d: token type %d outside [0, %d)", b, i,
                            types[cu[b] + i], c->type_vocab_size);
            ws->pos[cu[b] + i] = id == c->position_pad_id ? id : next++;
        }
    }
    return BERT_OK;
}

/* Records max |x[t][k]| over the T rows (K wide at stride ld) into the
 * calibration slot of (layer, which); nothing unless calibrating. */
static void calib_note(bert_workspace *ws, int layer, bert_linear which, const float *x, int T,
                       int K, size_t ld, int stride) {
    if (!ws->calib)
        return;
    float *a = ws->calib + ((size_t)layer * BERT_NLINEAR + which) * (size_t)stride;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++)
            a[k] = fmaxf(a[k], fabsf(x[(size_t)t * ld + k]));
}

/* ---- the pre-norm blocks, each one parallel loop over tokens ---- */
typedef struct rows_ctx {
    const bert_model *m;
    const float *w, *b; /* a norm's weight and bias */
    const float *in;    /* (T, C) */
    float *out;         /* (T, C), may be in */
    float *qkv;         /* (T, QN): RoPE rotates Q and K in place */
    const enc_rope *rope;
    const int32_t *pos; /* (T) */
    float *ffn;         /* (T, G·F): the gated activation */
    size_t T, ntasks;
} rows_ctx;

static void norm_task(void *arg, size_t task, int worker) {
    (void)worker;
    const rows_ctx *c = arg;
    const bert_config *cfg = &c->m->cfg;
    const size_t C = (size_t)cfg->hidden_size;
    size_t t0, t1;
    block(c->T, c->ntasks, task, &t0, &t1);
    for (size_t t = t0; t < t1; t++)
        enc_norm_row(cfg->norm, c->out + t * C, c->in + t * C, c->w, c->b ? c->b : c->m->zeros,
                     (int)C, cfg->layer_norm_eps);
}

/* Q's H heads and K's Hkv heads of every token rotated by its position
 * within its sequence. */
static void rope_task(void *arg, size_t task, int worker) {
    (void)worker;
    const rows_ctx *c = arg;
    const bert_config *cfg = &c->m->cfg;
    const size_t QN = (size_t)qkv_rows(cfg), AO = (size_t)attn_width(cfg);
    size_t t0, t1;
    block(c->T, c->ntasks, task, &t0, &t1);
    for (size_t t = t0; t < t1; t++) {
        enc_rope_apply(c->rope, c->qkv + t * QN, cfg->num_heads, c->pos[t]);
        enc_rope_apply(c->rope, c->qkv + t * QN + AO, cfg->num_kv_heads, c->pos[t]);
    }
}

static void glu_task(void *arg, size_t task, int worker) {
    (void)worker;
    const rows_ctx *c = arg;
    const bert_config *cfg = &c->m->cfg;
    const size_t GF = (size_t)ffn_rows(cfg);
    size_t t0, t1;
    block(c->T, c->ntasks, task, &t0, &t1);
    enc_glu_rows(cfg->mlp, c->ffn + t0 * GF, t1 - t0, cfg->intermediate_size, GF);
}

static void run_rows(const attn_parallel *par, rows_ctx *c, void (*fn)(void *, size_t, int)) {
    c->ntasks = row_tasks(par, c->T);
    par->parallel_for(par->impl, c->ntasks, fn, c);
}

/* out = norm(in) with weight w and bias b, row by row. */
static void norm_rows(const bert_model *m, const attn_parallel *par, const float *w, const float *b,
                      const float *in, float *out, int T) {
    rows_ctx c = {.m = m, .w = w, .b = b, .in = in, .out = out, .T = (size_t)T};
    run_rows(par, &c, norm_task);
}

int bert_forward(const bert_model *m, bert_workspace *ws, const attn_backend *attn,
                 const attn_parallel *par, const int32_t *ids, const int32_t *cu_seqlens, int batch,
                 float *out, char *err, size_t err_len) {
    return bert_forward_types(m, ws, attn, par, ids, NULL, cu_seqlens, batch, out, err, err_len);
}

int bert_forward_types(const bert_model *m, bert_workspace *ws, const attn_backend *attn,
                       const attn_parallel *par, const int32_t *ids, const int32_t *type_ids,
                       const int32_t *cu_seqlens, int batch, float *out, char *err,
                       size_t err_len) {
    const bert_config *cfg = &m->cfg;
    const int C = cfg->hidden_size, F = cfg->intermediate_size, H = cfg->num_heads;
    const int D = cfg->head_dim, Hkv = cfg->num_kv_heads, GF = (int)ffn_rows(cfg);
    const size_t QN = (size_t)qkv_rows(cfg), AO = (size_t)attn_width(cfg);
    const int S = calib_stride(cfg);
    const float eps = cfg->layer_norm_eps;
    if (!attn || !par || !out || par->nthreads > ws->nthreads)
        return fail(BERT_EINPUT, err, err_len,
                    "missing backend, pool or output, or more threads than the workspace's %d",
                    ws->nthreads);
    int32_t max_len = 0;
    int rc = check_batch(m, ws, ids, type_ids, cu_seqlens, batch, &max_len, err, err_len);
    if (rc)
        return rc;
    const int T = cu_seqlens[batch];

    /* Q, K and V are read in place from the fused projection. */
    attn_problem ap;
    const attn_shape shape = {.batch = batch,
                              .total_tokens = T,
                              .max_seqlen = max_len,
                              .heads = H,
                              .head_dim = D,
                              .causal = cfg->causal,
                              .rel_bias = m->rel_bias != NULL,
                              .kv_heads = Hkv == H ? 0 : Hkv};
    attn_problem_dense(&ap, shape, cu_seqlens, ws->qkv, ws->qkv + AO, ws->qkv + AO + Hkv * D,
                       ws->att);
    ap.q_stride = ap.k_stride = ap.v_stride = QN;
    ap.out_stride = AO;
    ap.rel_bias = m->rel_bias;
    ap.rel_span = cfg->max_positions;

    bert_stage_ns *st = &ws->stages;
    *st = (bert_stage_ns){0};
    uint64_t t0 = stage_clock(), t1;
/* Adds the time since the last mark to one stage and moves the mark. */
#define STAGE(field) (t1 = stage_clock(), st->field += t1 - t0, t0 = t1)

    embed_ctx ec = {.m = m,
                    .ids = ids,
                    .types = type_ids,
                    .pos = ws->pos,
                    .x = ws->x,
                    .T = (size_t)T,
                    .ntasks = row_tasks(par, (size_t)T)};
    par->parallel_for(par->impl, ec.ntasks, embed_task, &ec);
    STAGE(embeddings);

    for (int l = 0; l < cfg->num_layers; l++) {
        const bert_layer *w = &m->layers[l];
        ap.shape.window = cfg->sliding[l] ? cfg->window : 0;
        /* Pre-norm: the attention reads norm(x), except where the family
         * has no norm there (ModernBERT's layer 0). */
        const float *in = ws->x;
        if (cfg->pre_norm && w->ln1_w) {
            norm_rows(m, par, w->ln1_w, w->ln1_b, ws->x, ws->h, T);
            in = ws->h;
            STAGE(norms);
        }
        calib_note(ws, l, BERT_LINEAR_QKV, in, T, C, (size_t)C, S);
        gemm_run(w->qkv, par, in, C, ws->qkv, QN, T, NULL, ws->gemm_ws);
        if (cfg->rope) {
            rows_ctx rc_rope = {.m = m,
                                .qkv = ws->qkv,
                                .rope = &m->rope[cfg->sliding[l]],
                                .pos = ws->pos,
                                .T = (size_t)T};
            run_rows(par, &rc_rope, rope_task);
        }
        STAGE(qkv);
        st->attn_flops += attn_flops(&ap);
        rc = attn->forward(&ap, ws->attn_ws, ws->attn_bytes, par);
        STAGE(attention);
        if (rc != ATTN_OK)
            return fail(BERT_EATTN, err, err_len, "layer %d: attention backend %s: %s", l,
                        attn->name, attn_strerror(rc));
        if (ws->tap && l == ws->tap_layer) {
            ws->tap(&ap, l, ws->tap_ctx);
            t0 = stage_clock(); /* the tap's copy is verification's cost, no stage's */
        }
        if (cfg->pre_norm) {
            /* x += att · W_oᵀ; x += W_out · act(W_in · norm(x)). */
            const gemm_epilogue add = {.residual = ws->x, .ld_residual = (size_t)C};
            calib_note(ws, l, BERT_LINEAR_ATTN_OUT, ws->att, T, (int)AO, AO, S);
            gemm_run(w->attn_o, par, ws->att, AO, ws->x, C, T, &add, ws->gemm_ws);
            STAGE(out_proj);
            norm_rows(m, par, w->ln2_w, w->ln2_b, ws->x, ws->h, T);
            STAGE(norms);
            const gemm_epilogue gelu = {.act = GEMM_ACT_GELU};
            const int gated = enc_mlp_gated(cfg->mlp);
            calib_note(ws, l, BERT_LINEAR_FFN_IN, ws->h, T, C, (size_t)C, S);
            gemm_run(w->ffn_in, par, ws->h, C, ws->ffn, GF, T, gated ? NULL : &gelu, ws->gemm_ws);
            if (gated) {
                rows_ctx rc_glu = {.m = m, .ffn = ws->ffn, .T = (size_t)T};
                run_rows(par, &rc_glu, glu_task);
            }
            calib_note(ws, l, BERT_LINEAR_FFN_OUT, ws->ffn, T, F, (size_t)GF, S);
            gemm_run(w->ffn_out, par, ws->ffn, GF, ws->x, C, T, &add, ws->gemm_ws);
            STAGE(ffn);
            continue;
        }
        /* x = LayerNorm(x + att · W_oᵀ + b_o), written over x. */
        const gemm_epilogue ln1 = {
            .residual = ws->x, .ld_residual = C, .ln_w = w->ln1_w, .ln_b = w->ln1_b, .ln_eps = eps};
        calib_note(ws, l, BERT_LINEAR_ATTN_OUT, ws->att, T, C, (size_t)C, S);
        gemm_run(w->attn_o, par, ws->att, C, ws->x, C, T, &ln1, ws->gemm_ws);
        STAGE(out_proj);
        const gemm_epilogue gelu = {.act = GEMM_ACT_GELU};
        calib_note(ws, l, BERT_LINEAR_FFN_IN, ws->x, T, C, (size_t)C, S);
        gemm_run(w->ffn_in, par, ws->x, C, ws->ffn, F, T, &gelu, ws->gemm_ws);
        const gemm_epilogue ln2 = {
            .residual = ws->x, .ld_residual = C, .ln_w = w->ln2_w, .ln_b = w->ln2_b, .ln_eps = eps};
        calib_note(ws, l, BERT_LINEAR_FFN_OUT, ws->ffn, T, F, (size_t)F, S);
        gemm_run(w->ffn_out, par, ws->ffn, F, ws->x, C, T, &ln2, ws->gemm_ws);
        STAGE(ffn);
    }
    if (cfg->final_norm) {
        norm_rows(m, par, m->final_w, m->final_b, ws->x, ws->x, T);
        STAGE(norms);
    }

    pool_ctx pc = {.m = m,
                   .normalize = cfg->normalize && !ws->raw,
                   .x = ws->x,
                   .cu = cu_seqlens,
                   .vec = ws->vec,
                   .out = out};
    par->parallel_for(par->impl, (size_t)batch, pool_task, &pc);
    STAGE(pooling);
#undef STAGE
    return BERT_OK;
}

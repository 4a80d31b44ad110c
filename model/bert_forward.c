/* bert_forward.c — the encoder forward pass on a packed varlen batch, and
 * the workspace it runs in (bert.h), over the weights bert.c arranged.
 * Every family runs this one forward: the blocks its config composes
 * (bert_config.h) pick the norm's place and kind, the position scheme, the
 * MLP and the attention per layer; see the top of bert.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "model/bert_impl.h"

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
        return bert_fail(BERT_EINPUT, err, err_len, "max_tokens and nthreads must be >= 1");
    const attn_shape bound = bert_attn_shape(c, max_tokens);
    /* A model with sliding-window layers runs full-attention layers too:
     * scratch for both. */
    attn_shape full = bound;
    full.window = 0;
    size_t attn_bytes = 0;
    for (size_t i = 0; i < nbackends; i++) {
        char why[256] = "";
        if (attn_backend_supports(backends[i], &bound, why, sizeof why) != ATTN_OK)
            return bert_fail(BERT_EUNSUPPORTED, err, err_len,
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
        return bert_fail(BERT_ENOMEM, err, err_len, "cannot allocate a %zu-byte model workspace",
                         total);
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
        /* Gemma scales the looked-up row by √C. */
        if (m->cfg.emb_scale > 0.0f)
            for (int i = 0; i < C; i++)
                xt[i] *= m->cfg.emb_scale;
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
    if (cfg->head == BERT_HEAD_MODERNBERT) {
        /* p pooled as classifier_pooling says, then W2 · norm(gelu(W1 p)). */
        pool_seq(cfg, xs, len, v0);
        linear_vec(m->head_w1, m->head_b1, v0, C, C, v1, 0);
        bert_gelu(v1, 1, (size_t)C, (size_t)C);
        enc_norm_row(ENC_NORM_LAYER, v1, v1, m->head_ln_w, m->head_ln_b ? m->head_ln_b : m->zeros,
                     C, cfg->layer_norm_eps);
        linear_vec(m->head_w2, m->head_b2, v1, C, cfg->num_labels, o, 0);
        return;
    }
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
        return bert_fail(BERT_EINPUT, err, err_len, "empty batch or missing ids / cu_seqlens");
    if (cu[0] != 0)
        return bert_fail(BERT_EINPUT, err, err_len, "cu_seqlens[0] must be 0");
    *max_len = 0;
    for (int b = 0; b < B; b++) {
        if (cu[b + 1] <= cu[b] || cu[b + 1] > ws->max_tokens)
            return bert_fail(BERT_EINPUT, err, err_len,
                             "sequence %d: empty, or the batch exceeds the workspace's %d tokens",
                             b, ws->max_tokens);
        const int32_t len = cu[b + 1] - cu[b];
        if (len > c->max_positions)
            return bert_fail(BERT_EINPUT, err, err_len,
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
                return bert_fail(BERT_EINPUT, err, err_len,
                                 "sequence %d token %d: id %d outside the vocabulary [0, %d)", b, i,
                                 id, c->vocab_size);
            if (types && (types[cu[b] + i] < 0 || types[cu[b] + i] >= c->type_vocab_size))
                return bert_fail(BERT_EINPUT, err, err_len,
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

/* Q's H heads and K's Hkv heads of every token normalised head by head
 * (qk_norm: w is Q's norm, b K's), then rotated by the token's position
 * within its sequence. */
static void rope_task(void *arg, size_t task, int worker) {
    (void)worker;
    const rows_ctx *c = arg;
    const bert_config *cfg = &c->m->cfg;
    const size_t QN = (size_t)qkv_rows(cfg), AO = (size_t)attn_width(cfg);
    const size_t D = (size_t)cfg->head_dim;
    size_t t0, t1;
    block(c->T, c->ntasks, task, &t0, &t1);
    for (size_t t = t0; t < t1; t++) {
        float *q = c->qkv + t * QN, *k = q + AO;
        for (int h = 0; c->w && h < cfg->num_heads; h++)
            enc_norm_row(cfg->norm, q + h * D, q + h * D, c->w, NULL, (int)D, cfg->layer_norm_eps);
        for (int h = 0; c->b && h < cfg->num_kv_heads; h++)
            enc_norm_row(cfg->norm, k + h * D, k + h * D, c->b, NULL, (int)D, cfg->layer_norm_eps);
        enc_rope_apply(c->rope, q, cfg->num_heads, c->pos[t]);
        enc_rope_apply(c->rope, k, cfg->num_kv_heads, c->pos[t]);
    }
}

/* x += norm(h), row by row: a sublayer's output normalised before the
 * residual add (Gemma3's post norms). */
static void add_norm_task(void *arg, size_t task, int worker) {
    (void)worker;
    const rows_ctx *c = arg;
    const bert_config *cfg = &c->m->cfg;
    const size_t C = (size_t)cfg->hidden_size;
    size_t t0, t1;
    block(c->T, c->ntasks, task, &t0, &t1);
    for (size_t t = t0; t < t1; t++) {
        float *h = c->ffn + t * C, *x = c->out + t * C;
        enc_norm_row(cfg->norm, h, h, c->w, NULL, (int)C, cfg->layer_norm_eps);
        for (size_t i = 0; i < C; i++)
            x[i] += h[i];
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

/* ws->ffn = act(W_in · in) for layer l, in either block order (in is
 * norm(x) before a pre-norm block's MLP, x itself in a post-norm one): the
 * GELU rides the GEMM's epilogue; a gated MLP (NomicBERT's SwiGLU) writes
 * act(a) · g over a's half of each 2F-wide row, which W_out reads at that
 * stride. Notes the inputs of both MLP linears for calibration. */
static void ffn_up(const bert_model *m, bert_workspace *ws, const attn_parallel *par, int l,
                   const float *in, int T) {
    const bert_config *cfg = &m->cfg;
    const int C = cfg->hidden_size, GF = (int)ffn_rows(cfg), S = calib_stride(cfg);
    const gemm_epilogue gelu = {.act = GEMM_ACT_GELU};
    const int gated = enc_mlp_gated(cfg->mlp);
    calib_note(ws, l, BERT_LINEAR_FFN_IN, in, T, C, (size_t)C, S);
    gemm_run(m->layers[l].ffn_in, par, in, C, ws->ffn, GF, T, gated ? NULL : &gelu, ws->gemm_ws);
    if (gated) {
        rows_ctx rc_glu = {.m = m, .ffn = ws->ffn, .T = (size_t)T};
        run_rows(par, &rc_glu, glu_task);
    }
    calib_note(ws, l, BERT_LINEAR_FFN_OUT, ws->ffn, T, cfg->intermediate_size, (size_t)GF, S);
}

/* A pre-norm sublayer's output y · Wᵀ (y ldy apart) added to x: in the
 * GEMM's epilogue, or, where the family normalises that output first
 * (post_w, Gemma 3's post norms), through h and add_norm_task. */
static void add_sublayer(const bert_model *m, bert_workspace *ws, const attn_parallel *par,
                         const gemm_weights *W, const float *y, size_t ldy, const float *post_w,
                         int T) {
    const size_t C = (size_t)m->cfg.hidden_size;
    if (post_w) {
        gemm_run(W, par, y, ldy, ws->h, C, T, NULL, ws->gemm_ws);
        rows_ctx post = {.m = m, .w = post_w, .ffn = ws->h, .out = ws->x, .T = (size_t)T};
        run_rows(par, &post, add_norm_task);
    } else {
        const gemm_epilogue add = {.residual = ws->x, .ld_residual = C};
        gemm_run(W, par, y, ldy, ws->x, C, T, &add, ws->gemm_ws);
    }
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
    const int C = cfg->hidden_size, H = cfg->num_heads;
    const int D = cfg->head_dim, Hkv = cfg->num_kv_heads, GF = (int)ffn_rows(cfg);
    const size_t QN = (size_t)qkv_rows(cfg), AO = (size_t)attn_width(cfg);
    const int S = calib_stride(cfg);
    const float eps = cfg->layer_norm_eps;
    if (!attn || !par || !out || par->nthreads > ws->nthreads)
        return bert_fail(BERT_EINPUT, err, err_len,
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
    if (cfg->attn_scale > 0.0f)
        ap.scale = cfg->attn_scale;

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
                                .w = w->q_norm_w,
                                .b = w->k_norm_w,
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
            return bert_fail(BERT_EATTN, err, err_len, "layer %d: attention backend %s: %s", l,
                             attn->name, attn_strerror(rc));
        if (ws->tap && l == ws->tap_layer) {
            ws->tap(&ap, l, ws->tap_ctx);
            t0 = stage_clock(); /* the tap's copy is verification's cost, no stage's */
        }
        if (cfg->pre_norm) {
            /* x += att · W_oᵀ; x += W_out · act(W_in · norm(x)); with post
             * norms each sublayer's output is normalised (in h) first. */
            calib_note(ws, l, BERT_LINEAR_ATTN_OUT, ws->att, T, (int)AO, AO, S);
            add_sublayer(m, ws, par, w->attn_o, ws->att, AO, w->ln1p_w, T);
            STAGE(out_proj);
            norm_rows(m, par, w->ln2_w, w->ln2_b, ws->x, ws->h, T);
            STAGE(norms);
            ffn_up(m, ws, par, l, ws->h, T);
            add_sublayer(m, ws, par, w->ffn_out, ws->ffn, (size_t)GF, w->ln2p_w, T);
            STAGE(ffn);
            continue;
        }
        /* x = LayerNorm(x + att · W_oᵀ + b_o), written over x. */
        const gemm_epilogue ln1 = {
            .residual = ws->x, .ld_residual = C, .ln_w = w->ln1_w, .ln_b = w->ln1_b, .ln_eps = eps};
        calib_note(ws, l, BERT_LINEAR_ATTN_OUT, ws->att, T, C, (size_t)C, S);
        gemm_run(w->attn_o, par, ws->att, C, ws->x, C, T, &ln1, ws->gemm_ws);
        STAGE(out_proj);
        /* x = LayerNorm(x + W_out · act(W_in · x) + b_out). */
        ffn_up(m, ws, par, l, ws->x, T);
        const gemm_epilogue ln2 = {
            .residual = ws->x, .ld_residual = C, .ln_w = w->ln2_w, .ln_b = w->ln2_b, .ln_eps = eps};
        gemm_run(w->ffn_out, par, ws->ffn, GF, ws->x, C, T, &ln2, ws->gemm_ws);
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

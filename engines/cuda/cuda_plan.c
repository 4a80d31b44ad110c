/* cuda_plan.c — the CUDA engine's host-side logic (see cuda_plan.h). No CUDA
 * header is included: this file builds and is tested on every machine, and
 * it needs nothing but libc, so the GPU checks (tests/gpu/) link it on a
 * bare GPU machine. The model's description comes from model/encoder.c
 * (encoder_describe), which the engine calls; only its result is read here. */
#include "cuda_plan.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t cuda_dtype_size(cuda_dtype t) {
    return t == CUDA_DT_F32 ? 4 : 2;
}

const char *cuda_dtype_name(cuda_dtype t) {
    switch (t) {
    case CUDA_DT_F32:
        return "fp32";
    case CUDA_DT_F16:
        return "fp16";
    case CUDA_DT_BF16:
        return "bf16";
    }
    return "?";
}

const char *cuda_precision_unsupported(gemm_precision p) {
    switch (p) {
    case GEMM_FP32:
    case GEMM_TF32:
    case GEMM_BF16:
    case GEMM_FP16:
        return NULL;
    default:
        return "the cuda engine runs fp32, tf32, bf16 and fp16 (int8 is a CPU precision)";
    }
}

cuda_dtype cuda_precision_dtype(gemm_precision p) {
    return p == GEMM_BF16 ? CUDA_DT_BF16 : p == GEMM_FP16 ? CUDA_DT_F16 : CUDA_DT_F32;
}

int cuda_precision_tf32(gemm_precision p) {
    return p == GEMM_TF32;
}

/* Reserves n elements of size bytes at the next aligned offset of *at.
 * Returns the offset, or SIZE_MAX once anything has overflowed (sticky). */
static size_t take(size_t *at, size_t n, size_t size) {
    if (*at == SIZE_MAX)
        return SIZE_MAX;
    const size_t start = (*at + CUDA_PLAN_ALIGN - 1) / CUDA_PLAN_ALIGN * CUDA_PLAN_ALIGN;
    if (start < *at || (size && n > (SIZE_MAX - start) / size)) {
        *at = SIZE_MAX;
        return SIZE_MAX;
    }
    *at = start + n * size;
    return start;
}

int cuda_weight_layout_make(const bert_config *c, cuda_dtype dtype, cuda_weight_layout *out,
                            char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    if (c->num_layers <= 0 || c->hidden_size <= 0 || c->intermediate_size <= 0 ||
        c->vocab_size <= 0 || c->max_positions <= 0 || c->position_offset < 0 ||
        c->type_vocab_size <= 0 || (c->head != BERT_HEAD_NONE && c->num_labels <= 0) ||
        c->ndense < 0 || c->ndense > BERT_MAX_DENSE) {
        snprintf(err, err_len, "model shape outside what the engine lays out");
        return -1;
    }
    out->layers = calloc((size_t)c->num_layers, sizeof *out->layers);
    if (!out->layers) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    out->nlayers = c->num_layers;
    out->dtype = dtype;
    const size_t e = cuda_dtype_size(dtype), f = sizeof(float);
    const size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t at = 0;
    out->wte = take(&at, (size_t)c->vocab_size * C, e);
    out->wpe = take(&at, ((size_t)c->max_positions + (size_t)c->position_offset) * C, e);
    out->wtt = take(&at, (size_t)c->type_vocab_size * C, e);
    out->emb_ln_w = take(&at, C, f);
    out->emb_ln_b = take(&at, C, f);
    for (int l = 0; l < c->num_layers; l++) {
        cuda_layer_offsets *o = &out->layers[l];
        o->qkv_w = take(&at, 3 * C * C, e);
        o->qkv_b = take(&at, 3 * C, e);
        o->attn_o_w = take(&at, C * C, e);
        o->attn_o_b = take(&at, C, e);
        o->ln1_w = take(&at, C, f);
        o->ln1_b = take(&at, C, f);
        o->ffn_in_w = take(&at, F * C, e);
        o->ffn_in_b = take(&at, F, e);
        o->ffn_out_w = take(&at, C * F, e);
        o->ffn_out_b = take(&at, C, e);
        o->ln2_w = take(&at, C, f);
        o->ln2_b = take(&at, C, f);
    }
    cuda_head_offsets *h = &out->head;
    h->w1 = h->b1 = h->w2 = h->b2 = SIZE_MAX;
    for (int i = 0; i < BERT_MAX_DENSE; i++)
        h->dense_w[i] = h->dense_b[i] = SIZE_MAX;
    if (c->head != BERT_HEAD_NONE) {
        const size_t N = (size_t)c->num_labels;
        h->w1 = take(&at, C * C, f);
        h->b1 = take(&at, C, f);
        h->w2 = take(&at, N * C, f);
        h->b2 = take(&at, N, f);
    } else {
        for (int i = 0; i < c->ndense && i < BERT_MAX_DENSE; i++) {
            const bert_dense *d = &c->dense[i];
            h->dense_w[i] = take(&at, (size_t)d->out_features * (size_t)d->in_features, f);
            if (d->bias)
                h->dense_b[i] = take(&at, (size_t)d->out_features, f);
        }
    }
    const size_t end = take(&at, 0, 1);
    if (end == SIZE_MAX) {
        cuda_weight_layout_free(out);
        snprintf(err, err_len, "the model's size overflows");
        return -1;
    }
    out->bytes = end;
    return 0;
}

void cuda_weight_layout_free(cuda_weight_layout *w) {
    free(w->layers);
    w->layers = NULL;
    w->nlayers = 0;
}

int32_t cuda_attn_max_tiles(int32_t max_tokens, int32_t max_seqs) {
    /* sum ceil(len_b / M) <= sum (len_b / M + 1) = T / M + B, and a batch has
     * no more tiles than tokens. */
    const int64_t t = (int64_t)max_tokens / CUDA_ATTN_BLOCK_M + max_seqs;
    return (int32_t)(t < max_tokens ? t : max_tokens);
}

int cuda_workspace_plan_make(const bert_config *c, cuda_dtype act, int32_t max_tokens,
                             int32_t max_seqs, cuda_workspace_plan *out, char *err,
                             size_t err_len) {
    memset(out, 0, sizeof *out);
    if (max_seqs <= 0 || max_seqs > max_tokens)
        max_seqs = max_tokens;
    if (max_tokens <= 0 || max_tokens > INT32_MAX / 4) {
        snprintf(err, err_len, "max_tokens %d outside 1..%d", max_tokens, INT32_MAX / 4);
        return -1;
    }
    out->max_tokens = max_tokens;
    out->max_seqs = max_seqs;
    out->max_tiles = cuda_attn_max_tiles(max_tokens, max_seqs);
    const size_t T = (size_t)max_tokens, B = (size_t)max_seqs;
    const size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    const size_t e = cuda_dtype_size(act), i4 = sizeof(int32_t);
    size_t at = 0;
    out->ids = take(&at, T, i4);
    out->types = take(&at, T, i4);
    out->pos = take(&at, T, i4);
    out->cu_seqlens = take(&at, B + 1, i4);
    out->tiles = take(&at, 2 * (size_t)out->max_tiles, i4);
    out->sdpa_seq = take(&at, B, i4);
    out->sdpa_off_qkv = take(&at, B + 1, sizeof(int64_t));
    out->sdpa_off_o = take(&at, B + 1, sizeof(int64_t));
    out->host_in_bytes = take(&at, 0, 1);
    out->x = take(&at, T * C, e);
    out->qkv = take(&at, T * 3 * C, e);
    out->att = take(&at, T * C, e);
    out->tmp = take(&at, T * C, e);
    out->ffn = take(&at, T * F, e);
    /* The widest vector after the encoder, as model/bert.c's scratch_dim. */
    int32_t vec = c->hidden_size;
    if (c->head != BERT_HEAD_NONE && c->num_labels > vec)
        vec = c->num_labels;
    for (int i = 0; i < c->ndense && i < BERT_MAX_DENSE; i++)
        vec = c->dense[i].out_features > vec ? c->dense[i].out_features : vec;
    out->vec_dim = vec;
    out->pooled = take(&at, B * (size_t)vec, sizeof(float));
    out->pooled2 = take(&at, B * (size_t)vec, sizeof(float));
    /* cuBLASLt picks faster algorithms when it may use scratch; 32 MiB is
     * what NVIDIA recommends for Hopper (4 MiB suffices before it). */
    out->lt_ws_bytes = (size_t)32 << 20;
    out->lt_ws = take(&at, out->lt_ws_bytes, 1);
    out->device_bytes = take(&at, 0, 1);
    if (out->device_bytes == SIZE_MAX || out->host_in_bytes == SIZE_MAX) {
        snprintf(err, err_len, "the workspace's size overflows");
        return -1;
    }
    const size_t D = c->output_dim > 0 ? (size_t)c->output_dim : C;
    size_t host = out->host_in_bytes;
    take(&host, B * D, sizeof(float));
    out->host_hidden = take(&host, T * C, sizeof(float));
    out->host_bytes = take(&host, 0, 1);
    if (out->host_bytes == SIZE_MAX) {
        snprintf(err, err_len, "the workspace's size overflows");
        return -1;
    }
    return 0;
}

int cuda_check_batch(const int32_t *cu, int32_t batch, int32_t max_len, int32_t max_tokens,
                     int32_t max_seqs, char *err, size_t err_len) {
    if (batch <= 0 || batch > max_seqs) {
        snprintf(err, err_len, "%d sequences; the engine takes 1..%d", batch, max_seqs);
        return -1;
    }
    if (cu[0] != 0) {
        snprintf(err, err_len, "cu_seqlens[0] is %d, not 0", cu[0]);
        return -1;
    }
    for (int32_t b = 0; b < batch; b++) {
        const int64_t len = (int64_t)cu[b + 1] - cu[b];
        if (len < 1 || len > max_len) {
            snprintf(err, err_len, "sequence %d has %lld tokens; the engine takes 1..%d", b,
                     (long long)len, max_len);
            return -1;
        }
    }
    if (cu[batch] > max_tokens) {
        snprintf(err, err_len, "%d tokens; the workspace holds %d", cu[batch], max_tokens);
        return -1;
    }
    return 0;
}

int32_t cuda_attn_tiles(const int32_t *cu, int32_t batch, int32_t block_m, int32_t *tiles,
                        int32_t max_tiles) {
    int32_t n = 0;
    for (int32_t b = 0; b < batch; b++) {
        const int32_t len = cu[b + 1] - cu[b];
        for (int32_t q = 0; q < len; q += block_m) {
            if (n == max_tiles)
                return -1;
            tiles[2 * n] = b;
            tiles[2 * n + 1] = q;
            n++;
        }
    }
    return n;
}

int cuda_stage_types(const int32_t *type_ids, int32_t T, int32_t type_vocab_size, int32_t *dst,
                     char *err, size_t err_len) {
    if (!type_ids) {
        memset(dst, 0, (size_t)T * sizeof *dst);
        return 0;
    }
    for (int32_t t = 0; t < T; t++) {
        if (type_ids[t] < 0 || type_ids[t] >= type_vocab_size) {
            snprintf(err, err_len, "token %d has type %d; the model has types 0..%d", t,
                     type_ids[t], type_vocab_size - 1);
            return -1;
        }
        dst[t] = type_ids[t];
    }
    return 0;
}

void cuda_positions(const bert_config *c, const int32_t *ids, const int32_t *cu, int32_t batch,
                    int32_t *pos) {
    for (int32_t b = 0; b < batch; b++) {
        int32_t next = c->position_offset;
        for (int32_t t = cu[b]; t < cu[b + 1]; t++)
            pos[t] = ids[t] == c->position_pad_id ? ids[t] : next++;
    }
}

int cuda_score_from(int err, const char *err_string, int count, int cc_major, int cc_minor,
                    const char *device_name, char *why, size_t why_len) {
    if (err != 0) {
        snprintf(why, why_len, "no CUDA device: %s",
                 err_string ? err_string : "CUDA runtime error");
        return 0;
    }
    if (count <= 0) {
        snprintf(why, why_len, "no CUDA device: the driver reports none");
        return 0;
    }
    if (cc_major < 8) {
        snprintf(why, why_len,
                 "%s has compute capability %d.%d; the engine needs 8.0 or later (bf16 tensor "
                 "cores)",
                 device_name ? device_name : "device 0", cc_major, cc_minor);
        return 0;
    }
    why[0] = '\0';
    return 100;
}

int cuda_refuse_model(const encoder_info *i, char *why, size_t why_len) {
    /* The kernels run BERT's post-norm layer (absolute positions, GELU, full
     * attention); any other family's blocks (pre-norm, RoPE, gated MLPs,
     * windows, grouped K/V heads) have no kernels here. */
    if (i->family && strcmp(i->family, "bert") != 0) {
        snprintf(why, why_len,
                 "model_type \"%s\" is the %s family (%s, %s positions, %s MLP): the cuda "
                 "engine runs the BERT family only; serve it on the cpu engine",
                 i->model_type ? i->model_type : "(unknown)", i->family, i->norm ? i->norm : "?",
                 i->position ? i->position : "?", i->mlp ? i->mlp : "?");
        return -1;
    }
    if (i->position_bias && strcmp(i->position_bias, "none") != 0) {
        snprintf(why, why_len,
                 "model_type \"%s\" adds a position bias (%s) to every attention score: the cuda "
                 "engine's attention kernels add none; serve it on the cpu engine",
                 i->model_type ? i->model_type : "(unknown)", i->position_bias);
        return -1;
    }
    static const char *const pools[] = {"mean", "cls", "max", "mean_sqrt_len_tokens", "lasttoken"};
    const char *p = i->pooling ? i->pooling : "(none)";
    size_t k = 0;
    while (k < sizeof pools / sizeof pools[0] && strcmp(p, pools[k]) != 0)
        k++;
    if (k == sizeof pools / sizeof pools[0]) {
        snprintf(why, why_len,
                 "pooling \"%s\": the cuda engine pools by mean, cls, max, "
                 "mean_sqrt_len_tokens or lasttoken",
                 p);
        return -1;
    }
    why[0] = '\0';
    return 0;
}

int cuda_pool_mode(const bert_config *c) {
    if (c->head != BERT_HEAD_NONE)
        return CUDA_POOL_CLS;
    switch (c->pooling) {
    case BERT_POOL_CLS:
        return CUDA_POOL_CLS;
    case BERT_POOL_MAX:
        return CUDA_POOL_MAX;
    case BERT_POOL_MEAN_SQRT_LEN:
        return CUDA_POOL_MEAN_SQRT;
    case BERT_POOL_LASTTOKEN:
        return CUDA_POOL_LAST;
    case BERT_POOL_MEAN:
        break;
    }
    return CUDA_POOL_MEAN;
}

int cuda_head_dim_supported(int d) {
    return d == 32 || d == 64 || d == 128;
}

uint16_t cuda_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cuda_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t cuda_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a >= 0x477ff000u)                  /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {   /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) /* below 2^-25: rounds to zero */
            return (uint16_t)sign;
        const uint32_t e = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e; /* 14..24: 2^(e-127) / 2^-24 = man >> shift */
        uint32_t r = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    /* Normal: rebias the exponent, round the 13 dropped bits to even; a carry
     * out of the mantissa correctly bumps the exponent. */
    uint32_t r = ((a >> 13) - (112u << 10));
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

float cuda_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (man << 13);
    else if (exp != 0)
        bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0)
        bits = sign;
    else {
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

void cuda_store(cuda_dtype t, void *dst, const float *src, size_t n) {
    if (t == CUDA_DT_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = t == CUDA_DT_BF16 ? cuda_f32_to_bf16(src[i]) : cuda_f32_to_f16(src[i]);
}

/* ---- attention kernels ------------------------------------------------------- */
int cuda_attn_choice_parse(const char *name) {
    if (!name || !*name || strcmp(name, "auto") == 0)
        return CUDA_ATTN_AUTO;
    if (strcmp(name, "flash") == 0)
        return CUDA_ATTN_FLASH;
    if (strcmp(name, "cudnn") == 0)
        return CUDA_ATTN_CUDNN;
    if (strcmp(name, "flash2") == 0)
        return CUDA_ATTN_FLASH2;
    return -1;
}

int cuda_cudnn_version_check(size_t version, char *why, size_t why_len) {
    if (version >= CUDA_CUDNN_MIN_VERSION)
        return 0;
    snprintf(
        why, why_len,
        "cuDNN %zu.%zu.%zu is too old: the fused SDPA with per-sequence lengths needs %d.%d.%d",
        version / 10000, version / 100 % 100, version % 100, CUDA_CUDNN_MIN_VERSION / 10000,
        CUDA_CUDNN_MIN_VERSION / 100 % 100, CUDA_CUDNN_MIN_VERSION % 100);
    return -1;
}

void *cuda_dl_open(const char *lib, const char *const *names, size_t n, void **fns, char *why,
                   size_t why_len) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_len, "cannot load %s: %s", lib, e ? e : "unknown error");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        dlerror();
        fns[i] = dlsym(h, names[i]);
        if (!fns[i]) {
            const char *e = dlerror();
            snprintf(why, why_len, "%s lacks %s: %s", lib, names[i], e ? e : "NULL symbol");
            dlclose(h);
            return NULL;
        }
    }
    return h;
}

void cuda_sdpa_arrays(const int32_t *cu, int32_t batch, int32_t b_max, int64_t qkv_row,
                      int64_t o_row, int32_t *seq_len, int64_t *off_qkv, int64_t *off_o) {
    for (int32_t b = 0; b <= b_max; b++) {
        const int64_t start = cu[b < batch ? b : batch];
        off_qkv[b] = start * qkv_row;
        off_o[b] = start * o_row;
        if (b < b_max)
            seq_len[b] = b < batch ? cu[b + 1] - cu[b] : 0;
    }
}

int32_t cuda_attn_probe(int32_t max_tokens, int32_t max_seqs, int32_t max_len, int32_t *lens) {
    const int32_t longest = max_len < 128 ? max_len : 128;
    const int32_t top = longest < max_tokens ? longest : max_tokens;
    int32_t n = 0, total = 0;
    while (n < CUDA_PROBE_SEQS && n < max_seqs) {
        /* Lengths from top down to about half of it, so that sequences end
         * inside tiles as well as on their edges. */
        const int32_t len = top - (int32_t)((n * 37) % (top / 2 + 1));
        if (len < 1 || total + len > max_tokens)
            break;
        lens[n++] = len;
        total += len;
    }
    if (n == 0)
        lens[n++] = 1;
    return n;
}

double cuda_attn_check_bound(cuda_dtype t) {
    const double u = t == CUDA_DT_BF16 ? 1.0 / 256 : t == CUDA_DT_F16 ? 1.0 / 2048 : 0.0;
    return 4.0 * u + 2e-5;
}

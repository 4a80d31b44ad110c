/* cuda_engine.c — the CUDA engine: the whole encoder on one GPU, as the
 * plugin build/engines/cuda.so (mk/cuda.mk). The core never links CUDA; this
 * file calls the CUDA runtime and cuBLASLt (cuDNN is cuda_cudnn.c's), and it
 * holds only those calls: what can be decided without a device is in
 * cuda_plan.c, which the unit tests check on every machine.
 *
 * Load: the weights are converted on the host to the precision's type
 * (bf16 or fp16, or fp32 for the fp32 and tf32 options; LayerNorm vectors
 * stay fp32) and
 * uploaded once into one device allocation; the workspace for the bounds is
 * one more device allocation and one pinned host buffer; nothing is
 * allocated after init.
 *
 * Forward, all on one stream: ids, positions, cu_seqlens and the attention
 * tiles go up in one copy; embeddings + LayerNorm; per layer the QKV GEMM
 * (cuBLASLt, bias epilogue), attention (our flash kernel on tensor cores; in
 * fp32 a warp-per-query kernel), the output GEMM with bias and residual in
 * the epilogue (beta = 1 on the residual stream) then LayerNorm, the FFN-in
 * GEMM with bias then exact GELU, the FFN-out GEMM with bias and residual
 * then LayerNorm; pooling (any of sentence-transformers' modes), then either
 * a classifier head (two fp32 GEMMs on the first token, tanh between) or the
 * Dense modules (fp32 GEMMs, tanh where the module says), then Normalize;
 * the output vectors (engine_output_dim floats each) come back in one copy.
 * cuBLASLt's GELU epilogue is the tanh approximation, not the erf form BERT
 * uses, hence GELU as a kernel of its own. Stage times come from CUDA
 * events; NVTX ranges name the stages for nsys.
 *
 * What follows the encoder is model/bert.c's, in the same order and, like
 * there, in fp32 whatever the precision: pooling, then a classifier's head
 * (raw logits, never normalised) or the Dense modules, then Normalize. init
 * refuses, from encoder_describe's description and before touching the
 * device, what the kernels do not compute (cuda_refuse_model). */
#include "engines/engine.h"

#include "cuda_cudnn.h"
#include "cuda_kernels.h"
#include "cuda_plan.h"
#include "model/safetensors.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The four GEMM kinds of a layer, each the same shape in every layer. */
enum { G_QKV, G_OUT, G_FFN_IN, G_FFN_OUT, G_N };

/* Events per forward: start, after embeddings, four per layer, after
 * pooling. */
#define EV_PER_LAYER 4

typedef struct cuda_ctx {
    encoder_desc *desc; /* what the model slot answers */
    bert_config cfg;
    cuda_dtype dt;
    cuda_weight_layout wl;
    cuda_workspace_plan plan;
    unsigned char *w;    /* device weights */
    unsigned char *ws;   /* device workspace */
    unsigned char *host; /* pinned staging */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t mm[2]; /* [0]: bias epilogue, beta 0; [1]: the same, used with beta 1 */
    /* The fp32 GEMMs after pooling (head, Dense): [0] with the bias
     * epilogue, [1] without (a Dense module without bias). */
    cublasLtMatmulDesc_t mv[2];
    cudaEvent_t *ev;
    int nev;
    /* Tokens of the last forward that succeeded (0: none): its hidden
     * states stay in the workspace's x until the next forward. */
    int32_t last_T;
    encoder_stage_ns stages;
    const char *lt_status; /* cuBLASLt's status name of the last failed call */
                           /* Shadow verification (fp32 only, see cuda_set_attn_tap): layer
                            * `tap_layer`'s attention copied back, qkv then out, (T, 4C) floats. */
    engine_attn_tap_fn tap;
    void *tap_ctx;
    int tap_layer;
    float *tap_f32;
    /* The attention kernel (choose_attention): cuDNN's plan when it runs,
     * the kernel's name and how it was chosen. */
    cudnn_sdpa *sdpa;
    bool flash2; /* without sdpa: flash2 rather than flash */
    const char *attn_name;
    char attn_detail[384];
} cuda_ctx;

/* base + off bytes, as the untyped pointer the kernels and copies take. */
static void *at(void *base, size_t off) {
    return (char *)base + off;
}

static int cuda_type(cuda_dtype t) {
    return t == CUDA_DT_F32 ? CUDA_R_32F : t == CUDA_DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* ---- score ---------------------------------------------------------------- */
static int cuda_score(char *why, size_t why_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0)
        return cuda_score_from(e, cudaGetErrorString(e), n, 0, 0, NULL, why, why_len);
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    struct cudaDeviceProp prop;
    const char *name = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : NULL;
    return cuda_score_from(0, NULL, n, major, minor, name, why, why_len);
}

/* ---- weights ----------------------------------------------------------------- */
typedef struct upload {
    const st_file *f;
    const char *prefix;
    unsigned char *host; /* the staging image of the device allocation */
    const char *path;
    char *err;
    size_t err_len;
} upload;

static float st_elem(const st_tensor *t, size_t i) {
    const unsigned char *s = t->data;
    if (t->dtype == ST_F32) {
        float f;
        memcpy(&f, s + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    return t->dtype == ST_F16 ? cuda_f16_to_f32(h) : cuda_bf16_to_f32(h);
}

/* Copies tensor name (rows × cols; cols 0 for a vector), converted to type
 * t, to host + off. Returns 0 or -1 with the message. */
static int put(upload *u, size_t off, cuda_dtype t, const char *name, int64_t rows, int64_t cols) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", u->prefix, name);
    const st_tensor *ten = st_find(u->f, full);
    const int ndim = cols ? 2 : 1;
    if (!ten || (ten->dtype != ST_F32 && ten->dtype != ST_F16 && ten->dtype != ST_BF16) ||
        ten->ndim != ndim || ten->shape[0] != rows || (cols && ten->shape[1] != cols)) {
        snprintf(u->err, u->err_len, "%s: tensor %s is missing or not a float [%lld%s%.0lld]",
                 u->path, full, (long long)rows, cols ? ", " : "", (long long)cols);
        return -1;
    }
    const size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    const size_t es = cuda_dtype_size(t);
    for (size_t i = 0; i < n; i++) {
        const float v = st_elem(ten, i);
        cuda_store(t, u->host + off + i * es, &v, 1);
    }
    return 0;
}

static int put_layer(upload *u, const cuda_layer_offsets *o, int l, const bert_config *c,
                     cuda_dtype t) {
    const int64_t C = c->hidden_size, F = c->intermediate_size;
    const size_t e = cuda_dtype_size(t);
    char n[160];
#define NAME(s) (snprintf(n, sizeof n, "encoder.layer.%d.%s", l, s), n)
    static const char *const proj[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++) {
        char wn[64], bn[64];
        snprintf(wn, sizeof wn, "attention.self.%s.weight", proj[i]);
        snprintf(bn, sizeof bn, "attention.self.%s.bias", proj[i]);
        if (put(u, o->qkv_w + (size_t)i * (size_t)(C * C) * e, t, NAME(wn), C, C) ||
            put(u, o->qkv_b + (size_t)i * (size_t)C * e, t, NAME(bn), C, 0))
            return -1;
    }
    int rc = put(u, o->attn_o_w, t, NAME("attention.output.dense.weight"), C, C);
    rc = rc ? rc : put(u, o->attn_o_b, t, NAME("attention.output.dense.bias"), C, 0);
    rc = rc ? rc : put(u, o->ln1_w, CUDA_DT_F32, NAME("attention.output.LayerNorm.weight"), C, 0);
    rc = rc ? rc : put(u, o->ln1_b, CUDA_DT_F32, NAME("attention.output.LayerNorm.bias"), C, 0);
    rc = rc ? rc : put(u, o->ffn_in_w, t, NAME("intermediate.dense.weight"), F, C);
    rc = rc ? rc : put(u, o->ffn_in_b, t, NAME("intermediate.dense.bias"), F, 0);
    rc = rc ? rc : put(u, o->ffn_out_w, t, NAME("output.dense.weight"), C, F);
    rc = rc ? rc : put(u, o->ffn_out_b, t, NAME("output.dense.bias"), C, 0);
    rc = rc ? rc : put(u, o->ln2_w, CUDA_DT_F32, NAME("output.LayerNorm.weight"), C, 0);
    rc = rc ? rc : put(u, o->ln2_b, CUDA_DT_F32, NAME("output.LayerNorm.bias"), C, 0);
#undef NAME
    return rc;
}

/* The classifier head's tensors (model.safetensors, by HF's names: the
 * pooler under the encoder's prefix, the classifier at the top level) or
 * each Dense module's (its own model.safetensors, "linear.weight" and
 * "linear.bias"), all fp32, as model/bert.c's bind_extras reads them. */
static int put_extras(upload *u, const cuda_weight_layout *wl, const bert_config *m,
                      const char *dir) {
    const int64_t C = m->hidden_size, N = m->num_labels;
    const cuda_head_offsets *h = &wl->head;
    if (m->head != BERT_HEAD_NONE) {
        const int pooler = m->head == BERT_HEAD_POOLER;
        /* The pooler is the encoder's (under its prefix); the classifier,
         * classifier.dense with it, is the head's own, at the top level. */
        const char *prefix = u->prefix;
        u->prefix = pooler ? prefix : "";
        int rc = put(u, h->w1, CUDA_DT_F32,
                     pooler ? "pooler.dense.weight" : "classifier.dense.weight", C, C);
        rc = rc ? rc
                : put(u, h->b1, CUDA_DT_F32, pooler ? "pooler.dense.bias" : "classifier.dense.bias",
                      C, 0);
        u->prefix = "";
        rc = rc ? rc
                : put(u, h->w2, CUDA_DT_F32,
                      pooler ? "classifier.weight" : "classifier.out_proj.weight", N, C);
        rc = rc ? rc
                : put(u, h->b2, CUDA_DT_F32,
                      pooler ? "classifier.bias" : "classifier.out_proj.bias", N, 0);
        u->prefix = prefix;
        return rc;
    }
    for (int i = 0; i < m->ndense; i++) {
        const bert_dense *d = &m->dense[i];
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, d->path) >=
            sizeof path) {
            snprintf(u->err, u->err_len, "%s/%s: path too long", dir, d->path);
            return -1;
        }
        st_file *f = NULL;
        if (st_open(path, &f, u->err, u->err_len) < 0)
            return -1;
        upload du = {.f = f,
                     .prefix = "",
                     .host = u->host,
                     .path = path,
                     .err = u->err,
                     .err_len = u->err_len};
        int rc =
            put(&du, h->dense_w[i], CUDA_DT_F32, "linear.weight", d->out_features, d->in_features);
        if (!rc && d->bias)
            rc = put(&du, h->dense_b[i], CUDA_DT_F32, "linear.bias", d->out_features, 0);
        st_close(f);
        if (rc)
            return rc;
    }
    return 0;
}

/* Builds the weights' image on the host and uploads it. */
static int load_weights(cuda_ctx *c, const char *dir, char *err, size_t err_len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/model.safetensors", dir) >= sizeof path) {
        snprintf(err, err_len, "%s: path too long", dir);
        return ENGINE_EMODEL;
    }
    st_file *f = NULL;
    if (st_open(path, &f, err, err_len) < 0)
        return ENGINE_EMODEL;
    upload u = {.f = f, .prefix = "", .path = path, .err = err, .err_len = err_len};
    /* A checkpoint saved from a task head names the encoder under its base
     * model, as model/bert.c accepts. */
    static const char *const prefixes[] = {"bert.", "roberta."};
    for (size_t i = 0; i < 2 && !st_find(f, "embeddings.word_embeddings.weight"); i++) {
        char name[64];
        snprintf(name, sizeof name, "%sembeddings.word_embeddings.weight", prefixes[i]);
        if (st_find(f, name)) {
            u.prefix = prefixes[i];
            break;
        }
    }
    u.host = calloc(1, c->wl.bytes);
    if (!u.host) {
        st_close(f);
        snprintf(err, err_len, "cannot allocate %zu bytes to stage the weights", c->wl.bytes);
        return ENGINE_ENOMEM;
    }
    const bert_config *m = &c->cfg;
    const int64_t C = m->hidden_size;
    const cuda_dtype t = c->dt;
    int rc = put(&u, c->wl.wte, t, "embeddings.word_embeddings.weight", m->vocab_size, C);
    rc = rc ? rc
            : put(&u, c->wl.wpe, t, "embeddings.position_embeddings.weight",
                  (int64_t)m->max_positions + m->position_offset, C);
    rc = rc ? rc
            : put(&u, c->wl.wtt, t, "embeddings.token_type_embeddings.weight", m->type_vocab_size,
                  C);
    rc = rc ? rc : put(&u, c->wl.emb_ln_w, CUDA_DT_F32, "embeddings.LayerNorm.weight", C, 0);
    rc = rc ? rc : put(&u, c->wl.emb_ln_b, CUDA_DT_F32, "embeddings.LayerNorm.bias", C, 0);
    for (int l = 0; !rc && l < m->num_layers; l++)
        rc = put_layer(&u, &c->wl.layers[l], l, m, t);
    rc = rc ? rc : put_extras(&u, &c->wl, m, dir);
    st_close(f);
    if (rc) {
        free(u.host);
        return ENGINE_EMODEL;
    }
    cudaError_t e = cudaMemcpy(c->w, u.host, c->wl.bytes, cudaMemcpyHostToDevice);
    free(u.host);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "uploading the weights: %s", cudaGetErrorString(e));
        return ENGINE_EMODEL;
    }
    return ENGINE_OK;
}

/* ---- life cycle ------------------------------------------------------------------ */
static void cuda_free_ctx(void *ctx) {
    cuda_ctx *c = ctx;
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    for (int i = 0; c->ev && i < c->nev; i++)
        if (c->ev[i])
            cudaEventDestroy(c->ev[i]);
    free(c->ev);
    for (int i = 0; i < 2; i++) {
        if (c->mm[i])
            cublasLtMatmulDescDestroy(c->mm[i]);
        if (c->mv[i])
            cublasLtMatmulDescDestroy(c->mv[i]);
    }
    if (c->lt)
        cublasLtDestroy(c->lt);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaFree(c->w);
    cudaFree(c->ws);
    cudaFreeHost(c->host);
    cudaFreeHost(c->tap_f32);
    cudnn_sdpa_destroy(c->sdpa);
    cuda_weight_layout_free(&c->wl);
    encoder_desc_free(c->desc);
    free(c);
}

#define CU(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            snprintf(err, err_len, "%s: %s", what, cudaGetErrorString(e_));                        \
            cuda_free_ctx(c);                                                                      \
            return e_ == cudaErrorMemoryAllocation ? ENGINE_ENOMEM : ENGINE_EUNSUPPORTED;          \
        }                                                                                          \
    } while (0)

static int choose_attention(cuda_ctx *c, cuda_attn_choice choice, char *err, size_t err_len);

/* A GEMM descriptor y = x · Wᵀ (+ bias with CUBLASLT_EPILOGUE_BIAS),
 * accumulated and scaled in fp32 (compute CUBLAS_COMPUTE_32F, or the
 * tf32 option's CUBLAS_COMPUTE_32F_FAST_TF32). Nonzero when cuBLASLt
 * refuses it. */
static int make_desc(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cublasLtEpilogue_t epi) {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    return cublasLtMatmulDescCreate(d, compute, CUDA_R_32F) ||
           cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
           cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
           cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
}

static int cuda_init(const engine_options *opt, void **out, char *err, size_t err_len) {
    *out = NULL;
    const int choice = cuda_attn_choice_parse(opt->gpu_attention);
    if (choice < 0) {
        snprintf(err, err_len,
                 "gpu_attention '%s': the cuda engine takes auto, flash, flash2 or cudnn",
                 opt->gpu_attention);
        return ENGINE_EINVAL;
    }
    if (cuda_precision_unsupported(opt->precision)) {
        snprintf(err, err_len, "%s", cuda_precision_unsupported(opt->precision));
        return ENGINE_EUNSUPPORTED;
    }
    /* What the model is decides, before any CUDA call, whether the kernels
     * compute it at all: refused here on every machine, device or not. */
    encoder_desc *desc = NULL;
    int rc = encoder_describe(opt->model_dir, &desc, err, err_len);
    if (rc != BERT_OK)
        return rc == BERT_EUNSUPPORTED ? ENGINE_EUNSUPPORTED
               : rc == BERT_ENOMEM     ? ENGINE_ENOMEM
                                       : ENGINE_EMODEL;
    if (cuda_refuse_model(encoder_desc_info(desc), err, err_len) < 0) {
        encoder_desc_free(desc);
        return ENGINE_EUNSUPPORTED;
    }
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        encoder_desc_free(desc);
        snprintf(err, err_len, "out of memory");
        return ENGINE_ENOMEM;
    }
    c->desc = desc;
    c->tap_layer = -1;
    /* The family's own config: positions, LayerNorm eps and pooling, which
     * encoder_info does not carry. */
    rc = bert_config_load(opt->model_dir, &c->cfg, err, err_len);
    if (rc != BERT_OK) {
        encoder_desc_free(desc);
        free(c);
        return rc == BERT_EUNSUPPORTED ? ENGINE_EUNSUPPORTED : ENGINE_EMODEL;
    }
    const bert_config *m = &c->cfg;
    const int D = m->hidden_size / m->num_heads;
    if (m->hidden_size % m->num_heads || !cuda_head_dim_supported(D)) {
        snprintf(err, err_len, "head size %d: the cuda engine's attention takes 32, 64 or 128", D);
        encoder_desc_free(desc);
        free(c);
        return ENGINE_EUNSUPPORTED;
    }
    c->dt = cuda_precision_dtype(opt->precision);
    if (cuda_weight_layout_make(m, c->dt, &c->wl, err, err_len) < 0 ||
        cuda_workspace_plan_make(m, c->dt, opt->max_tokens, opt->max_seqs, &c->plan, err, err_len) <
            0) {
        cuda_free_ctx(c);
        return ENGINE_ENOMEM;
    }
    CU(cudaSetDevice(0), "selecting device 0");
    int smem = 0;
    CU(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
       "reading the device's shared memory");
    if (c->dt != CUDA_DT_F32 && cuda_flash_smem_bytes(D) > smem) {
        snprintf(err, err_len,
                 "the attention kernel needs %d bytes of shared memory; device has %d",
                 cuda_flash_smem_bytes(D), smem);
        cuda_free_ctx(c);
        return ENGINE_EUNSUPPORTED;
    }
    /* Everything is sized now: refuse before allocating when it cannot fit. */
    size_t free_b = 0, total_b = 0;
    CU(cudaMemGetInfo(&free_b, &total_b), "reading the device's memory");
    const size_t tap_floats = (size_t)c->plan.max_tokens * 4 * (size_t)m->hidden_size;
    const size_t need = c->wl.bytes + c->plan.device_bytes;
    if (need > free_b) {
        snprintf(err, err_len,
                 "needs %zu bytes of device memory (weights %zu, workspace %zu); %zu free", need,
                 c->wl.bytes, c->plan.device_bytes, free_b);
        cuda_free_ctx(c);
        return ENGINE_ENOMEM;
    }
    CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "creating the stream");
    CU((cudaError_t)cuda_flash_prepare(), "configuring the attention kernel");
    CU(cudaMalloc((void **)&c->w, c->wl.bytes), "allocating the weights");
    CU(cudaMalloc((void **)&c->ws, c->plan.device_bytes), "allocating the workspace");
    CU(cudaMallocHost((void **)&c->host, c->plan.host_bytes), "allocating pinned buffers");
    if (c->dt == CUDA_DT_F32)
        CU(cudaMallocHost((void **)&c->tap_f32, tap_floats * sizeof(float)),
           "allocating the verification buffer");
    c->nev = 2 + EV_PER_LAYER * m->num_layers + 1;
    c->ev = calloc((size_t)c->nev, sizeof *c->ev);
    if (!c->ev) {
        snprintf(err, err_len, "out of memory");
        cuda_free_ctx(c);
        return ENGINE_ENOMEM;
    }
    for (int i = 0; i < c->nev; i++)
        CU(cudaEventCreate(&c->ev[i]), "creating events");
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "cuBLASLt did not initialise");
        cuda_free_ctx(c);
        return ENGINE_EUNSUPPORTED;
    }
    /* The encoder's GEMMs in tf32 where asked; the vectors' after pooling
     * always true fp32, as the CPU engine keeps them. */
    const cublasComputeType_t enc =
        cuda_precision_tf32(opt->precision) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (make_desc(&c->mm[0], enc, CUBLASLT_EPILOGUE_BIAS) ||
        make_desc(&c->mm[1], enc, CUBLASLT_EPILOGUE_BIAS) ||
        make_desc(&c->mv[0], CUBLAS_COMPUTE_32F, CUBLASLT_EPILOGUE_BIAS) ||
        make_desc(&c->mv[1], CUBLAS_COMPUTE_32F, CUBLASLT_EPILOGUE_DEFAULT)) {
        snprintf(err, err_len, "cuBLASLt refused the GEMM descriptor");
        cuda_free_ctx(c);
        return ENGINE_EUNSUPPORTED;
    }
    rc = load_weights(c, opt->model_dir, err, err_len);
    if (rc == ENGINE_OK)
        rc = choose_attention(c, (cuda_attn_choice)choice, err, err_len);
    if (rc != ENGINE_OK) {
        cuda_free_ctx(c);
        return rc;
    }
    *out = c;
    return ENGINE_OK;
}

static const encoder_info *cuda_model(void *ctx) {
    return encoder_desc_info(((cuda_ctx *)ctx)->desc);
}

static void cuda_memory(void *ctx, engine_memory *mem) {
    cuda_ctx *c = ctx;
    /* Device bytes: the weights, and the workspace with the pinned host
     * buffers (staging and the verification copy) beside it. */
    const size_t tap = c->dt == CUDA_DT_F32 ? (size_t)c->plan.max_tokens * 4 *
                                                  (size_t)c->cfg.hidden_size * sizeof(float)
                                            : 0;
    mem->weights_owned = c->wl.bytes;
    mem->weights_mapped = 0;
    mem->workspace = c->plan.device_bytes + c->plan.host_bytes + tap +
                     (c->sdpa ? cudnn_sdpa_workspace(c->sdpa) : 0);
}

static const char *cuda_attn_kernel(void *ctx, const char **detail) {
    cuda_ctx *c = ctx;
    *detail = c->attn_detail;
    return c->attn_name;
}

/* Shadow verification checks attention against a float64 reference within
 * a bound derived for fp32 arithmetic (kernels/reference.h). The fp32 path
 * computes attention in fp32 and is exposed; bf16's inputs and outputs are
 * rounded to 8 bits of mantissa, far outside that bound, so bf16 does not
 * expose attention and its accuracy is held by the start-up check against
 * fp32 (the cosine floor) instead. */
static int cuda_set_attn_tap(void *ctx, int layer, engine_attn_tap_fn fn, void *fn_ctx) {
    cuda_ctx *c = ctx;
    if (c->dt != CUDA_DT_F32)
        return -1;
    c->tap = fn;
    c->tap_ctx = fn_ctx;
    c->tap_layer = fn ? layer : -1;
    return 0;
}

/* The last forward's hidden states, (T, C) fp32, copied back when asked
 * (a copy per forward would cost every batch T·C elements of transfer): x
 * is untouched from the last layer's LayerNorm to the next forward. The
 * half-width types land in the upper half of the fp32 region and widen
 * in place from the front: element i's write (bytes 4i..4i+3) never reaches
 * a later element's read (2T·C + 2j, j > i). NULL before a forward or when
 * the copy fails. */
static const float *cuda_hidden(void *ctx) {
    cuda_ctx *c = ctx;
    if (c->last_T <= 0)
        return NULL;
    const size_t n = (size_t)c->last_T * (size_t)c->cfg.hidden_size;
    const size_t es = cuda_dtype_size(c->dt);
    float *dst = at(c->host, c->plan.host_hidden);
    unsigned char *raw = (unsigned char *)dst + (es == 2 ? 2 * n : 0);
    if (cudaMemcpyAsync(raw, c->ws + c->plan.x, n * es, cudaMemcpyDeviceToHost, c->stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess)
        return NULL;
    if (es == 2)
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            dst[i] = c->dt == CUDA_DT_BF16 ? cuda_bf16_to_f32(h) : cuda_f16_to_f32(h);
        }
    return dst;
}

static void cuda_stage_ns(void *ctx, encoder_stage_ns *out) {
    *out = ((cuda_ctx *)ctx)->stages;
}

/* ---- forward ------------------------------------------------------------------ */
typedef struct gemm_shape {
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulHeuristicResult_t algo;
} gemm_shape;

/* Layouts and the heuristic's algorithm of y(T, n) = x(T, k) · W(n, k)ᵀ in
 * element type t under desc: column-major, that is D(n×T) = Wᵀ... with A = W
 * seen as (k×n), ld k, transposed, and B = x seen as (k×T), ld k. */
static int shape_make_for(cuda_ctx *c, gemm_shape *s, cublasLtMatmulDesc_t desc, int t, int n,
                          int k, int T) {
    memset(s, 0, sizeof *s);
    if (cublasLtMatrixLayoutCreate(&s->a, t, (uint64_t)k, (uint64_t)n, k) ||
        cublasLtMatrixLayoutCreate(&s->b, t, (uint64_t)k, (uint64_t)T, k) ||
        cublasLtMatrixLayoutCreate(&s->d, t, (uint64_t)n, (uint64_t)T, n))
        return -1;
    cublasLtMatmulPreference_t pref;
    if (cublasLtMatmulPreferenceCreate(&pref))
        return -1;
    const size_t wsb = c->plan.lt_ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                         sizeof wsb);
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, desc, s->a, s->b, s->d, s->d,
                                                             pref, 1, &s->algo, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        c->lt_status = st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(st) : "no algorithm";
        return -1;
    }
    return 0;
}

/* An encoder GEMM's shape, in the activations' type (beta1: with the
 * residual). */
static int shape_make(cuda_ctx *c, gemm_shape *s, int n, int k, int T, int beta1) {
    return shape_make_for(c, s, c->mm[beta1], cuda_type(c->dt), n, k, T);
}

static void shape_free(gemm_shape *s) {
    if (s->a)
        cublasLtMatrixLayoutDestroy(s->a);
    if (s->b)
        cublasLtMatrixLayoutDestroy(s->b);
    if (s->d)
        cublasLtMatrixLayoutDestroy(s->d);
}

/* d = x · Wᵀ + bias (+ resid when resid != NULL, in the epilogue). */
static int gemm(cuda_ctx *c, const gemm_shape *s, size_t w_off, size_t b_off, const void *x,
                const void *resid, void *d) {
    const int beta1 = resid != NULL;
    const void *bias = c->w + b_off;
    if (cublasLtMatmulDescSetAttribute(c->mm[beta1], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias))
        return -1;
    const float alpha = 1.0f, beta = beta1 ? 1.0f : 0.0f;
    const cublasStatus_t st = cublasLtMatmul(
        c->lt, c->mm[beta1], &alpha, c->w + w_off, s->a, x, s->b, &beta, beta1 ? resid : d, s->d, d,
        s->d, &s->algo.algo, c->ws + c->plan.lt_ws, c->plan.lt_ws_bytes, c->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        c->lt_status = cublasLtGetStatusName(st);
        return -1;
    }
    return 0;
}

/* d (B, n) = act(x (B, k) · W(n, k)ᵀ + b) in fp32 on the weights at w_off
 * (and b_off; SIZE_MAX: no bias), act tanh when tanh_act: model/bert.c's
 * linear_vec for a batch of vectors. */
static int vec_linear(cuda_ctx *c, size_t w_off, size_t b_off, int n, int k, int32_t B,
                      const float *x, float *d, int tanh_act) {
    const int bias = b_off != SIZE_MAX;
    cublasLtMatmulDesc_t desc = c->mv[bias ? 0 : 1];
    gemm_shape s;
    int rc = shape_make_for(c, &s, desc, CUDA_R_32F, n, k, B);
    const void *bp = c->w + (bias ? b_off : 0);
    if (!rc && bias &&
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp))
        rc = -1;
    if (!rc) {
        const float alpha = 1.0f, beta = 0.0f;
        const cublasStatus_t st =
            cublasLtMatmul(c->lt, desc, &alpha, c->w + w_off, s.a, x, s.b, &beta, d, s.d, d, s.d,
                           &s.algo.algo, c->ws + c->plan.lt_ws, c->plan.lt_ws_bytes, c->stream);
        if (st != CUBLAS_STATUS_SUCCESS) {
            c->lt_status = cublasLtGetStatusName(st);
            rc = -1;
        }
    }
    shape_free(&s);
    if (!rc && tanh_act && cuda_tanh_f32(d, (int64_t)B * n, c->stream) != 0)
        rc = -1;
    return rc;
}

/* Copies the tapped layer's attention back as fp32 and hands it over. */
static int run_tap(cuda_ctx *c, int layer, const int32_t *cu, int32_t batch, int32_t T) {
    const size_t C = (size_t)c->cfg.hidden_size;
    if (cudaMemcpyAsync(c->tap_f32, c->ws + c->plan.qkv, (size_t)T * 3 * C * sizeof(float),
                        cudaMemcpyDeviceToHost, c->stream) != cudaSuccess ||
        cudaMemcpyAsync(c->tap_f32 + (size_t)T * 3 * C, c->ws + c->plan.att,
                        (size_t)T * C * sizeof(float), cudaMemcpyDeviceToHost,
                        c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess)
        return -1;
    const int H = c->cfg.num_heads, D = (int)C / H;
    const float *qkv = c->tap_f32;
    attn_problem p = {
        .shape = {.batch = batch, .total_tokens = T, .heads = H, .head_dim = D},
        .cu_seqlens = cu,
        .q = qkv,
        .k = qkv + C,
        .v = qkv + 2 * C,
        .out = c->tap_f32 + (size_t)T * 3 * C,
        .q_stride = 3 * C,
        .k_stride = 3 * C,
        .v_stride = 3 * C,
        .out_stride = C,
        .scale = 1.0f / sqrtf((float)D),
    };
    int32_t max_len = 0;
    for (int32_t b = 0; b < batch; b++)
        max_len = cu[b + 1] - cu[b] > max_len ? cu[b + 1] - cu[b] : max_len;
    p.shape.max_seqlen = max_len;
    c->tap(&p, layer, c->tap_ctx);
    return 0;
}

static uint64_t ev_ns(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    return (uint64_t)((double)ms * 1e6);
}

/* On failure the message names the CUDA error, or cuBLASLt's status when a
 * GEMM failed. */
#define FWD(cond, what)                                                                            \
    do {                                                                                           \
        c->lt_status = NULL;                                                                       \
        if (cond) {                                                                                \
            snprintf(err, err_len, "cuda: %s failed: %s", what,                                    \
                     c->lt_status ? c->lt_status : cudaGetErrorString(cudaGetLastError()));        \
            rc = ENGINE_EFORWARD;                                                                  \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

static int cuda_forward(void *ctx, const engine_batch *bt, const attn_backend *attn,
                        const attn_parallel *par, char *err, size_t err_len) {
    (void)attn, (void)par; /* attention runs on the GPU, not through a CPU backend */
    cuda_ctx *c = ctx;
    const bert_config *m = &c->cfg;
    const cuda_workspace_plan *pl = &c->plan;
    const int32_t B = bt->batch;
    c->last_T = 0;
    if (cuda_check_batch(bt->cu_seqlens, B, m->max_positions, pl->max_tokens, pl->max_seqs, err,
                         err_len) < 0)
        return ENGINE_EINPUT;
    const int32_t T = bt->cu_seqlens[B];
    const int C = m->hidden_size, F = m->intermediate_size, H = m->num_heads, D = C / H;
    const int dt = (int)c->dt;
    int rc = ENGINE_OK;
    gemm_shape g[G_N] = {0};
    int depth = 0; /* open NVTX ranges, closed on every way out */
#define PUSH(name) (nvtxRangePushA(name), depth++)
#define POP()      (nvtxRangePop(), depth--)

    PUSH("cuda.forward");
    /* Inputs, staged as laid out on the device, up in one copy. */
    int32_t *h_ids = (int32_t *)(c->host + pl->ids), *h_pos = (int32_t *)(c->host + pl->pos);
    int32_t *h_types = (int32_t *)(c->host + pl->types);
    int32_t *h_cu = (int32_t *)(c->host + pl->cu_seqlens),
            *h_tiles = (int32_t *)(c->host + pl->tiles);
    memcpy(h_ids, bt->ids, (size_t)T * sizeof *h_ids);
    memcpy(h_cu, bt->cu_seqlens, (size_t)(B + 1) * sizeof *h_cu);
    cuda_positions(m, bt->ids, bt->cu_seqlens, B, h_pos);
    /* Token types as the batch gives them (NULL: all type 0, as embedders
     * take); the whole type table is on the device either way. */
    if (cuda_stage_types(bt->type_ids, T, m->type_vocab_size, h_types, err, err_len) < 0) {
        POP();
        return ENGINE_EINPUT;
    }
    const int32_t ntiles =
        cuda_attn_tiles(bt->cu_seqlens, B, CUDA_ATTN_BLOCK_M, h_tiles, pl->max_tiles);
    FWD(ntiles < 0, "tiling the batch");
    if (c->sdpa)
        cuda_sdpa_arrays(bt->cu_seqlens, B, pl->max_seqs, 3 * (int64_t)m->hidden_size,
                         m->hidden_size, (int32_t *)(c->host + pl->sdpa_seq),
                         (int64_t *)(c->host + pl->sdpa_off_qkv),
                         (int64_t *)(c->host + pl->sdpa_off_o));
    FWD(cudaMemcpyAsync(c->ws, c->host, pl->host_in_bytes, cudaMemcpyHostToDevice, c->stream),
        "uploading the batch");

    FWD(shape_make(c, &g[G_QKV], 3 * C, C, T, 0) || shape_make(c, &g[G_OUT], C, C, T, 1) ||
            shape_make(c, &g[G_FFN_IN], F, C, T, 0) || shape_make(c, &g[G_FFN_OUT], C, F, T, 1),
        "planning the GEMMs");

    void *x = c->ws + pl->x, *qkv = c->ws + pl->qkv, *att = c->ws + pl->att;
    void *tmp = c->ws + pl->tmp, *ffn = c->ws + pl->ffn;
    const int32_t *d_ids = (const int32_t *)(c->ws + pl->ids);
    const int32_t *d_pos = (const int32_t *)(c->ws + pl->pos);
    const int32_t *d_types = (const int32_t *)(c->ws + pl->types);
    const int32_t *d_cu = (const int32_t *)(c->ws + pl->cu_seqlens);
    const cuda_attn_args aa = {.qkv = qkv,
                               .out = att,
                               .cu_seqlens = d_cu,
                               .tiles = (const int32_t *)(c->ws + pl->tiles),
                               .ntiles = ntiles,
                               .batch = B,
                               .heads = H,
                               .head_dim = D,
                               .scale = 1.0f / sqrtf((float)D)};
    const float eps = m->layer_norm_eps;
    int e = 0;
    cudaEventRecord(c->ev[0], c->stream);
    PUSH("cuda.embeddings");
    FWD(cuda_embed_ln(dt, d_ids, d_types, d_pos, c->w + c->wl.wte, c->w + c->wl.wpe,
                      c->w + c->wl.wtt, at(c->w, c->wl.emb_ln_w), at(c->w, c->wl.emb_ln_b), eps, x,
                      T, C, c->stream),
        "embeddings");
    POP();
    cudaEventRecord(c->ev[++e], c->stream);
    for (int l = 0; l < m->num_layers; l++) {
        const cuda_layer_offsets *o = &c->wl.layers[l];
        PUSH("cuda.layer");
        FWD(gemm(c, &g[G_QKV], o->qkv_w, o->qkv_b, x, NULL, qkv), "QKV GEMM");
        cudaEventRecord(c->ev[++e], c->stream);
        if (c->sdpa) {
            char why[256];
            if (cudnn_sdpa_run(c->sdpa, why, sizeof why) < 0) {
                snprintf(err, err_len, "cuda: attention failed: %s", why);
                rc = ENGINE_EFORWARD;
                goto done;
            }
        } else {
            FWD(dt == CUDA_DT_F32 ? cuda_attention_ref(dt, &aa, T, c->stream)
                : c->flash2       ? cuda_flash2_attention(dt, &aa, c->stream)
                                  : cuda_flash_attention(dt, &aa, c->stream),
                "attention");
        }
        cudaEventRecord(c->ev[++e], c->stream);
        if (c->tap && l == c->tap_layer)
            FWD(run_tap(c, l, bt->cu_seqlens, B, T), "copying attention for verification");
        FWD(gemm(c, &g[G_OUT], o->attn_o_w, o->attn_o_b, att, x, tmp), "output GEMM");
        FWD(cuda_layernorm(dt, tmp, at(c->w, o->ln1_w), at(c->w, o->ln1_b), eps, x, T, C,
                           c->stream),
            "LayerNorm");
        cudaEventRecord(c->ev[++e], c->stream);
        FWD(gemm(c, &g[G_FFN_IN], o->ffn_in_w, o->ffn_in_b, x, NULL, ffn), "FFN-in GEMM");
        FWD(cuda_gelu(dt, ffn, (int64_t)T * F, c->stream), "GELU");
        FWD(gemm(c, &g[G_FFN_OUT], o->ffn_out_w, o->ffn_out_b, ffn, x, tmp), "FFN-out GEMM");
        FWD(cuda_layernorm(dt, tmp, at(c->w, o->ln2_w), at(c->w, o->ln2_b), eps, x, T, C,
                           c->stream),
            "LayerNorm");
        cudaEventRecord(c->ev[++e], c->stream);
        POP();
    }
    PUSH("cuda.pooling");
    /* Pooling, then a classifier's head or the Dense modules, then
     * Normalize: model/bert.c's pool_task for the whole batch, in fp32, the
     * vectors going back and forth between pooled and pooled2. */
    float *v = at(c->ws, pl->pooled), *v2 = at(c->ws, pl->pooled2);
    const bool projected = m->head != BERT_HEAD_NONE || m->ndense > 0;
    const bool norm = m->head == BERT_HEAD_NONE && m->normalize && !bt->raw;
    FWD(cuda_pool(dt, x, d_cu, B, C, cuda_pool_mode(m), norm && !projected, v, c->stream),
        "pooling");
    const cuda_head_offsets *ho = &c->wl.head;
    if (m->head != BERT_HEAD_NONE) {
        FWD(vec_linear(c, ho->w1, ho->b1, C, C, B, v, v2, 1), "the classifier head");
        FWD(vec_linear(c, ho->w2, ho->b2, m->num_labels, C, B, v2, v, 0), "the classifier head");
    }
    for (int i = 0; m->head == BERT_HEAD_NONE && i < m->ndense; i++) {
        const bert_dense *dm = &m->dense[i];
        FWD(vec_linear(c, ho->dense_w[i], ho->dense_b[i], dm->out_features, dm->in_features, B, v,
                       v2, dm->act == BERT_ACT_TANH),
            "a Dense module");
        float *swap = v;
        v = v2;
        v2 = swap;
    }
    const int Dout = m->output_dim;
    if (norm && projected)
        FWD(cuda_l2_normalize(v, B, Dout, c->stream), "Normalize");
    POP();
    cudaEventRecord(c->ev[++e], c->stream);
    float *h_out = at(c->host, pl->host_in_bytes);
    FWD(cudaMemcpyAsync(h_out, v, (size_t)B * Dout * sizeof(float), cudaMemcpyDeviceToHost,
                        c->stream),
        "copying the vectors back");
    FWD(cudaStreamSynchronize(c->stream), "the forward");
    memcpy(bt->out, h_out, (size_t)B * Dout * sizeof(float));
    c->last_T = T;

    /* Stage times from the events (device time, summed over layers). */
    encoder_stage_ns s = {0};
    s.embeddings = ev_ns(c->ev[0], c->ev[1]);
    for (int l = 0; l < m->num_layers; l++) {
        cudaEvent_t *v = &c->ev[1 + EV_PER_LAYER * l];
        s.qkv += ev_ns(v[0], v[1]);
        s.attention += ev_ns(v[1], v[2]);
        s.out_proj += ev_ns(v[2], v[3]);
        s.ffn += ev_ns(v[3], v[4]);
    }
    s.pooling = ev_ns(c->ev[e - 1], c->ev[e]);
    double af = 0.0;
    for (int32_t b = 0; b < B; b++) {
        const double len = bt->cu_seqlens[b + 1] - bt->cu_seqlens[b];
        af += 4.0 * len * len * D * H;
    }
    s.attn_flops = af * m->num_layers;
    c->stages = s;
done:
    for (int i = 0; i < G_N; i++)
        shape_free(&g[i]);
    while (depth > 0)
        POP();
    if (rc != ENGINE_OK)
        cudaStreamSynchronize(c->stream);
    return rc;
}

/* ---- the attention kernel: chosen and checked at start ---------------------------- */

/* A batch of the model's own shape (cuda_attn_probe's lengths, pseudo-random
 * Q, K, V in [-1, 1) rounded to the dtype) placed in the workspace as a
 * forward places it. */
typedef struct probe {
    int32_t cu[CUDA_PROBE_SEQS + 1];
    int32_t B, T;
    cuda_attn_args aa;
    double vmax; /* max |v| over the rounded V */
    float *want; /* (T, C): the fp32 kernel's output */
    float *got;  /* (T, C): the kernel under check */
    void *h_out; /* (T, C) in the dtype, as copied back */
} probe;

static void probe_free(probe *p) {
    free(p->want);
    free(p->got);
    free(p->h_out);
}

static int probe_make(cuda_ctx *c, probe *p, char *err, size_t err_len) {
    const cuda_workspace_plan *pl = &c->plan;
    const int H = c->cfg.num_heads, C = c->cfg.hidden_size, D = C / H;
    int32_t lens[CUDA_PROBE_SEQS];
    memset(p, 0, sizeof *p);
    p->B = cuda_attn_probe(pl->max_tokens, pl->max_seqs, c->cfg.max_positions, lens);
    for (int32_t b = 0; b < p->B; b++)
        p->cu[b + 1] = p->cu[b] + lens[b];
    p->T = p->cu[p->B];
    const size_t es = cuda_dtype_size(c->dt), n = (size_t)p->T * 3 * (size_t)C;
    const size_t out_n = (size_t)p->T * (size_t)C;
    unsigned char *h_qkv = malloc(n * es);
    p->want = malloc(out_n * sizeof(float));
    p->got = malloc(out_n * sizeof(float));
    p->h_out = malloc(out_n * es);
    if (!h_qkv || !p->want || !p->got || !p->h_out) {
        free(h_qkv);
        probe_free(p);
        snprintf(err, err_len, "out of memory");
        return ENGINE_ENOMEM;
    }
    uint32_t x = 12345u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        const float v = (float)(x >> 8) / 8388608.0f - 1.0f, r = v;
        cuda_store(c->dt, h_qkv + i * es, &r, 1);
        const uint16_t bits = ((const uint16_t *)h_qkv)[i];
        const double back = c->dt == CUDA_DT_BF16 ? cuda_bf16_to_f32(bits) : cuda_f16_to_f32(bits);
        if (i % (3 * (size_t)C) >= 2 * (size_t)C && fabs(back) > p->vmax)
            p->vmax = fabs(back);
    }
    /* Staged as cuda_forward stages a batch: cu_seqlens, tiles and cuDNN's
     * arrays in the pinned buffer, up in one copy; Q, K, V where the QKV
     * GEMM writes them. */
    memcpy(c->host + pl->cu_seqlens, p->cu, (size_t)(p->B + 1) * sizeof(int32_t));
    const int32_t ntiles = cuda_attn_tiles(p->cu, p->B, CUDA_ATTN_BLOCK_M,
                                           (int32_t *)(c->host + pl->tiles), pl->max_tiles);
    cuda_sdpa_arrays(p->cu, p->B, pl->max_seqs, 3 * (int64_t)C, C,
                     (int32_t *)(c->host + pl->sdpa_seq), (int64_t *)(c->host + pl->sdpa_off_qkv),
                     (int64_t *)(c->host + pl->sdpa_off_o));
    cudaError_t e = cudaMemcpy(c->ws, c->host, pl->host_in_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(c->ws + pl->qkv, h_qkv, n * es, cudaMemcpyHostToDevice);
    free(h_qkv);
    if (ntiles < 0 || e != cudaSuccess) {
        probe_free(p);
        snprintf(err, err_len, "staging the attention check: %s",
                 ntiles < 0 ? "too many tiles" : cudaGetErrorString(e));
        return ENGINE_EUNSUPPORTED;
    }
    p->aa = (cuda_attn_args){.qkv = c->ws + pl->qkv,
                             .out = c->ws + pl->att,
                             .cu_seqlens = (const int32_t *)(c->ws + pl->cu_seqlens),
                             .tiles = (const int32_t *)(c->ws + pl->tiles),
                             .ntiles = ntiles,
                             .batch = p->B,
                             .heads = H,
                             .head_dim = D,
                             .scale = 1.0f / sqrtf((float)D)};
    return ENGINE_OK;
}

enum { K_REF, K_FLASH, K_CUDNN, K_FLASH2 };

/* Enqueues kernel k on the probe; 0 or -1 with why. */
static int probe_launch(cuda_ctx *c, const probe *p, int k, char *why, size_t why_len) {
    if (k == K_CUDNN)
        return cudnn_sdpa_run(c->sdpa, why, why_len);
    const int e = k == K_REF      ? cuda_attention_ref((int)c->dt, &p->aa, p->T, c->stream)
                  : k == K_FLASH2 ? cuda_flash2_attention((int)c->dt, &p->aa, c->stream)
                                  : cuda_flash_attention((int)c->dt, &p->aa, c->stream);
    if (e != 0)
        snprintf(why, why_len, "launch: %s", cudaGetErrorString((cudaError_t)e));
    return e != 0 ? -1 : 0;
}

/* Runs kernel k once and copies its output, as floats, into dst. */
static int probe_run(cuda_ctx *c, probe *p, int k, float *dst, char *why, size_t why_len) {
    const size_t n = (size_t)p->T * (size_t)c->cfg.hidden_size, es = cuda_dtype_size(c->dt);
    if (cudaMemsetAsync(c->ws + c->plan.att, 0xff, n * es, c->stream) != cudaSuccess ||
        probe_launch(c, p, k, why, why_len) < 0)
        return -1;
    cudaError_t e =
        cudaMemcpyAsync(p->h_out, c->ws + c->plan.att, n * es, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "%s", cudaGetErrorString(e));
        return -1;
    }
    const uint16_t *h = p->h_out;
    for (size_t i = 0; i < n; i++)
        dst[i] = c->dt == CUDA_DT_BF16 ? cuda_bf16_to_f32(h[i]) : cuda_f16_to_f32(h[i]);
    return 0;
}

/* Checks kernel k against the fp32 kernel (p->want) within
 * cuda_attn_check_bound; the output starts as NaN (0xff bytes), so a row
 * the kernel leaves unwritten fails. 0, or -1 with why. */
static int probe_check(cuda_ctx *c, probe *p, int k, char *why, size_t why_len) {
    if (probe_run(c, p, k, p->got, why, why_len) < 0)
        return -1;
    const size_t n = (size_t)p->T * (size_t)c->cfg.hidden_size;
    const double bound = cuda_attn_check_bound(c->dt) * p->vmax;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = isfinite(p->got[i]) ? fabs((double)p->got[i] - p->want[i]) : INFINITY;
        worst = d > worst ? d : worst;
    }
    if (!(worst <= bound)) {
        snprintf(why, why_len, "max error %.3g against the fp32 kernel is above the bound %.3g",
                 worst, bound);
        return -1;
    }
    return 0;
}

/* Milliseconds per run of kernel k on the probe: the mean of 10 after 3
 * warm-ups, timed with CUDA events. Negative when a run failed. */
static double probe_time(cuda_ctx *c, const probe *p, int k) {
    char why[256];
    for (int i = 0; i < 3; i++)
        if (probe_launch(c, p, k, why, sizeof why) < 0)
            return -1.0;
    cudaEventRecord(c->ev[0], c->stream);
    for (int i = 0; i < 10; i++)
        if (probe_launch(c, p, k, why, sizeof why) < 0)
            return -1.0;
    cudaEventRecord(c->ev[1], c->stream);
    float ms = 0.0f;
    if (cudaEventSynchronize(c->ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]) != cudaSuccess)
        return -1.0;
    return ms / 10.0;
}

/* "%.4f ms" for a timed kernel, else "not run (why)". */
static void fmt_time(char *buf, size_t n, double ms, const char *why) {
    if (ms > 0.0)
        snprintf(buf, n, "%.4f ms", ms);
    else
        snprintf(buf, n, "not run (%s)", why);
}

/* Picks the attention kernel (see the `gpu_attention` setting): fp32 runs
 * the fp32 kernel; otherwise cuDNN's plan is built for auto and cudnn, each
 * candidate (flash2 for auto and flash2) must match the fp32 kernel on a
 * batch of the model's shape, and under auto the fastest that passed on
 * that batch runs. cuDNN absent, refusing or failing its check, or flash2
 * failing its check, leaves flash, with the reason in attn_detail; flash
 * failing its check (when it may run) refuses the engine. */
static int choose_attention(cuda_ctx *c, cuda_attn_choice choice, char *err, size_t err_len) {
    char *d = c->attn_detail;
    const size_t dl = sizeof c->attn_detail;
    if (c->dt == CUDA_DT_F32) {
        c->attn_name = "fp32";
        snprintf(d, dl, "fp32 and tf32 run the fp32 kernel%s",
                 choice == CUDA_ATTN_CUDNN || choice == CUDA_ATTN_FLASH2
                     ? " (cudnn and flash2 take fp16/bf16)"
                     : "");
        return ENGINE_OK;
    }
    const cuda_workspace_plan *pl = &c->plan;
    const bert_config *m = &c->cfg;
    char why[256] = "", cudnn_why[160] = "not asked for", flash2_why[160] = "not asked for";
    if (choice == CUDA_ATTN_AUTO || choice == CUDA_ATTN_CUDNN) {
        const cudnn_sdpa_desc sd = {.dtype = (int)c->dt,
                                    .max_seqs = pl->max_seqs,
                                    .max_len = m->max_positions < pl->max_tokens ? m->max_positions
                                                                                 : pl->max_tokens,
                                    .heads = m->num_heads,
                                    .head_dim = m->hidden_size / m->num_heads,
                                    .causal = 0,
                                    .scale = 1.0f / sqrtf((float)(m->hidden_size / m->num_heads)),
                                    .qkv = c->ws + pl->qkv,
                                    .out = c->ws + pl->att,
                                    .seq = (const int32_t *)(c->ws + pl->sdpa_seq),
                                    .off_qkv = (const int64_t *)(c->ws + pl->sdpa_off_qkv),
                                    .off_o = (const int64_t *)(c->ws + pl->sdpa_off_o),
                                    .stream = c->stream};
        if (cudnn_sdpa_create(&sd, &c->sdpa, why, sizeof why) < 0) {
            snprintf(d, dl, "cudnn refused: %s", why);
            snprintf(cudnn_why, sizeof cudnn_why, "refused: %s", why);
        }
    }
    probe p;
    int rc = probe_make(c, &p, err, err_len);
    if (rc != ENGINE_OK)
        return rc;
    if (probe_run(c, &p, K_REF, p.want, why, sizeof why) < 0) {
        snprintf(err, err_len, "the fp32 attention kernel failed on the check batch: %s", why);
        probe_free(&p);
        return ENGINE_EUNSUPPORTED;
    }
    if (c->sdpa && probe_check(c, &p, K_CUDNN, why, sizeof why) < 0) {
        snprintf(d, dl, "cudnn failed its start-up check: %s", why);
        snprintf(cudnn_why, sizeof cudnn_why, "failed its check: %s", why);
        cudnn_sdpa_destroy(c->sdpa);
        c->sdpa = NULL;
    }
    bool flash2 = false;
    if (choice == CUDA_ATTN_AUTO || choice == CUDA_ATTN_FLASH2) {
        flash2 = probe_check(c, &p, K_FLASH2, why, sizeof why) == 0;
        if (!flash2) {
            snprintf(d, dl, "flash2 failed its start-up check: %s", why);
            snprintf(flash2_why, sizeof flash2_why, "failed its check: %s", why);
        }
    }
    const bool need_flash = choice == CUDA_ATTN_AUTO || (!c->sdpa && !flash2);
    if (need_flash && probe_check(c, &p, K_FLASH, why, sizeof why) < 0) {
        snprintf(err, err_len, "the flash attention kernel failed its start-up check: %s", why);
        probe_free(&p);
        return ENGINE_EUNSUPPORTED;
    }
    const int D = m->hidden_size / m->num_heads;
    if (choice == CUDA_ATTN_AUTO && (c->sdpa || flash2)) {
        const double t_flash = probe_time(c, &p, K_FLASH);
        const double t_flash2 = flash2 ? probe_time(c, &p, K_FLASH2) : -1.0;
        const double t_cudnn = c->sdpa ? probe_time(c, &p, K_CUDNN) : -1.0;
        if (flash2 && t_flash2 <= 0.0)
            snprintf(flash2_why, sizeof flash2_why, "its timing failed");
        if (c->sdpa && t_cudnn <= 0.0)
            snprintf(cudnn_why, sizeof cudnn_why, "its timing failed");
        /* The fastest of those timed; flash when none was. */
        double best = t_flash > 0.0 ? t_flash : INFINITY;
        int k = K_FLASH;
        if (t_flash2 > 0.0 && t_flash2 < best)
            best = t_flash2, k = K_FLASH2;
        if (t_cudnn > 0.0 && t_cudnn < best)
            k = K_CUDNN;
        char s2[200], sc[200];
        fmt_time(s2, sizeof s2, t_flash2, flash2_why);
        fmt_time(sc, sizeof sc, t_cudnn, cudnn_why);
        /* In two steps, each piece bounded: the reasons may be long. */
        const int n = snprintf(d, dl, "auto: flash %.4f ms, flash2 %s", t_flash, s2);
        if (n > 0 && (size_t)n < dl)
            snprintf(d + n, dl - (size_t)n,
                     ", cudnn %s per layer on %d sequences (%d tokens), %d heads of %d; those "
                     "timed were checked",
                     sc, p.B, p.T, m->num_heads, D);
        flash2 = k == K_FLASH2;
        if (k != K_CUDNN && c->sdpa) {
            cudnn_sdpa_destroy(c->sdpa);
            c->sdpa = NULL;
        }
    } else if (c->sdpa) {
        snprintf(d, dl, "cudnn as configured (cuDNN %zu); checked",
                 cudnn_sdpa_version(why, sizeof why));
    } else if (flash2) {
        snprintf(d, dl, "flash2 as configured; checked");
    } else if (choice == CUDA_ATTN_FLASH) {
        snprintf(d, dl, "flash as configured; checked");
    } else if (choice == CUDA_ATTN_AUTO) {
        snprintf(d, dl, "auto: flash, the only one left (flash2 %s; cudnn %s)", flash2_why,
                 cudnn_why);
    }
    probe_free(&p);
    c->flash2 = !c->sdpa && flash2;
    c->attn_name = c->sdpa ? "cudnn" : c->flash2 ? "flash2" : "flash";
    return ENGINE_OK;
}

static const engine_iface engine_cuda = {
    .name = "cuda",
    .summary = "the encoder on one NVIDIA GPU (sm_80+): cuBLASLt GEMMs, flash or flash2 "
               "attention on tensor cores or cuDNN's fused SDPA (gpu_attention) (plugin)",
    .score = cuda_score,
    .precision_unsupported = cuda_precision_unsupported,
    .init = cuda_init,
    .free = cuda_free_ctx,
    .model = cuda_model,
    .forward = cuda_forward,
    .memory = cuda_memory,
    .set_attn_tap = cuda_set_attn_tap,
    .hidden = cuda_hidden,
    .stage_ns = cuda_stage_ns,
    .attn_kernel = cuda_attn_kernel,
};

__attribute__((visibility("default"))) const engine_plugin attnserve_engine_plugin = {
    .api_version = ENGINE_API_VERSION,
    .iface = &engine_cuda,
};

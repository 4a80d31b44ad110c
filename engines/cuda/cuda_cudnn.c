/* cuda_cudnn.c — cuDNN's fused SDPA forward through the backend API in
 * plain C, every cuDNN function resolved with dlsym (see cuda_cudnn.h).
 *
 * The graph is one CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR (cuDNN's own
 * fused attention, the "unified" SDPA of cudnn-frontend) on Q, K, V and O
 * tensors of dims (B_max, H, S_max, D): Q, K and V share the QKV buffer
 * (base + 0, C, 2C elements) with strides (S_max·3C, D, 3C, 1) and one
 * ragged offset per sequence (cu[b]·3C), as the T3HD layout of packed
 * varlen attention; O has strides (S_max·C, D, C, 1) and offsets cu[b]·C.
 * seq_len_q = seq_len_kv give each sequence's length, which is the padding
 * mask; the scale is a float passed by value. The heuristics' first engine
 * configuration whose plan finalises is kept, and the variant pack (device
 * pointers fixed at start) is built once, so a run is one
 * cudnnBackendExecute. */
#include "cuda_cudnn.h"

#include "cuda_plan.h"

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the library, loaded once ------------------------------------------------- */
static struct {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(cudnnStatus_t);
    void (*GetLastErrorString)(char *, size_t);
    cudnnStatus_t (*Create)(cudnnHandle_t *);
    cudnnStatus_t (*Destroy)(cudnnHandle_t);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*CreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*DestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*SetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                  cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*GetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                  cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} dnn;

/* In the order of dnn's members. */
static const char *const dnn_names[] = {
    "cudnnGetVersion",
    "cudnnGetErrorString",
    "cudnnGetLastErrorString",
    "cudnnCreate",
    "cudnnDestroy",
    "cudnnSetStream",
    "cudnnBackendCreateDescriptor",
    "cudnnBackendDestroyDescriptor",
    "cudnnBackendSetAttribute",
    "cudnnBackendGetAttribute",
    "cudnnBackendFinalize",
    "cudnnBackendExecute",
};
_Static_assert(sizeof dnn == sizeof dnn_names / sizeof dnn_names[0] * sizeof(void *),
               "one name per cuDNN function pointer");

static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;
static size_t dnn_version;
static char dnn_why[256];

static void dnn_load(void) {
    void *fns[sizeof dnn_names / sizeof dnn_names[0]];
    if (!cuda_dl_open("libcudnn.so.9", dnn_names, sizeof fns / sizeof fns[0], fns, dnn_why,
                      sizeof dnn_why))
        return;
    /* The handle stays open for the process's life: plans hold its code. */
    memcpy(&dnn, fns, sizeof dnn);
    const size_t v = dnn.GetVersion();
    if (cuda_cudnn_version_check(v, dnn_why, sizeof dnn_why) == 0)
        dnn_version = v;
}

size_t cudnn_sdpa_version(char *why, size_t why_len) {
    pthread_once(&dnn_once, dnn_load);
    if (!dnn_version)
        snprintf(why, why_len, "%s", dnn_why);
    return dnn_version;
}

/* ---- the plan ------------------------------------------------------------------ */
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_SCALE,
    UID_SEQ_Q,
    UID_SEQ_KV,
    UID_OFF_Q,
    UID_OFF_K,
    UID_OFF_V,
    UID_OFF_O,
    N_UID = UID_OFF_O
};

/* Most descriptors a plan holds: the tensors, the operation, the graph,
 * the heuristics, the engine configurations tried, the plan and the
 * variant pack. */
#define MAX_CFGS 16
#define MAX_DESC (N_UID + 4 + MAX_CFGS + 2)

struct cudnn_sdpa {
    cudnnHandle_t handle;
    cudnnBackendDescriptor_t desc[MAX_DESC];
    int ndesc;
    cudnnBackendDescriptor_t plan, pack;
    void *ws;
    size_t ws_bytes;
    float scale; /* read by value at every run: lives as long as the plan */
};

/* why = what failed, cuDNN's status and its last error message. */
static int fail(const char *what, cudnnStatus_t st, char *why, size_t why_len) {
    char last[256] = "";
    dnn.GetLastErrorString(last, sizeof last);
    snprintf(why, why_len, "cuDNN %s: %s%s%s", what, dnn.GetErrorString(st), *last ? ": " : "",
             last);
    return -1;
}

#define DNN(call, what)                                                                            \
    do {                                                                                           \
        const cudnnStatus_t st_ = (call);                                                          \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                           \
            return fail(what, st_, why, why_len);                                                  \
    } while (0)

/* A new descriptor of type t, owned by s (destroyed with it). */
static int make(cudnn_sdpa *s, cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d,
                char *why, size_t why_len) {
    if (s->ndesc == MAX_DESC) {
        snprintf(why, why_len, "cuDNN plan: too many descriptors");
        return -1;
    }
    DNN(dnn.CreateDescriptor(t, d), "creating a descriptor");
    s->desc[s->ndesc++] = *d;
    return 0;
}

static int tensor(cudnn_sdpa *s, cudnnBackendDescriptor_t *t, int64_t uid, cudnnDataType_t type,
                  const int64_t dim[4], const int64_t stride[4], bool by_value,
                  cudnnBackendDescriptor_t ragged, char *why, size_t why_len) {
    const int64_t align = 16;
    if (make(s, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t, why, why_len) < 0)
        return -1;
    DNN(dnn.SetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type),
        "tensor data type");
    DNN(dnn.SetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim),
        "tensor dimensions");
    DNN(dnn.SetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride),
        "tensor strides");
    DNN(dnn.SetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), "tensor id");
    DNN(dnn.SetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align),
        "tensor alignment");
    if (by_value)
        DNN(dnn.SetAttribute(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value),
            "tensor by value");
    if (ragged)
        DNN(dnn.SetAttribute(*t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged),
            "tensor ragged offsets");
    DNN(dnn.Finalize(*t), "finalising a tensor");
    return 0;
}

static int set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                    cudnnBackendDescriptor_t v, char *why, size_t why_len) {
    DNN(dnn.SetAttribute(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v), "setting an operand");
    return 0;
}

/* The SDPA operation on the packed layout, finalised into a graph. */
static int build_graph(cudnn_sdpa *s, const cudnn_sdpa_desc *d, cudnnBackendDescriptor_t *graph,
                       char *why, size_t why_len) {
    const int64_t B = d->max_seqs, H = d->heads, S = d->max_len, D = d->head_dim, C = H * D;
    const cudnnDataType_t act = d->dtype == CUDA_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    const int64_t one[4] = {1, 1, 1, 1}, per_seq[4] = {B, 1, 1, 1}, per_edge[4] = {B + 1, 1, 1, 1};
    const int64_t dim[4] = {B, H, S, D};
    const int64_t qkv_stride[4] = {S * 3 * C, D, 3 * C, 1}, o_stride[4] = {S * C, D, C, 1};
    cudnnBackendDescriptor_t off[4], q, k, v, o, scale, seq_q, seq_kv, op;
    for (int i = 0; i < 4; i++)
        if (tensor(s, &off[i], UID_OFF_Q + i, CUDNN_DATA_INT64, per_edge, one, false, NULL, why,
                   why_len) < 0)
            return -1;
    if (tensor(s, &q, UID_Q, act, dim, qkv_stride, false, off[0], why, why_len) < 0 ||
        tensor(s, &k, UID_K, act, dim, qkv_stride, false, off[1], why, why_len) < 0 ||
        tensor(s, &v, UID_V, act, dim, qkv_stride, false, off[2], why, why_len) < 0 ||
        tensor(s, &o, UID_O, act, dim, o_stride, false, off[3], why, why_len) < 0 ||
        tensor(s, &scale, UID_SCALE, CUDNN_DATA_FLOAT, one, one, true, NULL, why, why_len) < 0 ||
        tensor(s, &seq_q, UID_SEQ_Q, CUDNN_DATA_INT32, per_seq, one, false, NULL, why, why_len) <
            0 ||
        tensor(s, &seq_kv, UID_SEQ_KV, CUDNN_DATA_INT32, per_seq, one, false, NULL, why, why_len) <
            0)
        return -1;
    if (make(s, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &op, why, why_len) < 0 ||
        set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q, why, why_len) < 0 ||
        set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k, why, why_len) < 0 ||
        set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v, why, why_len) < 0 ||
        set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o, why, why_len) < 0 ||
        set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale, why, why_len) < 0 ||
        set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, seq_q, why, why_len) < 0 ||
        set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, seq_kv, why, why_len) < 0)
        return -1;
    DNN(dnn.Finalize(op), "SDPA operation");
    if (make(s, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph, why, why_len) < 0 ||
        set_desc(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op, why, why_len) < 0)
        return -1;
    DNN(dnn.SetAttribute(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
                         &s->handle),
        "graph handle");
    DNN(dnn.Finalize(*graph), "SDPA graph");
    return 0;
}

/* The first engine configuration of heuristics mode `mode` whose plan
 * finalises on this GPU becomes s->plan. 0, or -1 with the last refusal. */
static int pick_plan(cudnn_sdpa *s, cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                     char *why, size_t why_len) {
    cudnnBackendDescriptor_t heur, cfg[MAX_CFGS];
    if (make(s, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur, why, why_len) < 0 ||
        set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, why, why_len) < 0)
        return -1;
    DNN(dnn.SetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode),
        "heuristics mode");
    DNN(dnn.Finalize(heur), "heuristics");
    int64_t count = 0;
    DNN(dnn.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                         &count, NULL),
        "counting engine configurations");
    if (count > MAX_CFGS)
        count = MAX_CFGS;
    for (int64_t i = 0; i < count; i++)
        if (make(s, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i], why, why_len) < 0)
            return -1;
    int64_t got = 0;
    if (count > 0)
        DNN(dnn.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                             count, &got, cfg),
            "reading engine configurations");
    snprintf(why, why_len, "cuDNN heuristics: no engine configuration for this graph");
    for (int64_t i = 0; i < got; i++) {
        cudnnBackendDescriptor_t plan;
        if (make(s, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan, why, why_len) < 0)
            return -1;
        DNN(dnn.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                             &s->handle),
            "plan handle");
        if (set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg[i], why, why_len) < 0)
            return -1;
        const cudnnStatus_t st = dnn.Finalize(plan);
        if (st == CUDNN_STATUS_SUCCESS) {
            s->plan = plan;
            return 0;
        }
        fail("execution plan", st, why, why_len);
    }
    return -1;
}

/* The variant pack: every tensor's device (or, for the scale, host)
 * address and the workspace, fixed for the plan's life. */
static int bind(cudnn_sdpa *s, const cudnn_sdpa_desc *d, char *why, size_t why_len) {
    const size_t es = 2, C = (size_t)d->heads * (size_t)d->head_dim;
    const char *qkv = d->qkv;
    const int64_t uids[N_UID] = {UID_Q,      UID_K,     UID_V,     UID_O,     UID_SCALE, UID_SEQ_Q,
                                 UID_SEQ_KV, UID_OFF_Q, UID_OFF_K, UID_OFF_V, UID_OFF_O};
    void *ptrs[N_UID] = {(void *)qkv,
                         (void *)(qkv + C * es),
                         (void *)(qkv + 2 * C * es),
                         d->out,
                         &s->scale,
                         (void *)d->seq,
                         (void *)d->seq,
                         (void *)d->off_qkv,
                         (void *)d->off_qkv,
                         (void *)d->off_qkv,
                         (void *)d->off_o};
    if (make(s, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &s->pack, why, why_len) < 0)
        return -1;
    DNN(dnn.SetAttribute(s->pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, N_UID,
                         uids),
        "variant pack ids");
    DNN(dnn.SetAttribute(s->pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, N_UID,
                         ptrs),
        "variant pack pointers");
    DNN(dnn.SetAttribute(s->pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                         &s->ws),
        "variant pack workspace");
    DNN(dnn.Finalize(s->pack), "variant pack");
    return 0;
}

int cudnn_sdpa_create(const cudnn_sdpa_desc *d, cudnn_sdpa **out, char *why, size_t why_len) {
    *out = NULL;
    if (!cudnn_sdpa_version(why, why_len))
        return -1;
    if (d->dtype != CUDA_DT_F16 && d->dtype != CUDA_DT_BF16) {
        snprintf(why, why_len, "cuDNN's SDPA takes fp16 or bf16, not %s",
                 cuda_dtype_name((cuda_dtype)d->dtype));
        return -1;
    }
    if (d->causal) {
        snprintf(why, why_len, "the cudnn kernel does not take a causal mask yet");
        return -1;
    }
    cudnn_sdpa *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    s->scale = d->scale;
    cudnnBackendDescriptor_t graph;
    int rc = 0;
    cudnnStatus_t st = dnn.Create(&s->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        s->handle = NULL;
        rc = fail("handle", st, why, why_len);
    }
    if (rc == 0 && (st = dnn.SetStream(s->handle, (cudaStream_t)d->stream)) != CUDNN_STATUS_SUCCESS)
        rc = fail("stream", st, why, why_len);
    if (rc == 0)
        rc = build_graph(s, d, &graph, why, why_len);
    if (rc == 0 && pick_plan(s, graph, CUDNN_HEUR_MODE_A, why, why_len) < 0)
        rc = pick_plan(s, graph, CUDNN_HEUR_MODE_FALLBACK, why, why_len);
    int64_t ws = 0, n = 0;
    if (rc == 0 && (st = dnn.GetAttribute(s->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                          CUDNN_TYPE_INT64, 1, &n, &ws)) != CUDNN_STATUS_SUCCESS)
        rc = fail("workspace size", st, why, why_len);
    if (rc == 0 && ws > 0) {
        const cudaError_t e = cudaMalloc(&s->ws, (size_t)ws);
        if (e != cudaSuccess) {
            snprintf(why, why_len, "allocating cuDNN's workspace of %lld bytes: %s", (long long)ws,
                     cudaGetErrorString(e));
            s->ws = NULL;
            rc = -1;
        }
        s->ws_bytes = (size_t)ws;
    }
    if (rc == 0)
        rc = bind(s, d, why, why_len);
    if (rc != 0) {
        cudnn_sdpa_destroy(s);
        return -1;
    }
    *out = s;
    return 0;
}

size_t cudnn_sdpa_workspace(const cudnn_sdpa *s) {
    return s->ws_bytes;
}

int cudnn_sdpa_run(cudnn_sdpa *s, char *why, size_t why_len) {
    DNN(dnn.Execute(s->handle, s->plan, s->pack), "SDPA");
    return 0;
}

void cudnn_sdpa_destroy(cudnn_sdpa *s) {
    if (!s)
        return;
    for (int i = s->ndesc - 1; i >= 0; i--)
        dnn.DestroyDescriptor(s->desc[i]);
    if (s->handle)
        dnn.Destroy(s->handle);
    cudaFree(s->ws);
    free(s);
}

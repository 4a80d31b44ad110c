/* test_cuda_plan.c — the CUDA engine's host-side logic (engines/cuda/
 * cuda_plan.c), which runs on every machine, and the plugin's refusal where
 * no GPU is.
 *
 * The plugin tests load $(BUILD)/gpu-engines/cuda.so, which `make cuda` builds
 * (and the unit tests build wherever nvcc is, mk/cuda.mk), and run from the
 * repository root (the model directories are relative to it). Where the
 * plugin was not built they are reported skipped, never passed. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engines/cuda/cuda_plan.h"
#include "engines/engine.h"

#ifndef ATTN_BUILD_DIR
#define ATTN_BUILD_DIR "build"
#endif
#define CUDA_PLUGIN ATTN_BUILD_DIR "/gpu-engines/cuda.so"

/* all-MiniLM-L6-v2's shape. */
static bert_config minilm(void) {
    return (bert_config){.vocab_size = 30522,
                         .hidden_size = 384,
                         .num_layers = 6,
                         .num_heads = 12,
                         .intermediate_size = 1536,
                         .max_positions = 512,
                         .type_vocab_size = 2,
                         .position_offset = 0,
                         .position_pad_id = -1,
                         .layer_norm_eps = 1e-12f,
                         .max_seq_length = 256};
}

typedef struct region {
    size_t off, bytes;
} region;

/* Every region aligned, inside [0, total), and no two overlapping. */
static void check_regions(const region *r, size_t n, size_t total) {
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(r[i].off % CUDA_PLAN_ALIGN, 0, "region %zu at %zu is not aligned", i,
                     r[i].off);
        cr_assert_leq(r[i].off + r[i].bytes, total, "region %zu ends past the allocation", i);
        for (size_t j = 0; j < i; j++)
            cr_assert(r[i].off >= r[j].off + r[j].bytes || r[j].off >= r[i].off + r[i].bytes,
                      "regions %zu and %zu overlap", i, j);
    }
}

static void check_weights(cuda_dtype t) {
    const bert_config c = minilm();
    cuda_weight_layout w;
    char err[256];
    cr_assert_eq(cuda_weight_layout_make(&c, t, &w, err, sizeof err), 0, "%s", err);
    const size_t e = cuda_dtype_size(t), f = 4, C = 384, F = 1536;
    region r[5 + 12 * 6];
    size_t n = 0, payload = 0;
#define ADD(o, b) (r[n++] = (region){(o), (b)}, payload += (b))
    ADD(w.wte, 30522 * C * e);
    ADD(w.wpe, 512 * C * e);
    ADD(w.wtt, 2 * C * e); /* type_vocab_size 2 */
    ADD(w.emb_ln_w, C * f);
    ADD(w.emb_ln_b, C * f);
    for (int l = 0; l < 6; l++) {
        const cuda_layer_offsets *o = &w.layers[l];
        ADD(o->qkv_w, 3 * C * C * e);
        ADD(o->qkv_b, 3 * C * e);
        ADD(o->attn_o_w, C * C * e);
        ADD(o->attn_o_b, C * e);
        ADD(o->ln1_w, C * f);
        ADD(o->ln1_b, C * f);
        ADD(o->ffn_in_w, F * C * e);
        ADD(o->ffn_in_b, F * e);
        ADD(o->ffn_out_w, C * F * e);
        ADD(o->ffn_out_b, C * e);
        ADD(o->ln2_w, C * f);
        ADD(o->ln2_b, C * f);
    }
#undef ADD
    check_regions(r, n, w.bytes);
    /* Alignment costs at most one boundary per region. */
    cr_assert_geq(w.bytes, payload);
    cr_assert_leq(w.bytes, payload + n * CUDA_PLAN_ALIGN);
    cuda_weight_layout_free(&w);
}

Test(cuda_plan, weight_layout_fp32_and_bf16) {
    check_weights(CUDA_DT_F32);
    check_weights(CUDA_DT_BF16);
    const bert_config c = minilm();
    cuda_weight_layout a, b;
    char err[256];
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_F32, &a, err, sizeof err), 0);
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_BF16, &b, err, sizeof err), 0);
    /* bf16 halves everything but the LayerNorm vectors (fp32, 4·C floats per
     * layer and 2·C for the embeddings) and the alignment. */
    const size_t ln = (6 * 4 + 2) * 384 * 4;
    cr_assert_leq(b.bytes, (a.bytes - ln) / 2 + ln + 100 * CUDA_PLAN_ALIGN);
    cr_assert_geq(b.bytes, (a.bytes - ln - 100 * CUDA_PLAN_ALIGN) / 2 + ln);
    cuda_weight_layout_free(&a);
    cuda_weight_layout_free(&b);
}

Test(cuda_plan, weight_layout_refuses_nonsense_shapes) {
    bert_config c = minilm();
    c.num_layers = 0;
    cuda_weight_layout w;
    char err[256] = "";
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_BF16, &w, err, sizeof err), -1);
    cr_assert(err[0]);
    c = minilm();
    c.vocab_size = 1 << 30;
    c.hidden_size = 1 << 30;
    /* 2^60 elements of 4 bytes overflow size_t. */
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_F32, &w, err, sizeof err), -1);
    cr_assert(strstr(err, "overflow"), "%s", err);
}

/* What follows pooling is laid out fp32 after the layers, whatever the
 * precision, as model/bert.c keeps it: a classifier's two linear layers, or
 * each Dense module (its bias only where it has one); absent tensors are
 * SIZE_MAX. */
Test(cuda_plan, weight_layout_heads_and_dense_modules) {
    bert_config c = minilm();
    cuda_weight_layout base, w;
    char err[256];
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_BF16, &base, err, sizeof err), 0, "%s", err);
    cr_assert_eq(base.head.w1, SIZE_MAX);
    cr_assert_eq(base.head.b2, SIZE_MAX);
    for (int i = 0; i < BERT_MAX_DENSE; i++)
        cr_assert(base.head.dense_w[i] == SIZE_MAX && base.head.dense_b[i] == SIZE_MAX);
    const size_t C = 384, f = 4;

    c.head = BERT_HEAD_ROBERTA;
    c.num_labels = 3;
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_BF16, &w, err, sizeof err), 0, "%s", err);
    const region rh[] = {{0, base.bytes},
                         {w.head.w1, C * C * f},
                         {w.head.b1, C * f},
                         {w.head.w2, 3 * C * f},
                         {w.head.b2, 3 * f}};
    check_regions(rh, sizeof rh / sizeof rh[0], w.bytes);
    cr_assert_eq(w.head.dense_w[0], SIZE_MAX, "a classifier's Dense modules are not run");
    cuda_weight_layout_free(&w);
    c.num_labels = 0;
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_BF16, &w, err, sizeof err), -1);

    c = minilm();
    c.ndense = 2;
    c.dense[0] = (bert_dense){.in_features = 384, .out_features = 256, .bias = 1};
    c.dense[1] = (bert_dense){.in_features = 256, .out_features = 128, .bias = 0};
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_F32, &w, err, sizeof err), 0, "%s", err);
    const region rd[] = {{0, w.layers[5].ln2_b + C * f},
                         {w.head.dense_w[0], 256 * C * f},
                         {w.head.dense_b[0], 256 * f},
                         {w.head.dense_w[1], 128 * 256 * f}};
    check_regions(rd, sizeof rd / sizeof rd[0], w.bytes);
    cr_assert_eq(w.head.dense_b[1], SIZE_MAX);
    cr_assert_eq(w.head.w1, SIZE_MAX);
    cuda_weight_layout_free(&w);
    cuda_weight_layout_free(&base);
    c.ndense = BERT_MAX_DENSE + 1;
    cr_assert_eq(cuda_weight_layout_make(&c, CUDA_DT_F32, &w, err, sizeof err), -1);
}

/* The vectors after pooling: two buffers as wide as the widest of the
 * hidden size, the labels and the Dense modules' outputs; the host gets
 * output_dim floats per sequence back. */
Test(cuda_plan, workspace_vectors_fit_heads_and_dense_modules) {
    bert_config c = minilm();
    cuda_workspace_plan p;
    char err[256];
    const int32_t B = 64;
    c.ndense = 2;
    c.dense[0] = (bert_dense){.in_features = 384, .out_features = 1024, .bias = 1};
    c.dense[1] = (bert_dense){.in_features = 1024, .out_features = 128, .bias = 1};
    c.output_dim = 128;
    cr_assert_eq(cuda_workspace_plan_make(&c, CUDA_DT_BF16, 4096, B, &p, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(p.vec_dim, 1024);
    const region r[] = {{p.ffn, 4096 * 1536 * 2},
                        {p.pooled, B * 1024 * 4},
                        {p.pooled2, B * 1024 * 4},
                        {p.lt_ws, p.lt_ws_bytes}};
    check_regions(r, sizeof r / sizeof r[0], p.device_bytes);
    const region h[] = {{p.host_in_bytes, B * 128 * 4}, {p.host_hidden, (size_t)4096 * 384 * 4}};
    check_regions(h, 2, p.host_bytes);
    cr_assert_lt(p.host_hidden, p.host_in_bytes + B * 128 * 4 + CUDA_PLAN_ALIGN);

    c = minilm();
    c.head = BERT_HEAD_POOLER;
    c.num_labels = c.output_dim = 1000;
    cr_assert_eq(cuda_workspace_plan_make(&c, CUDA_DT_F32, 4096, B, &p, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(p.vec_dim, 1000);
    cr_assert_geq(p.host_hidden, p.host_in_bytes + B * 1000 * 4);
    cr_assert_lt(p.host_hidden, p.host_in_bytes + B * 1000 * 4 + CUDA_PLAN_ALIGN);
    c.num_labels = c.output_dim = 2;
    cr_assert_eq(cuda_workspace_plan_make(&c, CUDA_DT_F32, 4096, B, &p, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(p.vec_dim, 384);
    cr_assert_geq(p.host_hidden, p.host_in_bytes + B * 2 * 4);
    cr_assert_lt(p.host_hidden, p.host_in_bytes + B * 2 * 4 + CUDA_PLAN_ALIGN);
}

/* Every Pooling mode maps to its kernel mode; a classifier reads its first
 * token whatever the Pooling module says. */
Test(cuda_plan, pool_modes) {
    bert_config c = minilm();
    const struct {
        bert_pooling p;
        int mode;
    } m[] = {{BERT_POOL_MEAN, CUDA_POOL_MEAN},
             {BERT_POOL_CLS, CUDA_POOL_CLS},
             {BERT_POOL_MAX, CUDA_POOL_MAX},
             {BERT_POOL_MEAN_SQRT_LEN, CUDA_POOL_MEAN_SQRT},
             {BERT_POOL_LASTTOKEN, CUDA_POOL_LAST}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        c.pooling = m[i].p;
        c.head = BERT_HEAD_NONE;
        cr_assert_eq(cuda_pool_mode(&c), m[i].mode, "pooling %d", (int)m[i].p);
        c.head = BERT_HEAD_POOLER;
        cr_assert_eq(cuda_pool_mode(&c), CUDA_POOL_CLS, "classifier, pooling %d", (int)m[i].p);
    }
}

Test(cuda_plan, workspace_regions) {
    const bert_config c = minilm();
    cuda_workspace_plan p;
    char err[256];
    const int32_t T = 8192, B = 128;
    cr_assert_eq(cuda_workspace_plan_make(&c, CUDA_DT_BF16, T, B, &p, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(p.max_tiles, T / CUDA_ATTN_BLOCK_M + B);
    const size_t e = 2, C = 384, F = 1536;
    const region r[] = {
        {p.ids, T * 4},
        {p.pos, T * 4},
        {p.cu_seqlens, (B + 1) * 4},
        {p.tiles, 2 * (size_t)p.max_tiles * 4},
        {p.sdpa_seq, B * 4},
        {p.sdpa_off_qkv, (B + 1) * 8},
        {p.sdpa_off_o, (B + 1) * 8},
        {p.x, T * C * e},
        {p.qkv, T * 3 * C * e},
        {p.att, T * C * e},
        {p.tmp, T * C * e},
        {p.ffn, T * F * e},
        {p.pooled, B * C * 4},
        {p.pooled2, B * C * 4},
        {p.lt_ws, p.lt_ws_bytes},
    };
    check_regions(r, sizeof r / sizeof r[0], p.device_bytes);
    /* The staged inputs are the workspace's prefix, so one copy moves them. */
    cr_assert_eq(p.ids, 0);
    cr_assert_geq(p.host_in_bytes, p.tiles + 2 * (size_t)p.max_tiles * 4);
    cr_assert_geq(p.host_in_bytes, p.sdpa_off_o + (B + 1) * 8);
    cr_assert_leq(p.host_in_bytes, p.x);
    /* The output vectors, then the hidden states (fp32), each aligned. */
    const region h[] = {
        {0, p.host_in_bytes}, {p.host_in_bytes, B * C * 4}, {p.host_hidden, T * C * 4}};
    check_regions(h, sizeof h / sizeof h[0], p.host_bytes);
    cr_assert_leq(p.host_bytes, p.host_hidden + T * C * 4 + CUDA_PLAN_ALIGN);
    /* max_seqs 0 (or above max_tokens): as many sequences as tokens. */
    cr_assert_eq(cuda_workspace_plan_make(&c, CUDA_DT_F32, 100, 0, &p, err, sizeof err), 0);
    cr_assert_eq(p.max_seqs, 100);
    cr_assert_eq(cuda_workspace_plan_make(&c, CUDA_DT_F32, 0, 1, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "max_tokens"), "%s", err);
}

/* The precisions the engine runs and the type each stores in: fp16 the
 * same path as bf16 in half, tf32 fp32 storage with TF32 GEMMs. */
Test(cuda_plan, precisions) {
    const struct {
        gemm_precision p;
        cuda_dtype t;
        int tf32;
    } ok[] = {{GEMM_FP32, CUDA_DT_F32, 0},
              {GEMM_TF32, CUDA_DT_F32, 1},
              {GEMM_BF16, CUDA_DT_BF16, 0},
              {GEMM_FP16, CUDA_DT_F16, 0}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cr_assert_null(cuda_precision_unsupported(ok[i].p), "%s", gemm_precision_name(ok[i].p));
        cr_assert_eq(cuda_precision_dtype(ok[i].p), ok[i].t, "%s", gemm_precision_name(ok[i].p));
        cr_assert_eq(cuda_precision_tf32(ok[i].p), ok[i].tf32, "%s", gemm_precision_name(ok[i].p));
    }
    const char *why = cuda_precision_unsupported(GEMM_INT8);
    cr_assert(why && strstr(why, "int8 is a CPU precision"), "%s", why ? why : "(null)");
}

Test(cuda_plan, gpu_attention_names) {
    cr_assert_eq(cuda_attn_choice_parse(NULL), CUDA_ATTN_AUTO);
    cr_assert_eq(cuda_attn_choice_parse(""), CUDA_ATTN_AUTO);
    cr_assert_eq(cuda_attn_choice_parse("auto"), CUDA_ATTN_AUTO);
    cr_assert_eq(cuda_attn_choice_parse("flash"), CUDA_ATTN_FLASH);
    cr_assert_eq(cuda_attn_choice_parse("cudnn"), CUDA_ATTN_CUDNN);
    cr_assert_eq(cuda_attn_choice_parse("flash2"), CUDA_ATTN_FLASH2);
    cr_assert_eq(cuda_attn_choice_parse("flash3"), -1);
    cr_assert_eq(cuda_attn_choice_parse("CUDNN"), -1);
    cr_assert_eq(cuda_attn_choice_parse("fused"), -1);
}

/* The floor is the first cuDNN whose fused SDPA takes sequence lengths;
 * an older one is refused naming both versions. */
Test(cuda_plan, cudnn_version_floor) {
    char why[256] = "";
    cr_assert_eq(cuda_cudnn_version_check(91500, why, sizeof why), 0);
    cr_assert_eq(cuda_cudnn_version_check(91900, why, sizeof why), 0);
    cr_assert_eq(cuda_cudnn_version_check(100000, why, sizeof why), 0);
    cr_assert_eq(cuda_cudnn_version_check(91400, why, sizeof why), -1);
    cr_assert(strstr(why, "9.14.0") && strstr(why, "9.15.0"), "%s", why);
    cr_assert_eq(cuda_cudnn_version_check(0, why, sizeof why), -1);
}

/* A library or symbol that is missing is refused with the loader's reason
 * and nothing is left open; present ones resolve. */
Test(cuda_plan, dl_open_names_what_is_missing) {
    char why[256] = "";
    void *fns[2] = {NULL, NULL};
    static const char *const present[] = {"cos", "sin"};
    static const char *const absent[] = {"cos", "attnserve_no_such_symbol"};
    cr_assert_null(cuda_dl_open("libattnserve-absent.so.9", present, 2, fns, why, sizeof why));
    cr_assert(strstr(why, "cannot load libattnserve-absent.so.9"), "%s", why);
    cr_assert_null(cuda_dl_open("libm.so.6", absent, 2, fns, why, sizeof why));
    cr_assert(strstr(why, "lacks attnserve_no_such_symbol"), "%s", why);
    void *h = cuda_dl_open("libm.so.6", present, 2, fns, why, sizeof why);
    cr_assert_not_null(h, "%s", why);
    cr_assert(fns[0] && fns[1]);
    double (*c)(double) = (double (*)(double))(uintptr_t)fns[0];
    cr_assert_float_eq(c(0.0), 1.0, 0.0);
}

/* Lengths and ragged offsets in elements of the interleaved QKV rows (3C)
 * and the output rows (C); sequences past the batch are empty. */
Test(cuda_plan, sdpa_arrays) {
    const int32_t cu[] = {0, 5, 12, 13};
    int32_t seq[5];
    int64_t oq[6], oo[6];
    cuda_sdpa_arrays(cu, 3, 5, 3 * 384, 384, seq, oq, oo);
    const int32_t want_seq[] = {5, 7, 1, 0, 0};
    const int64_t want_start[] = {0, 5, 12, 13, 13, 13};
    for (int b = 0; b < 5; b++)
        cr_assert_eq(seq[b], want_seq[b], "sequence %d", b);
    for (int b = 0; b < 6; b++) {
        cr_assert_eq(oq[b], want_start[b] * 3 * 384, "edge %d", b);
        cr_assert_eq(oo[b], want_start[b] * 384, "edge %d", b);
    }
}

/* The start-up batch fits every bound, has ragged lengths and is never
 * empty. */
Test(cuda_plan, attention_probe_fits_the_bounds) {
    int32_t lens[CUDA_PROBE_SEQS];
    const int32_t bounds[][3] = {{16384, 64, 512}, {256, 8, 512},   {100, 64, 40},
                                 {1, 1, 512},      {8192, 1, 8192}, {64, 64, 1}};
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        const int32_t T = bounds[i][0], B = bounds[i][1], L = bounds[i][2];
        const int32_t n = cuda_attn_probe(T, B, L, lens);
        cr_assert(n >= 1 && n <= B && n <= CUDA_PROBE_SEQS, "case %zu: %d sequences", i, n);
        int32_t total = 0, lo = INT32_MAX, hi = 0;
        for (int32_t b = 0; b < n; b++) {
            cr_assert(lens[b] >= 1 && lens[b] <= L && lens[b] <= 128, "case %zu", i);
            total += lens[b];
            lo = lens[b] < lo ? lens[b] : lo;
            hi = lens[b] > hi ? lens[b] : hi;
        }
        cr_assert_leq(total, T, "case %zu", i);
        if (n > 2 && hi > 2)
            cr_assert_lt(lo, hi, "case %zu: lengths should differ", i);
    }
}

Test(cuda_plan, attention_check_bound) {
    cr_assert_float_eq(cuda_attn_check_bound(CUDA_DT_BF16), 4.0 / 256 + 2e-5, 1e-15);
    cr_assert_float_eq(cuda_attn_check_bound(CUDA_DT_F16), 4.0 / 2048 + 2e-5, 1e-15);
}

/* Every batch within the bounds tiles into at most max_tiles tiles, and the
 * tiles cover each query row of each sequence exactly once. */
Test(cuda_plan, attention_tiles_cover_every_query_once) {
    enum { TMAX = 700, BMAX = 40 };
    const int32_t max_tiles = cuda_attn_max_tiles(TMAX, BMAX);
    int32_t cu[BMAX + 1], tiles[2 * (TMAX / CUDA_ATTN_BLOCK_M + BMAX)];
    unsigned seed = 12345;
    for (int round = 0; round < 2000; round++) {
        seed = seed * 1103515245u + 12345u;
        const int32_t B = 1 + (int32_t)((seed >> 8) % BMAX);
        /* Lengths that sum to at most TMAX, often just past a tile. */
        cu[0] = 0;
        int32_t budget = TMAX;
        for (int32_t b = 0; b < B; b++) {
            seed = seed * 1103515245u + 12345u;
            int32_t len = 1 + (int32_t)((seed >> 8) % 200);
            if (round % 3 == 0)
                len = CUDA_ATTN_BLOCK_M + 1;
            const int32_t left = budget - (B - 1 - b);
            len = len > left ? left : len;
            cu[b + 1] = cu[b] + len;
            budget -= len;
        }
        const int32_t n = cuda_attn_tiles(cu, B, CUDA_ATTN_BLOCK_M, tiles, max_tiles);
        cr_assert_geq(n, 1, "round %d: the bound %d was exceeded", round, max_tiles);
        static unsigned char seen[TMAX];
        memset(seen, 0, sizeof seen);
        for (int32_t i = 0; i < n; i++) {
            const int32_t b = tiles[2 * i], q0 = tiles[2 * i + 1];
            cr_assert(b >= 0 && b < B);
            const int32_t len = cu[b + 1] - cu[b];
            cr_assert(q0 >= 0 && q0 < len && q0 % CUDA_ATTN_BLOCK_M == 0);
            for (int32_t q = q0; q < q0 + CUDA_ATTN_BLOCK_M && q < len; q++)
                seen[cu[b] + q]++;
        }
        for (int32_t t = 0; t < cu[B]; t++)
            cr_assert_eq(seen[t], 1, "round %d: token %d covered %d times", round, t, seen[t]);
    }
    /* A list too small is refused, never overrun. */
    const int32_t two[] = {0, 200};
    cr_assert_eq(cuda_attn_tiles(two, 1, CUDA_ATTN_BLOCK_M, tiles, 2), -1);
}

Test(cuda_plan, batch_checks) {
    char err[256];
    const int32_t ok[] = {0, 3, 5};
    cr_assert_eq(cuda_check_batch(ok, 2, 512, 8, 4, err, sizeof err), 0, "%s", err);
    const int32_t empty_seq[] = {0, 3, 3};
    cr_assert_eq(cuda_check_batch(empty_seq, 2, 512, 8, 4, err, sizeof err), -1);
    cr_assert(strstr(err, "sequence 1 has 0 tokens"), "%s", err);
    const int32_t too_long[] = {0, 600};
    cr_assert_eq(cuda_check_batch(too_long, 1, 512, 1024, 4, err, sizeof err), -1);
    cr_assert_eq(cuda_check_batch(ok, 2, 512, 4, 4, err, sizeof err), -1);
    cr_assert(strstr(err, "workspace holds 4"), "%s", err);
    cr_assert_eq(cuda_check_batch(ok, 2, 512, 8, 1, err, sizeof err), -1);
    const int32_t bad_start[] = {1, 3};
    cr_assert_eq(cuda_check_batch(bad_start, 1, 512, 8, 4, err, sizeof err), -1);
}

Test(cuda_plan, token_types_staged_or_zero) {
    int32_t dst[4] = {7, 7, 7, 7};
    char err[256];
    cr_assert_eq(cuda_stage_types(NULL, 4, 2, dst, err, sizeof err), 0);
    const int32_t zero[4] = {0};
    cr_assert_arr_eq(dst, zero, sizeof zero);
    const int32_t pair[4] = {0, 0, 1, 1};
    cr_assert_eq(cuda_stage_types(pair, 4, 2, dst, err, sizeof err), 0);
    cr_assert_arr_eq(dst, pair, sizeof pair);
    const int32_t bad[4] = {0, 1, 2, 0};
    cr_assert_eq(cuda_stage_types(bad, 4, 2, dst, err, sizeof err), -1);
    cr_assert(strstr(err, "token 2 has type 2"), "%s", err);
}

Test(cuda_plan, positions_bert_and_roberta) {
    bert_config c = minilm();
    const int32_t ids[] = {101, 7, 102, 101, 8, 9, 102}, cu[] = {0, 3, 7};
    int32_t pos[7];
    cuda_positions(&c, ids, cu, 2, pos);
    const int32_t bert[] = {0, 1, 2, 0, 1, 2, 3};
    cr_assert_arr_eq(pos, bert, sizeof bert);
    /* RoBERTa: from padding_idx + 1; the padding id itself sits at
     * padding_idx. */
    c.position_offset = 2;
    c.position_pad_id = 1;
    const int32_t rids[] = {0, 5, 1, 2}, rcu[] = {0, 4};
    cuda_positions(&c, rids, rcu, 1, pos);
    const int32_t roberta[] = {2, 3, 1, 4};
    cr_assert_arr_eq(pos, roberta, sizeof roberta);
}

Test(cuda_plan, score_names_the_cause) {
    char why[256];
    cr_assert_eq(cuda_score_from(35, "CUDA driver version is insufficient for CUDA runtime version",
                                 0, 0, 0, NULL, why, sizeof why),
                 0);
    cr_assert(strstr(why, "no CUDA device: CUDA driver version is insufficient"), "%s", why);
    cr_assert_eq(cuda_score_from(0, NULL, 0, 0, 0, NULL, why, sizeof why), 0);
    cr_assert(strstr(why, "no CUDA device"), "%s", why);
    cr_assert_eq(cuda_score_from(0, NULL, 1, 7, 5, "Tesla T4", why, sizeof why), 0);
    cr_assert(strstr(why, "Tesla T4 has compute capability 7.5"), "%s", why);
    cr_assert_eq(cuda_score_from(0, NULL, 1, 9, 0, "NVIDIA H200", why, sizeof why), 100);
    cr_assert_str_eq(why, "");
}

/* What the kernels compute: every Pooling mode model/bert.c has, Dense
 * modules, Normalize and both classifier heads; refused are a position bias
 * in attention and any other pooling name, naming what is refused. */
Test(cuda_plan, models_refused_by_what_the_kernels_cannot_compute) {
    const encoder_info ok = {.architecture = "BertModel",
                             .task = ENCODER_TASK_EMBED,
                             .output_dim = 384,
                             .hidden_size = 384,
                             .pooling = "mean",
                             .normalize = true};
    char why[512] = "x";
    cr_assert_eq(cuda_refuse_model(&ok, why, sizeof why), 0, "%s", why);
    static const char *const kept[] = {"cls", "max", "mean_sqrt_len_tokens", "lasttoken"};
    for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++) {
        encoder_info i = ok;
        i.pooling = kept[k];
        cr_assert_eq(cuda_refuse_model(&i, why, sizeof why), 0, "%s: %s", kept[k], why);
    }

    encoder_info i = ok;
    i.architecture = "BertForSequenceClassification";
    i.task = ENCODER_TASK_CLASSIFY;
    i.num_labels = 3;
    i.output_dim = 3;
    i.pooling = "cls";
    cr_assert_eq(cuda_refuse_model(&i, why, sizeof why), 0, "%s", why);

    i = ok;
    i.dense_modules = 2;
    i.output_dim = 256;
    cr_assert_eq(cuda_refuse_model(&i, why, sizeof why), 0, "%s", why);

    static const char *const other[] = {"weightedmean", "mean_max", ""};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        i = ok;
        i.pooling = other[k];
        cr_assert_eq(cuda_refuse_model(&i, why, sizeof why), -1, "%s", other[k]);
        cr_assert(strstr(why, other[k]) && strstr(why, "pooling"), "%s", why);
    }
    i = ok;
    i.pooling = NULL;
    cr_assert_eq(cuda_refuse_model(&i, why, sizeof why), -1);
    /* MPNet: its relative position bias is not in the engine's attention. */
    i = ok;
    i.model_type = "mpnet";
    i.position_bias = "relative buckets";
    cr_assert_eq(cuda_refuse_model(&i, why, sizeof why), -1);
    cr_assert(strstr(why, "mpnet") && strstr(why, "relative buckets") && strstr(why, "cpu"), "%s",
              why);
    i.position_bias = "none";
    cr_assert_eq(cuda_refuse_model(&i, why, sizeof why), 0, "%s", why);

    cr_assert(cuda_head_dim_supported(32) && cuda_head_dim_supported(64) &&
              cuda_head_dim_supported(128));
    cr_assert(!cuda_head_dim_supported(48) && !cuda_head_dim_supported(256));
}

/* The model directories the service serves, described by encoder_describe
 * as the engine's init does: MPNet is refused for its position bias, the
 * families beyond BERT's by name; the classifiers, the Dense modules and
 * every pooling are kept. The plugin's
 * init then refuses the tiny ones for their head size (8: the attention
 * kernels take 32, 64 or 128), before any CUDA call. */
typedef struct dir_case {
    const char *dir;
    const char *names; /* in cuda_refuse_model's reason; NULL: kept */
    const char *init;  /* in the plugin's init's refusal; NULL: not refused by the model */
} dir_case;

static const dir_case model_dirs[] = {
    {"models/all-MiniLM-L6-v2", NULL, NULL},
    {"tests/golden/bert-cls-tiny", NULL, "head size 8"},
    {"tests/golden/xlmr-cls-tiny", NULL, "head size 8"},
    {"tests/golden/st-dense-max-tiny", NULL, "head size 8"},
    {"tests/golden/st-meansqrt-tiny", NULL, "head size 8"},
    {"tests/golden/st-lasttoken-tiny", NULL, "head size 8"},
    {"tests/golden/mpnet-tiny-model", "relative buckets", "relative buckets"},
    {"tests/golden/modernbert-tiny-model", "modernbert family", "modernbert family"},
    {"tests/golden/qwen3-tiny-model", "qwen3 family", "qwen3 family"},
    {"tests/golden/gemma3-tiny-model", "gemma3 family", "gemma3 family"},
    {"tests/golden/nomic-bert-tiny-model", "nomic_bert family", "nomic_bert family"},
};

Test(cuda_plan, model_directories_refused_or_kept) {
    for (size_t k = 0; k < sizeof model_dirs / sizeof model_dirs[0]; k++) {
        const dir_case *d = &model_dirs[k];
        char why[512] = "";
        encoder_desc *desc = NULL;
        cr_assert_eq(encoder_describe(d->dir, &desc, why, sizeof why), BERT_OK, "%s: %s", d->dir,
                     why);
        const int rc = cuda_refuse_model(encoder_desc_info(desc), why, sizeof why);
        encoder_desc_free(desc);
        if (!d->names) {
            cr_assert_eq(rc, 0, "%s: %s", d->dir, why);
            continue;
        }
        cr_assert_eq(rc, -1, "%s was not refused", d->dir);
        cr_assert(strstr(why, d->names), "%s: %s", d->dir, why);
    }
}

/* The conversions against the compiler's own: _Float16 rounds to nearest
 * even, and bf16 is checked against its definition (the upper half of the
 * float, rounded to nearest even). */
Test(cuda_plan, conversions_round_to_nearest_even) {
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const float f = cuda_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        cr_assert_eq(cuda_f32_to_f16(f), h, "f16 %#x does not round-trip", h);
        const _Float16 ref = (_Float16)f;
        cr_assert_eq((float)ref, f, "f16 %#x decodes to %a", h, (double)f);
        const float b = cuda_bf16_to_f32((uint16_t)h);
        if (!isnan(b))
            cr_assert_eq(cuda_f32_to_bf16(b), h, "bf16 %#x does not round-trip", h);
    }
    unsigned seed = 7;
    for (int i = 0; i < 1000000; i++) {
        seed = seed * 1664525u + 1013904223u;
        uint32_t u = seed;
        float f;
        memcpy(&f, &u, sizeof f);
        if (isnan(f))
            continue;
        _Float16 ref = (_Float16)f;
        uint16_t rh;
        memcpy(&rh, &ref, sizeof rh);
        cr_assert_eq(cuda_f32_to_f16(f), rh, "f16 of %a: %#x, the compiler's %#x", (double)f,
                     cuda_f32_to_f16(f), rh);
        /* bf16: the nearer of the two neighbours, ties to the even one. */
        const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        if (isinf(cuda_bf16_to_f32(hi)) || isinf(f))
            continue; /* the overflow to infinity is not a neighbour's distance */
        const double dlo = fabs((double)cuda_bf16_to_f32(lo) - f);
        const double dhi = fabs((double)cuda_bf16_to_f32(hi) - f);
        const uint16_t got = cuda_f32_to_bf16(f);
        if (dlo < dhi)
            cr_assert_eq(got, lo, "bf16 of %a", (double)f);
        else if (dhi < dlo)
            cr_assert_eq(got, hi, "bf16 of %a", (double)f);
        else
            cr_assert_eq(got, (lo & 1) ? hi : lo, "bf16 tie of %a", (double)f);
    }
    cr_assert(isnan(cuda_bf16_to_f32(cuda_f32_to_bf16(NAN))));
    cr_assert(isnan(cuda_f16_to_f32(cuda_f32_to_f16(NAN))));
    cr_assert(isinf(cuda_f16_to_f32(cuda_f32_to_f16(70000.0f))));
}

/* The built plugin loads; with no usable GPU it is listed, refused, and the
 * reason names the cause; asking for it by name fails with that reason. */
Test(cuda_plugin, refused_without_a_device) {
    struct stat st;
    if (stat(CUDA_PLUGIN, &st) != 0)
        cr_skip_test("%s was not built (no nvcc here; `make cuda` builds it): the refusal path "
                     "was NOT checked",
                     CUDA_PLUGIN);
    char err[512] = "";
    engine_registry_init(NULL, err, sizeof err);
    const engine_entry *e = engine_registry_load(CUDA_PLUGIN);
    cr_assert_str_eq(e->name, "cuda", "%s", e->reason);
    cr_assert_not_null(e->iface, "the plugin did not load: %s", e->reason);
    if (e->offered) {
        /* A machine with a GPU: offered above every CPU engine. */
        cr_assert_eq(e->score, 100);
        return;
    }
    cr_assert(strstr(e->reason, "no CUDA device") || strstr(e->reason, "compute capability"), "%s",
              e->reason);
    const engine_iface *t = NULL;
    gemm_precision p;
    cr_assert_neq(engine_select("cuda", "bf16", &t, &p, err, sizeof err), ENGINE_OK);
    cr_assert(strstr(err, "no CUDA device") || strstr(err, "compute capability"), "%s", err);
    /* auto stays on a CPU engine. */
    cr_assert_eq(engine_select("auto", "fp32", &t, &p, err, sizeof err), ENGINE_OK, "%s", err);
    cr_assert_str_neq(t->name, "cuda");
    cr_log_info("cuda plugin refused as expected: %s", e->reason);
}

/* init refuses the models the kernels cannot compute (their description,
 * their head size) before any CUDA call, so the plugin's own refusal is
 * checked here without a device: with ENGINE_EUNSUPPORTED and the reason,
 * whatever the machine. */
Test(cuda_plugin, init_refuses_models_it_cannot_compute) {
    struct stat st;
    if (stat(CUDA_PLUGIN, &st) != 0)
        cr_skip_test("%s was not built (no nvcc here; `make cuda` builds it): the plugin's "
                     "refusal of models it cannot compute was NOT checked",
                     CUDA_PLUGIN);
    char err[512] = "";
    engine_registry_init(NULL, err, sizeof err);
    const engine_entry *e = engine_registry_load(CUDA_PLUGIN);
    cr_assert_not_null(e->iface, "the plugin did not load: %s", e->reason);
    int refused = 0, to_refuse = 0;
    for (size_t k = 0; k < sizeof model_dirs / sizeof model_dirs[0]; k++) {
        const dir_case *d = &model_dirs[k];
        if (!d->init)
            continue;
        to_refuse++;
        const engine_options o = {
            .model_dir = d->dir, .precision = GEMM_BF16, .max_tokens = 256, .max_seqs = 8};
        void *ctx = NULL;
        err[0] = '\0';
        const int rc = e->iface->init(&o, &ctx, err, sizeof err);
        cr_assert_eq(rc, ENGINE_EUNSUPPORTED, "%s: %s (%s)", d->dir, engine_strerror(rc), err);
        cr_assert_null(ctx);
        cr_assert(strstr(err, d->init), "%s: %s", d->dir, err);
        refused++;
    }
    cr_assert_eq(refused, to_refuse);
    cr_assert_geq(refused, 9);
}

/* An unknown gpu_attention is refused by init before any CUDA call, so
 * here too. */
Test(cuda_plugin, init_refuses_an_unknown_gpu_attention) {
    struct stat st;
    if (stat(CUDA_PLUGIN, &st) != 0)
        cr_skip_test("%s was not built (no nvcc here; `make cuda` builds it): the plugin's "
                     "refusal of an unknown gpu_attention was NOT checked",
                     CUDA_PLUGIN);
    char err[512] = "";
    engine_registry_init(NULL, err, sizeof err);
    const engine_entry *e = engine_registry_load(CUDA_PLUGIN);
    cr_assert_not_null(e->iface, "the plugin did not load: %s", e->reason);
    cr_assert_not_null(e->iface->attn_kernel, "the cuda engine names its attention kernel");
    const engine_options o = {.model_dir = "tests/golden/bert-cls-tiny",
                              .precision = GEMM_BF16,
                              .max_tokens = 256,
                              .max_seqs = 8,
                              .gpu_attention = "cudnn9"};
    void *ctx = NULL;
    const int rc = e->iface->init(&o, &ctx, err, sizeof err);
    cr_assert_eq(rc, ENGINE_EINVAL, "%s (%s)", engine_strerror(rc), err);
    cr_assert_null(ctx);
    cr_assert(strstr(err, "gpu_attention 'cudnn9'") && strstr(err, "cudnn"), "%s", err);
}

/* tests/gpu/task_models.py's copy, made here: dst gets a symlink to each of
 * src's entries but config.json, written with num_attention_heads =
 * hidden_size / 32 (heads the attention kernels take). */
static void heads_of_32(const char *src, const char *dst) {
    DIR *d = opendir(src);
    cr_assert_not_null(d, "%s", src);
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "config.json") == 0)
            continue;
        char from[PATH_MAX], rel[PATH_MAX], to[PATH_MAX];
        snprintf(rel, sizeof rel, "%s/%s", src, e->d_name);
        cr_assert_not_null(realpath(rel, from), "%s", rel);
        snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
        cr_assert_eq(symlink(from, to), 0, "%s", to);
    }
    closedir(d);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", src);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    cr_assert_not_null(cfg, "%s: %s", path, jerr.text);
    const json_int_t C = json_integer_value(json_object_get(cfg, "hidden_size"));
    cr_assert(C > 0 && C % 32 == 0, "%s: hidden_size %lld", path, (long long)C);
    json_object_set_new(cfg, "num_attention_heads", json_integer(C / 32));
    snprintf(path, sizeof path, "%s/config.json", dst);
    cr_assert_eq(json_dump_file(cfg, path, 0), 0, "%s", path);
    json_decref(cfg);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* The classifier, Dense and pooling models with heads the kernels take pass
 * every check init makes before touching the device: without one, init
 * stops at the first CUDA call; with one (the GPU run), it loads them, the
 * head's and the Dense modules' weights included, in every precision. */
Test(cuda_plugin, init_takes_the_task_models_up_to_the_device) {
    struct stat st;
    if (stat(CUDA_PLUGIN, &st) != 0)
        cr_skip_test("%s was not built (no nvcc here; `make cuda` builds it): the plugin's "
                     "init on the task models was NOT checked",
                     CUDA_PLUGIN);
    char err[512] = "";
    engine_registry_init(NULL, err, sizeof err);
    const engine_entry *e = engine_registry_load(CUDA_PLUGIN);
    cr_assert_not_null(e->iface, "the plugin did not load: %s", e->reason);
    static const char *const models[] = {"bert-cls-tiny", "xlmr-cls-tiny", "st-dense-max-tiny",
                                         "st-meansqrt-tiny", "st-lasttoken-tiny"};
    static const gemm_precision ps[] = {GEMM_FP32, GEMM_TF32, GEMM_BF16, GEMM_FP16};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char src[256], dst[] = "/tmp/attnserve-cuda-task-XXXXXX";
        snprintf(src, sizeof src, "tests/golden/%s", models[k]);
        cr_assert_not_null(mkdtemp(dst));
        heads_of_32(src, dst);
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
            const engine_options o = {
                .model_dir = dst, .precision = ps[i], .max_tokens = 256, .max_seqs = 8};
            void *ctx = NULL;
            err[0] = '\0';
            const int rc = e->iface->init(&o, &ctx, err, sizeof err);
            if (e->offered) {
                cr_assert_eq(rc, ENGINE_OK, "%s %s: %s (%s)", models[k], gemm_precision_name(ps[i]),
                             engine_strerror(rc), err);
                e->iface->free(ctx);
                continue;
            }
            cr_assert_neq(rc, ENGINE_OK);
            cr_assert_null(ctx);
            cr_assert(strstr(err, "selecting device 0"), "%s %s: %s", models[k],
                      gemm_precision_name(ps[i]), err);
        }
        remove_dir(dst);
    }
}

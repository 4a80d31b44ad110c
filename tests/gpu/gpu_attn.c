/* gpu_attn.c — the CUDA engine's attention kernels on a GPU (our flash and
 * flash2 kernels, the fp32 kernel, and cuDNN's fused SDPA through
 * cuda_cudnn.c):
 * correctness against a double-precision reference, then a benchmark. Built
 * and run by tests/gpu/run.sh (linked with the plugin's kernels.o,
 * cuda_cudnn.c and libcudart); it needs a device and says so, exit 3, where
 * there is none. Where cuDNN cannot be loaded (or is older than the floor)
 * every cudnn line says NOT RUN with the reason, ours are still checked, and
 * the exit is 3 unless something failed (1).
 *
 * Correctness, per dtype (fp16 u = 2^-11, bf16 u = 2^-8) and head size:
 * Q, K, V are rounded to the dtype on the host, so the reference (double,
 * exact softmax) sees the kernels' inputs. The flash kernel computes S in
 * fp32 from exact products (tensor cores accumulate in fp32), rounds each
 * probability p to the dtype before P·V (relative error u) and divides by
 * the sum of the rounded p, so o = Σ p̃ v / Σ p̃ is a convex combination
 * whose weights are each off by at most 2u relatively: |Δo| <= 2u·max|v|;
 * the output's rounding adds u·|o| <= u·max|v|. Bound: 3u·max|v| plus
 * 1e-5·max|v| for fp32 accumulation and exp2f. flash2 rounds p the same
 * way but divides by the sum of the unrounded p: o = Σ p̃ v / Σ p differs
 * from the exact Σ p v / Σ p by Σ (p̃ − p) v / Σ p, at most u·max|v|; with
 * the output's rounding 2u·max|v|, so flash's bound (3u + 1e-5) holds for
 * it too and is the one applied. The fp32 kernel rounds only
 * its output: u·max|v| + 1e-5·max|v|. cuDNN's SDPA is held to flash's
 * bound: it too accumulates in fp32 and rounds P to the dtype before P·V.
 * Its plans are built for more sequences than each case has (the engine's
 * graph is built for the most a batch may hold), so the empty sequences
 * past the batch are exercised too.
 *
 * Benchmark: 8×512, 1×4096 (16 heads, head size 64 and 128) and MiniLM's
 * 128×64 (12 heads of 32), fp16 and bf16: median of 20 timed runs (CUDA
 * events) after 3 warm-ups, in TFLOP/s of 4·L²·D·H per sequence, for flash,
 * flash2 and cudnn, and the ratios flash/cudnn and flash2/cudnn of their
 * TFLOP/s. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engines/cuda/cuda_cudnn.h"
#include "engines/cuda/cuda_kernels.h"
#include "engines/cuda/cuda_plan.h"

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static unsigned seed = 1;
static float rnd(void) {
    seed = seed * 1664525u + 1013904223u;
    return ((float)(seed >> 8) / 16777216.0f) * 4.0f - 2.0f;
}

#define MAX_SEQS 128
/* The cudnn plans' batch: a few more sequences than any case has. */
#define CUDNN_SEQS (MAX_SEQS + 3)

typedef struct problem {
    int B, H, D, T, max_len;
    int32_t cu[MAX_SEQS + 1];
    cuda_dtype dt;
    float *qkv; /* host, rounded to dt, (T, 3C) */
    void *d_qkv, *d_out, *d_cu, *d_tiles;
    int32_t ntiles;
    /* cuDNN's arrays (cuda_sdpa_arrays) for CUDNN_SEQS sequences. */
    void *d_seq, *d_off_qkv, *d_off_o;
} problem;

/* Why cuDNN cannot run here ("" when it can). */
static char cudnn_absent[256];

static void setup(problem *p, const int *lens, int B, int H, int D, cuda_dtype dt) {
    memset(p, 0, sizeof *p);
    p->B = B, p->H = H, p->D = D, p->dt = dt;
    for (int b = 0; b < B; b++) {
        p->cu[b + 1] = p->cu[b] + lens[b];
        p->max_len = lens[b] > p->max_len ? lens[b] : p->max_len;
    }
    p->T = p->cu[B];
    const size_t C = (size_t)H * D, n = (size_t)p->T * 3 * C, es = cuda_dtype_size(dt);
    p->qkv = malloc(n * sizeof(float));
    void *h = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        const float v = rnd();
        cuda_store(dt, (char *)h + i * es, &v, 1);
        p->qkv[i] = dt == CUDA_DT_F32    ? v
                    : dt == CUDA_DT_BF16 ? cuda_bf16_to_f32(((uint16_t *)h)[i])
                                         : cuda_f16_to_f32(((uint16_t *)h)[i]);
    }
    const int32_t max_tiles = cuda_attn_max_tiles(p->T, B);
    int32_t *tiles = malloc(2 * (size_t)max_tiles * sizeof *tiles);
    p->ntiles = cuda_attn_tiles(p->cu, B, CUDA_ATTN_BLOCK_M, tiles, max_tiles);
    CHECK(cudaMalloc(&p->d_qkv, n * es));
    CHECK(cudaMalloc(&p->d_out, (size_t)p->T * C * es));
    CHECK(cudaMalloc(&p->d_cu, (size_t)(B + 1) * 4));
    CHECK(cudaMalloc(&p->d_tiles, 2 * (size_t)max_tiles * 4));
    CHECK(cudaMemcpy(p->d_qkv, h, n * es, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(p->d_cu, p->cu, (size_t)(B + 1) * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(p->d_tiles, tiles, 2 * (size_t)max_tiles * 4, cudaMemcpyHostToDevice));
    int32_t seq[CUDNN_SEQS];
    int64_t off_qkv[CUDNN_SEQS + 1], off_o[CUDNN_SEQS + 1];
    cuda_sdpa_arrays(p->cu, B, CUDNN_SEQS, 3 * (int64_t)C, (int64_t)C, seq, off_qkv, off_o);
    CHECK(cudaMalloc(&p->d_seq, sizeof seq));
    CHECK(cudaMalloc(&p->d_off_qkv, sizeof off_qkv));
    CHECK(cudaMalloc(&p->d_off_o, sizeof off_o));
    CHECK(cudaMemcpy(p->d_seq, seq, sizeof seq, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(p->d_off_qkv, off_qkv, sizeof off_qkv, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(p->d_off_o, off_o, sizeof off_o, cudaMemcpyHostToDevice));
    free(h);
    free(tiles);
}

/* cuDNN's plan for p (its batch CUDNN_SEQS, its longest sequence
 * max_len), or NULL with the reason printed. */
static cudnn_sdpa *cudnn_plan(const problem *p, int max_len) {
    const cudnn_sdpa_desc d = {.dtype = (int)p->dt,
                               .max_seqs = CUDNN_SEQS,
                               .max_len = max_len,
                               .heads = p->H,
                               .head_dim = p->D,
                               .scale = 1.0f / sqrtf((float)p->D),
                               .qkv = p->d_qkv,
                               .out = p->d_out,
                               .seq = p->d_seq,
                               .off_qkv = p->d_off_qkv,
                               .off_o = p->d_off_o,
                               .stream = NULL};
    char why[256];
    cudnn_sdpa *s = NULL;
    if (cudnn_sdpa_create(&d, &s, why, sizeof why) < 0) {
        printf("cudnn %-5s d%-3d: plan refused: %s\n", cuda_dtype_name(p->dt), p->D, why);
        return NULL;
    }
    return s;
}

static int cudnn_run(cudnn_sdpa *s) {
    char why[256];
    if (cudnn_sdpa_run(s, why, sizeof why) < 0) {
        printf("cudnn run failed: %s\n", why);
        return -1;
    }
    return 0;
}

static void teardown(problem *p) {
    free(p->qkv);
    cudaFree(p->d_qkv);
    cudaFree(p->d_out);
    cudaFree(p->d_cu);
    cudaFree(p->d_tiles);
    cudaFree(p->d_seq);
    cudaFree(p->d_off_qkv);
    cudaFree(p->d_off_o);
}

static cuda_attn_args args(const problem *p) {
    return (cuda_attn_args){.qkv = p->d_qkv,
                            .out = p->d_out,
                            .cu_seqlens = p->d_cu,
                            .tiles = p->d_tiles,
                            .ntiles = p->ntiles,
                            .batch = p->B,
                            .heads = p->H,
                            .head_dim = p->D,
                            .scale = 1.0f / sqrtf((float)p->D)};
}

/* Largest |out - exact| over the problem, and max |v|. */
static double max_error(const problem *p, double *vmax) {
    const size_t C = (size_t)p->H * p->D, es = cuda_dtype_size(p->dt);
    void *h = malloc((size_t)p->T * C * es);
    CHECK(cudaMemcpy(h, p->d_out, (size_t)p->T * C * es, cudaMemcpyDeviceToHost));
    double worst = 0.0, *s = malloc((size_t)p->T * sizeof *s);
    *vmax = 0.0;
    for (int b = 0; b < p->B; b++)
        for (int h_ = 0; h_ < p->H; h_++)
            for (int i = p->cu[b]; i < p->cu[b + 1]; i++) {
                const float *q = p->qkv + (size_t)i * 3 * C + (size_t)h_ * p->D;
                double mx = -INFINITY, sum = 0.0;
                for (int j = p->cu[b]; j < p->cu[b + 1]; j++) {
                    const float *k = p->qkv + (size_t)j * 3 * C + C + (size_t)h_ * p->D;
                    double d = 0.0;
                    for (int x = 0; x < p->D; x++)
                        d += (double)q[x] * k[x];
                    s[j] = d / sqrt((double)p->D);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = p->cu[b]; j < p->cu[b + 1]; j++)
                    sum += (s[j] = exp(s[j] - mx));
                for (int x = 0; x < p->D; x++) {
                    double o = 0.0;
                    for (int j = p->cu[b]; j < p->cu[b + 1]; j++) {
                        const double v = p->qkv[(size_t)j * 3 * C + 2 * C + (size_t)h_ * p->D + x];
                        o += s[j] * v;
                        *vmax = fabs(v) > *vmax ? fabs(v) : *vmax;
                    }
                    o /= sum;
                    const size_t at = (size_t)i * C + (size_t)h_ * p->D + (size_t)x;
                    const uint16_t bits = ((uint16_t *)h)[at];
                    const double got = p->dt == CUDA_DT_F32    ? ((float *)h)[at]
                                       : p->dt == CUDA_DT_BF16 ? cuda_bf16_to_f32(bits)
                                                               : cuda_f16_to_f32(bits);
                    const double err = isfinite(got) ? fabs(got - o) : INFINITY;
                    worst = err > worst ? err : worst;
                }
            }
    free(s);
    free(h);
    return worst;
}

enum { K_FLASH, K_REF, K_CUDNN, K_FLASH2, NKERNELS };
static const char *const kernel_names[NKERNELS] = {"flash", "fp32", "cudnn", "flash2"};

/* Enqueues kernel k (ours: flash, fp32 or flash2) on the default stream. */
static int launch_ours(int k, const problem *p, const cuda_attn_args *a) {
    return k == K_REF      ? cuda_attention_ref((int)p->dt, a, p->T, NULL)
           : k == K_FLASH2 ? cuda_flash2_attention((int)p->dt, a, NULL)
                           : cuda_flash_attention((int)p->dt, a, NULL);
}

static int correctness(void) {
    static const int lens_a[] = {1, 65, 130, 64, 7};
    static const int lens_b[] = {200, 63};
    static const int lens_c[] = {1};
    const struct {
        const int *lens;
        int B;
    } cases[] = {{lens_a, 5}, {lens_b, 2}, {lens_c, 1}};
    static const int dims[] = {32, 64, 128};
    static const cuda_dtype types[] = {CUDA_DT_F16, CUDA_DT_BF16};
    int failed = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++)
            for (int ti = 0; ti < 2; ti++)
                for (int kernel = 0; kernel < NKERNELS; kernel++) {
                    if (kernel == K_CUDNN && *cudnn_absent) {
                        printf("NOT RUN: cudnn %-5s d%-3d case %zu: %s\n",
                               cuda_dtype_name(types[ti]), dims[di], ci, cudnn_absent);
                        continue;
                    }
                    problem p;
                    setup(&p, cases[ci].lens, cases[ci].B, 4, dims[di], types[ti]);
                    const cuda_attn_args a = args(&p);
                    /* Whatever a kernel leaves unwritten reads NaN and fails. */
                    CHECK(cudaMemset(p.d_out, 0xff, (size_t)p.T * 4 * dims[di] * 2));
                    int ran = 0;
                    if (kernel == K_CUDNN) {
                        /* Longest sequence 256, above every case's, as the
                         * engine's graph is built for the model's longest. */
                        cudnn_sdpa *s = cudnn_plan(&p, 256);
                        ran = s && cudnn_run(s) == 0;
                        CHECK(cudaDeviceSynchronize());
                        cudnn_sdpa_destroy(s);
                    } else {
                        CHECK((cudaError_t)launch_ours(kernel, &p, &a));
                        CHECK(cudaDeviceSynchronize());
                        ran = 1;
                    }
                    double vmax = 0.0;
                    const double err = ran ? max_error(&p, &vmax) : INFINITY;
                    const double u = types[ti] == CUDA_DT_BF16 ? 1.0 / 256 : 1.0 / 2048;
                    const double bound = ((kernel == K_REF ? 1.0 : 3.0) * u + 1e-5) * vmax;
                    const int ok = err <= bound;
                    failed += !ok;
                    printf("%-6s %-5s d%-3d case %zu (T=%4d): max error %.3e, bound %.3e  %s\n",
                           kernel_names[kernel], cuda_dtype_name(types[ti]), dims[di], ci, p.T, err,
                           bound, ok ? "ok" : "FAILED");
                    teardown(&p);
                }
    return failed;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of 20 runs of kernel (K_FLASH, K_FLASH2, K_CUDNN)
 * after 3 warm-ups; negative when it cannot run. */
static double time_kernel(problem *p, int kernel) {
    cudnn_sdpa *s = NULL;
    if (kernel == K_CUDNN && (*cudnn_absent || !(s = cudnn_plan(p, p->max_len))))
        return -1.0;
    const cuda_attn_args a = args(p);
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    float ms[20];
    int ok = 1;
    for (int r = 0; ok && r < 23; r++) {
        CHECK(cudaEventRecord(e0, NULL));
        if (kernel == K_CUDNN)
            ok = cudnn_run(s) == 0;
        else
            CHECK((cudaError_t)launch_ours(kernel, p, &a));
        CHECK(cudaEventRecord(e1, NULL));
        CHECK(cudaEventSynchronize(e1));
        if (r >= 3)
            CHECK(cudaEventElapsedTime(&ms[r - 3], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudnn_sdpa_destroy(s);
    if (!ok)
        return -1.0;
    qsort(ms, 20, sizeof ms[0], cmp_float);
    return (ms[9] + ms[10]) / 2;
}

static void bench(void) {
    printf("\nattention benchmark (median of 20, CUDA events; TFLOP/s, and ratios to cudnn's)\n");
    printf("%-9s %-5s %-4s %9s %8s %9s %8s %9s %8s %7s %7s\n", "shape", "type", "d", "flash ms",
           "TFLOP/s", "flash2 ms", "TFLOP/s", "cudnn ms", "TFLOP/s", "f/cudnn", "f2/cudnn");
    static const struct {
        int B, L, H, D;
    } shapes[] = {{8, 512, 16, 64},
                  {8, 512, 16, 128},
                  {1, 4096, 16, 64},
                  {1, 4096, 16, 128},
                  {128, 64, 12, 32}};
    static const cuda_dtype types[] = {CUDA_DT_F16, CUDA_DT_BF16};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ti = 0; ti < 2; ti++) {
            int lens[MAX_SEQS];
            const int B = shapes[si].B, L = shapes[si].L, H = shapes[si].H, D = shapes[si].D;
            for (int b = 0; b < B; b++)
                lens[b] = L;
            problem p;
            setup(&p, lens, B, H, D, types[ti]);
            const double flops = 4.0 * L * (double)L * D * H * B;
            const double f = time_kernel(&p, K_FLASH), f2 = time_kernel(&p, K_FLASH2),
                         c = time_kernel(&p, K_CUDNN);
            const double tf = flops / (f * 1e-3) / 1e12, tf2 = flops / (f2 * 1e-3) / 1e12,
                         tc = flops / (c * 1e-3) / 1e12;
            char shape[16];
            snprintf(shape, sizeof shape, "%dx%d", B, L);
            printf("%-9s %-5s d%-3d %9.4f %8.1f %9.4f %8.1f", shape, cuda_dtype_name(types[ti]), D,
                   f, tf, f2, tf2);
            if (c > 0)
                printf(" %9.4f %8.1f %7.2f %7.2f\n", c, tc, tf / tc, tf2 / tc);
            else
                printf(" %9s %8s %7s %7s  (cudnn NOT RUN)\n", "-", "-", "-", "-");
            teardown(&p);
        }
}

int main(void) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("NOT RUN: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none");
        return 3;
    }
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, compute capability %d.%d\n", prop.name, prop.major, prop.minor);
    CHECK((cudaError_t)cuda_flash_prepare());
    const size_t v = cudnn_sdpa_version(cudnn_absent, sizeof cudnn_absent);
    if (v)
        printf("cuDNN %zu.%zu.%zu\n", v / 10000, v / 100 % 100, v % 100);
    else
        printf("NOT RUN: cudnn: %s\n", cudnn_absent);
    const int failed = correctness();
    bench();
    printf("\nattention correctness: %s (%d failed)%s\n", failed ? "FAILED" : "passed", failed,
           *cudnn_absent ? "; cudnn NOT RUN" : "");
    return failed ? 1 : *cudnn_absent ? 3 : 0;
}

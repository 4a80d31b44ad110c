/* gpu_attn.c — the CUDA engine's attention kernels on a GPU: correctness
 * against a double-precision reference, then a benchmark. Built and run by
 * tests/gpu/run.sh (linked with the plugin's kernels.o and libcudart); it
 * needs a device and says so, exit 3, where there is none.
 *
 * Correctness, per dtype (fp16 u = 2^-11, bf16 u = 2^-8) and head size:
 * Q, K, V are rounded to the dtype on the host, so the reference (double,
 * exact softmax) sees the kernels' inputs. The flash kernel computes S in
 * fp32 from exact products (tensor cores accumulate in fp32), rounds each
 * probability p to the dtype before P·V (relative error u) and divides by
 * the sum of the rounded p, so o = Σ p̃ v / Σ p̃ is a convex combination
 * whose weights are each off by at most 2u relatively: |Δo| <= 2u·max|v|;
 * the output's rounding adds u·|o| <= u·max|v|. Bound: 3u·max|v| plus
 * 1e-5·max|v| for fp32 accumulation and exp2f. The fp32 kernel rounds only
 * its output: u·max|v| + 1e-5·max|v|.
 *
 * Benchmark: 8×512 and 1×4096 tokens, 16 heads, head size 64 and 128, fp16
 * and bf16: median of 20 timed runs (CUDA events) after 3 warm-ups, in
 * TFLOP/s of 4·L²·D·H per sequence. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct problem {
    int B, H, D, T;
    int32_t cu[64];
    cuda_dtype dt;
    float *qkv; /* host, rounded to dt, (T, 3C) */
    void *d_qkv, *d_out, *d_cu, *d_tiles;
    int32_t ntiles;
} problem;

static void setup(problem *p, const int *lens, int B, int H, int D, cuda_dtype dt) {
    memset(p, 0, sizeof *p);
    p->B = B, p->H = H, p->D = D, p->dt = dt;
    for (int b = 0; b < B; b++)
        p->cu[b + 1] = p->cu[b] + lens[b];
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
    free(h);
    free(tiles);
}

static void teardown(problem *p) {
    free(p->qkv);
    cudaFree(p->d_qkv);
    cudaFree(p->d_out);
    cudaFree(p->d_cu);
    cudaFree(p->d_tiles);
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
                for (int kernel = 0; kernel < 2; kernel++) {
                    problem p;
                    setup(&p, cases[ci].lens, cases[ci].B, 4, dims[di], types[ti]);
                    const cuda_attn_args a = args(&p);
                    CHECK((cudaError_t)(kernel ? cuda_attention_ref((int)p.dt, &a, p.T, NULL)
                                               : cuda_flash_attention((int)p.dt, &a, NULL)));
                    CHECK(cudaDeviceSynchronize());
                    double vmax;
                    const double err = max_error(&p, &vmax);
                    const double u = types[ti] == CUDA_DT_BF16 ? 1.0 / 256 : 1.0 / 2048;
                    const double bound = ((kernel ? 1.0 : 3.0) * u + 1e-5) * vmax;
                    const int ok = err <= bound;
                    failed += !ok;
                    printf("%-4s %-5s d%-3d case %zu (T=%4d): max error %.3e, bound %.3e  %s\n",
                           kernel ? "fp32" : "flash", cuda_dtype_name(types[ti]), dims[di], ci, p.T,
                           err, bound, ok ? "ok" : "FAILED");
                    teardown(&p);
                }
    return failed;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void bench(void) {
    printf("\nattention benchmark (flash kernel; median of 20, CUDA events)\n");
    printf("%-10s %-5s %-4s %10s %10s\n", "shape", "type", "d", "ms", "TFLOP/s");
    static const int dims[] = {64, 128};
    static const cuda_dtype types[] = {CUDA_DT_F16, CUDA_DT_BF16};
    for (int shape = 0; shape < 2; shape++)
        for (int di = 0; di < 2; di++)
            for (int ti = 0; ti < 2; ti++) {
                int lens[8] = {0};
                const int B = shape ? 1 : 8, L = shape ? 4096 : 512;
                for (int b = 0; b < B; b++)
                    lens[b] = L;
                problem p;
                setup(&p, lens, B, 16, dims[di], types[ti]);
                const cuda_attn_args a = args(&p);
                cudaEvent_t e0, e1;
                CHECK(cudaEventCreate(&e0));
                CHECK(cudaEventCreate(&e1));
                float ms[20];
                for (int r = 0; r < 23; r++) {
                    CHECK(cudaEventRecord(e0, NULL));
                    CHECK((cudaError_t)cuda_flash_attention((int)p.dt, &a, NULL));
                    CHECK(cudaEventRecord(e1, NULL));
                    CHECK(cudaEventSynchronize(e1));
                    if (r >= 3)
                        CHECK(cudaEventElapsedTime(&ms[r - 3], e0, e1));
                }
                qsort(ms, 20, sizeof ms[0], cmp_float);
                const double med = (ms[9] + ms[10]) / 2;
                const double flops = 4.0 * L * (double)L * dims[di] * 16 * B;
                printf("%dx%-7d %-5s d%-3d %10.4f %10.1f\n", B, L, cuda_dtype_name(types[ti]),
                       dims[di], med, flops / (med * 1e-3) / 1e12);
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
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
    const int failed = correctness();
    bench();
    printf("\nattention correctness: %s (%d failed)\n", failed ? "FAILED" : "passed", failed);
    return failed ? 1 : 0;
}

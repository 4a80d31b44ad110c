// kernels.cu — the CUDA engine's own kernels: embeddings and LayerNorm,
// exact GELU, FlashAttention-2-style varlen attention on tensor cores (flash:
// WMMA with S and O in shared memory; flash2: mma.sync with S, P and O in
// registers), an fp32 attention (the fp32 path and the self-test's
// reference), pooling and the fp32 vector kernels after it (Normalize,
// tanh).
// The GEMMs are cuBLASLt's (cuda_engine.c). Launchers are declared in
// cuda_kernels.h; the dtype codes are cuda_plan.h's cuda_dtype
// (0 fp32, 1 fp16, 2 bf16).
#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <math.h>
#include <string.h>

#include <type_traits>

namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the total. red holds 32 floats.
__device__ float block_sum(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); // red may still be read by the previous call
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- LayerNorm (and the embeddings' sum before it) ------------------------------
// One block per token. The value of column c is recomputed on the second pass
// instead of being kept: C is at most a few thousand, and the rows are in L1/L2.
template <typename T, bool EMBED> struct ln_src {
    const T *x;                 // !EMBED: (T, C)
    const int32_t *ids, *types, *pos; // EMBED
    const T *wte, *wpe, *wtt;   // EMBED
    __device__ __forceinline__ float at(int t, int c, int C) const {
        if (EMBED)
            return to_f(wte[(size_t)ids[t] * C + c]) + to_f(wpe[(size_t)pos[t] * C + c]) +
                   to_f(wtt[(size_t)types[t] * C + c]);
        return to_f(x[(size_t)t * C + c]);
    }
};

template <typename T, bool EMBED>
__global__ void layernorm_kernel(ln_src<T, EMBED> src, const float *w, const float *b, float eps,
                                 T *y, int C) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        s += src.at(t, c, C);
    const float mean = block_sum(s, red) / (float)C;
    float q = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = src.at(t, c, C) - mean;
        q += d * d;
    }
    // Two passes: the variance of values far from zero stays exact, as in
    // model/bert.c and PyTorch (biased variance, eps inside the root).
    const float rstd = rsqrtf(block_sum(q, red) / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        y[(size_t)t * C + c] = from_f<T>((src.at(t, c, C) - mean) * rstd * w[c] + b[c]);
}

template <typename T>
__global__ void gelu_kernel(T *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = to_f(x[i]);
        x[i] = from_f<T>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
}

// ---- pooling ------------------------------------------------------------------------
// One block per sequence. Mean and mean/sqrt(len) sum in fp32 (len is at
// most max_positions, so the sum's relative error stays below len·2^-24);
// max starts from the first token and takes fmaxf, as pool_seq does.
template <typename T>
__global__ void pool_kernel(const T *x, const int32_t *cu, int C, int mode, int normalize,
                            float *pooled) {
    __shared__ float red[32];
    const int b = blockIdx.x;
    const int start = cu[b], len = cu[b + 1] - cu[b];
    float *o = pooled + (size_t)b * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v;
        if (mode == CUDA_POOL_CLS || mode == CUDA_POOL_LAST) {
            v = to_f(x[(size_t)(mode == CUDA_POOL_CLS ? start : start + len - 1) * C + c]);
        } else if (mode == CUDA_POOL_MAX) {
            v = to_f(x[(size_t)start * C + c]);
            for (int t = 1; t < len; t++)
                v = fmaxf(v, to_f(x[(size_t)(start + t) * C + c]));
        } else {
            v = 0.0f;
            for (int t = 0; t < len; t++)
                v += to_f(x[(size_t)(start + t) * C + c]);
            v /= mode == CUDA_POOL_MEAN ? (float)len : sqrtf((float)len);
        }
        o[c] = v;
        ss += v * v;
    }
    if (!normalize)
        return;
    // F.normalize: v / max(||v||, 1e-12).
    const float inv = 1.0f / fmaxf(sqrtf(block_sum(ss, red)), 1e-12f);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        o[c] *= inv;
}

// One block per row: v[b] /= max(||v[b]||, 1e-12).
__global__ void l2_normalize_kernel(float *v, int n) {
    __shared__ float red[32];
    float *o = v + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x)
        ss += o[c] * o[c];
    const float inv = 1.0f / fmaxf(sqrtf(block_sum(ss, red)), 1e-12f);
    for (int c = threadIdx.x; c < n; c += blockDim.x)
        o[c] *= inv;
}

__global__ void tanh_kernel(float *v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        v[i] = tanhf(v[i]);
}

// ---- attention ------------------------------------------------------------------------
__device__ __forceinline__ int find_seq(const int32_t *cu, int B, int t) {
    int lo = 0, hi = B - 1; // the last b with cu[b] <= t
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (cu[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// One warp per (token, head), in fp32 arithmetic whatever T is: each lane
// holds D/32 of the query and the output; scores are reduced across the warp
// and the softmax is the online one, with no scratch.
template <typename T, int D>
__global__ void attention_ref_kernel(cuda_attn_args a, int T_) {
    constexpr int PER = D / 32;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= T_ * a.heads)
        return;
    const int t = warp / a.heads, h = warp % a.heads;
    const int C = a.heads * D;
    const T *qkv = (const T *)a.qkv;
    const int b = find_seq(a.cu_seqlens, a.batch, t);
    const int start = a.cu_seqlens[b], end = a.cu_seqlens[b + 1];
    float q[PER], o[PER];
    for (int i = 0; i < PER; i++) {
        q[i] = to_f(qkv[(size_t)t * 3 * C + h * D + lane * PER + i]) * a.scale;
        o[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = start; j < end; j++) {
        const T *k = qkv + (size_t)j * 3 * C + C + h * D + lane * PER;
        const T *v = k + C;
        float s = 0.0f;
        for (int i = 0; i < PER; i++)
            s += q[i] * to_f(k[i]);
        for (int off = 16; off > 0; off >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, off);
        const float mn = fmaxf(m, s);
        // expf, not __expf: this kernel is what shadow verification checks
        // against its fp32 bound, and __expf's error grows with |x|.
        const float corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
        for (int i = 0; i < PER; i++)
            o[i] = o[i] * corr + p * to_f(v[i]);
        m = mn;
    }
    T *out = (T *)a.out + (size_t)t * C + h * D + lane * PER;
    for (int i = 0; i < PER; i++)
        out[i] = from_f<T>(o[i] / l);
}

namespace fa {
using namespace nvcuda;
constexpr int BM = 64, BN = 64, WARPS = 4, THREADS = WARPS * 32;
constexpr int PAD = 8; // 16-byte row padding: breaks bank conflicts, keeps WMMA's ldm a multiple of 8

template <int D> struct layout {
    static constexpr int LDT = D + PAD;  // Q, K, V rows (elements of T)
    static constexpr int LDS = BN + 4;   // scores (floats)
    static constexpr int LDP = BN + PAD; // probabilities (elements of T)
    static constexpr int LDO = D + 4;    // output accumulator (floats)
    static constexpr size_t up(size_t n) { return (n + 127) / 128 * 128; }
    static constexpr size_t q = 0;
    static constexpr size_t k = q + up((size_t)BM * LDT * 2);
    static constexpr size_t v = k + up((size_t)BN * LDT * 2);
    static constexpr size_t s = v + up((size_t)BN * LDT * 2);
    static constexpr size_t p = s + up((size_t)BM * LDS * 4);
    static constexpr size_t o = p + up((size_t)BM * LDP * 2);
    static constexpr size_t ml = o + up((size_t)BM * LDO * 4);
    static constexpr size_t bytes = ml + up((size_t)BM * 2 * 4);
};

// Copies rows [r0, r0 + n) of a (rows, D) slice with row stride ld (elements)
// into shared memory (row stride LDT), 16 bytes per thread and step; rows
// n..ROWS are zero, so padded keys contribute nothing and are masked anyway.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_tile(T *dst, const T *src, size_t ld, int n) {
    constexpr int VEC = 16 / sizeof(T), PER_ROW = D / VEC;
    for (int i = threadIdx.x; i < ROWS * PER_ROW; i += THREADS) {
        const int r = i / PER_ROW, c = (i % PER_ROW) * VEC;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r < n)
            val = *reinterpret_cast<const uint4 *>(src + (size_t)r * ld + c);
        *reinterpret_cast<uint4 *>(dst + r * layout<D>::LDT + c) = val;
    }
}

// Block (tile, head): the tile's BM queries of one sequence against all its
// keys, BN at a time. Warp w owns query rows [16w, 16w + 16): S = Q·Kᵀ and
// O += P·V run on tensor cores (WMMA 16×16×16, fp32 accumulation); the
// softmax runs on the warp's rows in fp32 in shared memory, two lanes per
// row. O lives in shared memory in fp32 so that each row can be rescaled by
// exp(m_old − m_new) when the running maximum moves (WMMA's fragment layout
// is opaque, so the rescale cannot be done in registers).
template <typename T, int D>
__global__ void __launch_bounds__(THREADS) flash_kernel(cuda_attn_args a) {
    using L = layout<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem + L::q);
    T *Ks = reinterpret_cast<T *>(smem + L::k);
    T *Vs = reinterpret_cast<T *>(smem + L::v);
    float *S = reinterpret_cast<float *>(smem + L::s);
    T *P = reinterpret_cast<T *>(smem + L::p);
    float *O = reinterpret_cast<float *>(smem + L::o);
    float *row_m = reinterpret_cast<float *>(smem + L::ml), *row_l = row_m + BM;

    const int seq = a.tiles[2 * blockIdx.x], q0 = a.tiles[2 * blockIdx.x + 1];
    const int h = blockIdx.y;
    const int start = a.cu_seqlens[seq], len = a.cu_seqlens[seq + 1] - start;
    const int rows = min(BM, len - q0);
    const int C = a.heads * D;
    const size_t ld = (size_t)3 * C;
    const T *qkv = static_cast<const T *>(a.qkv);
    const T *qg = qkv + (size_t)(start + q0) * ld + h * D;
    const T *kg = qkv + (size_t)start * ld + C + h * D;
    const T *vg = kg + C;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float scale_log2 = a.scale * 1.4426950408889634f; // exp(x) = exp2(x·log2 e)

    load_tile<T, D, BM>(Qs, qg, ld, rows);
    for (int i = threadIdx.x; i < BM * L::LDO; i += THREADS)
        O[i] = 0.0f;
    for (int i = threadIdx.x; i < BM; i += THREADS) {
        row_m[i] = -INFINITY;
        row_l[i] = 0.0f;
    }

    const int r = 16 * warp + (lane >> 1); // this lane's row in the softmax
    const int half = lane & 1;             // and which half of the columns
    for (int k0 = 0; k0 < len; k0 += BN) {
        const int nk = min(BN, len - k0);
        __syncthreads(); // the previous iteration is done with Ks and Vs
        load_tile<T, D, BN>(Ks, kg + (size_t)k0 * ld, ld, nk);
        load_tile<T, D, BN>(Vs, vg + (size_t)k0 * ld, ld, nk);
        __syncthreads();

        // S(16w.., :) = Q(16w.., :) · Kᵀ
        for (int j = 0; j < BN / 16; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < D / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, Qs + 16 * warp * L::LDT + 16 * kk, L::LDT);
                wmma::load_matrix_sync(fb, Ks + 16 * j * L::LDT + 16 * kk, L::LDT);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(S + 16 * warp * L::LDS + 16 * j, acc, L::LDS,
                                    wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax of row r over columns [half·BN/2, (half + 1)·BN/2).
        float *srow = S + r * L::LDS + half * (BN / 2);
        float mx = -INFINITY;
        for (int c = 0; c < BN / 2; c++) {
            const int col = half * (BN / 2) + c;
            const float s = col < nk ? srow[c] * scale_log2 : -INFINITY;
            srow[c] = s;
            mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_old = row_m[r];
        const float m_new = fmaxf(m_old, mx); // finite: every block has a key (k0 < len)
        const float alpha = exp2f(m_old - m_new); // 0 on the first block (m_old = -inf)
        T *prow = P + r * L::LDP + half * (BN / 2);
        float sum = 0.0f;
        for (int c = 0; c < BN / 2; c++) {
            const float p = exp2f(srow[c] - m_new); // masked: exp2(-inf) = 0
            // Summed as rounded, so that the normaliser matches the P the
            // tensor cores multiply.
            const T pt = from_f<T>(p);
            prow[c] = pt;
            sum += to_f(pt);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        float *orow = O + r * L::LDO + half * (D / 2);
        for (int c = 0; c < D / 2; c++)
            orow[c] *= alpha;
        __syncwarp(); // both lanes of the row read m_old before it changes
        if (!half) {
            row_m[r] = m_new;
            row_l[r] = row_l[r] * alpha + sum;
        }
        __syncwarp();

        // O(16w.., :) += P(16w.., :) · V
        for (int j = 0; j < D / 16; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, O + 16 * warp * L::LDO + 16 * j, L::LDO,
                                   wmma::mem_row_major);
            for (int kk = 0; kk < BN / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, P + 16 * warp * L::LDP + 16 * kk, L::LDP);
                wmma::load_matrix_sync(fb, Vs + 16 * kk * L::LDT + 16 * j, L::LDT);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(O + 16 * warp * L::LDO + 16 * j, acc, L::LDO,
                                    wmma::mem_row_major);
        }
        __syncwarp();
    }

    // out = O / l for the tile's valid rows (the warp's own rows: no block sync).
    T *og = static_cast<T *>(a.out) + (size_t)(start + q0) * C + h * D;
    for (int i = lane; i < 16 * D; i += 32) {
        const int rr = 16 * warp + i / D, c = i % D;
        if (rr < rows)
            og[(size_t)rr * C + c] = from_f<T>(O[rr * L::LDO + c] / row_l[rr]);
    }
}

template <typename T, int D> int launch_flash(const cuda_attn_args *a, cudaStream_t s) {
    const dim3 grid((unsigned)a->ntiles, (unsigned)a->heads);
    flash_kernel<T, D><<<grid, THREADS, layout<D>::bytes, s>>>(*a);
    return (int)cudaGetLastError();
}

template <typename T, int D> cudaError_t opt_in() {
    return cudaFuncSetAttribute(flash_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)layout<D>::bytes);
}
} // namespace fa

// ---- flash2: S, P and O in registers --------------------------------------------------
// The FlashAttention-2 forward pass on mma.sync m16n8k16 (fp32 accumulate).
// Block (tile, head) as in fa, same BM × BN tiles; warp w owns query rows
// [16w, 16w + 16). Fragment layouts (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"), with g = lane / 4 and q = lane % 4:
//   A 16×16: a0 (g, 2q..2q+1), a1 (g + 8, 2q..), a2 (g, 2q + 8..), a3 (g + 8, 2q + 8..)
//   B 16×8:  b0 (k 2q..2q+1, n g), b1 (k 2q + 8.., n g)
//   C 16×8:  c0 c1 (g, 2q..2q+1), c2 c3 (g + 8, 2q..2q+1)
// so the C fragments of S over keys [16t, 16t + 16) are, packed in pairs,
// exactly the A fragment of P over those keys: P never leaves registers.
// Each lane holds two rows (g and g + 8); their max and sum are reduced over
// the four lanes of the quad. Q, K and V come to shared memory by cp.async
// (K and V double-buffered: tile j + 1 loads while tile j is computed), and
// to registers by ldmatrix (.trans for V, whose B fragment runs along keys).
namespace fa2 {
constexpr int BM = CUDA_ATTN_BLOCK_M, BN = CUDA_ATTN_BLOCK_N, WARPS = BM / 16,
              THREADS = WARPS * 32;
static_assert(BM == fa::BM && BN == fa::BN, "both kernels run cuda_attn_tiles' tiles");
static_assert(BM % 16 == 0 && BN % 16 == 0, "whole m16n8k16 tiles");

template <int D> struct layout {
    // Row stride in elements: 16 bytes of padding put the eight 16-byte rows
    // one ldmatrix phase reads in eight different bank groups for D = 32,
    // 64 and 128 (strides of 80, 144 and 272 bytes).
    static constexpr int LD = D + 8;
    static constexpr size_t q = 0;                              // Q (BM, LD)
    static constexpr size_t k = q + (size_t)BM * LD * 2;       // K [2] (BN, LD)
    static constexpr size_t v = k + 2 * (size_t)BN * LD * 2;   // V [2] (BN, LD)
    static constexpr size_t bytes = v + 2 * (size_t)BN * LD * 2;
};
static_assert(layout<32>::bytes <= fa::layout<32>::bytes &&
                  layout<64>::bytes <= fa::layout<64>::bytes &&
                  layout<128>::bytes <= fa::layout<128>::bytes,
              "cuda_flash_smem_bytes (the flash kernel's) covers flash2");

__device__ __forceinline__ unsigned smem_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared, bypassing L1; src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// c += a·b on one m16n8k16 tile, fp32 accumulation.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
    if constexpr (std::is_same<T, __half>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T and packed, the lower column in the low half (the
// order of every fragment register).
template <typename T> __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t u;
    if constexpr (std::is_same<T, __half>::value) {
        const __half2 h = __floats2half2_rn(lo, hi);
        memcpy(&u, &h, 4);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        memcpy(&u, &h, 4);
    }
    return u;
}

// Starts copying rows [0, n) of a (ROWS, D) slice, row stride ld elements,
// into dst (row stride LD); rows n..ROWS are zero-filled, so padded keys
// give finite scores (masked anyway) and zero values (p = 0 times a finite
// v adds nothing), and padded query rows give finite rows never written.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_tile_async(T *dst, const T *src, size_t ld, int n) {
    constexpr int VEC = 16 / sizeof(T), PER_ROW = D / VEC;
    static_assert((ROWS * PER_ROW) % THREADS == 0, "every thread copies as many chunks");
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * PER_ROW; i += THREADS) {
        const int r = i / PER_ROW, c = (i % PER_ROW) * VEC;
        const bool in = r < n;
        cp_async16(dst + r * layout<D>::LD + c, in ? src + (size_t)r * ld + c : src, in ? 16 : 0);
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(THREADS) flash2_kernel(cuda_attn_args a) {
    using L = layout<D>;
    constexpr int LD = L::LD;
    constexpr int NS = BN / 8;  // n-tiles of S (8 keys each)
    constexpr int NO = D / 8;   // n-tiles of O (8 columns each)
    constexpr int KQ = D / 16;  // k-steps of Q·Kᵀ
    constexpr int KP = BN / 16; // k-steps of P·V
    extern __shared__ __align__(128) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem + L::q);
    T *Ks = reinterpret_cast<T *>(smem + L::k);
    T *Vs = reinterpret_cast<T *>(smem + L::v);

    const int seq = a.tiles[2 * blockIdx.x], q0 = a.tiles[2 * blockIdx.x + 1];
    const int h = blockIdx.y;
    const int start = a.cu_seqlens[seq], len = a.cu_seqlens[seq + 1] - start;
    const int rows = min(BM, len - q0);
    const int C = a.heads * D;
    const size_t ld = (size_t)3 * C;
    const T *qkv = static_cast<const T *>(a.qkv);
    const T *qg = qkv + (size_t)(start + q0) * ld + h * D;
    const T *kg = qkv + (size_t)start * ld + C + h * D;
    const T *vg = kg + C;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, q = lane & 3;
    const float scale_log2 = a.scale * 1.4426950408889634f; // exp(x) = exp2(x·log2 e)

    load_tile_async<T, D, BM>(Qs, qg, ld, rows);
    load_tile_async<T, D, BN>(Ks, kg, ld, min(BN, len));
    load_tile_async<T, D, BN>(Vs, vg, ld, min(BN, len));
    cp_async_commit();

    // ldmatrix row addresses: lanes 8i..8i+7 name the rows of matrix i.
    // Q (A, row-major): matrices (rows 0-7 | 8-15) × (cols 0-7 | 8-15), row first.
    const int a_row = 16 * warp + (lane & 15), a_col = (lane >> 4) * 8;
    // K (B of Q·Kᵀ): matrices (keys 0-7, d 0-7), (keys 0-7, d 8-15), then keys 8-15.
    const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
    // V (B of P·V, transposed): (keys 0-7, d 0-7), (keys 8-15, d 0-7), then d 8-15.
    const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;

    uint32_t qf[KQ][4];
    float o[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}; // running max of rows g, g + 8 (raw scores)
    float l[2] = {0.0f, 0.0f};           // this lane's part of their sums

    const int nblocks = (len + BN - 1) / BN;
    for (int j = 0; j < nblocks; j++) {
        const int k0 = j * BN;
        cp_async_wait_all();
        __syncthreads(); // tile j is visible to all; all are done with tile j - 1's buffer
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < KQ; kk++)
                ldmatrix_x4(qf[kk], Qs + a_row * LD + 16 * kk + a_col);
        }
        if (j + 1 < nblocks) {
            const int nb = (j + 1) & 1, nk = min(BN, len - k0 - BN);
            load_tile_async<T, D, BN>(Ks + nb * BN * LD, kg + (size_t)(k0 + BN) * ld, ld, nk);
            load_tile_async<T, D, BN>(Vs + nb * BN * LD, vg + (size_t)(k0 + BN) * ld, ld, nk);
            cp_async_commit();
        }
        const T *Kb = Ks + (j & 1) * BN * LD, *Vb = Vs + (j & 1) * BN * LD;

        // S = Q·Kᵀ over this warp's 16 rows and the tile's BN keys.
        float s[NS][4];
#pragma unroll
        for (int i = 0; i < NS; i++)
            s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KQ; kk++)
#pragma unroll
            for (int n2 = 0; n2 < NS / 2; n2++) {
                uint32_t b[4];
                ldmatrix_x4(b, Kb + (16 * n2 + k_row) * LD + 16 * kk + k_col);
                mma<T>(s[2 * n2], qf[kk], b[0], b[1]);
                mma<T>(s[2 * n2 + 1], qf[kk], b[2], b[3]);
            }
        if (k0 + BN > len) { // only the last tile has keys past the sequence
#pragma unroll
            for (int i = 0; i < NS; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (k0 + 8 * i + 2 * q + (e & 1) >= len)
                        s[i][e] = -INFINITY;
        }

        // Online softmax of rows g (s[.][0..1]) and g + 8 (s[.][2..3]).
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int i = 0; i < NS; i++) {
            mx[0] = fmaxf(mx[0], fmaxf(s[i][0], s[i][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[i][2], s[i][3]));
        }
        float ms[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // mx is finite: every tile has a key (k0 < len) and every row's
            // score of it is finite. alpha is 0 on the first tile (m = -inf).
            const float alpha = exp2f((m[r] - mx[r]) * scale_log2);
            m[r] = mx[r];
            ms[r] = mx[r] * scale_log2;
            l[r] *= alpha;
#pragma unroll
            for (int i = 0; i < NO; i++) {
                o[i][2 * r] *= alpha;
                o[i][2 * r + 1] *= alpha;
            }
        }
        uint32_t pf[KP][4];
#pragma unroll
        for (int i = 0; i < NS; i++) {
            // Masked scores: exp2(-inf) = 0.
            const float p0 = exp2f(fmaf(s[i][0], scale_log2, -ms[0]));
            const float p1 = exp2f(fmaf(s[i][1], scale_log2, -ms[0]));
            const float p2 = exp2f(fmaf(s[i][2], scale_log2, -ms[1]));
            const float p3 = exp2f(fmaf(s[i][3], scale_log2, -ms[1]));
            l[0] += p0 + p1;
            l[1] += p2 + p3;
            pf[i / 2][2 * (i & 1)] = pack<T>(p0, p1);     // a0 / a2: row g
            pf[i / 2][2 * (i & 1) + 1] = pack<T>(p2, p3); // a1 / a3: row g + 8
        }

        // O += P·V
#pragma unroll
        for (int t = 0; t < KP; t++)
#pragma unroll
            for (int n2 = 0; n2 < NO / 2; n2++) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, Vb + (16 * t + v_row) * LD + 16 * n2 + v_col);
                mma<T>(o[2 * n2], pf[t], b[0], b[1]);
                mma<T>(o[2 * n2 + 1], pf[t], b[2], b[3]);
            }
    }

    // out = O / l on the tile's valid rows.
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
    }
    T *og = static_cast<T *>(a.out) + (size_t)(start + q0) * C + h * D + 2 * q;
    const int r0 = 16 * warp + g, r1 = r0 + 8;
#pragma unroll
    for (int i = 0; i < NO; i++) {
        if (r0 < rows)
            *reinterpret_cast<uint32_t *>(og + (size_t)r0 * C + 8 * i) =
                pack<T>(o[i][0] * inv[0], o[i][1] * inv[0]);
        if (r1 < rows)
            *reinterpret_cast<uint32_t *>(og + (size_t)r1 * C + 8 * i) =
                pack<T>(o[i][2] * inv[1], o[i][3] * inv[1]);
    }
}

template <typename T, int D> int launch(const cuda_attn_args *a, cudaStream_t s) {
    const dim3 grid((unsigned)a->ntiles, (unsigned)a->heads);
    flash2_kernel<T, D><<<grid, THREADS, layout<D>::bytes, s>>>(*a);
    return (int)cudaGetLastError();
}

template <typename T, int D> cudaError_t opt_in() {
    return cudaFuncSetAttribute(flash2_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)layout<D>::bytes);
}
} // namespace fa2

template <typename T> int launch_ref(const cuda_attn_args *a, int32_t T_, cudaStream_t s) {
    const int64_t warps = (int64_t)T_ * a->heads;
    const unsigned blocks = (unsigned)((warps * 32 + 255) / 256);
    switch (a->head_dim) {
    case 32:
        attention_ref_kernel<T, 32><<<blocks, 256, 0, s>>>(*a, T_);
        break;
    case 64:
        attention_ref_kernel<T, 64><<<blocks, 256, 0, s>>>(*a, T_);
        break;
    case 128:
        attention_ref_kernel<T, 128><<<blocks, 256, 0, s>>>(*a, T_);
        break;
    default:
        return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

int ln_threads(int C) {
    const int t = (C + 31) / 32 * 32;
    return t < 128 ? 128 : t > 1024 ? 1024 : t;
}

template <typename T>
int launch_embed(const int32_t *ids, const int32_t *types, const int32_t *pos, const void *wte, const void *wpe,
                 const void *wtt, const float *w, const float *b, float eps, void *y, int32_t T_,
                 int32_t C, cudaStream_t s) {
    ln_src<T, true> src{};
    src.ids = ids;
    src.types = types;
src.pos = pos;
    src.wte = (const T *)wte;
    src.wpe = (const T *)wpe;
    src.wtt = (const T *)wtt;
    layernorm_kernel<T, true><<<T_, ln_threads(C), 0, s>>>(src, w, b, eps, (T *)y, C);
    return (int)cudaGetLastError();
}

template <typename T>
int launch_ln(const void *x, const float *w, const float *b, float eps, void *y, int32_t T_,
              int32_t C, cudaStream_t s) {
    ln_src<T, false> src{};
    src.x = (const T *)x;
    layernorm_kernel<T, false><<<T_, ln_threads(C), 0, s>>>(src, w, b, eps, (T *)y, C);
    return (int)cudaGetLastError();
}

template <typename T> int launch_gelu(void *x, int64_t n, cudaStream_t s) {
    const int64_t blocks = (n + 255) / 256;
    gelu_kernel<T><<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), 256, 0, s>>>((T *)x, n);
    return (int)cudaGetLastError();
}

template <typename T>
int launch_pool(const void *x, const int32_t *cu, int32_t B, int32_t C, int mode, int normalize,
                float *pooled, cudaStream_t s) {
    pool_kernel<T><<<B, 256, 0, s>>>((const T *)x, cu, C, mode, normalize, pooled);
    return (int)cudaGetLastError();
}

} // namespace

#define DISPATCH(dtype, call)                                                                      \
    switch (dtype) {                                                                               \
    case 0: {                                                                                      \
        typedef float DT;                                                                          \
        return call;                                                                               \
    }                                                                                              \
    case 1: {                                                                                      \
        typedef __half DT;                                                                         \
        return call;                                                                               \
    }                                                                                              \
    case 2: {                                                                                      \
        typedef __nv_bfloat16 DT;                                                                  \
        return call;                                                                               \
    }                                                                                              \
    default:                                                                                       \
        return (int)cudaErrorInvalidValue;                                                         \
    }

extern "C" int cuda_embed_ln(int dtype, const int32_t *ids, const int32_t *types, const int32_t *pos, const void *wte,
                             const void *wpe, const void *wtt, const float *ln_w,
                             const float *ln_b, float eps, void *x, int32_t T, int32_t C,
                             void *stream) {
    DISPATCH(dtype, launch_embed<DT>(ids, types, pos, wte, wpe, wtt, ln_w, ln_b, eps, x, T, C,
                                     (cudaStream_t)stream))
}

extern "C" int cuda_layernorm(int dtype, const void *x, const float *w, const float *b, float eps,
                              void *y, int32_t T, int32_t C, void *stream) {
    DISPATCH(dtype, launch_ln<DT>(x, w, b, eps, y, T, C, (cudaStream_t)stream))
}

extern "C" int cuda_gelu(int dtype, void *x, int64_t n, void *stream) {
    DISPATCH(dtype, launch_gelu<DT>(x, n, (cudaStream_t)stream))
}

extern "C" int cuda_pool(int dtype, const void *x, const int32_t *cu_seqlens, int32_t B, int32_t C,
                         int mode, int normalize, float *pooled, void *stream) {
    if (mode < CUDA_POOL_MEAN || mode > CUDA_POOL_LAST)
        return (int)cudaErrorInvalidValue;
    DISPATCH(dtype,
             launch_pool<DT>(x, cu_seqlens, B, C, mode, normalize, pooled, (cudaStream_t)stream))
}

extern "C" int cuda_l2_normalize(float *v, int32_t B, int32_t n, void *stream) {
    l2_normalize_kernel<<<B, 256, 0, (cudaStream_t)stream>>>(v, n);
    return (int)cudaGetLastError();
}

extern "C" int cuda_tanh_f32(float *v, int64_t n, void *stream) {
    const int64_t blocks = (n + 255) / 256;
    tanh_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, (cudaStream_t)stream>>>(v,
                                                                                               n);
    return (int)cudaGetLastError();
}

extern "C" int cuda_attention_ref(int dtype, const cuda_attn_args *a, int32_t T, void *stream) {
    DISPATCH(dtype, launch_ref<DT>(a, T, (cudaStream_t)stream))
}

extern "C" int cuda_flash_smem_bytes(int head_dim) {
    switch (head_dim) {
    case 32:
        return (int)fa::layout<32>::bytes;
    case 64:
        return (int)fa::layout<64>::bytes;
    case 128:
        return (int)fa::layout<128>::bytes;
    default:
        return 0;
    }
}

extern "C" int cuda_flash_prepare(void) {
    const cudaError_t e[] = {fa::opt_in<__half, 32>(),         fa::opt_in<__half, 64>(),
                             fa::opt_in<__half, 128>(),        fa::opt_in<__nv_bfloat16, 32>(),
                             fa::opt_in<__nv_bfloat16, 64>(),  fa::opt_in<__nv_bfloat16, 128>()};
    const cudaError_t e2[] = {fa2::opt_in<__half, 32>(),        fa2::opt_in<__half, 64>(),
                              fa2::opt_in<__half, 128>(),       fa2::opt_in<__nv_bfloat16, 32>(),
                              fa2::opt_in<__nv_bfloat16, 64>(), fa2::opt_in<__nv_bfloat16, 128>()};
    for (cudaError_t x : e)
        if (x != cudaSuccess)
            return (int)x;
    for (cudaError_t x : e2)
        if (x != cudaSuccess)
            return (int)x;
    return 0;
}

// The (dtype, head size) pairs both tensor-core kernels are built for, each
// sent to Launch<T, D>::run; anything else is cudaErrorInvalidValue.
template <template <typename, int> class Launch>
static int dispatch_tensor_core(int dtype, const cuda_attn_args *a, void *stream) {
    const cudaStream_t s = (cudaStream_t)stream;
    if (a->ntiles <= 0)
        return 0;
    if (dtype == 1) {
        switch (a->head_dim) {
        case 32:
            return Launch<__half, 32>::run(a, s);
        case 64:
            return Launch<__half, 64>::run(a, s);
        case 128:
            return Launch<__half, 128>::run(a, s);
        }
    } else if (dtype == 2) {
        switch (a->head_dim) {
        case 32:
            return Launch<__nv_bfloat16, 32>::run(a, s);
        case 64:
            return Launch<__nv_bfloat16, 64>::run(a, s);
        case 128:
            return Launch<__nv_bfloat16, 128>::run(a, s);
        }
    }
    return (int)cudaErrorInvalidValue;
}

template <typename T, int D> struct flash_launch {
    static int run(const cuda_attn_args *a, cudaStream_t s) { return fa::launch_flash<T, D>(a, s); }
};
template <typename T, int D> struct flash2_launch {
    static int run(const cuda_attn_args *a, cudaStream_t s) { return fa2::launch<T, D>(a, s); }
};

extern "C" int cuda_flash_attention(int dtype, const cuda_attn_args *a, void *stream) {
    return dispatch_tensor_core<flash_launch>(dtype, a, stream);
}

extern "C" int cuda_flash2_attention(int dtype, const cuda_attn_args *a, void *stream) {
    return dispatch_tensor_core<flash2_launch>(dtype, a, stream);
}

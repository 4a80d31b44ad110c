/* peak.h — this machine's FP32 FMA peak, measured with a register-only loop.
 *
 * Benchmarks divide achieved GFLOP/s by this number. The loop keeps many
 * independent accumulators in registers (enough to cover FMA latency on
 * current cores) and touches no memory, so it runs at the FMA issue rate. */
#ifndef ATTN_PEAK_H
#define ATTN_PEAK_H

#include "simd.h"

/* Runs iters iterations of the FMA loop of path on the calling thread and
 * returns the floating-point operations it did (2 per FMA lane), or 0 when
 * the CPU cannot run path. */
double attn_peak_fma(attn_simd path, long iters);

/* The same for vdpbf16ps (bf16 pairs into fp32 lanes: 4 operations per
 * lane per instruction), the bf16 GEMMs' ceiling; 0 without AVX512_BF16. */
double attn_peak_bf16(long iters);

/* The path-specific loops (peak_avx512.c, peak_avx2.c); reached only through
 * attn_peak_fma, after the CPU check. */
double attn_peak_fma_avx512(long iters);
double attn_peak_fma_avx2(long iters);
double attn_peak_bf16_avx512(long iters);

/* The int8 peak: a register-only loop of vpdpbusd (64 u8 × s8 products
 * summed into 16 int32 lanes per instruction). Returns the integer operations
 * it did (2 per product), or 0 when the CPU (or the active path) lacks AVX512_VNNI. */
double attn_peak_int8(long iters);
double attn_peak_int8_vnni(long iters); /* peak_int8_avx512.c, after the check */

#endif

/* simd.h — which instruction-set path kernels take, chosen at run time.
 *
 * One binary runs on any x86-64 CPU: the best path the CPU supports is picked
 * from CPUID (and XGETBV, so the OS must save the wide registers). The
 * environment variable ATTNSERVE_SIMD=portable|avx2|avx512 or attn_simd_force()
 * lowers the choice, so every path can be tested on one machine. */
#ifndef ATTN_SIMD_H
#define ATTN_SIMD_H

typedef enum attn_simd {
    ATTN_SIMD_PORTABLE = 0, /* plain C, any architecture */
    ATTN_SIMD_AVX2 = 1,     /* AVX2 + FMA */
    ATTN_SIMD_AVX512 = 2,   /* AVX-512 F */
} attn_simd;

/* Best path this CPU and OS support, ignoring any forcing. */
attn_simd attn_simd_detect(void);

/* Path kernels use now: the forced one if set, else ATTNSERVE_SIMD if set
 * and valid (read at the first call, not again), else attn_simd_detect(). */
attn_simd attn_simd_active(void);

/* Forces a path. Returns 0, or -1 if the CPU cannot run it. Not for use while
 * a kernel runs. attn_simd_unforce() returns to the default choice. */
int attn_simd_force(attn_simd path);
void attn_simd_unforce(void);

/* Instructions beyond a path's baseline that reduced-precision kernels need.
 * Each needs the AVX-512 path as well (the OS saving ZMM state), so a run
 * forced below avx512 sees none of them: that is how the refusals are
 * tested on a CPU that has them. */
typedef enum attn_cpu_feature {
    ATTN_CPU_AVX512_BF16, /* vdpbf16ps, vcvtne2ps2bf16 */
    ATTN_CPU_AMX_BF16,    /* tile registers, with the OS's permission */
    ATTN_CPU_AVX512_VNNI, /* vpdpbusd */
} attn_cpu_feature;

/* 1 when the CPU, the OS and the active path allow feature f, else 0. */
int attn_cpu_has(attn_cpu_feature f);

const char *attn_simd_name(attn_simd path);
/* Parses "portable", "avx2", "avx512"; returns -1 if none. */
int attn_simd_parse(const char *name);

#endif

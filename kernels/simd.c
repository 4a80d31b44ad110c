/* simd.c — run-time choice of the instruction-set path (see simd.h). */
#include "simd.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static attn_simd detect_x86(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return ATTN_SIMD_PORTABLE;
    int has_fma = (c >> 12) & 1, has_osxsave = (c >> 27) & 1, has_avx = (c >> 28) & 1;
    if (!has_osxsave || !has_avx)
        return ATTN_SIMD_PORTABLE;
    unsigned long long xcr0 = read_xcr0();
    int os_ymm = (xcr0 & 0x6) == 0x6;   /* SSE and AVX state saved */
    int os_zmm = (xcr0 & 0xe6) == 0xe6; /* plus opmask and ZMM state */
    if (!os_ymm || __get_cpuid_max(0, NULL) < 7)
        return ATTN_SIMD_PORTABLE;
    __cpuid_count(7, 0, a, b, c, d);
    int has_avx2 = (b >> 5) & 1;
    /* The AVX-512 kernels are compiled with -mavx512f/dq/bw/vl, so the
     * compiler may emit any of the four: a CPU with the foundation alone
     * (Knights Landing) would fault on the first masked byte move. */
    int has_avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
    if (has_avx512 && has_avx2 && has_fma && os_zmm)
        return ATTN_SIMD_AVX512;
    if (has_avx2 && has_fma)
        return ATTN_SIMD_AVX2;
    return ATTN_SIMD_PORTABLE;
}

/* Bit i set when feature i is present; computed once. */
static unsigned detect_features(void) {
    unsigned a, b, c, d, f = 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_sub = a;
    if ((c >> 11) & 1)
        f |= 1u << ATTN_CPU_AVX512_VNNI;
    /* AMX needs XCR0's tile state (bits 17, 18) enabled by the OS; Linux
     * also wants a per-process request (arch_prctl) before the first tile
     * instruction, which a kernel using AMX makes itself. */
    if (((d >> 22) & 1) && (read_xcr0() & 0x60000) == 0x60000)
        f |= 1u << ATTN_CPU_AMX_BF16;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        if ((a >> 5) & 1)
            f |= 1u << ATTN_CPU_AVX512_BF16;
    }
    return f;
}
#endif

int attn_cpu_has(attn_cpu_feature f) {
#if defined(__x86_64__) || defined(__i386__)
    static _Atomic int cached = -1;
    int v = atomic_load(&cached);
    if (v < 0) {
        v = attn_simd_detect() == ATTN_SIMD_AVX512 ? (int)detect_features() : 0;
        atomic_store(&cached, v);
    }
    return attn_simd_active() == ATTN_SIMD_AVX512 && ((unsigned)v >> f) & 1;
#else
    (void)f;
    return 0;
#endif
}

attn_simd attn_simd_detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    static _Atomic int cached = -1;
    int v = atomic_load(&cached);
    if (v < 0) {
        v = (int)detect_x86();
        atomic_store(&cached, v);
    }
    return (attn_simd)v;
#else
    return ATTN_SIMD_PORTABLE;
#endif
}

static _Atomic int forced = -1;
/* ATTNSERVE_SIMD's choice, read once: kernels ask for the path per call (a
 * LayerNorm per row), and getenv is a scan of the whole environment. -2: not
 * read yet; -1: unset, unknown or beyond this CPU. */
static _Atomic int from_env = -2;

attn_simd attn_simd_active(void) {
    int f = atomic_load(&forced);
    if (f >= 0)
        return (attn_simd)f;
    int e = atomic_load(&from_env);
    if (e == -2) {
        const char *env = getenv("ATTNSERVE_SIMD");
        const int want = env && *env ? attn_simd_parse(env) : -1;
        e = want >= 0 && want <= (int)attn_simd_detect() ? want : -1;
        atomic_store(&from_env, e);
    }
    return e >= 0 ? (attn_simd)e : attn_simd_detect();
}

int attn_simd_force(attn_simd path) {
    if ((int)path < 0 || path > attn_simd_detect())
        return -1;
    atomic_store(&forced, (int)path);
    return 0;
}

void attn_simd_unforce(void) {
    atomic_store(&forced, -1);
}

static const char *const names[] = {"portable", "avx2", "avx512"};

const char *attn_simd_name(attn_simd path) {
    return (int)path >= 0 && (int)path <= 2 ? names[path] : "unknown";
}

int attn_simd_parse(const char *name) {
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

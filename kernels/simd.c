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
    int os_ymm = (xcr0 & 0x6) == 0x6;    /* SSE and AVX state saved */
    int os_zmm = (xcr0 & 0xe6) == 0xe6;  /* plus opmask and ZMM state */
    if (!os_ymm || __get_cpuid_max(0, NULL) < 7)
        return ATTN_SIMD_PORTABLE;
    __cpuid_count(7, 0, a, b, c, d);
    int has_avx2 = (b >> 5) & 1, has_avx512f = (b >> 16) & 1;
    if (has_avx512f && has_avx2 && has_fma && os_zmm)
        return ATTN_SIMD_AVX512;
    if (has_avx2 && has_fma)
        return ATTN_SIMD_AVX2;
    return ATTN_SIMD_PORTABLE;
}

static int detect_avx512_vnni(void) {
    unsigned int a, b, c, d;
    if (detect_x86() != ATTN_SIMD_AVX512)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (c >> 11) & 1;
}
#endif

int attn_simd_has_avx512_vnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    static _Atomic int cached = -1;
    int v = atomic_load(&cached);
    if (v < 0) {
        v = detect_avx512_vnni();
        atomic_store(&cached, v);
    }
    return v;
#else
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

attn_simd attn_simd_active(void) {
    int f = atomic_load(&forced);
    if (f >= 0)
        return (attn_simd)f;
    attn_simd best = attn_simd_detect();
    const char *env = getenv("ATTNSERVE_SIMD");
    if (env && *env) {
        int want = attn_simd_parse(env);
        if (want >= 0 && want <= (int)best)
            return (attn_simd)want;
    }
    return best;
}

int attn_simd_force(attn_simd path) {
    if ((int)path < 0 || path > attn_simd_detect())
        return -1;
    atomic_store(&forced, (int)path);
    return 0;
}

void attn_simd_unforce(void) { atomic_store(&forced, -1); }

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

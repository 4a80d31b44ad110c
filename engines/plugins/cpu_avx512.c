/* cpu_avx512.c — the descriptor and score of the cpu-avx512 plugin
 * (engines/cpu.c and the model compiled for AVX-512, see mk/engines.mk).
 *
 * Compiled without AVX-512 flags: the registry calls the score on any CPU,
 * and it must be able to say "not here" without executing an instruction
 * the CPU lacks. */
#include "engines/engine.h"

#include <stdio.h>

extern const engine_iface engine_cpu_avx512;

/* Below the built-in cpu engine's 10: on the shapes measured the model's
 * own loops (LayerNorm, residuals, pooling) are a few per cent of a forward
 * whose GEMMs and attention already pick AVX-512 at run time, so `auto`
 * keeps the built-in engine unless this one is named. */
int cpu_avx512_score(char *why, size_t why_len) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) {
        snprintf(why, why_len, "needs AVX-512F, -BW, -DQ and -VL");
        return 0;
    }
    return 5;
}

__attribute__((visibility("default"))) const engine_plugin attnserve_engine_plugin = {
    .api_version = ENGINE_API_VERSION,
    .iface = &engine_cpu_avx512,
};

/* fuzz_util.h — what every libFuzzer target in tests/fuzz/ shares: a check
 * that aborts (so libFuzzer records the input as a crash, as it does for a
 * sanitizer report) and where the real model is.
 *
 * Each target is one file with LLVMFuzzerTestOneInput; mk/fuzz.mk builds
 * them with clang -fsanitize=fuzzer,address,undefined (tests/fuzz/README.md). */
#ifndef ATTN_FUZZ_UTIL_H
#define ATTN_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* An invariant the code under test promises; a failure is a finding. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The model directory the tokenizer and embeddings targets load once:
 * $ATTNSERVE_FUZZ_MODEL, else the default model `make model` fetches (the
 * targets run from the repository root). */
static inline const char *fuzz_model_dir(void) {
    const char *dir = getenv("ATTNSERVE_FUZZ_MODEL");
    return dir && *dir ? dir : "models/all-MiniLM-L6-v2";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif

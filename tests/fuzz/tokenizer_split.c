/* tokenizer_split.c — fuzzes tok_encode and tok_decode on arbitrary bytes
 * through the Split pre-tokenizer: the first byte picks one of the
 * tokenizers of tests/golden/split-* (every behavior, String and Regex
 * patterns, invert, empty matches and line anchors before Metaspace on the
 * Unigram model; the GPT-2, Llama-3 and o200k patterns before ByteLevel on
 * the byte-level BPE), the rest goes to the checks of tokenizer_common.h. */
#include "tokenizer_common.h"

static const char *const dirs[] = {
    "tests/golden/split-removed", "tests/golden/split-isolated",   "tests/golden/split-previous",
    "tests/golden/split-next",    "tests/golden/split-contiguous", "tests/golden/split-invert",
    "tests/golden/split-empty",   "tests/golden/split-anchors",    "tests/golden/split-literal",
    "tests/golden/split-gpt2",    "tests/golden/split-llama3",     "tests/golden/split-o200k"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_tokenizer_pick(dirs, sizeof dirs / sizeof dirs[0], data, size);
}

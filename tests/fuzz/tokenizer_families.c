/* tokenizer_families.c — fuzzes tok_encode and tok_decode on arbitrary bytes
 * with the tokenizer layouts of the newer embedding families: the first byte
 * picks one of tests/golden/fam-* (MPNet's WordPiece with <mask> lstrip,
 * ModernBERT's byte-level BPE with normalized added tokens, Qwen3's NFC +
 * Split + ByteLevel, EmbeddingGemma's BPE with byte fallback, added tokens
 * with lstrip/rstrip/single_word/normalized, Llama-3's ByteLevel-then-template
 * post-processor), the rest goes to the checks of tokenizer_common.h. */
#include "tokenizer_common.h"

static const char *const dirs[] = {"tests/golden/fam-mpnet", "tests/golden/fam-modernbert",
                                   "tests/golden/fam-qwen3", "tests/golden/fam-gemma3",
                                   "tests/golden/fam-flags", "tests/golden/fam-bytelevel"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_tokenizer_pick(dirs, sizeof dirs / sizeof dirs[0], data, size);
}

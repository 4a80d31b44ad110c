/* tokenizer_normalizers.c — fuzzes tok_encode and tok_decode on arbitrary
 * bytes through the Unicode normalizers: the first byte picks one of the
 * tiny Unigram tokenizers of tests/golden/unigram-{nfkc,nfc,nfd,nfkd} (NFKC
 * with the SentencePiece converter's Replace, NFC, NFD with Lowercase, NFKD
 * with Strip), the rest goes to the checks of tokenizer_common.h. */
#include "tokenizer_common.h"

static const char *const dirs[] = {"tests/golden/unigram-nfkc", "tests/golden/unigram-nfc",
                                   "tests/golden/unigram-nfd", "tests/golden/unigram-nfkd"};
#define NDIRS (sizeof dirs / sizeof dirs[0])

static const tok_tokenizer *current;

static const tok_tokenizer *fuzz_tokenizer(void) {
    return current;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tok_tokenizer *loaded[NDIRS];
    if (size == 0)
        return 0;
    size_t pick = data[0] % NDIRS;
    if (!loaded[pick])
        loaded[pick] = fuzz_load(dirs[pick]);
    current = loaded[pick];
    return fuzz_tokenizer_one(data + 1, size - 1);
}

/* tokenizer_normalizers.c — fuzzes tok_encode and tok_decode on arbitrary
 * bytes through the Unicode normalizers: the first byte picks one of the
 * tiny Unigram tokenizers of tests/golden/unigram-{nfkc,nfc,nfd,nfkd} (NFKC
 * with the SentencePiece converter's Replace, NFC, NFD with Lowercase, NFKD
 * with Strip), the rest goes to the checks of tokenizer_common.h. */
#include "tokenizer_common.h"

static const char *const dirs[] = {"tests/golden/unigram-nfkc", "tests/golden/unigram-nfc",
                                   "tests/golden/unigram-nfd", "tests/golden/unigram-nfkd"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_tokenizer_pick(dirs, sizeof dirs / sizeof dirs[0], data, size);
}

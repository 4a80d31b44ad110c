/* tokenizer_unigram.c — fuzzes tok_encode and tok_decode on arbitrary bytes
 * with the SentencePiece Unigram tokenizer of tests/golden/xlmr-tiny (a real
 * nmt_nfkc charsmap, Metaspace, <mask> with lstrip); the checks are in
 * tokenizer_common.h. */
#include "tokenizer_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_tokenizer_one(tokenizer_at("tests/golden/xlmr-tiny"), data, size);
}

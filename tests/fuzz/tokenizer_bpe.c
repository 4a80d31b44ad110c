/* tokenizer_bpe.c — fuzzes tok_encode and tok_decode on arbitrary bytes with
 * the byte-level BPE tokenizer of tests/golden/roberta-tiny (RoBERTa's
 * layout: ByteLevel, RobertaProcessing with trimmed offsets, <mask> with
 * lstrip); the checks are in tokenizer_common.h. */
#include "tokenizer_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_tokenizer_one(tokenizer_at("tests/golden/roberta-tiny"), data, size);
}

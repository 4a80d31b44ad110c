/* tokenizer.c — fuzzes tok_encode and tok_decode on arbitrary bytes with the
 * real WordPiece vocabulary (fuzz_model_dir()); the checks are in
 * tokenizer_common.h. */
#include "tokenizer_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_tokenizer_one(tokenizer_at(fuzz_model_dir()), data, size);
}

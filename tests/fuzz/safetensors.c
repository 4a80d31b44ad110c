/* safetensors.c — fuzzes the safetensors reader on arbitrary files through
 * st_open_memory, the path st_open takes once the file is mapped.
 * libFuzzer's buffer is exactly the input, so ASan reports any read past the
 * file.
 *
 * Checks for an accepted file: every tensor lies inside the data buffer
 * (after the 8-byte length and the header), holds product(shape) x dtype
 * size bytes, is found by its name, and overlaps no other (its bytes are
 * all read, so a range outside the buffer is caught too). A refused one
 * has a message naming the file. */
#include <string.h>

#include "fuzz_util.h"
#include "model/safetensors.h"

#define NAME "fuzz.safetensors"

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    st_file *f = NULL;
    if (st_open_memory(data, size, NAME, &f, err, sizeof err) != 0) {
        FUZZ_CHECK(!f && strncmp(err, NAME ": ", strlen(NAME) + 2) == 0 && err[strlen(NAME) + 2],
                   "refusal \"%s\"", err);
        return 0;
    }
    FUZZ_CHECK(st_file_bytes(f) == size, "%zu bytes of %zu", st_file_bytes(f), size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | data[i];
    const uint8_t *begin = data + 8 + hlen, *end = data + size;
    unsigned sum = 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= begin && p <= end && t->nbytes <= (size_t)(end - p),
                   "tensor %zu outside the data buffer", i);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "ndim %d", t->ndim);
        size_t elems = 1;
        for (int d = 0; d < t->ndim; d++) {
            FUZZ_CHECK(t->shape[d] >= 0, "shape[%d] = %lld", d, (long long)t->shape[d]);
            elems *= (size_t)t->shape[d]; /* fits: the bytes fit in the file */
        }
        if (elems)
            FUZZ_CHECK(t->nbytes == elems * st_dtype_size(t->dtype), "%zu bytes for %zu elements",
                       t->nbytes, elems);
        else
            FUZZ_CHECK(t->nbytes == 0, "%zu bytes for no element", t->nbytes);
        FUZZ_CHECK(st_find(f, t->name) == t, "tensor %zu not found by its name", i);
        for (size_t j = 0; j < i; j++) {
            const st_tensor *u = st_at(f, j);
            const uint8_t *q = u->data;
            FUZZ_CHECK(!t->nbytes || !u->nbytes || p + t->nbytes <= q || q + u->nbytes <= p,
                       "tensors %zu and %zu overlap", j, i);
        }
        for (size_t k = 0; k < t->nbytes; k++)
            sum += p[k];
    }
    FUZZ_CHECK(st_at(f, st_count(f)) == NULL, "a tensor past the end");
    (void)st_metadata(f, "format");
    st_close(f);
    sink = sum; /* makes the reads happen */
    return 0;
}

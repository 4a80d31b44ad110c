/* safetensors.h — a strict, read-only reader of .safetensors weight files.
 *
 * The file is memory-mapped read-only and its header validated in full before
 * any tensor is handed out: a truncated or hostile file is an error naming the
 * file and the problem, never a crash or a read outside the mapping.
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON, then the
 * data buffer. The JSON maps tensor names to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets relative to the data buffer), plus an
 * optional "__metadata__" object of strings. */
#ifndef MODEL_SAFETENSORS_H
#define MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* Headers beyond this are refused before being read (the reference
 * implementation's own bound). */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)
/* Tensors of more dimensions are refused. */
#define ST_MAX_DIMS 8

/* Float dtypes are what models load; the integer ones are accepted so that
 * files carrying buffers such as BERT's I64 position_ids validate, but the
 * model refuses to load them as weights. Any other dtype is an error. */
typedef enum st_dtype {
    ST_F32,
    ST_F16,
    ST_BF16,
    ST_F64,
    ST_I64,
    ST_I32,
    ST_I16,
    ST_I8,
    ST_U8,
    ST_BOOL,
} st_dtype;

typedef struct st_tensor {
    const char *name; /* NUL-terminated, owned by the st_file */
    st_dtype dtype;
    int ndim;                   /* 0 (a scalar) .. ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* [ndim] */
    const void *data;           /* nbytes inside the read-only mapping */
    size_t nbytes;              /* product(shape) * st_dtype_size(dtype) */
} st_tensor;

typedef struct st_file st_file;

/* st_open's failures: the file could not be opened, read or mapped
 * (absent, unreadable), or it was read and is not valid safetensors. */
enum { ST_EFORMAT = -1, ST_EIO = -2 };

/* Maps and validates path. Returns 0 and *out, or ST_EIO / ST_EFORMAT with a
 * message naming the file in err (NUL-terminated, truncated to err_len). */
int st_open(const char *path, st_file **out, char *err, size_t err_len);
void st_close(st_file *f);

/* Validates a safetensors image already in memory, as st_open does after
 * mapping the file (st_open goes through it; tests/fuzz drives it with
 * arbitrary bytes). buf[len] must outlive the st_file, which points into it;
 * name stands for the file in messages. Same returns as st_open. */
int st_open_memory(const void *buf, size_t len, const char *name, st_file **out, char *err,
                   size_t err_len);

/* Tensors in file order (as the header lists them). */
size_t st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, size_t i);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* The "__metadata__" value for key, or NULL. */
const char *st_metadata(const st_file *f, const char *key);

/* Size of the mapping in bytes (the file size). */
size_t st_file_bytes(const st_file *f);

const char *st_dtype_name(st_dtype d);
size_t st_dtype_size(st_dtype d);

#endif

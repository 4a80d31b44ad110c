/* safetensors.c — maps a .safetensors file and validates its header.
 *
 * Every offset and size is checked with overflow-safe arithmetic before a
 * tensor pointer is formed, so a later reader only ever touches bytes inside
 * the mapping. The parsed JSON header is kept: tensor names point into it. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct st_file {
    const uint8_t *map; /* [map_bytes], PROT_READ, or the caller's buffer */
    size_t map_bytes;
    int mapped;         /* map is ours to munmap (st_open), not the caller's */
    json_t *header;     /* the parsed header; owns the tensor names */
    json_t *metadata;   /* borrowed from header, or NULL */
    st_tensor *tensors; /* [count] */
    size_t count;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

const char *st_dtype_name(st_dtype d) {
    return (size_t)d < NDTYPES ? dtypes[d].name : "?";
}
size_t st_dtype_size(st_dtype d) {
    return (size_t)d < NDTYPES ? dtypes[d].size : 0;
}

static int fail(char *err, size_t err_len, const char *path, const char *fmt, ...) {
    if (err && err_len) {
        int n = snprintf(err, err_len, "%s: ", path);
        if (n >= 0 && (size_t)n < err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return ST_EFORMAT;
}

/* A JSON integer in [0, limit], or -1. */
static int64_t json_count(const json_t *v, uint64_t limit) {
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > limit)
        return -1;
    return (int64_t)x;
}

/* Tensor names in error messages are capped: they come from the file. */
#define NAME_FMT "tensor '%.80s'"

static int parse_tensor(const char *path, const char *name, const json_t *desc, size_t data_bytes,
                        st_tensor *t, char *err, size_t err_len) {
    if (!json_is_object(desc))
        return fail(err, err_len, path, NAME_FMT ": entry is not a JSON object", name);
    const json_t *jd = json_object_get(desc, "dtype");
    const json_t *js = json_object_get(desc, "shape");
    const json_t *jo = json_object_get(desc, "data_offsets");
    if (!jd || !js || !jo || json_object_size(desc) != 3)
        return fail(err, err_len, path,
                    NAME_FMT ": needs exactly the keys dtype, shape and data_offsets", name);

    const char *ds = json_string_value(jd);
    size_t d = 0;
    while (ds && d < NDTYPES && strcmp(ds, dtypes[d].name) != 0)
        d++;
    if (!ds || d == NDTYPES)
        return fail(err, err_len, path, NAME_FMT ": unsupported dtype %.16s", name,
                    ds ? ds : "(not a string)");

    if (!json_is_array(js) || json_array_size(js) > ST_MAX_DIMS)
        return fail(err, err_len, path, NAME_FMT ": shape must be an array of at most %d sizes",
                    name, ST_MAX_DIMS);
    /* Count elements in size_t, refusing any product the address space
     * could not hold. */
    size_t elems = 1;
    int overflow = 0;
    t->ndim = (int)json_array_size(js);
    for (int i = 0; i < t->ndim; i++) {
        int64_t n = json_count(json_array_get(js, (size_t)i), INT64_MAX);
        if (n < 0)
            return fail(err, err_len, path, NAME_FMT ": shape[%d] is not a non-negative integer",
                        name, i);
        t->shape[i] = n;
        if (n != 0 && elems > SIZE_MAX / (uint64_t)n)
            overflow = 1;
        else
            elems *= (size_t)n;
    }
    const size_t esize = dtypes[d].size;
    if (elems == 0)
        overflow = 0; /* a zero dimension makes the tensor empty whatever the rest */
    if (overflow || elems > SIZE_MAX / esize)
        return fail(err, err_len, path, NAME_FMT ": shape is too large", name);

    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return fail(err, err_len, path, NAME_FMT ": data_offsets must be [begin, end]", name);
    int64_t begin = json_count(json_array_get(jo, 0), data_bytes);
    int64_t end = json_count(json_array_get(jo, 1), data_bytes);
    if (begin < 0 || end < 0 || begin > end)
        return fail(err, err_len, path,
                    NAME_FMT ": data_offsets outside the %zu-byte data buffer (or begin > end)",
                    name, data_bytes);
    if ((size_t)(end - begin) != elems * esize)
        return fail(err, err_len, path,
                    NAME_FMT ": %s shape needs %zu bytes but data_offsets span %lld", name,
                    dtypes[d].name, elems * esize, (long long)(end - begin));

    t->name = name;
    t->dtype = (st_dtype)d;
    t->nbytes = elems * esize;
    t->data = (const void *)(uintptr_t)begin; /* made absolute by the caller */
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    uintptr_t xa = (uintptr_t)x->data, ya = (uintptr_t)y->data;
    if (xa != ya)
        return xa < ya ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Sorting by start offset makes every overlap one between neighbours. */
static int check_overlaps(const char *path, st_tensor *t, size_t n, char *err, size_t err_len) {
    if (n < 2)
        return 0;
    st_tensor **order = malloc(n * sizeof *order);
    if (!order)
        return fail(err, err_len, path, "out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = &t[i];
    qsort(order, n, sizeof *order, by_begin);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++) {
        const st_tensor *a = order[i - 1], *b = order[i];
        if ((uintptr_t)a->data + a->nbytes > (uintptr_t)b->data)
            rc = fail(err, err_len, path, NAME_FMT " and " NAME_FMT ": data ranges overlap",
                      a->name, b->name);
    }
    free(order);
    return rc;
}

static int check_metadata(const char *path, const json_t *m, char *err, size_t err_len) {
    if (!json_is_object(m))
        return fail(err, err_len, path, "__metadata__ is not a JSON object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)m, key, v) {
        if (!json_is_string(v))
            return fail(err, err_len, path, "__metadata__ value for '%.80s' is not a string", key);
    }
    return 0;
}

static int parse_header(st_file *f, const char *path, char *err, size_t err_len) {
    if (f->map_bytes < 8)
        return fail(err, err_len, path,
                    "truncated: %zu bytes, shorter than the 8-byte header length", f->map_bytes);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | f->map[i];
    if (hlen > ST_MAX_HEADER_BYTES)
        return fail(err, err_len, path, "header length %llu exceeds the %u-byte limit",
                    (unsigned long long)hlen, ST_MAX_HEADER_BYTES);
    if (hlen > f->map_bytes - 8)
        return fail(err, err_len, path, "truncated: header of %llu bytes but only %zu follow",
                    (unsigned long long)hlen, f->map_bytes - 8);

    json_error_t jerr;
    f->header = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header)
        return fail(err, err_len, path, "header is not valid JSON (%s at byte %d)", jerr.text,
                    jerr.position);
    if (!json_is_object(f->header))
        return fail(err, err_len, path, "header is not a JSON object");

    f->metadata = json_object_get(f->header, "__metadata__");
    if (f->metadata && check_metadata(path, f->metadata, err, err_len) < 0)
        return -1;

    const size_t data_off = 8 + (size_t)hlen, data_bytes = f->map_bytes - data_off;
    size_t n = json_object_size(f->header) - (f->metadata ? 1 : 0);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors)
        return fail(err, err_len, path, "out of memory");
    const char *name;
    const json_t *desc;
    json_object_foreach(f->header, name, desc) {
        if (desc == f->metadata)
            continue;
        if (parse_tensor(path, name, desc, data_bytes, &f->tensors[f->count], err, err_len) < 0)
            return -1;
        f->count++;
    }
    if (check_overlaps(path, f->tensors, f->count, err, err_len) < 0)
        return -1;
    for (size_t i = 0; i < f->count; i++)
        f->tensors[i].data = f->map + data_off + (uintptr_t)f->tensors[i].data;
    return 0;
}

int st_open_memory(const void *buf, size_t len, const char *name, st_file **out, char *err,
                   size_t err_len) {
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f)
        return fail(err, err_len, name, "out of memory");
    f->map = buf;
    f->map_bytes = len;
    if (parse_header(f, name, err, err_len) < 0) {
        st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int st_open(const char *path, st_file **out, char *err, size_t err_len) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail(err, err_len, path, "cannot open: %s", strerror(errno));
        return ST_EIO;
    }
    struct stat sb;
    int rc = 0;
    void *m = MAP_FAILED;
    if (fstat(fd, &sb) < 0) {
        fail(err, err_len, path, "cannot stat: %s", strerror(errno));
        rc = ST_EIO;
    } else if (!S_ISREG(sb.st_mode))
        rc = fail(err, err_len, path, "not a regular file");
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        rc = fail(err, err_len, path, "file too large to map");
    else if (sb.st_size == 0)
        rc = fail(err, err_len, path, "empty file");
    else if ((m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        fail(err, err_len, path, "cannot map: %s", strerror(errno));
        rc = ST_EIO;
    }
    close(fd);
    if (rc == 0 && (rc = st_open_memory(m, (size_t)sb.st_size, path, out, err, err_len)) == 0)
        (*out)->mapped = 1;
    else if (m != MAP_FAILED)
        munmap(m, (size_t)sb.st_size);
    return rc;
}

void st_close(st_file *f) {
    if (!f)
        return;
    if (f->mapped)
        munmap((void *)f->map, f->map_bytes);
    json_decref(f->header);
    free(f->tensors);
    free(f);
}

size_t st_count(const st_file *f) {
    return f->count;
}
const st_tensor *st_at(const st_file *f, size_t i) {
    return i < f->count ? &f->tensors[i] : NULL;
}
size_t st_file_bytes(const st_file *f) {
    return f->map_bytes;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (size_t i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *st_metadata(const st_file *f, const char *key) {
    return f->metadata ? json_string_value(json_object_get(f->metadata, key)) : NULL;
}

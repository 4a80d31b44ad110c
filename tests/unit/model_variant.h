/* model_variant.h — a throwaway copy of a model directory for the unit tests
 * that replace one of its files (a config key, the pooling file, one
 * tensor's values) and expect the load to refuse it or the vectors to move.
 * Each call asserts (Criterion) rather than returning an error. */
#ifndef TEST_MODEL_VARIANT_H
#define TEST_MODEL_VARIANT_H

#include <jansson.h>
#include <stddef.h>

#define VARIANT_DIR_LEN 64

/* Makes a fresh directory under /tmp in dir holding a copy of every file of
 * src. */
void variant_copy(char dir[VARIANT_DIR_LEN], const char *src);
/* The same for a model whose weights are too large to copy for each test:
 * only the NULL-terminated list of files in copy (relative to src, their
 * folders made) are copied, and model.safetensors is a link to src's. */
void variant_link(char dir[VARIANT_DIR_LEN], const char *src, const char *const *copy);
void variant_remove(const char *dir);

/* Replaces dir/rel with text. */
void variant_write(const char *dir, const char *rel, const char *text);
/* Sets key of the JSON object in dir/rel to value (JSON text), or deletes it
 * where value is NULL. */
void variant_set_json(const char *dir, const char *rel, const char *key, const char *value);
/* Overwrites tensor name of dir/model.safetensors with zero bytes, in place. */
void variant_zero_tensor(const char *dir, const char *name);
/* Overwrites tensor name of dir/model.safetensors with its dtype's value
 * `one ? 1.0 : 0.0` in place (F32, F16 or BF16). */
void variant_fill_tensor(const char *dir, const char *name, int one);

/* dir/model.safetensors read whole: its JSON header, returned, and its
 * tensor data in *data (data_len bytes, malloc'd), whose offsets the
 * header's data_offsets give. */
json_t *variant_read_safetensors(const char *dir, char **data, size_t *data_len);
/* dir/model.safetensors written anew from header and data; with pad, the
 * header's JSON is padded with spaces to a multiple of 8 bytes, as
 * safetensors' writer aligns it. */
void variant_write_safetensors(const char *dir, const json_t *header, const char *data,
                               size_t data_len, int pad);

/* bert_config_load(dir) must fail with code and a message containing want. */
void variant_expect_config_error(const char *dir, int code, const char *want);

#endif

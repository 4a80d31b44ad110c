/* model_variant.c — a throwaway copy of a model directory for a test to
 * change (model_variant.h). */
#include "model_variant.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/bert.h"

static void make_dir(char dir[VARIANT_DIR_LEN]) {
    snprintf(dir, VARIANT_DIR_LEN, "/tmp/attn-variant-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

void variant_copy(char dir[VARIANT_DIR_LEN], const char *src) {
    make_dir(dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp -r %s/. %s/", src, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The link is absolute so that it resolves from /tmp. */
void variant_link(char dir[VARIANT_DIR_LEN], const char *src, const char *const *copy) {
    make_dir(dir);
    char cwd[1024], cmd[4096];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd, "ln -s %s/%s/model.safetensors %s/", cwd, src, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    for (; *copy; copy++) {
        snprintf(cmd, sizeof cmd, "set -e; cd %s; mkdir -p \"$(dirname %s)\"; cp %s/%s/%s %s", dir,
                 *copy, cwd, src, *copy, *copy);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
    }
}

void variant_remove(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

void variant_write(const char *dir, const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

void variant_set_json(const char *dir, const char *rel, const char *key, const char *value) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    json_t *j = json_load_file(path, 0, NULL);
    cr_assert_not_null(j, "%s", path);
    if (value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
        cr_assert_not_null(v, "%s", value);
        json_object_set_new(j, key, v);
    } else {
        json_object_del(j, key);
    }
    cr_assert_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

/* dir/model.safetensors opened in mode (asserted), its path in path. */
static FILE *open_weights(const char *dir, const char *mode, char path[512]) {
    snprintf(path, 512, "%s/model.safetensors", dir);
    FILE *f = fopen(path, mode);
    cr_assert_not_null(f, "%s", path);
    return f;
}

/* The JSON header of safetensors file f (path), read from its start: its
 * byte count in *hlen, so the tensor data starts at 8 + *hlen. */
static json_t *read_header(FILE *f, const char *path, uint64_t *hlen) {
    *hlen = 0;
    cr_assert_eq(fread(hlen, 8, 1, f), 1, "%s", path);
    cr_assert_lt(*hlen, 1u << 20, "%s", path);
    char *h = calloc(*hlen + 1, 1);
    cr_assert_eq(fread(h, 1, *hlen, f), *hlen, "%s", path);
    json_t *j = json_loads(h, 0, NULL);
    cr_assert_not_null(j, "%s", path);
    free(h);
    return j;
}

json_t *variant_read_safetensors(const char *dir, char **data, size_t *data_len) {
    char path[512];
    FILE *f = open_weights(dir, "rb", path);
    uint64_t hlen;
    json_t *j = read_header(f, path, &hlen);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    const long end = ftell(f);
    cr_assert_geq(end, 8 + (long)hlen, "%s", path);
    *data_len = (size_t)(end - 8 - (long)hlen);
    *data = malloc(*data_len + 1);
    cr_assert_eq(fseek(f, 8 + (long)hlen, SEEK_SET), 0);
    cr_assert_eq(fread(*data, 1, *data_len, f), *data_len, "%s", path);
    fclose(f);
    return j;
}

void variant_write_safetensors(const char *dir, const json_t *header, const char *data,
                               size_t data_len, int pad) {
    char *text = json_dumps(header, JSON_COMPACT);
    cr_assert_not_null(text);
    size_t len = strlen(text);
    const uint64_t hlen = pad ? (len + 7) / 8 * 8 : len;
    char path[512];
    FILE *f = open_weights(dir, "wb", path);
    cr_assert_eq(fwrite(&hlen, 8, 1, f), 1);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    for (; len < hlen; len++)
        cr_assert_neq(fputc(' ', f), EOF);
    cr_assert_eq(fwrite(data, 1, data_len, f), data_len);
    cr_assert_eq(fclose(f), 0, "%s", path);
    free(text);
}

/* dir/model.safetensors opened for update at tensor name's first byte, its
 * byte count in *bytes and its dtype in dtype (16 bytes). The header's
 * data_offsets count from the end of the header. */
static FILE *open_tensor(const char *dir, const char *name, long *bytes, char *dtype) {
    char path[512];
    FILE *f = open_weights(dir, "r+b", path);
    uint64_t hlen;
    json_t *j = read_header(f, path, &hlen);
    const json_t *t = json_object_get(j, name);
    const json_t *off = json_object_get(t, "data_offsets");
    cr_assert(json_array_size(off) == 2, "%s has no %s", path, name);
    const char *dt = json_string_value(json_object_get(t, "dtype"));
    snprintf(dtype, 16, "%s", dt ? dt : "");
    const long lo = (long)json_integer_value(json_array_get(off, 0));
    *bytes = (long)json_integer_value(json_array_get(off, 1)) - lo;
    cr_assert_eq(fseek(f, 8 + (long)hlen + lo, SEEK_SET), 0);
    json_decref(j);
    return f;
}

void variant_zero_tensor(const char *dir, const char *name) {
    char dtype[16];
    long bytes = 0;
    FILE *f = open_tensor(dir, name, &bytes, dtype);
    for (long i = 0; i < bytes; i++)
        cr_assert_eq(fputc(0, f), 0);
    fclose(f);
}

void variant_fill_tensor(const char *dir, const char *name, int one) {
    char dtype[16];
    long bytes = 0;
    FILE *f = open_tensor(dir, name, &bytes, dtype);
    /* 1.0 in each dtype, little-endian; 0.0 is all zero bytes in all. */
    const unsigned char f32[4] = {0, 0, 0x80, 0x3f}, f16[2] = {0, 0x3c}, b16[2] = {0x80, 0x3f};
    const unsigned char *v = !strcmp(dtype, "F32") ? f32 : !strcmp(dtype, "F16") ? f16 : b16;
    const int width = !strcmp(dtype, "F32") ? 4 : 2;
    cr_assert(!strcmp(dtype, "F32") || !strcmp(dtype, "F16") || !strcmp(dtype, "BF16"), "%s: %s",
              name, dtype);
    for (long i = 0; i < bytes; i++)
        cr_assert_neq(fputc(one ? v[i % width] : 0, f), EOF);
    fclose(f);
}

void variant_expect_config_error(const char *dir, int code, const char *want) {
    bert_config c;
    char err[512] = "";
    const int rc = bert_config_load(dir, &c, err, sizeof err);
    cr_assert_eq(rc, code, "got %s (%s), wanted %s", bert_strerror(rc), err, bert_strerror(code));
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
}

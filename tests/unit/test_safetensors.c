/* test_safetensors.c — the safetensors reader on a well-formed file and on
 * crafted hostile ones: each must be refused with a message that names the
 * file and the problem (and, under ASan, without reading outside the map). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/safetensors.h"

static char dir[64];
static char path[128];

static void setup(void) {
    strcpy(dir, "/tmp/attn-st-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
}

static void teardown(void) {
    unlink(path);
    rmdir(dir);
}

/* Writes an 8-byte length (hlen, which may lie), the header text and
 * data_len bytes of data. */
static void write_raw(uint64_t hlen, const char *header, const void *data, size_t data_len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(hlen >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (data_len)
        fwrite(data, 1, data_len, f);
    fclose(f);
}

static void write_st(const char *header, size_t data_len) {
    uint8_t *data = calloc(1, data_len + 1);
    write_raw(strlen(header), header, data, data_len);
    free(data);
}

/* Opening must fail with code (ST_EFORMAT: read but invalid; ST_EIO: not
 * read at all) and an error containing the path and want. */
static void expect_error_code(int code, const char *want) {
    char err[512] = "";
    st_file *f = (st_file *)1;
    cr_assert_eq(st_open(path, &f, err, sizeof err), code, "accepted; wanted error '%s'", want);
    cr_assert_null(f);
    cr_assert_not_null(strstr(err, path), "error does not name the file: %s", err);
    cr_assert_not_null(strstr(err, want), "error '%s' lacks '%s'", err, want);
}

static void expect_error(const char *want) {
    expect_error_code(ST_EFORMAT, want);
}

TestSuite(safetensors, .init = setup, .fini = teardown);

Test(safetensors, reads_a_well_formed_file) {
    /* F32 [2,2] at 0..16, BF16 [3] at 16..22, I64 [1] at 24..32, an empty
     * F16 tensor, metadata, and a 2-byte hole that is allowed. */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                    "\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]},"
                    "\"e\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[32,32]}}";
    uint8_t data[32] = {0};
    const float w[4] = {1.0f, -2.0f, 3.5f, 0.25f};
    memcpy(data, w, sizeof w);
    data[17] = 0x3f; /* BF16 1.0 = 0x3f80, little-endian */
    data[16] = 0x80;
    data[24] = 7;
    write_raw(strlen(h), h, data, sizeof data);

    char err[256];
    st_file *f;
    cr_assert_eq(st_open(path, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_count(f), 4);
    cr_assert_str_eq(st_metadata(f, "format"), "pt");
    cr_assert_null(st_metadata(f, "absent"));
    cr_assert_str_eq(st_at(f, 0)->name, "w"); /* header order is kept */

    const st_tensor *t = st_find(f, "w");
    cr_assert_not_null(t);
    cr_assert_eq(t->dtype, ST_F32);
    cr_assert_eq(t->ndim, 2);
    cr_assert_eq(t->shape[0], 2);
    cr_assert_eq(t->nbytes, 16);
    float got[4];
    memcpy(got, t->data, sizeof got);
    cr_assert_eq(memcmp(got, w, sizeof w), 0);

    t = st_find(f, "b");
    cr_assert_eq(t->dtype, ST_BF16);
    cr_assert_eq(((const uint8_t *)t->data)[1], 0x3f);
    t = st_find(f, "ids");
    cr_assert_eq(t->dtype, ST_I64);
    cr_assert_eq(((const uint8_t *)t->data)[0], 7);
    t = st_find(f, "e");
    cr_assert_eq(t->nbytes, 0);
    cr_assert_null(st_find(f, "missing"));
    cr_assert_str_eq(st_dtype_name(ST_BF16), "BF16");
    cr_assert_eq(st_dtype_size(ST_F16), 2);
    st_close(f);
}

Test(safetensors, header_only_file_with_no_tensors) {
    write_st("{}", 0);
    char err[256];
    st_file *f;
    cr_assert_eq(st_open(path, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_count(f), 0);
    st_close(f);
}

Test(safetensors, missing_file) {
    expect_error_code(ST_EIO, "cannot open");
}

Test(safetensors, directory) {
    char err[256];
    st_file *f;
    cr_assert_eq(st_open(dir, &f, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "not a regular file"), "%s", err);
}

Test(safetensors, empty_file) {
    FILE *fp = fopen(path, "wb");
    fclose(fp);
    expect_error("empty file");
}

Test(safetensors, shorter_than_length_field) {
    FILE *fp = fopen(path, "wb");
    fwrite("\x10\x00\x00", 1, 3, fp);
    fclose(fp);
    expect_error("truncated");
}

Test(safetensors, header_longer_than_file) {
    write_raw(1000, "{}", NULL, 0);
    expect_error("truncated");
}

Test(safetensors, huge_header_length) {
    write_raw(UINT64_MAX, "{}", NULL, 0);
    expect_error("exceeds");
    write_raw((uint64_t)ST_MAX_HEADER_BYTES + 1, "{}", NULL, 0);
    expect_error("exceeds");
}

Test(safetensors, truncated_data) {
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12);
    expect_error("outside");
}

Test(safetensors, header_not_json) {
    write_st("{\"w\":{\"dtype\":", 0);
    expect_error("not valid JSON");
    write_st("[1,2]", 0);
    expect_error("not a JSON object");
}

Test(safetensors, header_with_nul) {
    write_raw(4, "{}", "\0 ", 2); /* the 4-byte header is "{}\0 " */
    expect_error("not valid JSON");
}

Test(safetensors, bad_dtype) {
    write_st("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4);
    expect_error("unsupported dtype F8_E4M3");
    write_st("{\"w\":{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    expect_error("unsupported dtype");
}

Test(safetensors, size_mismatch) {
    write_st("{\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 16);
    expect_error("needs 12 bytes but data_offsets span 16");
}

Test(safetensors, shape_overflow) {
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
             "\"data_offsets\":[0,0]}}",
             0);
    expect_error("too large");
}

Test(safetensors, bad_shapes) {
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0);
    expect_error("shape[0]");
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,0]}}", 0);
    expect_error("shape[0]");
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
    expect_error("at most");
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":\"4\",\"data_offsets\":[0,16]}}", 16);
    expect_error("shape must be an array");
}

Test(safetensors, offsets_out_of_range) {
    write_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[18446744073709551612,0]}}",
             8);
    expect_error("not valid JSON"); /* beyond any JSON integer jansson accepts */
    write_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", 8);
    expect_error("outside");
    write_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}", 8);
    expect_error("begin > end");
    write_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-4,0]}}", 8);
    expect_error("outside");
    write_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0]}}", 8);
    expect_error("[begin, end]");
}

Test(safetensors, overlapping_ranges) {
    write_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12);
    expect_error("overlap");
    /* The same range twice (aliases) is an overlap too. */
    write_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             8);
    expect_error("overlap");
    /* A range nested inside another, listed first. */
    write_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
             16);
    expect_error("overlap");
}

Test(safetensors, duplicate_names) {
    write_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
             "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
             4);
    expect_error("duplicate");
}

Test(safetensors, malformed_entries) {
    write_st("{\"a\":[1,2]}", 0);
    expect_error("not a JSON object");
    write_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2]}}", 2);
    expect_error("exactly the keys");
    write_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"x\":1}}", 2);
    expect_error("exactly the keys");
    write_st("{\"__metadata__\":{\"k\":1}}", 0);
    expect_error("__metadata__ value");
    write_st("{\"__metadata__\":[]}", 0);
    expect_error("__metadata__ is not");
}

/* Every single-byte truncation of a valid file must be refused cleanly. */
Test(safetensors, every_truncation_is_refused) {
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                    "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[12,16]}}";
    write_st(h, 16);
    const long full = 8 + (long)strlen(h) + 16;
    for (long len = full - 1; len >= 0; len--) {
        cr_assert_eq(truncate(path, len), 0);
        char err[256];
        st_file *f;
        cr_assert_eq(st_open(path, &f, err, sizeof err), -1, "length %ld accepted", len);
    }
}

/* st_open_memory: the same validation on a caller's buffer, which tensors
 * point into and st_close leaves alone (tests/fuzz/safetensors.c drives it). */
Test(safetensors, reads_from_memory) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    size_t hlen = strlen(h), size = 8 + hlen + 2;
    uint8_t *buf = calloc(1, size);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, h, hlen);
    buf[8 + hlen + 1] = 42;
    char err[256];
    st_file *f;
    cr_assert_eq(st_open_memory(buf, size, "mem", &f, err, sizeof err), 0, "%s", err);
    const st_tensor *t = st_find(f, "a");
    cr_assert_eq((const uint8_t *)t->data, buf + 8 + hlen);
    cr_assert_eq(((const uint8_t *)t->data)[1], 42);
    cr_assert_eq(st_file_bytes(f), size);
    st_close(f);
    cr_assert_eq(buf[8 + hlen + 1], 42, "the buffer is still the caller's");

    cr_assert_eq(st_open_memory(buf, size - 1, "mem", &f, err, sizeof err), -1);
    cr_assert_null(f);
    cr_assert_eq(strncmp(err, "mem: ", 5), 0, "%s", err);
    free(buf);
}

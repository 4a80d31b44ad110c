/* test_f32text.c — shortest float32 text and the JSON answer writer: the
 * text reads back to the same float (by strtof, and by strtod then a cast,
 * as a client that parses JSON numbers as doubles does), has no more digits
 * than the shortest "%.*e" that reads back both ways, and is a JSON number
 * that reads as a float. Every 2^16-th bit pattern, random ones and the edges here;
 * every pattern with `make float-roundtrip-all`. */
#include <criterion/criterion.h>

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/f32text.h"
#include "server/api/jwriter.h"
#include "server/work/membudget.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static size_t text_of(float v, char *s) {
    const size_t n = f32text_write(s, v);
    cr_assert(n > 0 && n <= F32TEXT_MAX);
    s[n] = '\0';
    return n;
}

/* JSON's number grammar, with a '.' or an 'e' so that it reads as a float. */
static bool json_float_text(const char *s) {
    const char *p = s;
    bool frac = false, exp = false;
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return false;
    if (*p == '.') {
        frac = true;
        if (!(*++p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e') {
        exp = true;
        if (*++p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0' && (frac || exp);
}

/* Significant digits of a decimal text (leading and trailing zeros not). */
static int sig_digits(const char *s) {
    char d[32];
    int n = 0;
    for (const char *p = s; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && (n || *p != '0'))
            d[n++] = *p;
    while (n > 1 && d[n - 1] == '0')
        n--;
    return n;
}

/* The fewest significant digits "%.*e" needs to read back to v, as a float
 * and through a double. */
static int shortest_printf(float v) {
    char s[64];
    for (int p = 0; p < 9; p++) {
        snprintf(s, sizeof s, "%.*e", p, v);
        if (strtof(s, NULL) == v && (float)strtod(s, NULL) == v)
            return p + 1;
    }
    return 9;
}

static void check(float v, bool shortest) {
    char s[F32TEXT_MAX + 1];
    text_of(v, s);
    cr_assert(json_float_text(s), "%s (%08x) is not a JSON float", s, bits_of(v));
    const float back = strtof(s, NULL), via_double = (float)strtod(s, NULL);
    cr_assert_eq(bits_of(back), bits_of(v), "%s reads back as %.9g, not %.9g", s, back, v);
    cr_assert_eq(bits_of(via_double), bits_of(v), "%s through a double is %.9g, not %.9g", s,
                 via_double, v);
    if (!shortest || v == 0)
        return;
    const int ours = sig_digits(s), theirs = shortest_printf(v);
    /* A power of two's interval is narrower below it: "%.*e" rounds to the
     * nearest, which may fall outside where a farther number above is in. */
    const bool power_of_two = (bits_of(v) & 0x7fffff) == 0;
    cr_assert(power_of_two ? ours <= theirs : ours == theirs, "%s has %d digits; %%.*e needs %d", s,
              ours, theirs);
}

Test(f32text, edges) {
    static const struct {
        float v;
        const char *text;
    } cases[] = {
        {0.0f, "0.0"},
        {-0.0f, "-0.0"},
        {1.0f, "1.0"},
        {-1.0f, "-1.0"},
        {0.5f, "0.5"},
        {0.1f, "0.1"},
        {0.05f, "0.05"},
        {0.005f, "5e-3"},
        {1e-7f, "1e-7"},
        {100.0f, "1e2"},
        {123.0f, "123.0"},
        {123456.7f, "123456.7"},
        {16777216.0f, "16777216.0"},
        {1e10f, "1e10"},
        {0.012345678f, "0.012345678"},
        {-0.00012345f, "-1.2345e-4"},
        {3.14159265f, "3.1415927"},
        {FLT_MAX, "3.4028235e38"},
        {-FLT_MAX, "-3.4028235e38"},
        {FLT_MIN, "1.1754944e-38"},
        {1.4e-45f, "1e-45"},                   /* the smallest subnormal: one digit is enough */
        {2.9e-44f, "3e-44"},                   /* a small subnormal whose shortest is a round ten */
        {9.9e-44f, "1e-43"},                   /* ...and one a power of ten */
        {FLT_MIN - 1.4e-45f, "1.1754942e-38"}, /* the largest subnormal */
        /* 7.038531e-26 reads back as a float, but as a double it is the
         * midpoint to the next float, which the cast rounds to even: one
         * digit more. */
        {7.03853069e-26f, "7.0385307e-26"},
        /* Near the midpoint too, yet not within half a double's ulp of it:
         * the shortest text stands. */
        {1.43091194e-9f, "1.430912e-9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char s[F32TEXT_MAX + 1];
        text_of(cases[i].v, s);
        cr_expect_str_eq(s, cases[i].text, "%.9g", cases[i].v);
        check(cases[i].v, true);
    }
    char s[F32TEXT_MAX + 1];
    text_of(NAN, s);
    cr_expect_str_eq(s, "null");
    text_of(-INFINITY, s);
    cr_expect_str_eq(s, "null");
}

Test(f32text, every_65536th_pattern) {
    for (uint64_t u = 0; u < (1ull << 32); u += 1u << 16) {
        const float v = from_bits((uint32_t)u + (uint32_t)(u >> 16)); /* varied low bits */
        if (isfinite(v))
            check(v, (u >> 16) % 16 == 0);
    }
}

Test(f32text, random_patterns) {
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const float v = from_bits((uint32_t)(x >> 16));
        if (isfinite(v))
            check(v, i % 20 == 0);
    }
}

/* Powers of ten and of two, their neighbours, and the subnormals' ends. */
Test(f32text, powers_and_neighbours) {
    for (int e = -45; e <= 38; e++) {
        char s[16];
        snprintf(s, sizeof s, "1e%d", e);
        const float p = strtof(s, NULL);
        if (p == 0)
            continue;
        check(p, true);
        check(nextafterf(p, 0), true);
        check(nextafterf(p, INFINITY), true);
    }
    for (int e = -149; e <= 127; e++) {
        const float p = ldexpf(1.0f, e);
        check(p, true);
        check(-p, true);
        check(nextafterf(p, 0), true);
        check(nextafterf(p, INFINITY), true);
    }
    for (uint32_t u = 1; u < 4096; u++) {
        check(from_bits(u), true);
        check(from_bits(0x00800000u - u), u % 16 == 0);
    }
}

/* ---- the writer ---------------------------------------------------------------------- */

static char *written(jwriter *w, size_t *len) {
    char *text = jw_take(w, len);
    cr_assert_not_null(text);
    return text;
}

Test(jwriter, vectors_parse_back) {
    float v[384];
    for (int i = 0; i < 384; i++)
        v[i] = (float)sin(i * 0.37) * 0.1f;
    jwriter w;
    jw_init(&w, 0);
    jw_lit(&w, "{\"k\":");
    jw_f32s(&w, v, 384);
    jw_lit(&w, ",\"e\":");
    jw_f32s(&w, v, 0);
    jw_lit(&w, ",\"n\":");
    jw_int(&w, INT64_MIN);
    jw_lit(&w, ",\"p\":");
    jw_int(&w, 1234567890123);
    jw_lit(&w, ",\"f\":");
    jw_f32(&w, -0.25f);
    jw_lit(&w, "}");
    cr_assert_not(w.nonfinite);
    size_t len;
    char *text = written(&w, &len);
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    cr_assert_not_null(root, "%s: %.80s", err.text, text);
    json_t *k = json_object_get(root, "k");
    cr_assert_eq(json_array_size(k), 384);
    for (size_t i = 0; i < 384; i++)
        cr_assert_eq((float)json_real_value(json_array_get(k, i)), v[i]);
    cr_assert_eq(json_array_size(json_object_get(root, "e")), 0);
    cr_assert_eq(json_integer_value(json_object_get(root, "n")), INT64_MIN);
    cr_assert_eq(json_integer_value(json_object_get(root, "p")), 1234567890123);
    cr_assert_eq(json_real_value(json_object_get(root, "f")), -0.25);
    json_decref(root);
    membudget_free(text);
}

Test(jwriter, nonfinite_noted) {
    jwriter w;
    jw_init(&w, 0);
    const float v[2] = {1.0f, NAN};
    jw_f32s(&w, v, 2);
    cr_assert(w.nonfinite);
    size_t len;
    char *text = written(&w, &len);
    cr_assert_eq(len, 10);
    cr_assert(memcmp(text, "[1.0,null]", len) == 0);
    membudget_free(text);
}

/* Strings come out byte for byte as jansson writes them. */
Test(jwriter, strings_as_jansson) {
    static const char *const cases[] = {
        "",       "plain", "q\"uo\\te", "ctl\n\t\r\b\f\x01\x1f end", "caf\xc3\xa9 / \xe2\x80\xa8",
        "del\x7f"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jwriter w;
        jw_init(&w, 0);
        jw_str(&w, cases[i], strlen(cases[i]));
        size_t len;
        char *text = written(&w, &len);
        json_t *s = json_string(cases[i]);
        char *want = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
        cr_assert_eq(len, strlen(want), "%s vs %s", text, want);
        cr_assert(memcmp(text, want, len) == 0, "%.*s vs %s", (int)len, text, want);
        free(want);
        json_decref(s);
        membudget_free(text);
    }
}

/* Base64 of the floats' little-endian bytes against a byte-at-a-time
 * encoder, for every length modulo three. */
Test(jwriter, base64_as_bytes) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    float v[9];
    for (int i = 0; i < 9; i++)
        v[i] = (float)i * -1.75f + 0.3f;
    for (size_t n = 0; n <= 9; n++) {
        unsigned char bytes[36];
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < 4; j++)
                bytes[4 * i + (size_t)j] = (unsigned char)(bits_of(v[i]) >> (8 * j));
        char want[64];
        size_t o = 0, nb = 4 * n;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t t = (uint32_t)bytes[i] << 16;
            if (i + 1 < nb)
                t |= (uint32_t)bytes[i + 1] << 8;
            if (i + 2 < nb)
                t |= bytes[i + 2];
            want[o++] = abc[t >> 18 & 63];
            want[o++] = abc[t >> 12 & 63];
            want[o++] = i + 1 < nb ? abc[t >> 6 & 63] : '=';
            want[o++] = i + 2 < nb ? abc[t & 63] : '=';
        }
        char got[64];
        const size_t len = jw_base64_f32(got, v, n);
        cr_assert_eq(len, o);
        cr_assert_eq(len, JW_BASE64_LEN(n));
        cr_assert(memcmp(got, want, len) == 0, "n=%zu: %.*s vs %.*s", n, (int)len, got, (int)o,
                  want);
    }
}

/* A refused growth fails the writer for good: later writes do nothing, the
 * text is never handed out, and the budget's refusal is what is left. */
static membudget small;

static void install_small(void) {
    membudget_init(&small, 64 << 10);
    membudget_install(&small);
}

Test(jwriter_budget, a_refusal_fails_the_writer, .init = install_small) {
    static float v[4096];
    membudget_enter(0);
    jwriter w;
    jw_init(&w, 0);
    jw_lit(&w, "[");
    for (int i = 0; i < 16 && !w.failed; i++)
        jw_f32s(&w, v, 4096); /* 4096 floats reserve 68 KiB: past the budget */
    cr_assert(w.failed);
    const size_t len_then = w.len;
    jw_lit(&w, "]");
    jw_int(&w, 7);
    cr_assert_eq(w.len, len_then);
    size_t len;
    cr_assert_null(jw_take(&w, &len));
    cr_assert_eq(len, 0);
    cr_assert_eq(membudget_refused(), 2); /* the writer alone needs more than the budget */
    membudget_leave();
    cr_assert_eq(membudget_used(&small), 0);
}

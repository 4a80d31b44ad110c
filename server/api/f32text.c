/* f32text.c — Schubfach for binary32: the shortest decimal in a float's
 * rounding interval, then that decimal written as compact JSON text.
 *
 * A float is c·2^q. Its rounding interval, scaled by 4 so that its ends are
 * integers, is [cbl, cbr]·2^(q-2) around cb = 4c. Scaled by 10^-k, where
 * 10^k is the interval's width rounded down to a power of ten, the interval
 * holds one or two integers s, s + 1 (and perhaps a multiple of ten, which
 * is one digit shorter): the answer is one of them times 10^k. The scaling
 * multiplies by a 64-bit upper approximation g of 10^-k and keeps the
 * integer part with a sticky bit ("round to odd"), which keeps the
 * comparisons with the interval's ends exact (the paper proves it for
 * binary32 with 63 bits of g; `make float-roundtrip-all` checks every one
 * of the 2^32 floats). An odd float's interval is narrowed a hair so that
 * the text also survives being read as a double first. */
#include "server/api/f32text.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    P = 24,              /* significand bits, the hidden one included */
    Q_MIN = -149,        /* the exponent of subnormals and of the smallest normals */
    G_K_MIN = -31,       /* g_table[i] approximates 10^(G_K_MIN + i)... */
    G_K_MAX = 45,        /* ...up to 10^G_K_MAX: -k over every float's k */
    C_MIN = 1 << (P - 1) /* the smallest normal significand */
};

/* g_table[i] = floor(10^e · 2^(63 - floor(log2 10^e))) + 1 for
 * e = G_K_MIN + i: 10^e as a 64-bit significand in [2^63, 2^64), rounded up.
 * Made with Python's integers:
 *   b = floor(log2(10^e)); g = (10^e << (63 - b)) if e >= 0 and b <= 63
 *   else (10^e >> (b - 63)) if e >= 0 else (1 << (63 - b)) // 10^-e; g + 1 */
static const uint64_t g_table[G_K_MAX - G_K_MIN + 1] = {
    0x81ceb32c4b43fcf5u, 0xa2425ff75e14fc32u, 0xcad2f7f5359a3b3fu, 0xfd87b5f28300ca0eu,
    0x9e74d1b791e07e49u, 0xc612062576589ddbu, 0xf79687aed3eec552u, 0x9abe14cd44753b53u,
    0xc16d9a0095928a28u, 0xf1c90080baf72cb2u, 0x971da05074da7befu, 0xbce5086492111aebu,
    0xec1e4a7db69561a6u, 0x9392ee8e921d5d08u, 0xb877aa3236a4b44au, 0xe69594bec44de15cu,
    0x901d7cf73ab0acdau, 0xb424dc35095cd810u, 0xe12e13424bb40e14u, 0x8cbccc096f5088ccu,
    0xafebff0bcb24aaffu, 0xdbe6fecebdedd5bfu, 0x89705f4136b4a598u, 0xabcc77118461cefdu,
    0xd6bf94d5e57a42bdu, 0x8637bd05af6c69b6u, 0xa7c5ac471b478424u, 0xd1b71758e219652cu,
    0x83126e978d4fdf3cu, 0xa3d70a3d70a3d70bu, 0xcccccccccccccccdu, 0x8000000000000001u,
    0xa000000000000001u, 0xc800000000000001u, 0xfa00000000000001u, 0x9c40000000000001u,
    0xc350000000000001u, 0xf424000000000001u, 0x9896800000000001u, 0xbebc200000000001u,
    0xee6b280000000001u, 0x9502f90000000001u, 0xba43b74000000001u, 0xe8d4a51000000001u,
    0x9184e72a00000001u, 0xb5e620f480000001u, 0xe35fa931a0000001u, 0x8e1bc9bf04000001u,
    0xb1a2bc2ec5000001u, 0xde0b6b3a76400001u, 0x8ac7230489e80001u, 0xad78ebc5ac620001u,
    0xd8d726b7177a8001u, 0x878678326eac9001u, 0xa968163f0a57b401u, 0xd3c21bcecceda101u,
    0x84595161401484a1u, 0xa56fa5b99019a5c9u, 0xcecb8f27f4200f3bu, 0x813f3978f8940985u,
    0xa18f07d736b90be6u, 0xc9f2c9cd04674edfu, 0xfc6f7c4045812297u, 0x9dc5ada82b70b59eu,
    0xc5371912364ce306u, 0xf684df56c3e01bc7u, 0x9a130b963a6c115du, 0xc097ce7bc90715b4u,
    0xf0bdc21abb48db21u, 0x96769950b50d88f5u, 0xbc143fa4e250eb32u, 0xeb194f8e1ae525feu,
    0x92efd1b8d0cf37bfu, 0xb7abc627050305aeu, 0xe596b7b0c643c71au, 0x8f7e32ce7bea5c70u,
    0xb35dbf821ae4f38cu,
};

/* floor(q·log10 2), floor(q·log10 2 + log10 3/4) and floor(e·log2 10) by
 * fixed-point multiplication: exact for |q| <= 200 (compared with exact
 * logarithms when the table was made), more than binary32's exponents. */
static int flog10_pow2(int q) {
    return (int)(((int64_t)q * 661971961083) >> 41);
}
static int flog10_three_quarters_pow2(int q) {
    return (int)(((int64_t)q * 661971961083 - 274743187321) >> 41);
}
static int flog2_pow10(int e) {
    return (int)(((int64_t)e * 913124641741) >> 38);
}

/* g·cp / 2^64: a scaled value with 31 bits of fraction. */
static uint64_t scaled(uint64_t g, uint64_t cp) {
    return (uint64_t)(((unsigned __int128)g * cp) >> 64);
}

/* The integer part of a scaled value, its lowest bit set when any fraction
 * is left: rounding to odd keeps "exactly an integer" apart from "just
 * above it". */
static uint32_t round_to_odd(uint64_t x) {
    return (uint32_t)(x >> 31) | (uint32_t)((x & 0xffffffffu) != 0);
}

/* 2^-21 of a scaled unit, in units of its fraction: more than half a
 * double's ulp at any scaled interval end (below 2^31, so an ulp is below
 * 2^-22 of a unit). */
#define NEAR_END (1u << 10)

/* The shortest decimal f·10^e in the rounding interval of c·2^q (closest to
 * it when several are that short). Returns whether c is odd and an end of
 * its interval lies within NEAR_END of an integer: then a decimal there may
 * read back as the end through a double (f32text_write checks); narrow
 * moves such an end onto that integer, excluding it. */
static bool to_decimal(int q, uint32_t c, bool narrow, uint32_t *f, int *e) {
    const uint32_t out = c & 1; /* an odd float's interval excludes its ends */
    const uint64_t cb = (uint64_t)c << 2, cbr = cb + 2;
    uint64_t cbl;
    int k;
    if (c != C_MIN || q == Q_MIN) {
        cbl = cb - 2;
        k = flog10_pow2(q);
    } else { /* a power of two: the float below is half as far */
        cbl = cb - 1;
        k = flog10_three_quarters_pow2(q);
    }
    const int h = q + flog2_pow10(-k) + 32;
    const uint64_t g = g_table[-k - G_K_MIN];
    const uint64_t xl = scaled(g, cbl << h), xr = scaled(g, cbr << h);
    const uint32_t vb = round_to_odd(scaled(g, cb << h));
    uint32_t vbl = round_to_odd(xl), vbr = round_to_odd(xr);
    const bool near_l = out && (xl & 0x7fffffffu) >= (1u << 31) - NEAR_END;
    const bool near_r = out && (xr & 0x7fffffffu) < NEAR_END;
    if (narrow && near_l)
        vbl = (uint32_t)(xl >> 31) + 1;
    if (narrow && near_r)
        vbr = (uint32_t)(xr >> 31);
    const uint32_t s = vb >> 2;
    *e = k;
    /* The interval is narrower than ten: it holds at most one multiple of
     * ten, and when it does that one is shorter than s and s + 1. */
    const uint32_t sp10 = 10 * (s / 10), tp10 = sp10 + 10;
    const bool upin = vbl + out <= sp10 << 2, wpin = (tp10 << 2) + out <= vbr;
    if (upin != wpin) {
        *f = upin ? sp10 : tp10;
        return near_l || near_r;
    }
    const uint32_t t = s + 1;
    const bool uin = vbl + out <= s << 2, win = (t << 2) + out <= vbr;
    if (uin != win) {
        *f = uin ? s : t;
        return near_l || near_r;
    }
    /* Both inside: the closer, the even one on a tie. */
    const int64_t cmp = (int64_t)vb - (int64_t)((uint64_t)(s + t) << 1);
    *f = cmp < 0 || (cmp == 0 && (s & 1) == 0) ? s : t;
    return near_l || near_r;
}

static const char digit_pairs[] = "00010203040506070809"
                                  "10111213141516171819"
                                  "20212223242526272829"
                                  "30313233343536373839"
                                  "40414243444546474849"
                                  "50515253545556575859"
                                  "60616263646566676869"
                                  "70717273747576777879"
                                  "80818283848586878889"
                                  "90919293949596979899";

/* The n decimal digits of f (n its length) at p. */
static void put_digits(char *p, uint32_t f, int n) {
    while (n >= 2) {
        memcpy(p + n - 2, digit_pairs + 2 * (f % 100), 2);
        f /= 100;
        n -= 2;
    }
    if (n)
        p[0] = (char)('0' + f);
}

static int count_digits(uint32_t f) {
    int n = 1;
    while (f >= 10) {
        f /= 10;
        n++;
    }
    return n;
}

/* f·10^e as text: plain notation unless the exponent's is shorter. */
static size_t put_decimal(char *out, uint32_t f, int e) {
    while (f % 10 == 0) { /* f > 0 here */
        f /= 10;
        e++;
    }
    const int n = count_digits(f), x = e + n - 1; /* x: the scientific exponent */
    const int ax = x < 0 ? -x : x;
    const int sci_len = n + (n > 1) + 1 + (x < 0) + (ax >= 10 ? 2 : 1);
    const int plain_len = x < 0 ? n + 1 - x : x < n - 1 ? n + 1 : x + 3;
    char *p = out;
    if (plain_len <= sci_len) {
        if (x < 0) { /* 0.000ddd */
            memset(p, '0', (size_t)(1 - x));
            p[1] = '.';
            put_digits(p + 1 - x, f, n);
        } else if (x < n - 1) { /* dd.ddd */
            put_digits(p + 1, f, n);
            memmove(p, p + 1, (size_t)x + 1);
            p[x + 1] = '.';
        } else { /* ddd00.0 */
            put_digits(p, f, n);
            memset(p + n, '0', (size_t)(x - n + 1));
            memcpy(p + x + 1, ".0", 2);
        }
        return (size_t)plain_len;
    }
    put_digits(p + 1, f, n); /* d.ddde-x */
    p[0] = p[1];
    if (n > 1)
        p[1] = '.';
    p += n + (n > 1);
    *p++ = 'e';
    if (x < 0)
        *p++ = '-';
    if (ax >= 10) {
        memcpy(p, digit_pairs + 2 * ax, 2);
        p += 2;
    } else {
        *p++ = (char)('0' + ax);
    }
    return (size_t)(p - out);
}

/* Whether text[0, n) read as a double and cast to float is v. Only texts
 * near an end of an odd float's interval get here: one float in about a
 * million. */
static bool reads_back_through_double(const char *text, size_t n, float v) {
    char s[F32TEXT_MAX + 1];
    memcpy(s, text, n);
    s[n] = '\0';
    return (float)strtod(s, NULL) == v;
}

size_t f32text_write(char *out, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    const uint32_t t = bits & ((1u << (P - 1)) - 1);
    const int bq = (int)(bits >> (P - 1) & 0xff);
    if (bq == 0xff) {
        memcpy(out, "null", 4);
        return 4;
    }
    char *p = out;
    if (bits >> 31)
        *p++ = '-';
    if (bq == 0 && t == 0) {
        memcpy(p, "0.0", 3);
        return (size_t)(p - out) + 3;
    }
    const int mq = -Q_MIN + 1 - bq; /* a normal float is c·2^-mq */
    const uint32_t c = bq ? C_MIN | t : t;
    const int q = bq ? -mq : Q_MIN;
    if (bq && mq > 0 && mq < P && (c >> mq) << mq == c) /* an integer below 2^24: exact */
        return (size_t)(p - out) + put_decimal(p, c >> mq, 0);
    uint32_t f;
    int e;
    const bool near = to_decimal(q, c, false, &f, &e);
    size_t n = put_decimal(p, f, e);
    if (near && !reads_back_through_double(out, (size_t)(p - out) + n, v)) {
        to_decimal(q, c, true, &f, &e);
        n = put_decimal(p, f, e);
    }
    return (size_t)(p - out) + n;
}

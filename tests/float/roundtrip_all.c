/* roundtrip_all.c — f32text_write on every one of the 2^32 float32 bit
 * patterns: the text of each finite float reads back to it (strtof, and
 * strtod then a cast), no decimal with one digit fewer does (the two
 * neighbours of its digits cut by one are checked, read both ways), and a negative float's
 * text is its magnitude's with a '-'. Every core takes a share; the time is
 * printed. `make float-roundtrip-all`; minutes, so not part of `make test`. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/api/f32text.h"

typedef struct share {
    uint32_t from, to; /* positive patterns [from, to) */
    uint64_t checked, failed;
} share;

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static bool same(float a, float b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Whether s reads as v both ways a client may read it: as a float, and as
 * a double then cast to float. */
static bool reads_back(const char *s, float v) {
    return same(strtof(s, NULL), v) && same((float)strtod(s, NULL), v);
}

/* digits·10^exp as text, for strtof (snprintf would double the run's time). */
static void decimal(char *s, uint64_t digits, int exp) {
    char tmp[48];
    int i = sizeof tmp;
    tmp[--i] = '\0';
    const unsigned ax = (unsigned)(exp < 0 ? -exp : exp);
    for (unsigned x = ax;; x /= 10) {
        tmp[--i] = (char)('0' + x % 10);
        if (x < 10)
            break;
    }
    if (exp < 0)
        tmp[--i] = '-';
    tmp[--i] = 'e';
    do {
        tmp[--i] = (char)('0' + digits % 10);
        digits /= 10;
    } while (digits);
    memcpy(s, tmp + i, sizeof tmp - (size_t)i);
}

/* Whether a decimal with fewer significant digits than text (a positive
 * float's) reads back as v both ways: only the two next to text's digits
 * cut by one can. */
static bool shorter_exists(const char *text, float v) {
    uint64_t digits = 0;
    int n = 0, before_point = -1, exp = 0;
    const char *p = text;
    for (; *p && *p != 'e'; p++) {
        if (*p == '.') {
            before_point = n;
        } else if (n || *p != '0') { /* leading zeros count for nothing */
            digits = digits * 10 + (uint64_t)(*p - '0');
            n++;
        } else if (before_point >= 0) {
            exp--; /* a zero after the point: one place further down */
        }
    }
    if (n == 0) /* zero */
        return false;
    if (*p == 'e')
        exp += atoi(p + 1);
    /* value = digits · 10^scale */
    int scale = exp - (before_point < 0 ? 0 : n - before_point);
    while (digits % 10 == 0) {
        digits /= 10;
        scale++;
        n--;
    }
    if (n < 2)
        return false;
    char s[48];
    decimal(s, digits / 10, scale + 1);
    if (reads_back(s, v))
        return true;
    decimal(s, digits / 10 + 1, scale + 1);
    return reads_back(s, v);
}

static void *run(void *arg) {
    share *sh = arg;
    char pos[F32TEXT_MAX + 1], neg[F32TEXT_MAX + 1];
    for (uint64_t u = sh->from; u < sh->to; u++) {
        const float v = from_bits((uint32_t)u);
        const size_t n = f32text_write(pos, v), m = f32text_write(neg, -v);
        pos[n] = neg[m] = '\0';
        bool ok;
        if (!isfinite(v))
            ok = strcmp(pos, "null") == 0 && strcmp(neg, "null") == 0;
        else
            ok = neg[0] == '-' && strcmp(neg + 1, pos) == 0 && reads_back(pos, v) &&
                 !shorter_exists(pos, v);
        sh->checked += 2;
        if (!ok && sh->failed++ < 10)
            fprintf(stderr, "FAIL %08x: %s / %s (%.9g)\n", (unsigned)u, pos, neg, v);
    }
    return NULL;
}

int main(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int nt = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    share shares[64];
    pthread_t threads[64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Interleaved slices, so that the costly patterns (long texts) spread. */
    const uint32_t slices = 1024, step = (1u << 31) / slices;
    for (int t = 0; t < nt; t++)
        shares[t] = (share){0};
    uint64_t checked = 0, failed = 0;
    for (uint32_t s0 = 0; s0 < slices; s0 += (uint32_t)nt) {
        int started = 0;
        for (int t = 0; t < nt && s0 + (uint32_t)t < slices; t++, started++) {
            shares[t].from = (s0 + (uint32_t)t) * step;
            shares[t].to = shares[t].from + step;
            pthread_create(&threads[t], NULL, run, &shares[t]);
        }
        for (int t = 0; t < started; t++)
            pthread_join(threads[t], NULL);
        if ((s0 / (uint32_t)nt) % 64 == 0)
            fprintf(stderr, "\r%3u%%", 100 * s0 / slices);
    }
    for (int t = 0; t < nt; t++) {
        checked += shares[t].checked;
        failed += shares[t].failed;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr, "\r");
    printf("float-roundtrip-all: %llu patterns, %llu failed, %.0f s on %d threads\n",
           (unsigned long long)checked, (unsigned long long)failed, s, nt);
    return failed ? 1 : 0;
}

/* test_verify.c — shadow verification (server/ops/verify.c): sampling, the rows
 * a check compares, the mismatch window, and the verifier end to end on real
 * backends' output (clean, corrupted everywhere, corrupted on one row,
 * strided as the model lays out Q/K/V, a busy checker). No timed
 * assertions: waits are for the checker thread to finish, with a generous
 * limit that only a hang would reach. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "server/ops/metrics.h"
#include "server/ops/verify.h"
#include "tests/unit/attn_ref.h"

#define WAIT_MS 60000

/* ---- sampling ------------------------------------------------------------------ */

static int draws(double rate, int n, uint64_t seed) {
    verify_rng r;
    verify_rng_seed(&r, seed);
    int hits = 0;
    for (int i = 0; i < n; i++)
        hits += verify_draw(&r, rate);
    return hits;
}

Test(verify, sampling_rate_zero_and_one_are_exact) {
    cr_assert_eq(draws(0.0, 100000, 1), 0);
    cr_assert_eq(draws(1.0, 100000, 2), 100000);
}

Test(verify, sampling_follows_the_rate) {
    /* Binomial(100000, p): the seeds are fixed, so this is deterministic;
     * the bounds are 5 standard deviations, so any sound generator passes. */
    const double rates[] = {0.001, 0.01, 0.3};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        const double n = 100000, p = rates[i], mean = n * p, sd = sqrt(n * p * (1 - p));
        const int hits = draws(p, (int)n, 10 + i);
        cr_assert(hits > mean - 5 * sd && hits < mean + 5 * sd, "rate %g: %d hits, expected %g", p,
                  hits, mean);
    }
}

/* ---- rows ------------------------------------------------------------------------ */

Test(verify, rows_cover_every_edge_when_there_is_room) {
    const int32_t cu[] = {0, 1, 5, 40, 41, 100};
    verify_rng r;
    verify_rng_seed(&r, 3);
    int32_t rows[16];
    for (int rep = 0; rep < 50; rep++) {
        const int32_t n = verify_pick_rows(&r, cu, 5, 16, rows);
        cr_assert(n >= 8 && n <= 16, "n = %d", n); /* 8 distinct edges: seqs 0, 3 have one token */
        for (int32_t i = 1; i < n; i++)
            cr_assert_lt(rows[i - 1], rows[i], "sorted and distinct");
        const int32_t edges[] = {0, 1, 4, 5, 39, 40, 41, 99};
        for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
            bool found = false;
            for (int32_t i = 0; i < n; i++)
                found = found || rows[i] == edges[e];
            cr_assert(found, "edge row %d missing", edges[e]);
        }
        cr_assert(rows[0] >= 0 && rows[n - 1] < 100);
    }
}

Test(verify, rows_stay_within_max_rows_and_rotate_over_sequences) {
    int32_t cu[65];
    for (int b = 0; b <= 64; b++)
        cu[b] = 10 * b;
    verify_rng r;
    verify_rng_seed(&r, 4);
    int32_t rows[4];
    bool edge_seen[64] = {false};
    int interior = 0;
    for (int rep = 0; rep < 400; rep++) {
        const int32_t n = verify_pick_rows(&r, cu, 64, 4, rows);
        cr_assert(n >= 2 && n <= 4, "n = %d", n); /* random rows may repeat an edge */
        /* Half the quota: one sequence's first and last rows. */
        int edges_here = 0;
        for (int32_t i = 0; i < n; i++) {
            cr_assert(rows[i] >= 0 && rows[i] < 640);
            if (rows[i] % 10 == 0 || rows[i] % 10 == 9) {
                edge_seen[rows[i] / 10] = true;
                edges_here++;
            } else {
                interior++;
            }
        }
        cr_assert_geq(edges_here, 2, "the edge half is missing");
    }
    for (int b = 0; b < 64; b++)
        cr_assert(edge_seen[b], "sequence %d's edges never checked in 400 batches", b);
    /* The other half reaches inside the sequences: 8 of every 10 tokens are
     * interior, so ~640 of the 800 random draws should be. */
    cr_assert_gt(interior, 400, "only %d interior rows in 400 batches", interior);
}

/* Many sequences and a small quota, the common case under load: the edges
 * alone would use every row; half go inside the sequences. */
Test(verify, rows_reach_inside_sequences_of_a_full_batch) {
    int32_t cu[65];
    for (int b = 0; b <= 64; b++)
        cu[b] = 384 * b;
    verify_rng r;
    verify_rng_seed(&r, 6);
    int32_t rows[16];
    int interior = 0, total = 0;
    for (int rep = 0; rep < 100; rep++) {
        const int32_t n = verify_pick_rows(&r, cu, 64, 16, rows);
        cr_assert(n >= 8 && n <= 16, "n = %d", n);
        for (int32_t i = 0; i < n; i++, total++)
            interior += rows[i] % 384 != 0 && rows[i] % 384 != 383;
    }
    cr_assert_gt(interior, total / 3, "%d of %d rows interior", interior, total);
}

Test(verify, rows_add_random_ones_of_the_checked_sequences) {
    const int32_t cu[] = {0, 300};
    verify_rng r;
    verify_rng_seed(&r, 5);
    int32_t rows[16];
    const int32_t n = verify_pick_rows(&r, cu, 1, 16, rows);
    cr_assert(n > 8, "only %d rows of a 300-token sequence", n); /* repeats are dropped */
    cr_assert_eq(rows[0], 0);
    cr_assert_eq(rows[n - 1], 299);
}

/* ---- window ----------------------------------------------------------------------- */

#define S 1000000000ull

Test(verify, window_trips_at_threshold_within_the_window) {
    verify_window w;
    verify_window_init(&w, 3, 10 * S);
    cr_assert_not(verify_window_add(&w, 0));
    cr_assert_not(verify_window_add(&w, 1 * S));
    cr_assert(verify_window_add(&w, 2 * S));
}

Test(verify, window_forgets_old_mismatches) {
    verify_window w;
    verify_window_init(&w, 3, 10 * S);
    cr_assert_not(verify_window_add(&w, 0));
    cr_assert_not(verify_window_add(&w, 20 * S));
    cr_assert_not(verify_window_add(&w, 40 * S)); /* three, but 40 s apart */
    cr_assert_not(verify_window_add(&w, 45 * S)); /* 20, 40, 45: 25 s */
    cr_assert(verify_window_add(&w, 48 * S));     /* 40, 45, 48: 8 s */
    cr_assert(verify_window_add(&w, 50 * S));     /* 45, 48, 50 */
    cr_assert_not(verify_window_add(&w, 60 * S)); /* 48, 50, 60: 12 s */
}

Test(verify, window_threshold_one_trips_at_once) {
    verify_window w;
    verify_window_init(&w, 1, 1 * S);
    cr_assert(verify_window_add(&w, 5 * S));
}

/* ---- the verifier on real backends' output ------------------------------------------ */

typedef struct trip_log {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int trips;
    verify_evidence last;
    bool block;   /* the callback waits until released */
    bool entered; /* it is waiting */
    bool result;  /* what it returns */
} trip_log;

static bool on_trip(const verify_evidence *ev, void *ctx) {
    trip_log *t = ctx;
    pthread_mutex_lock(&t->mu);
    t->trips++;
    t->last = *ev;
    t->entered = true;
    pthread_cond_broadcast(&t->cv);
    while (t->block)
        pthread_cond_wait(&t->cv, &t->mu);
    const bool r = t->result;
    pthread_mutex_unlock(&t->mu);
    return r;
}

static trip_log *trip_log_new(void) {
    trip_log *t = calloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->result = true;
    return t;
}

static verifier *make_verifier(trip_log *t, int32_t threshold) {
    verify_options o = {.max_tokens = 512,
                        .max_row_floats = 8 * 64,
                        .max_kv_floats = 512 * 8 * 64,
                        .max_seqs = 16,
                        .max_seqlen = 512,
                        .max_head_dim = 64,
                        .max_rows = 16,
                        .sample_rate = 1.0,
                        .mismatch_threshold = threshold,
                        .window_s = 3600,
                        .seed = 42,
                        .trip = on_trip,
                        .trip_ctx = t};
    char err[256];
    verifier *v = verify_create(&o, err, sizeof err);
    cr_assert_not_null(v, "%s", err);
    return v;
}

/* A random batch (B sequences, H heads of D) computed by backend `name`,
 * with Q, K, V interleaved as the model's fused projection lays them out
 * when strided (token stride 3·H·D). */
typedef struct batch {
    attn_problem p;
    int32_t cu[17];
    float *qkv, *out;
    void *ws;
    size_t ws_bytes;
} batch;

static void make_batch(batch *bt, const char *name, int32_t B, int H, int D, bool strided,
                       int causal, uint64_t seed) {
    test_rng r = {seed};
    bt->cu[0] = 0;
    for (int32_t b = 0; b < B; b++)
        bt->cu[b + 1] = bt->cu[b] + rng_int(&r, 1, 60);
    const int32_t T = bt->cu[B];
    int32_t max_len = 0;
    for (int32_t b = 0; b < B; b++)
        max_len = bt->cu[b + 1] - bt->cu[b] > max_len ? bt->cu[b + 1] - bt->cu[b] : max_len;
    const size_t row = (size_t)H * D;
    bt->qkv = malloc((size_t)T * 3 * row * sizeof(float));
    bt->out = malloc((size_t)T * row * sizeof(float));
    for (size_t i = 0; i < (size_t)T * 3 * row; i++)
        bt->qkv[i] = rng_normal(&r);
    attn_shape s = {.batch = B,
                    .total_tokens = T,
                    .max_seqlen = max_len,
                    .heads = H,
                    .head_dim = D,
                    .causal = causal};
    if (strided) {
        attn_problem_dense(&bt->p, s, bt->cu, bt->qkv, bt->qkv + row, bt->qkv + 2 * row, bt->out);
        bt->p.q_stride = bt->p.k_stride = bt->p.v_stride = 3 * row;
    } else {
        attn_problem_dense(&bt->p, s, bt->cu, bt->qkv, bt->qkv + (size_t)T * row,
                           bt->qkv + 2 * (size_t)T * row, bt->out);
    }
    const attn_backend *be = attn_backend_find(name);
    cr_assert_not_null(be);
    bt->ws_bytes = be->workspace_size(&s, 1);
    bt->ws = bt->ws_bytes ? aligned_alloc(64, (bt->ws_bytes + 63) / 64 * 64) : NULL;
    cr_assert_eq(be->forward(&bt->p, bt->ws, bt->ws_bytes, &attn_parallel_serial), ATTN_OK);
}

static void free_batch(batch *bt) {
    free(bt->qkv);
    free(bt->out);
    free(bt->ws);
}

static void counts(verifier *v, uint64_t *c, uint64_t *m, uint64_t *s) {
    cr_assert(verify_wait_idle(v, WAIT_MS), "checker did not finish");
    verify_counts(v, c, m, s);
}

Test(verify, clean_output_of_every_backend_passes) {
    trip_log *t = trip_log_new();
    verifier *v = make_verifier(t, 1);
    const char *names[] = {"naive", "fused"};
    int checks = 0;
    for (int n = 0; n < 2; n++)
        for (int strided = 0; strided < 2; strided++)
            for (int causal = 0; causal < 2; causal++) {
                batch bt;
                make_batch(&bt, names[n], 5, 4, 32, strided, causal, 100 + checks);
                cr_assert(verify_capture(v, &bt.p, attn_backend_find(names[n]), 2, 7));
                checks++;
                uint64_t c, m, s;
                counts(v, &c, &m, &s);
                cr_assert_eq(c, (uint64_t)checks);
                cr_assert_eq(m, 0, "%s strided=%d causal=%d: mismatch on clean output", names[n],
                             strided, causal);
                free_batch(&bt);
            }
    cr_assert_eq(t->trips, 0);
    verify_destroy(v);
    free(t);
}

/* Shadow verification holds each backend to the bound of its precision:
 * bf16's clean output passes by the bf16 bound, and the same output passed
 * off as a float32 backend's is a mismatch. */
Test(verify, bf16_is_checked_by_its_own_bound) {
    const attn_backend *b = attn_backend_find("bf16");
    cr_assert_not_null(b);
    const attn_shape s = {
        .batch = 1, .total_tokens = 8, .max_seqlen = 8, .heads = 4, .head_dim = 32};
    if (b->supports(&s, NULL, 0) != ATTN_OK) {
        cr_skip_test("NOT RUN: this CPU has no AVX512_BF16, the bf16 backend is not offered");
    }
    trip_log *t = trip_log_new();
    verifier *v = make_verifier(t, 100);
    uint64_t c, m, sk;
    batch bt;
    make_batch(&bt, "bf16", 5, 4, 32, true, 1, 700);
    cr_assert(verify_capture(v, &bt.p, b, 0, 1));
    counts(v, &c, &m, &sk);
    cr_assert_eq(c, 1);
    cr_assert_eq(m, 0, "bf16 output mismatched its own bound");
    cr_assert(verify_capture(v, &bt.p, attn_backend_find("fused"), 0, 2));
    counts(v, &c, &m, &sk);
    cr_assert_eq(c, 2);
    cr_assert_eq(m, 1, "bf16 output passed the float32 bound");
    free_batch(&bt);
    verify_destroy(v);
    free(t);
}

/* Every time the threshold is reached within the window the callback runs;
 * a switch (the callback returns true) starts the window again, so a
 * fallback that is wrong too is switched away from in turn. */
Test(verify, corrupted_output_trips_at_each_threshold_and_the_window_restarts) {
    trip_log *t = trip_log_new();
    verifier *v = make_verifier(t, 2);
    const attn_backend *naive = attn_backend_find("naive");
    for (int i = 0; i < 6; i++) {
        batch bt;
        make_batch(&bt, "naive", 3, 2, 16, true, 0, 200 + i);
        bt.out[5] += 1.0f; /* one element of token 0 */
        cr_assert(verify_capture(v, &bt.p, naive, 1, 10 + i));
        uint64_t c, m, s;
        counts(v, &c, &m, &s);
        cr_assert_eq(m, (uint64_t)i + 1);
        free_batch(&bt);
        if (i == 3)
            verify_rearm(v);
        /* Threshold 2: trips at the 2nd and 4th mismatch (the window restarts
         * after each switch), then, after the re-arm, at the 6th. */
        const int want[6] = {0, 1, 1, 2, 2, 3};
        cr_assert_eq(t->trips, want[i], "after mismatch %d: %d trips", i + 1, t->trips);
    }
    cr_assert(verify_tripped(v));
    cr_assert_eq(t->last.backend, naive);
    cr_assert_eq(t->last.layer, 1);
    cr_assert_eq(t->last.check.bad_token, 0, "evidence names the batch's token");
    cr_assert_eq(t->last.check.bad_head, 0);
    cr_assert_eq(t->last.check.bad_dim, 5);
    cr_assert_gt(t->last.check.max_ratio, 1.0);
    verify_destroy(v);
    free(t);
}

Test(verify, a_trip_the_callback_declines_keeps_it_armed) {
    trip_log *t = trip_log_new();
    t->result = false;
    verifier *v = make_verifier(t, 1);
    for (int i = 0; i < 3; i++) {
        batch bt;
        make_batch(&bt, "naive", 2, 2, 8, false, 0, 300 + i);
        bt.out[0] = 1e30f;
        cr_assert(verify_capture(v, &bt.p, attn_backend_find("naive"), -1, 1));
        uint64_t c, m, s;
        counts(v, &c, &m, &s);
        free_batch(&bt);
    }
    cr_assert_eq(t->trips, 3);
    cr_assert_not(verify_tripped(v));
    verify_destroy(v);
    free(t);
}

Test(verify, only_the_last_token_wrong_is_caught) {
    /* As a kernel with a bad remainder loop would be: each sequence's last
     * row only, in a batch whose sequences outnumber what max_rows covers
     * in full; over a few batches the edges rotate in. */
    trip_log *t = trip_log_new();
    verifier *v = make_verifier(t, 1);
    batch bt;
    make_batch(&bt, "fused", 16, 4, 32, true, 0, 400);
    const size_t row = 4 * 32;
    for (int32_t b = 0; b < 16; b++)
        bt.out[(size_t)(bt.cu[b + 1] - 1) * row + 3] += 0.01f;
    cr_assert(verify_capture(v, &bt.p, attn_backend_find("fused"), 0, 1));
    uint64_t c, m, s;
    counts(v, &c, &m, &s);
    cr_assert_eq(m, 1);
    cr_assert_eq(t->trips, 1);
    const int32_t tok = t->last.check.bad_token;
    const int32_t seq = t->last.check.bad_seq;
    cr_assert_eq(tok, bt.cu[seq + 1] - 1, "token %d is not sequence %d's last", tok, seq);
    free_batch(&bt);
    verify_destroy(v);
    free(t);
}

Test(verify, a_busy_checker_skips_and_counts) {
    trip_log *t = trip_log_new();
    t->block = true;
    verifier *v = make_verifier(t, 1);
    batch bt;
    make_batch(&bt, "naive", 2, 2, 8, false, 0, 500);
    bt.out[0] += 5.0f;
    cr_assert(verify_capture(v, &bt.p, attn_backend_find("naive"), 0, 1));
    pthread_mutex_lock(&t->mu);
    while (!t->entered)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    /* The checker is inside the callback: the slot is not free. */
    cr_assert_not(verify_capture(v, &bt.p, attn_backend_find("naive"), 0, 2));
    cr_assert_not(verify_capture(v, &bt.p, attn_backend_find("naive"), 0, 3));
    pthread_mutex_lock(&t->mu);
    t->block = false;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    uint64_t c, m, s;
    counts(v, &c, &m, &s);
    cr_assert_eq(c, 1);
    cr_assert_eq(s, 2);
    free_batch(&bt);
    verify_destroy(v);
    free(t);
}

Test(verify, a_problem_larger_than_the_slot_is_skipped) {
    trip_log *t = trip_log_new();
    verifier *v = make_verifier(t, 1);
    batch bt;
    make_batch(&bt, "naive", 2, 16, 64, false, 0, 600); /* 1024 floats a row > 512 */
    cr_assert_not(verify_capture(v, &bt.p, attn_backend_find("naive"), 0, 1));
    uint64_t c, m, s;
    counts(v, &c, &m, &s);
    cr_assert_eq(c, 0);
    cr_assert_eq(s, 1);
    free_batch(&bt);
    verify_destroy(v);
    free(t);
}

/* ---- GFLOP/s ------------------------------------------------------------------------- */

Test(verify, kernel_flops_per_second_is_flops_over_kernel_seconds) {
    const attn_backend *naive = attn_backend_find("naive");
    metrics_kernel(naive, 0.5, 1e9);
    metrics_kernel(naive, 0.5, 3e9);
    size_t len = 0;
    char *text = metrics_render(&len);
    cr_assert_not_null(
        strstr(text, "attnserve_attention_kernel_flops_per_second{backend=\"naive\"} 4e+09\n"),
        "%s", strstr(text, "attnserve_attention_kernel_flops_per_second"));
    /* A backend that ran nothing has no value rather than a misleading 0. */
    cr_assert_null(strstr(text, "attnserve_attention_kernel_flops_per_second{backend=\"fused\"}"));
    free(text);
}

/* verify.c — the capture slot, the checker thread, sampling and the
 * mismatch window (see verify.h for what is checked and why).
 *
 * The slot is a tiny state machine under one mutex: FREE (the compute
 * thread may fill it), FULL (filled, the checker has not started), BUSY
 * (the checker is working on it). The compute thread only ever trylocks,
 * so a slow check never delays a batch: a capture that finds the lock held
 * or the slot not FREE is a skip. */
#include "server/ops/verify.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "server/ops/log.h"
#include "server/ops/metrics.h"
#include "server/work/ticks.h"

/* ---- random numbers ---------------------------------------------------------------- */

void verify_rng_seed(verify_rng *r, uint64_t seed) {
    /* xorshift must not start at 0; splitmix the seed so nearby seeds differ. */
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    r->s = (z ^ (z >> 31)) | 1;
}

uint64_t verify_rng_next(verify_rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

double verify_rng_unit(verify_rng *r) {
    return (double)(verify_rng_next(r) >> 11) * 0x1.0p-53;
}

bool verify_draw(verify_rng *r, double rate) {
    if (!(rate > 0.0))
        return false;
    if (rate >= 1.0)
        return true;
    return verify_rng_unit(r) < rate;
}

static int32_t rng_below(verify_rng *r, int32_t n) {
    return n > 0 ? (int32_t)(verify_rng_next(r) % (uint64_t)n) : 0;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts rows[0..n) and drops repeats; returns the new count. */
static int32_t sort_unique(int32_t *rows, int32_t n) {
    qsort(rows, (size_t)n, sizeof *rows, cmp_i32);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (m == 0 || rows[m - 1] != rows[i])
            rows[m++] = rows[i];
    return m;
}

int32_t verify_pick_rows(verify_rng *r, const int32_t *cu, int32_t batch, int32_t max_rows,
                         int32_t *rows) {
    if (batch < 1 || max_rows < 1 || cu[batch] <= 0)
        return 0;
    int32_t n = 0;
    /* Half the rows (rounded up) are edges — each sequence's first and last
     * token, where kernels' remainder handling lives — from a random
     * sequence on, so over many batches every sequence gets its turn. */
    const int32_t edge_quota = max_rows - max_rows / 2;
    const int32_t first = rng_below(r, batch);
    for (int32_t i = 0; i < batch && n < edge_quota; i++) {
        const int32_t b = (first + i) % batch, lo = cu[b], hi = cu[b + 1];
        if (hi <= lo)
            continue;
        rows[n++] = lo;
        if (hi - 1 != lo && n < max_rows)
            rows[n++] = hi - 1;
    }
    /* The rest are tokens drawn uniformly from the whole batch: interior
     * rows (inner tile boundaries, long-range keys) that edges alone never
     * reach once a batch holds more sequences than the edge quota covers.
     * Their sequences' K and V are captured too; the slot is sized for
     * max_rows sequences. */
    const int32_t total = cu[batch];
    while (n < max_rows)
        rows[n++] = rng_below(r, total);
    return sort_unique(rows, n);
}

/* ---- the window ------------------------------------------------------------------- */

void verify_window_init(verify_window *w, int32_t threshold, uint64_t window_ns) {
    memset(w, 0, sizeof *w);
    if (threshold < 1)
        threshold = 1;
    if (threshold > VERIFY_MAX_THRESHOLD)
        threshold = VERIFY_MAX_THRESHOLD;
    w->threshold = threshold;
    w->window_ns = window_ns;
}

bool verify_window_add(verify_window *w, uint64_t now_ns) {
    /* The ring holds the last `threshold` mismatch times; the oldest of them
     * is at head once it is full. Threshold within the window means that
     * oldest one is no more than window_ns before now. */
    w->at[w->head] = now_ns;
    w->head = (w->head + 1) % w->threshold;
    if (w->n < w->threshold)
        w->n++;
    if (w->n < w->threshold)
        return false;
    const uint64_t oldest = w->at[w->head];
    return now_ns - oldest <= w->window_ns;
}

/* ---- the verifier ----------------------------------------------------------------- */

enum { SLOT_FREE, SLOT_FULL, SLOT_BUSY };

struct verifier {
    verify_options opt;
    pthread_t thread;
    bool started;
    bool waiting; /* the checker has reached its first wait (under mu) */

    pthread_mutex_t mu;
    pthread_cond_t cv;      /* checker: slot FULL or stopping */
    pthread_cond_t idle_cv; /* verify_wait_idle: slot FREE; verify_create: waiting */
    int state;
    bool stopping;

    /* Compute thread only. */
    verify_rng rng;
    int32_t *pick; /* (max_rows) rows picked in the caller's numbering */

    /* The slot: written by the compute thread in FREE, read by the checker
     * in BUSY. The captured problem is dense and renumbered: only the
     * sequences holding checked rows, back to back. */
    attn_shape shape;
    float scale;
    const attn_backend *backend;
    int layer;
    uint64_t batch_id;
    int32_t nrows;
    int32_t *rows;  /* (max_rows) global token indices in the captured numbering */
    int32_t *orig;  /* (max_rows) the same rows in the batch's numbering, for messages */
    int32_t *cu;    /* (max_seqs + 1) */
    int32_t *seqs;  /* (max_seqs) each captured sequence's index in the batch */
    float *k, *v;   /* (max_kv_floats) each */
    float *q, *out; /* (max_rows * max_row_floats) each: the checked rows only */
    float *bias;    /* (max_bias_floats) the relative position bias, when the problem has one */
    int32_t rel_span;
    double *scratch;
    size_t bytes;

    /* Settings (any thread) and results. */
    _Atomic double rate;
    _Atomic int32_t threshold;
    _Atomic int64_t window_s;
    _Atomic bool rearm;
    _Atomic bool tripped;
    _Atomic uint64_t checked, mismatched, skipped;
    _Atomic uint64_t check_cpu_ns;
    verify_window window;               /* checker thread only */
    const attn_backend *window_backend; /* whose mismatches window counts; checker only */
};

/* A check of the slot's problem; returns what it found. */
static void check_slot(verifier *v, verify_evidence *ev) {
    memset(ev, 0, sizeof *ev);
    ev->backend = v->backend;
    ev->layer = v->layer;
    ev->batch_id = v->batch_id;
    ev->shape = v->shape;
    ev->rows = v->nrows;
    const size_t row = (size_t)v->shape.heads * (size_t)v->shape.head_dim;
    const size_t kv_row = (size_t)attn_kv_heads(&v->shape) * (size_t)v->shape.head_dim;
    /* Q and the output hold only the checked rows: each row is checked as a
     * problem whose token stride is 0, so row t of it reads the one
     * captured row, while K and V are the whole captured sequences. */
    attn_problem p = {.shape = v->shape,
                      .cu_seqlens = v->cu,
                      .k = v->k,
                      .v = v->v,
                      .k_stride = kv_row,
                      .v_stride = kv_row,
                      .q_stride = 0,
                      .out_stride = 0,
                      .scale = v->scale,
                      .rel_bias = v->shape.rel_bias ? v->bias : NULL,
                      .rel_span = v->rel_span};
    int32_t worst_row = 0;
    for (int32_t i = 0; i < v->nrows; i++) {
        p.q = v->q + (size_t)i * row;
        p.out = v->out + (size_t)i * row;
        const int64_t before = ev->check.bad;
        const double worst = ev->check.max_ratio;
        attn_check_rows_as(&p, v->backend->precision, &v->rows[i], 1, v->scratch, &ev->check);
        worst_row =
            ev->check.bad > before && (before == 0 || ev->check.max_ratio > worst) ? i : worst_row;
    }
    /* Messages name the element as the batch numbered it. */
    if (ev->check.bad > 0) {
        int32_t b = 0;
        while (b + 1 < v->shape.batch && v->cu[b + 1] <= v->rows[worst_row])
            b++;
        ev->check.bad_token = v->orig[worst_row];
        ev->check.bad_seq = v->seqs[b];
    }
}

static void report(verifier *v, verify_evidence *ev) {
    const attn_check *c = &ev->check;
    const double mean = c->elements ? c->sum_abs_err / (double)c->elements : 0.0;
    const bool bad = c->bad > 0;
    atomic_fetch_add(&v->checked, 1);
    metrics_verify(ev->backend, bad, c->max_ratio, mean);
    /* The window counts one backend's mismatches: a reload re-arms it, and
     * so does a check of another backend (the one switched to, or a stale
     * capture of the one switched from). */
    if (atomic_exchange(&v->rearm, false) || ev->backend != v->window_backend) {
        verify_window_init(&v->window, atomic_load(&v->threshold),
                           (uint64_t)atomic_load(&v->window_s) * 1000000000u);
        v->window_backend = ev->backend;
    }
    if (!bad)
        return;
    atomic_fetch_add(&v->mismatched, 1);
    log_warn("shadow verification mismatch", LOG_KV("backend", ev->backend->name),
             LOG_KV("simd", ev->backend->simd_path()), LOG_KV("layer", ev->layer),
             LOG_KV("batch", ev->batch_id), LOG_KV("rows", ev->rows),
             LOG_KV("bad_elements", c->bad), LOG_KV("seq", c->bad_seq),
             LOG_KV("token", c->bad_token), LOG_KV("head", c->bad_head), LOG_KV("dim", c->bad_dim),
             LOG_KV("got", c->bad_got), LOG_KV("want", c->bad_want), LOG_KV("bound", c->bad_bound),
             LOG_KV("max_error_ratio", c->max_ratio));
    /* A policy change (reload) applies from the next mismatch on. */
    const int32_t threshold = atomic_load(&v->threshold);
    const uint64_t window_ns = (uint64_t)atomic_load(&v->window_s) * 1000000000u;
    if (threshold != v->window.threshold || window_ns != v->window.window_ns)
        verify_window_init(&v->window, threshold, window_ns);
    const bool trip = verify_window_add(&v->window, ticks_now_ns());
    ev->mismatches_in_window = v->window.n;
    /* Always armed: if the backend switched to goes wrong as well, its own
     * mismatches trip the next switch. After a switch the window starts
     * again, so the old backend's mismatches never count against the new
     * one. `tripped` only records that a switch happened (for /info) until
     * a reload re-arms. */
    if (trip && v->opt.trip && v->opt.trip(ev, v->opt.trip_ctx)) {
        atomic_store(&v->tripped, true);
        verify_window_init(&v->window, threshold, window_ns);
    }
}

static void *checker_main(void *arg) {
    verifier *v = arg;
    pthread_setname_np(pthread_self(), "attn-verify");
    /* The check is background work: below the compute threads, so on a
     * machine with every core busy serving it takes what is left over. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0)
        log_debug("cannot lower the checker thread's priority");
    pthread_mutex_lock(&v->mu);
    /* verify_create returns once it sees this, which is when the wait below
     * has let go of the lock: a capture right after it must not find the
     * lock held by a checker still starting and skip its sample. */
    v->waiting = true;
    pthread_cond_broadcast(&v->idle_cv);
    for (;;) {
        while (v->state != SLOT_FULL && !v->stopping)
            pthread_cond_wait(&v->cv, &v->mu);
        if (v->stopping)
            break;
        v->state = SLOT_BUSY;
        pthread_mutex_unlock(&v->mu);

        verify_evidence ev;
        struct timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        check_slot(v, &ev);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        atomic_fetch_add(&v->check_cpu_ns, (uint64_t)((c1.tv_sec - c0.tv_sec) * 1000000000 +
                                                      (c1.tv_nsec - c0.tv_nsec)));
        report(v, &ev);

        pthread_mutex_lock(&v->mu);
        v->state = SLOT_FREE;
        pthread_cond_broadcast(&v->idle_cv);
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

static size_t round64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

verifier *verify_create(const verify_options *opt, char *err, size_t err_len) {
    if (opt->max_rows < 1 || opt->max_rows > VERIFY_MAX_ROWS || opt->max_row_floats < 1 ||
        opt->max_kv_floats < 1 || opt->max_seqs < 1 || opt->max_seqlen < 1 ||
        opt->max_head_dim < 1) {
        snprintf(err, err_len, "verification: invalid bounds");
        return NULL;
    }
    verifier *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    v->opt = *opt;
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cv, NULL);
    pthread_cond_init(&v->idle_cv, NULL);
    const size_t rows_floats = (size_t)opt->max_rows * (size_t)opt->max_row_floats;
    const attn_shape scratch_shape = {.max_seqlen = opt->max_seqlen, .head_dim = opt->max_head_dim};
    const size_t scratch = attn_check_scratch(&scratch_shape);
    v->pick = malloc((size_t)opt->max_rows * sizeof *v->pick);
    v->rows = malloc((size_t)opt->max_rows * sizeof *v->rows);
    v->orig = malloc((size_t)opt->max_rows * sizeof *v->orig);
    v->cu = malloc(((size_t)opt->max_seqs + 1) * sizeof *v->cu);
    v->seqs = malloc((size_t)opt->max_seqs * sizeof *v->seqs);
    v->k = aligned_alloc(64, round64((size_t)opt->max_kv_floats * sizeof(float)));
    v->v = aligned_alloc(64, round64((size_t)opt->max_kv_floats * sizeof(float)));
    v->q = aligned_alloc(64, round64(rows_floats * sizeof(float)));
    v->out = aligned_alloc(64, round64(rows_floats * sizeof(float)));
    v->scratch = malloc(scratch * sizeof(double));
    const size_t bias_floats = opt->max_bias_floats > 0 ? (size_t)opt->max_bias_floats : 0;
    v->bias = bias_floats ? malloc(bias_floats * sizeof(float)) : NULL;
    v->bytes = sizeof *v + bias_floats * sizeof(float) +
               3 * (size_t)opt->max_rows * sizeof(int32_t) +
               (2 * (size_t)opt->max_seqs + 1) * sizeof(int32_t) +
               2 * round64((size_t)opt->max_kv_floats * sizeof(float)) +
               2 * round64(rows_floats * sizeof(float)) + scratch * sizeof(double);
    if (!v->pick || !v->rows || !v->orig || !v->cu || !v->seqs || !v->k || !v->v || !v->q ||
        !v->out || !v->scratch || (bias_floats && !v->bias)) {
        snprintf(err, err_len, "cannot allocate %zu bytes for the verification slot", v->bytes);
        verify_destroy(v);
        return NULL;
    }
    /* Resident from the start, as /info counts it (see attention_api.c). */
    memset(v->k, 0, round64((size_t)opt->max_kv_floats * sizeof(float)));
    memset(v->v, 0, round64((size_t)opt->max_kv_floats * sizeof(float)));
    memset(v->q, 0, round64(rows_floats * sizeof(float)));
    memset(v->out, 0, round64(rows_floats * sizeof(float)));
    verify_rng_seed(&v->rng, opt->seed);
    atomic_store(&v->rate, opt->sample_rate);
    atomic_store(&v->threshold, opt->mismatch_threshold);
    atomic_store(&v->window_s, opt->window_s);
    verify_window_init(&v->window, opt->mismatch_threshold, (uint64_t)opt->window_s * 1000000000u);
    if (pthread_create(&v->thread, NULL, checker_main, v) != 0) {
        snprintf(err, err_len, "cannot start the verification thread");
        verify_destroy(v);
        return NULL;
    }
    v->started = true;
    pthread_mutex_lock(&v->mu);
    while (!v->waiting)
        pthread_cond_wait(&v->idle_cv, &v->mu);
    pthread_mutex_unlock(&v->mu);
    return v;
}

void verify_stop(verifier *v) {
    if (!v || !v->started)
        return;
    pthread_mutex_lock(&v->mu);
    v->stopping = true;
    pthread_cond_broadcast(&v->cv);
    pthread_mutex_unlock(&v->mu);
    pthread_join(v->thread, NULL);
    v->started = false;
    pthread_mutex_lock(&v->mu);
    pthread_cond_broadcast(&v->idle_cv);
    pthread_mutex_unlock(&v->mu);
}

void verify_destroy(verifier *v) {
    if (!v)
        return;
    verify_stop(v);
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->cv);
    pthread_cond_destroy(&v->idle_cv);
    free(v->pick);
    free(v->rows);
    free(v->orig);
    free(v->cu);
    free(v->seqs);
    free(v->k);
    free(v->v);
    free(v->q);
    free(v->out);
    free(v->bias);
    free(v->scratch);
    free(v);
}

size_t verify_bytes(const verifier *v) {
    return v ? v->bytes : 0;
}

void verify_set_rate(verifier *v, double rate) {
    atomic_store(&v->rate, rate);
}

void verify_set_policy(verifier *v, int32_t threshold, int64_t window_s) {
    atomic_store(&v->threshold, threshold);
    atomic_store(&v->window_s, window_s);
}

void verify_rearm(verifier *v) {
    atomic_store(&v->rearm, true);
    atomic_store(&v->tripped, false);
}

bool verify_tripped(const verifier *v) {
    return atomic_load(&v->tripped);
}

bool verify_sample(verifier *v) {
    return v && verify_draw(&v->rng, atomic_load_explicit(&v->rate, memory_order_relaxed));
}

int verify_pick_layer(verifier *v, int nlayers) {
    return rng_below(&v->rng, nlayers);
}

static void skip(verifier *v) {
    atomic_fetch_add(&v->skipped, 1);
    metrics_verify_skipped();
}

/* Copies the slot's inputs: the sequences holding picked rows, renumbered
 * back to back, and the picked rows' Q and output. Returns false when the
 * problem exceeds the slot. */
static bool fill_slot(verifier *v, const attn_problem *p, int32_t npick) {
    const attn_shape *s = &p->shape;
    const size_t row = (size_t)s->heads * (size_t)s->head_dim;
    /* K and V rows hold the K/V heads only (fewer under grouped-query
     * attention); captured back to back at that width. */
    const size_t kv_row = (size_t)attn_kv_heads(s) * (size_t)s->head_dim;
    if ((int64_t)row > v->opt.max_row_floats || s->head_dim > v->opt.max_head_dim)
        return false;
    int32_t B = 0, T = 0, max_len = 0, seq = -1, nrows = 0;
    v->cu[0] = 0;
    for (int32_t i = 0; i < npick; i++) {
        const int32_t t = v->pick[i];
        /* Rows are sorted: find t's sequence by walking forward. */
        int32_t b = seq < 0 ? 0 : seq;
        while (p->cu_seqlens[b + 1] <= t)
            b++;
        const int32_t lo = p->cu_seqlens[b], len = p->cu_seqlens[b + 1] - lo;
        if (b != seq) {
            if (B >= v->opt.max_seqs || len > v->opt.max_seqlen ||
                (int64_t)(T + len) * (int64_t)row > v->opt.max_kv_floats)
                return false;
            for (int32_t j = 0; j < len; j++) {
                memcpy(v->k + (size_t)(T + j) * kv_row, p->k + (size_t)(lo + j) * p->k_stride,
                       kv_row * sizeof(float));
                memcpy(v->v + (size_t)(T + j) * kv_row, p->v + (size_t)(lo + j) * p->v_stride,
                       kv_row * sizeof(float));
            }
            T += len;
            v->seqs[B] = b;
            v->cu[++B] = T;
            max_len = len > max_len ? len : max_len;
            seq = b;
        }
        const int32_t local = v->cu[B - 1] + (t - lo);
        memcpy(v->q + (size_t)nrows * row, p->q + (size_t)t * p->q_stride, row * sizeof(float));
        memcpy(v->out + (size_t)nrows * row, p->out + (size_t)t * p->out_stride,
               row * sizeof(float));
        v->orig[nrows] = t;
        v->rows[nrows++] = local;
    }
    if (s->rel_bias) {
        /* The captured sequences need distances below max_len only: each
         * head's central 2·max_len − 1 values (a span of max_len). */
        const size_t span = (size_t)(max_len > 0 ? max_len : 1), n = 2 * span - 1;
        if ((int64_t)((size_t)s->heads * n) > v->opt.max_bias_floats)
            return false;
        const size_t src_row = 2 * (size_t)p->rel_span - 1;
        for (int h = 0; h < s->heads; h++)
            memcpy(v->bias + (size_t)h * n,
                   p->rel_bias + (size_t)h * src_row + ((size_t)p->rel_span - span),
                   n * sizeof(float));
        v->rel_span = (int32_t)span;
    }
    v->shape = (attn_shape){.batch = B,
                            .total_tokens = T,
                            .max_seqlen = max_len,
                            .heads = s->heads,
                            .head_dim = s->head_dim,
                            .causal = s->causal,
                            .rel_bias = s->rel_bias,
                            /* The reference must compute the backend's
                             * attention: the same K/V grouping and window. */
                            .kv_heads = s->kv_heads,
                            .window = s->window};
    v->scale = p->scale;
    v->nrows = nrows;
    return true;
}

bool verify_capture(verifier *v, const attn_problem *p, const attn_backend *backend, int layer,
                    uint64_t batch_id) {
    if (!v)
        return false;
    if (pthread_mutex_trylock(&v->mu) != 0) {
        skip(v);
        return false;
    }
    if (v->state != SLOT_FREE || v->stopping) {
        const bool stopping = v->stopping; /* read under the lock */
        pthread_mutex_unlock(&v->mu);
        if (!stopping)
            skip(v);
        return false;
    }
    /* FREE: the checker does not touch the slot until it is FULL, so it can
     * be filled without the lock; the flag below keeps others out. */
    v->state = SLOT_BUSY;
    pthread_mutex_unlock(&v->mu);

    const int32_t npick =
        verify_pick_rows(&v->rng, p->cu_seqlens, p->shape.batch, v->opt.max_rows, v->pick);
    const bool ok = npick > 0 && fill_slot(v, p, npick);
    v->backend = backend;
    v->layer = layer;
    v->batch_id = batch_id;

    pthread_mutex_lock(&v->mu);
    v->state = ok ? SLOT_FULL : SLOT_FREE;
    pthread_cond_signal(ok ? &v->cv : &v->idle_cv);
    pthread_mutex_unlock(&v->mu);
    if (!ok)
        skip(v);
    return ok;
}

bool verify_wait_idle(verifier *v, int64_t timeout_ms) {
    const struct timespec until = ticks_after_ms(CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&v->mu);
    int rc = 0;
    while (v->state != SLOT_FREE && rc == 0)
        rc = pthread_cond_timedwait(&v->idle_cv, &v->mu, &until);
    const bool idle = v->state == SLOT_FREE;
    pthread_mutex_unlock(&v->mu);
    return idle;
}

void verify_counts(const verifier *v, uint64_t *checked, uint64_t *mismatched, uint64_t *skipped) {
    *checked = atomic_load(&((verifier *)v)->checked);
    *mismatched = atomic_load(&((verifier *)v)->mismatched);
    *skipped = atomic_load(&((verifier *)v)->skipped);
}

double verify_check_cpu_seconds(const verifier *v) {
    return (double)atomic_load(&((verifier *)v)->check_cpu_ns) * 1e-9;
}

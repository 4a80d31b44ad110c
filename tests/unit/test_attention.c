/* test_attention.c — every backend and every SIMD path against a float64
 * reference, on random varlen batches and on hard inputs.
 *
 * Tolerance. Each output element is a convex combination of the values the
 * query sees, so its error is measured in units of u·vmax, where u is float32
 * rounding (FLT_EPSILON/2) and vmax is the largest |v| in that combination.
 * Float32 rounding then accounts for: the score q·k (D products), exp (≤ 2
 * ulp), and sums over L keys. With rounding errors behaving as random walks
 * (Higham, "Accuracy and Stability", §2.8, the usual model for float sums),
 * these grow like √D·|s| and √L, so we allow
 *      |out − ref| ≤ ATTN_TOL_UNITS · u · vmax · (1 + √L + √D · smax)
 * where smax is the largest |score| of the case. ATTN_TOL_UNITS is the only
 * constant; it is small enough that a kernel that drops a rescale, a block,
 * a mask or one ulp of exp accuracy across a row fails. The bound is
 * kernels/reference.h's attn_error_bound, the one the start-up self-test and
 * the shadow verification apply in the service. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_ref.h"
#include "kernels/attention.h"
#include "kernels/reference.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

typedef struct {
    attn_problem p;
    int32_t *cu;            /* [B+1] */
    float *q, *k, *v, *out; /* (T, H, stride) each */
    double *ref, *vmax;     /* (T, H, D) */
    double smax;            /* largest |score| */
} test_case;

static void case_free(test_case *c) {
    free(c->cu);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->out);
    free(c->ref);
    free(c->vmax);
    memset(c, 0, sizeof *c);
}

/* Builds a batch of the given sequence lengths. Values are N(0,1)·amp; the
 * token stride is padded by `pad` floats to exercise strided layouts. */
static void case_make(test_case *c, test_rng *r, const int32_t *lens, int batch, int heads,
                      int head_dim, int causal, float amp, int pad) {
    memset(c, 0, sizeof *c);
    int32_t maxlen;
    c->cu = attn_cu_seqlens(lens, batch, &maxlen);
    const int32_t T = c->cu[batch];
    const size_t stride = (size_t)heads * head_dim + (size_t)pad;
    const size_t n = (size_t)(T > 0 ? T : 1) * stride;
    c->q = malloc(n * sizeof(float));
    c->k = malloc(n * sizeof(float));
    c->v = malloc(n * sizeof(float));
    c->out = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        c->q[i] = rng_normal(r) * amp;
        c->k[i] = rng_normal(r) * amp;
        c->v[i] = rng_normal(r);
        c->out[i] = NAN; /* a backend that skips an element fails */
    }
    attn_shape s = {.batch = batch,
                    .total_tokens = T,
                    .max_seqlen = maxlen,
                    .heads = heads,
                    .head_dim = head_dim,
                    .causal = causal};
    attn_problem_dense(&c->p, s, c->cu, c->q, c->k, c->v, c->out);
    c->p.q_stride = c->p.k_stride = c->p.v_stride = c->p.out_stride = stride;
}

static void case_reference(test_case *c) {
    const attn_shape *s = &c->p.shape;
    size_t n = (size_t)(s->total_tokens > 0 ? s->total_tokens : 1) * s->heads * s->head_dim;
    c->ref = malloc(n * sizeof(double));
    c->vmax = malloc(n * sizeof(double));
    attn_reference(&c->p, 0, s->total_tokens, c->ref, c->vmax, &c->smax);
}

/* Reports the worst error of c->out against c->ref as a fraction of the
 * allowed bound (≤ 1 passes) and fails the test on the first element past
 * it. exact_scores: the case builds scores that float32 holds exactly, so
 * the √D·smax term (score rounding) does not apply. */
static double case_check(const test_case *c, const char *label, int exact_scores) {
    const attn_shape *s = &c->p.shape;
    const int H = s->heads, D = s->head_dim;
    double worst = 0.0;
    for (int32_t b = 0; b < s->batch; b++) {
        const int32_t len = c->cu[b + 1] - c->cu[b];
        for (int32_t t = c->cu[b]; t < c->cu[b + 1]; t++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    const size_t ri = ((size_t)t * H + h) * D + d;
                    const float got = c->out[(size_t)t * c->p.out_stride + (size_t)h * D + d];
                    const double bound =
                        attn_error_bound(c->vmax[ri], len, D, exact_scores ? 0.0 : c->smax);
                    const double err = fabs((double)got - c->ref[ri]);
                    cr_assert(isfinite(got) && err <= bound,
                              "%s: B=%d H=%d D=%d causal=%d seq %d (len %d) token %d head %d "
                              "dim %d: got %.9g, want %.9g (err %.3g > bound %.3g)",
                              label, s->batch, H, D, s->causal, b, len, t - c->cu[b], h, d,
                              (double)got, c->ref[ri], err, bound);
                    worst = fmax(worst, err / bound);
                }
    }
    return worst;
}

/* Runs backend on c with par, on the SIMD path now active. */
static void case_run(const attn_backend *backend, test_case *c, const attn_parallel *par) {
    const size_t ws = backend->workspace_size(&c->p.shape, par->nthreads);
    void *work = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
    const size_t n = (size_t)c->p.shape.total_tokens * c->p.out_stride;
    for (size_t i = 0; i < n; i++)
        c->out[i] = NAN;
    int rc = backend->forward(&c->p, work, ws, par);
    free(work);
    cr_assert_eq(rc, ATTN_OK, "%s/%s forward: %s", backend->name, backend->simd_path(),
                 attn_strerror(rc));
}

/* Runs every float32 backend on every SIMD path this CPU has, each checked
 * against the reference by the float32 bound. Reduced-precision backends have
 * their own bound and tests (test_bf16attn.c). Returns the worst error/bound
 * ratio seen. */
static double case_all_backends(test_case *c, const attn_parallel *par, int exact_scores) {
    double worst = 0.0;
    char label[96];
    for (const attn_backend *const *b = attn_backends(); *b; b++) {
        if ((*b)->precision != ATTN_PREC_FP32)
            continue;
        for (int path = ATTN_SIMD_PORTABLE; path <= (int)attn_simd_detect(); path++) {
            cr_assert_eq(attn_simd_force((attn_simd)path), 0);
            if ((*b)->supports(&c->p.shape, NULL, 0) != ATTN_OK)
                continue;
            case_run(*b, c, par);
            snprintf(label, sizeof label, "%s/%s", (*b)->name, attn_simd_name((attn_simd)path));
            worst = fmax(worst, case_check(c, label, exact_scores));
        }
        attn_simd_unforce();
    }
    return worst;
}

static tp_pool *pool;
static attn_parallel par;

static void pool_up(void) {
    pool = tp_create(2);
    cr_assert_not_null(pool);
    par = tp_parallel(pool);
}

static void pool_down(void) {
    tp_destroy(pool);
}

/* ---- random cases ----------------------------------------------------------
 * 20 cases for each head_dim, 200 in all: 1..8 sequences of lengths up to
 * 1024 (a quarter of them long), 1..16 heads, causal or not, dense or strided.
 * Heads, then lengths, are cut so one case stays under a work budget and the
 * suite stays quick under sanitizers. */
#define CASES_PER_DIM 20
#define WORK_BUDGET   12e6 /* Σ L²·H·D multiply-adds per case */

static void random_cases(int head_dim, uint64_t seed) {
    test_rng r = {seed * 0x9E3779B97F4A7C15ULL + 1};
    double worst = 0.0;
    for (int n = 0; n < CASES_PER_DIM; n++) {
        int32_t lens[8];
        int batch = rng_int(&r, 1, 8), heads = rng_int(&r, 1, 16);
        double work = 0.0;
        for (int b = 0; b < batch; b++) {
            lens[b] = rng_int(&r, 0, 3) == 0 ? rng_int(&r, 256, 1024) : rng_int(&r, 1, 200);
            work += (double)lens[b] * lens[b];
        }
        while (heads > 1 && work * heads * head_dim > WORK_BUDGET)
            heads--;
        for (int b = 0; work * heads * head_dim > WORK_BUDGET; b = (b + 1) % batch) {
            work -= (double)lens[b] * lens[b];
            lens[b] = lens[b] * 3 / 4 + 1;
            work += (double)lens[b] * lens[b];
        }
        test_case c;
        case_make(&c, &r, lens, batch, heads, head_dim, rng_int(&r, 0, 1), 1.0f,
                  rng_int(&r, 0, 3) == 0 ? 3 : 0);
        case_reference(&c);
        worst = fmax(worst, case_all_backends(&c, &par, 0));
        case_free(&c);
    }
    cr_log_info("head_dim %d: worst error %.3f of the bound", head_dim, worst);
}

#define RANDOM_TEST(D)                                                                             \
    Test(attention, random_head_dim_##D, .init = pool_up, .fini = pool_down, .timeout = 600) {     \
        random_cases(D, D);                                                                        \
    }
RANDOM_TEST(1)
RANDOM_TEST(8)
RANDOM_TEST(16)
RANDOM_TEST(32)
RANDOM_TEST(48)
RANDOM_TEST(64)
RANDOM_TEST(80)
RANDOM_TEST(96)
RANDOM_TEST(128)
RANDOM_TEST(256)

/* Every head_dim from 1 to 256, small batches: catches tails of SIMD loops. */
Test(attention, every_head_dim, .init = pool_up, .fini = pool_down, .timeout = 600) {
    test_rng r = {12345};
    for (int d = 1; d <= 256; d++) {
        const int32_t lens[3] = {17, 1, 40};
        test_case c;
        case_make(&c, &r, lens, 3, 2, d, d % 2, 1.0f, d % 3 == 0 ? 5 : 0);
        case_reference(&c);
        case_all_backends(&c, &par, 0);
        case_free(&c);
    }
}

/* ---- hard inputs --------------------------------------------------------- */

/* Scores of ±1e4 built exactly: q is 100·e₀ and k's first coordinate ±100,
 * so every score is ±1e4 with no rounding, and a row mixes both extremes
 * across key blocks (the running max must rescale by exp(−2e4) = 0). */
Test(attention, huge_logits, .init = pool_up, .fini = pool_down) {
    test_rng r = {7};
    const int32_t lens[2] = {300, 77};
    for (int causal = 0; causal <= 1; causal++) {
        test_case c;
        case_make(&c, &r, lens, 2, 2, 64, causal, 1.0f, 0);
        c.p.scale = 1.0f;
        for (int32_t t = 0; t < c.p.shape.total_tokens; t++)
            for (int h = 0; h < 2; h++)
                for (int d = 0; d < 64; d++) {
                    size_t i = (size_t)t * c.p.q_stride + (size_t)h * 64 + d;
                    c.q[i] = d == 0 ? (t % 3 ? 100.0f : -100.0f) : 0.0f;
                    c.k[i] = d == 0 ? ((t * 7 + h) % 5 < 2 ? 100.0f : -100.0f) : 0.0f;
                }
        case_reference(&c);
        cr_assert_geq(c.smax, 1e4);
        case_all_backends(&c, &par, 1);
        case_free(&c);
    }
}

/* q = 0: every score is equal, so each output is the mean of the values. */
Test(attention, equal_scores, .init = pool_up, .fini = pool_down) {
    test_rng r = {8};
    const int32_t lens[3] = {1, 129, 513};
    for (int causal = 0; causal <= 1; causal++) {
        test_case c;
        case_make(&c, &r, lens, 3, 3, 32, causal, 1.0f, 0);
        memset(c.q, 0, (size_t)c.p.shape.total_tokens * c.p.q_stride * sizeof(float));
        case_reference(&c);
        case_all_backends(&c, &par, 1);
        case_free(&c);
    }
}

/* Length-1 sequences: each output is its own value row, exactly. */
Test(attention, length_one_sequences, .init = pool_up, .fini = pool_down) {
    test_rng r = {9};
    const int32_t lens[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    test_case c;
    case_make(&c, &r, lens, 8, 4, 64, 0, 1.0f, 0);
    case_reference(&c);
    case_all_backends(&c, &par, 0);
    for (size_t i = 0; i < (size_t)8 * 4 * 64; i++)
        cr_assert_eq(c.ref[i], (double)c.v[i]);
    case_free(&c);
}

/* Zero-length sequences inside a batch, first, middle and last. */
Test(attention, zero_length_sequences, .init = pool_up, .fini = pool_down) {
    test_rng r = {10};
    const int32_t lens[6] = {0, 5, 0, 0, 70, 0};
    for (int causal = 0; causal <= 1; causal++) {
        test_case c;
        case_make(&c, &r, lens, 6, 2, 48, causal, 1.0f, 0);
        case_reference(&c);
        case_all_backends(&c, &par, 0);
        case_free(&c);
    }
}

/* A batch whose every sequence is empty: nothing to compute, no error. */
Test(attention, all_empty_batch, .init = pool_up, .fini = pool_down) {
    const int32_t cu[3] = {0, 0, 0};
    attn_shape s = {.batch = 2, .total_tokens = 0, .max_seqlen = 0, .heads = 2, .head_dim = 64};
    attn_problem p;
    attn_problem_dense(&p, s, cu, NULL, NULL, NULL, NULL);
    for (const attn_backend *const *b = attn_backends(); *b; b++) {
        if ((*b)->supports(&s, NULL, 0) != ATTN_OK)
            continue; /* a backend this CPU does not offer (bf16 without AVX512_BF16) */
        size_t ws = (*b)->workspace_size(&s, par.nthreads);
        void *w = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
        cr_assert_eq((*b)->forward(&p, w, ws, &par), ATTN_OK, "%s", (*b)->name);
        free(w);
    }
}

/* A 16k-token sequence; the reference is computed for sampled rows only (the
 * first, the last and rows spread between), which bounds the test's time. */
static void long_sequence(const char *backend_name, int32_t len, int head_dim, int causal) {
    const attn_backend *b = attn_backend_find(backend_name);
    cr_assert_not_null(b);
    test_rng r = {11};
    test_case c;
    case_make(&c, &r, &len, 1, 1, head_dim, causal, 1.0f, 0);
    case_run(b, &c, &par);
    const int32_t rows[] = {0, 1, 63, 64, 1000, 4095, 8191, 8192, 12345, len - 2, len - 1};
    double *scratch = malloc(attn_check_scratch(&c.p.shape) * sizeof(double));
    attn_check res = {0};
    attn_check_rows(&c.p, rows, (int32_t)(sizeof rows / sizeof rows[0]), scratch, &res);
    free(scratch);
    cr_assert_eq(res.bad, 0, "%s len %d row %d dim %d: got %.9g, want %.9g (bound %.3g)",
                 backend_name, len, res.bad_token, res.bad_dim, (double)res.bad_got, res.bad_want,
                 res.bad_bound);
    cr_assert_eq(res.elements, (int64_t)(sizeof rows / sizeof rows[0]) * head_dim);
    case_free(&c);
}

Test(attention, long_sequence_fused, .init = pool_up, .fini = pool_down, .timeout = 600) {
    long_sequence("fused", 16384, 64, 0);
    long_sequence("fused", 16384, 64, 1);
}

Test(attention, long_sequence_naive, .init = pool_up, .fini = pool_down, .timeout = 600) {
    long_sequence("naive", 16384, 16, 1);
}

/* ---- determinism ----------------------------------------------------------
 * The split of work must not depend on the thread count or on timing: the
 * same batch gives the same bits on one thread and on a pool, twice. */
Test(attention, deterministic_across_threads, .init = pool_up, .fini = pool_down) {
    test_rng r = {12};
    const int32_t lens[4] = {700, 3, 129, 256};
    test_case c;
    case_make(&c, &r, lens, 4, 6, 64, 0, 1.0f, 0);
    const size_t n = (size_t)c.p.shape.total_tokens * c.p.out_stride;
    float *first = malloc(n * sizeof(float));
    for (const attn_backend *const *b = attn_backends(); *b; b++) {
        if ((*b)->supports(&c.p.shape, NULL, 0) != ATTN_OK)
            continue;
        case_run(*b, &c, &attn_parallel_serial);
        memcpy(first, c.out, n * sizeof(float));
        for (int rep = 0; rep < 2; rep++) {
            case_run(*b, &c, &par);
            cr_assert(memcmp(first, c.out, n * sizeof(float)) == 0,
                      "%s: output differs between 1 and %d threads", (*b)->name, par.nthreads);
        }
    }
    free(first);
    case_free(&c);
}

/* ---- contract: argument checks ---------------------------------------------- */

Test(attention, rejects_bad_problems, .init = pool_up, .fini = pool_down) {
    test_rng r = {13};
    const int32_t lens[2] = {4, 6};
    test_case c;
    case_make(&c, &r, lens, 2, 2, 32, 0, 1.0f, 0);
    for (const attn_backend *const *b = attn_backends(); *b; b++) {
        if ((*b)->supports(&c.p.shape, NULL, 0) != ATTN_OK)
            continue;
        const size_t ws = (*b)->workspace_size(&c.p.shape, par.nthreads);
        void *w = aligned_alloc(64, (ws + 64) / 64 * 64);
        attn_problem p = c.p;
        int32_t cu[3] = {0, 4, 10};
        p.cu_seqlens = cu;
        cr_assert_eq((*b)->forward(&p, w, ws, &par), ATTN_OK, "%s", (*b)->name);
        cu[0] = 1;
        cr_assert_eq((*b)->forward(&p, w, ws, &par), ATTN_EINVAL, "%s: cu[0]!=0", (*b)->name);
        cu[0] = 0, cu[1] = 11;
        cr_assert_eq((*b)->forward(&p, w, ws, &par), ATTN_EINVAL, "%s: decreasing", (*b)->name);
        cu[1] = 4, cu[2] = 9;
        cr_assert_eq((*b)->forward(&p, w, ws, &par), ATTN_EINVAL, "%s: total", (*b)->name);
        cu[2] = 10;
        p.q_stride = 63;
        cr_assert_eq((*b)->forward(&p, w, ws, &par), ATTN_EINVAL, "%s: stride", (*b)->name);
        p.q_stride = 64;
        p.scale = NAN;
        cr_assert_eq((*b)->forward(&p, w, ws, &par), ATTN_EINVAL, "%s: scale", (*b)->name);
        p.scale = c.p.scale;
        if (ws > 0)
            cr_assert_eq((*b)->forward(&p, w, ws - 1, &par), ATTN_EWORKSPACE, "%s: workspace",
                         (*b)->name);
        free(w);
    }
    case_free(&c);
}

/* ---- registry -------------------------------------------------------------- */

Test(registry, finds_builtins_by_name) {
    cr_assert_not_null(attn_backend_find("naive"));
    cr_assert_not_null(attn_backend_find("fused"));
    cr_assert_null(attn_backend_find("auto"));
    cr_assert_null(attn_backend_find("Naive"));
    cr_assert_null(attn_backend_find(NULL));
    for (const attn_backend *const *b = attn_backends(); *b; b++)
        cr_assert_not_null(strstr(attn_backend_names(), (*b)->name), "%s not listed", (*b)->name);
}

/* Only refusals here: a registered backend would join every sweep of this
 * binary (the faulty test backend is linked into build/attnserve-faulty only). */
Test(registry, register_refuses_bad_tables) {
    const attn_backend *naive = attn_backend_find("naive");
    attn_backend copy = *naive;
    cr_assert_eq(attn_backend_register(NULL), ATTN_EINVAL);
    cr_assert_eq(attn_backend_register(naive), ATTN_EINVAL, "a name already taken");
    copy.name = "auto";
    cr_assert_eq(attn_backend_register(&copy), ATTN_EINVAL);
    copy.name = "a,b";
    cr_assert_eq(attn_backend_register(&copy), ATTN_EINVAL);
    copy.name = "nofwd";
    copy.forward = NULL;
    cr_assert_eq(attn_backend_register(&copy), ATTN_EINVAL);
    cr_assert_null(attn_backend_find("nofwd"));
    cr_assert_str_eq(attn_backend_names(), "naive, fused, bf16, auto");
}

Test(registry, unknown_name_lists_valid_ones) {
    const attn_shape s = {
        .batch = 1, .total_tokens = 8, .max_seqlen = 8, .heads = 1, .head_dim = 64};
    const attn_backend *b = (void *)1;
    char err[256];
    cr_assert_eq(attn_backend_select("flash", &s, &b, err, sizeof err), ATTN_EUNKNOWN);
    cr_assert_null(b);
    cr_assert_not_null(strstr(err, "flash"), "%s", err);
    cr_assert_not_null(strstr(err, "naive, fused, bf16, auto"), "%s", err);
}

Test(registry, auto_picks_fastest_that_supports) {
    attn_shape s = {
        .batch = 4, .total_tokens = 512, .max_seqlen = 128, .heads = 12, .head_dim = 64};
    const attn_backend *b = NULL;
    char err[256];
    cr_assert_eq(attn_backend_select("auto", &s, &b, err, sizeof err), ATTN_OK, "%s", err);
    cr_assert_str_eq(b->name, "fused");
    /* Past the fused kernel's head_dim limit only the reference remains. */
    s.head_dim = 300;
    cr_assert_eq(attn_backend_select("auto", &s, &b, err, sizeof err), ATTN_OK, "%s", err);
    cr_assert_str_eq(b->name, "naive");
}

Test(registry, named_backend_refusal_says_why) {
    attn_shape s = {.batch = 1, .total_tokens = 16, .max_seqlen = 16, .heads = 2, .head_dim = 300};
    const attn_backend *b = NULL;
    char err[256];
    cr_assert_eq(attn_backend_select("fused", &s, &b, err, sizeof err), ATTN_EUNSUPPORTED);
    cr_assert_null(b);
    cr_assert_not_null(strstr(err, "fused"), "%s", err);
    cr_assert_not_null(strstr(err, "head_dim"), "%s", err);
    cr_assert_eq(attn_backend_select("naive", &s, &b, err, sizeof err), ATTN_OK, "%s", err);
}

/* ---- SIMD choice ------------------------------------------------------------ */

Test(simd, force_and_parse) {
    for (int p = ATTN_SIMD_PORTABLE; p <= ATTN_SIMD_AVX512; p++) {
        cr_assert_eq(attn_simd_parse(attn_simd_name((attn_simd)p)), p);
        if (p <= (int)attn_simd_detect()) {
            cr_assert_eq(attn_simd_force((attn_simd)p), 0);
            cr_assert_eq(attn_simd_active(), (attn_simd)p);
        } else {
            cr_assert_eq(attn_simd_force((attn_simd)p), -1);
        }
    }
    attn_simd_unforce();
    cr_assert_eq(attn_simd_parse("sse"), -1);
}

/* ---- thread pool --------------------------------------------------------------- */

typedef struct {
    int *hits;
    int nthreads;
    int bad_worker;
} pool_probe;

static void probe_task(void *ctx, size_t task, int worker) {
    pool_probe *p = ctx;
    __atomic_add_fetch(&p->hits[task], 1, __ATOMIC_RELAXED);
    if (worker < 0 || worker >= p->nthreads)
        __atomic_store_n(&p->bad_worker, 1, __ATOMIC_RELAXED);
}

Test(threadpool, runs_every_task_once) {
    cr_assert_null(tp_create(0));
    for (int n = 1; n <= 4; n++) {
        tp_pool *tp = tp_create(n);
        cr_assert_not_null(tp);
        attn_parallel ap = tp_parallel(tp);
        cr_assert_eq(ap.nthreads, n);
        for (size_t ntasks = 0; ntasks < 2000; ntasks = ntasks * 3 + 1) {
            pool_probe p = {calloc(ntasks + 1, sizeof(int)), n, 0};
            ap.parallel_for(ap.impl, ntasks, probe_task, &p);
            for (size_t i = 0; i < ntasks; i++)
                cr_assert_eq(p.hits[i], 1, "n=%d task %zu ran %d times", n, i, p.hits[i]);
            cr_assert_eq(p.bad_worker, 0);
            free(p.hits);
        }
        tp_destroy(tp);
    }
}

/* A task that sleeps, so the caller outlasts its spin and sleeps on the
 * helpers (and helpers outlast theirs between loops). */
static void slow_probe_task(void *ctx, size_t task, int worker) {
    pool_probe *p = ctx;
    if (task == 0)
        nanosleep(&(struct timespec){.tv_nsec = 2 * 1000 * 1000}, NULL);
    probe_task(p, task, worker);
}

Test(threadpool, wakes_sleeping_workers_and_caller, .timeout = 60) {
    /* The pool spins briefly, then sleeps; a lost wake-up of the caller
     * hangs a loop and the timeout fails the test (a helper's would not: the
     * caller runs the tasks without it, which test_threadpool.c's
     * helpers_wake_for_a_task_the_caller_cannot_run catches). Gaps of 2 ms
     * outlast the spin, so every loop starts with the helpers asleep, and the
     * 2 ms task makes whoever waits for it sleep too. */
    for (int n = 2; n <= 5; n++) {
        tp_pool *tp = tp_create(n < 5 ? n : 2);
        cr_assert_not_null(tp);
        if (n == 5)
            tp_set_spin_us(tp, 0); /* never polls: every wait sleeps */
        attn_parallel ap = tp_parallel(tp);
        for (int round = 0; round < 20; round++) {
            nanosleep(&(struct timespec){.tv_nsec = 2 * 1000 * 1000}, NULL);
            const size_t ntasks = (size_t)(round % 5) + 2;
            pool_probe p = {calloc(ntasks, sizeof(int)), ap.nthreads, 0};
            ap.parallel_for(ap.impl, ntasks, round % 2 ? slow_probe_task : probe_task, &p);
            for (size_t i = 0; i < ntasks; i++)
                cr_assert_eq(p.hits[i], 1, "n=%d round %d task %zu ran %d times", n, round, i,
                             p.hits[i]);
            cr_assert_eq(p.bad_worker, 0);
            free(p.hits);
        }
        tp_destroy(tp);
    }
}

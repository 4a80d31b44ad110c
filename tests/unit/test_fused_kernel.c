/* test_fused_kernel.c — the fused backend on every SIMD path this CPU can run,
 * against a float64 reference: odd head_dims around the fast paths, padded
 * token strides, mixed lengths with empty sequences, causal and not, huge
 * logits, long sequences; plus determinism across thread counts, workspace
 * bounds and argument checks.
 *
 * Tolerance: inputs are uniform in [-1, 1], so outputs are averages of values
 * in [-1, 1]; float32 scores and sums put the error near 1e-7 (a few float32
 * ulps of the largest outputs). We allow TOL = 1e-6 absolute (errors seen: below 5e-7). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"
#include "kernels/attention.h"
#include "kernels/backends.h"
#include "kernels/fused_impl.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"

#define TOL      1e-6
#define SENTINEL 12345.0f

static const attn_backend *const be = &attn_backend_fused;

/* A batch with its own buffers; strides may exceed H·D. */
typedef struct {
    attn_problem p;
    int32_t *cu;
    float *q, *k, *v, *out;
    size_t n_out;
} batch;

static unsigned rng = 1u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}
static int irand(int n) {
    rng = rng * 1664525u + 1013904223u;
    return (int)((rng >> 8) % (unsigned)n);
}

static float *filled(size_t n, float value_or_nan) {
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    for (size_t i = 0; i < n; i++)
        x[i] = isnan(value_or_nan) ? frand() : value_or_nan;
    return x;
}

static batch make_batch(int B, const int32_t *lens, int H, int D, int causal, int pad) {
    batch b = {0};
    int32_t maxlen;
    b.cu = attn_cu_seqlens(lens, B, &maxlen);
    const int32_t T = b.cu[B];
    const size_t row = (size_t)H * D + (size_t)pad;
    const size_t n = (size_t)(T > 0 ? T : 1) * row;
    b.q = filled(n, NAN);
    b.k = filled(n, NAN);
    b.v = filled(n, NAN);
    b.out = filled(n, SENTINEL);
    b.n_out = n;
    attn_shape s = {B, T, maxlen, H, D, causal, 0, 0, 0};
    attn_problem_dense(&b.p, s, b.cu, b.q, b.k, b.v, b.out);
    b.p.q_stride = b.p.k_stride = b.p.v_stride = b.p.out_stride = row;
    return b;
}

static void free_batch(batch *b) {
    free(b->cu);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->out);
}

static int run(const attn_problem *p, int nthreads) {
    tp_pool *pool = tp_create(nthreads);
    cr_assert(pool);
    attn_parallel par = tp_parallel(pool);
    const size_t bytes = be->workspace_size(&p->shape, nthreads);
    void *ws = aligned_alloc(64, (bytes + 63) / 64 * 64);
    cr_assert(ws);
    const int rc = be->forward(p, ws, bytes, &par);
    free(ws);
    tp_destroy(pool);
    return rc;
}

/* Largest |out - reference| over rows picked by row_step (1 = every row);
 * also checks that the stride padding of out was left alone. */
static double max_error(const batch *b, int row_step) {
    const attn_problem *p = &b->p;
    const int H = p->shape.heads, D = p->shape.head_dim;
    double worst = 0.0;
    double *s = malloc(((size_t)p->shape.max_seqlen + 1) * sizeof *s), acc[256];
    cr_assert(s);
    for (int32_t bi = 0; bi < p->shape.batch; bi++) {
        const int32_t start = p->cu_seqlens[bi], len = p->cu_seqlens[bi + 1] - start;
        for (int32_t i = len - 1; i >= 0; i -= row_step)
            for (int h = 0; h < H; h++) {
                const float *qi = p->q + (size_t)(start + i) * p->q_stride + (size_t)h * D;
                const int32_t nk = p->shape.causal ? i + 1 : len;
                double m = -INFINITY, sum = 0.0;
                for (int32_t j = 0; j < nk; j++) {
                    const float *kj = p->k + (size_t)(start + j) * p->k_stride + (size_t)h * D;
                    double dot = 0.0;
                    for (int d = 0; d < D; d++)
                        dot += (double)qi[d] * kj[d];
                    s[j] = dot * p->scale;
                    m = s[j] > m ? s[j] : m;
                }
                for (int d = 0; d < D; d++)
                    acc[d] = 0.0;
                for (int32_t j = 0; j < nk; j++) {
                    const double w = exp(s[j] - m);
                    const float *vj = p->v + (size_t)(start + j) * p->v_stride + (size_t)h * D;
                    sum += w;
                    for (int d = 0; d < D; d++)
                        acc[d] += w * vj[d];
                }
                const float *oi = p->out + (size_t)(start + i) * p->out_stride + (size_t)h * D;
                for (int d = 0; d < D; d++) {
                    const double e = fabs((double)oi[d] - acc[d] / sum);
                    worst = e > worst || isnan(e) ? e : worst;
                }
            }
    }
    free(s);
    const size_t row = (size_t)H * D;
    for (int32_t t = 0; t < p->shape.total_tokens; t++)
        for (size_t x = row; x < p->out_stride; x++)
            cr_assert_eq(p->out[(size_t)t * p->out_stride + x], SENTINEL,
                         "stride padding of token %d overwritten", t);
    return worst;
}

/* ---- accuracy ------------------------------------------------------------------- */

Test(fused_kernel, random_batches_on_every_path, .timeout = 120) {
    static const int dims[] = {1,  3,  8,  15, 16, 17,  31,  32,  33,  48,
                               63, 64, 65, 80, 96, 127, 128, 129, 200, 256};
    const int ndims = (int)(sizeof dims / sizeof dims[0]);
    for (int path = ATTN_SIMD_PORTABLE; path <= (int)attn_simd_detect(); path++) {
        cr_assert(attn_simd_force((attn_simd)path) == 0);
        rng = 7u + (unsigned)path;
        double worst = 0.0;
        for (int c = 0; c < 2 * ndims; c++) {
            const int D = dims[c % ndims], H = 1 + irand(3), B = 1 + irand(4);
            const int causal = c / ndims, pad = irand(2) * (1 + irand(9));
            const int maxlen = D > 100 ? 150 : 300;
            int32_t lens[4];
            for (int i = 0; i < B; i++)
                lens[i] = irand(5) == 0 ? 0 : 1 + irand(maxlen);
            batch b = make_batch(B, lens, H, D, causal, pad);
            b.p.scale *= 0.5f + 1.5f * (frand() + 1.0f) / 2.0f;
            cr_assert_eq(run(&b.p, 2), ATTN_OK);
            const double e = max_error(&b, 1);
            cr_expect(e <= TOL, "%s D=%d H=%d B=%d causal=%d pad=%d: error %.3g",
                      attn_simd_name((attn_simd)path), D, H, B, causal, pad, e);
            worst = e > worst ? e : worst;
            free_batch(&b);
        }
        cr_log_info("fused %s: max error %.3g over %d batches", attn_simd_name((attn_simd)path),
                    worst, 2 * ndims);
    }
}

/* Logits of ±1e4: exp of the raw scores would overflow; the running max must
 * keep every term finite. Rows alternate in sign so the max moves a lot. */
Test(fused_kernel, huge_logits_stay_finite) {
    for (int path = ATTN_SIMD_PORTABLE; path <= (int)attn_simd_detect(); path++) {
        cr_assert(attn_simd_force((attn_simd)path) == 0);
        for (int causal = 0; causal <= 1; causal++) {
            const int32_t lens[2] = {70, 33};
            batch b = make_batch(2, lens, 2, 4, causal, 0);
            b.p.scale = 1.0f;
            for (size_t t = 0; t < (size_t)b.p.shape.total_tokens * 8; t++) {
                b.q[t] = 50.0f;
                b.k[t] = ((t / 8) % 3 == 0 ? 50.0f : -50.0f) * ((t / 24) % 2 ? 1.0f : -1.0f);
            }
            cr_assert_eq(run(&b.p, 1), ATTN_OK);
            for (size_t i = 0; i < b.n_out; i++)
                cr_assert(isfinite(b.out[i]), "%s: out[%zu] = %g", attn_simd_name((attn_simd)path),
                          i, b.out[i]);
            cr_expect(max_error(&b, 1) <= TOL);
            free_batch(&b);
        }
    }
}

/* All-equal scores: the output is the plain mean of the values seen. */
Test(fused_kernel, equal_scores_average_the_values) {
    const int32_t lens[1] = {100};
    batch b = make_batch(1, lens, 1, 16, 1, 0);
    for (size_t i = 0; i < b.n_out; i++)
        b.k[i] = 0.25f;
    cr_assert_eq(run(&b.p, 2), ATTN_OK);
    cr_expect(max_error(&b, 1) <= TOL);
    free_batch(&b);
}

/* The longest sequences the service accepts, checked on sampled rows. */
Test(fused_kernel, long_sequences, .timeout = 120) {
    const int32_t causal_len[1] = {32768}, full_len[1] = {16384};
    batch b = make_batch(1, causal_len, 1, 16, 1, 0);
    cr_assert_eq(run(&b.p, 2), ATTN_OK);
    cr_expect(max_error(&b, 1021) <= TOL);
    free_batch(&b);
    b = make_batch(1, full_len, 1, 8, 0, 3);
    cr_assert_eq(run(&b.p, 2), ATTN_OK);
    cr_expect(max_error(&b, 1531) <= TOL);
    free_batch(&b);
}

/* ---- determinism, workspace, arguments ------------------------------------------- */

/* Each output row is computed by one task whatever the thread count, so the
 * results are bit-identical on 1, 2 and 3 threads. */
Test(fused_kernel, same_bits_on_any_thread_count) {
    const int32_t lens[3] = {200, 0, 131};
    batch b = make_batch(3, lens, 3, 64, 1, 0);
    cr_assert_eq(run(&b.p, 1), ATTN_OK);
    float *first = malloc(b.n_out * sizeof *first);
    cr_assert(first);
    memcpy(first, b.out, b.n_out * sizeof *first);
    for (int nt = 2; nt <= 3; nt++) {
        memset(b.out, 0, b.n_out * sizeof *b.out);
        cr_assert_eq(run(&b.p, nt), ATTN_OK);
        cr_expect(memcmp(first, b.out, b.n_out * sizeof *first) == 0, "%d threads differ", nt);
    }
    free(first);
    free_batch(&b);
}

Test(fused_kernel, workspace_grows_with_threads_not_length) {
    attn_shape s = {4, 40000, 32768, 12, 64, 1, 0, 0, 0}, shorter = s;
    shorter.max_seqlen = 128;
    cr_expect_eq(be->workspace_size(&s, 2), be->workspace_size(&shorter, 2));
    const size_t one = be->workspace_size(&s, 1), two = be->workspace_size(&s, 2);
    cr_expect(two > one && two - one == be->workspace_size(&s, 3) - two);
    cr_expect(two - one < (size_t)1 << 20, "per-worker workspace %zu bytes", two - one);
}

Test(fused_kernel, refuses_bad_calls) {
    const int32_t lens[2] = {5, 9};
    batch b = make_batch(2, lens, 2, 8, 0, 0);
    attn_parallel par = attn_parallel_serial;
    const size_t bytes = be->workspace_size(&b.p.shape, 1);
    void *ws = aligned_alloc(64, (bytes + 63) / 64 * 64);
    cr_assert(ws);

    cr_expect_eq(be->forward(&b.p, ws, bytes, &par), ATTN_OK);
    cr_expect_eq(be->forward(&b.p, ws, bytes - 1, &par), ATTN_EWORKSPACE);
    cr_expect_eq(be->forward(&b.p, NULL, bytes, &par), ATTN_EWORKSPACE);
    cr_expect_eq(be->forward(&b.p, ws, bytes, NULL), ATTN_EINVAL);
    cr_expect_eq(be->forward(NULL, ws, bytes, &par), ATTN_EINVAL);

    attn_problem bad = b.p;
    const int32_t cu_bad[3] = {0, 9, 5};
    bad.cu_seqlens = cu_bad;
    cr_expect_eq(be->forward(&bad, ws, bytes, &par), ATTN_EINVAL);
    bad = b.p;
    bad.k_stride = 15; /* < H·D */
    cr_expect_eq(be->forward(&bad, ws, bytes, &par), ATTN_EINVAL);

    char why[128] = "";
    attn_shape wide = b.p.shape;
    wide.head_dim = FUSED_MAX_HEAD_DIM + 1;
    cr_expect_eq(be->supports(&wide, why, sizeof why), ATTN_EUNSUPPORTED);
    cr_expect(strstr(why, "head_dim") != NULL, "reason: %s", why);
    cr_expect_eq(be->supports(&b.p.shape, NULL, 0), ATTN_OK);
    free(ws);
    free_batch(&b);
}

Test(fused_kernel, empty_batch_and_path_name) {
    const int32_t lens[2] = {0, 0};
    batch b = make_batch(2, lens, 1, 8, 1, 0);
    cr_expect_eq(run(&b.p, 2), ATTN_OK);
    free_batch(&b);
    cr_assert(attn_simd_force(ATTN_SIMD_PORTABLE) == 0);
    cr_expect_str_eq(be->simd_path(), "portable");
    attn_simd_unforce();
    cr_expect_str_eq(be->simd_path(), attn_simd_name(attn_simd_detect()));
}

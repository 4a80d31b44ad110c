/* test_blas_threads.c — the BLAS we link must give correct results when the
 * service's workers call cblas_sgemm at the same time.
 *
 * The model splits each GEMM over the pool, so two workers are always inside
 * cblas_sgemm together. Debian's single-threaded OpenBLAS takes no lock when
 * it hands out its packing buffers, and about one call in ten thousand then
 * returns a corrupt product (seen as flaky golden embeddings). This test
 * makes many small concurrent calls, the shape that hits it most (12 token
 * rows, MiniLM's 384×384 weight), and demands bit-identical results. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attn_ref.h"

enum { M = 12, N = 384, K = 384, CALLS = 30000, WORKERS = 2 };

typedef struct {
    float a[M * K], c[M * N], want[M * N];
    const float *b; /* (N, K) shared, as a weight is */
    int bad;
} blas_worker;

static void gemm(float *c, const float *a, const float *b) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
}

static void *worker_main(void *arg) {
    blas_worker *w = arg;
    for (int i = 0; i < CALLS; i++) {
        gemm(w->c, w->a, w->b);
        w->bad += memcmp(w->c, w->want, sizeof w->c) != 0;
    }
    return NULL;
}

Test(blas, concurrent_sgemm_is_exact, .timeout = 300) {
    /* As the model does at load: each call runs on its caller's thread. */
    openblas_set_num_threads(1);
    test_rng r = {99};
    float *b = malloc(sizeof(float) * N * K);
    blas_worker *w = calloc(WORKERS, sizeof *w);
    cr_assert(b && w);
    for (int i = 0; i < N * K; i++)
        b[i] = rng_normal(&r);
    for (int t = 0; t < WORKERS; t++) {
        for (int i = 0; i < M * K; i++)
            w[t].a[i] = rng_normal(&r);
        w[t].b = b;
        gemm(w[t].want, w[t].a, b);
    }
    pthread_t th[WORKERS];
    for (int t = 0; t < WORKERS; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
    for (int t = 0; t < WORKERS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < WORKERS; t++)
        cr_expect_eq(w[t].bad, 0, "worker %d: %d of %d concurrent sgemm calls were wrong", t,
                     w[t].bad, CALLS);
    free(w);
    free(b);
}

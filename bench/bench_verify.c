/* bench_verify.c — what shadow verification costs, measured in process so
 * that a shared machine's noise does not swamp it: the model's forward on a
 * batch, the copy a sampled batch costs the compute thread (verify_capture,
 * timed inside the attention tap), and the float64 check the checker thread
 * then runs. The expected hot-path overhead at a sample rate r is
 * r × capture / forward; the check runs off the hot path, on a spare core.
 *
 *   build/bench_verify [--model DIR] [--threads N] [--reps R] [--backend fused|naive]
 *
 * Prints one Markdown row per batch shape (B sequences × L tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "server/ops/verify.h"

typedef struct tap_ctx {
    verifier *v;
    const attn_backend *backend;
    double capture_s; /* of the last capture */
    int captured;
} tap_ctx;

static void tap(const attn_problem *p, int layer, void *arg) {
    tap_ctx *t = arg;
    const double t0 = now_s();
    t->captured = verify_capture(t->v, p, t->backend, layer, 1);
    t->capture_s = now_s() - t0;
}

int main(int argc, char **argv) {
    const char *dir = "models/all-MiniLM-L6-v2", *bname = "fused";
    int nthreads = 2, reps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0)
            nthreads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--backend") == 0)
            bname = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [--model DIR] [--threads N] [--reps R] [--backend B]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 1000 || nthreads < 1) {
        fprintf(stderr, "bench_verify: reps 1..1000, threads >= 1\n");
        return 2;
    }
    char err[512];
    bert_model *m = NULL;
    if (bert_load(dir, &m, err, sizeof err) != BERT_OK) {
        fprintf(stderr, "bench_verify: %s\n", err);
        return 1;
    }
    const bert_config *c = bert_get_config(m);
    const attn_backend *backend = attn_backend_find(bname);
    if (!backend) {
        fprintf(stderr, "bench_verify: no backend %s\n", bname);
        return 2;
    }
    const int max_tokens = 4096;
    tp_pool *pool = tp_create(nthreads);
    attn_parallel par = tp_parallel(pool);
    bert_workspace *ws = NULL;
    if (!pool || bert_workspace_create(m, max_tokens, nthreads, &backend, 1, &ws, err,
                                       sizeof err) != BERT_OK) {
        fprintf(stderr, "bench_verify: %s\n", err);
        return 1;
    }
    const int D = c->hidden_size / c->num_heads;
    verify_options vo = {.max_tokens = max_tokens,
                         .max_row_floats = c->hidden_size,
                         .max_kv_floats = (int64_t)max_tokens * c->hidden_size,
                         .max_seqs = 16,
                         .max_seqlen = c->max_positions,
                         .max_head_dim = D,
                         .max_rows = 16,
                         .sample_rate = 1.0,
                         .mismatch_threshold = 1024,
                         .window_s = 1,
                         .seed = 1};
    verifier *v = verify_create(&vo, err, sizeof err);
    if (!v) {
        fprintf(stderr, "bench_verify: %s\n", err);
        return 1;
    }
    tap_ctx tc = {.v = v, .backend = backend};

    static const int shapes[][2] = {{16, 12}, {64, 12}, {16, 128}, {4, 512}};
    int32_t *ids = malloc(max_tokens * sizeof *ids), cu[65];
    float *out = malloc((size_t)64 * c->hidden_size * sizeof *out);
    double *fw = malloc((size_t)reps * sizeof *fw), *cap = malloc((size_t)reps * sizeof *cap);
    double *chk = malloc((size_t)reps * sizeof *chk);
    printf("backend %s (%s), %d threads, %d reps, medians; max_rows 16\n\n", backend->name,
           backend->simd_path(), nthreads, reps);
    printf("| batch | forward ms | capture µs (compute thread) | check CPU ms (checker thread) | "
           "hot-path cost at rate 0.001 | at rate 1 |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int B = shapes[s][0], L = shapes[s][1];
        cu[0] = 0;
        for (int b = 0; b < B; b++) {
            cu[b + 1] = cu[b] + L;
            for (int i = 0; i < L; i++)
                ids[cu[b] + i] = i == 0       ? 101
                                 : i == L - 1 ? 102
                                              : 1000 + (b * 7919 + i * 104729) % 20000;
        }
        for (int r = -2; r < reps; r++) { /* two warm-up forwards */
            bert_workspace_set_attn_tap(ws, -1, NULL, NULL);
            double t0 = now_s();
            if (bert_forward(m, ws, backend, &par, ids, cu, B, out, err, sizeof err) != BERT_OK) {
                fprintf(stderr, "bench_verify: %s\n", err);
                return 1;
            }
            const double plain = now_s() - t0;
            const double cpu0 = verify_check_cpu_seconds(v);
            bert_workspace_set_attn_tap(ws, (r + 2) % c->num_layers, tap, &tc);
            bert_forward(m, ws, backend, &par, ids, cu, B, out, err, sizeof err);
            verify_wait_idle(v, 600000);
            /* The checker's own CPU time: its wall time on a busy machine is
             * mostly waiting, at nice 10, for a core. */
            const double check = verify_check_cpu_seconds(v) - cpu0;
            if (r < 0)
                continue;
            if (!tc.captured) {
                fprintf(stderr, "bench_verify: capture refused\n");
                return 1;
            }
            fw[r] = plain;
            cap[r] = tc.capture_s;
            chk[r] = check;
        }
        const double f = median(fw, reps), k = median(cap, reps), q = median(chk, reps);
        printf("| %d × %d tokens | %.2f | %.1f | %.2f | %.5f%% | %.2f%% |\n", B, L, f * 1e3,
               k * 1e6, q * 1e3, 100 * 0.001 * k / f, 100 * k / f);
    }
    uint64_t checked, mismatched, skipped;
    verify_counts(v, &checked, &mismatched, &skipped);
    printf("\n%llu checks, %llu mismatches\n", (unsigned long long)checked,
           (unsigned long long)mismatched);
    verify_destroy(v);
    bert_workspace_free(ws);
    tp_destroy(pool);
    bert_free(m);
    free(ids);
    free(out);
    free(fw);
    free(cap);
    free(chk);
    return mismatched ? 1 : 0;
}

/* bench_precision.c — the reduced-precision plans of the encoder against
 * fp32, in one process: accuracy on the golden sentences and throughput,
 * interleaved so every plan meets the same machine load.
 *
 * Accuracy: the 58 inputs of tests/golden/embeddings.json.gz (mean_normalized)
 * run as one packed batch through each plan; the cosine of each embedding
 * against the fp32 model's (same run) and against PyTorch's (the golden), the
 * lowest and the mean. Throughput: synthetic inputs of L tokens ([CLS],
 * word pieces, [SEP]) in batches of B, every plan timed once per round, the
 * rounds repeated; embeddings/s from the median round.
 *
 *   bench_precision [--model DIR] [--threads 2] [--rounds 7] [--shapes 12x1,12x32,64x32,256x32]
 *                   [--time 0,1,5,9]
 *
 * --time lists the plans (by their row in the accuracy table, from 0) that
 * the throughput part times; all of them by default.
 *
 * Plans (each kind of linear layer: q = QKV, o = attention out, i = FFN in,
 * f = FFN out; 8 = int8, 3 = fp32): fp32, the int8 plan of bert_load_precision
 * and variants that keep the most sensitive GEMMs in fp32; bf16 GEMMs with
 * the fused (fp32) attention and with the bf16 attention backend, the
 * choice of attention for the bf16 precision. Every plan runs the fused
 * attention backend unless it names another. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "tests/golden/golden_io.h"

#define GOLDEN    "tests/golden/embeddings.json.gz"
#define MAX_PLANS 20

typedef struct {
    const char *name;
    bert_plan plan;
    const char *attention; /* backend name; NULL: fused */
} variant;

#define I8  GEMM_INT8
#define F32 GEMM_FP32
#define B16 GEMM_BF16
static const variant plans[] = {
    {"fp32", {{F32, F32, F32, F32}, {0}}, NULL},
    {"int8 all four", {{I8, I8, I8, I8}, {0}}, NULL},
    {"int8, FFN out fp32", {{I8, I8, I8, F32}, {0}}, NULL},
    {"int8, FFN in+out fp32", {{I8, I8, F32, F32}, {0}}, NULL},
    {"int8, QKV fp32", {{F32, I8, I8, I8}, {0}}, NULL},
    {"int8 smooth a=0.5", {{I8, I8, I8, I8}, {.5f, .5f, .5f, .5f}}, NULL},
    {"int8 smooth a=0.4", {{I8, I8, I8, I8}, {.4f, .4f, .4f, .4f}}, NULL},
    {"int8 smooth a=0.6", {{I8, I8, I8, I8}, {.6f, .6f, .6f, .6f}}, NULL},
    {"int8 smooth .5, FFN out .3", {{I8, I8, I8, I8}, {.5f, .5f, .5f, .3f}}, NULL},
    {"int8 smooth .5, FFN out .7", {{I8, I8, I8, I8}, {.5f, .5f, .5f, .7f}}, NULL},
    {"int8 smooth .5, FFN out .85", {{I8, I8, I8, I8}, {.5f, .5f, .5f, .85f}}, NULL},
    {"int8 smooth .5, FFN out fp32", {{I8, I8, I8, F32}, {.5f, .5f, .5f, 0}}, NULL},
    {"bf16, fused attention", {{B16, B16, B16, B16}, {0}}, NULL},
    {"bf16, bf16 attention", {{B16, B16, B16, B16}, {0}}, "bf16"},
    {"fp32, bf16 attention", {{F32, F32, F32, F32}, {0}}, "bf16"},
    {"int8 (bert_int8_plan)", {{I8, I8, I8, I8}, {0}}, NULL}, /* replaced in main */
};
#define NPLANS (int)(sizeof plans / sizeof plans[0])

typedef struct {
    int n, dim;
    int32_t *ids, *cu; /* packed */
    float *emb;        /* [n][dim] PyTorch's */
} golden;

static int golden_load(golden *g) {
    json_error_t jerr;
    json_t *root = golden_load_json(GOLDEN, JSON_ALLOW_NUL, &jerr);
    if (!root) {
        fprintf(stderr, "%s: %s (run from the repository root)\n", GOLDEN, jerr.text);
        return -1;
    }
    json_t *arr = json_object_get(root, "mean_normalized");
    g->n = (int)json_array_size(arr);
    g->cu = calloc((size_t)g->n + 1, sizeof *g->cu);
    for (int i = 0; i < g->n; i++)
        g->cu[i + 1] =
            g->cu[i] + (int32_t)json_array_size(json_object_get(json_array_get(arr, i), "ids"));
    g->dim = (int)json_array_size(json_object_get(json_array_get(arr, 0), "embedding"));
    g->ids = malloc(sizeof *g->ids * (size_t)g->cu[g->n]);
    g->emb = malloc(sizeof *g->emb * (size_t)g->n * g->dim);
    for (int i = 0; i < g->n; i++) {
        json_t *e = json_array_get(arr, (size_t)i);
        json_t *ids = json_object_get(e, "ids"), *emb = json_object_get(e, "embedding");
        for (int t = g->cu[i]; t < g->cu[i + 1]; t++)
            g->ids[t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)(t - g->cu[i])));
        for (int d = 0; d < g->dim; d++)
            g->emb[(size_t)i * g->dim + d] = (float)json_number_value(json_array_get(emb, d));
    }
    json_decref(root);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = "models/all-MiniLM-L6-v2", *shapes_arg = "12x1,12x32,64x32,256x32";
    const char *time_arg = NULL;
    int threads = 2, rounds = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--shapes"))
            shapes_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--time"))
            time_arg = argv[i + 1];
    }
    variant vs[sizeof plans / sizeof plans[0]];
    memcpy(vs, plans, sizeof vs);
    vs[NPLANS - 1].plan = bert_int8_plan;
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines as they come, also into a file */
    golden g;
    if (golden_load(&g))
        return 1;
    int shapes[16][2], nshapes = 0, max_tokens = g.cu[g.n];
    for (const char *s = shapes_arg; *s && nshapes < 16;) {
        int L, B, used = 0;
        if (sscanf(s, "%dx%d%n", &L, &B, &used) != 2)
            break;
        shapes[nshapes][0] = L;
        shapes[nshapes++][1] = B;
        max_tokens = L * B > max_tokens ? L * B : max_tokens;
        s += used + (s[used] == ',');
    }
    tp_pool *pool = tp_create(threads);
    attn_parallel par = tp_parallel(pool);
    const attn_backend *be[MAX_PLANS];
    bert_model *m[MAX_PLANS] = {0};
    bert_workspace *ws[MAX_PLANS] = {0};
    const char *name[MAX_PLANS];
    int np = 0;
    for (int i = 0; i < NPLANS; i++) {
        char err[512];
        be[np] = attn_backend_find(vs[i].attention ? vs[i].attention : "fused");
        const attn_shape bounds = {.batch = 1024,
                                   .total_tokens = max_tokens,
                                   .max_seqlen = max_tokens,
                                   .heads = 1,
                                   .head_dim = 32};
        if (!be[np] || be[np]->supports(&bounds, err, sizeof err) != ATTN_OK) {
            printf("%-24s not run: attention %s: %s\n", vs[i].name, vs[i].attention,
                   be[np] ? err : "unknown backend");
            continue;
        }
        if (bert_load_plan(dir, &vs[i].plan, &m[np], err, sizeof err) != BERT_OK ||
            bert_workspace_create(m[np], max_tokens, threads, &be[np], 1, &ws[np], err,
                                  sizeof err) != BERT_OK) {
            printf("%-24s not run: %s\n", vs[i].name, err);
            if (i == 0)
                return 1;
            continue;
        }
        name[np++] = vs[i].name;
    }
    /* Accuracy. */
    const int C = g.dim;
    float *out = malloc(sizeof(float) * (size_t)g.n * C * np);
    printf("accuracy on %d golden inputs (cosine of the sentence embeddings)\n", g.n);
    printf("%2s %-30s %12s %12s %12s %12s\n", "", "plan", "min vs fp32", "mean vs fp32",
           "min vs torch", "mean vs torch");
    for (int k = 0; k < np; k++) {
        char err[256];
        float *o = out + (size_t)k * g.n * C;
        if (bert_forward(m[k], ws[k], be[k], &par, g.ids, g.cu, g.n, o, err, sizeof err)) {
            printf("forward failed: %s\n", err);
            return 1;
        }
        double mn = 2, mean = 0, mnt = 2, meant = 0;
        for (int i = 0; i < g.n; i++) {
            const double c = golden_cosine(o + (size_t)i * C, out + (size_t)i * C, C);
            const double t = golden_cosine(o + (size_t)i * C, g.emb + (size_t)i * C, C);
            mn = fmin(mn, c);
            mnt = fmin(mnt, t);
            mean += c / g.n;
            meant += t / g.n;
        }
        printf("%2d %-30s %12.6f %12.6f %12.6f %12.6f\n", k, name[k], mn, mean, mnt, meant);
    }
    /* Throughput, interleaved, of the plans asked for. */
    int timed[MAX_PLANS], nt = 0;
    for (int k = 0; k < np; k++) {
        char key[8];
        snprintf(key, sizeof key, "%d", k);
        int want = !time_arg;
        for (const char *t = time_arg; t && *t; t += strcspn(t, ",") + (t[strcspn(t, ",")] == ','))
            want |= strncmp(t, key, strlen(key)) == 0 && strcspn(t, ",") == strlen(key);
        if (want)
            timed[nt++] = k;
    }
    int32_t *ids = malloc(sizeof *ids * (size_t)max_tokens), *cu = malloc(sizeof *cu * 1025);
    float *emb = malloc(sizeof(float) * (size_t)C * 1024);
    printf("\nthroughput, %d threads, median of %d interleaved rounds (embeddings/s)\n", threads,
           rounds);
    printf("%-10s", "LxB");
    for (int j = 0; j < nt; j++)
        printf(" %22.22s", name[timed[j]]);
    printf("\n");
    for (int s = 0; s < nshapes; s++) {
        const int L = shapes[s][0], B = shapes[s][1];
        for (int b = 0; b <= B; b++)
            cu[b] = b * L;
        for (int t = 0; t < L * B; t++)
            ids[t] = t % L == 0 ? 101 : t % L == L - 1 ? 102 : 2000 + (t * 7919) % 20000;
        double tm[MAX_PLANS][64];
        for (int r = 0; r <= rounds && r < 64; r++)
            for (int j = 0; j < nt; j++) {
                const int k = timed[j];
                char err[256];
                const double t0 = now_s();
                bert_forward(m[k], ws[k], be[k], &par, ids, cu, B, emb, err, sizeof err);
                if (r > 0) /* round 0 warms up */
                    tm[k][r - 1] = now_s() - t0;
            }
        printf("%4dx%-5d", L, B);
        const double base = median(tm[timed[0]], rounds);
        for (int j = 0; j < nt; j++) {
            const double med = median(tm[timed[j]], rounds);
            printf(" %14.1f (%4.2fx)", B / med, base / med);
        }
        printf("\n");
    }
    for (int k = 0; k < np; k++) {
        bert_workspace_free(ws[k]);
        bert_free(m[k]);
    }
    tp_destroy(pool);
    return 0;
}

/* selftest.c — the start-up self-test (see selftest.h): a fixed plan of
 * cases, deterministic inputs, the backend's forward, and the float64
 * reference on every row (or sampled rows for the long case). */
#include "selftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the plan ------------------------------------------------------------------- */

#define MAX_SEQS 8

typedef struct case_plan {
    const char *name;
    int32_t lens[MAX_SEQS]; /* sequence lengths, packed in this order */
    int nseqs;
    int heads, head_dim;
    int causal;
    int qkv;      /* 1: Q, K, V interleaved in one [T][3][H][D] buffer (the model's
                     projection); 0: three dense [T][H][D] tensors (the endpoint's) */
    float amp;    /* q and k are N(0, 1)·amp: larger scores stress the online softmax */
    int sampled;  /* 1: compare sampled rows; 0: every row */
    int rel_bias; /* 1: a relative position bias over the case's distances */
    int kv_heads; /* attn_shape.kv_heads: 0, or fewer K/V heads than heads */
    int window;   /* attn_shape.window: 0, or the sliding window */
} case_plan;

/* A typical /v1/attention request batch, and an odd head_dim that takes a
 * kernel's generic (unspecialised) column loop. */
#define API_HEADS     4
#define API_HEAD_DIM  64
#define API2_HEADS    4
#define API2_HEAD_DIM 40

static int32_t clip(int32_t len, int32_t max) {
    return len < max ? len : max;
}

/* Lengths 1, 15, 16, 17, 64, 129 sit on both sides of the 16-row and 64-row
 * tiles kernels use; the zero-length sequence in the middle checks that an
 * empty sequence neither writes nor shifts its neighbours. All clipped to the
 * model's longest input. A backend that declares grouped K/V heads or a
 * window (attention.h) is also run on those, at fixed /v1/attention-like
 * shapes: it is handed them whatever the model, and a backend that breaks
 * them must be refused at start, not found out by a model that uses them. */
static int plan_cases(const attn_selftest_spec *s, const attn_backend *b, case_plan *out) {
    const int32_t L = s->max_seqlen >= 1 ? s->max_seqlen : 1;
    int n = 0;
    case_plan edges = {.name = "model: tile-edge lengths packed with an empty one",
                       .lens = {1, 15, 16, 0, 17, 64, 129},
                       .nseqs = 7,
                       .heads = s->heads,
                       .head_dim = s->head_dim,
                       .qkv = 1,
                       .amp = 1.0f,
                       .rel_bias = s->rel_bias};
    for (int i = 0; i < edges.nseqs; i++)
        edges.lens[i] = clip(edges.lens[i], L);
    out[n++] = edges;
    edges.name = "model: tile-edge lengths packed, causal";
    edges.causal = 1;
    out[n++] = edges;
    out[n++] = (case_plan){.name = "model: large scores",
                           .lens = {clip(33, L), clip(80, L)},
                           .nseqs = 2,
                           .heads = s->heads,
                           .head_dim = s->head_dim,
                           .qkv = 1,
                           .amp = 3.0f,
                           .rel_bias = s->rel_bias};
    out[n++] = (case_plan){.name = "model: longest input",
                           .lens = {L},
                           .nseqs = 1,
                           .heads = s->heads,
                           .head_dim = s->head_dim,
                           .qkv = 1,
                           .amp = 1.0f,
                           .sampled = 1,
                           .rel_bias = s->rel_bias};
    out[n++] = (case_plan){.name = "api: three requests",
                           .lens = {50, 128, 7},
                           .nseqs = 3,
                           .heads = API_HEADS,
                           .head_dim = API_HEAD_DIM,
                           .amp = 1.0f};
    out[n++] = (case_plan){.name = "api: odd head_dim, causal",
                           .lens = {3, 77},
                           .nseqs = 2,
                           .heads = API2_HEADS,
                           .head_dim = API2_HEAD_DIM,
                           .causal = 1,
                           .amp = 1.0f};
    /* A window longer than a 16-key tile (20) and one shorter (7), both
     * far shorter than the longest sequence and than a 128-row block, so
     * key tiles are skipped and the window's edges masked on both sides;
     * two K/V heads for four query heads, and one. */
    if (b->gqa)
        out[n++] = (case_plan){.name = b->window ? "api: 4 query heads over 2 K/V heads, window 20"
                                                 : "api: 4 query heads over 2 K/V heads",
                               .lens = {1, 17, 300, 0, 64},
                               .nseqs = 5,
                               .heads = API_HEADS,
                               .head_dim = API_HEAD_DIM,
                               .amp = 1.0f,
                               .kv_heads = 2,
                               .window = b->window ? 20 : 0};
    if (b->window)
        out[n++] = (case_plan){.name = b->gqa ? "api: window 7, causal, odd head_dim, one K/V head"
                                              : "api: window 7, causal, odd head_dim",
                               .lens = {3, 150, 77},
                               .nseqs = 3,
                               .heads = API2_HEADS,
                               .head_dim = API2_HEAD_DIM,
                               .causal = 1,
                               .amp = 1.0f,
                               .kv_heads = b->gqa ? 1 : 0,
                               .window = 7};
    return n;
}

static attn_shape shape_of(const case_plan *c) {
    attn_shape s = {.batch = c->nseqs,
                    .heads = c->heads,
                    .head_dim = c->head_dim,
                    .causal = c->causal,
                    .rel_bias = c->rel_bias,
                    .kv_heads = c->kv_heads,
                    .window = c->window};
    for (int i = 0; i < c->nseqs; i++) {
        s.total_tokens += c->lens[i];
        s.max_seqlen = c->lens[i] > s.max_seqlen ? c->lens[i] : s.max_seqlen;
    }
    return s;
}

/* Rows a sampled case compares: the first and last of every sequence (where
 * remainder loops go wrong), the first and last of every 64-row block, and
 * every 13th row between (13 is prime to every tile size). The reference
 * costs O(length) per row, so this keeps the long case near the short ones. */
static int32_t sample_rows(const case_plan *c, int32_t *rows) {
    int32_t n = 0, lo = 0;
    for (int b = 0; b < c->nseqs; lo += c->lens[b++])
        for (int32_t i = 0; i < c->lens[b]; i++)
            if (!c->sampled || i == 0 || i == c->lens[b] - 1 || i % 64 == 0 || i % 64 == 63 ||
                i % 13 == 0)
                rows[n++] = lo + i;
    return n;
}

/* ---- inputs ------------------------------------------------------------------------ */

/* xorshift64*, so every run on every machine sees the same inputs. */
typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

/* Standard normals by Box–Muller, both of each pair used; u1 is kept away
 * from 0. */
typedef struct {
    rng r;
    float spare;
    int have_spare;
} normal_gen;

static float next_normal(normal_gen *g) {
    if (g->have_spare) {
        g->have_spare = 0;
        return g->spare;
    }
    const double u1 = ((double)(rng_next(&g->r) >> 11) + 1.0) / 9007199254740993.0;
    const double u2 = (double)(rng_next(&g->r) >> 11) / 9007199254740992.0;
    const double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
    g->spare = (float)(rad * sin(ang));
    g->have_spare = 1;
    return (float)(rad * cos(ang));
}

/* Rows per task of the parallel check. */
#define CHECK_CHUNK 4

/* Buffers for the largest case, carved from one allocation. */
typedef struct buffers {
    float *in;           /* Q, K, V: 3·T·H·D floats */
    float *out;          /* T·H·D */
    float *bias;         /* H·(2·L − 1): the relative position bias, for cases with one */
    int32_t *cu;         /* B + 1 */
    int32_t *rows;       /* T */
    double *scratch;     /* attn_check_scratch doubles per worker */
    size_t scratch_each; /* doubles */
    attn_check *partial; /* one per CHECK_CHUNK rows */
    void *ws;            /* the backend's workspace */
    size_t ws_bytes;
    void *block;
} buffers;

typedef struct sizes {
    size_t in, out, bias, cu, rows, scratch, partial, ws;
    size_t scratch_each; /* doubles per worker */
} sizes;

static size_t round64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

static sizes sizes_of(const attn_backend *b, const case_plan *plan, int n, int nthreads) {
    sizes z = {0};
    for (int i = 0; i < n; i++) {
        const attn_shape s = shape_of(&plan[i]);
        const size_t row = (size_t)s.heads * (size_t)s.head_dim, T = (size_t)s.total_tokens;
        const size_t ws =
            attn_backend_supports(b, &s, NULL, 0) == ATTN_OK ? b->workspace_size(&s, nthreads) : 0;
#define UP(field, bytes) z.field = round64(bytes) > z.field ? round64(bytes) : z.field
        UP(in, 3 * T * row * sizeof(float));
        UP(out, T * row * sizeof(float));
        UP(bias, s.rel_bias ? (size_t)s.heads * (2 * (size_t)s.max_seqlen + 1) * sizeof(float) : 0);
        UP(cu, ((size_t)s.batch + 1) * sizeof(int32_t));
        UP(rows, T * sizeof(int32_t));
        UP(partial, (T / CHECK_CHUNK + 1) * sizeof(attn_check));
        UP(ws, ws);
#undef UP
        const size_t each = attn_check_scratch(&s);
        z.scratch_each = each > z.scratch_each ? each : z.scratch_each;
    }
    z.scratch = round64(z.scratch_each * sizeof(double) * (size_t)(nthreads > 0 ? nthreads : 1));
    return z;
}

static size_t total_of(const sizes *z) {
    return z->in + z->out + z->bias + z->cu + z->rows + z->scratch + z->partial + z->ws;
}

size_t attn_selftest_bytes(const attn_backend *backend, const attn_selftest_spec *spec,
                           int nthreads) {
    case_plan plan[ATTN_SELFTEST_MAX_CASES];
    const int n = plan_cases(spec, backend, plan);
    const sizes z = sizes_of(backend, plan, n, nthreads);
    return total_of(&z);
}

static int buffers_alloc(buffers *bf, const sizes *z) {
    char *p = aligned_alloc(64, total_of(z) > 0 ? total_of(z) : 64);
    if (!p)
        return -1;
    /* Every region's size is a multiple of 64, so each starts aligned. */
    bf->block = p;
    bf->in = (void *)p;
    bf->out = (void *)(p += z->in);
    bf->bias = (void *)(p += z->out);
    bf->cu = (void *)(p += z->bias);
    bf->rows = (void *)(p += z->cu);
    bf->scratch = (void *)(p += z->rows);
    bf->partial = (void *)(p += z->scratch);
    bf->ws = z->ws ? (void *)(p += z->partial) : NULL;
    bf->scratch_each = z->scratch_each;
    bf->ws_bytes = z->ws;
    return 0;
}

/* Fills the inputs of case c (seeded by its index) and returns its problem.
 * The output starts as NaN, so an element a backend never writes fails. */
static attn_problem fill_case(const case_plan *c, int index, buffers *bf) {
    const attn_shape s = shape_of(c);
    const size_t row = (size_t)s.heads * (size_t)s.head_dim, T = (size_t)s.total_tokens;
    const size_t kv_row = (size_t)attn_kv_heads(&s) * (size_t)s.head_dim; /* <= row */
    bf->cu[0] = 0;
    for (int b = 0; b < c->nseqs; b++)
        bf->cu[b + 1] = bf->cu[b] + c->lens[b];
    attn_problem p;
    if (c->qkv) {
        attn_problem_dense(&p, s, bf->cu, bf->in, bf->in + row, bf->in + 2 * row, bf->out);
        p.q_stride = p.k_stride = p.v_stride = 3 * row;
    } else {
        attn_problem_dense(&p, s, bf->cu, bf->in, bf->in + T * row, bf->in + 2 * T * row, bf->out);
    }
    normal_gen g = {.r = {0x9E3779B97F4A7C15ULL ^ (uint64_t)(index + 1) * 0xD1B54A32D192ED03ULL}};
    /* The dense tensors keep their full-width slots, so a case's buffers
     * are sized as if every head had its own K and V. */
    for (size_t t = 0; t < T; t++)
        for (size_t i = 0; i < row; i++) {
            ((float *)p.q)[t * p.q_stride + i] = next_normal(&g) * c->amp;
            if (i < kv_row) {
                ((float *)p.k)[t * p.k_stride + i] = next_normal(&g) * c->amp;
                ((float *)p.v)[t * p.v_stride + i] = next_normal(&g);
            }
            p.out[t * p.out_stride + i] = NAN;
        }
    if (s.rel_bias) {
        /* N(0, 2): as large as the scores, so a backend that drops or
         * misplaces it fails. */
        p.rel_span = s.max_seqlen > 0 ? s.max_seqlen : 1;
        const size_t n = (size_t)s.heads * (2 * (size_t)p.rel_span - 1);
        for (size_t i = 0; i < n; i++)
            bf->bias[i] = 2.0f * next_normal(&g);
        p.rel_bias = bf->bias;
    }
    return p;
}

/* ---- the run ----------------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void describe_shape(char *buf, size_t len, const attn_shape *s) {
    snprintf(buf, len, "B=%d T=%d H=%d D=%d causal=%d", s->batch, s->total_tokens, s->heads,
             s->head_dim, s->causal);
}

/* ---- the check, on the pool -----------------------------------------------------------
 * The float64 reference costs more than most forwards, so its rows are split
 * over the workers. Each chunk of rows fills its own partial result and the
 * partials are merged in row order, keeping the first of equal worst
 * elements: the outcome is the same as one attn_check_rows over every row. */

typedef struct check_ctx {
    const attn_problem *p;
    const buffers *bf;
    int32_t nrows;
    attn_precision prec; /* the backend's: which bound of reference.h applies */
} check_ctx;

static void check_task(void *arg, size_t task, int worker) {
    const check_ctx *c = arg;
    const int32_t lo = (int32_t)task * CHECK_CHUNK;
    const int32_t n = c->nrows - lo < CHECK_CHUNK ? c->nrows - lo : CHECK_CHUNK;
    attn_check *part = &c->bf->partial[task];
    memset(part, 0, sizeof *part);
    attn_check_rows_as(c->p, c->prec, c->bf->rows + lo, n,
                       c->bf->scratch + (size_t)worker * c->bf->scratch_each, part);
}

static void merge_check(attn_check *into, const attn_check *part) {
    if (part->bad > 0 && (into->bad == 0 || part->max_ratio > into->max_ratio)) {
        into->bad_seq = part->bad_seq;
        into->bad_token = part->bad_token;
        into->bad_head = part->bad_head;
        into->bad_dim = part->bad_dim;
        into->bad_got = part->bad_got;
        into->bad_want = part->bad_want;
        into->bad_bound = part->bad_bound;
    }
    into->elements += part->elements;
    into->bad += part->bad;
    into->max_abs_err = fmax(into->max_abs_err, part->max_abs_err);
    into->sum_abs_err += part->sum_abs_err;
    into->max_ratio = fmax(into->max_ratio, part->max_ratio);
}

static void check_parallel(const attn_problem *p, attn_precision prec, const buffers *bf,
                           int32_t nrows, const attn_parallel *par, attn_check *res) {
    const size_t ntasks = ((size_t)nrows + CHECK_CHUNK - 1) / CHECK_CHUNK;
    check_ctx c = {.p = p, .bf = bf, .nrows = nrows, .prec = prec};
    par->parallel_for(par->impl, ntasks, check_task, &c);
    for (size_t i = 0; i < ntasks; i++)
        merge_check(res, &bf->partial[i]);
}

/* Runs one case into *cr; a failure writes why into reason. */
static void run_case(const attn_backend *b, const case_plan *c, int index, const attn_parallel *par,
                     buffers *bf, attn_selftest_case *cr, char *reason, size_t reason_len) {
    const double t0 = now_ms();
    char shape[96], why[160] = "";
    memset(cr, 0, sizeof *cr);
    cr->name = c->name;
    cr->shape = shape_of(c);
    describe_shape(shape, sizeof shape, &cr->shape);
    attn_problem p = fill_case(c, index, bf);
    cr->status = attn_backend_supports(b, &cr->shape, why, sizeof why);
    if (cr->status == ATTN_OK)
        cr->status = b->forward(&p, bf->ws, bf->ws_bytes, par);
    if (cr->status != ATTN_OK) {
        snprintf(reason, reason_len, "case '%s' (%s): %s%s%s", c->name, shape,
                 attn_strerror(cr->status), why[0] ? ": " : "", why);
        cr->ms = now_ms() - t0;
        return;
    }
    cr->rows_checked = sample_rows(c, bf->rows);
    check_parallel(&p, b->precision, bf, cr->rows_checked, par, &cr->check);
    cr->passed = cr->check.bad == 0 && cr->check.elements > 0;
    if (!cr->passed) {
        const attn_check *k = &cr->check;
        snprintf(reason, reason_len,
                 "case '%s' (%s): seq %d token %d (row %d of the sequence) head %d dim %d: got "
                 "%.9g, want %.9g, |error| %.3g > bound %.3g; %lld of %lld elements past the "
                 "bound",
                 c->name, shape, k->bad_seq, k->bad_token, k->bad_token - bf->cu[k->bad_seq],
                 k->bad_head, k->bad_dim, (double)k->bad_got, k->bad_want,
                 fabs((double)k->bad_got - k->bad_want), k->bad_bound, (long long)k->bad,
                 (long long)k->elements);
    }
    cr->ms = now_ms() - t0;
}

int attn_selftest_run(const attn_backend *backend, const attn_selftest_spec *spec,
                      const attn_parallel *par, attn_selftest_result *res) {
    const double t0 = now_ms();
    memset(res, 0, sizeof *res);
    res->backend = backend;
    res->simd = backend->simd_path();
    case_plan plan[ATTN_SELFTEST_MAX_CASES];
    const int n = plan_cases(spec, backend, plan);
    const sizes z = sizes_of(backend, plan, n, par->nthreads);
    buffers bf;
    if (buffers_alloc(&bf, &z) != 0) {
        snprintf(res->reason, sizeof res->reason, "out of memory (%zu bytes)", total_of(&z));
        return -1;
    }
    /* The failing case reported is the one with a forward error, else the
     * one whose worst element is furthest past its bound. */
    double worst = -1.0;
    int64_t elements = 0;
    double sum_err = 0.0;
    for (int i = 0; i < n; i++) {
        attn_selftest_case *cr = &res->cases[i];
        char reason[sizeof res->reason] = "";
        run_case(backend, &plan[i], i, par, &bf, cr, reason, sizeof reason);
        const double severity = cr->status != ATTN_OK ? INFINITY : cr->check.max_ratio;
        if (!cr->passed && (worst < 0 || severity > worst)) {
            worst = severity;
            snprintf(res->reason, sizeof res->reason, "%s", reason);
        }
        res->cases_passed += cr->passed;
        res->max_abs_err = fmax(res->max_abs_err, cr->check.max_abs_err);
        res->max_ratio = fmax(res->max_ratio, cr->check.max_ratio);
        sum_err += cr->check.sum_abs_err;
        elements += cr->check.elements;
    }
    res->ncases = n;
    res->passed = res->cases_passed == n;
    res->mean_abs_err = elements > 0 ? sum_err / (double)elements : 0.0;
    free(bf.block);
    res->ms = now_ms() - t0;
    return 0;
}

/* ---- results kept for the process ---------------------------------------------------- */

static attn_selftest_result kept[ATTN_MAX_BACKENDS];
static bool have[ATTN_MAX_BACKENDS];

static int slot_of(const attn_backend *b) {
    const attn_backend *const *all = attn_backends();
    for (int i = 0; b && i < ATTN_MAX_BACKENDS && all[i]; i++)
        if (all[i] == b)
            return i;
    return -1;
}

void attn_selftest_keep(const attn_selftest_result *r) {
    const int i = slot_of(r->backend);
    if (i < 0)
        return;
    kept[i] = *r;
    have[i] = true;
}

const attn_selftest_result *attn_selftest_kept(const attn_backend *b) {
    const int i = slot_of(b);
    return i >= 0 && have[i] ? &kept[i] : NULL;
}

bool backend_passed_selftest(const attn_backend *b) {
    const attn_selftest_result *r = attn_selftest_kept(b);
    return r && r->passed;
}

void attn_selftest_forget(void) {
    memset(have, 0, sizeof have);
}

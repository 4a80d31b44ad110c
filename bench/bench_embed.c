/* bench_embed.c — in-process throughput of the embedding pipeline: the real
 * tokenizer and bert_forward on the service's thread pool, per attention
 * backend, thread count, input length and batch size.
 *
 * Inputs are made from a fixed list of common words that are one WordPiece
 * each, so a text of n - 2 words is exactly n tokens with [CLS] and [SEP];
 * with a vocabulary where fewer than 32 of them are one piece (a small
 * SentencePiece model), words of up to 8 pieces are drawn and counted by
 * their pieces instead, so the texts still have exactly n tokens. A word is
 * counted both alone (the first of a text) and after a space (the others):
 * a byte-level BPE (ModernBERT's, Qwen3's) gives " w" pieces of its own. Every text
 * is checked with the tokenizer before anything is timed. A case
 * (backend × threads × length × batch) is one warm-up run, then the median of
 * the reps; one run tokenizes the batch on the calling thread (as a request
 * handler would) and runs bert_forward.
 *
 * Besides inputs/s and tokens/s each case reports where the time goes:
 * tok% (tokenizer), attn% (the attention backend, timed inside the forward
 * through a wrapper around the backend table) and gemm% — the model's four
 * GEMMs per layer, timed standalone through gemm_run (what the forward calls)
 * on the model's exact shapes and weight sizes (one weight set per layer, as
 * the model streams them), packed for the case's precision, without
 * epilogues. gemm GFLOP/s is divided by this machine's peak for that
 * precision, measured on the same pool (kernels/peak.h): the FP32 FMA loop,
 * or the vdpbf16ps loop for bf16.
 *
 * --pairs Q scores pairs instead, as a reranker does: one query (the first
 * text of length Q) with each of a case's batch of texts as its documents,
 * put together by the tokenizer's pair template (tok_encode_pair, inside the
 * timed region) and run with their token types through the model, a
 * cross-encoder (BertForSequenceClassification and kin), whose raw logits
 * are the scores; inputs/s is then pairs/s.
 *
 * --precisions runs the model once per precision (bert_load_precision), the
 * precisions alternating case by case in one process, so their ratio is
 * measured under the same load; a precision this CPU lacks is skipped with
 * the reason.
 *
 * Shared machines: cpu% is process CPU time / (wall time × threads) over the
 * reps; below ~95% other processes took the cores during that case. %pkcpu
 * is GEMM GFLOP per CPU-second against the peak measured the same way: what
 * the GEMMs reach on the cycles they actually got.
 *
 *   bench_embed [--json] [--model DIR] [--backends fused,naive] [--threads N[,1]]
 *               [--lengths 12,64,256] [--batches 1,8,32,128] [--reps 5] [--budget 8]
 *               [--precisions fp32,bf16] [--no-gemm] [--dump-inputs FILE]
 *               [--dump-embeddings FILE] [--pairs Q]
 *
 * --threads 0 means every online core (the default). --budget caps the
 * seconds of timed reps in one case (at least 3 reps run when reps >= 3).
 * --dump-inputs writes the generated texts, one JSON object per length, for
 * the peer benchmarks (bench/embed/peers.py), and exits. --dump-embeddings
 * writes, for every precision and length, the embeddings of all the
 * --batches maximum inputs (the first backend, one packed forward: every
 * precision quantises per token or per weight channel, so an input's
 * embedding does not depend on its batch), one JSON object per line, and
 * exits; peers.py --accuracy compares them with fp32 sentence-transformers.
 * With --pairs, --dump-inputs adds the query to every line and
 * --dump-embeddings writes every pair's logits ("kind": "scores"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/peak.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"
#include "model/bert.h"
#include "model/tokenizer.h"

#define MAX_LIST 16
#define TOK_CAP  8192 /* the longest input: the family models' 8192 positions */

/* ---- options ------------------------------------------------------------------------ */

typedef struct {
    int json, gemm;
    const char *model_dir, *dump_path, *embed_path;
    const char *backends[MAX_LIST];
    int nbackends;
    const char *precisions[MAX_LIST];
    int nprecisions;
    int threads[MAX_LIST];
    int nthreads;
    int lengths[MAX_LIST];
    int nlengths;
    int batches[MAX_LIST];
    int nbatches;
    int reps;
    double budget_s;
    int pair_query; /* --pairs: the query's tokens; 0 embeds texts alone */
} bench_opts;

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--json] [--model DIR] [--backends fused,naive] [--threads N[,1]] "
            "[--lengths 12,64,256] [--batches 1,8,32,128] [--reps 5] [--budget 8] "
            "[--precisions fp32,bf16] [--no-gemm] [--dump-inputs FILE] [--dump-embeddings FILE] "
            "[--pairs Q]\n",
            argv0);
    exit(2);
}

/* Splits a comma list into at most MAX_LIST pointers into s (modified). */
static int split_list(char *s, const char **out) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < MAX_LIST; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

static int int_list(char *s, int *out, int min) {
    const char *parts[MAX_LIST];
    const int n = split_list(s, parts);
    for (int i = 0; i < n; i++) {
        char *end;
        const long v = strtol(parts[i], &end, 10);
        if (*end || v < min || v > 1 << 20)
            return -1;
        out[i] = (int)v;
    }
    return n;
}

static void parse_opts(int argc, char **argv, bench_opts *o) {
    static char backends_default[] = "fused,naive", precisions_default[] = "fp32";
    *o = (bench_opts){.gemm = 1,
                      .model_dir = "models/all-MiniLM-L6-v2",
                      .threads = {0},
                      .nthreads = 1,
                      .lengths = {12, 64, 256},
                      .nlengths = 3,
                      .batches = {1, 8, 32, 128},
                      .nbatches = 4,
                      .reps = 5,
                      .budget_s = 8.0};
    o->nbackends = split_list(backends_default, o->backends);
    o->nprecisions = split_list(precisions_default, o->precisions);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            continue;
        }
        if (strcmp(a, "--no-gemm") == 0) {
            o->gemm = 0;
            continue;
        }
        if (!v)
            usage(argv[0]);
        i++;
        if (strcmp(a, "--model") == 0)
            o->model_dir = v;
        else if (strcmp(a, "--dump-inputs") == 0)
            o->dump_path = v;
        else if (strcmp(a, "--dump-embeddings") == 0)
            o->embed_path = v;
        else if (strcmp(a, "--backends") == 0)
            o->nbackends = split_list(v, o->backends);
        else if (strcmp(a, "--precisions") == 0)
            o->nprecisions = split_list(v, o->precisions);
        else if (strcmp(a, "--threads") == 0)
            o->nthreads = int_list(v, o->threads, 0);
        else if (strcmp(a, "--lengths") == 0)
            o->nlengths = int_list(v, o->lengths, 3);
        else if (strcmp(a, "--batches") == 0)
            o->nbatches = int_list(v, o->batches, 1);
        else if (strcmp(a, "--reps") == 0)
            o->reps = atoi(v);
        else if (strcmp(a, "--budget") == 0)
            o->budget_s = atof(v);
        else if (strcmp(a, "--pairs") == 0) {
            char *end;
            const long q = strtol(v, &end, 10);
            if (*end || q < 3 || q > TOK_CAP)
                usage(argv[0]);
            o->pair_query = (int)q;
        } else
            usage(argv[0]);
    }
    for (int i = 0; i < o->nprecisions; i++)
        if (gemm_precision_parse(o->precisions[i]) < 0)
            usage(argv[0]);
    if (o->nbackends < 1 || o->nprecisions < 1 || o->nthreads < 1 || o->nlengths < 1 ||
        o->nbatches < 1 || o->reps < 1 || o->reps > 64 || o->budget_s <= 0)
        usage(argv[0]);
    const int ncores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int t = 0; t < o->nthreads; t++)
        if (o->threads[t] == 0)
            o->threads[t] = ncores > 0 ? ncores : 1;
}

/* ---- inputs ------------------------------------------------------------------------- */

/* Common English words; those that are not a single WordPiece in the model's
 * vocabulary are dropped at start, so the list works for any BERT vocabulary. */
static const char *const WORDS[] = {
    "the",      "of",         "and",     "to",      "in",      "is",      "was",     "for",
    "on",       "that",       "with",    "as",      "by",      "at",      "from",    "his",
    "her",      "it",         "an",      "were",    "are",     "which",   "this",    "be",
    "has",      "had",        "not",     "first",   "one",     "their",   "after",   "new",
    "who",      "they",       "two",     "she",     "time",    "can",     "all",     "would",
    "there",    "been",       "during",  "into",    "other",   "city",    "when",    "more",
    "world",    "year",       "only",    "state",   "team",    "later",   "about",   "most",
    "school",   "over",       "three",   "between", "some",    "made",    "where",   "film",
    "music",    "known",      "season",  "under",   "while",   "before",  "album",   "game",
    "called",   "group",      "since",   "war",     "both",    "county",  "part",    "life",
    "then",     "university", "high",    "series",  "became",  "number",  "early",   "day",
    "such",     "these",      "well",    "through", "them",    "many",    "four",    "work",
    "family",   "house",      "people",  "north",   "church",  "water",   "river",   "road",
    "light",    "market",     "money",   "power",   "model",   "system",  "data",    "service",
    "report",   "budget",     "review",  "office",  "policy",  "energy",  "health",  "travel",
    "garden",   "winter",     "summer",  "morning", "evening", "student", "teacher", "doctor",
    "question", "answer",     "problem", "result",  "change",  "value",   "price",   "order",
};
#define NWORDS (sizeof WORDS / sizeof WORDS[0])

typedef struct {
    int tokens;  /* per input, [CLS] and [SEP] included */
    char **text; /* [max_batch] */
    size_t *len; /* [max_batch] */
} input_set;

/* --pairs' query: the first text of its length. */
typedef struct {
    int tokens; /* alone, special tokens included */
    char *text;
    size_t len;
} query_text;

/* The words texts are drawn from, and how many pieces each is alone (as
 * a text's first word) and after a space (as any other). */
typedef struct {
    const char *word[NWORDS];
    int first[NWORDS], pieces[NWORDS];
    int n;
} word_list;

/* Pieces of w, after a space when spaced, special tokens left out; 0 when
 * it does not encode. */
static int word_pieces(const tok_tokenizer *tok, const char *w, int spaced) {
    char text[32];
    int32_t ids[16];
    tok_output out = {.ids = ids, .capacity = 16};
    const int n = snprintf(text, sizeof text, "%s%s", spaced ? " " : "", w);
    if (n < 0 || (size_t)n >= sizeof text || tok_encode(tok, text, (size_t)n, 0, &out) != TOK_OK)
        return 0;
    return out.n - tok_num_special(tok);
}

/* The single-piece words (alone and after a space) when the vocabulary has
 * 32 of them, so that one word is one token; else (a small SentencePiece
 * or BPE vocabulary cuts most English words) every word of up to 8 pieces,
 * counted by its pieces. */
static int choose_words(const tok_tokenizer *tok, word_list *wl) {
    int first[NWORDS], pieces[NWORDS], single = 0;
    for (size_t w = 0; w < NWORDS; w++) {
        first[w] = word_pieces(tok, WORDS[w], 0);
        pieces[w] = word_pieces(tok, WORDS[w], 1);
        single += first[w] == 1 && pieces[w] == 1;
    }
    const int max_pieces = single >= 32 ? 1 : 8;
    wl->n = 0;
    for (size_t w = 0; w < NWORDS; w++)
        if (first[w] >= 1 && first[w] <= max_pieces && pieces[w] >= 1 && pieces[w] <= max_pieces) {
            wl->word[wl->n] = WORDS[w];
            wl->first[wl->n] = first[w];
            wl->pieces[wl->n++] = pieces[w];
        }
    if (single == 0 || wl->n < 32) {
        fprintf(stderr,
                "only %d of the %zu words are at most %d pieces (%d one piece) in this "
                "vocabulary\n",
                wl->n, NWORDS, max_pieces, single);
        return -1;
    }
    return 0;
}

/* Text i of nbody pieces: words drawn by a fixed LCG seeded by (nbody, i),
 * so every run and every peer sees the same texts; a word with more pieces
 * than are left gives way to the next one that fits (a single-piece word
 * always does). */
static char *make_text(const word_list *wl, int nbody, int i, size_t *len) {
    size_t cap = 16;
    for (int w = 0; w < wl->n; w++)
        cap = strlen(wl->word[w]) + 1 > cap ? strlen(wl->word[w]) + 1 : cap;
    cap *= (size_t)nbody + 1;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    unsigned state = 2654435761u * (unsigned)(nbody + 1) + 40503u * (unsigned)i;
    size_t n = 0;
    for (int left = nbody, k = 0; left > 0; k++) {
        state = state * 1664525u + 1013904223u;
        const int *cost = k ? wl->pieces : wl->first;
        int w = (int)((state >> 8) % (unsigned)wl->n);
        while (cost[w] > left)
            w = (w + 1) % wl->n;
        left -= cost[w];
        if (k)
            s[n++] = ' ';
        memcpy(s + n, wl->word[w], strlen(wl->word[w]));
        n += strlen(wl->word[w]);
    }
    s[n] = '\0';
    *len = n;
    return s;
}

static void free_inputs(input_set *sets, int nsets, int max_batch) {
    for (int s = 0; s < nsets; s++) {
        for (int i = 0; sets[s].text && i < max_batch; i++)
            free(sets[s].text[i]);
        free(sets[s].text);
        free(sets[s].len);
    }
}

/* Checks that every text of set, paired after q, gives the pieces of both
 * and the pair template's special tokens, nothing cut. */
static int check_pairs(const tok_tokenizer *tok, const query_text *q, const input_set *set,
                       int max_batch) {
    const int nspecial = tok_num_special(tok), npair = tok_num_special_pair(tok);
    const int want = q->tokens - nspecial + set->tokens - nspecial + npair;
    int32_t ids[TOK_CAP], types[TOK_CAP];
    tok_output out = {.ids = ids, .type_ids = types, .capacity = TOK_CAP};
    if (npair < 0) {
        fprintf(stderr, "the tokenizer has no pair template\n");
        return -1;
    }
    for (int i = 0; i < max_batch; i++)
        if (tok_encode_pair(tok, q->text, q->len, set->text[i], set->len[i], TOK_TRUNCATE_NONE,
                            &out) != TOK_OK ||
            out.n != want) {
            fprintf(stderr, "pair %d of length %d (%d expected, at most %d) tokenizes to %d\n", i,
                    set->tokens, want, TOK_CAP, out.n_full);
            return -1;
        }
    return 0;
}

/* Builds max_batch texts per length (and --pairs' query) and checks each
 * one's token count. */
static int make_inputs(const tok_tokenizer *tok, const bench_opts *o, int max_batch,
                       input_set *sets, query_text *q) {
    word_list wl;
    if (choose_words(tok, &wl) != 0)
        return -1;
    const int nspecial = tok_num_special(tok);
    int32_t ids[TOK_CAP];
    tok_output out = {.ids = ids, .capacity = TOK_CAP};
    if (o->pair_query) {
        q->tokens = o->pair_query;
        if (q->tokens <= nspecial || !(q->text = make_text(&wl, q->tokens - nspecial, 0, &q->len)))
            return -1;
    }
    for (int s = 0; s < o->nlengths; s++) {
        input_set *set = &sets[s];
        set->tokens = o->lengths[s];
        set->text = calloc((size_t)max_batch, sizeof *set->text);
        set->len = calloc((size_t)max_batch, sizeof *set->len);
        if (!set->text || !set->len)
            return -1;
        if (set->tokens <= nspecial || set->tokens > TOK_CAP) {
            fprintf(stderr, "length %d: must be in (%d, %d]\n", set->tokens, nspecial, TOK_CAP);
            return -1;
        }
        for (int i = 0; i < max_batch; i++) {
            set->text[i] = make_text(&wl, set->tokens - nspecial, i, &set->len[i]);
            if (!set->text[i])
                return -1;
            if (tok_encode(tok, set->text[i], set->len[i], 0, &out) != TOK_OK ||
                out.n != set->tokens) {
                fprintf(stderr, "input %d of length %d tokenizes to %d tokens\n", i, set->tokens,
                        out.n);
                return -1;
            }
        }
        if (o->pair_query && check_pairs(tok, q, set, max_batch) != 0)
            return -1;
    }
    return 0;
}

static const char *length_name(int tokens) {
    return tokens <= 32 ? "short" : tokens <= 128 ? "medium" : "long";
}

/* One JSON object per length: {"name", "tokens", "texts": [...]}, and with
 * --pairs "query" and "query_tokens". The words are plain ASCII letters, so
 * no escaping is needed. */
static int dump_inputs(const char *path, const input_set *sets, int nsets, int max_batch,
                       const query_text *q) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    for (int s = 0; s < nsets; s++) {
        fprintf(f, "{\"name\": \"%s\", \"tokens\": %d, ", length_name(sets[s].tokens),
                sets[s].tokens);
        if (q->text)
            fprintf(f, "\"query\": \"%s\", \"query_tokens\": %d, ", q->text, q->tokens);
        fprintf(f, "\"texts\": [");
        for (int i = 0; i < max_batch; i++)
            fprintf(f, "%s\"%s\"", i ? ", " : "", sets[s].text[i]);
        fprintf(f, "]}\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* ---- peak ---------------------------------------------------------------------------- */

typedef struct {
    attn_simd path;
    int bf16; /* the vdpbf16ps loop instead of the FMA one */
    long iters;
} peak_job;

static double peak_run(const peak_job *j) {
    return j->bf16 ? attn_peak_bf16(j->iters) : attn_peak_fma(j->path, j->iters);
}

static void peak_task(void *ctx, size_t task, int worker) {
    (void)task;
    (void)worker;
    peak_run(ctx);
}

typedef struct {
    double wall, cpu; /* GFLOP per wall second; per CPU second × threads */
} rate;

/* GFLOP/s of the peak loop (FMA, or vdpbf16ps when bf16) on every worker of
 * the pool, best of three; chunks of ~20 ms, several per worker so a late
 * worker does not idle the others at the end. */
static rate pool_peak(tp_pool *pool, attn_simd path, int bf16) {
    attn_parallel par = tp_parallel(pool);
    const size_t chunks = 8 * (size_t)par.nthreads;
    peak_job job = {path, bf16, 1000};
    for (;;) {
        const double t0 = now_s();
        if (peak_run(&job) <= 0 || now_s() - t0 > 0.02 || job.iters > (1L << 40))
            break;
        job.iters *= 2;
    }
    const double flops = peak_run(&job) * (double)chunks;
    rate best = {0.0, 0.0};
    for (int r = 0; r < 3; r++) {
        const double t0 = now_s(), c0 = cpu_s();
        par.parallel_for(par.impl, chunks, peak_task, &job);
        const double g = flops / (now_s() - t0) * 1e-9;
        const double gc = flops / (cpu_s() - c0) * 1e-9 * par.nthreads;
        best.wall = g > best.wall ? g : best.wall;
        best.cpu = gc > best.cpu ? gc : best.cpu;
    }
    return best;
}

/* ---- attention timing ------------------------------------------------------------------ */

/* A copy of a backend's table whose forward times the real one. The forward
 * slot takes no context, so the real backend and the running total are
 * file-scope; the benchmark runs one forward at a time. */
static const attn_backend *timed_inner;
static double timed_attn_s;

static int timed_forward(const attn_problem *p, void *ws, size_t bytes, const attn_parallel *par) {
    const double t0 = now_s();
    const int rc = timed_inner->forward(p, ws, bytes, par);
    timed_attn_s += now_s() - t0;
    return rc;
}

/* ---- standalone GEMMs ------------------------------------------------------------------- */

/* The model's weights for the GEMMs, packed for one precision: per layer
 * W_qkv (3C, C), W_o (C, C), W_in (F, C), W_out (C, F) and their biases;
 * activations a (T, F) in and b (T, F) out, large enough for every GEMM of a
 * batch of T tokens. */
typedef struct {
    int C, F, L, max_tokens;
    float *w[4 * 16]; /* [layer][4]; at most 16 layers timed */
    float *bias[4 * 16];
    gemm_weights *packed[4 * 16];
    void *scratch;
    float *a, *b;
} gemm_set;

/* Floating-point operations of one forward's GEMMs on T tokens. */
static double gemm_flops(const gemm_set *g, int T) {
    const double C = g->C, F = g->F;
    return 2.0 * T * g->L * (3 * C * C + C * C + 2 * C * F);
}

static void gemm_forward(const gemm_set *g, const attn_parallel *par, int T) {
    for (int l = 0; l < g->L; l++)
        for (int k = 0; k < 4; k++) {
            const gemm_weights *w = g->packed[4 * l + k];
            gemm_run(w, par, g->a, (size_t)gemm_k(w), g->b, (size_t)gemm_n(w), T, NULL, g->scratch);
        }
}

static float *rand_floats(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 0.1f;
    }
    return p;
}

static void gemm_set_free(gemm_set *g) {
    for (int i = 0; i < 4 * 16; i++) {
        gemm_free(g->packed[i]);
        free(g->w[i]);
        free(g->bias[i]);
    }
    free(g->scratch);
    free(g->a);
    free(g->b);
}

static int gemm_set_init(gemm_set *g, const bert_config *cfg, int max_tokens, gemm_precision prec,
                         int max_threads) {
    *g = (gemm_set){.C = cfg->hidden_size,
                    .F = cfg->intermediate_size,
                    .L = cfg->num_layers < 16 ? cfg->num_layers : 16,
                    .max_tokens = max_tokens};
    const size_t C = (size_t)g->C, F = (size_t)g->F;
    const size_t rows[4] = {3 * C, C, F, C}, cols[4] = {C, C, C, F};
    for (int l = 0; l < g->L; l++)
        for (int k = 0; k < 4; k++) {
            g->w[4 * l + k] = rand_floats(rows[k] * cols[k], (unsigned)(4 * l + k + 1));
            g->bias[4 * l + k] = rand_floats(rows[k], (unsigned)(4 * l + k + 101));
            char err[256];
            if (!g->w[4 * l + k] || !g->bias[4 * l + k] ||
                gemm_pack(prec, g->w[4 * l + k], g->bias[4 * l + k], (int)rows[k], (int)cols[k],
                          &g->packed[4 * l + k], err, sizeof err))
                return -1;
        }
    size_t sb = 0;
    for (int k = 0; k < 4; k++) {
        const size_t b = gemm_scratch_bytes(g->packed[k], max_tokens, max_threads);
        sb = b > sb ? b : sb;
    }
    if (sb && !(g->scratch = aligned_alloc(64, (sb + 63) / 64 * 64)))
        return -1;
    g->a = rand_floats((size_t)max_tokens * F, 7u);
    g->b = calloc((size_t)max_tokens * F, sizeof(float));
    return g->a && g->b ? 0 : -1;
}

typedef struct {
    double ms;
    rate gflops;
} gemm_result;

static gemm_result time_gemms(const gemm_set *g, tp_pool *pool, int T, const bench_opts *o) {
    attn_parallel par = tp_parallel(pool);
    double times[64];
    gemm_forward(g, &par, T);
    int n = 0;
    const double c0 = cpu_s();
    double spent = 0.0;
    do {
        const double t0 = now_s();
        gemm_forward(g, &par, T);
        times[n++] = now_s() - t0;
        spent += times[n - 1];
    } while (n < o->reps && (n < 3 || spent < o->budget_s));
    const double cpu = cpu_s() - c0, med = median(times, n);
    return (gemm_result){
        med * 1e3,
        {gemm_flops(g, T) / med * 1e-9, gemm_flops(g, T) * n / cpu * 1e-9 * par.nthreads}};
}

/* ---- one case --------------------------------------------------------------------------- */

typedef struct {
    const bert_model *model;
    const tok_tokenizer *tok;
    const query_text *query; /* --pairs: each text is a document after it; else NULL */
    bert_workspace *ws;
    int32_t *ids, *types, *cu; /* (max tokens), (max tokens), (max batch + 1) */
    float *out;                /* (max batch, output_dim) */
} pipeline;

typedef struct {
    double ms, tok_frac, attn_frac, cpu_frac;
    int reps, rc;
} case_result;

/* Tokenizes texts [0, batch) into the packed arrays, each alone or after
 * the query as a pair, and runs the forward. Adds the tokenizer's seconds
 * to *tok_s. */
static int run_once(pipeline *p, const attn_backend *be, const attn_parallel *par,
                    const input_set *set, int batch, double *tok_s) {
    const double t0 = now_s();
    p->cu[0] = 0;
    for (int i = 0; i < batch; i++) {
        tok_output out = {.ids = p->ids + p->cu[i], .capacity = TOK_CAP};
        int rc;
        if (p->query) {
            out.type_ids = p->types + p->cu[i];
            rc = tok_encode_pair(p->tok, p->query->text, p->query->len, set->text[i], set->len[i],
                                 TOK_TRUNCATE_NONE, &out);
        } else
            rc = tok_encode(p->tok, set->text[i], set->len[i], 1, &out);
        if (rc != TOK_OK)
            return -1;
        p->cu[i + 1] = p->cu[i] + out.n;
    }
    *tok_s += now_s() - t0;
    char err[256];
    const int rc = bert_forward_types(p->model, p->ws, be, par, p->ids, p->query ? p->types : NULL,
                                      p->cu, batch, p->out, err, sizeof err);
    if (rc != BERT_OK)
        fprintf(stderr, "bert_forward (%s): %s\n", be->name, err);
    return rc;
}

static case_result run_case(pipeline *p, const attn_backend *be, tp_pool *pool,
                            const input_set *set, int batch, const bench_opts *o) {
    case_result r = {0};
    attn_parallel par = tp_parallel(pool);
    attn_backend timed = *be;
    timed.forward = timed_forward;
    timed_inner = be;
    double tok_s = 0.0, times[64];
    if ((r.rc = run_once(p, &timed, &par, set, batch, &tok_s)) != 0)
        return r;
    tok_s = 0.0;
    timed_attn_s = 0.0;
    const double c0 = cpu_s();
    double wall = 0.0;
    int n = 0;
    while (n < o->reps && (n < 3 || wall < o->budget_s)) {
        const double t0 = now_s();
        if ((r.rc = run_once(p, &timed, &par, set, batch, &tok_s)) != 0)
            return r;
        times[n++] = now_s() - t0;
        wall += times[n - 1];
    }
    r.cpu_frac = (cpu_s() - c0) / (wall * par.nthreads);
    r.tok_frac = tok_s / wall;
    r.attn_frac = timed_attn_s / wall;
    r.ms = median(times, n) * 1e3;
    r.reps = n;
    return r;
}

/* One forward of the first n texts of set through p, then one JSON object:
 * {"kind": "embeddings", "precision", "tokens", "embeddings": [[...], ...]},
 * or for pairs {"kind": "scores", ..., "scores": [[logits], ...]}. */
static int dump_embeddings(FILE *f, pipeline *p, const attn_backend *be, tp_pool *pool,
                           const input_set *set, int n, gemm_precision prec, int dim) {
    attn_parallel par = tp_parallel(pool);
    double tok_s = 0.0;
    if (run_once(p, be, &par, set, n, &tok_s) != 0)
        return -1;
    const char *kind = p->query ? "scores" : "embeddings";
    fprintf(f, "{\"kind\": \"%s\", \"precision\": \"%s\", \"tokens\": %d, \"%s\": [", kind,
            gemm_precision_name(prec), set->tokens, kind);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s[", i ? ", " : "");
        for (int c = 0; c < dim; c++)
            fprintf(f, "%s%.9g", c ? ", " : "", (double)p->out[(size_t)i * dim + c]);
        fprintf(f, "]");
    }
    fprintf(f, "]}\n");
    return ferror(f) ? -1 : 0;
}

/* ---- main ------------------------------------------------------------------------------- */

static void print_header(void) {
    printf("%-7s %-4s %3s %-12s %5s %9s %10s %11s %5s %5s %5s %8s %6s %6s %5s %4s\n", "backend",
           "prec", "thr", "input", "batch", "ms", "inputs/s", "tokens/s", "tok%", "attn%", "gemm%",
           "gemmGF/s", "%peak", "%pkcpu", "cpu%", "reps");
}

int main(int argc, char **argv) {
    bench_opts o;
    parse_opts(argc, argv, &o);
    int max_batch = 0, max_len = 0, max_threads = 0;
    for (int i = 0; i < o.nbatches; i++)
        max_batch = o.batches[i] > max_batch ? o.batches[i] : max_batch;
    for (int i = 0; i < o.nlengths; i++)
        max_len = o.lengths[i] > max_len ? o.lengths[i] : max_len;
    for (int i = 0; i < o.nthreads; i++)
        max_threads = o.threads[i] > max_threads ? o.threads[i] : max_threads;

    char err[512];
    int status = 1;
    tok_tokenizer *tok = NULL;
    bert_model *models[MAX_LIST] = {0};
    gemm_precision precs[MAX_LIST];
    int nprec = 0;
    input_set sets[MAX_LIST] = {{0}};
    query_text query = {0};
    tp_pool *pools[MAX_LIST] = {0};
    gemm_set gemms[MAX_LIST] = {{0}};
    pipeline pipes[MAX_LIST] = {{0}};
    if (tok_load(&tok, o.model_dir, err, sizeof err) != TOK_OK) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    if (make_inputs(tok, &o, max_batch, sets, &query) != 0)
        goto done;
    if (o.dump_path) {
        status = dump_inputs(o.dump_path, sets, o.nlengths, max_batch, &query) == 0 ? 0 : 1;
        goto done;
    }

    const attn_backend *backends[MAX_LIST];
    for (int b = 0; b < o.nbackends; b++)
        if (!(backends[b] = attn_backend_find(o.backends[b]))) {
            fprintf(stderr, "unknown backend %s (have %s)\n", o.backends[b], attn_backend_names());
            goto done;
        }
    const int max_tokens = max_batch * (max_len + o.pair_query);
    const bert_config *cfg = NULL;
    for (int i = 0; i < o.nprecisions; i++) {
        const gemm_precision prec = (gemm_precision)gemm_precision_parse(o.precisions[i]);
        const char *why = gemm_unsupported(prec);
        if (why) {
            printf("precision %s: skipped: %s\n", o.precisions[i], why);
            continue;
        }
        bert_model **m = &models[nprec];
        pipeline *p = &pipes[nprec];
        if (bert_load_precision(o.model_dir, prec, m, err, sizeof err) != BERT_OK ||
            bert_workspace_create(*m, max_tokens, max_threads, backends, (size_t)o.nbackends,
                                  &p->ws, err, sizeof err) != BERT_OK) {
            fprintf(stderr, "%s\n", err);
            goto done;
        }
        cfg = bert_get_config(*m);
        p->model = *m;
        p->tok = tok;
        p->query = o.pair_query ? &query : NULL;
        p->ids = malloc((size_t)max_tokens * sizeof *p->ids);
        p->types = malloc((size_t)max_tokens * sizeof *p->types);
        p->cu = malloc(((size_t)max_batch + 1) * sizeof *p->cu);
        p->out = malloc((size_t)max_batch * (size_t)cfg->output_dim * sizeof *p->out);
        if (!p->ids || !p->types || !p->cu || !p->out ||
            (o.gemm && gemm_set_init(&gemms[nprec], cfg, max_tokens, prec, max_threads) != 0)) {
            fprintf(stderr, "out of memory\n");
            goto done;
        }
        if (!o.json)
            printf("precision %s: weights %zu bytes owned, %zu mapped\n", o.precisions[i],
                   bert_owned_bytes(*m), bert_mapped_bytes(*m));
        precs[nprec++] = prec;
    }
    if (!nprec) {
        fprintf(stderr, "no precision this CPU can run\n");
        goto done;
    }

    if (o.embed_path) {
        FILE *f = fopen(o.embed_path, "w");
        if (!f || !(pools[0] = tp_create(o.threads[0]))) {
            perror(o.embed_path);
            if (f)
                fclose(f);
            goto done;
        }
        int rc = 0;
        for (int pi = 0; pi < nprec && !rc; pi++)
            for (int s = 0; s < o.nlengths && !rc; s++)
                rc = dump_embeddings(f, &pipes[pi], backends[0], pools[0], &sets[s], max_batch,
                                     precs[pi], cfg->output_dim);
        status = fclose(f) == 0 && rc == 0 ? 0 : 1;
        goto done;
    }

    const attn_simd path = attn_simd_active();
    rate peak[MAX_LIST], peak_bf16[MAX_LIST] = {{0, 0}};
    for (int t = 0; t < o.nthreads; t++) {
        if (!(pools[t] = tp_create(o.threads[t]))) {
            fprintf(stderr, "cannot start %d threads\n", o.threads[t]);
            goto done;
        }
        peak[t] = pool_peak(pools[t], path, 0);
        for (int i = 0; i < nprec; i++)
            if (precs[i] == GEMM_BF16) {
                peak_bf16[t] = pool_peak(pools[t], path, 1);
                if (!o.json)
                    printf("bf16 vdpbf16ps peak on %d thread%s: %.1f GFLOP/s\n", o.threads[t],
                           o.threads[t] > 1 ? "s" : "", peak_bf16[t].wall);
            }
        if (o.json)
            printf("{\"kind\": \"peak\", \"threads\": %d, \"simd\": \"%s\", \"peak_gflops\": "
                   "%.1f, \"peak_gflops_cpu\": %.1f}\n",
                   o.threads[t], attn_simd_name(path), peak[t].wall, peak[t].cpu);
        else
            printf("FP32 FMA peak (%s, register-only loop, best of 3) on %d thread%s: %.1f "
                   "GFLOP/s (%.1f per CPU-second x threads)\n",
                   attn_simd_name(path), o.threads[t], o.threads[t] > 1 ? "s" : "", peak[t].wall,
                   peak[t].cpu);
    }
    if (!o.json) {
        printf("model %s: L=%d C=%d H=%d F=%d; gemm%% and GEMM GFLOP/s are standalone gemm_run "
               "on the model's shapes\n",
               o.model_dir, cfg->num_layers, cfg->hidden_size, cfg->num_heads,
               cfg->intermediate_size);
        print_header();
    }
    fflush(stdout);

    for (int t = 0; t < o.nthreads; t++)
        for (int s = 0; s < o.nlengths; s++)
            for (int bi = 0; bi < o.nbatches; bi++) {
                /* Tokens a forward runs per text: a pair's are both texts'
                 * pieces and the pair template's special tokens. */
                const int nspecial = tok_num_special(tok);
                const int seq = o.pair_query ? o.pair_query + sets[s].tokens - 2 * nspecial +
                                                   tok_num_special_pair(tok)
                                             : sets[s].tokens;
                const int batch = o.batches[bi], T = batch * seq;
                char task[96] = "";
                if (o.pair_query)
                    snprintf(task, sizeof task,
                             "\"task\": \"rerank\", \"query_tokens\": %d, \"pair_tokens\": %d, ",
                             o.pair_query, seq);
                for (int b = 0; b < o.nbackends; b++)
                    for (int pi = 0; pi < nprec; pi++) {
                        const rate pk = precs[pi] == GEMM_BF16 ? peak_bf16[t] : peak[t];
                        const gemm_result g = o.gemm ? time_gemms(&gemms[pi], pools[t], T, &o)
                                                     : (gemm_result){0, {0, 0}};
                        const case_result r =
                            run_case(&pipes[pi], backends[b], pools[t], &sets[s], batch, &o);
                        if (r.rc != 0)
                            goto done;
                        const double ips = batch / (r.ms * 1e-3), tps = ips * seq;
                        const double gemm_pct = o.gemm ? 100.0 * g.ms / r.ms : 0.0;
                        const double gemm_peak = o.gemm ? 100.0 * g.gflops.wall / pk.wall : 0.0;
                        const double gemm_peak_cpu = o.gemm ? 100.0 * g.gflops.cpu / pk.cpu : 0.0;
                        if (o.json)
                            printf("{\"kind\": \"case\", %s\"backend\": \"%s\", \"precision\": "
                                   "\"%s\", "
                                   "\"simd\": \"%s\", "
                                   "\"threads\": %d, \"input\": \"%s\", \"tokens_per_input\": %d, "
                                   "\"batch\": %d, \"ms\": %.3f, \"inputs_per_s\": %.1f, "
                                   "\"tokens_per_s\": %.0f, \"tok_pct\": %.1f, \"attn_pct\": %.1f, "
                                   "\"gemm_ms\": %.3f, \"gemm_pct\": %.1f, \"gemm_gflops\": %.1f, "
                                   "\"peak_gflops\": %.1f, \"gemm_pct_peak\": %.1f, "
                                   "\"gemm_gflops_cpu\": %.1f, \"gemm_pct_peak_cpu\": %.1f, "
                                   "\"cpu_pct\": %.1f, \"reps\": %d}\n",
                                   task, backends[b]->name, gemm_precision_name(precs[pi]),
                                   backends[b]->simd_path(), o.threads[t],
                                   length_name(sets[s].tokens), sets[s].tokens, batch, r.ms, ips,
                                   tps, 100.0 * r.tok_frac, 100.0 * r.attn_frac, g.ms, gemm_pct,
                                   g.gflops.wall, pk.wall, gemm_peak, g.gflops.cpu, gemm_peak_cpu,
                                   100.0 * r.cpu_frac, r.reps);
                        else {
                            char input[32];
                            if (o.pair_query)
                                snprintf(input, sizeof input, "pair(%d+%d)", o.pair_query,
                                         sets[s].tokens);
                            else
                                snprintf(input, sizeof input, "%s(%d)", length_name(sets[s].tokens),
                                         sets[s].tokens);
                            printf("%-7s %-4s %3d %-12s %5d %9.2f %10.1f %11.0f %5.1f %5.1f %5.1f "
                                   "%8.1f %6.1f %6.1f %5.1f %4d\n",
                                   backends[b]->name, gemm_precision_name(precs[pi]), o.threads[t],
                                   input, batch, r.ms, ips, tps, 100.0 * r.tok_frac,
                                   100.0 * r.attn_frac, gemm_pct, g.gflops.wall, gemm_peak,
                                   gemm_peak_cpu, 100.0 * r.cpu_frac, r.reps);
                        }
                        fflush(stdout);
                    }
            }
    status = 0;
done:
    for (int t = 0; t < o.nthreads; t++)
        tp_destroy(pools[t]);
    for (int i = 0; i < MAX_LIST; i++) {
        gemm_set_free(&gemms[i]);
        free(pipes[i].ids);
        free(pipes[i].types);
        free(pipes[i].cu);
        free(pipes[i].out);
        bert_workspace_free(pipes[i].ws);
        bert_free(models[i]);
    }
    free_inputs(sets, o.nlengths, max_batch);
    free(query.text);
    tok_free(tok);
    return status;
}

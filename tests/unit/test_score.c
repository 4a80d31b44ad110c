/* test_score.c — the rerank and classification codec (server/api/score_api.h)
 * without a model: pairs and texts into jobs with type ids (compared with
 * tok_encode_pair and tok_encode, whose goldens are test_tokenizer_pair.c's),
 * truncation and the refusals, and the scores' activation (sigmoid,
 * softmax) against a double-precision reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"
#include "server/api/errors.h"
#include "server/api/score_api.h"
#include "server/api/score_request.h"
#include "server/work/membudget.h"

static tok_tokenizer *load(const char *dir) {
    char err[512] = "";
    tok_tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, dir, err, sizeof err), TOK_OK, "%s: %s", dir, err);
    return t;
}

typedef struct fixture {
    tok_tokenizer *tok;
    embed_api eapi;
    score_api s;
} fixture;

static void setup(fixture *f, const char *dir, int32_t max_length) {
    memset(f, 0, sizeof *f);
    f->tok = load(dir);
    f->eapi.tok = f->tok;
    f->eapi.model_name = "test";
    f->eapi.max_batch_tokens = 4096;
    f->eapi.max_batch_requests = 64;
    f->eapi.truncate = true;
    atomic_store(&f->eapi.max_inputs_per_request, 8);
    static const char *const labels[] = {"LABEL_0"};
    f->s = (score_api){.eapi = &f->eapi,
                       .kind = 3,
                       .classifier = true,
                       .num_labels = 1,
                       .labels = labels,
                       .max_length = max_length,
                       .type_vocab_size = 2};
}

static score_input pair(const char *a, const char *b) {
    return (score_input){.a = a, .alen = strlen(a), .b = b, .blen = b ? strlen(b) : 0};
}

/* Each input of the job is what the tokenizer gives for it alone. */
static void expect_same_as_tokenizer(const fixture *f, const embed_job *job, const score_input *in,
                                     int32_t n, tok_truncation trunc) {
    int32_t ids[512], types[512];
    for (int32_t i = 0; i < n; i++) {
        tok_output o = {.ids = ids, .type_ids = types, .capacity = f->s.max_length};
        int rc = in[i].b
                     ? tok_encode_pair(f->tok, in[i].a, in[i].alen, in[i].b, in[i].blen, trunc, &o)
                     : tok_encode(f->tok, in[i].a, in[i].alen, trunc != TOK_TRUNCATE_NONE, &o);
        cr_assert_eq(rc, TOK_OK);
        const int32_t got = job->cu[i + 1] - job->cu[i];
        cr_assert_eq(got, o.n, "input %d: %d tokens, the tokenizer gives %d", i, got, o.n);
        for (int32_t k = 0; k < o.n; k++) {
            cr_expect_eq(job->ids[job->cu[i] + k], ids[k], "input %d token %d", i, k);
            cr_expect_eq(job->type_ids[job->cu[i] + k], types[k], "input %d token %d type", i, k);
        }
    }
}

Test(score, pairs_and_texts_become_one_job_with_type_ids) {
    fixture f;
    setup(&f, "tests/golden/pair-bert", 64); /* BertProcessing: the second text is type 1 */
    const score_input in[] = {
        pair("what is the capital of France?", "Paris is the capital of France."),
        pair("Къде се обработват документите?", "Документите се обработват в София."),
        pair("a lone text", NULL),
        pair("检索系统如何排序？", "检索系统将查询与文档配对，并按相似度排序。"),
    };
    embed_refusal r = {0};
    embed_job *job = score_job_make(&f.s, in, 4, true, false, 0, &r);
    cr_assert_not_null(job, "%s", r.msg);
    cr_expect_eq(job->n, 4);
    cr_expect_eq(job->out_dim, 1);
    cr_expect_eq(job->base.kind, 3);
    cr_expect_eq(job->base.n_items, 4);
    expect_same_as_tokenizer(&f, job, in, 4, TOK_TRUNCATE_RIGHT);
    /* The pair has type 1 tokens, the lone text none. */
    int ones = 0;
    for (int32_t k = job->cu[0]; k < job->cu[1]; k++)
        ones += job->type_ids[k] == 1;
    cr_expect_gt(ones, 0);
    for (int32_t k = job->cu[2]; k < job->cu[3]; k++)
        cr_expect_eq(job->type_ids[k], 0);
    embed_job_release(job);
    tok_free(f.tok);
}

Test(score, truncation_cuts_to_max_length_on_the_side_asked) {
    fixture f;
    setup(&f, "tests/golden/xlmr-tiny", 12);
    const char *doc = "Embeddings map sentences to vectors. Embeddings map sentences to vectors.";
    const score_input in[] = {pair("the query", doc), pair(doc, NULL)};
    embed_refusal r = {0};
    for (int left = 0; left < 2; left++) {
        embed_job *job = score_job_make(&f.s, in, 2, true, left, 0, &r);
        cr_assert_not_null(job, "%s", r.msg);
        cr_expect_eq(job->cu[1] - job->cu[0], 12);
        cr_expect_eq(job->cu[2] - job->cu[1], 12);
        expect_same_as_tokenizer(&f, job, in, 1, left ? TOK_TRUNCATE_LEFT : TOK_TRUNCATE_RIGHT);
        embed_job_release(job);
    }
    /* Without truncation: refused, saying how long. */
    cr_expect_null(score_job_make(&f.s, in, 2, false, false, 0, &r));
    cr_expect_eq(r.err, SRV_EINVALID);
    cr_expect(strstr(r.msg, "truncation is off") != NULL, "%s", r.msg);
    tok_free(f.tok);
}

/* A limit below the model's maximum cuts there (vLLM's
 * truncate_prompt_tokens), as a model whose maximum it were would; one
 * above it is the maximum. */
Test(score, a_limit_cuts_below_the_maximum_and_never_above) {
    fixture f;
    setup(&f, "tests/golden/xlmr-tiny", 12);
    const char *doc = "Embeddings map sentences to vectors. Embeddings map sentences to vectors.";
    const score_input in[] = {pair("the query", doc), pair("a", "b")};
    embed_refusal r = {0};
    embed_job *job = score_job_make(&f.s, in, 2, true, false, 8, &r);
    cr_assert_not_null(job, "%s", r.msg);
    cr_expect_eq(job->cu[1] - job->cu[0], 8);
    cr_expect_leq(job->cu[2] - job->cu[1], 8);
    fixture g;
    setup(&g, "tests/golden/xlmr-tiny", 8);
    expect_same_as_tokenizer(&g, job, in, 2, TOK_TRUNCATE_RIGHT);
    embed_job_release(job);
    job = score_job_make(&f.s, in, 2, true, false, 1000, &r);
    cr_assert_not_null(job, "%s", r.msg);
    cr_expect_eq(job->cu[1] - job->cu[0], 12);
    embed_job_release(job);
    cr_expect_null(score_job_make(&f.s, in, 2, false, false, 8, &r));
    cr_expect(strstr(r.msg, "at most 8") != NULL, "%s", r.msg);
    tok_free(f.tok);
    tok_free(g.tok);
}

/* Scratch bytes the tokenizer asks for: normalizing a text takes some
 * hundred bytes a character (tokenizer.h), so a long text encoded once or
 * once per pair tells apart. */
static size_t scratch_bytes;
static void *counting_realloc(void *p, size_t n) {
    scratch_bytes += n;
    return realloc(p, n);
}

static size_t scratch_bytes_for(const fixture *f, const score_input *in, int32_t n) {
    tok_set_alloc_funcs(counting_realloc, free);
    scratch_bytes = 0;
    embed_refusal r = {0};
    embed_job *job = score_job_make(&f->s, in, n, true, false, 0, &r);
    tok_set_alloc_funcs(NULL, NULL);
    cr_assert_not_null(job, "%s", r.msg);
    expect_same_as_tokenizer(f, job, in, n, TOK_TRUNCATE_RIGHT);
    embed_job_release(job);
    return scratch_bytes;
}

/* A rerank pairs one query with every document: the query is encoded once
 * per request, not once per document (a long query times many documents
 * held the thread that tokenizes for seconds), and each pair is still what
 * tok_encode_pair gives, cut on either side. */
Test(score, a_shared_query_is_encoded_once) {
    fixture f;
    setup(&f, "tests/golden/pair-bert", 24);
    char query[4096] = "";
    while (strlen(query) + 64 < sizeof query)
        strcat(query, "which city is the capital of France and how large is it today? ");
    const char *docs[] = {"Paris.",
                          "Paris is the capital of France, with two million people.",
                          "Lyon is a city in France.",
                          "",
                          "The capital of France is Paris, a city of two million.",
                          "Berlin",
                          "Madrid is the capital of Spain.",
                          "Rome"};
    score_input in[8];
    for (int i = 0; i < 8; i++)
        in[i] = pair(query, docs[i]);
    const size_t one = scratch_bytes_for(&f, in, 1);
    const size_t eight = scratch_bytes_for(&f, in, 8);
    cr_expect_gt(one, 100 * strlen(query), "one pair took %zu scratch bytes", one);
    /* The seven more documents are short: far less than the query again. */
    cr_expect_lt(eight, one * 3 / 2, "8 pairs took %zu scratch bytes, one pair %zu", eight, one);
    embed_refusal r = {0};
    for (int left = 0; left < 2; left++) {
        embed_job *job = score_job_make(&f.s, in, 8, true, left, 0, &r);
        cr_assert_not_null(job, "%s", r.msg);
        expect_same_as_tokenizer(&f, job, in, 8, left ? TOK_TRUNCATE_LEFT : TOK_TRUNCATE_RIGHT);
        embed_job_release(job);
    }
    /* A query that is not UTF-8 is refused as the first input's text. */
    const char bad[] = {'o', 'k', (char)0xff, 0};
    const score_input broken[] = {pair(bad, "x"), pair(bad, "y")};
    cr_expect_null(score_job_make(&f.s, broken, 2, true, false, 0, &r));
    cr_expect_eq(r.err, SRV_EBADREQUEST);
    cr_expect(strstr(r.msg, "input 0 is not valid UTF-8 (byte 2)") != NULL, "%s", r.msg);
    tok_free(f.tok);
}

Test(score, refusals) {
    fixture f;
    setup(&f, "tests/golden/xlmr-tiny", 64);
    embed_refusal r = {0};
    score_input many[9];
    for (int i = 0; i < 9; i++)
        many[i] = pair("q", "d");
    /* More than max_inputs_per_request (8 here). */
    cr_expect_null(score_job_make(&f.s, many, 9, true, false, 0, &r));
    cr_expect_eq(r.err, SRV_EINVALID);
    cr_expect(strstr(r.msg, "max_inputs_per_request") != NULL, "%s", r.msg);
    /* Invalid UTF-8, in the first text and in the second. */
    score_input bad[] = {{.a = "ok", .alen = 2, .b = "x\xff", .blen = 2}};
    memset(&r, 0, sizeof r);
    cr_expect_null(score_job_make(&f.s, bad, 1, true, false, 0, &r));
    cr_expect_eq(r.err, SRV_EBADREQUEST);
    cr_expect(strstr(r.msg, "second text") && strstr(r.msg, "byte 1"), "%s", r.msg);
    bad[0] = (score_input){.a = "\xc3", .alen = 1, .b = "x", .blen = 1};
    memset(&r, 0, sizeof r);
    cr_expect_null(score_job_make(&f.s, bad, 1, true, false, 0, &r));
    cr_expect(strstr(r.msg, "input 0 is not valid UTF-8 (byte 0)"), "%s", r.msg);
    /* An input larger than a batch can never run. */
    f.eapi.max_batch_tokens = 5;
    memset(&r, 0, sizeof r);
    cr_expect_null(score_job_make(&f.s, many, 1, true, false, 0, &r));
    cr_expect(strstr(r.msg, "max_batch_tokens"), "%s", r.msg);
    cr_expect_null(score_job_make(&f.s, many, 0, true, false, 0, &r));
    tok_free(f.tok);
}

static void reference(const float *x, int k, bool raw, double *out) {
    if (raw) {
        for (int i = 0; i < k; i++)
            out[i] = x[i];
        return;
    }
    if (k == 1) {
        out[0] = 1.0 / (1.0 + exp(-(double)x[0]));
        return;
    }
    long double den = 0;
    for (int i = 0; i < k; i++)
        den += expl((long double)x[i]);
    for (int i = 0; i < k; i++)
        out[i] = (double)(expl((long double)x[i]) / den);
}

Test(score, activation_matches_the_reference) {
    const float cases[][4] = {{0.0f},
                              {3.5f},
                              {-7.25f},
                              {1, 2, 3},
                              {-1, 0.5f, 4, 2},
                              {80, 79, -5, 0},
                              {-60, -61, -59, -70}};
    const int k[] = {1, 1, 1, 3, 4, 4, 4};
    for (size_t c = 0; c < sizeof k / sizeof k[0]; c++)
        for (int raw = 0; raw < 2; raw++) {
            float got[4];
            double want[4];
            score_activate(cases[c], k[c], raw, got);
            reference(cases[c], k[c], raw, want);
            for (int i = 0; i < k[c]; i++)
                cr_expect(fabs(got[i] - want[i]) <= 1e-7 + 1e-6 * fabs(want[i]),
                          "case %zu raw %d label %d: %.9g, expected %.9g", c, raw, i, got[i],
                          want[i]);
        }
    /* Logits far past exp's range stay finite: the softmax is shifted. */
    const float big[] = {1000.0f, 999.0f};
    float out[2];
    score_activate(big, 2, false, out);
    cr_expect(isfinite(out[0]) && isfinite(out[1]));
    cr_expect(fabs(out[0] - 1.0 / (1.0 + exp(-1.0))) < 1e-6);
}

/* Scores JSON cannot carry: an infinite raw logit, a softmax over one (NaN);
 * the sigmoid of an infinite logit is 0 or 1, finite. */
Test(score, scores_that_are_not_finite_are_found) {
    const float inf = INFINITY;
    const float three[] = {0.5f, 1.0f, -2.0f, inf, 0.0f, 1.0f};
    cr_expect_eq(score_first_not_finite(three, 2, 3, false, false), 1);
    cr_expect_eq(score_first_not_finite(three, 2, 3, true, false), 1);
    cr_expect_eq(score_first_not_finite(three, 1, 3, false, false), -1);
    /* A sigmoid per label: finite even for the infinite logit. */
    cr_expect_eq(score_first_not_finite(three, 2, 3, false, true), -1);
    const float one[] = {2.0f, -inf, inf, NAN};
    cr_expect_eq(score_first_not_finite(one, 3, 1, false, false), -1);
    cr_expect_eq(score_first_not_finite(one, 3, 1, true, false), 1);
    cr_expect_eq(score_first_not_finite(one, 4, 1, false, false), 3);
}

/* ---- the canonical request: every dialect through one decode, one job, one ranking ---- */

/* body decoded by dialect d into a job, the inputs freed as the route does. */
static score_job *job_of(const fixture *f, const score_dialect *d, json_t *body) {
    score_request q = {.truncate = true, .dialect = d};
    embed_refusal r = {0};
    const int rc = score_request_decode(&f->s, body, &q, &r);
    score_job *j = rc == SRV_OK ? score_request_job(&f->s, &q, body, &r) : NULL;
    membudget_free(q.in);
    cr_assert_not_null(j, "%s", r.msg);
    return j;
}

/* results[k] has index want[k] (and with docs, that document's text). */
static void expect_ranked(json_t *results, const int *want, size_t n, const char *const *docs,
                          bool doc_object) {
    cr_assert_eq(json_array_size(results), n);
    for (size_t k = 0; k < n; k++) {
        json_t *item = json_array_get(results, k);
        cr_expect_eq(json_integer_value(json_object_get(item, "index")), want[k], "rank %zu", k);
        json_t *doc = json_object_get(item, "document");
        if (!docs) {
            cr_expect_null(doc);
            continue;
        }
        cr_expect_str_eq(json_string_value(doc_object ? json_object_get(doc, "text") : doc),
                         docs[want[k]]);
    }
}

Test(score, every_rerank_dialect_ranks_in_one_place) {
    fixture f;
    setup(&f, "tests/golden/pair-bert", 64);
    const char *const docs[] = {"alpha", "beta", "gamma"};
    /* Cohere's documents may be objects; its documents come back unless
     * return_documents is false; top_n cuts. */
    json_t *body = json_pack("{s:s, s:[s, {s:s}, s], s:i}", "query", "which?", "documents", docs[0],
                             "text", docs[1], docs[2], "top_n", 2);
    score_job *j = job_of(&f, &score_cohere_rerank, body);
    cr_expect_eq(j->e.n, 3);
    cr_expect_str_eq(json_string_value(j->e.model), "test");
    /* Equal best-but-one logits: Cohere, Infinity and vLLM put the lower
     * index first, TEI the higher. */
    const float logits[] = {0.5f, 0.5f, 2.0f};
    memcpy(j->e.out, logits, sizeof logits);
    json_t *res = score_rerank_results(j, "relevance_score", "document", true);
    expect_ranked(res, (const int[]){2, 0}, 2, docs, true);
    cr_expect_float_eq(json_real_value(json_object_get(json_array_get(res, 0), "relevance_score")),
                       1.0 / (1.0 + exp(-2.0)), 1e-6);
    json_decref(res);
    j->dialect = &score_tei_rerank;
    j->top_n = 0;
    res = score_rerank_results(j, "relevance_score", "document", true);
    expect_ranked(res, (const int[]){2, 1, 0}, 3, docs, true);
    json_decref(res);
    score_job_release(j);
    json_decref(body);

    /* Infinity's: no documents unless asked, top_n at least 1, raw scores. */
    body = json_pack("{s:s, s:[s, s, s], s:b}", "query", "which?", "documents", docs[0], docs[1],
                     docs[2], "raw_scores", 1);
    j = job_of(&f, &score_infinity_rerank, body);
    memcpy(j->e.out, logits, sizeof logits);
    res = score_rerank_results(j, "relevance_score", "document", false);
    expect_ranked(res, (const int[]){2, 0, 1}, 3, NULL, false);
    cr_expect_float_eq(json_real_value(json_object_get(json_array_get(res, 0), "relevance_score")),
                       2.0, 1e-6);
    json_decref(res);
    score_job_release(j);
    json_decref(body);
    tok_free(f.tok);
}

Test(score, every_dialect_reads_its_inputs_into_one_request) {
    fixture f;
    setup(&f, "tests/golden/pair-bert", 64);
    embed_refusal r = {0};
    /* vLLM's 1:N: text_1 paired with each of text_2, cut to 8 tokens. */
    json_t *body = json_pack("{s:s, s:[s, s], s:i}", "text_1", "the query", "text_2", "one", "two",
                             "truncate_prompt_tokens", 8);
    score_request q = {.dialect = &score_vllm_score};
    cr_assert_eq(score_request_decode(&f.s, body, &q, &r), SRV_OK, "%s", r.msg);
    cr_expect_eq(q.n, 2);
    cr_expect(q.truncate);
    cr_expect_eq(q.limit, 8);
    cr_expect_eq(q.in[0].a, q.in[1].a);
    cr_expect_str_eq(q.in[1].b, "two");
    membudget_free(q.in);
    json_decref(body);
    /* TEI's /predict: one pair is not a batch; a list of them is. */
    body = json_pack("{s:[s, s]}", "inputs", "a", "b");
    q = (score_request){.dialect = &score_tei_predict};
    cr_assert_eq(score_request_decode(&f.s, body, &q, &r), SRV_OK, "%s", r.msg);
    cr_expect(q.n == 1 && !q.batch && q.in[0].b);
    membudget_free(q.in);
    json_decref(body);
    body = json_pack("{s:[[s, s], [s]], s:s}", "inputs", "a", "b", "c", "truncation_direction",
                     "Left");
    q = (score_request){.dialect = &score_tei_predict};
    cr_assert_eq(score_request_decode(&f.s, body, &q, &r), SRV_OK, "%s", r.msg);
    cr_expect(q.n == 2 && q.batch && !q.in[1].b);
    cr_expect_eq(q.direction, EMBED_TRUNCATE_LEFT);
    membudget_free(q.in);
    json_decref(body);
    /* A field the dialect's table does not name is refused by the one decoder. */
    body = json_pack("{s:[s], s:i}", "input", "a", "top_n", 1);
    q = (score_request){.dialect = &score_infinity_classify};
    cr_expect_eq(score_request_decode(&f.s, body, &q, &r), SRV_EBADREQUEST);
    cr_expect_null(q.in);
    json_decref(body);
    tok_free(f.tok);
}

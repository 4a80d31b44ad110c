/* embed_chunk.c — cutting documents into chunks (on a codec worker, as the
 * rest of the decoding), and the chunked answer. */
#include "server/api/embed_chunk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/job_tokens.h"
#include "server/work/membudget.h"

/* ---- the "chunking" object ---------------------------------------------------------- */

/* The "chunking" object's fields; every refusal names "chunking" as its
 * param. */
typedef struct chunking_req {
    int64_t max_tokens, overlap;
    int doc_vector; /* embed_doc_vector */
} chunking_req;

/* A chunk holds the special tokens and at least one more, and at most the
 * longest input. */
static void max_tokens_bounds(const void *ctx, int64_t *lo, int64_t *hi) {
    const embed_api *api = ctx;
    *lo = tok_num_special(api->tok) + 1;
    *hi = embed_max_seq_length(api);
}

static const fld_choice DOC_VECTORS[] = {{"none", EMBED_DOCVEC_NONE},
                                         {"mean", EMBED_DOCVEC_MEAN},
                                         {"token_weighted", EMBED_DOCVEC_TOKEN_WEIGHTED},
                                         {NULL, 0}};

#define AT(f) offsetof(chunking_req, f)
static const fld_row CHUNKING_ROWS[] = {
    {"max_tokens", FLD_INT, FLD_PRESET, AT(max_tokens), .bounds = max_tokens_bounds,
     .param = "chunking"},
    {"overlap", FLD_INT, 0, AT(overlap), .dflt = 0, .min = 0, .max = INT32_MAX,
     .param = "chunking"},
    {"document_vector", FLD_ENUM, 0, AT(doc_vector), .dflt = EMBED_DOCVEC_MEAN,
     .choices = DOC_VECTORS, .param = "chunking",
     .type_msg = "chunking.document_vector must be \"none\", \"mean\" or \"token_weighted\""},
};
static const fld_table CHUNKING = FLD_TABLE(CHUNKING_ROWS, "chunking.", "chunking");

int embed_chunking_parse(const embed_api *api, const json_t *v, embed_chunking *out,
                         embed_refusal *r) {
    const int32_t max = embed_max_seq_length(api), specials = tok_num_special(api->tok);
    chunking_req q = {.max_tokens = max};
    r->param = "chunking";
    if (!json_is_object(v))
        return refuse(r, SRV_EBADREQUEST,
                      "chunking must be an object {\"max_tokens\", \"overlap\", "
                      "\"document_vector\"}");
    if (fld_decode(&CHUNKING, v, &q, api, r) != SRV_OK)
        return r->err;
    *out = (embed_chunking){.max_tokens = (int32_t)q.max_tokens,
                            .overlap = (int32_t)q.overlap,
                            .doc_vector = q.doc_vector};
    const int32_t window = out->max_tokens - specials;
    /* At most half a window of overlap: a chunk ends in its window's last
     * quarter (or at its end), so the next one starts at least a quarter of
     * a window further on, and the forward runs at most about four times the
     * document's tokens (twice when chunks end at full windows). A larger
     * overlap advances a handful of tokens a chunk and multiplies the work
     * by up to the window's length. */
    if (out->overlap > window / 2)
        return refuse(r, SRV_EINVALID,
                      "chunking.overlap is %d; it must be at most half of max_tokens %d minus "
                      "the %d special tokens, %d",
                      (int)out->overlap, (int)out->max_tokens, (int)specials, (int)(window / 2));
    r->param = NULL;
    return SRV_OK;
}

/* ---- where to cut ------------------------------------------------------------------- */

/* Bytes of the whitespace character at t[i] (ASCII, U+00A0, U+2000..U+200A,
 * U+2028/9, U+3000), or 0. */
static size_t space_at(const char *t, size_t len, size_t i) {
    const unsigned char *u = (const unsigned char *)t + i;
    const size_t left = len - i;
    if (i >= len)
        return 0;
    if (*u == ' ' || (*u >= '\t' && *u <= '\r'))
        return 1;
    if (left >= 2 && u[0] == 0xC2 && u[1] == 0xA0)
        return 2;
    if (left >= 3 && u[0] == 0xE2 && u[1] == 0x80 && (u[2] <= 0x8A || u[2] == 0xA8 || u[2] == 0xA9))
        return 3;
    if (left >= 3 && u[0] == 0xE3 && u[1] == 0x80 && u[2] == 0x80)
        return 3;
    return 0;
}

/* Whether text ending at byte end ends with a sentence terminator; *cjk: one
 * that needs no space after it (the ideographic and full-width ones). */
static bool ends_sentence(const char *t, size_t end, bool *cjk) {
    static const char *const wide[] = {"\xE3\x80\x82", "\xEF\xBC\x81", "\xEF\xBC\x9F",
                                       "\xEF\xBD\xA1"};
    static const char *const narrow[] = {
        ".", "!", "?", "\xE2\x80\xA6", "\xD8\x9F", "\xE0\xA5\xA4", "\xE1\x8D\xA2", ";"};
    *cjk = false;
    for (size_t k = 0; k < sizeof wide / sizeof *wide; k++)
        if (end >= 3 && memcmp(t + end - 3, wide[k], 3) == 0)
            return *cjk = true;
    for (size_t k = 0; k < sizeof narrow / sizeof *narrow; k++) {
        const size_t n = strlen(narrow[k]);
        if (end >= n && memcmp(t + end - n, narrow[k], n) == 0)
            return true;
    }
    return false;
}

/* What separates piece e - 1 from piece e: 2 a sentence boundary, 1 a
 * whitespace boundary, 0 neither (inside a word, or punctuation). */
static int boundary(const char *t, size_t len, const tok_span *sp, int32_t e) {
    const size_t a = sp[e - 1].end, b = sp[e].start;
    if (b < a) /* the two share bytes (a Metaspace prefix and its word's first letter) */
        return 0;
    bool space = space_at(t, len, b) > 0 || (a > 0 && space_at(t, len, a - 1) > 0), newline = false;
    for (size_t i = a; i < b; i++) {
        space |= space_at(t, len, i) > 0;
        newline |= t[i] == '\n';
    }
    bool cjk = false;
    const bool term = ends_sentence(t, a, &cjk);
    if (newline || (term && (space || cjk)))
        return 2;
    return space ? 1 : 0;
}

/* The end of the chunk of pieces from p: at most p + window, at the last
 * sentence (else whitespace) boundary in the window's last quarter. */
static int32_t cut(const char *t, size_t len, const tok_span *sp, int32_t P, int32_t p,
                   int32_t window) {
    const int32_t hi = p + window;
    if (hi >= P)
        return P;
    const int32_t lo = hi - window / 4 > p ? hi - window / 4 : p + 1;
    int32_t word = 0;
    for (int32_t e = hi; e >= lo; e--) {
        const int b = boundary(t, len, sp, e);
        if (b == 2)
            return e;
        if (b == 1 && !word)
            word = e;
    }
    if (word)
        return word;
    /* No boundary: between any two pieces, but not two that share bytes. */
    int32_t e = hi;
    while (e > p + 1 && sp[e].start < sp[e - 1].end)
        e--;
    return e;
}

/* The first piece of the chunk after the one that ends at e: overlap pieces
 * back, moved forward to a word start within the overlap when there is one. */
static int32_t next_start(const char *t, size_t len, const tok_span *sp, int32_t p, int32_t e,
                          int32_t overlap) {
    if (overlap == 0)
        return e;
    const int32_t q0 = e - overlap > p ? e - overlap : p + 1;
    for (int32_t q = q0; q < e; q++)
        if (boundary(t, len, sp, q) > 0)
            return q;
    int32_t q = q0;
    while (q < e && sp[q].start < sp[q - 1].end)
        q++;
    return q;
}

/* ---- building the job ------------------------------------------------------------------ */

/* Growable arrays of the job being built. */
typedef struct builder {
    embed_job *job;
    int32_t cap_chunks; /* allocated: cu (cap + 1), spans (2 cap) */
    int64_t max_chunks; /* max_inputs_per_request */
} builder;

/* Appends a chunk: ids[0, n) from bytes [start, stop) of its document. */
static int add_chunk(builder *b, const int32_t *ids, int32_t n, uint32_t start, uint32_t stop,
                     embed_refusal *r) {
    embed_job *job = b->job;
    /* A request's chunks are its inputs: at most max_inputs_per_request of
     * them, so a chunked request costs no more forward tokens than a plain
     * one may (that many inputs of max_seq_length tokens), whatever the
     * document's size and the overlap. */
    if (job->n >= b->max_chunks)
        return refuse(r, SRV_EINVALID,
                      "the documents make more than %lld chunks (the next would end at byte "
                      "%u of its document); chunks are inputs and max_inputs_per_request is "
                      "%lld: ask for a larger chunking.max_tokens, a smaller overlap or fewer "
                      "documents",
                      (long long)b->max_chunks, (unsigned)stop, (long long)b->max_chunks);
    if (job->n == b->cap_chunks) {
        const int32_t cap = b->cap_chunks ? 2 * b->cap_chunks : 16;
        int32_t *cu = membudget_realloc(job->cu, ((size_t)cap + 1) * sizeof *cu);
        if (cu)
            job->cu = cu;
        uint32_t *spans =
            cu ? membudget_realloc(job->spans, (size_t)cap * 2 * sizeof *spans) : NULL;
        if (!spans)
            return refuse(r, SRV_EINTERNAL, "out of memory");
        job->spans = spans;
        b->cap_chunks = cap;
    }
    const int32_t at = job->cu[job->n];
    if (job_tokens_reserve(job, (size_t)at, (size_t)n, false) != 0)
        return refuse(r, SRV_EINTERNAL, "out of memory");
    memcpy(job->ids + at, ids, (size_t)n * sizeof *ids);
    job->spans[2 * job->n] = start;
    job->spans[2 * job->n + 1] = stop;
    job->cu[job->n + 1] = at + n;
    job->n++;
    return SRV_OK;
}

/* The whole document's tokens with their spans, at most limit of them
 * (special tokens included). TOK_ETOOLONG leaves the full count in o->n_full. */
static int tokenize_all(const embed_api *api, const char *text, size_t len, int32_t limit,
                        tok_output *o) {
    /* Most text takes fewer tokens than bytes: try that first, then the
     * count the tokenizer gave. */
    const int32_t specials = tok_num_special(api->tok);
    int64_t guess = (int64_t)len + specials + 8;
    o->capacity = guess < limit ? (int32_t)guess : limit;
    int rc = TOK_ETOOLONG;
    for (int pass = 0; pass < 2 && rc == TOK_ETOOLONG; pass++) {
        if (pass) {
            if (o->n_full > limit)
                break;
            o->capacity = o->n_full;
        }
        membudget_free(o->ids);
        membudget_free(o->offsets);
        membudget_free(o->special);
        o->ids = membudget_malloc((size_t)o->capacity * sizeof *o->ids);
        o->offsets = membudget_malloc((size_t)o->capacity * sizeof *o->offsets);
        o->special = membudget_malloc((size_t)o->capacity);
        rc =
            o->ids && o->offsets && o->special ? tok_encode(api->tok, text, len, 0, o) : TOK_ENOMEM;
    }
    return rc;
}

/* Chunks document d, text[0, len), into the job. */
static int chunk_document(const embed_api *api, builder *b, int32_t d, const char *text, size_t len,
                          const embed_chunking *c, int32_t *scratch, embed_refusal *r) {
    const int32_t specials = tok_num_special(api->tok);
    const int64_t max_doc = atomic_load(&api->max_document_tokens);
    if (embed_check_text((size_t)d, len, r) != SRV_OK)
        return r->err;
    if (len > UINT32_MAX)
        return refuse(r, SRV_ETOOLARGE, "input %d has %zu bytes; a document takes at most %u",
                      (int)d, len, UINT32_MAX);
    tok_output o = {0};
    const int64_t limit64 = max_doc + specials;
    int rc = tokenize_all(api, text, len, limit64 < INT32_MAX ? (int32_t)limit64 : INT32_MAX, &o);
    if (rc == TOK_ETOOLONG) {
        refuse(r, SRV_ETOOLARGE, "input %d has %d tokens; max_document_tokens is %lld", (int)d,
               (int)(o.n_full - specials), (long long)max_doc);
        goto done;
    }
    if (rc != TOK_OK) {
        job_tokens_refuse(rc, d, o.error_at, SRV_EINTERNAL, r);
        goto done;
    }
    /* The pieces: the tokens between the post-processor's. */
    int32_t lead = 0, trail = 0;
    while (lead < o.n && o.special[lead])
        lead++;
    while (trail < o.n - lead && o.special[o.n - 1 - trail])
        trail++;
    const tok_span *sp = o.offsets + lead;
    const int32_t P = o.n - lead - trail, window = c->max_tokens - specials;
    if (P <= window) {
        /* One window: the plain request's ids. Nothing but whitespace has no
         * pieces: the chunk is then the whole text. */
        rc = add_chunk(b, o.ids, o.n, P ? sp[0].start : 0, P ? sp[P - 1].end : (uint32_t)len, r);
        goto done;
    }
    for (int32_t p = 0; p < P;) {
        int32_t e = cut(text, len, sp, P, p, window);
        for (;;) {
            const uint32_t start = sp[p].start, stop = sp[e - 1].end;
            tok_output alone = {.ids = scratch, .capacity = c->max_tokens};
            rc = stop > start ? tok_encode(api->tok, text + start, stop - start, 0, &alone)
                              : TOK_EINVAL;
            if (rc == TOK_OK) {
                rc = add_chunk(b, scratch, alone.n, start, stop, r);
                break;
            }
            if (rc == TOK_ETOOLONG && e - p > 1) {
                /* Cut inside a word, the text alone takes more tokens than
                 * the pieces did: give back at least the excess. */
                const int32_t excess = alone.n_full - c->max_tokens;
                e -= excess < e - p - 1 ? (excess > 0 ? excess : 1) : e - p - 1;
                continue;
            }
            if (rc == TOK_ETOOLONG || rc == TOK_EINVAL)
                refuse(r, SRV_EINVALID,
                       "input %d: the text of token %d alone (bytes %u..%u) takes %d tokens, "
                       "more than chunking.max_tokens %d",
                       (int)d, (int)p, (unsigned)start, (unsigned)stop, (int)alone.n_full,
                       (int)c->max_tokens);
            else
                job_tokens_refuse(rc, d, alone.error_at, SRV_EINTERNAL, r);
            goto done;
        }
        if (rc != SRV_OK || e == P)
            break;
        p = next_start(text, len, sp, p, e, c->overlap);
    }
done:
    membudget_free(o.ids);
    membudget_free(o.offsets);
    membudget_free(o.special);
    return r->err ? r->err : SRV_OK;
}

embed_job *embed_chunk_job(const embed_api *api, const char *field, json_t *in,
                           const embed_chunking *c, embed_refusal *r) {
    r->param = field;
    size_t n_docs = 1;
    if (!in) {
        refuse(r, SRV_EBADREQUEST, "missing field \"%s\"", field);
        return NULL;
    }
    if (json_is_array(in)) {
        n_docs = json_array_size(in);
        const int64_t max_inputs = atomic_load(&api->max_inputs_per_request);
        if (n_docs == 0) {
            refuse(r, SRV_EEMPTY, "%s is an empty array", field);
            return NULL;
        }
        if ((int64_t)n_docs > max_inputs) {
            refuse(r, SRV_EINVALID, "%s has %zu inputs; max_inputs_per_request is %lld", field,
                   n_docs, (long long)max_inputs);
            return NULL;
        }
        for (size_t i = 0; i < n_docs; i++)
            if (!json_is_string(json_array_get(in, i))) {
                refuse(r, SRV_EBADREQUEST,
                       "%s[%zu]: with chunking, %s must be a string or an array of strings", field,
                       i, field);
                return NULL;
            }
    } else if (!json_is_string(in)) {
        refuse(r, SRV_EBADREQUEST, "with chunking, %s must be a string or an array of strings",
               field);
        return NULL;
    }
    embed_job *job = membudget_calloc(1, sizeof *job);
    int32_t *scratch = membudget_malloc((size_t)c->max_tokens * sizeof *scratch);
    builder b = {.job = job, .max_chunks = atomic_load(&api->max_inputs_per_request)};
    if (!job || !scratch || !(job->cu = membudget_calloc(1, sizeof *job->cu)) ||
        !(job->doc_cu = membudget_calloc(n_docs + 1, sizeof *job->doc_cu))) {
        refuse(r, SRV_EINTERNAL, "out of memory");
        goto fail;
    }
    job->n_docs = (int32_t)n_docs;
    job->doc_vector = c->doc_vector;
    for (size_t d = 0; d < n_docs; d++) {
        json_t *x = json_is_array(in) ? json_array_get(in, d) : in;
        if (chunk_document(api, &b, (int32_t)d, json_string_value(x), json_string_length(x), c,
                           scratch, r) != SRV_OK)
            goto fail;
        job->doc_cu[d + 1] = job->n;
    }
    /* A chunk has at most max_seq_length tokens; a batch smaller than that
     * can never run one. */
    for (int32_t i = 0; i < job->n; i++)
        if (job->cu[i + 1] - job->cu[i] > api->max_batch_tokens) {
            refuse(r, SRV_EINVALID,
                   "chunk %d has %d tokens; a batch holds at most %d (max_batch_tokens): ask "
                   "for a smaller chunking.max_tokens",
                   (int)i, (int)(job->cu[i + 1] - job->cu[i]), (int)api->max_batch_tokens);
            goto fail;
        }
    if (job_tokens_seal(job, api->max_batch_tokens, api->model->output_dim, api->kind, api->group,
                        SRV_EINTERNAL, r) != SRV_OK)
        goto fail;
    membudget_free(scratch);
    r->param = NULL;
    return job;
fail:
    membudget_free(scratch);
    embed_job_release(job);
    return NULL;
}

/* ---- the answer ------------------------------------------------------------------------- */

void embed_chunk_doc_vector(const embed_job *job, int32_t d, int C, float *v) {
    memset(v, 0, (size_t)C * sizeof *v);
    double total = 0;
    for (int32_t k = job->doc_cu[d]; k < job->doc_cu[d + 1]; k++) {
        const double w =
            job->doc_vector == EMBED_DOCVEC_TOKEN_WEIGHTED ? job->cu[k + 1] - job->cu[k] : 1;
        const float *x = job->out + (size_t)k * (size_t)C;
        for (int j = 0; j < C; j++)
            v[j] += (float)(w * x[j]);
        total += w;
    }
    for (int j = 0; total > 0 && j < C; j++)
        v[j] = (float)(v[j] / total);
    if (job->normalize)
        bert_l2_normalize(v, C);
}

/* A vector post-processed (embed_request.h) and written in the job's
 * encoding. */
static void vector(jwriter *w, const embed_job *job, float *v, int C) {
    embed_write_vector(w, job, v, embed_vector_finish(job, v, C));
}

/* Chunk k of document d's "index", "start", "stop" and "tokens". */
static void chunk_fields(jwriter *w, const embed_job *job, int32_t d, int32_t k) {
    jw_lit(w, "\"index\":");
    jw_int(w, k - job->doc_cu[d]);
    jw_lit(w, ",\"start\":");
    jw_int(w, job->spans[2 * k]);
    jw_lit(w, ",\"stop\":");
    jw_int(w, job->spans[2 * k + 1]);
    jw_lit(w, ",\"tokens\":");
    jw_int(w, job->cu[k + 1] - job->cu[k]);
}

static void chunks_of(jwriter *w, embed_job *job, int32_t d, int C) {
    jw_lit(w, "[");
    for (int32_t k = job->doc_cu[d]; k < job->doc_cu[d + 1] && !w->failed; k++) {
        if (k > job->doc_cu[d])
            jw_lit(w, ",");
        jw_lit(w, "{");
        chunk_fields(w, job, d, k);
        jw_lit(w, ",\"embedding\":");
        vector(w, job, job->out + (size_t)k * (size_t)C, C);
        jw_lit(w, "}");
    }
    jw_lit(w, "]");
}

/* Document d's vector as the answer gives it (post-processed), made in doc's C
 * floats of scratch; JSON null without a document vector. */
static void doc_vector(jwriter *w, embed_job *job, int32_t d, int C, float *doc) {
    if (job->doc_vector == EMBED_DOCVEC_NONE) {
        jw_lit(w, "null");
        return;
    }
    embed_chunk_doc_vector(job, d, C, doc);
    vector(w, job, doc, C);
}

void embed_chunk_encode(embed_job *job, int C, jwriter *w) {
    float *doc = membudget_malloc((size_t)C * sizeof *doc);
    if (!doc)
        w->failed = true;
    const bool openai = job->api == API_OPENAI;
    embed_write_list_head(w, job);
    for (int32_t d = 0; d < job->n_docs && !w->failed; d++) {
        if (d)
            jw_lit(w, ",");
        if (openai) {
            embed_write_openai_item(w, d);
        } else {
            jw_lit(w, "{\"embedding\":");
        }
        doc_vector(w, job, d, C, doc);
        jw_lit(w, ",\"chunks\":");
        chunks_of(w, job, d, C);
        jw_lit(w, "}");
    }
    membudget_free(doc);
    embed_write_list_tail(w, job);
}

/* ---- the streamed answer ------------------------------------------------------------------ */

int embed_stream_parse(const json_t *v, bool chunked, bool *out, embed_refusal *r) {
    *out = false;
    if (!v || json_is_null(v))
        return SRV_OK;
    r->param = "stream";
    if (!json_is_boolean(v))
        return refuse(r, SRV_EBADREQUEST, "stream must be true or false");
    if (json_is_true(v) && !chunked)
        return refuse(r, SRV_EINVALID,
                      "stream applies to chunked requests: add \"chunking\" (one line per "
                      "chunk)");
    *out = json_is_true(v);
    r->param = NULL;
    return SRV_OK;
}

/* Sends what w holds as one NDJSON line (one write for the line and its
 * newline: written in two, a refusal of the second would run this line into
 * the next one) and empties w; false when it cannot be sent. */
static bool write_line(http_stream *st, jwriter *w) {
    jw_lit(w, "\n");
    const bool ok = !w->failed && !w->nonfinite && http_stream_write(st, w->buf, w->len);
    jw_free(w);
    return ok;
}

void embed_chunk_stream_piece(job *j) {
    embed_job *job = (embed_job *)j;
    const int C = job->out_dim;
    /* A copy: a vector cut to dimensions is renormalised in place, and the
     * document vector is made from the whole ones at the end. */
    float *v = membudget_malloc((size_t)C * sizeof *v);
    bool ok = v != NULL;
    for (int32_t k = j->first; ok && k < j->first + j->count; k++) {
        while (job->streamed_doc < job->n_docs - 1 && job->doc_cu[job->streamed_doc + 1] <= k)
            job->streamed_doc++;
        const int32_t d = job->streamed_doc;
        memcpy(v, job->out + (size_t)k * (size_t)C, (size_t)C * sizeof *v);
        jwriter w;
        jw_init(&w, 0);
        jw_lit(&w, "{\"document\":");
        jw_int(&w, d);
        jw_lit(&w, ",");
        chunk_fields(&w, job, d, k);
        jw_lit(&w, ",\"embedding\":");
        vector(&w, job, v, C);
        jw_lit(&w, "}");
        ok = write_line(j->stream, &w);
    }
    membudget_free(v);
    /* A line that cannot be sent: the client is gone or the budget is
     * full; either way no further piece is worth computing. */
    if (!ok && j->err == SRV_OK) {
        j->err = SRV_EUNAVAILABLE;
        snprintf(j->why, sizeof j->why, "the streamed answer could not be written");
    }
}

void embed_chunk_stream_end(job *j) {
    embed_job *job = (embed_job *)j;
    jwriter w;
    if (j->err != SRV_OK) {
        jw_init(&w, 0);
        jw_lit(&w, "{\"error\":{\"message\":");
        jw_str(&w, j->why, strlen(j->why));
        jw_lit(&w, ",\"code\":");
        jw_int(&w, srv_error_status(j->err));
        jw_lit(&w, "}}");
        write_line(j->stream, &w);
        return;
    }
    const int C = job->out_dim;
    float *doc = membudget_malloc((size_t)C * sizeof *doc);
    jw_init(&w, 0);
    if (!doc)
        w.failed = true;
    if (job->api == API_OPENAI)
        embed_write_openai_head(&w);
    else
        jw_lit(&w, "{\"data\":[");
    for (int32_t d = 0; d < job->n_docs && !w.failed; d++) {
        if (d)
            jw_lit(&w, ",");
        jw_lit(&w, "{\"index\":");
        jw_int(&w, d);
        jw_lit(&w, ",\"embedding\":");
        doc_vector(&w, job, d, C, doc);
        jw_lit(&w, ",\"chunks\":");
        jw_int(&w, job->doc_cu[d + 1] - job->doc_cu[d]);
        jw_lit(&w, "}");
    }
    membudget_free(doc);
    if (job->api == API_OPENAI) {
        embed_write_openai_tail(&w, job);
    } else {
        jw_lit(&w, "],\"usage\":{\"prompt_tokens\":");
        jw_int(&w, job->cu[job->n]);
        jw_lit(&w, ",\"total_tokens\":");
        jw_int(&w, job->cu[job->n]);
        jw_lit(&w, "}}");
    }
    if (!write_line(j->stream, &w)) {
        j->err = SRV_EUNAVAILABLE;
        snprintf(j->why, sizeof j->why, "the streamed answer could not be written");
    }
}

int embed_submit(http_request *req, const embed_api *api, embed_job *job) {
    const int64_t timeout_ms = atomic_load(&api->request_timeout_ms);
    if (!job->stream)
        return job_submit(req, &job->base, api->sched, timeout_ms, embed_job_release);
    job->base.on_piece = embed_chunk_stream_piece;
    job->base.on_end = embed_chunk_stream_end;
    return job_submit_stream(req, &job->base, api->sched, timeout_ms, embed_job_release,
                             "application/x-ndjson");
}

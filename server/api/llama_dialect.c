/* llama_dialect.c — llama.cpp server's routes: POST /embedding, POST
 * /detokenize, and /tokenize's answer for a body with `content` (the route
 * is compat_api.c's, shared with TEI). Bodies as field tables read into the
 * one embeddings request (embed_request.h); errors in OpenAI's shape, as
 * llama.cpp's server answers them. */
#include <stdint.h>

#include "server/api/compat_api.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/job_tokens.h"
#include "server/work/membudget.h"

typedef srv_refusal refusal;

/* ---- the bodies' fields ------------------------------------------------------------------ */

/* Every llama.cpp body here, in one struct. As llama.cpp's server, members
 * no table names are ignored. */
typedef struct llama_req {
    json_t *input, *content, *tokens;
    int64_t norm;
    bool add_special, parse_special, with_pieces;
} llama_req;

#define AT(f) offsetof(llama_req, f)

/* /embedding: the texts in `input`, else `content`. The texts' rows come
 * before embd_normalize's: a decoding refused there has read them. */
static const fld_row EMBEDDING_ROWS[] = {
    {"input", FLD_ANY, FLD_NULL, AT(input), .param = NULL},
    {"content", FLD_ANY, FLD_NULL, AT(content), .param = NULL},
    {"embd_normalize", FLD_INT, 0, AT(norm), .dflt = 2, .min = INT64_MIN, .max = INT64_MAX,
     .type_msg = "embd_normalize must be an integer"},
};
static const fld_table EMBEDDING = FLD_OPEN_TABLE(EMBEDDING_ROWS);

static const fld_row TOKENS_ROWS[] = {
    {"content", FLD_ANY, FLD_NULL, AT(content), .param = NULL},
    {"add_special", FLD_BOOL, 0, AT(add_special), .dflt = false},
    {"parse_special", FLD_BOOL, 0, AT(parse_special), .dflt = true},
    {"with_pieces", FLD_BOOL, 0, AT(with_pieces), .dflt = false},
};
static const fld_table LLAMA_TOKENS = FLD_TABLE(TOKENS_ROWS, NULL, NULL);

static const fld_row DETOKENIZE_ROWS[] = {
    {"tokens", FLD_ANY, FLD_NULL, AT(tokens), .param = NULL},
};
static const fld_table DETOKENIZE = FLD_OPEN_TABLE(DETOKENIZE_ROWS);

/* ---- /embedding ---------------------------------------------------------------------------- */

/* The request of a /embedding body: the texts or token ids as TEI takes
 * them, never a prompt, raw pooled vectors normalised at answer time by
 * llama.cpp's embd_normalize. */
static int embedding_fill(const compat_api *c, json_t *root, embed_request *e, json_t **hold,
                          refusal *r) {
    (void)hold;
    llama_req q = {0};
    const int rc = fld_decode(&EMBEDDING, root, &q, c->eapi, r);
    json_t *texts = q.input ? q.input : q.content;
    if (!texts)
        return refuse(r, SRV_EBADREQUEST, "\"input\" or \"content\" must be provided");
    if (rc != SRV_OK)
        return rc;
    if (q.norm < -1 || q.norm > 64)
        return refuse(r, SRV_EINVALID,
                      "embd_normalize is %lld; -1 (none), 0 (max abs), 1 (taxicab), "
                      "2 (Euclidean) or a p-norm up to 64",
                      (long long)q.norm);
    *e = embed_request_of(c->eapi, texts, "inputs", EMBED_INPUTS_MIXED);
    e->normalize = false;
    e->p_norm = (int)q.norm;
    return SRV_OK;
}

/* Several models: `model` picks one as on every other route, and an
 * unknown name is the 404 of this route's (OpenAI's) error shape. One
 * model: llama.cpp's server ignores `model`, and so does this route. */
static int llama_embedding(http_request *req, void *ctx) {
    return compat_embed_route(req, ctx, embedding_fill, true);
}

/* [{"index": i, "embedding": [[floats]]}, ...]: llama.cpp's shape for a pooled
 * model, one vector per input inside a list of one. */
static int embedding_answer(http_request *req, const compat_api *c, embed_job *job) {
    const int C = c->eapi->model->output_dim;
    jwriter w;
    jw_init(&w, (size_t)job->n * (13 * (size_t)C + 40) + 2);
    jw_lit(&w, "[");
    for (int32_t i = 0; i < job->n && !w.failed; i++) {
        float *v = job->out + (size_t)i * (size_t)C;
        const size_t d = embed_vector_finish(job, v, C);
        if (i)
            jw_lit(&w, ",");
        jw_lit(&w, "{\"index\":");
        jw_int(&w, i);
        jw_lit(&w, ",\"embedding\":[");
        jw_f32s(&w, v, d);
        jw_lit(&w, "]}");
    }
    jw_lit(&w, "]");
    return jw_reply(req, 200, &w);
}

static int llama_embedding_resumed(http_request *req, void *ctx) {
    return compat_resumed(req, ctx, embedding_answer);
}

/* ---- /tokenize (a body with `content`), /detokenize ------------------------------------------ */

json_t *llama_tokens(const compat_api *c, json_t *root, refusal *r) {
    llama_req q;
    if (fld_decode(&LLAMA_TOKENS, root, &q, c->eapi, r) != SRV_OK)
        return NULL;
    json_t *content = q.content;
    const bool specials = q.add_special, parse_special = q.parse_special,
               with_pieces = q.with_pieces;
    if (!json_is_string(content)) {
        refuse(r, SRV_EBADREQUEST, "content must be a string");
        return NULL;
    }
    if (!parse_special) {
        refuse(r, SRV_EINVALID,
               "parse_special false is not supported: special tokens written in the text are "
               "read as special tokens, as Hugging Face tokenizers reads them");
        return NULL;
    }
    const tok_tokenizer *tok = c->eapi->tok;
    const size_t len = json_string_length(content);
    /* Never truncated: it tells how long a text is. Most texts have at most
     * a piece a byte, plus the specials. */
    const size_t guess = len + (size_t)tok_num_special(tok) + 1;
    tok_output o;
    int rc = job_tokens_encode_whole(tok, json_string_value(content), len,
                                     guess < INT32_MAX ? (int32_t)guess : INT32_MAX, &o);
    const int32_t *ids = o.ids;
    const tok_span *sp = o.offsets;
    json_t *out = NULL;
    if (rc == TOK_EUTF8)
        refuse(r, SRV_EBADREQUEST, "content is not valid UTF-8 (byte %zu)", o.error_at);
    else if (rc == TOK_ECOMPLEX)
        refuse(r, SRV_ETOKENIZER, "content: %s", tok_strerror(rc));
    else if (rc != TOK_OK)
        refuse(r, rc == TOK_ENOMEM ? SRV_EMEMORY : SRV_EINTERNAL, "tokenizer: %s",
               tok_strerror(rc));
    else if ((out = json_array())) {
        for (int32_t k = 0; out && k < o.n; k++) {
            if (!specials && sp[k].start == sp[k].end)
                continue;
            json_t *t = with_pieces ? json_pack("{s:i, s:s}", "id", (json_int_t)ids[k], "piece",
                                                tok_id_to_token(tok, ids[k]))
                                    : json_integer(ids[k]);
            if (json_array_append_new(out, t) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        out = out ? json_pack("{s:o}", "tokens", out) : NULL;
        if (!out)
            refuse(r, SRV_EMEMORY, "out of memory");
    } else {
        refuse(r, SRV_EMEMORY, "out of memory");
    }
    membudget_free(o.ids);
    membudget_free(o.offsets);
    return out;
}

static json_t *detokenize_answer(http_request *req, const compat_api *c, json_t *root, refusal *r) {
    (void)req;
    llama_req q = {0};
    fld_decode(&DETOKENIZE, root, &q, c->eapi, r);
    if (!json_is_array(q.tokens)) {
        refuse(r, SRV_EBADREQUEST, "tokens must be an array of token ids");
        return NULL;
    }
    json_t *text = compat_decode_ids(c, q.tokens, false, r);
    return text ? json_pack("{s:o}", "content", text) : NULL;
}

static int llama_detokenize(http_request *req, void *ctx) {
    return compat_json_route(req, ctx, detokenize_answer);
}

/* ---- registration ----------------------------------------------------------------------- */

int llama_dialect_register(compat_api *c, routes *t) {
    const http_route mine[] = {
        {"POST", "/embedding", true, HTTP_AUTH_KEY, llama_embedding, llama_embedding_resumed, c,
         HTTP_ERRORS_OPENAI},
        {"POST", "/detokenize", true, HTTP_AUTH_KEY, llama_detokenize, NULL, c, HTTP_ERRORS_OPENAI},
    };
    return routes_add_all(t, mine, sizeof mine / sizeof mine[0]);
}

/* compat_api.c — what the dialects of TEI, llama.cpp and Infinity
 * (tei_dialect.c, llama_dialect.c, infinity_dialect.c) share: the model's
 * prompts, token ids back to text, the one way their
 * routes submit a request (embed_request.h) and answer, the /tokenize both
 * TEI and llama.cpp answer, and the registration of them all. */
#include "server/api/compat_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api/embed_api.h"
#include "server/api/embed_chunk.h"
#include "server/api/errors.h"
#include "server/work/membudget.h"

typedef srv_refusal refusal;

/* ---- set-up ------------------------------------------------------------------------ */

static int read_prompts(compat_api *c, const char *model_dir, char *err, size_t err_len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config_sentence_transformers.json", model_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0; /* no prompts */
    fclose(f);
    json_error_t e;
    json_t *root = json_load_file(path, 0, &e);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        snprintf(err, err_len, "%s: %s", path, root ? "not a JSON object" : e.text);
        return -1;
    }
    json_t *prompts = json_object_get(root, "prompts");
    json_t *def = json_object_get(root, "default_prompt_name");
    if (prompts && !json_is_null(prompts)) {
        const char *k;
        json_t *v;
        bool ok = json_is_object(prompts);
        json_object_foreach(prompts, k, v) ok = ok && json_is_string(v);
        if (!ok) {
            snprintf(err, err_len, "%s: prompts must map names to strings", path);
            json_decref(root);
            return -1;
        }
        c->prompts = json_incref(prompts);
    }
    if (def && !json_is_null(def)) {
        json_t *text = json_is_string(def) && c->prompts
                           ? json_object_get(c->prompts, json_string_value(def))
                           : NULL;
        if (!text) {
            snprintf(err, err_len, "%s: default_prompt_name names no prompt", path);
            json_decref(root);
            return -1;
        }
        c->default_prompt = json_string_value(text);
    }
    json_decref(root);
    return 0;
}

int compat_api_init(compat_api *c, embed_api *eapi, const char *model_dir, char *err,
                    size_t err_len) {
    *c = (compat_api){.eapi = eapi, .created = (int64_t)time(NULL)};
    return read_prompts(c, model_dir, err, err_len) != 0 ? -1 : 0;
}

void compat_api_free(compat_api *c) {
    json_decref(c->prompts);
    *c = (compat_api){0};
}

/* ---- prompts ------------------------------------------------------------------------- */

int compat_prompt(const compat_api *c, const json_t *name, const char **text, refusal *r) {
    *text = c->default_prompt;
    if (!name || json_is_null(name))
        return SRV_OK;
    if (!json_is_string(name))
        return refuse(r, SRV_EBADREQUEST, "prompt_name must be a string");
    json_t *t = c->prompts ? json_object_get(c->prompts, json_string_value(name)) : NULL;
    if (!t)
        return refuse(r, SRV_EINVALID,
                      "prompt_name \"%.64s\" is not among the prompts of the model's "
                      "config_sentence_transformers.json",
                      json_string_value(name));
    *text = json_string_value(t);
    return SRV_OK;
}

json_t *compat_decode_ids(const compat_api *c, const json_t *ids, bool skip, refusal *r) {
    size_t n = json_array_size(ids);
    int32_t *v = membudget_malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    const int32_t vocab = tok_vocab_size(c->eapi->tok);
    for (size_t k = 0; k < n; k++) {
        json_t *x = json_array_get(ids, k);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= vocab) {
            membudget_free(v);
            refuse(r, SRV_EINVALID, "token %zu is not an id of the vocabulary [0, %d)", k,
                   (int)vocab);
            return NULL;
        }
        v[k] = (int32_t)json_integer_value(x);
    }
    /* tok_decode allocates with malloc, outside the request's budget: a
     * string a token, the decoders' copies and the text (about three times
     * the pieces' bytes and 50 bytes a token, measured), charged here for
     * as long as it runs, so a body of millions of ids is refused as any
     * request too large for the budget. */
    size_t bytes = 0;
    for (size_t k = 0; k < n; k++) {
        const char *piece = tok_id_to_token(c->eapi->tok, v[k]);
        bytes += piece ? strlen(piece) : 0;
    }
    const size_t cost = 3 * bytes + 64 * n;
    if (!membudget_charge(cost)) {
        membudget_free(v);
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    const size_t charged = membudget_charging() ? cost : 0;
    /* The tokenizer's own decoder (WordPiece's "##" and cleanup,
     * SentencePiece's U+2581, byte-level BPE's bytes), as TEI's and
     * llama.cpp's servers decode with the model's tokenizer. */
    char *text = NULL;
    size_t len = 0;
    const int rc = tok_decode(c->eapi->tok, v, n, skip, &text, &len);
    membudget_free(v);
    json_t *out = rc == TOK_OK ? json_stringn(text, len) : NULL;
    free(text);
    membudget_uncharge(charged);
    if (rc == TOK_EINVAL)
        refuse(r, SRV_EINVALID, "the ids are not all tokens of the vocabulary [0, %d)", (int)vocab);
    else if (rc != TOK_OK && rc != TOK_ENOMEM)
        refuse(r, SRV_EINTERNAL, "tokenizer: %s", tok_strerror(rc));
    else if (!out)
        refuse(r, SRV_EMEMORY, "out of memory");
    return out;
}

/* ---- submitting and answering -------------------------------------------------------- */

static int refused(http_request *req, const refusal *r) {
    if (membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    return http_reply_error(req, r->err ? r->err : SRV_EINTERNAL, "%s", r->msg);
}

int compat_reply(http_request *req, json_t *out) {
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory encoding the answer");
    return http_reply_json(req, 200, out);
}

/* The model a request names, where several are served: the request goes
 * to it (*c and req's context), and an unknown name is answered with the
 * 404 of the route's error shape. Returns 0, or -1 once answered. */
static int route_by_model(http_request *req, compat_api **c, const json_t *root, int *answered) {
    compat_api *to = (*c)->peers[embed_route_index((*c)->eapi, root, (*c)->eapi->group)];
    if (to != *c)
        http_set_ctx(req, *c = to);
    refusal mr = {0};
    if (embed_check_model((*c)->eapi, json_object_get(root, "model"), &mr) == SRV_OK)
        return 0;
    *answered = http_reply_error_at(req, mr.err, mr.param, mr.code, "%s", mr.msg);
    return -1;
}

int compat_embed_route(http_request *req, void *ctx, compat_fill fill, bool by_model) {
    compat_api *c = ctx;
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    if (by_model && c->peers && route_by_model(req, &c, root, &answered) != 0) {
        http_body_json_free(req, root);
        return answered;
    }
    refusal r = {0};
    embed_request e;
    json_t *hold = NULL;
    embed_job *job =
        fill(c, root, &e, &hold, &r) == SRV_OK ? embed_request_job(c->eapi, &e, &r) : NULL;
    json_decref(hold);
    http_body_json_free(req, root);
    if (!job)
        return refused(req, &r);
    return embed_submit(req, c->eapi, job);
}

int compat_resumed(http_request *req, void *ctx, compat_answer answer) {
    const compat_api *c = ctx;
    embed_job *job = http_user(req);
    embed_api_stamp(req, c->eapi, job);
    if (job->base.err != SRV_OK)
        return http_reply_error(req, job->base.err, "%s", job->base.why);
    if (!job->base.ran)
        return http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
    return answer(req, c, job);
}

int compat_json_route(http_request *req, void *ctx, compat_json answer) {
    int answered = HTTP_FAIL;
    json_t *root = http_body_json(req, &answered);
    if (!root)
        return answered;
    refusal r = {0};
    json_t *out = answer(req, ctx, root, &r);
    http_body_json_free(req, root);
    if (!out && r.err)
        return refused(req, &r);
    return compat_reply(req, out);
}

/* ---- /tokenize: TEI's shape for `inputs`, llama.cpp's for `content` ----------------------- */

static json_t *tokens(http_request *req, const compat_api *c, json_t *root, refusal *r) {
    if (json_object_get(root, "content")) {
        http_set_error_shape(req, HTTP_ERRORS_OPENAI); /* llama.cpp's errors are OpenAI's */
        return llama_tokens(c, root, r);
    }
    return embed_api_tokens(c->eapi, root, &r->err, r->msg, sizeof r->msg);
}

static int tokenize(http_request *req, void *ctx) {
    return compat_json_route(req, ctx, tokens);
}

/* ---- registration ---------------------------------------------------------------------- */

int compat_api_register(compat_api *c, routes *t) {
    const http_route tok = {"POST",   "/tokenize", true, HTTP_AUTH_KEY,
                            tokenize, NULL,        c,    HTTP_ERRORS_TEI};
    if (tei_dialect_register(c, t) != 0 || routes_add(t, tok) != 0 ||
        infinity_dialect_register(c, t) != 0 || llama_dialect_register(c, t) != 0)
        return -1;
    return 0;
}

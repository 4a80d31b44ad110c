/* compat_api.c — TEI's, Infinity's and llama.cpp's routes over the one
 * embeddings service.
 *
 * A request is decoded here into token ids — each text with its prompt,
 * tokenized and cut on the side asked for; token ids as given — and becomes
 * {"input": [[ids], ...]} for the OpenAI decoding (embed_codec.h), which
 * checks the ids, the limits and the budget and makes the job. The job
 * computes raw pooled vectors (normalize off) or unit ones; each route's
 * resumed function writes its own answer from them. */
#include "server/api/compat_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api/embed_api.h"
#include "server/api/embed_chunk.h"
#include "server/api/embed_dialect.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/ops/log.h"
#include "server/work/job.h"
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

/* tokenizer.json's added tokens marked special; without the file, the
 * vocabulary's bracketed names ([CLS], [SEP], [PAD], [UNK], [MASK]). */
static int read_specials(compat_api *c, const char *model_dir) {
    const tok_tokenizer *tok = c->eapi->tok;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    json_error_t e;
    json_t *root = json_load_file(path, 0, &e);
    json_t *added = root ? json_object_get(root, "added_tokens") : NULL;
    size_t cap = added ? json_array_size(added) : 5;
    c->special = calloc(cap ? cap : 1, sizeof *c->special);
    if (!c->special) {
        json_decref(root);
        return -1;
    }
    if (added) {
        size_t i;
        json_t *t;
        json_array_foreach(added, i, t) {
            json_t *id = json_object_get(t, "id");
            if (json_is_true(json_object_get(t, "special")) && json_is_integer(id))
                c->special[c->nspecial++] = (int32_t)json_integer_value(id);
        }
    } else {
        static const char *const names[] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"};
        for (size_t i = 0; i < 5; i++) {
            int32_t id = tok_token_to_id(tok, names[i], strlen(names[i]));
            if (id >= 0)
                c->special[c->nspecial++] = id;
        }
    }
    json_decref(root);
    return 0;
}

int compat_api_init(compat_api *c, embed_api *eapi, const char *model_dir, char *err,
                    size_t err_len) {
    *c = (compat_api){.eapi = eapi, .created = (int64_t)time(NULL)};
    if (read_prompts(c, model_dir, err, err_len) != 0)
        return -1;
    if (read_specials(c, model_dir) != 0) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    return 0;
}

void compat_api_free(compat_api *c) {
    json_decref(c->prompts);
    free(c->special);
    *c = (compat_api){0};
}

/* ---- decoding ids to text ------------------------------------------------------------ */

static bool is_special(const compat_api *c, int32_t id) {
    for (size_t i = 0; i < c->nspecial; i++)
        if (c->special[i] == id)
            return true;
    return false;
}

/* The cleanup of tokenizers' WordPiece decoder, applied to each token with its
 * leading space: a space before . ? ! , and before the contractions goes. */
static bool cleans_space(const char *tok) {
    static const char *const glued[] = {".", "?", "!", ",", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t i = 0; i < sizeof glued / sizeof glued[0]; i++)
        if (strcmp(tok, glued[i]) == 0)
            return true;
    return false;
}

/* Appends n bytes at *len where they fit before the NUL's place; *len counts
 * them all. */
static void put(char *out, size_t cap, size_t *len, const char *s, size_t n) {
    if (*len + 1 < cap) {
        size_t room = cap - 1 - *len;
        memcpy(out + *len, s, n < room ? n : room);
    }
    *len += n;
}

size_t compat_decode(const compat_api *c, const int32_t *ids, size_t n, bool skip_special,
                     char *out, size_t cap) {
    size_t len = 0;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        const char *tok = tok_id_to_token(c->eapi->tok, ids[i]);
        if (!tok || (skip_special && is_special(c, ids[i])))
            continue;
        bool space = !first;
        if (!first && strncmp(tok, "##", 2) == 0) {
            tok += 2;
            space = false;
        } else if (space && cleans_space(tok)) {
            space = false;
        }
        first = false;
        if (space)
            put(out, cap, &len, " ", 1);
        put(out, cap, &len, tok, strlen(tok));
    }
    if (cap)
        out[len < cap ? len : cap - 1] = '\0';
    return len;
}

/* ---- texts and ids to token ids -------------------------------------------------------- */

/* The longest text input, special tokens included: max_seq_length. */
static int32_t max_len(const compat_api *c) {
    return embed_max_seq_length(c->eapi);
}

/* The prompt's text for prompt_name (a string, null or absent), as TEI: a
 * name the model's configuration does not have is a 422. */
static int prompt_text(const compat_api *c, json_t *name, const char **text, refusal *r) {
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

typedef struct text_opts {
    const char *prompt; /* prepended to every text; NULL: none */
    bool truncate;
    bool left; /* cut from the start of the text */
} text_opts;

/* One text as a JSON array of its ids: [CLS] ... [SEP], cut to
 * max_seq_length on the side asked for (the special tokens stay), as
 * sentence-transformers does, or refused when longer and truncation is off. */
static json_t *text_ids(const compat_api *c, size_t i, const char *text, size_t len,
                        const text_opts *o, refusal *r) {
    const int32_t max = max_len(c);
    char *joined = NULL;
    if (o->prompt && *o->prompt) {
        size_t pl = strlen(o->prompt);
        if (!(joined = membudget_malloc(pl + len + 1))) {
            refuse(r, SRV_EMEMORY, "out of memory");
            return NULL;
        }
        memcpy(joined, o->prompt, pl);
        memcpy(joined + pl, text, len);
        text = joined;
        len += pl;
    }
    int32_t *ids = membudget_malloc((size_t)max * sizeof *ids);
    int32_t n = 0, n_full = 0;
    size_t error_at = 0;
    int rc = ids ? embed_tokenize(c->eapi, text, len, o->truncate,
                                  o->left ? EMBED_TRUNCATE_LEFT : EMBED_TRUNCATE_RIGHT, ids, &n,
                                  &n_full, &error_at)
                 : TOK_ENOMEM;
    json_t *out = NULL;
    if (rc == TOK_ETOOLONG)
        refuse(r, SRV_EINVALID,
               "input %zu has %d tokens; max_seq_length is %d and truncation is off", i,
               (int)n_full, (int)max);
    else if (rc == TOK_EUTF8)
        refuse(r, SRV_EBADREQUEST, "input %zu is not valid UTF-8 (byte %zu)", i, error_at);
    else if (rc == TOK_ECOMPLEX)
        refuse(r, SRV_ETOKENIZER, "input %zu: %s", i, tok_strerror(rc));
    else if (rc != TOK_OK)
        refuse(r, rc == TOK_ENOMEM ? SRV_EMEMORY : SRV_EINTERNAL, "tokenizer: %s",
               tok_strerror(rc));
    else if ((out = json_array()))
        for (int32_t k = 0; out && k < n; k++)
            if (json_array_append_new(out, json_integer(ids[k])) != 0) {
                json_decref(out);
                out = NULL;
            }
    if (rc == TOK_OK && !out)
        refuse(r, SRV_EMEMORY, "out of memory");
    membudget_free(ids);
    membudget_free(joined);
    return out;
}

/* One input — a string, or an array of token ids taken as given — as ids. */
static json_t *input_ids(const compat_api *c, size_t i, json_t *in, const text_opts *o,
                         refusal *r) {
    if (json_is_string(in))
        return text_ids(c, i, json_string_value(in), json_string_length(in), o, r);
    if (json_is_array(in) && json_array_size(in) > 0 && json_is_integer(json_array_get(in, 0)))
        return json_incref(in); /* the OpenAI decoding checks every id */
    if (json_is_array(in) && json_array_size(in) == 0)
        refuse(r, SRV_EEMPTY, "input %zu is an empty array of token ids", i);
    else
        refuse(r, SRV_EBADREQUEST, "input %zu must be a string or a non-empty array of token ids",
               i);
    return NULL;
}

/* `inputs` as TEI takes it (a string, an array of ids, or an array of
 * strings and id arrays) → the array of id arrays. */
static json_t *inputs_ids(const compat_api *c, json_t *inputs, const text_opts *o, refusal *r) {
    if (!inputs) {
        refuse(r, SRV_EBADREQUEST, "missing field \"inputs\"");
        return NULL;
    }
    json_t *list = json_array();
    if (!list) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    bool single = json_is_string(inputs) ||
                  (json_is_array(inputs) && json_is_integer(json_array_get(inputs, 0)));
    if (!single && !json_is_array(inputs)) {
        json_decref(list);
        refuse(r, SRV_EBADREQUEST,
               "inputs must be a string, an array of token ids, or an array of strings and "
               "token-id arrays");
        return NULL;
    }
    if (!single && json_array_size(inputs) == 0) {
        json_decref(list);
        refuse(r, SRV_EEMPTY, "inputs cannot be empty");
        return NULL;
    }
    /* Past the limit the decoding refuses anyway: say so before tokenizing. */
    const int64_t max_inputs = atomic_load(&c->eapi->max_inputs_per_request);
    if (!single && (int64_t)json_array_size(inputs) > max_inputs) {
        json_decref(list);
        refuse(r, SRV_EINVALID, "inputs has %zu inputs; max_inputs_per_request is %lld",
               json_array_size(inputs), (long long)max_inputs);
        return NULL;
    }
    size_t n = single ? 1 : json_array_size(inputs);
    for (size_t i = 0; i < n; i++) {
        json_t *ids = input_ids(c, i, single ? inputs : json_array_get(inputs, i), o, r);
        if (!ids || json_array_append_new(list, ids) != 0) {
            if (ids && !r->err)
                refuse(r, SRV_EMEMORY, "out of memory");
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* The job for id arrays (stolen), through the OpenAI decoding. */
static embed_job *job_of_ids(const compat_api *c, json_t *list, bool normalize, refusal *r) {
    json_t *root = json_pack("{s:o}", "input", list);
    if (!root) {
        refuse(r, SRV_EMEMORY, "out of memory");
        return NULL;
    }
    embed_job *job =
        embed_api_decode(c->eapi, EMBED_ROUTE_OPENAI, root, &r->err, r->msg, sizeof r->msg);
    json_decref(root);
    if (!job)
        return NULL;
    job->normalize = normalize; /* L2 in the batch; every other choice at encoding */
    job->dimensions = 0;
    return job;
}

/* ---- the request bodies' fields -------------------------------------------------- */

/* Every TEI and llama.cpp body here, in one struct: each table fills its
 * own fields, with the embed_api as the decoder's ctx. The inputs are read
 * by inputs_ids and the routes, null included where a null is answered as
 * a value of the wrong shape. */
typedef struct compat_req {
    json_t *inputs, *prompt_name, *chunking, *stream, *parameters;
    bool normalize, truncate, skip_special, add_special, parse_special, with_pieces;
    int direction;      /* embed_truncation */
    int64_t dimensions; /* 0: every dimension */
} compat_req;

#define AT(f) offsetof(compat_req, f)
#define BOOL_ROW(name, slot, on)                                                                   \
    { name, FLD_BOOL, 0, AT(slot), .dflt = (on) }
/* TEI's text options: truncate's default is the setting (preset). */
#define TRUNCATE_ROW                                                                               \
    { "truncate", FLD_BOOL, FLD_PRESET, AT(truncate), .param = NULL }
#define PROMPT_ROW                                                                                 \
    { "prompt_name", FLD_STRING, 0, AT(prompt_name), .param = NULL }
#define INPUTS_ROW                                                                                 \
    { "inputs", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL }

static const fld_row EMBED_ROWS[] = {
    INPUTS_ROW,
    BOOL_ROW("normalize", normalize, true),
    TRUNCATE_ROW,
    EMBED_TRUNCATION_ROW(AT(direction)),
    PROMPT_ROW,
    EMBED_DIMENSIONS_ROW(AT(dimensions)),
    {"chunking", FLD_ANY, 0, AT(chunking), .param = NULL},
    {"stream", FLD_ANY, 0, AT(stream), .param = NULL},
};
static const fld_table EMBED = FLD_TABLE(EMBED_ROWS, NULL, NULL);

static const fld_row EMBED_ALL_ROWS[] = {
    INPUTS_ROW,
    TRUNCATE_ROW,
    EMBED_TRUNCATION_ROW(AT(direction)),
    PROMPT_ROW,
};
static const fld_table EMBED_ALL = FLD_TABLE(EMBED_ALL_ROWS, NULL, NULL);

/* /similarity's inputs are read whole by the route; its parameters take
 * the text options and, as TEI's, ignore any other member. */
static const fld_row SIMILARITY_ROWS[] = {
    {"inputs", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL},
    {"parameters", FLD_OBJECT, 0, AT(parameters), .param = NULL},
};
static const fld_table SIMILARITY = FLD_TABLE(SIMILARITY_ROWS, NULL, NULL);
static const fld_row PARAMETERS_ROWS[] = {
    TRUNCATE_ROW,
    EMBED_TRUNCATION_ROW(AT(direction)),
    PROMPT_ROW,
};
static const fld_table PARAMETERS = FLD_OPEN_TABLE(PARAMETERS_ROWS);

static const fld_row DECODE_ROWS[] = {
    {"ids", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL},
    BOOL_ROW("skip_special_tokens", skip_special, true),
};
static const fld_table DECODE = FLD_TABLE(DECODE_ROWS, NULL, NULL);

static const fld_row LLAMA_TOKENS_ROWS[] = {
    {"content", FLD_ANY, FLD_NULL, AT(inputs), .param = NULL},
    BOOL_ROW("add_special", add_special, false),
    BOOL_ROW("parse_special", parse_special, true),
    BOOL_ROW("with_pieces", with_pieces, false),
};
static const fld_table LLAMA_TOKENS = FLD_TABLE(LLAMA_TOKENS_ROWS, NULL, NULL);

/* The text options a decoded body asks for. */
static int text_opts_of(const compat_api *c, const compat_req *q, text_opts *o, refusal *r) {
    o->truncate = q->truncate;
    o->left = q->direction == EMBED_TRUNCATE_LEFT;
    return prompt_text(c, q->prompt_name, &o->prompt, r);
}

/* ---- answering --------------------------------------------------------------------- */

/* Parses the body, or answers its 400. */
static json_t *body_of(http_request *req, int *answered) {
    *answered = HTTP_FAIL;
    return http_body_json(req, answered);
}

static int refused(http_request *req, const refusal *r) {
    if (membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    return http_reply_error(req, r->err ? r->err : SRV_EINTERNAL, "%s", r->msg);
}

static int submit(http_request *req, compat_api *c, embed_job *job) {
    return embed_submit(req, c->eapi, job);
}

/* The finished job of a resumed request, or NULL with the error answered. */
static embed_job *finished(http_request *req, const compat_api *c, int *answered) {
    embed_job *job = http_user(req);
    embed_api_stamp(req, c->eapi, job);
    if (job->base.err != SRV_OK) {
        *answered = http_reply_error(req, job->base.err, "%s", job->base.why);
        return NULL;
    }
    if (!job->base.ran) {
        *answered = http_reply_error(req, SRV_EINTERNAL, "the batch did not run this request");
        return NULL;
    }
    return job;
}

static int reply(http_request *req, json_t *out) {
    if (!out && membudget_refused())
        return http_reply_error(req, membudget_error(), "%s", membudget_message());
    if (!out)
        return http_reply_error(req, SRV_EINTERNAL, "out of memory encoding the answer");
    return http_reply_json(req, 200, out);
}

/* ---- TEI: /embed, /, /invocations ------------------------------------------------------- */

/* /embed with "chunking" (embed_chunk.h): texts only, chunked whole. A prompt
 * would sit before every chunk and shift its offsets; it is refused, the
 * model's default one included, rather than dropped silently. */
static embed_job *tei_chunk_job(const compat_api *c, json_t *inputs, json_t *chunking,
                                const text_opts *o, bool normalize, refusal *r) {
    /* A classifier is refused before its chunking is read, as unchunked. */
    if (embed_check_task(c->eapi, r) != SRV_OK)
        return NULL;
    if (o->prompt && *o->prompt) {
        refuse(r, SRV_EINVALID,
               "chunking does not apply a prompt (prompt_name, or the model's default prompt)");
        return NULL;
    }
    embed_chunking ch;
    embed_job *job = embed_chunking_parse(c->eapi, chunking, &ch, r) == SRV_OK
                         ? embed_chunk_job(c->eapi, "inputs", inputs, &ch, r)
                         : NULL;
    if (!job)
        return NULL;
    job->api = API_TEI;
    job->normalize = normalize;
    return job;
}

/* /embed's decoding of a parsed body. */
static embed_job *tei_embed_decode(const compat_api *c, json_t *root, refusal *r) {
    compat_req q = {.truncate = c->eapi->truncate};
    text_opts o = {0};
    bool streamed = false;
    if (fld_decode(&EMBED, root, &q, c->eapi, r) != SRV_OK ||
        text_opts_of(c, &q, &o, r) != SRV_OK ||
        embed_stream_parse(q.stream, q.chunking, &streamed, r) != SRV_OK)
        return NULL;
    embed_job *job;
    if (q.chunking) {
        job = tei_chunk_job(c, q.inputs, q.chunking, &o, q.normalize, r);
        if (job)
            job->stream = streamed;
    } else {
        json_t *list = inputs_ids(c, q.inputs, &o, r);
        job = list ? job_of_ids(c, list, q.normalize, r) : NULL;
    }
    if (job)
        job->dimensions = (int)q.dimensions;
    return job;
}

static int tei_embed(http_request *req, void *ctx) {
    compat_api *c = ctx;
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    refusal r = {0};
    embed_job *job = tei_embed_decode(c, root, &r);
    http_body_json_free(req, root);
    if (!job)
        return refused(req, &r);
    return submit(req, c, job);
}

/* [[floats], ...]: each vector cut to `dimensions` (renormalised when
 * normalize asked for unit vectors). */
static int tei_embed_resumed(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    int answered;
    embed_job *job = finished(req, c, &answered);
    if (!job)
        return answered;
    const size_t C = (size_t)c->eapi->model->output_dim;
    jwriter w;
    jw_init(&w, embed_answer_hint(job, (int)C));
    if (job->doc_cu) { /* chunking: an object per input */
        embed_chunk_encode(job, (int)C, &w);
        return jw_reply(req, 200, &w);
    }
    const size_t d = job->dimensions ? (size_t)job->dimensions : C;
    jw_lit(&w, "[");
    for (int32_t i = 0; i < job->n && !w.failed; i++) {
        float *v = job->out + (size_t)i * C;
        if (job->normalize && d < C)
            bert_l2_normalize(v, (int)d);
        if (i)
            jw_lit(&w, ",");
        jw_f32s(&w, v, d);
    }
    jw_lit(&w, "]");
    return jw_reply(req, 200, &w);
}

/* ---- TEI: /embed_all --------------------------------------------------------------------- */

static int tei_embed_all(http_request *req, void *ctx) {
    compat_api *c = ctx;
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    refusal r = {0};
    compat_req q = {.truncate = c->eapi->truncate};
    text_opts o = {0};
    json_t *list = fld_decode(&EMBED_ALL, root, &q, c->eapi, &r) == SRV_OK &&
                           text_opts_of(c, &q, &o, &r) == SRV_OK
                       ? inputs_ids(c, q.inputs, &o, &r)
                       : NULL;
    embed_job *job = list ? job_of_ids(c, list, false, &r) : NULL;
    http_body_json_free(req, root);
    if (job) {
        const int32_t *cu, *ids;
        const int32_t n = embed_job_inputs(job, &cu, &ids);
        const size_t C = (size_t)c->eapi->model->hidden_size;
        job->hidden = membudget_malloc((size_t)cu[n] * C * sizeof *job->hidden);
        if (!job->hidden) {
            embed_job_release(job);
            job = NULL;
            refuse(&r, SRV_EMEMORY, "out of memory");
        }
    }
    if (!job)
        return refused(req, &r);
    return submit(req, c, job);
}

/* [[[floats] per token] per input]: the last hidden state of every token,
 * the special ones included, as TEI answers. */
static int tei_embed_all_resumed(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    int answered;
    embed_job *job = finished(req, c, &answered);
    if (!job)
        return answered;
    const size_t C = (size_t)c->eapi->model->hidden_size;
    const int32_t *cu, *ids;
    const int32_t n = embed_job_inputs(job, &cu, &ids);
    jwriter w;
    jw_init(&w, (size_t)cu[n] * (13 * C + 2) + 2 * (size_t)n + 2);
    jw_lit(&w, "[");
    for (int32_t i = 0; i < n && !w.failed; i++) {
        if (i)
            jw_lit(&w, ",");
        jw_lit(&w, "[");
        for (int32_t t = cu[i]; t < cu[i + 1]; t++) {
            if (t > cu[i])
                jw_lit(&w, ",");
            jw_f32s(&w, job->hidden + (size_t)t * C, C);
        }
        jw_lit(&w, "]");
    }
    jw_lit(&w, "]");
    return jw_reply(req, 200, &w);
}

/* ---- TEI: /similarity ------------------------------------------------------------------- */

static int tei_similarity(http_request *req, void *ctx) {
    compat_api *c = ctx;
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    refusal r = {0};
    compat_req q = {.truncate = c->eapi->truncate};
    text_opts o = {0};
    fld_decode(&SIMILARITY, root, &q, c->eapi, &r);
    json_t *source = json_object_get(q.inputs, "source_sentence");
    json_t *sentences = json_object_get(q.inputs, "sentences");
    if (r.err) {
    } else if (!json_is_object(q.inputs) || !json_is_string(source) || !json_is_array(sentences)) {
        refuse(&r, SRV_EBADREQUEST,
               "inputs must be {\"source_sentence\": string, \"sentences\": [string, ...]}");
    } else if (json_array_size(sentences) == 0) {
        refuse(&r, SRV_EEMPTY, "`inputs.sentences` cannot be empty");
    } else if (!q.parameters || fld_decode(&PARAMETERS, q.parameters, &q, c->eapi, &r) == SRV_OK) {
        text_opts_of(c, &q, &o, &r);
    }
    json_t *texts = r.err ? NULL : json_array();
    if (texts && (json_array_append(texts, source) != 0 || json_array_extend(texts, sentences))) {
        json_decref(texts);
        texts = NULL;
        refuse(&r, SRV_EMEMORY, "out of memory");
    }
    for (size_t i = 0; texts && i < json_array_size(texts); i++)
        if (!json_is_string(json_array_get(texts, i))) {
            refuse(&r, SRV_EBADREQUEST, "inputs.sentences[%zu] must be a string", i - 1);
            json_decref(texts);
            texts = NULL;
        }
    json_t *list = texts ? inputs_ids(c, texts, &o, &r) : NULL;
    json_decref(texts);
    embed_job *job = list ? job_of_ids(c, list, true, &r) : NULL;
    http_body_json_free(req, root);
    if (!job)
        return refused(req, &r);
    return submit(req, c, job);
}

/* The cosine of the source sentence's vector with each other's: both are
 * unit vectors, so their dot product. */
static int tei_similarity_resumed(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    int answered;
    embed_job *job = finished(req, c, &answered);
    if (!job)
        return answered;
    const size_t C = (size_t)c->eapi->model->output_dim;
    json_t *out = json_array();
    for (int32_t i = 1; out && i < job->n; i++) {
        double dot = 0;
        for (size_t k = 0; k < C; k++)
            dot += (double)job->out[k] * job->out[(size_t)i * C + k];
        if (json_array_append_new(out, json_real(dot)) != 0) {
            json_decref(out);
            out = NULL;
        }
    }
    return reply(req, out);
}

/* ---- TEI /decode, llama.cpp /detokenize ---------------------------------------------- */

/* One id array as text, or NULL with the refusal. */
static json_t *decode_one(const compat_api *c, json_t *ids, bool skip, refusal *r) {
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
    size_t len = compat_decode(c, v, n, skip, NULL, 0);
    char *text = membudget_malloc(len + 1);
    json_t *out = NULL;
    if (text) {
        compat_decode(c, v, n, skip, text, len + 1);
        out = json_stringn(text, len);
    }
    if (!out)
        refuse(r, SRV_EMEMORY, "out of memory");
    membudget_free(text);
    membudget_free(v);
    return out;
}

static int tei_decode(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    int answered;
    json_t *root = body_of(req, &answered);
    if (!root)
        return answered;
    refusal r = {0};
    compat_req q;
    json_t *out = NULL;
    if (fld_decode(&DECODE, root, &q, c->eapi, &r) == SRV_OK) {
        json_t *ids = q.inputs;
        const bool skip_special = q.skip_special;
        if (!json_is_array(ids)) {
            refuse(&r, SRV_EBADREQUEST,
                   "ids must be a non-empty array of token ids or of arrays of token ids");
        } else if (json_array_size(ids) == 0) {
            refuse(&r, SRV_EEMPTY, "`ids` cannot be empty");
        } else {
            bool batch = json_is_array(json_array_get(ids, 0));
            size_t n = batch ? json_array_size(ids) : 1;
            out = json_array();
            for (size_t i = 0; out && i < n; i++) {
                json_t *one = batch ? json_array_get(ids, i) : ids;
                json_t *text = json_is_array(one) ? decode_one(c, one, skip_special, &r) : NULL;
                if (!text && !r.err)
                    refuse(&r, SRV_EBADREQUEST, "ids[%zu] must be an array of token ids", i);
                if (!text || json_array_append_new(out, text) != 0) {
                    json_decref(out);
                    out = NULL;
                }
            }
        }
    }
    http_body_json_free(req, root);
    if (!out)
        return refused(req, &r);
    return reply(req, out);
}

static int llama_detokenize(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    int answered;
    json_t *root = body_of(req, &answered);
    if (!root)
        return answered;
    refusal r = {0};
    json_t *tokens = json_object_get(root, "tokens");
    json_t *text = NULL;
    if (!json_is_array(tokens))
        refuse(&r, SRV_EBADREQUEST, "tokens must be an array of token ids");
    else
        text = decode_one(c, tokens, false, &r);
    http_body_json_free(req, root);
    if (!text)
        return refused(req, &r);
    return reply(req, json_pack("{s:o}", "content", text));
}

/* ---- /tokenize: TEI's shape for `inputs`, llama.cpp's for `content` ----------------------- */

static json_t *llama_tokens(const compat_api *c, json_t *root, refusal *r) {
    compat_req q;
    if (fld_decode(&LLAMA_TOKENS, root, &q, c->eapi, r) != SRV_OK)
        return NULL;
    json_t *content = q.inputs;
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
    /* Never truncated: it tells how long a text is. A text of len bytes has
     * at most len pieces, plus the specials. */
    const int32_t cap = (int32_t)len + tok_num_special(tok) + 1;
    int32_t *ids = membudget_malloc((size_t)cap * sizeof *ids);
    tok_span *sp = membudget_malloc((size_t)cap * sizeof *sp);
    tok_output o = {.ids = ids, .offsets = sp, .capacity = cap};
    int rc = ids && sp ? tok_encode(tok, json_string_value(content), len, 0, &o) : TOK_ENOMEM;
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
    membudget_free(ids);
    membudget_free(sp);
    return out;
}

static int tokenize(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    int answered;
    json_t *root = body_of(req, &answered);
    if (!root)
        return answered;
    refusal r = {0};
    json_t *out;
    if (json_object_get(root, "content")) {
        http_set_error_shape(req, HTTP_ERRORS_OPENAI); /* llama.cpp's errors are OpenAI's */
        out = llama_tokens(c, root, &r);
    } else {
        out = embed_api_tokens(c->eapi, root, &r.err, r.msg, sizeof r.msg);
    }
    http_body_json_free(req, root);
    if (!out)
        return refused(req, &r);
    return reply(req, out);
}

/* ---- llama.cpp: /embedding ------------------------------------------------------------- */

static int llama_embedding(http_request *req, void *ctx) {
    compat_api *c = ctx;
    int answered;
    json_t *root = http_work_body(req, &answered);
    if (!root)
        return answered;
    /* Several models: `model` picks one as on every other route, and an
     * unknown name is the 404 of this route's (OpenAI's) error shape. One
     * model: llama.cpp's server ignores `model`, and so does this route. */
    refusal r = {0};
    if (c->peers) {
        compat_api *to = c->peers[embed_route_index(c->eapi, root, c->eapi->group)];
        if (to != c)
            http_set_ctx(req, c = to);
        embed_refusal mr = {0};
        if (embed_check_model(c->eapi, json_object_get(root, "model"), &mr) != SRV_OK) {
            http_body_json_free(req, root);
            return http_reply_error_at(req, mr.err, mr.param, mr.code, "%s", mr.msg);
        }
    }
    json_t *content = json_object_get(root, "input");
    if (!content)
        content = json_object_get(root, "content");
    json_t *p = json_object_get(root, "embd_normalize");
    int64_t norm = 2;
    if (!content)
        refuse(&r, SRV_EBADREQUEST, "\"input\" or \"content\" must be provided");
    else if (p && !json_is_null(p) && !json_is_integer(p))
        refuse(&r, SRV_EBADREQUEST, "embd_normalize must be an integer");
    else if (p && json_is_integer(p))
        norm = json_integer_value(p);
    if (!r.err && (norm < -1 || norm > 64))
        refuse(&r, SRV_EINVALID,
               "embd_normalize is %lld; -1 (none), 0 (max abs), 1 (taxicab), "
               "2 (Euclidean) or a p-norm up to 64",
               (long long)norm);
    text_opts o = {.truncate = c->eapi->truncate};
    json_t *list = r.err ? NULL : inputs_ids(c, content, &o, &r);
    embed_job *job = list ? job_of_ids(c, list, false, &r) : NULL;
    if (job)
        job->dimensions = (int)norm; /* the answer's norm, read by llama_embedding_resumed */
    http_body_json_free(req, root);
    if (!job)
        return refused(req, &r);
    return submit(req, c, job);
}

/* llama.cpp's common_embd_normalize: -1 none, 0 max absolute value (scaled
 * to int16's range, as it does), 1 taxicab, 2 Euclidean, p > 2 the p-norm. */
static void llama_normalize(float *v, size_t n, int p) {
    double sum = 0;
    if (p < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)v[i]);
        if (p == 0)
            sum = a > sum ? a : sum;
        else
            sum += p == 1 ? a : p == 2 ? a * a : pow(a, p);
    }
    if (p == 0)
        sum /= 32760.0;
    else if (p == 2)
        sum = sqrt(sum);
    else if (p > 2)
        sum = pow(sum, 1.0 / p);
    double scale = sum > 0 ? 1.0 / sum : 0.0;
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(v[i] * scale);
}

/* [{"index": i, "embedding": [[floats]]}, ...]: llama.cpp's shape for a pooled
 * model, one vector per input inside a list of one. */
static int llama_embedding_resumed(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    int answered;
    embed_job *job = finished(req, c, &answered);
    if (!job)
        return answered;
    const size_t C = (size_t)c->eapi->model->output_dim;
    jwriter w;
    jw_init(&w, (size_t)job->n * (13 * C + 40) + 2);
    jw_lit(&w, "[");
    for (int32_t i = 0; i < job->n && !w.failed; i++) {
        float *v = job->out + (size_t)i * C;
        llama_normalize(v, C, job->dimensions);
        if (i)
            jw_lit(&w, ",");
        jw_lit(&w, "{\"index\":");
        jw_int(&w, i);
        jw_lit(&w, ",\"embedding\":[");
        jw_f32s(&w, v, C);
        jw_lit(&w, "]}");
    }
    jw_lit(&w, "]");
    return jw_reply(req, 200, &w);
}

/* ---- Infinity: /models ------------------------------------------------------------------ */

/* Infinity's capability of a model: a one-label classifier is a reranker
 * ("rerank", as Infinity says), another classifier "classify". One model
 * is listed as it always was: "embed", whatever its task. */
static const char *infinity_capability(const compat_api *c) {
    const encoder_info *m = c->eapi->model;
    if (!c->peers || m->task != ENCODER_TASK_CLASSIFY)
        return "embed";
    return m->num_labels == 1 ? "rerank" : "classify";
}

static json_t *infinity_model(const compat_api *c) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[s], s:{}}", "id", c->eapi->model_name, "object",
                     "model", "created", (json_int_t)c->created, "owned_by", "attnserve", "backend",
                     "attnserve", "capabilities", infinity_capability(c), "stats");
}

/* Every served model, as Infinity lists them. */
static int infinity_models(http_request *req, void *ctx) {
    const compat_api *c = ctx;
    json_t *data = json_array();
    const size_t n = c->peers ? c->eapi->npeers : 1;
    for (size_t i = 0; data && i < n; i++)
        if (json_array_append_new(data, infinity_model(c->peers ? c->peers[i] : c)) != 0) {
            json_decref(data);
            data = NULL;
        }
    return reply(req, data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL);
}

/* ---- registration ---------------------------------------------------------------------- */

int compat_api_register(compat_api *c, routes *t) {
    const http_error_shape TEI = HTTP_ERRORS_TEI, OAI = HTTP_ERRORS_OPENAI;
    const http_route mine[] = {
        {"POST", "/embed", true, HTTP_AUTH_KEY, tei_embed, tei_embed_resumed, c, TEI},
        {"POST", "/", true, HTTP_AUTH_KEY, tei_embed, tei_embed_resumed, c, TEI},
        {"POST", "/invocations", true, HTTP_AUTH_KEY, tei_embed, tei_embed_resumed, c, TEI},
        {"POST", "/embed_all", true, HTTP_AUTH_KEY, tei_embed_all, tei_embed_all_resumed, c, TEI},
        {"POST", "/similarity", true, HTTP_AUTH_KEY, tei_similarity, tei_similarity_resumed, c,
         TEI},
        {"POST", "/decode", true, HTTP_AUTH_KEY, tei_decode, NULL, c, TEI},
        {"POST", "/tokenize", true, HTTP_AUTH_KEY, tokenize, NULL, c, TEI},
        {"POST", "/embeddings", true, HTTP_AUTH_KEY, embed_api_openai, embed_api_resumed, c->eapi,
         OAI},
        {"GET", "/models", false, HTTP_AUTH_KEY, infinity_models, NULL, c, OAI},
        {"POST", "/embedding", true, HTTP_AUTH_KEY, llama_embedding, llama_embedding_resumed, c,
         OAI},
        {"POST", "/detokenize", true, HTTP_AUTH_KEY, llama_detokenize, NULL, c, OAI},
    };
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) {
        /* A classifier's / and /invocations are score_api's, as TEI routes
         * them by the model's task. */
        const bool dflt =
            strcmp(mine[i].path, "/") == 0 || strcmp(mine[i].path, "/invocations") == 0;
        if (dflt && (c->eapi->model->task != ENCODER_TASK_EMBED || c->no_root))
            continue;
        if (routes_add(t, mine[i]) != 0)
            return -1;
    }
    return 0;
}

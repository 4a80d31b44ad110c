/* encoder.c — the encoder interface: a table per family, chosen by
 * config.json's model_type, and the description every family shares (task,
 * labels, problem type). */
#include "encoder.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/bert.h"
#include "model/safetensors.h"

/* ---- a family ------------------------------------------------------------------- */
typedef struct encoder_family {
    const char *name;
    const char *const *model_types; /* NULL-terminated */
    /* Reads the family's config from dir into *cfg (allocated) and fills
     * info's shape fields from it. */
    int (*describe)(const char *dir, void **cfg, encoder_info *info, char *err, size_t err_len);
    void (*config_free)(void *cfg);
    int (*load)(const char *dir, gemm_precision p, void **model, char *err, size_t err_len);
    void (*free)(void *model);
    gemm_precision (*precision)(const void *model);
    size_t (*owned_bytes)(const void *model);
    size_t (*mapped_bytes)(const void *model);
    int (*workspace_create)(const void *model, int max_tokens, int nthreads,
                            const attn_backend *const *backends, size_t nbackends, void **ws,
                            char *err, size_t err_len);
    void (*workspace_free)(void *ws);
    size_t (*workspace_bytes)(const void *ws);
    void (*set_raw)(void *ws, int raw);
    const float *(*hidden)(const void *ws);
    void (*set_attn_tap)(void *ws, int layer, encoder_attn_tap_fn fn, void *ctx);
    const encoder_stage_ns *(*stage_ns)(const void *ws);
    int (*forward)(const void *model, void *ws, const attn_backend *attn, const attn_parallel *par,
                   const int32_t *ids, const int32_t *type_ids, const int32_t *cu, int batch,
                   float *out, char *err, size_t err_len);
} encoder_family;

/* ---- the bert family: BERT, RoBERTa, XLM-RoBERTa (model/bert.h) ------------------- */
static const char *const bert_pool_names[] = {
    [BERT_POOL_MEAN] = "mean",
    [BERT_POOL_CLS] = "cls",
    [BERT_POOL_MAX] = "max",
    [BERT_POOL_MEAN_SQRT_LEN] = "mean_sqrt_len_tokens",
    [BERT_POOL_LASTTOKEN] = "lasttoken",
};

/* "post-layernorm", "pre-rmsnorm", ...: where the norms sit and their kind. */
static const char *norm_desc(const bert_config *c) {
    static const char *const post[] = {[ENC_NORM_LAYER] = "post-layernorm",
                                       [ENC_NORM_RMS] = "post-rmsnorm",
                                       [ENC_NORM_RMS_GEMMA] = "post-rmsnorm (gemma)"};
    static const char *const pre[] = {[ENC_NORM_LAYER] = "pre-layernorm",
                                      [ENC_NORM_RMS] = "pre-rmsnorm",
                                      [ENC_NORM_RMS_GEMMA] = "pre-rmsnorm (gemma)"};
    static const char *const both[] = {[ENC_NORM_LAYER] = "pre- and post-layernorm",
                                       [ENC_NORM_RMS] = "pre- and post-rmsnorm",
                                       [ENC_NORM_RMS_GEMMA] = "pre- and post-rmsnorm (gemma)"};
    return c->pre_norm && c->post_norms ? both[c->norm]
           : c->pre_norm                ? pre[c->norm]
                                        : post[c->norm];
}

static void bert_fill_info(const bert_config *c, encoder_info *i) {
    static const char *const families[] = {[BERT_FAMILY_BERT] = "bert",
                                           [BERT_FAMILY_MODERNBERT] = "modernbert",
                                           [BERT_FAMILY_QWEN3] = "qwen3",
                                           [BERT_FAMILY_GEMMA3] = "gemma3"};
    i->family = families[c->family];
    i->architecture = c->architecture;
    i->task = c->head == BERT_HEAD_NONE ? ENCODER_TASK_EMBED : ENCODER_TASK_CLASSIFY;
    i->output_dim = c->output_dim;
    i->hidden_size = c->hidden_size;
    i->num_labels = c->head == BERT_HEAD_NONE ? 0 : c->num_labels;
    i->token_types = c->type_vocab_size > 1;
    i->type_vocab_size = c->type_vocab_size;
    i->vocab_size = c->vocab_size;
    i->num_layers = c->num_layers;
    i->num_heads = c->num_heads;
    i->head_dim = c->head_dim;
    i->intermediate_size = c->intermediate_size;
    i->max_positions = c->max_positions;
    i->max_seq_length = c->max_seq_length;
    i->pooling = bert_pool_names[c->pooling];
    i->normalize = c->head == BERT_HEAD_NONE && c->normalize;
    i->dense_modules = c->ndense;
    i->position_bias = enc_pos_attn_name(c->pos_attn);
    i->position = enc_pos_scheme_name(c->abs_positions, c->pos_attn, c->rope);
    i->norm = norm_desc(c);
    i->mlp = enc_mlp_name(c->mlp);
    i->attention = c->causal ? "causal" : "bidirectional";
    i->num_kv_heads = c->num_kv_heads;
    i->types_unused = !c->token_type_table;
    i->window = 0;
    for (int l = 0; c->window > 0 && l < c->num_layers; l++)
        i->window = c->sliding[l] ? c->window : i->window;
}

static int bert_describe(const char *dir, void **cfg, encoder_info *info, char *err,
                         size_t err_len) {
    bert_config *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return BERT_ENOMEM;
    }
    int rc = bert_config_load(dir, c, err, err_len);
    if (rc) {
        free(c);
        return rc;
    }
    bert_fill_info(c, info);
    *cfg = c;
    return BERT_OK;
}

static int bert_fam_load(const char *dir, gemm_precision p, void **model, char *err,
                         size_t err_len) {
    bert_model *m;
    int rc = bert_load_precision(dir, p, &m, err, err_len);
    *model = rc ? NULL : m;
    return rc;
}
static void bert_fam_free(void *m) {
    bert_free(m);
}
static gemm_precision bert_fam_precision(const void *m) {
    return bert_precision(m);
}
static size_t bert_fam_owned(const void *m) {
    return bert_owned_bytes(m);
}
static size_t bert_fam_mapped(const void *m) {
    return bert_mapped_bytes(m);
}
static int bert_fam_ws_create(const void *m, int max_tokens, int nthreads,
                              const attn_backend *const *backends, size_t nbackends, void **ws,
                              char *err, size_t err_len) {
    bert_workspace *w;
    int rc = bert_workspace_create(m, max_tokens, nthreads, backends, nbackends, &w, err, err_len);
    *ws = rc ? NULL : w;
    return rc;
}
static void bert_fam_ws_free(void *ws) {
    bert_workspace_free(ws);
}
static size_t bert_fam_ws_bytes(const void *ws) {
    return bert_workspace_bytes(ws);
}
static void bert_fam_set_raw(void *ws, int raw) {
    bert_workspace_set_raw(ws, raw);
}
static const float *bert_fam_hidden(const void *ws) {
    return bert_workspace_hidden(ws);
}
static void bert_fam_set_tap(void *ws, int layer, encoder_attn_tap_fn fn, void *ctx) {
    bert_workspace_set_attn_tap(ws, layer, fn, ctx);
}
static const encoder_stage_ns *bert_fam_stage_ns(const void *ws) {
    return bert_workspace_stage_ns(ws);
}
static int bert_fam_forward(const void *m, void *ws, const attn_backend *attn,
                            const attn_parallel *par, const int32_t *ids, const int32_t *type_ids,
                            const int32_t *cu, int batch, float *out, char *err, size_t err_len) {
    return bert_forward_types(m, ws, attn, par, ids, type_ids, cu, batch, out, err, err_len);
}

static const char *const bert_model_types[] = {"bert",       "roberta", "xlm-roberta", "mpnet",
                                               "modernbert", "qwen3",   "gemma3_text", NULL};

static const encoder_family family_bert = {
    .name = "bert",
    .model_types = bert_model_types,
    .describe = bert_describe,
    .config_free = free,
    .load = bert_fam_load,
    .free = bert_fam_free,
    .precision = bert_fam_precision,
    .owned_bytes = bert_fam_owned,
    .mapped_bytes = bert_fam_mapped,
    .workspace_create = bert_fam_ws_create,
    .workspace_free = bert_fam_ws_free,
    .workspace_bytes = bert_fam_ws_bytes,
    .set_raw = bert_fam_set_raw,
    .hidden = bert_fam_hidden,
    .set_attn_tap = bert_fam_set_tap,
    .stage_ns = bert_fam_stage_ns,
    .forward = bert_fam_forward,
};

static const encoder_family *const families[] = {&family_bert};

/* ---- the description -------------------------------------------------------------- */
struct encoder_desc {
    const encoder_family *fam;
    void *cfg;
    encoder_info info;
    char model_type[32];
    char problem_type[64];
    char **labels; /* [num_labels] */
};

static int fail(int code, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(int code, char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

void encoder_desc_free(encoder_desc *d) {
    if (!d)
        return;
    for (int32_t i = 0; d->labels && i < d->info.num_labels; i++)
        free(d->labels[i]);
    free(d->labels);
    if (d->cfg)
        d->fam->config_free(d->cfg);
    free(d);
}

/* Labels from id2label, whose keys must be "0" .. "n-1"; "LABEL_i" (HF's
 * default names) where the map is absent. */
static int read_labels(const json_t *j, const char *path, encoder_desc *d, char *err,
                       size_t err_len) {
    const int32_t n = d->info.num_labels;
    d->labels = calloc((size_t)n, sizeof *d->labels);
    if (!d->labels)
        return fail(BERT_ENOMEM, err, err_len, "out of memory");
    const json_t *map = json_object_get(j, "id2label");
    for (int32_t i = 0; i < n; i++) {
        char key[16], fallback[32];
        snprintf(key, sizeof key, "%d", (int)i);
        snprintf(fallback, sizeof fallback, "LABEL_%d", (int)i);
        const char *name = fallback;
        if (json_is_object(map)) {
            name = json_string_value(json_object_get(map, key));
            if (!name)
                return fail(BERT_EFORMAT, err, err_len,
                            "%s: id2label must map \"0\" .. \"%d\" to strings; \"%s\" is missing "
                            "or not a string",
                            path, (int)n - 1, key);
        }
        d->labels[i] = strdup(name);
        if (!d->labels[i])
            return fail(BERT_ENOMEM, err, err_len, "out of memory");
    }
    d->info.labels = (const char *const *)d->labels;
    return BERT_OK;
}

int encoder_describe(const char *dir, encoder_desc **out, char *err, size_t err_len) {
    *out = NULL;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return fail(BERT_EIO, err, err_len, "%s: path too long", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(BERT_EIO, err, err_len, "%s: cannot open: %s", path, strerror(errno));
    json_error_t jerr;
    json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!json_is_object(j)) {
        json_decref(j);
        return fail(BERT_EFORMAT, err, err_len, "%s: not a JSON object (line %d: %s)", path,
                    jerr.line, jerr.text);
    }
    const char *type = json_string_value(json_object_get(j, "model_type"));
    const encoder_family *fam = NULL;
    for (size_t i = 0; type && !fam && i < sizeof families / sizeof families[0]; i++)
        for (const char *const *t = families[i]->model_types; *t; t++)
            if (strcmp(*t, type) == 0)
                fam = families[i];
    encoder_desc *d = calloc(1, sizeof *d);
    int rc = BERT_OK;
    if (!d)
        rc = fail(BERT_ENOMEM, err, err_len, "out of memory");
    else if (!fam)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: model_type \"%s\" is not supported (only \"bert\", \"roberta\", "
                  "\"xlm-roberta\" or \"mpnet\")",
                  path, type ? type : "(missing)");
    if (!rc && fam) {
        d->fam = fam;
        rc = fam->describe(dir, &d->cfg, &d->info, err, err_len);
    }
    if (!rc) {
        snprintf(d->model_type, sizeof d->model_type, "%s", type);
        const char *pt = json_string_value(json_object_get(j, "problem_type"));
        snprintf(d->problem_type, sizeof d->problem_type, "%s", pt ? pt : "");
        d->info.model_type = d->model_type;
        d->info.problem_type = d->problem_type;
        if (d->info.task == ENCODER_TASK_CLASSIFY)
            rc = read_labels(j, path, d, err, err_len);
    }
    json_decref(j);
    if (rc) {
        encoder_desc_free(d);
        return rc;
    }
    *out = d;
    return BERT_OK;
}

const encoder_info *encoder_desc_info(const encoder_desc *d) {
    return &d->info;
}

attn_shape encoder_attn_shape(const encoder_info *i, int max_tokens) {
    return (attn_shape){
        .batch = max_tokens,
        .total_tokens = max_tokens,
        .max_seqlen = max_tokens < i->max_positions ? max_tokens : i->max_positions,
        .heads = i->num_heads,
        .head_dim = i->head_dim,
        .causal = i->attention && strcmp(i->attention, "causal") == 0,
        .rel_bias = i->position_bias && strcmp(i->position_bias, "none") != 0,
        .kv_heads = i->num_kv_heads == i->num_heads ? 0 : i->num_kv_heads,
        .window = i->window,
    };
}

/* ---- the loaded encoder ----------------------------------------------------------- */
struct encoder {
    encoder_desc *desc;
    void *model;
};

struct encoder_workspace {
    const encoder_family *fam;
    void *ws;
};

int encoder_load(const char *dir, gemm_precision precision, encoder **out, char *err,
                 size_t err_len) {
    *out = NULL;
    encoder *e = calloc(1, sizeof *e);
    if (!e)
        return fail(BERT_ENOMEM, err, err_len, "out of memory");
    int rc = encoder_describe(dir, &e->desc, err, err_len);
    if (!rc)
        rc = e->desc->fam->load(dir, precision, &e->model, err, err_len);
    if (rc) {
        encoder_free(e);
        return rc;
    }
    *out = e;
    return BERT_OK;
}

int encoder_check_weights(const char *dir, char *err, size_t err_len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/model.safetensors", dir) >= sizeof path)
        return fail(BERT_EIO, err, err_len, "%s: path too long", dir);
    st_file *f = NULL;
    const int st = st_open(path, &f, err, err_len);
    if (st < 0)
        return st == ST_EIO ? BERT_EIO : BERT_EFORMAT;
    st_close(f);
    return BERT_OK;
}

void encoder_free(encoder *e) {
    if (!e)
        return;
    if (e->model)
        e->desc->fam->free(e->model);
    encoder_desc_free(e->desc);
    free(e);
}

const encoder_info *encoder_get_info(const encoder *e) {
    return &e->desc->info;
}
gemm_precision encoder_precision(const encoder *e) {
    return e->desc->fam->precision(e->model);
}
size_t encoder_owned_bytes(const encoder *e) {
    return e->desc->fam->owned_bytes(e->model);
}
size_t encoder_mapped_bytes(const encoder *e) {
    return e->desc->fam->mapped_bytes(e->model);
}

int encoder_workspace_create(const encoder *e, int max_tokens, int nthreads,
                             const attn_backend *const *backends, size_t nbackends,
                             encoder_workspace **out, char *err, size_t err_len) {
    *out = NULL;
    encoder_workspace *w = calloc(1, sizeof *w);
    if (!w)
        return fail(BERT_ENOMEM, err, err_len, "out of memory");
    w->fam = e->desc->fam;
    int rc = w->fam->workspace_create(e->model, max_tokens, nthreads, backends, nbackends, &w->ws,
                                      err, err_len);
    if (rc) {
        free(w);
        return rc;
    }
    *out = w;
    return BERT_OK;
}

void encoder_workspace_free(encoder_workspace *ws) {
    if (!ws)
        return;
    ws->fam->workspace_free(ws->ws);
    free(ws);
}
size_t encoder_workspace_bytes(const encoder_workspace *ws) {
    return ws->fam->workspace_bytes(ws->ws);
}
void encoder_workspace_set_raw(encoder_workspace *ws, int raw) {
    ws->fam->set_raw(ws->ws, raw);
}
const float *encoder_workspace_hidden(const encoder_workspace *ws) {
    return ws->fam->hidden(ws->ws);
}
void encoder_workspace_set_attn_tap(encoder_workspace *ws, int layer, encoder_attn_tap_fn fn,
                                    void *ctx) {
    ws->fam->set_attn_tap(ws->ws, layer, fn, ctx);
}
const encoder_stage_ns *encoder_workspace_stage_ns(const encoder_workspace *ws) {
    return ws->fam->stage_ns(ws->ws);
}

int encoder_forward(const encoder *e, encoder_workspace *ws, const attn_backend *attn,
                    const attn_parallel *par, const int32_t *ids, const int32_t *type_ids,
                    const int32_t *cu_seqlens, int batch, float *out, char *err, size_t err_len) {
    return e->desc->fam->forward(e->model, ws->ws, attn, par, ids, type_ids, cu_seqlens, batch, out,
                                 err, err_len);
}

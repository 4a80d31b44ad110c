/* bert_config.c — reads what a sentence-transformers directory says about the
 * model: the BERT hyper-parameters, the pooling mode and normalisation.
 *
 * Only what forward computes is accepted; everything else is refused by name
 * at start, so a model is never served with silently different maths. */
#include "bert_config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/tokenizer.h"

const char *bert_strerror(int err) {
    switch (err) {
#define BERT_ERR_CASE(name, code, msg)                                                             \
    case name:                                                                                     \
        return msg;
        BERT_ERRORS(BERT_ERR_CASE)
#undef BERT_ERR_CASE
    }
    return "unknown error";
}

static int fail(int code, char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Loads dir/name as JSON. A missing file is BERT_EIO, bad JSON BERT_EFORMAT. */
static int load_json(const char *dir, const char *name, json_t **out, char *err, size_t err_len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return fail(BERT_EIO, err, err_len, "%s/%s: path too long", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(BERT_EIO, err, err_len, "%s: cannot open: %s", path, strerror(errno));
    json_error_t jerr;
    *out = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!*out)
        return fail(BERT_EFORMAT, err, err_len, "%s: invalid JSON at line %d: %s", path, jerr.line,
                    jerr.text);
    return BERT_OK;
}

/* A required integer field within [lo, hi]. */
static int get_int(const json_t *o, const char *path, const char *key, long lo, long hi, int *out,
                   char *err, size_t err_len) {
    const json_t *v = json_object_get(o, key);
    if (!v)
        return fail(BERT_EFORMAT, err, err_len, "%s: missing \"%s\"", path, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return fail(BERT_EFORMAT, err, err_len, "%s: \"%s\" must be an integer in [%ld, %ld]", path,
                    key, lo, hi);
    *out = (int)json_integer_value(v);
    return BERT_OK;
}

/* An integer field of bert_config (its offset) that config.json names key,
 * required within [lo, hi]. */
typedef struct {
    const char *key;
    long lo, hi;
    size_t field;
} int_field;

/* get_int for each of the n fields in order, up to the first that fails. */
static int get_ints(const json_t *o, const char *path, const int_field *f, size_t n, bert_config *c,
                    char *err, size_t err_len) {
    int rc = BERT_OK;
    for (size_t i = 0; !rc && i < n; i++)
        rc = get_int(o, path, f[i].key, f[i].lo, f[i].hi, (int *)((char *)c + f[i].field), err,
                     err_len);
    return rc;
}

/* A boolean field with a default when absent. */
static int get_bool(const json_t *o, const char *key, int def) {
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

/* config.json "architectures": a *ForSequenceClassification head this
 * encoder computes sets head and num_labels; another task head is refused
 * by name. Base models ("BertModel", "XLMRobertaModel") and the pre-training
 * heads sentence-transformers ignores ("BertForMaskedLM") are embedders. */
static int read_head(const json_t *j, const char *path, const char *type, bert_config *c, char *err,
                     size_t err_len) {
    const json_t *archs = json_object_get(j, "architectures");
    const char *arch = json_string_value(json_array_get(archs, 0));
    if (archs && !json_is_null(archs) && (!json_is_array(archs) || json_array_size(archs) > 1))
        return fail(BERT_EUNSUPPORTED, err, err_len,
                    "%s: \"architectures\" must name one architecture", path);
    if (arch && strlen(arch) >= sizeof c->architecture)
        return fail(BERT_EUNSUPPORTED, err, err_len,
                    "%s: architecture \"%.64s...\" is not supported", path, arch);
    snprintf(c->architecture, sizeof c->architecture, "%s", arch ? arch : "");
    c->head = BERT_HEAD_NONE;
    if (!arch)
        return BERT_OK;
    const char *task = strstr(arch, "For");
    /* A decoder's checkpoint saved from its language model (Qwen3ForCausalLM)
     * is the base model sentence-transformers loads; the LM head is unused. */
    const int decoder = strcmp(type, "qwen3") == 0 || strcmp(type, "gemma3_text") == 0;
    if (!task || strcmp(task, "ForMaskedLM") == 0 || strcmp(task, "ForPreTraining") == 0 ||
        (decoder && strcmp(task, "ForCausalLM") == 0))
        return BERT_OK;
    const int bert = strcmp(type, "bert") == 0;
    /* MPNet, ModernBERT and the decoders are served as embedders only. */
    const int modernbert = strcmp(type, "modernbert") == 0;
    const int mpnet =
        strcmp(type, "mpnet") == 0 || modernbert || decoder || strcmp(type, "nomic_bert") == 0;
    const char *cpool = json_string_value(json_object_get(j, "classifier_pooling"));
    const char *cact = json_string_value(json_object_get(j, "classifier_activation"));
    if (strcmp(arch, "BertForSequenceClassification") == 0 && bert)
        c->head = BERT_HEAD_POOLER;
    else if (strcmp(arch, "ModernBertForSequenceClassification") == 0 && modernbert) {
        /* ModernBertConfig's defaults: cls pooling, gelu (erf). */
        if (cact && strcmp(cact, "gelu") != 0)
            return fail(BERT_EUNSUPPORTED, err, err_len,
                        "%s: classifier_activation \"%s\" is not supported (only \"gelu\")", path,
                        cact);
        if (cpool && strcmp(cpool, "cls") != 0 && strcmp(cpool, "mean") != 0)
            return fail(BERT_EUNSUPPORTED, err, err_len,
                        "%s: classifier_pooling \"%s\" is not supported (only cls or mean)", path,
                        cpool);
        c->head = BERT_HEAD_MODERNBERT;
        c->head_bias = get_bool(j, "classifier_bias", 0);
        c->pooling = cpool && strcmp(cpool, "mean") == 0 ? BERT_POOL_MEAN : BERT_POOL_CLS;
    } else if ((strcmp(arch, "RobertaForSequenceClassification") == 0 ||
                strcmp(arch, "XLMRobertaForSequenceClassification") == 0) &&
               !bert && !mpnet)
        c->head = BERT_HEAD_ROBERTA;
    else
        return fail(
            BERT_EUNSUPPORTED, err, err_len,
            "%s: architecture \"%s\" (model_type \"%s\") is not supported; supported "
            "heads: BertForSequenceClassification, RobertaForSequenceClassification, "
            "XLMRobertaForSequenceClassification, ModernBertForSequenceClassification, or "
            "a base model as an embedder (MPNet, Qwen3, Gemma3, NomicBERT: an embedder only)",
            path, arch, type);
    /* HF writes id2label and derives num_labels from it. */
    const json_t *id2label = json_object_get(j, "id2label");
    const json_t *n = json_object_get(j, "num_labels");
    long labels = 2;
    if (json_is_object(id2label))
        labels = (long)json_object_size(id2label);
    else if (json_is_integer(n))
        labels = (long)json_integer_value(n);
    if (labels < 1 || labels > BERT_MAX_LABELS)
        return fail(BERT_EFORMAT, err, err_len, "%s: %ld labels; a classifier has 1 to %d", path,
                    labels, BERT_MAX_LABELS);
    c->num_labels = (int)labels;
    return BERT_OK;
}

/* MPNetEmbeddings numbers positions from padding_idx 1 whatever
 * pad_token_id says (transformers hard-codes it), as RoBERTa numbers from
 * its pad_token_id. */
#define MPNET_PADDING_IDX 1

/* MPNet's relative position buckets: MPNetEncoder.compute_position_bias
 * buckets with num_buckets 32 and max_distance 128 whatever config.json
 * says, and reads a table of relative_attention_num_buckets rows; a table of
 * another size would be indexed past its end or partly unused, so only 32
 * is served. */
static int read_mpnet(const json_t *j, const char *path, bert_config *c, char *err,
                      size_t err_len) {
    int buckets = 0;
    int rc = get_int(j, path, "relative_attention_num_buckets", 1, 1 << 16, &buckets, err, err_len);
    if (!rc && buckets != 32)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: relative_attention_num_buckets %d is not supported (MPNet buckets "
                  "relative positions into 32)",
                  path, buckets);
    c->layout = BERT_LAYOUT_MPNET;
    c->pos_attn = ENC_POS_ATTN_BUCKETS;
    c->pos_buckets = (enc_pos_buckets){.num_buckets = 32, .max_distance = 128};
    return rc;
}

/* A number field with a default when absent; refused outside (lo, hi]. */
static int get_num(const json_t *o, const char *path, const char *key, double def, double lo,
                   double hi, double *out, char *err, size_t err_len) {
    const json_t *v = json_object_get(o, key);
    *out = def;
    if (!v || json_is_null(v))
        return BERT_OK;
    if (!json_is_number(v) || !(json_number_value(v) > lo) || json_number_value(v) > hi)
        return fail(BERT_EFORMAT, err, err_len, "%s: \"%s\" must be a number in (%g, %g]", path,
                    key, lo, hi);
    *out = json_number_value(v);
    return BERT_OK;
}

/* RoPE's θ of one layer type: transformers 5 writes rope_parameters
 * {"full_attention": {...}, "sliding_attention": {...}}, older configs
 * global_rope_theta / local_rope_theta (and a rope_scaling, refused: only
 * the default rotation is computed). */
static int read_rope_theta(const json_t *j, const char *path, const char *type, const char *old_key,
                           double def, double *theta, char *err, size_t err_len) {
    const json_t *all = json_object_get(j, "rope_parameters");
    /* One set for every layer (Qwen3) or one per layer type. */
    const json_t *params = json_object_get(all, "rope_theta") ? all : json_object_get(all, type);
    const json_t *scaling = json_object_get(j, "rope_scaling");
    if (scaling && !json_is_null(scaling))
        return fail(BERT_EUNSUPPORTED, err, err_len,
                    "%s: rope_scaling is not supported (only the default rotation)", path);
    if (json_is_object(params)) {
        const char *rt = json_string_value(json_object_get(params, "rope_type"));
        if (rt && strcmp(rt, "default") != 0)
            return fail(BERT_EUNSUPPORTED, err, err_len,
                        "%s: rope_type \"%s\" of %s is not supported (only \"default\")", path, rt,
                        type);
        return get_num(params, path, "rope_theta", def, 0.0, 1e12, theta, err, err_len);
    }
    return get_num(j, path, old_key, def, 0.0, 1e12, theta, err, err_len);
}

/* Which layers use sliding-window attention: config.json "layer_types"
 * ("full_attention" / "sliding_attention", one per layer) when given,
 * else every layer but each every_n-th (layer i slides when i % n != 0), as
 * ModernBertConfig derives them from global_attn_every_n_layers. */
static int read_layer_types(const json_t *j, const char *path, bert_config *c, int every_n,
                            char *err, size_t err_len) {
    const json_t *types = json_object_get(j, "layer_types");
    if (!types || json_is_null(types)) {
        for (int l = 0; l < c->num_layers; l++)
            c->sliding[l] = (unsigned char)(l % every_n != 0);
        return BERT_OK;
    }
    if (!json_is_array(types) || json_array_size(types) != (size_t)c->num_layers)
        return fail(BERT_EFORMAT, err, err_len,
                    "%s: \"layer_types\" must list one type per layer (%d)", path, c->num_layers);
    for (int l = 0; l < c->num_layers; l++) {
        const char *t = json_string_value(json_array_get(types, (size_t)l));
        if (t && strcmp(t, "full_attention") == 0)
            c->sliding[l] = 0;
        else if (t && strcmp(t, "sliding_attention") == 0)
            c->sliding[l] = 1;
        else
            return fail(BERT_EUNSUPPORTED, err, err_len,
                        "%s: layer_types[%d] \"%s\" is not supported (only full_attention or "
                        "sliding_attention)",
                        path, l, t ? t : "(not a string)");
    }
    return BERT_OK;
}

/* ModernBertConfig: pre-norm LayerNorms (norm_bias, default none), erf
 * GELU GeGLU (hidden_activation "gelu"), RoPE with global_rope_theta on the
 * full-attention layers and local_rope_theta on the sliding ones, which see
 * |i − j| <= local_attention / 2 (transformers' sliding_window and its
 * bidirectional mask's predicate), no token types, positions 0, 1, ... */
static int read_modernbert(const json_t *j, const char *path, bert_config *c, char *err,
                           size_t err_len) {
    static const int_field ints[] = {
        {"vocab_size", 1, 1 << 24, offsetof(bert_config, vocab_size)},
        {"hidden_size", 1, 1 << 16, offsetof(bert_config, hidden_size)},
        {"num_hidden_layers", 1, BERT_MAX_LAYERS, offsetof(bert_config, num_layers)},
        {"num_attention_heads", 1, 1024, offsetof(bert_config, num_heads)},
        {"intermediate_size", 1, 1 << 18, offsetof(bert_config, intermediate_size)},
        {"max_position_embeddings", 1, 1 << 20, offsetof(bert_config, max_positions)},
    };
    int rc = get_ints(j, path, ints, sizeof ints / sizeof ints[0], c, err, err_len);
    if (rc)
        return rc;
    const char *act = json_string_value(json_object_get(j, "hidden_activation"));
    if (!act || strcmp(act, "gelu") == 0)
        c->mlp = ENC_MLP_GEGLU;
    else if (strcmp(act, "gelu_pytorch_tanh") == 0)
        c->mlp = ENC_MLP_GEGLU_TANH;
    else
        return fail(BERT_EUNSUPPORTED, err, err_len,
                    "%s: hidden_activation \"%s\" is not supported (only \"gelu\" or "
                    "\"gelu_pytorch_tanh\")",
                    path, act);
    if (c->hidden_size % c->num_heads != 0 || (c->hidden_size / c->num_heads) % 2 != 0)
        return fail(BERT_EFORMAT, err, err_len,
                    "%s: hidden_size %d must be num_attention_heads %d times an even head size",
                    path, c->hidden_size, c->num_heads);
    double eps = 1e-5, every = 3, local = 128;
    rc = get_num(j, path, "norm_eps", 1e-5, 0.0, 1.0, &eps, err, err_len);
    if (!rc)
        rc = get_num(j, path, "global_attn_every_n_layers", 3, 0.0, BERT_MAX_LAYERS, &every, err,
                     err_len);
    if (!rc)
        rc = get_num(j, path, "local_attention", 128, 1.0, 1 << 20, &local, err, err_len);
    if (!rc)
        rc = read_rope_theta(j, path, "full_attention", "global_rope_theta", 160000.0,
                             &c->rope_theta[0], err, err_len);
    if (!rc)
        rc = read_rope_theta(j, path, "sliding_attention", "local_rope_theta", 10000.0,
                             &c->rope_theta[1], err, err_len);
    if (!rc && (every != (int)every || (int)local % 2 != 0 || local != (int)local))
        rc = fail(BERT_EFORMAT, err, err_len,
                  "%s: global_attn_every_n_layers and local_attention must be integers, "
                  "local_attention even",
                  path);
    if (!rc)
        rc = read_layer_types(j, path, c, (int)every, err, err_len);
    if (rc)
        return rc;
    c->layer_norm_eps = (float)eps;
    c->family = BERT_FAMILY_MODERNBERT;
    c->layout = BERT_LAYOUT_MODERNBERT;
    c->pre_norm = 1;
    c->norm_first = 0; /* ModernBertEncoderLayer: layer 0's attn_norm is Identity */
    c->emb_norm = 1;
    c->final_norm = 1;
    c->norm = ENC_NORM_LAYER;
    c->norm_bias = get_bool(j, "norm_bias", 0);
    c->attn_bias = get_bool(j, "attention_bias", 0);
    c->mlp_bias = get_bool(j, "mlp_bias", 0);
    c->abs_positions = 0;
    c->rope = 1;
    c->window = (int)local / 2;
    c->token_type_table = 0;
    c->type_vocab_size = 1;
    c->position_pad_id = -1;
    return BERT_OK;
}

/* The hyper-parameters a decoder's config.json (Qwen3Config,
 * Gemma3TextConfig) names alike; head_dim defaults to C / H. */
static int read_decoder(const json_t *j, const char *path, bert_config *c, char *err,
                        size_t err_len) {
    static const int_field ints[] = {
        {"vocab_size", 1, 1 << 24, offsetof(bert_config, vocab_size)},
        {"hidden_size", 1, 1 << 16, offsetof(bert_config, hidden_size)},
        {"num_hidden_layers", 1, BERT_MAX_LAYERS, offsetof(bert_config, num_layers)},
        {"num_attention_heads", 1, 1024, offsetof(bert_config, num_heads)},
        {"num_key_value_heads", 1, 1024, offsetof(bert_config, num_kv_heads)},
        {"intermediate_size", 1, 1 << 18, offsetof(bert_config, intermediate_size)},
        {"max_position_embeddings", 1, 1 << 20, offsetof(bert_config, max_positions)},
    };
    int rc = get_ints(j, path, ints, sizeof ints / sizeof ints[0], c, err, err_len);
    if (rc)
        return rc;
    c->head_dim = c->hidden_size / c->num_heads;
    const json_t *hd = json_object_get(j, "head_dim");
    if (hd && !json_is_null(hd))
        rc = get_int(j, path, "head_dim", 2, 1 << 12, &c->head_dim, err, err_len);
    double eps = 1e-6;
    if (!rc)
        rc = get_num(j, path, "rms_norm_eps", 1e-6, 0.0, 1.0, &eps, err, err_len);
    if (!rc && (c->num_heads % c->num_kv_heads != 0 || c->head_dim % 2 != 0))
        rc = fail(BERT_EFORMAT, err, err_len,
                  "%s: num_attention_heads %d must be a multiple of num_key_value_heads %d, and "
                  "head_dim %d even",
                  path, c->num_heads, c->num_kv_heads, c->head_dim);
    const json_t *softcap = json_object_get(j, "attn_logit_softcapping");
    if (!rc && softcap && !json_is_null(softcap))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: attn_logit_softcapping is not supported (only none)", path);
    c->layer_norm_eps = (float)eps;
    c->pre_norm = c->norm_first = c->final_norm = 1;
    c->emb_norm = 0;
    c->norm_bias = 0;
    c->attn_bias = get_bool(j, "attention_bias", 0);
    c->mlp_bias = 0;
    c->abs_positions = 0;
    c->rope = 1;
    c->qk_norm = 1;
    c->token_type_table = 0;
    c->type_vocab_size = 1;
    c->position_pad_id = -1;
    return rc;
}

/* Qwen3Config: a causal decoder with RMSNorm, SwiGLU (hidden_act "silu"),
 * one RoPE θ, no sliding window (use_sliding_window is refused). */
static int read_qwen3(const json_t *j, const char *path, bert_config *c, char *err,
                      size_t err_len) {
    int rc = read_decoder(j, path, c, err, err_len);
    const char *act = json_string_value(json_object_get(j, "hidden_act"));
    if (!rc && (!act || strcmp(act, "silu") != 0))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: hidden_act \"%s\" is not supported (only \"silu\")", path,
                  act ? act : "(missing)");
    if (!rc && get_bool(j, "use_sliding_window", 0))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: use_sliding_window is not supported (only full causal attention)", path);
    if (!rc)
        rc = read_rope_theta(j, path, "full_attention", "rope_theta", 10000.0, &c->rope_theta[0],
                             err, err_len);
    c->rope_theta[1] = c->rope_theta[0];
    c->family = BERT_FAMILY_QWEN3;
    c->layout = BERT_LAYOUT_QWEN3;
    c->norm = ENC_NORM_RMS;
    c->mlp = ENC_MLP_SWIGLU;
    c->causal = 1;
    return rc;
}

/* Gemma3TextConfig with use_bidirectional_attention (EmbeddingGemma): the
 * sliding layers see |i − j| < sliding_window / 2 + 1, the window the
 * config keeps for bidirectional attention and its mask's predicate, so
 * window = sliding_window / 2; θ rope_theta on full layers and
 * rope_local_base_freq on sliding ones. A causal Gemma3 is refused. */
static int read_gemma3(const json_t *j, const char *path, bert_config *c, char *err,
                       size_t err_len) {
    int rc = read_decoder(j, path, c, err, err_len);
    const char *act = json_string_value(json_object_get(j, "hidden_activation"));
    if (!rc && (!act || strcmp(act, "gelu_pytorch_tanh") != 0))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: hidden_activation \"%s\" is not supported (only \"gelu_pytorch_tanh\")",
                  path, act ? act : "(missing)");
    if (!rc && !get_bool(j, "use_bidirectional_attention", 0))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: a causal Gemma3 (use_bidirectional_attention false) is not supported; "
                  "EmbeddingGemma's bidirectional one is",
                  path);
    double window = 4096, scalar = 256, pattern = 6;
    if (!rc)
        rc = get_num(j, path, "sliding_window", 4096, 1.0, 1 << 20, &window, err, err_len);
    if (!rc)
        rc = get_num(j, path, "query_pre_attn_scalar", 256, 0.0, 1e9, &scalar, err, err_len);
    if (!rc)
        rc = get_num(j, path, "sliding_window_pattern", 6, 0.0, BERT_MAX_LAYERS, &pattern, err,
                     err_len);
    if (!rc)
        rc = read_rope_theta(j, path, "full_attention", "rope_theta", 1000000.0, &c->rope_theta[0],
                             err, err_len);
    if (!rc)
        rc = read_rope_theta(j, path, "sliding_attention", "rope_local_base_freq", 10000.0,
                             &c->rope_theta[1], err, err_len);
    if (!rc && (window != (int)window || pattern != (int)pattern))
        rc = fail(BERT_EFORMAT, err, err_len,
                  "%s: sliding_window and sliding_window_pattern must be integers", path);
    /* Gemma3TextConfig: layer i slides when (i + 1) % pattern != 0; the
     * shift by one is read_layer_types' i % n with the layers counted from 1. */
    if (!rc && !json_object_get(j, "layer_types"))
        for (int l = 0; l < c->num_layers; l++)
            c->sliding[l] = (unsigned char)((l + 1) % (int)pattern != 0);
    else if (!rc)
        rc = read_layer_types(j, path, c, 1, err, err_len);
    c->window = (int)window / 2;
    c->attn_scale = (float)(1.0 / sqrt(scalar));
    c->emb_scale = (float)sqrt((double)c->hidden_size);
    c->family = BERT_FAMILY_GEMMA3;
    c->layout = BERT_LAYOUT_GEMMA3;
    c->norm = ENC_NORM_RMS_GEMMA;
    c->mlp = ENC_MLP_GEGLU_TANH;
    c->post_norms = 1;
    return rc;
}

/* An integer named by nomic's key (n_embd, ...) or, when absent, by
 * transformers' (hidden_size, ...): the published NomicBERT configs carry
 * nomic's, transformers' NomicBertConfig writes its own. */
static int get_int_either(const json_t *o, const char *path, const char *key, const char *alt,
                          long lo, long hi, int *out, char *err, size_t err_len) {
    const json_t *v = json_object_get(o, key);
    return get_int(o, path, v && !json_is_null(v) ? key : alt, lo, hi, out, err, err_len);
}

/* A boolean that must be `want` (default def when absent), else refused by
 * name: a NomicBERT option this encoder does not compute. */
static int require_bool(const json_t *j, const char *path, const char *key, int def, int want,
                        char *err, size_t err_len) {
    if (get_bool(j, key, def) == want)
        return BERT_OK;
    return fail(BERT_EUNSUPPORTED, err, err_len, "%s: %s %s is not supported (only %s)", path, key,
                want ? "false" : "true", want ? "true" : "false");
}

/* NomicBERT (nomic-embed-text-v1, v1.5): BERT's post-norm layer with
 * LayerNorms that carry biases, RoPE over the whole head (rotate-half,
 * θ rotary_emb_base) instead of a position table, a SwiGLU MLP
 * silu(fc12 x) · fc11 x, token types; nomic's code biases Wqkv and
 * out_proj alike (qkv_proj_bias) and fc11, fc12 by mlp_fc1_bias, fc2 by
 * mlp_fc2_bias. Its other options (prenorm, parallel blocks, RMSNorm,
 * interleaved or partial or scaled rotations, other activations) are
 * refused by name. */
static int read_nomic(const json_t *j, const char *path, bert_config *c, char *err,
                      size_t err_len) {
    static const struct {
        const char *key, *alt;
        long lo, hi;
        size_t field;
    } ints[] = {
        {"vocab_size", "vocab_size", 1, 1 << 24, offsetof(bert_config, vocab_size)},
        {"n_embd", "hidden_size", 1, 1 << 16, offsetof(bert_config, hidden_size)},
        {"n_layer", "num_hidden_layers", 1, BERT_MAX_LAYERS, offsetof(bert_config, num_layers)},
        {"n_head", "num_attention_heads", 1, 1024, offsetof(bert_config, num_heads)},
        {"n_inner", "intermediate_size", 1, 1 << 18, offsetof(bert_config, intermediate_size)},
        {"n_positions", "max_position_embeddings", 1, 1 << 20,
         offsetof(bert_config, max_positions)},
        {"type_vocab_size", "type_vocab_size", 1, 1 << 16, offsetof(bert_config, type_vocab_size)},
    };
    int rc = BERT_OK;
    for (size_t i = 0; !rc && i < sizeof ints / sizeof ints[0]; i++)
        rc = get_int_either(j, path, ints[i].key, ints[i].alt, ints[i].lo, ints[i].hi,
                            (int *)((char *)c + ints[i].field), err, err_len);
    if (rc)
        return rc;
    const char *act = json_string_value(json_object_get(j, "activation_function"));
    const char *hact = json_string_value(json_object_get(j, "hidden_act"));
    if (act ? strcmp(act, "swiglu") != 0 : (!hact || strcmp(hact, "silu") != 0))
        return fail(BERT_EUNSUPPORTED, err, err_len,
                    "%s: activation_function \"%s\" is not supported (only \"swiglu\")", path,
                    act    ? act
                    : hact ? hact
                           : "(missing)");
    if (c->hidden_size % c->num_heads != 0 || (c->hidden_size / c->num_heads) % 2 != 0)
        return fail(BERT_EFORMAT, err, err_len,
                    "%s: hidden_size %d must be num_attention_heads %d times an even head size",
                    path, c->hidden_size, c->num_heads);
    rc = require_bool(j, path, "prenorm", 0, 0, err, err_len);
    rc = rc ? rc : require_bool(j, path, "parallel_block", 0, 0, err, err_len);
    rc = rc ? rc : require_bool(j, path, "use_rms_norm", 0, 0, err, err_len);
    rc = rc ? rc : require_bool(j, path, "causal", 0, 0, err, err_len);
    rc = rc ? rc : require_bool(j, path, "rotary_emb_interleaved", 0, 0, err, err_len);
    if (rc)
        return rc;
    /* A partial rotation (nomic's rotary_emb_fraction < 1) rotates only the
     * first dimensions of each head: another pairing than enc_rope's. */
    double fraction = 1.0, eps = 1e-12;
    rc = get_num(j, path, "rotary_emb_fraction", 1.0, 0.0, 1.0, &fraction, err, err_len);
    if (!rc && fraction != 1.0)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: rotary_emb_fraction %g is not supported (only 1.0, the whole head)", path,
                  fraction);
    static const char *const unset[] = {"rotary_emb_scale_base", "rotary_scaling_factor"};
    for (size_t i = 0; !rc && i < sizeof unset / sizeof unset[0]; i++) {
        const json_t *v = json_object_get(j, unset[i]);
        if (v && !json_is_null(v))
            rc = fail(BERT_EUNSUPPORTED, err, err_len,
                      "%s: %s is not supported (only null: the default rotation)", path, unset[i]);
    }
    /* Defaults differ with whose config it is: nomic's NomicBertConfig
     * (n_embd, ...) biases every linear layer and rotates with θ 10000;
     * transformers' biases none and defaults θ to 1000. */
    const int nomic_keys = json_object_get(j, "n_embd") != NULL;
    if (!rc)
        rc = read_rope_theta(j, path, "full_attention", "rotary_emb_base",
                             nomic_keys ? 10000.0 : 1000.0, &c->rope_theta[0], err, err_len);
    const json_t *hd = json_object_get(j, "head_dim");
    if (!rc && hd && !json_is_null(hd) &&
        (!json_is_integer(hd) || json_integer_value(hd) != c->hidden_size / c->num_heads))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: head_dim other than hidden_size / num_attention_heads (%d) is not "
                  "supported",
                  path, c->hidden_size / c->num_heads);
    if (!rc)
        rc = get_num(j, path,
                     json_object_get(j, "layer_norm_epsilon") ? "layer_norm_epsilon"
                                                              : "layer_norm_eps",
                     1e-12, 0.0, 1.0, &eps, err, err_len);
    const int fc1_bias = get_bool(j, "mlp_fc1_bias", nomic_keys);
    const int fc2_bias = get_bool(j, "mlp_fc2_bias", nomic_keys);
    if (!rc && fc1_bias != fc2_bias)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: mlp_fc1_bias %s with mlp_fc2_bias %s is not supported (both or neither)",
                  path, fc1_bias ? "true" : "false", fc2_bias ? "true" : "false");
    if (rc)
        return rc;
    c->rope_theta[1] = c->rope_theta[0];
    c->layer_norm_eps = (float)eps;
    c->family = BERT_FAMILY_NOMIC;
    c->layout = BERT_LAYOUT_NOMIC;
    c->mlp = ENC_MLP_SWIGLU;
    c->attn_bias = get_bool(j, "qkv_proj_bias", nomic_keys);
    c->mlp_bias = fc1_bias;
    c->abs_positions = 0;
    c->rope = 1;
    c->token_type_table = 1;
    c->position_pad_id = -1;
    c->head_dim = c->hidden_size / c->num_heads;
    c->num_kv_heads = c->num_heads;
    return BERT_OK;
}

static int read_hyperparameters(const char *dir, bert_config *c, char *err, size_t err_len) {
    json_t *j;
    int rc = load_json(dir, "config.json", &j, err, err_len);
    if (rc)
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!json_is_object(j)) {
        json_decref(j);
        return fail(BERT_EFORMAT, err, err_len, "%s: not a JSON object", path);
    }

    const char *type = json_string_value(json_object_get(j, "model_type"));
    /* BERT's blocks; a family composed otherwise sets its own below. */
    c->family = BERT_FAMILY_BERT;
    c->norm = ENC_NORM_LAYER;
    c->norm_bias = c->attn_bias = c->mlp_bias = 1;
    c->mlp = ENC_MLP_GELU;
    c->abs_positions = 1;
    c->emb_norm = 1;
    if (type && strcmp(type, "modernbert") == 0) {
        rc = read_modernbert(j, path, c, err, err_len);
        if (!rc)
            rc = read_head(j, path, type, c, err, err_len);
        c->head_dim = c->hidden_size / c->num_heads;
        c->num_kv_heads = c->num_heads;
        json_decref(j);
        return rc;
    }
    if (type && strcmp(type, "nomic_bert") == 0) {
        rc = read_nomic(j, path, c, err, err_len);
        if (!rc)
            rc = read_head(j, path, type, c, err, err_len);
        json_decref(j);
        return rc;
    }
    if (type && (strcmp(type, "qwen3") == 0 || strcmp(type, "gemma3_text") == 0)) {
        rc = strcmp(type, "qwen3") == 0 ? read_qwen3(j, path, c, err, err_len)
                                        : read_gemma3(j, path, c, err, err_len);
        if (!rc)
            rc = read_head(j, path, type, c, err, err_len);
        json_decref(j);
        return rc;
    }
    const char *act = json_string_value(json_object_get(j, "hidden_act"));
    const char *pos = json_string_value(json_object_get(j, "position_embedding_type"));
    const json_t *eps = json_object_get(j, "layer_norm_eps");
    /* RoBERTa and XLM-RoBERTa are BERT's encoder with another numbering of
     * positions (see bert_config): HF's XLMRobertaModel is RobertaModel.
     * MPNet is the same post-LayerNorm encoder composed with RoBERTa's
     * numbering, no token types and relative position buckets. */
    const int mpnet = type && strcmp(type, "mpnet") == 0;
    const int roberta =
        type && (strcmp(type, "roberta") == 0 || strcmp(type, "xlm-roberta") == 0 || mpnet);
    if (!type || (strcmp(type, "bert") != 0 && !roberta))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: model_type \"%s\" is not supported (only \"bert\", \"roberta\", "
                  "\"xlm-roberta\", \"mpnet\", \"modernbert\", \"qwen3\", \"gemma3_text\" or "
                  "\"nomic_bert\")",
                  path, type ? type : "(missing)");
    else if (!act || strcmp(act, "gelu") != 0)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: hidden_act \"%s\" is not supported (only \"gelu\", the exact erf form)",
                  path, act ? act : "(missing)");
    else if (pos && strcmp(pos, "absolute") != 0)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: position_embedding_type \"%s\" is not supported (only \"absolute\")", path,
                  pos);
    else if (json_is_true(json_object_get(j, "is_decoder")))
        rc = fail(BERT_EUNSUPPORTED, err, err_len, "%s: decoder models are not supported", path);
    else if (!json_is_number(eps) || !(json_number_value(eps) > 0.0) ||
             json_number_value(eps) > 1.0)
        rc = fail(BERT_EFORMAT, err, err_len, "%s: \"layer_norm_eps\" must be a number in (0, 1]",
                  path);
    if (!rc)
        c->layer_norm_eps = (float)json_number_value(eps);
    /* Bounds keep every size product the loader and forward form far from
     * overflow. */
    static const int_field ints[] = {
        {"vocab_size", 1, 1 << 24, offsetof(bert_config, vocab_size)},
        {"hidden_size", 1, 1 << 16, offsetof(bert_config, hidden_size)},
        {"num_hidden_layers", 1, 1024, offsetof(bert_config, num_layers)},
        {"num_attention_heads", 1, 1024, offsetof(bert_config, num_heads)},
        {"intermediate_size", 1, 1 << 18, offsetof(bert_config, intermediate_size)},
        {"max_position_embeddings", 1, 1 << 20, offsetof(bert_config, max_positions)},
    };
    /* MPNet has no token type table (MPNetConfig has no type_vocab_size). */
    c->token_type_table = !mpnet;
    c->type_vocab_size = 1;
    if (!rc)
        rc = get_ints(j, path, ints, sizeof ints / sizeof ints[0], c, err, err_len);
    if (!rc && !mpnet)
        rc = get_int(j, path, "type_vocab_size", 1, 1 << 16, &c->type_vocab_size, err, err_len);
    if (!rc && mpnet)
        rc = read_mpnet(j, path, c, err, err_len);
    c->position_pad_id = -1;
    if (!rc && roberta) {
        /* padding_idx of the embeddings is config.pad_token_id; positions
         * start after it, so the longest sequence is that many rows short of
         * the table (514 rows serve 512 tokens in XLM-R). */
        int pad = 0;
        if (mpnet)
            pad = MPNET_PADDING_IDX;
        else
            rc = get_int(j, path, "pad_token_id", 0, c->vocab_size - 1, &pad, err, err_len);
        if (!rc && c->max_positions <= pad + 1)
            rc = fail(BERT_EFORMAT, err, err_len,
                      "%s: max_position_embeddings %d leaves no position after pad_token_id %d",
                      path, c->max_positions, pad);
        if (!rc) {
            c->position_pad_id = pad;
            c->position_offset = pad + 1;
            c->max_positions -= c->position_offset;
        }
    }
    if (!rc)
        rc = read_head(j, path, type, c, err, err_len);
    if (!rc && c->hidden_size % c->num_heads != 0)
        rc = fail(BERT_EFORMAT, err, err_len,
                  "%s: hidden_size %d is not a multiple of num_attention_heads %d", path,
                  c->hidden_size, c->num_heads);
    if (!rc) {
        c->head_dim = c->hidden_size / c->num_heads;
        c->num_kv_heads = c->num_heads;
    }
    json_decref(j);
    return rc;
}

/* The pooling modes forward computes, by the boolean key older
 * sentence-transformers write and by sentence-transformers 6's
 * "pooling_mode" name. */
static const struct {
    const char *key, *name;
    bert_pooling mode;
} pool_modes[] = {
    {"pooling_mode_mean_tokens", "mean", BERT_POOL_MEAN},
    {"pooling_mode_cls_token", "cls", BERT_POOL_CLS},
    {"pooling_mode_max_tokens", "max", BERT_POOL_MAX},
    {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens", BERT_POOL_MEAN_SQRT_LEN},
    {"pooling_mode_lasttoken", "lasttoken", BERT_POOL_LASTTOKEN},
};
#define POOL_SUPPORTED "mean, cls, max, mean_sqrt_len_tokens or lasttoken"

/* The Pooling module's config: exactly one mode on, one of pool_modes (the
 * boolean "pooling_mode_*" keys, or sentence-transformers 6's
 * "pooling_mode"). Modes are found by their "pooling_mode_" prefix so that a
 * mode this code has never heard of (weightedmean) is refused rather than
 * ignored. */
static int read_pooling(const char *dir, const char *sub, bert_config *c, char *err,
                        size_t err_len) {
    char name[2048];
    if ((size_t)snprintf(name, sizeof name, "%s/config.json", sub) >= sizeof name)
        return fail(BERT_EFORMAT, err, err_len, "%s/modules.json: Pooling path too long", dir);
    json_t *j;
    int rc = load_json(dir, name, &j, err, err_len);
    if (rc)
        return rc;
    int on = 0;
    const char *key;
    const json_t *v;
    json_object_foreach(j, key, v) {
        if (strncmp(key, "pooling_mode_", 13) != 0 || !json_is_true(v))
            continue;
        on++;
        size_t i = 0;
        while (i < sizeof pool_modes / sizeof pool_modes[0] && strcmp(key, pool_modes[i].key) != 0)
            i++;
        if (i < sizeof pool_modes / sizeof pool_modes[0])
            c->pooling = pool_modes[i].mode;
        else
            rc = fail(BERT_EUNSUPPORTED, err, err_len,
                      "%s/%s: %s is not supported (only " POOL_SUPPORTED ")", dir, name, key);
    }
    /* sentence-transformers 6 writes one "pooling_mode" (a name, or a list
     * of names when several are concatenated) instead of the boolean keys. */
    const json_t *mode = json_object_get(j, "pooling_mode");
    if (!rc && mode) {
        if (json_is_array(mode) && json_array_size(mode) == 1)
            mode = json_array_get(mode, 0);
        const char *name_mode = json_string_value(mode);
        on++;
        size_t i = 0;
        while (name_mode && i < sizeof pool_modes / sizeof pool_modes[0] &&
               strcmp(name_mode, pool_modes[i].name) != 0)
            i++;
        if (name_mode && i < sizeof pool_modes / sizeof pool_modes[0])
            c->pooling = pool_modes[i].mode;
        else
            rc = fail(BERT_EUNSUPPORTED, err, err_len,
                      "%s/%s: pooling_mode %s is not supported (only " POOL_SUPPORTED ")", dir,
                      name, name_mode ? name_mode : "(a list or not a string)");
    }
    const json_t *dim = json_object_get(j, "word_embedding_dimension");
    if (!dim)
        dim = json_object_get(j, "embedding_dimension");
    if (!rc && on != 1)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s/%s: %d pooling modes are on; exactly one is supported", dir, name, on);
    else if (!rc && dim && (!json_is_integer(dim) || json_integer_value(dim) != c->hidden_size))
        rc = fail(BERT_EFORMAT, err, err_len,
                  "%s/%s: word_embedding_dimension differs from hidden_size %d", dir, name,
                  c->hidden_size);
    else if (!rc && json_is_false(json_object_get(j, "include_prompt")))
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s/%s: include_prompt false (pooling without the prompt's tokens) is not "
                  "supported",
                  dir, name);
    json_decref(j);
    return rc;
}

/* A Dense module's config.json: in_features must be what the previous
 * module gives (in), the activation Tanh or Identity as sentence-transformers
 * saves it ("torch.nn.modules.activation.Tanh", "torch.nn.modules.linear.
 * Identity"); any other activation is refused by name. */
static int read_dense(const char *dir, const char *sub, int in, bert_dense *d, char *err,
                      size_t err_len) {
    char name[2048];
    if ((size_t)snprintf(name, sizeof name, "%s/config.json", sub) >= sizeof name ||
        strlen(sub) >= sizeof d->path)
        return fail(BERT_EFORMAT, err, err_len, "%s/modules.json: Dense path too long", dir);
    snprintf(d->path, sizeof d->path, "%s", sub);
    json_t *j;
    int rc = load_json(dir, name, &j, err, err_len);
    if (rc)
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    rc = get_int(j, path, "in_features", 1, 1 << 16, &d->in_features, err, err_len);
    if (!rc)
        rc = get_int(j, path, "out_features", 1, 1 << 16, &d->out_features, err, err_len);
    const json_t *bias = json_object_get(j, "bias");
    const char *act = json_string_value(json_object_get(j, "activation_function"));
    d->bias = !json_is_false(bias);
    if (!rc && d->in_features != in)
        rc = fail(BERT_EFORMAT, err, err_len, "%s: in_features %d, but the module before gives %d",
                  path, d->in_features, in);
    else if (!rc && (!act || strcmp(act, "torch.nn.modules.activation.Tanh") == 0))
        d->act = BERT_ACT_TANH; /* sentence-transformers' default when the key is absent */
    else if (!rc && strcmp(act, "torch.nn.modules.linear.Identity") == 0)
        d->act = BERT_ACT_IDENTITY;
    else if (!rc)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s: activation_function \"%s\" is not supported (only "
                  "torch.nn.modules.activation.Tanh or torch.nn.modules.linear.Identity)",
                  path, act);
    json_decref(j);
    return rc;
}

/* The class name of a sentence-transformers module type: the part after the
 * last dot, for "sentence_transformers.models.Pooling" and the newer
 * "sentence_transformers.sentence_transformer.modules.Pooling" alike. */
static const char *module_class(const char *type) {
    if (!type || strncmp(type, "sentence_transformers.", 22) != 0)
        return NULL;
    return strrchr(type, '.') + 1;
}

/* A module's directory from modules.json, checked to stay inside dir. */
static const char *module_path(const json_t *mod) {
    const char *p = json_string_value(json_object_get(mod, "path"));
    return p && *p && !strstr(p, "..") && p[0] != '/' ? p : NULL;
}

/* modules.json must be Transformer, Pooling, up to BERT_MAX_DENSE Dense
 * modules and optionally Normalize, in that order: the pipeline forward
 * implements. */
static int read_modules(const char *dir, bert_config *c, char *err, size_t err_len) {
    json_t *j;
    int rc = load_json(dir, "modules.json", &j, err, err_len);
    if (rc)
        return rc;
    const size_t n = json_array_size(j);
    if (!json_is_array(j) || n < 2)
        rc = fail(BERT_EUNSUPPORTED, err, err_len,
                  "%s/modules.json: expected the modules Transformer, Pooling, optionally Dense "
                  "and Normalize",
                  dir);
    c->ndense = 0;
    c->normalize = 0;
    c->output_dim = c->hidden_size;
    for (size_t i = 0; !rc && i < n; i++) {
        const json_t *mod = json_array_get(j, i);
        const char *type = json_string_value(json_object_get(mod, "type"));
        const char *cls = module_class(type);
        const char *sub = module_path(mod);
        const char *want = i == 0 ? "Transformer" : i == 1 ? "Pooling" : NULL;
        const int ok = cls && (want ? strcmp(cls, want) == 0
                                    : (strcmp(cls, "Dense") == 0 && !c->normalize) ||
                                          (strcmp(cls, "Normalize") == 0 && i == n - 1));
        if (!ok)
            rc = fail(BERT_EUNSUPPORTED, err, err_len,
                      "%s/modules.json: module %zu is \"%s\"; supported: Transformer, Pooling, "
                      "then optionally Dense modules, then optionally Normalize",
                      dir, i, type ? type : "(no type)");
        else if ((i == 1 || strcmp(cls, "Dense") == 0) && !sub)
            rc =
                fail(BERT_EFORMAT, err, err_len, "%s/modules.json: bad path of module %zu", dir, i);
        else if (i == 1)
            rc = read_pooling(dir, sub, c, err, err_len);
        else if (strcmp(cls, "Normalize") == 0)
            c->normalize = 1;
        else if (strcmp(cls, "Dense") == 0 && c->ndense == BERT_MAX_DENSE)
            rc = fail(BERT_EUNSUPPORTED, err, err_len,
                      "%s/modules.json: more than %d Dense modules", dir, BERT_MAX_DENSE);
        else if (strcmp(cls, "Dense") == 0) {
            bert_dense *d = &c->dense[c->ndense++];
            rc = read_dense(dir, sub, c->output_dim, d, err, err_len);
            c->output_dim = d->out_features;
        }
    }
    json_decref(j);
    return rc;
}

/* sentence_bert_config.json is optional (models saved without
 * sentence-transformers lack it); when there, its max_seq_length must be a
 * positive integer. */
static int read_max_seq_length(const char *dir, bert_config *c, char *err, size_t err_len) {
    c->max_seq_length = c->max_positions;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir) >= sizeof path)
        return fail(BERT_EIO, err, err_len, "%s/sentence_bert_config.json: path too long", dir);
    if (access(path, F_OK) != 0)
        return BERT_OK;
    json_t *j;
    int rc = load_json(dir, "sentence_bert_config.json", &j, err, err_len);
    if (rc)
        return rc;
    const json_t *v = json_is_object(j) ? json_object_get(j, "max_seq_length") : NULL;
    if (!json_is_object(j))
        rc = fail(BERT_EFORMAT, err, err_len, "%s: not a JSON object", path);
    else if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 1))
        rc = fail(BERT_EFORMAT, err, err_len, "%s: \"max_seq_length\" must be a positive integer",
                  path);
    else if (json_is_integer(v) && json_integer_value(v) < c->max_positions)
        c->max_seq_length = (int)json_integer_value(v);
    json_decref(j);
    return rc;
}

int bert_config_load(const char *dir, bert_config *cfg, char *err, size_t err_len) {
    memset(cfg, 0, sizeof *cfg);
    int rc = read_hyperparameters(dir, cfg, err, err_len);
    if (!rc && cfg->head != BERT_HEAD_NONE) {
        /* A classifier (a plain HF directory, as CrossEncoder saves it) reads
         * its first token; no sentence-transformers modules apply. */
        if (cfg->head != BERT_HEAD_MODERNBERT) /* which pools as its config says */
            cfg->pooling = BERT_POOL_CLS;
        cfg->output_dim = cfg->num_labels;
    } else if (!rc)
        rc = read_modules(dir, cfg, err, err_len);
    if (!rc)
        rc = read_max_seq_length(dir, cfg, err, err_len);
    return rc;
}

/* ---- the calibration batch's framing ---------------------------------------- */

/* The specials t puts around a text's pieces, read off tok_encode's special
 * mask (tok_pair_text_encode finds a text's pieces the same way). Any text
 * with a piece will do: "a" is a piece, or the unknown token, in every
 * vocabulary. Leaves f empty when the framing is not usable. */
static void frame_from_tokenizer(const tok_tokenizer *t, int vocab_size, bert_frame *f) {
    enum { CAP = 2 * BERT_FRAME_MAX + 8 };
    int32_t ids[CAP];
    uint8_t special[CAP];
    tok_output o = {.ids = ids, .special = special, .capacity = CAP};
    if (tok_encode(t, "a", 1, 1, &o) != TOK_OK)
        return;
    int lead = 0, trail = 0;
    while (lead < o.n && special[lead])
        lead++;
    while (trail < o.n - lead && special[o.n - 1 - trail])
        trail++;
    if (lead == o.n || lead > BERT_FRAME_MAX || trail > BERT_FRAME_MAX)
        return;
    for (int i = 0; i < o.n; i++)
        if ((i < lead || i >= o.n - trail) && (ids[i] < 0 || ids[i] >= vocab_size))
            return;
    memcpy(f->lead, ids, (size_t)lead * sizeof *ids);
    memcpy(f->trail, ids + o.n - trail, (size_t)trail * sizeof *ids);
    f->nlead = lead;
    f->ntrail = trail;
}

void bert_config_frame(const char *dir, const bert_config *cfg, bert_frame *f) {
    *f = (bert_frame){.source = BERT_FRAME_TOKENIZER};
    tok_tokenizer *t = NULL;
    if (tok_load(&t, dir, NULL, 0) == TOK_OK) {
        frame_from_tokenizer(t, cfg->vocab_size, f);
        tok_free(t);
        return;
    }
    /* Nothing says how this model's sequences are framed: BERT's WordPiece
     * ids, or RoBERTa's and XLM-R's, which number positions from an offset. */
    f->source = BERT_FRAME_GUESS;
    if (cfg->vocab_size > 102) {
        const int roberta = cfg->position_offset > 0;
        f->lead[0] = roberta ? 0 : 101;
        f->trail[0] = roberta ? 2 : 102;
        f->nlead = f->ntrail = 1;
    }
}

/* engine.h — the encoder's execution as a swappable part.
 *
 * An engine runs the whole encoder forward on a packed varlen batch (token
 * ids, token types and cu_seqlens in, one output per sequence out: an
 * embedder's pooled vector or a classifier's logits), with its
 * weights resident where it computes and a workspace it sizes once at
 * start. Attention backends (kernels/attention.h) stay the swappable op
 * inside an engine: every forward is handed the backend in force.
 *
 * Two halves, as an interface paired with an instance:
 *   engine_iface  a const table of function pointers, one per engine kind,
 *                 built in or exported by a plugin. Required slots are
 *                 checked when the table is registered; optional ones may be
 *                 NULL and the engine_* wrappers below supply the default.
 *   engine        an instance: the table, the context its init returned, and
 *                 what the wrapper keeps (bounds, the last run's numbers).
 * The rest of the service calls only the engine_* wrappers, never the slots.
 *
 * The registry holds the built-in engines and the plugins found in a
 * directory. A plugin is a shared object exporting one symbol,
 * ENGINE_PLUGIN_SYMBOL, an engine_plugin descriptor; one that lacks it,
 * speaks another ENGINE_API_VERSION, has an incomplete table, takes a name
 * already taken or scores 0 on this machine is kept in the list with the
 * reason and never offered. */
#ifndef ATTN_ENGINE_H
#define ATTN_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "model/encoder.h"

/* Bumped whenever anything a plugin is built against changes in any way:
 * engine_iface, engine_options, engine_batch and engine_plugin, and the
 * structs they hand over, encoder_info (model/encoder.h), encoder_stage_ns
 * (model/bert.h), attn_backend, attn_problem and attn_shape
 * (kernels/attention.h) and attn_parallel (kernels/parallel.h). A plugin
 * built against another value is refused. */
#define ENGINE_API_VERSION 6

/* The sizes the plugins of this version were built with (x86-64, the one
 * target). A size change here means a layout plugins do not share: bump
 * ENGINE_API_VERSION, then update the assert. (A change that keeps the size,
 * a field renamed or reordered, needs the bump all the same.) */
#if UINTPTR_MAX == 0xffffffffffffffffu /* the sizes below are LP64's */
_Static_assert(sizeof(encoder_info) == 168, "encoder_info changed: bump ENGINE_API_VERSION");
_Static_assert(sizeof(encoder_stage_ns) == 64, "encoder_stage_ns changed: bump ENGINE_API_VERSION");
_Static_assert(sizeof(attn_backend) == 72, "attn_backend changed: bump ENGINE_API_VERSION");
_Static_assert(sizeof(attn_problem) == 136, "attn_problem changed: bump ENGINE_API_VERSION");
_Static_assert(sizeof(attn_shape) == 36, "attn_shape changed: bump ENGINE_API_VERSION");
_Static_assert(sizeof(attn_parallel) == 24, "attn_parallel changed: bump ENGINE_API_VERSION");
#endif

/* The one symbol a plugin exports: `const engine_plugin attnserve_engine_plugin`. */
#define ENGINE_PLUGIN_SYMBOL "attnserve_engine_plugin"

/* ---- errors ----------------------------------------------------------------- */
#define ENGINE_ERRORS(X)                                                                           \
    X(ENGINE_OK, 0, "success")                                                                     \
    X(ENGINE_EINVAL, -1, "invalid argument")                                                       \
    X(ENGINE_EUNSUPPORTED, -2, "not supported by this engine on this machine")                     \
    X(ENGINE_ENOMEM, -3, "out of memory")                                                          \
    X(ENGINE_EMODEL, -4, "cannot load the model")                                                  \
    X(ENGINE_EINPUT, -5, "invalid batch")                                                          \
    X(ENGINE_EFORWARD, -6, "forward failed")                                                       \
    X(ENGINE_EUNKNOWN, -7, "unknown engine name")

enum {
#define ENGINE_ERR_ENUM(name, code, msg) name = code,
    ENGINE_ERRORS(ENGINE_ERR_ENUM)
#undef ENGINE_ERR_ENUM
};

const char *engine_strerror(int err);

/* ---- what an engine is given and asked ------------------------------------------ */

/* Everything init needs, fixed for the instance's life. */
typedef struct engine_options {
    const char *model_dir; /* a model directory encoder_describe accepts */
    gemm_precision precision;
    int32_t max_tokens; /* most tokens of one batch: sizes the workspace */
    int32_t max_seqs;   /* most sequences of one batch */
    int nthreads;       /* most workers a forward's attn_parallel has */
    /* Every attention backend a forward may be handed (those a reload or a
     * verification switch may select): the workspace holds the scratch of
     * each, so switching never allocates. */
    const attn_backend *const *backends;
    size_t nbackends;
    /* The `gpu_attention` setting: which kernel an engine that computes
     * attention on a device runs ("auto", "flash", "flash2", "cudnn"; NULL: auto).
     * Engines that run the attn_backend they are handed ignore it. */
    const char *gpu_attention;
} engine_options;

/* One forward: sequence b is ids[cu_seqlens[b] .. cu_seqlens[b+1]), its
 * tokens' types packed alike in type_ids (NULL: every token type 0, as
 * embedders and XLM-R take; a BERT cross-encoder gives a pair's second
 * segment type 1). out[b * D .. b * D + D), D = engine_output_dim: an
 * embedder's pooled (and Dense-projected) vector, or a classifier's raw
 * logits (num_labels, no sigmoid or softmax). raw != 0: an embedder's
 * vector without the model's L2 normalisation (the caller normalises per
 * request); ignored for a classifier. */
typedef struct engine_batch {
    const int32_t *ids;
    const int32_t *type_ids;
    const int32_t *cu_seqlens; /* [batch + 1] */
    int32_t batch;
    float *out;
    int raw;
} engine_batch;

/* Memory the instance holds, for /info's worst case. */
typedef struct engine_memory {
    size_t weights_owned;  /* allocated (converted, packed) weights */
    size_t weights_mapped; /* a read-only file mapping (page cache, shared) */
    size_t workspace;      /* activations and scratch, allocated at init */
} engine_memory;

/* Called right after layer `layer`'s attention, on the thread running the
 * forward, with the problem the backend just computed; must not modify it.
 * What shadow verification copies. */
typedef void (*engine_attn_tap_fn)(const attn_problem *p, int layer, void *ctx);

/* ---- the interface ------------------------------------------------------------ */
typedef struct engine_iface {
    /* Name used in the `engine` setting, logs, /info, metrics and x-engine. */
    const char *name;
    /* One line for /info. */
    const char *summary;

    /* REQUIRED. How well this engine suits this machine: 0 = not offered
     * (why says what is missing, e.g. "needs AVX-512F"), otherwise higher is
     * faster; `auto` picks the highest. Cheap, no allocation (CPUID at most). */
    int (*score)(char *why, size_t why_len);

    /* OPTIONAL. NULL when precision p can run on this machine, else why not.
     * Default (NULL slot): fp32 only. */
    const char *(*precision_unsupported)(gemm_precision p);

    /* REQUIRED. Loads the model in opt->precision with its weights where
     * the engine computes, and allocates the whole workspace for
     * opt's bounds. Returns ENGINE_OK and *ctx, or an ENGINE_E* code with a
     * message. An engine that cannot run the model's task or architecture
     * (encoder_describe says which) refuses it with ENGINE_EUNSUPPORTED and
     * a message naming the architecture. */
    int (*init)(const engine_options *opt, void **ctx, char *err, size_t err_len);

    /* REQUIRED. Frees everything init made. */
    void (*free)(void *ctx);

    /* REQUIRED. The loaded model's description (valid until free). */
    const encoder_info *(*model)(void *ctx);

    /* REQUIRED. Runs b (already validated by engine_forward against the
     * bounds and the model) with attention through attn on par's workers.
     * Allocates nothing. Returns ENGINE_OK or ENGINE_EFORWARD with a message. */
    int (*forward)(void *ctx, const engine_batch *b, const attn_backend *attn,
                   const attn_parallel *par, char *err, size_t err_len);

    /* OPTIONAL. Memory held (default: all zero). */
    void (*memory)(void *ctx, engine_memory *m);

    /* OPTIONAL. Sets the attention tap for the following forwards (fn NULL
     * clears it). Returns 0, or -1 when the engine cannot expose attention
     * (default): shadow verification then has nothing to check. */
    int (*set_attn_tap)(void *ctx, int layer, engine_attn_tap_fn fn, void *fn_ctx);

    /* OPTIONAL. Wall time of each stage of the last forward (default: zero;
     * the wrapper's total is kept either way). */
    void (*stage_ns)(void *ctx, encoder_stage_ns *out);

    /* OPTIONAL. (T, C) every token's last hidden state of the last forward,
     * packed as that batch was, valid until the next forward: what TEI's
     * /embed_all answers. Default (NULL slot): not exposed, and such
     * requests are refused. */
    const float *(*hidden)(void *ctx);

    /* OPTIONAL. The attention kernel this engine runs in place of the
     * attn_backend it is handed (a GPU engine computes attention on its
     * device): its name for /info, metrics and logs, and in *detail (never
     * NULL) one line on how it was chosen (the measurement, or why another
     * was refused), valid until free. Default (NULL slot): NULL, the
     * backend handed is what runs. */
    const char *(*attn_kernel)(void *ctx, const char **detail);
} engine_iface;

/* What a plugin exports under ENGINE_PLUGIN_SYMBOL. */
typedef struct engine_plugin {
    uint32_t api_version; /* ENGINE_API_VERSION it was built against */
    const engine_iface *iface;
} engine_plugin;

/* ---- the instance and the one wrapper around every forward -------------------------- */
typedef struct engine engine;

/* Creates an instance of iface (it must be offered: engine_select checks).
 * Returns ENGINE_OK and *out, or an error code with a message. */
int engine_create(const engine_iface *iface, const engine_options *opt, engine **out, char *err,
                  size_t err_len);
void engine_destroy(engine *e);

const char *engine_name(const engine *e);
/* The table's one line for /info ("" when it has none). */
const char *engine_summary(const engine *e);
gemm_precision engine_precision(const engine *e);
const encoder_info *engine_model(const engine *e);
/* Floats per sequence in engine_batch.out: engine_model(e)->output_dim. */
int32_t engine_output_dim(const engine *e);
void engine_memory_of(const engine *e, engine_memory *m);
int32_t engine_max_tokens(const engine *e);

/* The shadow-verification hook of one forward: layer's attention is handed
 * to fn. */
typedef struct engine_hook {
    int layer;
    engine_attn_tap_fn fn;
    void *ctx;
} engine_hook;

/* What the last engine_forward did. */
typedef struct engine_run {
    int32_t sequences, tokens;
    uint64_t ns;       /* the engine's forward, wall time */
    double flops;      /* whole encoder: GEMMs and attention */
    double attn_flops; /* attention alone (attn_flops over all layers) */
    encoder_stage_ns stages;
    bool hooked; /* the hook was installed for this forward */
} engine_run;

/* Floating-point operations of the encoder on a batch: per layer and token
 * 2·C·(3C + C + 2F) in the GEMMs, and 4·L²·C per sequence of length L in
 * attention (QKᵀ and PV over all heads). */
double engine_flops(const encoder_info *c, const int32_t *cu_seqlens, int32_t batch,
                    double *attn_flops);

/* Validates b once (sequence count and lengths, total against the bounds,
 * every id inside the vocabulary, every type id below the model's
 * type_vocab_size), installs hook (may be NULL) for this
 * forward only, runs the engine, times it and counts its FLOPs
 * (engine_last_run). Returns ENGINE_OK, ENGINE_EINPUT (nothing ran) or
 * ENGINE_EFORWARD, with a message. One forward at a time per instance. */
int engine_forward(engine *e, const engine_batch *b, const attn_backend *attn,
                   const attn_parallel *par, const engine_hook *hook, char *err, size_t err_len);
const engine_run *engine_last_run(const engine *e);
/* The attention kernel the engine runs instead of the backend it is handed,
 * with *detail (may be NULL) saying how it was chosen; NULL (and "") when
 * the engine runs the backend handed (see the iface's attn_kernel slot). */
const char *engine_attn_kernel(const engine *e, const char **detail);
/* The last forward's per-token hidden states, or NULL when the engine does
 * not expose them (see the iface's hidden slot). */
const float *engine_last_hidden(const engine *e);

/* The `precision` setting's names for p ("fp32", "bf16", "int8"), and back
 * (-1 for none of them; "auto" is engine_select's business). */
const char *engine_precision_name(gemm_precision p);
int engine_precision_parse(const char *name);

/* Whether iface's optional precision slot (or its fp32-only default)
 * accepts p: NULL, or why not. */
const char *engine_precision_unsupported(const engine_iface *iface, gemm_precision p);

/* ---- the registry (registry.c) ------------------------------------------------ */

#define ENGINE_MAX 16

typedef struct engine_entry {
    char name[32];             /* the table's name, or the file's for a plugin without one */
    char origin[256];          /* "built-in" or the plugin's path */
    const engine_iface *iface; /* NULL when refused before the table was read */
    int score;
    bool offered;
    char reason[256]; /* why not offered ("" when offered) */
} engine_entry;

/* Starts the list again with the built-in engines (scored now), then loads
 * every *.so in plugin_dir (NULL or "": none) in name order. Reasons are
 * recorded, not logged: the caller logs the list. Returns the number of
 * entries, or -1 when plugin_dir cannot be read (reason in err; the
 * built-in engines are still listed). Call before any thread uses an
 * engine; plugins already loaded stay mapped for the process's life. */
int engine_registry_init(const char *plugin_dir, char *err, size_t err_len);

/* Loads every *.so in dir, in name order, after the entries already listed
 * (a name already taken is refused with the first one's origin). Returns
 * the number of files, or -1 when dir cannot be read (reason in err). */
int engine_registry_scan(const char *dir, char *err, size_t err_len);

/* Loads one plugin file and appends its entry (offered or refused).
 * Returns the entry. */
const engine_entry *engine_registry_load(const char *path);

size_t engine_registry_count(void);
const engine_entry *engine_registry_get(size_t i);
/* The entry named name, offered or not; NULL if none. */
const engine_entry *engine_registry_find(const char *name);

/* Resolves the `engine` and `precision` settings. engine "auto": the
 * offered engine with the highest score that runs the precision asked;
 * precision "auto": the fastest precision (int8, then bf16, then fp32) the
 * chosen engine runs on this machine. A refused or unknown name is an error
 * naming the reason, or the valid names. */
int engine_select(const char *engine_name, const char *precision, const engine_iface **out,
                  gemm_precision *out_precision, char *err, size_t err_len);

/* engine "auto" once more, passing by the engines in skip[0, nskip): what
 * the service tries next when the chosen engine cannot load this model (a
 * GPU engine refusing a classifier head). */
int engine_select_except(const char *precision, const engine_iface *const *skip, size_t nskip,
                         const engine_iface **out, gemm_precision *out_precision, char *err,
                         size_t err_len);

/* Comma-separated offered names and "auto", for messages and --help. */
void engine_names(char *buf, size_t len);

/* The built-in engines (engines/cpu.c). */
extern const engine_iface engine_cpu;

#endif

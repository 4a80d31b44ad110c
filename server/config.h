/* config.h — every setting of attnserve, where it comes from, and reloading.
 *
 * One table in config.c (name, type, default, bounds or allowed values, help,
 * and for a reloadable setting the group that applies it) drives loading,
 * validation, --help, --print-config and reload.
 * Precedence, lowest first:
 *   built-in defaults < config file (JSON) < environment ATTNSERVE_<NAME> < flags
 * Flags are --name=value or --name value ('-' may stand for '_' in names).
 * The config file is --config PATH, else $ATTNSERVE_CONFIG, else
 * config/attnserve.json; the default file may be absent, a file named
 * explicitly must exist. Unknown keys or flags, wrong types and out-of-range
 * values are errors naming the key, the source, the value and what is
 * allowed; main prints the message and exits with CONFIG_EXIT_INVALID.
 *
 * API keys are secrets: they come only from the file named by api_key_file
 * (one key per line) and from $ATTNSERVE_API_KEY, never from a flag (flags
 * show in `ps`) and never from the config file; they are never printed. */
#ifndef ATTN_CONFIG_H
#define ATTN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* The exit status for any configuration error (as sysexits' EX_USAGE is 64,
 * but 2 is what shells and getopt users expect for bad usage). */
#define CONFIG_EXIT_INVALID 2

/* The effective configuration. Field names are the setting names. Strings
 * are owned by the struct; enum fields point to static storage and are
 * always one of the listed values. Read-only for everyone but config.c. */
typedef struct config {
    /* ---- listening and connections ---- */
    char *host;                       /* address to bind */
    int64_t port;                     /* TCP port */
    int64_t max_connections;          /* concurrent connections */
    int64_t connection_timeout_s;     /* idle connection closed after */
    int64_t max_body_bytes;           /* larger request bodies get 413 */
    int64_t max_request_memory_bytes; /* all requests together hold at most (membudget.h) */
    int64_t memory_limit_bytes;       /* worst case allowed at start; 0: the cgroup's */
    int64_t request_timeout_ms;       /* deadline from arrival to answer */
    int64_t drain_timeout_s;          /* SIGTERM: answer in-flight work within */
    int64_t drain_linger_ms;          /* SIGTERM: keep accepting, answering with close */

    /* ---- compute and batching ---- */
    const char *backend;        /* "naive" | "fused" | "auto" */
    char *fallback_backends;    /* comma-separated backend names, may be "" */
    char *engine;               /* "auto", "cpu" or a plugin engine's name */
    const char *precision;      /* "fp32" | "bf16" | "int8" | "auto" */
    const char *gpu_attention;  /* "auto" | "flash" | "flash2" | "cudnn": a GPU kernel */
    char *plugin_dir;           /* engine plugins; "" = none */
    int64_t threads;            /* compute threads; 0 = all online cores */
    int64_t codec_workers;      /* decoding and answer threads; 0 = one per core */
    int64_t pool_spin_us;       /* compute threads poll this long, then sleep */
    int64_t max_batch_tokens;   /* token budget of one batch */
    int64_t max_batch_requests; /* requests in one batch */
    int64_t max_wait_us;        /* linger after a batch, for a fuller next */
    int64_t max_queue;          /* requests waiting; more get 429 */
    double verify_sample_rate;  /* fraction of batches checked against naive */
    /* shadow verification and trace (server/ops/verify.c) */
    int64_t verify_mismatch_threshold; /* mismatches within the window that switch */
    int64_t verify_window_s;           /* the window */
    int64_t verify_max_rows;           /* query rows compared per check */
    char *trace_file;                  /* one JSON line per batch; "" = off */

    /* ---- model and inputs ---- */
    char *model;                    /* model directory */
    int64_t max_inputs_per_request; /* embeddings inputs per request */
    int64_t max_document_tokens;    /* tokens of one chunked document */
    bool truncate;                  /* cut inputs to max_seq_length */
    int64_t max_seq_length;         /* tokens per input; 0: the model's sentence_bert_config */
    char *model_aliases;            /* other names /v1/embeddings accepts for the model */
    char *models;          /* several models: config_models_parse's text; "" = the one `model` */
    bool accept_any_model; /* /v1/embeddings accepts any model name (as TEI) */

    /* ---- access ---- */
    char *api_key_file;       /* path of the key file; "" = none */
    bool metrics_require_key; /* /metrics needs a key when keys exist */
    char *cors_allow_origins; /* origins allowed by CORS, "*" any; "" = off */

    /* ---- logging ---- */
    const char *log_level;  /* "debug" | "info" | "warn" | "error" */
    const char *log_format; /* "text" | "json" */

    /* ---- not settings: loaded secrets and where the settings came from ---- */
    char **api_keys;   /* keys from api_key_file and $ATTNSERVE_API_KEY */
    size_t n_api_keys; /* 0: no authentication */
    char *config_path; /* the file read, or NULL when the default was absent */
    int argc;          /* the flags given, kept so that reload re-applies them */
    char **argv;
    bool config_explicit; /* the file was named by --config or $ATTNSERVE_CONFIG */
} config;

/* One entry of the `models` setting. Strings are "" and numbers -1 where
 * the entry leaves the choice to the process-wide setting of that name. */
#define CONFIG_MAX_MODELS 8
typedef struct config_model {
    char name[128];         /* what requests' `model` names it by */
    char path[1024];        /* its directory */
    char aliases[512];      /* comma-separated other names; "" none */
    int64_t max_seq_length; /* -1: the max_seq_length setting */
    int truncate;           /* -1: the truncate setting; else 0 or 1 */
    char engine[64];        /* "": the engine setting */
    char precision[8];      /* "": the precision setting */
} config_model;

/* Parses the `models` setting's text: entries separated by ',', each
 * NAME=PATH followed by any of ;aliases=A|B ;max_seq_length=N
 * ;truncate=true|false ;engine=E ;precision=P. In the config file the
 * setting is also an array of objects with those keys (aliases an array or
 * a comma-separated string), which config.c turns into this text. Names
 * and aliases are unique over all entries; paths are not looked at (a
 * model that cannot be loaded fails at start).
 * Returns 0 with *n entries in out[0, cap), or -1 with a message in err. */
int config_models_parse(const char *text, config_model *out, size_t cap, size_t *n, char *err,
                        size_t err_len);

/* The compute pool's size: the threads setting, else every online core;
 * at least 1. Serving and the self-test command size their pool with it,
 * and the worst-case memory counts its threads with it. */
int config_pool_threads(const config *c);

/* Walks a list of model names separated by sep: model_aliases and a
 * config_model's aliases (','), the `models` flag form's aliases ('|').
 * Returns the next name from *p on, with its length in *len and spaces
 * around it left out, and moves *p past it and its separator; NULL at the
 * end of the list. An empty name (as in "a,,b") comes back with *len 0:
 * who lists or matches names skips it, who validates them refuses it. */
const char *config_names_next(const char **p, char sep, size_t *len);

/* The names of a comma-separated list as a JSON array of strings, empty
 * names left out (/info and --print-config show aliases so); NULL when out
 * of memory. */
json_t *config_names_json(const char *list);

/* What main should do once config_load has succeeded. */
typedef enum config_action {
    CONFIG_RUN,     /* serve with the loaded configuration */
    CONFIG_HELP,    /* --help / -h: print config_print_help() and exit 0 */
    CONFIG_PRINT,   /* --print-config: print config_print() and exit 0 */
    CONFIG_VERSION, /* --version: print the version and exit 0 */
} config_action;

/* Builds *cfg from defaults, the config file, the environment and argv
 * (argv[0] is the program name, as main receives it). Returns 0 and sets
 * *action, or -1 with a one-line message in err; on error *cfg holds nothing
 * that needs freeing. For CONFIG_HELP and CONFIG_VERSION nothing is read and
 * *cfg holds the defaults. */
int config_load(config *cfg, int argc, char *const argv[], config_action *action, char *err,
                size_t err_len);

/* Frees what cfg owns (API keys are wiped first) and zeroes it. Safe on a
 * zeroed struct and twice. */
void config_free(config *cfg);

/* Called by config_reload for every setting whose value differs, values as
 * text. applied is false for a setting that needs a restart: the running
 * value is kept. name "api_keys" reports a changed key set by count only. */
typedef void (*config_change_fn)(void *ctx, const char *name, const char *old_value,
                                 const char *new_value, bool applied);

/* SIGHUP: re-reads the same config file, the environment and the original
 * flags into *next, validating everything as at start. Reloadable settings
 * take their new values; non-reloadable ones keep cur's values (reported
 * with applied = false), as PostgreSQL does, so one edit that needs a
 * restart does not block the others. Returns 0, or -1 with a message in err
 * and *next zeroed: then cur stays in force unchanged. cur is not modified;
 * the caller swaps and frees. on_change may be NULL. */
int config_reload(const config *cur, config *next, config_change_fn on_change, void *ctx, char *err,
                  size_t err_len);

/* Applies a new value of reloadable settings to the running service
 * (service: what the functions expect, the app) taking the whole of next,
 * which holds every setting. */
typedef void (*config_apply_fn)(void *service, const config *next);

/* How a setting's new value reaches the running service: each row of the
 * table names its group, and the caller of config_apply gives one function
 * per group (reload.c), so this module knows no module above it. RESTART:
 * the setting needs a restart. */
typedef enum config_apply_group {
    CONFIG_RESTART = 0,
    CONFIG_APPLY_LOG,      /* log_level, log_format */
    CONFIG_APPLY_BACKEND,  /* backend, fallbacks, verification, trace */
    CONFIG_APPLY_BATCHING, /* the scheduler's limits */
    CONFIG_APPLY_REQUESTS, /* the limits every API reads per request */
    CONFIG_APPLY_ACCESS,   /* API keys and metrics_require_key */
    CONFIG_APPLY_SWAP,     /* read from the configuration in force when used */
    CONFIG_APPLY_GROUPS
} config_apply_group;

/* SIGHUP, after config_reload succeeded and before the caller swaps next in:
 * runs fns[g] for every group g a reloadable setting names, each once
 * however many settings name it, whether or not their values changed (a
 * reload re-reads the key file and reopens the trace file whatever the
 * settings say). The logging group comes first, so what applying the
 * others logs is at the new level and in the new format; then table order.
 * Every group a row names must have its function. */
void config_apply(const config *next, const config_apply_fn fns[CONFIG_APPLY_GROUPS],
                  void *service);

/* The settings as a JSON object in table order (a new reference; NULL only
 * when out of memory). Never contains API keys. */
json_t *config_to_json(const config *cfg);

/* --print-config: config_to_json indented, with a final newline. Feeding the
 * output back as a config file yields the same settings. Returns 0 or -1. */
int config_print(const config *cfg, FILE *out);

/* --help: usage and every setting with its type, default, bounds or values,
 * environment name and whether SIGHUP reloads it. */
void config_print_help(FILE *out, const char *prog);

#endif

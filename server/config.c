/* config.c — the settings table and everything it drives: defaults, the JSON
 * config file, ATTNSERVE_* environment variables, flags, API keys, --help,
 * --print-config and SIGHUP reload. Adding a setting is one field in
 * config.h and one row in the table below, which names, for a reloadable
 * setting, the group whose function applies a new value (config_apply). */
#include "config.h"

#include "kernels/attention.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_CONFIG_PATH "config/attnserve.json"
#define ENV_PREFIX          "ATTNSERVE_"
#define ENV_API_KEY         "ATTNSERVE_API_KEY"
#define ENV_CONFIG          "ATTNSERVE_CONFIG"

/* Bounds that keep every string and the key file small enough to print and
 * log safely; no real path or key comes near them. */
#define STRING_MAX   4096
#define KEY_FILE_MAX (1 << 20)

/* ---- the table -------------------------------------------------------------- */

typedef enum setting_type { T_INT, T_DOUBLE, T_BOOL, T_STRING, T_ENUM } setting_type;

/* Extra rule for a string setting: 0 if value is fine, else -1 and a reason. */
typedef int (*check_fn)(const char *value, char *why, size_t why_len);

typedef struct setting {
    const char *name;
    setting_type type;
    size_t offset; /* of the field in struct config */
    /* Reloadable settings: how a reload applies the new value to the running
     * service (config_apply); CONFIG_RESTART: the setting needs a restart. */
    config_apply_group apply;
    const char *help;
    int64_t i_def, i_min, i_max;
    double d_def, d_min, d_max;
    bool b_def;
    const char *s_def;         /* T_STRING and T_ENUM */
    const char *const *values; /* T_ENUM: allowed values, NULL-terminated */
    check_fn check;            /* T_STRING: NULL when any string goes */
    const char *check_doc;     /* what check allows, for messages and --help */
} setting;

#define RESTART CONFIG_RESTART
#define INT(n, def, lo, hi, reload, h)                                                             \
    {                                                                                              \
        .name = #n, .type = T_INT, .offset = offsetof(config, n), .apply = (reload), .help = (h),  \
        .i_def = (def), .i_min = (lo), .i_max = (hi)                                               \
    }
#define DOUBLE(n, def, lo, hi, reload, h)                                                          \
    {                                                                                              \
        .name = #n, .type = T_DOUBLE, .offset = offsetof(config, n), .apply = (reload),            \
        .help = (h), .d_def = (def), .d_min = (lo), .d_max = (hi)                                  \
    }
#define BOOL(n, def, reload, h)                                                                    \
    {                                                                                              \
        .name = #n, .type = T_BOOL, .offset = offsetof(config, n), .apply = (reload), .help = (h), \
        .b_def = (def)                                                                             \
    }
#define STRING(n, def, chk, doc, reload, h)                                                        \
    {                                                                                              \
        .name = #n, .type = T_STRING, .offset = offsetof(config, n), .apply = (reload),            \
        .help = (h), .s_def = (def), .check = (chk), .check_doc = (doc)                            \
    }
#define ENUM(n, def, vals, reload, h)                                                              \
    {                                                                                              \
        .name = #n, .type = T_ENUM, .offset = offsetof(config, n), .apply = (reload), .help = (h), \
        .s_def = (def), .values = (vals)                                                           \
    }

/* The backends this binary has (the registry's, which a test build extends),
 * then "auto"; filled by backend_values_fill at every entry point that reads
 * settings, so the list is the registry's whenever it is used. */
static const char *backend_values[ATTN_MAX_BACKENDS + 2];
static const char *const log_level_values[] = {"debug", "info", "warn", "error", NULL};
static const char *const log_format_values[] = {"text", "json", NULL};
static const char *const precision_values[] = {"fp32", "bf16", "int8", "fp16",
                                               "tf32", "auto", NULL};
static const char *const gpu_attention_values[] = {"auto", "flash", "flash2", "cudnn", NULL};

static void backend_values_fill(void) {
    size_t n = 0;
    for (const attn_backend *const *b = attn_backends(); *b && n < ATTN_MAX_BACKENDS; b++)
        backend_values[n++] = (*b)->name;
    backend_values[n++] = "auto";
    backend_values[n] = NULL;
}

static int check_nonempty(const char *value, char *why, size_t why_len);
static int check_backend_list(const char *value, char *why, size_t why_len);
static int check_origins(const char *value, char *why, size_t why_len);
static int check_models(const char *value, char *why, size_t why_len);
static int check_model_aliases(const char *value, char *why, size_t why_len);

/* Reloadable means the running service can adopt the value between batches:
 * such a row names the group whose function applies it (config_apply_group;
 * reload.c gives the functions), RESTART rows none.
 * Settings that size memory at start (batch shape, queue, bodies), bind
 * sockets or load the model need a restart, which keeps the worst-case
 * memory computed at start true for the life of the process. */
static const setting settings[] = {
    STRING(host, "127.0.0.1", check_nonempty, "a non-empty address", RESTART,
           "Address to listen on. Loopback by default so that nothing is exposed by "
           "accident; containers set 0.0.0.0."),
    INT(port, 8080, 1, 65535, RESTART, "TCP port to listen on."),
    /* A connection costs HTTP_CONNECTION_BYTES (23 KiB) in the worst case:
     * 2048 of them hold 46 MiB (256 held 25 MiB at the old 101 KiB each). */
    INT(max_connections, 2048, 1, 1000000, RESTART,
        "Concurrent client connections. At the limit the connection idle the longest "
        "(no request under way) is closed to admit a new one; with none idle, new ones are "
        "refused."),
    INT(connection_timeout_s, 30, 1, 3600, RESTART,
        "A connection idle this long is closed, and so is one whose request headers are not in "
        "this long after the connection opened or its previous request ended, or whose request "
        "(headers and body) is not in this long after its headers."),
    INT(max_body_bytes, 4 << 20, 1024, INT64_C(1) << 30, RESTART,
        "Largest request body; larger ones get 413 without being read."),
    /* Bounds what all requests together hold (bodies, parsed JSON, jobs,
     * responses until sent), so the worst-case memory is known at start.
     * 256 MiB holds dozens of large requests at once (a 4 MiB body of numbers
     * parses to ~150 MiB at worst, text to about its size) and keeps the
     * default worst case under 1 GiB with the default model. */
    INT(max_request_memory_bytes, 256 << 20, 1 << 20, INT64_C(1) << 40, RESTART,
        "Memory all requests together may hold (bodies, parsed JSON, jobs, responses); "
        "a request that would pass it gets 503."),
    /* Restart only: the worst case is fixed at start, and checked there. */
    INT(memory_limit_bytes, 0, 0, INT64_C(1) << 50, RESTART,
        "Memory the process may use; start refuses (status 2) when memory.worst_case_bytes "
        "of /info is above it. 0: only a warning when the worst case is above the tightest "
        "limit of the process's cgroup and those above it (memory.max, or v1's "
        "memory.limit_in_bytes)."),
    INT(request_timeout_ms, 30000, 1, 3600000, CONFIG_APPLY_REQUESTS,
        "Deadline from arrival; a request still queued past it gets 504."),
    INT(drain_timeout_s, 20, 0, 3600, CONFIG_APPLY_SWAP,
        "On SIGTERM, time allowed to answer accepted requests before exit "
        "(below the 30 s Kubernetes grace period)."),
    /* 2000 ms: the shipped haproxy.cfg takes at most 1.5 s (inter 1 s, then
     * fastinter 500 ms, fall 2) to take an instance whose /ready turned 503
     * out of rotation; until then it still sends new connections. Serving
     * them, with Connection: close, for that long means none is refused,
     * and a keep-alive request already on the wire at the signal (an RTT,
     * milliseconds) is answered rather than reset. */
    INT(drain_linger_ms, 2000, 0, 60000, CONFIG_APPLY_SWAP,
        "On SIGTERM, time to keep accepting connections and serving requests, each answer "
        "with Connection: close, while /ready is 503, before the listener closes (counted "
        "within drain_timeout_s)."),
    ENUM(backend, "auto", backend_values, CONFIG_APPLY_BACKEND,
         "Attention backend; auto picks the fastest that supports the model."),
    STRING(fallback_backends, "fused,naive", check_backend_list,
           "comma-separated backend names (no spaces), or empty", CONFIG_APPLY_BACKEND,
           "Backends to try, in order, when the configured one cannot run the configured "
           "shapes, fails its start-up self-test, or fails shadow verification "
           "(verify_sample_rate)."),
    /* The engine (engines/engine.h): which one runs the encoder, in which
     * precision, and where plugins are found. Restart only: the weights are
     * loaded (and, below fp32, packed) once, and the workspace and /info's
     * worst case are sized for that engine at start. */
    STRING(engine, "auto", check_nonempty, "auto, cpu, or an offered plugin engine's name", RESTART,
           "Engine running the encoder: a built-in one (cpu), a plugin's (see plugin_dir), or "
           "auto for the highest-scoring engine offered on this machine."),
    /* fp32 by default: its embeddings match sentence-transformers' to
     * 1e-12, which is what users compare against; bf16 and int8 trade that
     * for speed only when asked (auto included). */
    ENUM(precision, "fp32", precision_values, RESTART,
         "Precision of the encoder's GEMMs (fp32, bf16, int8; fp16 and tf32 on a GPU engine only); "
         "auto picks the fastest the engine runs on this CPU and that passes its start-up check."),
    /* Handed to the engine (engine_options.gpu_attention); restart only,
     * since the kernel's plan and workspace are built at start. */
    ENUM(gpu_attention, "auto", gpu_attention_values, RESTART,
         "Attention kernel of a GPU engine in fp16/bf16: flash (ours), flash2 (ours, with the "
         "accumulators in registers), cudnn (cuDNN's fused SDPA, where cuDNN 9.15+ is found and "
         "takes the model's shape), or auto to time those that pass their start-up check on the "
         "model's shape at start and keep the fastest; a kernel that is refused or fails its "
         "check leaves flash, and /info says why. CPU engines ignore it."),
    /* Unset, the plugins are looked for where make and an install put them
     * (server/ops/engine.c), so a build's cuda engine is found without telling;
     * "none" keeps a way to load no plugin at all. */
    STRING(plugin_dir, "", NULL, "a directory, \"\" to look beside the binary, or none", RESTART,
           "Directory of engine plugins (*.so); each is offered, or listed in /info with the "
           "reason it is refused. Unset, the directories beside the binary are searched: its "
           "engines/ and gpu-engines/ (where make puts them) and ../lib/attnserve/engines (an "
           "install under a prefix); none loads no plugin."),
    INT(threads, 0, 0, 4096, RESTART, "Compute threads; 0 uses every online core."),
    INT(codec_workers, 0, 0, 4096, RESTART,
        "Threads that decode requests (parse, check, tokenize, chunk) and write answers, so "
        "that libmicrohttpd's I/O thread only moves bytes; 0: one per core this process may "
        "run on (within its CPU quota). On a CPU engine they share the cores with the compute "
        "threads: a request's decoding and encoding take a small fraction of its forward pass."),
    INT(pool_spin_us, 50, 0, 1000000, RESTART,
        "How long an idle compute thread polls for the next parallel loop before it sleeps "
        "(llama.cpp's --poll): saves a wake-up per loop, about 44 per forward. 0 sleeps at "
        "once: better where other busy processes share the cores."),
    INT(max_batch_tokens, 16384, 1, 1 << 20, RESTART,
        "Token budget of one batch; workspaces are allocated for it at start. At least the "
        "model's max_seq_length; below its positions, token-id inputs are held to it."),
    INT(max_batch_requests, 64, 1, 65536, RESTART, "Most requests packed into one batch."),
    INT(max_wait_us, 0, 0, 10000000, CONFIG_APPLY_BATCHING,
        "Batches are continuous: a request that finds the engine idle starts at once, and "
        "requests that arrive during a batch form the next one. This adds a linger: for this "
        "long after a batch ends, a next batch that is not full waits for more requests "
        "(rounded up to whole milliseconds). 0: never wait."),
    INT(max_queue, 1024, 1, 1000000, RESTART, "Requests waiting for compute; more get 429."),
    DOUBLE(verify_sample_rate, 0.001, 0.0, 1.0, CONFIG_APPLY_BACKEND,
           "Fraction of batches whose attention (one layer, chosen at random) is recomputed "
           "in float64 on a checker thread and compared; 0 turns verification off."),
    /* Shadow verification and trace (server/ops/verify.c). */
    INT(verify_mismatch_threshold, 3, 1, 1024, CONFIG_APPLY_BACKEND,
        "Mismatches within verify_window_s that switch the service to the next fallback "
        "backend."),
    INT(verify_window_s, 300, 1, 86400, CONFIG_APPLY_BACKEND,
        "The window verify_mismatch_threshold counts in."),
    INT(verify_max_rows, 16, 1, 1024, RESTART,
        "Query rows compared per check (each sequence's first and last, then random ones); "
        "sizes the capture slot."),
    STRING(trace_file, "", NULL, "a file path, or \"\" for off", CONFIG_APPLY_BACKEND,
           "Appends one JSON line per batch (sizes, per-stage times, backend, verified) to this "
           "file, written off the compute thread; lines that find the buffer full are "
           "dropped and counted."),
    STRING(model, "models/all-MiniLM-L6-v2", check_nonempty, "a non-empty path", RESTART,
           "Model directory (config.json, tokenizer, safetensors weights)."),
    INT(max_inputs_per_request, 2048, 1, 65536, CONFIG_APPLY_REQUESTS,
        "Most inputs in one embeddings request (OpenAI's limit by default); more get 422. "
        "A request larger than a batch runs in pieces of one batch each, queued one at a "
        "time so that other requests are not held back."),
    INT(max_document_tokens, 524288, 1, 1 << 24, CONFIG_APPLY_REQUESTS,
        "Most tokens (special tokens excluded) of one document sent with \"chunking\"; a "
        "longer one gets 413 with both numbers. Its chunks run as inputs of the request, in "
        "pieces of one batch each, and its arrays are charged to max_request_memory_bytes."),
    BOOL(truncate, true, RESTART,
         "Cut inputs longer than max_seq_length instead of refusing them."),
    INT(max_seq_length, 0, 0, 1 << 20, RESTART,
        "Tokens per input, special tokens included, where truncation cuts (as "
        "sentence-transformers does). 0: the model's sentence_bert_config.json (256 for "
        "all-MiniLM-L6-v2), or its max_position_embeddings without that file; at most "
        "max_position_embeddings."),
    STRING(model_aliases, "", check_model_aliases,
           "comma-separated names of letters, digits and ._-/:@+, or empty", RESTART,
           "Names /v1/embeddings accepts in `model` besides the served model's (its directory's "
           "last component), e.g. sentence-transformers/all-MiniLM-L6-v2; listed by /v1/models. "
           "Another name is OpenAI's 404 model_not_found."),
    /* Restart only, as `model`: each model's weights, workspace and share
     * of the worst-case memory are fixed at start. */
    STRING(models, "", check_models,
           "NAME=PATH[;key=value...],... or in the config file an array of objects; \"\" for "
           "the one `model`",
           RESTART,
           "Several models in one process, e.g. minilm=models/a,rerank=models/b, or in the config "
           "file [{\"name\": \"minilm\", \"path\": \"models/a\", \"aliases\": [...], "
           "\"max_seq_length\": N, \"truncate\": B, \"engine\": E, \"precision\": P}, ...]; "
           "on a flag, per-model choices follow the path as ;key=value (aliases separated by "
           "'|'). Requests pick one by `model` (its name or an alias); routes without a model "
           "field take the first model of their task. Empty: `model` with model_aliases, "
           "max_seq_length and truncate."),
    BOOL(accept_any_model, false, RESTART,
         "Accept any `model` in /v1/embeddings and echo it back, as TEI does."),
    STRING(api_key_file, "", NULL, "a file path, or \"\" for none", CONFIG_APPLY_ACCESS,
           "File of API keys, one per line ('#' comments); with $ATTNSERVE_API_KEY. "
           "No keys: no authentication. SIGHUP re-reads it."),
    BOOL(metrics_require_key, false, CONFIG_APPLY_ACCESS, "Whether /metrics needs an API key."),
    STRING(cors_allow_origins, "", check_origins,
           "comma-separated origins (scheme://host[:port]), \"*\" for any, or \"\" for off",
           RESTART,
           "Browser pages from these origins may call the service: answers carry "
           "Access-Control-Allow-Origin and preflights (OPTIONS) get 204. Off by default."),
    ENUM(log_level, "info", log_level_values, CONFIG_APPLY_LOG, "Least severe level logged."),
    ENUM(log_format, "text", log_format_values, CONFIG_APPLY_LOG,
         "Log lines as human-readable text or one JSON object per line."),
};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

/* ---- small helpers -------------------------------------------------------------- */

static int fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void *field(const config *cfg, const setting *s) {
    return (char *)cfg + s->offset;
}

static const setting *find_setting(const char *name) {
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (strcmp(settings[i].name, name) == 0)
            return &settings[i];
    return NULL;
}

static void env_name(const setting *s, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, ENV_PREFIX "%s", s->name);
    for (size_t i = 0; i < n && i < len; i++)
        buf[i] = (char)toupper((unsigned char)buf[i]);
}

/* The shortest %g text that reads back as the same double, so that
 * --print-config, --help and reload reports show 0.001 and not
 * 0.0010000000000000000208. */
static void format_double(double d, char *buf, size_t len) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

/* Edit distance, to suggest the setting a typo meant. */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* " (did you mean "port"?)" for a near miss, else "". */
/* Settings that no longer exist, and what took their place: a config that
 * still names one is refused with that, not a bare "unknown". */
static const struct {
    const char *name, *why;
} retired[] = {
    {"tokenize_offload_bytes",
     "removed: every request with a JSON body is decoded on the codec workers (codec_workers)"},
};

static void suggestion(const char *name, const char *prefix, char *buf, size_t len) {
    for (size_t i = 0; i < sizeof retired / sizeof retired[0]; i++)
        if (strcmp(name, retired[i].name) == 0) {
            snprintf(buf, len, "; %s", retired[i].why);
            return;
        }
    const setting *best = NULL;
    size_t best_d = 3; /* farther than two edits is not a typo */
    for (size_t i = 0; i < N_SETTINGS; i++) {
        size_t d = edit_distance(name, settings[i].name);
        if (d < best_d) {
            best_d = d;
            best = &settings[i];
        }
    }
    if (best)
        snprintf(buf, len, "; did you mean %s%s?", prefix, best->name);
    else
        buf[0] = '\0';
}

static bool is_api_key_name(const char *name) {
    return strcmp(name, "api_key") == 0 || strcmp(name, "api_keys") == 0;
}

static const char api_key_refusal[] =
    "API keys are read only from api_key_file or the ATTNSERVE_API_KEY environment "
    "variable";

/* ---- string checks ------------------------------------------------------------ */

static int check_nonempty(const char *value, char *why, size_t why_len) {
    if (value[0] == '\0')
        return fail(why, why_len, "is empty");
    return 0;
}

static bool is_backend_name(const char *name, size_t len) {
    for (const char *const *v = backend_values; *v; v++)
        if (strcmp(*v, "auto") != 0 && strlen(*v) == len && memcmp(*v, name, len) == 0)
            return true;
    return false;
}

/* Each origin as a browser sends it: scheme://host[:port], no path; or "*". */
static int check_origins(const char *value, char *why, size_t why_len) {
    const char *p = value;
    while (*p) {
        p += strspn(p, ", ");
        size_t len = strcspn(p, ", ");
        if (len == 0)
            break;
        bool any = len == 1 && *p == '*';
        bool scheme = (len > 7 && strncmp(p, "http://", 7) == 0) ||
                      (len > 8 && strncmp(p, "https://", 8) == 0);
        const char *host = scheme ? strstr(p, "//") + 2 : NULL;
        if (!any && (!scheme || memchr(host, '/', len - (size_t)(host - p))))
            return fail(why, why_len, "\"%.*s\" is not an origin (scheme://host[:port]) or \"*\"",
                        (int)len, p);
        p += len;
    }
    return 0;
}

/* Names the scheduler can split on ',' without trimming; no name twice. */
static int check_backend_list(const char *value, char *why, size_t why_len) {
    const char *p = value;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (!is_backend_name(p, len))
            return fail(why, why_len, "names an unknown backend \"%.*s\"", (int)len, p);
        for (const char *q = value; q < p; q += strcspn(q, ",") + 1)
            if (strcspn(q, ",") == len && memcmp(q, p, len) == 0)
                return fail(why, why_len, "names \"%.*s\" twice", (int)len, p);
        p += len;
        if (*p == ',' && *++p == '\0')
            return fail(why, why_len, "ends with a comma");
    }
    return 0;
}

/* ---- values: parsing, checking, storing -------------------------------------- */

typedef struct value {
    int64_t i;
    double d;
    bool b;
    const char *s;
} value;

static void describe_allowed(const setting *s, char *buf, size_t len) {
    switch (s->type) {
    case T_INT:
        snprintf(buf, len, "an integer in %" PRId64 "..%" PRId64, s->i_min, s->i_max);
        return;
    case T_DOUBLE: {
        char lo[32], hi[32];
        format_double(s->d_min, lo, sizeof lo);
        format_double(s->d_max, hi, sizeof hi);
        snprintf(buf, len, "a number in %s..%s", lo, hi);
        return;
    }
    case T_BOOL:
        snprintf(buf, len, "true or false");
        return;
    case T_STRING:
        snprintf(buf, len, "%s", s->check_doc ? s->check_doc : "a string");
        return;
    case T_ENUM: {
        size_t n = (size_t)snprintf(buf, len, "one of ");
        for (const char *const *v = s->values; *v && n < len; v++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", *v, v[1] ? ", " : "");
        return;
    }
    }
}

static int parse_bool_text(const char *text, bool *out) {
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(text, no[i]) == 0)
            return *out = false, 0;
    }
    return -1;
}

/* Text from the environment or a flag into v. Returns 0, or -1 with why. */
static int parse_text(const setting *s, const char *text, value *v, char *why, size_t why_len) {
    char *end;
    switch (s->type) {
    case T_INT:
        errno = 0;
        if (!*text || isspace((unsigned char)*text))
            return fail(why, why_len, "is not an integer");
        v->i = strtoll(text, &end, 10);
        if (*end)
            return fail(why, why_len, "is not an integer");
        if (errno == ERANGE)
            return fail(why, why_len, "is out of range");
        return 0;
    case T_DOUBLE:
        if (!*text || isspace((unsigned char)*text))
            return fail(why, why_len, "is not a number");
        v->d = strtod(text, &end);
        if (*end || !isfinite(v->d))
            return fail(why, why_len, "is not a finite number");
        return 0;
    case T_BOOL:
        if (parse_bool_text(text, &v->b) != 0)
            return fail(why, why_len, "is not a boolean");
        return 0;
    case T_STRING:
    case T_ENUM:
        v->s = text;
        return 0;
    }
    return fail(why, why_len, "has an unknown type");
}

/* ---- the models setting -------------------------------------------------------- */

/* A name or alias: what a JSON string holds plainly and the flag form can
 * split without escapes. */
static bool model_name_ok(const char *p, size_t len) {
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)p[i]) && !strchr("._-/:@+", p[i]))
            return false;
    return true;
}

/* The same names as a `models` entry's aliases accept, so that a name
 * refused there is not taken here; none empty ("a,,b" is a typo), none twice. */
static int check_model_aliases(const char *value, char *why, size_t why_len) {
    size_t l;
    for (const char *p = value, *a; (a = config_names_next(&p, ',', &l));) {
        if (!model_name_ok(a, l))
            return fail(why, why_len,
                        "names \"%.*s\", which is empty or has a character other than letters, "
                        "digits and ._-/:@+",
                        (int)l, a);
        size_t bl;
        for (const char *q = value, *b; (b = config_names_next(&q, ',', &bl)) && b < a;)
            if (bl == l && memcmp(a, b, l) == 0)
                return fail(why, why_len, "names \"%.*s\" twice", (int)l, a);
    }
    size_t n = strlen(value);
    while (n && value[n - 1] == ' ')
        n--;
    if (n && value[n - 1] == ',')
        return fail(why, why_len, "ends with a comma");
    return 0;
}

int config_pool_threads(const config *c) {
    const long n = c->threads > 0 ? (long)c->threads : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *config_names_next(const char **p, char sep, size_t *len) {
    const char *s = *p;
    if (!s || !*s)
        return NULL;
    const char *end = strchr(s, sep);
    size_t n = end ? (size_t)(end - s) : strlen(s);
    *p = end ? end + 1 : s + n;
    while (n && *s == ' ')
        s++, n--;
    while (n && s[n - 1] == ' ')
        n--;
    *len = n;
    return s;
}

json_t *config_names_json(const char *list) {
    json_t *arr = json_array();
    size_t l;
    for (const char *p = list, *a; arr && (a = config_names_next(&p, ',', &l));)
        if (l && json_array_append_new(arr, json_stringn(a, l)) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    return arr;
}

static bool model_name_taken(const config_model *m, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++) {
        if (strlen(m[i].name) == len && memcmp(m[i].name, name, len) == 0)
            return true;
        size_t l;
        for (const char *p = m[i].aliases, *a; (a = config_names_next(&p, ',', &l));)
            if (l == len && memcmp(a, name, len) == 0)
                return true;
    }
    return false;
}

/* One ;key=value option of entry m. */
static int model_option(config_model *all, size_t idx, const char *key, size_t klen,
                        const char *val, size_t vlen, char *err, size_t err_len) {
    config_model *m = &all[idx];
    char v[1024];
    if (vlen >= sizeof v)
        return fail(err, err_len, "model \"%s\": %.*s is too long", m->name, (int)klen, key);
    memcpy(v, val, vlen);
    v[vlen] = '\0';
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    if (KEY("aliases")) {
        size_t out = 0, l;
        for (const char *p = v, *a; (a = config_names_next(&p, '|', &l));) {
            if (!model_name_ok(a, l))
                return fail(err, err_len,
                            "model \"%s\": alias \"%.*s\" is empty or has a character other than "
                            "letters, digits and ._-/:@+",
                            m->name, (int)l, a);
            if (model_name_taken(all, idx + 1, a, l))
                return fail(err, err_len, "model \"%s\": the name \"%.*s\" is taken twice", m->name,
                            (int)l, a);
            if (out + l + 2 > sizeof m->aliases)
                return fail(err, err_len, "model \"%s\": aliases are too long", m->name);
            if (out)
                m->aliases[out++] = ',';
            memcpy(m->aliases + out, a, l);
            m->aliases[out += l] = '\0';
        }
        return 0;
    }
    if (KEY("max_seq_length")) {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno || x < 0 || x > (1 << 20))
            return fail(err, err_len,
                        "model \"%s\": max_seq_length \"%s\" is not an integer in 0..1048576",
                        m->name, v);
        m->max_seq_length = x;
        return 0;
    }
    if (KEY("truncate")) {
        bool b;
        if (parse_bool_text(v, &b) != 0)
            return fail(err, err_len, "model \"%s\": truncate \"%s\" is not a boolean", m->name, v);
        m->truncate = b;
        return 0;
    }
    if (KEY("engine")) {
        if (!*v || vlen >= sizeof m->engine)
            return fail(err, err_len, "model \"%s\": engine \"%s\" is empty or too long", m->name,
                        v);
        memcpy(m->engine, v, vlen + 1);
        return 0;
    }
    if (KEY("precision")) {
        for (const char *const *p = precision_values; *p; p++)
            if (strcmp(*p, v) == 0) {
                memcpy(m->precision, *p, strlen(*p) + 1); /* "auto" or shorter */
                return 0;
            }
        return fail(
            err, err_len,
            "model \"%s\": precision \"%s\" is not one of fp32, bf16, int8, fp16, tf32, auto",
            m->name, v);
    }
#undef KEY
    return fail(err, err_len,
                "model \"%s\": unknown key \"%.*s\" (name, path, aliases, max_seq_length, "
                "truncate, engine, precision)",
                m->name, (int)klen, key);
}

int config_models_parse(const char *text, config_model *out, size_t cap, size_t *n, char *err,
                        size_t err_len) {
    *n = 0;
    for (const char *p = text; *p;) {
        const size_t len = strcspn(p, ",");
        if (*n == cap)
            return fail(err, err_len, "more than %zu models", cap);
        config_model *m = &out[*n];
        *m = (config_model){.max_seq_length = -1, .truncate = -1};
        const size_t head = strcspn(p, ",;");
        const char *eq = memchr(p, '=', head);
        if (!eq)
            return fail(err, err_len, "\"%.*s\" is not NAME=PATH", (int)head, p);
        const size_t nlen = (size_t)(eq - p), plen = head - nlen - 1;
        if (!model_name_ok(p, nlen))
            return fail(err, err_len,
                        "model name \"%.*s\" is empty or has a character other than letters, "
                        "digits and ._-/:@+",
                        (int)nlen, p);
        if (nlen >= sizeof m->name || plen >= sizeof m->path)
            return fail(err, err_len,
                        "model \"%.*s\": the name (at most %zu bytes) or path (at most %zu) "
                        "is too long",
                        (int)(nlen < 40 ? nlen : 40), p, sizeof m->name - 1, sizeof m->path - 1);
        memcpy(m->name, p, nlen);
        if (model_name_taken(out, *n, p, nlen))
            return fail(err, err_len, "model name \"%s\" is taken twice", m->name);
        memcpy(m->path, eq + 1, plen);
        /* The path is not looked at here: validation is syntactic, so a
         * model directory removed after start cannot block every reload;
         * loading it at start reports what is wrong with it. */
        if (plen == 0)
            return fail(err, err_len, "model \"%s\": the path is empty", m->name);
        for (const char *o = p + head; o < p + len;) {
            o++; /* the ';' */
            const size_t olen = strcspn(o, ",;");
            const char *oeq = memchr(o, '=', olen);
            if (!oeq)
                return fail(err, err_len, "model \"%s\": \"%.*s\" is not key=value", m->name,
                            (int)olen, o);
            if (model_option(out, *n, o, (size_t)(oeq - o), oeq + 1, olen - (size_t)(oeq - o) - 1,
                             err, err_len) != 0)
                return -1;
            o += olen;
        }
        ++*n;
        p += len;
        if (*p == ',' && *++p == '\0')
            return fail(err, err_len, "ends with a comma");
    }
    return 0;
}

static int check_models(const char *value, char *why, size_t why_len) {
    config_model scratch[CONFIG_MAX_MODELS];
    size_t n;
    return config_models_parse(value, scratch, CONFIG_MAX_MODELS, &n, why, why_len);
}

/* Appends printf's text to buf[0, cap) at *n; once it overflows, *n stays
 * past cap (and nothing more is written), so the caller checks *n < cap once
 * at the end. */
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    if (*n >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    *n = w < 0 ? cap : *n + (size_t)w;
}

/* The text a JSON value of one model key stands for in the flag form, or
 * -1 with the reason in why when its type is not the key's exactly (as for
 * every other setting: "truncate": "true" is refused). */
static int model_value_text(const char *key, const json_t *v, char *buf, size_t len, char *why,
                            size_t why_len) {
    size_t n = 0;
    buf[0] = '\0';
    if (strcmp(key, "aliases") == 0) {
        if (json_is_string(v)) { /* the file's comma list is the flag's | list */
            for (const char *s = json_string_value(v); *s; s++)
                append(buf, len, &n, "%c", *s == ',' ? '|' : *s);
        } else if (json_is_array(v)) {
            size_t i;
            const json_t *a;
            json_array_foreach(v, i, a) {
                if (!json_is_string(a))
                    return fail(why, why_len, "\"aliases\" is not an array of strings");
                append(buf, len, &n, "%s%s", i ? "|" : "", json_string_value(a));
            }
        } else {
            return fail(why, why_len, "\"aliases\" is not an array of strings or a string");
        }
    } else if (strcmp(key, "max_seq_length") == 0) {
        if (!json_is_integer(v))
            return fail(why, why_len, "\"max_seq_length\" is not a JSON integer");
        append(buf, len, &n, "%lld", (long long)json_integer_value(v));
    } else if (strcmp(key, "truncate") == 0) {
        if (!json_is_boolean(v))
            return fail(why, why_len, "\"truncate\" is not a JSON boolean");
        append(buf, len, &n, "%s", json_is_true(v) ? "true" : "false");
    } else if (strcmp(key, "engine") == 0 || strcmp(key, "precision") == 0) {
        if (!json_is_string(v))
            return fail(why, why_len, "\"%s\" is not a JSON string", key);
        append(buf, len, &n, "%s", json_string_value(v));
    } else {
        return fail(why, why_len,
                    "unknown key \"%s\" (name, path, aliases, max_seq_length, truncate, engine, "
                    "precision)",
                    key);
    }
    if (n >= len)
        return fail(why, why_len, "\"%s\" is longer than %zu bytes", key, len - 1);
    if (strpbrk(buf, ",;"))
        return fail(why, why_len, "\"%s\" has a , or ;", key);
    return 0;
}

/* The config file's array of objects as the flag form's text. Config
 * loading runs on one thread at a time (start, then SIGHUP on main), so
 * one static buffer holds the text until it is stored. */
static int models_text_of_json(const json_t *arr, value *v, char *why, size_t why_len) {
    static char text[STRING_MAX + 1];
    size_t n = 0, i;
    const json_t *m;
    text[0] = '\0';
    json_array_foreach(arr, i, m) {
        const json_t *name = json_object_get(m, "name"), *path = json_object_get(m, "path");
        if (!json_is_object(m) || !json_is_string(name) || !json_is_string(path))
            return fail(why, why_len,
                        "entry %zu is not an object with string \"name\" and \"path\"", i);
        const char *sep = json_string_value(name)[strcspn(json_string_value(name), ",;=|")] ? "x"
                          : json_string_value(path)[strcspn(json_string_value(path), ",;")] ? "y"
                                                                                            : "";
        if (*sep)
            return fail(why, why_len, "entry %zu: %s has one of the characters %s", i,
                        *sep == 'x' ? "name" : "path", *sep == 'x' ? ",;=|" : ",;");
        append(text, sizeof text, &n, "%s%s=%s", i ? "," : "", json_string_value(name),
               json_string_value(path));
        const char *key;
        const json_t *val;
        json_object_foreach((json_t *)m, key, val) {
            if (!strcmp(key, "name") || !strcmp(key, "path"))
                continue;
            char vt[1024], vwhy[160];
            if (model_value_text(key, val, vt, sizeof vt, vwhy, sizeof vwhy) != 0)
                return fail(why, why_len, "entry %zu: %s", i, vwhy);
            append(text, sizeof text, &n, ";%s=%s", key, vt);
        }
    }
    if (n >= sizeof text)
        return fail(why, why_len, "is longer than %d bytes", STRING_MAX);
    v->s = text;
    return 0;
}

/* The setting's text as the config file's array of objects. */
static json_t *models_json(const char *text) {
    config_model m[CONFIG_MAX_MODELS];
    size_t n = 0;
    char why[256];
    json_t *arr = json_array();
    if (!arr || config_models_parse(text, m, CONFIG_MAX_MODELS, &n, why, sizeof why) != 0) {
        json_decref(arr);
        return json_string(text); /* validated when stored: only out of memory gets here */
    }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_pack("{s:s, s:s}", "name", m[i].name, "path", m[i].path);
        if (o && m[i].aliases[0])
            json_object_set_new(o, "aliases", config_names_json(m[i].aliases));
        if (o && m[i].max_seq_length >= 0)
            json_object_set_new(o, "max_seq_length", json_integer(m[i].max_seq_length));
        if (o && m[i].truncate >= 0)
            json_object_set_new(o, "truncate", json_boolean(m[i].truncate));
        if (o && m[i].engine[0])
            json_object_set_new(o, "engine", json_string(m[i].engine));
        if (o && m[i].precision[0])
            json_object_set_new(o, "precision", json_string(m[i].precision));
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* A value from the config file into v: JSON types must match exactly (an
 * integer setting does not take "8080" or 8080.5). */
static int parse_json(const setting *s, const json_t *j, value *v, char *why, size_t why_len) {
    switch (s->type) {
    case T_INT:
        if (!json_is_integer(j))
            return fail(why, why_len, "is not a JSON integer");
        v->i = json_integer_value(j);
        return 0;
    case T_DOUBLE:
        if (!json_is_number(j))
            return fail(why, why_len, "is not a JSON number");
        v->d = json_number_value(j);
        return 0;
    case T_BOOL:
        if (!json_is_boolean(j))
            return fail(why, why_len, "is not a JSON boolean");
        v->b = json_is_true(j);
        return 0;
    case T_STRING:
    case T_ENUM:
        if (s->check == check_models && json_is_array(j))
            return models_text_of_json(j, v, why, why_len);
        if (!json_is_string(j))
            return fail(why, why_len, "is not a JSON string");
        v->s = json_string_value(j);
        return 0;
    }
    return fail(why, why_len, "has an unknown type");
}

/* Bounds and allowed values. For an enum, points v->s at the table's own
 * copy so that the config never owns enum strings. */
static int check_value(const setting *s, value *v, char *why, size_t why_len) {
    switch (s->type) {
    case T_INT:
        if (v->i < s->i_min || v->i > s->i_max)
            return fail(why, why_len, "is out of range");
        return 0;
    case T_DOUBLE:
        if (!(v->d >= s->d_min && v->d <= s->d_max))
            return fail(why, why_len, "is out of range");
        return 0;
    case T_BOOL:
        return 0;
    case T_STRING:
        if (strlen(v->s) > STRING_MAX)
            return fail(why, why_len, "is longer than %d bytes", STRING_MAX);
        for (const char *p = v->s; *p; p++)
            if (iscntrl((unsigned char)*p))
                return fail(why, why_len, "contains a control character");
        /* Settings are shown as JSON (--print-config, /info, log lines),
         * which holds only UTF-8: a flag or environment value that is not
         * would be accepted, then fail to print (found by tests/fuzz/config). */
        json_t *probe = json_string(v->s);
        if (!probe)
            return fail(why, why_len, "is not valid UTF-8");
        json_decref(probe);
        return s->check ? s->check(v->s, why, why_len) : 0;
    case T_ENUM:
        for (const char *const *a = s->values; *a; a++)
            if (strcmp(*a, v->s) == 0) {
                v->s = *a;
                return 0;
            }
        return fail(why, why_len, "is not an allowed value");
    }
    return fail(why, why_len, "has an unknown type");
}

static int store(config *cfg, const setting *s, const value *v) {
    void *f = field(cfg, s);
    switch (s->type) {
    case T_INT:
        *(int64_t *)f = v->i;
        return 0;
    case T_DOUBLE:
        *(double *)f = v->d;
        return 0;
    case T_BOOL:
        *(bool *)f = v->b;
        return 0;
    case T_STRING: {
        char *copy = strdup(v->s);
        if (!copy)
            return -1;
        free(*(char **)f);
        *(char **)f = copy;
        return 0;
    }
    case T_ENUM:
        *(const char **)f = v->s;
        return 0;
    }
    return -1;
}

/* The value as shown in messages: text quoted, JSON as written, both cut
 * short so that a huge value cannot flood the terminal. */
static void show_value(const char *text, const json_t *j, char *buf, size_t len) {
    if (text) {
        snprintf(buf, len, "\"%.60s%s\"", text, strlen(text) > 60 ? "..." : "");
        return;
    }
    char *dump = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, len, "%.60s%s", dump ? dump : "(value)", dump && strlen(dump) > 60 ? "..." : "");
    /* jansson's own free: the service points jansson at membudget_malloc. */
    json_malloc_t jmalloc;
    json_free_t jfree;
    json_get_alloc_funcs(&jmalloc, &jfree);
    jfree(dump);
}

/* Sets one setting from text (environment, flag) or JSON (file); source
 * says where it came from for the message. */
static int set_from(config *cfg, const setting *s, const char *text, const json_t *j,
                    const char *source, char *err, size_t err_len) {
    value v = {0};
    char why[160];
    int rc =
        text ? parse_text(s, text, &v, why, sizeof why) : parse_json(s, j, &v, why, sizeof why);
    if (rc == 0)
        rc = check_value(s, &v, why, sizeof why);
    if (rc != 0) {
        char allowed[160], shown[80];
        describe_allowed(s, allowed, sizeof allowed);
        show_value(text, j, shown, sizeof shown);
        return fail(err, err_len, "setting \"%s\": %s from %s %s; allowed: %s", s->name, shown,
                    source, why, allowed);
    }
    if (store(cfg, s, &v) != 0)
        return fail(err, err_len, "setting \"%s\": out of memory", s->name);
    return 0;
}

/* The value as text, for --help and reload reports. */
static void format_value(const config *cfg, const setting *s, char *buf, size_t len) {
    const void *f = field(cfg, s);
    switch (s->type) {
    case T_INT:
        snprintf(buf, len, "%" PRId64, *(const int64_t *)f);
        return;
    case T_DOUBLE:
        format_double(*(const double *)f, buf, len);
        return;
    case T_BOOL:
        snprintf(buf, len, "%s", *(const bool *)f ? "true" : "false");
        return;
    case T_STRING:
    case T_ENUM:
        snprintf(buf, len, "\"%s\"", *(const char *const *)f);
        return;
    }
}

static bool same_value(const config *a, const config *b, const setting *s) {
    const void *fa = field(a, s), *fb = field(b, s);
    switch (s->type) {
    case T_INT:
        return *(const int64_t *)fa == *(const int64_t *)fb;
    case T_DOUBLE:
        return *(const double *)fa == *(const double *)fb;
    case T_BOOL:
        return *(const bool *)fa == *(const bool *)fb;
    case T_STRING:
    case T_ENUM:
        return strcmp(*(const char *const *)fa, *(const char *const *)fb) == 0;
    }
    return false;
}

/* Copies one setting's value from src to dst (strings duplicated). */
static int copy_value(config *dst, const config *src, const setting *s) {
    value v = {0};
    const void *f = field(src, s);
    switch (s->type) {
    case T_INT:
        v.i = *(const int64_t *)f;
        break;
    case T_DOUBLE:
        v.d = *(const double *)f;
        break;
    case T_BOOL:
        v.b = *(const bool *)f;
        break;
    case T_STRING:
    case T_ENUM:
        v.s = *(const char *const *)f;
        break;
    }
    return store(dst, s, &v);
}

static int set_defaults(config *cfg) {
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        value v = {.i = s->i_def, .d = s->d_def, .b = s->b_def, .s = s->s_def};
        if (store(cfg, s, &v) != 0)
            return -1;
    }
    return 0;
}

/* ---- flags ----------------------------------------------------------------- */

/* One --name=value flag, checked for its name and kept for after the file
 * and the environment. */
typedef struct flag {
    const setting *s;
    const char *value;
    char source[80]; /* "flag --port" */
} flag;

typedef struct flags {
    flag *items;
    size_t n;
    const char *config_path; /* --config, NULL if absent */
    config_action action;
} flags;

/* "--max-batch-tokens=5" gives name "max_batch_tokens" (at most len-1
 * bytes) and *value "5" (NULL when there is no '='). */
static void split_flag(const char *arg, char *name, size_t len, const char **value) {
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (n >= len)
        n = len - 1;
    for (size_t i = 0; i < n; i++)
        name[i] = (char)(arg[i] == '-' ? '_' : arg[i]);
    name[n] = '\0';
    *value = eq ? eq + 1 : NULL;
}

static bool is_flag(const char *arg, const char *name) {
    return strcmp(arg, name) == 0;
}

/* --help and --version win over everything else, even over bad flags, so
 * that a user can always ask. */
static config_action early_action(int argc, char *const argv[]) {
    for (int i = 0; i < argc; i++) {
        if (is_flag(argv[i], "--help") || is_flag(argv[i], "-h"))
            return CONFIG_HELP;
        if (is_flag(argv[i], "--version"))
            return CONFIG_VERSION;
    }
    return CONFIG_RUN;
}

static int parse_flags(int argc, char *const argv[], flags *out, char *err, size_t err_len) {
    out->items = calloc((size_t)argc + 1, sizeof *out->items);
    if (!out->items)
        return fail(err, err_len, "out of memory");
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        char name[72];
        const char *value;
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            return fail(err, err_len,
                        "unexpected argument \"%.60s\"; settings are given as --name=value "
                        "(see --help)",
                        arg);
        split_flag(arg + 2, name, sizeof name, &value);
        if (is_api_key_name(name))
            return fail(err, err_len,
                        "flag --%s refused: %s, never from the command line, where any user "
                        "can read it in ps",
                        name, api_key_refusal);
        if (strcmp(name, "print_config") == 0 && !value) {
            out->action = CONFIG_PRINT;
            continue;
        }
        bool is_config = strcmp(name, "config") == 0;
        const setting *s = is_config ? NULL : find_setting(name);
        if (!s && !is_config) {
            char hint[96];
            suggestion(name, "--", hint, sizeof hint);
            return fail(err, err_len, "unknown flag --%s%s (see --help)", name, hint);
        }
        /* A bare boolean flag means true unless a boolean word follows it. */
        bool b;
        if (!value && s && s->type == T_BOOL)
            value = i + 1 < argc && parse_bool_text(argv[i + 1], &b) == 0 ? argv[++i] : "true";
        if (!value) {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                return fail(err, err_len, "flag --%s needs a value (--%s=VALUE)", name, name);
            value = argv[++i];
        }
        if (is_config) {
            out->config_path = value;
            continue;
        }
        flag *f = &out->items[out->n++];
        f->s = s;
        f->value = value;
        snprintf(f->source, sizeof f->source, "flag --%s", s->name);
    }
    return 0;
}

/* ---- config file and environment ------------------------------------------ */

/* named_by says who chose the path (--config or $ATTNSERVE_CONFIG), or is
 * NULL for the default, which alone may be absent. */
static int load_file(config *cfg, const char *path, const char *named_by, char *err,
                     size_t err_len) {
    FILE *fp = fopen(path, "r");
    if (!fp) {
        if (errno == ENOENT && !named_by)
            return 0;
        return fail(err, err_len, "config file %s (%s): %s", path,
                    named_by ? named_by : "the default", strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(fp);
        return fail(err, err_len, "config file %s: is a directory", path);
    }
    json_error_t jerr;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (!root)
        return fail(err, err_len, "config file %s:%d:%d: malformed JSON: %s", path, jerr.line,
                    jerr.column, jerr.text);
    int rc = 0;
    if (!json_is_object(root))
        rc = fail(err, err_len, "config file %s: must hold one JSON object of settings", path);
    char source[STRING_MAX + 32];
    snprintf(source, sizeof source, "config file %s", path);
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (rc != 0)
            break;
        const setting *s = find_setting(key);
        char hint[96];
        if (is_api_key_name(key)) {
            rc = fail(err, err_len,
                      "%s: key \"%s\" refused: %s, so that the config file "
                      "can be shared and printed",
                      source, key, api_key_refusal);
        } else if (!s) {
            suggestion(key, "", hint, sizeof hint);
            rc = fail(err, err_len, "%s: unknown setting \"%.64s\"%s (see --help)", source, key,
                      hint);
        } else {
            rc = set_from(cfg, s, NULL, val, source, err, err_len);
        }
    }
    json_decref(root);
    if (rc == 0 && !(cfg->config_path = strdup(path)))
        rc = fail(err, err_len, "out of memory");
    return rc;
}

/* Only the variables of known settings are read: unknown ATTNSERVE_* names
 * are ignored rather than refused, because Kubernetes injects service links
 * (ATTNSERVE_SERVICE_HOST, ATTNSERVE_PORT_8080_TCP, ...) for a service of
 * that name. */
static int load_env(config *cfg, char *err, size_t err_len) {
    for (size_t i = 0; i < N_SETTINGS; i++) {
        char name[80], source[128];
        env_name(&settings[i], name, sizeof name);
        const char *text = getenv(name);
        if (!text)
            continue;
        snprintf(source, sizeof source, "environment variable %s", name);
        if (set_from(cfg, &settings[i], text, NULL, source, err, err_len) != 0)
            return -1;
    }
    return 0;
}

/* ---- API keys ---------------------------------------------------------------- */

static int add_key(config *cfg, const char *key, size_t len) {
    char **keys = realloc(cfg->api_keys, (cfg->n_api_keys + 1) * sizeof *keys);
    if (!keys)
        return -1;
    cfg->api_keys = keys;
    if (!(keys[cfg->n_api_keys] = strndup(key, len)))
        return -1;
    cfg->n_api_keys++;
    return 0;
}

/* Trims surrounding whitespace (mounted secrets end with a newline) and
 * checks what is left is one token a Bearer header can carry. Messages
 * never quote the key. */
static int take_key(config *cfg, const char *text, size_t len, const char *where, char *err,
                    size_t err_len) {
    while (len && isspace((unsigned char)*text))
        text++, len--;
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    if (len == 0)
        return fail(err, err_len, "%s: the API key is empty", where);
    for (size_t i = 0; i < len; i++)
        if (!isgraph((unsigned char)text[i]))
            return fail(err, err_len, "%s: the API key contains a space or control character",
                        where);
    if (add_key(cfg, text, len) != 0)
        return fail(err, err_len, "out of memory");
    return 0;
}

static int read_key_file(config *cfg, const char *path, char *err, size_t err_len) {
    FILE *fp = fopen(path, "r");
    if (!fp)
        return fail(err, err_len, "api_key_file %s: %s", path, strerror(errno));
    char *buf = malloc(KEY_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, KEY_FILE_MAX + 1, fp) : 0;
    int rc = 0;
    if (!buf)
        rc = fail(err, err_len, "out of memory");
    else if (ferror(fp))
        rc = fail(err, err_len, "api_key_file %s: read error", path);
    else if (n > KEY_FILE_MAX)
        rc = fail(err, err_len, "api_key_file %s: larger than %d bytes", path, KEY_FILE_MAX);
    fclose(fp);
    size_t before = cfg->n_api_keys, line_no = 0;
    for (size_t at = 0; rc == 0 && at < n; line_no++) {
        const char *line = buf + at;
        size_t len = strcspn(line, "\n");
        if (memchr(line, '\0', len)) {
            /* strcspn stops at NUL; such a file is not text. */
            rc =
                fail(err, err_len, "api_key_file %s: line %zu holds a NUL byte", path, line_no + 1);
            break;
        }
        at += len + 1;
        size_t lead = 0;
        while (lead < len && isspace((unsigned char)line[lead]))
            lead++;
        if (lead == len || line[lead] == '#')
            continue;
        char where[STRING_MAX + 64];
        snprintf(where, sizeof where, "api_key_file %s line %zu", path, line_no + 1);
        rc = take_key(cfg, line, len, where, err, err_len);
    }
    if (rc == 0 && cfg->n_api_keys == before)
        rc = fail(err, err_len,
                  "api_key_file %s holds no keys; set api_key_file to \"\" to run without "
                  "authentication",
                  path);
    if (buf) {
        explicit_bzero(buf, n < KEY_FILE_MAX + 1 ? n : KEY_FILE_MAX + 1);
        free(buf);
    }
    return rc;
}

static int load_api_keys(config *cfg, char *err, size_t err_len) {
    if (cfg->api_key_file[0] && read_key_file(cfg, cfg->api_key_file, err, err_len) != 0)
        return -1;
    const char *env = getenv(ENV_API_KEY);
    if (env &&
        take_key(cfg, env, strlen(env), "environment variable " ENV_API_KEY, err, err_len) != 0)
        return -1;
    return 0;
}

static void free_keys(config *cfg) {
    for (size_t i = 0; i < cfg->n_api_keys; i++) {
        explicit_bzero(cfg->api_keys[i], strlen(cfg->api_keys[i]));
        free(cfg->api_keys[i]);
    }
    free(cfg->api_keys);
    cfg->api_keys = NULL;
    cfg->n_api_keys = 0;
}

static bool same_keys(const config *a, const config *b) {
    if (a->n_api_keys != b->n_api_keys)
        return false;
    for (size_t i = 0; i < a->n_api_keys; i++)
        if (strcmp(a->api_keys[i], b->api_keys[i]) != 0)
            return false;
    return true;
}

/* ---- loading ------------------------------------------------------------------ */

static int copy_argv(config *cfg, int argc, char *const argv[]) {
    cfg->argv = calloc((size_t)argc + 1, sizeof *cfg->argv);
    if (!cfg->argv)
        return -1;
    for (int i = 0; i < argc; i++) {
        if (!(cfg->argv[i] = strdup(argv[i])))
            return -1;
        cfg->argc = i + 1;
    }
    return 0;
}

/* Everything after the program name, in precedence order. cfg is zeroed
 * on entry; on error the caller frees it. */
/* With `models` set, `model` and model_aliases name nothing that is served:
 * refused rather than ignored, so that a configuration meant for one model
 * does not quietly serve others. */
static int check_models_alone(const config *cfg, char *err, size_t err_len) {
    if (!cfg->models[0])
        return 0;
    if (strcmp(cfg->model, find_setting("model")->s_def) != 0)
        return fail(err, err_len,
                    "setting \"models\" is set, and so is `model` (\"%.200s\"): with \"models\" "
                    "each model's path is in its entry; unset `model`",
                    cfg->model);
    if (cfg->model_aliases[0])
        return fail(err, err_len,
                    "setting \"models\" is set, and so is model_aliases: with \"models\" each "
                    "model's aliases are in its entry; unset model_aliases");
    return 0;
}

static int build(config *cfg, int argc, char *const argv[], config_action *action, char *err,
                 size_t err_len) {
    flags fl = {0};
    int rc = -1;
    if (set_defaults(cfg) != 0 || copy_argv(cfg, argc, argv) != 0) {
        fail(err, err_len, "out of memory");
        goto out;
    }
    if (parse_flags(argc, argv, &fl, err, err_len) != 0)
        goto out;
    const char *path = fl.config_path, *named_by = "given by --config";
    if (!path && (path = getenv(ENV_CONFIG)))
        named_by = "given by $" ENV_CONFIG;
    cfg->config_explicit = path != NULL;
    if (!path) {
        path = DEFAULT_CONFIG_PATH;
        named_by = NULL;
    }
    if (load_file(cfg, path, named_by, err, err_len) != 0 || load_env(cfg, err, err_len) != 0)
        goto out;
    for (size_t i = 0; i < fl.n; i++)
        if (set_from(cfg, fl.items[i].s, fl.items[i].value, NULL, fl.items[i].source, err,
                     err_len) != 0)
            goto out;
    if (check_models_alone(cfg, err, err_len) != 0 || load_api_keys(cfg, err, err_len) != 0)
        goto out;
    *action = fl.action;
    rc = 0;
out:
    free(fl.items);
    return rc;
}

int config_load(config *cfg, int argc, char *const argv[], config_action *action, char *err,
                size_t err_len) {
    backend_values_fill();
    memset(cfg, 0, sizeof *cfg);
    int nflags = argc > 0 ? argc - 1 : 0;
    char *const *flagv = argv + (argc > 0);
    *action = early_action(nflags, flagv);
    int rc;
    if (*action != CONFIG_RUN)
        rc = set_defaults(cfg) == 0 ? 0 : fail(err, err_len, "out of memory");
    else
        rc = build(cfg, nflags, flagv, action, err, err_len);
    if (rc != 0)
        config_free(cfg);
    return rc;
}

void config_free(config *cfg) {
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (settings[i].type == T_STRING)
            free(*(char **)field(cfg, &settings[i]));
    free_keys(cfg);
    free(cfg->config_path);
    for (int i = 0; i < cfg->argc; i++)
        free(cfg->argv[i]);
    free(cfg->argv);
    memset(cfg, 0, sizeof *cfg);
}

/* ---- reload ------------------------------------------------------------------- */

int config_reload(const config *cur, config *next, config_change_fn on_change, void *ctx, char *err,
                  size_t err_len) {
    backend_values_fill();
    config_action action;
    memset(next, 0, sizeof *next);
    if (build(next, cur->argc, cur->argv, &action, err, err_len) != 0) {
        config_free(next);
        return -1;
    }
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        if (same_value(cur, next, s))
            continue;
        char was[STRING_MAX + 8], now[STRING_MAX + 8];
        format_value(cur, s, was, sizeof was);
        format_value(next, s, now, sizeof now);
        if (s->apply == CONFIG_RESTART && copy_value(next, cur, s) != 0) {
            config_free(next);
            return fail(err, err_len, "out of memory");
        }
        if (on_change)
            on_change(ctx, s->name, was, now, s->apply != CONFIG_RESTART);
    }
    if (!same_keys(cur, next) && on_change) {
        char was[32], now[32];
        snprintf(was, sizeof was, "%zu keys", cur->n_api_keys);
        snprintf(now, sizeof now, "%zu keys", next->n_api_keys);
        on_change(ctx, "api_keys", was, now, true);
    }
    return 0;
}

/* Whether a row before settings[i] names its apply group. */
static bool applied_before(size_t i) {
    for (size_t j = 0; j < i; j++)
        if (settings[j].apply == settings[i].apply)
            return true;
    return false;
}

/* The logging settings, which config_apply applies first. */
static bool is_log_setting(const setting *s) {
    return s->offset == offsetof(config, log_level) || s->offset == offsetof(config, log_format);
}

void config_apply(const config *next, const config_apply_fn fns[CONFIG_APPLY_GROUPS],
                  void *service) {
    for (int logging = 1; logging >= 0; logging--)
        for (size_t i = 0; i < N_SETTINGS; i++) {
            const setting *s = &settings[i];
            if (s->apply != CONFIG_RESTART && is_log_setting(s) == logging && !applied_before(i))
                fns[s->apply](service, next);
        }
}

/* ---- printing ----------------------------------------------------------------- */

static json_t *value_json(const config *cfg, const setting *s) {
    const void *f = field(cfg, s);
    switch (s->type) {
    case T_INT:
        return json_integer(*(const int64_t *)f);
    case T_DOUBLE:
        return json_real(*(const double *)f);
    case T_BOOL:
        return json_boolean(*(const bool *)f);
    case T_STRING:
    case T_ENUM:
        if (s->check == check_models)
            return models_json(*(const char *const *)f);
        return json_string(*(const char *const *)f);
    }
    return NULL;
}

json_t *config_to_json(const config *cfg) {
    json_t *obj = json_object();
    for (size_t i = 0; obj && i < N_SETTINGS; i++)
        if (json_object_set_new(obj, settings[i].name, value_json(cfg, &settings[i])) != 0) {
            json_decref(obj);
            obj = NULL;
        }
    return obj;
}

int config_print(const config *cfg, FILE *out) {
    backend_values_fill();
    json_t *obj = config_to_json(cfg);
    int rc = obj ? json_dumpf(obj, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : -1;
    json_decref(obj);
    if (rc == 0 && fputc('\n', out) == EOF)
        rc = -1;
    return rc;
}

static const char *type_label(const setting *s) {
    switch (s->type) {
    case T_INT:
        return "INT";
    case T_DOUBLE:
        return "NUMBER";
    case T_BOOL:
        return "BOOL";
    case T_STRING:
        return "STRING";
    case T_ENUM:
        return "CHOICE";
    }
    return "?";
}

void config_print_help(FILE *out, const char *prog) {
    backend_values_fill();
    config defaults = {0};
    fprintf(out,
            "Usage: %s [--config PATH] [--print-config] [--NAME=VALUE | --NAME VALUE ...]\n"
            "       %s selftest [--config PATH] [--NAME=VALUE ...]\n"
            "       %s --help | --version\n\n"
            "An HTTP service for embeddings and attention.\n\n"
            /* the self-test command (server/ops/backend_selftest.h) */
            "selftest: reads the same settings and each served model's config.json (not its\n"
            "weights), checks every backend on every SIMD path this CPU has against a float64\n"
            "reference for each model (the check the service runs at start), prints a table per\n"
            "model, and exits 0 when every backend that backend and fallback_backends name\n"
            "passed for every model, 1 otherwise.\n\n"
            "Each setting comes from, lowest precedence first: its default, the config file\n"
            "(--config PATH, else $" ENV_CONFIG ", else " DEFAULT_CONFIG_PATH " if present),\n"
            "the environment variable shown, a flag. '-' may replace '_' in flag names.\n"
            "SIGHUP reloads the settings marked reloadable; the others need a restart.\n"
            "API keys: api_key_file and $" ENV_API_KEY ", never a flag.\n\n"
            "Settings:\n",
            prog, prog, prog);
    bool have_defaults = set_defaults(&defaults) == 0;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        char def[STRING_MAX + 8], allowed[160], env[80];
        if (have_defaults)
            format_value(&defaults, s, def, sizeof def);
        else
            snprintf(def, sizeof def, "?");
        describe_allowed(s, allowed, sizeof allowed);
        env_name(s, env, sizeof env);
        fprintf(out, "  --%s=%s\n      %s\n      default %s; allowed: %s\n      env %s; %s\n",
                s->name, type_label(s), s->help, def, allowed, env,
                s->apply != CONFIG_RESTART ? "reloadable on SIGHUP" : "needs a restart");
    }
    config_free(&defaults);
}

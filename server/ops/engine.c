/* engine.c (server) — the engine and the attention backend in force. */
#include "server/ops/engine.h"

#include <cblas.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/simd.h"
#include "server/config.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"

struct srv_engine {
    engine *eng;
    attn_parallel par;
    _Atomic(const attn_backend *) backend;
    char check[160];  /* the precision's start-up check, for /info */
    int metrics_slot; /* its model's metrics slot; -1: none */
};

static void log_registry(void) {
    for (size_t i = 0; i < engine_registry_count(); i++) {
        const engine_entry *en = engine_registry_get(i);
        if (en->offered)
            log_info("engine offered", LOG_KV("engine", en->name), LOG_KV("origin", en->origin),
                     LOG_KV("score", en->score));
        else
            log_warn("engine refused", LOG_KV("engine", en->name), LOG_KV("origin", en->origin),
                     LOG_KV("reason", en->reason));
    }
}

/* OpenBLAS picks its kernels from its own CPU table, which lags new CPUs
 * (Debian 12's takes an Emerald Rapids for a Prescott). Only the CPU
 * engines' fp32 GEMMs call it, and only where the AVX-512 path is not
 * active; the warning is for that case on a CPU that has AVX-512 (the path
 * lowered by ATTNSERVE_SIMD) with OpenBLAS on kernels without it. */
static bool core_has_avx512(const char *core) {
    static const char *const cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (strcasestr(core, cores[i]))
            return true;
    return false;
}

static void log_blas(const engine_iface *iface, gemm_precision p) {
    const char *core = openblas_get_corename();
    const bool runs = strncmp(iface->name, "cpu", 3) == 0 && p == GEMM_FP32 &&
                      attn_simd_active() < ATTN_SIMD_AVX512;
    if (runs && attn_simd_detect() == ATTN_SIMD_AVX512 && !core_has_avx512(core))
        log_warn("fp32 runs on OpenBLAS kernels without AVX-512 on a CPU with it (SIMD path "
                 "lowered); OPENBLAS_CORETYPE selects others (SkylakeX, or Haswell for AVX2)",
                 LOG_KV("openblas_core", core), LOG_KV("simd", attn_simd_name(attn_simd_active())));
    else
        log_info("OpenBLAS", LOG_KV("openblas_core", core),
                 LOG_KV("runs", runs ? "the fp32 GEMMs" : "nothing: the GEMMs are ours"));
}

/* ---- the start-up check of a reduced precision ---------------------------------------
 * A precision below fp32 is checked against the same engine in fp32 before
 * it serves: fixed pseudo-random token ids (four sequences, 8 to 128
 * tokens, so short and long sequences and every layer are covered) through
 * both, and the lowest cosine between their pooled vectors
 * must reach the precision's floor. The floors are the accuracy each
 * precision is accepted at (docs/engines.md): bf16 0.9999, int8 0.99, and
 * for the GPU's fp16 and tf32 0.99999: they round to 10 explicit mantissa
 * bits (unit roundoff 2^-11) where bf16 keeps 7 (2^-8), so the relative
 * error is 8x and 1 - cosine (its square) 64x below bf16's: 1.6e-6 for
 * bf16's 1e-4, and the floor leaves 6x above that. One
 * that fails is refused (a named precision stops the start; `auto` moves on
 * to the next faster-to-slower precision, fp32 last, which is the
 * reference and needs no check). */
#define CHECK_SEQS 4
static const int32_t check_lens[CHECK_SEQS] = {8, 31, 64, 128};
#define CHECK_TOKENS (8 + 31 + 64 + 128)

static double precision_floor(gemm_precision p) {
    return p == GEMM_BF16                     ? 0.9999
           : p == GEMM_INT8                   ? 0.99
           : p == GEMM_FP16 || p == GEMM_TF32 ? 0.99999
                                              : 1.0;
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

/* Runs the check sequences on cand and on a small fp32 instance of the same
 * engine, one sequence per forward and each cut to what the configuration
 * allows (max_batch_tokens, max_batch_requests and the model's positions
 * may all be below the check's sizes); returns 0 with the lowest cosine in
 * *min_cos, or -1 with why. */
static int precision_check(const engine_iface *iface, engine *cand, const srv_engine_options *o,
                           const attn_parallel *par, double *min_cos, char *why, size_t why_len) {
    const encoder_info *c = engine_model(cand);
    /* An embedder's vectors. A classifier's few logits make a poor cosine
     * (one logit has cosine ±1 whatever its error), so for a classifier the
     * first token's last hidden state is compared, what the head (fp32 in
     * every precision) reads; an engine that does not expose hidden states
     * is checked on its logits. */
    const int by_hidden = c->task == ENCODER_TASK_CLASSIFY && engine_last_hidden(cand) != NULL;
    const int C = by_hidden ? c->hidden_size : c->output_dim;
    const size_t logits = (size_t)c->output_dim;
    int32_t cap = engine_max_tokens(cand);
    cap = cap < c->max_positions ? cap : c->max_positions;
    int32_t ids[CHECK_TOKENS], cu[CHECK_SEQS + 1] = {0};
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int b = 0; b < CHECK_SEQS; b++)
        cu[b + 1] = cu[b] + (check_lens[b] < cap ? check_lens[b] : cap);
    for (int t = 0; t < cu[CHECK_SEQS]; t++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        ids[t] = (int32_t)((x * 0x2545f4914f6cdd1du) >> 33) % c->vocab_size;
    }
    const engine_options ro = {.model_dir = o->model_dir,
                               .precision = GEMM_FP32,
                               .max_tokens = check_lens[CHECK_SEQS - 1],
                               .max_seqs = 1,
                               .nthreads = tp_nthreads(o->pool),
                               .backends = o->backends,
                               .nbackends = o->nbackends,
                               .gpu_attention = o->gpu_attention};
    engine *ref = NULL;
    float *out = malloc((2 * (size_t)C + logits) * sizeof *out);
    int rc = out ? engine_create(iface, &ro, &ref, why, why_len) : ENGINE_ENOMEM;
    if (!out)
        snprintf(why, why_len, "out of memory");
    *min_cos = 1.0;
    for (int s = 0; rc == ENGINE_OK && s < CHECK_SEQS; s++) {
        const int32_t one[2] = {0, cu[s + 1] - cu[s]};
        engine_batch b = {.ids = ids + cu[s],
                          .cu_seqlens = one,
                          .batch = 1,
                          .out = by_hidden ? out + 2 * C : out};
        rc = engine_forward(cand, &b, o->backend, par, NULL, why, why_len);
        if (rc == ENGINE_OK && by_hidden)
            memcpy(out, engine_last_hidden(cand), (size_t)C * sizeof *out);
        b.out = by_hidden ? out + 2 * C : out + C;
        if (rc == ENGINE_OK)
            rc = engine_forward(ref, &b, o->backend, par, NULL, why, why_len);
        if (rc == ENGINE_OK && by_hidden)
            memcpy(out + C, engine_last_hidden(ref), (size_t)C * sizeof *out);
        if (rc == ENGINE_OK) {
            const double cs = cosine(out, out + C, C);
            *min_cos = cs < *min_cos ? cs : *min_cos;
        }
    }
    engine_destroy(ref);
    free(out);
    return rc == ENGINE_OK ? 0 : -1;
}

/* Creates iface's engine in precision p and, below fp32, checks it.
 * Returns ENGINE_OK, ENGINE_EUNSUPPORTED for a failed check (why says so),
 * or engine_create's error. */
static int create_checked(srv_engine *e, const engine_iface *iface, gemm_precision p,
                          const srv_engine_options *o, char *why, size_t why_len) {
    const engine_options eo = {.model_dir = o->model_dir,
                               .precision = p,
                               .max_tokens = o->max_tokens,
                               .max_seqs = o->max_seqs,
                               .nthreads = tp_nthreads(o->pool),
                               .backends = o->backends,
                               .nbackends = o->nbackends,
                               .gpu_attention = o->gpu_attention};
    int rc = engine_create(iface, &eo, &e->eng, why, why_len);
    if (rc != ENGINE_OK || p == GEMM_FP32) {
        snprintf(e->check, sizeof e->check, "%s", rc == ENGINE_OK ? "fp32: the reference" : "");
        return rc;
    }
    double min_cos = 0;
    if (precision_check(iface, e->eng, o, &e->par, &min_cos, why, why_len) != 0)
        rc = ENGINE_EUNSUPPORTED;
    else if (!(min_cos >= precision_floor(p))) {
        snprintf(why, why_len, "%s: lowest cosine %.6f against fp32 is below the floor %g",
                 engine_precision_name(p), min_cos, precision_floor(p));
        rc = ENGINE_EUNSUPPORTED;
    } else {
        snprintf(e->check, sizeof e->check, "%s: lowest cosine %.6f against fp32 (floor %g)",
                 engine_precision_name(p), min_cos, precision_floor(p));
        log_info("precision passed its start-up check", LOG_KV("engine", iface->name),
                 LOG_KV("precision", engine_precision_name(p)), LOG_KV("min_cosine", min_cos),
                 LOG_KV("floor", precision_floor(p)));
    }
    if (rc != ENGINE_OK) {
        engine_destroy(e->eng);
        e->eng = NULL;
    }
    return rc;
}

/* Creates iface's engine in *precision, or under `precision: auto` in the
 * fastest precision from *precision down to fp32 that passes its check
 * (*precision then says which). Returns create_checked's code for the last
 * one tried; err says why. */
static int create_precisions(srv_engine *e, const engine_iface *iface, gemm_precision *precision,
                             const srv_engine_options *o, char *err, size_t err_len) {
    /* fp16 and tf32 are tried only when named: auto falls back to the
     * precisions below the one it picked (p < *precision), and these two
     * sit above int8 in gemm_precision. */
    static const gemm_precision by_speed[] = {GEMM_INT8, GEMM_BF16, GEMM_FP32, GEMM_FP16,
                                              GEMM_TF32};
    const bool is_auto = !o->precision || strcmp(o->precision, "auto") == 0;
    int rc = ENGINE_EUNSUPPORTED;
    for (size_t i = 0; i < sizeof by_speed / sizeof by_speed[0]; i++) {
        const gemm_precision p = by_speed[i];
        if (p != *precision && !(is_auto && p < *precision))
            continue;
        if (p != *precision && engine_precision_unsupported(iface, p))
            continue;
        rc = create_checked(e, iface, p, o, err, err_len);
        if (rc == ENGINE_OK) {
            *precision = p;
            break;
        }
        log_warn("precision refused", LOG_KV("engine", iface->name),
                 LOG_KV("precision", engine_precision_name(p)),
                 LOG_KV("problem", engine_strerror(rc)), LOG_KV("reason", err));
        if (!is_auto || rc == ENGINE_ENOMEM || rc == ENGINE_EMODEL)
            break;
    }
    return rc;
}

/* ---- where plugins are found ------------------------------------------------- */

/* With plugin_dir unset the plugins are looked for where the build and an
 * install put them, relative to the running binary: make writes
 * $(BUILD)/engines/ and $(BUILD)/gpu-engines/ beside $(BUILD)/attnserve, and
 * an install under a prefix has <prefix>/bin/attnserve beside
 * <prefix>/lib/attnserve/engines/. So after `make cuda` the service offers
 * the cuda engine, or says why not, without being told where it is. */
static const struct {
    bool in_prefix; /* under the binary directory's parent, else under it */
    const char *dir;
} beside_binary[] = {{false, "engines"}, {false, "gpu-engines"}, {true, "lib/attnserve/engines"}};
#define PLUGIN_DIRS_MAX (sizeof beside_binary / sizeof beside_binary[0])

/* Every directory srv_engines_init looked in, in order; written before any
 * thread reads them. */
static char looked[PLUGIN_DIRS_MAX][4096];
static size_t nlooked;

/* The directories looked in, joined by ", ", for messages. */
static void looked_text(char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < nlooked && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", looked[i]);
}

/* The running binary's directory into dir; -1 where /proc/self/exe cannot
 * be read (no procfs). */
static int binary_dir(char *dir, size_t len) {
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    snprintf(dir, len, "%s", dirname(exe));
    return 0;
}

/* Loads dir's plugins. A directory beside the binary that does not exist
 * is passed by quietly (a build has two of the three, an install one); one
 * that exists and cannot be read is logged. */
static void scan(const char *dir, bool beside) {
    if (nlooked < PLUGIN_DIRS_MAX)
        snprintf(looked[nlooked++], sizeof looked[0], "%s", dir);
    struct stat st;
    if (beside && stat(dir, &st) != 0 && errno == ENOENT)
        return;
    char err[512];
    if (engine_registry_scan(dir, err, sizeof err) < 0)
        log_warn("cannot read a plugin directory; its plugins are not offered",
                 LOG_KV("plugin_dir", dir), LOG_KV("error", err));
}

static void scan_beside_binary(void) {
    char bin[4096], up[4096], prefix[4096], dir[4096 + 32];
    if (binary_dir(bin, sizeof bin) != 0) {
        log_warn("cannot find the binary's directory (/proc/self/exe); only built-in engines "
                 "are offered",
                 LOG_KV("error", strerror(errno)));
        return;
    }
    snprintf(up, sizeof up, "%s", bin);
    snprintf(prefix, sizeof prefix, "%s", dirname(up));
    for (size_t i = 0; i < PLUGIN_DIRS_MAX; i++) {
        snprintf(dir, sizeof dir, "%s/%s", beside_binary[i].in_prefix ? prefix : bin,
                 beside_binary[i].dir);
        scan(dir, true);
    }
    char dirs[sizeof looked];
    looked_text(dirs, sizeof dirs);
    log_info("plugin_dir unset: plugins looked for beside the binary", LOG_KV("plugin_dirs", dirs));
}

void srv_engines_init(const char *plugin_dir) {
    char err[512];
    nlooked = 0;
    engine_registry_init(NULL, err, sizeof err);
    if (!plugin_dir || !plugin_dir[0])
        scan_beside_binary();
    else if (strcmp(plugin_dir, SRV_PLUGIN_DIR_NONE) != 0)
        scan(plugin_dir, false);
    log_registry();
}

int srv_engine_create(const srv_engine_options *o, srv_engine **out) {
    char err[sizeof looked + 512]; /* an unknown engine's names where plugins were looked for */
    *out = NULL;
    const engine_iface *iface = NULL;
    gemm_precision precision = GEMM_FP32;
    const int sel = engine_select(o->engine, o->precision, &iface, &precision, err, sizeof err);
    if (sel != ENGINE_OK) {
        /* An engine not found at all: say where plugins were looked for. */
        char dirs[sizeof looked];
        looked_text(dirs, sizeof dirs);
        const size_t n = strlen(err);
        if (sel == ENGINE_EUNKNOWN)
            snprintf(err + n, sizeof err - n, "; plugins looked for in: %s",
                     nlooked ? dirs : "nowhere (plugin_dir is " SRV_PLUGIN_DIR_NONE ")");
        log_error("engine refused", LOG_KV("engine", o->engine), LOG_KV("precision", o->precision),
                  LOG_KV("reason", err), LOG_KV("model", o->model_name));
        return CONFIG_EXIT_INVALID;
    }
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) {
        log_error("out of memory");
        return 1;
    }
    e->par = tp_parallel(o->pool);
    e->metrics_slot = -1;
    atomic_store(&e->backend, o->backend);
    /* `engine: auto` moves on to the next engine when the chosen one cannot
     * load this model (a GPU engine refuses a classifier head it has no
     * kernel for): the CPU engine always can, so a model that runs here
     * never stops the start because a faster engine is present. A named
     * engine only ever tries itself. */
    const bool engine_auto = !o->engine || strcmp(o->engine, "auto") == 0;
    const engine_iface *skip[ENGINE_MAX];
    size_t nskip = 0;
    int rc;
    for (;;) {
        rc = create_precisions(e, iface, &precision, o, err, sizeof err);
        if (rc != ENGINE_EUNSUPPORTED || !engine_auto || nskip == ENGINE_MAX)
            break;
        skip[nskip++] = iface;
        char next_err[512];
        const engine_iface *next = NULL;
        if (engine_select_except(o->precision, skip, nskip, &next, &precision, next_err,
                                 sizeof next_err) != ENGINE_OK)
            break;
        log_warn("engine cannot serve this model; auto tries the next",
                 LOG_KV("engine", iface->name), LOG_KV("reason", err), LOG_KV("next", next->name),
                 LOG_KV("model", o->model_name));
        iface = next;
    }
    if (rc != ENGINE_OK) {
        log_error("cannot start the engine", LOG_KV("engine", iface->name),
                  LOG_KV("precision", o->precision), LOG_KV("problem", engine_strerror(rc)),
                  LOG_KV("error", err), LOG_KV("model", o->model_name));
        free(e);
        return rc == ENGINE_ENOMEM ? 1 : CONFIG_EXIT_INVALID;
    }
    engine_memory m;
    engine_memory_of(e->eng, &m);
    /* The summary names what the engine is, a test engine's included: the
     * start log then says when the answers are not the model's. */
    log_info("engine started", LOG_KV("engine", iface->name),
             LOG_KV("summary", engine_summary(e->eng)),
             LOG_KV("precision", engine_precision_name(precision)), LOG_KV("check", e->check),
             LOG_KV("weights_owned_bytes", m.weights_owned),
             LOG_KV("weights_mapped_bytes", m.weights_mapped),
             LOG_KV("workspace_bytes", m.workspace), LOG_KV("model", o->model_name));
    const char *detail = "", *kernel = engine_attn_kernel(e->eng, &detail);
    if (kernel)
        log_info("GPU attention kernel", LOG_KV("engine", iface->name), LOG_KV("kernel", kernel),
                 LOG_KV("setting", o->gpu_attention ? o->gpu_attention : "auto"),
                 LOG_KV("how", detail), LOG_KV("model", o->model_name));
    log_blas(iface, precision);
    *out = e;
    return 0;
}

void srv_engine_destroy(srv_engine *e) {
    if (!e)
        return;
    engine_destroy(e->eng);
    free(e);
}

const engine *srv_engine_instance(const srv_engine *e) {
    return e->eng;
}
const char *srv_engine_name(const srv_engine *e) {
    return engine_name(e->eng);
}
const char *srv_engine_precision(const srv_engine *e) {
    return engine_precision_name(engine_precision(e->eng));
}

void srv_engine_set_metrics_slot(srv_engine *e, int slot) {
    e->metrics_slot = slot;
}

const attn_backend *srv_engine_backend(const srv_engine *e) {
    return atomic_load(&e->backend);
}

typedef struct swap_arg {
    srv_engine *const *e;
    size_t n;
    const attn_backend *backend;
} swap_arg;

/* On the compute thread between two batches: every engine at once, so no
 * batch of any model runs with a backend the others have left. */
static int swap_backend(void *arg) {
    swap_arg *a = arg;
    for (size_t i = 0; i < a->n; i++)
        atomic_store(&a->e[i]->backend, a->backend);
    return SCHED_OK;
}

int srv_engine_set_backend(srv_engine *const *e, size_t n, sched *s, const attn_backend *backend) {
    swap_arg a = {e, n, backend};
    return sched_call(s, swap_backend, &a);
}

int srv_engine_forward(srv_engine *e, const engine_batch *b, const engine_hook *hook,
                       const attn_backend **ran, char *err, size_t err_len) {
    /* One read per batch: a switch lands between batches only. */
    const attn_backend *backend = atomic_load(&e->backend);
    *ran = backend;
    int rc = engine_forward(e->eng, b, backend, &e->par, hook, err, err_len);
    if (rc != ENGINE_OK)
        return rc;
    const engine_run *r = engine_last_run(e->eng);
    metrics_engine_forward(e->metrics_slot, (double)r->ns * 1e-9, r->flops);
    /* The attention time comes summed over layers; every layer has the same
     * shape and work, so each call is counted with an equal share (the
     * totals, and so GFLOP/s, are exact). */
    const int layers = engine_model(e->eng)->num_layers;
    for (int l = 0; l < layers; l++)
        metrics_kernel(backend, (double)r->stages.attention * 1e-9 / layers,
                       r->attn_flops / layers);
    return ENGINE_OK;
}

const float *srv_engine_last_hidden(const srv_engine *e) {
    return engine_last_hidden(e->eng);
}

const engine_run *srv_engine_last_run(const srv_engine *e) {
    return engine_last_run(e->eng);
}

json_t *srv_engine_info(const srv_engine *e, const char *engine_setting,
                        const char *precision_setting, const char *plugin_dir) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < engine_registry_count(); i++) {
        const engine_entry *en = engine_registry_get(i);
        json_t *precisions = json_array();
        for (int p = 0; precisions && en->offered && p < GEMM_NPRECISIONS; p++)
            if (!engine_precision_unsupported(en->iface, (gemm_precision)p) &&
                json_array_append_new(precisions,
                                      json_string(engine_precision_name((gemm_precision)p))) != 0) {
                json_decref(precisions);
                precisions = NULL;
            }
        json_t *item = precisions
                           ? json_pack("{s:s, s:s, s:b, s:i, s:s, s:o}", "name", en->name, "origin",
                                       en->origin, "offered", en->offered, "score", en->score,
                                       "reason", en->reason, "precisions", precisions)
                           : NULL;
        if (!item || json_array_append_new(list, item) != 0) {
            json_decref(list); /* a part missing: no document */
            list = NULL;
        }
    }
    json_t *dirs = list ? json_array() : NULL;
    for (size_t i = 0; dirs && i < nlooked; i++)
        if (json_array_append_new(dirs, json_string(looked[i])) != 0) {
            json_decref(dirs);
            dirs = NULL;
        }
    if (!dirs) {
        json_decref(list);
        return NULL;
    }
    engine_memory m;
    engine_memory_of(e->eng, &m);
    const char *detail = "", *kernel = engine_attn_kernel(e->eng, &detail);
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:o, s:I, s:I, s:I, s:i, s:s, s:o}", "name", srv_engine_name(e),
        "precision", srv_engine_precision(e), "engine_setting", engine_setting, "precision_setting",
        precision_setting, "plugin_dir", plugin_dir ? plugin_dir : "", "plugin_dirs_looked_in",
        dirs, "weights_owned_bytes", (json_int_t)m.weights_owned, "weights_mapped_bytes",
        (json_int_t)m.weights_mapped, "workspace_bytes", (json_int_t)m.workspace, "api_version",
        ENGINE_API_VERSION, "precision_check", e->check, "engines", list);
    if (o && (json_object_set_new(o, "summary", json_string(engine_summary(e->eng))) != 0 ||
              json_object_set_new(o, "attention_kernel",
                                  kernel ? json_string(kernel) : json_null()) != 0 ||
              json_object_set_new(o, "attention_kernel_detail", json_string(detail)) != 0)) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

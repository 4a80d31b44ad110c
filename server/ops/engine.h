/* engine.h (server) — which engine runs the encoder and which attention
 * backend runs inside it and behind /v1/attention.
 *
 * The one owner of both choices: the engine (and its precision) is fixed at
 * start from the `engine`, `precision` and `plugin_dir` settings; the
 * attention backend in force may change between batches (a reload, or
 * shadow verification's switch to a fallback), and every service reads it
 * here once per batch. Every encoder forward goes through srv_engine_forward,
 * so its metrics are kept in one place. */
#ifndef SRV_ENGINE_H
#define SRV_ENGINE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engines/engine.h"
#include "kernels/threadpool.h"
#include "server/work/scheduler.h"

typedef struct srv_engine srv_engine;

typedef struct srv_engine_options {
    const char *engine; /* the settings, as given */
    const char *precision;
    const char *plugin_dir;
    const char *gpu_attention; /* engine_options.gpu_attention */
    const char *model_dir;
    const char *model_name; /* what the log lines name the model by */
    int32_t max_tokens, max_seqs;
    tp_pool *pool;
    /* Every attention backend a batch may be run with (reload, fallback). */
    const attn_backend *const *backends;
    size_t nbackends;
    const attn_backend *backend; /* the one in force at start */
} srv_engine_options;

/* plugin_dir's value that loads no plugin at all. */
#define SRV_PLUGIN_DIR_NONE "none"

/* Scans the registry once for the process, logging every engine offered
 * or refused with the reason: the built-in engines, then plugin_dir's; with
 * plugin_dir unset ("" or NULL), those of the directories beside the binary
 * (srv_plugin_dirs); with SRV_PLUGIN_DIR_NONE, no plugin. Call before the
 * first srv_engine_create. */
void srv_engines_init(const char *plugin_dir);

/* Resolves the settings against the registry and creates the engine (the
 * model is loaded here). Returns 0 and *out, or the process exit status: 2 for a
 * setting or model the engine refuses, 1 when out of memory. */
int srv_engine_create(const srv_engine_options *opt, srv_engine **out);
void srv_engine_destroy(srv_engine *e);

const engine *srv_engine_instance(const srv_engine *e);
const char *srv_engine_name(const srv_engine *e);
const char *srv_engine_precision(const srv_engine *e); /* "fp32", "bf16", "int8" */

/* The metrics slot (metrics_add_model's) its forwards are counted in;
 * none until set. Set before serving. */
void srv_engine_set_metrics_slot(srv_engine *e, int slot);

/* The attention backend in force; safe from any thread. */
const attn_backend *srv_engine_backend(const srv_engine *e);

/* Switches the backend of engines e[0, n) between two batches, all in one
 * sched_call (so never during a batch, and every engine or none). Returns
 * SCHED_OK or the sched_call error (then no engine switched). */
int srv_engine_set_backend(srv_engine *const *e, size_t n, sched *s, const attn_backend *backend);

/* Compute thread: one encoder forward of b through engine_forward, with
 * the backend in force read once (set in *ran) and hook for shadow
 * verification (may be NULL); records the engine's and the attention
 * kernel's metrics. Returns ENGINE_OK or an ENGINE_E* code with a message. */
int srv_engine_forward(srv_engine *e, const engine_batch *b, const engine_hook *hook,
                       const attn_backend **ran, char *err, size_t err_len);
const engine_run *srv_engine_last_run(const srv_engine *e);
/* engine_last_hidden of the engine in force. */
const float *srv_engine_last_hidden(const srv_engine *e);

/* /info's "engine" object: the one in force, the settings, the plugin
 * directories looked in, the attention kernel a GPU engine runs
 * (attention_kernel, null for a CPU engine, and attention_kernel_detail:
 * how it was chosen), and every engine of the registry with its origin,
 * score and, when refused, the reason.
 * NULL when out of memory. */
json_t *srv_engine_info(const srv_engine *e, const char *engine_setting,
                        const char *precision_setting, const char *plugin_dir);

#endif

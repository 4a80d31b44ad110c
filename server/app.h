/* app.h — the running service's state: the models it serves and the
 * process-wide parts main wires together, which the operations modules
 * (info, memmodel, backend_choice, models, reload) read and change. */
#ifndef SRV_APP_H
#define SRV_APP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "model/encoder.h"
#include "model/tokenizer.h"
#include "server/api/attention_api.h"
#include "server/api/compat_api.h"
#include "server/api/embed_api.h"
#include "server/api/score_api.h"
#include "server/http/http.h"
#include "server/http/routes.h"
#include "server/ops/engine.h"
#include "server/ops/trace.h"
#include "server/ops/verify.h"
#include "server/work/batch.h"
#include "server/work/embed_service.h"
#include "server/work/membudget.h"
#include "server/work/scheduler.h"

#ifndef ATTNSERVE_VERSION
#define ATTNSERVE_VERSION "0.1.0"
#endif

/* One served model: its directory, tokenizer, engine (which owns the
 * weights), embeddings service and the API modules' state for it. Every
 * model has its own; the compute pool, the scheduler (each model is a
 * scheduler group, so a batch is one forward of one model), the HTTP server and the
 * attention backend in force are the process's. */
typedef struct served_model {
    char *name;              /* what `model` names it by */
    char *path;              /* its directory */
    char *aliases;           /* comma-separated other names */
    bool truncate;           /* the default of truncation */
    int64_t max_seq_setting; /* max_seq_length as configured; 0: the model's */
    char *engine_setting;    /* engine and precision as configured */
    char *precision_setting;
    tok_tokenizer *tok;
    encoder_desc *mdesc; /* the model directory's description, read before the engine loads it */
    const encoder_info *mcfg; /* encoder_desc_info(mdesc) */
    srv_engine *engine;       /* the engine (owns the weights) and the backend in force */
    int32_t max_seq_length;   /* where truncation cuts: the setting, or the model's */
    embed_service *embed;
    embed_api eapi;
    compat_api compat; /* TEI's, Infinity's and llama.cpp's routes */
    score_api score;   /* rerank and classification routes */
} served_model;

typedef struct app {
    pthread_mutex_t cfg_mu; /* /info reads cfg on the I/O thread while SIGHUP swaps it */
    config cfg;
    int nthreads;
    const char *simd;
    tp_pool *pool;
    /* The models, in configured order (the `models` setting, else the one
     * `model`); engine is the first's, whose backend in force is every
     * model's and /v1/attention's. */
    served_model m[CONFIG_MAX_MODELS];
    size_t nm;
    const char *model_names[CONFIG_MAX_MODELS]; /* m[i].name: the trace's model of group i */
    embed_api *eapis[CONFIG_MAX_MODELS];        /* each model's, for the modules' peers */
    compat_api *compats[CONFIG_MAX_MODELS];
    score_api *scores[CONFIG_MAX_MODELS];
    srv_engine *engine;
    attn_service *svc;
    /* The backend the setting names, resolved for the configured shapes
     * whatever its self-test said (NULL when it cannot run them); the one
     * in force differs while a fallback is active. Guarded by cfg_mu. */
    const attn_backend *configured;
    batch_runner *runner;
    sched *sched;
    http_server *http;
    attn_api api;
    routes routes; /* every module's, registered at start */
    _Atomic bool ready;
    /* ---- shadow verification, fallback and trace ---- */
    verifier *verify;
    tracer *trace;
    pthread_mutex_t backend_mu; /* one backend decision at a time: reload or verification */
    char fallback_reason[320];  /* why verification switched ("" if it has not); cfg_mu */
    /* Backends shadow verification caught giving wrong results: never
     * selected again by this process, whatever a reload asks (a reload of
     * any setting re-selects the backend, and must not bring back one known
     * to be wrong); a restart re-runs the self-test. Written under
     * backend_mu, read by select_backend, which runs under it after start. */
    const attn_backend *caught[ATTN_MAX_BACKENDS];
    size_t ncaught;
    membudget budget;     /* what requests hold (max_request_memory_bytes) */
    size_t base_bytes;    /* resident before the model was loaded */
    size_t code_bytes;    /* executable mappings: code resident at most */
    size_t threads_bytes; /* every thread's stack, whole */
} app;

#endif

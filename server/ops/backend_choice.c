/* backend_choice.c — which attention backend serves: the configured one when
 * it can run every model's shapes and passed its self-test, else the first
 * usable fallback; the switch shadow verification makes, and a reload's
 * re-selection, one decision at a time. */
#include "server/ops/backend_choice.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "server/ops/backend_selftest.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"

/* ---- choosing ------------------------------------------------------------------- */

attn_shape backend_choice_bounds(const config *c) {
    return attn_service_bounds((int32_t)c->max_batch_tokens, (int32_t)c->max_batch_requests);
}

/* Model i's attention bounds for the configured batch size. */
attn_shape backend_choice_model_bounds(const app *a, size_t i, const config *c) {
    return encoder_attn_shape(a->m[i].mcfg, (int)c->max_batch_tokens);
}

/* Whether backend can run every model's batches; why says which it
 * refuses. */
static bool runs_every_model(const app *a, const config *c, const attn_backend *backend, char *why,
                             size_t why_len) {
    for (size_t i = 0; i < a->nm; i++) {
        attn_shape model = backend_choice_model_bounds(a, i, c);
        if (attn_backend_supports(backend, &model, why, why_len) != ATTN_OK)
            return false;
    }
    return true;
}

/* Resolves a backend name for the attention endpoint's bounds and every
 * model's: the backend in force runs every batch, whichever model's. */
static int resolve_backend(const app *a, const config *c, const char *name,
                           const attn_backend **out, char *why, size_t why_len) {
    attn_shape bounds = backend_choice_bounds(c);
    if (attn_backend_select(name, &bounds, out, why, why_len) != ATTN_OK)
        return -1;
    return runs_every_model(a, c, *out, why, why_len) ? 0 : -1;
}

/* Switches every model's engine to backend in one step between batches:
 * all of them or, on an error, none. */
static int set_backend(app *a, const attn_backend *backend) {
    srv_engine *engines[CONFIG_MAX_MODELS];
    for (size_t i = 0; i < a->nm; i++)
        engines[i] = a->m[i].engine;
    return srv_engine_set_backend(engines, a->nm, a->sched, backend);
}

/* A backend that can run the configured shapes and passed its start-up
 * self-test on this machine: the only kind the service uses. */
static int select_backend(const app *a, const config *c, const char *name, const attn_backend **out,
                          char *why, size_t why_len) {
    if (resolve_backend(a, c, name, out, why, why_len) != 0)
        return -1;
    for (size_t i = 0; i < a->ncaught; i++)
        if (a->caught[i] == *out) {
            snprintf(why, why_len,
                     "backend '%s' was caught by shadow verification giving wrong results; "
                     "restart the service to self-test it again",
                     (*out)->name);
            return -1;
        }
    if (backend_passed_selftest(*out))
        return 0;
    const attn_selftest_result *r = attn_selftest_kept(*out);
    snprintf(why, why_len, "backend '%s' failed its start-up self-test: %s", (*out)->name,
             r ? r->reason : "not self-tested");
    return -1;
}

/* The configured backend as resolved, whatever its self-test said. */
const attn_backend *backend_choice_configured(const app *a, const config *c) {
    const attn_backend *b = NULL;
    char why[256];
    return resolve_backend(a, c, c->backend, &b, why, sizeof why) == 0 ? b : NULL;
}

/* The configured backend, or else the first of fallback_backends that
 * accepts the bounds and passed its self-test; NULL when none does. */
const attn_backend *backend_choice_choose(const app *a) {
    const config *c = &a->cfg;
    const attn_backend *b = NULL;
    char why[512];
    if (select_backend(a, c, c->backend, &b, why, sizeof why) == 0)
        return b;
    log_warn("configured backend refused", LOG_KV("backend", c->backend), LOG_KV("reason", why));
    char list[256];
    snprintf(list, sizeof list, "%s", c->fallback_backends ? c->fallback_backends : "");
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (select_backend(a, c, name, &b, why, sizeof why) == 0) {
            log_warn("using fallback backend", LOG_KV("backend", name));
            return b;
        }
        log_warn("fallback backend refused", LOG_KV("backend", name), LOG_KV("reason", why));
    }
    return NULL;
}

/* The built-in backends that can run every model's batches: the ones a
 * reload may select, so each model workspace holds scratch for each. */
size_t backend_choice_usable(const app *a, const attn_backend **out, size_t cap) {
    size_t n = 0;
    for (const attn_backend *const *b = attn_backends(); *b && n < cap; b++)
        if (runs_every_model(a, &a->cfg, *b, NULL, 0))
            out[n++] = *b;
    return n;
}

/* ---- shadow verification: switching to a fallback --------------------- */

/* The first of c's fallback_backends that can run the configured shapes,
 * passed its self-test on this machine and is not `failing`; NULL if none. */
static const attn_backend *next_fallback(const app *a, const config *c,
                                         const attn_backend *failing) {
    char list[256], why[256];
    snprintf(list, sizeof list, "%s", c->fallback_backends ? c->fallback_backends : "");
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const attn_backend *b = NULL;
        if (select_backend(a, c, name, &b, why, sizeof why) == 0 && b != failing &&
            backend_passed_selftest(b))
            return b;
    }
    return NULL;
}

/* The verifier's trip callback (checker thread): mismatches reached the
 * threshold within the window. Switches between batches (sched_call), so no
 * request is dropped or computed half by one backend and half by another;
 * the caught backend is never selected again by this process (see app.caught). */
bool backend_choice_on_verify_trip(const verify_evidence *ev, void *ctx) {
    app *a = ctx;
    const attn_check *c = &ev->check;
    pthread_mutex_lock(&a->backend_mu);
    const attn_backend *cur = srv_engine_backend(a->engine);
    if (ev->backend != cur) {
        log_warn("shadow verification: mismatches from a backend no longer in force; no switch",
                 LOG_KV("backend", ev->backend->name), LOG_KV("in_force", cur->name));
        pthread_mutex_unlock(&a->backend_mu);
        return false;
    }
    pthread_mutex_lock(&a->cfg_mu);
    const attn_backend *to = next_fallback(a, &a->cfg, cur);
    const int64_t window_s = a->cfg.verify_window_s;
    pthread_mutex_unlock(&a->cfg_mu);
    if (!to) {
        log_error("shadow verification: backend gives wrong results and no fallback backend is "
                  "usable; keeping it",
                  LOG_KV("backend", cur->name), LOG_KV("layer", ev->layer),
                  LOG_KV("max_error_ratio", c->max_ratio));
        pthread_mutex_unlock(&a->backend_mu);
        return false;
    }
    int rc = set_backend(a, to);
    if (rc != SCHED_OK) {
        log_error("shadow verification: cannot switch backend",
                  LOG_KV("error", sched_strerror(rc)));
        pthread_mutex_unlock(&a->backend_mu);
        return false;
    }
    metrics_set_backend(to);
    if (a->ncaught < ATTN_MAX_BACKENDS)
        a->caught[a->ncaught++] = cur;
    metrics_set_fallback_active(1);
    pthread_mutex_lock(&a->cfg_mu);
    snprintf(a->fallback_reason, sizeof a->fallback_reason,
             "shadow verification: %s (%s) exceeded the error bound %d times within %lld s "
             "(layer %d, token %d, head %d, dim %d: got %.6g, want %.6g, bound %.3g)",
             cur->name, cur->simd_path(), ev->mismatches_in_window, (long long)window_s, ev->layer,
             c->bad_token, c->bad_head, c->bad_dim, (double)c->bad_got, c->bad_want, c->bad_bound);
    pthread_mutex_unlock(&a->cfg_mu);
    log_error("SHADOW VERIFICATION FAILED: backend gives wrong results; switched to the fallback "
              "for the life of this process (a restart self-tests it again)",
              LOG_KV("backend", cur->name), LOG_KV("simd", cur->simd_path()),
              LOG_KV("to", to->name), LOG_KV("layer", ev->layer), LOG_KV("batch", ev->batch_id),
              LOG_KV("seq", c->bad_seq), LOG_KV("token", c->bad_token), LOG_KV("head", c->bad_head),
              LOG_KV("dim", c->bad_dim), LOG_KV("got", c->bad_got), LOG_KV("want", c->bad_want),
              LOG_KV("error", fabs((double)c->bad_got - c->bad_want)),
              LOG_KV("bound", c->bad_bound), LOG_KV("max_error_ratio", c->max_ratio),
              LOG_KV("mismatches", ev->mismatches_in_window), LOG_KV("window_s", window_s));
    pthread_mutex_unlock(&a->backend_mu);
    return true;
}

/* ---- reload ---------------------------------------------------------------------- */

/* A backend change takes effect between batches; a backend that refuses the
 * configured shapes, failed its start-up self-test or was caught by shadow
 * verification is refused and the one in force kept. */
static void reload_backend_locked(app *a, const config *next) {
    const attn_backend *cur = srv_engine_backend(a->engine), *want = NULL;
    char why[512];
    const attn_backend *configured = backend_choice_configured(a, next);
    pthread_mutex_lock(&a->cfg_mu);
    a->configured = configured;
    pthread_mutex_unlock(&a->cfg_mu);
    if (select_backend(a, next, next->backend, &want, why, sizeof why) != 0) {
        log_warn("backend refused on reload; keeping the one in force",
                 LOG_KV("requested", next->backend), LOG_KV("kept", cur->name),
                 LOG_KV("reason", why));
    } else if (want != cur) {
        int rc = set_backend(a, want);
        if (rc != SCHED_OK) {
            log_error("cannot switch backend", LOG_KV("error", sched_strerror(rc)));
        } else {
            metrics_set_backend(want);
            log_info("backend switched", LOG_KV("from", cur->name), LOG_KV("to", want->name),
                     LOG_KV("simd", want->simd_path()));
        }
    }
    metrics_set_fallback_active(srv_engine_backend(a->engine) != configured);
}

/* Backend decisions are serialised with verification's switch
 * (backend_mu). reload_backend_locked sets the fallback gauge: whether the
 * backend in force is the configured one. A reload that changes the backend
 * in force re-arms verification, so the new backend starts with an empty
 * mismatch window; one that changes nothing else keeps the window, so
 * frequent SIGHUPs cannot keep a bad backend from tripping. */
void backend_choice_reload(app *a, const config *next) {
    pthread_mutex_lock(&a->backend_mu);
    const attn_backend *before = srv_engine_backend(a->engine);
    reload_backend_locked(a, next);
    const attn_backend *now = srv_engine_backend(a->engine);
    if (now != before)
        verify_rearm(a->verify);
    verify_set_rate(a->verify, next->verify_sample_rate);
    verify_set_policy(a->verify, (int32_t)next->verify_mismatch_threshold, next->verify_window_s);
    trace_set_path(a->trace, next->trace_file);
    if (now == a->configured) { /* a->configured is written on this thread only */
        pthread_mutex_lock(&a->cfg_mu);
        a->fallback_reason[0] = '\0';
        pthread_mutex_unlock(&a->cfg_mu);
    }
    pthread_mutex_unlock(&a->backend_mu);
}

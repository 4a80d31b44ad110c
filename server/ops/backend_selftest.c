/* backend_selftest.c — self-testing the backends at start and from the
 * command line (see backend_selftest.h). */
#include "server/ops/backend_selftest.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gemm.h"
#include "kernels/simd.h"
#include "kernels/threadpool.h"
#include "server/api/attention_api.h"
#include "server/config.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"

attn_selftest_spec backend_selftest_spec(const encoder_info *m) {
    return (attn_selftest_spec){.heads = m->num_heads,
                                .head_dim = m->head_dim,
                                .max_seqlen = m->max_positions,
                                .rel_bias = encoder_attn_shape(m, 1).rel_bias};
}

/* Whether b can run every shape in bounds; why says which it refuses. */
static bool runs_all(const attn_backend *b, const attn_shape *bounds, size_t n, char *why,
                     size_t why_len) {
    for (size_t i = 0; i < n; i++)
        if (attn_backend_supports(b, &bounds[i], why, why_len) != ATTN_OK)
            return false;
    return true;
}

/* ---- at start ------------------------------------------------------------------------ */

static void log_result(const attn_selftest_result *r) {
    for (int i = 0; i < r->ncases; i++) {
        const attn_selftest_case *c = &r->cases[i];
        log_debug("self-test case", LOG_KV("backend", r->backend->name), LOG_KV("case", c->name),
                  LOG_KV("batch", c->shape.batch), LOG_KV("tokens", c->shape.total_tokens),
                  LOG_KV("heads", c->shape.heads), LOG_KV("head_dim", c->shape.head_dim),
                  LOG_KV("causal", c->shape.causal), LOG_KV("rows_checked", c->rows_checked),
                  LOG_KV("max_abs_error", c->check.max_abs_err),
                  LOG_KV("max_error_ratio", c->check.max_ratio), LOG_KV("ms", c->ms),
                  LOG_BOOL("passed", c->passed));
    }
    if (r->passed)
        log_info("backend passed its self-test", LOG_KV("backend", r->backend->name),
                 LOG_KV("simd", r->simd), LOG_KV("shapes", r->ncases),
                 LOG_KV("max_abs_error", r->max_abs_err), LOG_KV("mean_abs_error", r->mean_abs_err),
                 LOG_KV("max_error_ratio", r->max_ratio), LOG_KV("ms", r->ms));
    else
        log_warn("backend failed its self-test and will not be used",
                 LOG_KV("backend", r->backend->name), LOG_KV("simd", r->simd),
                 LOG_KV("shapes", r->ncases), LOG_KV("shapes_passed", r->cases_passed),
                 LOG_KV("max_abs_error", r->max_abs_err), LOG_KV("max_error_ratio", r->max_ratio),
                 LOG_KV("ms", r->ms), LOG_KV("reason", r->reason));
}

size_t backend_selftest_specs(const encoder_info *const *models, size_t n,
                              attn_selftest_spec *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const attn_selftest_spec s = backend_selftest_spec(models[i]);
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = out[j].heads == s.heads && out[j].head_dim == s.head_dim &&
                   out[j].max_seqlen == s.max_seqlen && out[j].rel_bias == s.rel_bias;
        if (!seen)
            out[k++] = s;
    }
    return k;
}

/* Runs b once per spec. What is kept is the first failed run, else the one
 * closest to its bound (so /info shows what decided), with the time of all
 * runs: b passes only when it passed for every model's shape. */
static int run_specs(const attn_backend *b, const attn_selftest_spec *specs, size_t nspecs,
                     const attn_parallel *par, attn_selftest_result *kept) {
    double ms = 0;
    for (size_t i = 0; i < nspecs; i++) {
        attn_selftest_result r;
        if (attn_selftest_run(b, &specs[i], par, &r) != 0) {
            *kept = r;
            return -1;
        }
        if (nspecs > 1)
            log_debug("self-test of one model shape", LOG_KV("backend", b->name),
                      LOG_KV("heads", specs[i].heads), LOG_KV("head_dim", specs[i].head_dim),
                      LOG_KV("max_seqlen", specs[i].max_seqlen), LOG_BOOL("passed", r.passed));
        ms += r.ms;
        if (i == 0 || (kept->passed && (!r.passed || r.max_ratio > kept->max_ratio)))
            *kept = r;
    }
    kept->ms = ms;
    return 0;
}

int backend_selftest_start(const attn_selftest_spec *specs, size_t nspecs, const attn_shape *bounds,
                           size_t nbounds, const attn_parallel *par) {
    for (const attn_backend *const *b = attn_backends(); *b; b++) {
        char why[256] = "";
        if (!runs_all(*b, bounds, nbounds, why, sizeof why)) {
            log_info("backend not self-tested: it cannot run the configured shapes",
                     LOG_KV("backend", (*b)->name), LOG_KV("reason", why));
            continue;
        }
        attn_selftest_result r;
        if (run_specs(*b, specs, nspecs, par, &r) != 0) {
            log_error("cannot run the self-test", LOG_KV("backend", (*b)->name),
                      LOG_KV("error", r.reason));
            return -1;
        }
        attn_selftest_keep(&r);
        log_result(&r);
        metrics_set_selftest(*b, r.simd, r.passed, r.max_ratio);
    }
    return 0;
}

/* JSON has no infinity: an output that was not finite shows as null. */
static json_t *number(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *backend_selftest_json(void) {
    json_t *arr = json_array();
    for (const attn_backend *const *b = attn_backends(); arr && *b; b++) {
        const attn_selftest_result *r = attn_selftest_kept(*b);
        if (!r)
            continue;
        json_t *o =
            json_pack("{s:s, s:s, s:i, s:i, s:o, s:o, s:o, s:b, s:f, s:s?}", "backend", (*b)->name,
                      "simd", r->simd, "shapes", r->ncases, "shapes_passed", r->cases_passed,
                      "max_abs_error", number(r->max_abs_err), "mean_abs_error",
                      number(r->mean_abs_err), "max_error_ratio", number(r->max_ratio), "passed",
                      r->passed, "ms", r->ms, "reason", r->passed ? NULL : r->reason);
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* ---- `attnserve selftest` ------------------------------------------------------------------ */

static void print_header(FILE *out) {
    fprintf(out, "%-10s %-9s %-7s %-14s %-15s %-10s %-6s %s\n", "backend", "simd", "shapes",
            "max_abs_error", "mean_abs_error", "max_ratio", "result", "ms");
}

static void print_row(FILE *out, const attn_selftest_result *r) {
    char shapes[16];
    snprintf(shapes, sizeof shapes, "%d/%d", r->cases_passed, r->ncases);
    fprintf(out, "%-10s %-9s %-7s %-14.3g %-15.3g %-10.3g %-6s %.1f\n", r->backend->name, r->simd,
            shapes, r->max_abs_err, r->mean_abs_err, r->max_ratio, r->passed ? "pass" : "FAIL",
            r->ms);
}

/* Whether b passed on every path it ran on; NULL (a name that does not
 * resolve for the configured shapes) never passes. */
static bool named_passed(const attn_selftest_result *rows, size_t n, const attn_backend *b) {
    size_t runs = 0;
    for (size_t i = 0; b && i < n; i++)
        if (rows[i].backend == b) {
            if (!rows[i].passed)
                return false;
            runs++;
        }
    return runs > 0;
}

/* The backend a name resolves to for the configured shapes, as serving
 * resolves it (auto: by the endpoint's bounds, then checked on the model's). */
static const attn_backend *resolve(const char *name, const attn_shape *bounds, size_t nbounds) {
    const attn_backend *b = NULL;
    if (attn_backend_select(name, &bounds[0], &b, NULL, 0) != ATTN_OK)
        return NULL;
    return runs_all(b, bounds, nbounds, NULL, 0) ? b : NULL;
}

/* Prints the verdict for one name from the configuration; returns whether
 * it passed. */
static bool verdict(FILE *out, const char *name, const attn_selftest_result *rows, size_t n,
                    const attn_shape *bounds, size_t nbounds) {
    const attn_backend *b = resolve(name, bounds, nbounds);
    const bool ok = named_passed(rows, n, b);
    if (!b)
        fprintf(out, "  %s: FAIL (cannot run the configured shapes)\n", name);
    else if (strcmp(name, b->name) != 0)
        fprintf(out, "  %s (%s): %s\n", name, b->name, ok ? "pass" : "FAIL");
    else
        fprintf(out, "  %s: %s\n", name, ok ? "pass" : "FAIL");
    return ok;
}

/* One model the settings serve, as the command tests it. */
typedef struct command_model {
    const char *name; /* its name under `models`, else its directory */
    const char *path;
    const char *engine; /* the settings it is served with */
    const char *precision;
    attn_selftest_spec spec;
} command_model;

/* The models the settings serve, as start-up reads them: the `models`
 * list (entries leaving engine or precision to the process-wide settings
 * get those), else the one `model`. Reads each one's config.json for its
 * spec and adds its attention bounds to bounds (after the endpoint's).
 * Returns 0, or the exit status with the reason on stderr. */
static int read_models(const config *c, config_model *list, command_model *out, size_t *n,
                       attn_shape *bounds) {
    char err[512];
    size_t nl = 0;
    if (c->models[0] &&
        config_models_parse(c->models, list, CONFIG_MAX_MODELS, &nl, err, sizeof err) != 0) {
        fprintf(stderr, "attnserve selftest: setting \"models\" is invalid: %s\n", err);
        return CONFIG_EXIT_INVALID;
    }
    *n = nl ? nl : 1;
    for (size_t i = 0; i < *n; i++) {
        const config_model *l = nl ? &list[i] : NULL;
        command_model *m = &out[i];
        m->name = l ? l->name : c->model;
        m->path = l ? l->path : c->model;
        m->engine = l && l->engine[0] ? l->engine : c->engine;
        m->precision = l && l->precision[0] ? l->precision : c->precision;
        encoder_desc *desc = NULL;
        if (encoder_describe(m->path, &desc, err, sizeof err) != BERT_OK) {
            fprintf(stderr, "attnserve selftest: cannot read the model in %s: %s\n", m->path, err);
            return CONFIG_EXIT_INVALID;
        }
        const encoder_info *info = encoder_desc_info(desc);
        m->spec = backend_selftest_spec(info);
        bounds[1 + i] = encoder_attn_shape(info, (int)c->max_batch_tokens);
        encoder_desc_free(desc);
    }
    return 0;
}

/* Runs every backend that can run bounds on every SIMD path for m's spec,
 * printing a row each into rows[0, *n). Returns 0, or 1 when out of
 * memory. */
static int run_model(FILE *out, const command_model *m, const attn_shape *bounds, size_t nbounds,
                     const attn_parallel *par, attn_selftest_result *rows, size_t *n) {
    *n = 0;
    for (int path = ATTN_SIMD_PORTABLE; path <= (int)attn_simd_detect(); path++) {
        attn_simd_force((attn_simd)path);
        for (const attn_backend *const *b = attn_backends(); *b; b++) {
            if (!runs_all(*b, bounds, nbounds, NULL, 0))
                continue;
            /* A backend with one path (naive) gives the same row on every
             * path: run it once. */
            bool seen = false;
            for (size_t i = 0; i < *n; i++)
                seen |= rows[i].backend == *b && strcmp(rows[i].simd, (*b)->simd_path()) == 0;
            if (seen)
                continue;
            if (attn_selftest_run(*b, &m->spec, par, &rows[*n]) != 0) {
                fprintf(stderr, "attnserve selftest: %s: %s: %s\n", m->name, (*b)->name,
                        rows[*n].reason);
                attn_simd_unforce();
                return 1;
            }
            print_row(out, &rows[(*n)++]);
            fflush(out);
        }
    }
    attn_simd_unforce();
    return 0;
}

/* Prints model m's failures and the verdict on each backend the
 * configuration names; returns whether every one of those passed. */
static bool model_verdict(FILE *out, const config *c, const attn_selftest_result *rows, size_t n,
                          const attn_shape *bounds, size_t nbounds) {
    bool any_failed = false;
    for (size_t i = 0; i < n; i++)
        if (!rows[i].passed) {
            if (!any_failed)
                fprintf(out, "\nfailures (the worst element of each):\n");
            any_failed = true;
            fprintf(out, "  %s/%s: %s\n", rows[i].backend->name, rows[i].simd, rows[i].reason);
        }
    fprintf(out, "\nbackends the configuration names (backend, then fallback_backends):\n");
    bool ok = verdict(out, c->backend, rows, n, bounds, nbounds);
    char list[256];
    snprintf(list, sizeof list, "%s", c->fallback_backends ? c->fallback_backends : "");
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save))
        ok &= verdict(out, name, rows, n, bounds, nbounds);
    return ok;
}

static double wall_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The GEMMs of every precision this binary has, on every SIMD path the CPU
 * has, each element against gemm_error_bound (gemm_selftest: the encoder's
 * shapes and odd ones, no weights needed). The service checks a reduced
 * precision at start on the model itself (its cosine against fp32); this is
 * the kernels' own bound, which a cosine floor cannot see. int8 has no
 * element bound of this kind (its error depends on the activations' range),
 * so only its start-up check covers it. A precision the CPU cannot run is
 * listed with the reason and is no failure. Returns whether every check
 * that ran passed. */
static bool run_gemms(FILE *out, const attn_parallel *par, int nthreads) {
    fprintf(out,
            "\nGEMM self-test of each precision (every element against gemm_error_bound) on %d "
            "threads:\n%-9s %-9s %-10s %-6s %s\n",
            nthreads, "precision", "simd", "max_ratio", "result", "ms");
    bool ok = true;
    for (int p = 0; p < GEMM_NPRECISIONS; p++) {
        const gemm_precision prec = (gemm_precision)p;
        if (gemm_precision_gpu_only(prec)) {
            fprintf(out, "%-9s not a CPU precision: %s\n", gemm_precision_name(prec),
                    gemm_unsupported(prec));
            continue;
        }
        if (gemm_error_bound(prec, 1, 1.0, 1.0) < 0) {
            fprintf(out,
                    "%-9s not checked here: no element bound (checked at start against fp32)\n",
                    gemm_precision_name(prec));
            continue;
        }
        int ran = 0;
        char why[256] = "";
        for (int path = ATTN_SIMD_PORTABLE; path <= (int)attn_simd_detect(); path++) {
            attn_simd_force((attn_simd)path);
            if (gemm_unsupported(prec)) {
                snprintf(why, sizeof why, "%s", gemm_unsupported(prec));
                continue;
            }
            double worst = 0;
            const double t0 = wall_ms();
            const int rc = gemm_selftest(prec, par, &worst, why, sizeof why);
            const double ms = wall_ms() - t0;
            fprintf(out, "%-9s %-9s %-10.3g %-6s %.1f\n", gemm_precision_name(prec),
                    attn_simd_name((attn_simd)path), worst, rc == 0 ? "pass" : "FAIL", ms);
            if (rc != 0) {
                fprintf(out, "  %s/%s: %s\n", gemm_precision_name(prec),
                        attn_simd_name((attn_simd)path), why);
                ok = false;
            }
            ran++;
            fflush(out);
        }
        attn_simd_unforce();
        if (!ran)
            fprintf(out, "%-9s not offered on this CPU: %s\n", gemm_precision_name(prec), why);
    }
    return ok;
}

/* As start-up: the bounds are the attention endpoint's and every model's
 * (the backend in force runs every model's batches), and each backend is
 * run on each model's spec; a model fails when a backend the configuration
 * names failed on it. */
static int run_command(const config *c, FILE *out) {
    config_model list[CONFIG_MAX_MODELS];
    command_model models[CONFIG_MAX_MODELS];
    attn_shape bounds[1 + CONFIG_MAX_MODELS] = {
        attn_service_bounds((int32_t)c->max_batch_tokens, (int32_t)c->max_batch_requests)};
    size_t nm = 0;
    int rc = read_models(c, list, models, &nm, bounds);
    if (rc != 0)
        return rc;
    const size_t nbounds = 1 + nm;
    const int nthreads = config_pool_threads(c);
    tp_pool *pool = tp_create(nthreads);
    /* At most one row per backend and SIMD path. */
    attn_selftest_result *rows =
        calloc((size_t)ATTN_MAX_BACKENDS * (ATTN_SIMD_AVX512 + 1), sizeof *rows);
    if (!pool || !rows) {
        fprintf(stderr, "attnserve selftest: out of memory or threads\n");
        tp_destroy(pool);
        free(rows);
        return 1;
    }
    const attn_parallel par = tp_parallel(pool);
    const char *failed[CONFIG_MAX_MODELS];
    size_t nfailed = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) {
        const command_model *m = &models[i];
        fprintf(out, "%sself-test of model %s (", i ? "\n\n" : "", m->name);
        if (m->path != m->name)
            fprintf(out, "%s; ", m->path);
        fprintf(out,
                "engine %s, precision %s; %d heads of %d, inputs up to %d tokens) on %d threads; "
                "CPU SIMD %s\n\n",
                m->engine, m->precision, m->spec.heads, m->spec.head_dim, m->spec.max_seqlen,
                nthreads, attn_simd_name(attn_simd_detect()));
        print_header(out);
        size_t n = 0;
        rc = run_model(out, m, bounds, nbounds, &par, rows, &n);
        if (rc == 0 && !model_verdict(out, c, rows, n, bounds, nbounds))
            failed[nfailed++] = m->name;
    }
    fprintf(out, "\n");
    for (const attn_backend *const *b = attn_backends(); rc == 0 && *b; b++) {
        char why[256] = "";
        if (!runs_all(*b, bounds, nbounds, why, sizeof why))
            fprintf(out, "%-10s cannot run the configured shapes: %s\n", (*b)->name, why);
    }
    if (rc == 0 && nm > 1) {
        fprintf(out, "models: %zu of %zu passed", nm - nfailed, nm);
        for (size_t i = 0; i < nfailed; i++)
            fprintf(out, "%s%s", i ? ", " : "; failed: ", failed[i]);
        fprintf(out, "\n");
    }
    const bool gemms_ok = rc == 0 && run_gemms(out, &par, nthreads);
    tp_destroy(pool);
    free(rows);
    if (rc != 0)
        return rc;
    return nfailed == 0 && gemms_ok ? 0 : 1;
}

int backend_selftest_command(const char *prog, const char *version, int argc, char **argv,
                             FILE *out) {
    config cfg;
    config_action action;
    char err[512];
    if (config_load(&cfg, argc, argv, &action, err, sizeof err) != 0) {
        fprintf(stderr, "%s selftest: %s\n", prog, err);
        return CONFIG_EXIT_INVALID;
    }
    int rc = 0;
    if (action == CONFIG_HELP)
        config_print_help(out, prog);
    else if (action == CONFIG_PRINT)
        rc = config_print(&cfg, out) == 0 ? 0 : 1;
    else if (action == CONFIG_VERSION)
        fprintf(out, "attnserve %s\n", version);
    else {
        log_configure(cfg.log_level, cfg.log_format);
        rc = run_command(&cfg, out);
    }
    config_free(&cfg);
    return rc;
}

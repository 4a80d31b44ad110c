/* registry.c — the engines of this process: built-in ones, then plugins
 * loaded from a directory, each offered or refused with its reason; and the
 * `engine` / `precision` settings resolved against them. */
#include "engine.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const engine_iface *const builtin[] = {&engine_cpu};

/* Written only before threads use engines (engine_registry_init, _load),
 * read-only after. */
static engine_entry entries[ENGINE_MAX];
static size_t n_entries;

static const char *const precision_names[GEMM_NPRECISIONS] = {"fp32", "bf16", "int8", "fp16",
                                                              "tf32"};

const char *engine_precision_name(gemm_precision p) {
    return (int)p >= 0 && p < GEMM_NPRECISIONS ? precision_names[p] : "unknown";
}

int engine_precision_parse(const char *name) {
    for (int p = 0; name && p < GEMM_NPRECISIONS; p++)
        if (strcmp(name, precision_names[p]) == 0)
            return p;
    return -1;
}

size_t engine_registry_count(void) {
    return n_entries;
}

const engine_entry *engine_registry_get(size_t i) {
    return i < n_entries ? &entries[i] : NULL;
}

const engine_entry *engine_registry_find(const char *name) {
    for (size_t i = 0; name && i < n_entries; i++)
        if (strcmp(entries[i].name, name) == 0)
            return &entries[i];
    return NULL;
}

static bool table_complete(const engine_iface *t) {
    return t->name && t->name[0] && t->score && t->init && t->free && t->model && t->forward;
}

/* Fills e from table t (origin already set): refused for an incomplete
 * table, a bad or taken name, or a score of 0; offered otherwise. */
static void admit(engine_entry *e, const engine_iface *t) {
    e->iface = t;
    if (!table_complete(t)) {
        snprintf(e->reason, sizeof e->reason,
                 "incomplete engine table (name, score, init, free, model and forward are "
                 "required)");
        return;
    }
    if (strlen(t->name) >= sizeof e->name || strcmp(t->name, "auto") == 0 || strchr(t->name, ',') ||
        strchr(t->name, ' ')) {
        snprintf(e->reason, sizeof e->reason, "unusable engine name '%.40s'", t->name);
        return;
    }
    const engine_entry *taken = engine_registry_find(t->name);
    snprintf(e->name, sizeof e->name, "%s", t->name);
    if (taken && taken != e) {
        snprintf(e->reason, sizeof e->reason, "name '%s' already taken by %.180s", t->name,
                 taken->origin);
        return;
    }
    char why[200] = "";
    e->score = t->score(why, sizeof why);
    if (e->score <= 0) {
        e->score = 0;
        snprintf(e->reason, sizeof e->reason, "scores 0 on this machine: %s",
                 why[0] ? why : "no reason given");
        return;
    }
    e->offered = true;
    e->reason[0] = '\0';
}

static engine_entry *append(const char *name, const char *origin) {
    if (n_entries == ENGINE_MAX)
        return NULL;
    engine_entry *e = &entries[n_entries++];
    *e = (engine_entry){0};
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->origin, sizeof e->origin, "%s", origin);
    return e;
}

/* The name a plugin is listed under until its table is read: the file's
 * name without directory and ".so". */
static void file_stem(const char *path, char *out, size_t len) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, len, "%s", base);
    size_t n = strlen(out);
    if (n > 3 && strcmp(out + n - 3, ".so") == 0)
        out[n - 3] = '\0';
}

static engine_entry overflow = {.name = "?", .reason = "too many engines"};

const engine_entry *engine_registry_load(const char *path) {
    char stem[32];
    file_stem(path, stem, sizeof stem);
    engine_entry *e = append(stem, path);
    if (!e)
        return &overflow;
    /* RTLD_LOCAL: a plugin's own symbols never stand in for the core's.
     * The handle is never closed: an offered plugin's table lives in it, and
     * a refused one costs only its mapping. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(e->reason, sizeof e->reason, "cannot load: %s", why ? why : "dlopen failed");
        return e;
    }
    const engine_plugin *p = dlsym(h, ENGINE_PLUGIN_SYMBOL);
    if (!p) {
        snprintf(e->reason, sizeof e->reason, "no symbol %s: not an attnserve engine plugin",
                 ENGINE_PLUGIN_SYMBOL);
        return e;
    }
    if (p->api_version != ENGINE_API_VERSION) {
        snprintf(e->reason, sizeof e->reason,
                 "built for engine API version %u, this binary speaks version %d",
                 (unsigned)p->api_version, ENGINE_API_VERSION);
        return e;
    }
    if (!p->iface) {
        snprintf(e->reason, sizeof e->reason, "descriptor without an engine table");
        return e;
    }
    admit(e, p->iface);
    return e;
}

static int so_filter(const struct dirent *d) {
    size_t n = strlen(d->d_name);
    return d->d_name[0] != '.' && n > 3 && strcmp(d->d_name + n - 3, ".so") == 0;
}

int engine_registry_scan(const char *dir, char *err, size_t err_len) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, so_filter, alphasort);
    if (n < 0) {
        if (err && err_len)
            snprintf(err, err_len, "cannot read plugin directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name) < (int)sizeof path)
            engine_registry_load(path);
        free(list[i]);
    }
    free(list);
    return n;
}

int engine_registry_init(const char *plugin_dir, char *err, size_t err_len) {
    n_entries = 0;
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        admit(append(builtin[i]->name, "built-in"), builtin[i]);
    if (plugin_dir && plugin_dir[0] && engine_registry_scan(plugin_dir, err, err_len) < 0)
        return -1;
    return (int)n_entries;
}

void engine_names(char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n_entries && n < len; i++)
        if (entries[i].offered)
            n += (size_t)snprintf(buf + n, len - n, "%s, ", entries[i].name);
    if (n < len)
        snprintf(buf + n, len - n, "auto");
}

/* Fastest first: what `precision: auto` tries in order. */
static const gemm_precision by_speed[] = {GEMM_INT8, GEMM_BF16, GEMM_FP32};

static int pick_precision(const engine_iface *t, const char *precision, gemm_precision *out,
                          char *err, size_t err_len) {
    if (strcmp(precision, "auto") == 0) {
        for (size_t i = 0; i < sizeof by_speed / sizeof by_speed[0]; i++)
            if (!engine_precision_unsupported(t, by_speed[i])) {
                *out = by_speed[i];
                return ENGINE_OK;
            }
        snprintf(err, err_len, "engine '%s' runs no precision on this machine", t->name);
        return ENGINE_EUNSUPPORTED;
    }
    int p = engine_precision_parse(precision);
    if (p < 0) {
        snprintf(err, err_len, "unknown precision '%s' (valid: fp32, bf16, int8, fp16, tf32, auto)",
                 precision);
        return ENGINE_EINVAL;
    }
    const char *why = engine_precision_unsupported(t, (gemm_precision)p);
    if (why) {
        snprintf(err, err_len, "engine '%s' cannot run %s: %s", t->name, precision, why);
        return ENGINE_EUNSUPPORTED;
    }
    *out = (gemm_precision)p;
    return ENGINE_OK;
}

static bool tried(const engine_iface *t, const engine_iface *const *skip, size_t nskip) {
    for (size_t i = 0; i < nskip; i++)
        if (skip[i] == t)
            return true;
    return false;
}

int engine_select_except(const char *precision, const engine_iface *const *skip, size_t nskip,
                         const engine_iface **out, gemm_precision *out_precision, char *err,
                         size_t err_len) {
    *out = NULL;
    if (!precision)
        precision = "auto";
    /* The highest score that runs the precision asked; ties keep list
     * order (built-in first). */
    const engine_entry *best = NULL;
    gemm_precision best_p = GEMM_FP32;
    char why[256] = "no engine is offered";
    for (size_t i = 0; i < n_entries; i++) {
        gemm_precision p;
        if (!entries[i].offered || tried(entries[i].iface, skip, nskip) ||
            pick_precision(entries[i].iface, precision, &p, why, sizeof why) != ENGINE_OK)
            continue;
        if (!best || entries[i].score > best->score) {
            best = &entries[i];
            best_p = p;
        }
    }
    if (!best) {
        snprintf(err, err_len, "engine auto: no offered engine runs precision %s (%s)", precision,
                 why);
        return ENGINE_EUNSUPPORTED;
    }
    *out = best->iface;
    *out_precision = best_p;
    return ENGINE_OK;
}

int engine_select(const char *name, const char *precision, const engine_iface **out,
                  gemm_precision *out_precision, char *err, size_t err_len) {
    *out = NULL;
    if (!precision)
        precision = "auto";
    if (!name || strcmp(name, "auto") == 0)
        return engine_select_except(precision, NULL, 0, out, out_precision, err, err_len);
    const engine_entry *e = engine_registry_find(name);
    if (!e) {
        char names[512];
        engine_names(names, sizeof names);
        snprintf(err, err_len, "unknown engine '%s' (valid: %s)", name, names);
        return ENGINE_EUNKNOWN;
    }
    if (!e->offered) {
        snprintf(err, err_len, "engine '%s' (%s) is not offered: %s", name, e->origin, e->reason);
        return ENGINE_EUNSUPPORTED;
    }
    int rc = pick_precision(e->iface, precision, out_precision, err, err_len);
    if (rc == ENGINE_OK)
        *out = e->iface;
    return rc;
}

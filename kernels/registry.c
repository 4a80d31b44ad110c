/* registry.c — backends by name, and the `auto` choice. */
#include "attention.h"
#include "backends.h"

#include <stdio.h>
#include <string.h>

/* Built-in backends first; attn_backend_register appends. Written only
 * before threads start, read-only after. */
static const attn_backend *all[ATTN_MAX_BACKENDS + 1] = {
    &attn_backend_naive,
    &attn_backend_fused,
    &attn_backend_bf16,
    NULL,
};
static size_t n_all = 3;
static char names[ATTN_MAX_BACKENDS * 32 + 8] = "naive, fused, bf16, auto";

const attn_backend *const *attn_backends(void) {
    return all;
}

const attn_backend *attn_backend_find(const char *name) {
    for (const attn_backend *const *b = all; name && *b; b++)
        if (strcmp((*b)->name, name) == 0)
            return *b;
    return NULL;
}

const char *attn_backend_names(void) {
    return names;
}

int attn_backend_register(const attn_backend *b) {
    if (!b || !b->name || !b->name[0] || strlen(b->name) > 24 || strcmp(b->name, "auto") == 0 ||
        strchr(b->name, ',') || !b->supports || !b->workspace_size || !b->forward ||
        !b->simd_path || attn_backend_find(b->name) || n_all == ATTN_MAX_BACKENDS)
        return ATTN_EINVAL;
    all[n_all++] = b;
    all[n_all] = NULL;
    size_t n = 0;
    for (size_t i = 0; i < n_all; i++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s, ", all[i]->name);
    snprintf(names + n, sizeof names - n, "auto");
    return ATTN_OK;
}

static void set_err(char *err, size_t err_len, const char *msg) {
    if (err && err_len)
        snprintf(err, err_len, "%s", msg);
}

int attn_backend_select(const char *name, const attn_shape *shape, const attn_backend **out,
                        char *err, size_t err_len) {
    char why[256];
    *out = NULL;
    if (name && strcmp(name, "auto") == 0) {
        const attn_backend *best = NULL;
        for (const attn_backend *const *b = all; *b; b++)
            if (attn_backend_supports(*b, shape, NULL, 0) == ATTN_OK &&
                (!best || (*b)->speed_rank > best->speed_rank))
                best = *b;
        if (!best) {
            set_err(err, err_len, "auto: no backend supports this shape");
            return ATTN_EUNSUPPORTED;
        }
        *out = best;
        return ATTN_OK;
    }
    const attn_backend *b = attn_backend_find(name);
    if (!b) {
        if (err && err_len)
            snprintf(err, err_len, "unknown attention backend '%s' (valid: %s)",
                     name ? name : "(null)", attn_backend_names());
        return ATTN_EUNKNOWN;
    }
    if (attn_backend_supports(b, shape, why, sizeof why) != ATTN_OK) {
        if (err && err_len)
            snprintf(err, err_len, "backend '%s' cannot run this shape: %s", b->name, why);
        return ATTN_EUNSUPPORTED;
    }
    *out = b;
    return ATTN_OK;
}

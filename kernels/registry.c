/* registry.c — backends by name, and the `auto` choice. */
#include "attention.h"
#include "backends.h"

#include <stdio.h>
#include <string.h>

static const attn_backend *const builtin[] = {
    &attn_backend_naive,
    &attn_backend_fused,
    NULL,
};

const attn_backend *const *attn_backends(void) { return builtin; }

const attn_backend *attn_backend_find(const char *name) {
    for (const attn_backend *const *b = builtin; name && *b; b++)
        if (strcmp((*b)->name, name) == 0)
            return *b;
    return NULL;
}

const char *attn_backend_names(void) { return "naive, fused, auto"; }

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
        for (const attn_backend *const *b = builtin; *b; b++)
            if ((*b)->supports(shape, NULL, 0) == ATTN_OK &&
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
    if (b->supports(shape, why, sizeof why) != ATTN_OK) {
        if (err && err_len)
            snprintf(err, err_len, "backend '%s' cannot run this shape: %s", b->name, why);
        return ATTN_EUNSUPPORTED;
    }
    *out = b;
    return ATTN_OK;
}

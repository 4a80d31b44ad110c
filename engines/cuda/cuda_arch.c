/* cuda_arch.c — which model directories the CUDA engine refuses by their
 * config.json (see cuda_plan.h); apart from cuda_plan.c because it needs
 * jansson, which the GPU checks do not. */
#include "cuda_plan.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int cuda_refuse_architecture(const char *dir, char *why, size_t why_len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return 0;
    json_t *j = json_load_file(path, 0, NULL);
    if (!j)
        return 0;
    int rc = 0;
    json_t *arch = json_object_get(j, "architectures");
    for (size_t i = 0; json_is_array(arch) && i < json_array_size(arch); i++) {
        const char *a = json_string_value(json_array_get(arch, i));
        if (!a || !strstr(a, "For") || ends_with(a, "ForMaskedLM"))
            continue;
        snprintf(why, why_len,
                 "%s/config.json names architecture %.80s: the cuda engine computes embeddings "
                 "only, not a task head",
                 dir, a);
        rc = -1;
        break;
    }
    json_decref(j);
    return rc;
}

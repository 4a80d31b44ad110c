/* models.h — the served models' start-up: the settings turned into
 * app.m[0, nm), each model's directory checked before anything heavy is
 * loaded, then its engine, embeddings service and API state started and its
 * routes registered; models_free undoes all of it. */
#ifndef SRV_MODELS_H
#define SRV_MODELS_H

#include <stddef.h>

#include "kernels/attention.h"
#include "server/app.h"

/* Fills a->m and a->nm from the `models` setting, or else the one `model`,
 * with copies (a reload replaces cfg's strings). Returns 0, 1 when out of
 * memory, or CONFIG_EXIT_INVALID with the reason logged. */
int models_configure(app *a);

/* Reads sm's tokenizer and shapes and checks the settings against them; the
 * weights' header is checked, the weights are not loaded. Returns 0, 1 when
 * out of memory, or CONFIG_EXIT_INVALID with the reason logged. */
int models_load(const config *c, served_model *sm);

/* Starts sm with backend in force: its engine (which loads the weights,
 * with workspace for each of usable[0, nusable)), embeddings service, API
 * state and metrics slot. Returns 0, or the exit status with the reason
 * logged. */
int models_start(app *a, served_model *sm, const attn_backend *backend,
                 const attn_backend *const *usable, size_t nusable);

/* Registers each model's kinds with a->runner and every route once (routes
 * without a model field go to the first model of their task). Returns 0 or
 * -1. */
int models_register(app *a);

/* Frees every model's parts; safe on models only partly started. */
void models_free(app *a);

#endif

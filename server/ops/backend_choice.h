/* backend_choice.h — the attention backend policy: the service only ever
 * runs a backend that can run every model's shapes and passed its start-up
 * self-test; the configured one, else the first such of fallback_backends.
 * Shadow verification's switch and a reload's re-selection go through here,
 * serialised by app.backend_mu, and a backend caught giving wrong results is
 * never selected again by this process. */
#ifndef SRV_BACKEND_CHOICE_H
#define SRV_BACKEND_CHOICE_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/attention.h"
#include "server/app.h"
#include "server/ops/verify.h"

/* The attention endpoint's bounds for the configured batch size. */
attn_shape backend_choice_bounds(const config *c);

/* Model i's attention bounds for the configured batch size. */
attn_shape backend_choice_model_bounds(const app *a, size_t i, const config *c);

/* The backend to start with: the configured one, else the first usable
 * fallback (each refusal logged); NULL when none is usable. */
const attn_backend *backend_choice_choose(const app *a);

/* The backend c names, resolved for the configured shapes whatever its
 * self-test said; NULL when it cannot run them. */
const attn_backend *backend_choice_configured(const app *a, const config *c);

/* The built-in backends that can run every model's batches, into out (room
 * for cap); returns how many. */
size_t backend_choice_usable(const app *a, const attn_backend **out, size_t cap);

/* The verifier's trip callback (verify_options.trip, ctx the app): switches
 * to the next usable fallback between batches; returns whether it did. */
bool backend_choice_on_verify_trip(const verify_evidence *ev, void *ctx);

/* Applies next's backend, fallback_backends, verification and trace
 * settings: re-selects the backend (a refused one is logged and the one in
 * force kept) and hands the verifier and the trace their new settings. */
void backend_choice_reload(app *a, const config *next);

#endif

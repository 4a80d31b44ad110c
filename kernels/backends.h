/* backends.h — the backend tables built into this binary (internal to
 * kernels/: the rest of the service finds backends through the registry). */
#ifndef ATTN_BACKENDS_H
#define ATTN_BACKENDS_H

#include "attention.h"

extern const attn_backend attn_backend_naive;
extern const attn_backend attn_backend_fused;
extern const attn_backend attn_backend_bf16;

#endif

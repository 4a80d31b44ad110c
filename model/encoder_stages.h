/* encoder_stages.h — the per-stage times of one forward, which every
 * encoder family records and engines hand over through the plugin
 * interface: a header of its own, so that a family (bert.h) and the
 * encoder interface (encoder.h) share it without including each other. */
#ifndef ATTN_ENCODER_STAGES_H
#define ATTN_ENCODER_STAGES_H

#include <stdint.h>

/* Wall time of each stage of the last forward, summed over layers, and the
 * attention FLOPs it ran (attn_flops over all layers): for the trace and
 * the kernel metrics. The attention tap's own time counts in none of them.
 * Engines hand it over through the plugin interface, which is why it lives
 * here and not with a family. */
typedef struct encoder_stage_ns {
    uint64_t embeddings; /* lookup and LayerNorm */
    uint64_t qkv;        /* the fused QKV GEMM */
    uint64_t attention;  /* the backend's forward */
    uint64_t out_proj;   /* attention output projection, residual and LayerNorm */
    uint64_t ffn;        /* both FFN GEMMs with GELU, residual and LayerNorm */
    uint64_t norms;      /* residual LayerNorms run apart from a GEMM: none today,
                            they are fused into the two GEMMs above */
    uint64_t pooling;
    double attn_flops;
} encoder_stage_ns;

#endif

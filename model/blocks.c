/* blocks.c — the norm and gated-MLP building blocks (blocks.h). */
#include "blocks.h"

#include <math.h>

#include "kernels/gelu.h"
#include "kernels/gemm.h"

void enc_norm_row(enc_norm kind, float *y, const float *x, const float *w, const float *b, int n,
                  float eps) {
    if (kind == ENC_NORM_LAYER) {
        gemm_layernorm_row(y, x, w, b, n, eps);
        return;
    }
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    /* transformers: x · rsqrt(mean(x²) + eps) in float32, then · w (Qwen3)
     * or · (1 + w) (Gemma, whose weights start at zero). */
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    if (kind == ENC_NORM_RMS_GEMMA)
        for (int i = 0; i < n; i++)
            y[i] = x[i] * r * (1.0f + w[i]);
    else
        for (int i = 0; i < n; i++)
            y[i] = x[i] * r * w[i];
}

int enc_mlp_gated(enc_mlp kind) {
    return kind != ENC_MLP_GELU;
}

/* gelu_pytorch_tanh: x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))). */
static float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* √(2/π) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static float silu(float x) {
    return x / (1.0f + expf(-x));
}

void enc_glu_rows(enc_mlp kind, float *h, size_t rows, int F, size_t ld) {
    /* The erf GELU is the vectorised one BERT's epilogue runs. */
    if (kind == ENC_MLP_GEGLU)
        bert_gelu(h, rows, (size_t)F, ld);
    for (size_t r = 0; r < rows; r++) {
        float *a = h + r * ld;
        const float *g = a + F;
        if (kind == ENC_MLP_GEGLU)
            for (int i = 0; i < F; i++)
                a[i] *= g[i];
        else if (kind == ENC_MLP_GEGLU_TANH)
            for (int i = 0; i < F; i++)
                a[i] = gelu_tanh(a[i]) * g[i];
        else if (kind == ENC_MLP_SWIGLU)
            for (int i = 0; i < F; i++)
                a[i] = silu(a[i]) * g[i];
    }
}

const char *enc_norm_name(enc_norm kind) {
    switch (kind) {
    case ENC_NORM_LAYER:
        return "layernorm";
    case ENC_NORM_RMS:
        return "rmsnorm";
    case ENC_NORM_RMS_GEMMA:
        return "gemma rmsnorm";
    }
    return "?";
}

const char *enc_mlp_name(enc_mlp kind) {
    switch (kind) {
    case ENC_MLP_GELU:
        return "gelu";
    case ENC_MLP_GEGLU:
        return "geglu";
    case ENC_MLP_GEGLU_TANH:
        return "geglu (tanh)";
    case ENC_MLP_SWIGLU:
        return "swiglu";
    }
    return "?";
}

#!/usr/bin/env python3
"""Where the CUDA engine's half-width precisions lose accuracy, measured on
the CPU: all-MiniLM-L6-v2's forward in float32 arithmetic, with a rounding
to bf16 (or fp16) exactly where engines/cuda/cuda_engine.c stores a tensor
in that type, against the same forward in float32, over the golden texts
(tests/golden/embeddings.json.gz: its token ids, mean pooling, normalised).

The rounding points, in the engine's order:
  weights    every GEMM weight and the embedding tables (uploaded in the type)
  emb_out    the embeddings' LayerNorm output x
  qkv        the QKV GEMM's output
  P          the softmax numerators before P·V (the flash kernels' MMA input)
  att        attention's output
  resid_sum  the output and FFN-out GEMMs' result, residual added in the
             epilogue, before LayerNorm reads it
  ffn_pre    the FFN-in GEMM's output, before GELU
  gelu_out   GELU's output
  ln_out     each LayerNorm's output as the next GEMM reads it
  residual   the same output as the residual add reads it (on the GPU one
             bf16 tensor is both; split here to see what an fp32 residual
             stream would save)
Accumulation, softmax, LayerNorm and pooling stay float32, as on the GPU.

For each point: 1 - the lowest cosine with only that rounding, and with
every rounding but that one. No GPU is involved: it is the arithmetic the
kernels are specified to do, not a run of them (the GPU check,
tests/gpu/gpu_engine.c, measures the kernels).

  python3 bench/precision/gpu_rounding.py [--dtype bf16|fp16] [--model DIR]
      [--points all|each]
Runs in the benchmark venv (torch, safetensors), which bench/embed/peers.py
makes on first use, as `make bench-embed` does.
"""
import argparse
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "embed"))
import peers  # noqa: E402

if __name__ == "__main__" and not peers.in_venv(peers.default_venv()):
    PY = peers.ensure_venv(peers.default_venv())
    os.execv(PY, [PY, os.path.abspath(__file__)] + sys.argv[1:])

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

POINTS = ["weights", "emb_out", "qkv", "P", "att", "resid_sum", "ffn_pre", "gelu_out", "ln_out",
          "residual"]
# The CPU engine's bf16 plan rounds the GEMMs' inputs (weights, and what
# LayerNorm, attention and GELU hand them) and nothing else.
GEMM_INPUTS = {"weights", "emb_out", "ln_out", "att", "gelu_out"}
# The CUDA plan with the residual stream, the sums LayerNorm reads and GELU's
# input kept in fp32 (cuBLASLt's bf16-in, fp32-out GEMMs; LayerNorm writing
# an fp32 copy beside the bf16 one the next GEMM reads).
FP32_RESIDUAL = set(POINTS) - {"residual", "resid_sum", "ffn_pre"}


class Model:
    def __init__(self, path, dtype):
        w = load_file(path + "/model.safetensors")
        self.w = {k.removeprefix("bert."): v.float() for k, v in w.items()}
        cfg = json.load(open(path + "/config.json"))
        self.heads, self.layers = cfg["num_attention_heads"], cfg["num_hidden_layers"]
        self.eps = cfg["layer_norm_eps"]
        self.dtype = dtype

    def forward(self, ids, rounded):
        def r(point, x):
            return x.to(self.dtype).float() if point in rounded else x

        def w(name):
            return r("weights", self.w[name])

        def ln(x, p):
            return torch.nn.functional.layer_norm(x, (x.shape[-1],), self.w[p + ".weight"],
                                                  self.w[p + ".bias"], self.eps)

        def linear(x, p):
            return x @ w(p + ".weight").T + self.w[p + ".bias"]

        T = len(ids)
        e = (w("embeddings.word_embeddings.weight")[ids] +
             w("embeddings.position_embeddings.weight")[:T] +
             w("embeddings.token_type_embeddings.weight")[0])
        y = ln(e, "embeddings.LayerNorm")
        x, res = r("emb_out", y), r("residual", y)
        C = x.shape[1]
        D = C // self.heads
        for l in range(self.layers):
            p = "encoder.layer.%d." % l
            q, k, v = (r("qkv", linear(x, p + "attention.self." + n)).view(T, self.heads, D)
                       .transpose(0, 1) for n in ("query", "key", "value"))
            s = q @ k.transpose(1, 2) / D ** 0.5
            e = torch.exp(s - s.max(-1, keepdim=True).values)
            a = (r("P", e) @ v) / e.sum(-1, keepdim=True)
            a = r("att", a.transpose(0, 1).reshape(T, C))
            t = r("resid_sum", linear(a, p + "attention.output.dense") + res)
            y = ln(t, p + "attention.output.LayerNorm")
            x, res = r("ln_out", y), r("residual", y)
            f = r("ffn_pre", linear(x, p + "intermediate.dense"))
            f = r("gelu_out", torch.nn.functional.gelu(f))
            t = r("resid_sum", linear(f, p + "output.dense") + res)
            y = ln(t, p + "output.LayerNorm")
            x, res = r("ln_out", y), r("residual", y)
        v = x.double().mean(0)
        return v / v.norm()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--golden", default="tests/golden/embeddings.json.gz")
    ap.add_argument("--points", choices=["all", "each"], default="each",
                    help="all: the whole plans only; each: every rounding point alone and left out too")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = Model(a.model, torch.bfloat16 if a.dtype == "bf16" else torch.float16)
    g = json.load(gzip.open(a.golden))
    ids = [torch.tensor(c["ids"]) for c in g["mean_normalized"]]
    with torch.no_grad():
        ref = [m.forward(i, set()) for i in ids]

        def loss(rounded):
            cos = sorted(float(torch.dot(m.forward(i, rounded), r)) for i, r in zip(ids, ref))
            return 1 - cos[0], 1 - cos[len(cos) // 2]

        print("%s, %d texts; 1 - cosine against the float32 forward" % (a.dtype, len(ids)))
        print("%-44s %10s %10s" % ("roundings", "worst", "median"))
        for name, pts in (("every point (the CUDA engine's plan)", set(POINTS)),
                          ("GEMM inputs only (the CPU engine's plan)", GEMM_INPUTS),
                          ("the CUDA plan with an fp32 residual stream", FP32_RESIDUAL),
                          ("weights only", {"weights"}),
                          ("every point but the weights", set(POINTS) - {"weights"})):
            print("%-44s %10.2e %10.2e" % ((name,) + loss(pts)))
        if a.points == "each":
            print("%-12s %20s %20s" % ("point", "only this (worst)", "all but this (worst)"))
            for p in POINTS:
                print("%-12s %20.2e %20.2e" % (p, loss({p})[0], loss(set(POINTS) - {p})[0]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""tests/gpu/task_models.py DST — the committed tiny task models, reshaped so
the cuda engine takes them, for gpu-engine's comparison with the CPU engine.

The tiny models in tests/golden/ (classifier heads, Dense modules, the other
poolings; see tests/golden/make_task_models.py) have heads of 8 dimensions,
and the engine's attention kernels take 32, 64 or 128. Each copy here is the
same directory with num_attention_heads set to hidden_size / 32: the same
weights read as fewer, wider heads. That is another model than PyTorch's
golden outputs describe, so gpu-engine compares it with the CPU engine on
the same directory, never with those outputs. Only json and the standard
library: it runs where `make gpu-bundle` runs and on a bare GPU machine.
"""
import json
import os
import shutil
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden")
# What each model covers on the GPU.
MODELS = (
    "bert-cls-tiny",       # BERT pooler -> classifier, token types (pairs)
    "xlmr-cls-tiny",       # RoBERTa classifier.dense -> tanh -> out_proj
    "st-dense-max-tiny",   # max pooling, two Dense modules, Normalize
    "st-meansqrt-tiny",    # mean_sqrt_len_tokens, a Dense module, XLM-R positions
    "st-lasttoken-tiny",   # lasttoken pooling, Normalize
    "roberta-tiny-model",  # mean pooling, Normalize, RoBERTa positions
)
HEAD_DIM = 32


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: task_models.py DST")
    dst = sys.argv[1]
    os.makedirs(dst, exist_ok=True)
    for name in MODELS:
        out = os.path.join(dst, name)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(os.path.join(SRC, name), out)
        path = os.path.join(out, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        hidden = cfg["hidden_size"]
        if hidden % HEAD_DIM:
            sys.exit("%s: hidden_size %d is no multiple of %d" % (name, hidden, HEAD_DIM))
        cfg["num_attention_heads"] = hidden // HEAD_DIM
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        print("%s: %d head(s) of %d" % (out, hidden // HEAD_DIM, HEAD_DIM))


if __name__ == "__main__":
    main()

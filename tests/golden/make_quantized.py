#!/usr/bin/env python3
"""make_quantized.py — sentence-transformers' quantize_embeddings on the golden
vectors, for Cohere's embedding_types (tests/unit/test_cohere_quantize.c and
tests/e2e/test_cohere_embed.py).

Takes the "mean_normalized" vectors of embeddings.json.gz (all-MiniLM-L6-v2,
unit vectors, float32) and writes tests/golden/quantized.json.gz: for each its
text, its float vector, and the int8, uint8, binary and ubinary forms that
quantize_embeddings gives with ranges [-1, 1] in every dimension (the fixed
ranges the service states: a unit vector's values lie there).

quantize_embeddings is sentence-transformers' own code, unchanged. On numpy
arrays it never touches PyTorch, so the module is run with torch's `Tensor`
and the package's `_tensor_to_numpy` stood in for (isinstance checks that are
false for numpy input); the generator needs only numpy and the
sentence-transformers wheel, not PyTorch:
    pip download --no-deps sentence-transformers==6.3.0 -d /tmp/st
    python3 tests/golden/make_quantized.py /tmp/st/sentence_transformers-6.3.0-py3-none-any.whl
"""
import os
import sys
import types
import zipfile

import numpy as np

import golden_io

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "sentence_transformers/util/quantization.py"


def quantize_embeddings(wheel):
    """sentence_transformers.util.quantization.quantize_embeddings, loaded
    from the wheel with torch stood in for."""
    torch = types.ModuleType("torch")

    class Tensor:  # nothing numpy hands it is one
        pass

    torch.Tensor = Tensor
    tensor = types.ModuleType("sentence_transformers.util.tensor")
    tensor._tensor_to_numpy = lambda t: t
    package = types.ModuleType("sentence_transformers.util")
    package.__path__ = []
    sys.modules.update({"torch": torch, "sentence_transformers": types.ModuleType("st"),
                        "sentence_transformers.util": package,
                        "sentence_transformers.util.tensor": tensor})
    source = zipfile.ZipFile(wheel).read(MODULE).decode("utf-8")
    module = types.ModuleType("sentence_transformers.util.quantization")
    module.__package__ = "sentence_transformers.util"
    exec(compile(source, MODULE, "exec"), module.__dict__)
    return module.quantize_embeddings


def main():
    wheel = sys.argv[1]
    quantize = quantize_embeddings(wheel)
    golden = golden_io.load(os.path.join(HERE, "embeddings.json.gz"))
    cases = [c for c in golden["mean_normalized"] if c["text"] and len(c["ids"]) <= 256]
    floats = np.array([c["embedding"] for c in cases], dtype=np.float32)
    ranges = np.array([[-1.0] * floats.shape[1], [1.0] * floats.shape[1]], dtype=np.float32)
    out = {precision: quantize(floats, precision, ranges=ranges).tolist()
           for precision in ("int8", "uint8", "binary", "ubinary")}
    golden_io.dump({
        "sentence_transformers": os.path.basename(wheel),
        "numpy": np.__version__,
        "ranges": [-1.0, 1.0],
        "cases": [{"text": c["text"],
                   "float": [float(x) for x in floats[i]],
                   **{p: out[p][i] for p in out}} for i, c in enumerate(cases)],
    }, os.path.join(HERE, "quantized.json.gz"))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""peers.py — the embedding engines a user would otherwise pick, timed on the
same inputs as build/bench_embed: sentence-transformers (PyTorch, CPU), ONNX
Runtime fp32 and its dynamic int8 (`quantize_dynamic`), and OpenVINO fp32 and
bf16 (`INFERENCE_PRECISION_HINT`), all on the same model directory.

Run with any Python 3: the first run makes a virtual environment (default
~/.cache/attnserve/bench-embed/venv, or $ATTNSERVE_BENCH_VENV), installs torch,
sentence-transformers, onnx, onnxruntime and matplotlib into it with pip, and
re-runs itself there. Exit status 3 means the packages could not be installed
(bench/embed/run.sh then skips the peers).

ONNX Runtime runs the model exported once with torch.onnx (input ids,
attention mask and token types in; mean pooling and L2 normalisation inside
the graph, as the sentence-transformers modules say), cached beside the venv,
with graph optimisations ORT_ENABLE_ALL; its int8 peer is that graph after
`quant_pre_process` and `quantize_dynamic` (QInt8 weights, per-tensor dynamic
activations: ONNX Runtime's default, what its documentation shows a user).
OpenVINO compiles the same ONNX graph for the CPU with the LATENCY hint and
the thread count given, once with INFERENCE_PRECISION_HINT f32 and once bf16.
Every peer reports its accuracy too: the lowest and mean cosine of its
embeddings of every input against sentence-transformers in fp32 (the
reference the golden tests use). Every peer tokenizes with the model's
tokenizer.json (Hugging Face `tokenizers`) inside the timed region, as
attnserve does. A case is one warm-up run, then the median of the reps, with
the same --reps/--budget rule as bench_embed. One JSON object per line.

    python3 bench/embed/peers.py --inputs FILE --model DIR [--threads 2]
        [--batches 1,8,32,128] [--reps 5] [--budget 8]
        [--peers onnxruntime,onnxruntime-int8,openvino,openvino-bf16,pytorch] [--accuracy]

FILE is what `bench_embed --dump-inputs FILE` writes.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

PACKAGES = ["torch", "sentence-transformers", "onnx", "onnxscript", "onnxruntime", "openvino",
            "matplotlib"]
IMPORTS = ["torch", "sentence_transformers", "onnx", "onnxruntime", "openvino", "matplotlib"]
ALL_PEERS = "onnxruntime,onnxruntime-int8,openvino,openvino-bf16,pytorch"


def default_venv():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("ATTNSERVE_BENCH_VENV") or os.path.join(
        base, "attnserve", "bench-embed", "venv")


def ensure_venv(venv):
    """Returns the venv's python, making the venv and installing PACKAGES if
    any import fails there. Exits 3 when that cannot be done."""
    py = os.path.join(venv, "bin", "python")
    check = [py, "-c", "import " + ", ".join(IMPORTS)]
    if os.path.exists(py) and subprocess.run(check, capture_output=True).returncode == 0:
        return py
    print(f"peers: installing {' '.join(PACKAGES)} into {venv} (pip; first run only)",
          file=sys.stderr)
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q"] + PACKAGES, check=True,
                       stdout=sys.stderr)
        subprocess.run(check, check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"peers: cannot install the peer packages ({e}); skipping the peers",
              file=sys.stderr)
        sys.exit(3)
    return py


def in_venv(venv):
    return os.path.realpath(sys.prefix) == os.path.realpath(venv)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inputs", required=True)
    p.add_argument("--model", default="models/all-MiniLM-L6-v2")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--batches", default="1,8,32,128")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--budget", type=float, default=8.0)
    p.add_argument("--peers", default=ALL_PEERS)
    p.add_argument("--venv", default=default_venv())
    p.add_argument("--accuracy", action="store_true",
                   help="also print each peer's lowest and mean cosine against fp32 "
                        "sentence-transformers over every input, one at a time")
    p.add_argument("--attnserve-embeddings",
                   help="with --accuracy: also compare the embeddings `bench_embed "
                        "--dump-embeddings` wrote, one line per precision and length")
    p.add_argument("--setup-only", action="store_true",
                   help="make the venv and install the packages, then exit")
    return p.parse_args()


# ---- timing -------------------------------------------------------------------------

def time_case(fn, reps, budget):
    """One warm-up call, then reps calls (at least 3 when reps >= 3, fewer
    past the budget); returns (median seconds, reps, cpu fraction)."""
    fn()
    times = []
    c0, wall = time.process_time(), 0.0
    while len(times) < reps and (len(times) < 3 or wall < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        wall += times[-1]
    cpu = time.process_time() - c0
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    return med, n, cpu / wall


# ---- the model as one ONNX graph ------------------------------------------------------

def export_onnx(model_dir, path):
    """Exports BERT + mean pooling + L2 normalisation (what the model's
    sentence-transformers modules compute) to path."""
    import torch
    from transformers import AutoModel

    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    enc = Encoder(AutoModel.from_pretrained(model_dir, attn_implementation="eager")).eval()
    ids = torch.ones(2, 8, dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["embedding"] = {0: "batch"}
    tmp = path + ".tmp"
    with torch.no_grad():
        try:
            torch.onnx.export(enc, args, tmp, input_names=names, output_names=["embedding"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        except Exception as e:  # the TorchScript exporter may be gone; use dynamo's
            print(f"peers: TorchScript ONNX export failed ({e}); trying dynamo=True",
                  file=sys.stderr)
            torch.onnx.export(enc, args, tmp, input_names=names, output_names=["embedding"],
                              dynamic_axes=axes, dynamo=True, external_data=False)
    os.replace(tmp, path)


def onnx_path(model_dir, venv):
    st = os.stat(os.path.join(model_dir, "model.safetensors"))
    key = f"{os.path.realpath(model_dir)}:{st.st_size}:{st.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(os.path.dirname(os.path.abspath(venv)), f"model-{digest}.onnx")


# ---- peers ---------------------------------------------------------------------------

def make_pytorch(model_dir, threads):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_dir, device="cpu")

    def encode(texts):
        return model.encode(texts, batch_size=len(texts), convert_to_numpy=True,
                            show_progress_bar=False)
    return encode, f"torch {torch.__version__}, {torch.get_num_threads()} threads"


def padded_tokenizer(model_dir):
    """The model's own tokenizer.json, padding each batch to its longest input
    (what a user of these runtimes does)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def feeds(tok, texts):
    import numpy as np

    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def fp32_graph(model_dir, venv):
    path = onnx_path(model_dir, venv)
    if not os.path.exists(path):
        print(f"peers: exporting {model_dir} to {path}", file=sys.stderr)
        export_onnx(model_dir, path)
    return path


def int8_graph(model_dir, venv):
    """ONNX Runtime's documented dynamic quantisation of the fp32 graph, after
    its pre-processing pass (shape inference and graph optimisation), cached
    beside it."""
    src = fp32_graph(model_dir, venv)
    path = src[:-len(".onnx")] + "-int8.onnx"
    if not os.path.exists(path):
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.quantization.shape_inference import quant_pre_process

        pre = src[:-len(".onnx")] + "-pre.onnx"
        print(f"peers: quantising {src} to {path} (quantize_dynamic, QInt8)", file=sys.stderr)
        # The symbolic shape pass fails on the exported BERT graph ("Incomplete
        # symbolic shape inference"); ONNX's own shape inference and ORT's
        # graph optimisation still run, which is what the pre-processing buys.
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        quantize_dynamic(pre, path + ".tmp", weight_type=QuantType.QInt8)
        os.replace(path + ".tmp", path)
    return path


def make_onnxruntime(model_dir, threads, venv, int8=False):
    import onnxruntime as ort

    path = int8_graph(model_dir, venv) if int8 else fp32_graph(model_dir, venv)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    tok = padded_tokenizer(model_dir)

    def encode(texts):
        return sess.run(None, feeds(tok, texts))[0]
    kind = "dynamic int8 (quantize_dynamic QInt8)" if int8 else "fp32"
    return encode, f"onnxruntime {ort.__version__} {kind}, {threads} intra-op threads"


def make_openvino(model_dir, threads, venv, precision):
    """OpenVINO on the CPU, compiled as a performance-minded user would: the
    LATENCY hint (one stream, every thread on one request), the thread count
    pinned, and the inference precision asked for explicitly."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(fp32_graph(model_dir, venv))
    compiled = core.compile_model(model, "CPU", {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": precision})
    got = compiled.get_property("INFERENCE_PRECISION_HINT")
    request = compiled.create_infer_request()
    tok = padded_tokenizer(model_dir)

    def encode(texts):
        return request.infer(feeds(tok, texts))[0].copy()
    return encode, f"openvino {ov.get_version()}, inference precision {got}, {threads} threads"


def main():
    a = parse_args()
    if not in_venv(a.venv):
        py = ensure_venv(a.venv)
        if a.setup_only:
            return 0
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), RAYON_NUM_THREADS=str(a.threads),
                   TOKENIZERS_PARALLELISM="true", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)
    if a.setup_only:
        return 0

    import numpy as np

    sets = [json.loads(line) for line in open(a.inputs) if line.strip()]
    batches = [int(b) for b in a.batches.split(",") if b]
    makers = {"pytorch": lambda: make_pytorch(a.model, a.threads),
              "onnxruntime": lambda: make_onnxruntime(a.model, a.threads, a.venv),
              "onnxruntime-int8": lambda: make_onnxruntime(a.model, a.threads, a.venv, True),
              "openvino": lambda: make_openvino(a.model, a.threads, a.venv, "f32"),
              "openvino-bf16": lambda: make_openvino(a.model, a.threads, a.venv, "bf16")}
    encoders = {}
    for name in a.peers.split(","):
        encoders[name], desc = makers[name]()
        print(json.dumps({"kind": "peer", "backend": name, "version": desc}), flush=True)

    # Accuracy of every peer on every input of every set, one input at a time
    # (no padding in play), against sentence-transformers in fp32.
    ref = make_pytorch(a.model, a.threads)[0] if a.accuracy else None
    dumped = []
    if a.accuracy and a.attnserve_embeddings:
        dumped = [json.loads(line) for line in open(a.attnserve_embeddings) if line.strip()]
    for s in sets if a.accuracy else []:
        want = np.asarray(ref(s["texts"]), dtype=np.float64)
        want /= np.linalg.norm(want, axis=1, keepdims=True)
        for d in dumped:
            if d["tokens"] != s["tokens"]:
                continue
            got = np.asarray(d["embeddings"], dtype=np.float64)
            got /= np.linalg.norm(got, axis=1, keepdims=True)
            cos = (got * want[:len(got)]).sum(1)
            print(json.dumps({"kind": "accuracy", "backend": "attnserve",
                              "precision": d["precision"], "input": s["name"],
                              "tokens_per_input": s["tokens"], "n": len(cos),
                              "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean())}),
                  flush=True)
        for name, enc in encoders.items():
            if name == "pytorch":  # the reference itself: cosine 1 by construction
                continue
            got = np.concatenate([np.asarray(enc([t]), dtype=np.float64) for t in s["texts"]])
            got /= np.linalg.norm(got, axis=1, keepdims=True)
            cos = (got * want).sum(1)
            print(json.dumps({"kind": "accuracy", "backend": name, "input": s["name"],
                              "tokens_per_input": s["tokens"], "n": len(cos),
                              "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean())}),
                  flush=True)

    for s in sets:
        for b in batches:
            texts = s["texts"][:b]
            for name, enc in encoders.items():
                sec, n, cpu = time_case(lambda: enc(texts), a.reps, a.budget)
                print(json.dumps({
                    "kind": "case", "backend": name, "threads": a.threads, "input": s["name"],
                    "tokens_per_input": s["tokens"], "batch": b, "ms": round(sec * 1e3, 3),
                    "inputs_per_s": round(b / sec, 1), "tokens_per_s": round(b * s["tokens"] / sec),
                    "cpu_pct": round(100 * cpu / a.threads, 1), "reps": n}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
attention mask and, for a model with more than one token type, token types
in: an XLM-R, ModernBERT or Qwen3 graph has no token_type_ids input, as
Optimum exports it; the pooling the sentence-transformers modules name —
mean, CLS or last token — and their L2 normalisation inside the graph),
cached beside the venv,
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

--rerank times a cross-encoder instead: each input line's "query" paired with
the first BATCH of its texts, one call per query. sentence-transformers'
CrossEncoder.predict is the PyTorch peer and the reference; ONNX Runtime and
OpenVINO run the exported sequence-classification graph (its logits out),
the pairs tokenized by tokenizer.json's pair template in the timed region.
Accuracy is then the largest |logit difference| against CrossEncoder fp32
over every pair (`bench_embed --pairs --dump-embeddings` gives attnserve's).

    python3 bench/embed/peers.py --inputs FILE --model DIR [--threads 2]
        [--batches 1,8,32,128] [--reps 5] [--budget 8]
        [--peers onnxruntime,onnxruntime-int8,openvino,openvino-bf16,pytorch] [--accuracy]
        [--rerank]

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
    p.add_argument("--peers", default=ALL_PEERS,
                   help="comma list, of: " + ALL_PEERS)
    p.add_argument("--venv", default=default_venv())
    p.add_argument("--accuracy", action="store_true",
                   help="also print each peer's lowest and mean cosine against fp32 "
                        "sentence-transformers over every input, one at a time")
    p.add_argument("--attnserve-embeddings",
                   help="with --accuracy: also compare the embeddings `bench_embed "
                        "--dump-embeddings` wrote, one line per precision and length")
    p.add_argument("--rerank", action="store_true",
                   help="the model is a cross-encoder: score each line's query with its texts")
    p.add_argument("--setup-only", action="store_true",
                   help="make the venv and install the packages, then exit")
    a = p.parse_args()
    unknown = [n for n in a.peers.split(",") if n not in ALL_PEERS.split(",")]
    if unknown:
        p.error(f"--peers: unknown {', '.join(unknown)}; the peers are {ALL_PEERS}")
    return a


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

def model_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def uses_token_types(model_dir):
    """BERT reads a pair's segments as token types; RoBERTa and XLM-R have
    one type, and their exported graphs (Optimum's too) take no such input.
    A config without type_vocab_size (ModernBERT, Qwen3) has no token-type
    table at all."""
    return model_config(model_dir).get("type_vocab_size", 1) > 1


# 1_Pooling/config.json's mode, in sentence-transformers 2-5's boolean keys
# ("pooling_mode_<name>": true) or 6's one "pooling_mode" name.
POOLING = {"mean_tokens": "mean", "mean": "mean", "cls_token": "cls", "cls": "cls",
           "lasttoken": "lasttoken"}


def st_pooling(model_dir):
    """What the sentence-transformers modules after the encoder compute: the
    pooling ("mean", "cls" or "lasttoken") and whether a Normalize follows."""
    with open(os.path.join(model_dir, "modules.json")) as f:
        mods = json.load(f)
    path = next(m["path"] for m in mods if m["type"].endswith(".Pooling"))
    with open(os.path.join(model_dir, path, "config.json")) as f:
        cfg = json.load(f)
    names = [cfg["pooling_mode"]] if "pooling_mode" in cfg else [
        k[len("pooling_mode_"):] for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
    if len(names) != 1 or names[0] not in POOLING:
        raise ValueError(f"{model_dir}: pooling {names}: the graph has mean, CLS and last-token")
    return POOLING[names[0]], any(m["type"].endswith(".Normalize") for m in mods)


def export_onnx(model_dir, path, rerank=False):
    """Exports the encoder to path: with the pooling and L2 normalisation
    the model's sentence-transformers modules compute (st_pooling), or for a
    cross-encoder its sequence-classification logits. Last-token pooling
    takes each row's last unmasked token: the inputs are padded on the right
    (padded_tokenizer), and a causal model's real tokens never see the
    padding after them."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    types = uses_token_types(model_dir)
    mode, normalize = ("mean", True) if rerank else st_pooling(model_dir)

    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {"token_type_ids": token_type_ids} if types else {}
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          **extra).last_hidden_state
            if mode == "cls":
                pooled = h[:, 0]
            elif mode == "lasttoken":
                last = attention_mask.sum(1) - 1
                pooled = h[torch.arange(h.shape[0]), last]
            else:
                m = attention_mask.unsqueeze(-1).to(h.dtype)
                pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1) if normalize else pooled

    class Scorer(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits

    if rerank:
        enc = Scorer(AutoModelForSequenceClassification.from_pretrained(
            model_dir, attn_implementation="eager")).eval()
        out = "logits"
    else:
        # use_cache off: a decoder (Qwen3) would otherwise build a KV cache
        # in the graph that nothing reads. Only where the config has the key:
        # an encoder's model (ModernBERT) takes no such argument.
        cache = {"use_cache": False} if "use_cache" in model_config(model_dir) else {}
        enc = Encoder(AutoModel.from_pretrained(model_dir, attn_implementation="eager",
                                                **cache)).eval()
        out = "embedding"
    ids = torch.ones(2, 8, dtype=torch.long)
    args = (ids, torch.ones_like(ids)) + ((torch.zeros_like(ids),) if types else ())
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if types else [])
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes[out] = {0: "batch"}
    tmp = path + ".tmp"
    with torch.no_grad():
        try:
            torch.onnx.export(enc, args, tmp, input_names=names, output_names=[out],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        except Exception as e:  # the TorchScript exporter may be gone; use dynamo's
            print(f"peers: TorchScript ONNX export failed ({e}); trying dynamo=True",
                  file=sys.stderr)
            torch.onnx.export(enc, args, tmp, input_names=names, output_names=[out],
                              dynamic_axes=axes, dynamo=True, external_data=False)
    os.replace(tmp, path)


def onnx_path(model_dir, venv, rerank=False):
    st = os.stat(os.path.join(model_dir, "model.safetensors"))
    key = f"{os.path.realpath(model_dir)}:{st.st_size}:{st.st_mtime_ns}"
    if rerank:
        key += ":logits"
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


def make_cross_encoder(model_dir, threads):
    """sentence-transformers' CrossEncoder, scoring a list of (query,
    document) pairs as one batch; raw logits, as the graphs give them (a
    sigmoid on 32 numbers costs nothing next to the forward)."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(threads)
    model = CrossEncoder(model_dir, device="cpu")
    identity = torch.nn.Identity()

    def score(pairs):
        return model.predict(pairs, batch_size=len(pairs), activation_fn=identity,
                             convert_to_numpy=True, show_progress_bar=False).reshape(len(pairs), -1)
    return score, f"torch {torch.__version__} CrossEncoder.predict, {torch.get_num_threads()} threads"


def padded_tokenizer(model_dir):
    """The model's own tokenizer.json, padding each batch on the right to its
    longest input with the model's padding token (what a user of these
    runtimes does; XLM-R numbers positions past its padding id, so the id
    matters): config.json's pad_token_id, else tokenizer_config.json's
    pad_token (Qwen3's config names none)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    pad_id = model_config(model_dir).get("pad_token_id")
    if pad_id is None:
        tc = os.path.join(model_dir, "tokenizer_config.json")
        pad = json.load(open(tc)).get("pad_token") if os.path.exists(tc) else None
        pad_id = tok.token_to_id(pad) if isinstance(pad, str) else None
        pad_id = 0 if pad_id is None else pad_id
    tok.enable_padding(pad_id=pad_id, pad_token=tok.id_to_token(pad_id))
    return tok


def feeds(tok, texts, names):
    """The inputs the graph takes (names), for texts: strings, or (query,
    document) pairs, which the pair template gives their token types."""
    import numpy as np

    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    f = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        f["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
    return f


def fp32_graph(model_dir, venv, rerank=False):
    path = onnx_path(model_dir, venv, rerank)
    if not os.path.exists(path):
        print(f"peers: exporting {model_dir} to {path}", file=sys.stderr)
        export_onnx(model_dir, path, rerank)
    return path


def int8_graph(model_dir, venv, rerank=False):
    """ONNX Runtime's documented dynamic quantisation of the fp32 graph, after
    its pre-processing pass (shape inference and graph optimisation), cached
    beside it."""
    src = fp32_graph(model_dir, venv, rerank)
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


def make_onnxruntime(model_dir, threads, venv, int8=False, rerank=False):
    import onnxruntime as ort

    path = int8_graph(model_dir, venv, rerank) if int8 else fp32_graph(model_dir, venv, rerank)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    tok = padded_tokenizer(model_dir)
    names = {i.name for i in sess.get_inputs()}

    def encode(texts):
        return sess.run(None, feeds(tok, texts, names))[0]
    kind = "dynamic int8 (quantize_dynamic QInt8)" if int8 else "fp32"
    return encode, f"onnxruntime {ort.__version__} {kind}, {threads} intra-op threads"


def make_openvino(model_dir, threads, venv, precision, rerank=False):
    """OpenVINO on the CPU, compiled as a performance-minded user would: the
    LATENCY hint (one stream, every thread on one request), the thread count
    pinned, and the inference precision asked for explicitly."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(fp32_graph(model_dir, venv, rerank))
    compiled = core.compile_model(model, "CPU", {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": precision})
    got = compiled.get_property("INFERENCE_PRECISION_HINT")
    request = compiled.create_infer_request()
    tok = padded_tokenizer(model_dir)
    names = {n for i in compiled.inputs for n in i.get_names()}

    def encode(texts):
        return request.infer(feeds(tok, texts, names))[0].copy()
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

    sets = [json.loads(line) for line in open(a.inputs) if line.strip()]
    batches = [int(b) for b in a.batches.split(",") if b]
    r = a.rerank
    makers = {"pytorch": lambda: (make_cross_encoder(a.model, a.threads) if r
                                  else make_pytorch(a.model, a.threads)),
              "onnxruntime": lambda: make_onnxruntime(a.model, a.threads, a.venv, rerank=r),
              "onnxruntime-int8": lambda: make_onnxruntime(a.model, a.threads, a.venv, True, r),
              "openvino": lambda: make_openvino(a.model, a.threads, a.venv, "f32", r),
              "openvino-bf16": lambda: make_openvino(a.model, a.threads, a.venv, "bf16", r)}
    encoders = {}
    for name in a.peers.split(","):
        encoders[name], desc = makers[name]()
        print(json.dumps({"kind": "peer", "backend": name, "version": desc}), flush=True)

    # What one call gets for the first b inputs of a set: its texts, or its
    # query paired with each of them.
    def inputs(s, b):
        return [(s["query"], t) for t in s["texts"][:b]] if r else s["texts"][:b]

    if a.accuracy:
        dumped = []
        if a.attnserve_embeddings:
            dumped = [json.loads(line) for line in open(a.attnserve_embeddings) if line.strip()]
        ref = makers["pytorch"]()[0]
        for s in sets:
            (rerank_accuracy if r else embed_accuracy)(s, ref, encoders, dumped, inputs)

    for s in sets:
        for b in batches:
            texts = inputs(s, b)
            for name, enc in encoders.items():
                sec, n, cpu = time_case(lambda: enc(texts), a.reps, a.budget)
                case = {"kind": "case", "backend": name, "threads": a.threads, "input": s["name"],
                        "tokens_per_input": s["tokens"], "batch": b, "ms": round(sec * 1e3, 3),
                        "inputs_per_s": round(b / sec, 1),
                        "tokens_per_s": round(b * s["tokens"] / sec),
                        "cpu_pct": round(100 * cpu / a.threads, 1), "reps": n}
                if r:
                    case = dict(case, task="rerank", query_tokens=s["query_tokens"])
                print(json.dumps(case), flush=True)
    return 0


def embed_accuracy(s, ref, encoders, dumped, inputs):
    """Every engine's embeddings of every input of set s, one input at a time
    (no padding in play), against sentence-transformers in fp32: the lowest
    and mean cosine."""
    import numpy as np

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


def rerank_accuracy(s, ref, encoders, dumped, inputs):
    """Every engine's logits of every pair of set s, scored together (as a
    rerank call does), against CrossEncoder in fp32: the largest and mean
    |difference|, and the spread of the reference's logits to read them by."""
    import numpy as np

    pairs = inputs(s, len(s["texts"]))
    want = np.asarray(ref(pairs), dtype=np.float64).reshape(len(pairs), -1)

    def line(backend, got, **extra):
        d = np.abs(np.asarray(got, dtype=np.float64).reshape(len(got), -1) - want[:len(got)])
        print(json.dumps(dict({"kind": "accuracy", "task": "rerank", "backend": backend},
                              **extra, input=s["name"], tokens_per_input=s["tokens"],
                              n=len(got), max_abs_diff=float(d.max()),
                              mean_abs_diff=float(d.mean()), ref_std=float(want.std()))),
              flush=True)
    for d in dumped:
        if d.get("kind") == "scores" and d["tokens"] == s["tokens"]:
            line("attnserve", d["scores"], precision=d["precision"])
    for name, enc in encoders.items():
        if name != "pytorch":  # the reference itself
            line(name, enc(pairs))


if __name__ == "__main__":
    sys.exit(main())

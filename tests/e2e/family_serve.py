"""What the e2e files of the families beyond BERT share: serve a tiny
checkpoint with some settings, compare vectors with a golden set at a floor,
start the binary expecting a refusal. Each family's file (test_qwen3.py,
test_gemma3.py) says what it checks."""
import json
import math
import os
import subprocess

import pytest
import requests

from conftest import BIN, JSON, Server, free_port


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


def serve(tmp_path_factory, model, name, settings, flags):
    """A Server for model with settings, or a skip naming the CPU flags it lacks."""
    lacks = [f for f in (flags or "").split() if f not in open("/proc/cpuinfo").read().split()]
    if lacks:
        pytest.skip("NOT RUN: this CPU lacks %s, which %s needs" % (" ".join(lacks), name))
    if settings.get("engine") == "cpu-avx512":
        settings = dict(settings, plugin_dir=os.path.join(os.path.dirname(
            os.environ["ATTNSERVE_BIN"]), "engines"))
    return Server(str(tmp_path_factory.mktemp(name)), model=model, **settings)


FP32 = 1.0 - 1e-6


def settings(bf16=None, int8=0.99):
    """The settings each family is served with: (name, settings, CPU flags
    needed, floor). bf16 only where the service accepts it for the model
    (its floor then; None: refused at start, as the family's file shows)."""
    rows = [
        ("naive", {"backend": "naive"}, None, FP32),
        ("fused", {"backend": "fused"}, None, FP32),
        ("auto", {"backend": "auto"}, None, FP32),
    ]
    if bf16 is not None:
        rows.append(("bf16", {"precision": "bf16", "backend": "fused"}, "avx512_bf16", bf16))
    return rows + [
        ("int8", {"precision": "int8", "backend": "fused"}, "avx512_vnni", int8),
        ("cpu-avx512", {"engine": "cpu-avx512", "backend": "fused"},
         "avx512f avx512dq avx512bw avx512vl", FP32),
    ]


def served_fixture(model, name, rows):
    """A module-scoped fixture `served` over rows (settings()): (server,
    setting's name, settings, floor) for each, stopped cleanly after."""
    @pytest.fixture(scope="module", params=rows, ids=[r[0] for r in rows])
    def served(tmp_path_factory, request):
        label, cfg, flags, floor = request.param
        s = serve(tmp_path_factory, model, name, cfg, flags)
        yield s, label, cfg, floor
        s.check_clean_exit(s.stop())
    return served


def check_openai_embeddings(served, cases, family, dim=64, engine=False):
    """cases' texts through /v1/embeddings at the setting's floor, answered
    with the precision asked (and, with engine, the engine asked) and the
    backend asked, `auto` as fused."""
    s, name, cfg, floor = served
    r, vectors = openai_vectors(s, [c["text"] for c in cases])
    want = {"x-precision": cfg.get("precision", "fp32")}
    if engine:
        want["x-engine"] = cfg.get("engine", "cpu")
    assert {k: r.headers.get(k) for k in want} == want
    # auto: fused, the fastest fp32 backend, keeps windows and grouped heads.
    assert r.headers.get("x-attention-backend") == {"auto": "fused"}.get(
        cfg["backend"], cfg["backend"])
    check(vectors, cases, floor, family + " e2e " + name, dim)


def check_ids(served, cases):
    """/tokenize gives the reference tokenizer's ids of every case."""
    s = served[0]
    r = post(s, "/tokenize", {"inputs": [c["text"] for c in cases]})
    assert r.status_code == 200, r.text
    for toks, c in zip(r.json(), cases):
        assert [t["id"] for t in toks] == c["ids"], repr(c["text"][:40])


def check(vectors, cases, floor, label, dim):
    assert len(vectors) == len(cases)
    for v, c in zip(vectors, cases):
        assert len(v) == dim
        assert cosine(v, c["embedding"]) >= floor, (label, len(c["ids"]), repr(c["text"][:40]))
    worst = min(cosine(v, c["embedding"]) for v, c in zip(vectors, cases))
    print("%s: %d inputs, min cosine 1 - %.2g" % (label, len(cases), 1.0 - worst))


def openai_vectors(server, texts):
    r = post(server, "/v1/embeddings", {"input": texts})
    assert r.status_code == 200, r.text
    return r, [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]


# The test-only build whose "faulty" backend declares neither grouped K/V
# heads nor a window (make e2e builds it): what a backend without them meets.
FAULTY = os.path.join(os.path.dirname(BIN), "attnserve-faulty")


def start_refused(tmp_path, model, binary=None, **settings):
    """Starts the binary (BIN unless given) with settings; returns (exit
    status, log)."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(dict({"host": "127.0.0.1", "port": free_port(), "threads": 1,
                                    "model": model}, **settings)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    r = subprocess.run([binary or BIN, "--config", str(cfg)], capture_output=True, text=True,
                       timeout=60, env=env)
    return r.returncode, r.stdout + r.stderr


def check_faulty_refused(tmp_path, model, reason):
    """FAULTY with its faulty backend and no other to fall back to stops the
    start (status 2), saying reason."""
    rc, log = start_refused(tmp_path, model, binary=FAULTY, backend="faulty",
                            fallback_backends="faulty")
    assert rc == 2, log
    assert reason in log, log


def info_blocks(server, model_type):
    """The /info entry of the model of model_type: what runs."""
    r = requests.get(server.url("/info"), timeout=10)
    assert r.status_code == 200, r.text
    info = r.json()
    models = info.get("models") or [info.get("model")]
    m = [x for x in models if x and x.get("model_type") == model_type][0]
    return {k: m[k] for k in ("family", "position", "norm", "mlp", "attention", "kv_heads",
                              "window")}


def check_shadow_verification(tmp_path, model, texts, backend="naive"):
    """Every batch's attention checked against the reference (sample rate 1):
    the verifier must carry the problem's grouped heads and window, or it
    would hold the backend to another attention and count mismatches."""
    from conftest import wait_for
    s = Server(str(tmp_path), model=model, backend=backend, fallback_backends=backend,
               verify_sample_rate=1.0, verify_mismatch_threshold=1)
    try:
        for t in texts:
            r = post(s, "/embed", {"inputs": t, "truncate": True})
            assert r.status_code == 200, r.text
        wait_for(lambda: s.metric("attnserve_verify_batches_total", backend=backend)
                 + s.metric("attnserve_verify_skipped_total") >= len(texts),
                 timeout=30, what="every batch checked or skipped")
        m = s.metrics()
        assert m[("attnserve_verify_batches_total", (("backend", backend),))] >= len(texts) // 2
        assert m[("attnserve_verify_mismatches_total", (("backend", backend),))] == 0
    finally:
        s.check_clean_exit(s.stop())

"""An MPNet embedder (model_type "mpnet", as sentence-transformers/
all-mpnet-base-v2) served end to end on the cpu engine.

tests/golden/mpnet-tiny-model (a random-weight MPNetModel whose relative
attention bias steers attention, with an MPNet-layout WordPiece tokenizer,
saved by sentence-transformers with mean pooling, Normalize and
max_seq_length 384) and the vectors sentence-transformers computed with it
(tests/golden/mpnet_embeddings.json), both made by
tests/golden/make_mpnet_model.py. Texts go in as text, so the tokenizer, the
position numbering from padding_idx 1, the relative position buckets (inputs
up to 384 tokens: distances past max_distance 128) and the forward are all
checked, on every attention backend and precision of the cpu engine and on
the cpu-avx512 plugin. Floors: tests/unit/test_model_mpnet.c derives them
(fp32 1 - 1e-6; bf16 GEMMs or bf16 attention 1 - 1e-4) or measures them
(int8 0.999)."""
import json
import math
import os

import pytest
import requests

from conftest import JSON, ROOT, Server, golden, wait_for
from family_serve import serve

MODEL_DIR = os.path.join(ROOT, "tests", "golden", "mpnet-tiny-model")

GOLDEN = golden("mpnet_embeddings.json")
# The empty text is the unit tests' (the API refuses an empty input).
CASES = [c for c in GOLDEN["mean_normalized"] if c["text"]]

# (name, settings, CPU flags needed, floor)
SETTINGS = [
    ("naive", {"backend": "naive"}, None, 1.0 - 1e-6),
    ("fused", {"backend": "fused"}, None, 1.0 - 1e-6),
    ("bf16-attention", {"backend": "bf16"}, "avx512_bf16", 0.9999),
    ("bf16", {"precision": "bf16", "backend": "fused"}, "avx512_bf16", 0.9999),
    ("int8", {"precision": "int8", "backend": "fused"}, "avx512_vnni", 0.999),
    ("cpu-avx512", {"engine": "cpu-avx512", "backend": "fused"},
     "avx512f avx512dq avx512bw avx512vl", 1.0 - 1e-6),
]


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


@pytest.fixture(scope="module", params=SETTINGS, ids=[s[0] for s in SETTINGS])
def served(tmp_path_factory, request):
    name, settings, flags, floor = request.param
    s = serve(tmp_path_factory, MODEL_DIR, name, settings, flags)
    yield s, name, settings, floor
    s.check_clean_exit(s.stop())


def check(vectors, floor, name):
    assert len(vectors) == len(CASES)
    for v, c in zip(vectors, CASES):
        assert len(v) == 32
        assert cosine(v, c["embedding"]) >= floor, (name, len(c["ids"]), repr(c["text"][:40]))
    worst = min(cosine(v, c["embedding"]) for v, c in zip(vectors, CASES))
    print("mpnet e2e %s: %d inputs, min cosine 1 - %.2g" % (name, len(CASES), 1.0 - worst))


def test_openai_embeddings(served):
    s, name, settings, floor = served
    r = post(s, "/v1/embeddings", {"input": [c["text"] for c in CASES]})
    assert r.status_code == 200, r.text
    want = {"x-engine": settings.get("engine", "cpu"),
            "x-precision": settings.get("precision", "fp32"),
            "x-attention-backend": settings["backend"]}
    assert {k: r.headers.get(k) for k in want} == want
    data = sorted(r.json()["data"], key=lambda d: d["index"])
    check([d["embedding"] for d in data], floor, name)


def test_tei_embed_one_at_a_time(served):
    s, name, _, floor = served
    # The longest inputs alone: each batch is one sequence past 128 tokens.
    for c in [c for c in CASES if len(c["ids"]) > 128]:
        r = post(s, "/embed", {"inputs": c["text"], "truncate": True})
        assert r.status_code == 200, r.text
        assert cosine(r.json()[0], c["embedding"]) >= floor, (name, len(c["ids"]))


def test_the_ids_are_the_reference_tokenizers(served):
    s, _, _, _ = served
    short = [c for c in CASES if len(c["ids"]) < 384]
    r = post(s, "/tokenize", {"inputs": [c["text"] for c in short]})
    assert r.status_code == 200, r.text
    for toks, c in zip(r.json(), short):
        assert [t["id"] for t in toks] == c["ids"], repr(c["text"][:40])


@pytest.mark.parametrize("backend", ["fused", "naive"])
def test_shadow_verification_checks_the_bias(tmp_path, backend):
    # The verifier copies the bias with the problem and holds the backend to
    # the reference with it: no mismatch, and the checks did run.
    s = Server(str(tmp_path), model=MODEL_DIR, backend=backend, fallback_backends="naive",
               verify_sample_rate=1.0, verify_mismatch_threshold=1)
    try:
        long_cases = [c for c in CASES if len(c["ids"]) > 128]
        for c in CASES + long_cases:
            r = post(s, "/embed", {"inputs": c["text"], "truncate": True})
            assert r.status_code == 200, r.text
        wait_for(lambda: s.metric("attnserve_verify_batches_total", backend=backend)
                 + s.metric("attnserve_verify_skipped_total") >= len(CASES) + len(long_cases),
                 timeout=30, what="every batch checked or skipped")
        m = s.metrics()
        assert m[("attnserve_verify_batches_total", (("backend", backend),))] >= 5
        assert m[("attnserve_verify_mismatches_total", (("backend", backend),))] == 0
        assert m[("attnserve_backend_fallback_active", ())] == 0
    finally:
        s.check_clean_exit(s.stop())

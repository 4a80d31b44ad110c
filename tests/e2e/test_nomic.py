"""A NomicBERT embedder (model_type "nomic_bert", as
nomic-ai/nomic-embed-text-v1.5) served end to end on the cpu engine:
BERT's post-norm LayerNorms, RoPE, SwiGLU, token types, mean pooling,
Normalize, and the model's search_query prompt.

tests/golden/nomic-bert-tiny-model (a random-weight NomicBertModel saved
under the names of nomic's own code, as the published checkpoint is, with a
WordPiece tokenizer and nomic-embed-text-v1.5's prompts) and the vectors
computed in float64 (tests/golden/nomic_bert_embeddings.json), both made by
tests/golden/make_nomic_bert_model.py. Floors: tests/unit/test_model_nomic.c
(fp32 1 - 1e-6; bf16 1 - 1e-3, measured; int8 0.99, measured)."""
import os

import pytest

from conftest import ROOT, golden
from family_serve import (check, check_shadow_verification, cosine, info_blocks, openai_vectors,
                         post, serve)

MODEL_DIR = os.path.join(ROOT, "tests", "golden", "nomic-bert-tiny-model")
GOLDEN = golden("nomic_bert_embeddings.json")
# The empty text is the unit tests' (the API refuses an empty input).
CASES = [c for c in GOLDEN["mean_normalized"] if c["text"]]
QUERY = [c for c in GOLDEN["query_mean_normalized"] if c["text"]]

SETTINGS = [
    ("naive", {"backend": "naive"}, None, 1.0 - 1e-6),
    ("fused", {"backend": "fused"}, None, 1.0 - 1e-6),
    ("auto", {"backend": "auto"}, None, 1.0 - 1e-6),
    ("bf16", {"precision": "bf16", "backend": "fused"}, "avx512_bf16", 0.999),
    ("int8", {"precision": "int8", "backend": "fused"}, "avx512_vnni", 0.99),
    ("cpu-avx512", {"engine": "cpu-avx512", "backend": "fused"},
     "avx512f avx512dq avx512bw avx512vl", 1.0 - 1e-6),
]


@pytest.fixture(scope="module", params=SETTINGS, ids=[s[0] for s in SETTINGS])
def served(tmp_path_factory, request):
    name, settings, flags, floor = request.param
    s = serve(tmp_path_factory, MODEL_DIR, "nomic", settings, flags)
    yield s, name, settings, floor
    s.check_clean_exit(s.stop())


def test_openai_embeddings(served):
    s, name, settings, floor = served
    r, vectors = openai_vectors(s, [c["text"] for c in CASES])
    want = {"x-engine": settings.get("engine", "cpu"),
            "x-precision": settings.get("precision", "fp32")}
    assert {k: r.headers.get(k) for k in want} == want
    check(vectors, CASES, floor, "nomic_bert e2e " + name, 64)


def test_the_query_prompt_through_prompt_name(served):
    s, name, _, floor = served
    r = post(s, "/embed", {"inputs": [c["text"] for c in QUERY], "prompt_name": "query"})
    assert r.status_code == 200, r.text
    check(r.json(), QUERY, floor, "nomic_bert e2e query prompt " + name, 64)
    # The prompt matters: without it the vectors are the other set's.
    r = post(s, "/embed", {"inputs": QUERY[5]["text"]})
    assert r.status_code == 200, r.text
    assert cosine(r.json()[0], QUERY[5]["embedding"]) < floor


def test_tei_embed_one_at_a_time(served):
    s, name, _, floor = served
    for c in CASES[:6]:
        r = post(s, "/embed", {"inputs": c["text"], "truncate": True})
        assert r.status_code == 200, r.text
        assert cosine(r.json()[0], c["embedding"]) >= floor, (name, len(c["ids"]))


def test_the_ids_are_the_reference_tokenizers(served):
    s, _, _, _ = served
    r = post(s, "/tokenize", {"inputs": [c["text"] for c in CASES]})
    assert r.status_code == 200, r.text
    for toks, c in zip(r.json(), CASES):
        assert [t["id"] for t in toks] == c["ids"], repr(c["text"][:40])


def test_info_says_what_runs(served):
    s, _, _, _ = served
    assert info_blocks(s, "nomic_bert") == {
        "family": "nomic_bert", "position": "rope", "norm": "post-layernorm", "mlp": "swiglu",
        "attention": "bidirectional", "kv_heads": 4, "window": 0}


@pytest.mark.parametrize("backend", ["naive", "fused"])
def test_shadow_verification_agrees(tmp_path, backend):
    check_shadow_verification(tmp_path, MODEL_DIR, [c["text"] for c in CASES[:8]],
                              backend=backend)

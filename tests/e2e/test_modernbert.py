"""A ModernBERT embedder (model_type "modernbert", as
nomic-ai/modernbert-embed-base and Alibaba-NLP/gte-modernbert-base) served
end to end on the cpu engine.

tests/golden/modernbert-tiny-model (a random-weight ModernBertModel: pre-norm
LayerNorms without biases, RoPE with a global and a local θ, GeGLU, two
sliding-window layers of local_attention 16 between full ones, with
ModernBERT's byte-level BPE tokenizer, saved by sentence-transformers with
mean pooling and Normalize) and the vectors computed in float64
(tests/golden/modernbert_embeddings.json), both made by
tests/golden/make_modernbert_model.py. Texts go in as text, so the
tokenizer, RoPE's positions within each sequence of a packed batch, the
window (inputs up to 459 tokens) and the forward are all checked, on every
precision the service accepts for it, on the cpu-avx512 plugin and with the
backend `auto` picks. Floors: tests/unit/test_model_modernbert.c derives or
measures them (fp32 1 - 1e-6; int8 0.99). bf16 is refused at start: the
service accepts bf16 at a cosine of 0.9999 against fp32 on its own
check (server/ops/engine.c), which this tiny random checkpoint misses
(0.9998; the unit test measures its bf16 at 1 - 5.8e-4 against float64)."""
import os

import pytest

from conftest import ROOT, golden
from family_serve import (check_faulty_refused, check_ids, check_openai_embeddings,
                          check_shadow_verification, cosine, info_blocks, post, serve,
                          served_fixture, settings, start_refused)

MODEL_DIR = os.path.join(ROOT, "tests", "golden", "modernbert-tiny-model")

GOLDEN = golden("modernbert_embeddings.json")
# The empty text is the unit tests' (the API refuses an empty input).
CASES = [c for c in GOLDEN["mean_normalized"] if c["text"]]

# Only backends that keep a sliding window run ModernBERT; `auto` must pick
# one.
SETTINGS = settings()
served = served_fixture(MODEL_DIR, "modernbert", SETTINGS)


def test_openai_embeddings(served):
    # Only a backend with the window can serve it, whatever was asked.
    check_openai_embeddings(served, CASES, "modernbert", engine=True)


def test_tei_embed_one_at_a_time(served):
    s, name, _, floor = served
    # The inputs longer than the window alone, each its own batch.
    for c in [c for c in CASES if len(c["ids"]) > 17][:6]:
        r = post(s, "/embed", {"inputs": c["text"], "truncate": True})
        assert r.status_code == 200, r.text
        assert cosine(r.json()[0], c["embedding"]) >= floor, (name, len(c["ids"]))


def test_the_ids_are_the_reference_tokenizers(served):
    check_ids(served, CASES)


def test_info_says_what_runs(served):
    s, _, _, _ = served
    assert info_blocks(s, "modernbert") == {
        "family": "modernbert", "position": "rope", "norm": "pre-layernorm", "mlp": "geglu",
        "attention": "bidirectional", "kv_heads": 4, "window": 8}


def test_bf16_is_refused_below_its_floor(tmp_path):
    if "avx512_bf16" not in open("/proc/cpuinfo").read().split():
        pytest.skip("NOT RUN: this CPU lacks avx512_bf16")
    rc, log = start_refused(tmp_path, MODEL_DIR, precision="bf16", engine="cpu")
    assert rc == 2, log
    assert "bf16: lowest cosine" in log and "below the floor 0.9999" in log, log


def test_a_backend_without_the_window_is_refused_at_start(tmp_path):
    # A backend that cannot keep the window is refused by name: the service
    # falls back to one that can (fallback_backends' default), or, with none
    # to fall back to, stops the start with the reason.
    check_faulty_refused(tmp_path, MODEL_DIR, "backend 'faulty' does not keep a sliding window")


RERANK_DIR = os.path.join(ROOT, "tests", "golden", "modernbert-rerank-tiny")
RERANK = golden("modernbert_rerank_scores.json")["cases"]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    s = serve(tmp_path_factory, RERANK_DIR, "modernbert-rerank", {"backend": "auto"}, None)
    yield s
    s.check_clean_exit(s.stop())


def test_the_cross_encoder_reranks_as_sentence_transformers(reranker):
    # ModernBertForSequenceClassification: logits within 1e-4 of float64
    # (tests/unit/test_model_modernbert.c), scores CrossEncoder's sigmoid.
    worst = 0.0
    for c in RERANK:
        r = post(reranker, "/rerank", {"query": c["text"], "texts": [c["text_pair"]],
                                       "raw_scores": True})
        assert r.status_code == 200, r.text
        worst = max(worst, abs(r.json()[0]["score"] - c["logit"]))
        r = post(reranker, "/rerank", {"query": c["text"], "texts": [c["text_pair"]]})
        assert r.status_code == 200, r.text
        worst = max(worst, abs(r.json()[0]["score"] - c["cross_encoder_score"]))
    assert worst <= 1e-4, worst
    print("modernbert rerank e2e: worst |score - reference| %.2g" % worst)


@pytest.mark.parametrize("backend", ["naive", "fused"])
def test_shadow_verification_agrees(tmp_path, backend):
    check_shadow_verification(tmp_path, MODEL_DIR,
                              [c["text"] for c in CASES if len(c["ids"]) > 17],
                              backend=backend)

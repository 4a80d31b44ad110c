"""An EmbeddingGemma model (model_type "gemma3_text", bidirectional) served
end to end on the cpu engine: Gemma's norms, sliding layers with their own
θ, grouped K/V heads, mean pooling, two Dense modules, Normalize, and the
model's prompts.

tests/golden/gemma3-tiny-model (a random-weight Gemma3TextModel of 2 query
heads over 1 K/V head, saved as google/embeddinggemma-300m is, with its
byte-fallback BPE tokenizer and prompts) and the vectors computed in float64
(tests/golden/gemma3_embeddings.json), both made by
tests/golden/make_gemma3_model.py. Floors: tests/unit/test_model_gemma3.c
(fp32 1 - 1e-6; bf16 1 - 1e-3, measured; int8 0.99). The service accepts
bf16 for it (its start-up check against fp32 passes 0.9999)."""
import os

import pytest

from conftest import ROOT, golden
from family_serve import (check, check_faulty_refused, check_ids, check_openai_embeddings,
                          check_shadow_verification, info_blocks, post, served_fixture, settings)

MODEL_DIR = os.path.join(ROOT, "tests", "golden", "gemma3-tiny-model")
GOLDEN = golden("gemma3_embeddings.json")
CASES = [c for c in GOLDEN["mean_normalized"] if c["text"]]
QUERY = [c for c in GOLDEN["query_mean_normalized"] if c["text"]]
DOCUMENT = [c for c in GOLDEN["document_mean_normalized"] if c["text"]]

SETTINGS = settings(bf16=0.999)
served = served_fixture(MODEL_DIR, "gemma3", SETTINGS)


def test_openai_embeddings(served):
    check_openai_embeddings(served, CASES, "gemma3")


@pytest.mark.parametrize("prompt", ["query", "document"])
def test_the_prompts_through_prompt_name(served, prompt):
    s, name, _, floor = served
    cases = QUERY if prompt == "query" else DOCUMENT
    r = post(s, "/embed", {"inputs": [c["text"] for c in cases], "prompt_name": prompt})
    assert r.status_code == 200, r.text
    check(r.json(), cases, floor, "gemma3 e2e %s prompt %s" % (prompt, name), 64)


def test_the_ids_are_the_reference_tokenizers(served):
    check_ids(served, CASES)


def test_info_says_what_runs(served):
    s, _, _, _ = served
    assert info_blocks(s, "gemma3_text") == {
        "family": "gemma3", "position": "rope", "norm": "pre- and post-rmsnorm (gemma)",
        "mlp": "geglu (tanh)", "attention": "bidirectional", "kv_heads": 1, "window": 8}


def test_a_backend_without_the_window_is_refused_at_start(tmp_path):
    check_faulty_refused(tmp_path, MODEL_DIR, "backend 'faulty' does not")


@pytest.mark.parametrize("backend", ["naive", "fused"])
def test_shadow_verification_agrees(tmp_path, backend):
    check_shadow_verification(tmp_path, MODEL_DIR,
                              [c["text"] for c in CASES if len(c["ids"]) > 17],
                              backend=backend)

"""A Qwen3-Embedding model (model_type "qwen3") served end to end on the cpu
engine: causal attention, grouped K/V heads, last-token pooling and the
model's `query` prompt.

tests/golden/qwen3-tiny-model (a random-weight Qwen3 of 4 query heads over 2
K/V heads of head_dim 32, saved as Qwen3-Embedding is: Qwen3ForCausalLM,
last-token pooling, Normalize, config_sentence_transformers.json's query
prompt, a byte-level BPE whose template appends <|endoftext|>) and the
vectors computed in float64 (tests/golden/qwen3_embeddings.json), both made
by tests/golden/make_qwen3_model.py. Floors: tests/unit/test_model_qwen3.c
(fp32 1 - 1e-6; int8 0.99). bf16's measured floor (1 - 1e-3) is below the
service's 0.9999 acceptance check on this tiny random checkpoint, so bf16 is
refused at start (as test_modernbert.py shows for ModernBERT)."""
import os

import pytest

from conftest import ROOT, golden
from family_serve import (check, check_faulty_refused, check_ids, check_openai_embeddings,
                          check_shadow_verification, cosine, info_blocks, openai_vectors, post,
                          served_fixture, settings)

MODEL_DIR = os.path.join(ROOT, "tests", "golden", "qwen3-tiny-model")
GOLDEN = golden("qwen3_embeddings.json")
CASES = [c for c in GOLDEN["lasttoken_normalized"] if c["text"]]
QUERY = [c for c in GOLDEN["query_lasttoken_normalized"] if c["text"]]

SETTINGS = settings()
served = served_fixture(MODEL_DIR, "qwen3", SETTINGS)


def test_openai_embeddings(served):
    # Only a backend with grouped K/V heads can serve it, whatever was asked.
    check_openai_embeddings(served, CASES, "qwen3")


def test_the_query_prompt_through_prompt_name(served):
    s, name, _, floor = served
    r = post(s, "/embed", {"inputs": [c["text"] for c in QUERY], "prompt_name": "query"})
    assert r.status_code == 200, r.text
    check(r.json(), QUERY, floor, "qwen3 e2e query prompt " + name, 64)
    # The prompt is the model's: a text sent with it by hand is the same vector.
    prompt = GOLDEN["prompts"]["query"]
    _, joined = openai_vectors(s, [prompt + QUERY[0]["text"]])
    assert cosine(joined[0], QUERY[0]["embedding"]) >= floor


def test_the_ids_are_the_reference_tokenizers(served):
    check_ids(served, CASES)


def test_info_says_what_runs(served):
    s, _, _, _ = served
    assert info_blocks(s, "qwen3") == {
        "family": "qwen3", "position": "rope", "norm": "pre-rmsnorm", "mlp": "swiglu",
        "attention": "causal", "kv_heads": 2, "window": 0}


def test_a_backend_without_grouped_heads_is_refused_at_start(tmp_path):
    check_faulty_refused(tmp_path, MODEL_DIR, "backend 'faulty' does not group query heads")



@pytest.mark.parametrize("backend", ["naive", "fused"])
def test_shadow_verification_agrees(tmp_path, backend):
    check_shadow_verification(tmp_path, MODEL_DIR,
                              [c["text"] for c in CASES if len(c["ids"]) > 17],
                              backend=backend)

"""Task heads and sentence-transformers modules served end to end.

The tiny random-weight models of tests/golden/make_task_models.py and the
outputs transformers and sentence-transformers computed with them
(tests/golden/task_outputs.json). Embedders (Dense + max pooling,
mean_sqrt_len pooling + Dense, lasttoken pooling) go in as text, so the
service's tokenizer, the forward and the modules are all checked against
sentence-transformers, on the floor tests/unit/test_task_models.c derives.
A classifier is served too: /info describes it, and the embedding routes
refuse it in their own error shape, 424 as TEI does (its logits are the
rerank and predict routes' business: tests/e2e/test_rerank.py)."""
import json
import math
import os

import pytest
import requests

from conftest import JSON, ROOT, Server, assert_error, golden

GOLDEN_DIR = os.path.join(ROOT, "tests", "golden")
MIN_COSINE = 1.0 - 1e-6

GOLDEN = golden("task_outputs.json")

EMBEDDERS = sorted(GOLDEN["embedders"])


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def norm(a):
    return math.sqrt(sum(x * x for x in a))


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


@pytest.fixture(scope="module", params=EMBEDDERS)
def embedder(tmp_path_factory, request):
    name = request.param
    s = Server(str(tmp_path_factory.mktemp(name)), model=os.path.join(GOLDEN_DIR, name))
    yield name, s
    s.check_clean_exit(s.stop())


def check(name, vectors, cases, scale=True):
    want = GOLDEN["embedders"][name]
    assert len(vectors) == len(cases)
    worst = 1.0
    for v, c in zip(vectors, cases):
        assert len(v) == want["output_dim"]
        cs = cosine(v, c["embedding"])
        worst = min(worst, cs)
        assert cs >= MIN_COSINE, (name, c["text"][:40], 1.0 - cs)
        # The scale too (mean and mean_sqrt_len differ only in it): within
        # what the cosine floor allows a vector's relative error.
        rel = abs(norm(v) / norm(c["embedding"]) - 1.0)
        assert not scale or rel <= math.sqrt(2 * (1 - MIN_COSINE)), (name, c["text"][:40], rel)
    print("%s e2e: %d inputs, min cosine 1 - %.2g" % (name, len(cases), 1.0 - worst))


def test_openai_embeddings(embedder):
    name, server = embedder
    cases = [c for c in GOLDEN["embedders"][name]["cases"] if c["text"]]
    r = post(server, "/v1/embeddings", {"input": [c["text"] for c in cases]})
    assert r.status_code == 200, r.text
    data = sorted(r.json()["data"], key=lambda d: d["index"])
    # OpenAI's vectors are unit length whatever the model's modules.
    assert all(abs(norm(d["embedding"]) - 1.0) < 1e-6 for d in data)
    check(name, [d["embedding"] for d in data], cases, scale=GOLDEN["embedders"][name]["normalize"])


def test_tei_embed(embedder):
    """TEI's /embed normalises or not as asked, whatever the model's modules
    say (as TEI does): asking what the model's Normalize module would do
    gives sentence-transformers' output, norm included."""
    name, server = embedder
    want = GOLDEN["embedders"][name]
    # An empty text is refused on every route (test_compat.py says how).
    cases = [c for c in want["cases"] if c["text"]]
    r = post(server, "/embed",
             {"inputs": [c["text"] for c in cases], "truncate": True,
              "normalize": want["normalize"]})
    assert r.status_code == 200, r.text
    check(name, r.json(), cases)


def test_info_describes_the_modules(embedder):
    name, server = embedder
    want = GOLDEN["embedders"][name]
    info = requests.get(server.url("/info"), timeout=10).json()
    assert info["model_type"] == {"embedding": {"pooling": want["pooling"]}}
    model = info["model"]
    assert model["task"] == "embed"
    assert model["output_dim"] == want["output_dim"]
    assert model["pooling"] == want["pooling"]
    assert model["normalize"] == want["normalize"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("cls")), model=os.path.join(GOLDEN_DIR, "bert-cls-tiny"))
    yield s
    s.check_clean_exit(s.stop())


def test_classifier_info(classifier):
    model = requests.get(classifier.url("/info"), timeout=10).json()["model"]
    assert model["task"] == "classify"
    assert model["architecture"] == "BertForSequenceClassification"
    assert model["labels"] == ["negative", "neutral", "positive"]
    assert model["output_dim"] == 3
    assert model["token_types"] is True
    assert model["problem_type"] == "single_label_classification"
    # TEI's shape: a classifier with its label maps (a reranker has one label).
    info = requests.get(classifier.url("/info"), timeout=10).json()
    assert info["model_type"] == {"classifier": {
        "id2label": {"0": "negative", "1": "neutral", "2": "positive"},
        "label2id": {"negative": 0, "neutral": 1, "positive": 2}}}


def test_cross_encoder_is_a_reranker_in_tei_info(tmp_path):
    s = Server(str(tmp_path), model=os.path.join(GOLDEN_DIR, "xlmr-cls-tiny"))
    try:
        info = requests.get(s.url("/info"), timeout=10).json()
        assert info["model_type"] == {"reranker": {"id2label": {"0": "LABEL_0"},
                                                   "label2id": {"LABEL_0": 0}}}
        assert info["model"]["task"] == "classify" and info["model"]["token_types"] is False
    finally:
        s.check_clean_exit(s.stop())


@pytest.mark.parametrize("path,body", [
    ("/v1/embeddings", {"input": "a sentence"}),
    ("/embed", {"inputs": "a sentence"}),
    ("/embeddings", {"input": ["a sentence"]}),
])
def test_embedding_routes_refuse_a_classifier(classifier, path, body):
    r = post(classifier, path, body)
    # TEI's status for a model that does not do the route's task.
    err = assert_error(r, 424)
    assert "is a classifier (BertForSequenceClassification, 3 labels)" in err["message"], err
    # The service keeps serving.
    assert requests.get(classifier.url("/health"), timeout=10).status_code == 200

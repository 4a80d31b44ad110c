"""A RoBERTa embedder with a byte-level BPE tokenizer served end to end.

tests/golden/roberta-tiny-model (a random-weight RobertaModel with the
byte-level BPE of tests/golden/roberta-tiny, saved by sentence-transformers)
and the vectors sentence-transformers computed with it
(tests/golden/roberta_embeddings.json), both made by
tests/golden/make_roberta_model.py. Texts go in as text, so the service's
byte-level BPE, RobertaProcessing, the position numbering from the padding
index and the forward are all checked; the floor is the one the XLM-R tests
use (test_model_xlmr.c derives it for this model size).

Left truncation is checked against the reference tokenizer with
truncation_side "left", on long runs of newlines among others: byte-level
BPE gives whitespace pieces empty offset spans, which once made the service
count the specials wrong and write past the id buffer. Run this file under
the AddressSanitizer build too (make SANITIZE=address,undefined, then
tests/e2e/run.sh build-san-address-undefined/attnserve -k roberta)."""
import json
import math
import os

import pytest
import requests

from conftest import JSON, ROOT, Server, golden

MODEL_DIR = os.path.join(ROOT, "tests", "golden", "roberta-tiny-model")
MIN_COSINE = 1.0 - 1e-6

GOLDEN = golden("roberta_embeddings.json")
CASES = GOLDEN["mean_normalized"]
LEFT = GOLDEN["left_truncated"]


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


def check(vectors, cases):
    assert len(vectors) == len(cases)
    for v, c in zip(vectors, cases):
        assert len(v) == 64
        assert cosine(v, c["embedding"]) >= MIN_COSINE, repr(c["text"][:40])
    worst = min(cosine(v, c["embedding"]) for v, c in zip(vectors, cases))
    print("roberta e2e: %d inputs, min cosine 1 - %.2g" % (len(cases), 1.0 - worst))


@pytest.fixture(scope="module", params=["naive", "fused"])
def server(tmp_path_factory, request):
    s = Server(str(tmp_path_factory.mktemp("roberta")), model=MODEL_DIR, backend=request.param)
    yield s
    s.check_clean_exit(s.stop())


def test_openai_embeddings(server):
    r = post(server, "/v1/embeddings", {"input": [c["text"] for c in CASES]})
    assert r.status_code == 200, r.text
    data = sorted(r.json()["data"], key=lambda d: d["index"])
    check([d["embedding"] for d in data], CASES)


def test_tei_embed(server):
    r = post(server, "/embed", {"inputs": [c["text"] for c in CASES], "truncate": True})
    assert r.status_code == 200, r.text
    check(r.json(), CASES)


def test_the_ids_are_the_reference_tokenizers(server):
    r = post(server, "/tokenize", {"inputs": [c["text"] for c in CASES[:-1]]})
    assert r.status_code == 200, r.text
    for toks, c in zip(r.json(), CASES[:-1]):
        assert [t["id"] for t in toks] == c["ids"], repr(c["text"][:40])


def test_left_truncation(server):
    r = post(server, "/embed", {"inputs": [c["text"] for c in LEFT], "truncate": True,
                                "truncation_direction": "Left"})
    assert r.status_code == 200, r.text
    check(r.json(), LEFT)
    # One at a time as well: each request's buffer sized for that input alone.
    for c in LEFT:
        r = post(server, "/embed", {"inputs": c["text"], "truncate": True,
                                    "truncation_direction": "Left"})
        assert r.status_code == 200, r.text
        assert cosine(r.json()[0], c["embedding"]) >= MIN_COSINE, repr(c["text"][:40])
    # Right truncation of an input with other words at its two ends is
    # another vector: the direction is used.
    differs = [c for c in LEFT if c["text"].startswith("start ")]
    assert differs
    r = post(server, "/embed", {"inputs": differs[0]["text"], "truncate": True})
    assert r.status_code == 200, r.text
    assert cosine(r.json()[0], differs[0]["embedding"]) < MIN_COSINE

"""The instant test engine (tests/engines/instant.c), what make bench-frontend
measures the front end with: named from build/test-engines it starts on the
real model's description, says in its start log and /info that it is a test
engine, and answers /v1/embeddings at the model's width with unit vectors
that depend on the input only (the same across requests, encodings,
restarts and precisions, different for different inputs); it refuses what it
does not compute (a classifier at init, per-token hidden states per
request) by the engine contract's means."""
import base64
import json
import math
import os
import struct

import requests

from conftest import JSON, ROOT
from test_engine import broken_plugins, info, run_bin

TEXTS = ["The quick brown fox jumps over the lazy dog near the river bank.",
         "A second, different sentence about tokenizers and HTTP servers.",
         "The quick brown fox jumps over the lazy dog near the river bank."]


def start_instant(start_server, **settings):
    return start_server(plugin_dir=broken_plugins(), engine="instant", **settings)


def embed(s, texts, **fields):
    r = requests.post(s.url("/v1/embeddings"), headers=JSON, timeout=30,
                      data=json.dumps(dict({"input": texts}, **fields)))
    assert r.status_code == 200, r.text
    assert r.headers["x-engine"] == "instant"
    return [d["embedding"] for d in r.json()["data"]]


def test_answers_checkable_vectors_at_the_models_width(start_server):
    s = start_instant(start_server)
    i = info(s)["engine"]
    assert i["name"] == "instant" and i["summary"].startswith("TEST ONLY"), i
    assert i["weights_owned_bytes"] == 0 and i["weights_mapped_bytes"] == 0
    log = s.log_text()
    assert "engine started engine=instant summary=\"TEST ONLY" in log, log
    vecs = embed(s, TEXTS)
    assert [len(v) for v in vecs] == [384] * 3  # all-MiniLM-L6-v2's width
    for v in vecs:
        assert abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-5
    assert vecs[0] == vecs[2] and vecs[0] != vecs[1]
    assert embed(s, TEXTS[:2]) == vecs[:2], "not deterministic across requests"
    b64 = embed(s, TEXTS, encoding_format="base64")
    assert [list(struct.unpack("<384f", base64.b64decode(v))) for v in b64] == \
        [[struct.unpack("<f", struct.pack("<f", x))[0] for x in v] for v in vecs]


def test_same_vectors_after_a_restart_in_another_precision(start_server):
    a = embed(start_instant(start_server), TEXTS)
    s = start_instant(start_server, precision="int8")
    i = info(s)["engine"]
    # The start-up check of a reduced precision ran, against instant in
    # fp32: its vectors do not depend on the precision.
    assert i["precision"] == "int8" and i["precision_check"].startswith("int8: lowest cosine 1.0")
    assert embed(s, TEXTS) == a


def test_refuses_what_it_does_not_compute(start_server, tmp_path):
    s = start_instant(start_server)
    r = requests.post(s.url("/embed_all"), headers=JSON, timeout=30,
                      data=json.dumps({"inputs": TEXTS[0]}))
    assert r.status_code == 422 and "does not expose per-token hidden states" in r.text, r.text
    p = run_bin(tmp_path, "--plugin_dir=" + broken_plugins(), "--engine=instant",
                "--model=" + os.path.join(ROOT, "tests", "golden", "bert-cls-tiny"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "the instant engine serves embedders only" in p.stdout + p.stderr

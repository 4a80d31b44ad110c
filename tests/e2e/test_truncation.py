"""Truncation as sentence-transformers does it: max_seq_length from the
model's sentence_bert_config.json (256) by default, raised by the
max_seq_length setting up to max_position_embeddings (512), shown on /info;
TEI's truncation_direction Left/Right on /embed. The golden vectors are
sentence-transformers' own (tests/golden/make_golden.py): a default call,
the same at 512, and with the tokenizer's truncation_side "left"."""
import json
import math
import subprocess

import requests

from conftest import BIN, JSON, assert_error, free_port, golden, MODEL_DIR

GOLDEN = golden("embeddings.json.gz")
CASES = GOLDEN["mean_normalized"]
LONG_512 = GOLDEN["long_512"]
LONG_LEFT = GOLDEN["long_left"]
MIN_COSINE = 0.99999


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def embed(server, texts, **fields):
    r = requests.post(server.url("/embed"), data=json.dumps(dict(fields, inputs=texts)),
                      headers=JSON, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_golden_sets_are_what_truncation_changes():
    assert GOLDEN["max_tokens"] == 256 and GOLDEN["full_tokens"] == 512
    assert LONG_512 and [c["text"] for c in LONG_512] == [c["text"] for c in LONG_LEFT]
    by_text = {c["text"]: c for c in CASES}
    for long, left in zip(LONG_512, LONG_LEFT):
        cut = by_text[long["text"]]
        assert len(cut["ids"]) == 256 and 256 < len(long["ids"]) <= 512
        assert cut["ids"][:255] == long["ids"][:255] and cut["ids"][-1] == long["ids"][-1]
        assert len(left["ids"]) == 256 and left["ids"][0] == cut["ids"][0]
        assert left["ids"][-1] == cut["ids"][-1] and left["ids"][1:] != cut["ids"][1:]


def test_default_is_the_models_max_seq_length(start_server):
    s = start_server()
    model = requests.get(s.url("/info"), timeout=10).json()["model"]
    assert (model["max_seq_length"], model["max_seq_length_model"], model["max_length"]) == \
        (256, 256, 512)
    longs = [c for c in CASES if len(c["ids"]) == 256]
    assert longs
    got = embed(s, [c["text"] for c in longs])
    for v, c in zip(got, longs):
        assert cosine(v, c["embedding"]) >= MIN_COSINE, c["text"][:40]
    r = requests.post(s.url("/v1/embeddings"), json={"input": longs[0]["text"]}, timeout=60)
    assert r.json()["usage"]["total_tokens"] == 256
    # Truncation off: an input over max_seq_length is refused, saying so.
    err = assert_error(requests.post(s.url("/embed"), json={"inputs": longs[0]["text"],
                                                            "truncate": False}, timeout=60), 422)
    assert "max_seq_length is 256" in err["message"]


def test_max_seq_length_raised_to_the_models_maximum(start_server):
    s = start_server(max_seq_length=512)
    model = requests.get(s.url("/info"), timeout=10).json()["model"]
    assert model["max_seq_length"] == 512 and model["max_seq_length_model"] == 256
    got = embed(s, [c["text"] for c in LONG_512])
    for v, c in zip(got, LONG_512):
        assert cosine(v, c["embedding"]) >= MIN_COSINE, c["text"][:40]


def test_truncation_direction(start_server):
    s = start_server()
    texts = [c["text"] for c in LONG_LEFT]
    for direction in ("Left", "left"):
        got = embed(s, texts, truncation_direction=direction)
        for v, c in zip(got, LONG_LEFT):
            assert cosine(v, c["embedding"]) >= MIN_COSINE, (direction, c["text"][:40])
    by_text = {c["text"]: c for c in CASES}
    for direction in ("Right", "right", None):
        got = embed(s, texts[:2], truncation_direction=direction)
        for v, t in zip(got, texts[:2]):
            assert cosine(v, by_text[t]["embedding"]) >= MIN_COSINE, direction
    short = embed(s, "short text", truncation_direction="Left")
    assert short == embed(s, "short text")
    for bad, status in (("Middle", 422), ("LEFT", 422), (1, 400), (True, 400)):
        err = assert_error(requests.post(s.url("/embed"), json={"inputs": "x",
                                         "truncation_direction": bad}, timeout=60), status)
        assert "truncation_direction" in err["message"]


def test_max_seq_length_beyond_the_model_is_refused_at_start(tmp_path):
    for value in (513, 2):
        cfg = tmp_path / "cfg.json"
        cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "threads": 1,
                                   "model": MODEL_DIR, "max_seq_length": value}))
        p = subprocess.run([BIN, "--config", str(cfg)], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 2, (value, p.returncode, p.stderr[-2000:])
        assert "max_seq_length" in p.stdout + p.stderr

"""A Split pattern that backtracks past PCRE2's match limit on a request's
text is the request's error: 422 in the route's own shape (TEI's Tokenizer
error on TEI's routes), not the 500 of an out-of-memory tokenizer, and the
service goes on serving.

Served with a copy of tests/golden/xlmr-tiny-model whose pre-tokenizer gets
a Split on (a+)+b in front: 30 a's then "cb" make it backtrack some 2^30
times, past PCRE2's default match limit (10 million)."""
import json
import os
import shutil

import requests

from conftest import JSON, ROOT

XLMR_DIR = os.path.join(ROOT, "tests", "golden", "xlmr-tiny-model")


def complex_model(tmp_path):
    d = str(tmp_path / "split-model")
    shutil.copytree(XLMR_DIR, d)
    path = os.path.join(d, "tokenizer.json")
    with open(path) as f:
        tok = json.load(f)
    split = {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated",
             "invert": False}
    tok["pre_tokenizer"]["pretokenizers"].insert(0, split)
    with open(path, "w") as f:
        json.dump(tok, f)
    return d


def test_too_complex_for_the_pattern_is_a_client_error(start_server, tmp_path):
    srv = start_server(model=complex_model(tmp_path))
    bad = "a" * 30 + "cb"
    r = requests.post(srv.url("/embed"), json={"inputs": ["fine", bad]}, timeout=60)
    assert r.status_code == 422, (r.status_code, r.text[:300])
    err = r.json()  # TEI's shape
    assert "too complex" in err["error"] and "input 1" in err["error"], err
    assert err["error_type"] == "Tokenizer", err

    r = requests.post(srv.url("/v1/embeddings"), data=json.dumps({"input": bad}), headers=JSON,
                      timeout=60)
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert "too complex" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "invalid_value_error", r.text[:300]

    # The service goes on; the pattern still cuts a text it can finish.
    r = requests.post(srv.url("/embed"), json={"inputs": ["aaab fine"]}, timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()[0]) == 64

"""The tokenizers' scratch (Unigram/BPE, and WordPiece's mark run below) is
charged to the request-memory budget (max_request_memory_bytes) end to end.

The pipeline normalizes the text between added tokens whole, as Hugging
Face `tokenizers` does, with about 208 bytes of scratch per normalized
character (model/tokenizer.h): a 3 MB body of plain words needs some 600 MB.
That scratch comes from the budget's allocator, so with a 32 MiB budget the
request is refused with the budget's 413 (it alone needs more than the
budget) in the route's error shape, nothing stays charged, and the service
goes on serving; an input whose scratch fits is answered. Served with
tests/golden/xlmr-tiny-model (SentencePiece Unigram, Precompiled)."""
import json
import os

import requests

from conftest import JSON, ROOT

XLMR_DIR = os.path.join(ROOT, "tests", "golden", "xlmr-tiny-model")
BUDGET = 32 << 20
MAX_BODY = 4 << 20


def test_a_large_input_is_refused_not_allocated(start_server):
    srv = start_server(model=XLMR_DIR, max_request_memory_bytes=BUDGET, max_body_bytes=MAX_BODY)
    text = "word " * 600000  # 3 MB: within max_body_bytes, ~600 MB to normalize
    body = json.dumps({"inputs": [text], "truncate": True})
    r = requests.post(srv.url("/embed"), data=body, headers=JSON, timeout=120)
    assert r.status_code == 413, (r.status_code, r.text[:300])
    err = r.json()  # TEI's shape: {"error": ..., "error_type": ...}
    assert "max_request_memory_bytes" in err["error"], err
    assert srv.metric("attnserve_request_memory_bytes") == 0
    assert srv.metric("attnserve_request_memory_peak_bytes") <= BUDGET

    # OpenAI's route refuses it in OpenAI's shape.
    body = json.dumps({"input": text})
    r = requests.post(srv.url("/v1/embeddings"), data=body, headers=JSON, timeout=120)
    assert r.status_code == 413, (r.status_code, r.text[:300])
    assert "max_request_memory_bytes" in r.json()["error"]["message"]

    # 20 kB of text needs ~4 MB of scratch: answered, truncated to the model.
    r = requests.post(srv.url("/embed"), json={"inputs": ["word " * 4000], "truncate": True},
                      timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()[0]) == 64
    assert srv.metric("attnserve_request_memory_bytes") == 0


def test_a_wordpiece_run_of_marks_is_charged(start_server):
    """WordPiece's combining-mark run is scratch of the same budget: a body
    of 1,000,000 U+1D165 (a spacing mark of class 216 that strip_accents
    keeps, so all of it waits in one run) grows the run's two arrays to a
    million 12-byte characters each, about 38 MB while the last doubling
    holds old and new: past a 32 MiB budget, so the 413, where an uncharged
    run would have been answered. Served with the default WordPiece model
    (uncased, so strip_accents)."""
    srv = start_server(max_request_memory_bytes=BUDGET, max_body_bytes=2 * MAX_BODY)
    marks = "a" + "\U0001D165" * 1000000  # 4 MB of UTF-8
    body = json.dumps({"inputs": [marks], "truncate": True}, ensure_ascii=False).encode()
    r = requests.post(srv.url("/embed"), data=body, headers=JSON, timeout=120)
    assert r.status_code == 413, (r.status_code, r.text[:300])
    assert "max_request_memory_bytes" in r.json()["error"]
    assert srv.metric("attnserve_request_memory_bytes") == 0

    # 20,000 marks need about 1.5 MB of run: answered, one [UNK] word.
    small = json.dumps({"inputs": ["a" + "\U0001D165" * 20000]}, ensure_ascii=False).encode()
    r = requests.post(srv.url("/embed"), data=small, headers=JSON, timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert srv.metric("attnserve_request_memory_bytes") == 0

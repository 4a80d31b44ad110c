"""Long inputs on a long-context family: 8,192 tokens in one text.

ModernBERT has no position table (RoPE), so the tiny checkpoint
(tests/golden/modernbert-tiny-model) takes 8,192 positions by its
config.json alone: max_position_embeddings and sentence_bert_config's
max_seq_length set to 8,192, as modernbert-embed-base ships them. Served
with the default max_batch_tokens (16,384), one text of ~8,000 tokens is
answered by fused (its local layers skip the key tiles outside the window)
as naive answers it, within the fp32 floor; a longer one is cut at 8,192
with truncation and refused without; resident memory stays below the
worst case /info reports (not under AddressSanitizer, whose allocator
keeps freed memory). No float64 golden at this length: the check is two
backends of different summation orders agreeing, and the short inputs'
goldens (test_modernbert.py) hold the model itself to transformers."""
import json
import os
import shutil

import pytest
import requests

from conftest import ROOT, Server, asan_build, vm_hwm
from family_serve import cosine, post

LONG = 8192
WORDS = ("the river city light energy report students university morning market music "
         "history garden winter bridge language science ocean mountain village").split()


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("modernbert-8k") / "model"
    shutil.copytree(os.path.join(ROOT, "tests", "golden", "modernbert-tiny-model"), d)
    for name, key in (("config.json", "max_position_embeddings"),
                      ("sentence_bert_config.json", "max_seq_length")):
        cfg = json.loads((d / name).read_text())
        cfg[key] = LONG
        (d / name).write_text(json.dumps(cfg))
    return str(d)


def text_of(words):
    return " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(words))


def ntokens(server, text):
    r = post(server, "/tokenize", {"inputs": text})
    assert r.status_code == 200, r.text
    return len(r.json()[0])


def embed(server, text, truncate):
    return requests.post(server.url("/embed"), json={"inputs": text, "truncate": truncate},
                         timeout=600)


def test_an_8k_token_text_on_fused_and_naive(tmp_path_factory, long_model):
    vectors = {}
    for backend in ("fused", "naive"):
        s = Server(str(tmp_path_factory.mktemp(backend)), model=long_model, backend=backend,
                   fallback_backends=backend, max_batch_tokens=16384, request_timeout_ms=600000)
        try:
            info = requests.get(s.url("/info"), timeout=10).json()
            assert info["max_input_length"] == LONG, info["max_input_length"]
            text = text_of(1550)  # about five tokens a word in this small vocabulary
            n = ntokens(s, text)
            assert 7000 <= n <= LONG, n
            r = embed(s, text, False)
            assert r.status_code == 200, r.text
            assert r.headers.get("x-attention-backend") == backend
            vectors[backend] = r.json()[0]

            if backend == "fused":
                # Longer than the positions: cut at 8,192 with truncation,
                # refused by name without it (the same path on any backend).
                longer = text_of(2000)
                assert ntokens(s, longer) > LONG
                assert embed(s, longer, True).status_code == 200
                err = embed(s, longer, False)
                assert err.status_code in (413, 422), err.text
                assert "8192" in err.text, err.text

            worst = info["memory"]["worst_case_bytes"]
            hwm = vm_hwm(s.proc.pid)
            print("%s: %d tokens, VmHWM %.1f MiB, worst case %.1f MiB" % (
                backend, n, hwm / 2**20, worst / 2**20))
            if not asan_build(s.proc.pid):
                assert hwm < worst, "peak RSS %d above the worst case %d" % (hwm, worst)
        finally:
            s.check_clean_exit(s.stop())
    c = cosine(vectors["fused"], vectors["naive"])
    print("fused vs naive at 8k tokens: 1 - %.2g" % (1.0 - c))
    assert c >= 1.0 - 1e-6, c

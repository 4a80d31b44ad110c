"""The service picks its tokenizer from the model directory's tokenizer.json
(model.type): a SentencePiece Unigram tokenizer (tests/golden/xlmr-tiny, a
real nmt_nfkc model converted by transformers) serves /tokenize with the ids
and byte offsets of Hugging Face `tokenizers` (tests/golden/unigram_cases.json.gz),
and a tokenizer.json with a piece it does not implement stops the start with
status 2 and a message naming that piece. The weights are the default
model's: its vocabulary is larger than the tiny tokenizer's, so it loads."""
import json
import os
import subprocess

import pytest
import requests

from conftest import BIN, MODEL_DIR, Server, free_port, golden

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
XLMR = os.path.join(ROOT, "tests", "golden", "xlmr-tiny", "tokenizer.json")


def model_with_tokenizer(tmp_path, name, tokenizer_json):
    """MODEL_DIR's files (linked) with tokenizer_json (text) in place of its
    tokenizer.json and no vocab.txt."""
    d = tmp_path / name
    d.mkdir()
    for f in os.listdir(MODEL_DIR):
        if f not in ("tokenizer.json", "vocab.txt"):
            os.symlink(os.path.join(MODEL_DIR, f), d / f)
    (d / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    return d


def test_unigram_tokenizer_serves_tokenize(tmp_path):
    with open(XLMR, encoding="utf-8") as f:
        model = model_with_tokenizer(tmp_path, "xlmr", f.read())
    cases = golden("unigram_cases.json.gz")["cases"]
    # The chosen multilingual cases that are not empty and have no NUL (JSON
    # carries it, but keep the request plain).
    picked = [c for c in cases[:100] if c["text"].strip() and "\x00" not in c["text"]]
    assert len(picked) > 60
    s = Server(str(tmp_path), model=str(model))
    try:
        r = requests.post(s.url("/tokenize"), timeout=30,
                          json={"inputs": [c["text"] for c in picked],
                                "add_special_tokens": True})
        assert r.status_code == 200, r.text
        got = r.json()
        assert len(got) == len(picked)
        for c, toks in zip(picked, got):
            assert [t["id"] for t in toks] == c["ids"], c["text"]
            spans = [[t["start"], t["stop"]] if not t["special"] else [0, 0] for t in toks]
            assert spans == c["offsets"], c["text"]
        r = requests.post(s.url("/embed"), timeout=30,
                          json={"inputs": ["Бързата кафява лисица", "Ndzi tsakile ku mi vona"]})
        assert r.status_code == 200, r.text
    finally:
        s.check_clean_exit(s.stop())


def start(tmp_path, model):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "threads": 1}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run([BIN, "--config", str(cfg), "--model=" + str(model)],
                          capture_output=True, text=True, timeout=60, env=env)


def with_piece(key, value):
    with open(XLMR, encoding="utf-8") as f:
        tj = json.load(f)
    tj[key] = value
    return json.dumps(tj)


REFUSED = {
    "wordlevel_model": (json.dumps({"model": {"type": "WordLevel", "vocab": {}}}),
                  "model type WordLevel is not supported"),
    "nmt": (with_piece("normalizer", {"type": "Nmt"}), "normalizer Nmt is not supported"),
    # Oniguruma's \w holds marks that PCRE2's does not: refused, not approximated.
    "split_word_class": (with_piece("pre_tokenizer", {"type": "Split",
                                                      "pattern": {"Regex": "\\w+"},
                                                      "behavior": "Isolated", "invert": False}),
                         "\\w is not supported"),
    "decoder": (with_piece("decoder", {"type": "CTC"}), "decoder CTC is not supported"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unsupported_tokenizer_piece_stops_the_start(tmp_path, case):
    text, want = REFUSED[case]
    p = start(tmp_path, model_with_tokenizer(tmp_path, case, text))
    assert p.returncode == 2, p.stdout + p.stderr
    assert want in p.stdout + p.stderr

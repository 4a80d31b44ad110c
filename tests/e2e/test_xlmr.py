"""An XLM-RoBERTa embedder served end to end.

tests/golden/xlmr-tiny-model (a random-weight XLMRobertaModel with a real
SentencePiece tokenizer, saved by sentence-transformers) and the vectors
sentence-transformers computed with it (tests/golden/xlmr_embeddings.json),
both made by tests/golden/make_xlmr_model.py. Texts go in as text, so the
service's own tokenizer, the position numbering from the padding index and
the forward are all checked; the floor is the unit test's (test_model_xlmr.c
derives it)."""
import json
import math
import os

import pytest
import requests

from conftest import JSON, ROOT, Server, golden

XLMR_DIR = os.path.join(ROOT, "tests", "golden", "xlmr-tiny-model")
MIN_COSINE = 1.0 - 1e-6

GOLDEN = golden("xlmr_embeddings.json")
CASES = GOLDEN["mean_normalized"]


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


def check(vectors, cases=CASES):
    assert len(vectors) == len(cases)
    worst = min(cosine(v, c["embedding"]) for v, c in zip(vectors, cases))
    for v, c in zip(vectors, cases):
        assert len(v) == 64
        assert cosine(v, c["embedding"]) >= MIN_COSINE, c["text"][:40]
    print("xlmr e2e: %d inputs, min cosine 1 - %.2g" % (len(cases), 1.0 - worst))


@pytest.fixture(scope="module", params=["naive", "fused"])
def server(tmp_path_factory, request):
    s = Server(str(tmp_path_factory.mktemp("xlmr")), model=XLMR_DIR, backend=request.param)
    yield s
    s.check_clean_exit(s.stop())


def test_openai_embeddings(server):
    cases = [c for c in CASES if c["text"]]  # OpenAI refuses an empty string
    r = post(server, "/v1/embeddings", {"input": [c["text"] for c in cases]})
    assert r.status_code == 200, r.text
    data = sorted(r.json()["data"], key=lambda d: d["index"])
    check([d["embedding"] for d in data], cases)


def test_tei_embed(server):
    cases = [c for c in CASES if c["text"]]  # an empty text is refused on every route
    r = post(server, "/embed", {"inputs": [c["text"] for c in cases], "truncate": True})
    assert r.status_code == 200, r.text
    check(r.json(), cases)


def test_token_ids_in(server):
    """Ids the Hugging Face tokenizer made, <pad> inside included, give the
    same vectors: the positions come from the ids, as in HF."""
    padded = [c for c in CASES if 1 in c["ids"]]
    assert padded, "no golden input holds the padding id"
    r = post(server, "/embed", {"inputs": [c["ids"] for c in padded]})
    assert r.status_code == 200, r.text
    for v, c in zip(r.json(), padded):
        assert cosine(v, c["embedding"]) >= MIN_COSINE


def test_the_length_limit_is_the_position_table_less_the_offset(server):
    """130 position rows, padding index 1: 128 tokens fit, 129 do not."""
    r = requests.get(server.url("/info"), timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["max_input_length"] == GOLDEN["max_tokens"] == 128
    longest = max(CASES, key=lambda c: len(c["ids"]))
    r = post(server, "/embed", {"inputs": longest["text"], "truncate": False})
    assert 400 <= r.status_code < 500, r.text
    r = post(server, "/embed", {"inputs": [longest["ids"]]})
    assert r.status_code == 200, r.text
    assert cosine(r.json()[0], longest["embedding"]) >= MIN_COSINE


def test_llama_tokenize_counts_a_text_with_more_tokens_than_bytes(server):
    """NFKC makes U+FDFA's three bytes eighteen characters: llama.cpp's
    /tokenize must give all of its tokens, as the tokenizers library does,
    not refuse it for having more tokens than a guess from its length."""
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(XLMR_DIR, "tokenizer.json"))
    hf.no_padding()
    hf.no_truncation()
    for text in ["\ufdfa", "\ufdfa\ufdfa a"]:
        want = hf.encode(text, add_special_tokens=False).ids
        assert len(want) > len(text.encode()) + 3, want  # past the length's guess
        r = post(server, "/tokenize", {"content": text})
        assert r.status_code == 200, r.text
        assert r.json() == {"tokens": want}
        r = post(server, "/tokenize", {"content": text, "add_special": True})
        assert r.status_code == 200, r.text
        assert r.json() == {"tokens": hf.encode(text).ids}


def test_decode_uses_the_models_own_decoder(server):
    """/decode (TEI) and /detokenize (llama.cpp) give the text the tokenizers
    library's decode gives: SentencePiece's U+2581 turned back into spaces,
    not WordPiece's rules applied to pieces that are not WordPiece's."""
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(XLMR_DIR, "tokenizer.json"))
    text = "Embeddings map sentences to vectors, and back."
    ids = hf.encode(text).ids
    for skip in (True, False):
        r = post(server, "/decode", {"ids": ids, "skip_special_tokens": skip})
        assert r.status_code == 200, r.text
        assert r.json() == [hf.decode(ids, skip_special_tokens=skip)]
    assert "\u2581" not in r.json()[0]
    r = post(server, "/detokenize", {"tokens": ids})
    assert r.status_code == 200, r.text
    assert r.json() == {"content": hf.decode(ids, skip_special_tokens=False)}

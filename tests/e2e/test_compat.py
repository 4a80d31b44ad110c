"""The routes of Text Embeddings Inference, Infinity and llama.cpp's server, in
their shapes, against the golden vectors of sentence-transformers and the
tokenizer of Hugging Face `tokenizers` (tests/e2e/requirements.txt)."""
import json
import math
import os

import pytest
import requests

from conftest import JSON, MODEL_DIR, Server, assert_error, golden

GOLDEN = golden("embeddings.json.gz")
# Whole texts under any max_seq_length the service may cut at (the model's
# sentence_bert_config.json says 256).
CASES = [c for c in GOLDEN["mean_normalized"] if c["text"] and len(c["ids"]) <= 256]
EMPTY = [c for c in GOLDEN["mean_normalized"] if not c["text"]][0]
TOKENIZER_CASES = golden("tokenizer_cases.json.gz")["cases"]
DIM = len(CASES[0]["embedding"])
MIN_COSINE = 0.99999


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def post(server, path, body, timeout=60):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=timeout)


def ok(r):
    assert r.status_code == 200, r.text
    return r.json()


def tei_error(r, status, etype=None):
    """TEI's error shape, exactly; with etype, that error_type."""
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error", "error_type"}, body
    assert body["error_type"] in ("Unhealthy", "Backend", "Overloaded", "Validation",
                                  "Tokenizer", "Empty")
    assert etype is None or body["error_type"] == etype, body
    assert isinstance(body["error"], str) and body["error"]
    return body


def golden(v, case, what):
    assert len(v) == DIM
    c = cosine(v, case["embedding"])
    assert c >= MIN_COSINE, "%s: %r cosine %.8f" % (what, case["text"][:40], c)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("compat")), backend="fused")
    yield s
    s.check_clean_exit(s.stop())


@pytest.fixture(scope="module")
def hf_tokenizer():
    from tokenizers import Tokenizer
    t = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    t.no_padding()
    t.no_truncation()
    return t


# ---- TEI: /embed and its aliases ---------------------------------------------------

@pytest.mark.parametrize("path", ["/embed", "/", "/invocations"])
def test_embed_golden(server, path):
    out = ok(post(server, path, {"inputs": [c["text"] for c in CASES[:8]]}))
    assert len(out) == 8
    for v, c in zip(out, CASES):
        golden(v, c, path)
        assert abs(norm(v) - 1) < 1e-5
    one = ok(post(server, path, {"inputs": CASES[0]["text"]}))
    assert len(one) == 1
    golden(one[0], CASES[0], path + " single")


def test_embed_token_ids_and_mixed_inputs(server):
    c0, c1 = CASES[0], CASES[1]
    out = ok(post(server, "/embed", {"inputs": c0["ids"]}))
    golden(out[0], c0, "ids")
    out = ok(post(server, "/embed", {"inputs": [c0["text"], c1["ids"], EMPTY["ids"]]}))
    golden(out[0], c0, "mixed text")
    golden(out[1], c1, "mixed ids")
    golden(out[2], EMPTY, "[CLS] [SEP]")
    # The ids of an empty text are sent as ids; the empty string itself is
    # refused, as TEI's tokenizer refuses an empty input (its Empty, 400).
    # A text of spaces is a text, as TEI tokenizes it: [CLS] [SEP].
    golden(ok(post(server, "/embed", {"inputs": "   "}))[0], EMPTY, "spaces")


def test_empty_text_is_refused_on_every_route(server):
    """An empty text is TEI's Empty 400 on TEI's routes, OpenAI's 400
    invalid_request_error on the others, wherever it stands in the batch."""
    for path, body in [("/embed", {"inputs": ""}), ("/embed", {"inputs": ["a", ""]}),
                       ("/", {"inputs": ""}), ("/embed_all", {"inputs": [""]}),
                       ("/similarity", {"inputs": {"source_sentence": "", "sentences": ["a"]}}),
                       ("/similarity", {"inputs": {"source_sentence": "a", "sentences": [""]}}),
                       ("/tokenize", {"inputs": ""})]:
        assert "empty" in tei_error(post(server, path, body), 400, "Empty")["error"]
    for path, body in [("/v1/embeddings", {"input": ""}), ("/embeddings", {"input": ["a", ""]}),
                       ("/embedding", {"content": ""}),
                       ("/v1/embed", {"texts": [""]})]:
        r = post(server, path, body)
        assert r.status_code == 400, (path, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and "empty" in err["message"], (path, err)


def test_embed_normalize_false_and_dimensions(server):
    text = CASES[5]["text"]
    raw = ok(post(server, "/embed", {"inputs": text, "normalize": False}))[0]
    unit = ok(post(server, "/embed", {"inputs": text}))[0]
    assert abs(norm(raw) - 1) > 1e-3  # mean pooling is not unit-norm
    assert max(abs(a / norm(raw) - b) for a, b in zip(raw, unit)) < 1e-6
    cut = ok(post(server, "/embed", {"inputs": text, "dimensions": 16}))[0]
    assert len(cut) == 16 and abs(norm(cut) - 1) < 1e-6
    head = unit[:16]
    assert max(abs(a - b / norm(head)) for a, b in zip(cut, head)) < 1e-6
    cut_raw = ok(post(server, "/embed", {"inputs": text, "dimensions": 16, "normalize": False}))[0]
    assert max(abs(a - b) for a, b in zip(cut_raw, raw[:16])) < 1e-6
    # null is absent
    out = ok(post(server, "/embed", {"inputs": text, "dimensions": None, "truncate": None,
                                     "prompt_name": None, "truncation_direction": None}))[0]
    assert max(abs(a - b) for a, b in zip(out, unit)) < 1e-6
    tei_error(post(server, "/embed", {"inputs": text, "dimensions": DIM + 1}), 422)
    tei_error(post(server, "/embed", {"inputs": text, "dimensions": 0}), 422)


def test_truncation_direction(server, hf_tokenizer):
    """A text past the model's length, cut on either side, is the vector of
    the ids Hugging Face's tokenizer gives with the same truncation."""
    long = " ".join(c["text"] for c in CASES) * 2
    limit = ok(requests.get(server.url("/info"), timeout=5))["max_input_length"]
    for side in ("right", "left"):
        t = hf_tokenizer
        t.enable_truncation(max_length=limit, direction=side)
        ids = t.encode(long).ids
        t.no_truncation()
        want = ok(post(server, "/v1/embeddings", {"input": [ids]}))["data"][0]["embedding"]
        for spelled in (side, side.capitalize()):
            got = ok(post(server, "/embed", {"inputs": long, "truncate": True,
                                             "truncation_direction": spelled}))[0]
            assert cosine(got, want) > 0.999999, side
    left = ok(post(server, "/embed", {"inputs": long, "truncation_direction": "left"}))[0]
    right = ok(post(server, "/embed", {"inputs": long}))[0]
    assert cosine(left, right) < 0.99
    tei_error(post(server, "/embed", {"inputs": long, "truncate": False}), 422)
    tei_error(post(server, "/embed", {"inputs": "x", "truncation_direction": "up"}), 422)
    tei_error(post(server, "/embed", {"inputs": "x", "truncation_direction": 1}), 400)


def test_prompts_from_the_model_configuration(tmp_path, start_server):
    """prompt_name picks a prompt of config_sentence_transformers.json,
    default_prompt_name applies when none is named; the prompt is prepended
    to the text, so the vector is the one of the joined text."""
    model = tmp_path / "model"
    model.mkdir()
    for name in os.listdir(MODEL_DIR):
        if name != "config_sentence_transformers.json":
            os.symlink(os.path.join(MODEL_DIR, name), model / name)
    (model / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "},
         "default_prompt_name": "passage"}))
    s = start_server(model=str(model))
    text = CASES[2]["text"]

    def plain(t):
        return ok(post(s, "/v1/embeddings", {"input": t}))["data"][0]["embedding"]

    q = ok(post(s, "/embed", {"inputs": text, "prompt_name": "query"}))[0]
    assert cosine(q, plain("query: " + text)) > 0.999999
    d = ok(post(s, "/embed", {"inputs": text}))[0]
    assert cosine(d, plain("passage: " + text)) > 0.999999
    sim = ok(post(s, "/similarity", {"inputs": {"source_sentence": text, "sentences": [text]},
                                     "parameters": {"prompt_name": "query"}}))
    assert abs(sim[0] - 1) < 1e-5
    body = tei_error(post(s, "/embed", {"inputs": text, "prompt_name": "nope"}), 422)
    assert "nope" in body["error"]


def test_embed_errors_in_tei_shape(server):
    assert tei_error(post(server, "/embed", {"inputs": []}), 400, "Empty")
    tei_error(post(server, "/embed", {}), 400, "Validation")
    tei_error(post(server, "/embed", {"inputs": "x", "normalise": True}), 400, "Validation")
    tei_error(post(server, "/embed", {"inputs": [[999999]]}), 422, "Validation")
    r = requests.post(server.url("/embed"), data="{", headers=JSON, timeout=5)
    tei_error(r, 400)
    r = requests.post(server.url("/embed"), data="{}", timeout=5)
    tei_error(r, 415)
    r = requests.get(server.url("/embed"), timeout=5)
    tei_error(r, 405)


# The same refusals on /embed and on /v1/embeddings: (TEI's body, OpenAI's body,
# status, TEI's error_type, OpenAI's type). The statuses are those of TEI's
# router (TEI 1.9 and later: Validation 422, Tokenizer 422, Empty 400), which
# agree with OpenAI's route here; only the error's type tells Empty from a
# malformed body on TEI's route.
TEI_STATUS_CASES = [
    ({"inputs": ["a"] * 2049}, {"input": ["a"] * 2049}, 422, "Validation",
     "invalid_value_error"),
    ({"inputs": "word " * 600, "truncate": False}, None, 422, "Validation", "invalid_value_error"),
    ({"inputs": "x", "dimensions": DIM + 1}, {"input": "x", "dimensions": DIM + 1}, 422,
     "Validation", "invalid_value_error"),
    ({"inputs": "x", "prompt_name": "nope"}, None, 422, "Validation", "invalid_value_error"),
    ({"inputs": []}, {"input": []}, 400, "Empty", "invalid_request_error"),
    ({"inputs": 3}, {"input": 3}, 400, "Validation", "invalid_request_error"),
    ({"inputs": "x", "normalize": "yes"}, {"input": "x", "dimensions": "8"}, 400, "Validation",
     "invalid_request_error"),
]


@pytest.mark.parametrize("tei, openai, status, tei_type, openai_type", TEI_STATUS_CASES)
def test_tei_statuses_and_types(server, tei, openai, status, tei_type, openai_type):
    tei_error(post(server, "/embed", tei), status, tei_type)
    if openai is not None:
        r = post(server, "/v1/embeddings", openai)
        assert r.status_code == status, (r.status_code, r.text)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        assert err["type"] == openai_type and err["code"] == status, err


def test_tei_empty_batches_are_empty(server):
    """Each TEI route's empty batch is TEI's Empty 400, as TEI's router
    answers "`inputs` cannot be empty" and its kin."""
    for path, body in [("/embed", {"inputs": []}), ("/embed_all", {"inputs": []}),
                       ("/tokenize", {"inputs": []}), ("/decode", {"ids": []}),
                       ("/similarity", {"inputs": {"source_sentence": "a", "sentences": []}})]:
        tei_error(post(server, path, body), 400, "Empty")
    # llama.cpp's route shares /embed's decoding and keeps OpenAI's shape.
    r = post(server, "/embedding", {"content": []})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text


def test_embed_all_is_what_pooling_averages(server):
    """Every token's vector, the special ones included: their mean is the
    pooled vector (mean pooling), and there is one per token."""
    cases = CASES[:3]
    out = ok(post(server, "/embed_all", {"inputs": [c["text"] for c in cases]}))
    raw = ok(post(server, "/embed", {"inputs": [c["text"] for c in cases], "normalize": False}))
    assert len(out) == len(cases)
    for tokens, pooled, c in zip(out, raw, cases):
        assert len(tokens) == len(c["ids"])
        assert all(len(t) == DIM for t in tokens)
        mean = [sum(col) / len(tokens) for col in zip(*tokens)]
        assert max(abs(a - b) for a, b in zip(mean, pooled)) < 1e-5
    one = ok(post(server, "/embed_all", {"inputs": cases[0]["ids"]}))
    assert len(one) == 1 and len(one[0]) == len(cases[0]["ids"])
    tei_error(post(server, "/embed_all", {"inputs": "x", "normalize": True}), 400)


# ---- TEI: /similarity, /decode, /tokenize, /info, health ----------------------------------

def test_similarity(server):
    src, others = CASES[0], CASES[1:6]
    sim = ok(post(server, "/similarity", {"inputs": {"source_sentence": src["text"],
                                                     "sentences": [c["text"] for c in others]}}))
    assert len(sim) == len(others)
    for s, c in zip(sim, others):
        assert abs(s - cosine(src["embedding"], c["embedding"])) < 1e-4
    sim = ok(post(server, "/similarity", {"inputs": {"source_sentence": src["text"],
                                                     "sentences": [src["text"]]},
                                          "parameters": None}))
    assert abs(sim[0] - 1) < 1e-5
    tei_error(post(server, "/similarity", {"inputs": {"source_sentence": "a",
                                                      "sentences": []}}), 400, "Empty")
    tei_error(post(server, "/similarity", {"inputs": "a"}), 400, "Validation")


def test_decode_as_tokenizers_does(server, hf_tokenizer):
    cases = [c for c in TOKENIZER_CASES if c["ids"]][:120]
    for skip in (True, False):
        out = ok(post(server, "/decode", {"ids": [c["ids"] for c in cases],
                                          "skip_special_tokens": skip}))
        for got, c in zip(out, cases):
            want = hf_tokenizer.decode(c["ids"], skip_special_tokens=skip)
            assert got == want, (c["text"][:60], got, want)
    one = ok(post(server, "/decode", {"ids": cases[0]["ids"]}))
    assert one == [hf_tokenizer.decode(cases[0]["ids"])]
    tei_error(post(server, "/decode", {"ids": [10 ** 9]}), 422, "Validation")
    tei_error(post(server, "/decode", {"ids": []}), 400, "Empty")


def test_tokenize_both_shapes(server, hf_tokenizer):
    text = "Hello, world! Héllo"
    tei = ok(post(server, "/tokenize", {"inputs": text}))
    assert [t["id"] for t in tei[0]] == hf_tokenizer.encode(text).ids
    llama = ok(post(server, "/tokenize", {"content": text}))
    assert llama == {"tokens": hf_tokenizer.encode(text, add_special_tokens=False).ids}
    llama = ok(post(server, "/tokenize", {"content": text, "add_special": True,
                                          "with_pieces": True}))
    enc = hf_tokenizer.encode(text)
    assert llama["tokens"] == [{"id": i, "piece": p} for i, p in zip(enc.ids, enc.tokens)]
    # Special tokens written in the text are read as such, as tokenizers does.
    llama = ok(post(server, "/tokenize", {"content": "a [SEP] b", "parse_special": True}))
    assert llama["tokens"] == hf_tokenizer.encode("a [SEP] b", add_special_tokens=False).ids
    assert_error(post(server, "/tokenize", {"content": "a", "parse_special": False}), 422)
    # Errors in the shape of the API the body speaks.
    tei_error(post(server, "/tokenize", {"inputs": 5}), 400)
    assert_error(post(server, "/tokenize", {"content": 5}), 400)


def test_info_has_tei_fields_beside_ours(server):
    info = ok(requests.get(server.url("/info"), timeout=5))
    assert info["model_id"] == info["model"]["name"] == info["served_model_name"]
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["model_dtype"] == "float32"
    assert info["max_input_length"] > 0
    assert info["max_batch_tokens"] == info["limits"]["max_batch_tokens"]
    assert info["max_client_batch_size"] == info["limits"]["max_inputs_per_request"]
    assert info["tokenization_workers"] >= 1 and isinstance(info["auto_truncate"], bool)
    assert info["version"] and info["backend"] and info["memory"]  # ours stay


def test_ping_and_root_health(server):
    for path in ("/ping", "/"):
        r = requests.get(server.url(path), timeout=5)
        assert r.status_code == 200, (path, r.text)


# ---- Infinity ---------------------------------------------------------------------------

def test_infinity_embeddings_and_models(server):
    body = ok(post(server, "/embeddings", {"input": [c["text"] for c in CASES[:3]],
                                           "model": "all-MiniLM-L6-v2"}))
    assert body["object"] == "list"
    for d, c in zip(body["data"], CASES):
        golden(d["embedding"], c, "/embeddings")
    models = ok(requests.get(server.url("/models"), timeout=5))
    assert models["object"] == "list" and len(models["data"]) == 1
    m = models["data"][0]
    assert m["id"] == body["model"] and m["object"] == "model"
    assert "embed" in m["capabilities"]


# ---- llama.cpp ---------------------------------------------------------------------------

def test_llama_embedding(server):
    texts = [c["text"] for c in CASES[:3]]
    out = ok(post(server, "/embedding", {"content": texts}))
    assert [o["index"] for o in out] == [0, 1, 2]
    for o, c in zip(out, CASES):
        assert len(o["embedding"]) == 1  # one pooled vector, in a list
        golden(o["embedding"][0], c, "/embedding")
        assert abs(norm(o["embedding"][0]) - 1) < 1e-5
    raw = ok(post(server, "/embedding", {"content": texts[0], "embd_normalize": -1}))[0]
    raw = raw["embedding"][0]
    unit = [x / norm(raw) for x in raw]
    golden(unit, CASES[0], "embd_normalize -1")
    taxi = ok(post(server, "/embedding", {"input": texts[0], "embd_normalize": 1}))
    v = taxi[0]["embedding"][0]
    assert abs(sum(abs(x) for x in v) - 1) < 1e-4
    mx = ok(post(server, "/embedding", {"content": texts[0], "embd_normalize": 0}))
    v = mx[0]["embedding"][0]
    assert abs(max(abs(x) for x in v) - 32760) < 0.1
    p3 = ok(post(server, "/embedding", {"content": texts[0], "embd_normalize": 3}))
    v = p3[0]["embedding"][0]
    assert abs(sum(abs(x) ** 3 for x in v) - 1) < 1e-4
    assert_error(post(server, "/embedding", {"embd_normalize": 2}), 400)


def test_llama_detokenize(server, hf_tokenizer):
    ids = hf_tokenizer.encode("Hello, world! It's fine.", add_special_tokens=False).ids
    out = ok(post(server, "/detokenize", {"tokens": ids}))
    assert out == {"content": hf_tokenizer.decode(ids, skip_special_tokens=False)}
    assert_error(post(server, "/detokenize", {"tokens": "x"}), 400)

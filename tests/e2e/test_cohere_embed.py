"""Cohere's embed, POST /v1/embed and POST /v2/embed, through Cohere's own SDK
(cohere.Client and cohere.ClientV2, unchanged) and as raw bodies: the float
vectors against sentence-transformers' golden vectors, the quantized types
against sentence-transformers' quantize_embeddings with the stated ranges
[-1, 1] (tests/golden/quantized.json.gz, made by make_quantized.py from the
same golden vectors), input_type as the model's prompts, truncate, and the
errors in the shape of Cohere's other route here, /v1/rerank."""
import base64
import json
import math
import os
import struct

import numpy as np
import pytest
import requests

from conftest import JSON, MODEL_DIR, Server, assert_error, golden

QUANTIZED = golden("quantized.json.gz")
CASES = QUANTIZED["cases"]
ALIAS = "embed-english-v3.0"
MIN_COSINE = 0.99999
QUANTIZED_TYPES = ("int8", "uint8", "binary", "ubinary")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("cohere")), backend="fused", model_aliases=ALIAS)
    yield s
    s.check_clean_exit(s.stop())


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


def ok(r):
    assert r.status_code == 200, r.text
    return r.json()


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def check_floats(vectors, cases, what):
    assert len(vectors) == len(cases), what
    for v, c in zip(vectors, cases):
        assert cosine(v, c["float"]) >= MIN_COSINE, (what, c["text"][:40])
        assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5, what


def st_buckets(floats):
    """quantize_embeddings' formula with ranges [-1, 1] (float32, as numpy
    runs it); checked against the real function on every golden vector in
    test_the_formula_is_sentence_transformers before it explains anything."""
    v = np.asarray(floats, dtype=np.float32)
    start = np.float32(-1)
    step = (np.float32(1) - start) / np.float32(255)
    return np.clip(np.floor((v - start) / step), 0, 255).astype(np.int64)


def st_quantize(floats, precision):
    q = st_buckets(floats)
    bits = np.packbits(np.asarray(floats, dtype=np.float32) > 0).astype(np.int64)
    return {"uint8": q, "int8": q - 128, "ubinary": bits, "binary": bits - 128}[precision].tolist()


def test_the_formula_is_sentence_transformers():
    for c in CASES:
        for p in QUANTIZED_TYPES:
            assert st_quantize(c["float"], p) == c[p], (p, c["text"][:40])


def check_quantized(by_type, cases, what):
    """Each quantized vector: quantize_embeddings' own answer on the golden
    vector wherever the service's float and the golden float fall in the
    same bucket (or on the same side of 0), and the bucket of the service's
    float where they straddle an edge: the answer is quantize_embeddings of
    the vector the service computed, which is the golden one to 1e-5."""
    floats = by_type["float"]
    for p in QUANTIZED_TYPES:
        assert len(by_type[p]) == len(cases), (what, p)
        straddles = 0
        for v, got, c in zip(floats, by_type[p], cases):
            mine = st_quantize(v, p)
            assert got == mine, (what, p, c["text"][:40])
            straddles += sum(a != b for a, b in zip(mine, c[p]))
        # A bucket is 2/255 wide and the two floats differ by about 1e-7:
        # an edge between them is rare, never the rule.
        assert straddles <= len(cases) * 2, (what, p, straddles)


@pytest.fixture(scope="module")
def v1(server):
    import cohere
    return cohere.Client(base_url=server.url(""), api_key="unused", timeout=60)


@pytest.fixture(scope="module")
def v2(server):
    import cohere
    return cohere.ClientV2(base_url=server.url(""), api_key="unused", timeout=60)


# ---- Cohere's SDK ----------------------------------------------------------------------

def test_sdk_v1_floats(v1):
    cases = CASES[:12]
    r = v1.embed(texts=[c["text"] for c in cases], model=ALIAS, input_type="search_document")
    assert r.response_type == "embeddings_floats"
    check_floats(r.embeddings, cases, "v1 floats")
    assert r.texts == [c["text"] for c in cases]
    assert r.meta.api_version.version == "1"
    assert r.meta.billed_units.input_tokens > len(cases)


def test_sdk_v1_every_type(v1):
    cases = CASES[:20]
    r = v1.embed(texts=[c["text"] for c in cases], model=ALIAS, input_type="search_query",
                 embedding_types=["float", "int8", "uint8", "binary", "ubinary"])
    assert r.response_type == "embeddings_by_type"
    e = r.embeddings
    by_type = {"float": e.float_, "int8": e.int8, "uint8": e.uint8, "binary": e.binary,
               "ubinary": e.ubinary}
    check_floats(by_type["float"], cases, "v1 by type")
    check_quantized(by_type, cases, "v1")


def test_sdk_v2_every_type(v2):
    cases = CASES
    r = v2.embed(texts=[c["text"] for c in cases], model=ALIAS, input_type="classification",
                 embedding_types=["float", "int8", "uint8", "binary", "ubinary", "base64"])
    e = r.embeddings
    by_type = {"float": e.float_, "int8": e.int8, "uint8": e.uint8, "binary": e.binary,
               "ubinary": e.ubinary}
    check_floats(by_type["float"], cases, "v2")
    check_quantized(by_type, cases, "v2")
    for text, f in zip(e.base64, e.float_):
        raw = base64.b64decode(text)
        # The JSON floats are float32's shortest text: equal as float32.
        assert list(struct.unpack("<%df" % (len(raw) // 4), raw)) == \
            [float(np.float32(x)) for x in f]
    assert r.texts == [c["text"] for c in cases]
    assert r.meta.api_version.version == "2"


def test_sdk_v2_inputs_and_default_float(v2):
    from cohere import EmbedInput, TextEmbedContent
    cases = CASES[3:6]
    inputs = [EmbedInput(content=[TextEmbedContent(text=c["text"])]) for c in cases]
    r = v2.embed(inputs=inputs, model=ALIAS, input_type="search_document")
    assert r.embeddings.int8 is None
    check_floats(r.embeddings.float_, cases, "v2 inputs")


def test_sdk_errors_are_raised(v2):
    import cohere
    with pytest.raises(cohere.core.api_error.ApiError) as e:
        v2.embed(texts=[""], model=ALIAS, input_type="search_query")
    assert e.value.status_code == 400
    with pytest.raises(cohere.core.api_error.ApiError) as e:
        v2.embed(texts=["x"], model="no-such-model", input_type="search_query")
    assert e.value.status_code == 404


# ---- the bodies ------------------------------------------------------------------------

def test_v1_raw_shapes(server):
    body = ok(post(server, "/v1/embed", {"texts": ["a b c"]}))
    assert set(body) == {"id", "embeddings", "texts", "meta", "response_type"}
    assert body["id"].startswith("embed-")
    assert body["response_type"] == "embeddings_floats"
    assert isinstance(body["embeddings"][0][0], float) and len(body["embeddings"][0]) == 384
    assert body["meta"] == {"api_version": {"version": "1"},
                            "billed_units": {"input_tokens": 5}}
    typed = ok(post(server, "/v1/embed", {"texts": ["a b c"], "embedding_types": ["binary"]}))
    assert typed["response_type"] == "embeddings_by_type"
    assert set(typed["embeddings"]) == {"binary"} and len(typed["embeddings"]["binary"][0]) == 48
    v2 = ok(post(server, "/v2/embed", {"texts": ["a b c"], "input_type": "clustering"}))
    assert set(v2["embeddings"]) == {"float"}
    assert v2["embeddings"]["float"] == body["embeddings"]


def test_output_dimension_cuts_and_renormalises(server):
    full = ok(post(server, "/v2/embed", {"texts": ["x y"], "input_type": "search_query"}))
    cut = ok(post(server, "/v2/embed", {"texts": ["x y"], "input_type": "search_query",
                                        "output_dimension": 64,
                                        "embedding_types": ["float", "ubinary"]}))
    f, c = full["embeddings"]["float"][0], cut["embeddings"]["float"][0]
    assert len(c) == 64 and len(cut["embeddings"]["ubinary"][0]) == 8
    n = math.sqrt(sum(x * x for x in f[:64]))
    assert max(abs(a - b / n) for a, b in zip(c, f[:64])) < 1e-6
    assert cut["embeddings"]["ubinary"][0] == st_quantize(c, "ubinary")


def test_truncate(server, tmp_path):
    long = " ".join(["word"] * 400)
    end = ok(post(server, "/v1/embed", {"texts": [long, " ".join(["word"] * 254)]}))
    assert end["embeddings"][0] == end["embeddings"][1]  # END keeps the first 254 pieces
    start = ok(post(server, "/v1/embed", {"texts": [long + " end"], "truncate": "START"}))
    plain = ok(post(server, "/v1/embed", {"texts": [" ".join(["word"] * 253) + " end"]}))
    assert cosine(start["embeddings"][0], plain["embeddings"][0]) > 0.999999
    err = assert_error(post(server, "/v1/embed", {"texts": [long], "truncate": "NONE"}), 422,
                       "invalid_value_error")
    assert "max_seq_length" in err["message"]


def test_input_type_is_the_models_prompt(tmp_path, start_server):
    model = tmp_path / "model"
    model.mkdir()
    for name in os.listdir(MODEL_DIR):
        if name != "config_sentence_transformers.json":
            os.symlink(os.path.join(MODEL_DIR, name), model / name)
    (model / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "}}))
    s = start_server(model=str(model))
    text = CASES[2]["text"]

    def cohere(input_type):
        return ok(post(s, "/v2/embed", {"texts": [text], "input_type": input_type}))[
            "embeddings"]["float"][0]

    def plain(t):
        return ok(post(s, "/v1/embeddings", {"input": t}))["data"][0]["embedding"]

    assert cosine(cohere("search_query"), plain("query: " + text)) > 0.999999
    assert cosine(cohere("search_document"), plain("passage: " + text)) > 0.999999
    # No prompt of that name (and no default): the text alone.
    assert cosine(cohere("clustering"), plain(text)) > 0.999999
    assert cosine(cohere("search_query"), plain(text)) < 0.9999


@pytest.mark.parametrize("path,body,status,param,words", [
    ("/v2/embed", {"texts": ["x"]}, 400, "input_type", "missing field"),
    ("/v1/embed", {}, 400, None, "texts"),
    ("/v1/embed", {"texts": "x"}, 400, "texts", "array of strings"),
    ("/v1/embed", {"texts": []}, 400, "texts", "empty"),
    ("/v1/embed", {"texts": ["a", ""]}, 400, "texts", "empty string"),
    ("/v1/embed", {"texts": ["a", 3]}, 400, "texts", "texts[1]"),
    ("/v1/embed", {"texts": ["a"], "embedding_types": ["int4"]}, 400, "embedding_types", "int8"),
    ("/v1/embed", {"texts": ["a"], "truncate": "MIDDLE"}, 422, "truncate", "END"),
    ("/v1/embed", {"texts": ["a"], "input_type": "search"}, 422, "input_type", "search_query"),
    ("/v1/embed", {"texts": ["a"], "images": ["data:x"]}, 422, "images", "not images"),
    ("/v1/embed", {"texts": ["a"], "input_type": "image"}, 422, "input_type", "not images"),
    ("/v1/embed", {"texts": ["a"], "dimensions": 3}, 400, None, "unknown field"),
    ("/v2/embed", {"texts": ["a"], "inputs": [], "input_type": "clustering"}, 400, None, "both"),
    ("/v2/embed", {"inputs": [{"content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                   "input_type": "clustering"}, 422, "inputs", "not image_url"),
    ("/v2/embed", {"inputs": [{"content": []}], "input_type": "clustering"}, 400, "inputs",
     "one part"),
    ("/v2/embed", {"texts": ["a"], "input_type": "clustering", "output_dimension": 385}, 422,
     "output_dimension", "1..384"),
    ("/v2/embed", {"texts": ["a"], "input_type": "clustering", "max_tokens": 8}, 422,
     "max_tokens", "max_seq_length"),
])
def test_errors(server, path, body, status, param, words):
    err = assert_error(post(server, path, body), status)
    assert words in err["message"], err
    if param:
        assert err["param"] == param, err


def test_unknown_model(server):
    r = post(server, "/v1/embed", {"texts": ["a"], "model": "nope"})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "model_not_found" and err["param"] == "model" and "nope" in err["message"]


def test_priority_is_read(server):
    ok(post(server, "/v2/embed", {"texts": ["a"], "input_type": "clustering", "priority": 3}))

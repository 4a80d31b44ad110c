"""OpenAI's embeddings API as its clients use it: /v1/embeddings always
unit-norm, `model` checked against the served model and its aliases (404
model_not_found otherwise, unless accept_any_model), GET /v1/models and
/v1/models/{id}, null as absent for every optional field, error bodies with
`param`, and tiktoken ids (LangChain's default) refused with a clear 422."""
import json
import math
import os

import requests

from conftest import JSON, MODEL_DIR, assert_error

NAME = os.path.basename(MODEL_DIR)


def post(server, body, path="/v1/embeddings"):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_model_names_and_models_routes(start_server):
    s = start_server(model_aliases="text-embedding-3-small, sentence-transformers/all-MiniLM-L6-v2")
    for name in (NAME, "text-embedding-3-small", "sentence-transformers/all-MiniLM-L6-v2"):
        r = post(s, {"input": "hello", "model": name})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == name
    assert post(s, {"input": "hello"}).status_code == 200  # absent: the served model
    for name in ("text-embedding-ada-002", "", NAME.upper(), " text-embedding-3-small"):
        r = post(s, {"input": "hello", "model": name})
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["code"] == "model_not_found" and err["param"] == "model", err
        assert err["type"] and "does not exist" in err["message"]
    models = requests.get(s.url("/v1/models"), timeout=10).json()
    assert models["object"] == "list"
    ids = [m["id"] for m in models["data"]]
    assert ids == [NAME, "text-embedding-3-small", "sentence-transformers/all-MiniLM-L6-v2"]
    for m in models["data"]:
        assert set(m) == {"id", "object", "created", "owned_by"} and m["object"] == "model"
        assert isinstance(m["created"], int) and m["created"] > 1600000000
    one = requests.get(s.url("/v1/models/" + NAME), timeout=10)
    assert one.status_code == 200 and one.json()["id"] == NAME
    r = requests.get(s.url("/v1/models/text-embedding-ada-002"), timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert requests.get(s.url("/v1/models/a/b"), timeout=10).status_code == 404


def test_accept_any_model_restores_tei_behaviour(start_server):
    s = start_server(accept_any_model=True)
    r = post(s, {"input": "hello", "model": "text-embedding-ada-002"})
    assert r.status_code == 200 and r.json()["model"] == "text-embedding-ada-002"


def test_null_is_absent_for_every_optional_field(start_server):
    s = start_server()
    plain = post(s, {"input": "hello"}).json()["data"][0]["embedding"]
    r = post(s, {"input": "hello", "model": None, "dimensions": None, "encoding_format": None,
                 "user": None})
    assert r.status_code == 200, r.text
    assert r.json()["data"][0]["embedding"] == plain
    assert_error(post(s, {"input": None}), 400)
    assert_error(post(s, {"input": "hello", "user": 5}), 400)


def test_error_bodies_name_the_field(start_server):
    s = start_server()
    for body, status, param in (({"input": "a", "dimensions": 0}, 422, "dimensions"),
                                ({"input": "a", "dimensions": "x"}, 400, "dimensions"),
                                ({"input": "a", "encoding_format": "int8"}, 422,
                                 "encoding_format"),
                                ({"input": "a", "model": 3}, 400, "model"),
                                ({"input": []}, 400, "input"),
                                ({"input": ["ok", ""]}, 400, "input"),
                                ({"input": [[101, 30522]]}, 422, "input")):
        err = assert_error(post(s, body), status)
        assert err["param"] == param, (body, err)
    err = assert_error(post(s, {"input": "a", "bogus": 1}), 400)
    assert err["param"] is None
    # Every other route's errors carry param too (null).
    err = assert_error(requests.get(s.url("/nowhere"), timeout=10), 404)
    assert err["param"] is None


def test_tiktoken_ids_fail_loudly(start_server):
    """LangChain's OpenAIEmbeddings sends tiktoken (cl100k) ids by default:
    ids past this model's 30522 are refused, naming the cause."""
    s = start_server()
    tiktoken_hello_world = [[9906, 11, 1917, 0], [40, 3021, 60701, 13]]  # cl100k ids
    err = assert_error(post(s, {"input": tiktoken_hello_world, "model": NAME}), 422)
    assert "tiktoken" in err["message"] and "check_embedding_ctx_length" in err["message"]
    assert err["param"] == "input"


def test_always_unit_norm_even_without_a_normalize_module(start_server, tmp_path):
    """A model whose modules end at Pooling: /embed normalize=false gives the
    raw pooled vector, /v1/embeddings a unit vector along it (OpenAI's and
    TEI's /v1/embeddings always are)."""
    model = tmp_path / "raw-minilm"
    model.mkdir()
    for name in os.listdir(MODEL_DIR):
        if name != "modules.json":
            os.symlink(os.path.join(MODEL_DIR, name), model / name)
    modules = json.load(open(os.path.join(MODEL_DIR, "modules.json")))
    (model / "modules.json").write_text(json.dumps(
        [m for m in modules if not m["type"].endswith("Normalize")]))
    s = start_server(model=str(model))
    info = requests.get(s.url("/info"), timeout=10).json()
    assert info["model"]["normalize"] is False
    raw = post(s, {"inputs": "hello world", "normalize": False}, path="/embed").json()[0]
    assert abs(norm(raw) - 1.0) > 1e-3
    v = post(s, {"input": "hello world"}).json()["data"][0]["embedding"]
    assert abs(norm(v) - 1.0) < 1e-5
    n = norm(raw)
    assert max(abs(a / n - b) for a, b in zip(raw, v)) < 1e-5

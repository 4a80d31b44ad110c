"""Rerank and classification routes (server/score_api.h) end to end.

On the default embedding model every scoring route refuses, in its own API's
shape, with TEI's status (424), and the bodies are checked before that.
"""
import json

import pytest
import requests

from conftest import JSON


def post(server, path, body):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=60)


def tei_error(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "error_type"}, body
    return body


def openai_error(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and "message" in body["error"], body
    return body["error"]


# ---- an embedding model: every scoring route refuses ------------------------------------------


def test_tei_rerank_on_an_embedder_is_refused_as_tei_does(server):
    body = tei_error(post(server, "/rerank", {"query": "q", "texts": ["a", "b"]}), 424)
    assert body["error_type"] == "Backend"
    assert body["error"].startswith("model is not a re-ranker model")


def test_tei_predict_on_an_embedder_is_refused_as_tei_does(server):
    body = tei_error(post(server, "/predict", {"inputs": "some text"}), 424)
    assert body["error_type"] == "Backend"
    assert body["error"].startswith("Model is not a classifier model")


def test_infinity_rerank_on_an_embedder_answers_in_openai_shape(server):
    err = openai_error(post(server, "/rerank", {"query": "q", "documents": ["a"]}), 424)
    assert "not a re-ranker" in err["message"]


def test_v1_rerank_and_classify_on_an_embedder(server):
    err = openai_error(post(server, "/v1/rerank", {"query": "q", "documents": ["a"]}), 424)
    assert "not a re-ranker" in err["message"]
    err = openai_error(post(server, "/classify", {"input": ["a"]}), 424)
    assert "not a classifier" in err["message"]


def test_root_stays_embed_on_an_embedder(server):
    r = post(server, "/", {"inputs": "hello"})
    assert r.status_code == 200, r.text
    assert len(r.json()[0]) == 384


# ---- bodies are checked in each route's shape -------------------------------------------------


@pytest.mark.parametrize("body, status, words", [
    ({"query": "q", "texts": []}, 400, "`texts` cannot be empty"),
    ({"query": "q", "texts": ["a"], "documents": ["b"]}, 400, "send one"),
    ({"query": "q", "texts": ["a"], "top_n": 1}, 400, "unknown field \"top_n\""),
    ({"query": "q", "texts": ["a"], "raw_scores": "yes"}, 400, "raw_scores must be true or false"),
    ({"query": "q", "texts": ["a"], "truncation_direction": "Up"}, 422, "truncation_direction"),
])
def test_tei_rerank_bad_bodies(server, body, status, words):
    err = tei_error(post(server, "/rerank", body), status)
    assert words in err["error"], err


@pytest.mark.parametrize("path, body, status, words", [
    ("/rerank", {"query": "q", "documents": ["a"], "top_n": 0}, 422, "top_n"),
    ("/rerank", {"query": "q", "documents": ["a"], "return_text": True}, 400, "unknown field"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "model": "nope"}, 404, "does not exist"),
    ("/v1/rerank", {"query": 1, "documents": ["a"]}, 400, "query must be a string"),
    ("/v1/rerank", {"query": "q"}, 400, "missing field \"documents\""),
    ("/classify", {"input": "a"}, 400, "non-empty array of strings"),
    ("/classify", {"input": ["a"], "model": 3}, 400, "model must be a string"),
])
def test_openai_shaped_bad_bodies(server, path, body, status, words):
    err = openai_error(post(server, path, body), status)
    assert words in err["message"], err


def test_predict_input_shapes_are_checked(server):
    for inputs in (["a", "b", "c"], [["a", "b", "c"]], [], 3, [["a"], 3]):
        err = tei_error(post(server, "/predict", {"inputs": inputs}), 400)
        assert "inputs" in err["error"], (inputs, err)

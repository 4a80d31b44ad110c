"""Rerank and classification routes (server/api/score_api.h) end to end.

On the default embedding model every scoring route refuses, in its own API's
shape, with TEI's status (424), and the bodies are checked before that.

On the tiny classifiers of tests/golden/make_task_models.py — xlmr-cls-tiny,
a one-label XLM-R cross-encoder (a reranker), and bert-cls-tiny, a
three-label BERT classifier whose pairs have type ids — the scores are
compared with what sentence-transformers' CrossEncoder and transformers give
on the same directories (tests/golden/rerank_scores.json, made by
make_rerank_scores.py), on queries and documents in many scripts, some cut
to the models' 64 tokens on either side. The floor, |score difference| <=
1e-4, is the one test_task_models.c derives for the logits in fp32 (a
sigmoid or softmax only shrinks differences: both are 1-Lipschitz or less in
each logit).
"""
import concurrent.futures
import json
import math
import os
import threading
import time

import pytest
import requests

from conftest import JSON, ROOT, Server, golden

MAX_DIFF = 1e-4

GOLDEN = golden("rerank_scores.json")["models"]
RERANKER = GOLDEN["xlmr-cls-tiny"]
CLASSIFIER = GOLDEN["bert-cls-tiny"]


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
    for path, body in (("/v2/rerank", {"query": "q", "documents": ["a"]}),
                       ("/score", {"text_1": "q", "text_2": ["a"]}),
                       ("/v1/score", {"text_1": "q", "text_2": "a"})):
        err = openai_error(post(server, path, body), 424)
        assert "not a re-ranker" in err["message"], (path, err)


def test_root_stays_embed_on_an_embedder(server):
    r = post(server, "/", {"inputs": "hello"})
    assert r.status_code == 200, r.text
    assert len(r.json()[0]) == 384


# ---- bodies are checked in each route's shape -------------------------------------------------


@pytest.mark.parametrize("body, status, etype, words", [
    ({"query": "q", "texts": []}, 400, "Empty", "`texts` cannot be empty"),
    ({"query": "q", "texts": ["a"], "documents": ["b"]}, 400, "Validation", "send one"),
    ({"query": "q", "texts": ["a"], "top_n": 1}, 400, "Validation", "unknown field \"top_n\""),
    ({"query": "q", "texts": ["a"], "raw_scores": "yes"}, 400, "Validation",
     "raw_scores must be true or false"),
    ({"query": "q", "texts": ["a"], "truncation_direction": "Up"}, 422, "Validation",
     "truncation_direction"),
])
def test_tei_rerank_bad_bodies(server, body, status, etype, words):
    err = tei_error(post(server, "/rerank", body), status)
    assert err["error_type"] == etype, err
    assert words in err["error"], err


@pytest.mark.parametrize("path, body, status, words", [
    ("/rerank", {"query": "q", "documents": ["a"], "top_n": 0}, 422, "top_n"),
    ("/rerank", {"query": "q", "documents": ["a"], "return_text": True}, 400, "unknown field"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "model": "nope"}, 404, "does not exist"),
    ("/v1/rerank", {"query": 1, "documents": ["a"]}, 400, "query must be a string"),
    ("/v1/rerank", {"query": "q"}, 400, "missing field \"documents\""),
    ("/classify", {"input": "a"}, 400, "non-empty array of strings"),
    ("/classify", {"input": ["a"], "model": 3}, 400, "model must be a string"),
    # vLLM's /score: the body is checked before the model's task.
    ("/score", {"text_1": "q"}, 400, "missing field \"text_2\""),
    ("/score", {"text_1": "q", "text_2": []}, 400, "text_2: at least one text"),
    ("/score", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, 400, "1:1, 1:N or N:N"),
    ("/score", {"text_1": "q", "text_2": [3]}, 400, "text_2[0] must be a string"),
    ("/score", {"text_1": {"content": []}, "text_2": "a"}, 422, "multi-modal"),
    ("/score", {"text_1": "q", "text_2": "a", "priority": 1}, 400, "priority must be 0"),
    ("/score", {"text_1": "q", "text_2": "a", "use_activation": "no"}, 400,
     "use_activation must be true or false"),
    ("/score", {"text_1": "q", "text_2": "a", "truncate_prompt_tokens": "all"}, 400,
     "truncate_prompt_tokens must be an integer"),
    ("/score", {"text_1": "q", "text_2": "a", "queries": ["q"]}, 400, "unknown field"),
    ("/v1/score", {"text_1": "q", "text_2": "a", "model": "nope"}, 404, "does not exist"),
])
def test_openai_shaped_bad_bodies(server, path, body, status, words):
    err = openai_error(post(server, path, body), status)
    assert words in err["message"], err


def test_predict_input_shapes_are_checked(server):
    for inputs in (["a", "b", "c"], [["a", "b", "c"]], [], 3, [["a"], 3]):
        err = tei_error(post(server, "/predict", {"inputs": inputs}), 400)
        assert "inputs" in err["error"], (inputs, err)
        assert err["error_type"] == ("Empty" if inputs == [] else "Validation"), (inputs, err)


# ---- a reranker: scores against CrossEncoder ----------------------------------------------------


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def softmax(v):
    m = max(v)
    e = [math.exp(x - m) for x in v]
    return [x / sum(e) for x in e]


@pytest.fixture(scope="module", params=["naive", "fused"])
def reranker(tmp_path_factory, request):
    s = Server(str(tmp_path_factory.mktemp("rerank")), model=os.path.join(ROOT, RERANKER["dir"]),
               backend=request.param)
    yield s
    s.check_clean_exit(s.stop())


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("classify")),
               model=os.path.join(ROOT, CLASSIFIER["dir"]))
    yield s
    s.check_clean_exit(s.stop())


def test_a_pair_is_empty_only_when_both_texts_are(reranker):
    """TEI refuses a pair only when both its texts are empty (its Empty,
    400): an empty document or an empty query beside a text is scored."""
    for body in ({"query": "", "texts": ["a"]}, {"query": "q", "texts": [""]}):
        r = post(reranker, "/rerank", body)
        assert r.status_code == 200 and len(r.json()) == 1, r.text
    err = tei_error(post(reranker, "/rerank", {"query": "", "texts": ["a", ""]}), 400)
    assert err["error_type"] == "Empty" and "input 1 is an empty string" in err["error"], err
    r = post(reranker, "/v1/rerank", {"query": "", "documents": [""]})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text


def expect_sorted(scores):
    assert all(a >= b for a, b in zip(scores, scores[1:])), scores


def test_tei_rerank_matches_cross_encoder(reranker):
    worst = 0.0
    for case in RERANKER["queries"]:
        r = post(reranker, "/rerank", {"query": case["query"], "texts": case["documents"],
                                       "return_text": True})
        assert r.status_code == 200, r.text
        ranks = r.json()
        assert sorted(x["index"] for x in ranks) == list(range(len(case["documents"])))
        expect_sorted([x["score"] for x in ranks])
        for x in ranks:
            want = case["scores"][x["index"]][0]  # CrossEncoder's default: the sigmoid
            worst = max(worst, abs(x["score"] - want))
            assert x["text"] == case["documents"][x["index"]]
        # raw_scores: the logits, and the same order.
        r = post(reranker, "/rerank", {"query": case["query"], "texts": case["documents"],
                                       "raw_scores": True})
        raw = r.json()
        assert [x["index"] for x in raw] == [x["index"] for x in ranks]
        assert all("text" not in x for x in raw)
        for x in raw:
            worst = max(worst, abs(x["score"] - case["logits"][x["index"]][0]))
    assert worst <= MAX_DIFF, worst
    print("rerank e2e: worst |score - CrossEncoder| %.2g" % worst)


def test_truncation_sides_and_refusal(reranker):
    case = RERANKER["queries"][1]
    long = [i for i, t in enumerate(case["tokens"]) if t == 64]
    assert long, "the golden set has no pair cut to 64 tokens"
    left = post(reranker, "/rerank", {"query": case["query"], "texts": case["documents"],
                                      "raw_scores": True, "truncation_direction": "Left"}).json()
    for x in left:
        assert abs(x["score"] - case["logits_left"][x["index"]][0]) <= MAX_DIFF
    r = post(reranker, "/rerank", {"query": case["query"], "texts": case["documents"],
                                   "truncate": False})
    err = tei_error(r, 422)
    assert "truncation is off" in err["error"] and "input %d" % long[0] in err["error"], err


def test_v1_and_infinity_rerank_shapes_and_top_n(reranker):
    case = RERANKER["queries"][3]
    docs = [{"text": d} if i % 2 else d for i, d in enumerate(case["documents"])]
    r = post(reranker, "/v1/rerank", {"model": "xlmr-cls-tiny", "query": case["query"],
                                      "documents": docs, "top_n": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "xlmr-cls-tiny" and body["id"].startswith("rerank-")
    assert body["usage"]["total_tokens"] == sum(case["tokens"])
    results = body["results"]
    assert len(results) == 3
    expect_sorted([x["relevance_score"] for x in results])
    best = sorted(range(len(docs)), key=lambda i: -case["scores"][i][0])[:3]
    assert [x["index"] for x in results] == best
    for x in results:
        assert abs(x["relevance_score"] - case["scores"][x["index"]][0]) <= MAX_DIFF
        assert x["document"] == {"text": case["documents"][x["index"]]}
    # Infinity's body on /rerank: its shape, documents as strings when asked.
    r = post(reranker, "/rerank", {"query": case["query"], "documents": case["documents"],
                                   "top_n": 2, "return_documents": True})
    body = r.json()
    assert body["object"] == "rerank" and body["id"].startswith("infinity-")
    assert [x["index"] for x in body["results"]] == best[:2]
    assert body["results"][0]["document"] == case["documents"][best[0]]
    r = post(reranker, "/rerank", {"query": case["query"], "documents": case["documents"]})
    assert all("document" not in x for x in r.json()["results"])
    # return_documents false on /v1/rerank.
    r = post(reranker, "/v1/rerank", {"query": case["query"], "documents": ["a", "b"],
                                      "return_documents": False})
    assert all("document" not in x for x in r.json()["results"])


def test_vllm_score_pairs_match_cross_encoder(reranker):
    """vLLM's /score: 1:N, N:N, 1:1 and a one-text list broadcast all give
    CrossEncoder's scores, in input order; -1 cuts to the model's maximum,
    as the golden pairs were cut."""
    case = RERANKER["queries"][0]
    docs = case["documents"]
    n = len(docs)
    bodies = [{"text_1": case["query"], "text_2": docs},
              {"text_1": [case["query"]] * n, "text_2": docs},
              {"text_1": [case["query"]], "text_2": docs}]
    worst = 0.0
    for path in ("/score", "/v1/score"):
        for body in bodies:
            r = post(reranker, path, dict(body, truncate_prompt_tokens=-1))
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["object"] == "list" and out["id"].startswith("score-"), out
            assert out["model"] == "xlmr-cls-tiny" and isinstance(out["created"], int)
            assert out["usage"] == {"prompt_tokens": sum(case["tokens"]),
                                    "total_tokens": sum(case["tokens"]),
                                    "completion_tokens": 0}
            assert [d["index"] for d in out["data"]] == list(range(n))
            assert all(d["object"] == "score" for d in out["data"])
            for d in out["data"]:
                worst = max(worst, abs(d["score"] - case["scores"][d["index"]][0]))
    # One pair as two strings; the raw logit under each of vLLM's names.
    r = post(reranker, "/score", {"text_1": case["query"], "text_2": docs[7],
                                  "model": "xlmr-cls-tiny"})
    assert r.status_code == 200, r.text
    [d] = r.json()["data"]
    worst = max(worst, abs(d["score"] - case["scores"][7][0]))
    for name in ("use_activation", "activation", "softmax"):
        r = post(reranker, "/score", {"text_1": case["query"], "text_2": docs,
                                      "truncate_prompt_tokens": -1, name: False})
        assert r.status_code == 200, r.text
        for d in r.json()["data"]:
            worst = max(worst, abs(d["score"] - case["logits"][d["index"]][0]))
    # N:N with a different query for each pair: each pair's own golden score.
    pairs = [(q, i) for q in RERANKER["queries"] for i in range(len(q["documents"]))][::3]
    r = post(reranker, "/score", {"text_1": [q["query"] for q, _ in pairs],
                                  "text_2": [q["documents"][i] for q, i in pairs],
                                  "truncate_prompt_tokens": -1})
    assert r.status_code == 200, r.text
    assert len({q["query"] for q, _ in pairs}) > 1
    data = r.json()["data"]
    assert len(data) == len(pairs)
    for d, (q, i) in zip(data, pairs):
        worst = max(worst, abs(d["score"] - q["scores"][i][0]))
    assert worst <= MAX_DIFF, worst
    # /v2/rerank is /v1/rerank.
    body = {"query": case["query"], "documents": docs[:4], "top_n": 2}
    v1, v2 = post(reranker, "/v1/rerank", body).json(), post(reranker, "/v2/rerank", body).json()
    assert v1["results"] == v2["results"] and v1["usage"] == v2["usage"]


def test_vllm_score_truncation(reranker):
    """truncate_prompt_tokens: absent, a pair longer than the model takes is
    refused; k, every pair is cut to k tokens (usage says so) and one that
    fits is scored as it was; past the model's maximum, or below a pair's
    special tokens and one token of each text, refused."""
    case = RERANKER["queries"][3]
    short = [i for i, t in enumerate(case["tokens"]) if t <= 16]
    assert short and max(case["tokens"]) == 64, case["tokens"]
    err = openai_error(post(reranker, "/score", {"text_1": case["query"],
                                                 "text_2": case["documents"]}), 422)
    assert "truncation is off" in err["message"], err
    r = post(reranker, "/score", {"text_1": case["query"], "text_2": case["documents"],
                                  "truncate_prompt_tokens": 16})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["usage"]["prompt_tokens"] == sum(min(t, 16) for t in case["tokens"]), out["usage"]
    for i in short:
        assert abs(out["data"][i]["score"] - case["scores"][i][0]) <= MAX_DIFF
    long = [i for i, t in enumerate(case["tokens"]) if t > 16]
    assert any(abs(out["data"][i]["score"] - case["scores"][i][0]) > 0 for i in long)
    for k, words in ((65, "greater than the model's maximum length (64)"), (0, "at least"),
                     (-2, "at least")):
        err = openai_error(post(reranker, "/score", {"text_1": "q", "text_2": "a",
                                                     "truncate_prompt_tokens": k}), 422)
        assert words in err["message"], (k, err)


def test_root_is_rerank_and_embedding_routes_refuse(reranker):
    case = RERANKER["queries"][0]
    r = post(reranker, "/", {"query": case["query"], "texts": case["documents"][:3]})
    assert r.status_code == 200, r.text
    assert sorted(x["index"] for x in r.json()) == [0, 1, 2]
    for path, body in (("/embed", {"inputs": "x"}), ("/", {"inputs": "x"})):
        err = tei_error(post(reranker, path, body), 424 if path == "/embed" else 400)
        assert err["error_type"] == ("Backend" if path == "/embed" else "Validation"), err
    for path, body in (("/v1/embeddings", {"input": "x"}), ("/embeddings", {"input": "x"})):
        err = openai_error(post(reranker, path, body), 424)
        assert "not an embedding model" in err["message"], err
    # A reranker answers /predict too (TEI), with its one label.
    r = post(reranker, "/predict", {"inputs": [case["query"], case["documents"][0]]})
    assert r.status_code == 200, r.text
    [p] = r.json()
    assert abs(p["score"] - case["scores"][0][0]) <= MAX_DIFF and p["label"] == "LABEL_0"


def test_pairs_run_in_pieces_under_small_batches(start_server):
    case = RERANKER["queries"][2]
    s = start_server(model=os.path.join(ROOT, RERANKER["dir"]), max_batch_requests=3,
                     max_inputs_per_request=len(case["documents"]))
    r = post(s, "/rerank", {"query": case["query"], "texts": case["documents"],
                            "raw_scores": True})
    assert r.status_code == 200, r.text
    for x in r.json():
        assert abs(x["score"] - case["logits"][x["index"]][0]) <= MAX_DIFF
    err = tei_error(post(s, "/rerank", {"query": "q", "texts": case["documents"] + ["x"]}), 422)
    assert "max_inputs_per_request" in err["error"], err


# ---- a classifier with token types ------------------------------------------------------------


def test_predict_pairs_and_texts_match_transformers(classifier):
    labels = CLASSIFIER["labels"]
    worst = 0.0
    for case in CLASSIFIER["queries"]:
        inputs = [[case["query"], d] for d in case["documents"]]
        for raw in (True, False):
            r = post(classifier, "/predict", {"inputs": inputs, "raw_scores": raw})
            assert r.status_code == 200, r.text
            for preds, logit in zip(r.json(), case["logits"]):
                assert sorted(p["label"] for p in preds) == sorted(labels)
                expect_sorted([p["score"] for p in preds])
                want = dict(zip(labels, logit if raw else softmax(logit)))
                worst = max(worst, max(abs(p["score"] - want[p["label"]]) for p in preds))
    texts = CLASSIFIER["texts"]
    r = post(classifier, "/predict", {"inputs": [[t] for t in texts], "raw_scores": True})
    for preds, logit in zip(r.json(), CLASSIFIER["text_logits"]):
        want = dict(zip(labels, logit))
        worst = max(worst, max(abs(p["score"] - want[p["label"]]) for p in preds))
    assert worst <= MAX_DIFF, worst
    print("predict e2e: worst |score - transformers| %.2g" % worst)


def test_predict_single_shapes_and_infinity_classify(classifier):
    labels = CLASSIFIER["labels"]
    text, logit = CLASSIFIER["texts"][0], CLASSIFIER["text_logits"][0]
    one = post(classifier, "/predict", {"inputs": text}).json()
    assert isinstance(one, list) and isinstance(one[0], dict)
    want = dict(zip(labels, softmax(logit)))
    assert all(abs(p["score"] - want[p["label"]]) <= MAX_DIFF for p in one)
    case = CLASSIFIER["queries"][0]
    pair = post(classifier, "/predict", {"inputs": [case["query"], case["documents"][0]],
                                         "raw_scores": True}).json()
    want = dict(zip(labels, case["logits"][0]))
    assert all(abs(p["score"] - want[p["label"]]) <= MAX_DIFF for p in pair)
    r = post(classifier, "/classify", {"input": CLASSIFIER["texts"][:4], "model": "bert-cls-tiny"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "classify" and len(body["data"]) == 4
    for preds, logit in zip(body["data"], CLASSIFIER["text_logits"][:4]):
        want = dict(zip(labels, softmax(logit)))
        assert all(abs(p["score"] - want[p["label"]]) <= MAX_DIFF for p in preds)
    # / is /predict for a classifier of several labels; /rerank refuses it.
    r = post(classifier, "/", {"inputs": text})
    assert r.status_code == 200 and r.json()[0]["label"] in labels
    err = tei_error(post(classifier, "/rerank", {"query": "q", "texts": ["a"]}), 424)
    assert "3 labels" in err["error"]


# ---- decoding on the codec workers (server/work/workpool.h) -----------------------------------------

WORKER_CASES = [
    ("/rerank", {"query": "capital of France", "texts": ["Paris", "Berlin is big", ""],
                 "return_text": True, "raw_scores": True}),
    ("/rerank", {"query": "capital", "documents": ["Paris", "Rome"], "top_n": 1,
                 "return_documents": True}),
    ("/v1/rerank", {"query": "q " * 80, "documents": [{"text": "d " * 90}, "x"]}),
    ("/predict", {"inputs": [["a question", "an answer"], ["a lone text"]]}),
    ("/", {"query": "q", "texts": ["a", "b"], "truncation_direction": "Left"}),
    # Refusals, in each route's shape.
    ("/rerank", {"query": "q" * 400, "texts": ["d"], "truncate": False}),
    ("/rerank", {"query": "q", "texts": []}),
    ("/v1/rerank", {"query": 3, "documents": ["a"]}),
    ("/classify", {"input": ["x"], "model": "not-served"}),
    ("/rerank", {"query": "q", "texts": ["a"] * 9}),
    ("/score", {"text_1": ["q " * 40, "p"], "text_2": ["d " * 50, "e"],
                "truncate_prompt_tokens": 20}),
    ("/v1/score", {"text_1": "q", "text_2": ["a", "b", "c"], "text_3": "x"}),
]


def test_many_workers_at_once_score_as_one_does(start_server):
    """Every scoring case sent three times at once to four codec workers
    gets what one worker, taking them one by one, answers; refusals too.
    The deadline is far, for TSan's pace (make tsan-http)."""
    model = os.path.join(ROOT, RERANKER["dir"])
    one = start_server(model=model, codec_workers=1, max_inputs_per_request=8,
                       request_timeout_ms=600000)
    four = start_server(model=model, codec_workers=4, max_inputs_per_request=8,
                        request_timeout_ms=600000)
    drop = ("id", "created")
    want = [post(one, path, body) for path, body in WORKER_CASES]
    jobs = [(i, path, body) for i, (path, body) in enumerate(WORKER_CASES)] * 3
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(lambda j: (j[0], post(four, j[1], j[2])), jobs))
    for i, b in got:
        a = want[i]
        path, body = WORKER_CASES[i]
        assert a.status_code == b.status_code, (path, body, a.text[:200], b.text[:200])
        ja, jb = a.json(), b.json()
        if isinstance(ja, dict):
            ja = {k: v for k, v in ja.items() if k not in drop}
            jb = {k: v for k, v in jb.items() if k not in drop}
        assert ja == jb, (path, ja, jb)


def test_health_answers_while_a_large_rerank_is_tokenized(start_server):
    """A rerank whose query takes the tokenizer a second (4 MB, read whole to
    count it, then refused: truncation is off) is tokenized on one codec
    worker: /health (the I/O thread's) and a small rerank (the other
    worker's), sent while it is tokenized, are answered before it. An order,
    not a time limit; on the I/O thread, or with one worker, the small
    rerank would wait for the refusal."""
    s = start_server(model=os.path.join(ROOT, RERANKER["dir"]), max_body_bytes=8 << 20,
                     max_request_memory_bytes=1 << 30, request_timeout_ms=600000,
                     codec_workers=2)
    words = "the service users process documents and every client writes its own ".split()
    query = " ".join(words[i % len(words)] + str(i % 97) for i in range(500000))[:4 << 20]
    done = {}

    def rerank():
        r = post(s, "/rerank", {"query": query, "texts": ["a", "b"], "truncate": False})
        done["status"], done["at"] = r.status_code, time.monotonic()

    th = threading.Thread(target=rerank)
    th.start()
    time.sleep(0.15)  # the body (4 MB on loopback) is in, its tokenization under way
    h = requests.get(s.url("/health"), timeout=600)
    health_at = time.monotonic()
    small = post(s, "/rerank", {"query": "capital of France", "texts": ["Paris", "Rome"]})
    small_at = time.monotonic()
    th.join()
    assert h.status_code == 200 and small.status_code == 200, small.text[:200]
    assert done["status"] == 422
    assert health_at < done["at"], "/health was answered %.3f s after the rerank" % (
        health_at - done["at"])
    assert small_at < done["at"], "the small rerank was answered %.3f s after the large" % (
        small_at - done["at"])
    print("/health answered %.2f s, a small rerank %.2f s before the large one's refusal" % (
        done["at"] - health_at, done["at"] - small_at))


def test_top_n_zero_is_all_on_v1_and_refused_by_infinity(reranker):
    """vLLM's /v1/rerank defaults top_n to 0, meaning every document;
    Infinity's body keeps its rule, top_n at least 1."""
    case = RERANKER["queries"][3]
    r = post(reranker, "/v1/rerank", {"query": case["query"], "documents": case["documents"],
                                      "top_n": 0})
    assert r.status_code == 200, r.text
    assert sorted(x["index"] for x in r.json()["results"]) == list(range(len(case["documents"])))
    err = openai_error(post(reranker, "/rerank", {"query": case["query"],
                                                  "documents": case["documents"], "top_n": 0}),
                       422)
    assert "top_n must be at least 1" in err["message"], err
    err = openai_error(post(reranker, "/v1/rerank", {"query": "q", "documents": ["a"],
                                                     "top_n": -1}), 422)
    assert "top_n must be at least 0" in err["message"], err


# ---- model variants made from the tiny classifiers --------------------------------------------


def model_copy(tmp_path, name, config=None, bias=None):
    """A copy of a tiny model directory with config.json members replaced and
    the classifier's output bias overwritten (float32 values)."""
    import shutil
    import struct
    src = os.path.join(ROOT, GOLDEN[name]["dir"])
    dst = str(tmp_path / (name + "-variant"))
    shutil.copytree(src, dst)
    if config:
        path = os.path.join(dst, "config.json")
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg.update(config)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cfg, f)
    if bias is not None:
        path = os.path.join(dst, "model.safetensors")
        with open(path, "rb") as f:
            data = bytearray(f.read())
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        key = "classifier.out_proj.bias" if "classifier.out_proj.bias" in header else \
            "classifier.bias"
        start, stop = header[key]["data_offsets"]
        assert stop - start == 4 * len(bias)
        data[8 + n + start:8 + n + stop] = struct.pack("<%df" % len(bias), *bias)
        with open(path, "wb") as f:
            f.write(data)
    return dst


def test_scores_that_are_not_finite_are_424_in_each_shape(start_server, tmp_path):
    """An infinite logit makes the softmax NaN and the raw score infinite;
    JSON carries neither: 424 (TEI's Backend error), in each route's shape.
    The sigmoid of an infinite logit is 1, a finite score."""
    inf = float("inf")
    cls = start_server(model=model_copy(tmp_path, "bert-cls-tiny", bias=[inf, 0.0, 0.0]))
    err = tei_error(post(cls, "/predict", {"inputs": "a text"}), 424)
    assert err["error_type"] == "Backend" and "score is not finite" in err["error"], err
    err = openai_error(post(cls, "/classify", {"input": ["a", "b"]}), 424)
    assert "score is not finite (input 0)" in err["message"], err
    err = tei_error(post(cls, "/predict", {"inputs": "a text", "raw_scores": True}), 424)
    assert "score is not finite" in err["error"], err
    rr = start_server(model=model_copy(tmp_path, "xlmr-cls-tiny", bias=[inf]))
    r = post(rr, "/rerank", {"query": "q", "texts": ["a", "b"]})
    assert r.status_code == 200 and all(x["score"] == 1.0 for x in r.json()), r.text
    err = tei_error(post(rr, "/rerank", {"query": "q", "texts": ["a"], "raw_scores": True}), 424)
    assert err["error_type"] == "Backend", err
    r = post(rr, "/rerank", {"query": "q", "documents": ["a"], "raw_scores": True})
    assert "score is not finite" in openai_error(r, 424)["message"]
    assert requests.get(rr.url("/health"), timeout=10).status_code == 200  # still serving


def test_multi_label_classify_is_a_sigmoid_per_label(start_server, tmp_path):
    """problem_type multi_label_classification: Infinity's /classify scores
    each label with a sigmoid, as Hugging Face's pipeline does; TEI's
    /predict keeps TEI's softmax."""
    s = start_server(model=model_copy(tmp_path, "bert-cls-tiny",
                                      config={"problem_type": "multi_label_classification"}))
    labels = CLASSIFIER["labels"]
    texts, logits = CLASSIFIER["texts"][:4], CLASSIFIER["text_logits"][:4]
    r = post(s, "/classify", {"input": texts})
    assert r.status_code == 200, r.text
    for preds, logit in zip(r.json()["data"], logits):
        want = dict(zip(labels, [sigmoid(x) for x in logit]))
        assert all(abs(p["score"] - want[p["label"]]) <= MAX_DIFF for p in preds), (preds, want)
        expect_sorted([p["score"] for p in preds])
    for text, logit in zip(texts, logits):
        want = dict(zip(labels, softmax(logit)))
        preds = post(s, "/predict", {"inputs": text}).json()
        assert all(abs(p["score"] - want[p["label"]]) <= MAX_DIFF for p in preds)

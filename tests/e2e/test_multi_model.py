"""Several models in one process (the `models` setting).

One server serves all-MiniLM-L6-v2 (an embedder, with an alias), the tiny
one-label XLM-R cross-encoder and the tiny three-label BERT classifier of
tests/golden/make_task_models.py. Each model's answers must equal what a
server of that model alone gives (cosine >= 1 - 1e-6, |score difference| <=
1e-4), whichever route and however requests to different models interleave;
each batch holds one model's requests (one forward of that model, counted
for it in the per-model metrics and the trace). Routing is by `model` (name or
alias); TEI's routes, which carry none, go to the first model of their task;
an unknown name is each API's 404 in its own shape, a model of the wrong
task TEI's 424."""
import json
import math
import os
import socket
import subprocess
import threading

import pytest
import requests

from conftest import BIN, JSON, ROOT, Server, free_port, promtool_check, wait_for

MINILM = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
RERANKER = os.path.join(ROOT, "tests", "golden", "xlmr-cls-tiny")
CLASSIFIER = os.path.join(ROOT, "tests", "golden", "bert-cls-tiny")
ALIAS = "sentence-transformers/all-MiniLM-L6-v2"
MODELS = [
    {"name": "minilm", "path": MINILM, "aliases": [ALIAS]},
    {"name": "rerank", "path": RERANKER},
    {"name": "classify", "path": CLASSIFIER, "max_seq_length": 64},
]
MIN_COSINE = 1.0 - 1e-6
MAX_DIFF = 1e-4
TEXTS = ["a cat sat on the mat", "Les modèles de langue", "numbers 1 2 3 and more words " * 5]
QUERY = "where does the cat sit"


def post(server, path, body, timeout=60):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=timeout)


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def openai_error(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and "message" in body["error"], body
    return body["error"]


def tei_error(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "error_type"}, body
    return body


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    # A limit far above the worst case: start checks it and serves.
    s = Server(str(tmp_path_factory.mktemp("multi")), models=MODELS, memory_limit_bytes=1 << 40)
    yield s
    s.check_clean_exit(s.stop())


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """A server of each model alone: what the multi-model server must answer."""
    out = {}
    try:
        for m in MODELS:
            settings = {"model": m["path"]}
            if "max_seq_length" in m:
                settings["max_seq_length"] = m["max_seq_length"]
            out[m["name"]] = Server(str(tmp_path_factory.mktemp(m["name"])), **settings)
        yield out
    finally:
        for s in out.values():
            s.check_clean_exit(s.stop())


def embeddings(server, texts, **extra):
    r = post(server, "/v1/embeddings", dict({"input": texts}, **extra))
    assert r.status_code == 200, r.text
    return r.json()


def scores(server, path, body):
    r = post(server, path, body)
    assert r.status_code == 200, r.text
    out = r.json()
    results = out["results"] if isinstance(out, dict) else out
    return {x["index"]: x.get("relevance_score", x.get("score")) for x in results}


def same_vectors(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert cosine(g, w) >= MIN_COSINE


def same_scores(got, want):
    assert sorted(got) == sorted(want)
    for i in want:
        assert abs(got[i] - want[i]) <= MAX_DIFF, (i, got[i], want[i])


def test_embeddings_by_name_alias_and_tei_route(multi, alone):
    want = [d["embedding"] for d in embeddings(alone["minilm"], TEXTS)["data"]]
    for name in ("minilm", ALIAS):
        out = embeddings(multi, TEXTS, model=name)
        assert out["model"] == name
        same_vectors([d["embedding"] for d in out["data"]], want)
    # No model field: the route's model (the first embedder), as TEI's /embed.
    same_vectors([d["embedding"] for d in embeddings(multi, TEXTS)["data"]], want)
    r = post(multi, "/embed", {"inputs": TEXTS})
    assert r.status_code == 200, r.text
    same_vectors(r.json(), want)
    # Infinity's /embeddings and llama.cpp's /embedding route by model too.
    r = post(multi, "/embeddings", {"input": TEXTS, "model": "minilm"})
    assert r.status_code == 200, r.text
    same_vectors([d["embedding"] for d in r.json()["data"]], want)
    r = post(multi, "/embedding", {"content": TEXTS[0], "model": ALIAS})
    assert r.status_code == 200, r.text
    assert cosine(r.json()[0]["embedding"][0], want[0]) >= MIN_COSINE


def test_rerank_and_score_routes(multi, alone):
    docs = TEXTS
    body = {"model": "rerank", "query": QUERY, "documents": docs}
    want = scores(alone["rerank"], "/v1/rerank", dict(body, model="xlmr-cls-tiny"))
    same_scores(scores(multi, "/v1/rerank", body), want)
    same_scores(scores(multi, "/v2/rerank", body), want)
    # No model: the first reranker, whichever model is first.
    same_scores(scores(multi, "/v1/rerank", {"query": QUERY, "documents": docs}), want)
    same_scores(scores(multi, "/rerank", {"query": QUERY, "texts": docs}), want)
    # vLLM's /score does not truncate: the two short documents.
    s = post(multi, "/score", {"model": "rerank", "text_1": QUERY, "text_2": docs[:2]})
    assert s.status_code == 200, s.text
    got = {d["index"]: d["score"] for d in s.json()["data"]}
    same_scores(got, {i: want[i] for i in (0, 1)})


def test_classifier_by_name_and_predict_to_the_first_multi_label_classifier(multi, alone):
    r = post(multi, "/classify", {"model": "classify", "input": TEXTS})
    w = post(alone["classify"], "/classify", {"input": TEXTS})
    assert r.status_code == 200 and w.status_code == 200, (r.text, w.text)
    for g, x in zip(r.json()["data"], w.json()["data"]):
        same_scores({d["label"]: d["score"] for d in g}, {d["label"]: d["score"] for d in x})
    # /predict and /classify without a model: the first classifier of several
    # labels, though the one-label reranker comes before it.
    r = post(multi, "/predict", {"inputs": TEXTS[0]})
    w = post(alone["classify"], "/predict", {"inputs": TEXTS[0]})
    assert r.status_code == 200 and w.status_code == 200, (r.text, w.text)
    same_scores({d["label"]: d["score"] for d in r.json()},
                {d["label"]: d["score"] for d in w.json()})
    r = post(multi, "/classify", {"input": TEXTS})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]) == 3


def test_unknown_model_in_each_api_shape(multi):
    e = openai_error(post(multi, "/v1/embeddings", {"input": "x", "model": "nope"}), 404)
    assert e["code"] == "model_not_found"
    e = openai_error(post(multi, "/v1/rerank", {"model": "nope", "query": "q",
                                                "documents": ["a"]}), 404)
    assert e["code"] == "model_not_found"
    openai_error(post(multi, "/score", {"model": "nope", "text_1": "a", "text_2": "b"}), 404)
    openai_error(post(multi, "/classify", {"model": "nope", "input": ["a"]}), 404)
    openai_error(requests.get(multi.url("/v1/models/nope"), timeout=10), 404)
    # llama.cpp's /embedding routes by `model` as the others: unknown is 404.
    e = openai_error(post(multi, "/embedding", {"content": "x", "model": "nope"}), 404)
    assert e["code"] == "model_not_found"
    # The message names what is served, not only the route's own model.
    assert "`minilm`, `rerank`, `classify`" in e["message"], e


def test_wrong_task_is_424(multi):
    e = openai_error(post(multi, "/v1/embeddings", {"input": "x", "model": "rerank"}), 424)
    assert "not an embedding model" in e["message"]
    e = openai_error(post(multi, "/v1/rerank", {"model": "minilm", "query": "q",
                                                "documents": ["a"]}), 424)
    assert "not a re-ranker" in e["message"]
    e = openai_error(post(multi, "/classify", {"model": "minilm", "input": ["a"]}), 424)


def test_models_lists_every_model(multi):
    r = requests.get(multi.url("/v1/models"), timeout=10)
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["minilm", ALIAS, "rerank", "classify"]
    for name in ("minilm", "rerank", "classify"):  # the alias has a '/': no route takes it
        r = requests.get(multi.url("/v1/models/" + name), timeout=10)
        assert r.status_code == 200 and r.json()["id"] == name
    r = requests.get(multi.url("/models"), timeout=10)
    assert r.status_code == 200
    assert [(m["id"], m["capabilities"]) for m in r.json()["data"]] == [
        ("minilm", ["embed"]), ("rerank", ["rerank"]), ("classify", ["classify"])]


def test_info_lists_models_and_sums_memory(multi, alone):
    info = requests.get(multi.url("/info"), timeout=10).json()
    models = info["models"]
    assert [m["name"] for m in models] == ["minilm", "rerank", "classify"]
    assert [m["task"] for m in models] == ["embed", "classify", "classify"]
    assert models[0]["aliases"] == [ALIAS] and models[2]["max_seq_length"] == 64
    # The top level still describes the first model, as TEI's clients read it.
    assert info["model"]["name"] == "minilm" and info["model_id"] == "minilm"
    assert "embedding" in info["model_type"]
    mem = info["memory"]
    assert mem["weights_bytes"] == sum(m["weights_bytes"] for m in models)
    assert mem["model_workspace_bytes"] == sum(m["workspace_bytes"] for m in models)
    single = {n: requests.get(s.url("/info"), timeout=10).json()["memory"]
              for n, s in alone.items()}
    assert mem["weights_bytes"] == sum(m["weights_bytes"] for m in single.values())
    parts = ("weights_bytes", "workspace_bytes", "connections_bytes", "request_memory_bytes",
             "threads_bytes", "runtime_bytes", "verification_bytes")
    assert mem["worst_case_bytes"] == sum(mem[p] for p in parts)
    assert mem["worst_case_bytes"] > single["minilm"]["worst_case_bytes"]
    # The threads are counted from the settings before the listener opens:
    # a thread start-up adds without counting it shows here.
    assert "more threads run than the worst-case memory counts" not in multi.log_text()


def test_metrics_carry_the_model_label(multi):
    embeddings(multi, ["metrics"], model="minilm")
    post(multi, "/v1/rerank", {"model": "rerank", "query": "q", "documents": ["a"]})
    text = requests.get(multi.url("/metrics"), timeout=10).text
    m = multi.metrics()
    for name, task in (("minilm", "embed"), ("rerank", "classify"), ("classify", "classify")):
        info = [k for k in m if k[0] == "attnserve_model_info" and ("model", name) in k[1]]
        assert len(info) == 1 and ("task", task) in info[0][1], info
    assert m[("attnserve_model_batches_total", (("model", "minilm"),))] >= 1
    assert m[("attnserve_model_batches_total", (("model", "rerank"),))] >= 1
    promtool_check(text)


def test_interleaved_requests_never_share_a_batch(multi, alone, tmp_path):
    want_e = [d["embedding"] for d in embeddings(alone["minilm"], TEXTS)["data"]]
    want_r = scores(alone["rerank"], "/v1/rerank", {"query": QUERY, "documents": TEXTS})
    trace = tmp_path / "trace.jsonl"
    reloads = multi.log_text().count("configuration reloaded")
    multi.reload(trace_file=str(trace))
    wait_for(lambda: multi.log_text().count("configuration reloaded") > reloads, timeout=10,
             what="the reload")
    before = multi.metrics()
    errors = []

    def embed_worker():
        try:
            for _ in range(8):
                same_vectors([d["embedding"] for d in embeddings(multi, TEXTS, model="minilm")
                              ["data"]], want_e)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    def rerank_worker():
        try:
            for _ in range(8):
                same_scores(scores(multi, "/v1/rerank", {"model": "rerank", "query": QUERY,
                                                         "documents": TEXTS}), want_r)
        except BaseException as e:  # noqa: B902
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (embed_worker, rerank_worker) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    after = multi.metrics()

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    # Each model's batches held exactly the requests sent to it.
    assert delta("attnserve_model_batch_requests_total", model="minilm") == 24
    assert delta("attnserve_model_batch_requests_total", model="rerank") == 24
    assert delta("attnserve_model_batch_requests_total", model="classify") == 0
    # Every trace line is one model's batch: only that model's kind in it,
    # holding all of the batch's requests.
    batches = delta("attnserve_batches_total")
    # The count moves before the writer flushes the line: wait for the file.
    wait_for(lambda: trace.read_text().count("\n") >= batches, timeout=30,
             what="trace lines written")
    multi.reload(trace_file="")
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(lines) == batches > 0
    kind = {"minilm": "embed", "rerank": "score"}
    sent = {"minilm": 0, "rerank": 0}
    for line in lines:
        assert line["model"] in kind, line
        assert {"embed", "score", "attention"} & set(line) == {kind[line["model"]]}, line
        assert line[kind[line["model"]]]["requests"] == line["requests"], line
        sent[line["model"]] += line["requests"]
    assert sent == {"minilm": 24, "rerank": 24}


def test_root_routes_follow_the_first_model_when_a_reranker_leads(start_server, alone):
    """POST / and /invocations are TEI's route for the first model's task:
    with the reranker first and a three-label classifier after it, they
    rerank (as TEI serving the reranker would), and /predict still goes to
    the classifier."""
    s = start_server(models=[MODELS[1], MODELS[2]])
    body = {"query": QUERY, "texts": TEXTS}
    want = scores(alone["rerank"], "/rerank", body)
    same_scores(scores(s, "/", body), want)
    same_scores(scores(s, "/invocations", body), want)
    r = post(s, "/predict", {"inputs": TEXTS[0]})
    assert r.status_code == 200, r.text
    got = post(alone["classify"], "/predict", {"inputs": TEXTS[0]}).json()
    assert [x["label"] for x in r.json()] == [x["label"] for x in got]
    for a, b in zip(r.json(), got):
        assert abs(a["score"] - b["score"]) <= MAX_DIFF, (a, b)


def test_sigterm_drains_requests_to_every_model(start_server):
    # Deadlines far past what the work needs, however slow the build
    # (sanitizers) or busy the machine: the point is that nothing accepted
    # is lost, not how fast it drains.
    s = start_server(models=MODELS[:2], max_batch_tokens=4096, drain_linger_ms=300,
                     drain_timeout_s=180, request_timeout_ms=180000)
    long_texts = ["word " * 120] * 16
    results = []

    def call(path, body):
        try:
            results.append(post(s, path, body, timeout=200).status_code)
        except requests.RequestException as e:
            results.append(repr(e))

    threads = []
    for i in range(6):
        if i % 2:
            t = threading.Thread(target=call, args=("/v1/embeddings",
                                                    {"input": long_texts, "model": "minilm"}))
        else:
            t = threading.Thread(target=call, args=("/v1/rerank",
                                                    {"model": "rerank", "query": QUERY,
                                                     "documents": long_texts}))
        threads.append(t)
        t.start()

    # SIGTERM once all six have reached the server (in flight, less the
    # scrape itself, or answered): one the client had not sent by the end
    # of the linger would meet a closed listener, which is the drain's
    # promise too, not a lost request.
    def arrived():
        m = s.metrics()
        done = sum(v for (name, labels), v in m.items()
                   if name == "attnserve_http_requests_total"
                   and dict(labels).get("route") in ("/v1/embeddings", "/v1/rerank"))
        return m[("attnserve_http_requests_in_flight", ())] - 1 + done >= 6

    wait_for(arrived, timeout=120, what="the six requests to reach the server")
    s.terminate()
    for t in threads:
        t.join()
    assert s.wait_exit(200) == 0
    # Accepted before the listener closed: every one answered, none lost.
    assert results == [200] * 6, results


# ---- the setting: flag form, environment and refusals ----------------------------------------


def test_flag_form_prints_as_the_config_file_array():
    r = subprocess.run([BIN, "--models=a=models/all-MiniLM-L6-v2;aliases=x|y,"
                        "b=tests/golden/xlmr-cls-tiny;max_seq_length=32;truncate=false",
                        "--print-config"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["models"] == [
        {"name": "a", "path": "models/all-MiniLM-L6-v2", "aliases": ["x", "y"]},
        {"name": "b", "path": "tests/golden/xlmr-cls-tiny", "max_seq_length": 32,
         "truncate": False}]


@pytest.mark.parametrize("value, words", [
    ("a=models/all-MiniLM-L6-v2,a=tests/golden/xlmr-cls-tiny", "taken twice"),
    ("a=models/all-MiniLM-L6-v2;aliases=b,b=tests/golden/xlmr-cls-tiny", "taken twice"),
    ("=models/all-MiniLM-L6-v2", "is empty"),
    ("a=models/all-MiniLM-L6-v2;truncate=maybe", "not a boolean"),
    ("a=models/all-MiniLM-L6-v2;colour=red", "unknown key"),
])
def test_bad_models_are_refused_at_start(value, words):
    r = subprocess.run([BIN, "--models=" + value, "--print-config"], capture_output=True,
                       text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 2, r.stdout
    assert "models" in r.stderr and words in r.stderr, r.stderr


def test_a_missing_model_directory_fails_at_start_not_in_validation():
    # Validation is syntactic (a renamed directory must not block reloads);
    # loading the model at start is what refuses it, naming it.
    r = subprocess.run([BIN, "--models=a=models/none-such", "--print-config"],
                       capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([BIN, "--models=a=models/none-such",
                        "--port=%d" % free_port()], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "models/none-such" in r.stderr, r.stderr


@pytest.mark.parametrize("extra, words", [
    ("--model=tests/golden/xlmr-cls-tiny", "`model`"),
    ("--model-aliases=x", "model_aliases"),
])
def test_model_or_model_aliases_beside_models_is_refused(extra, words):
    r = subprocess.run([BIN, "--models=a=models/all-MiniLM-L6-v2", extra, "--print-config"],
                       capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 2, r.stdout
    assert "models" in r.stderr and words in r.stderr, r.stderr


def test_a_worst_case_above_memory_limit_bytes_refuses_start():
    # The port is taken: a start that opened its listener before the memory
    # check would fail there ("cannot listen", status 1), and could have
    # accepted a request before refusing. The check comes first.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        r = subprocess.run([BIN, "--models=minilm=%s,rerank=%s" % (MINILM, RERANKER),
                            "--memory-limit-bytes=%d" % (64 << 20), "--threads=2",
                            "--host=127.0.0.1", "--port=%d" % held.getsockname()[1]],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr[-4000:]
    err = r.stderr
    assert "cannot listen" not in err, err[-4000:]
    assert "worst-case memory is above the memory limit" in err, err[-4000:]
    assert "limit_bytes=%d" % (64 << 20) in err and "worst_case_bytes=" in err
    for name in ("minilm", "rerank"):
        assert "share of a model model=%s weights_bytes=" % name in err, err[-4000:]


def test_environment_form_serves(start_server):
    s = start_server(env={"ATTNSERVE_MODELS": "emb=%s;aliases=e1|e2,rr=%s" % (MINILM, RERANKER)})
    ids = [m["id"] for m in requests.get(s.url("/v1/models"), timeout=10).json()["data"]]
    assert ids == ["emb", "e1", "e2", "rr"]
    out = embeddings(s, ["x"], model="e2")
    assert out["model"] == "e2"

"""The embeddings endpoints against the golden vectors of sentence-transformers:
POST /v1/embeddings (OpenAI), POST /embed (TEI) and POST /tokenize, with both
attention backends, batched with each other and with /v1/attention, and every
error they answer with."""
import base64
import json
import math
import os
import shutil
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import (JSON, MODEL_DIR, Server, assert_error, attention_case, golden, max_abs_diff,
                      post_attention, wait_for)

GOLDEN = golden("embeddings.json.gz")
CASES = GOLDEN["mean_normalized"]
TEXTS = [c for c in CASES if c["text"]]  # the empty text is refused; its ids are sent instead
MIN_COSINE = 0.99999
DIM = len(CASES[0]["embedding"])
MAX_LEN = GOLDEN["max_tokens"]  # the model's max_seq_length: where text is truncated
FULL_LEN = GOLDEN["full_tokens"]  # max_position_embeddings: the longest token-id input
LONG = max(CASES, key=lambda c: len(c["text"].encode()))["text"]  # over 512 tokens


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def post(server, path, body, timeout=60):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return requests.post(server.url(path), data=data, headers=JSON, timeout=timeout)


def openai(server, inputs, **fields):
    r = post(server, "/v1/embeddings", dict(fields, input=inputs))
    assert r.status_code == 200, r.text
    return r


def vectors(r):
    body = r.json()
    assert body["object"] == "list"
    assert [d["index"] for d in body["data"]] == list(range(len(body["data"])))
    assert all(d["object"] == "embedding" for d in body["data"])
    return [d["embedding"] for d in body["data"]]


def check_golden(got, case, what):
    assert len(got) == DIM
    c = cosine(got, case["embedding"])
    assert c >= MIN_COSINE, "%s: %r (%d tokens): cosine %.8f" % (what, case["text"][:40],
                                                                   len(case["ids"]), c)


@pytest.fixture(scope="module", params=["naive", "fused"])
def backend_server(request, tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp(request.param)), backend=request.param)
    yield s
    s.check_clean_exit(s.stop())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("embed")), backend="fused")
    yield s
    s.check_clean_exit(s.stop())


# ---- the golden vectors -------------------------------------------------------------

def test_openai_every_golden_input_one_request_each(backend_server):
    """Concurrent single-input requests: the scheduler batches them together."""
    def one(case):
        r = openai(backend_server, case["text"])
        assert r.headers["x-attention-backend"] == backend_server.settings["backend"]
        assert r.json()["usage"] == {"prompt_tokens": len(case["ids"]),
                                     "total_tokens": len(case["ids"])}
        return vectors(r)[0]

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, TEXTS))
    for v, case in zip(got, TEXTS):
        check_golden(v, case, "/v1/embeddings " + backend_server.settings["backend"])


def test_tei_every_golden_input_in_batches(backend_server):
    for i in range(0, len(TEXTS), 12):
        chunk = TEXTS[i:i + 12]
        r = post(backend_server, "/embed", {"inputs": [c["text"] for c in chunk]})
        assert r.status_code == 200, r.text
        assert r.headers["x-attention-backend"] == backend_server.settings["backend"]
        got = r.json()
        assert len(got) == len(chunk)
        for v, case in zip(got, chunk):
            check_golden(v, case, "/embed " + backend_server.settings["backend"])
            assert abs(norm(v) - 1.0) < 1e-5


def test_openai_token_ids_as_given(backend_server):
    """Token-id input goes to the model untouched: the golden ids give the
    golden vectors, the empty text's [CLS] [SEP] included."""
    cases = [c for c in CASES if len(c["ids"]) <= 40][:10] + [CASES[-1]]
    got = vectors(openai(backend_server, [c["ids"] for c in cases]))
    for v, case in zip(got, cases):
        check_golden(v, case, "token ids")
    one = vectors(openai(backend_server, CASES[3]["ids"]))  # a single array of ids
    check_golden(one[0], CASES[3], "one id array")


def test_text_and_ids_give_the_same_vector(server):
    case = CASES[17]
    by_text = vectors(openai(server, case["text"]))[0]
    by_ids = vectors(openai(server, [case["ids"]]))[0]
    assert max(abs(a - b) for a, b in zip(by_text, by_ids)) <= 1e-6


# ---- encodings, dimensions, normalisation --------------------------------------------

def test_base64_is_the_float_vector(server):
    texts = [c["text"] for c in TEXTS[:5]]
    floats = vectors(openai(server, texts))
    name = os.path.basename(MODEL_DIR)
    r = openai(server, texts, encoding_format="base64", model=name)
    assert r.json()["model"] == name
    for v, d in zip(floats, vectors(r)):
        raw = base64.b64decode(d)
        assert len(raw) == 4 * DIM
        decoded = struct.unpack("<%df" % DIM, raw)
        assert max(abs(a - b) for a, b in zip(v, decoded)) <= 1e-6


def test_dimensions_truncate_and_renormalise(server):
    text = TEXTS[8]["text"]
    full = vectors(openai(server, text))[0]
    for d in (1, 64, DIM - 1, DIM):
        cut = vectors(openai(server, text, dimensions=d))[0]
        assert len(cut) == d
        assert abs(norm(cut) - 1.0) < 1e-5
        n = norm(full[:d])
        assert max(abs(a - b / n) for a, b in zip(cut, full[:d])) < 1e-5
    b64 = vectors(openai(server, text, dimensions=32, encoding_format="base64"))[0]
    assert len(base64.b64decode(b64)) == 4 * 32


def test_default_model_name_and_usage(server):
    r = openai(server, [TEXTS[1]["text"], TEXTS[5]["text"]])
    body = r.json()
    assert body["model"] == os.path.basename(MODEL_DIR)
    n = len(TEXTS[1]["ids"]) + len(TEXTS[5]["ids"])
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_tei_normalize_false_is_the_pooled_vector(server):
    text = TEXTS[20]["text"]
    raw = post(server, "/embed", {"inputs": text, "normalize": False}).json()[0]
    unit = post(server, "/embed", {"inputs": [text], "normalize": True}).json()[0]
    assert abs(norm(raw) - 1.0) > 1e-3
    n = norm(raw)
    assert max(abs(a / n - b) for a, b in zip(raw, unit)) < 1e-6
    check_golden(unit, TEXTS[20], "normalize true")


def test_tei_truncate_flag(start_server):
    s = start_server(truncate=False)
    err = assert_error(post(s, "/embed", {"inputs": [LONG]}), 422)
    assert "tokens" in err["message"] and "max_seq_length is %d" % MAX_LEN in err["message"]
    assert_error(post(s, "/v1/embeddings", {"input": LONG}), 422)
    r = post(s, "/embed", {"inputs": LONG, "truncate": True})
    assert r.status_code == 200, r.text
    long_case = next(c for c in CASES if c["text"] == LONG)
    check_golden(r.json()[0], long_case, "truncate=true")
    s2 = start_server()  # truncate on: the request may still turn it off
    assert_error(post(s2, "/embed", {"inputs": LONG, "truncate": False}), 422)


# ---- /tokenize ---------------------------------------------------------------------------

def test_tokenize_ids_equal_hugging_face(server):
    chunk = [c for c in TEXTS]
    r = post(server, "/tokenize", {"inputs": [c["text"] for c in chunk]})
    assert r.status_code == 200, r.text
    for tokens, case in zip(r.json(), chunk):
        ids = [t["id"] for t in tokens]
        if len(ids) <= MAX_LEN:
            assert ids == case["ids"], case["text"][:40]
        else:  # /tokenize never truncates (as TEI); the golden ids are cut at 256
            assert ids[:MAX_LEN - 1] == case["ids"][:MAX_LEN - 1] and ids[-1] == case["ids"][-1]


def test_tokenize_tei_shape(server):
    text = "Héllo, wörld!"
    r = post(server, "/tokenize", {"inputs": text})
    assert r.status_code == 200, r.text
    tokens = r.json()[0]
    assert set(tokens[0]) == {"id", "text", "special", "start", "stop"}
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert tokens[-1]["text"] == "[SEP]" and tokens[-1]["special"]
    raw = text.encode()
    for t in tokens[1:-1]:
        assert not t["special"]
        assert raw[t["start"]:t["stop"]].decode() == t["text"]  # byte offsets, as TEI
    plain = post(server, "/tokenize", {"inputs": [text], "add_special_tokens": False}).json()[0]
    assert plain == tokens[1:-1]


# ---- batching with attention -------------------------------------------------------------

def test_mixed_embedding_and_attention_batches(start_server):
    s = start_server(backend="fused", max_wait_us=20000)
    attn = [attention_case(50 + i, 3 + i, 2, 8) for i in range(8)]
    emb = TEXTS[:24]
    before = s.metric("attnserve_batches_total")

    def run(job):
        kind, item = job
        if kind == "attn":
            r = post_attention(s, item[0])
            assert r.status_code == 200, r.text
            return max_abs_diff(r.json()["output"], item[1])
        r = post(s, "/embed", {"inputs": item["text"]})
        assert r.status_code == 200, r.text
        return cosine(r.json()[0], item["embedding"])

    jobs = [("emb", c) for c in emb] + [("attn", a) for a in attn]
    jobs = jobs[::2] + jobs[1::2]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, jobs))
    for (kind, item), res in zip(jobs, results):
        if kind == "attn":
            assert res < 2e-5
        else:
            assert res >= MIN_COSINE, item["text"][:40]
    batches = s.metric("attnserve_batches_total") - before
    assert batches < len(jobs), "no request was batched with another"
    assert s.metric("attnserve_embedding_inputs_total") == len(emb)
    assert s.metric("attnserve_embedding_tokens_total") == sum(len(c["ids"]) for c in emb)


def test_sighup_backend_swap_applies_to_the_model(start_server):
    s = start_server(backend="naive")
    case = TEXTS[30]
    r = openai(s, case["text"])
    assert r.headers["x-attention-backend"] == "naive"
    s.reload(backend="fused")
    wait_for(lambda: "backend switched" in s.log_text(), what="the backend switch")
    r = openai(s, case["text"])
    assert r.headers["x-attention-backend"] == "fused"
    check_golden(vectors(r)[0], case, "after SIGHUP")


# ---- errors ------------------------------------------------------------------------------

BAD_TYPES = [
    ("/v1/embeddings", {"input": 5}),
    ("/v1/embeddings", {"input": {"text": "a"}}),
    ("/v1/embeddings", {"input": ["a", 3]}),
    ("/v1/embeddings", {"input": [1.5, 2]}),
    ("/v1/embeddings", {"input": [[101, "x"]]}),
    ("/v1/embeddings", {"input": "a", "model": 3}),
    ("/v1/embeddings", {"input": "a", "dimensions": "3"}),
    ("/v1/embeddings", {"input": "a", "encoding_format": 1}),
    ("/v1/embeddings", {"input": "a", "temperature": 1}),
    ("/v1/embeddings", {}),
    ("/embed", {"inputs": [["a"]]}),
    ("/embed", {"inputs": "a", "normalize": "yes"}),
    ("/embed", {"inputs": "a", "truncate": 1}),
    ("/embed", {"input": "a"}),
    ("/tokenize", {"inputs": 3}),
    ("/tokenize", {"inputs": "a", "add_special_tokens": "no"}),
]


@pytest.mark.parametrize("path,body", BAD_TYPES)
def test_400_wrong_types(server, path, body):
    assert_error(post(server, path, body), 400, "invalid_request_error")


@pytest.mark.parametrize("path,field", [("/v1/embeddings", "input"), ("/embed", "inputs"),
                                        ("/tokenize", "inputs")])
def test_400_empty_inputs(server, path, field):
    # An empty string is refused as an empty list is (TEI's Empty on /embed).
    for value in ("", [], ["ok", ""]):
        err = assert_error(post(server, path, {field: value}), 400)
        assert "empty" in err["message"]
    if path == "/v1/embeddings":
        assert_error(post(server, path, {field: [[]]}), 400)


def test_400_invalid_utf8_and_json(server):
    for path in ("/v1/embeddings", "/embed", "/tokenize"):
        key = "input" if path == "/v1/embeddings" else "inputs"
        assert_error(post(server, path, b'{"%s": "caf\xe9"}' % key.encode()), 400)
        assert_error(post(server, path, b'{"%s": ' % key.encode()), 400)


def test_422_values(server):
    for d in (0, -1, DIM + 1):
        err = assert_error(post(server, "/v1/embeddings", {"input": "a", "dimensions": d}), 422)
        assert str(DIM) in err["message"]
    assert_error(post(server, "/v1/embeddings", {"input": "a", "encoding_format": "int8"}), 422)
    err = assert_error(post(server, "/v1/embeddings", {"input": [101, 30522, 102]}), 422)
    assert "vocabulary" in err["message"]
    assert_error(post(server, "/v1/embeddings", {"input": [[101, -1, 102]]}), 422)
    assert_error(post(server, "/v1/embeddings", {"input": [[7592] * (FULL_LEN + 1)]}), 422)
    assert post(server, "/v1/embeddings", {"input": [[7592] * FULL_LEN]}).status_code == 200


def test_422_limits(start_server):
    s = start_server(max_inputs_per_request=4, max_batch_tokens=512, max_batch_requests=8)
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs"), ("/tokenize", "inputs")):
        err = assert_error(post(s, path, {key: ["a"] * 5}), 422)
        assert "max_inputs_per_request" in err["message"]
        assert post(s, path, {key: ["a"] * 4}).status_code == 200
    # Three truncated inputs, 768 tokens, over the 512 of a batch: run in
    # pieces (test_split.py).
    r = post(s, "/embed", {"inputs": [LONG, LONG, LONG]})
    assert r.status_code == 200 and len(r.json()) == 3
    assert post(s, "/v1/embeddings", {"input": [[7592] * FULL_LEN]}).status_code == 200
    s.reload(max_inputs_per_request=2)
    wait_for(lambda: "configuration reloaded" in s.log_text(), what="the reload")
    assert_error(post(s, "/embed", {"inputs": ["a"] * 3}), 422)


def test_429_and_headers_like_the_other_endpoints(start_server):
    s = start_server(max_queue=1, max_batch_requests=1, max_wait_us=0, backend="naive")
    r = post(s, "/embed", {"inputs": "hello"}, timeout=30)
    for h in ("x-request-id", "x-queue-time-ms", "x-inference-time-ms", "x-attention-backend"):
        assert h in r.headers
    # Keep the compute thread busy with long inputs; some of the burst must be refused.
    body = {"inputs": [LONG] * 1}
    with ThreadPoolExecutor(12) as pool:
        codes = [r.status_code for r in pool.map(lambda _: post(s, "/embed", body), range(12))]
    assert set(codes) <= {200, 429} and 429 in codes, codes


# ---- start-up --------------------------------------------------------------------------

def run_bin(tmp_path, *flags):
    from conftest import BIN, free_port
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "threads": 1}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run([BIN, "--config", str(cfg)] + list(flags), capture_output=True,
                          text=True, timeout=30, env=env)


def test_start_refuses_a_batch_smaller_than_the_model(tmp_path):
    # A text is cut at max_seq_length (256 here): a batch must hold one.
    for truncate in ("true", "false"):
        p = run_bin(tmp_path, "--model=" + MODEL_DIR, "--max_batch_tokens=255",
                    "--truncate=" + truncate)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "max_batch_tokens" in p.stdout + p.stderr and "max_seq_length" in p.stderr


def test_batch_below_the_positions_holds_token_ids_to_it(start_server):
    # 300 tokens a batch: texts (cut at 256) fit, and token-id inputs, which
    # may otherwise reach the model's 512 positions, are held to 300.
    s = start_server(max_batch_tokens=300)
    ok = requests.post(s.url("/v1/embeddings"), json={"input": [[101] + [2000] * 298 + [102]]})
    assert ok.status_code == 200, ok.text
    err = assert_error(requests.post(s.url("/v1/embeddings"),
                                     json={"input": [[101] + [2000] * 299 + [102]]}), 422)
    assert "at most 300" in err["message"] and "max_batch_tokens" in err["message"]


def test_start_refuses_missing_and_corrupt_models(tmp_path):
    p = run_bin(tmp_path, "--model=" + str(tmp_path / "nowhere"))
    assert p.returncode == 2 and "model" in p.stdout + p.stderr
    bad = tmp_path / "bad"
    shutil.copytree(MODEL_DIR, bad, ignore=shutil.ignore_patterns("model.safetensors"))
    with open(os.path.join(MODEL_DIR, "model.safetensors"), "rb") as f:
        (bad / "model.safetensors").write_bytes(f.read(4096))  # truncated
    p = run_bin(tmp_path, "--model=" + str(bad))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "safetensors" in p.stdout + p.stderr


def test_info_shows_the_model(server):
    info = requests.get(server.url("/info"), timeout=5).json()
    m = info["model"]
    assert m["name"] == os.path.basename(MODEL_DIR) and m["path"] == MODEL_DIR
    assert (m["hidden_size"], m["layers"], m["max_length"]) == (DIM, 6, FULL_LEN)
    assert m["pooling"] == "mean" and m["normalize"] is True
    mem = info["memory"]
    assert mem["weights_bytes"] > 80 << 20
    assert mem["model_workspace_bytes"] > 0
    assert mem["workspace_bytes"] == mem["attention_workspace_bytes"] + mem["model_workspace_bytes"]

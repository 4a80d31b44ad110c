"""Shadow verification while serving (issue 7 §2, §4): the test-only faulty
backend (build/attnserve-faulty) starts correct, then corrupts its output;
with verification on, the service must catch it, switch to the fallback on
its own without failing a request, and answer correctly from then on. The
real backends verify clean; the per-batch trace and the GFLOP/s gauge work.

ATTNSERVE_FAULTY_AFTER is set high enough that the faulty backend passes
whatever start-up self-test runs first (its forward calls count too) and
goes wrong while serving."""
import json
import math
import os
import threading
import time

import pytest
import requests

import conftest
from conftest import JSON, attention_case, golden, max_abs_diff, post_attention, wait_for

GOLDEN = golden("embeddings.json.gz")
TEXTS = [c for c in GOLDEN["mean_normalized"] if c["text"] and len(c["ids"]) <= 64]
MIN_COSINE = 0.99999
ATTN_TOL = 2e-5  # test_attention.py's
# Forward calls the faulty backend gets right: room for a start-up self-test
# of a few shapes, then ~6 calls (layers) per embedding batch.
FAULTY_AFTER = int(os.environ.get("ATTNSERVE_TEST_FAULTY_AFTER", "300"))
SWITCH_TIMEOUT = 180  # seconds; under sanitizers the naive-based faulty is slow


def faulty_bin():
    path = os.path.join(os.path.dirname(conftest.BIN), "attnserve-faulty")
    assert os.access(path, os.X_OK), "missing %s (make build/attnserve-faulty)" % path
    return path


@pytest.fixture
def start_faulty(start_server, monkeypatch):
    """start_faulty(env, **settings): the faulty build, serving backend
    faulty with verification of every batch."""
    def start(env=None, **settings):
        monkeypatch.setattr(conftest, "BIN", faulty_bin())
        env = dict({"ATTNSERVE_FAULTY_AFTER": str(FAULTY_AFTER)}, **(env or {}))
        s = start_server(env=env, **dict(dict(backend="faulty", fallback_backends="fused,naive",
                                              verify_sample_rate=1.0,
                                              verify_mismatch_threshold=2), **settings))
        info = requests.get(s.url("/info"), timeout=5).json()
        assert info["backend"] == "faulty", \
            "faulty did not start as the backend (raise ATTNSERVE_TEST_FAULTY_AFTER?): %s" % info
        assert not info["fallback_active"]
        return s
    return start


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def embed(server, case, session):
    r = session.post(server.url("/v1/embeddings"), data=json.dumps({"input": case["text"]}),
                     headers=JSON, timeout=120)
    vec = r.json()["data"][0]["embedding"] if r.status_code == 200 else None
    return r.status_code, r.headers.get("x-attention-backend"), vec


def switched(server):
    return server.metric("attnserve_backend_fallback_active") == 1


def assert_switched(server, failing, to):
    m = server.metrics()
    assert m[("attnserve_verify_mismatches_total", (("backend", failing),))] >= 1
    assert m[("attnserve_verify_batches_total", (("backend", failing),))] >= 1
    assert m[("attnserve_backend_fallback_active", ())] == 1
    assert ("attnserve_build_info", (("simd", conftest_simd(server)),
                                     ("version", info(server)["version"]))) in m
    assert m[("attnserve_backend_active", (("backend", to),))] == 1
    assert m[("attnserve_backend_active", (("backend", failing),))] == 0
    i = info(server)
    assert i["backend"] == to and i["backend_setting"] == failing
    assert i["fallback_active"] is True
    assert i["verification"]["tripped"] is True
    assert failing in i["verification"]["fallback_reason"]
    log = server.log_text()
    assert "shadow verification mismatch backend=%s" % failing in log
    assert "SHADOW VERIFICATION FAILED" in log and "to=%s" % to in log


def info(server):
    return requests.get(server.url("/info"), timeout=5).json()


def conftest_simd(server):
    return info(server)["cpu_simd"]


def run_clients(server, nclients, stop, results):
    """Clients posting golden texts until stop is set; every answer is kept."""
    def client(k):
        with requests.Session() as session:
            i = k
            while not stop.is_set():
                case = TEXTS[i % len(TEXTS)]
                status, backend, vec = embed(server, case, session)
                results.append((status, backend, vec, case))
                i += nclients
    threads = [threading.Thread(target=client, args=(k,)) for k in range(nclients)]
    for t in threads:
        t.start()
    return threads


def test_faulty_backend_caught_and_replaced_under_load(start_faulty):
    s = start_faulty()
    stop, results = threading.Event(), []
    threads = run_clients(s, 6, stop, results)
    try:
        wait_for(lambda: switched(s), timeout=SWITCH_TIMEOUT, what="the switch to the fallback")
        # Keep serving a while on the fallback.
        n = len(results)
        wait_for(lambda: len(results) >= n + 30, timeout=60, what="answers after the switch")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert_switched(s, "faulty", "fused")

    # No request failed, before, during or after the switch.
    assert all(st == 200 for st, _, _, _ in results), \
        sorted({st for st, _, _, _ in results})
    after = [(vec, case) for st, b, vec, case in results if b == "fused"]
    before = [(vec, case) for st, b, vec, case in results if b == "faulty"]
    assert len(after) >= 30 and before
    # Every answer the fallback computed matches sentence-transformers.
    for vec, case in after:
        c = cosine(vec, case["embedding"])
        assert c >= MIN_COSINE, "after the switch: %r cosine %.8f" % (case["text"][:40], c)
    # The fault was real: shadow mode answered some requests wrongly first.
    assert any(cosine(vec, case["embedding"]) < 0.99 for vec, case in before)


def test_tail_only_corruption_is_caught(start_faulty):
    s = start_faulty(env={"ATTNSERVE_FAULTY_MODE": "tail"}, verify_mismatch_threshold=1)
    with requests.Session() as session:
        for i in range(2000):
            if switched(s):
                break
            status, _, _ = embed(s, TEXTS[i % len(TEXTS)], session)[:3]
            assert status == 200
        assert_switched(s, "faulty", "fused")
        for case in TEXTS[:10]:
            status, backend, vec = embed(s, case, session)
            assert status == 200 and backend == "fused"
            assert cosine(vec, case["embedding"]) >= MIN_COSINE


def test_attention_endpoint_caught_and_replaced(start_faulty):
    s = start_faulty(verify_mismatch_threshold=1, fallback_backends="naive")
    cases = [attention_case(seed, 9 + seed % 23, 2, 16, causal=seed % 2 == 1)
             for seed in range(8)]
    for i in range(FAULTY_AFTER + 200):
        if switched(s):
            break
        r = post_attention(s, cases[i % len(cases)][0])
        assert r.status_code == 200, r.text
    assert_switched(s, "faulty", "naive")
    for body, want in cases:
        r = post_attention(s, body)
        assert r.status_code == 200 and r.json()["backend"] == "naive"
        assert max_abs_diff(r.json()["output"], want) < ATTN_TOL


def test_a_caught_backend_stays_out_until_restart(start_faulty):
    """Every reload re-selects the backend, so a reload of any setting must
    not bring back one that verification caught; naming another backend
    still works and ends the fallback."""
    s = start_faulty(verify_mismatch_threshold=1, fallback_backends="fused")
    with requests.Session() as session:
        for i in range(2000):
            if switched(s):
                break
            assert embed(s, TEXTS[i % len(TEXTS)], session)[0] == 200
    assert_switched(s, "faulty", "fused")
    # A reload of an unrelated setting keeps the fallback: the setting still
    # names faulty, which is refused with the reason logged.
    assert "caught by shadow verification" not in s.log_text()
    s.reload(max_wait_us=1000)
    wait_for(lambda: info(s)["limits"]["max_wait_us"] == 1000, timeout=10, what="the reload")
    wait_for(lambda: "caught by shadow verification" in s.log_text(), timeout=10,
             what="the refusal's log line")
    assert info(s)["backend"] == "fused" and info(s)["fallback_active"] is True
    assert s.metric("attnserve_backend_fallback_active") == 1
    s.reload(backend="naive")
    wait_for(lambda: info(s)["backend"] == "naive", timeout=10, what="the reload")
    i = info(s)
    assert i["fallback_active"] is False and i["verification"]["tripped"] is False
    assert i["verification"]["fallback_reason"] == ""
    assert s.metric("attnserve_backend_fallback_active") == 0


@pytest.mark.parametrize("backend", ["fused", "naive"])
def test_real_backends_verify_clean(start_server, backend):
    s = start_server(backend=backend, fallback_backends="naive", verify_sample_rate=1.0,
                     verify_mismatch_threshold=1)
    with requests.Session() as session:
        for case in TEXTS[:20]:
            status, ran, vec = embed(s, case, session)
            assert status == 200 and ran == backend
        for seed in range(6):
            body, want = attention_case(100 + seed, 5 + 7 * seed, 3, 32, causal=seed % 2 == 0)
            r = post_attention(s, body, session=session)
            assert r.status_code == 200 and max_abs_diff(r.json()["output"], want) < ATTN_TOL
    # Checks finish on the checker thread after the answers.
    wait_for(lambda: s.metric("attnserve_verify_batches_total", backend=backend)
             + s.metric("attnserve_verify_skipped_total") >= 26, timeout=30,
             what="every batch checked or skipped")
    m = s.metrics()
    # A batch sampled while the (low-priority) checker is still busy is
    # skipped, so on a loaded machine not all 26 are checked.
    assert m[("attnserve_verify_batches_total", (("backend", backend),))] >= 5
    assert m[("attnserve_verify_mismatches_total", (("backend", backend),))] == 0
    assert m[("attnserve_backend_fallback_active", ())] == 0
    # Every check within the bound: all in buckets le <= 1.
    assert m[("attnserve_verify_max_error_over_bound_bucket", (("le", "1"),))] == \
        m[("attnserve_verify_max_error_over_bound_count", ())]
    assert m[("attnserve_attention_kernel_flops_per_second", (("backend", backend),))] > 0
    assert info(s)["backend"] == backend
    assert info(s)["memory"]["verification_bytes"] > 0


def test_rate_zero_verifies_nothing(start_server):
    s = start_server(backend="fused", verify_sample_rate=0.0)
    with requests.Session() as session:
        for case in TEXTS[:10]:
            assert embed(s, case, session)[0] == 200
    m = s.metrics()
    assert m[("attnserve_verify_batches_total", (("backend", "fused"),))] == 0
    assert m[("attnserve_verify_skipped_total", ())] == 0


def test_trace_file_lines_and_reload(start_server, tmp_path):
    path = str(tmp_path / "trace.jsonl")
    s = start_server(backend="fused", verify_sample_rate=1.0, trace_file=path)
    with requests.Session() as session:
        for case in TEXTS[:5]:
            assert embed(s, case, session)[0] == 200
        body, _ = attention_case(3, 7, 2, 8)
        assert post_attention(s, body, session=session).status_code == 200
    wait_for(lambda: s.metric("attnserve_trace_lines_total") >= 6, timeout=10,
             what="trace lines written")
    lines = [json.loads(l) for l in open(path).read().splitlines()]
    assert len(lines) >= 6
    ids = [l["batch"] for l in lines]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    emb = [l for l in lines if "embed" in l]
    att = [l for l in lines if "attention" in l]
    assert emb and att
    for l in lines:
        assert l["backend"] == "fused" and l["requests"] >= 1 and l["tokens"] >= 1
        assert l["compute_ms"] >= 0 and l["queue_wait_ms"]["max"] >= l["queue_wait_ms"]["mean"]
        assert isinstance(l["verified"], bool)
    for l in emb:
        st = l["embed"]["stages_ms"]
        assert set(st) == {"embeddings", "qkv", "attention", "out_proj", "ffn", "norms", "pooling"}
        assert all(v >= 0 for v in st.values()) and st["qkv"] > 0
        assert sum(st.values()) <= l["compute_ms"] + 0.01
        assert -1 <= l["embed"]["verified_layer"] < 6
    assert att[0]["attention"]["groups"] == 1
    # Reload: tracing off, no more lines.
    s.reload(trace_file="")
    wait_for(lambda: "configuration reloaded" in s.log_text(), timeout=10, what="the reload")
    n = len(open(path).read().splitlines())
    with requests.Session() as session:
        for case in TEXTS[:3]:
            assert embed(s, case, session)[0] == 200
    assert len(open(path).read().splitlines()) == n

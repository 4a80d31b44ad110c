"""Under load: concurrent clients batched together, graceful shutdown with no
request lost, and SIGHUP backend swaps with no request lost or wrong."""
import json
import random
import re
import threading
import time

import pytest
import requests

from conftest import (as_base64, attention_case, from_base64, max_abs_diff, post_attention,
                      slow_body, wait_for)

TOL = 2e-5

# A few shapes with different (heads, head_dim, causal), so batches hold
# several groups; each with its reference computed once.
CASES = [attention_case(100 + i, seq, heads, dim, causal)
         for i, (seq, heads, dim, causal) in enumerate([
             (4, 2, 8, False), (7, 2, 8, True), (3, 1, 16, False), (12, 4, 4, False),
             (5, 2, 8, False), (9, 1, 16, True), (2, 3, 8, False), (16, 2, 8, True)])]


def check_case(r, case_index, encoding):
    assert r.status_code == 200, (r.status_code, r.text)
    out = r.json()["output"]
    got = from_base64(out) if encoding == "base64" else out
    return max_abs_diff(got, CASES[case_index][1]) < TOL


def body_for(case_index, encoding):
    body = CASES[case_index][0]
    return json.dumps(as_base64(body) if encoding == "base64" else body)


class Clients:
    """n threads, each running fn(worker, session) and collecting problems."""

    def __init__(self, n, fn):
        self.problems, self.lock = [], threading.Lock()
        self.barrier = threading.Barrier(n)
        self.threads = [threading.Thread(target=self.run, args=(i, fn)) for i in range(n)]

    def run(self, i, fn):
        with requests.Session() as session:
            self.barrier.wait(timeout=30)
            try:
                fn(i, session)
            except Exception as e:  # noqa: BLE001 - every failure is reported below
                with self.lock:
                    self.problems.append(repr(e))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def join(self, timeout=120):
        end = time.time() + timeout
        for t in self.threads:
            t.join(timeout=max(0.1, end - time.time()))
        assert not any(t.is_alive() for t in self.threads), "clients still running"
        return self.problems


def test_64_concurrent_clients_are_batched(start_server):
    s = start_server(max_wait_us=20000, max_batch_requests=64)
    per_client = 4

    def client(i, session):
        rng = random.Random(i)
        for _ in range(per_client):
            c, enc = rng.randrange(len(CASES)), rng.choice(["nested", "base64"])
            r = post_attention(s, body_for(c, enc), session=session)
            assert check_case(r, c, enc), "wrong output for case %d" % c

    problems = Clients(64, client).start().join()
    assert problems == []
    m = s.metrics()
    ok = m[("attnserve_http_requests_total", (("route", "/v1/attention"), ("status", "200")))]
    assert ok == 64 * per_client
    batches = m[("attnserve_batch_size_count", ())]
    singles = m[("attnserve_batch_size_bucket", (("le", "1"),))]
    assert batches > singles, "no batch held more than one request"
    assert m[("attnserve_batch_size_sum", ())] == 64 * per_client


def test_graceful_shutdown_under_load_loses_nothing(start_server):
    s = start_server(max_batch_requests=4, max_wait_us=0, drain_timeout_s=20)
    slow = slow_body(seq=1024)
    results = {}

    def client(i, session):
        if i % 4 == 0:
            c = i % len(CASES)
            r = post_attention(s, body_for(c, "nested"), session=session)
            results[i] = r.status_code
            assert check_case(r, c, "nested"), "wrong output"
        else:
            results[i] = post_attention(s, slow, session=session).status_code

    n = 40
    clients = Clients(n, client).start()
    # Every request has reached the server (headers in) before the signal:
    # in flight (less the scrape itself) or already answered.
    def arrived():
        m = s.metrics()
        return (m[("attnserve_http_requests_in_flight", ())] - 1 + m.get(
            ("attnserve_http_requests_total", (("route", "/v1/attention"), ("status", "200")),
             ), 0)) >= n
    wait_for(arrived, timeout=30, what="all requests to arrive")
    assert s.metric("attnserve_http_requests_in_flight") > 1, "the load ended before the signal"
    s.terminate()
    t0 = time.time()
    problems = clients.join()
    assert problems == []
    assert sorted(results) == list(range(n))
    assert set(results.values()) == {200}, results
    assert s.wait_exit(timeout=25) == 0
    assert time.time() - t0 < 20
    with pytest.raises(requests.ConnectionError):
        requests.get(s.url("/health"), timeout=2)
    log = s.log_text()
    draining = re.search(r"draining signal=\S+ active_requests=(\d+)", log)
    assert draining and int(draining.group(1)) > 0 and "drained" in log


def test_sighup_swaps_backend_under_load(start_server):
    s = start_server(backend="naive", max_wait_us=1000)
    stop = threading.Event()
    seen, seen_lock = set(), threading.Lock()
    counts = [0] * 32

    def client(i, session):
        rng = random.Random(1000 + i)
        while not stop.is_set():
            c, enc = rng.randrange(len(CASES)), rng.choice(["nested", "base64"])
            r = post_attention(s, body_for(c, enc), session=session)
            assert check_case(r, c, enc), "wrong output after a swap"
            with seen_lock:
                seen.add(r.json()["backend"])
            counts[i] += 1

    clients = Clients(32, client).start()
    for backend in ("fused", "naive", "fused", "naive", "fused"):
        time.sleep(0.4)
        s.reload(backend=backend)
        wait_for(lambda: requests.get(s.url("/info"), timeout=5).json()["backend"] == backend,
                 what="backend %s in force" % backend)
    time.sleep(0.4)
    # A reload with an invalid value is refused whole; the service goes on.
    s.reload(backend="bogus")
    wait_for(lambda: "reload refused" in s.log_text(), what="the refusal")
    time.sleep(0.3)
    stop.set()
    assert clients.join() == []
    assert seen == {"naive", "fused"}
    assert min(counts) > 0
    info = requests.get(s.url("/info"), timeout=5).json()
    assert info["backend"] == "fused"
    m = s.metrics()
    for b in ("naive", "fused"):
        assert m[("attnserve_attention_kernel_calls_total", (("backend", b),))] > 0
    assert s.log_text().count("backend switched") == 5
    assert "status=0" not in s.log_text()

"""Every error status the service answers with, each in the one error shape,
and the service still serving afterwards."""
import json
import threading

import requests

from conftest import (JSON, assert_error, attention_case, as_base64, post_attention, slow_body,
                      wait_for)

SMALL, SMALL_REF = attention_case(1, 3, 2, 4)


def assert_still_serving(server):
    r = post_attention(server, SMALL)
    assert r.status_code == 200, r.text


# ---- 400: malformed JSON and wrong types -------------------------------------------

def test_400_malformed_json(server):
    for body in ("{", "", "[1, 2]", '{"q": [}', "nul", '{"q": NaN}', '{"q": Infinity}',
                 '{"q": 1e999}', '{"a": 1, "a": 2}', '{"q": "\\u0000"}', b'{"q": "\xff"}'):
        err = assert_error(post_attention(server, body), 400, "invalid_request_error")
        assert err["message"]
    assert_still_serving(server)


def test_400_deep_nesting_is_refused_cheaply(server):
    body = "[" * 100000 + "]" * 100000
    err = assert_error(post_attention(server, body), 400)
    assert "nested" in err["message"]
    assert_still_serving(server)


def test_400_wrong_types(server):
    bad = [
        dict(SMALL, q="text"),
        dict(SMALL, q=[[["x", 1, 2, 3]] * 2] * 3),
        dict(SMALL, causal="yes"),
        dict(SMALL, extra=1),
        {"k": SMALL["k"], "v": SMALL["v"]},
        dict(SMALL, q={"shape": [3, 2, 4]}),
        dict(SMALL, q={"shape": [3, 2, 4.5], "data": ""}),
        dict(SMALL, q={"shape": [3, 2, 4], "data": "!" * 128}),
    ]
    for body in bad:
        assert_error(post_attention(server, body), 400, "invalid_request_error")


# ---- 422: well-formed but invalid -----------------------------------------------------

def test_422_invalid_shapes_and_values(server):
    other, _ = attention_case(2, 4, 2, 4)
    b64 = as_base64(SMALL)
    bad = [
        dict(SMALL, k=other["k"]),                                  # shapes differ
        dict(SMALL, q=[], k=[], v=[]),                              # seq = 0
        dict(SMALL, q=[[]] * 3, k=[[]] * 3, v=[[]] * 3),            # heads = 0
        dict(SMALL, q=[[[1.0] * 4, [1.0] * 3]] * 3),                # ragged
        dict(SMALL, q=[[[1e39] * 4] * 2] * 3),                      # beyond float32
        dict(b64, q=dict(b64["q"], shape=[0, 2, 4])),               # zero dimension
        dict(b64, q=dict(b64["q"], shape=[-3, 2, 4])),              # negative
        dict(b64, q=dict(b64["q"], shape=[3, 2, 5])),               # data length mismatch
        dict(b64, q=dict(b64["q"], shape=[1 << 40, 2, 4])),         # absurd
        dict(b64, q=dict(b64["q"], shape=[3, 4096, 4])),            # too many heads
        dict(b64, q=dict(b64["q"], shape=[3, 2, 1024])),            # head_dim too large
    ]
    for body in bad:
        assert_error(post_attention(server, body), 422, "invalid_value_error")
    # NaN and Infinity smuggled in through base64.
    for bits in (b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f"):
        import base64
        raw = bytearray(base64.b64decode(b64["q"]["data"]))
        raw[4:8] = bits
        body = dict(b64, q=dict(b64["q"], data=base64.b64encode(bytes(raw)).decode()))
        err = assert_error(post_attention(server, body), 422)
        assert "non-finite" in err["message"]
    assert_still_serving(server)


def test_422_more_tokens_than_a_batch(start_server):
    # The smallest budget the model allows (its 512-token maximum input).
    s = start_server(max_batch_tokens=512)
    body, _ = attention_case(3, 513, 1, 4)
    err = assert_error(post_attention(s, body), 422)
    assert "max_batch_tokens" in err["message"] or "too large" in err["message"]


# ---- 415, 413 ----------------------------------------------------------------------------

def test_415_not_json(server):
    for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": ctype} if ctype else {}
        r = requests.post(server.url("/v1/attention"), data=json.dumps(SMALL).encode(),
                          headers=headers, timeout=5)
        assert_error(r, 415, "unsupported_media_type_error")
    r = requests.post(server.url("/v1/attention"), data=json.dumps(SMALL),
                      headers={"Content-Type": "application/json; charset=utf-8"}, timeout=5)
    assert r.status_code == 200


def test_413_with_and_without_content_length(start_server):
    s = start_server(max_body_bytes=65536)
    big = b'{"q": "' + b"a" * 100000 + b'"}'
    assert_error(post_attention(s, big), 413, "request_too_large_error")

    def chunks():
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192]
    r = requests.post(s.url("/v1/attention"), data=chunks(), headers=JSON, timeout=10)
    assert "Content-Length" not in r.request.headers
    assert_error(r, 413)
    # A chunked body within the limit is fine.
    small = json.dumps(SMALL).encode()
    r = requests.post(s.url("/v1/attention"), data=iter([small[:10], small[10:]]), headers=JSON,
                      timeout=10)
    assert r.status_code == 200, r.text
    assert_still_serving(s)


# ---- 401 ------------------------------------------------------------------------------------

def test_401_without_the_key(start_server, tmp_path):
    keyfile = tmp_path / "keys"
    keyfile.write_text("# service keys\nfile-key-1\n")
    s = start_server(env={"ATTNSERVE_API_KEY": "env-key-2"}, api_key_file=str(keyfile))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "file-key-1"},
                    {"Authorization": "Bearer file-key-"}, {"Authorization": "Basic ZmlsZQ=="}):
        r = post_attention(s, SMALL, **headers)
        assert_error(r, 401, "authentication_error")
        assert r.headers["WWW-Authenticate"] == "Bearer"
    for key in ("file-key-1", "env-key-2"):
        assert post_attention(s, SMALL, Authorization="Bearer " + key).status_code == 200
    assert_error(requests.get(s.url("/info"), timeout=5), 401)
    for path in ("/health", "/ready", "/metrics"):
        assert requests.get(s.url(path), timeout=5).status_code == 200, path
    # metrics_require_key is reloadable.
    s.reload(metrics_require_key=True)
    wait_for(lambda: requests.get(s.url("/metrics"), timeout=5).status_code == 401,
             what="/metrics to need a key")
    r = requests.get(s.url("/metrics"), headers={"Authorization": "Bearer env-key-2"}, timeout=5)
    assert r.status_code == 200
    assert "file-key-1" not in s.log_text() and "env-key-2" not in s.log_text()


# ---- 429, 504, 503 ---------------------------------------------------------------------------

def run_concurrently(fns):
    results = [None] * len(fns)

    def run(i):
        try:
            results[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - reported by the caller's asserts
            results[i] = e
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_429_when_the_queue_is_full(start_server):
    s = start_server(max_queue=1, max_batch_requests=1, max_wait_us=0)
    body = slow_body()
    results = run_concurrently([lambda: post_attention(s, body)] * 8)
    statuses = sorted(r.status_code for r in results)
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(200) >= 2 and 429 in statuses, statuses
    rejected = next(r for r in results if r.status_code == 429)
    assert_error(rejected, 429, "overloaded_error")
    assert rejected.headers["Retry-After"]
    assert s.metric("attnserve_requests_rejected_total", reason="queue_full") == statuses.count(429)


def test_504_when_the_deadline_passes_in_the_queue(start_server):
    s = start_server(request_timeout_ms=60000, max_batch_requests=1, max_wait_us=0)
    results = []
    body = slow_body()
    slow = [threading.Thread(target=lambda: results.append(post_attention(s, body)))
            for _ in range(2)]
    for t in slow:
        t.start()
    # One slow batch running and one queued: the small request waits for
    # the whole of the second, however long the reload below takes.
    wait_for(lambda: s.metric("attnserve_batch_requests_in_flight") == 1
             and s.metric("attnserve_queue_depth") == 1, timeout=60, what="the slow batches")
    # Only the request behind the slow ones gets the short deadline: with it
    # from the start, reading and decoding the slow 2 MB body on a loaded
    # machine used up the slow request's own 100 ms (seen: 120 ms).
    s.reload(request_timeout_ms=100)
    wait_for(lambda: requests.get(s.url("/info"), timeout=5).json()["limits"]["request_timeout_ms"]
             == 100, what="the reloaded deadline")
    r = post_attention(s, SMALL)
    for t in slow:
        t.join(timeout=60)
    assert [x.status_code for x in results] == [200, 200]
    # The premise: each slow batch held the compute thread past the deadline.
    for x in results:
        assert float(x.headers["x-inference-time-ms"]) > 150, x.headers
    assert_error(r, 504, "timeout_error")
    # The deadline counts from arrival, so reading and decoding the body
    # took some of the 100 ms before the queue did.
    assert 0 < float(r.headers["x-queue-time-ms"]) <= 1000
    assert s.metric("attnserve_requests_timed_out_total") == 1


def test_503_while_draining(start_server):
    """No linger: the listener closes at once, and a request on a keep-alive
    connection from before gets 503 (test_connections.py has the linger).

    Nothing here waits a fixed time. The checks start once the log says the
    listener closed, which the drain writes after /ready turned 503 and after
    new requests are refused: a sleep after SIGTERM lost that race when the
    signal thread was scheduled late. The queued requests keep the drain open
    during the checks, and however long they take (three in a row, about ten
    seconds each on a starved core) the drain waits for them; nor does the
    server close the idle keep-alive connections while they are read and
    queued (seven seconds there, near the usual connection_timeout_s). Both
    limits are set far past that, so the test does not depend on the
    machine's speed."""
    s = start_server(max_batch_requests=1, max_wait_us=0, drain_linger_ms=0, drain_timeout_s=300,
                     connection_timeout_s=300)
    # Keep-alive connections opened before the drain stay usable during it.
    early = [requests.Session(), requests.Session()]
    for sess in early:
        assert sess.get(s.url("/health"), timeout=5).status_code == 200
    body = slow_body()
    results = []

    def queued():
        try:
            results.append(post_attention(s, body, timeout=300).status_code)
        except requests.RequestException as e:
            results.append(repr(e))
    workers = [threading.Thread(target=queued) for _ in range(3)]
    for w in workers:
        w.start()
    wait_for(lambda: s.metric("attnserve_queue_depth") + s.metric(
        "attnserve_batch_requests_in_flight") == 3, timeout=60, what="three queued requests")
    s.terminate()
    wait_for(lambda: "listener closed" in s.log_text(), timeout=60, what="the drain to begin")
    assert len(results) < 3, "the premise: queued requests still hold the drain open"
    err = assert_error(early[0].get(s.url("/ready"), timeout=5), 503, "unavailable_error")
    assert "draining" in err["message"]
    r = post_attention(s, SMALL, session=early[1])
    assert_error(r, 503)
    assert r.headers["Connection"] == "close"
    for w in workers:
        w.join(timeout=300)
    assert results == [200, 200, 200]
    assert s.wait_exit(timeout=60) == 0

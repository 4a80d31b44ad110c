"""Requests larger than a batch (max_inputs_per_request, default 2048, as
OpenAI): split into pieces of one batch each, queued one at a time
(server/work/job.h), answered in input order once every piece is done.

Checked here: a 2048-input request is answered whole and in order, 2049 is
422; a small request sent while a large one runs is computed at most one
batch later (read from the trace: the batch before it started before it
arrived; no duration is asserted); a client that closes stops the pieces
not yet queued; the deadline covers the whole request; the request-memory
budget still refuses with 503 and 413."""
import concurrent.futures
import json
import socket
import time

import requests

from conftest import JSON, assert_error, wait_for

MAX_INPUTS = 2048
PIECE = 64  # the test servers' max_batch_requests (conftest.BASE_SETTINGS)


def post(server, path, body, timeout=60):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=timeout)


def texts(n, words=6):
    return ["input %d: %s" % (i, " ".join("w%d" % ((i * 7 + k) % 991) for k in range(words)))
            for i in range(n)]


# The test machine may be slow and loaded: a whole 2048-input request gets
# ten minutes, as the client's timeout does.
SLOW = 600000


def test_2048_inputs_answered_in_order_and_2049_refused(start_server):
    s = start_server(request_timeout_ms=SLOW)
    info = requests.get(s.url("/info"), timeout=10).json()
    assert info["limits"]["max_inputs_per_request"] == MAX_INPUTS
    inputs = texts(MAX_INPUTS, 2)
    b0 = s.metric("attnserve_batches_total")
    r = post(s, "/v1/embeddings", {"input": inputs}, timeout=600)
    assert r.status_code == 200, r.text[:300]
    data = r.json()["data"]
    assert [d["index"] for d in data] == list(range(MAX_INPUTS))
    # Pieces of at most max_batch_requests inputs: at least 2048 / 64 batches.
    assert s.metric("attnserve_batches_total") - b0 >= MAX_INPUTS // PIECE
    # Each vector is the one its input gets alone (the same forward, so
    # equal to float rounding of the batch's packing: exactly equal here).
    for i in (0, 63, 64, 1000, MAX_INPUTS - 1):
        alone = post(s, "/v1/embeddings", {"input": inputs[i]}).json()["data"][0]["embedding"]
        assert max(abs(a - b) for a, b in zip(alone, data[i]["embedding"])) < 1e-6, i
    tei = post(s, "/embed", {"inputs": inputs[:200]}, timeout=600)
    assert tei.status_code == 200 and len(tei.json()) == 200
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        err = assert_error(post(s, path, {key: texts(MAX_INPUTS + 1, 1)}), 422)
        assert "max_inputs_per_request" in err["message"] and "2049" in err["message"]


def test_a_small_request_waits_at_most_one_batch_behind_a_large_one(start_server, tmp_path):
    trace = tmp_path / "trace.jsonl"
    s = start_server(trace_file=str(trace), max_wait_us=0, request_timeout_ms=SLOW)
    big = texts(MAX_INPUTS, 3)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        fut_big = pool.submit(post, s, "/embed", {"inputs": big}, 600)
        wait_for(lambda: s.metric("attnserve_embedding_inputs_total") >= PIECE, timeout=120,
                 what="the large request's first piece")
        small = post(s, "/embed", {"inputs": "a small request"}, timeout=600)
        big_done_at_small = fut_big.done()
        r = fut_big.result()
    assert small.status_code == 200 and r.status_code == 200
    assert not big_done_at_small, "the large request finished first"
    assert len(r.json()) == MAX_INPUTS
    s.stop()
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    # The small request is the only one-sequence batch (the large one's
    # pieces are 64 inputs each but the last, which is 2048 % 64 = 0 -> 64).
    small_batches = [b for b in lines if b["sequences"] % PIECE != 0]
    assert len(small_batches) == 1, [(b["batch"], b["sequences"]) for b in lines]
    # Before it ran: only the batch that was running when it reached the
    # scheduler, so the batch before it started before it arrived (a piece
    # queued after it and run first would have started later). Batches run
    # one at a time; each line's time is its end, compute_ms its run and
    # queue_wait_ms its requests' wait before it. Counting batches between a
    # /metrics scrape and the request's arrival would instead depend on how
    # long the client took to send it.
    small_b = small_batches[0]
    prev = {b["batch"]: b for b in lines}[small_b["batch"] - 1]
    arrived = small_b["time"] - (small_b["compute_ms"] + small_b["queue_wait_ms"]["max"]) / 1e3
    prev_start = prev["time"] - prev["compute_ms"] / 1e3
    # 1 ms: the line's time is the wall clock, its durations the monotonic
    # one, and the two may be slewed apart by up to 0.05 % meanwhile.
    assert prev_start <= arrived + 1e-3, (prev, small_b)
    assert len(lines) >= MAX_INPUTS // PIECE + 1


def test_a_client_that_closes_cancels_the_remaining_pieces(start_server):
    s = start_server(request_timeout_ms=SLOW)
    body = json.dumps({"inputs": texts(MAX_INPUTS, 40)}).encode()
    c = socket.create_connection(("127.0.0.1", s.settings["port"]), timeout=30)
    c.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    wait_for(lambda: s.metric("attnserve_embedding_inputs_total") >= PIECE, timeout=120,
             what="the first piece")
    at_close = s.metric("attnserve_embedding_inputs_total")
    c.close()
    # In flight: the /metrics request asking, and nothing else.
    wait_for(lambda: s.metric("attnserve_http_requests_in_flight") <= 1, timeout=120,
             what="the request to end")
    time.sleep(0.5)
    computed = s.metric("attnserve_embedding_inputs_total")
    # The piece running at the close, perhaps the one queued then: no more.
    assert computed <= at_close + 2 * PIECE < MAX_INPUTS, (at_close, computed)
    assert s.metric("attnserve_queue_depth") == 0
    assert post(s, "/embed", {"inputs": "still serving"}).status_code == 200


def test_the_deadline_covers_the_whole_request(start_server):
    s = start_server(request_timeout_ms=1000)
    r = post(s, "/embed", {"inputs": texts(MAX_INPUTS, 60)}, timeout=600)
    err = assert_error(r, 504)
    assert "inputs computed" in err["message"] or "timed out" in err["message"], err
    wait_for(lambda: s.metric("attnserve_http_requests_in_flight") <= 1, timeout=120,
             what="the request")
    assert s.metric("attnserve_embedding_inputs_total") < MAX_INPUTS
    assert post(s, "/embed", {"inputs": "still serving"}).status_code == 200


def test_budget_refusals_hold_for_split_requests(start_server):
    # Alone over the budget: 2048 vectors as JSON numbers are about 10 MB of
    # text (13 bytes a number reserved) beside the 3 MB job, over 11 MiB:
    # refused by the budget (its 413, or 503 when it counts part of the
    # request as held by others), and the budget is given back. As base64
    # (4.3 MB of text, the 3 MB job) the same request fits.
    s = start_server(max_request_memory_bytes=11 << 20, max_body_bytes=1 << 20,
                     request_timeout_ms=SLOW)
    r = post(s, "/v1/embeddings", {"input": texts(MAX_INPUTS, 1)}, timeout=600)
    err = assert_error(r, r.status_code)
    assert r.status_code in (413, 503) and "max_request_memory_bytes" in err["message"]
    wait_for(lambda: s.metric("attnserve_request_memory_bytes") == 0, what="the budget back")
    # base64 answers fit: the same request is then served.
    r = post(s, "/v1/embeddings", {"input": texts(MAX_INPUTS, 1), "encoding_format": "base64"},
             timeout=600)
    assert r.status_code == 200 and len(r.json()["data"]) == MAX_INPUTS
    # Held by others: uploads that never complete hold all but a few KiB
    # (as test_membudget does), and a large request gets 503 with Retry-After.
    budget = 1 << 20
    s2 = start_server(max_request_memory_bytes=budget, max_body_bytes=budget // 2,
                      connection_timeout_s=60, request_timeout_ms=SLOW)
    conns = []
    for cap in (512 << 10, 256 << 10, 128 << 10, 64 << 10, 32 << 10, 16 << 10):
        c = socket.create_connection(("127.0.0.1", s2.settings["port"]), timeout=10)
        c.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (budget // 2))
        c.sendall(b" " * (cap * 3 // 4))
        conns.append(c)
    wait_for(lambda: s2.metric("attnserve_request_memory_bytes") > budget - 8192,
             what="the budget to fill")
    r = post(s2, "/embed", {"inputs": texts(MAX_INPUTS, 1)}, timeout=60)
    err = assert_error(r, 503)
    assert "max_request_memory_bytes" in err["message"] and r.headers.get("Retry-After")
    for c in conns:
        c.close()
    wait_for(lambda: s2.metric("attnserve_request_memory_bytes") == 0, what="the budget back")
    r = post(s2, "/embed", {"inputs": texts(MAX_INPUTS, 1)}, timeout=600)
    assert r.status_code in (200, 413), r.text[:300]

"""Connections: the drain's linger, and idle connections making room.

Drain: on SIGTERM /ready turns 503 at once while, for drain_linger_ms, the
listener still accepts and every request is served as before, each answer
with Connection: close; a keep-alive request arriving at the moment of the
signal is answered, not reset, and so is a connection opened during the
linger. Only then does the listener close.

max_connections: at the limit the connection idle the longest (no request
under way) is closed to admit a new one, as nginx reuses its keep-alive
connections, so idle sockets never keep /health or an embeddings request out.
"""
import json
import socket
import time

import requests

from conftest import wait_for

LINGER_MS = 6000  # long enough for the checks below even under TSan on a loaded machine


def raw(method, path, body=b""):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1"]
    if method == "POST":
        lines += ["Content-Type: application/json", "Content-Length: %d" % len(body)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_answer(f):
    status = int(f.readline().split()[1])
    headers = {}
    while True:
        line = f.readline()
        assert line, "closed inside the headers"
        if line == b"\r\n":
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return status, headers, f.read(int(headers["content-length"]))


def connect(s, timeout=10):
    return socket.create_connection(("127.0.0.1", s.settings["port"]), timeout=timeout)


def test_linger_serves_keep_alive_and_new_connections(start_server):
    s = start_server(drain_linger_ms=LINGER_MS)
    body = json.dumps({"input": "keep-alive at the drain"}).encode()
    kept = [connect(s) for _ in range(4)]
    files = [c.makefile("rb") for c in kept]
    for c, f in zip(kept, files):
        c.sendall(raw("GET", "/health"))
        assert read_answer(f)[0] == 200
    t0 = time.monotonic()
    s.terminate()
    # The signal and a request cross: sent at once, answered in full. It says
    # Connection: close unless it was answered before the main thread took
    # the signal (on a loaded machine the request can win the race); then its
    # connection stays open, and its next request, sent once the drain has
    # begun, is answered with close (below).
    kept[0].sendall(raw("POST", "/v1/embeddings", body))
    status, headers, answer = read_answer(files[0])
    assert status == 200, answer
    assert len(json.loads(answer)["data"][0]["embedding"]) == 384
    crossed_first = headers.get("connection", "").lower() != "close"
    # /ready says draining while it lingers...
    wait_for(lambda: requests.get(s.url("/ready"), timeout=5).status_code == 503,
             what="/ready to turn 503")
    # ...and both an open keep-alive connection and a new one are served.
    kept[1].sendall(raw("POST", "/v1/embeddings", body))
    status, headers, _ = read_answer(files[1])
    assert status == 200 and headers["connection"].lower() == "close"
    if crossed_first:
        print("the crossing request was answered before the signal was taken")
        kept[0].sendall(raw("POST", "/v1/embeddings", body))
        status, headers, _ = read_answer(files[0])
        assert status == 200 and headers["connection"].lower() == "close"
    r = requests.post(s.url("/v1/embeddings"), json={"input": "new during the linger"},
                      timeout=10)
    assert r.status_code == 200 and r.headers["Connection"].lower() == "close"
    assert time.monotonic() - t0 < LINGER_MS / 1000, "the checks outlasted the linger"
    # Each answer closed its connection, as it said.
    for c in kept[:2]:
        c.settimeout(5)
        assert c.recv(1) == b""
    # After the linger the listener is closed; the process exits 0.
    assert s.wait_exit(timeout=20) == 0
    assert time.monotonic() - t0 >= LINGER_MS / 1000
    for c in kept:
        c.close()
    log = s.log_text()
    assert "listener closed" in log and "drained" in log


def test_idle_connections_make_room_at_max_connections(start_server):
    n = 64
    s = start_server(max_connections=n)
    before = s.metric("attnserve_connections_closed_total", reason="evicted_idle")
    idle = []
    for i in range(n):
        c = connect(s)
        if i % 2:  # half have served a request and idle in keep-alive
            c.sendall(raw("GET", "/health"))
            assert read_answer(c.makefile("rb"))[0] == 200
        idle.append(c)
    time.sleep(0.2)
    # The table is full of idle connections: new clients are still served.
    assert requests.get(s.url("/health"), timeout=10).status_code == 200
    r = requests.post(s.url("/v1/embeddings"), json={"input": "past the idle ones"}, timeout=30)
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 384
    for _ in range(20):
        assert requests.get(s.url("/ready"), timeout=10).status_code == 200
    m = s.metrics()
    # One eviction per connection the table had no room for: each request
    # above closed its connection, freeing the slot for the next.
    evicted = int(m[("attnserve_connections_closed_total", (("reason", "evicted_idle"),))] - before)
    assert evicted >= 1
    assert m.get(("attnserve_connections_closed_total", (("reason", "max_connections"),)), 0) == 0
    # The evicted ones are the longest idle: the first opened, in order.
    for c in idle[:evicted]:
        c.settimeout(5)
        try:
            assert c.recv(1) == b""
        except ConnectionResetError:
            pass
    # The others are still open and served.
    c = idle[-1]
    c.sendall(raw("GET", "/health"))
    assert read_answer(c.makefile("rb"))[0] == 200
    for c in idle:
        c.close()


def test_busy_connections_are_never_evicted(start_server):
    """A connection whose request is under way (headers in, body still
    coming) is not idle: with every slot busy a new connection is refused,
    and the busy ones complete."""
    n = 8
    s = start_server(max_connections=n, connection_timeout_s=30)
    body = json.dumps({"input": "slow body"}).encode()
    busy = []
    for _ in range(n):
        c = connect(s, timeout=30)
        c.sendall(raw("POST", "/v1/embeddings", body)[:-5])  # the last 5 bytes later
        busy.append(c)
    time.sleep(0.3)
    extra = connect(s)
    extra.settimeout(5)
    try:
        extra.sendall(raw("GET", "/health"))
        got = extra.recv(100)
    except (BrokenPipeError, ConnectionResetError):
        got = b""
    assert got == b"", "a connection past max_connections was served with all slots busy"
    extra.close()
    for c in busy:
        c.sendall(body[-5:])
    for c in busy:
        status, _, answer = read_answer(c.makefile("rb"))
        assert status == 200, answer
        c.close()
    # The server frees a slot when it sees the close, which may come after
    # the scrape's connection does: until then that one is refused as extra
    # was, so scrape again until a slot is free.
    def refused_counted():
        try:
            return s.metric("attnserve_connections_closed_total", reason="max_connections") >= 1
        except requests.ConnectionError:
            return False
    wait_for(refused_counted, timeout=10, what="a scrape counting the refused connection")

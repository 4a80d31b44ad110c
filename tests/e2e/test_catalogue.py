"""The bad-input catalogue (issue 6 §4): every kind of bad input or bad client
tried end to end against the real binary, each with its documented status and
the one JSON error shape, while a background client keeps calling /health and
a small /v1/embeddings on the same server and every one of its calls must
succeed: the service keeps serving other clients throughout.

One test per item; the error statuses are those of docs/api.md's Limits."""
import base64
import json
import os
import random
import re
import socket
import struct
import subprocess
import threading
import time

import pytest
import requests

from conftest import (BIN, JSON, Server, as_base64, assert_error,
                      assert_raw_error,
                      attention_case, parse_metrics, post_attention, slow_body, to_base64,
                      wait_for)

SMALL, _ = attention_case(1, 3, 2, 4)
DIM = 384
LIMIT = 16 << 20  # max_body_bytes of the catalogue server: a 10 MB string fits

# The catalogue server: a body limit that lets a 10 MB string in, and a
# small worst case (max_queue x max_body_bytes) all the same.
CATALOGUE = dict(max_body_bytes=LIMIT, max_queue=32, max_connections=64, connection_timeout_s=10)


class Background:
    """Calls /health and a small /v1/embeddings in turn, on one keep-alive
    connection, until stopped; stop() asserts that every call succeeded."""

    def __init__(self, server):
        self.server = server
        self.calls, self.failures, self.tokens = 0, [], 0
        self.stopping = threading.Event()
        # Set: /health only, so that the queue holds only what a test puts
        # there (the lock is held during each call: taking it waits out the
        # call in flight).
        self.health_only = threading.Event()
        self.lock = threading.Lock()
        self.stopped = False
        self.session = requests.Session()
        # The first call opens the connection before any test fills the slots.
        self.call_once()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def call_once(self):
        with self.lock:
            self.call_locked()

    def call_locked(self):
        try:
            r = self.session.get(self.server.url("/health"), timeout=60)
            assert r.status_code == 200, (r.status_code, r.text)
            if self.health_only.is_set():
                self.calls += 1
                return
            r = self.session.post(self.server.url("/v1/embeddings"),
                                  data=json.dumps({"input": "background"}), headers=JSON,
                                  timeout=60)
            assert r.status_code == 200, (r.status_code, r.text)
            body = r.json()
            assert len(body["data"][0]["embedding"]) == DIM
            self.tokens += body["usage"]["total_tokens"]
            self.calls += 1
        except Exception as e:  # noqa: BLE001 - reported by stop()
            self.failures.append(repr(e))

    def run(self):
        while not self.stopping.wait(0.02):
            self.call_once()

    def stop(self):
        if self.stopped:
            return
        self.stopped = True
        self.stopping.set()
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "the background client hangs"
        # One more call after the test: the service serves after it, too.
        self.health_only.clear()
        self.call_once()
        self.session.close()
        assert not self.failures, self.failures[:5]
        assert self.calls >= 2, self.calls


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("catalogue")), **CATALOGUE)
    yield s
    s.check_clean_exit(s.stop())


@pytest.fixture
def server(catalogue):
    """The catalogue server, with the background client running around the test."""
    bg = Background(catalogue)
    yield catalogue
    bg.stop()


@pytest.fixture
def own_server(start_server):
    """start_server(**settings) with a background client on each server."""
    clients = []

    def start(**settings):
        s = start_server(**dict(CATALOGUE, **settings))
        s.background = Background(s)
        clients.append(s.background)
        return s
    yield start
    for bg in clients:
        bg.stop()


def post(server, path, data, headers=JSON, timeout=120):
    if not isinstance(data, (str, bytes)) and not hasattr(data, "__next__"):
        data = json.dumps(data)
    return requests.post(server.url(path), data=data, headers=headers, timeout=timeout)


def raw_connect(server, timeout=10):
    c = socket.create_connection(("127.0.0.1", server.settings["port"]), timeout=timeout)
    return c


def raw_request(method, path, body=b"", headers=()):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1"]
    if body or method == "POST":
        lines += ["Content-Type: application/json", "Content-Length: %d" % len(body)]
    lines += list(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_response(f):
    """One HTTP/1.1 response from a socket file: (status, headers, body)."""
    status_line = f.readline()
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = f.readline()
        assert line, "connection closed inside the headers"
        if line == b"\r\n":
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers["content-length"]))
    return status, headers, body


def closed_by_peer(sock, timeout):
    """Waits until the peer closes; True when it did within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


EMBED_PATHS = [("/v1/embeddings", "input"), ("/embed", "inputs"), ("/tokenize", "inputs")]
ALL_POSTS = ["/v1/attention"] + [p for p, _ in EMBED_PATHS]


# ---- malformed JSON -----------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL_POSTS)
@pytest.mark.parametrize("body", ['{"input": ["a", "b"', '{"q": [[[1, 2]]', "{", '{"a":',
                                  '{"inputs": "abc'])
def test_truncated_json(server, path, body):
    err = assert_error(post(server, path, body), 400, "invalid_request_error")
    assert "invalid JSON" in err["message"]


@pytest.mark.parametrize("path", ALL_POSTS)
def test_json_nested_100000_deep(server, path):
    for body in ("[" * 100000 + "]" * 100000, '{"a":' * 100000 + "1" + "}" * 100000):
        err = assert_error(post(server, path, body), 400, "invalid_request_error")
        assert "nested" in err["message"]


@pytest.mark.parametrize("path,body", [
    ("/v1/attention", '{"q": [[[1e999]]], "k": [[[1]]], "v": [[[1]]]}'),
    ("/v1/embeddings", '{"input": "a", "dimensions": 1e999}'),
    ("/v1/embeddings", '{"input": [101, 1e999, 102]}'),
    ("/embed", '{"inputs": "a", "x": -1e999}'),
    ("/tokenize", '{"inputs": [1e999]}'),
])
def test_number_1e999(server, path, body):
    # jansson refuses a number that overflows a double: the body is not JSON
    # the service can represent.
    assert_error(post(server, path, body), 400, "invalid_request_error")


def test_strings_with_nul(server):
    # An escaped U+0000 in a text is accepted, and dropped by the tokenizer
    # as Hugging Face's does: the same tokens, the same embedding.
    for path, key in EMBED_PATHS:
        r = post(server, path, {key: "hel\u0000lo wor\u0000ld"})
        assert r.status_code == 200, r.text
    tok = lambda text: [t["id"] for t in post(server, "/tokenize", {"inputs": text}).json()[0]]
    assert tok("hel\u0000lo wor\u0000ld") == tok("hello world")
    emb = lambda text: post(server, "/v1/embeddings", {"input": text}).json()["data"][0]["embedding"]
    a, b = emb("hel\u0000lo"), emb("hello")
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-6
    # A raw NUL byte is not JSON; U+0000 in a key is refused by the parser;
    # where a number is wanted a string holding one is a wrong type.
    for path, key in EMBED_PATHS:
        assert_error(post(server, path, b'{"%s": "a\x00b"}' % key.encode()), 400)
        assert_error(post(server, path, b'{"%s\\u0000": "ab"}' % key.encode()), 400)
    assert_error(post_attention(server, dict(SMALL, q="\u0000")), 400, "invalid_request_error")


@pytest.mark.parametrize("path", ALL_POSTS)
@pytest.mark.parametrize("raw", [b"caf\xe9", b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80",
                                 b"ab\xf4\x90\x80\x80"])
def test_invalid_utf8(server, path, raw):
    key = b"q" if path == "/v1/attention" else (b"input" if path == "/v1/embeddings" else b"inputs")
    err = assert_error(post(server, path, b'{"' + key + b'": "' + raw + b'"}'), 400,
                       "invalid_request_error")
    assert "UTF-8" in err["message"] or "invalid JSON" in err["message"]


@pytest.mark.parametrize("path", ALL_POSTS)
@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded",
                                   "application/jsonx", "multipart/form-data; boundary=x", None])
def test_wrong_content_type(server, path, ctype):
    headers = {"Content-Type": ctype} if ctype else {}
    body = SMALL if path == "/v1/attention" else {"inputs": "a"}
    r = post(server, path, body, headers=headers)
    assert_error(r, 415, "unsupported_media_type_error")


@pytest.mark.parametrize("path", ALL_POSTS)
def test_empty_body(server, path):
    err = assert_error(post(server, path, b""), 400, "invalid_request_error")
    assert "empty" in err["message"]


# ---- over the body limit ------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL_POSTS)
def test_body_over_limit_with_content_length(server, path):
    # Refused from the headers: the client gets its 413 before sending the
    # body, so a raw client that sends only the headers still reads it.
    c = raw_connect(server)
    c.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (path.encode(), LIMIT + 1))
    status, headers, body = read_response(c.makefile("rb"))
    err = assert_raw_error(status, headers, body, 413, "request_too_large_error", path)
    assert str(LIMIT) in err["message"]
    assert headers["connection"] == "close"
    c.close()
    # A client that sends all it announced before it reads is not cut off:
    # the server reads the body on and throws it away, then closes with a
    # FIN. Closed with the body unread, the connection would be reset under
    # the client while it sends (sendall fails), and a client that reports
    # that (urllib3 does for ECONNRESET) never reads its 413.
    big = b'{"input": "' + b"a" * LIMIT + b'"}'
    c = raw_connect(server, timeout=60)
    c.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(big), big))
    f = c.makefile("rb")
    status, headers, body = read_response(f)
    assert_raw_error(status, headers, body, 413, "request_too_large_error", path)
    assert f.read(1) == b"", "the connection ends after the answer"
    c.close()
    # And through an ordinary client that sends it all.
    assert_error(post(server, path, big), 413)


@pytest.mark.parametrize("path", ALL_POSTS)
def test_body_over_limit_chunked(server, path):
    # Without Content-Length the limit is found while reading: the 413 comes
    # at once, not after the whole body (this one never ends).
    c = raw_connect(server)
    c.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n" % path.encode())
    piece = b"a" * 65536
    sent = 0
    while sent <= LIMIT + len(piece):
        c.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        sent += len(piece)
    # The answer is there before the body ended...
    status, headers, body = read_response(c.makefile("rb"))
    assert_raw_error(status, headers, body, 413, "request_too_large_error", path)
    assert headers["connection"] == "close"
    # ...and the server stops reading soon after: an endless body ends in a
    # closed connection, not in the server reading all of it.
    try:
        for _ in range(100000):  # 6.5 GB: far more than the server may read
            c.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        raise AssertionError("the server read an endless body")
    except (BrokenPipeError, ConnectionResetError):
        pass
    c.close()
    # An ordinary client sending a chunked body a little over the limit
    # reads the same answer.
    big = b'{"input": "' + b"a" * (LIMIT + 1000) + b'"}'
    r = post(server, path, iter([big[i:i + (1 << 20)] for i in range(0, len(big), 1 << 20)]))
    assert "Content-Length" not in r.request.headers
    assert_error(r, 413, "request_too_large_error")


def test_body_announced_over_limit_is_read_on_for_a_while(own_server):
    """After the early 413 of a body announced over the limit the server
    reads on, up to 16 times max_body_bytes, so that a client that sends its
    body before it reads gets the answer, not a reset; it does not read an
    endless body, and a client that waits for 100 Continue is answered
    without it and sends nothing. Every one counts as one 413, and a page's
    request gets its CORS headers as with any other answer."""
    limit = 1 << 20
    s = own_server(max_body_bytes=limit, cors_allow_origins="https://app.example")
    head = b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    count = lambda: s.metric("attnserve_http_requests_total", route="/embed", status="413")
    before = count()
    # Announced and sent whole, far over the limit but within what is read
    # on, and more than the kernel holds for a server that reads nothing
    # (the client's send buffer grows to 4 MB at most): closed at once, this
    # connection would break under the sendall.
    body = b"a" * (12 * limit)
    c = raw_connect(s, timeout=60)
    c.sendall(head + b"Origin: https://app.example\r\nContent-Length: %d\r\n\r\n" % len(body)
              + body)
    f = c.makefile("rb")
    status, headers, answer = read_response(f)
    assert_raw_error(status, headers, answer, 413, "request_too_large_error", "/embed")
    assert headers["access-control-allow-origin"] == "https://app.example", headers
    assert "x-request-id" in headers["access-control-expose-headers"]
    assert f.read(1) == b"", "the connection ends after the answer"
    c.close()
    # Announced beyond what is read on: the answer comes first, and the
    # connection ends well before the body would (the kernel's buffers on
    # both sides hold a few MB of what is sent after the last read).
    c = raw_connect(s)
    c.sendall(head + b"Content-Length: %d\r\n\r\n" % (1 << 40))
    status, headers, answer = read_response(c.makefile("rb"))
    assert_raw_error(status, headers, answer, 413, "request_too_large_error", "/embed")
    piece, sent = b"a" * 65536, 0
    try:
        while sent < 1 << 30:
            c.sendall(piece)
            sent += len(piece)
        raise AssertionError("the server read on for ever")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the 413 was read before: a reset now costs the client nothing
    assert sent < 16 * limit + (64 << 20), sent
    c.close()
    # A client that waits for 100 Continue gets the 413 instead, and the
    # connection ends without a byte of the body sent.
    c = raw_connect(s)
    c.sendall(head + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (2 * limit))
    f = c.makefile("rb")
    status, headers, answer = read_response(f)
    assert_raw_error(status, headers, answer, 413, "request_too_large_error", "/embed")
    assert f.read(1) == b""
    c.close()
    wait_for(lambda: count() == before + 3, what="each early 413 to be counted once")


def test_body_over_limit_chunked_then_dribbling(own_server):
    """After the early 413 of a chunked body the server reads on (so the client
    can read its answer) but not for ever: a client that keeps sending a byte
    at a time, never idle long enough for MHD's idle timeout, still loses the
    connection within connection_timeout_s of its headers, and it counts."""
    limit, timeout = 64 << 10, 3
    s = own_server(connection_timeout_s=timeout, max_body_bytes=limit)
    before = s.metric("attnserve_connections_closed_total", reason="connection_timeout")
    c = raw_connect(s)
    t0 = time.monotonic()
    c.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"a" * (limit + 1)
    c.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    status, headers, body = read_response(c.makefile("rb"))
    assert_raw_error(status, headers, body, 413, "request_too_large_error", "/embed")
    # A byte every 0.2 s: far under what the server reads and throws away
    # after an early answer (max_body_bytes), and never idle.
    closed_at = None
    while time.monotonic() - t0 < 5 * timeout:
        try:
            c.send(b"1\r\na\r\n")
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic() - t0
            break
        time.sleep(0.2)
    c.close()
    assert closed_at is not None, "a client dribbling after its 413 kept its connection"
    assert closed_at <= timeout + 3, closed_at
    wait_for(lambda: s.metric("attnserve_connections_closed_total",
                              reason="connection_timeout") == before + 1,
             what="the closed connection to be counted")


def preload(name):
    """LD_PRELOAD for a server with one of the test shims (tests/e2e/NAME.c,
    built beside the binary by `make e2e`); a sanitizer runtime the binary
    links must come first in the list."""
    shim = os.path.join(os.path.dirname(BIN), name + ".so")
    assert os.path.exists(shim), "%s missing: build it with make e2e" % shim
    first = []
    for line in subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if parts and parts[0].startswith(("libasan", "libtsan")) and "=>" in parts:
            first.append(parts[parts.index("=>") + 1])
    return ":".join(first + [shim])


def test_early_413_written_in_part_is_never_followed_by_another(start_server):
    """When the early 413 of a chunked body could be written only in part,
    the connection is shut down and counted; no second, whole answer follows
    the partial one on the same byte stream once the body ends."""
    limit = 64 << 10
    s = start_server(env={"LD_PRELOAD": preload("short_send")}, max_body_bytes=limit)
    c = raw_connect(s)
    c.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"a" * (limit + 1)
    received = b""
    try:
        c.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(piece), piece))  # over, then ended
        c.settimeout(5)
        while True:
            data = c.recv(65536)
            if not data:
                break
            received += data
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass  # a timeout: the connection was left open, which the assert shows
    c.close()
    assert received == b"HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n", received
    assert s.metric("attnserve_connections_closed_total", reason="answer_cut") == 1
    assert s.metric("attnserve_http_requests_total", route="/embed", status="413") == 0
    r = requests.post(s.url("/embed"), json={"inputs": "still serving"}, timeout=30)
    assert r.status_code == 200


# ---- inputs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path,key", EMBED_PATHS)
def test_100000_inputs_in_one_request(server, path, key):
    for inputs in (["a"] * 100000, [[101, 102]] * 100000 if path == "/v1/embeddings" else None):
        if inputs is None:
            continue
        err = assert_error(post(server, path, {key: inputs}), 422, "invalid_value_error")
        assert "max_inputs_per_request" in err["message"]


@pytest.mark.parametrize("path,key", EMBED_PATHS)
def test_empty_input(server, path, key):
    for value in ("", [], ["ok", ""], [""]):
        # An empty batch, and an empty string, is TEI's Empty (its tokenizer
        # refuses an empty input as Empty).
        err = assert_error(post(server, path, {key: value}), 400, "invalid_request_error",
                           tei="Empty")
        assert "empty" in err["message"]
    if path != "/tokenize":
        # An empty array of token ids is an empty input too.
        assert_error(post(server, path, {key: [[]]}), 400, "invalid_request_error", tei="Empty")
        assert_error(post(server, path, {key: [[101, 102], []]}), 400, "invalid_request_error",
                     tei="Empty")


def test_one_10mb_string(server, own_server):
    text = ("lorem ipsum dolor sit amet " * 400000)[:10 << 20]
    # Truncation on (the default): the first 256 tokens (the model's
    # max_seq_length) are embedded.
    r = post(server, "/v1/embeddings", {"input": text})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["total_tokens"] == 256
    assert len(r.json()["data"][0]["embedding"]) == DIM
    r = post(server, "/embed", {"inputs": text, "truncate": False})
    err = assert_error(r, 422, "invalid_value_error")
    assert "256" in err["message"]
    # Under the default 4 MiB limit the same body is too large.
    small = own_server(max_body_bytes=4 << 20)
    assert_error(post(small, "/v1/embeddings", {"input": text}), 413, "request_too_large_error")


# ---- /v1/attention shapes and values ----------------------------------------------------------

B64 = as_base64(SMALL)
OTHER, _ = attention_case(2, 4, 2, 4)


@pytest.mark.parametrize("what,body", [
    ("zero seq", dict(SMALL, q=[], k=[], v=[])),
    ("zero heads", dict(SMALL, q=[[]] * 3, k=[[]] * 3, v=[[]] * 3)),
    ("zero head_dim", dict(SMALL, q=[[[]] * 2] * 3, k=[[[]] * 2] * 3, v=[[[]] * 2] * 3)),
    ("zero in base64", dict(B64, q=dict(B64["q"], shape=[0, 2, 4]))),
    ("negative", dict(B64, q=dict(B64["q"], shape=[-3, 2, 4]))),
    ("negative head_dim", dict(B64, q=dict(B64["q"], shape=[3, 2, -4]))),
    ("huge", dict(B64, q=dict(B64["q"], shape=[1 << 40, 2, 4]))),
    ("huge product", dict(B64, q=dict(B64["q"], shape=[1 << 21, 1 << 21, 1 << 21]))),
    ("beyond int64", dict(B64, q=dict(B64["q"], shape=[3, 2, 1 << 70]))),
    ("too many heads", dict(B64, q=dict(B64["q"], shape=[3, 4096, 4]))),
    ("head_dim too large", dict(B64, q=dict(B64["q"], shape=[3, 2, 1024]))),
    ("k shape differs", dict(SMALL, k=OTHER["k"])),
    ("v shape differs", dict(SMALL, v=OTHER["v"])),
    ("ragged", dict(SMALL, q=[[[1.0] * 4, [1.0] * 3]] * 3)),
    ("data shorter than shape", dict(B64, q=dict(B64["q"], shape=[3, 2, 5]))),
    ("data longer than shape", dict(B64, q=dict(B64["q"], shape=[2, 2, 4]))),
    ("mixed encodings, shapes differ", dict(B64, k=OTHER["k"])),
])
def test_attention_bad_dimensions_and_shapes(server, what, body):
    r = post_attention(server, body)
    if what == "beyond int64":
        # Not an integer jansson can hold: the JSON itself is refused.
        assert_error(r, 400, "invalid_request_error")
    else:
        assert_error(r, 422, "invalid_value_error")


def b64_with(bits):
    raw = bytearray(base64.b64decode(B64["q"]["data"]))
    raw[4:8] = bits
    return dict(B64, q=dict(B64["q"], data=base64.b64encode(bytes(raw)).decode()))


@pytest.mark.parametrize("what,body,status", [
    ("NaN literal", '{"q": [[[NaN]]], "k": [[[1]]], "v": [[[1]]]}', 400),
    ("Infinity literal", '{"q": [[[Infinity]]], "k": [[[1]]], "v": [[[1]]]}', 400),
    ("-Infinity literal", '{"q": [[[-Infinity]]], "k": [[[1]]], "v": [[[1]]]}', 400),
    ("NaN as a string", dict(SMALL, q=[[["NaN"] * 4] * 2] * 3), 400),
    ("beyond float32", dict(SMALL, q=[[[1e39] * 4] * 2] * 3), 422),
    ("NaN in base64", b64_with(struct.pack("<f", float("nan"))), 422),
    ("Infinity in base64", b64_with(struct.pack("<f", float("inf"))), 422),
    ("-Infinity in base64", b64_with(struct.pack("<f", float("-inf"))), 422),
])
def test_nan_and_infinity(server, what, body, status):
    err = assert_error(post_attention(server, body), status)
    if status == 422:
        assert "non-finite" in err["message"] or "float32" in err["message"], err
    for path, key in EMBED_PATHS[:1]:
        assert_error(post(server, path, '{"%s": "a", "dimensions": NaN}' % key), 400)


# ---- bad clients ------------------------------------------------------------------------------

def test_slowloris_headers_one_byte_per_second(own_server):
    s = own_server(connection_timeout_s=2)
    before = s.metric("attnserve_connections_closed_total", reason="connection_timeout")
    request = raw_request("GET", "/health", headers=["X-Padding: " + "a" * 50])
    c = raw_connect(s)
    t0 = time.monotonic()
    closed_at = None
    for byte in request:
        try:
            c.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic() - t0
            break
        if closed_by_peer(c, 1.0):  # one byte per second
            closed_at = time.monotonic() - t0
            break
    c.close()
    # MHD's idle timeout alone would never close it: every byte is activity.
    assert closed_at is not None, "a client sending a byte a second kept its connection"
    assert 1.5 <= closed_at <= 6, closed_at
    assert s.metric("attnserve_connections_closed_total",
                    reason="connection_timeout") == before + 1
    # The same for a body sent a byte a second after prompt headers.
    body = json.dumps({"inputs": "slow"}).encode()
    c = raw_connect(s)
    c.sendall(raw_request("POST", "/embed", body)[:-len(body)])
    t0 = time.monotonic()
    for byte in body:
        try:
            c.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            break
        if closed_by_peer(c, 1.0):
            break
    closed_at = time.monotonic() - t0
    c.close()
    assert closed_at <= 6, closed_at
    # A keep-alive client that waits between requests (less than the
    # timeout each time) keeps its connection for longer than the timeout.
    c = raw_connect(s)
    f = c.makefile("rb")
    for _ in range(3):
        c.sendall(raw_request("GET", "/health"))
        assert read_response(f)[0] == 200
        time.sleep(1)
    c.close()


def test_keep_alive_idle_then_slow_body(own_server):
    """The deadline of a request starts when its headers are in: a pooled
    connection that idled most of connection_timeout_s, then uploads a body
    that takes seconds, is answered rather than cut mid-upload."""
    timeout = 6
    s = own_server(connection_timeout_s=timeout)
    c = raw_connect(s, timeout=30)
    f = c.makefile("rb")
    c.sendall(raw_request("GET", "/health"))
    assert read_response(f)[0] == 200
    time.sleep(timeout - 1.5)  # idle, as in a client's pool
    body = json.dumps({"inputs": "a slow upload " * 50}).encode()
    c.sendall(raw_request("POST", "/embed", body)[:-len(body)])
    t0 = time.monotonic()
    pieces = 8
    step = (len(body) + pieces - 1) // pieces
    for i in range(0, len(body), step):  # about 4 s in all
        c.sendall(body[i:i + step])
        time.sleep(0.5)
    # Headers plus body took longer than connection_timeout_s since the
    # previous answer: the premise of the test.
    assert time.monotonic() - t0 + timeout - 1.5 > timeout
    status, _, answer = read_response(f)
    assert status == 200, answer
    assert len(json.loads(answer)[0]) == DIM
    c.close()


def test_more_idle_connections_than_max_connections(own_server):
    """Idle connections past max_connections make room: each new one closes
    the longest-idle (test_connections.py covers busy ones, never evicted)."""
    # The background client holds one connection; idle ones take the rest.
    s = own_server(max_connections=8)
    idle = [raw_connect(s) for _ in range(7)]
    time.sleep(0.2)
    extra = [raw_connect(s) for _ in range(5)]
    for c in extra:
        c.sendall(raw_request("GET", "/health"))
        status, _, body = read_response(c.makefile("rb"))
        assert status == 200 and json.loads(body) == {"status": "ok"}
    # The five oldest idle ones were closed to admit them, the other two kept.
    for c in idle[:5]:
        assert closed_by_peer(c, 5), "an idle connection was kept past max_connections"
    f = idle[5].makefile("rb")

    def evicted():
        idle[5].sendall(raw_request("GET", "/metrics"))
        status, _, body = read_response(f)
        assert status == 200
        m = parse_metrics(body.decode())
        assert m[("attnserve_connections_closed_total", (("reason", "max_connections"),))] == 0
        return m[("attnserve_connections_closed_total", (("reason", "evicted_idle"),))]
    wait_for(lambda: evicted() == 5, what="the evictions to be counted")
    for c in idle + extra:
        c.close()
    assert requests.get(s.url("/ready"), timeout=5).status_code == 200


def test_pipelined_requests(server):
    text = "pipelined requests"
    want = post(server, "/v1/embeddings", {"input": text}).json()["data"][0]["embedding"]
    want_tokens = post(server, "/tokenize", {"inputs": text}).json()
    reqs = [
        raw_request("GET", "/health"),
        raw_request("POST", "/v1/embeddings", json.dumps({"input": text}).encode()),
        raw_request("POST", "/tokenize", json.dumps({"inputs": text}).encode()),
        raw_request("POST", "/v1/embeddings", b'{"input": '),
        raw_request("GET", "/nope"),
        raw_request("POST", "/v1/attention", json.dumps(SMALL).encode()),
        raw_request("GET", "/ready", headers=["x-request-id: last-one"]),
    ]
    c = raw_connect(server, timeout=60)
    c.sendall(b"".join(reqs))  # all at once, before reading anything
    f = c.makefile("rb")
    got = [read_response(f) for _ in reqs]
    c.close()
    assert [g[0] for g in got] == [200, 200, 200, 400, 404, 200, 200]
    assert json.loads(got[0][2]) == {"status": "ok"}
    emb = json.loads(got[1][2])["data"][0]["embedding"]
    assert max(abs(a - b) for a, b in zip(emb, want)) <= 1e-6
    assert json.loads(got[2][2]) == want_tokens
    assert_raw_error(*got[3], 400, "invalid_request_error")
    assert_raw_error(*got[4], 404, "not_found_error")
    assert len(json.loads(got[5][2])["output"]) == 3
    assert got[6][1]["x-request-id"] == "last-one"
    ids = [g[1]["x-request-id"] for g in got]
    assert len(set(ids)) == len(ids)


def test_client_disconnects_while_queued(own_server):
    # One request per batch, so requests queue behind a slow one.
    s = own_server(max_batch_requests=1, max_wait_us=0)
    bg = s.background
    metric = s.metric
    # The background client calls /health only while the queue must hold
    # just this test's requests; with no call of its own in flight, the
    # counters are read together with its token count.
    bg.health_only.set()
    with bg.lock:
        dropped0 = metric("attnserve_requests_dropped_total", reason="client_closed")
        tokens0 = metric("attnserve_embedding_tokens_total") - bg.tokens
    slow = slow_body()
    results = []
    slow_threads = [threading.Thread(target=lambda: results.append(post_attention(s, slow)))
                    for _ in range(2)]
    for t in slow_threads:
        t.start()
    # The first slow batch runs, the second waits: the queue is held for
    # two slow batches' time.
    wait_for(lambda: metric("attnserve_batch_requests_in_flight") == 1
             and metric("attnserve_queue_depth") == 1, what="the slow batches")
    text = " ".join(["queued"] * 200)
    n = 4
    clients = []
    for i in range(n):
        c = raw_connect(s)
        c.sendall(raw_request("POST", "/v1/embeddings", json.dumps({"input": text}).encode(),
                              headers=["x-request-id: closer-%d" % i]))
        clients.append(c)
    # Queued behind a slow batch: the first one's, or the second's if the
    # first ended while they were sent (the second then runs, and its
    # answer is in results).
    def queued():
        m = s.metrics()
        return (m.get(("attnserve_queue_depth", ()), 0)
                + m.get(("attnserve_batch_requests_in_flight", ()), 0) + len(results)) == n + 2
    wait_for(queued, what="the clients to be queued")
    assert metric("attnserve_batch_requests_in_flight") == 1, "the premise: still queued"
    for c in clients:
        c.close()
    wait_for(lambda: metric("attnserve_requests_cancelled_total") == n, timeout=30,
             what="the closed clients' requests to be cancelled")
    wait_for(lambda: metric("attnserve_requests_dropped_total", reason="client_closed")
             == dropped0 + n, what="the dropped counter")
    bg.health_only.clear()
    for t in slow_threads:
        t.join(timeout=120)
    assert [r.status_code for r in results] == [200, 200]
    # The next client is served.
    r = post(s, "/v1/embeddings", {"input": text})
    assert r.status_code == 200, r.text
    served = r.json()["usage"]["total_tokens"]
    assert served > 200
    # Not computed: the embedding tokens are the background's and the last
    # client's only, none of the cancelled 4 x 200+.
    bg.stop()
    assert metric("attnserve_embedding_tokens_total") == tokens0 + bg.tokens + served
    log = s.log_text()
    for i in range(n):
        assert "client closed while its request was parked request_id=closer-%d" % i in log
    s.terminate()
    assert s.wait_exit(timeout=30) == 0


# ---- accounting of answers to clients that reset --------------------------------------------

def test_answer_received_in_full_counts_under_its_status(own_server):
    """A client that reads its whole answer and resets the connection at once
    (SO_LINGER 0, as proxies do) got its answer: it counts under its status,
    not as dropped (status 0). One that never received it all is still dropped.
    /embed, which the background client does not call, keeps the counts exact.

    libmicrohttpd marks an answer complete on its next turn after the last
    write and reports a reset that comes first as an error; the server then
    counts the answer by the bytes the client acknowledged, and must know to
    the byte where it ends, which depends on the Connection header MHD adds,
    which depends on the client's. Which comes first is left to chance
    otherwise (about 2 answers in 5 when the reset follows the read at once,
    none in 800 seen when the client lingers, as it must here to be sure it
    acknowledged), so a shim (tests/e2e/stall_until_reset.c) holds the I/O
    thread after these answers until the reset is in: every one of them takes
    that path, as the log's closed= shows, for each kind of client."""
    s = own_server(env={"LD_PRELOAD": preload("stall_until_reset")})
    body = json.dumps({"inputs": ["status accounting"]}).encode()
    count = lambda status: s.metric("attnserve_http_requests_total", route="/embed", status=status)
    clients = {
        "no Connection header (HTTP/1.1)": ("HTTP/1.1", []),
        "keep-alive, as requests sends it": ("HTTP/1.1", ["Connection: keep-alive"]),
        "close": ("HTTP/1.1", ["Connection: close"]),
        "HTTP/1.0 with Keep-Alive": ("HTTP/1.0", ["Connection: Keep-Alive"]),
        "HTTP/1.0 without": ("HTTP/1.0", []),
    }
    per_client = 4
    for kind, (version, headers) in clients.items():
        ok0, dropped0 = count("200"), count("undelivered")
        for i in range(per_client):
            c = raw_connect(s)
            request = raw_request("POST", "/embed", body,
                                  headers=headers + ["x-request-id: stall-until-reset-%d" % i])
            c.sendall(request.replace(b" HTTP/1.1\r\n", b" %s\r\n" % version.encode(), 1))
            status, _, answer = read_response(c.makefile("rb"))
            assert status == 200 and len(json.loads(answer)) == 1
            # Received is not yet acknowledged: a kernel may hold the ACK of
            # the last segment back (delayed ACK; Linux sends it when the read
            # empties the buffer of a connection that is not in its pingpong
            # mode, as here), and a reset sent before it leaves the server no
            # way to tell this client from one that never got the bytes.
            # TCP_QUICKACK and a linger past the delayed-ACK timer
            # (TCP_DELACK_MAX, 200 ms) make sure on any kernel.
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            time.sleep(0.25)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
        wait_for(lambda: count("200") + count("undelivered") == ok0 + dropped0 + per_client,
                 what="the requests to end")
        assert (count("200") - ok0, count("undelivered") - dropped0) == (per_client, 0), kind
    reset_first = re.findall(r"request_id=stall-until-reset-\d+ method=POST route=/embed "
                             r"status=200 .* closed=\S+ answered=200", s.log_text())
    assert len(reset_first) == per_client * len(clients), "the premise: reset before completion"
    # A client with a tiny receive window that reads nothing of a ~6 MB
    # answer (more than the kernel buffers on both sides hold), then resets:
    # not delivered, whatever the server had written.
    rng = random.Random(5)
    seq, heads, dim = 512, 128, 8
    q = [[[round(rng.uniform(-1, 1), 3) for _ in range(dim)] for _ in range(heads)]
         for _ in range(seq)]
    kv = to_base64(q)
    big = json.dumps({"q": q, "k": kv, "v": kv}).encode()
    attn = lambda status: s.metric("attnserve_http_requests_total", route="/v1/attention",
                                   status=status)
    # The background client keeps to /health meanwhile, so the one batch
    # that runs is this request's.
    s.background.health_only.set()
    with s.background.lock:
        batches0 = s.metric("attnserve_batches_total")
    attn_ok0, attn_dropped0 = attn("200"), attn("undelivered")
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", s.settings["port"]))
    c.sendall(raw_request("POST", "/v1/attention", big))
    wait_for(lambda: s.metric("attnserve_batches_total") == batches0 + 1 and
             s.metric("attnserve_batch_requests_in_flight") == 0, timeout=60,
             what="the answer to be computed")
    time.sleep(0.5)  # written as far as the window lets it
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    wait_for(lambda: attn("undelivered") == attn_dropped0 + 1, what="the unread answer to count as dropped")
    assert attn("200") == attn_ok0
    s.background.health_only.clear()


def test_clients_racing_their_answers(own_server):
    """Clients that close at random moments while their requests are queued,
    computed or answered: every request is accounted once, under 200 or as
    dropped; those that waited got their answer; the cancel, the done
    callback and the resume race each other without a sanitizer report (the
    server's clean exit is checked); and the service serves throughout."""
    s = own_server(max_batch_requests=4, max_wait_us=0)
    route = "/embed"  # the background client does not call it
    count = lambda status: s.metric("attnserve_http_requests_total", route=route, status=status)
    ok0, dropped0 = count("200"), count("undelivered")
    body = json.dumps({"inputs": " ".join(["racing"] * 50)}).encode()
    slow = threading.Thread(target=lambda: post_attention(s, slow_body(seq=512), timeout=600))
    slow.start()
    answered, problems = [], []

    def client(seed):
        rng = random.Random(seed)
        for _ in range(15):
            c = raw_connect(s, timeout=600)
            c.sendall(raw_request("POST", route, body))
            time.sleep(rng.uniform(0, 0.3))
            if rng.random() < 0.5:
                c.close()  # gone while queued, computed or being answered
                continue
            try:
                status, _, answer = read_response(c.makefile("rb"))
                assert status == 200 and len(json.loads(answer)[0]) == DIM, status
                answered.append(1)
            except Exception as e:  # noqa: BLE001 - reported below
                problems.append(repr(e))
            c.close()
    clients = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(timeout=600)
    slow.join(timeout=600)
    assert not problems, problems[:3]
    total = 8 * 15
    wait_for(lambda: count("200") + count("undelivered") == ok0 + dropped0 + total, timeout=60,
             what="every request to be accounted")
    assert count("200") - ok0 >= len(answered)
    assert s.metric("attnserve_requests_cancelled_total") <= count("undelivered") - dropped0

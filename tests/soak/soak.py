#!/usr/bin/env python3
"""soak.py — a bounded soak of the real attnserve binary on loopback.

Starts the server with the default model, drives a steady load for SECONDS
that mixes valid requests (/v1/embeddings float and base64, /embed,
/v1/attention nested and base64, /tokenize, /health, /metrics) with invalid
ones (malformed JSON, wrong types, invalid UTF-8, 404, 405, 413 with and
without Content-Length, 415, 422, clients that go away mid-body and while
their request is queued), checks every response's status (and, for errors,
the JSON error shape), and samples the server's VmRSS and open fds every
second.

Pass criteria (all must hold; the exit status is 0 only then):
  1. Every response has its expected status; no client error or timeout.
  2. Memory is flat: warm-up is the first 20% of the run (at least 30 s).
     At its end the load pauses, every client connection is closed, and
     after connection_timeout_s + 2 s the idle RSS and fd count are taken as
     the baseline. From then on, no
     sample's RSS exceeds the baseline RSS by more than 5%.
  3. No fd leaks: after the load, with every client connection closed again,
     the idle fd count equals the baseline idle fd count.
  4. Nothing accepted is lost: the server's per-route, per-status counters
     (/metrics) match what the clients saw, except that a request whose
     client went away may count as dropped (status "undelivered"), as 200 (the answer
     was written just before the reset arrived) or not at all (the reset
     came before the server read it); no more requests are dropped than
     clients went away, and some are.
  5. SIGTERM: the server exits 0 within drain_timeout_s + 10 s, and its log
     holds no sanitizer report.

Writes OUT/soak.csv (t_s, phase, rss_kib, fds, requests, rss_anon_kib,
rss_file_kib), OUT/server.log,
OUT/summary.txt and a PNG of RSS and fds over time (--png).

    soak.py --bin build/attnserve --seconds 180 --out build/soak [--png PATH]
"""
import argparse
import base64
import json
import urllib.parse
import math
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from pngplot import Panel, Series, write_chart  # noqa: E402

RSS_TOLERANCE = 0.05
WARMUP_FRACTION, WARMUP_MIN_S = 0.20, 30
MAX_SECONDS = 600
TIMEOUT = 30  # seconds a client waits for an answer (memcheck.py raises it)
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")

# The server under soak: small bodies so that 413 is cheap to provoke, two
# compute threads (the machine is shared), the default model and backend.
SETTINGS = {
    "host": "127.0.0.1",
    "threads": 2,
    "max_connections": 64,
    "connection_timeout_s": 5,
    "max_body_bytes": 256 * 1024,
    "request_timeout_ms": 30000,
    "drain_timeout_s": 20,
    "max_batch_tokens": 4096,
    "max_batch_requests": 64,
    "max_wait_us": 2000,
    "max_queue": 256,
    "log_level": "info",
    "log_format": "text",
}

JSON = {"Content-Type": "application/json"}
EMBED_DIM = 384
TEXTS = ["Hello, world!", "The quick brown fox jumps over the lazy dog.", "Bonjour, ça va ?",
         "attention is all you need", "Ünïcödé façade — naïve café", "一二三 四五六",
         "A somewhat longer sentence that takes a few more tokens to encode, to vary lengths."]


# ---- reference attention, for the valid /v1/attention requests -------------------

def attention_ref(q, k, v):
    seq, heads, dim = len(q), len(q[0]), len(q[0][0])
    out = [[[0.0] * dim for _ in range(heads)] for _ in range(seq)]
    for h in range(heads):
        for i in range(seq):
            s = [sum(a * b for a, b in zip(q[i][h], k[j][h])) / math.sqrt(dim) for j in range(seq)]
            m = max(s)
            w = [math.exp(x - m) for x in s]
            z = sum(w)
            for j in range(seq):
                for d in range(dim):
                    out[i][h][d] += w[j] / z * v[j][h][d]
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def tensor(rng, seq, heads, dim):
    return [[[f32(rng.uniform(-1, 1)) for _ in range(dim)] for _ in range(heads)]
            for _ in range(seq)]


def flat(t):
    return [x for row in t for vec in row for x in vec]


def b64(t):
    f = flat(t)
    return {"shape": [len(t), len(t[0]), len(t[0][0])],
            "data": base64.b64encode(struct.pack("<%df" % len(f), *f)).decode()}


_rng = random.Random(6)
ATT_Q, ATT_K, ATT_V = (tensor(_rng, 12, 2, 16) for _ in range(3))
ATT_REF = flat(attention_ref(ATT_Q, ATT_K, ATT_V))
ATT_NESTED = json.dumps({"q": ATT_Q, "k": ATT_K, "v": ATT_V})
ATT_B64 = json.dumps({"q": b64(ATT_Q), "k": b64(ATT_K), "v": b64(ATT_V)})
# About 16 x 100 tokens: long enough to still be queued or running when its
# client resets the connection a few milliseconds after sending it.
QUEUED_BODY = json.dumps({"input": [" ".join(["token%d" % i for i in range(40)])] * 16}).encode()


# ---- checks of one response ------------------------------------------------------------

class Unexpected(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Unexpected(what)


# Routes that imitate Text Embeddings Inference answer errors in its shape.
TEI_PATHS = {"/", "/embed", "/embed_all", "/similarity", "/decode", "/invocations", "/tokenize"}


def check_error(r, status):
    expect(r.status_code == status, "want %d, got %d: %s" % (status, r.status_code, r.text[:200]))
    expect(r.headers.get("Content-Type") == "application/json", "error content type")
    body = r.json()
    if urllib.parse.urlparse(r.request.url).path in TEI_PATHS:
        expect(set(body) == {"error", "error_type"} and body["error"], "TEI error shape: %r" % body)
        return
    err = body["error"]
    expect(set(err) == {"message", "type", "param", "code"} and err["code"] == status and err["message"],
           "error shape: %r" % err)


def check_ok(r):
    expect(r.status_code == 200, "want 200, got %d: %s" % (r.status_code, r.text[:200]))


def close_to_ref(out):
    expect(len(out) == len(ATT_REF), "attention output length")
    worst = max(abs(a - b) for a, b in zip(out, ATT_REF))
    expect(worst < 1e-4, "attention output off by %g" % worst)


# ---- the request mix ----------------------------------------------------------------------
# Each entry: (name, weight, route label in /metrics, expected status, function(ctx)).

def op_openai(c):
    texts = c.rng.sample(TEXTS, c.rng.randint(1, 4))
    r = c.post("/v1/embeddings", json.dumps({"input": texts, "model": "all-MiniLM-L6-v2"}))
    check_ok(r)
    data = r.json()["data"]
    expect(len(data) == len(texts) and all(len(d["embedding"]) == EMBED_DIM for d in data),
           "embeddings shape")
    return r


def op_openai_b64(c):
    r = c.post("/v1/embeddings", json.dumps({"input": c.rng.choice(TEXTS),
                                              "encoding_format": "base64"}))
    check_ok(r)
    expect(len(base64.b64decode(r.json()["data"][0]["embedding"])) == 4 * EMBED_DIM,
           "base64 embedding length")
    return r


def op_tei(c):
    texts = c.rng.sample(TEXTS, c.rng.randint(1, 3))
    r = c.post("/embed", json.dumps({"inputs": texts}))
    check_ok(r)
    expect([len(v) for v in r.json()] == [EMBED_DIM] * len(texts), "embed shape")
    return r


def op_attention_nested(c):
    r = c.post("/v1/attention", ATT_NESTED)
    check_ok(r)
    close_to_ref(flat(r.json()["output"]))
    return r


def op_attention_b64(c):
    r = c.post("/v1/attention", ATT_B64)
    check_ok(r)
    raw = base64.b64decode(r.json()["output"]["data"])
    close_to_ref(struct.unpack("<%df" % (len(raw) // 4), raw))
    return r


def op_tokenize(c):
    r = c.post("/tokenize", json.dumps({"inputs": "Hello, world!", "add_special_tokens": True}))
    check_ok(r)
    ids = [t["id"] for t in r.json()[0]]
    expect(ids[0] == 101 and ids[-1] == 102, "tokenize ids %r" % ids)
    return r


def op_health(c):
    r = c.s.get(c.url("/health"), timeout=TIMEOUT)
    check_ok(r)
    return r


def op_metrics(c):
    r = c.s.get(c.url("/metrics"), timeout=TIMEOUT)
    check_ok(r)
    expect("attnserve_http_requests_total" in r.text, "metrics text")
    return r


def err_op(path, body, status, headers=JSON, method="POST"):
    def op(c):
        if method == "POST":
            r = c.s.post(c.url(path), data=body, headers=headers, timeout=TIMEOUT)
        else:
            r = c.s.request(method, c.url(path), timeout=TIMEOUT)
        check_error(r, status)
        if status == 405:
            expect(r.headers.get("Allow"), "405 without Allow")
        return r
    return op


BIG = b'{"input": "' + b"a" * (300 * 1024) + b'"}'


def op_413_chunked(c):
    r = c.s.post(c.url("/v1/embeddings"), headers=JSON, timeout=TIMEOUT,
                 data=(BIG[i:i + 16384] for i in range(0, len(BIG), 16384)))
    expect("Content-Length" not in r.request.headers, "chunked request had a Content-Length")
    check_error(r, 413)
    return r


def raw_connect(c):
    s = socket.create_connection(("127.0.0.1", c.port), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def op_gone_mid_body(c):
    """Headers and half the body, then the client closes its connection."""
    body = ATT_NESTED.encode()
    s = raw_connect(c)
    s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body[:len(body) // 2])
    time.sleep(0.005)
    s.close()
    return "gone"


def op_gone_while_queued(c):
    """A whole request, then a reset a few milliseconds later, before its answer."""
    s = raw_connect(c)
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(QUEUED_BODY) + QUEUED_BODY)
    time.sleep(0.003)
    s.setblocking(False)
    try:
        answered = bool(s.recv(1))
    except BlockingIOError:
        answered = False
    # SO_LINGER 0: close sends a reset, so the server's write fails at once.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return "answered" if answered else "gone"


OPS = [
    ("openai", 14, "/v1/embeddings", 200, op_openai),
    ("openai_base64", 6, "/v1/embeddings", 200, op_openai_b64),
    ("tei", 10, "/embed", 200, op_tei),
    ("attention_nested", 6, "/v1/attention", 200, op_attention_nested),
    ("attention_base64", 6, "/v1/attention", 200, op_attention_b64),
    ("tokenize", 6, "/tokenize", 200, op_tokenize),
    ("health", 4, "/health", 200, op_health),
    ("metrics", 2, "/metrics", 200, op_metrics),
    ("malformed_json", 4, "/v1/embeddings", 400, err_op("/v1/embeddings", '{"input": [', 400)),
    ("malformed_json_attention", 2, "/v1/attention", 400, err_op("/v1/attention", "{", 400)),
    ("wrong_type", 3, "/v1/embeddings", 400, err_op("/v1/embeddings", '{"input": 5}', 400)),
    ("wrong_type_attention", 2, "/v1/attention", 400,
     err_op("/v1/attention", '{"q": "text", "k": [], "v": []}', 400)),
    ("invalid_utf8", 2, "/embed", 400, err_op("/embed", b'{"inputs": "caf\xe9"}', 400)),
    ("empty_input", 2, "/v1/embeddings", 400, err_op("/v1/embeddings", '{"input": ""}', 400)),
    ("not_found", 3, "unmatched", 404, err_op("/nope", None, 404, method="GET")),
    ("wrong_method", 3, "/v1/embeddings", 405, err_op("/v1/embeddings", None, 405, method="GET")),
    ("too_large", 2, "/v1/embeddings", 413, err_op("/v1/embeddings", BIG, 413)),
    ("too_large_chunked", 2, "/v1/embeddings", 413, op_413_chunked),
    ("not_json", 3, "/tokenize", 415,
     err_op("/tokenize", '{"inputs": "a"}', 415, headers={"Content-Type": "text/plain"})),
    ("bad_dimensions", 2, "/v1/embeddings", 422,
     err_op("/v1/embeddings", '{"input": "a", "dimensions": 0}', 422)),
    ("bad_token_id", 2, "/v1/embeddings", 422,
     err_op("/v1/embeddings", '{"input": [101, 30522, 102]}', 422)),
    ("shape_mismatch", 2, "/v1/attention", 422,
     err_op("/v1/attention", json.dumps({"q": ATT_Q, "k": ATT_K[:5], "v": ATT_V}), 422)),
    ("gone_mid_body", 2, "/v1/attention", 0, op_gone_mid_body),
    ("gone_while_queued", 2, "/v1/embeddings", 0, op_gone_while_queued),
]


# ---- clients ----------------------------------------------------------------------------------

class Client(threading.Thread):
    """Sends one request every `interval` seconds (a steady rate, not a closed
    loop), keeping a keep-alive session; pauses with every connection closed
    when asked."""

    def __init__(self, soak, index, interval):
        super().__init__(daemon=True)
        self.soak, self.port, self.interval = soak, soak.port, interval
        self.rng = random.Random(1000 + index)
        self.s = requests.Session()
        self.paused = threading.Event()
        self.weights = [w for _, w, _, _, _ in OPS]

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def post(self, path, body):
        return self.s.post(self.url(path), data=body, headers=JSON, timeout=TIMEOUT)

    def run(self):
        next_t = time.monotonic() + self.rng.uniform(0, self.interval)
        while not self.soak.stop.is_set():
            if self.soak.pause.is_set():
                self.s.close()
                self.paused.set()
                while self.soak.pause.is_set() and not self.soak.stop.is_set():
                    time.sleep(0.05)
                self.paused.clear()
                self.s = requests.Session()
                next_t = time.monotonic()
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_t += self.interval
            name, _, route, status, fn = self.rng.choices(OPS, self.weights)[0]
            try:
                result = fn(self)
                self.soak.record(name, route, status, result)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                self.soak.fail(name, e)
        self.s.close()
        self.paused.set()


class Soak:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.seen = Counter()      # (route, status) the clients received
        self.gone = Counter()      # route -> clients that went away unanswered
        self.ops = Counter()
        self.failures = []
        self.samples = []          # (t, phase, rss_kib, fds, requests, anon_kib, file_kib)
        self.stop, self.pause = threading.Event(), threading.Event()
        self.phase = "warm-up"
        self.idle_fds = []         # fd kinds at each idle point

    def record(self, name, route, status, result):
        with self.lock:
            self.ops[name] += 1
            if result == "gone":
                self.gone[route] += 1
            elif result == "answered":
                self.seen[(route, 200)] += 1
            else:
                self.seen[(route, status)] += 1

    def fail(self, name, e):
        with self.lock:
            self.ops[name] += 1
            self.failures.append("%s: %s: %s" % (name, type(e).__name__, e))

    def total_ops(self):
        with self.lock:
            return sum(self.ops.values())

    # ---- the server ----

    def start_server(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cfg = dict(SETTINGS, port=self.port, model=self.args.model)
        self.config_path = os.path.join(self.args.out, "attnserve.json")
        with open(self.config_path, "w") as f:
            json.dump(cfg, f, indent=1)
        self.log_path = os.path.join(self.args.out, "server.log")
        self.log = open(self.log_path, "w")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
        self.proc = subprocess.Popen([self.args.bin, "--config", self.config_path],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        end = time.time() + 60
        while time.time() < end:
            if self.proc.poll() is not None:
                raise SystemExit("soak: attnserve exited with %d at start; see %s"
                                 % (self.proc.returncode, self.log_path))
            try:
                if requests.get("http://127.0.0.1:%d/ready" % self.port, timeout=1).ok:
                    self.seen[("/ready", 200)] += 1
                    return
                self.seen[("/ready", 503)] += 1
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        raise SystemExit("soak: attnserve not ready after 60 s")

    def sample(self):
        """(VmRSS, open fds); RssAnon and RssFile go to the CSV beside them,
        to tell heap growth from weight pages being touched."""
        rss, fds, _ = self.sample_full()
        return rss, fds

    def sample_full(self):
        pid = self.proc.pid
        with open("/proc/%d/status" % pid) as f:
            kib = {line.split(":")[0]: int(line.split()[1]) for line in f
                   if line.startswith(("VmRSS:", "RssAnon:", "RssFile:"))}
        fds = len(os.listdir("/proc/%d/fd" % pid))
        return kib["VmRSS"], fds, (kib["RssAnon"], kib["RssFile"])

    def sampler(self, t0):
        next_t = t0
        while not self.stop.is_set():
            next_t += 1.0
            time.sleep(max(0.0, next_t - time.monotonic()))
            try:
                rss, fds, (anon, file_) = self.sample_full()
            except (OSError, KeyError):
                return
            with self.lock:
                self.samples.append((round(time.monotonic() - t0, 1), self.phase, rss, fds,
                                     sum(self.ops.values()), anon, file_))

    def fd_targets(self):
        d = "/proc/%d/fd" % self.proc.pid
        out = Counter()
        for n in os.listdir(d):
            try:
                out[os.readlink(os.path.join(d, n)).split(":")[0]] += 1
            except OSError:
                pass
        return out

    def idle(self, clients):
        """Pauses the clients, their connections closed, and waits
        connection_timeout_s + 2 s: by then the server has closed every
        connection, even one whose client reset it before the server read a
        byte (MHD notices those at its next wake-up, at the latest at the
        connection timeout). Returns (rss_kib, fds) at rest and keeps what the
        fds are (socket, pipe, anon_inode, file) to explain a difference."""
        self.pause.set()
        for c in clients:
            c.paused.wait(timeout=60)
        time.sleep(SETTINGS["connection_timeout_s"] + 2)
        self.idle_fds.append(self.fd_targets())
        return self.sample()

    def server_counts(self):
        r = requests.get("http://127.0.0.1:%d/metrics" % self.port, timeout=TIMEOUT)
        r.raise_for_status()
        counts = Counter()
        for line in r.text.splitlines():
            if line.startswith("attnserve_http_requests_total{"):
                labels, value = line[len("attnserve_http_requests_total{"):].rsplit("} ", 1)
                kv = dict(p.split("=", 1) for p in labels.split(","))
                counts[(kv["route"].strip('"'), kv["status"].strip('"'))] = int(float(value))
        return counts

    # ---- the run ----

    def run(self):
        a = self.args
        self.start_server()
        warmup = max(WARMUP_MIN_S, a.seconds * WARMUP_FRACTION)
        clients = [Client(self, i, a.clients / a.rate) for i in range(a.clients)]
        t0 = time.monotonic()
        sampler = threading.Thread(target=self.sampler, args=(t0,), daemon=True)
        sampler.start()
        for c in clients:
            c.start()
        time.sleep(max(0.0, t0 + warmup - time.monotonic()))
        base_rss, base_fds = self.idle(clients)
        self.phase = "measured"
        t_base = time.monotonic() - t0
        print("soak: warm-up done at %.0f s: idle RSS %.1f MiB, %d fds"
              % (t_base, base_rss / 1024, base_fds), flush=True)
        self.pause.clear()
        time.sleep(max(0.0, t0 + a.seconds - time.monotonic()))
        end_rss, end_fds = self.idle(clients)
        self.phase = "end"
        self.stop.set()
        for c in clients:
            c.join(timeout=60)
        sampler.join(timeout=5)
        _, _, (anon, file_) = self.sample_full()
        self.samples.append((round(time.monotonic() - t0, 1), "end", end_rss, end_fds,
                             self.total_ops(), anon, file_))
        server = self.server_counts()
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=SETTINGS["drain_timeout_s"] + 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = "killed after %d s" % (SETTINGS["drain_timeout_s"] + 10)
        self.log.close()
        return self.verdict(base_rss, base_fds, t_base, end_fds, server, status)

    def verdict(self, base_rss, base_fds, t_base, end_fds, server, status):
        problems = list(self.failures[:20])
        if len(self.failures) > 20:
            problems.append("... and %d more unexpected responses" % (len(self.failures) - 20))
        measured = [s for s in self.samples if s[0] >= t_base]
        max_rss = max(s[2] for s in measured)
        limit = base_rss * (1 + RSS_TOLERANCE)
        if max_rss > limit:
            t_max = next(s[0] for s in measured if s[2] == max_rss)
            problems.append("RSS grew: %.1f MiB at %.0f s > %.1f MiB (idle after warm-up + %d%%)"
                            % (max_rss / 1024, t_max, limit / 1024, RSS_TOLERANCE * 100))
        if end_fds != base_fds:
            problems.append("idle fds: %d at the end, %d after warm-up (%s, then %s)"
                            % (end_fds, base_fds, dict(self.idle_fds[0]), dict(self.idle_fds[-1])))
        problems += self.accounting(server)
        with open(self.log_path) as f:
            log = f.read()
        problems += ["sanitizer report in the server log: " + m for m in SANITIZER_MARKERS
                     if m in log]
        if status != 0:
            problems.append("attnserve exited with %s after SIGTERM" % status)
        dropped = sum(v for (r, st), v in server.items() if st == "undelivered")
        lines = [
            "soak: %d s at %.0f requests/s from %d clients, %d requests (%d unexpected)"
            % (self.args.seconds, self.args.rate, self.args.clients, self.total_ops(),
               len(self.failures)),
            "soak: RSS idle after warm-up %.1f MiB, max after %.1f MiB (%+.2f%%, limit +%d%%)"
            % (base_rss / 1024, max_rss / 1024, 100 * (max_rss / base_rss - 1),
               RSS_TOLERANCE * 100),
            "soak: idle fds after warm-up %d, at the end %d; max fds under load %d"
            % (base_fds, end_fds, max(s[3] for s in self.samples)),
            "soak: clients gone unanswered %d, server counted dropped %d; exit status %s"
            % (sum(self.gone.values()), dropped, status),
            "soak: by kind: " + ", ".join("%s %d" % kv for kv in sorted(self.ops.items())),
        ]
        lines += ["soak: FAIL: " + p for p in problems]
        lines.append("soak: %s" % ("FAIL" if problems else "PASS"))
        return lines, not problems

    def accounting(self, server):
        """Every response the clients saw is counted by the server under the
        same route and status; the clients that went away account for every
        dropped request and for any extra 200."""
        problems = []
        routes = {r for r, _ in self.seen} | set(self.gone) | {r for r, _ in server}
        for route in sorted(routes):
            statuses = {str(s) for r, s in self.seen if r == route} | \
                {s for r, s in server if r == route}
            extra = 0
            for st in sorted(statuses):
                want = self.seen.get((route, int(st)), 0) if st.isdigit() else 0
                got = server.get((route, st), 0)
                if st == "undelivered" or st == "200":
                    extra += got - want
                    if got < want:
                        problems.append("%s status %s: server counted %d, clients saw %d"
                                        % (route, st, got, want))
                elif got != want:
                    problems.append("%s status %s: server counted %d, clients saw %d"
                                    % (route, st, got, want))
            # A client that resets before the server has read its request
            # was never accepted, so fewer drops than clients gone is right.
            if not 0 <= extra <= self.gone.get(route, 0):
                problems.append("%s: %d dropped or extra answers, but %d clients went away"
                                % (route, extra, self.gone.get(route, 0)))
        gone = sum(self.gone.values())
        dropped = sum(v for (_, st), v in server.items() if st == "undelivered")
        if gone >= 10 and dropped == 0:
            problems.append("%d clients went away and the server dropped none: the disconnect "
                            "scenarios did not reach the server" % gone)
        return problems

    def write(self, lines):
        a = self.args
        with open(os.path.join(a.out, "soak.csv"), "w") as f:
            f.write("t_s,phase,rss_kib,fds,requests,rss_anon_kib,rss_file_kib\n")
            for s in self.samples:
                f.write("%s,%s,%d,%d,%d,%d,%d\n" % s)
        with open(os.path.join(a.out, "summary.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        if a.png:
            self.plot(a.png, lines)

    def plot(self, path, lines):
        t = [s[0] for s in self.samples]
        rss = [s[2] / 1024 for s in self.samples]
        fds = [s[3] for s in self.samples]
        base = next(s for s in self.samples if s[1] != "warm-up")
        t_base, base_rss = base[0], base[2] / 1024
        limit = base_rss * (1 + RSS_TOLERANCE)
        marks = [(t_base, "warm-up end")]
        title = "attnserve soak: %d s, %.0f req/s, %s" % (
            self.args.seconds, self.args.rate, lines[-1].split(": ")[-1])
        write_chart(path, title, [
            Panel("resident memory (MiB)",
                  [Series("VmRSS", t, rss), Series("limit: idle after warm-up +5%",
                                                   [t_base, t[-1]], [limit, limit], dash=6)],
                  vmarks=marks, ymin=min(rss) * 0.9, ymax=limit * 1.02),
            Panel("open file descriptors", [Series("fds", t, fds)], vmarks=marks, ymin=0),
        ], xlabel="time (s)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--seconds", type=int, default=180)
    p.add_argument("--out", required=True)
    p.add_argument("--png")
    p.add_argument("--model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    p.add_argument("--rate", type=float, default=40.0, help="requests per second, all clients")
    p.add_argument("--clients", type=int, default=4)
    a = p.parse_args()
    if not 60 <= a.seconds <= MAX_SECONDS:
        p.error("--seconds must be within 60..%d" % MAX_SECONDS)
    os.makedirs(a.out, exist_ok=True)
    soak = Soak(a)
    try:
        lines, ok = soak.run()
    finally:
        if getattr(soak, "proc", None) and soak.proc.poll() is None:
            soak.proc.kill()
            soak.proc.wait()
    soak.write(lines)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

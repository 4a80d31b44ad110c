"""Fixtures for the end-to-end tests: the real attnserve binary on a free
loopback port with a temporary config file, and helpers to talk to it.

Every server a test starts is stopped (SIGTERM, then SIGKILL) when the test
ends, and its log is printed when the test fails."""
import base64
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest
import requests

BIN = os.environ.get("ATTNSERVE_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The service always loads its model: the default one, fetched by `make model`.
MODEL_DIR = os.environ.get("ATTNSERVE_TEST_MODEL", os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))

sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import golden_io  # noqa: E402  (tests/golden/golden_io.py)


def golden(name):
    """The golden data tests/golden/NAME (NAME.json or NAME.json.gz)."""
    return golden_io.load(os.path.join(ROOT, "tests", "golden", name))

# Small, fast settings shared by most servers; tests override what they need.
BASE_SETTINGS = {
    "host": "127.0.0.1",
    "backend": "naive",
    "fallback_backends": "naive",
    "threads": 2,
    "max_connections": 256,
    "connection_timeout_s": 10,
    "max_body_bytes": 4 << 20,
    "request_timeout_ms": 30000,
    "drain_timeout_s": 20,
    "drain_linger_ms": 100,
    "max_batch_tokens": 4096,
    "max_batch_requests": 64,
    "max_wait_us": 2000,
    "max_queue": 256,
    "log_level": "info",
    "log_format": "text",
    "model": MODEL_DIR,
}

JSON = {"Content-Type": "application/json"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, workdir, env=None, **settings):
        self.workdir = workdir
        self.settings = dict(BASE_SETTINGS, **settings)
        # `models` names every model's path; the base `model` beside it is refused.
        if "models" in settings or "ATTNSERVE_MODELS" in (env or {}):
            self.settings.pop("model", None)
        self.settings.setdefault("port", free_port())
        self.config_path = os.path.join(workdir, "attnserve-%d.json" % self.settings["port"])
        self.write_config()
        self.log_path = self.config_path.replace(".json", ".log")
        self.log = open(self.log_path, "w+")
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
        child_env.update(env or {})
        self.proc = subprocess.Popen([BIN, "--config", self.config_path], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=child_env)
        self.base = "http://127.0.0.1:%d" % self.settings["port"]
        try:
            self.wait_ready()
        except BaseException:
            # A server that never became ready is no test's to stop: without
            # this it outlives the run, holding its port and two cores.
            self.stop()
            raise

    def write_config(self):
        with open(self.config_path + ".tmp", "w") as f:
            json.dump(self.settings, f)
        os.replace(self.config_path + ".tmp", self.config_path)

    def url(self, path):
        return self.base + path

    # Start-up self-tests every backend before /ready (issue 7): about a second
    # of CPU, several under the sanitizers on a busy machine.
    def wait_ready(self, timeout=None):
        # ATTNSERVE_E2E_READY_TIMEOUT_S: a sanitizer build self-tests for up to
        # minutes on a loaded two-core machine (make tsan-http and make asan
        # set it).
        if timeout is None:
            timeout = float(os.environ.get("ATTNSERVE_E2E_READY_TIMEOUT_S", "30"))
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("attnserve exited with %d:\n%s" % (self.proc.returncode,
                                                                    self.log_text()))
            try:
                if requests.get(self.url("/ready"), timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.02)
        raise RuntimeError("attnserve not ready after %ss:\n%s" % (timeout, self.log_text()))

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def reload(self, **changes):
        self.settings.update(changes)
        self.write_config()
        self.proc.send_signal(signal.SIGHUP)

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout=30):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        """Stops the server; returns its exit status (-9 if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=25)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def check_clean_exit(self, status):
        """A clean stop exits 0, and a sanitizer build reports nothing."""
        log = self.log_text()
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                       "WARNING: ThreadSanitizer"):
            assert marker not in log, "sanitizer report in the server log:\n" + log[-8000:]
        assert status == 0, "attnserve exited with %s:\n%s" % (status, log[-8000:])

    def metrics(self):
        r = requests.get(self.url("/metrics"), timeout=5)
        assert r.status_code == 200, r.text
        return parse_metrics(r.text)

    def metric(self, name, **labels):
        want = tuple(sorted(labels.items()))
        return self.metrics().get((name, want), 0.0)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text → {(name, sorted label pairs): value}; asserts the format."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, "bad metrics line: %r" % line
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


# vLLM's load gauges under vLLM's names, beside the attnserve gauges they
# mirror (server/ops/metrics.c).
VLLM_GAUGES = {"vllm:num_requests_running": "attnserve_batch_requests_in_flight",
               "vllm:num_requests_waiting": "attnserve_queue_depth"}


def promtool_check(text):
    """`promtool check metrics` on text, when promtool is installed; returns
    False (and says NOT RUN) when it is not. vLLM's gauges keep vLLM's names,
    colon included, for the routers that read them: legal in the exposition
    format, but promtool's linter reserves ':' for recording rules and says so
    (exit 3, a lint problem, not a parse error). Exactly those lines are
    allowed; anything else fails."""
    if not shutil.which("promtool"):
        print("NOT RUN: promtool check metrics (apt-get install prometheus)")
        return False
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    problems = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    allowed = {"%s metric names should not contain ':'" % n for n in VLLM_GAUGES}
    assert r.returncode in (0, 3) and set(problems) <= allowed, r.stdout + r.stderr
    assert (r.returncode == 3) == bool(problems), r.stdout + r.stderr
    return True

@pytest.fixture
def start_server(tmp_path, request):
    """start_server(**settings) → a running Server, stopped after the test."""
    servers = []

    def start(env=None, **settings):
        s = Server(str(tmp_path), env=env, **settings)
        servers.append(s)
        return s

    yield start
    failed = getattr(request.node, "rep_call", None)
    for s in servers:
        status = s.stop()
        if failed is not None and failed.failed:
            print("---- attnserve log (%s) ----\n%s" % (s.base, s.log_text()[-8000:]))
        else:
            s.check_clean_exit(status)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One ordinary server shared by a module's read-only tests."""
    s = Server(str(tmp_path_factory.mktemp("srv")))
    yield s
    s.check_clean_exit(s.stop())


# ---- tensors and the reference --------------------------------------------------

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def random_tensor(rng, seq, heads, head_dim, scale=1.0):
    """[seq][heads][head_dim] of float32-representable values."""
    return [[[f32(rng.uniform(-scale, scale)) for _ in range(head_dim)] for _ in range(heads)]
            for _ in range(seq)]


def flatten(t):
    return [x for row in t for vec in row for x in vec]


def to_base64(t):
    flat = flatten(t)
    return {"shape": [len(t), len(t[0]), len(t[0][0])],
            "data": base64.b64encode(struct.pack("<%df" % len(flat), *flat)).decode()}


def from_base64(obj):
    seq, heads, head_dim = obj["shape"]
    raw = base64.b64decode(obj["data"])
    flat = struct.unpack("<%df" % (len(raw) // 4), raw)
    assert len(flat) == seq * heads * head_dim
    it = iter(flat)
    return [[[next(it) for _ in range(head_dim)] for _ in range(heads)] for _ in range(seq)]


def attention_ref(q, k, v, causal=False):
    """softmax(q kᵀ / sqrt(D)) v per head, in float64."""
    seq, heads, dim = len(q), len(q[0]), len(q[0][0])
    scale = 1.0 / math.sqrt(dim)
    out = [[[0.0] * dim for _ in range(heads)] for _ in range(seq)]
    for h in range(heads):
        for i in range(seq):
            n = i + 1 if causal else seq
            qi = q[i][h]
            s = [scale * sum(a * b for a, b in zip(qi, k[j][h])) for j in range(n)]
            m = max(s)
            w = [math.exp(x - m) for x in s]
            z = sum(w)
            o = out[i][h]
            for j in range(n):
                wj, vj = w[j] / z, v[j][h]
                for d in range(dim):
                    o[d] += wj * vj[d]
    return out


def max_abs_diff(a, b):
    fa, fb = flatten(a), flatten(b)
    assert len(fa) == len(fb)
    return max(abs(x - y) for x, y in zip(fa, fb))


def attention_case(seed, seq, heads, head_dim, causal=False):
    """(request body as nested arrays, expected output)."""
    rng = random.Random(seed)
    q = random_tensor(rng, seq, heads, head_dim)
    k = random_tensor(rng, seq, heads, head_dim)
    v = random_tensor(rng, seq, heads, head_dim)
    return {"q": q, "k": k, "v": v, "causal": causal}, attention_ref(q, k, v, causal)


def as_base64(body):
    return dict(body, q=to_base64(body["q"]), k=to_base64(body["k"]), v=to_base64(body["v"]))


def slow_body(seq=4096, heads=4, head_dim=8, seed=7):
    """A base64 request that keeps the naive backend busy for a while (about
    0.7 s on two idle cores for the default size, 1 GFLOP; several times that
    under sanitizers or load) with a body of 2 MB, so that the I/O thread
    reads it quickly even while the compute threads take every core. Tests
    that race it against a 100 ms deadline need it well above that on the
    fastest machine they run on: at half this size an idle machine finished
    it in 90 ms."""
    rng = random.Random(seed)
    t = [random_tensor(rng, seq, heads, head_dim) for _ in range(3)]
    return json.dumps({"q": to_base64(t[0]), "k": to_base64(t[1]), "v": to_base64(t[2])})


def post_attention(server, body, timeout=60, session=None, **kw):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    poster = session.post if session else requests.post
    return poster(server.url("/v1/attention"), data=data, headers=dict(JSON, **kw),
                  timeout=timeout)


# Routes that imitate Text Embeddings Inference answer errors in its shape,
# {"error": message, "error_type": type}; /tokenize does when the body is
# TEI's (llama.cpp's `content` gets the OpenAI shape).
TEI_PATHS = {"/", "/embed", "/embed_all", "/invocations", "/similarity", "/decode", "/tokenize",
             "/ping"}
# Each of our error types as TEI's error_type names it (server/api/errors.h); the rest are
# Validation, but for Empty and Tokenizer, which share OpenAI's types with Validation.
TEI_TYPES = {"overloaded_error": "Overloaded", "unavailable_error": "Unhealthy",
             "timeout_error": "Backend", "internal_error": "Backend",
             "model_task_error": "Backend"}


def tei_shaped(r):
    path = requests.utils.urlparse(r.request.url).path
    body = r.request.body or b""
    body = body.encode() if isinstance(body, str) else body
    return path in TEI_PATHS and not (path == "/tokenize" and b'"content"' in body)


def assert_error(r, status, etype=None, tei=None):
    """The error answer of status, in the shape of the API the route
    imitates; returns {"message", "type", "code"} whichever the shape.
    etype is OpenAI's type; on TEI's routes the error_type is tei when given
    (Empty and Tokenizer share OpenAI's types with Validation), else etype's
    TEI name."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"] == "application/json"
    if tei_shaped(r):
        body = r.json()
        assert set(body) == {"error", "error_type"}, body
        assert body["error"]
        if tei:
            assert body["error_type"] == tei, body
        elif etype:
            assert body["error_type"] == TEI_TYPES.get(etype, "Validation"), body
        return {"message": body["error"], "type": body["error_type"], "code": status}
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["message"]
    if etype:
        assert err["type"] == etype
    return err


def assert_raw_error(status, headers, body, want, etype=None, path=None):
    """As assert_error, for an answer read off a raw socket from path."""
    assert status == want, (status, body)
    assert headers["content-type"] == "application/json"
    if path in TEI_PATHS:
        tei = json.loads(body)
        assert set(tei) == {"error", "error_type"} and tei["error"], tei
        if etype:
            assert tei["error_type"] == TEI_TYPES.get(etype, "Validation")
        return {"message": tei["error"], "type": tei["error_type"], "code": want}
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == want and err["message"]
    if etype:
        assert err["type"] == etype
    return err


def wait_for(cond, timeout=10, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def vm_hwm(pid):
    """The process's peak resident memory in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/%d/status" % pid)


def asan_build(pid):
    """Whether the process runs under AddressSanitizer, whose allocator keeps
    a quarantine and shadow memory: resident memory then says nothing of the
    service's own bound."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()

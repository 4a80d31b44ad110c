"""Scale-out test: three attnserve instances behind haproxy on loopback.

Started by tests/cluster/run.sh (make test-cluster). Uses deploy/haproxy.cfg
itself, with only its bind addresses and server lines rewritten to loopback
ports, so what is tested is the shipped balancer configuration.

Phases, each a fixed number of requests (or, for the rolling restart, as many
as the restart takes, capped in count and time), every answer checked against
its own expected content (no result lost or swapped):
  1. share: every instance takes part of the load (its /metrics counters);
  2. kill -9 one instance mid-load: the client sees no failed request;
  3. rolling restart under load (SIGTERM each instance in turn, wait for its
     exit 0, start it again, wait for /ready and for haproxy to see it up):
     no failed request, and at the servers 0 refused and 0 lost (haproxy's
     econ and eresp counters do not move, so no retry hid a loss);
  4. throughput through haproxy with three instances and with one, printed.

The request is POST /v1/embeddings when the binary serves it, otherwise
POST /v1/attention; the test prints which one ran.
"""
import csv
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "container"))
import request as rq  # noqa: E402  (tests/container/request.py)

BIN = os.path.abspath(os.environ.get("ATTNSERVE_BIN", os.path.join(ROOT, "build", "attnserve")))
MODEL = os.path.abspath(os.environ.get("ATTNSERVE_MODEL_DIR",
                                       os.path.join(ROOT, "models", "all-MiniLM-L6-v2")))
HAPROXY_CFG = os.path.join(ROOT, "deploy", "haproxy.cfg")
CONCURRENCY = int(os.environ.get("CLUSTER_CONCURRENCY", "16"))
DRAIN_TIMEOUT_S = 10
READY_TIMEOUT_S = 60
PHASE_TIME_LIMIT_S = 60  # every load phase stops by itself within this


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, what, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError("timed out after %gs waiting for %s" % (timeout, what))


def http_ok(url, timeout=1.0):
    try:
        return requests.get(url, timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


class Instance:
    """One attnserve process on 127.0.0.1:port, its log in workdir."""

    def __init__(self, name, workdir, threads):
        self.name, self.port = name, free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(workdir, name + ".log")
        self.threads = threads
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(self.log_path, "a")
        log.write("=== start %d ===\n" % self.starts)
        log.flush()
        argv = [BIN, "--host=127.0.0.1", "--port=%d" % self.port,
                "--model=%s" % MODEL, "--threads=%d" % self.threads,
                "--drain-timeout-s=%d" % DRAIN_TIMEOUT_S, "--log-level=info"]
        # CLUSTER_DRAIN_LINGER_MS=0 shows what the linger prevents (the
        # rolling restart's refused/lost counts then fail the test).
        if os.environ.get("CLUSTER_DRAIN_LINGER_MS"):
            argv.append("--drain-linger-ms=%s" % os.environ["CLUSTER_DRAIN_LINGER_MS"])
        env = dict(os.environ)
        env.pop("ATTNSERVE_CONFIG", None)
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env=env)
        log.close()

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("%s exited with %s before /ready; log:\n%s"
                                     % (self.name, self.proc.returncode, self.tail()))
            return http_ok(self.url + "/ready")
        wait_until(ready, READY_TIMEOUT_S, self.name + " /ready")

    def tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def sigterm_and_wait(self):
        """SIGTERM; returns (exit status, seconds to exit)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=DRAIN_TIMEOUT_S + 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("%s did not exit within drain_timeout_s + 10 s after SIGTERM"
                                 % self.name)
        return rc, time.monotonic() - t0

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def metrics(self):
        return requests.get(self.url + "/metrics", timeout=5).text


def served_count(metrics_text, route):
    """attnserve_http_requests_total for route, every status label.

    Every answer the client sees is checked for status and content by Load;
    this count is only where the requests went. It includes status="undelivered",
    which the service records when libmicrohttpd reports the connection
    ended before it saw the request complete. Counting status 200 alone once
    gave 899 of 900 (then 897) while the client had 900 correct answers, and
    waiting for the counters did not change it; we believe haproxy closing
    its server connection races libmicrohttpd's completion report, but have
    not confirmed it (an open question on the status label, not on the
    answers)."""
    total = 0
    for line in metrics_text.splitlines():
        if not line.startswith("attnserve_http_requests_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        if 'route="%s"' % route in labels:
            total += int(float(value))
    return total


class Haproxy:
    def __init__(self, workdir, instances):
        self.port, self.stats_port = free_port(), free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.stats_url = "http://127.0.0.1:%d/stats;csv" % self.stats_port
        self.cfg = os.path.join(workdir, "haproxy.cfg")
        self.log_path = os.path.join(workdir, "haproxy.log")
        with open(HAPROXY_CFG) as f:
            text = f.read()
        with open(self.cfg, "w") as f:
            f.write(self.rewrite(text, instances))
        self.proc = None

    def rewrite(self, text, instances):
        """The shipped config with loopback binds and our servers."""
        out, section, servers_done = [], None, False
        for line in text.splitlines():
            s = line.strip()
            m = re.match(r"^(global|defaults|frontend|backend|listen|resolvers)\b\s*(\S*)", line)
            if m:
                section = (m.group(1), m.group(2))
            if section == ("frontend", "attnserve") and s.startswith("bind "):
                line = "    bind 127.0.0.1:%d" % self.port
            elif section == ("frontend", "stats") and s.startswith("bind "):
                line = "    bind 127.0.0.1:%d" % self.stats_port
            elif section == ("backend", "attnserve") and s.startswith("server "):
                if servers_done:
                    continue
                servers_done = True
                line = "\n".join("    server %s 127.0.0.1:%d" % (i.name, i.port)
                                 for i in instances)
            out.append(line)
        assert servers_done, "deploy/haproxy.cfg has no server lines in backend attnserve"
        return "\n".join(out) + "\n"

    def start(self):
        check = subprocess.run(["haproxy", "-c", "-f", self.cfg], capture_output=True, text=True)
        assert check.returncode == 0, "haproxy -c failed:\n" + check.stdout + check.stderr
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", self.cfg], stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        wait_until(lambda: http_ok(self.stats_url), 10, "haproxy stats page")

    def server_status(self):
        """{server name: status} of backend attnserve, from the stats CSV."""
        text = requests.get(self.stats_url, timeout=2).text.lstrip("# ")
        return {row["svname"]: row["status"] for row in csv.DictReader(io.StringIO(text))
                if row["pxname"] == "attnserve" and row["svname"] not in ("FRONTEND", "BACKEND")}

    def server_counters(self):
        """{server name: {counter: value}} of backend attnserve: econ (connections
        the server refused or that failed to open), eresp (answers that never
        came: closed or reset mid-request), wretr (retries), wredis
        (redispatches), hrsp_5xx."""
        text = requests.get(self.stats_url, timeout=2).text.lstrip("# ")
        keys = ("econ", "eresp", "wretr", "wredis", "hrsp_5xx")
        return {row["svname"]: {k: int(row[k] or 0) for k in keys}
                for row in csv.DictReader(io.StringIO(text))
                if row["pxname"] == "attnserve" and row["svname"] not in ("FRONTEND", "BACKEND")}

    def wait_status(self, name, want, timeout=15):
        # Exactly "UP" / "DOWN": "UP 1/2" is an up server failing its checks.
        wait_until(lambda: self.server_status().get(name) == want, timeout,
                   "haproxy to see %s %s" % (name, want))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Load:
    """CONCURRENCY client threads sending checked requests through url.

    Stops after `count` requests, after `time_limit` seconds, or when stop()
    is called, whichever comes first. Each request is distinct and its answer
    is compared with that request's own expected result."""

    def __init__(self, url, kind, cases, count, time_limit=PHASE_TIME_LIMIT_S, on_progress=None):
        self.url, self.kind, self.cases = url, kind, cases
        self.count, self.time_limit = count, time_limit
        self.on_progress = on_progress
        self.lock = threading.Lock()
        self.issued = self.ok = 0
        self.failures = []
        self.stopping = threading.Event()
        self.threads = []
        self.elapsed = 0.0

    def _next(self):
        with self.lock:
            if self.issued >= self.count or self.stopping.is_set():
                return None
            self.issued += 1
            return self.issued

    def _worker(self):
        session = requests.Session()
        while True:
            n = self._next()
            if n is None:
                return
            if time.monotonic() > self.deadline:
                self.stopping.set()
                return
            case = self.cases[n % len(self.cases)]
            try:
                if self.kind == "embeddings":
                    r = session.post(self.url + "/v1/embeddings",
                                     json={"input": [case[0]], "model": "all-MiniLM-L6-v2"},
                                     timeout=30)
                    if r.status_code != 200:
                        raise rq.Failed("status %d: %s" % (r.status_code, r.text[:200]))
                    rq.check_embeddings(r.json(), [case])
                else:
                    req, want = case
                    r = session.post(self.url + "/v1/attention", json=req, timeout=30)
                    if r.status_code != 200:
                        raise rq.Failed("status %d: %s" % (r.status_code, r.text[:200]))
                    rq.check_attention(r.json(), want)
                with self.lock:
                    self.ok += 1
                    done = self.ok
            except Exception as e:  # noqa: BLE001 — every failure is recorded
                with self.lock:
                    self.failures.append("request %d: %s: %s" % (n, type(e).__name__, e))
                    done = self.ok
            if self.on_progress:
                self.on_progress(done)

    def start(self):
        self.t0 = time.monotonic()
        self.deadline = self.t0 + self.time_limit
        self.threads = [threading.Thread(target=self._worker, daemon=True)
                        for _ in range(CONCURRENCY)]
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stopping.set()

    def join(self):
        for t in self.threads:
            t.join(timeout=self.time_limit + 40)
            assert not t.is_alive(), "a client thread is stuck"
        self.elapsed = time.monotonic() - self.t0
        return self

    def rate(self):
        return self.ok / self.elapsed if self.elapsed else 0.0

    def assert_clean(self, what):
        assert not self.failures, "%s: %d of %d requests failed, first: %s" % (
            what, len(self.failures), self.issued, self.failures[:5])
        assert self.ok == self.issued, "%s: %d issued, %d answered" % (what, self.issued, self.ok)


@pytest.fixture(scope="module")
def cluster():
    assert os.access(BIN, os.X_OK), "no binary at %s (make first)" % BIN
    assert shutil.which("haproxy"), "haproxy is not installed (apt-get install haproxy)"
    workdir = tempfile.mkdtemp(prefix="attnserve-cluster.")
    # Three processes on this machine's cores: one compute thread each would
    # be the fair share on a small machine; threads=0 (all cores) is what a
    # real one-instance-per-machine deployment uses.
    threads = int(os.environ.get("CLUSTER_THREADS", "1"))
    instances = [Instance("attnserve%d" % (i + 1), workdir, threads) for i in range(3)]
    lb = Haproxy(workdir, instances)
    try:
        for i in instances:
            i.start()
        for i in instances:
            i.wait_ready()
        lb.start()
        for i in instances:
            lb.wait_status(i.name, "UP")
        yield instances, lb, workdir
    except BaseException:
        for i in instances:
            sys.stderr.write("--- %s ---\n%s" % (i.name, i.tail()))
        raise
    finally:
        lb.stop()
        for i in instances:
            i.stop()
        if os.environ.get("CLUSTER_KEEP_LOGS") != "1":
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print("cluster logs kept in", workdir)


def settled_counts(instances, route, quiet_s=0.3, limit_s=10):
    """Each instance's served count for route once the counters stop moving.

    An instance counts a request when libmicrohttpd reports it complete, just
    after the client has its answer, so a read taken the moment the client is
    done can miss the last few answers (seen: 897 of 900). Reads repeat until
    two taken quiet_s apart agree, bounded by limit_s."""
    deadline = time.monotonic() + limit_s
    last = [served_count(i.metrics(), route) for i in instances]
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = [served_count(i.metrics(), route) for i in instances]
        if now == last:
            return now
        last = now
    return last


def wrk_rate(url, kind, cases, workdir, seconds=5, connections=32):
    """Requests/s that wrk measures through url for one fixed request, or None
    without wrk. Any socket error or non-2xx answer fails the test."""
    wrk = shutil.which("wrk")
    if not wrk:
        return None, None
    if kind == "embeddings":
        path, body = "/v1/embeddings", {"input": [cases[0][0]], "model": "all-MiniLM-L6-v2"}
    else:
        path, body = "/v1/attention", cases[0][0]
    script = os.path.join(workdir, "post.lua")
    with open(script, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                "wrk.body = [==[%s]==]\n" % json.dumps(body))
    cmd = [wrk, "-t2", "-c%d" % connections, "-d%ds" % seconds, "-s", script, url + path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Socket errors" not in r.stdout and "Non-2xx" not in r.stdout, r.stdout
    m = re.search(r"Requests/sec:\s+([0-9.]+)", r.stdout)
    assert m, r.stdout
    cmd[-1] = "URL" + path
    return float(m.group(1)), " ".join(os.path.basename(c) if c == wrk else c for c in cmd)


def retried_in_log(path):
    """Requests that haproxy re-sent to another server ('+N' retries field)."""
    n = 0
    with open(path, errors="replace") as f:
        for line in f:
            m = re.search(r" \d+/\d+/\d+/\d+/\+(\d+) ", line)
            if m:
                n += 1
    return n


def request_kind(url):
    return "embeddings" if rq.embeddings_served(requests.Session(), url) else "attention"


def make_cases(kind):
    if kind == "embeddings":
        cases = [c for c in rq.golden_cases(n=40) if c[1] is not None]
        assert cases, "tests/golden/embeddings.json.gz is needed to check embeddings"
        return cases
    return [rq.attention_case(seed) for seed in range(64)]


def test_cluster(cluster):
    instances, lb, workdir = cluster
    kind = request_kind(lb.url)
    route = "/v1/embeddings" if kind == "embeddings" else "/v1/attention"
    print("\ncluster: request POST %s through haproxy %s, %d client threads, "
          "instances %s" % (route, lb.url, CONCURRENCY, [i.url for i in instances]))
    cases = make_cases(kind)

    # Warm up every instance (first batches, page faults of the weights).
    Load(lb.url, kind, cases, 60).start().join().assert_clean("warm-up")

    # ---- 1. every instance takes a share --------------------------------------
    before = settled_counts(instances, route)
    n1 = 900
    load = Load(lb.url, kind, cases, n1).start().join()
    load.assert_clean("share phase")
    rate3 = load.rate()
    after = settled_counts(instances, route)
    shares = [a - b for a, b in zip(after, before)]
    print("cluster: share phase: %d requests in %.2f s (%.0f req/s); per instance %s"
          % (load.ok, load.elapsed, rate3, shares))
    assert sum(shares) == n1, "instances counted %d requests, the client sent %d" % (
        sum(shares), n1)
    for inst, s in zip(instances, shares):
        assert s >= n1 // 10, "%s served only %d of %d requests" % (inst.name, s, n1)

    # ---- 2. kill -9 one instance mid-load ---------------------------------------
    victim = instances[1]
    n2 = 900
    killed = threading.Event()

    def kill_at(done):
        if done >= n2 // 3 and not killed.is_set():
            killed.set()
            victim.kill9()

    load = Load(lb.url, kind, cases, n2, on_progress=kill_at).start().join()
    assert killed.is_set(), "the load ended before the kill"
    load.assert_clean("kill -9 phase")
    lb.wait_status(victim.name, "DOWN")
    print("cluster: kill -9 of %s after %d requests: %d/%d answered correctly, 0 failed "
          "(haproxy marked it DOWN)" % (victim.name, n2 // 3, load.ok, n2))
    victim.start()
    victim.wait_ready()
    lb.wait_status(victim.name, "UP")

    # ---- 3. rolling restart under load ------------------------------------------
    # Besides every client request answered correctly (haproxy would retry a
    # refused or unanswered one and hide it), the instances themselves must
    # refuse no connection and drop no request while they drain: their
    # linger (drain_linger_ms, 2 s) outlasts haproxy taking them out of
    # rotation (/ready 503; at most 1.5 s with inter 1 s, fastinter 500 ms,
    # fall 2), so haproxy's counters stay where they were: connection
    # errors (econ) and answers that never came (eresp), and, since haproxy
    # counts those only once its retries are spent, the retries (wretr) and
    # redispatches (wredis) that a refused or cut request costs. Without the
    # linger (CLUSTER_DRAIN_LINGER_MS=0) econ and eresp stayed 0 while 8
    # retries and 64 redispatches hid the refusals.
    counters_before = lb.server_counters()
    load = Load(lb.url, kind, cases, 200000).start()
    drains = []
    try:
        time.sleep(1.0)
        for inst in instances:
            rc, took = inst.sigterm_and_wait()
            drains.append((inst.name, rc, took))
            assert rc == 0, "%s exited %s after SIGTERM; log:\n%s" % (inst.name, rc, inst.tail())
            lb.wait_status(inst.name, "DOWN")
            inst.start()
            inst.wait_ready()
            lb.wait_status(inst.name, "UP")
        time.sleep(1.0)
        assert not load.stopping.is_set(), "the load stopped (count or time cap) mid-restart"
    finally:
        load.stop()
        load.join()
    load.assert_clean("rolling restart")
    counters_after = lb.server_counters()
    delta = {name: {k: counters_after[name][k] - counters_before[name][k]
                    for k in counters_after[name]} for name in counters_after}
    refused = sum(d["econ"] for d in delta.values())
    lost = sum(d["eresp"] for d in delta.values())
    retried = sum(d["wretr"] + d["wredis"] for d in delta.values())
    print("cluster: rolling restart under load: %d requests, all answered correctly; "
          "drains %s" % (load.ok, ", ".join("%s exit %d in %.2fs" % d for d in drains)))
    print("cluster: rolling restart at the servers: %d refused (econ), %d lost (eresp), "
          "%d retried or redispatched, %d answered 5xx; per server %s" % (
              refused, lost, retried, sum(d["hrsp_5xx"] for d in delta.values()), delta))
    assert refused == 0, "instances refused %d connections while draining: %s" % (refused, delta)
    assert lost == 0, "instances dropped %d requests while draining: %s" % (lost, delta)
    assert retried == 0, "haproxy re-sent %d requests during the drains (refused or cut at " \
        "an instance, or answered 503): %s" % (retried, delta)
    print("cluster: haproxy re-sent %d requests to another server so far (kill -9 and "
          "restarts; retry-on + redispatch)" % retried_in_log(lb.log_path))
    for inst in instances:
        with open(inst.log_path, errors="replace") as f:
            text = f.read()
        # The lines attnserve writes on SIGTERM ("draining ...", "drained ...").
        for word in ("draining", "drained"):
            assert re.search(r"\b%s\b" % word, text), "%s logged no '%s'" % (inst.name, word)
        assert "drain timed out" not in text, "%s: a drain timed out" % inst.name

    # ---- 4. throughput: one instance vs three ----------------------------------------
    n4 = 900
    load = Load(lb.url, kind, cases, n4).start().join()
    load.assert_clean("throughput, three instances")
    rate3b = load.rate()
    wrk3, wrk_cmd = wrk_rate(lb.url, kind, cases, workdir)
    for inst in instances[1:]:
        rc, _ = inst.sigterm_and_wait()
        assert rc == 0
        lb.wait_status(inst.name, "DOWN")
    load = Load(lb.url, kind, cases, n4).start().join()
    load.assert_clean("throughput, one instance")
    rate1 = load.rate()
    wrk1, _ = wrk_rate(lb.url, kind, cases, workdir)
    print("cluster: throughput through haproxy on %d cores, threads per instance %d:"
          % (os.cpu_count(), instances[0].threads))
    print("cluster:   Python client (%d threads, %d checked requests): three instances "
          "%.0f req/s (%.0f in phase 1), one instance %.0f req/s"
          % (CONCURRENCY, n4, rate3b, rate3, rate1))
    if wrk3 is not None:
        print("cluster:   wrk (%s): three instances %.0f req/s, one instance %.0f req/s"
              % (wrk_cmd, wrk3, wrk1))

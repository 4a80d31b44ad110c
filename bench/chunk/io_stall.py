#!/usr/bin/env python3
"""io_stall.py — does tokenizing a long document hold the I/O thread?

Starts attnserve (the binary given) twice per round, interleaved: with one
codec worker and with one per core (codec_workers; decoding never runs on
libmicrohttpd's I/O thread, which answers /health). In each, a prober
sends GET /health back to back on one keep-alive connection while one client sends a 1 MB document:

- plain: POST /embed {"inputs": doc, "truncate": true}: the tokenizer reads
  the whole megabyte to count it, the forward is one 256-token window;
- chunked: POST /v1/embeddings with "chunking": the whole document is cut
  into chunks (tokenized, then every chunk again alone). The client gives up
  after --chunked-window seconds (the forward of every chunk would take
  minutes on a small machine), which cancels the rest; the probes of that
  window are the ones counted.

Prints, per variant and case, the /health latency (median, p99, max, in ms)
over the probes sent while the document was being handled, and the medians
over the rounds. Timings depend on the machine's load: run it with the
machine otherwise quiet, and quote `uptime` with the numbers.

    python3 bench/chunk/io_stall.py build/attnserve [--rounds 3]
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import http.client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def document(size, seed=7):
    rng = random.Random(seed)
    words = ("the service users process documents and every client writes its own splitter "
             "vector text offsets window model tokens batch queue answer request thread "
             "latency health long short sentence paragraph").split()
    out, n = [], 0
    while n < size:
        sent = " ".join(rng.choice(words) for _ in range(rng.randint(6, 20))).capitalize() + ". "
        out.append(sent)
        n += len(sent)
    return "".join(out)[:size]


class Server:
    def __init__(self, binary, workdir, **settings):
        self.port = free_port()
        cfg = {"host": "127.0.0.1", "port": self.port, "model": MODEL, "threads": 2,
               "max_body_bytes": 4 << 20, "request_timeout_ms": 600000, "log_level": "warn"}
        cfg.update(settings)
        path = os.path.join(workdir, "io-stall-%d.json" % self.port)
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.log = open(path + ".log", "w")
        self.proc = subprocess.Popen([binary, "--config", path], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        end = time.time() + 60
        while time.time() < end:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                c.request("GET", "/ready")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("attnserve did not become ready")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def probe(port, stop, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop.is_set():
        t0 = time.perf_counter()
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        out.append((t0, (time.perf_counter() - t0) * 1e3))
        time.sleep(0.002)


def run_case(port, case, doc, window):
    lat = []
    stop = threading.Event()
    th = threading.Thread(target=probe, args=(port, stop, lat))
    th.start()
    time.sleep(0.3)  # the prober's connection is up and idle-fast
    base = len(lat)
    if case == "plain":
        body = json.dumps({"inputs": doc, "truncate": True})
        path, timeout = "/embed", 600
    else:
        body = json.dumps({"input": doc, "chunking": {"max_tokens": 256}})
        path, timeout = "/v1/embeddings", window
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    status = None
    try:
        c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        status = r.status
    except socket.timeout:
        status = "gave up after %ss" % window
    c.close()
    t1 = time.perf_counter()
    stop.set()
    th.join()
    during = [ms for t, ms in lat[base:] if t0 <= t <= t1]
    return status, t1 - t0, during


def summary(xs):
    xs = sorted(xs)
    return {"n": len(xs), "p50": statistics.median(xs),
            "p99": xs[min(len(xs) - 1, int(0.99 * len(xs)))], "max": xs[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--chunked-window", type=float, default=4.0)
    args = ap.parse_args()
    doc = document(args.size)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("document: %d bytes" % len(doc.encode()))
    variants = {"one worker": {"codec_workers": 1},
                "per core": {"codec_workers": 0}}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for name, settings in variants.items():
                s = Server(args.binary, tmp, **settings)
                try:
                    for case in ("plain", "chunked"):
                        status, secs, during = run_case(s.port, case, doc, args.chunked_window)
                        st = summary(during) if during else {"n": 0}
                        results.setdefault((name, case), []).append(st)
                        print("round %d %-7s %-7s status %s %.2fs  /health ms: %s" % (
                            rnd, name, case, status, secs,
                            " ".join("%s=%.2f" % (k, v) if isinstance(v, float) else
                                     "%s=%s" % (k, v) for k, v in st.items())))
                finally:
                    s.stop()
    print("\nmedians over %d rounds (/health latency while the document is handled, ms):"
          % args.rounds)
    for (name, case), sts in sorted(results.items()):
        ok = [x for x in sts if x["n"]]
        if not ok:
            continue
        print("  %-7s %-7s p50 %.2f  p99 %.2f  max %.2f  (probes per round %d)" % (
            name, case, statistics.median(x["p50"] for x in ok),
            statistics.median(x["p99"] for x in ok), statistics.median(x["max"] for x in ok),
            statistics.median(x["n"] for x in ok)))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""io_stall.py — does tokenizing a large rerank hold the I/O thread?

Starts attnserve (each binary given, interleaved per round) on the tiny
XLM-R cross-encoder (tests/golden/xlmr-cls-tiny, a Unigram tokenizer) with
one codec worker and with one per core (codec_workers; decoding never runs on
libmicrohttpd's I/O thread, which answers /health). A prober sends
GET /health back to back on one keep-alive connection while one client
sends POST /rerank with a --query-kb query and --texts short documents (TEI's
body, truncation on: every pair is cut to the model's 64 tokens, but each text is read whole).

Prints, per binary and variant, the rerank's time and the /health latency
(median, p99, max, ms) over the probes sent while the rerank was handled,
and the medians over the rounds. Quote `uptime` with the numbers.

    python3 bench/score/io_stall.py build/attnserve [OLD_BINARY ...] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import http.client
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chunk"))
from io_stall import ROOT, Server, document, probe, summary  # noqa: E402

MODEL = os.path.join(ROOT, "tests", "golden", "xlmr-cls-tiny")


def run(port, body):
    lat = []
    stop = threading.Event()
    th = threading.Thread(target=probe, args=(port, stop, lat))
    th.start()
    time.sleep(0.3)
    base = len(lat)
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/rerank", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    t1 = time.perf_counter()
    stop.set()
    th.join()
    return r.status, t1 - t0, [ms for t, ms in lat[base:] if t0 <= t <= t1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--query-kb", type=int, default=200)
    ap.add_argument("--texts", type=int, default=300)
    args = ap.parse_args()
    query = document(args.query_kb * 1024)
    texts = [document(200, seed=i) for i in range(args.texts)]
    body = json.dumps({"query": query, "texts": texts, "truncate": True})
    up = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa
    print("uptime:", up())
    print("load: POST /rerank, query %d bytes, %d texts of 200 bytes, body %d bytes" % (
        len(query), len(texts), len(body)))
    variants = {"one worker": {"codec_workers": 1},
                "per core": {"codec_workers": 0}}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for b in args.binaries:
                for name, settings in variants.items():
                    s = Server(b, tmp, model=MODEL, max_inputs_per_request=max(args.texts, 1),
                               **settings)
                    try:
                        status, secs, during = run(s.port, body)
                    finally:
                        s.stop()
                    st = summary(during) if during else {"n": 0}
                    results.setdefault((b, name), []).append((secs, st))
                    print("round %d %s %-7s status %s %.2fs  /health ms: %s" % (
                        rnd, b, name, status, secs,
                        " ".join("%s=%.2f" % (k, v) if isinstance(v, float) else
                                 "%s=%s" % (k, v) for k, v in st.items())), flush=True)
    print("\nmedians over %d rounds:" % args.rounds)
    for (b, name), rs in results.items():
        ok = [st for _, st in rs if st["n"]]
        print("  %s %-7s rerank %.2fs  /health p50 %s p99 %s max %s ms (probes %s)" % (
            b, name, statistics.median(s for s, _ in rs),
            *("%.2f" % statistics.median(x[k] for x in ok) if ok else "-"
              for k in ("p50", "p99", "max")),
            statistics.median(x["n"] for x in ok) if ok else 0))
    print("uptime:", up())


if __name__ == "__main__":
    sys.exit(main())

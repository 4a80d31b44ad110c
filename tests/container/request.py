#!/usr/bin/python3
"""A real request to an attnserve at URL, with its answer checked.

POST /v1/embeddings when the server serves it (checked against the golden
embeddings computed by sentence-transformers, tests/golden/embeddings.json.gz,
when that file is there), otherwise POST /v1/attention (checked against a
softmax(QK^T/sqrt(d))V reference computed here). Prints which one ran and
exits non-zero on any failure. Also imported by tests/cluster as a library.

Usage: request.py URL
       request.py --drain-load URL SECONDS   (load while the server is stopped)
"""
import math
import os
import random
import sys
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "embeddings.json.gz")
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import golden_io  # noqa: E402  (tests/golden/golden_io.py)


class Failed(Exception):
    pass


def embeddings_served(session, url, timeout=30):
    """True when POST /v1/embeddings is a route of this server (not 404/405)."""
    r = session.post(url + "/v1/embeddings", json={"input": "probe"}, timeout=timeout)
    return r.status_code not in (404, 405, 501)


def golden_cases(n=4):
    """A few (text, embedding) pairs from the golden file, or fixed texts."""
    try:
        g = golden_io.load(GOLDEN)
        # The service refuses an empty input (400, as OpenAI and TEI do);
        # the golden corpus has one for the model tests.
        cases = [(c["text"], c["embedding"]) for c in g["mean_normalized"] if c["text"].strip()]
        # Short ones first: quick, and still the real model end to end.
        cases.sort(key=lambda c: len(c[0]))
        return cases[:n]
    except (OSError, KeyError, ValueError):
        return [("Hello", None), ("The cat sat on the mat.", None),
                ("A kitten is sitting on a rug.", None), ("Stock markets fell sharply.", None)][:n]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def check_embeddings(body, cases):
    data = body.get("data")
    if not isinstance(data, list) or len(data) != len(cases):
        raise Failed(("embeddings: expected %d items in data, got %r" % (len(cases), body))[:300])
    for i, ((text, want), item) in enumerate(zip(cases, data)):
        if item.get("index") != i:
            raise Failed("embeddings: item %d has index %r" % (i, item.get("index")))
        emb = item.get("embedding")
        if not isinstance(emb, list) or len(emb) != 384:
            raise Failed("embeddings: item %d is not a 384-vector" % i)
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in emb):
            raise Failed("embeddings: item %d has non-finite values" % i)
        norm = math.sqrt(sum(x * x for x in emb))
        if abs(norm - 1.0) > 1e-3:
            raise Failed("embeddings: item %d has norm %g, not 1" % (i, norm))
        if want is not None:
            c = cosine(emb, want)
            if c < 0.9999:
                raise Failed("embeddings: %r: cosine %.6f with the reference" % (text, c))


def embeddings_request(session, url, cases, timeout=30):
    r = session.post(url + "/v1/embeddings",
                     json={"input": [t for t, _ in cases], "model": "all-MiniLM-L6-v2"},
                     timeout=timeout)
    if r.status_code != 200:
        raise Failed("POST /v1/embeddings: %d %s" % (r.status_code, r.text[:300]))
    body = r.json()
    check_embeddings(body, cases)
    return r


def attention_case(seed, seq=5, heads=2, dim=8):
    """q, k, v as nested [seq][heads][dim] lists and the expected output."""
    rnd = random.Random(seed)
    t = lambda: [[[round(rnd.uniform(-1, 1), 4) for _ in range(dim)] for _ in range(heads)]
                 for _ in range(seq)]
    q, k, v = t(), t(), t()
    scale = 1.0 / math.sqrt(dim)
    out = [[[0.0] * dim for _ in range(heads)] for _ in range(seq)]
    for h in range(heads):
        for i in range(seq):
            s = [scale * sum(q[i][h][d] * k[j][h][d] for d in range(dim)) for j in range(seq)]
            m = max(s)
            p = [math.exp(x - m) for x in s]
            z = sum(p)
            for d in range(dim):
                out[i][h][d] = sum(p[j] * v[j][h][d] for j in range(seq)) / z
    return {"q": q, "k": k, "v": v, "causal": False}, out


def check_attention(body, want, tol=1e-4):
    got = body.get("output")
    try:
        err = max(abs(got[i][h][d] - want[i][h][d])
                  for i in range(len(want)) for h in range(len(want[0]))
                  for d in range(len(want[0][0])))
        shape_ok = (len(got) == len(want) and all(len(r) == len(want[0]) for r in got)
                    and all(len(c) == len(want[0][0]) for r in got for c in r))
    except (TypeError, IndexError, KeyError):
        raise Failed("attention: output is not a [seq][heads][dim] array: %r" % (body,))
    if not shape_ok:
        raise Failed("attention: output shape differs from the request's")
    if not err <= tol:
        raise Failed("attention: max abs error %g against the reference" % err)


def attention_request(session, url, seed, timeout=30):
    req, want = attention_case(seed)
    r = session.post(url + "/v1/attention", json=req, timeout=timeout)
    if r.status_code != 200:
        raise Failed("POST /v1/attention: %d %s" % (r.status_code, r.text[:300]))
    check_attention(r.json(), want)
    return r


def drain_load(url, seconds, threads=8):
    """Requests in flight while the server is stopped: each thread sends
    attention requests on its own keep-alive connection, as a client with a
    connection pool does, until the server answers one with a
    `Connection: close` it did not ask for (its drain has begun: the client
    goes elsewhere) or a 503, or `seconds` pass. Every answer must be 200
    with the right output or 503 (draining). A connection refused before the
    thread saw the drain is a refused request (the server stopped listening
    while clients still had no sign of it); a connection closed or reset
    without an answer is a lost one. Returns the counts."""
    import threading
    counts = {"ok": 0, "503": 0, "refused": 0, "lost": 0, "wrong": 0, "saw_drain": 0}
    errors = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(tid):
        seed = 1000 * tid
        session = requests.Session()
        while time.monotonic() < deadline:
            seed += 1
            req, want = attention_case(seed)
            try:
                r = session.post(url + "/v1/attention", json=req, timeout=30)
                if r.status_code == 200:
                    check_attention(r.json(), want)
                    key = "ok"
                elif r.status_code == 503:
                    key = "503"
                else:
                    raise Failed("status %d: %s" % (r.status_code, r.text[:200]))
            except requests.ConnectionError as e:
                refused = isinstance(getattr(e.args[0], "reason", None),
                                     requests.packages.urllib3.exceptions.NewConnectionError) \
                    or "Connection refused" in str(e)
                with lock:
                    counts["refused" if refused else "lost"] += 1
                    errors.append("seed %d: %s" % (seed, e))
                if refused:
                    return  # the listener is closed: nothing more to learn
                continue
            except (Failed, ValueError, requests.RequestException) as e:
                with lock:
                    counts["wrong"] += 1
                    errors.append("seed %d: %s" % (seed, e))
                continue
            with lock:
                counts[key] += 1
            if key == "503" or r.headers.get("Connection", "").lower() == "close":
                with lock:
                    counts["saw_drain"] += 1
                return

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts, errors


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--drain-load":
        counts, errors = drain_load(sys.argv[2].rstrip("/"), float(sys.argv[3]))
        print("load across the stop: %d answered 200 and checked, %d answered 503, %d refused, "
              "%d lost, %d wrong; %d of the client threads saw the drain (Connection: close "
              "or 503) and stopped" % (counts["ok"], counts["503"], counts["refused"],
                                      counts["lost"], counts["wrong"], counts["saw_drain"]),
              file=sys.stderr)
        for e in errors[:5]:
            print("  " + e, file=sys.stderr)
        # attnserve lingers on SIGTERM (drain_linger_ms): it keeps accepting
        # and serving, every answer with Connection: close, before its
        # listener closes, so every client learns of the drain from an answer
        # and none is refused or cut.
        ok = (counts["ok"] > 0 and counts["wrong"] == 0 and counts["lost"] == 0
              and counts["refused"] == 0)
        sys.exit(0 if ok else 1)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    url = sys.argv[1].rstrip("/")
    s = requests.Session()
    try:
        if embeddings_served(s, url):
            cases = golden_cases()
            r = embeddings_request(s, url, cases)
            ref = "golden sentence-transformers vectors" if cases[0][1] is not None else "sanity checks"
            print("real request: POST /v1/embeddings, %d inputs, checked against %s; "
                  "backend %s" % (len(cases), ref, r.headers.get("x-attention-backend")),
                  file=sys.stderr)
        else:
            r = attention_request(s, url, 1)
            print("real request: POST /v1/attention (this server has no /v1/embeddings), "
                  "checked against a reference; backend %s"
                  % r.headers.get("x-attention-backend"), file=sys.stderr)
        for h in ("x-request-id", "x-attention-backend"):
            if h not in r.headers:
                raise Failed("response lacks the %s header" % h)
    except (Failed, requests.RequestException, ValueError) as e:
        print("request.py: FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

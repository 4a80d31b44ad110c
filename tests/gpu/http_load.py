"""http_load.py URL — embeddings/s through the service's HTTP front end: a
short, bounded closed-loop load of /v1/embeddings (OpenAI's shape),
CONNECTIONS keep-alive connections each sending requests of INPUTS texts
(about 64 tokens each, MiniLM's benchmark length) for SECONDS, answers as
floats or base64 (--format). What is measured is the whole service: HTTP,
parsing, tokenization, batching, the engine and the answer's encoding.

Python's standard library only (http.client), so it runs on any python3.
The connections are spread over several processes so that the client's own
JSON and socket work is not what limits the figure: each reads the answers'
bytes and parses only its first one fully (the data count, the vector width
and, for base64, the decoded length); every answer's status is checked.
Prints one line: embeddings/s, requests, errors. Exit 1 on any error, 2 when
nothing was answered.

--probe instead waits (up to --seconds, or until the process --pid has
exited) for /ready, sends one small request and prints the x-engine,
x-precision and x-attention-backend it was answered with: exit 1 if the
service never got ready or did not answer 200."""
import argparse
import base64
import http.client
import json
import multiprocessing
import sys
import threading
import time
import urllib.parse

WORDS = ("the service batches requests from many connections into one packed forward on the "
         "device while codec workers parse tokenize and write answers for each of them in turn "
         "so that a fast engine is never hidden behind a slow front end").split()


def texts(n, seed):
    """n different texts of about 50 words (~64 tokens with [CLS] and [SEP])."""
    out = []
    for i in range(n):
        k = (seed * 7919 + i * 104729) % len(WORDS)
        out.append("%d %s" % (seed * 1000 + i, " ".join(WORDS[(k + j) % len(WORDS)]
                                                        for j in range(48))))
    return out


def worker(url, conns, inputs, fmt, seconds, dim, out):
    u = urllib.parse.urlparse(url)
    counts = {"embeddings": 0, "requests": 0, "errors": 0, "first_error": ""}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def one(c):
        body = json.dumps({"input": texts(inputs, c), "encoding_format": fmt}).encode()
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        checked = False
        while time.monotonic() < deadline:
            err = ""
            try:
                conn.request("POST", "/v1/embeddings", body,
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    err = "status %d: %s" % (r.status, data[:200])
                elif not checked:
                    err, checked = check(data, inputs, fmt, dim), True
            except (OSError, http.client.HTTPException) as e:
                err = repr(e)
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            with lock:
                counts["requests"] += 1
                if err:
                    counts["errors"] += 1
                    counts["first_error"] = counts["first_error"] or err
                else:
                    counts["embeddings"] += inputs
        conn.close()

    threads = [threading.Thread(target=one, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(counts)


def check(data, inputs, fmt, dim):
    doc = json.loads(data)
    items = doc.get("data", [])
    if len(items) != inputs:
        return "%d embeddings for %d inputs" % (len(items), inputs)
    e = items[0]["embedding"]
    n = len(base64.b64decode(e)) // 4 if fmt == "base64" else len(e)
    return "" if n == dim else "embedding of %d values, not %d" % (n, dim)


def running(pid):
    """Whether pid is alive: an exited child stays a zombie until reaped."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def probe(url, seconds, pid):
    import urllib.request
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url + "/ready", timeout=2)
            break
        except OSError:
            if pid and not running(pid):
                sys.exit("the service (pid %d) exited before it was ready" % pid)
            if time.monotonic() > deadline:
                sys.exit("not ready after %.0f s" % seconds)
            time.sleep(0.5)
    body = json.dumps({"input": ["a GPU engine behind the same contract", "hello"]}).encode()
    req = urllib.request.Request(url + "/v1/embeddings", data=body,
                                 headers={"Content-Type": "application/json"})
    r = urllib.request.urlopen(req, timeout=60)
    print("status %d, x-engine: %s, x-precision: %s, x-attention-backend: %s" % (
        r.status, r.headers.get("x-engine"), r.headers.get("x-precision"),
        r.headers.get("x-attention-backend")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--format", choices=("float", "base64"), default="float")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--pid", type=int, default=0)
    a = ap.parse_args()
    if a.probe:
        probe(a.url, a.seconds, a.pid)
        return
    procs = max(1, min(a.processes, a.connections))
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=worker, args=(
        a.url, list(range(p, a.connections, procs)), a.inputs, a.format, a.seconds, a.dim, q))
        for p in range(procs)]
    t0 = time.monotonic()
    for p in ps:
        p.start()
    results = [q.get(timeout=a.seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    took = time.monotonic() - t0
    total = {k: sum(r[k] for r in results) for k in ("embeddings", "requests", "errors")}
    first = next((r["first_error"] for r in results if r["first_error"]), "")
    print("http %s: %.0f embeddings/s (%d connections x %d inputs, %.1f s: %d requests, %d "
          "errors)%s" % (a.format, total["embeddings"] / took, a.connections, a.inputs, took,
                         total["requests"], total["errors"],
                         "; first error: " + first if first else ""))
    sys.exit(2 if total["embeddings"] == 0 else 1 if total["errors"] else 0)


if __name__ == "__main__":
    main()

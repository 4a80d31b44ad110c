#!/usr/bin/env python3
"""openloop.py — open-loop HTTP load at a fixed mean rate, latency percentiles.

Requests are sent at Poisson arrival times (mean RATE per second) for DURATION
seconds over a pool of keep-alive connections, whatever the server's answers
do, so a slow answer cannot hold back the next request (closed-loop tools such
as wrk measure less queueing than real clients cause). Each latency runs from
the request's scheduled send time to its answer, so time spent waiting for a
free connection counts too. Standard library only; loopback use.

  openloop.py --url http://127.0.0.1:8080/embed --body body.json --rate 100 --duration 5

Prints one JSON object: sent, ok, errors, achieved rate, p50/p90/p99/max ms,
and p50/p99 of the server's own time (x-queue-time-ms + x-inference-time-ms).
"""
import argparse
import http.client
import json
import queue
import random
import threading
import time
import urllib.parse


def percentile(sorted_v, p):
    if not sorted_v:
        return float("nan")
    i = min(len(sorted_v) - 1, max(0, int(round(p * (len(sorted_v) - 1)))))
    return sorted_v[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--body", required=True, help="file with the JSON request body")
    ap.add_argument("--rate", type=float, required=True, help="mean requests per second")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--conns", type=int, default=32, help="keep-alive connections (threads)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    if u.hostname not in ("127.0.0.1", "::1", "localhost"):
        raise SystemExit("openloop.py: loopback only")
    body = open(a.body, "rb").read()
    headers = {"Content-Type": "application/json"}
    jobs = queue.Queue()
    lock = threading.Lock()
    lat, srv, errors = [], [], [0]

    def worker():
        conn = None
        while True:
            t = jobs.get()
            if t is None:
                return
            ok = False
            server_ms = float("nan")
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
                conn.request("POST", u.path, body, headers)
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
                # The server's own share: queued plus computing, as it
                # timed them (the rest is HTTP, tokenization and this client).
                server_ms = (float(r.getheader("x-queue-time-ms", "nan")) +
                             float(r.getheader("x-inference-time-ms", "nan")))
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
            done = time.perf_counter()
            with lock:
                if ok:
                    lat.append(done - t)
                    srv.append(server_ms)
                else:
                    errors[0] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(a.conns)]
    for th in threads:
        th.start()
    rng = random.Random(a.seed)
    start = time.perf_counter() + 0.05
    end = start + a.duration
    t = start
    sent = 0
    while t < end:
        delay = t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        jobs.put(t)
        sent += 1
        t += rng.expovariate(a.rate)
    for _ in threads:
        jobs.put(None)
    for th in threads:
        th.join(timeout=60)
    v = sorted(x * 1e3 for x in lat)
    sv = sorted(x for x in srv if x == x)
    print(json.dumps({
        "sent": sent, "ok": len(v), "errors": errors[0],
        "rate": round(len(v) / a.duration, 1),
        "p50_ms": round(percentile(v, 0.50), 3), "p90_ms": round(percentile(v, 0.90), 3),
        "p99_ms": round(percentile(v, 0.99), 3), "max_ms": round(v[-1], 3) if v else None,
        "server_p50_ms": round(percentile(sv, 0.50), 3),
        "server_p99_ms": round(percentile(sv, 0.99), 3),
    }))


if __name__ == "__main__":
    main()

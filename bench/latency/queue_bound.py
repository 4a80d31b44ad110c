#!/usr/bin/env python3
"""queue_bound.py — the latency no batching scheduler can beat with this engine.

Given the engine's forward time for a batch of k requests, T(k) (measured by
bench_latency --batch k), simulates Poisson arrivals at RATE per second served
as the service's scheduler serves them with max_wait_us 0: a request that
finds the engine idle starts at once, the ones that arrive during a forward
make up the next batch (at most MAX_BATCH). Each response time is its wait in
the queue plus the forward of its batch; nothing else (no HTTP, no
tokenization, no thread wake-ups) is counted, so the simulated p99 is a lower
bound for the server's own queue + inference time at that rate, and its ratio
to T(1) the best "p99 / single-request" any scheduler of this kind reaches.

Why a simulation and not a formula: a forward of k short requests costs much
less than k forwards of one (the weights are read once per batch), so the
queue is not M/D/1; its p99 depends on the whole T(k) curve.

  queue_bound.py --curve 1:2570,2:3100,4:4200,8:6900 --rate 220
  queue_bound.py --curve-jsonl curve.jsonl --rate 220 --rate 110

--curve-jsonl reads bench_latency --json lines (batch, p50_us). T(k) between
measured batch sizes is interpolated linearly, past the largest extrapolated
at its cost per request. Prints one JSON object per rate: the rate, the
utilisation (share of time the engine is busy), the mean batch, p50/p99 of
the response time in ms and p99 / T(1).
"""
import argparse
import json
import random


def load_curve(a):
    pts = {}
    if a.curve:
        for item in a.curve.split(","):
            k, us = item.split(":")
            pts[int(k)] = float(us)
    if a.curve_jsonl:
        for line in open(a.curve_jsonl):
            if line.strip():
                o = json.loads(line)
                pts[int(o["batch"])] = float(o["p50_us"])
    if 1 not in pts:
        raise SystemExit("queue_bound.py: the curve needs T(1)")
    return sorted(pts.items())


def make_cost(pts):
    def cost(k):  # seconds for a batch of k
        for (k0, t0), (k1, t1) in zip(pts, pts[1:]):
            if k0 <= k <= k1:
                return (t0 + (t1 - t0) * (k - k0) / (k1 - k0)) * 1e-6
        kl, tl = pts[-1]
        return tl * k / kl * 1e-6
    return cost


def percentile(sorted_v, p):
    i = min(len(sorted_v) - 1, max(0, int(round(p * (len(sorted_v) - 1)))))
    return sorted_v[i]


def simulate(cost, rate, n, max_batch, seed):
    rng = random.Random(seed)
    t = 0.0
    arrivals = []
    for _ in range(n):
        t += rng.expovariate(rate)
        arrivals.append(t)
    resp, batches, busy = [], [], 0.0
    free_at, i = 0.0, 0
    while i < n:
        # The engine starts when it is free and a request is there.
        start = max(free_at, arrivals[i])
        j = i
        while j < n and j - i < max_batch and arrivals[j] <= start:
            j += 1
        dur = cost(j - i)
        end = start + dur
        resp.extend(end - arrivals[r] for r in range(i, j))
        batches.append(j - i)
        busy += dur
        free_at, i = end, j
    resp.sort()
    return {
        "rate": rate,
        "utilisation": round(busy / free_at, 3),
        "mean_batch": round(sum(batches) / len(batches), 2),
        "mean_ms": round(sum(resp) / len(resp) * 1e3, 3),
        "p50_ms": round(percentile(resp, 0.50) * 1e3, 3),
        "p99_ms": round(percentile(resp, 0.99) * 1e3, 3),
        "p99_over_t1": round(percentile(resp, 0.99) / cost(1), 2),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--curve", help="k:us,k:us,... forward time of a batch of k requests")
    ap.add_argument("--curve-jsonl", help="bench_latency --json lines")
    ap.add_argument("--rate", type=float, action="append", required=True,
                    help="arrivals per second (repeatable)")
    ap.add_argument("--requests", type=int, default=200000, help="simulated arrivals")
    ap.add_argument("--max-batch", type=int, default=64, help="the service's max_batch_requests")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    pts = load_curve(a)
    cost = make_cost(pts)
    for rate in a.rate:
        out = simulate(cost, rate, a.requests, a.max_batch, a.seed)
        out["max_rate"] = round(max(k / cost(k) for k in range(1, a.max_batch + 1)), 1)
        print(json.dumps(out))


if __name__ == "__main__":
    main()

"""The benchmark's own arithmetic: bench/latency/queue_bound.py, whose bound
the latency benchmark quotes against the server, checked against queueing
theory where theory has a closed form."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUEUE_BOUND = os.path.join(ROOT, "bench", "latency", "queue_bound.py")


def bound(*args):
    out = subprocess.run([sys.executable, QUEUE_BOUND, *args], check=True,
                         capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_one_request_per_batch_is_md1():
    # Batches of one request at a fixed 2 ms: an M/D/1 queue, whose mean wait
    # is rho·D / (2(1 - rho)) (Pollaczek-Khinchine). At rho 0.5 the mean
    # response is 1.5 D = 3 ms; 200k arrivals put the estimate within 2 %.
    # The p99 of M/D/1 at rho 0.5 is about 4.3 D (the tail decays as
    # exp(-theta t) with 0.5 (e^(theta D) - 1) = theta D, theta D = 1.256).
    o, = bound("--curve", "1:2000,2:4000", "--max-batch", "1", "--rate", "250",
               "--requests", "200000")
    assert abs(o["utilisation"] - 0.5) < 0.01, o
    assert o["mean_batch"] == 1.0
    assert 2000 * 1.5 * 0.98 < o["mean_ms"] * 1000 < 2000 * 1.5 * 1.02, o
    assert 4.0 < o["p99_over_t1"] < 4.6, o
    assert o["max_rate"] == 500.0


def test_batching_that_amortises_lowers_the_tail():
    # The same arrivals with a batch of any size costing one request's time:
    # nothing waits for more than one forward, so the p99 is under 2 T(1).
    flat, = bound("--curve", "1:2000,64:2000", "--rate", "250")
    assert flat["p99_ms"] <= 4.0 + 1e-9, flat
    linear, = bound("--curve", "1:2000,64:128000", "--rate", "250")
    assert linear["p99_ms"] > 2 * flat["p99_ms"], (flat, linear)

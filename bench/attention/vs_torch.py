#!/usr/bin/env python3
"""vs_torch.py — attnserve's fused attention against PyTorch's
scaled_dot_product_attention on the same shapes (make bench-attention).

For each shape and head dimension in turn, runs bench_attention (fused only,
fp32) and right after it torch.nn.functional.scaled_dot_product_attention in
fp32 on the CPU with the same thread count, so that the load of a shared
machine lands on both sides of each ratio. PyTorch gets its natural layout,
(batch, heads, seq, head_dim) contiguous, and is_causal for causal shapes;
it picks its own kernel (the CPU flash-attention one for fp32). The time is
the median of the reps after one warm-up call, the same --reps/--budget rule
as bench_attention. Prints a Markdown table with fused / sdpa and the target
(fused >= 1.5x) marked met or not met; with --json, one JSON object per
case instead.

Runs in the benchmark venv that bench/embed/peers.py makes (torch); when it
does not exist, says so and exits 0 without a comparison.

    vs_torch.py --bin build/bench_attention [--shapes 32x128,8x512,1x2048,1x8192c]
        [--dims 32,64] [--heads 12] [--threads 2] [--reps 5] [--budget 2] [--json]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = 1.5


def venv_python():
    sys.path.insert(0, os.path.join(HERE, "..", "embed"))
    import peers  # noqa: E402  (the venv's location is defined there)
    return os.path.join(peers.default_venv(), "bin", "python"), peers.default_venv()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--shapes", default="32x128,8x512,1x2048,1x8192c")
    p.add_argument("--dims", default="32,64")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--budget", type=float, default=2.0)
    p.add_argument("--json", action="store_true")
    return p.parse_args()


def time_sdpa(batch, seq, causal, heads, dim, reps, budget):
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(3))
    with torch.inference_mode():
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        times, wall = [], 0.0
        while len(times) < reps and (len(times) < 3 or wall < budget):
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            times.append(time.perf_counter() - t0)
            wall += times[-1]
    times.sort()
    n = len(times)
    return (times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])) * 1e3, n


def main():
    a = parse_args()
    py, venv = venv_python()
    if os.path.realpath(sys.prefix) != os.path.realpath(venv):
        if not os.path.exists(py):
            print(f"bench-attention: no comparison with PyTorch: its venv {venv} does not exist "
                  "(make bench-embed makes it)")
            return 0
        os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])

    import torch

    torch.set_num_threads(a.threads)
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    rows = []
    if not a.json:
        print(f"fused vs PyTorch {torch.__version__} scaled_dot_product_attention, fp32, "
              f"{a.threads} threads, {a.heads} heads, interleaved shape by shape; load average "
              f"at start {' '.join(open('/proc/loadavg').read().split()[:3])}")
        print()
        print("| shape | head_dim | fused ms | sdpa ms | fused / sdpa | target ≥ 1.5× |")
        print("|---|---:|---:|---:|---:|---|")
    for shape in a.shapes.split(","):
        causal = shape.endswith("c")
        batch, seq = (int(x) for x in shape.rstrip("c").split("x"))
        for dim in (int(d) for d in a.dims.split(",")):
            out = subprocess.run(
                [a.bin, "--json", "--backends", "fused", "--shapes", shape, "--dims", str(dim),
                 "--heads", str(a.heads), "--threads", str(a.threads), "--reps", str(a.reps),
                 "--budget", str(a.budget)], env=env, capture_output=True, text=True, check=True)
            fused = [json.loads(line) for line in out.stdout.splitlines()
                     if line.startswith("{") and '"backend"' in line]
            if not fused:
                print(f"bench_attention printed no case for {shape} D={dim}", file=sys.stderr)
                return 1
            f_ms = fused[0]["ms"]
            s_ms, n = time_sdpa(batch, seq, causal, a.heads, dim, a.reps, a.budget)
            r = s_ms / f_ms
            row = {"shape": shape, "head_dim": dim, "heads": a.heads, "threads": a.threads,
                   "fused_ms": f_ms, "sdpa_ms": round(s_ms, 4), "ratio": round(r, 3),
                   "fused_cpu_pct": fused[0]["cpu_pct"], "sdpa_reps": n}
            rows.append(row)
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"| {shape} | {dim} | {f_ms:.3f} | {s_ms:.3f} | {r:.2f}× | "
                      f"{'met' if r >= TARGET else 'NOT met'} |", flush=True)
    if not a.json and rows:
        met = sum(1 for r in rows if r["ratio"] >= TARGET)
        lo = min(rows, key=lambda r: r["ratio"])
        print()
        print(f"fused ≥ {TARGET}× sdpa: met on {met} of {len(rows)} shapes; lowest "
              f"{lo['ratio']:.2f}× at {lo['shape']} D={lo['head_dim']}; load average at end "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

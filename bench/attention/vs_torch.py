#!/usr/bin/env python3
"""vs_torch.py — attnserve's fused attention against PyTorch's
scaled_dot_product_attention on the same shapes (make bench-attention), and
its bf16 backend against SDPA in bf16.

For each shape and head dimension in turn, runs bench_attention (fused, and
bf16 where the CPU offers it) and right after it
torch.nn.functional.scaled_dot_product_attention on the CPU with the same
thread count, in fp32 and, beside the bf16 backend, on bf16 tensors, so that
the load of a shared machine lands on both sides of each ratio. The bf16
backend takes fp32 inputs and returns fp32 (it converts per tile, inside the
timed call); SDPA bf16 gets tensors already in bf16, so its conversions are
not timed. PyTorch gets its natural layout,
(batch, heads, seq, head_dim) contiguous, and is_causal for causal shapes;
it picks its own kernel (the CPU flash-attention one for fp32). The time is
the median of the reps after one warm-up call, the same --reps/--budget rule
as bench_attention. Prints a Markdown table with fused / sdpa and the target
(fused >= 1.5x) marked met or not met, and bf16 / sdpa-bf16; with --json,
one JSON object per case instead.

Beside each ratio, both sides as a share of the FP32 FMA peak that
bench_attention measured in the same call (register-only loop, same
threads), and the share a kernel would need to reach 1.5x this SDPA: 1.5 x
SDPA's share. Where that is near or above 100 %, the target is out of reach
of any fp32 kernel on this CPU, whatever its algorithm: the FLOP count is the
same 4·L²·D per head (half when causal) on both sides, and the softmax's
exp2 and rescaling, which are not counted, run on the same vector units.

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


def time_sdpa(batch, seq, causal, heads, dim, reps, budget, dtype=None):
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(3))
    if dtype is not None:
        q, k, v = (x.to(dtype) for x in (q, k, v))
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
        print(f"fused vs PyTorch {torch.__version__} scaled_dot_product_attention, fp32 (and "
              f"bf16 vs SDPA on bf16 tensors), {a.threads} threads, {a.heads} heads, interleaved "
              f"shape by shape; load average at start "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
        print()
        print("| shape | head_dim | fused ms | sdpa ms | fused / sdpa | target ≥ 1.5× "
              "| fused % of peak | sdpa % of peak | 1.5× sdpa needs % of peak "
              "| bf16 ms | sdpa bf16 ms | bf16 / sdpa bf16 | bf16 / fused |")
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for shape in a.shapes.split(","):
        causal = shape.endswith("c")
        batch, seq = (int(x) for x in shape.rstrip("c").split("x"))
        for dim in (int(d) for d in a.dims.split(",")):
            out = subprocess.run(
                [a.bin, "--json", "--backends", "fused,bf16", "--shapes", shape, "--dims", str(dim),
                 "--heads", str(a.heads), "--threads", str(a.threads), "--reps", str(a.reps),
                 "--budget", str(a.budget)], env=env, capture_output=True, text=True, check=True)
            cases = [json.loads(line) for line in out.stdout.splitlines()
                     if line.startswith("{") and '"backend"' in line]
            fused = [c for c in cases if c["backend"] == "fused"]
            bf16 = [c for c in cases if c["backend"] == "bf16"]
            if not fused:
                print(f"bench_attention printed no case for {shape} D={dim}", file=sys.stderr)
                return 1
            f_ms = fused[0]["ms"]
            s_ms, n = time_sdpa(batch, seq, causal, a.heads, dim, a.reps, a.budget)
            r = s_ms / f_ms
            # One call's GFLOP, as bench_attention counts it, over SDPA's time:
            # both sides against the peak measured in the same bench_attention.
            peak = fused[0]["peak_gflops"]
            sdpa_pct = 100.0 * fused[0]["gflops"] * f_ms / s_ms / peak if peak > 0 else 0.0
            row = {"shape": shape, "head_dim": dim, "heads": a.heads, "threads": a.threads,
                   "fused_ms": f_ms, "sdpa_ms": round(s_ms, 4), "ratio": round(r, 3),
                   "fused_cpu_pct": fused[0]["cpu_pct"], "sdpa_reps": n,
                   "peak_gflops": peak, "fused_pct_peak": fused[0]["pct_peak"],
                   "sdpa_pct_peak": round(sdpa_pct, 1),
                   "target_pct_peak": round(TARGET * sdpa_pct, 1)}
            if bf16:
                b_ms = bf16[0]["ms"]
                sb_ms, _ = time_sdpa(batch, seq, causal, a.heads, dim, a.reps, a.budget,
                                     torch.bfloat16)
                row.update({"bf16_ms": b_ms, "sdpa_bf16_ms": round(sb_ms, 4),
                            "bf16_ratio": round(sb_ms / b_ms, 3),
                            "bf16_over_fused": round(f_ms / b_ms, 3),
                            "bf16_pct_peak": bf16[0]["pct_peak"]})
            rows.append(row)
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                tail = (f"{row['bf16_ms']:.3f} | {row['sdpa_bf16_ms']:.3f} | "
                        f"{row['bf16_ratio']:.2f}× | {row['bf16_over_fused']:.2f}× |"
                        if bf16 else "— | — | — | — |")
                print(f"| {shape} | {dim} | {f_ms:.3f} | {s_ms:.3f} | {r:.2f}× | "
                      f"{'met' if r >= TARGET else 'NOT met'} | {row['fused_pct_peak']:.0f} % | "
                      f"{row['sdpa_pct_peak']:.0f} % | {row['target_pct_peak']:.0f} % | {tail}",
                      flush=True)
    if not a.json and rows:
        met = sum(1 for r in rows if r["ratio"] >= TARGET)
        lo = min(rows, key=lambda r: r["ratio"])
        print()
        print(f"fused ≥ {TARGET}× sdpa: met on {met} of {len(rows)} shapes; lowest "
              f"{lo['ratio']:.2f}× at {lo['shape']} D={lo['head_dim']}; load average at end "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
        missed = [r for r in rows if r["ratio"] < TARGET]
        if missed:
            need = sorted(r["target_pct_peak"] for r in missed)
            print(f"where missed, 1.5× this sdpa needs {need[0]:.0f}–{need[-1]:.0f} % of the "
                  f"FP32 FMA peak; fused reached "
                  f"{min(r['fused_pct_peak'] for r in missed):.0f}–"
                  f"{max(r['fused_pct_peak'] for r in missed):.0f} %")
        b = [r for r in rows if "bf16_ratio" in r]
        if b:
            print(f"bf16 / sdpa bf16: {min(r['bf16_ratio'] for r in b):.2f}× to "
                  f"{max(r['bf16_ratio'] for r in b):.2f}×; bf16 / fused "
                  f"{min(r['bf16_over_fused'] for r in b):.2f}× to "
                  f"{max(r['bf16_over_fused'] for r in b):.2f}×")
        else:
            print("bf16: not offered on this CPU (no AVX512_BF16), not compared")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""report.py — the side-by-side table and chart of make bench-embed.

Reads the JSON lines of bench_embed (attnserve) and peers.py, prints a
Markdown table of inputs/s per input length and batch size — attnserve fused
and naive, ONNX Runtime, PyTorch, and fused's ratio to each peer — then the
GEMM figures, and writes a grouped bar chart (matplotlib if importable, else
gnuplot if installed, else no chart, said so).

    report.py [--chart PNG] [--note TEXT] attnserve.jsonl [peers.jsonl]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ENGINES = [("fused", "attnserve fused"), ("naive", "attnserve naive"),
           ("onnxruntime", "ONNX Runtime"), ("pytorch", "PyTorch (sentence-transformers)")]


def load(paths):
    cases, meta = {}, []
    for path in paths:
        if not os.path.exists(path):
            continue
        for line in open(path):
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("kind") == "case":
                cases[(r["backend"], r["tokens_per_input"], r["batch"])] = r
            else:
                meta.append(r)
    return cases, meta


def fmt(v):
    return "–" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")


def ratio(a, b):
    return "–" if a is None or b is None else f"{a / b:.2f}×"


def table(cases, meta):
    lengths = sorted({k[1] for k in cases})
    batches = sorted({k[2] for k in cases})
    ips = {k: r["inputs_per_s"] for k, r in cases.items()}
    names = {k[1]: r["input"] for k, r in cases.items()}
    peaks = [m for m in meta if m.get("kind") == "peak"]
    if peaks:
        wall = [m["peak_gflops"] for m in peaks]
        cpu = [m.get("peak_gflops_cpu", 0) for m in peaks]
        print(f"- FP32 FMA peak ({peaks[0]['simd']}, {peaks[0]['threads']} threads), measured "
              f"{len(peaks)} times, before each cell: {min(wall):.1f} to {max(wall):.1f} GFLOP/s "
              f"wall clock, {min(cpu):.1f} to {max(cpu):.1f} per CPU-second x threads")
    for line in dict.fromkeys(f"- {m['backend']}: {m['version']}" for m in meta
                              if m.get("kind") == "peer"):
        print(line)
    cos = [m["min_cosine"] for m in meta if m.get("kind") == "agreement"]
    if cos:
        print(f"- the peers' embeddings agree: min cosine {min(cos)} (4 inputs per check)")
    print()
    print("| input | batch | " + " | ".join(n for _, n in ENGINES) +
          " | fused / ORT | fused / PyTorch | cpu% fused / ORT / PyTorch |")
    print("|---|---:|" + "---:|" * (len(ENGINES) + 3))
    for t in lengths:
        for b in batches:
            v = {e: ips.get((e, t, b)) for e, _ in ENGINES}
            cpu = "/".join(f"{cases[(e, t, b)]['cpu_pct']:.0f}" if (e, t, b) in cases else "–"
                           for e in ("fused", "onnxruntime", "pytorch"))
            print(f"| {names[t]} ({t}) | {b} | " + " | ".join(fmt(v[e]) for e, _ in ENGINES) +
                  f" | {ratio(v['fused'], v['onnxruntime'])} | {ratio(v['fused'], v['pytorch'])}"
                  f" | {cpu} |")
    print()
    print("GEMM (standalone sgemm on the model's shapes, same pool split as bert.c), "
          "attnserve fused:")
    print()
    print("| input | batch | tokens | GEMM GFLOP/s | % of FP32 peak | % of peak per CPU-second "
          "| GEMM share of the forward | attention share | tokenizer share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in lengths:
        for b in batches:
            r = cases.get(("fused", t, b))
            if r and r.get("gemm_ms"):
                print(f"| {names[t]} ({t}) | {b} | {t * b} | {r['gemm_gflops']:.1f} | "
                      f"{r['gemm_pct_peak']:.0f}% | {r.get('gemm_pct_peak_cpu', 0):.0f}% | "
                      f"{r['gemm_pct']:.0f}% | {r['attn_pct']:.0f}% | {r['tok_pct']:.1f}% |")
    summary(cases, lengths, batches)


def summary(cases, lengths, batches):
    """The issue's two targets, as measured in this run."""
    big = [(t, b) for t in lengths for b in batches if b >= 32]
    r_ort = [cases[("fused", t, b)]["inputs_per_s"] / cases[("onnxruntime", t, b)]["inputs_per_s"]
             for t, b in big if ("fused", t, b) in cases and ("onnxruntime", t, b) in cases]
    print()
    if r_ort:
        print(f"Target 1 (batch >= 32: attnserve fused >= ONNX Runtime): fused / ORT from "
              f"{min(r_ort):.2f}x to {max(r_ort):.2f}x -> "
              f"{'met' if min(r_ort) >= 1.0 else 'not met'} on all {len(r_ort)} cases")
    # Per CPU-second: the wall-clock peak and GEMM are measured seconds apart,
    # so on a shared machine their wall ratio can even pass 100%.
    g = [cases[("fused", t, b)]["gemm_pct_peak_cpu"] for t, b in big
         if cases.get(("fused", t, b), {}).get("gemm_ms")]
    if g:
        print(f"Target 2 (batch >= 32: GEMM >= 60% of FP32 peak, per CPU-second): {min(g):.0f}% "
              f"to {max(g):.0f}% -> {'met' if min(g) >= 60 else 'not met'}")


def series(cases):
    lengths = sorted({k[1] for k in cases})
    batches = sorted({k[2] for k in cases})
    names = {k[1]: r["input"] for k, r in cases.items()}
    present = [(e, n) for e, n in ENGINES if any(k[0] == e for k in cases)]
    return lengths, batches, names, present


def chart_matplotlib(cases, path, note):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths, batches, names, present = series(cases)
    fig, axes = plt.subplots(1, len(lengths), figsize=(5 * len(lengths), 4.5), squeeze=False)
    width = 0.8 / len(present)
    for ax, t in zip(axes[0], lengths):
        for i, (e, label) in enumerate(present):
            ys = [cases[(e, t, b)]["inputs_per_s"] if (e, t, b) in cases else 0 for b in batches]
            xs = [j + (i - (len(present) - 1) / 2) * width for j in range(len(batches))]
            ax.bar(xs, ys, width, label=label)
        ax.set_xticks(range(len(batches)))
        ax.set_xticklabels([str(b) for b in batches])
        ax.set_xlabel("batch size (inputs)")
        ax.set_title(f"{names[t]} inputs ({t} tokens)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("inputs/s (higher is better)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("all-MiniLM-L6-v2 embeddings, in-process throughput" + (f"\n{note}" if note else ""),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def chart_gnuplot(cases, path, note):
    lengths, batches, names, present = series(cases)
    with tempfile.TemporaryDirectory() as d:
        plots = []
        for t in lengths:
            data = os.path.join(d, f"{t}.dat")
            with open(data, "w") as f:
                for b in batches:
                    f.write(f"{b} " + " ".join(str(cases[(e, t, b)]["inputs_per_s"])
                                               if (e, t, b) in cases else "0"
                                               for e, _ in present) + "\n")
            cols = ", ".join(f"'{data}' using {i + 2}:xtic(1) title '{n}'"
                             for i, (_, n) in enumerate(present))
            plots.append(f"set title '{names[t]} inputs ({t} tokens)'; plot {cols}")
        script = (f"set terminal pngcairo size {500 * len(lengths)},450; set output '{path}';"
                  "set style data histograms; set style fill solid; set key top left;"
                  "set ylabel 'inputs/s'; set xlabel 'batch size';"
                  f"set multiplot layout 1,{len(lengths)} title '{note}';" +
                  ";".join(plots) + "; unset multiplot")
        subprocess.run(["gnuplot", "-e", script], check=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--chart")
    p.add_argument("--note", default="")
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    cases, meta = load(a.files)
    if not cases:
        print("no results", file=sys.stderr)
        return 1
    if a.note:
        print(f"- {a.note}")
    table(cases, meta)
    if a.chart:
        try:
            chart_matplotlib(cases, a.chart, a.note)
        except ImportError:
            if not shutil.which("gnuplot"):
                print(f"\nno chart: neither matplotlib nor gnuplot is installed", file=sys.stderr)
                return 0
            chart_gnuplot(cases, a.chart, a.note)
        print(f"\nchart: {a.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
